//! Compiled gradients (issue 15), f32: the MLP of benches/jit.rs under a
//! softmax cross-entropy loss (gradient with respect to both weights and
//! both biases), a layer norm over the last axis of a 4096×1024 input
//! (`sum(y * dy)`; gradient with respect to x, gamma and beta), and the
//! 256-step RNN of benches/control_flow.rs (`sum(h²)` of the final state;
//! gradient with respect to h0, w and u). The `grad_run` group times a call
//! of the compiled gradient, `grad_compile` the trace, differentiation,
//! optimization and compilation of a fresh one. The workloads are in
//! benches/workloads; the peers' figures for the same workloads come from
//! `scripts/peers/autodiff.py`; run both in one window.
//! Run: `cargo bench --bench autodiff`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    reason = "benchmark harness"
)]

use criterion::{Criterion, criterion_group, criterion_main};
use tensorlift::{DType, Function, Tensor, TensorSpec, function};

#[allow(dead_code, reason = "the module also serves the other benchmarks")]
mod workloads;

use workloads::{
    layer_norm_inputs, layer_norm_loss, mlp_xent, mlp_xent_inputs, rnn_inputs, rnn_loss,
};

/// A benchmarked gradient: its name, a builder of a fresh compiled
/// gradient function, and its inputs.
struct Case {
    name: &'static str,
    make: fn() -> Function,
    inputs: Vec<Tensor>,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "mlp_xent_256x512x512",
            make: || function(mlp_xent).grad(&[2, 3, 4, 5]).jit_compile(true),
            inputs: mlp_xent_inputs().to_vec(),
        },
        Case {
            name: "layer_norm_4096x1024",
            make: || function(layer_norm_loss).grad(&[0, 1, 2]).jit_compile(true),
            inputs: layer_norm_inputs().to_vec(),
        },
        Case {
            name: "rnn_256x64x512",
            make: || function(rnn_loss).grad(&[0, 1, 2]).jit_compile(true),
            inputs: rnn_inputs().to_vec(),
        },
    ]
}

fn specs(inputs: &[Tensor]) -> Vec<TensorSpec> {
    inputs
        .iter()
        .map(|t| TensorSpec::known(DType::F32, t.shape()))
        .collect()
}

fn run(c: &mut Criterion) {
    let mut g = c.benchmark_group("grad_run");
    g.sample_size(10);
    for case in cases() {
        let f = (case.make)().compile(&specs(&case.inputs)).unwrap();
        f.call(&case.inputs).unwrap();
        g.bench_function(case.name, |b| b.iter(|| f.call(&case.inputs).unwrap()));
    }
    g.finish();
}

fn compile_time(c: &mut Criterion) {
    let mut g = c.benchmark_group("grad_compile");
    g.sample_size(10);
    for case in cases() {
        let specs = specs(&case.inputs);
        g.bench_function(case.name, |b| {
            b.iter(|| (case.make)().compile(&specs).unwrap())
        });
    }
    g.finish();
}

criterion_group!(benches, run, compile_time);
criterion_main!(benches);
