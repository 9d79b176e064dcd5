//! Tensor buffers: 16-byte aligned, zero-initialized bytes. Large buffers
//! are mapped directly and advised to use transparent huge pages, so that
//! first-touching a fresh 64 MiB output costs 32 page faults instead of
//! 16384 (the difference between 35 ms and 8 ms for a 16M-element f32
//! kernel on the benchmark machine); small ones come from the heap.
//!
//! This file holds all of the runtime's `unsafe` memory code.

/// Buffers at least this large are mapped (and advised to use huge pages).
/// glibc serves smaller ones from memory it reuses across calls, which is
/// faster still; at 32 MiB and above it maps fresh (faulting) pages anyway.
const MAP_THRESHOLD: usize = 32 << 20;

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
    // SAFETY: advising our own fresh mapping; failure only means no huge pages.
    unsafe {
        libc::madvise(p, len, libc::MADV_HUGEPAGE);
    }
    Some(p.cast())
}

#[cfg(not(unix))]
fn map(_len: usize) -> Option<*mut u8> {
    None
}

impl AlignedBytes {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> Self {
        if len >= MAP_THRESHOLD
            && let Some(ptr) = map(len)
        {
            return AlignedBytes {
                storage: Storage::Mapped { ptr, map_len: len },
                len,
            };
        }
        AlignedBytes {
            storage: Storage::Heap(vec![0; len.div_ceil(16)]),
            len,
        }
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
        if len >= MAP_THRESHOLD || len == 0 {
            return Self::zeroed(len);
        }
        let Ok(layout) = std::alloc::Layout::from_size_align(len, 16) else {
            return Self::zeroed(len);
        };
        // SAFETY: `layout` has a non-zero size.
        let ptr = unsafe { std::alloc::alloc(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        if cfg!(debug_assertions) {
            // SAFETY: `ptr` is a fresh allocation of `len` bytes.
            unsafe { std::ptr::write_bytes(ptr, 0xA5, len) };
        }
        AlignedBytes {
            storage: Storage::Raw { ptr, layout },
            len,
        }
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
        if let Storage::Raw { ptr, layout } = self.storage {
            // SAFETY: freeing the allocation this value owns, exactly once,
            // with the layout it was allocated with.
            unsafe { std::alloc::dealloc(ptr, layout) };
        }
        #[cfg(unix)]
        if let Storage::Mapped { ptr, map_len } = self.storage {
            // SAFETY: unmapping the mapping this value owns, exactly once.
            unsafe {
                libc::munmap(ptr.cast(), map_len);
            }
        }
    }
}
