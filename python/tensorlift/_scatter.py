"""Gathers and scatters by index tuples, and segment reductions, on the
op table's ``gather`` and ``scatter`` (XLA's scatter along one axis, with
the combiners ``set``, ``add``, ``min`` and ``max``; indices outside the
target skipped; native on every numeric dtype, integers exact;
differentiable). Everything here is index arithmetic around them: index
tuples become row numbers of the target flattened over the dims they
address, and one scatter (or gather) along those rows does the rest."""

import numpy as np

from ._core import EagerTensor, SymbolicTensor, Tensor, apply, convert_to_tensor
from ._ops import (
    broadcast_to,
    cast,
    gather as _take,
    greater_equal,
    less,
    logical_and,
    maximum,
    reduce_all,
    reduce_sum,
    reshape,
    transpose,
    where,
)
from .errors import InvalidArgumentError


def _tensor(x, dtype=None):
    return x if isinstance(x, Tensor) else convert_to_tensor(x, dtype=dtype)


def _static_shape(x, op, what):
    if x.shape is None or None in x.shape:
        raise InvalidArgumentError(
            f"{op}: {what} has shape {None if x.shape is None else list(x.shape)}; {op} needs every dim, "
            "which must be known when traced (declare them in the input_signature)"
        )
    return list(x.shape)


def _int_tensor(x, op, what):
    t = _tensor(x)
    if t.dtype.name not in ("int32", "int64"):
        raise TypeError(f"{op}: {what} must be int32 or int64, not {t.dtype.name}")
    return t


def _static_int(v, op, what):
    """A size the op needs while tracing (``num_segments``, a shape entry)."""
    if isinstance(v, SymbolicTensor):
        raise TypeError(
            f"{op}: {what} is a tensor of the traced function, whose value is known only when it runs; "
            f"{op} needs it while tracing (its result's shape): it must be known when traced (pass a Python "
            "int or a static argument)"
        )
    if isinstance(v, Tensor):
        if v.shape != () or not v.dtype.is_integer:
            raise InvalidArgumentError(f"{op}: {what} must be an integer scalar, got {v!r}")
        v = v.numpy().item()
    if isinstance(v, np.integer):
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{op}: {what} must be an int, not {v!r}")
    if v < 0:
        raise InvalidArgumentError(f"{op}: {what} must be >= 0, got {v}")
    return v


def _prod(dims):
    return int(np.prod(dims, dtype=np.int64))


# --- scatter ----------------------------------------------------------------------------


def _scatter(target, indices, updates, combiner):
    """``target`` (``[n, ...]``) with each ``updates[j...]`` combined into
    row ``indices[j...]``; rows outside ``[0, n)`` are skipped."""
    return apply("scatter", [target, indices, updates], {"axis": 0, "combiner": combiner})


def _scatter_add_rows(n, indices, updates):
    """Zeros of shape ``[n, *updates.shape[indices.ndim:]]`` with each
    ``updates[j...]`` added at row ``indices[j...]`` (rows outside ``[0,
    n)`` skipped)."""
    d = updates.dtype
    if d.is_bool or not (d.is_floating or d.is_integer or d.is_complex):
        raise TypeError(f"scatter-add of a {d.name} tensor: the values must be numeric")
    rest = list(updates.shape[len(indices.shape):])
    zeros = broadcast_to(convert_to_tensor(np.zeros((), d.as_numpy_dtype)), [n, *rest])
    return _scatter(zeros, indices, updates, "add")


# --- index tuples ---------------------------------------------------------------------


def _flat_index(indices, dims, op, oob="minus_one"):
    """``indices[..., :d]`` (tuples into ``dims[:d]``) as row numbers of
    ``dims`` flattened over its first ``d`` dims; a tuple with an entry
    outside its dim is -1. Eager indices out of range are an
    ``InvalidArgumentError`` (TensorFlow's CPU kernels)."""
    d = indices.shape[-1]
    if isinstance(indices, EagerTensor):
        v = indices.numpy().reshape(-1, d) if d else np.zeros((0, 0), np.int64)
        bad = (v < 0) | (v >= np.asarray(dims[:d]))
        if bad.any():
            row = int(np.nonzero(bad.any(axis=1))[0][0])
            raise InvalidArgumentError(
                f"{op}: index {v[row].tolist()} (row {row} of the indices) does not address the shape "
                f"{dims[:d]} ({'out of range' if oob == 'minus_one' else oob})"
            )
    total = _prod(dims[:d])
    dt = "int64" if total >= 2**31 - 1 or indices.dtype.name == "int64" else "int32"
    idx = cast(indices, dt)
    strides = np.array([_prod(dims[i + 1:d]) for i in range(d)], dtype=dt)
    flat = reduce_sum(idx * convert_to_tensor(strides), axis=-1)
    inside = logical_and(
        greater_equal(idx, convert_to_tensor(0, dtype=dt)),
        less(idx, convert_to_tensor(np.array(dims[:d], dtype=dt))),
    )
    return where(reduce_all(inside, axis=-1), flat, convert_to_tensor(-1, dtype=dt)), total


def gather_nd(params, indices, batch_dims=0, name=None):
    """``tf.gather_nd``: ``indices[..., :]`` are index tuples into the
    leading dims of ``params`` (after ``batch_dims`` batch dims they share);
    the result has shape ``indices.shape[:-1] + params.shape[batch_dims +
    indices.shape[-1]:]``. A tuple out of range is an
    ``InvalidArgumentError`` (eagerly at once; traced, when it runs)."""
    op = "gather_nd"
    params = _tensor(params)
    indices = _int_tensor(indices, op, "indices")
    pshape = _static_shape(params, op, "params")
    ishape = _static_shape(indices, op, "indices")
    b = _static_int(batch_dims, op, "batch_dims")
    if len(ishape) < 1:
        raise InvalidArgumentError(f"{op}: indices must have rank >= 1, got a scalar")
    if b >= len(ishape) or b > len(pshape):
        raise InvalidArgumentError(
            f"{op}: batch_dims {b} must be less than the rank of indices ({len(ishape)}) and at most the rank "
            f"of params ({len(pshape)})"
        )
    if pshape[:b] != ishape[:b]:
        raise InvalidArgumentError(f"{op}: the batch dims of params {pshape[:b]} and indices {ishape[:b]} differ")
    d = ishape[-1]
    inner = pshape[b:]
    if d > len(inner):
        raise InvalidArgumentError(
            f"{op}: index tuples of length {d} into params of shape {pshape} past {b} batch dim(s) "
            f"(at most {len(inner)})"
        )
    flat, rows = _flat_index(indices, inner, op)
    batch = _prod(pshape[:b])
    if b:
        # Each batch element's rows follow the previous one's.
        offsets = np.arange(batch, dtype=flat.dtype.as_numpy_dtype).reshape(ishape[:b] + [1] * (len(ishape) - 1 - b))
        flat = where(less(flat, convert_to_tensor(0, dtype=flat.dtype)), flat, flat + convert_to_tensor(offsets * rows))
    table = reshape(params, [batch * rows, *inner[d:]])
    return _take(table, flat, axis=0)


def scatter_nd(indices, updates, shape, name=None):
    """``tf.scatter_nd``: zeros of ``shape`` with each ``updates[j...]``
    added at the index tuple ``indices[j..., :]`` (duplicates add up, as in
    TensorFlow). An eager index out of range is an ``InvalidArgumentError``
    (TensorFlow's CPU kernel); traced, it is skipped (its GPU kernel)."""
    op = "scatter_nd"
    dims = [_static_int(d, op, "shape entry") for d in (shape.numpy().tolist() if isinstance(shape, EagerTensor)
                                                         else _seq(shape, op))]
    updates = _tensor(updates)
    return _scatter_into(op, None, dims, indices, updates)


def _seq(shape, op):
    if isinstance(shape, SymbolicTensor):
        raise TypeError(f"{op}: the shape is a tensor of the traced function; it must be known when traced")
    return list(np.asarray(shape).reshape(-1).tolist()) if not isinstance(shape, (list, tuple)) else list(shape)


def _check_updates(op, indices, updates, dims):
    ishape = _static_shape(indices, op, "indices")
    ushape = _static_shape(updates, op, "updates")
    if len(ishape) < 1:
        raise InvalidArgumentError(f"{op}: indices must have rank >= 1, got a scalar")
    d = ishape[-1]
    if d > len(dims):
        raise InvalidArgumentError(f"{op}: index tuples of length {d} into a tensor of rank {len(dims)}")
    want = ishape[:-1] + dims[d:]
    if ushape != want:
        raise InvalidArgumentError(
            f"{op}: updates must have shape indices.shape[:-1] + shape[{d}:] = {want}, got {ushape}"
        )
    return d


def _scatter_into(op, tensor, dims, indices, updates, combiner="add"):
    """``updates`` added into zeros of ``dims`` (``tensor`` None), or
    combined into ``tensor``: one scatter along the flat rows of the index
    tuples."""
    indices = _int_tensor(indices, op, "indices")
    d = _check_updates(op, indices, updates, dims)
    flat, rows = _flat_index(indices, dims, op)
    m = _prod(list(flat.shape))
    rest = dims[d:]
    flat, updates = reshape(flat, [m]), reshape(updates, [m, *rest])
    if tensor is None:
        return reshape(_scatter_add_rows(rows, flat, updates), dims)
    t = tensor.dtype
    if combiner == "set":
        pass  # any dtype; of duplicates the last wins (its gradient too)
    elif t.is_bool or not (t.is_floating or t.is_integer or (t.is_complex and combiner == "add")):
        raise TypeError(f"{op}: the values must be {'numeric' if combiner == 'add' else 'real'}, not {t.name}")
    return reshape(_scatter(reshape(tensor, [rows, *rest]), flat, updates, combiner), dims)


def _tensor_and_updates(op, tensor, updates):
    tensor = _tensor(tensor)
    updates = _tensor(updates, dtype=tensor.dtype)
    if updates.dtype != tensor.dtype:
        raise TypeError(f"{op}: updates are {updates.dtype.name} but the tensor is {tensor.dtype.name}")
    return tensor, updates, _static_shape(tensor, op, "tensor")


def tensor_scatter_nd_add(tensor, indices, updates, name=None):
    """``tf.tensor_scatter_nd_add``: ``tensor`` with each update added at
    its index tuple (duplicates add up)."""
    op = "tensor_scatter_nd_add"
    tensor, updates, dims = _tensor_and_updates(op, tensor, updates)
    return _scatter_into(op, tensor, dims, indices, updates)


def tensor_scatter_nd_sub(tensor, indices, updates, name=None):
    """``tf.tensor_scatter_nd_sub``: ``tensor`` with each update subtracted
    at its index tuple."""
    op = "tensor_scatter_nd_sub"
    tensor, updates, dims = _tensor_and_updates(op, tensor, updates)
    return _scatter_into(op, tensor, dims, indices, -updates)


def tensor_scatter_nd_update(tensor, indices, updates, name=None):
    """``tf.tensor_scatter_nd_update``: ``tensor`` with the element (or
    slice) at each index tuple replaced by its update; of duplicates, the
    last update wins, as TensorFlow's CPU kernel has it. The gradient
    reaches the tensor where nothing replaced it, and the winning
    updates."""
    op = "tensor_scatter_nd_update"
    tensor, updates, dims = _tensor_and_updates(op, tensor, updates)
    return _scatter_into(op, tensor, dims, indices, updates, "set")


def tensor_scatter_nd_max(tensor, indices, updates, name=None):
    """``tf.tensor_scatter_nd_max``: ``tensor`` with each element at an
    index tuple the maximum of itself and the updates landing there (a NaN
    among them gives NaN). The gradient is split equally among the tied
    maxima, the tensor's element included, as in TensorFlow."""
    op = "tensor_scatter_nd_max"
    tensor, updates, dims = _tensor_and_updates(op, tensor, updates)
    return _scatter_into(op, tensor, dims, indices, updates, "max")


def tensor_scatter_nd_min(tensor, indices, updates, name=None):
    """``tf.tensor_scatter_nd_min``: as ``tensor_scatter_nd_max``, the minimum."""
    op = "tensor_scatter_nd_min"
    tensor, updates, dims = _tensor_and_updates(op, tensor, updates)
    return _scatter_into(op, tensor, dims, indices, updates, "min")


# --- segment reductions ---------------------------------------------------------------


def _segment_args(op, data, segment_ids):
    data = _tensor(data)
    ids = _int_tensor(segment_ids, op, "segment_ids")
    dshape = _static_shape(data, op, "data")
    ishape = _static_shape(ids, op, "segment_ids")
    if dshape[:len(ishape)] != ishape:
        raise InvalidArgumentError(
            f"{op}: segment_ids of shape {ishape} must be a prefix of the data's shape {dshape}"
        )
    n = _prod(ishape)
    rest = dshape[len(ishape):]
    return reshape(data, [n, *rest]), reshape(ids, [n]), rest


def _check_ids(op, ids, num, sorted_=False):
    """Eager ids: TensorFlow's CPU checks (an id past ``num_segments``;
    for the sorted forms, ids that decrease or are negative)."""
    if not isinstance(ids, EagerTensor):
        return
    v = ids.numpy()
    if sorted_:
        # (First: with ids out of order, the count taken from the last id
        # is what is wrong, not the id past it.)
        if v.size and v.min() < 0:
            raise InvalidArgumentError(f"{op}: segment ids must be >= 0, got {int(v.min())}")
        if v.size > 1 and (np.diff(v.reshape(-1)) < 0).any():
            raise InvalidArgumentError(f"{op}: segment ids are not sorted (increasing): {v.tolist()[:16]}")
    if v.size and v.max() >= num:
        raise InvalidArgumentError(f"{op}: segment id {int(v.max())} is out of range [0, {num})")


def _num_of_sorted(op, segment_ids):
    """The sorted forms' number of segments, ``ids[-1] + 1``: it is the
    result's first dim, so the ids must be known when the op is traced."""
    ids = _int_tensor(segment_ids, op, "segment_ids")
    if isinstance(ids, SymbolicTensor):
        raise InvalidArgumentError(
            f"{op}: segment_ids are a tensor of the traced function: the number of segments (ids[-1] + 1, "
            f"the result's first dim) must be known when traced; use tl.math.unsorted_{op} with a Python "
            "int num_segments"
        )
    v = ids.numpy().reshape(-1)
    return int(v[-1]) + 1 if v.size else 0


def unsorted_segment_sum(data, segment_ids, num_segments, name=None):
    """``tf.math.unsorted_segment_sum``: ``out[s] = sum(data[j] for segment_ids[j]
    == s)``, shape ``[num_segments] + data.shape[segment_ids.ndim:]``;
    negative ids are dropped (as in TensorFlow); an id past
    ``num_segments`` is an error eagerly and dropped when traced."""
    op = "unsorted_segment_sum"
    num = _static_int(num_segments, op, "num_segments")
    flat_data, ids, rest = _segment_args(op, data, segment_ids)
    _check_ids(op, ids, num)
    return _scatter_add_rows(num, ids, flat_data)


def _counts(ids, num, like_rest, dtype):
    ones = convert_to_tensor(np.ones(ids.shape[0], dtype.as_numpy_dtype))
    c = _scatter_add_rows(num, ids, ones)
    return reshape(c, [num] + [1] * len(like_rest))


def unsorted_segment_mean(data, segment_ids, num_segments, name=None):
    """``tf.math.unsorted_segment_mean``: the mean of each segment (0 for
    an empty one); floating data."""
    op = "unsorted_segment_mean"
    num = _static_int(num_segments, op, "num_segments")
    flat_data, ids, rest = _segment_args(op, data, segment_ids)
    if not flat_data.dtype.is_floating:
        raise TypeError(f"{op}: data must be floating-point, not {flat_data.dtype.name}")
    _check_ids(op, ids, num)
    total = _scatter_add_rows(num, ids, flat_data)
    count = _counts(ids, num, rest, flat_data.dtype)
    return total / maximum(count, convert_to_tensor(1, dtype=count.dtype))


def _real(op, dtype):
    if dtype.is_bool or not (dtype.is_floating or dtype.is_integer):
        raise TypeError(f"{op}: data must be numeric, not {dtype.name}")
    return dtype


def _identity(dtype, take_max):
    """The identity of max (the dtype's lowest value, -inf for floats) or
    of min (the highest, inf), a NumPy scalar."""
    np_dtype = dtype.as_numpy_dtype
    if dtype.is_floating:
        return np_dtype(-np.inf if take_max else np.inf)
    info = np.iinfo(np_dtype)
    return np_dtype(info.min if take_max else info.max)


def _segment_extreme(op, data, ids, num, take_max, fill=None):
    """The maximum (``take_max``) or minimum of each of ``num`` segments of
    the rows of ``data`` (``[n, ...]``) by ``ids`` (``[n]``, ids outside
    ``[0, num)`` skipped): one scatter-max (-min) into the max's (min's)
    identity, or into ``fill`` (``[num]``) where given. Its gradient is
    split equally among the rows tied for a segment's extreme."""
    d = _real(op, data.dtype)
    rest = list(data.shape[1:])
    if fill is None:
        start = np.full([num] + [1] * len(rest), _identity(d, take_max))
    else:
        start = np.asarray(fill, d.as_numpy_dtype).reshape([num] + [1] * len(rest))
    target = broadcast_to(convert_to_tensor(start), [num, *rest])
    return _scatter(target, ids, data, "max" if take_max else "min")


def unsorted_segment_max(data, segment_ids, num_segments, name=None):
    """``tf.math.unsorted_segment_max``: the maximum of each segment; an
    empty segment gets the lowest value of the dtype (-inf for floats, where
    TensorFlow gives the lowest finite one)."""
    op = "unsorted_segment_max"
    num = _static_int(num_segments, op, "num_segments")
    flat_data, ids, rest = _segment_args(op, data, segment_ids)
    _check_ids(op, ids, num)
    return _segment_extreme(op, flat_data, ids, num, True)


def unsorted_segment_min(data, segment_ids, num_segments, name=None):
    """``tf.math.unsorted_segment_min``: the minimum of each segment; an
    empty segment gets the highest value of the dtype (inf for floats)."""
    op = "unsorted_segment_min"
    num = _static_int(num_segments, op, "num_segments")
    flat_data, ids, rest = _segment_args(op, data, segment_ids)
    _check_ids(op, ids, num)
    return _segment_extreme(op, flat_data, ids, num, False)


def _sorted_form(op, data, segment_ids, reduce):
    num = _num_of_sorted(op, segment_ids)
    flat_data, ids, rest = _segment_args(op, data, segment_ids)
    _check_ids(op, ids, num, sorted_=True)
    return reduce(flat_data, ids, num, rest)


def segment_sum(data, segment_ids, name=None):
    """``tf.math.segment_sum``: sums of segments of sorted ``segment_ids``
    (known when traced: their last entry + 1 is the number of segments);
    an empty segment sums to 0."""
    return _sorted_form("segment_sum", data, segment_ids, lambda d, i, n, r: _scatter_add_rows(n, i, d))


def segment_mean(data, segment_ids, name=None):
    """``tf.math.segment_mean``: means of segments (0 for an empty one)."""
    def mean(d, i, n, r):
        if not d.dtype.is_floating:
            raise TypeError(f"segment_mean: data must be floating-point, not {d.dtype.name}")
        c = _counts(i, n, r, d.dtype)
        return _scatter_add_rows(n, i, d) / maximum(c, convert_to_tensor(1, dtype=c.dtype))

    return _sorted_form("segment_mean", data, segment_ids, mean)


def _sorted_extreme(op, take_max):
    def reduce(d, i, n, r):
        # The ids are eager (sorted forms): an empty segment, 0 in
        # TensorFlow's sorted forms, starts at 0, the others at the identity.
        fill = np.full([n], _identity(_real(op, d.dtype), take_max))
        fill[np.bincount(i.numpy(), minlength=n) == 0] = 0
        return _segment_extreme(op, d, i, n, take_max, fill)

    return reduce


def segment_max(data, segment_ids, name=None):
    """``tf.math.segment_max``: maxima of segments of sorted ids (0 for an
    empty segment, as in TensorFlow)."""
    return _sorted_form("segment_max", data, segment_ids, _sorted_extreme("segment_max", True))


def segment_min(data, segment_ids, name=None):
    """``tf.math.segment_min``: minima of segments of sorted ids (0 for an
    empty segment)."""
    return _sorted_form("segment_min", data, segment_ids, _sorted_extreme("segment_min", False))


# --- gather with batch dims -------------------------------------------------------------


def gather(params, indices, axis=None, batch_dims=0, name=None):
    """``tf.gather``: slices of ``params`` along ``axis`` at ``indices``;
    with ``batch_dims`` ``b``, the first ``b`` dims of ``params`` and
    ``indices`` are batch dims they share (each batch element gathers from
    its own slice; ``axis`` defaults to ``b``)."""
    from . import _ops

    params = _tensor(params)
    indices = _tensor(indices)
    if not batch_dims:
        return _ops.gather(params, indices, axis=axis)
    op = "gather"
    if not indices.dtype.is_integer:
        raise TypeError(f"{op}: indices must be integers, not {indices.dtype.name}")
    pshape = _static_shape(params, op, "params")
    ishape = _static_shape(indices, op, "indices")
    b = batch_dims
    if isinstance(b, bool) or not isinstance(b, (int, np.integer)):
        raise TypeError(f"{op}: batch_dims must be an int, not {b!r}")
    b = int(b)
    if b < 0:
        b += len(ishape)
    if not 0 <= b <= len(ishape):
        raise InvalidArgumentError(f"{op}: batch_dims {batch_dims} is out of range for indices of rank {len(ishape)}")
    axis = b if axis is None else int(axis)
    if axis < 0:
        axis += len(pshape)
    if not b <= axis < len(pshape):
        raise InvalidArgumentError(
            f"{op}: axis {axis} must be in [batch_dims, rank of params) = [{b}, {len(pshape)})"
        )
    if pshape[:b] != ishape[:b]:
        raise InvalidArgumentError(f"{op}: the batch dims of params {pshape[:b]} and indices {ishape[:b]} differ")
    if b == 0:
        return _ops.gather(params, indices, axis=axis)
    nb = _prod(pshape[:b])
    pre, n, post = pshape[b:axis], pshape[axis], pshape[axis + 1:]
    inner = ishape[b:]
    # [nb, pre, n, post] -> [nb, n, pre, post] -> rows [nb * n, pre, post]
    x = reshape(params, [nb, *pre, n, *post])
    perm = [0, 1 + len(pre)] + [1 + i for i in range(len(pre))] + [2 + len(pre) + i for i in range(len(post))]
    x = reshape(transpose(x, perm), [nb * n, *pre, *post])
    dt = "int64" if nb * n >= 2**31 - 1 else indices.dtype.name
    idx = cast(reshape(indices, [nb, *inner]), dt)
    if isinstance(indices, EagerTensor):
        v = indices.numpy()
        if v.size and (v.min() < 0 or v.max() >= n):
            raise InvalidArgumentError(f"{op}: index {int(v.min() if v.min() < 0 else v.max())} is not in [0, {n})")
    inside = logical_and(greater_equal(idx, convert_to_tensor(0, dtype=dt)), less(idx, convert_to_tensor(n, dtype=dt)))
    offsets = convert_to_tensor(np.arange(nb, dtype=dt).reshape([nb] + [1] * len(inner)) * n)
    flat = where(inside, idx + offsets, convert_to_tensor(-1, dtype=dt))
    y = _ops.gather(x, flat, axis=0)  # [nb, inner, pre, post]
    r = len(inner)
    perm = [0] + [1 + r + i for i in range(len(pre))] + [1 + i for i in range(r)] + \
        [1 + r + len(pre) + i for i in range(len(post))]
    y = transpose(y, perm)
    return reshape(y, [*pshape[:b], *pre, *inner, *post])


__all__ = [
    "gather", "gather_nd", "scatter_nd", "segment_max", "segment_mean", "segment_min", "segment_sum",
    "tensor_scatter_nd_add", "tensor_scatter_nd_max", "tensor_scatter_nd_min", "tensor_scatter_nd_sub",
    "tensor_scatter_nd_update", "unsorted_segment_max", "unsorted_segment_mean", "unsorted_segment_min",
    "unsorted_segment_sum",
]
