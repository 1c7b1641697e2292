"""Array exchange with NumPy, PyTorch, CuPy and JAX, without copies.

Inputs reach the native module through DLPack / the buffer protocol as they are
(nanobind reads the pointer, shape, strides and device). Results come back as a
DLPack-capable array on the input's device and are wrapped into the caller's
framework with that framework's own ``from_dlpack``: no copy either way. CUDA
work runs on the caller's current stream (torch's or CuPy's) unless ``stream=``
is given.
"""
from __future__ import annotations

import numpy as np

_FRAMEWORK_MODULES = {"numpy": "numpy", "torch": "torch", "jax": "jax", "jaxlib": "jax", "cupy": "cupy"}


def framework_of(x):
    """'numpy', 'torch', 'jax', 'cupy', or 'dlpack' for another DLPack producer."""
    if isinstance(x, np.ndarray):
        return "numpy"
    root = type(x).__module__.split(".")[0]
    if root in _FRAMEWORK_MODULES:
        return _FRAMEWORK_MODULES[root]
    if hasattr(x, "__dlpack__"):
        return "dlpack"
    return None


def device_of(x, fw):
    if fw == "numpy":
        return ("cpu", 0)
    kind, index = x.__dlpack_device__()
    kind = int(kind)
    return ("cuda", int(index)) if kind in (2, 3) else ("cpu", 0) if kind == 1 else (f"dlpack-device-{kind}", int(index))


def common(arrays):
    """Checks that the named arrays (None allowed) share one framework and one
    device; returns (framework, device). Raises TypeError naming the arguments."""
    fw = dev = None
    first = None
    for name, a in arrays:
        if a is None:
            continue
        f = framework_of(a)
        if f is None:
            raise TypeError(f"{name}: expected a NumPy, PyTorch, CuPy or JAX array (or any DLPack array), "
                            f"got {type(a).__name__}")
        d = device_of(a, f)
        if fw is None:
            fw, dev, first = f, d, name
        elif f != fw:
            raise TypeError(f"{name} is a {f} array but {first} is a {fw} array: pass arrays of one framework")
        elif d != dev:
            raise ValueError(f"{name} is on {d[0]}:{d[1]} but {first} is on {dev[0]}:{dev[1]}: "
                             f"pass arrays on one device")
    return fw, dev


def current_stream(fw, dev, stream=None):
    """The cudaStream_t (as an int) the call should run on."""
    if stream is not None:
        return int(getattr(stream, "cuda_stream", getattr(stream, "ptr", stream)))
    if dev is None or dev[0] != "cuda":
        return 0
    if fw == "torch":
        import torch

        return int(torch.cuda.current_stream(dev[1]).cuda_stream)
    if fw == "cupy":
        import cupy

        return int(cupy.cuda.get_current_stream().ptr)
    return 0


class _DLPackResult:
    """A native result (a DLPack capsule) presented through the DLPack protocol,
    so each framework's own from_dlpack can take it without a copy."""

    def __init__(self, capsule, dev):
        self._capsule = capsule
        self._device = (2, dev[1]) if dev and dev[0] == "cuda" else (1, 0)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):  # noqa: ARG002
        return self._capsule

    def __dlpack_device__(self):
        return self._device


def wrap(result, fw, dev=None):
    """Hands a native result (a DLPack capsule) to the caller's framework, no copy."""
    if not type(result).__name__ == "PyCapsule":
        return result  # already an array (e.g. NumPy from a CPU-only binding)
    obj = _DLPackResult(result, dev)
    if fw == "torch":
        import torch

        return torch.from_dlpack(obj)
    if fw == "cupy":
        import cupy

        return cupy.from_dlpack(obj)
    if fw == "jax":
        import jax

        return jax.dlpack.from_dlpack(obj)
    if obj._device[0] != 1:
        raise TypeError("result: a CUDA result needs a PyTorch, CuPy or JAX input to return it as")
    return np.from_dlpack(obj)


