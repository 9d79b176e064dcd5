"""The Python package beside JAX and TensorFlow (issue 16's benchmarks).

    target/python-venv/bin/python scripts/peers/python_package.py --system tl
    /tmp/peers/bin/python scripts/peers/python_package.py --system jax
    /tmp/peers/bin/python scripts/peers/python_package.py --system tf

(the peers' virtual environment: ../shared/peers/README.md). Run them in the
same minutes. Prints one JSON line per figure:

- dispatch: one call of a compiled function (x * 2 + 1) on a float32[4]
  input from Python, input already a tensor of the system (tl.Tensor,
  jax.Array, tf.Tensor) and as a NumPy array: median and best of 7 rounds
  of 2000 calls, per call.
- callback: a compiled loop of 2000 numpy_function calls (jax:
  pure_callback) on a float32[1] minus the same loop without the callback,
  per call; best of 7.
- workloads (tl only): the first round's benches/ workloads driven from
  Python (arith and transcendental 1M and 16M f32, row softmax 4096x1024),
  median of 7 calls, to put beside `cargo bench --bench jit` run in the
  same window.
"""

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402

ROUNDS = 7
CALLS = 2000
LOOP = 2000


def per_call(fn, calls=CALLS, rounds=ROUNDS):
    fn()
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t) / calls)
    return statistics.median(times), min(times)


def once(fn, rounds=ROUNDS):
    fn()
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), min(times)


def emit(system, what, median, best, unit="us"):
    scale = 1e6 if unit == "us" else 1e3
    print(json.dumps({"system": system, "what": what, "median_" + unit: round(median * scale, 3),
                      "best_" + unit: round(best * scale, 3)}), flush=True)


def cb(v):
    return v + np.float32(1)


def arith(x):
    return ((x * 1.5 + 0.25) * x - 0.75) * 0.5 + x


def run_tl():
    import tensorlift as tl

    f = tl.function(lambda x: x * 2.0 + 1.0, jit_compile=True)
    a = np.arange(4, dtype=np.float32)
    t = tl.constant(a)
    emit("tl", "dispatch, tl.Tensor input", *per_call(lambda: f(t)))
    emit("tl", "dispatch, NumPy input", *per_call(lambda: f(a)))

    def loop(with_cb):
        @tl.function(jit_compile=True)
        def g(x):
            def body(i, v):
                if not with_cb:
                    return i + 1, v + 1.0
                v2 = tl.numpy_function(cb, [v], tl.float32, stateful=False)
                v2.set_shape([1])
                return i + 1, v2

            return tl.while_loop(lambda i, v: i < LOOP, body, [tl.constant(0), x])[1]

        return g

    x1 = tl.constant(np.zeros(1, np.float32))
    with_cb, without = loop(True), loop(False)
    m1, b1 = once(lambda: with_cb(x1))
    m0, b0 = once(lambda: without(x1))
    emit("tl", "numpy_function per call (compiled loop)", (m1 - m0) / LOOP, (b1 - b0) / LOOP)

    def transc(x):
        return tl.exp(-x * x) * tl.tanh(x) + tl.sqrt(tl.abs(x))

    def softmax(x):
        e = tl.exp(x - tl.reduce_max(x, axis=-1, keepdims=True))
        return e / tl.reduce_sum(e, axis=-1, keepdims=True)

    rng = np.random.default_rng(1)
    for name, fn, shape in [("arith", arith, [1 << 20]), ("arith", arith, [1 << 24]),
                            ("transcendental", transc, [1 << 20]), ("transcendental", transc, [1 << 24]),
                            ("softmax", softmax, [4096, 1024])]:
        x = tl.constant(rng.standard_normal(shape).astype(np.float32))
        g = tl.function(fn, jit_compile=True)
        emit("tl", f"{name} {'x'.join(map(str, shape))}", *once(lambda g=g, x=x: g(x)), unit="ms")


def run_jax():
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_platforms", "cpu")
    f = jax.jit(lambda x: x * 2.0 + 1.0)
    a = np.arange(4, dtype=np.float32)
    t = jnp.asarray(a)
    emit("jax", "dispatch, jax.Array input", *per_call(lambda: f(t).block_until_ready()))
    emit("jax", "dispatch, NumPy input", *per_call(lambda: f(a).block_until_ready()))

    def loop(with_cb):
        def body(i, v):
            if with_cb:
                return jax.pure_callback(cb, jax.ShapeDtypeStruct((1,), jnp.float32), v)
            return v + 1.0

        return jax.jit(lambda x: jax.lax.fori_loop(0, LOOP, body, x))

    x1 = jnp.zeros(1, jnp.float32)
    with_cb, without = loop(True), loop(False)
    m1, b1 = once(lambda: with_cb(x1).block_until_ready())
    m0, b0 = once(lambda: without(x1).block_until_ready())
    emit("jax", "pure_callback per call (compiled loop)", (m1 - m0) / LOOP, (b1 - b0) / LOOP)


def run_tf():
    import tensorflow as tf

    f = tf.function(lambda x: x * 2.0 + 1.0, jit_compile=True)
    a = np.arange(4, dtype=np.float32)
    t = tf.constant(a)
    emit("tf", "dispatch, tf.Tensor input", *per_call(lambda: f(t), calls=500))
    emit("tf", "dispatch, NumPy input", *per_call(lambda: f(a), calls=500))

    def loop(with_cb):
        @tf.function
        def g(x):
            def body(i, v):
                v2 = tf.numpy_function(cb, [v], tf.float32, stateful=False) if with_cb else v + 1.0
                return i + 1, tf.reshape(v2, [1])

            return tf.while_loop(lambda i, v: i < LOOP, body, [tf.constant(0), x])[1]

        return g

    x1 = tf.zeros([1], tf.float32)
    with_cb, without = loop(True), loop(False)
    m1, b1 = once(lambda: with_cb(x1))
    m0, b0 = once(lambda: without(x1))
    emit("tf", "numpy_function per call (graph loop)", (m1 - m0) / LOOP, (b1 - b0) / LOOP)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--system", choices=["tl", "jax", "tf"], required=True)
    args = p.parse_args()
    {"tl": run_tl, "jax": run_jax, "tf": run_tf}[args.system]()


if __name__ == "__main__":
    main()
