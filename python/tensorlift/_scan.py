"""``tf.math.cumsum`` (the native ``cumsum`` op: one pass, in order) and
``cumprod``: a log-step (Hillis–Steele) scan built from the core ops. Step ``k`` combines every element with the one ``2^k``
before it, a ``pad`` that shifts the axis by ``2^k`` (filling with the
identity, 0 or 1, and dropping the tail): ``ceil(log2 n)`` elementwise steps
that fuse, trace with static shapes and differentiate as ``pad`` and
``add``/``multiply`` do (``O(n log n)`` work)."""

import numpy as np

from ._core import SymbolicTensor, Tensor, apply, convert_to_tensor
from ._ops import reverse
from .errors import InvalidArgumentError


def _shift(x, axis, k, fill):
    """``x`` moved ``k`` places along ``axis`` (towards the end), ``fill``
    coming in at the start."""
    low, high = [0] * len(x.shape), [0] * len(x.shape)
    low[axis], high[axis] = k, -k
    return apply("pad", [x, fill], {"low": low, "high": high})


def _scan(op, x, axis, exclusive, reverse_, name):
    x = x if isinstance(x, Tensor) else convert_to_tensor(x)
    if x.dtype.is_bool or x.dtype.name == "string":
        raise TypeError(f"{name}: a {x.dtype.name} tensor has no {op}")
    if x.shape is None:
        raise ValueError(f"{name} of a tensor of unknown rank: declare its shape with set_shape")
    rank = len(x.shape)
    if isinstance(axis, SymbolicTensor):
        raise TypeError(f"{name}: axis is a tensor of the traced function; it must be known when traced "
                        "(a Python int)")
    if isinstance(axis, Tensor):
        if axis.shape != () or not axis.dtype.is_integer:
            raise InvalidArgumentError(f"{name}: axis must be an integer scalar, got {axis!r}")
        axis = int(axis.numpy())
    if isinstance(axis, np.integer):
        axis = int(axis)
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise TypeError(f"{name}: axis must be a Python int, not {axis!r}")
    if rank == 0:
        raise InvalidArgumentError(f"{name} of a scalar: it needs a tensor of rank >= 1")
    if not -rank <= axis < rank:
        raise InvalidArgumentError(f"{name}: axis {axis} is out of range for a tensor of rank {rank}")
    axis %= rank
    n = x.shape[axis]
    if op == "add":
        # Native: one pass in order, any size (known when it runs).
        return apply("cumsum", [x], {"axis": axis, "reverse": bool(reverse_), "exclusive": bool(exclusive)})
    if n is None:
        raise InvalidArgumentError(
            f"{name}: dim {axis} has an unknown size; the scan's steps depend on it, so it must be known when "
            "traced (declare it in the input_signature)"
        )
    fill = convert_to_tensor(0 if op == "add" else 1, dtype=x.dtype)
    if reverse_:
        x = reverse(x, [axis])
    if exclusive and n:
        x = _shift(x, axis, 1, fill)
    k = 1
    while k < n:
        x = apply(op, [x, _shift(x, axis, k, fill)])
        k *= 2
    if reverse_:
        x = reverse(x, [axis])
    return x


def cumsum(x, axis=0, exclusive=False, reverse=False, name=None):
    """``tf.math.cumsum``: running sums along ``axis``; ``exclusive``
    leaves out each element itself (the first is 0), ``reverse`` sums from
    the end; in order, in the tensor's type (as TensorFlow and NumPy add);
    any size, also one known only when the function runs."""
    return _scan("add", x, axis, exclusive, reverse, "cumsum")


def cumprod(x, axis=0, exclusive=False, reverse=False, name=None):
    """``tf.math.cumprod``: running products along ``axis`` (``exclusive``:
    the first is 1). The gradient is exact at zeros (no division)."""
    return _scan("multiply", x, axis, exclusive, reverse, "cumprod")


__all__ = ["cumprod", "cumsum"]
