"""segment_reduce and segment_reduce_backward through the Python module, against
the float64 NumPy reference (tests/python/reference.py) and SEMANTICS.md's identities."""
import math
import subprocess
import sys

import numpy as np
import pytest

import segred
from reference import backward as ref_bwd
from reference import forward as ref_fwd

REDUCES = ["sum", "mean", "max", "min", "prod"]
GRADS = [-2.5, -1.0, 0.0, 1.0, 2.5]
TOL = {np.float64: 1e-12, np.float32: 2e-6, np.float16: 4e-3}


def close(got, want, dtype):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    tol = TOL[dtype]
    both_nan = np.isnan(got) & np.isnan(want)
    same_inf = np.isinf(want) & (got == want)
    with np.errstate(invalid="ignore"):
        err = np.abs(got - want) / (1 + np.abs(want))
    ok = both_nan | same_inf | (err <= tol)
    assert ok.all(), f"mismatch at {np.argwhere(~ok)[:5].tolist()}: got {got[~ok][:5]}, want {want[~ok][:5]}"


def random_lengths(rng, L, S):
    cuts = np.sort(rng.integers(0, L + 1, size=S - 1)) if S > 1 else np.array([], dtype=np.int64)
    b = np.concatenate([[0], cuts, [L]])
    return np.diff(b).astype(np.int64)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_random_1d_matches_reference(seed, reduce, dtype):
    rng = np.random.default_rng(seed)
    L = int(rng.choice([1, 2, 31, 33, 59, 97, 1025]))
    S = int(rng.integers(1, 12))
    lengths = random_lengths(rng, L, S)
    x = rng.uniform(-2, 2, size=L).astype(dtype)
    if reduce == "prod":
        x = rng.uniform(0.5, 1.5, size=L).astype(dtype) * np.sign(rng.uniform(-1, 1, size=L)).astype(dtype)
    y = segred.segment_reduce(x, reduce, lengths=lengths)
    assert y.dtype == dtype and y.shape == (S,)
    want = ref_fwd(x.astype(np.float64), reduce, lengths=lengths)
    if dtype == np.float16 and reduce in ("sum", "mean", "prod"):
        # float32 accumulation, one rounding to float16 at the end
        close(y, want.astype(np.float16), np.float16)
    else:
        close(y, want, dtype)
    g = rng.uniform(-3, 3, size=S).astype(dtype)
    gi = segred.segment_reduce_backward(g, y, x, reduce, lengths=lengths)
    want_gi = ref_bwd(g.astype(np.float64), y.astype(np.float64), x.astype(np.float64), reduce, lengths=lengths)
    close(gi, want_gi.astype(dtype) if dtype == np.float16 else want_gi, dtype)


@pytest.mark.parametrize("g", GRADS)
@pytest.mark.parametrize("reduce", ["max", "min", "amax", "amin"])
@pytest.mark.parametrize("tie", ["split", "first", "last"])
def test_constructed_ties_every_sign(g, reduce, tie):
    # segments: two tied maxima/minima, all tied, -0.0/+0.0, +-inf ties, NaN, tie at both edges
    x = np.array([1, 3, 3, 2,   2, 2, 2,   -0.0, 0.0,   np.inf, np.inf, -np.inf, -np.inf,   1, np.nan, np.nan,
                  -1, 5, 4, -1, 5], dtype=np.float64)
    if reduce in ("min", "amin"):
        x = -x
    lengths = np.array([4, 3, 2, 4, 3, 5])
    y = segred.segment_reduce(x, reduce, lengths=lengths)
    grad = np.full(6, g)
    gi = segred.segment_reduce_backward(grad, y, x, reduce, lengths=lengths, tie=tie)
    np.testing.assert_array_equal(gi, ref_bwd(grad, y, x, reduce, lengths=lengths, tie=tie))
    # The PyTorch defect: with g < 0 each tied element got the full g. Here every
    # segment's gradients sum to g, whatever the sign and the tie rule.
    sums = np.add.reduceat(gi, np.concatenate([[0], np.cumsum(lengths)[:-1]]))
    np.testing.assert_allclose(sums, grad, rtol=0, atol=1e-15)


def test_split_equals_amax_backward_and_sums_to_g():
    x = np.array([4.0, 4.0, 4.0, 1.0, 2.0, 2.0])
    lengths = np.array([4, 2])
    for reduce in ("max", "amax"):
        y = segred.segment_reduce(x, reduce, lengths=lengths)
        gi = segred.segment_reduce_backward(np.array([-3.0, 1.0]), y, x, reduce, lengths=lengths)
        np.testing.assert_array_equal(gi, [-1.0, -1.0, -1.0, 0.0, 0.5, 0.5])


@pytest.mark.parametrize("reduce", REDUCES)
def test_offsets_not_starting_at_zero_and_int32(reduce):
    rng = np.random.default_rng(7)
    x = rng.uniform(-1, 1, size=20)
    offsets = np.array([3, 5, 5, 11, 17], dtype=np.int32)  # elements 0..2 and 17..19 belong to no segment
    y = segred.segment_reduce(x, reduce, offsets=offsets)
    close(y, ref_fwd(x, reduce, offsets=offsets), np.float64)
    g = np.array([-1.0, 0.0, 2.5, -2.5])
    gi = segred.segment_reduce_backward(g, y, x, reduce, offsets=offsets)
    close(gi, ref_bwd(g, y, x, reduce, offsets=offsets), np.float64)
    assert (gi[:3] == 0).all() and (gi[17:] == 0).all()


@pytest.mark.parametrize("reduce", REDUCES)
def test_batched_axis1_features(reduce):
    rng = np.random.default_rng(11)
    x = rng.uniform(-1, 1, size=(3, 9, 4))
    lengths = np.array([[2, 0, 7], [9, 0, 0], [1, 4, 4]], dtype=np.int64)
    y = segred.segment_reduce(x, reduce, lengths=lengths, axis=1)
    assert y.shape == (3, 3, 4)
    close(y, ref_fwd(x, reduce, lengths=lengths, axis=1), np.float64)
    g = rng.uniform(-2, 2, size=y.shape)
    gi = segred.segment_reduce_backward(g, y, x, reduce, lengths=lengths, axis=-2)
    close(gi, ref_bwd(g, y, x, reduce, lengths=lengths, axis=1), np.float64)


def test_non_contiguous_equals_contiguous():
    rng = np.random.default_rng(3)
    base = rng.uniform(-1, 1, size=(8, 30))
    x = base.T[::2]  # shape (15, 8), strided in both dims
    assert not x.flags.c_contiguous
    lengths = np.array([5, 0, 10])
    for reduce in REDUCES:
        np.testing.assert_array_equal(segred.segment_reduce(x, reduce, lengths=lengths),
                                      segred.segment_reduce(np.ascontiguousarray(x), reduce, lengths=lengths))


@pytest.mark.parametrize("reduce", REDUCES)
def test_empty_segments_and_initial(reduce):
    x = np.array([1.5, -2.0, 3.0])
    lengths = np.array([0, 2, 0, 1])
    y = segred.segment_reduce(x, reduce, lengths=lengths)
    empty = {"sum": 0.0, "mean": math.nan, "max": -math.inf, "min": math.inf, "prod": 1.0}[reduce]
    np.testing.assert_array_equal(y[[0, 2]], [empty, empty])
    yi = segred.segment_reduce(x, reduce, lengths=lengths, initial=0.5)
    np.testing.assert_array_equal(yi[[0, 2]], [0.5, 0.5])
    close(yi, ref_fwd(x, reduce, lengths=lengths, initial=0.5), np.float64)


def test_nan_wins_over_inf():
    x = np.array([np.inf, np.nan, -np.inf, 1.0])
    for reduce in ("max", "min"):
        assert np.isnan(segred.segment_reduce(x, reduce, lengths=np.array([4]))[0])


def test_prod_backward_zeros_exact():
    x = np.array([0.0, 2.0, 3.0,   0.0, 0.0, 5.0,   2.0, -4.0])
    lengths = np.array([3, 3, 2])
    y = segred.segment_reduce(x, "prod", lengths=lengths)
    g = np.array([-2.5, 1.0, 0.5])
    gi = segred.segment_reduce_backward(g, y, x, "prod", lengths=lengths)
    np.testing.assert_array_equal(gi, [-15.0, 0.0, 0.0, 0.0, 0.0, 0.0, -2.0, 1.0])
    gi2 = segred.segment_reduce_backward(g, y, x, "prod", lengths=lengths, initial=2.0)
    np.testing.assert_array_equal(gi2, 2 * gi)


def test_long_segment_deterministic_and_correct():
    rng = np.random.default_rng(5)
    n = 200_000
    x = rng.uniform(-1, 1, size=n + 3).astype(np.float32)
    lengths = np.array([1, n, 1, 1])
    a = segred.segment_reduce(x, "sum", lengths=lengths)
    b = segred.segment_reduce(x, "sum", lengths=lengths)
    np.testing.assert_array_equal(a, b)
    assert abs(a[1] - x[1:n + 1].astype(np.float64).sum()) < 1e-3
    x[10] = x[150_000] = 7.0  # a tie across CPU pieces
    y = segred.segment_reduce(x, "max", lengths=lengths)
    gi = segred.segment_reduce_backward(np.array([1.0, -3.0, 1.0, 1.0], np.float32), y, x, "max", lengths=lengths)
    assert gi[10] == gi[150_000] == -1.5 and np.count_nonzero(gi[1:n + 1]) == 2


def test_float16_sum_accumulates_in_float32():
    x = np.ones(4096, dtype=np.float16)
    assert segred.segment_reduce(x, "sum", lengths=np.array([4096]))[0] == 4096


@pytest.mark.parametrize("path,shape,direction", [
    ("segment_reduce.fwd.cpu.flat.i64", (10,), "fwd"),
    ("segment_reduce.fwd.cpu.features.i64", (10, 3), "fwd"),
    ("segment_reduce.bwd.cpu.flat.i64", (10,), "bwd"),
    ("segment_reduce.bwd.cpu.features.i64", (10, 3), "bwd"),
])
def test_cpu_paths_reached(path, shape, direction):
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    lengths = np.array([4, 6])
    with segred.trace() as t:
        y = segred.segment_reduce(x, "max", lengths=lengths)
        if direction == "bwd":
            segred.segment_reduce_backward(-np.ones_like(y), y, x, "max", lengths=lengths)
    recs = [r for r in t.records if r.direction == direction]
    assert [r.path for r in recs] == [path]
    assert recs[0].backend == "cpu" and recs[0].index_bits == 64 and recs[0].op == "segment_reduce"
    assert recs[0].variant == ""  # no CPU path has a variant inside it


def test_paths_registry():
    names = [p.name for p in segred.paths()]
    assert len(names) == len(set(names))
    for p in segred.paths():
        assert p.name.startswith(p.op + "." + p.direction + "." + p.backend + ".")


def test_empty_output_launches_nothing():
    with segred.trace() as t:
        y = segred.segment_reduce(np.zeros((0, 3)), "sum", lengths=np.array([], dtype=np.int64))
    assert y.shape == (0, 3) and t.records == []


# ---- validation: every rule broken once ------------------------------------------------

X = np.arange(6, dtype=np.float64)


@pytest.mark.parametrize("kwargs,exc,needle", [
    (dict(reduce="median", lengths=np.array([6])), ValueError, "reduce"),
    (dict(reduce="sum"), ValueError, "lengths or offsets"),
    (dict(reduce="sum", lengths=np.array([6]), offsets=np.array([0, 6])), ValueError, "lengths and offsets"),
    (dict(reduce="sum", lengths=np.array([6]), axis=1), ValueError, "axis"),
    (dict(reduce="sum", lengths=np.array([[6]])), ValueError, "lengths"),
    (dict(reduce="sum", lengths=np.array([7, -1])), ValueError, "lengths"),
    (dict(reduce="sum", lengths=np.array([2, 3])), ValueError, "lengths"),
    (dict(reduce="sum", offsets=np.array([0, 4, 2, 6])), ValueError, "offsets"),
    (dict(reduce="sum", offsets=np.array([-1, 6])), ValueError, "offsets"),
    (dict(reduce="sum", offsets=np.array([0, 7])), ValueError, "offsets"),
    (dict(reduce="sum", lengths=np.array([6.0])), TypeError, "lengths"),
    (dict(reduce="sum", lengths=[6]), TypeError, "lengths"),
])
def test_validation_errors(kwargs, exc, needle):
    reduce = kwargs.pop("reduce")
    with pytest.raises(exc, match=needle):
        segred.segment_reduce(X, reduce, **kwargs)


def test_validation_dtype_initial_and_backward_shapes():
    with pytest.raises(TypeError, match="data"):
        segred.segment_reduce(np.arange(6), "sum", lengths=np.array([6]))
    with pytest.raises(ValueError, match="initial"):
        segred.segment_reduce(X.astype(np.float16), "sum", lengths=np.array([6]), initial=1e10)
    with pytest.raises(ValueError, match="data.shape"):
        segred.segment_reduce(np.zeros((2, 6)), "sum", lengths=np.array([[6], [6], [6]]), axis=1)
    y = segred.segment_reduce(X, "max", lengths=np.array([6]))
    with pytest.raises(ValueError, match="grad"):
        segred.segment_reduce_backward(np.zeros(2), y, X, "max", lengths=np.array([6]))
    with pytest.raises(ValueError, match="tie"):
        segred.segment_reduce_backward(np.zeros(1), y, X, "max", lengths=np.array([6]), tie="random")


def test_unsafe_bad_metadata_is_clamped_not_a_crash():
    for kw in (dict(lengths=np.array([100, 100])), dict(lengths=np.array([-5, 2])),
               dict(offsets=np.array([5, 2, 1000])), dict(offsets=np.array([-10, 3]))):
        y = segred.segment_reduce(X, "sum", unsafe=True, **kw)
        assert y.shape == (len(next(iter(kw.values()))) - ("offsets" in kw),)
        segred.segment_reduce_backward(np.ones_like(y), y, X, "sum", unsafe=True, **kw)
    # lengths summing to less than L: the tail is ignored
    np.testing.assert_array_equal(segred.segment_reduce(X, "sum", lengths=np.array([2]), unsafe=True), [1.0])


# ---- the segred command ------------------------------------------------------------------

def _segred_cmd(*args):
    return subprocess.run([sys.executable, "-m", "segred", *args], capture_output=True, text=True)


def test_cli_paths_and_check():
    p = _segred_cmd("paths")
    assert p.returncode == 0, p.stderr
    for info in segred.paths():
        assert info.name in p.stdout
    c = _segred_cmd("check", "--device", "cpu")
    assert c.returncode == 0, c.stdout[-2000:] + c.stderr
    assert "paths reached:" in c.stdout and "WRONG" not in c.stdout
