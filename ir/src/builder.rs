//! NumPy-style conveniences that add nodes to a [`Graph`]: broadcasting,
//! axis normalization, matmul as `dot_general`. The Rust tracer builds with
//! them, and they expand a [`DynamicOp`] once its operands' ranks are
//! known: an operand of unknown rank makes them record the op as
//! [`Op::Dynamic`] instead, to be expanded later by the same code.
//!
//! Errors are `InvalidArgument` naming the op, a fresh node name and the
//! creation site.

use crate::infer::broadcast_shapes;
use crate::{
    BinaryOp, CmpOp, Combiner, DType, Detail, DotDims, DynamicOp, Error, Graph, NodeRef, Op,
    ReduceOp, Result, Shape, Site, ValueId,
};

fn fail(g: &mut Graph, op: &str, site: &Site, message: String) -> Error {
    Error::InvalidArgument(Detail {
        message,
        node: Some(NodeRef {
            name: g.fresh_name(op),
            op: op.into(),
            site: site.clone(),
        }),
        pos: None,
    })
}

/// `axes` (negative ones count from the end) as sorted, unique dims of a
/// rank-`rank` tensor.
pub fn normalize_axes(rank: usize, axes: &[i64]) -> std::result::Result<Vec<usize>, String> {
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let r = rank as i64;
        let n = if a < 0 { a + r } else { a };
        if n < 0 || n >= r || out.contains(&(n as usize)) {
            return Err(format!(
                "axis {a} is out of range or repeated for rank {rank}"
            ));
        }
        out.push(n as usize);
    }
    out.sort_unstable();
    Ok(out)
}

/// `x` broadcast to `shape` with NumPy's rule (trailing dims aligned), as an
/// explicit `broadcast_in_dim`; `x` itself when it already has that shape
/// or either rank is unknown.
pub fn broadcast_to_shape(
    g: &mut Graph,
    x: ValueId,
    shape: &Shape,
    site: &Site,
) -> Result<ValueId> {
    let t = g.ty(x).clone();
    if t.shape == *shape {
        return Ok(x);
    }
    let (Some(from), Some(to)) = (t.shape.rank(), shape.rank()) else {
        return Ok(x);
    };
    if from > to {
        return Err(fail(
            g,
            "broadcast_in_dim",
            site,
            format!("cannot broadcast {t} to the lower rank {shape}"),
        ));
    }
    g.add(
        Op::BroadcastInDim {
            shape: shape.clone(),
            dims: (to - from..to).collect(),
        },
        &[x],
        site.clone(),
    )
}

/// An elementwise op of two operands: what [`binary`] builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Elementwise {
    /// An elementwise binary op.
    Binary(BinaryOp),
    /// A comparison.
    Compare(CmpOp),
}

impl Elementwise {
    /// As an IR op.
    pub fn op(self) -> Op {
        match self {
            Elementwise::Binary(b) => Op::Binary(b),
            Elementwise::Compare(c) => Op::Compare(c),
        }
    }

    /// As a [`DynamicOp`] (operands of unknown rank).
    pub fn dynamic(self) -> DynamicOp {
        match self {
            Elementwise::Binary(b) => DynamicOp::Binary(b),
            Elementwise::Compare(c) => DynamicOp::Compare(c),
        }
    }
}

/// An elementwise binary op or comparison with NumPy broadcasting; rank-0
/// operands stay scalars (the IR splats them).
pub fn binary(
    g: &mut Graph,
    e: Elementwise,
    x: ValueId,
    y: ValueId,
    site: &Site,
) -> Result<ValueId> {
    let op = e.op();
    let (a, b) = (g.ty(x).clone(), g.ty(y).clone());
    let name = op.name();
    if a.dtype != b.dtype {
        return Err(fail(
            g,
            &name,
            site,
            format!(
                "operand dtypes differ: {a} vs {b} (binary ops need equal dtypes; cast one operand)"
            ),
        ));
    }
    let (ra, rb) = (a.shape.rank(), b.shape.rank());
    if ra == Some(0) || rb == Some(0) {
        return g.add(op, &[x, y], site.clone());
    }
    if ra.is_none() || rb.is_none() {
        return g.add(Op::Dynamic(e.dynamic()), &[x, y], site.clone());
    }
    let shape = match broadcast_shapes(&a.shape, &b.shape) {
        Ok(s) => s,
        Err(m) => return Err(fail(g, &name, site, m)),
    };
    // A broadcast to a shape with dims unknown until the call (a None dim
    // of an input signature: a bias added to a batch) is expanded once the
    // function is specialized to its arguments' shapes, as unranked
    // operands are: `broadcast_in_dim` needs the sizes of the dims it adds.
    let unknown = shape.dims().is_some_and(|d| d.contains(&None));
    if unknown && (a.shape != shape || b.shape != shape) {
        return g.add(Op::Dynamic(e.dynamic()), &[x, y], site.clone());
    }
    let x = broadcast_to_shape(g, x, &shape, site)?;
    let y = broadcast_to_shape(g, y, &shape, site)?;
    g.add(op, &[x, y], site.clone())
}

/// A reduction over `axes` (every axis when `None`; negative axes count
/// from the end).
pub fn reduce(
    g: &mut Graph,
    op: ReduceOp,
    x: ValueId,
    axes: Option<&[i64]>,
    keepdims: bool,
    site: &Site,
) -> Result<ValueId> {
    let Some(rank) = g.ty(x).shape.rank() else {
        let d = DynamicOp::Reduce {
            op,
            axes: axes.map(<[i64]>::to_vec),
            keepdims,
        };
        return g.add(Op::Dynamic(d), &[x], site.clone());
    };
    let axes = match axes {
        None => (0..rank).collect(),
        Some(a) => normalize_axes(rank, a)
            .map_err(|m| fail(g, &format!("reduce_{}", op.name()), site, m))?,
    };
    g.add(Op::Reduce { op, axes, keepdims }, &[x], site.clone())
}

/// Index of the maximum (`max`) or minimum along `axis`, as int64.
pub fn arg(g: &mut Graph, max: bool, x: ValueId, axis: i64, site: &Site) -> Result<ValueId> {
    let Some(rank) = g.ty(x).shape.rank() else {
        return g.add(
            Op::Dynamic(DynamicOp::Arg { max, axis }),
            &[x],
            site.clone(),
        );
    };
    let name = if max { "argmax" } else { "argmin" };
    let axis = normalize_axes(rank, &[axis]).map_err(|m| fail(g, name, site, m))?[0];
    let index_dtype = DType::I64;
    let op = if max {
        Op::ArgMax { axis, index_dtype }
    } else {
        Op::ArgMin { axis, index_dtype }
    };
    g.add(op, &[x], site.clone())
}

/// `axis` (negative counts from the end) of `x`, whose rank `op` needs
/// known.
fn known_axis(g: &mut Graph, x: ValueId, axis: i64, op: &str, site: &Site) -> Result<usize> {
    let Some(rank) = g.ty(x).shape.rank() else {
        let m = format!("{op} needs a known rank, got {}", g.ty(x));
        return Err(fail(g, op, site, m));
    };
    Ok(normalize_axes(rank, &[axis]).map_err(|m| fail(g, op, site, m))?[0])
}

/// The indices that sort `x` along `axis` (negative counts from the end):
/// stable, NaN above every number ([`Op::ArgSort`]). `x` needs a known
/// rank.
pub fn argsort(
    g: &mut Graph,
    x: ValueId,
    axis: i64,
    descending: bool,
    index_dtype: DType,
    site: &Site,
) -> Result<ValueId> {
    let axis = known_axis(g, x, axis, "argsort", site)?;
    let op = Op::ArgSort {
        axis,
        descending,
        index_dtype,
    };
    g.add(op, &[x], site.clone())
}

/// Running sums along `axis` (negative counts from the end; `tf.cumsum`).
/// `x` needs a known rank.
pub fn cumsum(
    g: &mut Graph,
    x: ValueId,
    axis: i64,
    reverse: bool,
    exclusive: bool,
    site: &Site,
) -> Result<ValueId> {
    let axis = known_axis(g, x, axis, "cumsum", site)?;
    let op = Op::Cumsum {
        axis,
        reverse,
        exclusive,
    };
    g.add(op, &[x], site.clone())
}

/// NumPy's `take_along_axis`: `out[.., i, ..] = x[.., indices[.., i, ..],
/// ..]` along `axis` (negative counts from the end), every other dim of
/// `indices` the same as `x`'s. A gather of the flattened `x` at computed
/// positions, so that the JIT fuses it into its consumer and its gradient
/// is a scatter-add. Dims not all known yet: the dynamic op, expanded once they are.
pub fn take_along_axis(
    g: &mut Graph,
    x: ValueId,
    indices: ValueId,
    axis: i64,
    site: &Site,
) -> Result<ValueId> {
    let (xt, it) = (g.ty(x).clone(), g.ty(indices).clone());
    let (Some(xd), Some(id)) = (xt.shape.as_known(), it.shape.as_known()) else {
        // Dims known only when the function runs: the gather once they are.
        if !it.dtype.is_int() {
            let m = format!("the indices {it} must be integers");
            return Err(fail(g, "take_along_axis", site, m));
        }
        let d = DynamicOp::TakeAlongAxis { axis };
        return g.add(Op::Dynamic(d), &[x, indices], site.clone());
    };
    let axis =
        normalize_axes(xd.len(), &[axis]).map_err(|m| fail(g, "take_along_axis", site, m))?[0];
    let matches = id.len() == xd.len() && (0..xd.len()).all(|d| d == axis || id[d] == xd[d]);
    if !matches || !it.dtype.is_int() {
        let m =
            format!("the indices {it} must be integers of the shape of {xt} but along axis {axis}");
        return Err(fail(g, "take_along_axis", site, m));
    }
    // Positions in the flattened x: Σ_d coordinate_d · stride_d, where the
    // coordinate along `axis` is the index.
    let total = xd
        .iter()
        .product::<usize>()
        .max(id.iter().product::<usize>());
    let pos_dtype = if i32::try_from(total).is_ok() {
        DType::I32
    } else {
        DType::I64
    };
    let mut stride = 1usize;
    let mut strides = vec![0; xd.len()];
    for d in (0..xd.len()).rev() {
        strides[d] = stride;
        stride *= xd[d];
    }
    let index = if it.dtype == pos_dtype {
        indices
    } else {
        g.add(Op::Convert(pos_dtype), &[indices], site.clone())?
    };
    let mut pos: Option<ValueId> = None;
    for (d, &st) in strides.iter().enumerate() {
        let term = if d == axis {
            index
        } else {
            let iota = Op::Iota {
                dtype: pos_dtype,
                dims: id.clone(),
                dim: d,
            };
            g.add(iota, &[], site.clone())?
        };
        let scaled = if st == 1 {
            term
        } else {
            let c = constant(g, pos_dtype, st as f64, site)?;
            binary(g, Elementwise::Binary(BinaryOp::Mul), term, c, site)?
        };
        pos = Some(match pos {
            None => scaled,
            Some(p) => binary(g, Elementwise::Binary(BinaryOp::Add), p, scaled, site)?,
        });
    }
    let pos = pos.unwrap_or(index);
    // An index outside [0, n) would address another line of x: such a
    // position becomes -1, which the take refuses ("indices[k] = -1"),
    // compared in the indices' own type (before a conversion that wraps).
    let n = xd[axis];
    let mut inside: Option<ValueId> = None;
    if it.dtype.is_signed_int() {
        let zero = constant(g, it.dtype, 0.0, site)?;
        inside = Some(binary(
            g,
            Elementwise::Compare(CmpOp::Ge),
            indices,
            zero,
            site,
        )?);
    }
    let bits = it.dtype.size() * 8 - usize::from(it.dtype.is_signed_int());
    if bits >= 64 || n < (1usize << bits) {
        let limit = constant(g, it.dtype, n as f64, site)?;
        let below = binary(g, Elementwise::Compare(CmpOp::Lt), indices, limit, site)?;
        inside = Some(match inside {
            None => below,
            Some(i) => binary(g, Elementwise::Binary(BinaryOp::And), i, below, site)?,
        });
    }
    let pos = match inside {
        None => pos,
        Some(inside) => {
            let outside = constant(g, pos_dtype, -1.0, site)?;
            select(g, inside, pos, outside, site)?
        }
    };
    let flat = g.add(
        Op::Reshape(Shape::known(&[xd.iter().product()])),
        &[x],
        site.clone(),
    )?;
    g.add(Op::Take { axis: 0 }, &[flat, pos], site.clone())
}

/// `x` sorted along `axis` (negative counts from the end): stable, NaN
/// above every number ([`Op::ArgSort`]). Any dims (the gather waits for unknown ones).
pub fn sort(
    g: &mut Graph,
    x: ValueId,
    axis: i64,
    descending: bool,
    site: &Site,
) -> Result<ValueId> {
    let order = argsort(g, x, axis, descending, DType::I32, site)?;
    take_along_axis(g, x, order, axis, site)
}

/// TensorFlow's `top_k`: the `k` largest elements along the last axis, in
/// descending order (equal ones in index order), and their int32
/// indices. The last axis must be known.
pub fn top_k(g: &mut Graph, x: ValueId, k: usize, site: &Site) -> Result<(ValueId, ValueId)> {
    let t = g.ty(x).clone();
    let Some(d) = t.shape.dims().filter(|d| !d.is_empty()).map(<[_]>::to_vec) else {
        let m = format!("top_k needs a known rank of 1 or more, got {t}");
        return Err(fail(g, "top_k", site, m));
    };
    let Some(last) = d[d.len() - 1] else {
        let m = format!("top_k needs the size of the last axis, got {t}");
        return Err(fail(g, "top_k", site, m));
    };
    if k > last {
        let m = format!("k = {k} is more than the {last} elements of the last axis of {t}");
        return Err(fail(g, "top_k", site, m));
    }
    let order = argsort(g, x, -1, true, DType::I32, site)?;
    // The first k of the last axis (the other dims may be known only when
    // the function runs: a strided slice then).
    let mut end = vec![None; d.len()];
    end[d.len() - 1] = Some(k as i64);
    let first = strided_slice(
        g,
        order,
        &vec![None; d.len()],
        &end,
        &vec![1; d.len()],
        site,
    )?;
    let values = take_along_axis(g, x, first, -1, site)?;
    Ok((values, first))
}

/// Matrix product over the last two dims, batch dims broadcast with
/// NumPy's rule (TensorFlow's `BatchMatMulV2`, `jnp.matmul`): a single
/// matrix on the right (`[B, T, D] @ [D, H]`) contracts without a copy;
/// other batch dims are broadcast to one shape first. A rank-1 operand is
/// treated as a row/column vector.
pub fn matmul(g: &mut Graph, x: ValueId, y: ValueId, site: &Site) -> Result<ValueId> {
    let (Some(a), Some(b)) = (g.ty(x).shape.rank(), g.ty(y).shape.rank()) else {
        return g.add(Op::Dynamic(DynamicOp::MatMul), &[x, y], site.clone());
    };
    if a == 0 || b == 0 {
        return Err(fail(
            g,
            "dot_general",
            site,
            "matmul needs operands of rank ≥ 1".into(),
        ));
    }
    if a >= 2 && b >= 2 {
        let (da, db) = (ranked_dims(g, x), ranked_dims(g, y));
        if da[..a - 2] != db[..b - 2] {
            return broadcast_matmul(g, x, y, &da, &db, site);
        }
    }
    let dims = if b == 1 || a == 1 || a == 2 && b == 2 {
        DotDims {
            lhs_batch: vec![],
            rhs_batch: vec![],
            lhs_contract: vec![a - 1],
            rhs_contract: vec![if b == 1 { 0 } else { b - 2 }],
        }
    } else if a == b {
        DotDims {
            lhs_batch: (0..a - 2).collect(),
            rhs_batch: (0..b - 2).collect(),
            lhs_contract: vec![a - 1],
            rhs_contract: vec![b - 2],
        }
    } else {
        return Err(fail(
            g,
            "dot_general",
            site,
            format!("matmul of rank {a} and rank {b}: batch ranks must match"),
        ));
    };
    g.add(Op::DotGeneral(dims), &[x, y], site.clone())
}

/// The dims of a value of known rank.
fn ranked_dims(g: &Graph, v: ValueId) -> Vec<Option<usize>> {
    g.ty(v).shape.dims().map(<[_]>::to_vec).unwrap_or_default()
}

/// [`matmul`] of operands whose batch dims differ (`a`, `b`: their dims,
/// ranks ≥ 2).
fn broadcast_matmul(
    g: &mut Graph,
    x: ValueId,
    y: ValueId,
    a: &[Option<usize>],
    b: &[Option<usize>],
    site: &Site,
) -> Result<ValueId> {
    let (ra, rb) = (a.len(), b.len());
    let text = |d: &[Option<usize>]| {
        let d: Vec<String> = (d.iter())
            .map(|n| n.map_or("?".into(), |n| n.to_string()))
            .collect();
        format!("[{}]", d.join(","))
    };
    let mismatch = |g: &mut Graph, why: &str| {
        let m = format!("matmul of shapes {} and {}: {why}", text(a), text(b));
        fail(g, "dot_general", site, m)
    };
    let matrix = |d: &[Option<usize>]| [d[d.len() - 2], d[d.len() - 1]];
    // `y` is one matrix (its batch dims, if any, all 1) and `x` has the
    // whole batch, of any size: `x`'s last dim contracts with its rows.
    if ra >= rb && b[..rb - 2].iter().all(|&d| d == Some(1)) {
        let [k, m] = matrix(b);
        if rb == 2 || k.is_some() || m.is_some() {
            let y = if rb == 2 {
                y
            } else {
                g.add(Op::Reshape(Shape::Ranked(vec![k, m])), &[y], site.clone())?
            };
            let dims = DotDims {
                lhs_batch: vec![],
                rhs_batch: vec![],
                lhs_contract: vec![ra - 1],
                rhs_contract: vec![0],
            };
            return g.add(Op::DotGeneral(dims), &[x, y], site.clone());
        }
    }
    // The batch dims, left-padded with 1s to one rank, broadcast per dim.
    let n = ra.max(rb) - 2;
    let padded = |d: &[Option<usize>]| -> Vec<Option<usize>> {
        let batch = &d[..d.len() - 2];
        std::iter::repeat_n(Some(1), n - batch.len())
            .chain(batch.iter().copied())
            .collect()
    };
    let (pa, pb) = (padded(a), padded(b));
    let mut batch = Vec::with_capacity(n);
    for (&p, &q) in pa.iter().zip(&pb) {
        batch.push(match (p, q) {
            (Some(p), Some(q)) if p == q || q == 1 => p,
            (Some(1), Some(q)) => q,
            (Some(_), Some(_)) => return Err(mismatch(g, "the batch dims do not broadcast")),
            (None, _) | (_, None) => {
                return Err(mismatch(
                    g,
                    "batch dims of unknown size broadcast only against a batch of the same shape or a single matrix (declare them)",
                ));
            }
        });
    }
    let widen = |g: &mut Graph, v: ValueId, d: &[Option<usize>]| -> Result<ValueId> {
        let full: Option<Vec<usize>> = (batch.iter().map(|&n| Some(n))).chain(matrix(d)).collect();
        let Some(full) = full else {
            return Err(mismatch(
                g,
                "broadcasting the batch dims needs the matrix dims known",
            ));
        };
        if d.iter().copied().eq(full.iter().map(|&n| Some(n))) {
            Ok(v)
        } else {
            broadcast_to(g, v, &full, site)
        }
    };
    let (x, y) = (widen(g, x, a)?, widen(g, y, b)?);
    matmul(g, x, y, site)
}

/// Permutes dims: result dim `i` is operand dim `perm[i]`.
pub fn transpose(g: &mut Graph, x: ValueId, perm: &[usize], site: &Site) -> Result<ValueId> {
    let op = if g.ty(x).shape.rank().is_none() {
        Op::Dynamic(DynamicOp::Transpose(perm.to_vec()))
    } else {
        Op::Transpose(perm.to_vec())
    };
    g.add(op, &[x], site.clone())
}

/// `x` broadcast to the static shape `dims` with NumPy's rule.
pub fn broadcast_to(g: &mut Graph, x: ValueId, dims: &[usize], site: &Site) -> Result<ValueId> {
    // (Unknown dims too: one may be 1, or the target's size, only known at
    // specialization, where the dynamic op is expanded and checked.)
    if !g.ty(x).shape.is_static() {
        return g.add(
            Op::Dynamic(DynamicOp::BroadcastTo(dims.to_vec())),
            &[x],
            site.clone(),
        );
    }
    let shape = Shape::known(dims);
    let t = g.ty(x).clone();
    if let Err(m) = broadcast_shapes(&t.shape, &shape).and_then(|s| {
        if s == shape {
            Ok(())
        } else {
            Err(format!("cannot broadcast {t} to {shape}"))
        }
    }) {
        return Err(fail(g, "broadcast_in_dim", site, m));
    }
    broadcast_to_shape(g, x, &shape, site)
}

/// `select(pred, on_true, on_false)` with NumPy broadcasting of all three.
pub fn select(
    g: &mut Graph,
    pred: ValueId,
    on_true: ValueId,
    on_false: ValueId,
    site: &Site,
) -> Result<ValueId> {
    let vs = [pred, on_true, on_false];
    let shapes: Vec<Shape> = vs.iter().map(|v| g.ty(*v).shape.clone()).collect();
    if shapes.iter().any(|s| s.rank().is_none()) {
        return g.add(Op::Dynamic(DynamicOp::Select), &vs, site.clone());
    }
    let shape = match broadcast_shapes(&shapes[0], &shapes[1])
        .and_then(|s| broadcast_shapes(&s, &shapes[2]))
    {
        Ok(s) => s,
        Err(m) => return Err(fail(g, "select", site, m)),
    };
    // Broadcasts to dims unknown until the call wait for it (see `binary`).
    let unknown = shape.dims().is_some_and(|d| d.contains(&None));
    if unknown && shapes.iter().any(|s| *s != shape) {
        return g.add(Op::Dynamic(DynamicOp::Select), &vs, site.clone());
    }
    let p = broadcast_to_shape(g, pred, &shape, site)?;
    let t = broadcast_to_shape(g, on_true, &shape, site)?;
    let f = broadcast_to_shape(g, on_false, &shape, site)?;
    g.add(Op::Select, &[p, t, f], site.clone())
}

/// Strided slice `[start, limit)` with `stride` per dim.
pub fn slice(
    g: &mut Graph,
    x: ValueId,
    start: &[usize],
    limit: &[usize],
    stride: &[usize],
    site: &Site,
) -> Result<ValueId> {
    let (start, limit, stride) = (start.to_vec(), limit.to_vec(), stride.to_vec());
    let op = if g.ty(x).shape.rank().is_none() {
        Op::Dynamic(DynamicOp::Slice {
            start,
            limit,
            stride,
        })
    } else {
        Op::Slice {
            start,
            limit,
            stride,
        }
    };
    g.add(op, &[x], site.clone())
}

/// Reverses along `axes` (negative axes count from the end).
pub fn reverse(g: &mut Graph, x: ValueId, axes: &[i64], site: &Site) -> Result<ValueId> {
    let Some(rank) = g.ty(x).shape.rank() else {
        return g.add(
            Op::Dynamic(DynamicOp::Reverse(axes.to_vec())),
            &[x],
            site.clone(),
        );
    };
    let axes = normalize_axes(rank, axes).map_err(|m| fail(g, "reverse", site, m))?;
    g.add(Op::Reverse(axes), &[x], site.clone())
}

/// Joins `xs` along `axis` (negative counts from the end).
pub fn concatenate(g: &mut Graph, xs: &[ValueId], axis: i64, site: &Site) -> Result<ValueId> {
    let ranks: Vec<Option<usize>> = xs.iter().map(|v| g.ty(*v).shape.rank()).collect();
    let Some(Some(rank)) = ranks
        .first()
        .copied()
        .filter(|_| ranks.iter().all(Option::is_some))
    else {
        return g.add(
            Op::Dynamic(DynamicOp::Concatenate { axis }),
            xs,
            site.clone(),
        );
    };
    let axis = normalize_axes(rank, &[axis]).map_err(|m| fail(g, "concatenate", site, m))?[0];
    g.add(Op::Concatenate { axis }, xs, site.clone())
}

/// Gathers slices along `axis` (negative counts from the end) at integer
/// `indices` (TF's `gather`).
pub fn take(
    g: &mut Graph,
    x: ValueId,
    indices: ValueId,
    axis: i64,
    site: &Site,
) -> Result<ValueId> {
    let (Some(rank), Some(_)) = (g.ty(x).shape.rank(), g.ty(indices).shape.rank()) else {
        return g.add(
            Op::Dynamic(DynamicOp::Take { axis }),
            &[x, indices],
            site.clone(),
        );
    };
    let axis = normalize_axes(rank, &[axis]).map_err(|m| fail(g, "take", site, m))?[0];
    g.add(Op::Take { axis }, &[x, indices], site.clone())
}

/// Combines `updates` into `x` along `axis` (negative counts from the end)
/// at integer `indices`: the inverse of [`take`] (`updates` has the shape
/// `take(x, indices, axis)` has). `x` needs a known rank.
pub fn scatter(
    g: &mut Graph,
    x: ValueId,
    indices: ValueId,
    updates: ValueId,
    axis: i64,
    combiner: Combiner,
    site: &Site,
) -> Result<ValueId> {
    let t = g.ty(x).clone();
    let Some(rank) = t.shape.rank() else {
        return Err(fail(
            g,
            "scatter",
            site,
            format!("operand {t} has unknown rank; declare its shape (set_shape / output_shapes)"),
        ));
    };
    let axis = normalize_axes(rank, &[axis]).map_err(|m| fail(g, "scatter", site, m))?[0];
    g.add(
        Op::Scatter { axis, combiner },
        &[x, indices, updates],
        site.clone(),
    )
}

/// `d` applied to `inputs`: ordinary ops when their ranks are known, the
/// dynamic op again when they are not.
pub fn expand(g: &mut Graph, d: &DynamicOp, inputs: &[ValueId], site: &Site) -> Result<ValueId> {
    let want = match d {
        DynamicOp::Binary(_) | DynamicOp::Compare(_) | DynamicOp::MatMul => 2,
        DynamicOp::Take { .. } | DynamicOp::TakeAlongAxis { .. } => 2,
        DynamicOp::Select => 3,
        DynamicOp::Reduce { .. }
        | DynamicOp::Arg { .. }
        | DynamicOp::Transpose(_)
        | DynamicOp::BroadcastTo(_)
        | DynamicOp::Slice { .. }
        | DynamicOp::Reverse(_)
        | DynamicOp::StridedSlice { .. } => 1,
        DynamicOp::Concatenate { .. } => inputs.len().max(1),
    };
    if inputs.len() != want {
        return Err(fail(
            g,
            &d.name(),
            site,
            format!("expects {want} operand(s), got {}", inputs.len()),
        ));
    }
    match d {
        DynamicOp::Binary(b) => binary(g, Elementwise::Binary(*b), inputs[0], inputs[1], site),
        DynamicOp::Compare(c) => binary(g, Elementwise::Compare(*c), inputs[0], inputs[1], site),
        DynamicOp::Reduce { op, axes, keepdims } => {
            reduce(g, *op, inputs[0], axes.as_deref(), *keepdims, site)
        }
        DynamicOp::Arg { max, axis } => arg(g, *max, inputs[0], *axis, site),
        DynamicOp::MatMul => matmul(g, inputs[0], inputs[1], site),
        DynamicOp::Transpose(perm) => transpose(g, inputs[0], perm, site),
        DynamicOp::Select => select(g, inputs[0], inputs[1], inputs[2], site),
        DynamicOp::BroadcastTo(dims) => broadcast_to(g, inputs[0], dims, site),
        DynamicOp::Slice {
            start,
            limit,
            stride,
        } => slice(g, inputs[0], start, limit, stride, site),
        DynamicOp::Reverse(axes) => reverse(g, inputs[0], axes, site),
        DynamicOp::Concatenate { axis } => concatenate(g, inputs, *axis, site),
        DynamicOp::Take { axis } => take(g, inputs[0], inputs[1], *axis, site),
        DynamicOp::TakeAlongAxis { axis } => take_along_axis(g, inputs[0], inputs[1], *axis, site),
        DynamicOp::StridedSlice { begin, end, step } => {
            strided_slice(g, inputs[0], begin, end, step, site)
        }
    }
}

/// Python's `slice(begin, end, step).indices(n)` as `(first, count)`: the
/// first index taken and how many are, walking by `step` (not 0).
fn python_slice(n: usize, begin: Option<i64>, end: Option<i64>, step: i64) -> (i64, usize) {
    let n = n as i64;
    let clamp = |v: i64, lo: i64, hi: i64| v.max(lo).min(hi);
    let bound = |v: Option<i64>, default: i64, lo: i64, hi: i64| match v {
        None => default,
        Some(v) if v < 0 => clamp(v.saturating_add(n), lo, hi),
        Some(v) => clamp(v, lo, hi),
    };
    let (first, last) = if step > 0 {
        (bound(begin, 0, 0, n), bound(end, n, 0, n))
    } else {
        (bound(begin, n - 1, -1, n - 1), bound(end, -1, -1, n - 1))
    };
    let span = if step > 0 { last - first } else { first - last };
    let count = (span.max(0) as u64).div_ceil(step.unsigned_abs());
    (first, count as usize)
}

/// The shape of a [`DynamicOp::StridedSlice`] of `shape`: each dim's
/// count where its size is known, unknown where it is not; an error for a
/// step of 0 or a bound list of another length than the rank.
pub fn strided_slice_shape(
    shape: &Shape,
    begin: &[Option<i64>],
    end: &[Option<i64>],
    step: &[i64],
) -> std::result::Result<Shape, String> {
    let rank = begin.len();
    if end.len() != rank || step.len() != rank {
        return Err("strided_slice needs one begin, end and step per dim".into());
    }
    if let Some(d) = step.iter().position(|&s| s == 0) {
        return Err(format!("strided_slice: the step of dim {d} is 0"));
    }
    let dims = match shape {
        Shape::Unranked => vec![None; rank],
        Shape::Ranked(d) if d.len() == rank => d.clone(),
        Shape::Ranked(d) => {
            return Err(format!(
                "strided_slice has {rank} bounds for a tensor of rank {}",
                d.len()
            ));
        }
    };
    Ok(Shape::Ranked(
        (0..rank)
            .map(|i| dims[i].map(|n| python_slice(n, begin[i], end[i], step[i]).1))
            .collect(),
    ))
}

/// `x[b:e:s, ...]` with Python's rules per dim ([`DynamicOp::StridedSlice`]):
/// a `reverse` of the dims walked backwards and a strided `slice`, or the
/// dynamic op while a dim's size (or the rank) is unknown.
pub fn strided_slice(
    g: &mut Graph,
    x: ValueId,
    begin: &[Option<i64>],
    end: &[Option<i64>],
    step: &[i64],
    site: &Site,
) -> Result<ValueId> {
    let t = g.ty(x).clone();
    strided_slice_shape(&t.shape, begin, end, step)
        .map_err(|m| fail(g, "strided_slice", site, m))?;
    let Some(dims) = t.shape.as_known() else {
        let d = DynamicOp::StridedSlice {
            begin: begin.to_vec(),
            end: end.to_vec(),
            step: step.to_vec(),
        };
        return g.add(Op::Dynamic(d), &[x], site.clone());
    };
    let (mut start, mut limit, mut stride, mut reversed) = (vec![], vec![], vec![], vec![]);
    for (d, &n) in dims.iter().enumerate() {
        let (first, count) = python_slice(n, begin[d], end[d], step[d]);
        let walk = usize::try_from(step[d].unsigned_abs()).unwrap_or(usize::MAX);
        // Backwards: reverse the dim, then walk forwards from its mirror.
        let from = if step[d] > 0 {
            first
        } else {
            reversed.push(d);
            n as i64 - 1 - first
        };
        let from = if count == 0 { 0 } else { from as usize };
        start.push(from);
        // (A walk past the dim takes one element: stride 1 then, as a
        // stride of 2^63 would overflow the slice's arithmetic.)
        let walk = if count > 1 { walk } else { 1 };
        limit.push(from + (count.saturating_sub(1)) * walk + usize::from(count > 0));
        stride.push(walk);
    }
    let mut y = x;
    if !reversed.is_empty() {
        y = g.add(Op::Reverse(reversed), &[y], site.clone())?;
    }
    let whole = start.iter().all(|&s| s == 0) && limit == dims && stride.iter().all(|&s| s == 1);
    if whole {
        return Ok(y);
    }
    g.add(
        Op::Slice {
            start,
            limit,
            stride,
        },
        &[y],
        site.clone(),
    )
}

/// A closed region (loop body, branch) named `name`: parameters of
/// `params` types, and the values `f` returns as its outputs. `f` builds
/// into the region's own graph; values of the enclosing graph are not
/// visible in it (pass them in as parameters).
pub fn region(
    name: &str,
    params: &[crate::TensorType],
    site: &Site,
    f: impl FnOnce(&mut Graph, &[ValueId]) -> Result<Vec<ValueId>>,
) -> Result<Graph> {
    let mut r = Graph::new(name);
    let ps = params
        .iter()
        .enumerate()
        .map(|(i, t)| r.add_parameter(i, t.clone(), Some(format!("arg{i}")), site.clone()))
        .collect::<Result<Vec<_>>>()?;
    let outs = f(&mut r, &ps)?;
    for (i, v) in outs.into_iter().enumerate() {
        r.add_output(v, format!("out{i}"))?;
    }
    Ok(r)
}

/// A `while` over the carries `init` (the regions take exactly their
/// types): its results, the final carries. Errors (a body of the wrong
/// types, a condition that is not `bool[]`) name the node and `site`.
pub fn while_loop(
    g: &mut Graph,
    init: &[ValueId],
    cond: Graph,
    body: Graph,
    site: &Site,
) -> Result<Vec<ValueId>> {
    let op = Op::While {
        cond: crate::Region::new(cond),
        body: crate::Region::new(body),
    };
    add_control(g, op, init.to_vec(), site)
}

/// Adds a control-flow node (its effect follows its regions) named after
/// its op; its results.
fn add_control(g: &mut Graph, op: Op, inputs: Vec<ValueId>, site: &Site) -> Result<Vec<ValueId>> {
    let name = g.fresh_name(&op.name());
    let id = g.add_node(crate::NewNode {
        op,
        inputs,
        name: Some(name),
        site: site.clone(),
        effect: crate::Effect::Pure,
        result_types: None,
    })?;
    Ok(g.node(id).results.clone())
}

/// A `case` selecting one of `branches` by `index` (an integer or bool
/// scalar, converted to `int32[]`; out of range selects the last branch)
/// and running it on `args`: its results.
pub fn case(
    g: &mut Graph,
    index: ValueId,
    args: &[ValueId],
    branches: Vec<Graph>,
    site: &Site,
) -> Result<Vec<ValueId>> {
    let t = g.ty(index).clone();
    if t.shape != Shape::known(&[]) || !(t.dtype.is_int() || t.dtype == DType::Bool) {
        return Err(fail(
            g,
            "case",
            site,
            format!("the branch index must be an integer or bool scalar, not {t}"),
        ));
    }
    let index = if t.dtype == DType::I32 {
        index
    } else {
        // An index of a wider type is clamped to [-1, branches] first, both
        // ends out of range (the last branch), so that converting it cannot
        // wrap it into range: 2^32 would become 0.
        let wide = t.dtype.is_int() && t.dtype.size() >= 4;
        let index = if wide {
            let n = branches.len() as f64;
            let hi = constant(g, t.dtype, n, site)?;
            let index = g.add(Op::Binary(BinaryOp::Min), &[index, hi], site.clone())?;
            if t.dtype.is_signed_int() {
                let lo = constant(g, t.dtype, -1.0, site)?;
                g.add(Op::Binary(BinaryOp::Max), &[index, lo], site.clone())?
            } else {
                index
            }
        } else {
            index
        };
        g.add(Op::Convert(DType::I32), &[index], site.clone())?
    };
    let mut inputs = vec![index];
    inputs.extend(args);
    let op = Op::Case {
        branches: branches.into_iter().map(crate::Region::new).collect(),
    };
    add_control(g, op, inputs, site)
}

/// A scalar constant of `dtype`.
pub fn constant(g: &mut Graph, dtype: DType, value: f64, site: &Site) -> Result<ValueId> {
    let lit = crate::Literal::scalar(dtype, value)?;
    g.add(Op::Constant(lit), &[], site.clone())
}

/// `x` summed back to `shape`, the inverse of NumPy broadcasting (what a
/// gradient of a broadcast operand needs): leading dims `x` has beyond
/// `shape`'s rank are summed away, and so are dims where `shape` has 1 and
/// `x` more. `x`'s shape must broadcast from `shape`.
pub fn sum_to_shape(g: &mut Graph, x: ValueId, shape: &[usize], site: &Site) -> Result<ValueId> {
    let xt = g.ty(x).clone();
    let Some(dims) = xt.shape.as_known() else {
        return Err(fail(
            g,
            "sum_to_shape",
            site,
            format!("the operand is {xt}: summing back to a shape needs its shape known"),
        ));
    };
    let lead = dims.len().checked_sub(shape.len());
    let fits =
        lead.is_some_and(|lead| (dims[lead..].iter().zip(shape)).all(|(&d, &s)| d == s || s == 1));
    let (true, Some(lead)) = (fits, lead) else {
        return Err(fail(
            g,
            "sum_to_shape",
            site,
            format!("{xt} does not broadcast from {}", Shape::known(shape)),
        ));
    };
    let axes: Vec<usize> = (0..dims.len())
        .filter(|&d| d < lead || (shape[d - lead] == 1 && dims[d] != 1))
        .collect();
    let summed = if axes.is_empty() {
        x
    } else {
        let op = Op::Reduce {
            op: ReduceOp::Sum,
            axes,
            keepdims: false,
        };
        g.add(op, &[x], site.clone())?
    };
    if g.ty(summed).shape == Shape::known(shape) {
        Ok(summed)
    } else {
        g.add(Op::Reshape(Shape::known(shape)), &[summed], site.clone())
    }
}

/// `for i in lower..upper: carries = body(i, carries)` (`lower` and
/// `upper` `int32[]` values of `g`), as a `while` whose condition compares
/// the counter with `upper` carried through: its results, the final
/// carries. `body` builds into the loop body's own graph; it gets the
/// counter and the carries there and returns the next carries.
pub fn fori_loop(
    g: &mut Graph,
    lower: ValueId,
    upper: ValueId,
    init: &[ValueId],
    site: &Site,
    body: impl FnOnce(&mut Graph, ValueId, &[ValueId]) -> Result<Vec<ValueId>>,
) -> Result<Vec<ValueId>> {
    for (what, v) in [("lower", lower), ("upper", upper)] {
        let t = g.ty(v).clone();
        if t != crate::TensorType::known(DType::I32, &[]) {
            return Err(fail(
                g,
                "fori_loop",
                site,
                format!("the {what} bound must be int32[], not {t}"),
            ));
        }
    }
    let name = g.fresh_name("fori_loop");
    let mut carries = vec![lower];
    carries.extend(init);
    carries.push(upper);
    let types: Vec<_> = carries.iter().map(|v| g.ty(*v).clone()).collect();
    let n = carries.len();
    let cond = region(&format!("{name}_cond"), &types, site, |r, p| {
        let lt = r.add(Op::Compare(CmpOp::Lt), &[p[0], p[n - 1]], site.clone())?;
        Ok(vec![lt])
    })?;
    let body = region(&format!("{name}_body"), &types, site, |r, p| {
        let next = body(r, p[0], &p[1..n - 1])?;
        let one = constant(r, DType::I32, 1.0, site)?;
        let mut out = vec![r.add(Op::Binary(BinaryOp::Add), &[p[0], one], site.clone())?];
        out.extend(next);
        out.push(p[n - 1]);
        Ok(out)
    })?;
    let results = while_loop(g, &carries, cond, body, site)?;
    Ok(results[1..n - 1].to_vec())
}

/// JAX's `lax.scan`: for `t` in `0..steps` (from the end when `reverse`),
/// `(carries, ys_t) = body(carries, xs_t)` where `xs_t` are the slices of
/// `xs` at `t` along their leading dim; its results, the final carries and
/// then the `ys` stacked along a new leading dim. `steps` is the leading
/// dim of `xs` (all equal), or `length` when there are none. `body` builds
/// into the loop body's own graph and returns `(carries, ys)`.
pub fn scan(
    g: &mut Graph,
    init: &[ValueId],
    xs: &[ValueId],
    length: Option<usize>,
    reverse: bool,
    site: &Site,
    body: impl FnOnce(&mut Graph, &[ValueId], &[ValueId]) -> Result<(Vec<ValueId>, Vec<ValueId>)>,
) -> Result<Vec<ValueId>> {
    let mut steps = length;
    let mut x_dims = Vec::with_capacity(xs.len());
    for (k, x) in xs.iter().enumerate() {
        let t = g.ty(*x).clone();
        let dims = t.shape.as_known().filter(|d| !d.is_empty());
        let Some(dims) = dims.filter(|d| steps.is_none_or(|s| s == d[0])) else {
            return Err(fail(
                g,
                "scan",
                site,
                format!(
                    "xs[{k}] is {t}: scan slices a known leading dim of {} steps",
                    steps.map_or("any".into(), |s| s.to_string())
                ),
            ));
        };
        steps = Some(dims[0]);
        x_dims.push(dims);
    }
    let Some(steps) = steps else {
        return Err(fail(g, "scan", site, "scan needs xs or a length".into()));
    };
    let i32_steps = i32::try_from(steps)
        .map_err(|_| fail(g, "scan", site, format!("{steps} steps do not fit int32")))?;
    let n = init.len();
    let name = g.fresh_name("scan");
    let lower = constant(g, DType::I32, 0.0, site)?;
    let upper = constant(g, DType::I32, f64::from(i32_steps), site)?;
    // Carries: the counter, init, xs (passed through), upper; the stacked
    // ys are added once the body has shown their types.
    let mut carries = vec![lower];
    carries.extend(init);
    carries.extend(xs);
    carries.push(upper);
    let types: Vec<_> = carries.iter().map(|v| g.ty(*v).clone()).collect();
    let mut y_types = Vec::new();
    let body_g = region(&format!("{name}_body"), &types, site, |r, p| {
        let i = p[0];
        let t = if reverse {
            let last = constant(r, DType::I32, f64::from(i32_steps - 1), site)?;
            r.add(Op::Binary(BinaryOp::Sub), &[last, i], site.clone())?
        } else {
            i
        };
        let zero = constant(r, DType::I32, 0.0, site)?;
        let mut x_t = Vec::with_capacity(xs.len());
        for (k, dims) in x_dims.iter().enumerate() {
            if steps == 0 {
                // A body that never runs, traced for its types: xs have
                // no row to slice, so it sees zeros of a row's shape.
                let dtype = r.ty(p[1 + n + k]).dtype;
                let z = constant(r, dtype, 0.0, site)?;
                x_t.push(broadcast_to(r, z, &dims[1..], site)?);
                continue;
            }
            let mut ins = vec![p[1 + n + k], t];
            ins.extend(std::iter::repeat_n(zero, dims.len() - 1));
            let mut sizes = dims.clone();
            sizes[0] = 1;
            let s = r.add(Op::DynamicSlice { sizes }, &ins, site.clone())?;
            x_t.push(r.add(Op::Reshape(Shape::known(&dims[1..])), &[s], site.clone())?);
        }
        let (next, ys) = body(r, &p[1..1 + n], &x_t)?;
        let one = constant(r, DType::I32, 1.0, site)?;
        let mut out = vec![r.add(Op::Binary(BinaryOp::Add), &[i, one], site.clone())?];
        out.extend(next);
        out.extend(&p[1 + n..]);
        // The stacked ys: parameters after the others, updated at `t`.
        let first = p.len();
        for (k, y) in ys.into_iter().enumerate() {
            let yt = r.ty(y).clone();
            let Some(dims) = yt.shape.as_known() else {
                return Err(fail(
                    r,
                    "scan",
                    site,
                    format!("ys[{k}] is {yt}: scan stacks ys of known shapes"),
                ));
            };
            let mut stacked = vec![steps];
            stacked.extend(&dims);
            let st = crate::TensorType::known(yt.dtype, &stacked);
            let buf =
                r.add_parameter(first + k, st.clone(), Some(format!("ys{k}")), site.clone())?;
            y_types.push(st);
            if steps == 0 {
                // No row to update: ys stay empty.
                out.push(buf);
                continue;
            }
            let mut one_step = vec![1];
            one_step.extend(&dims);
            let y1 = r.add(Op::Reshape(Shape::known(&one_step)), &[y], site.clone())?;
            let mut ins = vec![buf, y1, t];
            ins.extend(std::iter::repeat_n(zero, dims.len()));
            out.push(r.add(Op::DynamicUpdateSlice, &ins, site.clone())?);
        }
        Ok(out)
    })?;
    let mut all = types;
    all.extend(y_types.iter().cloned());
    let last = carries.len() - 1;
    let cond = region(&format!("{name}_cond"), &all, site, |r, p| {
        Ok(vec![r.add(
            Op::Compare(CmpOp::Lt),
            &[p[0], p[last]],
            site.clone(),
        )?])
    })?;
    for t in &y_types {
        let z = constant(g, t.dtype, 0.0, site)?;
        let dims = t.shape.as_known().unwrap_or_default();
        carries.push(g.add(
            Op::BroadcastInDim {
                shape: Shape::known(&dims),
                dims: vec![],
            },
            &[z],
            site.clone(),
        )?);
    }
    let results = while_loop(g, &carries, cond, body_g, site)?;
    let mut out = results[1..1 + n].to_vec();
    out.extend(&results[last + 1..]);
    Ok(out)
}
