#!/usr/bin/env python3
"""Table of tools/gpu-ab's softmax mode (AB_BENCH=softmax): per case, dtype and
direction, the median over the alternated rounds of each version's plain time
(events around one call, the benchmark table's method) and back-to-back time (20
calls between two events, per call), and each later version's ratio to the first.
Then Nsight Compute's kernel durations per version when logs/ncu-<label>.csv exist.

Usage: softmax_ab_table.py LOGDIR LABEL...   (LOGDIR/sm-times.txt as gpu-ab writes it:
label|round|case|... and label|round|floor|... lines of bench/cuda_softmax_bench.cu)."""
import collections
import csv
import os
import re
import statistics
import sys


def table(logs, labels):
    """The markdown of LOGDIR's A/B (sm-times.txt, ncu-<label>.csv) for these labels, baseline first."""
    out = []
    emit = out.append
    plain = collections.defaultdict(list)  # (case, dtype, dir, label) -> [ms]
    b2b = collections.defaultdict(list)
    path = {}
    copy = collections.defaultdict(list)
    order = []
    for line in open(os.path.join(logs, "sm-times.txt")):
        f = line.rstrip("\n").split("|")
        label, kind = f[0], f[2]
        if kind == "copy":
            copy[label].append(float(f[3]))
        elif kind == "case":
            key = (f[3], f[4], f[5])
            if key not in order:
                order.append(key)
            path[key] = f[6]
            plain[key + (label,)].append(float(f[7]))
        elif kind == "floor":
            b2b[(f[3], f[4], f[5], label)].append(float(f[6]))
    med = lambda v: statistics.median(v) if v else float("nan")
    emit("# Softmax A/B of library versions: " + ", ".join(labels) + "\n")
    emit("Copy bandwidth per version (median of rounds, GB/s): " +
          ", ".join(f"{l} {med(copy[l]):.0f}" for l in labels) + ".")
    emit("us per call: median over the alternated rounds of each round's median of the calls. plain = events")
    emit("around one call (the benchmark table's method); b2b = 20 calls back to back, per call.")
    emit(f"Ratios: each version against {labels[0]} (< 1: faster).\n")
    head = ["case", "dtype", "dir"]
    for l in labels:
        head += [f"{l} plain", f"{l} b2b"]
    for l in labels[1:]:
        head += [f"{l}/{labels[0]} plain", f"{l}/{labels[0]} b2b"]
    head += ["path"]
    emit("| " + " | ".join(head) + " |")
    emit("|" + "---|" * len(head))
    for key in order:
        cells = list(key)
        for l in labels:
            cells += [f"{med(plain[key + (l,)]) * 1e3:.1f}", f"{med(b2b[key + (l,)]) * 1e3:.1f}"]
        p0, b0 = med(plain[key + (labels[0],)]), med(b2b[key + (labels[0],)])
        for l in labels[1:]:
            cells += [f"{med(plain[key + (l,)]) / p0:.3f}", f"{med(b2b[key + (l,)]) / b0:.3f}"]
        cells.append(path[key])
        emit("| " + " | ".join(cells) + " |")
    for l in labels:
        fn = os.path.join(logs, f"ncu-{l}.csv")
        if not os.path.exists(fn):
            continue
        k = collections.defaultdict(list)
        with open(fn) as fh:
            lines = [x for x in fh if x.startswith('"')]
        for row in csv.DictReader(lines):
            if row.get("Metric Name") != "gpu__time_duration.sum":
                continue
            kn = row["Kernel Name"].replace("void ", "")
            kn = re.sub(r"\(segred::cuda::sm::Args\)", "", kn).replace("segred::cuda::sm::", "")
            v = float(row["Metric Value"].replace(",", ""))
            unit = row.get("Metric Unit", "nsecond")
            k[kn].append(v / 1e3 if unit.startswith("n") else v if unit.startswith("u") else v * 1e3)
        emit(f"\n### Nsight Compute durations, {l}\n\n| kernel | launches | median us |\n|---|---|---|")
        for kn, v in sorted(k.items()):
            emit(f"| {kn} | {len(v)} | {statistics.median(v):.2f} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(table(sys.argv[1], sys.argv[2:]))
