//! The threads a call's work splits over: the calling thread and a pool of
//! workers of our own, one fewer than the threads allowed.
//!
//! The caller always runs a part of each split itself, so a pool as large
//! as the machine would put one thread more than there are cores to work
//! whenever a split wakes the pool (with rayon's global pool on two cores,
//! a split woke the sleeping second worker while the first spun; see
//! docs/compiler.md, "The threads"). The pool is not rayon's global one,
//! so a program's own rayon work neither takes tensorlift's workers nor
//! blocks its splits.
//!
//! The thread count is `RAYON_NUM_THREADS` when set (the calling thread
//! included: `RAYON_NUM_THREADS=1` runs everything on the calling thread),
//! otherwise the machine's available parallelism.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::fpmode::FpMode;

/// The pool's workers: `None` with one thread in all, or where the threads
/// could not be started.
fn pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let workers = allowed_threads().saturating_sub(1);
        if workers == 0 {
            return None;
        }
        rayon::ThreadPoolBuilder::new()
            .num_threads(workers)
            .thread_name(|i| format!("tensorlift-{i}"))
            // A thread starts in its creator's floating-point mode, and the
            // pool may be created inside a call that flushes denormals.
            .start_handler(|_| FpMode::ieee().set())
            .build()
            .ok()
    })
    .as_ref()
}

fn allowed_threads() -> usize {
    std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// How many threads a split uses: the pool's workers and the caller.
pub fn threads() -> usize {
    pool().map_or(1, |p| p.current_num_threads() + 1)
}

/// Whether the current thread is one of the pool's workers.
pub fn is_worker() -> bool {
    pool().is_some_and(|p| p.current_thread_index().is_some())
}

/// Runs `f(0)`, …, `f(parts - 1)`: part 0 on the calling thread, the
/// others on the pool, returning once all have run (a panic in a part is
/// raised again here, after every part finished). Without a pool every
/// part runs on the calling thread, in order. Every part runs in the
/// caller's denormal mode ([`FpMode`]).
pub fn run_parts(parts: usize, f: &(dyn Fn(usize) + Sync)) {
    if parts < 2 {
        return (0..parts).for_each(f);
    }
    let mode = FpMode::current();
    let in_mode = |i: usize| {
        let _mode = mode.enter();
        f(i);
    };
    let f: &(dyn Fn(usize) + Sync) = &in_mode;
    if SPINNING.load(Ordering::Acquire) > 0 && BOARD.run(parts, f) {
        return;
    }
    match pool() {
        Some(pool) => {
            // Waiting here, a worker of a rayon pool not ours runs other
            // jobs of that pool: in the mode outside compiled code.
            let _waiting = FpMode::outer().enter();
            let done = AtomicUsize::new(0);
            pool.in_place_scope(|s| {
                for i in 1..parts {
                    let done = &done;
                    s.spawn(move |_| {
                        f(i);
                        done.fetch_add(1, Ordering::Release);
                    });
                }
                f(0);
                wait_briefly(|| done.load(Ordering::Acquire) == parts - 1);
            });
        }
        _ => (0..parts).for_each(f),
    }
}

/// Spins until `ready` (true) or for at most [`SPIN`] (false), whichever
/// comes first.
/// The scope's own wait puts the caller to sleep when its part finishes
/// first, and a split then costs two context switches, where the other
/// parts of a balanced split finish microseconds later (a loop of small
/// splits, as the RNN's steps, paid them every iteration). A part that
/// runs longer (or panics) still ends in the scope's sleeping wait.
fn wait_briefly(ready: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    let mut spins = 0u32;
    while !ready() {
        std::hint::spin_loop();
        spins += 1;
        if spins.is_multiple_of(64) && start.elapsed() >= SPIN {
            return false;
        }
    }
    true
}

/// How long the caller spins for the other parts of a split (a context
/// switch and back costs several microseconds; the pool's workers spin
/// through a call for the same reason, `KeepAwake` in the compiler).
const SPIN: Duration = Duration::from_micros(50);

/// Runs `job` on the pool; returns it unrun when there is no pool.
pub fn spawn<F: FnOnce() + Send + 'static>(job: F) -> Result<(), F> {
    match pool() {
        Some(pool) => {
            pool.spawn(job);
            Ok(())
        }
        None => Err(job),
    }
}

/// Keeps every worker of the pool spinning until the guard drops (see
/// [`keep_awake`]).
#[derive(Debug)]
pub struct Awake(Option<Arc<AtomicBool>>);

/// Spawns a spinning job on every worker of the pool, which runs splits
/// the moment they are posted until the returned guard drops: a call with
/// several splits runs one-thread code between them, long enough for idle
/// workers to go to sleep and be woken for the next split (Eigen's pool
/// spins between XLA's parallel ops the same way). While workers spin,
/// [`run_parts`] posts its parts on a board they poll instead of going
/// through rayon's queues. Nothing is spawned from one of the pool's own
/// workers (a worker waiting in a scope could pick up its own spinning job
/// and never return to end it) or with one thread.
pub fn keep_awake() -> Awake {
    let threads = threads();
    if threads < 2 || is_worker() {
        return Awake(None);
    }
    let on = Arc::new(AtomicBool::new(true));
    for _ in 1..threads {
        let on = Arc::clone(&on);
        let spun = spawn(move || {
            SPINNING.fetch_add(1, Ordering::AcqRel);
            while on.load(Ordering::Acquire) {
                if BOARD.run_one() {
                    continue;
                }
                if rayon::yield_now() != Some(rayon::Yield::Executed) {
                    std::hint::spin_loop();
                }
            }
            SPINNING.fetch_sub(1, Ordering::AcqRel);
        });
        if spun.is_err() {
            break;
        }
    }
    Awake(Some(on))
}

impl Drop for Awake {
    fn drop(&mut self) {
        if let Some(on) = &self.0 {
            on.store(false, Ordering::Release);
        }
    }
}

/// Workers spinning in [`keep_awake`]'s jobs.
static SPINNING: AtomicUsize = AtomicUsize::new(0);

/// The split on the board.
static BOARD: Board = Board {
    busy: AtomicBool::new(false),
    state: AtomicU64::new(0),
    job: AtomicPtr::new(std::ptr::null_mut()),
};

/// One split at a time handed to the spinning workers without allocating
/// or queueing: the caller posts its parts and runs them with whoever
/// claims them first (a rayon scope allocates a job per part and goes
/// through the pool's injector, several times the cost; docs/compiler.md).
struct Board {
    /// Held by the caller whose split is posted.
    busy: AtomicBool,
    /// The posting's generation (bits 32..64), the next part to claim
    /// (16..32) and the number of parts (0..16): a part is claimed by a
    /// compare-and-swap of the whole word, so a claim made on a stale
    /// reading fails instead of taking a part of a later split.
    state: AtomicU64,
    /// The posted [`Job`]; read only by the holder of a claimed part,
    /// whose caller cannot return (and free it) until that part is done.
    job: AtomicPtr<()>,
}

/// A posted split, on its caller's stack.
struct Job<'a> {
    f: &'a (dyn Fn(usize) + Sync),
    /// Parts not yet finished.
    unfinished: AtomicUsize,
    /// The first panic of a part run elsewhere than the caller.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

const PART_BITS: u32 = 16;
const PART_MASK: u64 = (1 << PART_BITS) - 1;

impl Board {
    /// Runs `f(0..parts)` through the board: part 0 on the caller, the
    /// others by whoever claims them (the caller included, so nothing
    /// waits on a worker that is busy elsewhere). False, having run
    /// nothing, when another split holds the board or `parts` does not fit.
    fn run(&self, parts: usize, f: &(dyn Fn(usize) + Sync)) -> bool {
        if parts as u64 > PART_MASK
            || (self.busy)
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return false;
        }
        let job = Job {
            f,
            unfinished: AtomicUsize::new(parts),
            panic: Mutex::new(None),
        };
        let generation = (self.state.load(Ordering::Relaxed) >> (2 * PART_BITS)) + 1;
        self.job
            .store((&raw const job).cast_mut().cast::<()>(), Ordering::Release);
        // Part 0 is the caller's: claims start at 1.
        self.state.store(
            (generation << (2 * PART_BITS)) | (1 << PART_BITS) | parts as u64,
            Ordering::Release,
        );
        let first = catch_unwind(AssertUnwindSafe(|| f(0)));
        job.unfinished.fetch_sub(1, Ordering::AcqRel);
        while self.run_one() {}
        // (Past the spin, a worker preempted in the middle of a part: let
        // it run.)
        while !wait_briefly(|| job.unfinished.load(Ordering::Acquire) == 0) {
            std::thread::yield_now();
        }
        self.job.store(std::ptr::null_mut(), Ordering::Relaxed);
        self.busy.store(false, Ordering::Release);
        if let Err(p) = first {
            resume_unwind(p);
        }
        let panic = job.panic.lock().map_or(None, |mut p| p.take());
        if let Some(p) = panic {
            resume_unwind(p);
        }
        true
    }

    /// Claims and runs one part of the posted split; false when none is
    /// left to claim.
    fn run_one(&self) -> bool {
        let mut s = self.state.load(Ordering::Acquire);
        loop {
            let (next, parts) = ((s >> PART_BITS) & PART_MASK, s & PART_MASK);
            if next >= parts {
                return false;
            }
            match (self.state).compare_exchange_weak(
                s,
                s + (1 << PART_BITS),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break self.run_claimed(next as usize),
                Err(now) => s = now,
            }
        }
        true
    }

    /// Runs claimed part `part` of the posted job.
    fn run_claimed(&self, part: usize) {
        // SAFETY: the part was claimed from the posting whose job this is
        // (a posting replaces the job only once every part of the previous
        // one has finished, and this one has not), and the caller keeps the
        // job alive on its stack until `unfinished` reaches 0, after the
        // `fetch_sub` below: the last use of `job` here.
        let job = unsafe { &*self.job.load(Ordering::Acquire).cast::<Job<'_>>() };
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| (job.f)(part)))
            && let Ok(mut slot) = job.panic.lock()
        {
            slot.get_or_insert(p);
        }
        job.unfinished.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_part_runs_once_and_the_caller_runs_the_first() {
        let caller = std::thread::current().id();
        for parts in [0, 1, 2, 3, 17] {
            let ran = Mutex::new(vec![0; parts]);
            let first = Mutex::new(None);
            super::run_parts(parts, &|i| {
                ran.lock().unwrap()[i] += 1;
                if i == 0 {
                    *first.lock().unwrap() = Some(std::thread::current().id());
                }
            });
            assert_eq!(*ran.lock().unwrap(), vec![1; parts], "{parts} parts");
            if parts > 0 {
                assert_eq!(*first.lock().unwrap(), Some(caller), "{parts} parts");
            }
        }
    }

    #[test]
    fn parts_run_in_the_callers_denormal_mode_and_workers_return_to_theirs() {
        use crate::fpmode::FpMode;
        // Each part on the pool (queued, then posted to spinning workers)
        // reports its mode, from a flushing caller and then an IEEE one.
        for spin in [false, true] {
            let _awake = if spin { spinning() } else { None };
            for mode in [
                FpMode::flush_denormals(),
                FpMode::ieee(),
                FpMode::flush_denormals(),
            ] {
                let _in = mode.enter();
                let seen = Mutex::new(Vec::new());
                super::run_parts(16, &|_| {
                    // Long enough that the workers take parts.
                    std::thread::sleep(std::time::Duration::from_micros(200));
                    seen.lock().unwrap().push(FpMode::current());
                });
                assert_eq!(*seen.lock().unwrap(), vec![mode; 16], "spinning {spin}");
            }
            assert_eq!(FpMode::current(), FpMode::ieee());
        }
        // A worker's own jobs run in IEEE mode, even when the pool was
        // started (and its threads created) inside the flushing split
        // above — when this test is the first in its process to split.
        let (tx, rx) = std::sync::mpsc::channel();
        if super::spawn(move || tx.send(FpMode::current()).unwrap()).is_ok() {
            assert_eq!(rx.recv().unwrap(), FpMode::ieee());
        }
    }

    /// A worker of a rayon pool not ours that calls compiled code (a
    /// program's `par_iter`) runs that pool's other jobs while it waits
    /// for a split: they run in the mode outside the call, not in the
    /// call's (seen failing before they did).
    #[test]
    fn a_foreign_pools_jobs_run_in_their_mode_while_a_split_waits() {
        use crate::fpmode::FpMode;
        if super::threads() < 2 {
            return;
        }
        let foreign = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let seen = foreign.install(|| {
            let (tx, rx) = std::sync::mpsc::channel();
            let call = FpMode::enter_call(Some(FpMode::flush_denormals()));
            // Queued behind this job on the pool's one worker: it runs
            // while this job waits for the split's parts.
            rayon::spawn(move || {
                let _ = tx.send(FpMode::current());
            });
            super::run_parts(4, &|_| {
                std::thread::sleep(std::time::Duration::from_millis(20));
            });
            drop(call);
            rx.recv_timeout(std::time::Duration::from_secs(10)).ok()
        });
        // (None: the split went to spinning workers, which never steal.)
        if let Some(mode) = seen {
            assert_eq!(mode, FpMode::ieee());
        }
    }

    /// `keep_awake`'s guard once its spinners run (`None`: no pool).
    fn spinning() -> Option<super::Awake> {
        let awake = super::keep_awake();
        awake.0.as_ref()?;
        let start = std::time::Instant::now();
        while super::SPINNING.load(Ordering::Acquire) == 0 {
            assert!(start.elapsed().as_secs() < 60, "no spinner started");
            std::thread::yield_now();
        }
        Some(awake)
    }

    #[test]
    fn splits_posted_to_spinning_workers_run_every_part_once() {
        let _awake = spinning();
        std::thread::scope(|s| {
            for t in 0..3 {
                s.spawn(move || {
                    let caller = std::thread::current().id();
                    for round in 0..2000 {
                        let parts = 2 + (round + t) % 7;
                        let ran: Vec<AtomicUsize> =
                            (0..parts).map(|_| AtomicUsize::new(0)).collect();
                        let first = Mutex::new(None);
                        super::run_parts(parts, &|i| {
                            ran[i].fetch_add(1, Ordering::Relaxed);
                            if i == 0 {
                                *first.lock().unwrap() = Some(std::thread::current().id());
                            }
                        });
                        let counts: Vec<usize> =
                            ran.iter().map(|r| r.load(Ordering::Relaxed)).collect();
                        assert_eq!(counts, vec![1; parts], "round {round} of thread {t}");
                        assert_eq!(*first.lock().unwrap(), Some(caller));
                    }
                });
            }
        });
    }

    #[test]
    fn a_panicking_part_is_raised_by_the_caller_and_frees_the_board() {
        let _awake = spinning();
        for bad in [0, 1, 3] {
            let r = std::panic::catch_unwind(|| {
                super::run_parts(4, &|i| {
                    if i == bad {
                        std::panic::panic_any(format!("part {i}"));
                    }
                })
            });
            let payload = r.expect_err("the panic is raised again");
            assert_eq!(
                payload.downcast_ref::<String>().map(String::as_str),
                Some(format!("part {bad}").as_str())
            );
            let ran = AtomicUsize::new(0);
            super::run_parts(3, &|_| {
                ran.fetch_add(1, Ordering::Relaxed);
            });
            assert_eq!(
                ran.load(Ordering::Relaxed),
                3,
                "after a panic in part {bad}"
            );
        }
    }

    #[test]
    fn the_pool_has_one_worker_fewer_than_the_threads_allowed() {
        assert_eq!(super::threads(), super::allowed_threads().max(1));
        assert!(!super::is_worker());
        let (tx, rx) = std::sync::mpsc::channel();
        match super::spawn(move || tx.send(super::is_worker()).unwrap()) {
            Ok(()) => assert!(rx.recv().unwrap(), "a spawned job runs on a worker"),
            Err(_) => assert_eq!(super::threads(), 1),
        }
    }
}
