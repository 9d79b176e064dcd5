//! Every op on every dtype it is defined on, against NumPy-computed
//! fixtures (tests/fixtures/gen_ops.py). Each fixture is a .tlir program,
//! so this also exercises the parser and the text round trip.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::collections::HashSet;

use tensorlift::ir::{BinaryOp, CmpOp, Op, ReduceOp, UnaryOp, text};
use tensorlift::runtime::interp;

#[test]
fn every_op_matches_numpy() {
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string("tests/fixtures/ops/manifest.json").unwrap())
            .unwrap();
    let mut npz = npyz::npz::NpzArchive::open("tests/fixtures/ops/data.npz").unwrap();
    let mut load = |name: String| {
        let f = npz
            .by_name(&name)
            .unwrap()
            .unwrap_or_else(|| panic!("fixture array {name} missing"));
        tensorlift::npy::from_npy_file(f).unwrap()
    };
    let cases = manifest.as_array().unwrap();
    let mut covered = HashSet::new();
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let program = case["program"].as_str().unwrap();
        let g = text::parse(program, name).unwrap_or_else(|e| panic!("{name}: {e}\n{program}"));
        // Printing and parsing back gives the identical graph.
        assert_eq!(
            text::parse(&text::print(&g), name).unwrap(),
            g,
            "{name}: text round trip"
        );
        let n = case["inputs"].as_u64().unwrap() as usize;
        let inputs: Vec<_> = (0..n).map(|i| load(format!("{name}__in{i}"))).collect();
        let expected = load(format!("{name}__out"));
        let (rtol, atol) = (
            case["rtol"].as_f64().unwrap(),
            case["atol"].as_f64().unwrap(),
        );
        let got = interp::run(&g, &inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
        common::assert_close(&got[0], &expected, rtol, atol, name);
        // The optimized graph agrees (constant folding where all inputs are constant).
        let mut opt = g.clone();
        interp::optimize(&mut opt).unwrap();
        let got = interp::run(&opt, &inputs).unwrap();
        common::assert_close(
            &got[0],
            &expected,
            rtol,
            atol,
            &format!("{name} (optimized)"),
        );
        for node in g.nodes() {
            if !matches!(node.op, Op::Parameter { .. }) {
                covered.insert((node.op.name(), g.ty(node.results[0]).dtype));
            }
        }
    }
    assert!(
        cases.len() > 900,
        "fixture set is incomplete: {} cases",
        cases.len()
    );
    // Every op of the IR appears at least once: every function of each
    // op family, and each op outside the families.
    let ops: HashSet<String> = covered.iter().map(|(o, _)| o.clone()).collect();
    let families = UnaryOp::ALL
        .iter()
        .map(|u| Op::Unary(*u))
        .chain(BinaryOp::ALL.iter().map(|b| Op::Binary(*b)))
        .chain(CmpOp::ALL.iter().map(|c| Op::Compare(*c)))
        .chain(ReduceOp::ALL.iter().map(|r| Op::Reduce {
            op: *r,
            axes: vec![],
            keepdims: false,
        }))
        .map(|op| op.name());
    let others = [
        "select",
        "clamp",
        "convert",
        "broadcast_in_dim",
        "reshape",
        "transpose",
        "slice",
        "concatenate",
        "pad",
        "reverse",
        "argmax",
        "argmin",
        "argsort",
        "cumsum",
        "dot_general",
        "take",
        "bitcast_convert",
        "dynamic_slice",
        "dynamic_update_slice",
        "scatter",
        "iota",
    ]
    .map(String::from);
    for op in families.chain(others) {
        assert!(ops.contains(&op), "no fixture exercises {op}");
    }
}
