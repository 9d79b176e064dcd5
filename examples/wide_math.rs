//! What wide math (`JitOptions::wide_math`) buys: the benchmarks'
//! exp/tanh chain (f32 and f64), `sin(x)·cos(x)` and row softmax with it
//! off and on, with and without
//! threads (median of 21 batches, microseconds per call). The figures are
//! in docs/benchmarks.md. `ONLY=softmax` runs one workload.
//!
//! `cargo run --release --example wide_math`
#![allow(clippy::unwrap_used, reason = "a measurement script")]

use tensorlift::compiler::JitOptions;
use tensorlift::{Sym, Tensor, function};

#[path = "../benches/workloads/mod.rs"]
#[allow(dead_code, reason = "the other workloads are the benchmarks'")]
mod workloads;

use workloads::{softmax, transc};

fn sin_cos(x: Sym) -> Sym {
    x.sin() * x.cos()
}

type Workload = (&'static str, fn(Sym) -> Sym, Vec<usize>, bool);

fn main() {
    let workloads: Vec<Workload> = vec![
        ("transc", transc, vec![1 << 14], false),
        ("transc", transc, vec![1 << 16], false),
        ("transc", transc, vec![1 << 20], false),
        ("transc f64", transc, vec![1 << 20], true),
        ("sin*cos", sin_cos, vec![1 << 20], false),
        ("softmax", softmax, vec![4096, 1024], false),
    ];
    let only = std::env::var("ONLY").ok();
    for (name, body, shape, f64_data) in workloads {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        let n: usize = shape.iter().product();
        let data: Vec<f32> = (0..n)
            .map(|i| ((i * 7919) % 1000) as f32 / 250.0 - 2.0)
            .collect();
        let x = if f64_data {
            let data = data.into_iter().map(f64::from).collect();
            Tensor::from(ndarray::ArrayD::from_shape_vec(shape.clone(), data).unwrap())
        } else {
            Tensor::from(ndarray::ArrayD::from_shape_vec(shape.clone(), data).unwrap())
        };
        let mut line = format!("{name} {shape:?}:");
        for (wide_math, threads) in [(false, true), (true, true), (false, false), (true, false)] {
            let f = function(body).jit_compile(true).jit_options(JitOptions {
                wide_math,
                threads,
                ..JitOptions::default()
            });
            f.call(std::slice::from_ref(&x)).unwrap();
            let mut ts = Vec::new();
            for _ in 0..21 {
                let reps = ((1 << 23) / n).max(3);
                let t = std::time::Instant::now();
                for _ in 0..reps {
                    std::hint::black_box(f.call(std::slice::from_ref(&x)).unwrap());
                }
                ts.push(t.elapsed().as_secs_f64() / reps as f64 * 1e6);
            }
            ts.sort_by(|a, b| a.partial_cmp(b).unwrap());
            line += &format!(
                " wide={wide_math},threads={threads} {:.1}",
                ts[ts.len() / 2]
            );
        }
        println!("{line}");
    }
}
