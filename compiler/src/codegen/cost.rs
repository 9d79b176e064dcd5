//! The cost model: what computing an element of a kernel costs, and what
//! a call of it does, which decide whether it is split across threads.

use crate::fusion::Kernel;
use crate::wide;

use super::JitOptions;
use super::target::has_fma;
use super::wide_rows::{WIDE_MIN_ROW, wide_eligible};

/// True when the kernel's outermost loop can be split across threads:
/// different ranges write disjoint outputs (loops, and reductions whose
/// outermost dim is kept), and the kernel is compute-bound or reads an
/// operand transposed. Memory-bound kernels (a few ops per element)
/// already saturate memory bandwidth on one core of the benchmark
/// machine, and splitting them made them slower (fresh output pages
/// faulted in from two threads contend); a transposed read waits on cache
/// misses instead (`tile::jumping_read`), and a sum over a middle dim
/// runs from cache (`tile::blocked_columns`).
pub(crate) fn splittable(k: &Kernel) -> bool {
    crate::fusion::range_capable(k)
        && (element_cost(k) >= MIN_PARALLEL_COST
            || crate::tile::jumping_read(k)
            || crate::tile::blocked_columns(k))
}

/// Rough cost of computing one element (see `fusion::node_cost`).
pub(super) fn element_cost(k: &Kernel) -> usize {
    k.nodes.iter().map(crate::fusion::node_cost).sum()
}

/// Per-element cost from which a kernel is considered compute-bound.
const MIN_PARALLEL_COST: usize = 8;

/// A rough cost of one call: loop iterations times per-element cost, the
/// nodes that wide math evaluates (`wide_nodes`) counted at their cost per
/// 4 lanes (a quarter of it with AVX-512's 16): with them, the exp/tanh
/// chain of the benchmarks runs 2.5x faster on one core, and its crossover
/// moved up as much (docs/benchmarks.md).
pub(crate) fn kernel_work(k: &Kernel, opts: &JitOptions) -> usize {
    let lanes = match wide::lanes() {
        Some(l) if opts.wide_math && !opts.exact && has_fma() => l,
        _ => 4,
    };
    let long_rows = k.dims.last().is_some_and(|n| *n >= WIDE_MIN_ROW);
    let dtype_of = |x: usize| k.nodes[x].dtype();
    // (f64: 2 lanes inline, 8 wide: the same ratio.)
    let cost: usize = (k.nodes.iter())
        .map(|n| match n {
            n if long_rows && wide_eligible(n, dtype_of) => crate::fusion::node_cost(n) * 4 / lanes,
            n => crate::fusion::node_cost(n),
        })
        .sum();
    k.dims.iter().product::<usize>().saturating_mul(cost)
}
