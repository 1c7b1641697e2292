#!/usr/bin/env bash
# Session 27 (issue #4): where the feature max backward's time goes when segments
# cross tile edges. Nsight Compute durations of the max backward's own kernels
# (feat_maxmin_bwd, fixup_tree<StatsFn>, feat_maxmin_repair, in launch order; the
# regex matches no forward kernel and not prepare, which the forward shares) over the
# first 4 backward calls (--reps 1: 3 warm-ups and 1 timed) of a prebuilt cuda_bench,
# per case at the plan's merge items and at items that put every tile edge on a
# segment edge of the uniform 16-row cases (136 = 8 x 17: no segment crosses a tile).
#
#   bench/ncu_maxbwd_crossing.sh CUDA_BENCH OUTDIR      (NCU_CASES=regex: only the cases it matches)
set -u
B="${1:?cuda_bench}"
O="${2:?out dir}"
mkdir -p "$O"
one() {  # name, cuda_bench arguments...
  local name="$1"
  shift
  [[ "$name" =~ ${NCU_CASES:-.} ]] || return 0
  timeout 150 ncu --clock-control none --kernel-name-base demangled -k 'regex:feat_maxmin|StatsFn' -c 12 \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
    "$B" --reps 1 --reduce max "$@" > "$O/ncu-$name.log" 2>&1
  echo "== $name ($*): rc $?"
  python3 tools/ncu-summary "$O/ncu-$name.log" > "$O/ncu-$name.md" 2>&1
  grep "^|" "$O/ncu-$name.md" | cut -c1-200
}
one x16_f16-f32-rule --only 2d_x16_f16 --dtype float32
one x16_f16-f32-136 --only 2d_x16_f16 --dtype float32 --feat-items 136
one 64kx16_f128-bf16-rule --only 2d_64kx16_f128 --dtype bfloat16
one 64kx16_f128-bf16-136 --only 2d_64kx16_f128 --dtype bfloat16 --feat-items 136
one 64kx16_f128-bf16-132 --only 2d_64kx16_f128 --dtype bfloat16 --feat-items 132
one exp40_f128-bf16-rule --only 2d_exp40_f128 --dtype bfloat16
one exp40_f128-f32-rule --only 2d_exp40_f128 --dtype float32
one x16_f16-bf16-rule --only 2d_x16_f16 --dtype bfloat16
