//! Compiled code memory is freed when an executable drops. Its own test
//! binary: it measures the process's resident memory, which other tests
//! running concurrently in the same process would disturb.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use tensorlift::compiler::{self, JitOptions};
use tensorlift::ir::text;

fn rss_kib() -> usize {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<usize>().ok())
        })
        .map_or(0, |pages| pages * 4)
}

#[test]
fn compiling_and_dropping_ten_thousand_functions_keeps_memory_flat() {
    let g = text::parse("graph @g {\n  %x = parameter 0 : f32[16]\n  %y = exp(%x) : f32[16]\n  %z = mul(%y, %x) : f32[16]\n  return %z as \"z\"\n}\n", "g").unwrap();
    let x = common::f32s(&[0.5; 16], &[16]);
    let round = |n: usize| {
        for _ in 0..n {
            let exe = compiler::compile(&g, &JitOptions::default()).unwrap();
            exe.run(std::slice::from_ref(&x)).unwrap();
        }
    };
    round(1000);
    let before = rss_kib();
    round(10_000);
    let after = rss_kib();
    // Leaking even one 4 KiB code page per module would add ~40 MiB.
    assert!(
        after <= before + 8 * 1024,
        "RSS grew from {before} KiB to {after} KiB"
    );
}
