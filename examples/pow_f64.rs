//! f64 `pow` three ways: glibc's `pow` per element (`exact` mode), the
//! inline 128-bit approximation (`wide_math` off) and the wide routine
//! (default), with and without threads, on 1M elements (median of 15
//! calls, milliseconds). The figures are in docs/compiler.md.
//!
//! `cargo run --release --example pow_f64`
#![allow(clippy::unwrap_used, reason = "a measurement script")]

use tensorlift::compiler::JitOptions;
use tensorlift::{Sym, Tensor, function};

fn main() {
    let n = 1 << 20;
    let x: Vec<f64> = (0..n).map(|i| 0.5 + (i % 1000) as f64 * 0.01).collect();
    let y: Vec<f64> = (0..n).map(|i| -20.0 + (i % 777) as f64 * 0.05).collect();
    let args = [
        Tensor::from(ndarray::ArrayD::from_shape_vec(vec![n], x).unwrap()),
        Tensor::from(ndarray::ArrayD::from_shape_vec(vec![n], y).unwrap()),
    ];
    for threads in [false, true] {
        let mut line = format!("f64 pow 1M, threads={threads}:");
        for (name, exact, wide_math) in [
            ("libm", true, false),
            ("inline", false, false),
            ("wide", false, true),
        ] {
            let f = function(|x: Sym, y: Sym| x.pow(&y))
                .jit_compile(true)
                .jit_options(JitOptions {
                    exact,
                    threads,
                    wide_math,
                    ..JitOptions::default()
                });
            f.call(&args).unwrap();
            let mut ts: Vec<f64> = (0..15)
                .map(|_| {
                    let t = std::time::Instant::now();
                    std::hint::black_box(f.call(&args).unwrap());
                    t.elapsed().as_secs_f64() * 1e3
                })
                .collect();
            ts.sort_by(|a, b| a.partial_cmp(b).unwrap());
            line += &format!(" {name} {:.2} ms", ts[7]);
        }
        println!("{line}");
    }
}
