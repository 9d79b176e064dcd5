//! The reference interpreter: executes a graph op by op, every op
//! materializing its result. It is the oracle for the JIT's differential
//! tests and the "interpreted" side of every benchmark.

use tensorlift_ir::passes::ConstEval;
use tensorlift_ir::{Detail, DynamicOp, Error, Graph, Literal, Node, NodeId, Op, Result};

use crate::kernels::{elementwise as ew, layout, reduce};
use crate::tensor::Tensor;

/// Checks that `inputs` match the graph's parameters in count, dtype and
/// shape; errors name the parameter.
pub fn check_inputs(graph: &Graph, inputs: &[Tensor]) -> Result<()> {
    let params = graph.params();
    if params.len() != inputs.len() {
        return Err(Error::invalid(format!(
            "graph '{}' takes {} input(s), but {} were given",
            graph.name,
            params.len(),
            inputs.len()
        )));
    }
    for (i, (p, t)) in params.iter().zip(inputs).enumerate() {
        let ty = graph.ty(*p);
        let name = &graph.producer(*p).name;
        if ty.dtype != t.dtype() || !ty.shape.accepts(t.shape()) {
            return Err(Error::invalid(format!(
                "input {i} ('{name}') must be {ty}, but a {}{:?} tensor was given",
                t.dtype().short_name(),
                t.shape()
            )));
        }
    }
    Ok(())
}

/// Checks that every callback in `graph` has a callable bound, before
/// anything runs: a `NotFound` error naming every unbound callback (the
/// first one is the error's node).
pub fn check_bindings(graph: &Graph) -> Result<()> {
    // Callbacks in loop bodies and branches are bound in their regions.
    let unbound: Vec<(&Graph, NodeId)> = graph
        .all_graphs()
        .into_iter()
        .flat_map(|g| {
            g.node_ids()
                .filter(|id| matches!(&g.node(*id).op, Op::Callback(c) if g.binding(&c.target).is_none()))
                .map(move |id| (g, id))
        })
        .collect();
    let Some((first_graph, first)) = unbound.first() else {
        return Ok(());
    };
    let list: Vec<String> = unbound
        .iter()
        .map(|(graph, id)| {
            let n = graph.node(*id);
            let target = callback_target(n).unwrap_or_default();
            format!("'{target}' ({} '{}' at {})", n.op.name(), n.name, n.site)
        })
        .collect();
    Err(Error::NotFound(Detail {
        message: format!(
            "{} callback(s) have no callable bound: {}; the text format does not serialize callback bodies, so bind every one before running (nothing has run)",
            unbound.len(),
            list.join(", ")
        ),
        node: Some(first_graph.node_ref(*first)),
        pos: None,
    }))
}

/// The machine's physical memory in bytes (Linux), if known: no single
/// tensor may be larger, so a program asking for one fails with
/// `ResourceExhausted` instead of aborting in the allocator.
pub fn memory_limit() -> Option<usize> {
    static LIMIT: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| {
        let info = std::fs::read_to_string("/proc/meminfo").ok()?;
        let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
        kib.checked_mul(1024)
    })
}

/// Allocations below this size are not checked against the address-space
/// limit (reading the process's mapped size costs a system call).
const CHECKED_BYTES: usize = 64 << 20;

/// This process's `RLIMIT_AS` (`ulimit -v`) in bytes, if it has one.
pub(crate) fn address_space_limit() -> Option<usize> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` through a valid pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut lim) } != 0
        || lim.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    usize::try_from(lim.rlim_cur).ok()
}

/// The address space this process may still map under its `RLIMIT_AS`
/// (`ulimit -v`), if it has one: the limit less what is mapped now.
fn address_space_left() -> Option<usize> {
    let limit = address_space_limit()?;
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = statm.split_whitespace().next()?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()?;
    let mapped = pages.checked_mul(page)?;
    Some(limit.saturating_sub(mapped))
}

/// Fails with `ResourceExhausted` when `bytes` exceed the machine's memory,
/// or (for allocations of 64 MiB and more) the address space the process
/// may still map under its `ulimit -v`.
pub fn check_allocation(bytes: usize, what: &str) -> Result<()> {
    match memory_limit() {
        Some(limit) if bytes > limit => {
            return Err(Error::ResourceExhausted(Detail::msg(format!(
                "{what} needs {bytes} bytes, more than this machine's {limit} bytes of memory"
            ))));
        }
        _ => {}
    }
    if bytes < CHECKED_BYTES {
        return Ok(());
    }
    let mut left = address_space_left();
    // Buffers the cache keeps for reuse hold address space: given back
    // before a request is refused.
    if left.is_some_and(|l| bytes > l) && crate::memory::trim_buffer_cache() > 0 {
        left = address_space_left();
    }
    if let Some(left) = left
        && bytes > left
    {
        return Err(Error::ResourceExhausted(Detail::msg(format!(
            "{what} needs {bytes} bytes, more than the {left} bytes of address space this process may still map (ulimit -v)"
        ))));
    }
    Ok(())
}

/// Runs `graph` on `inputs` and returns its outputs in order.
pub fn run(graph: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    run_owned(graph, inputs.to_vec())
}

/// [`run`] on inputs it owns: an input no one else references can be
/// updated in place at its last use (a `dynamic_update_slice` of a loop
/// carry writes into the carry's buffer).
pub fn run_owned(graph: &Graph, inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
    check_inputs(graph, &inputs)?;
    check_bindings(graph)?;
    let mut inputs: Vec<Option<Tensor>> = inputs.into_iter().map(Some).collect();
    let mut remaining = graph.use_counts();
    let mut values: Vec<Option<Tensor>> = vec![None; graph.num_values()];
    for id in graph.node_ids() {
        let node = graph.node(id);
        for r in &node.results {
            let t = graph.ty(*r);
            if let Some(n) = t.shape.num_elements() {
                check_allocation(n.saturating_mul(t.dtype.size()), &format!("the result {t}"))
                    .map_err(|e| e.at_node(graph.node_ref(id)))?;
            }
        }
        let computed = |v: &tensorlift_ir::ValueId, values: &[Option<Tensor>]| {
            values[v.index()]
                .clone()
                .ok_or_else(|| Error::internal(format!("value {v} used before it was computed")))
        };
        let outs = match &node.op {
            Op::Parameter { index } => vec![
                inputs[*index]
                    .take()
                    .ok_or_else(|| Error::internal(format!("parameter {index} is bound twice")))?,
            ],
            // The operand's last use: its buffer is updated in place when
            // nothing else references it.
            Op::DynamicUpdateSlice | Op::Scatter { .. }
                if remaining[node.inputs[0].index()] == 1
                    && !node.inputs[1..].contains(&node.inputs[0]) =>
            {
                let x = values[node.inputs[0].index()].take().ok_or_else(|| {
                    Error::internal(format!(
                        "{} operand used before it was computed",
                        node.op.name()
                    ))
                })?;
                let rest = node.inputs[1..]
                    .iter()
                    .map(|v| {
                        values[v.index()].as_ref().ok_or_else(|| {
                            Error::internal(format!("value {v} used before it was computed"))
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                let result = if let Op::Scatter { axis, combiner } = &node.op {
                    layout::scatter_owned(x, rest[0], rest[1], *axis, *combiner)
                } else {
                    layout::dynamic_update_slice_owned(x, rest[0], &rest[1..])
                };
                vec![result.map_err(|e| e.at_node(graph.node_ref(id)))?]
            }
            Op::Callback(_) => {
                // Operands this callback reads last (once) are moved in, so a
                // buffer no one else references can reach NumPy uncopied.
                let args = node
                    .inputs
                    .iter()
                    .map(|v| {
                        let once = node.inputs.iter().filter(|u| *u == v).count() == 1;
                        if once && remaining[v.index()] == 1 {
                            values[v.index()].take().ok_or_else(|| {
                                Error::internal(format!("value {v} used before it was computed"))
                            })
                        } else {
                            computed(v, &values)
                        }
                    })
                    .collect::<Result<Vec<_>>>()?;
                crate::callback::run_callback(graph, node, args)
                    .map_err(|e| e.at_node(graph.node_ref(id)))?
            }
            // The other ops borrow their operands; only a callback takes them.
            Op::Constant(_)
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
            | Op::CustomVjp { .. } => {
                let args: Vec<&Tensor> = node
                    .inputs
                    .iter()
                    .map(|v| {
                        values[v.index()].as_ref().ok_or_else(|| {
                            Error::internal(format!("value {v} used before it was computed"))
                        })
                    })
                    .collect::<Result<_>>()?;
                eval_node(graph, id, &args).map_err(|e| e.at_node(graph.node_ref(id)))?
            }
        };
        for (v, t) in node.results.iter().zip(outs) {
            let want = graph.ty(*v);
            if t.dtype() != want.dtype || !want.shape.accepts(t.shape()) {
                return Err(Error::Internal(Detail {
                    message: format!(
                        "produced {}{:?}, but its type is {want}",
                        t.dtype().short_name(),
                        t.shape()
                    ),
                    node: Some(graph.node_ref(id)),
                    pos: None,
                }));
            }
            values[v.index()] = Some(t);
        }
        // Free operands after their last use.
        for v in &node.inputs {
            remaining[v.index()] -= 1;
            if remaining[v.index()] == 0 {
                values[v.index()] = None;
            }
        }
    }
    graph
        .outputs()
        .iter()
        .map(|o| {
            values[o.value.index()]
                .clone()
                .ok_or_else(|| Error::internal(format!("output '{}' was not computed", o.name)))
        })
        .collect()
}

/// Evaluates one non-parameter node on its operands.
pub fn eval_node(graph: &Graph, id: NodeId, args: &[&Tensor]) -> Result<Vec<Tensor>> {
    let node = graph.node(id);
    let a = |i: usize| args[i];
    let t = match &node.op {
        Op::Parameter { .. } => return Err(Error::internal("parameters are bound by the caller")),
        Op::Constant(lit) => Tensor::from_literal(lit)?,
        Op::Iota { dtype, dims, dim } => layout::iota(*dtype, dims, *dim)?,
        Op::Unary(u) => ew::unary(*u, a(0))?,
        Op::Binary(b) => ew::binary(*b, a(0), a(1))?,
        Op::Compare(c) => ew::compare(*c, a(0), a(1))?,
        Op::Select => ew::select(a(0), a(1), a(2))?,
        Op::Clamp => ew::clamp(a(0), a(1), a(2))?,
        Op::Convert(to) => ew::convert(a(0), *to)?,
        Op::BroadcastInDim { shape, dims } => layout::broadcast_in_dim(a(0), shape, dims)?,
        Op::Reshape(shape) => layout::reshape(a(0), shape)?,
        Op::Transpose(perm) => layout::transpose(a(0), perm)?,
        Op::Slice {
            start,
            limit,
            stride,
        } => layout::slice(a(0), start, limit, stride)?,
        Op::Concatenate { axis } => layout::concatenate(args, *axis)?,
        Op::Pad {
            low,
            high,
            interior,
        } => layout::pad(a(0), a(1), low, high, interior)?,
        Op::Reverse(axes) => layout::reverse(a(0), axes)?,
        Op::Reduce { op, axes, keepdims } => reduce::reduce(*op, a(0), axes, *keepdims)?,
        Op::ArgMax { axis, index_dtype } => reduce::arg_reduce(a(0), *axis, *index_dtype, true)?,
        Op::ArgMin { axis, index_dtype } => reduce::arg_reduce(a(0), *axis, *index_dtype, false)?,
        Op::ArgSort {
            axis,
            descending,
            index_dtype,
        } => reduce::argsort(a(0), *axis, *descending, *index_dtype)?,
        Op::Cumsum {
            axis,
            reverse,
            exclusive,
        } => reduce::cumsum(a(0), *axis, *reverse, *exclusive)?,
        Op::DotGeneral(dd) => reduce::dot_general(a(0), a(1), dd)?,
        Op::Take { axis } => layout::take(a(0), a(1), *axis)?,
        Op::DynamicSlice { sizes } => layout::dynamic_slice(a(0), &args[1..], sizes)?,
        Op::DynamicUpdateSlice => {
            let starts = args.get(2..).unwrap_or_default();
            layout::dynamic_update_slice(a(0), a(1), starts)?
        }
        Op::Scatter { axis, combiner } => layout::scatter(a(0), a(1), a(2), *axis, *combiner)?,
        Op::BitcastConvert(to) => layout::bitcast_convert(a(0), *to)?,
        Op::Callback(_) => {
            let owned = args.iter().map(|t| (*t).clone()).collect();
            return crate::callback::run_callback(graph, node, owned);
        }
        Op::Dynamic(d) => return eval_dynamic(d, node, args),
        Op::While { cond, body } => return run_while(cond.graph(), body.graph(), args),
        Op::Case { branches } => {
            let index = scalar_i32(a(0))?;
            let Some(last) = branches.len().checked_sub(1) else {
                return Err(Error::internal("case without branches"));
            };
            let k = usize::try_from(index).map_or(last, |k| k.min(last));
            let owned: Vec<Tensor> = args[1..].iter().map(|t| (*t).clone()).collect();
            return run(branches[k].graph(), &owned).map_err(|e| e.context(in_branch(k as u64)));
        }
        Op::StopGradient => a(0).clone(),
        Op::CustomVjp { body, .. } => {
            let owned: Vec<Tensor> = args.iter().map(|t| (*t).clone()).collect();
            return run(body.graph(), &owned);
        }
    };
    Ok(vec![t])
}

/// Runs a `while`: `body` while `cond` holds, from the operands.
fn run_while(cond: &Graph, body: &Graph, args: &[&Tensor]) -> Result<Vec<Tensor>> {
    let mut carries: Vec<Tensor> = args.iter().map(|t| (*t).clone()).collect();
    for step in 0u64.. {
        let pred = run(cond, &carries).map_err(|e| e.context(in_loop(false, step)))?;
        if !scalar_bool(&pred[0])? {
            break;
        }
        carries = run_owned(body, carries).map_err(|e| e.context(in_loop(true, step)))?;
        // (Every iteration: each runs a graph.)
        crate::interrupt::poll().map_err(|e| e.context(in_loop(true, step)))?;
    }
    Ok(carries)
}

/// Where in a `while` an error happened, as the interpreter and compiled
/// code both say it: in the body (`in_body`) or the condition, at
/// `iteration` (counted from 0). Nested loops and branches each add theirs,
/// the outermost first.
pub fn in_loop(in_body: bool, iteration: u64) -> String {
    match in_body {
        true => format!("in iteration {iteration} of the body"),
        false => format!("in the condition, before iteration {iteration}"),
    }
}

/// Where in a `case` an error happened: in branch `k` (the index clamped
/// to the branches).
pub fn in_branch(k: u64) -> String {
    format!("in branch {k}")
}

/// The value of a `bool[]` tensor (a loop condition).
pub fn scalar_bool(t: &Tensor) -> Result<bool> {
    match t.bytes() {
        [b] if t.dtype() == tensorlift_ir::DType::Bool => Ok(*b != 0),
        _ => Err(Error::internal(format!(
            "a loop condition gave {}{:?}, not bool[]",
            t.dtype().short_name(),
            t.shape()
        ))),
    }
}

/// The value of an `i32[]` tensor (a branch index).
pub fn scalar_i32(t: &Tensor) -> Result<i32> {
    match t.bytes() {
        [a, b, c, d] if t.dtype() == tensorlift_ir::DType::I32 => {
            Ok(i32::from_ne_bytes([*a, *b, *c, *d]))
        }
        _ => Err(Error::internal(format!(
            "a branch index is {}{:?}, not i32[]",
            t.dtype().short_name(),
            t.shape()
        ))),
    }
}

/// Runs an op traced over operands of unknown rank: expanded for the
/// operands' concrete types into ordinary ops, which run here.
fn eval_dynamic(d: &DynamicOp, node: &Node, args: &[&Tensor]) -> Result<Vec<Tensor>> {
    let mut g = Graph::new(node.name.clone());
    let params = args
        .iter()
        .enumerate()
        .map(|(i, t)| g.add_parameter(i, t.ty(), None, node.site.clone()))
        .collect::<Result<Vec<_>>>()?;
    let out = tensorlift_ir::builder::expand(&mut g, d, &params, &node.site)?;
    g.add_output(out, node.name.clone())?;
    let owned: Vec<Tensor> = args.iter().map(|t| (*t).clone()).collect();
    run(&g, &owned)
}

/// Constant folding through the interpreter.
#[derive(Debug, Default)]
pub struct InterpreterEval;

impl ConstEval for InterpreterEval {
    fn eval(&self, graph: &Graph, node: &Node, inputs: &[&Literal]) -> Option<Vec<Literal>> {
        // Stateful callbacks are never folded (the pass skips them);
        // stateless ones with constant inputs are evaluated once, as
        // TensorFlow's constant folding does.
        if matches!(node.op, Op::Callback(_))
            && crate::callback::bound(graph, callback_target(node)?).is_err()
        {
            return None;
        }
        let id = node.results.first().map(|v| graph.value(*v).node)?;
        let tensors: Vec<Tensor> = inputs
            .iter()
            .map(|l| Tensor::from_literal(l))
            .collect::<Result<_>>()
            .ok()?;
        let args: Vec<&Tensor> = tensors.iter().collect();
        let outs = eval_node(graph, id, &args).ok()?;
        Some(outs.iter().map(Tensor::to_literal).collect())
    }
}

/// Optimizes `graph` with the standard pipeline (constant folding through
/// the interpreter).
pub fn optimize(graph: &mut Graph) -> Result<()> {
    tensorlift_ir::passes::optimize(graph, &InterpreterEval)
}

fn callback_target(node: &Node) -> Option<&str> {
    if let Op::Callback(c) = &node.op {
        Some(&c.target)
    } else {
        None
    }
}
