"""Loops and branches: ``tl.while_loop``, ``tl.cond``, ``tl.switch_case``.

On eager values they run as Python loops and branches; while a function
is traced they become ``while`` and ``case`` ops of its graph (compiled to
native loops and branches under ``jit_compile=True``), and only the branch
taken runs.
"""

from . import _core, _native
from ._core import SymbolicTensor, Tensor, convert_to_tensor, site, to_sym
from ._nest import flatten, pack


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
        while (maximum_iterations is None or i < int(maximum_iterations)) and bool(cond(*v)):
            out = body(*v)
            v = [out] if single or not isinstance(out, (list, tuple)) else list(out)
            i += 1
        return v[0] if single else _like(loop_vars, v)

    where = site()
    init = _as_syms(leaves, where)
    counted = maximum_iterations is not None
    if counted:
        init.append(to_sym(convert_to_tensor(0), init[0] if init else None, where))
        limit = convert_to_tensor(maximum_iterations, dtype="int32")

    def call_cond(syms):
        with _Region():
            return _call_cond(syms)

    def _call_cond(syms):
        flat = syms[:-1] if counted else syms
        c = cond(*unpack([SymbolicTensor(s) for s in flat]))
        c = c if isinstance(c, Tensor) else convert_to_tensor(c)
        if counted:
            c = c & (SymbolicTensor(syms[-1]) < limit)
        return [to_sym(c, syms[0], site())]

    def call_body(syms):
        with _Region():
            return _call_body(syms)

    def _call_body(syms):
        flat = syms[:-1] if counted else syms
        out = body(*unpack([SymbolicTensor(s) for s in flat]))
        out = [out] if single or not isinstance(out, (list, tuple)) else list(out)
        out_leaves, _ = flatten(out)
        if len(out_leaves) != len(flat):
            raise ValueError(
                f"the body of tl.while_loop returned {len(out_leaves)} value(s), but the loop has "
                f"{len(flat)} loop variable(s)"
            )
        res = _as_syms(out_leaves, site())
        if counted:
            res.append(to_sym(SymbolicTensor(syms[-1]) + 1, syms[0], site()))
        return res

    out = _native.while_loop(call_cond, call_body, init, where)
    if counted:
        out = out[:-1]
    flat_out = [SymbolicTensor(s) for s in out]

    def replay(xs):
        r = while_loop(cond, body, pack(structure, xs), maximum_iterations=maximum_iterations)
        return flatten([r] if single else list(r))[0]

    _core.record(replay, leaves, flat_out)
    v = unpack(flat_out)
    return v[0] if single else _like(loop_vars, v)


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

    def __enter__(self):
        _core.state.region_depth += 1

    def __exit__(self, *exc):
        _core.state.region_depth -= 1
        return False


def _branches(fns, where, operands_like):
    structures = []

    def wrap(fn):
        def run(_syms):
            with _Region():
                out = fn()
            leaves, structure = flatten(out)
            structures.append(structure)
            return _as_syms(leaves, site())

        return run

    return [wrap(f) for f in fns], structures


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
    runs, structures = _branches(fns, where, index)
    out = _native.switch(index._s, runs, [], where)
    _same_structures("tl.switch_case", [f"branch {i}" for i in range(len(fns))], structures)
    return pack(structures[0], [SymbolicTensor(s) for s in out])


def _same_structures(what, names, structures):
    """TensorFlow's rule: every branch returns the same nesting of the same
    containers (a dict's keys included), or the results would be packed
    under another branch's keys."""
    first = structures[0]
    for name, s in zip(names[1:], structures[1:]):
        if s != first:
            def shape(st):
                return repr(pack(st, iter(lambda: "T", None)))
            raise ValueError(
                f"{what}: {names[0]} returns {shape(first)} but {name} returns {shape(s)} "
                "(T a tensor): every branch must return the same structure"
            )


def cond(pred, true_fn=None, false_fn=None, name=None):
    """``tf.cond``: ``true_fn()`` if ``pred`` else ``false_fn()``; only the
    branch taken runs. Both return the same structure and types."""
    if true_fn is None or false_fn is None:
        raise TypeError("tl.cond needs true_fn and false_fn")
    if not isinstance(pred, SymbolicTensor):
        return true_fn() if bool(pred) else false_fn()
    where = site()
    runs, structures = _branches([false_fn, true_fn], where, pred)
    out = _native.switch(pred._s, runs, [], where)
    _same_structures("tl.cond", ["false_fn", "true_fn"], structures)
    return pack(structures[0], [SymbolicTensor(s) for s in out])
