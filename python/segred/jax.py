"""segred ops for JAX, through the XLA FFI: they run inside jax.jit, and
jax.grad / jax.vjp use segred's own backward (custom_vjp).

    import segred.jax as sj
    y = sj.segment_reduce(x, "max", lengths=lengths)          # differentiable in x
    p = sj.softmax(x, axis=-1)

Errors inside a compiled computation (e.g. lengths that do not sum to the axis)
surface when the computation runs, as JAX's runtime error carrying segred's
message; shape errors are raised at trace time as ValueError.
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from . import _C

__all__ = ["segment_reduce", "softmax", "log_softmax", "segment_softmax", "segment_log_softmax", "segment_logsumexp"]

if _C.jax_ffi_targets is None:  # pragma: no cover - depends on the build
    raise ImportError("segred.jax: this segred build has no XLA FFI handlers (jax was not importable when it "
                      "was built); reinstall segred with jax installed")

for _platform, _targets in _C.jax_ffi_targets.items():
    for _name, _capsule in _targets.items():
        jax.ffi.register_ffi_target(_name, _capsule, platform=_platform)


def _segment_shape(data, meta, kind, axis):
    nd = data.ndim
    ax = axis + nd if axis < 0 else axis
    if not 0 <= ax < nd:
        raise ValueError(f"segment_reduce: axis={axis} is out of range for a tensor of {nd} dims")
    if meta.ndim != ax + 1:
        raise ValueError(f"segment_reduce: {kind} must have ndim == axis + 1 = {ax + 1}, got shape {meta.shape}")
    s = meta.shape[-1] - (1 if kind == "offsets" else 0)
    if s < 0:
        raise ValueError("segment_reduce: offsets.shape[-1] must be >= 1 (S + 1 offsets), got 0")
    shape = list(data.shape)
    shape[ax] = s
    return tuple(shape)


def _attrs(reduce, kind, axis, unsafe, initial):
    return dict(reduce=reduce, offsets=np.bool_(kind == "offsets"), axis=np.int64(axis), unsafe=np.bool_(unsafe),
                has_initial=np.bool_(initial is not None), initial=np.float64(0.0 if initial is None else initial))


def _fwd_call(data, meta, reduce, kind, axis, unsafe, initial):
    out = jax.ShapeDtypeStruct(_segment_shape(data, meta, kind, axis), data.dtype)
    return jax.ffi.ffi_call("segred_segment_reduce", out)(data, meta, **_attrs(reduce, kind, axis, unsafe, initial))


@partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4, 5, 6, 7))
def _segment_reduce(data, meta, reduce, kind, axis, unsafe, initial, tie):
    return _fwd_call(data, meta, reduce, kind, axis, unsafe, initial)


def _segment_fwd(data, meta, reduce, kind, axis, unsafe, initial, tie):
    y = _fwd_call(data, meta, reduce, kind, axis, unsafe, initial)
    return y, (data, meta, y)


def _segment_bwd(reduce, kind, axis, unsafe, initial, tie, res, g):
    data, meta, y = res
    gi = jax.ffi.ffi_call("segred_segment_reduce_backward", jax.ShapeDtypeStruct(data.shape, data.dtype))(
        g.astype(data.dtype), y, data, meta, tie=tie, **_attrs(reduce, kind, axis, unsafe, initial))
    # metadata is integer: its cotangent is the float0 zero JAX expects
    return gi, np.zeros(meta.shape, dtype=jax.dtypes.float0)


_segment_reduce.defvjp(_segment_fwd, _segment_bwd)


def segment_reduce(data, reduce, *, lengths=None, offsets=None, axis=0, unsafe=False, initial=None, tie="split"):
    """segred.segment_reduce for JAX arrays (SEMANTICS.md); differentiable in
    ``data`` with segred's backward (``tie`` as in segred.segment_reduce_backward)."""
    if (lengths is None) == (offsets is None):
        raise ValueError("segment_reduce: pass exactly one of lengths and offsets")
    if tie not in ("split", "first", "last"):
        raise ValueError(f"segment_reduce_backward: tie={tie!r} is not supported; expected split, first or last")
    kind = "lengths" if lengths is not None else "offsets"
    meta = jnp.asarray(lengths if lengths is not None else offsets)
    return _segment_reduce(jnp.asarray(data), meta, reduce, kind, int(axis), bool(unsafe),
                           None if initial is None else float(initial), tie)


@partial(jax.custom_vjp, nondiff_argnums=(1, 2))
def _softmax(x, dim, log):
    return jax.ffi.ffi_call("segred_softmax", jax.ShapeDtypeStruct(x.shape, x.dtype))(
        x, dim=np.int64(dim), log=np.bool_(log))


def _softmax_fwd(x, dim, log):
    y = _softmax(x, dim, log)
    return y, y


def _softmax_bwd(dim, log, y, g):
    gi = jax.ffi.ffi_call("segred_softmax_backward", jax.ShapeDtypeStruct(y.shape, y.dtype))(
        g.astype(y.dtype), y, dim=np.int64(dim), log=np.bool_(log))
    return (gi,)


_softmax.defvjp(_softmax_fwd, _softmax_bwd)


def softmax(x, axis=-1):
    """softmax along ``axis`` (segred's kernels; differentiable)."""
    return _softmax(jnp.asarray(x), int(axis), False)


def log_softmax(x, axis=-1):
    """log_softmax along ``axis`` (segred's kernels; differentiable)."""
    return _softmax(jnp.asarray(x), int(axis), True)


_SEGSOFT = {"softmax": 0, "log_softmax": 1, "logsumexp": 2}


def _segsoft_attrs(kind, meta_kind, axis, unsafe):
    return dict(op=np.int64(_SEGSOFT[kind]), offsets=np.bool_(meta_kind == "offsets"), axis=np.int64(axis),
                unsafe=np.bool_(unsafe))


def _segsoft_call(data, meta, kind, meta_kind, axis, unsafe):
    shape = _segment_shape(data, meta, meta_kind, axis) if kind == "logsumexp" else data.shape
    return jax.ffi.ffi_call("segred_segment_softmax", jax.ShapeDtypeStruct(shape, data.dtype))(
        data, meta, **_segsoft_attrs(kind, meta_kind, axis, unsafe))


@partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4, 5))
def _segment_softmax(data, meta, kind, meta_kind, axis, unsafe):
    return _segsoft_call(data, meta, kind, meta_kind, axis, unsafe)


def _segsoft_fwd(data, meta, kind, meta_kind, axis, unsafe):
    y = _segsoft_call(data, meta, kind, meta_kind, axis, unsafe)
    return y, (data, meta, y)


def _segsoft_bwd(kind, meta_kind, axis, unsafe, res, g):
    data, meta, y = res
    gi = jax.ffi.ffi_call("segred_segment_softmax_backward", jax.ShapeDtypeStruct(data.shape, data.dtype))(
        g.astype(data.dtype), y, data, meta, **_segsoft_attrs(kind, meta_kind, axis, unsafe))
    return gi, np.zeros(meta.shape, dtype=jax.dtypes.float0)


_segment_softmax.defvjp(_segsoft_fwd, _segsoft_bwd)


def _segsoft_api(kind):
    def api(data, *, lengths=None, offsets=None, axis=0, unsafe=False):
        if (lengths is None) == (offsets is None):
            raise ValueError(f"segment_{kind}: pass exactly one of lengths and offsets")
        meta_kind = "lengths" if lengths is not None else "offsets"
        meta = jnp.asarray(lengths if lengths is not None else offsets)
        return _segment_softmax(jnp.asarray(data), meta, kind, meta_kind, int(axis), bool(unsafe))

    api.__name__ = f"segment_{kind}"
    api.__doc__ = f"segred.segment_{kind} for JAX arrays (jit, grad)."
    return api


segment_softmax = _segsoft_api("softmax")
segment_log_softmax = _segsoft_api("log_softmax")
segment_logsumexp = _segsoft_api("logsumexp")
