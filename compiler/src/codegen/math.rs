//! The inline approximations of transcendental functions (exp, expm1,
//! log, log1p, tanh, logistic, sin, cos, erf, f32 pow) as Cranelift IR, for
//! scalars and vectors alike: exp, expm1, tanh, logistic, log, log1p, f64
//! erf and the polynomial part of sin/cos through the generic code of
//! `crate::approx` (shared with `wide.rs`) and [`Clif`], the rest (f32 erf
//! and pow in f64, sin/cos's libm path, f64 pow) written here. Bounds and methods: docs/compiler.md,
//! "Numerics and tolerances"; tests: tests/jit_math.rs.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{Endianness, InstBuilder, MemFlagsData, Type, Value, types};
use tensorlift_ir::{Result, UnaryOp};

use super::target::has_fma;
use super::{KernelGen, fcmp};
use crate::approx;
use crate::rt::RtFn;

/// f32 `exp`: Cephes' polynomial for `(e^r - 1 - r)/r²` (Horner order).
pub(crate) const EXP_F32_P: [f64; 6] = [
    1.987_569_150_0e-4,
    1.398_199_950_7e-3,
    8.333_451_907_3e-3,
    4.166_579_589_4e-2,
    1.666_666_545_9e-1,
    5.000_000_120_1e-1,
];

/// f32 `erf`: the numerator `P(x²)` of `x·P(x²)/Q(x²)` (Eigen/XLA).
pub(crate) const ERF_F32_P: [f64; 7] = [
    -2.726_142_258_013_06e-10,
    2.770_681_424_959_02e-8,
    -2.101_024_020_825_08e-6,
    -5.692_506_394_623_46e-5,
    -7.349_906_303_268_55e-4,
    -2.954_599_808_540_25e-3,
    -1.609_603_332_624_15e-2,
];

/// f32 `erf`: the denominator `Q(x²)`.
pub(crate) const ERF_F32_Q: [f64; 5] = [
    -1.456_607_184_649_96e-5,
    -2.133_740_552_789_05e-4,
    -1.682_826_974_382_03e-3,
    -7.373_329_167_204_68e-3,
    -1.426_473_905_141_89e-2,
];

/// f32 `ln`: Cephes' polynomial in `m - 1`.
pub(crate) const LOG_F32_P: [f64; 9] = [
    7.037_683_629_2e-2,
    -1.151_461_031_0e-1,
    1.167_699_874_0e-1,
    -1.242_014_084_6e-1,
    1.424_932_278_7e-1,
    -1.666_805_766_5e-1,
    2.000_071_476_5e-1,
    -2.499_999_399_3e-1,
    3.333_333_117_4e-1,
];

/// f32 `sin`/`cos`: π/2 in four parts (the first three of 11 bits).
pub(crate) const SINCOS_F32_PI_2: [f64; 4] = [
    1.570_312_5,
    4.837_512_969_970_703e-4,
    7.549_533_620_476_723e-8,
    2.563_344_1e-12,
];

/// f32 `sin`/`cos`: beyond this |x| the reduction is not exact (libm).
pub(crate) const SINCOS_F32_LIMIT: f64 = 8192.0;

/// f32 `sin`: Cephes' polynomial on [-π/4, π/4], in x².
pub(crate) const SIN_F32_P: [f64; 3] =
    [-1.951_529_589_1e-4, 8.332_160_873_6e-3, -1.666_665_461_1e-1];

/// f32 `cos`: Cephes' polynomial on [-π/4, π/4], in x².
pub(crate) const COS_F32_P: [f64; 3] = [
    2.443_315_711_809_948e-5,
    -1.388_731_625_493_765e-3,
    4.166_664_568_298_827e-2,
];

/// f64 `exp`: the Padé numerator `P(r²)` (times r).
pub(crate) const EXP_F64_P: [f64; 3] =
    [1.261_771_930_748_105_8e-4, 3.029_944_077_074_419_5e-2, 1.0];

/// f64 `exp`: the Padé denominator `Q(r²)`.
pub(crate) const EXP_F64_Q: [f64; 4] = [
    3.001_985_051_386_644_6e-6,
    2.524_483_403_496_841e-3,
    2.272_655_482_081_550_3e-1,
    2.0,
];

/// f64 `tanh`: Cephes' `P(z)` for |x| < 0.625.
pub(crate) const TANH_F64_P: [f64; 3] = [
    -9.643_991_794_250_522e-1,
    -9.928_772_310_019_186e1,
    -1.614_687_684_417_084_5e3,
];

/// f64 `tanh`: Cephes' `Q(z)`.
pub(crate) const TANH_F64_Q: [f64; 4] = [
    1.0,
    1.128_116_784_916_329_3e2,
    2.235_488_390_601_004_5e3,
    4.844_063_053_251_255e3,
];

/// f64 `ln`: fdlibm's odd-power terms, in w = s⁴.
pub(crate) const LOG_F64_T1: [f64; 3] = [
    1.531_383_769_920_937_3e-1,
    2.222_219_843_214_978_4e-1,
    3.999_999_999_940_942e-1,
];

/// f64 `ln`: fdlibm's even-power terms, in w = s⁴.
pub(crate) const LOG_F64_T2: [f64; 4] = [
    1.479_819_860_511_658_6e-1,
    1.818_357_216_161_805e-1,
    2.857_142_874_366_239e-1,
    6.666_666_666_666_735e-1,
];

/// f64 `pow`: 2/3 as a double-double (the s³ term of `2·atanh(s)`).
pub(crate) const POW_F64_TWO_THIRDS: [f64; 2] =
    [0.666_666_666_666_666_6, 3.700_743_415_417_188e-17];

/// f64 `pow`: the rest of `2·atanh(s) = 2s + (2/3)s³ + s⁵·R(s²)`, Taylor
/// coefficients 2/(2j+1) from s^25 (|s| ≤ 0.172: the next term is below
/// 2^-68 of the sum) down to s⁵.
pub(crate) const POW_F64_ATANH: [f64; 11] = [
    2.0 / 25.0,
    2.0 / 23.0,
    2.0 / 21.0,
    2.0 / 19.0,
    2.0 / 17.0,
    2.0 / 15.0,
    2.0 / 13.0,
    2.0 / 11.0,
    2.0 / 9.0,
    2.0 / 7.0,
    2.0 / 5.0,
];

/// f64 `erf`: Cephes' `T(x²)` for |x| ≤ 1.
pub(crate) const ERF_F64_T: [f64; 5] = [
    9.604_973_739_870_516,
    9.002_601_972_038_427e1,
    2.232_005_345_946_843e3,
    7.003_325_141_128_051e3,
    5.559_230_130_103_949e4,
];

/// f64 `erf`: Cephes' `U(x²)`.
pub(crate) const ERF_F64_U: [f64; 6] = [
    1.0,
    3.356_171_416_475_031e1,
    5.213_579_497_801_527e2,
    4.594_323_829_709_801e3,
    2.262_900_006_138_909_4e4,
    4.926_739_426_086_359e4,
];

/// f64 `erf`: Cephes' erfc numerator `P(|x|)`.
pub(crate) const ERF_F64_P: [f64; 9] = [
    2.461_969_814_735_305e-10,
    5.641_895_648_310_688e-1,
    7.463_210_564_422_699,
    4.863_719_709_856_814e1,
    1.965_208_329_560_771e2,
    5.264_451_949_954_773e2,
    9.345_285_271_719_576e2,
    1.027_551_886_895_157e3,
    5.575_353_353_693_993e2,
];

/// f64 `erf`: Cephes' erfc denominator `Q(|x|)`.
pub(crate) const ERF_F64_Q: [f64; 9] = [
    1.0,
    1.322_819_511_547_449_9e1,
    8.670_721_408_859_897e1,
    3.549_377_788_878_199e2,
    9.757_085_017_432_055e2,
    1.823_909_166_879_097_4e3,
    2.246_337_608_187_109_8e3,
    1.656_663_091_941_613_5e3,
    5.575_353_408_177_277e2,
];

/// f64 `sin`/`cos`: π/2 in four parts (the first three of 26 bits).
pub(crate) const SINCOS_F64_PI_2: [f64; 4] = [
    1.570_796_310_901_641_8,
    1.589_325_471_229_585_7e-8,
    6.123_233_932_053_594e-17,
    6.368_317_163_510_95e-25,
];

/// f64 `sin`/`cos`: beyond this |x| libm.
pub(crate) const SINCOS_F64_LIMIT: f64 = 1e5;

/// f64 `sin`: Cephes' polynomial in x².
pub(crate) const SIN_F64_P: [f64; 6] = [
    1.589_623_015_765_465_7e-10,
    -2.505_074_776_285_780_7e-8,
    2.755_731_362_138_572_3e-6,
    -1.984_126_982_958_954e-4,
    8.333_333_333_322_118e-3,
    -1.666_666_666_666_663e-1,
];

/// f64 `cos`: Cephes' polynomial in x².
pub(crate) const COS_F64_P: [f64; 6] = [
    -1.135_853_652_138_768_2e-11,
    2.087_570_084_197_473e-9,
    -2.755_731_417_929_674e-7,
    2.480_158_728_885_170_5e-5,
    -1.388_888_888_887_305_6e-3,
    4.166_666_666_666_659_3e-2,
];

impl KernelGen<'_, '_> {
    /// `e^x` for f32 (scalar or F32X4): [`approx::exp`]. Within 2 ulp of
    /// a correctly rounded result (tested); NaN, ±inf and overflow behave
    /// as `expf`.
    pub(super) fn exp_f32(&mut self, x: Value, ty: Type) -> Value {
        approx::exp(&mut Clif::new(self, ty), x)
    }

    /// `e^x - 1` for f32 or f64 (scalar or vector): [`approx::expm1`].
    pub(super) fn expm1(&mut self, x: Value, ty: Type) -> Value {
        approx::expm1(&mut Clif::new(self, ty), x)
    }

    /// `ln(1 + x)` for f32 or f64 (scalar or vector): [`approx::log1p`].
    pub(super) fn log1p(&mut self, x: Value, ty: Type) -> Value {
        approx::log1p(&mut Clif::new(self, ty), x)
    }

    /// `sin x` or `cos x` for f32 or f64 (scalar or vector):
    /// [`approx::sincos`]. Vectors with a lane
    /// beyond the reduction's range (|x| > 8192 for f32, 10^5 for f64) take
    /// a cold path through libm. NaN and ±inf give NaN.
    pub(super) fn sincos(&mut self, x: Value, ty: Type, cos: bool) -> Result<Value> {
        let f64_lanes = ty.lane_type() == types::F64;
        let limit = if f64_lanes {
            SINCOS_F64_LIMIT
        } else {
            SINCOS_F32_LIMIT
        };
        let inline = approx::sincos(&mut Clif::new(self, ty), x, cos);
        let a = self.b.ins().fabs(x);
        // Huge finite lanes: the whole value through libm, off the hot path.
        let limit = self.splat_f(ty, limit);
        let huge = fcmp(self.b, FloatCC::GreaterThan, a, limit);
        let any = if ty.is_vector() {
            self.b.ins().vany_true(huge)
        } else {
            huge
        };
        let cold = self.b.create_block();
        let done = self.b.create_block();
        self.b.append_block_param(done, ty);
        self.b.ins().brif(any, cold, &[], done, &[inline.into()]);
        self.b.switch_to_block(cold);
        self.b.seal_block(cold);
        self.b.set_cold_block(cold);
        let op = if cos { UnaryOp::Cos } else { UnaryOp::Sin };
        let code = self.b.ins().iconst(types::I32, op as i64);
        let libm = if f64_lanes { RtFn::F64Un } else { RtFn::F32Un };
        let slow = if ty.is_vector() {
            let mut v = x;
            for i in 0..ty.lane_count() as u8 {
                let e = self.b.ins().extractlane(x, i);
                let y = self.call(libm, &[code, e])?[0];
                v = self.b.ins().insertlane(v, y, i);
            }
            v
        } else {
            self.call(libm, &[code, x])?[0]
        };
        self.b.ins().jump(done, &[slow.into()]);
        self.b.switch_to_block(done);
        self.b.seal_block(done);
        Ok(self.b.block_params(done)[0])
    }

    /// `erf x` for f32 (scalar or F32X4): [`approx::erf_f32`] (Eigen's and
    /// XLA's rational form, evaluated in f64).
    pub(super) fn erf_f32(&mut self, x: Value, ty: Type) -> Value {
        approx::erf_f32(&mut Clif::new(self, ty), x)
    }

    /// `erf x` for f64 (scalar or F64X2), after Cephes' `ndtr.c`: for
    /// |x| ≤ 1 `x·T(x²)/U(x²)`, else `1 - e^(-x²)·P(|x|)/Q(|x|)` with the
    /// inline exp and the sign of x (|x| clamped to 6, past which erf is ±1
    /// in f64; the error of e^(-x²) from rounding x² is below erfc's weight
    /// there). NaN propagates, -0 stays -0.
    pub(super) fn erf_f64(&mut self, x: Value, ty: Type) -> Value {
        approx::erf_f64(&mut Clif::new(self, ty), x)
    }

    /// `f` applied to f32 values (scalars or F32X4) in f64 precision: each
    /// vector is widened into two F64X2 halves, `f` evaluated on each half,
    /// and the results narrowed and joined back. `f` gets the f64 type.
    fn in_f64(
        &mut self,
        xs: &[Value],
        ty: Type,
        mut f: impl FnMut(&mut Self, &[Value], Type) -> Value,
    ) -> Value {
        if !ty.is_vector() {
            let w: Vec<Value> = xs
                .iter()
                .map(|x| self.b.ins().fpromote(types::F64, *x))
                .collect();
            let y = f(self, &w, types::F64);
            return self.b.ins().fdemote(types::F32, y);
        }
        let flags = MemFlagsData::new().with_endianness(Endianness::Little);
        let high_first: [u8; 16] = std::array::from_fn(|i| 8 + (i % 8) as u8);
        let high_first = self.b.func.dfg.immediates.push(high_first.to_vec().into());
        let mut lo = Vec::with_capacity(xs.len());
        let mut hi = Vec::with_capacity(xs.len());
        for x in xs {
            lo.push(self.b.ins().fvpromote_low(*x));
            let bytes = self.b.ins().bitcast(types::I8X16, flags, *x);
            let swapped = self.b.ins().shuffle(bytes, bytes, high_first);
            let swapped = self.b.ins().bitcast(ty, flags, swapped);
            hi.push(self.b.ins().fvpromote_low(swapped));
        }
        let ylo = f(self, &lo, types::F64X2);
        let yhi = f(self, &hi, types::F64X2);
        let nlo = self.b.ins().fvdemote(ylo);
        let nhi = self.b.ins().fvdemote(yhi);
        let blo = self.b.ins().bitcast(types::I8X16, flags, nlo);
        let bhi = self.b.ins().bitcast(types::I8X16, flags, nhi);
        let join: [u8; 16] = std::array::from_fn(|i| if i < 8 { i as u8 } else { 8 + i as u8 });
        let join = self.b.func.dfg.immediates.push(join.to_vec().into());
        let y = self.b.ins().shuffle(blo, bhi, join);
        self.b.ins().bitcast(ty, flags, y)
    }

    /// The negation of a comparison result: lane masks are all ones or
    /// zeros, scalar results 1 or 0.
    fn not_mask(&mut self, m: Value, ty: Type) -> Value {
        if ty.is_vector() {
            self.b.ins().bnot(m)
        } else {
            self.b.ins().bxor_imm_u(m, 1)
        }
    }

    /// The integer type of `ty`'s shape (F32X4 → I32X4, F64 → I64, ...).
    fn int_ty(ty: Type) -> Type {
        match (ty.lane_type() == types::F64, ty.is_vector()) {
            (false, false) => types::I32,
            (false, true) => types::I32X4,
            (true, false) => types::I64,
            (true, true) => types::I64X2,
        }
    }

    /// `r` with the sign bit of `x` (`r` non-negative), by bit operations
    /// (x64 has no vector `fcopysign`): [`approx::with_sign_of`].
    pub(super) fn with_sign_of(&mut self, r: Value, x: Value, ty: Type) -> Value {
        approx::with_sign_of(&mut Clif::new(self, ty), r, x)
    }

    /// `1 / (1 + e^-x)` for f32 or f64: [`approx::logistic`].
    pub(super) fn logistic(&mut self, x: Value, ty: Type) -> Value {
        approx::logistic(&mut Clif::new(self, ty), x)
    }

    /// `tanh x` for f32 or f64 (scalar or vector): [`approx::tanh`].
    /// Within 4 ulp (f32) or 2 ulp (f64) of a correctly rounded result
    /// (tested); NaN propagates, ±inf give ±1.
    pub(super) fn tanh(&mut self, x: Value, ty: Type) -> Value {
        approx::tanh(&mut Clif::new(self, ty), x)
    }

    /// `ln x` for f64 (scalar or F64X2): [`approx::ln`].
    pub(super) fn log_f64(&mut self, x: Value, ty: Type) -> Value {
        approx::ln(&mut Clif::new(self, ty), x)
    }

    /// `x^y` for f32 (scalar or F32X4): [`approx::pow_f32`] (`e^(y·ln|x|)`
    /// in f64, rounded once, then IEEE `pow`'s special cases).
    pub(super) fn pow_f32(&mut self, x: Value, y: Value, ty: Type) -> Value {
        approx::pow_f32(&mut Clif::new(self, ty), x, y)
    }

    /// `x^y` for f64 (scalar or F64X2): [`approx::pow_f64`] (`ln|x|` and
    /// `y·ln|x|` in double-double). Needs FMA (the exact products); without
    /// it f64 `pow` stays a libm call.
    pub(super) fn pow_f64(&mut self, x: Value, y: Value, ty: Type) -> Value {
        approx::pow_f64(&mut Clif::new(self, ty), x, y)
    }

    /// `a·b + c`: one fused multiply-add where the host has FMA (inside
    /// the approximations only), else a multiply and an add.
    fn mul_add(&mut self, a: Value, b: Value, c: Value) -> Value {
        if has_fma() {
            self.b.ins().fma(a, b, c)
        } else {
            let m = self.b.ins().fmul(a, b);
            self.b.ins().fadd(m, c)
        }
    }

    /// `e^x` for f64 (scalar or F64X2): [`approx::exp`]. Within 2 ulp of
    /// glibc's `exp` (tested).
    pub(super) fn exp_f64(&mut self, x: Value, ty: Type) -> Value {
        approx::exp(&mut Clif::new(self, ty), x)
    }

    /// `ln x` for f32 (scalar or F32X4): [`approx::ln`]. Within 4 ulp of a
    /// correctly rounded result (tested).
    pub(super) fn log_f32(&mut self, x: Value, ty: Type) -> Value {
        approx::ln(&mut Clif::new(self, ty), x)
    }
}

/// [`approx::Ops`] as Cranelift instructions of type `ty` (a float scalar
/// or vector), emitted into the kernel being built.
struct Clif<'g, 'a, 'b> {
    g: &'g mut KernelGen<'a, 'b>,
    ty: Type,
    ity: Type,
}

impl<'g, 'a, 'b> Clif<'g, 'a, 'b> {
    fn new(g: &'g mut KernelGen<'a, 'b>, ty: Type) -> Self {
        let ity = KernelGen::int_ty(ty);
        Clif { g, ty, ity }
    }
}

impl approx::Ops for Clif<'_, '_, '_> {
    type V = Value;
    type M = Value;
    type I = Value;

    fn f64(&self) -> bool {
        self.ty.lane_type() == types::F64
    }
    fn c(&mut self, v: f64) -> Value {
        self.g.splat_f(self.ty, v)
    }
    fn add(&mut self, a: Value, b: Value) -> Value {
        self.g.b.ins().fadd(a, b)
    }
    fn sub(&mut self, a: Value, b: Value) -> Value {
        self.g.b.ins().fsub(a, b)
    }
    fn mul(&mut self, a: Value, b: Value) -> Value {
        self.g.b.ins().fmul(a, b)
    }
    fn div(&mut self, a: Value, b: Value) -> Value {
        self.g.b.ins().fdiv(a, b)
    }
    fn fma(&mut self, a: Value, b: Value, c: Value) -> Value {
        self.g.mul_add(a, b, c)
    }
    fn abs(&mut self, a: Value) -> Value {
        self.g.b.ins().fabs(a)
    }
    fn neg(&mut self, a: Value) -> Value {
        self.g.b.ins().fneg(a)
    }
    fn lt(&mut self, a: Value, b: Value) -> Value {
        fcmp(self.g.b, FloatCC::LessThan, a, b)
    }
    fn le(&mut self, a: Value, b: Value) -> Value {
        fcmp(self.g.b, FloatCC::LessThanOrEqual, a, b)
    }
    fn ge(&mut self, a: Value, b: Value) -> Value {
        fcmp(self.g.b, FloatCC::GreaterThanOrEqual, a, b)
    }
    fn eq(&mut self, a: Value, b: Value) -> Value {
        fcmp(self.g.b, FloatCC::Equal, a, b)
    }
    fn ult(&mut self, a: Value, b: Value) -> Value {
        fcmp(self.g.b, FloatCC::UnorderedOrLessThan, a, b)
    }
    fn select(&mut self, m: Value, a: Value, b: Value) -> Value {
        self.g.sel(m, a, b, self.ty)
    }
    fn bits(&mut self, a: Value) -> Value {
        self.g.b.ins().bitcast(self.ity, MemFlagsData::new(), a)
    }
    fn of_bits(&mut self, i: Value) -> Value {
        self.g.b.ins().bitcast(self.ty, MemFlagsData::new(), i)
    }
    fn ic(&mut self, v: i64) -> Value {
        self.g.splat_i(self.ity, v)
    }
    fn iadd(&mut self, a: Value, b: Value) -> Value {
        self.g.b.ins().iadd(a, b)
    }
    fn isub(&mut self, a: Value, b: Value) -> Value {
        self.g.b.ins().isub(a, b)
    }
    fn iand(&mut self, a: Value, b: Value) -> Value {
        self.g.b.ins().band(a, b)
    }
    fn ior(&mut self, a: Value, b: Value) -> Value {
        self.g.b.ins().bor(a, b)
    }
    fn ishl(&mut self, a: Value, k: u32) -> Value {
        self.g.b.ins().ishl_imm_s(a, i64::from(k))
    }
    fn ixor(&mut self, a: Value, b: Value) -> Value {
        self.g.b.ins().bxor(a, b)
    }
    fn inz(&mut self, a: Value) -> Value {
        let zero = self.g.splat_i(self.ity, 0);
        self.g.b.ins().icmp(IntCC::NotEqual, a, zero)
    }
    fn iushr(&mut self, a: Value, k: u32) -> Value {
        self.g.b.ins().ushr_imm_s(a, i64::from(k))
    }
    fn to_float(&mut self, a: Value) -> Value {
        self.g.b.ins().fcvt_from_sint(self.ty, a)
    }
    fn nearest(&mut self, a: Value) -> Value {
        self.g.b.ins().nearest(a)
    }
    fn and(&mut self, a: Value, b: Value) -> Value {
        self.g.b.ins().band(a, b)
    }
    fn or(&mut self, a: Value, b: Value) -> Value {
        self.g.b.ins().bor(a, b)
    }
    fn not(&mut self, a: Value) -> Value {
        self.g.not_mask(a, self.ty)
    }
    fn in_f64<F: approx::InF64>(&mut self, xs: &[Value], f: &F) -> Value {
        if self.f64() {
            return f.eval(self, xs);
        }
        self.g
            .in_f64(xs, self.ty, |cg, v, t| f.eval(&mut Clif::new(cg, t), v))
    }
}
