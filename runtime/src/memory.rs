//! Tensor buffers: 16-byte aligned, zero-initialized bytes. Buffers of
//! 2 MiB and more are mapped directly and advised to use transparent huge
//! pages, so that first-touching a fresh 16 MiB output costs 8 page faults
//! instead of 4096 (docs/benchmarks.md, "Outputs kept by the caller");
//! small ones come from the heap.
//!
//! Buffers from [`AlignedBytes::for_overwrite`] of 1 MiB and more are
//! recycled: when one is dropped it is kept in a process-wide cache and
//! handed to the next request of the same size, the way XLA's and
//! PyTorch's allocators keep device memory and glibc keeps a freed heap.
//! A compiled function called in a loop then writes its outputs and its
//! arena into memory that is already mapped instead of faulting fresh
//! pages in every call. The cache holds at most 256 MiB of buffers as they
//! are; past that, the mapped buffers recycled longest ago are kept with
//! their pages released lazily (`MADV_FREE`: the kernel takes them back
//! only under memory pressure, and until then they are reused without a
//! page fault), up to a quarter of the memory the process may use in
//! all, and the rest are given back (the oldest first). An allocation
//! that fails gives the whole cache back and tries again (its buffers hold
//! memory and address space). A caller who keeps a batch of
//! 16 MiB results and drops them all then finds them again in the next
//! batch. [`AlignedBytes::zeroed`] takes from the cache too (zeroing by
//! hand), so a chain of allocations reuses what the previous step dropped.
//! [`trim_buffer_cache`] gives the memory back.
//!
//! This file holds all of the runtime's `unsafe` memory code.

use std::sync::Mutex;

/// An allocation of `len` bytes that the allocator refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocFailed {
    /// The bytes asked for.
    pub len: usize,
}

impl AllocFailed {
    fn layout(self) -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(self.len.max(1), 16)
            .unwrap_or(std::alloc::Layout::new::<u128>())
    }
}

impl std::fmt::Display for AllocFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "could not allocate {} bytes", self.len)
    }
}

impl std::error::Error for AllocFailed {}

impl From<AllocFailed> for crate::Error {
    fn from(e: AllocFailed) -> Self {
        crate::Error::ResourceExhausted(tensorlift_ir::Detail::msg(e.to_string()))
    }
}

/// Buffers at least this large (one huge page) are mapped and advised to
/// use huge pages. glibc would serve them from 4 KiB pages, faulted in one
/// by one whenever it has no freed memory to reuse (a caller keeping its
/// results); the cache below does the reusing.
const MAP_THRESHOLD: usize = 2 << 20;

/// Smallest buffer worth recycling: glibc reuses smaller ones itself.
const CACHE_MIN: usize = 1 << 20;
/// Most bytes the cache holds as they are (not released lazily).
const CACHE_MAX_BYTES: usize = 256 << 20;
/// Most buffers the cache holds.
const CACHE_MAX_ENTRIES: usize = 1024;

/// Most bytes the cache holds in all, lazily released ones included: a
/// quarter of the memory the process may use (the machine's, its
/// cgroup's `memory.max`, its `ulimit -v`, whichever is least), and never
/// less than [`CACHE_MAX_BYTES`].
fn cache_max_lazy_bytes() -> usize {
    static MAX: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MAX.get_or_init(|| {
        [
            crate::interp::memory_limit(),
            cgroup_memory_max(),
            crate::interp::address_space_limit(),
        ]
        .into_iter()
        .flatten()
        .min()
        .map_or(CACHE_MAX_BYTES, |m| (m / 4).max(CACHE_MAX_BYTES))
    })
}

/// The cgroup (v2) memory limit of this process, if it has one.
fn cgroup_memory_max() -> Option<usize> {
    std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// What the cache may hold.
#[derive(Clone, Copy, Debug)]
struct Limits {
    /// Smallest buffer it takes.
    min: usize,
    /// Bytes of buffers held as they are.
    firm: usize,
    /// Bytes in all, lazily released buffers included.
    all: usize,
    /// Buffers in all.
    entries: usize,
}

impl Limits {
    fn process() -> Limits {
        Limits {
            min: CACHE_MIN,
            firm: CACHE_MAX_BYTES,
            all: cache_max_lazy_bytes(),
            entries: CACHE_MAX_ENTRIES,
        }
    }
}

/// A freed buffer waiting for reuse (never `Heap`); `lazy` when its pages
/// were released with `MADV_FREE`.
struct Cached {
    storage: Storage,
    lazy: bool,
}

// SAFETY: a cached buffer is owned by the cache alone (its AlignedBytes is
// gone), like a Vec's buffer moved between threads.
unsafe impl Send for Cached {}

static CACHE: Mutex<Vec<Cached>> = Mutex::new(Vec::new());

fn capacity(storage: &Storage) -> usize {
    match storage {
        Storage::Heap(v) => v.len() * 16,
        Storage::Raw { layout, .. } => layout.size(),
        Storage::Mapped { map_len, .. } => *map_len,
    }
}

/// Takes a cached buffer of exactly `len` bytes, if there is one (the
/// most recently recycled: its pages are the likeliest to be in cache).
fn take_cached(len: usize) -> Option<Storage> {
    let mut cache = CACHE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let i = cache.iter().rposition(|c| capacity(&c.storage) == len)?;
    Some(cache.remove(i).storage)
}

/// Keeps `storage` for reuse if it is large (and not larger than the whole
/// cache), within the process's [`Limits`] (see [`admit`]). The pages of
/// the buffers to be held lazily are released outside the lock, the
/// buffers out of the cache meanwhile (no other thread can take one and
/// write it before it is advised), then put back as the oldest.
fn recycle(storage: Storage) {
    let limits = Limits::process();
    let lock = || {
        CACHE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    let (mut evicted, lazy) = admit(&mut lock(), storage, limits);
    if !lazy.is_empty() {
        let (kept, refused): (Vec<Cached>, Vec<Cached>) = lazy
            .into_iter()
            .map(|mut c| {
                c.lazy = release_lazily(&c.storage);
                c
            })
            .partition(|c| c.lazy);
        evicted.extend(refused);
        evicted.extend(readmit(&mut lock(), kept, limits));
    }
    for c in evicted {
        release(c.storage);
    }
}

/// Adds `storage` to `cache` (oldest first) as the newest buffer, held as
/// it is. Returns the buffers to give back — `storage` itself when it is
/// smaller than `limits.min`, larger than `limits.all` or a `Vec`; the
/// oldest past `limits.entries` or `limits.all` bytes; the oldest held as
/// they are past `limits.firm` bytes that are not mappings — and the
/// oldest mappings held as they are past `limits.firm` bytes, taken out of
/// the cache to have their pages released lazily (then [`readmit`]).
fn admit(cache: &mut Vec<Cached>, storage: Storage, limits: Limits) -> (Vec<Cached>, Vec<Cached>) {
    let cap = capacity(&storage);
    if !(limits.min..=limits.all).contains(&cap) || matches!(storage, Storage::Heap(_)) {
        return (
            vec![Cached {
                storage,
                lazy: false,
            }],
            Vec::new(),
        );
    }
    cache.push(Cached {
        storage,
        lazy: false,
    });
    let mut evicted = overflow(cache, limits);
    let mut lazy = Vec::new();
    let mut firm: usize = cache
        .iter()
        .filter(|c| !c.lazy)
        .map(|c| capacity(&c.storage))
        .sum();
    let mut i = 0;
    while firm > limits.firm && i < cache.len() {
        if cache[i].lazy {
            i += 1;
            continue;
        }
        firm -= capacity(&cache[i].storage);
        let c = cache.remove(i);
        if matches!(c.storage, Storage::Mapped { .. }) {
            lazy.push(c);
        } else {
            evicted.push(c);
        }
    }
    (evicted, lazy)
}

/// Puts lazily released buffers back into `cache` after the lazy ones it
/// holds (the oldest, see [`admit`]), before those held as they are;
/// returns the oldest to give back past `limits.entries` or `limits.all`
/// bytes.
fn readmit(cache: &mut Vec<Cached>, lazy: Vec<Cached>, limits: Limits) -> Vec<Cached> {
    let at = cache.iter().take_while(|c| c.lazy).count();
    cache.splice(at..at, lazy);
    overflow(cache, limits)
}

/// The oldest buffers of `cache` past `limits.entries` or `limits.all`
/// bytes, taken out.
fn overflow(cache: &mut Vec<Cached>, limits: Limits) -> Vec<Cached> {
    let mut held: usize = cache.iter().map(|c| capacity(&c.storage)).sum();
    let mut n = 0;
    while cache.len() - n > limits.entries || held > limits.all {
        held -= capacity(&cache[n].storage);
        n += 1;
    }
    cache.drain(..n).collect()
}

/// Lets the kernel take `storage`'s pages back when it needs memory
/// (`MADV_FREE`); until it does, they stay mapped and are reused without a
/// fault. False where that is not possible (not a mapping, not Linux, a
/// kernel without `MADV_FREE`).
fn release_lazily(storage: &Storage) -> bool {
    match storage {
        #[cfg(target_os = "linux")]
        Storage::Mapped { ptr, map_len } => {
            // SAFETY: advising a mapping the cache owns; its contents are
            // not needed (a buffer from the cache is written before it is
            // read, or zeroed by hand).
            unsafe { libc::madvise(ptr.cast(), *map_len, libc::MADV_FREE) == 0 }
        }
        _ => false,
    }
}

/// `alloc()`, or when it fails and the cache held buffers, `alloc()` again
/// after giving them back (they hold memory and address space).
fn retrying<T>(mut alloc: impl FnMut() -> Option<T>) -> Option<T> {
    alloc().or_else(|| (trim_buffer_cache() > 0).then(alloc).flatten())
}

/// Frees a buffer for good.
fn release(storage: Storage) {
    match storage {
        Storage::Heap(_) => {}
        Storage::Raw { ptr, layout } => {
            // SAFETY: freeing an allocation owned by the caller, exactly once,
            // with the layout it was allocated with.
            unsafe { std::alloc::dealloc(ptr, layout) };
        }
        Storage::Mapped { ptr, map_len } => {
            #[cfg(unix)]
            // SAFETY: unmapping a mapping owned by the caller, exactly once.
            unsafe {
                libc::munmap(ptr.cast(), map_len);
            }
            #[cfg(not(unix))]
            let _ = (ptr, map_len);
        }
    }
}

/// Frees every buffer kept for reuse (see the module documentation); returns
/// the bytes given back. Then asks the C allocator to return its free
/// memory to the system (glibc's `malloc_trim`): small results and
/// temporaries freed by the program stay in its heap otherwise (10,000
/// dropped results: RSS 200 MB kept, 43 MB after the trim).
pub fn trim_buffer_cache() -> usize {
    let drained: Vec<Cached> = std::mem::take(
        &mut *CACHE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    let bytes = drained.iter().map(|c| capacity(&c.storage)).sum();
    for c in drained {
        release(c.storage);
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap pages to the system.
    unsafe {
        libc::malloc_trim(0);
    }
    bytes
}

enum Storage {
    Heap(Vec<u128>),
    /// From the global allocator without zeroing (16-byte aligned).
    Raw {
        ptr: *mut u8,
        layout: std::alloc::Layout,
    },
    Mapped {
        ptr: *mut u8,
        map_len: usize,
    },
}

/// Zero-initialized, 16-byte aligned bytes.
pub struct AlignedBytes {
    storage: Storage,
    len: usize,
}

// SAFETY: a mapping is owned exclusively by its AlignedBytes, like a Vec.
unsafe impl Send for AlignedBytes {}
// SAFETY: shared access only reads.
unsafe impl Sync for AlignedBytes {}

impl Default for AlignedBytes {
    fn default() -> Self {
        AlignedBytes::zeroed(0)
    }
}

impl Clone for AlignedBytes {
    fn clone(&self) -> Self {
        AlignedBytes::from_slice(self.as_slice())
    }
}

impl std::fmt::Debug for AlignedBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBytes({} bytes)", self.len)
    }
}

#[cfg(unix)]
fn map(len: usize) -> Option<*mut u8> {
    // SAFETY: an anonymous private mapping has no preconditions; failure is
    // reported as MAP_FAILED and handled.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    #[cfg(target_os = "linux")]
    if huge_pages_free_for(len) {
        // SAFETY: advising our own fresh mapping; failure only means no huge
        // pages.
        unsafe {
            libc::madvise(p, len, libc::MADV_HUGEPAGE);
        }
    }
    Some(p.cast())
}

/// The last reading of `/proc/buddyinfo`: when, and the bytes of free huge
/// pages it listed less those promised to mappings since.
#[cfg(target_os = "linux")]
static BUDDY: Mutex<Option<(std::time::Instant, usize)>> = Mutex::new(None);

/// How long a reading of `/proc/buddyinfo` is used (reading it costs
/// about as much as faulting in a few huge pages).
#[cfg(target_os = "linux")]
const BUDDY_FRESH: std::time::Duration = std::time::Duration::from_millis(10);

/// True when the kernel has free blocks of a huge page or more for twice
/// `len` bytes (`/proc/buddyinfo`, read at most every [`BUDDY_FRESH`]),
/// so that faulting in a mapping advised to use huge pages takes them as
/// they are. With THP's `defrag` at `madvise` (the usual setting) a fault
/// in an advised mapping otherwise compacts memory on the spot, 2–3 ms a
/// huge page on a fragmented machine: slower than faulting 4 KiB pages.
/// True when it cannot be told (no `/proc/buddyinfo`, pages other than
/// x86-64's 4 KiB).
#[cfg(target_os = "linux")]
fn huge_pages_free_for(len: usize) -> bool {
    if !cfg!(target_arch = "x86_64") {
        return true;
    }
    let mut last = BUDDY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let now = std::time::Instant::now();
    let (at, free) = match *last {
        Some((at, free)) if now.duration_since(at) < BUDDY_FRESH => (at, free),
        _ => {
            let Ok(text) = std::fs::read_to_string("/proc/buddyinfo") else {
                return true;
            };
            (now, free_huge_pages(&text).saturating_mul(2 << 20))
        }
    };
    let ok = free >= len.saturating_mul(2);
    *last = Some((at, if ok { free - len } else { free }));
    ok
}

/// The free 2 MiB blocks a `/proc/buddyinfo` lists (free blocks per order
/// of 4 KiB pages, 0 to 10, per zone): those of order 9 and up.
#[cfg(target_os = "linux")]
fn free_huge_pages(buddyinfo: &str) -> usize {
    buddyinfo
        .lines()
        .filter_map(|line| line.split_once("zone"))
        .flat_map(|(_, rest)| rest.split_whitespace().skip(1).enumerate())
        .filter(|(order, _)| *order >= 9)
        .map(|(order, count)| count.parse::<usize>().unwrap_or(0) << (order - 9))
        .sum()
}

#[cfg(not(unix))]
fn map(_len: usize) -> Option<*mut u8> {
    None
}

impl AlignedBytes {
    /// `len` zero bytes. Aborts when the memory cannot be had, as `Vec`
    /// does; buffers whose size comes from data use [`Self::try_zeroed`].
    pub fn zeroed(len: usize) -> Self {
        Self::try_zeroed(len).unwrap_or_else(|e| std::alloc::handle_alloc_error(e.layout()))
    }

    /// `len` zero bytes, or [`AllocFailed`] when the allocator (or the
    /// address space left under `ulimit -v`) cannot provide them.
    pub fn try_zeroed(len: usize) -> Result<Self, AllocFailed> {
        // A recycled buffer is zeroed by hand: memory the cache holds is
        // reused rather than left beside fresh pages.
        if len >= CACHE_MIN
            && let Some(storage) = take_cached(len)
        {
            let mut b = AlignedBytes { storage, len };
            b.as_mut_slice().fill(0);
            return Ok(b);
        }
        if len >= MAP_THRESHOLD
            && let Some(ptr) = retrying(|| map(len))
        {
            return Ok(AlignedBytes {
                storage: Storage::Mapped { ptr, map_len: len },
                len,
            });
        }
        let words = len.div_ceil(16);
        let mut v: Vec<u128> = Vec::new();
        retrying(|| v.try_reserve_exact(words).ok()).ok_or(AllocFailed { len })?;
        v.resize(words, 0);
        Ok(AlignedBytes {
            storage: Storage::Heap(v),
            len,
        })
    }

    /// `len` bytes for compiled code to fill, not zeroed (zeroing a fresh
    /// 4 MiB output costs as much as a simple kernel writing it). Debug
    /// builds fill them with 0xA5 so that a byte left unwritten shows up in
    /// the differential tests.
    ///
    /// # Safety
    /// Every byte is written, through [`AlignedBytes::as_mut_ptr`], before
    /// the value is read in any way (`as_slice`, `as_mut_slice`, `clone`).
    pub unsafe fn for_overwrite(len: usize) -> Self {
        // SAFETY: the caller's promise is passed on.
        unsafe { Self::try_for_overwrite(len) }
            .unwrap_or_else(|e| std::alloc::handle_alloc_error(e.layout()))
    }

    /// [`Self::for_overwrite`], or [`AllocFailed`] when the memory cannot
    /// be had.
    ///
    /// # Safety
    /// As for [`Self::for_overwrite`].
    pub unsafe fn try_for_overwrite(len: usize) -> Result<Self, AllocFailed> {
        if len >= CACHE_MIN
            && let Some(storage) = take_cached(len)
        {
            let mut b = AlignedBytes { storage, len };
            if cfg!(debug_assertions) {
                b.as_mut_slice().fill(0xA5);
            }
            return Ok(b);
        }
        if len >= MAP_THRESHOLD || len == 0 {
            return Self::try_zeroed(len);
        }
        let Ok(layout) = std::alloc::Layout::from_size_align(len, 16) else {
            return Err(AllocFailed { len });
        };
        // SAFETY: `layout` has a non-zero size.
        let ptr = retrying(|| Some(unsafe { std::alloc::alloc(layout) }).filter(|p| !p.is_null()))
            .ok_or(AllocFailed { len })?;
        if cfg!(debug_assertions) {
            // SAFETY: `ptr` is a fresh allocation of `len` bytes.
            unsafe { std::ptr::write_bytes(ptr, 0xA5, len) };
        }
        Ok(AlignedBytes {
            storage: Storage::Raw { ptr, layout },
            len,
        })
    }

    /// The address of the first byte, for writing (valid for `len` bytes).
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        match &mut self.storage {
            Storage::Heap(v) => v.as_mut_ptr().cast(),
            Storage::Raw { ptr, .. } | Storage::Mapped { ptr, .. } => *ptr,
        }
    }

    /// A copy of `bytes`.
    pub fn from_slice(bytes: &[u8]) -> Self {
        let mut b = Self::zeroed(bytes.len());
        b.as_mut_slice().copy_from_slice(bytes);
        b
    }

    /// Number of bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        match &self.storage {
            Storage::Heap(v) => &bytemuck::cast_slice(v)[..self.len],
            // SAFETY: the mapping (allocation) is at least `len` bytes owned
            // by self, initialized (zeroed, or written as `for_overwrite`
            // requires).
            Storage::Raw { ptr, .. } | Storage::Mapped { ptr, .. } => unsafe {
                std::slice::from_raw_parts(*ptr, self.len)
            },
        }
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        match &mut self.storage {
            Storage::Heap(v) => &mut bytemuck::cast_slice_mut(v)[..self.len],
            // SAFETY: as above, and `&mut self` makes the access exclusive.
            Storage::Raw { ptr, .. } | Storage::Mapped { ptr, .. } => unsafe {
                std::slice::from_raw_parts_mut(*ptr, self.len)
            },
        }
    }
}

impl Drop for AlignedBytes {
    fn drop(&mut self) {
        let storage = std::mem::replace(&mut self.storage, Storage::Heap(Vec::new()));
        recycle(storage);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Held by the tests that look into the cache or trim it, which would
    /// otherwise see each other's buffers come and go.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        SERIAL
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    #[test]
    fn large_buffers_are_recycled_by_size_and_trimmed() {
        let _serial = serial();
        // An odd size no other test allocates.
        let len = (3 << 20) + 48;
        // SAFETY: every byte is written before it is read.
        let mut a = unsafe { AlignedBytes::for_overwrite(len) };
        a.as_mut_slice().fill(7);
        let first = a.as_mut_ptr();
        drop(a);
        // SAFETY: as above.
        let mut b = unsafe { AlignedBytes::for_overwrite(len) };
        assert_eq!(b.as_mut_ptr(), first, "the freed buffer is reused");
        b.as_mut_slice().fill(1);
        assert!(b.as_slice().iter().all(|x| *x == 1));
        // A different size is not served from it.
        // SAFETY: as above.
        let mut c = unsafe { AlignedBytes::for_overwrite(len + 16) };
        assert_ne!(c.as_mut_ptr(), b.as_mut_ptr());
        drop((b, c));
        assert!(trim_buffer_cache() >= 2 * len);
        // A zeroed buffer may come from the cache, zeroed.
        // SAFETY: as above.
        let mut d = unsafe { AlignedBytes::for_overwrite(len) };
        d.as_mut_slice().fill(9);
        drop(d);
        let z = AlignedBytes::zeroed(len);
        assert!(z.as_slice().iter().all(|x| *x == 0));
    }

    /// Cached buffers of `len` bytes.
    fn cached(len: usize) -> usize {
        let cache = CACHE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        cache.iter().filter(|c| capacity(&c.storage) == len).count()
    }

    /// A mapping of `len` bytes, or bytes from the allocator, to feed
    /// [`admit`].
    fn storage(len: usize, mapped: bool) -> Storage {
        if mapped {
            let ptr = map(len).unwrap_or_else(|| unreachable!("no mapping of {len} bytes"));
            Storage::Mapped { ptr, map_len: len }
        } else {
            let layout = std::alloc::Layout::from_size_align(len, 16)
                .unwrap_or_else(|e| unreachable!("{e}"));
            // SAFETY: a non-zero size.
            let ptr = unsafe { std::alloc::alloc(layout) };
            assert!(!ptr.is_null());
            Storage::Raw { ptr, layout }
        }
    }

    /// (pages, lazy) of each buffer, oldest first.
    fn pages(cs: &[Cached]) -> Vec<(usize, bool)> {
        cs.iter()
            .map(|c| (capacity(&c.storage) / 4096, c.lazy))
            .collect()
    }

    fn release_all(cs: Vec<Cached>) {
        for c in cs {
            release(c.storage);
        }
    }

    /// Limits small enough to test with pages: at most 4 buffers, 8 pages
    /// held as they are, 12 in all.
    const SMALL: Limits = Limits {
        min: 4096,
        firm: 8 * 4096,
        all: 12 * 4096,
        entries: 4,
    };

    #[test]
    fn a_full_cache_gives_way_to_the_newest_buffer() {
        // Heap buffers of 1..=5 pages: past 8 pages held as they are, the
        // oldest are given back (they cannot be released lazily).
        let mut cache = Vec::new();
        let mut want: Vec<Vec<(usize, bool)>> = vec![
            vec![(1, false)],
            vec![(1, false), (2, false)],
            vec![(1, false), (2, false), (3, false)],
            vec![(3, false), (4, false)],
            vec![(5, false)],
        ];
        for n in 1..=5 {
            let (evicted, lazy) = admit(&mut cache, storage(n * 4096, false), SMALL);
            assert!(lazy.is_empty(), "a heap buffer released lazily");
            release_all(evicted);
            assert_eq!(pages(&cache), want.remove(0), "after {n} pages");
        }
        // Larger than the whole cache, or smaller than its smallest: given
        // back at once.
        for len in [13 * 4096, 2048] {
            let (evicted, lazy) = admit(&mut cache, storage(len, false), SMALL);
            assert_eq!((evicted.len(), lazy.len()), (1, 0));
            release_all(evicted);
            assert_eq!(pages(&cache), [(5, false)]);
        }
        release_all(cache);
    }

    #[test]
    fn past_the_firm_bytes_the_oldest_mappings_are_released_lazily() {
        // Mappings of 3 pages: past 8 pages held as they are the oldest are
        // taken out to be released lazily and come back as the oldest;
        // past 4 buffers the oldest lazy one is given back.
        let mut cache = Vec::new();
        let want: [&[(usize, bool)]; 5] = [
            &[(3, false)],
            &[(3, false), (3, false)],
            &[(3, true), (3, false), (3, false)],
            &[(3, true), (3, true), (3, false), (3, false)],
            &[(3, true), (3, true), (3, false), (3, false)],
        ];
        let mut given_back = 0;
        for (i, want) in want.iter().enumerate() {
            let (evicted, mut lazy) = admit(&mut cache, storage(3 * 4096, true), SMALL);
            assert_eq!(
                lazy.len(),
                usize::from(i >= 2),
                "step {i}: one taken out past 8 pages"
            );
            given_back += evicted.len();
            release_all(evicted);
            for c in &mut lazy {
                c.lazy = true;
            }
            let evicted = readmit(&mut cache, lazy, SMALL);
            given_back += evicted.len();
            release_all(evicted);
            assert_eq!(pages(&cache), *want, "step {i}");
        }
        assert_eq!(
            given_back, 1,
            "the fifth buffer pushed the oldest lazy one out"
        );
        release_all(cache);
    }

    #[test]
    fn a_batch_past_the_firm_limit_is_kept_with_pages_released_lazily() {
        let _serial = serial();
        // 72 buffers of a size no other test asks for: 288 MiB, past the
        // 256 MiB held as they are.
        let len = (4 << 20) + 3 * 4096;
        let count = 72;
        if cache_max_lazy_bytes() < 2 * count * len {
            eprintln!(
                "skipped: a cache of {} bytes on this machine",
                cache_max_lazy_bytes()
            );
            return;
        }
        let mut batch: Vec<AlignedBytes> = (0..count)
            // SAFETY: every byte is written before it is read.
            .map(|_| unsafe { AlignedBytes::for_overwrite(len) })
            .collect();
        for (i, b) in batch.iter_mut().enumerate() {
            b.as_mut_slice().fill(i as u8);
        }
        let mut before: Vec<usize> = batch.iter_mut().map(|b| b.as_mut_ptr() as usize).collect();
        drop(batch);
        assert_eq!(cached(len), count, "every buffer of the batch is kept");
        {
            let cache = CACHE
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let ours = || cache.iter().filter(|c| capacity(&c.storage) == len);
            let lazy = ours().filter(|c| c.lazy).count();
            let firm: usize = cache
                .iter()
                .filter(|c| !c.lazy)
                .map(|c| capacity(&c.storage))
                .sum();
            assert!(firm <= CACHE_MAX_BYTES, "{firm} bytes held as they are");
            if cfg!(target_os = "linux") {
                assert!(
                    lazy >= count - CACHE_MAX_BYTES / len,
                    "{lazy} released lazily"
                );
            }
        }
        // The next batch gets the same buffers back, writable.
        let mut again: Vec<AlignedBytes> = (0..count)
            // SAFETY: as above.
            .map(|_| unsafe { AlignedBytes::for_overwrite(len) })
            .collect();
        let mut after: Vec<usize> = again.iter_mut().map(|b| b.as_mut_ptr() as usize).collect();
        for b in &mut again {
            b.as_mut_slice().fill(0x5a);
            assert!(b.as_slice().iter().all(|x| *x == 0x5a));
        }
        before.sort_unstable();
        after.sort_unstable();
        assert_eq!(before, after, "the batch was not served from the cache");
        drop(again);
        assert!(trim_buffer_cache() >= count * len);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn free_huge_pages_count_blocks_of_order_9_and_up() {
        let text = "Node 0, zone      DMA      0      0      0      0      0      0      0      0      1      1      3 \n\
                    Node 0, zone    DMA32      2      2      4      2      5      4      3      3      4      2    752 \n\
                    Node 0, zone   Normal  13164   3471   1629   1632    374   1797   3403   2010   1230    450   2250 \n";
        assert_eq!(
            free_huge_pages(text),
            1 + 3 * 2 + 2 + 752 * 2 + 450 + 2250 * 2
        );
        assert_eq!(free_huge_pages(""), 0);
        assert_eq!(free_huge_pages("Node 0, zone Normal 5 x"), 0);
    }

    #[test]
    fn an_impossible_allocation_is_an_error_not_an_abort() {
        for len in [usize::MAX / 2, usize::MAX - 15] {
            let result = AlignedBytes::try_zeroed(len);
            assert!(result.is_err(), "{len} bytes were allocated");
            let Err(e) = result else { return };
            assert_eq!(e.len, len);
            // SAFETY: nothing is read; the allocation fails.
            assert!(unsafe { AlignedBytes::try_for_overwrite(len) }.is_err());
            let err = crate::Error::from(e);
            assert_eq!(err.code(), tensorlift_ir::Code::ResourceExhausted);
            assert!(err.to_string().contains(&format!("{len} bytes")), "{err}");
        }
    }
}
