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
use tensorlift::compiler::{self, JitOptions};
use tensorlift::ir::text;
use tensorlift::runtime::interp;
use tensorlift::{DType, IrStage, Sym, TensorSpec, function};

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

/// The exact-mode configurations, shared with the graph fuzz target.
const EXACT: [JitOptions; 3] = tensorlift::fuzz::targets::EXACT;

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

    /// Random programs with loops (0 to 3 iterations, nested) and
    /// branches (index in and out of range), whose bodies are random
    /// programs themselves.
    #[test]
    fn random_graphs_with_control_flow_agree_bitwise_in_exact_mode(seed in any::<u64>(), n in 1usize..30) {
        let options = tensorlift::fuzz::random_graph::GenOptions {
            control_flow: true,
            ..Default::default()
        };
        let (g, inputs) = tensorlift::fuzz::random_graph::random_graph_with(seed, n, options).unwrap();
        for opts in &EXACT {
            if let Err(e) = check_graph(&g, &inputs, opts) {
                prop_assert!(false, "seed {}: {}", seed, e);
            }
        }
    }
}

/// The reverse-mode graph of a random program (with respect to every real
/// floating input, seeded with random cotangents for every real floating
/// output), or `None` when the program holds an op without a gradient rule
/// or no floating input.
fn random_vjp(
    g: &tensorlift::Graph,
    inputs: &[tensorlift::Tensor],
    seed: u64,
) -> Option<(tensorlift::Graph, Vec<tensorlift::Tensor>)> {
    use tensorlift::fuzz::random_graph::{Rng, random_tensor};
    let wrt: Vec<usize> = (0..inputs.len())
        .filter(|&i| inputs[i].dtype().is_float())
        .collect();
    if wrt.is_empty() {
        return None;
    }
    let v = match tensorlift::ir::autodiff::vjp(g, &wrt) {
        Ok(v) => v,
        // Ops with no rule (complex values, bitcast_convert, scatter
        // min/max, callbacks) are refused with a message naming them.
        Err(e) => {
            let m = e.to_string();
            assert!(
                m.contains("not supported")
                    || m.contains("not differentiable")
                    || m.contains("no gradient"),
                "unexpected autodiff error: {m}\n{}",
                text::print(g)
            );
            return None;
        }
    };
    let mut rng = Rng::new(seed ^ 0x5eed);
    let mut args = inputs.to_vec();
    for p in &v.params()[inputs.len()..] {
        args.push(random_tensor(&mut rng, v.ty(*p)).unwrap());
    }
    Some((v, args))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases() / 4, ..ProptestConfig::default() })]

    /// Gradients of random programs (with loops and branches half the
    /// time) are programs too: interpreter and JIT agree bitwise on them.
    #[test]
    fn random_gradients_agree_bitwise_in_exact_mode(seed in any::<u64>(), n in 1usize..20, cf in any::<bool>()) {
        let options = tensorlift::fuzz::random_graph::GenOptions {
            control_flow: cf,
            ..Default::default()
        };
        let (g, inputs) = tensorlift::fuzz::random_graph::random_graph_with(seed, n, options).unwrap();
        if let Some((v, args)) = random_vjp(&g, &inputs, seed) {
            for opts in &EXACT {
                if let Err(e) = check_graph(&v, &args, opts) {
                    prop_assert!(false, "seed {} (gradient of):\n{}\n{}", seed, text::print(&g), e);
                }
            }
        }
    }
}

/// The kernel of a fuzzed gradient (seed 1108619834843058225: the tie
/// mask of a `reduce_max` over a middle axis selecting a cotangent) that
/// died of a general protection fault under `TENSORLIFT_MAX_ISA=sse4.2`:
/// rows of 5 f32 start off a 16-byte boundary, and Cranelift 0.135 folded
/// the load of the compare's second operand into the legacy SSE `cmpps`,
/// whose memory operand must be aligned (codegen's `fcmp`). Run at every
/// ISA level in a child process (the cap is read once per process), at
/// both opt levels, f32 and f64; each must agree with the interpreter bit
/// for bit.
#[test]
fn float_compares_of_unaligned_rows_run_at_every_isa_level() {
    const CHILD: &str = "TENSORLIFT_TEST_CHILD_ISA";
    if let Ok(isa) = std::env::var(CHILD) {
        for dt in ["f32", "f64"] {
            let program = format!(
                "graph @ties {{
  %x = parameter 0 : {dt}[2,3,5]
  %m = parameter 1 : {dt}[2,5]
  %mb = broadcast_in_dim(%m) {{shape=[2,3,5], dims=[0,2]}} : {dt}[2,3,5]
  %eq = compare_eq(%x, %mb) : bool[2,3,5]
  %lt = compare_lt(%x, %mb) : bool[2,3,5]
  %a = parameter 2 : {dt}[2,5]
  %ab = broadcast_in_dim(%a) {{shape=[2,3,5], dims=[0,2]}} : {dt}[2,3,5]
  %z = parameter 3 : {dt}[2,3,5]
  %s = select(%eq, %ab, %z) : {dt}[2,3,5]
  %t = select(%lt, %z, %ab) : {dt}[2,3,5]
  return %s as \"s\", %t as \"t\"
}}"
            );
            let g = text::parse(&program, "ties").unwrap();
            let dtype = if dt == "f32" { DType::F32 } else { DType::F64 };
            // Ties with the broadcast row, and NaNs, in every row.
            let values = |n: usize, seed: usize| -> Vec<f64> {
                (0..n)
                    .map(|i| match (i * 7 + seed) % 6 {
                        0 => f64::NAN,
                        1 | 2 => 1.0,
                        k => k as f64 - 3.5,
                    })
                    .collect()
            };
            let tensor = |shape: &[usize], seed: usize| {
                let v = values(shape.iter().product(), seed);
                let t = tensorlift::Tensor::from(
                    ndarray::ArrayD::from_shape_vec(shape.to_vec(), v).unwrap(),
                );
                tensorlift::runtime::kernels::elementwise::convert(&t, dtype).unwrap()
            };
            let args = [
                tensor(&[2, 3, 5], 0),
                tensor(&[2, 5], 1),
                tensor(&[2, 5], 2),
                tensor(&[2, 3, 5], 3),
            ];
            for opts in &EXACT {
                if let Err(e) = check_graph(&g, &args, opts) {
                    panic!("{dt} at {isa}: {e}");
                }
            }
        }
        return;
    }
    let exe = std::env::current_exe().unwrap();
    for isa in ["sse4.2", "avx2", "avx512"] {
        let o = std::process::Command::new(&exe)
            .env(CHILD, isa)
            .env("TENSORLIFT_MAX_ISA", isa)
            .args([
                "--exact",
                "float_compares_of_unaligned_rows_run_at_every_isa_level",
                "--test-threads=1",
            ])
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success() && out.contains("1 passed"),
            "at {isa}: {:?}\n{out}\n{}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// The generator with control flow draws loops, branches and nesting
/// (so the test above covers them).
#[test]
fn the_control_flow_generator_draws_loops_branches_and_nesting() {
    let options = tensorlift::fuzz::random_graph::GenOptions {
        control_flow: true,
        ..Default::default()
    };
    let (mut loops, mut cases, mut nested, mut data_exits) = (0, 0, 0, 0);
    for seed in 0..200 {
        let (g, _) = tensorlift::fuzz::random_graph::random_graph_with(seed, 20, options).unwrap();
        let printed = text::print(&g);
        loops += printed.matches("= while(").count();
        cases += printed.matches("= case(").count();
        nested += usize::from(printed.contains("\n        graph @"));
        // A condition testing the carried value (its maximum).
        data_exits += printed
            .match_indices("_cond {")
            .filter(|(at, _)| {
                let block = &printed[*at..];
                let end = block.find("return").unwrap_or(block.len());
                block[..end].contains("reduce_max(")
            })
            .count();
    }
    assert!(
        loops > 50 && cases > 50 && nested > 10 && data_exits > 10,
        "{loops} loops, {cases} cases, {nested} nested, {data_exits} data-dependent exits"
    );
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
        // tolerance widened by the approximated functions' bound, and
        // denormals kept as NumPy keeps them (flushed, a denormal operand
        // reads as zero: sign(1e-40) is not 1).
        let exe = compiler::compile(&g, &common::ieee()).unwrap();
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

/// Row and column reductions and elementwise loops over every length from
/// 0 to 70, so vector bodies, unrolled accumulators and scalar tails are all
/// exercised: exact mode bitwise; default mode within 1e-5 for float sums
/// and products (vector accumulators reorder them), bitwise otherwise.
#[test]
fn reductions_and_loops_of_every_length() {
    use tensorlift::ir::infer::infer;
    use tensorlift::ir::{Graph, Literal, Op, ReduceOp, Site, TensorType, UnaryOp};
    use tensorlift::{DType, Tensor};
    let mut rng = common::random_graph::Rng::new(99);
    // Every dtype with 128-bit vector lanes: the integers, f32 and f64.
    let lane_dtypes = tensorlift::ir::ALL_DTYPES
        .into_iter()
        .filter(|d| d.is_int() || matches!(d, DType::F32 | DType::F64));
    for dtype in lane_dtypes {
        // Every reduction defined on the dtype along the rows; two along
        // the columns.
        let defined = |op: &ReduceOp| {
            let reduce = Op::Reduce {
                op: *op,
                axes: vec![0],
                keepdims: false,
            };
            infer(&reduce, &[&TensorType::known(dtype, &[1])]).is_ok()
        };
        let cases: Vec<(ReduceOp, usize)> = ReduceOp::ALL
            .iter()
            .filter(|op| defined(op))
            .map(|op| (*op, 1))
            .chain([(ReduceOp::Sum, 0), (ReduceOp::Max, 0)])
            .collect();
        for n in 0..70usize {
            for &(op, axis) in &cases {
                let mut g = Graph::new("r");
                let site = Site::unknown();
                let ty = TensorType::known(dtype, &[3, n]);
                let x = g.add_parameter(0, ty.clone(), None, site.clone()).unwrap();
                let e = if dtype.is_float() {
                    g.add(Op::Unary(UnaryOp::Exp), &[x], site.clone()).unwrap()
                } else {
                    x
                };
                let r = g
                    .add(
                        Op::Reduce {
                            op,
                            axes: vec![axis],
                            keepdims: false,
                        },
                        &[e],
                        site.clone(),
                    )
                    .unwrap();
                let two = g
                    .add(
                        Op::Constant(Literal::scalar(dtype, 2.0).unwrap()),
                        &[],
                        site.clone(),
                    )
                    .unwrap();
                let m = g
                    .add(
                        Op::Binary(tensorlift::ir::BinaryOp::Mul),
                        &[x, two],
                        site.clone(),
                    )
                    .unwrap();
                let a = g.add(Op::Unary(UnaryOp::Abs), &[m], site.clone()).unwrap();
                g.add_output(r, "r").unwrap();
                g.add_output(m, "m").unwrap();
                g.add_output(a, "a").unwrap();
                let mut input = common::random_graph::random_tensor(&mut rng, &ty);
                if dtype.is_float() {
                    // Keep products and sums finite and well conditioned.
                    let v: Vec<f64> = (0..3 * n)
                        .map(|i| ((i * 7919) % 13) as f64 / 13.0 - 0.5)
                        .collect();
                    input = tensorlift::runtime::kernels::elementwise::convert(
                        &Tensor::from(ndarray::ArrayD::from_shape_vec(vec![3, n], v).unwrap()),
                        dtype,
                    )
                    .unwrap();
                }
                let inputs = [input];
                for opts in &EXACT {
                    check_graph(&g, &inputs, opts)
                        .unwrap_or_else(|e| panic!("{dtype} n={n} {op:?} axis {axis}: {e}"));
                }
                let want = interp::run(&g, &inputs).unwrap();
                let got = compiler::compile(&g, &JitOptions::default())
                    .unwrap()
                    .run(&inputs)
                    .unwrap();
                let loose = dtype.is_float() && matches!(op, ReduceOp::Sum | ReduceOp::Prod);
                // exp is approximated in the default mode (within 2 ulp).
                let (rt, at): (f64, f64) = if loose {
                    (1e-5, 1e-6)
                } else if dtype.is_float() {
                    (4e-7, 0.0)
                } else {
                    (0.0, 0.0)
                };
                common::assert_close(
                    &got[0],
                    &want[0],
                    rt,
                    at,
                    &format!("{dtype} n={n} {op:?} axis {axis}"),
                );
                common::assert_close(&got[1], &want[1], 0.0, 0.0, &format!("{dtype} n={n} loop"));
                common::assert_close(&got[2], &want[2], 0.0, 0.0, &format!("{dtype} n={n} abs"));
            }
        }
    }
}

/// Float max/min rows (vector accumulators with NaN and zero-sign
/// companions): NaN anywhere (either sign, any position) gives NaN, a zero
/// maximum is +0 when some element is +0 and -0 when all are, the other
/// way round for the minimum, infinities pass; every length 0..70, bitwise
/// against the interpreter (any NaN matching any NaN).
#[test]
fn float_max_min_keep_nans_and_signed_zeros() {
    use tensorlift::ir::{Graph, Op, ReduceOp, Site, TensorType};
    use tensorlift::{DType, Tensor};
    for dtype in [DType::F32, DType::F64] {
        for n in 0..70usize {
            let k = (n * 7 + 3) % n.max(1);
            let rows: Vec<Vec<f64>> = vec![
                vec![-0.0; n],
                (0..n).map(|i| if i == k { 0.0 } else { -0.0 }).collect(),
                (0..n)
                    .map(|i| if i == k { 0.0 } else { -1.5 - i as f64 })
                    .collect(),
                (0..n).map(|i| if i == k { -0.0 } else { 0.0 }).collect(),
                (0..n)
                    .map(|i| if i == k { f64::NAN } else { i as f64 - 9.0 })
                    .collect(),
                (0..n)
                    .map(|i| if i == k { -f64::NAN } else { i as f64 })
                    .collect(),
                vec![f64::NEG_INFINITY; n],
                (0..n)
                    .map(|i| if i == k { f64::INFINITY } else { -(i as f64) })
                    .collect(),
            ];
            let v: Vec<f64> = rows.iter().flatten().copied().collect();
            let input = tensorlift::runtime::kernels::elementwise::convert(
                &Tensor::from(ndarray::ArrayD::from_shape_vec(vec![rows.len(), n], v).unwrap()),
                dtype,
            )
            .unwrap();
            let mut g = Graph::new("extremes");
            let site = Site::unknown();
            let ty = TensorType::known(dtype, &[rows.len(), n]);
            let x = g.add_parameter(0, ty, None, site.clone()).unwrap();
            for (op, name) in [(ReduceOp::Max, "max"), (ReduceOp::Min, "min")] {
                let reduce = Op::Reduce {
                    op,
                    axes: vec![1],
                    keepdims: false,
                };
                let r = g.add(reduce, &[x], site.clone()).unwrap();
                g.add_output(r, name).unwrap();
            }
            for opts in EXACT.iter().chain([&common::ieee()]) {
                check_graph(&g, std::slice::from_ref(&input), opts)
                    .unwrap_or_else(|e| panic!("{dtype} n={n}: {e}"));
            }
        }
    }
}

/// `v` as a 1-D tensor of `dtype`.
fn typed(v: Vec<f64>, dtype: tensorlift::DType) -> tensorlift::Tensor {
    let n = v.len();
    tensorlift::runtime::kernels::elementwise::convert(
        &tensorlift::Tensor::from(ndarray::ArrayD::from_shape_vec(vec![n], v).unwrap()),
        dtype,
    )
    .unwrap()
}

/// Requires `body` compiled under every option set (`EXACT`, the default
/// with denormals kept) to give the interpreter's bits on `x`; returns
/// the default build's CLIF (for checks that it vectorized).
fn agrees_bitwise(
    body: impl Fn(Sym) -> Sym + Copy + Send + Sync + 'static,
    x: &tensorlift::Tensor,
    what: &str,
) -> String {
    let want = function(body).call(std::slice::from_ref(x)).unwrap();
    for opts in EXACT.iter().chain([&common::ieee()]) {
        let f = function(body).jit_compile(true).jit_options(*opts);
        let got = f.call(std::slice::from_ref(x)).unwrap();
        assert!(
            common::same_bits(&got[0], &want[0]),
            "{what} {opts:?}: {:?} vs {:?}",
            got[0],
            want[0]
        );
    }
    let spec = TensorSpec::known(x.dtype(), x.shape());
    function(body)
        .jit_compile(true)
        .compiler_ir(&[spec], IrStage::Cranelift)
        .unwrap()
}

/// `select(x <op> c, x, x + 2)` for every comparison and the dtypes whose
/// comparisons vectorize into lane masks (64-bit integers with SSE4.2),
/// over lengths that cover vector bodies and tails: bitwise equal to the
/// interpreter, NaN lanes included for floats.
#[test]
fn selects_of_every_comparison_agree_bitwise() {
    use tensorlift::ir::CmpOp;
    use tensorlift::{DType, Sym};
    for dtype in [
        DType::F32,
        DType::F64,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::U8,
        DType::U32,
        DType::I64,
        DType::U64,
    ] {
        for &cmp in CmpOp::ALL {
            let body = move |x: Sym| {
                let p = match cmp {
                    CmpOp::Eq => x.equal(3.0),
                    CmpOp::Ne => x.not_equal(3.0),
                    CmpOp::Lt => x.less(3.0),
                    CmpOp::Le => x.less_equal(3.0),
                    CmpOp::Gt => x.greater(3.0),
                    CmpOp::Ge => x.greater_equal(3.0),
                };
                p.select(&x, &x + 2.0)
            };
            for n in [0usize, 3, 17, 40, 67] {
                let v: Vec<f64> = (0..n)
                    .map(|i| {
                        if dtype.is_float() && i % 11 == 5 {
                            f64::NAN
                        } else {
                            ((i * 7) % 9) as f64
                        }
                    })
                    .collect();
                let x = typed(v, dtype);
                let clif = agrees_bitwise(body, &x, &format!("{dtype} {cmp:?} n={n}"));
                // Vectorized: a lane mask and `bitselect` (64-bit lanes
                // with SSE4.2's `pcmpgtq`), or (f32 on AVX2 and AVX-512
                // hosts) machine code (docs/compiler.md).
                assert!(
                    clif.contains("bitselect") || clif.contains(" machine code, ") || n < 17,
                    "{dtype} {cmp:?}: not vectorized"
                );
            }
        }
    }
}

/// Conversions between f32 and 32-bit integers (and between i32 and u32,
/// and between f32 and f64) are vectorized (`cvtdq2ps`, `cvttps2dq` with
/// saturation, `cvtps2pd`, `cvtpd2ps`); every element
/// agrees bitwise with the interpreter: NaN → 0, ±inf and out-of-range
/// values saturate, negative floats to u32 give 0, large integers round to
/// nearest f32. Loads of both dtypes, a broadcast operand, vector bodies
/// and tails.
#[test]
fn vector_conversions_agree_bitwise() {
    use tensorlift::{DType, Sym};
    let floats: Vec<f32> = vec![
        0.0,
        -0.0,
        0.5,
        -0.5,
        1.5,
        -1.5,
        2.5,
        -2.7,
        1e-40,
        16_777_217.0,
        2_147_483_520.0,
        2_147_483_648.0,
        -2_147_483_648.0,
        -2_147_483_904.0,
        4_294_967_040.0,
        4_294_967_296.0,
        1e20,
        -1e20,
        f32::NAN,
        -f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MAX,
        f32::MIN,
    ];
    let ints: Vec<i64> = vec![
        0,
        1,
        -1,
        7,
        16_777_217,
        -16_777_217,
        16_777_219,
        2_147_483_647,
        -2_147_483_648,
        123_456_789,
        -987_654_321,
        33_554_435,
    ];
    let cases = [
        (DType::F32, DType::I32),
        (DType::F32, DType::U32),
        (DType::I32, DType::F32),
        (DType::U32, DType::F32),
        (DType::I32, DType::U32),
        (DType::U32, DType::I32),
        (DType::F32, DType::F64),
        (DType::F64, DType::F32),
    ];
    for (from, to) in cases {
        for n in [3usize, 17, 40, 67, 1000] {
            let v: Vec<f64> = if from == DType::F64 {
                // f64 values that round, overflow and underflow in f32.
                (0..n)
                    .map(|i| {
                        let f = f64::from(floats[i % floats.len()]);
                        match i % 4 {
                            0 => f * (1.0 + 2f64.powi(-30)),
                            1 => f * 1e10,
                            2 => f * 1e-300,
                            _ => f,
                        }
                    })
                    .collect()
            } else if from == DType::F32 {
                (0..n)
                    .map(|i| f64::from(floats[i % floats.len()]))
                    .collect()
            } else {
                (0..n)
                    .map(|i| {
                        let x = ints[i % ints.len()];
                        // u32: the negative patterns as their u32 values.
                        if from == DType::U32 {
                            (x as u32) as f64
                        } else {
                            x as f64
                        }
                    })
                    .collect()
            };
            // A second operand of the target type, and the conversion used
            // in arithmetic of that type.
            let body = move |x: Sym| {
                let c = x.cast(to);
                &c + &(&c * 3.0)
            };
            let clif = agrees_bitwise(body, &typed(v, from), &format!("{from} -> {to} n={n}"));
            let vector_cvt = clif.lines().any(|l| {
                (l.contains("fcvt") && l.contains("x4"))
                    || l.contains("fvpromote_low")
                    || l.contains("fvdemote")
            });
            let same_bits =
                matches!(from, DType::I32 | DType::U32) && matches!(to, DType::I32 | DType::U32);
            assert!(
                vector_cvt || same_bits || n < 4,
                "{from} -> {to}: no vector conversion in\n{clif}"
            );
        }
    }
}

/// Float `sign` is vectorized (bit operations and a lane mask): the same
/// bits as the interpreter for NaN of either sign (kept, payload and all),
/// ±0 (kept), infinities, denormals, f32 and f64, bodies and tails.
#[test]
fn float_sign_agrees_bitwise() {
    use tensorlift::{DType, Sym};
    let vals = [
        0.0,
        -0.0,
        f64::NAN,
        -f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        1e-310,
        -1e-310,
        2.5,
        -7.0,
        1e-45,
        -3e38,
    ];
    for dtype in [DType::F32, DType::F64] {
        for n in [3usize, 17, 40] {
            let v: Vec<f64> = (0..n).map(|i| vals[i % vals.len()]).collect();
            let clif = agrees_bitwise(
                |x: Sym| x.sign(),
                &typed(v, dtype),
                &format!("{dtype} n={n}"),
            );
            assert!(
                clif.contains("bitselect") || n < 4,
                "{dtype} n={n}: not vectorized"
            );
        }
    }
}

/// 64-bit integer multiplication, min/max and abs run on 2-lane vectors
/// where the host has AVX-512F/VL/DQ (`vpmullq`, `vpmaxsq`, `vpabsq`, ...;
/// their values are
/// checked bitwise by `reductions_and_loops_of_every_length`), and stay
/// scalar elsewhere, or where `TENSORLIFT_MAX_ISA` caps the code below
/// AVX-512 (`scripts/test.sh` runs this file so capped).
#[test]
fn int64_lanes_vectorize_with_avx512() {
    use tensorlift::compiler::{IsaLevel, max_isa};
    use tensorlift::{DType, Sym};
    let avx512 = max_isa() == IsaLevel::Avx512;
    for dtype in [DType::I64, DType::U64] {
        let spec = [TensorSpec::known(dtype, &[3, 40])];
        let mul = function(|x: Sym| &x * 3.0).jit_compile(true);
        let clif = mul.compiler_ir(&spec, IrStage::Cranelift).unwrap();
        assert_eq!(clif.contains("load.i64x2"), avx512, "{dtype} mul");
        let max = function(|x: Sym| x.reduce_max(Some(&[1]), false)).jit_compile(true);
        let clif = max.compiler_ir(&spec, IrStage::Cranelift).unwrap();
        assert_eq!(clif.contains("max.i64x2"), avx512, "{dtype} max");
        if dtype == DType::I64 {
            let abs = function(|x: Sym| x.abs()).jit_compile(true);
            let clif = abs.compiler_ir(&spec, IrStage::Cranelift).unwrap();
            assert_eq!(clif.contains("load.i64x2"), avx512, "{dtype} abs");
        }
    }
}

/// Row groups (kernels interleaved a block of rows at a time, row ranges on
/// different threads) compute exactly what the interpreter computes:
/// softmax and a row normalization over shapes with many blocks, and a
/// column reduction, which must not be grouped (its rows depend on every
/// row).
#[test]
fn row_groups_agree_bitwise_with_the_interpreter() {
    type Body = fn(Sym) -> Sym;
    // (name, body, forms a row group, the sum stashes exp for the division)
    let bodies: [(&str, Body, bool, bool); 4] = [
        ("softmax", softmax_, true, true),
        ("normalize", normalize_, true, false),
        ("by_column", by_column_, false, false),
        // (An exact f32 column sum is the interpreter's kernel, which
        // accumulates in f64: nothing to stash its values for.)
        ("column_softmax", column_softmax_, false, false),
    ];
    for (name, body, grouped, stashed) in bodies {
        for (rows, cols) in [(3000usize, 257usize), (7, 20000), (1, 64)] {
            let n = rows * cols;
            let data: Vec<f32> = (0..n)
                .map(|i| ((i as u64).wrapping_mul(2_654_435_761) % 1000) as f32 / 100.0 - 5.0)
                .collect();
            let x = common::f32s(&data, &[rows, cols]);
            let want = function(body).call(std::slice::from_ref(&x)).unwrap();
            for opts in EXACT {
                let f = function(body).jit_compile(true).jit_options(opts);
                let got = f.call(std::slice::from_ref(&x)).unwrap();
                assert!(
                    common::same_bits(&got[0], &want[0]),
                    "{name} {rows}x{cols} {opts:?}"
                );
                let plan = f
                    .compiler_ir(
                        &[TensorSpec::known(DType::F32, &[rows, cols])],
                        IrStage::Fused,
                    )
                    .unwrap();
                assert_eq!(
                    plan.contains("row group"),
                    grouped && rows > 1,
                    "{name}\n{plan}"
                );
                // (With one row the division's loop may merge its dims where
                // the reduction's cannot, and then the index spaces differ.)
                if rows > 1 {
                    assert_eq!(plan.contains("stash e"), stashed, "{name}\n{plan}");
                }
            }
        }
    }
}

fn softmax_(x: Sym) -> Sym {
    let e = (&x - x.reduce_max(Some(&[1]), true)).exp();
    &e / e.reduce_sum(Some(&[1]), true)
}

fn normalize_(x: Sym) -> Sym {
    let n = 1.0 / 64.0;
    let mean = x.reduce_sum(Some(&[1]), true) * n;
    let d = &x - mean;
    let var = (&d * &d).reduce_sum(Some(&[1]), true) * n;
    &d / (var + 1e-5).sqrt()
}

fn column_softmax_(x: Sym) -> Sym {
    let e = (&x - x.reduce_max(Some(&[0]), true)).exp();
    &e / e.reduce_sum(Some(&[0]), true)
}

fn by_column_(x: Sym) -> Sym {
    &x - x.reduce_max(Some(&[0]), true)
}

/// The random graphs above reach the ops loops need (shifts with amounts
/// out of range, bitcasts, dynamic slices at clamped indices), so the
/// property covers them.
#[test]
fn random_graphs_include_the_loop_ops() {
    let mut seen = std::collections::HashSet::new();
    for seed in 0..2000 {
        let (g, _) = random_graph(seed, 20);
        for n in g.nodes() {
            seen.insert(n.op.name());
        }
    }
    for op in [
        "shift_left",
        "shift_right_logical",
        "shift_right_arithmetic",
        "bitcast_convert",
        "dynamic_slice",
        "dynamic_update_slice",
    ] {
        assert!(seen.contains(op), "no random graph has {op}");
    }
}

/// One random `take` and a reader it fuses into, from `seed`: the table
/// (rank 1–3, any non-half dtype), the axis, the indices (rank 0–2, any
/// integer type; one out of range one time in eight, which must be the
/// same error on both sides) and the reader (a reversed copy, a cast and
/// product, a sum or max over random axes, a transpose).
fn random_gather(seed: u64) -> (tensorlift::Function, [tensorlift::Tensor; 2]) {
    use common::random_graph::Rng;
    let mut rng = Rng::new(seed);
    let tables = [
        DType::F32,
        DType::F64,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::I16,
        DType::Bool,
    ];
    let ids = [
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
    ];
    let (tdt, idt) = (*rng.pick(&tables), *rng.pick(&ids));
    let tdims: Vec<usize> = (0..1 + rng.below(3)).map(|_| 1 + rng.below(9)).collect();
    let idims: Vec<usize> = (0..rng.below(3)).map(|_| rng.below(6)).collect();
    let axis = rng.below(tdims.len());
    let bound = tdims[axis];
    let m: usize = idims.iter().product();
    let bad = rng.chance(12);
    let vals: Vec<f64> = (0..m)
        .map(
            |j| match (bad && j + 1 == m, idt.is_signed_int() && rng.chance(50)) {
                (true, true) => -1.0,
                (true, false) => bound as f64,
                (false, _) => rng.below(bound) as f64,
            },
        )
        .collect();
    let ids =
        tensorlift::Tensor::from(ndarray::ArrayD::from_shape_vec(idims.clone(), vals).unwrap());
    let ids = tensorlift::runtime::kernels::elementwise::convert(&ids, idt).unwrap();
    let n: usize = tdims.iter().product();
    let tv: Vec<f64> = (0..n).map(|j| ((j * 37 + 11) % 23) as f64 - 7.5).collect();
    let table =
        tensorlift::Tensor::from(ndarray::ArrayD::from_shape_vec(tdims.clone(), tv).unwrap());
    let table = tensorlift::runtime::kernels::elementwise::convert(&table, tdt).unwrap();
    let rank = tdims.len() - 1 + idims.len();
    let axes: Vec<i64> = (0..rank as i64).filter(|_| rng.chance(50)).collect();
    let reader = rng.below(5);
    let axis = axis as i64;
    let f = function(move |t: Sym, i: Sym| {
        let r = t.take(&i, axis);
        match reader {
            0 if rank > 0 => r.reverse(&[0]),
            1 => r.cast(DType::F64) * 3.0,
            2 => r.cast(DType::F32).reduce_sum(Some(&axes), false),
            3 => r.cast(DType::I64).reduce_max(Some(&axes), true),
            _ => {
                let perm: Vec<usize> = (0..rank).rev().collect();
                r.transpose(&perm)
            }
        }
    });
    (f, [table, ids])
}

/// A transpose of 1- to 8-byte elements, rank 2 to 5, its dims mostly
/// whole 16×16 tiles (the machine-code transposes of 4- and 8-byte
/// elements), sometimes ragged or empty, read as it is, reversed, sliced
/// from an offset or with a stride, or added to a copy of itself (two
/// outputs).
fn random_transpose(seed: u64) -> (tensorlift::Function, tensorlift::Tensor) {
    use common::random_graph::Rng;
    let mut rng = Rng::new(seed);
    let dtypes = [
        DType::F32,
        DType::I32,
        DType::U32,
        DType::F64,
        DType::I64,
        DType::C64,
        DType::F16,
        DType::U8,
    ];
    let dt = *rng.pick(&dtypes);
    let rank = 2 + rng.below(4);
    let sizes = [16, 32, 48, 64, 1, 2, 3, 17, 0];
    let mut dims: Vec<usize> = (0..rank)
        .map(|_| {
            sizes[if rng.chance(80) {
                rng.below(4)
            } else {
                4 + rng.below(5)
            }]
        })
        .collect();
    // Sometimes an empty tensor.
    if rng.chance(10) {
        dims[rng.below(rank)] = 0;
    }
    // At most 2^18 elements.
    while dims.iter().product::<usize>() > 1 << 18 {
        let big = (0..rank).max_by_key(|&d| dims[d]).unwrap_or(0);
        dims[big] /= 2;
    }
    let mut perm: Vec<usize> = (0..rank).collect();
    for i in (1..rank).rev() {
        perm.swap(i, rng.below(i + 1));
    }
    let n: usize = dims.iter().product();
    let bytes: Vec<u8> = (0..n * dt.size())
        .map(|j| (j.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let x = tensorlift::Tensor::from_bytes(dt, &dims, &bytes).unwrap();
    let reader = rng.below(5);
    let first = dims[0];
    let f = function(move |x: Sym| -> Vec<Sym> {
        let x = match reader {
            1 => x.reverse(&[0]),
            2 if first > 1 => {
                let mut start = vec![0; dims.len()];
                start[0] = 1;
                x.slice(&start, &dims, &vec![1; dims.len()])
            }
            3 if first > 2 => {
                let mut stride = vec![1; dims.len()];
                stride[0] = 2;
                x.slice(&vec![0; dims.len()], &dims, &stride)
            }
            _ => x,
        };
        let t = x.transpose(&perm);
        if reader == 4 && matches!(dt, DType::F32 | DType::I32 | DType::F64 | DType::I64) {
            let u = &t + &t;
            vec![t, u]
        } else {
            vec![t]
        }
    });
    (f, x)
}

/// A loop of products by two matrices it never writes (packed once
/// before it where `gemm::packs` allows: sizes on both sides of its
/// bounds), f32 or f64, the matrices read transposed or not, with an
/// epilogue or not, run 0 to 3 times.
fn random_loop_gemm(seed: u64) -> (tensorlift::Function, [tensorlift::Tensor; 3]) {
    use common::random_graph::Rng;
    let mut rng = Rng::new(seed);
    let dt = *rng.pick(&[DType::F32, DType::F64]);
    let m = 2 + rng.below(70);
    let deep = rng.chance(20);
    let k = 3 + rng.below(if deep { 600 } else { 150 });
    let n = 2 + rng.below(150);
    let steps = rng.below(4) as i32;
    let (wt, vt) = (rng.chance(50), rng.chance(50));
    let epilogue = rng.below(3);
    let tensor = |dims: [usize; 2], s: usize, scale: f32| {
        let v: Vec<f32> = (0..dims[0] * dims[1])
            .map(|j| (((j * 7919 + s * 31) % 2003) as f32 / 2003.0 - 0.5) * scale)
            .collect();
        common::f32s(&v, &dims)
    };
    let h = tensor([m, k], 1, 1.0);
    let w = tensor(if wt { [n, k] } else { [k, n] }, 2, 0.2);
    let v = tensor(if vt { [k, n] } else { [n, k] }, 3, 0.2);
    let f = function(move |h: Sym, w: Sym, v: Sym| {
        let (h, w, v) = (h.cast(dt), w.cast(dt), v.cast(dt));
        let w = if wt { w.transpose(&[1, 0]) } else { w };
        let v = if vt { v.transpose(&[1, 0]) } else { v };
        tensorlift::fori_loop(
            0,
            steps,
            |_, c| {
                let p = c[0].matmul(&w);
                let p = match epilogue {
                    0 => p.tanh(),
                    1 => p * 0.25,
                    _ => &p - p.reduce_max(Some(&[1]), true),
                };
                vec![p.matmul(&v).tanh()]
            },
            &[h],
        )
        .remove(0)
    });
    (f, [h, w, v])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn random_loop_gemms_agree_bitwise_in_exact_mode(seed in any::<u64>()) {
        let (f, args) = random_loop_gemm(seed);
        let want = f.call(&args).unwrap();
        for opts in &EXACT {
            let got = f.clone().jit_compile(true).jit_options(*opts).call(&args).unwrap();
            prop_assert!(
                common::same_bits(&got[0], &want[0]),
                "seed {seed} ({opts:?}): jit {:?}, interpreter {:?}", got[0], want[0]
            );
        }
    }

    #[test]
    fn random_transposes_agree_bitwise(seed in any::<u64>()) {
        let (f, x) = random_transpose(seed);
        let want = f.call(std::slice::from_ref(&x));
        // Denormals kept: `t + t` of random bits meets them.
        let kept = JitOptions { flush_denormals: false, ..JitOptions::default() };
        let opts = [kept, JitOptions { threads: false, ..kept }, EXACT[1]];
        for opts in &opts {
            let got = f.clone().jit_compile(true).jit_options(*opts).call(std::slice::from_ref(&x));
            match (&want, &got) {
                (Ok(w), Ok(o)) => {
                    for (a, b) in o.iter().zip(w) {
                        prop_assert!(
                            common::same_bits(a, b),
                            "seed {seed} ({opts:?}): a transpose of {:?}{:?} differs",
                            x.dtype(), x.shape()
                        );
                    }
                }
                (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
                (w, o) => prop_assert!(false, "seed {seed}: interpreter {w:?}, jit {o:?}"),
            }
        }
    }

    #[test]
    fn random_gathers_agree_bitwise_in_exact_mode(seed in any::<u64>()) {
        let (f, args) = random_gather(seed);
        let want = f.call(&args);
        for opts in &EXACT {
            let got = f.clone().jit_compile(true).jit_options(*opts).call(&args);
            match (&want, &got) {
                (Ok(w), Ok(o)) => prop_assert!(
                    common::same_bits(&o[0], &w[0]),
                    "seed {seed} ({opts:?}): jit {:?}, interpreter {:?}", o[0], w[0]
                ),
                (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
                (w, o) => prop_assert!(false, "seed {seed}: interpreter {w:?}, jit {o:?}"),
            }
        }
    }
}

/// A random well-conditioned f32 program for the default (non-exact) mode:
/// a pool of `[r, c]` values from `x`, each new value one of the patterns
/// the fusion planner rewrites — softmax rows, row and column reductions
/// broadcast back, products by a matrix (`w`) and sums of matrix-vector
/// products (`v1`, `v2`: one output column each), elementwise chains —
/// kept within [-e, e] by a `tanh` where a value could grow, so that the
/// default mode's approximations and reordered sums stay far below the
/// tolerance while a wrong slot, a lost accumulator or an overwritten
/// stash shows as an O(1) error. Returns the program's two outputs.
fn well_conditioned(seed: u64, steps: usize, x: &Sym, w: &Sym, v1: &Sym, v2: &Sym) -> Vec<Sym> {
    use tensorlift::fuzz::random_graph::Rng;
    let mut rng = Rng::new(seed);
    let rows = |v: &Sym, max: bool| match max {
        true => v.reduce_max(Some(&[1]), true),
        false => v.reduce_sum(Some(&[1]), true),
    };
    let softmax = |v: &Sym| {
        let e = (v - rows(v, true)).exp();
        &e / rows(&e, false)
    };
    let mut pool = vec![x.clone()];
    for _ in 0..steps {
        let a = pool[rng.below(pool.len())].clone();
        let b = pool[rng.below(pool.len())].clone();
        let next = match rng.below(11) {
            0 => a.tanh(),
            1 => (&a * &b).tanh(),
            2 => (&a + &b).tanh(),
            3 => softmax(&a),
            4 => softmax(&a) * softmax(&b),
            5 => (&a * rows(&b, false)).tanh(),
            6 => &a - rows(&a, true),
            7 => (&a + b.reduce_sum(Some(&[0]), true)).tanh(),
            8 => a.matmul(w).tanh(),
            9 => (&a + (a.matmul(v1) + b.matmul(v2))).tanh(),
            _ => a.tanh().exp(),
        };
        pool.push(next);
    }
    let last = pool.pop().unwrap_or_else(|| x.clone());
    let other = pool[rng.below(pool.len())].reduce_sum(Some(&[0]), false);
    vec![last, other]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// The default mode (approximated functions, reordered sums, every
    /// fusion rewrite) against the interpreter on well-conditioned random
    /// programs, within 1e-4: exact-mode fuzzing never runs the rewrites
    /// made outside it (a sum of matrix-vector products lost a product,
    /// two softmaxes overwrote each other's stash, both found by a user).
    #[test]
    fn well_conditioned_random_programs_agree_in_the_default_mode(
        seed in any::<u64>(),
        steps in 1usize..12,
        r in 1usize..40,
        c in 1usize..40,
    ) {
        let body = move |x: Sym, w: Sym, v1: Sym, v2: Sym| {
            well_conditioned(seed, steps, &x, &w, &v1, &v2)
        };
        let vals = |n: usize, k: u64, scale: f32| -> Vec<f32> {
            let mut rng = tensorlift::fuzz::random_graph::Rng::new(seed ^ k);
            (0..n).map(|_| ((rng.next() % 2001) as f32 / 1000.0 - 1.0) * scale).collect()
        };
        let t = |v: Vec<f32>, d: &[usize]| common::f32s(&v, d);
        let inputs = [
            t(vals(r * c, 1, 1.0), &[r, c]),
            t(vals(c * c, 2, 1.0 / c as f32), &[c, c]),
            t(vals(c, 3, 1.0 / c as f32), &[c, 1]),
            t(vals(c, 4, 1.0 / c as f32), &[c, 1]),
        ];
        let want = function(body).call(&inputs).unwrap();
        let got = function(body).jit_compile(true).call(&inputs).unwrap();
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            prop_assert_eq!(g.shape(), w.shape());
            let (g, w) = (common::to_vec::<f32>(g), common::to_vec::<f32>(w));
            let worst = g.iter().zip(&w).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
            prop_assert!(
                worst <= 1e-4 * (1.0 + r as f32),
                "seed {} steps {} [{}, {}]: output {} differs by {}", seed, steps, r, c, k, worst
            );
        }
    }
}
