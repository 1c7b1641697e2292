"""One table from several runs of the same segred_bench (its JSON outputs), for a call whose
alternated A/B (bench/cpu_ab.py) ran out of time or compared a binary with itself: per row the
median time over the runs and the percentage (pct_memcpy for segment_reduce, pct_copy for
softmax: the issues' figures) of the run whose time is the median (lower median).

    python3 bench/cpu_runs_table.py RUN.json... [--title TEXT] > table.md
"""
import argparse
import statistics

from cpu_ab import read_rows

ap = argparse.ArgumentParser()
ap.add_argument("runs", nargs="+")
ap.add_argument("--title", default="CPU benchmark")
a = ap.parse_args()
runs = [read_rows(path) for path in a.runs]
print(f"# {a.title}\n\n- runs: {', '.join(a.runs)}\n")
print("| case | ms (median) | ms (runs) | % of memcpy / copy | >= 60% |")
print("|---|---|---|---|---|")
met = total = 0
for n in runs[0]:
    s = sorted((r[n] for r in runs if n in r), key=lambda x: x[0])
    p = s[(len(s) - 1) // 2][1]
    ok = "" if p is None else ("yes" if p >= 60 else "no")
    if p is not None:
        total += 1
        met += p >= 60
    print(f"| {n} | {statistics.median(t for t, _ in s):.3f} | {' / '.join(f'{t:.3f}' for t, _ in s)} | "
          f"{'-' if p is None else f'{p:.0f}%'} | {ok} |")
print(f"\nRows at >= 60%: {met} of {total}.")
