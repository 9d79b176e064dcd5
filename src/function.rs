//! `function()`: trace a Rust closure into a graph once per input signature,
//! optimize it, and run it.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tensorlift_ir::{DType, Error, Graph, Shape, Site, TensorType};
use tensorlift_runtime::{Tensor, interp};

use crate::trace::{Sym, Tracer};

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
}

/// What a traced body may return: one value, a tuple, an array or a vector.
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
impl IntoOutputs for (Sym, Sym) {
    fn into_outputs(self) -> Vec<Sym> {
        vec![self.0, self.1]
    }
}
impl IntoOutputs for (Sym, Sym, Sym) {
    fn into_outputs(self) -> Vec<Sym> {
        vec![self.0, self.1, self.2]
    }
}
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

/// A traceable function: the Rust counterpart of `tf.function`.
pub struct Function {
    name: String,
    body: Arc<Body>,
    arity: Option<usize>,
    input_signature: Option<Vec<TensorSpec>>,
    cache: Mutex<HashMap<Vec<TensorType>, Arc<ConcreteFunction>>>,
    traces: AtomicUsize,
    site: Site,
}

impl std::fmt::Debug for Function {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Function")
            .field("name", &self.name)
            .field("input_signature", &self.input_signature)
            .finish()
    }
}

/// Makes a [`Function`] from a closure over symbolic values, like
/// `tf.function`. The closure takes one [`Sym`] per input (up to six; annotate
/// them, `|x: Sym|`, so Rust can tell the arity) or a `&[Sym]`, and returns a `Sym`, a tuple, an array or a `Vec<Sym>`.
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
    Function {
        name: "function".into(),
        body: Arc::new(move |args: &[Sym]| body.trace(args)),
        arity,
        input_signature: None,
        cache: Mutex::new(HashMap::new()),
        traces: AtomicUsize::new(0),
        site: Site::caller(),
    }
}

impl Function {
    /// Names the function (the graph's name in IR dumps).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Fixes (or relaxes, with `None` dims) the input types: the function is
    /// traced once for the signature, and calls with other types are errors.
    pub fn input_signature(mut self, specs: Vec<TensorSpec>) -> Self {
        self.input_signature = Some(specs);
        self
    }

    /// How many times the body has been traced (once per new signature).
    pub fn trace_count(&self) -> usize {
        self.traces.load(Ordering::Relaxed)
    }

    /// The input types a call with `specs` is traced for: the input signature
    /// when one is set (after checking `specs` against it), else `specs`.
    fn signature_for(&self, specs: &[TensorType]) -> Result<Vec<TensorType>, Error> {
        let Some(sig) = &self.input_signature else {
            return Ok(specs.to_vec());
        };
        if sig.len() != specs.len() {
            return Err(Error::invalid(format!(
                "function '{}' has an input_signature of {} tensor(s), but {} were given",
                self.name,
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
                    self.name,
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
        if let Some(c) = self.lock_cache().get(&key) {
            return Ok(c.clone());
        }
        let traced = self.trace(&key)?;
        let mut optimized = traced.clone();
        interp::optimize(&mut optimized)?;
        let c = Arc::new(ConcreteFunction { traced, optimized });
        self.traces.fetch_add(1, Ordering::Relaxed);
        Ok(self.lock_cache().entry(key).or_insert(c).clone())
    }

    fn lock_cache(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<Vec<TensorType>, Arc<ConcreteFunction>>> {
        // A panic cannot happen while the lock is held; recover if it did.
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn trace(&self, types: &[TensorType]) -> Result<Graph, Error> {
        if let Some(n) = self.arity
            && n != types.len()
        {
            return Err(Error::invalid(format!(
                "function '{}' (defined at {}) takes {n} argument(s), but {} were given",
                self.name,
                self.site,
                types.len()
            )));
        }
        let tracer = Tracer::new(&self.name);
        let args: Vec<Sym> = types
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let name = self
                    .input_signature
                    .as_ref()
                    .and_then(|s| s[i].name.clone())
                    .or_else(|| Some(format!("arg{i}")));
                tracer.parameter(i, t.clone(), name, self.site.clone())
            })
            .collect();
        let body = self.body.clone();
        let outputs = catch_unwind(AssertUnwindSafe(|| body(&args))).map_err(|p| {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Error::invalid(format!(
                "the body of function '{}' (defined at {}) panicked while tracing: {msg}",
                self.name, self.site
            ))
        })?;
        drop(args);
        tracer.finish(outputs)
    }

    /// Runs the function: traces (once per input signature), optimizes and
    /// interprets.
    pub fn call(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, Error> {
        let types: Vec<TensorType> = inputs.iter().map(Tensor::ty).collect();
        let c = self.concrete_for(&types)?;
        interp::run(&c.optimized, inputs)
    }

    /// The IR text for inputs of `specs` at `stage` (like TensorFlow's
    /// `experimental_get_compiler_ir`).
    pub fn compiler_ir(&self, specs: &[TensorSpec], stage: IrStage) -> Result<String, Error> {
        let c = self.concrete(specs)?;
        Ok(tensorlift_ir::text::print(match stage {
            IrStage::Traced => &c.traced,
            IrStage::Optimized => &c.optimized,
        }))
    }
}
