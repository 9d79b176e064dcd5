//! Binding callables to the callbacks of a graph that was not traced — a
//! parsed `.tlir` program, whose text names each callback target but holds
//! no body (see `docs/callbacks.md`, "Binding callbacks of a parsed
//! program").
//!
//! A callback node calls its *target* (`%y = numpy_function "scale" (%x)`
//! calls target `scale`); several nodes may call one target, and a node's
//! own name is only a label. Binding a target binds every node calling it.

use tensorlift_ir::{CallbackKind, DType, Detail, Error, Graph, Op, Result};
use tensorlift_runtime::Tensor;
use tensorlift_runtime::callback::HostCallback;

/// One callback target of a graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallbackTarget {
    /// The name callables are bound under.
    pub name: String,
    /// The API the nodes calling it were made with.
    pub kind: CallbackKind,
    /// The declared result dtypes (`Tout`).
    pub tout: Vec<DType>,
    /// The names of the nodes calling it, in program order.
    pub nodes: Vec<String>,
    /// Whether a callable is bound to it.
    pub bound: bool,
}

/// Every callback target of `graph`, in program order of first use. When
/// nodes calling one target disagree on kind or `Tout`, the first node's
/// are given here and [`bind_host_fn`] / `bind_python` refuse the target.
pub fn callback_targets(graph: &Graph) -> Vec<CallbackTarget> {
    let mut targets: Vec<CallbackTarget> = Vec::new();
    collect_targets(graph, graph, &mut targets);
    targets
}

/// The targets of `graph`'s nodes and of the regions inside them (loop
/// bodies, branches, custom gradients), in program order; `root` answers
/// whether a target is bound.
fn collect_targets(root: &Graph, graph: &Graph, targets: &mut Vec<CallbackTarget>) {
    for id in graph.node_ids() {
        let node = graph.node(id);
        for r in node.op.regions() {
            collect_targets(root, r.graph(), targets);
        }
        let Op::Callback(c) = &node.op else {
            continue;
        };
        if let Some(t) = targets.iter_mut().find(|t| t.name == c.target) {
            t.nodes.push(node.name.clone());
        } else {
            targets.push(CallbackTarget {
                name: c.target.clone(),
                kind: c.kind,
                tout: node.results.iter().map(|v| graph.ty(*v).dtype).collect(),
                nodes: vec![node.name.clone()],
                bound: root.binding(&c.target).is_some() || graph.binding(&c.target).is_some(),
            });
        }
    }
}

/// The names of `targets`, comma-separated, or "none".
pub(crate) fn names(targets: &[CallbackTarget]) -> String {
    if targets.is_empty() {
        "none".into()
    } else {
        targets
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The callback target `name` of `graph`, checked to have one kind and one
/// `Tout` across the nodes that call it. No such target is `NotFound`
/// listing the graph's targets; disagreeing nodes are `InvalidArgument`.
pub fn callback_target(graph: &Graph, name: &str) -> Result<CallbackTarget> {
    let targets = callback_targets(graph);
    let Some(target) = targets.iter().find(|t| t.name == name) else {
        return Err(Error::NotFound(Detail::msg(format!(
            "the graph has no callback target named '{name}' (its callback targets: {})",
            names(&targets)
        ))));
    };
    for id in graph.node_ids() {
        let node = graph.node(id);
        if let Op::Callback(c) = &node.op
            && c.target == name
        {
            let tout: Vec<DType> = node.results.iter().map(|v| graph.ty(*v).dtype).collect();
            if c.kind != target.kind || tout != target.tout {
                return Err(Error::InvalidArgument(Detail {
                    message: format!(
                        "callback target '{name}' is called as {} with Tout {:?} by node '{}' and as {} with Tout {:?} here; one callable cannot serve both",
                        target.kind.name(),
                        names_of(&target.tout),
                        target.nodes[0],
                        c.kind.name(),
                        names_of(&tout)
                    ),
                    node: Some(graph.node_ref(id)),
                    pos: None,
                }));
            }
        }
    }
    Ok(target.clone())
}

fn names_of(dtypes: &[DType]) -> Vec<&'static str> {
    dtypes.iter().map(|d| d.name()).collect()
}

/// Binds the Rust function `f` to callback target `target` of `graph`
/// (replacing any callable bound before): `f` gets one borrowed tensor per
/// input and returns one tensor per declared result, checked on every call
/// against the node's declared dtypes and shapes, as for a traced
/// `host_fn`. Any callback kind may be bound this way (a `py_function`
/// node still cannot be compiled). Errors: no such target is `NotFound`
/// listing the graph's targets; nodes calling `target` with different
/// kinds or `Tout` are `InvalidArgument`.
pub fn bind_host_fn(
    graph: &mut Graph,
    target: &str,
    f: impl Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync + 'static,
) -> Result<()> {
    let t = callback_target(graph, target)?;
    graph.bind(target, HostCallback::new(t.kind, f).into_ref());
    Ok(())
}
