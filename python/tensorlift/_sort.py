"""``tf.sort``, ``tf.argsort`` and ``tf.math.top_k`` on the op table's
``argsort`` (a native ``O(n log n)`` kernel: stable, NaN above every number,
-0.0 equal to 0.0) and ``take_along_axis`` (a gather, which is how the
values differentiate)."""

import collections

import numpy as np

from ._core import SymbolicTensor, Tensor, apply, convert_to_tensor
from .errors import InvalidArgumentError


def _direction(direction, op):
    if direction not in ("ASCENDING", "DESCENDING"):
        raise InvalidArgumentError(f"{op}: direction must be 'ASCENDING' or 'DESCENDING', got {direction!r}")
    return direction == "DESCENDING"


def _check(values, op, axis=-1, bools=False):
    """The input as a tensor of known shape, and ``axis`` as a
    non-negative int."""
    x = values if isinstance(values, Tensor) else convert_to_tensor(values)
    if x.shape is None or None in x.shape:
        raise InvalidArgumentError(f"{op}: the input's dims must be known when traced (declare them in the input_signature)")
    if not (x.dtype.is_floating or x.dtype.is_integer or (bools and x.dtype.is_bool)):
        raise TypeError(f"{op}: the values must be numeric, not {x.dtype.name}")
    rank = len(x.shape)
    if rank == 0:
        raise InvalidArgumentError(f"{op}: the input must have rank >= 1, got a scalar")
    if isinstance(axis, SymbolicTensor):
        raise TypeError(f"{op}: axis is a tensor of the traced function; it must be known when traced (an int)")
    if isinstance(axis, Tensor):
        axis = axis.numpy().item()
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"{op}: axis must be an int, not {axis!r}")
    if not -rank <= axis < rank:
        raise InvalidArgumentError(f"{op}: axis {axis} is out of range for a tensor of rank {rank}")
    return x, int(axis) % rank


def _argsort(x, axis, descending):
    return apply("argsort", [x], {"axis": axis, "descending": descending})


def _take_along(x, order, axis):
    """NumPy's ``take_along_axis`` (the native op: a gather, so the JIT
    fuses it and its gradient is a scatter-add)."""
    return apply("take_along_axis", [x, order], {"axis": axis})


def argsort(values, axis=-1, direction="ASCENDING", stable=False, name=None):
    """``tf.argsort``: int32 positions that sort ``values`` along ``axis``;
    always stable (equal values keep their order, also descending), NaN
    larger than any number, -0.0 equal to 0.0. Bools sort too (False
    first), which TensorFlow refuses."""
    x, axis = _check(values, "argsort", axis, bools=True)
    return _argsort(x, axis, _direction(direction, "argsort"))


def sort(values, axis=-1, direction="ASCENDING", name=None):
    """``tf.sort`` along ``axis`` (NaNs last ascending, first descending);
    differentiable (a gather at the sorted positions)."""
    x, axis = _check(values, "sort", axis)
    return _take_along(x, _argsort(x, axis, _direction(direction, "sort")), axis)


def top_k(input, k=1, sorted=True, name=None):  # noqa: A002
    """``tf.math.top_k``: the ``k`` largest values along the last axis and
    their int32 positions, largest first (NaN larger than any number); of
    equal values the earlier position comes first (as in TensorFlow). ``k``
    must be a Python int (the result's shape)."""
    x, axis = _check(input, "top_k")
    if isinstance(k, Tensor):
        if isinstance(k, SymbolicTensor):
            raise TypeError("top_k: k is a tensor of the traced function; it must be known when traced (an int)")
        k = int(k.numpy())
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"top_k: k must be an int, not {k!r}")
    n = x.shape[-1]
    if not 0 <= k <= n:
        raise InvalidArgumentError(f"top_k: k = {k} must be in [0, {n}] (the last dim)")
    order = _argsort(x, axis, True)
    if k < n:
        shape = list(order.shape)
        order = apply("slice", [order], {"start": [0] * len(shape), "limit": shape[:-1] + [int(k)]})
    return TopKV2(_take_along(x, order, axis), order)


TopKV2 = collections.namedtuple("TopKV2", ["values", "indices"])


__all__ = ["argsort", "sort", "top_k"]
