//! The interpreter's kernels: one function per op family, each taking and
//! returning whole tensors.

pub mod elementwise;
pub mod gemm;
pub mod layout;
pub mod reduce;
pub mod scalar;
