//! The gradient of a `while` loop whose trip count depends on data, with
//! its carries kept on a run-time tape (what `Function::grad` does) and
//! recomputed from the initial ones (`autodiff::grad`, no memory): median
//! of 5 compiled calls per trip count.
//!
//!     cargo run --release --example while_grad
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "example")]

use std::time::Instant;

use tensorlift::ir::autodiff;
use tensorlift::{DType, JitOptions, Sym, Tensor, TensorSpec, compile_graph, function, while_loop};

fn median(mut f: impl FnMut()) -> f64 {
    f();
    let mut t: Vec<f64> = (0..5)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[2]
}

fn main() {
    println!("trips  tape (ms)  recompute (ms)");
    for trips in [250usize, 500, 1000, 2000, 4000] {
        // x ← x + 0.001·sin(x)·c until the step count reaches `trips`
        // (read from data, so the loop is not counted).
        let f = function(|x: Sym, c: Sym, n: Sym| {
            let out = while_loop(
                |s| s[2].less(&s[3]),
                |s| {
                    vec![
                        &s[0] + s[0].sin() * &s[1] * 0.001,
                        s[1].clone(),
                        &s[2] + 1.0,
                        s[3].clone(),
                    ]
                },
                &[x, c, n.graph().scalar(DType::F32, 0.0), n.cast(DType::F32)],
            );
            out[0].reduce_sum(None, false)
        });
        let x = Tensor::from(ndarray::Array1::<f32>::linspace(0.1, 1.0, 64).into_dyn());
        let c = Tensor::from(ndarray::Array1::<f32>::from_elem(64, 0.5).into_dyn());
        let n = Tensor::scalar(trips as i32);
        let inputs = [x, c, n];
        let tape = f.grad(&[0, 1]).jit_compile(true);
        let t_tape = median(|| {
            tape.call(&inputs).unwrap();
        });
        let t_rec = if trips <= 1000 {
            let specs: Vec<TensorSpec> = inputs.iter().map(TensorSpec::of).collect();
            let traced = &f.concrete(&specs).unwrap().traced;
            let g = autodiff::grad(traced, &[0, 1], false).unwrap();
            let exe = compile_graph(&g, &JitOptions::default()).unwrap();
            format!(
                "{:.2}",
                median(|| {
                    exe.run(&inputs).unwrap();
                })
            )
        } else {
            "-".into()
        };
        println!("{trips:5}  {t_tape:9.2}  {t_rec:>14}");
    }
}
