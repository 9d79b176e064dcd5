//! The broad suite of issue 17 (`benches/suite.rs`): the first round's
//! workloads beside the ones users run (layer norm, GELU, attention with
//! its batch dimensions leading or not, an embedding lookup with a
//! reduction, column and middle-axis reductions, transposes, an f64 chain,
//! integer division, a loop scattering into a table, the MLP's gradient
//! and the RNN loop; since 11-27 also the other loops of the control-flow
//! issue, the power iteration and the scalar `fori_loop`, and the other
//! gradients of the autodiff issue, the RNN's and the layer norm's), each
//! with its inputs. `scripts/peers/suite.py` builds
//! the same programs in JAX on the same inputs (the generators below are
//! mirrored there) and prints the same checksums.

use tensorlift::{Combiner, DType, DotDims, Function, Sym, Tensor, fori_loop, function};

use super::{arith, data, mlp, mlp_inputs, mlp_xent, mlp_xent_inputs, softmax, tensor, transc};

/// One workload: its name (as the peer script names it), a builder of a
/// fresh function (interpreted or compiled) and its inputs.
pub struct Workload {
    /// `family/size`, as criterion and the peer script print it.
    pub name: &'static str,
    /// A fresh function; `true` compiles it.
    pub make: fn(bool) -> Function,
    /// The inputs, built once.
    pub inputs: fn() -> Vec<Tensor>,
}

/// `n` int32 values in `[lo, lo + span)`, deterministic per `seed`
/// (the peer script's `ints`).
pub fn ints(dims: &[usize], seed: u32, lo: i32, span: u32) -> Tensor {
    let n: usize = dims.iter().product();
    let v: Vec<i32> = (0..n)
        .map(|i| {
            let h = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed);
            lo + (h % span) as i32
        })
        .collect();
    Tensor::from(ndarray::ArrayD::from_shape_vec(dims.to_vec(), v).unwrap())
}

/// An f64 tensor of `dims` filled by [`data`].
pub fn tensor_f64(dims: &[usize], seed: u32) -> Tensor {
    let n = dims.iter().product();
    let v = data(n, seed).into_iter().map(f64::from).collect();
    Tensor::from(ndarray::ArrayD::from_shape_vec(dims.to_vec(), v).unwrap())
}

/// Layer norm over the last axis with a scale and an offset.
/// (The last axis has 1024 elements.)
pub fn layer_norm(x: Sym, gamma: Sym, beta: Sym) -> Sym {
    let n = 1.0 / 1024.0;
    let xc = &x - x.reduce_sum(Some(&[-1]), true) * n;
    let var = xc.square().reduce_sum(Some(&[-1]), true) * n;
    xc * (var + 1e-5).rsqrt() * gamma + beta
}

/// GELU, tanh approximation (`jax.nn.gelu`'s default).
pub fn gelu(x: Sym) -> Sym {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    let inner = (&x + &x * &x * &x * 0.044715) * c;
    &x * 0.5 * (inner.tanh() + 1.0)
}

/// Scaled dot-product attention over the last axis of the scores, q, k
/// and v laid out (batch, seq, heads, dim) when `heads_inside`, else
/// (batch, heads, seq, dim); the output has q's layout.
fn attention(q: &Sym, k: &Sym, v: &Sym, heads_inside: bool) -> Sym {
    let d = 64.0_f64;
    // Batch dims (b, h) and the seq dim in each layout.
    let (bh, seq) = if heads_inside {
        (vec![0, 2], 1)
    } else {
        (vec![0, 1], 2)
    };
    let scores = q.dot_general(
        k,
        DotDims {
            lhs_batch: bh.clone(),
            rhs_batch: bh.clone(),
            lhs_contract: vec![3],
            rhs_contract: vec![3],
        },
    ) * (1.0 / d.sqrt());
    // scores: (b, h, q, k).
    let p = softmax_last(&scores);
    let out = p.dot_general(
        v,
        DotDims {
            lhs_batch: vec![0, 1],
            rhs_batch: bh,
            lhs_contract: vec![3],
            rhs_contract: vec![seq],
        },
    );
    // out: (b, h, q, d).
    if heads_inside {
        out.transpose(&[0, 2, 1, 3])
    } else {
        out
    }
}

fn softmax_last(x: &Sym) -> Sym {
    let e = (x - x.reduce_max(Some(&[-1]), true)).exp();
    &e / e.reduce_sum(Some(&[-1]), true)
}

/// Attention inputs: q, k, v of (8, 256, 8, 64) or (8, 8, 256, 64).
fn attention_inputs(heads_inside: bool) -> Vec<Tensor> {
    let dims = if heads_inside {
        [8, 256, 8, 64]
    } else {
        [8, 8, 256, 64]
    };
    (21..24).map(|s| tensor(&dims, s)).collect()
}

/// Sum over the second axis of an embedding lookup: table (32768, 256),
/// ids (4096, 16) → (4096, 256).
pub fn embedding_bag(table: Sym, ids: Sym) -> Sym {
    table.take(&ids, 0).reduce_sum(Some(&[1]), false)
}

/// A loop of 64 steps, each adding 4096 values into a carried table of
/// 1M at the step's row of indices (a histogram, an embedding gradient
/// accumulated batch by batch): the table is updated where it lies.
pub fn scatter_loop(table: Sym, ids: Sym, ups: Sym) -> Sym {
    let zero = table.graph().scalar(DType::I32, 0.0);
    fori_loop(
        0,
        64,
        |i, c| {
            let at = ids.dynamic_slice(&[i, &zero], &[1, 4096]).reshape(&[4096]);
            let u = ups.dynamic_slice(&[i, &zero], &[1, 4096]).reshape(&[4096]);
            vec![c[0].scatter(&at, &u, 0, Combiner::Add)]
        },
        &[table],
    )[0]
    .clone()
}

/// `(x·3 + y) / 7 + x % y` on int32 (truncating division, C remainder).
pub fn int_div(x: Sym, y: Sym) -> Sym {
    (&x * 3 + &y) / 7 + &x % &y
}

/// Every workload of the suite.
pub fn all() -> Vec<Workload> {
    vec![
        Workload {
            name: "arith/1M",
            make: |j| function(arith).jit_compile(j),
            inputs: || vec![tensor(&[1 << 20], 1)],
        },
        Workload {
            name: "arith/16M",
            make: |j| function(arith).jit_compile(j),
            inputs: || vec![tensor(&[1 << 24], 1)],
        },
        Workload {
            name: "arith_f64/1M",
            make: |j| function(arith).jit_compile(j),
            inputs: || vec![tensor_f64(&[1 << 20], 1)],
        },
        Workload {
            name: "transc/1M",
            make: |j| function(transc).jit_compile(j),
            inputs: || vec![tensor(&[1 << 20], 1)],
        },
        Workload {
            name: "gelu/4096x1024",
            make: |j| function(gelu).jit_compile(j),
            inputs: || vec![tensor(&[4096, 1024], 2)],
        },
        Workload {
            name: "softmax/4096x1024",
            make: |j| function(softmax).jit_compile(j),
            inputs: || vec![tensor(&[4096, 1024], 2)],
        },
        Workload {
            name: "layer_norm/4096x1024",
            make: |j| function(layer_norm).jit_compile(j),
            inputs: || {
                vec![
                    tensor(&[4096, 1024], 11),
                    tensor(&[1024], 12),
                    tensor(&[1024], 13),
                ]
            },
        },
        Workload {
            name: "sum_axis0/4096x1024",
            make: |j| function(|x: Sym| x.reduce_sum(Some(&[0]), false)).jit_compile(j),
            inputs: || vec![tensor(&[4096, 1024], 2)],
        },
        Workload {
            name: "sum_axis1/256x256x64",
            make: |j| function(|x: Sym| x.reduce_sum(Some(&[1]), false)).jit_compile(j),
            inputs: || vec![tensor(&[256, 256, 64], 2)],
        },
        Workload {
            name: "transpose/4096x1024",
            make: |j| function(|x: Sym| x.transpose(&[1, 0])).jit_compile(j),
            inputs: || vec![tensor(&[4096, 1024], 2)],
        },
        Workload {
            name: "transpose_021/64x256x256",
            make: |j| function(|x: Sym| x.transpose(&[0, 2, 1])).jit_compile(j),
            inputs: || vec![tensor(&[64, 256, 256], 2)],
        },
        Workload {
            name: "int_div/1M",
            make: |j| function(int_div).jit_compile(j),
            inputs: || {
                vec![
                    ints(&[1 << 20], 1, 0, 1_000_000),
                    ints(&[1 << 20], 2, 1, 100),
                ]
            },
        },
        Workload {
            name: "embedding_bag/4096x16x256",
            make: |j| function(embedding_bag).jit_compile(j),
            inputs: || vec![tensor(&[32768, 256], 4), ints(&[4096, 16], 5, 0, 32768)],
        },
        Workload {
            name: "scatter_loop/64x4096x1M",
            make: |j| function(scatter_loop).jit_compile(j),
            inputs: || {
                vec![
                    tensor(&[1 << 20], 6),
                    ints(&[64, 4096], 7, 0, 1 << 20),
                    tensor(&[64, 4096], 8),
                ]
            },
        },
        Workload {
            name: "attention_bshd/8x256x8x64",
            make: |j| function(|q: Sym, k: Sym, v: Sym| attention(&q, &k, &v, true)).jit_compile(j),
            inputs: || attention_inputs(true),
        },
        Workload {
            name: "attention_bhsd/8x8x256x64",
            make: |j| {
                function(|q: Sym, k: Sym, v: Sym| attention(&q, &k, &v, false)).jit_compile(j)
            },
            inputs: || attention_inputs(false),
        },
        Workload {
            name: "mlp/256x512x512",
            make: |j| function(mlp).jit_compile(j),
            inputs: || mlp_inputs().to_vec(),
        },
        Workload {
            name: "mlp_grad/256x512x512",
            make: |j| function(mlp_xent).grad(&[2, 3, 4, 5]).jit_compile(j),
            inputs: || mlp_xent_inputs().to_vec(),
        },
        Workload {
            name: "rnn/256x64x512",
            make: |j| function(super::rnn).jit_compile(j),
            inputs: || super::rnn_inputs().to_vec(),
        },
        Workload {
            name: "rnn_grad/256x64x512",
            make: |j| function(super::rnn_loss).grad(&[0, 1, 2]).jit_compile(j),
            inputs: || super::rnn_inputs().to_vec(),
        },
        Workload {
            name: "layer_norm_grad/4096x1024",
            make: |j| {
                function(super::layer_norm_loss)
                    .grad(&[0, 1, 2])
                    .jit_compile(j)
            },
            inputs: || super::layer_norm_inputs().to_vec(),
        },
        Workload {
            name: "power/512x512",
            make: |j| function(super::power).jit_compile(j),
            inputs: || super::power_inputs().to_vec(),
        },
        Workload {
            name: "fori_scalar/100k",
            make: |j| function(super::scalar_loop).jit_compile(j),
            inputs: || vec![Tensor::from(ndarray::arr0(0.0f32).into_dyn())],
        },
    ]
}

/// The sum of every element of every output and the sum of their
/// magnitudes, in f64 (the checksum the peer script prints for the same
/// workload; the second scales the rounding the first may differ by).
pub fn checksum(outputs: &[Tensor]) -> (f64, f64) {
    let sum = |f: fn(f64) -> f64| {
        outputs
            .iter()
            .map(|t| -> f64 { values(t).into_iter().map(f).sum() })
            .sum()
    };
    (sum(|v| v), sum(f64::abs))
}

/// The elements of `t` as f64 (integers exactly).
pub fn values(t: &Tensor) -> Vec<f64> {
    let t = t.as_ref();
    if let Ok(v) = t.slice::<f32>() {
        v.iter().map(|&v| f64::from(v)).collect()
    } else if let Ok(v) = t.slice::<f64>() {
        v.to_vec()
    } else if let Ok(v) = t.slice::<i32>() {
        v.iter().map(|&v| f64::from(v)).collect()
    } else {
        // (No workload returns another type.)
        vec![f64::NAN]
    }
}
