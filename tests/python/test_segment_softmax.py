"""The ragged softmax family through Python: NumPy against a float64 reference
written here, torch autograd (gradcheck), JAX jit + grad, paths through the trace."""
import math

import numpy as np
import pytest

import segred


def ref(x, lengths, kind):
    """Per segment, per head: max first, then the sum (no online merge)."""
    x = np.asarray(x, dtype=np.float64)
    x2 = x.reshape(x.shape[0], -1)
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    out = np.zeros((len(lengths), x2.shape[1])) if kind == "logsumexp" else np.zeros_like(x2)
    for s in range(len(lengths)):
        seg = x2[bounds[s]:bounds[s + 1]]
        for f in range(x2.shape[1]):
            v = seg[:, f]
            if kind == "logsumexp":
                if np.isnan(v).any():
                    out[s, f] = np.nan
                elif (v == np.inf).any():
                    out[s, f] = np.inf
                elif len(v) == 0 or (v == -np.inf).all():
                    out[s, f] = -np.inf
                else:
                    m = v.max()
                    out[s, f] = m + math.log(np.exp(v - m).sum())
                continue
            if len(v) == 0:
                continue
            if np.isnan(v).any() or (v == np.inf).any() or (v == -np.inf).all():
                out[bounds[s]:bounds[s + 1], f] = np.nan
                continue
            m = v.max()
            ssum = np.exp(v - m).sum()
            out[bounds[s]:bounds[s + 1], f] = np.exp(v - m) / ssum if kind == "softmax" else v - m - math.log(ssum)
    shape = (len(lengths),) + x.shape[1:] if kind == "logsumexp" else x.shape
    return out.reshape(shape)


KINDS = ["softmax", "log_softmax", "logsumexp"]
FWD = {"softmax": segred.segment_softmax, "log_softmax": segred.segment_log_softmax,
       "logsumexp": segred.segment_logsumexp}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("heads", [1, 8])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_matches_reference_and_backward_identities(kind, heads, dtype):
    rng = np.random.default_rng(heads)
    lengths = np.array([0, 1, 31, 33, 2, 130])
    x = rng.normal(0, 3, size=(lengths.sum(), heads)).astype(dtype)
    with segred.trace() as t:
        y = FWD[kind](x, lengths=lengths)
    assert [r.path for r in t.records] == [f"segment_{kind}.fwd.cpu.i64"]
    np.testing.assert_allclose(y, ref(x, lengths, kind), rtol=1e-12 if dtype == np.float64 else 2e-5, atol=1e-6)
    g = rng.choice([-2.5, -1.0, 0.0, 1.0, 2.5], size=y.shape).astype(dtype)
    with segred.trace() as t:
        if kind == "softmax":
            gi = segred.segment_softmax_backward(g, y, lengths=lengths)
        elif kind == "log_softmax":
            gi = segred.segment_log_softmax_backward(g, y, lengths=lengths)
        else:
            gi = segred.segment_logsumexp_backward(g, y, x, lengths=lengths)
    assert [r.path for r in t.records] == [f"segment_{kind}.bwd.cpu.i64"]
    # closed forms, segment by segment
    b = np.r_[0, np.cumsum(lengths)]
    for s in range(len(lengths)):
        ys, gs, xs = y[b[s]:b[s + 1]].astype(np.float64), g[b[s]:b[s + 1]].astype(np.float64), x[b[s]:b[s + 1]]
        if kind == "softmax":
            want = ys * (gs - (gs * ys).sum(0))
        elif kind == "log_softmax":
            want = gs - np.exp(ys) * gs.sum(0)
        else:
            want = g[s].astype(np.float64) * np.exp(xs.astype(np.float64) - y[s].astype(np.float64))
        np.testing.assert_allclose(gi[b[s]:b[s + 1]], want, rtol=1e-10 if dtype == np.float64 else 1e-4, atol=1e-6)


def test_segment_of_one_and_special_values():
    x = np.array([5.0, -np.inf, -np.inf, 1.0, np.nan, np.inf, 2.0])
    lengths = np.array([1, 2, 2, 2])
    y = segred.segment_softmax(x, lengths=lengths)
    assert y[0] == 1.0 and np.isnan(y[1:5]).all() and np.isnan(y[5:7]).all()
    gi = segred.segment_softmax_backward(np.full(7, -2.5), y, lengths=lengths)
    assert gi[0] == 0.0
    lse = segred.segment_logsumexp(x, lengths=np.array([1, 2, 2, 2, 0]))
    assert lse[0] == 5.0 and lse[1] == -np.inf and np.isnan(lse[2]) and lse[3] == np.inf and lse[4] == -np.inf


def test_offsets_batched_axis1_and_zero_outside():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(2, 7, 3))
    offsets = np.array([[1, 3, 6], [0, 0, 7]], dtype=np.int32)
    y = segred.segment_softmax(x, offsets=offsets, axis=1)
    assert (y[0, 0] == 0).all() and (y[0, 6] == 0).all()
    np.testing.assert_allclose(y[0, 1:3].sum(0), 1.0)
    np.testing.assert_allclose(y[1].sum(0), 1.0)


def test_validation():
    with pytest.raises(ValueError, match="lengths"):
        segred.segment_softmax(np.ones(5), lengths=np.array([2, 2]))
    with pytest.raises(TypeError, match="data"):
        segred.segment_softmax(np.ones(5, dtype=np.int32), lengths=np.array([5]))


torch = pytest.importorskip("torch")


@pytest.mark.parametrize("kind", KINDS)
def test_torch_gradcheck_and_compile(kind):
    import segred.torch as st

    fn = getattr(st, f"segment_{kind}")
    x = torch.randn(12, 3, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([2, 1, 9])
    assert torch.autograd.gradcheck(lambda t: fn(t, lengths=lengths), (x,))
    torch.library.opcheck(getattr(torch.ops.segred, f"segment_{kind}").default, (x, lengths, None, 0, False))
    f = torch.compile(lambda t: fn(t, lengths=lengths).sum(), fullgraph=True)
    torch.testing.assert_close(f(x), fn(x, lengths=lengths).sum())
    assert isinstance(segred.segment_softmax(x.detach(), lengths=lengths), torch.Tensor)


def test_jax_jit_grad():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    import segred.jax as sj

    x = np.random.default_rng(5).normal(size=(9, 2))
    lengths = np.array([4, 0, 5])
    w = np.random.default_rng(6).normal(size=(9, 2))
    y = jax.jit(lambda t: sj.segment_log_softmax(t, lengths=jnp.asarray(lengths)))(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(y), ref(x, lengths, "log_softmax"), rtol=1e-5, atol=1e-6)
    g = jax.grad(lambda t: (sj.segment_softmax(t, lengths=jnp.asarray(lengths)) * w).sum())(jnp.asarray(x))
    ys = ref(x, lengths, "softmax")
    want = np.concatenate([ys[:4] * (w[:4] - (w[:4] * ys[:4]).sum(0)), ys[4:] * (w[4:] - (w[4:] * ys[4:]).sum(0))])
    np.testing.assert_allclose(np.asarray(g), want, rtol=1e-5, atol=1e-6)
