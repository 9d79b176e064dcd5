//! Stopping a long computation when its caller asks: the embedding
//! registers a check (the Python package: a pending Ctrl-C) that loops
//! poll — interpreted ones and compiled ones that call the runtime at
//! every iteration, other compiled ones every [`POLL_EVERY`] iterations.
//! Without a registered check, polling costs a load and a branch.

use std::sync::OnceLock;

use crate::Result;

static CHECK: OnceLock<fn() -> Result<()>> = OnceLock::new();

/// Iterations of a compiled loop of inline code between two polls (a
/// power of two: such loops mask their iteration counter with
/// `POLL_EVERY - 1`).
pub const POLL_EVERY: u64 = 1 << 14;

/// Registers `check`, which returns the error a computation stops with
/// when it must stop; the first registration holds (later ones return
/// false).
pub fn set_check(check: fn() -> Result<()>) -> bool {
    CHECK.set(check).is_ok()
}

/// The registered check's verdict: `Ok` to go on.
pub fn poll() -> Result<()> {
    match CHECK.get() {
        Some(check) => check(),
        None => Ok(()),
    }
}
