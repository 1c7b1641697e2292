#!/usr/bin/env python3
"""Alternated A/B of the C++ ragged softmax benchmark (bench/cuda_segment_softmax_bench.cu,
session 42): each variant is a binary with its arguments (an older build, or this build
with another tile geometry: --block, --budget-kib); per round every variant runs in turn
over the same cases; the table gives per case, dtype and direction the median time of
each variant over the rounds, its % of copy bandwidth, and its ratio to the first
variant. A variant whose run fails validation (exit 1, a MISMATCH line) is marked.
Used by tools/gpu-session hostab (RAGGED_AB).

Usage: ragged_binab.py --var 'LABEL=PATH [ARGS...]' [--var ...] [--args 'common args']
       [--rounds 2] [--pin 'taskset -c 8-15'] --log TIMES.txt --out TABLE.md"""
import argparse
import collections
import shlex
import statistics
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--var", action="append", required=True, help="'LABEL=PATH [ARGS]', the first is the baseline")
    ap.add_argument("--args", default="", help="arguments every variant gets (e.g. --only 'GAT')")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--pin", default="")
    ap.add_argument("--log", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    variants = []
    for v in a.var:
        label, cmd = v.split("=", 1)
        variants.append((label, shlex.split(cmd)))
    ms = collections.defaultdict(list)  # (case, dtype, dir, label) -> [ms]
    pct = collections.defaultdict(list)
    path = {}
    order = []
    failed = set()
    with open(a.log, "w") as log:
        for r in range(1, a.rounds + 1):
            for label, cmd in variants:
                p = subprocess.run(shlex.split(a.pin) + cmd + shlex.split(a.args), capture_output=True, text=True)
                if p.returncode != 0:
                    failed.add(label)
                    sys.stderr.write(f"{label} round {r}: rc {p.returncode}\n{p.stderr[-2000:]}\n")
                for line in p.stdout.splitlines():
                    log.write(f"{label}|{r}|{line}\n")
                    f = line.split("|")
                    if f[0] == "case":
                        key = (f[1], f[2], f[3])
                        if key not in order:
                            order.append(key)
                        path[key + (label,)] = f[4]
                        ms[key + (label,)].append(float(f[5]))
                        pct[key + (label,)].append(float(f[6]))
                    elif f[0] == "check" and f[-1] != "ok":
                        failed.add(label)
                log.flush()
            print(f"round {r} done", flush=True)
    labels = [label for label, _ in variants]
    med = lambda v: statistics.median(v) if v else float("nan")
    out = ["| case | dtype | dir | " + " | ".join(f"{l} ms (% of copy)" for l in labels) + " | "
           + " | ".join(f"{l} / {labels[0]}" for l in labels[1:]) + " |",
           "|---|---|---|" + "---|" * (2 * len(labels) - 1)]
    for key in order:
        base = med(ms[key + (labels[0],)])
        cells = [f"{med(ms[key + (l,)]):.4f} ({med(pct[key + (l,)]):.1f}%)" for l in labels]
        ratios = [f"{med(ms[key + (l,)]) / base:.3f}" for l in labels[1:]]
        out.append(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(cells + ratios) + " |")
    out.append("")
    out.append(f"{a.rounds} alternated rounds; variants: "
               + "; ".join(f"{l} = `{' '.join(c)} {a.args}`" for l, c in variants) + ".")
    for key in order[:1]:
        for l in labels:
            out.append(f"- {l}: {path.get(key + (l,), '?')} ({key[0]} {key[1]} {key[2]})")
    if failed:
        out.append(f"VALIDATION FAILED or nonzero exit: {', '.join(sorted(failed))}")
    text = "\n".join(out) + "\n"
    with open(a.out, "w") as fh:
        fh.write(text)
    print(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
