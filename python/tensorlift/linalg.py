"""``tl.linalg`` (``tf.linalg``)."""

from ._ops import matmul, matrix_transpose  # noqa: F401
