#!/usr/bin/env python3
"""Table of `cuda_bench --items-sweep` (session 26): per feature case, dtype, reduce and
direction, the minimum over rounds of each merge-items value, as ms and as a ratio to the
plan's rule (items 0 in the sweep list, shown with the items the rule chose), the grid of
each value, and the fastest value.

    python3 bench/items_sweep_table.py sweep.txt > items-sweep.md
"""
import sys
from collections import defaultdict


def main():
    rows = defaultdict(list)  # (case, dtype, reduce, dir) -> [(swept, items, grid, min_ms, rounds)]
    copy = None
    order = []
    swept_values = []
    for line in open(sys.argv[1]):
        f = line.rstrip("\n").split("\t")
        if f[0] == "COPY":
            copy = float(f[1])
        if f[0] != "SWEEP":
            continue
        key = tuple(f[1:5])
        if key not in rows:
            order.append(key)
        items, grid = int(f[5]), int(f[6])
        ms = [float(v) for v in f[7:-1]]
        rows[key].append((items, grid, min(ms), ms, float(f[-1])))
    print("Merge items per feature worker, swept (cuda_bench --items-sweep); min ms over rounds;")
    print(f"B/plan = ms / the plan rule's ms (the first entry of each row). Copy {copy} GB/s.\n")
    print("| case | dtype | reduce | dir | plan items (grid, ms, % copy) | items: ms (B/plan, grid) | best |")
    print("|---|---|---|---|---|---|---|")
    for key in order:
        r = rows[key]
        plan = r[0]
        pct = lambda e: 100.0 * e[4] / (e[2] * 1e-3) / 1e9 / copy if copy else 0.0
        cells = []
        for e in r[1:]:
            cells.append(f"{e[0]}: {e[2]:.4f} ({e[2] / plan[2]:.3f}, {e[1]})")
        best = min(r, key=lambda e: e[2])
        print(f"| {' | '.join(key)} | {plan[0]} ({plan[1]}, {plan[2]:.4f}, {pct(plan):.1f}%) | "
              f"{'; '.join(cells)} | {best[0]}: {best[2] / plan[2]:.3f} ({pct(best):.1f}%) |")


if __name__ == "__main__":
    main()
