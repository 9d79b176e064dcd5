//! Data-movement ops: every element is moved as an opaque unsigned word of
//! the dtype's size, so one implementation serves every dtype.

use tensorlift_ir::{BinaryOp, Combiner, DType, Error, Result, Shape};

use super::elementwise::{int_dtypes, with_int, with_size};
use super::scalar::{FloatScalar, IntScalar};
use crate::memory::AlignedBytes;
use crate::tensor::{Pod, Tensor, TensorRef};
use num_complex::{Complex32, Complex64};

/// Row-major strides (in elements) of `dims`.
pub(crate) fn strides(dims: &[usize]) -> Vec<isize> {
    let mut s = vec![1isize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1] as isize;
    }
    s
}

/// `out[idx] = src[offset + Σ idx[d] * stride[d]]` over every index of
/// `out_dims`: the one kernel behind broadcast, transpose, slice and
/// reverse.
pub(crate) fn strided_gather(
    x: &Tensor,
    out_dims: &[usize],
    offset: isize,
    stride: &[isize],
) -> Result<Tensor> {
    with_size!(x.dtype().size(), T => {
        let src = x.view::<T>()?;
        let n: usize = out_dims.iter().product();
        let mut out: Vec<T> = Vec::with_capacity(n);
        if n > 0 {
            let rank = out_dims.len();
            let mut idx = vec![0usize; rank];
            let mut base = offset;
            let (inner, inner_stride) = if rank == 0 { (1, 0) } else { (out_dims[rank - 1], stride[rank - 1]) };
            loop {
                let mut p = base;
                for _ in 0..inner {
                    out.push(src[p as usize]);
                    p += inner_stride;
                }
                // Advance the odometer over all but the innermost dim.
                let mut d = rank.saturating_sub(1);
                loop {
                    if d == 0 {
                        return Ok(Tensor::from_vec_as(x.dtype(), out_dims, out));
                    }
                    d -= 1;
                    idx[d] += 1;
                    base += stride[d];
                    if idx[d] < out_dims[d] {
                        break;
                    }
                    base -= stride[d] * out_dims[d] as isize;
                    idx[d] = 0;
                }
            }
        }
        Ok(Tensor::from_vec_as(x.dtype(), out_dims, out))
    })
}

/// Resolves a shape attribute against run-time sizes.
fn resolve(shape: &Shape, what: &str) -> Result<Vec<Option<usize>>> {
    shape
        .dims()
        .map(|d| d.to_vec())
        .ok_or_else(|| Error::invalid(format!("{what} needs a ranked shape")))
}

/// XLA `broadcast_in_dim`.
pub fn broadcast_in_dim(x: &Tensor, shape: &Shape, dims: &[usize]) -> Result<Tensor> {
    let mut out = resolve(shape, "broadcast_in_dim")?;
    if dims.len() != x.rank() {
        return Err(Error::invalid(format!(
            "broadcast_in_dim: operand rank {} but {} dims",
            x.rank(),
            dims.len()
        )));
    }
    let xs = strides(x.shape());
    let mut stride = vec![0isize; out.len()];
    for (i, &d) in dims.iter().enumerate() {
        let n = x.shape()[i];
        match out[d] {
            None => out[d] = Some(n),
            Some(m) if n != m && n != 1 => {
                return Err(Error::invalid(format!(
                    "broadcast_in_dim: operand dim {i} has size {n} at run time, which cannot be broadcast to {m}"
                )));
            }
            _ => {}
        }
        if n != 1 {
            stride[d] = xs[i];
        }
    }
    let out: Vec<usize> = out
        .into_iter()
        .map(|d| d.ok_or_else(|| Error::invalid("broadcast_in_dim: a result dim is unknown")))
        .collect::<Result<_>>()?;
    strided_gather(x, &out, 0, &stride)
}

/// Row-major reshape; one unknown dim is inferred. Shares the buffer.
pub fn reshape(x: &Tensor, shape: &Shape) -> Result<Tensor> {
    let dims = resolve(shape, "reshape")?;
    let known: usize = dims.iter().flatten().product();
    let out: Vec<usize> = if dims.iter().any(|d| d.is_none()) {
        if known == 0 || !x.len().is_multiple_of(known) {
            return Err(Error::invalid(format!(
                "cannot reshape {:?} to {shape}",
                x.shape()
            )));
        }
        dims.iter().map(|d| d.unwrap_or(x.len() / known)).collect()
    } else {
        dims.iter().flatten().copied().collect()
    };
    x.reshaped(&out)
}

/// Permutes dims.
pub fn transpose(x: &Tensor, perm: &[usize]) -> Result<Tensor> {
    let xs = strides(x.shape());
    let dims: Vec<usize> = perm.iter().map(|&p| x.shape()[p]).collect();
    let stride: Vec<isize> = perm.iter().map(|&p| xs[p]).collect();
    strided_gather(x, &dims, 0, &stride)
}

/// Strided slice.
pub fn slice(x: &Tensor, start: &[usize], limit: &[usize], step: &[usize]) -> Result<Tensor> {
    let xs = strides(x.shape());
    let mut offset = 0isize;
    let mut dims = Vec::with_capacity(x.rank());
    let mut stride = Vec::with_capacity(x.rank());
    for d in 0..x.rank() {
        if limit[d] > x.shape()[d] || start[d] > limit[d] {
            return Err(Error::invalid(format!(
                "slice [{}:{}] is out of bounds for dim {d} of size {}",
                start[d],
                limit[d],
                x.shape()[d]
            )));
        }
        let n = (limit[d] - start[d]).div_ceil(step[d]);
        dims.push(n);
        if n > 0 {
            offset += start[d] as isize * xs[d];
        }
        stride.push(xs[d] * step[d] as isize);
    }
    strided_gather(x, &dims, offset, &stride)
}

/// Reverses the order of elements along `axes`.
pub fn reverse(x: &Tensor, axes: &[usize]) -> Result<Tensor> {
    let mut stride = strides(x.shape());
    let mut offset = 0isize;
    for &a in axes {
        let n = x.shape()[a];
        if n > 0 {
            offset += (n as isize - 1) * stride[a];
        }
        stride[a] = -stride[a];
    }
    strided_gather(x, x.shape(), offset, &stride)
}

/// Joins tensors along `axis`.
pub fn concatenate(xs: &[&Tensor], axis: usize) -> Result<Tensor> {
    let first = xs
        .first()
        .ok_or_else(|| Error::invalid("concatenate needs at least one operand"))?;
    let mut dims = first.shape().to_vec();
    dims[axis] = 0;
    for (k, x) in xs.iter().enumerate() {
        let ok = x.rank() == first.rank()
            && (0..x.rank()).all(|d| d == axis || x.shape()[d] == first.shape()[d]);
        if !ok {
            return Err(Error::invalid(format!(
                "concatenate: operand {k} has shape {:?}, incompatible with {:?} along axis {axis}",
                x.shape(),
                first.shape()
            )));
        }
        dims[axis] += x.shape()[axis];
    }
    let outer: usize = dims[..axis].iter().product();
    with_size!(first.dtype().size(), T => {
        let views: Vec<&[T]> = xs.iter().map(|x| x.view::<T>()).collect::<Result<_>>()?;
        let chunks: Vec<usize> = xs.iter().map(|x| x.shape()[axis..].iter().product()).collect();
        let mut out: Vec<T> = Vec::with_capacity(dims.iter().product());
        for o in 0..outer {
            for (v, &c) in views.iter().zip(&chunks) {
                out.extend_from_slice(&v[o * c..(o + 1) * c]);
            }
        }
        Ok(Tensor::from_vec_as(first.dtype(), &dims, out))
    })
}

/// Pads with the scalar `value`; negative `low`/`high` crop.
pub fn pad(
    x: &Tensor,
    value: &Tensor,
    low: &[i64],
    high: &[i64],
    interior: &[usize],
) -> Result<Tensor> {
    let rank = x.rank();
    let mut dims = Vec::with_capacity(rank);
    for d in 0..rank {
        let n = x.shape()[d] as i64;
        let size = low[d] + high[d] + n + (n.max(1) - 1) * interior[d] as i64;
        if size < 0 {
            return Err(Error::invalid(tensorlift_ir::infer::pad_too_small(
                n as usize, low[d], high[d], size, d,
            )));
        }
        dims.push(size as usize);
    }
    with_size!(x.dtype().size(), T => {
        let pv = value.view::<T>()?[0];
        let src = x.view::<T>()?;
        let mut out: Vec<T> = vec![pv; dims.iter().product()];
        let os = strides(&dims);
        let mut idx = vec![0usize; rank];
        for &e in src.iter() {
            let mut pos = 0i64;
            let mut inside = true;
            for d in 0..rank {
                let o = low[d] + idx[d] as i64 * (interior[d] as i64 + 1);
                if o < 0 || o >= dims[d] as i64 {
                    inside = false;
                    break;
                }
                pos += o * os[d] as i64;
            }
            if inside {
                out[pos as usize] = e;
            }
            for d in (0..rank).rev() {
                idx[d] += 1;
                if idx[d] < x.shape()[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        Ok(Tensor::from_vec_as(x.dtype(), &dims, out))
    })
}

/// Indices of an integer tensor as `usize`, each checked against `n`.
fn indices(idx: &Tensor, n: usize) -> Result<Vec<usize>> {
    let d = idx.dtype();
    // (Compared as i128: exact for every integer dtype; one pass, no
    // intermediate vector.)
    with_int!(d, T => idx.view::<T>()?.iter().enumerate().map(|(i, v)| {
            let v = v.to_i128();
            if v < 0 || v >= n as i128 {
                Err(index_out_of_range(i, v, n))
            } else {
                Ok(v as usize)
            }
        }).collect(),
        else => Err(Error::invalid(format!("take indices must be integers, got {d}"))))
}

/// `take`'s error for `indices[i] = v` outside `[0, n)`.
fn index_out_of_range(i: usize, v: i128, n: usize) -> Error {
    Error::invalid(format!("take: indices[{i}] = {v} is not in [0, {n})"))
}

/// Checks every index of `idx` against an axis of `n` elements: the error
/// [`take`] raises, for a take the JIT fused into its readers as a gather
/// (they load the table where the indices point, after this check).
pub fn check_take_indices(idx: &TensorRef<'_>, n: usize) -> Result<()> {
    let d = idx.dtype();
    with_int!(d, T => {
        let bad = words::<T>(idx.bytes())
            .iter()
            .map(|v| v.to_i128())
            .enumerate()
            .find(|(_, v)| *v < 0 || *v >= n as i128);
        match bad {
            Some((i, v)) => Err(index_out_of_range(i, v, n)),
            None => Ok(()),
        }
    }, else => Err(Error::invalid(format!("take indices must be integers, got {d}"))))
}

/// Gathers slices along `axis` at `idx`.
pub fn take(x: &Tensor, idx: &Tensor, axis: usize) -> Result<Tensor> {
    let dims = take_dims(x.shape(), idx.shape(), axis);
    let no_memory = || Error::invalid(format!("take: no memory for a result of shape {dims:?}"));
    let bytes = (dims
        .iter()
        .try_fold(x.dtype().size(), |n, d| n.checked_mul(*d)))
    .ok_or_else(no_memory)?;
    // SAFETY: `take_into` writes every byte (or fails, and the buffer is
    // dropped unread).
    let mut out = unsafe { AlignedBytes::try_for_overwrite(bytes) }.map_err(|_| no_memory())?;
    take_into(out.as_mut_slice(), x, idx, axis)?;
    Tensor::from_aligned(x.dtype(), &dims, out)
}

/// The shape of `take(x, idx, axis)`.
fn take_dims(x: &[usize], idx: &[usize], axis: usize) -> Vec<usize> {
    let mut dims = x[..axis].to_vec();
    dims.extend_from_slice(idx);
    dims.extend_from_slice(&x[axis + 1..]);
    dims
}

/// [`take`] into `out` (the result's bytes): the indices checked first,
/// then each slice copied from `x` as one block; nothing is written when
/// an index is out of range.
pub fn take_into(out: &mut [u8], x: &Tensor, idx: &Tensor, axis: usize) -> Result<()> {
    if x.dtype() == DType::String {
        return Err(Error::invalid("take of a string tensor"));
    }
    let n = x.shape()[axis];
    let ids = indices(idx, n)?;
    let outer: usize = x.shape()[..axis].iter().product();
    let inner = x.shape()[axis + 1..].iter().product::<usize>() * x.dtype().size();
    let src = x.bytes();
    if out.len() != outer * ids.len() * inner {
        return Err(Error::internal(format!(
            "take: a {}-byte result buffer for {} bytes",
            out.len(),
            outer * ids.len() * inner
        )));
    }
    if out.is_empty() {
        return Ok(());
    }
    // Rows `first..` of the result into `block`: slices of a fixed size
    // `N` (one element of 1 to 8 bytes: a move, not a call to memcpy)
    // or of any size.
    let m = ids.len();
    fn rows_of<const N: usize>(
        block: &mut [u8],
        src: &[u8],
        ids: &[usize],
        first: usize,
        n: usize,
    ) {
        let m = ids.len();
        let (mut o, mut k) = (first / m, first % m);
        for row in block.chunks_exact_mut(N) {
            let s = (o * n + ids[k]) * N;
            row.copy_from_slice(&src[s..s + N]);
            k += 1;
            if k == m {
                (o, k) = (o + 1, 0);
            }
        }
    }
    let gather = |first: usize, block: &mut [u8]| match inner {
        1 => rows_of::<1>(block, src, &ids, first, n),
        2 => rows_of::<2>(block, src, &ids, first, n),
        4 => rows_of::<4>(block, src, &ids, first, n),
        8 => rows_of::<8>(block, src, &ids, first, n),
        16 => rows_of::<16>(block, src, &ids, first, n),
        _ => {
            let (mut o, mut k) = (first / m, first % m);
            for row in block.chunks_exact_mut(inner) {
                let s = (o * n + ids[k]) * inner;
                row.copy_from_slice(&src[s..s + inner]);
                k += 1;
                if k == m {
                    (o, k) = (o + 1, 0);
                }
            }
        }
    };
    let threads = crate::pool::threads();
    if out.len() >= PARALLEL_COPY_BYTES && threads > 1 {
        // Runs of PARALLEL_COPY_BYTES / 4, each taken by the next thread
        // free (the gathered rows are copies: the bytes do not depend on
        // the split).
        let rows = (PARALLEL_COPY_BYTES / 4).div_ceil(inner);
        let runs = (out.len() / inner).div_ceil(rows);
        let next = std::sync::atomic::AtomicUsize::new(0);
        let base = SendMut(out.as_mut_ptr());
        let total = out.len();
        crate::pool::run_parts(threads.min(runs), &|_| {
            let base = &base;
            loop {
                let c = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if c >= runs {
                    break;
                }
                let start = c * rows * inner;
                let len = (rows * inner).min(total - start);
                // SAFETY: run `c` is taken by one thread only (the counter
                // hands each out once) and lies inside `out`, which stays
                // borrowed until every part returned.
                let block = unsafe { std::slice::from_raw_parts_mut(base.0.add(start), len) };
                gather(c * rows, block);
            }
        });
    } else {
        gather(0, out);
    }
    Ok(())
}

/// Gathers that write at least this many bytes split over the thread pool.
const PARALLEL_COPY_BYTES: usize = 1 << 20;

/// A result's base pointer, shared by the threads that write its disjoint runs.
struct SendMut(*mut u8);
// SAFETY: only used by `take_into`, whose threads write disjoint runs.
unsafe impl Sync for SendMut {}

fn iota_with<T: Pod>(dims: &[usize], dim: usize, dtype: DType, f: impl Fn(usize) -> T) -> Tensor {
    let st = strides(dims);
    let n: usize = dims.iter().product();
    let v: Vec<T> = (0..n)
        .map(|i| f(i / st[dim] as usize % dims[dim]))
        .collect();
    Tensor::from_vec_as(dtype, dims, v)
}

/// `0, 1, 2, ...` along `dim`.
pub fn iota(dtype: DType, dims: &[usize], dim: usize) -> Result<Tensor> {
    Ok(match dtype {
        DType::F16 => iota_with(dims, dim, dtype, |i| {
            half::f16::from_f64(i as f64).to_bits()
        }),
        DType::BF16 => iota_with(dims, dim, dtype, |i| {
            half::bf16::from_f64(i as f64).to_bits()
        }),
        DType::F32 => iota_with(dims, dim, dtype, |i| f32::from_f64(i as f64)),
        DType::F64 => iota_with(dims, dim, dtype, |i| i as f64),
        DType::C64 => iota_with(dims, dim, dtype, |i| Complex32::new(i as f32, 0.0)),
        DType::C128 => iota_with(dims, dim, dtype, |i| Complex64::new(i as f64, 0.0)),
        // Iota needs a numeric dtype (the type checker rejects the rest):
        // with_int!'s `else` gives the error.
        DType::Bool | DType::String | int_dtypes!() => {
            with_int!(dtype, T => iota_with(dims, dim, dtype, T::from_usize),
            else => return Err(Error::invalid(format!("iota is not defined on {dtype}"))))
        }
    })
}

/// The start indices of `dynamic_slice`/`dynamic_update_slice`: one scalar
/// integer per dim, each clamped to `[0, dims[d] - sizes[d]]` (XLA).
fn clamped_starts(
    op: &str,
    starts: &[&Tensor],
    dims: &[usize],
    sizes: &[usize],
) -> Result<Vec<usize>> {
    if starts.len() != dims.len() {
        return Err(Error::invalid(format!(
            "{op}: {} start indices for an operand of rank {}",
            starts.len(),
            dims.len()
        )));
    }
    let mut out = Vec::with_capacity(dims.len());
    for (d, t) in starts.iter().enumerate() {
        let dt = t.dtype();
        let v: i128 = with_int!(dt, T => match t.view::<T>()? {
            [v] if t.rank() == 0 => v.to_i128(),
            _ => return Err(Error::invalid(format!(
                "{op}: start index {d} must be a scalar, got shape {:?}",
                t.shape()
            ))),
        }, else => return Err(Error::invalid(format!(
            "{op}: start index {d} must be an integer, got {dt}"
        ))));
        let Some(room) = dims[d].checked_sub(sizes[d]) else {
            return Err(Error::invalid(format!(
                "{op}: size {} is larger than dim {d} of size {}",
                sizes[d], dims[d]
            )));
        };
        out.push(v.clamp(0, room as i128) as usize);
    }
    Ok(out)
}

/// XLA `dynamic_slice`: the block of `sizes` at `starts` (clamped so that
/// it lies inside `x`).
pub fn dynamic_slice(x: &Tensor, starts: &[&Tensor], sizes: &[usize]) -> Result<Tensor> {
    if sizes.len() != x.rank() {
        return Err(Error::invalid(format!(
            "dynamic_slice: {} sizes for an operand of rank {}",
            sizes.len(),
            x.rank()
        )));
    }
    let at = clamped_starts("dynamic_slice", starts, x.shape(), sizes)?;
    let xs = strides(x.shape());
    let offset = if sizes.contains(&0) {
        0
    } else {
        at.iter().zip(&xs).map(|(&a, &s)| a as isize * s).sum()
    };
    strided_gather(x, sizes, offset, &xs)
}

/// Calls `f(x_offset, u_offset)` for each contiguous row of a block of
/// `block` dims placed at `at` inside a tensor of `dims`: the offsets (in
/// elements) where the row starts in the tensor and in the block.
fn for_each_block_row(
    dims: &[usize],
    block: &[usize],
    at: &[usize],
    mut f: impl FnMut(usize, usize),
) {
    if block.contains(&0) {
        return;
    }
    let rank = dims.len();
    if rank == 0 {
        f(0, 0);
        return;
    }
    let xs = strides(dims);
    let inner = block[rank - 1];
    let mut idx = vec![0usize; rank - 1];
    let mut u = 0;
    loop {
        let x: usize = (0..rank)
            .map(|d| (at[d] + idx.get(d).copied().unwrap_or(0)) * xs[d] as usize)
            .sum();
        f(x, u);
        u += inner;
        let mut d = rank - 1;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < block[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// XLA `dynamic_update_slice`: `x` with the block at `starts` (clamped so
/// that `update` fits) replaced by `update`.
pub fn dynamic_update_slice(x: &Tensor, update: &Tensor, starts: &[&Tensor]) -> Result<Tensor> {
    if update.rank() != x.rank() || update.dtype() != x.dtype() {
        return Err(Error::invalid(format!(
            "dynamic_update_slice: update {}{:?} does not match operand {}{:?} in dtype and rank",
            update.dtype(),
            update.shape(),
            x.dtype(),
            x.shape()
        )));
    }
    let at = clamped_starts("dynamic_update_slice", starts, x.shape(), update.shape())?;
    with_size!(x.dtype().size(), T => {
        let mut out: Vec<T> = x.view::<T>()?.to_vec();
        let src = update.view::<T>()?;
        let inner = update.shape().last().copied().unwrap_or(1);
        for_each_block_row(x.shape(), update.shape(), &at, |o, u| {
            out[o..o + inner].copy_from_slice(&src[u..u + inner]);
        });
        Ok(Tensor::from_vec_as(x.dtype(), x.shape(), out))
    })
}

/// [`dynamic_update_slice`] written into `x`'s own buffer when nothing
/// else references it (the interpreter passes a value at its last use: a
/// loop carry updated row by row stays one buffer), else into a copy.
pub fn dynamic_update_slice_owned(
    x: Tensor,
    update: &Tensor,
    starts: &[&Tensor],
) -> Result<Tensor> {
    if x.dtype() == tensorlift_ir::DType::String
        || update.rank() != x.rank()
        || update.dtype() != x.dtype()
    {
        return dynamic_update_slice(&x, update, starts);
    }
    let at = clamped_starts("dynamic_update_slice", starts, x.shape(), update.shape())?;
    let (dtype, shape) = (x.dtype(), x.shape().to_vec());
    let mut bytes = match x.into_unique_bytes() {
        Ok(b) => b,
        Err(shared) => return dynamic_update_slice(&shared, update, starts),
    };
    let es = dtype.size();
    let inner = update.shape().last().copied().unwrap_or(1) * es;
    let src = update.bytes();
    let dst = bytes.as_mut_slice();
    for_each_block_row(&shape, update.shape(), &at, |o, u| {
        dst[o * es..o * es + inner].copy_from_slice(&src[u * es..u * es + inner]);
    });
    Tensor::from_aligned(dtype, &shape, bytes)
}

/// [`dynamic_slice`] of the bytes of an operand of `dtype` and `dims`,
/// written into `out` (the block's bytes): what the JIT runs, reading the
/// operand where it lies instead of copying it into a tensor first.
pub fn slice_into(
    out: &mut [u8],
    src: &[u8],
    dtype: tensorlift_ir::DType,
    dims: &[usize],
    sizes: &[usize],
    starts: &[&Tensor],
) -> Result<()> {
    if sizes.len() != dims.len() {
        return Err(Error::invalid(format!(
            "dynamic_slice: {} sizes for an operand of rank {}",
            sizes.len(),
            dims.len()
        )));
    }
    let at = clamped_starts("dynamic_slice", starts, dims, sizes)?;
    let size = dtype.size();
    if sizes.contains(&0) {
        return Ok(());
    }
    if src.len() != dims.iter().product::<usize>() * size
        || out.len() != sizes.iter().product::<usize>() * size
    {
        return Err(Error::internal("dynamic_slice: buffer sizes"));
    }
    let inner = sizes.last().copied().unwrap_or(1) * size;
    for_each_block_row(dims, sizes, &at, |o, u| {
        out[u * size..u * size + inner].copy_from_slice(&src[o * size..o * size + inner]);
    });
    Ok(())
}

/// The row-major element offset in an operand of `dims` of the block of
/// `sizes` at the clamped `starts` of a dynamic slice (`op`): where the
/// JIT reads a block that is one contiguous run in place.
pub fn block_offset(
    op: &str,
    dims: &[usize],
    sizes: &[usize],
    starts: &[&Tensor],
) -> Result<usize> {
    if sizes.len() != dims.len() {
        return Err(Error::invalid(format!(
            "{op}: {} sizes for an operand of rank {}",
            sizes.len(),
            dims.len()
        )));
    }
    let at = clamped_starts(op, starts, dims, sizes)?;
    let (mut offset, mut stride) = (0usize, 1usize);
    for d in (0..dims.len()).rev() {
        offset += at[d] * stride;
        stride *= dims[d];
    }
    Ok(offset)
}

/// [`dynamic_update_slice`] in place: writes `update` into `out` (the
/// bytes of an operand of `dtype` and `dims`) at the clamped `starts`; the
/// rest of `out` is left as it is. What the JIT runs when the operand's
/// buffer is not read afterwards.
pub fn update_slice_into(
    out: &mut [u8],
    dtype: tensorlift_ir::DType,
    dims: &[usize],
    update: &Tensor,
    starts: &[&Tensor],
) -> Result<()> {
    if update.rank() != dims.len() || update.dtype() != dtype {
        return Err(Error::invalid(format!(
            "dynamic_update_slice: update {}{:?} does not match operand {dtype}{dims:?} in dtype and rank",
            update.dtype(),
            update.shape(),
        )));
    }
    let at = clamped_starts("dynamic_update_slice", starts, dims, update.shape())?;
    let size = dtype.size();
    if out.len() != dims.iter().product::<usize>() * size {
        return Err(Error::internal("dynamic_update_slice: operand buffer size"));
    }
    let src = update.bytes();
    let inner = update.shape().last().copied().unwrap_or(1) * size;
    for_each_block_row(dims, update.shape(), &at, |o, u| {
        out[o * size..o * size + inner].copy_from_slice(&src[u * size..u * size + inner]);
    });
    Ok(())
}

/// An index [`indices_in_range`] gives for one outside the dim: skipped.
const SKIP: usize = usize::MAX;

/// Indices of an integer tensor as positions along a dim of size `n`;
/// [`SKIP`] for those outside `[0, n)` (which `scatter` skips). What the
/// scatter of strings and of indices other than i32/i64 reads (those two
/// are read in place, [`ScatterIndex`]).
fn indices_in_range(idx: &TensorRef<'_>, n: usize) -> Result<Vec<usize>> {
    let d = idx.dtype();
    // (Compared as i128: exact for every integer dtype.)
    with_int!(d, T => Ok(words::<T>(idx.bytes()).iter().map(|v| {
        let v = v.to_i128();
        if (0..n as i128).contains(&v) { v as usize } else { SKIP }
    }).collect()), else => Err(Error::invalid(format!("scatter indices must be integers, got {d}"))))
}

/// `bytes` as elements of `T`: borrowed when aligned for `T` (buffers and
/// slots always are), else copied.
fn words<T: Pod>(bytes: &[u8]) -> std::borrow::Cow<'_, [T]> {
    match bytemuck::try_cast_slice(bytes) {
        Ok(w) => std::borrow::Cow::Borrowed(w),
        Err(_) => std::borrow::Cow::Owned(bytemuck::pod_collect_to_vec(bytes)),
    }
}

/// Combines `updates` into `x` along `axis` at `idx` (the inverse of
/// [`take`]); indices outside `[0, n)` are skipped. Updates are applied in
/// row-major order, so for `Set` the last of duplicate indices wins.
pub fn scatter(
    x: &Tensor,
    idx: &Tensor,
    updates: &Tensor,
    axis: usize,
    combiner: Combiner,
) -> Result<Tensor> {
    // The caller keeps `x`: its buffer is shared, so this works on a copy.
    scatter_owned(x.clone(), idx, updates, axis, combiner)
}

/// [`scatter`] into `x`'s own buffer when nothing else references it (the
/// interpreter passes a value at its last use: a loop carry that a scatter
/// updates stays one buffer), else into a copy.
pub fn scatter_owned(
    x: Tensor,
    idx: &Tensor,
    updates: &Tensor,
    axis: usize,
    combiner: Combiner,
) -> Result<Tensor> {
    let (ir, ur) = (idx.as_ref(), updates.as_ref());
    check_scatter(x.dtype(), x.shape(), &ir, &ur, axis)?;
    if x.dtype() == DType::String {
        return scatter_strings(&x, &ir, updates, axis);
    }
    let (dtype, shape) = (x.dtype(), x.shape().to_vec());
    let mut bytes = match x.into_unique_bytes() {
        Ok(b) => b,
        Err(shared) => AlignedBytes::from_slice(shared.bytes()),
    };
    combine_at(
        bytes.as_mut_slice(),
        dtype,
        &shape,
        &ir,
        &ur,
        axis,
        combiner,
    )?;
    Tensor::from_aligned(dtype, &shape, bytes)
}

/// [`scatter`] in place: combines `updates` into `out`, the bytes of an
/// operand of `dtype` and `dims` (not strings), leaving the elements no
/// index addresses as they are. What the JIT runs, in the operand's own
/// buffer when nothing reads it afterwards, else in the result's after
/// copying the operand there; indices and updates are read where they lie.
pub fn scatter_into(
    out: &mut [u8],
    dtype: DType,
    dims: &[usize],
    idx: &TensorRef<'_>,
    updates: &TensorRef<'_>,
    axis: usize,
    combiner: Combiner,
) -> Result<()> {
    check_scatter(dtype, dims, idx, updates, axis)?;
    if dtype == DType::String || out.len() != dims.iter().product::<usize>() * dtype.size() {
        return Err(Error::internal("scatter: operand buffer size"));
    }
    combine_at(out, dtype, dims, idx, updates, axis, combiner)
}

/// Whether `updates` fits an operand of `dtype` and `dims` scattered into
/// along `axis` at indices shaped as `idx`: an error naming all three if not.
fn check_scatter(
    dtype: DType,
    dims: &[usize],
    idx: &TensorRef<'_>,
    updates: &TensorRef<'_>,
    axis: usize,
) -> Result<()> {
    if axis >= dims.len() {
        return Err(Error::invalid(format!(
            "scatter: axis {axis} is out of range for an operand of shape {dims:?}"
        )));
    }
    let mut want = dims[..axis].to_vec();
    want.extend_from_slice(idx.shape());
    want.extend_from_slice(&dims[axis + 1..]);
    if updates.shape() != want.as_slice() || updates.dtype() != dtype {
        return Err(Error::invalid(format!(
            "scatter: updates are {}{:?}, but operand {dtype}{dims:?} and indices {:?} along axis {axis} need {dtype}{want:?}",
            updates.dtype(),
            updates.shape(),
            idx.shape(),
        )));
    }
    Ok(())
}

/// `set` on strings (the only combiner the type checker allows there).
fn scatter_strings(
    x: &Tensor,
    idx: &TensorRef<'_>,
    updates: &Tensor,
    axis: usize,
) -> Result<Tensor> {
    let ids = indices_in_range(idx, x.shape()[axis])?;
    let mut out = x.strings().to_vec();
    let at = Scatter {
        dims: x.shape(),
        ids: &ids,
        axis,
    };
    at.rows(&mut out, updates.strings(), |_, u| u.clone())?;
    Tensor::from_strings(x.shape(), out)
}

/// Combines `updates` (checked against the operand by [`check_scatter`])
/// into `out`, the bytes of an operand of `dtype` (not strings) and `dims`.
fn combine_at(
    out: &mut [u8],
    dtype: DType,
    dims: &[usize],
    idx: &TensorRef<'_>,
    updates: &TensorRef<'_>,
    axis: usize,
    combiner: Combiner,
) -> Result<()> {
    let ups = updates.bytes();
    let d = idx.dtype();
    // i32 and i64 indices are read where they lie, inside the loop; the
    // others are converted first.
    if d == DType::I32 {
        combine_by(
            out,
            dtype,
            dims,
            &words::<i32>(idx.bytes()),
            axis,
            ups,
            combiner,
        )
    } else if d == DType::I64 {
        combine_by(
            out,
            dtype,
            dims,
            &words::<i64>(idx.bytes()),
            axis,
            ups,
            combiner,
        )
    } else {
        let ids = indices_in_range(idx, dims[axis])?;
        combine_by(out, dtype, dims, &ids, axis, ups, combiner)
    }
}

/// [`combine_at`] with the indices `ids` along `axis`.
fn combine_by<I: ScatterIndex>(
    out: &mut [u8],
    dtype: DType,
    dims: &[usize],
    ids: &[I],
    axis: usize,
    ups: &[u8],
    combiner: Combiner,
) -> Result<()> {
    let at = &Scatter { dims, ids, axis };
    match combiner {
        Combiner::Set => with_size!(dtype.size(), T => {
            in_words::<T>(out, |o| at.rows(o, &words::<T>(ups), |_, u| *u))
        }),
        Combiner::Add => combine_with::<AddOp, I>(out, dtype, at, ups),
        Combiner::Min => combine_with::<MinOp, I>(out, dtype, at, ups),
        Combiner::Max => combine_with::<MaxOp, I>(out, dtype, at, ups),
    }
}

/// A combiner's op as a type, so that each combiner's loop is compiled
/// with its op known (the element kernels' `match` on the op folds away).
trait CombineOp {
    const OP: BinaryOp;
}
struct AddOp;
struct MinOp;
struct MaxOp;
impl CombineOp for AddOp {
    const OP: BinaryOp = BinaryOp::Add;
}
impl CombineOp for MinOp {
    const OP: BinaryOp = BinaryOp::Min;
}
impl CombineOp for MaxOp {
    const OP: BinaryOp = BinaryOp::Max;
}

/// [`combine_at`] for the combiners that apply a binary op.
fn combine_with<O: CombineOp, I: ScatterIndex>(
    out: &mut [u8],
    dtype: DType,
    at: &Scatter<'_, I>,
    ups: &[u8],
) -> Result<()> {
    // (`O::OP` at every use, not a local: the closures are compiled with
    // the op as a constant, not a captured value.)
    match dtype {
        // Halves compute in f32 and round after every combination, as every
        // other op on them does.
        DType::F16 | DType::BF16 => {
            type Widen = fn(u16) -> f32;
            type Round = fn(f32) -> u16;
            let (widen, round): (Widen, Round) = if dtype == DType::F16 {
                (
                    |h| half::f16::from_bits(h).to_f32(),
                    |v| half::f16::from_f32(v).to_bits(),
                )
            } else {
                (
                    |h| half::bf16::from_bits(h).to_f32(),
                    |v| half::bf16::from_f32(v).to_bits(),
                )
            };
            in_words::<u16>(out, |o| {
                at.rows(o, &words::<u16>(ups), |a, b| {
                    round(f32::bin(O::OP, widen(a), widen(*b)))
                })
            })
        }
        DType::F32 => in_words::<f32>(out, |o| {
            at.rows(o, &words::<f32>(ups), |a, b| f32::bin(O::OP, a, *b))
        }),
        DType::F64 => in_words::<f64>(out, |o| {
            at.rows(o, &words::<f64>(ups), |a, b| f64::bin(O::OP, a, *b))
        }),
        DType::C64 if O::OP == BinaryOp::Add => {
            in_words::<Complex32>(out, |o| at.rows(o, &words::<Complex32>(ups), |a, b| a + *b))
        }
        DType::C128 if O::OP == BinaryOp::Add => {
            in_words::<Complex64>(out, |o| at.rows(o, &words::<Complex64>(ups), |a, b| a + *b))
        }
        // `min`/`max` need an ordered dtype and `add` a numeric one (the
        // type checker rejects the rest): with_int!'s `else` gives the error.
        DType::Bool | DType::C64 | DType::C128 | DType::String | int_dtypes!() => {
            with_int!(dtype, T => in_words::<T>(out, |o| {
                at.rows(o, &words::<T>(ups), |a, b| T::bin(O::OP, a, *b))
            }),
            else => Err(Error::invalid(format!(
                "scatter combiner {} is not defined on {dtype}",
                O::OP.name()
            ))))
        }
    }
}

/// Runs `f` on `bytes` as elements of `T`: in place when the bytes are
/// aligned for `T` (buffers and slots always are), else on an aligned
/// copy written back afterwards.
fn in_words<T: Pod>(bytes: &mut [u8], f: impl FnOnce(&mut [T]) -> Result<()>) -> Result<()> {
    match bytemuck::try_cast_slice_mut::<u8, T>(bytes) {
        Ok(words) => f(words),
        Err(_) => {
            let mut words: Vec<T> = bytemuck::pod_collect_to_vec(bytes);
            f(&mut words)?;
            bytes.copy_from_slice(bytemuck::cast_slice(&words));
            Ok(())
        }
    }
}

/// A scatter index as its loop reads it: [`ScatterIndex::position`] is
/// the position along the dim, or a value of at least the dim's size for
/// an index outside it (signed values widened to i64 and read as u64, so
/// a negative one is too large: one unsigned comparison per index). i32
/// and i64 indices are read where they lie; others are converted by
/// [`indices_in_range`] ([`SKIP`] outside the dim).
trait ScatterIndex: Copy {
    fn position(self) -> u64;
}

impl ScatterIndex for i32 {
    #[inline(always)]
    fn position(self) -> u64 {
        i64::from(self) as u64
    }
}

impl ScatterIndex for i64 {
    #[inline(always)]
    fn position(self) -> u64 {
        self as u64
    }
}

impl ScatterIndex for usize {
    #[inline(always)]
    fn position(self) -> u64 {
        self as u64
    }
}

/// Where a scatter's updates go: the operand's dims, the axis and the
/// indices along it.
struct Scatter<'a, I> {
    dims: &'a [usize],
    ids: &'a [I],
    axis: usize,
}

impl<I: ScatterIndex> Scatter<'_, I> {
    /// `out[.., ids[j], ..] = f(out[.., ids[j], ..], src[.., j, ..])` for
    /// every in-range index `j`, in row-major order.
    fn rows<T: Clone, U>(&self, out: &mut [T], src: &[U], f: impl Fn(T, &U) -> T) -> Result<()> {
        let (dims, ids, axis) = (self.dims, self.ids, self.axis);
        let n = dims[axis];
        let outer: usize = dims[..axis].iter().product();
        let inner: usize = dims[axis + 1..].iter().product();
        let m = ids.len();
        if out.len() != outer * n * inner || src.len() != outer * m * inner {
            return Err(Error::internal("scatter: buffer sizes"));
        }
        let limit = n as u64;
        if m == 0 || n == 0 || outer == 0 || inner == 0 {
            // No updates, or nowhere to put them (chunks of 0 would panic).
            return Ok(());
        }
        if inner == 1 {
            // One element per index: no row slices to cut.
            for (dst, from) in out.chunks_exact_mut(n).zip(src.chunks_exact(m)) {
                for (j, u) in from.iter().enumerate() {
                    #[cfg(target_arch = "x86_64")]
                    if j + 32 < m {
                        let ahead = ids[j + 32].position();
                        if ahead < limit {
                            // The element 32 updates ahead, fetched while
                            // these wait on theirs (random rows of a table
                            // larger than the L2 cache).
                            // SAFETY: SSE is in every x86_64 CPU; a
                            // prefetch reads nothing the program sees.
                            unsafe {
                                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                                    (&raw const dst[ahead as usize]).cast(),
                                );
                            }
                        }
                    }
                    let k = ids[j].position();
                    if k < limit {
                        let d = &mut dst[k as usize];
                        *d = f(d.clone(), u);
                    }
                }
            }
            return Ok(());
        }
        for o in 0..outer {
            for j in 0..m {
                let k = ids[j].position();
                if k >= limit {
                    continue;
                }
                let k = k as usize;
                let dst = &mut out[(o * n + k) * inner..][..inner];
                let from = &src[(o * m + j) * inner..][..inner];
                for (d, u) in dst.iter_mut().zip(from) {
                    *d = f(d.clone(), u);
                }
            }
        }
        Ok(())
    }
}

/// Reinterprets every element's bytes as dtype `to` (of the same size).
pub fn bitcast_convert(x: &Tensor, to: DType) -> Result<Tensor> {
    let from = x.dtype();
    if from.size() != to.size() || from == DType::String || to == DType::String {
        return Err(Error::invalid(format!(
            "bitcast_convert from {from} to {to}: element sizes differ ({} vs {} bytes)",
            from.size(),
            to.size()
        )));
    }
    Tensor::from_bytes(to, x.shape(), x.bytes())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn i64s(v: &[i64], shape: &[usize]) -> Tensor {
        Tensor::from_vec_as(DType::I64, shape, v.to_vec())
    }

    /// Gathers large enough to split over the pool copy the same rows as
    /// an element-by-element gather, along a leading and a middle axis.
    #[test]
    fn large_takes_gather_the_same_rows_when_split() {
        for (dims, axis, n_ids) in [(vec![4096, 64], 0, 8192), (vec![16, 512, 64], 1, 300)] {
            let len: usize = dims.iter().product();
            let x = i64s(&(0..len as i64).collect::<Vec<_>>(), &dims);
            let ids: Vec<i64> = (0..n_ids as i64)
                .map(|i| (i * 7919 + 13) % dims[axis] as i64)
                .collect();
            let got = take(&x, &i64s(&ids, &[n_ids]), axis).unwrap();
            assert!(got.bytes().len() >= PARALLEL_COPY_BYTES);
            let (outer, inner) = (
                dims[..axis].iter().product::<usize>(),
                dims[axis + 1..].iter().product::<usize>(),
            );
            let n = dims[axis];
            let mut want: Vec<i64> = Vec::new();
            for o in 0..outer {
                for &j in &ids {
                    want.extend((0..inner).map(|e| ((o * n + j as usize) * inner + e) as i64));
                }
            }
            assert_eq!(
                got.view::<i64>().unwrap(),
                want.as_slice(),
                "{dims:?} axis {axis}"
            );
        }
    }

    /// In place, on a copy and through a misaligned buffer (written back
    /// from an aligned copy), a scatter gives the same elements.
    #[test]
    fn scatter_into_matches_scatter_at_any_alignment() {
        let x = i64s(&(0..12).collect::<Vec<_>>(), &[3, 4]);
        let ids = i64s(&[2, 9, 2, -3], &[2, 2]);
        let ups = i64s(&(100..112).collect::<Vec<_>>(), &[3, 2, 2]);
        for combiner in [Combiner::Set, Combiner::Add, Combiner::Min, Combiner::Max] {
            let want = scatter(&x, &ids, &ups, 1, combiner).unwrap();
            let owned = scatter_owned(x.clone(), &ids, &ups, 1, combiner).unwrap();
            assert_eq!(owned.bytes(), want.bytes(), "{combiner:?}");
            let mut raw = vec![0u8; x.bytes().len() + 1];
            for at in [0, 1] {
                let buf = &mut raw[at..at + x.bytes().len()];
                buf.copy_from_slice(x.bytes());
                scatter_into(
                    buf,
                    DType::I64,
                    &[3, 4],
                    &ids.as_ref(),
                    &ups.as_ref(),
                    1,
                    combiner,
                )
                .unwrap();
                assert_eq!(&*buf, want.bytes(), "{combiner:?} at offset {at}");
            }
        }
        // Indices of another integer dtype (converted first) and i32 ones
        // (read in place) scatter alike.
        let ids16 = Tensor::from_vec_as(DType::I16, &[2, 2], vec![2i16, 9, 2, -3]);
        let ids32 = Tensor::from_vec_as(DType::I32, &[2, 2], vec![2i32, 9, 2, -3]);
        for combiner in [Combiner::Set, Combiner::Add, Combiner::Max] {
            let want = scatter(&x, &ids, &ups, 1, combiner).unwrap();
            for other in [&ids16, &ids32] {
                let got = scatter(&x, other, &ups, 1, combiner).unwrap();
                assert_eq!(got.bytes(), want.bytes(), "{combiner:?} {}", other.dtype());
            }
        }
        // Row 0: 0, 1, 2 ← 100 then 102 (Set: the last wins), 3.
        let set = scatter(&x, &ids, &ups, 1, Combiner::Set).unwrap();
        assert_eq!(&set.view::<i64>().unwrap()[..4], &[0, 1, 102, 3]);
        let add = scatter(&x, &ids, &ups, 1, Combiner::Add).unwrap();
        assert_eq!(&add.view::<i64>().unwrap()[..4], &[0, 1, 204, 3]);
        // A wrong buffer or updates shape is an error, not a write.
        let mut short = vec![0u8; 8];
        assert!(
            scatter_into(
                &mut short,
                DType::I64,
                &[3, 4],
                &ids.as_ref(),
                &ups.as_ref(),
                1,
                Combiner::Set
            )
            .is_err()
        );
        let e = scatter(&x, &ids, &i64s(&[1], &[1]), 1, Combiner::Set).unwrap_err();
        assert!(e.to_string().contains("need int64[3, 2, 2]"), "{e}");
    }

    /// Strings take `set` on their own path.
    #[test]
    fn scatter_sets_strings() {
        let x =
            Tensor::from_strings(&[3], vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]).unwrap();
        let u = Tensor::from_strings(&[1], vec![b"z".to_vec()]).unwrap();
        let out = scatter(&x, &i64s(&[1], &[1]), &u, 0, Combiner::Set).unwrap();
        assert_eq!(
            out.strings(),
            &[b"a".to_vec(), b"z".to_vec(), b"c".to_vec()]
        );
    }
}
