"""Loops and branches: ``tl.while_loop``, ``tl.cond``, ``tl.switch_case``.

On eager values they run as Python loops and branches; while a function
is traced they become ``while`` and ``case`` ops of its graph (compiled to
native loops and branches under ``jit_compile=True``), and only the branch
taken runs.
"""

from . import _core, _native
from ._core import SymbolicTensor, Tensor, convert_to_tensor, site, to_sym
from ._nest import _LEAF, flatten, loose, pack

# What to do when a callback's result of undeclared shape is carried by a
# loop or returned by one branch (the text of python/src/lib.rs's remedy).
_UNKNOWN_SHAPE_REMEDY = (
    "a callback's result has an unknown shape unless declared: declare it where the callback "
    "is called, `y = tl.numpy_function(...); y.set_shape([...])` (output_shapes= for "
    "tl.contrib.framework.py_func), or call the callback outside the loop or branch"
)


def _shape_text(shape):
    return "of unknown rank" if shape is None else str([d for d in shape])


def _unknown(shape):
    return shape is None or None in shape


def _invariant_leaves(structure, invariants):
    """``shape_invariants`` (the structure of the loop variables, a shape
    where each has a tensor) as one shape per leaf, in ``flatten`` order:
    ``None`` for an unknown rank, else a list of dims (``None`` unknown)."""
    out = []

    def walk(s, inv):
        if s is _LEAF:
            out.append(None if inv is None else [None if d is None else int(d) for d in inv])
        elif s is None:
            return
        elif s[0] is dict:
            for k, x in zip(s[1], s[2]):
                walk(x, inv[k])
        else:
            items = s[1]
            if not isinstance(inv, (list, tuple)) or len(inv) != len(items):
                raise ValueError(
                    "tl.while_loop: shape_invariants must have the structure of loop_vars"
                )
            for x, i in zip(items, inv):
                walk(x, i)

    walk(structure, invariants)
    return out


def _relaxes(invariant, shape):
    """Whether ``invariant`` admits ``shape`` (a known or unknown one)."""
    if invariant is None:
        return True
    if shape is None or len(shape) != len(invariant):
        return False
    return all(i is None or i == d for i, d in zip(invariant, shape))


class _T:
    """A tensor's place in a structure's text (``(T, T)``, ``P(a=T, b=T)``)."""

    def __repr__(self):
        return "T"


def _structure_text(structure):
    """A ``flatten`` structure as text: its containers, ``T`` for each leaf."""
    return repr(pack(structure, iter(_T, None)))


def _body_leaves(out, single, structure, n):
    """The leaves of what a loop body returned, checked against the loop
    variables' structure (eager and traced loops alike: TensorFlow's
    ``assert_same_structure``, lists and tuples interchangeable). A single
    loop variable, or a result that is not a list or tuple, is one value."""
    out = [out] if single or not isinstance(out, (list, tuple)) else list(out)
    out_leaves, out_structure = flatten(out)
    if len(out_leaves) != n:
        raise ValueError(
            f"the body of tl.while_loop returned {len(out_leaves)} value(s), but the loop has "
            f"{n} loop variable(s)"
        )
    if loose(out_structure) != loose(structure):
        # The values would be bound by position to other loop variables.
        raise ValueError(
            f"the body of tl.while_loop returned {_structure_text(out_structure)}, but the loop "
            f"variables are {_structure_text(structure)} (T a tensor): the body must return the "
            "loop variables' structure"
        )
    return out_leaves


def _symbolic(leaves):
    return any(isinstance(x, SymbolicTensor) for x in leaves) or _native.tracing()


def _as_syms(leaves, where):
    like = next((x._s for x in leaves if isinstance(x, SymbolicTensor)), None)
    return [to_sym(x if isinstance(x, Tensor) else convert_to_tensor(x), like, where) for x in leaves]


def while_loop(cond, body, loop_vars, shape_invariants=None, parallel_iterations=10, back_prop=True,
               swap_memory=False, maximum_iterations=None, name=None):
    """``tf.while_loop``: repeats ``loop_vars = body(*loop_vars)`` while
    ``cond(*loop_vars)``; at most ``maximum_iterations`` times when given.
    Returns the final loop variables, in the structure of ``loop_vars``."""
    single = not isinstance(loop_vars, (list, tuple))
    vars_ = [loop_vars] if single else list(loop_vars)
    leaves, structure = flatten(vars_)
    leaves = [x if isinstance(x, Tensor) else convert_to_tensor(x) for x in leaves]

    def unpack(flat):
        v = pack(structure, flat)
        return v

    if not _symbolic(leaves):
        v = unpack(leaves)
        i = 0
        while (maximum_iterations is None or i < int(maximum_iterations)) and _scalar_pred(
            cond(*v), "the condition of tl.while_loop"
        ):
            # Checked and packed as a traced body's results are: cond and
            # body get the loop variables' containers (a namedtuple in a
            # list stays one argument), whatever the body returned.
            v = unpack(_body_leaves(body(*v), single, structure, len(leaves)))
            i += 1
        return v[0] if single else _like(loop_vars, v)

    where = site()
    init = _as_syms(leaves, where)
    invariants = None
    if shape_invariants is not None:
        invariants = _invariant_leaves(structure, [shape_invariants] if single else shape_invariants)
        for k, (inv, s) in enumerate(zip(invariants, init)):
            if not _relaxes(inv, s.shape):
                raise ValueError(
                    f"tl.while_loop: loop variable {k} enters the loop with shape "
                    f"{_shape_text(s.shape)}, which its shape_invariants {_shape_text(inv)} "
                    "does not allow"
                )
    counted = maximum_iterations is not None
    n = len(init)
    if counted:
        init.append(to_sym(convert_to_tensor(0), init[0] if init else None, where))
        limit = convert_to_tensor(maximum_iterations, dtype="int32")
    # Replayed for a tape's gradient (an outermost loop): an iteration
    # counter, so that the stateful callbacks of the body take the values
    # each iteration's call had (`_callbacks._replayed`).
    counter = _core.state.callback_replay is not None and not _core.state.loop_depth
    if counter:
        init.append(to_sym(convert_to_tensor(0), init[0] if init else None, where))

    def call_cond(syms):
        with _Region(loop=True):
            return _call_cond(syms)

    def _call_cond(syms):
        flat = syms[:n]
        c = cond(*unpack([SymbolicTensor(s) for s in flat]))
        c = c if isinstance(c, Tensor) else convert_to_tensor(c)
        if counted:
            c = c & (SymbolicTensor(syms[n]) < limit)
        return [to_sym(c, syms[0], site())]

    def call_body(syms):
        with _Region(loop=True):
            saved = _core.state.replay_iteration
            _core.state.replay_iteration = SymbolicTensor(syms[-1]) if counter else None
            try:
                return _call_body(syms)
            finally:
                _core.state.replay_iteration = saved

    def _call_body(syms):
        flat = syms[:n]
        out_leaves = _body_leaves(body(*unpack([SymbolicTensor(s) for s in flat])), single, structure,
                                  len(flat))
        res = _as_syms(out_leaves, site())
        for k, (c, r) in enumerate(zip(flat, res)):
            _same_carry_shape(k, c, r, invariants)
        for s in syms[n:]:
            res.append(to_sym(SymbolicTensor(s) + 1, syms[0], site()))
        return res

    out = _native.while_loop(call_cond, call_body, init, where)[:n]
    flat_out = [SymbolicTensor(s) for s in out]

    def replay(xs):
        r = while_loop(cond, body, pack(structure, xs), maximum_iterations=maximum_iterations)
        return flatten([r] if single else list(r))[0]

    _core.record(replay, leaves, flat_out, captures=True)
    v = unpack(flat_out)
    return v[0] if single else _like(loop_vars, v)


def _scalar_pred(pred, what):
    """An eager predicate as a Python bool: a scalar (TensorFlow's rule; a
    tensor of several elements would be NumPy's ambiguity error)."""
    t = pred if isinstance(pred, Tensor) else convert_to_tensor(pred)
    if t.shape != ():
        raise ValueError(f"{what}: the predicate must be a scalar bool, got shape {list(t.shape)}")
    return bool(t)


def _same_carry_shape(k, carry, result, invariants):
    """A loop variable keeps its shape (the ``while`` op's carries keep their
    types): the body changing it is a ``ValueError`` that says why."""
    cs, rs = carry.shape, result.shape
    if cs == rs or carry.dtype != result.dtype:
        return  # the same, or a dtype change the graph's own error names
    if _unknown(rs):
        raise ValueError(
            f"tl.while_loop: the body returns loop variable {k} with an unknown shape "
            f"({_shape_text(rs)}), but it enters the loop with shape {_shape_text(cs)} and a "
            f"loop variable keeps its shape: {_UNKNOWN_SHAPE_REMEDY}"
        )
    inv = None if invariants is None else invariants[k]
    relaxed = invariants is not None and _relaxes(inv, rs)
    raise ValueError(
        f"tl.while_loop: loop variable {k} enters the loop with shape {_shape_text(cs)}, but the "
        f"body returns shape {_shape_text(rs)}: tensorlift loops keep their loop variables' shapes"
        + (f", so shape_invariants ({_shape_text(inv)} here) cannot let a shape change (a "
           "deviation from TensorFlow, docs/porting-from-tensorflow.md)" if relaxed else
           " (where TensorFlow lets shape_invariants relax a shape: a deviation, "
           "docs/porting-from-tensorflow.md)")
        + "; keep the shape fixed (pad to a maximum size), or run the loop eagerly"
    )


def _like(loop_vars, values):
    """``values`` in the container ``loop_vars`` came in: a list, a tuple or
    a namedtuple (whose constructor takes its fields one by one)."""
    if isinstance(loop_vars, tuple) and hasattr(loop_vars, "_fields"):
        return type(loop_vars)(*values)
    if isinstance(loop_vars, tuple):
        return tuple(values)
    return values


class _Region:
    """While a loop or branch body is traced (tapes see the whole op)."""

    def __init__(self, loop=False):
        self.loop = loop

    def __enter__(self):
        _core.state.region_depth += 1
        _core.state.loop_depth += self.loop

    def __exit__(self, *exc):
        _core.state.region_depth -= 1
        _core.state.loop_depth -= self.loop
        return False


def _branches(fns, where, operands_like, what, names):
    structures = []
    results = []

    def wrap(fn, name):
        def run(_syms):
            with _Region():
                out = fn()
            leaves, structure = flatten(out)
            if structures and structure != structures[0]:
                # Before the native op compares the branches' types (its
                # error names its internal op, not tl.cond's arguments).
                _structure_mismatch(what, (names[0], structures[0]), (name, structure))
            structures.append(structure)
            syms = _as_syms(leaves, site())
            # (A branch's symbols are read while it is traced only.)
            types = [(s.shape, s.dtype) for s in syms]
            if results and len(results[0][1]) == len(types):
                _same_branch_shapes(what, results[0], (name, types))
            results.append((name, types))
            return syms

        return run

    return [wrap(f, n) for f, n in zip(fns, names)], structures


def _same_branch_shapes(what, first, this):
    """A branch's result of unknown shape (a callback's) where another's is
    known: a ``ValueError`` that says how to declare it."""
    (n0, t0), (n1, t1) = first, this
    for k, ((a, da), (b, db)) in enumerate(zip(t0, t1)):
        if da != db or (a != b and not _unknown(a) and not _unknown(b)):
            raise TypeError(
                f"{what}: {n1} returns result {k} as {db} {_shape_text(b)}, but {n0} returns "
                f"{da} {_shape_text(a)}: every branch must return the same dtypes and shapes"
            )
        if a != b and da == db and (_unknown(a) or _unknown(b)):
            name, shape, other, known = (n1, b, n0, a) if _unknown(b) else (n0, a, n1, b)
            raise ValueError(
                f"{what}: {name} returns result {k} with an unknown shape ({_shape_text(shape)}), "
                f"but {other} returns shape {_shape_text(known)}, and every branch must return "
                f"the same shapes: {_UNKNOWN_SHAPE_REMEDY}"
            )


def switch_case(branch_index, branch_fns, default=None, name=None):
    """``tf.switch_case``: runs ``branch_fns[branch_index]()`` (a list, or a
    dict from index to function); an index out of range runs ``default``,
    or the last branch when there is none."""
    if isinstance(branch_fns, dict):
        keys = sorted(branch_fns)
        if keys != list(range(len(keys))):
            raise ValueError(f"switch_case branch keys must be 0..n-1, got {keys}")
        fns = [branch_fns[k] for k in keys]
    else:
        fns = list(branch_fns)
    if default is not None:
        fns.append(default)
    if not fns:
        raise ValueError("switch_case needs at least one branch")
    index = branch_index if isinstance(branch_index, Tensor) else convert_to_tensor(branch_index)
    if not isinstance(index, SymbolicTensor):
        i = int(index)
        return (fns[i] if 0 <= i < len(fns) else fns[-1])()
    where = site()
    runs, structures = _branches(fns, where, index, "tl.switch_case",
                                 [f"branch {i}" for i in range(len(fns))])
    out = [SymbolicTensor(s) for s in _native.switch(index._s, runs, [], where)]
    _core.record(_from_graph, [index], out, captures=True)
    return pack(structures[0], out)


def _structure_mismatch(what, first, this):
    """TensorFlow's rule (a ``ValueError``): every branch returns the same
    number of results in the same nesting of the same containers (a dict's
    keys included), or the results would be packed under another branch's
    structure."""
    (n0, s0), (n1, s1) = first, this
    raise ValueError(
        f"{what}: {n1} returns {_structure_text(s1)}, but {n0} returns {_structure_text(s0)} "
        "(T a tensor): every branch must return the same structure (the same number of results, "
        "in the same containers), as in TensorFlow"
    )


def cond(pred, true_fn=None, false_fn=None, name=None):
    """``tf.cond``: ``true_fn()`` if ``pred`` else ``false_fn()``; only the
    branch taken runs. Both return the same structure and types."""
    if true_fn is None or false_fn is None:
        raise TypeError("tl.cond needs true_fn and false_fn")
    for what, fn in (("true_fn", true_fn), ("false_fn", false_fn)):
        if not callable(fn):
            raise TypeError(
                f"tl.cond: {what} must be callable (a function returning the branch's values), not a "
                f"{type(fn).__name__}: write lambda: value"
            )
    if not isinstance(pred, SymbolicTensor):
        return true_fn() if _scalar_pred(pred, "tl.cond") else false_fn()
    where = site()
    runs, structures = _branches([false_fn, true_fn], where, pred, "tl.cond",
                                 ["false_fn", "true_fn"])
    out = [SymbolicTensor(s) for s in _native.switch(pred._s, runs, [], where)]
    _core.record(_from_graph, [pred], out, captures=True)
    return pack(structures[0], out)


def _from_graph(xs):
    raise AssertionError("a traced branch is differentiated from the trace's graph")
