//! `tensorlift run --callback NAME=module:function` binds the callbacks of a
//! parsed program to Python functions, interpreted and compiled.
#![cfg(feature = "python")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Node names (`s`, `t`) differ from the target names on purpose.
const PROGRAM: &str = "graph @cb {
  %x = parameter 0 : f32[3]
  %s = numpy_function \"scale\" (%x) : (f32[3])
  %t = py_func \"offset\" (%s) stateful : (f32[3])
  return %t as \"y\"
}
";

const EAGER: &str = "graph @eager {
  %x = parameter 0 : f32[2]
  %e = py_function \"grow\" (%x) : (f32[2])
  return %e as \"y\"
}
";

/// Imports tensorlift at module level: it must work from the first use.
const MODULE: &str = "import numpy as np
import tensorlift as tl

def scale(x):
    return x * np.float32(2)

class ops:
    @staticmethod
    def offset(x):
        return x + np.float32(1)

def grow(x):
    assert isinstance(x, tl.Tensor), type(x)
    return tl.exp(x)
";

/// A fresh directory with the programs, the module and the input.
fn setup(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tensorlift-cli-cb-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("prog.tlir"), PROGRAM).unwrap();
    std::fs::write(d.join("eager.tlir"), EAGER).unwrap();
    std::fs::write(d.join("tl_cli_mod.py"), MODULE).unwrap();
    tensorlift::npy::save(&common::f32s(&[1.0, 2.0, 3.0], &[3]), d.join("x.npy")).unwrap();
    tensorlift::npy::save(&common::f32s(&[0.0, 1.0], &[2]), d.join("x2.npy")).unwrap();
    d
}

/// Runs `tensorlift run PROG --input x=INPUT --output-dir DIR/out ARGS...`
/// with the module's directory on PYTHONPATH.
fn run(dir: &Path, prog: &str, input: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tensorlift"))
        .arg("run")
        .arg(dir.join(prog))
        .arg("--input")
        .arg(format!("x={}", dir.join(input).display()))
        .arg("--output-dir")
        .arg(dir.join("out"))
        .args(args)
        .env("PYTHONPATH", dir)
        .output()
        .unwrap()
}

fn y(dir: &Path) -> Vec<f32> {
    common::to_vec::<f32>(&tensorlift::npy::load(dir.join("out").join("y.npy")).unwrap())
}

fn assert_one_line_error(o: &Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "expected failure, got success: {err}");
    assert!(!err.contains("panicked"), "panic leaked: {err}");
    for n in needles {
        assert!(err.contains(n), "stderr lacks '{n}': {err}");
    }
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err}");
}

#[test]
fn callbacks_bind_to_python_functions_in_both_modes() {
    let dir = setup("both");
    for mode in ["interp", "jit"] {
        let _ = std::fs::remove_dir_all(dir.join("out"));
        let o = run(
            &dir,
            "prog.tlir",
            "x.npy",
            &[
                "--callback",
                "scale=tl_cli_mod:scale",
                "--callback",
                "offset=tl_cli_mod:ops.offset",
                "--mode",
                mode,
            ],
        );
        assert!(
            o.status.success(),
            "{mode}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(y(&dir), vec![3.0, 5.0, 7.0], "{mode}");
    }
}

#[test]
fn a_py_function_callback_gets_eager_tensors() {
    let dir = setup("eager");
    let o = run(
        &dir,
        "eager.tlir",
        "x2.npy",
        &["--callback", "grow=tl_cli_mod:grow"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = y(&dir);
    assert!(
        (got[0] - 1.0).abs() < 1e-6 && (got[1] - 1.0f32.exp()).abs() < 1e-5,
        "{got:?}"
    );
    // Compiled, py_function is rejected before anything runs.
    let o = run(
        &dir,
        "eager.tlir",
        "x2.npy",
        &["--callback", "grow=tl_cli_mod:grow", "--mode", "jit"],
    );
    assert_one_line_error(&o, &["py_function 'e'", "jit_compile"]);
}

#[test]
fn bad_callback_arguments_are_one_line_errors() {
    let dir = setup("errors");
    for mode in ["interp", "jit"] {
        // A name the program does not call: the error lists the names it does.
        let o = run(
            &dir,
            "prog.tlir",
            "x.npy",
            &["--callback", "nope=tl_cli_mod:scale", "--mode", mode],
        );
        assert_one_line_error(&o, &["--callback 'nope'", "scale, offset"]);
        // An unbound callback names itself and the option that binds it.
        let o = run(
            &dir,
            "prog.tlir",
            "x.npy",
            &["--callback", "scale=tl_cli_mod:scale", "--mode", mode],
        );
        assert_one_line_error(&o, &["'offset'", "--callback NAME=module:function"]);
        // A module that does not exist.
        let o = run(
            &dir,
            "prog.tlir",
            "x.npy",
            &["--callback", "scale=tl_no_such_cli_mod:f", "--mode", mode],
        );
        assert_one_line_error(
            &o,
            &["--callback 'scale'", "'tl_no_such_cli_mod'", "PYTHONPATH"],
        );
        // Malformed, and given twice.
        let o = run(
            &dir,
            "prog.tlir",
            "x.npy",
            &["--callback", "scale", "--mode", mode],
        );
        assert_one_line_error(&o, &["--callback 'scale'", "NAME=module:function"]);
        let o = run(
            &dir,
            "prog.tlir",
            "x.npy",
            &[
                "--callback",
                "scale=tl_cli_mod:scale",
                "--callback",
                "scale=tl_cli_mod:scale",
                "--mode",
                mode,
            ],
        );
        assert_one_line_error(&o, &["--callback 'scale' is given twice"]);
    }
}
