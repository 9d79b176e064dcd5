"""Defects found by a documentation audit (round 4): each test states what
docs/python.md, docs/callbacks.md or TensorFlow promise, and failed before
its fix."""

import collections
import re

import numpy as np
import pytest

import tensorlift as tl
from tensorlift.contrib.framework import py_func as contrib_py_func

BOTH = [False, True]
MODES = ["eager", "function", "jit"]


def in_mode(f, mode):
    if mode == "eager":
        return f
    return tl.function(f, jit_compile=mode == "jit")


# --- 1. branches returning different numbers of results ----------------------------


@pytest.mark.parametrize("jit", BOTH)
def test_cond_branches_returning_different_numbers_of_results_is_a_value_error(jit):
    # docs/python.md: every branch returns the same structure, a ValueError
    # otherwise, as in TF ("true_fn and false_fn arguments to tf.cond must
    # have the same number, type, and overall structure of return values").
    # It was the native layer's InvalidArgumentError naming an op 'case'.
    @tl.function(jit_compile=jit)
    def f(p, x):
        return tl.cond(p, lambda: (x, x), lambda: x)

    with pytest.raises(ValueError) as e:
        f(tl.constant(True), tl.constant([1.0, 2.0]))
    assert not isinstance(e.value, tl.errors.OpError)
    text = str(e.value)
    assert "'case'" not in text
    assert "tl.cond: true_fn returns (T, T), but false_fn returns T" in text
    assert "same structure" in text


@pytest.mark.parametrize("jit", BOTH)
def test_switch_case_branches_returning_different_numbers_of_results_is_a_value_error(jit):
    @tl.function(jit_compile=jit)
    def f(i, x):
        return tl.switch_case(i, [lambda: x, lambda: [x, x * 2.0], lambda: x])

    with pytest.raises(ValueError) as e:
        f(tl.constant(0), tl.constant([1.0, 2.0]))
    assert not isinstance(e.value, tl.errors.OpError)
    assert "tl.switch_case: branch 1 returns [T, T], but branch 0 returns T" in str(e.value)

    # A structure of the same size with other containers: named as well.
    @tl.function(jit_compile=jit)
    def g(i, x):
        return tl.switch_case(i, {0: lambda: {"a": x}, 1: lambda: {"b": x}})

    with pytest.raises(ValueError, match=r"branch 1 returns \{'b': T\}, but branch 0 returns \{'a': T\}"):
        g(tl.constant(0), tl.constant(1.0))


def test_eager_cond_runs_one_branch_without_comparing():
    # Eagerly only the branch taken runs, as TensorFlow's eager cond: its
    # result comes back as it is (nothing to compare it with).
    x = tl.constant([1.0, 2.0])
    a, b = tl.cond(tl.constant(True), lambda: (x, x), lambda: x)
    assert a.shape == b.shape == (2,)
    assert tl.cond(tl.constant(False), lambda: (x, x), lambda: x).shape == (2,)
    assert tl.switch_case(tl.constant(1), [lambda: (x, x), lambda: x]).shape == (2,)


# --- 2. while_loop with a namedtuple loop variable ----------------------------------


P = collections.namedtuple("P", "a b")


def _p():
    return P(tl.constant(0), tl.constant(1.0))


@pytest.mark.parametrize("mode", MODES)
def test_while_loop_with_a_namedtuple_in_a_list_agrees_eagerly_and_traced(mode):
    # loop_vars=[p]: cond and body get p (one argument) in every mode.
    def ok():
        return tl.while_loop(lambda p: p.a < 3, lambda p: [P(p.a + 1, p.b * 2.0)], [_p()])

    (r,) = in_mode(ok, mode)()
    assert isinstance(r, P) and int(r.a) == 3 and float(r.b) == 8.0

    # The body returning the namedtuple itself, not [p]: its fields would be
    # bound to the loop variables one by one. Eagerly this was cond called
    # with 2 arguments (a TypeError); traced (and in TF) it is a ValueError
    # naming both structures.
    def bare():
        return tl.while_loop(lambda p: p.a < 3, lambda p: P(p.a + 1, p.b), [_p()])

    with pytest.raises(ValueError, match=r"returned \[T, T\], but the loop variables are \[P\(a=T, b=T\)\]"):
        in_mode(bare, mode)()

    # A plain tuple where the namedtuple was: the traced loop's rule (its
    # structure is the loop variables'), eagerly too (cond got the tuple,
    # and p.a failed).
    def tuple_body():
        return tl.while_loop(lambda p: p.a < 3, lambda p: [(p.a + 1, p.b)], (_p(),))

    with pytest.raises(ValueError, match=r"returned \[\(T, T\)\], but the loop variables are \[P\(a=T, b=T\)\]"):
        in_mode(tuple_body, mode)()


@pytest.mark.parametrize("mode", MODES)
def test_while_loop_with_a_namedtuple_as_loop_vars_spreads_its_fields(mode):
    # A namedtuple is a tuple: cond(*loop_vars), as TensorFlow calls it.
    def f():
        return tl.while_loop(lambda a, b: a < 3, lambda a, b: (a + 1, b + 1.0), _p())

    r = in_mode(f, mode)()
    assert isinstance(r, P) and int(r.a) == 3 and float(r.b) == 4.0


@pytest.mark.parametrize("mode", MODES)
def test_while_loop_body_returning_too_few_values_is_the_same_error_in_every_mode(mode):
    def f():
        return tl.while_loop(lambda a, b: a < 3, lambda a, b: [a + 1], [tl.constant(0), tl.constant(1.0)])

    with pytest.raises(ValueError, match=r"returned 1 value\(s\), but the loop has 2 loop variable\(s\)"):
        in_mode(f, mode)()


# --- 3. py_function's errors read as the other callbacks' ---------------------------


def test_eager_py_function_errors_have_the_kind_and_a_full_site():
    x = tl.constant([1.0, 2.0])
    for fn in (tl.numpy_function, tl.py_function):
        kind = fn.__name__
        with pytest.raises(tl.errors.InvalidArgumentError) as e:
            fn(lambda a: a, [x], Tout=[tl.float32, tl.float32])
        assert re.fullmatch(
            rf"InvalidArgument: {kind} '{kind}' \(created at .*test_reports_round4.py:\d+:1\): "
            rf"{kind} '{kind}' returned 1 value\(s\), but Tout declares 2", str(e.value)), str(e.value)
    # The other eager checks alike (the traced call's words).
    with pytest.raises(tl.errors.InvalidArgumentError,
                       match=r"^InvalidArgument: py_function 'cast' \(created at .*test_reports_round4.py:\d+:1\): "
                             r"output 0 of py_function 'cast' is int32, but Tout says float32$"):
        tl.py_function(lambda a: tl.cast(a, tl.int32), [x], tl.float32, name="cast")
    with pytest.raises(tl.errors.UnknownError,
                       match=r"^Unknown: py_function 'py_function' \(created at .*:\d+:1\): py_function "
                             r"'py_function' raised ZeroDivisionError"):
        tl.py_function(lambda a: 1 / 0, [x], tl.float32)
    # An empty Tout with a tensor returned: the intended error, not a
    # comparison of the tensor with ().
    with pytest.raises(tl.errors.InvalidArgumentError, match=r"returned a value, but Tout is empty"):
        tl.py_function(lambda a: a, [x], [])


# --- 4. contrib py_func: the structure error first -------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_contrib_py_func_structure_mismatch_reads_first(mode):
    x = tl.constant([1.0, 2.0])

    def f(v):
        return contrib_py_func(lambda a: (a, (a, a, a)), [v], output_types=(tl.float32, (tl.float32, tl.float32)))

    with pytest.raises(tl.errors.InvalidArgumentError) as e:
        in_mode(f, mode)(x)
    text = str(e.value)
    first = text.splitlines()[0]
    assert "output[1] is a tuple of 3, but output_types has 2" in first, text
    assert "Traceback" not in text and "framework.py" not in text, text
    assert type(e.value.__cause__) is not ValueError and isinstance(e.value.__cause__, ValueError)
    assert e.value.__cause__.args == ("output[1] is a tuple of 3, but output_types has 2",)
    # The user's own exceptions keep their tracebacks.
    with pytest.raises(tl.errors.UnknownError, match="Traceback"):
        in_mode(lambda v: contrib_py_func(lambda a: 1 / 0, [v], output_types=tl.float32), mode)(x)


# --- 5. squeeze of a None dim that is not 1 -------------------------------------


@pytest.mark.parametrize("jit", BOTH)
def test_squeeze_of_a_none_dim_checks_it_when_the_function_runs(jit):
    sig = [tl.TensorSpec([4, None], tl.float32)]
    f = tl.function(lambda t: tl.squeeze(t, axis=1), input_signature=sig, jit_compile=jit)
    assert f(np.ones([4, 1], np.float32)).shape == (4,)
    # The error shows the dim that must be 1 (it was "[4, 2] to [4]").
    with pytest.raises(tl.errors.InvalidArgumentError, match=r"reshape .*\[4, ?2\].* to \[4, ?1\]"):
        f(np.ones([4, 2], np.float32))


@pytest.mark.parametrize("jit", BOTH)
def test_squeeze_of_a_none_dim_beside_another_none_dim_is_checked(jit):
    # This was a silent reshape to [-1]: [3, 2] squeezed at axis 1 gave [6]
    # (TF: "Can not squeeze dim[1], expected a dimension of 1, got 2").
    f = tl.function(lambda t: tl.squeeze(t, 1), input_signature=[tl.TensorSpec([None, None], tl.float32)],
                    jit_compile=jit)
    a = np.arange(3, dtype=np.float32).reshape(3, 1)
    r = f(a)
    assert r.shape == (3,)
    np.testing.assert_array_equal(r.numpy(), a[:, 0])
    with pytest.raises(tl.errors.InvalidArgumentError, match=r"\[1, ?2\].* to \[1, ?1\]"):
        f(np.ones([3, 2], np.float32))
    # Two other unknown dims: allowed now (it was a trace-time error), and
    # checked alike.
    g = tl.function(lambda t: tl.squeeze(t, [1, 3]),
                    input_signature=[tl.TensorSpec([None, None, None, 1], tl.float32)], jit_compile=jit)
    b = np.arange(6, dtype=np.float32).reshape(2, 1, 3, 1)
    np.testing.assert_array_equal(g(b).numpy(), b[:, 0, :, 0])
    with pytest.raises(tl.errors.InvalidArgumentError):
        g(np.ones([2, 2, 3, 1], np.float32))


def test_squeeze_of_a_none_dim_keeps_its_gradient():
    f = tl.function(lambda t: tl.squeeze(t * t, 1), input_signature=[tl.TensorSpec([None, None], tl.float32)])
    x = tl.constant([[1.0], [2.0], [3.0]])
    with tl.GradientTape() as tape:
        tape.watch(x)
        y = tl.reduce_sum(f(x))
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), [[2.0], [4.0], [6.0]])


def test_traced_py_function_results_are_checked_as_eagerly():
    # Traced, a py_function returning None for a float32 result gave NaN
    # (NumPy's asarray(None, float32)), and with an empty Tout a returned
    # value was dropped silently; eagerly both were errors.
    none = tl.function(lambda x: tl.py_function(lambda t: None, [x], tl.float32))
    with pytest.raises(tl.errors.InvalidArgumentError, match=r"output 0 of py_function .* is None"):
        none(tl.constant([1.0]))
    extra = tl.function(lambda x: [tl.py_function(lambda t: t, [x], []), x][1])
    with pytest.raises(tl.errors.InvalidArgumentError, match=r"returned a value, but Tout is empty"):
        extra(tl.constant([1.0]))
    for f in (lambda t: None, lambda t: ()):
        ok = tl.function(lambda x, f=f: [tl.py_function(f, [x], []), x * 2.0][1])
        np.testing.assert_array_equal(ok(tl.constant([1.0])).numpy(), [2.0])


@pytest.mark.parametrize("jit", BOTH)
def test_slices_of_a_dim_of_unknown_size_follow_python_as_tensorflow_does(jit):
    # Only crops (x[2:], x[1:-1]) traced on such a dim, and one past its
    # end was an error ("pad gives a negative size -1 in dim 0"); x[-5:],
    # x[:4], x[::2], x[::-1] were ValueErrors. TensorFlow's strided_slice
    # clamps, as Python does.
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    keys = [slice(2, None), slice(-5, None), slice(None, 4), slice(None, None, 2), slice(None, None, -1),
            slice(-2, 1, -1), slice(10, None), slice(1, -1), slice(5, 2), slice(-100, 100, 3)]
    for key in keys:
        f = tl.function(lambda t, key=key: t[key], input_signature=[tl.TensorSpec([None, 2])], jit_compile=jit)
        for n in (0, 1, 3, 6):
            got, want = f(x[:n]).numpy(), x[:n][key]
            assert got.shape == want.shape, (key, n, got.shape, want.shape)
            np.testing.assert_array_equal(got, want)
    g = tl.function(lambda t: t[::0], input_signature=[tl.TensorSpec([None, 2])], jit_compile=jit)
    with pytest.raises(ValueError, match="slice step cannot be zero"):
        g(x)


@pytest.mark.parametrize("jit", BOTH)
def test_ops_that_need_known_dims_trace_per_shape_under_a_none_signature(jit):
    # einsum, top_k, cumsum, segment sums and random shapes from tl.shape
    # refused a None dim; gradients already were traced per concrete shape
    # (docs/porting-from-tensorflow.md), these now are too.
    sig = [tl.TensorSpec([3, 3], tl.float32), tl.TensorSpec([None, 3], tl.float32)]

    @tl.function(input_signature=sig, jit_compile=jit)
    def step(w, x):
        with tl.GradientTape() as t:
            t.watch(w)
            loss = tl.reduce_sum(tl.square(tl.einsum("bi,ij->bj", x, w)))
        return t.gradient(loss, w)

    for n in (2, 5):
        x = np.arange(3 * n, dtype=np.float32).reshape(n, 3) / 7
        np.testing.assert_allclose(step(np.eye(3, dtype=np.float32), x).numpy(), 2 * x.T @ x, rtol=1e-5)
    cases = [
        (lambda x: tl.math.top_k(x, 2).values, [None, 5], lambda a: -np.sort(-a, axis=-1)[:, :2]),
        (lambda x: tl.math.cumsum(x, axis=0), [None, 5], lambda a: np.cumsum(a, axis=0)),
        (lambda x: tl.math.unsorted_segment_sum(x, tl.cast(x[:, 0], tl.int32) % 2, 2), [None, 5],
         lambda a: np.stack([a[a[:, 0].astype(int) % 2 == k].sum(0) for k in range(2)])),
        (lambda x: x * 0.0 + tl.random.uniform(tl.shape(x)) * 0.0, [None, 5], lambda a: np.zeros_like(a)),
    ]
    for body, shape, expect in cases:
        f = tl.function(body, input_signature=[tl.TensorSpec(shape, tl.float32)], jit_compile=jit)
        for n in (1, 3):
            a = np.arange(5 * n, dtype=np.float32).reshape(n, 5)
            got = f(a).numpy()
            np.testing.assert_allclose(got, expect(a), rtol=1e-6)


@pytest.mark.parametrize("jit", BOTH)
def test_softmax_cross_entropy_casts_integer_labels_as_tensorflow_does(jit):
    # One-hot int32 labels worked eagerly as a NumPy array and failed as a
    # tensor, or traced ("labels must be a floating-point tensor").
    lab = np.eye(3, dtype=np.int32)[[0, 2]]
    logits = np.array([[1.0, 2.0, 0.5], [0.1, 0.2, 3.0]], np.float32)
    want = -np.sum(lab * (logits - np.log(np.exp(logits).sum(-1, keepdims=True))), -1)
    f = tl.function(lambda l, x: tl.nn.softmax_cross_entropy_with_logits(labels=l, logits=x), jit_compile=jit)
    np.testing.assert_allclose(f(lab, logits).numpy(), want, rtol=1e-6)
    got = tl.nn.softmax_cross_entropy_with_logits(labels=tl.constant(lab), logits=tl.constant(logits))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


@pytest.mark.parametrize("jit", BOTH)
def test_a_tape_around_a_function_sees_the_values_its_stateful_callbacks_gave(jit):
    # The replay that computes the gradient ran tl.random (a stateful
    # callback) again: a dropout mask's gradient was another mask.
    @tl.function(jit_compile=jit)
    def layer(w):
        return w * tl.random.uniform([4])

    w = tl.constant(np.ones(4, np.float32))
    with tl.GradientTape(persistent=True) as tape:
        tape.watch(w)
        y = layer(w)
        loss = tl.reduce_sum(y)
    np.testing.assert_array_equal(tape.gradient(loss, w).numpy(), y.numpy())
    np.testing.assert_array_equal(tape.gradient(loss, w).numpy(), y.numpy())  # a second replay too
    # A user's stateful source: it ran once for the call, and the
    # gradient used what it returned then.
    calls = []

    def source():
        calls.append(1)
        return np.full(3, float(len(calls)), np.float32)

    @tl.function(jit_compile=jit)
    def scaled(x):
        s = tl.numpy_function(source, [], tl.float32)
        s.set_shape([3])
        return tl.reduce_sum(x * s)

    x = tl.constant([1.0, 2.0, 3.0])
    with tl.GradientTape() as tape:
        tape.watch(x)
        y = scaled(x)
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), [1.0, 1.0, 1.0])
    assert len(calls) == 1


@pytest.mark.parametrize("jit", BOTH)
def test_more_ops_needing_known_dims_trace_per_shape(jit):
    # x[:, :, None] of [None, None] (a masked mean), zeros of tl.shape(x),
    # tile, split and unstack of None dims were errors with no fallback.
    sig = [tl.TensorSpec([None, None], tl.float32)]
    cases = [
        (lambda x: tl.reduce_sum(x[:, :, None] * tl.ones([1, 1, 2]), 1), lambda a: np.repeat(a.sum(1)[:, None], 2, 1)),
        (lambda x: tl.zeros([tl.shape(x)[0]], tl.int32), lambda a: np.zeros(a.shape[0], np.int32)),
        (lambda x: tl.ones(tl.shape(x)), lambda a: np.ones_like(a)),
        (lambda x: tl.tile(x, [2, 1]), lambda a: np.tile(a, [2, 1])),
        (lambda x: tl.split(x, 2, axis=1)[1], lambda a: np.split(a, 2, axis=1)[1]),
        (lambda x: tl.unstack(x, axis=0)[0], lambda a: a[0]),
        (lambda x: tl.stack([x, x], axis=2), lambda a: np.stack([a, a], axis=2)),
    ]
    for body, expect in cases:
        f = tl.function(body, input_signature=sig, jit_compile=jit)
        for shape in ((2, 4), (3, 6)):
            a = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
            np.testing.assert_array_equal(f(a).numpy(), expect(a))


@pytest.mark.parametrize("jit", BOTH)
def test_lists_holding_traced_tensors_are_packed_as_tensorflow_does(jit):
    # [[i]] with a traced i failed (".numpy() works on eager tensors"),
    # breaking row updates in a while_loop.
    @tl.function(jit_compile=jit)
    def f(x, i):
        return (tl.tensor_scatter_nd_update(x, [[i]], [5.0]), tl.convert_to_tensor([i, 2]),
                tl.gather(x + 1.0, [i, 0]), tl.one_hot([i], 4), x[0] * tl.cast([i], tl.float32))

    a, b, c, d, e = f(np.zeros(4, np.float32), np.int32(2))
    np.testing.assert_array_equal(a.numpy(), [0, 0, 5, 0])
    np.testing.assert_array_equal(b.numpy(), [2, 2])
    np.testing.assert_array_equal(c.numpy(), [1, 1])
    np.testing.assert_array_equal(d.numpy(), [[0, 0, 1, 0]])
    np.testing.assert_array_equal(e.numpy(), [0.0])

    def body(i, x):
        return i + 1, tl.tensor_scatter_nd_update(x, [[i]], [tl.cast(i, tl.float32)])

    g = tl.function(lambda x: tl.while_loop(lambda i, x: i < 4, body, [tl.constant(0), x])[1], jit_compile=jit)
    np.testing.assert_array_equal(g(np.zeros(4, np.float32)).numpy(), [0, 1, 2, 3])


@pytest.mark.parametrize("jit", BOTH)
def test_a_dropout_in_a_branch_replays_its_mask_and_one_in_a_loop_says_why_not(jit):
    # tf.cond(training, lambda: dropout(h), lambda: h) under a tape outside
    # the function: the gradient drew another mask (silently wrong).
    @tl.function(jit_compile=jit)
    def forward(x, training):
        return tl.cond(training, lambda: tl.nn.dropout(x, 0.5), lambda: x)

    x = tl.constant(np.arange(1, 9, dtype=np.float32))
    with tl.GradientTape() as tape:
        tape.watch(x)
        y = forward(x, tl.constant(True))
        loss = tl.reduce_sum(y)
    np.testing.assert_array_equal(tape.gradient(loss, x).numpy(), np.where(y.numpy() != 0, 2.0, 0.0))

    # In a loop: each iteration's mask (the replay counts the iterations).
    @tl.function(jit_compile=jit)
    def summed(x):
        def body(i, acc):
            return i + 1, acc + tl.nn.dropout(x, 0.5)

        return tl.while_loop(lambda i, a: i < 3, body, [tl.constant(0), tl.zeros_like(x)])[1]

    with tl.GradientTape() as tape:
        tape.watch(x)
        y = summed(x)
        loss = tl.reduce_sum(y)
    np.testing.assert_allclose(tape.gradient(loss, x).numpy(), y.numpy() / x.numpy(), rtol=1e-6)

    # In a branch inside a loop (run on some iterations only): an error.
    @tl.function(jit_compile=jit)
    def branchy(x):
        def body(i, v):
            return i + 1, tl.cond(i % 2 == 0, lambda: tl.nn.dropout(v, 0.5), lambda: v)

        return tl.while_loop(lambda i, v: i < 3, body, [tl.constant(0), x])[1]

    with tl.GradientTape() as tape:
        tape.watch(x)
        loss = tl.reduce_sum(branchy(x))
    with pytest.raises(tl.errors.UnimplementedError, match="draws random values inside a loop body"):
        tape.gradient(loss, x)


@pytest.mark.parametrize("jit", [None, False, True])
def test_indexing_with_a_list_is_tensorflows_type_error_in_every_mode(jit):
    # Eagerly and traced it failed in int() ("argument must be ... not
    # 'list'"); TensorFlow raises a TypeError naming valid indices.
    x = tl.constant(np.arange(6.0, dtype=np.float32).reshape(3, 2))

    def f(t):
        return t[[0, 2]]

    g = f if jit is None else tl.function(f, jit_compile=jit)
    with pytest.raises(TypeError, match=r"valid indices, got \[0, 2\]: gather several positions with tl.gather"):
        g(x)
    assert float(x[np.array(1), 1].numpy()) == 3.0


def test_the_ir_of_a_function_traced_per_shape():
    # With concrete arguments it raised the op's "must be known when
    # traced" (the relaxed signature's trace); with a None spec, say why.
    f = tl.function(lambda x: tl.math.top_k(x, 2).values, input_signature=[tl.TensorSpec([None, 5])])
    assert "f32[3,5]" in f.experimental_get_compiler_ir(np.ones((3, 5), np.float32))(stage="hlo")
    with pytest.raises(tl.errors.InvalidArgumentError, match="traced per concrete shape.*known shapes"):
        f.experimental_get_compiler_ir(tl.TensorSpec([None, 5]))(stage="hlo")
    np.testing.assert_array_equal(f(np.arange(5, dtype=np.float32)[None]).numpy(), [[4.0, 3.0]])


@pytest.mark.parametrize("jit", BOTH)
def test_a_dropout_helper_used_before_and_inside_a_loop_replays_each(jit):
    # One line of a helper, run once before the loop and once per
    # iteration: the logs of the two sites must not mix.
    def drop(v):
        return tl.nn.dropout(v, 0.5)

    @tl.function(jit_compile=jit)
    def f(x):
        h = drop(x)

        def body(i, acc):
            return i + 1, acc + drop(x)

        return h, tl.while_loop(lambda i, a: i < 3, body, [tl.constant(0), tl.zeros_like(x)])[1]

    x = tl.constant(np.arange(1, 9, dtype=np.float32))
    with tl.GradientTape(persistent=True) as tape:
        tape.watch(x)
        h, y = f(x)
        lh, ly = tl.reduce_sum(h), tl.reduce_sum(y)
    np.testing.assert_allclose(tape.gradient(lh, x).numpy(), h.numpy() / x.numpy(), rtol=1e-6)
    np.testing.assert_allclose(tape.gradient(ly, x).numpy(), y.numpy() / x.numpy(), rtol=1e-6)
