//! tensorlift's runtime: [`Tensor`] and the reference interpreter.
//!
//! The interpreter ([`interp::run`]) executes any valid graph op by op; every
//! op materializes its result. Edge cases have defined results (see
//! `docs/ir.md`): integer `x / 0 = -1`, `x % 0 = x`, `MIN / -1 = MIN`,
//! wrapping overflow, NaN-propagating max/min, and a clear error for an
//! out-of-range `take` index.

pub mod callback;
#[cfg(feature = "python")]
pub mod eager;
pub mod fpmode;
pub mod interp;
pub mod interrupt;
pub mod kernels;
mod memory;
pub mod nest;
pub mod pool;
pub use memory::{AllocFailed, trim_buffer_cache};
#[cfg(feature = "python")]
pub mod python;
#[cfg(feature = "python")]
pub mod python_env;
#[cfg(feature = "python")]
pub mod python_nest;
mod tensor;

pub use tensor::{
    AlignedBytes, Data, ForeignBytes, HostElement, Pod, Tensor, TensorMut, TensorRef,
};
pub use tensorlift_ir::{Error, Result};
