//! Tracing: symbolic values (`Sym`) record ops into a graph as a Rust
//! closure runs over them. Operators are overloaded so graph code reads like
//! math; every op records its creation site with `#[track_caller]`.
//!
//! Operators cannot return `Result`, so a traced op that is ill-typed
//! records the first error (with op, node name and site) and yields a
//! poisoned value; [`crate::Function`] reports that error when tracing ends.

use std::any::TypeId;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::{Rc, Weak};
use std::sync::Arc;

use tensorlift_ir::builder::{self, Elementwise};
use tensorlift_ir::{
    BinaryOp, CallbackKind, CallbackOp, CmpOp, Combiner, DType, Detail, DotDims, Effect, Error,
    Graph, Literal, NewNode, NodeRef, Op, ReduceOp, Shape, Site, TensorType, UnaryOp, ValueId,
};
use tensorlift_runtime::callback::HostCallback;
use tensorlift_runtime::{Tensor, TensorMut, TensorRef};

/// One trace: a function's graph, or a region (loop body, branch) being
/// traced inside another trace.
struct Ctx {
    graph: RefCell<Graph>,
    /// The first error (recorded on the outermost trace only).
    error: RefCell<Option<Error>>,
    /// The target each callable was bound under, by identity (see
    /// [`CallableId`]): tracing the same callable again reuses it, so CSE
    /// can merge stateless calls.
    targets: RefCell<HashMap<CallableKey, String>>,
    /// The trace this region is traced inside (`None` for a function).
    parent: Option<Rc<Ctx>>,
    /// The region being traced inside this trace right now: ops recorded
    /// while it is open go there, whichever values they start from.
    active: RefCell<Weak<Ctx>>,
    /// Values of enclosing traces used in this region, in parameter order:
    /// (the value in the parent trace, the parameter standing for it here).
    captures: RefCell<Vec<(ValueId, ValueId)>>,
    /// The index of the next parameter.
    next_param: Cell<usize>,
    /// Prefix of the callback targets bound here (`while/body/`), so that
    /// targets are unique across a function and its regions.
    prefix: String,
    /// True once the region's tracing has ended.
    closed: Cell<bool>,
}

impl Ctx {
    fn new(name: &str, parent: Option<Rc<Ctx>>, prefix: String) -> Self {
        Ctx {
            graph: RefCell::new(Graph::new(name)),
            error: RefCell::new(None),
            targets: RefCell::new(HashMap::new()),
            parent,
            active: RefCell::new(Weak::new()),
            captures: RefCell::new(Vec::new()),
            next_param: Cell::new(0),
            prefix,
            closed: Cell::new(false),
        }
    }
}

/// The trace ops on `ctx`'s values are recorded in now: the innermost
/// region open inside it.
fn innermost(ctx: &Rc<Ctx>) -> Rc<Ctx> {
    let mut c = ctx.clone();
    loop {
        let next = c.active.borrow().upgrade();
        match next {
            Some(n) => c = n,
            None => return c,
        }
    }
}

/// `v` of trace `owner` as a value of trace `target`: itself when they are
/// the same, a parameter of `target` standing for it (a capture, made once
/// per value) when `owner` encloses `target`, `None` otherwise.
fn value_in(target: &Rc<Ctx>, owner: &Rc<Ctx>, v: ValueId, site: &Site) -> Option<ValueId> {
    if Rc::ptr_eq(target, owner) {
        return Some(v);
    }
    let parent = target.parent.as_ref()?;
    let pv = value_in(parent, owner, v, site)?;
    if let Some((_, local)) = target.captures.borrow().iter().find(|(p, _)| *p == pv) {
        return Some(*local);
    }
    let (ty, name) = {
        let pg = parent.graph.borrow();
        (pg.ty(pv).clone(), pg.producer(pv).name.clone())
    };
    let index = target.next_param.get();
    let mut g = target.graph.borrow_mut();
    let name = g.fresh_name(&format!("captured_{name}"));
    let local = g.add_parameter(index, ty, Some(name), site.clone()).ok()?;
    target.next_param.set(index + 1);
    target.captures.borrow_mut().push((pv, local));
    Some(local)
}

/// What makes two traced callbacks the same callable: who made it, the
/// callable's identity, and the declared result types.
type CallableKey = (CallbackKind, CallableId, Vec<TensorType>);

/// The identity of a callable. Two callback nodes share a binding (and so
/// may be merged by CSE when stateless) only when their callables have the
/// same identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum CallableId {
    /// A Rust function or closure that captures nothing: its type is the
    /// function.
    Type(TypeId),
    /// A shared callable: the address of its `Arc` (or Python object), kept
    /// alive by the binding for as long as the graph lives.
    Address(usize),
    /// Nothing is known to be the same: never shared.
    Unique,
}

impl CallableId {
    /// The identity of a Rust closure or function passed by value.
    fn of<F: 'static>(_: &F) -> Self {
        if std::mem::size_of::<F>() == 0 {
            CallableId::Type(TypeId::of::<F>())
        } else {
            CallableId::Unique
        }
    }
}

/// A Rust callback body that can be traced many times as one callable
/// ([`Tracer::host_fn_shared`]): every call site tracing the same `Arc`
/// binds the same callable, so stateless calls on the same operands merge.
pub type HostFnArc = Arc<dyn Fn(&[Tensor]) -> Result<Vec<Tensor>, Error> + Send + Sync>;

/// A handle on the graph being traced: makes constants and other values
/// that have no operand to hang off. Get one with [`Sym::tracer`].
#[derive(Clone)]
pub struct Tracer {
    ctx: Rc<Ctx>,
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tracer")
    }
}

/// A symbolic tensor inside a traced function.
#[derive(Clone)]
pub struct Sym {
    ctx: Rc<Ctx>,
    v: Option<ValueId>,
}

impl std::fmt::Debug for Sym {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.ty() {
            Some(t) => write!(f, "Sym({t})"),
            None => f.write_str("Sym(<error>)"),
        }
    }
}

thread_local! {
    /// The traces under way on this thread, innermost last.
    static ACTIVE: RefCell<Vec<Tracer>> = const { RefCell::new(Vec::new()) };
}

/// Ends a trace's time as the active one when dropped.
pub(crate) struct Activation(());

impl Drop for Activation {
    fn drop(&mut self) {
        ACTIVE.with(|a| a.borrow_mut().pop());
    }
}

impl Tracer {
    /// The trace under way on this thread, if any: the innermost function
    /// being traced (a front end makes constants in it, also in a function
    /// without inputs).
    pub fn active() -> Option<Tracer> {
        ACTIVE.with(|a| a.borrow().last().cloned())
    }

    /// Makes this trace the active one until the result is dropped.
    pub(crate) fn activate(&self) -> Activation {
        ACTIVE.with(|a| a.borrow_mut().push(self.clone()));
        Activation(())
    }

    pub(crate) fn new(name: &str) -> Self {
        Tracer {
            ctx: Rc::new(Ctx::new(name, None, String::new())),
        }
    }

    pub(crate) fn parameter(
        &self,
        index: usize,
        ty: TensorType,
        name: Option<String>,
        site: Site,
    ) -> Sym {
        let r = self
            .ctx
            .graph
            .borrow_mut()
            .add_parameter(index, ty, name, site);
        self.wrap(r)
    }

    /// Ends tracing: the graph with `outputs`, or the first recorded error.
    pub(crate) fn finish(self, outputs: Vec<Sym>) -> Result<Graph, Error> {
        if let Some(e) = self.ctx.error.borrow_mut().take() {
            return Err(e);
        }
        let mut values = Vec::with_capacity(outputs.len());
        for (i, o) in outputs.iter().enumerate() {
            if !Rc::ptr_eq(&o.ctx, &self.ctx) {
                return Err(Error::invalid(format!(
                    "output {i} was not traced by this function"
                )));
            }
            values.push(
                o.v.ok_or_else(|| Error::internal("poisoned output without a recorded error"))?,
            );
        }
        let mut g = self.ctx.graph.replace(Graph::new(""));
        for (i, v) in values.into_iter().enumerate() {
            g.add_output(v, format!("output_{i}"))?;
        }
        Ok(g)
    }

    /// Fails the trace with `e` (the first error recorded wins): the
    /// function's tracing returns it. For front ends whose body failed in a
    /// way the tracer cannot see (a Python exception).
    pub fn fail(&self, e: Error) {
        self.record(e);
    }

    pub(crate) fn record(&self, e: Error) {
        let mut root = &self.ctx;
        while let Some(p) = &root.parent {
            root = p;
        }
        let mut slot = root.error.borrow_mut();
        if slot.is_none() {
            *slot = Some(e);
        }
    }

    /// Opens a region named `name` inside the trace ops go to now, with
    /// `params` parameters to come: until it is closed, every op is
    /// recorded in it.
    pub(crate) fn open_region(&self, name: &str, params: usize) -> Tracer {
        let parent = innermost(&self.ctx);
        let prefix = format!("{}{name}/", parent.prefix);
        let child = Rc::new(Ctx::new(name, Some(parent.clone()), prefix));
        child.next_param.set(params);
        *parent.active.borrow_mut() = Rc::downgrade(&child);
        Tracer { ctx: child }
    }

    /// Ends the region this tracer traces, returning `outs`: its graph and
    /// the values of the enclosing trace it captured (in parameter order),
    /// or `None` when an error was recorded while tracing it.
    pub(crate) fn close_region(
        &self,
        outs: &[Sym],
        site: &Site,
    ) -> Result<Option<(Graph, Vec<ValueId>)>, Error> {
        let mut values = Vec::with_capacity(outs.len());
        let mut failure = None;
        for (i, o) in outs.iter().enumerate() {
            match o.v.map(|v| value_in(&self.ctx, &o.ctx, v, site)) {
                Some(Some(v)) => values.push(v),
                Some(None) => {
                    failure = Some(Error::InvalidArgument(Detail {
                        message: format!(
                            "result {i} of '{}' was not traced in it or around it",
                            self.ctx.graph.borrow().name
                        ),
                        node: None,
                        pos: None,
                    }));
                    break;
                }
                None => break,
            }
        }
        if let Some(parent) = &self.ctx.parent {
            *parent.active.borrow_mut() = Weak::new();
        }
        self.ctx.closed.set(true);
        if let Some(e) = failure {
            return Err(e);
        }
        if values.len() != outs.len() || self.failed() {
            return Ok(None);
        }
        let mut g = self.ctx.graph.replace(Graph::new(""));
        for (i, v) in values.into_iter().enumerate() {
            g.add_output(v, format!("out{i}"))?;
        }
        let captures = self.ctx.captures.borrow().iter().map(|(p, _)| *p).collect();
        Ok(Some((g, captures)))
    }

    /// Runs `f` on this trace's graph.
    pub(crate) fn graph_mut<T>(&self, f: impl FnOnce(&mut Graph) -> T) -> T {
        f(&mut self.ctx.graph.borrow_mut())
    }

    /// Runs `f` on this trace's graph, reading.
    pub(crate) fn graph_ref<T>(&self, f: impl FnOnce(&Graph) -> T) -> T {
        f(&self.ctx.graph.borrow())
    }

    /// `s`'s value when it is one of this trace's own (not of an enclosing
    /// or another trace).
    pub(crate) fn own_value(&self, s: &Sym) -> Option<ValueId> {
        (Rc::ptr_eq(&self.ctx, &s.ctx)).then_some(s.v).flatten()
    }

    /// How many values the trace ops go to now (a region open inside this
    /// one, or this one) holds: where a gradient tape's recording begins or
    /// ends ([`crate::control::Recorded::spans`]).
    #[doc(hidden)]
    pub fn position(&self) -> usize {
        self.current().graph_ref(|g| g.num_values())
    }

    /// Values of this trace as symbols.
    pub(crate) fn syms(&self, vs: &[ValueId]) -> Vec<Sym> {
        vs.iter()
            .map(|v| Sym {
                ctx: self.ctx.clone(),
                v: Some(*v),
            })
            .collect()
    }

    /// `n` poisoned values of the trace ops go to now.
    pub(crate) fn current_poisoned(&self, n: usize) -> Vec<Sym> {
        self.current().poisoned(n)
    }

    /// The first error recorded in this trace, if any (a front end raises
    /// it at the line that caused it).
    pub fn error(&self) -> Option<Error> {
        let mut root = &self.ctx;
        while let Some(p) = &root.parent {
            root = p;
        }
        root.error.borrow().clone()
    }

    /// The target of the callback added last to the graph ops go to now
    /// (a front end keeps its own table of the callables it bound, e.g. to
    /// pickle a function as its graph text plus its callbacks).
    pub fn last_callback_target(&self) -> Option<String> {
        let current = self.current();
        let g = current.ctx.graph.borrow();
        g.node_ids().rev().find_map(|id| {
            if let Op::Callback(c) = &g.node(id).op {
                Some(c.target.clone())
            } else {
                None
            }
        })
    }

    /// True when an error has been recorded.
    fn failed(&self) -> bool {
        let mut root = &self.ctx;
        while let Some(p) = &root.parent {
            root = p;
        }
        root.error.borrow().is_some()
    }

    /// The trace ops are recorded in now (a region open inside this one,
    /// or this one).
    fn current(&self) -> Tracer {
        Tracer {
            ctx: innermost(&self.ctx),
        }
    }

    fn wrap(&self, r: Result<ValueId, Error>) -> Sym {
        match r {
            Ok(v) => Sym {
                ctx: self.ctx.clone(),
                v: Some(v),
            },
            Err(e) => {
                self.record(e);
                Sym {
                    ctx: self.ctx.clone(),
                    v: None,
                }
            }
        }
    }

    /// The values of `inputs` in the trace ops are recorded in now (values
    /// of enclosing traces become captures of the region being traced),
    /// and that trace. `Ok(None)` when an input is poisoned.
    pub(crate) fn operands(
        &self,
        inputs: &[&Sym],
        op: &str,
        site: &Site,
    ) -> Result<Option<(Tracer, Vec<ValueId>)>, Error> {
        let target = self.current();
        let fail = |message: String| {
            Error::InvalidArgument(Detail {
                message,
                node: Some(NodeRef {
                    name: op.into(),
                    op: op.into(),
                    site: site.clone(),
                }),
                pos: None,
            })
        };
        if target.ctx.closed.get() {
            return Err(fail(
                "this value was traced inside a loop body or branch that has ended; return it from the body or branch instead".into(),
            ));
        }
        let mut vs = Vec::with_capacity(inputs.len());
        for (i, s) in inputs.iter().enumerate() {
            let Some(v) = s.v else { return Ok(None) };
            match value_in(&target.ctx, &s.ctx, v, site) {
                Some(local) => vs.push(local),
                None if s.ctx.closed.get() => {
                    return Err(fail(format!(
                        "operand {i} was traced inside a loop body or branch that has ended; return it from the body or branch instead"
                    )));
                }
                None => {
                    return Err(fail(format!(
                        "operand {i} belongs to another traced function"
                    )));
                }
            }
        }
        Ok(Some((target, vs)))
    }

    fn add(&self, op: Op, inputs: &[&Sym], site: Site) -> Sym {
        match self.operands(inputs, &op.name(), &site) {
            Ok(Some((t, vs))) => {
                let r = t.ctx.graph.borrow_mut().add(op, &vs, site);
                t.wrap(r)
            }
            Ok(None) => self.current().poisoned(1).remove(0),
            Err(e) => self.current().wrap(Err(e)),
        }
    }

    /// Runs an IR builder function over `inputs`' values (nothing when one
    /// of them is poisoned), recording its error if it fails; `op` (the
    /// op's text name) names it in an error about the inputs themselves.
    fn build(
        &self,
        inputs: &[&Sym],
        op: &str,
        site: &Site,
        f: impl FnOnce(&mut Graph, &[ValueId]) -> Result<ValueId, Error>,
    ) -> Sym {
        match self.operands(inputs, op, site) {
            Ok(Some((t, vs))) => {
                let r = f(&mut t.ctx.graph.borrow_mut(), &vs);
                t.wrap(r)
            }
            Ok(None) => self.current().poisoned(1).remove(0),
            Err(e) => self.current().wrap(Err(e)),
        }
    }

    /// A constant holding `t`'s data.
    #[track_caller]
    pub fn constant(&self, t: &Tensor) -> Sym {
        self.add(Op::Constant(t.to_literal()), &[], Site::caller())
    }

    /// A scalar constant of `dtype` (integers must be whole numbers in range).
    #[track_caller]
    pub fn scalar(&self, dtype: DType, value: f64) -> Sym {
        let site = Site::caller();
        self.scalar_at(dtype, value, site)
    }

    pub(crate) fn scalar_at(&self, dtype: DType, value: f64, site: Site) -> Sym {
        self.literal_at(Literal::scalar(dtype, value), site)
    }

    /// A scalar constant of `dtype` from a Rust integer, exact in an
    /// integer `dtype` ([`Literal::scalar_int`]).
    pub(crate) fn int_at(&self, dtype: DType, value: i128, site: Site) -> Sym {
        self.literal_at(Literal::scalar_int(dtype, value), site)
    }

    fn literal_at(&self, literal: tensorlift_ir::Result<Literal>, site: Site) -> Sym {
        match literal {
            Ok(l) => self.add(Op::Constant(l), &[], site),
            Err(e) => {
                let e = e.at_node(NodeRef {
                    name: "constant".into(),
                    op: "constant".into(),
                    site,
                });
                self.wrap(Err(e))
            }
        }
    }

    /// A Rust callback (`host_fn`): `f` receives one tensor per input and
    /// returns one tensor per `tout` dtype (view them as ndarrays with
    /// [`Tensor::array_view`]). Outputs have unknown shape unless declared
    /// with `output_shapes` or [`Sym::set_shape`]. `stateful` callbacks are
    /// never merged or removed and run once per call, in program order;
    /// stateless ones may be merged, dropped when unused, and evaluated at
    /// compile time when all inputs are constants.
    #[track_caller]
    pub fn host_fn(
        &self,
        f: impl Fn(&[Tensor]) -> Result<Vec<Tensor>, Error> + Send + Sync + 'static,
        inputs: &[&Sym],
        tout: &[DType],
        stateful: bool,
    ) -> Vec<Sym> {
        self.callback(
            CallbackSpec {
                kind: CallbackKind::HostFn,
                id: CallableId::of(&f),
                name: None,
                tout,
                output_shapes: None,
                stateful,
            },
            inputs,
            f,
            Site::caller(),
        )
    }

    /// [`Tracer::host_fn`] with a name (used for the node and the binding)
    /// and declared output shapes.
    #[track_caller]
    pub fn host_fn_with(
        &self,
        name: &str,
        f: impl Fn(&[Tensor]) -> Result<Vec<Tensor>, Error> + Send + Sync + 'static,
        inputs: &[&Sym],
        tout: &[DType],
        output_shapes: &[Shape],
        stateful: bool,
    ) -> Vec<Sym> {
        let spec = CallbackSpec {
            kind: CallbackKind::HostFn,
            id: CallableId::of(&f),
            name: Some(name),
            tout,
            output_shapes: Some(output_shapes),
            stateful,
        };
        self.callback(spec, inputs, f, Site::caller())
    }

    /// [`Tracer::host_fn`] over a shared callable: every call tracing the
    /// same `Arc` binds one callable, so stateless calls of it on the same
    /// operands (with the same declared types) are merged by CSE. (A
    /// closure passed to [`Tracer::host_fn`] by value is one callable only
    /// when it captures nothing, e.g. a plain `fn`.)
    #[track_caller]
    pub fn host_fn_shared(
        &self,
        f: &HostFnArc,
        inputs: &[&Sym],
        tout: &[DType],
        stateful: bool,
    ) -> Vec<Sym> {
        self.shared(None, f, inputs, tout, None, stateful, Site::caller())
    }

    /// [`Tracer::host_fn_shared`] with a name and declared output shapes.
    #[track_caller]
    pub fn host_fn_shared_with(
        &self,
        name: &str,
        f: &HostFnArc,
        inputs: &[&Sym],
        tout: &[DType],
        output_shapes: &[Shape],
        stateful: bool,
    ) -> Vec<Sym> {
        let shapes = Some(output_shapes);
        self.shared(
            Some(name),
            f,
            inputs,
            tout,
            shapes,
            stateful,
            Site::caller(),
        )
    }

    #[allow(
        clippy::too_many_arguments,
        reason = "internal plumbing of the two host_fn_shared entry points"
    )]
    fn shared(
        &self,
        name: Option<&str>,
        f: &HostFnArc,
        inputs: &[&Sym],
        tout: &[DType],
        output_shapes: Option<&[Shape]>,
        stateful: bool,
        site: Site,
    ) -> Vec<Sym> {
        let spec = CallbackSpec {
            kind: CallbackKind::HostFn,
            id: CallableId::Address(Arc::as_ptr(f) as *const () as usize),
            name,
            tout,
            output_shapes,
            stateful,
        };
        let f = f.clone();
        self.callback(spec, inputs, move |ins: &[Tensor]| f(ins), site)
    }

    /// A Rust callback that fills its outputs in place (`host_fn_into`):
    /// `f` reads one borrowed [`TensorRef`] per input and writes one
    /// [`TensorMut`] per `tout` dtype, each of the static shape declared in
    /// `output_shapes` (the runtime provides them, zeroed). In
    /// compiled code this is the cheapest way out of native code: the views
    /// point straight into the program's buffers, and nothing is allocated
    /// or copied per call. String inputs and outputs are not allowed (use
    /// [`Tracer::host_fn`]). Effects as [`Tracer::host_fn`].
    #[track_caller]
    pub fn host_fn_into(
        &self,
        name: &str,
        f: impl Fn(&[TensorRef<'_>], &mut [TensorMut<'_>]) -> Result<(), Error> + Send + Sync + 'static,
        inputs: &[&Sym],
        tout: &[DType],
        output_shapes: &[&[usize]],
        stateful: bool,
    ) -> Vec<Sym> {
        let site = Site::caller();
        let kind = CallbackKind::HostFn;
        let fail = |message: String| {
            self.record(Error::InvalidArgument(Detail {
                message,
                node: Some(NodeRef {
                    name: name.into(),
                    op: "host_fn_into".into(),
                    site: site.clone(),
                }),
                pos: None,
            }));
            self.poisoned(tout.len())
        };
        if output_shapes.len() != tout.len() {
            return fail(format!(
                "host_fn_into output_shapes has {} entries, but Tout has {}",
                output_shapes.len(),
                tout.len()
            ));
        }
        if tout.contains(&DType::String) {
            return fail("host_fn_into outputs cannot be strings (use host_fn)".into());
        }
        let string_input = inputs.iter().position(|s| s.dtype() == Some(DType::String));
        if let Some(i) = string_input {
            return fail(format!(
                "host_fn_into input {i} is a string tensor (use host_fn)"
            ));
        }
        let shapes: Vec<Shape> = output_shapes.iter().map(|d| Shape::known(d)).collect();
        let spec = CallbackSpec {
            kind,
            id: CallableId::of(&f),
            name: Some(name),
            tout,
            output_shapes: Some(&shapes),
            stateful,
        };
        self.callback_with(spec, inputs, HostCallback::buffers(kind, f), site)
    }

    /// `tf.numpy_function`: calls the Python callable `func` with one NumPy
    /// array per input; it returns one array (or a scalar/list, converted
    /// to the declared dtype), a list/tuple of them, or None for an empty
    /// `tout`. Runs in interpreted and compiled code; takes the GIL only
    /// for the call.
    #[cfg(feature = "python")]
    #[track_caller]
    pub fn numpy_function(
        &self,
        func: pyo3::Py<pyo3::PyAny>,
        inputs: &[&Sym],
        tout: &[DType],
        stateful: bool,
    ) -> Vec<Sym> {
        self.python_callback(
            CallbackKind::NumpyFunction,
            None,
            func,
            inputs,
            tout,
            None,
            stateful,
            Site::caller(),
        )
    }

    /// `tf.compat.v1.py_func`: the TF1 name of [`Tracer::numpy_function`],
    /// same semantics.
    #[cfg(feature = "python")]
    #[track_caller]
    pub fn py_func(
        &self,
        func: pyo3::Py<pyo3::PyAny>,
        inputs: &[&Sym],
        tout: &[DType],
        stateful: bool,
    ) -> Vec<Sym> {
        self.python_callback(
            CallbackKind::PyFunc,
            None,
            func,
            inputs,
            tout,
            None,
            stateful,
            Site::caller(),
        )
    }

    /// `tf.py_function`: calls the Python callable `func` with eager
    /// `tensorlift.Tensor` objects (operators, `abs`, `.numpy()`, `.shape`,
    /// `.dtype`, `__array__`; `import tensorlift as tl` gives `tl.abs`,
    /// `tl.math.log`, ...). Runs in interpreted mode only: under
    /// `jit_compile=true` it is a compile-time `JitIncompatible` error.
    /// Always stateful, as in TensorFlow.
    #[cfg(feature = "python")]
    #[track_caller]
    pub fn py_function(
        &self,
        func: pyo3::Py<pyo3::PyAny>,
        inputs: &[&Sym],
        tout: &[DType],
    ) -> Vec<Sym> {
        self.py_function_at(None, func, inputs, tout, Site::caller())
    }

    /// [`Tracer::py_function`] with a name (TensorFlow's `name=`): the
    /// node's, and the one its errors give the callback.
    #[cfg(feature = "python")]
    #[track_caller]
    pub fn py_function_with(
        &self,
        name: &str,
        func: pyo3::Py<pyo3::PyAny>,
        inputs: &[&Sym],
        tout: &[DType],
    ) -> Vec<Sym> {
        self.py_function_at(Some(name), func, inputs, tout, Site::caller())
    }

    /// [`Tracer::py_function_with`] for a call that ran already, traced
    /// again for its gradient (the Python package's tape replays an eager
    /// call this way): stateless, so that a gradient which does not read
    /// its result drops it instead of running the function again.
    #[cfg(feature = "python")]
    #[doc(hidden)]
    #[track_caller]
    pub fn py_function_replayed(
        &self,
        name: Option<&str>,
        func: pyo3::Py<pyo3::PyAny>,
        inputs: &[&Sym],
        tout: &[DType],
    ) -> Vec<Sym> {
        self.py_function_stateful(name, func, inputs, tout, Site::caller(), false)
    }

    #[cfg(feature = "python")]
    fn py_function_at(
        &self,
        name: Option<&str>,
        func: pyo3::Py<pyo3::PyAny>,
        inputs: &[&Sym],
        tout: &[DType],
        site: Site,
    ) -> Vec<Sym> {
        self.py_function_stateful(name, func, inputs, tout, site, true)
    }

    #[cfg(feature = "python")]
    fn py_function_stateful(
        &self,
        name: Option<&str>,
        func: pyo3::Py<pyo3::PyAny>,
        inputs: &[&Sym],
        tout: &[DType],
        site: Site,
        stateful: bool,
    ) -> Vec<Sym> {
        let spec = CallbackSpec {
            kind: CallbackKind::PyFunction,
            id: CallableId::Address(func.as_ptr() as usize),
            name,
            tout,
            output_shapes: None,
            stateful,
        };
        let body = tensorlift_runtime::eager::py_function_callback(
            func,
            tout.to_vec(),
            name.unwrap_or("py_function").into(),
        );
        self.callback_with(spec, inputs, body, site)
    }

    /// [`Tracer::numpy_function`] (or `py_func`, by `kind`) with a name and
    /// declared output shapes.
    #[cfg(feature = "python")]
    #[track_caller]
    #[allow(
        clippy::too_many_arguments,
        reason = "mirrors TensorFlow's signature plus a name and shapes"
    )]
    pub fn numpy_function_with(
        &self,
        kind: CallbackKind,
        name: &str,
        func: pyo3::Py<pyo3::PyAny>,
        inputs: &[&Sym],
        tout: &[DType],
        output_shapes: &[Shape],
        stateful: bool,
    ) -> Vec<Sym> {
        self.python_callback(
            kind,
            Some(name),
            func,
            inputs,
            tout,
            Some(output_shapes),
            stateful,
            Site::caller(),
        )
    }

    #[cfg(feature = "python")]
    #[allow(
        clippy::too_many_arguments,
        reason = "internal plumbing of the three public entry points"
    )]
    fn python_callback(
        &self,
        kind: CallbackKind,
        name: Option<&str>,
        func: pyo3::Py<pyo3::PyAny>,
        inputs: &[&Sym],
        tout: &[DType],
        output_shapes: Option<&[Shape]>,
        stateful: bool,
        site: Site,
    ) -> Vec<Sym> {
        let spec = CallbackSpec {
            kind,
            id: CallableId::Address(func.as_ptr() as usize),
            name,
            tout,
            output_shapes,
            stateful,
        };
        let label = name.unwrap_or(kind.name()).to_string();
        let body = tensorlift_runtime::python::numpy_callback(kind, func, tout.to_vec(), label);
        self.callback_with(spec, inputs, body, site)
    }

    fn callback(
        &self,
        spec: CallbackSpec<'_>,
        inputs: &[&Sym],
        f: impl Fn(&[Tensor]) -> Result<Vec<Tensor>, Error> + Send + Sync + 'static,
        site: Site,
    ) -> Vec<Sym> {
        let kind = spec.kind;
        self.callback_with(spec, inputs, HostCallback::new(kind, f), site)
    }

    /// `n` poisoned values (an error was recorded instead of a node).
    pub(crate) fn poisoned(&self, n: usize) -> Vec<Sym> {
        (0..n)
            .map(|_| Sym {
                ctx: self.ctx.clone(),
                v: None,
            })
            .collect()
    }

    pub(crate) fn callback_with(
        &self,
        spec: CallbackSpec<'_>,
        inputs: &[&Sym],
        callable: HostCallback,
        site: Site,
    ) -> Vec<Sym> {
        let kind = spec.kind;
        let this = match self.operands(inputs, spec.name.unwrap_or(kind.name()), &site) {
            Ok(Some((t, vs))) => (t, vs),
            Ok(None) => return self.current().poisoned(spec.tout.len()),
            Err(e) => {
                self.record(e);
                return self.current().poisoned(spec.tout.len());
            }
        };
        let (this, vs) = this;
        this.callback_in(spec, vs, callable, site)
    }

    /// Adds a callback node over `vs` (values of this trace).
    fn callback_in(
        &self,
        spec: CallbackSpec<'_>,
        vs: Vec<ValueId>,
        callable: HostCallback,
        site: Site,
    ) -> Vec<Sym> {
        let kind = spec.kind;
        let shapes: Vec<Shape> = match spec.output_shapes {
            Some(s) if s.len() != spec.tout.len() => {
                let e = Error::InvalidArgument(Detail {
                    message: format!(
                        "{} output_shapes has {} entries, but Tout has {}",
                        kind.name(),
                        s.len(),
                        spec.tout.len()
                    ),
                    node: Some(NodeRef {
                        name: spec.name.unwrap_or(kind.name()).into(),
                        op: kind.name().into(),
                        site,
                    }),
                    pos: None,
                });
                self.record(e);
                return self.poisoned(spec.tout.len());
            }
            Some(s) => s.to_vec(),
            None => vec![Shape::Unranked; spec.tout.len()],
        };
        let types: Vec<TensorType> = spec
            .tout
            .iter()
            .zip(shapes)
            .map(|(d, s)| TensorType::new(*d, s))
            .collect();
        let mut g = self.ctx.graph.borrow_mut();
        let label = g.fresh_name(spec.name.unwrap_or(kind.name()));
        // The same callable with the same declared types is one binding
        // (the node's name stays a label); anything else gets its own.
        let key = (kind, spec.id, types.clone());
        let known = (spec.id != CallableId::Unique)
            .then(|| self.ctx.targets.borrow().get(&key).cloned())
            .flatten();
        let (target, fresh) = match known {
            Some(t) => (t, false),
            None => (format!("{}{label}", self.ctx.prefix), true),
        };
        let r = g.add_node(NewNode {
            op: Op::Callback(CallbackOp {
                kind,
                target: target.clone(),
            }),
            inputs: vs,
            name: Some(label),
            site,
            effect: if spec.stateful {
                Effect::Stateful
            } else {
                Effect::Pure
            },
            result_types: Some(types),
        });
        match r {
            Ok(id) => {
                if fresh {
                    if spec.id != CallableId::Unique {
                        self.ctx.targets.borrow_mut().insert(key, target.clone());
                    }
                    g.bind(target, callable.into_ref());
                }
                let results = g.node(id).results.clone();
                drop(g);
                results
                    .into_iter()
                    .map(|v| Sym {
                        ctx: self.ctx.clone(),
                        v: Some(v),
                    })
                    .collect()
            }
            Err(e) => {
                drop(g);
                self.record(e);
                self.poisoned(spec.tout.len())
            }
        }
    }

    /// `0, 1, 2, ...` along `dim` of a `dims`-shaped tensor.
    #[track_caller]
    pub fn iota(&self, dtype: DType, dims: &[usize], dim: usize) -> Sym {
        self.add(
            Op::Iota {
                dtype,
                dims: dims.to_vec(),
                dim,
            },
            &[],
            Site::caller(),
        )
    }
}

pub(crate) struct CallbackSpec<'a> {
    pub(crate) kind: CallbackKind,
    pub(crate) id: CallableId,
    pub(crate) name: Option<&'a str>,
    pub(crate) tout: &'a [DType],
    pub(crate) output_shapes: Option<&'a [Shape]>,
    pub(crate) stateful: bool,
}

/// Operands that are either symbolic values or Rust scalars (which take the
/// other operand's dtype).
#[derive(Clone, Debug)]
pub enum Operand {
    /// A symbolic value.
    Sym(Sym),
    /// A Rust float.
    Scalar(f64),
    /// A Rust integer, kept exact: an `i64` beyond 2^53 would not survive
    /// an f64 (`x + 9007199254740993` on an int64 tensor).
    Int(i128),
}

impl From<Sym> for Operand {
    fn from(s: Sym) -> Self {
        Operand::Sym(s)
    }
}
impl From<&Sym> for Operand {
    fn from(s: &Sym) -> Self {
        Operand::Sym(s.clone())
    }
}
macro_rules! scalar_operand {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for Operand {
            fn from(v: $t) -> Self { Operand::$v(v.into()) }
        }
    )*};
}
scalar_operand!(
    f32 => Scalar, f64 => Scalar, i32 => Int, i64 => Int, u32 => Int, u8 => Int, i8 => Int,
    i16 => Int, u16 => Int, u64 => Int
);

impl Sym {
    fn tracer(&self) -> Tracer {
        Tracer {
            ctx: self.ctx.clone(),
        }
    }

    /// Which value this is, as a hashable key: its trace and its index
    /// there (`None` when poisoned). Two symbols of one value have one key.
    #[doc(hidden)]
    pub fn key(&self) -> Option<(usize, usize)> {
        self.v.map(|v| (Rc::as_ptr(&self.ctx) as usize, v.index()))
    }

    /// The tracer that recorded this value (for constants and iota).
    pub fn graph(&self) -> Tracer {
        self.tracer()
    }

    /// Declares the shape of a callback result (TensorFlow's `set_shape`):
    /// later ops see it, and every call checks it.
    #[track_caller]
    pub fn set_shape(&self, dims: &[Option<usize>]) -> Sym {
        let site = Site::caller();
        let Some(v) = self.v else { return self.clone() };
        let r = self
            .ctx
            .graph
            .borrow_mut()
            .refine_callback_shape(v, Shape::Ranked(dims.to_vec()));
        match r {
            Ok(()) => self.clone(),
            Err(e) => {
                let name = self.ctx.graph.borrow().producer(v).name.clone();
                self.tracer().wrap(Err(e.at_node(NodeRef {
                    name,
                    op: "set_shape".into(),
                    site,
                })))
            }
        }
    }

    /// The value's type (`None` if an earlier error poisoned it).
    pub fn ty(&self) -> Option<TensorType> {
        self.v.map(|v| self.ctx.graph.borrow().ty(v).clone())
    }

    /// The value's dtype (`None` if poisoned).
    pub fn dtype(&self) -> Option<DType> {
        self.ty().map(|t| t.dtype)
    }

    /// The value's shape (`None` if poisoned).
    pub fn shape(&self) -> Option<Shape> {
        self.ty().map(|t| t.shape)
    }

    fn error(&self, op: &str, site: Site, message: String) -> Sym {
        let name = self.ctx.graph.borrow_mut().fresh_name(op);
        self.tracer().wrap(Err(Error::InvalidArgument(Detail {
            message,
            node: Some(NodeRef {
                name,
                op: op.into(),
                site,
            }),
            pos: None,
        })))
    }

    fn operand(&self, o: Operand, site: &Site) -> Sym {
        match (o, self.dtype()) {
            (Operand::Sym(s), _) => s,
            (Operand::Scalar(v), Some(d)) => self.tracer().scalar_at(d, v, site.clone()),
            (Operand::Int(v), Some(d)) => self.tracer().int_at(d, v, site.clone()),
            (Operand::Scalar(_) | Operand::Int(_), None) => Sym {
                ctx: self.ctx.clone(),
                v: None,
            },
        }
    }

    fn binary_at(&self, op: Elementwise, other: Operand, site: Site) -> Sym {
        let other = self.operand(other, &site);
        self.tracer()
            .build(&[self, &other], &op.op().name(), &site, |g, v| {
                builder::binary(g, op, v[0], v[1], &site)
            })
    }

    fn unary_at(&self, u: UnaryOp, site: Site) -> Sym {
        self.tracer().add(Op::Unary(u), &[self], site)
    }

    /// The same value, through which differentiation passes no gradient
    /// (`jax.lax.stop_gradient`, `tf.stop_gradient`).
    #[track_caller]
    pub fn stop_gradient(&self) -> Sym {
        self.tracer().add(Op::StopGradient, &[self], Site::caller())
    }

    /// The elementwise op `u` (what the named methods `exp`, `sin`... call).
    #[track_caller]
    pub fn unary(&self, u: UnaryOp) -> Sym {
        self.unary_at(u, Site::caller())
    }

    /// The elementwise op `b` with broadcasting (what `+`, `pow`,
    /// `maximum`... call).
    #[track_caller]
    pub fn binary(&self, b: BinaryOp, other: impl Into<Operand>) -> Sym {
        self.binary_at(Elementwise::Binary(b), other.into(), Site::caller())
    }
}

macro_rules! unary_methods {
    ($($(#[$m:meta])* $name:ident => $op:ident),* $(,)?) => {
        impl Sym {$(
            $(#[$m])*
            #[track_caller]
            pub fn $name(&self) -> Sym { self.unary_at(UnaryOp::$op, Site::caller()) }
        )*}
    };
}

unary_methods!(
    /// `-x`.
    neg => Neg,
    /// `|x|`.
    abs => Abs,
    /// Sign: -1, 0 or 1.
    sign => Sign,
    /// Round down.
    floor => Floor,
    /// Round up.
    ceil => Ceil,
    /// Round half to even.
    round => Round,
    /// Square root.
    sqrt => Sqrt,
    /// `1/sqrt(x)`.
    rsqrt => Rsqrt,
    /// `e^x`.
    exp => Exp,
    /// `e^x - 1`.
    expm1 => Expm1,
    /// Natural log.
    log => Log,
    /// `log(1+x)`.
    log1p => Log1p,
    /// Hyperbolic tangent.
    tanh => Tanh,
    /// `1/(1+e^-x)`.
    sigmoid => Logistic,
    /// Sine.
    sin => Sin,
    /// Cosine.
    cos => Cos,
    /// Error function.
    erf => Erf,
    /// Logical (bool) or bitwise (integer) not.
    logical_not => Not,
    /// Neither NaN nor infinite.
    is_finite => IsFinite,
    /// `x*x`.
    square => Square,
    /// `1/x`.
    reciprocal => Reciprocal,
);

macro_rules! binary_methods {
    ($($(#[$m:meta])* $name:ident => $op:expr),* $(,)?) => {
        impl Sym {$(
            $(#[$m])*
            #[track_caller]
            pub fn $name(&self, other: impl Into<Operand>) -> Sym { self.binary_at($op, other.into(), Site::caller()) }
        )*}
    };
}

binary_methods!(
    /// `x ^ y` (power).
    pow => Elementwise::Binary(BinaryOp::Pow),
    /// Elementwise maximum (NaN-propagating).
    maximum => Elementwise::Binary(BinaryOp::Max),
    /// Elementwise minimum (NaN-propagating).
    minimum => Elementwise::Binary(BinaryOp::Min),
    /// Remainder with the sign of the dividend.
    rem => Elementwise::Binary(BinaryOp::Rem),
    /// Logical/bitwise and.
    logical_and => Elementwise::Binary(BinaryOp::And),
    /// Logical/bitwise or.
    logical_or => Elementwise::Binary(BinaryOp::Or),
    /// Logical/bitwise xor.
    logical_xor => Elementwise::Binary(BinaryOp::Xor),
    /// `x << y` (integers; an amount outside `[0, bits)` gives 0).
    shift_left => Elementwise::Binary(BinaryOp::ShiftLeft),
    /// `x >> y` shifting in zeros (integers, signed ones included; an
    /// amount outside `[0, bits)` gives 0).
    shift_right_logical => Elementwise::Binary(BinaryOp::ShiftRightLogical),
    /// `x >> y` shifting in the sign bit (integers; an amount outside
    /// `[0, bits)` gives 0 or -1).
    shift_right_arithmetic => Elementwise::Binary(BinaryOp::ShiftRightArithmetic),
    /// `x == y`.
    equal => Elementwise::Compare(CmpOp::Eq),
    /// `x != y`.
    not_equal => Elementwise::Compare(CmpOp::Ne),
    /// `x < y`.
    less => Elementwise::Compare(CmpOp::Lt),
    /// `x <= y`.
    less_equal => Elementwise::Compare(CmpOp::Le),
    /// `x > y`.
    greater => Elementwise::Compare(CmpOp::Gt),
    /// `x >= y`.
    greater_equal => Elementwise::Compare(CmpOp::Ge),
);

macro_rules! operator {
    ($Trait:ident, $method:ident, $op:expr) => {
        impl<T: Into<Operand>> std::ops::$Trait<T> for Sym {
            type Output = Sym;
            #[track_caller]
            fn $method(self, rhs: T) -> Sym {
                self.binary_at($op, rhs.into(), Site::caller())
            }
        }
        impl<T: Into<Operand>> std::ops::$Trait<T> for &Sym {
            type Output = Sym;
            #[track_caller]
            fn $method(self, rhs: T) -> Sym {
                self.binary_at($op, rhs.into(), Site::caller())
            }
        }
    };
}

operator!(Add, add, Elementwise::Binary(BinaryOp::Add));
operator!(Sub, sub, Elementwise::Binary(BinaryOp::Sub));
operator!(Mul, mul, Elementwise::Binary(BinaryOp::Mul));
operator!(Div, div, Elementwise::Binary(BinaryOp::Div));
operator!(Rem, rem, Elementwise::Binary(BinaryOp::Rem));
operator!(BitAnd, bitand, Elementwise::Binary(BinaryOp::And));
operator!(BitOr, bitor, Elementwise::Binary(BinaryOp::Or));
operator!(BitXor, bitxor, Elementwise::Binary(BinaryOp::Xor));

macro_rules! scalar_lhs {
    ($($t:ty),*) => {$(
        impl std::ops::Add<Sym> for $t { type Output = Sym; #[track_caller] fn add(self, r: Sym) -> Sym { r.swapped(Elementwise::Binary(BinaryOp::Add), self.into(), Site::caller()) } }
        impl std::ops::Sub<Sym> for $t { type Output = Sym; #[track_caller] fn sub(self, r: Sym) -> Sym { r.swapped(Elementwise::Binary(BinaryOp::Sub), self.into(), Site::caller()) } }
        impl std::ops::Mul<Sym> for $t { type Output = Sym; #[track_caller] fn mul(self, r: Sym) -> Sym { r.swapped(Elementwise::Binary(BinaryOp::Mul), self.into(), Site::caller()) } }
        impl std::ops::Div<Sym> for $t { type Output = Sym; #[track_caller] fn div(self, r: Sym) -> Sym { r.swapped(Elementwise::Binary(BinaryOp::Div), self.into(), Site::caller()) } }
        impl std::ops::Add<&Sym> for $t { type Output = Sym; #[track_caller] fn add(self, r: &Sym) -> Sym { r.swapped(Elementwise::Binary(BinaryOp::Add), self.into(), Site::caller()) } }
        impl std::ops::Sub<&Sym> for $t { type Output = Sym; #[track_caller] fn sub(self, r: &Sym) -> Sym { r.swapped(Elementwise::Binary(BinaryOp::Sub), self.into(), Site::caller()) } }
        impl std::ops::Mul<&Sym> for $t { type Output = Sym; #[track_caller] fn mul(self, r: &Sym) -> Sym { r.swapped(Elementwise::Binary(BinaryOp::Mul), self.into(), Site::caller()) } }
        impl std::ops::Div<&Sym> for $t { type Output = Sym; #[track_caller] fn div(self, r: &Sym) -> Sym { r.swapped(Elementwise::Binary(BinaryOp::Div), self.into(), Site::caller()) } }
    )*};
}
scalar_lhs!(f32, f64, i32, i64);

impl std::ops::Neg for Sym {
    type Output = Sym;
    #[track_caller]
    fn neg(self) -> Sym {
        self.unary_at(UnaryOp::Neg, Site::caller())
    }
}
impl std::ops::Neg for &Sym {
    type Output = Sym;
    #[track_caller]
    fn neg(self) -> Sym {
        self.unary_at(UnaryOp::Neg, Site::caller())
    }
}
impl std::ops::Not for Sym {
    type Output = Sym;
    #[track_caller]
    fn not(self) -> Sym {
        self.unary_at(UnaryOp::Not, Site::caller())
    }
}

impl Sym {
    fn swapped(&self, op: Elementwise, lhs: Operand, site: Site) -> Sym {
        let l = self.operand(lhs, &site);
        l.binary_at(op, Operand::Sym(self.clone()), site)
    }

    /// `select(self, on_true, on_false)`: `self` is a bool condition;
    /// operands broadcast with NumPy's rule.
    #[track_caller]
    pub fn select(&self, on_true: impl Into<Operand>, on_false: impl Into<Operand>) -> Sym {
        let site = Site::caller();
        let (t, f) = (on_true.into(), on_false.into());
        // A scalar branch takes the other branch's dtype.
        let (t, f) = match (t, f) {
            (Operand::Sym(t), f) => {
                let f = t.operand(f, &site);
                (t, f)
            }
            (t, Operand::Sym(f)) => (f.operand(t, &site), f),
            (Operand::Scalar(_) | Operand::Int(_), Operand::Scalar(_) | Operand::Int(_)) => {
                return self.error(
                    "select",
                    site,
                    "select needs at least one tensor branch".into(),
                );
            }
        };
        self.tracer()
            .build(&[self, &t, &f], "select", &site, |g, v| {
                builder::select(g, v[0], v[1], v[2], &site)
            })
    }

    /// `min(max(self, lo), hi)`; scalar bounds take `self`'s dtype.
    #[track_caller]
    pub fn clamp(&self, lo: impl Into<Operand>, hi: impl Into<Operand>) -> Sym {
        let site = Site::caller();
        let (lo, hi) = (
            self.operand(lo.into(), &site),
            self.operand(hi.into(), &site),
        );
        self.tracer().add(Op::Clamp, &[self, &lo, &hi], site)
    }

    /// Casts to `dtype`.
    #[track_caller]
    pub fn cast(&self, dtype: DType) -> Sym {
        self.tracer()
            .add(Op::Convert(dtype), &[self], Site::caller())
    }

    /// Broadcasts to `dims` with NumPy's rule.
    #[track_caller]
    pub fn broadcast_to(&self, dims: &[usize]) -> Sym {
        let site = Site::caller();
        self.tracer()
            .build(&[self], "broadcast_in_dim", &site, |g, v| {
                builder::broadcast_to(g, v[0], dims, &site)
            })
    }

    /// XLA's `broadcast_in_dim`.
    #[track_caller]
    pub fn broadcast_in_dim(&self, dims: &[usize], mapping: &[usize]) -> Sym {
        self.tracer().add(
            Op::BroadcastInDim {
                shape: Shape::known(dims),
                dims: mapping.to_vec(),
            },
            &[self],
            Site::caller(),
        )
    }

    /// Reshapes; one dim may be `-1` (inferred).
    #[track_caller]
    pub fn reshape(&self, dims: &[i64]) -> Sym {
        let site = Site::caller();
        if dims.iter().any(|&d| d < -1) || dims.iter().filter(|&&d| d == -1).count() > 1 {
            return self.error(
                "reshape",
                site,
                format!("bad target shape {dims:?}: sizes must be ≥ 0, with at most one -1"),
            );
        }
        let shape = Shape::Ranked(
            dims.iter()
                .map(|&d| (d >= 0).then_some(d as usize))
                .collect(),
        );
        self.tracer().add(Op::Reshape(shape), &[self], site)
    }

    /// Permutes dims: result dim `i` is dim `perm[i]`.
    #[track_caller]
    pub fn transpose(&self, perm: &[usize]) -> Sym {
        let site = Site::caller();
        self.tracer().build(&[self], "transpose", &site, |g, v| {
            builder::transpose(g, v[0], perm, &site)
        })
    }

    /// Strided slice `[start, limit)` with `stride` per dim.
    #[track_caller]
    pub fn slice(&self, start: &[usize], limit: &[usize], stride: &[usize]) -> Sym {
        let site = Site::caller();
        self.tracer().build(&[self], "slice", &site, |g, v| {
            builder::slice(g, v[0], start, limit, stride, &site)
        })
    }

    /// Python's slice `x[b:e:s, ...]`, one entry per dim (`None`: omitted):
    /// a negative bound counts from the end, bounds are clamped into the
    /// dim, a negative step walks backwards. On dims of unknown size too
    /// (the result's size is then known when the function runs), as
    /// TensorFlow's `strided_slice`.
    #[track_caller]
    pub fn strided_slice(&self, begin: &[Option<i64>], end: &[Option<i64>], step: &[i64]) -> Sym {
        let site = Site::caller();
        self.tracer()
            .build(&[self], "strided_slice", &site, |g, v| {
                builder::strided_slice(g, v[0], begin, end, step, &site)
            })
    }

    /// Pads with `value` (`low`/`high` may be negative to crop).
    #[track_caller]
    pub fn pad(
        &self,
        low: &[i64],
        high: &[i64],
        interior: &[usize],
        value: impl Into<Operand>,
    ) -> Sym {
        let site = Site::caller();
        let v = self.operand(value.into(), &site);
        let op = Op::Pad {
            low: low.to_vec(),
            high: high.to_vec(),
            interior: interior.to_vec(),
        };
        self.tracer().add(op, &[self, &v], site)
    }

    /// Reverses along `axes` (negative axes count from the end).
    #[track_caller]
    pub fn reverse(&self, axes: &[i64]) -> Sym {
        let site = Site::caller();
        self.tracer().build(&[self], "reverse", &site, |g, v| {
            builder::reverse(g, v[0], axes, &site)
        })
    }

    fn reduce_at(&self, op: ReduceOp, axes: Option<&[i64]>, keepdims: bool, site: Site) -> Sym {
        self.tracer()
            .build(&[self], &format!("reduce_{}", op.name()), &site, |g, v| {
                builder::reduce(g, op, v[0], axes, keepdims, &site)
            })
    }

    /// Index of the maximum along `axis` (int64).
    #[track_caller]
    pub fn argmax(&self, axis_: i64) -> Sym {
        self.arg_at(true, axis_, Site::caller())
    }

    /// Index of the minimum along `axis` (int64).
    #[track_caller]
    pub fn argmin(&self, axis_: i64) -> Sym {
        self.arg_at(false, axis_, Site::caller())
    }

    fn arg_at(&self, max: bool, a: i64, site: Site) -> Sym {
        self.tracer().build(
            &[self],
            if max { "argmax" } else { "argmin" },
            &site,
            |g, v| builder::arg(g, max, v[0], a, &site),
        )
    }

    /// The indices (int32) that sort this tensor along `axis` (negative
    /// counts from the end), largest first when `descending`: stable
    /// (equal elements keep their order), NaN above every number, -0.0
    /// equal to 0.0 (`jnp.argsort(stable=True)`, `tf.argsort`).
    #[track_caller]
    pub fn argsort(&self, axis_: i64, descending: bool) -> Sym {
        let site = Site::caller();
        self.tracer().build(&[self], "argsort", &site, |g, v| {
            builder::argsort(g, v[0], axis_, descending, DType::I32, &site)
        })
    }

    /// Running sums along `axis` (negative counts from the end;
    /// `tf.math.cumsum`): from the last element when `reverse`, each
    /// element left out of its own sum when `exclusive`. Differentiable.
    #[track_caller]
    pub fn cumsum(&self, axis_: i64, reverse: bool, exclusive: bool) -> Sym {
        let site = Site::caller();
        self.tracer().build(&[self], "cumsum", &site, |g, v| {
            builder::cumsum(g, v[0], axis_, reverse, exclusive, &site)
        })
    }

    /// This tensor sorted along `axis` (negative counts from the end), in
    /// [`Sym::argsort`]'s order; differentiable (the gradient goes back to
    /// where each element came from). Dims may be known only when the function runs.
    #[track_caller]
    pub fn sort(&self, axis_: i64, descending: bool) -> Sym {
        let site = Site::caller();
        self.tracer().build(&[self], "sort", &site, |g, v| {
            builder::sort(g, v[0], axis_, descending, &site)
        })
    }

    /// `tf.math.top_k`: the `k` largest elements along the last axis, in
    /// descending order (equal ones in index order; NaN above every
    /// number), and their int32 indices. The last axis must be known.
    #[track_caller]
    pub fn top_k(&self, k: usize) -> (Sym, Sym) {
        let site = Site::caller();
        let indices = self.tracer().build(&[self], "top_k", &site, |g, v| {
            builder::top_k(g, v[0], k, &site).map(|(_, i)| i)
        });
        let values = self.take_along_axis_at(&indices, -1, site);
        (values, indices)
    }

    /// NumPy's `take_along_axis`: `out[.., i, ..] = self[.., indices[..,
    /// i, ..], ..]` along `axis`; `indices` has this tensor's shape but
    /// along `axis`. Dims may be known only when the function runs.
    #[track_caller]
    pub fn take_along_axis(&self, indices: &Sym, axis_: i64) -> Sym {
        self.take_along_axis_at(indices, axis_, Site::caller())
    }

    fn take_along_axis_at(&self, indices: &Sym, axis_: i64, site: Site) -> Sym {
        self.tracer()
            .build(&[self, indices], "take_along_axis", &site, |g, v| {
                builder::take_along_axis(g, v[0], v[1], axis_, &site)
            })
    }

    /// Matrix product over the last two dims; leading (batch) dims must
    /// match. A rank-1 operand is treated as a row/column vector.
    #[track_caller]
    pub fn matmul(&self, other: &Sym) -> Sym {
        let site = Site::caller();
        self.tracer()
            .build(&[self, other], "dot_general", &site, |g, v| {
                builder::matmul(g, v[0], v[1], &site)
            })
    }

    /// XLA's `dot_general`.
    #[track_caller]
    pub fn dot_general(&self, other: &Sym, dims: DotDims) -> Sym {
        self.tracer()
            .add(Op::DotGeneral(dims), &[self, other], Site::caller())
    }

    /// Gathers slices along `axis` at integer `indices` (TF's `gather`).
    #[track_caller]
    pub fn take(&self, indices: &Sym, axis_: i64) -> Sym {
        let site = Site::caller();
        self.tracer()
            .build(&[self, indices], "take", &site, |g, v| {
                builder::take(g, v[0], v[1], axis_, &site)
            })
    }
}

macro_rules! reduce_methods {
    ($($(#[$m:meta])* $name:ident => $op:ident),* $(,)?) => {
        impl Sym {$(
            $(#[$m])*
            /// `axes = None` reduces over every axis; negative axes count from the end.
            #[track_caller]
            pub fn $name(&self, axes: Option<&[i64]>, keepdims: bool) -> Sym {
                self.reduce_at(ReduceOp::$op, axes, keepdims, Site::caller())
            }
        )*}
    };
}

reduce_methods!(
    /// Sum.
    reduce_sum => Sum,
    /// Product.
    reduce_prod => Prod,
    /// Maximum.
    reduce_max => Max,
    /// Minimum.
    reduce_min => Min,
    /// Logical and.
    reduce_all => And,
    /// Logical or.
    reduce_any => Or,
);

impl Sym {
    /// Joins `self` and `others` along `axis` (negative counts from the end).
    #[track_caller]
    pub fn concat(&self, others: &[Sym], axis_: i64) -> Sym {
        let site = Site::caller();
        let refs: Vec<&Sym> = std::iter::once(self).chain(others).collect();
        self.tracer().build(&refs, "concatenate", &site, |g, v| {
            builder::concatenate(g, v, axis_, &site)
        })
    }
}

impl Sym {
    /// XLA's `dynamic_slice`: the block of `sizes` starting at `starts`
    /// (one scalar int32 or int64 value per dim, all of one dtype), each
    /// start clamped to `[0, dim - size]` so the block lies inside.
    #[track_caller]
    pub fn dynamic_slice(&self, starts: &[&Sym], sizes: &[usize]) -> Sym {
        let refs: Vec<&Sym> = std::iter::once(self)
            .chain(starts.iter().copied())
            .collect();
        let op = Op::DynamicSlice {
            sizes: sizes.to_vec(),
        };
        self.tracer().add(op, &refs, Site::caller())
    }

    /// XLA's `dynamic_update_slice`: `self` with the block at `starts`
    /// (clamped as [`Sym::dynamic_slice`]'s so that `update` fits) replaced
    /// by `update`.
    #[track_caller]
    pub fn dynamic_update_slice(&self, update: &Sym, starts: &[&Sym]) -> Sym {
        let refs: Vec<&Sym> = [self, update]
            .into_iter()
            .chain(starts.iter().copied())
            .collect();
        self.tracer()
            .add(Op::DynamicUpdateSlice, &refs, Site::caller())
    }

    /// The inverse of [`Sym::take`]: `updates` (shaped like `take(indices,
    /// axis)`) combined into `self` along `axis` (negative counts from the
    /// end) at integer `indices`. Indices outside `[0, n)` are skipped; with
    /// [`Combiner::Set`] the last of duplicate indices wins.
    #[track_caller]
    pub fn scatter(&self, indices: &Sym, updates: &Sym, axis_: i64, combiner: Combiner) -> Sym {
        let site = Site::caller();
        self.tracer()
            .build(&[self, indices, updates], "scatter", &site, |g, v| {
                builder::scatter(g, v[0], v[1], v[2], axis_, combiner, &site)
            })
    }

    /// Reads every element's bits as `dtype` (of the same size).
    #[track_caller]
    pub fn bitcast_convert(&self, dtype: DType) -> Sym {
        self.tracer()
            .add(Op::BitcastConvert(dtype), &[self], Site::caller())
    }
}
