//! The gradients of benches/autodiff.rs outside criterion, for what a
//! benchmark does not show:
//!
//! - `rnn`: compiles and runs the 256-step RNN's gradient once and prints
//!   the resident set before, the peak (VmHWM) after compiling and the
//!   peak during the call (VmHWM reset through /proc/self/clear_refs), for
//!   a peak-memory
//!   comparison with `scripts/peers/autodiff.py --only rnn --mem` (or run
//!   either under `/usr/bin/time -v`);
//! - `save DIR`: writes every workload's inputs (`NAME_in{i}.npy`) and
//!   gradients (`NAME_grad{i}.npy`) to DIR, which
//!   `scripts/peers/autodiff.py --check DIR` compares with JAX's (also
//!   `rnn8`, the RNN of 8 steps: after 256 the gradient with respect to
//!   h0 underflows to 0);
//! - `ir NAME [STAGE]`: prints a gradient's IR (`traced`, `optimized`,
//!   the default, `fused` or `cranelift`); NAME is mlp, layer_norm or rnn.
//!
//! `cargo run --release --example grad_workloads -- rnn`
#![allow(clippy::unwrap_used, reason = "a measurement script")]

#[path = "../benches/workloads/mod.rs"]
#[allow(dead_code, reason = "the module also serves the benchmarks")]
mod workloads;

use tensorlift::{DType, Function, IrStage, Sym, Tensor, TensorSpec, fori_loop, function};
use workloads::{
    layer_norm_inputs, layer_norm_loss, mlp_xent, mlp_xent_inputs, rnn_inputs, rnn_loss,
};

/// Each workload: name, compiled gradient, inputs.
fn cases() -> Vec<(&'static str, Function, Vec<Tensor>)> {
    vec![
        (
            "mlp",
            function(mlp_xent).grad(&[2, 3, 4, 5]).jit_compile(true),
            mlp_xent_inputs().to_vec(),
        ),
        (
            "layer_norm",
            function(layer_norm_loss).grad(&[0, 1, 2]).jit_compile(true),
            layer_norm_inputs().to_vec(),
        ),
        (
            "rnn",
            function(rnn_loss).grad(&[0, 1, 2]).jit_compile(true),
            rnn_inputs().to_vec(),
        ),
    ]
}

/// The RNN of 8 steps, for `save` only: after 256 steps the gradient with
/// respect to h0 underflows to 0, so the check of that one needs a short loop.
fn rnn8() -> (&'static str, Function, Vec<Tensor>) {
    let f = function(|h: Sym, w: Sym, u: Sym| {
        fori_loop(0, 8, |_, c| vec![(c[0].matmul(&w) + &u).tanh()], &[h])[0]
            .square()
            .reduce_sum(None, false)
    });
    (
        "rnn8",
        f.grad(&[0, 1, 2]).jit_compile(true),
        rnn_inputs().to_vec(),
    )
}

fn specs(inputs: &[Tensor]) -> Vec<TensorSpec> {
    inputs
        .iter()
        .map(|t| TensorSpec::known(DType::F32, t.shape()))
        .collect()
}

/// A field of /proc/self/status in MiB (Linux), or NaN.
fn status_mib(field: &str) -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn usage() -> ! {
    eprintln!(
        "usage: grad_workloads interp | rnn | save DIR | ir mlp|layer_norm|rnn [traced|optimized|fused|cranelift]"
    );
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["interp"] => {
            // The same gradients interpreted: the median of 5 calls each.
            for (name, f, inputs) in cases() {
                let f = f.jit_compile(false);
                f.call(&inputs).unwrap();
                let mut ts: Vec<f64> = (0..5)
                    .map(|_| {
                        let t = std::time::Instant::now();
                        std::hint::black_box(f.call(&inputs).unwrap());
                        t.elapsed().as_secs_f64() * 1e3
                    })
                    .collect();
                ts.sort_by(f64::total_cmp);
                println!("interpreter {name}: median {:.2} ms", ts[2]);
            }
        }
        ["rnn"] => {
            let (_, f, inputs) = cases().pop().unwrap();
            let before = status_mib("VmRSS");
            let t = std::time::Instant::now();
            let g = f.compile(&specs(&inputs)).unwrap();
            let compiled = t.elapsed();
            let peak_compile = status_mib("VmHWM");
            // Resets VmHWM to the current RSS (Linux), so the next reading
            // is the call's own peak.
            let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
            let out = g.call(&inputs).unwrap();
            let total = t.elapsed();
            std::hint::black_box(&out);
            let peak = status_mib("VmHWM");
            println!(
                "tensorlift rnn grad: compile {:.1} ms, compile+first call {:.1} ms; RSS before {before:.1} MiB, peak (VmHWM) after compiling {peak_compile:.1} MiB, {} {peak:.1} MiB",
                compiled.as_secs_f64() * 1e3,
                total.as_secs_f64() * 1e3,
                if reset { "during the call" } else { "overall" },
            );
        }
        ["save", dir] => {
            std::fs::create_dir_all(dir).unwrap();
            for (name, f, inputs) in cases().into_iter().chain([rnn8()]) {
                let grads = f.call(&inputs).unwrap();
                for (i, t) in inputs.iter().enumerate() {
                    tensorlift::npy::save(t, format!("{dir}/{name}_in{i}.npy")).unwrap();
                }
                for (i, t) in grads.iter().enumerate() {
                    tensorlift::npy::save(t, format!("{dir}/{name}_grad{i}.npy")).unwrap();
                }
                println!("{name}: {} inputs, {} gradients", inputs.len(), grads.len());
            }
        }
        ["ir", name, rest @ ..] => {
            let stage = match rest {
                [] | ["optimized"] => IrStage::Optimized,
                ["traced"] => IrStage::Traced,
                ["fused"] => IrStage::Fused,
                ["cranelift"] => IrStage::Cranelift,
                _ => usage(),
            };
            let Some((_, f, inputs)) = cases().into_iter().find(|c| c.0 == *name) else {
                usage()
            };
            println!("{}", f.compiler_ir(&specs(&inputs), stage).unwrap());
        }
        _ => usage(),
    }
}
