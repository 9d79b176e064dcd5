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
        # A list: one output per leaf of output_types (a single output type
        # is one output, whatever func returned).
        return _flatten_up_to(output_types, func(*a, **k), "")

    if not tensors:
        tensors = [convert_to_tensor(0)]
        call0 = call

        def call(_dummy):  # noqa: F811
            return call0()

    # The errors name the user's function, not this wrapper.
    call.__qualname__ = getattr(func, "__qualname__", None) or type(func).__qualname__

    shapes = None if output_shapes is None else _shapes_up_to(output_types, output_shapes)
    out = _call("py_func", call, tensors, list(out_types), stateful=stateful, name=name, output_shapes=shapes)
    out = [] if out is None else list(out)
    return pack(out_structure, out)


class _StructureError(ValueError):
    """``func``'s result not shaped like ``output_types``. The runtime's
    error for an exception a callback raised quotes its traceback, which
    here runs through this module's internals only and would put the
    message last: the error reads ``f() raised ValueError: output[1] is a
    tuple of 3, but output_types has 2`` instead (the exception, its
    traceback included, stays the error's ``__cause__``)."""

    # Named in the error as the ValueError it is to the user.
    __module__ = "builtins"
    __qualname__ = "ValueError"

    def __reduce__(self):
        return (ValueError, self.args)

    @property
    def __traceback__(self):
        # (What `traceback.format_exception` reads; the interpreter keeps
        # and `sys.exc_info()` gives the real traceback.)
        return None

    @__traceback__.setter
    def __traceback__(self, tb):
        ValueError.__traceback__.__set__(self, tb)


def _flatten_up_to(types, value, path):
    """The leaves of ``value`` at the places of ``output_types``' leaves
    (``tf.nest.flatten_up_to``); a value of another structure is a
    ValueError naming its path (an InvalidArgumentError of the call)."""
    if types is None:
        if value is not None and value != () and value != []:
            raise _StructureError(f"output{path} is {type(value).__name__}, but output_types has None there")
        return []
    if isinstance(types, dict):
        if not isinstance(value, dict):
            raise _StructureError(f"output{path} is a {type(value).__name__}, but output_types has a dict")
        if sorted(value) != sorted(types):
            raise _StructureError(
                f"output{path} has keys {sorted(value)}, but output_types declares {sorted(types)}"
            )
        return [leaf for k in sorted(types) for leaf in _flatten_up_to(types[k], value[k], f"{path}[{k!r}]")]
    if isinstance(types, (list, tuple)):
        if not isinstance(value, (list, tuple)) or len(value) != len(types):
            what = f"a {type(value).__name__} of {len(value)}" if isinstance(value, (list, tuple)) else (
                f"a {type(value).__name__}")
            raise _StructureError(f"output{path} is {what}, but output_types has {len(types)}")
        return [leaf for i, (t, v) in enumerate(zip(types, value))
                for leaf in _flatten_up_to(t, v, f"{path}[{i}]")]
    return [value]


def _shapes_up_to(types, shapes):
    """The shapes of ``output_shapes`` in the order of ``output_types``'
    leaves (a shape is a list of dims, not a structure to flatten)."""
    if isinstance(types, dict):
        return [s for k in sorted(types) for s in _shapes_up_to(types[k], shapes[k])]
    if isinstance(types, (list, tuple)):
        return [s for t, sh in zip(types, shapes) for s in _shapes_up_to(t, sh)]
    return [None if shapes is None else list(shapes)]
