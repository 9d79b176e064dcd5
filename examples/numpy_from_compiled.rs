//! Calls NumPy from compiled code: a function with `jit_compile(true)` whose
//! middle step is a Python callback (`numpy_function`), compiled ahead of
//! time and called from several threads.
//!
//! Run: `cargo run --release --example numpy_from_compiled`

use std::ffi::CString;

use pyo3::prelude::*;
use tensorlift::ir::{CallbackKind, Shape};
use tensorlift::{DType, Sym, Tensor, TensorSpec, function};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A Python function NumPy implements well and tensorlift does not have:
    // a running median over a window of 3.
    let median3: Py<PyAny> = Python::attach(|py| -> PyResult<Py<PyAny>> {
        let g = pyo3::types::PyDict::new(py);
        let src = CString::new(
            "import numpy as np\n\
             def median3(x):\n    \
                 p = np.pad(x, 1, mode='edge')\n    \
                 return np.median(np.stack([p[:-2], p[1:-1], p[2:]]), axis=0).astype(x.dtype)\n",
        )?;
        py.run(&src, Some(&g), None)?;
        let f = g
            .get_item("median3")?
            .ok_or_else(|| pyo3::exceptions::PyKeyError::new_err("median3"))?;
        Ok(f.unbind())
    })?;

    let f = function(move |x: Sym| {
        let scaled = (&x - x.reduce_min(None, true)) * 2.0;
        let cb = Python::attach(|py| median3.clone_ref(py));
        let smooth = x.graph().numpy_function_with(
            CallbackKind::NumpyFunction,
            "median3",
            cb,
            &[&scaled],
            &[DType::F32],
            &[Shape::known(&[8])],
            false,
        );
        smooth[0].exp().reduce_sum(None, false)
    })
    .jit_compile(true);

    let compiled = f.compile(&[TensorSpec::known(DType::F32, &[8])])?;
    let x = Tensor::from(ndarray::arr1(&[0.5f32, 3.0, 0.25, 0.75, 9.0, 1.0, 1.25, 0.0]).into_dyn());
    let y = compiled.call(std::slice::from_ref(&x))?;
    println!(
        "sum(exp(median3(2·(x - min x)))) = {:?}",
        y[0].to_ndarray::<f32>()?
    );

    // Many threads may call one compiled function; the GIL is taken only
    // inside the callback.
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| compiled.call(std::slice::from_ref(&x)).map(|_| ()));
        }
    });
    println!("compilations: {}", f.compile_count());
    Ok(())
}
