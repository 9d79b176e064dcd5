"""The fourth round of TensorFlow ops built from the core ones: the
cross-entropy losses, einsum, cumsum/cumprod, gather_nd and the scatter
and segment ops, GradientTape.jacobian, tl.random, sort/argsort/top_k.
Values against NumPy eagerly, traced and compiled; gradients against
analytic formulas or finite differences; bad inputs as clear errors."""

import numpy as np
import pytest

import tensorlift as tl

from tfops_helpers import MODES, grad, numeric_grad, run  # noqa: F401


RNG = np.random.default_rng(7)
LOGITS = RNG.normal(size=(4, 6)).astype(np.float32) * 3
PROBS = RNG.random((4, 6)).astype(np.float32)
PROBS /= PROBS.sum(-1, keepdims=True)


def log_softmax(x, axis=-1):
    m = x.max(axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis, keepdims=True))


def softmax(x, axis=-1):
    return np.exp(log_softmax(x, axis))


# --- cross entropies -----------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_softmax_cross_entropy_values_and_gradients(mode):
    f = tl.nn.softmax_cross_entropy_with_logits
    got = run(lambda l, x: f(l, x), mode, PROBS, LOGITS).numpy()
    np.testing.assert_allclose(got, -(PROBS * log_softmax(LOGITS)).sum(-1), rtol=1e-5)
    # Along another axis.
    got0 = run(lambda l, x: f(l, x, axis=0), mode, PROBS, LOGITS).numpy()
    np.testing.assert_allclose(got0, -(PROBS * log_softmax(LOGITS, 0)).sum(0), rtol=1e-5)
    # d/dlogits = softmax - labels (labels summing to 1).
    g = grad(lambda x, l: f(l, x), mode, LOGITS, PROBS)
    np.testing.assert_allclose(g, softmax(LOGITS) - PROBS, atol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_cross_entropies_do_not_overflow(mode):
    big = np.array([[1000.0, -1000.0, 0.0]], np.float32)
    soft = run(lambda l, x: tl.nn.softmax_cross_entropy_with_logits(l, x), mode,
               np.array([[0.0, 1.0, 0.0]], np.float32), big).numpy()
    np.testing.assert_allclose(soft, [2000.0])
    sparse = run(lambda l, x: tl.nn.sparse_softmax_cross_entropy_with_logits(l, x), mode,
                 np.array([1], np.int64), big).numpy()
    np.testing.assert_allclose(sparse, [2000.0])
    sig = run(lambda l, x: tl.nn.sigmoid_cross_entropy_with_logits(l, x), mode,
              np.array([1.0, 0.0, 1.0], np.float32), np.array([-100.0, 100.0, 100.0], np.float32)).numpy()
    np.testing.assert_allclose(sig, [100.0, 100.0, 0.0], atol=1e-6)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("label_dtype", [np.int32, np.int64])
def test_sparse_softmax_cross_entropy(mode, label_dtype):
    labels = np.array([0, 5, 2, 2], label_dtype)
    f = tl.nn.sparse_softmax_cross_entropy_with_logits
    got = run(lambda l, x: f(l, x), mode, labels, LOGITS).numpy()
    np.testing.assert_allclose(got, -log_softmax(LOGITS)[np.arange(4), labels], rtol=1e-5)
    g = grad(lambda x, l: f(labels=l, logits=x), mode, LOGITS, labels)
    np.testing.assert_allclose(g, softmax(LOGITS) - np.eye(6)[labels], atol=1e-6)


def test_sparse_labels_out_of_range():
    f = tl.nn.sparse_softmax_cross_entropy_with_logits
    with pytest.raises(tl.errors.InvalidArgumentError, match="label value of 6 .* range of \\[0, 6\\)"):
        f(tl.constant([0, 6, 1, 1]), tl.constant(LOGITS))
    # Traced, the label is known when the function runs: NaN (TF's GPU kernel).
    got = tl.function(lambda l, x: f(l, x))(np.array([0, 6, -1, 1], np.int32), LOGITS).numpy()
    assert np.isnan(got[1]) and np.isnan(got[2]) and np.isfinite(got[[0, 3]]).all()


@pytest.mark.parametrize("mode", MODES)
def test_sigmoid_cross_entropy_values_and_gradient(mode):
    x = np.array([-3.0, -0.5, 0.0, 0.0, 0.5, 4.0], np.float32)
    z = np.array([0.0, 1.0, 0.0, 1.0, 0.3, 1.0], np.float32)
    f = tl.nn.sigmoid_cross_entropy_with_logits
    got = run(lambda l, v: f(labels=l, logits=v), mode, z, x).numpy()
    sig = 1 / (1 + np.exp(-x.astype(np.float64)))
    want = -(z * np.log(sig) + (1 - z) * np.log(1 - sig))
    np.testing.assert_allclose(got, want, rtol=1e-5)
    # sigmoid(x) - z, also at x == 0.
    g = grad(lambda v, l: f(labels=l, logits=v), mode, x, z)
    np.testing.assert_allclose(g, sig - z, atol=1e-6)


def test_cross_entropy_bad_inputs():
    with pytest.raises(tl.errors.InvalidArgumentError, match="same shape"):
        tl.nn.softmax_cross_entropy_with_logits(tl.constant(PROBS[:, :5]), tl.constant(LOGITS))
    with pytest.raises(tl.errors.InvalidArgumentError, match="same shape"):
        tl.nn.sigmoid_cross_entropy_with_logits(tl.constant(PROBS[:2]), tl.constant(LOGITS))
    with pytest.raises(TypeError, match="int32 or int64"):
        tl.nn.sparse_softmax_cross_entropy_with_logits(tl.constant([0.0, 1.0, 1.0, 1.0]), tl.constant(LOGITS))
    with pytest.raises(tl.errors.InvalidArgumentError, match="labels must have the shape of logits"):
        tl.nn.sparse_softmax_cross_entropy_with_logits(tl.constant([0, 1]), tl.constant(LOGITS))
    with pytest.raises(TypeError, match="floating-point"):
        tl.nn.softmax_cross_entropy_with_logits(tl.constant([[1]]), tl.constant([[1]]))
    with pytest.raises(tl.errors.InvalidArgumentError, match="axis 2 is out of range"):
        tl.nn.softmax_cross_entropy_with_logits(tl.constant(PROBS), tl.constant(LOGITS), axis=2)


# --- einsum --------------------------------------------------------------------------


A = RNG.normal(size=(3, 4)).astype(np.float32)
B = RNG.normal(size=(4, 5)).astype(np.float32)
BA = RNG.normal(size=(2, 3, 4)).astype(np.float32)
BB = RNG.normal(size=(2, 4, 5)).astype(np.float32)
Q = RNG.normal(size=(2, 3, 5, 4)).astype(np.float32)
K = RNG.normal(size=(2, 3, 6, 4)).astype(np.float32)
SQ = RNG.normal(size=(4, 4)).astype(np.float32)
V = RNG.normal(size=(4,)).astype(np.float32)
W = RNG.normal(size=(3,)).astype(np.float32)
E1 = RNG.normal(size=(2, 1, 3, 4)).astype(np.float32)
E2 = RNG.normal(size=(5, 4, 2)).astype(np.float32)

EINSUMS = [
    ("ij,jk->ik", (A, B)),
    ("bij,bjk->bik", (BA, BB)),
    ("bhqd,bhkd->bhqk", (Q, K)),
    ("ij->ji", (A,)),
    ("ij->", (A,)),
    ("ij->j", (A,)),
    ("i,j->ij", (W, V)),
    ("i,i->", (V, V)),
    ("ij,j->i", (A, V)),
    ("ii->i", (SQ,)),
    ("ii", (SQ,)),
    ("ij,jk", (A, B)),
    ("ba,ab", (A.T.copy(), A)),
    ("...ij,...jk->...ik", (BA, BB)),
    ("...d,...d->...", (Q, Q)),
    ("b...,b...->...", (BA, BA)),
    ("...ij,jk->...ik", (E1, B)),
    ("...ij,ajb->...ab", (E1, E2)),
    ("ij,jk,kl->il", (A, B, B.T.copy())),
    ("i,ij,j->", (W, A, V)),
    ("bij,bkj->bik", (BA, BA)),
    ("ij ,jk -> ik", (A, B)),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("eq, args", EINSUMS, ids=[e for e, _ in EINSUMS])
def test_einsum_matches_numpy(mode, eq, args):
    got = run(lambda *xs: tl.einsum(eq, *xs), mode, *args).numpy()
    want = np.einsum(eq, *[a.astype(np.float64) for a in args])
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", MODES)
def test_einsum_integers_and_gradient(mode):
    a, b = np.arange(12, dtype=np.int32).reshape(3, 4), np.arange(8, dtype=np.int32).reshape(4, 2)
    assert np.array_equal(run(lambda x, y: tl.einsum("ij,jk->ik", x, y), mode, a, b).numpy(), a @ b)
    g = grad(lambda x, y: tl.einsum("bhqd,bhkd->bhqk", x, y), mode, Q, K)
    np.testing.assert_allclose(g, np.broadcast_to(K.sum(2, keepdims=True), Q.shape), rtol=1e-5, atol=1e-5)
    g = grad(lambda x: tl.einsum("ii->", x), mode, SQ)
    np.testing.assert_allclose(g, np.eye(4), atol=0)
    assert tl.linalg.einsum is tl.einsum


@pytest.mark.parametrize("eq, args, match", [
    ("ij,jk->ik", (A,), "2 input term"),
    ("ij->ik", (A,), "output label 'k' is in no input"),
    ("ij->ii", (A,), "names 'i' more than once"),
    ("ijk->i", (A,), "rank 2 but its term 'ijk'"),
    ("ij,jk->ik", (A, A), "label 'j' has size 4 in one operand and 3"),
    ("i1->i", (V,), "invalid character '1'"),
    ("i->i->i", (V,), "more than one '->'"),
    ("......->", (V,), "more than one ellipsis"),
    ("...i->i", (BA,), "'...' but the output does not"),
])
def test_einsum_bad_equations(eq, args, match):
    with pytest.raises(tl.errors.InvalidArgumentError, match=match):
        tl.einsum(eq, *[tl.constant(a) for a in args])


# --- cumsum / cumprod ----------------------------------------------------------------


def np_cum(f, x, axis, exclusive, reverse):
    y = np.flip(x, axis) if reverse else x
    r = f(y, axis=axis)
    if exclusive:
        ident = 0 if f is np.cumsum else 1
        first = np.full_like(np.take(r, [0], axis=axis), ident)
        r = np.concatenate([first, np.delete(r, -1, axis=axis)], axis=axis)
    return np.flip(r, axis) if reverse else r


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_cumprod_match_numpy(mode, exclusive, reverse):
    x = RNG.normal(size=(3, 13)).astype(np.float32)
    for axis in (1, 0, -1):
        got = run(lambda v: tl.math.cumsum(v, axis=axis, exclusive=exclusive, reverse=reverse), mode, x).numpy()
        np.testing.assert_allclose(got, np_cum(np.cumsum, x, axis, exclusive, reverse), rtol=1e-5, atol=1e-5)
        got = run(lambda v: tl.math.cumprod(v, axis, exclusive, reverse), mode, x).numpy()
        np.testing.assert_allclose(got, np_cum(np.cumprod, x, axis, exclusive, reverse), rtol=1e-5, atol=1e-6)
    ints = np.arange(1, 40, dtype=np.int64).reshape(3, 13)
    got = run(lambda v: tl.cumsum(v, 1, exclusive, reverse), mode, ints).numpy()
    assert np.array_equal(got, np_cum(np.cumsum, ints, 1, exclusive, reverse)) and got.dtype == np.int64


@pytest.mark.parametrize("mode", MODES)
def test_cumsum_cumprod_gradients(mode):
    x = np.array([0.5, -2.0, 0.0, 3.0, 1.5], np.float32)  # a zero: cumprod's gradient has no division
    g = grad(lambda v: tl.math.cumsum(v), mode, x)
    np.testing.assert_allclose(g, [5, 4, 3, 2, 1])
    g = grad(lambda v: tl.math.cumsum(v, exclusive=True, reverse=True), mode, x)
    np.testing.assert_allclose(g, [0, 1, 2, 3, 4])
    g = grad(lambda v: tl.math.cumprod(v), mode, x)
    np.testing.assert_allclose(g, numeric_grad(lambda v: np.cumprod(v), x), rtol=1e-3, atol=1e-3)


def test_cumsum_bad_inputs():
    with pytest.raises(tl.errors.InvalidArgumentError, match="axis 2 is out of range"):
        tl.math.cumsum(tl.constant(A), axis=2)
    with pytest.raises(tl.errors.InvalidArgumentError, match="scalar"):
        tl.math.cumprod(tl.constant(1.0))
    with pytest.raises(TypeError, match="bool tensor has no add"):
        tl.math.cumsum(tl.constant([True]))

    # A dim unknown when traced that no input_signature gives (a callback's
    # result): an error; under a None signature the function is traced per
    # shape instead (test_reports_round4.py).
    @tl.function
    def f(v):
        r = tl.numpy_function(np.copy, [v], tl.float32)
        r.set_shape([None])
        return tl.math.cumprod(r)

    with pytest.raises(tl.errors.InvalidArgumentError, match="unknown size"):
        f(np.ones(3, np.float32))


# --- gather_nd, gather(batch_dims), scatter_nd, tensor_scatter_nd_* ------------------------


P = RNG.normal(size=(4, 3, 2)).astype(np.float32)


@pytest.mark.parametrize("mode", MODES)
def test_gather_nd(mode):
    ind = np.array([[0, 1], [3, 2], [1, 0]], np.int32)
    assert np.array_equal(run(tl.gather_nd, mode, P, ind).numpy(), P[ind[:, 0], ind[:, 1]])
    ind3 = np.array([[[0, 1, 1]], [[3, 2, 0]]], np.int64)
    assert np.array_equal(run(tl.gather_nd, mode, P, ind3).numpy(), P[ind3[..., 0], ind3[..., 1], ind3[..., 2]])
    ind1 = np.array([[2], [0]], np.int32)
    assert np.array_equal(run(tl.gather_nd, mode, P, ind1).numpy(), P[[2, 0]])
    # batch_dims=1: each batch row indexes its own params.
    bi = np.array([[[2], [0]], [[1], [1]], [[0], [2]], [[1], [0]]], np.int32)  # [4, 2, 1]
    got = run(lambda p, i: tl.gather_nd(p, i, batch_dims=1), mode, P, bi).numpy()
    want = np.stack([P[b][bi[b, :, 0]] for b in range(4)])
    assert np.array_equal(got, want)
    g = grad(lambda p, i: tl.gather_nd(p, i), mode, P, ind)
    want = np.zeros_like(P)
    for a, b in ind:
        want[a, b] += 1
    assert np.array_equal(g, want)


@pytest.mark.parametrize("mode", MODES)
def test_gather_batch_dims(mode):
    params = RNG.normal(size=(2, 3, 5, 4)).astype(np.float32)
    idx = np.array([[2, 0, 0], [1, 2, 1]], np.int32)
    for axis in (1, 2, 3, -1):
        got = run(lambda p, i: tl.gather(p, i, axis=axis, batch_dims=1), mode, params, idx).numpy()
        ax = axis % 4
        want = np.stack([np.take(params[b], idx[b], axis=ax - 1) for b in range(2)])
        assert np.array_equal(got, want), axis
    idx2 = RNG.integers(0, 5, size=(2, 3, 2)).astype(np.int64)  # into dim 2, of 5
    got = run(lambda p, i: tl.gather(p, i, axis=2, batch_dims=2), mode, params, idx2).numpy()
    want = np.stack([np.stack([np.take(params[a, b], idx2[a, b], axis=0) for b in range(3)]) for a in range(2)])
    assert np.array_equal(got, want)
    g = grad(lambda p, i: tl.gather(p, i, axis=2, batch_dims=1), mode, params, idx)
    want = np.zeros_like(params)
    for b in range(2):
        for j in idx[b]:
            want[b, :, j] += 1
    assert np.array_equal(g, want)


@pytest.mark.parametrize("mode", MODES)
def test_scatter_nd_and_tensor_scatters(mode):
    idx = np.array([[1, 0], [3, 2], [1, 0], [0, 1]], np.int32)
    ups = np.array([1.0, 2.0, 4.0, 8.0], np.float32)
    base = RNG.normal(size=(4, 3)).astype(np.float32)
    want = np.zeros((4, 3), np.float32)
    np.add.at(want, (idx[:, 0], idx[:, 1]), ups)
    assert np.array_equal(run(lambda i, u: tl.scatter_nd(i, u, [4, 3]), mode, idx, ups).numpy(), want)
    assert np.array_equal(run(tl.tensor_scatter_nd_add, mode, base, idx, ups).numpy(), base + want)
    assert np.array_equal(run(tl.tensor_scatter_nd_sub, mode, base, idx, ups).numpy(), base - want)
    upd = base.copy()
    for (a, b), u in zip(idx, ups):  # the last of duplicates wins
        upd[a, b] = u
    assert np.array_equal(run(tl.tensor_scatter_nd_update, mode, base, idx, ups).numpy(), upd)
    mx, mn = base.copy(), base.copy()
    for (a, b), u in zip(idx, -ups + 3):
        mx[a, b] = max(mx[a, b], u)
        mn[a, b] = min(mn[a, b], u)
    assert np.array_equal(run(tl.tensor_scatter_nd_max, mode, base, idx, -ups + 3).numpy(), mx)
    assert np.array_equal(run(tl.tensor_scatter_nd_min, mode, base, idx, -ups + 3).numpy(), mn)
    # Slices: index tuples shorter than the rank; integers.
    rows = np.array([[2], [0], [2]], np.int64)
    slab = np.arange(9, dtype=np.int32).reshape(3, 3)
    want = np.zeros((4, 3), np.int32)
    np.add.at(want, rows[:, 0], slab)
    assert np.array_equal(run(lambda i, u: tl.scatter_nd(i, u, [4, 3]), mode, rows, slab).numpy(), want)
    got = run(tl.tensor_scatter_nd_update, mode, np.zeros((4, 3), np.int32), rows, slab).numpy()
    assert np.array_equal(got, np.array([[3, 4, 5], [0, 0, 0], [6, 7, 8], [0, 0, 0]]))


@pytest.mark.parametrize("mode", MODES)
def test_update_last_wins_among_many_duplicates(mode):
    rng = np.random.default_rng(3)
    idx = rng.integers(0, 7, size=(200, 1)).astype(np.int32)
    ups = rng.normal(size=200).astype(np.float32)
    want = np.zeros(7, np.float32)
    for (i,), u in zip(idx, ups):
        want[i] = u
    got = run(tl.tensor_scatter_nd_update, mode, np.zeros(7, np.float32), idx, ups).numpy()
    assert np.array_equal(got, want)


@pytest.mark.parametrize("mode", MODES)
def test_scatter_gradients(mode):
    idx = np.array([[1], [3], [1]], np.int32)
    base = np.arange(5, dtype=np.float32)
    ups = np.array([10.0, 20.0, 30.0], np.float32)

    def grads(t, u):
        with tl.GradientTape(persistent=True) as tape:
            tape.watch([t, u])
            y = tl.tensor_scatter_nd_update(t, idx, u) * tl.constant([1.0, 2.0, 3.0, 4.0, 5.0])
            z = tl.tensor_scatter_nd_add(t, idx, u) * tl.constant([1.0, 2.0, 3.0, 4.0, 5.0])
        return tape.gradient(y, [t, u]) + tape.gradient(z, [t, u])

    gt, gu, at, au = [g.numpy() for g in run(grads, mode, base, ups)]
    assert gt.tolist() == [1, 0, 3, 0, 5] and gu.tolist() == [0, 4, 2]  # the overwritten update gets none
    assert at.tolist() == [1, 2, 3, 4, 5] and au.tolist() == [2, 4, 2]


def test_scatter_bad_inputs():
    with pytest.raises(tl.errors.InvalidArgumentError, match="does not address the shape"):
        tl.scatter_nd(tl.constant([[4]]), tl.constant([1.0]), [4])
    with pytest.raises(tl.errors.InvalidArgumentError, match="does not address the shape"):
        tl.gather_nd(tl.constant(P), tl.constant([[0, 3]]))
    with pytest.raises(tl.errors.InvalidArgumentError, match="updates must have shape"):
        tl.tensor_scatter_nd_update(tl.constant(np.zeros((4, 3), np.float32)), tl.constant([[1]]),
                                    tl.constant([1.0]))
    with pytest.raises(tl.errors.InvalidArgumentError, match="index tuples of length 4"):
        tl.gather_nd(tl.constant(P), tl.constant([[0, 0, 0, 0]]))
    with pytest.raises(TypeError, match="int32 or int64"):
        tl.gather_nd(tl.constant(P), tl.constant([[0.0]]))
    with pytest.raises(tl.errors.InvalidArgumentError, match=r"axis 0 must be in \[batch_dims"):
        tl.gather(tl.constant(P), tl.constant([[0], [1], [2], [0]]), axis=0, batch_dims=1)
    with pytest.raises(tl.errors.InvalidArgumentError, match="batch dims of params"):
        tl.gather(tl.constant(P), tl.constant([[0], [1]]), batch_dims=1)
    # Traced, an index out of range is skipped by the scatter (TF's GPU
    # kernels) and an error when a gather runs (TF's CPU kernels).
    got = tl.function(lambda i: tl.scatter_nd(i, tl.constant([1.0, 2.0]), [3]))(np.array([[5], [1]], np.int32))
    assert got.numpy().tolist() == [0.0, 2.0, 0.0]
    with pytest.raises(tl.errors.InvalidArgumentError):
        tl.function(lambda i: tl.gather_nd(tl.constant(P), i))(np.array([[0, 3]], np.int32))


# --- segment ops ----------------------------------------------------------------------------


def np_segment(data, ids, num, how):
    out = []
    for s in range(num):
        rows = data[ids == s]
        if len(rows) == 0:
            out.append(np.full(data.shape[1:], how[1], data.dtype))
        else:
            out.append(how[0](rows, axis=0))
    return np.array(out).reshape((num,) + data.shape[1:])


UNSORTED = [
    ("unsorted_segment_sum", (np.sum, 0)),
    ("unsorted_segment_mean", (np.mean, 0)),
    ("unsorted_segment_max", (np.max, -np.inf)),
    ("unsorted_segment_min", (np.min, np.inf)),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op, how", UNSORTED, ids=[n for n, _ in UNSORTED])
def test_unsorted_segment_ops(mode, op, how):
    op = getattr(tl.math, op)
    data = RNG.normal(size=(9, 2)).astype(np.float32)
    ids = np.array([3, 0, 3, -1, 0, 1, 3, 1, 0], np.int32)  # -1 is dropped; segment 2 and 4 empty
    got = run(lambda d, i: op(d, i, 5), mode, data, ids).numpy()
    np.testing.assert_allclose(got, np_segment(data, ids, 5, how), rtol=1e-6)
    # Eager ids inside a function: a constant permutation.
    got = run(lambda d: op(d, tl.constant(ids), num_segments=5), mode, data).numpy()
    np.testing.assert_allclose(got, np_segment(data, ids, 5, how), rtol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_segment_max_of_integers_and_many_rows(mode):
    rng = np.random.default_rng(11)
    data = rng.integers(-1000, 1000, size=(300,)).astype(np.int64)
    ids = rng.integers(0, 17, size=300).astype(np.int64)
    for op, how in [("unsorted_segment_max", (np.max, np.iinfo(np.int64).min)),
                    ("unsorted_segment_min", (np.min, np.iinfo(np.int64).max)),
                    ("unsorted_segment_sum", (np.sum, 0))]:
        got = run(lambda d, i: getattr(tl.math, op)(d, i, 20), mode, data, ids).numpy()
        assert np.array_equal(got, np_segment(data, ids, 20, how)) and got.dtype == np.int64


SORTED = [
    ("segment_sum", (np.sum, 0)),
    ("segment_mean", (np.mean, 0)),
    ("segment_max", (np.max, 0)),
    ("segment_min", (np.min, 0)),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op, how", SORTED, ids=[n for n, _ in SORTED])
def test_sorted_segment_ops(mode, op, how):
    op = getattr(tl.math, op)
    data = RNG.normal(size=(7, 3)).astype(np.float32)
    ids = np.array([0, 0, 1, 3, 3, 3, 4])  # segment 2 is empty: 0 in TensorFlow's sorted forms
    got = run(lambda d: op(d, tl.constant(ids)), mode, data).numpy()
    np.testing.assert_allclose(got, np_segment(data, ids, 5, how), rtol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_segment_gradients(mode):
    data = np.array([1.0, 5.0, 2.0, 7.0, 3.0], np.float32)
    ids = np.array([0, 1, 0, 1, 2], np.int32)
    g = grad(lambda d, i: tl.math.unsorted_segment_sum(d, i, 3) * tl.constant([1.0, 2.0, 3.0]), mode, data, ids)
    assert g.tolist() == [1, 2, 1, 2, 3]
    g = grad(lambda d, i: tl.math.unsorted_segment_mean(d, i, 3), mode, data, ids)
    np.testing.assert_allclose(g, [0.5, 0.5, 0.5, 0.5, 1])
    g = grad(lambda d, i: tl.math.unsorted_segment_max(d, i, 3), mode, data, ids)
    assert g.tolist() == [0, 0, 1, 1, 1]
    g = grad(lambda d: tl.math.segment_min(d, tl.constant([0, 0, 1, 1, 2])), mode, data)
    assert g.tolist() == [1, 0, 1, 0, 1]


BIG = 2**62 + 1  # its neighbours are one float64: exact only as integers


@pytest.mark.parametrize("mode", MODES)
def test_integer_scatters_are_exact(mode):
    idx = np.array([[1], [0], [1], [1]], np.int32)
    ups = np.array([BIG, 3, BIG, -(2**62)], np.int64)
    want = np.zeros(2, np.int64)
    np.add.at(want, idx[:, 0], ups)  # [3, 2^62 + 2]
    got = run(lambda i, u: tl.scatter_nd(i, u, [2]), mode, idx, ups).numpy()
    assert got.dtype == np.int64 and got.tolist() == want.tolist() == [3, 2**62 + 2]
    base = np.array([BIG, -BIG], np.int64)
    assert run(tl.tensor_scatter_nd_add, mode, base, idx, ups).numpy().tolist() == (base + want).tolist()
    assert run(tl.tensor_scatter_nd_sub, mode, base, idx, ups).numpy().tolist() == (base - want).tolist()
    assert run(tl.tensor_scatter_nd_update, mode, base, idx, ups).numpy().tolist() == [3, -(2**62)]
    near = np.array([[0], [0], [1]], np.int32)
    assert run(tl.tensor_scatter_nd_max, mode, np.array([2**62, 0], np.int64), near,
               np.array([BIG, 2**62 - 1, -BIG], np.int64)).numpy().tolist() == [BIG, 0]
    assert run(tl.tensor_scatter_nd_min, mode, np.array([BIG, 0], np.int64), near,
               np.array([2**62, BIG + 1, -BIG], np.int64)).numpy().tolist() == [2**62, -BIG]
    # Narrow integers wrap, as C++'s (and TensorFlow's) do; bools replace.
    got = run(lambda i, u: tl.scatter_nd(i, u, [2]), mode, idx[:3], np.array([100, 1, 100], np.int8)).numpy()
    assert got.dtype == np.int8 and got.tolist() == [1, -56]
    got = run(tl.tensor_scatter_nd_update, mode, np.zeros(3, bool), np.array([[2], [0], [2]], np.int32),
              np.array([True, True, False]))
    assert got.numpy().tolist() == [True, False, False]


@pytest.mark.parametrize("mode", MODES)
def test_segment_reductions_of_integers_are_exact(mode):
    data = np.array([BIG, 2**62, -BIG, -(2**62), 5, BIG], np.int64)
    ids = np.array([0, 0, 1, 1, -1, 0], np.int32)
    assert run(lambda d, i: tl.math.unsorted_segment_sum(d, i, 3), mode, data, ids).numpy().tolist() == \
        [(3 * 2**62 + 2) - 2**64, -(2**63) - 1 + 2**64, 0]  # wrapped, as int64 addition does
    assert run(lambda d, i: tl.math.unsorted_segment_max(d, i, 3), mode, data, ids).numpy().tolist() == \
        [BIG, -(2**62), -(2**63)]
    assert run(lambda d, i: tl.math.unsorted_segment_min(d, i, 3), mode, data, ids).numpy().tolist() == \
        [2**62, -BIG, 2**63 - 1]
    small = np.array([[3, -7], [100, 2], [-128, 9]], np.int8)
    got = run(lambda d, i: tl.math.unsorted_segment_max(d, i, 3), mode, small, np.array([2, 0, 2], np.int32))
    assert got.numpy().dtype == np.int8 and got.numpy().tolist() == [[100, 2], [-128, -128], [3, 9]]
    u16 = np.array([7, 65535, 3], np.uint16)
    got = run(lambda d, i: tl.math.unsorted_segment_min(d, i, 2), mode, u16, np.array([0, 0, 0], np.int32))
    assert got.numpy().tolist() == [3, 65535]
    # The sorted forms give an empty segment 0.
    got = run(lambda d: tl.math.segment_max(d, tl.constant([0, 0, 2, 2, 2, 3])), mode, data)
    assert got.numpy().tolist() == [BIG, 0, 5, BIG]
    got = run(lambda d: tl.math.segment_min(d, tl.constant([1, 1, 1, 1, 1, 1])), mode, data)
    assert got.numpy().tolist() == [0, -BIG]


@pytest.mark.parametrize("mode", MODES)
def test_complex_scatter_add_and_segment_sum(mode):
    data = np.array([1 + 2j, 3j, -1 + 0.5j], np.complex64)
    ids = np.array([1, 1, 0], np.int32)
    got = run(lambda d, i: tl.math.unsorted_segment_sum(d, i, 2), mode, data, ids).numpy()
    assert got.dtype == np.complex64 and got.tolist() == [-1 + 0.5j, 1 + 5j]
    got = run(lambda i, u: tl.scatter_nd(i, u, [2]), mode, ids[:, None], data).numpy()
    assert got.tolist() == [-1 + 0.5j, 1 + 5j]


@pytest.mark.parametrize("mode", MODES)
def test_extreme_gradients_split_ties_equally(mode):
    # TensorFlow's rule: the tied maxima (minima) share the gradient equally.
    data = np.array([1.0, 1.0, 1.0, 0.0, 4.0], np.float32)
    ids = np.array([0, 0, 0, 0, 1], np.int32)
    g = grad(lambda d, i: tl.math.unsorted_segment_max(d, i, 2), mode, data, ids)
    np.testing.assert_allclose(g, [1 / 3, 1 / 3, 1 / 3, 0, 1], rtol=1e-6)
    g = grad(lambda d: tl.math.segment_min(d, tl.constant([0, 0, 1, 1, 3])) * tl.constant([1.0, 6.0, 0.0, 2.0]),
             mode, np.array([2.0, 2.0, 0.0, 0.0, 5.0], np.float32))
    np.testing.assert_allclose(g, [0.5, 0.5, 3, 3, 2], rtol=1e-6)
    # tensor_scatter_nd_max/min: the tensor's element is one of the tied.
    base = np.array([1.0, 5.0, 2.0], np.float32)
    idx = np.array([[0], [0], [1], [2]], np.int32)
    ups = np.array([1.0, 1.0, 2.0, 3.0], np.float32)

    def grads(t, u):
        with tl.GradientTape(persistent=True) as tape:
            tape.watch([t, u])
            hi = tl.tensor_scatter_nd_max(t, idx, u) * tl.constant([3.0, 1.0, 10.0])
            lo = tl.tensor_scatter_nd_min(t, idx, u) * tl.constant([3.0, 1.0, 10.0])
        return tape.gradient(hi, [t, u]) + tape.gradient(lo, [t, u])

    ht, hu, lt, lu = [v.numpy().tolist() for v in run(grads, mode, base, ups)]
    assert ht == [1, 1, 0] and hu == [1, 1, 0, 10]
    assert lt == [1, 0, 10] and lu == [1, 1, 1, 0]


@pytest.mark.parametrize("mode", MODES)
def test_update_gradient_skips_overwritten_and_dropped_updates(mode):
    idx = np.array([[2], [0], [2], [5], [2]], np.int32)  # [5] is outside: an error eagerly
    if mode == "eager":
        idx = idx[[0, 1, 2, 4]]
    ups = np.arange(1, len(idx) + 1, dtype=np.float32) * 10

    def g(t, u, i):
        with tl.GradientTape() as tape:
            tape.watch([t, u])
            y = tl.tensor_scatter_nd_update(t, i, u) * tl.constant([1.0, 2.0, 3.0, 4.0])
        return [y] + tape.gradient(y, [t, u])

    y, gt, gu = [v.numpy().tolist() for v in run(g, mode, np.ones(4, np.float32), ups, idx)]
    assert y == [20, 2, 3 * ups[-1], 4]
    assert gt == [0, 2, 0, 4]
    assert gu == [0, 1, 0, 3] if mode == "eager" else gu == [0, 1, 0, 0, 3]


def test_segment_bad_inputs():
    d = tl.constant(np.ones((4, 2), np.float32))
    with pytest.raises(tl.errors.InvalidArgumentError, match="segment id 5 is out of range"):
        tl.math.unsorted_segment_sum(d, tl.constant([0, 1, 5, 1]), 3)
    with pytest.raises(tl.errors.InvalidArgumentError, match="not sorted"):
        tl.math.segment_sum(d, tl.constant([0, 2, 1, 2]))
    with pytest.raises(tl.errors.InvalidArgumentError, match="must be a prefix"):
        tl.math.unsorted_segment_max(d, tl.constant([0, 1]), 3)
    with pytest.raises(TypeError, match="num_segments is a tensor of the traced function"):
        tl.function(lambda x, n: tl.math.unsorted_segment_sum(x, tl.constant([0, 1, 1, 0]), n))(d, np.int32(2))
    with pytest.raises(tl.errors.InvalidArgumentError, match="must be known when traced"):
        tl.function(lambda x, i: tl.math.segment_sum(x, i))(d, np.array([0, 0, 1, 1], np.int32))


# --- jacobian ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_jacobian_and_batch_jacobian(mode):
    x0 = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 2.0]], np.float32)
    w0 = np.array([[1.0, 0.0], [2.0, -1.0], [0.5, 3.0]], np.float32)

    def f(x, w):
        with tl.GradientTape(persistent=True) as tape:
            tape.watch([x, w])
            y = tl.tanh(tl.matmul(x, w))
        return tape.jacobian(y, [x, w]) + [tape.batch_jacobian(y, x)]

    jx, jw, bj = [t.numpy() for t in run(f, mode, x0, w0)]
    s = 1 - np.tanh(x0 @ w0) ** 2  # [2, 2]
    want_x = np.zeros((2, 2, 2, 3), np.float32)
    want_w = np.zeros((2, 2, 3, 2), np.float32)
    for b in range(2):
        for o in range(2):
            want_x[b, o, b, :] = s[b, o] * w0[:, o]
            want_w[b, o, :, o] = s[b, o] * x0[b]
    np.testing.assert_allclose(jx, want_x, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(jw, want_w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bj, np.stack([want_x[b, :, b, :] for b in range(2)]), rtol=1e-5, atol=1e-6)


def test_jacobian_unconnected_and_non_persistent():
    x, z = tl.constant([1.0, 2.0]), tl.constant([3.0])
    with tl.GradientTape() as tape:
        tape.watch([x, z])
        y = x * x
    jx, jz = tape.jacobian(y, [x, z])
    assert jx.numpy().tolist() == [[2.0, 0.0], [0.0, 4.0]] and jz is None
    with pytest.raises(RuntimeError, match="non-persistent"):
        tape.jacobian(y, x)
    with tl.GradientTape() as tape:
        tape.watch([x, z])
        y = x * x
    assert tape.jacobian(y, z, unconnected_gradients="zero").numpy().tolist() == [[0.0], [0.0]]
    with tl.GradientTape() as tape:
        tape.watch(x)
        y = x * 2.0
    with pytest.raises(ValueError, match="same first"):
        tape.batch_jacobian(y, tl.constant([[1.0]]))


# --- random ---------------------------------------------------------------------------------


def test_philox_matches_the_reference_vectors():
    # Random123's known-answer tests for Philox-4x32-10.
    from tensorlift._random import _philox

    def u(v):
        return tl.constant(np.array([v], np.uint32))

    out = [int(w.numpy()[0]) for w in _philox([u(0)] * 4, [u(0), u(0)])]
    assert out == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    out = [int(w.numpy()[0]) for w in _philox([u(0xFFFFFFFF)] * 4, [u(0xFFFFFFFF)] * 2)]
    assert out == [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]


@pytest.mark.parametrize("mode", MODES)
def test_stateless_draws_are_deterministic_and_well_distributed(mode):
    seed = np.array([12, 34], np.int64)
    u = run(lambda s: tl.random.stateless_uniform([100, 100], s), mode, seed).numpy()
    again = tl.random.stateless_uniform([100, 100], seed=[12, 34]).numpy()
    assert np.array_equal(u, again) and u.dtype == np.float32
    assert u.min() >= 0 and u.max() < 1
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.003
    # Kolmogorov–Smirnov distance against the uniform CDF (fixed seed: not flaky).
    s = np.sort(u.reshape(-1))
    assert np.max(np.abs(s - np.arange(1, s.size + 1) / s.size)) < 0.015
    other = tl.random.stateless_uniform([100, 100], seed=[12, 35]).numpy()
    assert not np.array_equal(u, other) and abs(np.corrcoef(u.reshape(-1), other.reshape(-1))[0, 1]) < 0.03
    z = run(lambda s: tl.random.stateless_normal([20000], s, mean=1.0, stddev=2.0), mode, seed).numpy()
    assert abs(z.mean() - 1.0) < 0.05 and abs(z.std() - 2.0) < 0.05 and np.isfinite(z).all()
    zs = np.sort((z - 1.0) / 2.0)
    from math import erf, sqrt

    cdf = np.array([0.5 * (1 + erf(v / sqrt(2))) for v in zs])
    assert np.max(np.abs(cdf - np.arange(1, zs.size + 1) / zs.size)) < 0.015
    d = run(lambda s: tl.random.stateless_uniform([1000], s, dtype=tl.float64), mode, seed).numpy()
    assert d.dtype == np.float64 and 0 <= d.min() and d.max() < 1 and len(np.unique(d)) == 1000
    ints = run(lambda s: tl.random.stateless_uniform([5000], s, minval=-3, maxval=4, dtype=tl.int32),
               mode, seed).numpy()
    assert ints.dtype == np.int32 and set(np.unique(ints)) == set(range(-3, 4))


def test_stateful_draws_are_fresh_and_follow_set_seed():
    @tl.function(jit_compile=True)
    def f():
        return tl.random.uniform([4]) + tl.random.normal([4]) * 0.0

    a, b = f().numpy(), f().numpy()
    assert not np.array_equal(a, b) and (a >= 0).all() and (a < 1).all()
    tl.random.set_seed(5)
    first = [tl.random.uniform([3]).numpy(), f().numpy(), tl.random.normal([2], seed=1).numpy()]
    tl.random.set_seed(5)
    second = [tl.random.uniform([3]).numpy(), f().numpy(), tl.random.normal([2], seed=1).numpy()]
    for x, y in zip(first, second):
        assert np.array_equal(x, y)
    r = tl.random.uniform([1000], minval=2, maxval=5, dtype=tl.int64).numpy()
    assert r.dtype == np.int64 and set(np.unique(r)) == {2, 3, 4}


def test_random_bad_inputs():
    with pytest.raises(tl.errors.InvalidArgumentError, match="seed must be an integer tensor of shape \\[2\\]"):
        tl.random.stateless_uniform([2], seed=[1, 2, 3])
    with pytest.raises(tl.errors.InvalidArgumentError, match="needs minval and maxval"):
        tl.random.stateless_uniform([2], seed=[1, 2], dtype=tl.int32)
    with pytest.raises(TypeError, match="float dtype"):
        tl.random.stateless_normal([2], seed=[1, 2], dtype=tl.int32)
    with pytest.raises(tl.errors.InvalidArgumentError, match="negative dimension"):
        tl.random.uniform([-1])


# --- sort / argsort / top_k ---------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [1, 2, 5, 8, 33])
def test_sort_and_argsort_match_numpy(mode, n):
    rng = np.random.default_rng(n)
    x = rng.integers(-3, 4, size=(3, n)).astype(np.float32)  # many ties: stability matters
    x[0, n // 2] = np.nan
    x[1, 0] = np.inf
    x[2, -1] = -np.inf
    order = run(tl.argsort, mode, x).numpy()
    assert order.dtype == np.int32 and np.array_equal(order, np.argsort(x, axis=-1, kind="stable"))
    assert np.array_equal(run(tl.sort, mode, x).numpy(), np.sort(x, axis=-1), equal_nan=True)
    desc = run(lambda v: tl.argsort(v, direction="DESCENDING"), mode, x).numpy()
    # Descending and stable: NaN first, ties in their original order.
    want = np.array([sorted(range(n), key=lambda i: (not np.isnan(r[i]), -r[i] if not np.isnan(r[i]) else 0, i))
                     for r in x])
    assert np.array_equal(desc, want)
    ints = rng.integers(-2**31, 2**31 - 1, size=(2, n)).astype(np.int64)
    assert np.array_equal(run(tl.sort, mode, ints).numpy(), np.sort(ints, axis=-1))


@pytest.mark.parametrize("mode", MODES)
def test_top_k_and_sort_gradient(mode):
    x = np.array([[1.0, 3.0, 3.0, -1.0, 2.0], [0.0, 5.0, 4.0, 6.0, 4.0]], np.float32)
    values, indices = run(lambda v: tuple(tl.math.top_k(v, k=3)), mode, x)
    assert values.numpy().tolist() == [[3, 3, 2], [6, 5, 4]]
    assert indices.numpy().tolist() == [[1, 2, 4], [3, 1, 2]] and indices.numpy().dtype == np.int32
    g = grad(lambda v: tl.math.top_k(v, 2).values * tl.constant([10.0, 1.0]), mode, x)
    assert g.tolist() == [[0, 10, 1, 0, 0], [0, 1, 0, 10, 0]]
    g = grad(lambda v: tl.sort(v) * tl.constant([1.0, 2.0, 3.0, 4.0, 5.0]), mode, x)
    assert g.tolist() == [[2, 4, 5, 1, 3], [1, 4, 2, 5, 3]]


def np_argsort(x, axis, descending=False):
    """NumPy's stable argsort along ``axis``; descending keeps ties in
    order and puts NaN first (NaN is larger than any number)."""
    if not descending:
        return np.argsort(x, axis=axis, kind="stable")
    moved = np.moveaxis(x, axis, -1)
    rows = moved.reshape(-1, moved.shape[-1])
    out = np.array([sorted(range(len(r)), key=lambda i: (not np.isnan(r[i]), -r[i] if not np.isnan(r[i]) else 0, i))
                    for r in rows]).reshape(moved.shape)
    return np.moveaxis(out, -1, axis)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("axis", [0, 1, -1, -3])
def test_sort_and_argsort_along_any_axis(mode, axis):
    rng = np.random.default_rng(21)
    x = rng.integers(-2, 3, size=(4, 5, 6)).astype(np.float32)  # ties
    x[1, 2, 3] = x[3, 0, 5] = np.nan
    x[0, 4, 1] = -np.inf
    for direction in ("ASCENDING", "DESCENDING"):
        order = run(lambda v: tl.argsort(v, axis=axis, direction=direction), mode, x).numpy()
        want = np_argsort(x, axis, direction == "DESCENDING")
        assert order.dtype == np.int32 and np.array_equal(order, want), direction
        got = run(lambda v: tl.sort(v, axis=axis, direction=direction), mode, x).numpy()
        assert np.array_equal(got, np.take_along_axis(x, want, axis), equal_nan=True), direction
    # The gradient of sort puts each output's weight back where it came from.
    xf = rng.normal(size=(4, 5, 6)).astype(np.float32)
    w = rng.normal(size=(4, 5, 6)).astype(np.float32)
    g = grad(lambda v: tl.sort(v, axis=axis) * tl.constant(w), mode, xf)
    want = np.zeros_like(xf)
    np.put_along_axis(want, np.argsort(xf, axis=axis, kind="stable"), w, axis)
    np.testing.assert_array_equal(g, want)


@pytest.mark.parametrize("mode", MODES)
def test_argsort_of_integers_and_bools(mode):
    # 2^62 + 1 and 2^62 are one float64: a sort by floats would keep them in order.
    big = np.array([2**62 + 1, 2**62, -(2**62), 7, 2**62 + 1, -(2**63)], np.int64)
    assert run(tl.argsort, mode, big).numpy().tolist() == [5, 2, 3, 1, 0, 4]
    assert run(lambda v: tl.argsort(v, direction="DESCENDING"), mode, big).numpy().tolist() == [0, 4, 1, 3, 2, 5]
    assert run(tl.sort, mode, big).numpy().tolist() == sorted(big.tolist())
    small = np.array([[3, -128, 127], [-1, -1, 0]], np.int8)
    assert np.array_equal(run(lambda v: tl.argsort(v, axis=0), mode, small).numpy(), [[1, 0, 1], [0, 1, 0]])
    u = np.array([2**63 + 5, 3, 2**64 - 1, 3], np.uint64)  # above int64's range
    assert run(tl.argsort, mode, u).numpy().tolist() == [1, 3, 0, 2]
    # Bools (False first; TensorFlow has no bool sort), stable both ways.
    b = np.array([[True, False, True, False], [False, False, True, True]])
    assert run(tl.argsort, mode, b).numpy().tolist() == [[1, 3, 0, 2], [0, 1, 2, 3]]
    assert run(lambda v: tl.argsort(v, direction="DESCENDING"), mode, b).numpy().tolist() == [[0, 2, 1, 3],
                                                                                              [2, 3, 0, 1]]
    assert run(lambda v: tl.argsort(v, axis=0), mode, b).numpy().tolist() == [[1, 0, 0, 0], [0, 1, 1, 1]]


@pytest.mark.parametrize("mode", MODES)
def test_top_k_ties_and_nan(mode):
    x = np.array([[1.0, np.nan, 3.0, 3.0, np.nan, -np.inf], [-0.0, 0.0, -1.0, 2.0, 0.0, -0.0]], np.float32)
    values, indices = run(lambda v: tuple(tl.math.top_k(v, k=4)), mode, x)
    # NaN is the largest (first), ties keep their order; -0.0 equals 0.0.
    assert indices.numpy().tolist() == [[1, 4, 2, 3], [3, 0, 1, 4]]
    assert np.array_equal(values.numpy(), [[np.nan, np.nan, 3, 3], [2, -0.0, 0, 0]], equal_nan=True)
    assert np.signbit(values.numpy()[1, 1]) and not np.signbit(values.numpy()[1, 2])  # gathered as they are
    ints = np.array([5, 7, 7, 5, 7, -(2**31)], np.int32)
    values, indices = run(lambda v: tuple(tl.math.top_k(v, 4)), mode, ints)
    assert values.numpy().tolist() == [7, 7, 7, 5] and indices.numpy().tolist() == [1, 2, 4, 0]
    assert values.numpy().dtype == np.int32
    empty = run(lambda v: tl.math.top_k(v, 0).indices, mode, ints).numpy()
    assert empty.shape == (0,) and empty.dtype == np.int32
    # Of tied values, the one top_k picks gets the gradient.
    g = grad(lambda v: tl.math.top_k(v, 2).values, mode, np.array([3.0, 1.0, 3.0, 3.0], np.float32))
    assert g.tolist() == [1, 0, 1, 0]


def test_sort_bad_inputs():
    with pytest.raises(tl.errors.InvalidArgumentError, match="axis 2 is out of range for a tensor of rank 2"):
        tl.sort(tl.constant(A), axis=2)
    with pytest.raises(tl.errors.InvalidArgumentError, match="axis -3 is out of range"):
        tl.argsort(tl.constant(A), axis=-3)
    with pytest.raises(TypeError, match="axis must be an int"):
        tl.argsort(tl.constant(A), axis=0.0)
    with pytest.raises(tl.errors.InvalidArgumentError, match="rank >= 1"):
        tl.argsort(tl.constant(1.0))
    with pytest.raises(tl.errors.InvalidArgumentError, match="direction must be"):
        tl.argsort(tl.constant(V), direction="UP")
    with pytest.raises(tl.errors.InvalidArgumentError, match=r"k = 6 must be in \[0, 4\]"):
        tl.math.top_k(tl.constant(V), k=6)
    with pytest.raises(TypeError, match="numeric"):
        tl.sort(tl.constant([True, False]))
