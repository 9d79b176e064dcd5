"""``tl.nn`` (``tf.nn``): activations built from the core ops."""

from ._ops import log_softmax, relu, sigmoid, softmax, tanh  # noqa: F401
