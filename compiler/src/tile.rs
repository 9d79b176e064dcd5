//! Loop tiling of planned kernels: a kernel's loop nest is only its dims
//! and the affine strides of its loads, iotas and output, so splitting a
//! dim into blocks and reordering the loops is a rewrite of those strides
//! that computes every element as before.
//!
//! A transposed read (a load that jumps a cache line or more per step of
//! the innermost dim and is contiguous along another) runs in 16×16 tiles
//! of those two dims: the sixteen lines a tile reads stay in L1 while the
//! tile's columns are written, where an untiled row read one element of
//! every line it touched and came back for the next after the lines had
//! left the cache. A tile of a plain copy moves 4×4 blocks through vector
//! registers (`codegen::loops`).

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
        match n {
            ENode::Load { strides, .. } | ENode::Iota { strides, .. } => map(strides),
            ENode::Const(_)
            | ENode::Unary(..)
            | ENode::Binary(..)
            | ENode::Compare(..)
            | ENode::Select(..)
            | ENode::Clamp(..)
            | ENode::Convert(..)
            | ENode::Bitcast(..) => {}
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
        let ENode::Load { strides, dtype, .. } = n else {
            return None;
        };
        if strides[q].abs() * (dtype.size() as i64) < JUMP_BYTES {
            return None;
        }
        (0..q)
            .find(|&p| strides[p] == 1 && k.dims[p].is_multiple_of(TILE) && k.dims[p] >= 2 * TILE)
            .map(|p| (p, q))
    })
}

/// Tiles `k` over dims `p` and `q` (the innermost): both split into
/// blocks of [`TILE`], the blocks in the dims' places, the two tile dims
/// innermost (`p`'s, then `q`'s).
fn tile_transpose(k: &mut Kernel, p: usize, q: usize) {
    let t = TILE as i64;
    let mut loops: Vec<Loop> = (0..k.dims.len())
        .map(|d| {
            if d == p || d == q {
                Loop {
                    dim: d,
                    size: k.dims[d] / TILE,
                    step: t,
                }
            } else {
                Loop {
                    dim: d,
                    size: k.dims[d],
                    step: 1,
                }
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
        if let Some((p, q)) = transposed_read(k) {
            tile_transpose(k, p, q);
            plan.decisions.push(format!(
                "{}: tiled {TILE}×{TILE} over loop dims {p} and {q} (a transposed read)",
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
    k.nodes.iter().any(|n| {
        matches!(n, ENode::Load { strides, dtype, .. }
            if strides[q].abs() * (dtype.size() as i64) >= JUMP_BYTES)
    })
}
