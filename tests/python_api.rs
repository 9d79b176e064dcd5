//! The Python side of the callback contract seen from Rust: how many values
//! a callback returned, the one-liners that make a Python callable, and
//! binding callables to the callbacks of a parsed program.
#![cfg(feature = "python")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use pyo3::prelude::*;
use tensorlift::ir::CallbackKind;
use tensorlift::{Code, DType, Function, Sym, Tensor, TensorSpec, function};

/// Defines Python functions from `src` with plain pyo3 and returns `name`.
use common::pyfn;

fn both(f: impl Fn() -> Function) -> [Function; 2] {
    [f(), f().jit_compile(true)]
}

/// `mode` 0: one array of two elements; 1: a tuple of two arrays; 2: a
/// list of two arrays; 3: a Python scalar.
const RETURNS: &str = "def f(x, mode):\n    m = int(float(mode))\n    if m == 0: return np.array([1., 2.], dtype=np.float32)\n    if m == 1: return (x, x * 2)\n    if m == 2: return [x, x * 2]\n    return 5.0\n";

/// A two-output callback of `kind` named "f" over `func`.
fn two_outputs(kind: CallbackKind, func: &Py<PyAny>) -> Function {
    let func = Python::attach(|py| func.clone_ref(py));
    function(move |x: Sym, mode: Sym| {
        let func = Python::attach(|py| func.clone_ref(py));
        let outs = match kind {
            CallbackKind::PyFunction => x.graph().py_function(func, &[&x, &mode], &[DType::F32; 2]),
            CallbackKind::NumpyFunction | CallbackKind::PyFunc | CallbackKind::HostFn => {
                x.graph().numpy_function_with(
                    kind,
                    "f",
                    func,
                    &[&x, &mode],
                    &[DType::F32; 2],
                    &[tensorlift::Shape::Unranked, tensorlift::Shape::Unranked],
                    false,
                )
            }
        };
        (outs[0].clone(), outs[1].clone())
    })
    .input_signature(vec![
        TensorSpec::known(DType::F32, &[2]),
        TensorSpec::known(DType::I32, &[]),
    ])
}

fn check_one_value_is_not_split(f: &Function, who: &str) {
    let x = common::f32s(&[3.0, 4.0], &[2]);
    let m = |v: i32| Tensor::scalar(v);
    for mode in [0, 3] {
        let e = f.call(&[x.clone(), m(mode)]).unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "mode {mode}: {e}");
        assert!(
            e.to_string()
                .contains(&format!("{who} returned 1 value(s), but Tout declares 2")),
            "mode {mode}: {e}"
        );
    }
    // A tuple and a list are sequences of outputs.
    for mode in [1, 2] {
        let out = f.call(&[x.clone(), m(mode)]).unwrap();
        assert_eq!(common::to_vec::<f32>(&out[0]), vec![3.0, 4.0]);
        assert_eq!(common::to_vec::<f32>(&out[1]), vec![6.0, 8.0]);
    }
    // The function stays usable after the error.
    assert!(f.call(&[x, m(0)]).is_err());
}

#[test]
fn one_array_is_one_value_for_numpy_callbacks() {
    let func = pyfn(RETURNS, "f");
    for kind in [CallbackKind::NumpyFunction, CallbackKind::PyFunc] {
        for f in both(|| two_outputs(kind, &func)) {
            check_one_value_is_not_split(&f, &format!("{} 'f'", kind.name()));
        }
    }
}

#[test]
fn one_array_is_one_value_for_py_function() {
    // py_function runs interpreted only; compiled, it is JitIncompatible
    // before anything runs.
    let func = pyfn(
        &RETURNS.replace("(x, x * 2)", "(x.numpy(), x.numpy() * 2)"),
        "f",
    );
    let [interp, jit] = both(|| two_outputs(CallbackKind::PyFunction, &func));
    check_one_value_is_not_split(&interp, "py_function 'py_function'");
    let e = jit
        .call(&[common::f32s(&[3.0, 4.0], &[2]), Tensor::scalar(0i32)])
        .unwrap_err();
    assert_eq!(e.code(), Code::JitIncompatible, "{e}");
}

// ---- One-liners: a Python callable from "module:function" or from source.

/// A one-callback function of `kind` over `func` with result dtype `tout`.
fn one_callback(kind: CallbackKind, func: Py<PyAny>, tout: DType) -> Function {
    function(move |x: Sym| {
        let func = Python::attach(|py| func.clone_ref(py));
        x.graph().numpy_function_with(
            kind,
            "cb",
            func,
            &[&x],
            &[tout],
            &[tensorlift::Shape::Unranked],
            false,
        )[0]
        .clone()
    })
}

#[test]
fn callable_imports_a_module_and_resolves_dotted_attributes() {
    let negative = tensorlift::python::callable("numpy:negative").unwrap();
    let norm = tensorlift::python::callable("numpy:linalg.norm").unwrap();
    for f in both(|| {
        one_callback(
            CallbackKind::NumpyFunction,
            Python::attach(|py| negative.clone_ref(py)),
            DType::F32,
        )
    }) {
        let out = f.call(&[common::f32s(&[1.0, -2.0], &[2])]).unwrap();
        assert_eq!(common::to_vec::<f32>(&out[0]), vec![-1.0, 2.0]);
    }
    for f in both(|| {
        one_callback(
            CallbackKind::PyFunc,
            Python::attach(|py| norm.clone_ref(py)),
            DType::F64,
        )
    }) {
        let x = Tensor::from(ndarray::arr1(&[3.0f64, 4.0]).into_dyn());
        let out = f.call(&[x]).unwrap();
        assert_eq!(common::to_vec::<f64>(&out[0]), vec![5.0]);
    }
}

#[test]
fn callable_errors_name_what_is_wrong() {
    let cases: [(&str, Code, &[&str]); 5] = [
        (
            "tl_no_such_module_q:f",
            Code::NotFound,
            &[
                "Python module 'tl_no_such_module_q'",
                "sys.path",
                "PYTHONPATH",
            ],
        ),
        (
            "numpy.tl_no_such_sub:f",
            Code::NotFound,
            &["Python module 'numpy.tl_no_such_sub'"],
        ),
        (
            "numpy:linalg.tl_missing",
            Code::NotFound,
            &[
                "'numpy.linalg' has no attribute 'tl_missing'",
                "numpy:linalg.tl_missing",
            ],
        ),
        (
            "numpy:pi",
            Code::InvalidArgument,
            &["'numpy:pi' is a Python float, not a callable"],
        ),
        (
            "numpy",
            Code::InvalidArgument,
            &["'numpy'", "module:function"],
        ),
    ];
    for (spec, code, needles) in cases {
        let e = tensorlift::python::callable(spec).unwrap_err();
        assert_eq!(e.code(), code, "{spec}: {e}");
        for n in needles {
            assert!(e.to_string().contains(n), "{spec}: {e} lacks {n}");
        }
    }
}

#[test]
fn callable_from_source_runs_in_both_modes_with_source_tracebacks() {
    let src = "import numpy as np\nK = 3\n\ndef triple(x):\n    if x[0] < 0:\n        raise ValueError('negative first element')\n    return x * np.float32(K)\n";
    let triple = tensorlift::python::callable_from_source(src, "triple").unwrap();
    for f in both(|| {
        one_callback(
            CallbackKind::NumpyFunction,
            Python::attach(|py| triple.clone_ref(py)),
            DType::F32,
        )
    }) {
        let out = f.call(&[common::f32s(&[1.0, 2.0], &[2])]).unwrap();
        assert_eq!(common::to_vec::<f32>(&out[0]), vec![3.0, 6.0]);
        let e = f.call(&[common::f32s(&[-1.0, 2.0], &[2])]).unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e}");
        // The traceback quotes the source line that raised.
        assert!(
            e.to_string()
                .contains("raise ValueError('negative first element')"),
            "{e}"
        );
    }
}

#[test]
fn callable_from_source_errors_name_what_is_wrong() {
    let e =
        tensorlift::python::callable_from_source("def f(x):\n    return x +\n", "f").unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    let pos = e.detail().and_then(|d| d.pos).expect("a position");
    assert_eq!((pos.line, pos.col), (2, 15), "{e}");
    assert!(
        e.to_string()
            .contains("2:15: syntax error in the Python source of 'f': invalid syntax"),
        "{e}"
    );
    let e = tensorlift::python::callable_from_source("def f(x):\n    return x\nK = 1\n", "g")
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e}");
    assert!(
        e.to_string().contains("defines no 'g' (it defines: f, K)"),
        "{e}"
    );
    let e = tensorlift::python::callable_from_source("g = 3\n", "g").unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    assert!(e.to_string().contains("not a callable"), "{e}");
    let e = tensorlift::python::callable_from_source("raise KeyError('boom')\n", "g").unwrap_err();
    assert_eq!(e.code(), Code::Unknown, "{e}");
    assert!(e.to_string().contains("KeyError: 'boom'"), "{e}");
}

// ---- Binding callables to the callbacks of a parsed program.

/// Node names differ from target names on purpose; `scale` is called twice.
const PARSED: &str = "graph @g {
  %x = parameter 0 : f32[3]
  %a = numpy_function \"scale\" (%x) : (f32[3])
  %b = host_fn \"shift\" (%a) : (f32[3])
  %a2 = numpy_function \"scale\" (%b) stateful : (f32[3])
  %c = add(%a2, %x) : f32[3]
  return %c as \"c\"
}
";

fn run_both(g: &tensorlift::Graph, x: &Tensor) -> [tensorlift::Result<Vec<Tensor>>; 2] {
    let mut opt = g.clone();
    [
        tensorlift::runtime::interp::optimize(&mut opt)
            .and_then(|_| tensorlift::runtime::interp::run(&opt, std::slice::from_ref(x))),
        tensorlift::compiler::compile(g, &Default::default())
            .and_then(|exe| exe.run(std::slice::from_ref(x))),
    ]
}

#[test]
fn a_parsed_program_runs_with_bound_python_and_rust_callables() {
    let mut g = tensorlift::ir::text::parse(PARSED, "parsed.tlir").unwrap();
    let targets = tensorlift::callback_targets(&g);
    let names: Vec<_> = targets
        .iter()
        .map(|t| (t.name.as_str(), t.kind, t.nodes.clone(), t.bound))
        .collect();
    assert_eq!(
        names,
        vec![
            (
                "scale",
                CallbackKind::NumpyFunction,
                vec!["a".to_string(), "a2".to_string()],
                false
            ),
            ("shift", CallbackKind::HostFn, vec!["b".to_string()], false),
        ]
    );
    let scale =
        tensorlift::python::callable_from_source("def scale(x):\n    return x * 2\n", "scale")
            .unwrap();
    tensorlift::bind_python(&mut g, "scale", scale).unwrap();
    tensorlift::bind_host_fn(&mut g, "shift", |ins: &[Tensor]| {
        Ok(vec![Tensor::from(
            ins[0].array_view::<f32>()?.mapv(|v| v + 1.0),
        )])
    })
    .unwrap();
    assert!(tensorlift::callback_targets(&g).iter().all(|t| t.bound));
    let x = common::f32s(&[1.0, 2.0, 3.0], &[3]);
    for (mode, r) in ["interp", "jit"].iter().zip(run_both(&g, &x)) {
        // c = 2 * (2x + 1) + x
        assert_eq!(
            common::to_vec::<f32>(&r.unwrap()[0]),
            vec![7.0, 12.0, 17.0],
            "{mode}"
        );
    }
}

#[test]
fn binding_checks_the_target_and_uses_the_nodes_tout() {
    let mut g = tensorlift::ir::text::parse(PARSED, "parsed.tlir").unwrap();
    let f64_result = tensorlift::python::callable_from_source(
        "import numpy as np\ndef scale(x):\n    return (x * 2).astype(np.float64)\n",
        "scale",
    )
    .unwrap();
    let e = tensorlift::bind_python(
        &mut g,
        "nope",
        Python::attach(|py| f64_result.clone_ref(py)),
    )
    .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e}");
    assert!(
        e.to_string()
            .contains("no callback target named 'nope' (its callback targets: scale, shift)"),
        "{e}"
    );
    let e = tensorlift::bind_host_fn(&mut g, "a", |_: &[Tensor]| Ok(vec![])).unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "a node name is not a target: {e}");
    let e = tensorlift::bind_python(
        &mut g,
        "shift",
        Python::attach(|py| f64_result.clone_ref(py)),
    )
    .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    assert!(e.to_string().contains("host_fn"), "{e}");
    let not_callable = Python::attach(|py| 3i32.into_pyobject(py).unwrap().into_any().unbind());
    let e = tensorlift::bind_python(&mut g, "scale", not_callable).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    tensorlift::bind_python(&mut g, "scale", f64_result).unwrap();
    tensorlift::bind_host_fn(&mut g, "shift", |ins: &[Tensor]| Ok(vec![ins[0].clone()])).unwrap();
    for (mode, r) in ["interp", "jit"]
        .iter()
        .zip(run_both(&g, &common::f32s(&[1.0, 2.0, 3.0], &[3])))
    {
        let e = r.unwrap_err();
        assert!(
            e.to_string()
                .contains("output 0 of numpy_function 'scale' is float64, but Tout says float32"),
            "{mode}: {e}"
        );
    }
}

#[test]
fn a_parsed_py_function_gets_eager_tensors() {
    let src = "graph @g {\n  %x = parameter 0 : f32[2]\n  %y = py_function \"eager\" (%x) : (f32[2])\n  return %y as \"y\"\n}\n";
    let mut g = tensorlift::ir::text::parse(src, "eager.tlir").unwrap();
    let f = tensorlift::python::callable_from_source(
        "import tensorlift as tl\ndef eager(x):\n    assert isinstance(x, tl.Tensor), type(x)\n    return tl.exp(x)\n",
        "eager",
    )
    .unwrap();
    tensorlift::bind_python(&mut g, "eager", f).unwrap();
    let [interp, jit] = run_both(&g, &common::f32s(&[0.0, 1.0], &[2]));
    let y = common::to_vec::<f32>(&interp.unwrap()[0]);
    assert!(
        (y[0] - 1.0).abs() < 1e-6 && (y[1] - 1.0f32.exp()).abs() < 1e-5,
        "{y:?}"
    );
    // py_function cannot be compiled, bound or not.
    assert_eq!(jit.unwrap_err().code(), Code::JitIncompatible);
}

#[test]
fn a_host_fn_result_handed_to_a_numpy_function_keeps_its_value() {
    // The host_fn's result is a temporary that the numpy_function reads
    // last, so compiled code hands it off; it must hand off what the
    // host_fn returned, not the slot's unwritten buffer.
    let scale = pyfn("def scale(x):\n    return x * 2\n", "scale");
    for f in both(|| {
        let scale = Python::attach(|py| scale.clone_ref(py));
        function(move |x: Sym| {
            let b = x.graph().host_fn_with(
                "shift",
                |ins: &[Tensor]| {
                    Ok(vec![Tensor::from(
                        ins[0].array_view::<f32>()?.mapv(|v| v + 1.0),
                    )])
                },
                &[&x],
                &[DType::F32],
                &[tensorlift::Shape::known(&[3])],
                false,
            );
            let func = Python::attach(|py| scale.clone_ref(py));
            x.graph().numpy_function_with(
                CallbackKind::NumpyFunction,
                "scale",
                func,
                &[&b[0]],
                &[DType::F32],
                &[tensorlift::Shape::known(&[3])],
                false,
            )[0]
            .clone()
        })
    }) {
        let out = f.call(&[common::f32s(&[1.0, 2.0, 3.0], &[3])]).unwrap();
        assert_eq!(common::to_vec::<f32>(&out[0]), vec![4.0, 6.0, 8.0]);
    }
}

// ---- Callbacks inside loops and branches.

#[test]
fn a_numpy_function_in_a_loop_runs_once_per_iteration_in_both_modes() {
    let log = pyfn(
        "calls = []\ndef f(i, x):\n    calls.append(int(i))\n    return (x * 2).astype(np.float32)\n",
        "f",
    );
    for f in both(|| {
        let log = Python::attach(|py| log.clone_ref(py));
        function(move |x: Sym| {
            let log = Python::attach(|py| log.clone_ref(py));
            tensorlift::fori_loop(
                0,
                4,
                move |i, c| {
                    let log = Python::attach(|py| log.clone_ref(py));
                    let y = i
                        .graph()
                        .numpy_function(log, &[i, &c[0]], &[DType::F32], true);
                    vec![y[0].set_shape(&[Some(2)])]
                },
                &[x],
            )
        })
    }) {
        Python::attach(|py| {
            let globals = log.bind(py).getattr("__globals__").unwrap();
            globals
                .get_item("calls")
                .unwrap()
                .call_method0("clear")
                .unwrap();
        });
        let out = f.call(&[common::f32s(&[1.0, -0.5], &[2])]).unwrap();
        assert_eq!(common::to_vec::<f32>(&out[0]), vec![16.0, -8.0]);
        let calls: Vec<i64> = Python::attach(|py| {
            let globals = log.bind(py).getattr("__globals__").unwrap();
            globals.get_item("calls").unwrap().extract().unwrap()
        });
        assert_eq!(calls, vec![0, 1, 2, 3]);
    }
}

#[test]
fn a_py_function_inside_a_compiled_loop_body_is_named_in_the_jit_error() {
    let eager = pyfn("def g(x):\n    return x\n", "g");
    let f = function(move |x: Sym| {
        let eager = Python::attach(|py| eager.clone_ref(py));
        tensorlift::fori_loop(
            0,
            2,
            move |i, c| {
                let eager = Python::attach(|py| eager.clone_ref(py));
                vec![i.graph().py_function(eager, &[&c[0]], &[DType::F32])[0].set_shape(&[Some(2)])]
            },
            &[x],
        )
    })
    .jit_compile(true);
    let e = f
        .compile(&[TensorSpec::known(DType::F32, &[2])])
        .unwrap_err();
    assert_eq!(e.code(), Code::JitIncompatible, "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("py_function") && msg.contains("python_api.rs:"),
        "{msg}"
    );
}
