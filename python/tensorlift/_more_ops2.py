"""The fifth round of TensorFlow ops built from the core ones (so that they
trace, compile and differentiate as those do): padding modes, band and
sequence masks, embedding lookups, norms and clipping, roll, linspace,
meshgrid, in_top_k, searchsorted, index arithmetic, bincount, the product
segment reductions and dropout.

A size an op needs while tracing (a shape of its result) must be a Python
value or an eager tensor; a traced one is an error saying it "must be known
when traced" (``_core.KNOWN_WHEN_TRACED``), as is a dim of unknown size the
op needs (a function with ``None`` dims in its input_signature is then
traced per shape)."""

import builtins
import numbers

import numpy as np

from ._core import KNOWN_WHEN_TRACED, EagerTensor, SymbolicTensor, Tensor, apply, convert_to_tensor
from ._more_ops import softplus
from ._ops import (
    _dim_size,
    abs,
    broadcast_to,
    cast,
    concat,
    equal,
    expand_dims,
    gather,
    is_finite,
    logical_and,
    logical_not,
    logical_or,
    maximum,
    minimum,
    reduce_max,
    reduce_prod,
    reduce_sum,
    reshape,
    sqrt,
    squeeze,
    where,
)
from .dtypes import as_dtype
from .errors import InvalidArgumentError, UnimplementedError


def _t(x, dtype=None):
    return x if isinstance(x, Tensor) else convert_to_tensor(x, dtype=dtype)


def _known_rank(x, op):
    if x.shape is None:
        raise InvalidArgumentError(f"{op}: the input's rank {KNOWN_WHEN_TRACED} (declare it with set_shape)")
    return len(x.shape)


def _known_dim(x, axis, op, what="the input"):
    n = x.shape[axis]
    if n is None:
        raise InvalidArgumentError(
            f"{op}: dim {axis} of {what} (shape {list(x.shape)}) {KNOWN_WHEN_TRACED} "
            "(declare it in the input_signature)")
    return n


def _static(v, op, what):
    """A value the op needs while tracing (a size, paddings) as a NumPy
    array: Python values and eager tensors; a traced tensor is an error."""
    if isinstance(v, SymbolicTensor):
        raise TypeError(
            f"{op}: {what} is a tensor of the traced function, whose value is known only when it runs; "
            f"it {KNOWN_WHEN_TRACED} (pass Python ints or a static argument)")
    if isinstance(v, Tensor):
        return v.numpy()
    if isinstance(v, (list, tuple)):
        return np.asarray([_static(e, op, what) for e in v])
    return np.asarray(v)


def _static_int(v, op, what, allow_none=False):
    if v is None and allow_none:
        return None
    a = _static(v, op, what)
    if a.ndim != 0 or a.dtype.kind not in "iu":
        raise TypeError(f"{op}: {what} must be an int, not {v!r}")
    return int(a)


def _axis(axis, rank, op):
    a = _static_int(axis, op, "axis")
    if not -rank <= a < rank:
        raise InvalidArgumentError(f"{op}: axis {a} is out of range for a tensor of rank {rank}")
    return a % rank


def _float(x, op, what="the input"):
    if not x.dtype.is_floating:
        raise TypeError(f"{op}: {what} must be floating-point, not {x.dtype.name}")
    return x


def _int_tensor(x, op, what, dtype=None):
    if not isinstance(x, Tensor) and np.asarray(x).dtype.kind not in "iu":
        raise TypeError(f"{op}: {what} must be int32 or int64, not {x!r}")
    t = _t(x, dtype)
    if t.dtype.name not in ("int32", "int64"):
        raise TypeError(f"{op}: {what} must be int32 or int64, not {t.dtype.name}")
    return t


def _expand(x, axis, op, what="the input"):
    """``expand_dims`` (a reshape: at most one dim of unknown size)."""
    if x.shape.count(None) > 1:
        raise InvalidArgumentError(
            f"{op}: {what} of shape {list(x.shape)}: its dims {KNOWN_WHEN_TRACED} (all but one; declare them in "
            "the input_signature)")
    return expand_dims(x, axis)


def _iota(n, dtype, rank=1, axis=0):
    """``0..n-1`` along ``axis`` of a rank-``rank`` constant (1 elsewhere)."""
    shape = [1] * rank
    shape[axis] = n
    return convert_to_tensor(np.arange(n).astype(as_dtype(dtype).as_numpy_dtype).reshape(shape))


# --- tf.pad -------------------------------------------------------------------------------


def pad(tensor, paddings, mode="CONSTANT", constant_values=0, name=None):
    """``tf.pad``: ``paddings[d] = [before, after]`` elements added to dim
    ``d`` (Python ints or an eager ``[rank, 2]`` tensor). ``CONSTANT``
    fills with ``constant_values`` (the native ``pad``; dims may be of
    unknown size); ``REFLECT`` mirrors without the edge (``before, after <
    size``), ``SYMMETRIC`` with it (``<= size``): a gather of mirrored
    indices per padded dim (whose size must be known). Differentiable in
    ``tensor``."""
    op = "pad"
    x = _t(tensor)
    m = mode.upper() if isinstance(mode, str) else mode
    if m not in ("CONSTANT", "REFLECT", "SYMMETRIC"):
        raise ValueError(f'{op}: mode must be one of "CONSTANT", "REFLECT" or "SYMMETRIC", got {mode!r}')
    rank = _known_rank(x, op)
    p = _static(paddings, op, "paddings")
    if p.size == 0 and rank == 0:
        p = p.reshape(0, 2)
    if p.dtype.kind not in "iu" or p.shape != (rank, 2):
        raise InvalidArgumentError(
            f"{op}: paddings must be an integer matrix of shape [{rank}, 2] (the input's rank), got "
            f"{p.dtype.name} of shape {list(p.shape)}")
    if (p < 0).any():
        raise InvalidArgumentError(f"{op}: paddings must be non-negative, got {p.tolist()}")
    p = p.astype(np.int64)
    if m == "CONSTANT":
        if isinstance(constant_values, Tensor):
            cv = constant_values
            if cv.dtype != x.dtype:
                raise TypeError(f"{op}: constant_values is {cv.dtype.name}, the tensor {x.dtype.name}")
            if cv.shape is not None and len(cv.shape) != 0:
                raise InvalidArgumentError(f"{op}: constant_values must be a scalar, got shape {list(cv.shape)}")
        else:
            cv = convert_to_tensor(constant_values, dtype=x.dtype)
            if cv.shape != ():
                raise InvalidArgumentError(f"{op}: constant_values must be a scalar, got shape {list(cv.shape)}")
        return apply("pad", [x, cv], {"low": p[:, 0].tolist(), "high": p[:, 1].tolist()})
    reflect = m == "REFLECT"
    for axis in builtins.range(rank):
        a, b = int(p[axis, 0]), int(p[axis, 1])
        if a == 0 and b == 0:
            continue
        n = _known_dim(x, axis, op)
        limit = n - 1 if reflect else n
        if a > limit or b > limit:
            raise InvalidArgumentError(
                f"{op}: {m} paddings must be {'less than' if reflect else 'no more than'} the dimension size: "
                f"{a}, {b} in dim {axis} of size {n}")
        i = np.arange(-a, n + b)
        i = np.where(i < 0, -i - (0 if reflect else 1), i)
        i = np.where(i >= n, 2 * n - i - (2 if reflect else 1), i)
        x = gather(x, convert_to_tensor(i.astype(np.int32)), axis=axis)
    return x


# --- masks --------------------------------------------------------------------------------


def band_part(input, num_lower, num_upper, name=None):  # noqa: A002
    """``tf.linalg.band_part``: the band of each innermost matrix with
    ``num_lower`` subdiagonals and ``num_upper`` superdiagonals kept (a
    negative count keeps the whole triangle), zeros elsewhere. The counts
    may be traced tensors; the matrix dims must be known when traced."""
    op = "band_part"
    x = _t(input)
    rank = _known_rank(x, op)
    if rank < 2:
        raise InvalidArgumentError(f"{op}: input must be at least 2-dim, got shape {list(x.shape)}")
    rows, cols = _known_dim(x, rank - 2, op), _known_dim(x, rank - 1, op)
    bounds = []
    for what, v, limit in (("num_lower", num_lower, rows), ("num_upper", num_upper, cols)):
        v = _int_tensor(v, op, what, "int64" if not isinstance(v, Tensor) else None)
        if v.shape is not None and len(v.shape) != 0:
            raise InvalidArgumentError(f"{op}: {what} must be a scalar, got shape {list(v.shape)}")
        if isinstance(v, EagerTensor) and int(v.numpy()) > limit:
            raise InvalidArgumentError(
                f"{op}: {what} must be negative or less or equal to the number of "
                f"{'rows' if what == 'num_lower' else 'columns'} ({limit}), got {int(v.numpy())}")
        bounds.append(cast(v, "int64"))
    lo, hi = bounds
    d = convert_to_tensor((np.arange(rows)[:, None] - np.arange(cols)[None, :]).astype(np.int64))
    zero = convert_to_tensor(np.int64(0))
    keep = logical_and(logical_or(lo < zero, d <= lo), logical_or(hi < zero, -d <= hi))
    return where(keep, x, convert_to_tensor(0, dtype=x.dtype))


def sequence_mask(lengths, maxlen=None, dtype="bool", name=None):
    """``tf.sequence_mask``: ``mask[..., j] = j < lengths[...]``, of shape
    ``lengths.shape + [maxlen]``. Without ``maxlen`` it is ``max(lengths)``
    (0 for no lengths), which needs eager lengths: traced, the length must
    be known when traced (pass ``maxlen``)."""
    op = "sequence_mask"
    lengths = _t(lengths)
    if not lengths.dtype.is_integer:
        raise TypeError(f"{op}: lengths must be integers, not {lengths.dtype.name}")
    if maxlen is None:
        if isinstance(lengths, SymbolicTensor):
            raise InvalidArgumentError(
                f"{op}: without maxlen the mask's length is max(lengths), which {KNOWN_WHEN_TRACED}: pass maxlen "
                "(a Python int) inside a tl.function")
        v = lengths.numpy()
        n = builtins.max(0, int(v.max())) if v.size else 0
    else:
        n = _static_int(maxlen, op, "maxlen")
        if n < 0:
            raise InvalidArgumentError(f"{op}: maxlen must be >= 0, got {n}")
    _known_rank(lengths, op)
    row = convert_to_tensor(np.arange(n).astype(lengths.dtype.as_numpy_dtype))
    mask = apply("less", [row, _expand(lengths, -1, op, "lengths")])
    d = as_dtype(dtype)
    return mask if d.is_bool else cast(mask, d)


# --- tf.nn ----------------------------------------------------------------------------------


def embedding_lookup(params, ids, max_norm=None, name=None):
    """``tf.nn.embedding_lookup``: rows of ``params`` at ``ids`` (a gather:
    differentiable, out-of-range ids an error). A list of shards is
    concatenated along dim 0 (TF's ``div`` strategy, for shards sized as it
    splits them). ``max_norm`` clips each embedding's l2 norm."""
    op = "embedding_lookup"
    if isinstance(params, (list, tuple)):
        if not params:
            raise ValueError(f"{op}: need at least one param (shard)")
        shards = [_t(p) for p in params]
        table = shards[0] if len(shards) == 1 else concat(shards, 0)
    else:
        table = _t(params)
    ids = _int_tensor(ids, op, "ids")
    out = gather(table, ids, axis=0)
    if max_norm is not None:
        axes = list(builtins.range(len(ids.shape), len(out.shape)))
        if axes:
            out = clip_by_norm(out, max_norm, axes)
    return out


def bias_add(value, bias, data_format=None, name=None):
    """``tf.nn.bias_add``: ``bias`` (1-D) added along the channel dim: the
    last (``N...C`` formats, the default) or dim 1 (``NC...``)."""
    op = "bias_add"
    x = _t(value)
    b = _t(bias, x.dtype if not isinstance(bias, Tensor) else None)
    if b.dtype != x.dtype:
        raise InvalidArgumentError(f"{op}: bias is {b.dtype.name} but value is {x.dtype.name}")
    rank = _known_rank(x, op)
    if b.shape is None or len(b.shape) != 1:
        raise InvalidArgumentError(f"{op}: bias must be 1-D, got shape {None if b.shape is None else list(b.shape)}")
    if rank < 2:
        raise InvalidArgumentError(f"{op}: value must be at least 2-D, got shape {list(x.shape)}")
    if data_format is None or (data_format.startswith("N") and data_format.endswith("C")):
        axis = rank - 1
    elif data_format.startswith("NC"):
        axis = 1
    else:
        raise ValueError(f"{op}: data_format must be N...C or NC..., got {data_format!r}")
    c = x.shape[axis]
    if c is not None and b.shape[0] is not None and c != b.shape[0]:
        raise InvalidArgumentError(
            f"{op}: must provide as many biases as the channel dimension of the input tensor: "
            f"{list(b.shape)} vs. {list(x.shape)}")
    if axis != rank - 1:
        b = reshape(b, [-1] + [1] * (rank - 1 - axis))
    return x + b


def l2_loss(t, name=None):
    """``tf.nn.l2_loss``: ``sum(t²) / 2``."""
    t = _float(_t(t), "l2_loss")
    return reduce_sum(t * t) / convert_to_tensor(2, dtype=t.dtype)


def log_sigmoid(x, name=None):
    """``tf.math.log_sigmoid``: ``-softplus(-x)``, without overflow."""
    x = _float(_t(x), "log_sigmoid")
    return -softplus(-x)


def dropout(x, rate, noise_shape=None, seed=None, name=None):
    """``tf.nn.dropout``: each element (or each slice, by ``noise_shape``:
    None entries are ``x``'s dims) kept with probability ``1 - rate`` and
    scaled by ``1 / (1 - rate)``, else 0; a fresh mask at each call (drawn
    by ``tl.random.uniform``). ``rate`` may be a tensor (also traced)."""
    from ._random import uniform

    op = "dropout"
    if isinstance(rate, numbers.Real) and not isinstance(rate, bool) and not 0 <= rate < 1:
        raise ValueError(f"{op}: rate must be a scalar tensor or a float in the range [0, 1), got {rate}")
    x = _t(x)
    if not x.dtype.is_floating:
        raise ValueError(f"{op}: x must be a floating point tensor, as it is scaled; got {x.dtype.name}")
    if isinstance(rate, numbers.Real) and not isinstance(rate, bool):
        if rate == 0:
            return x
        keep = convert_to_tensor(1 / (1 - float(rate)), dtype=x.dtype)
        rate_t = convert_to_tensor(float(rate), dtype=x.dtype)
        scaled = x * keep
    elif isinstance(rate, Tensor):
        if rate.shape is None or len(rate.shape) != 0:
            shape = None if rate.shape is None else list(rate.shape)
            raise ValueError(f"{op}: rate must be a scalar, got shape {shape}")
        rate_t = cast(rate, x.dtype)
        if isinstance(rate_t, EagerTensor) and not 0 <= float(rate_t.numpy()) < 1:
            raise InvalidArgumentError(f"{op}: rate must be in the range [0, 1), got {float(rate_t.numpy())}")
        scaled = x / (convert_to_tensor(1, dtype=x.dtype) - rate_t)
    else:
        raise ValueError(f"{op}: rate must be a scalar or scalar tensor, got {rate!r}")
    rank = _known_rank(x, op)
    if noise_shape is None:
        dims = [_known_dim(x, a, op) for a in builtins.range(rank)]
    else:
        ns = noise_shape if not isinstance(noise_shape, (list, tuple)) else [
            (_known_dim(x, i, op) if d is None else d) for i, d in enumerate(noise_shape)]
        dims = [int(v) for v in _static(ns, op, "noise_shape").reshape(-1)]
        if len(dims) != rank or any(d != 1 and d != n for d, n in zip(dims, x.shape) if n is not None):
            raise InvalidArgumentError(
                f"{op}: noise_shape {dims} must have the input's rank and each dim 1 or the input's "
                f"(shape {list(x.shape)})")
    mask = uniform(dims, dtype=x.dtype, seed=seed) >= rate_t
    return where(mask, scaled, convert_to_tensor(0, dtype=x.dtype))


# --- norms and clipping -----------------------------------------------------------------------


def clip_by_norm(t, clip_norm, axes=None, name=None):
    """``tf.clip_by_norm``: ``t · clip_norm / max(l2norm(t), clip_norm)``
    over ``axes`` (all by default), TF's formula (a zero tensor stays zero,
    with a finite gradient)."""
    op = "clip_by_norm"
    t = _float(_t(t), op)
    c = _t(clip_norm, t.dtype if not isinstance(clip_norm, Tensor) else None)
    if c.dtype != t.dtype:
        c = cast(c, t.dtype)
    l2sum = reduce_sum(t * t, axis=axes, keepdims=True)
    pred = l2sum > convert_to_tensor(0, dtype=t.dtype)
    safe = where(pred, l2sum, convert_to_tensor(1, dtype=t.dtype))
    l2norm = where(pred, sqrt(safe), l2sum)
    return t * c / maximum(l2norm, c)


def global_norm(t_list, name=None):
    """``tf.linalg.global_norm``: ``sqrt(sum of every tensor's sum of
    squares)``; None entries are skipped."""
    op = "global_norm"
    if isinstance(t_list, (str, bytes, Tensor)) or not isinstance(t_list, (list, tuple)):
        raise TypeError(f"{op}: t_list should be a sequence of tensors, got {type(t_list).__name__}")
    ts = [_float(_t(v), op, "each tensor") for v in t_list if v is not None]
    if not ts:
        raise InvalidArgumentError(f"{op}: t_list holds no tensors")
    d = ts[0].dtype
    for v in ts:
        if v.dtype != d:
            raise TypeError(f"{op}: the tensors must be of one dtype, got {d.name} and {v.dtype.name}")
    total = reduce_sum(ts[0] * ts[0])
    for v in ts[1:]:
        total = total + reduce_sum(v * v)
    return sqrt(total)


def clip_by_global_norm(t_list, clip_norm, use_norm=None, name=None):
    """``tf.clip_by_global_norm``: every tensor scaled by ``clip_norm /
    max(global_norm, clip_norm)``; returns ``(list, global_norm)``. A
    global norm of inf or NaN makes every value NaN (as TF). None entries
    stay None."""
    op = "clip_by_global_norm"
    if isinstance(t_list, (str, bytes, Tensor)) or not isinstance(t_list, (list, tuple)):
        raise TypeError(f"{op}: t_list should be a sequence of tensors, got {type(t_list).__name__}")
    ts = [None if v is None else _t(v) for v in t_list]
    norm_ = global_norm(ts) if use_norm is None else _t(use_norm)
    c = _t(clip_norm, norm_.dtype if not isinstance(clip_norm, Tensor) else None)
    if c.dtype != norm_.dtype:
        c = cast(c, norm_.dtype)
    one = convert_to_tensor(1, dtype=norm_.dtype)
    scale = c * minimum(one / norm_, one / c)
    scale = scale + (norm_ - norm_)  # NaN when the norm is inf or NaN
    out = [None if v is None else v * cast(scale, v.dtype) for v in ts]
    return out, norm_


def norm(tensor, ord="euclidean", axis=None, keepdims=None, name=None):  # noqa: A002
    """``tf.norm`` (``tf.linalg.norm``): a vector norm over every element
    (``axis=None``) or along ``axis`` (an int): ``'euclidean'``/2, 1,
    ``np.inf`` or any ``p > 0``; a matrix norm over ``axis=(a, b)``:
    ``'euclidean'``/``'fro'`` (Frobenius), 1 (largest column sum of
    ``|x|``), ``np.inf`` (largest row sum). The spectral norm (``ord=2``
    over a matrix) needs an SVD: an ``UnimplementedError``."""
    op = "norm"
    x = _t(tensor)
    if not x.dtype.is_floating:
        raise TypeError(f"{op}: the tensor must be floating-point, not {x.dtype.name}")
    rank = _known_rank(x, op)
    keepdims = bool(keepdims)
    if isinstance(axis, (list, tuple)) and len(axis) == 1:
        axis = axis[0]
    matrix = isinstance(axis, (list, tuple)) and len(axis) == 2
    if matrix:
        a0, a1 = (_axis(a, rank, op) for a in axis)
        if a0 == a1:
            raise ValueError(f"{op}: 'axis' must be None, an integer, or a tuple of 2 unique integers, got {axis}")
        if not (isinstance(ord, str) and ord in ("euclidean", "fro")) and ord not in (1, 2, np.inf):
            raise ValueError(f"{op}: 'ord' must be a supported matrix norm in ['euclidean', 'fro', 1, 2, inf], "
                             f"got {ord!r}")
        axes = [a0, a1]
    else:
        if axis is not None and not isinstance(axis, (int, np.integer, Tensor)):
            raise ValueError(f"{op}: 'axis' must be None, an integer, or a tuple of 2 unique integers, got {axis}")
        if isinstance(axis, bool):
            raise ValueError(f"{op}: 'axis' must be None, an integer, or a tuple of 2 unique integers, got {axis}")
        if not (ord == "euclidean" or (isinstance(ord, numbers.Real) and not isinstance(ord, bool) and ord > 0)):
            raise ValueError(f"{op}: 'ord' must be a supported vector norm, got {ord!r}")
        axes = None if axis is None else [_axis(axis, rank, op)]
    if isinstance(ord, str) or (ord == 2 and not matrix):
        r = sqrt(reduce_sum(x * x, axis=axes, keepdims=True))
    elif matrix and ord == 2:
        raise UnimplementedError(f"{op}: the spectral norm (ord=2 over a matrix) needs an SVD, which tensorlift lacks")
    else:
        r = abs(x)
        if ord == 1:
            r = reduce_sum(r, axis=axes[0] if matrix else axes, keepdims=True)
            if matrix:
                r = reduce_max(r, axis=a1, keepdims=True)
        elif ord == np.inf:
            if matrix:
                r = reduce_sum(r, axis=a1, keepdims=True)
            r = reduce_max(r, axis=axes[0] if matrix else axes, keepdims=True)
        else:
            p = convert_to_tensor(float(ord), dtype=r.dtype)
            r = reduce_sum(r ** p, axis=axes, keepdims=True) ** (convert_to_tensor(1, dtype=r.dtype) / p)
    if keepdims:
        return r
    return reshape(r, []) if axes is None else squeeze(r, axes)


# --- layout -----------------------------------------------------------------------------------


def roll(input, shift, axis, name=None):  # noqa: A002
    """``tf.roll``: elements shifted by ``shift`` along ``axis`` (ints or
    lists of them; shifts of one axis add up), wrapping around. Python or
    eager shifts become two slices and a concat per axis; traced ones a
    gather of ``(i - shift) mod n``. The rolled dims must be known when
    traced."""
    op = "roll"
    x = _t(input)
    rank = _known_rank(x, op)
    axes = [int(a) for a in _static(axis, op, "axis").reshape(-1)]
    if isinstance(shift, SymbolicTensor):
        shifts = [shift] if shift.shape == () else [shift[i] for i in builtins.range(len(shift))]
    elif isinstance(shift, (list, tuple)) and any(isinstance(s, SymbolicTensor) for s in shift):
        shifts = list(shift)
    else:
        a = _static(shift, op, "shift")
        if a.dtype.kind not in "iu":
            raise TypeError(f"{op}: shift must be integers, not {shift!r}")
        shifts = [int(v) for v in a.reshape(-1)]
    if len(shifts) != len(axes):
        raise InvalidArgumentError(f"{op}: shift and axis must have the same size, got {len(shifts)} and {len(axes)}")
    total = {}
    for s, a in zip(shifts, axes):
        if not -rank <= a < rank:
            raise InvalidArgumentError(f"{op}: axis {a} is out of range for a tensor of rank {rank}")
        a %= rank
        total[a] = s if a not in total else total[a] + s
    for a, s in total.items():
        n = _known_dim(x, a, op)
        if n == 0:
            continue
        if isinstance(s, Tensor):
            s = _int_tensor(s, op, "shift")
            i = _iota(n, s.dtype)
            nn = convert_to_tensor(n, dtype=s.dtype)
            x = gather(x, apply("floormod", [i - s, nn]), axis=a)
            continue
        s %= n
        if s == 0:
            continue
        lo, hi = [0] * rank, list(x.shape)
        tail_start = list(lo)
        tail_start[a] = n - s
        head_limit = list(hi)
        head_limit[a] = n - s
        tail = apply("slice", [x], {"start": tail_start, "limit": hi})
        head = apply("slice", [x], {"start": lo, "limit": head_limit})
        x = concat([tail, head], a)
    return x


def linspace(start, stop, num, name=None, axis=0):
    """``tf.linspace``: ``num`` evenly spaced values from ``start`` to
    ``stop`` (both included; floats, broadcast together: the new axis goes
    at ``axis``); ``num`` must be known when traced."""
    op = "linspace"
    a = _t(start)
    b = _t(stop, a.dtype if not isinstance(stop, Tensor) else None)
    if not a.dtype.is_floating:
        raise TypeError(f"{op}: start must be floating-point (bfloat16, float16, float32, float64), not {a.dtype.name}")
    if b.dtype != a.dtype:
        raise TypeError(f"{op}: stop is {b.dtype.name} but start is {a.dtype.name}")
    n = _static_int(num, op, "num")
    if n < 0:
        raise InvalidArgumentError(f"{op}: num must be >= 0, got {n}")
    ra, rb = _known_rank(a, op), _known_rank(b, op)
    if ra != rb or (a.shape != b.shape):
        shape = list(np.broadcast_shapes(tuple(1 if d is None else d for d in a.shape),
                                         tuple(1 if d is None else d for d in b.shape)))
        if None in a.shape or None in b.shape:
            raise InvalidArgumentError(f"{op}: broadcasting start and stop needs their dims; they "
                                       f"{KNOWN_WHEN_TRACED}")
        a, b = broadcast_to(a, shape), broadcast_to(b, shape)
    rank = len(a.shape)
    if not -rank - 1 <= axis <= rank:
        raise InvalidArgumentError(f"{op}: axis {axis} is out of range for a result of rank {rank + 1}")
    axis = axis % (rank + 1)
    a, b = _expand(a, axis, op, "start"), _expand(b, axis, op, "stop")
    i = _iota(n, a.dtype, rank + 1, axis)
    delta = (b - a) / convert_to_tensor(builtins.max(n - 1, 1), dtype=a.dtype)
    r = a + delta * i
    if n >= 2:
        r = where(equal(i, convert_to_tensor(n - 1, dtype=a.dtype)), b, r)
    return r


def meshgrid(*args, **kwargs):
    """``tf.meshgrid``: N-D coordinate arrays of the 1-D inputs;
    ``indexing='xy'`` (Cartesian: the first two dims swapped) or ``'ij'``
    (matrix). Each input's size must be known when traced."""
    op = "meshgrid"
    indexing = kwargs.pop("indexing", "xy")
    kwargs.pop("name", None)
    if kwargs:
        raise TypeError(f"{op}: keyword arguments {sorted(kwargs)} are not supported")
    if indexing not in ("xy", "ij"):
        raise ValueError(f"{op}: indexing must be either 'xy' or 'ij', got {indexing!r}")
    xs = [reshape(_t(v), [-1]) for v in args]
    sizes = [_known_dim(v, 0, op, f"input {k}") for k, v in enumerate(xs)]
    nd = len(xs)
    if indexing == "xy" and nd > 1:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    out = []
    for k, v in enumerate(xs):
        shape = [1] * nd
        pos = 1 - k if indexing == "xy" and nd > 1 and k < 2 else k
        shape[pos] = -1
        out.append(broadcast_to(reshape(v, shape), sizes))
    return out


# --- searches and indices ---------------------------------------------------------------------


def in_top_k(targets, predictions, k, name=None):
    """``tf.math.in_top_k(targets, predictions, k)``: whether each row's
    target class is among its ``k`` largest predictions; ties at the
    boundary count as in (fewer than ``k`` finite predictions are larger);
    an out-of-range target or a non-finite target prediction gives False."""
    op = "in_top_k"
    p = _t(predictions)
    if not p.dtype.is_floating:
        raise TypeError(f"{op}: predictions must be floating-point, not {p.dtype.name}")
    t = _int_tensor(targets, op, "targets")
    if p.shape is None or len(p.shape) != 2:
        raise InvalidArgumentError(f"{op}: predictions must be 2-dimensional, got shape "
                                   f"{None if p.shape is None else list(p.shape)}")
    if t.shape is None or len(t.shape) != 1:
        raise InvalidArgumentError(f"{op}: targets must be 1-dimensional, got shape "
                                   f"{None if t.shape is None else list(t.shape)}")
    if None in p.shape or None in t.shape:
        raise InvalidArgumentError(f"{op}: predictions of shape {list(p.shape)} and targets of shape "
                                   f"{list(t.shape)}: their dims {KNOWN_WHEN_TRACED}")
    if t.shape[0] != p.shape[0]:
        raise InvalidArgumentError(f"{op}: first dimension of predictions {p.shape[0]} must match length of "
                                   f"targets {t.shape[0]}")
    kk = _t(k, t.dtype if not isinstance(k, Tensor) else None)
    if not kk.dtype.is_integer:
        raise TypeError(f"{op}: k must be an integer, not {kk.dtype.name}")
    kk = cast(kk, t.dtype)
    n = _dim_size(p, 1, t.dtype)
    zero = convert_to_tensor(0, dtype=t.dtype)
    valid = logical_and(t >= zero, t < n)
    safe = where(valid, t, zero)
    tv = apply("take_along_axis", [p, expand_dims(safe, 1)], {"axis": 1})
    larger = logical_and(p > tv, is_finite(p))
    more = reduce_sum(cast(larger, t.dtype), axis=1)
    return logical_and(logical_and(valid, is_finite(reshape(tv, [-1]))), more < kk)


def searchsorted(sorted_sequence, values, side="left", out_type="int32", name=None):
    """``tf.searchsorted``: for each value, the index into the innermost
    sorted sequence where it would be inserted (before equal entries with
    ``'left'``, after them with ``'right'``), the sequences and values
    matched row by row over their flattened leading dims (as TF). Short
    rows count the smaller (not larger) entries, ``O(len(sequence) ·
    len(values))`` work; longer ones merge by sorting (``O((m + k) log(m +
    k))``). Dims must be known when traced."""
    op = "searchsorted"
    if side not in ("left", "right"):
        raise ValueError(f"{op}: side should be either 'right' or 'left', got {side!r}")
    s = _t(sorted_sequence)
    v = _t(values, s.dtype if not isinstance(values, Tensor) else None)
    if v.dtype != s.dtype:
        raise TypeError(f"{op}: values are {v.dtype.name} but sorted_sequence is {s.dtype.name}")
    d = as_dtype(out_type)
    if d.name not in ("int32", "int64"):
        raise TypeError(f"{op}: out_type must be int32 or int64, not {d.name}")
    rs, rv = _known_rank(s, op), _known_rank(v, op)
    if rs < 1 or rv < 1:
        raise InvalidArgumentError(f"{op}: sorted_sequence and values must have rank >= 1, got {rs} and {rv}")
    for x, what in ((s, "sorted_sequence"), (v, "values")):
        if None in x.shape:
            raise InvalidArgumentError(f"{op}: {what} of shape {list(x.shape)}: its dims {KNOWN_WHEN_TRACED}")
    m, kcount = s.shape[-1], v.shape[-1]
    rows_s = int(np.prod(s.shape[:-1], dtype=np.int64))
    rows_v = int(np.prod(v.shape[:-1], dtype=np.int64))
    if rows_s != rows_v:
        raise InvalidArgumentError(
            f"{op}: leading dim_size of both tensors must match: sorted_sequence {list(s.shape)}, values "
            f"{list(v.shape)}")
    if m * kcount <= _SEARCH_DENSE:
        s2 = reshape(s, [rows_s, 1, m])
        v2 = reshape(v, [rows_v, kcount, 1])
        hit = apply("less" if side == "left" else "less_equal", [s2, v2])
        if s.dtype.is_floating:
            # A NaN value sorts after every number (NumPy's order, as the
            # merge path has it): before the NaN entries ('left') or after
            # them ('right'); comparisons with it are all false.
            v_nan = apply("not_equal", [v2, v2])
            if side == "left":
                s_number = logical_not(apply("not_equal", [s2, s2]))
                hit = logical_or(logical_and(v_nan, s_number), logical_and(logical_not(v_nan), hit))
            else:
                hit = logical_or(hit, v_nan)
        return reshape(reduce_sum(cast(hit, d), axis=2), list(v.shape))
    return reshape(cast(_merge_positions(reshape(s, [rows_s, m]), reshape(v, [rows_v, kcount]), side), d),
                   list(v.shape))


# Rows of at most this many (entry, value) pairs are searched by comparing
# every pair (one fused pass); longer ones by sorting.
_SEARCH_DENSE = 4096


def _merge_positions(s, v, side):
    """``searchsorted`` of the rows of ``v`` ``[b, k]`` in those of ``s``
    ``[b, m]`` by stable sorts: in the sorted concatenation (values first
    for ``'left'``, so that they sort before equal entries; last for
    ``'right'``) a value's position less its rank among the values is the
    number of entries before it."""
    def argsort(x):
        return apply("argsort", [x], {"axis": 1, "descending": False})

    m, k = s.shape[1], v.shape[1]
    both = concat([v, s], 1) if side == "left" else concat([s, v], 1)
    position = argsort(argsort(both))
    start = 0 if side == "left" else m
    position = apply("slice", [position], {"start": [0, start], "limit": [position.shape[0], start + k]})
    return position - argsort(argsort(v))


def invert_permutation(x, name=None):
    """``tf.math.invert_permutation``: ``y[x[i]] = i`` (an ``argsort`` of
    the permutation); eager input is checked to be a permutation of
    ``0..n-1``, a traced one is not (then the result is an argsort)."""
    op = "invert_permutation"
    x = _int_tensor(x, op, "x")
    if x.shape is None or len(x.shape) != 1:
        raise InvalidArgumentError(f"{op}: x must be a vector, got shape {None if x.shape is None else list(x.shape)}")
    if isinstance(x, EagerTensor):
        v = x.numpy()
        n = v.size
        bad = (v < 0) | (v >= n)
        if bad.any():
            raise InvalidArgumentError(f"{op}: {int(v[bad][0])} is not between 0 and {n}")
        seen = np.zeros(n, bool)
        for e in v:
            if seen[e]:
                raise InvalidArgumentError(f"{op}: {int(e)} is duplicated in the input")
            seen[e] = True
    if x.shape[0] is None:
        raise InvalidArgumentError(f"{op}: the permutation's length {KNOWN_WHEN_TRACED}")
    return cast(apply("argsort", [x], {"axis": 0, "descending": False}), x.dtype)


def unravel_index(indices, dims, name=None):
    """``tf.unravel_index``: flat indices (a scalar or a vector) as
    coordinates into ``dims`` (row-major): ``[len(dims)]`` or
    ``[len(dims), n]``. Eager values are checked (an index out of range is
    an error); traced ones are not (the coordinates wrap)."""
    op = "unravel_index"
    i = _int_tensor(indices, op, "indices")
    d = _int_tensor(dims, op, "dims", i.dtype if not isinstance(dims, Tensor) else None)
    if d.dtype != i.dtype:
        raise TypeError(f"{op}: dims are {d.dtype.name} but indices are {i.dtype.name}")
    if i.shape is None or len(i.shape) > 1:
        raise InvalidArgumentError(f"{op}: the indices can only be scalar or vector, got shape "
                                   f"{None if i.shape is None else list(i.shape)}")
    if d.shape is None or len(d.shape) != 1 or d.shape[0] is None:
        raise InvalidArgumentError(f"{op}: dims must be a vector of known length, got shape "
                                   f"{None if d.shape is None else list(d.shape)}")
    if isinstance(i, EagerTensor) and isinstance(d, EagerTensor):
        dv, iv = d.numpy(), i.numpy()
        if (dv <= 0).any():
            raise InvalidArgumentError(f"{op}: dims must be positive, got {dv.tolist()}")
        total = int(np.prod(dv.astype(object)))
        bad = (iv < 0) | (iv >= total)
        if np.any(bad):
            raise InvalidArgumentError(f"{op}: index {int(np.asarray(iv)[bad].reshape(-1)[0])} is out of bound "
                                       f"as with dims {dv.tolist()}")
    from ._scan import cumprod

    one = convert_to_tensor(1, dtype=d.dtype)
    safe = maximum(d, one)
    strides = cumprod(safe, exclusive=True, reverse=True)
    if len(i.shape) == 0:
        return apply("floormod", [apply("floordiv", [i, strides]), safe])
    col = reshape(i, [1, -1])
    return apply("floormod", [apply("floordiv", [col, expand_dims(strides, 1)]), expand_dims(safe, 1)])


def bincount(arr, weights=None, minlength=None, maxlength=None, dtype="int32", name=None, axis=None,
             binary_output=False):
    """``tf.math.bincount``: counts (or sums of ``weights``) of each
    non-negative integer of ``arr``, over ``max(max(arr) + 1, minlength)``
    bins capped at ``maxlength`` (values past the last bin are dropped).
    The length is a result dim: eagerly it is TF's; traced it is
    ``maxlength`` (required; TF's result is shorter when ``minlength <
    maxlength`` and the values stay below ``maxlength - 1``, here padded
    with zeros). ``axis=-1`` counts each row of a 2-D ``arr``;
    ``binary_output`` gives 1 for any count."""
    op = "bincount"
    a = _int_tensor(arr, op, "arr")
    rank = _known_rank(a, op)
    if axis is not None and axis not in (0, -1):
        raise InvalidArgumentError(f"{op}: axis must be None, 0 or -1, got {axis}")
    per_row = axis == -1
    if per_row and rank != 2:
        raise InvalidArgumentError(f"{op}: axis=-1 counts the rows of a 2-D arr, got shape {list(a.shape)}")
    lo = _static_int(minlength, op, "minlength", allow_none=True)
    hi = _static_int(maxlength, op, "maxlength", allow_none=True)
    for what, v in (("minlength", lo), ("maxlength", hi)):
        if v is not None and v < 0:
            raise InvalidArgumentError(f"{op}: {what} must be >= 0, got {v}")
    if weights is not None:
        if binary_output:
            raise ValueError(f"{op}: binary_output and weights cannot both be given")
        w = _t(weights)
        if w.dtype.is_bool or not (w.dtype.is_floating or w.dtype.is_integer):
            raise TypeError(f"{op}: weights must be numeric, not {w.dtype.name}")
        if w.shape != a.shape:
            raise InvalidArgumentError(
                f"{op}: weights {None if w.shape is None else list(w.shape)} must have the shape of arr "
                f"{list(a.shape)}")
    if isinstance(a, EagerTensor):
        v = a.numpy()
        if v.size and v.min() < 0:
            raise InvalidArgumentError(f"{op}: arr must be non-negative, got {int(v.min())}")
        length = int(v.max()) + 1 if v.size else 0
        if lo is not None:
            length = builtins.max(length, lo)
        if hi is not None:
            length = builtins.min(length, hi)
    else:
        if hi is None:
            raise InvalidArgumentError(
                f"{op}: the number of bins (max(arr) + 1, a dim of the result) {KNOWN_WHEN_TRACED}: pass "
                "maxlength (the result has maxlength bins; minlength=maxlength gives TF's exact length)")
        length = hi
    if None in a.shape:
        raise InvalidArgumentError(f"{op}: arr of shape {list(a.shape)}: its dims {KNOWN_WHEN_TRACED}")
    d = w.dtype if weights is not None else as_dtype(dtype)
    ids = a
    it = a.dtype
    zero = convert_to_tensor(0, dtype=it)
    inside = logical_and(ids >= zero, ids < convert_to_tensor(length, dtype=it))
    if per_row:
        rows = a.shape[0]
        ids = ids + _iota(rows, it, 2, 0) * convert_to_tensor(length, dtype=it)
        bins = rows * length
    else:
        bins = length
    ids = reshape(where(inside, ids, convert_to_tensor(-1, dtype=it)), [-1])
    if weights is not None:
        upd = reshape(w, [-1])
    else:
        upd = convert_to_tensor(np.ones(ids.shape[0], d.as_numpy_dtype))
    target = broadcast_to(convert_to_tensor(np.zeros((), upd.dtype.as_numpy_dtype)), [bins])
    out = apply("scatter", [target, ids, upd], {"axis": 0, "combiner": "add"})
    if binary_output:
        out = cast(out > convert_to_tensor(0, dtype=out.dtype), d)
    return reshape(out, [a.shape[0], length]) if per_row else out


# --- product segment reductions --------------------------------------------------------------


def _segment_prod(op, data, segment_ids, num):
    from ._scatter import _segment_args

    flat, ids, rest = _segment_args(op, data, segment_ids)
    d = flat.dtype
    if d.is_bool or not (d.is_floating or d.is_integer or d.is_complex):
        raise TypeError(f"{op}: data must be numeric, not {d.name}")
    n = flat.shape[0]
    # One-hot membership [num, n], the rows not in a segment as 1: a dense
    # O(num · n · row) product (no native scatter-multiply).
    member = equal(reshape(cast(ids, "int64"), [1, n]), _iota(num, "int64", 2, 0))
    member = reshape(member, [num, n] + [1] * len(rest))
    spread = where(member, expand_dims(flat, 0), convert_to_tensor(1, dtype=d))
    return reduce_prod(spread, axis=1)


def unsorted_segment_prod(data, segment_ids, num_segments, name=None):
    """``tf.math.unsorted_segment_prod``: the product of each segment (1
    for an empty one); ids outside ``[0, num_segments)`` are dropped
    (eagerly an id past the end is an error). Dense: ``O(num_segments ·
    n)`` work; differentiable (zeros included)."""
    from ._scatter import _check_ids, _int_tensor as _ids, _static_int as _num

    op = "unsorted_segment_prod"
    num = _num(num_segments, op, "num_segments")
    _check_ids(op, _ids(segment_ids, op, "segment_ids"), num)
    return _segment_prod(op, data, segment_ids, num)


def segment_prod(data, segment_ids, name=None):
    """``tf.math.segment_prod``: products of segments of sorted (eager)
    ``segment_ids``; an empty segment is 1 (as TF)."""
    from ._scatter import _check_ids, _int_tensor as _ids, _num_of_sorted

    op = "segment_prod"
    num = _num_of_sorted(op, segment_ids)
    _check_ids(op, _ids(segment_ids, op, "segment_ids"), num, sorted_=True)
    return _segment_prod(op, data, segment_ids, num)


__all__ = [
    "band_part", "bias_add", "bincount", "clip_by_global_norm", "clip_by_norm", "dropout", "embedding_lookup",
    "global_norm", "in_top_k", "invert_permutation", "l2_loss", "linspace", "log_sigmoid", "meshgrid", "norm",
    "pad", "roll", "searchsorted", "segment_prod", "sequence_mask", "unravel_index", "unsorted_segment_prod",
]
