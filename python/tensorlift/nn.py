"""``tl.nn`` (``tf.nn``): activations built from the core ops."""

from ._more_ops import (  # noqa: F401
    elu, gelu, l2_normalize, leaky_relu, moments, relu6, silu, softplus, swish,
)
from ._ops import log_softmax, relu, sigmoid, softmax, tanh  # noqa: F401
from ._losses import (  # noqa: F401,E402
    sigmoid_cross_entropy_with_logits, softmax_cross_entropy_with_logits,
    sparse_softmax_cross_entropy_with_logits,
)
from ._sort import top_k  # noqa: F401,E402  (tf.nn.top_k)
from ._more_ops2 import bias_add, dropout, embedding_lookup, in_top_k, l2_loss  # noqa: F401,E402
