//! f32/f64 GEMMs (the `gemm` crate, `runtime::kernels::gemm`): the JIT's
//! GEMM steps and the interpreter make the same call, so their results are
//! bit-identical in every mode, split over threads or not; and they are
//! close to an f64 reference.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use tensorlift::compiler::{self, JitOptions};
use tensorlift::ir::text;
use tensorlift::runtime::interp;
use tensorlift::{DType, Function, IrStage, Sym, Tensor, TensorSpec, fori_loop, function};

fn data(dims: &[usize], dtype: DType, seed: usize) -> (Tensor, Vec<f64>) {
    let n: usize = dims.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|i| (((i + seed) * 37 % 101) as f64 - 50.0) / 30.7)
        .collect();
    let lit = tensorlift::ir::Literal::from_scalars(
        dtype,
        dims,
        &v.iter()
            .map(|x| tensorlift::ir::Scalar::Float(*x, None))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    (Tensor::from_literal(&lit).unwrap(), v)
}

struct Case {
    dt: &'static str,
    lhs: Vec<usize>,
    rhs: Vec<usize>,
    out: Vec<usize>,
    attrs: &'static str,
    /// Expected in the fused plan's `threads:` line for this GEMM.
    split: &'static str,
}

fn cases() -> Vec<Case> {
    let dims = "lhs_batch=[], rhs_batch=[], lhs_contract=[1], rhs_contract=[0]";
    vec![
        // The RNN benchmark's product: split over columns.
        Case {
            dt: "f32",
            lhs: vec![64, 512],
            rhs: vec![512, 512],
            out: vec![64, 512],
            attrs: dims,
            split: "columns",
        },
        // k over gemm's 512-deep blocks.
        Case {
            dt: "f32",
            lhs: vec![96, 700],
            rhs: vec![700, 160],
            out: vec![96, 160],
            attrs: dims,
            split: "columns",
        },
        // x @ wᵀ (rhs contracted on its last dim), too few columns for
        // two parts of more than 64: split over rows.
        Case {
            dt: "f64",
            lhs: vec![300, 200],
            rhs: vec![130, 200],
            out: vec![300, 130],
            attrs: "lhs_batch=[], rhs_batch=[], lhs_contract=[1], rhs_contract=[1]",
            split: "rows",
        },
        // g @ wᵀ with more columns than rows, as a gradient's products
        // are: computed transposed (a row-major scratch block), split over
        // columns.
        Case {
            dt: "f32",
            lhs: vec![64, 512],
            rhs: vec![512, 512],
            out: vec![64, 512],
            attrs: "lhs_batch=[], rhs_batch=[], lhs_contract=[1], rhs_contract=[1]",
            split: "columns",
        },
        // The same, thin, one thread.
        Case {
            dt: "f64",
            lhs: vec![3, 40],
            rhs: vec![70, 40],
            out: vec![3, 70],
            attrs: "lhs_batch=[], rhs_batch=[], lhs_contract=[1], rhs_contract=[1]",
            split: "too little work",
        },
        // Batched: split over batch items.
        Case {
            dt: "f32",
            lhs: vec![4, 100, 90],
            rhs: vec![4, 90, 80],
            out: vec![4, 100, 80],
            attrs: "lhs_batch=[0], rhs_batch=[0], lhs_contract=[2], rhs_contract=[1]",
            split: "batch items",
        },
        // Small and thin: one thread.
        Case {
            dt: "f32",
            lhs: vec![8, 64],
            rhs: vec![64, 64],
            out: vec![8, 64],
            attrs: dims,
            split: "too little work",
        },
    ]
}

fn shape(d: &[usize]) -> String {
    d.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// `out[.., i, j] = Σ_k lhs · rhs` in f64 for the cases above.
fn reference(c: &Case, l: &[f64], r: &[f64]) -> Vec<f64> {
    let (b, m, k) = match c.lhs.as_slice() {
        [m, k] => (1, *m, *k),
        [b, m, k] => (*b, *m, *k),
        _ => unreachable!(),
    };
    let n = *c.out.last().unwrap();
    let rhs_t = c.attrs.contains("rhs_contract=[1]") && c.rhs.len() == 2;
    let mut out = vec![0.0; b * m * n];
    for bi in 0..b {
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0;
                for kk in 0..k {
                    let rv = if rhs_t {
                        r[j * k + kk]
                    } else {
                        r[bi * k * n + kk * n + j]
                    };
                    s += l[bi * m * k + i * k + kk] * rv;
                }
                out[(bi * m + i) * n + j] = s;
            }
        }
    }
    out
}

#[test]
fn gemms_match_the_interpreter_bitwise_threaded_or_not() {
    let many_threads = std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2
        && std::env::var_os("RAYON_NUM_THREADS").is_none();
    for c in cases() {
        let dtype = if c.dt == "f32" {
            DType::F32
        } else {
            DType::F64
        };
        let src = format!(
            "graph @mm {{\n  %a = parameter 0 : {dt}[{l}]\n  %b = parameter 1 : {dt}[{r}]\n  %y = dot_general(%a, %b) {{{attrs}}} : {dt}[{o}]\n  return %y as \"y\"\n}}\n",
            dt = c.dt,
            l = shape(&c.lhs),
            r = shape(&c.rhs),
            o = shape(&c.out),
            attrs = c.attrs,
        );
        let g = text::parse(&src, "mm.tlir").unwrap();
        let (a, av) = data(&c.lhs, dtype, 1);
        let (b, bv) = data(&c.rhs, dtype, 7);
        let inputs = [a, b];
        let want = interp::run(&g, &inputs).unwrap();
        let what = format!("{} {:?} @ {:?}", c.dt, c.lhs, c.rhs);

        // Close to an f64 reference: within 1e-5 of the largest result (as
        // `tensorlift bench` compares), far inside k·ε·Σ|a·b| here.
        let expect = reference(&c, &av, &bv);
        let expect_max = expect.iter().fold(0f64, |m, x| m.max(x.abs()));
        let lit = tensorlift::ir::Literal::from_scalars(
            dtype,
            &c.out,
            &expect
                .iter()
                .map(|x| tensorlift::ir::Scalar::Float(*x, None))
                .collect::<Vec<_>>(),
        )
        .unwrap();
        let expect = Tensor::from_literal(&lit).unwrap();
        common::assert_close(&want[0], &expect, 0.0, 1e-5 * expect_max, &what);

        let variants = [
            JitOptions::default(),
            JitOptions {
                threads: false,
                ..Default::default()
            },
            JitOptions {
                exact: true,
                ..Default::default()
            },
        ];
        for opts in variants {
            let exe = compiler::compile(&g, &opts).unwrap();
            let fused = exe.fused_ir();
            assert!(fused.contains("GEMM call"), "{what}: {fused}");
            if opts.threads && many_threads {
                let line = fused
                    .lines()
                    .find(|l| l.contains("threads: gemm"))
                    .unwrap_or_else(|| panic!("{what}: no threads line:\n{fused}"));
                assert!(line.contains(c.split), "{what}: {line}");
            }
            let got = exe.run(&inputs).unwrap();
            assert!(
                common::same_bits(&got[0], &want[0]),
                "{what} {opts:?}: the JIT's GEMM differs from the interpreter's"
            );
        }
    }
}

fn randoms(dims: &[usize], seed: u32) -> Tensor {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    let n: usize = dims.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s as f32 / u32::MAX as f32) * 2.0 - 1.0
        })
        .collect();
    common::f32s(&v, dims)
}

const ACCUMULATED: &str = "which adds its product into the accumulator's buffer";

/// Compiles `make()` by default and in exact mode on `inputs`: the fused
/// plan accumulates a GEMM into its `add` by default exactly when `fuses`,
/// never in exact mode; every result is within `1e-5 · (1 + k)` relative
/// of the interpreter's by default, and bitwise equal in exact mode.
fn check_accumulation(what: &str, make: &dyn Fn() -> Function, inputs: &[Tensor], fuses: bool) {
    let specs: Vec<TensorSpec> = inputs
        .iter()
        .map(|t| TensorSpec::known(t.dtype(), t.shape()))
        .collect();
    let want = make().call(inputs).unwrap();
    let exact = JitOptions {
        exact: true,
        ..Default::default()
    };
    for (options, tol) in [(JitOptions::default(), 1e-4), (exact, 0.0)] {
        let f = make().jit_compile(true).jit_options(options);
        let fused = f.compiler_ir(&specs, IrStage::Fused).unwrap();
        assert_eq!(
            fused.contains(ACCUMULATED),
            fuses && !options.exact,
            "{what} (exact: {}):\n{fused}",
            options.exact
        );
        let got = f.call(inputs).unwrap();
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let ctx = format!("{what} (exact: {}) output {i}", options.exact);
            if tol == 0.0 {
                assert!(common::same_bits(g, w), "{ctx}: not bitwise equal");
            } else {
                let max = common::to_vec::<f32>(w)
                    .iter()
                    .fold(0f32, |m, x| m.max(x.abs()));
                common::assert_close(g, w, tol, tol * f64::from(max), &ctx);
            }
        }
    }
}

/// `add(acc, dot_general(a, b))` at the top level: the GEMM adds its
/// product into the accumulator (a temporary here; the sum, a graph
/// output, takes over its buffer) outside exact mode, with k = 700 over
/// several of gemm's k-blocks; not when the accumulator is also returned.
#[test]
fn gemm_accumulates_into_an_add_at_the_top_level() {
    let inputs = [
        randoms(&[96, 700], 1),
        randoms(&[700, 80], 2),
        randoms(&[96, 40], 3),
        randoms(&[40, 80], 4),
    ];
    let fused = || {
        function(|a: Sym, b: Sym, c: Sym, d: Sym| {
            let acc = c.matmul(&d);
            vec![&acc + &a.matmul(&b)]
        })
    };
    check_accumulation("acc + dot", &fused, &inputs, true);
    let swapped = || {
        function(|a: Sym, b: Sym, c: Sym, d: Sym| {
            let acc = c.matmul(&d);
            vec![&a.matmul(&b) + &acc]
        })
    };
    check_accumulation("dot + acc", &swapped, &inputs, true);
    // The accumulator is read afterwards: its buffer must stay.
    let read_after = || {
        function(|a: Sym, b: Sym, c: Sym, d: Sym| {
            let acc = c.matmul(&d);
            vec![&acc + &a.matmul(&b), acc]
        })
    };
    check_accumulation("acc read afterwards", &read_after, &inputs, false);
    let read_after_in_kernel = || {
        function(|a: Sym, b: Sym, c: Sym, d: Sym| {
            let acc = c.matmul(&d);
            let s = &acc + &a.matmul(&b);
            vec![&s * &acc]
        })
    };
    check_accumulation(
        "acc read by a later kernel",
        &read_after_in_kernel,
        &inputs,
        false,
    );
    // A caller's tensor is never overwritten.
    let input_acc = || function(|a: Sym, b: Sym, acc: Sym| vec![&acc + &a.matmul(&b)]);
    check_accumulation(
        "input accumulator",
        &input_acc,
        &[inputs[0].clone(), inputs[1].clone(), randoms(&[96, 80], 5)],
        false,
    );
}

/// The RNN gradient's weight accumulator: a `fori_loop` carrying `acc`
/// and computing `acc + hᵢᵀ·δᵢ` (512×512, k = 64) each step accumulates
/// the GEMM into the carry's own buffer outside exact mode; not when the
/// body also reads the old accumulator after the product.
#[test]
fn gemm_accumulates_into_a_loop_carried_accumulator() {
    let inputs = [
        randoms(&[64, 512], 11),
        randoms(&[64, 512], 12),
        randoms(&[512, 512], 13),
    ];
    let dims = tensorlift::ir::DotDims {
        lhs_batch: vec![],
        rhs_batch: vec![],
        lhs_contract: vec![0],
        rhs_contract: vec![0],
    };
    let body = move |h: &Sym, d: &Sym, i: &Sym, acc: &Sym| {
        let s = i.cast(DType::F32) * 0.25 + 1.0;
        let hs = h * &s;
        acc + &hs.dot_general(d, dims.clone())
    };
    let fused = {
        let body = body.clone();
        move || {
            let body = body.clone();
            function(move |h: Sym, d: Sym, acc0: Sym| {
                fori_loop(0, 5, |i, c| vec![body(&h, &d, i, &c[0])], &[acc0])
            })
        }
    };
    check_accumulation("loop accumulator", &fused, &inputs, true);
    let read_after = {
        let body = body.clone();
        move || {
            let body = body.clone();
            function(move |h: Sym, d: Sym, acc0: Sym| {
                fori_loop(
                    0,
                    5,
                    |i, c| {
                        let next = body(&h, &d, i, &c[0]);
                        vec![next, &c[1] + &c[0]]
                    },
                    &[acc0.clone(), acc0],
                )
            })
        }
    };
    check_accumulation(
        "loop accumulator read afterwards",
        &read_after,
        &inputs,
        false,
    );
    // Returned as another carry (a swap): the carries are staged.
    let swapped = move || {
        let body = body.clone();
        function(move |h: Sym, d: Sym, acc0: Sym| {
            fori_loop(
                0,
                5,
                |i, c| vec![&c[1] * 0.5, body(&h, &d, i, &c[0])],
                &[acc0.clone(), &acc0 * 2.0],
            )
        })
    };
    check_accumulation("loop accumulator swapped", &swapped, &inputs, true);
}

/// Attention's scaled scores `(q·kᵀ)·0.125` over (b, h, s, d) operands:
/// outside exact mode the scale moves into q (`scale_into_dot`), which
/// is exact for values in the normal range, so the compiled scores are
/// bitwise the interpreter's (and the softmax after them its values
/// within the default mode's bounds: its division is a product with the
/// reciprocal, as XLA's); the scale is then the GEMM's own (`gemm`'s
/// beta, `fusion::scale_into_gemms`), no kernel writing the scaled q; a
/// scale that is not a power of two stays on the product.
#[test]
fn a_power_of_two_scale_moves_into_the_smaller_operand_bitwise() {
    let (q, k, v) = (
        randoms(&[2, 3, 40, 64], 11),
        randoms(&[2, 3, 40, 64], 12),
        randoms(&[2, 3, 40, 64], 13),
    );
    let specs: Vec<TensorSpec> = [&q, &k, &v]
        .iter()
        .map(|t| TensorSpec::known(t.dtype(), t.shape()))
        .collect();
    let dims = tensorlift::ir::DotDims {
        lhs_batch: vec![0, 1],
        rhs_batch: vec![0, 1],
        lhs_contract: vec![3],
        rhs_contract: vec![3],
    };
    for (scale, moves) in [(0.125, true), (-2.0, true), (0.1, false)] {
        let dd = dims.clone();
        let make = move || {
            let dd = dd.clone();
            function(move |q: Sym, k: Sym, v: Sym| {
                let s = q.dot_general(&k, dd.clone()) * scale;
                let e = (&s - s.reduce_max(Some(&[-1]), true)).exp();
                let p = &e / e.reduce_sum(Some(&[-1]), true);
                (s, p.matmul(&v))
            })
        };
        let fused = make()
            .jit_compile(true)
            .compiler_ir(&specs, IrStage::Fused)
            .unwrap();
        // The scaled operand is no kernel of its own: the GEMM scales its
        // product (`gemm`'s beta).
        assert!(!fused.contains(".scaled' loop"), "scale {scale}:\n{fused}");
        assert_eq!(
            fused.contains(&format!("scaled by {scale} ->")),
            moves,
            "scale {scale}:\n{fused}"
        );
        let inputs = [q.clone(), k.clone(), v.clone()];
        let want = make().call(&inputs).unwrap();
        let got = make().jit_compile(true).call(&inputs).unwrap();
        if moves {
            assert!(
                common::same_bits(&got[0], &want[0]),
                "scale {scale}: scores not bitwise equal"
            );
        }
        common::assert_close(&got[1], &want[1], 1e-5, 1e-6, &format!("scale {scale}"));
    }
}

/// A user's `(x · 2^k) @ w` (or `x @ (w · 2^k)`): outside exact mode the
/// GEMM scales its product itself (`fusion::scale_into_gemms`), no kernel
/// writing the scaled operand, with the bits of the product of the scaled
/// operand; not where the scaled operand is also returned, nor in exact
/// mode; inside a loop body too, on a carried value. Checked against the
/// interpreter and against the same program in exact mode.
#[test]
fn an_operands_power_of_two_scale_becomes_the_gemms_own() {
    let (x, w) = (randoms(&[48, 96], 21), randoms(&[96, 80], 22));
    let specs = [
        TensorSpec::known(DType::F32, &[48, 96]),
        TensorSpec::known(DType::F32, &[96, 80]),
    ];
    type Make = fn() -> Function;
    let cases: [(&str, Make, Option<&str>); 7] = [
        (
            "lhs",
            || function(|x: Sym, w: Sym| (&x * 0.5).matmul(&w)),
            Some("scaled by 0.5 ->"),
        ),
        (
            "rhs",
            || function(|x: Sym, w: Sym| x.matmul(&(&w * -4.0))),
            Some("scaled by -4 ->"),
        ),
        (
            "also returned",
            || {
                function(|x: Sym, w: Sym| {
                    let s = &x * 0.5;
                    (s.matmul(&w), s)
                })
            },
            None,
        ),
        (
            "not a power of two",
            || function(|x: Sym, w: Sym| (&x * 0.3).matmul(&w)),
            None,
        ),
        (
            "in a loop",
            || {
                function(|x: Sym, w: Sym| {
                    let w2 = w.slice(&[0, 0], &[80, 80], &[1, 1]);
                    let h = x.matmul(&w);
                    fori_loop(
                        0,
                        3,
                        move |_, c| vec![(&c[0] * 0.25).matmul(&w2).tanh()],
                        &[h],
                    )
                })
            },
            Some("scaled by 0.25 ->"),
        ),
        (
            // The scaled operand is the accumulator an add fuses into the
            // GEMM: the GEMM would read rows it overwrites.
            "into its own operand",
            || {
                function(|x: Sym, w: Sym| {
                    let w2 = w.slice(&[0, 0], &[80, 80], &[1, 1]);
                    let h = x.matmul(&w);
                    &h + &(&h * 0.5).matmul(&w2)
                })
            },
            None,
        ),
        (
            "into its own operand in a loop",
            || {
                function(|x: Sym, w: Sym| {
                    let w2 = w.slice(&[0, 0], &[80, 80], &[1, 1]);
                    let h = x.matmul(&w);
                    fori_loop(
                        0,
                        3,
                        move |_, c| vec![&c[0] + &(&c[0] * 0.5).matmul(&w2)],
                        &[h],
                    )
                })
            },
            None,
        ),
    ];
    let exact = JitOptions {
        exact: true,
        ..Default::default()
    };
    let inputs = [x, w];
    for (what, make, scaled) in cases {
        let want = make().call(&inputs).unwrap();
        let fused = (make().jit_compile(true))
            .compiler_ir(&specs, IrStage::Fused)
            .unwrap();
        assert_eq!(
            scaled.is_some_and(|s| fused.contains(s)),
            scaled.is_some(),
            "{what}:\n{fused}"
        );
        assert_eq!(
            fused.contains("scaled by"),
            scaled.is_some(),
            "{what}:\n{fused}"
        );
        let strict = make().jit_compile(true).jit_options(exact);
        let plan = strict.compiler_ir(&specs, IrStage::Fused).unwrap();
        assert!(!plan.contains("scaled by"), "{what} (exact):\n{plan}");
        let got = make().jit_compile(true).call(&inputs).unwrap();
        let strict = strict.call(&inputs).unwrap();
        for (i, ((g, s), w)) in got.iter().zip(&strict).zip(&want).enumerate() {
            assert!(
                common::same_bits(s, w),
                "{what} output {i}: exact mode not bitwise"
            );
            if scaled.is_some() && what != "in a loop" {
                // The same calls as exact mode's, the scale moved.
                assert!(common::same_bits(g, s), "{what} output {i}: not bitwise");
            }
            common::assert_close(g, w, 1e-5, 1e-5, &format!("{what} output {i}"));
        }
    }
}
