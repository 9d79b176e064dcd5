"""``tl.math``: the elementwise and reduction ops (``tf.math``)."""

from ._ops import (  # noqa: F401
    abs, add, argmax, argmin, ceil, cos, divide, equal, erf, exp, expm1, floor, floordiv, floormod,
    greater, greater_equal, is_finite, less, less_equal, log, log1p, log_softmax, logical_and,
    logical_not, logical_or, logical_xor, maximum, minimum, mod, multiply, negative, not_equal,
    pow, reciprocal, reduce_all, reduce_any, reduce_logsumexp, reduce_max, reduce_mean,
    reduce_min, reduce_prod, reduce_sum, round, rsqrt, sigmoid, sign, sin, softmax, sqrt,
    square, subtract, tanh, truediv, truncatemod,
)
from ._more_ops import (  # noqa: F401,E402
    add_n, divide_no_nan, is_inf, is_nan, l2_normalize, reduce_std, reduce_variance, softplus,
    squared_difference, tan, xlogy,
)
from ._scan import cumprod, cumsum  # noqa: F401,E402
from ._scatter import (  # noqa: F401,E402
    segment_max, segment_mean, segment_min, segment_sum, unsorted_segment_max, unsorted_segment_mean,
    unsorted_segment_min, unsorted_segment_sum,
)
from ._sort import top_k  # noqa: F401,E402
from ._more_ops2 import (  # noqa: F401,E402
    bincount, in_top_k, invert_permutation, log_sigmoid, segment_prod, unsorted_segment_prod,
)
