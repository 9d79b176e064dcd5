"""``tl.random``: stateless random numbers from a counter-based generator
built with integer ops (Philox-4x32-10, TensorFlow's and JAX's algorithm
family), and stateful ones drawn by NumPy.

Stateless: element ``i`` of a draw comes from Philox's 10 rounds on the
counter ``(i, i >> 32, seed[0] >> 32, seed[1] >> 32)`` under the key
``(seed[0], seed[1])`` (low 32 bits), with the 32×32→64-bit products done
in uint64 arithmetic. The same seed gives the same values eagerly, traced
and compiled; they are not TensorFlow's bit for bit (TensorFlow derives its
key and counter from the seed through another hash)."""

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


def stateless_uniform(shape, seed, minval=0, maxval=None, dtype="float32", name=None, alg="auto_select"):
    """``tf.random.stateless_uniform``: uniform values in ``[minval, maxval)``
    (default ``[0, 1)`` for floats), a function of ``seed`` (shape [2]
    integers) alone. Integer dtypes (int32, int64) need ``maxval`` and take
    the random bits modulo the range (as TensorFlow, slightly biased for
    ranges that are not powers of two)."""
    op = "stateless_uniform"
    dims = _shape(shape, op)
    d = as_dtype(dtype)
    if d.is_integer:
        if d.name not in ("int32", "int64"):
            raise TypeError(f"{op}: integer draws are int32 or int64, not {d.name}")
        if maxval is None:
            raise InvalidArgumentError(f"{op}: an integer dtype needs minval and maxval")
        lo_v, hi_v = int(minval), int(maxval)
        if hi_v <= lo_v:
            raise InvalidArgumentError(f"{op}: need minval < maxval, got [{lo_v}, {hi_v})")

        def build(s):
            a, b = _bits(dims, s, 2, op)
            wide = cast(a, "uint64") * convert_to_tensor(np.uint64(1 << 32)) + cast(b, "uint64")
            span = convert_to_tensor(np.uint64(hi_v - lo_v))
            return cast(wide % span, d.name) + convert_to_tensor(lo_v, dtype=d.name)

        return _eagerly((op, tuple(dims), d.name, lo_v, hi_v), build, seed)
    d = _float_dtype(d, op)
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
    uniform draws), a function of ``seed`` alone."""
    op = "stateless_normal"
    dims = _shape(shape, op)
    d = _float_dtype(dtype, op)
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

    out = _callbacks.numpy_function(cb, [], d, stateful=True, name=op)
    out.set_shape(dims)
    return out


def uniform(shape, minval=0, maxval=None, dtype="float32", seed=None, name=None):
    """``tf.random.uniform``: fresh values at each call (eagerly and at
    each call of a compiled function: a stateful callback), drawn by NumPy
    from the generator ``tl.random.set_seed`` seeds."""
    op = "random_uniform"
    dims = _shape(shape, op)
    d = as_dtype(dtype)
    if d.is_integer:
        if maxval is None:
            raise InvalidArgumentError(f"{op}: an integer dtype needs maxval")
        lo, hi = int(minval), int(maxval)
        if hi <= lo:
            raise InvalidArgumentError(f"{op}: need minval < maxval, got [{lo}, {hi})")
        return _stateful(op, dims, d, lambda: _generator(seed).integers(lo, hi, size=dims))
    d = _float_dtype(d, op)
    lo, hi = float(minval), 1.0 if maxval is None else float(maxval)
    return _stateful(op, dims, d, lambda: _generator(seed).uniform(lo, hi, size=dims))


def normal(shape, mean=0.0, stddev=1.0, dtype="float32", seed=None, name=None):
    """``tf.random.normal``: fresh normal values at each call (see ``uniform``)."""
    op = "random_normal"
    dims = _shape(shape, op)
    d = _float_dtype(dtype, op)
    mean, stddev = float(mean), float(stddev)
    return _stateful(op, dims, d, lambda: _generator(seed).normal(mean, stddev, size=dims))


__all__ = ["normal", "set_seed", "stateless_normal", "stateless_uniform", "uniform"]
