"""``tf.sort``, ``tf.argsort`` and ``tf.math.top_k`` along the last axis: a
bitonic sorting network built from the core ops. The axis is padded to a
power of two ``m``; each of the ``log2(m)·(log2(m)+1)/2`` stages pairs every
element with a partner (a gather at a constant permutation), compares them
and keeps one of the two (``where``). Elements are ordered by (padding last,
NaN largest, value, original position), a strict total order, so the sort
is stable and a NaN or an infinity sorts the same way everywhere. Values are
a gather of the input at the sorted positions, which is how they
differentiate."""

import collections

import numpy as np

from . import _native
from ._core import EagerTensor, SymbolicTensor, Tensor, apply, convert_to_tensor, site
from ._ops import (
    cast,
    equal,
    gather,
    greater,
    less,
    logical_and,
    logical_not,
    logical_or,
    reshape,
    where,
)
from .errors import InvalidArgumentError


def _direction(direction, op):
    if direction not in ("ASCENDING", "DESCENDING"):
        raise InvalidArgumentError(f"{op}: direction must be 'ASCENDING' or 'DESCENDING', got {direction!r}")
    return direction == "DESCENDING"


def _check(values, op, axis=-1):
    x = values if isinstance(values, Tensor) else convert_to_tensor(values)
    if x.shape is None or None in x.shape:
        raise InvalidArgumentError(f"{op}: the input's dims must be known (declare them in the input_signature)")
    if not (x.dtype.is_floating or x.dtype.is_integer):
        raise TypeError(f"{op}: the values must be numeric, not {x.dtype.name}")
    rank = len(x.shape)
    if rank == 0:
        raise InvalidArgumentError(f"{op}: the input must have rank >= 1, got a scalar")
    if axis not in (-1, rank - 1):
        raise InvalidArgumentError(
            f"{op}: only the last axis is supported (axis=-1), got axis={axis}; transpose the axis last first"
        )
    return x


def _before(a, ia, b, ib, descending, floating):
    """Whether element ``(a, ia)`` comes before ``(b, ib)``: padding
    (positions ``>= n``) is compared by position only, as it is the
    largest; NaN is larger than any number."""
    first = greater(a, b) if descending else less(a, b)
    same = equal(a, b)
    if floating:
        na, nb = logical_not(equal(a, a)), logical_not(equal(b, b))
        # NaN: larger than every number (first when descending).
        nan_first = logical_and(na, logical_not(nb)) if descending else logical_and(nb, logical_not(na))
        first = logical_or(nan_first, logical_and(logical_not(logical_or(na, nb)), first))
        same = logical_or(same, logical_and(na, nb))
    return logical_or(first, logical_and(same, less(ia, ib)))


def _argsort_last(x, descending):
    """The positions that sort ``x`` (known shape, rank >= 1) along its last
    axis, int32, stable."""
    shape = list(x.shape)
    n = shape[-1]
    if n <= 1:
        return convert_to_tensor(np.zeros(shape, np.int32))
    m = 1 << (n - 1).bit_length()
    lead = shape[:-1]
    floating = x.dtype.is_floating
    pos = np.arange(m, dtype=np.int32)
    idx = convert_to_tensor(np.broadcast_to(pos, [*lead, m]).copy())
    vals = x
    if m > n:
        pad = [0] * len(shape)
        hi = [0] * len(shape)
        hi[-1] = m - n
        vals = apply("pad", [x, convert_to_tensor(0, dtype=x.dtype)], {"low": pad, "high": hi})
    real = convert_to_tensor(n, dtype="int32")
    size = 2
    while size <= m:
        j = size // 2
        while j >= 1:
            partner = convert_to_tensor(pos ^ j)
            pv = gather(vals, partner, axis=-1)
            pi = gather(idx, partner, axis=-1)
            # Padding (position >= n) sorts after every element.
            pad_self, pad_other = greater(idx, real - 1), greater(pi, real - 1)
            self_first = logical_or(
                logical_and(logical_not(pad_self), pad_other),
                logical_and(equal(pad_self, pad_other), _before(vals, idx, pv, pi, descending, floating)),
            )
            # The lower of a pair in an ascending block keeps the first.
            keep_first = convert_to_tensor(((pos & j) == 0) == ((pos & size) == 0))
            take_self = equal(self_first, keep_first)
            vals = where(take_self, vals, pv)
            idx = where(take_self, idx, pi)
            j //= 2
        size *= 2
    if m > n:
        idx = apply("slice", [idx], {"start": [0] * len(shape), "limit": shape})
    return idx


_EAGER = {}


def _argsort(x, descending):
    """``_argsort_last``; eagerly as one compiled function per direction
    (hundreds of small ops, each an eager call otherwise)."""
    if isinstance(x, SymbolicTensor) or x.shape[-1] <= 1:
        return _argsort_last(x, descending)
    fn = _EAGER.get(descending)
    if fn is None:
        def body(syms, descending=descending):
            return [_argsort_last(SymbolicTensor(syms[0]), descending)._s]

        fn = _EAGER[descending] = _native.Function(body, "argsort", site(), False, None)
    return EagerTensor(fn([x._v])[0])


def _take_last(x, order):
    """``x[..., order[..., i]]`` (NumPy's take_along_axis on the last axis):
    a gather of the flattened rows, which differentiates."""
    shape = list(x.shape)
    n, k = shape[-1], list(order.shape)[-1]
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    dt = "int64" if rows * n >= 2**31 - 1 else "int32"
    offsets = convert_to_tensor((np.arange(rows, dtype=dt) * n).reshape(shape[:-1] + [1]))
    flat = cast(order, dt) + offsets
    return reshape(gather(reshape(x, [rows * n]), reshape(flat, [rows * k])), shape[:-1] + [k])


def argsort(values, axis=-1, direction="ASCENDING", stable=False, name=None):
    """``tf.argsort`` along the last axis: int32 positions; always stable
    (equal values keep their order), NaN larger than any number."""
    x = _check(values, "argsort", axis)
    return _argsort(x, _direction(direction, "argsort"))


def sort(values, axis=-1, direction="ASCENDING", name=None):
    """``tf.sort`` along the last axis (NaNs last ascending, first
    descending); differentiable (a gather at the sorted positions)."""
    x = _check(values, "sort", axis)
    return _take_last(x, _argsort(x, _direction(direction, "sort")))


def top_k(input, k=1, sorted=True, name=None):  # noqa: A002
    """``tf.math.top_k``: the ``k`` largest values along the last axis and
    their int32 positions, largest first; of equal values the earlier
    position comes first (as in TensorFlow). ``k`` must be a Python int (the
    result's shape)."""
    x = _check(input, "top_k")
    if isinstance(k, Tensor):
        if isinstance(k, SymbolicTensor):
            raise TypeError("top_k: k is a tensor of the traced function; it must be known when traced (an int)")
        k = int(k.numpy())
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"top_k: k must be an int, not {k!r}")
    n = x.shape[-1]
    if not 0 <= k <= n:
        raise InvalidArgumentError(f"top_k: k = {k} must be in [0, {n}] (the last dim)")
    order = _argsort(x, True)
    if k < n:
        shape = list(order.shape)
        order = apply("slice", [order], {"start": [0] * len(shape), "limit": shape[:-1] + [int(k)]})
    return TopKV2(_take_last(x, order), order)


TopKV2 = collections.namedtuple("TopKV2", ["values", "indices"])


def _argsort_rows(ids):
    """The stable ascending argsort of a 1-D tensor (segment ids)."""
    return _argsort(ids, False)


__all__ = ["argsort", "sort", "top_k"]
