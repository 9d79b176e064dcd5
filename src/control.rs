//! Control flow while tracing: `while_loop`, `fori_loop`, `cond`, `switch`.
//!
//! A body or branch is a Rust closure traced once into a region of the
//! graph (an [`Op::While`] or [`Op::Case`]). It may use any value of the
//! enclosing traces: such a value becomes a parameter of the region (a
//! capture) and an extra operand of the op, as JAX's closure conversion
//! does, so regions stay closed graphs. Every op recorded while a body is
//! traced goes into that body, whichever values it starts from; a value
//! traced inside a body cannot be used after the body has ended (return
//! it instead).

use std::collections::HashSet;

use tensorlift_ir::builder::Elementwise;
use tensorlift_ir::{
    BinaryOp, CmpOp, DType, Detail, Effect, Error, Graph, NodeRef, Op, Shape, Site, TensorType,
    ValueId,
};

use crate::trace::{Operand, Sym, Tracer};

/// A branch of [`switch`]: the operands in, the results out.
pub type Branch<'a> = dyn Fn(&[Sym]) -> Vec<Sym> + 'a;

/// A region traced from a closure: its graph (parameters: the values
/// passed in, then the captures) and the captured values of the
/// enclosing trace, in parameter order.
struct Traced {
    graph: Graph,
    captures: Vec<ValueId>,
}

fn fail(op: &str, name: &str, site: &Site, message: String) -> Error {
    Error::InvalidArgument(Detail {
        message,
        node: Some(NodeRef {
            name: name.into(),
            op: op.into(),
            site: site.clone(),
        }),
        pos: None,
    })
}

/// The graph of `traced` with its captures renumbered to start at
/// `offset`, unused parameters of `extra` types added at the other
/// indices (so that every region of one op takes the same operands), and
/// `pass_through` parameters appended to its outputs.
fn align(
    traced: &Traced,
    args: usize,
    offset: usize,
    all: &[TensorType],
    pass_through: bool,
) -> Result<Graph, Error> {
    let own = traced.captures.len();
    let renumber = |index: usize| {
        if index < args {
            index
        } else {
            index - args + offset
        }
    };
    let mut g = traced.graph.rewrite(|g, node, _| {
        let Op::Parameter { index } = node.op else {
            return Ok(None);
        };
        let ty = traced.graph.ty(node.results[0]).clone();
        let v = g.add_parameter(
            renumber(index),
            ty,
            Some(node.name.clone()),
            node.site.clone(),
        )?;
        Ok(Some(vec![v]))
    })?;
    let site = Site::caller();
    let mut params: Vec<Option<ValueId>> = vec![None; all.len()];
    for (i, v) in g.params().into_iter().enumerate() {
        // `params` gives the results of parameter nodes only.
        let Op::Parameter { index } = g.producer(v).op else {
            return Err(Error::internal(format!(
                "parameter {i} of a region is not made by a parameter node"
            )));
        };
        if let Some(p) = params.get_mut(index) {
            *p = Some(v);
        }
    }
    for (index, ty) in all.iter().enumerate() {
        let owned = index < args || (offset..offset + own).contains(&index);
        if !owned && params[index].is_none() {
            let name = g.fresh_name(&format!("unused_{index}"));
            params[index] = Some(g.add_parameter(index, ty.clone(), Some(name), site.clone())?);
        }
    }
    if pass_through {
        for (index, p) in params.iter().enumerate().skip(args) {
            let v = p.ok_or_else(|| Error::internal("a region parameter is missing"))?;
            g.add_output(v, format!("carry_{index}"))?;
        }
    }
    Ok(g)
}

impl Tracer {
    /// Traces `f` as a region named `name` of the trace ops go to now,
    /// taking values of `types`. `returned` is set to how many values `f`
    /// returned unless it is set already (also when tracing fails: the
    /// caller still gives the user that many values).
    fn trace_region(
        &self,
        name: &str,
        types: &[TensorType],
        site: &Site,
        returned: &mut Option<usize>,
        f: impl FnOnce(&[Sym]) -> Vec<Sym>,
    ) -> Result<Option<Traced>, Error> {
        let child = self.open_region(name, types.len());
        let params = types
            .iter()
            .enumerate()
            .map(|(i, t)| child.parameter(i, t.clone(), Some(format!("arg{i}")), site.clone()))
            .collect::<Vec<_>>();
        let outs = f(&params);
        returned.get_or_insert(outs.len());
        let result = child.close_region(&outs, site);
        result.map(|o| o.map(|(graph, captures)| Traced { graph, captures }))
    }
}

/// Which values a traced op gets and gives, for [`finish`].
struct Built {
    tracer: Tracer,
    results: Vec<ValueId>,
}

/// The values a control-flow op gives the user: its results, or `n`
/// poisoned values when tracing it failed (the error recorded, if any), so
/// that the user's code can go on (`out[0]`) and the function's tracing
/// reports that error.
fn settle(tracer: &Tracer, r: Result<Option<Vec<Sym>>, Error>, n: usize) -> Vec<Sym> {
    match r {
        Ok(Some(v)) => v,
        Ok(None) => tracer.current_poisoned(n),
        Err(e) => {
            tracer.record(e);
            tracer.current_poisoned(n)
        }
    }
}

/// The value `f` adds over the values of `inputs` in the trace ops go to
/// now (the tracer's own ops, with the user's `site`): poisoned when an
/// input is, or when `f` fails (its error recorded). `op` names what the
/// user called in an error about the inputs themselves.
fn build_at(
    tracer: &Tracer,
    inputs: &[&Sym],
    op: &str,
    site: &Site,
    f: impl FnOnce(&mut Graph, &[ValueId]) -> Result<ValueId, Error>,
) -> Sym {
    let r = match tracer.operands(inputs, op, site) {
        Ok(Some((here, vs))) => here.graph_mut(|g| f(g, &vs)).map(|v| Some(here.syms(&[v]))),
        Ok(None) => Ok(None),
        Err(e) => Err(e),
    };
    let mut v = settle(tracer, r, 1);
    v.pop()
        .unwrap_or_else(|| tracer.current_poisoned(1).remove(0))
}

/// Records an error when `next`, what a loop body returned, does not give
/// one value of each carry's type (`carries`, the body's parameters as the
/// user sees them): the error names the user's carry index and `what`
/// (`fori_loop`, `scan`) rather than the `while` inside, whose carries
/// start with the counter.
fn check_carries(tracer: &Tracer, what: &str, next: &[Sym], carries: &[Sym], site: &Site) {
    let message = if next.len() != carries.len() {
        Some(format!(
            "the body returns {} value(s), but the loop carries {}",
            next.len(),
            carries.len()
        ))
    } else {
        next.iter()
            .zip(carries)
            .enumerate()
            .find_map(|(k, (n, c))| match (n.ty(), c.ty()) {
                (Some(got), Some(want)) if got != want => Some(format!(
                    "the body returns {got} for carry {k}, which is {want}: a carry keeps its type"
                )),
                _ => None,
            })
    };
    if let Some(m) = message {
        tracer.record(fail(what, what, site, m));
    }
}

/// `while cond(carries): carries = body(carries)`, from `init`; returns
/// the final carries. `cond` returns a `bool[]`; `body` returns one value
/// per carry, of the carry's type. Both may use values traced outside
/// them. Like `jax.lax.while_loop` and `tf.while_loop`.
#[track_caller]
pub fn while_loop(
    cond: impl FnOnce(&[Sym]) -> Sym,
    body: impl FnOnce(&[Sym]) -> Vec<Sym>,
    init: &[Sym],
) -> Vec<Sym> {
    while_loop_at(cond, body, init, Site::caller())
}

fn while_impl(
    tracer: &Tracer,
    cond: impl FnOnce(&[Sym]) -> Sym,
    body: impl FnOnce(&[Sym]) -> Vec<Sym>,
    init: &[Sym],
    site: &Site,
) -> Result<Option<Built>, Error> {
    let refs: Vec<&Sym> = init.iter().collect();
    let Some((here, vs)) = tracer.operands(&refs, "while", site)? else {
        return Ok(None);
    };
    let types: Vec<TensorType> = here.graph_ref(|g| vs.iter().map(|v| g.ty(*v).clone()).collect());
    let name = here.graph_mut(|g| g.fresh_name("while"));
    let (mut one, mut carries) = (None, Some(init.len()));
    let cond_name = format!("{name}_cond");
    let Some(c) = here.trace_region(&cond_name, &types, site, &mut one, |a| vec![cond(a)])? else {
        return Ok(None);
    };
    let Some(b) = here.trace_region(&format!("{name}_body"), &types, site, &mut carries, body)?
    else {
        return Ok(None);
    };
    let outs = b.graph.outputs().len();
    if outs != init.len() {
        return Err(fail(
            "while",
            &name,
            site,
            format!(
                "the body returns {outs} value(s), but the loop carries {}",
                init.len()
            ),
        ));
    }
    // Carries: init, cond's captures, body's captures (passed through).
    let n = init.len();
    let mut inputs = vs.clone();
    inputs.extend(&c.captures);
    inputs.extend(&b.captures);
    let all: Vec<TensorType> =
        here.graph_ref(|g| inputs.iter().map(|v| g.ty(*v).clone()).collect());
    let cond_g = align(&c, n, n, &all, false)?;
    let body_g = align(&b, n, n + c.captures.len(), &all, true)?;
    let _ = name;
    let results =
        here.graph_mut(|g| tensorlift_ir::builder::while_loop(g, &inputs, cond_g, body_g, site))?;
    Ok(Some(Built {
        tracer: here,
        results,
    }))
}

/// Runs the branch `index` selects on `operands` and returns its results
/// (`jax.lax.switch`, `tf.switch_case`): an index below 0 or past the
/// last branch selects the last one, as XLA does. Every branch returns
/// the same types; only the selected one runs. The index is any integer
/// or bool scalar.
#[track_caller]
pub fn switch(index: &Sym, branches: &[&Branch], operands: &[Sym]) -> Vec<Sym> {
    let site = Site::caller();
    let tracer = index.graph();
    let mut arity = None;
    let r = case_impl(&tracer, index, branches, operands, &site, &mut arity, false);
    let r = r.map(|o| o.map(|b| b.tracer.syms(&b.results)));
    settle(&tracer, r, arity.unwrap_or(0))
}

/// `true_fn(operands)` when `pred` holds, else `false_fn(operands)`
/// (`jax.lax.cond`, `tf.cond`); only the branch taken runs. Both return
/// the same types.
#[track_caller]
pub fn cond(
    pred: &Sym,
    true_fn: impl Fn(&[Sym]) -> Vec<Sym>,
    false_fn: impl Fn(&[Sym]) -> Vec<Sym>,
    operands: &[Sym],
) -> Vec<Sym> {
    let site = Site::caller();
    let tracer = pred.graph();
    let branches: [&Branch; 2] = [&false_fn, &true_fn];
    let mut arity = None;
    let r = case_impl(&tracer, pred, &branches, operands, &site, &mut arity, true);
    let r = r.map(|o| o.map(|b| b.tracer.syms(&b.results)));
    settle(&tracer, r, arity.unwrap_or(0))
}

/// A `case` of `branches` (traced here); `arity` is set to how many values
/// the first branch returns, also when the op cannot be made. For a
/// `cond` (`is_cond`: branches false, true), errors name `cond`, its
/// predicate and `true_fn` / `false_fn`.
fn case_impl(
    tracer: &Tracer,
    index: &Sym,
    branches: &[&Branch],
    operands: &[Sym],
    site: &Site,
    arity: &mut Option<usize>,
    is_cond: bool,
) -> Result<Option<Built>, Error> {
    let mut refs: Vec<&Sym> = vec![index];
    refs.extend(operands);
    let Some((here, vs)) = tracer.operands(&refs, "case", site)? else {
        return Ok(None);
    };
    let name = here.graph_mut(|g| g.fresh_name("case"));
    if branches.is_empty() {
        return Err(fail(
            "case",
            &name,
            site,
            "needs at least one branch".into(),
        ));
    }
    let args = &vs[1..];
    let types: Vec<TensorType> =
        here.graph_ref(|g| args.iter().map(|v| g.ty(*v).clone()).collect());
    // The branches are traced before the index is checked, so that a bad
    // index still gives the user one value per result.
    let mut traced = Vec::with_capacity(branches.len());
    for (k, f) in branches.iter().enumerate() {
        let branch = format!("{name}_branch{k}");
        let Some(t) = here.trace_region(&branch, &types, site, arity, |a| f(a))? else {
            return Ok(None);
        };
        traced.push(t);
    }
    let branch_name = |k: usize| match (is_cond, k) {
        (true, 0) => "false_fn".to_string(),
        (true, _) => "true_fn".to_string(),
        (false, k) => format!("branch {k}"),
    };
    let op = if is_cond { "cond" } else { "switch" };
    // Every branch returns the first one's types (said here in the user's
    // words; the case's own rule would say `branch 1` for true_fn).
    let returns = |t: &Traced| -> Vec<TensorType> {
        (t.graph.outputs().iter())
            .map(|o| t.graph.ty(o.value).clone())
            .collect()
    };
    if let Some(first) = traced.first() {
        let want = returns(first);
        for (k, t) in traced.iter().enumerate().skip(1) {
            let got = returns(t);
            if got != want {
                return Err(fail(
                    op,
                    &name,
                    site,
                    format!(
                        "{} returns {}, but {} returns {}: every branch must return the same types",
                        branch_name(k),
                        list(&got),
                        branch_name(0),
                        list(&want)
                    ),
                ));
            }
        }
    }
    // The index as int32[].
    let index_ty = here.graph_ref(|g| g.ty(vs[0]).clone());
    if index_ty.shape != tensorlift_ir::Shape::known(&[])
        || !(index_ty.dtype.is_int() || index_ty.dtype == DType::Bool)
    {
        let what = match is_cond {
            true => format!("the predicate must be a bool (or integer) scalar, not {index_ty}"),
            false => {
                format!("the branch index must be an integer or bool scalar, not {index_ty}")
            }
        };
        return Err(fail(op, &name, site, what));
    }
    let m = args.len();
    let mut inputs = vec![vs[0]];
    inputs.extend(args);
    // Each branch's captures follow the operands and the captures of the
    // branches before it.
    let mut offsets = Vec::with_capacity(traced.len());
    for t in &traced {
        offsets.push(inputs.len() - 1);
        inputs.extend(&t.captures);
    }
    let all: Vec<TensorType> =
        here.graph_ref(|g| inputs[1..].iter().map(|v| g.ty(*v).clone()).collect());
    let regions = traced
        .iter()
        .zip(&offsets)
        .map(|(t, off)| align(t, m, *off, &all, false))
        .collect::<Result<Vec<_>, _>>()?;
    let results = here
        .graph_mut(|g| tensorlift_ir::builder::case(g, inputs[0], &inputs[1..], regions, site))?;
    Ok(Some(Built {
        tracer: here,
        results,
    }))
}

/// `for i in lower..upper: carries = body(i, carries)` (`jax.lax.fori_loop`):
/// a `while_loop` over an index of `lower`'s dtype (int32 for Rust
/// integers). The bounds may be traced values.
#[track_caller]
pub fn fori_loop(
    lower: impl Into<Operand>,
    upper: impl Into<Operand>,
    body: impl FnOnce(&Sym, &[Sym]) -> Vec<Sym>,
    init: &[Sym],
) -> Vec<Sym> {
    fori_loop_at(
        lower.into(),
        upper.into(),
        body,
        init,
        "fori_loop",
        Site::caller(),
    )
}

/// [`fori_loop`] at `site`; an error about the carries the body returns
/// names `what` (`fori_loop`, or `scan` built on it).
fn fori_loop_at(
    lower: Operand,
    upper: Operand,
    body: impl FnOnce(&Sym, &[Sym]) -> Vec<Sym>,
    init: &[Sym],
    what: &str,
    site: Site,
) -> Vec<Sym> {
    let Some(first) = init.first() else {
        return Vec::new();
    };
    let tracer = first.graph();
    // The index has a traced bound's dtype (a Rust integer takes it, as a
    // Python int does in JAX), else int32.
    let traced = |o: &Operand| match o {
        Operand::Sym(s) => s.ty(),
        Operand::Scalar(_) | Operand::Int(_) => None,
    };
    let counter = (traced(&lower).or(traced(&upper))).map_or(DType::I32, |t| t.dtype);
    if let Some(m) = bounds_problem(&lower, &upper, counter) {
        tracer.record(fail(what, what, &site, m));
        return tracer.current_poisoned(init.len());
    }
    let bound = |o: Operand, dtype: DType| match o {
        Operand::Sym(s) => s,
        Operand::Scalar(v) => tracer.scalar_at(dtype, v, site.clone()),
        Operand::Int(v) => tracer.int_at(dtype, v, site.clone()),
    };
    let lower = bound(lower, counter);
    let mut carries = vec![lower];
    carries.extend(init.iter().cloned());
    let elementwise = |op, a: &Sym, b: &Sym| {
        build_at(&tracer, &[a, b], what, &site, |g, v| {
            tensorlift_ir::builder::binary(g, op, v[0], v[1], &site)
        })
    };
    // A Rust bound is a constant of the condition itself (compared
    // directly), a traced one a captured value.
    let out = while_loop_at(
        |c| {
            let upper = bound(upper, counter);
            elementwise(Elementwise::Compare(CmpOp::Lt), &c[0], &upper)
        },
        |c| {
            let one = tracer.scalar_at(counter, 1.0, site.clone());
            let mut next = vec![elementwise(Elementwise::Binary(BinaryOp::Add), &c[0], &one)];
            let returned = body(&c[0], &c[1..]);
            check_carries(&tracer, what, &returned, &c[1..], &site);
            next.extend(returned);
            next
        },
        &carries,
        site.clone(),
    );
    out.into_iter().skip(1).collect()
}

/// What is wrong with a loop's bounds for an index of dtype `counter`
/// (`None`: nothing): a traced bound that is not an integer scalar, two
/// traced bounds of other dtypes, a Rust bound that is not an integer or
/// does not fit.
fn bounds_problem(lower: &Operand, upper: &Operand, counter: DType) -> Option<String> {
    let mut dtype = None;
    for (name, o) in [("lower", lower), ("upper", upper)] {
        match o {
            Operand::Sym(s) => {
                let t = s.ty()?;
                if !t.dtype.is_int() || t.shape.rank() != Some(0) {
                    return Some(format!(
                        "the {name} bound is {t}, but the bounds are integer scalars"
                    ));
                }
                match &dtype {
                    Some(d) if *d != t => {
                        return Some(format!(
                            "the lower bound is {d} and the upper bound {t}: the bounds must have one dtype (cast one)"
                        ));
                    }
                    Some(_) | None => dtype = Some(t),
                }
            }
            Operand::Scalar(v) => {
                return Some(format!(
                    "the {name} bound {v} is not an integer (the loop index is {counter})"
                ));
            }
            Operand::Int(v) => {
                if tensorlift_ir::Literal::scalar_int(counter, *v).is_err() {
                    return Some(format!(
                        "the {name} bound {v} does not fit the loop index's dtype {counter}"
                    ));
                }
            }
        }
    }
    None
}

fn while_loop_at(
    cond: impl FnOnce(&[Sym]) -> Sym,
    body: impl FnOnce(&[Sym]) -> Vec<Sym>,
    init: &[Sym],
    site: Site,
) -> Vec<Sym> {
    let Some(first) = init.first() else {
        // No carried value: nothing to loop over, and no graph to record in.
        return Vec::new();
    };
    let tracer = first.graph();
    let n = init.len();
    let r = while_impl(&tracer, cond, body, init, &site);
    settle(
        &tracer,
        r.map(|o| o.map(|b| b.tracer.syms(&b.results[..n]))),
        n,
    )
}

/// `jax.lax.scan`: `carry, y = f(carry, x)` over the leading dim of `xs`
/// (or `length` steps when `xs` is empty), from the last step down when
/// `reverse`; returns the final carry and the `y`s stacked along a new
/// leading dim (in step order: `ys[t]` is the `y` of `xs[t]`). Of no
/// steps, the initial carry and `ys` with a leading dim of 0. Traced as a
/// `fori_loop` whose body slices `x` with `dynamic_slice` and writes `y`
/// with `dynamic_update_slice`; `f` is traced twice (once to learn the
/// types of `y`). Errors name the `scan` and the line that called it.
#[track_caller]
pub fn scan(
    f: impl Fn(&[Sym], &[Sym]) -> (Vec<Sym>, Vec<Sym>),
    init: &[Sym],
    xs: &[Sym],
    length: Option<usize>,
    reverse: bool,
) -> (Vec<Sym>, Vec<Sym>) {
    let site = Site::caller();
    let Some(first) = init.first().or(xs.first()) else {
        return (Vec::new(), Vec::new());
    };
    let tracer = first.graph();
    let mut ys = None;
    match scan_impl(&tracer, &f, init, xs, length, reverse, &site, &mut ys) {
        Ok(Some(r)) => r,
        r => {
            let carry = settle(&tracer, r.map(|_| None), init.len());
            // A body never traced (the scan failed first): run on poisoned
            // values, which build nothing, it says how many ys it gives,
            // so that the caller's `ys[0]` is a poisoned value, not a panic.
            let n = ys.unwrap_or_else(|| {
                let c = tracer.current_poisoned(init.len());
                let x = tracer.current_poisoned(xs.len());
                f(&c, &x).1.len()
            });
            (carry, tracer.current_poisoned(n))
        }
    }
}

type ScanResult = Option<(Vec<Sym>, Vec<Sym>)>;

/// A scan body: (carry, x) → (carry, y).
type ScanBody<'a> = dyn Fn(&[Sym], &[Sym]) -> (Vec<Sym>, Vec<Sym>) + 'a;

/// [`scan`]; `ys` is set to how many `y`s `f` returns once it is known.
#[allow(
    clippy::too_many_arguments,
    reason = "scan's own arguments, its site and the count of ys it reports back"
)]
fn scan_impl(
    tracer: &Tracer,
    f: &ScanBody,
    init: &[Sym],
    xs: &[Sym],
    length: Option<usize>,
    reverse: bool,
    site: &Site,
    ys: &mut Option<usize>,
) -> Result<ScanResult, Error> {
    let err = |m: String| fail("scan", "scan", site, m);
    // The step count and the per-step slices' types.
    let mut steps = length;
    let mut x_types = Vec::with_capacity(xs.len());
    for (k, x) in xs.iter().enumerate() {
        let Some(t) = x.ty() else { return Ok(None) };
        let dims = t.shape.as_known().ok_or_else(|| {
            err(format!(
                "xs[{k}] is {t}: scan needs the leading dim and the rest known when it is \
                 traced (give them in the input_signature)"
            ))
        })?;
        let Some((&n, rest)) = dims.split_first() else {
            return Err(err(format!(
                "xs[{k}] is a scalar: scan slices a leading dim"
            )));
        };
        if steps.is_some_and(|s| s != n) {
            return Err(err(format!(
                "xs[{k}] has {n} steps, but {} were given or found before",
                steps.unwrap_or_default()
            )));
        }
        steps = Some(n);
        x_types.push(TensorType::known(t.dtype, rest));
    }
    let Some(steps) = steps else {
        return Err(err("scan needs xs or a length".into()));
    };
    let Ok(count) = i32::try_from(steps) else {
        return Err(err(format!("{steps} steps do not fit int32")));
    };
    let n = init.len();
    let mut types = Vec::with_capacity(n + xs.len());
    for s in init {
        let Some(t) = s.ty() else { return Ok(None) };
        types.push(t);
    }
    types.extend(x_types.iter().cloned());
    // A first trace, to learn the types of y and check the carries' (also
    // when there are no steps to run).
    let mut returned = None;
    let Some(probe) = tracer.trace_region("scan_probe", &types, site, &mut returned, |a| {
        let (c, y) = f(&a[..n], &a[n..]);
        *ys = Some(y.len());
        check_carries(tracer, "scan", &c, &a[..n], site);
        c.into_iter().chain(y).collect()
    })?
    else {
        return Ok(None);
    };
    let outs = probe.graph.outputs();
    let y_types: Vec<TensorType> = (outs.get(n..).unwrap_or_default().iter())
        .map(|o| probe.graph.ty(o.value).clone())
        .collect();
    let mut carries: Vec<Sym> = init.to_vec();
    for (k, t) in y_types.iter().enumerate() {
        let dims = (t.shape.as_known())
            .ok_or_else(|| err(format!("ys[{k}] is {t}: scan stacks ys of known shapes")))?;
        let mut stacked = vec![steps];
        stacked.extend(&dims);
        carries.push(build_at(tracer, &[], "scan", site, |g, _| {
            let z = tensorlift_ir::builder::constant(g, t.dtype, 0.0, site)?;
            tensorlift_ir::builder::broadcast_to(g, z, &stacked, site)
        }));
    }
    if steps == 0 {
        // Nothing to slice or run: the carries as given, ys of no rows.
        let (c, ys) = carries.split_at(n);
        return Ok(Some((c.to_vec(), ys.to_vec())));
    }
    let out = fori_loop_at(
        Operand::Int(0),
        Operand::Int(i128::from(count)),
        |i, c| {
            let step = if reverse {
                let last = tracer.scalar_at(DType::I32, f64::from(count - 1), site.clone());
                build_at(tracer, &[&last, i], "scan", site, |g, v| {
                    g.add(Op::Binary(BinaryOp::Sub), v, site.clone())
                })
            } else {
                i.clone()
            };
            let zero = tracer.scalar_at(DType::I32, 0.0, site.clone());
            let x_t: Vec<Sym> = (xs.iter().zip(&x_types))
                .map(|(x, xt)| {
                    let dims = xt.shape.as_known().unwrap_or_default();
                    let mut inputs = vec![x, &step];
                    inputs.extend(std::iter::repeat_n(&zero, dims.len()));
                    build_at(tracer, &inputs, "scan", site, |g, v| {
                        let mut sizes = vec![1];
                        sizes.extend(&dims);
                        let s = g.add(Op::DynamicSlice { sizes }, v, site.clone())?;
                        g.add(Op::Reshape(Shape::known(&dims)), &[s], site.clone())
                    })
                })
                .collect();
            let (mut next, ys) = f(&c[..n], &x_t);
            for (k, y) in ys.iter().enumerate() {
                let rank = y.shape().and_then(|s| s.rank()).unwrap_or(0);
                let mut inputs = vec![&c[n + k], y, &step];
                inputs.extend(std::iter::repeat_n(&zero, rank));
                next.push(build_at(tracer, &inputs, "scan", site, |g, v| {
                    let mut one_step = vec![1];
                    one_step.extend(g.ty(v[1]).shape.as_known().unwrap_or_default());
                    let y1 = g.add(Op::Reshape(Shape::known(&one_step)), &[v[1]], site.clone())?;
                    let mut ins = vec![v[0], y1];
                    ins.extend(&v[2..]);
                    g.add(Op::DynamicUpdateSlice, &ins, site.clone())
                }));
            }
            next
        },
        &carries,
        "scan",
        site.clone(),
    );
    if out.len() != carries.len() {
        return Ok(None);
    }
    let (c, ys) = out.split_at(n);
    Ok(Some((c.to_vec(), ys.to_vec())))
}

/// `f(inputs)` with the gradient `vjp` instead of `f`'s own
/// (`jax.custom_vjp`, `tf.custom_gradient`). `vjp(inputs, outputs,
/// cotangents)` gets the inputs, `f`'s results and one cotangent per real
/// floating result, and returns one cotangent per real floating input.
/// Both may use values traced outside them; those get no gradient (pass a
/// value as an input to differentiate with respect to it). Calls `f` as
/// traced code in every mode; differentiation inlines `vjp`, which may
/// itself call host callbacks (`numpy_function`, `host_fn`), so a callback
/// given a gradient this way is differentiable interpreted and compiled.
#[track_caller]
pub fn custom_vjp(
    f: impl FnOnce(&[Sym]) -> Vec<Sym>,
    vjp: impl FnOnce(&[Sym], &[Sym], &[Sym]) -> Vec<Sym>,
    inputs: &[Sym],
) -> Vec<Sym> {
    let site = Site::caller();
    let Some(first) = inputs.first() else {
        return Vec::new();
    };
    let tracer = first.graph();
    let mut arity = None;
    let r = custom_vjp_impl(&tracer, f, vjp, inputs, &site, &mut arity);
    let r = r.map(|o| o.map(|b| b.tracer.syms(&b.results)));
    settle(&tracer, r, arity.unwrap_or(0))
}

/// [`custom_vjp`]; `arity` is set to how many values `f` returns, also
/// when the op cannot be made.
fn custom_vjp_impl(
    tracer: &Tracer,
    f: impl FnOnce(&[Sym]) -> Vec<Sym>,
    vjp: impl FnOnce(&[Sym], &[Sym], &[Sym]) -> Vec<Sym>,
    inputs: &[Sym],
    site: &Site,
    arity: &mut Option<usize>,
) -> Result<Option<Built>, Error> {
    let refs: Vec<&Sym> = inputs.iter().collect();
    let Some((here, vs)) = tracer.operands(&refs, "custom_vjp", site)? else {
        return Ok(None);
    };
    let n = vs.len();
    let types: Vec<TensorType> = here.graph_ref(|g| vs.iter().map(|v| g.ty(*v).clone()).collect());
    let name = here.graph_mut(|g| g.fresh_name("custom_vjp"));
    let Some(b) = here.trace_region(&format!("{name}_body"), &types, site, arity, f)? else {
        return Ok(None);
    };
    let outs: Vec<TensorType> = (b.graph.outputs().iter())
        .map(|o| b.graph.ty(o.value).clone())
        .collect();
    let mut vtypes = types.clone();
    vtypes.extend(outs.iter().cloned());
    vtypes.extend(outs.iter().filter(|t| t.dtype.is_float()).cloned());
    let k = vtypes.len();
    let no = outs.len();
    let mut cotangents = None;
    let Some(v) = here.trace_region(
        &format!("{name}_vjp"),
        &vtypes,
        site,
        &mut cotangents,
        |a| vjp(&a[..n], &a[n..n + no], &a[n + no..]),
    )?
    else {
        return Ok(None);
    };
    // Operands: the inputs, the body's captures, the gradient's captures.
    let mut operands = vs.clone();
    operands.extend(&b.captures);
    operands.extend(&v.captures);
    let all: Vec<TensorType> =
        here.graph_ref(|g| operands.iter().map(|v| g.ty(*v).clone()).collect());
    let body_g = align(&b, n, n, &all, false)?;
    // The gradient's parameters: the operands (its own captures in their
    // place, the body's as unused ones), then results and cotangents.
    let ops = operands.len();
    let nb = b.captures.len();
    let renumber = |index: usize| {
        if index < n {
            index
        } else if index < k {
            index - n + ops
        } else {
            n + nb + (index - k)
        }
    };
    let mut vjp_g = v.graph.rewrite(|g, node, _| {
        let Op::Parameter { index } = node.op else {
            return Ok(None);
        };
        let ty = v.graph.ty(node.results[0]).clone();
        let p = g.add_parameter(renumber(index), ty, Some(node.name.clone()), site.clone())?;
        Ok(Some(vec![p]))
    })?;
    for (j, ty) in all[n..n + nb].iter().enumerate() {
        let pname = vjp_g.fresh_name(&format!("unused_{}", n + j));
        vjp_g.add_parameter(n + j, ty.clone(), Some(pname), site.clone())?;
    }
    let op = Op::CustomVjp {
        inputs: n,
        body: tensorlift_ir::Region::new(body_g),
        vjp: tensorlift_ir::Region::new(vjp_g),
    };
    let results = here.graph_mut(|g| {
        let id = g.add_node(tensorlift_ir::NewNode {
            op,
            inputs: operands.clone(),
            name: Some(name.clone()),
            site: site.clone(),
            effect: tensorlift_ir::Effect::Pure,
            result_types: None,
        })?;
        Ok::<_, Error>(g.node(id).results.clone())
    })?;
    Ok(Some(Built {
        tracer: here,
        results,
    }))
}

/// The cotangents `Jᵀ·ct` of `f`'s inputs at `primals`, as code in the
/// trace under way: `f` is traced as a region, differentiated, and its
/// gradient inlined here, so the result is ordinary traced code that can
/// be differentiated again. This is what a gradient tape inside a traced
/// function needs (and nested tapes: a gradient of a gradient). Values
/// `f` uses from outside get no gradient (pass them in `primals` to
/// differentiate with respect to them); `cotangents` holds one value per
/// real floating output of `f`, of that output's type.
#[track_caller]
pub fn vjp_in_trace(
    f: impl FnOnce(&[Sym]) -> Vec<Sym>,
    primals: &[Sym],
    cotangents: &[Sym],
) -> Vec<Sym> {
    let site = Site::caller();
    let Some(first) = primals.first() else {
        return Vec::new();
    };
    let tracer = first.graph();
    let r = vjp_in_trace_impl(&tracer, f, primals, cotangents, &site);
    settle(
        &tracer,
        r.map(|o| o.map(|b| b.tracer.syms(&b.results))),
        primals.len(),
    )
}

fn vjp_in_trace_impl(
    tracer: &Tracer,
    f: impl FnOnce(&[Sym]) -> Vec<Sym>,
    primals: &[Sym],
    cotangents: &[Sym],
    site: &Site,
) -> Result<Option<Built>, Error> {
    let refs: Vec<&Sym> = primals.iter().chain(cotangents).collect();
    let Some((here, vs)) = tracer.operands(&refs, "vjp", site)? else {
        return Ok(None);
    };
    let n = primals.len();
    let (pv, cv) = vs.split_at(n);
    let types: Vec<TensorType> = here.graph_ref(|g| pv.iter().map(|v| g.ty(*v).clone()).collect());
    let name = here.graph_mut(|g| g.fresh_name("vjp"));
    let mut returned = None;
    let Some(b) = here.trace_region(&name, &types, site, &mut returned, f)? else {
        return Ok(None);
    };
    let seeded: Vec<TensorType> = (b.graph.outputs().iter())
        .map(|o| b.graph.ty(o.value).clone())
        .filter(|t| tensorlift_ir::autodiff::is_differentiable(t.dtype))
        .collect();
    let given: Vec<TensorType> = here.graph_ref(|g| cv.iter().map(|v| g.ty(*v).clone()).collect());
    if seeded != given {
        return Err(fail(
            "vjp",
            &name,
            site,
            format!(
                "the function's real floating outputs are {}, but the cotangents given are {}",
                list(&seeded),
                list(&given)
            ),
        ));
    }
    let outputs = b.graph.outputs().len();
    let g = tensorlift_ir::autodiff::vjp(&b.graph, &(0..n).collect::<Vec<_>>())?;
    let mut args = pv.to_vec();
    args.extend(&b.captures);
    args.extend(cv);
    let inlined =
        here.graph_mut(|dst| tensorlift_ir::autodiff::inline(dst, &g, &args, &format!("{name}/")))?;
    Ok(Some(Built {
        tracer: here,
        results: inlined[outputs..].to_vec(),
    }))
}

fn list(types: &[TensorType]) -> String {
    let t: Vec<String> = types.iter().map(ToString::to_string).collect();
    format!("[{}]", t.join(", "))
}

/// The cotangents `Jᵀ·ct` of `targets` with respect to `sources`, all
/// values of the trace under way, as code added to it (TensorFlow's
/// graph-mode gradients): every path from a source to a target counts,
/// through loops, branches and values their bodies capture. `None` for a
/// source no target depends on. `cotangents` holds one value per target,
/// of its type (targets must be real floating). The forward values the
/// gradient needs are recomputed from the graph's own (pure ones merge
/// with them when optimized); a stateful node between a source and a
/// target is an error naming it (its effects would run twice).
#[track_caller]
pub fn vjp_of_values(targets: &[Sym], sources: &[Sym], cotangents: &[Sym]) -> Vec<Option<Sym>> {
    vjp_of_values_recorded(targets, sources, cotangents, &Recorded::default())
}

/// What a gradient tape recorded of the trace under way, for
/// [`vjp_of_values_recorded`]: the values it did not record stop the
/// gradient, as constants (TensorFlow's tapes inside a `tf.function`).
#[doc(hidden)]
#[derive(Clone, Debug, Default)]
pub struct Recorded {
    /// The spans of values (`start..end` positions, [`Tracer::position`])
    /// made while the tape recorded, in the trace ops go to now: values
    /// made outside them (before the tape, between its `with` blocks,
    /// under `stop_recording`, after it), but the sources, are constants.
    /// `None`: every value counts.
    pub spans: Option<Vec<(usize, usize)>>,
    /// Results of ops the tape saw and did not record (under
    /// `stop_recording`, reading nothing it watched, or before a reset).
    pub unrecorded: Vec<Sym>,
}

/// [`vjp_of_values`] through what a tape recorded only: a value made
/// outside `recorded.spans` or listed unrecorded (but a source) is a
/// constant of the gradient.
#[doc(hidden)]
#[track_caller]
pub fn vjp_of_values_recorded(
    targets: &[Sym],
    sources: &[Sym],
    cotangents: &[Sym],
    recorded: &Recorded,
) -> Vec<Option<Sym>> {
    let site = Site::caller();
    let Some(first) = targets.first().or(sources.first()) else {
        return Vec::new();
    };
    let tracer = first.graph();
    match vjp_of_values_impl(&tracer, targets, sources, cotangents, recorded, &site) {
        Ok(Some((here, grads))) => grads
            .into_iter()
            .map(|g| g.map(|v| here.syms(&[v]).remove(0)))
            .collect(),
        Ok(None) => vec![None; sources.len()],
        Err(e) => {
            tracer.record(e);
            vec![None; sources.len()]
        }
    }
}

type ValuesVjp = Option<(Tracer, Vec<Option<ValueId>>)>;

fn vjp_of_values_impl(
    tracer: &Tracer,
    targets: &[Sym],
    sources: &[Sym],
    cotangents: &[Sym],
    recorded: &Recorded,
    site: &Site,
) -> Result<ValuesVjp, Error> {
    let refs: Vec<&Sym> = targets.iter().chain(sources).chain(cotangents).collect();
    let Some((here, vs)) = tracer.operands(&refs, "gradient", site)? else {
        return Ok(None);
    };
    // The values the tape did not record, of the trace the gradient is in.
    let mut unrecorded: HashSet<ValueId> = HashSet::new();
    for s in &recorded.unrecorded {
        if let Some(v) = here.own_value(s) {
            unrecorded.insert(v);
        }
    }
    let outside = |v: ValueId| {
        (recorded.spans.as_ref())
            .is_some_and(|spans| !spans.iter().any(|&(a, b)| (a..b).contains(&v.index())))
    };
    let constant = |v: ValueId| outside(v) || unrecorded.contains(&v);
    let (tv, rest) = vs.split_at(targets.len());
    let (sv, cv) = rest.split_at(sources.len());
    let g = here.graph_ref(|g| g.clone());
    let mut result: Vec<Option<ValueId>> = vec![None; sv.len()];
    // Parameters in one gradient; each other source in a gradient of its
    // own (starting at it, so paths from a parameter through it still
    // count for the parameter): every source gets its total derivative.
    let param_of = |v: &ValueId| {
        if let Op::Parameter { index } = g.producer(*v).op {
            Some(index)
        } else {
            None
        }
    };
    let mut groups: Vec<(Option<ValueId>, Vec<usize>)> = Vec::new();
    let in_params: Vec<usize> = (0..sv.len())
        .filter(|&k| param_of(&sv[k]).is_some())
        .collect();
    if !in_params.is_empty() {
        groups.push((None, in_params));
    }
    for (k, s) in sv.iter().enumerate() {
        if param_of(s).is_some() {
            continue;
        }
        match groups.iter_mut().find(|(c, _)| *c == Some(*s)) {
            Some((_, ks)) => ks.push(k),
            None => groups.push((Some(*s), vec![k])),
        }
    }
    for (cut, ks) in groups {
        let starts: Vec<ValueId> = match cut {
            Some(c) => vec![c],
            None => ks.iter().map(|&k| sv[k]).collect(),
        };
        let grads = values_vjp(&here, &g, &starts, tv, cv, &constant, site)?;
        for &k in &ks {
            let j = starts.iter().position(|v| *v == sv[k]).unwrap_or(0);
            result[k] = grads[j];
        }
    }
    Ok(Some((here, result)))
}

/// Removes the nodes of a gradient's active part that no target needs; a
/// needed stateful node would run again in the gradient: an error naming
/// it, except a custom gradient whose forward values are given (its
/// effects are in its gradient, which runs once).
fn prune_active(h: &mut Graph) -> Result<(), Error> {
    let mut live = vec![false; h.num_values()];
    for o in h.outputs() {
        live[o.value.index()] = true;
    }
    let mut keep = vec![false; h.nodes().len()];
    for id in h.node_ids().rev() {
        let n = h.node(id);
        let param = matches!(n.op, Op::Parameter { .. });
        if !param && !n.results.iter().any(|r| live[r.index()]) {
            continue;
        }
        let given = if let Op::CustomVjp { body, .. } = &n.op {
            body.graph()
                .nodes()
                .iter()
                .all(|b| b.effect == Effect::Pure)
        } else {
            false
        };
        if n.effect == Effect::Stateful && !param && !given {
            // A callback there is a function of a source: not
            // differentiable, whatever its effects (making it stateless
            // would only lead to that error).
            let message = if let Op::Callback(c) = &n.op {
                format!(
                    "this {} lies between a source and a target of the gradient, and it is not differentiable (its body is opaque to tensorlift): give it a gradient with custom_vjp (tl.custom_gradient in Python), or apply stop_gradient to its operands",
                    c.kind.name()
                )
            } else {
                "a gradient taken inside a function would run this stateful node again: make it stateless or give it a custom gradient (custom_vjp; tl.custom_gradient in Python)".into()
            };
            return Err(Error::InvalidArgument(Detail {
                message,
                node: Some(h.node_ref(id)),
                pos: None,
            }));
        }
        keep[id.index()] = true;
        for i in &n.inputs {
            live[i.index()] = true;
        }
    }
    h.retain_nodes(&keep);
    Ok(())
}

/// One gradient of `g`'s targets `tv` (cotangents `cv`) with respect to
/// its values `starts`, inlined into `here`: per start, its cotangent, or
/// `None` when no target depends on it. The gradient differentiates the
/// part of `g` that depends on the starts (starts and the other values it
/// reads become its parameters), so nothing else is recomputed.
fn values_vjp(
    here: &Tracer,
    g: &Graph,
    starts: &[ValueId],
    tv: &[ValueId],
    cv: &[ValueId],
    constant: &dyn Fn(ValueId) -> bool,
    site: &Site,
) -> Result<Vec<Option<ValueId>>, Error> {
    // Callbacks keep the bindings they have in the trace's graph.
    let mut h = Graph::new(format!("{}_gradient", g.name));
    let mut active = vec![false; g.num_values()];
    let mut map: Vec<Option<ValueId>> = vec![None; g.num_values()];
    // The values of `g` each parameter of `h` takes.
    let mut args: Vec<ValueId> = Vec::new();
    for s in starts {
        let name = h.fresh_name(&format!("source_{}", g.producer(*s).name));
        let p = h.add_parameter(args.len(), g.ty(*s).clone(), Some(name), site.clone())?;
        map[s.index()] = Some(p);
        active[s.index()] = true;
        args.push(*s);
    }
    for node in g.nodes() {
        if node.results.iter().any(|r| starts.contains(r))
            || matches!(node.op, Op::Parameter { .. })
            || !node.inputs.iter().any(|v| active[v.index()])
            || node.results.iter().all(|r| constant(*r))
        {
            continue;
        }
        let mut inputs = Vec::with_capacity(node.inputs.len());
        for v in &node.inputs {
            let mapped = match map[v.index()] {
                Some(m) => m,
                None => {
                    // A value the gradient reads but that does not depend
                    // on the starts: taken from `g` as it is.
                    // (Named and sited after the node that made it: errors
                    // about it point there, not at the gradient's line.)
                    let made = g.producer(*v);
                    let name = h.fresh_name(&format!("value_{}", made.name));
                    let p = h.add_parameter(
                        args.len(),
                        g.ty(*v).clone(),
                        Some(name),
                        made.site.clone(),
                    )?;
                    args.push(*v);
                    map[v.index()] = Some(p);
                    p
                }
            };
            inputs.push(mapped);
        }
        let mut op = node.op.clone();
        if let Op::CustomVjp { inputs: n, vjp, .. } = &node.op
            && node.effect == Effect::Stateful
        {
            // A custom gradient whose body has effects (a callback): its
            // forward values are taken from the trace instead of run
            // again, and its gradient is its own.
            let (k, ny) = (inputs.len(), node.results.len());
            for r in &node.results {
                let name = h.fresh_name(&format!("value_{}", node.name));
                let p = h.add_parameter(args.len(), g.ty(*r).clone(), Some(name), site.clone())?;
                args.push(*r);
                inputs.push(p);
            }
            let operand_types: Vec<TensorType> = inputs.iter().map(|v| h.ty(*v).clone()).collect();
            let result_types: Vec<TensorType> =
                node.results.iter().map(|r| g.ty(*r).clone()).collect();
            let body = tensorlift_ir::builder::region(
                &format!("{}_given", node.name),
                &operand_types,
                site,
                |_, p| Ok(p[k..k + ny].to_vec()),
            )?;
            let mut vtypes = operand_types.clone();
            vtypes.extend(result_types.iter().cloned());
            vtypes.extend(
                (result_types.iter())
                    .filter(|t| tensorlift_ir::autodiff::is_differentiable(t.dtype))
                    .cloned(),
            );
            let vjp = tensorlift_ir::builder::region(
                &format!("{}_given_vjp", node.name),
                &vtypes,
                site,
                |r, p| {
                    let mut a = p[..k].to_vec();
                    a.extend(&p[k + ny..]);
                    tensorlift_ir::autodiff::inline(r, vjp.graph(), &a, "")
                },
            )?;
            op = Op::CustomVjp {
                inputs: *n,
                body: tensorlift_ir::Region::new(body),
                vjp: tensorlift_ir::Region::new(vjp),
            };
        }
        let declared = (op.has_declared_types())
            .then(|| (node.results.iter()).map(|r| g.ty(*r).clone()).collect());
        let id = h.add_node(tensorlift_ir::NewNode {
            op,
            inputs,
            name: Some(node.name.clone()),
            site: node.site.clone(),
            effect: node.effect,
            result_types: declared,
        })?;
        for (r, hr) in node.results.iter().zip(h.node(id).results.clone()) {
            active[r.index()] = true;
            map[r.index()] = Some(hr);
        }
    }
    let mut cts = Vec::new();
    for (k, t) in tv.iter().enumerate() {
        if active[t.index()]
            && let Some(m) = map[t.index()]
        {
            h.add_output(m, format!("target_{k}"))?;
            cts.push(cv[k]);
        }
    }
    if cts.is_empty() {
        return Ok(vec![None; starts.len()]);
    }
    prune_active(&mut h)?;
    // Which starts the targets depend on.
    let hp = h.params();
    let connected: Vec<bool> = (0..starts.len())
        .map(|i| {
            let mut d = vec![false; h.num_values()];
            d[hp[i].index()] = true;
            for n in h.nodes() {
                if n.inputs.iter().any(|v| d[v.index()]) {
                    for r in &n.results {
                        d[r.index()] = true;
                    }
                }
            }
            h.outputs().iter().any(|o| d[o.value.index()])
        })
        .collect();
    let wrt: Vec<usize> = (0..starts.len()).filter(|&i| connected[i]).collect();
    if wrt.is_empty() {
        return Ok(vec![None; starts.len()]);
    }
    let outputs = h.outputs().len();
    let v = tensorlift_ir::autodiff::vjp(&h, &wrt)?;
    args.extend(cts);
    let name = here.graph_mut(|gr| gr.fresh_name("gradient"));
    let out =
        here.graph_mut(|dst| tensorlift_ir::autodiff::inline(dst, &v, &args, &format!("{name}/")))?;
    let grads = &out[outputs..];
    Ok((0..starts.len())
        .map(|i| wrt.iter().position(|w| *w == i).map(|j| grads[j]))
        .collect())
}
