"""``tf.einsum``, built from the core ops: each operand's repeated labels
become a diagonal (a gather), labels no other operand and not the output
names are summed out, and the operands are combined left to right, each pair
as one batched ``matmul`` of transposed and reshaped operands. So it traces,
compiles and differentiates as those ops do."""

import string

import numpy as np

from ._core import Tensor, convert_to_tensor
from ._ops import broadcast_to, gather, matmul, reduce_sum, reshape, transpose
from .errors import InvalidArgumentError

# Labels standing for the dims an ellipsis covers (never valid in an
# equation, which takes ASCII letters only).
_ELLIPSIS_LABELS = [chr(c) for c in range(0x100, 0x200)]


def _bad(equation, why):
    return InvalidArgumentError(f"einsum '{equation}': {why}")


def _parse(equation, n_inputs):
    """The equation's input terms and its output term (None when implicit),
    each a list of letters and ``...``."""
    eq = equation.replace(" ", "")
    if eq.count("->") > 1:
        raise _bad(equation, "more than one '->'")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != n_inputs:
        raise _bad(equation, f"{len(terms)} input term(s) for {n_inputs} input tensor(s)")

    def labels(term, where):
        out, i = [], 0
        while i < len(term):
            if term.startswith("...", i):
                if "..." in out:
                    raise _bad(equation, f"more than one ellipsis in {where} '{term}'")
                out.append("...")
                i += 3
            elif term[i] in string.ascii_letters:
                out.append(term[i])
                i += 1
            else:
                raise _bad(equation, f"invalid character {term[i]!r} in {where} '{term}' (labels are ASCII "
                                     "letters, with at most one '...')")
        return out

    ins = [labels(t, f"input {k}") for k, t in enumerate(terms)]
    out = labels(rhs, "the output") if arrow else None
    if out is not None:
        for lab in set(out) - {"..."}:
            if out.count(lab) > 1:
                raise _bad(equation, f"the output names '{lab}' more than once")
            if not any(lab in t for t in ins):
                raise _bad(equation, f"the output label '{lab}' is in no input")
    return ins, out


def einsum(equation, *inputs, **kwargs):
    """``tf.einsum(equation, *inputs)``: sums of products of the inputs'
    elements over the labels the output does not name. Supports any number
    of operands, ``...`` (broadcast as NumPy does: a dim of 1 stretches),
    the implicit output (no ``->``: the labels named once, sorted, after the
    ellipsis dims), repeated labels within an operand (a diagonal:
    ``ii->i``, a trace: ``ii->``) and labels summed within one operand.
    Dims must be known when traced. Malformed equations, labels of
    mismatched sizes and a label the output repeats are
    ``InvalidArgumentError``s naming the equation. ``optimize=`` (TF's
    choice of contraction order) and ``name=`` are accepted and ignored:
    operands are contracted left to right."""
    kwargs.pop("name", None)
    # (TF's ``optimize=`` picks a contraction order through opt_einsum;
    # here the order is left to right whatever it says.)
    optimize = kwargs.pop("optimize", "greedy")
    if optimize not in ("greedy", "optimal", "branch-2", "branch-all", "auto", "dp", "random-greedy"):
        raise ValueError(f"einsum: optimize must be 'greedy', 'optimal', 'branch-2', 'branch-all' or 'auto', "
                         f"not {optimize!r}")
    if kwargs:
        raise TypeError(f"einsum: unexpected keyword argument(s) {sorted(kwargs)}")
    if not isinstance(equation, str):
        raise TypeError(f"einsum: the equation must be a string, not {type(equation).__name__}")
    if len(inputs) == 1 and isinstance(inputs[0], (list, tuple)):
        inputs = tuple(inputs[0])
    if not inputs:
        raise _bad(equation, "no input tensors")
    xs = [x if isinstance(x, Tensor) else convert_to_tensor(x) for x in inputs]
    dtype = xs[0].dtype
    for k, x in enumerate(xs):
        if x.dtype != dtype:
            raise TypeError(f"einsum '{equation}': input {k} is {x.dtype.name} but input 0 is {dtype.name}")
        if x.shape is None or None in x.shape:
            raise _bad(equation, f"input {k} has shape {None if x.shape is None else list(x.shape)}: einsum "
                                 "needs every dim known: its dims must be known when traced (declare them in the "
                                 "input_signature)")
    ins, out = _parse(equation, len(xs))

    # Expand each ellipsis into labels of its own (right-aligned, as NumPy
    # broadcasts them).
    ell_rank = 0
    for k, (term, x) in enumerate(zip(ins, xs)):
        named = len([lab for lab in term if lab != "..."])
        if "..." in term:
            if named > len(x.shape):
                raise _bad(equation, f"input {k} has rank {len(x.shape)}, fewer than the {named} labels of "
                                     f"'{''.join(term)}'")
            ell_rank = max(ell_rank, len(x.shape) - named)
        elif named != len(x.shape):
            raise _bad(equation, f"input {k} has rank {len(x.shape)} but its term '{''.join(term)}' names "
                                 f"{named} dim(s)")
    ell = _ELLIPSIS_LABELS[:ell_rank]
    terms = []
    for term, x in zip(ins, xs):
        if "..." in term:
            n = len(x.shape) - (len(term) - 1)
            i = term.index("...")
            term = term[:i] + ell[ell_rank - n:] + term[i + 1:]
        terms.append(term)
    if out is None:
        counts = {}
        for term in ins:
            for lab in term:
                if lab != "...":
                    counts[lab] = counts.get(lab, 0) + 1
        out_labels = ell + sorted(lab for lab, c in counts.items() if c == 1)
    else:
        if "..." not in out and ell_rank and any("..." in t for t in ins):
            # (TensorFlow sums the ellipsis dims then; NumPy refuses.)
            raise _bad(equation, "the inputs have '...' but the output does not")
        i = out.index("...") if "..." in out else len(out)
        out_labels = out[:i] + (ell if "..." in out else []) + out[i + 1:]

    # The size of each label; a dim of 1 of an ellipsis label broadcasts.
    sizes = {}
    for k, (term, x) in enumerate(zip(terms, xs)):
        for lab, d in zip(term, x.shape):
            have = sizes.get(lab)
            if have is None or (have == 1 and lab in ell):
                sizes[lab] = d
            elif d != have and not (d == 1 and lab in ell):
                what = "an ellipsis dim" if lab in ell else f"label '{lab}'"
                raise _bad(equation, f"{what} has size {have} in one operand and {d} in input {k}")

    # Per operand: diagonals of repeated labels, then sums of labels that
    # neither the output nor another operand names.
    ops = []
    for k, (term, x) in enumerate(zip(terms, xs)):
        term, x = _diagonals(term, x, sizes)
        others = set(out_labels).union(*[set(t) for j, t in enumerate(terms) if j != k])
        summed = [i for i, lab in enumerate(term) if lab not in others]
        if summed:
            x = reduce_sum(x, axis=summed)
            term = [lab for i, lab in enumerate(term) if i not in summed]
        ops.append((term, x))

    term, x = ops[0]
    for j in range(1, len(ops)):
        later = set(out_labels).union(*[set(t) for t, _ in ops[j + 1:]])
        term, x = _contract(term, x, *ops[j], later, sizes)
    # Labels the output has that were broadcast away (size 1 in every
    # operand holding them: kept), then the output order.
    perm = [term.index(lab) for lab in out_labels]
    if perm != list(range(len(perm))):
        x = transpose(x, perm)
    want = [sizes[lab] for lab in out_labels]
    if list(x.shape) != want:
        x = broadcast_to(x, want)
    return x


def _diagonals(term, x, sizes):
    """``x`` with each label it repeats taken once (the diagonal)."""
    while len(set(term)) < len(term):
        lab = next(lab for lab in term if term.count(lab) > 1)
        a = term.index(lab)
        b = term.index(lab, a + 1)
        n = x.shape[a]
        if x.shape[b] != n:
            raise InvalidArgumentError(
                f"einsum: label '{lab}' is repeated in one operand over dims of sizes {n} and {x.shape[b]}"
            )
        rest = [i for i in range(len(term)) if i not in (a, b)]
        x = transpose(x, rest + [a, b])
        x = reshape(x, [x.shape[i] for i in range(len(rest))] + [n * n])
        x = gather(x, convert_to_tensor(np.arange(n, dtype=np.int32) * (n + 1)), axis=len(rest))
        term = [term[i] for i in rest] + [lab]
    return term, x


def _contract(ta, a, tb, b, later, sizes):
    """Operands ``a`` (labels ``ta``) and ``b`` combined: shared labels that
    ``later`` still needs are batch dims, the other shared ones are summed
    (one batched matmul); returns the labels and the product."""
    batch = [lab for lab in ta if lab in tb and lab in later]
    contract = [lab for lab in ta if lab in tb and lab not in later]
    free_a = [lab for lab in ta if lab not in tb]
    free_b = [lab for lab in tb if lab not in ta]

    def arrange(term, x, order):
        perm = [term.index(lab) for lab in order]
        if perm != list(range(len(perm))):
            x = transpose(x, perm)
        want = [sizes[lab] for lab in order]
        if list(x.shape) != want:
            x = broadcast_to(x, want)  # (an ellipsis dim of 1)
        return x

    def prod(labels):
        return int(np.prod([sizes[lab] for lab in labels], dtype=np.int64))

    nb, nc, na, nf = prod(batch), prod(contract), prod(free_a), prod(free_b)
    a = reshape(arrange(ta, a, batch + free_a + contract), [nb, na, nc])
    b = reshape(arrange(tb, b, batch + contract + free_b), [nb, nc, nf])
    y = matmul(a, b)
    labels = batch + free_a + free_b
    return labels, reshape(y, [sizes[lab] for lab in labels])


__all__ = ["einsum"]
