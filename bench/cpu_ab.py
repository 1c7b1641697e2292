"""A/B of two segred_bench binaries on this machine, in alternated rounds.

    python3 bench/cpu_ab.py OLD_BIN NEW_BIN [--rounds 3] [--filter REGEX] [--out DIR]
                            [--title TEXT] > table.md

Each round runs the whole (filtered) benchmark once per binary, in the order old,
new in odd rounds and new, old in even rounds, so that a drift of the machine
(another process, the clock) falls on both sides. Per row and binary the median
of the rounds' times is kept; the table gives both, the ratio new / old, and each
binary's percentage of memcpy (segment_reduce: pct_memcpy, the issue's figure;
softmax: pct_copy, the better of the same-size memcpy and a 1 GiB copy) from its
median round. The raw JSON of every run goes to --out. Run it on an idle machine
with OMP_NUM_THREADS set (2 for the issue's "2 cores"): a change is read as real
only where its ratio is outside the controls' spread (rows whose code did not
change, and memcpy).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def run(binary, flt, out_json):
    cmd = [binary, f"--benchmark_filter={flt}", "--benchmark_format=json", f"--benchmark_out={out_json}",
           "--benchmark_out_format=json"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return read_rows(out_json)


def read_rows(path):
    """A segred_bench JSON output as {row name: (ms, % of memcpy / copy or None)}."""
    with open(path) as f:
        data = json.load(f)
    rows = {}
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate":
            continue
        name = b.get("run_name", b["name"]).split("/min_time")[0].split("/real_time")[0]
        unit = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b.get("time_unit", "ns")]
        ms = b["median_ms"] if "median_ms" in b else b["real_time"] * unit
        pct = b.get("pct_copy", b.get("pct_memcpy"))
        rows[name] = (ms, pct)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--filter", default=".")
    ap.add_argument("--out", default="/tmp/cpu_ab")
    ap.add_argument("--title", default="CPU A/B")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    res = {"old": [], "new": []}
    for r in range(a.rounds):
        order = ["old", "new"] if r % 2 == 0 else ["new", "old"]
        for side in order:
            binary = a.old if side == "old" else a.new
            res[side].append(run(binary, a.filter, os.path.join(a.out, f"{side}-{r + 1}.json")))
            print(f"round {r + 1} {side} done", file=sys.stderr)
    names = list(res["old"][0].keys())
    print(f"# {a.title}\n")
    print(f"- old: {a.old}\n- new: {a.new}\n- {a.rounds} alternated rounds (old first in odd rounds); "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')} "
          f"OMP_PROC_BIND={os.environ.get('OMP_PROC_BIND', 'unset')}; raw JSON: {a.out}\n")
    print("| case | old ms (rounds) | new ms (rounds) | new / old (medians) | old % | new % |")
    print("|---|---|---|---|---|---|")
    for n in names:
        o = [x[n] for x in res["old"] if n in x]
        w = [x[n] for x in res["new"] if n in x]
        if not o or not w:
            continue
        om, wm = statistics.median(t for t, _ in o), statistics.median(t for t, _ in w)

        def pct(side):  # the percentage of the round whose time is the median (lower median)
            s = sorted(side, key=lambda x: x[0])
            p = s[(len(s) - 1) // 2][1]
            return "-" if p is None else f"{p:.0f}%"

        print(f"| {n} | {' / '.join(f'{t:.3f}' for t, _ in o)} | {' / '.join(f'{t:.3f}' for t, _ in w)} | "
              f"{wm / om:.2f} | {pct(o)} | {pct(w)} |")


if __name__ == "__main__":
    main()
