"""softmax, log_softmax and their backward through the Python module, against a
float64 NumPy reference written here (SEMANTICS.md, "softmax family"), on both CPU
paths (lastdim: inner == 1; spatial: inner > 1), proven through the trace."""
import contextlib
import os

import numpy as np
import pytest

import segred

DTYPES = [np.float64, np.float32, np.float16]
# |got - want| <= TOL * (1 + |want|): float64 exact to rounding; float32 a few ulp;
# float16 one ulp of the final store (computed in float32).
TOL = {np.float64: 1e-12, np.float32: 4e-6, np.float16: 2e-3}


def ref_forward(x, dim, log):
    """Plain float64 softmax / log_softmax with the NaN rule stated explicitly."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 0:
        return ref_forward(x.reshape(1), 0, log).reshape(())
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        bad = np.any(np.isnan(x) | (x == np.inf), axis=dim, keepdims=True) | np.all(x == -np.inf, axis=dim, keepdims=True)
        m = np.max(np.where(bad, 0.0, x), axis=dim, keepdims=True)
        e = np.exp(x - m)
        s = np.sum(e, axis=dim, keepdims=True)
        y = (x - m) - np.log(s) if log else e / s
    return np.where(bad, np.nan, y)


def ref_backward(g, y, dim, log):
    g = np.asarray(g, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if g.ndim == 0:
        return ref_backward(g.reshape(1), y.reshape(1), 0, log).reshape(())
    with np.errstate(invalid="ignore", over="ignore"):
        if log:
            return g - np.exp(y) * np.sum(g, axis=dim, keepdims=True)
        return y * (g - np.sum(g * y, axis=dim, keepdims=True))


def close(got, want, dtype):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape
    both_nan = np.isnan(got) & np.isnan(want)
    same_inf = np.isinf(want) & (got == want)
    with np.errstate(invalid="ignore"):
        err = np.abs(got - want) / (1 + np.abs(want))
    ok = both_nan | same_inf | (err <= TOL[dtype])
    assert ok.all(), f"mismatch at {np.argwhere(~ok)[:5].tolist()}: got {got[~ok][:5]}, want {want[~ok][:5]}"


def l2_bytes():
    """The level-2 cache the library's CPU softmax plan sees: the test override
    (segred._C._set_cpu_l2_bytes) when set, else the detected one
    (test_l2_detection_matches checks it against detected_l2_bytes)."""
    return segred._C._cpu_l2_bytes()


@contextlib.contextmanager
def forced_l2(nbytes):
    """The CPU softmax plan sees an L2 of nbytes inside the block (a test hook)."""
    segred._C._set_cpu_l2_bytes(nbytes)
    try:
        yield
    finally:
        segred._C._set_cpu_l2_bytes(-1)


def test_l2_detection_matches():
    assert segred._C._cpu_l2_bytes() == detected_l2_bytes()


def detected_l2_bytes():
    """cpu0's level-2 cache read from sysfs, then sysconf (0 when unknown)."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    for i in range(16):
        try:
            with open(f"{base}/index{i}/level") as f:
                level = int(f.read().strip() or 0)
            with open(f"{base}/index{i}/type") as f:
                typ = f.read()
            with open(f"{base}/index{i}/size") as f:
                size = f.read().strip()
        except (OSError, ValueError):
            continue
        if level != 2 or typ.startswith("Instruction"):
            continue
        digits = "".join(c for c in size if c.isdigit())
        unit = size[len(digits):len(digits) + 1]
        if digits and unit in ("", "K", "M", "G"):
            return int(digits) << {"": 0, "K": 10, "M": 20, "G": 30}[unit]
    try:
        return max(0, os.sysconf("SC_LEVEL2_CACHE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 0


def kind(shape, dim, dtype, fwd):
    """The path a shape/dim must take: lastdim when nothing follows dim (inner == 1),
    else spatial, except the forward over a D past spatial's L2 rule (float32 D >
    1024, 16-bit D > 1365, float64 D > 512): spatial_stream (on every L2 size since
    session 39)."""
    if len(shape) == 0:
        return "lastdim"
    d = dim % len(shape)
    if int(np.prod(shape[d + 1:], dtype=np.int64)) == 1:
        return "lastdim"
    l2_rows = {np.float64: 512, np.float32: 1024}.get(np.dtype(dtype).type, 1365)
    return "spatial_stream" if fwd and shape[d] > max(512, l2_rows) else "spatial"


def run_both(x, g, dim, dtype):
    """Forward and backward of both ops; checks values and the paths reached."""
    for log in (False, True):
        op = "log_softmax" if log else "softmax"
        fwd = segred.log_softmax if log else segred.softmax
        bwd = segred.log_softmax_backward if log else segred.softmax_backward
        with segred.trace() as t:
            y = fwd(x, dim)
            gi = bwd(g, y, dim)
        assert y.dtype == dtype and y.shape == x.shape and gi.shape == x.shape
        assert y.flags.c_contiguous
        close(y, ref_forward(x, dim, log), dtype)
        close(gi, ref_backward(g, y, dim, log), dtype)
        if x.size:
            kf, kb = kind(x.shape, dim, dtype, True), kind(x.shape, dim, dtype, False)
            assert [r.path for r in t.records] == [f"{op}.fwd.cpu.{kf}.i64", f"{op}.bwd.cpu.{kb}.i64"]
            assert [r.op for r in t.records] == [op, op]
        else:
            assert t.records == []


def signed_grads(rng, shape, dtype):
    g = rng.uniform(-2.5, 2.5, size=shape)
    g.reshape(-1)[::7] = 0.0  # zeros among negative and positive values, none equal to 1
    return g.astype(dtype)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("dtype", DTYPES)
def test_random_shapes_every_dim(seed, dtype):
    rng = np.random.default_rng(seed)
    for nd in (1, 2, 3, 4):
        shape = tuple(int(s) for s in rng.choice([1, 2, 3, 5, 31, 33, 59], size=nd))
        while np.prod(shape) > 30000:
            i = int(np.argmax(shape))
            shape = shape[:i] + (2,) + shape[i + 1:]
        x = rng.uniform(-6, 6, size=shape).astype(dtype)
        g = signed_grads(rng, shape, dtype)
        for dim in range(-nd, nd):
            run_both(x, g, dim, dtype)


# Session 34: the forward past spatial's L2 rule took spatial_stream only where the
# CPU's L2 is under 1 MiB; since session 39 it does on every L2 size (src/core/softmax.cpp).
# Every L2 size through the test hook (the tiles of a D <= 512 backward still differ):
# a D just past the rule for every dtype (float64 512, float32 1024, 16-bit 1365) and
# over a leading dim.
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("l2", [256 << 10, 0, 2 << 20])
@pytest.mark.parametrize("shape,dim", [((2, 1400, 33), 1), ((1366, 40), 0)])
def test_spatial_stream_both_sides_of_the_l2_rule(dtype, l2, shape, dim):
    rng = np.random.default_rng(5)
    x = rng.uniform(-6, 6, size=shape).astype(dtype)
    g = signed_grads(rng, shape, dtype)
    with forced_l2(l2):
        assert l2_bytes() == l2
        assert kind(shape, dim, dtype, True) == "spatial_stream"
        run_both(x, g, dim, dtype)
    assert l2_bytes() == detected_l2_bytes()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,dim", [((7, 4097), 1), ((3, 300, 77), 1), ((1200, 70), 0), ((2, 5, 1), 1)])
def test_paths_against_reference(dtype, shape, dim):
    rng = np.random.default_rng(11)
    x = rng.uniform(-8, 8, size=shape).astype(dtype)
    run_both(x, signed_grads(rng, shape, dtype), dim, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("spatial", [False, True])
def test_exact_dim_of_two(dtype, spatial):
    # [0, log 3] -> [0.25, 0.75]; y = [0.25, 0.75], g = [1, 0] -> [+0.1875, -0.1875] exactly.
    def col(a, b):
        v = np.array([a, b], dtype=dtype)
        return np.repeat(v[:, None], 3, axis=1) if spatial else v

    y = segred.softmax(col(0.0, np.log(3.0)), 0)
    np.testing.assert_allclose(y.astype(np.float64), col(0.25, 0.75), rtol=2e-3 if dtype == np.float16 else 3e-7)
    gi = segred.softmax_backward(col(1.0, 0.0), col(0.25, 0.75), 0)
    assert np.array_equal(gi, col(0.1875, -0.1875))
    yl = segred.log_softmax(col(0.0, -np.inf), 0)
    assert np.array_equal(yl, col(0.0, -np.inf))
    assert np.array_equal(segred.log_softmax_backward(col(0.5, 2.0), yl, 0), col(-2.0, 2.0))


@pytest.mark.parametrize("dtype", DTYPES)
def test_special_rows_both_paths(dtype):
    inf, nan = np.inf, np.nan
    rows = np.array([
        [-inf, -inf, -inf, -inf],   # all -inf -> NaN
        [1.0, nan, 2.0, -inf],      # NaN -> NaN
        [1.0, inf, 2.0, 3.0],       # +inf -> NaN
        [-inf, 1.0, -inf, 1.0],     # -inf elements -> 0
        [-inf, -inf, -inf, 2.0],    # one finite -> one-hot
        [800.0, -800.0, 400.0, 0],  # exp underflow
    ], dtype=dtype)
    g = signed_grads(np.random.default_rng(3), rows.shape, dtype)
    run_both(rows, g, 1, dtype)
    run_both(np.ascontiguousarray(rows.T), np.ascontiguousarray(g.T), 0, dtype)
    y = segred.softmax(rows, 1)
    assert np.isnan(y[:3]).all()
    assert y[3].tolist() == [0.0, 0.5, 0.0, 0.5]
    assert y[4].tolist() == [0.0, 0.0, 0.0, 1.0]


@pytest.mark.parametrize("shape,dim", [((5, 1), 1), ((1, 5), 0), ((2, 1, 3), 1)])
def test_dim_of_size_one(shape, dim):
    x = np.random.default_rng(0).uniform(-50, 50, size=shape)
    g = signed_grads(np.random.default_rng(1), shape, np.float64)
    assert (segred.softmax(x, dim) == 1).all()
    assert (segred.log_softmax(x, dim) == 0).all()
    assert (segred.softmax_backward(g, segred.softmax(x, dim), dim) == 0).all()
    assert (segred.log_softmax_backward(g, segred.log_softmax(x, dim), dim) == 0).all()


@pytest.mark.parametrize("shape,dim", [((3, 0), 1), ((3, 0), 0), ((0, 4), 1), ((0,), 0), ((2, 0, 3), -1)])
def test_empty_launches_nothing(shape, dim):
    x = np.zeros(shape, dtype=np.float32)
    with segred.trace() as t:
        y = segred.softmax(x, dim)
        yl = segred.log_softmax(x, dim)
        gi = segred.softmax_backward(x, y, dim)
        gil = segred.log_softmax_backward(x, yl, dim)
    assert y.shape == yl.shape == gi.shape == gil.shape == shape
    assert t.records == []


def test_zero_dim():
    x = np.array(3.5)
    for dim in (0, -1):
        y = segred.softmax(x, dim)
        assert y.shape == () and y == 1.0
        assert segred.log_softmax(x, dim) == 0.0
        assert segred.softmax_backward(np.array(-2.0), y, dim) == 0.0
    with pytest.raises(ValueError, match="dim"):
        segred.softmax(x, 1)


def test_non_contiguous_inputs_equal_their_copy():
    rng = np.random.default_rng(5)
    base = rng.uniform(-5, 5, size=(37, 53)).astype(np.float32)
    gbase = signed_grads(rng, (37, 53), np.float32)
    for view, gview in ((base.T, gbase.T), (base[1::2, ::3], gbase[1::2, ::3]), (base[::-1], gbase[::-1])):
        assert not view.flags.c_contiguous
        for dim in (0, 1, -1):
            for fwd, bwd in ((segred.softmax, segred.softmax_backward),
                             (segred.log_softmax, segred.log_softmax_backward)):
                y = fwd(view, dim)
                yc = fwd(np.ascontiguousarray(view), dim)
                assert np.array_equal(y, yc, equal_nan=True)
                assert np.array_equal(bwd(gview, y.T.copy().T, dim), bwd(np.ascontiguousarray(gview), yc, dim))


def test_validation_errors_name_the_argument():
    x = np.ones((3, 4), dtype=np.float32)
    with pytest.raises(ValueError, match="dim=2"):
        segred.softmax(x, 2)
    with pytest.raises(ValueError, match="dim=-3"):
        segred.log_softmax(x, -3)
    with pytest.raises(ValueError, match="grad"):
        segred.softmax_backward(np.ones((4, 3), np.float32), x, 1)
    with pytest.raises(TypeError, match="grad"):
        segred.log_softmax_backward(np.ones((3, 4), np.float64), x, 1)
    with pytest.raises(TypeError, match="x"):
        segred.softmax(np.ones((3, 4), np.int32), 1)
    with pytest.raises(TypeError, match="output"):
        segred.softmax_backward(x, np.ones((3, 4), np.int64), 1)
    with pytest.raises(TypeError, match="x"):
        segred.softmax([1.0, 2.0], 0)
    with pytest.raises(TypeError, match="dim"):
        segred.softmax(x, 1.0)
