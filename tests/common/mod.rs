//! Helpers shared by the integration tests.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers"
)]

use tensorlift::ir::Scalar;
use tensorlift::{DType, Tensor};

fn close(a: f64, b: f64, rtol: f64, atol: f64) -> bool {
    if a.is_nan() || b.is_nan() {
        return a.is_nan() && b.is_nan();
    }
    if rtol == 0.0 && atol == 0.0 {
        return a.to_bits() == b.to_bits();
    }
    if a.is_infinite() || b.is_infinite() {
        return a == b;
    }
    (a - b).abs() <= atol + rtol * b.abs()
}

/// Checks dtype, shape and every element: bitwise (any NaN matches any NaN)
/// when both tolerances are 0, else `|a - b| <= atol + rtol * |b|`.
pub fn assert_close(actual: &Tensor, expected: &Tensor, rtol: f64, atol: f64, ctx: &str) {
    assert_eq!(actual.dtype(), expected.dtype(), "{ctx}: dtype");
    assert_eq!(actual.shape(), expected.shape(), "{ctx}: shape");
    if actual.dtype() == DType::String {
        assert_eq!(actual.strings(), expected.strings(), "{ctx}");
        return;
    }
    let (la, le) = (actual.to_literal(), expected.to_literal());
    for i in 0..la.len() {
        let ok = match (la.element(i), le.element(i)) {
            (Scalar::Float(a, _), Scalar::Float(b, _)) => close(a, b, rtol, atol),
            (Scalar::Complex(a, ai), Scalar::Complex(b, bi)) => {
                // Complex tolerance is relative to the magnitude.
                let m = b.hypot(bi);
                let at = atol + rtol * m;
                if rtol == 0.0 && atol == 0.0 {
                    close(a, b, 0.0, 0.0) && close(ai, bi, 0.0, 0.0)
                } else {
                    close(a, b, 0.0, at) && close(ai, bi, 0.0, at)
                }
            }
            (a, b) => a == b,
        };
        if !ok {
            let (mut sa, mut se) = (String::new(), String::new());
            la.format_element(i, &mut sa);
            le.format_element(i, &mut se);
            panic!(
                "{ctx}: element {i}: got {sa}, expected {se} (rtol {rtol}, atol {atol})\n actual:   {actual:?}\n expected: {expected:?}"
            );
        }
    }
}

pub fn f32s(v: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from(ndarray::ArrayD::from_shape_vec(shape.to_vec(), v.to_vec()).unwrap())
}

pub fn to_vec<T: tensorlift::HostElement>(t: &Tensor) -> Vec<T> {
    t.to_ndarray::<T>().unwrap().iter().cloned().collect()
}

pub mod random_graph;

/// True when two results agree bitwise (any NaN matches any NaN).
pub fn same_bits(a: &Tensor, b: &Tensor) -> bool {
    if a.dtype() != b.dtype() || a.shape() != b.shape() {
        return false;
    }
    if a.dtype() == DType::String {
        return a.strings() == b.strings();
    }
    let (la, lb) = (a.to_literal(), b.to_literal());
    (0..la.len()).all(|i| match (la.element(i), lb.element(i)) {
        (Scalar::Float(x, _), Scalar::Float(y, _)) => {
            (x.is_nan() && y.is_nan()) || x.to_bits() == y.to_bits()
        }
        (Scalar::Complex(x, xi), Scalar::Complex(y, yi)) => {
            ((x.is_nan() && y.is_nan()) || x.to_bits() == y.to_bits())
                && ((xi.is_nan() && yi.is_nan()) || xi.to_bits() == yi.to_bits())
        }
        (x, y) => x == y,
    })
}

/// f32 values every approximation test visits besides its sample: NaNs
/// (quiet, negative, signalling), ±inf, ±0, the smallest denormals, exp's
/// overflow and underflow edges and clamps, tanh's polynomial cut, erf's
/// clamp, -1 (log1p's pole).
pub const F32_SPECIALS: [f32; 22] = [
    f32::NAN,
    -f32::NAN,
    f32::from_bits(0x7f80_0001),
    f32::INFINITY,
    f32::NEG_INFINITY,
    0.0,
    -0.0,
    1e-45,
    -1e-45,
    88.72283,
    88.72284,
    88.73,
    -87.33654,
    -103.97208,
    -104.0,
    100.0,
    -200.0,
    0.625,
    -0.625,
    4.0,
    -4.0,
    -1.0,
];
