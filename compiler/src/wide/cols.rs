//! Column sums (`tl_wide_cols_f32`/`_f64`): the two innermost dims of a
//! reduction kernel that sums over rows and keeps columns, `out[j] +=
//! Σ_r x[r·rs + j]` (a column reduction, a bias gradient, a sum over a
//! middle axis), one call per outer index instead of the inline code's
//! 128-bit loop, which loaded, added and stored each 4-column piece of
//! the output for every row.
//!
//! The columns run in strips of [`STRIP`] elements whose sums stay in
//! registers over a block of [`BLOCK_ROWS`] rows: the output is read and
//! written once per block, and the block's rows are read once, in order.
//! Each column is still summed row after row, from the output's value:
//! the same additions in the same order as the inline code and the
//! interpreter, so the bits are the same on every path and every host
//! (exact mode included). The routines are rustc's code for the host's
//! widest vectors (AVX-512, AVX2, or none).

use std::panic::AssertUnwindSafe;

/// Columns summed in registers at a time (four AVX-512 vectors of f32).
const STRIP: usize = 64;

/// Rows per block.
const BLOCK_ROWS: usize = 64;

/// The sums of `cols` columns over `rows` rows: row `r` at `x + r·rs`
/// (elements), each row's columns contiguous, the sums added to
/// `out[0..cols]`.
///
/// # Safety
/// Every row `r < rows` of `x` has `cols` readable elements, `out` has
/// `cols` readable and writable ones, and they do not overlap the rows.
pub(crate) unsafe extern "C" fn tl_wide_cols_f32(
    x: *const f32,
    rows: i64,
    rs: i64,
    cols: i64,
    out: *mut f32,
) {
    // SAFETY: the caller's contract.
    unsafe { dispatch(x, rows, rs, cols, out) }
}

/// [`tl_wide_cols_f32`] for f64.
///
/// # Safety
/// As for [`tl_wide_cols_f32`], with f64.
pub(crate) unsafe extern "C" fn tl_wide_cols_f64(
    x: *const f64,
    rows: i64,
    rs: i64,
    cols: i64,
    out: *mut f64,
) {
    // SAFETY: the caller's contract.
    unsafe { dispatch(x, rows, rs, cols, out) }
}

/// An element type of the column sums.
pub(crate) trait ColLane: Copy + std::ops::Add<Output = Self> {
    /// NaN, what the outputs read if the routine failed.
    const NAN: Self;
}

impl ColLane for f32 {
    const NAN: f32 = f32::NAN;
}

impl ColLane for f64 {
    const NAN: f64 = f64::NAN;
}

/// The body of the symbols: the host's widest routine; a panic (none is
/// possible) stops here, and the outputs read NaN.
///
/// # Safety
/// As for [`tl_wide_cols_f32`].
unsafe fn dispatch<T: ColLane>(x: *const T, rows: i64, rs: i64, cols: i64, out: *mut T) {
    let rows = usize::try_from(rows).unwrap_or(0);
    let cols = usize::try_from(cols).unwrap_or(0);
    let rs = rs as isize;
    let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if super::has_avx512() {
                // SAFETY: its features were just detected; the caller's
                // rows and output.
                return unsafe { sums_avx512(x, rows, rs, cols, out) };
            }
            if super::has_avx2() {
                // SAFETY: as above.
                return unsafe { sums_avx2(x, rows, rs, cols, out) };
            }
        }
        // SAFETY: the caller's rows and output.
        unsafe { sums(x, rows, rs, cols, out) }
    }));
    if r.is_err() {
        for j in 0..cols {
            // SAFETY: the caller's writable outputs.
            unsafe { out.add(j).write(T::NAN) };
        }
    }
}

/// [`sums`] compiled for AVX-512.
///
/// # Safety
/// As for [`sums`]; the host has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn sums_avx512<T: ColLane>(x: *const T, rows: usize, rs: isize, cols: usize, out: *mut T) {
    // SAFETY: the caller's contract.
    unsafe { sums(x, rows, rs, cols, out) }
}

/// [`sums`] compiled for AVX2.
///
/// # Safety
/// As for [`sums`]; the host has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sums_avx2<T: ColLane>(x: *const T, rows: usize, rs: isize, cols: usize, out: *mut T) {
    // SAFETY: the caller's contract.
    unsafe { sums(x, rows, rs, cols, out) }
}

/// The column sums, strip by strip within blocks of rows (see the
/// module's doc); inlined into each routine so that rustc vectorizes the
/// strips for its target.
///
/// # Safety
/// As for [`tl_wide_cols_f32`], with the counts read.
#[inline(always)]
unsafe fn sums<T: ColLane>(x: *const T, rows: usize, rs: isize, cols: usize, out: *mut T) {
    for r0 in (0..rows).step_by(BLOCK_ROWS) {
        let r1 = (r0 + BLOCK_ROWS).min(rows);
        let mut j = 0;
        while j + STRIP <= cols {
            // SAFETY: columns j..j + STRIP of the output and of each row.
            unsafe { strip::<T, STRIP>(x.add(j), r0..r1, rs, out.add(j)) };
            j += STRIP;
        }
        while j < cols {
            // SAFETY: as above, one column.
            unsafe { strip::<T, 1>(x.add(j), r0..r1, rs, out.add(j)) };
            j += 1;
        }
    }
}

/// `W` columns summed over `rows` in registers, from and into `out`.
///
/// # Safety
/// `out[0..W]` and `x[r·rs..r·rs + W]` for `r` in `rows` are valid.
#[inline(always)]
unsafe fn strip<T: ColLane, const W: usize>(
    x: *const T,
    rows: std::ops::Range<usize>,
    rs: isize,
    out: *mut T,
) {
    // SAFETY: the caller's output strip.
    let mut acc: [T; W] = unsafe { out.cast::<[T; W]>().read_unaligned() };
    for r in rows {
        // SAFETY: the caller's row strip.
        let row: [T; W] = unsafe { x.offset(r as isize * rs).cast::<[T; W]>().read_unaligned() };
        for c in 0..W {
            acc[c] = acc[c] + row[c];
        }
    }
    // SAFETY: as above.
    unsafe { out.cast::<[T; W]>().write_unaligned(acc) };
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    /// Every path sums each column row after row: the bits of a plain
    /// loop, for strips, tails, blocks and negative row strides.
    #[test]
    fn every_path_sums_columns_in_row_order() {
        for (rows, cols, rs) in [
            (1usize, 1usize, 1isize),
            (3, 70, 70),
            (200, 130, 140),
            (130, 64, -64),
        ] {
            let n = rows * rs.unsigned_abs();
            let x: Vec<f32> = (0..n)
                .map(|i| ((i * 7919) % 1013) as f32 * 0.37 - 150.0)
                .collect();
            let base = if rs < 0 {
                (rows - 1) * rs.unsigned_abs()
            } else {
                0
            };
            let start = x[base..].as_ptr();
            let mut want: Vec<f32> = (0..cols).map(|j| j as f32 * 0.5).collect();
            for r in 0..rows {
                for (j, w) in want.iter_mut().enumerate() {
                    *w += x[(base as isize + r as isize * rs) as usize + j];
                }
            }
            let run = |f: unsafe fn(*const f32, usize, isize, usize, *mut f32)| {
                let mut out: Vec<f32> = (0..cols).map(|j| j as f32 * 0.5).collect();
                // SAFETY: `x` holds every row, `out` every column.
                unsafe { f(start, rows, rs, cols, out.as_mut_ptr()) };
                out
            };
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&run(sums::<f32>)), bits(&want), "{rows}x{cols}");
            #[cfg(target_arch = "x86_64")]
            {
                if crate::wide::has_avx512() {
                    assert_eq!(bits(&run(sums_avx512::<f32>)), bits(&want));
                }
                if crate::wide::has_avx2() {
                    assert_eq!(bits(&run(sums_avx2::<f32>)), bits(&want));
                }
            }
        }
    }
}
