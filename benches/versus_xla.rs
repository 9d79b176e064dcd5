//! Issue 17's broad suite against XLA in one process, turn by turn: JAX
//! runs in the embedded interpreter on the programs and inputs of
//! `scripts/peers/suite.py`, our compiled functions on those of
//! benches/workloads/suite.rs, and each round times one sample of ours
//! and one of XLA's back to back (in alternating order), so that both
//! see the same state of a noisy host. The figure to read is the median
//! over the rounds of ours / XLA's per-call time; the separate windows of
//! `benches/suite.rs` and `suite.py` are minutes apart, and this host's
//! slow stretches (30–50% for tens of seconds) swing their ratios.
//!
//! A sample is `k` calls (`k` chosen so that a sample lasts about
//! `TENSORLIFT_VS_SAMPLE_MS`, default 100 ms), timed as a whole, with the
//! outputs dropped at once (`dropped`) or held until the sample ends
//! (`kept`), as both suite scripts time them. Between samples the
//! process sleeps 5 ms (untimed), so that neither side's spinning threads
//! run into the other's sample.
//!
//! With `--first`, each workload also gets rounds of one fresh function's
//! first call (trace, compile and run: issue 17's "first call ≤ XLA's
//! compile alone") and one fresh compile of ours, each beside one fresh
//! `jax.jit(...).lower(...).compile()`.
//!
//! Needs JAX on the embedded interpreter's path (the peers' venv):
//! `scripts/peers/versus_xla.sh [--rounds N] [--first] [--json PATH]
//! [FILTER ...]` (docs/benchmarks.md).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    reason = "benchmark harness"
)]

use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::PyDict;
use tensorlift::{Function, Tensor, TensorSpec};

#[allow(dead_code, reason = "the module also serves the other benchmarks")]
mod workloads;

use workloads::suite::{all, checksum};

/// The Python side: `prepare(name)` jits the peer script's workload
/// `name` on its inputs, runs it once and returns `sample(k, keep)`, the
/// mean seconds per call over `k` calls, the checksum of one output, and
/// `compile_fresh()`, the seconds one fresh `jit(...).lower(...).compile()`
/// takes (a fresh function each time, so nothing is cached).
const PEER: &std::ffi::CStr = c"
import time
import jax
import jax.numpy as jnp
import suite

def prepare(name):
    for n, factory, inputs in suite.WORKLOADS:
        if n != name:
            continue
        xs = [jnp.asarray(a) for a in inputs()]
        f = jax.jit(factory())
        out = jax.block_until_ready(f(*xs))

        def sample(k, keep):
            held = []
            t = time.perf_counter()
            for _ in range(k):
                y = jax.block_until_ready(f(*xs))
                if keep:
                    held.append(y)
                del y
            e = time.perf_counter() - t
            del held
            return e / k

        def compile_fresh():
            g = jax.jit(factory())
            t = time.perf_counter()
            g.lower(*xs).compile()
            return time.perf_counter() - t

        return sample, tuple(suite.checksum(out)), compile_fresh
    return None
";

/// Mean seconds per call of `f` over `k` calls, its outputs dropped at
/// once or held until the end.
fn ours(f: &Function, inputs: &[Tensor], k: usize, keep: bool) -> f64 {
    let mut held = Vec::with_capacity(if keep { k } else { 0 });
    let t = Instant::now();
    for _ in 0..k {
        let y = f.call(inputs).unwrap();
        if keep {
            held.push(y);
        }
    }
    let e = t.elapsed().as_secs_f64();
    drop(held);
    e / k as f64
}

/// `rounds` rounds of the three timings, in the order given and reversed
/// in alternate rounds, 5 ms of untimed sleep before each: the seconds
/// each returned, per timing.
fn turns(rounds: usize, timings: [&dyn Fn() -> f64; 3]) -> [Vec<f64>; 3] {
    let mut times: [Vec<f64>; 3] = Default::default();
    for r in 0..rounds {
        let order = if r % 2 == 0 { [0, 1, 2] } else { [2, 1, 0] };
        for i in order {
            std::thread::sleep(Duration::from_millis(5));
            times[i].push(timings[i]());
        }
    }
    times
}

/// Calls per sample for a call of `single` seconds.
fn calls(single: f64, sample: f64) -> usize {
    ((sample / single.max(1e-7)).round() as usize).max(1)
}

fn quantile(v: &[f64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let i = (q * (v.len() - 1) as f64).round() as usize;
    v[i]
}

fn main() {
    let mut rounds = 21usize;
    let mut first = false;
    let mut json = None;
    let mut filter = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--rounds" => {
                rounds = args
                    .next()
                    .and_then(|r| r.parse().ok())
                    .filter(|r| *r > 0)
                    .expect("--rounds takes a number of rounds, 1 or more")
            }
            "--first" => first = true,
            "--json" => json = args.next(),
            // cargo bench's own flags (`--bench`).
            _ if a.starts_with('-') => {}
            _ => filter.push(a),
        }
    }
    let sample_s = std::env::var("TENSORLIFT_VS_SAMPLE_MS")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(100.0)
        / 1e3;
    let prepare = Python::attach(|py| -> PyResult<Option<Py<PyAny>>> {
        let peers = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/peers");
        py.import("sys")?
            .getattr("path")?
            .call_method1("insert", (0, peers))?;
        if py.import("jax").is_err() {
            return Ok(None);
        }
        let g = PyDict::new(py);
        py.run(PEER, Some(&g), None)?;
        Ok(Some(g.get_item("prepare")?.unwrap().unbind()))
    })
    .unwrap();
    // (`cargo bench` runs every benchmark: without JAX this one says why
    // it did nothing.)
    let Some(prepare) = prepare else {
        println!(
            "versus_xla: skipped, JAX is not importable by the embedded Python; \
             run scripts/peers/versus_xla.sh, which puts the peers' venv on PYTHONPATH"
        );
        return;
    };
    let jax = Python::attach(|py| {
        py.import("jax")
            .and_then(|j| j.getattr("__version__"))
            .map(|v| v.to_string())
            .unwrap()
    });
    println!(
        "ours / XLA (jax {jax}), turn by turn: {rounds} rounds of one ~{:.0} ms sample each, \
         {} threads for ours",
        sample_s * 1e3,
        tensorlift::runtime::pool::threads()
    );
    let mut results = serde_json::Map::new();
    let mut table = Vec::new();
    let mut first_table = Vec::new();
    for w in all() {
        if !filter.is_empty() && !filter.iter().any(|f| w.name.contains(f.as_str())) {
            continue;
        }
        let inputs = (w.inputs)();
        let f = (w.make)(true);
        let ours_sum = checksum(&f.call(&inputs).unwrap());
        let (sample, xla_sum, compile_fresh) = Python::attach(|py| {
            let r = prepare
                .call1(py, (w.name,))
                .map_err(|e| format!("{}: {e}", w.name))
                .unwrap();
            assert!(!r.is_none(py), "{}: not in suite.py", w.name);
            r.extract::<(Py<PyAny>, (f64, f64), Py<PyAny>)>(py).unwrap()
        });
        let xla = |k: usize, keep: bool| -> f64 {
            Python::attach(|py| sample.call1(py, (k, keep)).and_then(|s| s.extract(py))).unwrap()
        };
        // Warm both up, then size their samples.
        for _ in 0..3 {
            ours(&f, &inputs, 1, false);
            xla(1, false);
        }
        let k_ours = calls(ours(&f, &inputs, 3, false), sample_s);
        let k_xla = calls(xla(3, false), sample_s);
        let mut entry = serde_json::Map::new();
        let mut line = format!("{:28}", w.name);
        let mut row = format!("| {} |", w.name);
        for keep in [false, true] {
            // One untimed sample each first (the first kept sample maps
            // fresh memory on both sides).
            ours(&f, &inputs, k_ours, keep);
            xla(k_xla, keep);
            let (mut a, mut b, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
            for r in 0..rounds {
                let mut pair = [0.0; 2];
                let order = if r % 2 == 0 { [0, 1] } else { [1, 0] };
                for side in order {
                    std::thread::sleep(Duration::from_millis(5));
                    pair[side] = match side {
                        0 => ours(&f, &inputs, k_ours, keep),
                        _ => xla(k_xla, keep),
                    };
                }
                a.push(pair[0]);
                b.push(pair[1]);
                ratio.push(pair[0] / pair[1]);
            }
            let kind = if keep { "kept" } else { "dropped" };
            let wins = ratio.iter().filter(|r| **r < 1.0).count();
            let [ours_ms, xla_ms] = [&a, &b].map(|v| quantile(v, 0.5) * 1e3);
            let [r25, r50, r75] = [0.25, 0.5, 0.75].map(|q| quantile(&ratio, q));
            line += &format!(
                "  {kind} {ours_ms:.3} / {xla_ms:.3} ms = {r50:.2}× ({r25:.2}–{r75:.2}, \
                 {wins}/{rounds} rounds ahead)"
            );
            row += &format!(
                " {ours_ms:.3} | {xla_ms:.3} | {r50:.2} ({r25:.2}–{r75:.2}) | {wins}/{rounds} |"
            );
            entry.insert(
                kind.into(),
                serde_json::json!({
                    "ours_ms": a.iter().map(|v| v * 1e3).collect::<Vec<_>>(),
                    "xla_ms": b.iter().map(|v| v * 1e3).collect::<Vec<_>>(),
                    "ratio_median": r50,
                    "ratio_p25": r25,
                    "ratio_p75": r75,
                    "rounds_ahead": wins,
                }),
            );
        }
        if first {
            let specs: Vec<TensorSpec> = inputs
                .iter()
                .map(|t| TensorSpec::known(t.dtype(), t.shape()))
                .collect();
            let xla_compile = || -> f64 {
                Python::attach(|py| compile_fresh.call0(py).and_then(|s| s.extract(py))).unwrap()
            };
            let [ours_first, ours_compile, xla] = turns(
                rounds,
                [
                    &|| {
                        let t = Instant::now();
                        let y = (w.make)(true).call(&inputs).unwrap();
                        let e = t.elapsed().as_secs_f64();
                        drop(y);
                        e
                    },
                    &|| {
                        let t = Instant::now();
                        let c = (w.make)(true).compile(&specs).unwrap();
                        let e = t.elapsed().as_secs_f64();
                        drop(c);
                        e
                    },
                    &xla_compile,
                ],
            );
            let first_ratio: Vec<f64> = ours_first.iter().zip(&xla).map(|(a, b)| a / b).collect();
            let speedup: Vec<f64> = xla.iter().zip(&ours_compile).map(|(a, b)| a / b).collect();
            let under = first_ratio.iter().filter(|r| **r <= 1.0).count();
            let [first_ms, compile_ms, xla_ms] =
                [&ours_first, &ours_compile, &xla].map(|v| quantile(v, 0.5) * 1e3);
            let [f25, f50, f75] = [0.25, 0.5, 0.75].map(|q| quantile(&first_ratio, q));
            let [s25, s50, s75] = [0.25, 0.5, 0.75].map(|q| quantile(&speedup, q));
            line += &format!(
                "\n{:28}  first call {first_ms:.2} / XLA compile {xla_ms:.2} ms = {f50:.2}× \
                 ({f25:.2}–{f75:.2}, {under}/{rounds} rounds at most 1.0×)  \
                 compile {compile_ms:.2} ms, XLA's ÷ ours {s50:.0} ({s25:.0}–{s75:.0})",
                ""
            );
            first_table.push(format!(
                "| {} | {first_ms:.2} | {xla_ms:.2} | {f50:.2} ({f25:.2}–{f75:.2}) | \
                 {under}/{rounds} | {compile_ms:.2} | {s50:.0} ({s25:.0}–{s75:.0}) |",
                w.name
            ));
            entry.insert(
                "first".into(),
                serde_json::json!({
                    "ours_first_ms": ours_first.iter().map(|v| v * 1e3).collect::<Vec<_>>(),
                    "ours_compile_ms": ours_compile.iter().map(|v| v * 1e3).collect::<Vec<_>>(),
                    "xla_compile_ms": xla.iter().map(|v| v * 1e3).collect::<Vec<_>>(),
                    "first_over_xla_compile_median": f50,
                    "xla_compile_over_ours_median": s50,
                }),
            );
        }
        println!("{line}");
        table.push(row);
        println!(
            "{:28}  checksums ours {:.6e} ({:.6e}), XLA {:.6e} ({:.6e})",
            "", ours_sum.0, ours_sum.1, xla_sum.0, xla_sum.1
        );
        entry.insert("checksum_ours".into(), serde_json::json!(ours_sum));
        entry.insert("checksum_xla".into(), serde_json::json!(xla_sum));
        results.insert(w.name.into(), entry.into());
    }
    println!(
        "\n| workload | dropped: ours ms | XLA ms | × (IQR) | rounds ahead \
         | kept: ours ms | XLA ms | × (IQR) | rounds ahead |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for row in table {
        println!("{row}");
    }
    if first {
        println!(
            "\n| workload | first call: ours ms | XLA compile ms | × (IQR) | rounds at most 1.0× \
             | compile: ours ms | XLA's ÷ ours (IQR) |"
        );
        println!("|---|---|---|---|---|---|---|");
        for row in first_table {
            println!("{row}");
        }
    }
    if let Some(path) = json {
        let doc = serde_json::json!({ "jax": jax, "rounds": rounds, "workloads": results });
        std::fs::write(&path, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    }
}
