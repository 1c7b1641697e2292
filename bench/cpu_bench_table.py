"""Turns segred_bench's Google Benchmark JSON into the Markdown table of
bench/results/cpu-*.md: case | ms | GB/s | memcpy GB/s | % of memcpy, with the
machine and the run on top.

    python3 bench/cpu_bench_table.py RUN.json TITLE [NOTE] > table.md

Repetitions (--benchmark_repetitions) are reduced to their median; the counters
are the ones bench/cpu_bench.cpp and bench/cpu_bench_softmax.cpp set.
"""
import json
import re
import statistics
import sys
from run_commit import run_commit  # noqa: E402  (bench/ is the script's directory)


def load(path):
    """The run's JSON; a run cut off by a time limit leaves it unterminated: then
    the context and every complete benchmark entry are recovered."""
    text = open(path).read()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        ctx_end = text.find('"benchmarks"')
        ctx = re.search(r'"context":\s*(\{.*?\n  \})', text[:ctx_end], re.S)
        benches = []
        for m in re.finditer(r"\{[^{}]*\}", text[ctx_end:]):
            try:
                benches.append(json.loads(m.group(0)))
            except json.JSONDecodeError:
                pass
        context = {}
        if ctx:
            try:
                context = json.loads(ctx.group(1))
            except json.JSONDecodeError:
                pass
        context["partial"] = True
        return {"context": context, "benchmarks": [b for b in benches if "name" in b]}


def main():
    path, title = sys.argv[1], sys.argv[2]
    note = sys.argv[3] if len(sys.argv) > 3 else ""
    run = load(path)
    ctx = run.get("context", {})
    rows = {}
    for b in run["benchmarks"]:
        if b.get("run_type") == "aggregate" or "_mean" in b["name"] or "_median" in b["name"] \
                or "_stddev" in b["name"] or "_cv" in b["name"]:
            continue
        name = b.get("run_name", b["name"]).split("/min_time")[0].split("/real_time")[0]
        rows.setdefault(name, []).append(b)
    print(f"# {title}\n\ncommit {run_commit()}\n")
    print(f"- host: {ctx.get('host_name', '?')}, {ctx.get('num_cpus', '?')} CPUs at "
          f"{ctx.get('mhz_per_cpu', '?')} MHz; caches: "
          + ", ".join(f"L{c['level']} {c['size'] // 1024} KiB x{c.get('num_sharing', 1)}"
                      for c in ctx.get("caches", [])))
    print(f"- date: {ctx.get('date', '?')}")
    if note:
        print(f"- {note}")
    if ctx.get("partial"):
        print("- the run was cut off by its time limit: the rows below are the cases that finished")
    print("- % of memcpy = time of a memcpy moving the same bytes (half read, half written) on the same")
    print("  threads, measured in the same process / time of the call; median of the repetitions\n")
    print("| case | ms | GB/s | memcpy GB/s | % of memcpy |")
    print("|---|---|---|---|---|")
    for name, bs in rows.items():
        if "pct_memcpy" not in bs[0]:
            gbps = statistics.median(b.get("bytes_per_second", 0) for b in bs) / 1e9
            print(f"| {name} | {statistics.median(b['real_time'] for b in bs):.3f} | {gbps:.2f} | - | - |")
            continue
        med = lambda k: statistics.median(b[k] for b in bs)  # noqa: E731
        ms = med("median_ms") if "median_ms" in bs[0] else med("real_time")
        print(f"| {name} | {ms:.3f} | {med('GBps'):.2f} | {med('memcpy_GBps'):.2f} | {med('pct_memcpy'):.0f}% |")


if __name__ == "__main__":
    main()
