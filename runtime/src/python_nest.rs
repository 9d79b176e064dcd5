//! `tf.contrib.framework.py_func`'s runtime side: the callable is called
//! with nested positional arguments and keyword arguments (NumPy arrays at
//! tensor leaves, plain Python values as they were given), and its nested
//! return is checked against the declared structure, each leaf converted
//! as [`crate::python::from_numpy`] converts a `py_func` result. Every
//! mismatch names its path: `output ['b'][1] of py_func 'f' is float64, but
//! output_types says float32`.

use std::collections::BTreeMap;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use tensorlift_ir::{CallbackKind, DType, Detail, Error, Result, Shape};

use crate::callback::HostCallback;
use crate::nest::{Nest, NestPath, PathItem, quote_key};
use crate::python::{from_numpy, into_numpy, py_error};
use crate::tensor::Tensor;

/// A leaf of the callable's arguments.
#[derive(Debug)]
pub enum ArgLeaf {
    /// The callback node's input `i`, handed over as a NumPy array.
    Input(usize),
    /// A Python object passed through unchanged.
    Value(Py<PyAny>),
}

/// What a nested `py_func` callback calls and what it must return.
#[derive(Debug)]
pub struct NestedCall {
    /// The Python callable.
    pub func: Py<PyAny>,
    /// Positional arguments.
    pub args: Vec<Nest<ArgLeaf>>,
    /// Keyword arguments.
    pub kwargs: BTreeMap<String, Nest<ArgLeaf>>,
    /// The declared structure and dtypes of the return value.
    pub output_types: Nest<DType>,
    /// The declared shapes, one per leaf of `output_types` in flattening
    /// order (`Shape::Unranked` where undeclared).
    pub output_shapes: Vec<Shape>,
}

/// A host callback of `kind` that calls `call.func(*args, **kwargs)` and
/// returns the leaves of its result in `output_types`' flattening order
/// (dicts by sorted key). The node's inputs are the tensors the
/// [`ArgLeaf::Input`] leaves name; `name` labels errors (`py_func 'f'`).
pub fn nested_callback(kind: CallbackKind, call: NestedCall, name: String) -> HostCallback {
    HostCallback::owned(kind, move |inputs: Vec<Tensor>| {
        Python::attach(|py| {
            let who = format!("{} '{name}'", kind.name());
            let mut arrays = inputs
                .into_iter()
                .map(|t| into_numpy(py, t).map(Some))
                .collect::<Result<Vec<_>>>()?;
            let args = call
                .args
                .iter()
                .map(|a| build(py, a, &mut arrays))
                .collect::<Result<Vec<_>>>()?;
            let args = PyTuple::new(py, args).map_err(|e| conversion(py, e))?;
            let kwargs = PyDict::new(py);
            for (k, v) in &call.kwargs {
                kwargs
                    .set_item(k, build(py, v, &mut arrays)?)
                    .map_err(|e| conversion(py, e))?;
            }
            // The callable gets the only references to the handed-over arrays.
            drop(arrays);
            let out = call.func.bind(py).call(args, Some(&kwargs)).map_err(|e| {
                py_error(
                    py,
                    e,
                    &crate::python::callable_label(call.func.bind(py), who.clone()),
                )
            })?;
            let mut leaves = Vec::with_capacity(call.output_shapes.len());
            collect(
                py,
                out,
                &call.output_types,
                &NestPath::root(),
                &who,
                &mut leaves,
            )?;
            // `out` and its containers are gone: a fresh array is referenced
            // by `leaves` alone and may be adopted without a copy.
            leaves
                .iter()
                .zip(call.output_types.leaves())
                .zip(&call.output_shapes)
                .enumerate()
                .map(|(i, (((path, value), want), shape))| {
                    let t = from_numpy(py, value, *want, i, &who)
                        .map_err(|e| at_path(e, i, path, &who))?;
                    if !shape.accepts(t.shape()) {
                        return Err(Error::invalid(format!(
                            "{} of {who} has shape {:?}, but its declared shape is {shape}",
                            path.describe("output"),
                            t.shape(),
                        )));
                    }
                    Ok(t)
                })
                .collect()
        })
    })
}

fn conversion(py: Python<'_>, e: PyErr) -> Error {
    py_error(py, e, "building the arguments of a nested py_func")
}

/// The Python object for argument structure `n`: tuples, lists and dicts
/// rebuilt, input leaves taken from `arrays` (each exactly once), plain
/// values as they are.
fn build<'py>(
    py: Python<'py>,
    n: &Nest<ArgLeaf>,
    arrays: &mut [Option<Bound<'py, PyAny>>],
) -> Result<Bound<'py, PyAny>> {
    Ok(match n {
        Nest::Leaf(ArgLeaf::Input(i)) => {
            arrays.get_mut(*i).and_then(Option::take).ok_or_else(|| {
                Error::internal(format!(
                    "py_func argument input {i} is missing or used twice"
                ))
            })?
        }
        Nest::Leaf(ArgLeaf::Value(v)) => v.bind(py).clone(),
        Nest::Tuple(items) => {
            let items = items
                .iter()
                .map(|i| build(py, i, arrays))
                .collect::<Result<Vec<_>>>()?;
            PyTuple::new(py, items)
                .map_err(|e| conversion(py, e))?
                .into_any()
        }
        Nest::List(items) => {
            let items = items
                .iter()
                .map(|i| build(py, i, arrays))
                .collect::<Result<Vec<_>>>()?;
            PyList::new(py, items)
                .map_err(|e| conversion(py, e))?
                .into_any()
        }
        Nest::Dict(m) => {
            let d = PyDict::new(py);
            for (k, v) in m {
                d.set_item(k, build(py, v, arrays)?)
                    .map_err(|e| conversion(py, e))?;
            }
            d.into_any()
        }
    })
}

/// What a returned Python value is, in the words of [`Nest::describe`].
fn describe(value: &Bound<'_, PyAny>) -> String {
    if let Ok(t) = value.cast::<PyTuple>() {
        format!("a tuple of {}", t.len())
    } else if let Ok(l) = value.cast::<PyList>() {
        format!("a list of {}", l.len())
    } else if let Ok(d) = value.cast::<PyDict>() {
        let keys = d
            .keys()
            .iter()
            .map(|k| {
                k.repr()
                    .map(|r| r.to_string())
                    .unwrap_or_else(|_| "?".into())
            })
            .collect::<Vec<_>>();
        format!("a dict with keys [{}]", keys.join(", "))
    } else {
        let ty = value
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_else(|_| "object".into());
        format!("a {ty}")
    }
}

/// Checks `value` against the declared structure `want` at `path` and
/// appends its leaves (with their paths) to `out` in flattening order.
fn collect<'py>(
    py: Python<'py>,
    value: Bound<'py, PyAny>,
    want: &Nest<DType>,
    path: &NestPath,
    who: &str,
    out: &mut Vec<(NestPath, Bound<'py, PyAny>)>,
) -> Result<()> {
    let here = || format!("{} of {who}", path.describe("output"));
    let differ = || {
        Error::invalid(format!(
            "{} is {}, but output_types has {}",
            here(),
            describe(&value),
            want.describe()
        ))
    };
    match want {
        Nest::Leaf(_) => out.push((path.clone(), value)),
        Nest::Tuple(items) => {
            let got = value.cast::<PyTuple>().ok().map(|t| t.to_list());
            let Some(got) = got else {
                return none_or(differ(), &value, items);
            };
            drop(value);
            collect_items(py, got, "tuple", items, path, who, out)?;
        }
        Nest::List(items) => {
            let got = value.cast::<PyList>().ok().cloned();
            let Some(got) = got else {
                return none_or(differ(), &value, items);
            };
            drop(value);
            collect_items(py, got, "list", items, path, who, out)?;
        }
        Nest::Dict(m) => {
            let Ok(d) = value.cast::<PyDict>() else {
                return Err(differ());
            };
            let d = d.clone();
            drop(value);
            for k in m.keys() {
                if !d.contains(k).map_err(|e| py_error(py, e, &here()))? {
                    return Err(Error::invalid(format!(
                        "{} has no key {}, which output_types declares",
                        here(),
                        quote_key(k)
                    )));
                }
            }
            for k in d.keys() {
                let declared = k.extract::<String>().is_ok_and(|k| m.contains_key(&k));
                if !declared {
                    let key = k
                        .repr()
                        .map(|r| r.to_string())
                        .unwrap_or_else(|_| "?".into());
                    return Err(Error::invalid(format!(
                        "{} has key {key}, which output_types does not declare",
                        here()
                    )));
                }
            }
            for (k, w) in m {
                let item = d
                    .get_item(k)
                    .map_err(|e| py_error(py, e, &here()))?
                    .ok_or_else(|| {
                        Error::internal(format!("key '{k}' vanished from {}", here()))
                    })?;
                collect(py, item, w, &path.child(PathItem::Key(k.clone())), who, out)?;
            }
        }
    }
    Ok(())
}

/// `Ok` when an empty structure was declared and `value` is None (a bare
/// `return`), else `mismatch`.
fn none_or<T>(mismatch: Error, value: &Bound<'_, PyAny>, items: &[Nest<T>]) -> Result<()> {
    if items.is_empty() && value.is_none() {
        Ok(())
    } else {
        Err(mismatch)
    }
}

/// [`collect`] over the items of a returned tuple or list (`got`, as a
/// list) against the declared `items`.
fn collect_items<'py>(
    py: Python<'py>,
    got: Bound<'py, PyList>,
    kind: &str,
    items: &[Nest<DType>],
    path: &NestPath,
    who: &str,
    out: &mut Vec<(NestPath, Bound<'py, PyAny>)>,
) -> Result<()> {
    if got.len() != items.len() {
        return Err(Error::invalid(format!(
            "{} of {who} is a {kind} of {}, but output_types has {}",
            path.describe("output"),
            got.len(),
            items.len()
        )));
    }
    for (i, w) in items.iter().enumerate() {
        let item = got
            .get_item(i)
            .map_err(|e| py_error(py, e, &format!("{} of {who}", path.describe("output"))))?;
        collect(py, item, w, &path.child(PathItem::Index(i)), who, out)?;
    }
    Ok(())
}

/// A conversion error of flat output `i` (which [`from_numpy`] words as
/// `output {i} of {who}` against `Tout`) reworded for the nested API: the
/// output's path, against `output_types`.
fn at_path(e: Error, i: usize, path: &NestPath, who: &str) -> Error {
    let Some(d) = e.detail() else {
        return e;
    };
    let message = d
        .message
        .replacen(
            &format!("output {i} of {who}"),
            &format!("{} of {who}", path.describe("output")),
            1,
        )
        .replacen("but Tout says", "but output_types says", 1);
    Error::new(
        e.code(),
        Detail {
            message,
            node: d.node.clone(),
            pos: d.pos,
        },
    )
}
