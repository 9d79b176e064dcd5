//! Where a second core starts to pay: times the arith chain and the
//! exp/tanh chain of the benchmarks at growing sizes with and without
//! threads (median of 31 batches). The crossover it shows set
//! `PARALLEL_WORK` (compiler/src/rt.rs); see docs/benchmarks.md.
//!
//! `cargo run --release --example parallel_crossover`
#![allow(clippy::unwrap_used, reason = "a measurement script")]

use tensorlift::compiler::JitOptions;
use tensorlift::{Sym, Tensor, function};
fn arith(x: Sym) -> Sym {
    ((&x * 1.5 + 0.25) * &x - 0.75) * 0.5 + &x
}
fn transc(x: Sym) -> Sym {
    (-&x * &x).exp() * x.tanh() + x.abs().sqrt()
}
fn main() {
    for n in (13..=20).map(|p| 1usize << p) {
        let data: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 / 500.0 - 1.0).collect();
        let x = Tensor::from(ndarray::ArrayD::from_shape_vec(vec![n], data).unwrap());
        // Each row: the median per call on one thread, then with the pool.
        for (name, body) in [("arith", arith as fn(Sym) -> Sym), ("transc", transc)] {
            let mut line = format!("{name} n={n}:");
            for threads in [false, true] {
                let f = function(body).jit_compile(true).jit_options(JitOptions {
                    threads,
                    ..JitOptions::default()
                });
                f.call(std::slice::from_ref(&x)).unwrap();
                let mut ts = Vec::new();
                for _ in 0..31 {
                    let reps = (1 << 22) / n;
                    let t = std::time::Instant::now();
                    for _ in 0..reps {
                        std::hint::black_box(f.call(std::slice::from_ref(&x)).unwrap());
                    }
                    ts.push(t.elapsed().as_secs_f64() / reps as f64 * 1e6);
                }
                ts.sort_by(|a, b| a.partial_cmp(b).unwrap());
                line += &format!(" threads={threads} {:.2} us", ts[ts.len() / 2]);
            }
            println!("{line}");
        }
    }
}
