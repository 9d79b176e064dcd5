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

/// The default JIT options with denormals kept, as IEEE 754 computes
/// them: what tests of compiled arithmetic against IEEE references (the
/// interpreter, NumPy, libm) compile with. By default compiled code
/// flushes denormals to zero, as XLA's does (`JitOptions::flush_denormals`).
pub fn ieee() -> tensorlift::JitOptions {
    tensorlift::JitOptions {
        flush_denormals: false,
        ..tensorlift::JitOptions::default()
    }
}

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

/// `(x, y)` pairs for f64 `pow`: bases over the whole range (every ~2^47th
/// bit pattern, 2^43rd when `exhaustive`) and the special ones × exponents
/// for the special cases and huge results, then a dense grid of moderate
/// bases and exponents.
pub fn pow_f64_pairs(exhaustive: bool) -> (Vec<f64>, Vec<f64>) {
    let step: u64 = if exhaustive {
        (1 << 43) + 777
    } else {
        (1 << 47) + 777
    };
    let mut xs: Vec<f64> = (0..u64::MAX / step)
        .map(|i| f64::from_bits(i.wrapping_mul(step)))
        .collect();
    xs.extend([
        0.0,
        -0.0,
        1.0,
        -1.0,
        2.0,
        -2.0,
        0.5,
        10.0,
        5e-324,
        f64::MAX,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        std::f64::consts::SQRT_2,
        0.7072,
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
        9_007_199_254_740_991.0,
        9_007_199_254_740_992.0,
        9_007_199_254_740_993.0,
        709.0,
        -745.0,
        1e300,
        -1e300,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ];
    let (mut px, mut py) = (Vec::new(), Vec::new());
    for x in &xs {
        for y in &ys {
            px.push(*x);
            py.push(*y);
        }
    }
    for i in 0..500u32 {
        for j in 0..200u32 {
            px.push(f64::from(i) * 0.0173 + 1e-3);
            py.push(f64::from(j) * 0.41 - 41.0);
        }
    }
    (px, py)
}

/// Defines Python functions from `src` (after `import numpy as np`) and
/// returns the one named `name`.
#[cfg(feature = "python")]
pub fn pyfn(src: &str, name: &str) -> pyo3::Py<pyo3::PyAny> {
    use pyo3::types::PyDictMethods;
    pyo3::Python::attach(|py| {
        let globals = pyo3::types::PyDict::new(py);
        let code = std::ffi::CString::new(format!("import numpy as np\n{src}")).unwrap();
        py.run(&code, Some(&globals), None).unwrap();
        globals.get_item(name).unwrap().unwrap().unbind()
    })
}

/// `x` (f32) summed over `axes` in f32, one value after another in
/// row-major order of the reduced elements: the order compiled column and
/// middle-axis sums keep outside exact mode (the interpreter accumulates
/// f32 sums in f64). Kept axes keep their order; `keepdims` leaves the
/// reduced ones as 1.
pub fn sum_in_order_f32(x: &Tensor, axes: &[usize], keepdims: bool) -> Tensor {
    let dims = x.shape().to_vec();
    let kept: Vec<usize> = (0..dims.len()).filter(|d| !axes.contains(d)).collect();
    let perm: Vec<usize> = kept.iter().chain(axes).copied().collect();
    let moved = tensorlift::function(move |x: tensorlift::Sym| x.transpose(&perm))
        .call(std::slice::from_ref(x))
        .unwrap()
        .remove(0);
    let v = to_vec::<f32>(&moved);
    let inner: usize = axes.iter().map(|&d| dims[d]).product();
    let sums: Vec<f32> = if inner == 0 {
        vec![0.0; kept.iter().map(|&d| dims[d]).product()]
    } else {
        v.chunks(inner)
            .map(|row| row.iter().fold(0.0f32, |a, &b| a + b))
            .collect()
    };
    let out: Vec<usize> = if keepdims {
        (0..dims.len())
            .map(|d| if axes.contains(&d) { 1 } else { dims[d] })
            .collect()
    } else {
        kept.iter().map(|&d| dims[d]).collect()
    };
    f32s(&sums, &out)
}
