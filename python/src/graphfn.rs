//! A function rebuilt from its graph's text in another process (an
//! unpickled `tl.function`): the text parsed, its callbacks bound to the
//! unpickled Python callables, optimized once, and run interpreted or
//! compiled on the first call of each input shape (specialized to it, as
//! the original function compiles a graph with unknown dims per shape).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use tensorlift::runtime::eager::PyTensor;
use tensorlift::runtime::interp;
use tensorlift::{
    CompiledGraph, Graph, JitOptions, Tensor, TensorType, compile_graph, copy_outputs,
};

use crate::raise;

/// `tensorlift._native.GraphFunction(text, file, callbacks, jit_compile)`.
#[pyclass(name = "GraphFunction", module = "tensorlift._native", frozen)]
pub struct PyGraphFunction {
    optimized: Graph,
    jit: bool,
    /// The compiled graph per concrete input types.
    compiled: Mutex<HashMap<Vec<TensorType>, Arc<CompiledGraph>>>,
}

impl std::fmt::Debug for PyGraphFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GraphFunction({})", self.optimized.name)
    }
}

#[pymethods]
impl PyGraphFunction {
    /// Parses `text` (named `file` in errors), binds each `(target,
    /// callable)` of `callbacks` and optimizes; a target left unbound is an
    /// error naming it when the function runs.
    #[new]
    fn new(
        py: Python<'_>,
        text: &str,
        file: &str,
        callbacks: Vec<(String, Py<PyAny>)>,
        jit_compile: bool,
    ) -> PyResult<Self> {
        let mut g = tensorlift::ir::text::parse(text, file).map_err(|e| raise(py, e))?;
        for (target, func) in callbacks {
            tensorlift::bind_python(&mut g, &target, func).map_err(|e| raise(py, e))?;
        }
        interp::optimize(&mut g).map_err(|e| raise(py, e))?;
        Ok(PyGraphFunction {
            optimized: g,
            jit: jit_compile,
            compiled: Mutex::new(HashMap::new()),
        })
    }

    /// Runs the function without the GIL (compiling it first under
    /// jit_compile).
    fn __call__(
        &self,
        py: Python<'_>,
        inputs: Vec<PyRef<'_, PyTensor>>,
    ) -> PyResult<Vec<PyTensor>> {
        let ts: Vec<Tensor> = inputs.iter().map(|t| t.t.clone()).collect();
        let out = py
            .detach(|| {
                if !self.jit {
                    return interp::run(&self.optimized, &ts);
                }
                self.compiled(&ts)?.run(&ts)
            })
            .map_err(|e| raise(py, e))?;
        Ok(out.into_iter().map(|t| PyTensor { t }).collect())
    }

    /// [`__call__`](Self::__call__) writing output `k` into the NumPy
    /// array `outputs[k]` ([`crate::OutBuffers`] checks them).
    fn call_into(
        &self,
        py: Python<'_>,
        inputs: Vec<PyRef<'_, PyTensor>>,
        outputs: Vec<Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let ts: Vec<Tensor> = inputs.iter().map(|t| t.t.clone()).collect();
        let mut bufs = crate::OutBuffers::check(&outputs, &ts)?;
        let mut outs = bufs.views().map_err(|e| raise(py, e))?;
        py.detach(|| {
            if !self.jit {
                return copy_outputs(interp::run(&self.optimized, &ts)?, &mut outs);
            }
            self.compiled(&ts)?.run_into(&ts, &mut outs)
        })
        .map_err(|e| raise(py, e))
    }
}

impl PyGraphFunction {
    /// The compiled graph for the types of `inputs`, compiled on first
    /// use (the graph specialized to them when its parameters have unknown
    /// dims).
    fn compiled(&self, inputs: &[Tensor]) -> Result<Arc<CompiledGraph>, tensorlift::Error> {
        let types: Vec<TensorType> = inputs.iter().map(Tensor::ty).collect();
        let cache = || self.compiled.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = cache().get(&types) {
            return Ok(c.clone());
        }
        let c = compile_graph(&self.optimized.specialize(&types)?, &JitOptions::default())?;
        Ok(cache().entry(types).or_insert_with(|| Arc::new(c)).clone())
    }
}
