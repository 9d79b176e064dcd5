//! Control flow compiled into `main` (issue 14): the per-iteration cost of
//! a scalar-body `fori_loop`, a 256-step RNN cell over a (64, 512) state,
//! a power iteration run to convergence (a data-dependent trip count), and
//! the compile time of each. The peers' figures for the same workloads come
//! from `scripts/peers/control_flow.py`; run both in one window.
//! Run: `cargo bench --bench control_flow` (figures in docs/benchmarks.md).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    reason = "benchmark harness"
)]

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use tensorlift::{DType, Function, Sym, Tensor, TensorSpec, fori_loop, function};

#[allow(dead_code, reason = "the module also serves benches/jit.rs")]
mod workloads;

use workloads::{SCALAR_STEPS, power, power_inputs, rnn, rnn_inputs, scalar_loop};

/// `c = c + i` on an i32 scalar, `SCALAR_STEPS` times: a body of one
/// integer add (1 cycle of latency), so the time is the loop's own cost
/// per iteration.
fn counter_loop(x: Sym) -> Vec<Sym> {
    fori_loop(0, SCALAR_STEPS, |i, c| vec![&c[0] + i], &[x])
}

fn scalar(v: f32) -> Tensor {
    Tensor::from(ndarray::arr0(v).into_dyn())
}

fn run(c: &mut Criterion, group: &str, f: impl Fn(bool) -> Function, inputs: &[Tensor]) {
    let mut g = c.benchmark_group(group);
    g.sample_size(10);
    for (name, jit) in [("interpreter", false), ("jit", true)] {
        let func = f(jit);
        func.call(inputs).unwrap();
        g.bench_with_input(BenchmarkId::new(name, ""), inputs, |b, inputs| {
            b.iter(|| func.call(inputs).unwrap())
        });
    }
    g.finish();
}

fn loops(c: &mut Criterion) {
    run(
        c,
        "fori_scalar_100k",
        |j| function(scalar_loop).jit_compile(j),
        &[scalar(0.0)],
    );
    run(
        c,
        "fori_counter_100k",
        |j| function(counter_loop).jit_compile(j),
        &[Tensor::from(ndarray::arr0(0i32).into_dyn())],
    );
    run(
        c,
        "rnn_256x64x512",
        |j| function(rnn).jit_compile(j),
        &rnn_inputs(),
    );
    run(
        c,
        "power_512",
        |j| function(power).jit_compile(j),
        &power_inputs(),
    );
}

fn compile_time(c: &mut Criterion) {
    let mut g = c.benchmark_group("compile_loops");
    g.sample_size(10);
    let f32s = |dims: &[usize]| TensorSpec::known(DType::F32, dims);
    g.bench_function("fori_scalar", |b| {
        b.iter(|| {
            function(scalar_loop)
                .jit_compile(true)
                .compile(&[f32s(&[])])
                .unwrap()
        })
    });
    g.bench_function("rnn", |b| {
        b.iter(|| {
            function(rnn)
                .jit_compile(true)
                .compile(&[f32s(&[64, 512]), f32s(&[512, 512]), f32s(&[64, 512])])
                .unwrap()
        })
    });
    g.bench_function("power", |b| {
        b.iter(|| {
            function(power)
                .jit_compile(true)
                .compile(&[f32s(&[512, 512]), f32s(&[512, 1])])
                .unwrap()
        })
    });
    g.finish();
}

criterion_group!(benches, loops, compile_time);
criterion_main!(benches);
