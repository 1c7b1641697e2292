#!/usr/bin/env bash
# CPU softmax forward experiments on the benchmark host's cores, beside a device
# call (session 28): bench/cpu_softmax_tile_sweep.cpp built here (stripped) and
# carried as .cpubench/softmax_sweep. Usage: bench/host_softmax_sweeps.sh OUTDIR [CORES]
# (CORES default 4,5: the GPU stages of tools/gpu-session use 8-15 and its CPU
# A/B 2-3, so these share the memory system with that A/B; every comparison
# below alternates its two forms in one process, so both see the same load).
#   (recompute.txt, session 28's buffered against recomputed exps: that form was
#   measured slower on the host and removed, bench/NOTES.md, session 29)
#   w-fp16.txt     [64, 256, 56, 56] float16 forward at W = 512 (the plan's) and 256,
#                  alternated, then 1024 and 128;
#   w-fp32.txt     [64, 256, 56, 56] float32 forward at W = 256 (the plan's) and 128,
#                  alternated, then 512;
#   perf-fp16*.txt where the float16 forward's samples fall (perf record / annotate),
#                  when the host has perf and lets it sample.
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
run w-fp16 SWEEP_CASES=3 timeout 90 taskset -c "$cores" "$bin" fwd 512 256 512 256 512 256 1024 128
run w-fp32 SWEEP_CASES=4 timeout 90 taskset -c "$cores" "$bin" fwd 256 128 256 128 256 128 512
# Where the fp16 forward's time goes on this CPU, if perf may sample here (the
# binary keeps its symbols): the plan's spatial kernel, then its annotation.
if command -v perf > /dev/null 2>&1; then
  SWEEP_CASES=3 OMP_NUM_THREADS=2 OMP_PROC_BIND=true timeout 60 perf record -o "$out/perf-fp16.data" -F 2000 -- \
    taskset -c "$cores" "$bin" fwd 0 0 0 0 > "$out/perf-fp16-run.txt" 2>&1 &&
    perf report -i "$out/perf-fp16.data" --stdio --no-children --sort symbol 2>/dev/null | head -40 > "$out/perf-fp16.txt" &&
    perf annotate -i "$out/perf-fp16.data" --stdio -s "$(grep -o 'isa_[a-z0-9]*::spatial<segred::half_t[^]]*>' "$out/perf-fp16.txt" | head -1 |
      sed 's/^/segred::cpu::(anonymous namespace)::/')" 2>/dev/null | awk '$1+0 >= 0.3' > "$out/perf-fp16-annotate.txt"
  rm -f "$out/perf-fp16.data"
else
  echo "no perf on this host" > "$out/perf-fp16.txt"
fi
echo "host sweeps done: $(date -u +%H:%M:%S)" > "$out/done.txt"
