//! Elementwise ops on tensors of equal shape.

use half::{bf16, f16};
use num_complex::{Complex32, Complex64};
use tensorlift_ir::{BinaryOp, CmpOp, DType, Error, Result, UnaryOp};

use super::scalar::{ComplexScalar, FloatScalar, IntScalar};
use crate::tensor::{Pod, Tensor};

/// Every integer dtype (not bool), as one pattern.
macro_rules! int_dtypes {
    () => {
        DType::I8
            | DType::I16
            | DType::I32
            | DType::I64
            | DType::U8
            | DType::U16
            | DType::U32
            | DType::U64
    };
}
pub(crate) use int_dtypes;

/// Expands `$body` with `$T` bound to the Rust integer type of `$d`, or
/// gives `$other` when `$d` is not an integer dtype.
macro_rules! with_int {
    ($d:expr, $T:ident => $body:expr, else => $other:expr) => {
        match $d {
            DType::I8 => {
                type $T = i8;
                $body
            }
            DType::I16 => {
                type $T = i16;
                $body
            }
            DType::I32 => {
                type $T = i32;
                $body
            }
            DType::I64 => {
                type $T = i64;
                $body
            }
            DType::U8 => {
                type $T = u8;
                $body
            }
            DType::U16 => {
                type $T = u16;
                $body
            }
            DType::U32 => {
                type $T = u32;
                $body
            }
            DType::U64 => {
                type $T = u64;
                $body
            }
            DType::Bool
            | DType::F16
            | DType::BF16
            | DType::F32
            | DType::F64
            | DType::C64
            | DType::C128
            | DType::String => $other,
        }
    };
}
pub(crate) use with_int;

pub(crate) fn map<S: Pod, D: Pod>(x: &Tensor, out: DType, f: impl Fn(S) -> D) -> Result<Tensor> {
    let v: Vec<D> = x.view::<S>()?.iter().map(|&e| f(e)).collect();
    Ok(Tensor::from_vec_as(out, x.shape(), v))
}

/// Applies `f` pairwise; a rank-0 operand is splat over the other.
pub(crate) fn zip_map<S: Pod, D: Pod>(
    a: &Tensor,
    b: &Tensor,
    out: DType,
    f: impl Fn(S, S) -> D,
) -> Result<Tensor> {
    let (av, bv) = (a.view::<S>()?, b.view::<S>()?);
    let (v, shape): (Vec<D>, &[usize]) = match (a.rank(), b.rank()) {
        (0, r) if r != 0 => (bv.iter().map(|&y| f(av[0], y)).collect(), b.shape()),
        (r, 0) if r != 0 => (av.iter().map(|&x| f(x, bv[0])).collect(), a.shape()),
        _ => (
            av.iter().zip(bv).map(|(&x, &y)| f(x, y)).collect(),
            a.shape(),
        ),
    };
    Ok(Tensor::from_vec_as(out, shape, v))
}

fn undefined(op: &str, d: DType) -> Error {
    Error::internal(format!(
        "{op} reached the interpreter on {d}, which the type checker rejects"
    ))
}

/// f16/bf16 → f32 (exact).
pub fn upcast_half(x: &Tensor) -> Result<Tensor> {
    match x.dtype() {
        DType::F16 => map::<u16, f32>(x, DType::F32, |b| f16::from_bits(b).to_f32()),
        DType::BF16 => map::<u16, f32>(x, DType::F32, |b| bf16::from_bits(b).to_f32()),
        DType::Bool
        | int_dtypes!()
        | DType::F32
        | DType::F64
        | DType::C64
        | DType::C128
        | DType::String => Ok(x.clone()),
    }
}

/// f32 → f16/bf16, rounding to nearest even.
pub fn downcast_half(x: &Tensor, to: DType) -> Result<Tensor> {
    match to {
        DType::F16 => map::<f32, u16>(x, to, |v| f16::from_f32(v).to_bits()),
        DType::BF16 => map::<f32, u16>(x, to, |v| bf16::from_f32(v).to_bits()),
        DType::Bool
        | int_dtypes!()
        | DType::F32
        | DType::F64
        | DType::C64
        | DType::C128
        | DType::String => Ok(x.clone()),
    }
}

fn check_same_shape(op: &str, a: &Tensor, b: &Tensor) -> Result<()> {
    if a.shape() == b.shape() || a.rank() == 0 || b.rank() == 0 {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "{op}: operand shapes {:?} and {:?} differ at run time (implicit broadcasting of dims unknown at trace time is not supported; give static shapes)",
            a.shape(),
            b.shape()
        )))
    }
}

/// Applies a unary op.
pub fn unary(op: UnaryOp, x: &Tensor) -> Result<Tensor> {
    let d = x.dtype();
    match d {
        DType::Bool if op == UnaryOp::Not => map::<u8, u8>(x, d, |v| v ^ 1),
        DType::F16 | DType::BF16 => {
            let r = unary(op, &upcast_half(x)?)?;
            if r.dtype() == DType::F32 {
                downcast_half(&r, d)
            } else {
                Ok(r)
            }
        }
        DType::F32 => float_unary::<f32>(op, x),
        DType::F64 => float_unary::<f64>(op, x),
        DType::C64 => complex_unary::<Complex32>(op, x),
        DType::C128 => complex_unary::<Complex64>(op, x),
        // Bool has only `not` and string no unary op (the type checker
        // rejects the rest): with_int!'s `else` gives the error.
        DType::Bool | DType::String | int_dtypes!() => {
            with_int!(d, T => map::<T, T>(x, d, |v| T::un(op, v)), else => Err(undefined(op.name(), d)))
        }
    }
}

fn float_unary<T: FloatScalar>(op: UnaryOp, x: &Tensor) -> Result<Tensor> {
    if op == UnaryOp::IsFinite {
        return map::<T, u8>(x, DType::Bool, |v| u8::from(v.is_finite_()));
    }
    map::<T, T>(x, x.dtype(), |v| T::un(op, v))
}

fn complex_unary<T: ComplexScalar>(op: UnaryOp, x: &Tensor) -> Result<Tensor> {
    if op == UnaryOp::Abs {
        return map::<T, T::Real>(x, x.dtype().real_part(), |v| v.abs());
    }
    map::<T, T>(x, x.dtype(), |v| T::un(op, v))
}

/// Applies a binary op to two tensors of the same dtype and shape.
pub fn binary(op: BinaryOp, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    check_same_shape(op.name(), a, b)?;
    let d = a.dtype();
    match d {
        DType::Bool => match op {
            BinaryOp::And => zip_map::<u8, u8>(a, b, d, |x, y| x & y),
            BinaryOp::Or => zip_map::<u8, u8>(a, b, d, |x, y| x | y),
            BinaryOp::Xor => zip_map::<u8, u8>(a, b, d, |x, y| x ^ y),
            // Only the logical ops are defined on bool (the type checker
            // rejects the rest).
            BinaryOp::Add
            | BinaryOp::Sub
            | BinaryOp::Mul
            | BinaryOp::Div
            | BinaryOp::Rem
            | BinaryOp::Pow
            | BinaryOp::Max
            | BinaryOp::Min
            | BinaryOp::ShiftLeft
            | BinaryOp::ShiftRightLogical
            | BinaryOp::ShiftRightArithmetic => Err(undefined(op.name(), d)),
        },
        DType::F16 | DType::BF16 => {
            downcast_half(&binary(op, &upcast_half(a)?, &upcast_half(b)?)?, d)
        }
        DType::F32 => zip_map::<f32, f32>(a, b, d, |x, y| f32::bin(op, x, y)),
        DType::F64 => zip_map::<f64, f64>(a, b, d, |x, y| f64::bin(op, x, y)),
        DType::C64 => zip_map::<Complex32, Complex32>(a, b, d, |x, y| Complex32::bin(op, x, y)),
        DType::C128 => zip_map::<Complex64, Complex64>(a, b, d, |x, y| Complex64::bin(op, x, y)),
        // String has no binary op (the type checker rejects it): with_int!'s
        // `else` gives the error.
        DType::String | int_dtypes!() => {
            with_int!(d, T => zip_map::<T, T>(a, b, d, |x, y| T::bin(op, x, y)), else => Err(undefined(op.name(), d)))
        }
    }
}

fn cmp<T: PartialOrd>(op: CmpOp, x: T, y: T) -> u8 {
    u8::from(match op {
        CmpOp::Eq => x == y,
        CmpOp::Ne => x != y,
        CmpOp::Lt => x < y,
        CmpOp::Le => x <= y,
        CmpOp::Gt => x > y,
        CmpOp::Ge => x >= y,
    })
}

/// Compares elementwise, giving bool. NaN compares unequal to everything.
pub fn compare(op: CmpOp, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    check_same_shape("compare", a, b)?;
    let d = a.dtype();
    // Complex numbers are unordered: only `eq` and `ne` are defined on them
    // (the type checker rejects the rest). True for `eq`.
    let complex_eq = || match op {
        CmpOp::Eq => Ok(true),
        CmpOp::Ne => Ok(false),
        CmpOp::Lt | CmpOp::Le | CmpOp::Gt | CmpOp::Ge => {
            Err(undefined(&format!("compare_{}", op.name()), d))
        }
    };
    match d {
        DType::Bool => zip_map::<u8, u8>(a, b, DType::Bool, |x, y| cmp(op, x, y)),
        DType::F16 | DType::BF16 => compare(op, &upcast_half(a)?, &upcast_half(b)?),
        DType::F32 => zip_map::<f32, u8>(a, b, DType::Bool, |x, y| cmp(op, x, y)),
        DType::F64 => zip_map::<f64, u8>(a, b, DType::Bool, |x, y| cmp(op, x, y)),
        DType::C64 => {
            let eq = complex_eq()?;
            zip_map::<Complex32, u8>(a, b, DType::Bool, |x, y| u8::from((x == y) == eq))
        }
        DType::C128 => {
            let eq = complex_eq()?;
            zip_map::<Complex64, u8>(a, b, DType::Bool, |x, y| u8::from((x == y) == eq))
        }
        // String has no comparison (the type checker rejects it): with_int!'s
        // `else` gives the error.
        DType::String | int_dtypes!() => {
            with_int!(d, T => zip_map::<T, u8>(a, b, DType::Bool, |x, y| cmp(op, x, y)), else => Err(undefined("compare", d)))
        }
    }
}

/// Calls `$body` with `$T` an unsigned type of the dtype's element size.
macro_rules! with_size {
    ($size:expr, $T:ident => $body:expr) => {
        match $size {
            1 => {
                type $T = u8;
                $body
            }
            2 => {
                type $T = u16;
                $body
            }
            4 => {
                type $T = u32;
                $body
            }
            8 => {
                type $T = u64;
                $body
            }
            _ => {
                type $T = u128;
                $body
            }
        }
    };
}
pub(crate) use with_size;

/// `select(pred, on_true, on_false)`; `pred` may be a scalar.
pub fn select(p: &Tensor, t: &Tensor, f: &Tensor) -> Result<Tensor> {
    check_same_shape("select", t, f)?;
    if p.rank() != 0 {
        check_same_shape("select", p, t)?;
    }
    let pv = p.bytes();
    with_size!(t.dtype().size(), T => {
        let (tv, fv) = (t.view::<T>()?, f.view::<T>()?);
        let out: Vec<T> = (0..tv.len())
            .map(|i| if pv[if pv.len() == 1 { 0 } else { i }] != 0 { tv[i] } else { fv[i] })
            .collect();
        Ok(Tensor::from_vec_as(t.dtype(), t.shape(), out))
    })
}

fn clamp_with<T: Pod>(
    x: &Tensor,
    lo: &Tensor,
    hi: &Tensor,
    f: impl Fn(T, T, T) -> T,
) -> Result<Tensor> {
    let (xv, lv, hv) = (x.view::<T>()?, lo.view::<T>()?, hi.view::<T>()?);
    let at = |v: &[T], i: usize| v[if v.len() == 1 && xv.len() != 1 { 0 } else { i }];
    let out: Vec<T> = (0..xv.len())
        .map(|i| f(xv[i], at(lv, i), at(hv, i)))
        .collect();
    Ok(Tensor::from_vec_as(x.dtype(), x.shape(), out))
}

/// `clamp(x, lo, hi) = min(max(x, lo), hi)`; `lo`, `hi` may be scalars.
pub fn clamp(x: &Tensor, lo: &Tensor, hi: &Tensor) -> Result<Tensor> {
    for b in [lo, hi] {
        if b.rank() != 0 {
            check_same_shape("clamp", x, b)?;
        }
    }
    let d = x.dtype();
    match d {
        DType::F16 | DType::BF16 => downcast_half(
            &clamp(&upcast_half(x)?, &upcast_half(lo)?, &upcast_half(hi)?)?,
            d,
        ),
        DType::F32 => clamp_with::<f32>(x, lo, hi, |v, l, h| {
            f32::bin(BinaryOp::Min, f32::bin(BinaryOp::Max, v, l), h)
        }),
        DType::F64 => clamp_with::<f64>(x, lo, hi, |v, l, h| {
            f64::bin(BinaryOp::Min, f64::bin(BinaryOp::Max, v, l), h)
        }),
        // Clamp needs an ordered dtype (the type checker rejects the rest):
        // with_int!'s `else` gives the error.
        DType::Bool | DType::C64 | DType::C128 | DType::String | int_dtypes!() => {
            with_int!(d, T => clamp_with::<T>(x, lo, hi, |v, l, h| v.max(l).min(h)), else => Err(undefined("clamp", d)))
        }
    }
}

/// Elements widened for conversion.
enum Wide {
    Int(Vec<i128>),
    Real(Vec<f64>),
    Complex(Vec<(f64, f64)>),
}

fn widen(x: &Tensor) -> Result<Wide> {
    let d = x.dtype();
    Ok(match d {
        DType::Bool => Wide::Int(x.bytes().iter().map(|b| i128::from(*b)).collect()),
        DType::F16 | DType::BF16 => widen(&upcast_half(x)?)?,
        DType::F32 => Wide::Real(x.view::<f32>()?.iter().map(|v| f64::from(*v)).collect()),
        DType::F64 => Wide::Real(x.view::<f64>()?.to_vec()),
        DType::C64 => Wide::Complex(x.view::<Complex32>()?.iter().map(|c| c.parts()).collect()),
        DType::C128 => Wide::Complex(x.view::<Complex64>()?.iter().map(|c| c.parts()).collect()),
        // A string converts to nothing (the type checker rejects it as an
        // operand): with_int!'s `else` gives the error.
        DType::String | int_dtypes!() => {
            with_int!(d, T => Wide::Int(x.view::<T>()?.iter().map(|v| v.to_i128()).collect()),
            else => return Err(undefined("convert", d)))
        }
    })
}

impl Wide {
    /// Each element `!= 0`.
    fn into_bools(self) -> Vec<u8> {
        match self {
            Wide::Int(v) => v.iter().map(|e| u8::from(*e != 0)).collect(),
            Wide::Real(v) => v.iter().map(|e| u8::from(*e != 0.0)).collect(),
            Wide::Complex(v) => v
                .iter()
                .map(|(r, i)| u8::from(*r != 0.0 || *i != 0.0))
                .collect(),
        }
    }

    /// Each element's real part; integers are rounded by `int`.
    fn into_reals(self, int: fn(i128) -> f64) -> Vec<f64> {
        match self {
            Wide::Int(v) => v.into_iter().map(int).collect(),
            Wide::Real(v) => v,
            Wide::Complex(v) => v.into_iter().map(|(r, _)| r).collect(),
        }
    }

    /// Each element as a complex number; integers are rounded by `int`.
    fn into_complexes(self, int: fn(i128) -> f64) -> Vec<(f64, f64)> {
        match self {
            Wide::Int(v) => v.into_iter().map(|e| (int(e), 0.0)).collect(),
            Wide::Real(v) => v.into_iter().map(|e| (e, 0.0)).collect(),
            Wide::Complex(v) => v,
        }
    }
}

/// Casts to `to`. Integers wrap (two's complement truncation); floats to
/// integers saturate, NaN → 0 (Rust `as`); anything → bool is `!= 0`;
/// complex → real drops the imaginary part; real → complex has imag 0;
/// conversions round to nearest even.
pub fn convert(x: &Tensor, to: DType) -> Result<Tensor> {
    let from = x.dtype();
    if from == to {
        return Ok(x.clone());
    }
    let shape = x.shape();
    let w = widen(x)?;
    Ok(match to {
        DType::Bool => Tensor::from_vec_as(to, shape, w.into_bools()),
        DType::F16 => Tensor::from_vec_as(
            to,
            shape,
            w.into_reals(int_via_f32)
                .iter()
                .map(|e| f16::from_f64(*e).to_bits())
                .collect(),
        ),
        DType::BF16 => Tensor::from_vec_as(
            to,
            shape,
            w.into_reals(int_via_f32)
                .iter()
                .map(|e| bf16::from_f64(*e).to_bits())
                .collect(),
        ),
        DType::F32 => Tensor::from_vec_as(
            to,
            shape,
            w.into_reals(int_via_f32)
                .iter()
                .map(|e| *e as f32)
                .collect(),
        ),
        DType::F64 => Tensor::from_vec_as(to, shape, w.into_reals(int_via_f64)),
        DType::C64 => Tensor::from_vec_as(
            to,
            shape,
            w.into_complexes(int_via_f32)
                .iter()
                .map(|(r, i)| Complex32::from_parts(*r, *i))
                .collect(),
        ),
        DType::C128 => Tensor::from_vec_as(
            to,
            shape,
            w.into_complexes(int_via_f64)
                .iter()
                .map(|(r, i)| Complex64::from_parts(*r, *i))
                .collect(),
        ),
        // Nothing converts to string (the type checker rejects it):
        // with_int!'s `else` gives the error.
        DType::String | int_dtypes!() => with_int!(to, T => {
            let v: Vec<T> = match w {
                Wide::Int(v) => v.into_iter().map(T::from_i128).collect(),
                Wide::Real(v) => v.into_iter().map(real_to_int::<T>).collect(),
                Wide::Complex(v) => v.into_iter().map(|(r, _)| real_to_int::<T>(r)).collect(),
            };
            Tensor::from_vec_as(to, shape, v)
        }, else => return Err(undefined("convert", to))),
    })
}

/// An integer rounded once to the nearest f32 (exact in an f64): what
/// integers become in f32 and in the types computed through it (f16/bf16
/// then round again from that f32, as documented; c64's parts are f32).
fn int_via_f32(e: i128) -> f64 {
    f64::from(e as f32)
}

/// An integer rounded once to the nearest f64 (f64, c128).
fn int_via_f64(e: i128) -> f64 {
    e as f64
}

/// Saturating float → integer conversion; NaN → 0.
fn real_to_int<T: IntScalar>(e: f64) -> T {
    if e.is_nan() {
        T::ZERO
    } else if e <= T::MIN.to_i128() as f64 {
        T::MIN
    } else if e >= T::MAX.to_i128() as f64 {
        T::MAX
    } else {
        T::from_i128(e as i128)
    }
}
