"""segred align: run segred's verification matrix through PyTorch's native ops on
any torch device and report where torch diverges from the float64 reference.

    python -m segred.align --device cpu [--report FILE] [--large]
    segred align --device cuda

The cases and their expected values are the ones `segred check` uses (defined
once, in cli/cases.cpp, and computed by the float64 reference). Each case gives
two rows, forward and backward, reported as ``case | observed | expected |
verdict``, the way a backend maintainer files a defect; wrong rows are grouped by
defect class. Where segred supports the device, each row also shows segred's
verdict on the same case. Exit status: 0 when torch matched every row, 1 when it
diverged, 2 on a usage error.

torch.segment_reduce has no tie rule: its rows are compared with tie="split", the
rule of amax/amin and of SEMANTICS.md.

The softmax rows (cli/softmax_cases.cpp: last dim and non-last dim, every special
value, awkward sizes, transposed inputs, float64/32/16 and bfloat16) run through
torch.softmax, torch.log_softmax, torch._softmax_backward_data and
torch._log_softmax_backward_data; the backward gets the reference forward
(rounded to the dtype) as its output. With --large, the softmax boundary cases of
`segred check --large` run too: [1, 2, 2^31+1] float16 over dim 1 first (the
shape on which torch 2.11's spatial backward is wrong on CUDA), then a last-dim
row of 2^31+2 elements, 2.2e9 rows of 1 and 1.1e9 rows of 2, forward and
backward, softmax and log_softmax; arrays are built on the device from a fill
value and a few patched elements, and only the checked elements (both ends, both
sides of 2^31 and 2^32, the patched ones) are read back and compared exactly with
the closed-form float64 expectations. Each states its memory need and is skipped,
and said so, where the device lacks it. A boundary row that is wrong while every
small row of the same layout and direction matched is classed as
"<layout> softmax <direction>: 32-bit offsets wrap past UINT32_MAX elements" (or
"overflow past INT32_MAX elements" for shapes between 2^31 and 2^32 elements).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass, field

import numpy as np

from . import _C

TIE_SIGN_DEFECT = "max/min backward: tie split depends on gradient sign"


def wrap_defect(layout, direction, boundary):
    """The defect class of a boundary row that fails where the small rows pass."""
    what = "wrap past UINT32_MAX" if boundary == "UINT32_MAX" else "overflow past INT32_MAX"
    return f"{layout} softmax {'forward' if direction == 'fwd' else 'backward'}: 32-bit offsets {what} elements"


@dataclass
class AlignRow:
    case: str
    direction: str  # "fwd" / "bwd"
    observed: str
    expected: str
    verdict: str  # "ok" / "WRONG" / "skipped"
    defect: str = ""
    segred: str = ""  # segred's verdict on the same case, where it supports the device
    detail: dict = field(default_factory=dict)


def _first_mismatch(got, want, tol):
    got = np.asarray(got, dtype=np.float64).reshape(-1)
    want = np.asarray(want, dtype=np.float64).reshape(-1)
    if got.shape != want.shape:
        return f"shape {got.shape}", f"shape {want.shape}"
    with np.errstate(invalid="ignore"):
        err = np.abs(got - want) / (1 + np.abs(want))
    ok = (np.isnan(got) & np.isnan(want)) | (np.isinf(want) & (got == want)) | (err <= tol)
    bad = np.flatnonzero(~ok)
    if bad.size == 0:
        return None
    i = int(bad[0])
    return f"[{i}] = {got[i]:.6g}", f"[{i}] = {want[i]:.6g}"


def _close(got, want, tol):
    return _first_mismatch(got, want, tol) is None


def torch_impl(device):
    """torch.segment_reduce forward and autograd backward on `device`."""
    import torch

    def run(case):
        dtype = getattr(torch, case["dtype"])
        x = torch.tensor(case["data"], dtype=dtype, device=device, requires_grad=True)
        meta = torch.tensor(case["meta"], dtype=torch.int64, device=device)
        kwargs = {case["meta_kind"]: meta, "axis": case["axis"]}
        if case["initial"] is not None:
            kwargs["initial"] = case["initial"]
        y = torch.segment_reduce(x, case["reduce"], **kwargs)
        g = torch.tensor(case["grad"], dtype=dtype, device=device)
        (gi,) = torch.autograd.grad(y, x, g)
        return y.detach().cpu().double().numpy(), gi.detach().cpu().double().numpy()

    return run


def segred_impl(case):
    """segred on the CPU, through the same interface (used beside torch, and to
    show that a correct implementation yields no wrong rows)."""
    import segred

    dtype = np.dtype(case["dtype"])
    x = case["data"].astype(dtype)
    kw = {case["meta_kind"]: case["meta"], "axis": case["axis"], "initial": case["initial"]}
    y = segred.segment_reduce(x, case["reduce"], **kw)
    yref = case["expected_out"].astype(dtype)
    gi = segred.segment_reduce_backward(case["grad"].astype(dtype), yref, x, case["reduce"], tie=case["tie"], **kw)
    return y.astype(np.float64), gi.astype(np.float64)


def _tol(dtype):
    return 1e-12 if dtype == "float64" else 2e-6


def align_cases(impl, *, with_segred=False, progress=None):
    """Runs every torch-comparable case through `impl`; returns AlignRows."""
    cases = [c for c in _C.segment_cases() if c["tie"] == "split"]
    rows = []
    for k, case in enumerate(cases):
        if progress:
            progress(k + 1, len(cases), case["name"])
        tol = _tol(case["dtype"])
        seg_verdict = ""
        if with_segred:
            try:
                sy, sg = segred_impl(case)
                seg_ok = _close(sy, case["expected_out"], tol) and _close(sg, case["expected_grad"], tol)
                seg_verdict = "ok" if seg_ok else "WRONG"
            except Exception as e:  # noqa: BLE001 - reported, not hidden
                seg_verdict = f"raised {type(e).__name__}"
        try:
            y, gi = impl(case)
        except Exception as e:  # noqa: BLE001 - a raise is a reportable divergence
            msg = f"raised {type(e).__name__}: {str(e).splitlines()[0][:80]}"
            for d in ("fwd", "bwd"):
                rows.append(AlignRow(case["name"], d, msg, "a result", "WRONG",
                                     f"segment_reduce {case['reduce']}: raises on input '{case['input']}'", seg_verdict))
            continue
        for d, got, want in (("fwd", y, case["expected_out"]), ("bwd", gi, case["expected_grad"])):
            mm = _first_mismatch(got, want, tol)
            if mm is None:
                rows.append(AlignRow(case["name"], d, "matches", "", "ok", "", seg_verdict))
                continue
            defect = f"segment_reduce {case['reduce']} {'forward' if d == 'fwd' else 'backward'}: differs on input '{case['input']}'"
            if d == "bwd" and case["defect_grad_sign"] is not None and _close(got, case["defect_grad_sign"], tol):
                defect = TIE_SIGN_DEFECT
            rows.append(AlignRow(case["name"], d, mm[0], mm[1], "WRONG", defect, seg_verdict,
                                 {"grad_value": case["grad_value"], "reduce": case["reduce"],
                                  "meta_kind": case["meta_kind"], "input": case["input"]}))
    return rows


# ---- softmax ------------------------------------------------------------------


class TorchSoftmax:
    """PyTorch's native softmax ops (the implementation under test)."""

    name = "torch"

    def forward(self, x, dim, log):
        import torch

        return torch.log_softmax(x, dim) if log else torch.softmax(x, dim)

    def backward(self, grad, output, dim, log):
        import torch

        f = torch._log_softmax_backward_data if log else torch._softmax_backward_data
        return f(grad, output, dim, output.dtype)


class SegredSoftmax:
    """segred's softmax ops on the same torch tensors (beside torch, and to show
    that a correct implementation yields no wrong rows)."""

    name = "segred"

    def forward(self, x, dim, log):
        import segred

        return segred.log_softmax(x, dim) if log else segred.softmax(x, dim)

    def backward(self, grad, output, dim, log):
        import segred

        return (segred.log_softmax_backward if log else segred.softmax_backward)(grad, output, dim)


def segred_supports(device):
    """Whether segred runs on this torch device (cpu always; cuda when built with it
    and a GPU is present)."""
    kind = str(device).split(":")[0]
    if kind == "cpu":
        return True
    return kind == "cuda" and _C.cuda_device_count() > 0 and any(
        p.backend == "cuda" and p.op == "softmax" for p in _C.paths())


def _layout(shape, dim):
    shape = tuple(shape) or (1,)
    d = dim % len(shape)
    inner = int(np.prod(shape[d + 1:], dtype=np.int64)) if d + 1 < len(shape) else 1
    return "last-dim" if inner == 1 else "spatial"


def _torch_tensor(values, dtype, device, transposed=False):
    import torch

    t = torch.tensor(values, dtype=torch.float64).to(getattr(torch, dtype))
    if transposed:  # the same values through a non-contiguous (transposed) view
        t = t.t().contiguous().t()
    return t.to(device)


def _to_numpy(t):
    return t.detach().to("cpu").double().numpy()


def _softmax_run(impl, case, device):
    x = _torch_tensor(case["x"], case["dtype"], device, case["transposed"])
    g = _torch_tensor(case["grad"], case["dtype"], device, case["transposed"])
    y = _torch_tensor(case["output"], case["dtype"], device)
    out = impl.forward(x, case["dim"], case["log"])
    gi = impl.backward(g, y, case["dim"], case["log"])
    return _to_numpy(out).reshape(case["expected_out"].shape), _to_numpy(gi).reshape(case["expected_grad"].shape)


def softmax_tolerance(case):
    """segred check's tolerance for the case's dtype, widened to D * u of the
    accumulation type (float32 for float32/float16/bfloat16, float64 for float64):
    the error bound of a plain sequential sum over the reduced dim, so an
    implementation's summation order is not reported as a defect."""
    shape = case["expected_out"].shape or (1,)
    D = shape[case["dim"] % len(shape)]
    u = 2.0 ** -53 if case["dtype"] == "float64" else 2.0 ** -24
    return max(case["tolerance"], D * u)


def align_softmax(impl, device="cpu", *, beside=None, progress=None):
    """Runs every softmax case through `impl` (TorchSoftmax, SegredSoftmax or any
    object with forward(x, dim, log) and backward(grad, output, dim, log) on torch
    tensors) on `device`; `beside`, when given, runs too and fills the segred column."""
    cases = _C.softmax_cases()
    rows = []
    for k, case in enumerate(cases):
        if progress:
            progress(k + 1, len(cases), case["name"])
        tol = softmax_tolerance(case)
        layout = _layout(case["expected_out"].shape, case["dim"])
        seg = {"fwd": "", "bwd": ""}
        if beside is not None:
            try:
                sy, sg = _softmax_run(beside, case, device)
                seg = {"fwd": "ok" if _close(sy, case["expected_out"], tol) else "WRONG",
                       "bwd": "ok" if _close(sg, case["expected_grad"], tol) else "WRONG"}
            except Exception as e:  # noqa: BLE001 - reported, not hidden
                seg = {"fwd": f"raised {type(e).__name__}", "bwd": f"raised {type(e).__name__}"}
        info = {"op": case["op"], "layout": layout, "input": case["input"], "dtype": case["dtype"]}
        try:
            y, gi = _softmax_run(impl, case, device)
        except Exception as e:  # noqa: BLE001 - a raise is a reportable divergence
            msg = f"raised {type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}"
            for d in ("fwd", "bwd"):
                rows.append(AlignRow(case["name"], d, msg, "a result", "WRONG",
                                     f"{layout} {case['op']}: raises on input '{case['input']}'", seg[d], info))
            continue
        for d, got, want in (("fwd", y, case["expected_out"]), ("bwd", gi, case["expected_grad"])):
            mm = _first_mismatch(got, want, tol)
            if mm is None:
                rows.append(AlignRow(case["name"], d, "matches", "", "ok", "", seg[d], info))
                continue
            defect = (f"{layout} {case['op']} {'forward' if d == 'fwd' else 'backward'}: "
                      f"differs on input '{case['input']}'")
            rows.append(AlignRow(case["name"], d, mm[0], mm[1], "WRONG", defect, seg[d], info))
    return rows


def _free_bytes(device):
    """Free memory of a torch device in bytes, or None when torch cannot say."""
    import os

    import torch

    kind = str(device).split(":")[0]
    if kind == "cpu":
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    mod = getattr(torch, kind, None)
    if mod is not None and hasattr(mod, "mem_get_info"):
        try:
            return int(mod.mem_get_info(torch.device(device))[0])
        except Exception:  # noqa: BLE001 - unknown: try the case
            return None
    return None


def _gib(b):
    return f"{b / 2**30:.1f} GiB"


def large_cases(small=False):
    """The softmax boundary cases (cli/softmax_cases.h) as dicts: shape, dim, op,
    direction, fills and patches, checked elements, exact expected values,
    bytes_needed (inputs + output; segred beside torch needs one more output)."""
    return _C.softmax_large_cases(small)


def _filled(shape, fill, patches, dtype, device):
    import torch

    t = torch.full(tuple(shape), fill, dtype=getattr(torch, dtype), device=device)
    if patches:
        flat = t.view(-1)
        idx = torch.tensor([p[0] for p in patches], dtype=torch.int64, device=device)
        flat[idx] = torch.tensor([p[1] for p in patches], dtype=t.dtype, device=device)
    return t


def _run_large(impl, case, device):
    """The checked elements of `impl`'s result on one boundary case."""
    import torch

    a = _filled(case["shape"], case["a_fill"], case["a_patches"], case["dtype"], device)
    if case["direction"] == "fwd":
        out = impl.forward(a, case["dim"], case["log"])
    else:
        b = _filled(case["shape"], case["b_fill"], case["b_patches"], case["dtype"], device)
        out = impl.backward(a, b, case["dim"], case["log"])
        del b
    del a
    idx = torch.tensor(case["checks"], dtype=torch.int64, device=device)
    got = out.reshape(-1)[idx].to("cpu").double().numpy()
    del out
    return got


def _exact_mismatches(got, case):
    want = np.asarray(case["expected"], dtype=np.float64)
    ok = (got == want) | (np.isnan(got) & np.isnan(want))
    return [(case["checks"][i], float(got[i]), float(want[i])) for i in np.flatnonzero(~ok)]


def _device_usable(device):
    """False when a small op on the device fails (a sticky CUDA error after a fault)."""
    import torch

    try:
        (torch.ones(4, device=device) * 2).sum().item()
        return True
    except Exception:  # noqa: BLE001
        return False


def _release(device):
    """Returns the cached blocks of the tensors just freed (by reference count) to
    the device, so the next case's memory check sees them free."""
    import torch

    if str(device).startswith("cuda"):
        torch.cuda.empty_cache()


def align_large(impl, device="cpu", cases=None, *, beside=None, small_ok=None, progress=None):
    """Runs the softmax boundary cases through `impl` on `device`. `small_ok(layout,
    direction)` says whether the small rows of that layout and direction all matched
    (a wrong boundary row is then classed as a 32-bit offset defect)."""
    import time

    cases = large_cases() if cases is None else cases
    rows = []
    dead = ""  # set when a case left the device unusable (a sticky CUDA error)
    for k, case in enumerate(cases):
        if progress:
            progress(k + 1, len(cases), case["name"])
        layout = "spatial" if case["kernel"].startswith("spatial") else "last-dim"  # spatial, spatial_staged
        d = case["direction"]
        need = case["bytes_needed"] + (case["numel"] * 2 if beside is not None else 0)
        info = {"op": case["op"], "layout": layout, "shape": list(case["shape"]), "dim": case["dim"],
                "bytes_needed": need, "boundary": case["boundary"], "large": True}
        if dead:
            rows.append(AlignRow(case["name"], d, f"skipped: {dead}", "", "skipped", "", "", info))
            continue
        free = _free_bytes(device)
        slack = 0 if str(device).startswith("cpu") else 1 << 30
        if free is not None and need + slack > free:
            why = f"skipped: needs {_gib(need)}, {_gib(free)} free on {device}"
            rows.append(AlignRow(case["name"], d, why, "", "skipped", "", "", info))
            continue
        t0 = time.monotonic()
        seg = ""
        try:
            bad = _exact_mismatches(_run_large(impl, case, device), case)
        except Exception as e:  # noqa: BLE001 - reported
            bad = None
            err = f"raised {type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}"
            if not _device_usable(device):
                dead = f"the device is unusable after {case['name']} raised; run that case alone"
        if not dead:
            _release(device)
        if beside is not None and not dead:
            try:
                seg = "ok" if not _exact_mismatches(_run_large(beside, case, device), case) else "WRONG"
            except Exception as e:  # noqa: BLE001 - reported
                seg = f"raised {type(e).__name__}"
            _release(device)
        info["seconds"] = round(time.monotonic() - t0, 2)
        info["checked"] = len(case["checks"])
        if bad is None:
            rows.append(AlignRow(case["name"], d, err, "a result", "WRONG",
                                 f"{layout} softmax {'forward' if d == 'fwd' else 'backward'}: raises on the "
                                 f"boundary case", seg, info))
            continue
        if not bad:
            rows.append(AlignRow(case["name"], d, f"matches ({len(case['checks'])} elements exact)", "", "ok",
                                 "", seg, info))
            continue
        i, got, want = bad[0]
        info["wrong_elements"] = [list(b) for b in bad[:8]]
        if small_ok is None or small_ok(layout, d):
            defect = wrap_defect(layout, d, case["boundary"])
        else:
            defect = f"{layout} softmax {'forward' if d == 'fwd' else 'backward'}: wrong on small inputs too"
        rows.append(AlignRow(case["name"], d, f"[{i}] = {got:.6g} ({len(bad)}/{len(case['checks'])} wrong)",
                             f"[{i}] = {want:.6g}", "WRONG", defect, seg, info))
    return rows


def small_ok_from(rows):
    """small_ok for align_large from the softmax rows: (layout, direction) -> all matched."""
    bad = {(r.detail.get("layout"), r.direction) for r in rows if r.verdict == "WRONG" and "layout" in r.detail}
    return lambda layout, d: (layout, d) not in bad


def summarize(rows):
    wrong = [r for r in rows if r.verdict == "WRONG"]
    classes = {}
    for r in wrong:
        classes.setdefault(r.defect, []).append(r)
    return wrong, classes


def _markdown(rows, device, classes, show_segred):
    out = [f"# segred align: torch on {device}", ""]
    out.append(f"{len(rows)} rows, {sum(r.verdict == 'WRONG' for r in rows)} wrong, "
               f"{len(classes)} defect classes")
    out.append("")
    for cls, rs in sorted(classes.items(), key=lambda kv: -len(kv[1])):
        out.append(f"- **{cls}**: {len(rs)} rows, e.g. `{rs[0].case}` ({rs[0].direction})")
    out += ["", "| case | dir | observed | expected | verdict |" + (" segred |" if show_segred else ""),
            "|---|---|---|---|---|" + ("---|" if show_segred else "")]
    for r in rows:
        out.append(f"| {r.case} | {r.direction} | {r.observed} | {r.expected} | {r.verdict}"
                   f"{': ' + r.defect if r.defect else ''} |" + (f" {r.segred} |" if show_segred else ""))
    large = [r for r in rows if r.detail.get("large")]
    if large:
        out += ["", "## Boundary cases (--large)", "",
                "Arrays built on the device from a fill value and patched elements; the checked elements "
                "(both ends, both sides of 2^31 and 2^32, the patched ones) compared exactly with closed-form "
                "float64 expectations.", "",
                "| case | dir | shape, dim | memory | time | verdict |" + (" segred |" if show_segred else ""),
                "|---|---|---|---|---|---|" + ("---|" if show_segred else "")]
        for r in large:
            t = f"{r.detail['seconds']} s" if "seconds" in r.detail else ""
            out.append(f"| {r.case} | {r.direction} | {r.detail['shape']}, {r.detail['dim']} | "
                       f"{_gib(r.detail['bytes_needed'])} | {t} | {r.verdict}"
                       f"{': ' + r.defect if r.defect else ''}{' (' + r.observed + ')' if r.verdict != 'ok' else ''} |"
                       + (f" {r.segred} |" if show_segred else ""))
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="segred align", description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", required=True, help="a torch device string: cpu, cuda, cuda:1, xpu, mps, ...")
    ap.add_argument("--large", action="store_true", help="add the boundary cases past 2^31/2^32 elements")
    ap.add_argument("--report", help="write the full report (Markdown, or JSON for *.json)")
    ap.add_argument("--impl", choices=["torch", "segred"], default="torch",
                    help="implementation under test (segred: self-check of the aligner)")
    ap.add_argument("-q", "--quiet", action="store_true", help="print only wrong rows")
    args = ap.parse_args(argv)

    if args.impl == "torch":
        try:
            import torch  # noqa: F401
        except ImportError:
            print("segred align: needs torch (pip install torch)", file=sys.stderr)
            return 2
        impl, softmax_impl = torch_impl(args.device), TorchSoftmax()
    else:
        impl, softmax_impl = segred_impl, SegredSoftmax()
    # segred's answer beside torch's where segred runs on the device (segment_reduce
    # rows: on the CPU; softmax rows: on the CPU and on CUDA).
    show_segred = args.impl == "torch" and segred_supports(args.device)
    beside = SegredSoftmax() if show_segred else None
    tty = sys.stderr.isatty()

    def progress(k, n, name):
        if tty:
            fill = int(30 * k / n)
            print(f"\r[{'#' * fill}{' ' * (30 - fill)}] {k}/{n} {name[:50]:<50}", end="", file=sys.stderr)

    def clear():
        if tty:
            print("\r" + " " * 100 + "\r", end="", file=sys.stderr)

    rows = align_cases(impl, with_segred=show_segred and args.device.split(":")[0] == "cpu", progress=progress)
    clear()
    softmax_rows = align_softmax(softmax_impl, args.device, beside=beside, progress=progress)
    clear()
    rows += softmax_rows
    if args.large:
        print("note: segment_reduce's boundary cases run in `segred check --large` only; --large adds the "
              "softmax boundary cases here")
        cases = large_cases()
        print(f"softmax boundary cases: {len(cases)}, each needs up to "
              f"{_gib(max(c['bytes_needed'] + (c['numel'] * 2 if beside else 0) for c in cases))} on "
              f"{args.device} (inputs + output{' + segred output' if beside else ''}); "
              "skipped, and said so, without it", flush=True)
        rows += align_large(softmax_impl, args.device, cases, beside=beside, small_ok=small_ok_from(softmax_rows),
                            progress=progress)
        clear()
    wrong, classes = summarize(rows)
    hdr = f"{'case':<60} {'dir':<4} {'observed':<22} {'expected':<22} verdict" + ("  segred" if show_segred else "")
    print(hdr)
    for r in rows:
        if args.quiet and r.verdict == "ok":
            continue
        print(f"{r.case:<60} {r.direction:<4} {r.observed:<22} {r.expected:<22} {r.verdict}"
              + (f"  {r.segred}" if show_segred else ""))
    print()
    print(f"torch on {args.device}: {len(rows)} rows, {len(wrong)} wrong")
    for cls, rs in sorted(classes.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(rs):4d} x {cls}   e.g. {rs[0].case} ({rs[0].direction})")
    def fam(rs):
        return f"{len(rs)} rows, {sum(r.verdict == 'WRONG' for r in rs)} wrong"

    sm = [r for r in rows if "op" in r.detail and not r.detail.get("large")]
    big = [r for r in rows if r.detail.get("large")]
    print(f"  segment_reduce: {fam([r for r in rows if 'op' not in r.detail])}; softmax family: {fam(sm)}"
          + (f"; boundary cases: {fam(big)}, {sum(r.verdict == 'skipped' for r in big)} skipped" if big else ""))
    skipped = [r for r in rows if r.verdict == "skipped"]
    for r in skipped:
        print(f"  skipped: {r.case} ({r.direction}): {r.observed[len('skipped: '):]}")
    if show_segred:
        ran = [r for r in rows if r.segred]
        seg_bad = sum(1 for r in ran if r.segred != "ok")
        print(f"segred on {args.device}: {len(ran) - seg_bad}/{len(ran)} rows right")
    if args.report:
        with open(args.report, "w") as f:
            if args.report.endswith(".json"):
                json.dump({"device": args.device, "rows": [asdict(r) for r in rows],
                           "classes": {k: len(v) for k, v in classes.items()}}, f, indent=1)
            else:
                f.write(_markdown(rows, args.device, classes, show_segred))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
