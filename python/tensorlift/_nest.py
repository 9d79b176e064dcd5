"""Flattening nested Python structures of tensors (lists, tuples,
namedtuples, dicts), as ``tf.nest`` does."""

class _Leaf:
    """The place of a leaf in a structure (pickles as this module's ``_LEAF``)."""

    def __reduce__(self):
        return "_LEAF"


_LEAF = _Leaf()


def flatten(value):
    """``(leaves, structure)``: the tensors and other leaves of ``value`` in
    order, and what ``pack`` needs to rebuild it."""
    leaves = []

    def walk(v):
        if isinstance(v, tuple) and hasattr(v, "_fields"):
            return (type(v), [walk(x) for x in v])
        if isinstance(v, (list, tuple)):
            return (type(v), [walk(x) for x in v])
        if isinstance(v, dict):
            keys = sorted(v)
            return (dict, keys, [walk(v[k]) for k in keys])
        if v is None:
            return None
        leaves.append(v)
        return _LEAF

    return leaves, walk(value)


def pack(structure, leaves):
    """Rebuilds a structure from ``flatten`` with ``leaves`` in place."""
    it = iter(leaves)

    def build(s):
        if s is _LEAF:
            return next(it)
        if s is None:
            return None
        if s[0] is dict:
            return {k: build(x) for k, x in zip(s[1], s[2])}
        kind, items = s
        built = [build(x) for x in items]
        if kind is list:
            return built
        if kind is tuple:
            return tuple(built)
        return kind(*built)

    return build(structure)



def loose(structure):
    """A ``flatten`` structure, hashable, with lists and tuples alike: what
    must match where TensorFlow lets a tuple stand for a list (a loop body's
    results, an argument against its input_signature)."""
    if not isinstance(structure, tuple):
        return structure
    if structure[0] is dict:
        return (dict, tuple(structure[1]), tuple(loose(x) for x in structure[2]))
    kind = tuple if structure[0] in (list, tuple) else structure[0]
    return (kind, tuple(loose(x) for x in structure[1]))
