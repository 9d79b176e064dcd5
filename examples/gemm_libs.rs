//! f32 GEMM, `out = lhs @ rhs` (row-major, overwritten), at the shapes the
//! benchmarks run: matrixmultiply (what the JIT called before; its threads
//! are set by `MATMUL_NUM_THREADS`, read once per process) against the
//! `gemm` crate on one thread, with its own rayon parallelism, and as the
//! runtime calls it (`kernels::gemm`: split over `tensorlift_runtime::pool` by
//! `GemmDims::split`). Every variant runs once per round, the rounds
//! alternate the variants, and each prints its median of 21 rounds (µs
//! per call): by the wall clock, then by the CPU time of the process's
//! threads (`CLOCK_PROCESS_CPUTIME_ID`), which on a shared machine
//! measures a one-thread variant's work without the waits for a core (a
//! threaded one's includes its threads' spinning). See docs/benchmarks.md
//! ("GEMM library").
//!
//! `MATMUL_NUM_THREADS=1 cargo run --release --example gemm_libs`, then
//! again with `MATMUL_NUM_THREADS=2`.
#![allow(
    clippy::unwrap_used,
    clippy::undocumented_unsafe_blocks,
    reason = "a measurement script"
)]

use tensorlift::runtime::kernels::gemm::{GemmDims, gemm as runtime_gemm};

fn data(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s as f32 / u32::MAX as f32) * 2.0 - 1.0
        })
        .collect()
}

const VARIANTS: [&str; 5] = [
    "matrixmultiply",
    "gemm 1 thread",
    "gemm Rayon(2)",
    "runtime, 1 thread",
    "runtime, pool",
];

fn call(v: usize, (m, k, n): (usize, usize, usize), a: &[f32], b: &[f32], c: &mut [f32]) {
    let d = GemmDims {
        b: 1,
        m,
        k,
        n,
        lhs_strides: [0, k as isize, 1],
        rhs_strides: [0, n as isize, 1],
    };
    let (ap, bp, cp) = (a.as_ptr(), b.as_ptr(), c.as_mut_ptr());
    let g = |par| unsafe {
        gemm::gemm(
            m, n, k, cp, 1, n as isize, false, ap, 1, k as isize, bp, 1, n as isize, 0.0, 1.0,
            false, false, false, par,
        )
    };
    match v {
        0 => unsafe {
            matrixmultiply::sgemm(
                m, k, n, 1.0, ap, k as isize, 1, bp, n as isize, 1, 0.0, cp, n as isize, 1,
            )
        },
        1 => g(gemm::Parallelism::None),
        2 => g(gemm::Parallelism::Rayon(2)),
        3 => unsafe { runtime_gemm(&d, ap, bp, cp, false, false) },
        _ => unsafe { runtime_gemm(&d, ap, bp, cp, true, false) },
    }
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
    let threads = std::env::var("MATMUL_NUM_THREADS").unwrap_or_else(|_| "default".into());
    println!("MATMUL_NUM_THREADS={threads}; µs per call, median of 21 rounds: wall / CPU");
    println!("| m×k×n | {} |", VARIANTS.join(" | "));
    for shape in [
        (64, 512, 512),
        (256, 512, 512),
        (512, 512, 512),
        (128, 256, 256),
        (32, 128, 128),
        (8, 64, 64),
    ] {
        let (m, k, n) = shape;
        let (a, b) = (data(m * k, 1), data(k * n, 2));
        let mut c = vec![0f32; m * n];
        let reps = (50_000_000 / (m * k * n)).clamp(3, 20_000);
        let mut ts = vec![(Vec::new(), Vec::new()); VARIANTS.len()];
        for round in 0..22 {
            for (v, (wall, cpu)) in ts.iter_mut().enumerate() {
                let (start, c0) = (std::time::Instant::now(), cpu_ns());
                for _ in 0..reps {
                    call(v, shape, &a, &b, &mut c);
                    std::hint::black_box(&mut c);
                }
                // Round 0 warms up (pools started, buffers allocated).
                if round > 0 {
                    wall.push(start.elapsed().as_secs_f64() / reps as f64 * 1e6);
                    cpu.push((cpu_ns() - c0) as f64 / reps as f64 / 1e3);
                }
            }
        }
        let median = |t: &mut Vec<f64>| {
            t.sort_by(|x, y| x.partial_cmp(y).unwrap());
            t[t.len() / 2]
        };
        let medians: Vec<String> = ts
            .iter_mut()
            .map(|(wall, cpu)| format!("{:.2} / {:.2}", median(wall), median(cpu)))
            .collect();
        println!("| {m}×{k}×{n} | {} |", medians.join(" | "));
    }
}
