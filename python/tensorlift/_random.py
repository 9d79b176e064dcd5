"""``tl.random``: stateless random numbers from a counter-based generator
built with integer ops (Philox-4x32-10, TensorFlow's and JAX's algorithm
family), and stateful ones drawn by NumPy.

Stateless: element ``i`` of a draw comes from Philox's 10 rounds on the
counter ``(i, i >> 32, seed[0] >> 32, seed[1] >> 32)`` under the key
``(seed[0], seed[1])`` (low 32 bits), with the 32×32→64-bit products done
in uint64 arithmetic. The same seed gives the same values eagerly, traced
and compiled; they are not TensorFlow's bit for bit (TensorFlow derives its
key and counter from the seed through another hash)."""

import math as _math

import numpy as np

from . import _callbacks, _native
from ._core import EagerTensor, SymbolicTensor, Tensor, apply, convert_to_tensor, site, to_sym
from ._ops import cast, concat, cos, log, reshape, sqrt
from .dtypes import as_dtype
from .errors import InvalidArgumentError

_M = (0xD2511F53, 0xCD9E8D57)
_W = (0x9E3779B9, 0xBB67AE85)


def _u32(v):
    return convert_to_tensor(np.uint32(v))


def _mulhilo(a, b):
    """``a * b`` of uint32 ``a`` and the constant ``b`` as (high, low) words."""
    p = cast(a, "uint64") * convert_to_tensor(np.uint64(b))
    return cast(p // convert_to_tensor(np.uint64(1 << 32)), "uint32"), cast(p, "uint32")


def _xor(a, b):
    return apply("logical_xor", [a, b])


def _philox(counter, key):
    """Philox-4x32-10 of four uint32 counter words under two key words."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for r in range(10):
        if r:
            k0, k1 = k0 + _u32(_W[0]), k1 + _u32(_W[1])
        hi0, lo0 = _mulhilo(c0, _M[0])
        hi1, lo1 = _mulhilo(c2, _M[1])
        c0, c1, c2, c3 = _xor(_xor(hi1, c1), k0), lo1, _xor(_xor(hi0, c3), k1), lo0
    return [c0, c1, c2, c3]


def _seed_words(seed, op):
    """The seed (shape [2], int32 or int64, eager or traced) as its low
    and high 32-bit words."""
    s = seed if isinstance(seed, Tensor) else convert_to_tensor(np.asarray(seed))
    if not s.dtype.is_integer or s.shape is None or list(s.shape) != [2]:
        raise InvalidArgumentError(
            f"{op}: seed must be an integer tensor of shape [2], got {s.dtype.name} of shape "
            f"{None if s.shape is None else list(s.shape)}"
        )
    s = cast(s, "int64")
    words = []
    for i in range(2):
        v = s[i]
        words.append((cast(v, "uint32"), cast(v // convert_to_tensor(np.int64(1 << 32)), "uint32")))
    return words


def _bits(shape, seed, words, op):
    """``words`` uint32 words per element: a list of ``words`` tensors of
    ``shape``."""
    n = int(np.prod(shape, dtype=np.int64))
    (k0, h0), (k1, h1) = _seed_words(seed, op)
    total = n * words
    blocks = max(1, -(-total // 4))
    i = np.arange(blocks, dtype=np.uint64)
    lo = convert_to_tensor((i & 0xFFFFFFFF).astype(np.uint32))
    hi = convert_to_tensor((i >> np.uint64(32)).astype(np.uint32))
    zero = convert_to_tensor(np.zeros(blocks, np.uint32))
    out = _philox([lo, hi, zero + h0, zero + h1], [k0, k1])
    flat = reshape(concat([reshape(w, [blocks, 1]) for w in out], 1), [blocks * 4])
    flat = apply("slice", [flat], {"start": [0], "limit": [total]})
    return [reshape(apply("slice", [flat], {"start": [j * n], "limit": [(j + 1) * n]}), shape)
            for j in range(words)]


def _shape(shape, op):
    if isinstance(shape, SymbolicTensor):
        raise TypeError(f"{op}: the shape is a tensor of the traced function; it must be known when traced")
    if isinstance(shape, Tensor):
        shape = shape.numpy().tolist()
    dims = np.asarray(shape).reshape(-1)
    if dims.size and dims.dtype.kind not in "iu":
        raise TypeError(f"{op}: a shape is a list of integers, not {shape!r}")
    dims = [int(d) for d in dims]
    if any(d < 0 for d in dims):
        raise InvalidArgumentError(f"{op}: the shape {dims} has a negative dimension")
    return dims


def _unit(shape, seed, dtype, op, open_low=False):
    """Uniform floats in ``[0, 1)`` (``(0, 1]`` with ``open_low``): 24
    random bits for float32 and narrower (computed in float32), 53 for
    float64."""
    if dtype.name == "float64":
        a, b = _bits(shape, seed, 2, op)
        top = cast(a // _u32(1 << 11), "uint64") * convert_to_tensor(np.uint64(1 << 32)) + cast(b, "uint64")
        u = cast(top, "float64") * convert_to_tensor(2.0 ** -53, dtype="float64")
        one = convert_to_tensor(2.0 ** -53, dtype="float64")
    else:
        (a,) = _bits(shape, seed, 1, op)
        u = cast(a // _u32(1 << 8), "float32") * convert_to_tensor(2.0 ** -24, dtype="float32")
        one = convert_to_tensor(2.0 ** -24, dtype="float32")
    return u + one if open_low else u


def _float_dtype(dtype, op):
    d = as_dtype(dtype)
    if d.name not in ("float16", "bfloat16", "float32", "float64"):
        raise TypeError(f"{op}: dtype must be a float dtype here, not {d.name}")
    return d


_EAGER = {}


def _eagerly(key, build, seed):
    """``build(seed)`` (hundreds of small integer ops); with an eager seed,
    run as one interpreted function (cached per draw's parameters)."""
    s = seed if isinstance(seed, Tensor) else convert_to_tensor(np.asarray(seed))
    if isinstance(s, SymbolicTensor):
        return build(s)
    if _native.tracing():
        # (A constant of the trace, so that the ops are traced, not run.)
        return build(SymbolicTensor(to_sym(s, None, site())))
    fn = _EAGER.get(key)
    if fn is None:
        if len(_EAGER) >= 256:
            _EAGER.clear()

        def body(syms):
            return [build(SymbolicTensor(syms[0]))._s]

        fn = _EAGER[key] = _native.Function(body, key[0], site(), False, None)
    return EagerTensor(fn([s._v])[0])


def _is_number(v):
    """A Python or NumPy scalar (the draws keep their exact old form);
    tensors, lists and arrays are broadcast with tensor ops instead."""
    return not isinstance(v, Tensor) and np.ndim(v) == 0


def _param(v, d, op, what):
    """``minval``/``maxval``/``mean``/``stddev`` given as a tensor (or an
    array) as a tensor of dtype ``d``."""
    if isinstance(v, Tensor):
        if v.dtype != d:
            if not (v.dtype.is_floating or v.dtype.is_integer) or v.dtype.is_bool:
                raise TypeError(f"{op}: {what} must be a number, not a {v.dtype.name} tensor")
            raise ValueError(f"{op}: {what} is a {v.dtype.name} tensor, but the draw's dtype is {d.name}")
        return v
    try:
        return convert_to_tensor(v, dtype=d)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{op}: {what} must be a number or a tensor of {d.name}, not {v!r}") from e


def _check_broadcast(op, dims, *params):
    """TF's rule: the parameters broadcast to the draw's shape."""
    for what, t in params:
        shape = t.shape
        if shape is None:
            continue
        if len(shape) > len(dims) or any(
            d is not None and d != 1 and d != n for d, n in zip(shape[::-1], dims[::-1])
        ):
            raise InvalidArgumentError(
                f"{op}: {what} of shape {list(shape)} does not broadcast to the shape {dims} of the draw"
            )


def _scalar_int(v, op, what):
    """An integer bound (TF takes scalars for integer draws): a Python int,
    or a scalar tensor (a traced one stays a tensor)."""
    if isinstance(v, Tensor):
        if v.shape is not None and len(v.shape) != 0:
            raise InvalidArgumentError(f"{op}: an integer draw takes a scalar {what}, got shape {list(v.shape)}")
        if isinstance(v, SymbolicTensor):
            return v
        v = v.numpy().item()
    if isinstance(v, (float, np.floating)) or isinstance(v, bool):
        raise TypeError(f"{op}: {what} of an integer draw must be an integer, not {v!r}")
    return int(v)


def _full_range(dims, s, d, op):
    """Integers over the whole range of ``d`` (the random bits themselves)."""
    if d.name in ("int32", "uint32"):
        (a,) = _bits(dims, s, 1, op)
        return cast(a, d.name)
    a, b = _bits(dims, s, 2, op)
    wide = cast(a, "uint64") * convert_to_tensor(np.uint64(1 << 32)) + cast(b, "uint64")
    return cast(wide, d.name)


def stateless_uniform(shape, seed, minval=0, maxval=None, dtype="float32", name=None, alg="auto_select"):
    """``tf.random.stateless_uniform``: uniform values in ``[minval, maxval)``
    (default ``[0, 1)`` for floats), a function of ``seed`` (shape [2]
    integers) alone. ``minval``/``maxval`` may be tensors broadcast to
    ``shape`` (floats; differentiable). Integer dtypes (int32, int64) need
    ``maxval`` (scalars) and take the random bits modulo the range (as
    TensorFlow, slightly biased for ranges that are not powers of two);
    ``minval=None, maxval=None`` draws over the dtype's full range (int32,
    int64, uint32, uint64)."""
    op = "stateless_uniform"
    dims = _shape(shape, op)
    d = as_dtype(dtype)
    if d.is_integer:
        if minval is None and maxval is None:
            if d.name not in ("int32", "int64", "uint32", "uint64"):
                raise TypeError(f"{op}: full-range integer draws are int32, int64, uint32 or uint64, not {d.name}")
            return _eagerly((op, tuple(dims), d.name, None, None), lambda s: _full_range(dims, s, d, op), seed)
        if d.name not in ("int32", "int64"):
            raise TypeError(f"{op}: integer draws are int32 or int64, not {d.name}")
        if maxval is None or minval is None:
            raise InvalidArgumentError(
                f"{op}: an integer dtype needs minval and maxval (or both None: the full range)")
        lo_v, hi_v = _scalar_int(minval, op, "minval"), _scalar_int(maxval, op, "maxval")
        if isinstance(lo_v, Tensor) or isinstance(hi_v, Tensor):
            lo_t = cast(lo_v if isinstance(lo_v, Tensor) else convert_to_tensor(lo_v, dtype=d), "int64")
            hi_t = cast(hi_v if isinstance(hi_v, Tensor) else convert_to_tensor(hi_v, dtype=d), "int64")
            s = seed if isinstance(seed, Tensor) else convert_to_tensor(np.asarray(seed))
            if not isinstance(s, SymbolicTensor):
                s = SymbolicTensor(to_sym(s, None, site()))
            a, b = _bits(dims, s, 2, op)
            wide = cast(a, "uint64") * convert_to_tensor(np.uint64(1 << 32)) + cast(b, "uint64")
            # (A span of 0 or less, known only when the function runs, is
            # taken as 1: the draws are minval, where TF fails.)
            span = cast(hi_t - lo_t, "uint64")
            one = convert_to_tensor(np.uint64(1))
            span = apply("where", [hi_t > lo_t, span, one])
            return cast(cast(wide % span, "int64") + lo_t, d.name)
        if hi_v <= lo_v:
            raise InvalidArgumentError(f"{op}: need minval < maxval, got [{lo_v}, {hi_v})")

        def build(s):
            a, b = _bits(dims, s, 2, op)
            wide = cast(a, "uint64") * convert_to_tensor(np.uint64(1 << 32)) + cast(b, "uint64")
            span = convert_to_tensor(np.uint64(hi_v - lo_v))
            return cast(wide % span, d.name) + convert_to_tensor(lo_v, dtype=d.name)

        return _eagerly((op, tuple(dims), d.name, lo_v, hi_v), build, seed)
    d = _float_dtype(d, op)
    if minval is None:
        minval = 0
    if not (_is_number(minval) and (maxval is None or _is_number(maxval))):
        lo_t = _param(minval, d, op, "minval")
        hi_t = _param(1 if maxval is None else maxval, d, op, "maxval")
        _check_broadcast(op, dims, ("minval", lo_t), ("maxval", hi_t))
        u = stateless_uniform(dims, seed, dtype=d)
        return u * (hi_t - lo_t) + lo_t
    hi_v = 1.0 if maxval is None else float(maxval)
    lo_v = float(minval)

    def build(s):
        u = _unit(dims, s, d, op)
        work = u.dtype
        r = u * convert_to_tensor(hi_v - lo_v, dtype=work) + convert_to_tensor(lo_v, dtype=work)
        return cast(r, d)

    return _eagerly((op, tuple(dims), d.name, lo_v, hi_v), build, seed)


def stateless_normal(shape, seed, mean=0.0, stddev=1.0, dtype="float32", name=None, alg="auto_select"):
    """``tf.random.stateless_normal``: normal values (Box–Muller of two
    uniform draws), a function of ``seed`` alone; ``mean``/``stddev`` may
    be tensors broadcast to ``shape`` (differentiable)."""
    op = "stateless_normal"
    dims = _shape(shape, op)
    d = _float_dtype(dtype, op)
    if not (_is_number(mean) and _is_number(stddev)):
        m, sd = _param(mean, d, op, "mean"), _param(stddev, d, op, "stddev")
        _check_broadcast(op, dims, ("mean", m), ("stddev", sd))
        return stateless_normal(dims, seed, dtype=d) * sd + m
    mean, stddev = float(mean), float(stddev)

    def build(s):
        n = int(np.prod(dims, dtype=np.int64))
        u = _unit([2, n], s, d, op, open_low=True)
        work = u.dtype
        u1 = reshape(apply("slice", [u], {"start": [0, 0], "limit": [1, n]}), dims)
        u2 = reshape(apply("slice", [u], {"start": [1, 0], "limit": [2, n]}), dims)
        z = sqrt(convert_to_tensor(-2.0, dtype=work) * log(u1)) * cos(convert_to_tensor(2 * np.pi, dtype=work) * u2)
        return cast(z * convert_to_tensor(stddev, dtype=work) + convert_to_tensor(mean, dtype=work), d)

    return _eagerly((op, tuple(dims), d.name, mean, stddev), build, seed)


# Giles' single-precision erfinv ("Approximating the erfinv function", 2010),
# the branch for w = -log(1 - x²) < 5 (|x| < 0.9966; truncated normals need
# |x| <= erf(√2) = 0.9545): the coefficients of p(w - 2.5), erfinv(x) ≈ x·p.
_GILES = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
          -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)


def _erfinv_central(y, newton):
    """``erfinv(y)`` for ``|y| <= 0.99`` (y float32 or float64): Giles'
    polynomial, then ``newton`` Newton steps on ``erf`` (float64 needs 2)."""
    d = y.dtype

    def c(v):
        return convert_to_tensor(v, dtype=d)

    w = -log((c(1) - y) * (c(1) + y)) - c(2.5)
    p = c(_GILES[0])
    for k in _GILES[1:]:
        p = c(k) + p * w
    x = p * y
    for _ in range(newton):
        err = apply("erf", [x]) - y
        x = x - err / (c(2 / np.sqrt(np.pi)) * apply("exp", [-(x * x)]))
    return x


def stateless_truncated_normal(shape, seed, mean=0.0, stddev=1.0, dtype="float32", name=None, alg="auto_select"):
    """``tf.random.stateless_truncated_normal``: normal values cut to
    within two standard deviations of the mean, by the inverse CDF of a
    uniform draw (``√2·erfinv``; TF resamples instead: same distribution,
    other values); ``mean``/``stddev`` may be tensors broadcast to
    ``shape``."""
    op = "stateless_truncated_normal"
    dims = _shape(shape, op)
    d = _float_dtype(dtype, op)
    if not (_is_number(mean) and _is_number(stddev)):
        m, sd = _param(mean, d, op, "mean"), _param(stddev, d, op, "stddev")
        _check_broadcast(op, dims, ("mean", m), ("stddev", sd))
        return stateless_truncated_normal(dims, seed, dtype=d) * sd + m
    mean, stddev = float(mean), float(stddev)

    def build(s):
        u = _unit(dims, s, d, op)
        work = u.dtype
        edge = _math.erf(_math.sqrt(2.0))
        y = (u * convert_to_tensor(2.0, dtype=work) - convert_to_tensor(1.0, dtype=work)) * convert_to_tensor(
            edge, dtype=work)
        z = _erfinv_central(y, 2 if work.name == "float64" else 1) * convert_to_tensor(_math.sqrt(2.0), dtype=work)
        return cast(z * convert_to_tensor(stddev, dtype=work) + convert_to_tensor(mean, dtype=work), d)

    return _eagerly((op, tuple(dims), d.name, mean, stddev), build, seed)


def _logits(logits, op):
    x = logits if isinstance(logits, Tensor) else convert_to_tensor(logits)
    if not x.dtype.is_floating:
        raise TypeError(f"{op}: logits must be floating-point, not {x.dtype.name}")
    if x.shape is None or len(x.shape) != 2:
        raise InvalidArgumentError(
            f"{op}: logits should be a matrix [batch_size, num_classes], got shape "
            f"{None if x.shape is None else list(x.shape)}")
    if None in x.shape:
        raise InvalidArgumentError(
            f"{op}: logits of shape {list(x.shape)}: the dims must be known when traced "
            "(declare them in the input_signature)")
    if x.shape[1] == 0 and x.shape[0] > 0:
        raise InvalidArgumentError(f"{op}: logits has no classes (shape {list(x.shape)})")
    return x


def _num_samples(n, op):
    if isinstance(n, SymbolicTensor):
        raise TypeError(f"{op}: num_samples is a tensor of the traced function; it must be known when traced (an int)")
    if isinstance(n, Tensor):
        n = n.numpy().item()
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"{op}: num_samples must be an int, not {n!r}")
    if n < 0:
        raise InvalidArgumentError(f"{op}: num_samples must be >= 0, got {n}")
    return int(n)


def _sample_dtype(dtype, op):
    d = as_dtype("int64" if dtype is None else dtype)
    if d.name not in ("int32", "int64"):
        raise TypeError(f"{op}: dtype must be int32 or int64, not {d.name}")
    return d


def _gumbel_max(x, gumbel, d):
    """The class of the largest ``logits + Gumbel noise`` per sample:
    ``x`` ``[b, c]``, ``gumbel`` ``[b, n, c]`` (in a float of at least 32
    bits)."""
    work = x.dtype if x.dtype.name in ("float32", "float64") else as_dtype("float32")
    z = apply("reshape", [cast(x, work)], {"shape": [x.shape[0], 1, x.shape[1]]}) + cast(gumbel, work)
    return cast(apply("argmax", [z], {"axis": 2}), d)


def categorical(logits, num_samples, dtype=None, seed=None, name=None):
    """``tf.random.categorical``: ``num_samples`` class indices per row of
    ``logits`` (``[batch, classes]``, unnormalized log-probabilities; -inf
    is never drawn), ``[batch, num_samples]`` of ``dtype`` (int64). Fresh
    at each call (the Gumbel noise is drawn by NumPy, as
    ``tl.random.uniform``); the argmax of logits plus Gumbel noise."""
    op = "categorical"
    x = _logits(logits, op)
    n = _num_samples(num_samples, op)
    d = _sample_dtype(dtype, op)
    b, c = x.shape
    dims = [b, n, c]

    def draw():
        u = _generator(seed).random(size=dims)
        with np.errstate(divide="ignore"):
            return -np.log(-np.log(u))

    g = _stateful("random_categorical", dims, as_dtype("float64" if x.dtype.name == "float64" else "float32"), draw)
    return _gumbel_max(x, g, d)


def stateless_categorical(logits, num_samples, seed, dtype=None, name=None):
    """``tf.random.stateless_categorical``: ``categorical`` as a function
    of ``seed`` alone (Gumbel noise from 53-bit Philox uniforms)."""
    op = "stateless_categorical"
    x = _logits(logits, op)
    n = _num_samples(num_samples, op)
    d = _sample_dtype(dtype, op)
    b, c = x.shape
    dims = [b, n, c]
    f64 = as_dtype("float64")

    def build(s):
        u = _unit(dims, s, f64, op)
        u = apply("clip_by_value", [u + convert_to_tensor(2.0 ** -54, dtype="float64"),
                                     convert_to_tensor(2.0 ** -54, dtype="float64"),
                                     convert_to_tensor(1 - 2.0 ** -53, dtype="float64")])
        return -log(-log(u))

    g = _eagerly((op, tuple(dims)), build, seed)
    return _gumbel_max(x, g, d)


# --- stateful ------------------------------------------------------------------------

class _State:
    global_seed = None
    generator = np.random.default_rng()
    op_generators = {}


def set_seed(seed):
    """``tf.random.set_seed``: restarts the stateful ops' sequences, so a
    program's draws repeat from here on (``tl.random.uniform`` /
    ``normal``; the stateless ops depend on their own seed only)."""
    _State.global_seed = None if seed is None else int(seed)
    _State.generator = np.random.default_rng(_State.global_seed)
    _State.op_generators = {}


def _generator(seed):
    """The generator an op draws from: the global one, or, for an op seed,
    one of its own (per global and op seed, as TensorFlow's op seeds give
    each op its sequence)."""
    if seed is None:
        return _State.generator
    key = (_State.global_seed, int(seed))
    g = _State.op_generators.get(key)
    if g is None:
        g = _State.op_generators[key] = np.random.default_rng([int(seed), 0 if key[0] is None else key[0] + 1])
    return g


def _stateful(op, dims, d, draw):
    """``draw(generator)`` (a NumPy array of ``dims``): now when eager,
    and inside a function as a stateful callback, run at each call (fresh
    values, compiled code included)."""
    if not _native.tracing():
        return convert_to_tensor(draw().astype(d.as_numpy_dtype))

    def cb():
        return draw().astype(d.as_numpy_dtype)

    out = _callbacks._call("numpy_function", cb, [], d, stateful=True, name=op, must_replay=True)
    out.set_shape(dims)
    return out


def uniform(shape, minval=0, maxval=None, dtype="float32", seed=None, name=None):
    """``tf.random.uniform``: fresh values at each call (eagerly and at
    each call of a compiled function: a stateful callback), drawn by NumPy
    from the generator ``tl.random.set_seed`` seeds. ``minval``/``maxval``
    may be tensors broadcast to ``shape`` (floats: ``u·(maxval - minval) +
    minval`` on a [0, 1) draw, differentiable; integers: scalars)."""
    op = "random_uniform"
    dims = _shape(shape, op)
    d = as_dtype(dtype)
    if d.is_integer:
        if maxval is None:
            raise InvalidArgumentError(f"{op}: an integer dtype needs maxval")
        lo, hi = _scalar_int(minval, op, "minval"), _scalar_int(maxval, op, "maxval")
        if isinstance(lo, Tensor) or isinstance(hi, Tensor):
            bounds = [cast(v if isinstance(v, Tensor) else convert_to_tensor(v, dtype=d), "int64") for v in (lo, hi)]

            def cb(a, b):
                if b <= a:
                    raise ValueError(f"{op}: need minval < maxval, got [{a}, {b})")
                return _generator(seed).integers(a, b, size=dims).astype(d.as_numpy_dtype)

            out = _callbacks._call("numpy_function", cb, bounds, d, stateful=True, name=op, must_replay=True)
            out.set_shape(dims)
            return out
        if hi <= lo:
            raise InvalidArgumentError(f"{op}: need minval < maxval, got [{lo}, {hi})")
        return _stateful(op, dims, d, lambda: _generator(seed).integers(lo, hi, size=dims))
    d = _float_dtype(d, op)
    if minval is None:
        minval = 0
    if not (_is_number(minval) and (maxval is None or _is_number(maxval))):
        lo_t = _param(minval, d, op, "minval")
        hi_t = _param(1 if maxval is None else maxval, d, op, "maxval")
        _check_broadcast(op, dims, ("minval", lo_t), ("maxval", hi_t))
        u = _stateful(op, dims, d, lambda: _generator(seed).random(size=dims))
        return u * (hi_t - lo_t) + lo_t
    lo, hi = float(minval), 1.0 if maxval is None else float(maxval)
    return _stateful(op, dims, d, lambda: _generator(seed).uniform(lo, hi, size=dims))


def normal(shape, mean=0.0, stddev=1.0, dtype="float32", seed=None, name=None):
    """``tf.random.normal``: fresh normal values at each call (see
    ``uniform``); ``mean``/``stddev`` may be tensors broadcast to ``shape``
    (``z·stddev + mean``, differentiable)."""
    op = "random_normal"
    dims = _shape(shape, op)
    d = _float_dtype(dtype, op)
    if not (_is_number(mean) and _is_number(stddev)):
        m, sd = _param(mean, d, op, "mean"), _param(stddev, d, op, "stddev")
        _check_broadcast(op, dims, ("mean", m), ("stddev", sd))
        return _stateful(op, dims, d, lambda: _generator(seed).standard_normal(size=dims)) * sd + m
    mean, stddev = float(mean), float(stddev)
    return _stateful(op, dims, d, lambda: _generator(seed).normal(mean, stddev, size=dims))


def _truncated(g, dims):
    """Standard normals within [-2, 2] (rejected and drawn again)."""
    z = g.standard_normal(size=dims)
    bad = np.abs(z) > 2
    while bad.any():
        z[bad] = g.standard_normal(size=int(bad.sum()))
        bad = np.abs(z) > 2
    return z


def truncated_normal(shape, mean=0.0, stddev=1.0, dtype="float32", seed=None, name=None):
    """``tf.random.truncated_normal``: fresh normal values within two
    standard deviations of the mean (those further are drawn again, as TF
    does); ``mean``/``stddev`` may be tensors broadcast to ``shape``."""
    op = "truncated_normal"
    dims = _shape(shape, op)
    d = _float_dtype(dtype, op)
    z = _stateful(op, dims, d, lambda: _truncated(_generator(seed), dims))
    if _is_number(mean) and _is_number(stddev):
        if float(stddev) == 1.0 and float(mean) == 0.0:
            return z
        return z * convert_to_tensor(float(stddev), dtype=d) + convert_to_tensor(float(mean), dtype=d)
    m, sd = _param(mean, d, op, "mean"), _param(stddev, d, op, "stddev")
    _check_broadcast(op, dims, ("mean", m), ("stddev", sd))
    return z * sd + m


def shuffle(value, seed=None, name=None):
    """``tf.random.shuffle``: ``value`` with its first dim in a fresh
    random order at each call (a NumPy permutation, then a gather: its
    gradient goes back through the permutation). The first dim must be
    known when traced."""
    op = "random_shuffle"
    x = value if isinstance(value, Tensor) else convert_to_tensor(value)
    if x.shape is None:
        raise InvalidArgumentError(f"{op}: the input's rank must be known when traced")
    if len(x.shape) == 0:
        return x
    n = x.shape[0]
    if n is None:
        raise InvalidArgumentError(
            f"{op}: the first dim's size must be known when traced (declare it in the input_signature)")
    perm = _stateful(op, [n], as_dtype("int64"), lambda: _generator(seed).permutation(n))
    return apply("gather", [x, perm], {"axis": 0})


__all__ = [
    "categorical", "normal", "set_seed", "shuffle", "stateless_categorical", "stateless_normal",
    "stateless_truncated_normal", "stateless_uniform", "truncated_normal", "uniform",
]
