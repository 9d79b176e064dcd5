"""Tensors and op dispatch.

A ``Tensor`` is either eager (``EagerTensor``: a value, computed now) or
symbolic (``SymbolicTensor``: a value of the function being traced). Every
op goes through ``apply``: on symbolic operands it adds a node to the trace
at the caller's line, on eager ones it runs the same op at once (through a
one-op interpreted function, so an op means the same thing both ways), and
in both cases active gradient tapes record it.
"""

import operator
import os
import sys
import threading

import numpy as np

from . import _native
from .dtypes import as_dtype

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


# What the errors of ops that need a dim's size (or a value) while tracing
# say: a function whose input_signature has None dims is then traced per
# concrete shape instead (`Function._go_per_shape`).
KNOWN_WHEN_TRACED = "must be known when traced"


def site():
    """The user's frame that called into tensorlift: ``(file, line)``."""
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith(_PACKAGE_DIR):
        f = f.f_back
    if f is None:
        return ("<unknown>", 0)
    return (f.f_code.co_filename, f.f_lineno)


class TensorShape(tuple):
    """A shape: a tuple of ints (None where unknown), TensorFlow's way."""

    @property
    def rank(self):
        return len(self)

    @property
    def ndims(self):
        return len(self)

    def as_list(self):
        return list(self)

    def num_elements(self):
        n = 1
        for d in self:
            if d is None:
                return None
            n *= d
        return n

    def __repr__(self):
        return f"TensorShape({list(self)})"


class Tensor:
    """A tensor (``tf.Tensor``): eager or symbolic; see the module doc."""

    __slots__ = ()
    # NumPy defers to these operators (array + tensor is a tensor).
    __array_priority__ = 100

    @property
    def ndim(self):
        return len(self.shape)

    def get_shape(self):
        return self.shape

    def __add__(self, o):
        return binary("add", self, o)

    def __radd__(self, o):
        return binary("add", o, self)

    def __sub__(self, o):
        return binary("subtract", self, o)

    def __rsub__(self, o):
        return binary("subtract", o, self)

    def __mul__(self, o):
        return binary("multiply", self, o)

    def __rmul__(self, o):
        return binary("multiply", o, self)

    def __truediv__(self, o):
        return binary("divide", self, o)

    def __rtruediv__(self, o):
        return binary("divide", o, self)

    def __mod__(self, o):
        return binary("floormod", self, o)

    def __rmod__(self, o):
        return binary("floormod", o, self)

    def __floordiv__(self, o):
        return binary("floordiv", self, o)

    def __rfloordiv__(self, o):
        return binary("floordiv", o, self)

    def __pow__(self, o):
        return binary("pow", self, o)

    def __rpow__(self, o):
        return binary("pow", o, self)

    def __matmul__(self, o):
        return binary("matmul", self, o)

    def __rmatmul__(self, o):
        return binary("matmul", o, self)

    def __neg__(self):
        return apply("negative", [self])

    def __abs__(self):
        return apply("abs", [self])

    def __invert__(self):
        return apply("logical_not", [self])

    def __and__(self, o):
        return binary("logical_and", self, o)

    def __or__(self, o):
        return binary("logical_or", self, o)

    def __xor__(self, o):
        return binary("logical_xor", self, o)

    def __lt__(self, o):
        return binary("less", self, o)

    def __le__(self, o):
        return binary("less_equal", self, o)

    def __gt__(self, o):
        return binary("greater", self, o)

    def __ge__(self, o):
        return binary("greater_equal", self, o)

    def __eq__(self, o):
        # TensorFlow 2: a tensor is never None (`t == None` is False).
        if o is None:
            return False
        return binary("equal", self, o)

    def __ne__(self, o):
        if o is None:
            return True
        return binary("not_equal", self, o)

    # Elementwise __eq__ makes tensors unhashable, as in TensorFlow;
    # tensorlift keys its own tables by id().
    __hash__ = None

    def __getitem__(self, key):
        return getitem(self, key)


class EagerTensor(Tensor):
    """A tensor with a value (``tf.Tensor`` in eager mode)."""

    __slots__ = ("_v", "__weakref__")

    def __init__(self, v):
        self._v = v

    @property
    def shape(self):
        return TensorShape(self._v.shape)

    @property
    def dtype(self):
        return as_dtype(self._v.dtype)

    def numpy(self):
        """The value as a NumPy array (a copy, as in TensorFlow: the array
        is the caller's to change)."""
        return self._v.numpy()

    def set_shape(self, shape):
        """``Tensor.set_shape`` of an eager tensor, whose shape is known: a
        check that ``shape`` (None for an unknown dim or rank) is compatible
        with it, a ``ValueError`` if not."""
        mine = tuple(self._v.shape)
        if shape is None:
            return
        want = [None if d is None else int(d) for d in shape]
        if len(want) != len(mine) or any(w is not None and w != m for w, m in zip(want, mine)):
            raise ValueError(
                f"incompatible shapes: the tensor's shape {list(mine)} is not compatible with "
                f"the supplied shape {want}"
            )

    def __array__(self, dtype=None, copy=None):
        # np.asarray(t): a read-only view of the tensor's buffer, no copy
        # (np.array(t) and copy=True copy).
        a = self._v.numpy() if copy else _native.view(self._v)
        return a if dtype is None else a.astype(dtype, copy=bool(copy))

    def __bool__(self):
        return bool(self._v)

    def __float__(self):
        return float(self._v.numpy())

    def __int__(self):
        return int(self._v.numpy())

    def __index__(self):
        return int(self._v.numpy())

    def __len__(self):
        s = self._v.shape
        if not s:
            raise TypeError("len() of a 0-d tensor")
        return s[0]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __repr__(self):
        return f"<tl.Tensor: shape={tuple(self._v.shape)}, dtype={self._v.dtype}, numpy={self.numpy()!r}>"

    def __str__(self):
        return f"tl.Tensor({self.numpy()}, shape={tuple(self._v.shape)}, dtype={self._v.dtype})"

    def __reduce__(self):
        return (constant_of, (self.numpy(), self._v.dtype))


class SymbolicTensor(Tensor):
    """A value of the function being traced: it has a dtype and a shape,
    but no value until the function runs."""

    __slots__ = ("_s", "__weakref__")

    def __init__(self, s):
        self._s = s

    @property
    def shape(self):
        s = self._s.shape
        return None if s is None else TensorShape(s)

    @property
    def dtype(self):
        return as_dtype(self._s.dtype)

    def set_shape(self, shape):
        """Declares the shape of a callback's result (``Tensor.set_shape``):
        later ops see it, and every call checks it. A shape the tensor
        already has statically is no declaration to make (as TensorFlow's
        merge of compatible shapes)."""
        dims = [None if d is None else int(d) for d in shape]
        known = self.shape
        if known is not None and None not in known and list(known) == dims:
            return
        self._s = _native.sym_set_shape(self._s, dims, site())

    def numpy(self):
        raise TypeError(
            "a symbolic tensor of a traced function has no value yet: .numpy() works on eager "
            "tensors; inside tl.function use tl.numpy_function to run NumPy code"
        )

    def __array__(self, dtype=None, copy=None):
        self.numpy()

    def __bool__(self):
        raise TypeError(
            "using a symbolic tensor as a Python bool is not allowed in a traced function: "
            "use tl.cond or tl.while_loop for control flow that depends on a tensor"
        )

    def __len__(self):
        s = self.shape
        if not s or s[0] is None:  # unknown rank, 0-d, or unknown first dimension
            raise TypeError("len() of a tensor without a known first dimension")
        return s[0]

    def __iter__(self):
        # Without it Python would index 0, 1, 2, ... until an IndexError,
        # which a clamped traced index never raises.
        s = self.shape
        if not s or s[0] is None:
            raise TypeError(
                f"iterating over a symbolic tensor of shape {self._s.shape} in a traced function: the "
                "first dimension must be known (a loop over it is unrolled); for a dimension known only "
                "when the function runs, use tl.while_loop over its indices"
            )
        for i in range(s[0]):
            yield self[i]

    def _no_python_value(self, what):
        raise TypeError(
            f"{what} of a symbolic tensor in a traced function: it has no value until the function "
            "runs; use tensor ops (tl.cast for a dtype), tl.cond / tl.while_loop for control flow, "
            "or tl.numpy_function for Python code on its value"
        )

    def __float__(self):
        self._no_python_value("float()")

    def __int__(self):
        self._no_python_value("int()")

    def __index__(self):
        self._no_python_value("Using as a Python integer (an index, range(), a size)")

    def __repr__(self):
        return f"<tl.Tensor (symbolic): shape={self._s.shape}, dtype={self._s.dtype}>"


def constant_of(array, dtype):
    return EagerTensor(_native.to_tensor(array, dtype))


def is_tensor(x):
    return isinstance(x, Tensor)


def _default_dtype(value):
    """TensorFlow's dtype for a Python value: float32 for floats, int32
    for ints (int64 when they do not fit), bool, complex128 -> complex64."""
    a = np.asarray(value)
    if a.dtype == np.float64:
        return "float32"
    if a.dtype == np.int64:
        if a.size and (a.max() > 2**31 - 1 or a.min() < -(2**31)):
            return "int64"
        return "int32"
    if a.dtype == np.complex128:
        return "complex64"
    if a.dtype.kind == "O" and _too_big_int(value):
        # (NumPy keeps a Python int past 64 bits as an object.)
        raise OverflowError(
            f"Cannot convert {_short_repr(value)} to a tensor: a Python integer is out of the range of int64"
        )
    if a.dtype.kind in "OSU":
        return "string"
    return None


def _too_big_int(value):
    """Whether ``value`` holds a Python int outside int64's range (also in
    nested lists)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return not -(2**63) <= value < 2**63
    if isinstance(value, (list, tuple)):
        return any(_too_big_int(v) for v in value)
    return False


def convert_to_tensor(value, dtype=None, dtype_hint=None, name=None):
    """``value`` as a tensor (``tf.convert_to_tensor``). NumPy arrays keep
    their dtype; Python values get TensorFlow's defaults (float32, int32)."""
    if isinstance(value, Tensor):
        if dtype is not None and as_dtype(dtype) != value.dtype:
            raise ValueError(
                f"tensor of dtype {value.dtype.name} where {as_dtype(dtype).name} was asked for"
            )
        return value
    if isinstance(value, (list, tuple)) and _holds_symbolic(value):
        # TensorFlow packs a list holding tensors (`[[i]]`, `[i, 2]`).
        return _pack(value, dtype or _first_dtype(value))
    if dtype is None:
        if isinstance(value, (np.ndarray, np.generic)):
            d = None
        else:
            d = _default_dtype(value)
            if d is not None and dtype_hint is not None:
                hint = as_dtype(dtype_hint)
                if not (hint.is_integer and d.startswith("float")):
                    d = hint.name
    else:
        dt = as_dtype(dtype)
        if not isinstance(value, (np.ndarray, np.generic)):
            _check_python_value(value, dt)
        d = dt.name
    return EagerTensor(_native.to_tensor(value, d))


def _holds_symbolic(value):
    return isinstance(value, SymbolicTensor) or (
        isinstance(value, (list, tuple)) and any(_holds_symbolic(v) for v in value)
    )


def _first_dtype(value):
    if isinstance(value, Tensor):
        return value.dtype
    if isinstance(value, (list, tuple)):
        for v in value:
            d = _first_dtype(v)
            if d is not None:
                return d
    return None


def _pack(value, dtype):
    """A nested list holding tensors as one tensor (``tf.stack`` of its
    items, level by level): Python numbers take the tensors' dtype."""
    from . import _ops

    items = [
        _pack(v, dtype) if isinstance(v, (list, tuple)) else convert_to_tensor(v, dtype=dtype)
        for v in value
    ]
    if not items:
        raise ValueError("cannot pack an empty list beside tensors into one tensor")
    return _ops.stack(items, axis=0)


def _check_python_value(value, dt):
    """TensorFlow refuses a Python value the dtype would change: a float
    into an integer or bool tensor (``tl.constant(3) + 0.5`` would be 3), a
    complex number into a real one."""
    try:
        array = np.asarray(value)
    except (TypeError, ValueError):
        return
    kind = array.dtype.kind
    if (kind == "f" and (dt.is_integer or dt.is_bool)) or (kind == "c" and not dt.is_complex):
        raise TypeError(f"Cannot convert {value!r} to a tensor of dtype {dt.name}")
    if kind in "iu" and dt.is_integer and array.size:
        # NumPy integers beside a narrower tensor would wrap (Python ints
        # are checked by NumPy itself).
        limits = np.iinfo(dt.as_numpy_dtype)
        if array.min() < limits.min or array.max() > limits.max:
            raise OverflowError(
                f"Cannot convert {_short_repr(value)} to a tensor of dtype {dt.name}: out of its range"
            )


def _short_repr(v, n=60):
    r = repr(v)
    return r if len(r) <= n else r[: n - 3] + "..."


class _ThreadState(threading.local):
    """What this thread is recording and tracing now. Per thread, as
    TensorFlow's tapes are: a tape records only the ops of the thread that
    opened it, and another thread tracing a loop body does not pause it."""

    def __init__(self):
        # Gradient tapes recording now (set by tape.GradientTape).
        self.tapes = []
        # The tl.functions being traced now, innermost last: callbacks
        # register their targets with it (for pickling).
        self.tracing_functions = []
        # Set while a custom gradient's function is traced again (in its
        # gradient region) only to get its grad_fn: the callbacks of that
        # forward pass ran already, so they are made stateless there and
        # removed when unused.
        self.forward_retrace = 0
        # How many loop or branch bodies are being traced now: a tape does
        # not record the ops inside them (the loop or branch is recorded as
        # one op).
        self.region_depth = 0
        # While a tl.function runs under a tape: the results its stateful
        # callbacks return, by (kind, creation site), in the order they ran;
        # and while its replay for the gradient is traced, those results
        # (queues the replay takes from), so that the gradient sees the
        # values the call computed (a random mask, a data source) instead
        # of running the callbacks again.
        self.callback_log = None
        self.callback_replay = None
        # How many of the bodies being traced (region_depth) are loops'.
        self.loop_depth = 0
        # While the body of an outermost loop is traced in a replay: its
        # iteration number (a symbolic int32), which picks the values each
        # iteration's stateful callbacks returned.
        self.replay_iteration = None


state = _ThreadState()


def register_callback(target, func):
    """Notes that callback ``target`` of the function being traced calls ``func``."""
    if target is not None and state.tracing_functions:
        state.tracing_functions[-1]._callbacks[target] = func


def record(replay, inputs, outputs, captures=False):
    """Records an op on the active tapes: ``replay(inputs)`` recomputes
    ``outputs`` (a list) on symbolic inputs; with ``captures``, a loop or
    branch whose bodies may read other values."""
    for t in state.tapes:
        t._record(replay, inputs, outputs, captures)


def _wrap(out, symbolic):
    if symbolic:
        return [SymbolicTensor(s) for s in out]
    return [EagerTensor(v) for v in out]


def to_sym(x, like, where):
    """``x`` (a tensor) as a symbolic value of the trace ``like`` is in."""
    if isinstance(x, SymbolicTensor):
        return x._s
    return _native.sym_constant(like, x._v, where)


def apply(name, inputs, attrs=None):
    """Runs or traces op ``name`` on tensors ``inputs``; one result."""
    return apply_n(name, inputs, attrs)[0]


def _static_attr(op, key, v):
    """An attribute given as tensors (an eager tensor, or a list holding
    them: ``axis=tf.constant(1)``) as the Python values it holds. A value
    computed inside a traced function is not known until it runs, and the
    op needs it to build its graph: a clear error, where an axis read from
    it was once taken as no axis at all (the input came back unreduced)."""
    if isinstance(v, (list, tuple)):
        return [_static_attr(op, key, x) for x in v]
    if isinstance(v, SymbolicTensor):
        raise TypeError(
            f"{op}: {key} is a tensor of the traced function ({v!r}), whose value is only known when "
            f"it runs; {op} needs it while tracing: pass a Python value (an int or a list of ints; "
            "a Python argument of a tl.function is static)"
        )
    if isinstance(v, Tensor):
        return v.numpy().tolist()
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, int) and not isinstance(v, bool) and not -(2**63) <= v < 2**63:
        from .errors import InvalidArgumentError

        raise InvalidArgumentError(f"{op}: {key} {v} is out of range (a 64-bit integer)")
    return v


def apply_n(name, inputs, attrs=None):
    """Runs or traces op ``name``; every result."""
    if attrs:
        attrs = {k: _static_attr(name, k, v) for k, v in attrs.items()}
    inputs = [x if isinstance(x, Tensor) else convert_to_tensor(x) for x in inputs]
    like = next((x._s for x in inputs if isinstance(x, SymbolicTensor)), None)
    if like is not None:
        where = site()
        args = [to_sym(x, like, where) for x in inputs]
        out = _wrap(_native.sym_apply(name, args, where, attrs), True)
    else:
        out = _wrap(_native.eager_apply(name, [x._v for x in inputs], attrs, site()), False)
    if state.tapes:
        record(lambda xs, name=name, attrs=attrs: apply_n(name, xs, attrs), inputs, out)
    return out


def binary(name, a, b):
    """A binary op; a Python or NumPy scalar or list takes the tensor
    operand's dtype, unless that would change its value's kind (a float
    into an integer tensor: a TypeError, as in TensorFlow)."""
    if not isinstance(a, Tensor):
        _check_number(a, b.dtype)
        a = convert_to_tensor(a, dtype=b.dtype)
    elif not isinstance(b, Tensor):
        _check_number(b, a.dtype)
        b = convert_to_tensor(b, dtype=a.dtype)
    return apply(name, [a, b])


def _check_number(value, dtype):
    """`_check_python_value` for NumPy scalars and arrays too (beside a
    tensor, `tl.constant(3) + np.float64(0.5)` would be 3)."""
    if isinstance(value, (np.ndarray, np.generic)):
        _check_python_value(value, as_dtype(dtype))


def getitem(x, key):
    """Basic indexing: ints, scalar integer tensors, slices (any step),
    ``...`` and ``None``; dims of unknown size take ints, tensors, ``None``
    and the slices a crop expresses (``a:``, ``a:-b``, step 1)."""
    if not isinstance(key, tuple):
        key = (key,)
    if x.shape is None:
        raise TypeError("indexing needs a tensor of known rank: declare its shape with set_shape")
    shape = list(x.shape)
    for k in key:
        if isinstance(k, (float, np.floating)):
            raise TypeError(
                f"an index must be an integer, a slice, '...' or None, not the float {k!r}"
            )
        if isinstance(k, Tensor) and (not k.dtype.is_integer or k.shape != ()):
            raise TypeError(
                "only integers, slices, '...', None and scalar integer tensors are valid "
                f"indices, not a tensor of dtype {k.dtype.name} and shape {list(k.shape)}"
            )
        if isinstance(k, list) or (isinstance(k, np.ndarray) and k.ndim) or (isinstance(k, tuple) and k):
            # (TensorFlow's message; NumPy's fancy indexing is tl.gather.)
            raise TypeError(
                "only integers, slices, '...', None and scalar integer tensors are valid indices, "
                f"got {k!r}: gather several positions with tl.gather(x, {k!r}, axis=...)"
            )
        if isinstance(k, slice) and any(isinstance(b, SymbolicTensor) for b in (k.start, k.stop, k.step)):
            raise TypeError(
                "a slice bound is a tensor of the traced function (x[a:]): the result's size would be "
                "known only when the function runs, and tensorlift traces static shapes. Slice with "
                "Python ints (a dim of unknown size takes crops: x[2:], x[2:-1]), take a fixed-size "
                "window with tl.slice, or mask with tl.where"
            )
    if sum(k is Ellipsis for k in key) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(1 for k in key if k is not None and k is not Ellipsis)
    if used > len(shape):
        raise IndexError(f"too many indices for a tensor of rank {len(shape)}")
    expanded = []
    for k in key:
        if k is Ellipsis:
            expanded.extend([slice(None)] * (len(shape) - used))
        else:
            expanded.append(k)
    expanded.extend([slice(None)] * (len(shape) - sum(1 for k in expanded if k is not None)))
    if any(d is None for d in shape) or any(isinstance(k, SymbolicTensor) for k in expanded):
        return _getitem_dynamic(x, expanded)
    start, limit, stride, reverse, out_shape = [], [], [], [], []
    axis = 0
    for k in expanded:
        if k is None:
            out_shape.append(1)
            continue
        n = shape[axis]
        if isinstance(k, slice):
            lo, hi, step = k.indices(n)
            if step > 0:
                count = max(0, (hi - lo + step - 1) // step)
                start.append(lo)
                limit.append(lo + max(count - 1, 0) * step + (1 if count else 0))
                # (A step past the dim selects one element: any step does,
                # and one of 2**63 overflowed the compiler's arithmetic.)
                stride.append(step if count > 1 else 1)
            else:
                count = max(0, (lo - hi - step - 1) // -step)
                # Reverse the axis, then slice forward.
                reverse.append(axis)
                first = n - 1 - lo
                start.append(first)
                limit.append(first + max(count - 1, 0) * -step + (1 if count else 0))
                stride.append(-step if count > 1 else 1)
            out_shape.append(count)
        else:
            i = int(k)
            if i < -n or i >= n:
                raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n}")
            i %= n
            start.append(i)
            limit.append(i + 1)
            stride.append(1)
        axis += 1
    y = x
    if reverse:
        y = apply("reverse", [y], {"axis": reverse})
    if any(s != 0 for s in start) or limit != shape or any(s != 1 for s in stride):
        y = apply("slice", [y], {"start": start, "limit": limit, "stride": stride})
    if list(y.shape) != out_shape:
        y = apply("reshape", [y], {"shape": out_shape})
    return y


def _getitem_dynamic(x, expanded):
    """``getitem`` of a tensor with dims of unknown size or by a symbolic
    index: one op per indexed axis (last to first, so the axes before keep
    their numbers), then the new axes. An index tensor counts from the end
    when negative and is clamped into the dim, as XLA's ``dynamic_slice``
    clamps (TensorFlow raises instead)."""
    from . import _ops

    shape = list(x.shape)
    items, new_axes, axis, out = [], [], 0, 0
    for k in expanded:
        if k is None:
            new_axes.append(out)
            out += 1
            continue
        items.append((axis, k))
        out += 0 if not isinstance(k, slice) else 1
        axis += 1
    y = x
    for axis, k in reversed(items):
        n = shape[axis]
        if isinstance(k, slice):
            y = _slice_axis(y, axis, k, n)
            continue
        if n is not None and not isinstance(k, Tensor):
            i = int(k)
            if i < -n or i >= n:
                raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n}")
            y = _ops.gather(y, convert_to_tensor(i % n, dtype="int32"), axis=axis)
            continue
        i = k if isinstance(k, Tensor) else convert_to_tensor(int(k), dtype="int32")
        size = _ops._dim_size(x, axis, i.dtype)
        zero = convert_to_tensor(0, dtype=i.dtype)
        i = _ops.where(i < zero, i + size, i)
        i = _ops.clip_by_value(i, zero, size - convert_to_tensor(1, dtype=i.dtype))
        y = _ops.gather(y, i, axis=axis)
    for p in new_axes:
        y = _ops.expand_dims(y, p)
    return y


def _slice_axis(y, axis, k, n):
    """``y[..., k, ...]`` for the slice ``k`` of dim ``axis`` (of size
    ``n``, None when unknown): a crop (``pad`` by negative amounts, which
    keeps the other dims as they are) or a gather of the indices."""
    rank = len(y.shape)
    step = 1 if k.step is None else k.step
    if n is None:
        # Python's rules (TensorFlow's strided_slice) once the size is
        # known: bounds clamped into the dim, negative ones from its end.
        if step == 0:
            raise ValueError("slice step cannot be zero")
        begin, end, steps = [None] * rank, [None] * rank, [1] * rank
        bound = lambda v: None if v is None else operator.index(v)  # noqa: E731
        begin[axis], end[axis], steps[axis] = bound(k.start), bound(k.stop), operator.index(step)
        return apply("strided_slice", [y], {"begin": begin, "end": end, "step": steps})
    else:
        lo, hi, step = k.indices(n)
        if step != 1:
            from . import _ops

            idx = np.arange(lo, hi, step, dtype=np.int32)
            return _ops.gather(y, convert_to_tensor(idx), axis=axis)
        lo, hi = min(lo, n), n - max(hi, lo)
    if lo == 0 and hi == 0:
        return y
    low, high = [0] * rank, [0] * rank
    low[axis], high[axis] = -lo, -hi
    return apply("pad", [y, convert_to_tensor(0, dtype=y.dtype)], {"low": low, "high": high})
