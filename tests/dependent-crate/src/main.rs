//! Runs `numpy_function` callback `x * 2 + 1` (in NumPy) on `x + 1`, then
//! subtracts 1, interpreted and compiled, for x = the f32 arguments; prints
//! each result as `interpreted: [..]` / `compiled: [..]`, then the compiled
//! result written into its own buffer by `call_into` (`call_into: [..]`).
//! On an error prints it and exits with status 1.

use std::ffi::CString;

use pyo3::prelude::*;
use tensorlift::ir::Shape;
use tensorlift::{DType, Function, Sym, Tensor, TensorMut, TensorSpec, function};

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    // The callable itself needs nothing but Python: NumPy is first used by
    // tensorlift when the callback runs.
    let affine: Py<PyAny> = Python::attach(|py| -> PyResult<Py<PyAny>> {
        let globals = pyo3::types::PyDict::new(py);
        let src = CString::new("def affine(x):\n    return x * 2 + 1\n")?;
        py.run(&src, Some(&globals), None)?;
        let f = globals
            .get_item("affine")?
            .ok_or_else(|| pyo3::exceptions::PyKeyError::new_err("affine"))?;
        Ok(f.unbind())
    })?;
    let x: Vec<f32> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let n = x.len();
    let x = Tensor::from(ndarray::Array1::from(x).into_dyn());
    let make = || {
        let affine = Python::attach(|py| affine.clone_ref(py));
        function(move |x: Sym| {
            let func = Python::attach(|py| affine.clone_ref(py));
            let y = x.graph().numpy_function_with(
                tensorlift::ir::CallbackKind::NumpyFunction,
                "affine",
                func,
                &[&(&x + 1.0)],
                &[DType::F32],
                &[Shape::known(&[n])],
                true,
            );
            &y[0] - 1.0
        })
    };
    for (mode, f) in [
        ("interpreted", make()),
        ("compiled", make().jit_compile(true)),
    ] {
        let f: Function = f;
        let y = f.call(std::slice::from_ref(&x))?;
        println!(
            "{mode}: {:?}",
            y[0].to_ndarray::<f32>()?.into_raw_vec_and_offset().0
        );
    }
    // Compiled ahead of time, the result written into the caller's own
    // buffer.
    let compiled = make()
        .jit_compile(true)
        .compile(&[TensorSpec::known(DType::F32, &[n])])?;
    let mut out = vec![0.0f32; n];
    let shape = [n];
    compiled.call_into(
        std::slice::from_ref(&x),
        &mut [TensorMut::from_slice(&shape, &mut out)?],
    )?;
    println!("call_into: {out:?}");
    Ok(())
}
