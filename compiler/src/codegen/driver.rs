//! The module and its `main`: a Cranelift function per kernel, then
//! `main`, which runs the plan's steps in order (kernels, runtime steps,
//! GEMMs, copies, and control flow as blocks and branches) and returns the
//! first failing status.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use cranelift_codegen::control::ControlPlane;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{
    AbiParam, Function, InstBuilder, StackSlotData, StackSlotKind, UserFuncName, types,
};
use cranelift_codegen::isa::{CallConv, OwnedTargetIsa, TargetIsa};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{FuncId, Linkage, Module, ModuleReloc};
use tensorlift_ir::{DType, Error, Result};

use crate::fusion::{ENode, Kernel, KernelKind, Plan, SlotId, SlotKind, Step};
use crate::rt::{RtFn, StepTable};

use super::cost::kernel_work;
use super::{JitOptions, KernelGen, OptLevel, comp_ty, trusted, unaligned};

fn cg_err(e: impl std::fmt::Display) -> Error {
    Error::internal(format!("code generation failed: {e}"))
}

/// The finalized module, its entry point and its Cranelift IR.
pub(crate) struct Generated {
    pub module: JITModule,
    pub main: Main,
    pub clif: Clif,
}

/// A compiled `main`: `fn(bufs, ctx) -> status`.
pub(crate) type Entry = unsafe extern "C" fn(*const *mut u8, *mut crate::rt::CallCtx) -> i32;

/// How a program's `main` runs.
pub(crate) enum Main {
    /// Compiled.
    Code(Entry),
    /// A list of calls Rust runs (`direct.rs`).
    Calls(Vec<super::direct::Call>),
}

/// The Cranelift IR of a compiled program, kept as functions and printed
/// only when asked for (printing is a sixth of a compilation's work).
#[derive(Debug, Default)]
pub(crate) struct Clif(Vec<ClifPart>);

#[derive(Debug)]
enum ClifPart {
    Text(String),
    Function(String, Box<Function>),
    /// Machine code emitted directly (`native.rs`): its header, bytes and
    /// where its instructions start, listed when printed.
    Machine(String, Vec<u8>, usize),
}

impl Clif {
    fn text(&mut self, t: String) {
        self.0.push(ClifPart::Text(t));
    }

    fn function(&mut self, header: String, f: &Function) {
        self.0.push(ClifPart::Function(header, Box::new(f.clone())));
    }

    fn machine(&mut self, header: String, native: &super::native::Native) {
        let part = ClifPart::Machine(header, native.bytes.clone(), native.code_at);
        self.0.push(part);
    }

    /// The text: each function after its header.
    pub fn print(&self) -> String {
        let mut out = String::new();
        for p in &self.0 {
            match p {
                ClifPart::Text(t) => out.push_str(t),
                ClifPart::Function(h, f) => out.push_str(&format!("{h}\n{}\n", f.display())),
                ClifPart::Machine(h, bytes, at) => {
                    let listing = super::native::Native::listing(bytes, *at);
                    out.push_str(&format!("{h}\n{listing}\n"));
                }
            }
        }
        out
    }
}

fn make_module(opts: &JitOptions) -> Result<(JITModule, OwnedTargetIsa)> {
    let mut flags = settings::builder();
    let level = match opts.opt_level {
        OptLevel::None => "none",
        OptLevel::Speed => "speed",
    };
    flags.set("opt_level", level).map_err(cg_err)?;
    flags
        .set("use_colocated_libcalls", "false")
        .map_err(cg_err)?;
    flags.set("is_pic", "false").map_err(cg_err)?;
    // Cranelift's IR verifier runs in debug builds (and so in tests), as
    // our own verifier does; release builds skip it.
    flags
        .set(
            "enable_verifier",
            if cfg!(debug_assertions) {
                "true"
            } else {
                "false"
            },
        )
        .map_err(cg_err)?;
    crate::isa::check_cap()?;
    let mut isa = cranelift_native::builder().map_err(|m| {
        Error::unimplemented(format!("this host is not supported by Cranelift: {m}"))
    })?;
    crate::isa::cap_cranelift(&mut isa)?;
    let isa = isa.finish(settings::Flags::new(flags)).map_err(cg_err)?;
    let mut jb = JITBuilder::with_isa(isa.clone(), cranelift_module::default_libcall_names());
    for f in RtFn::ALL {
        let sym = f.symbol();
        jb.symbol(sym.name, sym.addr);
    }
    Ok((JITModule::new(jb), isa))
}

/// True for kernels `main` emits in place instead of calling: scalar loop
/// kernels (a loop counter's compare and increment, a scalar carry's
/// update), where a call costs more than the work.
fn inline_in_main(k: &Kernel) -> bool {
    k.dims.is_empty() && k.kind == KernelKind::Loop && k.stash.is_none()
}

/// The slots `main` keeps in Cranelift variables instead of memory: scalar
/// temporaries that only inline kernels, copies and branches touch (a
/// loop's counter, its predicate, a scalar carry), so a loop over them runs
/// in registers with no store and reload per iteration.
fn register_slots(plan: &Plan) -> Vec<SlotId> {
    let mut ok: Vec<bool> = (plan.slots.iter())
        .map(|sl| {
            let scalar_ty = match sl.dtype {
                DType::Bool
                | DType::I8
                | DType::U8
                | DType::I16
                | DType::U16
                | DType::I32
                | DType::U32
                | DType::I64
                | DType::U64
                | DType::F32
                | DType::F64 => true,
                DType::F16 | DType::BF16 | DType::C64 | DType::C128 | DType::String => false,
            };
            // An output is stored once, when `main` returns.
            let owned = match sl.kind {
                SlotKind::Temp { .. } | SlotKind::Output => true,
                SlotKind::Input(_) | SlotKind::Const(_) | SlotKind::HandOff { .. } => false,
            };
            scalar_ty && owned && sl.dims.is_empty()
        })
        .collect();
    for (i, step) in plan.steps.iter().enumerate() {
        let in_group = plan.groups.iter().any(|g| (g.start..g.end).contains(&i));
        match step {
            Step::Kernel(k) if !in_group && inline_in_main(k) => {
                // A load of another type reads the slot's bytes.
                for n in &k.nodes {
                    if let ENode::Load { slot, dtype, .. } = n
                        && *dtype != plan.slots[*slot].dtype
                    {
                        ok[*slot] = false;
                    }
                }
            }
            Step::Copy { from, to } => {
                for (&f, &t) in from.iter().zip(to) {
                    if plan.slots[f].dtype != plan.slots[t].dtype {
                        (ok[f], ok[t]) = (false, false);
                    }
                }
            }
            Step::Label(_) | Step::Jump(_) | Step::BranchUnless { .. } | Step::Switch { .. } => {}
            Step::Kernel(_) | Step::Gemm(_) | Step::Pack(_) | Step::Runtime { .. } => {
                let (reads, writes) = crate::fusion::step_slots(step);
                for s in reads.into_iter().chain(writes) {
                    ok[s] = false;
                }
            }
        }
    }
    (0..plan.slots.len()).filter(|&s| ok[s]).collect()
}

/// The kernel a step compiles to a function of its own: a kernel step's,
/// or a GEMM's epilogue.
fn step_kernel(step: &Step) -> Option<&Kernel> {
    match step {
        Step::Kernel(k) => Some(k),
        Step::Gemm(g) => g.epilogue.as_deref().map(|e| &e.kernel),
        Step::Runtime { .. }
        | Step::Pack(_)
        | Step::Copy { .. }
        | Step::Label(_)
        | Step::Jump(_)
        | Step::BranchUnless { .. }
        | Step::Switch { .. } => None,
    }
}

/// Copies between slots up to this many bytes are inline loads and stores
/// (a loop's scalar carries), larger ones `memmove` calls.
const SMALL_COPY: usize = 64;

/// Compiles `plan` into a module. `table` must outlive the module's code.
pub(crate) fn generate(
    plan: &Plan,
    table: *const StepTable,
    opts: &JitOptions,
) -> Result<Generated> {
    let (mut module, isa) = make_module(opts)?;
    // Each function compiles while the next one is built.
    let mut pipeline = Pipeline::new(isa, opts.threads);
    let ptr = module.target_config().pointer_type();
    let mut sig = module.make_signature();
    sig.params.push(AbiParam::new(ptr));
    sig.params.push(AbiParam::new(ptr));
    sig.returns.push(AbiParam::new(types::I32));
    // Kernels take the range [begin, end) of their outermost loop dim, so
    // the runtime can split them across threads.
    let mut ksig = sig.clone();
    ksig.params.push(AbiParam::new(types::I64));
    ksig.params.push(AbiParam::new(types::I64));
    let mut clif = Clif::default();
    let mut helpers = Helpers {
        ids: HashMap::new(),
        rows: HashMap::new(),
        row_code: Vec::new(),
    };
    let mut fctx = FunctionBuilderContext::new();
    // Kernel functions: declared first, so `main` (which calls them) is
    // built and compiling while they are built.
    let direct = super::direct::qualifies(plan);
    let has_function = |i: usize, k: &Kernel| {
        direct || !inline_in_main(k) || plan.groups.iter().any(|g| (g.start..g.end).contains(&i))
    };
    let mut kernel_ids = HashMap::new();
    for (i, step) in plan.steps.iter().enumerate() {
        if let Some(k) = step_kernel(step)
            && has_function(i, k)
        {
            let id = module
                .declare_function(&format!("kernel{i}"), Linkage::Local, &ksig)
                .map_err(cg_err)?;
            kernel_ids.insert(i, id);
        }
    }
    // main: run the steps in order, stopping at the first failing status
    // (compiled only where the plan has control flow).
    let mut func = Function::with_name_signature(UserFuncName::user(0, u32::MAX), sig.clone());
    let main_id = if direct {
        None
    } else {
        let mut b = FunctionBuilder::new(&mut func, &mut fctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        b.seal_block(entry);
        let (bufs, ctx) = (b.block_params(entry)[0], b.block_params(entry)[1]);
        let step_fn = helpers.get(&mut module, RtFn::RuntimeStep)?;
        let step_ref = module.declare_func_in_func(step_fn, b.func);
        let gemm_fn = helpers.get(&mut module, RtFn::Gemm)?;
        let gemm_ref = module.declare_func_in_func(gemm_fn, b.func);
        // (Imported only where a GEMM has an epilogue.)
        let has_epilogue =
            (plan.steps.iter()).any(|st| matches!(st, Step::Gemm(g) if g.epilogue.is_some()));
        let gemm_then_ref = match has_epilogue {
            true => {
                let f = helpers.get(&mut module, RtFn::GemmThen)?;
                Some(module.declare_func_in_func(f, b.func))
            }
            false => None,
        };
        let par_fn = helpers.get(&mut module, RtFn::Parallel)?;
        let par_ref = module.declare_func_in_func(par_fn, b.func);
        let group_fn = helpers.get(&mut module, RtFn::RowGroup)?;
        let group_ref = module.declare_func_in_func(group_fn, b.func);
        // Control flow: one block per label, sealed once every jump to it
        // has been emitted.
        let labels: Vec<_> = (0..plan.labels).map(|_| b.create_block()).collect();
        let slot_ptr = |b: &mut FunctionBuilder<'_>, s: usize| {
            b.ins().load(ptr, trusted(), bufs, (s * 8) as i32)
        };
        // Loops and branch arms: a failing step inside them says which
        // iteration or branch it ran in (`rt::tl_where`, innermost first),
        // each loop counting its iterations in a variable.
        // (Only those around a step that can fail.)
        let fallible = |i: usize| match &plan.steps[i] {
            Step::Kernel(k) => {
                !inline_in_main(k) || plan.groups.iter().any(|g| (g.start..g.end).contains(&i))
            }
            Step::Gemm(_) | Step::Pack(_) | Step::Runtime { .. } => true,
            Step::Copy { .. }
            | Step::Label(_)
            | Step::Jump(_)
            | Step::BranchUnless { .. }
            | Step::Switch { .. } => false,
        };
        let every = places(plan);
        // Every loop counts its iterations: it polls whether it must stop
        // (`rt::tl_poll`, a Ctrl-C) every `POLL_EVERY` of them.
        let loops: Vec<usize> = every.iter().filter_map(Place::loop_label).collect();
        let poll_ref = match loops.is_empty() {
            true => None,
            false => {
                let id = poll_trampoline(&mut module, &mut helpers, &mut pipeline, &mut clif, ptr)?;
                Some(module.declare_func_in_func(id, b.func))
            }
        };
        let places: Vec<Place> = (every.into_iter())
            .filter(|p| (p.start + 1..p.end).any(fallible))
            .collect();
        // Loops whose steps call the runtime (a GEMM, a kernel function, a
        // callback) poll at every iteration: one more call is nothing there,
        // and an iteration may take long.
        let heavy: std::collections::HashSet<usize> =
            places.iter().filter_map(Place::loop_label).collect();
        let where_ref = match places.is_empty() {
            true => None,
            false => {
                let f = helpers.get(&mut module, RtFn::Where)?;
                Some(module.declare_func_in_func(f, b.func))
            }
        };
        let counters: HashMap<usize, Variable> = (loops.iter())
            .map(|&label| (label, b.declare_var(types::I64)))
            .collect();
        let mut regs: HashMap<SlotId, Variable> = HashMap::new();
        for s in register_slots(plan) {
            let ty = comp_ty(plan.slots[s].dtype);
            let var = b.declare_var(ty);
            let zero = match ty {
                types::F32 => b.ins().f32const(0.0),
                types::F64 => b.ins().f64const(0.0),
                _ => b.ins().iconst(ty, 0),
            };
            b.def_var(var, zero);
            regs.insert(s, var);
        }
        for (i, step) in plan.steps.iter().enumerate() {
            if plan.groups.iter().any(|g| g.start < i && i < g.end) {
                continue;
            }
            let group = plan.groups.iter().find(|g| g.start == i);
            let status = match step {
                Step::Kernel(k) if group.is_none() && inline_in_main(k) => {
                    let mut kg =
                        KernelGen::new(&mut b, &mut module, &mut helpers, plan, k, opts, ptr);
                    kg.emit_scalar(bufs, &regs)?;
                    continue;
                }
                Step::Copy { from, to } => {
                    for (&f, &t) in from.iter().zip(to) {
                        let n = plan.slots[t].bytes();
                        if f == t || n == 0 {
                            continue;
                        }
                        match (regs.get(&f), regs.get(&t)) {
                            (Some(&vf), Some(&vt)) => {
                                let v = b.use_var(vf);
                                b.def_var(vt, v);
                                continue;
                            }
                            (Some(&vf), None) => {
                                let v = b.use_var(vf);
                                let dst = slot_ptr(&mut b, t);
                                b.ins().store(trusted(), v, dst, 0);
                                continue;
                            }
                            (None, Some(&vt)) => {
                                let src = slot_ptr(&mut b, f);
                                let ty = comp_ty(plan.slots[f].dtype);
                                let v = b.ins().load(ty, trusted(), src, 0);
                                b.def_var(vt, v);
                                continue;
                            }
                            (None, None) => {}
                        }
                        let (src, dst) = (slot_ptr(&mut b, f), slot_ptr(&mut b, t));
                        if n <= SMALL_COPY {
                            // A scalar or small carry: loads and stores.
                            let mut off = 0usize;
                            for (size, ty) in [
                                (8, types::I64),
                                (4, types::I32),
                                (2, types::I16),
                                (1, types::I8),
                            ] {
                                while n - off >= size {
                                    let v = b.ins().load(ty, unaligned(), src, off as i32);
                                    b.ins().store(unaligned(), v, dst, off as i32);
                                    off += size;
                                }
                            }
                        } else {
                            let len = b.ins().iconst(ptr, n as i64);
                            b.call_memmove(module.target_config(), dst, src, len);
                        }
                    }
                    continue;
                }
                Step::Label(l) => {
                    if let Some(&c) = counters.get(l) {
                        // Entering a loop: iteration 0.
                        let zero = b.ins().iconst(types::I64, 0);
                        b.def_var(c, zero);
                    }
                    b.ins().jump(labels[*l], &[]);
                    b.switch_to_block(labels[*l]);
                    continue;
                }
                Step::Jump(l) => {
                    if let (Some(&c), Some(poll_ref)) = (counters.get(l), poll_ref) {
                        // Back to the loop's condition: the next iteration.
                        let v = b.use_var(c);
                        let next = b.ins().iadd_imm_s(v, 1);
                        b.def_var(c, next);
                        let (poll, go_on, stop) =
                            (b.create_block(), b.create_block(), b.create_block());
                        if heavy.contains(l) {
                            b.ins().jump(poll, &[]);
                        } else {
                            let every = tensorlift_runtime::interrupt::POLL_EVERY - 1;
                            let masked = b.ins().band_imm_u(next, every as i64);
                            b.ins().brif(masked, go_on, &[], poll, &[]);
                        }
                        b.switch_to_block(poll);
                        b.ins().call(poll_ref, &[ctx]);
                        let status =
                            b.ins()
                                .load(types::I32, trusted(), ctx, crate::rt::POLL_STATUS_OFFSET);
                        b.ins().brif(status, stop, &[], go_on, &[]);
                        b.switch_to_block(stop);
                        b.ins().return_(&[status]);
                        b.switch_to_block(go_on);
                    }
                    b.ins().jump(labels[*l], &[]);
                    let dead = b.create_block();
                    b.switch_to_block(dead);
                    continue;
                }
                Step::BranchUnless { pred, label } => {
                    let v = match regs.get(pred) {
                        Some(&var) => b.use_var(var),
                        None => {
                            let p = slot_ptr(&mut b, *pred);
                            b.ins().uload8(types::I32, trusted(), p, 0)
                        }
                    };
                    let go_on = b.create_block();
                    b.ins().brif(v, go_on, &[], labels[*label], &[]);
                    b.switch_to_block(go_on);
                    continue;
                }
                Step::Switch { index, labels: ls } => {
                    let k = match regs.get(index) {
                        Some(&var) => b.use_var(var),
                        None => {
                            let p = slot_ptr(&mut b, *index);
                            b.ins().load(types::I32, trusted(), p, 0)
                        }
                    };
                    // Every label but the last is tested; anything else
                    // (out of range included) goes to the last.
                    for (j, l) in ls.iter().enumerate().take(ls.len().saturating_sub(1)) {
                        let hit = b.ins().icmp_imm_s(IntCC::Equal, k, j as i64);
                        let next = b.create_block();
                        b.ins().brif(hit, labels[*l], &[], next, &[]);
                        b.switch_to_block(next);
                    }
                    if let Some(last) = ls.last() {
                        b.ins().jump(labels[*last], &[]);
                        let dead = b.create_block();
                        b.switch_to_block(dead);
                    }
                    continue;
                }
                Step::Kernel(_) if let Some(g) = group => {
                    // The group's kernels as an array of function addresses
                    // on the stack, run block by block by the runtime.
                    let n = g.end - g.start;
                    let slot = b.create_sized_stack_slot(StackSlotData::new(
                        StackSlotKind::ExplicitSlot,
                        (n * 8) as u32,
                        3,
                    ));
                    for (j, step) in plan.steps[g.start..g.end].iter().enumerate() {
                        let Step::Kernel(_) = step else {
                            return Err(Error::internal("a row group holds a non-kernel step"));
                        };
                        let f = module.declare_func_in_func(kernel_ids[&(g.start + j)], b.func);
                        let addr = b.ins().func_addr(ptr, f);
                        b.ins().stack_store(ptr, addr, slot, (j * 8) as i32);
                    }
                    let fns = b.ins().stack_addr(ptr, slot, 0);
                    let count = b.ins().iconst(types::I64, n as i64);
                    let rows = b.ins().iconst(types::I64, g.rows as i64);
                    let block = b.ins().iconst(types::I64, g.block as i64);
                    let par = b
                        .ins()
                        .iconst(types::I64, i64::from(group_splits(plan, g, opts)));
                    let call = b
                        .ins()
                        .call(group_ref, &[fns, count, bufs, ctx, rows, block, par]);
                    b.inst_results(call)[0]
                }
                Step::Kernel(k) => {
                    let f = module.declare_func_in_func(kernel_ids[&i], b.func);
                    let n0 = k.dims.first().copied().unwrap_or(1) as i64;
                    let n = b.ins().iconst(types::I64, n0);
                    if let Some(work) = split_work(plan, i, k, opts) {
                        let addr = b.ins().func_addr(ptr, f);
                        let work = b.ins().iconst(types::I64, work);
                        let call = b.ins().call(par_ref, &[addr, bufs, ctx, n, work]);
                        b.inst_results(call)[0]
                    } else {
                        let zero = b.ins().iconst(types::I64, 0);
                        let call = b.ins().call(f, &[bufs, ctx, zero, n]);
                        b.inst_results(call)[0]
                    }
                }
                Step::Gemm(g)
                    if g.epilogue.is_some()
                        && let Some(gemm_then_ref) = gemm_then_ref =>
                {
                    let t = b.ins().iconst(ptr, table as i64);
                    let s = b.ins().iconst(types::I64, i as i64);
                    let f = module.declare_func_in_func(kernel_ids[&i], b.func);
                    let addr = b.ins().func_addr(ptr, f);
                    let call = b.ins().call(gemm_then_ref, &[t, s, bufs, ctx, addr]);
                    b.inst_results(call)[0]
                }
                Step::Gemm(_) | Step::Pack(_) | Step::Runtime { .. } => {
                    let t = b.ins().iconst(ptr, table as i64);
                    let s = b.ins().iconst(types::I64, i as i64);
                    let f = if matches!(step, Step::Gemm(_) | Step::Pack(_)) {
                        gemm_ref
                    } else {
                        step_ref
                    };
                    let call = b.ins().call(f, &[t, s, bufs, ctx]);
                    b.inst_results(call)[0]
                }
            };
            let fail = b.create_block();
            let next = b.create_block();
            b.ins().brif(status, fail, &[], next, &[]);
            b.switch_to_block(fail);
            if let Some(where_ref) = where_ref {
                let mut around: Vec<&Place> = places.iter().filter(|p| p.holds(i)).collect();
                around.sort_unstable_by_key(|p| std::cmp::Reverse(p.start));
                for p in around {
                    let (what, n) = match p.kind {
                        PlaceKind::Loop { label, body } => {
                            let what = match i > body {
                                true => crate::rt::WHERE_BODY,
                                false => crate::rt::WHERE_CONDITION,
                            };
                            (what, b.use_var(counters[&label]))
                        }
                        PlaceKind::Branch(k) => (
                            crate::rt::WHERE_BRANCH,
                            b.ins().iconst(types::I64, k as i64),
                        ),
                    };
                    let what = b.ins().iconst(types::I32, i64::from(what));
                    b.ins().call(where_ref, &[ctx, what, n]);
                }
            }
            b.ins().return_(&[status]);
            b.switch_to_block(next);
        }
        let mut held: Vec<(SlotId, Variable)> = regs.iter().map(|(&s, &v)| (s, v)).collect();
        held.sort_unstable_by_key(|&(s, _)| s);
        for (s, var) in held {
            if let SlotKind::Output = plan.slots[s].kind {
                let v = b.use_var(var);
                let p = slot_ptr(&mut b, s);
                b.ins().store(trusted(), v, p, 0);
            }
        }
        let zero = b.ins().iconst(types::I32, 0);
        b.ins().return_(&[zero]);
        b.seal_all_blocks();
        b.finalize(module.target_config());
        let main_id = module
            .declare_function("main", Linkage::Local, &sig)
            .map_err(cg_err)?;
        let mut ctx = module.make_context();
        ctx.func = func.clone();
        pipeline.submit(main_id, "main".into(), ctx);
        Some(main_id)
    };
    let mut natives = Vec::new();
    for (i, step) in plan.steps.iter().enumerate() {
        if let Some(k) = step_kernel(step)
            && has_function(i, k)
        {
            let native = match super::transpose::compile(plan, k, opts)? {
                Some(t) => Some(t),
                None => match super::columns::compile(plan, k, opts)? {
                    Some(c) => Some(c),
                    None => super::native::compile(plan, k, opts)?,
                },
            };
            if let Some(native) = native {
                clif.machine(
                    format!(
                        "; kernel '{}' (step {i}): {} machine code, {} bytes ({})",
                        k.name,
                        native.isa,
                        native.bytes.len(),
                        native.source,
                    ),
                    &native,
                );
                natives.push((kernel_ids[&i], native.bytes));
                continue;
            }
            let mut func =
                Function::with_name_signature(UserFuncName::user(0, i as u32), ksig.clone());
            {
                let mut b = FunctionBuilder::new(&mut func, &mut fctx);
                let mut kg = KernelGen::new(&mut b, &mut module, &mut helpers, plan, k, opts, ptr);
                kg.emit()?;
                b.finalize(module.target_config());
            }
            clif.function(format!("; kernel '{}' (step {i})", k.name), &func);
            let id = kernel_ids[&i];
            let mut ctx = module.make_context();
            ctx.func = func;
            if std::env::var_os("TENSORLIFT_DISASM").is_some() {
                // A second compilation, only for the disassembly dump.
                let mut probe = module.make_context();
                probe.func = ctx.func.clone();
                probe.set_disasm(true);
                match probe.compile(module.isa(), &mut Default::default()) {
                    Ok(code) => {
                        let v = code.vcode.clone().unwrap_or_default();
                        clif.text(format!("; machine code of kernel '{}'\n{v}\n", k.name));
                    }
                    Err(e) => clif.text(format!(
                        "; no machine code for kernel '{}': {:?}\n",
                        k.name, e.inner
                    )),
                }
            }
            pipeline.submit(id, format!("kernel '{}'", k.name), ctx);
        }
    }
    if main_id.is_some() {
        clif.function("; main".into(), &func);
    }
    // The functions the code imports, by the names the dump shows them as.
    let mut imports: Vec<(u32, &str)> = (helpers.ids.iter())
        .map(|(f, id)| (id.as_u32(), f.name()))
        .chain((helpers.row_code.iter()).map(|(id, name, _)| (id.as_u32(), name.as_str())))
        .collect();
    imports.sort_unstable();
    for (id, name) in imports {
        clif.text(format!("; u0:{id} = {name}\n"));
    }
    for code in pipeline.finish() {
        let (id, align, bytes, relocs) = code?;
        module
            .define_function_bytes(id, align, &bytes, &relocs)
            .map_err(cg_err)?;
    }
    for (id, bytes) in natives {
        module
            .define_function_bytes(id, 64, &bytes, &[])
            .map_err(cg_err)?;
    }
    for (id, name, native) in helpers.row_code {
        clif.machine(
            format!(
                "; fused row '{name}' (u0:{}): {} machine code, {} bytes ({})",
                id.as_u32(),
                native.isa,
                native.bytes.len(),
                native.source,
            ),
            &native,
        );
        module
            .define_function_bytes(id, 64, &native.bytes, &[])
            .map_err(cg_err)?;
    }
    module.finalize_definitions().map_err(cg_err)?;
    let main = match main_id {
        Some(id) => {
            let p = module.get_finalized_function(id);
            // SAFETY: `main` was generated with exactly this signature.
            Main::Code(unsafe { std::mem::transmute::<*const u8, Entry>(p) })
        }
        None => {
            let kernel = |i: usize| {
                let p = module.get_finalized_function(kernel_ids[&i]);
                // SAFETY: kernels are compiled with the kernel signature
                // (`ksig`), the C ABI of `KernelFn`.
                unsafe { std::mem::transmute::<*const u8, crate::rt::KernelFn>(p) }
            };
            let calls = direct_calls(plan, opts, kernel)?;
            clif.text(super::direct::listing(plan, &calls));
            Main::Calls(calls.into_iter().map(|(_, c)| c).collect())
        }
    };
    Ok(Generated { module, main, clif })
}

/// The work `main` passes `tl_parallel` for kernel step `i`, or `None`
/// where the kernel runs on the calling thread: the runtime helper splits
/// from `PARALLEL_WORK` on, and a kernel split for its loop-invariant
/// reads passes that.
fn split_work(plan: &Plan, i: usize, k: &Kernel, opts: &JitOptions) -> Option<i64> {
    match crate::parallel::kernel_split(plan, i, k, opts) {
        crate::parallel::Split::Ranges(_) => Some(kernel_work(k, opts) as i64),
        crate::parallel::Split::Resident { .. } => {
            Some((kernel_work(k, opts) as i64).max(crate::rt::PARALLEL_WORK))
        }
        crate::parallel::Split::One(_) => None,
    }
}

/// Whether row group `g` splits its rows over the pool.
fn group_splits(plan: &Plan, g: &crate::fusion::RowGroup, opts: &JitOptions) -> bool {
    crate::parallel::group_split(plan, g, opts)
        .parts()
        .is_some()
}

/// The calls of a direct `main` (`direct.rs`), each with its step: the
/// steps in order as the compiled `main` runs them, `kernel(i)` the
/// function of step `i`.
fn direct_calls(
    plan: &Plan,
    opts: &JitOptions,
    kernel: impl Fn(usize) -> crate::rt::KernelFn,
) -> Result<Vec<(usize, super::direct::Call)>> {
    use super::direct::Call;
    let mut calls = Vec::new();
    for (i, step) in plan.steps.iter().enumerate() {
        if plan.groups.iter().any(|g| g.start < i && i < g.end) {
            continue;
        }
        let call = match step {
            Step::Kernel(_) if let Some(g) = plan.groups.iter().find(|g| g.start == i) => {
                let fns = (g.start..g.end).map(&kernel).collect();
                Call::Group {
                    fns,
                    rows: g.rows as i64,
                    block: g.block as i64,
                    parallel: group_splits(plan, g, opts),
                }
            }
            Step::Kernel(k) => Call::Kernel {
                f: kernel(i),
                n: k.dims.first().copied().unwrap_or(1) as i64,
                work: split_work(plan, i, k, opts),
            },
            Step::Gemm(g) => Call::Gemm {
                step: i as u64,
                then: g.epilogue.is_some().then(|| kernel(i)),
            },
            Step::Pack(_) => Call::Gemm {
                step: i as u64,
                then: None,
            },
            Step::Runtime { .. } => Call::Runtime { step: i as u64 },
            Step::Copy { from, to } => {
                for (&f, &t) in from.iter().zip(to) {
                    let bytes = plan.slots[t].bytes();
                    if f != t && bytes != 0 {
                        calls.push((
                            i,
                            Call::Copy {
                                from: f,
                                to: t,
                                bytes,
                            },
                        ));
                    }
                }
                continue;
            }
            Step::Label(_) | Step::Jump(_) | Step::BranchUnless { .. } | Step::Switch { .. } => {
                return Err(Error::internal(
                    "a plan with control flow was given a direct main",
                ));
            }
        };
        calls.push((i, call));
    }
    Ok(calls)
}

/// A compiled function: its id, alignment, code and relocations.
type MachineCode = (FuncId, u64, Vec<u8>, Vec<ModuleReloc>);

/// A compiled job: its order and its code.
type Compiled = (usize, Result<MachineCode>);

/// A function to compile: its id, what it is (for errors), its IR, and
/// its place in the module's order.
struct Job {
    order: usize,
    id: FuncId,
    what: String,
    ctx: cranelift_codegen::Context,
}

/// Compiles functions to machine code as they are built. Cranelift
/// compiles one function per context with no shared state, so with
/// threads each submitted function is offered to the thread pool
/// (`tensorlift_runtime::pool`) at once (wasmtime compiles a module's
/// functions the same way) while this thread builds the next;
/// [`Pipeline::finish`] compiles on this thread whatever the pool has not
/// started (so a busy pool, one thread allowed, or a call from inside the
/// pool, cannot leave it waiting) and returns the code in
/// submission order, which the caller defines in the module. The code is
/// the same either way.
struct Pipeline {
    isa: OwnedTargetIsa,
    threads: bool,
    /// Jobs not started yet, by this thread or the pool.
    queue: Arc<Mutex<VecDeque<Job>>>,
    /// Compiled jobs, by order, and how many there are.
    done: Arc<(Mutex<Vec<Compiled>>, Condvar)>,
    submitted: usize,
}

impl Pipeline {
    fn new(isa: OwnedTargetIsa, threads: bool) -> Self {
        Self {
            isa,
            threads: threads && tensorlift_runtime::pool::threads() > 1,
            queue: Arc::default(),
            done: Arc::default(),
            submitted: 0,
        }
    }

    fn submit(&mut self, id: FuncId, what: String, ctx: cranelift_codegen::Context) {
        let order = self.submitted;
        self.submitted += 1;
        lock(&self.queue).push_back(Job {
            order,
            id,
            what,
            ctx,
        });
        if self.threads {
            let (isa, queue, done) = (self.isa.clone(), self.queue.clone(), self.done.clone());
            // Without a pool the job stays queued for `finish`.
            let _ = tensorlift_runtime::pool::spawn(move || {
                let job = lock(&queue).pop_front();
                if let Some(job) = job {
                    let order = job.order;
                    let code = compile_job(&*isa, job);
                    lock(&done.0).push((order, code));
                    done.1.notify_all();
                }
            });
        }
    }

    /// Every submitted function's code, in submission order.
    fn finish(self) -> Vec<Result<MachineCode>> {
        loop {
            let job = lock(&self.queue).pop_front();
            let Some(job) = job else { break };
            let order = job.order;
            let code = compile_job(&*self.isa, job);
            lock(&self.done.0).push((order, code));
        }
        let mut done = lock(&self.done.0);
        while done.len() < self.submitted {
            done = self
                .done
                .1
                .wait(done)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        let mut codes = std::mem::take(&mut *done);
        codes.sort_unstable_by_key(|(order, _)| *order);
        codes.into_iter().map(|(_, code)| code).collect()
    }
}

/// `m` locked; a poisoned lock is still usable (its data is a queue or a
/// list of results, complete after each push).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One function compiled: a panic in Cranelift becomes an internal error
/// naming the function (the pool would otherwise abort the process).
fn compile_job(isa: &dyn TargetIsa, mut job: Job) -> Result<MachineCode> {
    let what = job.what.clone();
    let compiled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let align_min = (isa.function_alignment().minimum as u64).max(isa.symbol_alignment());
        let ctx = &mut job.ctx;
        ctx.compile(isa, &mut ControlPlane::default())
            .map_err(|e| cg_err(format!("{}: {:?}", job.what, e.inner)))?;
        let code = (ctx.compiled_code())
            .ok_or_else(|| Error::internal(format!("{}: no compiled code", job.what)))?;
        let align = u64::from(code.buffer.alignment).max(align_min);
        let bytes = code.code_buffer().to_vec();
        let relocs: Vec<ModuleReloc> = (code.buffer.relocs().iter())
            .map(|r| ModuleReloc::from_mach_reloc(r, &ctx.func, job.id))
            .collect();
        Ok((job.id, align, bytes, relocs))
    }));
    compiled.unwrap_or_else(|_| Err(cg_err(format!("{what}: Cranelift panicked"))))
}

/// The runtime functions a module imports, and the fused rows it defines
/// as machine code (`native::compile_row`).
/// `poll(ctx)`: calls `tl_poll` and leaves its status in the context
/// (`CallCtx::poll_status`), preserving every register (Cranelift's
/// `PreserveAll`, which returns nothing): a loop polling every
/// `POLL_EVERY` iterations keeps its values in registers, where a call of
/// `tl_poll` itself made them live across a call that clobbers them, and
/// a scalar loop spilled its value every iteration (2.5× slower).
fn poll_trampoline(
    module: &mut JITModule,
    helpers: &mut Helpers,
    pipeline: &mut Pipeline,
    clif: &mut Clif,
    ptr: types::Type,
) -> Result<FuncId> {
    let mut sig = cranelift_codegen::ir::Signature::new(CallConv::PreserveAll);
    sig.params.push(AbiParam::new(ptr));
    let id = module
        .declare_function("poll", Linkage::Local, &sig)
        .map_err(cg_err)?;
    let mut func = Function::with_name_signature(UserFuncName::user(0, u32::MAX - 1), sig);
    let mut fctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut func, &mut fctx);
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    b.seal_block(entry);
    let ctx = b.block_params(entry)[0];
    let poll = helpers.get(module, RtFn::Poll)?;
    let poll = module.declare_func_in_func(poll, b.func);
    let call = b.ins().call(poll, &[ctx]);
    let status = b.inst_results(call)[0];
    b.ins()
        .store(trusted(), status, ctx, crate::rt::POLL_STATUS_OFFSET);
    b.ins().return_(&[]);
    b.finalize(module.target_config());
    clif.function("; poll (preserves every register)".into(), &func);
    let mut context = module.make_context();
    context.func = func;
    pipeline.submit(id, "poll".into(), context);
    Ok(id)
}

pub(super) struct Helpers {
    ids: HashMap<RtFn, FuncId>,
    /// Per fused f32 row (function, stored, prefetched): its function,
    /// or `None` where it is not machine code.
    rows: HashMap<(Option<tensorlift_ir::UnaryOp>, bool, bool), Option<FuncId>>,
    /// The rows' code, defined with the kernels'.
    row_code: Vec<(FuncId, String, super::native::Native)>,
}

impl Helpers {
    /// The fused f32 row `f((x - a)·b)` (`u` None: `x / b`) as a function
    /// of `m` with `tl_wide_row_f32`'s signature, emitted as machine code
    /// on first use; `None` where it does not qualify.
    pub(super) fn native_row(
        &mut self,
        m: &mut JITModule,
        key: (Option<tensorlift_ir::UnaryOp>, bool, bool),
        opts: &JitOptions,
    ) -> Result<Option<FuncId>> {
        if let Some(id) = self.rows.get(&key) {
            return Ok(*id);
        }
        let (u, store, prefetch) = key;
        let id = match super::native::compile_row(u, store, prefetch, opts)? {
            Some(native) => {
                let sig = RtFn::WideRowF32.signature(m.isa().default_call_conv());
                let name = format!("tl_native_row_{}", self.row_code.len());
                let id = m
                    .declare_function(&name, Linkage::Local, &sig)
                    .map_err(cg_err)?;
                self.row_code.push((id, name, native));
                Some(id)
            }
            None => None,
        };
        self.rows.insert(key, id);
        Ok(id)
    }

    /// `f`, declared as an import of `m` on first use.
    pub(super) fn get(&mut self, m: &mut JITModule, f: RtFn) -> Result<FuncId> {
        if let Some(id) = self.ids.get(&f) {
            return Ok(*id);
        }
        let sig = f.signature(m.isa().default_call_conv());
        let id = m
            .declare_function(f.name(), Linkage::Import, &sig)
            .map_err(cg_err)?;
        self.ids.insert(f, id);
        Ok(id)
    }
}

/// A loop or a branch arm of `main`, by the steps it spans (exclusive at
/// both ends: its label and its closing jump).
struct Place {
    start: usize,
    end: usize,
    kind: PlaceKind,
}

enum PlaceKind {
    /// A `while` starting at `label`; steps after step `body` (its
    /// condition's exit) are its body.
    Loop { label: usize, body: usize },
    /// Arm `k` of a `case`.
    Branch(usize),
}

impl Place {
    fn holds(&self, step: usize) -> bool {
        self.start < step && step < self.end
    }

    /// The start label of a loop (`None` for a branch arm).
    fn loop_label(&self) -> Option<usize> {
        match self.kind {
            PlaceKind::Loop { label, .. } => Some(label),
            PlaceKind::Branch(_) => None,
        }
    }
}

/// The loops and branch arms of a plan, as `fusion` lays them out: a loop
/// is `Label(start)`, its condition, `BranchUnless { label: end }`, its
/// body, `Jump(start)`, `Label(end)`; a `case` is `Switch { labels }`,
/// then each arm from its label to a `Jump(end)`, then `Label(end)` (an
/// arm of a one-armed `case` is not listed).
fn places(plan: &Plan) -> Vec<Place> {
    let steps = &plan.steps;
    let label_at = |l: usize| (steps.iter()).position(|s| matches!(s, Step::Label(x) if *x == l));
    let mut out = Vec::new();
    for (j, step) in steps.iter().enumerate() {
        match step {
            Step::Jump(l) => {
                let (Some(start), Some(Step::Label(end))) = (label_at(*l), steps.get(j + 1)) else {
                    continue;
                };
                if start >= j {
                    continue;
                }
                let exit = (start..j).find(
                    |&k| matches!(&steps[k], Step::BranchUnless { label, .. } if label == end),
                );
                if let Some(body) = exit {
                    out.push(Place {
                        start,
                        end: j,
                        kind: PlaceKind::Loop { label: *l, body },
                    });
                }
            }
            Step::Switch { labels, .. } => {
                let at: Option<Vec<usize>> = labels.iter().map(|l| label_at(*l)).collect();
                let Some(at) = at.filter(|a| a.len() >= 2) else {
                    continue;
                };
                // The arm before the second ends with `Jump(end)`.
                let Some(Step::Jump(end)) = steps.get(at[1] - 1) else {
                    continue;
                };
                let Some(close) = label_at(*end) else {
                    continue;
                };
                for (k, &a) in at.iter().enumerate() {
                    let next = at.get(k + 1).map_or(close, |&n| n);
                    out.push(Place {
                        start: a,
                        end: next - 1,
                        kind: PlaceKind::Branch(k),
                    });
                }
            }
            Step::Kernel(_)
            | Step::Gemm(_)
            | Step::Pack(_)
            | Step::Runtime { .. }
            | Step::Copy { .. }
            | Step::Label(_)
            | Step::BranchUnless { .. } => {}
        }
    }
    out
}
