#!/usr/bin/env python3
"""A/B of two prebuilt segment_reduce benchmark binaries in one device call (session 23).

Runs `cuda_bench` of version A and of version B alternately, ROUNDS times each (A B A B ...),
and prints per (case, dtype, reduce, direction) the minimum over the rounds of each version's
'alone' ms (the table's method; noise only adds time) and B / A. Both binaries must be built
from the same bench/cuda_bench.cu (tools/gpu-prebuild; the old one carried beside the new).

Usage: segment_binab.py A_BIN B_BIN [--rounds N] [--args "--only 1d_2Mx32"] [--args-b "--feat-items 136"]
                        [--out FILE.md]
--args goes to both binaries, --args-b to B only (after --args): A and B may then be the same binary,
e.g. the plan's feature items against forced ones (session 24).
"""
import argparse
import collections
import shlex
import subprocess


def run(binary, args):
    out = subprocess.run([binary] + shlex.split(args), capture_output=True, text=True, check=True).stdout
    res = {}
    for line in out.splitlines():
        f = line.split("\t")
        if f[0] == "RESULT":  # RESULT case dtype reduce dir ms bytes ...
            res[(f[1], f[2], f[3], f[4])] = float(f[5])
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--args", default="")
    ap.add_argument("--args-b", default="")
    ap.add_argument("--out")
    o = ap.parse_args()
    t = {"A": collections.defaultdict(list), "B": collections.defaultdict(list)}
    for _ in range(o.rounds):
        for v, binary, args in (("A", o.a, o.args), ("B", o.b, (o.args + " " + o.args_b).strip())):
            for k, ms in run(binary, args).items():
                t[v][k].append(ms)
    b_args = f" {o.args_b}" if o.args_b else ""
    lines = [f"A = {o.a}, B = {o.b}{b_args}; {o.rounds} alternated rounds; min ms over rounds (all rounds in brackets)", "",
             "| case | dtype | reduce | dir | A ms | B ms | B / A | A rounds | B rounds |", "|---|---|---|---|---|---|---|---|---|"]
    for k in t["A"]:
        a, b = t["A"][k], t["B"].get(k, [])
        if not b:
            continue
        r = min(b) / min(a)
        lines.append(f"| {' | '.join(k)} | {min(a):.4f} | {min(b):.4f} | {r:.3f} | "
                     f"{' '.join(f'{x:.4f}' for x in a)} | {' '.join(f'{x:.4f}' for x in b)} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if o.out:
        open(o.out, "w").write(text)


if __name__ == "__main__":
    main()
