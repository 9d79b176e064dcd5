"""Function.call_into from a user's side: results written into the caller's
NumPy arrays (interpreted and jit-compiled, one result and several, an
unpickled function), and every bad buffer answered with a clear error
before anything is written."""

import pickle

import numpy as np
import pytest

import tensorlift as tl

BOTH = [False, True]


def _gelu(x):
    return 0.5 * x * (1.0 + tl.tanh(0.7978846 * (x + 0.044715 * x * x * x)))


@pytest.mark.parametrize("jit", BOTH)
def test_writes_the_results_into_the_given_array(jit):
    f = tl.function(_gelu, jit_compile=jit)
    x = np.linspace(-3, 3, 4096 * 3, dtype=np.float32).reshape(3, 4096)
    out = np.full((3, 4096), np.nan, np.float32)
    got = f.call_into(out, x)
    assert got is out
    np.testing.assert_array_equal(out, f(x).numpy())
    # The same buffer again, other inputs: overwritten, not accumulated.
    f.call_into(out, x * 0.5)
    np.testing.assert_array_equal(out, f(x * 0.5).numpy())


@pytest.mark.parametrize("jit", BOTH)
def test_several_results_in_flattened_order(jit):
    @tl.function(jit_compile=jit)
    def f(x, y):
        return {"sum": tl.reduce_sum(x * y, axis=1), "prod": (x * y, tl.cast(x > y, tl.int32))}

    x = np.arange(12, dtype=np.float64).reshape(3, 4)
    y = np.ones((3, 4)) * 5.0
    outs = [np.empty((3, 4)), np.empty((3, 4), np.int32), np.empty(3)]
    # tf.nest order: dict keys sorted, so "prod" (its tuple) comes first.
    f.call_into(outs, x, y)
    np.testing.assert_array_equal(outs[0], x * y)
    np.testing.assert_array_equal(outs[1], (x > y).astype(np.int32))
    np.testing.assert_array_equal(outs[2], (x * y).sum(1))


@pytest.mark.parametrize("jit", BOTH)
def test_an_argument_can_be_its_own_output(jit):
    f = tl.function(lambda x: tl.transpose(x) * 2.0, jit_compile=jit)
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    want = x.T * 2
    f.call_into(x, x)
    np.testing.assert_array_equal(x, want)


@pytest.mark.parametrize("jit", BOTH)
def test_unpickled_functions_write_into_arrays_too(jit):
    y = np.float32(3.0)
    f = tl.function(lambda x: tl.exp(x) + y, jit_compile=jit)
    x = np.linspace(-1, 1, 300, dtype=np.float32)
    f(x)
    g = pickle.loads(pickle.dumps(f))
    out = np.zeros(300, np.float32)
    g.call_into(out, x)
    np.testing.assert_array_equal(out, g(x).numpy())


@pytest.mark.parametrize("jit", BOTH)
def test_bad_buffers_are_clear_errors_and_leave_them_untouched(jit):
    f = tl.function(lambda x: (x + 1.0, x * 2.0), jit_compile=jit)
    x = np.ones((2, 8), np.float32)
    good = np.zeros((2, 8), np.float32)

    def untouched(*arrays):
        for a in arrays:
            assert not np.any(a), "a buffer was written before the error"

    wrong_shape = np.zeros((8, 2), np.float32)
    with pytest.raises(tl.errors.InvalidArgumentError, match=r"output 1|\[8, 2\]|8, 2"):
        f.call_into([good, wrong_shape], x)
    untouched(good, wrong_shape)
    wrong_dtype = np.zeros((2, 8), np.float64)
    with pytest.raises(tl.errors.InvalidArgumentError, match="f64|float64"):
        f.call_into([wrong_dtype, good], x)
    untouched(good, wrong_dtype)
    with pytest.raises(tl.errors.InvalidArgumentError, match="2 output"):
        f.call_into([good], x)
    untouched(good)
    strided = np.zeros((2, 16), np.float32)[:, ::2]
    with pytest.raises(ValueError, match=r"outputs\[1\] is not C-contiguous"):
        f.call_into([good, strided], x)
    frozen = np.zeros((2, 8), np.float32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match=r"outputs\[0\] is read-only"):
        f.call_into([frozen, good], x)
    with pytest.raises(ValueError, match=r"outputs\[1\] shares memory with outputs\[0\]"):
        f.call_into([good, good], x)
    with pytest.raises(ValueError, match=r"outputs\[1\] shares memory with outputs\[0\]"):
        f.call_into([good, good.reshape(16)[:16].reshape(2, 8)], x)
    with pytest.raises(TypeError, match=r"outputs\[1\] is a list, not a NumPy array"):
        f.call_into([good, [[0.0] * 8] * 2], x)
    with pytest.raises(TypeError, match="not int"):
        f.call_into(3, x)
    untouched(good)


def test_call_into_while_tracing_says_what_to_do():
    inner = tl.function(lambda x: x * 2.0)

    @tl.function
    def outer(x):
        inner.call_into(np.zeros(3, np.float32), x)
        return x

    with pytest.raises(TypeError, match="while another function is traced"):
        outer(np.ones(3, np.float32))
