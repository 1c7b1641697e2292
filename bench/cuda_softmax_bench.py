"""CUDA softmax benchmark, torch side, and the joined result table.

Usage: python3 bench/cuda_softmax_bench.py SEGRED_CSV GTEST_LOG OUT_MD

Runs in the same GPU session as bench/cuda_softmax_bench.cu (whose output is
SEGRED_CSV, with cuDNN's times when it loaded libcudnn.so.9): torch.softmax / torch._softmax_backward_data on the same shapes and
dtypes (CUDA events, warm-up, median), a device-to-device copy measured here too,
then torch's answer on the boundary shape [1, 2, 2^31 + 1] float16 over dim 1
(forward and backward, softmax and log_softmax) with exact expected values at both
ends, the same values segred's CudaSoftmaxHuge tests use. Writes a markdown table.
"""
import math
import re
import struct
import sys

import torch
from run_commit import run_commit  # noqa: E402  (bench/ is the script's directory)

REPS = 25


def median_ms(fn, reps=REPS):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


CASES = {
    "[16384, 4096] dim -1": ((16384, 4096), -1),
    "[262144, 128] dim -1": ((262144, 128), -1),
    "[2048, 65536] dim -1": ((2048, 65536), -1),
    "[64, 262144] dim -1": ((64, 262144), -1),
    "[64, 256, 56, 56] dim 1": ((64, 256, 56, 56), 1),
    "[32, 1000, 4096] dim 1": ((32, 1000, 4096), 1),
    "[8, 4, 2^24] dim 1": ((8, 4, 1 << 24), 1),
    "[8192, 8192] dim 0": ((8192, 8192), 0),
    "[64, 128] dim -1 (small)": ((64, 128), -1),
    "[4, 1000] dim -1 (small)": ((4, 1000), -1),
}
DT = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def torch_times():
    n = 1 << 29  # 2 GiB of float32
    a = torch.empty(n, device="cuda", dtype=torch.float32).uniform_()
    b = torch.empty_like(a)
    copy_ms = median_ms(lambda: b.copy_(a))
    copy_gbs = 2 * n * 4 / (copy_ms * 1e-3) / 1e9
    del a, b
    res = {}
    for name, (shape, dim) in CASES.items():
        for dn, dt in DT.items():
            x = (torch.rand(shape, device="cuda", dtype=torch.float32) * 8 - 4).to(dt)
            g = (torch.rand(shape, device="cuda", dtype=torch.float32) * 2 - 1).to(dt)
            y = torch.softmax(x, dim)
            res[(name, dn, "fwd")] = median_ms(lambda: torch.softmax(x, dim))
            res[(name, dn, "bwd")] = median_ms(lambda: torch._softmax_backward_data(g, y, dim, dt))
            del x, g, y
            torch.cuda.empty_cache()
    return copy_gbs, res


def h16(b):
    """float16 value of the 16-bit pattern with both bytes b (cudaMemset fill)."""
    return struct.unpack("<e", bytes([b, b]))[0]


def torch_boundary():
    """[1, 2, 2^31+1] float16 over dim 1, values as in CudaSoftmaxHuge.Spatial_*."""
    rows = []
    L = (1 << 31) + 1
    free = torch.cuda.mem_get_info()[0]
    if free < 3 * 2 * 2 * L + (4 << 30):
        return [("torch boundary", "skipped", f"needs {3 * 4 * L >> 30} GiB, {free >> 30} GiB free")]
    ln2 = math.log(2.0)
    big = h16(0xFB)
    one = h16(0x3C)
    halfp = h16(0x38)

    def f16(v):
        return torch.tensor(v, dtype=torch.float32).to(torch.float16).item()

    def check(name, out, expect):
        bad = []
        for (d, c), want in expect:
            got = out[0, d, c].item()
            if not (got == want or (math.isnan(want) and math.isnan(got))):
                bad.append(f"[0,{d},{c}] got {got} want {want}")
        rows.append((name, "right" if not bad else "WRONG", "; ".join(bad[:4]) or "both ends exact"))

    def full(v):
        return torch.full((1, 2, L), v, dtype=torch.float16, device="cuda")

    try:
        # forward
        x = full(one)
        x[0, 0, 0], x[0, 1, 0], x[0, 0, L - 1], x[0, 1, L - 1] = 0.0, big, big, 2.0
        for log in (False, True):
            y = torch.log_softmax(x, 1) if log else torch.softmax(x, 1)
            mid = f16(-ln2) if log else 0.5
            exp = [((0, 0), 0.0 if log else 1.0), ((1, 0), f16(big) if log else 0.0),
                   ((0, L - 1), f16(big - 2.0) if log else 0.0), ((1, L - 1), 0.0 if log else 1.0),
                   ((0, 1), mid), ((1, 1), mid), ((0, L - 2), mid), ((1, L - 2), mid)]
            check(f"torch.{'log_softmax' if log else 'softmax'} fwd [1, 2, 2^31+1] fp16 dim 1", y, exp)
            del y
        del x
        torch.cuda.empty_cache()
        # softmax backward
        g = full(0.0)
        y = full(halfp)
        g[0, 0, 0], g[0, 1, 0], g[0, 0, L - 1], g[0, 1, L - 1] = 2.0, -3.0, 4.0, -2.0
        y[0, 0, 0], y[0, 1, 0], y[0, 0, L - 1], y[0, 1, L - 1] = 0.5, 0.5, 0.25, 0.75
        gi = torch._softmax_backward_data(g, y, 1, torch.float16)
        check("torch._softmax_backward_data [1, 2, 2^31+1] fp16 dim 1", gi,
              [((0, 0), 1.25), ((1, 0), -1.25), ((0, L - 1), 1.125), ((1, L - 1), -1.125),
               ((0, 1), 0.0), ((1, 1), 0.0), ((0, L - 2), 0.0), ((1, L - 2), 0.0)])
        del gi
        # log_softmax backward
        g.fill_(0.0)
        y.fill_(halfp)
        g[0, 0, 0], g[0, 1, 0], g[0, 0, L - 1], g[0, 1, L - 1] = 2.0, -3.0, -5.0, 0.5
        y[0, 0, 0], y[0, 1, 0], y[0, 0, L - 1], y[0, 1, L - 1] = 0.0, big, big, 0.0
        gi = torch._log_softmax_backward_data(g, y, 1, torch.float16)
        check("torch._log_softmax_backward_data [1, 2, 2^31+1] fp16 dim 1", gi,
              [((0, 0), 3.0), ((1, 0), -3.0), ((0, L - 1), -5.0), ((1, L - 1), 5.0),
               ((0, 1), 0.0), ((1, 1), 0.0), ((0, L - 2), 0.0), ((1, L - 2), 0.0)])
        del gi, g, y
    except Exception as e:  # noqa: BLE001 - report, do not abort the table
        rows.append(("torch boundary", "error", f"{type(e).__name__}: {e}"[:300]))
    torch.cuda.empty_cache()
    return rows


def torch_from_table(path):
    """torch's times, copy bandwidth and boundary verdicts from an earlier table of this script
    (--torch-from: torch 2.11 does not change between runs; a run short of device time skips it)."""
    tt, copy, bnd = {}, float("nan"), []
    first = True  # torch's times come from the main table only: the later sections' rows
    for ln in open(path):  # (alone / back to back / copy) have other columns (session 21)
        if ln.startswith("## "):
            first = False
        m = re.search(r"torch process (\d+) GB/s", ln)
        if m:
            copy = float(m.group(1))
        f = [c.strip() for c in ln.split("|")[1:-1]]
        if first and len(f) >= 6 and f[0] not in ("case", "---", "who"):
            try:
                tt[(f[0], f[1], f[2])] = float(f[5])
            except ValueError:
                pass
        elif len(f) == 4 and f[0].startswith("torch"):
            detail = re.sub(r"( \(from [^)]*\))+$", "", f[3])  # one "(from ...)", not one per re-read
            bnd.append((f[1], f[2], detail + " (from " + path + ")"))
    return copy, tt, bnd


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--torch-from=")]
    prev = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--torch-from=")]
    seg_csv, gtest_log, out_md = args[0], args[1], args[2]
    seg = {}
    dnn = {}  # (case, dtype, dir) -> (ms or None, error text, max |cuDNN - segred|)
    dnn_status = "not run"
    seg_copy = None
    floor = {}  # (case, dtype, dir) -> (ms per call 20 back to back, ms of a same-size copy alone)
    for line in open(seg_csv):
        p = line.rstrip("\n").split("|")
        if p[0] == "copy":
            seg_copy = float(p[1])
        elif p[0] == "case" and len(p) == 8:
            seg[(p[1], p[2], p[3])] = (p[4], float(p[5]), float(p[6]), float(p[7]))
        elif p[0] == "floor" and len(p) == 6:
            floor[(p[1], p[2], p[3])] = (float(p[4]), float(p[5]))
        elif p[0] == "cudnn_status":
            dnn_status = p[1]
        elif p[0] == "cudnn" and len(p) == 7:
            ok = p[4] != "-"
            dnn[(p[1], p[2], p[3])] = (float(p[4]) if ok else None, "" if ok else p[5], p[6])
    if prev:
        torch_copy, tt, bnd = torch_from_table(prev[0])
    else:
        torch_copy, tt = torch_times()
        bnd = torch_boundary()
    commit = run_commit()
    # The device segred ran on (session 41: a run on an H100 with torch's times taken from the
    # H200 table was titled H200); torch's device is that of the table its times came from.
    dev = torch.cuda.get_device_name(0)
    torch_dev = dev
    if prev:
        first = open(prev[0]).readline()
        torch_dev = first[len("# CUDA softmax on "):].split(",")[0].strip() if first.startswith("# CUDA softmax on ") else "?"
    L = []
    L.append(f"# CUDA softmax on {dev}, commit {commit}")
    L.append("")
    L.append(f"torch {torch.__version__}. Copy bandwidth (device-to-device, read + write): segred process "
             f"{seg_copy:.0f} GB/s, torch process {torch_copy:.0f} GB/s; % of copy bandwidth below uses "
             f"{seg_copy:.0f} GB/s for both. Bytes: fwd 2 x tensor, bwd 3 x tensor. Median of {REPS}."
             + (f" torch's times and boundary verdicts taken from {prev[0]} (not re-run; measured on {torch_dev})."
                if prev else ""))
    if torch_dev != dev:
        L.append("")
        L.append(f"**torch's columns were measured on {torch_dev}, segred's and cuDNN's on {dev}: the torch "
                 "ratios of this table compare two devices and are not a result.**")
    L.append("")
    L.append(f"cuDNN: {dnn_status}; timed in the segred process on the same buffers: cudnnSoftmaxForward/"
             "Backward, CUDNN_SOFTMAX_ACCURATE, MODE_CHANNEL over NCHW [outer, D, inner, 1]; "
             "'cuDNN diff' = max |cuDNN - segred| over the tensor (a check that both compute the same function).")
    L.append("")
    L.append("| case | dtype | dir | segred ms | segred % copy | torch ms | torch % copy | torch/segred | "
             "cuDNN ms | cuDNN % copy | cuDNN/segred | cuDNN diff | segred path |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in CASES:
        for dn in DT:
            for d in ("fwd", "bwd"):
                s = seg.get((name, dn, d))
                t = tt.get((name, dn, d))
                if not s:
                    L.append(f"| {name} | {dn} | {d} | - | - | {t:.4f} | - | - | - | - | - | - | missing |")
                    continue
                path, ms, by, pct = s
                tpct = 100.0 * (by / (seg_copy * 1e9)) / (t * 1e-3)
                c = dnn.get((name, dn, d))
                if c is None:
                    dcols = "- | - | - | -"
                elif c[0] is None:
                    dcols = f"{c[1]} | - | - | -"
                else:
                    cpct = 100.0 * (by / (seg_copy * 1e9)) / (c[0] * 1e-3)
                    dcols = f"{c[0]:.4f} | {cpct:.1f}% | {c[0] / ms:.2f} | {c[2]}"
                L.append(f"| {name} | {dn} | {d} | {ms:.4f} | {pct:.1f}% | {t:.4f} | {tpct:.1f}% | "
                         f"{t / ms:.2f} | {dcols} | {path} |")
    if floor:
        L.append("")
        L.append("## Where the time goes: the call alone, back to back, and a copy of the same bytes")
        L.append("")
        L.append("Same process. 'alone' = the table above (events around one call on an idle GPU: the host's "
                 "submission and the launch latency are in it); 'back to back' = 20 calls between two events, "
                 "per call (the kernel's steady-state rate; launches overlap the previous kernel); 'copy alone' "
                 "= cudaMemcpyAsync device-to-device of the same bytes (half read, half written) timed like "
                 "'alone': the floor of the table's method at this size. % = of the copy bandwidth above.")
        L.append("")
        L.append("| case | dtype | dir | alone ms | alone % | back to back ms | back to back % | copy alone ms | "
                 "copy alone % | alone / copy alone |")
        L.append("|---|---|---|---|---|---|---|---|---|---|")
        for name in CASES:
            for dn in DT:
                for d in ("fwd", "bwd"):
                    s, fl = seg.get((name, dn, d)), floor.get((name, dn, d))
                    if not s or not fl:
                        continue
                    _, ms, by, pct = s
                    b2b, cp = fl
                    pc = lambda t: 100.0 * (by / (seg_copy * 1e9)) / (t * 1e-3)
                    L.append(f"| {name} | {dn} | {d} | {ms:.4f} | {pct:.1f}% | {b2b:.4f} | {pc(b2b):.1f}% | "
                             f"{cp:.4f} | {pc(cp):.1f}% | {ms / cp:.2f} |")
    L.append("")
    L.append("## Boundary: [1, 2, 2^31+1] float16 over dim 1 (and segred's other boundary shapes)")
    L.append("")
    L.append("| who | case | answer | detail |")
    L.append("|---|---|---|---|")
    for name, verdict, detail in bnd:
        L.append(f"| torch 2.11 | {name} | {verdict} | {detail} |")
    try:
        log = open(gtest_log, errors="replace").read()
    except OSError:
        log = ""
    seen = set()
    for m in re.finditer(r"\[\s+(OK|FAILED|SKIPPED)\s+\] (CudaSoftmaxHuge\.\S+)", log):
        if m.group(2) in seen:
            continue
        seen.add(m.group(2))
        L.append(f"| segred | {m.group(2)} | {'right' if m.group(1) == 'OK' else m.group(1)} | "
                 f"fwd+bwd softmax and log_softmax, exact values at both ends |")
    open(out_md, "w").write("\n".join(L) + "\n")
    print("\n".join(L))


if __name__ == "__main__":
    main()
