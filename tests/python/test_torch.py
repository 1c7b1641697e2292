"""segred.torch: the PyTorch drop-in (custom ops with fake kernels and autograd),
and PyTorch tensors through the generic segred functions."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import segred  # noqa: E402
import segred.torch as st  # noqa: E402
from reference import backward as ref_bwd  # noqa: E402
from reference import forward as ref_fwd  # noqa: E402

REDUCES = ["sum", "mean", "max", "min", "prod"]


def _distinct(shape, seed, positive=False):
    g = torch.Generator().manual_seed(seed)
    n = int(np.prod(shape))
    x = (torch.randperm(n, generator=g).double() / n + 0.25)  # distinct values: no ties
    if not positive:
        x = x * torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).double()
    return x.reshape(shape)


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("meta", ["lengths", "offsets"])
def test_gradcheck_float64(reduce, meta):
    x = _distinct((9, 3), seed=1).requires_grad_()
    # no empty segment: its output (NaN or +-inf) has no finite difference
    kw = {"lengths": torch.tensor([2, 1, 6])} if meta == "lengths" else {"offsets": torch.tensor([1, 3, 4, 8])}
    assert torch.autograd.gradcheck(lambda t: st.segment_reduce(t, reduce, **kw), (x,))


@pytest.mark.parametrize("reduce", REDUCES)
def test_gradcheck_batched_axis1(reduce):
    x = _distinct((2, 6, 2), seed=2).requires_grad_()
    lengths = torch.tensor([[1, 5], [3, 3]])
    assert torch.autograd.gradcheck(lambda t: st.segment_reduce(t, reduce, lengths=lengths, axis=1), (x,))


@pytest.mark.parametrize("reduce", REDUCES)
def test_autograd_matches_float64_reference_with_signed_grads(reduce):
    x = _distinct((12,), seed=3).requires_grad_()
    lengths = torch.tensor([3, 0, 5, 4])
    y = st.segment_reduce(x, reduce, lengths=lengths)
    g = torch.tensor([-2.5, 1.0, 0.0, 2.5], dtype=torch.float64)
    y.backward(g)
    xn, ln = x.detach().numpy(), lengths.numpy()
    np.testing.assert_allclose(y.detach().numpy(), ref_fwd(xn, reduce, lengths=ln), rtol=1e-12)
    want = ref_bwd(g.numpy(), y.detach().numpy(), xn, reduce, lengths=ln)
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("reduce,ref", [("max", torch.amax), ("min", torch.amin)])
@pytest.mark.parametrize("w", [-2.5, -1.0, 1.0, 2.5])
def test_tie_gradients_through_loss_backward_follow_amax(reduce, ref, w):
    x = torch.tensor([1.0, 3.0, 3.0, 2.0, 5.0, 5.0, 5.0, 0.0], dtype=torch.float64, requires_grad=True)
    if reduce == "min":
        x = (-x.detach()).requires_grad_()
    lengths = torch.tensor([4, 4])
    loss = (st.segment_reduce(x, reduce, lengths=lengths) * w).sum()
    loss.backward()
    # the amax/amin rule, segment by segment
    x2 = x.detach().clone().requires_grad_()
    (sum(ref(seg) * w for seg in torch.split(x2, [4, 4]))).backward()
    torch.testing.assert_close(x.grad, x2.grad, rtol=0, atol=0)
    assert x.grad[:4].sum().item() == pytest.approx(w) and x.grad[4:].sum().item() == pytest.approx(w)


def test_tie_first_and_last():
    x = torch.tensor([3.0, 1.0, 3.0, 3.0], requires_grad=True)
    for tie, want in (("first", [-2.0, 0, 0, 0]), ("last", [0, 0, 0, -2.0])):
        x.grad = None
        st.segment_reduce(x, "max", lengths=torch.tensor([4]), tie=tie).backward(torch.tensor([-2.0]))
        assert x.grad.tolist() == want


def test_opcheck():
    x = _distinct((10, 3), seed=4).requires_grad_()
    args = (x, "max", torch.tensor([4, 6]), None, 0, False, None, "split")
    torch.library.opcheck(torch.ops.segred.segment_reduce.default, args)
    y = st.segment_reduce(x, "max", lengths=torch.tensor([4, 6]))
    bargs = (torch.randn(2, 3, dtype=torch.float64), y.detach(), x.detach(), "max", torch.tensor([4, 6]), None, 0,
             False, None, "split")
    torch.library.opcheck(torch.ops.segred.segment_reduce_backward.default, bargs)


def test_compile_fullgraph_matches_eager():
    lengths = torch.tensor([3, 0, 7, 2])

    def f(x):
        return (st.segment_reduce(x, "max", lengths=lengths) * torch.arange(1.0, 5.0)[:, None]).sum()

    x = torch.randn(12, 5, requires_grad=True)
    eager = f(x)
    (ge,) = torch.autograd.grad(eager, x)
    cf = torch.compile(f, fullgraph=True)
    compiled = cf(x)
    (gc,) = torch.autograd.grad(compiled, x)
    torch.testing.assert_close(compiled, eager)
    torch.testing.assert_close(gc, ge)


def test_second_order_request_fails_clearly():
    x = _distinct((6,), seed=5).requires_grad_()
    y = st.segment_reduce(x, "sum", lengths=torch.tensor([2, 4]))
    (g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="second-order"):
        g.sum().backward()


def test_requires_grad_and_dtype_device_preserved():
    x = torch.randn(8, dtype=torch.float32)
    y = st.segment_reduce(x, "sum", lengths=torch.tensor([8]))
    assert y.dtype == torch.float32 and y.device == x.device and not y.requires_grad
    for dt in (torch.float16, torch.bfloat16, torch.float64):
        assert st.segment_reduce(x.to(dt), "mean", lengths=torch.tensor([8])).dtype == dt


def test_bfloat16_sum_accumulates_in_float32():
    x = torch.ones(4096, dtype=torch.bfloat16)
    assert st.segment_reduce(x, "sum", lengths=torch.tensor([4096])).item() == 4096  # torch's stalls at 256


def test_autocast_keeps_input_dtype_like_torch():
    x = torch.randn(8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours = st.segment_reduce(x, "sum", lengths=torch.tensor([8]))
        theirs = torch.segment_reduce(x, "sum", lengths=torch.tensor([8]))
    assert ours.dtype == theirs.dtype


def test_generic_function_accepts_torch_zero_copy_and_returns_torch():
    x = torch.randn(10, 4)
    assert segred._C.data_ptr(x) == x.data_ptr()  # read in place
    xt = x.t()  # non-contiguous view, read in place too
    assert segred._C.data_ptr(xt) == xt.data_ptr()
    y = segred.segment_reduce(x, "max", lengths=torch.tensor([4, 6]))
    assert isinstance(y, torch.Tensor) and y.shape == (2, 4)
    torch.testing.assert_close(y, torch.segment_reduce(x, "max", lengths=torch.tensor([4, 6])))
    gi = segred.segment_reduce_backward(torch.ones(2, 4), y, x, "max", lengths=torch.tensor([4, 6]))
    assert isinstance(gi, torch.Tensor) and gi.shape == x.shape


def test_mixed_frameworks_is_a_clear_error():
    with pytest.raises(TypeError, match="lengths is a numpy array but data is a torch array"):
        segred.segment_reduce(torch.randn(4), "sum", lengths=np.array([4]))


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="lengths"):
        st.segment_reduce(torch.randn(4), "sum", lengths=torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="reduce"):
        st.segment_reduce(torch.randn(4), "median", lengths=torch.tensor([4]))
    with pytest.raises(ValueError, match="tie"):
        st.segment_reduce(torch.randn(4), "max", lengths=torch.tensor([4]), tie="random")
    with pytest.raises(NotImplementedError, match="indices"):
        st.segment_reduce(torch.randn(4), "sum", indices=torch.tensor([0]))


# ---- softmax / log_softmax ------------------------------------------------------------------

@pytest.mark.parametrize("op,ref", [(st.softmax, torch.softmax), (st.log_softmax, torch.log_softmax)])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_ops_gradcheck_and_match_torch(op, ref, dim):
    x = torch.randn(4, 3, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: op(t, dim), (x,))
    g = torch.randn(4, 3, 5, dtype=torch.float64)  # signed, non-unit
    (ours,) = torch.autograd.grad(op(x, dim), x, g)
    (theirs,) = torch.autograd.grad(ref(x, dim), x, g)
    torch.testing.assert_close(op(x, dim), ref(x, dim))
    torch.testing.assert_close(ours, theirs)


def test_softmax_opcheck_compile_dtype_and_second_order():
    x = torch.randn(6, 7, requires_grad=True)
    for name in ("softmax", "log_softmax"):
        torch.library.opcheck(getattr(torch.ops.segred, name).default, (x, 1))
        y = getattr(st, name)(x, 1)
        torch.library.opcheck(getattr(torch.ops.segred, name + "_backward").default,
                              (torch.randn(6, 7), y.detach(), 1))
    f = torch.compile(lambda t: (st.softmax(t, 0) * st.log_softmax(t, 1)).sum(), fullgraph=True)
    torch.testing.assert_close(f(x), (torch.softmax(x, 0) * torch.log_softmax(x, 1)).sum())
    assert st.softmax(x, 1, dtype=torch.float64).dtype == torch.float64
    (g,) = torch.autograd.grad(st.softmax(x, 1).pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="second-order"):
        g.sum().backward()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_softmax_autocast_dtype_like_torch(dtype):
    x = torch.randn(4, 4, dtype=dtype)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert st.softmax(x, 1).dtype == torch.softmax(x, 1).dtype
        assert st.log_softmax(x, 1).dtype == torch.log_softmax(x, 1).dtype
