//! Tracing Python functions: symbolic tensors, traced functions, control
//! flow and callbacks.
//!
//! A Python body is called by Rust while a [`tensorlift::Function`] traces
//! it, and its ops go through [`crate::ops::apply`] at the Python frame
//! that made them ([`Site::scoped`]). An exception the body raises must
//! not unwind through Python frames: a region body (a loop's, a branch's)
//! keeps it in [`PENDING`], fails the trace and returns; the native call
//! that ran the region raises it again in Python. Only the outermost body,
//! called by Rust alone, unwinds (without the panic hook) to the trace's
//! `catch_unwind`; the caller then raises the kept exception.

use std::cell::RefCell;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use tensorlift::ir::{CallbackKind, Site};
use tensorlift::runtime::eager::PyTensor;
use tensorlift::{
    DType, Error, Function, IrStage, Shape, Sym, Tensor, TensorSpec, Tracer, function,
};

use crate::{ops, raise};

thread_local! {
    /// The exception a Python body raised while Rust was tracing it.
    static PENDING: RefCell<Option<PyErr>> = const { RefCell::new(None) };
}

fn keep_pending(e: PyErr) {
    PENDING.with(|p| {
        let mut p = p.borrow_mut();
        if p.is_none() {
            *p = Some(e);
        }
    });
}

fn take_pending() -> Option<PyErr> {
    PENDING.with(|p| p.borrow_mut().take())
}

/// A symbolic tensor of a trace (`tensorlift._native.Sym`). A trace
/// belongs to the thread that runs it; Python may keep the object longer
/// and let another thread's garbage collection drop it, so the value is
/// only ever touched on its own thread: dropped elsewhere, it waits in
/// [`ORPHANS`] until its thread makes or drops another one, or ends.
#[pyclass(name = "Sym", module = "tensorlift._native", frozen)]
pub struct PySym {
    s: ThreadBound,
}

struct ThreadBound {
    sym: std::mem::ManuallyDrop<Sym>,
    thread: std::thread::ThreadId,
}

// SAFETY: the `Sym` (an `Rc`) is only reached through `PySym::sym`, which
// checks that the caller is on the thread that made it, and only dropped
// there (`Drop` leaks it on any other thread); nothing else touches it.
unsafe impl Send for ThreadBound {}
// SAFETY: as for `Send`: shared access goes through the same check.
unsafe impl Sync for ThreadBound {}

impl Drop for ThreadBound {
    fn drop(&mut self) {
        if std::thread::current().id() == self.thread {
            // SAFETY: dropped once, here, on its own thread.
            unsafe { std::mem::ManuallyDrop::drop(&mut self.sym) }
            drop_orphans();
        } else {
            // SAFETY: taken once (the field is not used again); the value
            // moves to the queue untouched, for its own thread to drop.
            let sym = unsafe { std::mem::ManuallyDrop::take(&mut self.sym) };
            let mut orphans = lock_orphans();
            if orphans.dead.contains(&self.thread) {
                // Its thread has ended: no clone of its `Rc` is used any
                // more but through here, under this lock.
                drop(sym);
                return;
            }
            orphans.queue.push((self.thread, Orphan { _sym: sym }));
            HAS_ORPHANS.store(true, std::sync::atomic::Ordering::Release);
        }
    }
}

/// A `Sym` dropped on another thread than its own, waiting for its own.
struct Orphan {
    _sym: Sym,
}

/// Whether [`ORPHANS`] may hold any (a load instead of a lock per symbol).
static HAS_ORPHANS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

// SAFETY: an orphan is only moved between threads, never used, and
// dropped on the thread that made it (`drop_orphans`), where the other
// clones of its `Rc` live.
unsafe impl Send for Orphan {}

/// Symbols Python dropped on another thread than their own (cyclic
/// garbage collected there: two threads taking tape gradients leaked
/// ~0.5 KB a gradient, a graph context each), by owning thread; and the
/// threads that have ended, whose symbols are dropped wherever they die,
/// under the lock.
struct Orphans {
    queue: Vec<(std::thread::ThreadId, Orphan)>,
    dead: std::collections::HashSet<std::thread::ThreadId>,
}

static ORPHANS: std::sync::Mutex<Option<Orphans>> = std::sync::Mutex::new(None);

fn lock_orphans() -> OrphansGuard {
    let mut g = ORPHANS.lock().unwrap_or_else(|p| p.into_inner());
    g.get_or_insert_with(|| Orphans {
        queue: Vec::new(),
        dead: std::collections::HashSet::new(),
    });
    OrphansGuard(g)
}

/// [`ORPHANS`], locked and made.
struct OrphansGuard(std::sync::MutexGuard<'static, Option<Orphans>>);

impl std::ops::Deref for OrphansGuard {
    type Target = Orphans;
    fn deref(&self) -> &Orphans {
        self.0
            .as_ref()
            .unwrap_or_else(|| unreachable!("made by lock_orphans"))
    }
}

impl std::ops::DerefMut for OrphansGuard {
    fn deref_mut(&mut self) -> &mut Orphans {
        self.0
            .as_mut()
            .unwrap_or_else(|| unreachable!("made by lock_orphans"))
    }
}

thread_local! {
    /// Drops this thread's orphans when the thread ends.
    static ORPHAN_SWEEPER: OrphanSweeper = const { OrphanSweeper };
}

struct OrphanSweeper;

impl Drop for OrphanSweeper {
    fn drop(&mut self) {
        let me = std::thread::current().id();
        let mut orphans = lock_orphans();
        let queue = std::mem::take(&mut orphans.queue);
        let (mine, others): (Vec<_>, Vec<_>) = queue.into_iter().partition(|(t, _)| *t == me);
        orphans.queue = others;
        orphans.dead.insert(me);
        // (Under the lock: a symbol of this thread dropped elsewhere from
        // now on is dropped under it too.)
        drop(mine);
    }
}

/// How many symbols wait in [`ORPHANS`] (for tests).
#[pyfunction]
fn orphaned_syms() -> usize {
    lock_orphans().queue.len()
}

/// Drops the orphans of the calling thread (on it, where they belong).
fn drop_orphans() {
    if !HAS_ORPHANS.load(std::sync::atomic::Ordering::Acquire) {
        return;
    }
    let me = std::thread::current().id();
    let mine: Vec<Orphan> = {
        let mut all = lock_orphans();
        if all.queue.is_empty() {
            HAS_ORPHANS.store(false, std::sync::atomic::Ordering::Release);
            return;
        }
        let queue = std::mem::take(&mut all.queue);
        let (mine, others): (Vec<_>, Vec<_>) = queue.into_iter().partition(|(t, _)| *t == me);
        all.queue = others;
        mine.into_iter().map(|(_, o)| o).collect()
    };
    drop(mine);
}

impl PySym {
    fn new(s: Sym) -> Self {
        // (Registers the sweeper of this thread's orphans at its end.)
        ORPHAN_SWEEPER.with(|_| ());
        drop_orphans();
        PySym {
            s: ThreadBound {
                sym: std::mem::ManuallyDrop::new(s),
                thread: std::thread::current().id(),
            },
        }
    }

    /// The value, on the thread that traced it.
    fn sym(&self) -> PyResult<&Sym> {
        if std::thread::current().id() == self.s.thread {
            Ok(&self.s.sym)
        } else {
            Err(pyo3::exceptions::PyRuntimeError::new_err(
                "a symbolic tensor was used on a thread other than the one tracing its function",
            ))
        }
    }
}

impl std::fmt::Debug for PySym {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.sym() {
            Ok(s) => write!(f, "{s:?}"),
            Err(_) => f.write_str("Sym(<other thread>)"),
        }
    }
}

#[pymethods]
impl PySym {
    /// The dtype's name, or None after a trace error.
    /// Which value this is (its trace and index), hashable: two symbols of
    /// one value have one key.
    #[getter]
    fn key(&self) -> PyResult<Option<(usize, usize)>> {
        Ok(self.sym()?.key())
    }

    #[getter]
    fn dtype(&self) -> PyResult<Option<&'static str>> {
        Ok(self.sym()?.dtype().map(DType::name))
    }

    /// The dimensions (None where unknown), or None when the rank is unknown.
    #[getter]
    fn shape(&self) -> PyResult<Option<Vec<Option<usize>>>> {
        Ok(self
            .sym()?
            .shape()
            .and_then(|s| s.dims().map(<[_]>::to_vec)))
    }

    fn __repr__(&self) -> String {
        format!("{self:?}")
    }
}

/// A `TensorSpec` from Python: dtype name, dimensions, name.
type PySpec = (String, Option<Vec<Option<usize>>>, Option<String>);

/// A Python frame as a site: `(file, line)`.
type PySite = (String, u32);

fn site_of(s: &PySite) -> Site {
    Site::at(&s.0, s.1, 1)
}

fn syms(v: &[PyRef<'_, PySym>]) -> PyResult<Vec<Sym>> {
    v.iter().map(|s| s.sym().cloned()).collect()
}

fn wrap_syms(py: Python<'_>, v: Vec<Sym>) -> PyResult<Vec<Py<PySym>>> {
    v.into_iter().map(|s| Py::new(py, PySym::new(s))).collect()
}

/// Raises the first error of `tracer`'s trace, if any: the trace failed at
/// the op just built, and Python should see it there.
fn check(py: Python<'_>, like: &Sym) -> PyResult<()> {
    check_trace(py, &like.graph())
}

fn check_trace(py: Python<'_>, tracer: &Tracer) -> PyResult<()> {
    if let Some(e) = take_pending() {
        return Err(e);
    }
    match tracer.error() {
        Some(e) => Err(raise(py, e)),
        None => Ok(()),
    }
}

/// Builds op `name` on symbolic `inputs` at `site`.
#[pyfunction]
#[pyo3(signature = (name, inputs, site, attrs=None))]
fn sym_apply(
    py: Python<'_>,
    name: &str,
    inputs: Vec<PyRef<'_, PySym>>,
    site: PySite,
    attrs: Option<&Bound<'_, PyDict>>,
) -> PyResult<Vec<Py<PySym>>> {
    let a = ops::Attrs::from_dict(name, attrs)?;
    let args = syms(&inputs)?;
    let first = args
        .first()
        .cloned()
        .ok_or_else(|| raise(py, Error::invalid(format!("{name} needs a tensor"))))?;
    let out =
        Site::scoped(site_of(&site), || ops::apply(name, &args, &a)).map_err(|e| raise(py, e))?;
    check(py, &first)?;
    wrap_syms(py, out)
}

/// A constant in the trace `like` belongs to (None: the active trace).
#[pyfunction]
fn sym_constant(
    py: Python<'_>,
    like: Option<PyRef<'_, PySym>>,
    value: PyRef<'_, PyTensor>,
    site: PySite,
) -> PyResult<Py<PySym>> {
    let tracer = match &like {
        Some(l) => l.sym()?.graph(),
        None => Tracer::active()
            .ok_or_else(|| raise(py, Error::invalid("no function is being traced")))?,
    };
    let s = Site::scoped(site_of(&site), || tracer.constant(&value.t));
    check(py, &s)?;
    Py::new(py, PySym::new(s))
}

/// `x` with its shape declared (a callback's result; TensorFlow's
/// `set_shape`).
#[pyfunction]
fn sym_set_shape(
    py: Python<'_>,
    x: PyRef<'_, PySym>,
    dims: Vec<Option<usize>>,
    site: PySite,
) -> PyResult<Py<PySym>> {
    let x = x.sym()?.clone();
    let s = Site::scoped(site_of(&site), || x.set_shape(&dims));
    check(py, &s)?;
    Py::new(py, PySym::new(s))
}

/// True while a function is being traced on this thread.
#[pyfunction]
fn tracing() -> bool {
    Tracer::active().is_some()
}

/// How many values the trace ops go to now holds (None when nothing is
/// traced): where a gradient tape begins recording (see `vjp_values`).
#[pyfunction]
fn trace_position() -> Option<usize> {
    Tracer::active().map(|t| t.position())
}

/// Calls Python `f` on symbolic values and reads back a list of them; an
/// exception is kept in [`PENDING`] and `None` returned.
fn call_body(py: Python<'_>, f: &Bound<'_, PyAny>, args: &[Sym]) -> Option<Vec<Sym>> {
    let run = || -> PyResult<Vec<Sym>> {
        let a = wrap_syms(py, args.to_vec())?;
        let out = f.call1((PyList::new(py, a)?,))?;
        let out: Vec<PyRef<'_, PySym>> = out.extract()?;
        syms(&out)
    };
    match run() {
        Ok(v) => Some(v),
        Err(e) => {
            keep_pending(e);
            None
        }
    }
}

/// Fails the trace of `like` for an exception kept in [`PENDING`].
fn fail_for_python(like: &Sym) {
    like.graph().fail(Error::invalid(
        "a Python function traced by tensorlift raised an exception",
    ));
}

/// In a region body: `f`'s results, or — after an exception — the trace
/// failed and `fallback` returned, so the region closes.
fn region_body(py: Python<'_>, f: &Bound<'_, PyAny>, args: &[Sym], fallback: Vec<Sym>) -> Vec<Sym> {
    match call_body(py, f, args) {
        Some(v) => v,
        None => {
            if let Some(a) = args.first().or(fallback.first()) {
                fail_for_python(a);
            }
            fallback
        }
    }
}

/// `tf.while_loop` on symbolic carries.
#[pyfunction]
fn while_loop(
    py: Python<'_>,
    cond: Bound<'_, PyAny>,
    body: Bound<'_, PyAny>,
    init: Vec<PyRef<'_, PySym>>,
    site: PySite,
) -> PyResult<Vec<Py<PySym>>> {
    let init = syms(&init)?;
    let first = init.first().cloned().ok_or_else(|| {
        raise(
            py,
            Error::invalid("while_loop needs at least one loop variable"),
        )
    })?;
    let out = Site::scoped(site_of(&site), || {
        tensorlift::while_loop(
            |c| {
                let fallback = vec![c[0].clone()];
                region_body(py, &cond, c, fallback)
                    .into_iter()
                    .next()
                    .unwrap_or_else(|| c[0].clone())
            },
            |c| region_body(py, &body, c, c.to_vec()),
            &init,
        )
    });
    check(py, &first)?;
    wrap_syms(py, out)
}

/// `tf.switch_case` / `tf.cond` on symbolic operands: `branches[index]`.
#[pyfunction]
fn switch(
    py: Python<'_>,
    index: PyRef<'_, PySym>,
    branches: Vec<Bound<'_, PyAny>>,
    operands: Vec<PyRef<'_, PySym>>,
    site: PySite,
) -> PyResult<Vec<Py<PySym>>> {
    let operands = syms(&operands)?;
    let idx = index.sym()?.clone();
    let closures: Vec<Box<tensorlift::Branch<'_>>> = branches
        .iter()
        .map(|b| {
            let idx = idx.clone();
            Box::new(move |args: &[Sym]| match call_body(py, b, args) {
                Some(v) => v,
                None => {
                    fail_for_python(&idx);
                    Vec::new()
                }
            }) as Box<tensorlift::Branch<'_>>
        })
        .collect();
    let refs: Vec<&tensorlift::Branch<'_>> = closures.iter().map(|b| &**b).collect();
    let out = Site::scoped(site_of(&site), || {
        tensorlift::switch(&idx, &refs, &operands)
    });
    check(py, &idx)?;
    wrap_syms(py, out)
}

/// `tf.custom_gradient`: `f(inputs)` differentiated by
/// `vjp(inputs, outputs, cotangents)`.
#[pyfunction]
fn custom_vjp(
    py: Python<'_>,
    f: Bound<'_, PyAny>,
    vjp: Bound<'_, PyAny>,
    inputs: Vec<PyRef<'_, PySym>>,
    site: PySite,
) -> PyResult<Vec<Py<PySym>>> {
    let inputs = syms(&inputs)?;
    let first = inputs
        .first()
        .cloned()
        .ok_or_else(|| raise(py, Error::invalid("custom_gradient needs an input tensor")))?;
    let out = Site::scoped(site_of(&site), || {
        tensorlift::custom_vjp(
            |xs| region_body(py, &f, xs, Vec::new()),
            |xs, ys, cts| {
                let mut all = xs.to_vec();
                all.extend_from_slice(ys);
                all.extend_from_slice(cts);
                region_body(py, &vjp, &all, Vec::new())
            },
            &inputs,
        )
    });
    check(py, &first)?;
    wrap_syms(py, out)
}

/// `Jᵀ·ct` of Python `f` at `primals`, inlined in the trace under way
/// (a gradient tape's `gradient` inside a function, nested tapes).
#[pyfunction]
fn vjp(
    py: Python<'_>,
    f: Bound<'_, PyAny>,
    primals: Vec<PyRef<'_, PySym>>,
    cotangents: Vec<PyRef<'_, PySym>>,
    site: PySite,
) -> PyResult<Vec<Py<PySym>>> {
    let primals = syms(&primals)?;
    let cts = syms(&cotangents)?;
    let first = primals
        .first()
        .cloned()
        .ok_or_else(|| raise(py, Error::invalid("a gradient needs a source tensor")))?;
    let out = Site::scoped(site_of(&site), || {
        tensorlift::vjp_in_trace(|xs| region_body(py, &f, xs, Vec::new()), &primals, &cts)
    });
    check(py, &first)?;
    wrap_syms(py, out)
}

/// The cotangents of `targets` with respect to `sources`, values of the
/// trace under way, added to it (a gradient tape used inside a function):
/// every path through what the tape recorded counts, through loops,
/// branches and their captures; values made outside `spans` (ranges of
/// `trace_position`s) and the `unrecorded` ones are constants. None for a
/// source no target depends on.
#[pyfunction]
#[pyo3(signature = (targets, sources, cotangents, site, spans=None, unrecorded=Vec::new()))]
fn vjp_values(
    py: Python<'_>,
    targets: Vec<PyRef<'_, PySym>>,
    sources: Vec<PyRef<'_, PySym>>,
    cotangents: Vec<PyRef<'_, PySym>>,
    site: PySite,
    spans: Option<Vec<(usize, usize)>>,
    unrecorded: Vec<PyRef<'_, PySym>>,
) -> PyResult<Vec<Option<Py<PySym>>>> {
    let targets = syms(&targets)?;
    let sources = syms(&sources)?;
    let cts = syms(&cotangents)?;
    let recorded = tensorlift::Recorded {
        spans,
        unrecorded: syms(&unrecorded)?,
    };
    let first = targets
        .first()
        .cloned()
        .ok_or_else(|| raise(py, Error::invalid("a gradient needs a target")))?;
    let out = Site::scoped(site_of(&site), || {
        tensorlift::vjp_of_values_recorded(&targets, &sources, &cts, &recorded)
    });
    check(py, &first)?;
    out.into_iter()
        .map(|g| g.map(|s| Py::new(py, PySym::new(s))).transpose())
        .collect()
}

fn dtypes(names: &[String]) -> PyResult<Vec<DType>> {
    names
        .iter()
        .map(|n| {
            DType::from_name(n).ok_or_else(|| {
                pyo3::exceptions::PyTypeError::new_err(format!("unknown dtype '{n}'"))
            })
        })
        .collect()
}

/// A host callback (`numpy_function`, `py_func`, `py_function`) in the
/// trace of `inputs`: its results and the target it calls (the name the
/// graph's text gives it).
#[pyfunction]
#[pyo3(signature = (kind, func, inputs, tout, site, name=None, shapes=None, stateful=true))]
#[allow(
    clippy::too_many_arguments,
    reason = "TensorFlow's arguments plus a site"
)]
fn callback(
    py: Python<'_>,
    kind: &str,
    func: Py<PyAny>,
    inputs: Vec<PyRef<'_, PySym>>,
    tout: Vec<String>,
    site: PySite,
    name: Option<String>,
    shapes: Option<Vec<Option<Vec<Option<usize>>>>>,
    stateful: bool,
) -> PyResult<(Vec<Py<PySym>>, Option<String>)> {
    let args = syms(&inputs)?;
    let tracer = match args.first() {
        Some(a) => a.graph(),
        None => Tracer::active().ok_or_else(|| {
            raise(
                py,
                Error::invalid(format!(
                    "{kind} without inputs runs only inside a traced function"
                )),
            )
        })?,
    };
    let tout = dtypes(&tout)?;
    let kind = match kind {
        "numpy_function" => CallbackKind::NumpyFunction,
        "py_func" => CallbackKind::PyFunc,
        "py_function" => CallbackKind::PyFunction,
        other => {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "unknown callback kind '{other}'"
            )));
        }
    };
    let refs: Vec<&Sym> = args.iter().collect();
    let out = Site::scoped(site_of(&site), || match kind {
        CallbackKind::PyFunction => {
            let out = match (&name, stateful) {
                (_, false) => tracer.py_function_replayed(name.as_deref(), func, &refs, &tout),
                (Some(name), true) => tracer.py_function_with(name, func, &refs, &tout),
                (None, true) => tracer.py_function(func, &refs, &tout),
            };
            match &shapes {
                Some(shapes) => out
                    .iter()
                    .zip(shapes)
                    .map(|(o, s)| match s {
                        Some(d) => o.set_shape(d),
                        None => o.clone(),
                    })
                    .collect(),
                None => out,
            }
        }
        CallbackKind::NumpyFunction | CallbackKind::PyFunc | CallbackKind::HostFn => {
            let shapes: Vec<Shape> = match &shapes {
                Some(s) => s
                    .iter()
                    .map(|d| match d {
                        Some(d) => Shape::Ranked(d.clone()),
                        None => Shape::Unranked,
                    })
                    .collect(),
                None => vec![Shape::Unranked; tout.len()],
            };
            let label = name.clone().unwrap_or_else(|| kind.name().to_string());
            tracer.numpy_function_with(kind, &label, func, &refs, &tout, &shapes, stateful)
        }
    });
    check_trace(py, &tracer)?;
    let target = tracer.last_callback_target();
    Ok((wrap_syms(py, out)?, target))
}

fn spec_of(py_spec: &PySpec) -> PyResult<TensorSpec> {
    let d = dtypes(std::slice::from_ref(&py_spec.0))?[0];
    let mut s = match &py_spec.1 {
        Some(dims) => TensorSpec::new(d, dims),
        None => TensorSpec {
            dtype: d,
            shape: Shape::Unranked,
            name: None,
        },
    };
    if let Some(n) = &py_spec.2 {
        s = s.named(n.clone());
    }
    Ok(s)
}

/// A traced function (`tensorlift._native.Function`): a Rust
/// [`Function`] whose body calls a Python function on symbolic tensors.
#[pyclass(name = "Function", module = "tensorlift._native", frozen)]
pub struct PyFunction {
    f: Function,
}

impl std::fmt::Debug for PyFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.f.fmt(f)
    }
}

/// Runs `op` on `f`, raising what a Python body raised while it was traced
/// before any error of the trace.
fn run<T>(py: Python<'_>, op: impl FnOnce() -> Result<T, Error> + Send) -> PyResult<T>
where
    T: Send,
{
    let r = py.detach(op);
    if let Some(e) = take_pending() {
        return Err(e);
    }
    r.map_err(|e| raise(py, e))
}

#[pymethods]
impl PyFunction {
    /// `body(list_of_syms) -> list_of_syms`.
    #[new]
    #[pyo3(signature = (body, name, site, jit_compile=false, input_signature=None))]
    fn new(
        body: Py<PyAny>,
        name: String,
        site: PySite,
        jit_compile: bool,
        input_signature: Option<Vec<PySpec>>,
    ) -> PyResult<Self> {
        let traced = move |args: &[Sym]| -> Vec<Sym> {
            let out = Python::attach(|py| call_body(py, body.bind(py), args));
            match out {
                Some(v) => v,
                // The exception is in PENDING; end this trace (Rust frames
                // only up to Function's catch_unwind, no panic hook).
                None => std::panic::resume_unwind(Box::new(
                    "a Python function traced by tensorlift raised an exception",
                )),
            }
        };
        let mut f = Site::scoped(site_of(&site), || function(traced))
            .name(name)
            .jit_compile(jit_compile);
        if let Some(sig) = input_signature {
            f = f.input_signature(sig.iter().map(spec_of).collect::<PyResult<_>>()?);
        }
        Ok(PyFunction { f })
    }

    /// Runs the function on tensors (tracing and compiling on the first
    /// call of a signature), without the GIL.
    fn __call__(
        &self,
        py: Python<'_>,
        inputs: Vec<PyRef<'_, PyTensor>>,
    ) -> PyResult<Vec<PyTensor>> {
        let ts: Vec<Tensor> = inputs.iter().map(|t| t.t.clone()).collect();
        let out = run(py, || self.f.call(&ts))?;
        Ok(out.into_iter().map(|t| PyTensor { t }).collect())
    }

    /// Runs the function on tensors writing output `k` into the NumPy
    /// array `outputs[k]` ([`crate::OutBuffers`] checks them), without the
    /// GIL.
    fn call_into(
        &self,
        py: Python<'_>,
        inputs: Vec<PyRef<'_, PyTensor>>,
        outputs: Vec<Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let ts: Vec<Tensor> = inputs.iter().map(|t| t.t.clone()).collect();
        let mut bufs = crate::OutBuffers::check(&outputs, &ts)?;
        let mut outs = bufs.views().map_err(|e| raise(py, e))?;
        run(py, || self.f.call_into(&ts, &mut outs))
    }

    /// A call on `args` when each is a tensor (eager `tl.Tensor` or
    /// native) or a NumPy array: the results, or None when an argument is
    /// anything else (the Python side converts it and calls again).
    fn call_fast(
        &self,
        py: Python<'_>,
        args: &Bound<'_, pyo3::types::PyTuple>,
    ) -> PyResult<Option<Vec<PyTensor>>> {
        let mut ts = Vec::with_capacity(args.len());
        for a in args.iter() {
            // Arrays before attributes: a failed getattr formats an
            // AttributeError, which costs more than the call.
            if let Ok(t) = a.cast::<PyTensor>() {
                ts.push(t.get().t.clone());
            } else if a.cast::<numpy::PyUntypedArray>().is_ok() {
                ts.push(crate::to_tensor(&a, None)?.t);
            } else if let Ok(v) = a.getattr(pyo3::intern!(py, "_v"))
                && let Ok(t) = v.cast::<PyTensor>()
            {
                ts.push(t.get().t.clone());
            } else {
                return Ok(None);
            }
        }
        let out = run(py, || self.f.call(&ts))?;
        Ok(Some(out.into_iter().map(|t| PyTensor { t }).collect()))
    }

    /// The function's IR at `stage` for inputs of `specs`.
    fn compiler_ir(&self, py: Python<'_>, specs: Vec<PySpec>, stage: &str) -> PyResult<String> {
        let specs: Vec<TensorSpec> = specs.iter().map(spec_of).collect::<PyResult<_>>()?;
        let stage = match stage {
            "hlo" | "traced" => IrStage::Traced,
            "optimized_hlo" | "optimized" => IrStage::Optimized,
            "fused" => IrStage::Fused,
            "cranelift" => IrStage::Cranelift,
            other => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "unknown stage '{other}': one of hlo, optimized_hlo, fused, cranelift"
                )));
            }
        };
        run(py, || self.f.compiler_ir(&specs, stage))
    }

    /// Traces (and compiles, under jit_compile) for `specs` ahead of a call.
    fn compile(&self, py: Python<'_>, specs: Vec<PySpec>) -> PyResult<()> {
        let specs: Vec<TensorSpec> = specs.iter().map(spec_of).collect::<PyResult<_>>()?;
        run(py, || self.f.compile(&specs).map(|_| ()))
    }

    /// How many signatures have been traced.
    #[getter]
    fn trace_count(&self) -> usize {
        self.f.trace_count()
    }

    /// How many signatures have been compiled.
    #[getter]
    fn compile_count(&self) -> usize {
        self.f.compile_count()
    }

    /// `jax.grad`-style derived function: `kind` is grad, value_and_grad,
    /// vjp or jvp, with respect to inputs `wrt`.
    fn derive(&self, kind: &str, wrt: Vec<usize>) -> PyResult<PyFunction> {
        let f = match kind {
            "grad" => self.f.grad(&wrt),
            "value_and_grad" => self.f.value_and_grad(&wrt),
            "vjp" => self.f.vjp(&wrt),
            "jvp" => self.f.jvp(&wrt),
            other => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "unknown transformation '{other}'"
                )));
            }
        };
        Ok(PyFunction { f })
    }
}

/// Adds the tracing functions to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(sym_apply, m)?)?;
    m.add_function(wrap_pyfunction!(sym_constant, m)?)?;
    m.add_function(wrap_pyfunction!(while_loop, m)?)?;
    m.add_function(wrap_pyfunction!(switch, m)?)?;
    m.add_function(wrap_pyfunction!(custom_vjp, m)?)?;
    m.add_function(wrap_pyfunction!(callback, m)?)?;
    m.add_function(wrap_pyfunction!(vjp, m)?)?;
    m.add_function(wrap_pyfunction!(vjp_values, m)?)?;
    m.add_function(wrap_pyfunction!(tracing, m)?)?;
    m.add_function(wrap_pyfunction!(trace_position, m)?)?;
    m.add_function(wrap_pyfunction!(orphaned_syms, m)?)?;
    m.add_function(wrap_pyfunction!(sym_set_shape, m)?)?;
    Ok(())
}
