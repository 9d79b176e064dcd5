"""Compiled gradients on the peers (JAX/XLA and TensorFlow+XLA), the
workloads of benches/autodiff.rs (benches/workloads/mod.rs), f32, same
shapes and inputs:

  mlp_xent_256x512x512   mean softmax cross-entropy of the two-layer MLP's
                         logits against one-hot labels; d/d(w1, b1, w2, b2)
  layer_norm_4096x1024   sum((layer_norm(x) * gamma + beta) * dy) over the
                         last axis; d/d(x, gamma, beta)
  rnn_256x64x512         sum(h²) of h = tanh(h @ w + u) after 256 steps;
                         d/d(h0, w, u)

    /tmp/peers/bin/python scripts/peers/autodiff.py [--only NAME] [--no-tf]

prints, per peer and workload, the best and median of 9 calls after two
warm-up calls and the compile time (JAX: `jax.jit(jax.grad(...)).lower(...)
.compile()` of a fresh function, median of 3; TF: first call minus a warm
call, as control_flow.py measures). Run it in the same window as
`cargo bench --bench autodiff`. NAME is mlp, layer_norm or rnn.

    /tmp/peers/bin/python scripts/peers/autodiff.py --only rnn --mem [--peer tf]

compiles and runs one gradient once (JAX unless --peer tf) and prints the
resident set before, the peak (VmHWM) after compiling and the peak during
the call (VmHWM reset through /proc/self/clear_refs; for TF, which compiles
on the first call, that includes compiling); compare with
`cargo run --release --example grad_workloads -- rnn` (or run both under
`/usr/bin/time -v`).

    cargo run --release --example grad_workloads -- save /tmp/grads
    /tmp/peers/bin/python scripts/peers/autodiff.py --check /tmp/grads

compares tensorlift's gradients (and the inputs it used) with JAX's on the
same inputs, and both with JAX in f64: the max abs difference, relative to
the gradient's largest magnitude (and the RNN of 8 steps too: after 256,
the gradient with respect to h0 underflows to 0).
"""
import argparse, os, statistics, sys, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np

WORKLOADS = {
    "mlp": "mlp_xent_256x512x512",
    "layer_norm": "layer_norm_4096x1024",
    "rnn": "rnn_256x64x512",
}
WRT = {"mlp": (2, 3, 4, 5), "layer_norm": (0, 1, 2), "rnn": (0, 1, 2), "rnn8": (0, 1, 2)}


def data(n, seed):
    """workloads::data bit for bit (its arithmetic is f32)."""
    f = np.float32
    i = np.arange(n, dtype=np.uint64)
    v = ((i * np.uint64(2654435761) + np.uint64(seed)) & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    return v.astype(f) / f(0xFFFFFFFF) * f(6.0) - f(3.0)


def tensor(dims, seed):
    return data(int(np.prod(dims)), seed).reshape(dims)


def inputs(name):
    """The inputs of benches/workloads/mod.rs, in argument order."""
    f = np.float32
    if name == "mlp":
        labels = np.zeros((256, 512), f)
        labels[np.arange(256), (7 * np.arange(256)) % 512] = 1.0
        return [tensor([256, 512], 3), labels, tensor([512, 512], 4) * f(0.02),
                tensor([512], 5), tensor([512, 512], 6) * f(0.02), tensor([512], 7)]
    if name == "layer_norm":
        return [tensor([4096, 1024], 11), f(1.0) + tensor([1024], 12) * f(0.1),
                f(0.0) + tensor([1024], 13) * f(0.1), tensor([4096, 1024], 14)]
    if name in ("rnn", "rnn8"):
        return [tensor([64, 512], 1), tensor([512, 512], 5) * f(0.02), tensor([64, 512], 7)]
    raise KeyError(name)


def status_mib(field):
    with open("/proc/self/status") as s:
        for line in s:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def timed(fn, reps=9):
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return min(ts) * 1e3, statistics.median(ts) * 1e3


# ---- JAX -------------------------------------------------------------------

def jax_losses():
    """Fresh loss functions (fresh closures: nothing cached across calls)."""
    import jax.numpy as jnp
    from jax import lax

    def mlp_xent(x, labels, w1, b1, w2, b2):
        z = jnp.maximum(x @ w1 + b1, 0.0) @ w2 + b2
        s = z - jnp.max(z, axis=1, keepdims=True)
        logp = s - jnp.log(jnp.sum(jnp.exp(s), axis=1, keepdims=True))
        return jnp.sum(logp * labels) * (-1.0 / 256.0)

    def layer_norm(x, gamma, beta, dy):
        n = 1.0 / 1024.0
        xc = x - jnp.sum(x, axis=-1, keepdims=True) * n
        var = jnp.sum(jnp.square(xc), axis=-1, keepdims=True) * n
        y = xc * lax.rsqrt(var + 1e-5) * gamma + beta
        return jnp.sum(y * dy)

    def rnn(h, w, u, steps=256):
        h = lax.fori_loop(0, steps, lambda i, c: jnp.tanh(c @ w + u), h)
        return jnp.sum(jnp.square(h))

    def rnn8(h, w, u):
        return rnn(h, w, u, 8)

    return {"mlp": mlp_xent, "layer_norm": layer_norm, "rnn": rnn, "rnn8": rnn8}


def jax_grad(name):
    import jax
    return jax.jit(jax.grad(jax_losses()[name], argnums=WRT[name]))


def jax_compile_ms(name, args):
    import jax
    ts = []
    for _ in range(3):
        jax.clear_caches()
        t = time.perf_counter()
        jax_grad(name).lower(*args).compile()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3


def run_jax(names):
    import jax, jax.numpy as jnp
    for name in names:
        args = [jnp.asarray(a) for a in inputs(name)]
        compile_ms = jax_compile_ms(name, args)
        f = jax_grad(name).lower(*args).compile()
        call = lambda: jax.block_until_ready(f(*args))
        call(); call()
        best, med = timed(call)
        print(f"jax {jax.__version__:8} {WORKLOADS[name]:22} best {best:9.3f} ms  median {med:9.3f} ms  compile {compile_ms:8.1f} ms", flush=True)


# ---- TensorFlow ------------------------------------------------------------

def tf_grad(name):
    import tensorflow as tf

    def mlp_xent(x, labels, w1, b1, w2, b2):
        z = tf.matmul(tf.maximum(tf.matmul(x, w1) + b1, 0.0), w2) + b2
        s = z - tf.reduce_max(z, axis=1, keepdims=True)
        logp = s - tf.math.log(tf.reduce_sum(tf.exp(s), axis=1, keepdims=True))
        return tf.reduce_sum(logp * labels) * (-1.0 / 256.0)

    def layer_norm(x, gamma, beta, dy):
        n = 1.0 / 1024.0
        xc = x - tf.reduce_sum(x, axis=-1, keepdims=True) * n
        var = tf.reduce_sum(tf.square(xc), axis=-1, keepdims=True) * n
        y = xc * tf.math.rsqrt(var + 1e-5) * gamma + beta
        return tf.reduce_sum(y * dy)

    def rnn(h, w, u):
        h = tf.while_loop(lambda i, c: i < 256, lambda i, c: (i + 1, tf.tanh(c @ w + u)),
                          (0, h), maximum_iterations=256)[1]
        return tf.reduce_sum(tf.square(h))

    loss = {"mlp": mlp_xent, "layer_norm": layer_norm, "rnn": rnn}[name]
    wrt = WRT[name]

    @tf.function(jit_compile=True)
    def g(*args):
        with tf.GradientTape() as tape:
            for i in wrt:
                tape.watch(args[i])
            v = loss(*args)
        return tape.gradient(v, [args[i] for i in wrt])
    return g


def run_tf(names):
    import tensorflow as tf
    for name in names:
        args = [tf.constant(a) for a in inputs(name)]
        call_of = lambda f: [t.numpy() for t in f(*args)]
        try:
            f = tf_grad(name)
            t = time.perf_counter(); call_of(f); first = time.perf_counter() - t
            warm = min(timed(lambda: call_of(f), reps=3)) / 1e3
            call_of(f)
            best, med = timed(lambda: call_of(f))
        except Exception as e:  # a workload TF+XLA cannot compile
            print(f"tf+xla {tf.__version__:6} {WORKLOADS[name]:22} failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            continue
        print(f"tf+xla {tf.__version__:6} {WORKLOADS[name]:22} best {best:9.3f} ms  median {med:9.3f} ms  compile {(first - warm) * 1e3:8.1f} ms", flush=True)


# ---- peak memory, correctness --------------------------------------------------

def reset_peak():
    """Resets VmHWM to the current RSS (Linux); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def mem(name, peer):
    if peer == "jax":
        import jax, jax.numpy as jnp
        args = [jnp.asarray(a) for a in inputs(name)]
        jax.block_until_ready(args)
        before = status_mib("VmRSS")
        t = time.perf_counter()
        f = jax_grad(name).lower(*args).compile()
        compiled = time.perf_counter() - t
        peak_compile = status_mib("VmHWM")
        reset = reset_peak()
        jax.block_until_ready(f(*args))
    else:
        # TF compiles on the first call: the call's peak includes compiling.
        import tensorflow as tf
        args = [tf.constant(a) for a in inputs(name)]
        before = status_mib("VmRSS")
        t = time.perf_counter()
        f = tf_grad(name)
        compiled = peak_compile = float("nan")
        reset = reset_peak()
        [g.numpy() for g in f(*args)]
    total = time.perf_counter() - t
    print(f"{peer} {name} grad: compile {compiled * 1e3:.1f} ms, compile+first call {total * 1e3:.1f} ms; "
          f"RSS before {before:.1f} MiB, peak (VmHWM) after compiling {peak_compile:.1f} MiB, "
          f"{'during the call' if reset else 'overall'} {status_mib('VmHWM'):.1f} MiB")


def check(d, names):
    import jax
    jax.config.update("jax_enable_x64", True)
    worst = 0.0
    if "rnn" in names:
        # After 256 steps the gradient with respect to h0 underflows to 0;
        # 8 steps check it.
        names = names + ["rnn8"]
    for name in names:
        args = inputs(name)
        saved = [np.load(f"{d}/{name}_in{i}.npy") for i in range(len(args))]
        gen = max(float(np.max(np.abs(a - s))) for a, s in zip(args, saved))
        print(f"{name}: inputs as generated here vs tensorlift's: max abs diff {gen:.3g}")
        ours = [np.load(f"{d}/{name}_grad{k}.npy") for k in range(len(WRT[name]))]
        g32 = [np.asarray(g) for g in jax_grad(name)(*saved)]
        g64 = [np.asarray(g) for g in jax_grad(name)(*[s.astype(np.float64) for s in saved])]
        for k, i in enumerate(WRT[name]):
            ref = g64[k]
            scale = float(np.max(np.abs(ref)))
            d_jax = float(np.max(np.abs(ours[k].astype(np.float64) - g32[k])))
            d_ours64 = float(np.max(np.abs(ours[k] - ref)))
            d_jax64 = float(np.max(np.abs(g32[k] - ref)))
            assert ours[k].shape == ref.shape and ours[k].dtype == np.float32, (ours[k].shape, ours[k].dtype)
            worst = max(worst, d_jax / scale)
            print(f"  d/d arg {i} {str(ref.shape):12} max|g| {scale:9.3g}  |ours - jax32| {d_jax:9.3g} "
                  f"({d_jax / scale:8.2g} rel)  |ours - f64| {d_ours64:9.3g}  |jax32 - f64| {d_jax64:9.3g}")
    print(f"worst |ours - jax32| / max|g|: {worst:.3g}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=sorted(WORKLOADS), action="append")
    p.add_argument("--no-tf", action="store_true", help="JAX only")
    p.add_argument("--mem", action="store_true", help="run one gradient once and print its peak RSS")
    p.add_argument("--peer", choices=["jax", "tf"], default="jax", help="the peer of --mem")
    p.add_argument("--check", metavar="DIR", help="compare with tensorlift's gradients saved in DIR")
    a = p.parse_args()
    names = a.only or list(WORKLOADS)
    if a.mem:
        if len(names) != 1:
            sys.exit("--mem needs one --only")
        mem(names[0], a.peer)
    elif a.check:
        check(a.check, names)
    else:
        run_jax(names)
        if not a.no_tf:
            run_tf(names)


if __name__ == "__main__":
    main()
