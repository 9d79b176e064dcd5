//! Accuracy of the JIT's approximated functions against correctly rounded
//! references (computed in f64), over a dense sample of every f32 exponent
//! range plus NaN, ±inf, ±0 and denormals.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use tensorlift::{Sym, Tensor, function};

/// Distance in units in the last place between two f32 (0 for equal, NaN
/// matching NaN).
fn ulps(a: f32, b: f32) -> u64 {
    if a.is_nan() || b.is_nan() {
        return if a.is_nan() && b.is_nan() {
            0
        } else {
            u64::MAX
        };
    }
    let key = |x: f32| {
        let i = x.to_bits() as i32;
        if i < 0 {
            i64::from(i32::MIN) - i64::from(i)
        } else {
            i64::from(i)
        }
    };
    (key(a) - key(b)).unsigned_abs()
}

/// Bit patterns visited: every 2053rd by default; every one (all 2^32 f32
/// values, minutes) with `TENSORLIFT_EXHAUSTIVE=1` (`scripts/test.sh --long`).
fn stride() -> u32 {
    if std::env::var("TENSORLIFT_EXHAUSTIVE").is_ok_and(|v| v == "1") {
        1
    } else {
        2053
    }
}

/// Chunk `c` of the sample: bit patterns `[c·2^24, (c+1)·2^24)` at the
/// stride, within `[lo, hi]`, plus the special values in chunk 0.
fn samples(chunk: u32, lo: f32, hi: f32) -> Vec<f32> {
    let step = stride();
    let start = chunk << 24;
    let first = start.div_ceil(step) * step;
    let mut v: Vec<f32> = (first..=start | 0x00ff_ffff)
        .step_by(step as usize)
        .map(f32::from_bits)
        .filter(|x| *x >= lo && *x <= hi)
        .collect();
    if chunk == 0 {
        v.extend(common::F32_SPECIALS);
    }
    v
}

fn check(
    name: &str,
    f: impl Fn(Sym) -> Sym + Send + Sync + 'static,
    reference: impl Fn(f64) -> f64,
    lo: f32,
    hi: f32,
    bound: u64,
) {
    let jf = function(move |x: Sym| f(x))
        .jit_compile(true)
        .jit_options(common::ieee());
    let mut worst = (0u64, 0.0f32);
    let mut n = 0;
    for chunk in 0..256 {
        let xs = samples(chunk, lo, hi);
        if xs.is_empty() {
            continue;
        }
        n += xs.len();
        let len = xs.len();
        let x = Tensor::from(ndarray::ArrayD::from_shape_vec(vec![len], xs.clone()).unwrap());
        let y = common::to_vec::<f32>(&jf.call(&[x]).unwrap()[0]);
        for (x, y) in xs.iter().zip(&y) {
            let want = reference(f64::from(*x)) as f32;
            let e = ulps(*y, want);
            if e > worst.0 {
                worst = (e, *x);
            }
        }
    }
    assert!(
        worst.0 <= bound,
        "{name}: {} ulp at x = {:e} (bound {bound})",
        worst.0,
        worst.1
    );
    println!("{name}: max {} ulp over {n} samples", worst.0);
}

#[test]
fn exp_f32_within_2_ulp() {
    check("exp", |x| x.exp(), f64::exp, -110.0, 90.0, 2);
}

#[test]
fn sigmoid_f32_within_4_ulp() {
    check(
        "sigmoid",
        |x| x.sigmoid(),
        |x| 1.0 / (1.0 + (-x).exp()),
        -110.0,
        110.0,
        4,
    );
}

#[test]
fn tanh_f32_within_4_ulp() {
    check("tanh", |x| x.tanh(), f64::tanh, f32::MIN, f32::MAX, 4);
}

#[test]
fn log_f32_within_4_ulp() {
    check("log", |x| x.log(), f64::ln, -10.0, f32::MAX, 4);
}

/// f64 `pow` against glibc's: bases over the whole range (every ~2^47th
/// bit pattern; 2^43rd with `TENSORLIFT_EXHAUSTIVE=1`) × exponents for the
/// special cases and large results, a dense grid, and the pairs where the
/// logarithm's error is amplified most (`|y·ln x|` near 700 with x near
/// √2, 1 ± 2^-k and huge or tiny bases).
#[test]
fn pow_f64_within_4_ulp() {
    let (mut px, mut py) = common::pow_f64_pairs(stride() == 1);
    // Results near overflow and underflow through every kind of base.
    let bases = [
        std::f64::consts::SQRT_2 - 1e-9,
        0.7072,
        1.0 + 2f64.powi(-20),
        1.0 - 2f64.powi(-30),
        3.0,
        1e-300,
        1e300,
        5e-324,
    ];
    for x in bases {
        let l = x.ln();
        for t in [
            -745.0, -744.4, -708.0, -300.0, -1.5, 1.5, 300.0, 700.0, 709.7,
        ] {
            for d in 0..20 {
                px.push(x);
                py.push(t / l * (1.0 + f64::from(d) * 1e-4));
            }
        }
    }
    let n = px.len();
    let tx = Tensor::from(ndarray::ArrayD::from_shape_vec(vec![n], px.clone()).unwrap());
    let ty = Tensor::from(ndarray::ArrayD::from_shape_vec(vec![n], py.clone()).unwrap());
    let jf = function(|x: Sym, y: Sym| x.pow(&y))
        .jit_compile(true)
        .jit_options(common::ieee());
    let out = common::to_vec::<f64>(&jf.call(&[tx, ty]).unwrap()[0]);
    let mut worst = (0u64, 0.0f64, 0.0f64);
    for ((x, y), got) in px.iter().zip(&py).zip(&out) {
        // IEEE's pow(x, ±0) = 1 for every x; glibc gives NaN for a
        // signaling NaN x.
        let want = if *y == 0.0 { 1.0 } else { x.powf(*y) };
        let e = ulps64(*got, want);
        if e > worst.0 {
            worst = (e, *x, *y);
        }
    }
    assert!(
        worst.0 <= 4,
        "f64 pow: {} ulp at x = {:e}, y = {:e}",
        worst.0,
        worst.1,
        worst.2
    );
    println!("f64 pow: max {} ulp over {n} pairs", worst.0);
    // One element at a time: the scalar code, with the vector code's bits.
    for i in (0..n).step_by(n / 97) {
        let one = |v: f64| Tensor::from(ndarray::ArrayD::from_shape_vec(vec![1], vec![v]).unwrap());
        let got = common::to_vec::<f64>(&jf.call(&[one(px[i]), one(py[i])]).unwrap()[0])[0];
        assert!(
            got.to_bits() == out[i].to_bits() || (got.is_nan() && out[i].is_nan()),
            "scalar pow({:e}, {:e}) = {got:e}, vector {:e}",
            px[i],
            py[i],
            out[i]
        );
    }
}

/// Distance in units in the last place between two f64.
fn ulps64(a: f64, b: f64) -> u64 {
    if a.is_nan() || b.is_nan() {
        return if a.is_nan() && b.is_nan() {
            0
        } else {
            u64::MAX
        };
    }
    let key = |x: f64| {
        let i = x.to_bits() as i64;
        if i < 0 {
            i128::from(i64::MIN) - i128::from(i)
        } else {
            i128::from(i)
        }
    };
    u64::try_from((key(a) - key(b)).unsigned_abs()).unwrap_or(u64::MAX)
}

/// f64 inputs: every 2^40th-ish bit pattern (2^38th with
/// `TENSORLIFT_EXHAUSTIVE=1`) within `[lo, hi]` of both signs plus the
/// special values, against glibc (or `libm`) in f64.
fn check64(
    name: &str,
    f: impl Fn(Sym) -> Sym + Send + Sync + 'static,
    reference: impl Fn(f64) -> f64,
    lo: f64,
    hi: f64,
    bound: u64,
) {
    let step: u64 = if stride() == 1 {
        (1 << 38) + 12_345
    } else {
        (1 << 40) + 12_345
    };
    let mut xs: Vec<f64> = (0..u64::MAX / step)
        .map(|i| f64::from_bits(i.wrapping_mul(step)))
        .filter(|x| (*x >= lo && *x <= hi) || !x.is_finite())
        .collect();
    xs.extend([
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.0,
        -0.0,
        5e-324,
        -5e-324,
        1.0,
        -1.0,
        0.625,
        709.78,
        709.79,
        -745.13,
        -745.14,
        -708.4,
        1e-300,
        f64::MAX,
        f64::MIN,
    ]);
    // The doubles nearest to multiples of π/2 (the hardest reductions).
    xs.extend((1..2000).map(|k| f64::from(k) * std::f64::consts::FRAC_PI_2));
    xs.extend((0..200).map(|k| f64::from(1 << 16) * f64::from(k) * std::f64::consts::PI));
    xs.retain(|x| x.is_nan() || (*x >= lo && *x <= hi) || x.is_infinite());
    let n = xs.len();
    let x = Tensor::from(ndarray::ArrayD::from_shape_vec(vec![n], xs.clone()).unwrap());
    let jf = function(move |x: Sym| f(x))
        .jit_compile(true)
        .jit_options(common::ieee());
    let y = common::to_vec::<f64>(&jf.call(&[x]).unwrap()[0]);
    let mut worst = (0u64, 0.0f64);
    for (x, y) in xs.iter().zip(&y) {
        let e = ulps64(*y, reference(*x));
        if e > worst.0 {
            worst = (e, *x);
        }
    }
    assert!(
        worst.0 <= bound,
        "{name} f64: {} ulp at x = {:e} (bound {bound})",
        worst.0,
        worst.1
    );
    println!("{name} f64: max {} ulp over {n} samples", worst.0);
}

#[test]
fn exp_f64_within_2_ulp_of_libm() {
    check64("exp", |x| x.exp(), f64::exp, -800.0, 800.0, 2);
}

#[test]
fn log_f64_within_2_ulp_of_libm() {
    check64("log", |x| x.log(), f64::ln, f64::MIN, f64::MAX, 2);
}

#[test]
fn tanh_f64_within_2_ulp_of_libm() {
    check64("tanh", |x| x.tanh(), f64::tanh, f64::MIN, f64::MAX, 2);
}

#[test]
fn sigmoid_f64_within_2_ulp_of_libm() {
    check64(
        "sigmoid",
        |x| x.sigmoid(),
        // e^x/(1 + e^x) below 0: 1/(1 + e^-x) would overflow there.
        |x| {
            if x < 0.0 {
                x.exp() / (1.0 + x.exp())
            } else {
                1.0 / (1.0 + (-x).exp())
            }
        },
        -800.0,
        800.0,
        2,
    );
}

#[test]
fn sin_f64_within_2_ulp_of_libm() {
    check64("sin", |x| x.sin(), f64::sin, f64::MIN, f64::MAX, 2);
}

#[test]
fn cos_f64_within_2_ulp_of_libm() {
    check64("cos", |x| x.cos(), f64::cos, f64::MIN, f64::MAX, 2);
}

#[test]
fn erf_f64_within_4_ulp_of_libm() {
    check64("erf", |x| x.erf(), libm::erf, f64::MIN, f64::MAX, 4);
}

#[test]
fn expm1_f64_within_4_ulp_of_libm() {
    check64("expm1", |x| x.expm1(), f64::exp_m1, f64::MIN, f64::MAX, 4);
}

#[test]
fn log1p_f64_within_2_ulp_of_libm() {
    check64("log1p", |x| x.log1p(), f64::ln_1p, -2.0, f64::MAX, 2);
}

#[test]
fn expm1_f32_within_4_ulp() {
    check("expm1", |x| x.expm1(), f64::exp_m1, f32::MIN, f32::MAX, 4);
}
#[test]
fn log1p_f32_within_4_ulp() {
    check("log1p", |x| x.log1p(), f64::ln_1p, -2.0, f32::MAX, 4);
}

#[test]
fn sin_f32_within_4_ulp() {
    check("sin", |x| x.sin(), f64::sin, f32::MIN, f32::MAX, 4);
}

#[test]
fn cos_f32_within_4_ulp() {
    check("cos", |x| x.cos(), f64::cos, f32::MIN, f32::MAX, 4);
}

#[test]
fn erf_f32_within_4_ulp() {
    check("erf", |x| x.erf(), libm::erf, f32::MIN, f32::MAX, 4);
}

/// `pow` on pairs: x over every f32 exponent range (sparser than the unary
/// checks) against a list of exponents that exercise the special cases
/// (0, ±1, odd and even integers, halves, ±inf, NaN, huge), plus a dense
/// grid of moderate bases and exponents.
#[test]
fn pow_f32_within_4_ulp() {
    // ~34k bases (~550k with TENSORLIFT_EXHAUSTIVE=1) × 19 exponents.
    let step = if stride() == 1 { 7829 } else { 2053 * 61 };
    let mut xs: Vec<f32> = (0..=u32::MAX / step)
        .map(|i| f32::from_bits(i * step))
        .collect();
    xs.extend([
        0.0,
        -0.0,
        1.0,
        -1.0,
        2.0,
        -2.0,
        0.5,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ]);
    let ys = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        2.0,
        3.0,
        -3.0,
        0.5,
        -0.5,
        2.5,
        -7.25,
        1e-3,
        16_777_215.0,
        16_777_216.0,
        1e10,
        -1e10,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    let mut px = Vec::new();
    let mut py = Vec::new();
    for x in &xs {
        for y in &ys {
            px.push(*x);
            py.push(*y);
        }
    }
    for i in 0..1000u32 {
        for j in 0..200u32 {
            px.push(i as f32 * 0.0173 + 1e-3);
            py.push(j as f32 * 0.41 - 41.0);
        }
    }
    let n = px.len();
    let tx = Tensor::from(ndarray::ArrayD::from_shape_vec(vec![n], px.clone()).unwrap());
    let ty = Tensor::from(ndarray::ArrayD::from_shape_vec(vec![n], py.clone()).unwrap());
    let jf = function(|x: Sym, y: Sym| x.pow(&y))
        .jit_compile(true)
        .jit_options(common::ieee());
    let out = common::to_vec::<f32>(&jf.call(&[tx, ty]).unwrap()[0]);
    let mut worst = (0u64, 0.0f32, 0.0f32);
    for ((x, y), got) in px.iter().zip(&py).zip(&out) {
        let want = f64::from(*x).powf(f64::from(*y)) as f32;
        let e = ulps(*got, want);
        if e > worst.0 {
            worst = (e, *x, *y);
        }
    }
    assert!(
        worst.0 <= 4,
        "pow: {} ulp at x = {:e}, y = {:e}",
        worst.0,
        worst.1,
        worst.2
    );
    println!("pow: max {} ulp over {n} pairs", worst.0);
}

/// i32 division and remainder run on vectors (through f64, see
/// `int_divrem_i32x4`) and give exactly the interpreter's integers: the
/// extremes (`MIN / -1`, `x / 0`, `x % 0`, divisors ±1 and `MIN`, `MAX`),
/// every sign combination and 200,000 pseudo-random pairs with divisors of
/// every magnitude, in a length that leaves a scalar tail after the
/// vector loop.
#[test]
fn i32_division_and_remainder_are_exact_on_vectors() {
    let mut xs = vec![
        i32::MIN,
        i32::MIN,
        i32::MIN,
        i32::MAX,
        i32::MAX,
        -7,
        7,
        -7,
        7,
        0,
        5,
        -5,
    ];
    let mut ys = vec![-1, 1, i32::MIN, -1, i32::MAX, 2, -2, -2, 2, 0, 0, 0];
    let mut s = 0x9E37_79B9u32;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        s
    };
    for _ in 0..200_000 {
        let x = next() as i32;
        let r = next();
        xs.push(x);
        // Divisors from ±1 up to the full range.
        ys.push((r as i32) >> (r % 32));
    }
    xs.push(12345);
    ys.push(-123);
    let n = xs.len();
    assert_ne!(n % 4, 0, "a scalar tail is part of the test");
    let x = Tensor::from(ndarray::Array1::from(xs.clone()).into_dyn());
    let y = Tensor::from(ndarray::Array1::from(ys.clone()).into_dyn());
    let f = |a: Sym, b: Sym| (&a / &b, &a % &b);
    let want = function(f).call(&[x.clone(), y.clone()]).unwrap();
    let got = function(f).jit_compile(true).call(&[x, y]).unwrap();
    for (k, what) in ["quotient", "remainder"].iter().enumerate() {
        let (w, g) = (
            common::to_vec::<i32>(&want[k]),
            common::to_vec::<i32>(&got[k]),
        );
        for t in 0..n {
            assert_eq!(g[t], w[t], "{what} of {} and {}", xs[t], ys[t]);
        }
    }
    let (q, r) = (
        common::to_vec::<i32>(&got[0]),
        common::to_vec::<i32>(&got[1]),
    );
    assert_eq!((q[0], r[0]), (i32::MIN, 0), "MIN / -1 wraps");
    assert_eq!((q[9], r[9]), (-1, 0), "0 / 0");
    assert_eq!((q[10], r[10]), (-1, 5), "5 / 0");
    assert_eq!((q[5], r[5]), (-3, -1), "-7 / 2 truncates");
}

/// i32 division and remainder by constants take a multiply by the f64
/// reciprocal with a correction (`int_divrem_i32x4_by`): exact against
/// the interpreter for divisors of every size and sign, for exact
/// multiples (where the product can fall just short), the extremes and
/// random numerators, in a length with a scalar tail.
#[test]
fn i32_division_by_constants_is_exact_on_vectors() {
    let mut s = 0x2545_F491u32;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        s as i32
    };
    for d in [
        2,
        3,
        -3,
        5,
        7,
        10,
        11,
        -11,
        // x·fl(1/49) falls just short of k for about half the multiples
        // k·49 (9799951 = 199999·49 truncates to 199998 uncorrected).
        49,
        -49,
        1000,
        65536,
        46341,
        1_000_000_007,
        i32::MAX,
        -i32::MAX,
        1,
        0,
        -1,
        i32::MIN,
    ] {
        let mut xs = vec![i32::MIN, i32::MIN + 1, i32::MAX, -1, 0, 1];
        // Exact multiples of d, near the ends of the range too.
        for k in [1i64, 2, 3, 7, 1000, -1, -2, -1000] {
            for base in [
                0i64,
                i64::from(i32::MAX / d.max(1)),
                i64::from(i32::MIN / d.max(1)),
            ] {
                let v = (base + k) * i64::from(d);
                if let Ok(v) = i32::try_from(v) {
                    xs.push(v);
                }
            }
        }
        for _ in 0..20_000 {
            xs.push(next());
        }
        // Consecutive multiples of d, where an uncorrected quotient is
        // one short for some divisors.
        xs.extend((1..2000).map(|k| k * d.clamp(-1_000_000, 1_000_000)));
        if xs.len() % 4 == 0 {
            xs.push(12345);
        }
        let n = xs.len();
        let x = Tensor::from(ndarray::Array1::from(xs.clone()).into_dyn());
        let f = move |a: Sym| {
            let c = a
                .graph()
                .constant(&Tensor::from(ndarray::arr0(d).into_dyn()));
            let c = c.broadcast_to(&[n]);
            (&a / &c, &a % &c)
        };
        let want = function(f).call(std::slice::from_ref(&x)).unwrap();
        let got = function(f)
            .jit_compile(true)
            .call(std::slice::from_ref(&x))
            .unwrap();
        for (k, what) in ["quotient", "remainder"].iter().enumerate() {
            let (w, g) = (
                common::to_vec::<i32>(&want[k]),
                common::to_vec::<i32>(&got[k]),
            );
            for t in 0..n {
                assert_eq!(g[t], w[t], "{what} of {} by {d}", xs[t]);
            }
        }
    }
}
