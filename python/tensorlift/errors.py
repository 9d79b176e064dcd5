"""TensorFlow's error classes (``tf.errors``), raised by tensorlift.

Every error of the compiler, the runtime or a callback is one of these; an
exception a callback raised is kept as the error's ``__cause__``.
"""


class OpError(Exception):
    """The base class of tensorlift's errors (``tf.errors.OpError``)."""

    def __init__(self, message=""):
        super().__init__(message)
        self.message = message


class InvalidArgumentError(OpError, ValueError):
    """A bad argument: wrong dtype, shape, value or count."""


class OutOfRangeError(OpError):
    """A value out of range (a callback raised StopIteration)."""


class ResourceExhaustedError(OpError, MemoryError):
    """Memory ran out (a callback raised MemoryError)."""


class UnimplementedError(OpError, NotImplementedError):
    """Not supported (a callback raised NotImplementedError)."""


class UnknownError(OpError):
    """Any other failure, e.g. an exception a callback raised."""


class InternalError(OpError):
    """A bug in tensorlift."""


class NotFoundError(OpError):
    """Something named is not there (a callback target, a file)."""


class FailedPreconditionError(OpError):
    """The system is not in a state to run this (wrong libpython, no NumPy)."""


class JitCompileError(InvalidArgumentError):
    """A function cannot be compiled with ``jit_compile=True``: the message
    names every node that cannot (e.g. a ``py_function``)."""


__all__ = [
    "OpError",
    "InvalidArgumentError",
    "OutOfRangeError",
    "ResourceExhaustedError",
    "UnimplementedError",
    "UnknownError",
    "InternalError",
    "NotFoundError",
    "FailedPreconditionError",
    "JitCompileError",
]
