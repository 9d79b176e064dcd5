//! Loop tiling of planned kernels: a kernel's loop nest is only its dims
//! and the affine strides of its loads, iotas and output, so splitting a
//! dim into blocks and reordering the loops is a rewrite of those strides
//! that computes every element as before (a reduction still folds each
//! output's elements in the same order).
//!
//! - A transposed read (a load that jumps a cache line or more per step
//!   of the innermost dim and is contiguous along another) runs in 16×16
//!   tiles of those two dims: the sixteen lines a tile reads stay in L1
//!   while the tile's columns are written, where an untiled row read one
//!   element of every line it touched and came back for the next after
//!   the lines had left the cache. A tile of a plain copy moves 4×4
//!   blocks through vector registers (`codegen::loops`), or on AVX-512
//!   hosts, of 4- and 8-byte elements, the whole tile
//!   (`codegen::transpose`).
//! - A reduction over its outermost dim that keeps the innermost (a sum
//!   over the rows of a matrix) runs over blocks of columns, the blocks
//!   outermost: the blocks write disjoint outputs, so the kernel splits
//!   over cores, where it could not while its outermost dim was reduced.

use crate::fusion::{ENode, Kernel, KernelKind, Plan, Step};

/// One loop of a tiled kernel: `size` steps of the original loop dim
/// `dim`, `step` of its indices each.
struct Loop {
    dim: usize,
    size: usize,
    step: i64,
}

/// Rewrites `k`'s loop nest as `loops` (outermost first); every original
/// index `i[d]` is the sum of `step·j` over the new loops `j` of dim `d`.
fn retile(k: &mut Kernel, loops: &[Loop]) {
    let map = |s: &mut Vec<i64>| {
        *s = loops.iter().map(|l| s[l.dim] * l.step).collect();
    };
    for n in &mut k.nodes {
        if let Some(strides) = n.strides_mut() {
            map(strides);
        }
    }
    map(&mut k.out_strides);
    if let Some(st) = &mut k.stash {
        map(&mut st.strides);
    }
    match &mut k.kind {
        KernelKind::Reduce { reduced, .. } => {
            *reduced = loops.iter().map(|l| reduced[l.dim]).collect();
        }
        KernelKind::Loop => {}
    }
    k.dims = loops.iter().map(|l| l.size).collect();
}

/// Side of a transpose tile.
const TILE: usize = 16;

/// Bytes from which a load's step along the innermost dim counts as a
/// jump (a cache line).
const JUMP_BYTES: i64 = 64;

/// For a loop kernel that reads some operand transposed: `(p, q)`, the
/// dim `p` along which that operand is contiguous and the innermost dim
/// `q`, when both split into whole tiles.
fn transposed_read(k: &Kernel) -> Option<(usize, usize)> {
    let r = k.dims.len();
    if !matches!(k.kind, KernelKind::Loop) || k.stash.is_some() || r < 2 {
        return None;
    }
    let q = r - 1;
    if k.out_strides[q] != 1 || !k.dims[q].is_multiple_of(TILE) || k.dims[q] < 2 * TILE {
        return None;
    }
    k.nodes.iter().find_map(|n| {
        let strides = n.strides().filter(|_| jumps(n, q))?;
        (0..q)
            .find(|&p| strides[p] == 1 && k.dims[p].is_multiple_of(TILE) && k.dims[p] >= 2 * TILE)
            .map(|p| (p, q))
    })
}

/// Tiles `k` over dims `p` and `q` (the innermost): both split into
/// blocks of [`TILE`], the blocks in the dims' places, the two tile dims
/// innermost (`p`'s, then `q`'s).
fn tile_transpose(k: &mut Kernel, p: usize, q: usize) {
    let mut loops: Vec<Loop> = (0..k.dims.len())
        .map(|d| {
            let tiled = d == p || d == q;
            Loop {
                dim: d,
                size: if tiled { k.dims[d] / TILE } else { k.dims[d] },
                step: if tiled { TILE as i64 } else { 1 },
            }
        })
        .collect();
    for d in [p, q] {
        loops.push(Loop {
            dim: d,
            size: TILE,
            step: 1,
        });
    }
    retile(k, &loops);
}

/// Bytes of a block of columns of a column reduction (see
/// [`column_blocks`]): 512 f32 columns of a 4096×1024 sum over rows took
/// 0.34 ms on two cores, 128 took 0.41, 256 0.37, untiled on one core
/// 0.65 (2026-11-25, AVX-512 host).
const COLUMN_BLOCK_BYTES: usize = 2048;

/// The narrowest block of columns [`column_blocks`] makes to give every
/// thread of a large pool a block: a cache line.
const COLUMN_BLOCK_MIN_BYTES: usize = 64;

/// For a reduction whose outermost dim is reduced (it cannot split over
/// cores) and whose innermost dim is the only one kept: the width of the
/// blocks of columns that become its outermost dim, when that dim splits
/// into at least two whole blocks. (Another kept dim — one that did not
/// merge with the columns: a transposed or reversed operand — would make
/// a block's outputs strided, and a range of blocks is set up as one run
/// of outputs.) Blocks of [`COLUMN_BLOCK_BYTES`], halved (down
/// to a cache line) while there are fewer blocks than `threads` (the pool
/// the kernel splits over: 16 cores sum 1024 columns in 16 blocks of 64,
/// not 2 of 512). Each column is still summed over its rows in order.
fn column_blocks(k: &Kernel, esize: usize, threads: usize) -> Option<usize> {
    let KernelKind::Reduce { reduced, .. } = &k.kind else {
        return None;
    };
    let r = k.dims.len();
    if r < 2 || k.stash.is_some() || reduced[r - 1] || !reduced[..r - 1].iter().all(|&d| d) {
        return None;
    }
    let esize = esize.max(1);
    let mut block = COLUMN_BLOCK_BYTES / esize;
    let n = k.dims[r - 1];
    if !(n.is_multiple_of(block) && n >= 2 * block) {
        return None;
    }
    while n / block < threads && block / 2 * esize >= COLUMN_BLOCK_MIN_BYTES {
        block /= 2;
    }
    Some(block)
}

/// Splits the innermost dim of `k` into blocks of `block` columns and
/// puts the blocks outermost.
fn tile_columns(k: &mut Kernel, block: usize) {
    let r = k.dims.len();
    let mut loops = vec![Loop {
        dim: r - 1,
        size: k.dims[r - 1] / block,
        step: block as i64,
    }];
    loops.extend((0..r - 1).map(|d| Loop {
        dim: d,
        size: k.dims[d],
        step: 1,
    }));
    loops.push(Loop {
        dim: r - 1,
        size: block,
        step: 1,
    });
    retile(k, &loops);
}

/// Tiles the plan's kernels that read an operand transposed (kernels of
/// row groups keep their shared rows).
pub(crate) fn tile_kernels(plan: &mut Plan) {
    for i in 0..plan.steps.len() {
        if plan.groups.iter().any(|g| (g.start..g.end).contains(&i)) {
            continue;
        }
        let Step::Kernel(k) = &mut plan.steps[i] else {
            continue;
        };
        let esize = plan.slots[k.out].dtype.size();
        if let Some((p, q)) = transposed_read(k) {
            tile_transpose(k, p, q);
            plan.decisions.push(format!(
                "{}: tiled {TILE}×{TILE} over loop dims {p} and {q} (a transposed read)",
                k.name
            ));
        } else if let Some(block) = column_blocks(k, esize, tensorlift_runtime::pool::threads()) {
            tile_columns(k, block);
            plan.decisions.push(format!(
                "{}: columns in blocks of {block}, the blocks outermost (a column reduction)",
                k.name
            ));
        }
    }
}

/// Whether some load of `k` jumps a cache line or more per step of the
/// innermost dim: elements read one by one at a cache miss's latency, not
/// at memory bandwidth, so a second core pays even for a copy.
pub(crate) fn jumping_read(k: &Kernel) -> bool {
    let Some(q) = k.dims.len().checked_sub(1) else {
        return false;
    };
    k.nodes.iter().any(|n| jumps(n, q))
}

/// Whether `n` is a load that steps a cache line or more per step of
/// loop dim `q`.
fn jumps(n: &ENode, q: usize) -> bool {
    matches!(n, ENode::Load { strides, dtype, .. }
        if strides[q].unsigned_abs().saturating_mul(dtype.size() as u64) >= JUMP_BYTES as u64)
}

/// Whether `k` reduces a middle dim between kept outer and innermost
/// ones (a column reduction [`tile_kernels`] split into blocks, or a sum
/// over a middle axis): its rows are summed by `tl_wide_cols_*` at the
/// speed of reading them from cache, so a second core pays even though
/// each element costs one add.
pub(crate) fn blocked_columns(k: &Kernel) -> bool {
    matches!(&k.kind, KernelKind::Reduce { reduced, .. }
        if reduced.len() >= 3 && !reduced[0] && reduced[1] && !reduced[reduced.len() - 1])
}
