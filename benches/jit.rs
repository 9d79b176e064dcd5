//! Interpreter vs JIT on the workloads of DESIGN.md ("Quality bars"), on
//! identical inputs: arith and transcendental chains (1M, 16M f32), row
//! softmax 4096×1024, MLP 256×512×512, and compile time of K-op chains.
//! Run: `cargo bench --bench jit` (figures in docs/benchmarks.md).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    reason = "benchmark harness"
)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use tensorlift::{DType, Function, Sym, Tensor, TensorSpec, function};

#[allow(dead_code, reason = "the module also serves the other benchmarks")]
mod workloads;

use workloads::{arith, mlp, mlp_inputs, softmax, tensor, transc};

fn both(
    c: &mut Criterion,
    group: &str,
    param: String,
    bytes: u64,
    f: impl Fn(bool) -> Function,
    inputs: &[Tensor],
) {
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Bytes(bytes));
    g.sample_size(10);
    for (name, jit) in [("interpreter", false), ("jit", true)] {
        let func = f(jit);
        func.call(inputs).unwrap();
        g.bench_with_input(BenchmarkId::new(name, &param), inputs, |b, inputs| {
            b.iter(|| func.call(inputs).unwrap())
        });
    }
    g.finish();
}

fn elementwise(c: &mut Criterion) {
    for n in [1usize << 20, 1 << 24] {
        let x = [tensor(&[n], 1)];
        let bytes = (n * 8) as u64;
        both(
            c,
            "arith",
            format!("{n}"),
            bytes,
            |j| function(arith).jit_compile(j),
            &x,
        );
        both(
            c,
            "transcendental",
            format!("{n}"),
            bytes,
            |j| function(transc).jit_compile(j),
            &x,
        );
    }
}

fn softmax_bench(c: &mut Criterion) {
    let x = [tensor(&[4096, 1024], 2)];
    both(
        c,
        "softmax",
        "4096x1024".into(),
        4096 * 1024 * 8,
        |j| function(softmax).jit_compile(j),
        &x,
    );
}

fn mlp_bench(c: &mut Criterion) {
    let ins = mlp_inputs();
    let mut g = c.benchmark_group("mlp");
    g.throughput(Throughput::Elements(2 * 2 * 256 * 512 * 512));
    g.sample_size(10);
    for (name, jit) in [("interpreter", false), ("jit", true)] {
        let f = function(mlp).jit_compile(jit);
        f.call(&ins).unwrap();
        g.bench_function(BenchmarkId::new(name, "256x512x512"), |b| {
            b.iter(|| f.call(&ins).unwrap())
        });
    }
    g.finish();
}

fn compile_time(c: &mut Criterion) {
    let mut g = c.benchmark_group("compile");
    g.sample_size(10);
    for k in [10usize, 100, 1000] {
        g.bench_with_input(BenchmarkId::new("chain", k), &k, |b, &k| {
            b.iter(|| {
                let f = function(move |x: Sym| {
                    let mut x = x;
                    for i in 0..k {
                        x = if i % 2 == 1 { x * 1.0001 } else { x + 0.5 };
                    }
                    x
                })
                .jit_compile(true);
                f.compile(&[TensorSpec::known(DType::F32, &[1 << 16])])
                    .unwrap()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, elementwise, softmax_bench, mlp_bench, compile_time);
criterion_main!(benches);
