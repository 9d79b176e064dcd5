"""The fifth round of TensorFlow ops built from the core ones: categorical,
truncated normal, shuffle and dropout, tensor parameters of the random
ops; pad modes, band_part, sequence_mask, embedding_lookup, bias_add,
l2_loss, log_sigmoid, clipping and norms, roll, linspace, meshgrid,
in_top_k, searchsorted, invert_permutation, unravel_index, bincount, the
product segment ops; einsum's optimize=. Values against NumPy eagerly,
traced and compiled; gradients against finite differences; bad inputs as
TF-style errors naming the op."""

import math

import numpy as np
import pytest

import tensorlift as tl

from tfops_helpers import MODES, grad, numeric_grad, run  # noqa: F401

KNOWN = "must be known when traced"


def check_grad(tl_f, np_f, mode, x, *rest, atol=2e-3):
    """``tl_f``'s gradient (of the sum of ``tl_f(x) * W``, W fixed weights so
    that every element matters differently) against finite differences of
    ``np_f``."""
    x = np.asarray(x, np.float32)
    out_shape = np.shape(np_f(x.astype(np.float64), *rest))
    w = (np.arange(int(np.prod(out_shape))) % 7 + 1).reshape(out_shape).astype(np.float32)
    got = grad(lambda v, *r: tl_f(v, *r) * tl.constant(w), mode, x, *rest)
    want = numeric_grad(lambda v, *r: np_f(v, *r) * w, x, *rest)
    np.testing.assert_allclose(got, want, atol=atol, rtol=2e-3)


RNG = np.random.default_rng(5)
X = RNG.normal(size=(3, 4)).astype(np.float32)
X3 = RNG.normal(size=(2, 3, 4)).astype(np.float32)


def phi(z):
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


def ks(sample, cdf):
    s = np.sort(np.asarray(sample, np.float64).reshape(-1))
    c = np.array([cdf(v) for v in s])
    return np.max(np.abs(c - np.arange(1, s.size + 1) / s.size))


# --- tl.random.categorical -----------------------------------------------------------------


PROBS = np.array([[0.1, 0.2, 0.7, 0.0], [0.0, 0.5, 0.0, 0.5]], np.float64)
with np.errstate(divide="ignore"):
    LOGP = np.log(PROBS).astype(np.float32) + np.float32(3.0)  # (unnormalized; -inf: never drawn)


@pytest.mark.parametrize("mode", MODES)
def test_categorical_draws_follow_the_probabilities(mode):
    tl.random.set_seed(11)
    out = run(lambda lg: tl.random.categorical(lg, 20000), mode, LOGP).numpy()
    assert out.shape == (2, 20000) and out.dtype == np.int64
    for row, p in zip(out, PROBS):
        freq = np.bincount(row, minlength=4) / row.size
        np.testing.assert_allclose(freq, p, atol=0.015)
        assert (freq[p == 0] == 0).all()
    small = run(lambda lg: tl.random.categorical(lg, 7, dtype=tl.int32), mode, LOGP).numpy()
    assert small.shape == (2, 7) and small.dtype == np.int32
    # Fresh at each call of a function.
    f = tl.function(lambda lg: tl.random.categorical(lg, 50), jit_compile=mode == "jit")
    z = np.zeros((1, 10), np.float32)
    assert not np.array_equal(f(z).numpy(), f(z).numpy())


@pytest.mark.parametrize("mode", MODES)
def test_stateless_categorical_is_a_function_of_the_seed(mode):
    seed = np.array([3, 4], np.int64)
    out = run(lambda lg, s: tl.random.stateless_categorical(lg, 20000, s), mode, LOGP, seed).numpy()
    again = tl.random.stateless_categorical(tl.constant(LOGP), 20000, seed=[3, 4]).numpy()
    assert np.array_equal(out, again) and out.dtype == np.int64 and out.shape == (2, 20000)
    for row, p in zip(out, PROBS):
        np.testing.assert_allclose(np.bincount(row, minlength=4) / row.size, p, atol=0.015)
    other = tl.random.stateless_categorical(tl.constant(LOGP), 20000, seed=[3, 5]).numpy()
    assert not np.array_equal(out, other)
    # float64 and float16 logits, int32 results.
    for dt in (np.float64, np.float16):
        r = run(lambda lg, s: tl.random.stateless_categorical(lg, 5, s, dtype=tl.int32), mode,
                LOGP.astype(dt), seed).numpy()
        assert r.dtype == np.int32 and set(np.unique(r[0])) <= {0, 1, 2}


def test_categorical_bad_inputs():
    with pytest.raises(tl.errors.InvalidArgumentError, match="categorical: logits should be a matrix"):
        tl.random.categorical(tl.constant([1.0, 2.0]), 3)
    with pytest.raises(TypeError, match="categorical: logits must be floating-point"):
        tl.random.categorical(tl.constant([[1, 2]]), 3)
    with pytest.raises(TypeError, match="stateless_categorical: dtype must be int32 or int64"):
        tl.random.stateless_categorical(tl.constant([[1.0, 2.0]]), 3, seed=[1, 2], dtype=tl.float32)
    with pytest.raises(tl.errors.InvalidArgumentError, match="num_samples must be >= 0"):
        tl.random.categorical(tl.constant([[1.0, 2.0]]), -1)
    with pytest.raises(TypeError, match="num_samples .*must be known when traced"):
        tl.function(lambda lg, n: tl.random.categorical(lg, n))(np.zeros((1, 2), np.float32), np.int32(3))
    with pytest.raises(tl.errors.InvalidArgumentError, match="seed must be an integer tensor of shape"):
        tl.random.stateless_categorical(tl.constant([[1.0, 2.0]]), 3, seed=[1, 2, 3])


# --- truncated normal --------------------------------------------------------------------------


def truncated_cdf(z):
    return (phi(z) - phi(-2)) / (phi(2) - phi(-2))


TRUNC_STD = math.sqrt(1 - 4 * math.exp(-2) / math.sqrt(2 * math.pi) / (phi(2) - phi(-2)))


@pytest.mark.parametrize("mode", MODES)
def test_truncated_normal_draws(mode):
    tl.random.set_seed(3)
    seed = np.array([7, 8], np.int64)
    for dtype in (tl.float32, tl.float64):
        stateless = run(lambda s: tl.random.stateless_truncated_normal([20000], s, mean=1.0, stddev=3.0,
                                                                       dtype=dtype), mode, seed).numpy()
        stateful = run(lambda: tl.random.truncated_normal([20000], mean=1.0, stddev=3.0, dtype=dtype), mode).numpy()
        for z in (stateless, stateful):
            assert z.dtype == dtype.as_numpy_dtype and np.isfinite(z).all()
            assert z.min() >= 1 - 6.0001 and z.max() <= 1 + 6.0001
            assert abs(z.mean() - 1.0) < 0.05 and abs(z.std() - 3 * TRUNC_STD) < 0.04
            assert ks((z - 1.0) / 3.0, truncated_cdf) < 0.015
    again = tl.random.stateless_truncated_normal([20000], [7, 8], mean=1.0, stddev=3.0, dtype=tl.float64).numpy()
    # (Compiled code's log/erf/exp may differ from the interpreter's by an ulp.)
    np.testing.assert_allclose(again, stateless, rtol=0, atol=1e-13)


def test_erfinv_inverts_erf():
    from tensorlift._random import _erfinv_central

    y = np.linspace(-0.9545, 0.9545, 401)
    x64 = _erfinv_central(tl.constant(y), 2).numpy()
    np.testing.assert_allclose([math.erf(v) for v in x64], y, rtol=0, atol=1e-15)
    x32 = _erfinv_central(tl.constant(y.astype(np.float32)), 1).numpy()
    np.testing.assert_allclose(x32, x64, rtol=1e-6, atol=1e-7)


# --- shuffle and dropout ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_shuffle_permutes_the_first_dim(mode):
    tl.random.set_seed(4)
    x = np.arange(40, dtype=np.float32).reshape(20, 2)
    outs = [run(tl.random.shuffle, mode, x).numpy() for _ in range(3)]
    for out in outs:
        assert out.shape == x.shape and np.array_equal(np.sort(out[:, 0]), x[:, 0])
        assert np.array_equal(out[:, 1], out[:, 0] + 1)  # rows move whole
    assert not all(np.array_equal(outs[0], o) for o in outs[1:])
    f = tl.function(tl.random.shuffle, jit_compile=mode == "jit")
    assert not np.array_equal(f(x).numpy(), f(x).numpy())
    # d/dx sum(shuffle(x)²) = 2x, whatever the permutation.
    np.testing.assert_allclose(grad(lambda v: tl.random.shuffle(v) ** 2.0, mode, x), 2 * x)
    assert run(tl.random.shuffle, mode, np.float32(3)).numpy() == 3


@pytest.mark.parametrize("mode", MODES)
def test_dropout_keeps_and_scales(mode):
    tl.random.set_seed(1)
    x = RNG.uniform(1, 2, size=(200, 50)).astype(np.float32)

    def f(v):
        with tl.GradientTape() as tape:
            tape.watch(v)
            y = tl.nn.dropout(v, 0.25)
        return y, tape.gradient(y, v)

    y, g = (t.numpy() for t in run(f, mode, x))
    kept = y != 0
    np.testing.assert_allclose(y[kept], x[kept] / 0.75, rtol=1e-6)
    assert abs(kept.mean() - 0.75) < 0.02
    np.testing.assert_allclose(g, kept / 0.75, rtol=1e-6)  # the gradient sees the same mask
    # noise_shape: whole rows kept or dropped (None takes x's dim).
    rows = run(lambda v: tl.nn.dropout(v, 0.5, noise_shape=[200, 1]), mode, x).numpy()
    assert ((rows == 0).all(1) | (rows != 0).all(1)).all() and 0.35 < (rows != 0).all(1).mean() < 0.65
    cols = run(lambda v: tl.nn.dropout(v, 0.5, noise_shape=[None, 1]), mode, x).numpy()
    assert ((cols == 0).all(1) | (cols != 0).all(1)).all()
    # A tensor rate (traced in the functions).
    r = run(lambda v, rate: tl.nn.dropout(v, rate), mode, x, np.float32(0.5)).numpy()
    np.testing.assert_allclose(r[r != 0], 2 * x[r != 0], rtol=1e-6)
    assert np.array_equal(run(lambda v: tl.nn.dropout(v, 0.0), mode, x).numpy(), x)


def test_dropout_bad_inputs():
    with pytest.raises(ValueError, match="dropout: rate must be a scalar tensor or a float in the range \\[0, 1\\)"):
        tl.nn.dropout(tl.constant([1.0]), 1.0)
    with pytest.raises(ValueError, match="dropout: x must be a floating point tensor"):
        tl.nn.dropout(tl.constant([1, 2]), 0.5)
    with pytest.raises(tl.errors.InvalidArgumentError, match="noise_shape"):
        tl.nn.dropout(tl.ones([2, 3]), 0.5, noise_shape=[2, 2])
    with pytest.raises(tl.errors.InvalidArgumentError, match="range \\[0, 1\\)"):
        tl.nn.dropout(tl.ones([2, 3]), tl.constant(1.5))


# --- tensor parameters of the random ops -------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_random_ops_take_tensor_parameters(mode):
    tl.random.set_seed(2)
    lo = np.array([0.0, 10.0, 100.0], np.float32)
    seed = np.array([1, 2], np.int64)
    u = run(lambda a: tl.random.uniform([500, 3], minval=a, maxval=a + 1.0), mode, lo).numpy()
    assert ((u >= lo) & (u < lo + 1)).all() and np.allclose(u.mean(0), lo + 0.5, atol=0.05)
    su = run(lambda a, s: tl.random.stateless_uniform([500, 3], s, minval=a, maxval=a + 1.0), mode, lo, seed)
    base = tl.random.stateless_uniform([500, 3], seed=[1, 2]).numpy()
    np.testing.assert_allclose(su.numpy(), base + lo, rtol=1e-6)
    n = run(lambda m: tl.random.normal([4000, 3], mean=m, stddev=tl.constant(2.0)), mode, lo).numpy()
    np.testing.assert_allclose(n.mean(0), lo, atol=0.15)
    np.testing.assert_allclose(n.std(0), 2.0, atol=0.1)
    sn = run(lambda m, s: tl.random.stateless_normal([3], s, mean=m, stddev=2.0), mode, lo, seed).numpy()
    np.testing.assert_allclose(sn, tl.random.stateless_normal([3], seed=[1, 2]).numpy() * 2 + lo, rtol=1e-5)
    tn = run(lambda m: tl.random.truncated_normal([1000, 3], mean=m), mode, lo).numpy()
    assert (np.abs(tn - lo) <= 2.0001).all()
    # Reparameterized: d/dmean sum(normal(mean, sd)) = the count; d/dsd = sum(z).
    g = grad(lambda m: tl.random.normal([10, 3], mean=m), mode, lo)
    np.testing.assert_allclose(g, np.full(3, 10.0))
    g = grad(lambda m, s: tl.random.stateless_uniform([10, 3], s, minval=m, maxval=m * 2.0), mode, lo + 1, seed)
    np.testing.assert_allclose(g, 10 + base[:10].sum(0), rtol=1e-5)
    # Integer bounds as (traced) scalar tensors.
    i = run(lambda a, b: tl.random.uniform([2000], minval=a, maxval=b, dtype=tl.int64), mode,
            np.int64(-2), np.int64(3)).numpy()
    assert i.dtype == np.int64 and set(np.unique(i)) == set(range(-2, 3))
    si = run(lambda a, b, s: tl.random.stateless_uniform([2000], s, minval=a, maxval=b, dtype=tl.int32), mode,
             np.int32(-2), np.int32(3), seed).numpy()
    assert si.dtype == np.int32 and set(np.unique(si)) == set(range(-2, 3))


@pytest.mark.parametrize("mode", MODES)
def test_stateless_uniform_full_integer_range(mode):
    seed = np.array([5, 6], np.int64)
    for dt in (tl.int32, tl.int64, tl.uint32, tl.uint64):
        v = run(lambda s: tl.random.stateless_uniform([4000], s, minval=None, maxval=None, dtype=dt),
                mode, seed).numpy()
        info = np.iinfo(dt.as_numpy_dtype)
        assert v.dtype == dt.as_numpy_dtype and len(np.unique(v)) == 4000
        # Spread over the whole range: each quarter holds about a quarter.
        q = np.floor((v.astype(np.float64) - info.min) / (float(info.max) - info.min + 1) * 4)
        assert (np.abs(np.bincount(q.astype(int), minlength=4) / 4000 - 0.25) < 0.03).all()
        again = tl.random.stateless_uniform([4000], [5, 6], minval=None, maxval=None, dtype=dt).numpy()
        assert np.array_equal(v, again)


def test_random_parameter_errors():
    with pytest.raises(tl.errors.InvalidArgumentError, match="random_uniform: minval of shape \\[4\\] does not"):
        tl.random.uniform([2, 3], minval=tl.zeros([4]))
    with pytest.raises(tl.errors.InvalidArgumentError, match="stateless_normal: mean of shape \\[2, 1, 3\\]"):
        tl.random.stateless_normal([1, 3], seed=[1, 2], mean=tl.zeros([2, 1, 3]))
    with pytest.raises(ValueError, match="random_normal: stddev is a float64 tensor"):
        tl.random.normal([2], stddev=tl.constant(1.0, dtype=tl.float64))
    with pytest.raises(tl.errors.InvalidArgumentError, match="scalar maxval"):
        tl.random.uniform([2], maxval=tl.constant([3, 4]), dtype=tl.int32)
    with pytest.raises(tl.errors.InvalidArgumentError, match="both None: the full range"):
        tl.random.stateless_uniform([2], seed=[1, 2], minval=None, maxval=5, dtype=tl.int32)
    with pytest.raises(TypeError, match="full-range integer draws are"):
        tl.random.stateless_uniform([2], seed=[1, 2], minval=None, maxval=None, dtype=tl.int8)


# --- pad --------------------------------------------------------------------------------------


PADS = [[1, 2], [0, 3]]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("how", ["CONSTANT", "REFLECT", "SYMMETRIC"])
def test_pad_matches_numpy(mode, how):
    got = run(lambda v: tl.pad(v, PADS, mode=how.lower() if how == "SYMMETRIC" else how), mode, X).numpy()
    want = np.pad(X, PADS, mode=how.lower())
    np.testing.assert_array_equal(got, want)
    check_grad(lambda v: tl.pad(v, PADS, mode=how), lambda v: np.pad(v, PADS, mode=how.lower()), mode, X)
    # 3-D, one dim unpadded; an eager tensor of paddings; int32.
    pads3 = np.array([[0, 0], [2, 1], [1, 1]], np.int64)
    ints = (X3 * 10).astype(np.int32)
    got = run(lambda v: tl.pad(v, tl.constant(pads3), how), mode, ints).numpy()
    assert np.array_equal(got, np.pad(ints, pads3, mode=how.lower()))


@pytest.mark.parametrize("mode", MODES)
def test_pad_constant_values(mode):
    got = run(lambda v, c: tl.pad(v, PADS, constant_values=c), mode, X, np.float32(-7)).numpy()
    np.testing.assert_array_equal(got, np.pad(X, PADS, constant_values=-7))
    got = run(lambda v: tl.pad(v, PADS, constant_values=2.5), mode, X).numpy()
    np.testing.assert_array_equal(got, np.pad(X, PADS, constant_values=2.5))


def test_pad_unknown_dims_and_errors():
    sig = [tl.TensorSpec([None, 4], tl.float32)]
    f = tl.function(lambda v: tl.pad(v, PADS), input_signature=sig)
    np.testing.assert_array_equal(f(X).numpy(), np.pad(X, PADS))
    g = tl.function(lambda v: tl.pad(v, PADS, "REFLECT"), input_signature=sig)  # traced per shape
    np.testing.assert_array_equal(g(X).numpy(), np.pad(X, PADS, mode="reflect"))
    x = tl.constant(X)
    with pytest.raises(ValueError, match="pad: mode must be one of"):
        tl.pad(x, PADS, mode="WRAP")
    with pytest.raises(tl.errors.InvalidArgumentError, match="pad: REFLECT paddings must be less than the dimension"):
        tl.pad(x, [[3, 0], [0, 0]], "REFLECT")
    with pytest.raises(tl.errors.InvalidArgumentError, match="pad: SYMMETRIC paddings must be no more than"):
        tl.pad(x, [[4, 0], [0, 0]], "SYMMETRIC")
    assert tl.pad(x, [[3, 0], [0, 0]], "SYMMETRIC").shape == (6, 4)
    with pytest.raises(tl.errors.InvalidArgumentError, match="pad: paddings must be non-negative"):
        tl.pad(x, [[-1, 0], [0, 0]])
    with pytest.raises(tl.errors.InvalidArgumentError, match="shape \\[2, 2\\]"):
        tl.pad(x, [[1, 1]])
    with pytest.raises(TypeError, match="pad: paddings is a tensor of the traced function.*must be known when traced"):
        tl.function(lambda v, p: tl.pad(v, p))(X, np.array(PADS))


# --- band_part, sequence_mask -------------------------------------------------------------------


def np_band(x, lo, hi):
    m, n = x.shape[-2:]
    i, j = np.arange(m)[:, None], np.arange(n)[None, :]
    keep = ((lo < 0) | (i - j <= lo)) & ((hi < 0) | (j - i <= hi))
    return np.where(keep, x, 0)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("lo,hi", [(0, -1), (-1, 0), (1, 1), (0, 0), (2, 0), (-1, -1)])
def test_band_part(mode, lo, hi):
    x = RNG.normal(size=(2, 4, 5)).astype(np.float32)
    got = run(lambda v: tl.linalg.band_part(v, lo, hi), mode, x).numpy()
    np.testing.assert_array_equal(got, np_band(x, lo, hi))
    # Counts as (traced) tensors.
    got = run(lambda v, a, b: tl.linalg.band_part(v, a, b), mode, x, np.int64(lo), np.int64(hi)).numpy()
    np.testing.assert_array_equal(got, np_band(x, lo, hi))
    g = grad(lambda v: tl.linalg.band_part(v, lo, hi), mode, x)
    np.testing.assert_array_equal(g, np_band(np.ones_like(x), lo, hi))


def test_band_part_errors():
    with pytest.raises(tl.errors.InvalidArgumentError, match="band_part: input must be at least 2-dim"):
        tl.linalg.band_part(tl.ones([3]), 0, 0)
    with pytest.raises(tl.errors.InvalidArgumentError, match="band_part: num_lower must be negative or less"):
        tl.linalg.band_part(tl.ones([3, 3]), 4, 0)
    with pytest.raises(TypeError, match="band_part: num_upper must be int32 or int64"):
        tl.linalg.band_part(tl.ones([3, 3]), 0, 1.5)


@pytest.mark.parametrize("mode", MODES)
def test_sequence_mask(mode):
    lengths = np.array([[1, 3], [0, 5]], np.int32)
    got = run(lambda v: tl.sequence_mask(v, 4), mode, lengths).numpy()
    assert got.dtype == bool and np.array_equal(got, np.arange(4) < lengths[..., None])
    got = run(lambda v: tl.sequence_mask(v, 6, dtype=tl.float32), mode, lengths).numpy()
    assert got.dtype == np.float32 and np.array_equal(got, (np.arange(6) < lengths[..., None]).astype(np.float32))
    got = run(lambda v, n: tl.sequence_mask(v, n), "eager", lengths, np.int32(2)).numpy()
    assert got.shape == (2, 2, 2)


def test_sequence_mask_without_maxlen():
    got = tl.sequence_mask(tl.constant([2, 0, 3], dtype=tl.int64)).numpy()
    assert np.array_equal(got, np.arange(3) < np.array([2, 0, 3])[:, None])
    assert tl.sequence_mask(tl.constant(np.zeros([0], np.int32))).shape == (0, 0)
    with pytest.raises(tl.errors.InvalidArgumentError, match="sequence_mask: .*must be known when traced"):
        tl.function(lambda v: tl.sequence_mask(v))(np.array([1, 2], np.int32))
    with pytest.raises(TypeError, match="sequence_mask: lengths must be integers"):
        tl.sequence_mask(tl.constant([1.0]), 3)


# --- tf.nn ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_embedding_lookup(mode):
    table = RNG.normal(size=(6, 3)).astype(np.float32)
    ids = np.array([[0, 5], [2, 2]], np.int32)
    got = run(tl.nn.embedding_lookup, mode, table, ids).numpy()
    np.testing.assert_array_equal(got, table[ids])
    shards = run(lambda a, b, i: tl.nn.embedding_lookup([a, b], i), mode, table[:4], table[4:], ids).numpy()
    np.testing.assert_array_equal(shards, table[ids])
    g = grad(lambda t, i: tl.nn.embedding_lookup(t, i), mode, table, ids)
    np.testing.assert_array_equal(g, np.array([1, 0, 2, 0, 0, 1])[:, None] * np.ones(3))
    clipped = run(lambda t, i: tl.nn.embedding_lookup(t, i, max_norm=0.5), mode, table * 10, ids).numpy()
    np.testing.assert_allclose(np.linalg.norm(clipped, axis=-1), 0.5, rtol=1e-5)
    with pytest.raises(TypeError, match="embedding_lookup: ids must be int32 or int64"):
        tl.nn.embedding_lookup(tl.constant(table), tl.constant([0.0]))


@pytest.mark.parametrize("mode", MODES)
def test_bias_add(mode):
    x = RNG.normal(size=(2, 3, 4, 5)).astype(np.float32)
    b5, b3 = np.arange(5, dtype=np.float32), np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(run(tl.nn.bias_add, mode, x, b5).numpy(), x + b5)
    got = run(lambda v, b: tl.nn.bias_add(v, b, data_format="NCHW"), mode, x, b3).numpy()
    np.testing.assert_array_equal(got, x + b3[:, None, None])
    g = grad(lambda b, v: tl.nn.bias_add(v, b, data_format="NCHW"), mode, b3, x)
    np.testing.assert_array_equal(g, np.full(3, 40.0))
    with pytest.raises(tl.errors.InvalidArgumentError, match="bias_add: must provide as many biases"):
        tl.nn.bias_add(tl.constant(x), tl.constant(b3))
    with pytest.raises(tl.errors.InvalidArgumentError, match="bias_add: bias must be 1-D"):
        tl.nn.bias_add(tl.constant(x), tl.constant([[1.0]]))


@pytest.mark.parametrize("mode", MODES)
def test_l2_loss_and_log_sigmoid(mode):
    np.testing.assert_allclose(run(tl.nn.l2_loss, mode, X).numpy(), (X.astype(np.float64) ** 2).sum() / 2, rtol=1e-5)
    np.testing.assert_allclose(grad(tl.nn.l2_loss, mode, X), X, rtol=1e-6)
    x = np.array([-200.0, -20.0, -1.0, 0.0, 1.0, 30.0, 200.0], np.float32)
    x64 = x.astype(np.float64)
    want = -np.logaddexp(0, -x64)
    np.testing.assert_allclose(run(tl.math.log_sigmoid, mode, x).numpy(), want, rtol=1e-6, atol=1e-30)
    np.testing.assert_allclose(grad(tl.math.log_sigmoid, mode, x), 1 / (1 + np.exp(x64)), rtol=1e-5, atol=1e-30)


# --- clipping and norms -----------------------------------------------------------------------


def np_clip_by_norm(t, c, axes=None):
    n = np.sqrt((t * t).sum(axis=axes, keepdims=True))
    return t * c / np.maximum(n, c)


@pytest.mark.parametrize("mode", MODES)
def test_clip_by_norm(mode):
    for c in (0.5, 100.0):
        got = run(lambda v: tl.clip_by_norm(v, c), mode, X).numpy()
        np.testing.assert_allclose(got, np_clip_by_norm(X, c), rtol=1e-5)
        got = run(lambda v: tl.clip_by_norm(v, c, axes=[1]), mode, X).numpy()
        np.testing.assert_allclose(got, np_clip_by_norm(X, c, 1), rtol=1e-5)
        check_grad(lambda v: tl.clip_by_norm(v, c, axes=1), lambda v: np_clip_by_norm(v, c, 1), mode, X)
    zero = np.zeros((2, 2), np.float32)
    assert (run(lambda v: tl.clip_by_norm(v, 1.0), mode, zero).numpy() == 0).all()
    assert np.isfinite(grad(lambda v: tl.clip_by_norm(v, 1.0), mode, zero)).all()


@pytest.mark.parametrize("mode", MODES)
def test_clip_by_global_norm(mode):
    a, b = X, X3
    gn = np.sqrt((a.astype(np.float64) ** 2).sum() + (b.astype(np.float64) ** 2).sum())

    def f(u, v):
        out, norm = tl.clip_by_global_norm([u, None, v], 2.0)
        assert out[1] is None
        return out[0], out[2], norm

    ca, cb, n = (t.numpy() for t in run(f, mode, a, b))
    np.testing.assert_allclose(n, gn, rtol=1e-5)
    np.testing.assert_allclose(ca, a * 2 / gn, rtol=1e-5)
    np.testing.assert_allclose(cb, b * 2 / gn, rtol=1e-5)
    np.testing.assert_allclose(run(lambda u, v: tl.linalg.global_norm([u, v]), mode, a, b).numpy(), gn, rtol=1e-5)
    # Under the clip norm: unchanged; an inf norm: NaN, as TF.
    small = run(lambda u: tl.clip_by_global_norm([u], 1e6)[0][0], mode, a).numpy()
    np.testing.assert_allclose(small, a, rtol=1e-6)
    inf = run(lambda u: tl.clip_by_global_norm([u], 1.0)[0][0], mode, np.array([np.inf, 1.0], np.float32)).numpy()
    assert np.isnan(inf).all()
    with pytest.raises(TypeError, match="clip_by_global_norm: t_list should be a sequence of tensors"):
        tl.clip_by_global_norm(tl.constant(a), 1.0)


NORMS = [
    ("euclidean", None), (2, None), (1, None), (np.inf, None), (3, None), (0.5, None),
    ("euclidean", 1), (1, 0), (np.inf, -1), (2, 1),
    ("fro", (0, 1)), ("euclidean", (1, 2)), (1, (0, 1)), (np.inf, (0, 1)), (1, (2, 1)), (np.inf, (-1, -2)),
]


def np_norm(x, ord, axis, keepdims=False):
    if axis is None:
        r = np.linalg.norm(x.reshape(-1), None if ord == "euclidean" else ord)
        return np.reshape(r, [1] * x.ndim) if keepdims else r
    return np.linalg.norm(x, None if ord == "euclidean" else ord, axis, keepdims)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ord,axis", NORMS)
def test_norm_matches_numpy(mode, ord, axis):
    x = X3.astype(np.float32)
    if axis is not None and not isinstance(axis, int) and max(axis) >= 2:
        pass
    elif axis is not None and not isinstance(axis, int):
        x = X
    got = run(lambda v: tl.norm(v, ord=ord, axis=axis), mode, x).numpy()
    np.testing.assert_allclose(got, np_norm(x.astype(np.float64), ord, axis), rtol=1e-5)
    kept = run(lambda v: tl.linalg.norm(v, ord=ord, axis=axis, keepdims=True), mode, x).numpy()
    np.testing.assert_allclose(kept, np_norm(x.astype(np.float64), ord, axis, True), rtol=1e-5)
    check_grad(lambda v: tl.norm(v, ord=ord, axis=axis), lambda v: np_norm(v, ord, axis), mode, x)


def test_norm_errors():
    x = tl.constant(X)
    with pytest.raises(ValueError, match="norm: 'ord' must be a supported vector norm, got 'fro'"):
        tl.norm(x, ord="fro")
    with pytest.raises(ValueError, match="norm: 'ord' must be a supported vector norm, got -1"):
        tl.norm(x, ord=-1, axis=0)
    with pytest.raises(ValueError, match="supported matrix norm"):
        tl.norm(x, ord=3, axis=[0, 1])
    with pytest.raises(ValueError, match="tuple of 2 unique integers"):
        tl.norm(x, axis=[1, 1])
    with pytest.raises(tl.errors.UnimplementedError, match="norm: the spectral norm"):
        tl.norm(x, ord=2, axis=[0, 1])
    with pytest.raises(tl.errors.InvalidArgumentError, match="norm: axis 2 is out of range"):
        tl.norm(x, axis=2)


# --- roll, linspace, meshgrid ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shift,axis", [(1, 0), (-2, 2), (7, 1), ([1, 2], [0, 2]), ([1, 1], [2, 2]), (0, 1)])
def test_roll(mode, shift, axis):
    got = run(lambda v: tl.roll(v, shift, axis), mode, X3).numpy()
    want = np.roll(X3, shift, axis)
    np.testing.assert_array_equal(got, want)
    # The shift as a (traced) tensor.
    got = run(lambda v, s: tl.roll(v, s, axis), mode, X3, np.array(shift, np.int32)).numpy()
    np.testing.assert_array_equal(got, want)
    check_grad(lambda v: tl.roll(v, shift, axis), lambda v: np.roll(v, shift, axis), mode, X3)


def test_roll_unknown_dims_and_errors():
    f = tl.function(lambda v: tl.roll(v, 2, 0), input_signature=[tl.TensorSpec([None], tl.float32)])
    v = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(f(v).numpy(), np.roll(v, 2))
    np.testing.assert_array_equal(f(v[:3]).numpy(), np.roll(v[:3], 2))
    with pytest.raises(tl.errors.InvalidArgumentError, match="roll: shift and axis must have the same size"):
        tl.roll(tl.constant(X), [1, 2], 0)
    with pytest.raises(tl.errors.InvalidArgumentError, match="roll: axis 2 is out of range"):
        tl.roll(tl.constant(X), 1, 2)
    with pytest.raises(TypeError, match="roll: shift must be integers"):
        tl.roll(tl.constant(X), 1.5, 0)


@pytest.mark.parametrize("mode", MODES)
def test_linspace(mode):
    for num in (0, 1, 2, 5, 11):
        got = run(lambda a, b: tl.linspace(a, b, num), mode, np.float32(-1.5), np.float32(2.0)).numpy()
        np.testing.assert_allclose(got, np.linspace(-1.5, 2.0, num), rtol=1e-6, atol=1e-7)
        if num >= 2:
            assert got[-1] == np.float32(2.0)
    a, b = np.array([0.0, 10.0], np.float32), np.array([[1.0], [2.0], [3.0]], np.float32)
    for axis in (0, 1, 2, -1):
        got = run(lambda u, v: tl.linspace(u, v, 4, axis=axis), mode, a, b).numpy()
        np.testing.assert_allclose(got, np.linspace(np.broadcast_to(a, (3, 2)), np.broadcast_to(b, (3, 2)), 4,
                                                    axis=axis), rtol=1e-6)
    d = run(lambda u, v: tl.linspace(u, v, 3), mode, np.float64(0), np.float64(1)).numpy()
    assert d.dtype == np.float64
    # d/dstart: (n-1-i)/(n-1) summed; d/dstop: i/(n-1).
    g = grad(lambda u, v: tl.linspace(u, v, 5), mode, np.float32(0.0), np.float32(1.0))
    np.testing.assert_allclose(g, 2.5)
    g = grad(lambda v, u: tl.linspace(u, v, 5), mode, np.float32(1.0), np.float32(0.0))
    np.testing.assert_allclose(g, 2.5)


def test_linspace_errors():
    with pytest.raises(TypeError, match="linspace: start must be floating-point"):
        tl.linspace(0, 1, 3)
    with pytest.raises(tl.errors.InvalidArgumentError, match="linspace: num must be >= 0"):
        tl.linspace(0.0, 1.0, -1)
    with pytest.raises(TypeError, match="linspace: num is a tensor of the traced function.*must be known when"):
        tl.function(lambda n: tl.linspace(0.0, 1.0, n))(np.int32(3))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("indexing", ["xy", "ij"])
def test_meshgrid(mode, indexing):
    a, b, c = np.arange(3, dtype=np.float32), np.arange(4, dtype=np.float32) * 10, np.arange(2, dtype=np.float32)
    got = run(lambda u, v, w: tuple(tl.meshgrid(u, v, w, indexing=indexing)), mode, a, b, c)
    for g, w in zip(got, np.meshgrid(a, b, c, indexing=indexing)):
        np.testing.assert_array_equal(g.numpy(), w)
    got = run(lambda u, v: tuple(tl.meshgrid(u, v, indexing=indexing)), mode, a, b)
    for g, w in zip(got, np.meshgrid(a, b, indexing=indexing)):
        np.testing.assert_array_equal(g.numpy(), w)
    np.testing.assert_array_equal(grad(lambda u, v: tl.meshgrid(u, v, indexing=indexing)[0], mode, a, b),
                                  np.full(3, 4.0))
    with pytest.raises(ValueError, match="meshgrid: indexing must be either 'xy' or 'ij'"):
        tl.meshgrid(tl.constant(a), indexing="yx")


# --- in_top_k, searchsorted, permutations and indices ---------------------------------------------


def np_in_top_k(targets, predictions, k):
    out = []
    for t, row in zip(targets, predictions):
        if not 0 <= t < row.size or not np.isfinite(row[t]):
            out.append(False)
            continue
        out.append(int(np.sum(np.isfinite(row) & (row > row[t]))) < k)
    return np.array(out)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("k", [0, 1, 2, 3, 5])
def test_in_top_k(mode, k):
    p = np.array([[0.1, 0.5, 0.5, 0.2], [3.0, 2.0, 1.0, 0.0], [np.inf, 1.0, 2.0, 1.0], [1.0, np.nan, 2.0, 0.0],
                  [0.0, 0.0, 0.0, 0.0], [1.0, 2.0, 3.0, 4.0]], np.float32)
    t = np.array([2, 3, 2, 2, 1, 4], np.int32)
    want = np_in_top_k(t, p, k)
    np.testing.assert_array_equal(run(lambda a, b: tl.math.in_top_k(a, b, k), mode, t, p).numpy(), want)
    got = run(lambda a, b, kk: tl.nn.in_top_k(a, b, kk), mode, t.astype(np.int64), p, np.int64(k)).numpy()
    np.testing.assert_array_equal(got, want)
    with pytest.raises(tl.errors.InvalidArgumentError, match="in_top_k: first dimension of predictions 6"):
        tl.math.in_top_k(tl.constant(t[:2]), tl.constant(p), 1)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted(mode, side):
    seq = np.array([1.0, 3.0, 3.0, 5.0, 8.0], np.float32)
    vals = np.array([-1.0, 1.0, 3.0, 4.0, 8.0, 9.0], np.float32)
    got = run(lambda s, v: tl.searchsorted(s, v, side=side), mode, seq, vals).numpy()
    assert got.dtype == np.int32 and np.array_equal(got, np.searchsorted(seq, vals, side=side))
    seqs = np.sort(RNG.integers(0, 10, size=(2, 3, 7)), axis=-1).astype(np.int64)
    vals2 = RNG.integers(-1, 11, size=(2, 3, 4)).astype(np.int64)
    got = run(lambda s, v: tl.searchsorted(s, v, side=side, out_type=tl.int64), mode, seqs, vals2).numpy()
    want = np.array([np.searchsorted(s, v, side=side) for s, v in zip(seqs.reshape(6, 7), vals2.reshape(6, 4))])
    assert got.dtype == np.int64 and np.array_equal(got, want.reshape(2, 3, 4))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted_of_long_rows_merges_by_sorting(mode, side):
    from tensorlift._more_ops2 import _SEARCH_DENSE

    rng = np.random.default_rng(4)
    seq = np.sort(rng.integers(0, 40, size=(2, 3, 150)), axis=-1).astype(np.float32)  # many ties
    vals = rng.integers(-2, 43, size=(2, 3, 60)).astype(np.float32)
    assert 150 * 60 > _SEARCH_DENSE
    seq[0, 0, -4:] = np.nan  # NaN sorts last, as NumPy's
    vals[0, 0, :3] = np.nan
    got = run(lambda a, b: tl.searchsorted(a, b, side=side), mode, seq, vals).numpy()
    want = np.array([np.searchsorted(a, b, side=side) for a, b in zip(seq.reshape(6, 150), vals.reshape(6, 60))])
    assert np.array_equal(got, want.reshape(2, 3, 60))
    ints = rng.integers(-2**40, 2**40, size=(5000,))
    seq64, vals64 = np.sort(ints[:3000]), ints[3000:]
    got = run(lambda a, b: tl.searchsorted(a, b, side=side, out_type=tl.int64), mode, seq64, vals64).numpy()
    assert got.dtype == np.int64 and np.array_equal(got, np.searchsorted(seq64, vals64, side=side))


def test_searchsorted_errors():
    with pytest.raises(ValueError, match="searchsorted: side should be either 'right' or 'left'"):
        tl.searchsorted(tl.constant([1.0]), tl.constant([1.0]), side="middle")
    with pytest.raises(tl.errors.InvalidArgumentError, match="searchsorted: leading dim_size of both tensors"):
        tl.searchsorted(tl.constant([[1.0], [2.0]]), tl.constant([[1.0]]))
    with pytest.raises(TypeError, match="searchsorted: values are int32 but sorted_sequence is float32"):
        tl.searchsorted(tl.constant([1.0]), tl.constant([1]))


@pytest.mark.parametrize("mode", MODES)
def test_invert_permutation(mode):
    for dt in (np.int32, np.int64):
        p = RNG.permutation(9).astype(dt)
        got = run(tl.math.invert_permutation, mode, p).numpy()
        assert got.dtype == dt and np.array_equal(got, np.argsort(p))
    with pytest.raises(tl.errors.InvalidArgumentError, match="invert_permutation: 3 is not between 0 and 3"):
        tl.math.invert_permutation(tl.constant([0, 3, 1]))
    with pytest.raises(tl.errors.InvalidArgumentError, match="invert_permutation: 1 is duplicated in the input"):
        tl.math.invert_permutation(tl.constant([1, 1, 0]))
    with pytest.raises(tl.errors.InvalidArgumentError, match="invert_permutation: x must be a vector"):
        tl.math.invert_permutation(tl.constant([[0]]))


@pytest.mark.parametrize("mode", MODES)
def test_unravel_index(mode):
    dims = np.array([3, 4, 5], np.int32)
    idx = np.array([0, 7, 59, 23], np.int32)
    got = run(tl.unravel_index, mode, idx, dims).numpy()
    assert got.dtype == np.int32 and np.array_equal(got, np.array(np.unravel_index(idx, dims)))
    got = run(lambda i: tl.unravel_index(i, [3, 4, 5]), mode, np.int64(42)).numpy()
    assert got.dtype == np.int64 and np.array_equal(got, np.array(np.unravel_index(42, dims)))
    with pytest.raises(tl.errors.InvalidArgumentError, match="unravel_index: index 60 is out of bound"):
        tl.unravel_index(tl.constant([1, 60]), tl.constant(dims))
    with pytest.raises(TypeError, match="unravel_index: dims are int64 but indices are int32"):
        tl.unravel_index(tl.constant([1]), tl.constant(dims.astype(np.int64)))


# --- bincount, product segments ---------------------------------------------------------------------


def test_bincount_eager_matches_numpy():
    arr = np.array([1, 1, 3, 0, 7, 3, 3], np.int32)
    w = RNG.normal(size=7).astype(np.float32)
    bc = tl.math.bincount
    assert np.array_equal(bc(tl.constant(arr)).numpy(), np.bincount(arr))
    assert np.array_equal(bc(tl.constant(arr), minlength=10).numpy(), np.bincount(arr, minlength=10))
    assert np.array_equal(bc(tl.constant(arr), maxlength=4).numpy(), np.bincount(arr)[:4])
    assert np.array_equal(bc(tl.constant(arr), minlength=2, maxlength=3).numpy(), np.bincount(arr)[:3])
    got = bc(tl.constant(arr), weights=tl.constant(w)).numpy()
    assert got.dtype == np.float32 and np.allclose(got, np.bincount(arr, weights=w))
    assert bc(tl.constant(arr), dtype=tl.float32).numpy().dtype == np.float32
    assert np.array_equal(bc(tl.constant(arr), binary_output=True).numpy(), np.bincount(arr) > 0)
    assert bc(tl.constant(np.zeros([0], np.int32))).shape == (0,)
    rows = np.array([[1, 1, 0], [2, 4, 2]], np.int64)
    assert np.array_equal(bc(tl.constant(rows), axis=-1).numpy(),
                          np.stack([np.bincount(r, minlength=5) for r in rows]))


@pytest.mark.parametrize("mode", ["traced", "jit"])
def test_bincount_traced_needs_maxlength(mode):
    arr = np.array([1, 1, 3, 0, 9, 3], np.int32)
    w = RNG.normal(size=6).astype(np.float32)
    f = tl.function(lambda a: tl.math.bincount(a, minlength=5, maxlength=5), jit_compile=mode == "jit")
    assert np.array_equal(f(arr).numpy(), np.bincount(arr)[:5])
    f = tl.function(lambda a, v: tl.math.bincount(a, v, maxlength=12), jit_compile=mode == "jit")
    np.testing.assert_allclose(f(arr, w).numpy(), np.bincount(arr, weights=w, minlength=12), rtol=1e-6)
    g = grad(lambda v, a: tl.math.bincount(a, v, maxlength=4) * tl.constant([1.0, 2.0, 3.0, 4.0]), mode, w, arr)
    np.testing.assert_array_equal(g, [2, 2, 4, 1, 0, 4])
    with pytest.raises(tl.errors.InvalidArgumentError, match="bincount: the number of bins .*must be known when"):
        tl.function(lambda a: tl.math.bincount(a, minlength=5))(arr)


def test_bincount_errors():
    with pytest.raises(tl.errors.InvalidArgumentError, match="bincount: arr must be non-negative"):
        tl.math.bincount(tl.constant([1, -1]))
    with pytest.raises(TypeError, match="bincount: arr must be int32 or int64"):
        tl.math.bincount(tl.constant([1.0]))
    with pytest.raises(tl.errors.InvalidArgumentError, match="bincount: weights \\[1\\] must have the shape"):
        tl.math.bincount(tl.constant([1, 2]), weights=tl.constant([1.0]))


@pytest.mark.parametrize("mode", MODES)
def test_segment_prod(mode):
    data = RNG.uniform(0.5, 2.0, size=(6, 2)).astype(np.float32)
    data[3, 1] = 0.0
    ids = np.array([0, 0, 2, 2, 2, 3], np.int32)
    want = np.stack([np.prod(data[ids == s], axis=0) for s in range(5)])
    got = run(lambda d, i: tl.math.unsorted_segment_prod(d, i, 5), mode, data, ids).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6)
    if mode == "eager":
        np.testing.assert_allclose(tl.math.segment_prod(tl.constant(data), tl.constant(ids)).numpy(), want[:4],
                                   rtol=1e-6)
    check_grad(lambda d, i: tl.math.unsorted_segment_prod(d, i, 5),
               lambda d, i: np.stack([np.prod(d[i == s], axis=0) for s in range(5)]), mode, data, ids)
    ints = run(lambda d, i: tl.math.unsorted_segment_prod(d, i, 4), mode, np.array([2, 3, -1, 5], np.int64),
               np.array([1, 1, 3, -1], np.int32)).numpy()
    assert np.array_equal(ints, [1, 6, 1, -1])
    with pytest.raises(tl.errors.InvalidArgumentError, match="unsorted_segment_prod: segment id 5 is out of range"):
        tl.math.unsorted_segment_prod(tl.constant(data), tl.constant(ids + 2), 5)


# --- einsum ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_einsum_accepts_optimize_and_name(mode):
    a, b = X, X.T.copy()
    for opt in ("greedy", "optimal", "auto", "branch-2"):
        got = run(lambda u, v: tl.einsum("ij,jk->ik", u, v, optimize=opt, name="mm"), mode, a, b).numpy()
        np.testing.assert_allclose(got, a @ b, rtol=1e-5)
    with pytest.raises(ValueError, match="einsum: optimize must be"):
        tl.einsum("ij,jk->ik", tl.constant(a), tl.constant(b), optimize="fastest")


# --- None dims in an input_signature -----------------------------------------------------------------


@pytest.mark.parametrize("jit", [False, True])
def test_ops_needing_dims_trace_per_shape_under_a_none_signature(jit):
    """An op that needs a dim's size says it "must be known when traced";
    a function whose signature leaves it None is then traced per shape."""
    x = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    ops = {
        "band_part": (lambda v: tl.linalg.band_part(v, 1, 0), lambda v: np_band(v, 1, 0)),
        "pad": (lambda v: tl.pad(v, [[1, 1], [2, 0]], "SYMMETRIC"), lambda v: np.pad(v, [[1, 1], [2, 0]], "symmetric")),
        "roll": (lambda v: tl.roll(v, [1, -1], [0, 1]), lambda v: np.roll(v, [1, -1], [0, 1])),
        "in_top_k": (lambda v: tl.math.in_top_k(tl.constant([0, 1, 3][:v.shape[0]]), v, 2),
                     lambda v: np_in_top_k([0, 1, 3][:v.shape[0]], v, 2)),
        "sequence_mask": (lambda v: tl.sequence_mask(tl.cast(v * 7, tl.int32), 13),
                          lambda v: np.arange(13) < np.round(v * 7).astype(np.int32)[..., None]),
        "linspace": (lambda v: tl.linspace(v, v + 1.0, 3, axis=-1), lambda v: np.linspace(v, v + 1, 3, axis=-1)),
        "searchsorted": (lambda v: tl.searchsorted(v, v + 0.1), lambda v: np.stack(
            [np.searchsorted(r, r + 0.1) for r in v])),
        "meshgrid": (lambda v: tl.meshgrid(v[0], v[:, 0])[1], lambda v: np.meshgrid(v[0], v[:, 0])[1]),
        "shuffle": (lambda v: tl.sort(tl.random.shuffle(v), axis=0), lambda v: np.sort(v, axis=0)),
        "categorical": (lambda v: tl.random.categorical(v * 0.0, 5) * 0, lambda v: np.zeros((v.shape[0], 5))),
    }
    for name, (f, want) in ops.items():
        fn = tl.function(f, input_signature=[tl.TensorSpec([None, None], tl.float32)], jit_compile=jit)
        for v in (x, x[:2, :3]):
            np.testing.assert_allclose(fn(v).numpy(), want(v), rtol=1e-6, err_msg=name)


def test_softplus_gradient_at_zero_is_a_half():
    # (It was 0: abs differentiates to 1 at 0, where TF's gradient is sigmoid(0).)
    x = tl.constant([0.0, -3.0, 3.0])
    with tl.GradientTape() as tape:
        tape.watch(x)
        y = tl.nn.softplus(x)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), 1 / (1 + np.exp(-np.array([0.0, -3.0, 3.0]))), rtol=1e-6)
    big = tl.nn.softplus(tl.constant([-100.0, 100.0, 0.0])).numpy()
    np.testing.assert_allclose(big, [np.exp(-100.0), 100.0, np.log(2)], rtol=1e-6, atol=1e-40)


@pytest.mark.parametrize("mode", ["eager", "traced", "jit"])
def test_searchsorted_of_nan_short_rows_sorts_it_last_as_numpy(mode):
    # Short rows (compared pairwise) put a NaN value at 0; long ones and
    # NumPy after every number.
    seq = np.array([0, 1, 2, np.nan], np.float32)
    vals = np.array([np.nan, 1.0, -1, 5], np.float32)
    for side in ("left", "right"):
        def f(s, v, side=side):
            return tl.searchsorted(s, v, side=side)

        g = f if mode == "eager" else tl.function(f, jit_compile=mode == "jit")
        np.testing.assert_array_equal(g(seq, vals).numpy(), np.searchsorted(seq, vals, side=side))


def test_sorted_segment_ops_with_unsorted_ids_say_so():
    # [1, 0, 0, 0] read "segment id 1 is out of range [0, 1)": the count
    # came from the last id.
    with pytest.raises(tl.errors.InvalidArgumentError, match=r"not sorted \(increasing\): \[1, 0, 0, 0\]"):
        tl.math.segment_sum(np.ones(4, np.float32), [1, 0, 0, 0])
