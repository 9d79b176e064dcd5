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

use std::ffi::CString;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use tensorlift::ir::CallbackKind;
use tensorlift::{Code, DType, Function, Sym, Tensor, TensorSpec, function};

/// Defines Python functions from `src` with plain pyo3 and returns `name`.
fn pyfn(src: &str, name: &str) -> Py<PyAny> {
    Python::attach(|py| {
        let globals = PyDict::new(py);
        let code = CString::new(format!("import numpy as np\n{src}")).unwrap();
        py.run(&code, Some(&globals), None).unwrap();
        globals.get_item(name).unwrap().unwrap().unbind()
    })
}

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
