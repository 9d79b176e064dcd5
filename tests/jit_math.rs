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

fn samples(lo: f32, hi: f32) -> Vec<f32> {
    let mut v: Vec<f32> = (0..u32::MAX / 4099)
        .map(|i| f32::from_bits(i.wrapping_mul(4099)))
        .filter(|x| *x >= lo && *x <= hi)
        .collect();
    v.extend(
        (0..u32::MAX / 4099)
            .map(|i| -f32::from_bits(i.wrapping_mul(4099)))
            .filter(|x| *x >= lo && *x <= hi),
    );
    v.extend([
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        1e-45,
        -1e-45,
        88.72283,
        88.72284,
        -87.33654,
        -103.97208,
        -104.0,
        100.0,
        -200.0,
    ]);
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
    let xs = samples(lo, hi);
    let n = xs.len();
    let x = Tensor::from(ndarray::ArrayD::from_shape_vec(vec![n], xs.clone()).unwrap());
    let jf = function(move |x: Sym| f(x)).jit_compile(true);
    let y = common::to_vec::<f32>(&jf.call(&[x]).unwrap()[0]);
    let mut worst = (0u64, 0.0f32);
    for (x, y) in xs.iter().zip(&y) {
        let want = reference(f64::from(*x)) as f32;
        let e = ulps(*y, want);
        if e > worst.0 {
            worst = (e, *x);
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
