//! The random graph generator of `tensorlift::fuzz::random_graph`, with
//! the panicking signatures the tests use.
#![allow(
    dead_code,
    unused_imports,
    clippy::unwrap_used,
    reason = "test helpers: each test uses some"
)]

pub use tensorlift::fuzz::random_graph::{DTYPES, Rng, scalar};
use tensorlift::ir::TensorType;
use tensorlift::{Graph, Tensor};

/// [`tensorlift::fuzz::random_graph::random_tensor`]; panics on a dynamic shape.
pub fn random_tensor(rng: &mut Rng, ty: &TensorType) -> Tensor {
    tensorlift::fuzz::random_graph::random_tensor(rng, ty).unwrap()
}

/// [`tensorlift::fuzz::random_graph::random_graph`].
pub fn random_graph(seed: u64, n_ops: usize) -> (Graph, Vec<Tensor>) {
    tensorlift::fuzz::random_graph::random_graph(seed, n_ops).unwrap()
}
