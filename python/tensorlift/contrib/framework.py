"""``tl.contrib.framework.py_func``: TF 1's contrib ``py_func`` with
args/kwargs and nested output types and shapes."""

from .._callbacks import _call
from .._core import Tensor, convert_to_tensor
from .._nest import flatten, pack


def py_func(func, args=(), kwargs=None, output_types=None, output_shapes=None, stateful=True, name=None):
    """Calls ``func(*args, **kwargs)`` on NumPy values; ``args`` and
    ``kwargs`` may nest tensors and Python values (Python values are passed
    as they are); ``output_types`` (and ``output_shapes``) give the nested
    structure of the results."""
    kwargs = kwargs or {}
    leaves, structure = flatten([list(args), kwargs])
    tensor_pos = [i for i, v in enumerate(leaves) if isinstance(v, Tensor)]
    tensors = [leaves[i] for i in tensor_pos]
    out_types, out_structure = flatten(output_types)

    def call(*arrays):
        vals = list(leaves)
        for i, a in zip(tensor_pos, arrays):
            vals[i] = a
        a, k = pack(structure, vals)
        r = func(*a, **k)
        flat, _ = flatten(r)
        return flat

    if not tensors:
        tensors = [convert_to_tensor(0)]
        call0 = call

        def call(_dummy):  # noqa: F811
            return call0()

    shapes = None if output_shapes is None else _shapes_up_to(output_types, output_shapes)
    out = _call("py_func", call, tensors, list(out_types), stateful=stateful, name=name, output_shapes=shapes)
    out = [] if out is None else list(out)
    return pack(out_structure, out)


def _shapes_up_to(types, shapes):
    """The shapes of ``output_shapes`` in the order of ``output_types``'
    leaves (a shape is a list of dims, not a structure to flatten)."""
    if isinstance(types, dict):
        return [s for k in sorted(types) for s in _shapes_up_to(types[k], shapes[k])]
    if isinstance(types, (list, tuple)):
        return [s for t, sh in zip(types, shapes) for s in _shapes_up_to(t, sh)]
    return [None if shapes is None else list(shapes)]
