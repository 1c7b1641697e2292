"""CUDA ragged softmax benchmark: segred against the PyG-style composition in torch.

Usage: python3 bench/cuda_segment_softmax_bench.py [OUT_MD] [--quick]

Runs in one process on one GPU (torch + the pip-installed segred module):
  - data: GAT-like attention logits, E = 10M edges sorted by destination node,
    H heads, node in-degrees from a power law (Pareto tail exponent 2.5, i.e.
    P(deg = d) ~ d^-2.5, minimum 1, mean ~10, clipped at 100k, 2% isolated
    nodes); "1 x 2^26 + 1M x 1" (one segment of 2^26 beside 2^20 of one, heads 1);
    "uniform short" (10M edges, every node 10 edges, 8 heads);
  - segred: torch.ops.segred.segment_softmax / segment_softmax_backward (the
    segred.torch custom ops; torch's allocator, current stream), unsafe=True so
    no metadata validation (and no synchronisation) is timed, like the
    composition, which validates nothing;
  - torch composition (torch_geometric.utils.softmax): scatter_reduce amax per
    node, gather (index_select), subtract, exp, index_add_ sum per node, gather,
    divide; backward: torch autograd through that composition (the max detached,
    as PyG does);
  - floor: a device-to-device copy of a tensor of the same bytes as the data,
    measured here: forward moves 2 x data bytes (+ offsets), backward 3 x.
    % of copy bandwidth = floor time / measured time;
  - segred is validated against the composition (forward, and backward on the
    same g and y) before anything is timed.
Times: CUDA events around batches of 5 back-to-back calls (host overhead
overlapped), median of REPS batches, after warm-up. Prints and writes a Markdown
table: case, dtype, direction, segred ms, % of copy bw, torch ms, ratio.
"""
import math
import sys
import time

import numpy as np
import torch

import segred
import segred.torch  # noqa: F401  (registers torch.ops.segred.*)
from run_commit import run_commit  # noqa: E402  (bench/ is the script's directory)

REPS = 15
BATCH = 5
quick = "--quick" in sys.argv
args = [a for a in sys.argv[1:] if not a.startswith("--")]
OUT = args[0] if args else None


def gpu_ms(fn, reps=REPS, batch=BATCH):
    """Median over `reps` of the per-call time of `batch` back-to-back calls."""
    fn(), fn(), fn()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, stop in events:
        start.record()
        for _ in range(batch):
            fn()
        stop.record()
    torch.cuda.synchronize()
    return sorted(s.elapsed_time(e) / batch for s, e in events)[reps // 2]


def power_law_degrees(E, rng, alpha=2.5, mean=10.0, max_deg=100_000, isolated=0.02):
    """Node in-degrees summing to exactly E: Pareto(x_m, alpha - 1) floored, x_m set
    for the mean, clipped; a fraction of nodes with no edge."""
    a = alpha - 1.0
    xm = mean * (a - 1.0) / a
    n = int(E / mean * 1.3) + 1000
    deg = np.floor(xm * (1.0 + rng.pareto(a, size=n))).astype(np.int64)
    deg = np.clip(deg, 1, max_deg)
    deg[rng.random(n) < isolated] = 0
    c = np.cumsum(deg)
    k = int(np.searchsorted(c, E))  # nodes 0..k hold the E edges
    deg = deg[: k + 1].copy()
    deg[k] -= int(c[k] - E)
    rng.shuffle(deg)
    assert deg.sum() == E and (deg >= 0).all()
    return deg


def pyg_softmax(src, index, num_nodes):
    """torch_geometric.utils.softmax(src, index, num_nodes=N) for src [E, H] (or [E])."""
    idx = index.view(-1, *([1] * (src.dim() - 1))).expand_as(src)
    shape = (num_nodes,) + tuple(src.shape[1:])
    src_max = torch.zeros(shape, dtype=src.dtype, device=src.device).scatter_reduce(
        0, idx, src.detach(), reduce="amax", include_self=False)
    out = (src - src_max.index_select(0, index)).exp()
    out_sum = torch.zeros(shape, dtype=src.dtype, device=src.device).index_add_(0, index, out) + 1e-16
    return out / out_sum.index_select(0, index)


def make_case(name, deg, H, dtype, seed):
    rng = torch.Generator(device="cuda").manual_seed(seed)
    E = int(deg.sum())
    shape = (E, H) if H > 1 else (E,)
    x = (torch.randn(shape, device="cuda", generator=rng, dtype=torch.float32) * 2).to(dtype)
    offsets = torch.from_numpy(np.concatenate([[0], np.cumsum(deg)])).to("cuda")
    index = torch.repeat_interleave(torch.arange(len(deg), device="cuda"), torch.from_numpy(deg).to("cuda"))
    return dict(name=name, x=x, offsets=offsets, index=index, N=len(deg), E=E, H=H, dtype=dtype)


def seg_fwd(c):
    return torch.ops.segred.segment_softmax(c["x"], None, c["offsets"], 0, True)


def seg_bwd(c, g, y):
    return torch.ops.segred.segment_softmax_backward(g, y, y, None, c["offsets"], 0, True)


def check(name, got, want, dtype):
    """got (segred, dtype) against want (the composition in float64): the rounding
    of the output type plus float32 accumulation."""
    got, want = got.double(), want.double()
    tol = dict(rtol=1e-4, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-4)
    bad = ~torch.isclose(got, want, **tol)
    ok = not bool(bad.any())
    err = (got - want).abs().max().item()
    msg = f"  validate {name}: {'ok' if ok else 'MISMATCH'} (max abs err {err:.3g}"
    if not ok:
        i = int(bad.flatten().nonzero()[0])
        msg += f"; {int(bad.sum())} elements off, first at {i}: {got.flatten()[i].item()} vs {want.flatten()[i].item()}"
    print(msg + ")", flush=True)
    return ok


def kernel_breakdown(name, fn):
    """CUDA time per kernel of a few calls (torch profiler / CUPTI)."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if t > 0:
            rows.append((t / 3, e.count // 3, e.key))
    rows.sort(reverse=True)
    print(f"  kernels of one {name} call (us, launches, name):", flush=True)
    for t, n, k in rows[:8]:
        print(f"    {t:9.1f}  {n}  {k[:110]}", flush=True)


def run_case(c, rows):
    name, x, dt = c["name"], c["x"], c["dtype"]
    dn = str(dt).replace("torch.", "")
    print(f"{name} {dn}: E={c['E']} nodes={c['N']} heads={c['H']} ({x.numel() * x.element_size() / 1e6:.0f} MB)",
          flush=True)
    # Validation first: segred vs the composition computed in float64 on the same
    # inputs (forward; backward on segred's y and the same g).
    y = seg_fwd(c)
    ok = True
    y_ref = pyg_softmax(x.double(), c["index"], c["N"])  # nodes without edges have no output
    ok &= check(f"{name} {dn} fwd", y, y_ref, dt)
    del y_ref
    g = (torch.randn(x.shape, device="cuda", dtype=torch.float32) * 1.5).to(dt)  # every sign, not 1
    gi = seg_bwd(c, g, y)
    # softmax backward y * (g - sum_segment(g * y)), in float64
    yd, gd = y.double(), g.double()
    sums = torch.zeros((c["N"],) + tuple(x.shape[1:]), dtype=torch.float64, device="cuda").index_add_(
        0, c["index"], gd * yd)
    ok &= check(f"{name} {dn} bwd", gi, yd * (gd - sums.index_select(0, c["index"])), dt)
    del yd, gd, sums, gi
    with segred.trace() as t:
        seg_fwd(c)
        seg_bwd(c, g, y)
    launches = sorted({(r.path, tuple(r.grid), tuple(r.block)) for r in t.records})
    print(f"  launches (path, grid, block): {launches}", flush=True)
    if c.get("profile"):
        kernel_breakdown("forward", lambda: seg_fwd(c))
        kernel_breakdown("backward", lambda: seg_bwd(c, g, y))
    torch.cuda.empty_cache()
    # Floor: a copy of the data's bytes (2 x bytes moved), measured now.
    src = torch.empty_like(x)
    dst = torch.empty_like(x)
    copy_ms = gpu_ms(lambda: dst.copy_(src))
    nbytes = x.numel() * x.element_size()
    meta = c["offsets"].numel() * c["offsets"].element_size()
    copy_bw = 2 * nbytes / (copy_ms * 1e-3)
    del src, dst
    floor_f = (2 * nbytes + meta) / copy_bw * 1e3
    floor_b = (3 * nbytes + meta) / copy_bw * 1e3
    # segred
    sf = gpu_ms(lambda: seg_fwd(c))
    sb = gpu_ms(lambda: seg_bwd(c, g, y))
    # torch composition (forward; backward = autograd of the composition, forward graph built outside the timing)
    tf = gpu_ms(lambda: pyg_softmax(x, c["index"], c["N"]), reps=max(5, REPS // 2), batch=2)
    xa = x.detach().requires_grad_()
    ya = pyg_softmax(xa, c["index"], c["N"])
    tb = gpu_ms(lambda: torch.autograd.grad(ya, xa, g, retain_graph=True), reps=max(5, REPS // 2), batch=2)
    del xa, ya
    torch.cuda.empty_cache()
    for d, s, tt, fl in (("fwd", sf, tf, floor_f), ("bwd", sb, tb, floor_b)):
        rows.append((name, dn, d, s, 100 * fl / s, tt, tt / s, copy_bw / 1e9, ok))
        print(f"  {d}: segred {s:.3f} ms ({100 * fl / s:.1f}% of copy bw, copy {copy_bw / 1e9:.0f} GB/s), "
              f"torch composition {tt:.3f} ms, ratio {tt / s:.1f}x", flush=True)
    return ok


def main():
    assert torch.cuda.is_available(), "needs a GPU"
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, segred {segred.__version__}", flush=True)
    rng = np.random.default_rng(8)
    E = 10_000_000 if not quick else 1_000_000
    t0 = time.time()
    deg_gat = power_law_degrees(E, rng)
    print(f"power-law degrees: {len(deg_gat)} nodes, max {deg_gat.max()}, mean {deg_gat.mean():.2f}, "
          f"edges in nodes of degree > 1000: {deg_gat[deg_gat > 1000].sum() / E:.1%} ({time.time() - t0:.1f} s)",
          flush=True)
    big = 1 << 26 if not quick else 1 << 22
    ones = 1 << 20
    deg_big = np.ones(ones + 1, dtype=np.int64)
    deg_big[ones // 2] = big
    deg_uni = np.full(E // 10, 10, dtype=np.int64)
    cases = []
    for dt in (torch.float32, torch.bfloat16):
        cases.append(("GAT power-law, 8 heads", deg_gat, 8, dt))
    cases.append(("GAT power-law, 1 head", deg_gat, 1, torch.float32))
    if not quick:
        cases.append(("GAT power-law, 64 heads", deg_gat, 64, torch.float32))
    for dt in (torch.float32, torch.bfloat16):
        cases.append(("1 x 2^26 + 1M x 1, 1 head", deg_big, 1, dt))
        cases.append(("uniform 10 per node, 8 heads", deg_uni, 8, dt))
    rows = []
    all_ok = True
    for i, (name, deg, H, dt) in enumerate(cases):
        c = make_case(name, deg, H, dt, seed=i)
        c["profile"] = i in (0, 2, 4)  # GAT 8 heads fp32, 1 head, 1 x 2^26 fp32: where the time goes
        try:
            all_ok &= run_case(c, rows)
        except torch.cuda.OutOfMemoryError as e:  # the composition's temporaries
            print(f"  out of memory: {e}", flush=True)
        del c
        torch.cuda.empty_cache()
    lines = ["| case | dtype | direction | segred ms | % of copy bw | torch composition ms | ratio (torch / segred) |",
             "|---|---|---|---|---|---|---|"]
    for name, dn, d, s, pct, tt, ratio, bw, ok in rows:
        lines.append(f"| {name} | {dn} | {d} | {s:.3f} | {pct:.1f}% | {tt:.3f} | {ratio:.1f}x |"
                     + ("" if ok else " (validation FAILED)"))
    bws = sorted(r[7] for r in rows)
    text = "\n".join(lines) + (f"\n\nCopy bandwidth measured per case: {bws[0]:.0f}-{bws[-1]:.0f} GB/s (read + write). "
                               if bws else "\n") + (
        "Floor: forward 2 x data + offsets, backward 3 x data + offsets. segred with unsafe=True "
        "(no metadata validation), torch composition = torch_geometric.utils.softmax's ops.\n")
    print()
    print(text)
    if OUT:
        with open(OUT, "w") as f:
            f.write(f"# CUDA ragged softmax on {torch.cuda.get_device_name()} (torch {torch.__version__}), commit {run_commit()}\n\n")
            f.write(text)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
