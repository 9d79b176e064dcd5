//! Python callables from Rust in one line, and binding them to the
//! callbacks of a parsed program (the `python` feature).
//!
//! ```no_run
//! # fn main() -> tensorlift::Result<()> {
//! let huber = tensorlift::python::callable("mypkg.losses:huber")?;
//! let scale = tensorlift::python::callable_from_source(
//!     "import numpy as np\ndef scale(x):\n    return x * np.float32(2)\n",
//!     "scale",
//! )?;
//! # let _ = (huber, scale);
//! # Ok(())
//! # }
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::exceptions::{PyAttributeError, PyModuleNotFoundError, PySyntaxError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use tensorlift_ir::{CallbackKind, Detail, Error, Graph, Result, TextPos};
use tensorlift_runtime::eager::py_function_callback;
use tensorlift_runtime::python::{numpy_callback, prepare, py_error};

use crate::bind::callback_target;

/// The callable named by `spec`, `"module:function"`: imports `module`
/// (a dotted module path, found on `sys.path`, i.e. `PYTHONPATH`) and
/// resolves `function`, which may be a dotted attribute path
/// (`"numpy:linalg.norm"`). The module may `import tensorlift` at its top.
///
/// Errors: `spec` without a non-empty module and function is
/// `InvalidArgument`; the module not found is `NotFound` naming it and
/// `sys.path`; an exception while importing it keeps its kind and
/// traceback (as a callback's does); a missing attribute is `NotFound`
/// naming it and the object it was looked up on; an object that is not
/// callable is `InvalidArgument`.
pub fn callable(spec: &str) -> Result<Py<PyAny>> {
    let (module, path) = spec
        .split_once(':')
        .filter(|(m, p)| !m.is_empty() && !p.is_empty())
        .ok_or_else(|| {
            Error::invalid(format!(
                "'{spec}' does not name a Python callable as module:function (e.g. 'mypkg.losses:huber')"
            ))
        })?;
    Python::attach(|py| {
        prepare(py)?;
        let m = py.import(module).map_err(|e| {
            if is_missing_module(py, &e, module) {
                let path = py
                    .import("sys")
                    .and_then(|s| s.getattr("path"))
                    .and_then(|p| p.extract::<Vec<String>>())
                    .unwrap_or_default();
                Error::NotFound(Detail::msg(format!(
                    "Python module '{module}' (of '{spec}') not found on sys.path {path:?}; put the directory holding it on PYTHONPATH"
                )))
            } else {
                py_error(py, e, &format!("importing Python module '{module}' (of '{spec}')"))
            }
        })?;
        let mut obj = m.into_any();
        let mut walked = module.to_string();
        for part in path.split('.') {
            obj = obj.getattr(part).map_err(|e| {
                if e.is_instance_of::<PyAttributeError>(py) {
                    Error::NotFound(Detail::msg(format!(
                        "'{walked}' has no attribute '{part}' (resolving the Python callable '{spec}')"
                    )))
                } else {
                    py_error(py, e, &format!("resolving the Python callable '{spec}'"))
                }
            })?;
            walked = format!("{walked}.{part}");
        }
        checked_callable(obj, &format!("'{spec}'"))
    })
}

/// True when `e` says that `module` itself (or a package on its path) does
/// not exist, as opposed to a module it imports.
fn is_missing_module(py: Python<'_>, e: &PyErr, module: &str) -> bool {
    if !e.is_instance_of::<PyModuleNotFoundError>(py) {
        return false;
    }
    let Ok(Some(name)) = e
        .value(py)
        .getattr("name")
        .and_then(|n| n.extract::<Option<String>>())
    else {
        return false;
    };
    module == name || module.starts_with(&format!("{name}."))
}

fn checked_callable(obj: Bound<'_, PyAny>, what: &str) -> Result<Py<PyAny>> {
    if obj.is_callable() {
        return Ok(obj.unbind());
    }
    let ty = obj
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "object".into());
    Err(Error::invalid(format!(
        "{what} is a Python {ty}, not a callable"
    )))
}

/// The function `name` defined by the Python `source` text, executed once
/// in a fresh module namespace (its globals are its own; nothing is added
/// to `sys.modules`). Tracebacks show the source lines. The source may
/// `import tensorlift`.
///
/// Errors: a syntax error is `InvalidArgument` with Python's message, its
/// `line:column` (1-based) in the error's `pos` (printed first); an exception while executing the
/// source keeps its kind and traceback; `name` not defined is `NotFound`
/// listing what the source defines; `name` not callable is
/// `InvalidArgument`.
pub fn callable_from_source(source: &str, name: &str) -> Result<Py<PyAny>> {
    static SOURCES: AtomicUsize = AtomicUsize::new(0);
    let file = format!(
        "<tensorlift source #{} of {name}>",
        SOURCES.fetch_add(1, Ordering::Relaxed)
    );
    Python::attach(|py| {
        prepare(py)?;
        let fail = |e: PyErr| py_error(py, e, &format!("running the Python source of '{name}'"));
        // Tracebacks read the source lines from linecache.
        let lines: Vec<String> = source.split_inclusive('\n').map(str::to_string).collect();
        py.import("linecache")
            .and_then(|lc| lc.getattr("cache"))
            .and_then(|cache| cache.set_item(&file, (source.len(), py.None(), lines, &file)))
            .map_err(fail)?;
        let builtins = py.import("builtins").map_err(fail)?;
        let compiled = builtins
            .call_method1("compile", (source, &file, "exec"))
            .map_err(|e| syntax_error(py, e, name).unwrap_or_else(&fail))?;
        let module = py
            .import("types")
            .and_then(|t| t.call_method1("ModuleType", (format!("<source of {name}>"),)))
            .map_err(fail)?;
        let globals = module.getattr("__dict__").map_err(fail)?;
        let globals = globals.cast::<PyDict>().map_err(|e| fail(e.into()))?;
        builtins
            .call_method1("exec", (compiled, globals))
            .map_err(fail)?;
        let Some(obj) = globals.get_item(name).map_err(fail)? else {
            let defined: Vec<String> = globals
                .keys()
                .iter()
                .filter_map(|k| k.extract::<String>().ok())
                .filter(|k| !k.starts_with("__"))
                .collect();
            return Err(Error::NotFound(Detail::msg(format!(
                "the Python source defines no '{name}' (it defines: {})",
                if defined.is_empty() {
                    "nothing".to_string()
                } else {
                    defined.join(", ")
                }
            ))));
        };
        checked_callable(obj, &format!("'{name}' of the Python source"))
    })
}

/// `e` as an `InvalidArgument` at the syntax error's line and column, or
/// `e` back when it is not a `SyntaxError`.
fn syntax_error(py: Python<'_>, e: PyErr, name: &str) -> std::result::Result<Error, PyErr> {
    if !e.is_instance_of::<PySyntaxError>(py) {
        return Err(e);
    }
    let v = e.value(py);
    let get = |attr: &str| -> Option<u32> { v.getattr(attr).ok()?.extract::<Option<u32>>().ok()? };
    let msg = v
        .getattr("msg")
        .and_then(|m| m.extract::<String>())
        .unwrap_or_else(|_| "invalid syntax".into());
    let (line, col) = (get("lineno").unwrap_or(0), get("offset").unwrap_or(0));
    Ok(Error::InvalidArgument(Detail {
        message: format!("syntax error in the Python source of '{name}': {msg}"),
        node: None,
        pos: (line > 0).then_some(TextPos { line, col }),
    }))
}

/// Binds the Python callable `func` to callback target `target` of `graph`
/// (a parsed program's callbacks have no body; see `docs/callbacks.md`),
/// replacing any callable bound before. The node's kind picks the calling
/// convention — `numpy_function` / `py_func`: NumPy arrays in and out;
/// `py_function`: eager `tensorlift.Tensor`s — and its declared result
/// dtypes are the `Tout` every call is checked against.
///
/// Errors: no such target is `NotFound` listing the graph's targets; a
/// `host_fn` target (a Rust closure: use [`crate::bind_host_fn`]), nodes
/// calling `target` with different kinds or `Tout`, or a `func` that is not
/// callable are `InvalidArgument`.
pub fn bind(graph: &mut Graph, target: &str, func: Py<PyAny>) -> Result<()> {
    let t = callback_target(graph, target)?;
    let callable = Python::attach(|py| -> Result<()> {
        prepare(py)?;
        if func.bind(py).is_callable() {
            Ok(())
        } else {
            Err(Error::invalid(format!(
                "the Python object bound to callback '{target}' is not callable"
            )))
        }
    });
    callable?;
    let cb = match t.kind {
        CallbackKind::NumpyFunction | CallbackKind::PyFunc => {
            numpy_callback(t.kind, func, t.tout, target.to_string())
        }
        CallbackKind::PyFunction => py_function_callback(func, t.tout, target.to_string()),
        CallbackKind::HostFn => {
            return Err(Error::invalid(format!(
                "callback '{target}' is a host_fn (a Rust closure): bind it with bind_host_fn; Python callables bind to numpy_function, py_func and py_function callbacks"
            )));
        }
    };
    graph.bind(target, cb.into_ref());
    Ok(())
}
