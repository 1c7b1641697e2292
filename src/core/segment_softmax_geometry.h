// Work split of the CUDA ragged softmax kernels (src/ops/segment_softmax_tiles.h):
// a pure function of the problem, shared by the planner (plan_segment_softmax,
// tested without a GPU), the launch code and the CPU emulation test, so the plan
// a test asserts is the geometry that runs.
//
// The merge space is segment_reduce's (src/core/segment_geometry.h): U = outer*(S+1)
// + 1 segments (ghosts included) and N = outer*L positions ("rows": a row is the
// `inner` features of one position), D = U + N merge items cut into tiles of T
// items; a tile binary-searches its start, so a tile does the same work whether it
// holds one row of a 2^26-row segment or 4000 empty segments.
//
// One block per (tile, slab). A slab is W features (all of them when a row has at
// most 64 bytes): the block stages the tile's rows x W features in shared memory
// with coalesced 16-byte loads (a tile of one slab is one contiguous range of memory),
// splits the rows into `chunks` runs of E rows (E odd: the lanes of a warp then
// read distinct shared-memory banks), and a thread (chunk, feature lane) walks
// its E rows sequentially for V features: one exp per element for the online
// (max, sum) statistics, a block-level segmented scan joins the chunks, and the
// results are written in place and copied out with coalesced 16-byte stores.
//
// Shared memory per block: the tile part (<= 47 KiB, kSsSmemBudget) is
//   arrays x (T*W + 16 bytes of alignment pad) elements, (T+1) uint16 segment
//   ends, block*V statistics (scan partials, then per-chunk totals), block int
//   keys; T is the largest tile that fits, at most 8192 items. Then, for the
//   row-output kinds with V = 4 (no middle-piece slot in registers: ss_fifo), one
//   middle-piece slot per thread: block*V statistics (8 KiB forward, 4 KiB
//   backward at 256 threads) OUTSIDE the tile budget, so the tile keeps its size
//   and the launch opts in above 48 KiB (<= kSsSmemLimit = 55 KiB: with the 1 KiB
//   the driver reserves per block, 4 blocks of 256 threads still fit the 228 KiB
//   of an H100/H200 SM, as the (256, 4) launch bounds' 64 registers allow).
//
// Worked example (GAT: 10M edges, 8 heads, float32, forward): V = 4, W = 8, one
// slab, G = 2 lanes per row, 128 chunks; per item 8*4 + 2 = 34 bytes, fixed
// 256*4*8 + 1024 + 64 = 9280 bytes, so T = (48128 - 9280) / 34 = 1142 items; E =
// ceil(1142 / 128) = 9. With 1M nodes: D = 11M + 2, 9633 tiles, grid 9633 x 256.
// Shared memory 48064 bytes of tile + 8192 of middle-piece slots = 56256 (55 KiB).
//
// Index width: 32-bit only when every index a kernel forms stays below 2^31:
// element offsets (outer*L*inner), per-segment outputs (outer*S*inner), merge
// diagonals (D plus two tiles, whatever block the launch settles on), the
// per-tile statistics (tiles*inner) and the fix-up's thread index.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string_view>

#include "segred/segment_softmax.h"

namespace segred::detail {

// The six kernel kinds: (op, direction).
enum class SsKind : uint8_t { SoftmaxFwd, LogSoftmaxFwd, LseFwd, SoftmaxBwd, LogSoftmaxBwd, LseBwd };

constexpr SsKind ss_kind(SegmentSoftmaxOp op, Direction d) {
  return SsKind(int(op) + (d == Direction::Bwd ? 3 : 0));
}
// Inputs staged in shared memory: x (forward, logsumexp backward) or g and y.
constexpr int ss_arrays(SsKind k) { return k == SsKind::SoftmaxBwd || k == SsKind::LogSoftmaxBwd ? 2 : 1; }
// Bytes of one statistic: (max, sum) forward, a sum backward, none for logsumexp backward.
constexpr int ss_stat_bytes(SsKind k, DType t) {
  const int a = t == DType::Float64 ? 8 : 4;
  return k <= SsKind::LseFwd ? 2 * a : k == SsKind::LseBwd ? 0 : a;
}

constexpr int kSsBlock = 256;
constexpr int kSsSlabBytes = 64;  // bytes of a row a block stages when inner is wider
constexpr int64_t kSsSmemBudget = 47 * 1024;  // the tile part (arrays, ends, stats, keys)
// Middle pieces a lane keeps for the row pass (V = features per lane): in
// registers (V = 1: 4, V = 2: 2, V = 4: none: one register slot of 4 (max, sum)
// pairs made ptxas spill ~200 bytes under the (256, 4) launch bounds), and in
// shared memory (one slot per thread, V = 4 only, the row-output kinds that have
// a statistic); the chunk's further middle pieces are written by the walk itself
// (write_pieces).
constexpr int ss_fifo(int V) { return V >= 4 ? 0 : V == 2 ? 2 : 4; }
constexpr int ss_smem_slots(SsKind k, int V) {
  return k != SsKind::LseFwd && k != SsKind::LseBwd && ss_fifo(V) == 0 ? 1 : 0;
}
constexpr int64_t kSsSlotBytesMax = int64_t(kSsBlock) * 4 * 8;  // 256 threads x V = 4 x (max, sum) float
constexpr int64_t kSsSmemLimit = kSsSmemBudget + kSsSlotBytesMax;  // a block's dynamic shared memory
constexpr int64_t kSsMaxItems = 8192;  // tile-relative segment ends fit uint16
constexpr int64_t kSsIndex32Limit = int64_t(1) << 31;

// Test hook: plan every CUDA ragged softmax call with 64-bit indices, so the i64
// kernels also run on small inputs (under compute-sanitizer, against the
// reference). The boundary tests past 2^32 elements reach them without it.
inline std::atomic<bool>& segment_softmax_force_index64() {
  static std::atomic<bool> force{false};
  return force;
}

// Benchmark and test hooks of the tile geometry (session 42: bench/cuda_segment_softmax_bench.cu
// --block / --budget-kib sweep how many rows a thread walks per tile; on an H100 the rule below
// was the fastest of the eight geometries tried, bench/NOTES.md session 42). 0 = the rule. block:
// the threads a tile block starts at (a multiple of 32 in [32, kSsBlock]: the kernel's launch
// bounds; the launcher still halves it where occupancy reports no resident block); budget_kib:
// the tile part's shared-memory budget in KiB, [8, 200] (above 48 KiB the launch opts in, as
// for the middle-piece slots). Other values are ignored. The planner reads them too, so the
// plan stays the geometry that runs.
struct SegmentSoftmaxTestCaps {
  std::atomic<int> block{0};
  std::atomic<int> budget_kib{0};
};
inline SegmentSoftmaxTestCaps& segment_softmax_test_caps() {
  static SegmentSoftmaxTestCaps caps;
  return caps;
}
inline int ss_start_block() {
  const int b = segment_softmax_test_caps().block.load();
  return b >= 32 && b <= kSsBlock && b % 32 == 0 ? b : kSsBlock;
}
inline int64_t ss_smem_budget() {
  const int k = segment_softmax_test_caps().budget_kib.load();
  return k >= 8 && k <= 200 ? int64_t(k) * 1024 : kSsSmemBudget;
}

struct SegmentSoftmaxGeometry {
  SsKind kind = SsKind::SoftmaxFwd;
  int vec = 1;           // V: features per lane in the walk (shared-memory vector)
  int cvec = 1;          // elements per global vector load/store (16 bytes), 1 when unaligned
  int lanes = 1;         // G: lanes per row, a power of two <= 32
  int64_t width = 1;     // W: features per slab (the shared-memory row stride)
  int64_t slabs = 1;
  bool contiguous = true;  // one slab: a tile is one contiguous range of memory
  int64_t items = 0;     // T: merge items (rows + segment ends) per tile
  int chunks = 0;        // block / G
  int chunk_rows = 1;    // E (odd)
  int block = kSsBlock;
  int arrays = 1;
  int stat_bytes = 0;
  int64_t segs = 0, positions = 0, tiles = 0, grid = 0;
  // Shared-memory layout (bytes): arrays at k * array_bytes, then ends, stats, keys
  // (the tile part: smem_slots bytes), then the middle-piece slots (slot_bytes,
  // 0 when the kind / V has none).
  int64_t array_bytes = 0, smem_ends = 0, smem_stats = 0, smem_keys = 0, smem_slots = 0, slot_bytes = 0,
          smem_bytes = 0;
  int index_bits = 64;
};

inline int64_t ss_round16(int64_t b) { return (b + 15) / 16 * 16; }

inline void ss_layout(SegmentSoftmaxGeometry& g, int es) {
  g.array_bytes = ss_round16((g.items * g.width + 16 / es) * es);
  g.smem_ends = g.arrays * g.array_bytes;
  g.smem_stats = g.smem_ends + ss_round16((g.items + 1) * 2);
  g.smem_keys = g.smem_stats + ss_round16(int64_t(g.block) * g.vec * g.stat_bytes);
  g.smem_slots = g.smem_keys + int64_t(g.block) * 4;  // a multiple of 16 (block: a multiple of 32)
  g.slot_bytes = ss_smem_slots(g.kind, g.vec) * ss_round16(int64_t(g.block) * g.vec * g.stat_bytes);
  g.smem_bytes = g.smem_slots + g.slot_bytes;
}

// `aligned`: the data pointers are 16-byte aligned (the planner assumes they are;
// the launcher passes the truth). `block`: threads per block (0: ss_start_block(),
// the first the launcher tries; it lowers it when occupancy reports no resident
// block). `max_items`: a smaller tile, for tests that need many tiles on small
// inputs (0: the shared-memory budget decides).
inline SegmentSoftmaxGeometry segment_softmax_geometry(const SegmentSoftmaxProblem& p, bool aligned = true,
                                                       int block = 0, int64_t max_items = 0) {
  SegmentSoftmaxGeometry g;
  if (block <= 0) block = ss_start_block();
  const int64_t budget = ss_smem_budget();
  g.kind = ss_kind(p.op, p.direction);
  const int es = std::max(1, dtype_size(p.dtype));
  const int64_t outer = std::max<int64_t>(p.outer, 0), L = std::max<int64_t>(p.axis_len, 0);
  const int64_t F = std::max<int64_t>(p.inner, 1), S = std::max<int64_t>(p.num_segments, 0);
  g.block = block;
  g.arrays = ss_arrays(g.kind);
  g.stat_bytes = ss_stat_bytes(g.kind, p.dtype);
  // Walk vector: 4 features (2 for float64: 16 bytes) when inner allows; the
  // statistics of V features live in registers, so V stays at 4.
  const int vmax = es == 8 ? 2 : 4;
  g.vec = F % vmax == 0 ? vmax : 1;
  // Slabs of at most 64 bytes per row (two full 32-byte sectors): wide rows would
  // leave a tile few rows (64 heads of float32 in one slab: 150), and the share of
  // rows in segments that cross tile edges (read twice) grows as tiles shrink.
  g.width = std::min<int64_t>(F, std::max(g.vec, kSsSlabBytes / es));
  g.slabs = (F + g.width - 1) / g.width;
  g.contiguous = g.slabs == 1;
  int G = 1;
  while (G < 32 && int64_t(G) * g.vec < g.width) G *= 2;
  g.lanes = G;
  const int c16 = 16 / es;
  g.cvec = !aligned ? 1 : g.contiguous ? c16 : (F % c16 == 0 && g.width % c16 == 0 ? c16 : 1);
  // Tile: the most items whose shared memory fits the budget.
  const int64_t per_item = g.arrays * g.width * es + 2;
  const int64_t fixed = g.arrays * 32 + 16 + ss_round16(int64_t(block) * g.vec * g.stat_bytes) + int64_t(block) * 4 + 16;
  g.items = std::clamp<int64_t>((budget - fixed) / per_item, 1, kSsMaxItems);
  if (max_items > 0) g.items = std::min(g.items, max_items);
  for (;;) {
    ss_layout(g, es);
    if (g.smem_slots <= budget || g.items == 1) break;  // the slots are outside the tile budget
    --g.items;
  }
  g.chunks = block / G;
  g.chunk_rows = int((g.items + g.chunks - 1) / g.chunks) | 1;
  g.segs = outer * (S + 1) + 1;
  g.positions = outer * L;
  const int64_t D = g.segs + g.positions;
  g.tiles = (D + g.items - 1) / g.items;
  g.grid = g.tiles * g.slabs;
  // Largest index any kernel forms (see the header comment).
  int64_t m = outer * L * F + 16;
  m = std::max(m, outer * S * F + 1);
  m = std::max(m, D + 2 * kSsMaxItems + 1);
  m = std::max(m, (g.tiles + 1) * F + 256);
  m = std::max(m, g.grid + 1);
  g.index_bits = (m < kSsIndex32Limit && !segment_softmax_force_index64()) ? 32 : 64;
  return g;
}

// ---- the lane-group path (src/cuda/segment_softmax_lanes.cuh, session 44) ----------------
//
// Segments binned by length on the device; a short segment (L <= max_short_rows) belongs WHOLE
// to one lane group: LPR lanes hold a row (16 bytes a lane), PAR such slots share a segment
// (rows p, p + PAR, ...), at most kSslRowsPerLane rows a lane, all in registers: two passes
// over the registers (max, then the sum of exp against it) and the output, no shared memory,
// no per-row bookkeeping. Longer segments are cut into pieces of piece_rows rows: a block
// computes a piece's statistic, a merge kernel combines each segment's pieces in piece order,
// and a write kernel streams the pieces' rows. No segment waits on another, and the arithmetic
// of a segment does not depend on which warp or block takes it (the atomics that hand out work
// change no bit).
//
// Applies where a row is 16 bytes times a power of two up to 512 (LPR = row bytes / 16 in
// {1, ..., 32}: float32 heads 4, 8, ..., 128; 16-bit types 8, 16, ..., 256), softmax and
// log_softmax (logsumexp keeps the tile path), float32 and the 16-bit types (float64 keeps the
// tile path), and the row and segment counts fit the kernels' 32-bit counters (positions and
// merge segments below 2^31; element offsets are 64-bit throughout: one path, i64). Elsewhere,
// and where the default or the test hook below says so, the tile path.
constexpr int kSslThreads = 256;
constexpr int kSslRowsPerLane = 8;  // registers a lane holds: 8 rows of 16 bytes
constexpr int kSslPieceU = 8;       // rows a thread loads in one batch of a piece

// Whether the plan takes the lane-group path where it applies: kSslByDefault, unless the test /
// benchmark hook says otherwise (-1 never: the tile path; 0 the default; 1 wherever it applies).
// Session 44 wrote the path and its GPU tests, but no GPU ran them in that session (every device
// start was refused), so the default stays the tile path, which is verified on the H200, until
// the lane-group path's tests have passed on one: then kSslByDefault becomes true (and the
// expectation in tests/python/test_cuda_frameworks.py with it). The GPU tests, `segred check`
// and the benchmark set the hook to 1 and reach the path either way.
constexpr bool kSslByDefault = false;
inline std::atomic<int>& segment_softmax_lanes_mode() {
  static std::atomic<int> mode{0};
  return mode;
}

struct SegmentSoftmaxLanes {
  int lpr = 0;                // lanes a row; 0: the path does not apply
  int max_short_rows = 0;     // kSslRowsPerLane * 32 / lpr: longer segments are cut into pieces
  int64_t piece_rows = 0;     // kSslThreads / lpr * kSslPieceU
};

// The path's geometry where it can run the call (lpr 0 where it cannot): the shape rule alone,
// which the launch code reads too; whether the plan takes it is segment_softmax_takes_lanes.
inline SegmentSoftmaxLanes segment_softmax_lanes(const SegmentSoftmaxProblem& p) {
  SegmentSoftmaxLanes g;
  if (p.op == SegmentSoftmaxOp::LogSumExp) return g;
  if (p.dtype != DType::Float32 && p.dtype != DType::Float16 && p.dtype != DType::BFloat16) return g;
  const int64_t outer = std::max<int64_t>(p.outer, 0), L = std::max<int64_t>(p.axis_len, 0);
  const int64_t F = std::max<int64_t>(p.inner, 1), S = std::max<int64_t>(p.num_segments, 0);
  const int64_t row_bytes = F * dtype_size(p.dtype);
  if (row_bytes % 16 != 0 || row_bytes > 512) return g;
  const int64_t lpr = row_bytes / 16;
  if ((lpr & (lpr - 1)) != 0) return g;
  if (outer * L >= kSsIndex32Limit || outer * (S + 1) + 1 >= kSsIndex32Limit) return g;
  g.lpr = int(lpr);
  g.max_short_rows = kSslRowsPerLane * 32 / g.lpr;
  g.piece_rows = int64_t(kSslThreads / g.lpr) * kSslPieceU;
  return g;
}

// The plan takes the lane-group path: it can run the call, and the default or the hook says so.
inline bool segment_softmax_takes_lanes(const SegmentSoftmaxProblem& p) {
  const int mode = segment_softmax_lanes_mode();
  return (mode > 0 || (mode == 0 && kSslByDefault)) && segment_softmax_lanes(p).lpr > 0;
}

// The registered path a call runs (src/core/registry.cpp).
inline std::string_view segment_softmax_lanes_path(SegmentSoftmaxOp op, Direction d) {
  static constexpr std::string_view names[2][2] = {
      {"segment_softmax.fwd.cuda.lanes.i64", "segment_softmax.bwd.cuda.lanes.i64"},
      {"segment_log_softmax.fwd.cuda.lanes.i64", "segment_log_softmax.bwd.cuda.lanes.i64"},
  };
  return names[op == SegmentSoftmaxOp::LogSoftmax ? 1 : 0][d == Direction::Bwd ? 1 : 0];
}

inline std::string_view segment_softmax_cuda_path(SegmentSoftmaxOp op, Direction d, int index_bits) {
  static constexpr std::string_view names[3][2][2] = {
      {{"segment_softmax.fwd.cuda.tiles.i32", "segment_softmax.fwd.cuda.tiles.i64"},
       {"segment_softmax.bwd.cuda.tiles.i32", "segment_softmax.bwd.cuda.tiles.i64"}},
      {{"segment_log_softmax.fwd.cuda.tiles.i32", "segment_log_softmax.fwd.cuda.tiles.i64"},
       {"segment_log_softmax.bwd.cuda.tiles.i32", "segment_log_softmax.bwd.cuda.tiles.i64"}},
      {{"segment_logsumexp.fwd.cuda.tiles.i32", "segment_logsumexp.fwd.cuda.tiles.i64"},
       {"segment_logsumexp.bwd.cuda.tiles.i32", "segment_logsumexp.bwd.cuda.tiles.i64"}},
  };
  return names[int(op)][d == Direction::Bwd ? 1 : 0][index_bits == 64 ? 1 : 0];
}

}  // namespace segred::detail
