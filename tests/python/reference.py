"""float64 reference for segment_reduce and its backward, in plain NumPy loops,
written from SEMANTICS.md and independent of segred's kernels."""
import math

import numpy as np


def seg_bounds(lengths=None, offsets=None):
    """Per-row lists of (begin, end) from lengths [..., S] or offsets [..., S+1] (2-D: rows x S)."""
    if lengths is not None:
        l2 = np.asarray(lengths).reshape(-1, np.asarray(lengths).shape[-1])
        out = []
        for row in l2:
            b = np.concatenate([[0], np.cumsum(row)])
            out.append([(int(b[i]), int(b[i + 1])) for i in range(len(row))])
        return out
    o2 = np.asarray(offsets).reshape(-1, np.asarray(offsets).shape[-1])
    return [[(int(r[i]), int(r[i + 1])) for i in range(len(r) - 1)] for r in o2]


def _as3(x, axis):
    x = np.asarray(x, dtype=np.float64)
    outer = int(np.prod(x.shape[:axis])) if axis > 0 else 1
    inner = int(np.prod(x.shape[axis + 1:])) if axis + 1 < x.ndim else 1
    return x.reshape(outer, x.shape[axis], inner)


def forward(x, reduce, *, lengths=None, offsets=None, axis=0, initial=None):
    reduce = {"amax": "max", "amin": "min"}.get(reduce, reduce)
    x = np.asarray(x)
    axis = axis % x.ndim
    x3 = _as3(x, axis)
    bounds = seg_bounds(lengths, offsets)
    S = len(bounds[0]) if bounds else 0
    out = np.empty((x3.shape[0], S, x3.shape[2]))
    start = {"sum": 0.0, "mean": 0.0, "prod": 1.0, "max": -math.inf, "min": math.inf}[reduce]
    if initial is not None:
        start = float(initial)
    for r in range(x3.shape[0]):
        for s, (b, e) in enumerate(bounds[r]):
            for f in range(x3.shape[2]):
                v = start
                seg = x3[r, b:e, f]
                for xi in seg:
                    if reduce in ("sum", "mean"):
                        v = v + xi
                    elif reduce == "prod":
                        v = v * xi
                    elif math.isnan(xi) or math.isnan(v):
                        v = math.nan
                    elif reduce == "max":
                        v = max(v, xi)
                    else:
                        v = min(v, xi)
                if reduce == "mean":
                    v = v / len(seg) if len(seg) else (float(initial) if initial is not None else math.nan)
                out[r, s, f] = v
    shape = list(x.shape)
    shape[axis] = S
    return out.reshape(shape)


def backward(grad, output, x, reduce, *, lengths=None, offsets=None, axis=0, initial=None, tie="split"):
    reduce = {"amax": "max", "amin": "min"}.get(reduce, reduce)
    x = np.asarray(x)
    axis = axis % x.ndim
    x3 = _as3(x, axis)
    g3 = _as3(grad, axis)
    y3 = _as3(output, axis)
    bounds = seg_bounds(lengths, offsets)
    gi = np.zeros_like(x3)
    for r in range(x3.shape[0]):
        for s, (b, e) in enumerate(bounds[r]):
            n = e - b
            for f in range(x3.shape[2]):
                g = g3[r, s, f]
                seg = x3[r, b:e, f]
                if reduce == "sum":
                    gi[r, b:e, f] = g
                elif reduce == "mean":
                    gi[r, b:e, f] = g / n if n else 0
                elif reduce == "prod":
                    start = 1.0 if initial is None else float(initial)
                    for j in range(n):
                        p = start
                        for k in range(n):
                            if k != j:
                                p *= seg[k]
                        gi[r, b + j, f] = g * p
                else:
                    m = [j for j in range(n) if math.isnan(seg[j]) or seg[j] == y3[r, s, f]]
                    if not m:
                        continue
                    if tie == "split":
                        for j in m:
                            gi[r, b + j, f] = g / len(m)
                    else:
                        gi[r, b + (m[0] if tie == "first" else m[-1]), f] = g
    return gi.reshape(x.shape)
