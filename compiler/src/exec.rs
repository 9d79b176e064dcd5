//! The executable: owns the JIT module (freed on drop), the plan, the
//! constants; runs the compiled `main` on caller tensors.

use std::sync::atomic::{AtomicUsize, Ordering};

use cranelift_jit::JITModule;
use tensorlift_ir::{CallbackKind, Detail, Error, Graph, NodeRef, Offender, Op, Result};
use tensorlift_runtime::{AlignedBytes, Tensor, interp};

use crate::codegen::{self, JitOptions};
use crate::fusion::{self, SlotKind};
use crate::rt::{CallCtx, StepTable};

type Entry = unsafe extern "C" fn(*const *mut u8, *mut CallCtx) -> i32;

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
    entry: Entry,
    table: Box<StepTable>,
    consts: Vec<Option<Tensor>>,
    clif: crate::codegen::Clif,
    options: JitOptions,
    /// Steps that split over the pool per call (see `parallel::KeepAwake`).
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
    for g in graph.all_graphs() {
        check_graph(g, shapes, &mut offenders);
    }
    if offenders.is_empty() {
        Ok(())
    } else {
        Err(Error::JitIncompatible { offenders })
    }
}

fn check_graph(g: &Graph, shapes: bool, offenders: &mut Vec<Offender>) {
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
                reason: format!(
                    "its type {} is not static; the JIT compiles for concrete input shapes",
                    g.ty(*r)
                ),
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
    let mut plan = fusion::plan(&g, options.exact)?;
    if !options.exact {
        fusion::matvec_as_reductions(&mut plan);
    }
    crate::parallel::record(&mut plan, options);
    let table = Box::new(StepTable::new(plan));
    let generated = codegen::generate(&table.plan, &*table as *const StepTable, options)?;
    // SAFETY: `main` was generated with exactly this signature.
    let entry: Entry = unsafe { std::mem::transmute::<*const u8, Entry>(generated.entry) };
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
        entry,
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
            "this program's buffers",
        )?;
        // Buffers are not zeroed (for_overwrite): every temporary is written
        // by its step before any step reads it (the buffer plan follows
        // program order), the arena itself is never read from Rust, and
        // every output or handed-off slot is fully written by the step that
        // produces it before the executor or a callback reads it.
        // SAFETY: as just said.
        let mut arena = unsafe { AlignedBytes::try_for_overwrite(plan.arena_bytes)? };
        let arena_ptr = arena.as_mut_ptr();
        let mut outs: Vec<Option<AlignedBytes>> = vec![None; plan.slots.len()];
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
                SlotKind::Output => {
                    // SAFETY: see the arena above.
                    let mut b = unsafe { AlignedBytes::try_for_overwrite(s.bytes())? };
                    let p = b.as_mut_ptr();
                    outs[i] = Some(b);
                    p
                }
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
        };
        for (i, s) in plan.slots.iter().enumerate() {
            if let (SlotKind::Input(k), tensorlift_ir::DType::String) = (&s.kind, s.dtype) {
                if ctx.strings.len() <= i {
                    ctx.strings.resize(i + 1, None);
                }
                ctx.strings[i] = Some(inputs[*k].clone());
            }
        }
        let awake = crate::parallel::KeepAwake::start(self.sections);
        // SAFETY: `bufs` holds a valid pointer of the planned size for every
        // slot the code touches; inputs and constants are only read; the
        // code and tables live as long as `self`.
        // (A callback step may redirect a slot's pointer to the tensor it
        // returned, hence the mutable table.)
        let status = unsafe { (self.entry)(bufs.as_mut_ptr().cast_const(), &mut ctx) };
        drop(awake);
        if status != 0 {
            return Err(ctx.error.take().unwrap_or_else(|| {
                Error::internal(format!("compiled code failed with status {status}"))
            }));
        }
        let mut done: Vec<Option<Tensor>> = vec![None; plan.slots.len()];
        plan.outputs
            .iter()
            .map(|&s| {
                if let Some(t) = &done[s] {
                    return Ok(t.clone());
                }
                let slot = &plan.slots[s];
                if let Some(t) = ctx.kept.get_mut(s).and_then(Option::take) {
                    done[s] = Some(t.clone());
                    return Ok(t);
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
                Ok(t)
            })
            .collect()
    }
}
