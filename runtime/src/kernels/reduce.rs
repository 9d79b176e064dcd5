//! Reductions, argmax/argmin and dot_general.

use num_complex::{Complex32, Complex64};
use tensorlift_ir::{BinaryOp, DType, DotDims, Error, ReduceOp, Result};

use super::elementwise::{downcast_half, int_dtypes, upcast_half, with_int};
use super::gemm::{self, GemmDims, GemmFloat};
use super::layout::transpose;
use super::scalar::{ComplexScalar, FloatScalar, IntScalar};
use crate::memory::AlignedBytes;
use crate::tensor::{Pod, Tensor};

/// Moves `axes` to the end (in order), returning the transposed tensor, the
/// kept dims and the number of reduced elements per output element.
fn axes_last(x: &Tensor, axes: &[usize]) -> Result<(Tensor, Vec<usize>, usize)> {
    let kept: Vec<usize> = (0..x.rank()).filter(|d| !axes.contains(d)).collect();
    let perm: Vec<usize> = kept.iter().chain(axes).copied().collect();
    let t = if perm.iter().enumerate().all(|(i, p)| i == *p) {
        x.clone()
    } else {
        transpose(x, &perm)?
    };
    let kept_dims = kept.iter().map(|&d| x.shape()[d]).collect();
    let inner = axes.iter().map(|&d| x.shape()[d]).product();
    Ok((t, kept_dims, inner))
}

fn fold_rows<T: Pod>(
    t: &Tensor,
    inner: usize,
    outer: usize,
    init: T,
    f: impl Fn(T, T) -> T,
) -> Result<Vec<T>> {
    let v = t.view::<T>()?;
    Ok((0..outer)
        .map(|o| {
            v[o * inner..(o + 1) * inner]
                .iter()
                .fold(init, |a, &b| f(a, b))
        })
        .collect())
}

/// Reduces over `axes` (sequentially, in row-major order of the reduced
/// elements; an f32 sum in f64). Reductions of zero elements give the op's identity; a
/// reduction over no axes returns the operand.
pub fn reduce(op: ReduceOp, x: &Tensor, axes: &[usize], keepdims: bool) -> Result<Tensor> {
    let d = x.dtype();
    // A reduction over no axes is the identity (not `init + x`, which would
    // turn -0.0 into +0.0).
    if axes.is_empty() {
        return Ok(x.clone());
    }
    if d.is_half() {
        return downcast_half(&reduce(op, &upcast_half(x)?, axes, keepdims)?, d);
    }
    let (t, kept, inner) = axes_last(x, axes)?;
    let outer: usize = kept.iter().product();
    let out_dims: Vec<usize> = if keepdims {
        (0..x.rank())
            .map(|i| if axes.contains(&i) { 1 } else { x.shape()[i] })
            .collect()
    } else {
        kept
    };
    let bad = || {
        Error::internal(format!(
            "reduce_{} reached the interpreter on {d}",
            op.name()
        ))
    };
    macro_rules! done {
        ($T:ty, $init:expr, $f:expr) => {
            Ok(Tensor::from_vec_as(
                d,
                &out_dims,
                fold_rows::<$T>(&t, inner, outer, $init, $f)?,
            ))
        };
    }
    match d {
        DType::Bool => match op {
            ReduceOp::And => done!(u8, 1, |a, b| a & b),
            ReduceOp::Or => done!(u8, 0, |a, b| a | b),
            // Only the logical reductions are defined on bool (the type
            // checker rejects the rest).
            ReduceOp::Sum | ReduceOp::Prod | ReduceOp::Max | ReduceOp::Min => Err(bad()),
        },
        // An f32 sum accumulates in f64, rounded once: in f32 a running sum
        // stops growing at 2^24 (20M ones summed to 16,777,216), where
        // NumPy's pairwise and TensorFlow's tree sums do not.
        DType::F32 if op == ReduceOp::Sum => {
            let v = t.view::<f32>()?;
            let sums: Vec<f32> = (0..outer)
                .map(|o| {
                    let row = &v[o * inner..(o + 1) * inner];
                    row.iter().fold(0.0f64, |a, &b| a + f64::from(b)) as f32
                })
                .collect();
            Ok(Tensor::from_vec_as(d, &out_dims, sums))
        }
        DType::F32 => float_reduce::<f32>(op, &t, inner, outer, &out_dims),
        DType::F64 => float_reduce::<f64>(op, &t, inner, outer, &out_dims),
        DType::C64 => complex_reduce::<Complex32>(op, &t, inner, outer, &out_dims),
        DType::C128 => complex_reduce::<Complex64>(op, &t, inner, outer, &out_dims),
        // Halves were reduced in f32 above, and strings have no reductions
        // (the type checker rejects them): with_int!'s `else` gives the
        // error.
        DType::F16 | DType::BF16 | DType::String | int_dtypes!() => with_int!(d, T => match op {
            ReduceOp::Sum => done!(T, T::ZERO, |a, b| T::bin(BinaryOp::Add, a, b)),
            ReduceOp::Prod => done!(T, T::ONE, |a, b| T::bin(BinaryOp::Mul, a, b)),
            ReduceOp::Max => done!(T, T::MIN, |a: T, b: T| a.max(b)),
            ReduceOp::Min => done!(T, T::MAX, |a: T, b: T| a.min(b)),
            // Logical reductions need bool (the type checker).
            ReduceOp::And | ReduceOp::Or => Err(bad()),
        }, else => Err(bad())),
    }
}

fn float_reduce<T: FloatScalar>(
    op: ReduceOp,
    t: &Tensor,
    inner: usize,
    outer: usize,
    dims: &[usize],
) -> Result<Tensor> {
    let (init, f): (T, BinaryOp) = match op {
        ReduceOp::Sum => (T::ZERO, BinaryOp::Add),
        ReduceOp::Prod => (T::ONE, BinaryOp::Mul),
        ReduceOp::Max => (T::NEG_INF, BinaryOp::Max),
        ReduceOp::Min => (T::INF, BinaryOp::Min),
        // Logical reductions need bool (the type checker).
        ReduceOp::And | ReduceOp::Or => {
            return Err(Error::internal("logical reduction of a float"));
        }
    };
    Ok(Tensor::from_vec_as(
        t.dtype(),
        dims,
        fold_rows::<T>(t, inner, outer, init, |a, b| T::bin(f, a, b))?,
    ))
}

fn complex_reduce<T: ComplexScalar>(
    op: ReduceOp,
    t: &Tensor,
    inner: usize,
    outer: usize,
    dims: &[usize],
) -> Result<Tensor> {
    let (init, f) = match op {
        ReduceOp::Sum => (T::from_parts(0.0, 0.0), BinaryOp::Add),
        ReduceOp::Prod => (T::from_parts(1.0, 0.0), BinaryOp::Mul),
        // Complex numbers are unordered, and logical reductions need bool
        // (the type checker).
        ReduceOp::Max | ReduceOp::Min | ReduceOp::And | ReduceOp::Or => {
            return Err(Error::internal("ordered reduction of a complex"));
        }
    };
    Ok(Tensor::from_vec_as(
        t.dtype(),
        dims,
        fold_rows::<T>(t, inner, outer, init, |a, b| T::bin(f, a, b))?,
    ))
}

fn arg_rows<T: Pod + PartialOrd>(
    t: &Tensor,
    inner: usize,
    outer: usize,
    max: bool,
) -> Result<Vec<i64>> {
    let v = t.view::<T>()?;
    #[allow(clippy::eq_op, reason = "x != x is the generic NaN test")]
    let is_nan = |x: T| x != x;
    Ok((0..outer)
        .map(|o| {
            let row = &v[o * inner..(o + 1) * inner];
            let mut best = 0;
            for (j, &x) in row.iter().enumerate().skip(1) {
                let b = row[best];
                if is_nan(b) {
                    break;
                }
                if is_nan(x) || (max && x > b) || (!max && x < b) {
                    best = j;
                }
            }
            best as i64
        })
        .collect())
}

/// Index of the first maximum (`max`) or minimum along `axis`; a NaN wins
/// over every number (NumPy's rule).
pub fn arg_reduce(x: &Tensor, axis: usize, index_dtype: DType, max: bool) -> Result<Tensor> {
    let d = x.dtype();
    if d.is_half() {
        return arg_reduce(&upcast_half(x)?, axis, index_dtype, max);
    }
    if x.shape()[axis] == 0 {
        return Err(Error::invalid(format!(
            "{} of an empty axis {axis}",
            if max { "argmax" } else { "argmin" }
        )));
    }
    let (t, kept, inner) = axes_last(x, &[axis])?;
    let outer: usize = kept.iter().product();
    let idx = match d {
        DType::F32 => arg_rows::<f32>(&t, inner, outer, max)?,
        DType::F64 => arg_rows::<f64>(&t, inner, outer, max)?,
        // Halves were upcast above; argmax/argmin need an integer or real
        // float dtype (the type checker rejects the rest): with_int!'s
        // `else` gives the error.
        DType::Bool
        | DType::F16
        | DType::BF16
        | DType::C64
        | DType::C128
        | DType::String
        | int_dtypes!() => with_int!(d, T => arg_rows::<T>(&t, inner, outer, max)?,
            else => return Err(Error::internal(format!("argmax/argmin reached the interpreter on {d}")))),
    };
    Ok(if index_dtype == DType::I32 {
        Tensor::from_vec_as(
            index_dtype,
            &kept,
            idx.into_iter().map(|i| i as i32).collect(),
        )
    } else {
        Tensor::from_vec_as(index_dtype, &kept, idx)
    })
}

/// Whether [`sort_keys`] of `d` may use all 64 bits (else at most 32).
fn wide_keys(d: DType) -> bool {
    d.size() > 4
}

/// Into `out`, the keys of elements `from..from + n` of `x`: their
/// unsigned order is the sort order of the elements, NaN above every
/// number, -0.0 equal to 0.0; below 2^32 unless [`wide_keys`]. Halves are
/// upcast by the caller.
fn sort_keys(x: &Tensor, from: usize, n: usize, out: &mut Vec<u64>) -> Result<()> {
    fn signed<T: Pod>(v: &[T], out: &mut Vec<u64>, wide: bool, bits: impl Fn(T) -> u64) {
        let flip = if wide { 1 << 63 } else { 1 << 31 };
        out.extend(v.iter().map(|&v| bits(v) ^ flip));
    }
    fn unsigned<T: Pod + Into<u64>>(v: &[T], out: &mut Vec<u64>) {
        out.extend(v.iter().map(|&v| v.into()));
    }
    out.clear();
    let d = x.dtype();
    let at = from..from + n;
    match d {
        DType::F32 => {
            // Without a branch on the sign (half of them mispredicted):
            // negative numbers have every bit flipped, others the sign bit.
            let key = |v: f32| -> u64 {
                let b = v.to_bits();
                let b = if b & 0x7fff_ffff == 0 { 0 } else { b };
                if v.is_nan() {
                    u64::from(u32::MAX)
                } else {
                    u64::from(b ^ (((b as i32 >> 31) as u32) | 1 << 31))
                }
            };
            out.extend(x.view::<f32>()?[at].iter().map(|&v| key(v)));
        }
        DType::F64 => {
            let key = |v: f64| -> u64 {
                let b = v.to_bits();
                let b = if b & !(1 << 63) == 0 { 0 } else { b };
                if v.is_nan() {
                    u64::MAX
                } else {
                    b ^ (((b as i64 >> 63) as u64) | 1 << 63)
                }
            };
            out.extend(x.view::<f64>()?[at].iter().map(|&v| key(v)));
        }
        DType::Bool | DType::U8 => unsigned(&x.view::<u8>()?[at], out),
        DType::U16 => unsigned(&x.view::<u16>()?[at], out),
        DType::U32 => unsigned(&x.view::<u32>()?[at], out),
        DType::U64 => unsigned(&x.view::<u64>()?[at], out),
        DType::I8 => signed(&x.view::<i8>()?[at], out, false, |v| {
            u64::from(v as i32 as u32)
        }),
        DType::I16 => signed(&x.view::<i16>()?[at], out, false, |v| {
            u64::from(v as i32 as u32)
        }),
        DType::I32 => signed(&x.view::<i32>()?[at], out, false, |v| u64::from(v as u32)),
        DType::I64 => signed(&x.view::<i64>()?[at], out, true, |v| v as u64),
        DType::F16 | DType::BF16 | DType::C64 | DType::C128 | DType::String => {
            return Err(Error::internal(format!(
                "argsort reached the interpreter on {d}"
            )));
        }
    }
    Ok(())
}

/// Sorts one row of distinct keys. A long row (in a tensor of fewer rows
/// than threads, whose rows are sorted one after another) is cut into one
/// run per thread, each sorted on its own thread, and the runs merged by
/// the standard library's stable sort (which finds them: one merge pass
/// per doubling of runs).
fn sort_keys_of_row<K: Ord + Send>(row: &mut [K], split: bool) {
    let threads = crate::pool::threads();
    if !split || threads < 2 || row.len() < 1 << 17 {
        row.sort_unstable();
        return;
    }
    let per = row.len().div_ceil(threads);
    let runs: Vec<std::sync::Mutex<&mut [K]>> =
        row.chunks_mut(per).map(std::sync::Mutex::new).collect();
    crate::pool::run_parts(runs.len(), &|p| {
        if let Ok(mut run) = runs[p].lock() {
            run.sort_unstable();
        }
    });
    drop(runs);
    row.sort();
}

/// Sorts rows `rows` of `n` elements of `x` into `out` (each row's element
/// indices in order, ties in index order); `split`: the rows are sorted on
/// the calling thread alone, so a long one may be split over the threads.
fn argsort_rows<I: Pod + TryFrom<usize>>(
    x: &Tensor,
    rows: std::ops::Range<usize>,
    n: usize,
    descending: bool,
    out: &mut [I],
    split: bool,
) -> Result<()> {
    let wide = wide_keys(x.dtype());
    let flip = match (descending, wide) {
        (false, _) => 0,
        (true, false) => u64::from(u32::MAX),
        (true, true) => u64::MAX,
    };
    let index = |j: u64| I::try_from(j as usize).ok();
    let mut keys = Vec::with_capacity(n);
    let outs = out.chunks_exact_mut(n);
    if !wide && u32::try_from(n).is_ok() {
        // One u64 per element, the key above the index: an unstable sort
        // of distinct values is the stable order of the keys.
        let mut row: Vec<u64> = Vec::with_capacity(n);
        for (r, out) in rows.zip(outs) {
            sort_keys(x, r * n, n, &mut keys)?;
            row.clear();
            row.extend(
                keys.iter()
                    .enumerate()
                    .map(|(j, &k)| ((k ^ flip) << 32) | j as u64),
            );
            sort_keys_of_row(&mut row, split);
            for (o, &v) in out.iter_mut().zip(&row) {
                if let Some(i) = index(v & u64::from(u32::MAX)) {
                    *o = i;
                }
            }
        }
    } else {
        let mut row: Vec<u128> = Vec::with_capacity(n);
        for (r, out) in rows.zip(outs) {
            sort_keys(x, r * n, n, &mut keys)?;
            row.clear();
            row.extend(
                (keys.iter().enumerate()).map(|(j, &k)| (u128::from(k ^ flip) << 64) | j as u128),
            );
            sort_keys_of_row(&mut row, split);
            for (o, &v) in out.iter_mut().zip(&row) {
                if let Some(i) = index(v as u64) {
                    *o = i;
                }
            }
        }
    }
    Ok(())
}

/// The indices that sort `x` along `axis` ([`tensorlift_ir::Op::ArgSort`]):
/// stable, NaN above every number, -0.0 equal to 0.0; rows sorted on the
/// pool's threads.
pub fn argsort(x: &Tensor, axis: usize, descending: bool, index_dtype: DType) -> Result<Tensor> {
    if x.dtype().is_half() {
        return argsort(&upcast_half(x)?, axis, descending, index_dtype);
    }
    let n = x.shape()[axis];
    if n == 0 || x.shape().contains(&0) {
        return Tensor::zeros(index_dtype, x.shape());
    }
    let (t, kept, _) = axes_last(x, &[axis])?;
    let mut dims = kept;
    dims.push(n);
    fn sorted<I: Pod + TryFrom<usize>>(
        t: &Tensor,
        n: usize,
        descending: bool,
        dtype: DType,
        dims: &[usize],
    ) -> Result<Tensor> {
        let len = t.len();
        let rows = len / n;
        let no_memory = || Error::invalid(format!("argsort: no memory for {len} indices"));
        // SAFETY: every row of every part is written below before the
        // buffer is read (or the error drops it unread).
        let mut bytes = unsafe { AlignedBytes::try_for_overwrite(len * dtype.size()) }
            .map_err(|_| no_memory())?;
        let out: &mut [I] = bytemuck::cast_slice_mut(bytes.as_mut_slice());
        // Parts of whole rows, each at least ~64K elements.
        let parts = crate::pool::threads()
            .min(len.div_ceil(1 << 16))
            .min(rows)
            .max(1);
        let per = rows.div_ceil(parts);
        let chunks: Vec<std::sync::Mutex<&mut [I]>> =
            out.chunks_mut(per * n).map(std::sync::Mutex::new).collect();
        let failed = std::sync::Mutex::new(None);
        crate::pool::run_parts(chunks.len(), &|p| {
            let Ok(mut chunk) = chunks[p].lock() else {
                return;
            };
            let rows = p * per..p * per + chunk.len() / n;
            if let Err(e) = argsort_rows(t, rows, n, descending, &mut chunk, parts == 1)
                && let Ok(mut failed) = failed.lock()
            {
                *failed = Some(e);
            }
        });
        drop(chunks);
        if let Some(e) = failed.into_inner().ok().flatten() {
            return Err(e);
        }
        Tensor::from_aligned(dtype, dims, bytes)
    }
    let sorted = match index_dtype {
        DType::I32 => sorted::<i32>(&t, n, descending, index_dtype, &dims)?,
        DType::I64 => sorted::<i64>(&t, n, descending, index_dtype, &dims)?,
        DType::Bool
        | DType::I8
        | DType::I16
        | DType::U8
        | DType::U16
        | DType::U32
        | DType::U64
        | DType::F16
        | DType::BF16
        | DType::F32
        | DType::F64
        | DType::C64
        | DType::C128
        | DType::String => {
            return Err(Error::internal(format!(
                "argsort into {index_dtype} indices"
            )));
        }
    };
    if axis + 1 == x.rank() {
        return Ok(sorted);
    }
    // Back from (kept.., axis) to x's order of dims.
    let mut perm: Vec<usize> = (0..x.rank() - 1).collect();
    perm.insert(axis, x.rank() - 1);
    transpose(&sorted, &perm)
}

/// Running sums of `x` along `axis` ([`tensorlift_ir::Op::Cumsum`]), in
/// order (from the end when `reverse`; each element left out of its own
/// sum when `exclusive`), in `x`'s type (integers wrap); halves summed in
/// f32 and rounded once per element. Lines over the pool's threads.
pub fn cumsum(x: &Tensor, axis: usize, reverse: bool, exclusive: bool) -> Result<Tensor> {
    let d = x.dtype();
    if d.is_half() {
        return downcast_half(&cumsum(&upcast_half(x)?, axis, reverse, exclusive)?, d);
    }
    let dims = x.shape();
    let (outer, n, inner) = (
        dims[..axis].iter().product::<usize>(),
        dims[axis],
        dims[axis + 1..].iter().product::<usize>(),
    );
    let lines = Lines {
        outer,
        n,
        inner,
        reverse,
        exclusive,
    };
    match d {
        DType::F32 => lines.sum::<f32>(x, 0.0, |a, b| a + b),
        DType::F64 => lines.sum::<f64>(x, 0.0, |a, b| a + b),
        DType::C64 => lines.sum::<Complex32>(x, Complex32::new(0.0, 0.0), |a, b| a + b),
        DType::C128 => lines.sum::<Complex64>(x, Complex64::new(0.0, 0.0), |a, b| a + b),
        DType::Bool | DType::F16 | DType::BF16 | DType::String | int_dtypes!() => {
            with_int!(d, T => lines.sum::<T>(x, T::ZERO, |a, b| T::bin(BinaryOp::Add, a, b)),
                else => Err(Error::internal(format!("cumsum reached the interpreter on {d}"))))
        }
    }
}

/// The lines of a cumulative op: `outer` blocks of `n` steps of `inner`
/// contiguous elements.
struct Lines {
    outer: usize,
    n: usize,
    inner: usize,
    reverse: bool,
    exclusive: bool,
}

impl Lines {
    fn sum<T: Pod + Send + Sync>(
        &self,
        x: &Tensor,
        zero: T,
        add: impl Fn(T, T) -> T + Sync,
    ) -> Result<Tensor> {
        let src = x.view::<T>()?;
        let len = src.len();
        let no_memory = || Error::invalid(format!("cumsum: no memory for {len} elements"));
        // SAFETY: every element of every block is written below.
        let mut bytes = unsafe { AlignedBytes::try_for_overwrite(len * x.dtype().size()) }
            .map_err(|_| no_memory())?;
        if len > 0 {
            let out: &mut [T] = bytemuck::cast_slice_mut(bytes.as_mut_slice());
            let block = self.n * self.inner;
            // Parts of whole blocks, each at least ~64K elements.
            let parts = crate::pool::threads()
                .min(len.div_ceil(1 << 16))
                .min(self.outer)
                .max(1);
            let per = self.outer.div_ceil(parts);
            let chunks: Vec<std::sync::Mutex<&mut [T]>> = out
                .chunks_mut(per * block)
                .map(std::sync::Mutex::new)
                .collect();
            crate::pool::run_parts(chunks.len(), &|p| {
                let Ok(mut chunk) = chunks[p].lock() else {
                    return;
                };
                let first = p * per * block;
                let src = &src[first..first + chunk.len()];
                let mut acc = vec![zero; self.inner];
                for (xs, ys) in src.chunks_exact(block).zip(chunk.chunks_exact_mut(block)) {
                    acc.fill(zero);
                    for step in 0..self.n {
                        let k = if self.reverse {
                            self.n - 1 - step
                        } else {
                            step
                        };
                        let at = k * self.inner..(k + 1) * self.inner;
                        if step == 0 && !self.exclusive {
                            // The first sum is the element itself (a -0.0
                            // stays -0.0, as in NumPy), not 0 + it.
                            acc.copy_from_slice(&xs[at.clone()]);
                            ys[at].copy_from_slice(&acc);
                            continue;
                        }
                        for ((a, &v), y) in acc.iter_mut().zip(&xs[at.clone()]).zip(&mut ys[at]) {
                            if self.exclusive {
                                *y = *a;
                                *a = add(*a, v);
                            } else {
                                *a = add(*a, v);
                                *y = *a;
                            }
                        }
                    }
                }
            });
        }
        Tensor::from_aligned(x.dtype(), x.shape(), bytes)
    }
}

/// Generalized matrix product: result dims are batch, lhs free, rhs free.
pub fn dot_general(l: &Tensor, r: &Tensor, dd: &DotDims) -> Result<Tensor> {
    let d = l.dtype();
    if d.is_half() {
        return downcast_half(&dot_general(&upcast_half(l)?, &upcast_half(r)?, dd)?, d);
    }
    for (&a, &b) in dd
        .lhs_batch
        .iter()
        .zip(&dd.rhs_batch)
        .chain(dd.lhs_contract.iter().zip(&dd.rhs_contract))
    {
        if l.shape()[a] != r.shape()[b] {
            return Err(Error::invalid(format!(
                "dot_general: lhs dim {a} has size {} but rhs dim {b} has size {}",
                l.shape()[a],
                r.shape()[b]
            )));
        }
    }
    let lfree: Vec<usize> = (0..l.rank())
        .filter(|i| !dd.lhs_batch.contains(i) && !dd.lhs_contract.contains(i))
        .collect();
    let rfree: Vec<usize> = (0..r.rank())
        .filter(|i| !dd.rhs_batch.contains(i) && !dd.rhs_contract.contains(i))
        .collect();
    let size = |t: &Tensor, ds: &[usize]| ds.iter().map(|&i| t.shape()[i]).product::<usize>();
    let (b, m, k, n) = (
        size(l, &dd.lhs_batch),
        size(l, &lfree),
        size(l, &dd.lhs_contract),
        size(r, &rfree),
    );
    let lp: Vec<usize> = dd
        .lhs_batch
        .iter()
        .chain(&lfree)
        .chain(&dd.lhs_contract)
        .copied()
        .collect();
    let rp: Vec<usize> = dd
        .rhs_batch
        .iter()
        .chain(&dd.rhs_contract)
        .chain(&rfree)
        .copied()
        .collect();
    let mut dims: Vec<usize> = dd.lhs_batch.iter().map(|&i| l.shape()[i]).collect();
    dims.extend(lfree.iter().map(|&i| l.shape()[i]));
    dims.extend(rfree.iter().map(|&i| r.shape()[i]));
    // f32/f64 operands whose dim groups collapse are read in place, with
    // the strides the JIT's GEMM steps use (same call, same bits).
    if let Some(gd) = GemmDims::of(l.shape(), r.shape(), dd) {
        match d {
            DType::F32 => return real_gemm::<f32>(l, r, &gd, &dims),
            DType::F64 => return real_gemm::<f64>(l, r, &gd, &dims),
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
            | DType::String => {}
        }
    }
    let lt = transpose(l, &lp)?;
    let rt = transpose(r, &rp)?;
    let contiguous = GemmDims {
        b,
        m,
        k,
        n,
        lhs_strides: [(m * k) as isize, k as isize, 1],
        rhs_strides: [(k * n) as isize, n as isize, 1],
    };
    match d {
        DType::F32 => real_gemm::<f32>(&lt, &rt, &contiguous, &dims),
        DType::F64 => real_gemm::<f64>(&lt, &rt, &contiguous, &dims),
        DType::C64 => {
            gemm_batched::<[f32; 2]>(&lt, &rt, &dims, (b, m, k, n), |m, k, n, a, bb, c| {
                use matrixmultiply::CGemmOption::Standard;
                // SAFETY: as for f32; complex64 is laid out as [re, im].
                unsafe {
                    matrixmultiply::cgemm(
                        Standard,
                        Standard,
                        m,
                        k,
                        n,
                        [1.0, 0.0],
                        a,
                        k as isize,
                        1,
                        bb,
                        n as isize,
                        1,
                        [0.0, 0.0],
                        c,
                        n as isize,
                        1,
                    )
                }
            })
        }
        DType::C128 => {
            gemm_batched::<[f64; 2]>(&lt, &rt, &dims, (b, m, k, n), |m, k, n, a, bb, c| {
                use matrixmultiply::CGemmOption::Standard;
                // SAFETY: as for f32; complex128 is laid out as [re, im].
                unsafe {
                    matrixmultiply::zgemm(
                        Standard,
                        Standard,
                        m,
                        k,
                        n,
                        [1.0, 0.0],
                        a,
                        k as isize,
                        1,
                        bb,
                        n as isize,
                        1,
                        [0.0, 0.0],
                        c,
                        n as isize,
                        1,
                    )
                }
            })
        }
        // Halves were upcast above; bool and string have no products (the
        // type checker rejects them): with_int!'s `else` gives the error.
        DType::Bool | DType::F16 | DType::BF16 | DType::String | int_dtypes!() => {
            with_int!(d, T => {
                let (a, bv) = (lt.view::<T>()?, rt.view::<T>()?);
                let mut out = vec![T::ZERO; b * m * n];
                for bi in 0..b {
                    for i in 0..m {
                        for kk in 0..k {
                            let x = a[(bi * m + i) * k + kk];
                            for j in 0..n {
                                let o = &mut out[(bi * m + i) * n + j];
                                *o = T::bin(BinaryOp::Add, *o, T::bin(BinaryOp::Mul, x, bv[(bi * k + kk) * n + j]));
                            }
                        }
                    }
                }
                Ok(Tensor::from_vec_as(d, &dims, out))
            }, else => Err(Error::internal(format!("dot_general reached the interpreter on {d}"))))
        }
    }
}

/// `l @ r` as `gd` lays them out, through [`gemm::gemm`] (threaded).
fn real_gemm<T: GemmFloat + Pod + Default>(
    l: &Tensor,
    r: &Tensor,
    gd: &GemmDims,
    dims: &[usize],
) -> Result<Tensor> {
    let (a, bv) = (l.view::<T>()?, r.view::<T>()?);
    let mut out = vec![T::default(); gd.b * gd.m * gd.n];
    // SAFETY: `gd` describes row-major `l` and `r` (GemmDims::of, or the
    // contiguous layout of the transposed operands), so every offset its
    // strides reach is inside `a` and `bv`; `out` holds b·m·n elements.
    unsafe { gemm::gemm(gd, a.as_ptr(), bv.as_ptr(), out.as_mut_ptr(), true, false) };
    Ok(Tensor::from_vec_as(l.dtype(), dims, out))
}

type Gemm<T> = fn(usize, usize, usize, *const T, *const T, *mut T);

fn gemm_batched<T: Pod + Default>(
    lt: &Tensor,
    rt: &Tensor,
    dims: &[usize],
    (b, m, k, n): (usize, usize, usize, usize),
    gemm: Gemm<T>,
) -> Result<Tensor> {
    let (a, bv) = (lt.view::<T>()?, rt.view::<T>()?);
    let mut out = vec![T::default(); b * m * n];
    for bi in 0..b {
        if m * n == 0 || k == 0 {
            continue;
        }
        let (ap, bp) = (a[bi * m * k..].as_ptr(), bv[bi * k * n..].as_ptr());
        let cp = out[bi * m * n..].as_mut_ptr();
        gemm(m, k, n, ap, bp, cp);
    }
    Ok(Tensor::from_vec_as(lt.dtype(), dims, out))
}
