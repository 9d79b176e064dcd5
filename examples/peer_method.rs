//! Our JIT on the benchmark workloads, timed the way
//! `../shared/peers/jit_throughput.py` times the peers: one warm-up call,
//! then the best of 7 single calls (criterion, in `benches/jit.rs`, reports
//! medians of many). Run it right after the peer script to compare like
//! with like; the figures are in docs/benchmarks.md.
//!
//! `cargo run --release --example peer_method`
#![allow(clippy::unwrap_used, reason = "a measurement script")]

use tensorlift::{Function, Tensor, function};

#[path = "../benches/workloads/mod.rs"]
#[allow(dead_code, reason = "the module also serves the benchmarks")]
mod workloads;

use workloads::{arith, mlp, mlp_inputs, softmax, tensor, transc};

/// The peers' `best`: one warm-up call, the minimum of 7 timed calls (ms).
fn best(f: &Function, inputs: &[Tensor]) -> f64 {
    f.call(inputs).unwrap();
    (0..7)
        .map(|_| {
            let t = std::time::Instant::now();
            std::hint::black_box(f.call(inputs).unwrap());
            t.elapsed().as_secs_f64() * 1e3
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    for n in [1usize << 20, 1 << 24] {
        let x = [tensor(&[n], 1)];
        let a = function(arith).jit_compile(true);
        println!("arith tensorlift n={n:<10} {:9.3} ms", best(&a, &x));
        let t = function(transc).jit_compile(true);
        println!("transc tensorlift n={n:<9} {:9.3} ms", best(&t, &x));
    }
    let s = function(softmax).jit_compile(true);
    println!(
        "softmax tensorlift 4096x1024     {:9.3} ms",
        best(&s, &[tensor(&[4096, 1024], 2)])
    );
    let ins = mlp_inputs();
    let m = function(mlp).jit_compile(true);
    println!("mlp tensorlift                   {:9.3} ms", best(&m, &ins));
}
