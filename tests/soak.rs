//! Soak tests (`scripts/test.sh --long` runs them: `cargo test --test soak
//! -- --ignored`): a million callbacks through compiled code and ten
//! thousand compile/drop cycles leave resident memory flat.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use tensorlift::{DType, Error, Sym, Tensor, function};

/// Resident memory of this process in bytes.
fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// Asserts that resident memory after `run` is within `margin` bytes of
/// what it was after `warm` (the same work, fewer times).
fn flat(what: &str, margin: usize, warm: impl FnOnce(), run: impl FnOnce()) {
    warm();
    tensorlift::runtime::trim_buffer_cache();
    let before = rss();
    run();
    tensorlift::runtime::trim_buffer_cache();
    let after = rss();
    eprintln!(
        "{what}: resident {:.1} MiB after warm-up, {:.1} MiB after the run",
        before as f64 / (1 << 20) as f64,
        after as f64 / (1 << 20) as f64
    );
    assert!(
        after <= before + margin,
        "{what}: resident memory grew from {before} to {after} bytes"
    );
}

/// A million calls of `f` (x + 1, doubled) after ten thousand, resident
/// memory flat within 4 MiB.
fn million_calls(what: &str, f: &tensorlift::Function) {
    let x = common::f32s(&[1.0, 2.0, 3.0, 4.0], &[4]);
    let calls = |n: usize| {
        for _ in 0..n {
            let out = f.call(std::slice::from_ref(&x)).unwrap();
            assert_eq!(common::to_vec::<f32>(&out[0])[0], 4.0);
        }
    };
    flat(what, 4 << 20, || calls(10_000), || calls(1_000_000));
}

fn plus_one(ins: &[Tensor]) -> Result<Vec<Tensor>, Error> {
    Ok(vec![Tensor::from(
        ins[0].array_view::<f32>()?.mapv(|v| v + 1.0),
    )])
}

#[test]
#[ignore = "soak: scripts/test.sh --long"]
fn a_million_host_fn_calls_through_compiled_code() {
    let f = function(|x: Sym| {
        let y = x.graph().host_fn(plus_one, &[&x], &[DType::F32], true);
        &y[0] * 2.0
    })
    .jit_compile(true);
    million_calls("host_fn", &f);
}

#[cfg(feature = "python")]
#[test]
#[ignore = "soak: scripts/test.sh --long"]
fn a_million_numpy_function_calls_through_compiled_code() {
    use pyo3::Python;
    let func = common::pyfn("def f(x):\n    return x + 1\n", "f");
    let f = function(move |x: Sym| {
        let func = Python::attach(|py| func.clone_ref(py));
        let y = x.graph().numpy_function(func, &[&x], &[DType::F32], true);
        &y[0] * 2.0
    })
    .jit_compile(true);
    million_calls("numpy_function", &f);
}

#[test]
#[ignore = "soak: scripts/test.sh --long"]
fn ten_thousand_compile_and_drop_cycles() {
    let x = common::f32s(&[1.0, 2.0, 3.0, 4.0], &[4]);
    let cycles = |n: usize| {
        for i in 0..n {
            let k = i as f32;
            let f = function(move |x: Sym| {
                let y = x.graph().host_fn(
                    move |ins: &[Tensor]| {
                        Ok(vec![Tensor::from(
                            ins[0].array_view::<f32>()?.mapv(|v| v + k),
                        )])
                    },
                    &[&x],
                    &[DType::F32],
                    true,
                );
                (&y[0] * 2.0).exp()
            })
            .jit_compile(true);
            let out = f.call(std::slice::from_ref(&x)).unwrap();
            assert_eq!(out[0].shape(), &[4]);
        }
    };
    flat("compile/drop", 16 << 20, || cycles(200), || cycles(10_000));
}

/// A compiled loop of `n` iterations around a stateful `host_fn_into`
/// that adds 1 to a (16,) f32 carry.
fn host_fn_loop(n: i32) -> tensorlift::Function {
    function(move |x: Sym| {
        tensorlift::fori_loop(
            0,
            n,
            |_, c| {
                c[0].graph().host_fn_into(
                    "plus_one",
                    |ins, outs| {
                        let x = ins[0].slice::<f32>()?;
                        for (o, v) in outs[0].slice_mut::<f32>()?.iter_mut().zip(x) {
                            *o = v + 1.0;
                        }
                        Ok(())
                    },
                    &[&c[0]],
                    &[DType::F32],
                    &[&[16]],
                    true,
                )
            },
            &[x],
        )
    })
    .jit_compile(true)
}

#[test]
#[ignore = "soak: scripts/test.sh --long"]
fn a_million_iteration_compiled_loop_around_host_fn_into_stays_flat() {
    let x = common::f32s(&[0.0; 16], &[16]);
    let small = host_fn_loop(10_000);
    let big = host_fn_loop(1_000_000);
    flat(
        "1M-iteration loop around host_fn_into",
        4 << 20,
        || {
            let out = small.call(std::slice::from_ref(&x)).unwrap();
            assert_eq!(common::to_vec::<f32>(&out[0])[0], 10_000.0);
            big.compile(&[tensorlift::TensorSpec::known(DType::F32, &[16])])
                .unwrap();
        },
        || {
            let out = big.call(std::slice::from_ref(&x)).unwrap();
            assert_eq!(common::to_vec::<f32>(&out[0])[15], 1_000_000.0);
        },
    );
}
