//! tensorlift used from another crate: tests/dependent-crate depends on it
//! by path, as a user's crate does, and its binary runs a numpy_function
//! callback interpreted and compiled. Built with `tensorlift_build::
//! link_python()` in its build.rs it finds the Python tensorlift was built
//! against; built without it, its first callback fails with an error that
//! says what was loaded, what was expected and the fix — not
//! `No module named 'numpy'`, not a crash.
//!
//! The crate builds into this test's own target directory (its
//! dependencies are the same artifacts as the main build's; only the
//! tensorlift crates compile again).
#![cfg(all(feature = "python", target_os = "linux"))]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

/// Both tests build the same binary path with different features.
static BUILD: Mutex<()> = Mutex::new(());

const CRATE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/dependent-crate");
const X: [f32; 4] = [1.0, 2.5, -3.0, 0.125];

/// The target directory this test binary was built in (`<dir>/<profile>/deps/<test>`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors().nth(3).unwrap().to_path_buf()
}

/// Builds the dependent crate with `features` and returns its binary.
fn build(features: &[&str]) -> PathBuf {
    // The main lock file, so that it builds the same dependency versions
    // (offline: the main build fetched them).
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.lock"),
        Path::new(CRATE).join("Cargo.lock"),
    )
    .unwrap();
    let target = target_dir();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(CRATE)
        .args([
            "build",
            "--offline",
            "--quiet",
            "--bin",
            "tensorlift-dependent",
        ])
        .env("CARGO_TARGET_DIR", &target);
    if !features.is_empty() {
        cmd.args(["--features", &features.join(",")]);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "building {CRATE} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    target.join("debug").join("tensorlift-dependent")
}

/// Runs the binary on `X` with `LD_LIBRARY_PATH` set to `lib_path` (or unset).
fn run(bin: &Path, lib_path: Option<&Path>) -> Output {
    let mut cmd = Command::new(bin);
    cmd.args(X.iter().map(|x| x.to_string()))
        .env_remove("LD_LIBRARY_PATH");
    if let Some(p) = lib_path {
        cmd.env("LD_LIBRARY_PATH", p);
    }
    cmd.output().unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The values the binary prints for `mode`.
fn printed(out: &Output, mode: &str) -> Vec<f32> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{mode}: ")))
        .unwrap_or_else(|| panic!("no '{mode}:' line in\n{}", text(out)));
    line.trim_matches(['[', ']'])
        .split(", ")
        .map(|v| v.parse().unwrap())
        .collect()
}

#[test]
fn a_crate_using_the_build_helper_runs_numpy_callbacks_in_both_modes() {
    let _guard = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    let bin = build(&[]);
    let out = run(&bin, None);
    assert!(out.status.success(), "{}", text(&out));
    for mode in ["interpreted", "compiled", "call_into"] {
        assert_eq!(printed(&out, mode), want(), "{mode}\n{}", text(&out));
    }
}

#[test]
fn without_the_build_helper_the_first_callback_says_what_is_wrong_and_the_fix() {
    let _guard = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    // The Python tensorlift was built against (the root build.rs records it).
    let lib_dir = env!("TENSORLIFT_PYTHON_LIB_DIR");
    if env!("TENSORLIFT_PYTHON_SHARED") != "1" || lib_dir.is_empty() {
        eprintln!("pyo3 links no shared libpython: nothing to mismatch");
        return;
    }
    let lib = Path::new(lib_dir)
        .join(format!("lib{}.so", env!("TENSORLIFT_PYTHON_LIB_NAME")))
        .canonicalize()
        .unwrap();
    let bin = build(&["without-link-python"]);

    // Another libpython of the same version found first by the loader: a
    // copy of the one tensorlift was built against, in another directory.
    let other =
        std::env::temp_dir().join(format!("tensorlift-other-python-{}", std::process::id()));
    std::fs::create_dir_all(&other).unwrap();
    let copy = other.join(lib.file_name().unwrap());
    std::fs::copy(&lib, &copy).unwrap();
    let out = run(&bin, Some(&other));
    std::fs::remove_dir_all(&other).unwrap();
    let all = text(&out);
    assert_eq!(out.status.code(), Some(1), "{all}");
    for part in [
        "FailedPrecondition",
        "numpy_function 'affine'",
        "the embedded Python is not the one tensorlift was built against",
        &format!("this process loaded {}", copy.display()),
        &format!("tensorlift was built against {lib_dir}/"),
        "tensorlift_build::link_python();",
        &format!("LD_LIBRARY_PATH={lib_dir}"),
    ] {
        assert!(all.contains(part), "missing '{part}' in\n{all}");
    }
    // It failed at the first callback: nothing was printed.
    assert!(!all.contains("interpreted:"), "{all}");

    // Whatever the loader finds on this machine without help: the right
    // Python (then it works), or this error; never a bare NumPy import
    // error or a crash.
    let out = run(&bin, None);
    let all = text(&out);
    if out.status.success() {
        assert_eq!(printed(&out, "compiled"), want(), "{all}");
    } else if out.status.code() == Some(1) {
        assert!(
            all.contains("FailedPrecondition") && all.contains("tensorlift_build::link_python();"),
            "{all}"
        );
    } else {
        // The loader found no libpython at all: the process never started.
        assert!(
            all.contains("error while loading shared libraries"),
            "{all}"
        );
    }
}

/// What the binary computes: numpy_function's `x * 2 + 1` on `x + 1`, then
/// 1 subtracted (each step rounded to f32, as it runs).
fn want() -> Vec<f32> {
    X.iter().map(|x| (x + 1.0) * 2.0 + 1.0 - 1.0).collect()
}
