// Work split of the CUDA segment_reduce kernels: a pure function of the problem,
// shared by the planner (plan_segment_reduce, tested without a GPU) and the CUDA
// launch code, so the plan a test asserts is the geometry that runs.
//
// The merge space. Every row r of data has S segments; the kernels see one flat
// list of U = outer*(S+1) + 1 "segments" over N = outer*L axis positions:
//   q[0] = 0, q[1 + r*(S+1) + s] = r*L + off[r][s], q[U] = outer*L,
// so segment v covers positions [q[v], q[v+1]). v = 0 (before row 0's first
// offset) and v = 1 + r*(S+1) + S (after row r's last offset, up to the next
// row's first) are "ghost" segments: their positions are outside every real
// segment (forward: ignored; backward: gradient 0). Ghosts make q monotone over
// the whole tensor, so one binary search finds any position's segment.
//
// Merge path (PERFORMANCE.md, "Ideas known to work"). The D = U + N work items
// (one per segment end, one per position) are cut into equal tiles of `items`
// consecutive items; a tile binary-searches q for its start (the diagonal split
// of CUB's merge-path SpMV). A tile therefore does the same work whether it holds
// one position of a 2^26 segment or 32 empty segments: the split is indifferent
// to the length distribution. A segment that crosses tile edges leaves one
// partial per tile; a small fix-up kernel combines them in tile order
// (deterministic, no atomics on values).
//
// Worked example: 1-D float32, L = 2^26, S = 2^21 segments of 32: U = 2^21 + 2,
// D = U + N = 69,206,018 items; flat tiles are one warp x 16 items = 512 items,
// so 135,169 tiles, 8 per block: grid 16,897 x 256 threads. (16-bit types: 32
// items per lane, 1024 per tile.) The prepare kernel (src/cuda/segment_reduce.cu)
// builds q from the metadata and finds the W + 1 tile boundaries first, so no
// tile waits on a search. A call runs prepare, the main kernel and the fix-up
// (forward; max/min backward adds the write pass), sum/mean backward prepare and
// the write pass.
//
// Paths:
//   flat (inner == 1): a warp stages its tile's positions and segment ends in
//     shared memory (coalesced loads), each lane walks 16 items, and a warp-level
//     segmented scan joins the lanes' partials.
//   features (inner > 1): a group of G lanes (G = ceil(inner / V) rounded up to a
//     power of two, at most 32) owns a slab of G*V features (V = 16 bytes / element
//     size when inner % V == 0, else 1) and walks `items` merge items; each
//     position is a coalesced, vectorised row load of the slab.
//   prod backward: one warp per (segment, slab of 32 features), exclusive prefix
//     and suffix products in two passes over the segment; 64-bit indices only.
//
// Index width: 32-bit only when every index a kernel forms stays below 2^31:
// element offsets (outer*L*inner), the merge diagonal rounded up to whole tiles
// plus one tile (the end diagonal of the last tile is formed before clamping),
// output offsets (outer*S*inner), partial offsets (tiles*inner) and the global
// thread index (grid * block). Row bases are 64-bit either way on the host.
#pragma once
#include <atomic>
#include <algorithm>
#include <cstdint>

#include "segred/segment_reduce.h"

namespace segred::detail {

// Flat tiles: 16 merge items per lane (512 per warp) for 4- and 8-byte types, 32
// (1024 per warp) for the 16-bit types, so a tile moves ~2 KB either way.
constexpr int flat_items_per_lane(int esize) { return esize == 2 ? 32 : 16; }
constexpr int64_t kFlatTile = 32 * 16;  // merge items per warp tile, 4- and 8-byte types
constexpr int kFeatItems = 32;                          // merge items per feature group (feat_items_rule)
constexpr int kBlock = 256;                             // threads per block (before viability shrink)
constexpr int64_t kIndex32Limit = (int64_t(1) << 31);    // every index < 2^31 for the 32-bit paths

struct SegmentGeometry {
  bool flat = true;       // inner == 1
  bool prod_bwd = false;  // the segment-per-warp prod backward
  int vec = 1;            // features per lane (vector width)
  int group = 32;         // lanes per worker (features); 32 (a warp) for flat
  int64_t slabs = 1;      // feature slabs of group*vec features
  int64_t items = kFlatTile;  // merge items per worker
  int64_t segs = 0;       // U: merge-space segments (ghosts included)
  int64_t positions = 0;  // N = outer * L
  int64_t workers = 0;    // tiles along the merge space
  int64_t grid = 0;
  int block = kBlock;
  int index_bits = 64;
  bool fused_fixup = false;  // flat forward: fix-up inside flat_reduce (fused_fixup_rule)
  int flat_form = 0;         // flat forward: how a full tile without a segment end is read
                             // (flat_form_rule): 0 staged, 1 lane-contiguous, 2 coalesced
  int flat_ended = 0;        // flat forward: how a tile with segment ends is walked
                             // (flat_ended_rule): 0 staged by merge items, 1 by positions
};

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Session 12: the inner == 1 forward may combine its tile-crossing segments
// inside flat_reduce (src/cuda/fused_fixup_rule.h) instead of a fixup_tree
// launch: SegmentGeometry::fused_fixup, by the rule below. The tests and the
// benchmark's A/B override the rule: 0 the rule, 1 always (float accumulators),
// 2 never (the fixup_tree launch, as before). feat_items (session 13): 0 the
// rule (feat_items_rule), else the merge items per feature worker (any value >= 1).
// prep_spec (session 15), how prepare partitions an offsets call without a drop
// (src/cuda/segment_reduce.cu): 0 (default) from the raw offsets in its first
// phase, before the grid.sync, 1 prepare's rule (before or after by the share of
// scanning blocks), 2 from q after the grid.sync (sessions 5-14), 3 from the raw
// offsets after the grid.sync (prepare's rule, 1, lost 8-12 us on
// 1d_one2^26_1Mx1 fp32 in session 16's timing and is not the default), 4 scattered
// by the segments (session 33: no search; prep_scatter_rule below), 5 (default since
// session 33) the rule: 4 where prep_scatter_rule says so, else 0. pdl: 0
// (default since session 16) the rule (pdl_pays: not for a grid between one
// block per SM and one full wave, where session 16 timed the dependent launch
// 6-9 us slower on 2d_x16_f4 fp32 sum), 1 always (session 15's default), 2 never:
// the main kernel after prepare as a programmatic dependent launch on devices of
// compute capability >= 9 (src/cuda/common.cuh). flat_direct (session 16), how
// flat_reduce reads a full tile that holds no segment end: 0 the plan's rule, 1
// sessions 1-15's forms, 2 coalesced for every dtype (flat_form_rule below).
struct SegmentTestCaps {
  std::atomic<int> fused_fixup{0};
  std::atomic<int> feat_items{0};
  std::atomic<int> prep_spec{5};
  std::atomic<int> pdl{0};
  std::atomic<int> flat_direct{0};
  std::atomic<int> repair_tiles{0};  // > 0: tiles per warp of the flat max/min repair (1..32; 0: the rule)
  // How the flat sum/mean backward writes a tile (session 24; flat_elementwise in
  // src/cuda/segment_kernels.cuh): 0 the rule (flat_fill_tile for tiles with a segment
  // end whose segments average >= 4 positions, the walk elsewhere), 1 the walk
  // everywhere, 2 flat_fill_tile for every tile (gi 16-byte aligned). All give the same bits.
  std::atomic<int> flat_fill{0};
  // The feature forward's vector width for 16-bit and float32 types (session 29;
  // feat_vec_rule below): 0 the rule, 1 full 16-byte vectors, 2 half vectors (8-byte
  // loads: 4 features a lane for 16-bit types, 2 for float32) wherever inner allows.
  std::atomic<int> feat_half_vec{0};
  // How the flat forward walks a tile with segment ends (session 34; flat_ended_rule
  // below): 0 the rule, 1 the staged walk by merge items (sessions 1-33) for every dtype.
  std::atomic<int> flat_ended{0};
  // Threads a block of the flat kernels, the prod backward's excepted (session 35, the
  // benchmark's --flat-block): 0 the plan's kBlock, else that many (a multiple of 32 in
  // [32, 1024]; other values are ignored).
  std::atomic<int> flat_block{0};
};
inline SegmentTestCaps& segment_test_caps() {
  static SegmentTestCaps caps;
  return caps;
}

// Tiles one wave of flat_reduce holds on an H200 (132 SMs x 64 warps), rounded down.
constexpr int64_t kFusedWaveTiles = 8192;

// Session 20: tiles per warp of the flat max/min repair (flat_maxmin_repair,
// src/cuda/segment_maxbwd.cuh): G lanes of a warp each walk one tile's chain of
// dependent record loads at once, then the warp runs the tiles' fixes one by one.
// One warp per tile waited through a chain per tile (ncu, 1d_64x1M: 55 us of fp32's
// 238); 32 tiles per warp left too few warps where tiles are few (1d_200k_exp40:
// ~500) or fixes many (1d_64x1M bf16: ~20 re-reads in a row per warp, 58 us). So:
// the fewest tiles per warp (a power of two, at most 32) that keep the warps within
// one wave of an H200, W / G <= kRepairWaveWarps (132 SMs x 64 warps).
constexpr int64_t kRepairWaveWarps = 132 * 64;
constexpr int repair_tiles_per_warp(int64_t tiles) {
  int g = 1;
  while (g < 32 && (tiles + g - 1) / g > kRepairWaveWarps) g *= 2;
  return g;
}

// Session 33: prepare's partition of an offsets call (src/cuda/segment_reduce.cu,
// prep_spec 4 and 5). Scattered by the segments, each boundary is written by the
// thread that loads the offsets around it in prepare's first phase: no search, so no
// chain of dependent loads that the whole grid waits for at the grid.sync (1d_200k_exp40
// prepare 19 -> 11 us, rows 0.76-0.84x; 1d_one2^26_1Mx1 rows 0.90-0.94x; H100, bench/
// NOTES.md session 33). It costs where the search was cheap and the scatter is not:
//   - more than kScatterRounds rounds of metadata a scan block (phase 0 is then the
//     critical path, and the scatter lengthens each round; 1d_2Mx32: 4 rounds, rows
//     1.04-1.09x, where the proportional guess made each search ~4 probes);
//   - segments spanning kScatterLongTiles tiles or more on average (each leaves a record
//     that the grid writes after the grid.sync; 1d_64x1M: rows 1.12-1.19x, where the
//     searches hit the proportional guess).
// meta_items: metadata entries (outer x k), scan_blocks: prepare's scanning blocks
// (~kPrepItemsPerBlock entries each), tile_items: merge items per tile.
constexpr int64_t kScatterRounds = 2;
constexpr int64_t kScatterRoundItems = 1024;  // prepare's kPrepTile
constexpr int64_t kScatterLongTiles = 16;     // prepare's kScatterWrites
inline bool prep_scatter_rule(int64_t meta_items, int64_t scan_blocks, int64_t positions, int64_t tile_items) {
  if (meta_items <= 0 || scan_blocks <= 0 || tile_items <= 0) return false;
  return ceil_div(meta_items, scan_blocks) <= kScatterRounds * kScatterRoundItems &&
         positions / meta_items < kScatterLongTiles * tile_items;
}

// The fused fix-up saves the fixup_tree launch (3-20 us) but makes each tile that
// completes a crossing segment wait, at its end, for the carries published by the
// tiles before it: one L2 round trip per such tile. H200, session 12 (bench/NOTES.md,
// fused / fixup_tree time): 1d_small_4kx16 0.88-0.90, 1d_64x1M 0.89-0.91,
// 1d_one2^26 0.88-0.94, 1d_200k_exp40 0.97-1.01, 1d_2Mx32 1.12-1.23 (every tile
// waits). So: fused when the call is one wave (the waits overlap) or when there
// are at most a quarter as many segments as tiles (few tiles wait); float
// accumulators only (a double value and its flag do not fit one 64-bit store).
inline bool fused_fixup_rule(int64_t segs, int64_t workers, int esize) {
  return esize != 8 && (workers <= kFusedWaveTiles || 4 * segs <= workers);
}

// Session 13: merge items per feature worker (inner > 1). Every feature tile writes a
// carry (and, where a segment crosses into it, a head) of its slab's float
// accumulators, and fixup_tree reads them back: 2 x inner x 4 bytes per tile beside
// ~items x inner x es bytes of data. At 32 items that is 1 KB per ~7.5 KB of a bf16
// [*, 128] tile (13%), 1 KB per ~15 KB at fp32 (7%), plus a fixup_tree lane group per
// tile. So the calls that keep such records (forward; max/min backward: integer
// records, same count) take longer tiles where rows are wide, i.e. where one row
// load is a group of >= 16 lanes reading >= 256 bytes: 128 items (records 2-3% of the
// data) when the launch still has >= kFeatMinThreads threads, else 64 at that bound,
// else 32. kFeatMinThreads = 2^17: 8 row loads of 16 bytes in flight per lane make 16
// MB, ~4x the H200's bandwidth x latency, and half its resident threads (132 x 2048).
// Narrow rows kept 32 until session 26 (below); sum/mean backward (no records) keeps
// 32 (session 26's sweep: 32 the fastest or within 1% on every such row).
// Worked example: [2^20, 128] with 64 k segments of 16 (2d_64kx16_f128): D = 65,538 +
// 2^20 = 1,114,114; fp32 (G 32 x V 4 x 4 B = 512 B) and bf16 (G 16 x V 8 x 2 B = 256 B)
// both take 128 items: 8705 workers, 278,560 / 139,280 threads.
// H200, session 13 (bench/NOTES.md, the benchmark's FEAT table, plan / 32-item time):
// f128 forwards fp32 0.90-0.96, bf16 0.82-0.86; max backwards 0.77-0.98; 2d_x16_f64
// fp32 forward 0.87-0.88, its max backward 1.03 (the one row slower).
//
// Session 26: narrow rows (a row load of < 256 bytes) with records take kFeatNarrowItems
// while the launch keeps >= kFeatNarrowMinThreads threads. H200 sweep of the items
// (bench/results/h200-session26/run1-b816d3c/items-sweep.md: cuda_bench --items-sweep,
// min of 3 alternated rounds, B / 32-item time) over the 15 narrow-row forwards and max
// backwards (2d_x16_f4 / f16 / f64, fp32 and bf16): 88 items geomean 0.869, worst 1.004
// (48: 0.929 / 1.071; 64: 0.921 / 1.047; 96: 0.890 / 1.038; 128: 0.956 / 1.165). A
// narrow tile of 32 items carries records of 2 x inner floats per ~30 rows of inner x es
// bytes, as many bytes as the data at 2d_x16_f4, and the fix-up a lane group per tile.
// The sweep's narrow rows at 88 items keep 50k-200k threads (198-792 blocks) and gained;
// the bound of 2^14 threads carries the rule to a third of the fewest timed, untimed
// below 50k.
constexpr int64_t kFeatMinThreads = int64_t(1) << 17;
constexpr int64_t kFeatNarrowItems = 88;
constexpr int64_t kFeatNarrowMinThreads = int64_t(1) << 14;
// Session 29: merge items of a half-vector forward whose row load is >= 256 bytes.
// The same run's items sweep (half vectors forced, bf16 sum forwards, B / 128 items):
// 2d_64kx16_f128 88 0.973, 176 0.920, 256 0.915; 2d_exp40_f128 0.958 / 0.942 / 0.919;
// the narrow 2d_x16_f64 (128-byte rows, 88 items by the narrow rule) 1.033 at 176,
// 1.144 at 256. So these wide rows take kHalfVecWideItems while the launch keeps
// kFeatMinThreads (2d_64kx16_f128: 4353 workers x 32 lanes = 139 k threads, 545
// blocks), else the rules below. The wave fit follows as for every records call. Only
// the half-vector forwards have 16-bit rows at V = 4 (feat_vec_rule below), so V and
// esize name them here.
constexpr int64_t kHalfVecWideItems = 256;
inline int64_t feat_items_rule(int64_t D, int64_t slabs, int G, int V, int esize, bool records) {
  if (!records) return kFeatItems;
  if (esize == 2 && V == 4 && int64_t(G) * V * esize >= 256 &&
      ceil_div(D, kHalfVecWideItems) * slabs * G >= kFeatMinThreads)
    return kHalfVecWideItems;
  if (int64_t(G) * V * esize < 256)
    return ceil_div(D, kFeatNarrowItems) * slabs * G >= kFeatNarrowMinThreads ? kFeatNarrowItems : kFeatItems;
  for (const int64_t items : {int64_t(4) * kFeatItems, int64_t(2) * kFeatItems})
    if (ceil_div(D, items) * slabs * G >= kFeatMinThreads) return items;
  return kFeatItems;
}

// Session 26: the wave fit. Every feature worker runs the whole kernel (no grid-stride
// loop), so a grid of k whole waves plus a few blocks runs a (k+1)-th wave of those
// blocks alone, a whole worker's time. Where the grid exceeds k >= 1 waves (wave =
// sm_count x resident blocks per SM of the kernel) by at most 1/kWaveTailDiv of a wave,
// the items grow until k waves hold it. H200 (same sweep): 2d_64kx16_f128 bf16 max
// backward, 64 registers, 4 blocks of 256 per SM = 528 per wave; 128 items give 545
// blocks (1.03 waves), 160 or 192 items 436 / 363 blocks: 0.80x the time; 64 items
// (1089 blocks, 2.06 waves) 0.98x. (136 items measured 0.70x there, but 136 = 8 x 17
// puts every tile edge on a segment edge of that case's uniform 16-row segments: no
// segment crosses a tile, which a real length distribution does not give; the
// exponential-length rows show no such dip.) This rule gives 132 items there.
constexpr int64_t kWaveTailDiv = 8;
inline int64_t feat_wave_items(int64_t items, int64_t D, int64_t slabs, int G, int block, int64_t wave_blocks) {
  if (wave_blocks <= 0 || items <= 0 || block <= 0) return items;
  const int64_t per_worker = slabs * G;  // threads of one worker
  const int64_t blocks = ceil_div(ceil_div(D, items) * per_worker, block);
  const int64_t k = blocks / wave_blocks, tail = blocks - k * wave_blocks;
  if (k < 1 || tail == 0 || tail * kWaveTailDiv > wave_blocks) return items;
  const int64_t workers = k * wave_blocks * block / per_worker;  // the most workers k waves hold
  return workers >= 1 ? std::max(items, ceil_div(D, workers)) : items;
}

// Session 17: how flat_reduce reads a full tile that holds no segment end
// (SegmentGeometry::flat_form, the kernel's FlatForm in src/cuda/segment_kernels.cuh):
// 0 staged through shared memory, 1 lane-contiguous straight into registers (16-bit
// types only), 2 coalesced 16-byte vectors (each warp load 512 contiguous bytes).
// Each form is its own instantiation of flat_reduce, and the coalesced one carries a
// second walk, which costs the general walk (tiles with segment ends) registers.
// H200, sessions 16-17 (bench/NOTES.md, the DIRECT table; coalesced / staged time):
// 16-bit sum 0.84-0.90 on long segments, 0.99-1.00 elsewhere, so the 16-bit types
// read coalesced; float32 sum 0.94-0.95 on 1d_64x1M (all tiles full), 1.00 on the
// 2^26-beside-1M row (mean length 65), 1.03-1.06 on short segments (1d_2Mx32,
// 1d_200k_exp40: the walk's registers), float32 max 0.99-1.06. So float32 sum and
// mean read coalesced where the mean segment length is at least kFlatCoalescedLen
// (8 float32 tiles: most tiles are full and whole), everything else staged (float64
// and prod not timed). `cap` (SegmentTestCaps::flat_direct): 0 this rule, 1
// sessions 1-15's forms (16-bit lane-contiguous, else staged), 2 coalesced for all.
constexpr int64_t kFlatCoalescedLen = 8 * 512;
inline int flat_form_rule(int esize, Reduce reduce, int64_t positions, int64_t segments, int cap) {
  if (cap == 2) return 2;
  if (cap == 1) return esize == 2 ? 1 : 0;
  if (esize == 2) return 2;
  const bool sum = reduce == Reduce::Sum || reduce == Reduce::Mean;
  return esize == 4 && sum && positions / std::max<int64_t>(segments, 1) >= kFlatCoalescedLen ? 2 : 0;
}

// Session 34: how flat_reduce walks a tile that holds segment ends
// (SegmentGeometry::flat_ended; flat_lane_ended in src/cuda/segment_kernels.cuh).
// 1: by positions, lane l the tile's positions 32 l .. 32 l + 31 read straight
// from x, a mask of its segment ends, a branch-free fold; 16-bit forwards only
// (the lane's 32 positions are the five 16-byte loads of the full-tile read). 0:
// the staged walk by merge items (a lane's 32 or 16 merge items, positions and ends,
// from shared memory). Why: ncu source counters (H100, session 33, 1d_2Mx32 bf16
// sum): the staged walk issued 890 warp instructions a tile of 1024 merge items,
// 39 of them the additions (bench/NOTES.md, session 34). `cap`
// (SegmentTestCaps::flat_ended): 0 this rule, 1 the staged walk everywhere.
inline int flat_ended_rule(int esize, int cap) { return cap != 1 && esize == 2 ? 1 : 0; }

// Session 29: features per lane of a feature call (SegmentGeometry::vec). 16-byte
// vectors (16 / esize features a lane) wherever inner is a multiple of them and the
// data is aligned, else one feature a lane. A 16-bit forward (feat_reduce) may also
// take half vectors, 8-byte loads of 4 features: twice the lanes for the same row
// bytes, half the registers per round of 8 row loads. The reason to try it (bench/
// NOTES.md, session 24's ncu of the same-geometry pair): bf16 2d_64kx16_f128 sum
// forward 0.124 ms against fp32 2d_x16_f64's 0.101 ms (the same 256-byte rows,
// segments and grid); ptxas holds the 16-bit round to 40 registers and spreads its 8
// loads between their uses (2, 1, 1, 1, 1, 2 issued before each wait against fp32's
// 4 and 4). Half vectors also reach inner = 4 mod 8 (12, 20, ...; 2d_x16_f4's
// inner 4), which full vectors read one feature a lane. The sum/mean backward
// (feat_elementwise) keeps full vectors; the max/min backward: below. `cap`:
// SegmentTestCaps::feat_half_vec (0 the rule, 1 full vectors, 2 half wherever inner
// allows).
// H200, session 29 (bench/NOTES.md; one binary, half vectors forced against the old
// rule, 3 alternated rounds, bf16): 2d_64kx16_f128 sum / max forward 0.888 / 0.856,
// 2d_exp40_f128 0.903 / 0.818, 2d_x16_f64 0.805 / 0.845, 2d_x16_f16 0.687 / 0.777,
// but 2d_x16_f4 1.199 / 1.214 (inner 4: one lane per 8-byte row, a warp's load
// spread over 32 tiles). So the rule: half vectors for the 16-bit forwards whose
// inner is a multiple of 4 and at least kHalfVecMinInner = 16 (4 lanes a row or
// more; inner 8 and 12 were not timed and keep the old widths). float16 takes the
// rule of bfloat16 (the same kernel but the conversion; not timed). float32 has the
// form too (8-byte loads of 2 features, cap 2 only): the rule keeps its full vectors
// until it is timed.
constexpr int64_t kHalfVecMinInner = 16;
// Session 30: the max/min backward (feat_maxmin_bwd, `maxmin_bwd`) has the half-vector
// form too, with its tie bits (a 64-row window at V <= 4; src/cuda/segment_maxbwd.cuh).
// H100, session 30 run 1 (bench/results/h100-session30/run1-tiebits/half-ab.md; half
// vectors forced against full vectors, both with the tie bits where V <= 4, max backward):
// float32 2d_x16_f4 0.789, 2d_x16_f64 0.910, 2d_exp40_f128 0.959, 2d_64kx16_f128 0.966,
// 2d_x16_f16 1.007: so float32 takes them wherever inner is even. bfloat16 2d_x16_f16
// 0.833 (0.78x of the session-29 kernel: 198 blocks become 396, a third of a wave
// before), but 2d_x16_f4 1.22 and, against the session-29 kernel at full vectors,
// 2d_64kx16_f128 0.99, 2d_exp40_f128 1.01, 2d_x16_f64 1.04: so 16-bit types take them
// for inner in [kHalfVecMinInner, kHalfVecBwdMaxInner) (rows of 32 to 126 bytes; only
// inner 16 was timed).
constexpr int64_t kHalfVecBwdMaxInner = 64;
inline int feat_vec_rule(int esize, Direction dir, int64_t inner, bool aligned, int cap, bool maxmin_bwd = false) {
  if (!aligned || esize <= 0) return 1;
  const int v = 16 / esize;
  const bool fwd = dir == Direction::Fwd;
  const bool can_half = (esize == 2 || esize == 4) && (fwd || maxmin_bwd) && inner % (v / 2) == 0;
  const bool rule = fwd ? esize == 2 && inner >= kHalfVecMinInner
                        : esize == 4 || (inner >= kHalfVecMinInner && inner < kHalfVecBwdMaxInner);
  if (can_half && (cap == 2 || (cap == 0 && rule))) return v / 2;
  return inner % v == 0 ? v : 1;
}

// Plan::variant of a feature geometry, and what its feat_reduce (and feat_maxmin_bwd)
// launch records:
// "half_vectors" where it reads rows in 8-byte vectors (feat_vec_rule), else "".
inline const char* feat_vec_variant(const SegmentGeometry& g, int esize) {
  return !g.flat && !g.prod_bwd && (esize == 2 || esize == 4) && g.vec == 8 / esize ? "half_vectors" : "";
}

// The calls that have the choice: the inner == 1 forward (flat_reduce).
inline bool has_fixup_variant(const SegmentGeometry& g, Direction dir) {
  return g.flat && !g.prod_bwd && dir == Direction::Fwd;
}
// `aligned`: data pointers allow vector loads (16-byte aligned); the planner
// assumes they do (every allocator segred meets does); the launch code passes
// the truth and falls back to vec = 1.
inline SegmentGeometry segment_geometry(const SegmentProblem& p, bool aligned = true) {
  SegmentGeometry g;
  const int64_t outer = std::max<int64_t>(p.outer, 0), L = std::max<int64_t>(p.axis_len, 0);
  const int64_t inner = std::max<int64_t>(p.inner, 1), S = std::max<int64_t>(p.num_segments, 0);
  g.flat = inner == 1;
  g.prod_bwd = p.direction == Direction::Bwd && p.reduce == Reduce::Prod;
  g.segs = outer * (S + 1) + 1;
  g.positions = outer * L;
  const int64_t D = g.segs + g.positions;
  const int esize = dtype_size(p.dtype);
  int64_t threads = 0;
  if (g.prod_bwd) {
    g.vec = 1;
    g.group = 32;
    g.slabs = g.flat ? 1 : ceil_div(inner, 32);
    g.items = 0;
    g.workers = outer * S * g.slabs;  // one warp each
    threads = g.workers * 32;
  } else if (g.flat) {
    g.vec = 1;
    g.group = 32;
    g.slabs = 1;
    g.items = 32 * flat_items_per_lane(esize);
    g.workers = ceil_div(D, g.items);
    threads = g.workers * 32;
  } else {
    const bool maxmin_bwd = p.direction == Direction::Bwd && (p.reduce == Reduce::Max || p.reduce == Reduce::Min);
    g.vec = feat_vec_rule(esize, p.direction, inner, aligned, segment_test_caps().feat_half_vec.load(), maxmin_bwd);
    const int64_t lanes = ceil_div(inner, g.vec);
    int G = 1;
    while (G < 32 && G < lanes) G *= 2;
    g.group = G;
    g.slabs = ceil_div(inner, int64_t(G) * g.vec);
    const bool records = p.direction == Direction::Fwd || p.reduce == Reduce::Max || p.reduce == Reduce::Min;
    const int force = segment_test_caps().feat_items.load();
    g.items = force > 0 ? force : feat_items_rule(D, g.slabs, G, g.vec, esize, records);
    if (force <= 0 && records)
      g.items = feat_wave_items(g.items, D, g.slabs, G, kBlock,
                                int64_t(std::max(p.sm_count, 0)) * std::max(p.feat_blocks_per_sm, 0));
    g.workers = ceil_div(D, g.items);
    threads = g.workers * g.slabs * G;
  }
  g.block = kBlock;
  const int fb = segment_test_caps().flat_block.load();
  if (g.flat && !g.prod_bwd && fb >= 32 && fb <= 1024 && fb % 32 == 0) g.block = fb;
  g.grid = ceil_div(threads, g.block);
  // Largest index any kernel forms (see the header comment).
  const int64_t tiles_round = g.workers + 1;
  int64_t m = outer * L * inner;
  m = std::max(m, outer * S * inner);
  m = std::max(m, g.items ? tiles_round * g.items : D);
  m = std::max(m, tiles_round * inner);
  m = std::max(m, g.grid * g.block);
  m = std::max(m, D + 1);
  g.index_bits = (!g.prod_bwd && m < kIndex32Limit) ? 32 : 64;
  if (has_fixup_variant(g, p.direction)) {
    const int force = segment_test_caps().fused_fixup.load();
    g.fused_fixup = force == 1 ? esize != 8 : force == 2 ? false : fused_fixup_rule(g.segs, g.workers, esize);
    g.flat_form = flat_form_rule(esize, p.reduce, g.positions, outer * S, segment_test_caps().flat_direct.load());
    g.flat_ended = flat_ended_rule(esize, segment_test_caps().flat_ended.load());
  }
  return g;
}

// The registered path a geometry runs (src/core/registry.cpp).
inline const char* segment_path(Direction dir, const SegmentGeometry& g) {
  const bool i32 = g.index_bits == 32;
  if (g.prod_bwd) return "segment_reduce.bwd.cuda.prod_warp.i64";
  if (dir == Direction::Fwd)
    return g.flat ? (i32 ? "segment_reduce.fwd.cuda.flat.i32" : "segment_reduce.fwd.cuda.flat.i64")
                  : (i32 ? "segment_reduce.fwd.cuda.features.i32" : "segment_reduce.fwd.cuda.features.i64");
  return g.flat ? (i32 ? "segment_reduce.bwd.cuda.flat.i32" : "segment_reduce.bwd.cuda.flat.i64")
                : (i32 ? "segment_reduce.bwd.cuda.features.i32" : "segment_reduce.bwd.cuda.features.i64");
}

}  // namespace segred::detail
