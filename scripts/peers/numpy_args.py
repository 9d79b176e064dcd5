"""Large NumPy arguments from Python: a compiled elementwise chain (the
suite's arith) called with a NumPy float32 array the caller keeps (so it
cannot be adopted and is copied), outputs dropped at once, kept until the
round ends, and (tensorlift) written into preallocated arrays with
`call_into`. Median and best of 7 rounds of 20 calls, per call.

    target/python-venv/bin/python scripts/peers/numpy_args.py --system tl
    /tmp/peers/bin/python scripts/peers/numpy_args.py --system jax

Run both in the same minutes; the figures are in docs/benchmarks.md ("The
Python package").
"""
import sys
import time

import numpy as np


def arith(x):
    return ((x * 1.5 + 0.25) * x - 0.75) * 0.5 + x


def rounds(step, k=20, n=7):
    per_call = []
    for _ in range(n):
        kept = []
        t = time.perf_counter()
        for i in range(k):
            kept.append(step(i))
        per_call.append((time.perf_counter() - t) / k * 1e3)
        del kept
    per_call.sort()
    return per_call[n // 2], per_call[0]


def main():
    system = sys.argv[sys.argv.index("--system") + 1] if "--system" in sys.argv else "tl"
    for n in [1 << 20, 1 << 24]:
        x = np.linspace(-3, 3, n, dtype=np.float32)
        figures = {}
        if system == "tl":
            import tensorlift as tl

            f = tl.function(arith, jit_compile=True)
            f(x)
            figures["dropped"] = rounds(lambda i: (f(x), None)[1])
            figures["kept"] = rounds(lambda i: f(x))
            outs = [np.empty(n, np.float32) for _ in range(20)]
            figures["call_into"] = rounds(lambda i: f.call_into(outs[i], x))
        elif system == "jax":
            import jax

            f = jax.jit(arith)
            f(x).block_until_ready()
            figures["dropped"] = rounds(lambda i: (f(x).block_until_ready(), None)[1])
            figures["kept"] = rounds(lambda i: f(x).block_until_ready())
        else:
            raise SystemExit(f"unknown system {system!r}: tl or jax")
        line = "  ".join(f"{k} {m:.3f} ({b:.3f})" for k, (m, b) in figures.items())
        print(f"{system} n={n}: {line} ms median (best)")


if __name__ == "__main__":
    main()
