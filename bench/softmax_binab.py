#!/usr/bin/env python3
"""Alternated A/B of cuda_softmax_bench binaries (bench/cuda_softmax_bench.cu) built
against different library versions (session 41): per round, each binary in turn over
the same cases (SEGRED_SOFTMAX_BENCH_ONLY / _DTYPES, no cuDNN); optionally Nsight
Compute's kernel durations of the segred kernels per binary; then the table of
bench/softmax_ab_table.py. Used by tools/gpu-ab (AB_BENCH=softmax) and
tools/gpu-session hostab (AB_SM_OLD).

Usage: softmax_binab.py --bin LABEL=PATH [--bin LABEL=PATH ...] --cases 'A;B' [--dtypes
float16,bfloat16] [--rounds 3] [--reps 25] [--ncu 'A'] [--pin 'taskset -c 8-15']
--logdir DIR --out TABLE.md"""
import argparse
import os
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import softmax_ab_table  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", action="append", required=True, help="LABEL=PATH, the first is the baseline")
    ap.add_argument("--cases", required=True)
    ap.add_argument("--dtypes", default="")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=25)
    ap.add_argument("--ncu", default="")
    ap.add_argument("--pin", default="")
    ap.add_argument("--logdir", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    bins = [b.split("=", 1) for b in a.bin]
    os.makedirs(a.logdir, exist_ok=True)
    times = open(os.path.join(a.logdir, "sm-times.txt"), "w")
    pin = shlex.split(a.pin)

    def env(cases):
        e = dict(os.environ)
        e.update(SEGRED_SOFTMAX_BENCH_ONLY=cases, SEGRED_SOFTMAX_BENCH_DTYPES=a.dtypes, SEGRED_SOFTMAX_BENCH_NO_CUDNN="1")
        return e

    for r in range(1, a.rounds + 1):
        for label, path in bins:
            p = subprocess.run(pin + [path, str(a.reps)], env=env(a.cases), capture_output=True, text=True)
            if p.returncode != 0:
                sys.stderr.write(f"{label} round {r}: rc {p.returncode}\n{p.stderr[-2000:]}\n")
            for line in p.stdout.splitlines():
                if line.startswith(("case|", "floor|", "copy|")):
                    times.write(f"{label}|{r}|{line}\n")
            times.flush()
        print(f"round {r} done", flush=True)
    times.close()
    if a.ncu:
        for label, path in bins:
            with open(os.path.join(a.logdir, f"ncu-{label}.csv"), "w") as out:
                subprocess.run(pin + ["ncu", "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "--csv",
                                      "--kernel-name-base", "demangled", "-k", "regex:segred::cuda::sm::", path, "3"],
                               env=env(a.ncu), stdout=out, stderr=subprocess.DEVNULL, timeout=300)
            print(f"ncu {label} done", flush=True)
    text = softmax_ab_table.table(a.logdir, [label for label, _ in bins])
    with open(a.out, "w") as fh:
        fh.write(text)
    print(text)


if __name__ == "__main__":
    main()
