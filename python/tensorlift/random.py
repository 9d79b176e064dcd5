"""``tl.random`` (``tf.random``): stateless draws from a counter-based
generator built with integer ops, and stateful ones drawn by NumPy
(python/tensorlift/_random.py)."""

from ._random import (  # noqa: F401
    categorical, normal, set_seed, shuffle, stateless_categorical, stateless_normal,
    stateless_truncated_normal, stateless_uniform, truncated_normal, uniform,
)
