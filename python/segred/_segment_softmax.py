"""The ragged softmax family (SEMANTICS.md, "segment softmax family"): softmax,
log_softmax and logsumexp over the segments of segment_reduce, and their backward.

For softmax and log_softmax, the backward of data's shape needs the forward's
output only; for logsumexp (segment_reduce's output shape) it needs the data too.
Arrays of every framework in and out, as the other segred functions.
"""
from __future__ import annotations

from . import _C
from . import _frameworks as _fw

__all__ = ["segment_softmax", "segment_log_softmax", "segment_logsumexp", "segment_softmax_backward",
           "segment_log_softmax_backward", "segment_logsumexp_backward"]

_OPS = {"softmax": 0, "log_softmax": 1, "logsumexp": 2}


def _check_axis(axis):
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise TypeError(f"axis: expected an int, got {type(axis).__name__}")
    return axis


def _forward(op, data, lengths, offsets, axis, unsafe, stream):
    fw, dev = _fw.common([("data", data), ("lengths", lengths), ("offsets", offsets)])
    if fw == "torch" and stream is None:
        from . import torch as _st

        return getattr(_st, f"segment_{op}")(data, lengths=lengths, offsets=offsets, axis=_check_axis(axis),
                                             unsafe=bool(unsafe))
    return _fw.wrap(_C.segment_softmax(_OPS[op], data, lengths, offsets, _check_axis(axis), bool(unsafe),
                                       _fw.current_stream(fw, dev, stream)), fw, dev)


def _backward(op, grad, output, data, lengths, offsets, axis, unsafe, stream):
    fw, dev = _fw.common([("grad", grad), ("output", output), ("data", data), ("lengths", lengths),
                          ("offsets", offsets)])
    return _fw.wrap(_C.segment_softmax_backward(_OPS[op], grad, output, data, lengths, offsets, _check_axis(axis),
                                                bool(unsafe), _fw.current_stream(fw, dev, stream)), fw, dev)


def segment_softmax(data, *, lengths=None, offsets=None, axis=0, unsafe=False, stream=None):
    """Softmax of each segment along ``axis`` (per inner index, e.g. per head);
    data's shape, 0 outside every segment."""
    return _forward("softmax", data, lengths, offsets, axis, unsafe, stream)


def segment_log_softmax(data, *, lengths=None, offsets=None, axis=0, unsafe=False, stream=None):
    """log_softmax of each segment along ``axis``; data's shape, 0 outside every segment."""
    return _forward("log_softmax", data, lengths, offsets, axis, unsafe, stream)


def segment_logsumexp(data, *, lengths=None, offsets=None, axis=0, unsafe=False, stream=None):
    """logsumexp of each segment: segment_reduce's output shape; -inf for an empty segment."""
    return _forward("logsumexp", data, lengths, offsets, axis, unsafe, stream)


def segment_softmax_backward(grad, output, *, lengths=None, offsets=None, axis=0, unsafe=False, stream=None):
    """``output * (grad - sum_segment(grad * output))``."""
    return _backward("softmax", grad, output, output, lengths, offsets, axis, unsafe, stream)


def segment_log_softmax_backward(grad, output, *, lengths=None, offsets=None, axis=0, unsafe=False, stream=None):
    """``grad - exp(output) * sum_segment(grad)``."""
    return _backward("log_softmax", grad, output, output, lengths, offsets, axis, unsafe, stream)


def segment_logsumexp_backward(grad, output, data, *, lengths=None, offsets=None, axis=0, unsafe=False,
                               stream=None):
    """``grad_segment * exp(data - output_segment)``."""
    return _backward("logsumexp", grad, output, data, lengths, offsets, axis, unsafe, stream)
