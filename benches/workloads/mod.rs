//! The benchmark workloads of DESIGN.md ("Quality bars") and their inputs,
//! shared by `benches/jit.rs` and the measurement examples
//! (`examples/peer_method.rs`, `examples/wide_math.rs`,
//! `examples/call_latency.rs`); the RNN of `benches/control_flow.rs`; and
//! the losses whose gradients `benches/autodiff.rs` and
//! `examples/grad_workloads.rs` time (`scripts/peers/autodiff.py` mirrors
//! them and their inputs).

use tensorlift::{DType, Sym, Tensor, fori_loop, while_loop};

pub mod suite;

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

/// The MLP's logits scaled to about unit size: [`mlp_inputs`] with both
/// weight matrices times 0.02 (the inputs of [`mlp`] make logits of
/// hundreds, a saturated softmax), then the one-hot labels (256×512, class
/// `(7 i) mod 512` for row i).
/// Order: x, labels, w1, b1, w2, b2 (the arguments of [`mlp_xent`]).
pub fn mlp_xent_inputs() -> [Tensor; 6] {
    let [x, w1, b1, w2, b2] = mlp_inputs();
    let scaled = |t: Tensor| Tensor::from(t.array_view::<f32>().unwrap().mapv(|v| v * 0.02));
    let mut labels = ndarray::ArrayD::<f32>::zeros(vec![256, 512]);
    for i in 0..256 {
        labels[[i, (7 * i) % 512]] = 1.0;
    }
    [x, Tensor::from(labels), scaled(w1), b1, scaled(w2), b2]
}

/// The mean over the batch of the softmax cross-entropy of [`mlp`]'s
/// logits against one-hot `labels` (log-softmax with the row max
/// subtracted; the max is differentiated through, as there is no
/// stop_gradient, and contributes nothing).
pub fn mlp_xent(x: Sym, labels: Sym, w1: Sym, b1: Sym, w2: Sym, b2: Sym) -> Sym {
    let z = mlp(x, w1, b1, w2, b2);
    let s = &z - z.reduce_max(Some(&[1]), true);
    let logp = &s - s.exp().reduce_sum(Some(&[1]), true).log();
    (logp * labels).reduce_sum(None, false) * (-1.0 / 256.0)
}

/// The inputs of [`layer_norm_loss`]: x 4096×1024, gamma 1024 (about 1),
/// beta 1024 and the output cotangent dy 4096×1024.
pub fn layer_norm_inputs() -> [Tensor; 4] {
    let around =
        |t: Tensor, c: f32| Tensor::from(t.array_view::<f32>().unwrap().mapv(|v| c + v * 0.1));
    [
        tensor(&[4096, 1024], 11),
        around(tensor(&[1024], 12), 1.0),
        around(tensor(&[1024], 13), 0.0),
        tensor(&[4096, 1024], 14),
    ]
}

/// `sum(y * dy)` for `y` the layer norm of x over its last axis:
/// `(x - mean) * rsqrt(var + 1e-5) * gamma + beta`.
pub fn layer_norm_loss(x: Sym, gamma: Sym, beta: Sym, dy: Sym) -> Sym {
    let n = 1.0 / 1024.0;
    let xc = &x - x.reduce_sum(Some(&[-1]), true) * n;
    let var = xc.square().reduce_sum(Some(&[-1]), true) * n;
    let y = xc * (var + 1e-5).rsqrt() * gamma + beta;
    (y * dy).reduce_sum(None, false)
}

/// `h = tanh(h @ w + u)`, 256 times, h (64, 512): the RNN of
/// `benches/control_flow.rs`.
pub fn rnn(h: Sym, w: Sym, u: Sym) -> Vec<Sym> {
    fori_loop(0, 256, |_, c| vec![(c[0].matmul(&w) + &u).tanh()], &[h])
}

/// The inputs of [`rnn`]: h0 (64, 512), w (512, 512) times 0.02, u (64, 512).
pub fn rnn_inputs() -> [Tensor; 3] {
    let w = tensor(&[512, 512], 5)
        .array_view::<f32>()
        .unwrap()
        .mapv(|v| v * 0.02);
    [
        tensor(&[64, 512], 1),
        Tensor::from(w),
        tensor(&[64, 512], 7),
    ]
}

/// `sum(h_final²)` for [`rnn`]'s final state.
pub fn rnn_loss(h: Sym, w: Sym, u: Sym) -> Sym {
    rnn(h, w, u)[0].square().reduce_sum(None, false)
}

/// Iterations of [`scalar_loop`].
pub const SCALAR_STEPS: i32 = 100_000;

/// `x = x * 0.999 + 1`, [`SCALAR_STEPS`] times, on an f32 scalar: the
/// scalar-body `fori_loop` of `benches/control_flow.rs` and the suite.
pub fn scalar_loop(x: Sym) -> Vec<Sym> {
    fori_loop(0, SCALAR_STEPS, |_, c| vec![&c[0] * 0.999 + 1.0], &[x])
}

/// `v = A v / |A v|` until `|v' - v|² < 1e-10` or 1000 steps; A (512, 512)
/// symmetric, v (512, 1). Returns v and the step count: the power
/// iteration of `benches/control_flow.rs` and the suite.
pub fn power(a: Sym, v: Sym) -> Vec<Sym> {
    let g = a.graph();
    let i = g.scalar(DType::I32, 0.0);
    let err = g.scalar(DType::F32, 1.0);
    let out = while_loop(
        |c| c[1].greater(1e-10).logical_and(c[0].less(1000)),
        |c| {
            let w = a.matmul(&c[2]);
            let n = (&w * &w).reduce_sum(None, false).sqrt();
            let next = &w / &n;
            let d = &next - &c[2];
            vec![&c[0] + 1, (&d * &d).reduce_sum(None, false), next]
        },
        &[i, err, v],
    );
    vec![out[2].clone(), out[0].clone()]
}

/// The inputs of [`power`]: A = (B + Bᵀ) / 2 / 512 for B 512×512 of
/// [`tensor`], v a column of ones.
pub fn power_inputs() -> [Tensor; 2] {
    let n = 512;
    let b = tensor(&[n, n], 3).array_view::<f32>().unwrap().to_owned();
    let b = b.into_dimensionality::<ndarray::Ix2>().unwrap();
    let a = (&b + &b.t()) * 0.5 / n as f32;
    [
        Tensor::from(a.into_dyn()),
        Tensor::from(ndarray::ArrayD::<f32>::ones(vec![n, 1])),
    ]
}
