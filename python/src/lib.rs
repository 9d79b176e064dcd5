//! `tensorlift._native`: the extension module under the Python package
//! `tensorlift` (python/tensorlift/). It holds what must be native: eager
//! tensors (the runtime's), symbolic tensors of a trace, traced functions
//! (Rust [`tensorlift::Function`]s whose body calls Python), the op table,
//! control flow, callbacks, and the mapping of errors onto `tl.errors.*`.
//! Everything with TensorFlow's names and signatures is Python, in the
//! package.

mod graphfn;
mod ops;
mod trace;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList};
use tensorlift::runtime::eager::PyTensor;
use tensorlift::runtime::python as bridge;
use tensorlift::{DType, Error, Tensor, TensorMut};

/// What to do when a callback's result of undeclared shape reaches a loop
/// or branch under `jit_compile=True`.
const UNKNOWN_SHAPE_REMEDY: &str = "\nRemedy: a callback's result has an unknown shape \
    unless declared, and the results of tl.cond, tl.switch_case and tl.while_loop (and what their \
    bodies compute) must have static shapes to be compiled. Declare the shape where the callback \
    is called, `y = tl.numpy_function(...); y.set_shape([...])` (output_shapes= for \
    tl.contrib.framework.py_func), or call the callback outside the branch or loop (there \
    compiled code is split at it), or use jit_compile=False.";

/// What to do when an in-function gradient would run a loop or branch
/// whose body has effects again.
const STATEFUL_REGION_REMEDY: &str = "\nRemedy: this loop or branch runs a callback (a \
    numpy_function or py_func is stateful by default; so are tl.random's draws and \
    tl.nn.dropout's mask), and a gradient inside a tl.function keeps no forward values from \
    within a loop or branch, so it would run the callback again, even under a \
    tl.custom_gradient. If running it again is harmless, pass stateful=False to the callback; \
    or call it (with its custom gradient) outside the loop or branch (draw a random mask before \
    a tl.cond and select it inside; or, for a branch or an outermost loop, take the gradient with \
    a tape outside the function, which replays the values the call drew).";

/// `e` as the matching `tensorlift.errors` exception, with the exception a
/// callback raised (when this error came from one) as its `__cause__`.
pub(crate) fn raise(py: Python<'_>, e: Error) -> PyErr {
    static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let mut text = e.to_string();
    if let Error::JitIncompatible { offenders } = &e
        && offenders.iter().any(|o| {
            matches!(o.node.op.as_str(), "numpy_function" | "py_func" | "host_fn")
                && o.reason.contains("is not static")
        })
    {
        text.push_str(UNKNOWN_SHAPE_REMEDY);
    }
    if let Error::InvalidArgument(d) = &e
        && d.message.contains("would run this stateful node again")
        && d.node
            .as_ref()
            .is_some_and(|n| matches!(n.op.as_str(), "while" | "case"))
    {
        text.push_str(STATEFUL_REGION_REMEDY);
    }
    let class = match &e {
        Error::InvalidArgument(_) => "InvalidArgumentError",
        Error::OutOfRange(_) => "OutOfRangeError",
        Error::ResourceExhausted(_) => "ResourceExhaustedError",
        Error::Unimplemented(_) => "UnimplementedError",
        Error::Unknown(_) => "UnknownError",
        Error::Internal(_) => "InternalError",
        Error::NotFound(_) => "NotFoundError",
        Error::FailedPrecondition(_) => "FailedPreconditionError",
        Error::JitIncompatible { .. } => "JitCompileError",
    };
    let made = (|| -> PyResult<PyErr> {
        let errors =
            ERRORS.get_or_try_init(py, || py.import("tensorlift.errors").map(Bound::unbind))?;
        let exc = errors.bind(py).getattr(class)?.call1((text.clone(),))?;
        if let Some(cause) = bridge::raised_exception(py, &text) {
            // Ctrl-C (or sys.exit) inside a callback stops the program as
            // it would anywhere else: the call's error is that exception
            // itself, not an UnknownError an `except Exception` swallows.
            let c = cause.bind(py);
            if c.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>()
                || c.is_instance_of::<pyo3::exceptions::PySystemExit>()
            {
                return Ok(PyErr::from_value(c.clone()));
            }
            exc.setattr("__cause__", cause)?;
        }
        Ok(PyErr::from_value(exc))
    })();
    made.unwrap_or_else(|err| err)
}

/// A NumPy array (or anything `numpy.asarray` takes) as a tensor of
/// `dtype` (`None`: the array's own).
#[pyfunction]
#[pyo3(signature = (value, dtype=None))]
pub(crate) fn to_tensor(value: &Bound<'_, PyAny>, dtype: Option<&str>) -> PyResult<PyTensor> {
    let py = value.py();
    static NUMPY: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let np = NUMPY
        .get_or_try_init(py, || py.import("numpy").map(Bound::unbind))?
        .bind(py);
    let arr = match dtype {
        // An array as it is (the common case of a call's arguments).
        None if value.cast::<numpy::PyUntypedArray>().is_ok() => value.clone(),
        Some(d) => {
            let d = DType::from_name(d).ok_or_else(|| {
                pyo3::exceptions::PyTypeError::new_err(format!("unknown dtype '{d}'"))
            })?;
            np.call_method1("asarray", (value, bridge::numpy_dtype_name(d)))?
        }
        None => np.call_method1("asarray", (value,))?,
    };
    let asked = dtype.and_then(DType::from_name);
    let d = match numeric_dtype(&arr) {
        Some(d) => d,
        None if asked == Some(DType::String) || is_text(&arr)? => {
            // Bytes, str (encoded as UTF-8) and object arrays of them.
            return bridge::from_numpy(py, &arr, DType::String, 0, "constant")
                .map(|t| PyTensor { t })
                .map_err(|_| {
                    pyo3::exceptions::PyTypeError::new_err(format!(
                        "cannot make a string tensor of a Python {}: its elements must be \
                         bytes or str",
                        type_name(value)
                    ))
                });
        }
        None => {
            // numpy's dtype.name runs Python code: only for the rest
            // (bfloat16, strings, what tensorlift lacks).
            let name = arr
                .getattr(pyo3::intern!(py, "dtype"))?
                .getattr(pyo3::intern!(py, "name"))?;
            let name = name.cast::<pyo3::types::PyString>()?.to_str()?;
            DType::from_name(name).ok_or_else(|| {
                let ty = type_name(value);
                pyo3::exceptions::PyTypeError::new_err(format!(
                    "cannot make a tensor of a Python {ty} (NumPy gives it dtype '{name}', \
                     which tensorlift lacks)"
                ))
            })?
        }
    };
    let t = bridge::from_numpy(py, &arr, d, 0, "constant").map_err(|e| raise(py, e))?;
    Ok(PyTensor { t })
}

/// Whether NumPy's array `arr` holds text: bytes (`S`), str (`U`), or
/// objects (which must then all be bytes or str).
fn is_text(arr: &Bound<'_, PyAny>) -> PyResult<bool> {
    let py = arr.py();
    let kind = arr
        .getattr(pyo3::intern!(py, "dtype"))?
        .getattr(pyo3::intern!(py, "kind"))?;
    let kind = kind.cast::<pyo3::types::PyString>()?.to_str()?.to_owned();
    Ok(matches!(kind.as_str(), "S" | "U" | "O"))
}

/// The NumPy arrays given to a `call_into` as the outputs' buffers, checked
/// ([`OutBuffers::check`]); [`OutBuffers::views`] lends them as the
/// tensors to write.
pub(crate) struct OutBuffers<'a> {
    /// Per array: dtype, shape, data pointer and byte length.
    bufs: Vec<(DType, Vec<usize>, *mut u8, usize)>,
    /// The arrays, borrowed: alive (and not resized, as NumPy refuses to
    /// resize a referenced array) as long as this is.
    _arrays: std::marker::PhantomData<&'a [Bound<'a, PyAny>]>,
}

impl<'a> OutBuffers<'a> {
    /// Checks that each array is an ndarray of a tensorlift dtype,
    /// writeable and C-contiguous, and that none overlaps another or an
    /// input's memory (kernels write while they read). Like NumPy's own
    /// `out=`, the arrays must not be used by other threads during the
    /// call, which runs without the GIL.
    pub(crate) fn check(arrays: &'a [Bound<'a, PyAny>], inputs: &[Tensor]) -> PyResult<Self> {
        use numpy::{PyArrayDescrMethods, PyUntypedArrayMethods};
        let mut bufs = Vec::with_capacity(arrays.len());
        // Byte ranges already spoken for: the inputs', then each output's
        // (`Ok(k)`: outputs[k], `Err(i)`: input i; named only in an error).
        let mut taken: Vec<(usize, usize, Result<usize, usize>)> = inputs
            .iter()
            .enumerate()
            .map(|(i, t)| (t.bytes().as_ptr() as usize, t.bytes().len(), Err(i)))
            .collect();
        for (k, value) in arrays.iter().enumerate() {
            let a = value.cast::<numpy::PyUntypedArray>().map_err(|_| {
                let ty = type_name(value);
                pyo3::exceptions::PyTypeError::new_err(format!(
                    "call_into: outputs[{k}] is a {ty}, not a NumPy array"
                ))
            })?;
            let d = match numeric_dtype(value) {
                Some(d) => d,
                None => {
                    let name = a.dtype().getattr("name")?.str()?.to_string();
                    DType::from_name(&name).ok_or_else(|| {
                        pyo3::exceptions::PyTypeError::new_err(format!(
                            "call_into: outputs[{k}] has dtype '{name}', which tensorlift lacks"
                        ))
                    })?
                }
            };
            // SAFETY: `a` is a live ndarray (we hold a reference and the
            // GIL); its header is read, not written.
            let (data, flags) = unsafe {
                let p = a.as_array_ptr();
                ((*p).fields.data.cast::<u8>(), (*p).fields.flags)
            };
            if flags & numpy::npyffi::flags::NPY_ARRAY_WRITEABLE == 0 {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "call_into: outputs[{k}] is read-only"
                )));
            }
            if !a.is_c_contiguous() {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "call_into: outputs[{k}] is not C-contiguous (a view with strides); pass a \
                     contiguous array, e.g. numpy.empty(shape, dtype)"
                )));
            }
            if a.dtype().is_native_byteorder() == Some(false) {
                let name = a.dtype().str()?.to_string();
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "call_into: outputs[{k}] has a byte order other than this machine's \
                     ({name}); pass a native-order array, e.g. numpy.empty(shape, dtype)"
                )));
            }
            let len = a.len() * a.dtype().itemsize();
            let start = data as usize;
            if len > 0 {
                if let Some((_, _, who)) = taken
                    .iter()
                    .find(|(s, l, _)| *l > 0 && start < s + l && *s < start + len)
                {
                    let what = match who {
                        Ok(j) => format!("outputs[{j}]"),
                        Err(i) => format!("input {i}"),
                    };
                    return Err(pyo3::exceptions::PyValueError::new_err(format!(
                        "call_into: outputs[{k}] shares memory with {what}"
                    )));
                }
                taken.push((start, len, Ok(k)));
            }
            bufs.push((d, a.shape().to_vec(), data, len));
        }
        Ok(OutBuffers {
            bufs,
            _arrays: std::marker::PhantomData,
        })
    }

    /// The arrays as tensors to write (an error if one's bytes do not
    /// make its shape, which NumPy does not allow).
    pub(crate) fn views(&mut self) -> Result<Vec<TensorMut<'_>>, Error> {
        self.bufs
            .iter()
            .map(|(d, shape, data, len)| {
                let bytes: &mut [u8] = if *len == 0 {
                    &mut []
                } else {
                    // SAFETY: `len` bytes of the array's own C-contiguous,
                    // writeable data, alive while `self` borrows the arrays;
                    // `check` made sure no two overlap, and `&mut self`
                    // lends each at most once at a time.
                    unsafe { std::slice::from_raw_parts_mut(*data, *len) }
                };
                TensorMut::new(*d, shape, bytes)
            })
            .collect()
    }
}

/// A read-only NumPy view of a tensor, without a copy.
#[pyfunction]
fn view<'py>(py: Python<'py>, t: PyRef<'py, PyTensor>) -> PyResult<Bound<'py, PyAny>> {
    bridge::view_numpy(py, &t.t).map_err(|e| raise(py, e))
}

/// The dtype of an ndarray of one of NumPy's own numeric element types
/// (compared through NumPy's C API, not by name).
fn numeric_dtype(arr: &Bound<'_, PyAny>) -> Option<DType> {
    use numpy::{PyArrayDescrMethods, PyUntypedArrayMethods, dtype};
    let a = arr.cast::<numpy::PyUntypedArray>().ok()?;
    let py = arr.py();
    let d = a.dtype();
    macro_rules! check {
        ($($t:ty => $d:ident),*) => {$(
            if d.is_equiv_to(&dtype::<$t>(py)) {
                return Some(DType::$d);
            }
        )*};
    }
    check!(f32 => F32, f64 => F64, i32 => I32, i64 => I64, bool => Bool, u8 => U8, i8 => I8,
        i16 => I16, u16 => U16, u32 => U32, u64 => U64, half::f16 => F16,
        num_complex::Complex32 => C64, num_complex::Complex64 => C128);
    None
}

/// The name of `value`'s Python type, for messages (`?` where Python
/// cannot give it).
fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map_or_else(|_| "?".into(), |n| n.to_string())
}

/// Runs op `name` eagerly on tensors; an error names `site`, the Python
/// line that ran the op (`(file, line)`).
#[pyfunction]
#[pyo3(signature = (name, inputs, attrs=None, site=None))]
fn eager_apply(
    py: Python<'_>,
    name: &str,
    inputs: Vec<PyRef<'_, PyTensor>>,
    attrs: Option<&Bound<'_, PyDict>>,
    site: Option<(String, u32)>,
) -> PyResult<Vec<PyTensor>> {
    let a = ops::Attrs::from_dict(name, attrs)?;
    let ts: Vec<Tensor> = inputs.iter().map(|t| t.t.clone()).collect();
    let site = site.map(|(file, line)| tensorlift::Site::at(&file, line, 1));
    let out = py
        .detach(|| ops::eager(name, &ts, &a, site))
        .map_err(|e| raise(py, e))?;
    Ok(out.into_iter().map(|t| PyTensor { t }).collect())
}

/// Frees the buffers the runtime keeps for reuse (results and temporaries
/// of earlier calls) and returns how many bytes were given back.
#[pyfunction]
fn trim_buffer_cache(py: Python<'_>) -> usize {
    py.detach(tensorlift::runtime::trim_buffer_cache)
}

/// How many one-op functions eager ops keep compiled (bounded).
#[pyfunction]
fn eager_cache_size() -> usize {
    ops::eager_cache_size()
}

/// The op names the table knows.
#[pyfunction]
fn op_names(py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
    PyList::new(py, ops::NAMES)
}

/// The dtype names tensorlift knows.
#[pyfunction]
fn dtype_names() -> Vec<&'static str> {
    tensorlift::ir::ALL_DTYPES
        .iter()
        .map(|d| d.name())
        .collect()
}

thread_local! {
    /// Whether this thread is Python's main thread (which alone runs
    /// signal handlers), asked once.
    static IS_MAIN: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
    /// When this thread last ran Python's signal handlers from a loop.
    static LAST_CHECK: std::cell::Cell<Option<std::time::Instant>> =
        const { std::cell::Cell::new(None) };
}

/// Whether the calling thread is Python's main thread.
fn on_main_thread() -> bool {
    if let Some(main) = IS_MAIN.with(std::cell::Cell::get) {
        return main;
    }
    let main = Python::attach(|py| {
        let threading = py.import("threading")?;
        let current = threading.call_method0("current_thread")?;
        let main = threading.call_method0("main_thread")?;
        PyResult::Ok(current.is(&main))
    })
    .unwrap_or(false);
    IS_MAIN.with(|m| m.set(Some(main)));
    main
}

/// Whether a loop must stop: a Ctrl-C (Python's handlers raise
/// KeyboardInterrupt) while a loop runs in compiled or interpreted code,
/// which runs no bytecode where Python would see it. On the main thread
/// only, and at most every 50 ms (each check takes the GIL, which another
/// thread may hold for a switch interval).
fn check_interrupt() -> tensorlift::Result<()> {
    let now = std::time::Instant::now();
    let due = LAST_CHECK.with(|last| match last.get() {
        Some(t) if now.duration_since(t) < std::time::Duration::from_millis(50) => false,
        _ => {
            last.set(Some(now));
            true
        }
    });
    if !due || !on_main_thread() {
        return Ok(());
    }
    Python::attach(|py| {
        py.check_signals()
            .map_err(|e| bridge::py_error(py, e, "a signal handler"))
    })
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    tensorlift::runtime::interrupt::set_check(check_interrupt);
    m.add(
        "NEEDS_STATIC_SHAPES",
        tensorlift::ir::autodiff::NEEDS_STATIC_SHAPES,
    )?;
    m.add_class::<PyTensor>()?;
    m.add_class::<trace::PySym>()?;
    m.add_class::<trace::PyFunction>()?;
    m.add_class::<graphfn::PyGraphFunction>()?;
    m.add_function(wrap_pyfunction!(to_tensor, m)?)?;
    m.add_function(wrap_pyfunction!(view, m)?)?;
    m.add_function(wrap_pyfunction!(eager_apply, m)?)?;
    m.add_function(wrap_pyfunction!(op_names, m)?)?;
    m.add_function(wrap_pyfunction!(trim_buffer_cache, m)?)?;
    m.add_function(wrap_pyfunction!(eager_cache_size, m)?)?;
    m.add_function(wrap_pyfunction!(dtype_names, m)?)?;
    trace::register(m)?;
    Ok(())
}
