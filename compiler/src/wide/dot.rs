//! Row dot products (`tl_wide_dot_f32`/`_f64`): the rows of a kernel
//! `out[r] += Σ_k x[r, k] · y[r, k]` (a matrix-vector product: `y` the same
//! row for every `r`), one call per block of rows instead of the inline
//! code's 128-bit loop (8 loads, 4 multiplies and 4 adds per 16 f32, bound
//! by issuing them; codegen's `emit_dot_rows`).
//!
//! Every product is rounded, then added (no fused multiply-add: the inline
//! code's `fmul` then `fadd`). Element `k` of a row goes into lane `k mod
//! L` of the row's accumulator (`L` = [`F32_LANES`] or [`F64_LANES`]: two
//! AVX-512 vectors), the lanes are folded pairwise at the end (lane `j`
//! plus lane `j + L/2`, then `j + L/4`, ... down to one), and the row's
//! sum is added to `out[r]`. That order is the same on AVX-512, AVX2 (four
//! vectors per row) and the plain fallback, whichever block of rows a row
//! is in and whichever thread runs it: the result depends only on the
//! row. The inline code's order differs (four 128-bit accumulators, folded
//! in sequence), so the two agree within the reordering bound of a float
//! reduction, `n·ε·Σ|x·y|` (docs/compiler.md).
//!
//! When `y` is one row for all (its row stride is 0: a matrix-vector
//! product), rows run in blocks of 4 with AVX-512 (2 with AVX2's 16
//! registers) that share each load of `y`: a row's loads then cost 1.25
//! vectors per vector of `x`, and four rows' streams are in flight at once
//! (a 512×512 f32 product: 14 µs one row at a time, 11 µs in blocks, the
//! time of summing the matrix alone). Otherwise (two streams per row,
//! bound by memory) rows run one at a time with AVX2's 256-bit vectors
//! even where AVX-512 is there: rows of two 16 MiB operands streamed from
//! memory took 10% and more longer with 512-bit loads than with 256-bit
//! ones (or the inline code's 128-bit ones) on the benchmark machine
//! (docs/benchmarks.md). Every path gives the same bits.

use std::panic::AssertUnwindSafe;

/// Lanes of an f32 row's sum (two AVX-512 vectors, four AVX2 ones).
pub(crate) const F32_LANES: usize = 32;

/// Lanes of an f64 row's sum.
pub(crate) const F64_LANES: usize = 16;

/// The rows of a dot call: row `r` of `x` at `x + r·xs`, of `y` at `y +
/// r·ys`, its sum added to `out[r·os]` (strides in elements); `n`
/// elements per row, each contiguous.
#[derive(Clone, Copy)]
pub(crate) struct DotIo<T> {
    pub x: *const T,
    pub y: *const T,
    pub n: usize,
    pub rows: usize,
    pub xs: isize,
    pub ys: isize,
    pub out: *mut T,
    pub os: isize,
}

/// `x · y` over the rows of `io` (see the module's doc for the order).
///
/// # Safety
/// Every row `r < rows` of `x` and `y` has `n` readable elements, every
/// `out[r·os]` is readable and writable, and `out` does not overlap the
/// rows. The host has what [`super::lanes`] requires.
pub(crate) unsafe extern "C" fn tl_wide_dot_f32(
    x: *const f32,
    y: *const f32,
    n: i64,
    rows: i64,
    xs: i64,
    ys: i64,
    out: *mut f32,
    os: i64,
) {
    let io = DotIo::of(x, y, n, rows, xs, ys, out, os);
    // SAFETY: the caller's contract.
    unsafe { dispatch(io) }
}

/// [`tl_wide_dot_f32`] for f64 rows.
///
/// # Safety
/// As for [`tl_wide_dot_f32`], with f64.
pub(crate) unsafe extern "C" fn tl_wide_dot_f64(
    x: *const f64,
    y: *const f64,
    n: i64,
    rows: i64,
    xs: i64,
    ys: i64,
    out: *mut f64,
    os: i64,
) {
    let io = DotIo::of(x, y, n, rows, xs, ys, out, os);
    // SAFETY: the caller's contract.
    unsafe { dispatch(io) }
}

impl<T> DotIo<T> {
    /// From the symbols' arguments (a negative count reads as 0).
    #[allow(clippy::too_many_arguments, reason = "the symbols' arguments")]
    fn of(
        x: *const T,
        y: *const T,
        n: i64,
        rows: i64,
        xs: i64,
        ys: i64,
        out: *mut T,
        os: i64,
    ) -> Self {
        DotIo {
            x,
            y,
            n: usize::try_from(n).unwrap_or(0),
            rows: usize::try_from(rows).unwrap_or(0),
            xs: xs as isize,
            ys: ys as isize,
            out,
            os: os as isize,
        }
    }

    /// Row `r` of `x`, of `y`, and its output.
    fn row(&self, r: usize) -> (*const T, *const T, *mut T) {
        let r = r as isize;
        (
            self.x.wrapping_offset(r * self.xs),
            self.y.wrapping_offset(r * self.ys),
            self.out.wrapping_offset(r * self.os),
        )
    }
}

/// An element type with dot routines.
pub(crate) trait DotLane:
    Copy + std::ops::Add<Output = Self> + std::ops::Mul<Output = Self>
{
    const ZERO: Self;
    const NAN: Self;
    /// The routine for this host's widest vectors.
    ///
    /// # Safety
    /// As for [`tl_wide_dot_f32`].
    unsafe fn rows(io: DotIo<Self>);
    /// The same sums without vector instructions (the lanes as an array).
    ///
    /// # Safety
    /// As for [`tl_wide_dot_f32`], without the host's requirement.
    unsafe fn rows_plain(io: DotIo<Self>);
    /// The AVX2 routine (the AVX-512 host's own is [`DotLane::rows`]).
    ///
    /// # Safety
    /// As for [`tl_wide_dot_f32`]; the host has AVX2 and FMA.
    #[cfg(test)]
    unsafe fn rows_avx2(io: DotIo<Self>);
}

/// The body of the `tl_wide_dot_*` symbols: a panic (none is possible)
/// stops here, and the rows' outputs read NaN.
///
/// # Safety
/// As for [`tl_wide_dot_f32`].
unsafe fn dispatch<T: DotLane>(io: DotIo<T>) {
    // SAFETY: the caller's contract.
    let r = std::panic::catch_unwind(AssertUnwindSafe(|| unsafe { T::rows(io) }));
    if r.is_err() {
        for r in 0..io.rows {
            // SAFETY: the caller's writable outputs.
            unsafe { io.row(r).2.write(T::NAN) };
        }
    }
}

/// The plain rows: lane `k mod L` of an array, folded pairwise.
///
/// # Safety
/// As for [`DotLane::rows_plain`].
#[inline(always)]
unsafe fn plain<T: DotLane, const L: usize>(io: DotIo<T>) {
    for r in 0..io.rows {
        let (x, y, out) = io.row(r);
        let mut acc = [T::ZERO; L];
        for k in 0..io.n {
            // SAFETY: element `k < n` of the caller's rows.
            let (a, b) = unsafe { (x.add(k).read(), y.add(k).read()) };
            acc[k % L] = acc[k % L] + a * b;
        }
        let mut w = L;
        while w > 1 {
            w /= 2;
            for j in 0..w {
                acc[j] = acc[j] + acc[j + w];
            }
        }
        // SAFETY: the caller's output of row `r`.
        unsafe { out.write(out.read() + acc[0]) };
    }
}

impl DotLane for f32 {
    const ZERO: f32 = 0.0;
    const NAN: f32 = f32::NAN;
    unsafe fn rows(io: DotIo<f32>) {
        #[cfg(target_arch = "x86_64")]
        {
            if super::has_avx512() && io.ys == 0 {
                // SAFETY: its features were just detected; the rows are
                // the caller's.
                return unsafe { x512::f32s::rows(io) };
            }
            if super::has_avx2() {
                // SAFETY: as above.
                return unsafe { x256::f32s::rows(io) };
            }
        }
        // SAFETY: the caller's rows.
        unsafe { Self::rows_plain(io) }
    }
    unsafe fn rows_plain(io: DotIo<f32>) {
        // SAFETY: the caller's rows.
        unsafe { plain::<f32, F32_LANES>(io) }
    }
    #[cfg(test)]
    unsafe fn rows_avx2(io: DotIo<f32>) {
        // SAFETY: the caller's contract.
        unsafe { x256::f32s::rows(io) }
    }
}

impl DotLane for f64 {
    const ZERO: f64 = 0.0;
    const NAN: f64 = f64::NAN;
    unsafe fn rows(io: DotIo<f64>) {
        #[cfg(target_arch = "x86_64")]
        {
            if super::has_avx512() && io.ys == 0 {
                // SAFETY: its features were just detected; the rows are
                // the caller's.
                return unsafe { x512::f64s::rows(io) };
            }
            if super::has_avx2() {
                // SAFETY: as above.
                return unsafe { x256::f64s::rows(io) };
            }
        }
        // SAFETY: the caller's rows.
        unsafe { Self::rows_plain(io) }
    }
    unsafe fn rows_plain(io: DotIo<f64>) {
        // SAFETY: the caller's rows.
        unsafe { plain::<f64, F64_LANES>(io) }
    }
    #[cfg(test)]
    unsafe fn rows_avx2(io: DotIo<f64>) {
        // SAFETY: the caller's contract.
        unsafe { x256::f64s::rows(io) }
    }
}

/// The rows of one element type and instruction set, as a module `$m`:
/// `$v` vectors of `$t` (`$load`, `$add`, `$mul`, `$zero`), `$k` of them
/// per row (`$k · lanes` = the type's lane count), `$r` rows per block,
/// `$fold` folding a row's vectors to its sum.
#[cfg(target_arch = "x86_64")]
macro_rules! dot_rows {
    ($m:ident, $features:literal, $t:ty, $v:ty, $zero:ident, $load:ident, $add:ident,
     $mul:ident, $k:literal, $r:literal, $fold:ident) => {
        pub(super) mod $m {
            use super::super::DotIo;
            #[allow(clippy::wildcard_imports, reason = "the intrinsics")]
            use std::arch::x86_64::*;

            /// Lanes per vector.
            const W: usize = size_of::<$v>() / size_of::<$t>();
            /// Lanes per row.
            const L: usize = W * $k;

            /// # Safety
            /// As for `tl_wide_dot_f32`; the host has the features this is
            /// compiled for.
            #[target_feature(enable = $features)]
            pub(crate) unsafe fn rows(io: DotIo<$t>) {
                let mut r = 0;
                if io.ys == 0 {
                    while r + $r <= io.rows {
                        // SAFETY: rows `r..r + $r` are the caller's.
                        unsafe { block::<$r, true>(io, r) };
                        r += $r;
                    }
                }
                while r < io.rows {
                    // SAFETY: row `r` is the caller's.
                    unsafe { block::<1, false>(io, r) };
                    r += 1;
                }
            }

            /// Rows `r0..r0 + R`, `y`'s vectors loaded once for all of them
            /// when `SHARED` (its row stride is 0).
            ///
            /// # Safety
            /// As for `rows`, for these rows.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn block<const R: usize, const SHARED: bool>(io: DotIo<$t>, r0: usize) {
                let n = io.n;
                let mut xp = [std::ptr::null::<$t>(); R];
                let mut yp = [std::ptr::null::<$t>(); R];
                for q in 0..R {
                    (xp[q], yp[q], _) = io.row(r0 + q);
                }
                let mut acc = [[$zero(); $k]; R];
                let mut i = 0;
                while i + L <= n {
                    // SAFETY: elements `i..i + L ≤ n` of the rows.
                    unsafe { step::<R, SHARED>(&mut acc, &xp, &yp, i) };
                    i += L;
                }
                if i < n {
                    // The tail, padded with zeros: each pad adds 0·0 = +0
                    // to a lane, which changes no lane (a lane starts at
                    // +0 and never becomes -0).
                    let rest = n - i;
                    let mut xb = [[0.0 as $t; L]; R];
                    let mut yb = [[0.0 as $t; L]; R];
                    let mut xq = [std::ptr::null::<$t>(); R];
                    let mut yq = [std::ptr::null::<$t>(); R];
                    for q in 0..R {
                        // SAFETY: elements `i..n` of the rows, into local
                        // arrays of `L > rest` elements.
                        unsafe {
                            std::ptr::copy_nonoverlapping(xp[q].add(i), xb[q].as_mut_ptr(), rest);
                            std::ptr::copy_nonoverlapping(yp[q].add(i), yb[q].as_mut_ptr(), rest);
                        }
                        xq[q] = xb[q].as_ptr();
                        yq[q] = yb[q].as_ptr();
                    }
                    // SAFETY: the local arrays of `L` elements.
                    unsafe { step::<R, false>(&mut acc, &xq, &yq, 0) };
                }
                for q in 0..R {
                    let s = super::$fold(acc[q]);
                    let (_, _, o) = io.row(r0 + q);
                    // SAFETY: the caller's output of row `r0 + q`.
                    unsafe { o.write(o.read() + s) };
                }
            }

            /// Elements `i..i + L` of each row into its accumulators.
            ///
            /// # Safety
            /// Those elements of `xp[q]` and `yp[q]` are readable.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn step<const R: usize, const SHARED: bool>(
                acc: &mut [[$v; $k]; R],
                xp: &[*const $t; R],
                yp: &[*const $t; R],
                i: usize,
            ) {
                let mut yv = [$zero(); $k];
                for q in 0..R {
                    if q == 0 || !SHARED {
                        for j in 0..$k {
                            // SAFETY: the caller's elements.
                            yv[j] = unsafe { $load(yp[q].add(i + j * W)) };
                        }
                    }
                    for j in 0..$k {
                        // SAFETY: the caller's elements.
                        let xv = unsafe { $load(xp[q].add(i + j * W)) };
                        acc[q][j] = $add(acc[q][j], $mul(xv, yv[j]));
                    }
                }
            }
        }
    };
}

/// AVX-512: two vectors per row, four rows per block.
#[cfg(target_arch = "x86_64")]
mod x512 {
    #[allow(clippy::wildcard_imports, reason = "the intrinsics")]
    use std::arch::x86_64::*;

    dot_rows!(
        f32s,
        "avx512f,avx512dq,avx512vl,avx2,fma",
        f32,
        __m512,
        _mm512_setzero_ps,
        _mm512_loadu_ps,
        _mm512_add_ps,
        _mm512_mul_ps,
        2,
        4,
        fold_f32
    );
    dot_rows!(
        f64s,
        "avx512f,avx512dq,avx512vl,avx2,fma",
        f64,
        __m512d,
        _mm512_setzero_pd,
        _mm512_loadu_pd,
        _mm512_add_pd,
        _mm512_mul_pd,
        2,
        4,
        fold_f64
    );

    /// Lanes `j` and `j + 16` (the two vectors), then the halves of 8, 4,
    /// 2 and 1.
    #[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
    #[inline]
    fn fold_f32(a: [__m512; 2]) -> f32 {
        let s = _mm512_add_ps(a[0], a[1]);
        let s = _mm256_add_ps(_mm512_castps512_ps256(s), _mm512_extractf32x8_ps::<1>(s));
        super::x256::fold_f32_8(s)
    }

    /// Lanes `j` and `j + 8` (the two vectors), then the halves of 4, 2
    /// and 1.
    #[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
    #[inline]
    fn fold_f64(a: [__m512d; 2]) -> f64 {
        let s = _mm512_add_pd(a[0], a[1]);
        let s = _mm256_add_pd(_mm512_castpd512_pd256(s), _mm512_extractf64x4_pd::<1>(s));
        super::x256::fold_f64_4(s)
    }
}

/// AVX2: four vectors per row, two rows per block (16 registers).
#[cfg(target_arch = "x86_64")]
mod x256 {
    #[allow(clippy::wildcard_imports, reason = "the intrinsics")]
    use std::arch::x86_64::*;

    dot_rows!(
        f32s,
        "avx2,fma",
        f32,
        __m256,
        _mm256_setzero_ps,
        _mm256_loadu_ps,
        _mm256_add_ps,
        _mm256_mul_ps,
        4,
        2,
        fold_f32
    );
    dot_rows!(
        f64s,
        "avx2,fma",
        f64,
        __m256d,
        _mm256_setzero_pd,
        _mm256_loadu_pd,
        _mm256_add_pd,
        _mm256_mul_pd,
        4,
        2,
        fold_f64
    );

    /// Lanes `j` and `j + 16` (vectors 0 and 2, 1 and 3), then `j + 8`
    /// (the two sums), then the halves of 4, 2 and 1.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn fold_f32(a: [__m256; 4]) -> f32 {
        let lo = _mm256_add_ps(a[0], a[2]);
        let hi = _mm256_add_ps(a[1], a[3]);
        fold_f32_8(_mm256_add_ps(lo, hi))
    }

    /// The sum of 8 lanes: `j + 4`, then `j + 2`, then `j + 1`.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    pub(super) fn fold_f32_8(s: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
    }

    /// Lanes `j` and `j + 8` (vectors 0 and 2, 1 and 3), then `j + 4`
    /// (the two sums), then the halves of 2 and 1.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn fold_f64(a: [__m256d; 4]) -> f64 {
        let lo = _mm256_add_pd(a[0], a[2]);
        let hi = _mm256_add_pd(a[1], a[3]);
        fold_f64_4(_mm256_add_pd(lo, hi))
    }

    /// The sum of 4 lanes: `j + 2`, then `j + 1`.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    pub(super) fn fold_f64_4(s: __m256d) -> f64 {
        let s = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd::<1>(s));
        _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

    use super::{DotIo, DotLane};

    /// Deterministic values over about [-4, 4), with specials at a few
    /// positions (NaN, ±inf, ±0, the largest finite, denormals).
    fn values<T: DotLane + From<f32>>(n: usize, seed: u32, specials: bool) -> Vec<T> {
        let sp = [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            -0.0,
            0.0,
            f32::MAX,
            1e-40,
        ];
        (0..n)
            .map(|i| {
                let h = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed);
                if specials && h.is_multiple_of(97) {
                    T::from(sp[(h / 97) as usize % sp.len()])
                } else {
                    T::from((h >> 8) as f32 / (1u32 << 24) as f32 * 8.0 - 4.0)
                }
            })
            .collect()
    }

    /// The three routines (AVX-512, AVX2, plain) on the same rows, as
    /// their outputs' bits.
    fn all_three<T: DotLane + From<f32> + Into<f64>>(
        rows: usize,
        n: usize,
        shared: bool,
        specials: bool,
    ) -> Vec<Vec<u64>> {
        let x = values::<T>(rows * n, 1, specials);
        let y = values::<T>(if shared { n } else { rows * n }, 2, specials);
        let mut outs = Vec::new();
        for which in 0..3 {
            // Odd output stride; the outputs start at a non-zero value.
            let mut out = vec![T::from(0.5); rows * 3 + 1];
            let io = DotIo {
                x: x.as_ptr(),
                y: y.as_ptr(),
                n,
                rows,
                xs: n as isize,
                ys: if shared { 0 } else { n as isize },
                out: out.as_mut_ptr(),
                os: 3,
            };
            // SAFETY: the rows and outputs above; each instruction set is
            // only run where the host has it.
            unsafe {
                match which {
                    0 if super::super::has_avx512() => T::rows(io),
                    1 if super::super::has_avx2() => T::rows_avx2(io),
                    _ => T::rows_plain(io),
                }
            }
            outs.push(
                out.iter()
                    .map(|v| {
                        let v: f64 = (*v).into();
                        if v.is_nan() { u64::MAX } else { v.to_bits() }
                    })
                    .collect(),
            );
        }
        outs
    }

    /// The AVX-512, AVX2 and plain routines give the same bits (any NaN
    /// for a NaN), for row lengths around the lane count and its blocks,
    /// row counts around the block of rows, `y` shared or not, with and
    /// without specials.
    #[test]
    fn every_instruction_set_gives_the_same_bits() {
        for n in [
            1usize, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 513, 1000,
        ] {
            for rows in [1usize, 2, 3, 4, 5, 8, 9] {
                for shared in [true, false] {
                    for specials in [false, true] {
                        let f = all_three::<f32>(rows, n, shared, specials);
                        assert!(f[0] == f[1] && f[1] == f[2], "f32 n={n} rows={rows}");
                        let d = all_three::<f64>(rows, n, shared, specials);
                        assert!(d[0] == d[1] && d[1] == d[2], "f64 n={n} rows={rows}");
                    }
                }
            }
        }
    }
}
