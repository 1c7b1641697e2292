#!/usr/bin/env bash
# Sessions 30-31 (issue #4): DRAM bytes, time and occupancy of the feature max backward's
# main kernel (feat_maxmin_bwd, its first launch: a warm-up call of --reps 1) for two
# prebuilt cuda_bench binaries over the same cases, so that a change meant to remove
# bytes (the tie-bit window) is seen removing them.
#
#   bench/ncu_maxbwd_bytes.sh OLD_BENCH NEW_BENCH OUT.txt   (CASES="case:dtype ...")
# Session 32: K (kernel regex, default feat_maxmin_bwd) and C (launches profiled, 1), e.g.
# K='flat_maxmin' C=2 for the flat kernel and its repair.
set -u
A="${1:?old cuda_bench}"
B="${2:?new cuda_bench}"
O="${3:?out file}"
CASES="${CASES:-2d_64kx16_f128:bfloat16 2d_exp40_f128:bfloat16 2d_x16_f64:bfloat16}"
K="${K:-feat_maxmin_bwd}"
C="${C:-1}"
M=dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum,lts__t_sector_hit_rate.pct,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem
: > "$O"
for c in $CASES; do
  for side in old new; do
    bin="$A"; [ "$side" = new ] && bin="$B"
    echo "== ${c%%:*} ${c##*:} $side" >> "$O"
    timeout 120 ncu --clock-control none -k "regex:$K" -c "$C" --metrics "$M" \
      "$bin" --only "${c%%:*}" --dtype "${c##*:}" --reduce max --reps 1 2>&1 |
      grep -E "$K|dram__|gpu__time|lts__|sm__warps|launch__" | sed 's/^ *//' >> "$O"
  done
done
cat "$O"
