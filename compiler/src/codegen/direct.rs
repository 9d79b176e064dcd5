//! `main` as a list of calls that Rust runs, for plans with no control
//! flow: each step is a call of a kernel, of the runtime's GEMM or of a
//! runtime step, in order, stopping at the first failing status, which is
//! all that the Cranelift `main` of such a plan does. It saves compiling
//! `main` with Cranelift, the largest part of a small program's compile
//! when the process comes back to the compiler cold (docs/benchmarks.md,
//! "`main` without Cranelift"). Plans with labels, jumps or branches (loops
//! and conditionals), whose scalar carries live in registers, keep the
//! Cranelift `main` (`driver.rs`).

use crate::fusion::{Plan, SlotId, Step};
use crate::rt::{self, CallCtx, KernelFn, StepTable};

/// One call of a direct `main`.
#[derive(Clone, Debug)]
pub(crate) enum Call {
    /// A kernel over `[0, n)` of its outermost dim, through the pool's
    /// split from `work` on where given (`rt::tl_parallel`).
    Kernel {
        f: KernelFn,
        n: i64,
        work: Option<i64>,
    },
    /// A row group's kernels, a block of rows at a time
    /// (`rt::tl_row_group`).
    Group {
        fns: Box<[KernelFn]>,
        rows: i64,
        block: i64,
        parallel: bool,
    },
    /// A GEMM or a pack (`rt::tl_gemm`), with its epilogue kernel where it
    /// has one (`rt::tl_gemm_then`).
    Gemm { step: u64, then: Option<KernelFn> },
    /// A runtime step (`rt::tl_runtime_step`).
    Runtime { step: u64 },
    /// `to = from`, whole slots of `bytes` bytes, read through the pointer
    /// table when the call runs (a callback may have redirected `from`).
    Copy {
        from: SlotId,
        to: SlotId,
        bytes: usize,
    },
}

/// True where the plan's `main` can be a list of calls: no labels, jumps
/// or branches.
pub(crate) fn qualifies(plan: &Plan) -> bool {
    plan.steps.iter().all(|s| match s {
        Step::Kernel(_)
        | Step::Gemm(_)
        | Step::Pack(_)
        | Step::Runtime { .. }
        | Step::Copy { .. } => true,
        Step::Label(_) | Step::Jump(_) | Step::BranchUnless { .. } | Step::Switch { .. } => false,
    })
}

/// The calls as text, for the dumps.
pub(crate) fn listing(plan: &Plan, calls: &[(usize, Call)]) -> String {
    let mut out =
        String::from("; main: a list of calls run by Rust (codegen/direct.rs), not compiled\n");
    let name = |i: usize| match &plan.steps[i] {
        Step::Kernel(k) => format!("kernel '{}'", k.name),
        Step::Gemm(g) => format!("gemm '{}'", g.name),
        Step::Pack(_) => "pack".to_string(),
        Step::Runtime { node, .. } => format!("runtime step (node {})", node.0),
        Step::Copy { .. } => "copy".to_string(),
        Step::Label(_) | Step::Jump(_) | Step::BranchUnless { .. } | Step::Switch { .. } => {
            "control flow".to_string()
        }
    };
    for (i, c) in calls {
        let what = match c {
            Call::Kernel { n, work, .. } => match work {
                Some(w) => format!("{} over {n} (split from work {w})", name(*i)),
                None => format!("{} over {n}", name(*i)),
            },
            Call::Group {
                fns,
                rows,
                block,
                parallel,
            } => format!(
                "row group of {} kernels over {rows} rows, {block} at a time{}",
                fns.len(),
                if *parallel { ", split" } else { "" }
            ),
            Call::Gemm { then, .. } => match then {
                Some(_) => format!("{} with its epilogue", name(*i)),
                None => name(*i),
            },
            Call::Runtime { .. } => name(*i),
            Call::Copy { from, to, bytes } => format!("slot {to} = slot {from} ({bytes} bytes)"),
        };
        out.push_str(&format!(";   step {i}: {what}\n"));
    }
    out
}

/// Runs the calls in order; the first failing status is returned (the
/// error is in `ctx`), 0 when all succeed.
///
/// # Safety
/// As the compiled `main`: `bufs` holds a valid pointer of the planned
/// size for every slot, `ctx` is the call's context, `table` the plan the
/// calls were made for, and every function is a kernel of the module
/// compiled with them.
pub(crate) unsafe fn run(
    calls: &[Call],
    table: *const StepTable,
    bufs: *const *mut u8,
    ctx: *mut CallCtx,
) -> i32 {
    for c in calls {
        // SAFETY: the caller's contract, which each runtime entry takes.
        let status = unsafe {
            match c {
                Call::Kernel { f, n, work } => match work {
                    Some(w) => rt::tl_parallel(*f, bufs, ctx, *n, *w),
                    None => f(bufs, ctx, 0, *n),
                },
                Call::Group {
                    fns,
                    rows,
                    block,
                    parallel,
                } => rt::tl_row_group(
                    fns.as_ptr(),
                    fns.len() as i64,
                    bufs,
                    ctx,
                    *rows,
                    *block,
                    i64::from(*parallel),
                ),
                Call::Gemm { step, then } => match then {
                    Some(k) => rt::tl_gemm_then(table, *step, bufs, ctx, *k),
                    None => rt::tl_gemm(table, *step, bufs, ctx),
                },
                Call::Runtime { step } => rt::tl_runtime_step(table, *step, bufs, ctx),
                Call::Copy { from, to, bytes } => {
                    let (src, dst) = (*bufs.add(*from), *bufs.add(*to));
                    if src != dst {
                        std::ptr::copy(src, dst, *bytes);
                    }
                    0
                }
            }
        };
        if status != 0 {
            return status;
        }
    }
    0
}
