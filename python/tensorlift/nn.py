"""``tl.nn`` (``tf.nn``): activations built from the core ops."""

from ._more_ops import (  # noqa: F401
    elu, gelu, l2_normalize, leaky_relu, moments, relu6, silu, softplus, swish,
)
from ._ops import log_softmax, relu, sigmoid, softmax, tanh  # noqa: F401
