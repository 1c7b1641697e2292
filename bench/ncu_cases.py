#!/usr/bin/env python3
"""One call of each benchmark case that misses its target, for Nsight Compute.

Run under ncu (tools/gpu-session ncu does) with a kernel-name filter that matches
segred's kernels only: every case calls segred once, inside an NVTX range named after
the case (the report shows the range with --nvtx), and every input the call needs
(a backward's output included) is made by torch, so each segred kernel a case
launches (prepare, main, fix-up) is profiled once. The report says per kernel: duration, DRAM throughput (% of peak), achieved
occupancy, registers, and the stall reasons, which is what bench/NOTES.md needs to
say where a row's time goes.

Usage: ncu_cases.py [--only REGEX] (cases named as in the benchmark tables).
"""
import argparse
import re

import numpy as np
import torch

import segred.torch  # noqa: F401  (registers torch.ops.segred.*)

sys_path_bench = __import__("os").path.dirname(__file__)
__import__("sys").path.insert(0, sys_path_bench)
from cuda_segment_softmax_bench import power_law_degrees  # noqa: E402

dev = "cuda"


def rnd(shape, dtype, seed=0):
    g = torch.Generator(device=dev).manual_seed(seed)
    return (torch.randn(shape, device=dev, generator=g) * 2).to(dtype)


def segment_cases():
    """(name, fn) for segment_reduce rows of bench/results/h200-segment_reduce.md (same shapes as
    bench/cuda_bench.cu's cases of the same name). These calls pass device lengths (as torch
    users do); the ..._off cases pass offsets, as the benchmark table does."""
    out = []
    rng = np.random.default_rng(1)
    lens = {
        "1d_2Mx32": (np.full(2 << 20, 32, np.int64), 1),
        "1d_exp40": (rng.exponential(40, 200_000).astype(np.int64), 1),
        "1d_huge_ones": (np.concatenate([[1 << 26], np.ones(1 << 20, np.int64)]), 1),
        "1d_64x1M": (np.full(64, 1 << 20, np.int64), 1),
        "2d_64kx16_f128": (np.full(1 << 16, 16, np.int64), 128),
        "2d_x16_f4": (np.full(1 << 18, 16, np.int64), 4),
    }
    for name, (L, inner) in lens.items():
        for dtype in (torch.float32, torch.bfloat16):
            rows = int(L.sum())
            x = rnd((rows,) if inner == 1 else (rows, inner), dtype)
            Lt = torch.from_numpy(L).to(dev)
            Ot = torch.from_numpy(np.concatenate([[0], np.cumsum(L)])).to(dev)
            dn = "fp32" if dtype == torch.float32 else "bf16"
            for red in ("sum", "max"):
                def fwd(x=x, Lt=Lt, red=red):
                    return torch.ops.segred.segment_reduce(x, red, Lt, None, 0, True, None, "split")
                y = torch.segment_reduce(x, red, lengths=Lt, axis=0, unsafe=True)
                g = torch.ones_like(y) * -1.5

                def bwd(x=x, Lt=Lt, red=red, y=y, g=g):
                    return torch.ops.segred.segment_reduce_backward(g, y, x, red, Lt, None, 0, True, None, "split")
                out.append((f"sr_{name}_{dn}_{red}_fwd", fwd))
                out.append((f"sr_{name}_{dn}_{red}_bwd", bwd))
            # The benchmark table's calls pass offsets (bench/cuda_bench.cu), which take
            # prepare's speculative pass instead of the lengths scan: the sum forward
            # once more with offsets, named ..._sum_fwd_off.

            def fwd_off(x=x, Ot=Ot):
                return torch.ops.segred.segment_reduce(x, "sum", None, Ot, 0, True, None, "split")
            out.append((f"sr_{name}_{dn}_sum_fwd_off", fwd_off))
    return out


def softmax_cases():
    out = []
    shapes = [((262144, 128), -1), ((64, 262144), -1), ((2048, 65536), -1), ((16384, 4096), -1),
              ((64, 256, 56, 56), 1), ((8, 4, 1 << 24), 1), ((32, 1000, 4096), 1), ((8192, 8192), 0)]
    for shape, dim in shapes:
        for dtype in (torch.float32, torch.float16):
            x = rnd(shape, dtype)
            dn = "fp32" if dtype == torch.float32 else "fp16"
            nm = "x".join(map(str, shape)) + f"_d{dim}_{dn}"

            def fwd(x=x, dim=dim):
                return torch.ops.segred.softmax(x, dim)
            y = torch.softmax(x, dim)
            g = rnd(shape, dtype, 2)

            def bwd(y=y, g=g, dim=dim):
                return torch.ops.segred.softmax_backward(g, y, dim)
            out.append((f"sm_{nm}_fwd", fwd))
            out.append((f"sm_{nm}_bwd", bwd))
    return out


def ragged_cases():
    out = []
    deg = power_law_degrees(10_000_000, np.random.default_rng(0))
    off = torch.from_numpy(np.concatenate([[0], np.cumsum(deg)])).to(dev)
    for H, dtype in ((8, torch.float32), (8, torch.bfloat16), (1, torch.float32), (64, torch.float32)):
        x = rnd((int(deg.sum()), H) if H > 1 else (int(deg.sum()),), dtype)
        dn = "fp32" if dtype == torch.float32 else "bf16"

        def fwd(x=x):
            return torch.ops.segred.segment_softmax(x, None, off, 0, True)
        y = torch.rand_like(x)
        g = rnd(x.shape, dtype, 3)

        def bwd(y=y, g=g):
            return torch.ops.segred.segment_softmax_backward(g, y, y, None, off, 0, True)
        out.append((f"rg_gat_h{H}_{dn}_fwd", fwd))
        out.append((f"rg_gat_h{H}_{dn}_bwd", bwd))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=".")
    a = ap.parse_args()
    pat = re.compile(a.only)
    for family in (segment_cases, softmax_cases, ragged_cases):
        cases = [(n, f) for n, f in family() if pat.search(n)]
        for name, fn in cases:
            torch.cuda.nvtx.range_push(name)
            fn()
            torch.cuda.nvtx.range_pop()
            torch.cuda.synchronize()
            print(name, flush=True)
        del cases
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
