//! tensorlift's JIT compiler: turns a graph with concrete shapes into native
//! code with Cranelift, XLA-style.
//!
//! Pipeline ([`compile`]): check (everything that cannot be compiled is a
//! `JitIncompatible` error listing every offending node) → optimize (the IR
//! passes) → fuse and plan buffers ([`fusion::plan`]) → emit Cranelift IR
//! ([`codegen`]) → finalize with cranelift-jit. The result is an
//! [`Executable`]: native code, its plan and the runtime tables it calls
//! into. See `docs/compiler.md`.

mod approx;
mod codegen;
mod exec;
pub mod fusion;
mod isa;
mod parallel;
mod rt;
mod tile;
mod wide;

pub use codegen::{JitOptions, OptLevel};
pub use exec::{Executable, check, check_compilable, check_outputs, compile, copy_into};
pub use isa::{IsaLevel, max_isa};
