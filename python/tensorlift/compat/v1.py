"""``tl.compat.v1``: ``py_func`` under its TensorFlow 1 name."""

from .._callbacks import py_func  # noqa: F401
