//! Host-callback overhead in compiled code: a chain of 100 dependent
//! 1-element callbacks vs the same chain without them (per-call overhead =
//! difference / 100), for host_fn and numpy_function; and a 64 MiB input
//! handed to a callback vs a 1-element one. Run: `cargo bench --bench callbacks`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    reason = "benchmark harness"
)]

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use tensorlift::ir::{CallbackKind, Shape};
use tensorlift::{DType, Error, Function, Sym, Tensor, TensorMut, TensorRef, function};

fn one(x: f32) -> Tensor {
    Tensor::from(ndarray::arr1(&[x]).into_dyn())
}

fn inc(ins: &[Tensor]) -> Result<Vec<Tensor>, Error> {
    Ok(vec![Tensor::from(
        ins[0].array_view::<f32>()?.mapv(|v| v + 1.0),
    )])
}

fn inc_into(ins: &[TensorRef<'_>], outs: &mut [TensorMut<'_>]) -> Result<(), Error> {
    outs[0].slice_mut::<f32>()?[0] = ins[0].slice::<f32>()?[0] + 1.0;
    Ok(())
}

fn chain(kind: &'static str) -> Function {
    function(move |x: Sym| {
        let mut y = x;
        for _ in 0..100 {
            y = match kind {
                "plain" => &y + 1.0,
                "host_fn_into" => {
                    y.graph()
                        .host_fn_into("inc", inc_into, &[&y], &[DType::F32], &[&[1]], true)[0]
                        .clone()
                }
                "host_fn" => y.graph().host_fn_with(
                    "inc",
                    inc,
                    &[&y],
                    &[DType::F32],
                    &[Shape::known(&[1])],
                    true,
                )[0]
                .clone(),
                _ => {
                    #[cfg(feature = "python")]
                    {
                        let f = python_inc();
                        y.graph().numpy_function_with(
                            CallbackKind::NumpyFunction,
                            "inc",
                            f,
                            &[&y],
                            &[DType::F32],
                            &[Shape::known(&[1])],
                            true,
                        )[0]
                        .clone()
                    }
                    #[cfg(not(feature = "python"))]
                    {
                        let _ = CallbackKind::NumpyFunction;
                        &y + 1.0
                    }
                }
            };
        }
        y
    })
    .jit_compile(true)
}

#[cfg(feature = "python")]
fn python_inc() -> pyo3::Py<pyo3::PyAny> {
    use pyo3::prelude::*;
    Python::attach(|py| {
        let g = pyo3::types::PyDict::new(py);
        py.run(
            c"import numpy as np\ndef inc(x):\n    return x + np.float32(1)\n",
            Some(&g),
            None,
        )
        .unwrap();
        g.get_item("inc").unwrap().unwrap().unbind()
    })
}

fn overhead(c: &mut Criterion) {
    let mut g = c.benchmark_group("callback_chain100");
    let mut kinds = vec!["plain", "host_fn", "host_fn_into"];
    if cfg!(feature = "python") {
        kinds.push("numpy_function");
    }
    for kind in kinds {
        let f = chain(kind);
        f.call(&[one(0.0)]).unwrap();
        g.bench_function(BenchmarkId::new(kind, 100), |b| {
            b.iter(|| f.call(&[one(0.0)]).unwrap())
        });
    }
    g.finish();
}

fn big_input(c: &mut Criterion) {
    let mut g = c.benchmark_group("callback_input_size");
    g.sample_size(20);
    let first = |ins: &[Tensor]| -> Result<Vec<Tensor>, Error> {
        let v = ins[0].array_view::<f32>()?;
        Ok(vec![Tensor::from(ndarray::arr1(&[v[[0]]]).into_dyn())])
    };
    for n in [1usize, 16 << 20] {
        // The callback reads the caller's input directly: no copy.
        let f = function(move |x: Sym| {
            x.graph().host_fn_with(
                "first",
                first,
                &[&x],
                &[DType::F32],
                &[Shape::known(&[1])],
                true,
            )[0]
            .clone()
                * 2.0
        })
        .jit_compile(true);
        let x = Tensor::from(ndarray::ArrayD::<f32>::zeros(vec![n]));
        f.call(std::slice::from_ref(&x)).unwrap();
        g.bench_function(BenchmarkId::new("host_fn", n * 4), |b| {
            b.iter(|| f.call(std::slice::from_ref(&x)).unwrap())
        });
    }
    g.finish();
}

/// A 64 MiB temporary (`x * 2`) handed to a NumPy callback that nothing
/// else reads (moved, no copy: should cost the kernel alone plus one
/// callback) vs the caller's input (copied: the caller still owns it) vs
/// the kernel alone, returning the temporary.
#[cfg(feature = "python")]
fn numpy_big_input(c: &mut Criterion) {
    use pyo3::prelude::*;
    let first = Python::attach(|py| {
        let g = pyo3::types::PyDict::new(py);
        py.run(
            c"import numpy as np\ndef first(x):\n    return x[:1].copy()\n",
            Some(&g),
            None,
        )
        .unwrap();
        g.get_item("first").unwrap().unwrap().unbind()
    });
    let mut g = c.benchmark_group("numpy_input_64MiB");
    g.sample_size(20);
    let n = 16usize << 20;
    let x = Tensor::from(ndarray::ArrayD::<f32>::zeros(vec![n]));
    for case in ["kernel_only", "temporary_handed_off", "caller_input_copied"] {
        let first = Python::attach(|py| first.clone_ref(py));
        let f = function(move |x: Sym| {
            let t = &x * 2.0;
            let arg = if case == "caller_input_copied" {
                &x
            } else {
                &t
            };
            if case == "kernel_only" {
                return t;
            }
            let first = Python::attach(|py| first.clone_ref(py));
            arg.graph().numpy_function_with(
                CallbackKind::NumpyFunction,
                "first",
                first,
                &[arg],
                &[DType::F32],
                &[Shape::known(&[1])],
                true,
            )[0]
            .clone()
        })
        .jit_compile(true);
        f.call(std::slice::from_ref(&x)).unwrap();
        g.bench_function(case, |b| {
            b.iter(|| f.call(std::slice::from_ref(&x)).unwrap())
        });
    }
    g.finish();
}

#[cfg(not(feature = "python"))]
fn numpy_big_input(_: &mut Criterion) {}

criterion_group!(benches, overhead, big_input, numpy_big_input);
criterion_main!(benches);
