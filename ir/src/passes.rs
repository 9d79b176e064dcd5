//! Optimization passes. Each is a named function that reports whether it
//! changed the graph; [`optimize`] runs the pipeline to a fixed point.

use std::collections::HashMap;

use crate::{
    BinaryOp, DType, Effect, Graph, Literal, Node, NodeId, Op, Result, TensorType, UnaryOp, ValueId,
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
    let mut seen: HashMap<(Op, Vec<ValueId>, Vec<TensorType>), NodeId> = HashMap::new();
    let mut changed = false;
    for id in g.node_ids() {
        let n = g.node(id);
        if n.effect == Effect::Stateful || matches!(n.op, Op::Parameter { .. }) {
            continue;
        }
        let types = n.results.iter().map(|r| g.ty(*r).clone()).collect();
        let key = (n.op.clone(), n.inputs.clone(), types);
        match seen.get(&key) {
            Some(&first) => {
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
            None => {
                seen.insert(key, id);
            }
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
            .map(|v| match &g.producer(*v).op {
                Op::Constant(l) => Some(l),
                _ => None,
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

/// The constant `v` holds if it is a constant, possibly broadcast or
/// reshaped, whose elements all equal `value` bitwise.
fn is_splat(g: &Graph, mut v: ValueId, value: f64) -> bool {
    loop {
        match &g.producer(v).op {
            Op::Constant(l) => return l.is_splat_of(value),
            Op::BroadcastInDim { .. } | Op::Reshape(_) => v = g.producer(v).inputs[0],
            _ => return false,
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
        _ => None,
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

/// The standard pipeline: simplify, fold, CSE, DCE, then the same inside
/// every region.
pub fn standard_passes(eval: &dyn ConstEval) -> Vec<Pass<'_>> {
    vec![
        Pass {
            name: "regions",
            run: Box::new(move |g| optimize_regions(g, eval)),
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
