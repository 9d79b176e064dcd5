"""Scaling out: a tl.function pickles and runs in another process —
multiprocessing spawn children and the worker processes of a Dask
cluster — compiled there on its first call."""

import multiprocessing
import pickle
import threading

import numpy as np
import pytest

import tensorlift as tl


@tl.function(jit_compile=True)
def module_level(x):
    """Importable: pickles by reference and is traced again where it runs."""
    return tl.numpy_function(np.sinc, [x], tl.float32) * 2.0


def _closure_function(jit=True):
    """Not importable: pickles as its graph text plus its callbacks."""
    offset = np.float32(0.5)

    @tl.function(jit_compile=jit)
    def f(x):
        y = tl.numpy_function(np.sinc, [x], tl.float32)  # by reference
        z = tl.numpy_function(lambda v: v + offset, [y], tl.float32)  # by value
        return tl.reduce_sum(z * 2.0), z

    return f


def _run_pickled(payload, x):
    """Runs in the child process: unpickles the function and calls it."""
    f = pickle.loads(payload)
    s, z = f(x)
    return s.numpy(), z.numpy(), f.jit_compile


def _expected(x):
    z = np.sinc(x) + 0.5
    return (z * 2).sum(), z


@pytest.mark.parametrize("jit", [False, True])
def test_pickle_round_trip_in_process(jit):
    f = _closure_function(jit)
    x = np.linspace(-1, 1, 7, dtype=np.float32)
    f(x)
    g = pickle.loads(pickle.dumps(f))
    s, z = g(x)
    want_s, want_z = _expected(x)
    np.testing.assert_allclose(s.numpy(), want_s, rtol=1e-5)
    np.testing.assert_allclose(z.numpy(), want_z, rtol=1e-5)
    with pytest.raises(tl.errors.InvalidArgumentError, match="not one of them"):
        g(np.zeros(3, np.float32))


def test_module_level_function_pickles_by_reference():
    data = pickle.dumps(module_level)
    assert b"module_level" in data and len(data) < 200
    assert pickle.loads(data) is module_level


def test_untraced_closure_cannot_be_pickled_and_says_why():
    f = _closure_function()
    with pytest.raises(pickle.PicklingError, match="has not been traced"):
        pickle.dumps(f)


def test_unpicklable_callback_is_an_error_naming_it():
    lock = threading.Lock()

    @tl.function
    def f(x):
        return tl.numpy_function(lambda v: (lock, v)[1], [x], tl.float32, name="locked")

    f(tl.constant([1.0]))
    with pytest.raises(pickle.PicklingError, match="locked"):
        pickle.dumps(f)


def test_runs_in_a_spawned_process():
    x = np.linspace(-1, 1, 5, dtype=np.float32)
    payloads = []
    for jit in (False, True):
        f = _closure_function(jit)
        f(x)
        payloads.append(pickle.dumps(f))
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        results = [pool.apply(_run_pickled, (p, x)) for p in payloads]
        by_ref = pool.apply(_call_module_level, (pickle.dumps(module_level), x))
    want_s, want_z = _expected(x)
    for (s, z, jit), expect_jit in zip(results, (False, True)):
        np.testing.assert_allclose(s, want_s, rtol=1e-5)
        np.testing.assert_allclose(z, want_z, rtol=1e-5)
        assert jit == expect_jit
    np.testing.assert_allclose(by_ref, np.sinc(x) * 2, rtol=1e-5)


def _call_module_level(payload, x):
    return pickle.loads(payload)(x).numpy()


def test_dask_workers_run_a_compiled_function_over_partitions():
    dask = pytest.importorskip("dask")
    distributed = pytest.importorskip("distributed")
    import dask.array as da

    f = _closure_function(jit=True)
    x = np.linspace(-2, 2, 64, dtype=np.float32)
    f(x[:16])  # traced for the partitions' shape: pickled as its graph

    def block(b):
        return f(b)[1].numpy()

    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        arr = da.from_array(x, chunks=16)
        got = arr.map_blocks(block, dtype=np.float32).compute()
        pids = client.run(lambda: __import__("os").getpid())
    assert len(set(pids.values())) == 2
    np.testing.assert_allclose(got, np.sinc(x) + 0.5, rtol=1e-5)
    del dask


def test_pickled_function_with_callbacks_inside_regions():
    """Callbacks inside a custom gradient's regions (a py_function and its
    gradient) are bound in the other process too."""

    def cube(v):
        return v * v * v

    @tl.function
    def g(x):
        with tl.GradientTape() as t:
            t.watch(x)
            y = tl.py_function(cube, [x], tl.float32)
            y.set_shape([2])
            z = tl.reduce_sum(y * 2.0)
        return z, t.gradient(z, x)

    x = tl.constant([2.0, 3.0])
    g(x)
    z, d = pickle.loads(pickle.dumps(g))(x)
    np.testing.assert_allclose(z.numpy(), 70.0)
    np.testing.assert_allclose(d.numpy(), [24.0, 54.0])
