//! The differential suite: random graphs and every op × dtype fixture run
//! through the interpreter and the JIT. In exact mode (no approximated
//! functions, no reordered float reductions) the JIT must agree bitwise
//! (any NaN matches any NaN), at Cranelift opt levels none and speed, with
//! and without SIMD; in the default mode, within the documented tolerances.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use common::random_graph::random_graph;
use proptest::prelude::*;
use tensorlift::compiler::{self, JitOptions, OptLevel};
use tensorlift::ir::text;
use tensorlift::runtime::interp;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

const EXACT: [JitOptions; 3] = [
    JitOptions {
        opt_level: OptLevel::None,
        exact: true,
        vectorize: false,
    },
    JitOptions {
        opt_level: OptLevel::Speed,
        exact: true,
        vectorize: true,
    },
    JitOptions {
        opt_level: OptLevel::None,
        exact: true,
        vectorize: true,
    },
];

fn check_graph(
    g: &tensorlift::Graph,
    inputs: &[tensorlift::Tensor],
    opts: &JitOptions,
) -> Result<(), String> {
    let want = interp::run(g, inputs);
    let exe = compiler::compile(g, opts)
        .map_err(|e| format!("compile failed: {e}\n{}", text::print(g)))?;
    let got = exe.run(inputs);
    match (want, got) {
        (Ok(w), Ok(o)) => {
            for (i, (a, b)) in o.iter().zip(&w).enumerate() {
                if !common::same_bits(a, b) {
                    return Err(format!(
                        "output {i} differs ({opts:?}):\n jit    {a:?}\n interp {b:?}\n{}\n{}",
                        text::print(g),
                        exe.fused_ir()
                    ));
                }
            }
            Ok(())
        }
        (Err(a), Err(b)) if a.code() == b.code() => Ok(()),
        (w, o) => Err(format!(
            "interp {:?} vs jit {:?}\n{}",
            w.err(),
            o.err(),
            text::print(g)
        )),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn random_graphs_agree_bitwise_in_exact_mode(seed in any::<u64>(), n in 1usize..30) {
        let (g, inputs) = random_graph(seed, n);
        for opts in &EXACT {
            if let Err(e) = check_graph(&g, &inputs, opts) {
                prop_assert!(false, "seed {}: {}", seed, e);
            }
        }
    }
}

#[test]
fn every_op_fixture_agrees_with_the_interpreter() {
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string("tests/fixtures/ops/manifest.json").unwrap())
            .unwrap();
    let mut npz = npyz::npz::NpzArchive::open("tests/fixtures/ops/data.npz").unwrap();
    for case in manifest.as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let g = text::parse(case["program"].as_str().unwrap(), name).unwrap();
        let n = case["inputs"].as_u64().unwrap() as usize;
        let inputs: Vec<_> = (0..n)
            .map(|i| {
                tensorlift::npy::from_npy_file(
                    npz.by_name(&format!("{name}__in{i}")).unwrap().unwrap(),
                )
                .unwrap()
            })
            .collect();
        let expected =
            tensorlift::npy::from_npy_file(npz.by_name(&format!("{name}__out")).unwrap().unwrap())
                .unwrap();
        for opts in &EXACT {
            if let Err(e) = check_graph(&g, &inputs, opts) {
                panic!("{name}: {e}");
            }
        }
        // The default (fast) mode against NumPy, with the fixture's
        // tolerance widened by the approximated functions' bound.
        let exe = compiler::compile(&g, &JitOptions::default()).unwrap();
        let got = exe.run(&inputs).unwrap();
        let (rtol, atol) = (
            case["rtol"].as_f64().unwrap(),
            case["atol"].as_f64().unwrap(),
        );
        let approx = name.starts_with("exp_f32")
            || name.starts_with("logistic_f32")
            || name.starts_with("reduce_sum")
            || name.starts_with("reduce_prod");
        let (rtol, atol) = if approx {
            (rtol.max(1e-6), atol.max(1e-6))
        } else {
            (rtol, atol)
        };
        common::assert_close(
            &got[0],
            &expected,
            rtol,
            atol,
            &format!("{name} (jit, default options)"),
        );
    }
}
