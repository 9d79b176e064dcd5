//! Approximations of transcendental functions written once, for the two
//! places that evaluate them: compiled code (Cranelift IR, 4 f32 or 2 f64
//! lanes, `codegen/math.rs`) and the wide routines (Rust that rustc
//! vectorizes at the host's widest vectors, `wide.rs`). Each function is
//! generic over [`Ops`], the operations it is made of; `math.rs`
//! instantiates it with an emitter of Cranelift instructions, `wide.rs`
//! with plain `f32`/`f64` arithmetic. One source, so the two give the same
//! bits by construction (`tests/jit_wide.rs` still checks it).
//!
//! Here: `exp`, `expm1`, `tanh`, `logistic`, `ln`, `log1p`, `erf`, `pow`,
//! the polynomial part of `sin`/`cos` and their shared parts; f32 `erf` and
//! f32 `pow` are evaluated in f64 through [`Ops::in_f64`] (the emitter
//! widens a vector into two f64 halves, the lanes convert). Still per place:
//! the cold libm path of `sin`/`cos` (control flow around a call per
//! 128-bit group in compiled code, a per-element branch in the routines).
//! Bounds and methods: docs/compiler.md, "Numerics and tolerances".

use crate::codegen::math::{
    COS_F32_P, COS_F64_P, ERF_F32_P, ERF_F32_Q, ERF_F64_P, ERF_F64_Q, ERF_F64_T, ERF_F64_U,
    EXP_F32_P, EXP_F64_P, EXP_F64_Q, LOG_F32_P, LOG_F64_T1, LOG_F64_T2, POW_F64_ATANH,
    POW_F64_TWO_THIRDS, SIN_F32_P, SIN_F64_P, SINCOS_F32_PI_2, SINCOS_F64_PI_2, TANH_F64_P,
    TANH_F64_Q,
};

/// The operations an approximation is made of, on a float value `V` (a
/// scalar or a vector of lanes), a comparison result `M`, and the value's
/// bits as a signed integer `I` (for `f32` lanes, only the low 32 bits of
/// an `I` are ever read back).
pub(crate) trait Ops {
    type V: Copy;
    type M: Copy;
    type I: Copy;
    /// Whether the lanes are f64 (else f32).
    fn f64(&self) -> bool;

    /// The constant `v`, rounded to the lane type.
    fn c(&mut self, v: f64) -> Self::V;
    fn add(&mut self, a: Self::V, b: Self::V) -> Self::V;
    fn sub(&mut self, a: Self::V, b: Self::V) -> Self::V;
    fn mul(&mut self, a: Self::V, b: Self::V) -> Self::V;
    fn div(&mut self, a: Self::V, b: Self::V) -> Self::V;
    /// `a·b + c`, fused (the approximations are only used where the host
    /// fuses it, or where both places split it alike).
    fn fma(&mut self, a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    fn abs(&mut self, a: Self::V) -> Self::V;
    fn neg(&mut self, a: Self::V) -> Self::V;
    /// `a < b` (false for NaN).
    fn lt(&mut self, a: Self::V, b: Self::V) -> Self::M;
    /// `a <= b` (false for NaN).
    fn le(&mut self, a: Self::V, b: Self::V) -> Self::M;
    /// `a >= b` (false for NaN).
    fn ge(&mut self, a: Self::V, b: Self::V) -> Self::M;
    /// `a == b` (false for NaN).
    fn eq(&mut self, a: Self::V, b: Self::V) -> Self::M;
    /// `a < b` or either is NaN.
    fn ult(&mut self, a: Self::V, b: Self::V) -> Self::M;
    /// `m ? a : b`.
    fn select(&mut self, m: Self::M, a: Self::V, b: Self::V) -> Self::V;
    /// `x < lo ? lo : x` (NaN falls through): x86's `max(lo, x)` exactly,
    /// which an emitter with it may use instead of compare and select.
    fn at_least(&mut self, x: Self::V, lo: Self::V) -> Self::V {
        let below = self.lt(x, lo);
        self.select(below, lo, x)
    }
    /// `hi < x ? hi : x` (NaN falls through): x86's `min(hi, x)` exactly.
    fn at_most(&mut self, x: Self::V, hi: Self::V) -> Self::V {
        let above = self.lt(hi, x);
        self.select(above, hi, x)
    }
    /// `c - a·b`, fused: `fma(-a, b, c)` (negation is exact, so the same
    /// bits), which an emitter with a fused negated multiply-add may use.
    fn fnma(&mut self, a: Self::V, b: Self::V, c: Self::V) -> Self::V {
        let na = self.neg(a);
        self.fma(na, b, c)
    }
    /// The bits of `a`.
    fn bits(&mut self, a: Self::V) -> Self::I;
    /// The value with bits `i`.
    fn of_bits(&mut self, i: Self::I) -> Self::V;
    /// The integer `v`.
    fn ic(&mut self, v: i64) -> Self::I;
    fn iadd(&mut self, a: Self::I, b: Self::I) -> Self::I;
    fn isub(&mut self, a: Self::I, b: Self::I) -> Self::I;
    fn iand(&mut self, a: Self::I, b: Self::I) -> Self::I;
    fn ior(&mut self, a: Self::I, b: Self::I) -> Self::I;
    /// `a << k`.
    fn ishl(&mut self, a: Self::I, k: u32) -> Self::I;
    fn ixor(&mut self, a: Self::I, b: Self::I) -> Self::I;
    /// `a != 0`.
    fn inz(&mut self, a: Self::I) -> Self::M;
    /// `a >> k`, logical, on the lane's width.
    fn iushr(&mut self, a: Self::I, k: u32) -> Self::I;
    /// The integer `a` (small: exact) as a float.
    fn to_float(&mut self, a: Self::I) -> Self::V;
    /// `a` rounded to an integer, ties to even.
    fn nearest(&mut self, a: Self::V) -> Self::V;
    /// `a && b` on comparison results.
    fn and(&mut self, a: Self::M, b: Self::M) -> Self::M;
    /// `a || b`.
    fn or(&mut self, a: Self::M, b: Self::M) -> Self::M;
    /// `!a`.
    fn not(&mut self, a: Self::M) -> Self::M;
    /// `f` evaluated on `xs` in f64 and rounded once to the lane type: for
    /// f32 lanes through an `Ops` of f64 lanes holding the same values, for
    /// f64 lanes `f` on `self` as it is.
    fn in_f64<F: InF64>(&mut self, xs: &[Self::V], f: &F) -> Self::V;
}

/// A computation [`Ops::in_f64`] runs on f64 lanes.
pub(crate) trait InF64 {
    fn eval<O: Ops>(&self, o: &mut O, xs: &[O::V]) -> O::V;
}

/// Mantissa bits and exponent bias of the lane type.
#[inline(always)]
fn mant_bias<O: Ops>(o: &O) -> (u32, i64) {
    if o.f64() { (52, 1023) } else { (23, 127) }
}

/// 1.5·2^MANT: adding it rounds to an integer, left in the low mantissa
/// bits.
#[inline(always)]
fn magic<O: Ops>(o: &O) -> f64 {
    1.5 * 2f64.powi(mant_bias(o).0 as i32)
}

/// `x` clamped to `[lo, hi]`: `hi < x ? hi : x`, then `x < lo ? lo : x`,
/// so that NaN falls through ([`Ops::at_most`], [`Ops::at_least`]).
#[inline(always)]
pub(crate) fn clamp<O: Ops>(o: &mut O, x: O::V, lo: f64, hi: f64) -> O::V {
    let (hi, lo) = (o.c(hi), o.c(lo));
    let x = o.at_most(x, hi);
    o.at_least(x, lo)
}

/// `c[0]·z^(n-1) + … + c[n-1]` by Horner's rule with fused multiply-adds.
#[inline(always)]
pub(crate) fn horner<O: Ops>(o: &mut O, z: O::V, c: &[f64]) -> O::V {
    let mut p = o.c(c[0]);
    for k in &c[1..] {
        let k = o.c(*k);
        p = o.fma(p, z, k);
    }
    p
}

/// `y · 2^n`, where `tm = n + magic` came from the round-to-integer trick.
/// Applied as 2^n1 · 2^n2 with n1 = n >> 1, n2 = n - n1, so that results
/// down to the smallest denormal round once and no factor overflows before
/// the product does. The shifts by the mantissa width drop magic's own
/// bits: `tm`'s bits shifted left by it are n in the exponent field, and
/// by one less `2·n1 + (n & 1)` there. (Both factors multiply, rather than
/// n1 being added to y's exponent field, so that a NaN y stays NaN.)
#[inline(always)]
pub(crate) fn scale_by_pow2<O: Ops>(o: &mut O, y: O::V, tm: O::V) -> O::V {
    let (mant, bias) = mant_bias(o);
    let tmi = o.bits(tm);
    let n_field = o.ishl(tmi, mant);
    let twice = o.ishl(tmi, mant - 1);
    let field = o.ic(-(1i64 << mant));
    let n1_field = o.iand(twice, field);
    let n2_field = o.isub(n_field, n1_field);
    let one = o.ic(bias << mant);
    let e1 = o.iadd(n1_field, one);
    let e2 = o.iadd(n2_field, one);
    let s1 = o.of_bits(e1);
    let s2 = o.of_bits(e2);
    let y = o.mul(y, s1);
    o.mul(y, s2)
}

/// `2^n`, where `tm = n + magic` came from the round-to-integer trick and
/// n is within the normal exponents.
#[inline(always)]
fn pow2_of<O: Ops>(o: &mut O, tm: O::V) -> O::V {
    pow2_of_biased(o, tm, mant_bias(o).1)
}

/// `2^(n+1)`, as [`pow2_of`] (n + 1 within the normal exponents).
#[inline(always)]
fn pow2_of_plus_one<O: Ops>(o: &mut O, tm: O::V) -> O::V {
    pow2_of_biased(o, tm, mant_bias(o).1 + 1)
}

/// `2^(n + bias - B)` for the format's exponent bias B.
#[inline(always)]
fn pow2_of_biased<O: Ops>(o: &mut O, tm: O::V, bias: i64) -> O::V {
    let mant = mant_bias(o).0;
    // `n + bias` as `(n + magic) - magic + bias`, the two constants as one
    // (the integer sum wraps the same either way).
    let magic_bits = if o.f64() {
        magic(o).to_bits() as i64
    } else {
        i64::from((magic(o) as f32).to_bits())
    };
    let tmi = o.bits(tm);
    let k = o.ic(bias - magic_bits);
    let eb = o.iadd(tmi, k);
    let eb = o.ishl(eb, mant);
    o.of_bits(eb)
}

/// ln 2 in two parts for the f32 exp reduction (Cephes' `expf`): the high
/// part has 9 significant bits, so `n·EXP_F32_LN2_HI` is exact for |n| < 2^15.
const EXP_F32_LN2_HI: f64 = 0.693_359_375;
/// `EXP_F32_LN2_HI - ln 2`.
const EXP_F32_LN2_LO: f64 = 2.121_944_4e-4;
/// The f32 exp's argument is clamped to `[EXP_F32_LO, EXP_F32_HI]`: below,
/// e^x rounds to +0 in f32; above, to +inf.
const EXP_F32_LO: f64 = -104.0;
/// See [`EXP_F32_LO`].
const EXP_F32_HI: f64 = 88.73;

/// `|x|` of f32 `tanh` is clamped here: its exp argument `-2|x|` then
/// stops at -18.5, n = -27, where `1 - e^(-2|x|)` rounds to 1 (tanh x is
/// 1 in f32 from |x| ≈ 9.01).
pub(crate) const TANH_F32_CEIL: f64 = 9.25;

/// `r` (non-negative) with the sign bit of `x`.
#[inline(always)]
pub(crate) fn with_sign_of<O: Ops>(o: &mut O, r: O::V, x: O::V) -> O::V {
    let sign = if o.f64() {
        i64::MIN
    } else {
        i64::from(i32::MIN)
    };
    let xb = o.bits(x);
    let mask = o.ic(sign);
    let s = o.iand(xb, mask);
    let rb = o.bits(r);
    let rb = o.ior(rb, s);
    o.of_bits(rb)
}

/// The shared part of `exp` and `expm1`: `x` clamped, `n = round(x / ln 2)`
/// and `r = x - n·ln 2` (Cody–Waite, two parts); returns
/// `(e^r - 1, n + magic, n)`, `e^r - 1` from Cephes' polynomial (f32) or
/// Padé form `2·P(r)/(Q(r²) - P(r))` (f64).
#[inline(always)]
pub(crate) fn exp_reduced<O: Ops>(o: &mut O, x: O::V) -> (O::V, O::V, O::V) {
    if o.f64() {
        let x = clamp(o, x, -746.0, 709.79);
        let log2e = o.c(std::f64::consts::LOG2_E);
        let magic = o.c(magic(o));
        let tm = o.fma(x, log2e, magic);
        let n = o.sub(tm, magic);
        let c1 = o.c(-6.931_457_519_531_25e-1);
        let c2 = o.c(-1.428_606_820_309_417_3e-6);
        let r = o.fma(n, c1, x);
        let r = o.fma(n, c2, r);
        let rr = o.mul(r, r);
        let p = horner(o, rr, &EXP_F64_P);
        let px = o.mul(p, r);
        let q = horner(o, rr, &EXP_F64_Q);
        let den = o.sub(q, px);
        let y = o.div(px, den);
        (o.add(y, y), tm, n)
    } else {
        let x = clamp(o, x, EXP_F32_LO, EXP_F32_HI);
        let (r, tm, n) = exp_arg_f32(o, x, 1.0);
        let p = horner(o, r, &EXP_F32_P);
        let rr = o.mul(r, r);
        (o.fma(p, rr, r), tm, n)
    }
}

/// The f32 exp reduction of `s·x` for a power of two `s`, `x` already
/// clamped so that `s·x` is within [`EXP_F32_LO`], [`EXP_F32_HI`]:
/// `(r/s, n + magic, n)` with `n = round(s·x·log2 e)` (one fused
/// multiply-add with the round-to-integer constant) and `r = s·x - n·ln 2`
/// (Cody–Waite, two parts), carried divided by s — every rescaling by a
/// power of two, so the roundings are those of the reduction of `s·x`
/// itself, without the product `s·x`.
#[inline(always)]
fn exp_arg_f32<O: Ops>(o: &mut O, x: O::V, s: f64) -> (O::V, O::V, O::V) {
    let k = o.c(s * std::f64::consts::LOG2_E);
    let magic = o.c(magic(o));
    let tm = o.fma(x, k, magic);
    let n = o.sub(tm, magic);
    let c1 = o.c(-EXP_F32_LN2_HI / s);
    let c2 = o.c(EXP_F32_LN2_LO / s);
    let r = o.fma(n, c1, x);
    let r = o.fma(n, c2, r);
    (r, tm, n)
}

/// `e^x`: `2^n·e^r`. f32: `e^r = 1 + r·(1 + r·P(r))`, two fused
/// multiply-adds after Cephes' polynomial (its `1 + r + r²·P(r)` in one
/// operation fewer); f64: `1 + (e^r - 1)` from [`exp_reduced`]. NaN
/// propagates; overflow gives +inf, underflow +0; denormal results round
/// once.
#[inline(always)]
pub(crate) fn exp<O: Ops>(o: &mut O, x: O::V) -> O::V {
    let one = o.c(1.0);
    if !o.f64() {
        let x = clamp(o, x, EXP_F32_LO, EXP_F32_HI);
        let (r, tm, _) = exp_arg_f32(o, x, 1.0);
        let p = horner(o, r, &EXP_F32_P);
        let q = o.fma(p, r, one);
        let e = o.fma(q, r, one);
        return scale_by_pow2(o, e, tm);
    }
    let (y, tm, _) = exp_reduced(o, x);
    let y = o.add(y, one);
    scale_by_pow2(o, y, tm)
}

/// `e^x - 1`: with `e^x = 2^n·e^r`, `2^n·(e^r - 1) + (2^n - 1)` while
/// `|n|` is at most the mantissa width (both terms exact powers of two, so
/// small results keep their relative accuracy), else `e^x - 1` from the
/// scaled exp. Tiny |x| returns x (keeps -0).
#[inline(always)]
pub(crate) fn expm1<O: Ops>(o: &mut O, x: O::V) -> O::V {
    let width = mant_bias(o).0 + 1;
    let (y, tm, n) = exp_reduced(o, x);
    let one = o.c(1.0);
    let y1 = o.add(y, one);
    let e = scale_by_pow2(o, y1, tm);
    let large = o.sub(e, one);
    let p2 = pow2_of(o, tm);
    let p2m1 = o.sub(p2, one);
    let small = o.fma(y, p2, p2m1);
    let an = o.abs(n);
    let lim = o.c(f64::from(width));
    let is_small = o.le(an, lim);
    let r = o.select(is_small, small, large);
    let ax = o.abs(x);
    let tiny = o.c(2f64.powi(-2 - width as i32));
    let is_tiny = o.lt(ax, tiny);
    o.select(is_tiny, x, r)
}

/// `tanh x`. f32: `s / (2 - s)` with `s = 1 - e^(-2|x|)` computed as
/// `(1 - 2^n) - 2^n·(e^r - 1)` from the exp reduction of `-2|x|` (|x|
/// clamped at [`TANH_F32_CEIL`], where tanh is 1 in f32): `1 - 2^n` is exact down
/// to n = -24 and `e^r - 1` keeps its relative accuracy near 0, so small
/// |x| loses nothing to cancellation and no second formula is blended in.
/// f64, after Cephes: below |x| = 0.625 `x + x·z·P(z)/Q(z)`, z = x², else
/// `1 - 2/(e^(2|x|) + 1)` with the exp above. Both on |x|, the sign copied
/// back (-0 stays -0). NaN propagates, ±inf give ±1.
#[inline(always)]
pub(crate) fn tanh<O: Ops>(o: &mut O, x: O::V) -> O::V {
    if !o.f64() {
        // The exp reduction of t = -2a carried as u = -r/2: `e^r - 1 =
        // -2·(u + u²·Q(u))` with Q(u) = -2·P(-2u) (P's coefficients times
        // powers of -2, exact), and the scale 2^(n+1).
        let a = o.abs(x);
        let hi_a = o.c(TANH_F32_CEIL);
        let a = o.at_most(a, hi_a);
        let (u, tm, _) = exp_arg_f32(o, a, -2.0);
        let mut q = [0.0; EXP_F32_P.len()];
        let mut scale = -2.0;
        for (qk, pk) in q.iter_mut().zip(&EXP_F32_P).rev() {
            *qk = pk * scale;
            scale *= -2.0;
        }
        let p = horner(o, u, &q);
        let uu = o.mul(u, u);
        let y = o.fma(p, uu, u);
        let p2x2 = pow2_of_plus_one(o, tm);
        let half = o.c(0.5);
        let one = o.c(1.0);
        let hi = o.fnma(p2x2, half, one);
        let s = o.fma(p2x2, y, hi);
        let two = o.c(2.0);
        let d = o.sub(two, s);
        let r = o.div(s, d);
        return with_sign_of(o, r, x);
    }
    let a = o.abs(x);
    let z = o.mul(a, a);
    let small = {
        let p = horner(o, z, &TANH_F64_P);
        let q = horner(o, z, &TANH_F64_Q);
        let pq = o.div(p, q);
        let az = o.mul(a, z);
        o.fma(az, pq, a)
    };
    let two_a = o.add(a, a);
    let e = exp(o, two_a);
    let one = o.c(1.0);
    let two = o.c(2.0);
    let e1 = o.add(e, one);
    let q = o.div(two, e1);
    let large = o.sub(one, q);
    let cut = o.c(0.625);
    let is_small = o.lt(a, cut);
    let r = o.select(is_small, small, large);
    with_sign_of(o, r, x)
}

/// `1 / (1 + e^-x)`: with `t = e^-|x|` (never overflows),
/// `(x >= 0 ? 1 : t) / (1 + t)`.
#[inline(always)]
pub(crate) fn logistic<O: Ops>(o: &mut O, x: O::V) -> O::V {
    let a = o.abs(x);
    let na = o.neg(a);
    let t = exp(o, na);
    let one = o.c(1.0);
    let zero = o.c(0.0);
    let den = o.add(one, t);
    let pos = o.ge(x, zero);
    let num = o.select(pos, one, t);
    o.div(num, den)
}

/// The special values of `ln`: x < 0 or NaN → NaN, ±0 → -inf,
/// +inf → +inf; `r` elsewhere.
#[inline(always)]
pub(crate) fn log_specials<O: Ops>(o: &mut O, x: O::V, r: O::V) -> O::V {
    let zero = o.c(0.0);
    let nan = o.c(f64::NAN);
    let ninf = o.c(f64::NEG_INFINITY);
    let inf = o.c(f64::INFINITY);
    let is_inf = o.eq(x, inf);
    let r = o.select(is_inf, inf, r);
    let is_zero = o.eq(x, zero);
    let r = o.select(is_zero, ninf, r);
    let bad = o.ult(x, zero);
    o.select(bad, nan, r)
}

/// fdlibm's reduction for f64 `ln` (positive finite x; denormals scaled by
/// 2^54 first): `(k, m)` with x = m·2^k, m in [√½, √2), k as a float (the
/// biased exponent dropped into the mantissa of 2^52: no vector int → float
/// conversion).
#[inline(always)]
pub(crate) fn ln_split_f64<O: Ops>(o: &mut O, x: O::V) -> (O::V, O::V) {
    let tiny = o.c(f64::MIN_POSITIVE);
    let is_tiny = o.lt(x, tiny);
    let scale = o.c(2f64.powi(54));
    let xs = o.mul(x, scale);
    let xn = o.select(is_tiny, xs, x);
    let bits = o.bits(xn);
    let e = o.iushr(bits, 52);
    let emask = o.ic(0x7ff);
    let e = o.iand(e, emask);
    let two52 = o.ic(0x4330_0000_0000_0000);
    let eb = o.ior(e, two52);
    let ef = o.of_bits(eb);
    let off = o.c(2f64.powi(52) + 1023.0);
    let k = o.sub(ef, off);
    let adj = o.c(54.0);
    let zero = o.c(0.0);
    let adj = o.select(is_tiny, adj, zero);
    let k = o.sub(k, adj);
    let mmask = o.ic(0x000f_ffff_ffff_ffff);
    let mb = o.iand(bits, mmask);
    let one_bits = o.ic(0x3ff0_0000_0000_0000);
    let mb = o.ior(mb, one_bits);
    let m = o.of_bits(mb);
    let sqrt2 = o.c(std::f64::consts::SQRT_2);
    let big = o.ge(m, sqrt2);
    let half = o.c(0.5);
    let one = o.c(1.0);
    let mh = o.mul(m, half);
    let m = o.select(big, mh, m);
    let kp1 = o.add(k, one);
    let k = o.select(big, kp1, k);
    (k, m)
}

/// `ln x`: f32 after Cephes' `logf` (x = m·2^e with m in [√½, √2), a
/// degree-8 polynomial in m - 1, denormals scaled by 2^23 first); f64
/// after fdlibm's `__ieee754_log` (`s = f/(2 + f)` for f = m - 1 and a
/// degree-14 polynomial in s). x < 0 and NaN give NaN, ±0 gives -inf,
/// +inf gives +inf.
#[inline(always)]
pub(crate) fn ln<O: Ops>(o: &mut O, x: O::V) -> O::V {
    let r = if o.f64() {
        let (k, m) = ln_split_f64(o, x);
        let one = o.c(1.0);
        let half = o.c(0.5);
        let f = o.sub(m, one);
        let two = o.c(2.0);
        let d = o.add(two, f);
        let s = o.div(f, d);
        let z = o.mul(s, s);
        let w = o.mul(z, z);
        let t1 = horner(o, w, &LOG_F64_T1);
        let t1 = o.mul(t1, w);
        let t2 = horner(o, w, &LOG_F64_T2);
        let t2 = o.mul(t2, z);
        let r = o.add(t2, t1);
        let ff = o.mul(f, f);
        let hfsq = o.mul(ff, half);
        let hr = o.add(hfsq, r);
        let ln2_lo = o.c(1.908_214_929_270_587_7e-10);
        let klo = o.mul(k, ln2_lo);
        let inner = o.fma(s, hr, klo);
        let inner = o.sub(hfsq, inner);
        let inner = o.sub(inner, f);
        let ln2_hi = o.c(6.931_471_803_691_238e-1);
        let khi = o.mul(k, ln2_hi);
        o.sub(khi, inner)
    } else {
        let tiny = o.c(f64::from(f32::MIN_POSITIVE));
        let is_tiny = o.lt(x, tiny);
        let scale = o.c(8_388_608.0);
        let xs = o.mul(x, scale);
        let xn = o.select(is_tiny, xs, x);
        // Mantissa in [0.5, 1) and exponent.
        let bits = o.bits(xn);
        let e = o.iushr(bits, 23);
        let ff = o.ic(0xff);
        let e = o.iand(e, ff);
        let bias = o.ic(126);
        let e = o.isub(e, bias);
        let ef = o.to_float(e);
        let adj = o.c(23.0);
        let zero = o.c(0.0);
        let adj = o.select(is_tiny, adj, zero);
        let ef = o.sub(ef, adj);
        let mant_mask = o.ic(i64::from(0x807f_ffff_u32 as i32));
        let mb = o.iand(bits, mant_mask);
        let half_bits = o.ic(0x3f00_0000);
        let mb = o.ior(mb, half_bits);
        let m = o.of_bits(mb);
        // m < √½: 2m - 1 and e - 1; else m - 1.
        let sqrthf = o.c(std::f64::consts::FRAC_1_SQRT_2);
        let lt = o.lt(m, sqrthf);
        let one = o.c(1.0);
        let m2 = o.add(m, m);
        let mm = o.select(lt, m2, m);
        let f = o.sub(mm, one);
        let em1 = o.sub(ef, one);
        let ef = o.select(lt, em1, ef);
        let z = o.mul(f, f);
        let p = horner(o, f, &LOG_F32_P);
        let y = o.mul(p, f);
        let y = o.mul(y, z);
        let q1 = o.c(-2.121_944_40e-4);
        let y = o.fma(ef, q1, y);
        let h = o.c(-0.5);
        let y = o.fma(z, h, y);
        let r = o.add(f, y);
        let q2 = o.c(0.693_359_375);
        o.fma(ef, q2, r)
    };
    log_specials(o, x, r)
}

/// `ln(1 + x)`: with `u = 1 + x` rounded, `ln(u)·x/(u - 1)` corrects the
/// rounding of `u` (Goldberg), and `u == 1` returns x. x < -1 gives NaN,
/// -1 gives -inf, +inf gives +inf.
#[inline(always)]
pub(crate) fn log1p<O: Ops>(o: &mut O, x: O::V) -> O::V {
    let one = o.c(1.0);
    let u = o.add(x, one);
    let l = ln(o, u);
    let um1 = o.sub(u, one);
    let q = o.div(x, um1);
    let r = o.mul(l, q);
    let inf = o.c(f64::INFINITY);
    let is_inf = o.eq(x, inf);
    let r = o.select(is_inf, inf, r);
    let exact = o.eq(u, one);
    o.select(exact, x, r)
}

/// `sin x` or `cos x` for |x| within the reduction's range, after Cephes'
/// `sinf`/`cosf` and `sin`/`cos`: |x| reduced by π/2 in four parts (the
/// first three short enough that every product with the quadrant count is
/// exact), the quadrant picks ±sin or ±cos of the remainder, each a
/// polynomial on [-π/4, π/4]. Beyond the range the callers go to libm.
#[inline(always)]
pub(crate) fn sincos<O: Ops>(o: &mut O, x: O::V, cos: bool) -> O::V {
    let f64_lanes = o.f64();
    let (parts, sin_p, cos_p, bits): (&[f64; 4], &[f64], &[f64], u32) = if f64_lanes {
        (&SINCOS_F64_PI_2, &SIN_F64_P, &COS_F64_P, 64)
    } else {
        (&SINCOS_F32_PI_2, &SIN_F32_P, &COS_F32_P, 32)
    };
    let a = o.abs(x);
    let two_over_pi = o.c(std::f64::consts::FRAC_2_PI);
    let magic = o.c(magic(o));
    let tm = o.fma(a, two_over_pi, magic);
    let n = o.sub(tm, magic);
    let mut r = a;
    for part in parts {
        let c = o.c(-part);
        r = o.fma(n, c, r);
    }
    let z = o.mul(r, r);
    let sp = horner(o, z, sin_p);
    let rz = o.mul(r, z);
    let s = o.fma(rz, sp, r);
    let cp = horner(o, z, cos_p);
    let zz = o.mul(z, z);
    let half = o.c(-0.5);
    let one = o.c(1.0);
    let c = o.fma(z, half, one);
    let c = o.fma(zz, cp, c);
    // Quadrant q = n mod 4 (the low bits of tm): odd quadrants swap sin
    // and cos; the sign flips for q = 2, 3 (sin) or q = 1, 2 (cos).
    let tmi = o.bits(tm);
    let onei = o.ic(1);
    let q = if cos { o.iadd(tmi, onei) } else { tmi };
    let odd = o.iand(tmi, onei);
    let swap = o.inz(odd);
    let (first, second) = if cos { (s, c) } else { (c, s) };
    let v = o.select(swap, first, second);
    let twoi = o.ic(2);
    let neg = o.iand(q, twoi);
    let mut sign = o.ishl(neg, bits - 2);
    if !cos {
        let xb = o.bits(x);
        let sign_bit = if f64_lanes {
            i64::MIN
        } else {
            i64::from(i32::MIN)
        };
        let mask = o.ic(sign_bit);
        let xs = o.iand(xb, mask);
        sign = o.ixor(sign, xs);
    }
    let vb = o.bits(v);
    let vb = o.ixor(vb, sign);
    o.of_bits(vb)
}

/// f64 `erf x`, after Cephes' `ndtr.c`: for |x| ≤ 1 `x·T(x²)/U(x²)`, else
/// `1 - e^(-x²)·P(|x|)/Q(|x|)` with the exp above and the sign of x (|x|
/// clamped to 6, past which erf is ±1 in f64). NaN propagates, -0 stays
/// -0.
#[inline(always)]
pub(crate) fn erf_f64<O: Ops>(o: &mut O, x: O::V) -> O::V {
    let a = o.abs(x);
    let z = o.mul(x, x);
    let t = horner(o, z, &ERF_F64_T);
    let u = horner(o, z, &ERF_F64_U);
    let tu = o.div(t, u);
    let small = o.mul(x, tu);
    let ac = clamp(o, a, 0.0, 6.0);
    let p = horner(o, ac, &ERF_F64_P);
    let q = horner(o, ac, &ERF_F64_Q);
    let aa = o.mul(ac, ac);
    let naa = o.neg(aa);
    let e = exp(o, naa);
    let pq = o.div(p, q);
    let erfc = o.mul(e, pq);
    let one = o.c(1.0);
    let large = o.sub(one, erfc);
    let large = with_sign_of(o, large, x);
    let is_small = o.le(a, one);
    o.select(is_small, small, large)
}

/// `erf x` for f32: the rational approximation used by Eigen and XLA,
/// `x·P(x²)/Q(x²)` on x clamped to [-4, 4] (erf is ±1 in f32 beyond),
/// evaluated in f64 (in f32 its rounding reached 5 ulp near 1; the formula
/// itself is within 1.4). NaN propagates; -0 stays -0.
#[inline(always)]
pub(crate) fn erf_f32<O: Ops>(o: &mut O, x: O::V) -> O::V {
    struct Rational;
    impl InF64 for Rational {
        #[inline(always)]
        fn eval<O: Ops>(&self, o: &mut O, xs: &[O::V]) -> O::V {
            let x = xs[0];
            let z = o.mul(x, x);
            let p = horner(o, z, &ERF_F32_P);
            let q = horner(o, z, &ERF_F32_Q);
            let xp = o.mul(x, p);
            o.div(xp, q)
        }
    }
    let x = clamp(o, x, -4.0, 4.0);
    o.in_f64(&[x], &Rational)
}

/// `(s, e)` with `s = a + b` rounded and `e` its exact error (Knuth's
/// two-sum: no condition on the magnitudes).
#[inline(always)]
fn two_sum<O: Ops>(o: &mut O, a: O::V, b: O::V) -> (O::V, O::V) {
    let s = o.add(a, b);
    let bb = o.sub(s, a);
    let ab = o.sub(s, bb);
    let da = o.sub(a, ab);
    let db = o.sub(b, bb);
    (s, o.add(da, db))
}

/// `x^y` for f32: `e^(y·ln|x|)` evaluated in f64 (the f64 [`ln`] and
/// [`exp`], so the f32 result rounds once from a value good to ~2^-50),
/// then IEEE `pow`'s special cases ([`pow_specials`]).
#[inline(always)]
pub(crate) fn pow_f32<O: Ops>(o: &mut O, x: O::V, y: O::V) -> O::V {
    struct Magnitude;
    impl InF64 for Magnitude {
        #[inline(always)]
        fn eval<O: Ops>(&self, o: &mut O, xs: &[O::V]) -> O::V {
            let a = o.abs(xs[0]);
            let l = ln(o, a);
            let yl = o.mul(xs[1], l);
            exp(o, yl)
        }
    }
    let mag = o.in_f64(&[x, y], &Magnitude);
    pow_specials(o, x, y, mag)
}

/// `|x|^y` for f64 as `e^(y·ln|x|)`, with `ln|x|` in double-double and the
/// product `y·ln|x|` too, so that the exponential's argument (up to ~745 in
/// magnitude, where an error of 2^-53 relative in `ln` alone would cost
/// ~700 ulp) is accurate to ~2^-64 relative: fdlibm's reduction
/// ([`ln_split_f64`]: x = m·2^k, m in [√½, √2), f = m - 1) and
/// `ln m = 2·atanh(s)`, s = f/(2+f) carried as s + s_lo (its division
/// remainder by FMA), `2/3·s³` in double-double, the rest of the series (to
/// s^25) in plain f64; k·ln2 in two parts; the sums by two-sum. Then
/// `e^hi·(1 + lo)` with [`exp`], and IEEE's special cases
/// ([`pow_specials`]). Needs FMA (the exact products): without it compiled
/// code calls libm instead.
#[inline(always)]
pub(crate) fn pow_f64<O: Ops>(o: &mut O, x: O::V, y: O::V) -> O::V {
    let a = o.abs(x);
    let (k, m) = ln_split_f64(o, a);
    let one = o.c(1.0);
    let two = o.c(2.0);
    let f = o.sub(m, one);
    // d + d_lo = 2 + f exactly (Fast2Sum: |2| > |f|).
    let d = o.add(two, f);
    let dm2 = o.sub(d, two);
    let d_lo = o.sub(f, dm2);
    // s + s_lo = f / (2 + f): the remainder f - s·d is exact by FMA.
    let s = o.div(f, d);
    let neg_s = o.neg(s);
    let r = o.fma(neg_s, d, f);
    let r = o.fma(neg_s, d_lo, r);
    let s_lo = o.div(r, d);
    // s² and s³ with their errors.
    let sq = o.mul(s, s);
    let neg_sq = o.neg(sq);
    let sq_lo = o.fma(s, s, neg_sq);
    let c = o.mul(sq, s);
    let neg_c = o.neg(c);
    let c_lo = o.fma(sq, s, neg_c);
    let c_lo = o.fma(sq_lo, s, c_lo);
    let three = o.c(3.0);
    let sq3 = o.mul(sq, three);
    let c_lo = o.fma(sq3, s_lo, c_lo);
    // q + q_lo = (2/3)·s³.
    let t_hi = o.c(POW_F64_TWO_THIRDS[0]);
    let t_lo = o.c(POW_F64_TWO_THIRDS[1]);
    let q = o.mul(t_hi, c);
    let neg_q = o.neg(q);
    let q_lo = o.fma(t_hi, c, neg_q);
    let q_lo = o.fma(t_hi, c_lo, q_lo);
    let q_lo = o.fma(t_lo, c, q_lo);
    // The rest of 2·atanh(s): 2·s^5·(1/5 + s²/7 + … + s^20/25).
    let rz = horner(o, sq, &POW_F64_ATANH);
    let s5 = o.mul(c, sq);
    let rest = o.mul(s5, rz);
    // ln|x| = k·ln2_hi + 2s + q, each sum exact, plus the small terms.
    let ln2_hi = o.c(6.931_471_803_691_238e-1);
    let ln2_lo = o.c(1.908_214_929_270_587_7e-10);
    let kh = o.mul(k, ln2_hi);
    let s2 = o.add(s, s);
    let (h1, e1) = two_sum(o, kh, s2);
    let (h2, e2) = two_sum(o, h1, q);
    let small = o.mul(k, ln2_lo);
    let s_lo2 = o.add(s_lo, s_lo);
    let small = o.add(small, s_lo2);
    let small = o.add(small, q_lo);
    let small = o.add(small, rest);
    let lo = o.add(e1, e2);
    let lo = o.add(lo, small);
    let l_hi = o.add(h2, lo);
    let back = o.sub(l_hi, h2);
    let l_lo = o.sub(lo, back);
    // ±0 → -inf, +inf → +inf, NaN → NaN (the split saw none of them).
    let l_hi = log_specials(o, a, l_hi);
    // y·ln|x| = p + p_lo.
    let p = o.mul(y, l_hi);
    let neg_p = o.neg(p);
    let p_lo = o.fma(y, l_hi, neg_p);
    let p_lo = o.fma(y, l_lo, p_lo);
    let e = exp(o, p);
    // e·(1 + p_lo), where both are finite (an infinite or NaN p makes p_lo
    // NaN; e = 0 or inf stays).
    let corr = o.fma(e, p_lo, e);
    let inf = o.c(f64::INFINITY);
    let ae = o.abs(e);
    let e_fin = o.lt(ae, inf);
    let ap = o.abs(p_lo);
    let p_fin = o.lt(ap, inf);
    let ok = o.and(e_fin, p_fin);
    let mag = o.select(ok, corr, e);
    pow_specials(o, x, y, mag)
}

/// `pow`'s special cases on top of the magnitude `mag` = |x|^y: the sign
/// of x for odd integer y (also -0 and -inf), NaN for a finite x < 0 with
/// non-integer y, 1 for y = 0 or x = 1 (even with a NaN), and for |x| = 1
/// with y = ±inf.
#[inline(always)]
pub(crate) fn pow_specials<O: Ops>(o: &mut O, x: O::V, y: O::V, mag: O::V) -> O::V {
    let zero = o.c(0.0);
    let one = o.c(1.0);
    let half = o.c(0.5);
    let nan = o.c(f64::NAN);
    let inf = o.c(f64::INFINITY);
    // y integer / odd integer (|y| ≥ 2^24 (f32) is always an even integer).
    let yr = o.nearest(y);
    let y_int = o.eq(yr, y);
    let yh = o.mul(y, half);
    let yhr = o.nearest(yh);
    let y_even = o.eq(yhr, yh);
    let y_not_even = o.not(y_even);
    let y_odd = o.and(y_int, y_not_even);
    let signed = with_sign_of(o, mag, x);
    let r = o.select(y_odd, signed, mag);
    let x_neg = o.lt(x, zero);
    let y_frac = o.not(y_int);
    let ay = o.abs(y);
    let y_finite = o.lt(ay, inf);
    let y_frac = o.and(y_frac, y_finite);
    // A finite negative base with a non-integer exponent has no real power
    // (-inf has: +inf or +0).
    let ax = o.abs(x);
    let x_finite = o.lt(ax, inf);
    let x_neg = o.and(x_neg, x_finite);
    let invalid = o.and(x_neg, y_frac);
    let r = o.select(invalid, nan, r);
    // |x| = 1 with y = ±inf, x = 1 with anything, y = 0 with anything: 1.
    let ax_one = o.eq(ax, one);
    let y_inf = o.not(y_finite);
    let y_num = o.eq(y, y);
    let y_inf = o.and(y_inf, y_num);
    let unit = o.and(ax_one, y_inf);
    let x_one = o.eq(x, one);
    let y_zero = o.eq(y, zero);
    let unit = o.or(unit, x_one);
    let unit = o.or(unit, y_zero);
    o.select(unit, one, r)
}
