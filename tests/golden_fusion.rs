//! Golden tests of the fusion plan for the bundled examples: the expected
//! plan lives in tests/golden/<example>.fused.txt. After an intended change,
//! re-bless with `TENSORLIFT_BLESS=1 cargo test --test golden_fusion`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use tensorlift::compiler::{self, JitOptions};
use tensorlift::ir::text;

fn golden(example: &str) {
    let path = format!("examples/{example}.tlir");
    let g = text::parse(&std::fs::read_to_string(&path).unwrap(), &path).unwrap();
    let got = compiler::compile(&g, &JitOptions::default())
        .unwrap()
        .fused_ir();
    let file = format!("tests/golden/{example}.fused.txt");
    if std::env::var_os("TENSORLIFT_BLESS").is_some() {
        std::fs::write(&file, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&file)
        .unwrap_or_else(|_| panic!("{file} is missing; run with TENSORLIFT_BLESS=1"));
    assert_eq!(
        got, want,
        "fusion plan of {path} changed; if intended, re-bless with TENSORLIFT_BLESS=1"
    );
}

#[test]
fn softmax_plan() {
    golden("softmax");
}

#[test]
fn arith_plan() {
    golden("arith");
}

#[test]
fn mlp_plan() {
    golden("mlp");
}

#[test]
fn gather_plan() {
    golden("gather");
}
