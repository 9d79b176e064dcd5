//! Per-element semantics of every elementwise op, one impl per dtype family.
//! These functions are the definition the JIT must reproduce.

use num_complex::Complex;
use tensorlift_ir::{BinaryOp, UnaryOp};

/// Integer semantics: wrapping arithmetic; `x / 0 = -1` (all bits set),
/// `x % 0 = x`, `MIN / -1 = MIN`, `MIN % -1 = 0` (XLA's definitions).
pub trait IntScalar: bytemuck::Pod + Ord + Send + Sync {
    fn un(op: UnaryOp, x: Self) -> Self;
    fn bin(op: BinaryOp, a: Self, b: Self) -> Self;
    fn to_i128(self) -> i128;
    fn from_i128(v: i128) -> Self;
    fn from_usize(v: usize) -> Self;
    const ZERO: Self;
    const ONE: Self;
    const MIN: Self;
    const MAX: Self;
}

macro_rules! int_scalar {
    ($($t:ty: $signed:literal, $u:ty, $s:ty),*) => {$(
        impl IntScalar for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            const MIN: Self = <$t>::MIN;
            const MAX: Self = <$t>::MAX;
            #[allow(unused_comparisons, clippy::cast_possible_wrap, reason = "one macro body for signed and unsigned types")]
            fn un(op: UnaryOp, x: Self) -> Self {
                match op {
                    UnaryOp::Neg => x.wrapping_neg(),
                    UnaryOp::Abs => if x < 0 { x.wrapping_neg() } else { x },
                    UnaryOp::Sign => if x > 0 { 1 } else if x == 0 { 0 } else { (0 as $t).wrapping_sub(1) },
                    UnaryOp::Not => !x,
                    UnaryOp::Square => x.wrapping_mul(x),
                    // Not defined on integers (the type checker rejects
                    // them); 0 rather than a panic.
                    UnaryOp::Floor
                    | UnaryOp::Ceil
                    | UnaryOp::Round
                    | UnaryOp::Sqrt
                    | UnaryOp::Rsqrt
                    | UnaryOp::Exp
                    | UnaryOp::Expm1
                    | UnaryOp::Log
                    | UnaryOp::Log1p
                    | UnaryOp::Tanh
                    | UnaryOp::Logistic
                    | UnaryOp::Sin
                    | UnaryOp::Cos
                    | UnaryOp::Erf
                    | UnaryOp::IsFinite
                    | UnaryOp::Reciprocal => 0,
                }
            }
            #[allow(unused_comparisons, reason = "one macro body for signed and unsigned types")]
            fn bin(op: BinaryOp, a: Self, b: Self) -> Self {
                match op {
                    BinaryOp::Add => a.wrapping_add(b),
                    BinaryOp::Sub => a.wrapping_sub(b),
                    BinaryOp::Mul => a.wrapping_mul(b),
                    BinaryOp::Div => if b == 0 { !0 } else { a.wrapping_div(b) },
                    BinaryOp::Rem => if b == 0 { a } else { a.wrapping_rem(b) },
                    BinaryOp::Pow => {
                        if b < 0 {
                            // Only 1 and -1 have integer reciprocals.
                            if a == 1 { 1 } else if $signed && a == (0 as $t).wrapping_sub(1) {
                                if b & 1 == 1 { a } else { 1 }
                            } else { 0 }
                        } else {
                            let (mut base, mut e, mut acc) = (a, b as u64, 1 as $t);
                            while e > 0 {
                                if e & 1 == 1 { acc = acc.wrapping_mul(base); }
                                base = base.wrapping_mul(base);
                                e >>= 1;
                            }
                            acc
                        }
                    }
                    BinaryOp::Max => a.max(b),
                    BinaryOp::Min => a.min(b),
                    BinaryOp::And => a & b,
                    BinaryOp::Or => a | b,
                    BinaryOp::Xor => a ^ b,
                    // XLA: the amount is read as unsigned; one of `BITS` or
                    // more shifts every bit out (arithmetic: fills with the
                    // sign bit). Logical shifts see the bits as unsigned,
                    // arithmetic ones as signed, whatever the dtype.
                    BinaryOp::ShiftLeft => match shift_amount(b as u64, <$t>::BITS) {
                        Some(s) => a << s,
                        None => 0,
                    },
                    BinaryOp::ShiftRightLogical => match shift_amount(b as u64, <$t>::BITS) {
                        Some(s) => ((a as $u) >> s) as $t,
                        None => 0,
                    },
                    BinaryOp::ShiftRightArithmetic => {
                        let s = shift_amount(b as u64, <$t>::BITS).unwrap_or(<$t>::BITS - 1);
                        ((a as $s) >> s) as $t
                    }
                }
            }
            fn to_i128(self) -> i128 { self as i128 }
            fn from_i128(v: i128) -> Self { v as $t }
            fn from_usize(v: usize) -> Self { v as $t }
        }
    )*};
}

int_scalar!(
    i8: true, u8, i8,
    i16: true, u16, i16,
    i32: true, u32, i32,
    i64: true, u64, i64,
    u8: false, u8, i8,
    u16: false, u16, i16,
    u32: false, u32, i32,
    u64: false, u64, i64
);

/// A shift amount (the operand's bits read as unsigned, sign-extended to
/// 64 bits first: a negative amount is huge) when it is below `bits`.
fn shift_amount(b: u64, bits: u32) -> Option<u32> {
    (b < u64::from(bits)).then_some(b as u32)
}

/// Real float semantics (IEEE 754; NaN-propagating max/min with
/// `max(-0, +0) = +0`; `sign(±0) = ±0`; round half to even).
pub trait FloatScalar: bytemuck::Pod + PartialOrd + Send + Sync {
    fn un(op: UnaryOp, x: Self) -> Self;
    fn bin(op: BinaryOp, a: Self, b: Self) -> Self;
    fn is_finite_(self) -> bool;
    fn from_f64(v: f64) -> Self;
    const NEG_INF: Self;
    const INF: Self;
    const ZERO: Self;
    const ONE: Self;
}

/// The NaN policy, the JIT's too: an op that computes a float returns a
/// NaN operand quieted — the quiet bit set, sign and payload kept (IEEE 754
/// §6.2); `min` and `max` (so `clamp` and max/min reductions) give the
/// canonical quiet NaN, as the JIT's vector forms do; `neg`, `abs` and
/// `sign` keep every bit, a signalling NaN signalling, as data movement
/// does.
macro_rules! float_scalar {
    ($($t:ident: $erf:path, $quiet:expr),*) => {$(
        impl FloatScalar for $t {
            const NEG_INF: Self = $t::NEG_INFINITY;
            const INF: Self = $t::INFINITY;
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            fn un(op: UnaryOp, x: Self) -> Self {
                let r = Self::un_raw(op, x);
                if keeps_nan_bits(op) || !r.is_nan() {
                    r
                } else {
                    $t::from_bits(r.to_bits() | $quiet)
                }
            }
            fn bin(op: BinaryOp, a: Self, b: Self) -> Self {
                let r = Self::bin_raw(op, a, b);
                if r.is_nan() { $t::from_bits(r.to_bits() | $quiet) } else { r }
            }
            fn is_finite_(self) -> bool { self.is_finite() }
            fn from_f64(v: f64) -> Self { v as $t }
        }
        impl RawFloat for $t {
            fn un_raw(op: UnaryOp, x: Self) -> Self {
                match op {
                    UnaryOp::Neg => -x,
                    UnaryOp::Abs => x.abs(),
                    UnaryOp::Sign => if x.is_nan() || x == 0.0 { x } else { x.signum() },
                    UnaryOp::Floor => x.floor(),
                    UnaryOp::Ceil => x.ceil(),
                    UnaryOp::Round => x.round_ties_even(),
                    UnaryOp::Sqrt => x.sqrt(),
                    UnaryOp::Rsqrt => 1.0 / x.sqrt(),
                    UnaryOp::Exp => x.exp(),
                    UnaryOp::Expm1 => x.exp_m1(),
                    UnaryOp::Log => x.ln(),
                    UnaryOp::Log1p => x.ln_1p(),
                    UnaryOp::Tanh => x.tanh(),
                    // exp(-|x|) never overflows: x/(1+x) form for x < 0.
                    UnaryOp::Logistic => { let t = (-x.abs()).exp(); (if x >= 0.0 { 1.0 } else { t }) / (1.0 + t) }
                    UnaryOp::Sin => x.sin(),
                    UnaryOp::Cos => x.cos(),
                    UnaryOp::Erf => $erf(x),
                    UnaryOp::Square => x * x,
                    UnaryOp::Reciprocal => 1.0 / x,
                    UnaryOp::Not | UnaryOp::IsFinite => $t::NAN,
                }
            }
            fn bin_raw(op: BinaryOp, a: Self, b: Self) -> Self {
                match op {
                    BinaryOp::Add => a + b,
                    BinaryOp::Sub => a - b,
                    BinaryOp::Mul => a * b,
                    BinaryOp::Div => a / b,
                    BinaryOp::Rem => a % b,
                    // IEEE 754's pow: x^±0 and 1^y are 1 for every x and y,
                    // signalling NaNs included (glibc gives NaN for those;
                    // the JIT's inline pow and this one agree).
                    BinaryOp::Pow => if b == 0.0 || a == 1.0 { 1.0 } else { a.powf(b) },
                    BinaryOp::Max => {
                        if a.is_nan() || b.is_nan() { $t::NAN } else if a > b { a } else if b > a { b }
                        else if a.is_sign_positive() { a } else { b }
                    }
                    BinaryOp::Min => {
                        if a.is_nan() || b.is_nan() { $t::NAN } else if a < b { a } else if b < a { b }
                        else if a.is_sign_negative() { a } else { b }
                    }
                    BinaryOp::And
                    | BinaryOp::Or
                    | BinaryOp::Xor
                    | BinaryOp::ShiftLeft
                    | BinaryOp::ShiftRightLogical
                    | BinaryOp::ShiftRightArithmetic => $t::NAN,
                }
            }
        }
    )*};
}

/// Whether `op` gives a NaN operand back with every bit kept (data
/// movement) rather than quieted; see the NaN policy above.
fn keeps_nan_bits(op: UnaryOp) -> bool {
    match op {
        UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Sign => true,
        UnaryOp::Floor
        | UnaryOp::Ceil
        | UnaryOp::Round
        | UnaryOp::Sqrt
        | UnaryOp::Rsqrt
        | UnaryOp::Exp
        | UnaryOp::Expm1
        | UnaryOp::Log
        | UnaryOp::Log1p
        | UnaryOp::Tanh
        | UnaryOp::Logistic
        | UnaryOp::Sin
        | UnaryOp::Cos
        | UnaryOp::Erf
        | UnaryOp::Not
        | UnaryOp::IsFinite
        | UnaryOp::Square
        | UnaryOp::Reciprocal => false,
    }
}

/// The float ops before the NaN policy is applied.
trait RawFloat: Sized {
    fn un_raw(op: UnaryOp, x: Self) -> Self;
    fn bin_raw(op: BinaryOp, a: Self, b: Self) -> Self;
}

float_scalar!(f32: libm::erff, 1u32 << 22, f64: libm::erf, 1u64 << 51);

/// Complex semantics (num-complex's formulas).
pub trait ComplexScalar: bytemuck::Pod + PartialEq + Send + Sync {
    type Real: FloatScalar;
    fn un(op: UnaryOp, x: Self) -> Self;
    fn bin(op: BinaryOp, a: Self, b: Self) -> Self;
    fn abs(self) -> Self::Real;
    fn from_parts(re: f64, im: f64) -> Self;
    fn parts(self) -> (f64, f64);
}

macro_rules! complex_scalar {
    ($($t:ident),*) => {$(
        impl ComplexScalar for Complex<$t> {
            type Real = $t;
            fn un(op: UnaryOp, x: Self) -> Self {
                let one = Complex::new(1.0, 0.0);
                match op {
                    UnaryOp::Neg => -x,
                    UnaryOp::Sign => { let n = x.norm(); if n == 0.0 || n.is_nan() { x } else { x / n } }
                    UnaryOp::Sqrt => x.sqrt(),
                    UnaryOp::Rsqrt => one / x.sqrt(),
                    UnaryOp::Exp => x.exp(),
                    UnaryOp::Expm1 => x.exp() - one,
                    UnaryOp::Log => x.ln(),
                    UnaryOp::Log1p => (x + one).ln(),
                    UnaryOp::Tanh => x.tanh(),
                    UnaryOp::Logistic => one / (one + (-x).exp()),
                    UnaryOp::Sin => x.sin(),
                    UnaryOp::Cos => x.cos(),
                    UnaryOp::Square => x * x,
                    UnaryOp::Reciprocal => one / x,
                    // `abs` gives a real (the kernel computes it with
                    // `ComplexScalar::abs`); the rest are not defined on
                    // complex numbers (the type checker rejects them).
                    UnaryOp::Abs
                    | UnaryOp::Floor
                    | UnaryOp::Ceil
                    | UnaryOp::Round
                    | UnaryOp::Erf
                    | UnaryOp::Not
                    | UnaryOp::IsFinite => Complex::new($t::NAN, $t::NAN),
                }
            }
            fn bin(op: BinaryOp, a: Self, b: Self) -> Self {
                match op {
                    BinaryOp::Add => a + b,
                    BinaryOp::Sub => a - b,
                    BinaryOp::Mul => a * b,
                    BinaryOp::Div => a / b,
                    BinaryOp::Pow => a.powc(b),
                    // Not defined on complex numbers (the type checker
                    // rejects them).
                    BinaryOp::Rem
                    | BinaryOp::Max
                    | BinaryOp::Min
                    | BinaryOp::And
                    | BinaryOp::Or
                    | BinaryOp::Xor
                    | BinaryOp::ShiftLeft
                    | BinaryOp::ShiftRightLogical
                    | BinaryOp::ShiftRightArithmetic => Complex::new($t::NAN, $t::NAN),
                }
            }
            fn abs(self) -> $t { self.norm() }
            fn from_parts(re: f64, im: f64) -> Self { Complex::new(re as $t, im as $t) }
            fn parts(self) -> (f64, f64) { (self.re as f64, self.im as f64) }
        }
    )*};
}

complex_scalar!(f32, f64);
