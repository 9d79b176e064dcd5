//! `cumsum` from the Rust API, interpreted and compiled, against running
//! sums computed here; its gradient against finite differences; a dim of
//! unknown size. (Every dtype is in the NumPy fixtures,
//! tests/fixtures/gen_ops.py.)
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use tensorlift::{Code, DType, GradCheck, Sym, Tensor, TensorSpec, check_grads, function};

fn f64s(v: &[f64], dims: &[usize]) -> Tensor {
    let b: Vec<u8> = v.iter().flat_map(|x| x.to_ne_bytes()).collect();
    Tensor::from_bytes(DType::F64, dims, &b).unwrap()
}

/// Running sums of `x` ([outer, n, inner]) along the middle dim.
fn running(
    x: &[f64],
    (outer, n, inner): (usize, usize, usize),
    reverse: bool,
    exclusive: bool,
) -> Vec<f64> {
    let mut out = vec![0.0; x.len()];
    for o in 0..outer {
        for i in 0..inner {
            let mut acc = 0.0;
            for step in 0..n {
                let k = if reverse { n - 1 - step } else { step };
                let at = (o * n + k) * inner + i;
                if exclusive {
                    out[at] = acc;
                    acc += x[at];
                } else {
                    acc += x[at];
                    out[at] = acc;
                }
            }
        }
    }
    out
}

#[test]
fn running_sums_along_any_axis_in_both_modes() {
    // [3, 40000, 2] along axis 1: several parts on the pool's threads.
    for (dims, axis) in [([3usize, 40_000, 2], 1i64), ([4, 5, 6], 0), ([4, 5, 6], -1)] {
        let len: usize = dims.iter().product();
        let x: Vec<f64> = (0..len)
            .map(|i| ((i * 37) % 101) as f64 * 0.25 - 12.0)
            .collect();
        let a = usize::try_from(axis.rem_euclid(3)).unwrap();
        let shape = (
            dims[..a].iter().product(),
            dims[a],
            dims[a + 1..].iter().product(),
        );
        for jit in [false, true] {
            for (reverse, exclusive) in [(false, false), (true, false), (false, true), (true, true)]
            {
                let f = function(move |x: Sym| x.cumsum(axis, reverse, exclusive)).jit_compile(jit);
                let y = f.call(&[f64s(&x, &dims)]).unwrap();
                assert_eq!(
                    common::to_vec::<f64>(&y[0]),
                    running(&x, shape, reverse, exclusive),
                    "jit {jit}, axis {axis}, reverse {reverse}, exclusive {exclusive}"
                );
            }
        }
    }
}

#[test]
fn the_gradient_of_a_running_sum_is_a_running_sum_from_the_other_end() {
    let x: Vec<f64> = (0..12).map(|i| (i as f64 * 0.7).sin()).collect();
    let w: Vec<f64> = (0..12).map(|i| (i as f64 * 0.3).cos()).collect();
    for jit in [false, true] {
        for (reverse, exclusive) in [(false, false), (true, true)] {
            let f = function(move |x: Sym, w: Sym| {
                (x.cumsum(1, reverse, exclusive) * &w).reduce_sum(None, false)
            })
            .jit_compile(jit);
            let inputs = [f64s(&x, &[3, 4]), f64s(&w, &[3, 4])];
            check_grads(&f, &inputs, &[0], &GradCheck::default()).unwrap();
            let g = common::to_vec::<f64>(&f.grad(&[0]).call(&inputs).unwrap()[0]);
            assert_eq!(g, running(&w, (3, 4, 1), !reverse, exclusive), "jit {jit}");
        }
    }
}

#[test]
fn a_running_sum_over_a_dim_known_only_when_the_function_runs() {
    for jit in [false, true] {
        let f = function(|x: Sym| x.cumsum(0, false, false))
            .input_signature(vec![TensorSpec::new(DType::F64, &[None])])
            .jit_compile(jit);
        for n in [0usize, 1, 5] {
            let x: Vec<f64> = (0..n).map(|i| i as f64 + 1.0).collect();
            let y = f.call(&[f64s(&x, &[n])]).unwrap();
            assert_eq!(
                common::to_vec::<f64>(&y[0]),
                running(&x, (1, n, 1), false, false)
            );
        }
    }
    let e = function(|x: Sym| x.cumsum(2, false, false))
        .call(&[f64s(&[1.0], &[1])])
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    assert!(
        e.to_string().contains("cumsum") && e.to_string().contains("cumsum.rs"),
        "{e}"
    );
}

#[test]
fn a_running_sum_starts_from_the_first_element_itself() {
    // cumsum([-0.0]) was +0.0 (0 + -0.0); NumPy keeps -0.0.
    for jit in [false, true] {
        let f = function(|x: Sym| vec![x.cumsum(0, false, false), x.cumsum(0, true, false)])
            .jit_compile(jit);
        let y = f.call(&[f64s(&[-0.0, -0.0], &[2])]).unwrap();
        for out in &y {
            let v = common::to_vec::<f64>(out);
            assert!(
                v.iter().all(|x| x.to_bits() == (-0.0f64).to_bits()),
                "jit {jit}: {v:?}"
            );
        }
    }
}
