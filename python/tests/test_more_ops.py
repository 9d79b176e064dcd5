"""TensorFlow ops built from the core ones (``_more_ops.py``): values
against NumPy eagerly, traced and compiled, and gradients where TensorFlow
defines them at awkward points (divide_no_nan and xlogy at 0)."""

import math

import numpy as np
import pytest

import tensorlift as tl

MODES = ["eager", "traced", "jit"]


def run(f, mode, *args):
    if mode == "eager":
        return f(*[tl.constant(a) for a in args])
    return tl.function(f, jit_compile=mode == "jit")(*args)


X = np.array([-3.0, -0.5, 0.0, 0.5, 2.0, 30.0], np.float32)
ERF = np.vectorize(math.erf)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("f, want", [
    (tl.nn.gelu, 0.5 * X * (1 + ERF(X / np.sqrt(2)))),
    (lambda x: tl.nn.gelu(x, approximate=True),
     0.5 * X * (1 + np.tanh(np.sqrt(2 / np.pi) * (X + 0.044715 * X ** 3)))),
    (tl.nn.softplus, np.logaddexp(0, X)),
    (tl.nn.leaky_relu, np.where(X > 0, X, 0.2 * X)),
    (tl.nn.elu, np.where(X > 0, X, np.expm1(np.minimum(X, 0)))),
    (tl.nn.relu6, np.clip(X, 0, 6)),
    (tl.nn.silu, X / (1 + np.exp(-X))),
    (tl.math.tan, np.tan(X)),
    (lambda x: tl.nn.l2_normalize(x, 0), X / np.sqrt(np.sum(X * X))),
    (lambda x: tl.math.reduce_variance(x), np.var(X)),
    (lambda x: tl.math.reduce_std(x), np.std(X)),
])
def test_elementwise_and_reductions_match_numpy(mode, f, want):
    np.testing.assert_allclose(run(f, mode, X).numpy(), want, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("mode", MODES)
def test_nan_inf_and_safe_divisions(mode):
    x = np.array([np.nan, np.inf, -np.inf, 1.0, 0.0], np.float32)
    assert run(tl.math.is_nan, mode, x).numpy().tolist() == [True, False, False, False, False]
    assert run(tl.math.is_inf, mode, x).numpy().tolist() == [False, True, True, False, False]
    a, b = np.array([1.0, 2.0, 0.0], np.float32), np.array([0.0, 4.0, 0.0], np.float32)
    assert run(tl.math.divide_no_nan, mode, a, b).numpy().tolist() == [0.0, 0.5, 0.0]
    assert run(tl.math.xlogy, mode, np.array([0.0, 2.0], np.float32), np.array([0.0, 3.0], np.float32)
               ).numpy().tolist() == pytest.approx([0.0, 2 * np.log(3)])
    assert run(lambda a, b: tl.math.squared_difference(a, b), mode, a, b).numpy().tolist() == [1.0, 4.0, 0.0]
    assert run(lambda a, b: tl.math.add_n([a, b, a]), mode, a, b).numpy().tolist() == [2.0, 8.0, 0.0]


@pytest.mark.parametrize("mode", MODES)
def test_gradients_at_the_safe_points_are_finite(mode):
    def grads(a, b):
        with tl.GradientTape() as t:
            t.watch([a, b])
            y = tl.reduce_sum(tl.math.divide_no_nan(a, b) + tl.math.xlogy(a, b + 1.0))
        return t.gradient(y, [a, b])

    a, b = np.array([1.0, 0.0], np.float32), np.array([0.0, 2.0], np.float32)
    f = grads if mode == "eager" else tl.function(grads, jit_compile=mode == "jit")
    ga, gb = f(tl.constant(a), tl.constant(b))
    # d/da: 1/b where b != 0 (else 0), plus log(b + 1) where a != 0 (else 0,
    # TensorFlow's xlogy gradient); d/db: -a/b² where b != 0, plus a/(b + 1).
    np.testing.assert_allclose(ga.numpy(), [0.0 + np.log(1.0), 0.5 + 0.0], rtol=1e-6)
    np.testing.assert_allclose(gb.numpy(), [0.0 + 1.0, 0.0 + 0.0], rtol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_layout_ops_match_numpy(mode):
    m = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(run(lambda x: tl.tile(x, [2, 3]), mode, m).numpy(), np.tile(m, [2, 3]))
    parts = run(lambda x: tuple(tl.split(x, [1, -1], axis=1)), mode, m)
    np.testing.assert_array_equal(parts[0].numpy(), m[:, :1])
    np.testing.assert_array_equal(parts[1].numpy(), m[:, 1:])
    halves = run(lambda x: tuple(tl.split(x, 2, axis=1)), mode, m)
    np.testing.assert_array_equal(halves[1].numpy(), m[:, 2:])
    rows = run(lambda x: tuple(tl.unstack(x)), mode, m)
    assert [r.numpy().tolist() for r in rows] == m.tolist()
    idx = np.array([0, 2, 3, -1], np.int32)
    np.testing.assert_array_equal(run(lambda i: tl.one_hot(i, 3), mode, idx).numpy(),
                                  np.eye(3, dtype=np.float32)[[0, 2]].tolist() + [[0, 0, 0]] * 2)
    hot = run(lambda i: tl.one_hot(i, 3, on_value=5, off_value=-1, axis=0), mode, idx[:2]).numpy()
    assert hot.tolist() == [[5, -1], [-1, -1], [-1, 5]]


def test_constants_and_moments():
    assert tl.range(5).numpy().tolist() == [0, 1, 2, 3, 4] and tl.range(5).dtype == tl.int32
    assert tl.range(1.0, 2.0, 0.5).numpy().tolist() == [1.0, 1.5]
    np.testing.assert_array_equal(tl.eye(2, 3).numpy(), np.eye(2, 3))
    assert tl.eye(2, batch_shape=[4]).shape == (4, 2, 2)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    mean, var = tl.nn.moments(tl.constant(x), axes=[0])
    np.testing.assert_allclose(mean.numpy(), x.mean(0))
    np.testing.assert_allclose(var.numpy(), x.var(0), rtol=1e-6)
    with pytest.raises(tl.errors.InvalidArgumentError, match="does not split into 3"):
        tl.split(tl.constant(x), 3, axis=1)
