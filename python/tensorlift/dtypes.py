"""Element types (``tf.dtypes``)."""

import builtins

import numpy as np

from . import _native


class DType:
    """An element type: ``tl.float32`` and kin. Compares equal to its name,
    to another DType of that name, and to the NumPy dtype it holds."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    @property
    def as_numpy_dtype(self):
        if self.name == "bfloat16":
            import ml_dtypes

            return ml_dtypes.bfloat16
        if self.name == "string":
            return np.object_
        return np.dtype(self.name).type

    @property
    def is_floating(self):
        return self.name in ("float16", "bfloat16", "float32", "float64")

    @property
    def is_complex(self):
        return self.name in ("complex64", "complex128")

    @property
    def is_integer(self):
        return self.name.startswith(("int", "uint"))

    @property
    def is_bool(self):
        return self.name == "bool"

    def __eq__(self, other):
        try:
            return self.name == as_dtype(other).name
        except TypeError:
            return NotImplemented

    def __hash__(self):
        return hash(self.name)

    def __repr__(self):
        return f"tl.{self.name}"

    def __str__(self):
        return f"<dtype: '{self.name}'>"

    def __reduce__(self):
        return (as_dtype, (self.name,))


_BY_NAME = {n: DType(n) for n in _native.dtype_names()}
_ALIASES = {"bool_": "bool", "str": "string", "object": "string", "bytes": "string"}


def as_dtype(value):
    """``value`` (a DType, a name, a NumPy dtype or type, a Python type) as a DType."""
    if isinstance(value, DType):
        return value
    if value is builtins.float:
        return _BY_NAME["float32"]
    if value is builtins.int:
        return _BY_NAME["int32"]
    if value is builtins.bool:
        return _BY_NAME["bool"]
    if value is builtins.str or value is builtins.bytes:
        return _BY_NAME["string"]
    if isinstance(value, builtins.str):
        name = _ALIASES.get(value, value)
    else:
        try:
            dt = np.dtype(value)
        except TypeError:
            raise TypeError(f"cannot interpret {value!r} as a tensorlift dtype") from None
        name = "string" if dt.kind in "OSU" else dt.name
    if name not in _BY_NAME:
        raise TypeError(f"unknown dtype {value!r}: one of {', '.join(sorted(_BY_NAME))}")
    return _BY_NAME[name]


globals().update(_BY_NAME)
double = _BY_NAME["float64"]
half = _BY_NAME["float16"]

__all__ = ["DType", "as_dtype", *_BY_NAME, "double", "half"]
