"""``tl.GradientTape`` and ``tl.custom_gradient``.

A tape records the ops run on watched tensors (eager or symbolic). Its
``gradient`` replays them as a traced function of the sources and lets the
compiler's reverse mode differentiate it (the same rules as ``Function``'s
``grad``), inlined where the tape is used: eagerly, a small function is
traced and run; inside ``tl.function``, the gradient becomes part of the
function's own graph. Computing a gradient is itself recorded on the tapes
around it, so nested tapes give higher derivatives.
"""

import numpy as np

from . import _core, _native
from ._core import EagerTensor, SymbolicTensor, Tensor, apply, convert_to_tensor, site
from ._nest import flatten, pack


class _Record:
    __slots__ = ("replay", "inputs", "outputs")

    def __init__(self, replay, inputs, outputs):
        self.replay = replay
        self.inputs = inputs
        self.outputs = outputs


class GradientTape:
    """``tf.GradientTape``: records operations for automatic differentiation."""

    def __init__(self, persistent=False, watch_accessed_variables=True):
        self._persistent = persistent
        self._records = []
        self._watched = {}
        self._live = set()
        self._recording = False
        self._used = False
        # Inside a trace: the spans of values made while the tape recorded
        # ([start, end] ``_native.trace_position``s, end None while open), at
        # which loop or branch depth, and the symbolic results of ops it saw
        # there and did not record (their inputs not watched). A gradient
        # taken there passes through what the tape recorded only, as
        # TensorFlow's tapes do inside a tf.function (values made before
        # the tape, between its ``with`` blocks, under ``stop_recording``,
        # before a ``reset`` or ``watch``, or after it are constants).
        self._spans = None
        self._depth = 0
        self._unrecorded = []

    def __enter__(self):
        if _native.tracing():
            if self._spans is None:
                self._spans = []
                self._depth = _core.state.region_depth
            self._open()
        self._push()
        return self

    def __exit__(self, *exc):
        self._close()
        self._pop()
        return False

    def _here(self):
        """Whether ops now go to the trace and depth the spans count in."""
        return self._spans is not None and _native.tracing() and _core.state.region_depth == self._depth

    def _open(self):
        if self._here() and not (self._spans and self._spans[-1][1] is None):
            self._spans.append([_native.trace_position(), None])

    def _close(self):
        if self._here() and self._spans and self._spans[-1][1] is None:
            self._spans[-1][1] = _native.trace_position()

    def _push(self):
        self._recording = True
        _core.state.tapes.append(self)

    def _pop(self):
        self._recording = False
        if self in _core.state.tapes:
            _core.state.tapes.remove(self)

    def watch(self, tensor):
        """Records the operations on ``tensor`` (a tensor or a structure of them)."""
        leaves, _ = flatten(tensor)
        for t in leaves:
            if not isinstance(t, Tensor):
                raise TypeError(f"GradientTape.watch takes tensors, got {type(t).__name__}")
            self._watched[id(t)] = t
            self._live.add(id(t))

    def watched_variables(self):
        return tuple(self._watched.values())

    def stop_recording(self):
        """A context in which operations are not recorded."""
        tape = self

        class _Paused:
            # The tape stays among the active ones, not recording: inside a
            # trace it notes what it did not record.
            def __enter__(self):
                tape._recording = False
                tape._close()

            def __exit__(self, *exc):
                tape._recording = tape in _core.state.tapes
                if tape._recording:
                    tape._open()
                return False

        return _Paused()

    def reset(self):
        self._records.clear()
        self._live = set(self._watched)
        if self._here():
            # What it recorded so far: constants from now on.
            self._spans = []
            self._unrecorded = []
            if self._recording:
                self._open()

    def _record(self, replay, inputs, outputs, captures=False):
        if _core.state.region_depth != self._depth:
            # Inside a loop or branch body being traced: the loop or branch
            # is recorded as one op (and gradients inside a function are
            # taken from its graph, which sees the body).
            return
        live = any(id(x) in self._live for x in inputs)
        # A loop or branch traced under the tape may read a watched value
        # its bodies capture: recorded unless paused (the gradient, taken
        # from the graph, sees whether it does).
        live = live or (captures and self._spans is not None)
        if not self._recording:
            return  # (outside the spans)
        if not live:
            if self._spans is not None:
                # (An op may hand back its input's own value, a live one:
                # tl.identity, a broadcast to the same shape.)
                given = {x._s.key for x in inputs if isinstance(x, SymbolicTensor)}
                self._unrecorded += [o._s for o in outputs
                                     if isinstance(o, SymbolicTensor) and o._s.key not in given]
            return
        self._records.append(_Record(replay, list(inputs), list(outputs)))
        for o in outputs:
            self._live.add(id(o))

    def gradient(self, target, sources, output_gradients=None, unconnected_gradients="none"):
        """The gradient of ``target`` (a tensor or a structure of them,
        summed) with respect to each of ``sources``, in their structure;
        ``None`` for a source the target does not depend on (or zeros with
        ``unconnected_gradients="zero"``)."""
        if self._used and not self._persistent:
            raise RuntimeError(
                "a non-persistent GradientTape can only be used to compute one set of gradients; "
                "use GradientTape(persistent=True) for more"
            )
        self._used = True
        targets, _ = flatten(target)
        listed, src_structure = flatten(sources)
        if output_gradients is None:
            cts = [None] * len(targets)
        else:
            # (None entries kept: ones for their targets.)
            cts = _deep_leaves(output_gradients)
            if len(cts) != len(targets):
                raise ValueError(
                    f"GradientTape.gradient: output_gradients holds {len(cts)} tensor(s) for "
                    f"{len(targets)} target(s); give one per target, in the target's structure"
                )
        # A tensor listed twice (tied weights) gets its gradient in each place.
        first = {}
        src = []
        for x in listed:
            if id(x) not in first:
                first[id(x)] = len(src)
                src.append(x)
        grads = self._gradients(targets, src, cts)
        grads = [grads[first[id(x)]] for x in listed]
        return self._finish(listed, src_structure, grads, unconnected_gradients)

    def _gradients(self, targets, src, cts):
        """The gradient with respect to each of ``src`` (distinct), None
        where unconnected."""
        for what, xs in (("target", targets), ("source", src)):
            for i, x in enumerate(xs):
                if isinstance(x, Tensor) and x.dtype.is_complex and (what == "target" or id(x) in self._live):
                    from .errors import UnimplementedError

                    raise UnimplementedError(
                        f"GradientTape.gradient: {what} {i} is {x.dtype.name}: complex differentiation is "
                        "not supported yet (docs/autodiff.md, Limits)"
                    )
        if any(isinstance(x, SymbolicTensor) for x in [*targets, *src]):
            return self._graph_gradient(targets, src, cts)
        records = list(self._records)
        connected = _connected(records, targets)
        # A source is differentiated when the tape watched it or recorded
        # the op that made it (TensorFlow: None for an unwatched constant,
        # even one that fed a recorded op).
        diff = [
            i for i, s in enumerate(src)
            if isinstance(s, Tensor) and id(s) in connected and id(s) in self._live
            and (s.dtype.is_floating or s.dtype.is_complex)
        ]
        # Targets that depend on a differentiated source, and their seeds.
        reached = _reached(records, [src[i] for i in diff])
        outs = [i for i, t in enumerate(targets) if id(t) in reached and t.dtype.is_floating]
        grads = [None] * len(src)
        if diff and outs:
            values = _vjp(records, [src[i] for i in diff], [targets[i] for i in outs],
                          [cts[i] for i in outs])
            for i, g in zip(diff, values):
                grads[i] = g
        return grads

    def _finish(self, src, src_structure, grads, unconnected_gradients):
        if unconnected_gradients in ("zero", "ZERO") or getattr(unconnected_gradients, "value", None) == "zero":
            from ._ops import zeros_like

            grads = [zeros_like(s) if g is None else g for s, g in zip(src, grads)]
        return pack(src_structure, grads)

    def _graph_gradient(self, targets, src, cts):
        """Inside a traced function: the gradient of the trace's own graph
        (every path from a watched source to a target, through loops and
        branches and what their bodies capture), added to it."""
        where = site()
        outs = [i for i, t in enumerate(targets) if isinstance(t, Tensor) and t.dtype.is_floating]
        diff = [
            i for i, s in enumerate(src)
            if isinstance(s, Tensor) and id(s) in self._live and s.dtype.is_floating
        ]
        grads = [None] * len(src)
        if not outs or not diff:
            return grads
        like = next(x._s for x in [*targets, *src] if isinstance(x, SymbolicTensor))
        seeds = [_seed_like(targets[i]) if cts[i] is None else convert_to_tensor(cts[i], dtype=targets[i].dtype)
                 for i in outs]
        here = self._here()
        spans = [(a, (1 << 62) if b is None else b) for a, b in self._spans] if here else None
        res = _native.vjp_values(
            [_core.to_sym(targets[i], like, where) for i in outs],
            [_core.to_sym(src[i], like, where) for i in diff],
            [_core.to_sym(c, like, where) for c in seeds],
            where,
            spans,
            self._unrecorded if here else [],
        )
        for i, r in zip(diff, res):
            grads[i] = None if r is None else SymbolicTensor(r)
        # Recorded on the tapes around this one (a gradient of a gradient,
        # taken from the graph as this one is).
        _core.record(_graph_only, [*targets, *src], [g for g in grads if g is not None])
        return grads

    def _rows(self, op, target, src, seeds):
        """One gradient of ``target`` per seed (``output_gradients``), each a
        list over ``src`` (None where unconnected). Allowed once on a
        non-persistent tape, as TensorFlow's jacobian is."""
        if self._used and not self._persistent:
            raise RuntimeError(
                f"a non-persistent GradientTape can only be used to compute one set of gradients; "
                f"use GradientTape(persistent=True) to call {op} after another gradient"
            )
        self._used = True
        firsts = {}
        distinct = []
        for x in src:
            if id(x) not in firsts:
                firsts[id(x)] = len(distinct)
                distinct.append(x)
        rows = [self._gradients([target], distinct, [seed]) for seed in seeds]
        return [[row[firsts[id(x)]] for row in rows] for x in src]

    def jacobian(self, target, sources, unconnected_gradients="none", parallel_iterations=None,
                 experimental_use_pfor=True):
        """``tf.GradientTape.jacobian``: for each source, the derivative of
        every element of ``target`` (a tensor of known shape) with respect
        to every element of it, of shape ``target.shape + source.shape``.
        One gradient per element of the target (a one-hot
        ``output_gradients``), so it suits small targets; eagerly each is a
        small traced function, inside ``tl.function`` part of its graph."""
        from ._ops import reshape, stack, zeros

        target = _jacobian_target(target, "jacobian")
        listed, structure = flatten(sources)
        n = target.shape.num_elements()
        dt = target.dtype.as_numpy_dtype
        seeds = [convert_to_tensor(np.eye(1, n, i, dtype=dt).reshape(target.shape)) for i in range(n)]
        out = []
        for x, rows in zip(listed, self._rows("jacobian", target, listed, seeds)):
            xs = list(x.shape)
            if all(g is None for g in rows):
                out.append(zeros([*target.shape, *xs], x.dtype) if _zero(unconnected_gradients) else None)
                continue
            j = stack(rows) if rows else zeros([0, *xs], x.dtype)
            out.append(reshape(j, [*target.shape, *xs]))
        return pack(structure, out)

    def batch_jacobian(self, target, source, unconnected_gradients="none", parallel_iterations=None,
                       experimental_use_pfor=True):
        """``tf.GradientTape.batch_jacobian``: ``target`` ``[b, ...]`` and
        ``source`` ``[b, ...]`` whose examples are independent (as
        TensorFlow assumes: row ``i`` of the target depends on row ``i`` of
        the source only); the result is ``[b] + target.shape[1:] +
        source.shape[1:]``. One gradient per element of a target row."""
        from ._ops import reshape, stack, transpose, zeros

        target = _jacobian_target(target, "batch_jacobian")
        if not isinstance(source, Tensor):
            raise TypeError(f"batch_jacobian: the source must be a tensor, not {type(source).__name__}")
        ts, xs = list(target.shape), list(source.shape)
        if not ts or not xs or ts[0] != xs[0]:
            raise ValueError(
                f"batch_jacobian: target {ts} and source {xs} must have the same first (batch) dim"
            )
        b = ts[0]
        per = int(np.prod(ts[1:], dtype=np.int64))
        dt = target.dtype.as_numpy_dtype
        seeds = [convert_to_tensor(np.broadcast_to(np.eye(1, per, i, dtype=dt).reshape(ts[1:]), ts).copy())
                 for i in range(per)]
        (rows,) = self._rows("batch_jacobian", target, [source], seeds)
        if all(g is None for g in rows):
            return zeros([b, *ts[1:], *xs[1:]], source.dtype) if _zero(unconnected_gradients) else None
        j = reshape(stack(rows), [per, b, *xs[1:]])
        j = transpose(j, [1, 0, *range(2, len(xs) + 1)])
        return reshape(j, [b, *ts[1:], *xs[1:]])


def _zero(unconnected_gradients):
    return unconnected_gradients in ("zero", "ZERO") or getattr(unconnected_gradients, "value", None) == "zero"


def _jacobian_target(target, op):
    if not isinstance(target, Tensor):
        raise TypeError(f"{op}: the target must be a tensor, not {type(target).__name__}")
    if target.shape is None or None in target.shape:
        raise ValueError(f"{op}: the target's shape must be known when traced (one gradient per element), got "
                         f"{None if target.shape is None else list(target.shape)}")
    if not target.dtype.is_floating:
        raise TypeError(f"{op}: the target must be floating-point, not {target.dtype.name}")
    return target


def _graph_only(xs):
    raise AssertionError("a gradient taken inside a trace is differentiated from the trace's graph")


def _connected(records, targets):
    """Ids of every tensor the targets depend on through recorded ops."""
    needed = {id(t) for t in targets}
    for r in reversed(records):
        if any(id(o) in needed for o in r.outputs):
            needed.update(id(x) for x in r.inputs)
    return needed


def _reached(records, sources):
    live = {id(s) for s in sources}
    for r in records:
        if any(id(x) in live for x in r.inputs):
            live.update(id(o) for o in r.outputs)
    return live


def _replay(records, sources, sym_sources, targets):
    """The targets recomputed from symbolic sources by the recorded ops.

    The callbacks a replay traces ran when the ops were recorded: they are
    traced stateless (``forward_retrace``), so the gradient drops those
    whose results it does not need instead of running their effects again
    (a ``tl.function`` that logs through ``numpy_function``, called under
    a tape); one whose result the gradient reads runs again."""
    env = {id(s): SymbolicTensor(x) for s, x in zip(sources, sym_sources)}
    _core.state.forward_retrace += 1
    try:
        for r in records:
            if not any(id(x) in env for x in r.inputs):
                continue
            outs = r.replay([env.get(id(x), x) for x in r.inputs])
            for o, n in zip(r.outputs, outs):
                if (isinstance(n, SymbolicTensor) and n.shape != o.shape
                        and not _unknown(o.shape)):
                    # The shape the op had when it ran (a callback's result
                    # inside a tl.function, or one declared by set_shape)
                    # holds for the replayed result, checked when it runs.
                    n = apply("reshape", [n], {"shape": list(o.shape)})
                env[id(o)] = n
    finally:
        _core.state.forward_retrace -= 1
    return [env[id(t)] for t in targets]


def _seed_like(t):
    """Ones of ``t``'s type, also when its shape is unknown until the
    function runs (a callback's result): ``t ** 0`` is 1 everywhere, NaN and
    infinities included."""
    if t.shape is not None and all(d is not None for d in t.shape):
        return _ones_like(t)
    return t ** convert_to_tensor(0, dtype=t.dtype)


def _ones_like(t):
    from ._ops import ones_like

    return ones_like(t)


def _check_static(targets):
    for t in targets:
        if t.shape is None or any(d is None for d in t.shape):
            from .errors import InvalidArgumentError

            raise InvalidArgumentError(
                f"the gradient target {t!r} has an unknown shape (the result of a callback?): "
                "gradients are compiled for static shapes; declare it with set_shape"
            )


def _vjp(records, sources, targets, cts):
    """``Jᵀ·ct`` of the recorded function, recorded on the tapes around."""
    _check_static(targets)
    seeds = [_ones_like(t) if c is None else convert_to_tensor(c, dtype=t.dtype)
             for t, c in zip(targets, cts)]
    symbolic = any(isinstance(x, SymbolicTensor) for x in [*sources, *targets, *seeds])
    # The tensors the records read that no record made and that are not
    # sources, where a tape around this one tracks them: the gradient is a
    # function of them too (d/dW of a gradient with respect to x, a mixed
    # second derivative; recorded with the sources alone, W was a constant
    # of the replay and the outer gradient None).
    made = {id(o) for r in records for o in r.outputs}
    skip = made | {id(s) for s in sources}
    outer = [t for t in _core.state.tapes if t._recording]
    extra = []
    # So are all the tensors a replayed tl.function reads: its body may
    # differentiate with respect to them itself (a gradient penalty's
    # inner tape watching x), which needs them symbolic.
    for r in records:
        whole = getattr(r.replay, "symbolic_inputs", False)
        for t in r.inputs:
            if (isinstance(t, Tensor) and id(t) not in skip
                    and (whole or any(id(t) in tape._live for tape in outer))):
                skip.add(id(t))
                extra.append(t)

    def in_trace(src, sds, ext):
        """The gradient as traced code, where the trace is under way."""
        where = site()
        like = next((x._s for x in [*src, *sds, *ext] if isinstance(x, SymbolicTensor)), None)
        prim = [_core.to_sym(s, like, where) for s in src]
        seed = [_core.to_sym(c, like, where) for c in sds]
        held = [_core.to_sym(e, like, where) for e in ext]

        def f(xs):
            return [t._s for t in _replay(records, [*sources, *extra], [*xs, *held], targets)]

        return [SymbolicTensor(g) for g in _native.vjp(f, prim, seed, where)]

    if symbolic:
        grads = in_trace(sources, seeds, extra)
    else:
        n = len(sources)

        def body(syms):
            sy = [SymbolicTensor(s) for s in syms]
            return [g._s for g in in_trace(sy[:n], sy[n:], extra)]

        fn = _native.Function(body, "gradient_tape", site(), False, None)
        grads = [EagerTensor(v) for v in fn([t._v for t in [*sources, *seeds]])]

    # Recorded on the tapes around this one: a gradient of a gradient.
    def replay(xs, n=len(sources), m=len(seeds)):
        return in_trace(xs[:n], xs[n:n + m], xs[n + m:])

    _core.record(replay, [*sources, *seeds, *extra], grads)
    return grads


def custom_gradient(f=None):
    """``tf.custom_gradient``: ``f(*x)`` returns ``(y, grad_fn)`` and
    ``grad_fn(*dy)`` returns the gradient of each input; tapes and
    functions differentiate ``f`` with ``grad_fn`` instead of its ops."""
    if f is None:
        return custom_gradient

    def wrapped(*args):
        # Arguments may be nested structures of tensors (TensorFlow's x is
        # "a sequence of (nested structures of) Tensor inputs"): f gets them
        # rebuilt, grad_fn returns one gradient per tensor, flattened.
        args = [a if _nested(a) else a if isinstance(a, Tensor) else convert_to_tensor(a) for a in args]
        leaves, arg_structure = flatten(args)
        xs = [a if isinstance(a, Tensor) else convert_to_tensor(a) for a in leaves]
        g = _Rebuilt(f, arg_structure)
        symbolic = any(isinstance(x, SymbolicTensor) for x in xs)
        if not symbolic:
            # Eager: run f without recording its ops; the tapes record the
            # call as one op whose gradient is grad_fn's.
            paused = list(_core.state.tapes)
            for t in paused:
                t._pop()
            try:
                y, _ = g(*xs)
            finally:
                for t in paused:
                    t._push()
            ys, structure = flatten(y)
            shapes = [list(t.shape) for t in ys]
            _core.record(lambda syms: _custom_traced(g, syms, shapes)[0], xs, ys)
            return y
        ys, structure = _custom_traced(g, xs)
        _core.record(lambda syms: _custom_traced(g, syms)[0], xs, ys)
        return pack(structure, ys)

    wrapped.__name__ = getattr(f, "__name__", "custom_gradient")
    wrapped.__doc__ = getattr(f, "__doc__", None)
    return wrapped


def _unknown(shape):
    return shape is None or any(d is None for d in shape)


def _nested(a):
    """Whether a custom_gradient argument is a structure holding tensors
    (a list of numbers is one tensor)."""
    items = a.values() if isinstance(a, dict) else a if isinstance(a, (list, tuple)) else None
    return items is not None and any(isinstance(x, (Tensor, np.ndarray)) or _nested(x) for x in items)


def _deep_leaves(v):
    """The leaves of nested lists, tuples and dicts, None included."""
    if isinstance(v, dict):
        return [leaf for k in sorted(v) for leaf in _deep_leaves(v[k])]
    if not isinstance(v, (list, tuple)):
        return [v]
    return [leaf for x in v for leaf in _deep_leaves(x)]


class _Rebuilt:
    """``f`` called on flat tensors with its arguments' structure rebuilt."""

    def __init__(self, f, structure):
        self.f, self.structure = f, structure
        self.__name__ = getattr(f, "__name__", "f")

    def __call__(self, *xs):
        return self.f(*pack(self.structure, list(xs)))


def _custom_traced(f, xs, shapes=None):
    """``f`` on symbolic inputs as a custom_vjp node: its ops forward, its
    ``grad_fn`` backward (``f`` is traced again in the gradient region to
    get ``grad_fn`` there). ``shapes``: the results' shapes where known
    (an eager call's), which a callback's result takes when replayed."""
    where = site()
    like = next((x._s for x in xs if isinstance(x, SymbolicTensor)), None)
    syms = [_core.to_sym(x, like, where) for x in xs]
    n = len(xs)
    holder = {}

    def body(s):
        y, _ = f(*[SymbolicTensor(v) for v in s])
        leaves, structure = flatten(y)
        holder["structure"] = structure
        leaves = [t if isinstance(t, Tensor) else convert_to_tensor(t) for t in leaves]
        if shapes is not None:
            leaves = [
                apply("reshape", [t], {"shape": d}) if _unknown(t.shape) else t
                for t, d in zip(leaves, shapes)
            ]
        return [_core.to_sym(t, s[0], site()) for t in leaves]

    def vjp(s):
        x = [SymbolicTensor(v) for v in s[:n]]
        _core.state.forward_retrace += 1
        try:
            _, grad_fn = f(*x)
        finally:
            _core.state.forward_retrace -= 1
        nout = (len(s) - n) // 2
        dys = [SymbolicTensor(v) for v in s[n + nout:]]
        g = grad_fn(*dys)
        g = list(g) if isinstance(g, (list, tuple)) else [g]
        if len(g) != n:
            # One gradient per input tensor, in the structure of the
            # arguments (lists in lists, None where there is none).
            g = _deep_leaves(g)
        if len(g) != n:
            raise ValueError(
                f"custom_gradient '{getattr(f, '__name__', 'f')}': its gradient function returned "
                f"{len(g)} gradient(s) for {n} input(s); return one per input (None for no gradient)"
            )
        out = []
        for t, xi in zip(g, x):
            if not xi.dtype.is_floating:
                continue
            if t is None:
                # No gradient for this input (TensorFlow allows it): zeros.
                from ._ops import zeros_like

                t = zeros_like(xi)
            t = t if isinstance(t, Tensor) else convert_to_tensor(t)
            if isinstance(t, SymbolicTensor) and _unknown(t.shape) and not _unknown(xi.shape):
                # A gradient has its input's shape: what grad_fn computes
                # from an undeclared callback result is given it (a
                # reshape, checked when it runs), as TensorFlow's graph
                # mode allows.
                t = apply("reshape", [t], {"shape": list(xi.shape)})
            out.append(_core.to_sym(t, s[0], site()))
        return out

    out = _native.custom_vjp(body, vjp, syms, where)
    return [SymbolicTensor(o) for o in out], holder.get("structure")
