//! The executable: owns the JIT module (freed on drop), the plan, the
//! constants; runs the compiled `main` on caller tensors.

use std::sync::atomic::{AtomicUsize, Ordering};

use cranelift_jit::JITModule;
use tensorlift_ir::{CallbackKind, DType, Detail, Error, Graph, NodeRef, Offender, Op, Result};
use tensorlift_runtime::fpmode::FpMode;
use tensorlift_runtime::{AlignedBytes, Tensor, TensorMut, interp};

use crate::codegen::{self, JitOptions};
use crate::fusion::{self, SlotKind};
use crate::rt::{CallCtx, StepTable};

/// Owns a finalized JIT module and frees its code memory on drop.
struct ModuleHolder(Option<JITModule>);

impl Drop for ModuleHolder {
    fn drop(&mut self) {
        if let Some(m) = self.0.take() {
            // SAFETY: the module's code is only reachable through the
            // executable that owns this holder, which is being dropped; no
            // function pointer into it survives.
            unsafe { m.free_memory() };
        }
    }
}

/// Compiled native code for one graph and one set of input shapes.
pub struct Executable {
    // Field order matters: the module (code) is dropped before the tables
    // its code points into.
    #[allow(dead_code, reason = "held for its Drop, which frees the code")]
    module: ModuleHolder,
    main: codegen::Main,
    table: Box<StepTable>,
    consts: Vec<Option<Tensor>>,
    clif: crate::codegen::Clif,
    options: JitOptions,
    /// Steps that split over the pool per call (see `parallel::keep_awake`).
    sections: usize,
    /// `NotFound` naming every callback with no callable bound: returned by
    /// every run before anything runs.
    unbound: Option<Error>,
}

// SAFETY: after finalization the module is never mutated; the generated code
// is reentrant (it only touches its stack and the per-call buffer table),
// and the step table and constants are read-only. Dropping frees the code
// exactly once.
unsafe impl Send for Executable {}
// SAFETY: see `Send`; `run` takes `&self` and shares nothing mutable.
unsafe impl Sync for Executable {}

impl std::fmt::Debug for Executable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executable")
            .field("graph", &self.table.plan.graph.name)
            .field("options", &self.options)
            .finish()
    }
}

/// Lists every node that cannot be compiled, or `Ok` when all can.
pub fn check(g: &Graph) -> Result<()> {
    check_nodes(g, true)
}

/// Lists the nodes that can never be compiled (`py_function`), ignoring
/// shapes that are only unknown until a callback runs — what a caller
/// that splits programs at such callbacks needs to reject up front.
pub fn check_compilable(g: &Graph) -> Result<()> {
    check_nodes(g, false)
}

fn check_nodes(graph: &Graph, shapes: bool) -> Result<()> {
    let mut offenders = Vec::new();
    // Loop bodies and branches are compiled too.
    for (i, g) in graph.all_graphs().into_iter().enumerate() {
        check_graph(g, shapes, i == 0, &mut offenders);
    }
    if offenders.is_empty() {
        Ok(())
    } else {
        Err(Error::JitIncompatible { offenders })
    }
}

/// `top`: `g` is the program itself (not a loop body or branch), which
/// reaches here with a callback of unknown result shape only when
/// compiled whole: `compile_graph` and functions split it there.
fn check_graph(g: &Graph, shapes: bool, top: bool, offenders: &mut Vec<Offender>) {
    for id in g.node_ids() {
        let n = g.node(id);
        let node = NodeRef {
            name: n.name.clone(),
            op: n.op.name(),
            site: n.site.clone(),
        };
        if let Op::Callback(c) = &n.op
            && c.kind == CallbackKind::PyFunction
        {
            offenders.push(Offender {
                node,
                reason: "py_function runs Python on eager tensors and cannot be compiled with jit_compile=true; use numpy_function/py_func (which are compiled as calls through a trampoline), or jit_compile=false".to_string(),
            });
            continue;
        }
        if shapes && let Some(r) = n.results.iter().find(|r| !g.ty(**r).shape.is_static()) {
            offenders.push(Offender {
                node,
                reason: match (&n.op, top) {
                    (Op::Callback(_), false) => format!(
                        "its result type {} is not static: inside a loop or branch body (compiled as a whole) a callback's result needs a declared shape (set_shape, host_fn_with, output_shapes); at the top level compiled code is split at it",
                        g.ty(*r)
                    ),
                    (Op::Callback(_), true) => format!(
                        "its result type {} is not static: a program compiled whole (compiler::compile, `tensorlift compile`) needs static shapes, so declare the callback's result shape (set_shape, host_fn_with, output_shapes; in .tlir, its result type); compile_graph and functions with jit_compile split compiled code at such a callback instead",
                        g.ty(*r)
                    ),
                    (_, false) => format!(
                        "its type {} is not static: inside a loop or branch body, a value computed from a callback's result of undeclared shape cannot be compiled (declare the callback's result shape with set_shape)",
                        g.ty(*r)
                    ),
                    (_, true) => format!(
                        "its type {} is not static: a program compiled whole needs static shapes (declare the shapes of the callbacks it is computed from)",
                        g.ty(*r)
                    ),
                },
            });
        }
    }
}

static DUMP_SEQ: AtomicUsize = AtomicUsize::new(0);

/// Compiles `graph` (static shapes) to native code.
pub fn compile(graph: &Graph, options: &JitOptions) -> Result<Executable> {
    check(graph)?;
    let mut g = graph.clone();
    interp::optimize(&mut g)?;
    // Not in exact mode: a quotient by a reciprocal rounds twice (as XLA's
    // code does), and a scale moved into a product is exact unless a value
    // leaves the normal range. The reciprocals first: `(q·kᵀ) / 8` becomes
    // `· 0.125`, which `scale_into_dot` then moves into the smaller operand.
    if !options.exact {
        if tensorlift_ir::passes::reciprocal_of_broadcast_divisors(&mut g) {
            interp::optimize(&mut g)?;
        }
        if tensorlift_ir::passes::scale_into_dot(&mut g) {
            interp::optimize(&mut g)?;
        }
        // Long f32 sums as rows and their sums (an f32 row sum's lanes add
        // in sequence; the interpreter sums in f64).
        if tensorlift_ir::passes::split_long_sums(&mut g) {
            interp::optimize(&mut g)?;
        }
    }
    let mut plan = fusion::plan(&g, options.exact)?;
    if !options.exact {
        fusion::matvec_as_reductions(&mut plan);
    }
    crate::parallel::record(&mut plan, options);
    let table = Box::new(StepTable::new(plan));
    let generated = codegen::generate(&table.plan, &*table as *const StepTable, options)?;
    let consts = table
        .plan
        .slots
        .iter()
        .map(|s| match &s.kind {
            SlotKind::Const(l) => Tensor::from_literal(l).map(Some),
            SlotKind::Input(_)
            | SlotKind::Temp { .. }
            | SlotKind::Output
            | SlotKind::HandOff { .. } => Ok(None),
        })
        .collect::<Result<Vec<_>>>()?;
    let unbound = interp::check_bindings(&table.plan.graph).err();
    let sections = crate::parallel::sections(&table.plan, options);
    let exe = Executable {
        module: ModuleHolder(Some(generated.module)),
        main: generated.main,
        table,
        consts,
        clif: generated.clif,
        options: *options,
        sections,
        unbound,
    };
    if let Some(dir) = std::env::var_os("TENSORLIFT_DUMP_TO") {
        let seq = DUMP_SEQ.fetch_add(1, Ordering::Relaxed);
        exe.dump_to(
            std::path::Path::new(&dir),
            &format!("{}.{seq}", graph.name),
            Some(graph),
        )?;
    }
    Ok(exe)
}

impl Executable {
    /// The optimized graph that was compiled.
    pub fn graph(&self) -> &Graph {
        &self.table.plan.graph
    }

    /// The fusion plan as text: slots, kernels with their expressions, GEMM
    /// and runtime steps, and every fusion decision with its reason.
    pub fn fused_ir(&self) -> String {
        self.table.plan.dump()
    }

    /// The Cranelift IR of every kernel and of `main`.
    pub fn cranelift_ir(&self) -> String {
        self.clif.print()
    }

    /// The options it was compiled with.
    pub fn options(&self) -> &JitOptions {
        &self.options
    }

    /// Writes every stage to `dir` as `<stem>.<stage>.<ext>`.
    pub fn dump_to(&self, dir: &std::path::Path, stem: &str, traced: Option<&Graph>) -> Result<()> {
        let io = |e: std::io::Error| {
            Error::invalid(format!("cannot write dumps to {}: {e}", dir.display()))
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        if let Some(t) = traced {
            std::fs::write(
                dir.join(format!("{stem}.input.tlir")),
                tensorlift_ir::text::print(t),
            )
            .map_err(io)?;
        }
        std::fs::write(
            dir.join(format!("{stem}.optimized.tlir")),
            tensorlift_ir::text::print(self.graph()),
        )
        .map_err(io)?;
        std::fs::write(dir.join(format!("{stem}.fused.txt")), self.fused_ir()).map_err(io)?;
        std::fs::write(dir.join(format!("{stem}.clif")), self.clif.print()).map_err(io)?;
        Ok(())
    }

    /// Runs the compiled code on `inputs`.
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        (self.run_with(inputs, &mut []))?
            .into_iter()
            .map(|t| t.ok_or_else(|| Error::internal("an output was not produced")))
            .collect()
    }

    /// Runs the compiled code on `inputs`, writing output `k` into
    /// `outputs[k]`, which must have its dtype and shape
    /// ([`check_outputs`]). Outputs the code computes are written straight
    /// into a 16-byte aligned buffer (the alignment of the runtime's own);
    /// the others (an input or constant returned as is, a value returned
    /// twice, a callback's result, a buffer less aligned) are copied. On
    /// error the buffers' contents are unspecified.
    pub fn run_into(&self, inputs: &[Tensor], outputs: &mut [TensorMut<'_>]) -> Result<()> {
        let plan = &self.table.plan;
        let types: Vec<(DType, &[usize])> = (plan.outputs.iter())
            .map(|&s| (plan.slots[s].dtype, &plan.slots[s].dims[..]))
            .collect();
        check_outputs(&types, outputs)?;
        let produced = self.run_with(inputs, outputs)?;
        for (k, t) in produced.into_iter().enumerate() {
            if let Some(t) = t {
                copy_into(&t, &mut outputs[k])?;
            }
        }
        Ok(())
    }

    /// `e` (the buffers do not fit) at the node whose value needs the
    /// largest buffer, so that the error names an op and its site.
    fn at_largest_buffer(&self, e: Error) -> Error {
        let plan = &self.table.plan;
        let Some(largest) = plan.slots.iter().max_by_key(|s| s.bytes()) else {
            return e;
        };
        let graph = &plan.graph;
        let node = graph
            .node_ids()
            .find(|&id| graph.node(id).name == largest.name);
        let e = e.and(format!(
            "the largest buffer, {}[{}] of '{}', needs {} bytes",
            largest.dtype.short_name(),
            largest
                .dims
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(","),
            largest.name,
            largest.bytes()
        ));
        match node {
            Some(id) => e.at_node(graph.node_ref(id)),
            None => e,
        }
    }

    /// Runs the code; output slots the code writes take the matching
    /// caller buffer of `into` where it is 16-byte aligned (first output
    /// of the slot only). Returns each output as a tensor, or `None` where
    /// it is already in `into`.
    fn run_with(
        &self,
        inputs: &[Tensor],
        into: &mut [TensorMut<'_>],
    ) -> Result<Vec<Option<Tensor>>> {
        let plan = &self.table.plan;
        interp::check_inputs(&plan.graph, inputs)?;
        if let Some(e) = &self.unbound {
            return Err(e.clone());
        }
        let out_bytes: usize = plan
            .slots
            .iter()
            .filter(|s| matches!(s.kind, SlotKind::Output | SlotKind::HandOff { .. }))
            .map(|s| s.bytes())
            .sum();
        interp::check_allocation(
            plan.arena_bytes.saturating_add(out_bytes),
            "running this program",
        )
        .map_err(|e| self.at_largest_buffer(e))?;
        // Buffers are not zeroed (for_overwrite): every temporary is written
        // by its step before any step reads it (the buffer plan follows
        // program order), the arena itself is never read from Rust, and
        // every output or handed-off slot is fully written by the step that
        // produces it before the executor or a callback reads it.
        // SAFETY: as just said.
        let mut arena = unsafe { AlignedBytes::try_for_overwrite(plan.arena_bytes)? };
        let arena_ptr = arena.as_mut_ptr();
        let mut outs: Vec<Option<AlignedBytes>> = vec![None; plan.slots.len()];
        // The output (index into `into`) each slot is written straight into.
        // (Empty unless buffers were given: `run` allocates nothing for it.)
        let mut direct: Vec<Option<usize>> = Vec::new();
        if !into.is_empty() {
            direct.resize(plan.slots.len(), None);
        }
        for (k, out) in into.iter_mut().enumerate() {
            let s = plan.outputs[k];
            let slot = &plan.slots[s];
            let bytes = out.bytes_mut();
            if slot.kind == SlotKind::Output
                && slot.dtype != DType::String
                && direct[s].is_none()
                && bytes.len() == slot.bytes()
                && (bytes.as_ptr() as usize).is_multiple_of(16)
            {
                direct[s] = Some(k);
            }
        }
        let mut owned: Vec<Option<AlignedBytes>> = Vec::new();
        let mut bufs: Vec<*mut u8> = Vec::with_capacity(plan.slots.len());
        for (i, s) in plan.slots.iter().enumerate() {
            let p = match &s.kind {
                SlotKind::Input(k) => inputs[*k].bytes().as_ptr() as *mut u8,
                SlotKind::Const(_) => self.consts[i]
                    .as_ref()
                    .map_or(std::ptr::null_mut(), |t| t.bytes().as_ptr() as *mut u8),
                // SAFETY: offsets come from the buffer plan and lie inside the arena.
                SlotKind::Temp { offset } => unsafe { arena_ptr.add(*offset) },
                SlotKind::Output => match direct.get(i).copied().flatten() {
                    // The caller's buffer: exclusively borrowed for the
                    // call, of the slot's size, aligned as ours are.
                    Some(k) => into[k].bytes_mut().as_mut_ptr(),
                    None => {
                        // SAFETY: see the arena above.
                        let mut b = unsafe { AlignedBytes::try_for_overwrite(s.bytes())? };
                        let p = b.as_mut_ptr();
                        outs[i] = Some(b);
                        p
                    }
                },
                SlotKind::HandOff { .. } => {
                    // SAFETY: see the arena above.
                    let mut b = unsafe { AlignedBytes::try_for_overwrite(s.bytes())? };
                    let p = b.as_mut_ptr();
                    if owned.len() <= i {
                        owned.resize_with(i + 1, || None);
                    }
                    owned[i] = Some(b);
                    p
                }
            };
            bufs.push(p);
        }
        let mut ctx = CallCtx {
            error: None,
            strings: Vec::new(),
            inputs: inputs.to_vec(),
            owned,
            kept: Vec::new(),
            poll_status: 0,
        };
        for (i, s) in plan.slots.iter().enumerate() {
            if let (SlotKind::Input(k), tensorlift_ir::DType::String) = (&s.kind, s.dtype) {
                if ctx.strings.len() <= i {
                    ctx.strings.resize(i + 1, None);
                }
                ctx.strings[i] = Some(inputs[*k].clone());
            }
        }
        let awake = crate::parallel::keep_awake(self.sections);
        // Entered as a call either way: callbacks run in the caller's mode
        // (`FpMode::outer`), whatever mode the code runs in.
        let flush = self.options.flush_denormals && !self.options.exact;
        let mode = FpMode::enter_call(flush.then(FpMode::flush_denormals));
        // SAFETY: `bufs` holds a valid pointer of the planned size for every
        // slot the code touches; inputs and constants are only read; the
        // code and tables live as long as `self`.
        // (A callback step may redirect a slot's pointer to the tensor it
        // returned, hence the mutable table.)
        let status = unsafe {
            match &self.main {
                codegen::Main::Code(entry) => entry(bufs.as_mut_ptr().cast_const(), &mut ctx),
                codegen::Main::Calls(calls) => codegen::direct::run(
                    calls,
                    &*self.table,
                    bufs.as_mut_ptr().cast_const(),
                    &mut ctx,
                ),
            }
        };
        drop(mode);
        drop(awake);
        if status != 0 {
            return Err(ctx.error.take().unwrap_or_else(|| {
                Error::internal(format!("compiled code failed with status {status}"))
            }));
        }
        let mut done: Vec<Option<Tensor>> = vec![None; plan.slots.len()];
        plan.outputs
            .iter()
            .enumerate()
            .map(|(k, &s)| {
                if let Some(t) = &done[s] {
                    return Ok(Some(t.clone()));
                }
                let slot = &plan.slots[s];
                if let Some(t) = ctx.kept.get_mut(s).and_then(Option::take) {
                    done[s] = Some(t.clone());
                    return Ok(Some(t));
                }
                match direct.get(s).copied().flatten() {
                    // Written in place.
                    Some(first) if first == k => return Ok(None),
                    // A second output of the slot: a copy of the first.
                    Some(first) => {
                        let t =
                            Tensor::from_bytes(slot.dtype, &slot.dims, into[first].bytes_mut())?;
                        done[s] = Some(t.clone());
                        return Ok(Some(t));
                    }
                    None => {}
                }
                let t = match &slot.kind {
                    SlotKind::Input(k) => inputs[*k].clone(),
                    SlotKind::Const(_) => self.consts[s]
                        .clone()
                        .ok_or_else(|| Error::internal("missing constant"))?,
                    SlotKind::Output if slot.dtype == tensorlift_ir::DType::String => ctx
                        .strings
                        .get_mut(s)
                        .and_then(Option::take)
                        .ok_or_else(|| Error::internal("string output missing"))?,
                    SlotKind::Output => {
                        let b = outs[s]
                            .take()
                            .ok_or_else(|| Error::internal("output buffer missing"))?;
                        Tensor::from_aligned(slot.dtype, &slot.dims, b)?
                    }
                    SlotKind::Temp { .. } | SlotKind::HandOff { .. } => {
                        return Err(Error::Internal(Detail::msg(format!(
                            "output slot {s} is a temporary"
                        ))));
                    }
                };
                done[s] = Some(t.clone());
                Ok(Some(t))
            })
            .collect()
    }
}

/// Checks that `outputs` are as many as `types` (a function's outputs) and
/// each has its dtype and shape: an `InvalidArgument` naming the first
/// that is not.
pub fn check_outputs(types: &[(DType, &[usize])], outputs: &[TensorMut<'_>]) -> Result<()> {
    if outputs.len() != types.len() {
        return Err(Error::invalid(format!(
            "the function returns {} output(s), but {} buffer(s) were given to write them into",
            types.len(),
            outputs.len()
        )));
    }
    for (k, ((dtype, dims), out)) in types.iter().zip(outputs).enumerate() {
        if out.dtype() != *dtype || out.shape() != *dims {
            return Err(Error::invalid(format!(
                "output {k} is {}{dims:?}, but the buffer given for it is {}{:?}",
                dtype.short_name(),
                out.dtype().short_name(),
                out.shape()
            )));
        }
        if *dtype == DType::String {
            return Err(Error::invalid(format!(
                "output {k} is a string tensor, which cannot be written into a buffer"
            )));
        }
    }
    Ok(())
}

/// Copies `t`'s elements into `out` (same dtype and shape).
pub fn copy_into(t: &Tensor, out: &mut TensorMut<'_>) -> Result<()> {
    if t.dtype() != out.dtype() || t.shape() != out.shape() {
        return Err(Error::internal(format!(
            "an output of {}{:?} does not fit its buffer of {}{:?}",
            t.dtype().short_name(),
            t.shape(),
            out.dtype().short_name(),
            out.shape()
        )));
    }
    out.bytes_mut().copy_from_slice(t.bytes());
    Ok(())
}
