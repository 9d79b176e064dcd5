//! The control-flow benchmark's RNN (`h = tanh(h @ w + u)`, 256 steps, h
//! (64, 512), w (512, 512), f32, compiled), timed per call by the wall
//! clock and by the CPU time of every thread of the process
//! (`CLOCK_PROCESS_CPUTIME_ID`): on a machine shared with other work, the
//! CPU time of a run on one thread (`RAYON_NUM_THREADS=1`, and
//! `MATMUL_NUM_THREADS=1` for a build with matrixmultiply) measures the
//! work done, where the wall clock also counts waiting for a core. Prints
//! the medians of 31 calls. See docs/benchmarks.md ("GEMM library").
//!
//! `RAYON_NUM_THREADS=1 cargo run --release --example rnn_cpu`
#![allow(clippy::unwrap_used, reason = "a measurement script")]

#[path = "../benches/workloads/mod.rs"]
#[allow(dead_code, reason = "the module also serves the benchmarks")]
mod workloads;

use tensorlift::{Sym, Tensor, fori_loop, function};
use workloads::tensor;

fn rnn(h: Sym, w: Sym, u: Sym) -> Vec<Sym> {
    fori_loop(0, 256, |_, c| vec![(c[0].matmul(&w) + &u).tanh()], &[h])
}

/// Nanoseconds on a CPU, summed over the process's threads
/// (`CLOCK_PROCESS_CPUTIME_ID`).
fn cpu_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec to write.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn main() {
    let w = tensor(&[512, 512], 5)
        .array_view::<f32>()
        .unwrap()
        .mapv(|v| v * 0.02);
    let inputs = [
        tensor(&[64, 512], 1),
        Tensor::from(w),
        tensor(&[64, 512], 7),
    ];
    let f = function(rnn).jit_compile(true);
    for _ in 0..3 {
        f.call(&inputs).unwrap();
    }
    let (mut wall, mut cpu) = (Vec::new(), Vec::new());
    for _ in 0..31 {
        let (t, c) = (std::time::Instant::now(), cpu_ns());
        std::hint::black_box(f.call(&inputs).unwrap());
        wall.push(t.elapsed().as_secs_f64() * 1e3);
        cpu.push((cpu_ns() - c) as f64 / 1e6);
    }
    for v in [&mut wall, &mut cpu] {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    }
    println!(
        "rnn 256 steps: wall {:.2} ms (min {:.2}), cpu {:.2} ms (min {:.2}), medians of 31",
        wall[15], wall[0], cpu[15], cpu[0]
    );
}
