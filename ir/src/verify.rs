//! The verifier: re-checks every invariant the builder guarantees, for
//! graphs that were parsed or rewritten by passes.

use std::collections::HashSet;

use crate::infer::infer;
use crate::{Detail, Effect, Error, Graph, NodeId, Op, Result, TensorType};

/// Checks `g`: topological order, value bookkeeping, unique names, result
/// types equal to inference, parameters numbered `0..n`, valid outputs.
pub fn verify(g: &Graph) -> Result<()> {
    let mut names = HashSet::new();
    let mut defined = vec![false; g.num_values()];
    let mut params = Vec::new();
    for id in g.node_ids() {
        let n = g.node(id);
        let fail = |message: String| {
            Error::InvalidArgument(Detail {
                message,
                node: Some(g.node_ref(id)),
                pos: None,
            })
        };
        if !names.insert(n.name.as_str()) {
            return Err(fail(format!("node name '{}' is used twice", n.name)));
        }
        for (k, v) in n.inputs.iter().enumerate() {
            if v.index() >= defined.len() || !defined[v.index()] {
                return Err(fail(format!("operand {k} is used before it is defined")));
            }
        }
        for (i, r) in n.results.iter().enumerate() {
            let info = g.value(*r);
            if info.node != id || info.index as usize != i {
                return Err(fail(format!(
                    "result {i} is not recorded as defined by this node"
                )));
            }
            defined[r.index()] = true;
        }
        if !matches!(n.op, Op::Callback(_)) && n.effect != n.op.region_effect() {
            return Err(fail(match n.effect {
                Effect::Stateful => {
                    "only callbacks, and control flow around them, may be stateful".into()
                }
                Effect::Pure => "control flow around a stateful callback must be stateful".into(),
            }));
        }
        for r in n.op.regions() {
            verify(r.graph()).map_err(|e| {
                e.context(format!(
                    "in region @{} of node '{}'",
                    r.graph().name,
                    n.name
                ))
            })?;
        }
        match &n.op {
            Op::Parameter { index } => {
                if n.results.len() != 1 || !n.inputs.is_empty() {
                    return Err(fail("a parameter has no operands and one result".into()));
                }
                params.push((*index, id));
            }
            Op::Callback(_) => {}
            op @ (Op::Constant(_)
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
            | Op::Dynamic(_)
            | Op::While { .. }
            | Op::Case { .. }
            | Op::StopGradient
            | Op::CustomVjp { .. }) => {
                let ins: Vec<&TensorType> = n.inputs.iter().map(|v| g.ty(*v)).collect();
                let inferred = infer(op, &ins).map_err(&fail)?;
                let actual: Vec<TensorType> = n.results.iter().map(|r| g.ty(*r).clone()).collect();
                if inferred != actual {
                    return Err(fail(format!(
                        "result type {} does not match the inferred {}",
                        crate::graph::types_str(&actual),
                        crate::graph::types_str(&inferred)
                    )));
                }
            }
        }
    }
    params.sort();
    for (expect, (index, id)) in params.iter().enumerate() {
        if *index != expect {
            let _: NodeId = *id;
            return Err(Error::InvalidArgument(Detail {
                message: format!(
                    "parameters must be numbered 0..{} without gaps or repeats; found {index}",
                    params.len()
                ),
                node: Some(g.node_ref(*id)),
                pos: None,
            }));
        }
    }
    for o in g.outputs() {
        if o.value.index() >= defined.len() || !defined[o.value.index()] {
            return Err(Error::invalid(format!(
                "output '{}' refers to an undefined value",
                o.name
            )));
        }
    }
    Ok(())
}
