//! Fuzzing support, used by the `tensorlift-fuzz` binary, the fuzz
//! regression tests and the property tests: a random well-typed graph
//! generator ([`random_graph`]), a byte mutator ([`mutate`]), the fuzz
//! targets ([`targets`]) and a driver that runs them in a child process
//! ([`driver`]). See `docs/reliability.md`. Not a stable API.

pub mod driver;
pub mod mutate;
pub mod random_graph;
pub mod targets;
