"""The softmax family (SEMANTICS.md, "softmax family"): softmax, log_softmax and
their backward over any dim, NumPy in and out.

Per row along ``dim`` (m = max, s = sum exp(x - m)):
softmax ``exp(x - m) / s``; log_softmax ``x - m - log(s)``; softmax_backward
``y * (g - sum(g * y))``; log_softmax_backward ``g - exp(y) * sum(g)``.
float16/bfloat16/float32 accumulate in float32, float64 in float64. A row of all
-inf, or with any NaN or +inf, gives NaN; a dim of size 1 gives 1 / 0 / gradient
0; an empty array gives an empty result; a 0-dim array counts as shape [1].
Inputs may have any strides; the result is C-contiguous, of the input's dtype.
"""
from __future__ import annotations

import numpy as _np

from . import _C
from . import _frameworks as _fw

__all__ = ["softmax", "log_softmax", "softmax_backward", "log_softmax_backward"]


def _array(x, name):
    if isinstance(x, _np.ndarray):
        return x
    if hasattr(x, "__dlpack__") and not isinstance(x, (list, tuple)):
        return x
    raise TypeError(f"{name}: expected a numpy.ndarray (or a DLPack array), got {type(x).__name__}")


def _dim(dim):
    if isinstance(dim, bool) or not isinstance(dim, (int, _np.integer)):
        raise TypeError(f"dim: expected an int, got {type(dim).__name__}")
    return int(dim)


def _forward(name, x, dim, stream):
    fw, dev = _fw.common([("x", x)])
    if fw == "torch" and stream is None:
        from . import torch as _st

        return getattr(_st, name)(x, _dim(dim))
    _array(x, "x")
    return _fw.wrap(getattr(_C, name)(x, _dim(dim), _fw.current_stream(fw, dev, stream)), fw, dev)


def _backward(name, grad, output, dim, stream):
    fw, dev = _fw.common([("grad", grad), ("output", output)])
    _array(grad, "grad")
    _array(output, "output")
    return _fw.wrap(getattr(_C, name)(grad, output, _dim(dim), _fw.current_stream(fw, dev, stream)), fw, dev)


def softmax(x, dim, *, stream=None):
    """softmax of ``x`` along ``dim`` (wrapped like a Python index). Returns the
    caller's array type (NumPy, PyTorch, CuPy, JAX) on its device; PyTorch tensors
    go through the ``segred.torch`` operator, so autograd works on them."""
    return _forward("softmax", x, dim, stream)


def log_softmax(x, dim, *, stream=None):
    """log_softmax of ``x`` along ``dim``: ``x - max - log(sum(exp(x - max)))``."""
    return _forward("log_softmax", x, dim, stream)


def softmax_backward(grad, output, dim, *, stream=None):
    """Gradient of softmax: ``output * (grad - sum(grad * output, dim))``.

    ``output`` is softmax's result; ``grad`` has its shape and dtype."""
    return _backward("softmax_backward", grad, output, dim, stream)


def log_softmax_backward(grad, output, dim, *, stream=None):
    """Gradient of log_softmax: ``grad - exp(output) * sum(grad, dim)``.

    ``output`` is log_softmax's result; ``grad`` has its shape and dtype."""
    return _backward("log_softmax_backward", grad, output, dim, stream)
