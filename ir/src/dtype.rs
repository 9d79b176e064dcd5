//! Element types.

use std::fmt;
use std::str::FromStr;

/// The element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// Boolean, stored as one byte (0 or 1).
    Bool,
    /// Signed 8-bit integer.
    I8,
    /// Signed 16-bit integer.
    I16,
    /// Signed 32-bit integer.
    I32,
    /// Signed 64-bit integer.
    I64,
    /// Unsigned 8-bit integer.
    U8,
    /// Unsigned 16-bit integer.
    U16,
    /// Unsigned 32-bit integer.
    U32,
    /// Unsigned 64-bit integer.
    U64,
    /// IEEE half precision (computed in f32).
    F16,
    /// bfloat16 (computed in f32).
    BF16,
    /// IEEE single precision.
    F32,
    /// IEEE double precision.
    F64,
    /// Complex number of two f32.
    C64,
    /// Complex number of two f64.
    C128,
    /// Opaque byte string: only parameters, constants, results and callbacks
    /// may produce or consume it.
    String,
}

/// Every dtype, in declaration order.
pub const ALL_DTYPES: [DType; 16] = [
    DType::Bool,
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::U16,
    DType::U32,
    DType::U64,
    DType::F16,
    DType::BF16,
    DType::F32,
    DType::F64,
    DType::C64,
    DType::C128,
    DType::String,
];

impl DType {
    /// The text name used in `.tlir` files and error messages (TensorFlow's
    /// spelling: `float32`, `int64`, `complex64`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::U8 => "uint8",
            DType::U16 => "uint16",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::C64 => "complex64",
            DType::C128 => "complex128",
            DType::String => "string",
        }
    }

    /// The short name used in `.tlir` type annotations (`f32`, `i64`, `c64`).
    pub fn short_name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::C64 => "c64",
            DType::C128 => "c128",
            DType::String => "string",
        }
    }

    /// Bytes per element; strings have no fixed size and report 0.
    pub fn size(self) -> usize {
        match self {
            DType::Bool | DType::I8 | DType::U8 => 1,
            DType::I16 | DType::U16 | DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::U64 | DType::F64 | DType::C64 => 8,
            DType::C128 => 16,
            DType::String => 0,
        }
    }

    /// Signed or unsigned integer (not bool).
    pub fn is_int(self) -> bool {
        self.is_signed_int() || self.is_unsigned_int()
    }

    /// Signed integer.
    pub fn is_signed_int(self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32 | DType::I64)
    }

    /// Unsigned integer.
    pub fn is_unsigned_int(self) -> bool {
        matches!(self, DType::U8 | DType::U16 | DType::U32 | DType::U64)
    }

    /// Real floating point (f16, bf16, f32, f64).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    /// Half-width float computed in f32 (f16, bf16).
    pub fn is_half(self) -> bool {
        matches!(self, DType::F16 | DType::BF16)
    }

    /// Complex.
    pub fn is_complex(self) -> bool {
        matches!(self, DType::C64 | DType::C128)
    }

    /// Integer, float or complex: everything arithmetic is defined on.
    pub fn is_numeric(self) -> bool {
        self.is_int() || self.is_float() || self.is_complex()
    }

    /// Integer or real float: everything that is ordered.
    pub fn is_real(self) -> bool {
        self.is_int() || self.is_float()
    }

    /// Float or complex: what transcendental functions are defined on.
    pub fn is_inexact(self) -> bool {
        self.is_float() || self.is_complex()
    }

    /// The real type of a complex type (`c64` → `f32`); other types unchanged.
    pub fn real_part(self) -> DType {
        match self {
            DType::C64 => DType::F32,
            DType::C128 => DType::F64,
            DType::Bool
            | DType::I8
            | DType::I16
            | DType::I32
            | DType::I64
            | DType::U8
            | DType::U16
            | DType::U32
            | DType::U64
            | DType::F16
            | DType::BF16
            | DType::F32
            | DType::F64
            | DType::String => self,
        }
    }

    /// Parses a long (`float32`) or short (`f32`) name.
    pub fn from_name(s: &str) -> Option<DType> {
        crate::dtype::ALL_DTYPES
            .into_iter()
            .find(|d| d.name() == s || d.short_name() == s)
            .or(match s {
                "half" => Some(DType::F16),
                "float" => Some(DType::F32),
                "double" => Some(DType::F64),
                _ => None,
            })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = crate::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DType::from_name(s).ok_or_else(|| crate::Error::invalid(format!("unknown dtype '{s}'")))
    }
}
