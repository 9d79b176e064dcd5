"""``tl.contrib``."""

from . import framework  # noqa: F401
