"""The Python package from a user's side: eager tensors, tl.function
(interpreted and jit-compiled), control flow, callbacks, gradients, errors."""

import platform
import sys
import threading

import numpy as np
import pytest

import tensorlift as tl

BOTH = [False, True]


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


# --- eager tensors ------------------------------------------------------


def test_constant_dtypes_follow_tensorflow():
    assert tl.constant(1.0).dtype == tl.float32
    assert tl.constant(1).dtype == tl.int32
    assert tl.constant(True).dtype == tl.bool
    assert tl.constant(np.float64(1.5)).dtype == tl.float64
    assert tl.constant([1, 2], dtype=tl.int64).dtype == "int64"
    assert tl.constant(np.zeros((2, 3), np.float16)).shape == (2, 3)
    assert tl.constant(1.0 + 2.0j).dtype == tl.complex64


def test_eager_ops_match_numpy():
    a = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    x = tl.constant(a)
    close(tl.exp(x), np.exp(a))
    close(x * 2.0 + 1.0, a * 2 + 1)
    close(1.0 - x, 1 - a)
    close(tl.reduce_sum(x, axis=1), a.sum(1))
    close(tl.reduce_mean(x, axis=[0, 1], keepdims=True), a.mean(keepdims=True))
    close(tl.matmul(x, tl.transpose(x)), a @ a.T, 1e-4)
    close(x @ tl.transpose(x), a @ a.T, 1e-4)
    close(tl.reshape(x, [4, 3]), a.reshape(4, 3))
    close(x[1], a[1])
    close(x[:, ::-2], a[:, ::-2])
    close(x[..., 1:3], a[..., 1:3])
    close(x[None, 2, -1], a[None, 2, -1])
    close(tl.gather(x, tl.constant([2, 0]), axis=0), a[[2, 0]])
    close(tl.where(x > 0, x, tl.zeros_like(x)), np.where(a > 0, a, 0))
    close(tl.concat([x, x], axis=0), np.concatenate([a, a]))
    close(tl.stack([x, x], axis=1), np.stack([a, a], 1))
    close(tl.nn.softmax(x), np.exp(a) / np.exp(a).sum(-1, keepdims=True))
    assert int(tl.argmax(tl.constant([1.0, 5.0, 2.0]))) == 1
    assert (x == x).dtype == tl.bool
    assert np.asarray(x).shape == (3, 4)


def test_numpy_arrays_combine_with_tensors():
    x = tl.constant([1.0, 2.0])
    y = np.array([3.0, 4.0], np.float32) + x
    assert isinstance(y, tl.Tensor)
    close(y, [4.0, 6.0])


def test_dtype_mismatch_is_a_clear_error():
    with pytest.raises(tl.errors.InvalidArgumentError, match="f32|float32|i32|int32"):
        tl.constant([1.0]) + tl.constant([1])


# --- tl.function ----------------------------------------------------------


@pytest.mark.parametrize("jit", BOTH)
def test_function_traces_once_per_signature(jit):
    @tl.function(jit_compile=jit)
    def f(x, y):
        return {"sum": x + y, "prod": (x * y, tl.reduce_max(x))}

    a = np.arange(4, dtype=np.float32)
    r = f(a, a + 1)
    close(r["sum"], 2 * a + 1)
    close(r["prod"][0], a * (a + 1))
    close(r["prod"][1], 3.0)
    f(a + 1, a)
    assert f.experimental_get_tracing_count() == 1
    f(np.arange(5, dtype=np.float32), np.zeros(5, np.float32))
    assert f.experimental_get_tracing_count() == 2


@pytest.mark.parametrize("jit", BOTH)
def test_function_with_input_signature_and_keywords(jit):
    @tl.function(input_signature=[tl.TensorSpec([None], tl.float32)], jit_compile=jit)
    def f(x, scale=2.0):
        return x * scale

    close(f(x=[1.0, 2.0]), [2.0, 4.0])
    close(f([1.0, 2.0, 3.0]), [2.0, 4.0, 6.0])
    with pytest.raises(tl.errors.InvalidArgumentError):
        f(np.zeros((2, 2), np.float32))


def test_function_without_inputs_and_with_python_constants():
    @tl.function
    def f():
        return tl.constant(3.0) * 2.0, 7

    a, b = f()
    close(a, 6.0)
    assert int(b) == 7


def test_compiler_ir_names_python_lines():
    @tl.function(jit_compile=True)
    def f(x):
        return tl.exp(x) * 2.0  # this line

    line = f.python_function.__code__.co_firstlineno + 2
    hlo = f.experimental_get_compiler_ir(tl.TensorSpec([4], tl.float32))(stage="hlo")
    assert f'test_package.py":{line}' in hlo, hlo
    assert "exp" in hlo
    # Each kernel (Cranelift IR, or its machine code's listing), then
    # `main` (a list of calls: the program has no control flow).
    clif = f.experimental_get_compiler_ir(tl.TensorSpec([4], tl.float32))(stage="cranelift")
    assert "; kernel 'mul'" in clif, clif
    assert "; main" in clif, clif


def test_trace_error_is_raised_at_the_line_that_caused_it():
    @tl.function
    def f(x):
        y = x + 1.0
        return tl.matmul(y, tl.ones([2, 2]))  # 3 against 2: an error here

    with pytest.raises(tl.errors.InvalidArgumentError) as e:
        f(np.zeros(3, np.float32))
    frames = [fr for fr in e.traceback if fr.path.name == "test_package.py"]
    assert "tl.matmul(y, tl.ones" in str(frames[-1].statement)
    assert "test_package.py" in str(e.value)


def test_python_exception_in_a_traced_body_propagates_unchanged():
    @tl.function
    def f(x):
        raise KeyError("mine")

    with pytest.raises(KeyError, match="mine"):
        f(tl.constant(1.0))
    # Nothing cached: the next call traces again and raises again.
    with pytest.raises(KeyError):
        f(tl.constant(1.0))


def test_symbolic_tensor_as_python_bool_is_a_clear_error():
    @tl.function
    def f(x):
        if x > 0:
            return x
        return -x

    with pytest.raises(TypeError, match="tl.cond"):
        f(tl.constant(1.0))


# --- control flow -----------------------------------------------------------


@pytest.mark.parametrize("jit", BOTH)
def test_while_loop_cond_switch(jit):
    @tl.function(jit_compile=jit)
    def f(x, n):
        i, y = tl.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y * 2.0), [tl.constant(0), x])
        z = tl.cond(tl.reduce_sum(y) > 100.0, lambda: y + 1.0, lambda: y - 1.0)
        w = tl.switch_case(i % 3, [lambda: z * 0.0, lambda: z * 1.0, lambda: z * 2.0])
        return i, w

    x = np.array([1.0, 2.0], np.float32)
    for n in [0, 1, 5]:
        i, w = f(x, np.int32(n))
        y = x * 2.0**n
        z = y + 1 if y.sum() > 100 else y - 1
        assert int(i) == n
        close(w, z * [0.0, 1.0, 2.0][n % 3])


def test_eager_control_flow_runs_in_python():
    r = tl.while_loop(lambda i: i < 10, lambda i: i + 3, tl.constant(0))
    assert int(r) == 12
    assert float(tl.cond(tl.constant(True), lambda: 1.0, lambda: 2.0)) == 1.0
    r = tl.while_loop(lambda i: i < 100, lambda i: i + 1, [tl.constant(0)], maximum_iterations=7)
    assert int(r[0]) == 7


@pytest.mark.parametrize("jit", BOTH)
def test_while_loop_maximum_iterations_traced(jit):
    @tl.function(jit_compile=jit)
    def f(x):
        return tl.while_loop(lambda v: v < 1e9, lambda v: v * 2.0, [x], maximum_iterations=5)[0]

    close(f(tl.constant(1.0)), 32.0)


# --- callbacks ----------------------------------------------------------------


@pytest.mark.parametrize("jit", BOTH)
def test_numpy_function_in_a_compiled_function(jit):
    seen = []

    def body(a, b):
        seen.append((a.dtype, b.dtype))
        return np.sinc(a).astype(np.float32), (b * 2).astype(np.int64)

    @tl.function(jit_compile=jit)
    def f(x, k):
        s, k2 = tl.numpy_function(body, [x * 2.0, k], [tl.float32, tl.int64])
        return s + 1.0, k2

    x = np.array([0.25, 0.5], np.float32)
    s, k2 = f(x, np.int32(3))
    close(s, np.sinc(x * 2) + 1)
    assert k2.dtype == tl.int64 and int(k2) == 6
    assert seen[-1] == (np.float32, np.int32)


@pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64"),
    reason="denormals are flushed on x86-64 only",
)
def test_compiled_code_flushes_denormals_and_callbacks_keep_them():
    # As jax.jit does: jax.jit(lambda x: x * 0.5)(2e-38) is 0.0.
    tiny = np.finfo(np.float32).tiny
    x = np.full(8, tiny, np.float32)

    def halve(v):
        return v * np.float32(0.5)

    @tl.function(jit_compile=True)
    def f(x):
        return x * 0.5, tl.numpy_function(halve, [x], tl.float32)

    y, z = f(x)
    assert np.all(np.asarray(y) == 0.0)
    # NumPy inside the compiled function computes IEEE denormals.
    assert np.all(np.asarray(z) == tiny / 2)
    # Interpreted, and on the calling thread after the call: denormals.
    assert np.all(np.asarray(tl.function(lambda x: x * 0.5)(x)) == tiny / 2)
    assert np.all(halve(x) == tiny / 2) and np.all(halve(x) != 0)


@pytest.mark.parametrize("jit", BOTH)
def test_callback_kinds_and_return_forms(jit):
    @tl.function(jit_compile=jit)
    def f(x):
        a = tl.py_func(lambda v: v + 1, [x], tl.float32)
        b = tl.compat.v1.py_func(lambda v: [v, v], [x], [tl.float32, tl.float32])
        c = tl.numpy_function(lambda v: 5.0, [x], tl.float32)
        tl.numpy_function(lambda v: None, [x], [])
        return a, b[1], c

    a, b, c = f(np.array([1.0], np.float32))
    close(a, [2.0])
    close(b, [1.0])
    close(c, 5.0)


@pytest.mark.parametrize("jit", BOTH)
def test_callback_exception_maps_to_tf_errors_with_cause(jit):
    def bad(v):
        raise ValueError("bad value")

    def stop(v):
        raise StopIteration

    f = tl.function(lambda x: tl.numpy_function(bad, [x], tl.float32), jit_compile=jit)
    with pytest.raises(tl.errors.InvalidArgumentError, match="bad value") as e:
        f(tl.constant(1.0))
    assert isinstance(e.value.__cause__, ValueError)
    g = tl.function(lambda x: tl.numpy_function(stop, [x], tl.float32), jit_compile=jit)
    with pytest.raises(tl.errors.OutOfRangeError):
        g(tl.constant(1.0))
    # Still usable afterwards.
    h = tl.function(lambda x: tl.numpy_function(lambda v: v, [x], tl.float32), jit_compile=jit)
    close(h(tl.constant(2.0)), 2.0)


@pytest.mark.parametrize("jit", BOTH)
def test_wrong_return_dtype_names_the_output(jit):
    f = tl.function(lambda x: tl.numpy_function(lambda v: v.astype(np.float64), [x], tl.float32),
                    jit_compile=jit)
    with pytest.raises(tl.errors.InvalidArgumentError, match="float64|f64"):
        f(tl.constant([1.0]))


def test_numpy_function_eager():
    r = tl.numpy_function(lambda a: a * 3, [tl.constant([1, 2])], tl.int32)
    assert r.dtype == tl.int32
    close(r, [3, 6])


def test_py_function_under_jit_is_a_compile_error_before_its_body_runs():
    ran = []

    def body(v):
        ran.append(1)
        return v

    f = tl.function(lambda x: tl.py_function(body, [x], tl.float32) * 2.0, jit_compile=True)
    with pytest.raises(tl.errors.JitCompileError, match="py_function") as e:
        f(tl.constant(1.0))
    assert isinstance(e.value, tl.errors.InvalidArgumentError)
    assert "test_package.py" in str(e.value)
    assert ran == []
    g = tl.function(lambda x: tl.py_function(body, [x], tl.float32) * 2.0)
    close(g(tl.constant(1.5)), 3.0)
    assert ran == [1]


@pytest.mark.parametrize("order", ["C", "F"])
def test_fortran_and_c_ordered_returns(order):
    def body(v):
        return np.asarray(np.arange(6, dtype=np.float32).reshape(2, 3), order=order)

    f = tl.function(lambda x: tl.numpy_function(body, [x], tl.float32), jit_compile=True)
    close(f(tl.constant(0.0)), np.arange(6).reshape(2, 3))


def test_contrib_py_func_nested_arguments_and_outputs():
    def body(a, scale, opts):
        return {"y": (a * scale).astype(np.float32), "n": np.int32(opts["n"])}

    @tl.function
    def f(x):
        out = tl.contrib.framework.py_func(
            body, args=(x, 2.0), kwargs={"opts": {"n": 4}},
            output_types={"y": tl.float32, "n": tl.int32},
            output_shapes={"y": [2], "n": []})
        assert out["y"].shape == (2,) and out["n"].shape == ()
        return out["y"], out["n"]

    y, n = f(tl.constant([1.0, 2.0]))
    close(y, [2.0, 4.0])
    assert int(n) == 4


def test_parallel_python_threads_call_one_compiled_function():
    @tl.function(jit_compile=True)
    def f(x):
        return tl.numpy_function(lambda v: v + 1, [x * 2.0], tl.float32)

    results = {}

    def work(k):
        results[k] = float(f(tl.constant(float(k))))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {k: 2.0 * k + 1 for k in range(8)}


# --- gradients ----------------------------------------------------------------


def test_seed_page_log_huber_verbatim():
    """../shared/seeds/003: the py_function page's example, import changed."""
    tf = tl

    def log_huber(x, m):
        if tf.abs(x) <= m:
            return x**2
        else:
            return m**2 * (1 - 2 * tf.math.log(m) + tf.math.log(x**2))

    x = tf.constant(1.0)
    m = tf.constant(2.0)

    with tf.GradientTape() as t:
        t.watch([x, m])
        y = tf.py_function(func=log_huber, inp=[x, m], Tout=tf.float32)

    dy_dx = t.gradient(y, x)
    assert float(y) == 1.0
    assert float(dy_dx) == 2.0


def test_gradient_tape_eager_matches_analytic():
    a = np.array([0.5, -1.0, 2.0], np.float32)
    x = tl.constant(a)
    with tl.GradientTape(persistent=True) as t:
        t.watch(x)
        y = tl.reduce_sum(tl.sin(x) * x + tl.exp(x) / 2.0)
        z = tl.reduce_sum(x * x)
    close(t.gradient(y, x), np.cos(a) * a + np.sin(a) + np.exp(a) / 2, 1e-5)
    close(t.gradient(z, x), 2 * a)
    unrelated = tl.constant(1.0)
    assert t.gradient(y, unrelated) is None
    close(t.gradient(y, unrelated, unconnected_gradients="zero"), 0.0)


def test_non_persistent_tape_is_used_once():
    x = tl.constant(1.0)
    with tl.GradientTape() as t:
        t.watch(x)
        y = x * x
    t.gradient(y, x)
    with pytest.raises(RuntimeError, match="persistent"):
        t.gradient(y, x)


def test_nested_tapes_give_second_derivatives():
    x = tl.constant([1.0, 2.0])
    with tl.GradientTape() as outer:
        outer.watch(x)
        with tl.GradientTape() as inner:
            inner.watch(x)
            y = tl.reduce_sum(x * x * x)
        dy = inner.gradient(y, x)
    close(dy, [3.0, 12.0])
    close(outer.gradient(dy, x), [6.0, 12.0])


@pytest.mark.parametrize("jit", BOTH)
def test_gradient_tape_inside_a_function(jit):
    @tl.function(jit_compile=jit)
    def f(x, w):
        with tl.GradientTape() as t:
            t.watch(w)
            loss = tl.reduce_mean(tl.square(tl.matmul(x, w) - 1.0))
        return loss, t.gradient(loss, w)

    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    w = np.ones((3, 2), np.float32)
    loss, g = f(x, w)
    r = x @ w - 1.0
    close(loss, (r**2).mean(), 1e-4)
    close(g, x.T @ (2 * r / r.size), 1e-4)


def test_gradient_through_a_while_loop_in_a_function():
    @tl.function
    def f(x):
        with tl.GradientTape() as t:
            t.watch(x)
            _, y = tl.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, tl.sin(y)), [tl.constant(0), x])
        return t.gradient(y, x)

    a = 0.7
    s1 = np.sin(a)
    s2 = np.sin(s1)
    close(f(tl.constant(a)), np.cos(a) * np.cos(s1) * np.cos(s2))


@pytest.mark.parametrize("jit", BOTH)
def test_gradient_through_values_captured_by_branches_and_loops(jit):
    """Inside a function the tape's gradient is the graph's own: paths
    through what loop and branch bodies capture count."""

    @tl.function(jit_compile=jit)
    def f(x):
        with tl.GradientTape() as t:
            t.watch(x)
            y = tl.cond(x > 0.0, lambda: x * 2.0, lambda: x * 3.0)
            _, z = tl.while_loop(lambda i, z: i < 3, lambda i, z: (i + 1, z + tl.sin(x)), [0, 0.0])
            w = y + z
        return t.gradient(w, x)

    close(f(tl.constant(1.0)), 2.0 + 3 * np.cos(1.0))
    close(f(tl.constant(-1.0)), 3.0 + 3 * np.cos(-1.0))


def test_eager_tape_records_calls_of_functions():
    @tl.function(jit_compile=True)
    def cube(v):
        return v * v * v

    x = tl.constant([1.0, 2.0])
    with tl.GradientTape() as t:
        t.watch(x)
        y = tl.reduce_sum(cube(x) + x)
    close(t.gradient(y, x), 3 * np.array([1.0, 4.0]) + 1)


def test_py_function_gradient_inside_a_function():
    calls = []

    def cube(v):
        calls.append(1)
        return v * v * v

    @tl.function
    def f(x):
        with tl.GradientTape() as t:
            t.watch(x)
            y = tl.py_function(cube, [x], tl.float32)
        return y, t.gradient(y, x)

    y, g = f(tl.constant([2.0, 3.0]))
    close(y, [8.0, 27.0])
    close(g, [12.0, 27.0])
    # Once forward, once in its gradient (under a tape): not a third time.
    assert len(calls) == 2


@pytest.mark.parametrize("jit", BOTH)
def test_custom_gradient_for_a_numpy_function(jit):
    calls = {"sinh": 0, "cosh": 0}

    def sinh(v):
        calls["sinh"] += 1
        return np.sinh(v)

    def cosh(v):
        calls["cosh"] += 1
        return np.cosh(v)

    @tl.custom_gradient
    def np_sinh(x):
        y = tl.numpy_function(sinh, [x], tl.float32)
        y.set_shape(x.shape)

        def grad(dy):
            c = tl.numpy_function(cosh, [x], tl.float32)
            c.set_shape(x.shape)
            return dy * c

        return y, grad

    @tl.function(jit_compile=jit)
    def f(x):
        with tl.GradientTape() as t:
            t.watch(x)
            y = tl.reduce_sum(np_sinh(x))
        return t.gradient(y, x)

    a = np.array([0.1, 0.5], np.float32)
    close(f(a), np.cosh(a))
    # Each callback ran once: the gradient took the forward value from the
    # function instead of running sinh again.
    assert calls == {"sinh": 1, "cosh": 1}, calls


def test_gradient_of_numpy_function_without_a_gradient_is_an_error_naming_it():
    @tl.function
    def f(x):
        with tl.GradientTape() as t:
            t.watch(x)
            y = tl.numpy_function(np.sin, [x], tl.float32, name="my_sin")
            y.set_shape([])
        return t.gradient(y, x)

    with pytest.raises(tl.errors.OpError, match="my_sin"):
        f(tl.constant(1.0))


@pytest.mark.parametrize("jit", [False])
def test_py_function_result_declared_then_differentiated_through_ops(jit):
    """TF's idiom: set_shape on a py_function's result; then ops on it and
    a tape's gradient through them, inside a function."""
    def cube(v):
        return v * v * v

    @tl.function(jit_compile=jit)
    def f(x):
        with tl.GradientTape() as t:
            t.watch(x)
            y = tl.py_function(cube, [x], tl.float32)
            y.set_shape([2])
            z = tl.reduce_sum(y * 2.0)
        return z, t.gradient(z, x)

    z, g = f(tl.constant([2.0, 3.0]))
    close(z, 70.0)
    close(g, [24.0, 54.0])

    @tl.function
    def h(x):
        y = tl.py_function(cube, [x], tl.float32)
        y.set_shape([3])  # contradicted by the call's shape: checked when it runs
        return y

    with pytest.raises(tl.errors.InvalidArgumentError, match="shape"):
        h(tl.constant([2.0, 3.0]))

    @tl.function
    def k(x):
        @tl.custom_gradient
        def double(v):
            return v * 2.0, lambda dy: dy * 2.0

        y = double(x)
        y.set_shape([2])  # the shape it has: nothing to declare (as TensorFlow's merge)
        y.set_shape([3])  # not a callback's result: its shape is inferred
        return y

    with pytest.raises(tl.errors.InvalidArgumentError, match="set_shape"):
        k(tl.constant([2.0, 3.0]))


def test_custom_gradient_eager():
    @tl.custom_gradient
    def clip_grad(x):
        def grad(dy):
            return tl.clip_by_value(dy, -0.5, 0.5)

        return x * 1.0, grad

    x = tl.constant([1.0, 2.0])
    with tl.GradientTape() as t:
        t.watch(x)
        y = tl.reduce_sum(clip_grad(x) * 3.0)
    close(t.gradient(y, x), [0.5, 0.5])


def test_op_table_is_complete():
    from tensorlift import _native

    names = set(_native.op_names())
    import glob
    import os
    import re

    # Every module of the package (ops built on the table live in several).
    package = os.path.dirname(tl.__file__)
    src = "".join(open(f).read() for f in sorted(glob.glob(os.path.join(package, "*.py"))))

    used = set(re.findall(r'(?:apply|_unary|_binary|_reduce|binary)\("([a-z_0-9]+)"', src))
    assert used <= names, used - names
    assert names <= used, names - used


def test_package_has_the_public_names():
    for name in ["function", "constant", "Tensor", "TensorSpec", "GradientTape", "custom_gradient",
                 "numpy_function", "py_func", "py_function", "while_loop", "cond", "switch_case",
                 "float32", "int32", "bool", "complex64", "string", "reduce_sum", "gather", "concat"]:
        assert hasattr(tl, name), name
    assert tl.math.log is tl.log
    assert tl.linalg.matmul is tl.matmul
    assert tl.compat.v1.py_func is tl.py_func
    assert issubclass(tl.errors.JitCompileError, tl.errors.InvalidArgumentError)
    for e in ["InvalidArgumentError", "OutOfRangeError", "ResourceExhaustedError", "UnimplementedError",
              "UnknownError", "NotFoundError"]:
        assert issubclass(getattr(tl.errors, e), tl.errors.OpError)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


def test_type_stubs_cover_the_public_surface():
    import ast
    import pathlib
    import types

    stub = pathlib.Path(tl.__file__).with_name("__init__.pyi")
    assert stub.with_name("py.typed").exists()
    tree = ast.parse(stub.read_text())
    declared = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            declared.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            declared.add(node.target.id)
        elif isinstance(node, ast.ImportFrom):
            declared.update(a.asname or a.name for a in node.names)
    public = {n for n, v in vars(tl).items() if not n.startswith("_")}
    missing = {n for n in public if n not in declared and not isinstance(getattr(tl, n), types.ModuleType)}
    assert not missing, missing


@pytest.mark.parametrize("jit", BOTH)
def test_blocked_callbacks_of_parallel_calls_run_at_once(jit):
    """Two Python threads call one function; each call's callback waits for
    the other's. A call that held the GIL (or a lock) outside its callback
    would deadlock here: the barrier times out instead."""
    barrier = threading.Barrier(2, timeout=30)

    def meet(v):
        barrier.wait()
        return v + 1

    f = tl.function(lambda x: tl.numpy_function(meet, [x * 2.0], tl.float32), jit_compile=jit)
    out, errors = {}, []

    def work(k):
        try:
            out[k] = float(f(tl.constant(float(k))))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert out == {1: 3.0, 2: 5.0}


@pytest.mark.parametrize("jit", BOTH)
def test_callback_dtypes_complex_bool_string(jit):
    def body(c, b):
        return (c * 2j).astype(np.complex64), ~b, np.array([b"ab", b"c"], dtype=object)

    @tl.function(jit_compile=jit)
    def f(c, b):
        return tl.numpy_function(body, [c, b], [tl.complex64, tl.bool, tl.string])

    c = np.array([1 + 1j, 2], np.complex64)
    b = np.array([True, False])
    z, nb, s = f(c, b)
    np.testing.assert_array_equal(z.numpy(), c * 2j)
    np.testing.assert_array_equal(nb.numpy(), ~b)
    assert list(s.numpy()) == [b"ab", b"c"]


@pytest.mark.parametrize("jit", BOTH)
def test_callbacks_without_inputs_or_outputs_and_effects(jit):
    calls = []

    def tick():
        calls.append(1)
        return np.float32(len(calls))

    def note(v):
        calls.append(float(v))

    @tl.function(jit_compile=jit)
    def f(x):
        a = tl.numpy_function(tick, [], tl.float32)  # no inputs
        tl.numpy_function(note, [x], [])  # no outputs: kept, it is stateful
        return x + a

    before = len(calls)
    close(f(tl.constant(10.0)), 10.0 + before + 1)
    assert calls[before:] == [1, 10.0]


@pytest.mark.parametrize("jit", BOTH)
def test_stateless_calls_merge_and_stateful_ones_do_not(jit):
    seen = []

    def body(v):
        seen.append(1)
        return v * 2

    def make(stateful):
        @tl.function(jit_compile=jit)
        def f(x):
            a = tl.numpy_function(body, [x], tl.float32, stateful=stateful)
            b = tl.numpy_function(body, [x], tl.float32, stateful=stateful)
            return a + b

        return f

    for stateful, expected in [(False, 1), (True, 2)]:
        seen.clear()
        close(make(stateful)(tl.constant(1.0)), 4.0)
        assert len(seen) == expected, (stateful, seen)


@pytest.mark.parametrize("jit", BOTH)
def test_wrong_return_count_names_it(jit):
    f = tl.function(lambda x: tl.numpy_function(lambda v: (v, v, v), [x], [tl.float32, tl.float32]),
                    jit_compile=jit)
    with pytest.raises(tl.errors.InvalidArgumentError, match="3|three"):
        f(tl.constant(1.0))


def test_callbacks_are_released_with_their_function():
    import gc
    import weakref

    class Body:
        def __call__(self, v):
            return v

    body = Body()
    ref = weakref.ref(body)

    @tl.function(jit_compile=True)
    def f(x):
        return tl.numpy_function(body, [x], tl.float32)

    f(tl.constant(1.0))
    del body, f
    gc.collect()
    assert ref() is None


# --- the seed pages' examples, verbatim except for the import ------------------


def test_seed_page_numpy_function_example():
    """../shared/seeds/004 (tf.numpy_function)."""
    tf = tl

    def my_numpy_func(x):
        # x will be a numpy array with the contents of the input to the
        # tf.function
        return np.sinh(x)

    @tf.function(input_signature=[tf.TensorSpec(None, tf.float32)])
    def tf_function(input):
        y = tf.numpy_function(my_numpy_func, [input], tf.float32)
        return y * y

    r = tf_function(tf.constant(1.))
    assert r.shape == () and r.dtype == tf.float32
    close(r, 1.3810978)
    close(tf_function(tf.constant([1., 2.])), np.sinh([1.0, 2.0]) ** 2, 1e-5)


def test_seed_page_py_func_migration_example():
    """../shared/seeds/000 (tf.compat.v1.py_func): before and after."""
    tf = tl

    def fn_using_numpy(x):
        x[0] = 0.
        return x

    c = tf.constant([1., 2.])
    before = tf.compat.v1.py_func(fn_using_numpy, inp=[c], Tout=tf.float32, stateful=False)
    after = tf.numpy_function(fn_using_numpy, inp=[c], Tout=tf.float32)
    for r in (before, after):
        assert r.shape == (2,) and r.dtype == tf.float32
        close(r, [0.0, 2.0])
    close(c, [1.0, 2.0])  # the callback's write did not reach the constant


def test_seed_page_py_func_example_in_a_function():
    """../shared/seeds/000-002: my_func(np.sinh) through py_func; the
    placeholder of the TF1 page becomes a tl.function input."""
    tf = tl

    def my_func(x):
        # x will be a numpy array with the contents of the placeholder below
        return np.sinh(x)

    f = tf.function(lambda input: tf.compat.v1.py_func(my_func, [input], tf.float32), jit_compile=True)
    close(f(np.array([0.5, 1.0], np.float32)), np.sinh([0.5, 1.0]))
    g = tf.function(lambda input: tf.py_func(my_func, [input], tf.float32))
    close(g(np.array([0.5], np.float32)), np.sinh([0.5]))


def test_numpy_interop_without_copies_where_safe():
    t = tl.constant(np.arange(6, dtype=np.float32).reshape(2, 3))
    v = np.asarray(t)
    w = np.asarray(t)
    assert np.shares_memory(v, w)  # both views of the tensor's buffer
    assert not v.flags.writeable
    with pytest.raises(ValueError):
        v[0, 0] = 5.0
    a = t.numpy()
    a[0, 0] = 5.0  # a copy, the caller's to change
    assert float(t[0, 0]) == 0.0
    b = np.array(t)
    assert b.flags.writeable and not np.shares_memory(b, v)
    del t
    close(v, np.arange(6).reshape(2, 3))  # the view keeps the buffer alive
    assert np.asarray(tl.constant([True, False])).tolist() == [True, False]
