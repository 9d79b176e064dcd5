//! `tensorlift bench` runs a program interpreted and compiled on the same
//! inputs, prints both times, checks the results agree within the JIT's
//! tolerance (docs/compiler.md; bit-exact with `--exact`) and writes the
//! compiled results with `--output-dir`: what `scripts/example.sh` shows.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use std::path::PathBuf;
use std::process::{Command, Output};

use tensorlift::Tensor;

fn tensorlift(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tensorlift"))
        .args(args)
        .output()
        .unwrap()
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "tensorlift-cli-compare-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The milliseconds printed on the line starting with `label`.
fn millis(stdout: &str, label: &str) -> f64 {
    let line = stdout
        .lines()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no '{label}' line in\n{stdout}"));
    line[label.len()..]
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no time on '{line}'"))
}

#[test]
fn bench_checks_agreement_prints_both_times_and_writes_the_results() {
    let out = tmpdir("softmax");
    let o = tensorlift(&[
        "bench",
        "examples/softmax.tlir",
        "--input",
        "x=examples/data/softmax_x.npy",
        "--iters",
        "3",
        "--output-dir",
        out.to_str().unwrap(),
    ]);
    let all = text(&o);
    assert!(o.status.success(), "{all}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(millis(&stdout, "interpreter") >= 0.0, "{all}");
    assert!(millis(&stdout, "jit") >= 0.0, "{all}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("agreement") && l.contains("within")),
        "{all}"
    );
    // The written results are the compiled ones, and a softmax.
    let probs = tensorlift::npy::load(out.join("probs.npy")).unwrap();
    let x = tensorlift::npy::load("examples/data/softmax_x.npy")
        .unwrap()
        .to_ndarray::<f32>()
        .unwrap();
    let p = probs.to_ndarray::<f32>().unwrap();
    assert_eq!(p.shape(), x.shape());
    for (xr, pr) in x.outer_iter().zip(p.outer_iter()) {
        let m = xr.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let s: f64 = xr.iter().map(|v| f64::from(v - m).exp()).sum();
        for (a, b) in xr.iter().zip(pr.iter()) {
            let want = f64::from(a - m).exp() / s;
            assert!((want - f64::from(*b)).abs() < 1e-6, "{want} vs {b}");
        }
    }
}

/// A row sum that float reordering changes: 1e8, then 64 ones, then -1e8.
/// Summed in order, every 1 is lost next to 1e8 (its f32 spacing is 8) and
/// the sum is 0; the JIT's vector accumulators add most ones apart from
/// 1e8 and keep them. Both are within the documented bound for reordered
/// sums (n·ε·Σ|x| ≈ 780), far outside the relative check of a
/// well-conditioned result.
fn ill_conditioned_sum(dir: &std::path::Path) -> (String, String) {
    let prog = dir.join("sum.tlir");
    std::fs::write(
        &prog,
        "graph @sum {\n  %x = parameter 0 : f32[1,66]\n  %s = reduce_sum(%x) {axes=[1], keepdims=false} : f32[1]\n  return %s as \"s\"\n}\n",
    )
    .unwrap();
    let mut v = vec![1.0f32; 66];
    v[0] = 1e8;
    v[65] = -1e8;
    let x = Tensor::from(
        ndarray::Array2::from_shape_vec((1, 66), v)
            .unwrap()
            .into_dyn(),
    );
    let input = dir.join("x.npy");
    tensorlift::npy::save(&x, &input).unwrap();
    (
        prog.to_str().unwrap().to_string(),
        format!("x={}", input.to_str().unwrap()),
    )
}

#[test]
fn bench_reports_a_disagreement_and_exact_code_agrees() {
    let dir = tmpdir("sum");
    let (prog, input) = ill_conditioned_sum(&dir);
    let o = tensorlift(&["bench", &prog, "--input", &input, "--iters", "1"]);
    let all = text(&o);
    assert_eq!(o.status.code(), Some(1), "{all}");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("disagree") && stderr.contains("output 's'") && stderr.contains("--exact"),
        "{all}"
    );
    // Both times are printed before the verdict.
    let stdout = String::from_utf8_lossy(&o.stdout);
    millis(&stdout, "interpreter");
    millis(&stdout, "jit");
    let o = tensorlift(&["bench", &prog, "--input", &input, "--iters", "1", "--exact"]);
    let all = text(&o);
    assert!(o.status.success(), "{all}");
    assert!(all.contains("bit-identical"), "{all}");
}
