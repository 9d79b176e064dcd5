//! Automatic differentiation as graph transformations: [`vjp`] and
//! [`grad`] (reverse mode) and [`jvp`] (forward mode) turn a graph into
//! another graph that the passes, the fusion planner and the JIT treat like
//! any other, so a gradient compiles ahead of execution and can itself be
//! differentiated (grad of grad, Hessian-vector products).
//!
//! Reverse mode copies the program (the forward pass), then walks it
//! backwards accumulating a cotangent per value: each op's rule, one
//! exhaustive match in `rules.rs`, adds the nodes giving its operands'
//! cotangents. Control flow (`control.rs`): a `case` runs the gradient of
//! the branch taken; a counted loop (`fori_loop`, `scan`) stacks the
//! carries its gradient needs during the forward loop and runs the body's
//! gradient backwards over them; a `while` with a data-dependent trip
//! count counts its iterations and recomputes each one's carries from the
//! start (no extra memory, quadratic time). Conventions follow JAX where
//! there is a choice (ties, kinks; docs/autodiff.md).
//!
//! Only real floating values (f16, bf16, f32, f64) carry gradients;
//! integers, bools and the results of comparisons carry none. Shapes must
//! be static (specialize a graph traced with unknown dims first).

mod control;
mod rules;

use crate::{
    BinaryOp, DType, Detail, Effect, Error, Graph, NewNode, NodeId, NodeRef, Op, ReduceOp, Result,
    Shape, Site, TensorType, ValueId,
};

/// How reverse mode keeps what the gradient of a `while` loop whose trip
/// count depends on data needs (counted and bounded loops always stack it
/// in buffers sized by their bound).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WhileCarries {
    /// The forward loop counts its iterations; each backward step
    /// recomputes its carries from the initial ones. No memory, quadratic
    /// time; the gradient is an ordinary graph, differentiable again.
    Recompute,
    /// The forward loop pushes the carries the gradient reads on a run-time
    /// tape at each iteration, and the backward loop pops them (as
    /// TensorFlow's stacks do): linear time, memory per iteration. The tape
    /// is a pair of stateful `host_fn` callbacks per loop, targets
    /// `{TAPE_PREFIX}{n}_push` and `{TAPE_PREFIX}{n}_pop`, that the caller
    /// binds (the `tensorlift` crate does); such a gradient cannot be
    /// differentiated again (differentiate a `Recompute` one for that).
    /// Loops nested in other loops' bodies or in branches recompute.
    Tape,
}

/// The prefix of the callback targets of a [`WhileCarries::Tape`] tape.
pub const TAPE_PREFIX: &str = "__tensorlift_tape_";

/// Reverse mode: a graph taking `g`'s parameters, then one cotangent per
/// real floating output of `g` (in output order, of that output's type),
/// and returning `g`'s outputs followed by the cotangent of each parameter
/// in `wrt` (`J^T · ct`), in order. Data-dependent loops recompute
/// ([`vjp_with`] chooses).
pub fn vjp(g: &Graph, wrt: &[usize]) -> Result<Graph> {
    vjp_with(g, wrt, WhileCarries::Recompute)
}

/// [`vjp`] with data-dependent loops' carries kept as `carries` says.
pub fn vjp_with(g: &Graph, wrt: &[usize], carries: WhileCarries) -> Result<Graph> {
    let seeded: Vec<usize> = (g.outputs().iter().enumerate())
        .filter(|(_, o)| is_differentiable(g.ty(o.value).dtype))
        .map(|(i, _)| i)
        .collect();
    reverse(g, wrt, Seed::Params(&seeded), true, carries)
}

/// The gradient of a scalar function: `g` has exactly one output, a real
/// floating scalar. The result takes the same parameters and returns the
/// value first when `with_value`, then the gradient with respect to each
/// parameter in `wrt`, in order. Data-dependent loops recompute
/// ([`grad_with`] chooses).
pub fn grad(g: &Graph, wrt: &[usize], with_value: bool) -> Result<Graph> {
    grad_with(g, wrt, with_value, WhileCarries::Recompute)
}

/// [`grad`] with data-dependent loops' carries kept as `carries` says.
pub fn grad_with(
    g: &Graph,
    wrt: &[usize],
    with_value: bool,
    carries: WhileCarries,
) -> Result<Graph> {
    let [out] = g.outputs() else {
        return Err(Error::invalid(format!(
            "grad: graph '{}' has {} outputs; a gradient needs exactly one, a real floating scalar (use vjp for several)",
            g.name,
            g.outputs().len()
        )));
    };
    let t = g.ty(out.value);
    if t.shape != Shape::scalar() || !is_differentiable(t.dtype) {
        return Err(Error::invalid(format!(
            "grad: output '{}' of graph '{}' is {t}; a gradient needs a real floating scalar (f16, bf16, f32 or f64 with shape [])",
            out.name, g.name
        )));
    }
    reverse(g, wrt, Seed::One, with_value, carries)
}

/// Forward mode: a graph taking `g`'s parameters, then one tangent per
/// parameter in `wrt` (of that parameter's type), and returning `g`'s
/// outputs followed by the tangent of each real floating output (`J · t`).
///
/// Built as the transpose of the reverse mode (the gradient of the linear
/// map `ct ↦ J^T ct`), so every op with a reverse rule has a forward one.
pub fn jvp(g: &Graph, wrt: &[usize]) -> Result<Graph> {
    let params = g.params();
    check_wrt(g, wrt)?;
    let v = vjp(g, wrt)?;
    let n = params.len();
    let outs = g.outputs().len();
    let seeded = v.params().len() - n;
    // The cotangent parameters of `v` are linear: differentiate `v`'s
    // gradient outputs with respect to them.
    let ct_params: Vec<usize> = (n..n + seeded).collect();
    let grads: Vec<usize> = (outs..outs + wrt.len()).collect();
    let vv = reverse(
        &v,
        &ct_params,
        Seed::Params(&grads),
        false,
        WhileCarries::Recompute,
    )
    .map_err(|e| {
        // A callback reached here takes a cotangent: it is in a custom
        // gradient (differentiable in reverse mode, not transposable).
        match e.to_string().contains("cannot differentiate through callback") {
            true => e.context(
                "forward mode (jvp) transposes the reverse mode, and a custom gradient's callback that takes the cotangent cannot be transposed: use reverse mode (vjp, grad), or multiply by the cotangent outside the callback (ct · callback(x))",
            ),
            false => e,
        }
    })?;
    // `vv` takes (x, ct, t) and gives J·t per seeded output; `ct` may be
    // anything (zeros), `x` is ours, `t` the tangents.
    let site = Site::caller();
    let mut out = Graph::new(format!("{}_jvp", g.name));
    out.bindings_from(g);
    let mut args = Vec::new();
    for (i, p) in params.iter().enumerate() {
        let name = g.producer(*p).name.clone();
        let site = g.producer(*p).site.clone();
        args.push(out.add_parameter(i, g.ty(*p).clone(), Some(name), site)?);
    }
    let vparams = v.params();
    for p in &vparams[n..] {
        let t = v.ty(*p).clone();
        args.push(zeros(&mut out, &t, &site)?);
    }
    for (k, &w) in wrt.iter().enumerate() {
        let t = g.ty(params[w]).clone();
        let name = format!("tangent_{}", g.producer(params[w]).name);
        args.push(out.add_parameter(n + k, t, Some(name), site.clone())?);
    }
    let tangents = inline(&mut out, &vv, &args, "")?;
    let values = inline(&mut out, g, &args[..n], "")?;
    for (o, v) in g.outputs().iter().zip(values) {
        out.add_output(v, o.name.clone())?;
    }
    for (k, o) in (g.outputs().iter())
        .filter(|o| is_differentiable(g.ty(o.value).dtype))
        .enumerate()
    {
        out.add_output(tangents[k], format!("tangent_{}", o.name))?;
    }
    crate::passes::dce(&mut out);
    Ok(out)
}

/// True for the dtypes that carry gradients.
pub fn is_differentiable(d: DType) -> bool {
    d.is_float()
}

/// Why a value of dtype `d` cannot be differentiated with respect to
/// (`None` when it can): the reason errors about it give.
pub fn no_gradient_reason(d: DType) -> Option<&'static str> {
    if is_differentiable(d) {
        None
    } else if d.is_complex() {
        Some("complex differentiation is not supported yet")
    } else {
        Some("integer and bool values carry no gradient")
    }
}

/// Where the output cotangents come from.
#[derive(Clone, Copy, Debug)]
enum Seed<'a> {
    /// A single scalar output seeded with 1.
    One,
    /// New parameters after `g`'s, one per output index listed.
    Params(&'a [usize]),
}

fn check_wrt(g: &Graph, wrt: &[usize]) -> Result<()> {
    let params = g.params();
    for (k, &w) in wrt.iter().enumerate() {
        let Some(p) = params.get(w) else {
            return Err(Error::invalid(format!(
                "wrt[{k}] is {w}, but the function has {} input(s)",
                params.len()
            )));
        };
        let t = g.ty(*p);
        if let Some(detail) = no_gradient_reason(t.dtype) {
            return Err(Error::InvalidArgument(Detail {
                message: format!(
                    "cannot differentiate with respect to parameter {w}, which is {t}: {detail}"
                ),
                node: Some(g.node_ref(g.value(*p).node)),
                pos: None,
            }));
        }
        if !t.shape.is_static() {
            return Err(Error::invalid(format!(
                "parameter {w} of graph '{}' is {t}: differentiation needs static shapes (specialize the graph first)",
                g.name
            )));
        }
        if wrt[..k].contains(&w) {
            return Err(Error::invalid(format!(
                "parameter {w} is listed twice in wrt"
            )));
        }
    }
    Ok(())
}

/// The reverse-mode transformation. The result takes `g`'s parameters (and
/// the seeds' cotangent parameters) and returns `g`'s outputs when
/// `values`, then the cotangents of the parameters in `wrt`.
fn reverse(
    g: &Graph,
    wrt: &[usize],
    seed: Seed<'_>,
    values: bool,
    carries: WhileCarries,
) -> Result<Graph> {
    check_wrt(g, wrt)?;
    let params = g.params();
    let mut ad = Ad::new(g, &params, wrt)?;
    ad.carries = carries;
    ad.forward()?;
    let n = params.len();
    let site = Site::caller();
    match seed {
        Seed::One => {
            let o = g.outputs()[0].value;
            if ad.needed[o.index()] {
                let t = g.ty(o).clone();
                let one = ad.scalar(t.dtype, 1.0, &site)?;
                ad.accumulate(o, one, &site)?;
            }
        }
        Seed::Params(outs) => {
            for (k, &i) in outs.iter().enumerate() {
                let o = g.outputs()[i].value;
                let t = g.ty(o).clone();
                let name = format!("ct_{}", g.outputs()[i].name);
                let p = ad.g.add_parameter(n + k, t, Some(name), site.clone())?;
                if ad.needed[o.index()] {
                    ad.accumulate(o, p, &site)?;
                }
            }
        }
    }
    ad.backward()?;
    let mut out_vals = Vec::new();
    if values {
        for o in g.outputs() {
            out_vals.push((ad.primal(o.value)?, o.name.clone()));
        }
    }
    for &w in wrt {
        let p = params[w];
        let name = format!("grad_{}", g.producer(p).name);
        let v = or_zeros(&mut ad.g, ad.ct[p.index()], g.ty(p), &site)?;
        out_vals.push((v, name));
    }
    let mut out = ad.g;
    for (v, name) in out_vals {
        let name = unique_output_name(&out, name);
        out.add_output(v, name)?;
    }
    Ok(out)
}

fn unique_output_name(g: &Graph, base: String) -> String {
    if !g.outputs().iter().any(|o| o.name == base) {
        return base;
    }
    (1..)
        .map(|i| format!("{base}_{i}"))
        .find(|n| !g.outputs().iter().any(|o| &o.name == n))
        .unwrap_or(base)
}

/// The state of one reverse-mode transformation.
struct Ad<'a> {
    src: &'a Graph,
    /// The graph being built.
    g: Graph,
    /// `src` value → its copy in `g`.
    map: Vec<Option<ValueId>>,
    /// `src` value → its accumulated cotangent in `g`.
    ct: Vec<Option<ValueId>>,
    /// Real floating and depending on a `wrt` parameter.
    active: Vec<bool>,
    /// Active and reaching an output: the values that get cotangents.
    needed: Vec<bool>,
    /// What the forward pass saved for the backward pass of each loop.
    tapes: Vec<Option<control::Tape>>,
    /// How data-dependent loops keep their carries.
    carries: WhileCarries,
}

impl<'a> Ad<'a> {
    fn new(src: &'a Graph, params: &[ValueId], wrt: &[usize]) -> Result<Self> {
        let nv = src.num_values();
        let mut active = vec![false; nv];
        for &w in wrt {
            active[params[w].index()] = true;
        }
        for n in src.nodes() {
            let any = n.inputs.iter().any(|v| active[v.index()]);
            if !any {
                continue;
            }
            if let Op::While { .. } = n.op {
                let act = control::carry_activity(src, n, &active);
                for (r, a) in n.results.iter().zip(act) {
                    active[r.index()] = a;
                }
            } else {
                for &r in &n.results {
                    active[r.index()] = is_differentiable(src.ty(r).dtype);
                }
            }
        }
        let mut reaches = vec![false; nv];
        for o in src.outputs() {
            reaches[o.value.index()] = true;
        }
        for n in src.nodes().iter().rev() {
            if n.results.iter().any(|r| reaches[r.index()]) {
                for i in &n.inputs {
                    reaches[i.index()] = true;
                }
            }
        }
        let needed: Vec<bool> = (0..nv).map(|i| active[i] && reaches[i]).collect();
        for (i, n) in src.nodes().iter().enumerate() {
            let fed = n.inputs.iter().any(|v| active[v.index()]);
            let complex = n
                .results
                .iter()
                .any(|r| reaches[r.index()] && src.ty(*r).dtype.is_complex());
            if fed && complex {
                return Err(fail(
                    src,
                    NodeId(i as u32),
                    "differentiating through complex values is not supported yet".into(),
                ));
            }
        }
        let mut g = Graph::new(format!("{}_grad", src.name));
        g.bindings_from(src);
        Ok(Ad {
            src,
            g,
            map: vec![None; nv],
            ct: vec![None; nv],
            active,
            needed,
            tapes: vec![None; src.nodes().len()],
            carries: WhileCarries::Recompute,
        })
    }

    /// Copies the program into `g`; loops that need a tape record it.
    fn forward(&mut self) -> Result<()> {
        let src = self.src;
        for (i, node) in src.nodes().iter().enumerate() {
            let id = NodeId(i as u32);
            let inputs = (node.inputs.iter())
                .map(|v| self.primal(*v))
                .collect::<Result<Vec<_>>>()?;
            let wants = node.results.iter().any(|r| self.needed[r.index()]);
            let results = if let (Op::While { cond, body }, true) = (&node.op, wants) {
                let (results, tape) =
                    control::forward_while(self, id, cond.graph(), body.graph(), &inputs)?;
                self.tapes[i] = Some(tape);
                results
            } else {
                // Renamed if a loop copied before took the name.
                copy_node(&mut self.g, src, node, inputs, "")?
            };
            for (r, v) in node.results.iter().zip(results) {
                self.map[r.index()] = Some(v);
            }
        }
        Ok(())
    }

    /// Walks the program backwards, applying each op's rule.
    fn backward(&mut self) -> Result<()> {
        let src = self.src;
        for (i, node) in src.nodes().iter().enumerate().rev() {
            let cts: Vec<Option<ValueId>> =
                node.results.iter().map(|r| self.ct[r.index()]).collect();
            if cts.iter().all(Option::is_none) {
                continue;
            }
            let needs: Vec<bool> = node.inputs.iter().map(|v| self.active[v.index()]).collect();
            if !needs.iter().any(|n| *n) {
                continue;
            }
            let id = NodeId(i as u32);
            let x = (node.inputs.iter())
                .map(|v| self.primal(*v))
                .collect::<Result<Vec<_>>>()?;
            let y = (node.results.iter())
                .map(|v| self.primal(*v))
                .collect::<Result<Vec<_>>>()?;
            let contributions = rules::vjp(self, id, node, &x, &y, &cts, &needs)
                .map_err(|e| unknown_shape(src, id, e))?;
            for ((v, c), need) in node.inputs.iter().zip(contributions).zip(&needs) {
                if let (Some(c), true) = (c, need) {
                    self.accumulate(*v, c, &node.site)
                        .map_err(|e| unknown_shape(src, id, e))?;
                }
            }
        }
        Ok(())
    }

    fn primal(&self, v: ValueId) -> Result<ValueId> {
        self.map[v.index()].ok_or_else(|| Error::internal("autodiff: a value was not copied"))
    }

    /// Adds `c` to the cotangent of `src` value `v`.
    fn accumulate(&mut self, v: ValueId, c: ValueId, site: &Site) -> Result<()> {
        let t = self.src.ty(v).clone();
        let c = if self.g.ty(c).shape == t.shape {
            c
        } else {
            // A rank-0 operand splatted by an elementwise op.
            sum_to(&mut self.g, c, &t, site)?
        };
        self.ct[v.index()] = Some(match self.ct[v.index()] {
            None => c,
            Some(old) => self
                .g
                .add(Op::Binary(BinaryOp::Add), &[old, c], site.clone())?,
        });
        Ok(())
    }

    fn scalar(&mut self, dtype: DType, value: f64, site: &Site) -> Result<ValueId> {
        crate::builder::constant(&mut self.g, dtype, value, site)
    }

    fn fail(&self, id: NodeId, message: String) -> Error {
        fail(self.src, id, message)
    }
}

fn fail(g: &Graph, id: NodeId, message: String) -> Error {
    let node: NodeRef = g.node_ref(id);
    Error::InvalidArgument(Detail {
        message: format!("{}: {message}", node.op),
        node: Some(node),
        pos: None,
    })
}

/// What the errors of rules that need static shapes say.
/// What an error says when a rule needs static shapes (a front end may
/// retrace with concrete shapes on it: the Python package's per-shape
/// traces).
pub const NEEDS_STATIC_SHAPES: &str = "differentiation needs static shapes";

/// The static dims of `t`, or an error.
fn static_dims(t: &TensorType) -> Result<Vec<usize>> {
    t.shape.as_known().ok_or_else(|| {
        Error::invalid(format!(
            "{NEEDS_STATIC_SHAPES}, but a value is {t} (specialize the graph first)"
        ))
    })
}

/// `e`, a rule's error at node `id`, said again where a value of unknown
/// shape made it: which of the node's values, and the op its unknown
/// shape comes from (a callback's result, whose shape only its run
/// knows), with what to do.
fn unknown_shape(g: &Graph, id: NodeId, e: Error) -> Error {
    let node = g.node(id);
    let unknown = |v: &ValueId| g.ty(*v).shape.as_known().is_none();
    let Some(&v) = node.inputs.iter().chain(&node.results).find(|v| unknown(v)) else {
        return e;
    };
    if !e.to_string().contains(NEEDS_STATIC_SHAPES) {
        return e;
    }
    let what = match node.inputs.iter().position(|x| *x == v) {
        Some(k) => format!("its operand {k}"),
        None => "its result".to_string(),
    };
    // Back to the first op whose result is unknown from known operands.
    let mut origin = g.producer(v);
    while let Some(u) = origin.inputs.iter().find(|u| unknown(u)) {
        origin = g.producer(*u);
    }
    // A custom gradient passes on its body's result: the body's op that
    // made it (a py_function's callback), or the operand it came from.
    let mut from = origin;
    if let Op::CustomVjp { body, .. } = &origin.op {
        let b = body.graph();
        let k = origin.results.iter().position(unknown).unwrap_or(0);
        if let Some(o) = b.outputs().get(k) {
            let p = b.producer(o.value);
            from = if let Op::Parameter { index } = p.op {
                origin.inputs.get(index).map_or(origin, |x| g.producer(*x))
            } else {
                p
            };
        }
    }
    let source = |n: &crate::Node| format!("{} '{}' (created at {})", n.op.name(), n.name, n.site);
    let made = match (
        matches!(origin.op, Op::Parameter { .. }),
        std::ptr::eq(from, origin) || matches!(from.op, Op::Parameter { .. }),
    ) {
        // (Made outside the graph differentiated here: where it was made.)
        (true, _) => format!("the value '{}' (created at {})", origin.name, origin.site),
        (false, true) => format!("the result of {}", source(origin)),
        (false, false) => format!("the result of {} inside {}", source(from), source(origin)),
    };
    fail(
        g,
        id,
        format!(
            "{what} is {}, {made}, and {NEEDS_STATIC_SHAPES}: declare the shape (set_shape on a \
             callback's result, or its output_shapes) or specialize the graph",
            g.ty(v)
        ),
    )
}

/// A tensor of zeros of type `t`.
fn zeros(g: &mut Graph, t: &TensorType, site: &Site) -> Result<ValueId> {
    let dims = static_dims(t)?;
    let z = crate::builder::constant(g, t.dtype, 0.0, site)?;
    if dims.is_empty() {
        return Ok(z);
    }
    g.add(
        Op::BroadcastInDim {
            shape: Shape::known(&dims),
            dims: vec![],
        },
        &[z],
        site.clone(),
    )
}

/// The cotangent `c`, or zeros of type `t` where there is none.
fn or_zeros(g: &mut Graph, c: Option<ValueId>, t: &TensorType, site: &Site) -> Result<ValueId> {
    match c {
        Some(c) => Ok(c),
        None => zeros(g, t, site),
    }
}

/// `c` summed to the shape of `t` (a rank-0 `t` sums everything).
fn sum_to(g: &mut Graph, c: ValueId, t: &TensorType, site: &Site) -> Result<ValueId> {
    let dims = static_dims(t)?;
    if dims.is_empty() {
        let rank = static_dims(g.ty(c))?.len();
        if rank == 0 {
            return Ok(c);
        }
        let op = Op::Reduce {
            op: ReduceOp::Sum,
            axes: (0..rank).collect(),
            keepdims: false,
        };
        return g.add(op, &[c], site.clone());
    }
    crate::builder::sum_to_shape(g, c, &dims, site)
}

/// Copies `src`'s nodes into `dst` with its parameters bound to `args`:
/// the values of its outputs in `dst`. Nodes get fresh names derived from
/// theirs behind `prefix`; callback bindings are carried over.
pub fn inline(
    dst: &mut Graph,
    src: &Graph,
    args: &[ValueId],
    prefix: &str,
) -> Result<Vec<ValueId>> {
    dst.bindings_from(src);
    let mut map: Vec<Option<ValueId>> = vec![None; src.num_values()];
    for node in src.nodes() {
        let results = if let Op::Parameter { index } = node.op {
            let a = args.get(index).copied().ok_or_else(|| {
                Error::internal(format!(
                    "inlining '{}': no argument for parameter {index}",
                    src.name
                ))
            })?;
            vec![a]
        } else {
            let inputs = (node.inputs.iter())
                .map(|v| map[v.index()].ok_or_else(|| Error::internal("inline: operand missing")))
                .collect::<Result<Vec<_>>>()?;
            copy_node(dst, src, node, inputs, prefix)?
        };
        for (r, v) in node.results.iter().zip(results) {
            map[r.index()] = Some(v);
        }
    }
    (src.outputs().iter())
        .map(|o| map[o.value.index()].ok_or_else(|| Error::internal("inline: output missing")))
        .collect()
}

/// Adds a copy of `src`'s `node` reading `inputs` to `dst`, named after it
/// (behind `prefix`, made unique): its results.
fn copy_node(
    dst: &mut Graph,
    src: &Graph,
    node: &crate::Node,
    inputs: Vec<ValueId>,
    prefix: &str,
) -> Result<Vec<ValueId>> {
    let declared = (node.op.has_declared_types())
        .then(|| (node.results.iter()).map(|r| src.ty(*r).clone()).collect());
    let name = dst.fresh_name(&format!("{prefix}{}", node.name));
    let id = dst.add_node(NewNode {
        op: node.op.clone(),
        inputs,
        name: Some(name),
        site: node.site.clone(),
        effect: node.effect,
        result_types: declared,
    })?;
    Ok(dst.node(id).results.clone())
}

/// Removes every node (stateful ones too) whose results nothing needs:
/// what a gradient recomputes of a region must not repeat a callback's
/// effects. A stateful node the gradient does need is an error naming it.
pub fn prune_for_recompute(g: &mut Graph, what: &str) -> Result<()> {
    let mut live = vec![false; g.num_values()];
    for o in g.outputs() {
        live[o.value.index()] = true;
    }
    let mut keep = vec![false; g.nodes().len()];
    for id in g.node_ids().rev() {
        let n = g.node(id);
        let needed =
            matches!(n.op, Op::Parameter { .. }) || n.results.iter().any(|r| live[r.index()]);
        if !needed {
            continue;
        }
        if n.effect == Effect::Stateful && !matches!(n.op, Op::Parameter { .. }) {
            return Err(fail(
                g,
                id,
                format!(
                    "the gradient of {what} recomputes this stateful node's result, which would repeat its effects; make it stateless or give it a custom gradient"
                ),
            ));
        }
        keep[id.index()] = true;
        for i in &n.inputs {
            live[i.index()] = true;
        }
    }
    g.retain_nodes(&keep);
    Ok(())
}
