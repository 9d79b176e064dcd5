//! Which kernels run split over threads, decided once per compilation.
//!
//! Code generation calls a kernel (or runs a row group) through the
//! parallel runtime helpers exactly when [`kernel_split`] / [`group_split`]
//! say [`Split::Ranges`], and the fused plan's dump lists every decision
//! with its reason ([`record`]), so a dump says which kernels a call
//! splits and into how many ranges.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::codegen::{self, JitOptions};
use crate::fusion::{self, Gemm, Kernel, Plan, RowGroup, Step};
use crate::rt;
use tensorlift_runtime::kernels::gemm::GemmSplit;
use tensorlift_runtime::pool;

/// How one kernel (or row group) runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Split {
    /// Split into this many contiguous ranges of its outermost dim, one per
    /// thread of the pool (at most one per row).
    Ranges(usize),
    /// On the calling thread, for this reason.
    One(&'static str),
}

/// The decision for a kernel that is not part of a row group. Mirrors
/// what the runtime helper does at run time with the pool it finds then
/// (the pool's size at compile time is assumed).
pub(crate) fn kernel_split(k: &Kernel, opts: &JitOptions) -> Split {
    if !opts.threads {
        return Split::One(THREADS_OFF);
    }
    if !fusion::range_capable(k) {
        return Split::One(if k.dims.is_empty() {
            "one thread: a scalar kernel"
        } else {
            "one thread: its outermost dim is reduced"
        });
    }
    if !codegen::splittable(k) {
        return Split::One("one thread: memory-bound (too few ops per element)");
    }
    decide(
        codegen::kernel_work(k, opts),
        k.dims.first().copied().unwrap_or(1),
    )
}

/// The decision for a row group: its kernels run block by block over
/// ranges of its rows, split when one of them is compute-bound and their
/// work together pays for the threads.
pub(crate) fn group_split(plan: &Plan, g: &RowGroup, opts: &JitOptions) -> Split {
    if !opts.threads {
        return Split::One(THREADS_OFF);
    }
    let kernels = || {
        plan.steps[g.start..g.end].iter().filter_map(|s| match s {
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
    if !kernels().any(codegen::splittable) {
        return Split::One("one thread: memory-bound (too few ops per element)");
    }
    let work = kernels().fold(0usize, |w, k| {
        w.saturating_add(codegen::kernel_work(k, opts))
    });
    decide(work, g.rows)
}

const THREADS_OFF: &str = "one thread: threads are disabled (JitOptions.threads = false)";

fn decide(work: usize, rows: usize) -> Split {
    let threads = pool::threads();
    if work < rt::PARALLEL_WORK as usize {
        Split::One("one thread: too little work to pay for waking the pool")
    } else if rows < 2 {
        Split::One("one thread: a single row")
    } else if threads < 2 {
        Split::One("one thread: one thread allowed (RAYON_NUM_THREADS=1, or one core)")
    } else {
        Split::Ranges(threads.min(rows))
    }
}

/// The parallel sections of a call of `plan`: the kernel steps, row groups
/// and GEMMs that split over the pool, one inside a loop counted twice (it
/// runs once per iteration).
pub(crate) fn sections(plan: &Plan, opts: &JitOptions) -> usize {
    let threads = pool::threads();
    // Steps between a label and a jump back to it.
    let looped = |i: usize| {
        plan.steps[..=i].iter().any(|s| {
            let Step::Label(l) = s else { return false };
            plan.steps[i..]
                .iter()
                .any(|t| matches!(t, Step::Jump(j) if j == l))
        })
    };
    let mut n = 0;
    for (i, step) in plan.steps.iter().enumerate() {
        let split = if let Some(g) = plan.groups.iter().find(|g| g.start == i) {
            matches!(group_split(plan, g, opts), Split::Ranges(_))
        } else if plan.groups.iter().any(|g| g.start < i && i < g.end) {
            false
        } else {
            match step {
                Step::Kernel(k) => matches!(kernel_split(k, opts), Split::Ranges(_)),
                Step::Gemm(g) => {
                    opts.threads && !matches!(g.dims().split(threads), GemmSplit::One(_))
                }
                Step::Runtime { .. }
                | Step::Copy { .. }
                | Step::Label(_)
                | Step::Jump(_)
                | Step::BranchUnless { .. }
                | Step::Switch { .. } => false,
            }
        };
        if split {
            n += if looped(i) { 2 } else { 1 };
        }
    }
    n
}

/// Keeps the pool's other workers awake for the length of one call: a call
/// with several parallel sections (an MLP gradient has seven: five GEMMs, a
/// row group, a copy) runs one-thread kernels between them, long enough
/// for rayon's idle workers to go to sleep and be woken for the next
/// section — 80 context switches per call, whose cost made one call 3.7 ms
/// and the next 6 ms. While the guard lives, a job per other worker spins
/// in `rayon::yield_now`, which runs the call's parts as soon as they are
/// spawned (Eigen's pool spins between XLA's parallel ops the same way).
/// Every worker of the pool spins, so a split wakes no thread (the pool
/// has one worker fewer than the cores: the caller is the last). Nothing
/// is spawned for a call from one of the pool's workers (a worker waiting
/// in a scope could pick up its own spinning job and never return to end
/// it) or with one thread.
pub(crate) struct KeepAwake(Option<Arc<AtomicBool>>);

impl KeepAwake {
    /// Starts the spinning jobs when `sections` ≥ 2.
    pub(crate) fn start(sections: usize) -> Self {
        let threads = pool::threads();
        if sections < 2 || threads < 2 || pool::is_worker() {
            return KeepAwake(None);
        }
        let on = Arc::new(AtomicBool::new(true));
        for _ in 1..threads {
            let on = Arc::clone(&on);
            let spun = pool::spawn(move || {
                while on.load(Ordering::Acquire) {
                    if rayon::yield_now() != Some(rayon::Yield::Executed) {
                        std::hint::spin_loop();
                    }
                }
            });
            if spun.is_err() {
                break;
            }
        }
        KeepAwake(Some(on))
    }
}

impl Drop for KeepAwake {
    fn drop(&mut self) {
        if let Some(on) = &self.0 {
            on.store(false, Ordering::Release);
        }
    }
}

/// Appends one `threads:` decision per kernel step and row group to the
/// plan's decisions (the fused-plan dump prints them).
pub(crate) fn record(plan: &mut Plan, opts: &JitOptions) {
    let mut lines = Vec::new();
    for (i, step) in plan.steps.iter().enumerate() {
        if let Some(g) = plan.groups.iter().find(|g| g.start == i) {
            let what = format!("row group steps {}..{}", g.start, g.end);
            lines.push(line(&what, group_split(plan, g, opts), g.rows));
        } else if plan.groups.iter().any(|g| g.start < i && i < g.end) {
            continue;
        } else if let Step::Kernel(k) = step {
            let what = format!("kernel '{}' (step {i})", k.name);
            let rows = k.dims.first().copied().unwrap_or(1);
            lines.push(line(&what, kernel_split(k, opts), rows));
        } else if let Step::Gemm(g) = step {
            lines.push(gemm_line(&format!("gemm '{}' (step {i})", g.name), g, opts));
        }
    }
    for step in &mut plan.steps {
        if let Step::Gemm(g) = step {
            g.threads = opts.threads;
        }
    }
    let n = sections(plan, opts);
    if n >= 2 {
        lines.push(format!(
            "threads: {n} parallel sections: the pool's other workers spin through the call"
        ));
    }
    plan.decisions.extend(lines);
}

/// A GEMM step's decision: the runtime's GEMM splits it at run time by the
/// same rule (`GemmDims::split`) with the pool it finds then.
fn gemm_line(what: &str, g: &Gemm, opts: &JitOptions) -> String {
    if !opts.threads {
        return format!("threads: {what}: {THREADS_OFF}");
    }
    match g.dims().split(pool::threads()) {
        GemmSplit::One(reason) => format!("threads: {what}: {reason}"),
        GemmSplit::Batch(n) => {
            format!(
                "threads: {what}: split into {n} ranges of its {} batch items",
                g.b
            )
        }
        GemmSplit::Columns(n) => {
            format!(
                "threads: {what}: split into {n} ranges of its {} columns",
                g.n
            )
        }
        GemmSplit::Rows(n) => format!("threads: {what}: split into {n} ranges of its {} rows", g.m),
    }
}

fn line(what: &str, split: Split, rows: usize) -> String {
    match split {
        Split::Ranges(n) => format!("threads: {what}: split into {n} ranges of its {rows} rows"),
        Split::One(reason) => format!("threads: {what}: {reason}"),
    }
}
