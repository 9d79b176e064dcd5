//! Runtime symbols called from compiled code, each named once by an
//! [`RtFn`] (symbol, signature, address) and registered with the JIT from
//! [`RtFn::ALL`]. Every entry catches panics (a panic must never cross
//! `extern "C"`) and reports failure through a status code and the
//! per-call context.
//!
//! Per-element helpers reuse the interpreter's scalar semantics
//! (`tensorlift_runtime::kernels::scalar`), so what they compute is
//! bit-identical to the interpreter by construction.

use std::panic::{AssertUnwindSafe, catch_unwind};

use cranelift_codegen::ir::{AbiParam, Signature, Type, types};
use cranelift_codegen::isa::CallConv;

use half::{bf16, f16};
use num_complex::{Complex32, Complex64};
use tensorlift_ir::{BinaryOp, DType, Error, UnaryOp};
use tensorlift_runtime::Tensor;
use tensorlift_runtime::fpmode::FpMode;
use tensorlift_runtime::interp;
use tensorlift_runtime::kernels::gemm;
use tensorlift_runtime::kernels::scalar::{ComplexScalar, FloatScalar, IntScalar};
use tensorlift_runtime::pool;

use std::sync::Arc;

use smallvec::SmallVec;
use tensorlift_ir::{NodeId, Op, TensorType};
use tensorlift_runtime::callback::{self, HostCallback};
use tensorlift_runtime::{AlignedBytes, TensorMut, TensorRef};

use crate::fusion::{Plan, SlotId, SlotKind, Step};

/// Per-call state shared with runtime symbols: the first error raised, and
/// string tensors by slot (strings live outside byte buffers).
#[derive(Debug, Default)]
pub struct CallCtx {
    /// Set by a runtime symbol that fails (status 1).
    pub error: Option<Error>,
    /// String-valued slots: inputs (filled by the executor) and callback
    /// results (filled by runtime steps).
    pub strings: Vec<Option<Tensor>>,
    /// The caller's inputs: runtime steps (callbacks included) read input
    /// slots as these tensors, without copying them.
    pub inputs: Vec<Tensor>,
    /// The buffers of [`SlotKind::HandOff`] slots by slot, taken (moved)
    /// by the callback that reads them last.
    pub owned: Vec<Option<AlignedBytes>>,
    /// Callback results by slot, adopted instead of copied: the slot's
    /// pointer in `bufs` is redirected to the tensor's bytes, which later
    /// steps only read, and an output slot returns the tensor itself.
    pub kept: Vec<Option<Tensor>>,
    /// What the last poll of a loop said ([`tl_poll`], through the
    /// trampoline that keeps every register: it returns nothing).
    pub poll_status: i32,
}

/// Where [`CallCtx::poll_status`] lies, for compiled code.
pub(crate) const POLL_STATUS_OFFSET: i32 = std::mem::offset_of!(CallCtx, poll_status) as i32;

/// What runtime steps need at run time: the plan (slots, graphs) and the
/// callable of each callback step, resolved once when compiling.
#[derive(Debug)]
pub struct StepTable {
    /// The executable's plan.
    pub plan: Plan,
    /// By step: the bound callable of a callback step (None for other
    /// steps, and for callbacks not bound yet, which fail when they run).
    pub callbacks: Vec<Option<Arc<HostCallback>>>,
}

impl StepTable {
    /// The table of `plan`, resolving every bound callback (in loop bodies
    /// and branches too, from their own graphs' bindings).
    pub fn new(plan: Plan) -> Self {
        let callbacks = plan
            .steps
            .iter()
            .map(|step| match step {
                Step::Runtime { graph, node, .. } => {
                    let g = plan.step_graph(*graph);
                    if let Op::Callback(c) = &g.node(*node).op {
                        callback::bound(g, &c.target).ok()
                    } else {
                        None
                    }
                }
                Step::Kernel(_)
                | Step::Gemm(_)
                | Step::Pack(_)
                | Step::Copy { .. }
                | Step::Label(_)
                | Step::Jump(_)
                | Step::BranchUnless { .. }
                | Step::Switch { .. } => None,
            })
            .collect();
        StepTable { plan, callbacks }
    }
}

fn unary(code: i32) -> UnaryOp {
    UnaryOp::ALL
        .get(code as usize)
        .copied()
        .unwrap_or(UnaryOp::Neg)
}

fn binary(code: i32) -> BinaryOp {
    BinaryOp::ALL
        .get(code as usize)
        .copied()
        .unwrap_or(BinaryOp::Add)
}

/// Runs `f`, turning a panic into `on_panic`.
fn guard<T>(on_panic: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(on_panic)
}

extern "C" fn tl_f32_un(op: i32, x: f32) -> f32 {
    guard(f32::NAN, || f32::un(unary(op), x))
}
extern "C" fn tl_f64_un(op: i32, x: f64) -> f64 {
    guard(f64::NAN, || f64::un(unary(op), x))
}
extern "C" fn tl_f32_bin(op: i32, a: f32, b: f32) -> f32 {
    guard(f32::NAN, || f32::bin(binary(op), a, b))
}
extern "C" fn tl_f64_bin(op: i32, a: f64, b: f64) -> f64 {
    guard(f64::NAN, || f64::bin(binary(op), a, b))
}

macro_rules! int_pow {
    ($($name:ident: $t:ty),*) => {$(
        extern "C" fn $name(a: $t, b: $t) -> $t {
            guard(0, || <$t>::bin(BinaryOp::Pow, a, b))
        }
    )*};
}
int_pow!(tl_pow_i8: i8, tl_pow_i16: i16, tl_pow_i32: i32, tl_pow_i64: i64, tl_pow_u8: u8, tl_pow_u16: u16, tl_pow_u32: u32, tl_pow_u64: u64);

extern "C" fn tl_f16_to_f32(bits: i32) -> f32 {
    f16::from_bits(bits as u16).to_f32()
}
extern "C" fn tl_f32_to_f16(x: f32) -> i32 {
    i32::from(f16::from_f32(x).to_bits())
}
extern "C" fn tl_f32_to_bf16(x: f32) -> i32 {
    i32::from(bf16::from_f32(x).to_bits())
}
extern "C" fn tl_f64_to_f16(x: f64) -> i32 {
    i32::from(f16::from_f64(x).to_bits())
}
extern "C" fn tl_f64_to_bf16(x: f64) -> i32 {
    i32::from(bf16::from_f64(x).to_bits())
}

/// # Safety
/// `out` points to two writable f32.
unsafe extern "C" fn tl_c64_un(op: i32, re: f32, im: f32, out: *mut f32) {
    let r = guard(Complex32::new(f32::NAN, f32::NAN), || {
        Complex32::un(unary(op), Complex32::new(re, im))
    });
    // SAFETY: the caller passes a 2-element stack slot.
    unsafe {
        *out = r.re;
        *out.add(1) = r.im;
    }
}
/// # Safety
/// `out` points to two writable f64.
unsafe extern "C" fn tl_c128_un(op: i32, re: f64, im: f64, out: *mut f64) {
    let r = guard(Complex64::new(f64::NAN, f64::NAN), || {
        Complex64::un(unary(op), Complex64::new(re, im))
    });
    // SAFETY: the caller passes a 2-element stack slot.
    unsafe {
        *out = r.re;
        *out.add(1) = r.im;
    }
}
/// # Safety
/// `out` points to two writable f32.
unsafe extern "C" fn tl_c64_bin(op: i32, ar: f32, ai: f32, br: f32, bi: f32, out: *mut f32) {
    let r = guard(Complex32::new(f32::NAN, f32::NAN), || {
        Complex32::bin(binary(op), Complex32::new(ar, ai), Complex32::new(br, bi))
    });
    // SAFETY: the caller passes a 2-element stack slot.
    unsafe {
        *out = r.re;
        *out.add(1) = r.im;
    }
}
/// # Safety
/// `out` points to two writable f64.
unsafe extern "C" fn tl_c128_bin(op: i32, ar: f64, ai: f64, br: f64, bi: f64, out: *mut f64) {
    let r = guard(Complex64::new(f64::NAN, f64::NAN), || {
        Complex64::bin(binary(op), Complex64::new(ar, ai), Complex64::new(br, bi))
    });
    // SAFETY: the caller passes a 2-element stack slot.
    unsafe {
        *out = r.re;
        *out.add(1) = r.im;
    }
}
extern "C" fn tl_c64_abs(re: f32, im: f32) -> f32 {
    guard(f32::NAN, || Complex32::new(re, im).abs())
}
extern "C" fn tl_c128_abs(re: f64, im: f64) -> f64 {
    guard(f64::NAN, || Complex64::new(re, im).abs())
}

/// Reads slot `s` of a running program into a tensor (a copy).
///
/// # Safety
/// `bufs[s]` points to the slot's bytes, valid for reads.
unsafe fn slot_tensor(
    plan: &Plan,
    ctx: &CallCtx,
    bufs: *const *mut u8,
    s: usize,
) -> Result<Tensor, Error> {
    let slot = &plan.slots[s];
    if let SlotKind::Const(l) = &slot.kind {
        return Tensor::from_literal(l);
    }
    if let SlotKind::Input(k) = &slot.kind
        && let Some(t) = ctx.inputs.get(*k)
    {
        return Ok(t.clone());
    }
    if slot.dtype == DType::String {
        return ctx
            .strings
            .get(s)
            .cloned()
            .flatten()
            .ok_or_else(|| Error::internal(format!("string slot {s} is empty")));
    }
    // SAFETY: the executor fills every slot pointer before calling main.
    let bytes = unsafe { std::slice::from_raw_parts(*bufs.add(s), slot.bytes()) };
    Tensor::from_bytes(slot.dtype, &slot.dims, bytes)
}

/// Slot `s` of a running program where it lies: the caller's tensor or
/// the constant for an input or a constant (held in `keep`), else the
/// slot's own buffer; no copy of a temporary (strings are not viewed).
///
/// # Safety
/// `bufs[s]` points to the slot's bytes, valid for reads and not written
/// while the view lives.
unsafe fn slot_ref<'a>(
    plan: &'a Plan,
    ctx: &CallCtx,
    bufs: *const *mut u8,
    s: usize,
    keep: &'a mut Option<Tensor>,
) -> Result<TensorRef<'a>, Error> {
    let slot = &plan.slots[s];
    match &slot.kind {
        SlotKind::Const(_) | SlotKind::Input(_) => {
            // SAFETY: the caller's contract.
            let t = keep.insert(unsafe { slot_tensor(plan, ctx, bufs, s)? });
            Ok(t.as_ref())
        }
        SlotKind::Temp { .. } | SlotKind::Output | SlotKind::HandOff { .. } => {
            let n = slot.bytes();
            let bytes: &[u8] = if n == 0 || slot.dtype == DType::String {
                &[]
            } else {
                // SAFETY: the caller's contract.
                unsafe { std::slice::from_raw_parts(*bufs.add(s), n) }
            };
            TensorRef::new(slot.dtype, &slot.dims, bytes)
        }
    }
}

/// Runs runtime or GEMM step `step`; `epilogue` is a GEMM step's
/// epilogue kernel (`Gemm::epilogue`), compiled.
fn run_step(
    table: &StepTable,
    step: usize,
    bufs: *const *mut u8,
    ctx: &mut CallCtx,
    epilogue: Option<KernelFn>,
) -> Result<(), Error> {
    let plan = &table.plan;
    match plan.steps.get(step) {
        Some(Step::Runtime {
            graph,
            node,
            inputs,
            outputs,
        }) if let Some(Some(cb)) = table.callbacks.get(step) => {
            let g = plan.step_graph(*graph);
            run_callback_step(plan, g, cb, (step, *node, inputs, outputs), bufs, ctx)
                .map_err(|e| e.at_node(g.node_ref(*node)))
        }
        Some(Step::Runtime {
            graph,
            node,
            inputs,
            outputs,
        }) => {
            let g = plan.step_graph(*graph);
            if let Op::DynamicUpdateSlice = &g.node(*node).op
                && outputs.first() == inputs.first()
            {
                // In place (`fusion::update_in_place`): only the block is
                // written; the operand's buffer is the result's.
                let args: Vec<Tensor> = inputs[1..]
                    .iter()
                    // SAFETY: slot pointers are valid while main runs.
                    .map(|&s| unsafe { slot_tensor(plan, ctx, bufs, s) })
                    .collect::<Result<_, _>>()?;
                let refs: Vec<&Tensor> = args.iter().collect();
                let slot = &plan.slots[inputs[0]];
                let n = slot.bytes();
                let out: &mut [u8] = if n == 0 {
                    &mut []
                } else {
                    // SAFETY: the plan gives this step the operand's slot
                    // to write (no other step reads it afterwards, and no
                    // operand of this step shares it: they were copied above).
                    unsafe { std::slice::from_raw_parts_mut(*bufs.add(inputs[0]), n) }
                };
                return tensorlift_runtime::kernels::layout::update_slice_into(
                    out,
                    slot.dtype,
                    &slot.dims,
                    refs[0],
                    &refs[1..],
                )
                .map_err(|e| e.at_node(g.node_ref(*node)));
            }
            if let Op::Scatter { axis, combiner } = &g.node(*node).op
                && let ([x, ids, ups], [out]) = (inputs.as_slice(), outputs.as_slice())
                && plan.slots[*out].dtype != DType::String
                && (out == x || !inputs.contains(out))
            {
                // Into the result's slot: the operand's own when
                // `fusion::update_in_place` gave it (only the indexed rows
                // are written), else a copy of the operand made there.
                let (mut keep_ids, mut keep_ups, mut keep_x) = (None, None, None);
                // SAFETY: slot pointers are valid while main runs, and the
                // output slot is none of these three (checked above) but
                // the operand's own when the plan gave the step its buffer.
                let (ids, ups) = unsafe {
                    (
                        slot_ref(plan, ctx, bufs, *ids, &mut keep_ids)?,
                        slot_ref(plan, ctx, bufs, *ups, &mut keep_ups)?,
                    )
                };
                let os = &plan.slots[*out];
                let n = os.bytes();
                if out != x {
                    // SAFETY: as above.
                    let source = unsafe { slot_ref(plan, ctx, bufs, *x, &mut keep_x)? };
                    if source.bytes().len() != n {
                        return Err(Error::internal(format!(
                            "scatter: a {}-byte operand for a {n}-byte result",
                            source.bytes().len()
                        )));
                    }
                    if n > 0 {
                        // SAFETY: the output slot is this step's to write
                        // and distinct from the operand's.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                source.bytes().as_ptr(),
                                *bufs.add(*out),
                                n,
                            );
                        }
                    }
                }
                let dst: &mut [u8] = if n == 0 {
                    &mut []
                } else {
                    // SAFETY: the output slot is this step's to write; the
                    // views above read other slots, or (the operand, in
                    // place) are done with.
                    unsafe { std::slice::from_raw_parts_mut(*bufs.add(*out), n) }
                };
                return tensorlift_runtime::kernels::layout::scatter_into(
                    dst, os.dtype, &os.dims, &ids, &ups, *axis, *combiner,
                )
                .map_err(|e| e.at_node(g.node_ref(*node)));
            }
            if let Op::DynamicSlice { sizes } = &g.node(*node).op
                && let (Some(&x), [out]) = (inputs.first(), outputs.as_slice())
                && plan.slots[x].dtype != DType::String
                && x != *out
            {
                // The block is copied from the operand's buffer where it
                // lies (a loop reading one row of a stack per iteration
                // does not copy the stack), or from the caller's tensor or
                // the constant for an input or a constant.
                let starts: Vec<Tensor> = inputs[1..]
                    .iter()
                    // SAFETY: slot pointers are valid while main runs.
                    .map(|&s| unsafe { slot_tensor(plan, ctx, bufs, s) })
                    .collect::<Result<_, _>>()?;
                let refs: Vec<&Tensor> = starts.iter().collect();
                let (xs, os) = (&plan.slots[x], &plan.slots[*out]);
                if plan.views.contains(&(*out, x)) {
                    // A view (`fusion::slice_views`): the result slot points
                    // at the block in the operand's buffer, which stays
                    // unwritten and live until the result's last reader.
                    let at = tensorlift_runtime::kernels::layout::block_offset(
                        "dynamic_slice",
                        &xs.dims,
                        sizes,
                        &refs,
                    )
                    .map_err(|e| e.at_node(g.node_ref(*node)))?;
                    let end = (at + os.dims.iter().product::<usize>()) * xs.dtype.size();
                    if end > xs.bytes() {
                        return Err(Error::internal("dynamic_slice: a view past its operand"));
                    }
                    // SAFETY: `bufs` is the executor's mutable pointer
                    // table; the offset lies inside the operand's buffer
                    // (checked above) and the result slot is only read.
                    unsafe {
                        let base = *bufs.add(x);
                        *(bufs as *mut *mut u8).add(*out) = base.add(at * xs.dtype.size());
                    }
                    return Ok(());
                }
                let mut keep = None;
                // SAFETY: slot pointers are valid while main runs; the
                // output is another slot (checked above).
                let src = unsafe { slot_ref(plan, ctx, bufs, x, &mut keep)? }.bytes();
                let dst: &mut [u8] = if os.bytes() == 0 {
                    &mut []
                } else {
                    // SAFETY: the output is this step's to write, distinct
                    // from the operand's slot.
                    unsafe { std::slice::from_raw_parts_mut(*bufs.add(*out), os.bytes()) }
                };
                return tensorlift_runtime::kernels::layout::slice_into(
                    dst, src, xs.dtype, &xs.dims, sizes, &refs,
                )
                .map_err(|e| e.at_node(g.node_ref(*node)));
            }
            // A take fused into its readers as a gather: its step only
            // checks the indices (its one input), before any kernel reads
            // the table where they point.
            if let Op::Take { axis } = &g.node(*node).op
                && let ([ids], []) = (inputs.as_slice(), outputs.as_slice())
            {
                let table = g.ty(g.node(*node).inputs[0]);
                let n = table.shape.as_known().map_or(0, |d| d[*axis]);
                let sl = &plan.slots[*ids];
                // SAFETY: slot pointers are valid while main runs (inputs
                // and constants included: read where they are).
                let ids =
                    TensorRef::new(sl.dtype, &sl.dims, unsafe { slot_bytes(plan, bufs, *ids) })?;
                return tensorlift_runtime::kernels::layout::check_take_indices(&ids, n)
                    .map_err(|e| e.at_node(g.node_ref(*node)));
            }
            if let Op::Take { axis } = &g.node(*node).op
                && let ([x, ids], [out]) = (inputs.as_slice(), outputs.as_slice())
                && plan.slots[*out].dtype != DType::String
                && !inputs.contains(out)
            {
                // The slices are copied into the output's buffer: no
                // result tensor to allocate (its pages faulted in on
                // every call) and copy over.
                // SAFETY: slot pointers are valid while main runs.
                let (x, ids) = unsafe {
                    (
                        slot_tensor(plan, ctx, bufs, *x)?,
                        slot_tensor(plan, ctx, bufs, *ids)?,
                    )
                };
                let n = plan.slots[*out].bytes();
                let dst: &mut [u8] = if n == 0 {
                    &mut []
                } else {
                    // SAFETY: the output slot is this step's to write and
                    // distinct from its operands (checked above).
                    unsafe { std::slice::from_raw_parts_mut(*bufs.add(*out), n) }
                };
                return tensorlift_runtime::kernels::layout::take_into(dst, &x, &ids, *axis)
                    .map_err(|e| e.at_node(g.node_ref(*node)));
            }
            let args: Vec<Tensor> =
                // SAFETY: slot pointers are valid while main runs.
                inputs.iter().map(|&s| unsafe { slot_tensor(plan, ctx, bufs, s) }).collect::<Result<_, _>>()?;
            let refs: Vec<&Tensor> = args.iter().collect();
            let outs =
                interp::eval_node(g, *node, &refs).map_err(|e| e.at_node(g.node_ref(*node)))?;
            for (t, &s) in outs.iter().zip(outputs) {
                if t.dtype() == DType::String {
                    if ctx.strings.len() <= s {
                        ctx.strings.resize(s + 1, None);
                    }
                    ctx.strings[s] = Some(t.clone());
                    continue;
                }
                let bytes = t.bytes();
                if bytes.len() != plan.slots[s].bytes() {
                    return Err(Error::internal(format!(
                        "runtime step wrote {} bytes into a {}-byte slot",
                        bytes.len(),
                        plan.slots[s].bytes()
                    )));
                }
                // SAFETY: output slots are distinct writable buffers of this size.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), *bufs.add(s), bytes.len()) };
            }
            Ok(())
        }
        Some(Step::Gemm(g)) => {
            // SAFETY: `bufs` holds a pointer for every slot.
            let (a, b, c) = unsafe { (*bufs.add(g.lhs), *bufs.add(g.rhs), *bufs.add(g.out)) };
            // SAFETY: as above; the Pack step before the loop filled it.
            let packed = g
                .packed
                .map_or(std::ptr::null_mut(), |s| unsafe { *bufs.add(s) });
            let d = g.dims();
            // The epilogue kernel on each range of rows, its first failing
            // status kept.
            let status = std::sync::atomic::AtomicI32::new(0);
            let (pb, pc) = (
                SendPtr(bufs as *mut *mut u8),
                SendPtr(std::ptr::from_mut(ctx)),
            );
            let (per_row, parts) = match &g.epilogue {
                // After a product not split by rows: ranges of rows over
                // the pool when the kernel would split as a step of its own.
                Some(e) if g.threads && e.split => (e.per_row, tensorlift_runtime::pool::threads()),
                Some(e) => (e.per_row, 1),
                None => (1, 1),
            };
            let run_kernel = epilogue.map(|k| {
                let (pb, pc, status) = (&pb, &pc, &status);
                move |rows: std::ops::Range<usize>| {
                    let (lo, hi) = ((rows.start * per_row) as i64, (rows.end * per_row) as i64);
                    // SAFETY: the kernel is the step's epilogue; the indices
                    // of its outermost dim over these rows read only them,
                    // which are final (`gemm_then`), and ranges of its
                    // outermost dim write disjoint memory.
                    let st = unsafe { k(pb.0, pc.0, lo, hi) };
                    if st != 0 {
                        let _ = status.compare_exchange(
                            0,
                            st,
                            std::sync::atomic::Ordering::Relaxed,
                            std::sync::atomic::Ordering::Relaxed,
                        );
                    }
                }
            });
            let then = run_kernel.as_ref().map(|f| f as gemm::Epilogue<'_>);
            let Some(ty) = gemm::GemmType::of(g.dtype) else {
                return Err(Error::internal(format!(
                    "a GEMM step of {} elements",
                    g.dtype
                )));
            };
            let store = gemm::Store {
                accumulate: g.accumulate,
                scale: g.scale,
            };
            // SAFETY: slot pointers are valid while main runs, the plan's
            // strides stay inside each operand's slot, the output slot
            // (b·m·n elements, holding the accumulator when
            // `g.accumulate`) is distinct from the operands, and the packed
            // slot (if any) holds `rhs` as the pack step before the loop
            // packed it.
            unsafe { ty.gemm_then(&d, [a, b, c, packed], g.threads, store, then, parts) };
            match status.into_inner() {
                0 => Ok(()),
                st => Err(Error::internal(format!(
                    "the epilogue of GEMM '{}' failed (status {st})",
                    g.name
                ))),
            }
        }
        Some(Step::Pack(p)) => {
            // SAFETY: `bufs` holds a pointer for every slot; the source's
            // strides stay inside its slot and the destination holds
            // `packed_len(k, n)` elements (`pack_loop_invariant_rhs`).
            let (src, dst) = unsafe { (*bufs.add(p.src), *bufs.add(p.dst)) };
            let Some(ty) = gemm::GemmType::of(p.dtype) else {
                return Err(Error::internal(format!(
                    "a packed GEMM operand of {} elements",
                    p.dtype
                )));
            };
            // SAFETY: as above.
            unsafe { ty.pack_rhs(p.k, p.n, src, p.strides, dst) };
            Ok(())
        }
        Some(
            Step::Kernel(_)
            | Step::Copy { .. }
            | Step::Label(_)
            | Step::Jump(_)
            | Step::BranchUnless { .. }
            | Step::Switch { .. },
        )
        | None => Err(Error::internal(format!(
            "step {step} is not a runtime step"
        ))),
    }
}

/// The bytes of slot `s`.
///
/// # Safety
/// `bufs[s]` points to the slot's bytes, valid for reads while `main` runs.
unsafe fn slot_bytes<'a>(plan: &Plan, bufs: *const *mut u8, s: SlotId) -> &'a [u8] {
    let n = plan.slots[s].bytes();
    if n == 0 {
        return &[];
    }
    // SAFETY: as the contract says.
    unsafe { std::slice::from_raw_parts(*bufs.add(s), n) }
}

/// Runs a callback step with its resolved callable. A buffer-filling
/// callable (`host_fn_into`) reads the slots and writes its output slots in
/// place: nothing is allocated or copied. Others get tensors (a handed-off
/// temporary moves in without a copy; other slots are copied, caller inputs
/// shared) and their results are adopted: the output slot's pointer is
/// redirected to the returned tensor's bytes.
/// `call` is (step number, callback node, input slots, output slots).
fn run_callback_step(
    plan: &Plan,
    graph: &tensorlift_ir::Graph,
    cb: &HostCallback,
    call: (usize, NodeId, &[SlotId], &[SlotId]),
    bufs: *const *mut u8,
    ctx: &mut CallCtx,
) -> Result<(), Error> {
    let (step, node, inputs, outputs) = call;
    // Callbacks compute in the caller's denormal mode; the compiled code
    // around them may flush denormals.
    let _mode = FpMode::outer().enter();
    let string = |s: SlotId| plan.slots[s].dtype == DType::String;
    if cb.writes_buffers() && !inputs.iter().chain(outputs).any(|&s| string(s)) {
        // Built in place (no collect through Result, which moves the
        // inline arrays around): this path is the per-call overhead.
        let mut ins: SmallVec<[TensorRef<'_>; 4]> = SmallVec::new();
        for &s in inputs {
            let slot = &plan.slots[s];
            // SAFETY: slot pointers are valid while main runs.
            ins.push(TensorRef::new(slot.dtype, &slot.dims, unsafe {
                slot_bytes(plan, bufs, s)
            })?);
        }
        let mut outs: SmallVec<[TensorMut<'_>; 2]> = SmallVec::new();
        for &s in outputs {
            let slot = &plan.slots[s];
            let n = slot.bytes();
            let bytes: &mut [u8] = if n == 0 {
                &mut []
            } else {
                // SAFETY: output slots are distinct writable buffers of this
                // size, disjoint from every input slot (the buffer plan keeps
                // a step's operands live while it runs). They may hold
                // garbage, so they are zeroed before any reference exists
                // (the callable need not write every element).
                unsafe {
                    std::ptr::write_bytes(*bufs.add(s), 0, n);
                    std::slice::from_raw_parts_mut(*bufs.add(s), n)
                }
            };
            outs.push(TensorMut::new(slot.dtype, &slot.dims, bytes)?);
        }
        return cb.call_buffers(&ins, &mut outs);
    }
    let args = inputs
        .iter()
        .map(|&s| {
            let slot = &plan.slots[s];
            if slot.kind == (SlotKind::HandOff { to: step }) {
                // An earlier callback's result redirected the slot to its
                // own tensor: that tensor is the value (the slot's buffer
                // was never written).
                if let Some(t) = ctx.kept.get_mut(s).and_then(Option::take) {
                    return Ok(t);
                }
                if let Some(b) = ctx.owned.get_mut(s).and_then(Option::take) {
                    return Tensor::from_aligned(slot.dtype, &slot.dims, b);
                }
            }
            // SAFETY: slot pointers are valid while main runs.
            unsafe { slot_tensor(plan, ctx, bufs, s) }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let n = graph.node(node);
    let want: Vec<&TensorType> = n.results.iter().map(|r| graph.ty(*r)).collect();
    let outs = cb.call(args, &want)?;
    callback::check_results(cb.kind().name(), &n.name, &want, &outs)?;
    for (t, &s) in outs.into_iter().zip(outputs) {
        if t.bytes().len() != plan.slots[s].bytes() && !string(s) {
            return Err(Error::internal(format!(
                "callback result of {} bytes for a {}-byte slot",
                t.bytes().len(),
                plan.slots[s].bytes()
            )));
        }
        if string(s) {
            if ctx.strings.len() <= s {
                ctx.strings.resize(s + 1, None);
            }
            ctx.strings[s] = Some(t);
            continue;
        }
        // SAFETY: `bufs` is the executor's mutable pointer table; later
        // steps only read this slot, through the new pointer, and `kept`
        // keeps the tensor (16-byte aligned, immutable) alive until the
        // call returns.
        unsafe { *(bufs as *mut *mut u8).add(s) = t.bytes().as_ptr().cast_mut() };
        if ctx.kept.len() <= s {
            ctx.kept.resize(s + 1, None);
        }
        ctx.kept[s] = Some(t);
    }
    Ok(())
}

/// Runs runtime step `step` (a runtime kernel or a GEMM).
///
/// # Safety
/// `table` and `ctx` are valid; `bufs` holds a pointer for every slot.
pub(crate) unsafe extern "C" fn tl_runtime_step(
    table: *const StepTable,
    step: u64,
    bufs: *const *mut u8,
    ctx: *mut CallCtx,
) -> i32 {
    // SAFETY: same contract.
    unsafe { enter_step(table, step, bufs, ctx, None) }
}

/// [`run_step`] from compiled code: a failure or a panic is recorded in
/// `ctx` (the first one kept) and returned as status 1.
///
/// # Safety
/// As [`tl_runtime_step`]; `epilogue` is the step's compiled epilogue.
unsafe fn enter_step(
    table: *const StepTable,
    step: u64,
    bufs: *const *mut u8,
    ctx: *mut CallCtx,
    epilogue: Option<KernelFn>,
) -> i32 {
    // SAFETY: ctx is the caller's live CallCtx; runtime steps run one at a
    // time on the thread executing `main`.
    let Some(ctx) = (unsafe { ctx.as_mut() }) else {
        return 1;
    };
    let r = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the executable owns the table for as long as its code runs.
        let table = unsafe { &*table };
        run_step(table, step as usize, bufs, ctx, epilogue)
    }));
    let err = match r {
        Ok(Ok(())) => return 0,
        Ok(Err(e)) => e,
        Err(_) => Error::internal(format!("a runtime kernel panicked in step {step}")),
    };
    if ctx.error.is_none() {
        ctx.error = Some(err);
    }
    1
}

/// Runs GEMM step `step` (the runtime's f32/f64 GEMM, `kernels::gemm`).
///
/// # Safety
/// As [`tl_runtime_step`].
pub(crate) unsafe extern "C" fn tl_gemm(
    table: *const StepTable,
    step: u64,
    bufs: *const *mut u8,
    ctx: *mut CallCtx,
) -> i32 {
    // SAFETY: same contract.
    unsafe { tl_runtime_step(table, step, bufs, ctx) }
}

/// What [`tl_where`] adds: a `while`'s condition before iteration `n`.
pub(crate) const WHERE_CONDITION: i32 = 0;
/// What [`tl_where`] adds: iteration `n` of a `while`'s body.
pub(crate) const WHERE_BODY: i32 = 1;
/// What [`tl_where`] adds: branch `n` of a `case`.
pub(crate) const WHERE_BRANCH: i32 = 2;

/// Adds where a failing step ran to the call's error, as the interpreter
/// says it (`interp::in_loop`, `interp::in_branch`): `main` calls it on its
/// way out, once per loop and branch around the step, the innermost
/// first, with the loop's iteration counted in a register.
///
/// # Safety
/// `ctx` is the call's context.
pub(crate) unsafe extern "C" fn tl_where(ctx: *mut CallCtx, what: i32, n: i64) {
    // (Only formats a message: a panic is dropped with it.)
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the caller's contract.
        let ctx = unsafe { &mut *ctx };
        let n = n.max(0) as u64;
        let place = match what {
            WHERE_CONDITION => interp::in_loop(false, n),
            WHERE_BODY => interp::in_loop(true, n),
            _ => interp::in_branch(n),
        };
        ctx.error = ctx.error.take().map(|e| e.context(place));
    }));
}

/// Whether a compiled loop must stop (the embedding's check, e.g. a
/// pending Ctrl-C; `tensorlift_runtime::interrupt`): 0 to go on, else 1
/// with the call's error set. Loops reach it through a trampoline that
/// preserves every register (`codegen::driver`), so that their values
/// stay in registers across the call.
///
/// # Safety
/// `ctx` is the call's context.
pub(crate) unsafe extern "C" fn tl_poll(ctx: *mut CallCtx) -> i32 {
    let verdict = catch_unwind(tensorlift_runtime::interrupt::poll)
        .unwrap_or_else(|_| Err(Error::internal("the interrupt check panicked")));
    match verdict {
        Ok(()) => 0,
        Err(e) => {
            // SAFETY: the caller's contract.
            unsafe { (*ctx).error = Some(e) };
            1
        }
    }
}

/// Runs GEMM step `step` and its epilogue `kernel` on each range of rows
/// the product finishes (`kernels::gemm::gemm_then`).
///
/// # Safety
/// As [`tl_runtime_step`]; `kernel` is the step's epilogue, compiled.
pub(crate) unsafe extern "C" fn tl_gemm_then(
    table: *const StepTable,
    step: u64,
    bufs: *const *mut u8,
    ctx: *mut CallCtx,
    kernel: KernelFn,
) -> i32 {
    // SAFETY: same contract.
    unsafe { enter_step(table, step, bufs, ctx, Some(kernel)) }
}

/// A kernel: `fn(bufs, ctx, begin, end) -> status` over `[begin, end)` of
/// its outermost loop dim.
pub(crate) type KernelFn = unsafe extern "C" fn(*const *mut u8, *mut CallCtx, i64, i64) -> i32;

/// Kernels cheaper than this (loop iterations × per-element cost, ~0.02 ns
/// a unit) run on the calling thread: waking the pool costs 15–25 µs on
/// the benchmark machine, and a second core only pays once a kernel runs
/// ~35 µs alone (measured crossover: arith chain between 65536 and 131072
/// elements, exp/tanh chain between 8192 and 16384; docs/benchmarks.md).
pub const PARALLEL_WORK: i64 = 1 << 21;

struct SendPtr<T>(*mut T);
// SAFETY: the pointers are only dereferenced by kernels writing disjoint
// rows, while the caller blocks in the scope until every task finished.
unsafe impl<T> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for SendPtr<T> {}

/// Runs `kernel` over `[0, n)`, split into one contiguous range per core
/// when `work` is large enough. Every element is computed by exactly one
/// thread with the same code, so results do not depend on the split.
///
/// # Safety
/// `kernel` is a kernel of this module, `bufs`/`ctx` as for `main`, and
/// ranges of the kernel's outermost dim write disjoint memory.
pub(crate) unsafe extern "C" fn tl_parallel(
    kernel: KernelFn,
    bufs: *const *mut u8,
    ctx: *mut CallCtx,
    n: i64,
    work: i64,
) -> i32 {
    let threads = pool::threads() as i64;
    if work < PARALLEL_WORK || n < 2 || threads < 2 {
        // SAFETY: the caller's contract.
        return unsafe { kernel(bufs, ctx, 0, n) };
    }
    split_rows(bufs, ctx, n, threads, |b, c, lo, hi| {
        // SAFETY: disjoint ranges of a kernel, as the caller guarantees.
        unsafe { kernel(b, c, lo, hi) }
    })
}

/// Runs `run(bufs, ctx, lo, hi)` on `threads` contiguous parts of
/// `[0, n)` in parallel; the first failing status (or 1 for a panic) is
/// returned. The caller guarantees the parts write disjoint memory.
///
/// The calling thread runs the first part itself while the pool runs the
/// others ([`pool::run_parts`]).
fn split_rows(
    bufs: *const *mut u8,
    ctx: *mut CallCtx,
    n: i64,
    threads: i64,
    run: impl Fn(*const *mut u8, *mut CallCtx, i64, i64) -> i32 + Sync,
) -> i32 {
    let parts = threads.min(n);
    let status = std::sync::atomic::AtomicI32::new(0);
    let (b, c) = (SendPtr(bufs as *mut *mut u8), SendPtr(ctx));
    let r = catch_unwind(AssertUnwindSafe(|| {
        let (b, c) = (&b, &c);
        let part = |p: usize| {
            let p = p as i64;
            let st = run(b.0, c.0, n * p / parts, n * (p + 1) / parts);
            if st != 0 {
                status.store(st, std::sync::atomic::Ordering::Relaxed);
            }
        };
        pool::run_parts(parts as usize, &part);
    }));
    match r {
        Ok(()) => status.load(std::sync::atomic::Ordering::Relaxed),
        Err(_) => 1,
    }
}

/// Runs the kernels of a row group (`fns[0..count]`) over `[0, rows)`, a
/// block of rows at a time: every kernel on one block before the next
/// block, so a block's rows stay in cache between kernels. With `parallel`
/// set, the rows are split into one contiguous range per core first (each
/// kernel reads only rows its range's earlier kernels wrote, so ranges are
/// independent); each element is still computed by the same code, so
/// results do not depend on the split.
///
/// # Safety
/// `fns` holds `count` kernels of this module forming a row group of the
/// plan; `bufs`/`ctx` as for `main`.
pub(crate) unsafe extern "C" fn tl_row_group(
    fns: *const KernelFn,
    count: i64,
    bufs: *const *mut u8,
    ctx: *mut CallCtx,
    rows: i64,
    block: i64,
    parallel: i64,
) -> i32 {
    // SAFETY: the caller's contract.
    let kernels = unsafe { std::slice::from_raw_parts(fns, count.max(0) as usize) };
    let block = block.max(1);
    let run = |b: *const *mut u8, c: *mut CallCtx, lo: i64, hi: i64| -> i32 {
        let mut start = lo;
        while start < hi {
            let end = (start + block).min(hi);
            for k in kernels {
                // SAFETY: a range of a row group's kernel, in group order.
                let st = unsafe { k(b, c, start, end) };
                if st != 0 {
                    return st;
                }
            }
            start = end;
        }
        0
    };
    let threads = pool::threads() as i64;
    if parallel == 0 || threads < 2 || rows < 2 {
        return run(bufs, ctx, 0, rows);
    }
    split_rows(bufs, ctx, rows, threads, run)
}

/// Declares [`RtFn`] and [`RtFn::ALL`] from one list, so that no
/// function can be called without being registered with the JIT (which
/// would panic when it finalizes the module).
macro_rules! runtime_functions {
    ($($(#[doc = $doc:literal])* $name:ident,)*) => {
        /// A runtime function called by compiled code, named once: its
        /// symbol, its signature and its address come from
        /// [`RtFn::symbol`] (as Cranelift's `LibCall`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub(crate) enum RtFn {
            $($(#[doc = $doc])* $name,)*
        }

        impl RtFn {
            /// Every runtime function, as registered with the JIT.
            pub(crate) const ALL: &'static [RtFn] = &[$(RtFn::$name),*];
        }
    };
}

runtime_functions! {
    /// `tl_f32_un(op, x)`: the f32 function of `UnaryOp` code `op`.
    F32Un,
    /// `tl_f64_un(op, x)`: the f64 function of `UnaryOp` code `op`.
    F64Un,
    /// `tl_f32_bin(op, a, b)`: the f32 function of `BinaryOp` code `op`.
    F32Bin,
    /// `tl_f64_bin(op, a, b)`: the f64 function of `BinaryOp` code `op`.
    F64Bin,
    /// `tl_pow_i8(a, b)`: integer `pow`.
    PowI8,
    /// `tl_pow_i16(a, b)`.
    PowI16,
    /// `tl_pow_i32(a, b)`.
    PowI32,
    /// `tl_pow_i64(a, b)`.
    PowI64,
    /// `tl_pow_u8(a, b)`.
    PowU8,
    /// `tl_pow_u16(a, b)`.
    PowU16,
    /// `tl_pow_u32(a, b)`.
    PowU32,
    /// `tl_pow_u64(a, b)`.
    PowU64,
    /// `tl_f16_to_f32(bits)`.
    F16ToF32,
    /// `tl_f32_to_f16(x)`: the f16's bits.
    F32ToF16,
    /// `tl_f32_to_bf16(x)`: the bf16's bits.
    F32ToBf16,
    /// `tl_f64_to_f16(x)`: the f16's bits.
    F64ToF16,
    /// `tl_f64_to_bf16(x)`: the bf16's bits.
    F64ToBf16,
    /// `tl_c64_un(op, re, im, out)`: a complex64 unary function.
    C64Un,
    /// `tl_c128_un(op, re, im, out)`: a complex128 unary function.
    C128Un,
    /// `tl_c64_bin(op, a_re, a_im, b_re, b_im, out)`: a complex64 binary function.
    C64Bin,
    /// `tl_c128_bin(op, a_re, a_im, b_re, b_im, out)`: a complex128 binary function.
    C128Bin,
    /// `tl_c64_abs(re, im)`.
    C64Abs,
    /// `tl_c128_abs(re, im)`.
    C128Abs,
    /// `tl_runtime_step(table, step, bufs, ctx)`: a runtime kernel.
    RuntimeStep,
    /// `tl_gemm(table, step, bufs, ctx)`: a GEMM step.
    Gemm,
    /// `tl_gemm_then(table, step, bufs, ctx, kernel)`: a GEMM step with
    /// its epilogue kernel.
    GemmThen,
    /// `tl_parallel(kernel, bufs, ctx, n, work)`: a kernel split across threads.
    Parallel,
    /// `tl_where(ctx, what, n)`: where a failing step ran, added to the
    /// call's error.
    Where,
    /// `tl_row_group(fns, count, bufs, ctx, rows, block, parallel)`.
    RowGroup,
    /// `tl_poll(ctx)`: whether a loop must stop (`interrupt::poll`), every
    /// `POLL_EVERY` iterations.
    Poll,
    /// `tl_wide_f32(op, buf, n)`: wide math over an f32 chunk buffer.
    WideF32,
    /// `tl_wide_f64(op, buf, n)`: wide math over an f64 chunk buffer.
    WideF64,
    /// `tl_wide_pow_f64(buf, n)`: wide f64 `pow` over a chunk buffer.
    WidePowF64,
    /// `tl_wide_row_f32(op, src, n, a, b, dst, ahead)`: a fused f32 row.
    WideRowF32,
    /// `tl_wide_row_f64(op, src, n, a, b, dst, ahead)`: a fused f64 row.
    WideRowF64,
    /// `tl_wide_dot_f32(x, y, n, rows, xs, ys, out, os)`: f32 row dot products.
    WideDotF32,
    /// `tl_wide_dot_f64(x, y, n, rows, xs, ys, out, os)`: f64 row dot products.
    WideDotF64,
    /// `tl_wide_cols_f32(x, rows, rs, cols, out)`: f32 column sums.
    WideColsF32,
    /// `tl_wide_cols_f64(x, rows, rs, cols, out)`: f64 column sums.
    WideColsF64,
}

/// What the JIT and compiled code know of a runtime function.
pub(crate) struct Symbol {
    /// The name it is imported and registered under.
    pub name: &'static str,
    /// Its address.
    pub addr: *const u8,
    /// Its parameter types, in Cranelift terms.
    pub params: &'static [Type],
    /// Its result types (none or one).
    pub returns: &'static [Type],
}

impl Symbol {
    /// The symbol `name` of `f`, its signature taken from `F`, the Rust
    /// type `f` is coerced to (so that it is the function's own).
    fn of<F: FnSig>(name: &'static str, f: F) -> Symbol {
        Symbol {
            name,
            addr: f.addr(),
            params: F::PARAMS,
            returns: F::RETURNS,
        }
    }
}

/// The shapes of the runtime functions' signatures.
type Un<T> = unsafe extern "C" fn(i32, T) -> T;
type Bin<T> = unsafe extern "C" fn(i32, T, T) -> T;
type Pow<T> = unsafe extern "C" fn(T, T) -> T;
type ComplexUn<T> = unsafe extern "C" fn(i32, T, T, *mut T);
type ComplexBin<T> = unsafe extern "C" fn(i32, T, T, T, T, *mut T);
type StepFn = unsafe extern "C" fn(*const StepTable, u64, *const *mut u8, *mut CallCtx) -> i32;
type Wide<T> = unsafe extern "C" fn(i32, *mut T, i64);
type WideRow<T> = unsafe extern "C" fn(i32, *const T, i64, T, T, *mut T, *const T) -> T;
type WideDot<T> = unsafe extern "C" fn(*const T, *const T, i64, i64, i64, i64, *mut T, i64);

type WideCols<T> = unsafe extern "C" fn(*const T, i64, i64, i64, *mut T);

impl RtFn {
    /// The function's symbol, address and signature.
    pub(crate) fn symbol(self) -> Symbol {
        use crate::wide;
        match self {
            RtFn::F32Un => Symbol::of::<Un<f32>>("tl_f32_un", tl_f32_un),
            RtFn::F64Un => Symbol::of::<Un<f64>>("tl_f64_un", tl_f64_un),
            RtFn::F32Bin => Symbol::of::<Bin<f32>>("tl_f32_bin", tl_f32_bin),
            RtFn::F64Bin => Symbol::of::<Bin<f64>>("tl_f64_bin", tl_f64_bin),
            RtFn::PowI8 => Symbol::of::<Pow<i8>>("tl_pow_i8", tl_pow_i8),
            RtFn::PowI16 => Symbol::of::<Pow<i16>>("tl_pow_i16", tl_pow_i16),
            RtFn::PowI32 => Symbol::of::<Pow<i32>>("tl_pow_i32", tl_pow_i32),
            RtFn::PowI64 => Symbol::of::<Pow<i64>>("tl_pow_i64", tl_pow_i64),
            RtFn::PowU8 => Symbol::of::<Pow<u8>>("tl_pow_u8", tl_pow_u8),
            RtFn::PowU16 => Symbol::of::<Pow<u16>>("tl_pow_u16", tl_pow_u16),
            RtFn::PowU32 => Symbol::of::<Pow<u32>>("tl_pow_u32", tl_pow_u32),
            RtFn::PowU64 => Symbol::of::<Pow<u64>>("tl_pow_u64", tl_pow_u64),
            RtFn::F16ToF32 => {
                Symbol::of::<unsafe extern "C" fn(i32) -> f32>("tl_f16_to_f32", tl_f16_to_f32)
            }
            RtFn::F32ToF16 => {
                Symbol::of::<unsafe extern "C" fn(f32) -> i32>("tl_f32_to_f16", tl_f32_to_f16)
            }
            RtFn::F32ToBf16 => {
                Symbol::of::<unsafe extern "C" fn(f32) -> i32>("tl_f32_to_bf16", tl_f32_to_bf16)
            }
            RtFn::F64ToF16 => {
                Symbol::of::<unsafe extern "C" fn(f64) -> i32>("tl_f64_to_f16", tl_f64_to_f16)
            }
            RtFn::F64ToBf16 => {
                Symbol::of::<unsafe extern "C" fn(f64) -> i32>("tl_f64_to_bf16", tl_f64_to_bf16)
            }
            RtFn::C64Un => Symbol::of::<ComplexUn<f32>>("tl_c64_un", tl_c64_un),
            RtFn::C128Un => Symbol::of::<ComplexUn<f64>>("tl_c128_un", tl_c128_un),
            RtFn::C64Bin => Symbol::of::<ComplexBin<f32>>("tl_c64_bin", tl_c64_bin),
            RtFn::C128Bin => Symbol::of::<ComplexBin<f64>>("tl_c128_bin", tl_c128_bin),
            RtFn::C64Abs => {
                Symbol::of::<unsafe extern "C" fn(f32, f32) -> f32>("tl_c64_abs", tl_c64_abs)
            }
            RtFn::C128Abs => {
                Symbol::of::<unsafe extern "C" fn(f64, f64) -> f64>("tl_c128_abs", tl_c128_abs)
            }
            RtFn::RuntimeStep => Symbol::of::<StepFn>("tl_runtime_step", tl_runtime_step),
            RtFn::Gemm => Symbol::of::<StepFn>("tl_gemm", tl_gemm),
            RtFn::GemmThen => Symbol::of::<
                unsafe extern "C" fn(
                    *const StepTable,
                    u64,
                    *const *mut u8,
                    *mut CallCtx,
                    KernelFn,
                ) -> i32,
            >("tl_gemm_then", tl_gemm_then),
            RtFn::Parallel => Symbol::of::<
                unsafe extern "C" fn(KernelFn, *const *mut u8, *mut CallCtx, i64, i64) -> i32,
            >("tl_parallel", tl_parallel),
            RtFn::Where => {
                Symbol::of::<unsafe extern "C" fn(*mut CallCtx, i32, i64)>("tl_where", tl_where)
            }
            RtFn::Poll => {
                Symbol::of::<unsafe extern "C" fn(*mut CallCtx) -> i32>("tl_poll", tl_poll)
            }
            RtFn::RowGroup => Symbol::of::<
                unsafe extern "C" fn(
                    *const KernelFn,
                    i64,
                    *const *mut u8,
                    *mut CallCtx,
                    i64,
                    i64,
                    i64,
                ) -> i32,
            >("tl_row_group", tl_row_group),
            RtFn::WideF32 => Symbol::of::<Wide<f32>>("tl_wide_f32", wide::tl_wide_f32),
            RtFn::WideF64 => Symbol::of::<Wide<f64>>("tl_wide_f64", wide::tl_wide_f64),
            RtFn::WidePowF64 => Symbol::of::<unsafe extern "C" fn(*mut f64, i64)>(
                "tl_wide_pow_f64",
                wide::tl_wide_pow_f64,
            ),
            RtFn::WideRowF32 => {
                Symbol::of::<WideRow<f32>>("tl_wide_row_f32", wide::tl_wide_row_f32)
            }
            RtFn::WideRowF64 => {
                Symbol::of::<WideRow<f64>>("tl_wide_row_f64", wide::tl_wide_row_f64)
            }
            RtFn::WideDotF32 => {
                Symbol::of::<WideDot<f32>>("tl_wide_dot_f32", wide::tl_wide_dot_f32)
            }
            RtFn::WideDotF64 => {
                Symbol::of::<WideDot<f64>>("tl_wide_dot_f64", wide::tl_wide_dot_f64)
            }
            RtFn::WideColsF32 => {
                Symbol::of::<WideCols<f32>>("tl_wide_cols_f32", wide::tl_wide_cols_f32)
            }
            RtFn::WideColsF64 => {
                Symbol::of::<WideCols<f64>>("tl_wide_cols_f64", wide::tl_wide_cols_f64)
            }
        }
    }

    /// The name the function is imported and registered under.
    pub(crate) fn name(self) -> &'static str {
        self.symbol().name
    }

    /// The function's Cranelift signature under `call_conv`.
    pub(crate) fn signature(self, call_conv: CallConv) -> Signature {
        let sym = self.symbol();
        let mut sig = Signature::new(call_conv);
        sig.params
            .extend(sym.params.iter().map(|t| AbiParam::new(*t)));
        sig.returns
            .extend(sym.returns.iter().map(|t| AbiParam::new(*t)));
        sig
    }
}

/// The host's pointer type: runtime functions are host functions, called
/// by code compiled for the host.
const PTR: Type = if size_of::<usize>() == 8 {
    types::I64
} else {
    types::I32
};

/// A Rust type as compiled code passes it.
trait AbiType {
    /// Its Cranelift type.
    const TYPE: Type;
}

macro_rules! abi_types {
    ($($t:ty => $c:expr),*) => {$(
        impl AbiType for $t {
            const TYPE: Type = $c;
        }
    )*};
}
abi_types!(
    i8 => types::I8, i16 => types::I16, i32 => types::I32, i64 => types::I64,
    u8 => types::I8, u16 => types::I16, u32 => types::I32, u64 => types::I64,
    f32 => types::F32, f64 => types::F64, KernelFn => PTR
);

impl<T> AbiType for *const T {
    const TYPE: Type = PTR;
}

impl<T> AbiType for *mut T {
    const TYPE: Type = PTR;
}

/// A result type as compiled code receives it: none or one value.
trait AbiReturn {
    /// Its Cranelift types.
    const TYPES: &'static [Type];
}

impl AbiReturn for () {
    const TYPES: &'static [Type] = &[];
}

impl<T: AbiType> AbiReturn for T {
    const TYPES: &'static [Type] = &[T::TYPE];
}

/// The Rust type of a runtime function: its Cranelift signature, and its
/// address.
trait FnSig: Copy {
    /// The parameters' Cranelift types.
    const PARAMS: &'static [Type];
    /// The result's Cranelift types.
    const RETURNS: &'static [Type];
    /// The function's address.
    fn addr(self) -> *const u8;
}

macro_rules! fn_sigs {
    ($(($($p:ident),*)),*) => {$(
        impl<R: AbiReturn, $($p: AbiType),*> FnSig for unsafe extern "C" fn($($p),*) -> R {
            const PARAMS: &'static [Type] = &[$($p::TYPE),*];
            const RETURNS: &'static [Type] = R::TYPES;
            fn addr(self) -> *const u8 {
                self as *const u8
            }
        }
    )*};
}
fn_sigs!(
    (A),
    (A, B),
    (A, B, C),
    (A, B, C, D),
    (A, B, C, D, E),
    (A, B, C, D, E, F),
    (A, B, C, D, E, F, G),
    (A, B, C, D, E, F, G, H)
);

#[cfg(test)]
mod tests {
    use super::RtFn;

    #[test]
    fn runtime_functions_have_one_name_each() {
        let mut names: Vec<&str> = RtFn::ALL.iter().map(|f| f.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), RtFn::ALL.len());
        assert!(names.iter().all(|n| n.starts_with("tl_")));
    }
}
