#!/usr/bin/env bash
# CPU softmax forward experiments on the benchmark host's cores, beside a device
# call (session 28): bench/cpu_softmax_tile_sweep.cpp built here (stripped) and
# carried as .cpubench/softmax_sweep. Usage: bench/host_softmax_sweeps.sh OUTDIR [CORES]
# (CORES default 4,5: the GPU stages of tools/gpu-session use 8-15 and its CPU
# A/B 2-3, so these share the memory system with that A/B; every comparison
# below alternates its two forms in one process, so both see the same load).
#   recompute.txt  the spatial forward's buffered exps against exps recomputed
#                  from x (SWEEP_RECOMPUTE_PAIRS), cases 0 1 3 4, 3 pairs each;
#   w-fp16.txt     [64, 256, 56, 56] float16 forward at W = 512 (the plan's) and 256,
#                  alternated, then 1024 and 128;
#   w-fp32.txt     [64, 256, 56, 56] float32 forward at W = 256 (the plan's) and 128,
#                  alternated, then 512.
set -u
out=${1:?OUTDIR}
cores=${2:-4,5}
bin=.cpubench/softmax_sweep
mkdir -p "$out"
[ -x "$bin" ] || { echo "no $bin" | tee "$out/sweep-missing.txt"; exit 0; }
run() {  # name, env..., -- args
  local name=$1; shift
  env OMP_NUM_THREADS=2 OMP_PROC_BIND=true "$@" > "$out/$name.txt" 2>&1
}
lscpu > "$out/lscpu.txt" 2>&1
run recompute SWEEP_RECOMPUTE_PAIRS=1 SWEEP_CASES=0134 timeout 240 taskset -c "$cores" "$bin" fwd 0 0 0 0 0 0
run w-fp16 SWEEP_CASES=3 timeout 90 taskset -c "$cores" "$bin" fwd 512 256 512 256 512 256 1024 128
run w-fp32 SWEEP_CASES=4 timeout 90 taskset -c "$cores" "$bin" fwd 256 128 256 128 256 128 512
echo "host sweeps done: $(date -u +%H:%M:%S)" >> "$out/recompute.txt"
