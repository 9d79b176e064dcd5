"""Gathers and scatters by index tuples, and segment reductions, built from
the core ops.

The op table has ``gather`` but no scatter: a scatter-add is built as what
it is, the transpose of a gather — the reverse-mode derivative of
``gather`` (``_native.vjp``), which the compiler emits as its ``scatter``
op with the ``add`` combiner (``O(updates)``, indices outside the target
skipped as XLA's scatter skips them). Everything else (``gather_nd``,
``scatter_nd``, the ``tensor_scatter_nd_*`` ops, segment sums and means) is
index arithmetic around it, so it traces, compiles and differentiates as
the core ops do. Segment maxima and minima are a segmented log-step scan
over the elements sorted by segment (see ``_segment_extreme``)."""

import numpy as np

from . import _core, _native
from ._core import EagerTensor, SymbolicTensor, Tensor, apply, convert_to_tensor, site
from ._ops import (
    broadcast_to,
    cast,
    equal,
    gather as _take,
    greater,
    greater_equal,
    less,
    logical_and,
    maximum,
    minimum,
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
            f"{op}: {what} has shape {None if x.shape is None else list(x.shape)}; {op} needs every dim "
            "known (declare them in the input_signature)"
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
            f"{op} needs it while tracing (its result's shape): pass a Python int (or a static argument)"
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


# --- scatter-add: the transpose of gather ------------------------------------------

_EAGER = {}


def _scatter_add_rows(n, indices, updates):
    """Zeros of shape ``[n, *updates.shape[indices.ndim:]]`` with each
    ``updates[j...]`` added at row ``indices[j...]``; rows outside ``[0, n)``
    are skipped. Recorded on gradient tapes as one op (its gradient
    with respect to ``updates`` is a gather).

    A gather's derivative exists for floats only: integers are added as
    float64, exact for up to 2^21 updates to one row (int64 in two 32-bit
    halves, wrapping as int64 addition does)."""
    d = updates.dtype
    if d.is_integer:
        if d.as_numpy_dtype().itemsize <= 4:
            return cast(_scatter_add_rows(n, indices, cast(updates, "float64")), d)
        if d.name not in ("int64", "uint64"):
            raise TypeError(f"scatter-add of {d.name}")
        two32 = convert_to_tensor(2**32, dtype="int64")
        wide = cast(updates, "int64")
        low = wide % two32  # (floormod: in [0, 2^32))
        high = (wide - low) // two32
        parts = [cast(_scatter_add_rows(n, indices, cast(p, "float64")), "int64") for p in (low, high)]
        return cast(parts[0] + parts[1] * two32, d)
    if not d.is_floating:
        raise TypeError(f"scatter-add of a {d.name} tensor: the values must be numeric")
    if isinstance(indices, SymbolicTensor) or isinstance(updates, SymbolicTensor):
        out = _scatter_add_traced(n, indices, updates)
    else:
        fn = _EAGER.get(n)
        if fn is None:
            if len(_EAGER) >= 256:
                _EAGER.clear()

            def body(syms, n=n):
                i, u = (SymbolicTensor(s) for s in syms)
                return [_scatter_add_traced(n, i, u)._s]

            fn = _EAGER[n] = _native.Function(body, "scatter_add", site(), False, None)
        out = EagerTensor(fn([indices._v, updates._v])[0])
    _core.record(lambda xs, n=n: [_scatter_add_rows(n, xs[0], xs[1])], [indices, updates], [out])
    return out


def _scatter_add_traced(n, indices, updates):
    where_ = site()
    like = next(x._s for x in (indices, updates) if isinstance(x, SymbolicTensor))
    rest = list(updates.shape[len(indices.shape):])
    target = convert_to_tensor(np.zeros([n, *rest], updates.dtype.as_numpy_dtype))
    idx = _core.to_sym(indices, like, where_)
    # The gather is the function differentiated, not an op of the caller's:
    # tapes do not record it.
    saved, _core.state.tapes = _core.state.tapes, []
    try:
        def take(zs):
            return [apply("gather", [SymbolicTensor(zs[0]), SymbolicTensor(idx)], {"axis": 0})._s]

        out = _native.vjp(take, [_core.to_sym(target, like, where_)], [_core.to_sym(updates, like, where_)], where_)
    finally:
        _core.state.tapes = saved
    return SymbolicTensor(out[0])


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


def _scatter_into(op, tensor, dims, indices, updates):
    """The updates added into zeros of ``dims`` (``tensor`` None) or into
    ``tensor``: the flat rows of the index tuples, scattered."""
    indices = _int_tensor(indices, op, "indices")
    d = _check_updates(op, indices, updates, dims)
    flat, rows = _flat_index(indices, dims, op)
    m = _prod(list(flat.shape))
    rest = dims[d:]
    added = _scatter_add_rows(rows, reshape(flat, [m]), reshape(updates, [m, *rest]))
    added = reshape(added, dims)
    return added if tensor is None else tensor + added


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


def _last_of_duplicates(flat, rows):
    """For each of the flat row numbers ``flat`` (1-D, -1 for none): whether
    no later entry names the same row — the update that wins where
    updates replace ("the last update for the index", TensorFlow). Found
    bit by bit, high to low, as the largest position landing on each row:
    one scatter-add per bit of the position (``O(m log m)``)."""
    m = flat.shape[0]
    pos = np.arange(m, dtype=np.int64)
    alive = greater_equal(flat, convert_to_tensor(0, dtype=flat.dtype))
    for bit in reversed(range(max(1, int(m - 1).bit_length()))):
        has = convert_to_tensor(((pos >> bit) & 1).astype(np.int32))
        # How many live candidates with this bit set land on each row.
        ones = cast(alive, "int32") * has
        count = _scatter_add_rows(rows, flat, ones)
        row_has = greater(_take(count, maximum(flat, convert_to_tensor(0, dtype=flat.dtype))),
                          convert_to_tensor(0, dtype="int32"))
        # A candidate stays if its bit agrees with the row's best so far.
        alive = logical_and(alive, equal(row_has, equal(has, convert_to_tensor(1, dtype="int32"))))
    return alive


def tensor_scatter_nd_update(tensor, indices, updates, name=None):
    """``tf.tensor_scatter_nd_update``: ``tensor`` with the element (or
    slice) at each index tuple replaced by its update; of duplicates, the
    last update wins, as TensorFlow's CPU kernel has it. The gradient
    reaches the tensor where nothing replaced it, and the winning
    updates."""
    op = "tensor_scatter_nd_update"
    tensor, updates, dims = _tensor_and_updates(op, tensor, updates)
    indices = _int_tensor(indices, op, "indices")
    d = _check_updates(op, indices, updates, dims)
    flat, rows = _flat_index(indices, dims, op)
    m = _prod(list(flat.shape))
    flat = reshape(flat, [m])
    rest = dims[d:]
    wins = _last_of_duplicates(flat, rows)
    ups = reshape(updates, [m, *rest])
    keep = reshape(wins, [m] + [1] * len(rest))
    placed = _scatter_add_rows(rows, flat, where(keep, ups, convert_to_tensor(0, dtype=ups.dtype)))
    hit = _scatter_add_rows(rows, flat, cast(wins, "int32"))
    hit = reshape(greater(hit, convert_to_tensor(0, dtype="int32")), [rows] + [1] * len(rest))
    table = reshape(tensor, [rows, *rest])
    return reshape(where(hit, placed, table), dims)


def _extreme_scatter(op, tensor, indices, updates, take_max):
    tensor, updates, dims = _tensor_and_updates(op, tensor, updates)
    indices = _int_tensor(indices, op, "indices")
    d = _check_updates(op, indices, updates, dims)
    flat, rows = _flat_index(indices, dims, op)
    m = _prod(list(flat.shape))
    rest = dims[d:]
    best, count = _segment_extreme(reshape(updates, [m, *rest]), reshape(flat, [m]), rows, take_max, op)
    table = reshape(tensor, [rows, *rest])
    pick = maximum if take_max else minimum
    hit = reshape(greater(count, convert_to_tensor(0, dtype=count.dtype)), [rows] + [1] * len(rest))
    return reshape(where(hit, pick(table, best), table), dims)


def tensor_scatter_nd_max(tensor, indices, updates, name=None):
    """``tf.tensor_scatter_nd_max``: ``tensor`` with each element at an
    index tuple the maximum of itself and the updates landing there."""
    return _extreme_scatter("tensor_scatter_nd_max", tensor, indices, updates, True)


def tensor_scatter_nd_min(tensor, indices, updates, name=None):
    """``tf.tensor_scatter_nd_min``: as ``tensor_scatter_nd_max``, the minimum."""
    return _extreme_scatter("tensor_scatter_nd_min", tensor, indices, updates, False)


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
    if v.size and v.max() >= num:
        raise InvalidArgumentError(f"{op}: segment id {int(v.max())} is out of range [0, {num})")
    if sorted_:
        if v.size and v.min() < 0:
            raise InvalidArgumentError(f"{op}: segment ids must be >= 0, got {int(v.min())}")
        if v.size > 1 and (np.diff(v) < 0).any():
            raise InvalidArgumentError(f"{op}: segment ids are not sorted (increasing): {v.tolist()[:16]}")


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


def _lowest(dtype, take_max):
    """The identity of max (the lowest value) or of min (the highest)."""
    np_dtype = dtype.as_numpy_dtype
    if dtype.is_floating:
        v = -np.inf if take_max else np.inf
    else:
        info = np.iinfo(np_dtype)
        v = info.min if take_max else info.max
    return convert_to_tensor(np.array(v, np_dtype))


def _shift_rows(x, k, fill):
    low, high = [0] * len(x.shape), [0] * len(x.shape)
    low[0], high[0] = k, -k
    return apply("pad", [x, fill], {"low": low, "high": high})


def _segment_extreme(data, ids, num, take_max, op):
    """The maximum (``take_max``) or minimum of each of ``num`` segments of
    the rows of ``data`` (``[n, ...]``) by ``ids`` (``[n]``, ids outside
    ``[0, num)`` dropped), and the count of each (``[num]``): the rows are
    put in order of their ids (a constant permutation for eager ids, else
    a sort), a segmented log-step scan (as cumsum's) carries each segment's
    running extreme to its last row, and that row is gathered."""
    if not (data.dtype.is_floating or data.dtype.is_integer):
        raise TypeError(f"{op}: data must be numeric, not {data.dtype.name}")
    n = ids.shape[0]
    idt = ids.dtype
    fill = _lowest(data.dtype, take_max)
    if isinstance(ids, EagerTensor):
        v = ids.numpy()
        order = np.argsort(v, kind="stable")
        sorted_ids = convert_to_tensor(v[order])
        rows = _take(data, convert_to_tensor(order.astype(np.int32)))
    else:
        from ._sort import _argsort_rows

        order = _argsort_rows(ids)
        sorted_ids = _take(ids, order)
        rows = _take(data, order)
    count = _scatter_add_rows(num, ids, convert_to_tensor(np.ones(n, idt.as_numpy_dtype)))
    if n == 0:
        return broadcast_to(fill, [num, *data.shape[1:]]), count
    pick = maximum if take_max else minimum
    position = np.arange(n)
    k = 1
    while k < n:
        same = logical_and(equal(sorted_ids, _shift_rows(sorted_ids, k, convert_to_tensor(0, dtype=idt))),
                           convert_to_tensor(position >= k))
        same = reshape(same, [n] + [1] * (len(data.shape) - 1))
        rows = where(same, pick(rows, _shift_rows(rows, k, fill)), rows)
        k *= 2
    # Segment s ends after the rows of ids below it (the dropped negative
    # ones included, which sort first).
    negatives = reduce_sum(cast(less(ids, convert_to_tensor(0, dtype=idt)), idt))
    from ._scan import cumsum

    ends = cumsum(count) + negatives - convert_to_tensor(1, dtype=idt)
    last = _take(rows, maximum(ends, convert_to_tensor(0, dtype=idt)))
    empty = reshape(equal(count, convert_to_tensor(0, dtype=idt)), [num] + [1] * (len(data.shape) - 1))
    return where(empty, broadcast_to(fill, [num, *data.shape[1:]]), last), count


def unsorted_segment_max(data, segment_ids, num_segments, name=None):
    """``tf.math.unsorted_segment_max``: the maximum of each segment; an
    empty segment gets the lowest value of the dtype (-inf for floats)."""
    op = "unsorted_segment_max"
    num = _static_int(num_segments, op, "num_segments")
    flat_data, ids, rest = _segment_args(op, data, segment_ids)
    _check_ids(op, ids, num)
    return _segment_extreme(flat_data, ids, num, True, op)[0]


def unsorted_segment_min(data, segment_ids, num_segments, name=None):
    """``tf.math.unsorted_segment_min``: the minimum of each segment; an
    empty segment gets the highest value of the dtype (inf for floats)."""
    op = "unsorted_segment_min"
    num = _static_int(num_segments, op, "num_segments")
    flat_data, ids, rest = _segment_args(op, data, segment_ids)
    _check_ids(op, ids, num)
    return _segment_extreme(flat_data, ids, num, False, op)[0]


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
        best, count = _segment_extreme(d, i, n, take_max, op)
        # (TensorFlow's sorted forms give an empty segment 0.)
        empty = reshape(equal(count, convert_to_tensor(0, dtype=count.dtype)), [n] + [1] * len(r))
        return where(empty, convert_to_tensor(0, dtype=best.dtype), best)

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
