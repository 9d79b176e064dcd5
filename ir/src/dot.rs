//! Graphviz DOT rendering of a graph.

use std::fmt::Write as _;

use crate::{Effect, Graph, Op};

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// The graph as a Graphviz `digraph`: one box per node (name, op, result
/// types), one edge per operand, one ellipse per output. The regions of
/// control-flow ops are clusters inside the drawing, tied to their op by a
/// dashed edge.
pub fn to_dot(g: &Graph) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "digraph \"{}\" {{", escape(&g.name));
    out.push_str("  compound=true;\n");
    out.push_str("  node [shape=box, fontname=\"monospace\"];\n");
    body(g, "", "  ", &mut out);
    out.push_str("}\n");
    out
}

/// The nodes and edges of `g`, their ids prefixed by `prefix` (unique per
/// region).
fn body(g: &Graph, prefix: &str, indent: &str, out: &mut String) {
    for id in g.node_ids() {
        let n = g.node(id);
        let types: Vec<String> = n.results.iter().map(|r| g.ty(*r).to_string()).collect();
        let detail = match &n.op {
            Op::Parameter { index } => format!("parameter {index}"),
            Op::Callback(c) => format!("{} \\\"{}\\\"", c.kind.name(), escape(&c.target)),
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
            | Op::CustomVjp { .. }) => op.name(),
        };
        let style = match (&n.op, n.effect) {
            (_, Effect::Stateful) => ", style=bold, color=red",
            (Op::Parameter { .. }, _) => ", style=rounded",
            _ => "",
        };
        let _ = writeln!(
            out,
            "{indent}{prefix}{id} [label=\"{}\\n{detail}\\n{}\"{style}];",
            escape(&n.name),
            types.join(", ")
        );
        for (k, v) in n.inputs.iter().enumerate() {
            let _ = writeln!(
                out,
                "{indent}{prefix}{} -> {prefix}{id} [label=\"{k}\"];",
                g.value(*v).node
            );
        }
        for (r, region) in n.op.regions().iter().enumerate() {
            let inner = format!("{prefix}{id}r{r}_");
            let _ = writeln!(out, "{indent}subgraph cluster_{inner} {{");
            let _ = writeln!(
                out,
                "{indent}  label=\"@{}\"; style=dashed;",
                escape(&region.graph().name)
            );
            let _ = writeln!(out, "{indent}  {inner}anchor [shape=point];");
            body(region.graph(), &inner, &format!("{indent}  "), out);
            let _ = writeln!(out, "{indent}}}");
            let _ = writeln!(
                out,
                "{indent}{inner}anchor -> {prefix}{id} [ltail=cluster_{inner}, style=dashed];"
            );
        }
    }
    for (i, o) in g.outputs().iter().enumerate() {
        let _ = writeln!(
            out,
            "{indent}{prefix}out{i} [label=\"{}\", shape=ellipse];",
            escape(&o.name)
        );
        let _ = writeln!(
            out,
            "{indent}{prefix}{} -> {prefix}out{i};",
            g.value(o.value).node
        );
    }
}
