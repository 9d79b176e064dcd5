//! File tests, as cranelift's filetests: each `tests/filetests/*.tlir`
//! holds a program, a `// test: STAGE` line naming what to run, and the
//! expected output after a `// ---- expected` line (each line prefixed
//! with `// `, so the file stays a valid program). Stages:
//!
//! - `parse`: the program printed back, or the parse/verify error;
//! - `optimized`: the program after the standard passes;
//! - `fused`: the JIT's fusion plan (default options);
//! - `clif-main`: the Cranelift IR of the compiled program's `main` (the
//!   steps, control flow and inline scalar kernels; the out-of-line
//!   kernels' code depends on the host's vector features and is left out,
//!   so this stage suits programs whose kernels are scalar).
//!
//! After an intended change, re-bless with
//! `TENSORLIFT_BLESS=1 cargo test --test filetests`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use std::path::Path;

use tensorlift::compiler::{self, JitOptions};
use tensorlift::ir::text;
use tensorlift::runtime::interp;

const MARKER: &str = "// ---- expected (re-bless with TENSORLIFT_BLESS=1)";

fn run_stage(stage: &str, src: &str, path: &str) -> String {
    let parsed = text::parse(src, path);
    match (stage, parsed) {
        (_, Err(e)) => format!("error: {e}\n"),
        ("parse", Ok(g)) => text::print(&g),
        ("optimized", Ok(mut g)) => match interp::optimize(&mut g) {
            Ok(()) => text::print(&g),
            Err(e) => format!("error: {e}\n"),
        },
        ("fused", Ok(g)) => match compiler::compile(&g, &JitOptions::default()) {
            Ok(exe) => exe.fused_ir(),
            Err(e) => format!("error: {e}\n"),
        },
        ("clif-main", Ok(g)) => match compiler::compile(&g, &JitOptions::default()) {
            Ok(exe) => {
                let clif = exe.cranelift_ir();
                let main = clif.split_once("; main\n").map_or("", |(_, m)| m);
                main.to_string()
            }
            Err(e) => format!("error: {e}\n"),
        },
        (other, Ok(_)) => panic!("{path}: unknown stage '{other}'"),
    }
}

/// Runs one file; returns a description of the difference, if any.
fn check(path: &Path) -> Option<String> {
    let name = path.display().to_string();
    let content = std::fs::read_to_string(path).unwrap();
    let (program, expected) = match content.split_once(MARKER) {
        Some((p, e)) => (p.to_string(), Some(e.to_string())),
        None => (content.clone(), None),
    };
    let stage = program
        .lines()
        .find_map(|l| l.trim().strip_prefix("// test:"))
        .unwrap_or_else(|| panic!("{name}: no '// test: STAGE' line"))
        .trim()
        .to_string();
    let got = run_stage(&stage, &program, &name);
    let got_block: String = got
        .lines()
        .map(|l| format!("// {l}").trim_end().to_string() + "\n")
        .collect();
    if std::env::var_os("TENSORLIFT_BLESS").is_some() {
        let blessed = format!(
            "{}{MARKER}\n{got_block}",
            program.trim_end_matches('\n').to_string() + "\n"
        );
        std::fs::write(path, blessed).unwrap();
        return None;
    }
    let Some(want) = expected else {
        return Some(format!(
            "{name} has no expected section: bless it with TENSORLIFT_BLESS=1"
        ));
    };
    let want = want.trim_start_matches('\n');
    (want != got_block).then(|| {
        format!("{name} ({stage}) changed; if intended, re-bless with TENSORLIFT_BLESS=1\n--- expected\n{want}--- got\n{got_block}")
    })
}

#[test]
fn filetests() {
    let mut files: Vec<_> = std::fs::read_dir("tests/filetests")
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "tlir"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "the file tests are missing");
    let failures: Vec<String> = files.iter().filter_map(|f| check(f)).collect();
    assert!(
        failures.is_empty(),
        "{} of {} file tests failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}
