"""segred as PyTorch operators: drop-in replacements with autograd and torch.compile.

    import segred.torch as st
    y = st.segment_reduce(x, "max", lengths=lengths)      # torch.segment_reduce's arguments, + tie=
    p = st.softmax(x, dim=1)                              # torch.softmax's arguments

Every op is a ``torch.library.custom_op`` (namespace ``segred``) with a fake
(meta) kernel, so shapes propagate through torch.compile without a graph break,
and ``register_autograd`` so backward runs segred's own backward op:

- ``segment_reduce`` max/min backward splits a tied segment's gradient equally
  among the tied elements for every sign of the gradient (``tie="split"``, the
  amax/amin rule; torch.segment_reduce splits only positive gradients), or gives it
  to the first/last tied element (``tie="first"|"last"``).
- A second-order derivative request raises a RuntimeError naming the op.
- Outputs are allocated by torch (its caching allocator) and CUDA work runs on
  torch's current stream; inputs are read in place (any strides on the CPU).
- Autocast: as torch's own ops. softmax and log_softmax run in float32 under
  CUDA autocast and in the input's dtype under CPU autocast; segment_reduce runs
  in its input's dtype (torch.segment_reduce is on no autocast list).
"""
from __future__ import annotations

from typing import Optional

import torch

from . import _C

__all__ = ["segment_reduce", "softmax", "log_softmax"]


def _stream(t: torch.Tensor) -> int:
    return int(torch.cuda.current_stream(t.device).cuda_stream) if t.is_cuda else 0


def _segment_out_shape(data, lengths, offsets, axis):
    """Output shape from shapes alone, or None when the arguments are invalid
    (the native call then raises the error that names the argument)."""
    if (lengths is None) == (offsets is None):
        return None
    meta = lengths if lengths is not None else offsets
    nd = data.dim()
    ax = axis + nd if axis < 0 else axis
    if not 0 <= ax < nd or meta.dim() == 0:
        return None
    s = meta.shape[-1] - (0 if lengths is not None else 1)
    if s < 0:
        return None
    shape = list(data.shape)
    shape[ax] = s
    return shape


# ---- segment_reduce ------------------------------------------------------------------------

@torch.library.custom_op("segred::segment_reduce", mutates_args=())
def _segment_reduce(data: torch.Tensor, reduce: str, lengths: Optional[torch.Tensor],
                    offsets: Optional[torch.Tensor], axis: int, unsafe: bool, initial: Optional[float],
                    tie: str) -> torch.Tensor:
    shape = _segment_out_shape(data, lengths, offsets, axis)
    if shape is None:  # let the native layer name the broken rule
        _C.segment_reduce(data, reduce, lengths, offsets, axis, unsafe, initial, _stream(data))
        raise ValueError("segment_reduce: invalid arguments")
    out = torch.empty(shape, dtype=data.dtype, device=data.device)
    _C.segment_reduce_out(data.detach(), reduce, lengths, offsets, axis, unsafe, initial, out, _stream(data))
    return out


@_segment_reduce.register_fake
def _(data, reduce, lengths, offsets, axis, unsafe, initial, tie):
    shape = _segment_out_shape(data, lengths, offsets, axis)
    if shape is None:
        raise ValueError("segment_reduce: exactly one of lengths/offsets, with ndim == axis + 1, is required")
    return data.new_empty(shape)


@torch.library.custom_op("segred::segment_reduce_backward", mutates_args=())
def _segment_reduce_backward(grad: torch.Tensor, output: torch.Tensor, data: torch.Tensor, reduce: str,
                             lengths: Optional[torch.Tensor], offsets: Optional[torch.Tensor], axis: int,
                             unsafe: bool, initial: Optional[float], tie: str) -> torch.Tensor:
    grad_input = torch.empty(data.shape, dtype=data.dtype, device=data.device)
    _C.segment_reduce_backward_out(grad.contiguous(), output.contiguous(), data.detach(), reduce, lengths, offsets,
                                   axis, initial, tie, unsafe, grad_input, _stream(data))
    return grad_input


@_segment_reduce_backward.register_fake
def _(grad, output, data, reduce, lengths, offsets, axis, unsafe, initial, tie):
    return torch.empty_like(data, memory_format=torch.contiguous_format)


def _segment_setup(ctx, inputs, output):
    data, reduce, lengths, offsets, axis, unsafe, initial, tie = inputs
    ctx.save_for_backward(data, output, lengths, offsets)
    ctx.args = (reduce, axis, unsafe, initial, tie)


def _segment_backward(ctx, grad):
    data, output, lengths, offsets = ctx.saved_tensors
    reduce, axis, unsafe, initial, tie = ctx.args
    gi = _segment_reduce_backward(grad, output, data, reduce, lengths, offsets, axis, unsafe, initial, tie)
    return gi, None, None, None, None, None, None, None


_segment_reduce.register_autograd(_segment_backward, setup_context=_segment_setup)


def _no_double_backward(name):  # noqa: D401 - used by every op below
    def setup(ctx, inputs, output):
        pass

    def backward(ctx, *grads):
        raise RuntimeError(f"segred: {name} has no second-order derivative (its backward is not differentiable)")

    return backward, setup


_b, _s = _no_double_backward("segment_reduce")
_segment_reduce_backward.register_autograd(_b, setup_context=_s)


def segment_reduce(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0, unsafe=False, initial=None,
                   tie="split"):
    """torch.segment_reduce with segred's semantics (SEMANTICS.md): the same
    arguments, plus ``tie`` ("split", "first" or "last") for max/min backward."""
    if indices is not None:
        raise NotImplementedError("segment_reduce: indices is not supported (as in torch.segment_reduce); "
                                  "use lengths or offsets")
    if not isinstance(reduce, str):
        raise TypeError(f"reduce: expected a string, got {type(reduce).__name__}")
    if tie not in ("split", "first", "last"):
        raise ValueError(f"segment_reduce: tie={tie!r} is not supported; expected split, first or last")
    return _segment_reduce(data, reduce, lengths, offsets, int(axis), bool(unsafe),
                           None if initial is None else float(initial), tie)


# ---- softmax / log_softmax --------------------------------------------------------------

def _make_softmax_ops(name):
    fwd_name, bwd_name = name, f"{name}_backward"
    fwd_c, fwd_out = getattr(_C, name), getattr(_C, f"{name}_out")
    bwd_out = getattr(_C, f"{name}_backward_out")

    @torch.library.custom_op(f"segred::{fwd_name}", mutates_args=())
    def fwd(x: torch.Tensor, dim: int) -> torch.Tensor:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        fwd_out(x.detach(), dim, out, _stream(x))
        return out

    @fwd.register_fake
    def _(x, dim):
        if not -max(x.dim(), 1) <= dim < max(x.dim(), 1):
            raise ValueError(f"{name}: dim={dim} is out of range for a tensor of {x.dim()} dims")
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    @torch.library.custom_op(f"segred::{bwd_name}", mutates_args=())
    def bwd(grad: torch.Tensor, output: torch.Tensor, dim: int) -> torch.Tensor:
        gi = torch.empty(output.shape, dtype=output.dtype, device=output.device)
        bwd_out(grad.contiguous(), output.detach(), dim, gi, _stream(output))
        return gi

    @bwd.register_fake
    def _(grad, output, dim):
        return torch.empty_like(output, memory_format=torch.contiguous_format)

    def setup(ctx, inputs, output):
        ctx.save_for_backward(output)
        ctx.dim = inputs[1]

    def backward(ctx, grad):
        (output,) = ctx.saved_tensors
        return bwd(grad, output, ctx.dim), None

    fwd.register_autograd(backward, setup_context=setup)
    b, s = _no_double_backward(name)
    bwd.register_autograd(b, setup_context=s)
    # Like torch's own softmax: CUDA autocast runs it in float32; CPU autocast
    # leaves it in the input's dtype (softmax is on CUDA's fp32 list only).
    torch.library.register_autocast(f"segred::{fwd_name}", "cuda", torch.float32)
    del fwd_c
    return fwd


_softmax_op = _make_softmax_ops("softmax")
_log_softmax_op = _make_softmax_ops("log_softmax")


def softmax(input, dim, dtype=None):
    """torch.softmax with segred's kernels: the same arguments (``dtype`` casts the
    input first, as torch does)."""
    if dtype is not None:
        input = input.to(dtype)
    return _softmax_op(input, int(dim))


def log_softmax(input, dim, dtype=None):
    """torch.log_softmax with segred's kernels: the same arguments."""
    if dtype is not None:
        input = input.to(dtype)
    return _log_softmax_op(input, int(dim))


# ---- segment_softmax / segment_log_softmax / segment_logsumexp ---------------------------------

def _make_segment_softmax_ops(kind, code):
    name = f"segment_{kind}"
    lse = kind == "logsumexp"

    def out_shape(data, lengths, offsets, axis):
        if not lse:
            return list(data.shape)
        return _segment_out_shape(data, lengths, offsets, axis)

    @torch.library.custom_op(f"segred::{name}", mutates_args=())
    def fwd(data: torch.Tensor, lengths: Optional[torch.Tensor], offsets: Optional[torch.Tensor], axis: int,
            unsafe: bool) -> torch.Tensor:
        shape = out_shape(data, lengths, offsets, axis)
        if shape is None:  # let the native layer name the broken rule
            _C.segment_softmax(code, data, lengths, offsets, axis, unsafe, _stream(data))
            raise ValueError(f"{name}: invalid arguments")
        out = torch.empty(shape, dtype=data.dtype, device=data.device)
        _C.segment_softmax_out(code, data.detach(), lengths, offsets, axis, unsafe, out, _stream(data))
        return out

    @fwd.register_fake
    def _(data, lengths, offsets, axis, unsafe):
        shape = out_shape(data, lengths, offsets, axis)
        if shape is None:
            raise ValueError(f"{name}: exactly one of lengths/offsets, with ndim == axis + 1, is required")
        return data.new_empty(shape)

    @torch.library.custom_op(f"segred::{name}_backward", mutates_args=())
    def bwd(grad: torch.Tensor, output: torch.Tensor, data: torch.Tensor, lengths: Optional[torch.Tensor],
            offsets: Optional[torch.Tensor], axis: int, unsafe: bool) -> torch.Tensor:
        gi = torch.empty(data.shape, dtype=data.dtype, device=data.device)
        _C.segment_softmax_backward_out(code, grad.contiguous(), output.detach(), data.detach(), lengths, offsets,
                                        axis, unsafe, gi, _stream(data))
        return gi

    @bwd.register_fake
    def _(grad, output, data, lengths, offsets, axis, unsafe):
        return torch.empty_like(data, memory_format=torch.contiguous_format)

    def setup(ctx, inputs, output):
        data, lengths, offsets, axis, unsafe = inputs
        ctx.save_for_backward(data if lse else None, output, lengths, offsets)
        ctx.args = (axis, unsafe)

    def backward(ctx, grad):
        data, output, lengths, offsets = ctx.saved_tensors
        axis, unsafe = ctx.args
        gi = bwd(grad, output, data if lse else output, lengths, offsets, axis, unsafe)
        return gi, None, None, None, None

    fwd.register_autograd(backward, setup_context=setup)
    b, s = _no_double_backward(name)
    bwd.register_autograd(b, setup_context=s)

    def api(data, *, lengths=None, offsets=None, axis=0, unsafe=False):
        return fwd(data, lengths, offsets, int(axis), bool(unsafe))

    api.__name__ = name
    api.__doc__ = f"segred.{name} as a PyTorch operator (autograd, torch.compile)."
    return api


segment_softmax = _make_segment_softmax_ops("softmax", 0)
segment_log_softmax = _make_segment_softmax_ops("log_softmax", 1)
segment_logsumexp = _make_segment_softmax_ops("logsumexp", 2)
__all__ += ["segment_softmax", "segment_log_softmax", "segment_logsumexp"]
