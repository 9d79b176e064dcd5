//! Compile time of the suite's workloads (benches/workloads/suite.rs),
//! warm and cold: a warm compile follows another compile of the same
//! program (as criterion's loop times it); a cold one follows 48 MiB of
//! writes and 5 ms of sleep (the compiler's code and data evicted from
//! the caches, the pool's workers asleep), as a program's first compile
//! or one between other work meets it. Each both with the kernels
//! compiled on the pool's threads and sequentially
//! (`JitOptions::threads`). Prints the medians over rounds
//! (`COMPILE_COLD_ROUNDS`, default 100) for the workloads whose names
//! contain one of the arguments (all without any). docs/benchmarks.md,
//! "Turn by turn in one process".
//!
//! `cargo run --release --example compile_cold [FILTER ...]`
#![allow(clippy::unwrap_used, reason = "a measurement script")]

#[path = "../benches/workloads/mod.rs"]
#[allow(dead_code, reason = "the module also serves the benchmarks")]
mod workloads;

use std::time::{Duration, Instant};

use tensorlift::{JitOptions, TensorSpec};

fn main() {
    let filters: Vec<String> = std::env::args().skip(1).collect();
    let rounds: usize = std::env::var("COMPILE_COLD_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|r| *r > 0)
        .unwrap_or(100);
    let mut junk = vec![0u8; 48 << 20];
    println!("medians of {rounds} compiles (trace and compile), ms");
    for w in workloads::suite::all() {
        if !filters.is_empty() && !filters.iter().any(|f| w.name.contains(f.as_str())) {
            continue;
        }
        let specs: Vec<TensorSpec> = (w.inputs)()
            .iter()
            .map(|t| TensorSpec::known(t.dtype(), t.shape()))
            .collect();
        // [threads warm, threads cold, sequential warm, sequential cold]
        let mut times: [Vec<f64>; 4] = std::array::from_fn(|_| Vec::with_capacity(rounds));
        for r in 0..rounds {
            for (mode, samples) in times.iter_mut().enumerate() {
                let options = JitOptions {
                    threads: mode < 2,
                    ..JitOptions::default()
                };
                let compile = || (w.make)(true).jit_options(options).compile(&specs).unwrap();
                if mode % 2 == 1 {
                    for (i, b) in junk.iter_mut().enumerate().step_by(64) {
                        *b = (i + r) as u8;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                } else {
                    drop(compile());
                }
                let t = Instant::now();
                let c = compile();
                samples.push(t.elapsed().as_secs_f64() * 1e3);
                drop(c);
            }
        }
        let [tw, tc, sw, sc] = [0, 1, 2, 3].map(|m| {
            let mut v = times[m].clone();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        });
        println!(
            "{:28} threads: warm {tw:.2} cold {tc:.2}   sequential: warm {sw:.2} cold {sc:.2}",
            w.name
        );
        std::hint::black_box(&junk);
    }
}
