//! f32 transcendental functions over whole chunks, compiled by rustc for the
//! host's widest vectors (AVX-512: 16 lanes, AVX2: 8), called from kernels
//! through `tl_wide_f32`.
//!
//! Cranelift's x64 backend has 128-bit vectors only, so the inline
//! approximations of `codegen/math.rs` evaluate 4 f32 lanes per instruction.
//! A kernel whose row has such a function (and is long enough) evaluates it
//! in chunks instead: a 128-bit loop stores the function's argument for up to
//! [`CHUNK`] elements into a stack buffer, one call here maps the buffer in
//! place, and the rest of the kernel reads the results back (codegen's
//! `wide_chunks`). The functions below repeat the inline approximations
//! operation for operation (same constants, same fused multiply-adds, same
//! order), so both paths give the same bits: `tests/jit_wide.rs` checks it.
//! Rows of functions without a routine here keep the 128-bit code.

use tensorlift_ir::UnaryOp;

use tensorlift_runtime::kernels::scalar::FloatScalar;

use crate::codegen::math::{
    COS_F32_P, ERF_F32_P, ERF_F32_Q, EXP_F32_P, LOG_F32_P, SIN_F32_P, SINCOS_F32_LIMIT,
    SINCOS_F32_PI_2, TANH_F32_P,
};

/// Elements per chunk: a buffer is 2 KiB, a few of them stay in L1, and the
/// call per chunk costs ~1% of evaluating it.
pub(crate) const CHUNK: usize = 512;

/// At most this many nodes of a kernel are evaluated wide (the first ones;
/// later ones keep the inline code): their buffers take 32 KiB of the
/// stack of whichever thread runs the kernel.
pub(crate) const MAX_NODES: usize = 16;

/// The functions with a wide routine (f32 only, and only where the inline
/// approximation is used, i.e. not in `exact` mode).
pub(crate) fn has_routine(u: UnaryOp) -> bool {
    matches!(
        u,
        UnaryOp::Exp
            | UnaryOp::Expm1
            | UnaryOp::Log
            | UnaryOp::Log1p
            | UnaryOp::Tanh
            | UnaryOp::Logistic
            | UnaryOp::Erf
            | UnaryOp::Sin
            | UnaryOp::Cos
            | UnaryOp::Sqrt
            | UnaryOp::Rsqrt
            | UnaryOp::Reciprocal
    )
}

/// The vector width (f32 lanes) the routines run at on this host, or `None`
/// where they would be no faster than the inline 4-lane code (no AVX2 and
/// FMA: the routines use fused multiply-adds exactly where the inline code
/// does, which it only does with FMA).
pub(crate) fn lanes() -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    {
        if !std::is_x86_feature_detected!("fma") {
            return None;
        }
        if std::is_x86_feature_detected!("avx512f") {
            return Some(16);
        }
        if std::is_x86_feature_detected!("avx2") {
            return Some(8);
        }
    }
    None
}

/// Maps `n` f32 at `p` in place through the function with `UnaryOp` code
/// `op` (one of [`has_routine`]'s; anything else leaves the buffer as it
/// is). Called by compiled kernels on their stack buffers.
///
/// # Safety
/// `p` points to `n` writable, initialized f32 (`n ≥ 0`), and the host has
/// what [`lanes`] requires (the caller only emits the call when it returned
/// `Some`).
pub(crate) unsafe extern "C" fn tl_wide_f32(op: i32, p: *mut f32, n: i64) {
    let Some(u) = UnaryOp::ALL.get(op as usize).copied() else {
        return;
    };
    let n = usize::try_from(n).unwrap_or(0);
    // SAFETY: the caller passes a buffer of `n` f32 that nothing else
    // accesses during the call.
    let buf = unsafe { std::slice::from_raw_parts_mut(p, n) };
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the features the function is compiled for were just
            // detected.
            unsafe { avx512::map(u, buf) };
            return;
        }
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: as above.
            unsafe { avx2::map(u, buf) };
            return;
        }
    }
    map_scalar(u, buf);
}

/// One `map` per instruction set: the same loop, compiled for its features
/// so that LLVM vectorizes the inlined functions at that width.
macro_rules! wide_map {
    ($module:ident, $features:literal) => {
        #[cfg(target_arch = "x86_64")]
        mod $module {
            use super::*;

            /// # Safety
            /// The host has the features this is compiled for.
            #[target_feature(enable = $features)]
            pub(super) unsafe fn map(u: UnaryOp, buf: &mut [f32]) {
                match u {
                    UnaryOp::Exp => buf.iter_mut().for_each(|x| *x = exp(*x)),
                    UnaryOp::Expm1 => buf.iter_mut().for_each(|x| *x = expm1(*x)),
                    UnaryOp::Log => buf.iter_mut().for_each(|x| *x = log(*x)),
                    UnaryOp::Log1p => buf.iter_mut().for_each(|x| *x = log1p(*x)),
                    UnaryOp::Tanh => buf.iter_mut().for_each(|x| *x = tanh(*x)),
                    UnaryOp::Logistic => buf.iter_mut().for_each(|x| *x = logistic(*x)),
                    UnaryOp::Erf => buf.iter_mut().for_each(|x| *x = erf(*x)),
                    UnaryOp::Sin => sincos_buf(buf, false),
                    UnaryOp::Cos => sincos_buf(buf, true),
                    UnaryOp::Sqrt => buf.iter_mut().for_each(|x| *x = x.sqrt()),
                    UnaryOp::Rsqrt => buf.iter_mut().for_each(|x| *x = rsqrt(*x)),
                    UnaryOp::Reciprocal => buf.iter_mut().for_each(|x| *x = 1.0 / *x),
                    _ => {}
                }
            }
        }
    };
}

wide_map!(avx512, "avx512f,avx512dq,avx512vl,avx2,fma");
wide_map!(avx2, "avx2,fma");

/// The portable fallback (never used by compiled code, which only calls
/// the routines where [`lanes`] is `Some`; kept so the symbol is total).
fn map_scalar(u: UnaryOp, buf: &mut [f32]) {
    match u {
        UnaryOp::Sin => sincos_buf(buf, false),
        UnaryOp::Cos => sincos_buf(buf, true),
        _ => {
            if let Some(f) = scalar_fn(u) {
                buf.iter_mut().for_each(|x| *x = f(*x));
            }
        }
    }
}

/// The scalar form of a routine, for tests and the fallback.
pub(crate) fn scalar_fn(u: UnaryOp) -> Option<fn(f32) -> f32> {
    Some(match u {
        UnaryOp::Exp => exp,
        UnaryOp::Expm1 => expm1,
        UnaryOp::Log => log,
        UnaryOp::Log1p => log1p,
        UnaryOp::Tanh => tanh,
        UnaryOp::Logistic => logistic,
        UnaryOp::Erf => erf,
        UnaryOp::Sin => |x| sincos(x, false),
        UnaryOp::Cos => |x| sincos(x, true),
        UnaryOp::Sqrt => f32::sqrt,
        UnaryOp::Rsqrt => rsqrt,
        UnaryOp::Reciprocal => |x| 1.0 / x,
        _ => return None,
    })
}

/// An f64 constant rounded to f32, as `splat_f` rounds the inline code's.
const fn c(v: f64) -> f32 {
    v as f32
}

/// `hi < x ? hi : x`, then `x < lo ? lo : x` (NaN passes): `clamp_f`.
#[inline(always)]
fn clamp(x: f32, lo: f32, hi: f32) -> f32 {
    let x = if hi < x { hi } else { x };
    if x < lo { lo } else { x }
}

/// Horner's rule with fused multiply-adds, coefficients rounded to f32 as
/// the inline code's constants are: `horner`.
#[inline(always)]
fn horner(z: f32, c: &[f64]) -> f32 {
    let mut p = c[0] as f32;
    for k in &c[1..] {
        p = p.mul_add(z, *k as f32);
    }
    p
}

/// `exp_f32_reduced`: `(e^r - 1, n + 1.5·2^23, n)`.
#[inline(always)]
fn exp_reduced(x: f32) -> (f32, f32, f32) {
    let x = clamp(x, c(-104.0), c(88.73));
    let t = x * c(std::f64::consts::LOG2_E);
    let tm = t + 12_582_912.0;
    let n = tm - 12_582_912.0;
    let r = n.mul_add(c(-0.693_359_375), x);
    let r = n.mul_add(c(2.121_944_4e-4), r);
    let p = horner(r, &EXP_F32_P);
    let rr = r * r;
    (p.mul_add(rr, r), tm, n)
}

/// `scale_by_pow2`: `y · 2^n1 · 2^n2` with `n1 = n >> 1`, `n2 = n - n1`.
#[inline(always)]
fn scale_by_pow2(y: f32, tm: f32) -> f32 {
    let ni = (tm.to_bits() as i32).wrapping_sub(0x4B40_0000);
    let n1 = ni >> 1;
    let n2 = ni.wrapping_sub(n1);
    let s1 = f32::from_bits((n1.wrapping_add(127) << 23) as u32);
    let s2 = f32::from_bits((n2.wrapping_add(127) << 23) as u32);
    y * s1 * s2
}

/// `exp_f32`.
#[inline(always)]
fn exp(x: f32) -> f32 {
    let (y, tm, _) = exp_reduced(x);
    scale_by_pow2(y + 1.0, tm)
}

/// `expm1` for f32 lanes.
#[inline(always)]
fn expm1(x: f32) -> f32 {
    let (y, tm, n) = exp_reduced(x);
    let e = scale_by_pow2(y + 1.0, tm);
    let large = e - 1.0;
    let ni = (tm.to_bits() as i32).wrapping_sub(0x4B40_0000);
    let p2 = f32::from_bits((ni.wrapping_add(127) << 23) as u32);
    let small = y.mul_add(p2, p2 - 1.0);
    let r = if n.abs() <= 24.0 { small } else { large };
    if x.abs() < 2f32.powi(-26) { x } else { r }
}

/// `log_specials`.
#[inline(always)]
fn log_specials(x: f32, r: f32) -> f32 {
    let r = if x == f32::INFINITY { f32::INFINITY } else { r };
    let r = if x == 0.0 { f32::NEG_INFINITY } else { r };
    // UnorderedOrLessThan.
    if x < 0.0 || x.is_nan() { f32::NAN } else { r }
}

/// `log_f32`.
#[inline(always)]
fn log(x: f32) -> f32 {
    let is_tiny = x < f32::MIN_POSITIVE;
    let xn = if is_tiny { x * 8_388_608.0 } else { x };
    let bias_adj = if is_tiny { 23 } else { 0 };
    let bits = xn.to_bits() as i32;
    let e = ((bits as u32) >> 23) as i32 & 0xff;
    let e = e.wrapping_sub(bias_adj);
    let mb = (bits & 0x807f_ffff_u32 as i32) | 0x3f00_0000;
    let m = f32::from_bits(mb as u32);
    let ef = e.wrapping_sub(126) as f32;
    let lt = m < c(std::f64::consts::FRAC_1_SQRT_2);
    let mm = if lt { m + m } else { m };
    let f = mm - 1.0;
    let ef = if lt { ef - 1.0 } else { ef };
    let z = f * f;
    let p = horner(f, &LOG_F32_P);
    let y = p * f * z;
    let y = ef.mul_add(c(-2.121_944_40e-4), y);
    let y = z.mul_add(-0.5, y);
    let r = f + y;
    let r = ef.mul_add(c(0.693_359_375), r);
    log_specials(x, r)
}

/// `log1p` for f32 lanes.
#[inline(always)]
fn log1p(x: f32) -> f32 {
    let u = x + 1.0;
    let l = log(u);
    let q = x / (u - 1.0);
    let r = l * q;
    let r = if x == f32::INFINITY { f32::INFINITY } else { r };
    if u == 1.0 { x } else { r }
}

/// `with_sign_of`: `r` with the sign bit of `x` or-ed in.
#[inline(always)]
fn with_sign_of(r: f32, x: f32) -> f32 {
    f32::from_bits(r.to_bits() | (x.to_bits() & 0x8000_0000))
}

/// `tanh_f32`.
#[inline(always)]
fn tanh(x: f32) -> f32 {
    let a = x.abs();
    let z = a * a;
    let p = horner(z, &TANH_F32_P);
    let small = a.mul_add(z * p, a);
    let e = exp(a + a);
    let large = 1.0 - 2.0 / (e + 1.0);
    let r = if a < 0.625 { small } else { large };
    with_sign_of(r, x)
}

/// `logistic` for f32 lanes.
#[inline(always)]
fn logistic(x: f32) -> f32 {
    let t = exp(-x.abs());
    let num = if x >= 0.0 { 1.0 } else { t };
    num / (1.0 + t)
}

/// `sincos` for f32 lanes, without its cold branch (see [`sincos_buf`]).
#[inline(always)]
fn sincos(x: f32, cos: bool) -> f32 {
    let a = x.abs();
    let magic = 12_582_912.0;
    let tm = a.mul_add(c(std::f64::consts::FRAC_2_PI), magic);
    let n = tm - magic;
    let mut r = a;
    for part in SINCOS_F32_PI_2 {
        r = n.mul_add(c(-part), r);
    }
    let z = r * r;
    let s = (r * z).mul_add(horner(z, &SIN_F32_P), r);
    let cz = z.mul_add(-0.5, 1.0);
    let cz = (z * z).mul_add(horner(z, &COS_F32_P), cz);
    let tmi = tm.to_bits() as i32;
    let q = if cos { tmi.wrapping_add(1) } else { tmi };
    let (first, second) = if cos { (s, cz) } else { (cz, s) };
    let v = if tmi & 1 != 0 { first } else { second };
    let mut sign = ((q & 2) << 30) as u32;
    if !cos {
        sign ^= x.to_bits() & 0x8000_0000;
    }
    f32::from_bits(v.to_bits() ^ sign)
}

/// `sin` or `cos` of a buffer whose length is a multiple of 4, as the
/// inline code computes it vector by vector: a group of 4 lanes (a 128-bit
/// vector of the row) with a lane beyond the reduction's range goes through
/// libm whole, the others take the polynomial.
#[inline(always)]
fn sincos_buf(buf: &mut [f32], cos: bool) {
    let limit = c(SINCOS_F32_LIMIT);
    let huge = |x: &f32| x.abs() > limit;
    if !buf.iter().fold(false, |any, x| any | huge(x)) {
        buf.iter_mut().for_each(|x| *x = sincos(*x, cos));
        return;
    }
    let op = if cos { UnaryOp::Cos } else { UnaryOp::Sin };
    for group in buf.chunks_mut(4) {
        if group.iter().any(huge) {
            group.iter_mut().for_each(|x| *x = f32::un(op, *x));
        } else {
            group.iter_mut().for_each(|x| *x = sincos(*x, cos));
        }
    }
}

/// `1 / sqrt(x)`, both correctly rounded (as the inline code: not the
/// approximate `rsqrtps`).
#[inline(always)]
fn rsqrt(x: f32) -> f32 {
    1.0 / x.sqrt()
}

/// `erf_f32`: the rational form evaluated in f64.
#[inline(always)]
fn erf(x: f32) -> f32 {
    let x = f64::from(clamp(x, -4.0, 4.0));
    let z = x * x;
    let p = horner64(z, &ERF_F32_P);
    let q = horner64(z, &ERF_F32_Q);
    ((x * p) / q) as f32
}

/// [`horner`] in f64.
#[inline(always)]
fn horner64(z: f64, c: &[f64]) -> f64 {
    let mut p = c[0];
    for k in &c[1..] {
        p = p.mul_add(z, *k);
    }
    p
}
