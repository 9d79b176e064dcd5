"""Bad input from Python: every case is a clear exception (a tl.errors.*
or a TypeError/ValueError naming what is wrong), never a crash, and the
process and the functions stay usable."""

import numpy as np
import pytest

import tensorlift as tl

CASES = [
    ("unknown dtype", lambda: tl.constant([1.0], dtype="float7")),
    ("object array", lambda: tl.constant(np.array([object()]))),
    ("ragged list", lambda: tl.constant([[1.0], [1.0, 2.0]])),
    ("reshape to a wrong size", lambda: tl.reshape(tl.constant([1.0, 2.0, 3.0]), [2, 2])),
    ("transpose with a bad permutation", lambda: tl.transpose(tl.ones([2, 3]), [0, 0])),
    ("axis out of range", lambda: tl.reduce_sum(tl.ones([2, 3]), axis=5)),
    ("matmul of mismatched shapes", lambda: tl.matmul(tl.ones([2, 3]), tl.ones([2, 3]))),
    ("gather out of range", lambda: tl.gather(tl.ones([3]), tl.constant([7]))),
    ("concat of different ranks", lambda: tl.concat([tl.ones([2]), tl.ones([2, 2])], axis=0)),
    ("cast to an unknown dtype", lambda: tl.cast(tl.ones([2]), "nope")),
    ("broadcast to an incompatible shape", lambda: tl.broadcast_to(tl.ones([3]), [2, 2])),
    ("index out of bounds", lambda: tl.ones([3])[5]),
    ("too many indices", lambda: tl.ones([3])[0, 0]),
    ("while_loop body with the wrong arity", lambda: tl.function(
        lambda x: tl.while_loop(lambda i: i < 3, lambda i: (i + 1, i), [x]))(tl.constant(0))),
    ("cond branches of different types", lambda: tl.function(
        lambda x: tl.cond(x > 0, lambda: x, lambda: tl.cast(x, tl.int32)))(tl.constant(1.0))),
    ("numpy_function with a non-callable", lambda: tl.function(
        lambda x: tl.numpy_function(5, [x], tl.float32))(tl.constant(1.0))),
    ("numpy_function returning a string for float32", lambda: tl.function(
        lambda x: tl.numpy_function(lambda v: "no", [x], tl.float32))(tl.constant(1.0))),
    ("TensorSpec with a negative dimension", lambda: tl.function(
        lambda x: x, input_signature=[tl.TensorSpec([-3], tl.float32)])(tl.ones([3]))),
    ("a huge allocation", lambda: tl.zeros([1 << 40], tl.float32)),
]


@pytest.mark.parametrize("name,case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_a_clear_error(name, case):
    with pytest.raises((tl.errors.OpError, TypeError, ValueError, IndexError, MemoryError)) as e:
        case()
    assert str(e.value), name
    # Still usable afterwards.
    f = tl.function(lambda x: x * 2.0, jit_compile=True)
    np.testing.assert_allclose(f(tl.constant([1.0, 2.0])).numpy(), [2.0, 4.0])


def test_an_int32_source_gets_no_gradient():
    x = tl.constant([1, 2])
    with tl.GradientTape() as t:
        t.watch(x)
        y = x * 2
    assert t.gradient(y, x) is None  # as in TensorFlow
