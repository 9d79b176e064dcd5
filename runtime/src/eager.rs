//! Eager tensors for `py_function`: a Python class `tensorlift.Tensor`
//! whose operators run immediately on the runtime's kernels, and a minimal
//! `tensorlift` module (`abs`, `exp`, `log`, ..., `math.*`, `constant`)
//! registered in the embedded interpreter when no `tensorlift` package is
//! importable. Enough for the py_function page's `log_huber` to run.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyModule, PyTuple};
use tensorlift_ir::infer::broadcast_shapes;
use tensorlift_ir::{BinaryOp, CallbackKind, CmpOp, DType, Error, Literal, Result, Shape, UnaryOp};

use crate::callback::HostCallback;
use crate::kernels::{elementwise as ew, layout};
use crate::python::{from_numpy, py_error, returned_values, to_numpy};
use crate::tensor::Tensor;

/// An eager tensor (`tensorlift.Tensor`).
#[derive(Debug)]
#[pyclass(name = "Tensor", module = "tensorlift", frozen)]
pub struct PyTensor {
    /// The value.
    pub t: Tensor,
}

fn err(e: Error) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// `other` as a tensor: eager tensors as they are, Python scalars in
/// `like`'s dtype (TensorFlow's rule), anything else through NumPy.
fn coerce(py: Python<'_>, other: &Bound<'_, PyAny>, like: DType) -> PyResult<Tensor> {
    if let Ok(p) = other.cast::<PyTensor>() {
        return Ok(p.get().t.clone());
    }
    if let Ok(v) = other.extract::<f64>()
        && !other.hasattr("dtype")?
    {
        let lit = Literal::scalar(like, v).map_err(err)?;
        return Tensor::from_literal(&lit).map_err(err);
    }
    let np = py.import("numpy")?;
    let arr = np.call_method1("asarray", (other,))?;
    let name: String = arr.getattr("dtype")?.getattr("name")?.extract()?;
    let d = DType::from_name(&name)
        .ok_or_else(|| PyTypeError::new_err(format!("unsupported dtype {name}")))?;
    from_numpy(py, &arr, d, 0, "operand").map_err(err)
}

/// Broadcasts `a` and `b` to one shape with NumPy's rule.
fn broadcast(a: &Tensor, b: &Tensor) -> Result<(Tensor, Tensor)> {
    let out = broadcast_shapes(&Shape::known(a.shape()), &Shape::known(b.shape()))
        .map_err(Error::invalid)?;
    let rank = out.rank().unwrap_or(0);
    let to = |t: &Tensor| {
        if Shape::known(t.shape()) == out {
            Ok(t.clone())
        } else {
            layout::broadcast_in_dim(t, &out, &((rank - t.rank())..rank).collect::<Vec<_>>())
        }
    };
    Ok((to(a)?, to(b)?))
}

fn wrap(t: Tensor) -> PyTensor {
    PyTensor { t }
}

impl PyTensor {
    fn binary(
        &self,
        py: Python<'_>,
        other: &Bound<'_, PyAny>,
        op: BinaryOp,
        swap: bool,
    ) -> PyResult<PyTensor> {
        let o = coerce(py, other, self.t.dtype())?;
        let (a, b) = if swap {
            (o, self.t.clone())
        } else {
            (self.t.clone(), o)
        };
        if a.dtype() != b.dtype() {
            return Err(PyTypeError::new_err(format!(
                "{} of {} and {}: dtypes differ",
                op.name(),
                a.dtype(),
                b.dtype()
            )));
        }
        let (a, b) = broadcast(&a, &b).map_err(err)?;
        ew::binary(op, &a, &b).map(wrap).map_err(err)
    }

    fn unary(&self, op: UnaryOp) -> PyResult<PyTensor> {
        ew::unary(op, &self.t).map(wrap).map_err(err)
    }
}

#[pymethods]
impl PyTensor {
    /// The value as a NumPy array (a copy).
    fn numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_numpy(py, &self.t).map_err(err)
    }

    #[getter]
    fn shape(&self) -> Vec<usize> {
        self.t.shape().to_vec()
    }

    #[getter]
    fn dtype(&self) -> &'static str {
        self.t.dtype().name()
    }

    #[pyo3(signature = (dtype=None, copy=None))]
    fn __array__<'py>(
        &self,
        py: Python<'py>,
        dtype: Option<Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = copy;
        let a = to_numpy(py, &self.t).map_err(err)?;
        match dtype {
            Some(d) => a.call_method1("astype", (d,)),
            None => Ok(a),
        }
    }

    fn __repr__(&self) -> String {
        format!("<tensorlift.Tensor {:?}>", self.t)
    }

    fn __bool__(&self) -> PyResult<bool> {
        if self.t.len() != 1 {
            return Err(PyValueError::new_err(
                "the truth value of a tensor with more than one element is ambiguous",
            ));
        }
        let b = ew::convert(&self.t, DType::Bool).map_err(err)?;
        Ok(b.bytes()[0] != 0)
    }

    fn __float__(&self, py: Python<'_>) -> PyResult<f64> {
        self.numpy(py)?.call_method0("item")?.extract()
    }

    fn __add__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.binary(py, o, BinaryOp::Add, false)
    }
    fn __radd__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.binary(py, o, BinaryOp::Add, true)
    }
    fn __sub__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.binary(py, o, BinaryOp::Sub, false)
    }
    fn __rsub__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.binary(py, o, BinaryOp::Sub, true)
    }
    fn __mul__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.binary(py, o, BinaryOp::Mul, false)
    }
    fn __rmul__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.binary(py, o, BinaryOp::Mul, true)
    }
    fn __truediv__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.binary(py, o, BinaryOp::Div, false)
    }
    fn __rtruediv__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.binary(py, o, BinaryOp::Div, true)
    }
    fn __pow__(
        &self,
        py: Python<'_>,
        o: &Bound<'_, PyAny>,
        _modulo: &Bound<'_, PyAny>,
    ) -> PyResult<PyTensor> {
        self.binary(py, o, BinaryOp::Pow, false)
    }
    fn __neg__(&self) -> PyResult<PyTensor> {
        self.unary(UnaryOp::Neg)
    }
    fn __abs__(&self) -> PyResult<PyTensor> {
        self.unary(UnaryOp::Abs)
    }
    fn __richcmp__(
        &self,
        py: Python<'_>,
        o: &Bound<'_, PyAny>,
        op: pyo3::basic::CompareOp,
    ) -> PyResult<PyTensor> {
        use pyo3::basic::CompareOp as C;
        let c = match op {
            C::Lt => CmpOp::Lt,
            C::Le => CmpOp::Le,
            C::Gt => CmpOp::Gt,
            C::Ge => CmpOp::Ge,
            C::Eq => CmpOp::Eq,
            C::Ne => CmpOp::Ne,
        };
        let other = coerce(py, o, self.t.dtype())?;
        let (a, b) = broadcast(&self.t, &other).map_err(err)?;
        ew::compare(c, &a, &b).map(wrap).map_err(err)
    }
}

macro_rules! module_unary {
    ($($name:ident => $op:ident),*) => {$(
        #[pyfunction]
        fn $name(x: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
            let py = x.py();
            let t = coerce(py, x, DType::F32)?;
            ew::unary(UnaryOp::$op, &t).map(wrap).map_err(err)
        }
    )*};
}
module_unary!(abs => Abs, exp => Exp, log => Log, sqrt => Sqrt, tanh => Tanh, sigmoid => Logistic, sin => Sin, cos => Cos, square => Square, negative => Neg);

/// `tensorlift.constant(value, dtype=None)`.
#[pyfunction]
#[pyo3(signature = (value, dtype=None))]
fn constant(value: &Bound<'_, PyAny>, dtype: Option<&str>) -> PyResult<PyTensor> {
    let py = value.py();
    let d = match dtype {
        Some(n) => {
            DType::from_name(n).ok_or_else(|| PyTypeError::new_err(format!("unknown dtype {n}")))?
        }
        None => DType::F32,
    };
    let np = py.import("numpy")?;
    let arr = np.call_method1("asarray", (value, crate::python::numpy_dtype_name(d)))?;
    from_numpy(py, &arr, d, 0, "constant")
        .map(wrap)
        .map_err(err)
}

/// Makes `import tensorlift` work inside callbacks (unless a real
/// `tensorlift` package is importable). Called once per process by
/// [`crate::python::prepare`], which every Python entry point calls.
pub fn ensure_module(py: Python<'_>) -> PyResult<()> {
    let sys = py.import("sys")?;
    let modules = sys.getattr("modules")?;
    if modules.contains("tensorlift")? || py.import("tensorlift").is_ok() {
        return Ok(());
    }
    let m = PyModule::new(py, "tensorlift")?;
    m.add_class::<PyTensor>()?;
    let math = PyModule::new(py, "tensorlift.math")?;
    for f in [
        wrap_pyfunction!(abs, &m)?,
        wrap_pyfunction!(exp, &m)?,
        wrap_pyfunction!(log, &m)?,
        wrap_pyfunction!(sqrt, &m)?,
        wrap_pyfunction!(tanh, &m)?,
        wrap_pyfunction!(sigmoid, &m)?,
        wrap_pyfunction!(sin, &m)?,
        wrap_pyfunction!(cos, &m)?,
        wrap_pyfunction!(square, &m)?,
        wrap_pyfunction!(negative, &m)?,
    ] {
        let name: String = f.getattr("__name__")?.extract()?;
        m.add(name.as_str(), &f)?;
        math.add(name.as_str(), &f)?;
    }
    m.add_function(wrap_pyfunction!(constant, &m)?)?;
    m.add("math", &math)?;
    modules.set_item("tensorlift", &m)?;
    modules.set_item("tensorlift.math", &math)?;
    Ok(())
}

/// A `py_function` callback: `func` receives eager `tensorlift.Tensor`s and
/// returns tensors, arrays or scalars (converted to `tout`), a list/tuple
/// of them, or None for an empty `tout`.
pub fn py_function_callback(func: Py<PyAny>, tout: Vec<DType>, name: String) -> HostCallback {
    HostCallback::new(CallbackKind::PyFunction, move |inputs: &[Tensor]| {
        Python::attach(|py| {
            let who = format!("py_function '{name}'");
            crate::python::prepare(py)?;
            let args = inputs
                .iter()
                .map(|t| Bound::new(py, PyTensor { t: t.clone() }).map(|b| b.into_any()))
                .collect::<PyResult<Vec<_>>>()
                .map_err(|e| py_error(py, e, &who))?;
            let args = PyTuple::new(py, args).map_err(|e| py_error(py, e, &who))?;
            let out = func.bind(py).call1(args).map_err(|e| {
                py_error(
                    py,
                    e,
                    &crate::python::callable_label(func.bind(py), who.clone()),
                )
            })?;
            if tout.is_empty() {
                return crate::python::nothing_returned(&out, &who).map(|()| Vec::new());
            }
            let values = returned_values(out, tout.len(), &who)?;
            values
                .iter()
                .zip(&tout)
                .enumerate()
                .map(|(i, (v, d))| match v.cast::<PyTensor>() {
                    Ok(p) => Ok(p.get().t.clone()),
                    // (NumPy would make None a NaN: from_numpy says why not.)
                    Err(_) if v.is_none() => from_numpy(py, v, *d, i, &who),
                    Err(_) => {
                        let np = py.import("numpy").map_err(|e| py_error(py, e, &who))?;
                        let arr = if v.hasattr("dtype").unwrap_or(false) {
                            v.clone()
                        } else {
                            np.call_method1("asarray", (v, crate::python::numpy_dtype_name(*d)))
                                .map_err(|e| py_error(py, e, &who))?
                        };
                        from_numpy(py, &arr, *d, i, &who)
                    }
                })
                .collect()
        })
    })
}
