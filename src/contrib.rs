//! `tf.contrib.framework.py_func` from Rust: nested arguments (traced values
//! mixed with plain Python values), keyword arguments, and nested declared
//! output types and shapes, with the results handed back in the same
//! structure ([`Nest`]).

use tensorlift_runtime::nest::Nest;

use crate::function::IntoOutputs;
use crate::trace::Sym;
#[cfg(feature = "python")]
use crate::trace::Tracer;
#[cfg(feature = "python")]
use std::collections::BTreeMap;

#[cfg(feature = "python")]
use tensorlift_ir::{CallbackKind, DType, Detail, Error, NodeRef, Shape, Site};
#[cfg(feature = "python")]
use tensorlift_runtime::python_nest::{ArgLeaf, NestedCall, nested_callback};

#[cfg(feature = "python")]
use crate::trace::{CallableId, CallbackSpec};

/// The results of a nested callback are the function's outputs in
/// flattening order (dicts by sorted key).
impl IntoOutputs for Nest<Sym> {
    fn into_outputs(self) -> Vec<Sym> {
        self.into_leaves()
    }
}

/// A leaf of [`Tracer::contrib_py_func`]'s arguments: a traced value (the
/// callable gets it as a NumPy array) or a plain Python value (passed
/// through as it is: an int, a string, `None`, any object).
#[cfg(feature = "python")]
#[derive(Debug)]
pub enum PyArg {
    /// A traced value.
    Sym(Sym),
    /// A Python object, passed through unchanged.
    Py(pyo3::Py<pyo3::PyAny>),
}

#[cfg(feature = "python")]
impl From<Sym> for PyArg {
    fn from(s: Sym) -> Self {
        PyArg::Sym(s)
    }
}

#[cfg(feature = "python")]
impl From<pyo3::Py<pyo3::PyAny>> for PyArg {
    fn from(p: pyo3::Py<pyo3::PyAny>) -> Self {
        PyArg::Py(p)
    }
}

#[cfg(feature = "python")]
impl From<Sym> for Nest<PyArg> {
    fn from(s: Sym) -> Self {
        Nest::Leaf(PyArg::Sym(s))
    }
}

#[cfg(feature = "python")]
impl Tracer {
    /// `tf.contrib.framework.py_func`: calls the Python callable `func` as
    /// `func(*args, **kwargs)`, where each argument is a nested structure
    /// whose [`PyArg::Sym`] leaves arrive as NumPy arrays (as for
    /// [`Tracer::py_func`]) and whose [`PyArg::Py`] leaves arrive as the
    /// Python objects they are; tuples, lists and dicts are rebuilt as such.
    ///
    /// `func` must return the structure of `output_types` (a single dtype: one
    /// value; tuples, lists and dicts: the same containers, lengths and
    /// keys; `None` is accepted for an empty tuple or list); each leaf is
    /// converted as a `py_func` result to its declared dtype and checked
    /// against `output_shapes` (same structure as `output_types`; undeclared:
    /// unknown shapes). A mismatch is an `InvalidArgument` error naming the
    /// path, e.g. `output ['b'][1] of py_func 'py_func' is float64, but
    /// output_types says float32`.
    ///
    /// The results come back in the structure of `output_types`, its leaves
    /// in `tf.nest` order (dicts by sorted key; also the order of a
    /// function's outputs when the `Nest` is returned from it). The node
    /// is an ordinary `py_func` callback: it runs interpreted and compiled,
    /// and `stateful` has `py_func`'s meaning. Errors in the structure of
    /// the call (a repeated keyword, `output_shapes` not shaped like
    /// `output_types`) are recorded at trace time.
    #[track_caller]
    pub fn contrib_py_func(
        &self,
        func: pyo3::Py<pyo3::PyAny>,
        args: Vec<Nest<PyArg>>,
        kwargs: Vec<(&str, Nest<PyArg>)>,
        output_types: &Nest<DType>,
        output_shapes: Option<&Nest<Shape>>,
        stateful: bool,
    ) -> Nest<Sym> {
        let site = Site::caller();
        self.nested_py_func(
            None,
            func,
            args,
            kwargs,
            output_types,
            output_shapes,
            stateful,
            site,
        )
    }

    /// [`Tracer::contrib_py_func`] with a name, used for the node and in
    /// errors (`py_func 'name'`).
    #[track_caller]
    #[allow(
        clippy::too_many_arguments,
        reason = "TensorFlow's signature plus a name"
    )]
    pub fn contrib_py_func_with(
        &self,
        name: &str,
        func: pyo3::Py<pyo3::PyAny>,
        args: Vec<Nest<PyArg>>,
        kwargs: Vec<(&str, Nest<PyArg>)>,
        output_types: &Nest<DType>,
        output_shapes: Option<&Nest<Shape>>,
        stateful: bool,
    ) -> Nest<Sym> {
        let site = Site::caller();
        self.nested_py_func(
            Some(name),
            func,
            args,
            kwargs,
            output_types,
            output_shapes,
            stateful,
            site,
        )
    }

    #[allow(
        clippy::too_many_arguments,
        reason = "internal plumbing of the two public entry points"
    )]
    fn nested_py_func(
        &self,
        name: Option<&str>,
        func: pyo3::Py<pyo3::PyAny>,
        args: Vec<Nest<PyArg>>,
        kwargs: Vec<(&str, Nest<PyArg>)>,
        output_types: &Nest<DType>,
        output_shapes: Option<&Nest<Shape>>,
        stateful: bool,
        site: Site,
    ) -> Nest<Sym> {
        let kind = CallbackKind::PyFunc;
        let label = name.unwrap_or(kind.name());
        let fail = |message: String| {
            self.record(Error::InvalidArgument(Detail {
                message,
                node: Some(NodeRef {
                    name: label.into(),
                    op: kind.name().into(),
                    site: site.clone(),
                }),
                pos: None,
            }));
            output_types.map(|_| self.poisoned(1).remove(0))
        };
        // Tensor leaves become the node's inputs: positional arguments
        // first, then keyword arguments by sorted name, each in tf.nest order.
        let mut inputs: Vec<Sym> = Vec::new();
        let mut lift = |n: Nest<PyArg>| {
            n.map_into(|leaf| match leaf {
                PyArg::Sym(s) => {
                    inputs.push(s);
                    ArgLeaf::Input(inputs.len() - 1)
                }
                PyArg::Py(p) => ArgLeaf::Value(p),
            })
        };
        let mut by_name = BTreeMap::new();
        for (k, v) in kwargs {
            if by_name.contains_key(k) {
                return fail(format!("keyword argument '{k}' is given more than once"));
            }
            by_name.insert(k.to_string(), v);
        }
        let args: Vec<Nest<ArgLeaf>> = args.into_iter().map(&mut lift).collect();
        let kwargs: BTreeMap<String, Nest<ArgLeaf>> =
            by_name.into_iter().map(|(k, v)| (k, lift(v))).collect();
        let tout: Vec<DType> = output_types.leaves().into_iter().copied().collect();
        let shapes: Vec<Shape> = match output_shapes {
            Some(s) => {
                if let Some(m) = output_types.structure_mismatch(s) {
                    return fail(format!(
                        "{} is {}, but output_types has {}",
                        m.path.describe("output_shapes"),
                        m.other,
                        m.this
                    ));
                }
                s.leaves().into_iter().cloned().collect()
            }
            None => vec![Shape::Unranked; tout.len()],
        };
        let call = NestedCall {
            func,
            args,
            kwargs,
            output_types: output_types.clone(),
            output_shapes: shapes.clone(),
        };
        let body = nested_callback(kind, call, label.to_string());
        // Identity would have to cover the argument structure and the
        // Python values passed through, not only `func`: each call is its
        // own callable (never merged by CSE).
        let spec = CallbackSpec {
            kind,
            id: CallableId::Unique,
            name,
            tout: &tout,
            output_shapes: output_shapes.map(|_| shapes.as_slice()),
            stateful,
        };
        let refs: Vec<&Sym> = inputs.iter().collect();
        let results = self.callback_with(spec, &refs, body, site.clone());
        match output_types.unflatten(results) {
            Ok(r) => r,
            Err(e) => fail(format!(
                "internal: the results do not fit output_types: {e}"
            )),
        }
    }
}
