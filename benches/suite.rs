//! Issue 17's broad suite (benches/workloads/suite.rs) under both output
//! disciplines and from a cold start: `dropped` calls whose outputs are
//! dropped at once (the runtime's buffer cache hands the next call the
//! same memory), `kept` calls whose outputs the caller holds until the
//! sample ends (every call writes fresh memory), `compile` the trace and
//! compilation of a fresh function, `first_call` a fresh function's trace,
//! compilation and first run. Before timing, every workload runs once
//! interpreted and once compiled: the two must agree, and the compiled
//! checksums (the sum of every output element) go to
//! `target/suite/checksums.json`, which `scripts/suite_table.py` compares
//! with the ones `scripts/peers/suite.py` prints for JAX.
//!
//! Run: `cargo bench --bench suite [-- FILTER]`, then
//! `/tmp/peers/bin/python scripts/peers/suite.py --json target/suite/jax.json`
//! and `python3 scripts/suite_table.py` (docs/benchmarks.md).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    reason = "benchmark harness"
)]

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, SamplingMode};
use tensorlift::{Tensor, TensorSpec};

#[allow(dead_code, reason = "the module also serves the other benchmarks")]
mod workloads;

use workloads::suite::{Workload, all, checksum, values};

/// Runs `w` interpreted and compiled, panics where they differ by more
/// than rounding, and returns the compiled outputs' checksum (the sum
/// of their elements and of their magnitudes).
fn check(w: &Workload, inputs: &[Tensor]) -> (f64, f64) {
    let interp = (w.make)(false).call(inputs).unwrap();
    let jit = (w.make)(true).call(inputs).unwrap();
    assert_eq!(interp.len(), jit.len(), "{}", w.name);
    for (a, b) in interp.iter().zip(&jit) {
        assert_eq!(a.shape(), b.shape(), "{}", w.name);
        let (a, b) = (values(a), values(b));
        let scale = a.iter().fold(1.0_f64, |m, v| m.max(v.abs()));
        let worst = a
            .iter()
            .zip(&b)
            .fold(0.0_f64, |m, (x, y)| m.max((x - y).abs()));
        assert!(
            worst <= 1e-3 * scale,
            "{}: interpreter and JIT differ by {worst} (scale {scale})",
            w.name
        );
    }
    checksum(&jit)
}

fn bench(c: &mut Criterion, w: &Workload, inputs: &[Tensor]) {
    let (family, size) = w.name.split_once('/').unwrap();
    let mut g = c.benchmark_group(format!("suite_{family}"));
    g.sample_size(10).sampling_mode(SamplingMode::Flat);
    let f = (w.make)(true);
    f.call(inputs).unwrap();
    g.bench_with_input(BenchmarkId::new("dropped", size), inputs, |b, inputs| {
        b.iter(|| f.call(inputs).unwrap())
    });
    g.bench_with_input(BenchmarkId::new("kept", size), inputs, |b, inputs| {
        b.iter_with_large_drop(|| f.call(inputs).unwrap())
    });
    let specs: Vec<TensorSpec> = inputs
        .iter()
        .map(|t| TensorSpec::known(t.dtype(), t.shape()))
        .collect();
    g.warm_up_time(Duration::from_millis(300));
    g.bench_with_input(BenchmarkId::new("compile", size), &specs, |b, specs| {
        b.iter(|| (w.make)(true).compile(specs).unwrap())
    });
    g.bench_with_input(BenchmarkId::new("first_call", size), inputs, |b, inputs| {
        b.iter(|| (w.make)(true).call(inputs).unwrap())
    });
    g.finish();
}

fn main() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let mut sums = serde_json::Map::new();
    for w in all() {
        let (family, size) = w.name.split_once('/').unwrap();
        let picked = filter.is_empty()
            || ["dropped", "kept", "compile", "first_call"]
                .iter()
                .any(|kind| {
                    let id = format!("suite_{family}/{kind}/{size}");
                    filter.iter().any(|f| id.contains(f.as_str()))
                });
        if !picked {
            continue;
        }
        let inputs = (w.inputs)();
        let (sum, abs) = check(&w, &inputs);
        println!("checksum {:32} {sum:.6e} (magnitudes {abs:.6e})", w.name);
        sums.insert(w.name.into(), serde_json::json!([sum, abs]));
        bench(&mut c, &w, &inputs);
    }
    let dir = std::path::Path::new(&target).join("suite");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("checksums.json");
    let mut all_sums: serde_json::Map<String, serde_json::Value> = std::fs::read(&path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    all_sums.extend(sums);
    std::fs::write(&path, serde_json::to_vec_pretty(&all_sums).unwrap()).unwrap();
    c.final_summary();
}
