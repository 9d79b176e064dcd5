"""tensorlift: an XLA-style JIT compiler for tensor programs, with
TensorFlow's names.

    import tensorlift as tl

    @tl.function(jit_compile=True)
    def f(x):
        return tl.numpy_function(np.sinc, [x * 2.0], tl.float32) + 1.0

Traced once per input signature, optimized, fused and compiled to native
code; host callbacks (``numpy_function``, ``py_func``) run inside the
compiled code. See docs/python.md.
"""

from . import _native  # noqa: F401  (the extension module)
from . import dtypes, errors
from ._callbacks import numpy_function, py_func, py_function
from ._control import cond, switch_case, while_loop
from ._core import Tensor, TensorShape, convert_to_tensor, is_tensor
from ._function import Function, TensorSpec, function
from ._ops import (
    abs,
    add,
    argmax,
    argmin,
    broadcast_to,
    cast,
    clip_by_value,
    concat,
    cos,
    divide,
    equal,
    exp,
    expand_dims,
    fill,
    greater,
    greater_equal,
    identity,
    less,
    less_equal,
    log,
    logical_and,
    logical_not,
    logical_or,
    matmul,
    maximum,
    minimum,
    multiply,
    negative,
    not_equal,
    ones,
    ones_like,
    pow,
    rank,
    reduce_all,
    reduce_any,
    reduce_logsumexp,
    reduce_max,
    reduce_mean,
    reduce_min,
    reduce_prod,
    reduce_sum,
    reshape,
    reverse,
    round,
    shape,
    sigmoid,
    sign,
    sin,
    size,
    sqrt,
    square,
    squeeze,
    stack,
    stop_gradient,
    subtract,
    tanh,
    transpose,
    where,
    zeros,
    zeros_like,
)
from ._ops import slice_ as slice  # noqa: A004  (TensorFlow's name)
from ._more_ops import add_n, eye, one_hot, range, split, tile, unstack  # noqa: A004  (TensorFlow's names)
from ._einsum import einsum
from ._more_ops2 import (
    clip_by_global_norm,
    clip_by_norm,
    linspace,
    meshgrid,
    norm,
    pad,
    roll,
    searchsorted,
    sequence_mask,
    unravel_index,
)
from ._scan import cumsum
from ._scatter import (
    gather,  # (with batch_dims)
    gather_nd,
    scatter_nd,
    tensor_scatter_nd_add,
    tensor_scatter_nd_max,
    tensor_scatter_nd_min,
    tensor_scatter_nd_sub,
    tensor_scatter_nd_update,
)
from ._sort import argsort, sort
from ._tape import GradientTape, custom_gradient
from .dtypes import (
    DType,
    as_dtype,
    bfloat16,
    complex64,
    complex128,
    double,
    float16,
    float32,
    float64,
    half,
    int8,
    int16,
    int32,
    int64,
    string,
    uint8,
    uint16,
    uint32,
    uint64,
)
from .dtypes import bool as bool  # noqa: PLC0414

from . import compat, contrib, linalg, math, nn, random  # noqa: E402

__version__ = "0.1.0"


def constant(value, dtype=None, shape=None, name=None):
    """``tf.constant``: an eager tensor of ``value`` (Python values get
    float32/int32, NumPy arrays keep their dtype), broadcast to ``shape``."""
    t = convert_to_tensor(value, dtype=dtype)
    if shape is not None and list(t.shape) != list(shape):
        t = reshape(t, shape) if t.shape.num_elements() == _prod(shape) else broadcast_to(t, shape)
    return t


def trim_buffer_cache():
    """Gives back the memory tensorlift keeps for reuse (the buffers of
    earlier results and temporaries, which later calls would take instead
    of allocating): returns the bytes freed. Nothing in use is touched; the
    next calls allocate afresh. Not in TensorFlow."""
    return _native.trim_buffer_cache()


def _prod(shape):
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _before_fork():
    """``os.fork()`` copies this thread only: a lock another thread holds
    in tensorlift (a function being compiled or traced there) stays held in
    the child for ever, and its first call of that function hangs (seen
    once in ~20–60 forks while a thread called a compiled function). As
    JAX does, say so when other threads run."""
    import threading
    import warnings

    if threading.active_count() > 1:
        warnings.warn(
            "os.fork() while other threads run: a tensorlift lock one of them holds (a function being "
            "traced or compiled) stays held in the child, whose call of that function would hang; use "
            "multiprocessing's 'spawn' or 'forkserver' start method",
            RuntimeWarning,
            stacklevel=2,
        )


def _register_at_fork():
    import os

    if hasattr(os, "register_at_fork"):
        os.register_at_fork(before=_before_fork)


_register_at_fork()
