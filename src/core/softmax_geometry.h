// Work split of the CUDA softmax kernels: a pure function of the problem, shared
// by the planner (plan_softmax, tested without a GPU) and the CUDA launch code, so
// the plan a test asserts is the geometry that runs.
//
// Three kernels (src/cuda/softmax_impl.cuh), each for fwd/bwd x softmax/log_softmax
// x i32/i64:
//   lastdim_warp   inner == 1, D <= 32*EV: a group of `lanes` lanes (a power of
//                  two <= 32) per row, the row in registers (EV elements per lane,
//                  16-byte vectors along D when D % V == 0), shuffles only.
//   lastdim_block  inner == 1, D > 32*EV: a block of `tx` <= 512 threads per
//                  row (1024 only when a resident row needs more than 16 x 512),
//                  or a thread-block cluster of `cluster` blocks per row (partials
//                  exchanged through distributed shared memory), the row in
//                  registers when D <= cluster*tx*EV (read once: "resident"), else
//                  `chunks` passes: online max/sum, then a second read (from L2)
//                  for the write.
//   spatial        inner > 1: a block of [ty x tx] threads owns a tile of tx*V
//                  consecutive columns (V-element vectors along inner when
//                  inner % V == 0: 16 bytes, 8 for 16-bit types, see
//                  softmax_vec_elems), ty threads (and `cluster` blocks) split D; the
//                  [D x tile] block of the input stays in registers when it fits
//                  (resident), else `chunks` online passes plus a re-read. Loads
//                  run along inner, so a warp reads whole 32-byte sectors.
//   spatial_staged (session 5, SoftmaxGeometry::staged; its own paths since
//                  session 6, "<op>.<dir>.cuda.spatial_staged.i32/i64"): the
//                  block's slice of the column tile in shared memory (cp.async),
//                  128-byte rows where they fit, the column split over a cluster
//                  of up to 16 blocks of 256 threads, <= 64 KB of staged data per
//                  block (3 blocks per SM). Forward: D >= 256; backward: D >= 64
//                  at 128-byte rows only; where g and y do not fit together, y
//                  alone (session 21: SoftmaxGeometry::stage_y, Plan variant
//                  "stage_y"; the two-array form is "stage_gy"). 2- and 4-byte
//                  types, vector loads (softmax_staged_geometry below;
//                  bench/NOTES.md, CUDA softmax, session 5).
// EV = elements per thread per array kept in registers, raw (softmax_elems_per_thread
// below): last dim 128 bytes in flight per thread (fwd: fp32 32, 16-bit 64; bwd:
// two arrays of fp32 16, 16-bit 32), spatial 64 bytes per array (fp32 16, 16-bit
// 32), float64 8; scalar 16-bit loads hold one element per register (half the EV).
// Short rows take a smaller EV (softmax_short_elems_per_thread, v5): the warp
// kernel 16 when D <= 512 (more lanes per row), spatial E = 4 rows when D <= 4.
//
// Worked examples (H200, sm_count 132):
//   [16384, 4096] dim -1: lastdim_block, 1 block per row, grid 16384, resident
//     (one read, one write): fp32 fwd V=4, EV=32, tx=128; fp32 bwd EV=16, tx=256;
//     fp16 fwd V=8, EV=64, tx=64.
//   [2048, 65536] dim -1: lastdim_block, tx=512; cluster 8 (fp32 bwd), 4 (fp16
//     bwd); two blocks per SM. fp32 fwd (session 22): tx=256, cluster 8 (8*256*32
//     = 65536), four blocks per SM. 16-bit fwd (session 22): one block of 512 per
//     row, 2 chunks of 512*64 (was: cluster 2, resident).
//     Streamed rows (chunks > 1) read with L2 eviction priorities (l2_hints).
//   [64, 262144] dim -1: lastdim_block; resident it would be fp32 fwd and fp16
//     bwd tx=512, cluster=16 (16*512*32 = 262144), fp16 fwd 256 x 16 (512 x 8
//     before session 22), fp32 bwd 1024 x 16, in 2-8 waves of rows in lock step;
//     session 7 streams it in two chunks at half that capacity (long_rows_streamed):
//     fp32 fwd 512 x 8 (grid 512), fp32 bwd 512 x 16 (grid 1024), chunks 2; since
//     session 22 the 16-bit fwd 256 x 8 (fwd16_block256; 512 x 4 before) and the
//     16-bit bwd resident, 512 x 16 (long_rows_streamed_bwd16; 512 x 8 streamed
//     before).
//   [64, 256, 56, 56] fp16 dim 1: spatial staged (fwd and bwd), V=4 (8 bytes),
//     tx=16 (64 columns, 128-byte rows), ty=16, krows=16: the [256 x 64] tile of
//     a 256-thread block in 32 KB (fwd) / 64 KB (bwd, g and y), 3136 blocks.
//     Register path (staging off): E=8 rows/thread, ty=32, tx=16, 512 threads.
//   [8192, 8192] fp32 dim 0: fwd staged, tx=8 (32 columns, 128-byte rows),
//     ty=32, cluster=16 (16 ranks x 512 rows x 128 B = 64 KB each): 256 tiles x
//     16 blocks. bwd (128-byte rows of g and y do not fit 16 ranks): staged with
//     y alone (session 21, stage_y: g read twice, the second time from L2), tx=8,
//     ty=32, cluster=16, krows=16 (64 KB of y per rank); before session 21 the
//     register path, V=4, E=4, tx=2 (8 columns), ty=256, cluster=8, resident.
//   [32, 1000, 4096] fp32 dim 1: staged, tx=8, ty=32, fwd cluster 2 (krows 16),
//     bwd cluster 4 (krows 8). 16-bit fwd (session 8): V=8 (16-byte vectors), tx=8,
//     ty=32, cluster 2, krows 16 (64 KB blocks: softmax_staged_vec_elems); [8192,
//     8192] 16-bit fwd likewise V=8, tx=8, ty=32, cluster 16, krows 16.
//   [262144, 128] dim -1: lastdim_warp, EV=16 (short rows) in every 2- and 4-byte
//     dtype and direction: 8 lanes per row, 32 rows per 256-thread block.
//   [8, 4, 2^24] dim 1: spatial, E=4 (D <= 4: fp32 V=4 EV=16, 16-bit bwd V=4 EV=16,
//     16-bit fwd V=8 EV=32 since session 14: softmax_spatial_short_vec_elems),
//     ty=1, tx=256: 1024 columns per block, 131072 blocks (16-bit fwd: 2048, 65536).
//
// Index width: 32-bit only when every index a kernel forms stays below 2^31. The
// kernels form: row/tile counters plus their grid-stride step (< 2 * rows), in-row
// or in-slab offsets rounded up to a whole tile (< numel + one tile), the global
// thread index (< grid * block). All are below 2*numel + 2^20 (a tile is at most
// 16 blocks x 1024 threads x 64 elements = 2^20), so the rule is
// 2*numel + 2^20 < 2^31. Row and column bases are 64-bit in both variants.
// spatial_staged takes the same rule (session 6, from its index arithmetic in
// spatial_staged_kernel): its I values are the tile counter plus its step (< 2 *
// tiles <= 2 * ncols), the column index (< ncols + one tile of <= 64 columns),
// the row index d = rank*krows*ty + tyi + ty*k and the held-row count (< D +
// cluster*ty <= D + 4096: no rank is empty), and the in-slab offset d * inner of
// the cp.async source and the store, formed only for d < D (< D*inner <= numel).
// All are below 2*numel + 2^20, so the register kernel's bound covers it and
// nothing stricter is needed (it would allow up to about numel + 2^12; one
// rule for both spatial kernels keeps the switch at the same element count).
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string_view>

#include "segred/softmax.h"
#include "src/core/softmax_kind.h"

namespace segred::detail {

struct SoftmaxGeometry {
  SoftmaxKernel kernel = SoftmaxKernel::Warp;
  int index_bits = 64;
  int ev = 16;        // elements per thread per array in registers
  int vec = 1;        // elements per vector load
  int lanes = 1;      // warp: lanes per row
  int tx = 32;        // threads along the vector axis (block: threads per block)
  int ty = 1;         // spatial: threads along D
  int cluster = 1;    // blocks per row (block) or per column tile (spatial)
  int64_t chunks = 1;  // passes over a row: 1 = resident (read once)
  int64_t work = 0;    // rows (warp, block) or column tiles (spatial)
  int64_t grid = 0;    // blocks
  // Spatial, staged (session 5): the block's slice of the column tile lives in
  // shared memory (cp.async), not in registers; each thread holds `krows` rows of
  // one V-vector, rows tyi + ty*k of its cluster rank's krows*ty. `ev` keeps the
  // register kernel's value (unused by the staged kernel).
  bool staged = false;
  int krows = 0;
  int64_t stage_bytes = 0;  // staged data per block (1 array fwd, 2 bwd; 1 bwd with stage_y)
  // Staged backward, session 21: only y is staged; g is read from global memory
  // into registers twice, for sum(g*y) and for the write (the second read from L2,
  // kept there by eviction priorities: src/cuda/softmax_impl.cuh). Taken where
  // the 128-byte rows of g and y together do not fit the block budget over 16 ranks
  // but y alone does ([8192, 8192] dim 0: 64 KB of y per rank of 16), in place of
  // the register path's 32-byte rows (H200: 46-53% -> 59-69% of copy, bench/NOTES.md,
  // session 21).
  bool stage_y = false;
  // lastdim_block with streamed rows (chunks > 1, session 22): the first read of
  // the row carries L2 evict_last, the write's re-read and the stores evict_first,
  // so the re-read hits L2 where the rows of one wave hold more bytes than L2
  // ([64, 262144]). Only 8- and 16-byte vector loads carry a policy.
  bool l2_hints = false;
  // The staged kernel's form, for the instantiation: 0 register path, 1 staged
  // (x, or g and y), 2 staged y with g from global memory (stage_y).
  int staged_form() const { return !staged ? 0 : stage_y ? 2 : 1; }
  int threads() const { return tx * ty; }
  // Offset of the staged data in dynamic shared memory: after the reduction
  // scratch, 16-byte aligned.
  int64_t stage_offset(int as) const;
  // Dynamic shared memory in bytes for accumulation type size `as`.
  int64_t smem_bytes(int as) const;
};

// Elements per thread per array held in registers (EV), for kernel kind k, element
// size es, direction and vector width vec; the kernels instantiate the same value
// (src/cuda/softmax_impl.cuh). Registers hold the loaded vectors raw (two 16-bit
// elements per 32-bit register when vectorised; one element per register for
// scalar loads), so EV is set by data registers per thread:
//   last dim, forward: 32 data registers (128 bytes in flight per thread);
//   last dim, backward: 16 per array (g and y: 128 bytes in flight);
//   spatial: 16 per array (its per-column statistics take the rest of 64);
//   float64: 8 elements (16 registers) everywhere; scalar loads (unaligned data or
//   D % V != 0, not a benchmarked case): 16 elements, as in v3 (each element has
//   its own address, and at 32 the scalar variants spilled 200-400 bytes).
// v3 had EV = 16 for every 2- and 4-byte type: a 16-bit forward held 32 bytes per
// thread and ran at about half the bandwidth of its own backward (64 bytes) on the
// same geometry (bench/NOTES.md, "CUDA softmax version 4").
constexpr int softmax_elems_per_thread(SoftmaxKernel k, int es, bool fwd, int vec) {
  if (es >= 8) return 8;
  if (vec == 1) return 16;  // scalar loads: v3's EV (one address per element; more spills)
  const int per_reg = es < 4 ? 4 / es : 1;
  const int regs = (k != SoftmaxKernel::Spatial && fwd) ? 32 : 16;
  return regs * per_reg;
}

// v5: a second, smaller EV per kernel kind for short rows (the kernels instantiate
// exactly these two values, softmax_elems_per_thread ("full") and this one
// ("short"); where both are equal there is one instantiation):
//   lastdim_warp: v3's 16 elements per lane (fp32: four 16-byte vectors, 16-bit:
//     two), taken when 32 lanes x 16 hold the row (D <= 512). v4's full EV put a
//     [262144, 128] row on 4 lanes (fp32 fwd, 16-bit bwd) or 2 (16-bit fwd) instead
//     of 8, and those rows fell from 86/74% to 74/64% of copy (bench/NOTES.md, "CUDA
//     softmax v4"). Rows of 513 .. 32 x full still take the warp kernel at full EV.
//   spatial: E = 4 rows per thread (EV = 4 x vec), taken when D <= 4. At 16-bit
//     the full E is 8 (scalar loads: 16), so a D = 4 column ([8, 4, 2^24]) left half
//     of each thread's row slots empty, and the padding costs the same exps, maxes
//     and converts as data: 16-bit fwd 64 -> 55%, bwd 100 -> 84%.
//   lastdim_block: the full EV only.
constexpr int softmax_short_elems_per_thread(SoftmaxKernel k, int es, bool fwd, int vec) {
  const int full = softmax_elems_per_thread(k, es, fwd, vec);
  if (k == SoftmaxKernel::Warp) return full < 16 ? full : 16;
  if (k == SoftmaxKernel::Spatial) return full < 4 * vec ? full : 4 * vec;
  return full;
}

// True when the kernels instantiate EV `ev` for (k, es, fwd, vec): the launcher's
// kernel pick fails with an error for any other value, and the plan tests assert
// that every geometry's EV passes.
constexpr bool softmax_ev_instantiated(SoftmaxKernel k, int es, bool fwd, int vec, int ev) {
  return ev == softmax_elems_per_thread(k, es, fwd, vec) || ev == softmax_short_elems_per_thread(k, es, fwd, vec);
}

// The EV the geometry takes for a row (column) of D elements: the short EV when it
// holds D (warp: 32 lanes x EV >= D; spatial: E = EV / vec >= D), else the full one.
constexpr int softmax_pick_elems_per_thread(SoftmaxKernel k, int es, bool fwd, int vec, int64_t D) {
  const int sh = softmax_short_elems_per_thread(k, es, fwd, vec);
  const int64_t reach = k == SoftmaxKernel::Warp ? int64_t(32) * sh : k == SoftmaxKernel::Spatial ? sh / vec : 0;
  return D <= reach ? sh : softmax_elems_per_thread(k, es, fwd, vec);
}

// Session 8: the staged kernel's vector width for (element size, direction): the
// 16-bit forward also runs at 16-byte vectors (V = 8: half the cp.async, shared
// loads, global stores and address arithmetic per element of V = 4; the staged
// data has no register cost, only the per-column statistics, 8 slots), everything
// else at the spatial width (softmax_vec_elems). Taken when inner % 8 == 0 and the
// block's shared memory already caps the SM at <= 4 blocks (kSoftmaxStageWideMinSmem:
// the V = 8 kernel takes ~64 registers, so 4 blocks of 256 threads per SM, where
// V = 4 takes 40: 6), see softmax_geometry (bench/notes-s8-cuda-softmax.md).
constexpr int softmax_staged_vec_elems(int es, bool fwd) {
  return (fwd && es == 2) ? 8 : softmax_vec_elems(SoftmaxKernel::Spatial, es);
}
constexpr int64_t kSoftmaxStageWideMinSmem = int64_t(44) << 10;

// Session 14: the register spatial kernel's vector width for short columns (D <= 4,
// the short E of 4 rows per thread). At the spatial width (16-bit V = 4: 8-byte
// vectors) a 16-bit forward thread holds 4 rows x 8 bytes = 32 bytes in flight,
// half of what the fp32 forward (4 x 16 bytes) and the 16-bit backward (two
// arrays) hold on the same geometry; [8, 4, 2^24] ran at 70% of copy there while
// fp32 fwd and both backwards ran at 99-103% (bench/results/h200-softmax.md,
// c395bbf). At V = 8 (16-byte vectors) the 16-bit forward holds 64 bytes, as fp32
// does: 69-72 -> 75-78% of copy on the H200 (session 14; the V = 8 kernel spills 48
// bytes at its 64 registers, and 256 x 3 launch bounds without the spill measured
// slower: bench/NOTES.md). Taken where inner % 8 == 0 and the data is 16-byte
// aligned; the backward keeps the spatial width (already at the floor).
constexpr int softmax_spatial_short_vec_elems(int es, bool fwd) {
  return (fwd && es == 2) ? 8 : softmax_vec_elems(SoftmaxKernel::Spatial, es);
}
constexpr int64_t kSoftmaxSpatialShortRows = 4;  // D <= this: the spatial kernel's short E

constexpr int64_t kSoftmaxIndexSlack = int64_t(1) << 20;
constexpr int64_t kSoftmaxStageFwdMinD = 256;  // staged spatial: columns of at least this many rows (fwd)
constexpr int64_t kSoftmaxStageBwdMinD = 64;   // (bwd)
constexpr int64_t kSoftmaxMaxClusters = int64_t(1) << 20;  // grid cap (grid-stride beyond)

// Test hook: plan every CUDA softmax call with 64-bit indices, so the i64 kernels
// also run on small shapes (under compute-sanitizer, against the reference). The
// boundary tests past 2^31 reach them without it.
inline std::atomic<bool>& softmax_force_index64() {
  static std::atomic<bool> force{false};
  return force;
}

// Test hooks (CudaSoftmaxRace): lower caps on threads per block, blocks per cluster
// and clusters per grid than the device's, so that small shapes (a few thousand
// elements, quick under compute-sanitizer racecheck) reach what otherwise needs
// long rows or many columns: streaming rows and columns, clusters, wide spatial
// tiles of several thread rows, and blocks that loop over several rows or tiles
// (shared memory reused across iterations).
// The same caps as the launcher's viability fallback applies; defaults: no effect.
struct SoftmaxTestCaps {
  std::atomic<int> max_threads{1024};
  std::atomic<int> max_cluster{16};
  std::atomic<int64_t> max_clusters{kSoftmaxMaxClusters};  // grid cap, in clusters
  std::atomic<int> sm_count{1 << 20};  // fewer SMs: wider spatial tiles and fewer split rows
  // Staged spatial kernel: staged bytes per block (default kSoftmaxStageBytes) and
  // the longest column that stays on the register path (default: every column the
  // register path holds in one block at 128-byte rows). Small values bring the
  // staged geometries (clusters, narrow rows, looping) down to small shapes.
  std::atomic<int64_t> stage_bytes{int64_t(64) << 10};
  std::atomic<int> stage_min_d{0};  // > 0: stage every column with D >= this (both directions)
  std::atomic<int> stage_min_row_fwd{32};   // narrowest staged row segment, bytes (fwd)
  std::atomic<int> stage_min_row_bwd{128};  // (bwd)
  // Session 8: the 16-bit staged forward's vector width: 0 = the rule
  // (softmax_staged_vec_elems), 4 or 8 = that width (8 only where inner % 8 == 0).
  std::atomic<int> stage_vec16_fwd{0};
  // Session 14: the 16-bit register spatial forward's vector width on short columns
  // (D <= 4): 0 = the rule (softmax_spatial_short_vec_elems), 4 or 8 = that width
  // (8 only where inner % 8 == 0).
  std::atomic<int> spatial_vec16_short{0};
  // Session 14: the CUDA launcher caches launch viability per (device, kernel,
  // threads, shared memory, cluster); false queries the occupancy API on every call
  // (the benchmark's A/B of the host time).
  std::atomic<bool> launch_cache{true};
  // Session 21: the staged backward with y alone in shared memory
  // (SoftmaxGeometry::stage_y): 0 = the rule (where g and y do not fit together),
  // 1 = wherever y alone fits (the test hook that brings it to small shapes, and
  // the benchmark's A/B), 2 = never (the register path where g and y do not fit).
  std::atomic<int> stage_y_bwd{0};
  // Session 7: few long last-dim rows streamed in two chunks (softmax_geometry,
  // lastdim_block; false: the resident split they had before).
  std::atomic<bool> long_rows_streamed{true};
  // Session 22: streamed last-dim rows with L2 eviction priorities
  // (SoftmaxGeometry::l2_hints; false: plain loads and stores, the benchmark's A/B).
  std::atomic<bool> stream_l2_hints{true};
  // Session 22: threads per block of the float32 forward's resident multi-block
  // rows (lastdim_block; 512: the rule before session 22).
  std::atomic<int> block_threads_fwd32{256};
  // Session 22: the float16 forward's exps in the FFMA form (register kernels:
  // fma16_sum_base in src/cuda/softmax_impl.cuh; bfloat16 never; false: the form
  // before, the benchmark's A/B and the tests' comparison of the two).
  std::atomic<bool> fwd16_fma{true};
  // Session 22: the 16-bit forward's rows of two blocks of 512 streamed through one
  // block (lastdim_block; false: the resident cluster of 2, the rule before).
  std::atomic<bool> fwd16_rows_one_block{true};
  // Session 22: the 16-bit forward's rows of more than two blocks of 512 in blocks
  // of 256 (false: 512, the rule before).
  std::atomic<bool> fwd16_block256{true};
  // Session 22: session 7's streaming of few long rows applied to the 16-bit
  // backward too (true: the rule before; false since session 22: resident).
  std::atomic<bool> long_rows_streamed_bwd16{false};
};
inline SoftmaxTestCaps& softmax_test_caps() {
  static SoftmaxTestCaps caps;
  return caps;
}

// SoftmaxGeometry::l2_hints for a lastdim_block geometry: streamed rows whose
// loads are 8- or 16-byte vectors, unless the test caps turn it off.
inline bool softmax_stream_l2_hints(const SoftmaxGeometry& g, int es) {
  const int vb = g.vec * es;
  return g.kernel == SoftmaxKernel::Block && g.chunks > 1 && (vb == 8 || vb == 16) &&
         softmax_test_caps().stream_l2_hints.load();
}

inline int64_t pow2_ceil(int64_t v) {
  int64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline int64_t SoftmaxGeometry::stage_offset(int as) const {
  if (kernel != SoftmaxKernel::Spatial) return 0;
  const int64_t cols = int64_t(tx) * vec;
  const int64_t groups = tx < 32 ? std::max<int64_t>(1, int64_t(tx) * ty / 32) : ty;
  if (groups == 1 && cluster == 1) return 0;  // shuffles only
  return (int64_t(as) * 2 * (groups * cols + cols + (cluster > 1 ? cols : 0)) + 15) / 16 * 16;
}

inline int64_t SoftmaxGeometry::smem_bytes(int as) const {
  if (kernel == SoftmaxKernel::Warp) return 0;
  if (kernel == SoftmaxKernel::Block) return int64_t(as) * 2 * (32 + 2);
  return stage_offset(as) + (staged ? stage_bytes : 0);
}

// Staged spatial geometry (session 5) for a column of D elements of es bytes at
// vector width vec, or staged == false when none fits. Row segments of 128 bytes
// (a warp's load covers whole 128-byte lines; the register path narrows long
// columns to 32-byte segments, one L2 request per sector: bench/NOTES.md, CUDA softmax, session 5),
// else 64, else 32; 256 threads (tx = columns / vec, ty = 256 / tx; session 14
// measured 512-thread blocks slower on every staged row: bench/NOTES.md); the column
// split over the fewest cluster ranks (up to max_cluster, 16 included: [8192,
// 8192] fp32 fwd at 128-byte rows x 16 ranks 66% of copy, at 64-byte rows x 8
// 61%) whose slice fits `budget` bytes per block (fwd: x; bwd: g and y). Of those
// (one per row width, >= min_row), the widest that also gives 2 x sms blocks is
// taken, else the widest.
// stage_y (backward only): stage y alone (SoftmaxGeometry::stage_y).
inline SoftmaxGeometry softmax_staged_geometry(int64_t D, int64_t ncols, int es, int vec, bool fwd, int max_threads,
                                               int max_cluster, int64_t sms, int64_t budget, int64_t max_clusters,
                                               int min_row = 32, bool stage_y = false) {
  SoftmaxGeometry best;
  stage_y = stage_y && !fwd;
  const int na = (fwd || stage_y) ? 1 : 2;
  const int threads = std::min(256, max_threads);
  bool have = false;
  for (int w : {128, 64, 32}) {
    if (w < vec * es || w < min_row) continue;
    const int cols = w / es;
    const int tx = cols / vec;
    if (tx > threads || tx > 32) continue;
    const int ty = threads / tx;
    for (int c = 1; c <= max_cluster; c *= 2) {
      const int64_t k = ceil_div(ceil_div(D, c), ty);
      const int64_t bytes = int64_t(na) * k * ty * w;
      if (bytes > budget) continue;
      SoftmaxGeometry g;
      g.kernel = SoftmaxKernel::Spatial;
      g.staged = true;
      g.stage_y = stage_y;
      g.vec = vec;
      g.tx = tx;
      g.ty = ty;
      g.cluster = c;
      g.krows = int(k);
      g.stage_bytes = bytes;
      g.chunks = 1;
      g.work = ceil_div(ncols, cols);
      g.grid = std::min(g.work, max_clusters) * c;
      if (!have || (best.grid < 2 * sms && g.grid >= 2 * sms)) {
        best = g;
        have = true;
      }
      break;  // the fewest ranks at this width
    }
    if (have && best.grid >= 2 * sms) break;
  }
  return best;
}

// `aligned`: every data pointer is 16-byte aligned (the launcher passes false
// otherwise and the vector width drops to 1).
inline SoftmaxGeometry softmax_geometry(const SoftmaxProblem& p, bool aligned = true) {
  SoftmaxGeometry g;
  const int es = std::max(1, dtype_size(p.dtype));
  const int64_t D = std::max<int64_t>(1, p.dim_size);
  const int64_t numel = p.outer * p.dim_size * p.inner;
  const int64_t sms = std::max(1, std::min(p.sm_count, softmax_test_caps().sm_count.load()));
  const SoftmaxTestCaps& caps = softmax_test_caps();
  int max_threads = 32;  // a power of two in [32, 1024]
  while (max_threads * 2 <= std::min({1024, p.max_threads, caps.max_threads.load()})) max_threads *= 2;
  const int max_cluster = std::clamp(std::min(p.max_cluster, caps.max_cluster.load()), 1, 16);
  const int64_t max_clusters = std::clamp<int64_t>(caps.max_clusters.load(), 1, kSoftmaxMaxClusters);
  const bool fwd = p.direction == Direction::Fwd;
  const int v16 = aligned ? softmax_vec_elems(SoftmaxKernel::Warp, es) : 1;  // last dim: 16 bytes
  g.index_bits = (2 * numel + kSoftmaxIndexSlack < (int64_t(1) << 31)) && !softmax_force_index64() ? 32 : 64;
  if (p.inner == 1) {
    g.vec = (D % v16 == 0) ? v16 : 1;
    // The warp kernel takes rows up to 32 lanes x its full EV (= the block kernel's).
    if (D <= 32 * int64_t(softmax_elems_per_thread(SoftmaxKernel::Warp, es, fwd, g.vec))) {
      g.kernel = SoftmaxKernel::Warp;
      g.ev = softmax_pick_elems_per_thread(SoftmaxKernel::Warp, es, fwd, g.vec, D);
      g.lanes = int(std::clamp<int64_t>(pow2_ceil(ceil_div(D, g.ev)), 1, 32));
      g.tx = std::min(256, max_threads);
      g.ty = 1;
      g.work = p.outer;
      const int64_t rows_per_block = g.tx / g.lanes;
      g.grid = std::clamp<int64_t>(ceil_div(g.work, rows_per_block), 1, sms * 32);
      return g;
    }
    g.kernel = SoftmaxKernel::Block;
    g.ev = softmax_elems_per_thread(SoftmaxKernel::Block, es, fwd, g.vec);
    const int64_t per = g.ev;  // elements per thread
    g.work = p.outer;
    const int64_t need = ceil_div(D, per);  // threads that hold the whole row
    // Blocks of at most 512 threads: at 64 registers two share an SM, so one
    // block's loads overlap the other's reduction (a 1024-thread block fills the
    // register file alone: v2's [2048, 65536] forward at 26-44% of copy). 1024
    // only when a resident row needs more than 16 blocks of 512.
    int bt = std::min(512, max_threads);
    // Session 22: the 16-bit forward's rows of more than two blocks of 512 run in
    // blocks of 256 (twice the cluster ranks; also in session 7's streamed form
    // below), where 256 x 16 ranks still hold the row. H200, sweep s22rows (rows x
    // lengths, back to back): 0.83-0.96x the time at 64-256 rows of 131072 and
    // 262144, [1024, 131072] 0.95-0.97x; rows of one or two blocks of 512 lost at
    // 256 ([4096, 32768]: 1.13-1.15x) and keep 512 (bench/NOTES.md, session 22).
    {
      const int b16 = std::min(256, max_threads);
      if (fwd && es == 2 && b16 < bt && need > 2 * int64_t(bt) &&
          pow2_ceil(ceil_div(need, b16)) <= max_cluster && caps.fwd16_block256.load())
        bt = b16;
    }
    const int64_t c_bt = pow2_ceil(ceil_div(need, bt));
    const int64_t c_max = pow2_ceil(ceil_div(need, max_threads));
    if (need <= bt) {
      g.tx = int(std::min<int64_t>(std::max<int64_t>(64, pow2_ceil(need)), bt));
      g.cluster = 1;
    } else if (c_bt <= max_cluster) {
      g.tx = bt;
      g.cluster = int(c_bt);
      // Session 22: the float32 forward's resident rows of more than one block
      // run in blocks of 256 (twice the cluster ranks, the same 128 bytes per
      // thread: four blocks per SM instead of two). H200, [2048, 65536]: 73.7 ->
      // 83.8% of copy. The 16-bit forwards (twice the elements, so twice the exps,
      // per byte) and the backwards lost at 256 and keep 512 (bench/NOTES.md,
      // session 22).
      const int b32 = std::min(caps.block_threads_fwd32.load(), bt);
      const int64_t c32 = pow2_ceil(ceil_div(need, b32));
      if (fwd && es == 4 && b32 >= 128 && b32 < bt && c32 <= max_cluster) {
        g.tx = b32;
        g.cluster = int(c32);
      }
      // Session 22: the 16-bit forward's rows of two blocks of 512 (D <= 2 x 512 x
      // EV) stream in two chunks through one block instead (no cluster; the second
      // read from L2 under l2_hints). H200, [2048, 65536]: cluster 2 72.9-77.4% of
      // copy, one block 81.9-82.0%. Longer rows lost in one block (4 chunks, [1024,
      // 131072]: 72 -> 66%), and so did the backwards and float32 (bench/NOTES.md,
      // session 22). Few rows get their cluster back below (fill the GPU).
      if (fwd && es == 2 && c_bt == 2 && caps.fwd16_rows_one_block.load()) {
        g.cluster = 1;
        g.chunks = ceil_div(D, int64_t(g.tx) * per);
      }
    } else if (c_max <= max_cluster) {
      g.tx = max_threads;
      g.cluster = int(c_max);
    } else {
      g.tx = bt;
      g.cluster = std::min(8, max_cluster);
      g.chunks = ceil_div(D, int64_t(g.cluster) * g.tx * per);
    }
    // Session 7 (issue #5): few long rows in a few waves. A resident row of at
    // least 8 blocks of bt threads, with more than one and at most 8 waves of rows
    // (a wave: 1024 threads per SM, the block kernel's 64 registers), runs in lock
    // step: every cluster of a wave loads, then reduces with DRAM idle, then
    // writes, and each wave starts with an empty memory pipeline ([64, 262144] at
    // 40-54% of copy, bench/NOTES.md). Half the resident capacity per row instead:
    // blocks of bt, the fewest cluster ranks that hold half the row, chunks = 2 (the
    // online pass has no barrier between chunks; the write re-reads the row from
    // L2: about 2 x 17 MB in flight on 132 SMs): half the waves, and a 1024-thread
    // resident row (fp32 bwd) runs as two blocks of 512 per SM. 2- and 4-byte types
    // (bench/notes-s7-cuda-softmax-longrows.md).
    // Session 22: not the 16-bit backward (resident measured 0.91-1.01x the time of
    // streamed at 32-256 rows of 131072 and 262144, sweep s22rows).
    const bool stream_kind = es <= 4 && (fwd || es != 2 || caps.long_rows_streamed_bwd16.load());
    if (g.chunks == 1 && stream_kind && caps.long_rows_streamed.load()) {
      const int64_t row_threads = int64_t(g.cluster) * g.tx;
      const int64_t all = g.work * row_threads, wave = int64_t(1024) * sms;
      const int64_t c = pow2_ceil(ceil_div(ceil_div(need, 2), bt));
      if (row_threads >= 8 * int64_t(bt) && all > wave && all <= 8 * wave && c <= max_cluster) {
        g.tx = bt;
        g.cluster = int(c);
        g.chunks = ceil_div(D, int64_t(g.cluster) * g.tx * per);
        g.grid = std::min(g.work, max_clusters) * g.cluster;
        g.l2_hints = softmax_stream_l2_hints(g, es);
        return g;
      }
    }
    // Few long rows: spread a row over more blocks (same capacity) until the
    // rows fill the GPU.
    while (g.chunks == 1 && g.work * g.cluster < sms && g.cluster < max_cluster && g.tx > 128) {
      g.cluster *= 2;
      g.tx /= 2;
    }
    while (g.chunks > 1 && g.work * g.cluster < 2 * sms && g.cluster < max_cluster) {
      g.cluster *= 2;
      g.chunks = ceil_div(D, int64_t(g.cluster) * g.tx * per);
    }
    g.grid = std::min(g.work, max_clusters) * g.cluster;
    g.l2_hints = softmax_stream_l2_hints(g, es);
    return g;
  }
  // spatial (at most 512 threads: its per-column statistics of V columns need
  // more than the 64 registers a 1024-thread block allows)
  g.kernel = SoftmaxKernel::Spatial;
  max_threads = std::min(max_threads, 512);
  const int vs = aligned ? softmax_vec_elems(SoftmaxKernel::Spatial, es) : 1;
  g.vec = (p.inner % vs == 0) ? vs : 1;
  {  // session 14: short 16-bit forward columns at 16-byte vectors
    const int vw = softmax_spatial_short_vec_elems(es, fwd);
    const int force = caps.spatial_vec16_short.load();
    if (aligned && vw != vs && g.vec == vs && D <= kSoftmaxSpatialShortRows && p.inner % vw == 0 && force != vs)
      g.vec = vw;
  }
  g.ev = softmax_pick_elems_per_thread(SoftmaxKernel::Spatial, es, fwd, g.vec, D);
  const int64_t E = g.ev / g.vec;  // rows per thread: 4 when D <= 4, else the full E
  const int64_t ncols = p.outer * p.inner;
  const int seg = g.vec * es;                       // bytes per thread per row
  // (both at most max_threads: the launcher's fallback caps go down to 32 threads,
  // where a 16-bit scalar tile's preferred 64 divided max_threads / t down to 0)
  const int txmin = std::min(max_threads, std::max(1, 32 / seg));      // a warp row segment >= 32 B
  const int txpref = std::min(max_threads, std::max(txmin, 128 / seg));  // preferred: 128 B
  const int64_t ty_need = pow2_ceil(ceil_div(D, E));
  int tx = txpref;
  int64_t ty = ty_need;
  int cluster = 1;
  int64_t chunks = 1;
  if (ty * tx > max_threads) {
    // D does not fit one block at the preferred width: narrower tiles first (down
    // to 32-byte row segments) while that keeps one block per tile, else the
    // widest tile whose column fits a cluster of <= 8 blocks, else stream.
    auto clusters = [&](int t) { return pow2_ceil(ceil_div(D, int64_t(max_threads / t) * E)); };
    int pick = 0;
    for (int t = txpref; t >= txmin && !pick; t /= 2)
      if (int64_t(max_threads / t) >= ty_need) pick = t;
    for (int t = txpref; t >= txmin && !pick; t /= 2)
      if (clusters(t) <= 8) pick = t;
    if (!pick) pick = txmin;
    tx = pick;
    if (ty_need * tx <= max_threads) {
      ty = ty_need;
    } else {
      ty = max_threads / tx;
      const int64_t c = clusters(tx);
      if (c <= max_cluster) {
        cluster = int(c);
      } else {
        cluster = std::min(8, max_cluster);
        chunks = ceil_div(D, int64_t(cluster) * ty * E);
      }
    }
  }
  // The staged kernel (vector loads, 2- and 4-byte types), if its slice fits:
  // forward, columns of D >= kSoftmaxStageFwdMinD = 256 (the register forward
  // holds 64 bytes per thread and runs at ~65% of copy even at 128-byte rows:
  // [64, 256, 56, 56] fp32 65 -> 89% staged; below 256 rows the staged forward's
  // per-tile (max, sum) merge is not amortised: D = 64 78 -> 46%); backward,
  // D >= kSoftmaxStageBwdMinD = 64 and only at 128-byte staged rows (it stages two
  // arrays; at 32- and 64-byte rows it measured below the register path: [8192,
  // 8192] fp16 34 vs 46%). Every column the register path narrows below 128-byte
  // rows (or clusters, or streams) has D > 256. H200, bench/NOTES.md, CUDA softmax, session 5.
  const int stage_min_d = caps.stage_min_d.load();
  const bool stage = D >= (stage_min_d > 0 ? int64_t(stage_min_d) : fwd ? kSoftmaxStageFwdMinD : kSoftmaxStageBwdMinD);
  if (g.vec == vs && vs > 1 && es <= 4 && stage) {
    auto staged_at = [&](int vec, bool stage_y = false) {
      return softmax_staged_geometry(D, ncols, es, vec, fwd, max_threads, max_cluster, sms, caps.stage_bytes.load(),
                                     max_clusters, fwd ? caps.stage_min_row_fwd.load() : caps.stage_min_row_bwd.load(),
                                     stage_y);
    };
    SoftmaxGeometry s = staged_at(g.vec);
    // Session 21: a backward whose g and y do not fit together stages y alone
    // (SoftmaxGeometry::stage_y), at the same 128-byte rows; the test cap takes
    // that form wherever it fits, or never.
    const int sy = caps.stage_y_bwd.load();
    if (!fwd && sy != 2 && (!s.staged || sy == 1)) {
      const SoftmaxGeometry y = staged_at(g.vec, true);
      if (y.staged) s = y;
    }
    // Session 8: the 16-bit forward at 16-byte vectors where inner allows them and
    // the block's shared memory leaves <= 4 blocks per SM anyway (or the test cap).
    const int vw = softmax_staged_vec_elems(es, fwd);
    const int force = caps.stage_vec16_fwd.load();
    if (vw != g.vec && p.inner % vw == 0 && force != g.vec) {
      const SoftmaxGeometry w = staged_at(vw);
      if (w.staged && (force == vw || !s.staged || w.smem_bytes(4) > kSoftmaxStageWideMinSmem)) s = w;
    }
    if (s.staged) {
      s.index_bits = g.index_bits;
      s.ev = g.ev;
      return s;
    }
  }
  // Wider tiles while the block is small and the columns last.
  const int64_t cols_cap = pow2_ceil(ceil_div(ncols, g.vec));
  while (tx * ty < 256 && tx < cols_cap && tx * ty * 2 <= max_threads) tx *= 2;
  while (tx * ty < 32) tx *= 2;  // at least one full warp
  // Enough blocks to fill the GPU.
  auto tiles = [&] { return ceil_div(ncols, int64_t(tx) * g.vec); };
  while (tiles() * cluster < 2 * sms && tx > txmin && (tx / 2) * ty >= 32) tx /= 2;
  g.tx = tx;
  g.ty = int(ty);
  g.cluster = cluster;
  g.chunks = chunks;
  g.work = tiles();
  g.grid = std::min(g.work, max_clusters) * g.cluster;
  return g;
}

inline std::string_view softmax_cuda_path(const SoftmaxProblem& p, const SoftmaxGeometry& g) {
  // [log][bwd][kernel: lastdim_warp, lastdim_block, spatial, spatial_staged][i64]
  static constexpr std::string_view names[2][2][4][2] = {
      {{{"softmax.fwd.cuda.lastdim_warp.i32", "softmax.fwd.cuda.lastdim_warp.i64"},
        {"softmax.fwd.cuda.lastdim_block.i32", "softmax.fwd.cuda.lastdim_block.i64"},
        {"softmax.fwd.cuda.spatial.i32", "softmax.fwd.cuda.spatial.i64"},
        {"softmax.fwd.cuda.spatial_staged.i32", "softmax.fwd.cuda.spatial_staged.i64"}},
       {{"softmax.bwd.cuda.lastdim_warp.i32", "softmax.bwd.cuda.lastdim_warp.i64"},
        {"softmax.bwd.cuda.lastdim_block.i32", "softmax.bwd.cuda.lastdim_block.i64"},
        {"softmax.bwd.cuda.spatial.i32", "softmax.bwd.cuda.spatial.i64"},
        {"softmax.bwd.cuda.spatial_staged.i32", "softmax.bwd.cuda.spatial_staged.i64"}}},
      {{{"log_softmax.fwd.cuda.lastdim_warp.i32", "log_softmax.fwd.cuda.lastdim_warp.i64"},
        {"log_softmax.fwd.cuda.lastdim_block.i32", "log_softmax.fwd.cuda.lastdim_block.i64"},
        {"log_softmax.fwd.cuda.spatial.i32", "log_softmax.fwd.cuda.spatial.i64"},
        {"log_softmax.fwd.cuda.spatial_staged.i32", "log_softmax.fwd.cuda.spatial_staged.i64"}},
       {{"log_softmax.bwd.cuda.lastdim_warp.i32", "log_softmax.bwd.cuda.lastdim_warp.i64"},
        {"log_softmax.bwd.cuda.lastdim_block.i32", "log_softmax.bwd.cuda.lastdim_block.i64"},
        {"log_softmax.bwd.cuda.spatial.i32", "log_softmax.bwd.cuda.spatial.i64"},
        {"log_softmax.bwd.cuda.spatial_staged.i32", "log_softmax.bwd.cuda.spatial_staged.i64"}}}};
  // The staged kernel (spatial with SoftmaxGeometry::staged) is its own path, so a
  // trace or a test that reaches one spatial kernel says nothing about the other.
  const int k = g.staged ? 3 : int(g.kernel);
  return names[p.log ? 1 : 0][p.direction == Direction::Bwd ? 1 : 0][k][g.index_bits == 64 ? 1 : 0];
}

// The choice inside a path that the Plan and the trace name (Plan::variant): the
// staged backward's two forms, "stage_gy" (g and y in shared memory) and "stage_y"
// (y alone; g read twice, SoftmaxGeometry::stage_y); empty elsewhere.
inline std::string_view softmax_cuda_variant(const SoftmaxProblem& p, const SoftmaxGeometry& g) {
  if (!g.staged || p.direction != Direction::Bwd) return {};
  return g.stage_y ? "stage_y" : "stage_gy";
}

}  // namespace segred::detail
