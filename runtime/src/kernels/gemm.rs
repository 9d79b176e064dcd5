//! f32/f64 GEMM through the `gemm` crate, shared by the interpreter's
//! `dot_general` and the JIT's GEMM steps.
//!
//! Both sides describe a product by the same [`GemmDims`] (the operands'
//! row-major strides, computed by [`GemmDims::of`]) and call [`gemm`], so a
//! product gives the same bits on both (the JIT's exact mode relies on it).
//! Splitting over threads never changes a bit either: a part is a range of
//! whole batch items, or of more than 64 columns or rows of every item, or
//! a tile of both, and `gemm` computes each element of such a part exactly as in the whole
//! product (it sums `k` in the same blocks, which depend on `k` and the
//! cache sizes alone, with the same micro-kernel; small or thin products,
//! which take other paths, are never split).

use crate::memory::AlignedBytes;
use std::sync::atomic::{AtomicUsize, Ordering};
use tensorlift_ir::{DType, DotDims};

/// A batched product `out[b] = lhs[b] @ rhs[b]` over strided operands; the
/// output is contiguous, shape (b, m, n).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmDims {
    /// Batch.
    pub b: usize,
    /// Rows.
    pub m: usize,
    /// Contracted.
    pub k: usize,
    /// Columns.
    pub n: usize,
    /// lhs strides (batch, m, k) in elements.
    pub lhs_strides: [isize; 3],
    /// rhs strides (batch, k, n) in elements.
    pub rhs_strides: [isize; 3],
}

/// Multiply-adds below which a product runs on the calling thread: the
/// JIT's threshold for kernels (`PARALLEL_WORK`, 2^21 units of ~0.02 ns),
/// an FMA costing about one unit with AVX-512 (a 64×512×512 product,
/// 2^24 FMAs, runs ~330 µs on one core).
pub const GEMM_PARALLEL_WORK: usize = 1 << 21;

/// How one product runs over the thread pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmSplit {
    /// On the calling thread, for this reason.
    One(&'static str),
    /// Contiguous ranges of batch items.
    Batch(usize),
    /// Column ranges of every item (each over 64 columns).
    Columns(usize),
    /// Row ranges of every item (each over 64 rows).
    Rows(usize),
    /// `rows` row ranges by `columns` column ranges of every item, each
    /// range as wide as [`GemmSplit::Rows`] and [`GemmSplit::Columns`]
    /// want theirs: for pools larger than either alone fills.
    Tiles {
        /// Row ranges.
        rows: usize,
        /// Column ranges.
        columns: usize,
    },
}

/// A part of a split must be wider than this (narrower ones take `gemm`'s
/// small-matrix paths, which sum in another order).
const MIN_PART: usize = 64;

impl GemmDims {
    /// The product `dot_general(lhs, rhs, dd)` over row-major operands of
    /// shapes `ld` and `rd`, when the batch, free and contracted dims of
    /// each operand collapse to one strided dim each (in their order);
    /// `None` otherwise (the caller transposes first).
    pub fn of(ld: &[usize], rd: &[usize], dd: &DotDims) -> Option<GemmDims> {
        let lfree: Vec<usize> = (0..ld.len())
            .filter(|i| !dd.lhs_batch.contains(i) && !dd.lhs_contract.contains(i))
            .collect();
        let rfree: Vec<usize> = (0..rd.len())
            .filter(|i| !dd.rhs_batch.contains(i) && !dd.rhs_contract.contains(i))
            .collect();
        let (b, lb) = DotDims::collapse(ld, &dd.lhs_batch)?;
        let (_, rb) = DotDims::collapse(rd, &dd.rhs_batch)?;
        let (m, lm) = DotDims::collapse(ld, &lfree)?;
        let (k, lk) = DotDims::collapse(ld, &dd.lhs_contract)?;
        let (_, rk) = DotDims::collapse(rd, &dd.rhs_contract)?;
        let (n, rn) = DotDims::collapse(rd, &rfree)?;
        Some(GemmDims {
            b,
            m,
            k,
            n,
            lhs_strides: [lb, lm, lk],
            rhs_strides: [rb, rk, rn],
        })
    }

    /// Multiply-adds of the whole product.
    pub fn work(&self) -> usize {
        self.b
            .saturating_mul(self.m)
            .saturating_mul(self.n)
            .saturating_mul(self.k)
    }

    /// How the product runs with a pool of `threads` threads (the decision
    /// [`gemm`] makes when threads are allowed).
    pub fn split(&self, threads: usize) -> GemmSplit {
        self.split_for(threads, false)
    }

    /// [`GemmDims::split`] for a product with an epilogue ([`gemm_then`]):
    /// ranges of rows before ranges of columns, so that each part hands
    /// whole rows to the epilogue as it finishes.
    pub fn split_by_rows(&self, threads: usize) -> GemmSplit {
        self.split_for(threads, true)
    }

    /// [`GemmDims::split`] for a product reading a packed right operand
    /// ([`GemmType::host_packs`]), whose bits no split changes: ranges of whole
    /// blocks of the micro-kernel's 6 rows while each part gets two or
    /// more (each part then runs its rows' epilogue at once, on its
    /// thread), else ranges of whole panels of columns, tiled by ranges
    /// of two blocks or more where the panels are fewer than the threads.
    pub fn split_packed(&self, threads: usize) -> GemmSplit {
        if self.work() < GEMM_PARALLEL_WORK {
            return GemmSplit::One("one thread: too little work to pay for waking the pool");
        }
        if threads < 2 {
            return GemmSplit::One(
                "one thread: one thread allowed (RAYON_NUM_THREADS=1, or one core)",
            );
        }
        let row_blocks = self.m / PACKED_ROWS;
        if row_blocks >= 2 * threads {
            return GemmSplit::Rows(threads);
        }
        let panels = self.n / MAX_PANEL;
        // Tiles where whole panels leave threads idle: each range of rows
        // two blocks or more.
        let rows = (threads / panels.max(1)).min(row_blocks / 2);
        match (panels.min(threads), rows) {
            (0 | 1, _) => GemmSplit::One("one thread: too few rows and columns to split"),
            (columns, 2..) => GemmSplit::Tiles { rows, columns },
            (parts, _) => GemmSplit::Columns(parts),
        }
    }

    fn split_for(&self, threads: usize, rows_first: bool) -> GemmSplit {
        if self.work() < GEMM_PARALLEL_WORK {
            return GemmSplit::One("one thread: too little work to pay for waking the pool");
        }
        if threads < 2 {
            return GemmSplit::One(
                "one thread: one thread allowed (RAYON_NUM_THREADS=1, or one core)",
            );
        }
        if self.b >= threads {
            return GemmSplit::Batch(threads);
        }
        // Other shapes take gemm's paths for thin or tiny products.
        if self.k > 2 && self.m > 4 && self.n > 4 {
            let wide = |parts| {
                column_cuts(self.n, parts)
                    .windows(2)
                    .all(|w| w[1] - w[0] > MIN_PART)
            };
            let rows = (1..=threads).rev().find(|&p| self.m / p > MIN_PART);
            let columns = (1..=threads).rev().find(|&p| wide(p));
            // Tiles where they keep more threads busy than either split
            // alone (the most tiles; of those, the fewest ranges of rows).
            if let (Some(r), Some(c)) = (rows, columns)
                && let Some((rows, columns)) = (2..=r)
                    .flat_map(|r| (2..=c).map(move |c| (r, c)))
                    .filter(|(r, c)| r * c <= threads)
                    .max_by_key(|&(r, c)| (r * c, std::cmp::Reverse(r)))
                && rows * columns > r.max(c)
            {
                return GemmSplit::Tiles { rows, columns };
            }
            for parts in (2..=threads).rev() {
                if rows_first && self.m / parts > MIN_PART {
                    return GemmSplit::Rows(parts);
                }
                if wide(parts) {
                    return GemmSplit::Columns(parts);
                }
                if self.m / parts > MIN_PART {
                    return GemmSplit::Rows(parts);
                }
            }
        }
        if self.b >= 2 {
            GemmSplit::Batch(self.b)
        } else {
            GemmSplit::One("one thread: a part would have 64 rows and columns or fewer")
        }
    }
}

/// Column boundaries of `parts` ranges of `n`, on multiples of 16.
fn column_cuts(n: usize, parts: usize) -> Vec<usize> {
    (0..=parts)
        .map(|p| {
            if p == parts {
                n
            } else {
                n * p / parts / 16 * 16
            }
        })
        .collect()
}

/// The element types of [`gemm`], by name: what a plan's `DType` is to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmType {
    /// `f32`.
    F32,
    /// `f64`.
    F64,
}

impl GemmType {
    /// The type of `dtype`'s elements, if [`gemm`] takes it.
    pub fn of(dtype: DType) -> Option<GemmType> {
        match dtype {
            DType::F32 => Some(GemmType::F32),
            DType::F64 => Some(GemmType::F64),
            DType::Bool
            | DType::I8
            | DType::I16
            | DType::I32
            | DType::I64
            | DType::U8
            | DType::U16
            | DType::U32
            | DType::U64
            | DType::F16
            | DType::BF16
            | DType::C64
            | DType::C128
            | DType::String => None,
        }
    }

    /// Whether [`gemm_then`] reads a packed right operand for `d` on this
    /// host ([`packs`], and the host has [`GemmFloat::micro`]).
    pub fn host_packs(self, d: &GemmDims) -> bool {
        packs(d)
            && match self {
                GemmType::F32 => f32::micro().is_some(),
                GemmType::F64 => f64::micro().is_some(),
            }
    }

    /// [`gemm_then`] over untyped pointers to elements of this type.
    ///
    /// # Safety
    /// As [`gemm_then`].
    #[allow(
        clippy::too_many_arguments,
        reason = "gemm_then's arguments, then the type"
    )]
    pub unsafe fn gemm_then(
        self,
        d: &GemmDims,
        ptrs: [*mut u8; 4],
        threads: bool,
        store: Store,
        then: Option<Epilogue<'_>>,
        then_parts: usize,
    ) {
        /// [`gemm_then`] with the pointers cast to `T`.
        ///
        /// # Safety
        /// As [`gemm_then`].
        unsafe fn typed<T: GemmFloat>(
            d: &GemmDims,
            [lhs, rhs, out, packed]: [*mut u8; 4],
            threads: bool,
            store: Store,
            then: Option<Epilogue<'_>>,
            then_parts: usize,
        ) {
            let (l, r, p) = (lhs.cast_const(), rhs.cast_const(), packed.cast_const());
            // SAFETY: the caller's contract.
            unsafe {
                gemm_then::<T>(
                    d,
                    l.cast(),
                    r.cast(),
                    out.cast(),
                    p.cast(),
                    threads,
                    store,
                    then,
                    then_parts,
                )
            }
        }
        let f = match self {
            GemmType::F32 => typed::<f32>,
            GemmType::F64 => typed::<f64>,
        };
        // SAFETY: the caller's contract.
        unsafe { f(d, ptrs, threads, store, then, then_parts) }
    }

    /// [`pack_rhs`] over untyped pointers to elements of this type.
    ///
    /// # Safety
    /// As [`pack_rhs`].
    pub unsafe fn pack_rhs(
        self,
        k: usize,
        n: usize,
        rhs: *const u8,
        strides: [isize; 2],
        dst: *mut u8,
    ) {
        match self {
            // SAFETY: the caller's contract.
            GemmType::F32 => unsafe { pack_rhs::<f32>(k, n, rhs.cast(), strides, dst.cast()) },
            // SAFETY: the caller's contract.
            GemmType::F64 => unsafe { pack_rhs::<f64>(k, n, rhs.cast(), strides, dst.cast()) },
        }
    }
}

/// The element types [`gemm`] takes.
pub trait GemmFloat:
    Copy + Send + Sync + 'static + std::ops::Add<Output = Self> + private::Sealed
{
    /// 0.
    const ZERO: Self;
    /// 1.
    const ONE: Self;
    /// `v` rounded to this type.
    fn of(v: f64) -> Self;
    /// The micro-kernels `gemm` runs on this host, where they fuse their
    /// multiply-adds (FMA or AVX-512); `None` elsewhere.
    fn micro() -> Option<Micro<Self>>;
}

impl GemmFloat for f32 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    fn of(v: f64) -> Self {
        v as f32
    }
    fn micro() -> Option<Micro<Self>> {
        #[cfg(target_arch = "x86_64")]
        {
            use gemm_f32::microkernel::{avx512f, fma};
            host_micro(
                Micro {
                    lanes: 16,
                    ukr: &avx512f::f32::UKR,
                },
                Micro {
                    lanes: 8,
                    ukr: &fma::f32::UKR,
                },
            )
        }
        #[cfg(not(target_arch = "x86_64"))]
        None
    }
}

impl GemmFloat for f64 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    fn of(v: f64) -> Self {
        v
    }
    fn micro() -> Option<Micro<Self>> {
        #[cfg(target_arch = "x86_64")]
        {
            use gemm_f64::microkernel::{avx512f, fma};
            host_micro(
                Micro {
                    lanes: 8,
                    ukr: &avx512f::f64::UKR,
                },
                Micro {
                    lanes: 4,
                    ukr: &fma::f64::UKR,
                },
            )
        }
        #[cfg(not(target_arch = "x86_64"))]
        None
    }
}

/// The family `gemm` runs on this host (gemm-common's `gemm_def!`): its
/// AVX-512 kernels where the host has AVX-512, else its FMA kernels where
/// it has FMA, else none of these.
#[cfg(target_arch = "x86_64")]
fn host_micro<T>(avx512: Micro<T>, fma: Micro<T>) -> Option<Micro<T>> {
    if std::arch::is_x86_feature_detected!("avx512f") {
        Some(avx512)
    } else if std::arch::is_x86_feature_detected!("fma") {
        Some(fma)
    } else {
        None
    }
}

/// A family of `gemm`'s micro-kernels: `ukr[a - 1][c - 1]` computes a
/// block of up to `a` vectors of `lanes` output columns by `c` output rows
/// (`NR` = 6 rows at most), each element one fused multiply-add per `k` in
/// order, then `alpha·out + beta·sum` (`alpha` 0: the sum alone).
#[derive(Clone, Copy)]
pub struct Micro<T: 'static> {
    lanes: usize,
    ukr: &'static [[gemm_common::microkernel::MicroKernelFn<T>; 6]],
}

impl<T> std::fmt::Debug for Micro<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Micro")
            .field("lanes", &self.lanes)
            .field("panel", &self.panel())
            .finish()
    }
}

impl<T> Micro<T> {
    /// Columns of a panel (`gemm`'s `MR`).
    pub fn panel(&self) -> usize {
        self.lanes * self.ukr.len()
    }
}

/// Rows of the micro-kernels' blocks (their `NR`).
const PACKED_ROWS: usize = 6;

/// The widest panel of any host ([`Micro::panel`]: 64 f32 columns with
/// AVX-512).
const MAX_PANEL: usize = 64;

/// Deepest product whose packed right operand [`gemm_then`] multiplies
/// itself: `gemm` sums up to 512 `k` in one block on every host
/// (gemm-common's `kernel_params`), so each element is one chain of
/// multiply-adds there as here.
const MAX_PACKED_K: usize = 512;

/// Whether [`gemm_then`] uses a right operand packed by [`pack_rhs`] for
/// the product `d` (on a host with [`GemmFloat::micro`]): one batch item,
/// at most [`MAX_PACKED_K`] deep, and a shape `gemm` computes with its
/// micro-kernels (not its paths for products 2 deep or less, one row or
/// column, or 256 elements or fewer), so that the bits are `gemm`'s.
pub fn packs(d: &GemmDims) -> bool {
    d.b == 1 && d.k > 2 && d.k <= MAX_PACKED_K && d.m > 1 && d.n > 1 && d.m * d.n > 256
}

/// Elements of the buffer [`pack_rhs`] fills for a `(k, n)` right
/// operand, on any host.
pub fn packed_len(k: usize, n: usize) -> Option<usize> {
    k.checked_mul(n.div_ceil(MAX_PANEL) * MAX_PANEL)
}

/// Packs the right operand `(k, n)` at `rhs` (element `(kk, j)` at
/// `rhs + kk·rk + j·rn`) into `dst` as this host's micro-kernels read it:
/// panel `p` (columns `p·mr..`, `mr` = [`Micro::panel`]) at `dst + p·mr·k`,
/// holding for each `kk` the `mr` values of row `kk` (zeros past `n`). A
/// loop's GEMM packs its loop-invariant operand once, before the loop, in
/// place of `gemm` packing it at every step. Nothing happens on a host
/// without [`GemmFloat::micro`] (its products read `rhs` itself).
///
/// # Safety
/// `rhs` is readable at every offset its strides reach over `(k, n)`;
/// `dst` is writable for [`packed_len`]`(k, n)` elements.
pub unsafe fn pack_rhs<T: GemmFloat>(
    k: usize,
    n: usize,
    rhs: *const T,
    [rk, rn]: [isize; 2],
    dst: *mut T,
) {
    let Some(micro) = T::micro() else {
        return;
    };
    let mr = micro.panel();
    for p in 0..n.div_ceil(mr) {
        let c0 = p * mr;
        let width = mr.min(n - c0);
        for kk in 0..k {
            // SAFETY: (kk, c0 + i) lies inside the operand for i < width;
            // the panel row lies inside `dst`, which holds `k` rows of
            // every panel up to `MAX_PANEL`-padded `n` columns.
            unsafe {
                let to = dst.add(p * mr * k + kk * mr);
                let from = rhs.offset(kk as isize * rk + c0 as isize * rn);
                if rn == 1 {
                    std::ptr::copy_nonoverlapping(from, to, width);
                } else {
                    for i in 0..width {
                        to.add(i).write(*from.offset(i as isize * rn));
                    }
                }
                for i in width..mr {
                    to.add(i).write(T::ZERO);
                }
            }
        }
    }
}

mod private {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

/// How a product is stored: `out = scale·(lhs @ rhs)`, or with
/// `accumulate`, `out += scale·(lhs @ rhs)` (`gemm`'s `beta` is the scale:
/// it multiplies each finished block of sums, so a power of two gives the
/// bits of a product of an operand scaled by it, in the normal range).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Store {
    /// Add to the output's values instead of overwriting them.
    pub accumulate: bool,
    /// The product's factor (1 for a plain product).
    pub scale: f64,
}

impl Store {
    /// `out = lhs @ rhs`.
    pub const WRITE: Store = Store {
        accumulate: false,
        scale: 1.0,
    };
    /// `out += lhs @ rhs`.
    pub const ADD: Store = Store {
        accumulate: true,
        scale: 1.0,
    };
}

#[derive(Clone, Copy)]
struct Ptrs<T: 'static> {
    lhs: *const T,
    rhs: *const T,
    out: *mut T,
    /// `out += …` instead of `out = …`.
    accumulate: bool,
    /// `gemm`'s `beta`: the product's factor ([`Store::scale`]).
    scale: T,
    /// `rhs` as [`pack_rhs`] packed it, read instead of `rhs` (`None`:
    /// `gemm` reads `rhs`).
    packed: Option<Packed<T>>,
}

/// A packed right operand and the micro-kernels it is packed for.
#[derive(Clone, Copy)]
struct Packed<T: 'static> {
    ptr: *const T,
    micro: Micro<T>,
}

// SAFETY: the parts of a split write disjoint ranges of `out` and only
// read `lhs`/`rhs`; the caller of [`gemm`] blocks until every part is done.
unsafe impl<T: 'static> Send for Ptrs<T> {}
// SAFETY: as above.
unsafe impl<T: 'static> Sync for Ptrs<T> {}

/// `out = lhs @ rhs` for every batch item, overwriting `out` (contiguous,
/// (b, m, n)), or with `accumulate`, `out += lhs @ rhs` (the JIT's GEMM
/// fused with the `add` of an accumulator, outside exact mode: `gemm`
/// adds each k-block's partial sum to `out` in turn, so when `k` spans
/// several blocks the rounding differs from adding the finished product);
/// split over the threads of [`crate::pool`] as [`GemmDims::split`] says when `threads`,
/// else on the calling thread. The bits do not depend on `threads` or the
/// pool's size.
///
/// # Safety
/// `lhs` and `rhs` are valid for reads at every offset their strides
/// reach over `d`'s sizes, `out` for reads (with `accumulate`) and writes
/// of `b·m·n` elements, and `out` overlaps neither operand.
pub unsafe fn gemm<T: GemmFloat>(
    d: &GemmDims,
    lhs: *const T,
    rhs: *const T,
    out: *mut T,
    threads: bool,
    accumulate: bool,
) {
    let store = if accumulate { Store::ADD } else { Store::WRITE };
    // SAFETY: the caller's contract.
    unsafe { gemm_then(d, lhs, rhs, out, std::ptr::null(), threads, store, None, 1) }
}

/// Rows of every item of a product's output, finished: what [`gemm_then`]
/// hands its epilogue.
pub type Epilogue<'a> = &'a (dyn Fn(std::ops::Range<usize>) + Sync);

/// [`gemm`], then `then` on ranges of rows `r` (of every batch item) once
/// they are final, which together cover `0..m` once: split by rows
/// ([`GemmDims::split_by_rows`]), each part calls it on its rows as soon
/// as it finishes them, on its thread, while their output is in its cache
/// (a JIT GEMM's epilogue kernel: the bias and activation after a layer);
/// otherwise after the whole product, on `then_parts` ranges of rows over
/// the pool (once on `0..m` for 1). `packed`, unless null, holds `rhs`
/// as [`pack_rhs`] packed it; the product reads it instead of `rhs` where
/// [`packs`] allows (same bits).
///
/// # Safety
/// As [`gemm`]; `then` may read what the product wrote in its rows;
/// `packed` is null or holds what [`pack_rhs`] wrote for `rhs` as it is
/// now.
#[allow(
    clippy::too_many_arguments,
    reason = "gemm's operands, then the epilogue's"
)]
pub unsafe fn gemm_then<T: GemmFloat>(
    d: &GemmDims,
    lhs: *const T,
    rhs: *const T,
    out: *mut T,
    packed: *const T,
    threads: bool,
    store: Store,
    then: Option<Epilogue<'_>>,
    then_parts: usize,
) {
    let Store { accumulate, scale } = store;
    let scale = T::of(scale);
    let total = d.b * d.m * d.n;
    let done = || {
        if let Some(f) = then
            && d.m > 0
        {
            f(0..d.m);
        }
    };
    if total == 0 {
        done();
        return;
    }
    if d.k == 0 {
        if !accumulate {
            // SAFETY: `out` holds `total` elements.
            unsafe { std::slice::from_raw_parts_mut(out, total).fill(T::ZERO) };
        }
        done();
        return;
    }
    let packed = T::micro()
        .filter(|_| !packed.is_null() && packs(d))
        .map(|micro| Packed { ptr: packed, micro });
    let split = match (threads, packed, then) {
        (false, ..) => GemmSplit::One("threads off"),
        (true, Some(_), _) => d.split_packed(crate::pool::threads()),
        (true, None, None) => d.split(crate::pool::threads()),
        (true, None, Some(_)) => d.split_by_rows(crate::pool::threads()),
    };
    if packed.is_some() {
        let p = Ptrs {
            lhs,
            rhs,
            out,
            accumulate,
            scale,
            packed,
        };
        // SAFETY: the caller's contract; `packed` holds `rhs` packed.
        unsafe { run(d, p, split, true, then, then_parts) };
        return;
    }
    let [rb, rk, rn] = d.rhs_strides;
    if rk == 1 && rn != 1 && 2 * d.m >= d.n && d.k > 1 {
        // A column-major right operand with enough rows on the left:
        // `gemm` packs it slowly (a 256×512 by transposed 512×512 product
        // took 1.9× the row-major one's time on two threads), so multiply a
        // row-major copy (the copy costs a tenth of the product). Fewer
        // left rows take `part_transposed` instead.
        if let Some(mut copy) = row_major_copy(d, rhs, [rb, rn], threads) {
            let d = GemmDims {
                rhs_strides: [(d.k * d.n) as isize, d.n as isize, 1],
                ..*d
            };
            let p = Ptrs {
                lhs,
                rhs: copy.as_mut_ptr().cast::<T>().cast_const(),
                out,
                accumulate,
                scale,
                packed: None,
            };
            // SAFETY: the caller's contract for `lhs` and `out`; `copy` holds
            // the right operand in the strides just set.
            unsafe { run(&d, p, split, true, then, then_parts) };
            return;
        }
    }
    let p = Ptrs {
        lhs,
        rhs,
        out,
        accumulate,
        scale,
        packed: None,
    };
    // SAFETY: the caller's contract.
    unsafe { run(d, p, split, true, then, then_parts) };
}

/// The right operand of `d` (contracted dim contiguous: element `(b, k,
/// j)` at `rhs + b·rb + k + j·rn`) copied row-major, `(b, k, n)`, in
/// blocks of 16×16 (a cache line of each of 16 rows on both sides), 16
/// source rows at a time read from start to end (a weight matrix that the
/// products before evicted streams in; reading block columns instead was
/// no faster); split over the pool when `threads` and the copy is large,
/// by ranges of batch items where there are as many as ranges of `k`.
fn row_major_copy<T: GemmFloat>(
    d: &GemmDims,
    rhs: *const T,
    [rb, rn]: [isize; 2],
    threads: bool,
) -> Option<AlignedBytes> {
    const BLOCK: usize = 16;
    let (b, k, n) = (d.b, d.k, d.n);
    let bytes = (b * k * n).checked_mul(std::mem::size_of::<T>())?;
    // SAFETY: every byte is written below before the GEMM reads it.
    let mut copy = unsafe { AlignedBytes::try_for_overwrite(bytes) }.ok()?;
    let dst = Ptrs {
        lhs: rhs,
        rhs,
        // (16-byte aligned, as f32 and f64 need.)
        out: copy.as_mut_ptr().cast::<T>(),
        accumulate: false,
        scale: T::ONE,
        packed: None,
    };
    let avx = std::mem::size_of::<T>() == 4 && has_avx();
    // (`move`: the sizes as the closure's own values, which the stores
    // through raw pointers cannot alias, and the whole `Ptrs`, which is
    // Sync, not its raw pointer fields.)
    let rows = move |items: std::ops::Range<usize>, part: std::ops::Range<usize>| {
        let dst = dst;
        for bi in items {
            for j0 in (0..n).step_by(BLOCK) {
                for k0 in part.clone().step_by(BLOCK) {
                    let (j1, k1) = ((j0 + BLOCK).min(n), (k0 + BLOCK).min(part.end));
                    if avx && j1 - j0 == BLOCK && k1 - k0 == BLOCK {
                        for (jj, kk) in [(0, 0), (0, 8), (8, 0), (8, 8)] {
                            let (j, kk) = (j0 + jj, k0 + kk);
                            // SAFETY: AVX is present (`has_avx`); the 8×8
                            // tile at (bi, kk.., j..) lies inside the operand
                            // and inside this part's rows of `copy`, and T
                            // is f32 (4 bytes, the only such GemmFloat).
                            unsafe {
                                transpose_8x8_f32(
                                    dst.rhs
                                        .offset(bi as isize * rb + kk as isize + j as isize * rn)
                                        .cast::<f32>(),
                                    rn,
                                    dst.out.add((bi * k + kk) * n + j).cast::<f32>(),
                                    n,
                                )
                            };
                        }
                        continue;
                    }
                    for j in j0..j1 {
                        for kk in k0..k1 {
                            // SAFETY: (bi, kk, j) lies inside the operand the
                            // caller of `gemm` describes, and inside `copy`,
                            // which parts write in disjoint ranges of `k`.
                            unsafe {
                                let v = *dst
                                    .rhs
                                    .offset(bi as isize * rb + kk as isize + j as isize * rn);
                                dst.out.add((bi * k + kk) * n + j).write(v);
                            }
                        }
                    }
                }
            }
        }
    };
    let pool = match threads && b * k * n >= COPY_PARALLEL {
        true => crate::pool::threads(),
        false => 1,
    };
    if b >= pool.min(k / BLOCK).max(2) {
        // Ranges of batch items where they give as many parts as ranges of
        // `k` or more (attention's 64 items of k = 64 on 16 threads).
        let parts = pool.min(b);
        let cut = |i: usize| b * i / parts;
        crate::pool::run_parts(parts, &|i| rows(cut(i)..cut(i + 1), 0..k));
        return Some(copy);
    }
    let parts = pool.min(k / BLOCK).max(1);
    let cut = |i: usize| {
        if i == parts {
            k
        } else {
            k * i / parts / BLOCK * BLOCK
        }
    };
    crate::pool::run_parts(parts, &|i| rows(0..b, cut(i)..cut(i + 1)));
    Some(copy)
}

/// Elements from which [`row_major_copy`] splits over the pool.
const COPY_PARALLEL: usize = 1 << 16;

/// Whether this host runs AVX (the 8×8 f32 transposes of
/// [`row_major_copy`]).
fn has_avx() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Writes the 8×8 block of f32 whose row `r` (8 contiguous values) starts
/// at `src + r·src_stride` transposed: row `c` of the result, at `dst +
/// c·dst_stride`, holds element `c` of every source row. The values keep
/// their bits (moves and shuffles only).
///
/// # Safety
/// The host has AVX; the 8 source rows are readable and the 8 destination
/// rows writable, 8 elements each.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn transpose_8x8_f32(src: *const f32, src_stride: isize, dst: *mut f32, dst_stride: usize) {
    use std::arch::x86_64::{
        _mm256_loadu_ps, _mm256_permute2f128_ps, _mm256_setzero_ps, _mm256_shuffle_ps,
        _mm256_storeu_ps, _mm256_unpackhi_ps, _mm256_unpacklo_ps,
    };
    // (Loops, not closures: a closure would not inherit the AVX feature.)
    let mut r = [_mm256_setzero_ps(); 8];
    for (i, row) in r.iter_mut().enumerate() {
        // SAFETY: the caller's contract for the eight rows read.
        *row = unsafe { _mm256_loadu_ps(src.offset(i as isize * src_stride)) };
    }
    // Pairs of rows interleaved (t[4g + 2p] the low halves of rows 4g + 2p
    // and 4g + 2p + 1, t[4g + 2p + 1] the high), then pairs of those: s[c]
    // holds column c of rows 0-3 in its low 128 bits and column c + 4 in
    // its high, s[4 + c] the same of rows 4-7.
    let mut t = [_mm256_setzero_ps(); 8];
    for g in [0, 4] {
        for p in [0, 2] {
            t[g + p] = _mm256_unpacklo_ps(r[g + p], r[g + p + 1]);
            t[g + p + 1] = _mm256_unpackhi_ps(r[g + p], r[g + p + 1]);
        }
    }
    let mut s = [_mm256_setzero_ps(); 8];
    for g in [0, 4] {
        for p in [0, 1] {
            s[g + 2 * p] = _mm256_shuffle_ps::<0x44>(t[g + p], t[g + p + 2]);
            s[g + 2 * p + 1] = _mm256_shuffle_ps::<0xEE>(t[g + p], t[g + p + 2]);
        }
    }
    for c in 0..4 {
        let low = _mm256_permute2f128_ps::<0x20>(s[c], s[4 + c]);
        let high = _mm256_permute2f128_ps::<0x31>(s[c], s[4 + c]);
        // SAFETY: the caller's contract for the eight rows written.
        unsafe {
            _mm256_storeu_ps(dst.add(c * dst_stride), low);
            _mm256_storeu_ps(dst.add((c + 4) * dst_stride), high);
        }
    }
}

/// Never called: [`has_avx`] is false off x86-64.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn transpose_8x8_f32(_: *const f32, _: isize, _: *mut f32, _: usize) {}

/// Runs the parts of `split`, on the pool when `parallel`, else one after
/// the other on the calling thread; then `then` as [`gemm_then`] says.
///
/// # Safety
/// As [`gemm`], with `d.k > 0`.
unsafe fn run<T: GemmFloat>(
    d: &GemmDims,
    p: Ptrs<T>,
    split: GemmSplit,
    parallel: bool,
    then: Option<Epilogue<'_>>,
    then_parts: usize,
) {
    let go = |parts: usize, f: &(dyn Fn(usize) + Sync)| {
        if parallel {
            crate::pool::run_parts(parts, f);
        } else {
            (0..parts).for_each(f);
        }
    };
    type R = std::ops::Range<usize>;
    let block = |items: R, rows: R, cols: R| {
        // SAFETY: the caller's contract for the whole product; the blocks
        // of one split write disjoint ranges of `out`.
        unsafe { part(d, p, items, rows, cols) }
    };
    match split {
        GemmSplit::One(_) => block(0..d.b, 0..d.m, 0..d.n),
        GemmSplit::Batch(parts) => go(parts, &|i| {
            block(d.b * i / parts..d.b * (i + 1) / parts, 0..d.m, 0..d.n)
        }),
        GemmSplit::Columns(parts) => {
            let cuts = match p.packed {
                Some(pk) => panel_cuts(d, pk, parts),
                None => column_cuts(d.n, parts),
            };
            go(parts, &|i| block(0..d.b, 0..d.m, cuts[i]..cuts[i + 1]));
        }
        GemmSplit::Rows(parts) => {
            let cut = row_cuts(d, p, parts);
            go(parts, &|i| {
                let rows = cut[i]..cut[i + 1];
                block(0..d.b, rows.clone(), 0..d.n);
                if let Some(f) = then
                    && !rows.is_empty()
                {
                    f(rows);
                }
            });
            return;
        }
        GemmSplit::Tiles { rows, columns } => {
            let cut = row_cuts(d, p, rows);
            let cuts = match p.packed {
                Some(pk) => panel_cuts(d, pk, columns),
                None => column_cuts(d.n, columns),
            };
            // Tiles left in each range of rows: the last to finish runs
            // the epilogue on it (its writes and the others' are visible
            // to it through the counter's acquire-release).
            let left: Vec<AtomicUsize> = (0..rows).map(|_| AtomicUsize::new(columns)).collect();
            go(rows * columns, &|t| {
                let (i, j) = (t / columns, t % columns);
                let band = cut[i]..cut[i + 1];
                block(0..d.b, band.clone(), cuts[j]..cuts[j + 1]);
                if let Some(f) = then
                    && left[i].fetch_sub(1, Ordering::AcqRel) == 1
                    && !band.is_empty()
                {
                    f(band);
                }
            });
            return;
        }
    }
    // The epilogue after the whole product.
    if let Some(f) = then {
        let n = then_parts.clamp(1, d.m.max(1));
        if n > 1 && parallel {
            go(n, &|i| f(d.m * i / n..d.m * (i + 1) / n));
        } else {
            f(0..d.m);
        }
    }
}

/// Row boundaries of `parts` ranges of `d.m`: whole blocks of the
/// micro-kernel's rows where they are called directly.
fn row_cuts<T>(d: &GemmDims, p: Ptrs<T>, parts: usize) -> Vec<usize> {
    let unit = if p.packed.is_some() { PACKED_ROWS } else { 1 };
    (0..=parts)
        .map(|i| match i == parts {
            true => d.m,
            false => d.m / unit * i / parts * unit,
        })
        .collect()
}

/// Column boundaries of `parts` ranges of whole panels of the packed
/// operand.
fn panel_cuts<T>(d: &GemmDims, pk: Packed<T>, parts: usize) -> Vec<usize> {
    let mr = pk.micro.panel();
    let panels = d.n.div_ceil(mr);
    (0..=parts)
        .map(|i| (panels * i / parts * mr).min(d.n))
        .collect()
}

/// Rows `rows` × columns `cols` of items `items`.
///
/// # Safety
/// As [`gemm`], with `d.k > 0`.
unsafe fn part<T: GemmFloat>(
    d: &GemmDims,
    p: Ptrs<T>,
    items: std::ops::Range<usize>,
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
) {
    let [lb, lm, lk] = d.lhs_strides;
    let [rb, rk, rn] = d.rhs_strides;
    let n = d.n as isize;
    if rows.is_empty() || cols.is_empty() {
        return;
    }
    if let Some(pk) = p.packed {
        // SAFETY: the caller's contract; `pk` holds the right operand as
        // `pack_rhs` packs it, and `cols` starts on a panel (`run`'s
        // column cuts).
        unsafe { part_packed(d, p, pk, rows, cols) };
        return;
    }
    // `gemm` packs a large column-major right operand slowly (a 64×512 by
    // transposed 512×512 product, what a gradient's `g·Wᵀ` is, takes 2.3×
    // the time of the row-major one). Transposing pays while the left
    // operand has under half the right's columns in rows (at 512 columns:
    // 425 → 246 µs for 64 rows, 583 → 516 µs for 128; 256 rows lose,
    // 872 → 1024 µs).
    if rk == 1 && rn != 1 && 2 * d.m < d.n {
        // SAFETY: the caller's contract.
        unsafe { part_transposed(d, p, items, rows, cols) };
        return;
    }
    for bi in items {
        let bi = bi as isize;
        let (r0, c0) = (rows.start as isize, cols.start as isize);
        // SAFETY: the offsets stay inside the operands and the output, as
        // the caller guarantees for the whole product.
        unsafe {
            ::gemm::gemm(
                rows.len(),
                cols.len(),
                d.k,
                p.out.offset(bi * d.m as isize * n + r0 * n + c0),
                1,
                n,
                p.accumulate,
                p.lhs.offset(bi * lb + r0 * lm),
                lk,
                lm,
                p.rhs.offset(bi * rb + c0 * rn),
                rn,
                rk,
                if p.accumulate { T::ONE } else { T::ZERO },
                p.scale,
                false,
                false,
                false,
                ::gemm::Parallelism::None,
            );
        }
    }
}

/// [`part`] over a packed right operand: `gemm`'s micro-kernels called as
/// `gemm` calls them (the product transposed, `outᵀ = rhsᵀ·lhsᵀ`, panels
/// of `mr` columns by up to 6 rows, all of `k` in one block), so each
/// element gets `gemm`'s bits; a block of panels that fits in half of a
/// 512 KiB L2 at a time, each panel swept over the rows 6 at a time.
///
/// # Safety
/// As [`part`]; `pk` holds the right operand packed for its micro-kernels
/// and `cols.start` is a multiple of their panel width; [`packs`]`(d)`.
unsafe fn part_packed<T: GemmFloat>(
    d: &GemmDims,
    p: Ptrs<T>,
    Packed { ptr: packed, micro }: Packed<T>,
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
) {
    const NR: usize = PACKED_ROWS;
    let [_, lm, lk] = d.lhs_strides;
    let mr = micro.panel();
    let panel = mr * d.k;
    let block = ((256 << 10) / std::mem::size_of::<T>() / panel).max(1);
    let (alpha, status) = if p.accumulate {
        (T::ONE, 1)
    } else {
        (T::ZERO, 0)
    };
    let panels = cols.start / mr..cols.end.div_ceil(mr);
    for b0 in panels.clone().step_by(block) {
        let b1 = (b0 + block).min(panels.end);
        for r0 in rows.clone().step_by(NR) {
            let nn = NR.min(rows.end - r0);
            for pi in b0..b1 {
                let c0 = pi * mr;
                let mm = mr.min(cols.end - c0);
                let f = micro.ukr[mm.div_ceil(micro.lanes) - 1][nn - 1];
                // SAFETY: the block (r0.., c0..) of `mm` columns by `nn`
                // rows lies inside `out`; the panel inside `packed`; rows
                // r0.. of the left operand inside it (the caller's
                // contract); the kernel reads `k` values of each.
                unsafe {
                    let a = packed.add(pi * panel);
                    f(
                        mm,
                        nn,
                        d.k,
                        p.out.add(r0 * d.n + c0),
                        a,
                        p.lhs.offset(r0 as isize * lm),
                        d.n as isize,
                        1,
                        mr as isize,
                        lk,
                        lm,
                        alpha,
                        p.scale,
                        status,
                        false,
                        false,
                        false,
                        a,
                    );
                }
            }
        }
    }
}

/// [`part`] computed as `outᵀ = rhsᵀ·lhsᵀ` into a row-major scratch block,
/// then transposed into `out`: the smaller left operand is packed from its
/// column-major view instead of the large right one.
///
/// # Safety
/// As [`part`].
#[inline(never)]
unsafe fn part_transposed<T: GemmFloat>(
    d: &GemmDims,
    p: Ptrs<T>,
    items: std::ops::Range<usize>,
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
) {
    let [lb, lm, lk] = d.lhs_strides;
    let [rb, rk, rn] = d.rhs_strides;
    let n = d.n as isize;
    let (h, w) = (cols.len(), rows.len());
    let mut scratch: Vec<T> = vec![T::ZERO; h * w];
    for bi in items {
        let bi = bi as isize;
        let (r0, c0) = (rows.start as isize, cols.start as isize);
        // SAFETY: the operands' offsets are those `part` reads; `scratch`
        // holds `h·w` elements.
        unsafe {
            ::gemm::gemm(
                h,
                w,
                d.k,
                scratch.as_mut_ptr(),
                1,
                w as isize,
                false,
                p.rhs.offset(bi * rb + c0 * rn),
                rk,
                rn,
                p.lhs.offset(bi * lb + r0 * lm),
                lm,
                lk,
                T::ZERO,
                p.scale,
                false,
                false,
                false,
                ::gemm::Parallelism::None,
            );
        }
        let base = bi * d.m as isize * n + r0 * n + c0;
        for (c, row) in scratch.chunks_exact(w).enumerate() {
            for (r, v) in row.iter().enumerate() {
                // SAFETY: (r0 + r, c0 + c) is inside this part's block of
                // `out`.
                unsafe {
                    let o = p.out.offset(base + r as isize * n + c as isize);
                    *o = if p.accumulate { *o + *v } else { *v };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn data(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s as f32 / u32::MAX as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// Every split [`GemmDims::split`] can choose (pools of 2 to 16
    /// threads, tiles among them) gives the whole product's bits, accumulating into `out` or
    /// not (accumulating adds the product up to rounding), over shapes on both sides
    /// of gemm's path boundaries (64, 512-deep blocks), with row-major and
    /// transposed operands; scaled by a power of two, the bits of the
    /// product of the scaled left operand.
    #[test]
    fn splits_do_not_change_bits() {
        let sizes = [
            1usize, 3, 5, 17, 63, 64, 65, 100, 129, 130, 144, 257, 513, 700,
        ];
        let mut seed = 7u32;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed as usize
        };
        let (mut splits, mut tiles) = (0, 0);
        for _ in 0..300 {
            let (b, m, k, n) = (
                1 + rnd() % 2,
                sizes[rnd() % sizes.len()],
                sizes[rnd() % sizes.len()],
                sizes[rnd() % sizes.len()],
            );
            let (lt, rt) = (rnd() % 2 == 1, rnd() % 2 == 1);
            let l = data(b * m * k, rnd() as u32);
            let r = data(b * k * n, rnd() as u32);
            let (bm, bk) = (b * m * k, b * k * n);
            let d = GemmDims {
                b,
                m,
                k,
                n,
                lhs_strides: [
                    (m * k) as isize,
                    if lt { 1 } else { k as isize },
                    if lt { m as isize } else { 1 },
                ],
                rhs_strides: [
                    (k * n) as isize,
                    if rt { 1 } else { n as isize },
                    if rt { k as isize } else { 1 },
                ],
            };
            assert_eq!((l.len(), r.len()), (bm, bk));
            let accumulate = rnd() % 2 == 1;
            let scale = [1.0f32, 0.125, 4.0][rnd() % 3];
            let scaled: Vec<f32> = l.iter().map(|v| v * scale).collect();
            let start = data(b * m * n, rnd() as u32);
            let product = |split, accumulate, lhs: &[f32], scale| {
                let mut out = if accumulate {
                    start.clone()
                } else {
                    vec![0f32; b * m * n]
                };
                let p = Ptrs {
                    lhs: lhs.as_ptr(),
                    rhs: r.as_ptr(),
                    out: out.as_mut_ptr(),
                    accumulate,
                    scale,
                    packed: None,
                };
                // SAFETY: the strides describe `l` and `r`; `out` is b·m·n.
                unsafe { run(&d, p, split, false, None, 1) };
                out
            };
            let whole = |split| product(split, accumulate, &l, scale);
            let want = whole(GemmSplit::One("whole"));
            let of_scaled = product(GemmSplit::One("whole"), accumulate, &scaled, 1.0);
            assert!(
                want.iter()
                    .zip(&of_scaled)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "a product scaled by {scale} is not that of the scaled operand for {d:?}"
            );
            if accumulate {
                // `out + lhs @ rhs`, up to rounding.
                let plain = product(GemmSplit::One("whole"), false, &l, scale);
                for ((w, p), s) in want.iter().zip(&plain).zip(&start) {
                    let tol = 1e-5 * (1.0 + k as f32) * (1.0 + s.abs() + p.abs());
                    assert!((w - (p + s)).abs() <= tol, "{w} != {p} + {s} for {d:?}");
                }
            }
            for threads in 2..=16 {
                let split = d.split(threads);
                if matches!(split, GemmSplit::One(_)) {
                    continue;
                }
                splits += 1;
                tiles += usize::from(matches!(split, GemmSplit::Tiles { .. }));
                let got = whole(split);
                assert!(
                    got.iter()
                        .zip(&want)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{split:?} of {d:?} changed bits"
                );
            }
        }
        assert!(splits > 50, "only {splits} splits exercised");
        assert!(tiles > 20, "only {tiles} tilings exercised");
    }

    /// A right operand packed by `pack_rhs` gives `gemm`'s bits, whatever
    /// the split, in f32 and f64, accumulating or not, scaled, over operands
    /// row-major, column-major and strided, sizes off the panel and row
    /// blocks, and shapes `packs` refuses (which read `rhs`).
    #[test]
    fn packed_right_operands_give_gemms_bits() {
        fn check<T: GemmFloat + std::fmt::Debug>(cast: fn(f32) -> T, bits: fn(T) -> u64) {
            let mut cases = 0;
            for (m, k, n, rt, rn_pad, accumulate) in [
                (64, 512, 512, false, 0, false),
                (7, 100, 130, true, 0, true),
                (130, 33, 65, false, 3, false),
                (2, 3, 200, true, 5, false),
                (200, 511, 17, false, 0, true),
                (9, 512, 64, true, 1, false),
                (5, 700, 100, false, 0, false),
                (16, 16, 16, false, 0, false),
                (1, 40, 300, false, 0, false),
                // Just past `gemm`'s horizontal path (m·n = 258) and at
                // the deepest one-block `k`, transposed.
                (2, 100, 129, false, 0, true),
                (3, 512, 86, true, 2, false),
            ] {
                let l: Vec<T> = data(m * k, 1).into_iter().map(cast).collect();
                // `rn_pad` columns of padding between rows (or columns) of
                // the stored right operand.
                let (rk, rn, len) = if rt {
                    (1, (k + rn_pad) as isize, n * (k + rn_pad))
                } else {
                    ((n + rn_pad) as isize, 1, k * (n + rn_pad))
                };
                let r: Vec<T> = data(len, 2).into_iter().map(cast).collect();
                let d = GemmDims {
                    b: 1,
                    m,
                    k,
                    n,
                    lhs_strides: [0, k as isize, 1],
                    rhs_strides: [0, rk, rn],
                };
                let start: Vec<T> = data(m * n, 3).into_iter().map(cast).collect();
                let mut want = start.clone();
                // Scaled by 1/2 (gemm's `beta`): the bits of the product
                // of the halved left operand.
                let halved: Vec<T> = data(m * k, 1).into_iter().map(|v| cast(v * 0.5)).collect();
                // SAFETY: the strides describe `l` and `r`; `want` is m·n.
                unsafe {
                    gemm(
                        &d,
                        halved.as_ptr(),
                        r.as_ptr(),
                        want.as_mut_ptr(),
                        false,
                        accumulate,
                    )
                };
                let mut buf = vec![cast(f32::NAN); packed_len(k, n).unwrap()];
                // SAFETY: as above; `buf` holds `packed_len` elements.
                unsafe { pack_rhs(k, n, r.as_ptr(), [rk, rn], buf.as_mut_ptr()) };
                let packed = T::micro().filter(|_| packs(&d)).map(|micro| Packed {
                    ptr: buf.as_ptr(),
                    micro,
                });
                for split in [
                    GemmSplit::One("whole"),
                    GemmSplit::Rows(2),
                    GemmSplit::Rows(3),
                    GemmSplit::Columns(2),
                    GemmSplit::Columns(3),
                    GemmSplit::Tiles {
                        rows: 2,
                        columns: 3,
                    },
                    GemmSplit::Tiles {
                        rows: 3,
                        columns: 2,
                    },
                ]
                .into_iter()
                // (Unpacked products are split only as `split` would.)
                .take(if packed.is_some() { 7 } else { 1 })
                {
                    let mut out = start.clone();
                    let p = Ptrs {
                        lhs: l.as_ptr(),
                        rhs: r.as_ptr(),
                        out: out.as_mut_ptr(),
                        accumulate,
                        scale: cast(0.5),
                        packed,
                    };
                    // SAFETY: as above.
                    unsafe { run(&d, p, split, false, None, 1) };
                    assert!(
                        out.iter().zip(&want).all(|(a, b)| bits(*a) == bits(*b)),
                        "{split:?} of packed {d:?} ({:?}) changed bits",
                        packed.map(|pk| pk.micro)
                    );
                    cases += usize::from(packed.is_some());
                }
            }
            // (A host without FMA never takes the packed path: there the
            // test checks only that `rhs` is read.)
            if T::micro().is_some() {
                assert!(cases >= 30, "only {cases} packed cases");
            }
        }
        check::<f32>(|v| v, |v| u64::from(v.to_bits()));
        check::<f64>(f64::from, f64::to_bits);
    }

    #[test]
    fn epilogues_see_every_row_once_when_final() {
        // 200×300 by 300×160: rows and columns split in several ways.
        let (m, k, n) = (200, 300, 160);
        let d = GemmDims {
            b: 1,
            m,
            k,
            n,
            lhs_strides: [0, k as isize, 1],
            rhs_strides: [0, n as isize, 1],
        };
        let (l, r) = (data(m * k, 1), data(k * n, 2));
        let mut want = vec![0f32; m * n];
        // SAFETY: the strides describe `l` and `r`; `want` is m·n.
        unsafe { gemm(&d, l.as_ptr(), r.as_ptr(), want.as_mut_ptr(), false, false) };
        let splits = [
            GemmSplit::One("whole"),
            GemmSplit::Rows(2),
            GemmSplit::Rows(3),
            GemmSplit::Columns(2),
            GemmSplit::Tiles {
                rows: 2,
                columns: 2,
            },
            GemmSplit::Tiles {
                rows: 3,
                columns: 2,
            },
        ];
        for (split, then_parts) in splits.into_iter().flat_map(|s| [(s, 1), (s, 3)]) {
            let mut out = vec![0f32; m * n];
            let base = SendPtr(out.as_mut_ptr());
            let seen = std::sync::Mutex::new(vec![0usize; m]);
            let copied = std::sync::Mutex::new(vec![f32::NAN; m * n]);
            let then = |rows: std::ops::Range<usize>| {
                let base = &base;
                for i in rows {
                    seen.lock().unwrap()[i] += 1;
                    // SAFETY: row `i` of `out` is final and no part writes it now.
                    let row = unsafe { std::slice::from_raw_parts(base.0.add(i * n), n) };
                    copied.lock().unwrap()[i * n..(i + 1) * n].copy_from_slice(row);
                }
            };
            let p = Ptrs {
                lhs: l.as_ptr(),
                rhs: r.as_ptr(),
                out: out.as_mut_ptr(),
                accumulate: false,
                scale: 1.0,
                packed: None,
            };
            // SAFETY: as above; the epilogue reads rows once they are final.
            unsafe { run(&d, p, split, true, Some(&then), then_parts) };
            assert!(seen.lock().unwrap().iter().all(|&c| c == 1), "{split:?}");
            let copied = copied.lock().unwrap();
            assert!(
                copied
                    .iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{split:?}: the epilogue saw rows before they were final"
            );
        }
    }

    struct SendPtr(*mut f32);
    // SAFETY: test-only; the epilogue reads rows no part writes any more.
    unsafe impl Sync for SendPtr {}

    /// A column-major right operand with many left rows is multiplied as
    /// its row-major copy: the same bits as the row-major product of the
    /// same matrix (batched, accumulating or not, on the pool or not, sizes
    /// not multiples of the copy's blocks), and the product within rounding.
    #[test]
    fn column_major_rhs_gives_the_row_major_bits() {
        for (b, m, k, n, accumulate, threads) in [
            (1, 300, 257, 130, false, true),
            (2, 96, 33, 150, true, false),
            (1, 512, 512, 512, true, true),
        ] {
            let l = data(b * m * k, 1);
            let r = data(b * k * n, 2);
            // `rt[b][j][kk]`: the same matrix stored column-major.
            let mut rt = vec![0f32; b * k * n];
            for bi in 0..b {
                for kk in 0..k {
                    for j in 0..n {
                        rt[(bi * n + j) * k + kk] = r[(bi * k + kk) * n + j];
                    }
                }
            }
            let start = data(b * m * n, 3);
            let product = |rhs: &[f32], rhs_strides| {
                let d = GemmDims {
                    b,
                    m,
                    k,
                    n,
                    lhs_strides: [(m * k) as isize, k as isize, 1],
                    rhs_strides,
                };
                let mut out = start.clone();
                // SAFETY: the strides describe `l` and `rhs`; `out` is b·m·n.
                unsafe {
                    gemm(
                        &d,
                        l.as_ptr(),
                        rhs.as_ptr(),
                        out.as_mut_ptr(),
                        threads,
                        accumulate,
                    )
                };
                out
            };
            let want = product(&r, [(k * n) as isize, n as isize, 1]);
            let got = product(&rt, [(k * n) as isize, 1, k as isize]);
            assert!(
                got.iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "b={b} m={m} k={k} n={n}: column-major rhs changed bits"
            );
            for bi in 0..b {
                for i in (0..m).step_by(37) {
                    for j in (0..n).step_by(11) {
                        let dot: f64 = (0..k)
                            .map(|kk| {
                                f64::from(l[(bi * m + i) * k + kk])
                                    * f64::from(r[(bi * k + kk) * n + j])
                            })
                            .sum();
                        let o = (bi * m + i) * n + j;
                        let expect = dot + if accumulate { f64::from(start[o]) } else { 0.0 };
                        assert!((f64::from(got[o]) - expect).abs() < 1e-4 * k as f64);
                    }
                }
            }
        }
    }

    /// The copy of a column-major right operand holds every element in
    /// its row-major place, bit for bit, whatever the sizes (full 16×16
    /// blocks take the 8×8 transposes where the host has AVX, the edges
    /// the element loop), strides wider than the matrix, and splits.
    #[test]
    fn row_major_copy_moves_every_element() {
        for (b, k, n, rn, threads) in [
            (1, 16, 16, 16, false),
            (2, 37, 29, 40, false),
            (1, 512, 130, 515, true),
            (3, 64, 48, 64, true),
            // Split by batch items (as many as the pool).
            (8, 64, 256, 70, true),
        ] {
            let rb = (n * rn) as isize;
            // NaN payloads and signed zeros too: the copy moves bits.
            let mut src: Vec<f32> = data(b * n * rn, 7);
            src[1] = f32::from_bits(0x7fa0_0001);
            src[2] = -0.0;
            let d = GemmDims {
                b,
                m: 2 * n,
                k,
                n,
                lhs_strides: [0, k as isize, 1],
                rhs_strides: [rb, 1, rn as isize],
            };
            let mut copy = row_major_copy(&d, src.as_ptr(), [rb, rn as isize], threads).unwrap();
            // SAFETY: the copy holds b·k·n f32, written by `row_major_copy`.
            let got =
                unsafe { std::slice::from_raw_parts(copy.as_mut_ptr().cast::<f32>(), b * k * n) };
            for bi in 0..b {
                for kk in 0..k {
                    for j in 0..n {
                        let want = src[bi * n * rn + kk + j * rn];
                        assert_eq!(
                            got[(bi * k + kk) * n + j].to_bits(),
                            want.to_bits(),
                            "b={b} k={k} n={n} rn={rn}: ({bi}, {kk}, {j})"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn layouts_collapse_as_the_jit_expects() {
        let dd = DotDims {
            lhs_batch: vec![0],
            rhs_batch: vec![0],
            lhs_contract: vec![2],
            rhs_contract: vec![2],
        };
        let d = GemmDims::of(&[3, 4, 5], &[3, 6, 5], &dd).unwrap();
        assert_eq!((d.b, d.m, d.k, d.n), (3, 4, 5, 6));
        assert_eq!(d.lhs_strides, [20, 5, 1]);
        assert_eq!(d.rhs_strides, [30, 1, 5]);
        let split = GemmDims {
            b: 1,
            m: 64,
            k: 512,
            n: 512,
            lhs_strides: [0, 512, 1],
            rhs_strides: [0, 512, 1],
        };
        assert_eq!(split.split(2), GemmSplit::Columns(2));
        assert!(matches!(split.split(1), GemmSplit::One(_)));
    }

    /// A pool larger than either column or row ranges alone can fill cuts
    /// a product into tiles of both; a small pool keeps its one-way split.
    #[test]
    fn large_pools_cut_products_into_tiles() {
        let dims = |m: usize, k: usize, n: usize| GemmDims {
            b: 1,
            m,
            k,
            n,
            lhs_strides: [0, k as isize, 1],
            rhs_strides: [0, n as isize, 1],
        };
        let mlp = dims(256, 512, 512);
        let tiles = |rows, columns| GemmSplit::Tiles { rows, columns };
        // 3 ranges of rows over 64, 6 of columns: 15 tiles of 16.
        assert_eq!(mlp.split(16), tiles(3, 5));
        assert_eq!(mlp.split_by_rows(16), tiles(3, 5));
        assert_eq!(mlp.split(8), tiles(2, 4));
        assert_eq!(mlp.split(6), GemmSplit::Columns(6));
        assert_eq!(mlp.split(2), GemmSplit::Columns(2));
        assert_eq!(mlp.split_by_rows(2), GemmSplit::Rows(2));
        // Packed: 10 blocks of 6 rows, 8 panels of 64 columns.
        let rnn = dims(64, 512, 512);
        assert_eq!(rnn.split_packed(16), tiles(2, 8));
        assert_eq!(rnn.split_packed(8), GemmSplit::Columns(8));
        assert_eq!(rnn.split_packed(2), GemmSplit::Rows(2));
    }
}
