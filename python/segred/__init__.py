"""segred: segment reductions and the softmax family, right at every boundary.

Every function here computes exactly what SEMANTICS.md (docs/semantics.md) states,
on NumPy arrays (other frameworks arrive through DLPack in a later release).
Errors: ValueError for bad values and shapes, TypeError for unsupported dtypes or
array types, RuntimeError for device failures; every message names the argument.
"""
from __future__ import annotations

import numpy as _np

from . import _C
from . import _frameworks as _fw
from ._softmax import log_softmax, log_softmax_backward, softmax, softmax_backward  # noqa: E402
from ._segment_softmax import (  # noqa: E402
    segment_log_softmax,
    segment_log_softmax_backward,
    segment_logsumexp,
    segment_logsumexp_backward,
    segment_softmax,
    segment_softmax_backward,
)

__all__ = [
    "segment_reduce",
    "segment_reduce_backward",
    "softmax",
    "log_softmax",
    "softmax_backward",
    "log_softmax_backward",
    "segment_softmax",
    "segment_log_softmax",
    "segment_logsumexp",
    "segment_softmax_backward",
    "segment_log_softmax_backward",
    "segment_logsumexp_backward",
    "trace",
    "paths",
    "built_with_cuda",
    "cuda_device_count",
    "__version__",
]

__version__ = _C.__version__
built_with_cuda = _C.built_with_cuda
cuda_device_count = _C.cuda_device_count


def _array(x, name, *, optional=False):
    if x is None:
        if optional:
            return None
        raise TypeError(f"{name}: expected a numpy.ndarray, got None")
    if isinstance(x, _np.ndarray):
        return x
    if hasattr(x, "__dlpack__") and not isinstance(x, (list, tuple)):
        return x  # DLPack producers (torch, cupy, jax) are handed through as they are
    raise TypeError(f"{name}: expected a numpy.ndarray (or a DLPack array), got {type(x).__name__}")


def _axis(axis):
    if isinstance(axis, bool) or not isinstance(axis, (int, _np.integer)):
        raise TypeError(f"axis: expected an int, got {type(axis).__name__}")
    return int(axis)


def _initial(initial):
    if initial is None:
        return None
    if isinstance(initial, bool) or not isinstance(initial, (int, float, _np.integer, _np.floating)):
        raise TypeError(f"initial: expected a number or None, got {type(initial).__name__}")
    return float(initial)


def segment_reduce(data, reduce, *, lengths=None, offsets=None, axis=0, unsafe=False, initial=None, stream=None):
    """Reduce contiguous segments of ``data`` along ``axis``.

    reduce: "sum", "mean", "max", "min", "prod" (and the aliases "amax", "amin").
    Exactly one of ``lengths`` (S per row) or ``offsets`` (S + 1 per row); with
    ``axis > 0`` the metadata is batched: its shape[:-1] equals data.shape[:axis].
    Returns data's dtype, shape with ``axis`` replaced by S, contiguous, as an
    array of the caller's framework (NumPy, PyTorch, CuPy, JAX) on its device.
    ``unsafe=True`` skips metadata validation (segments are still clamped, so no
    input can cause an out-of-bounds access). ``initial`` replaces the start value
    and takes part in every segment. CUDA work runs on the caller's current stream
    (torch's or CuPy's) or on ``stream``. PyTorch tensors go through the
    ``segred.torch`` operator, so autograd works on them.
    """
    fw, dev = _fw.common([("data", data), ("lengths", lengths), ("offsets", offsets)])
    if fw == "torch" and stream is None:
        from . import torch as _st

        return _st.segment_reduce(data, reduce, lengths=lengths, offsets=offsets, axis=_axis(axis),
                                  unsafe=bool(unsafe), initial=_initial(initial))
    _array(data, "data")
    return _fw.wrap(_C.segment_reduce(data, reduce, lengths, offsets, _axis(axis), bool(unsafe), _initial(initial),
                                      _fw.current_stream(fw, dev, stream)), fw, dev)


def segment_reduce_backward(grad, output, data, reduce, *, lengths=None, offsets=None, axis=0, initial=None,
                            tie="split", unsafe=False, stream=None):
    """Gradient of segment_reduce with respect to ``data``.

    ``grad`` and ``output`` have the forward output's shape. For max/min, the
    elements equal to the output (or NaN) share the gradient: ``tie="split"``
    divides it equally among them for every sign of the gradient (PyTorch divides
    only positive gradients); ``"first"``/``"last"`` give it whole to the first/last.
    prod is computed in O(n) without division, so zeros are exact.
    """
    if not isinstance(tie, str):
        raise TypeError(f"tie: expected 'split', 'first' or 'last', got {type(tie).__name__}")
    if not isinstance(reduce, str):
        raise TypeError(f"reduce: expected a string, got {type(reduce).__name__}")
    fw, dev = _fw.common([("grad", grad), ("output", output), ("data", data), ("lengths", lengths),
                          ("offsets", offsets)])
    _array(data, "data")
    return _fw.wrap(_C.segment_reduce_backward(grad, output, data, reduce, lengths, offsets, _axis(axis),
                                               _initial(initial), tie, bool(unsafe),
                                               _fw.current_stream(fw, dev, stream)), fw, dev)


class trace:
    """Record every kernel launch made inside the ``with`` block.

    >>> with segred.trace() as t:
    ...     segred.segment_reduce(x, "sum", lengths=l)
    >>> [r.path for r in t.records]
    ['segment_reduce.fwd.cpu.flat.i64']

    Each record has ``op``, ``direction`` ("fwd"/"bwd"), ``backend`` ("cpu"/"cuda"),
    ``path`` (the stable registered name), ``index_bits`` (32/64), ``variant``
    (the choice inside the path that the launch made, where the path has one,
    e.g. "fused_fixup" / "fixup_tree" on the CUDA flat segment_reduce forward,
    "stage_gy" / "stage_y" on the CUDA staged softmax backward; else ""), and on
    CUDA ``grid`` and ``block``.
    """

    def __init__(self):
        self._session = None
        self._frozen = []

    def __enter__(self):
        self._session = _C.TraceSession()
        self._frozen = []
        return self

    def __exit__(self, *exc):
        self._frozen = list(self._session.records())
        self._session.stop()
        self._session = None
        return False

    @property
    def records(self):
        if self._session is not None:
            return list(self._session.records())
        return list(self._frozen)


def paths():
    """Every kernel path this build contains: objects with ``name``, ``op``,
    ``direction``, ``backend`` and ``index_bits``."""
    return list(_C.paths())
