"""The ops under TensorFlow's names and signatures (``name=`` is accepted
and ignored: nodes are named after their op and line)."""

import numpy as np

from . import _native
from ._core import SymbolicTensor, Tensor, apply, binary, convert_to_tensor, site, to_sym
from .dtypes import as_dtype
from .errors import InvalidArgumentError


def _unary(op):
    def f(x, name=None):
        return apply(op, [x])

    f.__name__ = op
    f.__qualname__ = op
    f.__doc__ = f"Elementwise ``{op}`` (``tf.math.{op}``)."
    return f


negative = _unary("negative")
abs = _unary("abs")  # noqa: A001
sign = _unary("sign")
floor = _unary("floor")
ceil = _unary("ceil")
round = _unary("round")  # noqa: A001
sqrt = _unary("sqrt")
rsqrt = _unary("rsqrt")
exp = _unary("exp")
expm1 = _unary("expm1")
log = _unary("log")
log1p = _unary("log1p")
tanh = _unary("tanh")
sigmoid = _unary("sigmoid")
sin = _unary("sin")
cos = _unary("cos")
erf = _unary("erf")
is_finite = _unary("is_finite")
square = _unary("square")
reciprocal = _unary("reciprocal")
stop_gradient = _unary("stop_gradient")
identity = _unary("identity")


def _binary(op, bools=False):
    """``tf.math.{op}``; with ``bools``, of bool tensors only (the logical
    ops, see ``_check_bool``)."""
    def f(x, y, name=None):
        if not isinstance(x, Tensor) and not isinstance(y, Tensor):
            x = convert_to_tensor(x)
        if bools:
            _check_bool(op, x, y)
        return binary(op, x, y)

    f.__name__ = op
    f.__qualname__ = op
    what = " of bool tensors" if bools else ""
    f.__doc__ = f"Elementwise ``{op}``{what} with NumPy broadcasting (``tf.math.{op}``)."
    return f


add = _binary("add")
subtract = _binary("subtract")
multiply = _binary("multiply")
divide = _binary("divide")  # TensorFlow's truediv: integers are divided as floats
truediv = divide
floordiv = _binary("floordiv")
floormod = _binary("floormod")
mod = floormod
truncatemod = _binary("truncatemod")
pow = _binary("pow")  # noqa: A001
maximum = _binary("maximum")
minimum = _binary("minimum")


def _check_bool(op, *xs):
    """TensorFlow's logical ops take bool tensors only: on integers they
    are an error, not bitwise (the operators ``&``, ``|``, ``^`` and ``~``
    stay bitwise there, as TensorFlow's are)."""
    for i, x in enumerate(xs):
        if isinstance(x, Tensor) and not x.dtype.is_bool:
            raise TypeError(f"{op}: input {i} is a {x.dtype.name} tensor, but {op} takes bool tensors")


def logical_not(x, name=None):
    """Elementwise ``logical_not`` of a bool tensor (``tf.math.logical_not``)."""
    x = convert_to_tensor(x)
    _check_bool("logical_not", x)
    return apply("logical_not", [x])


logical_and = _binary("logical_and", bools=True)
logical_or = _binary("logical_or", bools=True)
logical_xor = _binary("logical_xor", bools=True)
equal = _binary("equal")
not_equal = _binary("not_equal")
less = _binary("less")
less_equal = _binary("less_equal")
greater = _binary("greater")
greater_equal = _binary("greater_equal")


def _reduce(op):
    def f(input_tensor, axis=None, keepdims=False, name=None):
        return apply(op, [input_tensor], {"axis": axis, "keepdims": bool(keepdims)})

    f.__name__ = op
    f.__qualname__ = op
    f.__doc__ = f"``tf.{op}``: over ``axis`` (an int, a list, or None for all)."
    return f


reduce_sum = _reduce("reduce_sum")
reduce_prod = _reduce("reduce_prod")
reduce_max = _reduce("reduce_max")
reduce_min = _reduce("reduce_min")
reduce_all = _reduce("reduce_all")
reduce_any = _reduce("reduce_any")
reduce_mean = _reduce("reduce_mean")


def argmax(input, axis=None, output_type="int64", name=None):  # noqa: A002
    """Index of the largest value along ``axis`` (default 0)."""
    r = apply("argmax", [input], {"axis": 0 if axis is None else axis})
    return r if r.dtype == as_dtype(output_type) else cast(r, output_type)


def argmin(input, axis=None, output_type="int64", name=None):  # noqa: A002
    """Index of the smallest value along ``axis`` (default 0)."""
    r = apply("argmin", [input], {"axis": 0 if axis is None else axis})
    return r if r.dtype == as_dtype(output_type) else cast(r, output_type)


def matmul(a, b, transpose_a=False, transpose_b=False, name=None):
    """Matrix product over the last two axes (``tf.linalg.matmul``)."""
    a, b = convert_to_tensor(a), convert_to_tensor(b)
    if transpose_a:
        a = matrix_transpose(a)
    if transpose_b:
        b = matrix_transpose(b)
    return apply("matmul", [a, b])


def matrix_transpose(a, name=None):
    a = convert_to_tensor(a)
    perm = list(range(a.ndim))
    perm[-2:] = perm[-2:][::-1]
    return transpose(a, perm)


def transpose(a, perm=None, name=None):
    """Permutes the dims: result dim ``i`` is dim ``perm[i]``, with every
    entry in ``[0, rank)`` as TensorFlow takes it (negative entries are an
    ``InvalidArgumentError``)."""
    return apply("transpose", [a], {"perm": None if perm is None else [int(p) for p in perm]})


def reshape(tensor, shape, name=None):
    return apply("reshape", [tensor], {"shape": [int(d) for d in shape]})


def _dims(shape, op):
    """A shape argument as Python ints, or an error naming ``op``."""
    if isinstance(shape, SymbolicTensor) or (
        isinstance(shape, (list, tuple)) and any(isinstance(d, SymbolicTensor) for d in shape)
    ):
        raise TypeError(
            f"{op}: the shape is a tensor computed in the traced function (tl.shape of a None dim?), but "
            "a shape must be known when traced: use tl.zeros_like / tl.ones_like of a "
            "tensor of that shape, or give the input_signature a known size"
        )
    if isinstance(shape, Tensor):
        shape = shape.numpy()
    dims = np.asarray(shape)
    if dims.ndim > 1 or not (dims.size == 0 or dims.dtype.kind in "iu"):
        raise TypeError(f"{op}: a shape is a list of integers, not {shape!r}")
    dims = [int(d) for d in dims.reshape(-1)]
    if any(d < 0 for d in dims):
        raise InvalidArgumentError(f"{op}: the shape {dims} has a negative dimension")
    return dims


def broadcast_to(input, shape, name=None):  # noqa: A002
    return apply("broadcast_to", [input], {"shape": _dims(shape, "tl.broadcast_to")})


def slice_(input_, begin, size, name=None):
    """``tf.slice``: the block of ``size`` (Python ints, -1 for the rest of
    a dim of known size when its start is a Python int) starting at
    ``begin`` (ints, scalar integer tensors, or a 1-D integer tensor). Traced
    starts may move in a loop (XLA's ``dynamic_slice``): each is clamped so
    that the block lies inside the tensor, where TensorFlow raises."""
    x = convert_to_tensor(input_)
    _known_rank(x, "tl.slice")
    shape = list(x.shape)
    rank = len(shape)
    if isinstance(begin, Tensor):
        if begin.shape != (rank,):
            raise InvalidArgumentError(f"tl.slice: begin has shape {list(begin.shape)}, expected [{rank}]")
        begin = [begin[i] for i in range(rank)]
    begin, size = list(begin), [int(d) for d in _dims_signed(size, "tl.slice")]
    if len(begin) != rank or len(size) != rank:
        raise InvalidArgumentError(
            f"tl.slice of a tensor of rank {rank} needs {rank} begin and size entries, got {len(begin)} and "
            f"{len(size)}"
        )
    for i, (b, n) in enumerate(zip(begin, size)):
        if n == -1:
            if isinstance(b, Tensor) or shape[i] is None:
                raise InvalidArgumentError(
                    f"tl.slice: size -1 in dim {i} needs a Python int start and a dim of known size "
                    "(tensorlift traces static shapes)"
                )
            size[i] = shape[i] - int(b)
        elif n < -1:
            raise InvalidArgumentError(f"tl.slice: size {n} in dim {i}")
    if not any(isinstance(b, SymbolicTensor) for b in begin) and None not in shape:
        b = [int(v) for v in begin]
        for i in range(rank):
            if not 0 <= b[i] <= b[i] + size[i] <= shape[i]:
                raise InvalidArgumentError(
                    f"tl.slice: begin {b} and size {size} go past the shape {shape} in dim {i}"
                )
        return apply("slice", [x], {"start": b, "limit": [v + n for v, n in zip(b, size)]})
    starts = [v if isinstance(v, Tensor) else convert_to_tensor(int(v), dtype="int32") for v in begin]
    dtypes = {t.dtype for t in starts}
    if len(dtypes) > 1:
        starts = [cast(t, "int64") for t in starts]
    return apply("dynamic_slice", [x, *starts], {"shape": size})


def _dims_signed(size, op):
    if isinstance(size, Tensor):
        size = size.numpy()
    return [int(d) for d in np.asarray(size).reshape(-1)]


def cast(x, dtype, name=None):
    x = convert_to_tensor(x)
    d = as_dtype(dtype)
    if x.dtype == d:
        return x
    return apply("cast", [x], {"dtype": d.name})


def concat(values, axis, name=None):
    return apply("concat", list(values), {"axis": int(axis)})


def stack(values, axis=0, name=None):
    values = [convert_to_tensor(v) for v in values]
    return concat([expand_dims(v, axis) for v in values], axis)


def expand_dims(input, axis, name=None):  # noqa: A002
    x = convert_to_tensor(input)
    _known_rank(x, "tl.expand_dims")
    shape = list(x.shape)
    rank = len(shape)
    if not -rank - 1 <= axis <= rank:
        raise InvalidArgumentError(
            f"expand_dims: axis {axis} is out of range for a tensor of rank {rank} "
            f"(it takes -{rank + 1}..{rank})"
        )
    axis = axis + rank + 1 if axis < 0 else axis
    shape.insert(axis, 1)
    if shape.count(None) > 1:
        raise ValueError(
            f"expand_dims of a tensor of shape {list(x.shape)}: it becomes a reshape, which infers "
            "at most one dim of unknown size; the other dims must be known when traced (declare them in "
            "the input_signature, or with set_shape)"
        )
    return reshape(x, [-1 if d is None else d for d in shape])


def squeeze(input, axis=None, name=None):  # noqa: A002
    """Removes dims of size 1: those in ``axis``, or every one when
    ``axis`` is None. A dim of unknown size named in ``axis`` must be 1
    when the function runs (a reshape to the shape with 1 there checks it:
    ``cannot reshape [4, 2] to [4, 1]``); with no ``axis``, a dim of
    unknown size is an error (which dims go would depend on the run-time
    sizes: TensorFlow's result has an unknown rank)."""
    x = convert_to_tensor(input)
    _known_rank(x, "tl.squeeze")
    shape = list(x.shape)
    rank = len(shape)
    if axis is None:
        if None in shape:
            raise ValueError(
                f"tl.squeeze of a tensor of shape {shape} without axis: which dims are removed depends "
                "on the sizes of its unknown dims, known only when the function runs; name them with "
                "axis= (or give the input_signature known sizes)"
            )
        axes = [i for i, d in enumerate(shape) if d == 1]
    else:
        axes = []
        for a in [axis] if isinstance(axis, int) else axis:
            if not -rank <= a < rank:
                raise InvalidArgumentError(f"squeeze: axis {a} is out of range for a tensor of rank {rank}")
            a %= rank
            if shape[a] not in (1, None):
                raise InvalidArgumentError(f"squeeze: cannot squeeze axis {a} of size {shape[a]}")
            axes.append(a)
    out = [d for i, d in enumerate(shape) if i not in axes]
    unknown = [a for a in axes if shape[a] is None]
    if unknown and None not in out:
        # The squeezed dims are the unknown ones: the reshape to the shape
        # with 1 there fails when one is not 1, and shows which.
        x = reshape(x, [1 if i in axes else d for i, d in enumerate(shape)])
    elif unknown:
        # Beside other dims of unknown size, which a reshape would take the
        # squeezed sizes into ([3, 2] squeezed at axis 1 was [6]): a probe
        # of the squeezed dims' sizes (1 in every other dim) must reshape
        # to all 1s when the function runs (`cannot reshape [1, 2] to
        # [1, 1]` otherwise); its single zero is the index gathered from
        # each squeezed axis, so the result depends on the check.
        others = [i for i in range(rank) if i not in axes]
        probe = _zeros_of(x, "int32")
        if others:
            probe = reduce_sum(probe, axis=others, keepdims=True)
        zero = reshape(reshape(probe, [1] * rank), [])
        for a in sorted(axes, reverse=True):
            x = gather(x, zero, axis=a)
        return x
    if out.count(None) <= 1:
        return reshape(x, [-1 if d is None else d for d in out])
    # A reshape infers one unknown dim at most; gathering index 0 of each
    # axis (known to be of size 1) removes it whatever the other dims are.
    for a in sorted(axes, reverse=True):
        x = gather(x, convert_to_tensor(0, dtype="int32"), axis=a)
    return x


def gather(params, indices, axis=None, batch_dims=0, name=None):
    if batch_dims:
        raise NotImplementedError("gather with batch_dims is not supported")
    return apply("gather", [params, indices], {"axis": 0 if axis is None else axis})


def where(condition, x=None, y=None, name=None):
    if x is None or y is None:
        raise NotImplementedError("tl.where with one argument (indices of true values) is not supported")
    x = x if isinstance(x, Tensor) else convert_to_tensor(x, dtype=getattr(y, "dtype", None))
    y = y if isinstance(y, Tensor) else convert_to_tensor(y, dtype=x.dtype)
    return apply("where", [condition, x, y])


def clip_by_value(t, clip_value_min, clip_value_max, name=None):
    t = convert_to_tensor(t)
    lo = convert_to_tensor(clip_value_min, dtype=t.dtype)
    hi = convert_to_tensor(clip_value_max, dtype=t.dtype)
    return apply("clip_by_value", [t, lo, hi])


def reverse(tensor, axis, name=None):
    return apply("reverse", [tensor], {"axis": list(axis)})


def _splat(value, dims):
    """``value`` (a scalar tensor) broadcast to ``dims``; while a function
    is traced, as a broadcast there (not a constant of the whole shape)."""
    if _native.tracing() and not isinstance(value, SymbolicTensor) and value.shape == ():
        value = SymbolicTensor(to_sym(value, None, site()))
    return broadcast_to(value, dims)


def zeros(shape, dtype="float32", name=None):
    return _splat(convert_to_tensor(0, dtype=as_dtype(dtype)), _dims(shape, "tl.zeros"))


def ones(shape, dtype="float32", name=None):
    return _splat(convert_to_tensor(1, dtype=as_dtype(dtype)), _dims(shape, "tl.ones"))


def fill(dims, value, name=None):
    return _splat(convert_to_tensor(value), _dims(dims, "tl.fill"))


def _fully_known(x):
    return x.shape is not None and all(d is not None for d in x.shape)


def _zeros_of(x, d):
    """Zeros of ``x``'s shape, whose dims need not be known (no constant can
    be built then): a value-independent op chain on ``x`` itself (not
    ``x * 0``, which is NaN for NaN or inf)."""
    falses = logical_and(cast(x, "bool"), convert_to_tensor(False))
    return cast(falses, d)


def zeros_like(input, dtype=None, name=None):  # noqa: A002
    x = convert_to_tensor(input)
    d = as_dtype(dtype) if dtype is not None else x.dtype
    if not _fully_known(x):
        return _zeros_of(x, d)
    return _splat(convert_to_tensor(0, dtype=d), list(x.shape))


def ones_like(input, dtype=None, name=None):  # noqa: A002
    x = convert_to_tensor(input)
    d = as_dtype(dtype) if dtype is not None else x.dtype
    if not _fully_known(x):
        return _zeros_of(x, d) + convert_to_tensor(1, dtype=d)
    return _splat(convert_to_tensor(1, dtype=d), list(x.shape))


def _dim_size(x, axis, out_type="int32"):
    """The size of dim ``axis`` of ``x`` as a scalar tensor, also when it is
    unknown until the function runs (then counted from ``x``)."""
    n = x.shape[axis]
    if n is not None:
        return convert_to_tensor(n, dtype=out_type)
    z = _zeros_of(x, out_type)
    others = [a for a in range(len(x.shape)) if a != axis]
    if others:
        z = reduce_sum(z, axis=others)
    return reduce_sum(z + convert_to_tensor(1, dtype=out_type))


def _known_rank(x, op):
    if x.shape is None:
        raise ValueError(f"{op} of a tensor of unknown rank: declare its shape with set_shape")


def shape(input, out_type="int32", name=None):  # noqa: A002
    x = convert_to_tensor(input)
    _known_rank(x, "tl.shape")
    if _fully_known(x):
        return convert_to_tensor(np.array(list(x.shape)), dtype=out_type)
    # TensorFlow's dynamic shape: unknown dims are read when the function runs.
    return stack([_dim_size(x, a, out_type) for a in range(len(x.shape))])


def rank(input, name=None):  # noqa: A002
    return convert_to_tensor(convert_to_tensor(input).ndim, dtype="int32")


def size(input, out_type="int32", name=None):  # noqa: A002
    x = convert_to_tensor(input)
    _known_rank(x, "tl.size")
    if _fully_known(x):
        return convert_to_tensor(x.shape.num_elements(), dtype=out_type)
    return reduce_sum(ones_like(x, dtype=out_type))


def softmax(logits, axis=-1, name=None):
    m = reduce_max(logits, axis=axis, keepdims=True)
    e = exp(logits - stop_gradient(m))
    return e / reduce_sum(e, axis=axis, keepdims=True)


def log_softmax(logits, axis=-1, name=None):
    m = stop_gradient(reduce_max(logits, axis=axis, keepdims=True))
    s = logits - m
    return s - log(reduce_sum(exp(s), axis=axis, keepdims=True))


def relu(features, name=None):
    """``max(features, 0)``, with TensorFlow's (and JAX's) gradient: 1 where
    ``features > 0``, else 0 — 0 at 0, where ``maximum`` would split the tie
    (0.5). NaN stays NaN."""
    f = convert_to_tensor(features)
    return where(f <= 0, convert_to_tensor(0, dtype=f.dtype), f)


def reduce_logsumexp(input_tensor, axis=None, keepdims=False, name=None):
    m = reduce_max(input_tensor, axis=axis, keepdims=True)
    # TensorFlow's: a max of +-inf is replaced by 0, so that x - m is not
    # inf - inf (NaN); the sum is then 0 (-inf) or inf (inf), as it should.
    m = stop_gradient(where(is_finite(m), m, 0))
    r = log(reduce_sum(exp(input_tensor - m), axis=axis, keepdims=True)) + m
    return r if keepdims else squeeze(r, axis) if axis is not None else reshape(r, [])

