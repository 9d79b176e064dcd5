//! f32 and f64 transcendental functions over whole chunks, compiled by
//! rustc for the host's widest vectors (AVX-512: 16 f32 / 8 f64 lanes,
//! AVX2: 8 / 4), called from kernels through `tl_wide_f32`/`tl_wide_f64`.
//!
//! Cranelift's x64 backend has 128-bit vectors only, so the inline
//! approximations of `codegen/math.rs` evaluate 4 f32 (2 f64) lanes per
//! instruction.
//! A kernel whose row has such a function (and is long enough) evaluates it
//! in chunks instead: a 128-bit loop stores the function's argument for up to
//! [`CHUNK`] elements into a stack buffer, one call here maps the buffer in
//! place, and the rest of the kernel reads the results back (codegen's
//! `wide_chunks`). `exp`, `expm1`, `tanh`, `logistic`, `ln`, `log1p`,
//! `erf`, the polynomial part of `sin`/`cos` and f64 `pow` (the routine
//! `tl_wide_pow_f64`, its two operands in two buffers) are the generic
//! approximations of [`approx`], the same source the inline code is
//! emitted from (instantiated here with [`Lanes`]); only the libm groups
//! of `sin`/`cos` below repeat the inline code's control flow. Both paths
//! give the same bits (NaN for NaN, payloads aside): `tests/jit_wide.rs`
//! checks it.
//! Rows of functions without a routine here keep the 128-bit code.
//!
//! A row whose whole kernel is `f(x)`, `f(x ± s)`, `f(x·s)` or `x / s` (`s`
//! fixed for the row), or a row max, skips the chunk passes:
//! `tl_wide_row_f32`/`_f64` run it in one loop per row, stored, summed or
//! maxed (codegen's `fused_row`), prefetching the next block of a row
//! group as they go.
//!
//! A row dot product (a row sum of `x · y`, both contiguous along the row:
//! a matrix-vector product) runs as one call per block of rows
//! (`tl_wide_dot_f32`/`_f64`, module [`dot`]).

use std::ops::{Add, Div, Mul, Neg, Sub};

use tensorlift_ir::UnaryOp;
use tensorlift_runtime::kernels::scalar::FloatScalar;

use crate::approx;

use crate::codegen::math::{SINCOS_F32_LIMIT, SINCOS_F64_LIMIT};

mod cols;
mod dot;

pub(crate) use cols::{tl_wide_cols_f32, tl_wide_cols_f64};
pub(crate) use dot::{tl_wide_dot_f32, tl_wide_dot_f64};

/// Elements per chunk: a buffer is 2 KiB, a few of them stay in L1, and the
/// call per chunk costs ~1% of evaluating it.
pub(crate) const CHUNK: usize = 512;

/// The chunk buffers of a kernel take at most this much of the stack of
/// whichever thread runs it: 16 f32 or 8 f64 wide nodes (the first ones;
/// later ones keep the inline code).
pub(crate) const MAX_BUFFER_BYTES: usize = 32 * 1024;

/// The functions with a wide routine, for f32 and f64 (used only where the
/// inline approximations are, i.e. not in `exact` mode).
pub(crate) fn has_routine(u: UnaryOp) -> bool {
    match u {
        UnaryOp::Exp
        | UnaryOp::Expm1
        | UnaryOp::Log
        | UnaryOp::Log1p
        | UnaryOp::Tanh
        | UnaryOp::Logistic
        | UnaryOp::Erf
        | UnaryOp::Sin
        | UnaryOp::Cos
        | UnaryOp::Sqrt
        | UnaryOp::Rsqrt
        | UnaryOp::Reciprocal => true,
        UnaryOp::Neg
        | UnaryOp::Abs
        | UnaryOp::Sign
        | UnaryOp::Floor
        | UnaryOp::Ceil
        | UnaryOp::Round
        | UnaryOp::Not
        | UnaryOp::IsFinite
        | UnaryOp::Square => false,
    }
}

/// The vector width (f32 lanes) the routines run at on this host, or `None`
/// where they would be no faster than the inline 4-lane code (no AVX2 and
/// FMA: the routines use fused multiply-adds exactly where the inline code
/// does, which it only does with FMA).
pub(crate) fn lanes() -> Option<usize> {
    if has_avx512() {
        Some(16)
    } else if has_avx2() {
        Some(8)
    } else {
        None
    }
}

/// Every feature `avx512::map` is compiled with, within the cap
/// ([`crate::isa`]).
pub(crate) fn has_avx512() -> bool {
    crate::isa::has_avx512()
}

/// Every feature `avx2::map` is compiled with, within the cap.
fn has_avx2() -> bool {
    crate::isa::has_avx2()
}

/// Maps `n` f32 at `p` in place through the function with `UnaryOp` code
/// `op` (one of [`has_routine`]'s; anything else leaves the buffer as it
/// is). Called by compiled kernels on their stack buffers.
///
/// # Safety
/// `p` points to `n` writable, initialized f32 (`n ≥ 0`), and the host has
/// what [`lanes`] requires (the caller only emits the call when it returned
/// `Some`).
pub(crate) unsafe extern "C" fn tl_wide_f32(op: i32, p: *mut f32, n: i64) {
    // SAFETY: the caller's contract.
    unsafe { dispatch(op, p, n) }
}

/// [`tl_wide_f32`] for f64 buffers.
///
/// # Safety
/// As for [`tl_wide_f32`], with `n` f64 at `p`.
pub(crate) unsafe extern "C" fn tl_wide_f64(op: i32, p: *mut f64, n: i64) {
    // SAFETY: the caller's contract.
    unsafe { dispatch(op, p, n) }
}

/// `f(args)` from the module of the widest instruction set the host has
/// (`avx512`, then `avx2`; every feature a module is compiled with is
/// detected first), else `plain`, under `catch_unwind`: a panic (none is
/// possible) must not unwind into compiled code, and comes back as `Err`.
macro_rules! on_widest {
    ($f:ident($($a:expr),*), $plain:expr) => {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            #[cfg(target_arch = "x86_64")]
            {
                if has_avx512() {
                    // SAFETY: every feature `avx512` is compiled for was just
                    // detected; the arguments are the caller's to vouch for.
                    return unsafe { avx512::$f($($a),*) };
                }
                if has_avx2() {
                    // SAFETY: as above, for `avx2`.
                    return unsafe { avx2::$f($($a),*) };
                }
            }
            $plain
        }))
    };
}

/// The body of the `tl_wide_*` symbols: picks the widest compiled `map`.
/// Nothing in it can panic; if it ever did, the panic stops here (it must
/// not unwind into compiled code) and the buffer reads as NaN.
///
/// # Safety
/// `p` points to `n` writable, initialized `T`.
unsafe fn dispatch<T: Lane>(op: i32, p: *mut T, n: i64) {
    let Some(u) = UnaryOp::ALL.get(op as usize).copied() else {
        return;
    };
    let n = usize::try_from(n).unwrap_or(0);
    // SAFETY: the caller passes a buffer of `n` elements that nothing else
    // accesses during the call.
    let buf = unsafe { std::slice::from_raw_parts_mut(p, n) };
    if on_widest!(map(u, &mut *buf), T::map(u, buf)).is_err() {
        // SAFETY: as above; the closure that borrowed the buffer is gone.
        let buf = unsafe { std::slice::from_raw_parts_mut(p, n) };
        buf.iter_mut().for_each(|x| *x = T::of(f64::NAN));
    }
}

/// A lane type with wide routines: what the shared forms below need, the
/// forms that differ per type (the methods of `math.rs` that exist in an
/// f32 and an f64 version), and `map`, which applies a routine in place
/// (inlined into each instruction set's `map`, where LLVM vectorizes it).
pub(crate) trait Lane:
    Copy
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
{
    /// Width in bits.
    const BITS: u32;
    /// `sin`/`cos`: the range of the reduction.
    const SINCOS_LIMIT: f64;

    /// An f64 constant as the inline code's `splat_f` rounds it.
    fn of(v: f64) -> Self;
    fn fma(self, a: Self, b: Self) -> Self;
    fn abs(self) -> Self;
    fn is_nan(self) -> bool;
    fn sqrt(self) -> Self;
    /// Rounded to an integer, ties to even.
    fn nearest(self) -> Self;
    /// The value as an f64 (exact).
    fn to_f64(self) -> f64;
    /// The bits, sign-extended (f32: as an i32).
    fn bits(self) -> i64;
    /// From the low `BITS` bits.
    fn from_bits(b: i64) -> Self;
    /// The interpreter's scalar function (libm; not inlined: cold paths
    /// only).
    fn libm(op: UnaryOp, x: Self) -> Self;
    /// `erf_f32` / `erf_f64`.
    fn erf(self) -> Self;
    /// The largest of the `n` elements at `src` by `fmax`'s rules: NaN if
    /// any is NaN, +0 above -0, -inf for none (see [`tl_wide_row_f32`]'s
    /// [`ROW_MAX`]).
    ///
    /// # Safety
    /// `src` points to `n` readable elements.
    unsafe fn row_max(src: *const Self, n: usize) -> Self;

    /// Applies the routine of `u` to every element (nothing for an
    /// operation without one).
    #[inline(always)]
    fn map(u: UnaryOp, buf: &mut [Self]) {
        let one = Self::of(1.0);
        match u {
            UnaryOp::Exp => buf.iter_mut().for_each(|x| *x = exp(*x)),
            UnaryOp::Expm1 => buf.iter_mut().for_each(|x| *x = expm1(*x)),
            UnaryOp::Log => buf.iter_mut().for_each(|x| *x = ln(*x)),
            UnaryOp::Log1p => buf.iter_mut().for_each(|x| *x = log1p(*x)),
            UnaryOp::Tanh => buf.iter_mut().for_each(|x| *x = tanh(*x)),
            UnaryOp::Logistic => buf.iter_mut().for_each(|x| *x = logistic(*x)),
            UnaryOp::Erf => buf.iter_mut().for_each(|x| *x = x.erf()),
            UnaryOp::Sin => sincos_buf(buf, false),
            UnaryOp::Cos => sincos_buf(buf, true),
            UnaryOp::Sqrt => buf.iter_mut().for_each(|x| *x = x.sqrt()),
            UnaryOp::Rsqrt => buf.iter_mut().for_each(|x| *x = one / x.sqrt()),
            UnaryOp::Reciprocal => buf.iter_mut().for_each(|x| *x = one / *x),
            UnaryOp::Neg
            | UnaryOp::Abs
            | UnaryOp::Sign
            | UnaryOp::Floor
            | UnaryOp::Ceil
            | UnaryOp::Round
            | UnaryOp::Not
            | UnaryOp::IsFinite
            | UnaryOp::Square => {}
        }
    }
}

/// The functions a fused row (`tl_wide_row_*`) can apply: those with an
/// element-wise routine (`sin`/`cos` send whole 128-bit groups to libm
/// past their range, which a row does not reproduce).
pub(crate) fn has_row_routine(u: UnaryOp) -> bool {
    has_routine(u) && !matches!(u, UnaryOp::Sin | UnaryOp::Cos)
}

/// Elements per block of a fused row (copied to the stack, mapped, summed,
/// copied out: the source may be the destination).
const ROW_BLOCK: usize = 64;

/// Lanes of a fused row's sum (one per element of a block: the adds are
/// vertical).
const SUM_LANES: usize = ROW_BLOCK;

/// `dst[i] = g(src[i])` for `i < n` (not stored when `dst` is
/// null; `dst` may be `src`), returning the sum of the values, accumulated
/// in [`SUM_LANES`] lanes (element `i` in lane `i mod SUM_LANES`) folded
/// pairwise: a fixed order. Unless `ahead` is null, `ahead[i]` is
/// prefetched into L2 alongside `src[i]`: the same row of the next block
/// of a row group, which the group's first kernel reads next (see
/// [`tl_wide_row_f32`]).
///
/// # Safety
/// `src` points to `n` readable `T`, `dst` (if not null) to `n` writable
/// ones, either the same elements or not overlapping them. `ahead` is only
/// prefetched (it may point anywhere).
#[inline(always)]
unsafe fn row_with<T: Lane>(
    src: *const T,
    n: usize,
    dst: *mut T,
    ahead: *const T,
    g: impl Fn(T) -> T,
) -> T {
    let zero = T::of(0.0);
    let mut acc = [zero; SUM_LANES];
    let mut i = 0;
    while i + ROW_BLOCK <= n {
        if !ahead.is_null() {
            prefetch_block(ahead.wrapping_add(i));
        }
        let mut blk = [zero; ROW_BLOCK];
        // SAFETY: elements `i..i + ROW_BLOCK` of the caller's rows; the
        // block is a local array.
        unsafe { std::ptr::copy_nonoverlapping(src.add(i), blk.as_mut_ptr(), ROW_BLOCK) };
        for v in &mut blk {
            *v = g(*v);
        }
        for (s, v) in acc.iter_mut().zip(&blk) {
            *s = *s + *v;
        }
        if !dst.is_null() {
            // SAFETY: as above.
            unsafe { std::ptr::copy_nonoverlapping(blk.as_ptr(), dst.add(i), ROW_BLOCK) };
        }
        i += ROW_BLOCK;
    }
    for k in 0..n - i {
        // SAFETY: as above, element `i + k < n`.
        let v = g(unsafe { src.add(i + k).read() });
        acc[k % SUM_LANES] = acc[k % SUM_LANES] + v;
        if !dst.is_null() {
            // SAFETY: as above.
            unsafe { dst.add(i + k).write(v) };
        }
    }
    let mut w = SUM_LANES;
    while w > 1 {
        w /= 2;
        for k in 0..w {
            acc[k] = acc[k] + acc[k + w];
        }
    }
    acc[0]
}

/// Prefetches the cache lines of `ROW_BLOCK` elements from `p` into L2
/// (a hint: no access happens, `p` may point anywhere).
#[inline(always)]
fn prefetch_block<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    for line in 0..ROW_BLOCK * std::mem::size_of::<T>() / 64 {
        use std::arch::x86_64::{_MM_HINT_T1, _mm_prefetch};
        // SAFETY: a prefetch reads nothing and cannot fault, whatever the
        // address; the pointer is only computed (wrapping), never
        // dereferenced.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(p.cast::<i8>().wrapping_add(line * 64)) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// [`row_with`] for `f((x - a) · b)`, `f` the function of `u` (one of
/// [`has_row_routine`]'s; the identity for anything else), or for `x / b`
/// when `u` is `None`.
///
/// # Safety
/// As for [`row_with`].
#[inline(always)]
unsafe fn row<T: Lane>(u: Option<UnaryOp>, io: RowIo<T>, a: T, b: T) -> T {
    let RowIo { src, n, dst, ahead } = io;
    let one = T::of(1.0);
    let pre = move |x: T| (x - a) * b;
    // SAFETY: each arm is `row_with` on the caller's rows.
    unsafe {
        match u {
            None => row_with(src, n, dst, ahead, |x| x / b),
            Some(UnaryOp::Exp) => row_with(src, n, dst, ahead, |x| exp(pre(x))),
            Some(UnaryOp::Expm1) => row_with(src, n, dst, ahead, |x| expm1(pre(x))),
            Some(UnaryOp::Log) => row_with(src, n, dst, ahead, |x| ln(pre(x))),
            Some(UnaryOp::Log1p) => row_with(src, n, dst, ahead, |x| log1p(pre(x))),
            Some(UnaryOp::Tanh) => row_with(src, n, dst, ahead, |x| tanh(pre(x))),
            Some(UnaryOp::Logistic) => row_with(src, n, dst, ahead, |x| logistic(pre(x))),
            Some(UnaryOp::Erf) => row_with(src, n, dst, ahead, |x| pre(x).erf()),
            Some(UnaryOp::Sqrt) => row_with(src, n, dst, ahead, |x| pre(x).sqrt()),
            Some(UnaryOp::Rsqrt) => row_with(src, n, dst, ahead, |x| one / pre(x).sqrt()),
            Some(UnaryOp::Reciprocal) => row_with(src, n, dst, ahead, |x| one / pre(x)),
            Some(_) => row_with(src, n, dst, ahead, pre),
        }
    }
}

/// The memory of a fused row: `n` elements read at `src`, stored at `dst`
/// (null: not stored), `ahead` prefetched (null: nothing).
#[derive(Clone, Copy)]
struct RowIo<T> {
    src: *const T,
    n: usize,
    dst: *mut T,
    ahead: *const T,
}

/// The `op` of a fused row that divides by `b`.
pub(crate) const ROW_DIV: i32 = -1;

/// The `op` of a fused row that returns the row's maximum ([`Lane::row_max`];
/// `a`, `b` and `dst` unused).
pub(crate) const ROW_MAX: i32 = -2;

/// Evaluates a fused row: `dst[i] = f((src[i] - a) · b)` for the function
/// `f` with `UnaryOp` code `op` (one of [`has_row_routine`]'s), or
/// `src[i] / b` for `op` = [`ROW_DIV`], returning the sum of the values
/// (for a row sum; see [`row_with`] for its order); for `op` = [`ROW_MAX`],
/// only the row's maximum.
/// `(x - a) · b` is exactly `x - s`, `x + s` (`a = -s`, `b = 1`), `x · s`
/// (`a = 0`, `b = s`) or `x` (`a = 0`, `b = 1`), so every value has the
/// bits of the inline code's. Called by compiled kernels once per row.
/// `ahead`, unless null, is prefetched into L2 as the row is read: in a
/// row group (a softmax), the same row of the next block, which the
/// group's first kernel (the row max, bound by memory) reads next; the
/// fetch then overlaps this row's arithmetic.
///
/// # Safety
/// `src` points to `n` readable f32, `dst` is null or points to `n`
/// writable f32 that are either those or do not overlap them; `ahead` is
/// only prefetched (any address); the host has what [`lanes`] requires.
pub(crate) unsafe extern "C" fn tl_wide_row_f32(
    op: i32,
    src: *const f32,
    n: i64,
    a: f32,
    b: f32,
    dst: *mut f32,
    ahead: *const f32,
) -> f32 {
    // SAFETY: the caller's contract.
    unsafe { row_dispatch(op, src, n, a, b, dst, ahead) }
}

/// [`tl_wide_row_f32`] for f64 rows.
///
/// # Safety
/// As for [`tl_wide_row_f32`], with f64.
pub(crate) unsafe extern "C" fn tl_wide_row_f64(
    op: i32,
    src: *const f64,
    n: i64,
    a: f64,
    b: f64,
    dst: *mut f64,
    ahead: *const f64,
) -> f64 {
    // SAFETY: the caller's contract.
    unsafe { row_dispatch(op, src, n, a, b, dst, ahead) }
}

/// The body of the `tl_wide_row_*` symbols, as [`dispatch`] is of the
/// `tl_wide_*` ones: a panic (none is possible) stops here; the row and
/// the sum read NaN.
///
/// # Safety
/// As for [`tl_wide_row_f32`].
unsafe fn row_dispatch<T: Lane>(
    op: i32,
    src: *const T,
    n: i64,
    a: T,
    b: T,
    dst: *mut T,
    ahead: *const T,
) -> T {
    let nan = T::of(f64::NAN);
    if op == ROW_MAX {
        let n = usize::try_from(n).unwrap_or(0);
        // SAFETY: the caller's readable row of `n` elements.
        return on_widest!(row_max(src, n), unsafe { T::row_max(src, n) }).unwrap_or(nan);
    }
    let u = match op {
        ROW_DIV => None,
        _ => match UnaryOp::ALL.get(op as usize) {
            Some(u) => Some(*u),
            None => return nan,
        },
    };
    let n = usize::try_from(n).unwrap_or(0);
    let io = RowIo { src, n, dst, ahead };
    let r = on_widest!(row(u, io, a, b), {
        // SAFETY: the caller's contract.
        unsafe { row(u, io, a, b) }
    });
    r.unwrap_or_else(|_| {
        if !dst.is_null() {
            for i in 0..n {
                // SAFETY: the caller's writable row of `n` elements.
                unsafe { dst.add(i).write(nan) };
            }
        }
        nan
    })
}

/// f64 `pow` over a chunk buffer of two halves (codegen's `wide_chunks`):
/// `x` in `buf[..n]`, `y` in `buf[CHUNK..CHUNK + n]`; the powers replace
/// the `x` half.
///
/// # Safety
/// `p` points to `CHUNK + n` writable, initialized f64 (`n ≤ CHUNK`) and
/// the host has what [`lanes`] requires.
pub(crate) unsafe extern "C" fn tl_wide_pow_f64(p: *mut f64, n: i64) {
    let n = usize::try_from(n).unwrap_or(0).min(CHUNK);
    // SAFETY: the caller's buffer; nothing else accesses it during the call.
    let buf = unsafe { std::slice::from_raw_parts_mut(p, CHUNK + n) };
    let (xs, ys) = buf.split_at_mut(CHUNK);
    if on_widest!(pow(&mut xs[..n], ys), pow_buf(&mut xs[..n], ys)).is_err() {
        // SAFETY: as above; the closure that borrowed the buffer is gone.
        let buf = unsafe { std::slice::from_raw_parts_mut(p, n) };
        buf.iter_mut().for_each(|x| *x = f64::NAN);
    }
}

/// `xs[i] = pow64(xs[i], ys[i])`.
#[inline(always)]
fn pow_buf(xs: &mut [f64], ys: &[f64]) {
    for (x, y) in xs.iter_mut().zip(ys) {
        *x = pow64(*x, *y);
    }
}

/// [`approx::pow_f64`].
#[inline(always)]
fn pow64(x: f64, y: f64) -> f64 {
    approx::pow_f64(&mut Lanes::new(), x, y)
}

/// One `map` per instruction set: the same loop, compiled for its features
/// so that LLVM vectorizes the inlined functions at that width.
macro_rules! wide_map {
    ($module:ident, $features:literal) => {
        #[cfg(target_arch = "x86_64")]
        mod $module {
            use super::*;

            /// # Safety
            /// The host has the features this is compiled for.
            #[target_feature(enable = $features)]
            pub(super) unsafe fn map<T: Lane>(u: UnaryOp, buf: &mut [T]) {
                T::map(u, buf);
            }

            /// # Safety
            /// The host has the features this is compiled for.
            #[target_feature(enable = $features)]
            pub(super) unsafe fn pow(xs: &mut [f64], ys: &[f64]) {
                pow_buf(xs, ys);
            }

            /// # Safety
            /// As for `row`; the host has the features this is compiled for.
            #[target_feature(enable = $features)]
            pub(super) unsafe fn row<T: Lane>(u: Option<UnaryOp>, io: RowIo<T>, a: T, b: T) -> T {
                // SAFETY: the caller's contract.
                unsafe { super::row(u, io, a, b) }
            }

            /// # Safety
            /// As for `Lane::row_max`; the host has the features this is
            /// compiled for.
            #[target_feature(enable = $features)]
            pub(super) unsafe fn row_max<T: Lane>(src: *const T, n: usize) -> T {
                // SAFETY: the caller's contract.
                unsafe { T::row_max(src, n) }
            }
        }
    };
}

wide_map!(avx512, "avx512f,avx512dq,avx512vl,avx2,fma");
wide_map!(avx2, "avx2,fma");

/// [`approx::Ops`] on plain lanes: the approximations of [`approx`] as
/// Rust arithmetic, which rustc vectorizes in `map`'s and `row`'s loops.
struct Lanes<T>(std::marker::PhantomData<T>);

impl<T> Lanes<T> {
    #[inline(always)]
    fn new() -> Self {
        Lanes(std::marker::PhantomData)
    }
}

impl<T: Lane> approx::Ops for Lanes<T> {
    type V = T;
    type M = bool;
    type I = i64;

    #[inline(always)]
    fn f64(&self) -> bool {
        T::BITS == 64
    }
    #[inline(always)]
    fn c(&mut self, v: f64) -> T {
        T::of(v)
    }
    #[inline(always)]
    fn add(&mut self, a: T, b: T) -> T {
        a + b
    }
    #[inline(always)]
    fn sub(&mut self, a: T, b: T) -> T {
        a - b
    }
    #[inline(always)]
    fn mul(&mut self, a: T, b: T) -> T {
        a * b
    }
    #[inline(always)]
    fn div(&mut self, a: T, b: T) -> T {
        a / b
    }
    #[inline(always)]
    fn fma(&mut self, a: T, b: T, c: T) -> T {
        a.fma(b, c)
    }
    #[inline(always)]
    fn abs(&mut self, a: T) -> T {
        a.abs()
    }
    #[inline(always)]
    fn neg(&mut self, a: T) -> T {
        -a
    }
    #[inline(always)]
    fn lt(&mut self, a: T, b: T) -> bool {
        a < b
    }
    #[inline(always)]
    fn le(&mut self, a: T, b: T) -> bool {
        a <= b
    }
    #[inline(always)]
    fn ge(&mut self, a: T, b: T) -> bool {
        a >= b
    }
    #[inline(always)]
    fn eq(&mut self, a: T, b: T) -> bool {
        a == b
    }
    #[inline(always)]
    fn ult(&mut self, a: T, b: T) -> bool {
        a < b || a.is_nan() || b.is_nan()
    }
    #[inline(always)]
    fn select(&mut self, m: bool, a: T, b: T) -> T {
        if m { a } else { b }
    }
    #[inline(always)]
    fn bits(&mut self, a: T) -> i64 {
        a.bits()
    }
    #[inline(always)]
    fn of_bits(&mut self, i: i64) -> T {
        T::from_bits(i)
    }
    #[inline(always)]
    fn ic(&mut self, v: i64) -> i64 {
        v
    }
    #[inline(always)]
    fn iadd(&mut self, a: i64, b: i64) -> i64 {
        a.wrapping_add(b)
    }
    #[inline(always)]
    fn isub(&mut self, a: i64, b: i64) -> i64 {
        a.wrapping_sub(b)
    }
    #[inline(always)]
    fn iand(&mut self, a: i64, b: i64) -> i64 {
        a & b
    }
    #[inline(always)]
    fn ior(&mut self, a: i64, b: i64) -> i64 {
        a | b
    }
    #[inline(always)]
    fn ishl(&mut self, a: i64, k: u32) -> i64 {
        a << k
    }
    #[inline(always)]
    fn ixor(&mut self, a: i64, b: i64) -> i64 {
        a ^ b
    }
    #[inline(always)]
    fn inz(&mut self, a: i64) -> bool {
        a != 0
    }
    #[inline(always)]
    fn iushr(&mut self, a: i64, k: u32) -> i64 {
        if T::BITS == 32 {
            i64::from(((a as u32) >> k) as i32)
        } else {
            ((a as u64) >> k) as i64
        }
    }
    #[inline(always)]
    fn to_float(&mut self, a: i64) -> T {
        T::of(a as f64)
    }
    #[inline(always)]
    fn nearest(&mut self, a: T) -> T {
        a.nearest()
    }
    #[inline(always)]
    fn and(&mut self, a: bool, b: bool) -> bool {
        a & b
    }
    #[inline(always)]
    fn or(&mut self, a: bool, b: bool) -> bool {
        a | b
    }
    #[inline(always)]
    fn not(&mut self, a: bool) -> bool {
        !a
    }
    #[inline(always)]
    fn in_f64<F: approx::InF64>(&mut self, xs: &[T], f: &F) -> T {
        let mut w = [0.0; 2];
        for (w, x) in w.iter_mut().zip(xs) {
            *w = x.to_f64();
        }
        T::of(f.eval(&mut Lanes::<f64>::new(), &w[..xs.len()]))
    }
}

/// [`approx::exp`].
#[inline(always)]
fn exp<T: Lane>(x: T) -> T {
    approx::exp(&mut Lanes::new(), x)
}

/// [`approx::expm1`].
#[inline(always)]
fn expm1<T: Lane>(x: T) -> T {
    approx::expm1(&mut Lanes::new(), x)
}

/// [`approx::tanh`].
#[inline(always)]
fn tanh<T: Lane>(x: T) -> T {
    approx::tanh(&mut Lanes::new(), x)
}

/// [`approx::ln`].
#[inline(always)]
fn ln<T: Lane>(x: T) -> T {
    approx::ln(&mut Lanes::new(), x)
}

/// [`approx::log1p`].
#[inline(always)]
fn log1p<T: Lane>(x: T) -> T {
    approx::log1p(&mut Lanes::new(), x)
}

/// [`approx::logistic`].
#[inline(always)]
fn logistic<T: Lane>(x: T) -> T {
    approx::logistic(&mut Lanes::new(), x)
}

/// `sincos` without its cold branch (see [`sincos_buf`]).
#[inline(always)]
fn sincos<T: Lane>(x: T, cos: bool) -> T {
    approx::sincos(&mut Lanes::new(), x, cos)
}

/// `sin` or `cos` of a buffer whose length is a whole number of 128-bit
/// vectors, as the inline code computes it vector by vector: a vector (4
/// f32 or 2 f64 lanes of the row) with a lane beyond the reduction's range
/// goes through libm whole, the others take the polynomial.
#[inline(always)]
fn sincos_buf<T: Lane>(buf: &mut [T], cos: bool) {
    let limit = T::of(T::SINCOS_LIMIT);
    let huge = |x: &T| x.abs() > limit;
    if !buf.iter().fold(false, |any, x| any | huge(x)) {
        buf.iter_mut().for_each(|x| *x = sincos(*x, cos));
        return;
    }
    let op = if cos { UnaryOp::Cos } else { UnaryOp::Sin };
    for group in buf.chunks_mut(16 / std::mem::size_of::<T>()) {
        if group.iter().any(huge) {
            group.iter_mut().for_each(|x| *x = T::libm(op, *x));
        } else {
            group.iter_mut().for_each(|x| *x = sincos(*x, cos));
        }
    }
}

/// The methods of [`Lane`] that are the same for f32 and f64: `$float`'s
/// own operations, its bits as the signed integer `$int` sign-extended.
macro_rules! lane_basics {
    ($float:ident, $int:ident, $uint:ident) => {
        #[inline(always)]
        #[allow(clippy::unnecessary_cast, reason = "the identity in the f64 expansion")]
        fn of(v: f64) -> $float {
            v as $float
        }
        #[inline(always)]
        fn fma(self, a: $float, b: $float) -> $float {
            self.mul_add(a, b)
        }
        #[inline(always)]
        fn abs(self) -> $float {
            $float::abs(self)
        }
        #[inline(always)]
        fn is_nan(self) -> bool {
            $float::is_nan(self)
        }
        #[inline(always)]
        fn sqrt(self) -> $float {
            $float::sqrt(self)
        }
        #[inline(always)]
        fn nearest(self) -> $float {
            $float::round_ties_even(self)
        }
        #[inline(always)]
        fn to_f64(self) -> f64 {
            f64::from(self)
        }
        #[inline(always)]
        #[allow(clippy::unnecessary_cast, reason = "the identity in the f64 expansion")]
        fn bits(self) -> i64 {
            i64::from(self.to_bits() as $int)
        }
        #[inline(always)]
        fn from_bits(b: i64) -> $float {
            $float::from_bits(b as $uint)
        }
        #[inline(always)]
        fn libm(op: UnaryOp, x: $float) -> $float {
            $float::un(op, x)
        }
        /// [`MAX_LANES`] lanes of `m < x ? x : m` (one `vmaxps` per vector,
        /// NaN left out) beside two companions: the lanes that saw a NaN and
        /// the AND of every element's bits, whose sign bit is clear exactly
        /// when some element's is — so a zero maximum is +0 exactly then, as
        /// with `fmax` (no element was positive). The inline code's
        /// `float_extreme_step`, wider.
        #[inline(always)]
        unsafe fn row_max(src: *const $float, n: usize) -> $float {
            let mut m = [$float::NEG_INFINITY; MAX_LANES];
            let mut nan: [$uint; MAX_LANES] = [0; MAX_LANES];
            let mut and: [$uint; MAX_LANES] = [$uint::MAX; MAX_LANES];
            let mut step = |k: usize, x: $float| {
                m[k] = if m[k] < x { x } else { m[k] };
                nan[k] |= $uint::from(x.is_nan());
                and[k] &= x.to_bits();
            };
            let mut i = 0;
            while i + MAX_LANES <= n {
                // SAFETY: elements `i..i + MAX_LANES < n` of the caller's row.
                let blk = unsafe { src.add(i).cast::<[$float; MAX_LANES]>().read_unaligned() };
                for (k, x) in blk.into_iter().enumerate() {
                    step(k, x);
                }
                i += MAX_LANES;
            }
            for k in 0..n - i {
                // SAFETY: as above, element `i + k < n`.
                step(k, unsafe { src.add(i + k).read() });
            }
            let r = m
                .into_iter()
                .fold($float::NEG_INFINITY, |r, x| if r < x { x } else { r });
            if nan.into_iter().any(|s| s != 0) {
                $float::NAN
            } else if r == 0.0 {
                let sign = !($uint::MAX >> 1);
                $float::from_bits(and.into_iter().fold($uint::MAX, |a, b| a & b) & sign)
            } else {
                r
            }
        }
    };
}

/// Lanes of [`Lane::row_max`]'s accumulators: four AVX-512 vectors of f32,
/// enough to hide the compare-and-blend latency.
const MAX_LANES: usize = 64;

impl Lane for f32 {
    const BITS: u32 = 32;
    const SINCOS_LIMIT: f64 = SINCOS_F32_LIMIT;

    lane_basics!(f32, i32, u32);

    /// [`approx::erf_f32`].
    #[inline(always)]
    fn erf(self) -> f32 {
        approx::erf_f32(&mut Lanes::new(), self)
    }
}

impl Lane for f64 {
    const BITS: u32 = 64;
    const SINCOS_LIMIT: f64 = SINCOS_F64_LIMIT;

    lane_basics!(f64, i64, u64);

    /// [`approx::erf_f64`].
    #[inline(always)]
    fn erf(self) -> f64 {
        approx::erf_f64(&mut Lanes::new(), self)
    }
}
