"""``tl.linalg`` (``tf.linalg``)."""

from ._ops import matmul, matrix_transpose  # noqa: F401
from ._einsum import einsum  # noqa: F401,E402
