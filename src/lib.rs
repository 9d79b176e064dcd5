//! tensorlift: an XLA-style JIT compiler for tensor graphs, with host
//! callbacks as the escape hatch.
//!
//! [`function`] traces a Rust closure over symbolic values ([`Sym`]) into a
//! graph, once per input signature; [`Function::call`] optimizes it and runs
//! it through the reference interpreter, or — with
//! [`Function::jit_compile`] — compiles it to native code with Cranelift.
//! See `docs/architecture.md` and `docs/compiler.md`.

mod bind;
pub mod cli;
mod contrib;
mod control;
mod function;
#[doc(hidden)]
pub mod fuzz;
mod gradcheck;
pub mod npy;
#[cfg(feature = "python")]
pub mod python;
mod staged;
mod tape;
pub use staged::{CompiledGraph, compile_graph, copy_outputs};
mod trace;

pub use bind::{CallbackTarget, bind_host_fn, callback_target, callback_targets};
#[cfg(feature = "python")]
pub use contrib::PyArg;
pub use control::{
    Branch, Recorded, cond, custom_vjp, fori_loop, scan, switch, vjp_in_trace, vjp_of_values,
    vjp_of_values_recorded, while_loop,
};
pub use function::{
    CompiledFunction, ConcreteFunction, Function, IntoOutputs, IrStage, SliceArgs, TensorSpec,
    TraceBody, function,
};
pub use gradcheck::{GradCheck, Mode, check_grads};
pub use tensorlift_compiler::{Executable, JitOptions, OptLevel};
pub use tensorlift_ir::{
    Code, Combiner, DType, Detail, DotDims, Error, Graph, NodeRef, Offender, Result, Shape, Site,
    TensorType,
};
pub use tensorlift_runtime::nest::{Mismatch, Nest, NestPath, PathItem};
pub use tensorlift_runtime::{HostElement, Tensor, TensorMut, TensorRef};
pub use trace::{HostFnArc, Operand, Sym, Tracer};

/// Binds a Python callable to a callback target of a graph (a parsed
/// program's callbacks have no body): [`python::bind`].
#[cfg(feature = "python")]
pub use python::bind as bind_python;

/// The compiler crate (fusion, Cranelift code generation).
pub use tensorlift_compiler as compiler;
/// The IR crate (graphs, text format, passes).
pub use tensorlift_ir as ir;
/// The runtime crate (tensors, interpreter).
pub use tensorlift_runtime as runtime;
