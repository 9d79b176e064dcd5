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
    AbiParam, Function, InstBuilder, MemFlagsData, StackSlotData, StackSlotKind, Type,
    UserFuncName, Value, types,
};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{FuncId, Linkage, Module};
use tensorlift_ir::{BinaryOp, CmpOp, DType, Error, ReduceOp, Result, Scalar, UnaryOp};

use crate::fusion::{ENode, Kernel, KernelKind, Plan, Step};
use crate::rt::{RtFn, StepTable};
use crate::wide;

pub(crate) mod math;

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
    /// Evaluate f32 transcendental functions of long vectorized rows in
    /// chunks, through routines compiled for the host's widest vectors
    /// (AVX-512 or AVX2; see `docs/compiler.md`, "Wide math"). Same results
    /// as the inline 128-bit code; off, every row uses the inline code.
    pub wide_math: bool,
}

impl Default for JitOptions {
    fn default() -> Self {
        JitOptions {
            opt_level: OptLevel::Speed,
            exact: false,
            vectorize: true,
            threads: true,
            wide_math: true,
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
    let isa = cranelift_native::builder()
        .map_err(|m| Error::unimplemented(format!("this host is not supported by Cranelift: {m}")))?
        .finish(settings::Flags::new(flags))
        .map_err(cg_err)?;
    let mut jb = JITBuilder::with_isa(isa, cranelift_module::default_libcall_names());
    for f in RtFn::ALL {
        let sym = f.symbol();
        jb.symbol(sym.name, sym.addr);
    }
    Ok(JITModule::new(jb))
}

/// True when the kernel's outermost loop can be split across threads:
/// different ranges write disjoint outputs (loops, and reductions whose
/// outermost dim is kept), and the kernel is compute-bound. Memory-bound
/// kernels (a few ops per element) already saturate memory bandwidth on
/// one core of the benchmark machine, and splitting them made them slower
/// (fresh output pages faulted in from two threads contend).
pub(crate) fn splittable(k: &Kernel) -> bool {
    crate::fusion::range_capable(k) && element_cost(k) >= MIN_PARALLEL_COST
}

/// Rough cost of computing one element (see `fusion::node_cost`).
fn element_cost(k: &Kernel) -> usize {
    k.nodes.iter().map(crate::fusion::node_cost).sum()
}

/// Per-element cost from which a kernel is considered compute-bound.
const MIN_PARALLEL_COST: usize = 8;

/// A rough cost of one call: loop iterations times per-element cost, the
/// nodes that wide math evaluates (`wide_nodes`) counted at their cost per
/// 4 lanes (a quarter of it with AVX-512's 16): with them, the exp/tanh
/// chain of the benchmarks runs 2.5x faster on one core, and its crossover
/// moved up as much (docs/benchmarks.md).
pub(crate) fn kernel_work(k: &Kernel, opts: &JitOptions) -> usize {
    let lanes = match wide::lanes() {
        Some(l) if opts.wide_math && !opts.exact && has_fma() => l,
        _ => 4,
    };
    let long_rows = k.dims.last().is_some_and(|n| *n >= WIDE_MIN_ROW);
    let dtype_of = |x: usize| k.nodes[x].dtype();
    // (f64: 2 lanes inline, 8 wide: the same ratio.)
    let cost: usize = (k.nodes.iter())
        .map(|n| match n {
            n if long_rows && wide_eligible(n, dtype_of) => crate::fusion::node_cost(n) * 4 / lanes,
            n => crate::fusion::node_cost(n),
        })
        .sum();
    k.dims.iter().product::<usize>().saturating_mul(cost)
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

/// Whether the host has SSE4.2 (`pcmpgtq`: 64-bit lane comparisons).
fn has_sse42() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("sse4.2")
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
/// True for kernels `main` emits in place instead of calling: scalar loop
/// kernels (a loop counter's compare and increment, a scalar carry's
/// update), where a call costs more than the work.
fn inline_in_main(k: &Kernel) -> bool {
    k.dims.is_empty() && k.kind == KernelKind::Loop && k.stash.is_none()
}

/// Copies between slots up to this many bytes are inline loads and stores
/// (a loop's scalar carries), larger ones `memmove` calls.
const SMALL_COPY: usize = 64;

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
        if let Step::Kernel(k) = step
            && (!inline_in_main(k) || plan.groups.iter().any(|g| (g.start..g.end).contains(&i)))
        {
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
        let step_fn = helpers.get(&mut module, RtFn::RuntimeStep)?;
        let step_ref = module.declare_func_in_func(step_fn, b.func);
        let gemm_fn = helpers.get(&mut module, RtFn::Gemm)?;
        let gemm_ref = module.declare_func_in_func(gemm_fn, b.func);
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
        for (i, step) in plan.steps.iter().enumerate() {
            if plan.groups.iter().any(|g| g.start < i && i < g.end) {
                continue;
            }
            let group = plan.groups.iter().find(|g| g.start == i);
            let status = match step {
                Step::Kernel(k) if group.is_none() && inline_in_main(k) => {
                    let mut kg =
                        KernelGen::new(&mut b, &mut module, &mut helpers, plan, k, opts, ptr);
                    kg.emit_body(bufs)?;
                    continue;
                }
                Step::Copy { from, to } => {
                    for (&f, &t) in from.iter().zip(to) {
                        let n = plan.slots[t].bytes();
                        if f == t || n == 0 {
                            continue;
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
                    b.ins().jump(labels[*l], &[]);
                    b.switch_to_block(labels[*l]);
                    continue;
                }
                Step::Jump(l) => {
                    b.ins().jump(labels[*l], &[]);
                    let dead = b.create_block();
                    b.switch_to_block(dead);
                    continue;
                }
                Step::BranchUnless { pred, label } => {
                    let p = slot_ptr(&mut b, *pred);
                    let v = b.ins().uload8(types::I32, trusted(), p, 0);
                    let go_on = b.create_block();
                    b.ins().brif(v, go_on, &[], labels[*label], &[]);
                    b.switch_to_block(go_on);
                    continue;
                }
                Step::Switch { index, labels: ls } => {
                    let p = slot_ptr(&mut b, *index);
                    let k = b.ins().load(types::I32, trusted(), p, 0);
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
                    let par = matches!(
                        crate::parallel::group_split(plan, g, opts),
                        crate::parallel::Split::Ranges(_)
                    );
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
                    if let crate::parallel::Split::Ranges(_) =
                        crate::parallel::kernel_split(k, opts)
                    {
                        let addr = b.ins().func_addr(ptr, f);
                        let work = b.ins().iconst(types::I64, kernel_work(k, opts) as i64);
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
            b.ins().return_(&[status]);
            b.switch_to_block(next);
        }
        let zero = b.ins().iconst(types::I32, 0);
        b.ins().return_(&[zero]);
        b.seal_all_blocks();
        b.finalize(module.target_config());
    }
    clif.push_str(&format!("; main\n{}\n", func.display()));
    // The functions the code imports, by the names the dump shows them as.
    let mut imports: Vec<(u32, &str)> = (helpers.ids.iter())
        .map(|(f, id)| (id.as_u32(), f.name()))
        .collect();
    imports.sort_unstable();
    for (id, name) in imports {
        clif.push_str(&format!("; u0:{id} = {name}\n"));
    }
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

/// The runtime functions a module imports.
struct Helpers {
    ids: HashMap<RtFn, FuncId>,
}

impl Helpers {
    /// `f`, declared as an import of `m` on first use.
    fn get(&mut self, m: &mut JITModule, f: RtFn) -> Result<FuncId> {
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
        DType::Bool | DType::F16 | DType::BF16 | DType::C64 | DType::C128 | DType::String => None,
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
    frefs: HashMap<RtFn, cranelift_codegen::ir::FuncRef>,
    hoisted: HashMap<usize, Value>,
    /// Element offset applied to vector loads (unrolled copies).
    load_off: i64,
    /// `[begin, end)` of the outermost dim, for split kernels.
    range: Option<(Value, Value)>,
    /// Set during the passes of a chunk of a wide row (`wide_chunks`).
    wide: Option<WideCtx>,
}

/// A row evaluated by one `tl_wide_row_*` call (`KernelGen::fused_row`).
struct FusedRow {
    /// What the row computes.
    op: RowOp,
    /// The load node of the row.
    src: usize,
    /// What is applied to the row first.
    pre: Pre,
    /// The accessor key of the row the values are stored to (`OUT` or
    /// `STASH`), if any.
    dst: Option<usize>,
    /// Bytes from the row to the memory to prefetch as it is read
    /// (`KernelGen::prefetch_distance`), if any.
    ahead: Option<i64>,
}

/// What a fused row computes.
#[derive(Clone, Copy)]
enum RowOp {
    /// A function (after `Pre`).
    Map(UnaryOp),
    /// The row divided by `Pre::Div`'s operand.
    Div,
    /// The row's maximum (a row max: nothing stored).
    Max,
}

/// The operation before a fused row's function, with the node of its
/// operand fixed for the row.
#[derive(Clone, Copy)]
enum Pre {
    None,
    Sub(usize),
    Add(usize),
    Mul(usize),
    Div(usize),
}

/// What `eval` needs in a pass over a chunk of a wide row.
struct WideCtx {
    /// The chunk buffers' address at the current element.
    addr: Value,
    /// Byte offset of the buffer of each wide node already mapped.
    bufs: HashMap<usize, i32>,
    /// The nodes this pass evaluates.
    need: Vec<bool>,
}

/// A pass over one chunk of a wide row (`KernelGen::chunk_pass`).
struct ChunkPass<'a> {
    /// Elements in the chunk (whole vectors).
    len: Value,
    /// The moving accessors at the chunk's start.
    start: &'a [(Variable, Value, i64)],
    /// The chunk buffers.
    base: Value,
    /// Byte offsets of the buffers of the wide nodes already mapped.
    bufs: HashMap<usize, i32>,
    /// The nodes the pass evaluates.
    need: Vec<bool>,
}

/// Whether wide math has a routine for the node: an f32 or f64 function
/// of `wide::has_routine` on an operand of the same dtype.
fn wide_eligible(n: &ENode, dtype_of: impl Fn(usize) -> DType) -> bool {
    match n {
        ENode::Unary(u, x, d @ (DType::F32 | DType::F64)) => {
            wide::has_routine(*u) && dtype_of(*x) == *d
        }
        // f64 `pow` (`tl_wide_pow_f64`: both operands in the buffer).
        ENode::Binary(BinaryOp::Pow, x, y, DType::F64) => {
            dtype_of(*x) == DType::F64 && dtype_of(*y) == DType::F64
        }
        ENode::Load { .. }
        | ENode::Const(_)
        | ENode::Iota { .. }
        | ENode::Unary(..)
        | ENode::Binary(..)
        | ENode::Compare(..)
        | ENode::Select(..)
        | ENode::Clamp(..)
        | ENode::Convert(..)
        | ENode::Bitcast(..) => false,
    }
}

/// Chunk buffers a wide node takes: two for a binary one.
fn wide_buffers(n: &ENode) -> usize {
    match n {
        ENode::Binary(..) => 2,
        ENode::Load { .. }
        | ENode::Const(_)
        | ENode::Iota { .. }
        | ENode::Unary(..)
        | ENode::Compare(..)
        | ENode::Select(..)
        | ENode::Clamp(..)
        | ENode::Convert(..)
        | ENode::Bitcast(..) => 1,
    }
}

/// The integer vector type of a float vector type's lanes.
fn math_int_ty(vt: Type) -> Type {
    if vt.lane_type() == types::F64 {
        types::I64X2
    } else {
        types::I32X4
    }
}

/// Conversions emitted on vectors: between f32 and 32-bit integers
/// (`cvtdq2ps`, `cvttps2dq` with Cranelift's saturation: NaN → 0, out of
/// range → the nearest bound, as the scalar code's saturating conversion
/// and clamp), between i32 and u32 (the same bits), and between f32 and
/// f64 (`cvtps2pd`, `cvtpd2ps`: the load is converted as it is read, two
/// f32 per f64 vector or two f64 vectors per f32 one, see `eval`).
fn vector_convert(from: DType, to: DType) -> bool {
    use DType::{F32, F64, I32, U32};
    matches!(
        (from, to),
        (I32 | U32, F32) | (F32, I32 | U32) | (I32, U32) | (U32, I32) | (F32, F64) | (F64, F32)
    )
}

/// Whether a load of `from` in a kernel of `to` is converted as it is read
/// (the float widths, whose vectors have different lane counts).
fn converted_on_load(from: DType, to: DType) -> bool {
    matches!(
        (from, to),
        (DType::F32, DType::F64) | (DType::F64, DType::F32)
    )
}

/// An accessor: (key, element offset, strides, element size; 0 for iota).
type Accessor = (usize, i64, Vec<i64>, i64);

/// Rows shorter than this keep the inline 128-bit code for wide nodes.
const WIDE_MIN_ROW: usize = 64;

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
            wide: None,
        }
    }

    /// Calls the runtime function `f` with `args`; its results.
    fn call(&mut self, f: RtFn, args: &[Value]) -> Result<Vec<Value>> {
        let fref = match self.frefs.get(&f) {
            Some(r) => *r,
            None => {
                let id = self.helpers.get(self.m, f)?;
                let r = self.m.declare_func_in_func(id, self.b.func);
                self.frefs.insert(f, r);
                r
            }
        };
        let inst = self.b.ins().call(fref, args);
        Ok(self.b.inst_results(inst).to_vec())
    }

    /// The stored dtype: the output slot's, or `u16` for a kernel that
    /// copies f16/bf16 bits (see `fusion::copy_halves_as_bits`).
    fn out_dtype(&self) -> DType {
        match self.k.nodes.get(self.k.root) {
            Some(ENode::Load {
                dtype: DType::U16, ..
            }) if self.k.nodes.len() == 1 => DType::U16,
            _ => self.plan.slots[self.k.out].dtype,
        }
    }

    /// Accessors: (key, offset, strides, element size) for every load/iota and the output.
    fn accessors(&self) -> Vec<Accessor> {
        let mut v: Vec<Accessor> = self
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
                ENode::Const(_)
                | ENode::Unary(..)
                | ENode::Binary(..)
                | ENode::Compare(..)
                | ENode::Select(..)
                | ENode::Clamp(..)
                | ENode::Convert(..)
                | ENode::Bitcast(..) => None,
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
        self.emit_body(bufs)?;
        let zero = self.b.ins().iconst(types::I32, 0);
        self.b.ins().return_(&[zero]);
        Ok(())
    }

    /// The kernel's code at the builder's current position, reading slot
    /// pointers from `bufs` (no function of its own: `main` inlines scalar
    /// kernels, see [`inline_in_main`]).
    fn emit_body(&mut self, bufs: Value) -> Result<()> {
        let mut slots: Vec<usize> = self
            .k
            .nodes
            .iter()
            .filter_map(|n| match n {
                ENode::Load { slot, .. } => Some(*slot),
                ENode::Const(_)
                | ENode::Iota { .. }
                | ENode::Unary(..)
                | ENode::Binary(..)
                | ENode::Compare(..)
                | ENode::Select(..)
                | ENode::Clamp(..)
                | ENode::Convert(..)
                | ENode::Bitcast(..) => None,
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
        let vector = self.vector_type(n);
        if let Some(fr) = vector.and_then(|vt| self.fused_row(vt, n)) {
            self.emit_fused_row(&fr, nv, acc)?;
            start = Some(nv);
        } else if let Some(vt) = vector {
            let lanes = vt.lane_count() as i64;
            // Hoist stride-0 loads and constants out of the vector loop.
            self.hoisted.clear();
            for (i, node) in self.k.nodes.iter().enumerate() {
                if let ENode::Load { strides, dtype, .. } = node
                    && inner_stride(strides) == 0
                {
                    let p = self.b.use_var(self.pos[&i]);
                    let v = self.b.ins().load(comp_ty(*dtype), trusted(), p, 0);
                    let dt = self.out_dtype();
                    let v = if converted_on_load(*dtype, dt) {
                        // Converted here, as `vector_load` does.
                        self.convert(V::S(v), *dtype, dt)?.s()
                    } else {
                        v
                    };
                    let lt = if converted_on_load(*dtype, dt) {
                        vt
                    } else {
                        vec_ty(*dtype).unwrap_or(vt)
                    };
                    let v = self.b.ins().splat(lt, v);
                    self.hoisted.insert(i, v);
                }
            }
            // Reductions over the innermost dim keep several independent
            // vector accumulators so the loop is not bound by the latency
            // of one dependency chain.
            // A body with a transcendental function is long enough to hide
            // the accumulator's latency by itself, and unrolled copies of
            // it would only spill its constants.
            let costly = element_cost(self.k) >= crate::fusion::TRANSCENDENTAL_COST;
            let wide = self.wide_nodes(vt, n);
            // Wide rows take the transcendental work out of the loop, so a
            // reduction of them keeps one accumulator per vector of a
            // chunk pass's iteration (two).
            let unroll: i64 = match (acc, &wide) {
                (Some(_), Some(_)) => 2,
                (Some(_), None) if !costly => 4,
                _ => 1,
            };
            let mut vaccs = Vec::new();
            if let (Some(_), KernelKind::Reduce { op, .. }) = (acc, &self.k.kind) {
                let init = self.reduce_init(*op)?;
                let v = self.b.ins().splat(vt, init);
                let mut inits = vec![v; unroll as usize];
                // Float max/min: two companions shared by the accumulators
                // (see `float_extreme_step`): the lanes that saw a NaN (none
                // yet) and the AND (max) / OR (min) of every element's bits.
                if let Some(is_max) = self.float_extreme() {
                    let ity = math_int_ty(vt);
                    let none = self.splat_i(ity, 0);
                    let bits = self.splat_i(ity, if is_max { -1 } else { 0 });
                    for m in [none, bits] {
                        inits.push(self.b.ins().bitcast(vt, MemFlagsData::new(), m));
                    }
                }
                for v in inits {
                    let var = self.b.declare_var(vt);
                    self.b.def_var(var, v);
                    vaccs.push(var);
                }
            }
            let mut from = None;
            let passes: &[(i64, i64)] = match wide {
                Some(wide) => {
                    from = Some(self.wide_chunks(&wide, nv, vt, &vaccs, &accs)?);
                    &[]
                }
                None if unroll > 1 => &[(lanes * unroll, unroll), (lanes, 1)],
                None => &[(lanes, 1)],
            };
            for &(step, copies) in passes {
                let last = self.for_loop_from(from, nv, step, &mut |s, _i| {
                    s.vector_step(vt, step, copies, &vaccs, &accs)
                })?;
                from = Some(last);
            }
            let last = from.ok_or_else(|| Error::internal("vector loop missing"))?;
            // Fold the vector partials into the scalar accumulator, lane by lane.
            if let (Some(sa), KernelKind::Reduce { op, .. }) = (acc, &self.k.kind) {
                let partials = self.vector_partials(vt, &vaccs);
                let mut v = partials[0];
                for w in &partials[1..] {
                    v = self.reduce_op(*op, v, *w);
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

    /// One step of a vector loop: `copies` vectors evaluated (at element
    /// offsets `u·lanes`), stored or folded into the accumulators, then the
    /// accessors advanced by `step` elements.
    fn vector_step(
        &mut self,
        vt: Type,
        step: i64,
        copies: i64,
        vaccs: &[Variable],
        accs: &[Accessor],
    ) -> Result<()> {
        let lanes = vt.lane_count() as i64;
        for u in 0..copies {
            self.load_off = u * lanes;
            let vals = self.eval(Mode::Vector(vt))?;
            self.load_off = 0;
            let root = vals[self.k.root].s();
            let esize = self.out_dtype().size() as i32;
            let off = (u * lanes) as i32 * esize;
            let stash_esize = self
                .k
                .stash
                .as_ref()
                .map_or(0, |st| self.plan.slots[st.slot].dtype.size() as i32);
            self.store_stash(&vals, (u * lanes) as i32 * stash_esize);
            match (&self.k.kind, vaccs.get(u as usize)) {
                (KernelKind::Loop, _) => {
                    let p = self.b.use_var(self.pos[&OUT]);
                    self.b.ins().store(unaligned(), root, p, off);
                }
                (KernelKind::Reduce { op, .. }, Some(va)) => match self.float_extreme() {
                    Some(is_max) => self.float_extreme_step(is_max, vt, vaccs, u as usize, root),
                    None => {
                        let a = self.b.use_var(*va);
                        let r = self.reduce_op(*op, a, root);
                        self.b.def_var(*va, r);
                    }
                },
                (KernelKind::Reduce { op, .. }, None) => {
                    let p = self.b.use_var(self.pos[&OUT]);
                    let a = self.b.ins().load(vt, unaligned(), p, off);
                    let r = self.reduce_op(*op, a, root);
                    self.b.ins().store(unaligned(), r, p, off);
                }
            }
        }
        self.advance(accs, step);
        Ok(())
    }

    /// `Some(true)` for a float max reduction, `Some(false)` for a float
    /// min: reductions whose vector accumulators use `float_extreme_step`.
    fn float_extreme(&self) -> Option<bool> {
        match &self.k.kind {
            KernelKind::Reduce {
                op: ReduceOp::Max, ..
            } if self.out_dtype().is_float() => Some(true),
            KernelKind::Reduce {
                op: ReduceOp::Min, ..
            } if self.out_dtype().is_float() => Some(false),
            KernelKind::Loop | KernelKind::Reduce { .. } => None,
        }
    }

    /// One step of a float max (min) vector accumulator `u` on `x` (the
    /// last two of `vaccs` are the companions, shared by the accumulators:
    /// a lane that is NaN or zero in one accumulator's result is so in the
    /// final result only if it is in all of them or the result is).
    /// Cranelift's `fmax` (NaN-propagating, +0 above -0) lowers to eight
    /// instructions on a five-deep dependency chain, which bound a row
    /// max by latency. Instead: `x > acc ? x : acc` (one `maxps`, NaN lanes
    /// of x left out), the lanes where x is NaN or-ed into a mask, and the
    /// bits of x and-ed (or-ed) together so that a zero result gets its
    /// sign right (`vector_partials` puts both back). Same results as
    /// `fmax` element by element.
    fn float_extreme_step(
        &mut self,
        is_max: bool,
        vt: Type,
        vaccs: &[Variable],
        u: usize,
        x: Value,
    ) {
        let m = vaccs.len() - 2;
        let (va, nan_var, bits_var) = (vaccs[u], vaccs[m], vaccs[m + 1]);
        let flags = MemFlagsData::new();
        let ity = math_int_ty(vt);
        let a = self.b.use_var(va);
        let better = if is_max {
            self.b.ins().fcmp(FloatCC::LessThan, a, x)
        } else {
            self.b.ins().fcmp(FloatCC::LessThan, x, a)
        };
        let r = self.sel(better, x, a, vt);
        self.b.def_var(va, r);
        let nan = self.b.ins().fcmp(FloatCC::Unordered, x, x);
        let seen = self.b.use_var(nan_var);
        let seen = self.b.ins().bitcast(ity, flags, seen);
        let seen = self.b.ins().bor(seen, nan);
        let seen = self.b.ins().bitcast(vt, flags, seen);
        self.b.def_var(nan_var, seen);
        let xb = self.b.ins().bitcast(ity, flags, x);
        let bits = self.b.use_var(bits_var);
        let bits = self.b.ins().bitcast(ity, flags, bits);
        let bits = if is_max {
            self.b.ins().band(bits, xb)
        } else {
            self.b.ins().bor(bits, xb)
        };
        let bits = self.b.ins().bitcast(vt, flags, bits);
        self.b.def_var(bits_var, bits);
    }

    /// The vector accumulators' values; for a float max/min, each with the
    /// companions applied: NaN where a NaN was seen, and a zero result
    /// signed as `fmax`/`fmin` would have it (for a max that is zero, no
    /// element was positive, so it is +0 exactly when some element's sign
    /// bit was clear; for a min, -0 when some element's was set).
    fn vector_partials(&mut self, vt: Type, vaccs: &[Variable]) -> Vec<Value> {
        if self.float_extreme().is_none() {
            return vaccs.iter().map(|v| self.b.use_var(*v)).collect();
        }
        let m = vaccs.len() - 2;
        let flags = MemFlagsData::new();
        let ity = math_int_ty(vt);
        let sign_bit = if vt.lane_type() == types::F64 {
            i64::MIN
        } else {
            i64::from(i32::MIN)
        };
        (0..m)
            .map(|u| {
                let r = self.b.use_var(vaccs[u]);
                let seen = self.b.use_var(vaccs[m]);
                let bits = self.b.use_var(vaccs[m + 1]);
                let bits = self.b.ins().bitcast(ity, flags, bits);
                let sign = self.splat_i(ity, sign_bit);
                let zero_bits = self.b.ins().band(bits, sign);
                let signed_zero = self.b.ins().bitcast(vt, flags, zero_bits);
                let zero = self.splat_f(vt, 0.0);
                let is_zero = self.b.ins().fcmp(FloatCC::Equal, r, zero);
                let r = self.sel(is_zero, signed_zero, r, vt);
                let nan = self.splat_f(vt, f64::NAN);
                let seen = self.b.ins().bitcast(ity, flags, seen);
                self.sel(seen, nan, r, vt)
            })
            .collect()
    }

    /// The accessors that move along the innermost dim (byte pointers with
    /// a non-zero inner stride): their variables, current positions and
    /// bytes per element.
    fn moving(&mut self, accs: &[Accessor]) -> Vec<(Variable, Value, i64)> {
        let rank = self.k.dims.len();
        accs.iter()
            .filter(|(_, _, strides, esize)| rank > 0 && strides[rank - 1] != 0 && *esize != 0)
            .map(|(key, _, strides, esize)| {
                let var = self.pos[key];
                (var, self.b.use_var(var), strides[rank - 1] * esize)
            })
            .collect()
    }

    /// Sets the moving accessors to element `j` past their positions
    /// `start` (from [`Self::moving`]). A chunk pass places them from its
    /// loop index instead of carrying them: values live across a call are
    /// spilled, and a pointer carried through the loop in its spill slot
    /// made every iteration wait on the previous one's store.
    fn place(&mut self, start: &[(Variable, Value, i64)], j: Value) {
        for (var, base, bytes) in start {
            // A shift for element sizes, so that the add folds into the
            // loads' and stores' addressing.
            let off = match bytes {
                1 | 2 | 4 | 8 => self
                    .b
                    .ins()
                    .ishl_imm_s(j, i64::from(bytes.trailing_zeros())),
                _ => self.b.ins().imul_imm_s(j, *bytes),
            };
            let p = self.b.ins().iadd(*base, off);
            self.b.def_var(*var, p);
        }
    }

    /// Advances the moving accessors by `elems` elements of the innermost dim.
    fn advance(&mut self, accs: &[Accessor], elems: i64) {
        let rank = self.k.dims.len();
        for (key, _, strides, esize) in accs {
            let st = if rank == 0 { 0 } else { strides[rank - 1] };
            if st != 0 && *esize != 0 {
                let var = self.pos[key];
                let p = self.b.use_var(var);
                let p = self.b.ins().iadd_imm_s(p, st * esize * elems);
                self.b.def_var(var, p);
            }
        }
    }

    /// The fused row (`wide::tl_wide_row_*`) this kernel's innermost loop
    /// is, if any: with wide math on, a row of `f(x)`, `f(x - s)`,
    /// `f(x + s)` or `f(x · s)` for a function with a row routine, `x` an
    /// f32 (f64) load contiguous along the row and `s` fixed for the row (a
    /// load or a constant), stored (a loop) or summed (a row sum, its
    /// values possibly stashed), or `x / s`, or the max of a row `x`. One
    /// call per row then does what the chunk passes of `wide_chunks` (or
    /// the 128-bit max loop) do, in one AVX-512 (AVX2) loop.
    fn fused_row(&self, vt: Type, n: usize) -> Option<FusedRow> {
        let dtype = match vt {
            types::F32X4 => DType::F32,
            types::F64X2 => DType::F64,
            _ => return None,
        };
        if !self.opts.wide_math || self.opts.exact || n < WIDE_MIN_ROW || !has_fma() {
            return None;
        }
        wide::lanes()?;
        let k = self.k;
        let rank = k.dims.len();
        if rank == 0 || k.nodes.iter().any(|node| node.dtype() != dtype) {
            return None;
        }
        let inner = |s: &[i64]| s[rank - 1];
        let is_row =
            |i: usize| matches!(&k.nodes[i], ENode::Load { strides, .. } if inner(strides) == 1);
        let is_fixed = |i: usize| match &k.nodes[i] {
            ENode::Load { strides, .. } => inner(strides) == 0,
            ENode::Const(l) => matches!(l.element(0), Scalar::Float(..)),
            ENode::Iota { .. }
            | ENode::Unary(..)
            | ENode::Binary(..)
            | ENode::Compare(..)
            | ENode::Select(..)
            | ENode::Clamp(..)
            | ENode::Convert(..)
            | ENode::Bitcast(..) => false,
        };
        // A row max (the first kernel of a softmax): the row itself.
        if let KernelKind::Reduce {
            op: ReduceOp::Max,
            reduced,
        } = &k.kind
        {
            let plain = reduced[rank - 1] && k.nodes.len() == 1 && k.stash.is_none();
            return (plain && is_row(k.root)).then_some(FusedRow {
                op: RowOp::Max,
                src: k.root,
                pre: Pre::None,
                dst: None,
                ahead: None,
            });
        }
        let (op, t) = match k.nodes[k.root] {
            ENode::Unary(op, t, _) if wide::has_row_routine(op) => (RowOp::Map(op), t),
            // A row divided by a value fixed for it (the last kernel of a
            // softmax), as `t / s`.
            ENode::Binary(BinaryOp::Div, x, s, _) if is_row(x) && is_fixed(s) => {
                (RowOp::Div, k.root)
            }
            ENode::Load { .. }
            | ENode::Const(_)
            | ENode::Iota { .. }
            | ENode::Unary(..)
            | ENode::Binary(..)
            | ENode::Compare(..)
            | ENode::Select(..)
            | ENode::Clamp(..)
            | ENode::Convert(..)
            | ENode::Bitcast(..) => return None,
        };
        let (src, pre) = if matches!(op, RowOp::Div) {
            match k.nodes[t] {
                ENode::Binary(_, x, s, _) => (x, Pre::Div(s)),
                ENode::Load { .. }
                | ENode::Const(_)
                | ENode::Iota { .. }
                | ENode::Unary(..)
                | ENode::Compare(..)
                | ENode::Select(..)
                | ENode::Clamp(..)
                | ENode::Convert(..)
                | ENode::Bitcast(..) => return None,
            }
        } else if is_row(t) {
            (t, Pre::None)
        } else {
            match k.nodes[t] {
                ENode::Binary(BinaryOp::Sub, x, s, _) if is_row(x) && is_fixed(s) => {
                    (x, Pre::Sub(s))
                }
                ENode::Binary(op @ (BinaryOp::Add | BinaryOp::Mul), x, y, _) => {
                    let (x, s) = if is_row(x) && is_fixed(y) {
                        (x, y)
                    } else if is_row(y) && is_fixed(x) {
                        (y, x)
                    } else {
                        return None;
                    };
                    (
                        x,
                        if op == BinaryOp::Add {
                            Pre::Add(s)
                        } else {
                            Pre::Mul(s)
                        },
                    )
                }
                ENode::Load { .. }
                | ENode::Const(_)
                | ENode::Iota { .. }
                | ENode::Unary(..)
                | ENode::Binary(..)
                | ENode::Compare(..)
                | ENode::Select(..)
                | ENode::Clamp(..)
                | ENode::Convert(..)
                | ENode::Bitcast(..) => return None,
            }
        };
        let used = match pre {
            Pre::None => 2,
            Pre::Div(_) => 3,
            Pre::Sub(_) | Pre::Add(_) | Pre::Mul(_) => 4,
        };
        if k.nodes.len() != used {
            return None;
        }
        // Where the values go: the output row (a loop) or the stash (a row
        // sum), contiguous.
        let dst = match &k.kind {
            KernelKind::Loop if inner(&k.out_strides) == 1 && k.stash.is_none() => {
                Some((OUT, k.out, &k.out_strides))
            }
            KernelKind::Reduce {
                op: ReduceOp::Sum,
                reduced,
            } if reduced[rank - 1] => match &k.stash {
                None => None,
                Some(st) if st.node == k.root && inner(&st.strides) == 1 => {
                    Some((STASH, st.slot, &st.strides))
                }
                Some(_) => return None,
            },
            KernelKind::Loop | KernelKind::Reduce { .. } => return None,
        };
        // The row may be read from the very elements it is written to (an
        // in-place update), not from others of that buffer.
        let ENode::Load {
            slot,
            offset,
            strides,
            ..
        } = &k.nodes[src]
        else {
            return None;
        };
        if *slot == k.out && !matches!(k.kind, KernelKind::Loop) {
            return None;
        }
        if let Some((_, dslot, dstrides)) = dst
            && *slot == dslot
            && (*offset != 0 || strides != dstrides)
        {
            return None;
        }
        Some(FusedRow {
            op,
            src,
            pre,
            dst: dst.map(|(key, _, _)| key),
            ahead: self.prefetch_distance(*slot, strides),
        })
    }

    /// In a row group (a block of rows at a time through every kernel),
    /// a later kernel that reads a row of a buffer the group's first
    /// kernel also reads, and no kernel of the group writes, prefetches the
    /// same row of the next block: the bytes to it (`block` rows on). The
    /// first kernel then finds its rows in L2 instead of waiting on memory
    /// (softmax: the row max reads `x`, the exp row prefetches it; 1.2 →
    /// 0.9 ms, docs/benchmarks.md).
    fn prefetch_distance(&self, slot: usize, strides: &[i64]) -> Option<i64> {
        let plan = self.plan;
        let at = (plan.steps.iter())
            .position(|st| matches!(st, Step::Kernel(k) if std::ptr::eq(k, self.k)))?;
        let g = plan.groups.iter().find(|g| g.start < at && at < g.end)?;
        let kernels = || {
            plan.steps[g.start..g.end].iter().filter_map(|st| match st {
                Step::Kernel(k) => Some(k),
                Step::Gemm(_)
                | Step::Runtime { .. }
                | Step::Copy { .. }
                | Step::Label(_)
                | Step::Jump(_)
                | Step::BranchUnless { .. }
                | Step::Switch { .. } => None,
            })
        };
        let written =
            kernels().any(|k| k.out == slot || k.stash.as_ref().is_some_and(|st| st.slot == slot));
        let Step::Kernel(first) = &plan.steps[g.start] else {
            return None;
        };
        let first_reads = first
            .nodes
            .iter()
            .any(|n| matches!(n, ENode::Load { slot: s, .. } if *s == slot));
        let row = *strides.first()?;
        let esize = plan.slots[slot].dtype.size() as i64;
        (!written && first_reads && row > 0).then(|| row * g.block as i64 * esize)
    }

    /// The call of a fused row over the `count` elements of the current
    /// row; a sum folds into the row's accumulator `acc`.
    fn emit_fused_row(&mut self, fr: &FusedRow, count: Value, acc: Option<Variable>) -> Result<()> {
        let t = comp_ty(self.out_dtype());
        let fixed = |s: &mut Self, i: usize| -> Value {
            match &s.k.nodes[i] {
                ENode::Const(l) => s.const_value(l, Mode::Scalar).s(),
                ENode::Load { .. }
                | ENode::Iota { .. }
                | ENode::Unary(..)
                | ENode::Binary(..)
                | ENode::Compare(..)
                | ENode::Select(..)
                | ENode::Clamp(..)
                | ENode::Convert(..)
                | ENode::Bitcast(..) => {
                    let p = s.b.use_var(s.pos[&i]);
                    s.b.ins().load(t, trusted(), p, 0)
                }
            }
        };
        let (a, b) = match fr.pre {
            Pre::None => (self.fconst(t, 0.0), self.fconst(t, 1.0)),
            Pre::Sub(s) => (fixed(self, s), self.fconst(t, 1.0)),
            Pre::Add(s) => {
                let v = fixed(self, s);
                (self.b.ins().fneg(v), self.fconst(t, 1.0))
            }
            Pre::Mul(s) | Pre::Div(s) => (self.fconst(t, 0.0), fixed(self, s)),
        };
        let src = self.b.use_var(self.pos[&fr.src]);
        let dst = match fr.dst {
            Some(key) => self.b.use_var(self.pos[&key]),
            None => self.b.ins().iconst(self.ptr, 0),
        };
        let ahead = match fr.ahead {
            Some(bytes) => self.b.ins().iadd_imm_s(src, bytes),
            None => self.b.ins().iconst(self.ptr, 0),
        };
        let code = match fr.op {
            RowOp::Map(u) => u as i64,
            RowOp::Div => i64::from(wide::ROW_DIV),
            RowOp::Max => i64::from(wide::ROW_MAX),
        };
        let code = self.b.ins().iconst(types::I32, code);
        let row = if t == types::F64 {
            RtFn::WideRowF64
        } else {
            RtFn::WideRowF32
        };
        let r = self.call(row, &[code, src, count, a, b, dst, ahead])?[0];
        if let Some(a) = acc {
            let cur = self.b.use_var(a);
            let fold = match fr.op {
                RowOp::Max => ReduceOp::Max,
                RowOp::Map(_) | RowOp::Div => ReduceOp::Sum,
            };
            let v = self.reduce_op(fold, cur, r);
            self.b.def_var(a, v);
        }
        Ok(())
    }

    /// The nodes of a vectorized row evaluated by the wide routines
    /// (`crate::wide`): f32 or f64 functions that have one, where the
    /// host's vectors are wider than Cranelift's and the row is long enough
    /// for a call per chunk not to matter.
    fn wide_nodes(&self, vt: Type, n: usize) -> Option<Vec<usize>> {
        let float = vt == types::F32X4 || vt == types::F64X2;
        if !self.opts.wide_math || self.opts.exact || !float || n < WIDE_MIN_ROW {
            return None;
        }
        wide::lanes()?;
        if !has_fma() {
            return None;
        }
        let max = wide::MAX_BUFFER_BYTES / (wide::CHUNK * vt.lane_type().bytes() as usize);
        let mut used = 0;
        let nodes: Vec<usize> = (self.k.nodes.iter().enumerate())
            .filter(|(_, node)| wide_eligible(node, |x| self.dtype_of(x)))
            .filter(|(_, node)| {
                used += wide_buffers(node);
                used <= max
            })
            .map(|(i, _)| i)
            .collect();
        (!nodes.is_empty()).then_some(nodes)
    }

    /// The vector loop of a row with wide nodes, over chunks of up to
    /// `wide::CHUNK` elements (whole vectors; the scalar tail follows).
    /// Per chunk, in order of depth (wide nodes feeding others first): a
    /// 128-bit pass stores the arguments of the wide nodes into a stack
    /// buffer each, one `tl_wide_f32` call per node maps its buffer in
    /// place; then the row's own pass evaluates the rest, reading the wide
    /// nodes' values from their buffers. Each pass re-reads the chunk's
    /// inputs from the accessors' positions at the chunk's start. Returns
    /// the element index the loop stopped at.
    fn wide_chunks(
        &mut self,
        wide: &[usize],
        nv: Value,
        vt: Type,
        vaccs: &[Variable],
        accs: &[Accessor],
    ) -> Result<Value> {
        let k = self.k;
        let lanes = vt.lane_count() as i64;
        // Depth: the number of wide nodes on the longest path to a node.
        let mut depth = vec![0usize; k.nodes.len()];
        for (i, node) in k.nodes.iter().enumerate() {
            let d = (crate::fusion::enode_operands(node).iter())
                .map(|o| depth[*o])
                .max()
                .unwrap_or(0);
            depth[i] = d + usize::from(wide.contains(&i));
        }
        let esize = vt.lane_type().bytes();
        let buf_bytes = wide::CHUNK as u32 * esize;
        // Each wide node's buffers, one after another (a binary node's
        // second operand in its second buffer).
        let mut starts = Vec::with_capacity(wide.len());
        let mut total = 0u32;
        for w in wide {
            starts.push(total);
            total += buf_bytes * wide_buffers(&k.nodes[*w]) as u32;
        }
        let slot = self.b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            total,
            6,
        ));
        let offset = |w: usize| {
            let j = wide.iter().position(|x| *x == w).unwrap_or(0);
            starts[j] as i32
        };
        let base = self.b.ins().stack_addr(self.ptr, slot, 0);
        let whole = self.b.ins().band_imm_s(nv, !(lanes - 1));
        let chunk = self.b.ins().iconst(types::I64, wide::CHUNK as i64);
        let code_of = |w: usize| match k.nodes[w] {
            ENode::Unary(u, ..) => u as i64,
            ENode::Load { .. }
            | ENode::Const(_)
            | ENode::Iota { .. }
            | ENode::Binary(..)
            | ENode::Compare(..)
            | ENode::Select(..)
            | ENode::Clamp(..)
            | ENode::Convert(..)
            | ENode::Bitcast(..) => 0,
        };
        // The operands stored into a wide node's buffers.
        let inputs_of = |w: usize| match k.nodes[w] {
            ENode::Unary(_, x, _) => vec![x],
            ENode::Binary(_, x, y, _) => vec![x, y],
            ENode::Load { .. }
            | ENode::Const(_)
            | ENode::Iota { .. }
            | ENode::Compare(..)
            | ENode::Select(..)
            | ENode::Clamp(..)
            | ENode::Convert(..)
            | ENode::Bitcast(..) => vec![],
        };
        let header = self.b.create_block();
        let body = self.b.create_block();
        let exit = self.b.create_block();
        self.b.append_block_param(header, types::I64);
        let zero = self.b.ins().iconst(types::I64, 0);
        self.b.ins().jump(header, &[zero.into()]);
        self.b.switch_to_block(header);
        let i = self.b.block_params(header)[0];
        let more = self.b.ins().icmp(IntCC::SignedLessThan, i, whole);
        self.b.ins().brif(more, body, &[], exit, &[]);
        self.b.switch_to_block(body);
        self.b.seal_block(body);
        let rest = self.b.ins().isub(whole, i);
        let len = self.b.ins().smin(rest, chunk);
        let start = self.moving(accs);
        // Vector accumulators go through memory around the calls: every
        // vector register is clobbered by a call, and an accumulator live
        // across one was otherwise kept in a stack slot for the whole final
        // pass, each add waiting on the previous one's store.
        let acc_slot = self.b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            16 * vaccs.len() as u32,
            4,
        ));
        for (j, va) in vaccs.iter().enumerate() {
            let v = self.b.use_var(*va);
            self.b
                .ins()
                .stack_store(self.ptr, v, acc_slot, 16 * j as i32);
        }
        let max_depth = wide.iter().map(|w| depth[*w]).max().unwrap_or(0);
        for level in 1..=max_depth {
            let here: Vec<usize> = wide
                .iter()
                .copied()
                .filter(|w| depth[*w] == level)
                .collect();
            let done: Vec<usize> = wide.iter().copied().filter(|w| depth[*w] < level).collect();
            let roots: Vec<usize> = here.iter().flat_map(|w| inputs_of(*w)).collect();
            let need = self.needed(&roots, &done);
            let bufs = done.iter().map(|w| (*w, offset(*w))).collect();
            let pass = ChunkPass {
                len,
                start: &start,
                base,
                bufs,
                need,
            };
            self.chunk_pass(vt, &pass, &mut |s, addr, _| {
                let vals = s.eval(Mode::Vector(vt))?;
                for w in &here {
                    for (j, x) in inputs_of(*w).into_iter().enumerate() {
                        let v = vals[x].s();
                        let off = offset(*w) + (j as u32 * buf_bytes) as i32;
                        s.b.ins().store(trusted(), v, addr, off);
                    }
                }
                Ok(())
            })?;
            for w in &here {
                let p = self.b.ins().iadd_imm_s(base, i64::from(offset(*w)));
                if let ENode::Binary(..) = k.nodes[*w] {
                    self.call(RtFn::WidePowF64, &[p, len])?;
                    continue;
                }
                let code = self.b.ins().iconst(types::I32, code_of(*w));
                let map = if esize == 8 {
                    RtFn::WideF64
                } else {
                    RtFn::WideF32
                };
                self.call(map, &[code, p, len])?;
            }
        }
        for (j, va) in vaccs.iter().enumerate() {
            let v = self
                .b
                .ins()
                .stack_load(self.ptr, vt, acc_slot, 16 * j as i32);
            self.b.def_var(*va, v);
        }
        let mut roots = vec![k.root];
        roots.extend(k.stash.as_ref().map(|st| st.node));
        let need = self.needed(&roots, wide);
        let pass = ChunkPass {
            len,
            start: &start,
            base,
            bufs: wide.iter().map(|w| (*w, offset(*w))).collect(),
            need,
        };
        // Vector `c` of an iteration folds into accumulator `c`.
        let m = if self.float_extreme().is_some() {
            vaccs.len().saturating_sub(2)
        } else {
            vaccs.len()
        };
        self.chunk_pass(vt, &pass, &mut |s, _, c| {
            let mut own: Vec<Variable> = vaccs.to_vec();
            if m > 1 {
                own.swap(0, c);
            }
            s.vector_step(vt, lanes, 1, &own, accs)
        })?;
        self.place(&start, len);
        let next = self.b.ins().iadd(i, len);
        self.b.ins().jump(header, &[next.into()]);
        self.b.seal_block(header);
        self.b.switch_to_block(exit);
        self.b.seal_block(exit);
        Ok(whole)
    }

    /// One 128-bit pass over a chunk of a wide row: per vector, the
    /// accessors placed at its element `j`, `eval` set up for the pass, and
    /// `body` called with the chunk buffers' address at `j`.
    fn chunk_pass(
        &mut self,
        vt: Type,
        pass: &ChunkPass<'_>,
        body: &mut dyn FnMut(&mut Self, Value, usize) -> Result<()>,
    ) -> Result<()> {
        let lanes = vt.lane_count() as i64;
        // Two vectors per iteration (halves the loop's own instructions),
        // then the odd one.
        let mut from = None;
        for copies in [2, 1] {
            let last = self.for_loop_from(from, pass.len, copies * lanes, &mut |s, j| {
                for c in 0..copies {
                    let j = if c == 0 {
                        j
                    } else {
                        s.b.ins().iadd_imm_s(j, c * lanes)
                    };
                    s.place(pass.start, j);
                    let shift = i64::from(vt.lane_type().bytes().trailing_zeros());
                    let bytes = s.b.ins().ishl_imm_s(j, shift);
                    let addr = s.b.ins().iadd(pass.base, bytes);
                    s.wide = Some(WideCtx {
                        addr,
                        bufs: pass.bufs.clone(),
                        need: pass.need.clone(),
                    });
                    let r = body(s, addr, c as usize);
                    s.wide = None;
                    r?;
                }
                Ok(())
            })?;
            from = Some(last);
        }
        Ok(())
    }

    /// The nodes `roots` depend on, not looking past the nodes of `known`
    /// (whose values are read from their buffers).
    fn needed(&self, roots: &[usize], known: &[usize]) -> Vec<bool> {
        let mut need = vec![false; self.k.nodes.len()];
        let mut stack = roots.to_vec();
        while let Some(i) = stack.pop() {
            if std::mem::replace(&mut need[i], true) || known.contains(&i) {
                continue;
            }
            stack.extend(crate::fusion::enode_operands(&self.k.nodes[i]));
        }
        need
    }

    fn load_slot(&self, node: usize) -> usize {
        match &self.k.nodes[node] {
            ENode::Load { slot, .. } => *slot,
            ENode::Const(_)
            | ENode::Iota { .. }
            | ENode::Unary(..)
            | ENode::Binary(..)
            | ENode::Compare(..)
            | ENode::Select(..)
            | ENode::Clamp(..)
            | ENode::Convert(..)
            | ENode::Bitcast(..) => self.k.out,
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
        // 32-bit lanes (pmullw/pmulld), min/max up to 32 bits; 64-bit lanes
        // multiply (AVX-512DQ's vpmullq, else Cranelift's pmuludq sequence)
        // and min/max with AVX-512VL (vpminsq/vpmaxuq...).
        let wide64 = dt.size() == 8 && wide::has_avx512();
        let int_mul =
            matches!(dt, DType::I16 | DType::U16 | DType::I32 | DType::U32) || (wide64 && !float);
        let min_max = float || dt.size() <= 4 || wide64;
        if let KernelKind::Reduce { op, reduced } = &self.k.kind {
            let ok = match op {
                ReduceOp::Sum => !float || !exact || !reduced[rank - 1],
                ReduceOp::Prod => (float && (!exact || !reduced[rank - 1])) || int_mul,
                ReduceOp::Max | ReduceOp::Min => min_max,
                ReduceOp::And | ReduceOp::Or => false,
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
                    u @ (ENode::Load { .. }
                    | ENode::Const(_)
                    | ENode::Iota { .. }
                    | ENode::Unary(..)
                    | ENode::Binary(..)
                    | ENode::Compare(..)
                    | ENode::Clamp(..)
                    | ENode::Convert(..)
                    | ENode::Bitcast(..)) => !crate::fusion::enode_operands(u).contains(&i),
                })
        };
        // A load of another 32-bit type feeds conversions only (loaded as
        // its own 4-lane vector; see `vector_convert`).
        let converted_only = |i: usize| {
            i != self.k.root
                && self.k.stash.as_ref().is_none_or(|st| st.node != i)
                && self.k.nodes.iter().all(|u| match u {
                    ENode::Convert(..) => true,
                    u @ (ENode::Load { .. }
                    | ENode::Const(_)
                    | ENode::Iota { .. }
                    | ENode::Unary(..)
                    | ENode::Binary(..)
                    | ENode::Compare(..)
                    | ENode::Select(..)
                    | ENode::Clamp(..)
                    | ENode::Bitcast(..)) => !crate::fusion::enode_operands(u).contains(&i),
                })
        };
        for (i, n) in self.k.nodes.iter().enumerate() {
            if let ENode::Compare(_, _, _, d) = n {
                let lanes_cmp = float || dt.size() <= 4 || has_sse42();
                if *d != dt || !lanes_cmp || !mask_only(i) {
                    return None;
                }
                continue;
            }
            if let ENode::Convert(x, from, to) = n {
                if *to != dt || self.dtype_of(*x) != *from || !vector_convert(*from, *to) {
                    return None;
                }
                continue;
            }
            if let ENode::Load { dtype, strides, .. } = n
                && *dtype != dt
            {
                if !vector_convert(*dtype, dt)
                    || !matches!(strides[rank - 1], 0 | 1)
                    || !converted_only(i)
                {
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
                        UnaryOp::Sign => float,
                        UnaryOp::Square => float || int_mul,
                        // pabsb/w/d; unsigned abs is the identity.
                        UnaryOp::Abs => float || dt.size() <= 4 || !dt.is_signed_int() || wide64,
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
                        UnaryOp::Not | UnaryOp::IsFinite => false,
                    },
                    ENode::Binary(b, _, _, _) => match b {
                        BinaryOp::Add | BinaryOp::Sub => true,
                        BinaryOp::Mul => float || int_mul,
                        BinaryOp::Div => float,
                        BinaryOp::Pow => {
                            (dt == DType::F32 || (dt == DType::F64 && has_fma())) && !exact
                        }
                        BinaryOp::Max | BinaryOp::Min => min_max,
                        BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => !float,
                        // Cranelift's vector shifts take one amount for
                        // every lane; per-lane amounts stay scalar.
                        BinaryOp::ShiftLeft
                        | BinaryOp::ShiftRightLogical
                        | BinaryOp::ShiftRightArithmetic => false,
                        BinaryOp::Rem => false,
                    },
                    ENode::Clamp(..) => float,
                    ENode::Select(..) => true,
                    // Its operand's lanes are of another type (the lane
                    // count would differ for no gain); scalar code.
                    ENode::Bitcast(..) => false,
                    ENode::Iota { .. } | ENode::Compare(..) | ENode::Convert(..) => false,
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
            self.b.ins().f32const(tensorlift_ir::narrow_f32(v))
        } else {
            self.b.ins().f64const(v)
        }
    }

    fn reduce_op(&mut self, op: ReduceOp, a: Value, x: Value) -> Value {
        let d = self.out_dtype();
        if d.is_float() && matches!(op, ReduceOp::Max | ReduceOp::Min) {
            let r = if op == ReduceOp::Max {
                self.b.ins().fmax(a, x)
            } else {
                self.b.ins().fmin(a, x)
            };
            let ty = self.b.func.dfg.value_type(r);
            return self.canonical_nan(r, ty);
        }
        let ins = self.b.ins();
        match op {
            ReduceOp::Sum if d.is_float() => ins.fadd(a, x),
            ReduceOp::Prod if d.is_float() => ins.fmul(a, x),
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
                let bits = self.call(RtFn::F32ToF16, &[x])?[0];
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
                V::S(self.call(RtFn::F16ToF32, &[w])?[0])
            }
            DType::BF16 => {
                let h = self.b.ins().load(types::I16, trusted(), p, 0);
                V::S(self.bf16_to_f32(h))
            }
            DType::Bool
            | DType::I8
            | DType::I16
            | DType::I32
            | DType::I64
            | DType::U8
            | DType::U16
            | DType::U32
            | DType::U64
            | DType::F32
            | DType::F64
            | DType::String => V::S(self.b.ins().load(comp_ty(d), trusted(), p, 0)),
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
                let bits = self.call(RtFn::F32ToF16, &[x])?[0];
                self.call(RtFn::F16ToF32, &[bits])?[0]
            }
            DType::BF16 => {
                let bits = self.call(RtFn::F32ToBf16, &[x])?[0];
                let h = self.b.ins().ireduce(types::I16, bits);
                self.bf16_to_f32(h)
            }
            DType::Bool
            | DType::I8
            | DType::I16
            | DType::I32
            | DType::I64
            | DType::U8
            | DType::U16
            | DType::U32
            | DType::U64
            | DType::F32
            | DType::F64
            | DType::C64
            | DType::C128
            | DType::String => x,
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

    /// A vector of `vt`'s lane count loaded from `p + off` as `dtype`
    /// elements: that type's vector, or for the float widths the elements
    /// converted as they are read (f32 → f64: two f32 and `cvtps2pd`;
    /// f64 → f32: two f64 vectors, `cvtpd2ps` each, halves joined).
    fn vector_load(&mut self, dtype: DType, vt: Type, p: Value, off: i32) -> Value {
        // (Bitcasts between lane counts name the byte order.)
        let flags = MemFlagsData::new().with_endianness(cranelift_codegen::ir::Endianness::Little);
        match (dtype, vt) {
            (DType::F32, types::F64X2) => {
                let w = self.b.ins().load(types::I64, unaligned(), p, off);
                let v = self.b.ins().scalar_to_vector(types::I64X2, w);
                let v = self.b.ins().bitcast(types::F32X4, flags, v);
                self.b.ins().fvpromote_low(v)
            }
            (DType::F64, types::F32X4) => {
                let a = self.b.ins().load(types::F64X2, unaligned(), p, off);
                let b = self.b.ins().load(types::F64X2, unaligned(), p, off + 16);
                let a = self.b.ins().fvdemote(a);
                let b = self.b.ins().fvdemote(b);
                let a = self.b.ins().bitcast(types::I64X2, flags, a);
                let b = self.b.ins().bitcast(types::I64X2, flags, b);
                let hi = self.b.ins().extractlane(b, 0);
                let v = self.b.ins().insertlane(a, hi, 1);
                self.b.ins().bitcast(types::F32X4, flags, v)
            }
            _ => {
                let lt = vec_ty(dtype).unwrap_or(vt);
                self.b.ins().load(lt, unaligned(), p, off)
            }
        }
    }

    /// Evaluates every node of the kernel at the current position.
    fn eval(&mut self, mode: Mode) -> Result<Vec<V>> {
        let nodes = self.k.nodes.clone();
        let mut vals: Vec<V> = Vec::with_capacity(nodes.len());
        let mut unused = None;
        for (i, n) in nodes.iter().enumerate() {
            // In a chunk pass of a wide row: nodes the pass does not need
            // get a placeholder, wide nodes already mapped are read back.
            if let (Some(w), Mode::Vector(vt)) = (&self.wide, mode) {
                if !w.need[i] {
                    let u = *unused.get_or_insert_with(|| self.b.ins().iconst(types::I8, 0));
                    vals.push(V::S(u));
                    continue;
                }
                if let Some(off) = w.bufs.get(&i) {
                    let (addr, off) = (w.addr, *off);
                    vals.push(V::S(self.b.ins().load(vt, trusted(), addr, off)));
                    continue;
                }
            }
            let v = match n {
                ENode::Load { dtype, .. } => match mode {
                    Mode::Vector(vt) => match self.hoisted.get(&i) {
                        Some(v) => V::S(*v),
                        None => {
                            let p = self.b.use_var(self.pos[&i]);
                            let off = (self.load_off * dtype.size() as i64) as i32;
                            // Another type's load only feeds conversions.
                            V::S(self.vector_load(*dtype, vt, p, off))
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
                        let r = self.b.ins().fmin(m, hi);
                        let ty = self.b.func.dfg.value_type(r);
                        self.canonical_nan(r, ty)
                    } else if d.is_signed_int() {
                        let m = self.b.ins().smax(x, lo);
                        self.b.ins().smin(m, hi)
                    } else {
                        let m = self.b.ins().umax(x, lo);
                        self.b.ins().umin(m, hi)
                    })
                }
                ENode::Convert(x, from, to) => self.convert(vals[*x], *from, *to)?,
                ENode::Bitcast(x, from, to) => self.bitcast(vals[*x], *from, *to)?,
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
            V::S(_) | V::C(..) => v,
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
            UnaryOp::Sign if is_float && ty.is_vector() => {
                // copysign(1, x) by bits (1.0's sign bit is clear), NaN and
                // ±0 kept, in lanes.
                let one = self.splat_f(ty, 1.0);
                let s = self.with_sign_of(one, x, ty);
                let zero = self.splat_f(ty, 0.0);
                // (x86 vectors have no unordered-or-equal compare.)
                let is_zero = self.b.ins().fcmp(FloatCC::Equal, x, zero);
                let is_nan = self.b.ins().fcmp(FloatCC::Unordered, x, x);
                let keep = self.b.ins().bor(is_zero, is_nan);
                self.sel(keep, x, s, ty)
            }
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
            UnaryOp::Exp
            | UnaryOp::Expm1
            | UnaryOp::Log
            | UnaryOp::Log1p
            | UnaryOp::Tanh
            | UnaryOp::Logistic
            | UnaryOp::Sin
            | UnaryOp::Cos
            | UnaryOp::Erf => {
                if matches!(mode, Mode::Vector(_)) {
                    return Err(Error::internal(format!(
                        "{} cannot be vectorized",
                        u.name()
                    )));
                }
                let code = self.b.ins().iconst(types::I32, u as i64);
                let libm = if ty == types::F32 {
                    RtFn::F32Un
                } else {
                    RtFn::F64Un
                };
                self.call(libm, &[code, x])?[0]
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

    /// `cond ? a : b` for scalars (`select`) and vectors (lane masks, `bitselect`).
    /// The mask is reinterpreted as `a`'s type, so float and integer lanes
    /// both work.
    /// `r`, or the canonical quiet NaN where `r` is a NaN: what `min`/`max`
    /// give for a NaN operand (the NaN policy; the interpreter's and the
    /// vector reductions').
    fn canonical_nan(&mut self, r: Value, ty: Type) -> Value {
        let nan = self.b.ins().fcmp(FloatCC::Unordered, r, r);
        let canon = self.splat_f(ty, f64::NAN);
        self.sel(nan, canon, r, ty)
    }

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
                let abs = if t == types::F32 {
                    RtFn::C64Abs
                } else {
                    RtFn::C128Abs
                };
                V::S(self.call(abs, &[re, im])?[0])
            }
            UnaryOp::Sign
            | UnaryOp::Floor
            | UnaryOp::Ceil
            | UnaryOp::Round
            | UnaryOp::Sqrt
            | UnaryOp::Rsqrt
            | UnaryOp::Exp
            | UnaryOp::Expm1
            | UnaryOp::Log
            | UnaryOp::Log1p
            | UnaryOp::Tanh
            | UnaryOp::Logistic
            | UnaryOp::Sin
            | UnaryOp::Cos
            | UnaryOp::Erf
            | UnaryOp::Not
            | UnaryOp::IsFinite
            | UnaryOp::Reciprocal => {
                let un = if t == types::F32 {
                    RtFn::C64Un
                } else {
                    RtFn::C128Un
                };
                self.call_complex(un, u as i64, t, &[re, im])?
            }
        })
    }

    /// Calls a complex runtime function `f(op, parts..., out)` that writes
    /// its (re, im) result to a stack slot, and loads the result.
    fn call_complex(&mut self, f: RtFn, op: i64, t: Type, parts: &[Value]) -> Result<V> {
        let slot =
            self.b
                .create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 16, 3));
        let p = self.b.ins().stack_addr(self.ptr, slot, 0);
        let code = self.b.ins().iconst(types::I32, op);
        let mut args = vec![code];
        args.extend_from_slice(parts);
        args.push(p);
        self.call(f, &args)?;
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
            BinaryOp::Max if f => {
                let r = self.b.ins().fmax(x, y);
                self.canonical_nan(r, ty)
            }
            BinaryOp::Min if f => {
                let r = self.b.ins().fmin(x, y);
                self.canonical_nan(r, ty)
            }
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
            BinaryOp::ShiftLeft | BinaryOp::ShiftRightLogical | BinaryOp::ShiftRightArithmetic
                if !f && !ty.is_vector() =>
            {
                self.shift(op, x, y, ty)
            }
            BinaryOp::Div | BinaryOp::Rem if !f => {
                self.int_divrem(op == BinaryOp::Div, s, x, y, ty)
            }
            BinaryOp::Pow if ty.lane_type() == types::F32 && !self.opts.exact => {
                self.pow_f32(x, y, ty)
            }
            BinaryOp::Pow if ty.lane_type() == types::F64 && !self.opts.exact && has_fma() => {
                self.pow_f64(x, y, ty)
            }
            BinaryOp::Rem | BinaryOp::Pow if f => {
                if matches!(mode, Mode::Vector(_)) {
                    return Err(Error::internal("rem/pow cannot be vectorized"));
                }
                let code = self.b.ins().iconst(types::I32, op as i64);
                let libm = if ty == types::F32 {
                    RtFn::F32Bin
                } else {
                    RtFn::F64Bin
                };
                self.call(libm, &[code, x, y])?[0]
            }
            BinaryOp::Pow => {
                let pow = match d {
                    DType::I8 => RtFn::PowI8,
                    DType::I16 => RtFn::PowI16,
                    DType::I32 => RtFn::PowI32,
                    DType::I64 => RtFn::PowI64,
                    DType::U8 => RtFn::PowU8,
                    DType::U16 => RtFn::PowU16,
                    DType::U32 => RtFn::PowU32,
                    DType::U64 => RtFn::PowU64,
                    DType::Bool
                    | DType::F16
                    | DType::BF16
                    | DType::F32
                    | DType::F64
                    | DType::C64
                    | DType::C128
                    | DType::String => {
                        return Err(Error::internal(format!(
                            "integer pow on {d} reached code generation"
                        )));
                    }
                };
                self.call(pow, &[x, y])?[0]
            }
            BinaryOp::Div
            | BinaryOp::Rem
            | BinaryOp::ShiftLeft
            | BinaryOp::ShiftRightLogical
            | BinaryOp::ShiftRightArithmetic => {
                return Err(Error::internal(format!(
                    "{} on {d} reached code generation",
                    op.name()
                )));
            }
        }))
    }

    /// An integer shift with XLA's out-of-range rule (the interpreter's, in
    /// `kernels::scalar`): Cranelift masks the amount to the lane width, so
    /// an amount of `bits` or more (read as unsigned) is caught first and
    /// gives 0, or for an arithmetic shift the sign bit in every bit.
    fn shift(&mut self, op: BinaryOp, x: Value, y: Value, ty: Type) -> Value {
        let bits = self.ic(ty, i64::from(ty.lane_bits()));
        let in_range = self.b.ins().icmp(IntCC::UnsignedLessThan, y, bits);
        if op == BinaryOp::ShiftRightArithmetic {
            let top = self.ic(ty, i64::from(ty.lane_bits()) - 1);
            let amount = self.b.ins().select(in_range, y, top);
            return self.b.ins().sshr(x, amount);
        }
        let r = if op == BinaryOp::ShiftLeft {
            self.b.ins().ishl(x, y)
        } else {
            self.b.ins().ushr(x, y)
        };
        let z = self.ic(ty, 0);
        self.b.ins().select(in_range, r, z)
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
            BinaryOp::Rem
            | BinaryOp::Pow
            | BinaryOp::Max
            | BinaryOp::Min
            | BinaryOp::And
            | BinaryOp::Or
            | BinaryOp::Xor
            | BinaryOp::ShiftLeft
            | BinaryOp::ShiftRightLogical
            | BinaryOp::ShiftRightArithmetic => {
                let t = comp_ty(d);
                let bin = if t == types::F32 {
                    RtFn::C64Bin
                } else {
                    RtFn::C128Bin
                };
                self.call_complex(bin, op as i64, t, &[a, b, c, e])?
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

    /// Reads `x`'s bits as `to` (same size; halves never reach here, see
    /// `fusion::fusible`). Integers of one width share a Cranelift type, so
    /// between them (and from a complex type to itself) nothing is emitted.
    fn bitcast(&mut self, x: V, from: DType, to: DType) -> Result<V> {
        let tt = comp_ty(to);
        match x {
            _ if from == to => Ok(x),
            V::S(v) if !from.is_half() && !to.is_half() => {
                if self.b.func.dfg.value_type(v) == tt {
                    Ok(x)
                } else {
                    Ok(V::S(self.b.ins().bitcast(tt, MemFlagsData::new(), v)))
                }
            }
            V::S(_) | V::C(..) => Err(Error::internal(format!(
                "a bitcast_convert from {from} to {to} reached code generation"
            ))),
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
        if xt.is_vector() {
            // Only what `vector_convert` allows reaches here in vector mode.
            return Ok(V::S(match (from, to) {
                (DType::I32, DType::F32) => self.b.ins().fcvt_from_sint(types::F32X4, x),
                (DType::U32, DType::F32) => self.b.ins().fcvt_from_uint(types::F32X4, x),
                (DType::F32, DType::I32) => self.b.ins().fcvt_to_sint_sat(types::I32X4, x),
                (DType::F32, DType::U32) => self.b.ins().fcvt_to_uint_sat(types::I32X4, x),
                (DType::I32 | DType::U32, DType::I32 | DType::U32) => x,
                // Converted by the load (`vector_load`).
                (DType::F32, DType::F64) | (DType::F64, DType::F32) => x,
                _ => {
                    return Err(Error::internal(format!(
                        "a vector conversion from {from} to {to}"
                    )));
                }
            }));
        }
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
                let round = match (xt == types::F64, to == DType::F16) {
                    (true, true) => RtFn::F64ToF16,
                    (true, false) => RtFn::F64ToBf16,
                    (false, true) => RtFn::F32ToF16,
                    (false, false) => RtFn::F32ToBf16,
                };
                let bits = self.call(round, &[x])?[0];
                return Ok(V::S(if to == DType::F16 {
                    self.call(RtFn::F16ToF32, &[bits])?[0]
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
