"""``tl.linalg`` (``tf.linalg``)."""

from ._ops import matmul, matrix_transpose  # noqa: F401
from ._einsum import einsum  # noqa: F401,E402
from ._more_ops2 import band_part, global_norm, norm  # noqa: F401,E402
