//! tensorlift's tensor IR.
//!
//! A [`Graph`] is SSA: nodes in topological order, each with an [`Op`] (a
//! closed enum with attributes), operand values, typed results, a unique
//! name, a creation [`Site`] and an [`Effect`]. Types are inferred when a
//! node is added, so an ill-typed graph cannot be built; [`verify`] re-checks
//! parsed or rewritten graphs. [`text`] prints and parses the `.tlir`
//! format; [`passes`] holds the optimization passes.

pub mod autodiff;
pub mod builder;
mod dot;
mod dtype;
mod error;
mod graph;
pub mod infer;
mod literal;
mod op;
pub mod passes;
mod shape;
pub mod text;
mod verify;

pub use dot::to_dot;
pub use dtype::{ALL_DTYPES, DType};
pub use error::{Code, Detail, Error, NodeRef, Offender, Result, Site, TextPos};
pub use graph::{Effect, Graph, NewNode, Node, NodeId, Output, Rewritten, ValueId, ValueInfo};
pub use literal::{Literal, LiteralData, Scalar, narrow as narrow_f32};
pub use op::{
    BinaryOp, CallbackKind, CallbackOp, CallbackRef, CmpOp, Combiner, DotDims, DynamicOp, Op,
    ReduceOp, Region, UnaryOp,
};
pub use shape::{Dim, Shape, TensorType};
pub use verify::verify;
