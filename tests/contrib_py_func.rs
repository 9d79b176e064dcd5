//! tf.contrib.framework.py_func from Rust: nested arguments with plain
//! Python values, keyword arguments, nested output types and shapes, and
//! errors that name the path of a mismatch; interpreted and compiled.
#![cfg(feature = "python")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::ffi::CString;

use pyo3::prelude::*;
use tensorlift::{Code, DType, Function, Nest, PyArg, Shape, Sym, Tensor, TensorSpec, function};

use common::pyfn;

fn clone(p: &Py<PyAny>) -> Py<PyAny> {
    Python::attach(|py| p.clone_ref(py))
}

/// A plain Python value from Python source text.
fn pyval(expr: &str) -> Nest<PyArg> {
    Python::attach(|py| {
        let code = CString::new(expr).unwrap();
        Nest::leaf(PyArg::Py(py.eval(&code, None, None).unwrap().unbind()))
    })
}

fn both(f: impl Fn() -> Function) -> [(&'static str, Function); 2] {
    [("interpreted", f()), ("compiled", f().jit_compile(true))]
}

#[test]
fn seed_example_sinh_through_contrib_py_func() {
    // The seed page: def my_func(x): return np.sinh(x); y = py_func(my_func, [inp], tf.float32)
    let my_func = pyfn("def my_func(x):\n    return np.sinh(x)\n", "my_func");
    let input = [0.5f32, -1.0, 2.0, 0.0];
    for (mode, f) in both(|| {
        let my_func = clone(&my_func);
        function(move |inp: Sym| {
            let y = inp.graph().contrib_py_func(
                clone(&my_func),
                vec![inp.clone().into()],
                vec![],
                &Nest::leaf(DType::F32),
                None,
                true,
            );
            y.into_leaf().unwrap()
        })
        .input_signature(vec![TensorSpec::new(DType::F32, &[None])])
    }) {
        let out = f
            .call(&[common::f32s(&input, &[4])])
            .unwrap_or_else(|e| panic!("{mode}: {e}"));
        let want: Vec<f32> = input.iter().map(|v| v.sinh()).collect();
        assert_eq!(out[0].shape(), &[4], "{mode}");
        common::assert_close(&out[0], &common::f32s(&want, &[4]), 1e-6, 0.0, mode);
    }
}

#[test]
fn nested_args_pass_plain_python_values_through_and_kwargs_by_name() {
    let src = r#"
def f(pair, label, nothing, scale, cfg):
    x, (y, n) = pair
    assert type(pair) is tuple and type(pair[1]) is list, (type(pair), type(pair[1]))
    assert type(n) is int and n == 3, repr(n)
    assert label == "tag" and nothing is None, (label, nothing)
    assert isinstance(x, np.ndarray) and isinstance(y, np.ndarray) and isinstance(scale, np.ndarray)
    assert type(cfg) is dict and sorted(cfg) == ["k", "w"] and type(cfg["k"]) is int
    return (x * n + y) * scale + cfg["w"] * cfg["k"]
"#;
    let func = pyfn(src, "f");
    for (mode, f) in both(|| {
        let func = clone(&func);
        function(move |x: Sym, y: Sym, s: Sym, w: Sym| {
            let pair = Nest::tuple([x.clone().into(), Nest::list([y.clone().into(), pyval("3")])]);
            x.graph()
                .contrib_py_func_with(
                    "f",
                    clone(&func),
                    vec![pair, pyval("'tag'"), pyval("None")],
                    vec![
                        ("scale", s.clone().into()),
                        (
                            "cfg",
                            Nest::dict([("w", w.clone().into()), ("k", pyval("2"))]),
                        ),
                    ],
                    &Nest::leaf(DType::F32),
                    None,
                    false,
                )
                .into_leaf()
                .unwrap()
        })
    }) {
        let (x, y, s, w) = ([1.0f32, 2.0], [10.0f32, 20.0], 2.0f32, [100.0f32, 200.0]);
        let out = f
            .call(&[
                common::f32s(&x, &[2]),
                common::f32s(&y, &[2]),
                Tensor::scalar(s),
                common::f32s(&w, &[2]),
            ])
            .unwrap_or_else(|e| panic!("{mode}: {e}"));
        let want: Vec<f32> = (0..2)
            .map(|i| (x[i] * 3.0 + y[i]) * s + w[i] * 2.0)
            .collect();
        assert_eq!(common::to_vec::<f32>(&out[0]), want, "{mode}");
    }
}

/// `([x * 2, arange(n)], {"z": -x, "a": mean(x)})` with every shape declared.
fn nested_outputs(func: &Py<PyAny>, declared_neg: &[usize]) -> Function {
    let (func, declared_neg) = (clone(func), declared_neg.to_vec());
    function(move |x: Sym| {
        let types = Nest::tuple([
            Nest::list([Nest::leaf(DType::F32), Nest::leaf(DType::I64)]),
            Nest::dict([("z", Nest::leaf(DType::F32)), ("a", Nest::leaf(DType::F64))]),
        ]);
        let shapes = Nest::tuple([
            Nest::list([
                Nest::leaf(Shape::known(&[3])),
                Nest::leaf(Shape::known(&[3])),
            ]),
            Nest::dict([
                ("z", Nest::leaf(Shape::known(&declared_neg))),
                ("a", Nest::leaf(Shape::scalar())),
            ]),
        ]);
        let r = x.graph().contrib_py_func_with(
            "g",
            clone(&func),
            vec![x.clone().into()],
            vec![],
            &types,
            Some(&shapes),
            false,
        );
        // The results have the declared structure, dtypes and shapes.
        let doubled = r
            .item(0)
            .and_then(|l| l.item(0))
            .and_then(Nest::as_leaf)
            .unwrap();
        assert_eq!(doubled.shape(), Some(Shape::known(&[3])));
        let mean = r
            .item(1)
            .and_then(|d| d.key("a"))
            .and_then(Nest::as_leaf)
            .unwrap();
        assert_eq!(mean.dtype(), Some(DType::F64));
        assert_eq!(mean.shape(), Some(Shape::scalar()));
        r
    })
    .input_signature(vec![TensorSpec::known(DType::F32, &[3])])
}

#[test]
fn nested_output_types_with_declared_shapes_come_back_in_structure() {
    let func = pyfn(
        "def g(x):\n    return ([x * 2, np.arange(x.size)], {'z': -x, 'a': np.float64(x.mean())})\n",
        "g",
    );
    let x = [1.0f32, 2.0, 4.0];
    for (mode, f) in both(|| nested_outputs(&func, &[3])) {
        let out = f
            .call(&[common::f32s(&x, &[3])])
            .unwrap_or_else(|e| panic!("{mode}: {e}"));
        // Flattening order: list items, then the dict by sorted key ('a' before 'z').
        assert_eq!(out.len(), 4, "{mode}");
        assert_eq!(
            common::to_vec::<f32>(&out[0]),
            x.map(|v| v * 2.0).to_vec(),
            "{mode}"
        );
        assert_eq!(common::to_vec::<i64>(&out[1]), vec![0, 1, 2], "{mode}");
        // NumPy's mean of a float32 array is float32, widened by np.float64.
        let mean = f64::from(x.iter().sum::<f32>() / 3.0);
        assert_eq!(out[2].dtype(), DType::F64, "{mode}");
        assert_eq!(out[2].shape(), &[] as &[usize], "{mode}");
        assert_eq!(common::to_vec::<f64>(&out[2]), vec![mean], "{mode}");
        assert_eq!(
            common::to_vec::<f32>(&out[3]),
            x.map(|v| -v).to_vec(),
            "{mode}"
        );
    }
    // A declared shape the result contradicts is named by its path.
    for (mode, f) in both(|| nested_outputs(&func, &[2])) {
        let e = f.call(&[common::f32s(&x, &[3])]).unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{mode}: {e}");
        assert!(
            e.to_string().contains(
                "output [1]['z'] of py_func 'g' has shape [3], but its declared shape is [2]"
            ),
            "{mode}: {e}"
        );
    }
}

#[test]
fn output_shapes_must_have_the_structure_of_output_types() {
    let func = pyfn("def h(x):\n    return (x, x)\n", "h");
    for (mode, f) in both(|| {
        let func = clone(&func);
        function(move |x: Sym| {
            x.graph().contrib_py_func_with(
                "h",
                clone(&func),
                vec![x.clone().into()],
                vec![],
                &Nest::tuple([Nest::leaf(DType::F32), Nest::leaf(DType::F32)]),
                Some(&Nest::list([
                    Nest::leaf(Shape::known(&[2])),
                    Nest::leaf(Shape::known(&[2])),
                ])),
                false,
            )
        })
    }) {
        let e = f.call(&[common::f32s(&[1.0, 2.0], &[2])]).unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{mode}: {e}");
        let text = e.to_string();
        assert!(text.contains("py_func 'h' (created at "), "{mode}: {e}");
        assert!(
            text.contains("output_shapes is a list of 2, but output_types has a tuple of 2"),
            "{mode}: {e}"
        );
    }
}

#[test]
fn a_mismatched_return_names_its_path() {
    let src = r#"
def f(x, mode):
    m = int(mode)
    if m == 0: return {"b": (x, x + 1), "a": x * 2}
    if m == 1: return {"a": x, "b": (x, x.astype(np.float64))}
    if m == 2: return {"a": x, "b": (x, x, x)}
    if m == 3: return {"b": (x, x)}
    if m == 4: return {"a": x, "b": [x, x]}
    if m == 5: return {"a": x, "b": (x, x), "c": x}
    if m == 6: return {"a": x[:1], "b": (x, x)}
    return [x, (x, x)]
"#;
    let func = pyfn(src, "f");
    let expected = [
        (
            1,
            "output ['b'][1] of py_func 'f' is float64, but output_types says float32",
        ),
        (
            2,
            "output ['b'] of py_func 'f' is a tuple of 3, but output_types has 2",
        ),
        (
            3,
            "output of py_func 'f' has no key 'a', which output_types declares",
        ),
        (
            4,
            "output ['b'] of py_func 'f' is a list of 2, but output_types has a tuple of 2",
        ),
        (
            5,
            "output of py_func 'f' has key 'c', which output_types does not declare",
        ),
        (
            6,
            "output ['a'] of py_func 'f' has shape [1], but its declared shape is [2]",
        ),
        (
            7,
            "output of py_func 'f' is a list of 2, but output_types has a dict with keys ['a', 'b']",
        ),
    ];
    for (mode, f) in both(|| {
        let func = clone(&func);
        function(move |x: Sym, m: Sym| {
            let f32_2 = || Nest::leaf(Shape::known(&[2]));
            x.graph().contrib_py_func_with(
                "f",
                clone(&func),
                vec![x.clone().into(), m.clone().into()],
                vec![],
                &Nest::dict([
                    ("a", Nest::leaf(DType::F32)),
                    (
                        "b",
                        Nest::tuple([Nest::leaf(DType::F32), Nest::leaf(DType::F32)]),
                    ),
                ]),
                Some(&Nest::dict([
                    ("a", f32_2()),
                    ("b", Nest::tuple([f32_2(), f32_2()])),
                ])),
                true,
            )
        })
        .input_signature(vec![
            TensorSpec::known(DType::F32, &[2]),
            TensorSpec::known(DType::I32, &[]),
        ])
    }) {
        let x = common::f32s(&[1.0, 2.0], &[2]);
        for (m, message) in expected {
            let e = f.call(&[x.clone(), Tensor::scalar(m)]).unwrap_err();
            assert_eq!(e.code(), Code::InvalidArgument, "{mode}, case {m}: {e}");
            assert!(e.to_string().contains(message), "{mode}, case {m}: {e}");
            // The function keeps working after the error.
            let out = f
                .call(&[x.clone(), Tensor::scalar(0i32)])
                .unwrap_or_else(|e| panic!("{mode}: {e}"));
            assert_eq!(common::to_vec::<f32>(&out[0]), vec![2.0, 4.0], "{mode}");
            assert_eq!(common::to_vec::<f32>(&out[1]), vec![1.0, 2.0], "{mode}");
            assert_eq!(common::to_vec::<f32>(&out[2]), vec![2.0, 3.0], "{mode}");
        }
    }
}

#[test]
fn stateless_calls_with_other_plain_values_are_not_merged() {
    // Same callable, same tensor operand, other plain Python value: CSE must
    // not merge them (their identity includes what is passed through).
    let f = pyfn("def f(x, k):\n    return x * k\n", "f");
    for (mode, fun) in both(|| {
        let f = clone(&f);
        function(move |x: Sym| {
            let call = |k: &str| {
                x.graph()
                    .contrib_py_func(
                        clone(&f),
                        vec![x.clone().into(), pyval(k)],
                        vec![],
                        &Nest::leaf(DType::F32),
                        None,
                        false,
                    )
                    .into_leaf()
                    .unwrap()
            };
            (call("2.0"), call("3.0"))
        })
    }) {
        let out = fun
            .call(&[common::f32s(&[1.0, 2.0], &[2])])
            .unwrap_or_else(|e| panic!("{mode}: {e}"));
        assert_eq!(common::to_vec::<f32>(&out[0]), vec![2.0, 4.0], "{mode}");
        assert_eq!(common::to_vec::<f32>(&out[1]), vec![3.0, 6.0], "{mode}");
    }
}
