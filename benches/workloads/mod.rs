//! The benchmark workloads of DESIGN.md ("Quality bars") and their inputs,
//! shared by `benches/jit.rs` and the measurement examples
//! (`examples/peer_method.rs`, `examples/wide_math.rs`,
//! `examples/call_latency.rs`).

use tensorlift::{Sym, Tensor};

/// `n` values spread over about [-3, 3], deterministic per `seed`.
pub fn data(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) as f32 / u32::MAX as f32)
                * 6.0
                - 3.0
        })
        .collect()
}

/// An f32 tensor of `dims` filled by [`data`].
pub fn tensor(dims: &[usize], seed: u32) -> Tensor {
    let n = dims.iter().product();
    Tensor::from(ndarray::ArrayD::from_shape_vec(dims.to_vec(), data(n, seed)).unwrap())
}

/// The arithmetic chain (memory-bound).
pub fn arith(x: Sym) -> Sym {
    ((&x * 1.5 + 0.25) * &x - 0.75) * 0.5 + &x
}

/// The transcendental chain.
pub fn transc(x: Sym) -> Sym {
    (-&x * &x).exp() * x.tanh() + x.abs().sqrt()
}

/// Softmax over the rows of a matrix.
pub fn softmax(x: Sym) -> Sym {
    let e = (&x - x.reduce_max(Some(&[1]), true)).exp();
    &e / e.reduce_sum(Some(&[1]), true)
}

/// The inputs of [`mlp`]: x 256×512, w1 512×512, b1 512, w2 512×512, b2 512.
pub fn mlp_inputs() -> [Tensor; 5] {
    [
        tensor(&[256, 512], 3),
        tensor(&[512, 512], 4),
        tensor(&[512], 5),
        tensor(&[512, 512], 6),
        tensor(&[512], 7),
    ]
}

/// A two-layer perceptron.
pub fn mlp(x: Sym, w1: Sym, b1: Sym, w2: Sym, b2: Sym) -> Sym {
    (x.matmul(&w1) + b1).maximum(0.0).matmul(&w2) + b2
}
