//! Which kernels run split over threads, decided once per compilation.
//!
//! Code generation calls a kernel (or runs a row group) through the
//! parallel runtime helpers exactly when [`kernel_split`] / [`group_split`]
//! give a split ([`Split::parts`]), and the fused plan's dump lists every decision
//! with its reason ([`record`]), so a dump says which kernels a call
//! splits and into how many ranges.

use std::sync::OnceLock;

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
    /// Split into this many ranges although memory-bound or small: a
    /// kernel inside a loop reading `bytes` that the loop never writes,
    /// more than half of one core's L2 cache. Each thread reads the same
    /// rows every iteration and keeps them in its own cache, where one
    /// thread would read them all from the shared L3 every iteration
    /// (docs/compiler.md, "Loop-invariant reads").
    Resident {
        /// Ranges.
        parts: usize,
        /// The loop-invariant bytes the kernel reads.
        bytes: usize,
    },
    /// On the calling thread, for this reason.
    One(&'static str),
}

impl Split {
    /// The number of ranges, or `None` on the calling thread.
    pub(crate) fn parts(self) -> Option<usize> {
        match self {
            Split::Ranges(n) | Split::Resident { parts: n, .. } => Some(n),
            Split::One(_) => None,
        }
    }
}

/// The decision for kernel step `i` of `plan` when it is not part of a
/// row group. Mirrors what the runtime helper does at run time with the
/// pool it finds then (the pool's size at compile time is assumed).
pub(crate) fn kernel_split(plan: &Plan, i: usize, k: &Kernel, opts: &JitOptions) -> Split {
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
    let bytes = loop_invariant_bytes(plan, i, k);
    let threads = pool::threads();
    let rows = k.dims.first().copied().unwrap_or(1);
    if bytes >= resident_min_bytes() && threads >= 2 && rows >= 2 {
        return Split::Resident {
            parts: threads.min(rows),
            bytes,
        };
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
    let kernels = || g.kernels(plan);
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
    let mut n = 0;
    for (i, step) in plan.steps.iter().enumerate() {
        let split = if let Some(g) = plan.groups.iter().find(|g| g.start == i) {
            group_split(plan, g, opts).parts().is_some()
        } else if plan.groups.iter().any(|g| g.start < i && i < g.end) {
            false
        } else {
            match step {
                Step::Kernel(k) => kernel_split(plan, i, k, opts).parts().is_some(),
                Step::Gemm(g) => opts.threads && !matches!(g.split(threads), GemmSplit::One(_)),
                Step::Runtime { .. }
                | Step::Pack(_)
                | Step::Copy { .. }
                | Step::Label(_)
                | Step::Jump(_)
                | Step::BranchUnless { .. }
                | Step::Switch { .. } => false,
            }
        };
        if split {
            n += if fusion::innermost_loop(plan, i, i).is_some() {
                2
            } else {
                1
            };
        }
    }
    n
}

/// Keeps the pool's workers awake for the length of one call with two or
/// more parallel sections (an MLP gradient has seven: five GEMMs, a row
/// group, a copy): between them it runs one-thread kernels, long enough
/// for idle workers to go to sleep and be woken for the next section — 80
/// context switches per call, whose cost made one call 3.7 ms and the next
/// 6 ms ([`pool::keep_awake`]). The workers spin until the guard drops.
pub(crate) fn keep_awake(sections: usize) -> Option<pool::Awake> {
    (sections >= 2).then(pool::keep_awake)
}

/// Appends one `threads:` decision per kernel step and row group to the
/// plan's decisions (the fused-plan dump prints them).
pub(crate) fn record(plan: &mut Plan, opts: &JitOptions) {
    // An epilogue that would split as a kernel step of its own splits
    // over as many row ranges after a product not split by rows.
    let epilogue_splits: Vec<bool> = (plan.steps.iter().enumerate())
        .map(|(i, step)| match step {
            Step::Gemm(g) => g
                .epilogue
                .as_ref()
                .is_some_and(|e| kernel_split(plan, i, &e.kernel, opts).parts().is_some()),
            Step::Kernel(_)
            | Step::Pack(_)
            | Step::Runtime { .. }
            | Step::Copy { .. }
            | Step::Label(_)
            | Step::Jump(_)
            | Step::BranchUnless { .. }
            | Step::Switch { .. } => false,
        })
        .collect();
    for (step, split) in plan.steps.iter_mut().zip(epilogue_splits) {
        if let Step::Gemm(g) = step {
            g.threads = opts.threads;
            if let Some(e) = &mut g.epilogue {
                e.split = split;
            }
        }
    }
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
            lines.push(line(&what, kernel_split(plan, i, k, opts), rows));
        } else if let Step::Gemm(g) = step {
            lines.push(gemm_line(&format!("gemm '{}' (step {i})", g.name), g, opts));
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
    let split = g.split(pool::threads());
    let then = match (&g.epilogue, split) {
        (Some(e), GemmSplit::Rows(_)) => {
            format!("; its epilogue '{}' on each part's rows", e.kernel.name)
        }
        (Some(e), GemmSplit::Tiles { .. }) => format!(
            "; its epilogue '{}' on each range of rows once its tiles are done",
            e.kernel.name
        ),
        (Some(e), GemmSplit::One(_) | GemmSplit::Batch(_) | GemmSplit::Columns(_)) => {
            // (`Epilogue::split`, set by `record`; the runtime's ranges.)
            match e.split {
                true => format!(
                    "; its epilogue '{}' after it, in {} ranges of rows",
                    e.kernel.name,
                    pool::threads().min(g.m)
                ),
                false => format!("; its epilogue '{}' after it, on one thread", e.kernel.name),
            }
        }
        (None, _) => String::new(),
    };
    let line = match split {
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
        GemmSplit::Tiles { rows, columns } => format!(
            "threads: {what}: split into {rows}×{columns} tiles of its {} rows and {} columns",
            g.m, g.n
        ),
    };
    line + &then
}

fn line(what: &str, split: Split, rows: usize) -> String {
    match split {
        Split::Ranges(n) => format!("threads: {what}: split into {n} ranges of its {rows} rows"),
        Split::Resident { parts, bytes } => format!(
            "threads: {what}: split into {parts} ranges of its {rows} rows: inside a loop, it \
             reads {} KiB the loop never writes, which each thread keeps in its own cache \
             (from {} KiB, half of a core's L2)",
            bytes >> 10,
            resident_min_bytes() >> 10
        ),
        Split::One(reason) => format!("threads: {what}: {reason}"),
    }
}

/// The bytes kernel step `i` reads from slots that the innermost loop
/// around it (the steps from a label to the jump back to it) never
/// writes; 0 outside loops.
fn loop_invariant_bytes(plan: &Plan, i: usize, k: &Kernel) -> usize {
    let Some((start, end)) = fusion::innermost_loop(plan, i, i) else {
        return 0;
    };
    let written = fusion::loop_writes(plan, start, end);
    let mut read: Vec<usize> = k.nodes.iter().filter_map(fusion::ENode::slot).collect();
    read.sort_unstable();
    read.dedup();
    (read.into_iter())
        .filter(|s| !written.contains(s))
        .map(|s| plan.slots[s].bytes())
        .sum()
}

/// Loop-invariant reads from this many bytes split a kernel over threads
/// ([`Split::Resident`]): half of one core's L2 cache as sysfs gives it,
/// else 512 KiB (half of a Zen 4's).
fn resident_min_bytes() -> usize {
    static BYTES: OnceLock<usize> = OnceLock::new();
    *BYTES.get_or_init(|| l2_bytes().map_or(512 << 10, |b| b / 2))
}

/// The size of cpu0's level-2 data (or unified) cache, from sysfs.
fn l2_bytes() -> Option<usize> {
    (0..8).find_map(|i| {
        let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{i}");
        let read = |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).ok();
        let level = read("level")?;
        let kind = read("type")?;
        if level.trim() != "2" || kind.trim() == "Instruction" {
            return None;
        }
        cache_size(&read("size")?)
    })
}

/// A sysfs cache size (`1024K`, `2M`, `524288`) in bytes.
fn cache_size(text: &str) -> Option<usize> {
    let t = text.trim();
    let (digits, unit) = match t.as_bytes().last()? {
        b'K' => (&t[..t.len() - 1], 1 << 10),
        b'M' => (&t[..t.len() - 1], 1 << 20),
        _ => (t, 1),
    };
    digits.parse::<usize>().ok()?.checked_mul(unit)
}

#[cfg(test)]
mod tests {
    #[test]
    fn cache_sizes_read_as_sysfs_writes_them() {
        assert_eq!(super::cache_size("1024K\n"), Some(1 << 20));
        assert_eq!(super::cache_size("2M"), Some(2 << 20));
        assert_eq!(super::cache_size("524288"), Some(512 << 10));
        assert_eq!(super::cache_size(""), None);
        assert_eq!(super::cache_size("K"), None);
        assert_eq!(super::cache_size("lots"), None);
    }
}
