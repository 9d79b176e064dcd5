"""The output disciplines of examples/kept_outputs.rs on jax.jit: the
arithmetic chain on 1M, 4M and 16M f32, 40 calls with the outputs dropped
at once and 40 with the outputs kept (a list holds every result), median
and best call in ms.

    /tmp/peers/bin/python scripts/peers/kept_outputs.py [N ...]
"""
import statistics
import sys
import time

import numpy as np
import jax
import jax.numpy as jnp


def data(n, seed):
    i = np.arange(n, dtype=np.uint64)
    v = ((i * np.uint64(2654435761) + np.uint64(seed)) & np.uint64(0xFFFFFFFF)).astype(np.float64)
    return (v / 0xFFFFFFFF * 6.0 - 3.0).astype(np.float32)


f = jax.jit(lambda x: ((x * 1.5 + 0.25) * x - 0.75) * 0.5 + x)
for n in [int(a) for a in sys.argv[1:]] or [1 << 20, 1 << 22, 1 << 24]:
    x = jnp.asarray(data(n, 1))
    f(x).block_until_ready()
    line = "arith %9d" % n
    for keep in (False, True):
        kept, ts = [], []
        for _ in range(40):
            t = time.perf_counter()
            y = f(x)
            y.block_until_ready()
            ts.append(time.perf_counter() - t)
            if keep:
                kept.append(y)
            del y
        what = "kept" if keep else "dropped"
        line += "  %s median %.3f ms best %.3f" % (what, statistics.median(ts) * 1e3, min(ts) * 1e3)
    print("jax", jax.__version__, line)
