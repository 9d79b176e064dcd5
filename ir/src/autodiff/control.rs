//! Reverse mode through `while` and `case`.
//!
//! A branch's gradient is a `case` on the same index whose branches are
//! the branches' own gradients (each recomputes what it needs of its
//! branch's forward values).
//!
//! A loop's gradient runs the body's gradient (a graph of the body's
//! carries and the cotangents of its results, giving the cotangents of its
//! carries) once per iteration, last iteration first. It needs the carries
//! each iteration started from:
//! - a counted loop (a counter from a constant to a constant bound, as
//!   `fori_loop` and `scan` build) stacks them during the forward loop, in
//!   buffers of one row per iteration, for the carries the body's gradient
//!   reads and that change (captured values passed through unchanged are
//!   not stacked; nor is the counter, which is recomputed);
//! - any other loop counts its iterations and recomputes iteration `t`'s
//!   carries by running the body `t` times from the initial ones: no
//!   memory beyond one set of carries, quadratic time.

use super::{Ad, inline, or_zeros, prune_for_recompute, reverse, static_dims, zeros};
use crate::builder::{constant, fori_loop, region};
use crate::{
    BinaryOp, CmpOp, DType, Graph, Node, NodeId, Op, Region, Result, Scalar, Shape, TensorType,
    ValueId,
};

/// What a loop's forward pass kept for its backward pass.
#[derive(Clone, Debug)]
pub(super) struct Tape {
    /// Which carries carry gradients.
    act: Vec<bool>,
    /// The body's gradient: the body's carries, then the cotangents of the
    /// active carries, to the cotangents of the active carries.
    bv: Graph,
    /// Which carries `bv` reads.
    used: Vec<bool>,
    kind: TapeKind,
}

#[derive(Clone, Debug)]
enum TapeKind {
    /// A counted loop of no iteration: results are the initial carries.
    Empty,
    /// A counted loop of `steps` iterations; `bv` is the backward part of
    /// the body's gradient (body parameters, residuals, cotangents).
    Counted {
        steps: usize,
        /// The iterations run (`int32[]`), when fewer than `steps` may be.
        trips: Option<ValueId>,
        counter: usize,
        lower: i64,
        /// The carries stacked (before the other residuals).
        saved: Vec<usize>,
        /// One buffer of shape `[steps, ..]` per stacked row: the saved
        /// carries, then the residuals.
        stacks: Vec<ValueId>,
        /// The type of one row of each stack.
        row_types: Vec<TensorType>,
        /// Carries passed through unchanged, with their (initial) values.
        invariant: Vec<Option<ValueId>>,
    },
    /// A loop with a data-dependent trip count.
    Counting {
        trips: ValueId,
        init: Vec<ValueId>,
        body: Graph,
    },
    /// A loop with a data-dependent trip count whose forward pass pushed
    /// the carries `saved` (of types `saved_types`) on a run-time tape at
    /// each iteration; the backward loop pops them from target `pop`.
    Taped {
        trips: ValueId,
        saved: Vec<usize>,
        saved_types: Vec<TensorType>,
        pop: String,
    },
}

/// A process-unique number for each run-time tape.
fn next_tape() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// A stateful `host_fn` callback node calling `target`.
fn tape_callback(
    g: &mut Graph,
    target: String,
    inputs: Vec<ValueId>,
    results: Vec<TensorType>,
    site: &crate::Site,
) -> Result<Vec<ValueId>> {
    let name = g.fresh_name(&target);
    let id = g.add_node(crate::NewNode {
        op: Op::Callback(crate::CallbackOp {
            kind: crate::CallbackKind::HostFn,
            target,
        }),
        inputs,
        name: Some(name),
        site: site.clone(),
        effect: crate::Effect::Stateful,
        result_types: Some(results),
    })?;
    Ok(g.node(id).results.clone())
}

/// Which carries of `node` (a `while`) carry gradients, given which values
/// of `src` are active: those whose initial value is, or whose next value
/// the body computes from an active carry (to a fixed point).
pub(super) fn carry_activity(src: &Graph, node: &Node, active: &[bool]) -> Vec<bool> {
    let Op::While { body, .. } = &node.op else {
        return vec![];
    };
    let body = body.graph();
    let float: Vec<bool> = (node.inputs.iter())
        .map(|v| super::is_differentiable(src.ty(*v).dtype))
        .collect();
    let mut act: Vec<bool> = (node.inputs.iter().zip(&float))
        .map(|(v, f)| *f && active[v.index()])
        .collect();
    loop {
        let dep = depends(body, &act);
        let mut changed = false;
        for (k, o) in body.outputs().iter().enumerate() {
            if !act[k] && float[k] && dep[o.value.index()] {
                act[k] = true;
                changed = true;
            }
        }
        if !changed {
            return act;
        }
    }
}

/// Per value of `g`: whether it depends on a parameter marked in `from`.
fn depends(g: &Graph, from: &[bool]) -> Vec<bool> {
    let mut dep = vec![false; g.num_values()];
    for n in g.nodes() {
        let d = if let Op::Parameter { index } = n.op {
            from.get(index).copied().unwrap_or(false)
        } else {
            n.inputs.iter().any(|v| dep[v.index()])
        };
        for r in &n.results {
            dep[r.index()] = d;
        }
    }
    dep
}

fn param_index(g: &Graph, v: ValueId) -> Option<usize> {
    if let Op::Parameter { index } = g.producer(v).op {
        Some(index)
    } else {
        None
    }
}

fn int_constant(g: &Graph, v: ValueId) -> Option<i64> {
    let Op::Constant(lit) = &g.producer(v).op else {
        return None;
    };
    if lit.len() != 1 || lit.ty().shape != Shape::scalar() {
        return None;
    }
    match lit.element(0) {
        Scalar::Int(i) => i64::try_from(i).ok(),
        Scalar::Bool(_) | Scalar::Float(..) | Scalar::Complex(..) => None,
    }
}

/// A loop counting carry `counter` from a constant by 1 while it is below
/// a constant (and, when not `exact`, while some other condition holds
/// too): at most `steps` iterations, exactly `steps` when `exact`.
struct Counted {
    counter: usize,
    lower: i64,
    steps: usize,
    exact: bool,
}

fn counted(src: &Graph, node: &Node, cond: &Graph, body: &Graph) -> Option<Counted> {
    let [o] = cond.outputs() else { return None };
    // The comparisons the condition is a conjunction of.
    let mut leaves = Vec::new();
    let mut stack = vec![o.value];
    while let Some(v) = stack.pop() {
        let n = cond.producer(v);
        if n.op == Op::Binary(BinaryOp::And) && cond.ty(v).dtype == DType::Bool {
            stack.extend(&n.inputs);
        } else {
            leaves.push(v);
        }
    }
    let exact = leaves.len() == 1;
    leaves
        .into_iter()
        .find_map(|v| counted_by(src, node, cond, body, v, exact))
}

/// [`counted`] for the comparison `v` of the condition.
fn counted_by(
    src: &Graph,
    node: &Node,
    cond: &Graph,
    body: &Graph,
    v: ValueId,
    exact: bool,
) -> Option<Counted> {
    let cmp = cond.producer(v);
    if cmp.op != Op::Compare(CmpOp::Lt) {
        return None;
    }
    let a = param_index(cond, cmp.inputs[0])?;
    let upper = match param_index(cond, cmp.inputs[1]) {
        Some(b) => {
            let passes = body.outputs().get(b)?.value;
            if param_index(body, passes) != Some(b) {
                return None;
            }
            int_constant(src, node.inputs[b])?
        }
        None => int_constant(cond, cmp.inputs[1])?,
    };
    let next = body.producer(body.outputs().get(a)?.value);
    if next.op != Op::Binary(BinaryOp::Add) {
        return None;
    }
    let is_counter = |v: ValueId| param_index(body, v) == Some(a);
    let is_one = |v: ValueId| int_constant(body, v) == Some(1);
    let (l, r) = (next.inputs[0], next.inputs[1]);
    if !((is_counter(l) && is_one(r)) || (is_one(l) && is_counter(r))) {
        return None;
    }
    let lower = int_constant(src, node.inputs[a])?;
    let steps = usize::try_from(upper.saturating_sub(lower).max(0)).ok()?;
    // Stacks of `steps` rows: a bound too large to allocate is left to the
    // recomputing path.
    if !exact && steps > 1 << 20 {
        return None;
    }
    Some(Counted {
        counter: a,
        lower,
        steps,
        exact,
    })
}

/// The body's gradient for the active carries `act`, pruned to what it
/// needs, and which carries it reads.
fn body_vjp(body: &Graph, act: &[bool], what: &str) -> Result<(Graph, Vec<bool>)> {
    let wrt: Vec<usize> = (0..act.len()).filter(|k| act[*k]).collect();
    let mut bv = reverse(
        body,
        &wrt,
        super::Seed::Params(&wrt),
        false,
        super::WhileCarries::Recompute,
    )?;
    prune_for_recompute(&mut bv, what)?;
    let uses = bv.use_counts();
    let params = bv.params();
    let used = (0..act.len())
        .map(|k| params.get(k).is_some_and(|p| uses[p.index()] > 0))
        .collect();
    Ok((bv, used))
}

/// A counted loop's body gradient cut in two: what the forward loop
/// computes and stacks (the residuals: values of the body's forward pass
/// that change from one iteration to the next and that the gradient
/// reads), and the rest, which the backward loop runs on the stacked rows.
/// Values depending only on the counter, on captures and on constants
/// are recomputed by the backward loop (the optimizer hoists what it can).
struct Split {
    /// Body parameters → the residuals that are not parameters.
    residuals: Graph,
    /// Body parameters, residuals, cotangents → cotangents.
    backward: Graph,
    /// Which body parameters `backward` reads.
    used: Vec<bool>,
}

fn split(bv: &Graph, m: usize, carried: &[bool]) -> Result<Split> {
    let params = bv.params();
    let nv = bv.num_values();
    let (mut dep_ct, mut dep_carry) = (vec![false; nv], vec![false; nv]);
    for n in bv.nodes() {
        let (c, k) = if let Op::Parameter { index } = n.op {
            (index >= m, index < m && carried[index])
        } else {
            (
                n.inputs.iter().any(|v| dep_ct[v.index()]),
                n.inputs.iter().any(|v| dep_carry[v.index()]),
            )
        };
        for r in &n.results {
            dep_ct[r.index()] = c;
            dep_carry[r.index()] = k;
        }
    }
    let is_param = |v: ValueId| matches!(bv.producer(v).op, Op::Parameter { .. });
    let mut residual = vec![false; nv];
    for n in bv.nodes() {
        if n.results.iter().any(|r| dep_ct[r.index()]) && !matches!(n.op, Op::Parameter { .. }) {
            for v in &n.inputs {
                residual[v.index()] |= !dep_ct[v.index()] && dep_carry[v.index()];
            }
        }
    }
    for o in bv.outputs() {
        residual[o.value.index()] |= !dep_ct[o.value.index()] && dep_carry[o.value.index()];
    }
    // A residual made by a cheap op (one that fuses into the backward
    // loop's kernels) from other residuals is recomputed there when that
    // stacks no more bytes: `1 + y` and `1 - y` become one stack of `y`.
    let bytes = |v: ValueId| {
        let t = bv.ty(v);
        t.shape.num_elements().unwrap_or(0) * t.dtype.size()
    };
    let mut recompute = vec![false; nv];
    loop {
        let mut changed = false;
        for i in (0..nv).rev() {
            let v = ValueId(i as u32);
            let n = bv.producer(v);
            if !residual[i] || is_param(v) || !cheap(&n.op) || n.results.len() != 1 {
                continue;
            }
            let need: Vec<ValueId> = (n.inputs.iter().copied())
                .filter(|u| dep_carry[u.index()])
                .collect();
            let added: usize = (need.iter())
                .filter(|u| !residual[u.index()])
                .map(|u| bytes(*u))
                .sum();
            if added <= bytes(v) {
                residual[i] = false;
                recompute[i] = true;
                for u in need {
                    residual[u.index()] = true;
                }
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let res: Vec<ValueId> = (0..nv)
        .map(|i| ValueId(i as u32))
        .filter(|v| residual[v.index()] && !is_param(*v))
        .collect();
    let body_params = &params[..m];
    let outs: Vec<(ValueId, String)> = (res.iter().enumerate())
        .map(|(j, v)| (*v, format!("residual{j}")))
        .collect();
    let residuals = bv.extract(
        format!("{}_residuals", bv.name),
        body_params,
        |_, n| {
            !matches!(n.op, Op::Parameter { .. }) && !n.results.iter().any(|r| dep_ct[r.index()])
        },
        &outs,
    )?;
    let mut bparams = body_params.to_vec();
    bparams.extend(&res);
    bparams.extend(&params[m..]);
    let bouts: Vec<(ValueId, String)> = (bv.outputs().iter())
        .map(|o| (o.value, o.name.clone()))
        .collect();
    let keep = |_, n: &crate::Node| {
        !matches!(n.op, Op::Parameter { .. })
            && n.results
                .first()
                .is_some_and(|r| dep_ct[r.index()] || !dep_carry[r.index()] || recompute[r.index()])
    };
    let mut backward = bv.extract(format!("{}_backward", bv.name), &bparams, keep, &bouts)?;
    crate::passes::dce(&mut backward);
    let uses = backward.use_counts();
    let bps = backward.params();
    let used = (0..m).map(|k| uses[bps[k].index()] > 0).collect();
    Ok(Split {
        residuals,
        backward,
        used,
    })
}

/// Ops worth recomputing in a backward loop rather than stacking: no
/// transcendental, fused into the consumer's kernel.
fn cheap(op: &Op) -> bool {
    use crate::UnaryOp;
    match op {
        Op::Unary(u) => matches!(
            u,
            UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Sign | UnaryOp::Square | UnaryOp::Not
        ),
        Op::Binary(b) => matches!(
            b,
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Max | BinaryOp::Min
        ),
        Op::Compare(_)
        | Op::Select
        | Op::Clamp
        | Op::Convert(_)
        | Op::BroadcastInDim { .. }
        | Op::Reshape(_) => true,
        Op::Parameter { .. }
        | Op::Constant(_)
        | Op::Iota { .. }
        | Op::Transpose(_)
        | Op::Slice { .. }
        | Op::Concatenate { .. }
        | Op::Pad { .. }
        | Op::Reverse(_)
        | Op::Reduce { .. }
        | Op::ArgMax { .. }
        | Op::ArgMin { .. }
        | Op::ArgSort { .. }
        | Op::Cumsum { .. }
        | Op::DotGeneral(_)
        | Op::Take { .. }
        | Op::DynamicSlice { .. }
        | Op::DynamicUpdateSlice
        | Op::Scatter { .. }
        | Op::BitcastConvert(_)
        | Op::Callback(_)
        | Op::Dynamic(_)
        | Op::While { .. }
        | Op::Case { .. }
        | Op::StopGradient
        | Op::CustomVjp { .. } => false,
    }
}

fn types_of(g: &Graph, vs: &[ValueId]) -> Vec<TensorType> {
    vs.iter().map(|v| g.ty(*v).clone()).collect()
}

/// The forward pass of a `while` whose results need cotangents: the loop,
/// extended to keep what its gradient needs. Its results (the original
/// ones) and the tape.
pub(super) fn forward_while(
    ad: &mut Ad<'_>,
    id: NodeId,
    cond: &Graph,
    body: &Graph,
    inputs: &[ValueId],
) -> Result<(Vec<ValueId>, Tape)> {
    let src = ad.src;
    let node = src.node(id);
    let site = node.site.clone();
    let m = inputs.len();
    let act = carry_activity(src, node, &ad.active);
    let what = format!("loop '{}'", node.name);
    let (bv, used) = body_vjp(body, &act, &what)?;
    let types = types_of(&ad.g, inputs);
    let plain = |ad: &mut Ad<'_>| -> Result<Vec<ValueId>> {
        let op = Op::While {
            cond: Region::new(cond.clone()),
            body: Region::new(body.clone()),
        };
        ad.g.add_node(crate::NewNode {
            op,
            inputs: inputs.to_vec(),
            name: Some(node.name.clone()),
            site: site.clone(),
            effect: node.effect,
            result_types: None,
        })
        .map(|nid| ad.g.node(nid).results.clone())
    };
    let tape = |kind| Tape {
        act: act.clone(),
        bv: bv.clone(),
        used: used.clone(),
        kind,
    };
    if let Some(c) = counted(src, node, cond, body) {
        if c.steps == 0 {
            return Ok((plain(ad)?, tape(TapeKind::Empty)));
        }
        let invariant: Vec<bool> = (0..m)
            .map(|k| param_index(body, body.outputs()[k].value) == Some(k))
            .collect();
        let carried: Vec<bool> = (0..m).map(|k| !invariant[k] && k != c.counter).collect();
        let sp = split(&bv, m, &carried)?;
        // Stacked: the carried parameters the gradient reads, then the
        // other residuals.
        let saved: Vec<usize> = (0..m).filter(|&k| carried[k] && sp.used[k]).collect();
        let res_types = sp
            .residuals
            .outputs()
            .iter()
            .map(|o| sp.residuals.ty(o.value).clone());
        let row_types: Vec<TensorType> = (saved.iter().map(|&k| types[k].clone()))
            .chain(res_types)
            .collect();
        let mut stack_types = Vec::new();
        let mut carries = inputs.to_vec();
        for t in &row_types {
            let mut dims = vec![c.steps];
            dims.extend(static_dims(t)?);
            let st = TensorType::known(t.dtype, &dims);
            carries.push(zeros(&mut ad.g, &st, &site)?);
            stack_types.push(st);
        }
        let mut all = types.clone();
        all.extend(stack_types);
        let counter_dtype = types[c.counter].dtype;
        let body2 = region(&format!("{}_tape", body.name), &all, &site, |r, p| {
            let mut outs = inline(r, body, &p[..m], "")?;
            let mut rows: Vec<ValueId> = saved.iter().map(|&k| p[k]).collect();
            rows.extend(inline(r, &sp.residuals, &p[..m], "")?);
            let lower = constant(r, counter_dtype, c.lower as f64, &site)?;
            let t = r.add(
                Op::Binary(BinaryOp::Sub),
                &[p[c.counter], lower],
                site.clone(),
            )?;
            let zero = constant(r, counter_dtype, 0.0, &site)?;
            for (j, v) in rows.into_iter().enumerate() {
                let dims = static_dims(&row_types[j])?;
                let mut one = vec![1];
                one.extend(&dims);
                let row = r.add(Op::Reshape(Shape::known(&one)), &[v], site.clone())?;
                let mut ins = vec![p[m + j], row, t];
                ins.extend(std::iter::repeat_n(zero, dims.len()));
                outs.push(r.add(Op::DynamicUpdateSlice, &ins, site.clone())?);
            }
            Ok(outs)
        })?;
        let cond2 = region(&format!("{}_tape", cond.name), &all, &site, |r, p| {
            inline(r, cond, &p[..m], "")
        })?;
        let results = crate::builder::while_loop(&mut ad.g, &carries, cond2, body2, &site)?;
        let invariant = (0..m)
            .map(|k| (invariant[k] && sp.used[k]).then_some(inputs[k]))
            .collect();
        // A loop that may exit early ran `final counter - lower` times.
        let trips = if c.exact {
            None
        } else {
            let d = counter_dtype;
            let lo = constant(&mut ad.g, d, c.lower as f64, &site)?;
            let n = ad.g.add(
                Op::Binary(BinaryOp::Sub),
                &[results[c.counter], lo],
                site.clone(),
            )?;
            Some(if d == DType::I32 {
                n
            } else {
                ad.g.add(Op::Convert(DType::I32), &[n], site.clone())?
            })
        };
        let kind = TapeKind::Counted {
            steps: c.steps,
            trips,
            counter: c.counter,
            lower: c.lower,
            saved,
            stacks: results[m..].to_vec(),
            row_types,
            invariant,
        };
        let tape = Tape {
            act: act.clone(),
            bv: sp.backward,
            used: sp.used,
            kind,
        };
        return Ok((results[..m].to_vec(), tape));
    }
    if ad.carries == super::WhileCarries::Tape {
        // A data-dependent trip count: count the iterations and push the
        // carries the gradient reads at each one.
        let saved: Vec<usize> = (0..m).filter(|&k| used[k]).collect();
        let saved_types: Vec<TensorType> = saved.iter().map(|&k| types[k].clone()).collect();
        for t in &saved_types {
            static_dims(t)?;
        }
        let n = next_tape();
        let push = format!("{}{n}_push", super::TAPE_PREFIX);
        let pop = format!("{}{n}_pop", super::TAPE_PREFIX);
        let push = (!saved.is_empty()).then_some((push, &saved[..]));
        let results = counting_loop(&mut ad.g, cond, body, inputs, &types, &site, push)?;
        let kind = TapeKind::Taped {
            trips: results[m],
            saved,
            saved_types,
            pop,
        };
        return Ok((results[..m].to_vec(), tape(kind)));
    }
    // A data-dependent trip count: count the iterations; the gradient
    // recomputes the body, so it must not have effects.
    if let Some(bad) = body
        .node_ids()
        .find(|n| body.node(*n).effect == crate::Effect::Stateful)
    {
        return Err(super::fail(
            body,
            bad,
            format!(
                "the gradient of {what}, whose trip count depends on data, recomputes its body, which would repeat this stateful node's effects; make it stateless or give it a custom gradient"
            ),
        ));
    }
    let results = counting_loop(&mut ad.g, cond, body, inputs, &types, &site, None)?;
    let kind = TapeKind::Counting {
        trips: results[m],
        init: inputs.to_vec(),
        body: body.clone(),
    };
    Ok((results[..m].to_vec(), tape(kind)))
}

/// The loop `cond`/`body` over `inputs` (of `types`) with an iteration
/// counter carried last (`int32`, from 0); with `push`, each iteration
/// first pushes the carries it lists on that tape target. Its results: the
/// carries, then the trip count.
fn counting_loop(
    g: &mut Graph,
    cond: &Graph,
    body: &Graph,
    inputs: &[ValueId],
    types: &[TensorType],
    site: &crate::Site,
    push: Option<(String, &[usize])>,
) -> Result<Vec<ValueId>> {
    let m = inputs.len();
    let mut all = types.to_vec();
    all.push(TensorType::scalar(DType::I32));
    let body2 = region(&format!("{}_count", body.name), &all, site, |r, p| {
        if let Some((target, saved)) = &push {
            let rows = saved.iter().map(|&k| p[k]).collect();
            tape_callback(r, target.clone(), rows, Vec::new(), site)?;
        }
        let mut outs = inline(r, body, &p[..m], "")?;
        let one = constant(r, DType::I32, 1.0, site)?;
        outs.push(r.add(Op::Binary(BinaryOp::Add), &[p[m], one], site.clone())?);
        Ok(outs)
    })?;
    let cond2 = region(&format!("{}_count", cond.name), &all, site, |r, p| {
        inline(r, cond, &p[..m], "")
    })?;
    let mut carries = inputs.to_vec();
    carries.push(constant(g, DType::I32, 0.0, site)?);
    crate::builder::while_loop(g, &carries, cond2, body2, site)
}

/// The cotangents of a `while`'s initial carries.
pub(super) fn backward_while(
    ad: &mut Ad<'_>,
    id: NodeId,
    node: &Node,
    _x: &[ValueId],
    _y: &[ValueId],
    g: &[Option<ValueId>],
) -> Result<Vec<Option<ValueId>>> {
    let Some(tape) = ad.tapes[id.index()].take() else {
        return Err(crate::Error::internal(format!(
            "autodiff: loop '{}' has no tape",
            node.name
        )));
    };
    let site = node.site.clone();
    let m = node.inputs.len();
    let act_idx: Vec<usize> = (0..m).filter(|k| tape.act[*k]).collect();
    let mut cts = Vec::with_capacity(act_idx.len());
    for &k in &act_idx {
        cts.push(or_zeros(&mut ad.g, g[k], ad.src.ty(node.inputs[k]), &site)?);
    }
    let na = cts.len();
    let types: Vec<TensorType> = (node.inputs.iter())
        .map(|v| ad.src.ty(*v).clone())
        .collect();
    let bv = &tape.bv;
    let used = &tape.used;
    let finals: Vec<ValueId> = match &tape.kind {
        TapeKind::Empty => cts,
        TapeKind::Counted {
            steps,
            trips,
            counter,
            lower,
            saved,
            stacks,
            row_types,
            invariant,
        } => {
            let ns = stacks.len();
            let mut carries = cts;
            carries.extend(stacks);
            let inv: Vec<(usize, ValueId)> = (invariant.iter().enumerate())
                .filter_map(|(k, v)| v.map(|v| (k, v)))
                .collect();
            carries.extend(inv.iter().map(|(_, v)| *v));
            let zero = constant(&mut ad.g, DType::I32, 0.0, &site)?;
            let upper = match trips {
                Some(n) => *n,
                None => constant(&mut ad.g, DType::I32, *steps as f64, &site)?,
            };
            // The trip count rides along as the last carry.
            carries.push(upper);
            let nc = carries.len();
            let res = fori_loop(&mut ad.g, zero, upper, &carries, &site, |r, j, c| {
                let one = constant(r, DType::I32, 1.0, &site)?;
                let last = r.add(Op::Binary(BinaryOp::Sub), &[c[nc - 1], one], site.clone())?;
                let t = r.add(Op::Binary(BinaryOp::Sub), &[last, j], site.clone())?;
                let z = constant(r, DType::I32, 0.0, &site)?;
                let mut rows = Vec::with_capacity(ns);
                for (s, ty) in row_types.iter().enumerate() {
                    let dims = static_dims(ty)?;
                    let mut sizes = vec![1];
                    sizes.extend(&dims);
                    let mut ins = vec![c[na + s], t];
                    ins.extend(std::iter::repeat_n(z, dims.len()));
                    let row = r.add(Op::DynamicSlice { sizes }, &ins, site.clone())?;
                    rows.push(r.add(Op::Reshape(Shape::known(&dims)), &[row], site.clone())?);
                }
                let mut args = Vec::with_capacity(m + ns + na);
                for (k, ty) in types.iter().enumerate() {
                    let v = if let Some(s) = saved.iter().position(|i| *i == k) {
                        rows[s]
                    } else if k == *counter {
                        let d = ty.dtype;
                        let tk = if d == DType::I32 {
                            t
                        } else {
                            r.add(Op::Convert(d), &[t], site.clone())?
                        };
                        let lo = constant(r, d, *lower as f64, &site)?;
                        r.add(Op::Binary(BinaryOp::Add), &[lo, tk], site.clone())?
                    } else if let Some(q) = inv.iter().position(|(i, _)| *i == k) {
                        c[na + ns + q]
                    } else {
                        // Not read by the gradient.
                        zeros(r, ty, &site)?
                    };
                    args.push(v);
                }
                args.extend(&rows[saved.len()..]);
                args.extend(&c[..na]);
                let mut out = inline(r, bv, &args, "")?;
                out.extend(&c[na..]);
                Ok(out)
            })?;
            res[..na].to_vec()
        }
        TapeKind::Taped {
            trips,
            saved,
            saved_types,
            pop,
        } => {
            let mut carries = cts;
            carries.push(*trips);
            let zero = constant(&mut ad.g, DType::I32, 0.0, &site)?;
            let res = fori_loop(&mut ad.g, zero, *trips, &carries, &site, |r, _j, c| {
                // The carries of the iterations in reverse: last pushed,
                // first popped.
                let rows = if saved.is_empty() {
                    Vec::new()
                } else {
                    tape_callback(r, pop.clone(), Vec::new(), saved_types.clone(), &site)?
                };
                let mut args: Vec<ValueId> = Vec::with_capacity(m + na);
                for (k, ty) in types.iter().enumerate() {
                    args.push(match saved.iter().position(|&s| s == k) {
                        Some(s) => rows[s],
                        None => zeros(r, ty, &site)?,
                    });
                }
                args.extend(&c[..na]);
                let mut out = inline(r, bv, &args, "")?;
                out.extend(&c[na..]);
                Ok(out)
            })?;
            res[..na].to_vec()
        }
        TapeKind::Counting { trips, init, body } => {
            let mut carries = cts;
            carries.extend(init);
            carries.push(*trips);
            let zero = constant(&mut ad.g, DType::I32, 0.0, &site)?;
            let res = fori_loop(&mut ad.g, zero, *trips, &carries, &site, |r, j, c| {
                let n = c[na + m];
                let one = constant(r, DType::I32, 1.0, &site)?;
                let last = r.add(Op::Binary(BinaryOp::Sub), &[n, one], site.clone())?;
                let t = r.add(Op::Binary(BinaryOp::Sub), &[last, j], site.clone())?;
                let z = constant(r, DType::I32, 0.0, &site)?;
                let start = &c[na..na + m];
                let carries_t =
                    fori_loop(r, z, t, start, &site, |r2, _i, cs| inline(r2, body, cs, ""))?;
                let mut args: Vec<ValueId> = Vec::with_capacity(m + na);
                for k in 0..m {
                    args.push(if used[k] {
                        carries_t[k]
                    } else {
                        zeros(r, &types[k], &site)?
                    });
                }
                args.extend(&c[..na]);
                let mut out = inline(r, bv, &args, "")?;
                out.extend(&c[na..]);
                Ok(out)
            })?;
            res[..na].to_vec()
        }
    };
    let mut out = vec![None; m];
    for (j, &k) in act_idx.iter().enumerate() {
        out[k] = Some(finals[j]);
    }
    Ok(out)
}

/// The cotangents of a `case`'s operands: a `case` on the same index over
/// the branches' gradients.
pub(super) fn backward_case(
    ad: &mut Ad<'_>,
    id: NodeId,
    branches: &[Region],
    x: &[ValueId],
    g: &[Option<ValueId>],
    needs: &[bool],
) -> Result<Vec<Option<ValueId>>> {
    let src = ad.src;
    let node = src.node(id);
    let site = node.site.clone();
    let wrt: Vec<usize> = (1..x.len()).filter(|i| needs[*i]).map(|i| i - 1).collect();
    let seeded: Vec<usize> = (node.results.iter().enumerate())
        .filter(|(_, r)| super::is_differentiable(src.ty(**r).dtype))
        .map(|(k, _)| k)
        .collect();
    let mut cts = Vec::with_capacity(seeded.len());
    for &k in &seeded {
        cts.push(or_zeros(&mut ad.g, g[k], src.ty(node.results[k]), &site)?);
    }
    let what = format!("branch of '{}'", node.name);
    let mut grads = Vec::with_capacity(branches.len());
    for b in branches {
        let mut bv = reverse(
            b.graph(),
            &wrt,
            super::Seed::Params(&seeded),
            false,
            super::WhileCarries::Recompute,
        )?;
        prune_for_recompute(&mut bv, &what)?;
        grads.push(bv);
    }
    let mut args = x[1..].to_vec();
    args.extend(cts);
    let res = crate::builder::case(&mut ad.g, x[0], &args, grads, &site)?;
    let mut out = vec![None; x.len()];
    for (j, &i) in wrt.iter().enumerate() {
        out[i + 1] = Some(res[j]);
    }
    Ok(out)
}
