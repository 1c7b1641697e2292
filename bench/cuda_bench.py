#!/usr/bin/env python3
"""segment_reduce on the GPU: segred vs torch.segment_reduce vs CUB, one table.

Runs bench/cuda_bench (segred, CUB DeviceSegmentedReduce, copy bandwidth; see
its header for the method), then times torch.segment_reduce forward and its
backward (aten._segment_reduce_backward) on the same lengths, dtype and shape,
with the same method (events, warm-up, median, inputs rotated to >= 240 MB), in
the same run. Prints and writes (--out) a markdown table:

  case | dtype | reduce | dir | segred ms | % of copy bw | torch ms | torch/segred | CUB ms | CUB %

% of copy bw = (bytes the call must move / copy bandwidth) / measured time, with
the bytes of shared/PERFORMANCE.md and the copy bandwidth measured by
cuda_bench in this run.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np
import torch
from run_commit import run_commit  # noqa: E402  (bench/ is the script's directory)


def median_ms(fn, reps, rot):
    for i in range(3):
        fn(i)
    torch.cuda.synchronize()
    t = []
    for i in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn(i)
        b.record()
        b.synchronize()
        t.append(a.elapsed_time(b))
    return statistics.median(t)


def torch_times(lengths, inner, dtype, reduce, reps):
    dev = "cuda"
    rows = int(lengths.sum())
    shape = (rows,) if inner == 1 else (rows, inner)
    es = torch.tensor([], dtype=dtype).element_size()
    nbuf = int(min(6, max(1, (240 << 20) // max(1, rows * inner * es) + 1)))
    xs = [(torch.rand(shape, device=dev) * 4 - 2).to(dtype) for _ in range(nbuf)]
    L = torch.from_numpy(lengths).to(dev)
    outs = [torch.segment_reduce(x, reduce, lengths=L, axis=0, unsafe=True) for x in xs]
    gs = [(torch.rand(outs[0].shape, device=dev) * 4 - 2).to(dtype) for _ in range(nbuf)]
    tf = median_ms(lambda i: torch.segment_reduce(xs[i % nbuf], reduce, lengths=L, axis=0, unsafe=True), reps, nbuf)

    def bwd(i):
        k = i % nbuf
        torch.ops.aten._segment_reduce_backward(gs[k], outs[k], xs[k], reduce, lengths=L, axis=0)

    # torch's backward can take 100+ ms on long segments: fewer repeats there.
    torch.cuda.synchronize()
    s = torch.cuda.Event(enable_timing=True)
    e = torch.cuda.Event(enable_timing=True)
    s.record()
    bwd(0)
    e.record()
    e.synchronize()
    one = s.elapsed_time(e)
    if one > 300:  # 0.3 s or more per call: one more call is the measurement
        s.record()
        bwd(1)
        e.record()
        e.synchronize()
        tb = s.elapsed_time(e)
    else:
        tb = median_ms(bwd, max(3, min(reps, int(1000 / max(one, 1e-3)))), nbuf)
    del xs, outs, gs
    torch.cuda.empty_cache()
    return tf, tb


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", default=None)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--only", default="")
    ap.add_argument("--torch-from", default="",
                    help="take torch's times from an earlier table of this script (torch does not change between "
                         "runs; its backward on 64 x 1M takes ~0.1 s a call) instead of timing torch again")
    a = ap.parse_args()
    torch_prev = {}
    if a.torch_from:
        seen = False  # the main table only: the later sections' rows share its first four columns
        for ln in open(a.torch_from):
            if not ln.startswith("|"):
                if seen:
                    break
                continue
            seen = True
            f = [c.strip() for c in ln.split("|")[1:-1]]
            if len(f) >= 7 and f[0] not in ("case", "---"):
                try:
                    torch_prev[(f[0], f[1], f[2], f[3])] = float(f[6])
                except ValueError:
                    pass
    tmp = tempfile.mkdtemp(prefix="segred_bench_")
    cmd = [a.bin, "--dir", tmp, "--reps", str(a.reps)] + (["--only", a.only] if a.only else [])
    print("running", " ".join(cmd), flush=True)
    res = subprocess.run(cmd, capture_output=True, text=True)
    sys.stdout.write(res.stdout)
    sys.stderr.write(res.stderr)
    copy_gbs, device, rows, len_rows, fuse_rows, feat_rows, prep_rows, direct_rows = None, "?", [], [], [], [], [], []
    floor_rows = []
    for line in res.stdout.splitlines():
        f = line.split("\t")
        if f[0] == "COPY":
            copy_gbs = float(f[1])
        elif f[0] == "DEVICE":
            device = f[1] + " (" + f[2] + ")"
        elif f[0] == "RESULT":
            rows.append(f[1:])
        elif f[0] == "LENGTHS":
            len_rows.append(f[1:])
        elif f[0] == "FUSE":
            fuse_rows.append(f[1:])
        elif f[0] == "FEAT":
            feat_rows.append(f[1:])
        elif f[0] == "PREP":
            prep_rows.append(f[1:])
        elif f[0] == "DIRECT":
            direct_rows.append(f[1:])
        elif f[0] == "FLOOR":
            floor_rows.append(f[1:])
    if copy_gbs is None:
        print("cuda_bench failed", file=sys.stderr)
        return 1
    # torch's own copy bandwidth, as a cross-check of the floor.
    buf = torch.empty(1 << 28, device="cuda")
    dst = torch.empty_like(buf)
    tcopy = median_ms(lambda i: dst.copy_(buf), 10, 1)
    torch_copy = 2 * buf.numel() * 4 / (tcopy * 1e-3) / 1e9
    del buf, dst
    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16}
    inner_of = {}
    lines = []
    hdr = ("| case | dtype | reduce | dir | segred ms | % of copy bw | torch ms | torch/segred | CUB ms | CUB % of copy bw |\n"
           "|---|---|---|---|---|---|---|---|---|---|")
    cache = {}
    for r in rows:
        name, dt, red, d, ms, nbytes, cub = r[0], r[1], r[2], r[3], float(r[4]), float(r[5]), float(r[6])
        inner = int(name.split("_f")[-1]) if "_f" in name else 1
        lengths = np.fromfile(os.path.join(tmp, name + ".i64"), dtype=np.int64)
        key = (name, dt, red)
        if a.torch_from:
            cache.setdefault(key, (torch_prev.get((name, dt, red, "fwd"), float("nan")),
                                   torch_prev.get((name, dt, red, "bwd"), float("nan"))))
        if key not in cache:
            try:
                cache[key] = torch_times(lengths, inner, dtypes[dt], red, a.reps)
            except Exception as e:  # noqa: BLE001 - report and continue
                print("torch failed on", key, e, file=sys.stderr)
                cache[key] = (float("nan"), float("nan"))
        tt = cache[key][0 if d == "fwd" else 1]
        floor_ms = nbytes / (copy_gbs * 1e9) * 1e3
        pct = 100 * floor_ms / ms
        cub_s = f"{cub:.4f}" if cub > 0 else "-"
        cub_p = f"{100 * floor_ms / cub:.1f}%" if cub > 0 else "-"
        line = (f"| {name} | {dt} | {red} | {d} | {ms:.4f} | {pct:.1f}% | {tt:.4f} | {tt / ms:.1f}x | {cub_s} | {cub_p} |")
        lines.append(line)
        print(line, flush=True)
    table = (f"Commit {run_commit()}. Device: {device}; copy bandwidth {copy_gbs:.0f} GB/s (cudaMemcpy D2D 1 GiB, read+write; "
             f"torch copy_ {torch_copy:.0f} GB/s); torch {torch.__version__}"
             + (f"; torch ms taken from {a.torch_from} (not re-timed)" if a.torch_from else "") + "\n\n" + hdr + "\n" + "\n".join(lines) + "\n")
    if floor_rows:
        # Session 19: each call alone (the table), 20 back to back, and a copy of the
        # same bytes timed alone (bench/cuda_bench.cu, FLOOR).
        table += ("\nWhere the time goes (segred only, same process): 'alone' = the row above (events around one "
                  "call on an idle GPU: host submission and launch latency are in it); 'back to back' = 20 calls "
                  "between two events, per call (the kernels' steady-state rate); 'copy alone' = cudaMemcpyAsync "
                  "device-to-device of the same bytes (half read, half written) timed like 'alone': the floor of "
                  "the table's method at this size. % = of the copy bandwidth above.\n\n"
                  "| case | dtype | reduce | dir | alone ms | alone % | back to back ms | back to back % | "
                  "copy alone ms | copy alone % | alone / copy alone |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
        for r in floor_rows:
            t1, t20, cp, nb = float(r[4]), float(r[5]), float(r[6]), float(r[7])
            pc = lambda t: 100.0 * (nb / (copy_gbs * 1e9)) / (t * 1e-3)
            table += (f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {t1:.4f} | {pc(t1):.1f}% | {t20:.4f} | {pc(t20):.1f}% | "
                      f"{cp:.4f} | {pc(cp):.1f}% | {t1 / cp:.2f} |\n")
    if len_rows:
        # The metadata as device lengths instead of offsets (sum; segred only): the
        # difference is prepare's scan of the lengths (src/cuda/segment_reduce.cu).
        table += ("\nThe same sum calls with device lengths instead of offsets (segred only):\n\n"
                  "| case | dtype | fwd offsets ms | fwd lengths ms | bwd offsets ms | bwd lengths ms |\n"
                  "|---|---|---|---|---|---|\n")
        for r in len_rows:
            table += f"| {r[0]} | {r[1]} | {float(r[3]):.4f} | {float(r[4]):.4f} | {float(r[5]):.4f} | {float(r[6]):.4f} |\n"
    if fuse_rows:
        # Session 12: the inner == 1 forward with its fix-up fused into flat_reduce
        # (the table's rows) against the fixup_tree launch it replaced, same process.
        table += ("\nThe inner == 1 forwards with the fix-up fused into flat_reduce against the fixup_tree launch "
                  "(segred only, same process; 'table ms' is the row above, timed first with the variant the plan "
                  "picks, src/core/segment_geometry.h):\n\n"
                  "| case | dtype | reduce | table ms | plan's variant | fused ms | fixup_tree ms | fused / fixup_tree |\n"
                  "|---|---|---|---|---|---|---|---|\n")
        for r in fuse_rows:
            on, off = float(r[4]), float(r[5])
            var = r[6].split("variant=")[1].rstrip("}") if len(r) > 6 and "variant=" in r[6] else "-"
            table += (f"| {r[0]} | {r[1]} | {r[2]} | {float(r[3]):.4f} | {var} | {on:.4f} | {off:.4f} | "
                      f"{on / off:.2f} |\n")
    if feat_rows:
        # Session 13: the feature paths at the plan's merge items per worker (the table's
        # rows, detail::feat_items_rule) against the 32 items of sessions 1-12, same process.
        table += ("\nThe feature (inner > 1) calls at the plan's merge items per worker against 32 items "
                  "(segred only, same process; 'table ms' is the row above, timed first with the plan's items, "
                  "src/core/segment_geometry.h, feat_items_rule):\n\n"
                  "| case | dtype | reduce | items fwd / bwd | fwd table ms | fwd 32-item ms | fwd plan / 32 | "
                  "bwd table ms | bwd 32-item ms | bwd plan / 32 |\n"
                  "|---|---|---|---|---|---|---|---|---|---|\n")
        for r in feat_rows:
            tf, f32, tb, b32 = float(r[3]), float(r[4]), float(r[5]), float(r[6])
            table += (f"| {r[0]} | {r[1]} | {r[2]} | {r[7]} / {r[8]} | {tf:.4f} | {f32:.4f} | {tf / f32:.2f} | "
                      f"{tb:.4f} | {b32:.4f} | {tb / b32:.2f} |\n")
    if direct_rows:
        # Session 16: how flat_reduce reads a full tile without a segment end
        # (SegmentTestCaps::flat_direct: 1 sessions 1-15, 2 coalesced), each form timed
        # twice, alternated, in one process (bench/cuda_bench.cu).
        table += ("\nThe inner == 1 forwards with flat_reduce's full tiles (no segment end) read in two forms "
                  "(segred only, same process, each twice, alternated; ms): old = sessions 1-15 (4-byte staged "
                  "through shared memory, 16-bit lane l's 32 consecutive positions straight into registers), "
                  "coalesced = 16-byte vectors in rounds of 32 lanes (the plan's form for 16-bit types and for float32 sum/mean with a mean segment length >= 4096: flat_form_rule); 'table ms' is "
                  "the row above (the default):\n\n"
                  "| case | dtype | reduce | table ms | old | old | coalesced | coalesced | coalesced / old |\n"
                  "|---|---|---|---|---|---|---|---|---|\n")
        for r in direct_rows:
            v = [float(x) for x in r[3:8]]
            table += (f"| {r[0]} | {r[1]} | {r[2]} | " + " | ".join(f"{x:.4f}" for x in v)
                      + f" | {(v[3] + v[4]) / (v[1] + v[2]):.2f} |\n")
    if prep_rows:
        # Session 15: a call's fixed cost, six forms timed back to back in one process
        # (SegmentTestCaps {prep_spec, pdl}; bench/cuda_bench.cu).
        table += ("\nA call's fixed cost (segred only, ms, same process, the six forms of each row timed back to "
                  "back): default = prepare's partition of an offsets call by prep_scatter_rule (session 33: "
                  "scattered by the segments, or searched from the raw offsets before its grid.sync) and the "
                  "main kernel as a programmatic dependent launch where pdl_pays says so (the rows above); pdl "
                  "always = the same with the dependent launch on every call; then without the dependent "
                  "launch: the raw offsets searched before the sync (raw before, sessions 15-32's default), "
                  "after it (raw after), q after the sync (old, sessions 5-14), scattered (scatter):\n\n"
                  "| case | dtype | reduce | dir | default | pdl always | raw before | raw after | old | scatter | "
                  "default - old us |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
        for r in prep_rows:
            v = [float(x) for x in r[4:10]]
            table += (f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | " + " | ".join(f"{x:.4f}" for x in v)
                      + f" | {1e3 * (v[0] - v[4]):+.1f} |\n")
    print()
    print(table)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
