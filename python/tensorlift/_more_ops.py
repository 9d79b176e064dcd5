"""TensorFlow ops built from the core ones (so that they trace, compile and
differentiate as those do): activations, elementwise math, and layout ops
users porting models reach for first."""

import builtins
import math as _math

import numpy as np

from ._core import Tensor, convert_to_tensor
from ._ops import (
    abs,
    broadcast_to,
    cos,
    equal,
    erf,
    exp,
    expand_dims,
    expm1,
    gather,
    log,
    log1p,
    maximum,
    reduce_mean,
    reduce_sum,
    reshape,
    rsqrt,
    sigmoid,
    sin,
    slice_,
    sqrt,
    squeeze,
    stop_gradient,
    tanh,
    where,
)
from .dtypes import as_dtype
from .errors import InvalidArgumentError


def _c(value, like):
    """A Python number as a scalar of ``like``'s dtype."""
    return convert_to_tensor(value, dtype=like.dtype)


# --- activations (tf.nn) -------------------------------------------------------


def gelu(features, approximate=False, name=None):
    """``tf.nn.gelu``: ``x·Φ(x)`` (``erf``), or its ``tanh`` approximation."""
    x = convert_to_tensor(features)
    if approximate:
        inner = _c(_math.sqrt(2 / _math.pi), x) * (x + _c(0.044715, x) * x * x * x)
        return _c(0.5, x) * x * (_c(1, x) + tanh(inner))
    return _c(0.5, x) * x * (_c(1, x) + erf(x * _c(1 / _math.sqrt(2), x)))


def softplus(features, name=None):
    """``tf.nn.softplus``: ``log(1 + exp(x))``, without overflow; its
    gradient ``sigmoid(x)``, 0.5 at 0 (each branch sees only the inputs it
    takes: ``abs`` would differentiate to 1 at 0)."""
    x = convert_to_tensor(features)
    zero = _c(0, x)
    up = x >= zero
    pos = where(up, x, zero)
    neg = where(up, zero, x)
    return where(up, x + log1p(exp(-pos)), log1p(exp(neg)))


def leaky_relu(features, alpha=0.2, name=None):
    """``tf.nn.leaky_relu``: ``x`` where positive, else ``alpha·x``."""
    x = convert_to_tensor(features)
    return where(x > _c(0, x), x, _c(alpha, x) * x)


def elu(features, name=None):
    """``tf.nn.elu``: ``x`` where positive, else ``exp(x) - 1``."""
    x = convert_to_tensor(features)
    return where(x > _c(0, x), x, expm1(where(x > _c(0, x), _c(0, x), x)))


def relu6(features, name=None):
    """``tf.nn.relu6``: ``min(max(x, 0), 6)``."""
    x = convert_to_tensor(features)
    return where(x <= _c(0, x), _c(0, x), where(x >= _c(6, x), _c(6, x), x))


def silu(features, beta=1.0, name=None):
    """``tf.nn.silu`` (``swish``): ``x·sigmoid(beta·x)``."""
    x = convert_to_tensor(features)
    return x * sigmoid(_c(beta, x) * x)


swish = silu


def l2_normalize(x, axis=None, epsilon=1e-12, name=None):
    """``tf.math.l2_normalize``: ``x / sqrt(max(sum(x²), epsilon))``."""
    x = convert_to_tensor(x)
    square_sum = reduce_sum(x * x, axis=axis, keepdims=True)
    return x * rsqrt(maximum(square_sum, _c(epsilon, x)))


def moments(x, axes, shift=None, keepdims=False, name=None):
    """``tf.nn.moments``: ``(mean, variance)`` over ``axes``."""
    x = convert_to_tensor(x)
    mean = reduce_mean(x, axis=axes, keepdims=True)
    variance = reduce_mean((x - stop_gradient(mean)) ** _c(2, x), axis=axes, keepdims=True)
    # (The gradient of the variance through the mean is zero: the centred
    # values sum to zero, as TensorFlow's squared_difference has it.)
    if not keepdims:
        mean, variance = squeeze(mean, _axes(axes, len(x.shape))), squeeze(variance, _axes(axes, len(x.shape)))
    return mean, variance


def _axes(axes, rank):
    axes = [axes] if isinstance(axes, int) else list(axes)
    return [a % rank for a in axes]


# --- elementwise math (tf.math) ---------------------------------------------------


def tan(x, name=None):
    """``tf.math.tan``: ``sin(x) / cos(x)``."""
    x = convert_to_tensor(x)
    return sin(x) / cos(x)


def is_nan(x, name=None):
    """``tf.math.is_nan``."""
    x = convert_to_tensor(x)
    return x != x


def is_inf(x, name=None):
    """``tf.math.is_inf``."""
    x = convert_to_tensor(x)
    return equal(abs(x), _c(np.inf, x))


def squared_difference(x, y, name=None):
    """``tf.math.squared_difference``: ``(x - y)²``."""
    d = convert_to_tensor(x) - y
    return d * d


def divide_no_nan(x, y, name=None):
    """``tf.math.divide_no_nan``: ``x / y``, and 0 where ``y`` is 0 (its
    gradient too: the division sees a safe denominator there)."""
    x, y = convert_to_tensor(x), convert_to_tensor(y)
    zero = equal(y, _c(0, y))
    safe = where(zero, _c(1, y), y)
    return where(zero, _c(0, x) * x, x / safe)


def xlogy(x, y, name=None):
    """``tf.math.xlogy``: ``x·log(y)``, and 0 where ``x`` is 0."""
    x, y = convert_to_tensor(x), convert_to_tensor(y)
    zero = equal(x, _c(0, x))
    safe = where(zero, _c(1, y), y)
    return where(zero, _c(0, x) * y, x * log(safe))


def add_n(inputs, name=None):
    """``tf.math.add_n``: the sum of a list of tensors of one shape."""
    inputs = [convert_to_tensor(v) for v in inputs]
    if not inputs:
        raise InvalidArgumentError("add_n needs at least one tensor")
    total = inputs[0]
    for v in inputs[1:]:
        total = total + v
    return total


def reduce_variance(input_tensor, axis=None, keepdims=False, name=None):
    """``tf.math.reduce_variance``."""
    x = convert_to_tensor(input_tensor)
    mean = reduce_mean(x, axis=axis, keepdims=True)
    d = x - mean
    return reduce_mean(d * d, axis=axis, keepdims=keepdims)


def reduce_std(input_tensor, axis=None, keepdims=False, name=None):
    """``tf.math.reduce_std``."""
    return sqrt(reduce_variance(input_tensor, axis=axis, keepdims=keepdims))


# --- layout ------------------------------------------------------------------------


def range(start, limit=None, delta=1, dtype=None, name=None):  # noqa: A001
    """``tf.range`` of Python numbers: a constant (int32 for ints, float32
    for floats, as TensorFlow)."""
    if limit is None:
        start, limit = 0, start
    values = [v.numpy().item() if isinstance(v, Tensor) else v for v in (start, limit, delta)]
    if any(not isinstance(v, (int, float, np.integer, np.floating)) for v in values):
        raise TypeError("tl.range takes Python numbers (a traced bound would give a shape known only at run time)")
    a = np.arange(*values)
    if dtype is None:
        dtype = "int32" if a.dtype.kind in "iu" else "float32"
    return convert_to_tensor(a.astype(as_dtype(dtype).as_numpy_dtype))


def eye(num_rows, num_columns=None, batch_shape=None, dtype="float32", name=None):
    """``tf.eye``."""
    m = np.eye(int(num_rows), None if num_columns is None else int(num_columns), dtype=as_dtype(dtype).as_numpy_dtype)
    t = convert_to_tensor(m)
    if batch_shape:
        t = broadcast_to(t, [*[int(d) for d in batch_shape], *m.shape])
    return t


def one_hot(indices, depth, on_value=None, off_value=None, axis=-1, dtype=None, name=None):
    """``tf.one_hot``: a new axis of ``depth`` holding ``on_value`` (1) at
    each index and ``off_value`` (0) elsewhere (an index out of range gives
    a row of ``off_value``)."""
    indices = convert_to_tensor(indices)
    if not indices.dtype.is_integer:
        raise TypeError(f"one_hot: indices must be integers, not {indices.dtype.name}")
    dt = as_dtype(dtype) if dtype is not None else (
        convert_to_tensor(on_value).dtype if on_value is not None else as_dtype("float32"))
    on = convert_to_tensor(1 if on_value is None else on_value, dtype=dt)
    off = convert_to_tensor(0 if off_value is None else off_value, dtype=dt)
    rank = len(indices.shape)
    axis = rank if axis == -1 else axis
    if not 0 <= axis <= rank:
        raise InvalidArgumentError(f"one_hot: axis {axis} out of range for indices of rank {rank}")
    positions = convert_to_tensor(np.arange(int(depth)).astype(indices.dtype.as_numpy_dtype))
    shape = [1] * (rank + 1)
    shape[axis] = int(depth)
    hot = equal(expand_dims(indices, axis), reshape(positions, shape))
    return where(hot, on, off)


def tile(input, multiples, name=None):  # noqa: A002
    """``tf.tile``: ``input`` repeated ``multiples[i]`` times along dim ``i``."""
    x = convert_to_tensor(input)
    shape = list(x.shape)
    multiples = [int(m) for m in (multiples.numpy() if isinstance(multiples, Tensor) else multiples)]
    if len(multiples) != len(shape):
        raise InvalidArgumentError(f"tile: {len(multiples)} multiples for a tensor of rank {len(shape)}")
    if None in shape:
        raise InvalidArgumentError("tile: the dims must be known when traced (declare them in the input_signature)")
    spread = reshape(x, [d for n in shape for d in (1, n)])
    wide = broadcast_to(spread, [d for m, n in zip(multiples, shape) for d in (m, n)])
    return reshape(wide, [m * n for m, n in zip(multiples, shape)])


def split(value, num_or_size_splits, axis=0, num=None, name=None):
    """``tf.split``: a list of pieces along ``axis``, ``num_or_size_splits``
    equal ones or of the sizes given (one may be -1: the rest)."""
    x = convert_to_tensor(value)
    shape = list(x.shape)
    axis = axis % len(shape)
    n = shape[axis]
    if n is None:
        raise InvalidArgumentError("split: the split dim must be known when traced")
    if isinstance(num_or_size_splits, int):
        if num_or_size_splits <= 0 or n % num_or_size_splits:
            raise InvalidArgumentError(f"split: dim {axis} of size {n} does not split into {num_or_size_splits}")
        sizes = [n // num_or_size_splits] * num_or_size_splits
    else:
        sizes = [int(s) for s in num_or_size_splits]
        if sizes.count(-1) == 1:
            sizes[sizes.index(-1)] = n - (sum(sizes) + 1)
        if sum(sizes) != n or any(s < 0 for s in sizes):
            raise InvalidArgumentError(f"split: sizes {sizes} do not add up to dim {axis} of size {n}")
    pieces, at = [], 0
    for s in sizes:
        begin = [0] * len(shape)
        begin[axis] = at
        size = list(shape)
        size[axis] = s
        pieces.append(slice_(x, begin, size))
        at += s
    return pieces


def unstack(value, num=None, axis=0, name=None):
    """``tf.unstack``: the slices along ``axis`` (its size known)."""
    x = convert_to_tensor(value)
    rank = len(x.shape)
    axis = axis % rank
    n = x.shape[axis]
    if n is None:
        raise InvalidArgumentError("unstack: the unstacked dim must be known when traced")
    return [gather(x, convert_to_tensor(i, dtype="int32"), axis=axis) for i in builtins.range(n)]


__all__ = [
    "add_n", "divide_no_nan", "elu", "eye", "gelu", "is_inf", "is_nan", "l2_normalize", "leaky_relu", "moments",
    "one_hot", "range", "reduce_std", "reduce_variance", "relu6", "silu", "softplus", "split", "squared_difference",
    "swish", "tan", "tile", "unstack", "xlogy",
]
