"""``tl.function``: Python functions traced into graphs, once per input
signature, and run interpreted or compiled (``jit_compile=True``)."""

import collections
import functools
import inspect
import operator
import pickle
import sys
import warnings
import weakref

import numpy as np

from . import _core, _native
from ._core import EagerTensor, SymbolicTensor, Tensor, convert_to_tensor, site, to_sym
from ._nest import flatten, loose, pack
from .dtypes import as_dtype


class TensorSpec:
    """The type of a function's input (``tf.TensorSpec``): a shape (None
    for an unknown dimension) and a dtype."""

    def __init__(self, shape, dtype="float32", name=None):
        # None: any rank (TensorFlow's TensorSpec(None, ...)).
        try:
            # (operator.index: a float dim is an error, not truncated.)
            self.shape = None if shape is None else tuple(None if d is None else operator.index(d) for d in shape)
        except TypeError:
            raise TypeError(f"TensorSpec dimensions are integers or None, got {shape!r}") from None
        if self.shape is not None and any(d is not None and d < 0 for d in self.shape):
            raise ValueError(f"TensorSpec dimensions are sizes (>= 0) or None, got {list(self.shape)}")
        self.dtype = as_dtype(dtype)
        self.name = name

    @classmethod
    def from_tensor(cls, tensor, name=None):
        return cls(tensor.shape, tensor.dtype, name)

    def _native(self):
        return (self.dtype.name, None if self.shape is None else list(self.shape), self.name)

    def is_compatible_with(self, t):
        t = convert_to_tensor(t)
        if t.dtype != self.dtype:
            return False
        if self.shape is None:
            return True
        return len(t.shape) == len(self.shape) and all(a is None or a == b for a, b in zip(self.shape, t.shape))

    def __eq__(self, other):
        return isinstance(other, TensorSpec) and (self.shape, self.dtype, self.name) == (
            other.shape,
            other.dtype,
            other.name,
        )

    def __hash__(self):
        return hash((self.shape, self.dtype, self.name))

    def __repr__(self):
        return f"TensorSpec(shape={self.shape}, dtype={self.dtype!r}, name={self.name!r})"

    def __reduce__(self):
        return (TensorSpec, (self.shape, self.dtype.name, self.name))


def _key(tensors):
    return tuple((t.dtype.name, None if t.shape is None else tuple(t.shape)) for t in tensors)


def _is_static(a):
    """Whether a call's argument is a static Python value (part of the
    trace key, as in TensorFlow) rather than a tensor input: anything but a
    tensor, a NumPy array or scalar, and a list or tuple (of numbers,
    converted to a tensor; of tensors or arrays, refused by ``_convert``)."""
    return not isinstance(a, (Tensor, np.ndarray, np.generic, list, tuple))


def _holds_arrays(v, specs=False):
    """Whether a list, tuple or dict holds a tensor or a NumPy array (with
    ``specs``, a TensorSpec), at any depth: a nested structure of tensors in
    TensorFlow's terms, not a list of numbers."""
    kinds = (Tensor, np.ndarray, TensorSpec) if specs else (Tensor, np.ndarray)
    items = v.values() if isinstance(v, dict) else v
    return any(
        isinstance(x, kinds) or (isinstance(x, (list, tuple, dict)) and _holds_arrays(x, specs)) for x in items
    )


def _is_nest(a, specs=False):
    """Whether an argument is a nested structure of tensors (TensorFlow's
    ``tf.nest``): its tensors are inputs of the trace, its structure and
    other leaves part of the trace key."""
    return isinstance(a, (list, tuple, dict)) and _holds_arrays(a, specs)


def _frozen(structure):
    """A ``flatten`` structure as a hashable value."""
    if isinstance(structure, (list, tuple)):
        return tuple(_frozen(s) for s in structure)
    return structure


class _Nest:
    """A nested structure argument in a trace key: its structure and its
    leaves that are not tensors (Python values, static as TensorFlow's),
    and the number of tensor leaves it takes from the inputs."""

    __slots__ = ("structure", "statics", "count", "key", "keywords")

    def __init__(self, structure, statics, count, name, position, keywords=False):
        self.structure = structure
        self.statics = statics
        self.count = count
        self.keywords = keywords
        self.key = (_Nest, _frozen(structure), tuple((j, _static_key(v, name, position)) for j, v in statics),
                    count, keywords)

    @classmethod
    def of(cls, value, name, position, specs=False):
        """``(nest, tensor leaves)`` of an argument."""
        leaves, structure = flatten(value)
        kinds = (Tensor, np.ndarray, np.generic, TensorSpec) if specs else (Tensor, np.ndarray, np.generic)
        statics = tuple((j, v) for j, v in enumerate(leaves) if not isinstance(v, kinds))
        tensors = [v for v in leaves if isinstance(v, kinds)]
        nest = cls(structure, statics, len(tensors), name, position, isinstance(value, _Keywords))
        return nest, tensors

    def build(self, tensors):
        """The argument rebuilt with ``tensors`` for its tensor leaves."""
        leaves = list(tensors)
        for j, v in self.statics:
            leaves.insert(j, v)
        value = pack(self.structure, leaves)
        return _Keywords(value) if self.keywords else value


class _Keywords(dict):
    """A call's keyword-only arguments and ``**kwargs`` (see ``_bind``): a
    static argument when it holds no tensor (hashable by its items), else
    a nested structure rebuilt as one."""

    def __hash__(self):
        # (A value that cannot be hashed raises here: `_static_key` says so.)
        return hash(tuple(sorted((k, _static_key(v, "", k)) for k, v in self.items())))


def _static_key(v, name="function", position=0):
    """A static argument as a dict key: its type and value (``1``, ``1.0``
    and ``True`` differ; every NaN is one key). A value that cannot be
    hashed (a dict, a set, an object comparing by value) is refused: keyed
    by identity, every new one would trace again and be kept, and one
    changed in place would run a stale trace."""
    if isinstance(v, float) and v != v:
        return (float, "nan")
    try:
        hash(v)
    except TypeError:
        what = f"argument {position} is a {type(v).__name__}"
        if isinstance(v, _Keywords):
            what = "a keyword argument is a value"
        raise TypeError(
            f"function '{name}': {what} which cannot be a static argument (it is not hashable): pass "
            "its tensors as separate arguments, or a list or tuple"
        ) from None
    return (type(v), v)


def _merge(tensors, statics):
    """The positional arguments: ``statics`` ((position, value) pairs) put
    back among the tensors, a nested structure (``_Nest``) taking its
    tensors from them."""
    args = []
    it = iter(tensors)
    at = dict(statics)
    last = max(at, default=-1)
    i = 0
    while True:
        v = at.get(i, _MISSING)
        if isinstance(v, _Nest):
            args.append(v.build([next(it) for _ in range(v.count)]))
        elif v is not _MISSING:
            args.append(v)
        else:
            t = next(it, _MISSING)
            if t is _MISSING:
                if i > last:
                    return args
                raise AssertionError("a static argument's position is past the arguments")
            args.append(t)
        i += 1


_MISSING = object()

# Traces of one function after which it warns (once).
_RETRACE_WARNING = 32


def _symbolic(args):
    """Whether a call's arguments hold a symbolic tensor (also inside a
    nested structure or keyword arguments): the call is made while another
    function is traced, and is inlined there."""
    return any(isinstance(x, SymbolicTensor) for x in flatten(list(args))[0])

# What a trace error says when a gradient needed static shapes.
_STATIC_SHAPES = _native.NEEDS_STATIC_SHAPES


class Function:
    """A traced function (``tf.function``); see ``function``."""

    def __init__(self, python_function, input_signature=None, jit_compile=None, name=None):
        self.python_function = python_function
        self.jit_compile = bool(jit_compile)
        self._name = name or getattr(python_function, "__name__", "function")
        self._set_signature(input_signature)
        self._site = _definition_site(python_function)
        self._structures = {}
        # Static arguments (Python values: numbers, strings, None, objects)
        # -> (native function traced with them, its structures by
        # signature). Each set of static values is traced separately.
        self._static = {}
        # id(instance) -> (a weak reference to it, this function bound to
        # it): a method (see __get__), by identity, not by `==`.
        self._bound = {}
        # Callback target -> the callable it calls (for pickling).
        self._callbacks = {}
        # Set on a function unpickled from its graphs: signature -> (text,
        # structure, native GraphFunction or None until first call).
        self._graphs = None
        # Wraps a call's results when every trace so far has one structure.
        self._unpack = None
        try:
            self._signature = inspect.signature(python_function)
        except (TypeError, ValueError):
            self._signature = None
        sig = None if self.input_signature is None else [s._native() for s in self._flat_signature]
        # The native function holds its body weakly: a strong reference
        # would make a cycle through Rust that Python's collector cannot
        # see, and the function and its callbacks would never be freed.
        self._native = _native.Function(_WeakBody(self), self._name, self._site, self.jit_compile, sig)
        # Traced per concrete shape instead, once a trace under an
        # input_signature with None dims needed static shapes (a gradient
        # inside the function: see _run).
        self._per_shape = None
        functools.update_wrapper(self, python_function)

    def _count_trace(self):
        self._traces = getattr(self, "_traces", 0) + 1
        if self._traces == _RETRACE_WARNING:
            warnings.warn(
                f"tl.function '{self._name}' (defined at {self._site[0]}:{self._site[1]}) has been traced "
                f"{self._traces} times: every new input shape, dtype or Python value (a static argument) "
                "is a trace and a compile, kept as long as the function. Pass tensors instead of Python "
                "numbers, give an input_signature with None dims, or create the function once outside "
                "the loop",
                RuntimeWarning,
                stacklevel=4,
            )

    def _set_signature(self, input_signature):
        self.input_signature = None if input_signature is None else list(input_signature)
        # The signature's TensorSpecs in order (tf.nest.flatten), and whether
        # it nests them (input_signature=[[spec_w, spec_b], spec_x]).
        self._flat_signature = None
        self._signature_structure = None
        self._nested_signature = False
        if self.input_signature is None:
            return
        self._flat_signature, self._signature_structure = flatten(self.input_signature)
        for s in self._flat_signature:
            if not isinstance(s, TensorSpec):
                raise TypeError(
                    f"function '{self._name}': input_signature holds a {type(s).__name__} ({_short(s)}); "
                    "it takes TensorSpecs, in lists, tuples and dicts"
                )
        self._nested_signature = any(not isinstance(s, TensorSpec) for s in self.input_signature)

    def _invoke(self, args):
        """Calls the Python function on positional ``args``, the last of
        them its keyword arguments when it is a ``_Keywords``."""
        if self.python_function is None:
            raise TypeError(
                f"function '{self._name}' was unpickled from its graphs: it runs on tensors, but it cannot "
                "be traced into another tl.function (define it at module level to pickle it by reference)"
            )
        if args and isinstance(args[-1], _Keywords):
            return self.python_function(*args[:-1], **args[-1])
        return self.python_function(*args)

    def _arguments(self, tensors, statics):
        """The positional arguments of a call whose inputs are ``tensors``:
        with its static values and nested structures rebuilt."""
        if statics is not None:
            return _merge(tensors, statics[1])
        if self._nested_signature:
            return pack(self._signature_structure, tensors)
        return tensors

    def _body(self, syms, statics=None):
        args = [SymbolicTensor(s) for s in syms]
        _core.state.tracing_functions.append(self)
        try:
            out = self._invoke(self._arguments(args, statics))
        finally:
            _core.state.tracing_functions.pop()
        leaves, structure = flatten(out)
        like = syms[0] if syms else None
        where = site()
        flat = []
        for leaf in leaves:
            t = leaf if isinstance(leaf, Tensor) else convert_to_tensor(leaf)
            flat.append(to_sym(t, like, where))
        if statics is not None:
            self._static[statics[0]][1][_key(args)] = (structure, len(flat), _unpacker(structure))
            self._count_trace()
            return flat
        self._structures[_key(args)] = (structure, len(flat), _unpacker(structure))
        self._count_trace()
        first = next(iter(self._structures.values()))[0]
        same = all(_same_structure(v[0], first) for v in self._structures.values())
        plain = same and self._graphs is None and self._per_shape is None
        self._unpack = self._structures[_key(args)][2] if plain else None
        return flat

    def _bind(self, args, kwargs):
        if self._signature is None:
            return list(args)
        if self.input_signature is not None:
            n = len(self.input_signature)
            bound = self._signature.bind_partial(*args, **kwargs)
            values = list(bound.args)
            if len(values) > n or len(bound.kwargs) > 0:
                raise TypeError(
                    f"function '{self._name}' has an input_signature of {n} argument(s); the other "
                    f"arguments keep their defaults (got {len(values) + len(bound.kwargs)} argument(s))"
                )
            return values
        if not kwargs:
            return list(args)
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        # Keyword-only parameters and **kwargs: one more argument, passed
        # back as keywords (static values, tensors or structures of them).
        return list(bound.args) + ([_Keywords(bound.kwargs)] if bound.kwargs else [])

    def _convert(self, args, positions=None, specs=None):
        tensors = []
        for k, a in enumerate(args):
            i = k if positions is None else positions[k]
            spec = None if specs is None else specs[k]
            if isinstance(a, Tensor):
                tensors.append(a)
                continue
            if spec is not None and isinstance(a, (np.ndarray, np.generic)):
                # NumPy values keep their dtype, which must be the
                # signature's (TensorFlow's rule); casting them changed
                # values (2**40 wrapped, 1.7 truncated) on the first call
                # only, the later ones taking the native path.
                spec = None
            try:
                tensors.append(convert_to_tensor(a, dtype=None if spec is None else spec.dtype))
            except (TypeError, ValueError) as e:
                what = "its input_signature's " + spec.dtype.name if spec is not None else "a tensor"
                raise TypeError(
                    f"function '{self._name}': argument {i} ({type(a).__name__} {_short(a)}) cannot be "
                    f"converted to {what}: {e}"
                ) from e
        return tensors

    def _convert_signed(self, args):
        """The tensors of ``args`` under the input_signature, nested
        structures flattened against the signature's."""
        if not self._nested_signature:
            return self._convert(args, specs=self.input_signature)
        tensors = []
        for i, (a, spec) in enumerate(zip(args, self.input_signature)):
            if isinstance(spec, TensorSpec):
                tensors += self._convert([a], [i], [spec])
                continue
            leaves, structure = flatten(a)
            specs, expected = flatten(spec)
            if loose(structure) != loose(expected):
                raise TypeError(
                    f"function '{self._name}': argument {i} ({_short(a, 80)}) does not have the structure "
                    f"of its input_signature ({_short(spec, 160)})"
                )
            tensors += self._convert(leaves, [i] * len(leaves), specs)
        return tensors

    def _split(self, args):
        """``(statics, tensors)``: the static Python values and nested
        structures among ``args`` (None when there are none; else their key
        and (position, value or ``_Nest``) pairs) and the tensors of the
        other arguments and of the structures. With an input_signature every
        argument is a tensor or a structure of them."""
        if self.input_signature is not None:
            return None, self._convert_signed(args)
        pairs = []
        tensors = []
        for i, a in enumerate(args):
            if _is_nest(a):
                nest, leaves = _Nest.of(a, self._name, i)
                pairs.append((i, nest))
                tensors += self._convert(leaves, [i] * len(leaves))
            elif _is_static(a):
                pairs.append((i, a))
            else:
                tensors += self._convert([a], [i])
        return self._statics(pairs), tensors

    def _statics(self, pairs):
        """The static arguments of a call (None when there are none): their
        trace key and their (position, value or ``_Nest``) pairs."""
        if not pairs:
            return None
        key = tuple((i, v.key if isinstance(v, _Nest) else _static_key(v, self._name, i)) for i, v in pairs)
        return key, tuple(pairs)

    def _native_for(self, statics):
        """The native function traced with static arguments ``statics``."""
        if statics is None:
            return self._native
        entry = self._static.get(statics[0])
        if entry is None:
            native = _native.Function(_WeakBody(self, statics), self._name, self._site, self.jit_compile, None)
            # (setdefault: two threads making the first call with the same
            # new static value share the first one's entry, whose structures
            # the trace records, instead of replacing it.)
            entry = self._static.setdefault(statics[0], (native, {}))
        return entry[0]

    def _go_per_shape(self, statics, e):
        """Whether, after error ``e``, the function is traced per concrete
        shape from now on: a gradient needed static shapes where the
        signature has None dims (a train step over batches of any size),
        as the compiled code is specialized per shape anyway."""
        if statics is not None or self._per_shape is not None:
            return False
        if _STATIC_SHAPES not in str(e) and _core.KNOWN_WHEN_TRACED not in str(e):
            return False
        if not self._relaxed():
            return False
        self._per_shape = _native.Function(_WeakBody(self), self._name, self._site, self.jit_compile, None)
        self._unpack = None
        return True

    def _relaxed(self):
        """Whether the input_signature leaves a dim (or a rank) unknown."""
        return self._flat_signature is not None and any(
            s.shape is None or None in s.shape for s in self._flat_signature
        )

    def _check_shapes(self, tensors):
        """The input_signature's check, for the per-shape traces (which
        take any shapes)."""
        for i, (t, spec) in enumerate(zip(tensors, self._flat_signature)):
            if not spec.is_compatible_with(t):
                raise _errors().InvalidArgumentError(
                    f"input {i} of function '{self._name}' is {t.dtype.name}{list(t.shape)}, which does not "
                    f"match its input_signature {spec}"
                )

    def _check_no_statics(self, statics):
        if statics is not None:
            raise _errors().InvalidArgumentError(
                f"function '{self._name}' was unpickled from its graphs, which take tensors only; "
                f"it cannot take the Python value(s) {[v for _, v in statics[1]]}"
            )

    def _run(self, statics, tensors):
        """Runs the function on converted arguments."""
        if self._graphs is not None:
            self._check_no_statics(statics)
            return self._call_graph(tensors)
        if statics is None and self._per_shape is not None:
            self._check_shapes(tensors)
            out = self._per_shape([t._v for t in tensors])
            return self._structure_for(tensors)[2](out)
        try:
            out = self._native_for(statics)([t._v for t in tensors])
        except (TypeError, ValueError) as e:  # (InvalidArgumentError is a ValueError)
            if self._go_per_shape(statics, e):
                return self._run(statics, tensors)
            raise
        if statics is None:
            return self._structure_for(tensors)[2](out)
        structures = self._static[statics[0]][1]
        # Traced under a relaxed signature: any trace's structure fits.
        entry = structures.get(_key(tensors)) or next(iter(structures.values()))
        return entry[2](out)

    def __call__(self, *args, **kwargs):
        if _core.state.tapes and self.python_function is not None:
            return self._call_on_tapes(args, kwargs)
        if _core.state.tapes and self._graphs is not None:
            watched = [t for t in flatten([args, kwargs])[0] if isinstance(t, Tensor)
                       and any(tape._recording and id(t) in tape._live for tape in _core.state.tapes)]
            if watched:
                raise TypeError(
                    f"function '{self._name}' was unpickled from its graphs, which a GradientTape cannot "
                    "differentiate (it replays the Python function): define it at module level to pickle "
                    "it by reference, or call it outside the tape"
                )
        return self._call(args, kwargs)

    def _call_on_tapes(self, args, kwargs):
        """A call while gradient tapes record: the call is one op on them,
        replayed by tracing the Python function inline."""
        args = self._bind(args, kwargs)
        if _symbolic(args):
            return self._invoke(args)
        statics, tensors = self._split(args)
        # What its stateful callbacks return, for the replay (a dropout
        # mask drawn by tl.random must be the one the call used).
        outer, _core.state.callback_log = _core.state.callback_log, {}
        try:
            result = self._run(statics, tensors)
        finally:
            log, _core.state.callback_log = _core.state.callback_log, outer
        flat, _ = flatten(result)

        def replay(xs):
            saved = _core.state.callback_replay
            _core.state.callback_replay = {k: v if v is None else collections.deque(v) for k, v in log.items()}
            try:
                leaves, _ = flatten(self._invoke(self._arguments(xs, statics)))
            finally:
                _core.state.callback_replay = saved
            return [x if isinstance(x, Tensor) else convert_to_tensor(x) for x in leaves]

        replay.symbolic_inputs = True
        _core.record(replay, tensors, [x for x in flat if isinstance(x, Tensor)])
        return result

    def _call(self, args, kwargs):
        unpack = self._unpack
        if unpack is not None and not kwargs:
            # The common call: tensors or arrays in, one traced structure.
            out = self._native.call_fast(args)
            if out is not None:
                return unpack(out)
        if kwargs or self.input_signature is not None:
            args = self._bind(args, kwargs)
        if _symbolic(args):
            # Called while another function is traced: inline it.
            return self._invoke(args)
        statics, tensors = self._split(args)
        return self._run(statics, tensors)

    def call_into(self, outputs, *args, **kwargs):
        """Calls the function on ``args`` writing its results into
        ``outputs`` instead of returning new arrays: a NumPy array for a
        function with one result, else a list or tuple of arrays in the order
        of the flattened results (``tf.nest.flatten``). Each must be
        writeable and C-contiguous, of its result's dtype and shape, and share
        no memory with another. A caller that keeps results (a training loop
        storing every step's output, a pipeline filling preallocated buffers)
        then reuses its own memory each call instead of receiving fresh
        arrays, whose first touch costs page faults. Returns ``outputs``.

        Under ``jit_compile`` the compiled kernels write straight into
        arrays aligned to 16 bytes (NumPy's default); other results are
        copied in. A mismatch raises ``InvalidArgumentError`` naming the
        output, before anything runs; after another error the arrays'
        contents are unspecified. The call is not recorded by a
        ``GradientTape``; arrays passed as arguments are read before any
        output is written, so ``f.call_into(x, x)`` updates ``x`` in place.
        """
        single = isinstance(outputs, np.ndarray)
        if not single and not isinstance(outputs, (list, tuple)):
            raise TypeError(
                f"call_into: outputs must be a NumPy array or a list or tuple of them, not "
                f"{type(outputs).__name__}"
            )
        outs = [outputs] if single else list(outputs)
        if kwargs or self.input_signature is not None:
            args = self._bind(args, kwargs)
        if _symbolic(args):
            raise TypeError(
                f"call_into: function '{self._name}' was called while another function is traced; "
                "call it directly there (its results are symbolic, they cannot be written into arrays)"
            )
        statics, tensors = self._split(args)
        if self._graphs is not None:
            self._check_no_statics(statics)
            native = self._graph_native(tensors)[0]
        else:
            native = self._native_for(statics)
            if statics is None and self._per_shape is not None:
                self._check_shapes(tensors)
                native = self._per_shape
        try:
            native.call_into([t._v for t in tensors], outs)
        except (TypeError, ValueError) as e:  # (InvalidArgumentError is a ValueError)
            if self._graphs is not None or not self._go_per_shape(statics, e):
                raise
            self._check_shapes(tensors)
            self._per_shape.call_into([t._v for t in tensors], outs)
        return outputs

    # --- pickling -------------------------------------------------------------

    def __reduce__(self):
        """A module-level function pickles by reference (the other process
        imports it and traces it there). Any other pickles as the graph
        text of each signature traced so far plus its callbacks, each by
        reference where it is importable and by value (cloudpickle)
        otherwise; the other process compiles it on its first call."""
        module = sys.modules.get(getattr(self, "__module__", None) or "")
        obj = module
        for part in getattr(self, "__qualname__", "").split("."):
            obj = getattr(obj, part, None)
        if obj is self:
            return self.__qualname__
        graphs = self._graph_texts()
        if not graphs and self._static:
            raise pickle.PicklingError(
                f"function '{self._name}' (defined at {self._site[0]}:{self._site[1]}) is not importable "
                "and has been traced only with static (Python value) arguments or nested structures, which "
                "its pickled graphs cannot take: define it at module level to pickle it by reference"
            )
        if not graphs:
            raise pickle.PicklingError(
                f"function '{self._name}' (defined at {self._site[0]}:{self._site[1]}) is not importable "
                "and has not been traced: call it (or get_concrete_function) once before pickling, so "
                "that its graph can be pickled"
            )
        callbacks = [(target, _picklable(self._name, target, fn)) for target, fn in self._callbacks.items()]
        sig = None if self.input_signature is None else list(self.input_signature)
        return (_rebuild, (self._name, self._site, sig, self.jit_compile, graphs, callbacks))

    def _graph_texts(self):
        if self._graphs is not None:
            return [(key, text, structure) for key, (text, structure, _) in self._graphs.items()]
        out = []
        for key, (structure, _, _) in self._structures.items():
            specs = [(d, None if shape is None else list(shape), None) for d, shape in key]
            out.append((key, (self._per_shape or self._native).compiler_ir(specs, "hlo"), structure))
        return out

    def _call_graph(self, tensors):
        native, structure = self._graph_native(tensors)
        out = native([t._v for t in tensors])
        return pack(structure, [EagerTensor(v) for v in out])

    def _graph_native(self, tensors):
        key = _key(tensors)
        entry = self._graphs.get(key)
        if entry is None and self.input_signature is not None:
            key = tuple((s.dtype.name, s.shape) for s in self._flat_signature)
            entry = self._graphs.get(key)
        if entry is None:
            have = ", ".join(str(k) for k in self._graphs) or "none"
            raise _errors().InvalidArgumentError(
                f"function '{self._name}' was unpickled from the graphs of the signatures it had traced "
                f"({have}); {_key(tensors)} is not one of them. Pickle a module-level function to "
                "retrace it anywhere"
            )
        text, structure, native = entry
        if native is None:
            native = _native.GraphFunction(text, f"<pickled {self._name}>", self._callback_list,
                                           self.jit_compile)
            self._graphs[key] = (text, structure, native)
        return native, structure

    def _structure_for(self, tensors):
        key = _key(tensors)
        if key in self._structures:
            return self._structures[key]
        if self.input_signature is not None:
            key = tuple((s.dtype.name, s.shape) for s in self._flat_signature)
            if key in self._structures:
                return self._structures[key]
        # Traced under a relaxed signature: any trace's structure fits.
        return next(iter(self._structures.values()))

    def _specs(self, args):
        """``(native, specs)``: the native function for ``args`` (tensors,
        TensorSpecs and static Python values) and the specs of its inputs."""
        if args:
            if self.input_signature is not None:
                leaves, _ = flatten(list(args))
                return self._native, [_spec_of(a)._native() for a in leaves]
            pairs = []
            specs = []
            for i, a in enumerate(args):
                if _is_nest(a, specs=True):
                    nest, leaves = _Nest.of(a, self._name, i, specs=True)
                    pairs.append((i, nest))
                    specs += [_spec_of(x) for x in leaves]
                elif _is_static(a) and not isinstance(a, TensorSpec):
                    pairs.append((i, a))
                else:
                    specs.append(_spec_of(a))
            return self._native_for(self._statics(pairs)), [s._native() for s in specs]
        if self.input_signature is None:
            raise ValueError(f"function '{self._name}' has no input_signature: give example inputs or specs")
        return self._native, [s._native() for s in self._flat_signature]

    def get_concrete_function(self, *args):
        """Traces (and under jit_compile compiles) for ``args`` (tensors,
        TensorSpecs and static Python values; the input_signature when none)
        ahead of a call."""
        native, specs = self._specs(args)
        if native is self._native and self._per_shape is not None:
            return self  # traced and compiled per shape, on each call
        try:
            native.compile(specs)
        except (TypeError, ValueError) as e:  # (InvalidArgumentError is a ValueError)
            # (Specs with None dims cannot give the shapes; the calls will.)
            if native is not self._native or not self._go_per_shape(None, e):
                raise
        return self

    def experimental_get_compiler_ir(self, *args):
        """``f.experimental_get_compiler_ir(*args)(stage=...)``: the IR at
        stage ``hlo`` (traced), ``optimized_hlo``, ``fused`` or ``cranelift``."""
        native, specs = self._specs(args)

        known = all(s[1] is not None and None not in s[1] for s in specs)

        def at(stage="hlo", device_name=None):
            # A function traced per concrete shape (an op in it needs a
            # dim's size when traced) gives its IR for known shapes.
            target = self._per_shape if native is self._native and self._per_shape and known else native
            try:
                return target.compiler_ir(specs, stage)
            except (TypeError, ValueError) as e:  # (InvalidArgumentError is a ValueError)
                if _STATIC_SHAPES not in str(e) and _core.KNOWN_WHEN_TRACED not in str(e):
                    raise
                if not known:
                    raise type(e)(
                        f"{e}\nfunction '{self._name}' is traced per concrete shape (an op in it needs a dim's "
                        "size when traced): ask for its IR with arguments or specs of known shapes"
                    ) from e
                if target is self._native and self._go_per_shape(None, e):
                    return self._per_shape.compiler_ir(specs, stage)
                raise

        # The native function traces through a weak reference to this
        # Function (_Body), so the callable holds it: TensorFlow's idiom
        # calls it on a temporary, `tf.function(f).experimental_get_compiler_ir(x)(...)`.
        at.function = self

        return at

    def _natives(self):
        if self._native is None:
            return []
        per_shape = [] if self._per_shape is None else [self._per_shape]
        return [self._native, *per_shape, *(n for n, _ in self._static.values())]

    def experimental_get_tracing_count(self):
        return sum(n.trace_count for n in self._natives())

    @property
    def compile_count(self):
        return sum(n.compile_count for n in self._natives())

    def __get__(self, instance, owner):
        """A method: this function bound to ``instance``, traced for it alone
        (as TensorFlow keys a method's traces by its instance), and held
        only as long as the instance lives."""
        if instance is None:
            return self
        key = id(instance)
        entry = self._bound.get(key)
        if entry is not None and entry[0]() is instance:
            return entry[1]
        try:
            # The entry goes when the instance does (and its id may be reused).
            ref = weakref.ref(instance, lambda _, b=self._bound, k=key: b.pop(k, None))
        except TypeError:  # not weakly referenceable: a static argument
            return functools.partial(self, instance)
        bound = Function(_Method(self.python_function, instance), self.input_signature, self.jit_compile,
                         self._name)
        self._bound[key] = (ref, bound)
        return bound

    def __repr__(self):
        return f"<tl.function {self._name} jit_compile={self.jit_compile}>"


def _same_structure(a, b):
    try:
        return a == b
    except Exception:  # noqa: BLE001  (a structure holding odd keys)
        return False


def _unpacker(structure):
    """``out -> the function's result``: native values wrapped as tensors
    and put in the traced function's structure (fast paths for one tensor
    and a flat tuple or list)."""
    from ._nest import _LEAF

    if structure is _LEAF:
        return lambda out: EagerTensor(out[0])
    if isinstance(structure, tuple) and len(structure) == 2 and structure[0] in (tuple, list) and all(
        s is _LEAF for s in structure[1]
    ):
        kind = structure[0]
        return lambda out: kind(EagerTensor(v) for v in out)
    return lambda out: pack(structure, [EagerTensor(v) for v in out])


class _WeakBody:
    """Calls ``Function._body`` through a weak reference (with the static
    arguments of its trace)."""

    __slots__ = ("ref", "statics")

    def __init__(self, f, statics=None):
        self.ref = weakref.ref(f)
        self.statics = statics

    def __call__(self, syms):
        f = self.ref()
        if f is None:
            raise RuntimeError("the tl.function being traced was freed")
        return f._body(syms, self.statics)


class _Method:
    """A method's function with its instance as the first argument, held
    weakly (the instance owns the bound tl.function, not the reverse)."""

    def __init__(self, fn, instance):
        self.fn = fn
        self.ref = weakref.ref(instance)
        self.__name__ = getattr(fn, "__name__", "method")
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)
        self.__module__ = getattr(fn, "__module__", None)
        self.__doc__ = getattr(fn, "__doc__", None)
        try:
            sig = inspect.signature(fn)
            self.__signature__ = sig.replace(parameters=list(sig.parameters.values())[1:])
        except (TypeError, ValueError):
            pass
        code = getattr(fn, "__code__", None)
        if code is not None:
            self.__code__ = code

    def __call__(self, *args, **kwargs):
        instance = self.ref()
        if instance is None:
            raise RuntimeError(f"the instance of method '{self.__name__}' was freed")
        return self.fn(instance, *args, **kwargs)


def _spec_of(a):
    return a if isinstance(a, TensorSpec) else TensorSpec.from_tensor(convert_to_tensor(a))


def _short(v, n=40):
    r = repr(v)
    return r if len(r) <= n else r[: n - 3] + "..."


def _errors():
    from . import errors

    return errors


class _ByValue:
    """A callable pickled by value (cloudpickle): unpickles as itself."""

    def __init__(self, data):
        self.data = data

    def __reduce__(self):
        import cloudpickle

        return (cloudpickle.loads, (self.data,))


def _picklable(name, target, fn):
    """``fn`` as pickle takes it: itself where pickle can take it (by
    reference), else its bytes by value through cloudpickle; an error
    naming the callback when neither can."""
    try:
        pickle.dumps(fn)
        return fn
    except Exception as by_ref:  # noqa: BLE001  (any failure means "not by reference")
        try:
            import cloudpickle
        except ImportError:
            raise pickle.PicklingError(
                f"callback '{target}' of function '{name}' ({fn!r}) cannot be pickled by reference "
                f"({by_ref}) and cloudpickle is not installed to pickle it by value"
            ) from by_ref
        try:
            return _ByValue(cloudpickle.dumps(fn))
        except Exception as by_value:  # noqa: BLE001
            raise pickle.PicklingError(
                f"callback '{target}' of function '{name}' ({fn!r}) cannot be pickled: {by_value}"
            ) from by_value


def _rebuild(name, site_, input_signature, jit_compile, graphs, callbacks):
    """A function unpickled from its graphs (see ``Function.__reduce__``)."""
    f = Function.__new__(Function)
    f.python_function = None
    f.jit_compile = jit_compile
    f._name = name
    f._set_signature(input_signature)
    f._site = site_
    f._structures = {}
    f._static = {}
    f._bound = {}
    f._callbacks = dict(callbacks)
    f._callback_list = list(callbacks)
    f._signature = None
    f._per_shape = None
    f._native = None
    f._graphs = {key: (text, structure, None) for key, text, structure in graphs}
    f._unpack = None
    f.__name__ = name
    return f


def _definition_site(fn):
    code = getattr(fn, "__code__", None)
    if code is None:
        return site()
    return (code.co_filename, code.co_firstlineno)


def function(func=None, input_signature=None, autograph=True, jit_compile=None, reduce_retracing=False,
             experimental_implements=None, experimental_autograph_options=None,
             experimental_attributes=None, experimental_relax_shapes=None,
             experimental_compile=None, experimental_follow_type_hints=None, name=None):
    """``tf.function``: ``func`` traced into a graph once per input
    signature (dtypes and shapes), then run without Python; with
    ``jit_compile=True`` compiled to native code ahead of its first run.
    Use as ``tl.function(f, ...)`` or as a decorator, with or without
    arguments. AutoGraph is not implemented: write loops and branches that
    depend on tensors with ``tl.while_loop`` and ``tl.cond``. A function
    traced ``_RETRACE_WARNING`` times warns once (as TensorFlow warns of
    retracing): each new shape or Python value is a trace and a compile,
    kept as long as the function."""
    if jit_compile is None and experimental_compile is not None:
        jit_compile = experimental_compile
    if reduce_retracing or experimental_relax_shapes:
        # (Accepted for TensorFlow's code, not implemented: say so once.)
        warnings.warn(
            "tl.function: reduce_retracing / experimental_relax_shapes is not implemented: the "
            "function is traced per input shape; give an input_signature with None dims to trace "
            "once for many shapes",
            RuntimeWarning,
            stacklevel=2,
        )

    def make(f):
        return Function(f, input_signature=input_signature, jit_compile=jit_compile, name=name)

    return make if func is None else make(func)

