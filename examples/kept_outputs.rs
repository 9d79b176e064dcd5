//! Issue 17's two output disciplines for the arithmetic chain of
//! benches/workloads (`((x·1.5 + 0.25)·x − 0.75)·0.5 + x`, f32): 40 calls
//! whose outputs are dropped at once (the runtime's buffer cache hands the
//! next call the same memory) and 40 calls whose outputs the caller keeps
//! (every call writes fresh memory, first touched by the kernel). Prints
//! the median and the best call of each, in ms, for 1M, 4M and 16M
//! elements (or the sizes given); then 40 calls through `call_into`,
//! each writing into one of 40 buffers the caller allocated and touched
//! once before timing (a caller who keeps results in its own storage). `scripts/peers/kept_outputs.py` times
//! `jax.jit` the same way; run both in one window.
//!
//! `cargo run --release --example kept_outputs [N ...]`
#![allow(clippy::unwrap_used, reason = "a measurement script")]

#[path = "../benches/workloads/mod.rs"]
#[allow(dead_code, reason = "the module also serves the benchmarks")]
mod workloads;

use tensorlift::{Tensor, TensorMut, function};

fn main() {
    let mut sizes: Vec<usize> = std::env::args()
        .skip(1)
        .map(|s| s.parse().unwrap())
        .collect();
    if sizes.is_empty() {
        sizes = vec![1 << 20, 1 << 22, 1 << 24];
    }
    let f = function(workloads::arith).jit_compile(true);
    for n in sizes {
        let x = workloads::tensor(&[n], 1);
        f.call(std::slice::from_ref(&x)).unwrap();
        let mut line = format!("arith {n:>9}");
        for keep in [false, true] {
            let mut kept: Vec<Vec<Tensor>> = Vec::new();
            let mut ts = Vec::new();
            for _ in 0..40 {
                let t = std::time::Instant::now();
                let out = f.call(std::slice::from_ref(&x)).unwrap();
                ts.push(t.elapsed().as_secs_f64() * 1e3);
                if keep {
                    kept.push(out);
                }
            }
            ts.sort_by(f64::total_cmp);
            let what = if keep { "kept" } else { "dropped" };
            line += &format!("  {what} median {:.3} ms best {:.3}", ts[20], ts[0]);
        }
        // The allocator aligns these as the runtime's own buffers (16
        // bytes), so the code writes into them in place (a less aligned
        // buffer would be copied into).
        let mut store: Vec<Vec<f32>> = (0..40).map(|_| vec![1.0; n]).collect();
        let shape = [n];
        let mut ts = Vec::new();
        for buf in &mut store {
            let mut out = [TensorMut::from_slice(&shape, buf).unwrap()];
            let t = std::time::Instant::now();
            f.call_into(std::slice::from_ref(&x), &mut out).unwrap();
            ts.push(t.elapsed().as_secs_f64() * 1e3);
        }
        ts.sort_by(f64::total_cmp);
        line += &format!("  call_into median {:.3} ms best {:.3}", ts[20], ts[0]);
        println!("{line}");
    }
}
