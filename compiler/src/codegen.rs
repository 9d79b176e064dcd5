//! Cranelift code generation: one function per fused kernel plus a `main`
//! that runs the steps in order, calling kernels directly and runtime
//! symbols (GEMM, runtime kernels) through imports.
//!
//! Kernel ABI: `extern "C" fn(bufs: *const *mut u8, ctx: *mut CallCtx) -> i32`
//! where `bufs[s]` is the address of slot `s`; the result is a status
//! (0 = ok). `main` has the same signature.

use std::collections::HashMap;

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{
    AbiParam, Endianness, Function, InstBuilder, MemFlagsData, Signature, StackSlotData,
    StackSlotKind, Type, UserFuncName, Value, types,
};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{FuncId, Linkage, Module};
use tensorlift_ir::{BinaryOp, CmpOp, DType, Error, ReduceOp, Result, Scalar, UnaryOp};

use crate::fusion::{ENode, Kernel, KernelKind, Plan, Step};
use crate::rt::{self, StepTable};

/// Cranelift's optimization level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum OptLevel {
    /// No optimization (fastest compile).
    None,
    /// Optimize for speed.
    #[default]
    Speed,
}

/// Options of the JIT.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct JitOptions {
    /// Cranelift optimization level.
    pub opt_level: OptLevel,
    /// Bit-exact with the interpreter: no approximated functions, no
    /// reordered floating-point reductions.
    pub exact: bool,
    /// Emit 128-bit SIMD loops where the kernel allows.
    pub vectorize: bool,
    /// Split large kernels across the machine's cores (results are the
    /// same as single-threaded: each element is computed by one thread with
    /// the same code).
    pub threads: bool,
}

impl Default for JitOptions {
    fn default() -> Self {
        JitOptions {
            opt_level: OptLevel::Speed,
            exact: false,
            vectorize: true,
            threads: true,
        }
    }
}

fn cg_err(e: impl std::fmt::Display) -> Error {
    Error::internal(format!("code generation failed: {e}"))
}

/// The finalized module, its entry point and the Cranelift IR text.
pub(crate) struct Generated {
    pub module: JITModule,
    pub entry: *const u8,
    pub clif: String,
}

fn make_module(opts: &JitOptions) -> Result<JITModule> {
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
    let isa = cranelift_native::builder()
        .map_err(|m| Error::unimplemented(format!("this host is not supported by Cranelift: {m}")))?
        .finish(settings::Flags::new(flags))
        .map_err(cg_err)?;
    let mut jb = JITBuilder::with_isa(isa, cranelift_module::default_libcall_names());
    for (name, ptr) in rt::symbols() {
        jb.symbol(name, ptr);
    }
    Ok(JITModule::new(jb))
}

/// True when the kernel's outermost loop can be split across threads:
/// different ranges write disjoint outputs (loops, and reductions whose
/// outermost dim is kept), and the kernel is compute-bound. Memory-bound
/// kernels (a few ops per element) already saturate memory bandwidth on
/// one core of the benchmark machine, and splitting them made them slower
/// (fresh output pages faulted in from two threads contend).
fn splittable(k: &Kernel) -> bool {
    crate::fusion::range_capable(k) && element_cost(k) >= MIN_PARALLEL_COST
}

/// Rough cost of computing one element, in vectorized simple ops (about
/// 0.02 ns each on the benchmark machine): simple ops 1, divisions and
/// square roots 4, transcendental functions and helper calls 60 (an
/// inline f32 exp or tanh is ~40 instructions per 4 lanes), `pow` 100
/// (evaluated in f64).
fn element_cost(k: &Kernel) -> usize {
    k.nodes
        .iter()
        .map(|n| match n {
            ENode::Unary(u, ..) => match u {
                UnaryOp::Neg
                | UnaryOp::Abs
                | UnaryOp::Sign
                | UnaryOp::Floor
                | UnaryOp::Ceil
                | UnaryOp::Round => 1,
                UnaryOp::Not | UnaryOp::IsFinite | UnaryOp::Square => 1,
                UnaryOp::Sqrt | UnaryOp::Rsqrt | UnaryOp::Reciprocal => 4,
                _ => 60,
            },
            ENode::Binary(BinaryOp::Div | BinaryOp::Rem, ..) => 4,
            ENode::Binary(BinaryOp::Pow, ..) => 100,
            _ => 1,
        })
        .sum()
}

/// Per-element cost from which a kernel is considered compute-bound.
const MIN_PARALLEL_COST: usize = 8;

/// A rough cost of one call: loop iterations times per-element cost.
fn kernel_work(k: &Kernel) -> usize {
    k.dims
        .iter()
        .product::<usize>()
        .saturating_mul(element_cost(k))
}

/// Whether the host has FMA3: the inline approximations then evaluate their
/// polynomials with fused multiply-adds (Cranelift lowers `fma` natively
/// only then; without it, to a libm call per lane). Graph ops themselves
/// are never contracted, so results of `a * b + c` stay bit-exact.
fn has_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the host has SSE4.1 (vector rounding and min/max).
fn has_sse41() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("sse4.1")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        true
    }
}

/// Compiles `plan` into a module. `table` must outlive the module's code.
pub(crate) fn generate(
    plan: &Plan,
    table: *const StepTable,
    opts: &JitOptions,
) -> Result<Generated> {
    let mut module = make_module(opts)?;
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
    let mut clif = String::new();
    let mut helpers = Helpers {
        ids: HashMap::new(),
    };
    let mut fctx = FunctionBuilderContext::new();
    let mut kernel_ids = HashMap::new();
    for (i, step) in plan.steps.iter().enumerate() {
        if let Step::Kernel(k) = step {
            let mut func =
                Function::with_name_signature(UserFuncName::user(0, i as u32), ksig.clone());
            {
                let mut b = FunctionBuilder::new(&mut func, &mut fctx);
                let mut kg = KernelGen::new(&mut b, &mut module, &mut helpers, plan, k, opts, ptr);
                kg.emit()?;
                b.finalize(module.target_config());
            }
            clif.push_str(&format!(
                "; kernel '{}' (step {i})\n{}\n",
                k.name,
                func.display()
            ));
            let id = module
                .declare_function(&format!("kernel{i}"), Linkage::Local, &ksig)
                .map_err(cg_err)?;
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
                        clif.push_str(&format!("; machine code of kernel '{}'\n{v}\n", k.name));
                    }
                    Err(e) => clif.push_str(&format!(
                        "; no machine code for kernel '{}': {:?}\n",
                        k.name, e.inner
                    )),
                }
            }
            module
                .define_function(id, &mut ctx)
                .map_err(|e| cg_err(format!("kernel '{}': {e:?}", k.name)))?;
            kernel_ids.insert(i, id);
        }
    }
    // main: run the steps in order, stopping at the first failing status.
    let mut func = Function::with_name_signature(UserFuncName::user(0, u32::MAX), sig.clone());
    {
        let mut b = FunctionBuilder::new(&mut func, &mut fctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        b.seal_block(entry);
        let (bufs, ctx) = (b.block_params(entry)[0], b.block_params(entry)[1]);
        let step_fn = helpers.get(
            &mut module,
            "tl_runtime_step",
            &[ptr, types::I64, ptr, ptr],
            &[types::I32],
        )?;
        let step_ref = module.declare_func_in_func(step_fn, b.func);
        let gemm_fn = helpers.get(
            &mut module,
            "tl_gemm",
            &[ptr, types::I64, ptr, ptr],
            &[types::I32],
        )?;
        let gemm_ref = module.declare_func_in_func(gemm_fn, b.func);
        let par_fn = helpers.get(
            &mut module,
            "tl_parallel",
            &[ptr, ptr, ptr, types::I64, types::I64],
            &[types::I32],
        )?;
        let par_ref = module.declare_func_in_func(par_fn, b.func);
        let group_fn = helpers.get(
            &mut module,
            "tl_row_group",
            &[
                ptr,
                types::I64,
                ptr,
                ptr,
                types::I64,
                types::I64,
                types::I64,
            ],
            &[types::I32],
        )?;
        let group_ref = module.declare_func_in_func(group_fn, b.func);
        for (i, step) in plan.steps.iter().enumerate() {
            if plan.groups.iter().any(|g| g.start < i && i < g.end) {
                continue;
            }
            let group = plan.groups.iter().find(|g| g.start == i);
            let status = match step {
                Step::Kernel(_) if let Some(g) = group => {
                    // The group's kernels as an array of function addresses
                    // on the stack, run block by block by the runtime.
                    let n = g.end - g.start;
                    let slot = b.create_sized_stack_slot(StackSlotData::new(
                        StackSlotKind::ExplicitSlot,
                        (n * 8) as u32,
                        3,
                    ));
                    let mut work = 0usize;
                    let mut parallel = false;
                    for (j, step) in plan.steps[g.start..g.end].iter().enumerate() {
                        let Step::Kernel(k) = step else {
                            return Err(Error::internal("a row group holds a non-kernel step"));
                        };
                        let f = module.declare_func_in_func(kernel_ids[&(g.start + j)], b.func);
                        let addr = b.ins().func_addr(ptr, f);
                        b.ins().stack_store(ptr, addr, slot, (j * 8) as i32);
                        work = work.saturating_add(kernel_work(k));
                        parallel |= splittable(k);
                    }
                    let fns = b.ins().stack_addr(ptr, slot, 0);
                    let count = b.ins().iconst(types::I64, n as i64);
                    let rows = b.ins().iconst(types::I64, g.rows as i64);
                    let block = b.ins().iconst(types::I64, g.block as i64);
                    let par = parallel && opts.threads && work >= rt::PARALLEL_WORK as usize;
                    let par = b.ins().iconst(types::I64, i64::from(par));
                    let call = b
                        .ins()
                        .call(group_ref, &[fns, count, bufs, ctx, rows, block, par]);
                    b.inst_results(call)[0]
                }
                Step::Kernel(k) => {
                    let f = module.declare_func_in_func(kernel_ids[&i], b.func);
                    let n0 = k.dims.first().copied().unwrap_or(1) as i64;
                    let n = b.ins().iconst(types::I64, n0);
                    if splittable(k) && opts.threads {
                        let addr = b.ins().func_addr(ptr, f);
                        let work = b.ins().iconst(types::I64, kernel_work(k) as i64);
                        let call = b.ins().call(par_ref, &[addr, bufs, ctx, n, work]);
                        b.inst_results(call)[0]
                    } else {
                        let zero = b.ins().iconst(types::I64, 0);
                        let call = b.ins().call(f, &[bufs, ctx, zero, n]);
                        b.inst_results(call)[0]
                    }
                }
                Step::Gemm(_) | Step::Runtime { .. } => {
                    let t = b.ins().iconst(ptr, table as i64);
                    let s = b.ins().iconst(types::I64, i as i64);
                    let f = if matches!(step, Step::Gemm(_)) {
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
            b.seal_block(fail);
            b.ins().return_(&[status]);
            b.switch_to_block(next);
            b.seal_block(next);
        }
        let zero = b.ins().iconst(types::I32, 0);
        b.ins().return_(&[zero]);
        b.finalize(module.target_config());
    }
    clif.push_str(&format!("; main\n{}\n", func.display()));
    let main_id = module
        .declare_function("main", Linkage::Local, &sig)
        .map_err(cg_err)?;
    let mut ctx = module.make_context();
    ctx.func = func;
    module
        .define_function(main_id, &mut ctx)
        .map_err(|e| cg_err(format!("main: {e:?}")))?;
    module.finalize_definitions().map_err(cg_err)?;
    let entry = module.get_finalized_function(main_id);
    Ok(Generated {
        module,
        entry,
        clif,
    })
}

struct Helpers {
    ids: HashMap<&'static str, FuncId>,
}

impl Helpers {
    fn get(
        &mut self,
        m: &mut JITModule,
        name: &'static str,
        params: &[Type],
        rets: &[Type],
    ) -> Result<FuncId> {
        if let Some(id) = self.ids.get(name) {
            return Ok(*id);
        }
        let mut sig: Signature = m.make_signature();
        sig.params.extend(params.iter().map(|t| AbiParam::new(*t)));
        sig.returns.extend(rets.iter().map(|t| AbiParam::new(*t)));
        let id = m
            .declare_function(name, Linkage::Import, &sig)
            .map_err(cg_err)?;
        self.ids.insert(name, id);
        Ok(id)
    }
}

/// A computed element: a real/int/bool value (or vector), or a complex pair.
#[derive(Clone, Copy, Debug)]
enum V {
    S(Value),
    C(Value, Value),
}

impl V {
    fn s(self) -> Value {
        match self {
            V::S(v) | V::C(v, _) => v,
        }
    }
}

/// Type of a computed scalar of `d` (halves compute in f32; complex parts).
fn comp_ty(d: DType) -> Type {
    match d {
        DType::Bool | DType::I8 | DType::U8 => types::I8,
        DType::I16 | DType::U16 => types::I16,
        DType::I32 | DType::U32 => types::I32,
        DType::I64 | DType::U64 | DType::String => types::I64,
        DType::F16 | DType::BF16 | DType::F32 | DType::C64 => types::F32,
        DType::F64 | DType::C128 => types::F64,
    }
}

/// The 128-bit vector type for a dtype's lanes (bool and halves have
/// none: bool's logic stays scalar, halves compute in f32).
fn vec_ty(d: DType) -> Option<Type> {
    match d {
        DType::F32 => Some(types::F32X4),
        DType::F64 => Some(types::F64X2),
        DType::I8 | DType::U8 => Some(types::I8X16),
        DType::I16 | DType::U16 => Some(types::I16X8),
        DType::I32 | DType::U32 => Some(types::I32X4),
        DType::I64 | DType::U64 => Some(types::I64X2),
        _ => None,
    }
}

fn trusted() -> MemFlagsData {
    MemFlagsData::trusted()
}

fn unaligned() -> MemFlagsData {
    MemFlagsData::new().with_notrap()
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Scalar,
    Vector(Type),
}

struct KernelGen<'a, 'b> {
    b: &'a mut FunctionBuilder<'b>,
    m: &'a mut JITModule,
    helpers: &'a mut Helpers,
    plan: &'a Plan,
    k: &'a Kernel,
    opts: &'a JitOptions,
    ptr: Type,
    bases: HashMap<usize, Value>,
    /// Current byte pointer (loads, store) or element position (iota) per
    /// accessor node; `usize::MAX` keys the output.
    pos: HashMap<usize, Variable>,
    frefs: HashMap<&'static str, cranelift_codegen::ir::FuncRef>,
    hoisted: HashMap<usize, Value>,
    /// Element offset applied to vector loads (unrolled copies).
    load_off: i64,
    /// `[begin, end)` of the outermost dim, for split kernels.
    range: Option<(Value, Value)>,
}

const OUT: usize = usize::MAX;
/// The accessor key of the kernel's stash (`Kernel::stash`).
const STASH: usize = usize::MAX - 1;

impl<'a, 'b> KernelGen<'a, 'b> {
    fn new(
        b: &'a mut FunctionBuilder<'b>,
        m: &'a mut JITModule,
        helpers: &'a mut Helpers,
        plan: &'a Plan,
        k: &'a Kernel,
        opts: &'a JitOptions,
        ptr: Type,
    ) -> Self {
        KernelGen {
            b,
            m,
            helpers,
            plan,
            k,
            opts,
            ptr,
            bases: HashMap::new(),
            pos: HashMap::new(),
            frefs: HashMap::new(),
            hoisted: HashMap::new(),
            load_off: 0,
            range: None,
        }
    }

    fn call(
        &mut self,
        name: &'static str,
        params: &[Type],
        rets: &[Type],
        args: &[Value],
    ) -> Result<Vec<Value>> {
        let fref = match self.frefs.get(name) {
            Some(f) => *f,
            None => {
                let id = self.helpers.get(self.m, name, params, rets)?;
                let f = self.m.declare_func_in_func(id, self.b.func);
                self.frefs.insert(name, f);
                f
            }
        };
        let inst = self.b.ins().call(fref, args);
        Ok(self.b.inst_results(inst).to_vec())
    }

    fn out_dtype(&self) -> DType {
        self.plan.slots[self.k.out].dtype
    }

    /// Accessors: (key, offset, strides, element size) for every load/iota and the output.
    fn accessors(&self) -> Vec<(usize, i64, Vec<i64>, i64)> {
        let mut v: Vec<(usize, i64, Vec<i64>, i64)> = self
            .k
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| match n {
                ENode::Load {
                    dtype,
                    offset,
                    strides,
                    ..
                } => Some((i, *offset, strides.clone(), dtype.size() as i64)),
                ENode::Iota {
                    offset, strides, ..
                } => Some((i, *offset, strides.clone(), 0)),
                _ => None,
            })
            .collect();
        v.push((
            OUT,
            0,
            self.k.out_strides.clone(),
            self.out_dtype().size() as i64,
        ));
        if let Some(st) = &self.k.stash {
            let esize = self.plan.slots[st.slot].dtype.size() as i64;
            v.push((STASH, 0, st.strides.clone(), esize));
        }
        v
    }

    /// Stores the stashed node's value (if the kernel has a stash) at the
    /// stash position plus `off` bytes.
    fn store_stash(&mut self, vals: &[V], off: i32) {
        if let Some(st) = &self.k.stash {
            let v = vals[st.node].s();
            let p = self.b.use_var(self.pos[&STASH]);
            self.b.ins().store(unaligned(), v, p, off);
        }
    }

    fn emit(&mut self) -> Result<()> {
        let entry = self.b.create_block();
        self.b.append_block_params_for_function_params(entry);
        self.b.switch_to_block(entry);
        self.b.seal_block(entry);
        let bufs = self.b.block_params(entry)[0];
        let (begin, end) = (self.b.block_params(entry)[2], self.b.block_params(entry)[3]);
        if crate::fusion::range_capable(self.k) {
            self.range = Some((begin, end));
        }
        let mut slots: Vec<usize> = self
            .k
            .nodes
            .iter()
            .filter_map(|n| match n {
                ENode::Load { slot, .. } => Some(*slot),
                _ => None,
            })
            .collect();
        slots.push(self.k.out);
        slots.extend(self.k.stash.as_ref().map(|st| st.slot));
        slots.sort_unstable();
        slots.dedup();
        for s in slots {
            let p = self.b.ins().load(self.ptr, trusted(), bufs, (s * 8) as i32);
            self.bases.insert(s, p);
        }
        let rank = self.k.dims.len();
        if let KernelKind::Reduce { op, .. } = &self.k.kind {
            self.emit_reduce_init(*op)?;
        }
        let mut idx = Vec::new();
        if rank == 0 {
            let one = self.b.ins().iconst(types::I64, 1);
            self.inner(&[], 1, None, one)?;
        } else {
            self.nest(0, &mut idx)?;
        }
        let zero = self.b.ins().iconst(types::I32, 0);
        self.b.ins().return_(&[zero]);
        Ok(())
    }

    /// `for i in 0..n { body(i) }` with `i` as a block parameter.
    fn for_loop(
        &mut self,
        n: Value,
        step: i64,
        body: &mut dyn FnMut(&mut Self, Value) -> Result<()>,
    ) -> Result<Value> {
        self.for_loop_from(None, n, step, body)
    }

    /// `for (i = from; i + step <= n; i += step) body(i)` (`from` defaults
    /// to 0); returns the index the loop stopped at.
    fn for_loop_from(
        &mut self,
        from: Option<Value>,
        n: Value,
        step: i64,
        body: &mut dyn FnMut(&mut Self, Value) -> Result<()>,
    ) -> Result<Value> {
        let header = self.b.create_block();
        let body_blk = self.b.create_block();
        let exit = self.b.create_block();
        self.b.append_block_param(header, types::I64);
        let zero = match from {
            Some(v) => v,
            None => self.b.ins().iconst(types::I64, 0),
        };
        self.b.ins().jump(header, &[zero.into()]);
        self.b.switch_to_block(header);
        let i = self.b.block_params(header)[0];
        let cond = if step == 1 {
            self.b.ins().icmp(IntCC::SignedLessThan, i, n)
        } else {
            // Vector loop: while i + step <= n.
            let end = self.b.ins().iadd_imm_s(i, step);
            self.b.ins().icmp(IntCC::SignedLessThanOrEqual, end, n)
        };
        self.b.ins().brif(cond, body_blk, &[], exit, &[]);
        self.b.switch_to_block(body_blk);
        self.b.seal_block(body_blk);
        body(self, i)?;
        let next = self.b.ins().iadd_imm_s(i, step);
        self.b.ins().jump(header, &[next.into()]);
        self.b.seal_block(header);
        self.b.switch_to_block(exit);
        self.b.seal_block(exit);
        Ok(i)
    }

    fn nest(&mut self, d: usize, idx: &mut Vec<Value>) -> Result<()> {
        let rank = self.k.dims.len();
        // The outermost dim runs over [begin, end) when the kernel is split.
        let range = if d == 0 { self.range } else { None };
        if d + 1 == rank {
            let n = self.k.dims[d];
            return match range {
                Some((b, e)) => {
                    let count = self.b.ins().isub(e, b);
                    self.inner(idx, n, Some(b), count)
                }
                None => {
                    let count = self.b.ins().iconst(types::I64, n as i64);
                    self.inner(idx, n, None, count)
                }
            };
        }
        let (from, n) = match range {
            Some((b, e)) => (Some(b), e),
            None => (None, self.b.ins().iconst(types::I64, self.k.dims[d] as i64)),
        };
        self.for_loop_from(from, n, 1, &mut |s, i| {
            idx.push(i);
            s.nest(d + 1, idx)?;
            idx.pop();
            Ok(())
        })?;
        Ok(())
    }

    /// Sets up accessor positions for the innermost loop given the outer
    /// indices, then runs it (vector part, then scalar tail).
    fn inner(
        &mut self,
        outer: &[Value],
        n: usize,
        start: Option<Value>,
        count: Value,
    ) -> Result<()> {
        let rank = self.k.dims.len();
        let accs = self.accessors();
        for (key, offset, strides, esize) in &accs {
            let mut pos = self.b.ins().iconst(types::I64, *offset);
            if let Some(st) = start
                && strides[rank - 1] != 0
            {
                let t = self.b.ins().imul_imm_s(st, strides[rank - 1]);
                pos = self.b.ins().iadd(pos, t);
            }
            for (d, i) in outer.iter().enumerate() {
                if strides[d] != 0 {
                    let t = self.b.ins().imul_imm_s(*i, strides[d]);
                    pos = self.b.ins().iadd(pos, t);
                }
            }
            let val = if *esize == 0 {
                pos
            } else {
                let slot = if *key == OUT {
                    self.k.out
                } else if *key == STASH {
                    self.k.stash.as_ref().map_or(self.k.out, |st| st.slot)
                } else {
                    self.load_slot(*key)
                };
                let bytes = self.b.ins().imul_imm_s(pos, *esize);
                let base = self.bases[&slot];
                self.b.ins().iadd(base, bytes)
            };
            let var = self.b.declare_var(types::I64);
            self.b.def_var(var, val);
            self.pos.insert(*key, var);
        }
        let inner_stride = |s: &Vec<i64>| if rank == 0 { 0 } else { s[rank - 1] };
        let reduce_inner = matches!(&self.k.kind, KernelKind::Reduce { reduced, .. } if rank > 0 && reduced[rank - 1]);
        // Register accumulator for a reduction over the innermost dim.
        let acc = if reduce_inner {
            let ty = comp_ty(self.out_dtype());
            let var = self.b.declare_var(ty);
            let p = self.b.use_var(self.pos[&OUT]);
            let v = self.b.ins().load(ty, trusted(), p, 0);
            self.b.def_var(var, v);
            Some(var)
        } else {
            None
        };
        let nv = count;
        let mut start = None;
        if let Some(vt) = self.vector_type(n) {
            let lanes = vt.lane_count() as i64;
            // Hoist stride-0 loads and constants out of the vector loop.
            self.hoisted.clear();
            for (i, node) in self.k.nodes.iter().enumerate() {
                if let ENode::Load { strides, dtype, .. } = node
                    && inner_stride(strides) == 0
                {
                    let p = self.b.use_var(self.pos[&i]);
                    let v = self.b.ins().load(comp_ty(*dtype), trusted(), p, 0);
                    let v = self.b.ins().splat(vt, v);
                    self.hoisted.insert(i, v);
                }
            }
            // Reductions over the innermost dim keep several independent
            // vector accumulators so the loop is not bound by the latency
            // of one dependency chain.
            // A body with a transcendental function is long enough to hide
            // the accumulator's latency by itself, and unrolled copies of
            // it would only spill its constants.
            let costly = self
                .k
                .nodes
                .iter()
                .map(crate::fusion::node_cost)
                .sum::<usize>()
                >= crate::fusion::STASH_COST;
            let unroll: i64 = if acc.is_some() && !costly { 4 } else { 1 };
            let mut vaccs = Vec::new();
            if let (Some(_), KernelKind::Reduce { op, .. }) = (acc, &self.k.kind) {
                let init = self.reduce_init(*op)?;
                let v = self.b.ins().splat(vt, init);
                for _ in 0..unroll {
                    let var = self.b.declare_var(vt);
                    self.b.def_var(var, v);
                    vaccs.push(var);
                }
            }
            let accs2 = accs.clone();
            let mut from = None;
            for (step, copies) in [(lanes * unroll, unroll), (lanes, 1)] {
                if copies == 1 && step == lanes * unroll && unroll > 1 {
                    continue;
                }
                if unroll == 1 && from.is_some() {
                    break;
                }
                let vaccs2 = vaccs.clone();
                let last = self.for_loop_from(from, nv, step, &mut |s, _i| {
                    for u in 0..copies {
                        s.load_off = u * lanes;
                        let vals = s.eval(Mode::Vector(vt))?;
                        s.load_off = 0;
                        let root = vals[s.k.root].s();
                        let esize = s.out_dtype().size() as i32;
                        let off = (u * lanes) as i32 * esize;
                        let stash_esize =
                            s.k.stash
                                .as_ref()
                                .map_or(0, |st| s.plan.slots[st.slot].dtype.size() as i32);
                        s.store_stash(&vals, (u * lanes) as i32 * stash_esize);
                        match (&s.k.kind, vaccs2.get(u as usize)) {
                            (KernelKind::Loop, _) => {
                                let p = s.b.use_var(s.pos[&OUT]);
                                s.b.ins().store(unaligned(), root, p, off);
                            }
                            (KernelKind::Reduce { op, .. }, Some(va)) => {
                                let a = s.b.use_var(*va);
                                let r = s.reduce_op(*op, a, root);
                                s.b.def_var(*va, r);
                            }
                            (KernelKind::Reduce { op, .. }, None) => {
                                let p = s.b.use_var(s.pos[&OUT]);
                                let a = s.b.ins().load(vt, unaligned(), p, off);
                                let r = s.reduce_op(*op, a, root);
                                s.b.ins().store(unaligned(), r, p, off);
                            }
                        }
                    }
                    for (key, _, strides, esize) in &accs2 {
                        let st = inner_stride(strides);
                        if st != 0 && *esize != 0 {
                            let var = s.pos[key];
                            let p = s.b.use_var(var);
                            let p = s.b.ins().iadd_imm_s(p, st * esize * step);
                            s.b.def_var(var, p);
                        }
                    }
                    Ok(())
                })?;
                from = Some(last);
            }
            let last = from.ok_or_else(|| Error::internal("vector loop missing"))?;
            // Fold the vector partials into the scalar accumulator, lane by lane.
            if let (Some(sa), KernelKind::Reduce { op, .. }) = (acc, &self.k.kind) {
                let mut v = self.b.use_var(vaccs[0]);
                for va in &vaccs[1..] {
                    let w = self.b.use_var(*va);
                    v = self.reduce_op(*op, v, w);
                }
                let mut a = self.b.use_var(sa);
                for l in 0..lanes {
                    let e = self.b.ins().extractlane(v, l as u8);
                    a = self.reduce_op(*op, a, e);
                }
                self.b.def_var(sa, a);
            }
            start = Some(last);
        }
        // Scalar loop (the tail after a vector loop, or the whole row).
        let first = match start {
            Some(s) => s,
            None => self.b.ins().iconst(types::I64, 0),
        };
        let remaining = self.b.ins().isub(nv, first);
        let accs2 = accs.clone();
        self.for_loop(remaining, 1, &mut |s, _i| {
            let vals = s.eval(Mode::Scalar)?;
            s.store_stash(&vals, 0);
            let root_v = vals[s.k.root];
            match (&s.k.kind, acc) {
                (KernelKind::Loop, _) => s.store_out(root_v)?,
                (KernelKind::Reduce { op, .. }, Some(a)) => {
                    let cur = s.b.use_var(a);
                    let r = s.reduce_op(*op, cur, root_v.s());
                    s.b.def_var(a, r);
                }
                (KernelKind::Reduce { op, .. }, None) => {
                    let p = s.b.use_var(s.pos[&OUT]);
                    let ty = comp_ty(s.out_dtype());
                    let cur = s.b.ins().load(ty, trusted(), p, 0);
                    let r = s.reduce_op(*op, cur, root_v.s());
                    s.b.ins().store(trusted(), r, p, 0);
                }
            }
            for (key, _, strides, esize) in &accs2 {
                let st = inner_stride(strides);
                if st != 0 {
                    let var = s.pos[key];
                    let p = s.b.use_var(var);
                    let p =
                        s.b.ins()
                            .iadd_imm_s(p, if *esize == 0 { st } else { st * esize });
                    s.b.def_var(var, p);
                }
            }
            Ok(())
        })?;
        if let Some(a) = acc {
            let p = self.b.use_var(self.pos[&OUT]);
            let v = self.b.use_var(a);
            self.b.ins().store(trusted(), v, p, 0);
        }
        Ok(())
    }

    fn load_slot(&self, node: usize) -> usize {
        match &self.k.nodes[node] {
            ENode::Load { slot, .. } => *slot,
            _ => self.k.out,
        }
    }

    /// The SIMD type for this kernel's innermost loop, if it can be vectorized.
    fn vector_type(&self, n: usize) -> Option<Type> {
        if !self.opts.vectorize || !has_sse41() {
            return None;
        }
        let dt = self.out_dtype();
        let vt = vec_ty(dt)?;
        let rank = self.k.dims.len();
        if rank == 0 || n < vt.lane_count() as usize {
            return None;
        }
        let float = dt.is_float();
        let exact = self.opts.exact;
        // What SSE4.1 has for integer lanes: multiplication of 16- and
        // 32-bit lanes (pmullw/pmulld), min/max up to 32 bits.
        let int_mul = matches!(dt, DType::I16 | DType::U16 | DType::I32 | DType::U32);
        let min_max = float || dt.size() <= 4;
        if let KernelKind::Reduce { op, reduced } = &self.k.kind {
            let ok = match op {
                ReduceOp::Sum => !float || !exact || !reduced[rank - 1],
                ReduceOp::Prod => (float && (!exact || !reduced[rank - 1])) || int_mul,
                ReduceOp::Max | ReduceOp::Min => min_max,
                _ => false,
            };
            if !ok {
                return None;
            }
        }
        // A comparison of `dt` operands vectorizes into a lane mask when
        // it only feeds selects (as their predicate): bool lanes of another
        // width never reach memory. Integer lanes up to 32 bits (SSE4.1 has
        // no 64-bit lane compare).
        let mask_only = |i: usize| {
            i != self.k.root
                && self.k.nodes.iter().all(|u| match u {
                    ENode::Select(_, a, b, _) => *a != i && *b != i,
                    u => !crate::fusion::enode_operands(u).contains(&i),
                })
        };
        for (i, n) in self.k.nodes.iter().enumerate() {
            if let ENode::Compare(_, _, _, d) = n {
                if *d != dt || !(float || dt.size() <= 4) || !mask_only(i) {
                    return None;
                }
                continue;
            }
            if let ENode::Select(p, _, _, _) = n
                && !matches!(self.k.nodes[*p], ENode::Compare(..))
            {
                return None;
            }
            let ok = n.dtype() == dt
                && match n {
                    ENode::Load { strides, .. } => matches!(strides[rank - 1], 0 | 1),
                    ENode::Const(_) => true,
                    ENode::Unary(u, _, _) => match u {
                        UnaryOp::Neg => true,
                        UnaryOp::Square => float || int_mul,
                        // pabsb/w/d; unsigned abs is the identity.
                        UnaryOp::Abs => float || dt.size() <= 4 || !dt.is_signed_int(),
                        UnaryOp::Sqrt
                        | UnaryOp::Floor
                        | UnaryOp::Ceil
                        | UnaryOp::Round
                        | UnaryOp::Reciprocal
                        | UnaryOp::Rsqrt => float,
                        UnaryOp::Exp | UnaryOp::Logistic => float && !exact,
                        UnaryOp::Tanh | UnaryOp::Log | UnaryOp::Expm1 | UnaryOp::Log1p => {
                            float && !exact
                        }
                        UnaryOp::Sin | UnaryOp::Cos => float && !exact,
                        UnaryOp::Erf => float && !exact,
                        _ => false,
                    },
                    ENode::Binary(b, _, _, _) => match b {
                        BinaryOp::Add | BinaryOp::Sub => true,
                        BinaryOp::Mul => float || int_mul,
                        BinaryOp::Div => float,
                        BinaryOp::Pow => dt == DType::F32 && !exact,
                        BinaryOp::Max | BinaryOp::Min => min_max,
                        BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => !float,
                        _ => false,
                    },
                    ENode::Clamp(..) => float,
                    ENode::Select(..) => true,
                    _ => false,
                };
            if !ok {
                return None;
            }
        }
        Some(vt)
    }

    fn reduce_init(&mut self, op: ReduceOp) -> Result<Value> {
        let d = self.out_dtype();
        let ty = comp_ty(d);
        Ok(match (op, d) {
            (ReduceOp::Sum, d) if d.is_float() => self.fconst(ty, 0.0),
            (ReduceOp::Prod, d) if d.is_float() => self.fconst(ty, 1.0),
            (ReduceOp::Max, d) if d.is_float() => self.fconst(ty, f64::NEG_INFINITY),
            (ReduceOp::Min, d) if d.is_float() => self.fconst(ty, f64::INFINITY),
            (ReduceOp::Sum | ReduceOp::Or, _) => self.ic(ty, 0),
            (ReduceOp::Prod | ReduceOp::And, _) => self.ic(ty, 1),
            (ReduceOp::Max, d) => {
                let v = if d.is_signed_int() {
                    -(1i128 << (d.size() * 8 - 1))
                } else {
                    0
                };
                self.ic(ty, v as i64)
            }
            (ReduceOp::Min, d) => {
                let v: i128 = if d.is_signed_int() {
                    (1i128 << (d.size() * 8 - 1)) - 1
                } else {
                    (1i128 << (d.size() * 8)) - 1
                };
                self.ic(ty, v as i64)
            }
        })
    }

    /// An integer constant of `ty`, given as the two's-complement value
    /// (narrow types take the low bits, as Cranelift requires).
    fn ic(&mut self, ty: Type, v: i64) -> Value {
        let bits = ty.lane_type().bits();
        let v = if bits < 64 {
            v & ((1i64 << bits) - 1)
        } else {
            v
        };
        self.b.ins().iconst(ty.lane_type(), v)
    }

    fn fconst(&mut self, ty: Type, v: f64) -> Value {
        if ty == types::F32 {
            self.b.ins().f32const(v as f32)
        } else {
            self.b.ins().f64const(v)
        }
    }

    fn reduce_op(&mut self, op: ReduceOp, a: Value, x: Value) -> Value {
        let d = self.out_dtype();
        let ins = self.b.ins();
        match op {
            ReduceOp::Sum if d.is_float() => ins.fadd(a, x),
            ReduceOp::Prod if d.is_float() => ins.fmul(a, x),
            ReduceOp::Max if d.is_float() => ins.fmax(a, x),
            ReduceOp::Min if d.is_float() => ins.fmin(a, x),
            ReduceOp::Sum => ins.iadd(a, x),
            ReduceOp::Prod => ins.imul(a, x),
            ReduceOp::Max if d.is_signed_int() => ins.smax(a, x),
            ReduceOp::Max => ins.umax(a, x),
            ReduceOp::Min if d.is_signed_int() => ins.smin(a, x),
            ReduceOp::Min => ins.umin(a, x),
            ReduceOp::And => ins.band(a, x),
            ReduceOp::Or => ins.bor(a, x),
        }
    }

    /// Writes the reduction's identity into every output element.
    /// Writes the reduction's identity into every output element this call
    /// owns (the rows of `[begin, end)` when split).
    fn emit_reduce_init(&mut self, op: ReduceOp) -> Result<()> {
        let len = self.plan.slots[self.k.out].dims.iter().product::<usize>() as i64;
        let init = self.reduce_init(op)?;
        let base = self.bases[&self.k.out];
        let esize = self.out_dtype().size() as i64;
        let (from, n) = match self.range {
            Some((b, e)) => {
                let row = self.k.out_strides[0];
                (
                    Some(self.b.ins().imul_imm_s(b, row)),
                    self.b.ins().imul_imm_s(e, row),
                )
            }
            None => (None, self.b.ins().iconst(types::I64, len)),
        };
        self.for_loop_from(from, n, 1, &mut |s, i| {
            let off = s.b.ins().imul_imm_s(i, esize);
            let p = s.b.ins().iadd(base, off);
            s.b.ins().store(trusted(), init, p, 0);
            Ok(())
        })?;
        Ok(())
    }

    fn store_out(&mut self, v: V) -> Result<()> {
        let p = self.b.use_var(self.pos[&OUT]);
        let d = self.out_dtype();
        self.store(d, v, p)
    }

    fn store(&mut self, d: DType, v: V, p: Value) -> Result<()> {
        match (d, v) {
            (DType::C64 | DType::C128, V::C(re, im)) => {
                let half = (d.size() / 2) as i32;
                self.b.ins().store(trusted(), re, p, 0);
                self.b.ins().store(trusted(), im, p, half);
            }
            (DType::F16, V::S(x)) => {
                let bits = self.call("tl_f32_to_f16", &[types::F32], &[types::I32], &[x])?[0];
                let h = self.b.ins().ireduce(types::I16, bits);
                self.b.ins().store(trusted(), h, p, 0);
            }
            (DType::BF16, V::S(x)) => {
                // The value is exactly representable: its top 16 bits are the bf16.
                let bits = self.b.ins().bitcast(types::I32, MemFlagsData::new(), x);
                let hi = self.b.ins().ushr_imm_u(bits, 16);
                let h = self.b.ins().ireduce(types::I16, hi);
                self.b.ins().store(trusted(), h, p, 0);
            }
            (_, V::S(x)) => {
                self.b.ins().store(trusted(), x, p, 0);
            }
            (_, V::C(..)) => return Err(Error::internal("complex value stored into a real slot")),
        }
        Ok(())
    }

    fn load(&mut self, d: DType, p: Value) -> Result<V> {
        Ok(match d {
            DType::C64 | DType::C128 => {
                let t = comp_ty(d);
                let half = (d.size() / 2) as i32;
                V::C(
                    self.b.ins().load(t, trusted(), p, 0),
                    self.b.ins().load(t, trusted(), p, half),
                )
            }
            DType::F16 => {
                let h = self.b.ins().load(types::I16, trusted(), p, 0);
                let w = self.b.ins().uextend(types::I32, h);
                V::S(self.call("tl_f16_to_f32", &[types::I32], &[types::F32], &[w])?[0])
            }
            DType::BF16 => {
                let h = self.b.ins().load(types::I16, trusted(), p, 0);
                V::S(self.bf16_to_f32(h))
            }
            _ => V::S(self.b.ins().load(comp_ty(d), trusted(), p, 0)),
        })
    }

    fn bf16_to_f32(&mut self, h: Value) -> Value {
        let w = self.b.ins().uextend(types::I32, h);
        let w = self.b.ins().ishl_imm_s(w, 16);
        self.b.ins().bitcast(types::F32, MemFlagsData::new(), w)
    }

    /// Rounds an f32 to the half type `d` and back (halves compute in f32
    /// and round after every op, as the interpreter does).
    fn round_half(&mut self, d: DType, x: Value) -> Result<Value> {
        Ok(match d {
            DType::F16 => {
                let bits = self.call("tl_f32_to_f16", &[types::F32], &[types::I32], &[x])?[0];
                self.call("tl_f16_to_f32", &[types::I32], &[types::F32], &[bits])?[0]
            }
            DType::BF16 => {
                let bits = self.call("tl_f32_to_bf16", &[types::F32], &[types::I32], &[x])?[0];
                let h = self.b.ins().ireduce(types::I16, bits);
                self.bf16_to_f32(h)
            }
            _ => x,
        })
    }

    fn const_value(&mut self, l: &tensorlift_ir::Literal, mode: Mode) -> V {
        let d = l.dtype;
        let v = match l.element(0) {
            Scalar::Bool(b) => V::S(self.ic(types::I8, i64::from(b))),
            Scalar::Int(i) => V::S(self.ic(comp_ty(d), i as i64)),
            Scalar::Float(f, bits) => {
                let t = comp_ty(d);
                match (d, bits) {
                    (DType::F64, Some(b)) => V::S(self.b.ins().f64const(f64::from_bits(b))),
                    (DType::F32, Some(b)) => V::S(self.b.ins().f32const(f32::from_bits(b as u32))),
                    _ => V::S(self.fconst(t, f)),
                }
            }
            Scalar::Complex(re, im) => {
                let t = comp_ty(d);
                V::C(self.fconst(t, re), self.fconst(t, im))
            }
        };
        match (mode, v) {
            (Mode::Vector(vt), V::S(x)) => V::S(self.b.ins().splat(vt, x)),
            _ => v,
        }
    }

    /// Evaluates every node of the kernel at the current position.
    fn eval(&mut self, mode: Mode) -> Result<Vec<V>> {
        let nodes = self.k.nodes.clone();
        let mut vals: Vec<V> = Vec::with_capacity(nodes.len());
        for (i, n) in nodes.iter().enumerate() {
            let v = match n {
                ENode::Load { dtype, .. } => match mode {
                    Mode::Vector(vt) => match self.hoisted.get(&i) {
                        Some(v) => V::S(*v),
                        None => {
                            let p = self.b.use_var(self.pos[&i]);
                            let off = (self.load_off * dtype.size() as i64) as i32;
                            V::S(self.b.ins().load(vt, unaligned(), p, off))
                        }
                    },
                    Mode::Scalar => {
                        let p = self.b.use_var(self.pos[&i]);
                        self.load(*dtype, p)?
                    }
                },
                ENode::Const(l) => self.const_value(l, mode),
                ENode::Iota { dtype, .. } => {
                    let p = self.b.use_var(self.pos[&i]);
                    self.convert(V::S(p), DType::I64, *dtype)?
                }
                ENode::Unary(u, x, d) => {
                    let r = self.unary(*u, vals[*x], self.dtype_of(*x), mode)?;
                    self.round_if_half(*d, r)?
                }
                ENode::Binary(op, x, y, d) => {
                    let r = self.binary(*op, vals[*x], vals[*y], *d, mode)?;
                    self.round_if_half(*d, r)?
                }
                ENode::Compare(c, x, y, d) => self.compare(*c, vals[*x], vals[*y], *d),
                ENode::Select(p, x, y, _) => match (vals[*x], vals[*y]) {
                    (V::C(a, b), V::C(c, e)) => {
                        let pv = vals[*p].s();
                        V::C(self.b.ins().select(pv, a, c), self.b.ins().select(pv, b, e))
                    }
                    (a, c) => {
                        let pv = vals[*p].s();
                        V::S(match mode {
                            // A lane mask from a vector comparison.
                            Mode::Vector(vt) => self.sel(pv, a.s(), c.s(), vt),
                            Mode::Scalar => self.b.ins().select(pv, a.s(), c.s()),
                        })
                    }
                },
                ENode::Clamp(x, lo, hi, d) => {
                    let (x, lo, hi) = (vals[*x].s(), vals[*lo].s(), vals[*hi].s());
                    V::S(if d.is_float() {
                        let m = self.b.ins().fmax(x, lo);
                        self.b.ins().fmin(m, hi)
                    } else if d.is_signed_int() {
                        let m = self.b.ins().smax(x, lo);
                        self.b.ins().smin(m, hi)
                    } else {
                        let m = self.b.ins().umax(x, lo);
                        self.b.ins().umin(m, hi)
                    })
                }
                ENode::Convert(x, from, to) => self.convert(vals[*x], *from, *to)?,
            };
            vals.push(v);
        }
        Ok(vals)
    }

    fn dtype_of(&self, node: usize) -> DType {
        self.k.nodes[node].dtype()
    }

    fn round_if_half(&mut self, d: DType, v: V) -> Result<V> {
        Ok(match v {
            V::S(x) if d.is_half() => V::S(self.round_half(d, x)?),
            other => other,
        })
    }

    fn unary(&mut self, u: UnaryOp, x: V, xd: DType, mode: Mode) -> Result<V> {
        if let V::C(re, im) = x {
            return self.complex_unary(u, re, im, xd);
        }
        let x = x.s();
        let ty = self.b.func.dfg.value_type(x);
        let is_float = xd.is_float();
        Ok(V::S(match u {
            UnaryOp::Neg if is_float => self.b.ins().fneg(x),
            UnaryOp::Neg => self.b.ins().ineg(x),
            UnaryOp::Abs if is_float => self.b.ins().fabs(x),
            UnaryOp::Abs if xd.is_signed_int() => self.b.ins().iabs(x),
            UnaryOp::Abs => x,
            UnaryOp::Sign if is_float => {
                let one = self.splat_f(ty, 1.0);
                let s = self.b.ins().fcopysign(one, x);
                let zero = self.splat_f(ty, 0.0);
                let keep = self.b.ins().fcmp(FloatCC::UnorderedOrEqual, x, zero);
                self.b.ins().select(keep, x, s)
            }
            UnaryOp::Sign => {
                let zero = self.ic(ty, 0);
                let one = self.ic(ty, 1);
                if xd.is_signed_int() {
                    let neg = self.ic(ty, -1);
                    let gt = self.b.ins().icmp(IntCC::SignedGreaterThan, x, zero);
                    let lt = self.b.ins().icmp(IntCC::SignedLessThan, x, zero);
                    let t = self.b.ins().select(lt, neg, zero);
                    self.b.ins().select(gt, one, t)
                } else {
                    let nz = self.b.ins().icmp(IntCC::NotEqual, x, zero);
                    self.b.ins().select(nz, one, zero)
                }
            }
            UnaryOp::Floor => self.b.ins().floor(x),
            UnaryOp::Ceil => self.b.ins().ceil(x),
            UnaryOp::Round => self.b.ins().nearest(x),
            UnaryOp::Sqrt => self.b.ins().sqrt(x),
            UnaryOp::Rsqrt => {
                let s = self.b.ins().sqrt(x);
                let one = self.splat_f(ty, 1.0);
                self.b.ins().fdiv(one, s)
            }
            UnaryOp::Reciprocal => {
                let one = self.splat_f(ty, 1.0);
                self.b.ins().fdiv(one, x)
            }
            UnaryOp::Square if is_float => self.b.ins().fmul(x, x),
            UnaryOp::Square => self.b.ins().imul(x, x),
            UnaryOp::IsFinite => {
                let a = self.b.ins().fabs(x);
                let inf = self.splat_f(ty, f64::INFINITY);
                self.b.ins().fcmp(FloatCC::LessThan, a, inf)
            }
            UnaryOp::Not if xd == DType::Bool => self.b.ins().bxor_imm_u(x, 1),
            UnaryOp::Not => self.b.ins().bnot(x),
            UnaryOp::Exp if ty.lane_type() == types::F32 && !self.opts.exact => self.exp_f32(x, ty),
            UnaryOp::Exp if ty.lane_type() == types::F64 && !self.opts.exact => self.exp_f64(x, ty),
            UnaryOp::Tanh if ty.lane_type() == types::F32 && !self.opts.exact => {
                self.tanh_f32(x, ty)
            }
            UnaryOp::Log if ty.lane_type() == types::F32 && !self.opts.exact => self.log_f32(x, ty),
            UnaryOp::Expm1 if !self.opts.exact => self.expm1(x, ty),
            UnaryOp::Log1p if !self.opts.exact => self.log1p(x, ty),
            UnaryOp::Sin if !self.opts.exact => self.sincos(x, ty, false)?,
            UnaryOp::Cos if !self.opts.exact => self.sincos(x, ty, true)?,
            UnaryOp::Erf if ty.lane_type() == types::F32 && !self.opts.exact => self.erf_f32(x, ty),
            UnaryOp::Erf if ty.lane_type() == types::F64 && !self.opts.exact => self.erf_f64(x, ty),
            UnaryOp::Logistic if !self.opts.exact => self.logistic(x, ty),
            UnaryOp::Tanh if ty.lane_type() == types::F64 && !self.opts.exact => {
                self.tanh_f64(x, ty)
            }
            UnaryOp::Log if ty.lane_type() == types::F64 && !self.opts.exact => self.log_f64(x, ty),
            _ => {
                if matches!(mode, Mode::Vector(_)) {
                    return Err(Error::internal(format!(
                        "{} cannot be vectorized",
                        u.name()
                    )));
                }
                let code = self.b.ins().iconst(types::I32, u as i64);
                let (name, t) = if ty == types::F32 {
                    ("tl_f32_un", types::F32)
                } else {
                    ("tl_f64_un", types::F64)
                };
                self.call(name, &[types::I32, t], &[t], &[code, x])?[0]
            }
        }))
    }

    fn splat_f(&mut self, ty: Type, v: f64) -> Value {
        let lane = ty.lane_type();
        let c = self.fconst(lane, v);
        if ty.is_vector() {
            self.b.ins().splat(ty, c)
        } else {
            c
        }
    }

    fn splat_i(&mut self, ty: Type, v: i64) -> Value {
        let c = self.ic(ty, v);
        if ty.is_vector() {
            self.b.ins().splat(ty, c)
        } else {
            c
        }
    }

    /// `e^x` for f32 (scalar or F32X4): Cephes' polynomial after reduction
    /// by `ln 2`, scaled by two powers of two so that results down to the
    /// smallest denormal round once. Within 2 ulp of a correctly rounded
    /// result (tested); NaN, ±inf and overflow behave as `expf`.
    fn exp_f32(&mut self, x: Value, ty: Type) -> Value {
        let (y, tm, _) = self.exp_f32_reduced(x, ty);
        let one = self.splat_f(ty, 1.0);
        let y = self.b.ins().fadd(y, one);
        self.scale_by_pow2(y, tm, ty)
    }

    /// The shared part of f32 `exp` and `expm1`: `x` clamped to
    /// [-104, 88.73], `n = round(x / ln 2)` and `r = x - n·ln 2`; returns
    /// `(e^r - 1, n + 1.5·2^23, n)`, with `e^r - 1` from Cephes' polynomial.
    fn exp_f32_reduced(&mut self, x: Value, ty: Type) -> (Value, Value, Value) {
        // Clamp with compare + select (NaN stays NaN and falls through).
        let hi = self.splat_f(ty, 88.73);
        let lo = self.splat_f(ty, -104.0);
        let above = self.b.ins().fcmp(FloatCC::LessThan, hi, x);
        let x = self.sel(above, hi, x, ty);
        let below = self.b.ins().fcmp(FloatCC::LessThan, x, lo);
        let x = self.sel(below, lo, x, ty);
        // n = round-half-even(x·log2 e) by adding 1.5·2^23: the integer
        // lands in the low mantissa bits (|n| ≤ 151 ≪ 2^22).
        let log2e = self.splat_f(ty, std::f64::consts::LOG2_E);
        let t = self.b.ins().fmul(x, log2e);
        let magic = self.splat_f(ty, 12_582_912.0);
        let tm = self.b.ins().fadd(t, magic);
        let n = self.b.ins().fsub(tm, magic);
        // r = x - n·ln2 in two parts (Cody–Waite).
        let c1 = self.splat_f(ty, -0.693_359_375);
        let c2 = self.splat_f(ty, 2.121_944_4e-4);
        let r = self.mul_add(n, c1, x);
        let r = self.mul_add(n, c2, r);
        let p = self.horner(
            r,
            &[
                1.987_569_150_0e-4,
                1.398_199_950_7e-3,
                8.333_451_907_3e-3,
                4.166_579_589_4e-2,
                1.666_666_545_9e-1,
                5.000_000_120_1e-1,
            ],
            ty,
        );
        let rr = self.b.ins().fmul(r, r);
        (self.mul_add(p, rr, r), tm, n)
    }

    /// `e^x - 1` for f32 or f64 (scalar or vector): with `e^x = 2^n·e^r`,
    /// `2^n·(e^r - 1) + (2^n - 1)` while `|n|` is at most the mantissa
    /// width (both terms exact powers of two, so small results keep their
    /// relative accuracy), else `e^x - 1` from the scaled exp. Tiny |x|
    /// returns x (keeps -0).
    fn expm1(&mut self, x: Value, ty: Type) -> Value {
        let f64_lanes = ty.lane_type() == types::F64;
        let (y, tm, n) = if f64_lanes {
            self.exp_f64_reduced(x, ty)
        } else {
            self.exp_f32_reduced(x, ty)
        };
        let (magic_bits, bias, shift, width) = if f64_lanes {
            (0x4338_0000_0000_0000, 1023, 52, 53)
        } else {
            (0x4B40_0000, 127, 23, 24)
        };
        let one = self.splat_f(ty, 1.0);
        let y1 = self.b.ins().fadd(y, one);
        let e = self.scale_by_pow2(y1, tm, ty);
        let large = self.b.ins().fsub(e, one);
        let ity = Self::int_ty(ty);
        let flags = MemFlagsData::new();
        let tmi = self.b.ins().bitcast(ity, flags, tm);
        let magic = self.splat_i(ity, magic_bits);
        let ni = self.b.ins().isub(tmi, magic);
        let bias = self.splat_i(ity, bias);
        let eb = self.b.ins().iadd(ni, bias);
        let eb = self.b.ins().ishl_imm_s(eb, shift);
        let p2 = self.b.ins().bitcast(ty, flags, eb);
        let p2m1 = self.b.ins().fsub(p2, one);
        let small = self.mul_add(y, p2, p2m1);
        let an = self.b.ins().fabs(n);
        let lim = self.splat_f(ty, f64::from(width));
        let is_small = self.b.ins().fcmp(FloatCC::LessThanOrEqual, an, lim);
        let r = self.sel(is_small, small, large, ty);
        let ax = self.b.ins().fabs(x);
        let tiny = self.splat_f(ty, 2f64.powi(-2 - width));
        let is_tiny = self.b.ins().fcmp(FloatCC::LessThan, ax, tiny);
        self.sel(is_tiny, x, r, ty)
    }

    /// `ln(1 + x)` for f32 or f64 (scalar or vector): with `u = 1 + x` rounded,
    /// `ln(u)·x/(u - 1)` corrects the rounding of `u` (Goldberg), and
    /// `u == 1` returns x. x < -1 gives NaN, -1 gives -inf, +inf gives +inf.
    fn log1p(&mut self, x: Value, ty: Type) -> Value {
        let one = self.splat_f(ty, 1.0);
        let u = self.b.ins().fadd(x, one);
        let l = if ty.lane_type() == types::F64 {
            self.log_f64(u, ty)
        } else {
            self.log_f32(u, ty)
        };
        let um1 = self.b.ins().fsub(u, one);
        let q = self.b.ins().fdiv(x, um1);
        let r = self.b.ins().fmul(l, q);
        let inf = self.splat_f(ty, f64::INFINITY);
        let is_inf = self.b.ins().fcmp(FloatCC::Equal, x, inf);
        let r = self.sel(is_inf, inf, r, ty);
        let exact = self.b.ins().fcmp(FloatCC::Equal, u, one);
        self.sel(exact, x, r, ty)
    }

    /// `sin x` or `cos x` for f32 or f64 (scalar or vector), after
    /// Cephes' `sinf`/`cosf` and `sin`/`cos`: |x| reduced by π/2 in four
    /// parts (the first three short enough that every product with the
    /// quadrant count is exact), the quadrant picks ±sin or ±cos of the
    /// remainder, each a polynomial on [-π/4, π/4]. Vectors with a lane
    /// beyond the reduction's range (|x| > 8192 for f32, 10^5 for f64) take
    /// a cold path through libm. NaN and ±inf give NaN.
    fn sincos(&mut self, x: Value, ty: Type, cos: bool) -> Result<Value> {
        let f64_lanes = ty.lane_type() == types::F64;
        let ity = Self::int_ty(ty);
        let flags = MemFlagsData::new();
        let (magic, parts, limit, sign_shift, sign_bit): (f64, [f64; 4], f64, i64, i64) =
            if f64_lanes {
                (
                    6_755_399_441_055_744.0,
                    [
                        1.570_796_310_901_641_8,
                        1.589_325_471_229_585_7e-8,
                        6.123_233_932_053_594e-17,
                        6.368_317_163_510_95e-25,
                    ],
                    1e5,
                    62,
                    i64::MIN,
                )
            } else {
                (
                    12_582_912.0,
                    [
                        1.570_312_5,
                        4.837_512_969_970_703e-4,
                        7.549_533_620_476_723e-8,
                        2.563_344_1e-12,
                    ],
                    8192.0,
                    30,
                    i64::from(i32::MIN),
                )
            };
        let a = self.b.ins().fabs(x);
        let two_over_pi = self.splat_f(ty, std::f64::consts::FRAC_2_PI);
        let magic = self.splat_f(ty, magic);
        let tm = self.mul_add(a, two_over_pi, magic);
        let n = self.b.ins().fsub(tm, magic);
        let mut r = a;
        for part in parts {
            let c = self.splat_f(ty, -part);
            r = self.mul_add(n, c, r);
        }
        let z = self.b.ins().fmul(r, r);
        let (sin_coeffs, cos_coeffs): (&[f64], &[f64]) = if f64_lanes {
            (
                &[
                    1.589_623_015_765_465_7e-10,
                    -2.505_074_776_285_780_7e-8,
                    2.755_731_362_138_572_3e-6,
                    -1.984_126_982_958_954e-4,
                    8.333_333_333_322_118e-3,
                    -1.666_666_666_666_663e-1,
                ],
                &[
                    -1.135_853_652_138_768_2e-11,
                    2.087_570_084_197_473e-9,
                    -2.755_731_417_929_674e-7,
                    2.480_158_728_885_170_5e-5,
                    -1.388_888_888_887_305_6e-3,
                    4.166_666_666_666_659_3e-2,
                ],
            )
        } else {
            (
                &[-1.951_529_589_1e-4, 8.332_160_873_6e-3, -1.666_665_461_1e-1],
                &[
                    2.443_315_711_809_948e-5,
                    -1.388_731_625_493_765e-3,
                    4.166_664_568_298_827e-2,
                ],
            )
        };
        let sp = self.horner(z, sin_coeffs, ty);
        let rz = self.b.ins().fmul(r, z);
        let s = self.mul_add(rz, sp, r);
        let cp = self.horner(z, cos_coeffs, ty);
        let zz = self.b.ins().fmul(z, z);
        let half = self.splat_f(ty, -0.5);
        let one = self.splat_f(ty, 1.0);
        let c = self.mul_add(z, half, one);
        let c = self.mul_add(zz, cp, c);
        // Quadrant q = n mod 4 (the low bits of tm): odd quadrants swap sin
        // and cos; the sign flips for q = 2, 3 (sin) or q = 1, 2 (cos).
        let tmi = self.b.ins().bitcast(ity, flags, tm);
        let onei = self.splat_i(ity, 1);
        let q = if cos {
            self.b.ins().iadd(tmi, onei)
        } else {
            tmi
        };
        let odd = self.b.ins().band(tmi, onei);
        let zero_i = self.splat_i(ity, 0);
        let swap = self.b.ins().icmp(IntCC::NotEqual, odd, zero_i);
        let (first, second) = if cos { (s, c) } else { (c, s) };
        let v = self.sel(swap, first, second, ty);
        let twoi = self.splat_i(ity, 2);
        let neg = self.b.ins().band(q, twoi);
        let mut sign = self.b.ins().ishl_imm_s(neg, sign_shift);
        if !cos {
            let xb = self.b.ins().bitcast(ity, flags, x);
            let sign_mask = self.splat_i(ity, sign_bit);
            let xs = self.b.ins().band(xb, sign_mask);
            sign = self.b.ins().bxor(sign, xs);
        }
        let vb = self.b.ins().bitcast(ity, flags, v);
        let vb = self.b.ins().bxor(vb, sign);
        let inline = self.b.ins().bitcast(ty, flags, vb);
        // Huge finite lanes: the whole value through libm, off the hot path.
        let limit = self.splat_f(ty, limit);
        let huge = self.b.ins().fcmp(FloatCC::GreaterThan, a, limit);
        let any = if ty.is_vector() {
            self.b.ins().vany_true(huge)
        } else {
            huge
        };
        let cold = self.b.create_block();
        let done = self.b.create_block();
        self.b.append_block_param(done, ty);
        self.b.ins().brif(any, cold, &[], done, &[inline.into()]);
        self.b.switch_to_block(cold);
        self.b.seal_block(cold);
        self.b.set_cold_block(cold);
        let op = if cos { UnaryOp::Cos } else { UnaryOp::Sin };
        let code = self.b.ins().iconst(types::I32, op as i64);
        let (name, lane) = if f64_lanes {
            ("tl_f64_un", types::F64)
        } else {
            ("tl_f32_un", types::F32)
        };
        let slow = if ty.is_vector() {
            let mut v = x;
            for i in 0..ty.lane_count() as u8 {
                let e = self.b.ins().extractlane(x, i);
                let y = self.call(name, &[types::I32, lane], &[lane], &[code, e])?[0];
                v = self.b.ins().insertlane(v, y, i);
            }
            v
        } else {
            self.call(name, &[types::I32, lane], &[lane], &[code, x])?[0]
        };
        self.b.ins().jump(done, &[slow.into()]);
        self.b.switch_to_block(done);
        self.b.seal_block(done);
        Ok(self.b.block_params(done)[0])
    }

    /// `erf x` for f32 (scalar or F32X4): the rational approximation used
    /// by Eigen and XLA, `x·P(x²)/Q(x²)` on x clamped to [-4, 4] (erf is ±1
    /// in f32 beyond), evaluated in f64 lanes (in f32 its rounding reached
    /// 5 ulp near 1; the formula itself is within 1.4). NaN propagates; -0
    /// stays -0.
    fn erf_f32(&mut self, x: Value, ty: Type) -> Value {
        let hi = self.splat_f(ty, 4.0);
        let lo = self.splat_f(ty, -4.0);
        let above = self.b.ins().fcmp(FloatCC::LessThan, hi, x);
        let x = self.sel(above, hi, x, ty);
        let below = self.b.ins().fcmp(FloatCC::LessThan, x, lo);
        let x = self.sel(below, lo, x, ty);
        self.in_f64(&[x], ty, |cg, v, ty| {
            let x = v[0];
            let z = cg.b.ins().fmul(x, x);
            let p = cg.horner(
                z,
                &[
                    -2.726_142_258_013_06e-10,
                    2.770_681_424_959_02e-8,
                    -2.101_024_020_825_08e-6,
                    -5.692_506_394_623_46e-5,
                    -7.349_906_303_268_55e-4,
                    -2.954_599_808_540_25e-3,
                    -1.609_603_332_624_15e-2,
                ],
                ty,
            );
            let q = cg.horner(
                z,
                &[
                    -1.456_607_184_649_96e-5,
                    -2.133_740_552_789_05e-4,
                    -1.682_826_974_382_03e-3,
                    -7.373_329_167_204_68e-3,
                    -1.426_473_905_141_89e-2,
                ],
                ty,
            );
            let xp = cg.b.ins().fmul(x, p);
            cg.b.ins().fdiv(xp, q)
        })
    }

    /// `erf x` for f64 (scalar or F64X2), after Cephes' `ndtr.c`: for
    /// |x| ≤ 1 `x·T(x²)/U(x²)`, else `1 - e^(-x²)·P(|x|)/Q(|x|)` with the
    /// inline exp and the sign of x (|x| clamped to 6, past which erf is ±1
    /// in f64; the error of e^(-x²) from rounding x² is below erfc's weight
    /// there). NaN propagates, -0 stays -0.
    fn erf_f64(&mut self, x: Value, ty: Type) -> Value {
        let a = self.b.ins().fabs(x);
        let z = self.b.ins().fmul(x, x);
        let t = self.horner(
            z,
            &[
                9.604_973_739_870_516,
                9.002_601_972_038_427e1,
                2.232_005_345_946_843e3,
                7.003_325_141_128_051e3,
                5.559_230_130_103_949e4,
            ],
            ty,
        );
        let u = self.horner(
            z,
            &[
                1.0,
                3.356_171_416_475_031e1,
                5.213_579_497_801_527e2,
                4.594_323_829_709_801e3,
                2.262_900_006_138_909_4e4,
                4.926_739_426_086_359e4,
            ],
            ty,
        );
        let tu = self.b.ins().fdiv(t, u);
        let small = self.b.ins().fmul(x, tu);
        let six = self.splat_f(ty, 6.0);
        let above = self.b.ins().fcmp(FloatCC::LessThan, six, a);
        let ac = self.sel(above, six, a, ty);
        let p = self.horner(
            ac,
            &[
                2.461_969_814_735_305e-10,
                5.641_895_648_310_688e-1,
                7.463_210_564_422_699,
                4.863_719_709_856_814e1,
                1.965_208_329_560_771e2,
                5.264_451_949_954_773e2,
                9.345_285_271_719_576e2,
                1.027_551_886_895_157e3,
                5.575_353_353_693_993e2,
            ],
            ty,
        );
        let q = self.horner(
            ac,
            &[
                1.0,
                1.322_819_511_547_449_9e1,
                8.670_721_408_859_897e1,
                3.549_377_788_878_199e2,
                9.757_085_017_432_055e2,
                1.823_909_166_879_097_4e3,
                2.246_337_608_187_109_8e3,
                1.656_663_091_941_613_5e3,
                5.575_353_408_177_277e2,
            ],
            ty,
        );
        let aa = self.b.ins().fmul(ac, ac);
        let naa = self.b.ins().fneg(aa);
        let e = self.exp_f64(naa, ty);
        let pq = self.b.ins().fdiv(p, q);
        let erfc = self.b.ins().fmul(e, pq);
        let one = self.splat_f(ty, 1.0);
        let large = self.b.ins().fsub(one, erfc);
        let large = self.with_sign_of(large, x, ty);
        let is_small = self.b.ins().fcmp(FloatCC::LessThanOrEqual, a, one);
        self.sel(is_small, small, large, ty)
    }

    /// `f` applied to f32 values (scalars or F32X4) in f64 precision: each
    /// vector is widened into two F64X2 halves, `f` evaluated on each half,
    /// and the results narrowed and joined back. `f` gets the f64 type.
    fn in_f64(
        &mut self,
        xs: &[Value],
        ty: Type,
        mut f: impl FnMut(&mut Self, &[Value], Type) -> Value,
    ) -> Value {
        if !ty.is_vector() {
            let w: Vec<Value> = xs
                .iter()
                .map(|x| self.b.ins().fpromote(types::F64, *x))
                .collect();
            let y = f(self, &w, types::F64);
            return self.b.ins().fdemote(types::F32, y);
        }
        let flags = MemFlagsData::new().with_endianness(Endianness::Little);
        let high_first: [u8; 16] = std::array::from_fn(|i| 8 + (i % 8) as u8);
        let high_first = self.b.func.dfg.immediates.push(high_first.to_vec().into());
        let mut lo = Vec::with_capacity(xs.len());
        let mut hi = Vec::with_capacity(xs.len());
        for x in xs {
            lo.push(self.b.ins().fvpromote_low(*x));
            let bytes = self.b.ins().bitcast(types::I8X16, flags, *x);
            let swapped = self.b.ins().shuffle(bytes, bytes, high_first);
            let swapped = self.b.ins().bitcast(ty, flags, swapped);
            hi.push(self.b.ins().fvpromote_low(swapped));
        }
        let ylo = f(self, &lo, types::F64X2);
        let yhi = f(self, &hi, types::F64X2);
        let nlo = self.b.ins().fvdemote(ylo);
        let nhi = self.b.ins().fvdemote(yhi);
        let blo = self.b.ins().bitcast(types::I8X16, flags, nlo);
        let bhi = self.b.ins().bitcast(types::I8X16, flags, nhi);
        let join: [u8; 16] = std::array::from_fn(|i| if i < 8 { i as u8 } else { 8 + i as u8 });
        let join = self.b.func.dfg.immediates.push(join.to_vec().into());
        let y = self.b.ins().shuffle(blo, bhi, join);
        self.b.ins().bitcast(ty, flags, y)
    }

    /// The negation of a comparison result: lane masks are all ones or
    /// zeros, scalar results 1 or 0.
    fn not_mask(&mut self, m: Value, ty: Type) -> Value {
        if ty.is_vector() {
            self.b.ins().bnot(m)
        } else {
            self.b.ins().bxor_imm_u(m, 1)
        }
    }

    /// The integer type of `ty`'s shape (F32X4 → I32X4, F64 → I64, ...).
    fn int_ty(ty: Type) -> Type {
        match (ty.lane_type() == types::F64, ty.is_vector()) {
            (false, false) => types::I32,
            (false, true) => types::I32X4,
            (true, false) => types::I64,
            (true, true) => types::I64X2,
        }
    }

    /// `r` with the sign bit of `x` (`r` non-negative), by bit operations:
    /// x64 has no vector `fcopysign`.
    fn with_sign_of(&mut self, r: Value, x: Value, ty: Type) -> Value {
        let ity = Self::int_ty(ty);
        let flags = MemFlagsData::new();
        let sign_bit = if ty.lane_type() == types::F64 {
            i64::MIN
        } else {
            i64::from(i32::MIN)
        };
        let xb = self.b.ins().bitcast(ity, flags, x);
        let sign_mask = self.splat_i(ity, sign_bit);
        let sign = self.b.ins().band(xb, sign_mask);
        let rb = self.b.ins().bitcast(ity, flags, r);
        let rb = self.b.ins().bor(rb, sign);
        self.b.ins().bitcast(ty, flags, rb)
    }

    /// `1 / (1 + e^-x)` for f32 or f64: with `t = e^-|x|` (never
    /// overflows), `(x >= 0 ? 1 : t) / (1 + t)`.
    fn logistic(&mut self, x: Value, ty: Type) -> Value {
        let a = self.b.ins().fabs(x);
        let na = self.b.ins().fneg(a);
        let t = self.exp(na, ty);
        let one = self.splat_f(ty, 1.0);
        let zero = self.splat_f(ty, 0.0);
        let den = self.b.ins().fadd(one, t);
        let pos = self.b.ins().fcmp(FloatCC::GreaterThanOrEqual, x, zero);
        let num = self.sel(pos, one, t, ty);
        self.b.ins().fdiv(num, den)
    }

    /// The inline `e^x` for `ty`'s lane type.
    fn exp(&mut self, x: Value, ty: Type) -> Value {
        if ty.lane_type() == types::F64 {
            self.exp_f64(x, ty)
        } else {
            self.exp_f32(x, ty)
        }
    }

    /// `tanh x` for f64 (scalar or F64X2), after Cephes' `tanh`: for
    /// |x| < 0.625 `x + x·z·P(z)/Q(z)` with z = x², else
    /// `1 - 2/(e^(2|x|) + 1)` with the inline exp; the sign copied back.
    fn tanh_f64(&mut self, x: Value, ty: Type) -> Value {
        let a = self.b.ins().fabs(x);
        let z = self.b.ins().fmul(a, a);
        let p = self.horner(
            z,
            &[
                -9.643_991_794_250_522e-1,
                -9.928_772_310_019_186e1,
                -1.614_687_684_417_084_5e3,
            ],
            ty,
        );
        let q = self.horner(
            z,
            &[
                1.0,
                1.128_116_784_916_329_3e2,
                2.235_488_390_601_004_5e3,
                4.844_063_053_251_255e3,
            ],
            ty,
        );
        let pq = self.b.ins().fdiv(p, q);
        let az = self.b.ins().fmul(a, z);
        let small = self.mul_add(az, pq, a);
        let two_a = self.b.ins().fadd(a, a);
        let e = self.exp_f64(two_a, ty);
        let one = self.splat_f(ty, 1.0);
        let two = self.splat_f(ty, 2.0);
        let e1 = self.b.ins().fadd(e, one);
        let q = self.b.ins().fdiv(two, e1);
        let large = self.b.ins().fsub(one, q);
        let cut = self.splat_f(ty, 0.625);
        let is_small = self.b.ins().fcmp(FloatCC::LessThan, a, cut);
        let r = self.sel(is_small, small, large, ty);
        self.with_sign_of(r, x, ty)
    }

    /// `ln x` for f64 (scalar or F64X2), after fdlibm's `__ieee754_log`:
    /// x = m·2^k with m in [√½, √2), `s = f/(2 + f)` for f = m - 1 and a
    /// degree-14 polynomial in s. Denormals are scaled by 2^54 first.
    /// x < 0 and NaN give NaN, ±0 gives -inf, +inf gives +inf.
    fn log_f64(&mut self, x: Value, ty: Type) -> Value {
        let ity = Self::int_ty(ty);
        let flags = MemFlagsData::new();
        let tiny = self.splat_f(ty, f64::MIN_POSITIVE);
        let is_tiny = self.b.ins().fcmp(FloatCC::LessThan, x, tiny);
        let scale = self.splat_f(ty, 2f64.powi(54));
        let xs = self.b.ins().fmul(x, scale);
        let xn = self.sel(is_tiny, xs, x, ty);
        let bits = self.b.ins().bitcast(ity, flags, xn);
        // k as a float without a vector int→float conversion: the biased
        // exponent dropped into the mantissa of 2^52.
        let e = self.b.ins().ushr_imm_s(bits, 52);
        let emask = self.splat_i(ity, 0x7ff);
        let e = self.b.ins().band(e, emask);
        let two52 = self.splat_i(ity, 0x4330_0000_0000_0000);
        let eb = self.b.ins().bor(e, two52);
        let ef = self.b.ins().bitcast(ty, flags, eb);
        let off = self.splat_f(ty, 2f64.powi(52) + 1023.0);
        let k = self.b.ins().fsub(ef, off);
        let adj = self.splat_f(ty, 54.0);
        let zero = self.splat_f(ty, 0.0);
        let adj = self.sel(is_tiny, adj, zero, ty);
        let k = self.b.ins().fsub(k, adj);
        // m in [1, 2), halved (and k + 1) when above √2.
        let mmask = self.splat_i(ity, 0x000f_ffff_ffff_ffff);
        let mb = self.b.ins().band(bits, mmask);
        let one_bits = self.splat_i(ity, 0x3ff0_0000_0000_0000);
        let mb = self.b.ins().bor(mb, one_bits);
        let m = self.b.ins().bitcast(ty, flags, mb);
        let sqrt2 = self.splat_f(ty, std::f64::consts::SQRT_2);
        let big = self.b.ins().fcmp(FloatCC::GreaterThanOrEqual, m, sqrt2);
        let half = self.splat_f(ty, 0.5);
        let one = self.splat_f(ty, 1.0);
        let mh = self.b.ins().fmul(m, half);
        let m = self.sel(big, mh, m, ty);
        let kp1 = self.b.ins().fadd(k, one);
        let k = self.sel(big, kp1, k, ty);
        let f = self.b.ins().fsub(m, one);
        let two = self.splat_f(ty, 2.0);
        let d = self.b.ins().fadd(two, f);
        let s = self.b.ins().fdiv(f, d);
        let z = self.b.ins().fmul(s, s);
        let w = self.b.ins().fmul(z, z);
        let t1 = self.horner(
            w,
            &[
                1.531_383_769_920_937_3e-1,
                2.222_219_843_214_978_4e-1,
                3.999_999_999_940_942e-1,
            ],
            ty,
        );
        let t1 = self.b.ins().fmul(t1, w);
        let t2 = self.horner(
            w,
            &[
                1.479_819_860_511_658_6e-1,
                1.818_357_216_161_805e-1,
                2.857_142_874_366_239e-1,
                6.666_666_666_666_735e-1,
            ],
            ty,
        );
        let t2 = self.b.ins().fmul(t2, z);
        let r = self.b.ins().fadd(t2, t1);
        let ff = self.b.ins().fmul(f, f);
        let hfsq = self.b.ins().fmul(ff, half);
        let hr = self.b.ins().fadd(hfsq, r);
        let ln2_lo = self.splat_f(ty, 1.908_214_929_270_587_7e-10);
        let klo = self.b.ins().fmul(k, ln2_lo);
        let inner = self.mul_add(s, hr, klo);
        let inner = self.b.ins().fsub(hfsq, inner);
        let inner = self.b.ins().fsub(inner, f);
        let ln2_hi = self.splat_f(ty, 6.931_471_803_691_238e-1);
        let khi = self.b.ins().fmul(k, ln2_hi);
        let r = self.b.ins().fsub(khi, inner);
        self.log_specials(x, r, ty)
    }

    /// The special values of `ln`: x < 0 or NaN → NaN, ±0 → -inf,
    /// +inf → +inf; `r` elsewhere.
    fn log_specials(&mut self, x: Value, r: Value, ty: Type) -> Value {
        let zero = self.splat_f(ty, 0.0);
        let nan = self.splat_f(ty, f64::NAN);
        let ninf = self.splat_f(ty, f64::NEG_INFINITY);
        let inf = self.splat_f(ty, f64::INFINITY);
        let is_inf = self.b.ins().fcmp(FloatCC::Equal, x, inf);
        let r = self.sel(is_inf, inf, r, ty);
        let is_zero = self.b.ins().fcmp(FloatCC::Equal, x, zero);
        let r = self.sel(is_zero, ninf, r, ty);
        let bad = self.b.ins().fcmp(FloatCC::UnorderedOrLessThan, x, zero);
        self.sel(bad, nan, r, ty)
    }

    /// `x^y` for f32 (scalar or F32X4): `e^(y·ln|x|)` evaluated in f64
    /// (the f64 log and exp above, so the f32 result rounds once from a
    /// value good to ~2^-50), then IEEE `pow`'s special cases: `y = 0` or
    /// `x = 1` → 1 (even for NaN), `x = -1` with y = ±inf → 1, x < 0 with
    /// a non-integer y → NaN, and the sign of x kept for odd integer y.
    fn pow_f32(&mut self, x: Value, y: Value, ty: Type) -> Value {
        let mag = self.in_f64(&[x, y], ty, |cg, v, t| {
            let a = cg.b.ins().fabs(v[0]);
            let l = cg.log_f64(a, t);
            let yl = cg.b.ins().fmul(v[1], l);
            cg.exp_f64(yl, t)
        });
        let zero = self.splat_f(ty, 0.0);
        let one = self.splat_f(ty, 1.0);
        let half = self.splat_f(ty, 0.5);
        let nan = self.splat_f(ty, f64::NAN);
        // y integer / odd integer (|y| ≥ 2^24 is always an even integer).
        let yr = self.b.ins().nearest(y);
        let y_int = self.b.ins().fcmp(FloatCC::Equal, yr, y);
        let yh = self.b.ins().fmul(y, half);
        let yhr = self.b.ins().nearest(yh);
        let y_even = self.b.ins().fcmp(FloatCC::Equal, yhr, yh);
        let y_odd = self.b.ins().band_not(y_int, y_even);
        // Odd integer powers keep x's sign (also for -0 and -inf).
        let signed = self.with_sign_of(mag, x, ty);
        let r = self.sel(y_odd, signed, mag, ty);
        let x_neg = self.b.ins().fcmp(FloatCC::LessThan, x, zero);
        let y_frac = self.not_mask(y_int, ty);
        let y_finite = {
            let ay = self.b.ins().fabs(y);
            let inf = self.splat_f(ty, f64::INFINITY);
            self.b.ins().fcmp(FloatCC::LessThan, ay, inf)
        };
        let y_frac = self.b.ins().band(y_frac, y_finite);
        // A finite negative base with a non-integer exponent has no real
        // power (-inf has: +inf or +0).
        let ax = self.b.ins().fabs(x);
        let inf = self.splat_f(ty, f64::INFINITY);
        let x_finite = self.b.ins().fcmp(FloatCC::LessThan, ax, inf);
        let x_neg = self.b.ins().band(x_neg, x_finite);
        let invalid = self.b.ins().band(x_neg, y_frac);
        let r = self.sel(invalid, nan, r, ty);
        // |x| = 1 with y = ±inf, x = 1 with anything, y = 0 with anything: 1.
        let ax_one = self.b.ins().fcmp(FloatCC::Equal, ax, one);
        let y_inf = self.not_mask(y_finite, ty);
        let y_nan = self.b.ins().fcmp(FloatCC::Unordered, y, y);
        let y_inf = self.b.ins().band_not(y_inf, y_nan);
        let unit = self.b.ins().band(ax_one, y_inf);
        let x_one = self.b.ins().fcmp(FloatCC::Equal, x, one);
        let y_zero = self.b.ins().fcmp(FloatCC::Equal, y, zero);
        let unit = self.b.ins().bor(unit, x_one);
        let unit = self.b.ins().bor(unit, y_zero);
        self.sel(unit, one, r, ty)
    }

    /// `y · 2^n`, where `tm = n + magic` came from the round-to-integer
    /// trick (magic = 1.5·2^23 for f32, 1.5·2^52 for f64, so `n` sits in
    /// the low mantissa bits). Applied as 2^n1 · 2^n2 with n1 = n >> 1,
    /// n2 = n - n1, so that results down to the smallest denormal round
    /// once and no factor overflows before the product does.
    fn scale_by_pow2(&mut self, y: Value, tm: Value, ty: Type) -> Value {
        let f64_lanes = ty.lane_type() == types::F64;
        let ity = match (f64_lanes, ty.is_vector()) {
            (false, false) => types::I32,
            (false, true) => types::I32X4,
            (true, false) => types::I64,
            (true, true) => types::I64X2,
        };
        let (magic_bits, bias, shift) = if f64_lanes {
            (0x4338_0000_0000_0000, 1023, 52)
        } else {
            (0x4B40_0000, 127, 23)
        };
        let flags = MemFlagsData::new();
        let tmi = self.b.ins().bitcast(ity, flags, tm);
        let mi = self.splat_i(ity, magic_bits);
        let ni = self.b.ins().isub(tmi, mi);
        let n1 = self.b.ins().sshr_imm_s(ni, 1);
        let n2 = self.b.ins().isub(ni, n1);
        let bias = self.splat_i(ity, bias);
        let e1 = self.b.ins().iadd(n1, bias);
        let e1 = self.b.ins().ishl_imm_s(e1, shift);
        let e2 = self.b.ins().iadd(n2, bias);
        let e2 = self.b.ins().ishl_imm_s(e2, shift);
        let s1 = self.b.ins().bitcast(ty, flags, e1);
        let s2 = self.b.ins().bitcast(ty, flags, e2);
        let y = self.b.ins().fmul(y, s1);
        self.b.ins().fmul(y, s2)
    }

    /// `a·b + c`: one fused multiply-add where the host has FMA (inside
    /// the approximations only), else a multiply and an add.
    fn mul_add(&mut self, a: Value, b: Value, c: Value) -> Value {
        if has_fma() {
            self.b.ins().fma(a, b, c)
        } else {
            let m = self.b.ins().fmul(a, b);
            self.b.ins().fadd(m, c)
        }
    }

    /// `c[0]·z^(n-1) + … + c[n-1]` by Horner's rule.
    fn horner(&mut self, z: Value, coeffs: &[f64], ty: Type) -> Value {
        let mut p = self.splat_f(ty, coeffs[0]);
        for c in &coeffs[1..] {
            let cc = self.splat_f(ty, *c);
            p = self.mul_add(p, z, cc);
        }
        p
    }

    /// `e^x` for f64 (scalar or F64X2), after Cephes' `exp`: reduction by
    /// `ln 2` in two parts, then the Padé form `1 + 2·P(r)/(Q(r²) - P(r))`;
    /// 2^n applied as two powers of two so that denormal results round
    /// once. NaN propagates; overflow gives +inf, underflow +0. Within 2 ulp
    /// of glibc's `exp` (tested).
    fn exp_f64(&mut self, x: Value, ty: Type) -> Value {
        let (y, tm, _) = self.exp_f64_reduced(x, ty);
        let one = self.splat_f(ty, 1.0);
        let y = self.b.ins().fadd(y, one);
        self.scale_by_pow2(y, tm, ty)
    }

    /// The shared part of f64 `exp` and `expm1`: `x` clamped to
    /// [-746, 709.79], `n = round(x / ln 2)`, `r = x - n·ln 2`; returns
    /// `(e^r - 1, n + 1.5·2^52, n)` with `e^r - 1 = 2·P(r)/(Q(r²) - P(r))`.
    fn exp_f64_reduced(&mut self, x: Value, ty: Type) -> (Value, Value, Value) {
        let hi = self.splat_f(ty, 709.79);
        let lo = self.splat_f(ty, -746.0);
        let above = self.b.ins().fcmp(FloatCC::LessThan, hi, x);
        let x = self.sel(above, hi, x, ty);
        let below = self.b.ins().fcmp(FloatCC::LessThan, x, lo);
        let x = self.sel(below, lo, x, ty);
        // n = round(x·log2 e) via the 1.5·2^52 trick.
        let log2e = self.splat_f(ty, std::f64::consts::LOG2_E);
        let magic = self.splat_f(ty, 6_755_399_441_055_744.0);
        let tm = self.mul_add(x, log2e, magic);
        let n = self.b.ins().fsub(tm, magic);
        let c1 = self.splat_f(ty, -6.931_457_519_531_25e-1);
        let c2 = self.splat_f(ty, -1.428_606_820_309_417_3e-6);
        let r = self.mul_add(n, c1, x);
        let r = self.mul_add(n, c2, r);
        let rr = self.b.ins().fmul(r, r);
        let p = self.horner(
            rr,
            &[1.261_771_930_748_105_8e-4, 3.029_944_077_074_419_5e-2, 1.0],
            ty,
        );
        let px = self.b.ins().fmul(p, r);
        let q = self.horner(
            rr,
            &[
                3.001_985_051_386_644_6e-6,
                2.524_483_403_496_841e-3,
                2.272_655_482_081_550_3e-1,
                2.0,
            ],
            ty,
        );
        let den = self.b.ins().fsub(q, px);
        let y = self.b.ins().fdiv(px, den);
        (self.b.ins().fadd(y, y), tm, n)
    }

    /// `tanh x` for f32 (scalar or F32X4), after Cephes' `tanhf`: for
    /// |x| < 0.625 an odd polynomial, else `1 - 2/(e^(2|x|) + 1)` with the
    /// inline exp; both on |x|, the sign copied back (so -0 stays -0).
    /// Within 4 ulp of a correctly rounded result (tested); NaN propagates,
    /// ±inf give ±1.
    fn tanh_f32(&mut self, x: Value, ty: Type) -> Value {
        let a = self.b.ins().fabs(x);
        let z = self.b.ins().fmul(a, a);
        let p = self.horner(
            z,
            &[
                -5.704_988_727_45e-3,
                2.063_908_879_54e-2,
                -5.373_971_555_31e-2,
                1.333_144_220_36e-1,
                -3.333_328_194_22e-1,
            ],
            ty,
        );
        let zp = self.b.ins().fmul(z, p);
        let small = self.mul_add(a, zp, a);
        let two_a = self.b.ins().fadd(a, a);
        let e = self.exp_f32(two_a, ty);
        let one = self.splat_f(ty, 1.0);
        let two = self.splat_f(ty, 2.0);
        let e1 = self.b.ins().fadd(e, one);
        let q = self.b.ins().fdiv(two, e1);
        let large = self.b.ins().fsub(one, q);
        let cut = self.splat_f(ty, 0.625);
        let is_small = self.b.ins().fcmp(FloatCC::LessThan, a, cut);
        let r = self.sel(is_small, small, large, ty);
        self.with_sign_of(r, x, ty)
    }

    /// `ln x` for f32 (scalar or F32X4), after Cephes' `logf`: x = m·2^e
    /// with m in [√½, √2), a degree-8 polynomial in m - 1. Denormals are
    /// scaled by 2^23 first. x < 0 and NaN give NaN, ±0 gives -inf, +inf
    /// gives +inf. Within 4 ulp of a correctly rounded result (tested).
    fn log_f32(&mut self, x: Value, ty: Type) -> Value {
        let ity = if ty.is_vector() {
            types::I32X4
        } else {
            types::I32
        };
        let flags = MemFlagsData::new();
        // Denormals: scale into the normal range, remembering the exponent.
        let tiny = self.splat_f(ty, f64::from(f32::MIN_POSITIVE));
        let is_tiny = self.b.ins().fcmp(FloatCC::LessThan, x, tiny);
        let scale = self.splat_f(ty, 8_388_608.0);
        let xs = self.b.ins().fmul(x, scale);
        let xn = self.sel(is_tiny, xs, x, ty);
        let zero_i = self.splat_i(ity, 0);
        let m23 = self.splat_i(ity, 23);
        let bias_adj = self.sel(is_tiny, m23, zero_i, ty);
        // Split into mantissa in [0.5, 1) and exponent.
        let bits = self.b.ins().bitcast(ity, flags, xn);
        let e = self.b.ins().ushr_imm_s(bits, 23);
        let ff = self.splat_i(ity, 0xff);
        let e = self.b.ins().band(e, ff);
        let e = self.b.ins().isub(e, bias_adj);
        let mant_mask = self.splat_i(ity, 0x807f_ffff_u32 as i32 as i64);
        let mb = self.b.ins().band(bits, mant_mask);
        let half_bits = self.splat_i(ity, 0x3f00_0000);
        let mb = self.b.ins().bor(mb, half_bits);
        let m = self.b.ins().bitcast(ty, flags, mb);
        let bias = self.splat_i(ity, 126);
        let e = self.b.ins().isub(e, bias);
        let ef = if ty.is_vector() {
            self.b.ins().fcvt_from_sint(ty, e)
        } else {
            self.b.ins().fcvt_from_sint(types::F32, e)
        };
        // m < √½: use 2m - 1 and e - 1; else m - 1.
        let sqrthf = self.splat_f(ty, std::f64::consts::FRAC_1_SQRT_2);
        let lt = self.b.ins().fcmp(FloatCC::LessThan, m, sqrthf);
        let one = self.splat_f(ty, 1.0);
        let m2 = self.b.ins().fadd(m, m);
        let mm = self.sel(lt, m2, m, ty);
        let f = self.b.ins().fsub(mm, one);
        let em1 = self.b.ins().fsub(ef, one);
        let ef = self.sel(lt, em1, ef, ty);
        let z = self.b.ins().fmul(f, f);
        let p = self.horner(
            f,
            &[
                7.037_683_629_2e-2,
                -1.151_461_031_0e-1,
                1.167_699_874_0e-1,
                -1.242_014_084_6e-1,
                1.424_932_278_7e-1,
                -1.666_805_766_5e-1,
                2.000_071_476_5e-1,
                -2.499_999_399_3e-1,
                3.333_333_117_4e-1,
            ],
            ty,
        );
        let y = self.b.ins().fmul(p, f);
        let y = self.b.ins().fmul(y, z);
        let q1 = self.splat_f(ty, -2.121_944_40e-4);
        let y = self.mul_add(ef, q1, y);
        let h = self.splat_f(ty, -0.5);
        let y = self.mul_add(z, h, y);
        let r = self.b.ins().fadd(f, y);
        let q2 = self.splat_f(ty, 0.693_359_375);
        let r = self.mul_add(ef, q2, r);
        self.log_specials(x, r, ty)
    }

    /// `cond ? a : b` for scalars (`select`) and vectors (lane masks, `bitselect`).
    /// The mask is reinterpreted as `a`'s type, so float and integer lanes
    /// both work.
    fn sel(&mut self, cond: Value, a: Value, b: Value, ty: Type) -> Value {
        if ty.is_vector() {
            let vt = self.b.func.dfg.value_type(a);
            let m = self.b.ins().bitcast(vt, MemFlagsData::new(), cond);
            self.b.ins().bitselect(m, a, b)
        } else {
            self.b.ins().select(cond, a, b)
        }
    }

    fn complex_unary(&mut self, u: UnaryOp, re: Value, im: Value, xd: DType) -> Result<V> {
        let t = comp_ty(xd);
        Ok(match u {
            UnaryOp::Neg => V::C(self.b.ins().fneg(re), self.b.ins().fneg(im)),
            UnaryOp::Square => self.cmul(re, im, re, im),
            UnaryOp::Abs => {
                let name = if t == types::F32 {
                    "tl_c64_abs"
                } else {
                    "tl_c128_abs"
                };
                V::S(self.call(name, &[t, t], &[t], &[re, im])?[0])
            }
            _ => {
                let name = if t == types::F32 {
                    "tl_c64_un"
                } else {
                    "tl_c128_un"
                };
                self.call_complex(name, u as i64, t, &[re, im])?
            }
        })
    }

    /// Calls a complex runtime function `name(op, parts..., out)` that writes
    /// its (re, im) result to a stack slot, and loads the result.
    fn call_complex(&mut self, name: &'static str, op: i64, t: Type, parts: &[Value]) -> Result<V> {
        let slot =
            self.b
                .create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 16, 3));
        let p = self.b.ins().stack_addr(self.ptr, slot, 0);
        let code = self.b.ins().iconst(types::I32, op);
        let mut params = vec![types::I32];
        params.extend(parts.iter().map(|_| t));
        params.push(self.ptr);
        let mut args = vec![code];
        args.extend_from_slice(parts);
        args.push(p);
        self.call(name, &params, &[], &args)?;
        let half = t.bytes() as i32;
        Ok(V::C(
            self.b.ins().load(t, trusted(), p, 0),
            self.b.ins().load(t, trusted(), p, half),
        ))
    }

    fn cmul(&mut self, a: Value, b: Value, c: Value, d: Value) -> V {
        let ac = self.b.ins().fmul(a, c);
        let bd = self.b.ins().fmul(b, d);
        let ad = self.b.ins().fmul(a, d);
        let bc = self.b.ins().fmul(b, c);
        V::C(self.b.ins().fsub(ac, bd), self.b.ins().fadd(ad, bc))
    }

    fn binary(&mut self, op: BinaryOp, x: V, y: V, d: DType, mode: Mode) -> Result<V> {
        if let (V::C(a, b), V::C(c, e)) = (x, y) {
            return self.complex_binary(op, a, b, c, e, d);
        }
        let (x, y) = (x.s(), y.s());
        let ty = self.b.func.dfg.value_type(x);
        let f = d.is_float();
        let s = d.is_signed_int();
        Ok(V::S(match op {
            BinaryOp::Add if f => self.b.ins().fadd(x, y),
            BinaryOp::Sub if f => self.b.ins().fsub(x, y),
            BinaryOp::Mul if f => self.b.ins().fmul(x, y),
            BinaryOp::Div if f => self.b.ins().fdiv(x, y),
            BinaryOp::Max if f => self.b.ins().fmax(x, y),
            BinaryOp::Min if f => self.b.ins().fmin(x, y),
            BinaryOp::Add => self.b.ins().iadd(x, y),
            BinaryOp::Sub => self.b.ins().isub(x, y),
            BinaryOp::Mul => self.b.ins().imul(x, y),
            BinaryOp::Max if s => self.b.ins().smax(x, y),
            BinaryOp::Max => self.b.ins().umax(x, y),
            BinaryOp::Min if s => self.b.ins().smin(x, y),
            BinaryOp::Min => self.b.ins().umin(x, y),
            BinaryOp::And => self.b.ins().band(x, y),
            BinaryOp::Or => self.b.ins().bor(x, y),
            BinaryOp::Xor => self.b.ins().bxor(x, y),
            BinaryOp::Div | BinaryOp::Rem if !f => {
                self.int_divrem(op == BinaryOp::Div, s, x, y, ty)
            }
            BinaryOp::Pow if ty.lane_type() == types::F32 && !self.opts.exact => {
                self.pow_f32(x, y, ty)
            }
            BinaryOp::Rem | BinaryOp::Pow if f => {
                if matches!(mode, Mode::Vector(_)) {
                    return Err(Error::internal("rem/pow cannot be vectorized"));
                }
                let code = self.b.ins().iconst(types::I32, op as i64);
                let (name, t) = if ty == types::F32 {
                    ("tl_f32_bin", types::F32)
                } else {
                    ("tl_f64_bin", types::F64)
                };
                self.call(name, &[types::I32, t, t], &[t], &[code, x, y])?[0]
            }
            BinaryOp::Pow => {
                let name = match d {
                    DType::I8 => "tl_pow_i8",
                    DType::I16 => "tl_pow_i16",
                    DType::I32 => "tl_pow_i32",
                    DType::I64 => "tl_pow_i64",
                    DType::U8 => "tl_pow_u8",
                    DType::U16 => "tl_pow_u16",
                    DType::U32 => "tl_pow_u32",
                    _ => "tl_pow_u64",
                };
                self.call(name, &[ty, ty], &[ty], &[x, y])?[0]
            }
            _ => {
                return Err(Error::internal(format!(
                    "{} on {d} reached code generation",
                    op.name()
                )));
            }
        }))
    }

    /// Integer division/remainder that never traps: `x / 0 = -1`,
    /// `x % 0 = x`, `MIN / -1 = MIN` (wrapping), `MIN % -1 = 0`.
    fn int_divrem(&mut self, div: bool, signed: bool, x: Value, y: Value, ty: Type) -> Value {
        let z = self.ic(ty, 0);
        let zero = self.b.ins().icmp(IntCC::Equal, y, z);
        let one = self.ic(ty, 1);
        if signed {
            let minus1 = self.ic(ty, -1);
            let m1 = self.b.ins().icmp(IntCC::Equal, y, minus1);
            let special = self.b.ins().bor(zero, m1);
            let safe = self.b.ins().select(special, one, y);
            if div {
                let q = self.b.ins().sdiv(x, safe);
                let nx = self.b.ins().ineg(x);
                let q = self.b.ins().select(m1, nx, q);
                self.b.ins().select(zero, minus1, q)
            } else {
                let r = self.b.ins().srem(x, safe);
                let r = self.b.ins().select(m1, z, r);
                self.b.ins().select(zero, x, r)
            }
        } else {
            let safe = self.b.ins().select(zero, one, y);
            if div {
                let q = self.b.ins().udiv(x, safe);
                let all = self.ic(ty, -1);
                self.b.ins().select(zero, all, q)
            } else {
                let r = self.b.ins().urem(x, safe);
                self.b.ins().select(zero, x, r)
            }
        }
    }

    fn complex_binary(
        &mut self,
        op: BinaryOp,
        a: Value,
        b: Value,
        c: Value,
        e: Value,
        d: DType,
    ) -> Result<V> {
        Ok(match op {
            BinaryOp::Add => V::C(self.b.ins().fadd(a, c), self.b.ins().fadd(b, e)),
            BinaryOp::Sub => V::C(self.b.ins().fsub(a, c), self.b.ins().fsub(b, e)),
            BinaryOp::Mul => self.cmul(a, b, c, e),
            BinaryOp::Div => {
                // num-complex: ((a c + b e) / |y|², (b c - a e) / |y|²)
                let cc = self.b.ins().fmul(c, c);
                let ee = self.b.ins().fmul(e, e);
                let n = self.b.ins().fadd(cc, ee);
                let ac = self.b.ins().fmul(a, c);
                let be = self.b.ins().fmul(b, e);
                let re = self.b.ins().fadd(ac, be);
                let bc = self.b.ins().fmul(b, c);
                let ae = self.b.ins().fmul(a, e);
                let im = self.b.ins().fsub(bc, ae);
                V::C(self.b.ins().fdiv(re, n), self.b.ins().fdiv(im, n))
            }
            _ => {
                let t = comp_ty(d);
                let name = if t == types::F32 {
                    "tl_c64_bin"
                } else {
                    "tl_c128_bin"
                };
                self.call_complex(name, op as i64, t, &[a, b, c, e])?
            }
        })
    }

    fn compare(&mut self, c: CmpOp, x: V, y: V, d: DType) -> V {
        if let (V::C(a, b), V::C(p, q)) = (x, y) {
            let r = self.b.ins().fcmp(FloatCC::Equal, a, p);
            let i = self.b.ins().fcmp(FloatCC::Equal, b, q);
            let eq = self.b.ins().band(r, i);
            return V::S(if c == CmpOp::Eq {
                eq
            } else {
                self.b.ins().bxor_imm_u(eq, 1)
            });
        }
        let (x, y) = (x.s(), y.s());
        if d.is_float() {
            let cc = match c {
                CmpOp::Eq => FloatCC::Equal,
                CmpOp::Ne => FloatCC::NotEqual,
                CmpOp::Lt => FloatCC::LessThan,
                CmpOp::Le => FloatCC::LessThanOrEqual,
                CmpOp::Gt => FloatCC::GreaterThan,
                CmpOp::Ge => FloatCC::GreaterThanOrEqual,
            };
            V::S(self.b.ins().fcmp(cc, x, y))
        } else {
            let s = d.is_signed_int();
            let cc = match c {
                CmpOp::Eq => IntCC::Equal,
                CmpOp::Ne => IntCC::NotEqual,
                CmpOp::Lt if s => IntCC::SignedLessThan,
                CmpOp::Le if s => IntCC::SignedLessThanOrEqual,
                CmpOp::Gt if s => IntCC::SignedGreaterThan,
                CmpOp::Ge if s => IntCC::SignedGreaterThanOrEqual,
                CmpOp::Lt => IntCC::UnsignedLessThan,
                CmpOp::Le => IntCC::UnsignedLessThanOrEqual,
                CmpOp::Gt => IntCC::UnsignedGreaterThan,
                CmpOp::Ge => IntCC::UnsignedGreaterThanOrEqual,
            };
            V::S(self.b.ins().icmp(cc, x, y))
        }
    }

    /// Casts with the interpreter's rules (see `docs/ir.md`).
    fn convert(&mut self, x: V, from: DType, to: DType) -> Result<V> {
        if from == to {
            return Ok(x);
        }
        // Complex sources: drop the imaginary part unless the target is
        // complex or bool.
        if let V::C(re, im) = x {
            if to.is_complex() {
                let t = comp_ty(to);
                let cv = |g: &mut Self, v: Value| {
                    if t == types::F64 {
                        g.b.ins().fpromote(t, v)
                    } else {
                        g.b.ins().fdemote(t, v)
                    }
                };
                return Ok(V::C(cv(self, re), cv(self, im)));
            }
            if to == DType::Bool {
                let z = self.splat_f(comp_ty(from), 0.0);
                let a = self.b.ins().fcmp(FloatCC::NotEqual, re, z);
                let b = self.b.ins().fcmp(FloatCC::NotEqual, im, z);
                return Ok(V::S(self.b.ins().bor(a, b)));
            }
            return self.convert(V::S(re), from.real_part(), to);
        }
        let x = x.s();
        if to.is_complex() {
            let part = to.real_part();
            let re = self.convert(V::S(x), from, part)?.s();
            let z = self.splat_f(comp_ty(part), 0.0);
            return Ok(V::C(re, z));
        }
        let xt = self.b.func.dfg.value_type(x);
        let tt = comp_ty(to);
        let from_int = from == DType::Bool || from.is_int();
        let from_signed = from.is_signed_int();
        Ok(V::S(if to == DType::Bool {
            if from_int {
                let z = self.ic(xt, 0);
                self.b.ins().icmp(IntCC::NotEqual, x, z)
            } else {
                let z = self.splat_f(xt, 0.0);
                self.b.ins().fcmp(FloatCC::NotEqual, x, z)
            }
        } else if to.is_int() {
            if from_int {
                if xt.bits() < tt.bits() {
                    if from_signed {
                        self.b.ins().sextend(tt, x)
                    } else {
                        self.b.ins().uextend(tt, x)
                    }
                } else if xt.bits() > tt.bits() {
                    self.b.ins().ireduce(tt, x)
                } else {
                    x
                }
            } else if to == DType::U64 {
                self.b.ins().fcvt_to_uint_sat(types::I64, x)
            } else {
                let w = self.b.ins().fcvt_to_sint_sat(types::I64, x);
                if to == DType::I64 {
                    w
                } else {
                    let bits = to.size() as u32 * 8;
                    let (lo, hi) = if to.is_signed_int() {
                        (-(1i64 << (bits - 1)), (1i64 << (bits - 1)) - 1)
                    } else {
                        (0, ((1u64 << bits) - 1) as i64)
                    };
                    let lo = self.b.ins().iconst(types::I64, lo);
                    let hi = self.b.ins().iconst(types::I64, hi);
                    let w = self.b.ins().smax(w, lo);
                    let w = self.b.ins().smin(w, hi);
                    self.b.ins().ireduce(tt, w)
                }
            }
        } else {
            // Float targets (halves computed in f32).
            let v = if from_int {
                let wide = if xt.bits() < 64 {
                    if from_signed {
                        self.b.ins().sextend(types::I64, x)
                    } else {
                        self.b.ins().uextend(types::I64, x)
                    }
                } else {
                    x
                };
                if from_signed {
                    self.b.ins().fcvt_from_sint(tt, wide)
                } else {
                    self.b.ins().fcvt_from_uint(tt, wide)
                }
            } else if to.is_half() {
                let bits = if xt == types::F64 {
                    self.call(
                        if to == DType::F16 {
                            "tl_f64_to_f16"
                        } else {
                            "tl_f64_to_bf16"
                        },
                        &[types::F64],
                        &[types::I32],
                        &[x],
                    )?[0]
                } else {
                    self.call(
                        if to == DType::F16 {
                            "tl_f32_to_f16"
                        } else {
                            "tl_f32_to_bf16"
                        },
                        &[types::F32],
                        &[types::I32],
                        &[x],
                    )?[0]
                };
                return Ok(V::S(if to == DType::F16 {
                    self.call("tl_f16_to_f32", &[types::I32], &[types::F32], &[bits])?[0]
                } else {
                    let h = self.b.ins().ireduce(types::I16, bits);
                    self.bf16_to_f32(h)
                }));
            } else if xt == tt {
                x
            } else if tt == types::F64 {
                self.b.ins().fpromote(tt, x)
            } else {
                self.b.ins().fdemote(tt, x)
            };
            if to.is_half() {
                self.round_half(to, v)?
            } else {
                v
            }
        }))
    }
}
