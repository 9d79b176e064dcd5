//! Every input the fuzzers found a bug with (`tests/fixtures/fuzz/<target>/`)
//! and every corpus seed (`fuzz/corpus/<target>/`), run through its fuzz
//! target in-process: none may panic, hang (each must finish within 5 s)
//! or make an oracle disagree. See docs/reliability.md.
#![allow(clippy::panic, reason = "tests")]

use std::path::Path;
use std::time::{Duration, Instant};

use tensorlift::fuzz::driver::read_dir_sorted;
use tensorlift::fuzz::targets::{Target, Verdict};

fn run_dir(target: Target, dir: &Path) -> usize {
    let files = read_dir_sorted(dir);
    for (path, bytes) in &files {
        let start = Instant::now();
        let verdict = target.run(bytes);
        let took = start.elapsed();
        if let Verdict::Mismatch(m) = verdict {
            panic!("{}: {m}", path.display());
        }
        assert!(
            took < Duration::from_secs(5),
            "{}: took {took:?}",
            path.display()
        );
    }
    files.len()
}

#[test]
fn fuzz_findings_stay_fixed() {
    for t in Target::ALL {
        run_dir(t, &Path::new("tests/fixtures/fuzz").join(t.name()));
    }
}

#[test]
fn corpus_seeds_pass_their_targets() {
    for t in [Target::Text, Target::Npy] {
        let n = run_dir(t, &Path::new("fuzz/corpus").join(t.name()));
        assert!(n > 0, "no corpus for {}", t.name());
    }
}

/// A header nesting brackets 14 deep was read by npyz in 30 s (its
/// parser is exponential in the depth); now rejected at once.
#[test]
fn deeply_nested_npy_header_is_rejected_quickly() {
    let bytes =
        std::fs::read("tests/fixtures/fuzz/npy/header_nested_braces_min.npy").unwrap_or_default();
    let start = Instant::now();
    let err = tensorlift::npy::read(bytes.as_slice())
        .err()
        .map(|e| e.to_string());
    assert!(
        err.as_deref().is_some_and(|e| e.contains("nests brackets")),
        "{err:?}"
    );
    assert!(start.elapsed() < Duration::from_secs(1));
}
