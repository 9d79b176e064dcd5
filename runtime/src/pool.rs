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

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

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
/// part runs on the calling thread, in order.
pub fn run_parts(parts: usize, f: &(dyn Fn(usize) + Sync)) {
    match pool() {
        Some(pool) if parts > 1 => {
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

/// Spins until `ready` or for at most [`SPIN`], whichever comes first.
/// The scope's own wait puts the caller to sleep when its part finishes
/// first, and a split then costs two context switches, where the other
/// parts of a balanced split finish microseconds later (a loop of small
/// splits, as the RNN's steps, paid them every iteration). A part that
/// runs longer (or panics) still ends in the scope's sleeping wait.
fn wait_briefly(ready: impl Fn() -> bool) {
    let start = Instant::now();
    let mut spins = 0u32;
    while !ready() {
        std::hint::spin_loop();
        spins += 1;
        if spins.is_multiple_of(64) && start.elapsed() >= SPIN {
            return;
        }
    }
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

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use std::sync::Mutex;

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
