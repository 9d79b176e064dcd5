"""What the TF-op rounds' tests share: running a function eagerly,
traced or compiled, its tape gradient, and central differences."""

import numpy as np

import tensorlift as tl

MODES = ["eager", "traced", "jit"]


def run(f, mode, *args):
    if mode == "eager":
        return f(*[tl.constant(a) for a in args])
    return tl.function(f, jit_compile=mode == "jit")(*args)


def grad(f, mode, *args):
    """The gradient of ``reduce_sum(f(*args))`` with respect to ``args[0]``."""
    def g(x, *rest):
        with tl.GradientTape() as tape:
            tape.watch(x)
            y = tl.reduce_sum(f(x, *rest))
        return tape.gradient(y, x)

    return run(g, mode, *args).numpy()


def numeric_grad(f, x, *rest, eps=1e-3):
    """Central differences of ``sum(f(x, *rest))`` in float64."""
    x = np.asarray(x, np.float64)
    out = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        hi, lo = x.copy(), x.copy()
        hi[i] += eps
        lo[i] -= eps
        out[i] = (np.sum(f(hi, *rest)) - np.sum(f(lo, *rest))) / (2 * eps)
    return out
