//! What the wide row dot product (`tl_wide_dot_*`, docs/compiler.md,
//! "Matrix-vector products") buys: `A @ v` and a row-wise `sum(x * y)`,
//! f32 and f64, with wide math off (the inline 128-bit reduction) and on,
//! one thread. The two compiled functions are timed alternately, batch by
//! batch (the machine is shared): the median batch of each, microseconds
//! per call, and the median ratio of adjacent batches.
//!
//! `cargo run --release --example matvec` (`ONLY=f32` for one line).
#![allow(clippy::unwrap_used, reason = "a measurement script")]

use tensorlift::compiler::JitOptions;
use tensorlift::{Function, Sym, Tensor, function};

#[path = "../benches/workloads/mod.rs"]
#[allow(dead_code, reason = "the other workloads are the benchmarks'")]
mod workloads;

fn matvec(a: Sym, v: Sym) -> Sym {
    a.matmul(&v)
}

fn row_dot(x: Sym, y: Sym) -> Sym {
    (&x * &y).reduce_sum(Some(&[1]), false)
}

fn f64s(t: &Tensor) -> Tensor {
    let v = t.array_view::<f32>().unwrap().mapv(f64::from);
    Tensor::from(v)
}

/// Microseconds per call of `f`, a batch of `reps` calls.
fn batch(f: &Function, inputs: &[Tensor], reps: usize) -> f64 {
    let t = std::time::Instant::now();
    for _ in 0..reps {
        std::hint::black_box(f.call(inputs).unwrap());
    }
    t.elapsed().as_secs_f64() / reps as f64 * 1e6
}

fn main() {
    type Body = fn(Sym, Sym) -> Sym;
    type Case = (&'static str, Body, [usize; 2], [usize; 2], bool);
    let cases: Vec<Case> = vec![
        ("f32 A@v 512", matvec, [512, 512], [512, 1], false),
        ("f64 A@v 512", matvec, [512, 512], [512, 1], true),
        ("f32 A@v 2048", matvec, [2048, 2048], [2048, 1], false),
        (
            "f32 sum(x*y) 4096x1000",
            row_dot,
            [4096, 1000],
            [4096, 1000],
            false,
        ),
        (
            "f32 sum(x*y) 4096x1024",
            row_dot,
            [4096, 1024],
            [4096, 1024],
            false,
        ),
        (
            "f32 sum(x*y) 256x1000",
            row_dot,
            [256, 1000],
            [256, 1000],
            false,
        ),
    ];
    let only = std::env::var("ONLY").ok();
    for (name, body, da, db, wide64) in cases {
        if only.as_deref().is_some_and(|o| !name.starts_with(o)) {
            continue;
        }
        let mut inputs = vec![workloads::tensor(&da, 3), workloads::tensor(&db, 4)];
        if wide64 {
            inputs = inputs.iter().map(f64s).collect();
        }
        let fs: Vec<Function> = [false, true]
            .map(|wide_math| {
                let f = function(body).jit_compile(true).jit_options(JitOptions {
                    wide_math,
                    threads: false,
                    ..JitOptions::default()
                });
                f.call(&inputs).unwrap();
                f
            })
            .into();
        let n: usize = da.iter().product();
        let reps = ((1 << 21) / n).max(2);
        let mut ts = [Vec::new(), Vec::new()];
        for _ in 0..61 {
            for (f, t) in fs.iter().zip(&mut ts) {
                t.push(batch(f, &inputs, reps));
            }
        }
        // The ratio of each pair of adjacent batches: the machine's load
        // changes between pairs more than within one.
        let mut ratios: Vec<f64> = ts[0].iter().zip(&ts[1]).map(|(a, b)| a / b).collect();
        ratios.sort_by(|a, b| a.total_cmp(b));
        let [inline, wide] = ts.map(|mut t| {
            t.sort_by(|a, b| a.total_cmp(b));
            t[t.len() / 2]
        });
        println!(
            "{name}: inline {inline:.2} us, wide {wide:.2} us (median ratio of adjacent batches {:.2}x)",
            ratios[ratios.len() / 2]
        );
    }
}
