//! What the host has: its CPU features, and the 128-bit vector types of
//! the dtypes.

use cranelift_codegen::ir::{Type, types};
use tensorlift_ir::DType;

use crate::wide;

/// Whether the host has FMA3 (within the cap of [`crate::isa`]): the
/// inline approximations then evaluate their polynomials with fused
/// multiply-adds (Cranelift lowers `fma` natively
/// only then; without it, to a libm call per lane). Graph ops themselves
/// are never contracted, so results of `a * b + c` stay bit-exact.
pub(super) fn has_fma() -> bool {
    crate::isa::has_fma()
}

/// Whether the host has SSE4.2 (`pcmpgtq`: 64-bit lane comparisons).
fn has_sse42() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("sse4.2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the host has SSE4.1 (vector rounding and min/max).
pub(super) fn has_sse41() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("sse4.1")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        true
    }
}

/// Whether `imul` has an instruction for `ty`: scalars, 16- and 32-bit
/// lanes (SSE4.1's `pmullw`/`pmulld`), 64-bit lanes with AVX-512DQ
/// (`vpmullq`; Cranelift's `pmuludq` sequence otherwise, not used). 8-bit
/// lanes have no multiply anywhere.
pub(super) fn has_imul(ty: Type) -> bool {
    !ty.is_vector()
        || match ty.lane_bits() {
            16 | 32 => true,
            64 => wide::has_avx512(),
            _ => false,
        }
}

/// Whether integer `smax`/`umax`/`smin`/`umin` have an instruction for
/// `ty`: scalars, lanes up to 32 bits (SSE4.1's `pmaxsb`…`pminud`),
/// 64-bit lanes with AVX-512VL (`vpmaxsq`…`vpminuq`).
pub(super) fn has_iminmax(ty: Type) -> bool {
    !ty.is_vector() || ty.lane_bits() <= 32 || wide::has_avx512()
}

/// Whether `iabs` has an instruction for `ty`: scalars, lanes up to 32
/// bits (`pabsb/w/d`), 64-bit lanes with AVX-512VL (`vpabsq`).
pub(super) fn has_iabs(ty: Type) -> bool {
    !ty.is_vector() || ty.lane_bits() <= 32 || wide::has_avx512()
}

/// Whether `icmp` has an instruction for `ty`: scalars, lanes up to 32
/// bits, 64-bit lanes with SSE4.2 (`pcmpgtq`).
pub(super) fn has_icmp(ty: Type) -> bool {
    !ty.is_vector() || ty.lane_bits() <= 32 || has_sse42()
}

/// The 128-bit vector type for a dtype's lanes (bool and halves have
/// none: bool's logic stays scalar, halves compute in f32).
pub(super) fn vec_ty(d: DType) -> Option<Type> {
    match d {
        DType::F32 => Some(types::F32X4),
        DType::F64 => Some(types::F64X2),
        DType::I8 | DType::U8 => Some(types::I8X16),
        DType::I16 | DType::U16 => Some(types::I16X8),
        DType::I32 | DType::U32 => Some(types::I32X4),
        DType::I64 | DType::U64 => Some(types::I64X2),
        DType::Bool | DType::F16 | DType::BF16 | DType::C64 | DType::C128 | DType::String => None,
    }
}

/// The integer vector type of a float vector type's lanes.
pub(super) fn math_int_ty(vt: Type) -> Type {
    if vt.lane_type() == types::F64 {
        types::I64X2
    } else {
        types::I32X4
    }
}
