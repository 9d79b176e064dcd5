//! Whether compiled results agree with the interpreter's, as `tensorlift
//! bench` checks them.
//!
//! The JIT's default mode differs from the interpreter only where
//! docs/compiler.md ("Numerics and tolerances") says: approximated
//! transcendental functions (a few ulp) and reordered float reductions.
//! So integer, bool and string results must be identical, and a float
//! result may differ by at most `rtol × max |interpreter|` over that output
//! (relative to the output's scale, as reordered sums are); NaN must match
//! NaN and infinities must be equal. With `--exact` every result must be
//! bit-identical (any NaN matches any NaN).

use half::{bf16, f16};
use num_complex::{Complex32, Complex64};
use tensorlift_ir::{DType, Error, Result};
use tensorlift_runtime::Tensor;

/// How the compiled results compare with the interpreter's.
#[derive(Debug)]
pub(super) enum Agreement {
    /// Every result is bit-identical (NaNs of any payload match).
    BitIdentical,
    /// Within the tolerance; the largest difference relative to its
    /// output's scale, and the tolerance it is held to.
    Within {
        /// Largest `|jit - interp| / max |interp|` over the outputs.
        worst: f64,
        /// The tolerance of that output's dtype.
        rtol: f64,
    },
}

/// Compares the outputs `names` of the interpreter (`interp`) and the JIT
/// (`jit`): bit-exact when `exact`, else within each float dtype's
/// tolerance.
///
/// # Errors
/// `Internal` naming the first output and element that disagree, both
/// values, the tolerance, and where the tolerances are documented.
pub(super) fn compare(
    names: &[&str],
    interp: &[Tensor],
    jit: &[Tensor],
    exact: bool,
) -> Result<Agreement> {
    if interp.len() != jit.len() || interp.len() != names.len() {
        return Err(Error::internal(format!(
            "the interpreter gave {} result(s) and the JIT {}, for {} output(s)",
            interp.len(),
            jit.len(),
            names.len()
        )));
    }
    let mut all_identical = true;
    let mut worst = (0.0f64, 0.0f64);
    for ((name, a), b) in names.iter().zip(interp).zip(jit) {
        if a.dtype() != b.dtype() || a.shape() != b.shape() {
            return Err(disagree(format!(
                "output '{name}' is {}{:?} from the interpreter but {}{:?} from the JIT",
                a.dtype().short_name(),
                a.shape(),
                b.dtype().short_name(),
                b.shape()
            )));
        }
        let Some(rtol) = float_rtol(a.dtype()) else {
            if !a.bit_eq(b) {
                return Err(disagree(format!(
                    "output '{name}' ({}) differs{}",
                    a.dtype().short_name(),
                    first_diff(a, b)
                )));
            }
            continue;
        };
        let (x, y) = (floats(a)?, floats(b)?);
        let scale = x
            .iter()
            .filter(|v| v.is_finite())
            .fold(0.0f64, |m, v| m.max(v.abs()));
        let tol = if exact { 0.0 } else { rtol * scale };
        for (i, (p, q)) in x.iter().zip(&y).enumerate() {
            let same_bits = (p == q && p.is_sign_negative() == q.is_sign_negative())
                || (p.is_nan() && q.is_nan());
            all_identical &= same_bits;
            if same_bits {
                continue;
            }
            let diff = (p - q).abs();
            let ok = !exact && p.is_finite() && q.is_finite() && diff <= tol;
            if !ok {
                let bound = if exact {
                    "they must be bit-identical with --exact".to_string()
                } else {
                    format!(
                        "more than the tolerance {rtol:e} × max |interpreter| = {tol:.3e} for {}",
                        a.dtype().short_name()
                    )
                };
                return Err(disagree(format!(
                    "output '{name}'{}: the interpreter gives {p}, the JIT {q} (|difference| {diff:.3e}, {bound})",
                    index_text(a, i)
                )));
            }
            let rel = if scale > 0.0 { diff / scale } else { 0.0 };
            if rel > worst.0 {
                worst = (rel, rtol);
            }
        }
    }
    Ok(if all_identical {
        Agreement::BitIdentical
    } else {
        Agreement::Within {
            worst: worst.0,
            rtol: worst.1,
        }
    })
}

fn disagree(what: String) -> Error {
    Error::internal(format!(
        "the interpreter and the JIT disagree: {what}. docs/compiler.md (\"Numerics and tolerances\") lists where compiled code may differ (approximated functions; reordered float sums, by up to n·ε·Σ|x| on ill-conditioned data); --exact compiles code that must be bit-identical"
    ))
}

/// The tolerance of a float dtype, relative to an output's largest
/// magnitude (None: the dtype must match exactly). f32: the relative 1e-5
/// the reductions are tested at; f16/bf16 compute in f32 and round after
/// every op, so a few of their (much larger) ulps.
fn float_rtol(d: DType) -> Option<f64> {
    match d {
        DType::F32 | DType::C64 => Some(1e-5),
        DType::F64 | DType::C128 => Some(1e-12),
        DType::F16 => Some(1e-2),
        DType::BF16 => Some(4e-2),
        DType::Bool
        | DType::I8
        | DType::I16
        | DType::I32
        | DType::I64
        | DType::U8
        | DType::U16
        | DType::U32
        | DType::U64
        | DType::String => None,
    }
}

/// A float tensor's elements as f64 (complex: real and imaginary parts in
/// turn).
fn floats(t: &Tensor) -> Result<Vec<f64>> {
    Ok(match t.dtype() {
        DType::F16 => t.view::<f16>()?.iter().map(|v| f64::from(*v)).collect(),
        DType::BF16 => t.view::<bf16>()?.iter().map(|v| f64::from(*v)).collect(),
        DType::F32 => t.view::<f32>()?.iter().map(|v| f64::from(*v)).collect(),
        DType::F64 => t.view::<f64>()?.to_vec(),
        DType::C64 => (t.view::<Complex32>()?.iter())
            .flat_map(|c| [f64::from(c.re), f64::from(c.im)])
            .collect(),
        DType::C128 => (t.view::<Complex64>()?.iter())
            .flat_map(|c| [c.re, c.im])
            .collect(),
        other @ (DType::Bool
        | DType::I8
        | DType::I16
        | DType::I32
        | DType::I64
        | DType::U8
        | DType::U16
        | DType::U32
        | DType::U64
        | DType::String) => {
            return Err(Error::internal(format!("{other} is not a float dtype")));
        }
    })
}

/// ` at [i, j, ...]` for the flat element `flat` of `t` (complex: the
/// element whose real or imaginary part it is).
fn index_text(t: &Tensor, flat: usize) -> String {
    let mut rest = if matches!(t.dtype(), DType::C64 | DType::C128) {
        flat / 2
    } else {
        flat
    };
    let mut index = vec![0usize; t.shape().len()];
    for (slot, dim) in index.iter_mut().zip(t.shape()).rev() {
        *slot = rest % (*dim).max(1);
        rest /= (*dim).max(1);
    }
    format!(" at {index:?}")
}

/// ` at [..]` for the first element of two same-typed tensors whose bytes
/// differ (strings: the first differing string).
fn first_diff(a: &Tensor, b: &Tensor) -> String {
    if a.dtype() == DType::String {
        return match a
            .strings()
            .iter()
            .zip(b.strings())
            .position(|(x, y)| x != y)
        {
            Some(i) => index_text(a, i),
            None => String::new(),
        };
    }
    let size = a.dtype().size().max(1);
    match a.bytes().iter().zip(b.bytes()).position(|(x, y)| x != y) {
        Some(byte) => index_text(a, byte / size),
        None => String::new(),
    }
}
