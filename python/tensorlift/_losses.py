"""The ``tf.nn.*_cross_entropy_with_logits`` family, built from the core ops
in TensorFlow's numerically stable forms (so that they trace, compile and
differentiate as those do)."""

import numpy as np

from ._core import EagerTensor, Tensor, convert_to_tensor
from ._ops import (
    cast,
    equal,
    exp,
    expand_dims,
    log1p,
    log_softmax,
    reduce_sum,
    reshape,
    where,
)
from .errors import InvalidArgumentError


def _float_tensor(x, op, what, dtype=None):
    t = x if isinstance(x, Tensor) else convert_to_tensor(x, dtype=dtype)
    if not t.dtype.is_floating:
        raise TypeError(f"{op}: {what} must be a floating-point tensor, not {t.dtype.name}")
    return t


def _same_shape(op, labels, logits):
    if labels.dtype != logits.dtype:
        raise TypeError(f"{op}: labels are {labels.dtype.name} but logits are {logits.dtype.name}")
    if labels.shape is None or logits.shape is None:
        raise ValueError(f"{op} needs tensors of known rank: declare their shapes with set_shape")
    if len(labels.shape) != len(logits.shape) or any(
        a is not None and b is not None and a != b for a, b in zip(labels.shape, logits.shape)
    ):
        raise InvalidArgumentError(
            f"{op}: labels and logits must have the same shape, got {list(labels.shape)} and "
            f"{list(logits.shape)}"
        )


def softmax_cross_entropy_with_logits(labels, logits, axis=-1, name=None):
    """``tf.nn.softmax_cross_entropy_with_logits``: ``-sum(labels ·
    log_softmax(logits))`` over ``axis``, with the log-sum-exp taken after
    subtracting the maximum (no overflow). Its gradient with respect to the
    logits is ``softmax(logits) · sum(labels) - labels`` (``softmax - labels``
    for labels that are probabilities), and labels get one too
    (``-log_softmax``), as in TensorFlow 2."""
    op = "softmax_cross_entropy_with_logits"
    logits = _float_tensor(logits, op, "logits")
    # TensorFlow casts the labels to the logits' dtype (one-hot int labels
    # work), a tensor of the traced function as an eager one.
    labels = labels if isinstance(labels, Tensor) else convert_to_tensor(labels, dtype=logits.dtype)
    if labels.dtype != logits.dtype:
        labels = cast(labels, logits.dtype)
    _same_shape(op, labels, logits)
    rank = len(logits.shape)
    if rank == 0:
        raise InvalidArgumentError(f"{op}: logits must have at least one dim (the classes), got a scalar")
    if not -rank <= axis < rank:
        raise InvalidArgumentError(f"{op}: axis {axis} is out of range for logits of rank {rank}")
    return -reduce_sum(labels * log_softmax(logits, axis=axis), axis=axis)


def sparse_softmax_cross_entropy_with_logits(labels, logits, name=None):
    """``tf.nn.sparse_softmax_cross_entropy_with_logits``: ``labels`` are class
    indices (int32 or int64) of shape ``logits.shape[:-1]``; the loss is
    ``logsumexp(logits) - logits[label]``, its gradient ``softmax(logits) -
    one_hot(label)``. A label outside ``[0, classes)`` is an
    ``InvalidArgumentError`` when the labels are eager (TensorFlow's CPU
    kernel); inside a function its loss is NaN (TensorFlow's GPU kernel),
    as its value is known only when the function runs."""
    op = "sparse_softmax_cross_entropy_with_logits"
    logits = _float_tensor(logits, op, "logits")
    labels = labels if isinstance(labels, Tensor) else convert_to_tensor(labels)
    if labels.dtype.name not in ("int32", "int64"):
        raise TypeError(f"{op}: labels must be int32 or int64, not {labels.dtype.name}")
    if logits.shape is None or labels.shape is None:
        raise ValueError(f"{op} needs tensors of known rank: declare their shapes with set_shape")
    if len(logits.shape) == 0:
        raise InvalidArgumentError(f"{op}: logits must have at least one dim (the classes), got a scalar")
    if len(labels.shape) != len(logits.shape) - 1 or any(
        a is not None and b is not None and a != b for a, b in zip(labels.shape, logits.shape[:-1])
    ):
        raise InvalidArgumentError(
            f"{op}: labels must have the shape of logits without its last dim: logits "
            f"{list(logits.shape)} need labels {list(logits.shape[:-1])}, got {list(labels.shape)}"
        )
    classes = logits.shape[-1]
    if classes is None:
        raise InvalidArgumentError(f"{op}: the number of classes (the last dim of logits) must be known when traced")
    if isinstance(labels, EagerTensor):
        bad = (labels.numpy() < 0) | (labels.numpy() >= classes)
        if bad.any():
            value = labels.numpy()[bad].reshape(-1)[0]
            raise InvalidArgumentError(
                f"{op}: received a label value of {value} which is outside the valid range of [0, {classes})"
            )
    positions = convert_to_tensor(np.arange(classes).astype(labels.dtype.as_numpy_dtype))
    hot = equal(expand_dims(labels, -1), reshape(positions, [1] * len(labels.shape) + [classes]))
    loss = -reduce_sum(where(hot, log_softmax(logits), convert_to_tensor(0, dtype=logits.dtype)), axis=-1)
    if isinstance(labels, EagerTensor):
        return loss
    valid = cast(hot, logits.dtype)
    nan = convert_to_tensor(np.nan, dtype=logits.dtype)
    return where(equal(reduce_sum(valid, axis=-1), convert_to_tensor(1, dtype=logits.dtype)), loss, nan)


def sigmoid_cross_entropy_with_logits(labels=None, logits=None, name=None):
    """``tf.nn.sigmoid_cross_entropy_with_logits``: ``max(x, 0) - x·z +
    log(1 + exp(-|x|))`` for logits ``x`` and labels ``z`` (no overflow for
    large ``|x|``); its gradient with respect to the logits is
    ``sigmoid(x) - z``."""
    op = "sigmoid_cross_entropy_with_logits"
    if labels is None or logits is None:
        raise ValueError(f"{op} needs both labels and logits")
    x = _float_tensor(logits, op, "logits")
    z = _float_tensor(labels, op, "labels", dtype=x.dtype)
    _same_shape(op, z, x)
    # TensorFlow's form: one condition for both terms, so that at x == 0
    # the gradient is 1 - sigmoid(0) - z = sigmoid(0) - z (with abs and
    # maximum, whose ties split otherwise, it was 0 - z there).
    zero = convert_to_tensor(0, dtype=x.dtype)
    positive = x >= zero
    return where(positive, x, zero) - x * z + log1p(exp(where(positive, -x, x)))


__all__ = [
    "sigmoid_cross_entropy_with_logits",
    "softmax_cross_entropy_with_logits",
    "sparse_softmax_cross_entropy_with_logits",
]
