"""Control flow on the peers (JAX/XLA and TensorFlow+XLA), the workloads of
benches/control_flow.rs: scalar-body fori_loops of 100,000 steps (an affine
f32 update, and an int32 counter sum whose body is one add), a 256-step
RNN cell over a (64, 512) state, a power iteration on a 512x512 matrix to
convergence, and the compile time of each (first call minus a warm call).

    /tmp/peers/bin/python scripts/peers/control_flow.py

Prints one line per workload: best of 7 and median (ms), compile (ms).
Run it in the same window as `cargo bench --bench control_flow`.
"""
import os, time, statistics
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np

STEPS = 100_000


def data(n, seed):
    i = np.arange(n, dtype=np.uint64)
    v = ((i * np.uint64(2654435761) + np.uint64(seed)) & np.uint64(0xFFFFFFFF)).astype(np.float64)
    return (v / 0xFFFFFFFF * 6.0 - 3.0).astype(np.float32)


def tensor(dims, seed):
    return data(int(np.prod(dims)), seed).reshape(dims)


def timed(fn, reps=7):
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return min(ts) * 1e3, statistics.median(ts) * 1e3


def first_call(make, call):
    """Compile time: the first call of a fresh jit minus a warm call."""
    f = make()
    t = time.perf_counter(); call(f); first = time.perf_counter() - t
    warm = min(timed(lambda: call(f), reps=3)) / 1e3
    return (first - warm) * 1e3


w = tensor([512, 512], 5) * np.float32(0.02)
h0, u = tensor([64, 512], 1), tensor([64, 512], 7)
b = tensor([512, 512], 3)
a = ((b + b.T) * np.float32(0.5) / np.float32(512)).astype(np.float32)
v0 = np.ones((512, 1), np.float32)

import jax, jax.numpy as jnp
from jax import lax


def jax_scalar():
    return jax.jit(lambda x: lax.fori_loop(0, STEPS, lambda i, c: c * 0.999 + 1.0, x))


def jax_counter():
    return jax.jit(lambda x: lax.fori_loop(0, STEPS, lambda i, c: c + i, x))


def jax_rnn():
    return jax.jit(lambda h, w, u: lax.fori_loop(0, 256, lambda i, c: jnp.tanh(c @ w + u), h))


def jax_power():
    def run(a, v):
        def cond(c):
            i, err, _ = c
            return jnp.logical_and(err > 1e-10, i < 1000)
        def body(c):
            i, _, v = c
            w_ = a @ v
            nxt = w_ / jnp.sqrt(jnp.sum(w_ * w_))
            d = nxt - v
            return i + 1, jnp.sum(d * d), nxt
        i, _, v = lax.while_loop(cond, body, (jnp.int32(0), jnp.float32(1.0), v))
        return v, i
    return jax.jit(run)


jx = jnp.float32(0.0)
jargs_rnn = (jnp.asarray(h0), jnp.asarray(w), jnp.asarray(u))
jargs_pow = (jnp.asarray(a), jnp.asarray(v0))
cases = [
    ("fori_scalar_100k", jax_scalar, lambda f: f(jx).block_until_ready()),
    ("fori_counter_100k", jax_counter, lambda f: f(jnp.int32(0)).block_until_ready()),
    ("rnn_256x64x512", jax_rnn, lambda f: f(*jargs_rnn).block_until_ready()),
    ("power_512", jax_power, lambda f: f(*jargs_pow)[0].block_until_ready()),
]
for name, make, call in cases:
    compile_ms = first_call(make, call)
    f = make(); call(f)
    best, med = timed(lambda: call(f))
    extra = ""
    if name.startswith("fori_"):
        extra = f"  ({best * 1e6 / STEPS:.1f} ns/iteration)"
    if name == "power_512":
        extra = f"  ({int(f(*jargs_pow)[1])} iterations)"
    print(f"jax {jax.__version__:8} {name:18} best {best:9.3f} ms  median {med:9.3f} ms  compile {compile_ms:8.1f} ms{extra}")

import tensorflow as tf


def tf_scalar():
    @tf.function(jit_compile=True)
    def f(x):
        return tf.while_loop(lambda i, c: i < STEPS, lambda i, c: (i + 1, c * 0.999 + 1.0), (0, x))[1]
    return f


def tf_counter():
    @tf.function(jit_compile=True)
    def f(x):
        return tf.while_loop(lambda i, c: i < STEPS, lambda i, c: (i + 1, c + i), (0, x))[1]
    return f


def tf_rnn():
    @tf.function(jit_compile=True)
    def f(h, w, u):
        return tf.while_loop(lambda i, c: i < 256, lambda i, c: (i + 1, tf.tanh(c @ w + u)), (0, h))[1]
    return f


tx = tf.constant(0.0)
targs = (tf.constant(h0), tf.constant(w), tf.constant(u))
for name, make, call in [
    ("fori_scalar_100k", tf_scalar, lambda f: f(tx).numpy()),
    ("fori_counter_100k", tf_counter, lambda f: f(tf.constant(0)).numpy()),
    ("rnn_256x64x512", tf_rnn, lambda f: f(*targs).numpy()),
]:
    compile_ms = first_call(make, call)
    f = make(); call(f)
    best, med = timed(lambda: call(f))
    print(f"tf+xla {tf.__version__:6} {name:18} best {best:9.3f} ms  median {med:9.3f} ms  compile {compile_ms:8.1f} ms")
