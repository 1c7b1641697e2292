"""CUDA arrays of every framework (run on the H200 by tools/gpu-check-python;
skipped where no GPU is present). Results are compared with segred's CPU backend
on the same inputs; streams and devices must be the caller's."""
import numpy as np
import pytest

import segred

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() and segred.cuda_device_count() > 0 and segred.built_with_cuda()),
    reason="needs a CUDA GPU and a CUDA build of segred")

import segred.torch as st  # noqa: E402


def _cpu_ref(x, reduce, lengths, g, tie="split"):
    xn, ln = x.detach().cpu().numpy(), lengths.cpu().numpy()
    y = segred.segment_reduce(xn, reduce, lengths=ln)
    gi = segred.segment_reduce_backward(g.cpu().numpy(), y, xn, reduce, lengths=ln, tie=tie)
    return y, gi


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min", "prod"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_torch_cuda_segment_reduce_matches_cpu_backend(reduce, dtype):
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(-3, 4, (1000, 5), generator=gen).to(dtype)  # many ties
    lengths = torch.tensor([0, 1, 31, 33, 97, 2, 836])
    g = torch.randn(7, 5, generator=gen, dtype=dtype) * 2.5  # signed, non-unit
    xc = x.cuda().requires_grad_()
    with segred.trace() as t:
        y = st.segment_reduce(xc, reduce, lengths=lengths.cuda())
        y.backward(g.cuda())
    assert y.device == xc.device and xc.grad.device == xc.device
    assert {r.backend for r in t.records} == {"cuda"}
    y_ref, gi_ref = _cpu_ref(x, reduce, lengths, g)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(y.detach().cpu().numpy(), y_ref, **tol)
    np.testing.assert_allclose(xc.grad.cpu().numpy(), gi_ref, **tol)


def test_torch_cuda_runs_on_the_current_stream():
    s = torch.cuda.Stream()
    x = torch.randn(1 << 20, device="cuda")
    lengths = torch.full((1024,), 1024, device="cuda")
    with torch.cuda.stream(s):
        y = st.segment_reduce(x, "sum", lengths=lengths)
        p = st.softmax(x.view(1024, 1024), 1)
    s.synchronize()
    torch.testing.assert_close(y, x.view(1024, 1024).sum(1), rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(p, torch.softmax(x.view(1024, 1024), 1))


def test_torch_cuda_compile_fullgraph():
    lengths = torch.tensor([3, 0, 7, 2], device="cuda")

    def f(x):
        return (st.segment_reduce(x, "max", lengths=lengths).sum() + st.log_softmax(x, 0).sum())

    x = torch.randn(12, 5, device="cuda", requires_grad=True)
    torch.testing.assert_close(torch.compile(f, fullgraph=True)(x), f(x))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_torch_cuda_softmax_matches_torch(dim):
    x = torch.randn(33, 65, 7, device="cuda", dtype=torch.float64, requires_grad=True)
    g = torch.randn_like(x)
    for ours, theirs in ((st.softmax, torch.softmax), (st.log_softmax, torch.log_softmax)):
        (a,) = torch.autograd.grad(ours(x, dim), x, g)
        (b,) = torch.autograd.grad(theirs(x, dim), x, g)
        torch.testing.assert_close(ours(x, dim), theirs(x, dim))
        torch.testing.assert_close(a, b)


def test_torch_cuda_autocast_softmax_is_float32_like_torch():
    x = torch.randn(8, 8, device="cuda", dtype=torch.float16)
    with torch.autocast("cuda", dtype=torch.float16):
        assert st.softmax(x, 1).dtype == torch.softmax(x, 1).dtype == torch.float32


def test_cupy_arrays_in_place_and_cupy_out():
    cp = pytest.importorskip("cupy")
    x = cp.arange(12, dtype=cp.float32).reshape(6, 2)
    assert segred._C.data_ptr(x) == x.data.ptr
    y = segred.segment_reduce(x, "max", lengths=cp.array([2, 4]))
    assert isinstance(y, cp.ndarray) and y.device == x.device
    np.testing.assert_array_equal(cp.asnumpy(y), [[2, 3], [10, 11]])
    p = segred.softmax(x, 1)
    assert isinstance(p, cp.ndarray)


def test_jax_gpu_jit_grad():
    jax = pytest.importorskip("jax")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("jax sees no GPU")
    import jax.numpy as jnp

    import segred.jax as sj

    x = jnp.array([1.0, 3.0, 3.0, 2.0, 5.0, 5.0])
    g = jax.jit(jax.grad(lambda t: (sj.segment_reduce(t, "max", lengths=jnp.array([4, 2])) *
                                    jnp.array([-1.0, 2.0])).sum()))(x)
    np.testing.assert_array_equal(np.asarray(g), [0, -0.5, -0.5, 0, 1, 1])
    y = jax.jit(lambda t: sj.softmax(t.reshape(2, 3), 1))(x)
    np.testing.assert_allclose(np.asarray(y), np.asarray(jax.nn.softmax(x.reshape(2, 3), 1)), rtol=1e-6)


# ---- the ragged softmax family on CUDA (segment_softmax, segment_log_softmax, segment_logsumexp)

def _segment_softmax_cpu_ref(kind, x, g, meta, meta_kind, axis):
    """segred's CPU backend on the same inputs: forward and backward."""
    xn, mn = x.detach().cpu().numpy(), meta.cpu().numpy()
    kw = {meta_kind: mn, "axis": axis}
    fwd = getattr(segred, f"segment_{kind}")
    y = fwd(xn, **kw)
    gn = g.cpu().numpy()
    if kind == "logsumexp":
        gi = segred.segment_logsumexp_backward(gn, y, xn, **kw)
    else:
        gi = getattr(segred, f"segment_{kind}_backward")(gn, y, **kw)
    return y, gi


LANES_BY_DEFAULT = False  # as detail::kSslByDefault (session 44: not yet run on a GPU)


@pytest.mark.parametrize("kind", ["softmax", "log_softmax", "logsumexp"])
@pytest.mark.parametrize("heads", [1, 8, 64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_torch_cuda_segment_softmax_matches_cpu_backend(kind, heads, dtype):
    gen = torch.Generator().manual_seed(heads)
    lengths = torch.tensor([0, 1, 31, 33, 2, 1300, 0, 5])  # empty, one, long
    shape = (int(lengths.sum()), heads) if heads > 1 else (int(lengths.sum()),)
    x = torch.randn(shape, generator=gen, dtype=dtype) * 3
    x[40] = -float("inf")  # -inf beside finite values
    out_shape = (len(lengths),) + shape[1:] if kind == "logsumexp" else shape
    g = torch.randn(out_shape, generator=gen, dtype=dtype) * 2.5  # every sign, not 1
    xc = x.cuda().requires_grad_()
    fwd = getattr(st, f"segment_{kind}")
    with segred.trace() as t:
        y = fwd(xc, lengths=lengths.cuda())
        y.backward(g.cuda())
    paths = {r.path for r in t.records}
    # rows of 16 bytes x 2^k (float32 heads 8, 64): the lane-group path once it is the default
    # (LANES_BY_DEFAULT: src/core/segment_softmax_geometry.h's kSslByDefault); logsumexp,
    # float64 and heads 1: the tile path
    lanes = LANES_BY_DEFAULT and dtype == torch.float32 and heads in (8, 64) and kind != "logsumexp"
    kernels = "lanes.i64" if lanes else "tiles.i32"
    assert paths == {f"segment_{kind}.fwd.cuda.{kernels}", f"segment_{kind}.bwd.cuda.{kernels}"}, paths
    assert y.device == xc.device and xc.grad.device == xc.device
    y_ref, gi_ref = _segment_softmax_cpu_ref(kind, x, g, lengths, "lengths", 0)
    # float32: both backends approximate exp (CUDA: exp2f) and sum in other orders
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(y.detach().cpu().numpy(), y_ref, **tol)
    np.testing.assert_allclose(xc.grad.cpu().numpy(), gi_ref, **tol)


def test_torch_cuda_segment_softmax_offsets_axis1_bf16_and_stream():
    # batched offsets over axis 1 (int32, not starting at 0), bfloat16, on a side stream
    off = torch.tensor([[2, 2, 9, 40], [0, 30, 30, 41]], dtype=torch.int32)
    x = (torch.randn(2, 41, 8) * 2).to(torch.bfloat16)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = st.segment_softmax(x.cuda(), offsets=off.cuda(), axis=1)
    s.synchronize()
    y_ref = segred.segment_softmax(x.float().numpy(), offsets=off.numpy(), axis=1)
    np.testing.assert_allclose(y.float().cpu().numpy(), y_ref, rtol=2e-2, atol=2e-3)
    assert (y[0, :2].float() == 0).all() and (y[0, 40].float() == 0).all()  # outside every segment: 0


def test_torch_cuda_segment_softmax_compile_and_gradcheck():
    lengths = torch.tensor([3, 0, 7, 2], device="cuda")
    x = torch.randn(12, 4, device="cuda", dtype=torch.float64, requires_grad=True)
    torch.autograd.gradcheck(lambda t: st.segment_log_softmax(t, lengths=lengths), (x,))

    def f(t):
        return (st.segment_softmax(t, lengths=lengths) * t).sum() + st.segment_logsumexp(t, lengths=lengths).sum()

    torch.testing.assert_close(torch.compile(f, fullgraph=True)(x), f(x))


def test_cupy_segment_softmax_in_and_out():
    cp = pytest.importorskip("cupy")
    x = cp.arange(12, dtype=cp.float32).reshape(6, 2)
    y = segred.segment_logsumexp(x, lengths=cp.array([2, 0, 4]))
    assert isinstance(y, cp.ndarray) and y.shape == (3, 2)
    want = segred.segment_logsumexp(cp.asnumpy(x), lengths=np.array([2, 0, 4]))
    np.testing.assert_allclose(cp.asnumpy(y), want, rtol=1e-6)


def test_jax_gpu_segment_softmax_jit_grad():
    jax = pytest.importorskip("jax")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("jax sees no GPU")
    import jax.numpy as jnp

    import segred.jax as sj

    x = jnp.array([1.0, 3.0, 3.0, 2.0, 5.0, 5.0])
    lengths = jnp.array([4, 2])
    w = jnp.array([1.0, -2.0, 0.5, 3.0, -1.0, 2.0])
    gfn = jax.jit(jax.grad(lambda t: (sj.segment_softmax(t, lengths=lengths) * w).sum()))
    got = np.asarray(gfn(x))
    y = np.asarray(jax.nn.softmax(x[:4])).tolist() + np.asarray(jax.nn.softmax(x[4:])).tolist()
    y = np.array(y)
    want = np.concatenate([y[:4] * (np.asarray(w[:4]) - (y[:4] * np.asarray(w[:4])).sum()),
                           y[4:] * (np.asarray(w[4:]) - (y[4:] * np.asarray(w[4:])).sum())])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_torch_cuda_flat_forward_records_its_fixup_variant():
    # The CUDA flat forward chooses between the fused fix-up and the fixup_tree launch
    # (Plan.variant); its flat_reduce launch records the one that ran: the plan's.
    x = torch.randn(1 << 20, device="cuda")
    lengths = torch.full((1024,), 1024, device="cuda")
    with segred.trace() as t:
        st.segment_reduce(x, "sum", lengths=lengths)
    torch.cuda.synchronize()
    variants = [r.variant for r in t.records if r.variant]
    assert variants == ["fused_fixup"]  # 2^20 + 1026 merge items: 2049 tiles, one wave
    assert all(r.path.startswith("segment_reduce.fwd.cuda.flat.") for r in t.records if r.variant)
