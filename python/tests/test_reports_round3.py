"""Defects found by the third round of new-user reports (a TensorFlow port
and a bad-input review, 2026-11-28): each test states TensorFlow's
behaviour, which tensorlift follows, and failed before its fix."""

import os
import pickle
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import tensorlift as tl

BOTH = [False, True]


def modes(f):
    """``f`` eagerly, traced and compiled."""
    return [f, tl.function(f), tl.function(f, jit_compile=True)]


def values(r):
    return [None if g is None else np.asarray(g.numpy()).tolist() for g in (r if isinstance(r, list) else [r])]


# --- tapes inside tl.function record op by op, as TensorFlow's do --------------


def td_gradient(w, s, s2):
    # A DQN temporal-difference target: a constant of the gradient.
    with tl.GradientTape() as tape:
        tape.watch(w)
        q = tl.reduce_sum(s * w)
        with tape.stop_recording():
            target = 1.0 + 0.9 * tl.reduce_sum(s2 * w)
        loss = (q - target) ** 2
    return tape.gradient(loss, w)


def before_the_tape(x):
    a = x * 2
    with tl.GradientTape() as t:
        t.watch(x)
        y = tl.reduce_sum(a * x)
    return t.gradient(y, x)


def watched_late(x):
    with tl.GradientTape() as t:
        a = x * x
        t.watch(x)
        y = tl.reduce_sum(a + x)
    return t.gradient(y, x)


def after_reset(x):
    with tl.GradientTape() as t:
        t.watch(x)
        a = x * x
        t.reset()
        t.watch(x)
        y = tl.reduce_sum(a + x)
    return t.gradient(y, x)


def through_control_flow(x, w):
    # A branch and a loop reading the watched w only through their bodies.
    with tl.GradientTape() as t:
        t.watch(w)
        y = tl.cond(tl.reduce_sum(x) > 0, lambda: x * w, lambda: x)
        z = tl.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * w), [0, x])[1]
        loss = tl.reduce_sum(y * y) + tl.reduce_sum(z)
    return t.gradient(loss, w)


def second_order(x):
    with tl.GradientTape() as t2:
        t2.watch(x)
        with tl.GradientTape() as t1:
            t1.watch(x)
            y = tl.reduce_sum(x ** 3)
        g = t1.gradient(y, x)
        z = tl.reduce_sum(g * g)
    return t2.gradient(z, x)


@pytest.mark.parametrize("f, args, want", [
    (td_gradient, ([0.5, -0.3], [1.0, 2.0], [0.5, 1.0]), [-2.11, -4.22]),
    (before_the_tape, ([1.0, 2.0],), [2.0, 4.0]),
    (watched_late, ([1.0, 2.0],), [1.0, 1.0]),
    (after_reset, ([1.0, 2.0],), [1.0, 1.0]),
    (through_control_flow, ([1.0, 2.0], 1.5), 2 * 1.5 * 5 + 3 * 1.5 ** 2 * 3),
    (second_order, ([1.0, 2.0],), [36.0, 288.0]),
])
def test_a_tape_in_a_function_records_what_it_records_eagerly(f, args, want):
    # Traced, the tape differentiated the whole graph: stop_recording,
    # reset and values made before the tape (or before watch) were ignored.
    args = [tl.constant(a) for a in args]
    for g in modes(f):
        np.testing.assert_allclose(g(*args).numpy(), want, rtol=1e-5)


def test_a_source_listed_twice_gets_its_gradient_each_time():
    # Tied weights: eagerly the first place got zeros, traced None.
    def f(x, w):
        with tl.GradientTape() as t:
            t.watch(x)
            t.watch(w)
            y = tl.reduce_sum(x * 3.0 + w * w)
        return t.gradient(y, [x, w, x])

    for g in modes(f):
        assert values(g(tl.constant([1.0, 2.0]), tl.constant(5.0))) == [[3, 3], 20, [3, 3]]


def test_a_gradient_penalty_through_a_function_with_its_own_tape():
    # The outer tape replays the function with x a constant, so its inner
    # tape's gradient was None (a TypeError in the penalty).
    def gp(w, x):
        with tl.GradientTape() as inner:
            inner.watch(x)
            out = tl.reduce_sum(tl.tanh(x * w))
        gx = inner.gradient(out, x)
        return tl.reduce_sum(gx * gx)

    w, x = tl.constant([0.5, -1.0, 2.0]), tl.constant([0.3, 0.2, -0.1])
    xs, ws = x.numpy().astype(np.float64), w.numpy().astype(np.float64)

    def penalty(v):
        return np.sum((v * (1 - np.tanh(xs * v) ** 2)) ** 2)

    want = [(penalty(ws + 1e-6 * e) - penalty(ws - 1e-6 * e)) / 2e-6 for e in np.eye(3)]
    for g in modes(gp):
        with tl.GradientTape() as outer:
            outer.watch(w)
            pen = g(w, x)
        np.testing.assert_allclose(outer.gradient(pen, w).numpy(), want, rtol=1e-4)


def test_complex_gradients_are_an_error_not_none():
    x = tl.constant(np.array([1 + 2j], np.complex64))

    def f(x):
        with tl.GradientTape() as t:
            t.watch(x)
            y = tl.reduce_sum(x * x)
        return t.gradient(y, x)

    for g in modes(f):
        with pytest.raises(tl.errors.UnimplementedError, match="complex differentiation is not supported"):
            g(x)


# --- custom_gradient ------------------------------------------------------------


def test_custom_gradient_none_wrong_counts_and_nested_arguments():
    @tl.custom_gradient
    def half_blocked(x, y):
        return x * 2 + y, lambda dy: (dy * 2, None)  # TF allows None: no gradient

    @tl.custom_gradient
    def wrong_count(x, y):
        return x * y, lambda dy: dy

    @tl.custom_gradient
    def product(xs):  # a list of tensors (TF: nested structures of tensors)
        return xs[0] * xs[1], lambda dy: [dy * xs[1], dy * xs[0]]

    def grads(f, x, y, pair):
        with tl.GradientTape() as t:
            t.watch([x, y])
            z = f([x, y]) if pair else f(x, y)
        return t.gradient(z, [x, y])

    x, y = tl.constant(1.0), tl.constant(3.0)
    for jit in [None, False, True]:
        call = grads if jit is None else tl.function(grads, jit_compile=jit)
        assert values(call(half_blocked, x, y, False)) == [2.0, 0.0]
        assert values(call(product, x, y, True)) == [3.0, 1.0]
        with pytest.raises(ValueError, match="returned 1 gradient.* for 2 input"):
            call(wrong_count, x, y, False)


# --- tl.function arguments --------------------------------------------------------


@pytest.mark.parametrize("jit", BOTH)
def test_keyword_only_arguments_and_kwargs_reach_the_function(jit):
    # bound.args left them out: the trace used the defaults silently (or
    # "missing a required keyword-only argument").
    def scaled(x, *, training=False):
        return x * (0.5 if training else 1.0)

    def shifted(x, *, off):
        return x + off

    def extra(x, **kw):
        return x + kw.get("off", 0.0)

    x = tl.constant([1.0, 2.0])
    f = tl.function(scaled, jit_compile=jit)
    assert values(f(x, training=True)) == [[0.5, 1.0]]
    assert values(f(x, training=False)) == [[1.0, 2.0]]
    assert values(tl.function(shifted, jit_compile=jit)(x, off=tl.constant(10.0))) == [[11.0, 12.0]]
    assert values(tl.function(extra, jit_compile=jit)(x, off=3.0)) == [[4.0, 5.0]]
    with tl.GradientTape() as t:
        t.watch(x)
        y = tl.reduce_sum(tl.function(shifted, jit_compile=jit)(x, off=x * 2))
    assert values(t.gradient(y, x)) == [[3.0, 3.0]]


def test_input_signature_takes_numpy_values_of_its_dtype_only_on_every_call():
    # The first call cast them (2**40 wrapped to 5, 1.7 truncated); later
    # ones, on the native path, refused them.
    f = tl.function(lambda x: x, input_signature=[tl.TensorSpec([None], tl.int32)])
    for a in [np.array([2**40 + 5]), np.array([1.7, -2.9])] * 2:
        with pytest.raises(tl.errors.InvalidArgumentError, match="does not match its input_signature"):
            f(a)
    assert values(f(np.array([3], np.int32))) == [[3]]
    assert values(f([4, 5])) == [[4, 5]]  # Python values take the signature's dtype


def test_numpy_integers_out_of_a_tensors_range_are_an_error():
    with pytest.raises(OverflowError, match="out of its range"):
        tl.constant([1, 2]) + np.array([2**40, 2**40])
    with pytest.raises(OverflowError, match="out of its range"):
        tl.constant([1, 2]) + np.int64(2**40)
    assert values(tl.constant([1, 2]) + np.array([3, 4])) == [[4, 6]]


def test_symbolic_tensors_iterate_over_a_known_first_dim_only():
    @tl.function
    def total(x):
        s = tl.zeros_like(x[0])
        for row in x:
            s = s + row
        return s

    assert values(total(np.ones((3, 2), np.float32))) == [[3.0, 3.0]]
    unknown = tl.function(total.python_function, input_signature=[tl.TensorSpec([None, 2])])
    with pytest.raises(TypeError, match="first dimension must be known"):
        unknown(np.ones((3, 2), np.float32))  # was an endless trace
    with pytest.raises(TypeError, match="first dimension must be known"):
        tl.function(lambda x: [v for v in x])(np.float32(1.0))
    with pytest.raises(TypeError, match="int\\(\\) of a symbolic tensor"):
        tl.function(lambda x: int(x))(np.float32(1.0))


@pytest.mark.parametrize("jit", BOTH)
def test_a_step_past_the_dim_selects_one_element(jit):
    # A step of -2**63 overflowed the compiler (a PanicException, not an
    # Exception).
    f = tl.function(lambda x: (x[::-(2**63)], x[::2**63 - 1], x[:: -(2**63) + 1]), jit_compile=jit)
    assert values(list(f(np.array([1.0, 2.0, 3.0], np.float32)))) == [[3.0], [1.0], [3.0]]


def test_reshape_whose_size_overflows_names_the_reshape():
    for g in modes(lambda x: tl.reshape(x, [2**62, 4]))[:2]:
        with pytest.raises(tl.errors.InvalidArgumentError, match="reshape.*number of elements overflows"):
            g(tl.constant([1.0]))


# --- control flow ------------------------------------------------------------------


def test_a_loop_body_must_return_the_loop_variables_structure():
    # Values were bound by position to other loop variables.
    @tl.function
    def keys(x, y):
        return tl.while_loop(lambda d: d["a"][0] < 3.0, lambda d: {"b": d["a"] + 1, "c": d["b"] * 10},
                             [{"a": x, "b": y}])

    with pytest.raises(ValueError, match="must return the loop variables' structure"):
        keys(np.zeros(2, np.float32), np.ones(2, np.float32))

    @tl.function
    def nested(x, y):
        return tl.while_loop(lambda a, b: a[0] < 3.0, lambda a, b: (a + 1, (b,)), (x, y))

    with pytest.raises(ValueError, match="must return the loop variables' structure"):
        nested(np.zeros(2, np.float32), np.ones(2, np.float32))
    # A tuple for a list of loop variables is fine, as in TensorFlow.
    ok = tl.function(lambda x: tl.while_loop(lambda a, b: a < 3, lambda a, b: (a + 1, b * 2), [0, x]))
    assert values(ok(np.float32(1.0))) == [3, 8.0]


def test_cond_branches_of_other_dtypes_are_named_as_the_user_wrote_them():
    @tl.function
    def f(x):
        return tl.cond(x > 0, lambda: x * 2, lambda: tl.cast(x, tl.int32))

    with pytest.raises(TypeError, match="true_fn returns result 0 as float32.*false_fn returns int32"):
        f(tl.constant(1.0))


# --- callbacks ----------------------------------------------------------------------


@pytest.mark.parametrize("jit", BOTH)
def test_a_callback_returning_none_for_a_result_is_an_error_not_nan(jit):
    f = tl.function(lambda x: tl.numpy_function(lambda a: None, [x], tl.float32), jit_compile=jit)
    with pytest.raises(tl.errors.InvalidArgumentError, match="output 0 of numpy_function.* is None"):
        f(np.ones(2, np.float32))
    with pytest.raises(tl.errors.InvalidArgumentError, match="output 0 of py_function.* is None"):
        tl.py_function(lambda a: None, [tl.constant([1.0])], tl.float32)


def run_script(code, timeout=120):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_a_stateless_callback_calling_its_function_while_it_compiles_does_not_hang():
    # The compiler runs a stateless callback on constants ahead; one that
    # called the function being compiled waited for its own compile slot.
    r = run_script("""
        import numpy as np, tensorlift as tl
        depth = [0]
        def g(a):
            depth[0] += 1
            return a if depth[0] > 1 else f(np.float32(1.0)).numpy()
        @tl.function(jit_compile=True)
        def f(x):
            return tl.numpy_function(g, [tl.constant(1.0)], tl.float32, stateful=False) + x
        print(f(np.float32(2.0)).numpy())
    """)
    assert r.returncode == 0 and r.stdout.strip() == "3.0", r.stdout + r.stderr


def test_errors_of_callbacks_reentering_functions_grow_linearly():
    # Each level formatted its cause's chain again: 480 MB at depth 20.
    r = run_script("""
        import numpy as np, tensorlift as tl
        n = [0]
        def g(a):
            n[0] += 1
            if n[0] >= 20:
                raise ValueError("bottom")
            return f(a).numpy()
        @tl.function(jit_compile=True)
        def f(x):
            return tl.numpy_function(g, [x], tl.float32)
        try:
            f(np.ones(2, np.float32))
        except tl.errors.InvalidArgumentError as e:
            print(len(str(e)), str(e).count("bottom"))
    """)
    size, bottoms = map(int, r.stdout.split())
    assert size < 64_000 and 1 <= bottoms <= 2, r.stdout + r.stderr


# --- call_into and pickling -----------------------------------------------------------


def test_call_into_a_byte_swapped_buffer_is_an_error():
    f = tl.function(lambda x: x * 2 + 1, jit_compile=True)
    with pytest.raises(ValueError, match="byte order"):
        f.call_into(np.zeros(3, ">f4"), np.ones(3, np.float32))


def make_unpicklable_square():
    @tl.function
    def square(x):
        return x * x

    return square


def test_a_function_unpickled_from_graphs_says_what_it_cannot_do():
    f = make_unpicklable_square()
    f(np.ones(2, np.float32))
    g = pickle.loads(pickle.dumps(f))
    x = tl.constant([1.0, 2.0])
    assert values(g(x)) == [[1.0, 4.0]]
    with tl.GradientTape() as t:
        t.watch(x)
        with pytest.raises(TypeError, match="unpickled from its graphs, which a GradientTape cannot"):
            g(x)  # its gradient was None
    with pytest.raises(TypeError, match="cannot be traced into another tl.function"):
        tl.function(lambda v: g(v) + 1)(np.ones(2, np.float32))


def test_output_gradients_give_one_per_target():
    x = tl.constant([1.0, 2.0])
    with tl.GradientTape(persistent=True) as t:
        t.watch(x)
        a, b = x * 2, x * 3
    # One entry for two targets was padded with ones, in the wrong place.
    with pytest.raises(ValueError, match="output_gradients holds 1 tensor.* for 2 target"):
        t.gradient([a, b], x, output_gradients=[tl.constant([1.0, 1.0])])
    g = t.gradient([a, b], x, output_gradients=[None, tl.constant([10.0, 10.0])])
    assert values(g) == [[32.0, 32.0]]


@pytest.mark.parametrize("jit", BOTH)
def test_a_train_step_over_batches_of_any_size_is_differentiated(jit):
    # TensorFlow's train step: input_signature with a None batch dim and a
    # tape inside. The gradient's rules need static shapes, so the trace
    # failed; the function is now traced per concrete shape instead.
    @tl.function(input_signature=[tl.TensorSpec([None, 3]), tl.TensorSpec([3])], jit_compile=jit)
    def step(x, w):
        with tl.GradientTape() as t:
            t.watch(w)
            loss = tl.reduce_mean(tl.reduce_sum(x * w, axis=1) ** 2)
        return t.gradient(loss, w)

    w = np.array([1.0, -1.0, 0.5], np.float32)
    for n in [4, 4, 7]:
        x = np.arange(n * 3, dtype=np.float32).reshape(n, 3) / 10
        np.testing.assert_allclose(step(x, w).numpy(), 2 * ((x @ w)[:, None] * x).mean(0), rtol=1e-5)
    assert step.experimental_get_tracing_count() == 2
    with pytest.raises(tl.errors.InvalidArgumentError, match="does not match its input_signature"):
        step(np.ones((2, 4), np.float32), w)
    out = np.empty(3, np.float32)
    step.call_into(out, np.ones((5, 3), np.float32), w)
    np.testing.assert_allclose(out, 2 * 0.5 * np.ones(3), rtol=1e-6)


def test_shapes_and_predicates_are_checked_with_clear_errors():
    with pytest.raises(tl.errors.InvalidArgumentError, match="tl.zeros: the shape \\[-3\\] has a negative"):
        tl.zeros([-3])
    with pytest.raises(TypeError, match="a shape is a list of integers"):
        tl.ones([2.5])
    with pytest.raises(TypeError, match="TensorSpec dimensions are integers or None"):
        tl.TensorSpec([2.5])
    # A shape from a None dim: traced per concrete shape (it was an error).
    f = tl.function(lambda x: tl.zeros(tl.shape(x)), input_signature=[tl.TensorSpec([None])])
    np.testing.assert_array_equal(f(np.ones(3, np.float32)).numpy(), np.zeros(3))
    def h_body(x):
        r = tl.numpy_function(np.copy, [x], tl.float32)
        r.set_shape([None])
        return tl.zeros(tl.shape(r))

    h = tl.function(h_body)
    with pytest.raises(TypeError, match="a shape must be known when traced"):
        h(np.ones(3, np.float32))
    # A broadcast scalar, not a constant of the whole shape.
    g = tl.function(lambda x: tl.zeros([64, 64]) + x)
    assert "broadcast" in g.experimental_get_compiler_ir(np.float32(1))(stage="hlo")
    with pytest.raises(ValueError, match="tl.cond: the predicate must be a scalar bool, got shape \\[2\\]"):
        tl.cond(tl.constant([True, False]), lambda: 1, lambda: 2)
    with pytest.raises(TypeError, match="true_fn must be callable"):
        tl.cond(tl.constant(True), tl.constant(1.0), lambda: 2.0)
    with pytest.raises(ValueError, match="condition of tl.while_loop: the predicate must be a scalar"):
        tl.while_loop(lambda x: x < 3, lambda x: x + 1, [tl.constant([0, 1])])


@pytest.mark.parametrize("jit", BOTH)
def test_ctrl_c_stops_a_runaway_loop(jit):
    # Only SIGKILL ended it: a loop in native code runs no bytecode, where
    # Python's handler would raise KeyboardInterrupt. And where the loop
    # held a callback, the KeyboardInterrupt became an UnknownError that
    # `except Exception` swallowed.
    r = run_script(f"""
        import os, signal, threading, numpy as np, tensorlift as tl
        @tl.function(jit_compile={jit})
        def runaway(x):  # x stops growing at 2**24 in float32
            return tl.while_loop(lambda v: v[0] >= 0, lambda v: v + 1.0, [x])
        def step(v):
            r = tl.numpy_function(lambda a: a + np.float32(1), [v], tl.float32)
            r.set_shape([])
            return r
        @tl.function(jit_compile={jit})
        def calling(x):
            return tl.while_loop(lambda v: v >= 0, step, [x])
        for f in (runaway, calling):
            threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
            try:
                f(np.ones(2, np.float32) if f is runaway else np.float32(1))
            except KeyboardInterrupt:
                print("interrupted", f.__name__)
            except Exception as e:
                print("swallowed", type(e).__name__)
    """, timeout=60)
    assert r.stdout.split("\n")[:2] == ["interrupted runaway", "interrupted calling"], r.stdout + r.stderr


# --- a differential fuzzer's findings -----------------------------------------


@pytest.mark.parametrize("jit", BOTH)
def test_the_gradient_of_a_gather_of_no_indices_is_zeros(jit):
    # The scatter of its gradient cut rows of 0 elements: a panic
    # (PanicException, not an Exception), in every mode.
    idx = tl.constant(np.zeros([0], np.int32))

    def g(x):
        with tl.GradientTape() as t:
            t.watch(x)
            y = tl.reduce_sum(tl.gather(x, idx, axis=1))
        return t.gradient(y, x)

    x = np.ones([5, 3], np.float32)
    for f in [g, tl.function(g, jit_compile=jit)]:
        np.testing.assert_array_equal(f(tl.constant(x)).numpy(), np.zeros([5, 3]))


@pytest.mark.parametrize("jit", BOTH)
def test_broadcast_to_a_size_one_dim_over_a_none_dim(jit):
    # [None, 3] -> [1, 3] was refused at trace time (the None dim may be 1).
    f = tl.function(lambda x: tl.broadcast_to(x, [1, 3]), input_signature=[tl.TensorSpec([None, 3])],
                    jit_compile=jit)
    np.testing.assert_array_equal(f(np.ones([1, 3], np.float32)).numpy(), np.ones([1, 3]))
    with pytest.raises(tl.errors.InvalidArgumentError):
        f(np.ones([2, 3], np.float32))
    g = tl.function(lambda x: tl.broadcast_to(x, [4, 3]), input_signature=[tl.TensorSpec([None, 3])],
                    jit_compile=jit)
    np.testing.assert_array_equal(g(np.ones([1, 3], np.float32)).numpy(), np.ones([4, 3]))


def test_squeeze_without_axis_of_a_none_dim_is_an_error_not_another_shape():
    f = tl.function(lambda x: tl.squeeze(x) + tl.zeros([4]), input_signature=[tl.TensorSpec([4, None])])
    with pytest.raises(ValueError, match="name them with axis="):
        f(np.ones([4, 1], np.float32))  # was (4, 4): the None dim kept
    g = tl.function(lambda x: tl.squeeze(x, 1) + tl.zeros([4]), input_signature=[tl.TensorSpec([4, None])])
    assert g(np.ones([4, 1], np.float32)).shape == (4,)


# --- a review of the session's changes ---------------------------------------------


def after_exit(x):
    with tl.GradientTape() as t:
        t.watch(x)
        h = x * x
    y = tl.reduce_sum(h * 3)  # not recorded: the tape has exited
    return t.gradient(y, x)


def reentered(x):
    t = tl.GradientTape(persistent=True)
    with t:
        t.watch(x)
        h = x * x
    with t:
        y = tl.reduce_sum(h * 3)
    return t.gradient(y, x)


def identity_while_paused(x):
    with tl.GradientTape() as t:
        t.watch(x)
        h = x * 2
        with t.stop_recording():
            tl.identity(h)  # hands back h's own value
            tl.broadcast_to(h, [3])
        y = tl.reduce_sum(h * h)
    return t.gradient(y, x)


@pytest.mark.parametrize("f, want", [
    (after_exit, None),
    (reentered, [6.0, 12.0, 18.0]),
    (identity_while_paused, [8.0, 16.0, 24.0]),
])
def test_a_tape_records_between_enter_and_exit_only(f, want):
    # Traced, a tape kept a start only: ops after its exit counted, a
    # second `with` block lost the first's, and a value an op handed back
    # while paused was cut.
    x = tl.constant([1.0, 2.0, 3.0])
    for g in modes(f):
        r = g(x)
        assert (None if r is None else r.numpy().tolist()) == want


@pytest.mark.parametrize("jit", BOTH)
def test_nested_calls_with_structures_or_keywords_inline_while_traced(jit):
    inner = tl.function(lambda d: d["a"] * 2 + d["b"])
    inner_list = tl.function(lambda xs: xs[0] * 3)
    scaled = tl.function(lambda x, *, scale: x * scale)

    @tl.function(jit_compile=jit)
    def outer(x):
        return inner({"a": x, "b": x + 1}) + inner_list([x]) + scaled(x, scale=x)

    np.testing.assert_allclose(outer(np.float32(2.0)).numpy(), 2 * 2 + 3 + 6 + 4)


def test_the_per_shape_fallback_also_serves_call_into_and_ahead_of_time():
    spec = [tl.TensorSpec([None, 3]), tl.TensorSpec([3])]

    def step(x, w):
        with tl.GradientTape() as t:
            t.watch(w)
            loss = tl.reduce_sum(x * w)
        return t.gradient(loss, w)

    f = tl.function(step, input_signature=spec, jit_compile=True)
    out = np.empty(3, np.float32)
    f.call_into(out, np.ones((4, 3), np.float32), np.ones(3, np.float32))
    np.testing.assert_array_equal(out, [4.0, 4.0, 4.0])
    g = tl.function(step, input_signature=spec, jit_compile=True)
    g.get_concrete_function()  # was "differentiation needs static shapes"
    np.testing.assert_array_equal(g(np.ones((2, 3), np.float32), np.ones(3, np.float32)).numpy(), [2.0] * 3)


def test_the_eager_op_cache_is_bounded():
    # One compiled one-op function per op, attributes and input types,
    # kept for ever: a loop of big[i] over 20,000 indices grew RSS by 95 MB.
    big = tl.constant(np.arange(3000, dtype=np.float32))
    for i in range(2500):
        assert big[i].numpy() == i
    assert tl._native.eager_cache_size() <= 1024


def test_symbols_dropped_on_another_thread_are_freed_on_their_own():
    # A symbolic tensor belongs to its trace's thread (an Rc); dropped on
    # another (cyclic garbage collected there) it was leaked: two threads
    # taking tape gradients grew by ~0.5 KB a gradient.
    before = tl._native.orphaned_syms()
    kept = []
    go_on = threading.Event()

    def worker():
        tl.function(lambda x: kept.append(x) or x * 2)(np.float32(1.0))
        go_on.wait()
        tl.function(lambda x: x + 1)(np.float32(1.0))  # makes symbols: drops its orphans

    t = threading.Thread(target=worker)
    t.start()
    while not kept:
        time.sleep(0.01)
    time.sleep(0.05)
    kept.clear()  # the symbol dies on this thread
    assert tl._native.orphaned_syms() >= before + 1
    go_on.set()
    t.join()
    assert tl._native.orphaned_syms() <= before
    # A symbol of a thread that has ended, dropped here: freed at once.
    ended = []
    t = threading.Thread(target=lambda: tl.function(lambda x: ended.append(x) or x)(np.float32(1.0)))
    t.start()
    t.join()
    ended.clear()
    assert tl._native.orphaned_syms() <= before


def test_retracing_warns_once_and_reduce_retracing_says_it_is_not_implemented():
    # 3,000 distinct Python values traced and compiled 3,000 times with no
    # word (TensorFlow warns of retracing); reduce_retracing was ignored.
    f = tl.function(lambda x, i: x * i)
    with pytest.warns(RuntimeWarning, match="has been traced 32 times"):
        for i in range(40):
            f(np.float32(1.0), i)
    with pytest.warns(RuntimeWarning, match="reduce_retracing / experimental_relax_shapes is not implemented"):
        tl.function(lambda x: x, reduce_retracing=True)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_fork_with_other_threads_running_warns():
    # A child forked while another thread held a function's compile lock
    # hung on its first call of it (as with JAX, which warns too).
    r = run_script("""
        import os, threading, warnings, numpy as np, tensorlift as tl
        stop = threading.Event()
        t = threading.Thread(target=stop.wait)
        t.start()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
        stop.set()
        t.join()
        print(any("os.fork() while other threads run" in str(x.message) for x in w))
    """)
    assert r.stdout.strip() == "True", r.stdout + r.stderr


def test_integers_past_64_bits_say_so():
    # tl.constant(2**64) said "cannot make a string tensor of a Python int";
    # an axis of 2**63 "'int' object is not an instance of 'Sequence'".
    with pytest.raises(OverflowError, match="out of the range of int64"):
        tl.constant(2**64)
    with pytest.raises(OverflowError, match="out of the range of int64"):
        tl.constant([1, -(2**63) - 1])
    with pytest.raises(tl.errors.InvalidArgumentError, match="reduce_sum: axis 9223372036854775808 is out of range"):
        tl.reduce_sum(tl.constant([1.0, 2.0]), axis=2**63)
    with pytest.raises(tl.errors.InvalidArgumentError, match="transpose: perm .* is out of range"):
        tl.transpose(tl.constant([[1.0]]), [2**63, 0])
    assert tl.constant(2**40).dtype == tl.int64


@pytest.mark.parametrize("jit", BOTH)
def test_tf_slice_with_traced_starts_is_a_dynamic_slice(jit):
    # x[a:] with a tensor a cannot have a static shape (a clear error now);
    # TensorFlow's tf.slice(x, begin, size) with a traced begin can.
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    assert tl.slice(x, [1, 2], [2, 2]).numpy().tolist() == [[7, 8], [12, 13]]
    assert tl.slice(x, [1, 0], [-1, 3]).shape == (3, 3)
    f = tl.function(lambda x, i: tl.slice(x, [i, 1], [2, 3]), jit_compile=jit)
    assert f(x, np.int32(1)).numpy().tolist() == [[6, 7, 8], [11, 12, 13]]
    assert f(x, np.int32(3)).numpy().tolist() == [[11, 12, 13], [16, 17, 18]]  # clamped, as XLA
    rows = tl.function(lambda x: tl.while_loop(
        lambda i, s: i < 3, lambda i, s: (i + 1, s + tl.reduce_sum(tl.slice(x, [i, 0], [1, 5]))), [0, 0.0])[1],
        jit_compile=jit)
    assert rows(x).numpy() == x[:3].sum()
    with pytest.raises(tl.errors.InvalidArgumentError, match="go past the shape"):
        tl.slice(x, [3, 0], [2, 5])
    g = tl.function(lambda x, a: x[a:], input_signature=[tl.TensorSpec([None]), tl.TensorSpec([], tl.int32)],
                    jit_compile=jit)
    with pytest.raises(TypeError, match="a slice bound is a tensor of the traced function"):
        g(np.arange(5, dtype=np.float32), np.int32(2))


@pytest.mark.parametrize("jit", BOTH)
def test_an_overflow_error_in_a_callback_is_an_invalid_argument(jit):
    def boom(a):
        raise OverflowError("too big")

    f = tl.function(lambda x: tl.numpy_function(boom, [x], tl.float32), jit_compile=jit)
    with pytest.raises(tl.errors.InvalidArgumentError, match="OverflowError: too big"):
        f(np.ones(2, np.float32))
    with pytest.raises(tl.errors.InvalidArgumentError, match="OverflowError: too big"):
        tl.py_function(boom, [tl.constant([1.0])], tl.float32)
