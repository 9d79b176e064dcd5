//! Python callbacks (`numpy_function`, `py_func`) through an embedded CPython.
//!
//! The callback body takes the GIL only for the duration of the call
//! (`Python::attach`); the interpreter and compiled code never hold it.
//! Inputs become NumPy arrays (writable copies: `func` may write into them
//! without changing any other value); results are checked against `Tout`
//! (count, dtype, declared shape) and converted: Python scalars and lists
//! take the declared dtype, Fortran-ordered and non-contiguous arrays are
//! accepted, object and structured arrays are `Unimplemented`. Python
//! exceptions map to error kinds (ValueError/TypeError/OverflowError → InvalidArgument,
//! StopIteration → OutOfRange, MemoryError → ResourceExhausted,
//! NotImplementedError → Unimplemented, others → Unknown) and carry the
//! full traceback text.

use half::{bf16, f16};
use num_complex::{Complex32, Complex64};
use numpy::{
    PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods,
};
use pyo3::exceptions::{
    PyMemoryError, PyNotImplementedError, PyStopIteration, PyTypeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use tensorlift_ir::{CallbackKind, DType, Detail, Error, Result};

use ndarray::IxDyn;

use crate::callback::HostCallback;
use crate::tensor::{AlignedBytes, ForeignBytes, Tensor};

/// NumPy's name for a dtype.
pub fn numpy_dtype_name(d: DType) -> &'static str {
    numpy_name(d)
}

fn numpy_name(d: DType) -> &'static str {
    match d {
        DType::String => "object",
        DType::Bool
        | DType::I8
        | DType::I16
        | DType::I32
        | DType::I64
        | DType::U8
        | DType::U16
        | DType::U32
        | DType::U64
        | DType::F16
        | DType::BF16
        | DType::F32
        | DType::F64
        | DType::C64
        | DType::C128 => d.name(),
    }
}

/// Readies the embedded interpreter for tensorlift's Python code, once per
/// process: registers the embedded `tensorlift` module (unless a real
/// `tensorlift` package is importable) so that Python code run by any
/// callback, or loaded through tensorlift, can `import tensorlift` — at
/// module level too — from the first use on. Every entry point into Python
/// calls it; after the first call it costs one atomic load. A failure is
/// returned (with the Python traceback) and retried on the next call.
pub fn prepare(py: Python<'_>) -> Result<()> {
    // The libpython this process loaded must be the one tensorlift was
    // built against, with NumPy (a clear error naming the fix otherwise).
    crate::python_env::check(py)?;
    static READY: pyo3::sync::PyOnceLock<()> = pyo3::sync::PyOnceLock::new();
    if READY.get(py).is_some() {
        return Ok(());
    }
    READY
        .get_or_try_init(py, || crate::eager::ensure_module(py))
        .map(|_| ())
        .map_err(|e| py_error(py, e, "registering the embedded tensorlift module"))
}

/// How a callback's errors name it: its Python function, `f()` (the node
/// the error is attached to already names the op, its name and its site),
/// or `fallback` for a callable without a `__qualname__`.
pub(crate) fn callable_label(func: &Bound<'_, PyAny>, fallback: String) -> String {
    func.getattr("__qualname__")
        .and_then(|q| q.extract::<String>())
        .map(|q| format!("{q}()"))
        .unwrap_or(fallback)
}

/// Converts a Python exception into an error of the matching kind with the
/// traceback text.
pub fn py_error(py: Python<'_>, e: PyErr, what: &str) -> Error {
    // Without the exception's chain: a tensorlift error raised by a call
    // inside the callback holds its cause's traceback in its message
    // already (with the chain, every level of callbacks re-entering
    // functions doubled the text).
    let kwargs = pyo3::types::PyDict::new(py);
    let traceback = kwargs
        .set_item("chain", false)
        .and_then(|()| py.import("traceback"))
        .and_then(|tb| {
            tb.getattr("format_exception")?
                .call((e.clone_ref(py),), Some(&kwargs))
        })
        .and_then(|lines| lines.extract::<Vec<String>>())
        .map(|l| l.concat())
        .unwrap_or_else(|_| e.to_string());
    let message = shorten(&format!("{what} raised {}", traceback.trim_end()));
    remember_raised(py, &message, &e);
    let detail = Detail::msg(message);
    // (An OverflowError is a value out of a type's range: an argument's
    // fault, as TensorFlow maps it.)
    if e.is_instance_of::<PyValueError>(py)
        || e.is_instance_of::<PyTypeError>(py)
        || e.is_instance_of::<pyo3::exceptions::PyOverflowError>(py)
    {
        Error::InvalidArgument(detail)
    } else if e.is_instance_of::<PyStopIteration>(py) {
        Error::OutOfRange(detail)
    } else if e.is_instance_of::<PyMemoryError>(py) {
        Error::ResourceExhausted(detail)
    } else if e.is_instance_of::<PyNotImplementedError>(py) {
        Error::Unimplemented(detail)
    } else {
        Error::Unknown(detail)
    }
}

/// Longest message an exception in a callback becomes: past it, the middle
/// gives way to a note (deep chains of callbacks calling functions whose
/// callbacks fail, a runaway recursion).
const MESSAGE_KEPT: usize = 16 << 10;

/// `message`, its middle cut when it is longer than [`MESSAGE_KEPT`].
fn shorten(message: &str) -> String {
    if message.len() <= MESSAGE_KEPT {
        return message.to_string();
    }
    let head = message.floor_char_boundary(MESSAGE_KEPT / 4);
    let tail = message.ceil_char_boundary(message.len() - MESSAGE_KEPT * 3 / 4);
    format!(
        "{}\n... ({} characters left out) ...\n{}",
        &message[..head],
        tail - head,
        &message[tail..]
    )
}

/// The exceptions callbacks raised most recently, each with the message
/// of the error it became: the Python package raises its `tl.errors.*`
/// with the original exception as `__cause__` ([`raised_exception`]).
static RAISED: std::sync::Mutex<std::collections::VecDeque<(String, Py<PyAny>)>> =
    std::sync::Mutex::new(std::collections::VecDeque::new());

/// How many exceptions [`RAISED`] keeps.
const RAISED_KEPT: usize = 8;

fn remember_raised(py: Python<'_>, message: &str, e: &PyErr) {
    let mut raised = RAISED.lock().unwrap_or_else(|p| p.into_inner());
    if raised.len() == RAISED_KEPT {
        raised.pop_front();
    }
    raised.push_back((message.to_string(), e.value(py).clone().into_any().unbind()));
}

/// The exception a callback raised that became the error whose text is
/// `error_text` (one of the last few raised), taken out of the record.
pub fn raised_exception(py: Python<'_>, error_text: &str) -> Option<Py<PyAny>> {
    let mut raised = RAISED.lock().unwrap_or_else(|p| p.into_inner());
    let i = raised
        .iter()
        .rposition(|(m, _)| error_text.contains(m.as_str()))?;
    raised.remove(i).map(|(_, e)| e.clone_ref(py))
}

fn internal(py: Python<'_>, e: PyErr) -> Error {
    py_error(py, e, "NumPy conversion")
}

/// Owns a buffer handed to NumPy without a copy: the base object of the
/// array that views it, so the bytes live exactly as long as the array.
#[pyclass(frozen, name = "TensorBuffer", module = "tensorlift")]
struct HandedOff {
    _bytes: AlignedBytes,
}

/// `match $dtype` with one arm for every element type NumPy holds natively,
/// `$body` running with `$T` naming its Rust type; the other dtypes (bool,
/// bfloat16, strings) take the arms given after it.
macro_rules! match_numpy_element {
    ($dtype:expr, $T:ident => $body:expr, $($pat:pat => $other:expr),+ $(,)?) => {
        match_numpy_element!(@table $dtype, $T, $body, [$($pat => $other),+],
            I8: i8, I16: i16, I32: i32, I64: i64, U8: u8, U16: u16, U32: u32, U64: u64,
            F16: f16, F32: f32, F64: f64, C64: Complex32, C128: Complex64)
    };
    (@table $dtype:expr, $T:ident, $body:expr, [$($pat:pat => $other:expr),+], $($d:ident: $t:ty),+) => {
        match $dtype {
            $(DType::$d => {
                type $T = $t;
                $body
            })+
            $($pat => $other),+
        }
    };
}

/// A writable NumPy array over `t`'s own buffer when nothing else
/// references it (a value no one reads again: writes by `func` change no
/// other value), else over a copy. Numeric dtypes other than bool and
/// bfloat16 are handed over; the rest are always converted.
pub fn into_numpy(py: Python<'_>, t: Tensor) -> Result<Bound<'_, PyAny>> {
    macro_rules! hand {
        ($T:ty, $bytes:expr, $shape:expr) => {{
            let mut bytes: AlignedBytes = $bytes;
            let ptr = bytes.as_mut_ptr() as *const $T;
            let owner = Bound::new(py, HandedOff { _bytes: bytes }).map_err(|e| internal(py, e))?;
            // SAFETY: `ptr` addresses `shape`'s element count of `$T`, 16-byte
            // aligned, inside the buffer `owner` now owns; moving the
            // AlignedBytes did not move its heap allocation, nothing else
            // references it, and `owner` becomes the array's base object, so
            // the bytes outlive every view of them.
            let view = unsafe { ndarray::ArrayViewD::<$T>::from_shape_ptr(IxDyn(&$shape), ptr) };
            // SAFETY: as above: the container keeps the memory alive and
            // never reallocates it.
            unsafe { PyArrayDyn::<$T>::borrow_from_array(&view, owner.into_any()) }.into_any()
        }};
    }
    let shape = t.shape().to_vec();
    let dtype = t.dtype();
    let handable = !matches!(dtype, DType::Bool | DType::BF16 | DType::String);
    if !handable {
        return to_numpy(py, &t);
    }
    let bytes = match t.into_unique_bytes() {
        Ok(b) => b,
        Err(shared) => return to_numpy(py, &shared),
    };
    Ok(match_numpy_element!(dtype, T => hand!(T, bytes, shape),
        DType::Bool | DType::BF16 | DType::String => {
            return Err(Error::internal("unreachable dtype in into_numpy"));
        }
    ))
}

/// Keeps a tensor's buffer alive as the base object of NumPy views of it.
#[pyclass(frozen, name = "TensorView", module = "tensorlift")]
struct ViewedTensor {
    _t: Tensor,
}

/// A read-only NumPy array over `t`'s own buffer, without a copy (the
/// tensor is immutable and the array keeps it alive); bool, bfloat16 and
/// string tensors are copied into a read-only array.
pub fn view_numpy<'py>(py: Python<'py>, t: &Tensor) -> Result<Bound<'py, PyAny>> {
    macro_rules! view {
        ($T:ty) => {{
            let owner =
                Bound::new(py, ViewedTensor { _t: t.clone() }).map_err(|e| internal(py, e))?;
            let view = t.array_view::<$T>()?;
            // SAFETY: `view` addresses the buffer of `t`, which the clone in
            // `owner` shares and keeps alive and unchanged (a shared buffer
            // is never written in place); `owner` becomes the array's base.
            unsafe { PyArrayDyn::<$T>::borrow_from_array(&view, owner.into_any()) }.into_any()
        }};
    }
    let a = match_numpy_element!(t.dtype(), T => view!(T),
        DType::Bool | DType::BF16 | DType::String => to_numpy(py, t)?
    );
    a.call_method1("setflags", (false,))
        .map_err(|e| internal(py, e))?;
    Ok(a)
}

/// The data of a NumPy array adopted as a tensor's buffer: an array that
/// owned its data, was C-contiguous and 16-byte aligned, and that nothing
/// but the callback's return value referenced.
struct AdoptedArray {
    _array: Py<PyAny>,
    ptr: *const u8,
    len: usize,
}

impl std::fmt::Debug for AdoptedArray {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AdoptedArray({} bytes)", self.len)
    }
}

// SAFETY: the array is referenced by nothing but `_array` (checked on
// adoption), so no Python code can reach, write or resize its data; the
// bytes are only read. `Py` is Send + Sync.
unsafe impl Send for AdoptedArray {}
// SAFETY: as above.
unsafe impl Sync for AdoptedArray {}

impl ForeignBytes for AdoptedArray {
    fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr`/`len` describe the data of the array `_array` keeps
        // alive; nothing can write or reallocate it (see the Send impl).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// True when `value` is an ndarray that owns its data and that nothing but
/// `value` references (no global, no view, no container holds it).
fn exclusively_owned(value: &Bound<'_, PyAny>) -> bool {
    let Ok(a) = value.cast::<PyUntypedArray>() else {
        return false;
    };
    // SAFETY: reading the reference count of a live object while attached.
    let refs = unsafe { pyo3::ffi::Py_REFCNT(value.as_ptr()) };
    // SAFETY: `a` is a live ndarray; its fields are read while attached.
    let flags = unsafe { (*numpy::npyffi::_PyArray_GET_ITEM_DATA(a.as_array_ptr())).flags };
    refs == 1 && flags & numpy::npyffi::NPY_ARRAY_OWNDATA != 0
}

/// A writable NumPy array holding a copy of `t`.
pub fn to_numpy<'py>(py: Python<'py>, t: &Tensor) -> Result<Bound<'py, PyAny>> {
    macro_rules! arr {
        ($T:ty) => {{ PyArrayDyn::<$T>::from_array(py, &t.array_view::<$T>()?).into_any() }};
    }
    Ok(match_numpy_element!(t.dtype(), T => arr!(T),
        DType::Bool => {
            let bools: Vec<bool> = t.bytes().iter().map(|b| *b != 0).collect();
            numpy::PyArray1::<bool>::from_vec(py, bools)
                .reshape(t.shape().to_vec())
                .map_err(|e| internal(py, e))?
                .into_any()
        },
        DType::BF16 => {
            require_bfloat16(py)?;
            arr!(bf16)
        },
        DType::String => {
            let np = py.import("numpy").map_err(|e| internal(py, e))?;
            let items: Vec<Py<PyAny>> = t
                .strings()
                .iter()
                .map(|s| pyo3::types::PyBytes::new(py, s).into_any().unbind())
                .collect();
            let list = PyList::new(py, items).map_err(|e| internal(py, e))?;
            let a = np
                .call_method1("array", (list, "object"))
                .map_err(|e| internal(py, e))?;
            a.call_method1(
                "reshape",
                (PyTuple::new(py, t.shape()).map_err(|e| internal(py, e))?,),
            )
            .map_err(|e| internal(py, e))?
        }
    ))
}

fn require_bfloat16(py: Python<'_>) -> Result<()> {
    py.import("ml_dtypes").map(|_| ()).map_err(|_| {
        Error::unimplemented("bfloat16 arrays need the ml_dtypes package (pip install ml_dtypes)")
    })
}

/// Converts what `func` returned for output `index` to a tensor of `want`.
pub fn from_numpy(
    py: Python<'_>,
    value: &Bound<'_, PyAny>,
    want: DType,
    index: usize,
    who: &str,
) -> Result<Tensor> {
    if value.is_none() {
        // (NumPy would make it a NaN, or an object array.)
        return Err(Error::invalid(format!(
            "output {index} of {who} is None, but Tout says {want} (does the function return its result?)"
        )));
    }
    // Fastest path: an array of exactly the declared dtype that owns its
    // C-contiguous, aligned data and that nothing else references (the
    // usual fresh result, e.g. `x + 1`) is adopted without a copy. Arrays
    // anything else may still reach (a global, a view, an input) are copied:
    // the runtime must neither see them change nor write into them.
    macro_rules! fast {
        ($T:ty) => {{
            if let Ok(a) = value.cast::<PyArrayDyn<$T>>()
                && a.is_c_contiguous()
                && exclusively_owned(value)
                && (a.data() as usize).is_multiple_of(16)
            {
                let shape = a.shape().to_vec();
                let len = a.len() * std::mem::size_of::<$T>();
                let buf = AdoptedArray {
                    ptr: a.data() as *const u8,
                    len,
                    _array: value.clone().unbind(),
                };
                // The clone above is the adopted reference; ours goes with
                // the caller's `value`.
                return Tensor::from_foreign(want, &shape, std::sync::Arc::new(buf));
            }
            if let Ok(a) = value.cast::<PyArrayDyn<$T>>()
                && a.is_c_contiguous()
                // SAFETY: we hold the GIL, so no Python code runs, and no
                // Rust code holds a mutable borrow of this array.
                && let Ok(v) = unsafe { a.as_slice() }
            {
                return <$T as crate::tensor::HostElement>::from_slice(a.shape(), v);
            }
        }};
    }
    match_numpy_element!(want, T => fast!(T),
        DType::Bool => fast!(bool),
        DType::BF16 | DType::String => {}
    );
    let np = py.import("numpy").map_err(|e| internal(py, e))?;
    let is_array = value.is_instance_of::<PyUntypedArray>()
        || value
            .is_instance(&np.getattr("generic").map_err(|e| internal(py, e))?)
            .unwrap_or(false);
    if want == DType::BF16 {
        require_bfloat16(py)?;
    }
    let arr = if is_array {
        let arr = np
            .call_method1("asarray", (value,))
            .map_err(|e| internal(py, e))?;
        let a = arr
            .cast::<PyUntypedArray>()
            .map_err(|e| internal(py, e.into()))?;
        let kind: char = a.dtype().kind() as char;
        let got = a
            .dtype()
            .getattr("name")
            .and_then(|n| n.extract::<String>())
            .unwrap_or_default();
        if want == DType::String {
            if !matches!(kind, 'S' | 'U' | 'O') {
                return Err(Error::invalid(format!(
                    "output {index} of {who} is {got}, but Tout says string"
                )));
            }
        } else if kind == 'O' || kind == 'V' && want != DType::BF16 || a.dtype().has_fields() {
            return Err(Error::unimplemented(format!(
                "output {index} of {who} is an {} array, which cannot become {want}",
                if kind == 'O' { "object" } else { "structured" }
            )));
        } else if got != numpy_name(want) {
            return Err(Error::invalid(format!(
                "output {index} of {who} is {got}, but Tout says {want}"
            )));
        }
        arr
    } else if want == DType::String {
        np.call_method1("array", (value, "object"))
            .map_err(|e| py_error(py, e, &format!("output {index} of {who}")))?
    } else {
        // Python scalars and lists take the declared dtype.
        np.call_method1("asarray", (value, numpy_name(want)))
            .map_err(|e| {
                py_error(
                    py,
                    e,
                    &format!("converting output {index} of {who} to {want}"),
                )
            })?
    };
    // C order, native byte order, aligned: Fortran-ordered, strided,
    // byte-swapped ('>f4') and unaligned arrays are accepted and copied, as
    // TensorFlow's `np.asarray(value, dtype)` accepts them (not
    // `ascontiguousarray`, which turns a 0-d value into shape [1]).
    let native = if want == DType::String {
        py.None().into_bound(py)
    } else {
        pyo3::types::PyString::new(py, numpy_name(want)).into_any()
    };
    let arr = np
        .call_method1("require", (arr, native, ("C", "A")))
        .map_err(|e| {
            py_error(
                py,
                e,
                &format!("converting output {index} of {who} to {want}"),
            )
        })?;
    let shape: Vec<usize> = arr
        .cast::<PyUntypedArray>()
        .map_err(|e| internal(py, e.into()))?
        .shape()
        .to_vec();
    macro_rules! take {
        ($T:ty) => {{
            let a = arr
                .cast::<PyArrayDyn<$T>>()
                .map_err(|e| internal(py, e.into()))?;
            let ro = a.readonly();
            let v: Vec<$T> = ro
                .as_slice()
                .map_err(|e| Error::invalid(format!("output {index} of {who}: {e}")))?
                .to_vec();
            Tensor::from(
                ndarray::ArrayD::from_shape_vec(shape, v)
                    .map_err(|e| Error::internal(e.to_string()))?,
            )
        }};
    }
    Ok(match_numpy_element!(want, T => take!(T),
        DType::Bool => take!(bool),
        DType::BF16 => take!(bf16),
        DType::String => {
            let flat = arr
                .call_method0("ravel")
                .and_then(|f| f.call_method0("tolist"))
                .map_err(|e| internal(py, e))?;
            let items: Vec<Bound<'_, PyAny>> = flat.extract().map_err(|e| internal(py, e))?;
            let strings = items
                .iter()
                .map(|s| {
                    if let Ok(b) = s.extract::<Vec<u8>>() {
                        Ok(b)
                    } else if let Ok(u) = s.extract::<String>() {
                        Ok(u.into_bytes())
                    } else {
                        Err(Error::invalid(format!(
                            "output {index} of {who} holds a non-string element"
                        )))
                    }
                })
                .collect::<Result<Vec<_>>>()?;
            Tensor::from_strings(&shape, strings)?
        }
    ))
}

/// The `n` values a callback returned for `n` declared outputs. Only a
/// Python list or tuple is a sequence of outputs; anything else — a NumPy
/// array included, which is never split along its first axis — is one
/// value (TensorFlow's rule). A count other than `n` is `InvalidArgument`
/// naming `who` (the op kind and name), the count returned and the count
/// declared.
pub fn returned_values<'py>(
    out: Bound<'py, PyAny>,
    n: usize,
    who: &str,
) -> Result<Vec<Bound<'py, PyAny>>> {
    let values: Vec<Bound<'py, PyAny>> = if let Ok(t) = out.cast::<PyTuple>() {
        t.iter().collect()
    } else if let Ok(l) = out.cast::<PyList>() {
        l.iter().collect()
    } else {
        vec![out.clone()]
    };
    // Release the tuple/list so that its arrays count only our references
    // (see `from_numpy`'s adoption rule).
    drop(out);
    if values.len() != n {
        return Err(Error::invalid(format!(
            "{who} returned {} value(s), but Tout declares {n}",
            values.len()
        )));
    }
    Ok(values)
}

/// Checks that a callback with an empty `Tout` returned nothing: None or
/// an empty tuple.
pub fn nothing_returned(out: &Bound<'_, PyAny>, who: &str) -> Result<()> {
    if out.is_none() {
        Ok(())
    } else if let Ok(t) = out.cast::<PyTuple>() {
        if t.is_empty() {
            Ok(())
        } else {
            Err(Error::invalid(format!(
                "{who} returned {} value(s), but Tout declares 0",
                t.len()
            )))
        }
    } else {
        Err(Error::invalid(format!(
            "{who} returned a value, but Tout is empty (return None)"
        )))
    }
}

/// A host callback running the Python callable `func` with NumPy arrays
/// (`numpy_function` / `py_func` semantics). `name` is used in errors.
pub fn numpy_callback(
    kind: CallbackKind,
    func: Py<PyAny>,
    tout: Vec<DType>,
    name: String,
) -> HostCallback {
    HostCallback::owned(kind, move |inputs: Vec<Tensor>| {
        Python::attach(|py| {
            prepare(py)?;
            let who = format!("{} '{name}'", kind.name());
            let args = inputs
                .into_iter()
                .map(|t| into_numpy(py, t))
                .collect::<Result<Vec<_>>>()?;
            let args = PyTuple::new(py, args).map_err(|e| internal(py, e))?;
            let out = func
                .bind(py)
                .call1(args)
                .map_err(|e| py_error(py, e, &callable_label(func.bind(py), who.clone())))?;
            if tout.is_empty() {
                return nothing_returned(&out, &who).map(|()| Vec::new());
            }
            // A list is a sequence of outputs also for one `Tout` (`[x]` is
            // `x`), as in TensorFlow; array data nested in it is converted.
            let values = returned_values(out, tout.len(), &who)?;
            values
                .iter()
                .zip(&tout)
                .enumerate()
                .map(|(i, (v, d))| from_numpy(py, v, *d, i, &who))
                .collect()
        })
    })
}
