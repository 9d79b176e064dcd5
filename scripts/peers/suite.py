"""Issue 17's broad suite on jax.jit (XLA), mirroring benches/suite.rs and
benches/workloads/suite.rs: the same programs on the same inputs (the
generators below are the Rust ones), timed the way criterion times ours:
10 samples of k calls each (k chosen so a sample lasts about 0.3 s), the
median and the best of the per-call means of the samples, with the outputs
dropped at once (`dropped`) or held until the sample ends (`kept`); and
5 fresh functions' `lower().compile()` (`compile`) and first call
(`first_call`: trace, compile and run). Prints one line per workload and
its checksum (the sum of every output element and of their magnitudes,
in f64; benches/suite.rs
writes ours to target/suite/checksums.json), and with --json PATH writes
every figure for scripts/suite_table.py.

    /tmp/peers/bin/python scripts/peers/suite.py [--json PATH] [FILTER ...]
"""
import json
import math
import statistics
import sys
import time

import numpy as np
import jax
import jax.numpy as jnp
from jax import lax

# Without it JAX turns every float64 array into float32 (silently), and the
# f64 workload would time XLA on f32. Python scalars stay weakly typed, so
# the f32 and int32 workloads keep their dtypes.
jax.config.update("jax_enable_x64", True)


def data(n, seed):
    """Benches/workloads' `data`: in f32 arithmetic, as the Rust code."""
    i = np.arange(n, dtype=np.uint64)
    h = ((i * np.uint64(2654435761) + np.uint64(seed)) & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    return h.astype(np.float32) / np.float32(4294967295.0) * np.float32(6.0) - np.float32(3.0)


def tensor(dims, seed):
    return data(math.prod(dims), seed).reshape(dims)


def ints(dims, seed, lo, span):
    i = np.arange(math.prod(dims), dtype=np.uint64)
    h = (i * np.uint64(2654435761) + np.uint64(seed)) & np.uint64(0xFFFFFFFF)
    return (lo + (h % np.uint64(span)).astype(np.int64)).astype(np.int32).reshape(dims)


def arith(x):
    return ((x * 1.5 + 0.25) * x - 0.75) * 0.5 + x


def transc(x):
    return jnp.exp(-x * x) * jnp.tanh(x) + jnp.sqrt(jnp.abs(x))


def softmax(x, axis=1):
    e = jnp.exp(x - jnp.max(x, axis=axis, keepdims=True))
    return e / jnp.sum(e, axis=axis, keepdims=True)


def gelu(x):
    c = math.sqrt(2.0 / math.pi)
    return x * 0.5 * (jnp.tanh((x + x * x * x * 0.044715) * c) + 1.0)


def layer_norm(x, gamma, beta):
    n = 1.0 / 1024.0
    xc = x - jnp.sum(x, axis=-1, keepdims=True) * n
    var = jnp.sum(xc * xc, axis=-1, keepdims=True) * n
    return xc * lax.rsqrt(var + 1e-5) * gamma + beta


def attention_bshd(q, k, v):
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) * (1.0 / 8.0)
    return jnp.einsum("bhqk,bkhd->bqhd", softmax(s, -1), v)


def attention_bhsd(q, k, v):
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) * (1.0 / 8.0)
    return jnp.einsum("bhqk,bhkd->bhqd", softmax(s, -1), v)


def embedding_bag(table, ids):
    return jnp.take(table, ids, axis=0).sum(axis=1)


def scatter_loop(table, ids, ups):
    return lax.fori_loop(0, 64, lambda i, t: t.at[ids[i]].add(ups[i]), table)


def int_div(x, y):
    return lax.div(x * 3 + y, jnp.int32(7)) + lax.rem(x, y)


def mlp(x, w1, b1, w2, b2):
    return jnp.maximum(x @ w1 + b1, 0.0) @ w2 + b2


def mlp_inputs():
    return [tensor(s, seed) for s, seed in [((256, 512), 3), ((512, 512), 4), ((512,), 5), ((512, 512), 6), ((512,), 7)]]


def mlp_xent(x, labels, w1, b1, w2, b2):
    z = mlp(x, w1, b1, w2, b2)
    s = z - jnp.max(z, axis=1, keepdims=True)
    logp = s - jnp.log(jnp.sum(jnp.exp(s), axis=1, keepdims=True))
    return jnp.sum(logp * labels) * (-1.0 / 256.0)


def mlp_xent_inputs():
    x, w1, b1, w2, b2 = mlp_inputs()
    labels = np.zeros((256, 512), np.float32)
    labels[np.arange(256), (7 * np.arange(256)) % 512] = 1.0
    return [x, labels, w1 * np.float32(0.02), b1, w2 * np.float32(0.02), b2]


def rnn(h, w, u):
    return lax.fori_loop(0, 256, lambda _, h: jnp.tanh(h @ w + u), h)


def rnn_inputs():
    return [tensor((64, 512), 1), tensor((512, 512), 5) * np.float32(0.02), tensor((64, 512), 7)]


def rnn_loss(h, w, u):
    return jnp.sum(jnp.square(rnn(h, w, u)))


def layer_norm_loss(x, gamma, beta, dy):
    n = 1.0 / 1024.0
    xc = x - jnp.sum(x, axis=-1, keepdims=True) * n
    var = jnp.sum(jnp.square(xc), axis=-1, keepdims=True) * n
    y = xc * lax.rsqrt(var + 1e-5) * gamma + beta
    return jnp.sum(y * dy)


def layer_norm_grad_inputs():
    f = np.float32
    return [tensor((4096, 1024), 11), f(1.0) + tensor((1024,), 12) * f(0.1),
            f(0.0) + tensor((1024,), 13) * f(0.1), tensor((4096, 1024), 14)]


def power(a, v):
    def cond(c):
        i, err, _ = c
        return jnp.logical_and(err > 1e-10, i < 1000)

    def body(c):
        i, _, v = c
        w = a @ v
        nxt = w / jnp.sqrt(jnp.sum(w * w))
        d = nxt - v
        return i + 1, jnp.sum(d * d), nxt

    i, _, v = lax.while_loop(cond, body, (jnp.int32(0), jnp.float32(1.0), v))
    return v, i


def power_inputs():
    b = tensor((512, 512), 3)
    a = ((b + b.T) * np.float32(0.5) / np.float32(512)).astype(np.float32)
    return [a, np.ones((512, 1), np.float32)]


# name, a factory of a fresh Python function (so jax.jit's cache misses), inputs.
WORKLOADS = [
    ("arith/1M", lambda: lambda x: arith(x), lambda: [tensor((1 << 20,), 1)]),
    ("arith/16M", lambda: lambda x: arith(x), lambda: [tensor((1 << 24,), 1)]),
    ("arith_f64/1M", lambda: lambda x: arith(x), lambda: [tensor((1 << 20,), 1).astype(np.float64)]),
    ("transc/1M", lambda: lambda x: transc(x), lambda: [tensor((1 << 20,), 1)]),
    ("gelu/4096x1024", lambda: lambda x: gelu(x), lambda: [tensor((4096, 1024), 2)]),
    ("softmax/4096x1024", lambda: lambda x: softmax(x), lambda: [tensor((4096, 1024), 2)]),
    ("layer_norm/4096x1024", lambda: lambda *a: layer_norm(*a),
     lambda: [tensor((4096, 1024), 11), tensor((1024,), 12), tensor((1024,), 13)]),
    ("sum_axis0/4096x1024", lambda: lambda x: jnp.sum(x, axis=0), lambda: [tensor((4096, 1024), 2)]),
    ("sum_axis1/256x256x64", lambda: lambda x: jnp.sum(x, axis=1), lambda: [tensor((256, 256, 64), 2)]),
    ("transpose/4096x1024", lambda: lambda x: x.T, lambda: [tensor((4096, 1024), 2)]),
    ("transpose_021/64x256x256", lambda: lambda x: jnp.transpose(x, (0, 2, 1)), lambda: [tensor((64, 256, 256), 2)]),
    ("int_div/1M", lambda: lambda *a: int_div(*a),
     lambda: [ints((1 << 20,), 1, 0, 1_000_000), ints((1 << 20,), 2, 1, 100)]),
    ("embedding_bag/4096x16x256", lambda: lambda *a: embedding_bag(*a),
     lambda: [tensor((32768, 256), 4), ints((4096, 16), 5, 0, 32768)]),
    ("scatter_loop/64x4096x1M", lambda: lambda *a: scatter_loop(*a),
     lambda: [tensor((1 << 20,), 6), ints((64, 4096), 7, 0, 1 << 20), tensor((64, 4096), 8)]),
    ("attention_bshd/8x256x8x64", lambda: lambda *a: attention_bshd(*a),
     lambda: [tensor((8, 256, 8, 64), s) for s in (21, 22, 23)]),
    ("attention_bhsd/8x8x256x64", lambda: lambda *a: attention_bhsd(*a),
     lambda: [tensor((8, 8, 256, 64), s) for s in (21, 22, 23)]),
    ("mlp/256x512x512", lambda: lambda *a: mlp(*a), mlp_inputs),
    ("mlp_grad/256x512x512", lambda: jax.grad(lambda *a: mlp_xent(*a), argnums=(2, 3, 4, 5)), mlp_xent_inputs),
    ("rnn/256x64x512", lambda: lambda *a: rnn(*a), rnn_inputs),
    ("rnn_grad/256x64x512", lambda: jax.grad(lambda *a: rnn_loss(*a), argnums=(0, 1, 2)), rnn_inputs),
    ("layer_norm_grad/4096x1024", lambda: jax.grad(lambda *a: layer_norm_loss(*a), argnums=(0, 1, 2)),
     layer_norm_grad_inputs),
    ("power/512x512", lambda: lambda *a: power(*a), power_inputs),
    ("fori_scalar/100k", lambda: lambda x: lax.fori_loop(0, 100_000, lambda _, c: c * 0.999 + 1.0, x),
     lambda: [np.float32(0.0)]),
]


def block(out):
    return jax.block_until_ready(out)


def samples(call, keep, n=10, target=0.3):
    t = time.perf_counter()
    block(call())
    single = time.perf_counter() - t
    k = max(1, round(target / max(single, 1e-6)))
    means = []
    for _ in range(n):
        held = []
        t = time.perf_counter()
        for _ in range(k):
            y = block(call())
            if keep:
                held.append(y)
            del y
        means.append((time.perf_counter() - t) / k)
        del held
    return {"median": statistics.median(means), "best": min(means), "calls": k}


def fresh(times):
    return {"median": statistics.median(times), "best": min(times)}


def checksum(out):
    """The sum of every element and the sum of their magnitudes, in f64."""
    leaves = [np.asarray(leaf, dtype=np.float64) for leaf in jax.tree_util.tree_leaves(out)]
    return [float(sum(a.sum() for a in leaves)), float(sum(np.abs(a).sum() for a in leaves))]


def main():
    args = sys.argv[1:]
    path = None
    if "--json" in args:
        i = args.index("--json")
        path = args[i + 1]
        del args[i:i + 2]
    results = {"jax": jax.__version__, "workloads": {}}
    for name, factory, inputs in WORKLOADS:
        if args and not any(a in name for a in args):
            continue
        arrays = inputs()
        xs = [jnp.asarray(a) for a in arrays]
        for a, x in zip(arrays, xs):
            assert x.dtype == a.dtype, "%s: input %s became %s" % (name, a.dtype, x.dtype)
        f = jax.jit(factory())
        out = f(*xs)
        widest = max(np.dtype(a.dtype).itemsize for a in arrays)
        for leaf in jax.tree_util.tree_leaves(out):
            assert leaf.dtype.itemsize <= widest, "%s: output %s wider than its inputs" % (name, leaf.dtype)
        r = {"checksum": checksum(out)}
        r["dropped"] = samples(lambda: f(*xs), keep=False)
        r["kept"] = samples(lambda: f(*xs), keep=True)
        compile_times, first_times = [], []
        for _ in range(5):
            g = jax.jit(factory())
            t = time.perf_counter()
            g.lower(*xs).compile()
            compile_times.append(time.perf_counter() - t)
            g = jax.jit(factory())
            t = time.perf_counter()
            block(g(*xs))
            first_times.append(time.perf_counter() - t)
        r["compile"] = fresh(compile_times)
        r["first_call"] = fresh(first_times)
        results["workloads"][name] = r
        ms = lambda d: "%.3f (%.3f)" % (d["median"] * 1e3, d["best"] * 1e3)
        print("%-28s dropped %s  kept %s  compile %s  first %s ms  checksum %.6e (magnitudes %.6e)"
              % (name, ms(r["dropped"]), ms(r["kept"]), ms(r["compile"]), ms(r["first_call"]), *r["checksum"]),
              flush=True)
    if path:
        with open(path, "w") as out:
            json.dump(results, out, indent=1)


if __name__ == "__main__":
    main()
