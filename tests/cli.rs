//! The `tensorlift` binary: runs the examples, writes .npy results, prints
//! DOT, and answers bad input with one line and a non-zero exit.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::process::{Command, Output};

fn tensorlift(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tensorlift"))
        .args(args)
        .output()
        .unwrap()
}

fn tmpdir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("tensorlift-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn runs_the_softmax_example() {
    let out = tmpdir("softmax");
    let o = tensorlift(&[
        "run",
        "examples/softmax.tlir",
        "--input",
        "x=examples/data/softmax_x.npy",
        "--output-dir",
        out.to_str().unwrap(),
        "--mode",
        "interp",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let probs = tensorlift::npy::load(out.join("probs.npy")).unwrap();
    let x = tensorlift::npy::load("examples/data/softmax_x.npy")
        .unwrap()
        .to_ndarray::<f32>()
        .unwrap();
    let p = probs.to_ndarray::<f32>().unwrap();
    for (xr, pr) in x.outer_iter().zip(p.outer_iter()) {
        let m = xr.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let s: f32 = xr.iter().map(|v| (v - m).exp()).sum();
        for (a, b) in xr.iter().zip(pr.iter()) {
            assert!(((a - m).exp() / s - b).abs() < 1e-6);
        }
    }
}

#[test]
fn runs_the_mlp_example_with_named_outputs() {
    let out = tmpdir("mlp");
    let d = "examples/data/";
    let args: Vec<String> = ["x", "w1", "b1", "w2", "b2"]
        .iter()
        .flat_map(|n| ["--input".to_string(), format!("{n}={d}mlp_{n}.npy")])
        .collect();
    let mut all = vec![
        "run",
        "examples/mlp.tlir",
        "--output-dir",
        out.to_str().unwrap(),
    ];
    all.extend(args.iter().map(String::as_str));
    let o = tensorlift(&all);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let logits = tensorlift::npy::load(out.join("logits.npy")).unwrap();
    let class = tensorlift::npy::load(out.join("class.npy")).unwrap();
    assert_eq!(logits.shape(), &[2, 2]);
    let l = common::to_vec::<f32>(&logits);
    let c = common::to_vec::<i64>(&class);
    for r in 0..2 {
        assert_eq!(c[r], if l[2 * r + 1] > l[2 * r] { 1 } else { 0 });
    }
}

#[test]
fn prints_graphviz() {
    let o = tensorlift(&["graph", "examples/arith.tlir"]);
    assert!(o.status.success());
    let dot = String::from_utf8(o.stdout).unwrap();
    assert!(
        dot.starts_with("digraph \"arith\" {")
            && dot.contains("->")
            && dot.trim_end().ends_with('}'),
        "{dot}"
    );
}

fn assert_one_line_error(o: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "expected failure, got success: {err}");
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "panic leaked: {err}"
    );
    assert!(err.contains(needle), "stderr lacks '{needle}': {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err}");
}

#[test]
fn bad_input_is_one_line_and_nonzero() {
    let out = tmpdir("bad");
    let od = out.to_str().unwrap();
    let bad_prog = out.join("bad.tlir");
    std::fs::write(&bad_prog, "graph @g {\n  %x = parameter 0 : f32[2]\n  %y = add(%x, %q) : f32[2]\n  return %y as \"y\"\n}\n").unwrap();
    let o = tensorlift(&["run", bad_prog.to_str().unwrap(), "--output-dir", od]);
    assert_one_line_error(&o, "bad.tlir:3:16: use of undefined value '%q'");
    // An op the type checker rejects: its site once, not twice.
    std::fs::write(
        &bad_prog,
        "graph @g {\n  %x = parameter 0 : f32[4,3]\n  %y = transpose(%x) {perm=[0,5]} : f32[3,4]\n  return %y as \"y\"\n}\n",
    )
    .unwrap();
    let o = tensorlift(&["run", bad_prog.to_str().unwrap(), "--output-dir", od]);
    assert_one_line_error(&o, "bad.tlir:3:3): [0, 5] is not a permutation");
    assert_eq!(
        String::from_utf8_lossy(&o.stderr)
            .matches("bad.tlir:3:3")
            .count(),
        1,
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = tensorlift(&["run", "examples/nope.tlir", "--output-dir", od]);
    assert_one_line_error(&o, "cannot read examples/nope.tlir");
    let o = tensorlift(&["run", "examples/softmax.tlir", "--output-dir", od]);
    assert_one_line_error(&o, "missing --input x=FILE.npy");
    let o = tensorlift(&[
        "run",
        "examples/softmax.tlir",
        "--input",
        "y=examples/data/softmax_x.npy",
        "--output-dir",
        od,
    ]);
    assert_one_line_error(&o, "no parameter named 'y'");
    let o = tensorlift(&[
        "run",
        "examples/softmax.tlir",
        "--input",
        "x=examples/data/arith_x.npy",
        "--output-dir",
        od,
    ]);
    assert_one_line_error(&o, "holds f32[8], but parameter 'x' is f32[4,8]");
    let o = tensorlift(&[
        "run",
        "examples/softmax.tlir",
        "--input",
        "x=examples/softmax.tlir",
        "--output-dir",
        od,
    ]);
    assert_one_line_error(&o, "not a valid .npy file");
    let o = tensorlift(&[
        "run",
        "examples/softmax.tlir",
        "--input",
        "x",
        "--output-dir",
        od,
    ]);
    assert_one_line_error(&o, "must look like NAME=FILE.npy");
    let o = tensorlift(&[
        "run",
        "examples/gather.tlir",
        "--input",
        "table=examples/data/gather_table.npy",
        "--input",
        "ids=examples/data/softmax_x.npy",
        "--output-dir",
        od,
    ]);
    assert_one_line_error(&o, "parameter 'ids' is i32[4]");
    // An out-of-range index is a run-time error naming the op and its line.
    let idx = out.join("ids.npy");
    tensorlift::npy::save(
        &tensorlift::Tensor::from(ndarray::arr1(&[0i32, 9, 1, 2]).into_dyn()),
        &idx,
    )
    .unwrap();
    let o = tensorlift(&[
        "run",
        "examples/gather.tlir",
        "--input",
        "table=examples/data/gather_table.npy",
        "--input",
        &format!("ids={}", idx.display()),
        "--output-dir",
        od,
    ]);
    assert_one_line_error(
        &o,
        "take 'rows' (created at examples/gather.tlir:5:3): take: indices[1] = 9 is not in [0, 5)",
    );
    // Usage errors come from the argument parser with exit code 2.
    let o = tensorlift(&["frobnicate"]);
    assert_eq!(o.status.code(), Some(2));
    let o = tensorlift(&[
        "run",
        "examples/softmax.tlir",
        "--mode",
        "warp",
        "--output-dir",
        od,
    ]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn jit_mode_matches_the_interpreter_on_every_example() {
    let d = "examples/data/";
    let runs: &[(&str, &[&str])] = &[
        ("softmax", &["x"]),
        ("arith", &["x"]),
        ("mlp", &["x", "w1", "b1", "w2", "b2"]),
        ("gather", &["table", "ids"]),
    ];
    for (prog, names) in runs {
        let mut outs = Vec::new();
        for mode in ["interp", "jit"] {
            let dir = tmpdir(&format!("{prog}-{mode}"));
            let mut args = vec![
                "run".to_string(),
                format!("examples/{prog}.tlir"),
                "--mode".into(),
                mode.into(),
                "--output-dir".into(),
                dir.display().to_string(),
            ];
            for n in *names {
                args.push("--input".into());
                args.push(format!("{n}={d}{prog}_{n}.npy"));
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let o = tensorlift(&args);
            assert!(
                o.status.success(),
                "{prog} {mode}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            outs.push(dir);
        }
        for entry in std::fs::read_dir(&outs[0]).unwrap() {
            let name = entry.unwrap().file_name();
            let a = tensorlift::npy::load(outs[0].join(&name)).unwrap();
            let b = tensorlift::npy::load(outs[1].join(&name)).unwrap();
            common::assert_close(
                &b,
                &a,
                1e-6,
                1e-6,
                &format!("{prog}/{}", name.to_string_lossy()),
            );
        }
    }
}

#[test]
fn compile_dumps_every_stage_and_bench_reports_a_ratio() {
    let dir = tmpdir("dump");
    let o = tensorlift(&[
        "compile",
        "examples/softmax.tlir",
        "--dump-to",
        dir.to_str().unwrap(),
        "--opt-level",
        "none",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for f in [
        "softmax.input.tlir",
        "softmax.optimized.tlir",
        "softmax.fused.txt",
        "softmax.clif",
    ] {
        assert!(dir.join(f).exists(), "{f} missing");
    }
    let fused = std::fs::read_to_string(dir.join("softmax.fused.txt")).unwrap();
    assert!(
        fused.contains("reduce_max") && fused.contains("decision:"),
        "{fused}"
    );
    let o = tensorlift(&[
        "bench",
        "examples/softmax.tlir",
        "--input",
        "x=examples/data/softmax_x.npy",
        "--iters",
        "3",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).unwrap();
    assert!(
        out.contains("interpreter") && out.contains("jit") && out.contains("speedup"),
        "{out}"
    );
    // A time too small for three decimals of a millisecond is in µs.
    let jit_line = out.lines().find(|l| l.starts_with("jit")).unwrap();
    assert!(!jit_line.contains(" 0.000 ms"), "{out}");
    // TENSORLIFT_DUMP_TO dumps every compilation of the process.
    let env_dir = tmpdir("env-dump");
    let o = Command::new(env!("CARGO_BIN_EXE_tensorlift"))
        .env("TENSORLIFT_DUMP_TO", &env_dir)
        .args([
            "run",
            "examples/arith.tlir",
            "--mode",
            "jit",
            "--input",
            "x=examples/data/arith_x.npy",
            "--output-dir",
            tmpdir("arith-out").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(o.status.success());
    let names: Vec<String> = std::fs::read_dir(&env_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().any(|n| n.ends_with(".clif"))
            && names.iter().any(|n| n.ends_with(".fused.txt")),
        "{names:?}"
    );
}

#[test]
fn impossible_sizes_are_errors_not_aborts() {
    let dir = tmpdir("sizes");
    let big = dir.join("big.tlir");
    std::fs::write(&big, "graph @big {\n  %i = iota() {dim=0} : f32[1000000000000]\n  %n = neg(%i) : f32[1000000000000]\n  return %n as \"n\"\n}\n").unwrap();
    let o = tensorlift(&[
        "run",
        big.to_str().unwrap(),
        "--output-dir",
        dir.to_str().unwrap(),
    ]);
    assert_one_line_error(&o, "ResourceExhausted");
    let o = tensorlift(&[
        "run",
        big.to_str().unwrap(),
        "--output-dir",
        dir.to_str().unwrap(),
        "--mode",
        "jit",
    ]);
    assert_one_line_error(&o, "ResourceExhausted");
    let ovf = dir.join("ovf.tlir");
    std::fs::write(
        &ovf,
        "graph @o {\n  %x = parameter 0 : f32[4611686018427387904,4]\n  return %x as \"x\"\n}\n",
    )
    .unwrap();
    let o = tensorlift(&[
        "run",
        ovf.to_str().unwrap(),
        "--output-dir",
        dir.to_str().unwrap(),
    ]);
    assert_one_line_error(&o, "is too large");
}

/// `TENSORLIFT_MAX_ISA` as a user sets it: the capped JIT (what an AVX2 or
/// SSE4.2 host runs) agrees with the interpreter, and a value that names
/// no level is a one-line error naming it, not a silent uncapped run.
#[test]
fn the_isa_cap_runs_narrower_code_and_rejects_unknown_levels() {
    let d = "examples/data/";
    let run = |isa: &str, mode: &str| {
        let dir = tmpdir(&format!("isa-{isa}-{mode}"));
        let o = Command::new(env!("CARGO_BIN_EXE_tensorlift"))
            .env("TENSORLIFT_MAX_ISA", isa)
            .args(["run", "examples/mlp.tlir", "--mode", mode, "--output-dir"])
            .arg(&dir)
            .args(
                ["x", "w1", "b1", "w2", "b2"]
                    .iter()
                    .flat_map(|n| ["--input".to_string(), format!("{n}={d}mlp_{n}.npy")]),
            )
            .output()
            .unwrap();
        (o, dir)
    };
    let (o, want) = run("", "interp");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for isa in ["avx512", "avx2", "sse4.2"] {
        let (o, got) = run(isa, "jit");
        assert!(
            o.status.success(),
            "{isa}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        for entry in std::fs::read_dir(&want).unwrap() {
            let name = entry.unwrap().file_name();
            let a = tensorlift::npy::load(want.join(&name)).unwrap();
            let b = tensorlift::npy::load(got.join(&name)).unwrap();
            common::assert_close(
                &b,
                &a,
                1e-5,
                1e-5,
                &format!("{isa}/{}", name.to_string_lossy()),
            );
        }
    }
    let (o, _) = run("avx3", "jit");
    assert_one_line_error(&o, "TENSORLIFT_MAX_ISA=\"avx3\"");
}
