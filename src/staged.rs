//! Compiled programs split at callbacks whose output shapes are only known
//! at run time (TensorFlow's "unknown shape unless declared"): the code
//! before the callback is compiled once; the callback runs; the code after
//! it is compiled when its input shapes are first seen and cached per shape
//! (every compilation is counted).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tensorlift_compiler::{Executable, JitOptions};
use tensorlift_ir::{Error, Graph, NodeId, Op, Result, TensorType, ValueId};
use tensorlift_runtime::{Tensor, TensorMut, callback};

/// A compiled program: whole, or split at a callback.
#[derive(Debug, Clone)]
pub enum Runner {
    /// One executable.
    Whole(Arc<Executable>),
    /// Prefix, callback, then a suffix compiled per shape.
    Split(Arc<Split>),
}

/// The pieces of a program split at callback `node`.
#[derive(Debug)]
pub struct Split {
    prefix: Arc<Executable>,
    graph: Graph,
    node: NodeId,
    boundary: Vec<ValueId>,
    suffix: Graph,
    cache: Mutex<HashMap<Vec<TensorType>, Runner>>,
    options: JitOptions,
    compiles: Arc<AtomicUsize>,
}

impl Runner {
    /// Compiles `graph` (concrete input shapes), splitting it at the first
    /// callback whose results have no static shape.
    pub fn build(
        graph: &Graph,
        options: &JitOptions,
        compiles: &Arc<AtomicUsize>,
    ) -> Result<Runner> {
        // What can never compile (py_function) is reported before anything
        // runs; shapes unknown until a callback runs are what splitting is for.
        tensorlift_compiler::check_compilable(graph)?;
        // Every callback of the program, not only the prefix's, is bound
        // before the prefix (and its callbacks) can run.
        tensorlift_runtime::interp::check_bindings(graph)?;
        let Some(cid) = first_dynamic_callback(graph) else {
            let exe = tensorlift_compiler::compile(graph, options)?;
            compiles.fetch_add(1, Ordering::Relaxed);
            return Ok(Runner::Whole(Arc::new(exe)));
        };
        let (prefix_graph, boundary) = prefix(graph, cid)?;
        let suffix = suffix(graph, cid, &boundary)?;
        let prefix = tensorlift_compiler::compile(&prefix_graph, options)?;
        compiles.fetch_add(1, Ordering::Relaxed);
        Ok(Runner::Split(Arc::new(Split {
            prefix: Arc::new(prefix),
            graph: graph.clone(),
            node: cid,
            boundary,
            suffix,
            cache: Mutex::new(HashMap::new()),
            options: *options,
            compiles: compiles.clone(),
        })))
    }

    /// Runs the program.
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        match self {
            Runner::Whole(e) => e.run(inputs),
            Runner::Split(s) => s.run(inputs),
        }
    }

    /// Runs the program, writing its outputs into `outputs` (see
    /// [`Executable::run_into`]; a split program copies them in).
    pub fn run_into(&self, inputs: &[Tensor], outputs: &mut [TensorMut<'_>]) -> Result<()> {
        match self {
            Runner::Whole(e) => e.run_into(inputs, outputs),
            Runner::Split(s) => copy_outputs(s.run(inputs)?, outputs),
        }
    }

    /// The single executable, when the program is not split.
    pub fn executable(&self) -> Option<&Arc<Executable>> {
        match self {
            Runner::Whole(e) => Some(e),
            Runner::Split(_) => None,
        }
    }
}

/// Checks `outputs` against the tensors `produced` (an `InvalidArgument`
/// naming the first that does not fit, before anything is copied) and
/// copies them in: what `call_into` does with results computed elsewhere
/// (interpreted, or by a split program).
pub fn copy_outputs(produced: Vec<Tensor>, outputs: &mut [TensorMut<'_>]) -> Result<()> {
    let types: Vec<(tensorlift_ir::DType, &[usize])> =
        produced.iter().map(|t| (t.dtype(), t.shape())).collect();
    tensorlift_compiler::check_outputs(&types, outputs)?;
    for (t, out) in produced.iter().zip(outputs) {
        tensorlift_compiler::copy_into(t, out)?;
    }
    Ok(())
}

impl Split {
    fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let pre = self.prefix.run(inputs)?;
        let by_value: HashMap<ValueId, &Tensor> =
            self.boundary.iter().copied().zip(pre.iter()).collect();
        let node = self.graph.node(self.node);
        let args = node
            .inputs
            .iter()
            .map(|v| {
                by_value
                    .get(v)
                    .map(|t| (*t).clone())
                    .ok_or_else(|| Error::internal("callback operand missing at the split"))
            })
            .collect::<Result<Vec<Tensor>>>()?;
        // The prefix's values also feed the suffix, so they are shared (a
        // NumPy callback gets copies).
        let outs = callback::run_callback(&self.graph, node, args)
            .map_err(|e| e.at_node(self.graph.node_ref(self.node)))?;
        let mut rest: Vec<Tensor> = pre;
        rest.extend(outs);
        let types: Vec<TensorType> = rest.iter().map(Tensor::ty).collect();
        let runner = {
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            match cache.get(&types) {
                Some(r) => r.clone(),
                None => {
                    let mut g = self.suffix.specialize(&types)?;
                    tensorlift_runtime::interp::optimize(&mut g)?;
                    let r = Runner::build(&g, &self.options, &self.compiles)?;
                    cache.insert(types, r.clone());
                    r
                }
            }
        };
        runner.run(&rest)
    }
}

/// The first callback (in program order) with a result of non-static shape.
fn first_dynamic_callback(g: &Graph) -> Option<NodeId> {
    g.node_ids().find(|id| {
        let n = g.node(*id);
        matches!(n.op, Op::Callback(_)) && n.results.iter().any(|r| !g.ty(*r).shape.is_static())
    })
}

/// The nodes before `cid` (and every parameter), returning as outputs every
/// value the rest of the program reads.
fn prefix(g: &Graph, cid: NodeId) -> Result<(Graph, Vec<ValueId>)> {
    let mut used_later = vec![false; g.num_values()];
    for id in g.node_ids().filter(|id| *id >= cid) {
        for v in &g.node(id).inputs {
            used_later[v.index()] = true;
        }
    }
    for o in g.outputs() {
        used_later[o.value.index()] = true;
    }
    let kept =
        |id: NodeId, n: &tensorlift_ir::Node| id < cid || matches!(n.op, Op::Parameter { .. });
    let boundary: Vec<ValueId> = (g.node_ids())
        .filter(|id| kept(*id, g.node(*id)))
        .flat_map(|id| g.node(id).results.clone())
        .filter(|v| used_later[v.index()])
        .collect();
    let outputs: Vec<(ValueId, String)> = (boundary.iter().enumerate())
        .map(|(i, v)| (*v, format!("b{i}")))
        .collect();
    let name = format!("{}.before_{}", g.name, g.node(cid).name);
    Ok((g.extract(name, &[], kept, &outputs)?, boundary))
}

/// The callback's results and the boundary values become parameters; the
/// nodes after `cid` follow.
fn suffix(g: &Graph, cid: NodeId, boundary: &[ValueId]) -> Result<Graph> {
    let c = g.node(cid);
    let mut params = boundary.to_vec();
    params.extend(&c.results);
    let outputs: Vec<(ValueId, String)> = (g.outputs().iter())
        .map(|o| (o.value, o.name.clone()))
        .collect();
    let name = format!("{}.after_{}", g.name, c.name);
    g.extract(
        name,
        &params,
        |id, n| id > cid && !matches!(n.op, Op::Parameter { .. }),
        &outputs,
    )
}

/// A graph built or parsed outside [`crate::function`] (e.g. a `.tlir`
/// program with its callbacks bound), optimized and compiled for the
/// concrete parameter types it declares. A callback whose result shape is
/// unknown splits it as for traced functions: the code after the callback
/// is compiled per shape when first seen.
#[derive(Debug, Clone)]
pub struct CompiledGraph {
    runner: Runner,
    compiles: Arc<AtomicUsize>,
}

/// Compiles `graph` (optimized first; every callback must be bound, or a
/// `NotFound` error names every unbound one).
pub fn compile_graph(graph: &Graph, options: &JitOptions) -> Result<CompiledGraph> {
    let mut g = graph.clone();
    tensorlift_runtime::interp::optimize(&mut g)?;
    let compiles = Arc::new(AtomicUsize::new(0));
    let runner = Runner::build(&g, options, &compiles)?;
    Ok(CompiledGraph { runner, compiles })
}

impl CompiledGraph {
    /// Runs the compiled program on `inputs`.
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        self.runner.run(inputs)
    }

    /// Runs the compiled program on `inputs`, writing output `k` into
    /// `outputs[k]` (its dtype and shape; see [`Executable::run_into`]).
    pub fn run_into(&self, inputs: &[Tensor], outputs: &mut [TensorMut<'_>]) -> Result<()> {
        self.runner.run_into(inputs, outputs)
    }

    /// How many times code was compiled for it (1, plus one per run-time
    /// shape seen after a callback of unknown result shape).
    pub fn compile_count(&self) -> usize {
        self.compiles.load(Ordering::Relaxed)
    }

    /// The executable, unless the program is split at a callback.
    pub fn executable(&self) -> Option<&Executable> {
        self.runner.executable().map(|e| &**e)
    }
}
