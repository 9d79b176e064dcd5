//! Cranelift code generation: one function per fused kernel plus a `main`
//! that runs the steps in order, calling kernels directly and runtime
//! symbols (GEMM, runtime kernels) through imports.
//!
//! Kernel ABI: `extern "C" fn(bufs: *const *mut u8, ctx: *mut CallCtx,
//! begin: i64, end: i64) -> i32` where `bufs[s]` is the address of slot
//! `s` and `[begin, end)` the range of the outermost loop dim; the result
//! is a status (0 = ok). `main` has the same signature without the range.
//!
//! `driver` builds the module and `main`; a kernel is its loop nest
//! (`loops`), its reduction (`reduce`), its wide rows (`wide_rows`) and
//! its nodes lowered one by one (`lower`, with the approximations of
//! `math`; a lowering also says which forms have vector code, by refusing
//! the others); `target` says what the host has, `cost` what a kernel
//! costs. `native` emits the plain loops of f32 functions that qualify as
//! AVX-512 or AVX2 machine code instead, with the same ABI, and
//! `transpose` the 16×16 tiled copies of 4- and 8-byte elements as AVX-512
//! code.

use std::collections::HashMap;

use cranelift_codegen::ir::{
    ExtFuncData, ExternalName, InstBuilder, MemFlagsData, Type, Value, types,
};
use cranelift_codegen::isa::CallConv;
use cranelift_frontend::{FunctionBuilder, Variable};
use cranelift_jit::JITModule;
use cranelift_module::Module;
use tensorlift_ir::{DType, Error, Result};

use crate::fusion::{ENode, Kernel, Plan, SlotId};
use crate::rt::RtFn;

mod columns;
mod cost;
pub(crate) mod direct;
mod driver;
mod loops;
mod lower;
pub(crate) mod math;
mod native;
mod reduce;
mod target;
mod transpose;
mod wide_rows;

pub(crate) use cost::{kernel_work, splittable};
use driver::Helpers;
pub(crate) use driver::{Clif, Main, generate};

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
    /// reordered floating-point reductions, divisions by broadcast values
    /// divided (not products with reciprocals), denormals kept.
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
    /// as the inline 128-bit code (with denormals kept; flushed, one may
    /// pass a denormal operand through where the other gives zero); off,
    /// every row uses the inline code.
    pub wide_math: bool,
    /// Flush denormal (subnormal) floating-point values to zero while the
    /// code runs, results and operands alike (x86-64's FTZ and DAZ), as
    /// XLA's CPU code does: on Intel cores an operation that meets a
    /// denormal costs about a hundred cycles more, and a gradient that
    /// vanishes through a long loop meets millions of them (see
    /// `docs/compiler.md`, "Denormals"). Ignored in exact mode; elsewhere
    /// than on x86-64 nothing is flushed. The caller's own mode is back
    /// when the call returns, and callbacks run in it.
    pub flush_denormals: bool,
}

impl Default for JitOptions {
    fn default() -> Self {
        JitOptions {
            opt_level: OptLevel::Speed,
            exact: false,
            vectorize: true,
            threads: true,
            wide_math: true,
            flush_denormals: true,
        }
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

fn trusted() -> MemFlagsData {
    MemFlagsData::trusted()
}

fn unaligned() -> MemFlagsData {
    MemFlagsData::new().with_notrap()
}

/// `fcmp cc, x, y`, every float comparison the code generator emits. On a
/// host without AVX (or capped below it), Cranelift 0.135 lowers a vector
/// compare to the legacy SSE `cmpps`/`cmppd` and may fold a load of an
/// operand into it, whose memory operand must then be 16-byte aligned
/// (its assembler declares it as any other, unlike `addps`'s): a compare
/// reading a row that starts off a 16-byte boundary faulted. Vector
/// operands there go through a no-op `bitcast` pair, which leaves them
/// in registers (a load folds only into its direct user).
fn fcmp(
    b: &mut FunctionBuilder<'_>,
    cc: cranelift_codegen::ir::condcodes::FloatCC,
    x: Value,
    y: Value,
) -> Value {
    let ty = b.func.dfg.value_type(x);
    if !ty.is_vector() || crate::isa::has_avx() {
        return b.ins().fcmp(cc, x, y);
    }
    let int = ty.as_int();
    let flags = MemFlagsData::new().with_endianness(cranelift_codegen::ir::Endianness::Little);
    let mut in_register = |v: Value| {
        let i = b.ins().bitcast(int, flags, v);
        b.ins().bitcast(ty, flags, i)
    };
    let (x, y) = (in_register(x), in_register(y));
    b.ins().fcmp(cc, x, y)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Scalar,
    Vector(Type),
}

/// Why a node was not lowered.
#[derive(Debug)]
enum LowerError {
    /// In `Mode::Vector`: the lowering has no vector code for this form
    /// (op, dtype, options, host features). `vector_type` finds out by a
    /// dry run of the lowering and leaves such a row scalar.
    NoVectorForm,
    /// Any other failure.
    Failed(Error),
}

/// A lowering's result.
type Lowered<T> = std::result::Result<T, LowerError>;

impl From<Error> for LowerError {
    fn from(e: Error) -> Self {
        LowerError::Failed(e)
    }
}

impl From<LowerError> for Error {
    fn from(e: LowerError) -> Self {
        match e {
            // `vector_type` ran the same lowering before choosing vectors.
            LowerError::NoVectorForm => {
                Error::internal("a node without a vector form in a vectorized row")
            }
            LowerError::Failed(e) => e,
        }
    }
}

/// `Ok(())` where `has`, else `NoVectorForm`: for a lowering arm whose
/// instruction exists for some lane types only (`target::has_imul` and the
/// like, true for scalars).
fn needs(has: bool) -> Lowered<()> {
    if has {
        Ok(())
    } else {
        Err(LowerError::NoVectorForm)
    }
}

/// Where a kernel's calls of runtime functions go.
enum Imports<'a> {
    /// The module: each function declared as an import on first use.
    Module(&'a mut JITModule, &'a mut Helpers),
    /// Nowhere (`vector_type`'s dry run): a stand-in of the same signature,
    /// so that the module declares nothing the kernel does not call.
    DryRun(CallConv),
}

struct KernelGen<'a, 'b> {
    b: &'a mut FunctionBuilder<'b>,
    imports: Imports<'a>,
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
    /// Per node: a load only gathers read as their index
    /// (`loops::gather_indices`).
    gather_index: Vec<bool>,
    /// Element offset applied to vector loads (unrolled copies).
    load_off: i64,
    /// `[begin, end)` of the outermost dim, for split kernels.
    range: Option<(Value, Value)>,
    /// Set during the passes of a chunk of a wide row (`wide_chunks`).
    wide: Option<WideCtx>,
    /// Slots held in `main`'s variables (inline kernels only, see
    /// `driver::register_slots`).
    regs: HashMap<SlotId, Variable>,
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

/// An accessor: (key, element offset, strides, element size; 0 for iota).
type Accessor = (usize, i64, Vec<i64>, i64);

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
        KernelGen::with_imports(b, Imports::Module(m, helpers), plan, k, opts, ptr)
    }

    fn with_imports(
        b: &'a mut FunctionBuilder<'b>,
        imports: Imports<'a>,
        plan: &'a Plan,
        k: &'a Kernel,
        opts: &'a JitOptions,
        ptr: Type,
    ) -> Self {
        KernelGen {
            b,
            imports,
            plan,
            k,
            opts,
            ptr,
            bases: HashMap::new(),
            pos: HashMap::new(),
            frefs: HashMap::new(),
            hoisted: HashMap::new(),
            gather_index: loops::gather_indices(&k.nodes, k.root),
            load_off: 0,
            range: None,
            wide: None,
            regs: HashMap::new(),
        }
    }

    /// Calls the runtime function `f` with `args`; its results.
    fn call(&mut self, f: RtFn, args: &[Value]) -> Result<Vec<Value>> {
        let fref = match self.frefs.get(&f) {
            Some(r) => *r,
            None => {
                let r = match &mut self.imports {
                    Imports::Module(m, helpers) => {
                        let id = helpers.get(m, f)?;
                        m.declare_func_in_func(id, self.b.func)
                    }
                    Imports::DryRun(call_conv) => {
                        let signature = self.b.import_signature(f.signature(*call_conv));
                        self.b.import_function(ExtFuncData {
                            name: ExternalName::testcase(f.name()),
                            signature,
                            colocated: false,
                            patchable: false,
                        })
                    }
                };
                self.frefs.insert(f, r);
                r
            }
        };
        let inst = self.b.ins().call(fref, args);
        Ok(self.b.inst_results(inst).to_vec())
    }

    /// The fused f32 row of `Helpers::native_row`, as a function this
    /// kernel may call, where it is machine code (never in a dry run).
    fn native_row(
        &mut self,
        u: Option<tensorlift_ir::UnaryOp>,
        store: bool,
        prefetch: bool,
    ) -> Result<Option<cranelift_codegen::ir::FuncRef>> {
        match &mut self.imports {
            Imports::Module(m, helpers) => Ok(
                match helpers.native_row(m, (u, store, prefetch), self.opts)? {
                    Some(id) => Some(m.declare_func_in_func(id, self.b.func)),
                    None => None,
                },
            ),
            Imports::DryRun(_) => Ok(None),
        }
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

    fn dtype_of(&self, node: usize) -> DType {
        self.k.nodes[node].dtype()
    }
}
