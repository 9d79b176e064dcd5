//! tensorlift's JIT compiler (Cranelift backend).
//!
//! Not implemented yet: this crate pins the Cranelift dependencies and will
//! hold the pipeline of `docs/architecture.md` (specialize, check, optimize,
//! fuse, plan buffers, emit Cranelift IR). Nothing here compiles anything,
//! and nothing in tensorlift pretends that it does.
