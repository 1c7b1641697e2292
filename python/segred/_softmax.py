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


def softmax(x, dim):
    """softmax of ``x`` along ``dim`` (wrapped like a Python index)."""
    return _C.softmax(_array(x, "x"), _dim(dim))


def log_softmax(x, dim):
    """log_softmax of ``x`` along ``dim``: ``x - max - log(sum(exp(x - max)))``."""
    return _C.log_softmax(_array(x, "x"), _dim(dim))


def softmax_backward(grad, output, dim):
    """Gradient of softmax: ``output * (grad - sum(grad * output, dim))``.

    ``output`` is softmax's result; ``grad`` has its shape and dtype."""
    return _C.softmax_backward(_array(grad, "grad"), _array(output, "output"), _dim(dim))


def log_softmax_backward(grad, output, dim):
    """Gradient of log_softmax: ``grad - exp(output) * sum(grad, dim)``.

    ``output`` is log_softmax's result; ``grad`` has its shape and dtype."""
    return _C.log_softmax_backward(_array(grad, "grad"), _array(output, "output"), _dim(dim))
