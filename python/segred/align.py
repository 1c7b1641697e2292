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
        impl = torch_impl(args.device)
    else:
        impl = segred_impl
    show_segred = args.device.split(":")[0] == "cpu" and args.impl == "torch"
    tty = sys.stderr.isatty()

    def progress(k, n, name):
        if tty:
            fill = int(30 * k / n)
            print(f"\r[{'#' * fill}{' ' * (30 - fill)}] {k}/{n} {name[:50]:<50}", end="", file=sys.stderr)

    rows = align_cases(impl, with_segred=show_segred, progress=progress)
    if tty:
        print("\r" + " " * 100 + "\r", end="", file=sys.stderr)
    if args.large:
        print("note: --large has no torch-comparable segment_reduce case yet (the boundary cases run in "
              "`segred check --large`); no large row ran")
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
    if show_segred:
        seg_bad = sum(1 for r in rows if r.segred not in ("", "ok"))
        print(f"segred on cpu: {len(rows) - seg_bad}/{len(rows)} rows right")
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
