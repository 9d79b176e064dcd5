//! `function()`: trace a Rust closure into a graph once per input signature,
//! optimize it, and run it.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tensorlift_compiler::{Executable, JitOptions};

use crate::staged::Runner;
use tensorlift_ir::{DType, Error, Graph, Shape, Site, TensorType};
use tensorlift_runtime::{Tensor, TensorMut, interp};

use crate::trace::{Sym, Tracer};
use tensorlift_ir::autodiff;

/// The dtype and (possibly partial) shape of one input, like TensorFlow's
/// `tf.TensorSpec`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorSpec {
    /// Element type.
    pub dtype: DType,
    /// Shape; `None` dims (or an unranked shape) accept any size.
    pub shape: Shape,
    /// Parameter name in the traced graph.
    pub name: Option<String>,
}

impl TensorSpec {
    /// A spec with some dims unknown (`None`).
    pub fn new(dtype: DType, dims: &[Option<usize>]) -> Self {
        TensorSpec {
            dtype,
            shape: Shape::Ranked(dims.to_vec()),
            name: None,
        }
    }

    /// A spec with every dim known.
    pub fn known(dtype: DType, dims: &[usize]) -> Self {
        TensorSpec {
            dtype,
            shape: Shape::known(dims),
            name: None,
        }
    }

    /// The spec of a concrete tensor.
    pub fn of(t: &Tensor) -> Self {
        Self::known(t.dtype(), t.shape())
    }

    /// Names the parameter.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    fn ty(&self) -> TensorType {
        TensorType::new(self.dtype, self.shape.clone())
    }
}

/// Which IR [`Function::compiler_ir`] returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IrStage {
    /// The graph as traced.
    Traced,
    /// After DCE, CSE, constant folding and algebraic simplification.
    Optimized,
    /// The fusion plan: kernels, their expressions, buffer slots and every
    /// fusion decision with its reason.
    Fused,
    /// The Cranelift IR of every kernel and of `main`.
    Cranelift,
}

/// What a traced body may return: one value, a tuple (of up to 8), an
/// array or a vector.
pub trait IntoOutputs {
    /// The values, in order.
    fn into_outputs(self) -> Vec<Sym>;
}

impl IntoOutputs for Sym {
    fn into_outputs(self) -> Vec<Sym> {
        vec![self]
    }
}
impl IntoOutputs for Vec<Sym> {
    fn into_outputs(self) -> Vec<Sym> {
        self
    }
}
impl<const N: usize> IntoOutputs for [Sym; N] {
    fn into_outputs(self) -> Vec<Sym> {
        self.into()
    }
}
/// Tuples of 2 to 8 values (a user porting a model returned 4 and met an
/// opaque trait error).
macro_rules! tuple_outputs {
    ($($t:ident . $i:tt),+) => {
        impl IntoOutputs for ($($t,)+) {
            fn into_outputs(self) -> Vec<Sym> {
                vec![$(self.$i),+]
            }
        }
    };
}
type S = Sym;
tuple_outputs!(S.0, S.1);
tuple_outputs!(S.0, S.1, S.2);
tuple_outputs!(S.0, S.1, S.2, S.3);
tuple_outputs!(S.0, S.1, S.2, S.3, S.4);
tuple_outputs!(S.0, S.1, S.2, S.3, S.4, S.5);
tuple_outputs!(S.0, S.1, S.2, S.3, S.4, S.5, S.6);
tuple_outputs!(S.0, S.1, S.2, S.3, S.4, S.5, S.6, S.7);
impl IntoOutputs for () {
    fn into_outputs(self) -> Vec<Sym> {
        Vec::new()
    }
}

/// A closure that can be traced; `M` tells the arities apart.
pub trait TraceBody<M>: Send + Sync + 'static {
    /// Number of arguments, or `None` for a slice body.
    fn arity(&self) -> Option<usize>;
    /// Calls the body on symbolic arguments.
    fn trace(&self, args: &[Sym]) -> Vec<Sym>;
}

/// Marker for a body over a slice of arguments.
#[derive(Debug)]
pub struct SliceArgs;

impl<F, R> TraceBody<SliceArgs> for F
where
    F: Fn(&[Sym]) -> R + Send + Sync + 'static,
    R: IntoOutputs,
{
    fn arity(&self) -> Option<usize> {
        None
    }
    fn trace(&self, args: &[Sym]) -> Vec<Sym> {
        self(args).into_outputs()
    }
}

macro_rules! trace_body_arity {
    ($n:literal; $($a:ident),*) => {
        impl<F, R> TraceBody<[Sym; $n]> for F
        where
            F: Fn($(trace_body_arity!(@sym $a)),*) -> R + Send + Sync + 'static,
            R: IntoOutputs,
        {
            fn arity(&self) -> Option<usize> { Some($n) }
            fn trace(&self, args: &[Sym]) -> Vec<Sym> {
                let [$($a),*] = <[Sym; $n]>::try_from(args.to_vec()).unwrap_or_else(|_| unreachable_arity());
                self($($a),*).into_outputs()
            }
        }
    };
    (@sym $a:ident) => { Sym };
}

#[allow(
    clippy::panic,
    reason = "arity is checked before trace is called; caught by catch_unwind regardless"
)]
fn unreachable_arity() -> ! {
    panic!("argument count checked before tracing")
}

trace_body_arity!(1; a);
trace_body_arity!(2; a, b);
trace_body_arity!(3; a, b, c);
trace_body_arity!(4; a, b, c, d);
trace_body_arity!(5; a, b, c, d, e);
trace_body_arity!(6; a, b, c, d, e, f);

type Body = dyn Fn(&[Sym]) -> Vec<Sym> + Send + Sync;

/// A traced graph and its optimized form, for one input signature.
#[derive(Debug)]
pub struct ConcreteFunction {
    /// The graph as traced.
    pub traced: Graph,
    /// After the optimization pipeline.
    pub optimized: Graph,
}

/// How a [`Function`] was configured (cheap to clone; caches are not).
#[derive(Clone)]
struct Config {
    name: String,
    body: Arc<Body>,
    arity: Option<usize>,
    input_signature: Option<Vec<TensorSpec>>,
    jit: bool,
    jit_options: JitOptions,
    site: Site,
    /// Set for a function made by a transformation of another
    /// ([`Function::grad`] and its kin): traced by transforming the other's
    /// graph instead of calling `body`.
    derive: Option<Arc<Derive>>,
}

/// Which transformation a derived function applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DeriveKind {
    Grad,
    ValueAndGrad,
    Vjp,
    Jvp,
}

impl DeriveKind {
    /// The method that makes it (also the derived function's name suffix).
    fn name(self) -> &'static str {
        match self {
            DeriveKind::Grad => "grad",
            DeriveKind::ValueAndGrad => "value_and_grad",
            DeriveKind::Vjp => "vjp",
            DeriveKind::Jvp => "jvp",
        }
    }
}

/// A function derived from `base` by `kind`, with respect to `wrt`.
struct Derive {
    base: Function,
    kind: DeriveKind,
    wrt: Vec<usize>,
    /// Where `grad`/`vjp`/... was called.
    site: Site,
}

/// A concrete signature's executable, filled by its first compilation.
type CompileSlot = Arc<Mutex<Option<Runner>>>;

/// A signature's trace, filled by its first trace (locked meanwhile, so
/// that threads making the first call at once trace it once).
type TraceSlot = Arc<Mutex<Option<Arc<ConcreteFunction>>>>;

/// Functions (by `Inner` address) and signatures a thread is working on.
type Underway = std::cell::RefCell<Vec<(usize, Vec<TensorType>)>>;

thread_local! {
    /// The functions and signatures this thread is tracing now: a body
    /// that calls its own function for the signature being traced is an
    /// error, not a deadlock on the trace slot.
    static TRACING: Underway = const { std::cell::RefCell::new(Vec::new()) };
}

thread_local! {
    /// The same for compilations: a stateless callback on constants runs
    /// while the compiler folds it, and one that calls the function being
    /// compiled for the same types would wait for its own compile slot.
    static COMPILING: Underway = const { std::cell::RefCell::new(Vec::new()) };
}

/// Pops this thread's innermost entry of [`TRACING`] or [`COMPILING`] when
/// the trace or compilation ends, however it ends.
struct Tracing(&'static std::thread::LocalKey<Underway>);

impl Drop for Tracing {
    fn drop(&mut self) {
        self.0.with(|t| t.borrow_mut().pop());
    }
}

/// The slot of signature `key` in `map`, made on its first call (the key
/// is copied then only: every call of a function looks up its slot).
fn slot_of<S: Clone + Default>(map: &mut HashMap<Vec<TensorType>, S>, key: &[TensorType]) -> S {
    match map.get(key) {
        Some(slot) => slot.clone(),
        None => map.entry(key.to_vec()).or_default().clone(),
    }
}

struct Inner {
    cfg: Config,
    traces_cache: Mutex<HashMap<Vec<TensorType>, TraceSlot>>,
    /// One slot per concrete signature, locked while that signature
    /// compiles: compilations of one signature never run twice, and a
    /// callback may call the function (re-entrancy) without deadlock.
    executables: Mutex<HashMap<Vec<TensorType>, CompileSlot>>,
    traces: AtomicUsize,
    compiles: Arc<AtomicUsize>,
}

impl Inner {
    fn lock_traces(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<TensorType>, TraceSlot>> {
        // Nothing panics while the lock is held; recover if something did.
        self.traces_cache.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A traceable function: the Rust counterpart of `tf.function`.
pub struct Function {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Function {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.inner.cfg;
        f.debug_struct("Function")
            .field("name", &c.name)
            .field("input_signature", &c.input_signature)
            .field("jit_compile", &c.jit)
            .finish()
    }
}

/// Makes a [`Function`] from a closure over symbolic values, like
/// `tf.function`. The closure takes one [`Sym`] per input (up to six; annotate
/// them, `|x: Sym|`, so Rust can tell the arity) or a `&[Sym]`, and returns
/// a `Sym`, a tuple, an array or a `Vec<Sym>`.
///
/// ```
/// use tensorlift::{function, Sym, Tensor};
/// let f = function(|x: Sym| ((&x * 1.5 + 0.25) * &x - 0.75) * 0.5 + &x);
/// let y = f.call(&[Tensor::from(ndarray::arr1(&[1.0f32, 2.0]).into_dyn())]).unwrap();
/// assert_eq!(y[0].to_ndarray::<f32>().unwrap().as_slice().unwrap(), &[1.5, 4.875]);
/// ```
#[track_caller]
pub fn function<M, F: TraceBody<M>>(body: F) -> Function {
    let arity = body.arity();
    Function::from_config(Config {
        name: "function".into(),
        body: Arc::new(move |args: &[Sym]| body.trace(args)),
        arity,
        input_signature: None,
        jit: false,
        jit_options: JitOptions::default(),
        site: Site::caller(),
        derive: None,
    })
}

impl Function {
    fn from_config(cfg: Config) -> Self {
        Function {
            inner: Arc::new(Inner {
                cfg,
                traces_cache: Mutex::new(HashMap::new()),
                executables: Mutex::new(HashMap::new()),
                traces: AtomicUsize::new(0),
                compiles: Arc::new(AtomicUsize::new(0)),
            }),
        }
    }

    fn reconfigure(self, f: impl FnOnce(&mut Config)) -> Self {
        let mut cfg = self.inner.cfg.clone();
        f(&mut cfg);
        Function::from_config(cfg)
    }

    /// Names the function (the graph's name in IR dumps).
    pub fn name(self, name: impl Into<String>) -> Self {
        let name = name.into();
        self.reconfigure(|c| c.name = name)
    }

    /// Fixes (or relaxes, with `None` dims) the input types: the function is
    /// traced once for the signature, and calls with other types are errors.
    pub fn input_signature(self, specs: Vec<TensorSpec>) -> Self {
        self.reconfigure(|c| c.input_signature = Some(specs))
    }

    /// `true`: the whole function is compiled to native code by the
    /// Cranelift backend (or fails with a `JitIncompatible` error before
    /// anything runs); `false` (the default): the optimized graph runs in
    /// the interpreter.
    pub fn jit_compile(self, on: bool) -> Self {
        self.reconfigure(|c| c.jit = on)
    }

    /// JIT options (optimization level, exact math, vectorization).
    pub fn jit_options(self, options: JitOptions) -> Self {
        self.reconfigure(|c| c.jit_options = options)
    }

    /// `function 'name' (defined at file:line:col)`, for messages.
    pub(crate) fn label(&self) -> String {
        let c = &self.inner.cfg;
        format!("function '{}' (defined at {})", c.name, c.site)
    }

    /// How many times the body has been traced (once per new signature).
    pub fn trace_count(&self) -> usize {
        self.inner.traces.load(Ordering::Relaxed)
    }

    /// How many times the function has been compiled to native code (once
    /// per concrete input signature; never silently again).
    pub fn compile_count(&self) -> usize {
        self.inner.compiles.load(Ordering::Relaxed)
    }

    /// The input types a call with `specs` is traced for: the input signature
    /// when one is set (after checking `specs` against it), else `specs`.
    fn signature_for(&self, specs: &[TensorType]) -> Result<Vec<TensorType>, Error> {
        let Some(sig) = &self.inner.cfg.input_signature else {
            return Ok(specs.to_vec());
        };
        if sig.len() != specs.len() {
            return Err(Error::invalid(format!(
                "function '{}' has an input_signature of {} tensor(s), but {} were given",
                self.inner.cfg.name,
                sig.len(),
                specs.len()
            )));
        }
        for (i, (s, t)) in sig.iter().zip(specs).enumerate() {
            let ok = s.dtype == t.dtype
                && s.shape.compatible(&t.shape)
                && t.shape
                    .rank()
                    .is_none_or(|r| s.shape.rank().is_none_or(|q| q == r));
            if !ok {
                return Err(Error::invalid(format!(
                    "input {i} of function '{}' is {t}, which does not match its input_signature {}",
                    self.inner.cfg.name,
                    s.ty()
                )));
            }
        }
        Ok(sig.iter().map(TensorSpec::ty).collect())
    }

    /// The traced and optimized graphs for inputs of `specs`, tracing on the
    /// first request for a signature.
    pub fn concrete(&self, specs: &[TensorSpec]) -> Result<Arc<ConcreteFunction>, Error> {
        let types: Vec<TensorType> = specs.iter().map(TensorSpec::ty).collect();
        self.concrete_for(&types)
    }

    fn concrete_for(&self, types: &[TensorType]) -> Result<Arc<ConcreteFunction>, Error> {
        let key = self.signature_for(types)?;
        let slot = slot_of(&mut self.inner.lock_traces(), &key);
        let id = Arc::as_ptr(&self.inner) as usize;
        if TRACING.with(|t| t.borrow().iter().any(|(i, k)| *i == id && *k == key)) {
            let cfg = &self.inner.cfg;
            return Err(Error::invalid(format!(
                "function '{}' (defined at {}) was called by its own body while being traced for \
                 the same argument types: a traced function cannot call itself (use a loop)",
                cfg.name, cfg.site
            )));
        }
        // One trace per signature: a thread making the first call while
        // another traces it waits for that trace.
        let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = &*slot {
            return Ok(c.clone());
        }
        TRACING.with(|t| t.borrow_mut().push((id, key.clone())));
        let c = {
            let _tracing = Tracing(&TRACING);
            let traced = self.trace(&key)?;
            let mut optimized = traced.clone();
            interp::optimize(&mut optimized)?;
            Arc::new(ConcreteFunction { traced, optimized })
        };
        self.inner.traces.fetch_add(1, Ordering::Relaxed);
        *slot = Some(c.clone());
        Ok(c)
    }

    fn trace(&self, types: &[TensorType]) -> Result<Graph, Error> {
        let cfg = &self.inner.cfg;
        if let Some(d) = &cfg.derive {
            return self.trace_derived(d, types);
        }
        if let Some(n) = cfg.arity
            && n != types.len()
        {
            return Err(Error::invalid(format!(
                "function '{}' (defined at {}) takes {n} argument(s), but {} were given",
                cfg.name,
                cfg.site,
                types.len()
            )));
        }
        let tracer = Tracer::new(&cfg.name);
        let args: Vec<Sym> = types
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let name = cfg
                    .input_signature
                    .as_ref()
                    .and_then(|s| s[i].name.clone())
                    .or_else(|| Some(format!("arg{i}")));
                tracer.parameter(i, t.clone(), name, cfg.site.clone())
            })
            .collect();
        let body = cfg.body.clone();
        let _active = tracer.activate();
        let outputs = catch_unwind(AssertUnwindSafe(|| body(&args))).map_err(|p| {
            // An error recorded before the panic is what went wrong (the
            // body went on with a poisoned value and then failed on it).
            if let Some(e) = tracer.error() {
                return e;
            }
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Error::invalid(format!(
                "the body of function '{}' (defined at {}) panicked while tracing: {msg}",
                cfg.name, cfg.site
            ))
        })?;
        drop(args);
        tracer.finish(outputs)
    }

    /// The graph of a derived function: the base's traced graph for the
    /// inputs that are its own, transformed.
    fn trace_derived(&self, d: &Derive, types: &[TensorType]) -> Result<Graph, Error> {
        // Loops whose trip count depends on data keep their carries on a
        // run-time tape: linear time (docs/autodiff.md).
        self.trace_derived_with(d, types, autodiff::WhileCarries::Tape)
    }

    fn trace_derived_with(
        &self,
        d: &Derive,
        types: &[TensorType],
        carries: autodiff::WhileCarries,
    ) -> Result<Graph, Error> {
        let cfg = &self.inner.cfg;
        let base_inputs = match d.kind {
            DeriveKind::Grad | DeriveKind::ValueAndGrad => types.len(),
            DeriveKind::Jvp => types.len().checked_sub(d.wrt.len()).ok_or_else(|| {
                Error::invalid(format!(
                    "function '{}' takes the inputs of '{}' and then {} tangent(s), but {} input(s) were given",
                    cfg.name,
                    d.base.inner.cfg.name,
                    d.wrt.len(),
                    types.len()
                ))
            })?,
            DeriveKind::Vjp => {
                let base = &d.base.inner.cfg;
                let n = base
                    .arity
                    .or_else(|| base.input_signature.as_ref().map(Vec::len));
                n.ok_or_else(|| {
                    Error::invalid(format!(
                        "vjp of function '{}' needs its number of inputs: give it fixed arguments or an input_signature",
                        base.name
                    ))
                })?
            }
        };
        let base_types = types.get(..base_inputs).ok_or_else(|| {
            Error::invalid(format!(
                "function '{}' takes at least {base_inputs} input(s), but {} were given",
                cfg.name,
                types.len()
            ))
        })?;
        if let Some(t) = types.iter().find(|t| !t.shape.is_static()) {
            return Err(Error::invalid(format!(
                "function '{}' is differentiated for concrete shapes, but an input is {t}: call it with tensors, or compile it with TensorSpecs of known dims",
                cfg.name
            )));
        }
        // A derived base is transformed again with loops that recompute:
        // a gradient that kept loop carries on run-time tapes cannot be
        // differentiated.
        let traced = match &d.base.inner.cfg.derive {
            Some(bd) => {
                d.base
                    .trace_derived_with(bd, base_types, autodiff::WhileCarries::Recompute)?
            }
            None => d.base.concrete_for(base_types)?.traced.clone(),
        };
        let params: Vec<TensorType> = (traced.params().iter())
            .map(|p| traced.ty(*p).clone())
            .collect();
        let mut g = if params.iter().all(|t| t.shape.is_static()) {
            traced
        } else {
            traced.specialize(base_types)?
        };
        g.name = cfg.name.clone();
        let out = match d.kind {
            DeriveKind::Grad => autodiff::grad_with(&g, &d.wrt, false, carries),
            DeriveKind::ValueAndGrad => autodiff::grad_with(&g, &d.wrt, true, carries),
            DeriveKind::Vjp => autodiff::vjp_with(&g, &d.wrt, carries),
            DeriveKind::Jvp => autodiff::jvp(&g, &d.wrt),
        };
        let mut out = out.map_err(|e| {
            e.context(format!(
                "{} of function '{}' (defined at {}), taken at {}",
                d.kind.name(),
                d.base.inner.cfg.name,
                d.base.inner.cfg.site,
                d.site
            ))
        })?;
        out.name = cfg.name.clone();
        crate::tape::bind_tapes(&mut out)?;
        Ok(out)
    }

    fn derived(&self, kind: DeriveKind, wrt: &[usize], site: Site) -> Function {
        let base = &self.inner.cfg;
        let suffix = kind.name();
        Function::from_config(Config {
            name: format!("{}_{suffix}", base.name),
            body: base.body.clone(),
            arity: match kind {
                DeriveKind::Grad | DeriveKind::ValueAndGrad => base.arity,
                DeriveKind::Vjp | DeriveKind::Jvp => None,
            },
            input_signature: None,
            jit: base.jit,
            jit_options: base.jit_options,
            site: base.site.clone(),
            derive: Some(Arc::new(Derive {
                base: self.clone(),
                kind,
                wrt: wrt.to_vec(),
                site,
            })),
        })
    }

    /// The gradient (`jax.grad`): a function of the same inputs returning
    /// the gradient of this function's single output (a real floating
    /// scalar) with respect to each input in `wrt`, in order. It is traced,
    /// optimized and (with `jit_compile(true)`, inherited and changeable)
    /// compiled like any other function; differentiate it again for
    /// higher orders. Integer, bool and complex inputs cannot be in `wrt`.
    /// See docs/autodiff.md for the rules' conventions.
    #[track_caller]
    pub fn grad(&self, wrt: &[usize]) -> Function {
        self.derived(DeriveKind::Grad, wrt, Site::caller())
    }

    /// `jax.value_and_grad`: the output first, then the gradients.
    #[track_caller]
    pub fn value_and_grad(&self, wrt: &[usize]) -> Function {
        self.derived(DeriveKind::ValueAndGrad, wrt, Site::caller())
    }

    /// Reverse mode (`jax.vjp`): a function of this function's inputs and
    /// then one cotangent per real floating output (in output order),
    /// returning the outputs and then the cotangent of each input in `wrt`
    /// (`Jᵀ·ct`). This function needs a fixed number of inputs (an arity
    /// or an input_signature).
    #[track_caller]
    pub fn vjp(&self, wrt: &[usize]) -> Function {
        self.derived(DeriveKind::Vjp, wrt, Site::caller())
    }

    /// Forward mode (`jax.jvp`): a function of this function's inputs and
    /// then one tangent per input in `wrt`, returning the outputs and then
    /// the tangent of each real floating output (`J·t`).
    #[track_caller]
    pub fn jvp(&self, wrt: &[usize]) -> Function {
        self.derived(DeriveKind::Jvp, wrt, Site::caller())
    }

    /// Runs the function: traces (once per input signature) and optimizes;
    /// then interprets, or with `jit_compile(true)` compiles (once per
    /// concrete input signature) and runs native code.
    pub fn call(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, Error> {
        let types: Vec<TensorType> = inputs.iter().map(Tensor::ty).collect();
        if self.inner.cfg.jit {
            return self.executable_for(&types)?.run(inputs);
        }
        let c = self.concrete_for(&types)?;
        interp::run(&c.optimized, inputs)
    }

    /// [`Function::call`] writing output `k` into `outputs[k]`, which must
    /// have its dtype and shape (an `InvalidArgument` naming the first that
    /// does not, before anything runs where the types are known ahead):
    /// a caller who keeps results reuses its own buffers instead of
    /// receiving fresh memory each call. Compiled outputs are written
    /// straight into 16-byte aligned buffers; anything else is copied in.
    /// On error the buffers' contents are unspecified.
    pub fn call_into(&self, inputs: &[Tensor], outputs: &mut [TensorMut<'_>]) -> Result<(), Error> {
        let types: Vec<TensorType> = inputs.iter().map(Tensor::ty).collect();
        if self.inner.cfg.jit {
            return self.executable_for(&types)?.run_into(inputs, outputs);
        }
        let c = self.concrete_for(&types)?;
        crate::staged::copy_outputs(interp::run(&c.optimized, inputs)?, outputs)
    }

    /// The executable for concrete input types, compiling it on first use.
    fn executable_for(&self, types: &[TensorType]) -> Result<Runner, Error> {
        let id = Arc::as_ptr(&self.inner) as usize;
        if COMPILING.with(|t| t.borrow().iter().any(|(i, k)| *i == id && k == types)) {
            let cfg = &self.inner.cfg;
            return Err(Error::invalid(format!(
                "function '{}' (defined at {}) was called while being traced or compiled for \
                 the same argument types, by its own body or by a stateless callback the compiler \
                 runs ahead on constants: a function cannot call itself then (use a loop; make \
                 such a callback stateful)",
                cfg.name, cfg.site
            )));
        }
        let slot = {
            let mut exes = self
                .inner
                .executables
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            slot_of(&mut exes, types)
        };
        let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = &*slot {
            return Ok(r.clone());
        }
        // (Before the trace: it folds stateless callbacks too. A call of
        // this function from one of them is refused above, before it
        // would wait for this slot.)
        COMPILING.with(|t| t.borrow_mut().push((id, types.to_vec())));
        let _compiling = Tracing(&COMPILING);
        let c = self.concrete_for(types)?;
        let graph = c.optimized.specialize(types)?;
        let runner = Runner::build(&graph, &self.inner.cfg.jit_options, &self.inner.compiles)?;
        *slot = Some(runner.clone());
        Ok(runner)
    }

    /// Compiles ahead of execution, with no data: every spec with a static
    /// shape is compiled now (a `JitIncompatible` error surfaces here);
    /// specs with unknown dims compile once per concrete shape on call.
    pub fn compile(&self, specs: &[TensorSpec]) -> Result<CompiledFunction, Error> {
        let types: Vec<TensorType> = specs.iter().map(TensorSpec::ty).collect();
        let exe = if types.iter().all(|t| t.shape.is_static()) {
            Some(self.executable_for(&types)?)
        } else {
            let c = self.concrete_for(&types)?;
            // Report what can never compile (e.g. py_function) now.
            tensorlift_compiler::check_compilable(&c.optimized)?;
            None
        };
        Ok(CompiledFunction {
            function: Function {
                inner: self.inner.clone(),
            },
            specs: specs.to_vec(),
            exe,
        })
    }

    /// The IR text for inputs of `specs` at `stage` (like TensorFlow's
    /// `experimental_get_compiler_ir`). The fused and Cranelift stages
    /// compile (and cache) the function for `specs`, which must be static.
    pub fn compiler_ir(&self, specs: &[TensorSpec], stage: IrStage) -> Result<String, Error> {
        let c = self.concrete(specs)?;
        Ok(match stage {
            IrStage::Traced => tensorlift_ir::text::print(&c.traced),
            IrStage::Optimized => tensorlift_ir::text::print(&c.optimized),
            IrStage::Fused | IrStage::Cranelift => {
                let types: Vec<TensorType> = specs.iter().map(TensorSpec::ty).collect();
                let runner = self.executable_for(&types)?;
                let exe = runner.executable().ok_or_else(|| {
                    Error::FailedPrecondition(tensorlift_ir::Detail::msg(
                        "the program is split at a callback whose output shape is only known at run time; the code after it is compiled per shape when called",
                    ))
                })?;
                if stage == IrStage::Fused {
                    exe.fused_ir()
                } else {
                    exe.cranelift_ir()
                }
            }
        })
    }
}

/// A function compiled ahead of execution for an input signature. Cheap to
/// clone and `Send + Sync`: many threads may call it at once.
#[derive(Debug, Clone)]
pub struct CompiledFunction {
    function: Function,
    specs: Vec<TensorSpec>,
    exe: Option<Runner>,
}

impl Clone for Function {
    fn clone(&self) -> Self {
        Function {
            inner: self.inner.clone(),
        }
    }
}

impl CompiledFunction {
    /// Runs the native code on `inputs`, which must match the specs,
    /// writing output `k` into `outputs[k]` (see [`Function::call_into`]).
    pub fn call_into(&self, inputs: &[Tensor], outputs: &mut [TensorMut<'_>]) -> Result<(), Error> {
        self.check_inputs(inputs)?;
        match &self.exe {
            Some(e) => e.run_into(inputs, outputs),
            None => self.function.call_into(inputs, outputs),
        }
    }

    /// Runs the native code on `inputs`, which must match the specs.
    pub fn call(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, Error> {
        self.check_inputs(inputs)?;
        match &self.exe {
            Some(e) => e.run(inputs),
            None => {
                let types: Vec<TensorType> = inputs.iter().map(Tensor::ty).collect();
                self.function.executable_for(&types)?.run(inputs)
            }
        }
    }

    /// An `InvalidArgument` unless `inputs` match the specs.
    fn check_inputs(&self, inputs: &[Tensor]) -> Result<(), Error> {
        let cfg = &self.function.inner.cfg;
        if inputs.len() != self.specs.len() {
            return Err(Error::invalid(format!(
                "compiled function '{}' (defined at {}) takes {} input(s), but {} were given",
                cfg.name,
                cfg.site,
                self.specs.len(),
                inputs.len()
            )));
        }
        for (i, (s, t)) in self.specs.iter().zip(inputs).enumerate() {
            if s.dtype != t.dtype() || !s.shape.accepts(t.shape()) {
                return Err(Error::invalid(format!(
                    "input {i} of compiled function '{}' (defined at {}) is {}{:?}, but it was compiled for {}",
                    cfg.name,
                    cfg.site,
                    t.dtype().short_name(),
                    t.shape(),
                    s.ty()
                )));
            }
        }
        Ok(())
    }

    /// The executable, when the specs were static and the program is not
    /// split at a callback of unknown output shape.
    pub fn executable(&self) -> Option<&Executable> {
        self.exe.as_ref().and_then(|r| r.executable()).map(|e| &**e)
    }

    /// The function it came from (its counters, its caches).
    pub fn function(&self) -> &Function {
        &self.function
    }
}
