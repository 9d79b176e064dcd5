//! Optimization passes. Each is a named function that reports whether it
//! changed the graph; [`optimize`] runs the pipeline to a fixed point.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};

use crate::{
    BinaryOp, DType, Effect, Graph, Literal, NewNode, Node, NodeId, Op, ReduceOp, Result, Scalar,
    Shape, TensorType, UnaryOp, ValueId,
};

/// Evaluates a node on constant operands, for constant folding. The IR knows
/// nothing about execution; the runtime's interpreter implements this.
pub trait ConstEval {
    /// The node's results for constant `inputs`, or `None` to leave it be.
    fn eval(&self, graph: &Graph, node: &Node, inputs: &[&Literal]) -> Option<Vec<Literal>>;
}

/// A named graph transformation.
pub struct Pass<'a> {
    /// Name shown in dumps and errors.
    pub name: &'static str,
    /// Runs the pass; returns whether the graph changed.
    pub run: Box<dyn Fn(&mut Graph) -> bool + 'a>,
}

impl std::fmt::Debug for Pass<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pass({})", self.name)
    }
}

/// Largest folded constant: folding never creates a literal with more
/// elements than this unless its inputs were at least as large.
pub const FOLD_LIMIT: usize = 4096;

/// Removes pure nodes whose results are unused. Parameters and stateful
/// nodes always stay.
pub fn dce(g: &mut Graph) -> bool {
    let mut live = vec![false; g.num_values()];
    for o in g.outputs() {
        live[o.value.index()] = true;
    }
    let mut keep = vec![false; g.nodes().len()];
    for id in g.node_ids().rev() {
        let n = g.node(id);
        let needed = matches!(n.op, Op::Parameter { .. })
            || n.effect == Effect::Stateful
            || n.results.iter().any(|r| live[r.index()]);
        if needed {
            keep[id.index()] = true;
            for i in &n.inputs {
                live[i.index()] = true;
            }
        }
    }
    if keep.iter().all(|k| *k) {
        return false;
    }
    g.retain_nodes(&keep);
    true
}

/// Merges pure nodes with the same op, operands and result types (common
/// subexpression elimination). Stateful nodes are never merged.
pub fn cse(g: &mut Graph) -> bool {
    // Candidates by a hash of (op, operands, result types), compared in
    // full: no key is cloned (the pass runs several times per compile, and
    // cloning each node's op, operands and types into a SipHash map was
    // most of its cost).
    let mut seen: rustc_hash::FxHashMap<u64, Vec<NodeId>> = Default::default();
    let mut changed = false;
    for id in g.node_ids() {
        let n = g.node(id);
        if n.effect == Effect::Stateful || matches!(n.op, Op::Parameter { .. }) {
            continue;
        }
        let mut h = rustc_hash::FxHasher::default();
        n.op.hash(&mut h);
        n.inputs.hash(&mut h);
        for r in &n.results {
            g.ty(*r).hash(&mut h);
        }
        let key = h.finish();
        let same = |first: NodeId| {
            let m = g.node(first);
            m.op == n.op
                && m.inputs == n.inputs
                && m.results.len() == n.results.len()
                && m.results
                    .iter()
                    .zip(&n.results)
                    .all(|(a, b)| g.ty(*a) == g.ty(*b))
        };
        match seen
            .get(&key)
            .and_then(|c| c.iter().copied().find(|&f| same(f)))
        {
            Some(first) => {
                let pairs: Vec<(ValueId, ValueId)> = n
                    .results
                    .iter()
                    .copied()
                    .zip(g.node(first).results.iter().copied())
                    .collect();
                for (from, to) in pairs {
                    g.replace_all_uses(from, to);
                }
                changed = true;
            }
            None => seen.entry(key).or_default().push(id),
        }
    }
    if changed {
        dce(g);
    }
    changed
}

/// Replaces pure nodes whose operands are all constants with the constants
/// they evaluate to (within [`FOLD_LIMIT`]). A stateless callback folds
/// whatever its declared result types: its results become constants of the
/// shapes it returned, and the types after it are re-inferred (when they
/// contradict what it returned, it is left to fail when it runs).
pub fn constant_fold(g: &mut Graph, eval: &dyn ConstEval) -> bool {
    let mut changed = false;
    let mut refined: HashMap<NodeId, Vec<Literal>> = HashMap::new();
    for id in g.node_ids() {
        let n = g.node(id);
        // Control flow is not folded: a loop could run for ever at compile
        // time. Its regions are optimized on their own.
        if n.effect == Effect::Stateful
            || matches!(n.op, Op::Parameter { .. } | Op::Constant(_))
            || n.results.is_empty()
            || !n.op.regions().is_empty()
        {
            continue;
        }
        let Some(inputs) = n
            .inputs
            .iter()
            .map(|v| {
                if let Op::Constant(l) = &g.producer(*v).op {
                    Some(l)
                } else {
                    None
                }
            })
            .collect::<Option<Vec<&Literal>>>()
        else {
            continue;
        };
        let in_len: usize = inputs.iter().map(|l| l.len()).sum();
        let limit = FOLD_LIMIT.max(in_len);
        let types: Vec<&TensorType> = n.results.iter().map(|r| g.ty(*r)).collect();
        let exact = types.len() == 1 && types[0].shape.is_static();
        if exact {
            if types[0].shape.num_elements().is_none_or(|len| len > limit) {
                continue;
            }
        } else if !matches!(n.op, Op::Callback(_)) {
            continue;
        }
        let Some(mut lits) = eval.eval(g, n, &inputs) else {
            continue;
        };
        if exact {
            if lits.len() != 1 || lits[0].ty() != *types[0] {
                continue;
            }
            if g.replace_with_constant(id, lits.remove(0)).is_ok() {
                changed = true;
            }
            continue;
        }
        let fits = lits.len() == types.len()
            && lits.iter().zip(&types).all(|(l, t)| {
                let lt = l.ty();
                lt.dtype == t.dtype && t.shape.compatible(&lt.shape)
            })
            && lits.iter().map(Literal::len).sum::<usize>() <= limit;
        if fits {
            refined.insert(id, lits);
        }
    }
    if !refined.is_empty() {
        // The callbacks' results become constants of the shapes they
        // returned; every type after them is re-inferred.
        let rewritten = g.rewrite(|ng, node, _| {
            let Some(id) = node.results.first().map(|r| g.value(*r).node) else {
                return Ok(None);
            };
            let Some(lits) = refined.get(&id) else {
                return Ok(None);
            };
            lits.iter()
                .enumerate()
                .map(|(i, lit)| {
                    let name = if i == 0 {
                        node.name.clone()
                    } else {
                        ng.fresh_name(&format!("{}.{i}", node.name))
                    };
                    let c = ng.add_node(crate::NewNode {
                        op: Op::Constant(lit.clone()),
                        inputs: vec![],
                        name: Some(name),
                        site: node.site.clone(),
                        effect: Effect::Pure,
                        result_types: None,
                    })?;
                    Ok(ng.node(c).results[0])
                })
                .collect::<Result<Vec<_>>>()
                .map(Some)
        });
        if let Ok(mut ng) = rewritten {
            dce(&mut ng);
            *g = ng;
            changed = true;
        }
    }
    changed
}

/// Whether `v` is a constant, possibly broadcast or reshaped, whose
/// elements all equal `value` bitwise.
fn is_splat(g: &Graph, v: ValueId, value: f64) -> bool {
    splat_source(g, v).is_some_and(|l| l.is_splat_of(value))
}

/// The constant `v` is, possibly broadcast or reshaped.
fn splat_source(g: &Graph, mut v: ValueId) -> Option<&Literal> {
    loop {
        match &g.producer(v).op {
            Op::Constant(l) => return Some(l),
            Op::BroadcastInDim { .. } | Op::Reshape(_) => v = g.producer(v).inputs[0],
            Op::Parameter { .. }
            | Op::Iota { .. }
            | Op::Unary(_)
            | Op::Binary(_)
            | Op::Compare(_)
            | Op::Select
            | Op::Clamp
            | Op::Convert(_)
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
            | Op::CustomVjp { .. } => return None,
        }
    }
}

/// One algebraic rule: the value a node's single result may be replaced with.
type Rule = fn(&Graph, &Node) -> Option<ValueId>;

fn identity_rules(g: &Graph, n: &Node) -> Option<ValueId> {
    let x = *n.inputs.first()?;
    let dt = g.ty(x).dtype;
    let float = dt.is_float() || dt.is_complex();
    // A float op computes, and so quiets a signalling NaN (the NaN policy,
    // docs/ir.md): `x * 1` is not `x` bit for bit when x is one. Only
    // integer and bool arithmetic identities apply.
    match &n.op {
        Op::Binary(_) if float => None,
        Op::Binary(BinaryOp::Add) => {
            let y = n.inputs[1];
            if is_splat(g, y, 0.0) {
                Some(x)
            } else if is_splat(g, x, 0.0) {
                Some(y)
            } else {
                None
            }
        }
        Op::Binary(BinaryOp::Sub) if is_splat(g, n.inputs[1], 0.0) => Some(x),
        Op::Binary(BinaryOp::Mul) if is_splat(g, n.inputs[1], 1.0) => Some(x),
        Op::Binary(BinaryOp::Mul) if is_splat(g, x, 1.0) => Some(n.inputs[1]),
        // x / 1 and x ^ 1 are x for every integer dtype.
        Op::Binary(BinaryOp::Div | BinaryOp::Pow) if is_splat(g, n.inputs[1], 1.0) => Some(x),
        Op::Binary(BinaryOp::And) if dt == DType::Bool && is_splat(g, n.inputs[1], 1.0) => Some(x),
        Op::Binary(BinaryOp::Or) if dt == DType::Bool && is_splat(g, n.inputs[1], 0.0) => Some(x),
        Op::Binary(BinaryOp::Max | BinaryOp::Min | BinaryOp::And | BinaryOp::Or)
            if n.inputs[1] == x =>
        {
            Some(x)
        }
        Op::Unary(u @ (UnaryOp::Neg | UnaryOp::Not)) => {
            let p = g.producer(x);
            (p.op == Op::Unary(*u)).then(|| p.inputs[0])
        }
        Op::Select if n.inputs[1] == n.inputs[2] => Some(n.inputs[1]),
        Op::Convert(to) if *to == dt => Some(x),
        Op::BitcastConvert(to) if *to == dt => Some(x),
        // A block as large as the operand starts at 0 whatever the indices.
        Op::DynamicSlice { sizes } if g.ty(x).shape.as_known().as_deref() == Some(sizes) => Some(x),
        Op::Reshape(_) | Op::BroadcastInDim { .. } if g.ty(x).shape.is_static() => Some(x),
        Op::Transpose(perm) if perm.iter().enumerate().all(|(i, p)| i == *p) => Some(x),
        Op::Reverse(axes) if axes.is_empty() => Some(x),
        Op::Reduce { axes, .. } if axes.is_empty() => Some(x),
        Op::Slice { start, stride, .. }
            if start.iter().all(|s| *s == 0) && stride.iter().all(|s| *s == 1) =>
        {
            Some(x)
        }
        Op::Pad {
            low,
            high,
            interior,
        } if low.iter().chain(high).all(|p| *p == 0) && interior.iter().all(|i| *i == 0) => Some(x),
        Op::Concatenate { .. } if n.inputs.len() == 1 => Some(x),
        Op::Parameter { .. }
        | Op::Constant(_)
        | Op::Iota { .. }
        | Op::Unary(_)
        | Op::Binary(_)
        | Op::Compare(_)
        | Op::Select
        | Op::Clamp
        | Op::Convert(_)
        | Op::BroadcastInDim { .. }
        | Op::Reshape(_)
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
        | Op::CustomVjp { .. } => None,
    }
}

const RULES: &[Rule] = &[identity_rules];

/// Algebraic simplification: rewrites that are exact for every input
/// (`x*1`, `x+(-0.0)`, `neg(neg x)`, identity reshapes, ...). A rewrite only
/// applies when the replacement has exactly the node's result type.
pub fn simplify(g: &mut Graph) -> bool {
    let mut changed = false;
    for id in g.node_ids() {
        let n = g.node(id);
        if n.effect == Effect::Stateful || n.results.len() != 1 {
            continue;
        }
        let out = n.results[0];
        for rule in RULES {
            if let Some(to) = rule(g, n)
                && to != out
                && g.ty(to) == g.ty(out)
            {
                g.replace_all_uses(out, to);
                changed = true;
                break;
            }
        }
    }
    if changed {
        dce(g);
    }
    changed
}

/// Lowers the markers differentiation reads: `stop_gradient` becomes its
/// operand and `custom_vjp` its body, inlined. Run once differentiation is
/// done (the standard pipeline starts with it); regions are lowered by
/// their own pipelines.
pub fn lower_autodiff(g: &mut Graph) -> bool {
    let marked = |op: &Op| matches!(op, Op::StopGradient | Op::CustomVjp { .. });
    if !g.nodes().iter().any(|n| marked(&n.op)) {
        return false;
    }
    let lowered = g.rewrite(|ng, node, inputs| {
        if let Op::CustomVjp { body, .. } = &node.op {
            // Prefixed: the nodes copied after it keep their names.
            let prefix = format!("{}/", node.name);
            return crate::autodiff::inline(ng, body.graph(), inputs, &prefix).map(Some);
        }
        Ok(matches!(node.op, Op::StopGradient).then(|| vec![inputs[0]]))
    });
    match lowered {
        Ok(l) => {
            *g = l;
            true
        }
        Err(_) => false,
    }
}

/// Optimizes the regions of every control-flow node with the standard
/// pipeline (which recurses into regions nested in them). A region that
/// fails to optimize is left as it was; the verifier reports it.
pub fn optimize_regions(g: &mut Graph, eval: &dyn ConstEval) -> bool {
    let mut changed = false;
    for region in g.regions_mut() {
        let mut r = region.graph().clone();
        if optimize(&mut r, eval).is_ok() && r != *region.graph() {
            *region = crate::Region::new(r);
            changed = true;
        }
    }
    changed
}

/// Whether loop-invariant code motion moves a node of `op` out of a loop
/// body: `None` never (it has no operands to be invariant in, may fail at
/// run time so that hoisting would fail a loop that runs no iteration, or
/// holds regions); `Some(false)` only as part of a hoisted computation
/// (cheaper to recompute in its consumers' kernels than to load, as XLA's
/// invariant-code motion judges broadcasts and constants); `Some(true)`
/// worth a carried buffer of its own.
fn hoistable(op: &Op) -> Option<bool> {
    match op {
        Op::Parameter { .. }
        | Op::Callback(_)
        | Op::Take { .. }
        | Op::Dynamic(_)
        | Op::While { .. }
        | Op::Case { .. }
        | Op::CustomVjp { .. } => None,
        Op::StopGradient
        | Op::Constant(_)
        | Op::Iota { .. }
        | Op::BroadcastInDim { .. }
        | Op::Reshape(_)
        | Op::Transpose(_)
        | Op::Slice { .. }
        | Op::Reverse(_)
        | Op::Convert(_)
        | Op::BitcastConvert(_)
        | Op::Select
        | Op::DynamicSlice { .. } => Some(false),
        Op::Unary(_)
        | Op::Binary(_)
        | Op::Compare(_)
        | Op::Clamp
        | Op::Concatenate { .. }
        | Op::Pad { .. }
        | Op::Reduce { .. }
        | Op::ArgMax { .. }
        | Op::ArgMin { .. }
        | Op::ArgSort { .. }
        | Op::Cumsum { .. }
        | Op::DotGeneral(_)
        | Op::DynamicUpdateSlice
        | Op::Scatter { .. } => Some(true),
    }
}

/// Loop-invariant code motion: in the body of every `while`, a pure
/// computation whose operands are all carries the body passes through
/// unchanged (captured values, constants) is computed once before the
/// loop and carried in as a new pass-through carry. Only computations
/// holding at least one op worth a buffer of its own move ([`hoistable`]).
pub fn licm(g: &mut Graph) -> bool {
    let plans: HashMap<NodeId, Vec<ValueId>> = g
        .node_ids()
        .filter_map(|id| match &g.node(id).op {
            Op::While { body, .. } => {
                let f = invariant_frontier(body.graph());
                (!f.is_empty()).then_some((id, f))
            }
            Op::Parameter { .. }
            | Op::Constant(_)
            | Op::Iota { .. }
            | Op::Unary(_)
            | Op::Binary(_)
            | Op::Compare(_)
            | Op::Select
            | Op::Clamp
            | Op::Convert(_)
            | Op::BroadcastInDim { .. }
            | Op::Reshape(_)
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
            | Op::Case { .. }
            | Op::StopGradient
            | Op::CustomVjp { .. } => None,
        })
        .collect();
    if plans.is_empty() {
        return false;
    }
    let rewritten = g.rewrite(|ng, node, inputs| {
        let Some(id) = node.results.first().map(|r| g.value(*r).node) else {
            return Ok(None);
        };
        let (Some(frontier), Op::While { cond, body }) = (plans.get(&id), &node.op) else {
            return Ok(None);
        };
        hoist(ng, node, inputs, cond.graph(), body.graph(), frontier).map(Some)
    });
    adopt(g, rewritten)
}

/// Right-operand layout in loops: inside the body of every `while`, an
/// f32/f64 `dot_general` whose right operand is a carry the body passes
/// through unchanged, stored with a contracted dim last after a free dim
/// (`x·Wᵀ`, what a gradient multiplies by), reads the operand transposed
/// to batch, contracted, free order instead. [`licm`] then computes the
/// transposed copy once before the loop, and every iteration multiplies a
/// row-major operand: the GEMM packs a column-major one several times
/// slower (docs/compiler.md, "GEMM"). The product's values do not change.
pub fn loop_operand_layout(g: &mut Graph) -> bool {
    let mut changed = false;
    for region in g.while_bodies_mut() {
        if let Some(body) = relayout_body(region.graph()) {
            *region = crate::Region::new(body);
            changed = true;
        }
    }
    changed
}

/// The order [`loop_operand_layout`] reads a right operand of rank `rank`
/// in, when it is not the stored one: batch, contracted, then free dims.
fn row_major_rhs(dd: &crate::DotDims, rank: usize) -> Option<Vec<usize>> {
    let free: Vec<usize> = (0..rank)
        .filter(|d| !dd.rhs_batch.contains(d) && !dd.rhs_contract.contains(d))
        .collect();
    let last_contracted = rank
        .checked_sub(1)
        .is_some_and(|l| dd.rhs_contract.contains(&l));
    if free.is_empty() || !last_contracted {
        return None;
    }
    let perm: Vec<usize> = (dd.rhs_batch.iter().chain(&dd.rhs_contract).chain(&free))
        .copied()
        .collect();
    (perm.iter().enumerate().any(|(i, p)| i != *p)).then_some(perm)
}

fn relayout_body(body: &Graph) -> Option<Graph> {
    let params = body.params();
    let passed: Vec<ValueId> = (params.iter().enumerate())
        .filter(|(k, p)| body.outputs().get(*k).map(|o| o.value) == Some(**p))
        .map(|(_, p)| *p)
        .collect();
    let wanted = |n: &Node| {
        let Op::DotGeneral(dd) = &n.op else {
            return None;
        };
        let float = matches!(
            body.ty(n.results[0]).dtype,
            crate::DType::F32 | crate::DType::F64
        );
        (float && passed.contains(&n.inputs[1]))
            .then(|| body.ty(n.inputs[1]).shape.rank())
            .flatten()
            .and_then(|r| row_major_rhs(dd, r))
    };
    if !body.nodes().iter().any(|n| wanted(n).is_some()) {
        return None;
    }
    body.rewrite(|bg, node, inputs| {
        let (Some(perm), Op::DotGeneral(dd)) = (wanted(node), &node.op) else {
            return Ok(None);
        };
        let rhs = layout_transpose(body, bg, inputs[1], &perm, &node.name, &node.site)?;
        let (nb, nc) = (dd.rhs_batch.len(), dd.rhs_contract.len());
        let dims = crate::DotDims {
            rhs_batch: (0..nb).collect(),
            rhs_contract: (nb..nb + nc).collect(),
            ..dd.clone()
        };
        let id = bg.add_node(NewNode {
            op: Op::DotGeneral(dims),
            inputs: vec![inputs[0], rhs],
            name: Some(node.name.clone()),
            site: node.site.clone(),
            effect: node.effect,
            result_types: None,
        })?;
        Ok(Some(bg.node(id).results.clone()))
    })
    .ok()
}

/// Operand layout for GEMMs: an f32/f64 `dot_general` multiplies strided
/// operands without copies when each operand's batch dims, free dims and
/// contracted dims each collapse to one strided dim (in their order).
/// An operand where they do not (attention's `q·kᵀ` with q and k laid out
/// (batch, seq, heads, dim): the batch dims 0 and 2 are not adjacent) is
/// read through a transpose to batch, free, contracted order (left) or
/// batch, contracted, free order (right), which the compiler fuses into
/// one copy kernel; the product then runs as one batched GEMM. The
/// product's values do not change (the interpreter made the same copies
/// inside its `dot_general`).
pub fn dot_operand_layout(g: &mut Graph) -> bool {
    let wanted = |g: &Graph, n: &Node| -> Option<[Option<Vec<usize>>; 2]> {
        let Op::DotGeneral(dd) = &n.op else {
            return None;
        };
        if !matches!(
            g.ty(n.results[0]).dtype,
            crate::DType::F32 | crate::DType::F64
        ) {
            return None;
        }
        let ld = g.ty(n.inputs[0]).shape.as_known()?;
        let rd = g.ty(n.inputs[1]).shape.as_known()?;
        let lhs = gemm_order(&ld, &dd.lhs_batch, &dd.lhs_contract, false);
        let rhs = gemm_order(&rd, &dd.rhs_batch, &dd.rhs_contract, true);
        (lhs.is_some() || rhs.is_some()).then_some([lhs, rhs])
    };
    if !g.nodes().iter().any(|n| wanted(g, n).is_some()) {
        return false;
    }
    let rewritten = g.rewrite(|ng, node, inputs| {
        let (Some([lperm, rperm]), Op::DotGeneral(dd)) = (wanted(g, node), &node.op) else {
            return Ok(None);
        };
        let mut dims = dd.clone();
        let mut operands = inputs.to_vec();
        let nb = dd.lhs_batch.len();
        let nc = dd.lhs_contract.len();
        if let Some(perm) = lperm {
            operands[0] = layout_transpose(g, ng, inputs[0], &perm, &node.name, &node.site)?;
            let nf = perm.len() - nb - nc;
            dims.lhs_batch = (0..nb).collect();
            dims.lhs_contract = (nb + nf..nb + nf + nc).collect();
        }
        if let Some(perm) = rperm {
            operands[1] = layout_transpose(g, ng, inputs[1], &perm, &node.name, &node.site)?;
            dims.rhs_batch = (0..nb).collect();
            dims.rhs_contract = (nb..nb + nc).collect();
        }
        replace_node(ng, node, Op::DotGeneral(dims), operands)
    });
    adopt(g, rewritten)
}

/// The value of a constant `v` holds, possibly broadcast or reshaped,
/// when its elements are all one float value.
fn splat_float(g: &Graph, v: ValueId) -> Option<f64> {
    let l = splat_source(g, v)?;
    if l.is_empty() {
        return None;
    }
    match l.element(0) {
        Scalar::Float(x, _) => l.is_splat_of(x).then_some(x),
        Scalar::Bool(_) | Scalar::Int(_) | Scalar::Complex(..) => None,
    }
}

/// A scale by a power of two moved into the smaller operand of the
/// product it scales: `dot(a, b) · c` becomes `dot(a · c, b)` (or
/// `dot(a, b · c)`), for an f32/f64 `dot_general` read by nothing else and
/// `c` a splat of ±2^k. Attention's scores `(q·kᵀ)/√d` with d = 64 scale
/// q (b·h·s·d elements) instead of the scores (b·h·s·s), and the softmax
/// after them reads the product itself: its row max and exponentials run
/// as the fused rows of a plain softmax (docs/compiler.md). Scaling by a
/// power of two is exact, and so is every product and partial sum of the
/// scaled operand, unless a value leaves the normal range (overflows, or
/// falls below 2^-126 (f32) where the unscaled one did not): the JIT runs
/// it outside exact mode only, as XLA's algebraic simplifier moves scalar
/// multiplies. Not applied inside regions.
pub fn scale_into_dot(g: &mut Graph) -> bool {
    let uses = g.use_counts();
    // The products to scale, by their result (with c), and the multiplies
    // they replace, by theirs (with the product's position).
    let mut dots: HashMap<ValueId, f64> = HashMap::new();
    let mut muls: HashMap<ValueId, usize> = HashMap::new();
    for n in g.nodes() {
        if n.op != Op::Binary(BinaryOp::Mul)
            || n.results.len() != 1
            || !matches!(g.ty(n.results[0]).dtype, DType::F32 | DType::F64)
        {
            continue;
        }
        let found = (0..2).find_map(|j| {
            let p = n.inputs[j];
            let Op::DotGeneral(_) = g.producer(p).op else {
                return None;
            };
            if uses[p.index()] != 1 || g.ty(p) != g.ty(n.results[0]) || dots.contains_key(&p) {
                return None;
            }
            let c = splat_float(g, n.inputs[1 - j])?;
            is_power_of_two(c).then_some((j, p, c))
        });
        if let Some((j, p, c)) = found {
            dots.insert(p, c);
            muls.insert(n.results[0], j);
        }
    }
    if dots.is_empty() {
        return false;
    }
    let rewritten = g.rewrite(|ng, node, inputs| {
        if let Some(&j) = node.results.first().and_then(|r| muls.get(r)) {
            // The product, scaled already.
            return Ok(Some(vec![inputs[j]]));
        }
        let Some(&c) = node.results.first().and_then(|r| dots.get(r)) else {
            return Ok(None);
        };
        let dtype = g.ty(node.results[0]).dtype;
        let elements = |v: ValueId| {
            ng.ty(v)
                .shape
                .as_known()
                .map(|d| d.iter().product::<usize>())
        };
        let side = usize::from(elements(inputs[1]) < elements(inputs[0]));
        let at = |what| (node.name.as_str(), what);
        let constant = Op::Constant(Literal::scalar(dtype, c)?);
        let scale = add_derived(g, ng, at("scale"), &node.site, constant, vec![])?;
        let mul = Op::Binary(BinaryOp::Mul);
        let scaled = add_derived(
            g,
            ng,
            at("scaled"),
            &node.site,
            mul,
            vec![inputs[side], scale],
        )?;
        let mut operands = inputs.to_vec();
        operands[side] = scaled;
        replace_node(ng, node, node.op.clone(), operands)
    });
    adopt(g, rewritten)
}

/// A division by a value broadcast along the result becomes a product with
/// its reciprocal: `x / broadcast(v)` (or `x / s`, `s` a scalar) becomes
/// `x · broadcast(1 / v)`, one division per element of `v` instead of one
/// per element of the result, for f32/f64 results with more elements than
/// `v`. Each quotient then rounds twice (the reciprocal, then the
/// product), within 1.5 ulp of the quotient (but where `1/v` is denormal,
/// |v| > 2^126 in f32: flushed, the product is 0, or NaN for an infinite
/// `x`; kept, it has fewer bits) — the code XLA's CPU backend
/// runs for the same division (its results equal `x * (1 / v)` bit for
/// bit, softmax's normalization included; docs/compiler.md, "Numerics and
/// tolerances"). The JIT runs it outside exact mode only. Not applied
/// inside regions.
pub fn reciprocal_of_broadcast_divisors(g: &mut Graph) -> bool {
    // The divisions to rewrite, by their result.
    let mut divs: HashSet<ValueId> = HashSet::new();
    for n in g.nodes() {
        if n.op != Op::Binary(BinaryOp::Div) || n.results.len() != 1 {
            continue;
        }
        let ty = g.ty(n.results[0]);
        if !matches!(ty.dtype, DType::F32 | DType::F64) {
            continue;
        }
        let elements = |v: ValueId| g.ty(v).shape.num_elements();
        let Some(out) = elements(n.results[0]) else {
            continue;
        };
        let divisor = n.inputs[1];
        let producer = g.producer(divisor);
        let source = if let Op::BroadcastInDim { .. } = producer.op {
            producer.inputs[0]
        } else {
            divisor
        };
        if g.ty(source).dtype == ty.dtype && elements(source).is_some_and(|e| e < out) {
            divs.insert(n.results[0]);
        }
    }
    if divs.is_empty() {
        return false;
    }
    let rewritten = g.rewrite(|ng, node, inputs| {
        if !node.results.first().is_some_and(|r| divs.contains(r)) {
            return Ok(None);
        }
        let divisor = inputs[1];
        let producer = ng.producer(divisor);
        let broadcast = if let Op::BroadcastInDim { shape, dims } = &producer.op {
            Some((producer.inputs[0], shape.clone(), dims.clone()))
        } else {
            None
        };
        let source = broadcast.as_ref().map_or(divisor, |b| b.0);
        // A scalar divisor is broadcast explicitly, so that the planner
        // computes its reciprocal once (it looks for broadcasts).
        let broadcast = broadcast.or_else(|| {
            let shape = ng.ty(inputs[0]).shape.clone();
            (ng.ty(divisor).shape.rank() == Some(0) && shape.rank().is_some_and(|r| r > 0))
                .then(|| (divisor, shape, Vec::new()))
        });
        let add = |ng: &mut Graph, op: Op, inputs: Vec<ValueId>, what: &str| {
            add_derived(g, ng, (&node.name, what), &node.site, op, inputs)
        };
        let mut factor = add(
            ng,
            Op::Unary(UnaryOp::Reciprocal),
            vec![source],
            "reciprocal",
        )?;
        if let Some((_, shape, dims)) = broadcast {
            factor = add(
                ng,
                Op::BroadcastInDim { shape, dims },
                vec![factor],
                "broadcast",
            )?;
        }
        replace_node(ng, node, Op::Binary(BinaryOp::Mul), vec![inputs[0], factor])
    });
    adopt(g, rewritten)
}

/// Elements an f32 sum adds (per output element) from which [`split_long_sums`] splits
/// it in two.
pub const LONG_SUM: usize = 1 << 16;

/// An f32 sum over `n ≥ LONG_SUM` elements of one group of adjacent axes
/// (the innermost ones, a whole tensor's sum, a column sum over many rows,
/// a batch norm's N·H·W) becomes two: the elements as rows of `b` (a
/// divisor of `n` near `√n`, from 256 to 8192), each row summed, then the
/// `n / b` row sums. Compiled column and middle-axis sums add each column
/// in row order too (the sum of 2^25 rows of ones stopped at 2^24). Compiled code sums a row with f32 vector
/// accumulators, each lane adding its elements in sequence, so one row of
/// 10^7 values of 0.1 summed to 1,005,958.6 (6e-3 off); as rows of 3200
/// it is within 1e-7 of the exact sum, and the rows split over threads
/// (a whole tensor's sum ran on one). The JIT runs it outside exact mode
/// only (the interpreter and exact mode sum in f64). A length with no such
/// divisor (a prime) sums its whole rows of 4096 (of `√n` for a column sum)
/// that way and adds the sum of the rest. Not applied inside regions.
pub fn split_long_sums(g: &mut Graph) -> bool {
    let block_of = |n: usize| {
        let root = (n as f64).sqrt();
        (256..=8192usize)
            .filter(|b| n.is_multiple_of(*b))
            .min_by(|a, b| {
                let d = |x: usize| ((x as f64) / root).ln().abs();
                d(*a).total_cmp(&d(*b))
            })
    };
    // The sums to split, by their result: the dims before the reduced
    // ones, their length, the dims after them, and the block that divides
    // the length, if one does.
    type Long = (Vec<usize>, usize, Vec<usize>, Option<usize>);
    let mut long: HashMap<ValueId, Long> = HashMap::new();
    for n in g.nodes() {
        let Op::Reduce {
            op: ReduceOp::Sum,
            axes,
            ..
        } = &n.op
        else {
            continue;
        };
        let t = g.ty(n.inputs[0]);
        let Some(dims) = t.shape.as_known() else {
            continue;
        };
        // Axes `p..q`, one group (sorted and unique, as `Reduce` keeps them).
        let (Some(&p), Some(&last)) = (axes.first(), axes.last()) else {
            continue;
        };
        let q = last + 1;
        if t.dtype != DType::F32 || q - p != axes.len() || q > dims.len() {
            continue;
        }
        let len: usize = dims[p..q].iter().product();
        if len < LONG_SUM {
            continue;
        }
        let (pre, post) = (dims[..p].to_vec(), dims[q..].to_vec());
        long.insert(n.results[0], (pre, len, post, block_of(len)));
    }
    if long.is_empty() {
        return false;
    }
    let rewritten = g.rewrite(|ng, node, inputs| {
        let Some((pre, len, post, b)) = node.results.first().and_then(|r| long.get(r)) else {
            return Ok(None);
        };
        let add_n = |ng: &mut Graph, op: Op, inputs: Vec<ValueId>, what: &str| {
            add_derived(g, ng, (&node.name, what), &node.site, op, inputs)
        };
        let add = |ng: &mut Graph, op: Op, x: ValueId, what: &str| add_n(ng, op, vec![x], what);
        // Dims `pre ++ mid ++ post`.
        let k = pre.len();
        let shape = |mid: &[usize]| {
            Shape::Ranked(
                pre.iter()
                    .chain(mid)
                    .chain(post)
                    .map(|&d| Some(d))
                    .collect(),
            )
        };
        let sum = |axis: usize| Op::Reduce {
            op: ReduceOp::Sum,
            axes: vec![axis],
            keepdims: false,
        };
        // The reduced elements as one dim, then its whole rows of `b`.
        let flat = add(ng, Op::Reshape(shape(&[*len])), inputs[0], "flat")?;
        // (No divisor: rows of 4096 for a row sum, whose 16 to 64 vector
        // chains share a row; rows of √n for a column sum, which adds each
        // column's `b` rows in sequence.)
        let b = b.unwrap_or(match post.is_empty() {
            true => 4096,
            false => (*len as f64).sqrt() as usize,
        });
        let whole = len / b * b;
        let part = |ng: &mut Graph, from: usize, to: usize, what: &str| {
            let start = (pre.iter().map(|_| 0))
                .chain([from])
                .chain(post.iter().map(|_| 0))
                .collect();
            let limit = (pre.iter().copied())
                .chain([to])
                .chain(post.iter().copied())
                .collect();
            let stride = vec![1; k + 1 + post.len()];
            let op = Op::Slice {
                start,
                limit,
                stride,
            };
            match (from, to) == (0, *len) {
                true => Ok(flat),
                false => add(ng, op, flat, what),
            }
        };
        let head = part(ng, 0, whole, "whole_rows")?;
        let x = add(ng, Op::Reshape(shape(&[whole / b, b])), head, "rows")?;
        let partial = add(ng, sum(k + 1), x, "row_sums")?;
        let mut total = add(ng, sum(k), partial, "sum")?;
        if whole < *len {
            let rest = part(ng, whole, *len, "rest")?;
            let rest = add(ng, sum(k), rest, "rest_sum")?;
            total = add_n(ng, Op::Binary(BinaryOp::Add), vec![total, rest], "total")?;
        }
        let want = g.ty(node.results[0]).shape.clone();
        if ng.ty(total).shape == want {
            return Ok(Some(vec![total]));
        }
        // keepdims: the reduced axes back as 1s.
        Ok(Some(vec![add(ng, Op::Reshape(want), total, "kept")?]))
    });
    adopt(g, rewritten)
}

/// `node` rebuilt in `ng` as `op` over `inputs`, keeping its name, site
/// and effect: what a rewrite puts in place of a node it changes.
fn replace_node(
    ng: &mut Graph,
    node: &Node,
    op: Op,
    inputs: Vec<ValueId>,
) -> Result<crate::Rewritten> {
    let id = ng.add_node(NewNode {
        op,
        inputs,
        name: Some(node.name.clone()),
        site: node.site.clone(),
        effect: node.effect,
        result_types: None,
    })?;
    Ok(Some(ng.node(id).results.clone()))
}

/// Puts a rewrite's graph in place of `g`; false, leaving `g` as it was,
/// when the rewrite failed.
fn adopt(g: &mut Graph, rewritten: Result<Graph>) -> bool {
    match rewritten {
        Ok(ng) => {
            *g = ng;
            true
        }
        Err(_) => false,
    }
}

/// `base`, or `base_k` for the first k that makes it a name taken neither
/// in `ng` nor by a node of `old` that the rewrite has yet to copy.
fn fresh_name(old: &Graph, ng: &Graph, base: &str) -> String {
    (0..)
        .map(|k| {
            if k == 0 {
                base.to_string()
            } else {
                format!("{base}_{k}")
            }
        })
        .find(|n| !old.has_name(n) && !ng.has_name(n))
        .unwrap_or_else(|| base.to_string())
}

/// A pure node `op(inputs)` added to `ng` by a rewrite of `old`, named
/// `{base}.{what}` ([`fresh_name`]) at `site`: its result.
fn add_derived(
    old: &Graph,
    ng: &mut Graph,
    (base, what): (&str, &str),
    site: &crate::Site,
    op: Op,
    inputs: Vec<ValueId>,
) -> Result<ValueId> {
    let name = fresh_name(old, ng, &format!("{base}.{what}"));
    let id = ng.add_node(NewNode {
        op,
        inputs,
        name: Some(name),
        site: site.clone(),
        effect: Effect::Pure,
        result_types: None,
    })?;
    Ok(ng.node(id).results[0])
}

/// Whether `c` is ±2^k of normal magnitude: a scale by it is exact for
/// every value that stays in the normal range (`scale_into_dot`, and the
/// JIT's GEMM scales).
pub fn is_power_of_two(c: f64) -> bool {
    let bits = c.to_bits();
    let exponent = (bits >> 52) & 0x7ff;
    bits & ((1 << 52) - 1) == 0 && exponent != 0 && exponent != 0x7ff
}

/// `transpose(x, perm)` added to `ng`, a rewrite of `old`, for the
/// product named `user`: named `{user}.layout` (or with a counter) so that
/// the name is taken neither in `ng` nor by a node of `old` that the
/// rewrite has yet to copy (a fresh name in `ng` alone collided with a
/// later node named `transpose`, and the whole rewrite failed).
fn layout_transpose(
    old: &Graph,
    ng: &mut Graph,
    x: ValueId,
    perm: &[usize],
    user: &str,
    site: &crate::Site,
) -> Result<ValueId> {
    add_derived(
        old,
        ng,
        (user, "layout"),
        site,
        Op::Transpose(perm.to_vec()),
        vec![x],
    )
}

/// The transpose [`dot_operand_layout`] reads an operand of shape `dims`
/// through: `None` when its batch, free and contracted dims each collapse
/// to one strided dim of the row-major operand ([`crate::DotDims::collapse`],
/// the test the GEMM's layout makes), else batch, free, contracted order (batch, contracted,
/// free for a right operand, `rhs`).
fn gemm_order(
    dims: &[usize],
    batch: &[usize],
    contract: &[usize],
    rhs: bool,
) -> Option<Vec<usize>> {
    let free: Vec<usize> = (0..dims.len())
        .filter(|d| !batch.contains(d) && !contract.contains(d))
        .collect();
    let collapses = |group: &[usize]| crate::DotDims::collapse(dims, group).is_some();
    if collapses(batch) && collapses(&free) && collapses(contract) {
        return None;
    }
    let (second, third) = if rhs {
        (contract, free.as_slice())
    } else {
        (free.as_slice(), contract)
    };
    Some(batch.iter().chain(second).chain(third).copied().collect())
}

/// The values of `body` to hoist: invariant, used by a node that is not
/// (or returned), and computed by a cone holding an op worth hoisting.
fn invariant_frontier(body: &Graph) -> Vec<ValueId> {
    let params = body.params();
    let mut invariant = vec![false; body.num_values()];
    let mut worth = vec![false; body.num_values()];
    for (k, p) in params.iter().enumerate() {
        if body.outputs().get(k).map(|o| o.value) == Some(*p) {
            invariant[p.index()] = true;
        }
    }
    // A transposed copy a product reads is worth a buffer: the layout the
    // GEMM wants ([`loop_operand_layout`]).
    let mut read_by_dot = vec![false; body.num_values()];
    for n in body.nodes() {
        if let Op::DotGeneral(_) = n.op {
            for v in &n.inputs {
                read_by_dot[v.index()] = true;
            }
        }
    }
    for id in body.node_ids() {
        let n = body.node(id);
        let Some(w) = hoistable(&n.op) else { continue };
        let w = w || matches!(n.op, Op::Transpose(_)) && read_by_dot[n.results[0].index()];
        if n.effect != Effect::Pure || n.results.len() != 1 {
            continue;
        }
        if n.inputs.iter().all(|v| invariant[v.index()]) && !n.inputs.is_empty()
            || matches!(n.op, Op::Constant(_) | Op::Iota { .. })
        {
            invariant[n.results[0].index()] = true;
            worth[n.results[0].index()] = w || n.inputs.iter().any(|v| worth[v.index()]);
        }
    }
    let mut frontier = Vec::new();
    let mut seen = vec![false; body.num_values()];
    let mut consider = |v: ValueId, frontier: &mut Vec<ValueId>| {
        if invariant[v.index()] && worth[v.index()] && !seen[v.index()] {
            seen[v.index()] = true;
            frontier.push(v);
        }
    };
    for id in body.node_ids() {
        let n = body.node(id);
        if n.results.iter().all(|r| invariant[r.index()]) && !n.results.is_empty() {
            continue;
        }
        for v in &n.inputs {
            consider(*v, &mut frontier);
        }
    }
    for o in body.outputs() {
        consider(o.value, &mut frontier);
    }
    frontier.sort();
    frontier
}

/// The `while` `node` with `frontier` (values of `body`) computed before it
/// from `inputs` and passed in as new carries; returns the values that
/// replace the node's results.
fn hoist(
    g: &mut Graph,
    node: &Node,
    inputs: &[ValueId],
    cond: &Graph,
    body: &Graph,
    frontier: &[ValueId],
) -> Result<Vec<ValueId>> {
    let n = inputs.len();
    // The invariant cone, copied before the loop.
    let mut outer: HashMap<ValueId, ValueId> = HashMap::new();
    for (k, p) in body.params().iter().enumerate() {
        outer.insert(*p, inputs[k]);
    }
    let mut needed = vec![false; body.num_values()];
    for v in frontier {
        needed[v.index()] = true;
    }
    for id in body.node_ids().rev() {
        let b = body.node(id);
        if b.results.iter().any(|r| needed[r.index()]) && !matches!(b.op, Op::Parameter { .. }) {
            for v in &b.inputs {
                needed[v.index()] = true;
            }
        }
    }
    for id in body.node_ids() {
        let b = body.node(id);
        if matches!(b.op, Op::Parameter { .. }) || !b.results.iter().any(|r| needed[r.index()]) {
            continue;
        }
        let ins = b
            .inputs
            .iter()
            .map(|v| outer.get(v).copied())
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| crate::Error::internal("hoisted node reads a variant value"))?;
        let name = g.fresh_name(&format!("{}.{}", node.name, b.name));
        let c = g.add_node(NewNode {
            op: b.op.clone(),
            inputs: ins,
            name: Some(name),
            site: b.site.clone(),
            effect: Effect::Pure,
            result_types: None,
        })?;
        outer.insert(b.results[0], g.node(c).results[0]);
    }
    let hoisted: Vec<ValueId> = frontier.iter().map(|v| outer[v]).collect();
    let extra: Vec<TensorType> = frontier.iter().map(|v| body.ty(*v).clone()).collect();
    // The body reads the new carries instead, and passes them through.
    let mut new_params = Vec::new();
    let mut new_body = body.rewrite(|bg, bn, _| {
        let Some(pos) = bn
            .results
            .first()
            .and_then(|r| frontier.iter().position(|f| f == r))
        else {
            return Ok(None);
        };
        let name = bg.fresh_name("hoisted");
        let p = bg.add_parameter(n + pos, extra[pos].clone(), Some(name), bn.site.clone())?;
        new_params.push((pos, p));
        Ok(Some(vec![p]))
    })?;
    new_params.sort();
    for (pos, p) in &new_params {
        new_body.add_output(*p, format!("hoisted_{pos}"))?;
    }
    dce(&mut new_body);
    let mut new_cond = cond.clone();
    for (pos, t) in extra.iter().enumerate() {
        let name = new_cond.fresh_name("hoisted");
        new_cond.add_parameter(n + pos, t.clone(), Some(name), node.site.clone())?;
    }
    let mut all_inputs = inputs.to_vec();
    all_inputs.extend(&hoisted);
    let id = g.add_node(NewNode {
        op: Op::While {
            cond: crate::Region::new(new_cond),
            body: crate::Region::new(new_body),
        },
        inputs: all_inputs,
        name: Some(node.name.clone()),
        site: node.site.clone(),
        effect: node.effect,
        result_types: None,
    })?;
    Ok(g.node(id).results[..n].to_vec())
}

/// The standard pipeline: simplify, fold, CSE, DCE, then the same inside
/// every region, and loop-invariant code motion.
pub fn standard_passes(eval: &dyn ConstEval) -> Vec<Pass<'_>> {
    vec![
        Pass {
            name: "lower-autodiff",
            run: Box::new(lower_autodiff),
        },
        Pass {
            name: "regions",
            run: Box::new(move |g| optimize_regions(g, eval)),
        },
        Pass {
            name: "loop-operand-layout",
            run: Box::new(loop_operand_layout),
        },
        Pass {
            name: "dot-operand-layout",
            run: Box::new(dot_operand_layout),
        },
        Pass {
            name: "licm",
            run: Box::new(licm),
        },
        Pass {
            name: "simplify",
            run: Box::new(simplify),
        },
        Pass {
            name: "constant-fold",
            run: Box::new(move |g| constant_fold(g, eval)),
        },
        Pass {
            name: "cse",
            run: Box::new(cse),
        },
        Pass {
            name: "dce",
            run: Box::new(dce),
        },
    ]
}

/// Runs `passes` repeatedly until none changes the graph (at most 32
/// rounds). With `verify_each`, the verifier runs after every pass and a
/// failure names the pass.
pub fn run_to_fixed_point(g: &mut Graph, passes: &[Pass<'_>], verify_each: bool) -> Result<()> {
    for _ in 0..32 {
        let mut changed = false;
        for p in passes {
            changed |= (p.run)(g);
            if verify_each {
                crate::verify::verify(g)
                    .map_err(|e| e.context(format!("verifier failed after pass '{}'", p.name)))?;
            }
        }
        if !changed {
            break;
        }
    }
    Ok(())
}

/// Optimizes `g` with the standard pipeline. The verifier runs after every
/// pass in debug builds.
pub fn optimize(g: &mut Graph, eval: &dyn ConstEval) -> Result<()> {
    run_to_fixed_point(g, &standard_passes(eval), cfg!(debug_assertions))
}
