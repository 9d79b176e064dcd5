//! Wide math (`JitOptions::wide_math`): rows whose f32 functions are
//! evaluated in chunks by routines compiled for AVX-512/AVX2 give the same
//! bits as the inline 128-bit approximations, for every function with a
//! routine, at every chunk boundary, through stashes, max/min reductions
//! and chained functions (row sums of them: reordered, within tolerance).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use tensorlift::{DType, IrStage, JitOptions, Sym, Tensor, TensorMut, TensorSpec, function};

/// Wide math off; denormals kept (flushed, the two may differ in whether
/// a denormal operand passed through as itself or as zero).
fn narrow() -> JitOptions {
    JitOptions {
        wide_math: false,
        ..common::ieee()
    }
}

/// Whether this host runs the wide routines (AVX2 or AVX-512, with FMA),
/// within `TENSORLIFT_MAX_ISA` (`scripts/test.sh` also runs this file
/// capped at sse4.2, and on AVX-512 hosts at avx2).
fn host_has_wide() -> bool {
    tensorlift::compiler::max_isa() >= tensorlift::compiler::IsaLevel::Avx2
}

/// What the Cranelift dump says of a kernel emitted as AVX-512 or AVX2
/// machine code (`codegen/native.rs`).
const NATIVE: &str = " machine code, ";

/// The Cranelift dump's part for kernel `name`: its header line and what
/// follows up to the next header.
fn kernel_part<'a>(clif: &'a str, name: &str) -> &'a str {
    let at = clif
        .find(&format!("; kernel '{name}'"))
        .unwrap_or_else(|| panic!("no kernel '{name}' in\n{clif}"));
    let rest = &clif[at..];
    let end = rest[1..]
        .find("\n; kernel '")
        .or_else(|| rest[1..].find("\n; main"))
        .map_or(rest.len(), |e| e + 1);
    &rest[..end]
}

/// Whether some reduction's kernel (`reduce_*`) of `clif` is machine code
/// (`codegen/native.rs` emits row sums, maxima and minima at AVX2 and
/// AVX-512).
fn reduction_is_machine_code(clif: &str) -> bool {
    clif.lines()
        .any(|l| l.starts_with("; kernel 'reduce_") && l.contains(NATIVE))
}

/// Whether `clif` has kernels and every one is machine code.
fn all_machine_code(clif: &str) -> bool {
    let headers: Vec<&str> = clif
        .lines()
        .filter(|l| l.starts_with("; kernel '"))
        .collect();
    !headers.is_empty() && headers.iter().all(|l| l.contains(NATIVE))
}

/// Runs `f` with and without wide math and requires the same bits (any
/// NaN for a NaN).
fn same_both_ways(
    name: &str,
    wide_row: bool,
    f: impl Fn(&[Sym]) -> Sym + Copy + Send + Sync + 'static,
    inputs: &[Tensor],
) {
    both_ways(name, wide_row, f, inputs, None);
}

/// Runs `f` with and without wide math; the same bits, or with `rtol`,
/// values within that relative tolerance (row sums of wide values use two
/// accumulators where the inline code has one).
fn both_ways(
    name: &str,
    wide_row: bool,
    f: impl Fn(&[Sym]) -> Sym + Copy + Send + Sync + 'static,
    inputs: &[Tensor],
    rtol: Option<f64>,
) {
    let specs: Vec<TensorSpec> = inputs
        .iter()
        .map(|t| TensorSpec::known(t.dtype(), t.shape()))
        .collect();
    let wide = function(move |xs: &[Sym]| f(xs))
        .jit_compile(true)
        .jit_options(common::ieee());
    let clif = wide.compiler_ir(&specs, IrStage::Cranelift).unwrap();
    // A plain loop of f32 functions runs as AVX-512 or AVX2 machine code
    // where the host has either (`codegen/native.rs`), at any length;
    // elsewhere, long rows run through the wide routines.
    let native = clif.contains(NATIVE);
    assert!(
        !native || host_has_wide(),
        "{name}: machine code only where the host has AVX2 or AVX-512"
    );
    if !native {
        assert_eq!(
            clif.contains("tl_wide_"),
            wide_row && host_has_wide(),
            "{name}: wide routines used only where the host has them"
        );
    }
    let plain = function(move |xs: &[Sym]| f(xs))
        .jit_compile(true)
        .jit_options(narrow());
    let a = wide.call(inputs).unwrap();
    let b = plain.call(inputs).unwrap();
    for (x, y) in a.iter().zip(&b) {
        if let Some(rtol) = rtol {
            common::assert_close(x, y, rtol, 0.0, name);
        } else if let Some((i, w, n)) = first_difference(x, y) {
            panic!("{name}: element {i}: wide {w:e}, inline {n:e}");
        }
    }
}

/// The first element whose bits differ, with both values as f64 (any NaN
/// matches any NaN: which operand's payload an instruction propagates is
/// not something the two compilers keep, nor IEEE 754 specifies).
fn first_difference(a: &Tensor, b: &Tensor) -> Option<(usize, f64, f64)> {
    assert_eq!((a.dtype(), a.shape()), (b.dtype(), b.shape()));
    let (a, b): (Vec<f64>, Vec<f64>) = match a.dtype() {
        DType::F32 => {
            let f = |t| {
                common::to_vec::<f32>(t)
                    .into_iter()
                    .map(f64::from)
                    .collect()
            };
            (f(a), f(b))
        }
        DType::F64 => (common::to_vec::<f64>(a), common::to_vec::<f64>(b)),
        d @ (DType::Bool
        | DType::I8
        | DType::I16
        | DType::I32
        | DType::I64
        | DType::U8
        | DType::U16
        | DType::U32
        | DType::U64
        | DType::F16
        | DType::BF16
        | DType::C64
        | DType::C128
        | DType::String) => panic!("unexpected dtype {d}"),
    };
    // f32 → f64 is exact and keeps the sign, so bits compare as in f32.
    (0..a.len())
        .find(|i| a[*i].to_bits() != b[*i].to_bits() && !(a[*i].is_nan() && b[*i].is_nan()))
        .map(|i| (i, a[i], b[i]))
}

/// Bit patterns at a stride (every one with `TENSORLIFT_EXHAUSTIVE=1`),
/// in blocks of 2^24, each with the specials.
fn patterns(block: u32) -> Vec<f32> {
    let step = if std::env::var("TENSORLIFT_EXHAUSTIVE").is_ok_and(|v| v == "1") {
        1
    } else {
        1021
    };
    let start = block << 24;
    let first = start.div_ceil(step) * step;
    let mut v: Vec<f32> = (first..=start | 0x00ff_ffff)
        .step_by(step as usize)
        .map(f32::from_bits)
        .collect();
    v.extend(common::F32_SPECIALS);
    v
}

fn check_fn(name: &str, f: fn(&Sym) -> Sym) {
    for block in 0..256 {
        let xs = patterns(block);
        let n = xs.len();
        same_both_ways(name, true, move |x| f(&x[0]), &[common::f32s(&xs, &[n])]);
    }
}

#[test]
fn exp_wide_matches_inline() {
    check_fn("exp", Sym::exp);
}

#[test]
fn expm1_wide_matches_inline() {
    check_fn("expm1", Sym::expm1);
}

#[test]
fn log_wide_matches_inline() {
    check_fn("log", Sym::log);
}

#[test]
fn log1p_wide_matches_inline() {
    check_fn("log1p", Sym::log1p);
}

#[test]
fn tanh_wide_matches_inline() {
    check_fn("tanh", Sym::tanh);
}

#[test]
fn sigmoid_wide_matches_inline() {
    check_fn("sigmoid", Sym::sigmoid);
}

#[test]
fn erf_wide_matches_inline() {
    check_fn("erf", Sym::erf);
}

/// Including the vectors with a lane past 8192 (or ±inf), which go through
/// libm whole in both.
#[test]
fn sin_cos_wide_match_inline() {
    check_fn("sin", Sym::sin);
    check_fn("cos", Sym::cos);
}

#[test]
fn sqrt_rsqrt_reciprocal_wide_match_inline() {
    check_fn("sqrt", Sym::sqrt);
    check_fn("rsqrt", Sym::rsqrt);
    check_fn("reciprocal", Sym::reciprocal);
}

/// f64: about 2^21 bit patterns spread over the whole range (every
/// 2^43rd; 2^36th, ~270M, with `TENSORLIFT_EXHAUSTIVE=1`), in blocks, plus
/// the specials and the doubles near k·π/2.
fn check_fn64(name: &str, f: fn(&Sym) -> Sym) {
    let exhaustive = std::env::var("TENSORLIFT_EXHAUSTIVE").is_ok_and(|v| v == "1");
    let step: u64 = if exhaustive { 1 << 36 } else { 1 << 43 };
    let per_block = 1u64 << 20;
    let total = u64::MAX / step;
    let mut first = 0u64;
    while first <= total {
        let last = (first + per_block).min(total + 1);
        let mut xs: Vec<f64> = (first..last)
            .map(|i| f64::from_bits(i.wrapping_mul(step) ^ 0x5555))
            .collect();
        if first == 0 {
            xs.extend(common::F32_SPECIALS.iter().map(|x| f64::from(*x)));
            xs.extend([
                1e5,
                1.000_000_1e5,
                -1e300,
                709.78,
                709.8,
                -745.2,
                2.2e-308,
                -0.0,
            ]);
            xs.extend((1..2000).map(|k| f64::from(k) * std::f64::consts::FRAC_PI_2));
        }
        let n = xs.len();
        let t = Tensor::from(ndarray::ArrayD::from_shape_vec(vec![n], xs).unwrap());
        same_both_ways(name, true, move |x| f(&x[0]), &[t]);
        first = last;
    }
}

#[test]
fn f64_functions_wide_match_inline() {
    check_fn64("exp", Sym::exp);
    check_fn64("expm1", Sym::expm1);
    check_fn64("log", Sym::log);
    check_fn64("log1p", Sym::log1p);
    check_fn64("tanh", Sym::tanh);
    check_fn64("sigmoid", Sym::sigmoid);
    check_fn64("erf", Sym::erf);
    check_fn64("sin", Sym::sin);
    check_fn64("cos", Sym::cos);
    check_fn64("sqrt", Sym::sqrt);
    check_fn64("rsqrt", Sym::rsqrt);
    check_fn64("reciprocal", Sym::reciprocal);
}

/// f64 rows at chunk boundaries, chained functions, a row sum and max.
#[test]
fn f64_rows_match_inline() {
    let body = |x: &[Sym]| {
        let a = (-(&x[0] * &x[0])).exp() * x[0].tanh() + x[0].abs().sqrt();
        (a.sin().exp() + a.reduce_max(Some(&[-1]), true)).log1p()
    };
    for (rows, cols) in [(1usize, 63usize), (1, 1027), (3, 512), (2, 100_003)] {
        let v: Vec<f64> = ramp(rows * cols, 8.0).into_iter().map(f64::from).collect();
        let x = Tensor::from(ndarray::ArrayD::from_shape_vec(vec![rows, cols], v).unwrap());
        same_both_ways(&format!("f64 rows {rows}x{cols}"), cols >= 64, body, &[x]);
    }
}

fn ramp(n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7919) % 4001) as f32 * scale / 4001.0 - scale / 2.0)
        .collect()
}

/// Chained and nested wide nodes, a wide value used twice, plain ops around
/// them, a second input; lengths around the chunk (512) and the smallest
/// wide row (64), so whole chunks, a partial last chunk and scalar tails
/// all run.
#[test]
fn chunked_rows_match_inline() {
    let body = |x: &[Sym]| {
        let a = (-(&x[0] * &x[0])).exp() * x[0].tanh() + x[0].abs().sqrt();
        let b = (a.tanh().exp() + &x[1]).log1p();
        &a * &b - b.sigmoid()
    };
    for n in [
        63usize, 64, 67, 511, 512, 513, 1000, 1024, 1027, 4099, 100_003,
    ] {
        let x = common::f32s(&ramp(n, 8.0), &[n]);
        let y = common::f32s(&ramp(n, 3.0), &[n]);
        same_both_ways(&format!("chain n={n}"), n >= 64, body, &[x.clone(), y]);
    }
    for (rows, cols) in [(3usize, 1000usize), (64, 513), (5, 64)] {
        let x = common::f32s(&ramp(rows * cols, 8.0), &[rows, cols]);
        let y = common::f32s(&ramp(cols, 3.0), &[cols]);
        same_both_ways(&format!("rows {rows}x{cols}"), true, body, &[x, y]);
    }
}

/// A chain of 40 functions, each feeding the next: more than the 16 nodes
/// evaluated wide (the rest stay inline), 16 passes per chunk.
#[test]
fn long_chains_match_inline() {
    let body = |x: &[Sym]| {
        let mut y = x[0].clone();
        for i in 0..40 {
            y = if i % 2 == 0 {
                y.tanh()
            } else {
                (&y * 0.5).exp()
            };
        }
        y
    };
    let x = common::f32s(&ramp(4099, 8.0), &[4099]);
    same_both_ways("chain of 40", true, body, &[x]);
}

/// Softmax (a wide node inside a row reduction, stashed for the division),
/// a row log-sum-exp (their row sums reordered: within 1e-5), a column
/// softmax (reduction over the outer dim) and max/min rows of wide values
/// (accumulators with companions), bitwise.
#[test]
fn reductions_and_stashes_match_inline() {
    let softmax = |x: &[Sym]| {
        let e = (&x[0] - x[0].reduce_max(Some(&[-1]), true)).exp();
        &e / e.reduce_sum(Some(&[-1]), true)
    };
    let lse = |x: &[Sym]| {
        let m = x[0].reduce_max(Some(&[-1]), true);
        (&x[0] - &m).exp().reduce_sum(Some(&[-1]), true).log() + m
    };
    let column = |x: &[Sym]| {
        let e = (&x[0] - x[0].reduce_max(Some(&[0]), true)).exp();
        &e / e.reduce_sum(Some(&[0]), true)
    };
    let extremes = |x: &[Sym]| {
        x[0].exp().reduce_max(Some(&[-1]), true) - x[0].tanh().reduce_min(Some(&[-1]), true)
    };
    for (rows, cols) in [(4usize, 1024usize), (7, 700), (300, 96), (2, 100_003)] {
        let x = common::f32s(&ramp(rows * cols, 30.0), &[rows, cols]);
        let x = std::slice::from_ref(&x);
        // The row sums differ in order (see `softmax_sums_are_accurate`:
        // the wide one is the more accurate on the 100,003-wide rows).
        both_ways("softmax", true, softmax, x, Some(5e-5));
        both_ways("logsumexp", true, lse, x, Some(1e-6));
        // Reductions over the outer dim keep their order.
        same_both_ways("column softmax", true, column, x);
        // Max and min do not depend on the order.
        same_both_ways("max of exp, min of tanh", true, extremes, x);
    }
}

/// A fused row (`tl_wide_row_*`: one call per row for `f(x)`, `f(x - s)`,
/// `f(x + s)`, `f(x · s)` or `x / s`, `s` fixed for the row) gives the
/// bits of the inline code, for every function with a row routine, f32
/// and f64, at lengths around the 64-element block and the machine-code
/// rows' flushes, stored or summed (f32 sums as machine code where the
/// host has AVX2 or AVX-512: `codegen/native.rs`, `compile_row`); `s -
/// x` (whose zero would be -0 through the row's `(x - a)·b`) is not fused
/// and still matches. (`x / s` at the top level of a program runs as
/// `x · (1/s)` outside exact mode, a product like the others; the
/// division row remains for loop bodies, which that rewrite leaves.)
#[test]
fn fused_rows_match_inline() {
    type Body = fn(&[Sym]) -> Sym;
    type Func = fn(&Sym) -> Sym;
    let fns: [(&str, Func); 10] = [
        ("exp", Sym::exp),
        ("expm1", Sym::expm1),
        ("log", Sym::log),
        ("log1p", Sym::log1p),
        ("tanh", Sym::tanh),
        ("sigmoid", Sym::sigmoid),
        ("erf", Sym::erf),
        ("sqrt", Sym::sqrt),
        ("rsqrt", Sym::rsqrt),
        ("reciprocal", Sym::reciprocal),
    ];
    // `x[1]` is one value per row.
    let shapes: [(&str, Body, bool); 8] = [
        ("x", |x| x[0].clone(), true),
        ("x - s", |x| &x[0] - &x[1], true),
        ("x + s", |x| &x[0] + &x[1], true),
        ("s + x", |x| &x[1] + &x[0], true),
        ("x * s", |x| &x[0] * &x[1], true),
        ("s * x", |x| &x[1] * &x[0], true),
        ("x - 0.75", |x| &x[0] - 0.75, true),
        ("s - x", |x| &x[1] - &x[0], false),
    ];
    for (rows, cols) in [
        (3usize, 64usize),
        (2, 65),
        (2, 127),
        (1, 128),
        (3, 1000),
        (1, 4099),
        // Around the machine-code rows' flushes (16 steps of 3 vectors at
        // AVX2, of 4 at AVX-512).
        (1, 385),
        (2, 1025),
    ] {
        // Specials, and elements equal to their row's `s` (zeros of
        // `x - s`).
        let mut xs = ramp(rows * cols, 6.0);
        for (i, v) in common::F32_SPECIALS.iter().enumerate() {
            xs[(i * 37) % (rows * cols)] = *v;
        }
        let s: Vec<f32> = (0..rows).map(|r| 0.25 * r as f32 - 0.5).collect();
        for r in 0..rows {
            xs[r * cols + cols / 2] = s[r];
        }
        let x = common::f32s(&xs, &[rows, cols]);
        let st = common::f32s(&s, &[rows, 1]);
        let wide64 = |v: &[f32], shape: &[usize]| {
            let v = v.iter().map(|x| f64::from(*x)).collect();
            Tensor::from(ndarray::ArrayD::from_shape_vec(shape.to_vec(), v).unwrap())
        };
        let xd = wide64(&xs, &[rows, cols]);
        let sd = wide64(&s, &[rows, 1]);
        for (fname, f) in fns {
            for (sname, shape, fused) in shapes {
                let body = move |x: &[Sym]| f(&shape(x));
                let name = format!("{fname}({sname}) {rows}x{cols}");
                let inputs = [x.clone(), st.clone()];
                let specs: Vec<TensorSpec> = inputs
                    .iter()
                    .map(|t| TensorSpec::known(t.dtype(), t.shape()))
                    .collect();
                let clif = function(move |xs: &[Sym]| body(xs))
                    .jit_compile(true)
                    .compiler_ir(&specs, IrStage::Cranelift)
                    .unwrap();
                // Plain loops run as machine code where the host allows
                // (`avx512_kernels_match_inline`), fused or not.
                if !clif.contains(NATIVE) {
                    assert_eq!(
                        clif.contains("tl_wide_row_f32"),
                        fused && host_has_wide(),
                        "{name}"
                    );
                }
                same_both_ways(&name, true, body, &inputs);
                same_both_ways(
                    &format!("f64 {name}"),
                    true,
                    body,
                    &[xd.clone(), sd.clone()],
                );
                // Summed: the sum reordered. Where the host has AVX2 or
                // AVX-512, the fused f32 row is machine code (but `erf`,
                // whose f32 approximation takes f64 halves).
                let sum = move |x: &[Sym]| f(&shape(x)).reduce_sum(Some(&[-1]), true);
                let sum_clif = function(move |xs: &[Sym]| sum(xs))
                    .jit_compile(true)
                    .compiler_ir(&specs, IrStage::Cranelift)
                    .unwrap();
                // The sum's kernel is itself machine code where the
                // row's expression records, or Cranelift's loop calls the
                // fused row as machine code.
                let machine =
                    sum_clif.contains("tl_native_row_") || reduction_is_machine_code(&sum_clif);
                if fused && fname != "erf" {
                    assert_eq!(machine, host_has_wide(), "sum of {name}\n{sum_clif}");
                }
                both_ways(&format!("sum of {name}"), true, sum, &inputs, Some(1e-5));
            }
        }
        // The division by a value fixed for the row, in place after a
        // stash (softmax) and out of place.
        let div = |x: &[Sym]| &x[0] / &x[1];
        same_both_ways(
            &format!("x / s {rows}x{cols}"),
            true,
            div,
            &[x.clone(), st.clone()],
        );
        same_both_ways(
            &format!("f64 x / s {rows}x{cols}"),
            true,
            div,
            &[xd.clone(), sd],
        );
        let div_clif = function(move |xs: &[Sym]| div(xs))
            .jit_compile(true)
            .compiler_ir(
                &[
                    TensorSpec::known(DType::F32, x.shape()),
                    TensorSpec::known(DType::F32, st.shape()),
                ],
                IrStage::Cranelift,
            )
            .unwrap();
        // (f32: machine code, `avx512_kernels_match_inline`.)
        assert_eq!(div_clif.contains(NATIVE), host_has_wide());
    }
}

/// A row max (`tl_wide_row_*` with `ROW_MAX`: 64 lanes of `vmaxps` and
/// the NaN / sign companions) gives the bits of the inline code's
/// `fmax` fold, f32 and f64, at lengths around the 64-lane block: a NaN
/// of either sign at positions in the blocks and in the tail, rows of
/// zeros of either sign with the other sign at one position, rows of
/// negatives and one zero, `-inf` and `+inf` rows.
#[test]
fn row_max_matches_inline() {
    for cols in [64usize, 65, 127, 128, 129, 1000, 4099] {
        let mut rows: Vec<Vec<f32>> = Vec::new();
        let mut ramp_row = ramp(cols, 6.0);
        for (i, v) in common::F32_SPECIALS
            .iter()
            .filter(|v| !v.is_nan())
            .enumerate()
        {
            ramp_row[(i * 37) % cols] = *v;
        }
        rows.push(ramp_row);
        let neg: Vec<f32> = (0..cols).map(|i| -1.0 - i as f32).collect();
        for p in [0, 1, 17, 63, cols / 2, cols - 1] {
            for nan in [f32::NAN, -f32::NAN] {
                let mut r = ramp(cols, 3.0);
                r[p] = nan;
                rows.push(r);
            }
            for (fill, other) in [(-0.0f32, 0.0f32), (0.0, -0.0)] {
                let mut r = vec![fill; cols];
                r[p] = other;
                rows.push(r);
            }
            let mut r = neg.clone();
            r[p] = -0.0;
            rows.push(r.clone());
            r[p] = 0.0;
            rows.push(r);
        }
        rows.push(vec![f32::NEG_INFINITY; cols]);
        rows.push(vec![-0.0; cols]);
        let mut r = neg.clone();
        r[cols - 1] = f32::INFINITY;
        rows.push(r);
        let n = rows.len();
        let flat: Vec<f32> = rows.concat();
        let x = common::f32s(&flat, &[n, cols]);
        let x64 = Tensor::from(
            ndarray::ArrayD::from_shape_vec(
                vec![n, cols],
                flat.iter().map(|v| f64::from(*v)).collect(),
            )
            .unwrap(),
        );
        let all = |x: &[Sym]| x[0].reduce_max(None, false);
        same_both_ways(
            &format!("max of all {n}x{cols}"),
            true,
            all,
            std::slice::from_ref(&x),
        );
        let max = |x: &[Sym]| x[0].reduce_max(Some(&[-1]), false);
        let clif = function(move |xs: &[Sym]| max(xs))
            .jit_compile(true)
            .compiler_ir(
                &[TensorSpec::known(DType::F32, x.shape())],
                IrStage::Cranelift,
            )
            .unwrap();
        // The max's kernel is machine code where the host has AVX2 or
        // AVX-512 (`vrangeps`, or `maxps` with the sign bits aside), no
        // longer a loop calling the wide row.
        assert_eq!(
            reduction_is_machine_code(&clif),
            host_has_wide(),
            "{cols}\n{clif}"
        );
        assert!(!clif.contains("tl_wide_row_f32"), "{cols}\n{clif}");
        same_both_ways(&format!("row max {n}x{cols}"), true, max, &[x]);
        same_both_ways(&format!("f64 row max {n}x{cols}"), true, max, &[x64]);
    }
}

/// Whether each fused row call of `clif` (`tl_wide_row_*`, or a row
/// emitted as machine code, `tl_native_row_*`, which takes the same
/// arguments) passes a non-null `ahead` (its last argument), in order.
/// A call's callee is `fnK`, declared in
/// its function as `fnK = u0:N sig..`, and the dump ends with `; u0:N =
/// name`; CLIF's comment after a call names its constant arguments (`v9 =
/// 0` for a null one).
fn row_calls_prefetching(clif: &str) -> Vec<bool> {
    let names: std::collections::HashMap<&str, &str> = clif
        .lines()
        .filter_map(|l| l.strip_prefix("; ")?.split_once(" = "))
        .collect();
    let mut callees = std::collections::HashMap::new();
    let mut out = Vec::new();
    for l in clif.lines().map(str::trim) {
        if let Some((f, decl)) = l.split_once(" = ")
            && f.starts_with("fn")
            && let Some(u) = decl.split_whitespace().find(|w| w.starts_with("u0:"))
        {
            callees.insert(f.to_string(), names.get(u).copied().unwrap_or(""));
            continue;
        }
        let (call, comment) = l.split_once(';').unwrap_or((l, ""));
        let Some(args) = call.split_once("= call ").map(|c| c.1) else {
            continue;
        };
        let args: Vec<&str> = args.split(['(', ')', ',']).map(str::trim).collect();
        if !callees
            .get(args[0])
            .is_some_and(|n| n.starts_with("tl_wide_row_") || n.starts_with("tl_native_row_"))
        {
            continue;
        }
        // callee, then op, src, n, a, b, dst, ahead.
        let ahead = args[7];
        let null = comment
            .split(',')
            .any(|c| c.trim() == format!("{ahead} = 0"));
        out.push(!null);
    }
    out
}

/// In a row group, the exp row of a softmax prefetches the same row of the
/// next block (`block` rows × the row's bytes on), which the group's row max
/// reads next; the group's row max, and a fused row outside a
/// group, prefetch nothing.
#[test]
fn softmax_exp_row_prefetches_the_next_block() {
    if !host_has_wide() {
        return;
    }
    let softmax = |x: Sym| {
        let e = (&x - x.reduce_max(Some(&[-1]), true)).exp();
        &e / e.reduce_sum(Some(&[-1]), true)
    };
    let spec = [TensorSpec::known(DType::F32, &[256, 1024])];
    let f = function(softmax).jit_compile(true);
    let fused = f.compiler_ir(&spec, IrStage::Fused).unwrap();
    let block: usize = fused
        // (Row max, exp row and sum, the sum's reciprocal, the product.)
        .split("row group: steps 0..4 run ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|b| b.parse().ok())
        .unwrap_or_else(|| panic!("no row group in\n{fused}"));
    let clif = f.compiler_ir(&spec, IrStage::Cranelift).unwrap();
    // Row max and exp row, in kernel order (the division is machine
    // code). Each is machine code of its own where the host allows
    // (AVX2 or AVX-512), prefetching with `prefetcht1`
    // at the distance as a displacement; else Cranelift's loop calls a
    // row routine with the distance as its `ahead`.
    let distance = block * 1024 * 4;
    for (kernel, prefetches) in [("reduce_max", false), ("reduce_sum", true)] {
        let part = kernel_part(&clif, kernel);
        if part.lines().next().unwrap().contains(NATIVE) {
            let ahead = format!("+{distance:X}h]");
            assert_eq!(
                part.lines()
                    .any(|l| l.contains("prefetcht1") && l.contains(&ahead)),
                prefetches,
                "{kernel}: {ahead}\n{part}"
            );
            assert_eq!(part.contains("prefetch"), prefetches, "{part}");
        } else {
            // (The part with the dump's names of the imported functions.)
            let names: Vec<&str> = clif.lines().filter(|l| l.starts_with("; u0:")).collect();
            let part = format!("{part}\n{}", names.join("\n"));
            assert_eq!(row_calls_prefetching(&part), [prefetches], "{part}");
            if prefetches {
                let distance = format!("iconst.i64 {distance:#x}");
                assert!(part.contains(&distance), "{distance}\n{part}");
            }
        }
    }
    assert!(clif.contains(NATIVE), "{clif}");
    let alone = function(|x: Sym| (&x * 2.0).exp())
        .jit_compile(true)
        .compiler_ir(&spec, IrStage::Cranelift)
        .unwrap();
    // A loop alone has no next block to prefetch (and where the host has
    // AVX2 or AVX-512 it is machine code of its own, with no row calls).
    let want: &[bool] = if alone.contains(NATIVE) {
        &[]
    } else {
        &[false]
    };
    assert_eq!(row_calls_prefetching(&alone), want, "{alone}");
}

/// f64 `pow` through `tl_wide_pow_f64` (both operands in the chunk
/// buffer) gives the inline code's bits: bases over the whole range ×
/// special and huge exponents, a dense grid, results near overflow and
/// underflow, at lengths around the chunk; and inside a longer row with
/// other wide functions.
#[test]
fn f64_pow_wide_matches_inline() {
    let exhaustive = std::env::var("TENSORLIFT_EXHAUSTIVE").is_ok_and(|v| v == "1");
    let (px, py) = common::pow_f64_pairs(exhaustive);
    let f64s = |v: &[f64]| {
        Tensor::from(ndarray::ArrayD::from_shape_vec(vec![v.len()], v.to_vec()).unwrap())
    };
    let pow = |x: &[Sym]| x[0].pow(&x[1]);
    same_both_ways("f64 pow", true, pow, &[f64s(&px), f64s(&py)]);
    for n in [63usize, 64, 511, 512, 513, 1027] {
        same_both_ways(
            &format!("f64 pow n={n}"),
            n >= 64,
            pow,
            &[f64s(&px[..n]), f64s(&py[..n])],
        );
    }
    let mixed = |x: &[Sym]| (x[0].abs().pow(x[1].tanh()) + x[1].exp()).log();
    same_both_ways(
        "f64 pow among wide functions",
        true,
        mixed,
        &[f64s(&px[..4099]), f64s(&py[..4099])],
    );
}

/// The row sums of a fused softmax against an f64 reference: the wide
/// sums (64 lanes, folded pairwise) are within 2e-6 on rows of 100,003
/// where the inline code's sequential lanes are 1.5e-5 off.
#[test]
fn softmax_sums_are_accurate() {
    let cols = 100_003;
    let xs = ramp(2 * cols, 30.0);
    let x = common::f32s(&xs, &[2, cols]);
    let softmax = |x: Sym| {
        let e = (&x - x.reduce_max(Some(&[-1]), true)).exp();
        &e / e.reduce_sum(Some(&[-1]), true)
    };
    let got = function(softmax).jit_compile(true).call(&[x]).unwrap();
    let mut want = Vec::with_capacity(xs.len());
    for row in xs.chunks(cols) {
        let m = row.iter().fold(f32::NEG_INFINITY, |a, b| a.max(*b));
        let e: Vec<f64> = row.iter().map(|v| f64::from(v - m).exp()).collect();
        let sum: f64 = e.iter().sum();
        want.extend(e.iter().map(|v| (v / sum) as f32));
    }
    let want = common::f32s(&want, &[2, cols]);
    // A few ulp of `exp` on top of the sum's error.
    let rtol = if host_has_wide() { 2e-6 } else { 5e-5 };
    common::assert_close(&got[0], &want, rtol, 0.0, "softmax against f64");
}

/// Short rows and `exact` mode keep the inline code; f64 rows have their
/// own routines.
#[test]
fn short_and_exact_rows_stay_inline() {
    let f = function(|x: Sym| x.exp()).jit_compile(true);
    let short = f
        .compiler_ir(&[TensorSpec::known(DType::F32, &[63])], IrStage::Cranelift)
        .unwrap();
    assert!(!short.contains("tl_wide_"));
    let f64_row = f
        .compiler_ir(
            &[TensorSpec::known(DType::F64, &[4096])],
            IrStage::Cranelift,
        )
        .unwrap();
    assert_eq!(f64_row.contains("tl_wide_row_f64"), host_has_wide());
    let exact = function(|x: Sym| x.exp())
        .jit_compile(true)
        .jit_options(JitOptions {
            exact: true,
            ..JitOptions::default()
        })
        .compiler_ir(
            &[TensorSpec::known(DType::F32, &[4096])],
            IrStage::Cranelift,
        )
        .unwrap();
    assert!(!exact.contains("tl_wide_"));
}

type DotBody = fn(&[Sym]) -> Sym;

/// The kinds of row dot product the tests build: the rows of `x` (`rows ×
/// n`) times those of `y`, `y` one row shared by every row or one per row.
#[derive(Clone, Copy, Debug)]
enum DotShape {
    /// `A @ v`: A (rows, n), v (n, 1) → (rows, 1).
    MatVec,
    /// `(A @ v)` batched: A (2, rows/2, n), v (2, n, 1).
    Batched,
    /// `sum(x * y, axis=1)`: x, y (rows, n) → (rows).
    RowWise,
    /// `sum(x * x, axis=1)`: one load for both operands.
    Squares,
    /// `sum(x * y)` of two vectors (n): one row, rank 1.
    Vector,
}

impl DotShape {
    /// The graph, and the input shapes for `rows` rows of `n`.
    fn build(self, rows: usize, n: usize) -> (DotBody, Vec<Vec<usize>>) {
        match self {
            DotShape::MatVec => (|x| x[0].matmul(&x[1]), vec![vec![rows, n], vec![n, 1]]),
            DotShape::Batched => (
                |x| x[0].matmul(&x[1]),
                vec![vec![2, rows / 2, n], vec![2, n, 1]],
            ),
            DotShape::RowWise => (
                |x| (&x[0] * &x[1]).reduce_sum(Some(&[1]), false),
                vec![vec![rows, n], vec![rows, n]],
            ),
            DotShape::Squares => (
                |x| (&x[0] * &x[0]).reduce_sum(Some(&[1]), false),
                vec![vec![rows, n]],
            ),
            DotShape::Vector => (
                |x| (&x[0] * &x[1]).reduce_sum(None, false),
                vec![vec![n], vec![n]],
            ),
        }
    }

    /// The row of the second operand's data that row `r` multiplies.
    fn y_row(self, r: usize, rows: usize) -> usize {
        match self {
            DotShape::MatVec | DotShape::Vector => 0,
            DotShape::Batched => r / (rows / 2),
            DotShape::RowWise | DotShape::Squares => r,
        }
    }
}

/// Checks a row dot product's results: against an f64 reference (NaN where
/// it is NaN, the same infinity where it is infinite) and against the
/// interpreter and the inline 128-bit code within the reordering bound of
/// docs/compiler.md: each sum is within `γ_n·Σ|x·y|` of the exact one
/// (`γ_n = n·ε/(1 - n·ε)`), so two of them within twice that.
#[allow(clippy::too_many_arguments, reason = "a test helper")]
fn check_dot(
    name: &str,
    shape: DotShape,
    rows: usize,
    n: usize,
    xs: &[f64],
    ys: &[f64],
    f64_data: bool,
) {
    let (body, dims) = shape.build(rows, n);
    let tensor = |v: &[f64], d: &[usize]| {
        let v = &v[..d.iter().product::<usize>()];
        if f64_data {
            Tensor::from(ndarray::ArrayD::from_shape_vec(d.to_vec(), v.to_vec()).unwrap())
        } else {
            let v: Vec<f32> = v.iter().map(|x| *x as f32).collect();
            common::f32s(&v, d)
        }
    };
    let mut inputs = vec![tensor(xs, &dims[0])];
    if dims.len() > 1 {
        inputs.push(tensor(ys, &dims[1]));
    }
    let ys = if dims.len() > 1 { ys } else { xs };
    let specs: Vec<TensorSpec> = inputs
        .iter()
        .map(|t| TensorSpec::known(t.dtype(), t.shape()))
        .collect();
    let wide = function(move |x: &[Sym]| body(x))
        .jit_compile(true)
        .jit_options(common::ieee());
    let clif = wide.compiler_ir(&specs, IrStage::Cranelift).unwrap();
    let symbol = if f64_data {
        "tl_wide_dot_f64"
    } else {
        "tl_wide_dot_f32"
    };
    // f32 rows of two loop dims are a reduction kernel of machine code
    // where the host has AVX2 or AVX-512 (any length); other rows call
    // the wide dot where they are long enough.
    let machine = !f64_data && all_machine_code(&clif);
    assert!(!machine || host_has_wide(), "{name}\n{clif}");
    assert_eq!(
        clif.contains(symbol) || machine,
        (n >= 64 || machine) && host_has_wide(),
        "{name}: the wide dot where the row is long enough and the host has it"
    );
    let inline = function(move |x: &[Sym]| body(x))
        .jit_compile(true)
        .jit_options(narrow());
    let interp = function(move |x: &[Sym]| body(x)).jit_compile(false);
    let as_f64 = |t: &Tensor| -> Vec<f64> {
        if f64_data {
            common::to_vec::<f64>(t)
        } else {
            common::to_vec::<f32>(t)
                .into_iter()
                .map(f64::from)
                .collect()
        }
    };
    let got = as_f64(&wide.call(&inputs).unwrap()[0]);
    let others = [
        ("inline", as_f64(&inline.call(&inputs).unwrap()[0])),
        ("interpreter", as_f64(&interp.call(&inputs).unwrap()[0])),
    ];
    let eps = if f64_data {
        f64::EPSILON / 2.0
    } else {
        f64::from(f32::EPSILON) / 2.0
    };
    let gamma = n as f64 * eps / (1.0 - n as f64 * eps);
    assert_eq!(got.len(), rows, "{name}");
    for r in 0..rows {
        let x = &xs[r * n..(r + 1) * n];
        let yr = shape.y_row(r, rows);
        let y = &ys[yr * n..(yr + 1) * n];
        let (mut want, mut mag) = (0.0f64, 0.0f64);
        for (a, b) in x.iter().zip(y) {
            let (a, b) = if f64_data {
                (*a, *b)
            } else {
                (f64::from(*a as f32), f64::from(*b as f32))
            };
            want += a * b;
            mag += (a * b).abs();
        }
        let g = got[r];
        if want.is_nan() || want.is_infinite() {
            assert!(
                g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                "{name}: row {r}: got {g:e}, reference {want:e}"
            );
        } else {
            let bound = 2.0 * gamma * mag;
            assert!(
                (g - want).abs() <= bound,
                "{name}: row {r}: got {g:e}, reference {want:e}, bound {bound:e}"
            );
        }
        for (who, v) in &others {
            let o = v[r];
            let ok = if g.is_nan() || o.is_nan() || g.is_infinite() || o.is_infinite() {
                o.to_bits() == g.to_bits() || (g.is_nan() && o.is_nan())
            } else {
                (g - o).abs() <= 2.0 * gamma * mag
            };
            assert!(ok, "{name}: row {r}: wide {g:e}, {who} {o:e}");
        }
    }
}

/// Values over about [-2, 2) (deterministic per `seed`).
fn dot_data(n: usize, seed: u32) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let h = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed);
            f64::from(h >> 8) / f64::from(1u32 << 24) * 4.0 - 2.0
        })
        .collect()
}

/// A row dot product (a Reduce Sum over the row of `x · y`, both rows
/// contiguous: a matrix-vector product, batched or not, a row-wise dot, a
/// row's sum of squares, a dot of two vectors) runs as `tl_wide_dot_*`
/// calls from 64 elements on, f32 and f64, and agrees with the interpreter
/// and the inline code within the reordering bound: row lengths around the
/// lane counts (32 f32, 16 f64) and the threshold, row counts around the
/// block of 4 rows, the benchmark's 512×512.
#[test]
fn dot_rows_agree_with_the_interpreter() {
    let shapes = [
        DotShape::MatVec,
        DotShape::Batched,
        DotShape::RowWise,
        DotShape::Squares,
        DotShape::Vector,
    ];
    for n in [
        16usize, 33, 63, 64, 65, 95, 96, 97, 127, 128, 129, 1000, 4099,
    ] {
        for rows in [2usize, 4, 6, 10] {
            let xs = dot_data(rows * n, 1);
            let ys = dot_data(rows * n, 2);
            for shape in shapes {
                let rows = if matches!(shape, DotShape::Vector) {
                    1
                } else {
                    rows
                };
                for f64_data in [false, true] {
                    let name = format!("{shape:?} {rows}x{n} f64={f64_data}");
                    check_dot(&name, shape, rows, n, &xs, &ys, f64_data);
                }
            }
        }
    }
    let xs = dot_data(512 * 512, 3);
    let ys = dot_data(512, 4);
    check_dot("512x512", DotShape::MatVec, 512, 512, &xs, &ys, false);
    check_dot("512x512 f64", DotShape::MatVec, 512, 512, &xs, &ys, true);
}

/// NaN and infinities in a row dot product: a NaN anywhere in a row (in its
/// blocks or its tail), `inf · 0`, `inf - inf` give NaN, a lone infinity
/// its signed infinity, as in the interpreter; a NaN in a matrix-vector
/// product's vector reaches every row.
#[test]
fn dot_rows_propagate_nan_and_inf() {
    for n in [64usize, 65, 100, 1000] {
        let rows = 7;
        for f64_data in [false, true] {
            let mut xs = dot_data(rows * n, 5);
            let mut ys = dot_data(rows * n, 6);
            // Row 0: NaN at the start; row 1: NaN in the tail; row 2: +inf
            // times a positive value; row 3: inf times 0; row 4: +inf and
            // -inf products; row 5: -0 times inf; row 6: plain.
            xs[0] = f64::NAN;
            xs[n + n - 1] = f64::NAN;
            xs[2 * n + 40] = f64::INFINITY;
            ys[2 * n + 40] = 0.5;
            xs[3 * n + 17] = f64::INFINITY;
            ys[3 * n + 17] = 0.0;
            xs[4 * n + 3] = f64::INFINITY;
            ys[4 * n + 3] = 1.0;
            xs[4 * n + n - 2] = f64::INFINITY;
            ys[4 * n + n - 2] = -1.0;
            xs[5 * n + 9] = -0.0;
            ys[5 * n + 9] = f64::NEG_INFINITY;
            let name = format!("{n} f64={f64_data}");
            check_dot(
                &format!("row-wise {name}"),
                DotShape::RowWise,
                rows,
                n,
                &xs,
                &ys,
                f64_data,
            );
            // The matrix's specials, then a NaN in the vector.
            check_dot(
                &format!("matvec {name}"),
                DotShape::MatVec,
                rows,
                n,
                &xs,
                &ys[..n],
                f64_data,
            );
            let mut v = ys[..n].to_vec();
            v[n / 2] = f64::NAN;
            let plain = dot_data(rows * n, 7);
            check_dot(
                &format!("matvec NaN in v {name}"),
                DotShape::MatVec,
                rows,
                n,
                &plain,
                &v,
                f64_data,
            );
        }
    }
}

/// A row dot product in a row group (`x / sum(x·y)`, the division reading
/// the row sums back) is called once per block of rows with the group's
/// range of rows; exact mode keeps the GEMM and the inline reductions.
#[test]
fn dot_rows_in_row_groups_and_exact_mode() {
    let (rows, n) = (300usize, 256usize);
    let x = common::f32s(
        &dot_data(rows * n, 8)
            .iter()
            .map(|v| *v as f32)
            .collect::<Vec<_>>(),
        &[rows, n],
    );
    let y = common::f32s(
        &dot_data(rows * n, 9)
            .iter()
            .map(|v| 1.5 + *v as f32)
            .collect::<Vec<_>>(),
        &[rows, n],
    );
    // The sums are an output too: a block that added every row's sum
    // would still divide its own rows right.
    let body = |x: &[Sym]| {
        let s = (&x[0] * &x[1]).reduce_sum(Some(&[1]), true);
        vec![&x[0] / &s, s]
    };
    let specs = [
        TensorSpec::known(DType::F32, &[rows, n]),
        TensorSpec::known(DType::F32, &[rows, n]),
    ];
    let f = function(body).jit_compile(true);
    let fused = f.compiler_ir(&specs, IrStage::Fused).unwrap();
    assert!(fused.contains("row group"), "{fused}");
    // The rows' kernel as machine code, or calling the wide dot.
    let clif = f.compiler_ir(&specs, IrStage::Cranelift).unwrap();
    assert_eq!(
        clif.contains("tl_wide_dot_f32") || all_machine_code(&clif),
        host_has_wide(),
        "{clif}"
    );
    let inputs = [x, y];
    let want = function(body).jit_compile(false).call(&inputs).unwrap();
    let got = f.call(&inputs).unwrap();
    // The sums positive and away from 0 (y > 0.5): a relative bound.
    common::assert_close(&got[0], &want[0], 1e-5, 1e-6, "x / sum(x*y)");
    common::assert_close(&got[1], &want[1], 1e-5, 0.0, "sum(x*y)");
    let exact = JitOptions {
        exact: true,
        ..JitOptions::default()
    };
    let matvec = |x: &[Sym]| vec![x[0].matmul(&x[1])];
    let vector = TensorSpec::known(DType::F32, &[n, 1]);
    for (g, specs) in [
        (body as fn(&[Sym]) -> Vec<Sym>, specs.to_vec()),
        (matvec, vec![specs[0].clone(), vector]),
    ] {
        let clif = function(g)
            .jit_compile(true)
            .jit_options(exact)
            .compiler_ir(&specs, IrStage::Cranelift)
            .unwrap();
        assert!(!clif.contains("tl_wide_"), "exact mode");
        assert!(!clif.contains(NATIVE), "exact mode");
        let clif = function(g)
            .jit_compile(true)
            .compiler_ir(&specs, IrStage::Cranelift)
            .unwrap();
        assert_eq!(
            clif.contains("tl_wide_dot_f32") || all_machine_code(&clif),
            host_has_wide(),
            "{clif}"
        );
    }
}

/// Each comparison of `x[0]` with `x[1]` choosing between multiples of
/// the clean `x[2]`, so a NaN operand shows which way it went.
fn every_comparison(x: &[Sym]) -> Sym {
    let (u, v, c) = (&x[0], &x[1], &x[2]);
    let pick = |m: Sym, k: f64| m.select(c * k, c * -k);
    pick(u.equal(v), 1.0)
        + pick(u.not_equal(v), 2.0)
        + pick(u.less(v), 4.0)
        + pick(u.less_equal(v), 8.0)
        + pick(u.greater(v), 16.0)
        + pick(u.greater_equal(v), 32.0)
}

/// The extension the dumps name for this host's machine-code kernels.
fn native_name() -> &'static str {
    match tensorlift::compiler::max_isa() {
        tensorlift::compiler::IsaLevel::Avx512 => "AVX-512 machine code",
        tensorlift::compiler::IsaLevel::Avx2 => "AVX2 machine code",
        tensorlift::compiler::IsaLevel::Sse42 => "no machine code",
    }
}

/// `f`'s kernel is machine code exactly where `native` and the host has
/// AVX2 or AVX-512, and gives the inline code's bits (any NaN for a NaN).
fn check_native(name: &str, native: bool, f: fn(&[Sym]) -> Sym, inputs: &[Tensor]) {
    let specs: Vec<TensorSpec> = inputs
        .iter()
        .map(|t| TensorSpec::known(t.dtype(), t.shape()))
        .collect();
    let clif = function(move |xs: &[Sym]| f(xs))
        .jit_compile(true)
        .compiler_ir(&specs, IrStage::Cranelift)
        .unwrap();
    assert_eq!(
        clif.contains(NATIVE),
        native && host_has_wide(),
        "{name}\n{clif}"
    );
    assert!(
        !clif.contains(NATIVE) || clif.contains(native_name()),
        "{name}: {}",
        native_name()
    );
    let wide = function(move |xs: &[Sym]| f(xs))
        .jit_compile(true)
        .jit_options(common::ieee());
    let plain = function(move |xs: &[Sym]| f(xs))
        .jit_compile(true)
        .jit_options(narrow());
    let (a, b) = (wide.call(inputs).unwrap(), plain.call(inputs).unwrap());
    if let Some((i, w, n)) = first_difference(&a[0], &b[0]) {
        panic!("{name}: element {i}: machine code {w:e}, inline {n:e}");
    }
}

/// Loops of f32 functions emitted as AVX-512 or AVX2 machine code
/// (`codegen/native.rs`) give the inline code's bits: every length around
/// a vector (the masked tail), rows split over the threads whose ranges
/// are not whole vectors, scalar operands broadcast, constants on either
/// side of each operation, a value used twice, max, min, clamps and
/// comparisons feeding selects over the specials, row broadcasts and values
/// per row (the loop row by row); and kernels that do not qualify (more
/// slots than address registers, f64, no function) still compile and
/// match, as Cranelift code.
/// `scripts/test.sh` runs this file again with the cap at AVX2 on AVX-512
/// hosts.
#[test]
fn avx512_kernels_match_inline() {
    let check = check_native;
    let chain: fn(&[Sym]) -> Sym = |x| {
        let a = (-(&x[0] * &x[0])).exp() * x[0].tanh() + x[0].abs().sqrt();
        let b = (2.0 - a.sigmoid()) / (&a * &a + 1.0);
        &b * (a.log1p() - 0.5) + (&x[0] * 0.25).expm1() + x[0].abs().log()
    };
    let with_scalar: fn(&[Sym]) -> Sym = |x| (&x[0] * &x[1]).tanh() * &x[1] - x[1].exp();
    // GELU: `x` waits through the whole `tanh` for `0.5·x`.
    let gelu: fn(&[Sym]) -> Sym = |x| {
        let inner = (&x[0] + &x[0] * &x[0] * &x[0] * 0.044715) * 0.797_884_6;
        &x[0] * 0.5 * (inner.tanh() + 1.0)
    };
    for n in [0usize, 1, 7, 15, 16, 17, 31, 33, 100, 4099] {
        let mut v = ramp(n, 10.0);
        for (i, s) in common::F32_SPECIALS.iter().enumerate().take(n) {
            v[(i * 13) % n] = *s;
        }
        let x = common::f32s(&v, &[n]);
        check(
            &format!("chain n={n}"),
            true,
            chain,
            std::slice::from_ref(&x),
        );
        let s = common::f32s(&[0.75], &[]);
        check(&format!("scalar n={n}"), true, with_scalar, &[x.clone(), s]);
        check(&format!("gelu n={n}"), true, gelu, std::slice::from_ref(&x));
        writes_only_its_output(n, chain, &x);
        writes_only_its_output(n, gelu, &x);
    }
    // max and min (IEEE maximum/minimum, NaN canonical) against every
    // special on either side, ±0 against each other included.
    let sp = common::F32_SPECIALS;
    let (a, b): (Vec<f32>, Vec<f32>) = sp
        .iter()
        .flat_map(|&u| sp.iter().map(move |&v| (u, v)))
        .chain([(0.0, -0.0), (-0.0, 0.0), (1.5, -2.5)])
        .unzip();
    let n = a.len();
    let (a, b) = (common::f32s(&a, &[n]), common::f32s(&b, &[n]));
    check(
        "max and min",
        true,
        // 1/±0 = ±inf and tanh(±inf) = ±1: the sign of a zero shows.
        |x| x[0].maximum(&x[1]).reciprocal().tanh() + x[0].minimum(&x[1]).reciprocal().tanh() * 3.0,
        &[a.clone(), b.clone()],
    );
    check(
        "clamped exp",
        true,
        |x| x[0].maximum(-1.0).minimum(&x[1]).exp(),
        &[a.clone(), b.clone()],
    );
    // Comparisons feeding selects (ELU, a branch on each side of zero, NaN
    // through every predicate) and clamps.
    check(
        "elu",
        true,
        |x| x[0].greater(0.0).select(&x[0], &(x[0].expm1() * 1.5)),
        std::slice::from_ref(&a),
    );
    // Each predicate picks between two clean values, so a NaN operand
    // shows which way it went.
    let clean = common::f32s(&ramp(n, 2.0), &[n]);
    check(
        "every comparison",
        true,
        |x| every_comparison(x) + x[2].exp(),
        &[a.clone(), b.clone(), clean],
    );
    check(
        "clamp",
        true,
        |x| x[0].clamp(&x[1], 2.0).exp(),
        &[a.clone(), b.clone()],
    );
    // 1M elements in rows of 33: split over the threads by rows, no part
    // a whole number of vectors.
    for (rows, cols) in [(3usize, 5usize), (30_000, 33), (7, 1000)] {
        let x = common::f32s(&ramp(rows * cols, 6.0), &[rows, cols]);
        check(&format!("chain {rows}x{cols}"), true, chain, &[x]);
    }
    let x = |seed: usize| common::f32s(&ramp(1000 + seed, 4.0)[seed..], &[1000]);
    let inputs: Vec<Tensor> = (0..9).map(x).collect();
    check(
        "nine inputs",
        false,
        |x| x.iter().fold(x[0].exp(), |acc, v| acc + v.tanh()),
        &inputs,
    );
    check(
        "eight inputs",
        true,
        |x| x[..7].iter().fold(x[0].exp(), |acc, v| acc + v.tanh()),
        &inputs[..7],
    );
    // Row by row: a row broadcast along the rows (a bias) and one value
    // per row, with rows of every remainder modulo the vectors, wide
    // enough for the four-vector steps, split over the threads.
    for (r, c) in [
        (64usize, 40usize),
        (3, 7),
        (5, 16),
        (2, 17),
        (30_000, 33),
        (300, 1000),
    ] {
        let m = common::f32s(&ramp(r * c, 3.0), &[r, c]);
        let bias = common::f32s(&ramp(c, 1.0), &[c]);
        let per_row = common::f32s(&ramp(r + 3, 2.0)[3..], &[r, 1]);
        check(
            &format!("row broadcast {r}x{c}"),
            true,
            |x| (&x[0] * &x[1]).exp() + &x[1],
            &[m.clone(), bias.clone()],
        );
        check(
            &format!("value per row {r}x{c}"),
            true,
            |x| (&x[1] - &x[0]).tanh() * &x[1],
            &[m.clone(), per_row.clone()],
        );
        check(
            &format!("both {r}x{c}"),
            true,
            |x| (&x[0] + &x[1]).sigmoid() - &x[2],
            &[m, bias, per_row],
        );
    }
    // Arithmetic alone qualifies too, with no constant at all (an empty
    // pool) or with some; a layer norm's last kernel (a value per row and
    // two row broadcasts); a softmax's division by the row sums.
    for (r, c) in [(64usize, 40usize), (3, 7), (300, 1000)] {
        let m = common::f32s(&ramp(r * c, 3.0), &[r, c]);
        let n = common::f32s(&ramp(r * c + 5, 2.0)[5..], &[r, c]);
        let bias = common::f32s(&ramp(c, 1.0), &[c]);
        let per_row = common::f32s(&ramp(r + 3, 2.0)[3..], &[r, 1]);
        check(
            &format!("no function {r}x{c}"),
            true,
            |x| &x[0] * 3.0 + 1.0,
            std::slice::from_ref(&m),
        );
        check(
            &format!("no constant {r}x{c}"),
            true,
            |x| &x[0] * &x[1] - (&x[1] / &x[0]).sqrt(),
            &[m.clone(), n.clone()],
        );
        check(
            &format!("normalized rows {r}x{c}"),
            true,
            |x| (&x[0] - &x[1]) * x[1].rsqrt() * &x[2] + &x[2].reciprocal(),
            &[m.clone(), per_row.clone(), bias],
        );
        check(
            &format!("divided per row {r}x{c}"),
            true,
            |x| &x[0] / &x[1],
            &[m, per_row],
        );
    }
    for n in [0usize, 1, 15, 17, 4099] {
        let x = common::f32s(&ramp(n, 10.0), &[n]);
        writes_only_its_output(n, |x| &x[0] * &x[0] - &x[0], &x);
    }
    let f64s = Tensor::from(
        ndarray::ArrayD::from_shape_vec(vec![100], (0..100).map(|i| f64::from(i) * 0.1).collect())
            .unwrap(),
    );
    check("f64", false, |x| x[0].exp(), &[f64s]);
}

/// f64 kernels of arithmetic, comparisons and selects are machine code
/// too (4 lanes at AVX2, 8 at AVX-512) and give the inline code's bits:
/// every length around a vector and a several-vector step (the masked
/// tail), the specials on either side of max, min, clamps and every
/// comparison, a scalar operand, a row broadcast and a value per row (the
/// loop row by row), rows split over the threads, and `call_into` writing
/// nothing past the output. f64 transcendentals stay with Cranelift.
#[test]
fn f64_kernels_match_inline() {
    let f64s = |v: Vec<f64>, shape: &[usize]| {
        Tensor::from(ndarray::ArrayD::from_shape_vec(shape.to_vec(), v).unwrap())
    };
    let ramp64 =
        |n: usize, scale: f32| -> Vec<f64> { ramp(n, scale).into_iter().map(f64::from).collect() };
    let specials: Vec<f64> = common::F32_SPECIALS
        .iter()
        .map(|&x| f64::from(x))
        .chain([
            f64::MAX,
            f64::MIN_POSITIVE,
            5e-324,
            -5e-324,
            1e300,
            -1e-300,
            f64::from_bits(0x7ff0_0000_0000_0001),
        ])
        .collect();
    // The suite's arith chain, and every other arithmetic function.
    let arith: fn(&[Sym]) -> Sym = |x| ((&x[0] * 1.5 + 0.25) * &x[0] - 0.75) * 0.5 + &x[0];
    let rational: fn(&[Sym]) -> Sym = |x| {
        let x = &x[0];
        (x.abs().sqrt() + x.rsqrt()) / (x * x + 1.0) - x.reciprocal() * x.floor()
            + x.ceil() * x.round()
            - (-x).square()
    };
    let with_scalar: fn(&[Sym]) -> Sym = |x| &x[0] * &x[1] - &x[1] / 3.0;
    for n in [0usize, 1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 100, 4099] {
        let mut v = ramp64(n, 10.0);
        for (i, s) in specials.iter().enumerate().take(n) {
            v[(i * 13) % n] = *s;
        }
        let x = f64s(v, &[n]);
        check_native(
            &format!("f64 arith n={n}"),
            true,
            arith,
            std::slice::from_ref(&x),
        );
        check_native(
            &format!("f64 rational n={n}"),
            true,
            rational,
            std::slice::from_ref(&x),
        );
        let s = f64s(vec![0.75], &[]);
        check_native(
            &format!("f64 scalar n={n}"),
            true,
            with_scalar,
            &[x.clone(), s],
        );
        writes_only_its_output(n, arith, &x);
    }
    let (a, b): (Vec<f64>, Vec<f64>) = specials
        .iter()
        .flat_map(|&u| specials.iter().map(move |&v| (u, v)))
        .chain([(0.0, -0.0), (-0.0, 0.0), (1.5, -2.5)])
        .unzip();
    let n = a.len();
    let (a, b) = (f64s(a, &[n]), f64s(b, &[n]));
    check_native(
        "f64 max and min",
        true,
        // 1/±0 = ±inf: the sign of a zero shows.
        |x| x[0].maximum(&x[1]).reciprocal() + x[0].minimum(&x[1]).reciprocal() * 3.0,
        &[a.clone(), b.clone()],
    );
    check_native(
        "f64 clamp",
        true,
        |x| x[0].clamp(&x[1], 2.0) * 3.0,
        &[a.clone(), b.clone()],
    );
    let clean = f64s(ramp64(n, 2.0), &[n]);
    check_native(
        "f64 every comparison",
        true,
        every_comparison,
        &[a, b, clean],
    );
    for (r, c) in [(3usize, 7usize), (5, 8), (2, 17), (30_000, 33), (300, 1000)] {
        let m = f64s(ramp64(r * c, 3.0), &[r, c]);
        let bias = f64s(ramp64(c, 1.0), &[c]);
        let per_row = f64s(ramp64(r + 3, 2.0)[3..].to_vec(), &[r, 1]);
        check_native(
            &format!("f64 chain {r}x{c}"),
            true,
            arith,
            std::slice::from_ref(&m),
        );
        check_native(
            &format!("f64 normalized rows {r}x{c}"),
            true,
            |x| (&x[0] - &x[1]) * x[1].rsqrt() * &x[2] + &x[2].reciprocal(),
            &[m, per_row, bias],
        );
    }
    let x = f64s(ramp64(100, 1.0), &[100]);
    check_native("f64 exp", false, |x| x[0].exp(), &[x]);
}

/// Where the host's kernels are machine code, a bound of `exp` (its clamp)
/// or `tanh` (the ceiling of |x|) is one `vmaxps`/`vminps` with the bound
/// first, not a compare and a blend, and `tanh`'s `1 - 2^(n+1)·0.5` one
/// `vfnmadd` (`approx::Ops::at_least`, `at_most`,
/// `fnma`); the bits are those of the inline code
/// (`avx512_kernels_match_inline` runs both functions over the specials,
/// NaN and values past either bound among them).
#[test]
fn bounds_and_negated_products_are_single_instructions() {
    if !host_has_wide() {
        return;
    }
    let spec = [TensorSpec::known(DType::F32, &[1024])];
    let listing = |f: fn(Sym) -> Sym| {
        function(f)
            .jit_compile(true)
            .compiler_ir(&spec, IrStage::Cranelift)
            .unwrap()
    };
    let exp = listing(|x| x.exp());
    assert!(exp.contains(NATIVE), "{exp}");
    assert!(!exp.contains("vcmp"), "exp: a compare left\n{exp}");
    assert!(exp.contains("vmaxps") && exp.contains("vminps"), "{exp}");
    let tanh = listing(|x| x.tanh());
    assert!(tanh.contains(NATIVE), "{tanh}");
    assert!(!tanh.contains("vcmp"), "tanh: a compare left\n{tanh}");
    assert!(
        tanh.contains("vminps") && tanh.contains("vfnmadd"),
        "{tanh}"
    );
    let x = common::f32s(
        &[
            f32::NAN,
            -200.0,
            -18.0,
            -9.5,
            -0.0,
            0.0,
            1e-30,
            0.5,
            9.5,
            90.0,
            f32::INFINITY,
        ],
        &[11],
    );
    for (name, f) in [
        ("exp", (|x: Sym| x.exp()) as fn(Sym) -> Sym),
        ("tanh", |x| x.tanh()),
    ] {
        let wide = function(f)
            .jit_compile(true)
            .jit_options(common::ieee())
            .call(std::slice::from_ref(&x))
            .unwrap();
        let plain = function(f)
            .jit_compile(true)
            .jit_options(narrow())
            .call(std::slice::from_ref(&x))
            .unwrap();
        if let Some((i, w, n)) = first_difference(&wide[0], &plain[0]) {
            panic!("{name}: element {i}: machine code {w:e}, inline {n:e}");
        }
    }
}

/// GELU holds `0.5·x` through its whole `tanh` in the kernel's order, so
/// AVX2's 15 registers fit two interleaved vectors; the lean line (nodes
/// in Sethi–Ullman order, `x` loaded again where it is read late) fits
/// three, and the emitter takes it (`codegen/native.rs`, `schedule`).
/// Its bits are checked by `avx512_kernels_match_inline`'s GELU cases.
#[test]
fn gelu_runs_three_vectors_a_step_at_avx2() {
    if tensorlift::compiler::max_isa() != tensorlift::compiler::IsaLevel::Avx2 {
        return;
    }
    let spec = [TensorSpec::known(DType::F32, &[4096])];
    let gelu = |x: Sym| {
        let inner = (&x + &x * &x * &x * 0.044715) * 0.797_884_6;
        &x * 0.5 * (inner.tanh() + 1.0)
    };
    let clif = function(gelu)
        .jit_compile(true)
        .compiler_ir(&spec, IrStage::Cranelift)
        .unwrap();
    assert!(clif.contains("AVX2 machine code"), "{clif}");
    // 3 vectors of 8 lanes a step.
    assert!(clif.contains("add rdx,18h"), "{clif}");
}

/// `f` on `x` (`n` elements) written by `call_into` into an aligned buffer
/// followed by 64 guard elements: the results are `call`'s and no guard
/// element changes (a tail that stored a lane past the end would).
fn writes_only_its_output(n: usize, f: fn(&[Sym]) -> Sym, x: &Tensor) {
    const GUARD: u32 = 0x7fc0_dead;
    let want = function(move |xs: &[Sym]| f(xs))
        .jit_compile(true)
        .call(std::slice::from_ref(x))
        .unwrap();
    let size = want[0].dtype().size();
    // u128 elements: 16-byte aligned.
    let mut buf = vec![0u128; (n + 64).div_ceil(16 / size)];
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut buf);
    for g in bytes.chunks_exact_mut(4) {
        g.copy_from_slice(&GUARD.to_le_bytes());
    }
    let (out, guard) = bytes.split_at_mut(n * size);
    let shape = [n];
    let mut outs = [TensorMut::new(want[0].dtype(), &shape, out).unwrap()];
    function(move |xs: &[Sym]| f(xs))
        .jit_compile(true)
        .call_into(std::slice::from_ref(x), &mut outs)
        .unwrap();
    for (i, g) in guard.chunks_exact(4).enumerate() {
        let g = u32::from_le_bytes([g[0], g[1], g[2], g[3]]);
        assert_eq!(g, GUARD, "n={n}: guard word {i} written");
    }
    let got = if want[0].dtype() == DType::F64 {
        let v: &[f64] = bytemuck::cast_slice(&bytes[..n * size]);
        Tensor::from(ndarray::ArrayD::from_shape_vec(vec![n], v.to_vec()).unwrap())
    } else {
        common::f32s(bytemuck::cast_slice(&bytes[..n * size]), &[n])
    };
    if let Some((i, a, b)) = first_difference(&got, &want[0]) {
        panic!("n={n}: call_into element {i}: {a:e}, call {b:e}");
    }
}

/// `f`'s kernels are all machine code exactly where the host has AVX2 or
/// AVX-512, and give the interpreter's integers (the definition: wrapping
/// arithmetic, `x / 0 = -1`, `x % 0 = x`, `MIN / -1 = MIN`, shifts by an
/// amount outside `[0, 32)` filling with zeros or the sign).
fn check_ints(name: &str, f: fn(&[Sym]) -> Sym, inputs: &[Tensor]) {
    let specs: Vec<TensorSpec> = inputs
        .iter()
        .map(|t| TensorSpec::known(t.dtype(), t.shape()))
        .collect();
    let jit = function(move |xs: &[Sym]| f(xs)).jit_compile(true);
    let clif = jit.compiler_ir(&specs, IrStage::Cranelift).unwrap();
    assert_eq!(
        all_machine_code(&clif),
        host_has_wide(),
        "{name}: machine code exactly where the host allows\n{clif}"
    );
    let want = function(move |xs: &[Sym]| f(xs)).call(inputs).unwrap();
    let got = jit.call(inputs).unwrap();
    assert_eq!(got[0].dtype(), DType::I32, "{name}");
    let (g, w) = (
        common::to_vec::<i32>(&got[0]),
        common::to_vec::<i32>(&want[0]),
    );
    assert_eq!(g.len(), w.len(), "{name}");
    if let Some(i) = (0..g.len()).find(|&i| g[i] != w[i]) {
        let operands: Vec<i32> = inputs
            .iter()
            .filter(|t| t.shape().iter().product::<usize>() == g.len())
            .map(|t| common::to_vec::<i32>(t)[i])
            .collect();
        panic!(
            "{name}: element {i} of {}: compiled {}, interpreter {} (operands {operands:?})",
            g.len(),
            g[i],
            w[i]
        );
    }
}

fn i32s(v: Vec<i32>, shape: &[usize]) -> Tensor {
    Tensor::from(ndarray::ArrayD::from_shape_vec(shape.to_vec(), v).unwrap())
}

/// Loops of int32 arithmetic (the suite's `(3x + y) / 7 + x % y`,
/// division and remainder by vectors and by every kind of constant,
/// wrapping products, shifts by any amount, max/min/clamp, bitwise
/// operations, comparisons feeding selects, scalars and row broadcasts)
/// are AVX-512 or AVX2 machine code (`codegen/native.rs`: a division
/// through f64 halves, the divisor's zeros patched afterwards; by a
/// constant, a product by its reciprocal corrected by one) and give the
/// interpreter's integers over the specials (0, ±1, MIN, MAX, amounts of
/// 31, 32 and negative ones) at every length around a vector.
#[test]
fn i32_kernels_match_the_interpreter() {
    let specials = [
        0,
        1,
        -1,
        2,
        -2,
        3,
        -3,
        7,
        -7,
        14,
        -14,
        31,
        32,
        33,
        -32,
        100,
        1 << 20,
        1_000_003,
        -1_000_003,
        i32::MAX,
        i32::MAX - 1,
        i32::MIN,
        i32::MIN + 1,
        i32::MIN + 7,
        // 49 times 33_049_542, which `x · fl(1/49)` falls just short of.
        1_619_427_558,
        -1_619_427_558,
    ];
    let (a, b): (Vec<i32>, Vec<i32>) = specials
        .iter()
        .flat_map(|&u| specials.iter().map(move |&v| (u, v)))
        .unzip();
    let n = a.len();
    let (a, b) = (i32s(a, &[n]), i32s(b, &[n]));
    type F = fn(&[Sym]) -> Sym;
    let pairs: [(&str, F); 15] = [
        ("the suite's int div", |x| {
            (&x[0] * 3 + &x[1]) / 7 + &x[0] % &x[1]
        }),
        ("x / y", |x| &x[0] / &x[1]),
        ("x % y", |x| &x[0] % &x[1]),
        ("x / y + x % y, y read once each", |x| {
            let y = &x[1] + 0;
            &x[0] / &y * 1000 + &x[0] % &y
        }),
        ("wrapping arithmetic", |x| {
            &x[0] * &x[1] + &x[0] - &x[1] * 3 - x[0].square()
        }),
        ("negation, abs, sign, not", |x| {
            x[0].neg() * 5 + x[1].abs() * 7 + x[0].sign() * 11 + x[1].logical_not()
        }),
        ("max, min, clamp", |x| {
            x[0].maximum(&x[1]) * 3 + x[0].minimum(&x[1]) * 5 + x[0].clamp(&x[1], 100)
        }),
        ("bitwise", |x| {
            (&x[0] & &x[1]) + (&x[0] | 0x0f0f) * 3 + (&x[0] ^ &x[1]) * 5 + (&x[1] & -8)
        }),
        ("shifts by vectors", |x| {
            x[0].shift_left(&x[1]) * 3
                + x[0].shift_right_logical(&x[1]) * 5
                + x[0].shift_right_arithmetic(&x[1]) * 7
        }),
        ("shifts by constants", |x| {
            x[0].shift_left(3)
                + x[1].shift_right_logical(31) * 3
                + x[0].shift_right_arithmetic(40) * 5
                + x[1].shift_left(-1) * 7
                + x[0].shift_right_arithmetic(5) * 9
        }),
        ("every comparison", |x| {
            let (u, v) = (&x[0], &x[1]);
            let pick = |m: Sym, k: i32| m.select(v * k, u * -k);
            pick(u.equal(v), 1)
                + pick(u.not_equal(v), 2)
                + pick(u.less(v), 4)
                + pick(u.less_equal(v), 8)
                + pick(u.greater(v), 16)
                + pick(u.greater_equal(v), 32)
                + pick(u.less(5), 64)
                + pick(u.greater_equal(-3), 128)
        }),
        ("divisions by constants", |x| {
            let x = &x[0];
            x / 7 + x % 7 * 3 + x / -7 * 5 + x % -3 * 7 + x / 1 * 9 + x / 2 * 11 + x % 1024 * 13
        }),
        ("divisions by constants the reciprocal misses", |x| {
            let x = &x[0];
            x / 49 + x % 49 * 3 + x / -49 * 5 + x % -49 * 7
        }),
        ("divisions by the constants 0, -1 and MIN", |x| {
            let x = &x[0];
            // (`x.rem(-1)`: clippy reads `x % -1` as Rust's remainder.)
            x / 0 + x % 0 * 3 + x / -1 * 5 + x.rem(-1) * 7 + x / i32::MIN * 9 + x % i32::MIN * 11
        }),
        ("with a scalar", |x| (&x[0] + &x[2]) / &x[2] + &x[1] % &x[2]),
    ];
    let scalar = i32s(vec![-3], &[]);
    for (name, f) in pairs {
        check_ints(name, f, &[a.clone(), b.clone(), scalar.clone()]);
    }
    // Every length around a vector (the masked tail).
    for len in [0usize, 1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 100, 4099] {
        let x: Vec<i32> = (0..len as i32).map(|i| i * 7919 - 50_000).collect();
        let y: Vec<i32> = (0..len as i32).map(|i| (i % 23) - 11).collect();
        let (x, y) = (i32s(x, &[len]), i32s(y, &[len]));
        check_ints(&format!("int div n={len}"), pairs[0].1, &[x, y]);
    }
    // Row broadcasts and values per row (the loop row by row).
    for (r, c) in [(3usize, 7usize), (5, 16), (2, 17), (300, 33)] {
        let m: Vec<i32> = (0..(r * c) as i32).map(|i| i * 31 - 1000).collect();
        let bias: Vec<i32> = (0..c as i32).map(|i| i - 5).collect();
        let per_row: Vec<i32> = (0..r as i32).map(|i| i + 2).collect();
        check_ints(
            &format!("rows {r}x{c}"),
            |x| (&x[0] + &x[1]) / &x[2] + &x[0] % &x[1],
            &[i32s(m, &[r, c]), i32s(bias, &[c]), i32s(per_row, &[r, 1])],
        );
    }
}
