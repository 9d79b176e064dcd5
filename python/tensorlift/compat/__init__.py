"""``tl.compat``: TensorFlow 1 names."""

from . import v1  # noqa: F401
