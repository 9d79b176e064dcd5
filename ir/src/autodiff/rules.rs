//! One reverse-mode rule per op: given the cotangents of a node's results,
//! the cotangents of its operands. Conventions follow JAX's (docs/autodiff.md).

use super::{Ad, static_dims, zeros};
use crate::{
    BinaryOp, CallbackKind, CmpOp, Combiner, DType, DotDims, Node, NodeId, Op, ReduceOp, Result,
    Shape, Site, UnaryOp, ValueId,
};

/// Cotangents per operand (`None`: none, i.e. zero) of `node`, whose
/// operands are `x` and results `y` in the graph being built, given the
/// results' cotangents `g`; only operands with `needs` set are asked for.
pub(super) fn vjp(
    ad: &mut Ad<'_>,
    id: NodeId,
    node: &Node,
    x: &[ValueId],
    y: &[ValueId],
    g: &[Option<ValueId>],
    needs: &[bool],
) -> Result<Vec<Option<ValueId>>> {
    let site = &node.site;
    let none = vec![None; x.len()];
    // Single-result ops: their cotangent.
    let g0 = g.first().copied().flatten();
    let mut b = B { ad, site };
    let out = match &node.op {
        Op::Parameter { .. } | Op::Constant(_) | Op::Iota { .. } => none,
        Op::Unary(u) => {
            let Some(g) = g0 else { return Ok(none) };
            vec![b.unary(*u, g, x[0], y[0])?]
        }
        Op::Binary(op) => {
            let Some(g) = g0 else { return Ok(none) };
            let (gx, gy) = b.binary(*op, g, x[0], x[1], y[0], needs)?;
            vec![gx, gy]
        }
        Op::Compare(_) | Op::ArgMax { .. } | Op::ArgMin { .. } | Op::ArgSort { .. } => none,
        Op::Select => {
            let Some(g) = g0 else { return Ok(none) };
            let t = b.ty(g);
            let z = zeros(&mut b.ad.g, &t, site)?;
            let on_true = b.add(Op::Select, &[x[0], g, z])?;
            let on_false = b.add(Op::Select, &[x[0], z, g])?;
            vec![None, Some(on_true), Some(on_false)]
        }
        Op::Clamp => {
            let Some(g) = g0 else { return Ok(none) };
            b.clamp(g, x[0], x[1], x[2])?
        }
        Op::Convert(_) => {
            let Some(g) = g0 else { return Ok(none) };
            let from = b.ad.g.ty(x[0]).dtype;
            if super::is_differentiable(from) {
                vec![Some(b.add(Op::Convert(from), &[g])?)]
            } else {
                none
            }
        }
        Op::BitcastConvert(_) => {
            return Err(b.ad.fail(
                id,
                "bitcast_convert is not differentiable (it reinterprets bits); apply stop_gradient to its operand"
                    .into(),
            ));
        }
        Op::BroadcastInDim { dims, .. } => {
            let Some(g) = g0 else { return Ok(none) };
            vec![Some(b.unbroadcast(g, x[0], dims)?)]
        }
        Op::Reshape(_) => {
            let Some(g) = g0 else { return Ok(none) };
            let dims = b.dims(x[0])?;
            vec![Some(b.add(Op::Reshape(Shape::known(&dims)), &[g])?)]
        }
        Op::Transpose(perm) => {
            let Some(g) = g0 else { return Ok(none) };
            let mut inv = vec![0; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                inv[p] = i;
            }
            vec![Some(b.add(Op::Transpose(inv), &[g])?)]
        }
        Op::Slice {
            start,
            limit: _,
            stride,
        } => {
            let Some(g) = g0 else { return Ok(none) };
            vec![b.unslice(g, x[0], start, stride)?]
        }
        Op::Concatenate { axis } => {
            let Some(g) = g0 else { return Ok(none) };
            let gd = b.dims(g)?;
            let mut out = Vec::with_capacity(x.len());
            let mut offset = 0;
            for (i, v) in x.iter().enumerate() {
                let d = b.dims(*v)?;
                if needs[i] {
                    let mut start = vec![0; gd.len()];
                    let mut limit = gd.clone();
                    start[*axis] = offset;
                    limit[*axis] = offset + d[*axis];
                    let stride = vec![1; gd.len()];
                    out.push(Some(b.add(
                        Op::Slice {
                            start,
                            limit,
                            stride,
                        },
                        &[g],
                    )?));
                } else {
                    out.push(None);
                }
                offset += d[*axis];
            }
            out
        }
        Op::Pad {
            low,
            high,
            interior,
        } => {
            let Some(g) = g0 else { return Ok(none) };
            b.unpad(g, x[0], low, high, interior)?
        }
        // Each element adds into every running sum after it (before it, in
        // reverse): the cotangent summed from the other end.
        Op::Cumsum {
            axis,
            reverse,
            exclusive,
        } => {
            let Some(g) = g0 else { return Ok(none) };
            let op = Op::Cumsum {
                axis: *axis,
                reverse: !*reverse,
                exclusive: *exclusive,
            };
            vec![Some(b.add(op, &[g])?)]
        }
        Op::Reverse(axes) => {
            let Some(g) = g0 else { return Ok(none) };
            vec![Some(b.add(Op::Reverse(axes.clone()), &[g])?)]
        }
        Op::Reduce { op, axes, keepdims } => {
            let Some(g) = g0 else { return Ok(none) };
            vec![b.reduce(id, *op, axes, *keepdims, g, x[0], y[0])?]
        }
        Op::DotGeneral(dd) => {
            let Some(g) = g0 else { return Ok(none) };
            let gl = if needs[0] {
                Some(b.dot_lhs(g, x[0], x[1], dd)?)
            } else {
                None
            };
            let gr = if needs[1] {
                Some(b.dot_rhs(g, x[0], x[1], dd)?)
            } else {
                None
            };
            vec![gl, gr]
        }
        Op::Take { axis } => {
            let Some(g) = g0 else { return Ok(none) };
            let t = b.ty(x[0]);
            let z = zeros(&mut b.ad.g, &t, site)?;
            let op = Op::Scatter {
                axis: *axis,
                combiner: Combiner::Add,
            };
            vec![Some(b.add(op, &[z, x[1], g])?), None]
        }
        Op::DynamicSlice { .. } => {
            let Some(g) = g0 else { return Ok(none) };
            let t = b.ty(x[0]);
            let z = zeros(&mut b.ad.g, &t, site)?;
            let mut ins = vec![z, g];
            ins.extend(&x[1..]);
            let mut out = vec![Some(b.add(Op::DynamicUpdateSlice, &ins)?)];
            out.extend(std::iter::repeat_n(None, x.len() - 1));
            out
        }
        Op::DynamicUpdateSlice => {
            let Some(g) = g0 else { return Ok(none) };
            let mut out = vec![None; x.len()];
            if needs[0] {
                let t = b.ty(x[1]);
                let z = zeros(&mut b.ad.g, &t, site)?;
                let mut ins = vec![g, z];
                ins.extend(&x[2..]);
                out[0] = Some(b.add(Op::DynamicUpdateSlice, &ins)?);
            }
            if needs[1] {
                let sizes = b.dims(x[1])?;
                let mut ins = vec![g];
                ins.extend(&x[2..]);
                out[1] = Some(b.add(Op::DynamicSlice { sizes }, &ins)?);
            }
            out
        }
        Op::Scatter { axis, combiner } => {
            let Some(g) = g0 else { return Ok(none) };
            b.scatter(*axis, *combiner, g, x, y[0], needs)?
        }
        Op::Callback(c) => {
            let what = match c.kind {
                CallbackKind::NumpyFunction | CallbackKind::PyFunc | CallbackKind::HostFn => {
                    "it is not differentiable (its body is opaque to tensorlift); give it a gradient with custom_vjp (tl.custom_gradient in Python), or apply stop_gradient to its operands"
                }
                CallbackKind::PyFunction => {
                    "its Python body is differentiated only in eager mode (GradientTape); give it a gradient with custom_vjp (tl.custom_gradient in Python) to differentiate a traced function"
                }
            };
            return Err(b.ad.fail(
                id,
                format!(
                    "cannot differentiate through callback '{}': {what}",
                    c.target
                ),
            ));
        }
        Op::Dynamic(_) => {
            return Err(b.ad.fail(
                id,
                "its operand's rank is unknown: differentiation needs static shapes (specialize the graph first)"
                    .into(),
            ));
        }
        Op::While { .. } => super::control::backward_while(b.ad, id, node, x, y, g)?,
        Op::Case { branches } => super::control::backward_case(b.ad, id, branches, x, g, needs)?,
        Op::StopGradient => none,
        Op::CustomVjp { inputs, vjp, .. } => b.custom_vjp(*inputs, vjp.graph(), x, y, g)?,
    };
    Ok(out)
}

/// Builds rule nodes at one site.
struct B<'x, 'a> {
    ad: &'x mut Ad<'a>,
    site: &'x Site,
}

impl B<'_, '_> {
    fn add(&mut self, op: Op, ins: &[ValueId]) -> Result<ValueId> {
        self.ad.g.add(op, ins, self.site.clone())
    }

    fn ty(&self, v: ValueId) -> crate::TensorType {
        self.ad.g.ty(v).clone()
    }

    fn dims(&self, v: ValueId) -> Result<Vec<usize>> {
        static_dims(self.ad.g.ty(v))
    }

    fn dtype(&self, v: ValueId) -> DType {
        self.ad.g.ty(v).dtype
    }

    fn c(&mut self, like: ValueId, value: f64) -> Result<ValueId> {
        let d = self.dtype(like);
        self.ad.scalar(d, value, self.site)
    }

    fn bin(&mut self, op: BinaryOp, a: ValueId, b: ValueId) -> Result<ValueId> {
        self.add(Op::Binary(op), &[a, b])
    }

    fn un(&mut self, op: UnaryOp, a: ValueId) -> Result<ValueId> {
        self.add(Op::Unary(op), &[a])
    }

    fn cmp(&mut self, op: CmpOp, a: ValueId, b: ValueId) -> Result<ValueId> {
        self.add(Op::Compare(op), &[a, b])
    }

    fn mul(&mut self, a: ValueId, b: ValueId) -> Result<ValueId> {
        self.bin(BinaryOp::Mul, a, b)
    }

    /// `select(p, a, b)` where any of the three may be rank 0 while the
    /// others are not.
    fn select(&mut self, p: ValueId, a: ValueId, b: ValueId) -> Result<ValueId> {
        let mut dims = self.dims(p)?;
        for v in [a, b] {
            let d = self.dims(v)?;
            if d.len() > dims.len() {
                dims = d;
            }
        }
        let a = self.splat(a, &dims)?;
        let b = self.splat(b, &dims)?;
        self.add(Op::Select, &[p, a, b])
    }

    fn splat(&mut self, v: ValueId, dims: &[usize]) -> Result<ValueId> {
        if self.dims(v)? == dims {
            return Ok(v);
        }
        self.add(
            Op::BroadcastInDim {
                shape: Shape::known(dims),
                dims: vec![],
            },
            &[v],
        )
    }

    fn unary(&mut self, u: UnaryOp, g: ValueId, x: ValueId, y: ValueId) -> Result<Option<ValueId>> {
        let v = match u {
            UnaryOp::Neg => self.un(UnaryOp::Neg, g)?,
            UnaryOp::Abs => {
                // JAX: +1 at 0 and -0.
                let zero = self.c(x, 0.0)?;
                let nonneg = self.cmp(CmpOp::Ge, x, zero)?;
                let n = self.un(UnaryOp::Neg, g)?;
                self.select(nonneg, g, n)?
            }
            UnaryOp::Sign
            | UnaryOp::Floor
            | UnaryOp::Ceil
            | UnaryOp::Round
            | UnaryOp::Not
            | UnaryOp::IsFinite => return Ok(None),
            UnaryOp::Sqrt => {
                let half = self.c(x, 0.5)?;
                let d = self.bin(BinaryOp::Div, half, y)?;
                self.mul(g, d)?
            }
            UnaryOp::Rsqrt => {
                let k = self.c(x, -0.5)?;
                let q = self.bin(BinaryOp::Div, y, x)?;
                let d = self.mul(k, q)?;
                self.mul(g, d)?
            }
            UnaryOp::Exp => self.mul(g, y)?,
            UnaryOp::Expm1 => {
                let one = self.c(x, 1.0)?;
                let d = self.bin(BinaryOp::Add, y, one)?;
                self.mul(g, d)?
            }
            UnaryOp::Log => self.bin(BinaryOp::Div, g, x)?,
            UnaryOp::Log1p => {
                let one = self.c(x, 1.0)?;
                let d = self.bin(BinaryOp::Add, x, one)?;
                self.bin(BinaryOp::Div, g, d)?
            }
            UnaryOp::Tanh => {
                // JAX: g·(1 + y)·(1 - y).
                let one = self.c(x, 1.0)?;
                let p = self.bin(BinaryOp::Add, one, y)?;
                let m = self.bin(BinaryOp::Sub, one, y)?;
                let gp = self.mul(g, p)?;
                self.mul(gp, m)?
            }
            UnaryOp::Logistic => {
                let one = self.c(x, 1.0)?;
                let m = self.bin(BinaryOp::Sub, one, y)?;
                let d = self.mul(y, m)?;
                self.mul(g, d)?
            }
            UnaryOp::Sin => {
                let c = self.un(UnaryOp::Cos, x)?;
                self.mul(g, c)?
            }
            UnaryOp::Cos => {
                let s = self.un(UnaryOp::Sin, x)?;
                let n = self.un(UnaryOp::Neg, s)?;
                self.mul(g, n)?
            }
            UnaryOp::Erf => {
                let k = self.c(x, std::f64::consts::FRAC_2_SQRT_PI)?;
                let sq = self.un(UnaryOp::Square, x)?;
                let n = self.un(UnaryOp::Neg, sq)?;
                let e = self.un(UnaryOp::Exp, n)?;
                let d = self.mul(k, e)?;
                self.mul(g, d)?
            }
            UnaryOp::Square => {
                let two = self.c(x, 2.0)?;
                let d = self.mul(two, x)?;
                self.mul(g, d)?
            }
            UnaryOp::Reciprocal => {
                let sq = self.un(UnaryOp::Square, y)?;
                let n = self.un(UnaryOp::Neg, sq)?;
                self.mul(g, n)?
            }
        };
        Ok(Some(v))
    }

    fn binary(
        &mut self,
        op: BinaryOp,
        g: ValueId,
        x: ValueId,
        y: ValueId,
        out: ValueId,
        needs: &[bool],
    ) -> Result<(Option<ValueId>, Option<ValueId>)> {
        let (nx, ny) = (needs[0], needs[1]);
        let pick =
            |need: bool, f: &mut dyn FnMut() -> Result<ValueId>| -> Result<Option<ValueId>> {
                if need { f().map(Some) } else { Ok(None) }
            };
        match op {
            BinaryOp::Add => Ok((nx.then_some(g), ny.then_some(g))),
            BinaryOp::Sub => {
                let gy = pick(ny, &mut || self.un(UnaryOp::Neg, g))?;
                Ok((nx.then_some(g), gy))
            }
            BinaryOp::Mul => {
                let gx = pick(nx, &mut || self.mul(g, y))?;
                let gy = pick(ny, &mut || self.mul(g, x))?;
                Ok((gx, gy))
            }
            BinaryOp::Div => {
                let gx = pick(nx, &mut || self.bin(BinaryOp::Div, g, y))?;
                let gy = pick(ny, &mut || {
                    // -g·x / y².
                    let n = self.un(UnaryOp::Neg, g)?;
                    let nx = self.mul(n, x)?;
                    let y2 = self.un(UnaryOp::Square, y)?;
                    self.bin(BinaryOp::Div, nx, y2)
                })?;
                Ok((gx, gy))
            }
            BinaryOp::Rem => {
                let gy = pick(ny, &mut || {
                    // -g·trunc(x / y).
                    let q = self.bin(BinaryOp::Div, x, y)?;
                    let s = self.un(UnaryOp::Sign, q)?;
                    let a = self.un(UnaryOp::Abs, q)?;
                    let f = self.un(UnaryOp::Floor, a)?;
                    let t = self.mul(s, f)?;
                    let n = self.un(UnaryOp::Neg, g)?;
                    self.mul(n, t)
                })?;
                Ok((nx.then_some(g), gy))
            }
            BinaryOp::Pow => {
                let gx = pick(nx, &mut || {
                    // g·(y == 0 ? 0 : y·x^(y-1)).
                    let one = self.c(y, 1.0)?;
                    let zero = self.c(y, 0.0)?;
                    let ym1 = self.bin(BinaryOp::Sub, y, one)?;
                    let p = self.bin(BinaryOp::Pow, x, ym1)?;
                    let d = self.mul(y, p)?;
                    let is0 = self.cmp(CmpOp::Eq, y, zero)?;
                    let d = self.select(is0, zero, d)?;
                    self.mul(g, d)
                })?;
                let gy = pick(ny, &mut || {
                    // g·log(x == 0 ? 1 : x)·x^y.
                    let one = self.c(x, 1.0)?;
                    let zero = self.c(x, 0.0)?;
                    let is0 = self.cmp(CmpOp::Eq, x, zero)?;
                    let safe = self.select(is0, one, x)?;
                    let l = self.un(UnaryOp::Log, safe)?;
                    let d = self.mul(l, out)?;
                    self.mul(g, d)
                })?;
                Ok((gx, gy))
            }
            BinaryOp::Max | BinaryOp::Min => {
                // JAX's balanced rule: at a tie each operand gets half.
                let gx = pick(nx, &mut || self.balanced(g, x, y, out))?;
                let gy = pick(ny, &mut || self.balanced(g, y, x, out))?;
                Ok((gx, gy))
            }
            BinaryOp::And
            | BinaryOp::Or
            | BinaryOp::Xor
            | BinaryOp::ShiftLeft
            | BinaryOp::ShiftRightLogical
            | BinaryOp::ShiftRightArithmetic => Ok((None, None)),
        }
    }

    /// `g · (a == out ? (b == out ? 0.5 : 1) : 0)`.
    fn balanced(&mut self, g: ValueId, a: ValueId, b: ValueId, out: ValueId) -> Result<ValueId> {
        let one = self.c(g, 1.0)?;
        let half = self.c(g, 0.5)?;
        let zero = self.c(g, 0.0)?;
        let aeq = self.cmp(CmpOp::Eq, a, out)?;
        let beq = self.cmp(CmpOp::Eq, b, out)?;
        let share = self.select(beq, half, one)?;
        let w = self.select(aeq, share, zero)?;
        self.mul(g, w)
    }

    /// JAX's clamp rule (strict inequalities: at a bound nobody gets it).
    fn clamp(
        &mut self,
        g: ValueId,
        x: ValueId,
        lo: ValueId,
        hi: ValueId,
    ) -> Result<Vec<Option<ValueId>>> {
        let zero = self.c(g, 0.0)?;
        let above = self.cmp(CmpOp::Gt, x, lo)?;
        let below = self.cmp(CmpOp::Lt, x, hi)?;
        let inside = self.bin(BinaryOp::And, above, below)?;
        let gx = self.select(inside, g, zero)?;
        // lo: where lo > x and lo < hi; hi: where hi < x.
        let lo_gt = self.cmp(CmpOp::Gt, lo, x)?;
        let lo_lt = self.cmp(CmpOp::Lt, lo, hi)?;
        let lo_wins = self.bin(BinaryOp::And, lo_gt, lo_lt)?;
        let glo = self.select(lo_wins, g, zero)?;
        let hi_wins = self.cmp(CmpOp::Lt, hi, x)?;
        let ghi = self.select(hi_wins, g, zero)?;
        Ok(vec![Some(gx), Some(glo), Some(ghi)])
    }

    /// The cotangent of `broadcast_in_dim`'s operand: `g` summed over the
    /// dims the broadcast made.
    fn unbroadcast(&mut self, g: ValueId, x: ValueId, dims: &[usize]) -> Result<ValueId> {
        let xd = self.dims(x)?;
        let gd = self.dims(g)?;
        // Mapped dims of size 1 that were stretched: summed, kept.
        let stretched: Vec<usize> = (dims.iter().zip(&xd))
            .filter(|(d, s)| **s == 1 && gd[**d] != 1)
            .map(|(d, _)| *d)
            .collect();
        let mut v = g;
        if !stretched.is_empty() {
            let mut axes = stretched;
            axes.sort_unstable();
            v = self.add(
                Op::Reduce {
                    op: ReduceOp::Sum,
                    axes,
                    keepdims: true,
                },
                &[v],
            )?;
        }
        let new: Vec<usize> = (0..gd.len()).filter(|d| !dims.contains(d)).collect();
        if !new.is_empty() {
            v = self.add(
                Op::Reduce {
                    op: ReduceOp::Sum,
                    axes: new,
                    keepdims: false,
                },
                &[v],
            )?;
        }
        // What is left is in increasing result-dim order; put it in the
        // operand's.
        let mut sorted = dims.to_vec();
        sorted.sort_unstable();
        let perm: Vec<usize> = (dims.iter())
            .map(|d| sorted.iter().position(|s| s == d).unwrap_or(0))
            .collect();
        if perm.iter().enumerate().any(|(i, p)| i != *p) {
            v = self.add(Op::Transpose(perm), &[v])?;
        }
        if self.dims(v)? != xd {
            v = self.add(Op::Reshape(Shape::known(&xd)), &[v])?;
        }
        Ok(v)
    }

    /// The cotangent of a strided slice's operand: `g` padded back with
    /// zeros into the sliced positions.
    fn unslice(
        &mut self,
        g: ValueId,
        x: ValueId,
        start: &[usize],
        stride: &[usize],
    ) -> Result<Option<ValueId>> {
        let xd = self.dims(x)?;
        let gd = self.dims(g)?;
        if gd.contains(&0) {
            return Ok(None);
        }
        let low: Vec<i64> = start.iter().map(|&s| s as i64).collect();
        let high: Vec<i64> = (0..xd.len())
            .map(|d| xd[d] as i64 - start[d] as i64 - ((gd[d] as i64 - 1) * stride[d] as i64) - 1)
            .collect();
        let interior: Vec<usize> = stride.iter().map(|s| s - 1).collect();
        let zero = self.c(g, 0.0)?;
        Ok(Some(self.add(
            Op::Pad {
                low,
                high,
                interior,
            },
            &[g, zero],
        )?))
    }

    /// JAX's pad transpose: un-pad (negated edges), then take every
    /// `interior + 1`-th element; the padding value gets the rest.
    fn unpad(
        &mut self,
        g: ValueId,
        x: ValueId,
        low: &[i64],
        high: &[i64],
        interior: &[usize],
    ) -> Result<Vec<Option<ValueId>>> {
        let zero = self.c(g, 0.0)?;
        let rank = low.len();
        let unpadded = self.add(
            Op::Pad {
                low: low.iter().map(|l| -l).collect(),
                high: high.iter().map(|h| -h).collect(),
                interior: vec![0; rank],
            },
            &[g, zero],
        )?;
        let ud = self.dims(unpadded)?;
        let gx = self.add(
            Op::Slice {
                start: vec![0; rank],
                limit: ud,
                stride: interior.iter().map(|i| i + 1).collect(),
            },
            &[unpadded],
        )?;
        debug_assert_eq!(self.dims(gx).ok(), self.dims(x).ok());
        let all = |b: &mut Self, v: ValueId| -> Result<ValueId> {
            let r = b.dims(v)?.len();
            b.add(
                Op::Reduce {
                    op: ReduceOp::Sum,
                    axes: (0..r).collect(),
                    keepdims: false,
                },
                &[v],
            )
        };
        let total = all(self, g)?;
        let inner = all(self, gx)?;
        let gpad = self.bin(BinaryOp::Sub, total, inner)?;
        Ok(vec![Some(gx), Some(gpad)])
    }

    /// A reduction's cotangent `g` (reduced shape) broadcast back to `x`'s.
    fn unreduce(
        &mut self,
        g: ValueId,
        x: ValueId,
        axes: &[usize],
        keepdims: bool,
    ) -> Result<ValueId> {
        let xd = self.dims(x)?;
        let kept: Vec<usize> = (0..xd.len()).filter(|d| !axes.contains(d)).collect();
        let mut v = g;
        if keepdims {
            let shape: Vec<usize> = kept.iter().map(|&d| xd[d]).collect();
            v = self.add(Op::Reshape(Shape::known(&shape)), &[v])?;
        }
        self.add(
            Op::BroadcastInDim {
                shape: Shape::known(&xd),
                dims: kept,
            },
            &[v],
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn reduce(
        &mut self,
        id: NodeId,
        op: ReduceOp,
        axes: &[usize],
        keepdims: bool,
        g: ValueId,
        x: ValueId,
        y: ValueId,
    ) -> Result<Option<ValueId>> {
        let red = |op: ReduceOp| Op::Reduce {
            op,
            axes: axes.to_vec(),
            keepdims,
        };
        match op {
            ReduceOp::Sum => Ok(Some(self.unreduce(g, x, axes, keepdims)?)),
            ReduceOp::Prod => {
                // The product of the others, exact where x has zeros: the
                // product of the nonzeros where x is the only zero, 0 where
                // there are others, p/x elsewhere.
                let zero = self.c(x, 0.0)?;
                let one = self.c(x, 1.0)?;
                let is0 = self.cmp(CmpOp::Eq, x, zero)?;
                let nz = self.select(is0, one, x)?;
                let pnz = self.add(red(ReduceOp::Prod), &[nz])?;
                let z = self.add(Op::Convert(self.dtype(x)), &[is0])?;
                let zc = self.add(red(ReduceOp::Sum), &[z])?;
                let pnz_b = self.unreduce(pnz, x, axes, keepdims)?;
                let zc_b = self.unreduce(zc, x, axes, keepdims)?;
                let single = self.cmp(CmpOp::Eq, zc_b, one)?;
                let none = self.cmp(CmpOp::Eq, zc_b, zero)?;
                let at_zero = self.select(single, pnz_b, zero)?;
                let q = self.bin(BinaryOp::Div, pnz_b, nz)?;
                let elsewhere = self.select(none, q, zero)?;
                let others = self.select(is0, at_zero, elsewhere)?;
                let gb = self.unreduce(g, x, axes, keepdims)?;
                Ok(Some(self.mul(gb, others)?))
            }
            ReduceOp::Max | ReduceOp::Min => {
                // Split equally among the positions equal to the result.
                let zero = self.c(x, 0.0)?;
                let yb = self.unreduce(y, x, axes, keepdims)?;
                let at = self.cmp(CmpOp::Eq, x, yb)?;
                let w = self.add(Op::Convert(self.dtype(x)), &[at])?;
                let count = self.add(red(ReduceOp::Sum), &[w])?;
                let share = self.bin(BinaryOp::Div, g, count)?;
                let sb = self.unreduce(share, x, axes, keepdims)?;
                Ok(Some(self.select(at, sb, zero)?))
            }
            ReduceOp::And | ReduceOp::Or => Err(self
                .ad
                .fail(id, "a logical reduction has no gradient".into())),
        }
    }

    /// The cotangent of `dot_general`'s left operand: `g` (dims: batch,
    /// left free, right free) contracted with the right operand over the
    /// right's free dims, giving [batch, left free, right contract], then
    /// put in the left's layout (no transpose for a plain matmul).
    fn dot_lhs(&mut self, g: ValueId, l: ValueId, r: ValueId, dd: &DotDims) -> Result<ValueId> {
        let (lr, rr) = (self.dims(l)?.len(), self.dims(r)?.len());
        let nb = dd.lhs_batch.len();
        let lf = free_dims(lr, &dd.lhs_batch, &dd.lhs_contract);
        let rf = free_dims(rr, &dd.rhs_batch, &dd.rhs_contract);
        let dims = DotDims {
            lhs_batch: (0..nb).collect(),
            rhs_batch: dd.rhs_batch.clone(),
            lhs_contract: (nb + lf.len()..nb + lf.len() + rf.len()).collect(),
            rhs_contract: rf,
        };
        let prod = self.add(Op::DotGeneral(dims), &[g, r])?;
        let mut rc_sorted = dd.rhs_contract.clone();
        rc_sorted.sort_unstable();
        let perm: Vec<usize> = (0..lr)
            .map(|d| {
                if let Some(k) = dd.lhs_batch.iter().position(|b| *b == d) {
                    k
                } else if let Some(j) = lf.iter().position(|f| *f == d) {
                    nb + j
                } else {
                    let m = dd.lhs_contract.iter().position(|c| *c == d).unwrap_or(0);
                    let rank = rc_sorted.iter().position(|c| *c == dd.rhs_contract[m]);
                    nb + lf.len() + rank.unwrap_or(0)
                }
            })
            .collect();
        self.permuted(prod, perm)
    }

    /// The cotangent of the right operand: the left operand contracted
    /// with `g` over the left's free dims, giving [batch, left contract,
    /// right free] (a plain matmul's `xᵀ·g`, no transpose), then put in the
    /// right's layout.
    fn dot_rhs(&mut self, g: ValueId, l: ValueId, r: ValueId, dd: &DotDims) -> Result<ValueId> {
        let (lr, rr) = (self.dims(l)?.len(), self.dims(r)?.len());
        let nb = dd.lhs_batch.len();
        let lf = free_dims(lr, &dd.lhs_batch, &dd.lhs_contract);
        let rf = free_dims(rr, &dd.rhs_batch, &dd.rhs_contract);
        let nl = lf.len();
        let dims = DotDims {
            lhs_batch: dd.lhs_batch.clone(),
            rhs_batch: (0..nb).collect(),
            lhs_contract: lf,
            rhs_contract: (nb..nb + nl).collect(),
        };
        let prod = self.add(Op::DotGeneral(dims), &[l, g])?;
        let mut lc_sorted = dd.lhs_contract.clone();
        lc_sorted.sort_unstable();
        let nc = lc_sorted.len();
        let perm: Vec<usize> = (0..rr)
            .map(|d| {
                if let Some(k) = dd.rhs_batch.iter().position(|b| *b == d) {
                    k
                } else if let Some(j) = rf.iter().position(|f| *f == d) {
                    nb + nc + j
                } else {
                    let m = dd.rhs_contract.iter().position(|c| *c == d).unwrap_or(0);
                    let rank = lc_sorted.iter().position(|c| *c == dd.lhs_contract[m]);
                    nb + rank.unwrap_or(0)
                }
            })
            .collect();
        self.permuted(prod, perm)
    }

    /// `v` transposed by `perm` (itself when `perm` is the identity).
    fn permuted(&mut self, v: ValueId, perm: Vec<usize>) -> Result<ValueId> {
        if perm.iter().enumerate().all(|(i, p)| i == *p) {
            Ok(v)
        } else {
            self.add(Op::Transpose(perm), &[v])
        }
    }

    /// The user's gradient, inlined: operands, results and cotangents in,
    /// one cotangent per real floating input out.
    fn custom_vjp(
        &mut self,
        inputs: usize,
        vjp: &crate::Graph,
        x: &[ValueId],
        y: &[ValueId],
        g: &[Option<ValueId>],
    ) -> Result<Vec<Option<ValueId>>> {
        let mut args = x.to_vec();
        args.extend(y);
        for (r, c) in y.iter().zip(g) {
            let t = self.ty(*r);
            if !super::is_differentiable(t.dtype) {
                continue;
            }
            args.push(super::or_zeros(&mut self.ad.g, *c, &t, self.site)?);
        }
        let cts = super::inline(&mut self.ad.g, vjp, &args, "")?;
        let mut cts = cts.into_iter();
        let mut out = vec![None; x.len()];
        for (i, v) in x.iter().enumerate().take(inputs) {
            if super::is_differentiable(self.dtype(*v)) {
                out[i] = cts.next();
            }
        }
        Ok(out)
    }

    /// The scatter's VJP. Add passes `g` through; set gives the overwritten
    /// elements nothing; min and max give `g[i]` to the operand element and
    /// the updates that equal the result at `i`, split equally among them
    /// when they tie (JAX's convention for scatter_min/max). Updates at
    /// indices out of range get nothing.
    fn scatter(
        &mut self,
        axis: usize,
        combiner: Combiner,
        g: ValueId,
        x: &[ValueId],
        y: ValueId,
        needs: &[bool],
    ) -> Result<Vec<Option<ValueId>>> {
        let (op, idx, upd) = (x[0], x[1], x[2]);
        // The indices clamped into range, and which were in range (of the
        // indices' shape, broadcast to the updates').
        let n = self.dims(op)?[axis];
        let it = self.ty(idx);
        let ud = self.dims(upd)?;
        let lo = self.ad.scalar(it.dtype, 0.0, self.site)?;
        let hi = self
            .ad
            .scalar(it.dtype, n.saturating_sub(1) as f64, self.site)?;
        let clamped = self.add(Op::Clamp, &[idx, lo, hi])?;
        let inside = self.cmp(CmpOp::Eq, clamped, idx)?;
        let id_rank = static_dims(&it)?.len();
        let inside = self.add(
            Op::BroadcastInDim {
                shape: Shape::known(&ud),
                dims: (axis..axis + id_rank).collect(),
            },
            &[inside],
        )?;
        // `v` at each update's index (zeros where there is no element).
        let at_updates = |b: &mut Self, v: ValueId| -> Result<ValueId> {
            if n == 0 {
                let t = b.ty(upd);
                return zeros(&mut b.ad.g, &t, b.site);
            }
            b.add(Op::Take { axis }, &[v, clamped])
        };
        let gx = match combiner {
            Combiner::Add => g,
            Combiner::Set => {
                // The overwritten elements get nothing.
                let t = self.ty(upd);
                let z = zeros(&mut self.ad.g, &t, self.site)?;
                self.add(
                    Op::Scatter {
                        axis,
                        combiner: Combiner::Set,
                    },
                    &[g, idx, z],
                )?
            }
            Combiner::Min | Combiner::Max => {
                let (one, zero) = (self.c(g, 1.0)?, self.c(g, 0.0)?);
                // Updates that won (equal the result where they landed).
                let y_at = at_updates(self, y)?;
                let won = self.cmp(CmpOp::Eq, upd, y_at)?;
                let won = self.add(Op::Binary(BinaryOp::And), &[won, inside])?;
                let won = self.select(won, one, zero)?;
                let kept = self.cmp(CmpOp::Eq, op, y)?;
                let kept = self.select(kept, one, zero)?;
                let t = self.ty(op);
                let z = zeros(&mut self.ad.g, &t, self.site)?;
                let scatter_add = Op::Scatter {
                    axis,
                    combiner: Combiner::Add,
                };
                let winners = self.add(scatter_add, &[z, idx, won])?;
                let count = self.bin(BinaryOp::Add, winners, kept)?;
                let share = self.bin(BinaryOp::Div, g, count)?;
                let gx = self.mul(share, kept)?;
                let gu = if needs[2] {
                    let s = at_updates(self, share)?;
                    Some(self.mul(s, won)?)
                } else {
                    None
                };
                return Ok(vec![needs[0].then_some(gx), None, gu]);
            }
        };
        let gu = if needs[2] {
            // take(g) at the indices in range; updates skipped by the
            // scatter (indices out of range) get nothing, and so do those a
            // later update of the same index overwrote (`set`).
            let taken = at_updates(self, g)?;
            let zero = self.c(g, 0.0)?;
            let landed = match combiner {
                Combiner::Set => self.last_writers(idx, clamped, n, inside, axis, &ud)?,
                Combiner::Add | Combiner::Min | Combiner::Max => inside,
            };
            Some(self.select(landed, taken, zero)?)
        } else {
            None
        };
        Ok(vec![needs[0].then_some(gx), None, gu])
    }

    /// Which updates of a `set` scatter land (their index in range, and no
    /// later update, in row-major order of the indices, at the same
    /// index), broadcast to the updates' shape `ud`: a `max` scatter of
    /// each index's position finds the last writer of every element.
    #[allow(clippy::too_many_arguments, reason = "the scatter rule's values")]
    fn last_writers(
        &mut self,
        idx: ValueId,
        clamped: ValueId,
        n: usize,
        inside: ValueId,
        axis: usize,
        ud: &[usize],
    ) -> Result<ValueId> {
        let id = static_dims(&self.ty(idx))?;
        let count: usize = id.iter().product();
        let pd = if i32::try_from(count).is_ok() {
            DType::I32
        } else {
            DType::I64
        };
        let flat = self.add(
            Op::Iota {
                dtype: pd,
                dims: vec![count],
                dim: 0,
            },
            &[],
        )?;
        let pos = self.add(Op::Reshape(Shape::known(&id)), &[flat])?;
        let none = self.ad.scalar(pd, -1.0, self.site)?;
        let table = self.add(
            Op::BroadcastInDim {
                shape: Shape::known(&[n]),
                dims: vec![],
            },
            &[none],
        )?;
        let max = Op::Scatter {
            axis: 0,
            combiner: Combiner::Max,
        };
        let last = self.add(max, &[table, idx, pos])?;
        let last_at = self.add(Op::Take { axis: 0 }, &[last, clamped])?;
        let won = self.cmp(CmpOp::Eq, last_at, pos)?;
        let won = self.add(
            Op::BroadcastInDim {
                shape: Shape::known(ud),
                dims: (axis..axis + id.len()).collect(),
            },
            &[won],
        )?;
        self.add(Op::Binary(BinaryOp::And), &[won, inside])
    }
}

/// The dims of a `dot_general` operand of rank `rank` that are neither
/// batch nor contracting, in order.
fn free_dims(rank: usize, batch: &[usize], contract: &[usize]) -> Vec<usize> {
    (0..rank)
        .filter(|d| !batch.contains(d) && !contract.contains(d))
        .collect()
}
