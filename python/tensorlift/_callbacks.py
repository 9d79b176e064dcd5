"""Host callbacks: ``tl.numpy_function``, ``tl.py_func`` (=
``tl.compat.v1.py_func``) and ``tl.py_function``, with TensorFlow's
contract (../docs/callbacks.md): NumPy arrays in and out for the first two,
eager tensors for ``py_function``. The first two run inside compiled code
(``jit_compile=True``); ``py_function`` is differentiable (a tape records
its body) and is a ``JitCompileError`` under ``jit_compile=True``.
"""

import collections

import numpy as np

from . import _core, _native
from . import errors as _errors
from ._core import EagerTensor, SymbolicTensor, Tensor, convert_to_tensor, site
from .dtypes import as_dtype


def _tout(Tout):
    single = not isinstance(Tout, (list, tuple))
    types = [] if Tout is None else [Tout] if single else list(Tout)
    return single and Tout is not None, [as_dtype(t).name for t in types]


def _shapes(output_shapes, n):
    if output_shapes is None:
        return None
    if n == 1 and (not output_shapes or not isinstance(output_shapes[0], (list, tuple, type(None)))):
        output_shapes = [output_shapes]
    return [None if s is None else [None if d is None else int(d) for d in s] for s in output_shapes]


def _result(out, single):
    if single:
        return out[0]
    return out


def _inputs(inp):
    inp = [] if inp is None else list(inp) if isinstance(inp, (list, tuple)) else [inp]
    return [x if isinstance(x, Tensor) else convert_to_tensor(x) for x in inp]


class _Logged:
    """A stateful callback's function that, while a ``tl.function`` runs
    under a gradient tape, logs what it returns (``state.callback_log``)
    for the replay that computes the gradient."""

    def __init__(self, func, key, tout):
        self.func, self.key, self.tout = func, key, tout
        self.__qualname__ = getattr(func, "__qualname__", type(func).__name__)

    def __call__(self, *args):
        out = self.func(*args)
        log = _core.state.callback_log
        if log is not None and log.get(self.key, ()) is not None:
            try:
                values = [out] if len(self.tout) == 1 else ([] if out is None else list(out))
                kept = [np.array(v, dtype=as_dtype(d).as_numpy_dtype) for v, d in zip(values, self.tout)]
                log.setdefault(self.key, collections.deque()).append(kept)
            except Exception:  # noqa: BLE001 (the call's own checks report bad results)
                # Not kept: the replay runs this callback again.
                log[self.key] = None
        return out


def _replayed(key, tout, must, name):
    """The results a stateful callback created at ``key`` returned when the
    call being replayed ran (None when there are none to take: not in a
    replay, or it did not run, as in a branch not taken). Inside a loop
    body, which ran it any number of times, they cannot be replayed: the
    callback runs again, or, where its values must be the call's
    (``must``: tl.random's draws), that is an error."""
    replay = _core.state.callback_replay
    if replay is None:
        return None
    queue = replay.get(key)
    if not queue:  # (None: one of its results could not be kept)
        return None
    it = _core.state.replay_iteration
    if it is not None and _core.state.loop_depth == 1 and _core.state.region_depth == 1:
        # The body of an outermost loop (not in a branch of it): the call ran
        # it once per iteration, in order; iteration k takes the k-th values.
        # (Left in the queue: a body may be traced more than once.)
        from ._ops import gather

        rows = list(queue)
        return [gather(convert_to_tensor(np.stack([r[j] for r in rows]), dtype=d), it)
                for j, d in enumerate(tout)]
    if _core.state.loop_depth:
        if must:
            raise _errors.UnimplementedError(
                f"{name or key[0]} at {key[1][0]}:{key[1][1]} draws random values inside a loop body of a "
                "tl.function called under a GradientTape, in a nested loop or in a branch of the loop: "
                "the gradient cannot tell which draws each iteration made. Draw the values before the "
                "loop (a tensor of one draw per iteration, indexed in the body), or outside the branch"
            )
        return None
    return [convert_to_tensor(v, dtype=d) for v, d in zip(queue.popleft(), tout)]


def _call(kind, func, inp, Tout, stateful=True, name=None, output_shapes=None, must_replay=False):
    single, tout = _tout(Tout)
    xs = _inputs(inp)
    where = site()
    # (With the loop depth: a helper's line run both in a loop and outside
    # it is two sites, whose logs must not mix.)
    key = (kind, where, _core.state.loop_depth)
    if stateful and _native.tracing():
        logged = _replayed(key, tout, must_replay, name)
        if logged is not None:
            return _result(logged, single) if tout else None
    stateful = stateful and not _core.state.forward_retrace
    like = next((x._s for x in xs if isinstance(x, SymbolicTensor)), None)
    if like is None and not _native.tracing():
        # Eager: a one-callback function, run now (the same conversions
        # and errors as traced).
        def body(syms):
            return _native.callback(kind, func, syms, tout, where, name, _shapes(output_shapes, len(tout)),
                                    stateful)[0]

        if not xs:
            raise ValueError(f"{kind} without inputs runs only inside tl.function")
        fn = _native.Function(body, name or kind, where, False, None)
        out = [EagerTensor(v) for v in fn([x._v for x in xs])]
        return _result(out, single) if tout else None
    syms = [_core.to_sym(x, like, where) for x in xs]
    run = _Logged(func, key, tout) if stateful else func
    out, target = _native.callback(kind, run, syms, tout, where, name, _shapes(output_shapes, len(tout)),
                                   stateful)
    _core.register_callback(target, func)
    out = [SymbolicTensor(s) for s in out]
    _core.record(lambda ys: _flat(_call(kind, func, ys, Tout, stateful, name, output_shapes)), xs, out)
    return _result(out, single) if tout else None


def _flat(r):
    return [] if r is None else list(r) if isinstance(r, (list, tuple)) else [r]


def numpy_function(func, inp, Tout, stateful=True, name=None):
    """``tf.numpy_function``: ``func`` gets NumPy arrays and returns arrays
    (or Python values) of the dtypes ``Tout``; it runs inside compiled code.
    Not differentiable unless given a gradient (``tl.custom_gradient``)."""
    return _call("numpy_function", func, inp, Tout, stateful, name)


def py_func(func, inp, Tout, stateful=True, name=None):
    """``tf.compat.v1.py_func``: ``numpy_function`` under its TF1 name."""
    return _call("py_func", func, inp, Tout, stateful, name)


def _unwrap(v):
    if isinstance(v, EagerTensor):
        return v._v
    if isinstance(v, (list, tuple)):
        return type(v)(_unwrap(x) for x in v)
    return v


def py_function(func, inp, Tout, name=None):
    """``tf.py_function``: ``func`` gets eager ``tl.Tensor``s and may use
    any tensorlift op on them; differentiable (the ops it runs are recorded
    on a tape); always stateful. Inside ``tl.function`` it runs in
    interpreted mode only: with ``jit_compile=True`` the function fails to
    compile with ``tl.errors.JitCompileError`` before anything runs."""
    single, tout = _tout(Tout)
    xs = _inputs(inp)
    like = next((x._s for x in xs if isinstance(x, SymbolicTensor)), None)
    if like is None and not _native.tracing():
        # Eager: func runs here, so that the tapes record its ops (that is
        # its gradient); its results are checked as a traced call's are.
        return _eager_py_function(func, xs, single, tout, name)

    forward = _PyForward(func)
    where = site()
    # Traced again for a tape's gradient after it ran: stateless, dropped
    # unless the gradient reads its result (TensorFlow runs it once).
    stateful = not _core.state.forward_retrace
    floats = [i for i, x in enumerate(xs) if x.dtype.is_floating]
    if not floats or not any(as_dtype(d).is_floating for d in tout):
        # Nothing to differentiate: the callback alone.
        syms = [_core.to_sym(x, like, where) for x in xs]
        out, target = _native.callback("py_function", forward, syms, tout, where, name, None, stateful)
        _core.register_callback(target, forward)
        _core.record(lambda ys: _flat(py_function(func, ys, Tout, name)), xs,
                     [SymbolicTensor(o) for o in out])
        out = [SymbolicTensor(s) for s in out]
        return _result(out, single) if tout else None
    syms = [_core.to_sym(x, like, where) for x in xs]
    n = len(xs)

    backward = _PyBackward(func, single, tout, floats, n)

    def body(s):
        out, target = _native.callback("py_function", forward, s, tout, site(), name, None, stateful)
        _core.register_callback(target, forward)
        return out

    def vjp(s):
        nout = len(tout)
        cts = s[n + nout:]
        grad_types = [xs[i].dtype.name for i in floats]
        grad_shapes = [None if xs[i].shape is None else list(xs[i].shape) for i in floats]
        out, target = _native.callback("py_function", backward, [*s[:n], *cts], grad_types, site(), name,
                                       grad_shapes)
        _core.register_callback(target, backward)
        return out

    out = _native.custom_vjp(body, vjp, syms, where)
    out = [SymbolicTensor(o) for o in out]
    _core.record(lambda ys: _flat(py_function(func, ys, Tout, name)), xs, out)
    return _result(out, single) if tout else None


def _raised(node, who, e):
    """The ``tl.errors`` error an exception a callback raised maps to (the
    runtime's rule, as for a traced callback), its text as the runtime's."""
    from . import errors

    text = f"{who} raised {type(e).__name__}: {e}"
    if isinstance(e, (ValueError, TypeError, OverflowError)):
        return _error(errors.InvalidArgumentError, node, text)
    if isinstance(e, StopIteration):
        return _error(errors.OutOfRangeError, node, text)
    if isinstance(e, MemoryError):
        return _error(errors.ResourceExhaustedError, node, text)
    if isinstance(e, NotImplementedError):
        return _error(errors.UnimplementedError, node, text)
    return _error(errors.UnknownError, node, text)


# The kind a native error's text begins with, by class (ir/src/error.rs).
_KIND = {
    "InvalidArgumentError": "InvalidArgument",
    "OutOfRangeError": "OutOfRange",
    "ResourceExhaustedError": "ResourceExhausted",
    "UnimplementedError": "Unimplemented",
    "UnknownError": "Unknown",
}


def _error(cls, node, message):
    """``cls`` with the text a native error of the node has: its kind, the
    node with its site (``file:line:col``), then ``message``."""
    return cls(f"{_KIND[cls.__name__]}: {node}: {message}")


def _dtype_of(v):
    """The tl dtype of an array (None for Python values and what tensorlift lacks)."""
    try:
        return as_dtype(v.dtype) if hasattr(v, "dtype") else None
    except (TypeError, ValueError, KeyError):
        return None


def _eager_py_function(func, xs, single, tout, name):
    """An eager ``py_function`` call: ``func`` on the eager tensors, its
    results checked against ``Tout`` (count: only a list or tuple is a
    sequence of outputs; dtype: tensors and arrays must have the declared
    one, Python values take it) and exceptions mapped onto ``tl.errors``
    with the exception as ``__cause__``."""
    from . import errors

    f, line = site()
    # As the runtime words a traced call's errors: the node (kind, name,
    # site with its column, always 1 for a Python site), then the callback.
    who = f"py_function '{name or 'py_function'}'"
    node = f"{who} (created at {f}:{line}:1)"
    invalid = errors.InvalidArgumentError
    try:
        out = func(*xs)
    except Exception as e:  # noqa: BLE001  (every exception becomes a tl.errors one)
        raise _raised(node, who, e) from e
    if not tout:
        # (`out == ()` of a tensor would be an elementwise comparison.)
        if out is None or (isinstance(out, tuple) and not out):
            return None
        raise _error(invalid, node, f"{who} returned a value, but Tout is empty (return None)")
    vals = list(out) if isinstance(out, (list, tuple)) else [out]
    if len(vals) != len(tout):
        raise _error(invalid, node, f"{who} returned {len(vals)} value(s), but Tout declares {len(tout)}")
    res = []
    for i, (v, d) in enumerate(zip(vals, tout)):
        got = v.dtype if isinstance(v, Tensor) else _dtype_of(v)
        if got is not None and got != as_dtype(d):
            raise _error(invalid, node, f"output {i} of {who} is {got.name}, but Tout says {d}")
        if v is None:
            raise _error(invalid, node,
                         f"output {i} of {who} is None, but Tout says {d} (does the function return its result?)")
        if not isinstance(v, Tensor):
            try:
                v = convert_to_tensor(v, dtype=d)
            except (TypeError, ValueError) as e:
                raise _error(invalid, node, f"converting output {i} of {who} to {d}: {e}") from e
        res.append(v)
    return _result(res, single)


class _PyForward:
    """A py_function's body as the runtime calls it: native tensors in,
    eager ``tl.Tensor``s to ``func``. A class, not a closure, so that a
    pickled function takes it (and ``func``) along."""

    def __init__(self, func):
        self.func = func

    def __call__(self, *args):
        return _unwrap(self.func(*[EagerTensor(a) for a in args]))

    def __repr__(self):
        return f"py_function({self.func!r})"


class _PyBackward:
    """A py_function's gradient: ``func`` runs again on the same inputs
    under a GradientTape, which gives ``tape.gradient(outputs, inputs,
    output_gradients)``."""

    def __init__(self, func, single, tout, floats, n):
        self.func, self.single, self.tout, self.floats, self.n = func, single, tout, floats, n

    def __call__(self, *args):
        from ._ops import zeros_like
        from ._tape import GradientTape

        inputs = [EagerTensor(a) for a in args[: self.n]]
        cts = [EagerTensor(a) for a in args[self.n :]]
        with GradientTape() as tape:
            for i in self.floats:
                tape.watch(inputs[i])
            out = self.func(*inputs)
        outs = [out] if self.single or not isinstance(out, (list, tuple)) else list(out)
        outs = [o for o, d in zip(outs, self.tout) if as_dtype(d).is_floating]
        grads = tape.gradient(outs, [inputs[i] for i in self.floats], output_gradients=cts)
        return [_unwrap(zeros_like(inputs[i]) if g is None else g) for i, g in zip(self.floats, grads)]

    def __repr__(self):
        return f"py_function gradient({self.func!r})"
