//! Constant data held by `constant` nodes.
//!
//! A literal is a dense array with a static shape. Numeric elements are stored
//! as little-endian bytes of their dtype (bool as one byte 0/1); strings as a
//! list of byte strings. Equality and hashing are bitwise, so CSE merges
//! constants only when they are bit-identical (`0.0` and `-0.0` stay apart).

use std::fmt::Write as _;
use std::sync::Arc;

use half::{bf16, f16};

use crate::{DType, Error, Result, TensorType};

/// The payload of a literal.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LiteralData {
    /// Little-endian element bytes.
    Bytes(Arc<[u8]>),
    /// One byte string per element.
    Strings(Arc<[Vec<u8>]>),
}

/// A dense constant.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Literal {
    /// Element type.
    pub dtype: DType,
    /// Static shape.
    pub dims: Vec<usize>,
    /// The elements in row-major order.
    pub data: LiteralData,
}

/// One element, as the text format reads and writes it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    /// `true` / `false`.
    Bool(bool),
    /// An integer literal (also used for unsigned values up to `i128` range).
    Int(i128),
    /// A real number (`nan`, `inf` included). `bits` keeps an exact bit
    /// pattern when the text gave one (`nan(0x7fc00001)`).
    Float(f64, Option<u64>),
    /// A complex number `(re, im)`.
    Complex(f64, f64),
}

impl Literal {
    /// A literal from raw element bytes; checks the length.
    pub fn from_bytes(dtype: DType, dims: &[usize], bytes: Vec<u8>) -> Result<Self> {
        let n: usize = dims.iter().product();
        if dtype == DType::String {
            return Err(Error::invalid(
                "a string literal needs string elements, not bytes",
            ));
        }
        if bytes.len() != n * dtype.size() {
            return Err(Error::invalid(format!(
                "literal of type {dtype}{dims:?} needs {} bytes, got {}",
                n * dtype.size(),
                bytes.len()
            )));
        }
        Ok(Literal {
            dtype,
            dims: dims.to_vec(),
            data: LiteralData::Bytes(bytes.into()),
        })
    }

    /// A string literal.
    pub fn from_strings(dims: &[usize], strings: Vec<Vec<u8>>) -> Result<Self> {
        let n: usize = dims.iter().product();
        if strings.len() != n {
            return Err(Error::invalid(format!(
                "string literal of shape {dims:?} needs {n} elements, got {}",
                strings.len()
            )));
        }
        Ok(Literal {
            dtype: DType::String,
            dims: dims.to_vec(),
            data: LiteralData::Strings(strings.into()),
        })
    }

    /// A literal from text-format scalars, converted to `dtype`.
    pub fn from_scalars(dtype: DType, dims: &[usize], values: &[Scalar]) -> Result<Self> {
        let n: usize = dims.iter().product();
        if values.len() != n {
            return Err(Error::invalid(format!(
                "literal of shape {dims:?} needs {n} elements, got {}",
                values.len()
            )));
        }
        let mut bytes = Vec::with_capacity(n * dtype.size());
        for v in values {
            encode_scalar(dtype, *v, &mut bytes)?;
        }
        Self::from_bytes(dtype, dims, bytes)
    }

    /// A scalar literal of `dtype` holding `value` (converted as by a cast).
    pub fn scalar(dtype: DType, value: f64) -> Result<Self> {
        let s = if dtype == DType::Bool {
            Scalar::Bool(value != 0.0)
        } else if dtype.is_int() {
            if !value.is_finite() || value.fract() != 0.0 {
                return Err(Error::invalid(format!(
                    "{value} is not a valid {dtype} value"
                )));
            }
            Scalar::Int(value as i128)
        } else {
            Scalar::Float(value, None)
        };
        Self::from_scalars(dtype, &[], &[s])
    }

    /// A scalar literal of `dtype` holding the integer `value` exactly
    /// where `dtype` is an integer type (an error when out of its range),
    /// converted as by a cast otherwise ([`Literal::scalar`] goes through
    /// an f64, exact only up to 2^53).
    pub fn scalar_int(dtype: DType, value: i128) -> Result<Self> {
        let s = if dtype == DType::Bool {
            Scalar::Bool(value != 0)
        } else if dtype.is_int() {
            Scalar::Int(value)
        } else {
            Scalar::Float(value as f64, None)
        };
        Self::from_scalars(dtype, &[], &[s])
    }

    /// The type of this literal.
    pub fn ty(&self) -> TensorType {
        TensorType::known(self.dtype, &self.dims)
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.dims.iter().product()
    }

    /// True when the literal has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The raw bytes (empty for strings).
    pub fn bytes(&self) -> &[u8] {
        match &self.data {
            LiteralData::Bytes(b) => b,
            LiteralData::Strings(_) => &[],
        }
    }

    /// Element `i` as a text-format scalar (not for strings).
    pub fn element(&self, i: usize) -> Scalar {
        let b = self.bytes();
        let sz = self.dtype.size();
        let e = &b[i * sz..(i + 1) * sz];
        let mut a8 = [0u8; 8];
        a8[..sz.min(8)].copy_from_slice(&e[..sz.min(8)]);
        let u = u64::from_le_bytes(a8);
        match self.dtype {
            DType::Bool => Scalar::Bool(e[0] != 0),
            DType::I8 => Scalar::Int(i128::from(e[0] as i8)),
            DType::I16 => Scalar::Int(i128::from(u as u16 as i16)),
            DType::I32 => Scalar::Int(i128::from(u as u32 as i32)),
            DType::I64 => Scalar::Int(i128::from(u as i64)),
            DType::U8 | DType::U16 | DType::U32 | DType::U64 => Scalar::Int(i128::from(u)),
            DType::F16 => float_scalar(f64::from(f16::from_bits(u as u16).to_f32()), u, 0x7e00),
            DType::BF16 => float_scalar(f64::from(bf16::from_bits(u as u16).to_f32()), u, 0x7fc0),
            DType::F32 => float_scalar(f64::from(f32::from_bits(u as u32)), u, 0x7fc0_0000),
            DType::F64 => float_scalar(f64::from_bits(u), u, 0x7ff8_0000_0000_0000),
            DType::C64 => {
                let mut im = [0u8; 4];
                im.copy_from_slice(&e[4..8]);
                Scalar::Complex(widen(u as u32), widen(u32::from_le_bytes(im)))
            }
            DType::C128 => {
                let mut im = [0u8; 8];
                im.copy_from_slice(&e[8..16]);
                Scalar::Complex(f64::from_bits(u), f64::from_le_bytes(im))
            }
            DType::String => Scalar::Int(0),
        }
    }

    /// True when every element equals `value` (numeric literals only).
    pub fn is_splat_of(&self, value: f64) -> bool {
        if self.dtype == DType::String || self.dtype.is_complex() {
            return false;
        }
        (0..self.len()).all(|i| match self.element(i) {
            Scalar::Bool(b) => f64::from(u8::from(b)) == value,
            Scalar::Int(v) => v as f64 == value && value.fract() == 0.0,
            // Bitwise: `-0.0` is not a splat of `0.0`.
            Scalar::Float(v, _) => v.to_bits() == value.to_bits(),
            Scalar::Complex(..) => false,
        })
    }

    /// Formats element `i` as the text format writes it.
    pub fn format_element(&self, i: usize, out: &mut String) {
        if let LiteralData::Strings(s) = &self.data {
            write_quoted(&s[i], out);
            return;
        }
        match self.element(i) {
            Scalar::Bool(b) => out.push_str(if b { "true" } else { "false" }),
            Scalar::Int(v) => {
                let _ = write!(out, "{v}");
            }
            Scalar::Float(v, bits) => format_float(self.dtype, v, bits, out),
            Scalar::Complex(re, im) => {
                let part = self.dtype.real_part();
                out.push('(');
                format_float(part, re, part_nan_bits(part, re), out);
                out.push_str(", ");
                format_float(part, im, part_nan_bits(part, im), out);
                out.push(')');
            }
        }
    }
}

/// An f32 as an f64 of the same value; a NaN keeps its sign, its
/// signalling bit and its payload (shifted into the f64's mantissa), which
/// a hardware conversion would quiet.
fn widen(bits: u32) -> f64 {
    let f = f32::from_bits(bits);
    if !f.is_nan() {
        return f64::from(f);
    }
    let sign = u64::from(bits >> 31) << 63;
    let mantissa = u64::from(bits & 0x007f_ffff) << 29;
    f64::from_bits(sign | 0x7ff0_0000_0000_0000 | mantissa)
}

/// An f64 taken from a complex64 [`Scalar`] back as the f32 it holds: the
/// inverse of how [`Literal::element`] widens complex64 parts, so a NaN
/// keeps its signalling bit and payload (an f64 NaN whose low 29 mantissa
/// bits are zero narrows to the f32 NaN it came from; other values convert
/// as `as f32` does).
pub fn narrow(f: f64) -> f32 {
    let bits = f.to_bits();
    if !f.is_nan() || bits & 0x1fff_ffff != 0 {
        return f as f32;
    }
    let sign = ((bits >> 63) as u32) << 31;
    let mantissa = ((bits >> 29) & 0x007f_ffff) as u32;
    f32::from_bits(sign | 0x7f80_0000 | mantissa)
}

/// The bits to print for a NaN part of a complex literal of `part` (f32 or
/// f64), when it is not the canonical quiet NaN.
fn part_nan_bits(part: DType, v: f64) -> Option<u64> {
    if !v.is_nan() {
        return None;
    }
    let (bits, canonical) = if part == DType::F32 {
        (u64::from(narrow(v).to_bits()), 0x7fc0_0000)
    } else {
        (v.to_bits(), 0x7ff8_0000_0000_0000)
    };
    (bits != canonical).then_some(bits)
}

/// A NaN parsed as `nan(0xBITS)` inside a complex literal: bits that fit
/// 32 bits are an f32 NaN (widened exactly), others an f64's; `None` for
/// bits that are not a NaN of that width.
pub(crate) fn nan_from_bits(bits: u64) -> Option<f64> {
    let v = match u32::try_from(bits) {
        Ok(b) => widen(b),
        Err(_) => f64::from_bits(bits),
    };
    v.is_nan().then_some(v)
}

/// Whether `bits` is the whole bit pattern of a NaN of the float type `d`
/// (nothing above its width).
fn is_nan_bits(d: DType, bits: u64) -> bool {
    match d {
        DType::F16 => u16::try_from(bits).is_ok_and(|b| f16::from_bits(b).is_nan()),
        DType::BF16 => u16::try_from(bits).is_ok_and(|b| bf16::from_bits(b).is_nan()),
        DType::F32 => u32::try_from(bits).is_ok_and(|b| f32::from_bits(b).is_nan()),
        DType::F64 => f64::from_bits(bits).is_nan(),
        DType::Bool
        | DType::I8
        | DType::I16
        | DType::I32
        | DType::I64
        | DType::U8
        | DType::U16
        | DType::U32
        | DType::U64
        | DType::C64
        | DType::C128
        | DType::String => false,
    }
}

fn float_scalar(v: f64, raw: u64, canonical_nan: u64) -> Scalar {
    if v.is_nan() && raw != canonical_nan {
        Scalar::Float(v, Some(raw))
    } else {
        Scalar::Float(v, None)
    }
}

fn format_float(dtype: DType, v: f64, bits: Option<u64>, out: &mut String) {
    if let Some(bits) = bits {
        let _ = write!(out, "nan(0x{bits:x})");
    } else if v.is_nan() {
        out.push_str("nan");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "inf" } else { "-inf" });
    } else if dtype == DType::F64 {
        // `{:?}` is the shortest representation that parses back exactly.
        let _ = write!(out, "{v:?}");
    } else {
        // f16/bf16/f32 values are exact in f32; the shortest f32
        // representation parses back to the same value.
        let _ = write!(out, "{:?}", v as f32);
    }
}

/// Writes `s` as a double-quoted string with `\"`, `\\`, `\n`, `\t` and
/// `\xHH` escapes for every other non-printable byte.
pub fn write_quoted(s: &[u8], out: &mut String) {
    out.push('"');
    for &b in s {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\t' => out.push_str("\\t"),
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    out.push('"');
}

fn encode_scalar(dtype: DType, v: Scalar, out: &mut Vec<u8>) -> Result<()> {
    let bad = || Error::invalid(format!("{v:?} is not a valid {dtype} literal"));
    match (dtype, v) {
        (DType::Bool, Scalar::Bool(b)) => out.push(u8::from(b)),
        (DType::Bool, Scalar::Int(i)) if i == 0 || i == 1 => out.push(i as u8),
        (d, Scalar::Int(i)) if d.is_int() => {
            let (lo, hi): (i128, i128) = match d {
                DType::I8 => (i8::MIN.into(), i8::MAX.into()),
                DType::I16 => (i16::MIN.into(), i16::MAX.into()),
                DType::I32 => (i32::MIN.into(), i32::MAX.into()),
                DType::I64 => (i64::MIN.into(), i64::MAX.into()),
                DType::U8 => (0, u8::MAX.into()),
                DType::U16 => (0, u16::MAX.into()),
                DType::U32 => (0, u32::MAX.into()),
                DType::U64 => (0, u64::MAX.into()),
                DType::Bool
                | DType::F16
                | DType::BF16
                | DType::F32
                | DType::F64
                | DType::C64
                | DType::C128
                | DType::String => return Err(bad()),
            };
            if i < lo || i > hi {
                return Err(Error::invalid(format!("{i} is out of range for {d}")));
            }
            out.extend_from_slice(&(i as u128).to_le_bytes()[..d.size()]);
        }
        (d, Scalar::Int(i)) if d.is_inexact() => {
            encode_scalar(d, Scalar::Float(i as f64, None), out)?
        }
        (d, Scalar::Float(_, Some(b))) if d.is_float() && !is_nan_bits(d, b) => {
            return Err(Error::invalid(format!(
                "nan(0x{b:x}) is not the bit pattern of a {d} NaN"
            )));
        }
        (d, Scalar::Float(f, bits)) if d.is_float() => match (d, bits) {
            (DType::F16, Some(b)) => out.extend_from_slice(&(b as u16).to_le_bytes()),
            (DType::BF16, Some(b)) => out.extend_from_slice(&(b as u16).to_le_bytes()),
            (DType::F32, Some(b)) => out.extend_from_slice(&(b as u32).to_le_bytes()),
            (DType::F64, Some(b)) => out.extend_from_slice(&b.to_le_bytes()),
            (DType::F16, None) => out.extend_from_slice(&f16::from_f64(f).to_le_bytes()),
            (DType::BF16, None) => out.extend_from_slice(&bf16::from_f64(f).to_le_bytes()),
            (DType::F32, None) => out.extend_from_slice(&(f as f32).to_le_bytes()),
            _ => out.extend_from_slice(&f.to_le_bytes()),
        },
        (d, Scalar::Float(f, _)) if d.is_complex() => {
            encode_scalar(d, Scalar::Complex(f, 0.0), out)?
        }
        (DType::C64, Scalar::Complex(re, im)) => {
            out.extend_from_slice(&narrow(re).to_le_bytes());
            out.extend_from_slice(&narrow(im).to_le_bytes());
        }
        (DType::C128, Scalar::Complex(re, im)) => {
            out.extend_from_slice(&re.to_le_bytes());
            out.extend_from_slice(&im.to_le_bytes());
        }
        _ => return Err(bad()),
    }
    Ok(())
}
