//! Reverse-mode gradients (`tensorlift::ir::autodiff::grad`) against JAX's,
//! from the fixtures of tests/fixtures/gen_grads.py: for every
//! differentiable op and the control-flow ops, a .tlir program whose one
//! output is the real scalar `reduce_sum(mul(OP(...), w))` (`w` the last
//! parameter), its inputs, the loss JAX computes and JAX's gradient with
//! respect to each parameter the case lists in `wrt`. The gradient graph
//! runs interpreted and compiled; both must match JAX at the case's
//! tolerance. The fixtures hold JAX's conventions at the non-differentiable
//! points (ties of max/min split the cotangent, clamp at its bounds passes
//! none, ...): the generator's docstring lists them.
//!
//! `TENSORLIFT_GRAD_CASE=substring` runs only the cases whose name contains
//! it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::collections::BTreeSet;
use std::panic::{AssertUnwindSafe, catch_unwind};

use tensorlift::Tensor;
use tensorlift::ir::{Graph, Op, autodiff, text};
use tensorlift::runtime::interp;

/// The ops a gradient rule must exist for (or, for compares, argmax/argmin
/// and integer-valued ops, that must pass no gradient), each exercised by
/// some fixture; `scatter/<combiner>` names a scatter combiner.
const DIFFERENTIABLE: &[&str] = &[
    // unary
    "neg",
    "abs",
    "sign",
    "floor",
    "ceil",
    "round",
    "sqrt",
    "rsqrt",
    "exp",
    "expm1",
    "log",
    "log1p",
    "tanh",
    "logistic",
    "sin",
    "cos",
    "erf",
    "square",
    "reciprocal",
    // binary
    "add",
    "sub",
    "mul",
    "div",
    "rem",
    "pow",
    "max",
    "min",
    // no gradient through the predicate
    "compare_eq",
    "compare_ne",
    "compare_lt",
    "compare_le",
    "compare_gt",
    "compare_ge",
    "select",
    "clamp",
    "convert",
    // layout
    "broadcast_in_dim",
    "reshape",
    "transpose",
    "slice",
    "concatenate",
    "pad",
    "reverse",
    // reductions
    "reduce_sum",
    "reduce_prod",
    "reduce_max",
    "reduce_min",
    "argmax",
    "argmin",
    "dot_general",
    // gather / scatter
    "take",
    "dynamic_slice",
    "dynamic_update_slice",
    "scatter/add",
    "scatter/set",
    "scatter/max",
    "scatter/min",
    // control flow
    "while",
    "case",
];

struct Case {
    name: String,
    program: String,
    graph: Graph,
    inputs: Vec<Tensor>,
    wrt: Vec<usize>,
    grads: Vec<Tensor>,
    value: Tensor,
    rtol: f64,
    atol: f64,
}

fn load_cases() -> Vec<Case> {
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string("tests/fixtures/grads/manifest.json").unwrap(),
    )
    .unwrap();
    let mut npz = npyz::npz::NpzArchive::open("tests/fixtures/grads/data.npz").unwrap();
    let mut load = |name: String| {
        let f = npz
            .by_name(&name)
            .unwrap()
            .unwrap_or_else(|| panic!("fixture array {name} missing"));
        tensorlift::npy::from_npy_file(f).unwrap()
    };
    let filter = std::env::var("TENSORLIFT_GRAD_CASE").ok();
    let mut cases = Vec::new();
    for case in manifest.as_array().unwrap() {
        let name = case["name"].as_str().unwrap().to_string();
        if filter.as_ref().is_some_and(|f| !name.contains(f.as_str())) {
            continue;
        }
        let program = case["program"].as_str().unwrap().to_string();
        let graph =
            text::parse(&program, &name).unwrap_or_else(|e| panic!("{name}: {e}\n{program}"));
        let n = case["inputs"].as_u64().unwrap() as usize;
        let inputs = (0..n).map(|i| load(format!("{name}__in{i}"))).collect();
        let wrt: Vec<usize> = case["wrt"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_u64().unwrap() as usize)
            .collect();
        let grads = (0..wrt.len())
            .map(|k| load(format!("{name}__grad{k}")))
            .collect();
        let value = load(format!("{name}__value"));
        let (rtol, atol) = (
            case["rtol"].as_f64().unwrap(),
            case["atol"].as_f64().unwrap(),
        );
        cases.push(Case {
            name,
            program,
            graph,
            inputs,
            wrt,
            grads,
            value,
            rtol,
            atol,
        });
    }
    cases
}

/// Runs `check` on every case, then fails listing every case that failed
/// with its message (a panic inside the code under test, which cannot name
/// the case, is listed under the case's name too).
fn for_each_case(cases: &[Case], check: impl Fn(&Case)) {
    let failed: Vec<String> = cases
        .iter()
        .filter_map(|c| {
            let payload = catch_unwind(AssertUnwindSafe(|| check(c))).err()?;
            let msg = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_string()))
                .unwrap_or_default();
            let first = msg.lines().next().unwrap_or("");
            Some(format!("  {}: {first}", c.name))
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} cases failed:\n{}",
        failed.len(),
        cases.len(),
        failed.join("\n")
    );
}

/// The programs compute what JAX's functions do: the loss of each, run
/// forward, is JAX's (this checks the fixtures, not autodiff).
#[test]
fn programs_match_jax_values() {
    let cases = load_cases();
    for_each_case(&cases, |c| {
        let name = &c.name;
        assert_eq!(c.graph.outputs().len(), 1, "{name}: one output");
        let got = interp::run(&c.graph, &c.inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
        common::assert_close(
            &got[0],
            &c.value,
            c.rtol,
            c.atol,
            &format!("{name}: loss (interpreted)"),
        );
    });
}

#[test]
fn gradients_match_jax() {
    let cases = load_cases();
    for_each_case(&cases, |c| {
        let name = &c.name;
        let g = &c.graph;
        let dg = autodiff::grad(g, &c.wrt, false)
            .unwrap_or_else(|e| panic!("{name}: grad: {e}\n{}", c.program));
        tensorlift::ir::verify(&dg)
            .unwrap_or_else(|e| panic!("{name}: the gradient graph does not verify: {e}"));
        // The same parameters, one output per parameter differentiated.
        let types = |g: &Graph| -> Vec<_> { g.params().iter().map(|v| g.ty(*v).clone()).collect() };
        assert_eq!(types(&dg), types(g), "{name}: gradient graph's parameters");
        assert_eq!(
            dg.outputs().len(),
            c.wrt.len(),
            "{name}: gradient graph's outputs"
        );

        let interpreted =
            interp::run(&dg, &c.inputs).unwrap_or_else(|e| panic!("{name}: interpreted: {e}"));
        let compiled = tensorlift::compile_graph(&dg, &tensorlift::JitOptions::default())
            .unwrap_or_else(|e| panic!("{name}: compile: {e}"))
            .run(&c.inputs)
            .unwrap_or_else(|e| panic!("{name}: compiled: {e}"));
        for (how, got) in [("interpreted", &interpreted), ("compiled", &compiled)] {
            assert_eq!(got.len(), c.wrt.len(), "{name} ({how}): number of results");
            for (k, (i, expected)) in c.wrt.iter().zip(&c.grads).enumerate() {
                common::assert_close(
                    &got[k],
                    expected,
                    c.rtol,
                    c.atol,
                    &format!("{name} ({how}): gradient {k}, w.r.t. parameter {i}"),
                );
            }
        }

        // With the value: the loss first, then the same gradients.
        let dv = autodiff::grad(g, &c.wrt, true)
            .unwrap_or_else(|e| panic!("{name}: grad with value: {e}"));
        assert_eq!(
            dv.outputs().len(),
            c.wrt.len() + 1,
            "{name}: outputs of the gradient graph with value"
        );
        let got = interp::run(&dv, &c.inputs)
            .unwrap_or_else(|e| panic!("{name}: with value, interpreted: {e}"));
        common::assert_close(
            &got[0],
            &c.value,
            c.rtol,
            c.atol,
            &format!("{name} (with value): the loss"),
        );
        for (k, expected) in c.grads.iter().enumerate() {
            common::assert_close(
                &got[k + 1],
                expected,
                c.rtol,
                c.atol,
                &format!(
                    "{name} (with value): gradient {k}, w.r.t. parameter {}",
                    c.wrt[k]
                ),
            );
        }
    });
}

/// Every op with a gradient rule appears in some fixture, so a rule that
/// is forgotten (or an op added without one) shows up here.
#[test]
fn fixtures_cover_every_differentiable_op() {
    if std::env::var("TENSORLIFT_GRAD_CASE").is_ok() {
        return;
    }
    let cases = load_cases();
    let mut covered = BTreeSet::new();
    for c in &cases {
        for g in c.graph.all_graphs() {
            for node in g.nodes() {
                covered.insert(node.op.name());
                if let Op::Scatter { combiner, .. } = &node.op {
                    covered.insert(format!("scatter/{}", combiner.name()));
                }
            }
        }
    }
    let missing: Vec<_> = DIFFERENTIABLE
        .iter()
        .filter(|op| !covered.contains(**op))
        .collect();
    assert!(
        missing.is_empty(),
        "no gradient fixture exercises {missing:?}"
    );
    assert!(
        cases.len() >= 100,
        "gradient fixture set is incomplete: {} cases",
        cases.len()
    );
}
