"""``tl.random`` (``tf.random``): stateless draws from a counter-based
generator built with integer ops, and stateful ones drawn by NumPy
(python/tensorlift/_random.py)."""

from ._random import normal, set_seed, stateless_normal, stateless_uniform, uniform  # noqa: F401
