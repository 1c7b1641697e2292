// Prototype (session 43, issue #8): the ragged softmax with segments assigned WHOLE to
// lane groups, binned by length, against the library's tile kernel on the same data.
// Not a library path: it answers whether the lead of bench/NOTES.md ("Session 42: for
// the next session") is worth the rewrite, before any of it goes into src/.
//
// Why: the tile kernel walks rows in lock-step across a warp and pays, per row, the
// bookkeeping of the pieces that end there (~75% of a warp's row steps hit a piece end on
// GAT degrees); Nsight Compute counted ~2.7 warp instructions per element (session 37).
// Here a segment of L rows belongs to one lane group (LPR lanes hold one row: 8 heads of
// float32 = 2 lanes of 16 bytes, of bfloat16 = 1 lane), which keeps its rows in registers
// and runs two passes over them (max, then the sum of exp with that max) and the output:
// ~8 thread instructions an element, no shuffles, no shared memory. A warp runs as long as
// its longest segment, so segments are binned by length first (one kernel over the
// offsets, warp-aggregated atomics), and a warp's 32 / LPR segments come from one bin:
//   list 0: L <= RR/4, 1: <= RR/2, 2: <= RR   (rows in registers; RR 16 fwd, 8 bwd)
//   list 3: RR < L < 1024                     (a warp a segment: online statistic,
//                                              shuffle merge, second read for the output)
//   list 4: L >= 1024                         (a block a segment, taken by an atomic
//                                              cursor first, so the longest start at once)
// A segment's arithmetic does not depend on which warp takes it, so the atomics' order
// changes no bit. Semantics: the statistic, merge and epilogue are ops::ss::Pol's (the
// tile kernel's), so special values follow SEMANTICS.md; only rounding differs from the
// tile kernel (two-pass max / sum here, the online form there).
//
// Variants (session 43, v3; prepared, not yet run when written): launch bounds of 3 and 4
// blocks an SM; "split": the block list cut into pieces of 1024 (float32) / 2048 (bfloat16)
// rows, each piece's statistic computed by a block in the lanes kernel (balanced, one batch of
// loads a piece) and merged in piece order by a second kernel that writes the pieces' rows;
// and timing probes of one part of the work at a time (the block list, each short class).
//
// Scope: heads = 8 (rows of 16 or 32 bytes), softmax forward and backward, float32 and
// bfloat16, 1-D offsets, 32-bit row counts per segment. Validated against the CPU backend
// like bench/cuda_segment_softmax_bench.cu, then timed (batches of 5, median) with and
// without the binning kernel, beside segment_softmax_out on the same tensors.
//
// Usage: cuda_ragged_lanes_proto [--only SUBSTR[;SUBSTR...]] [--dtype float32|bfloat16] [--reps N]
// Prints:
//   bins|<case>|<dtype>|<segments per list>|<rows per list>|<grids>
//   check|<case>|<dtype>|<dir>|<variant>|<max abs err vs CPU>|<tolerance>|ok or MISMATCH
//   case|<case>|<dtype>|<dir>|<variant>|<ms>|<% of copy>|<copy GB/s>
//   probe|<case>|<dtype>|<dir>|<part> alone|rows <n>|<ms>|<GB/s of the part's data bytes>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "bench/cuda_bench_common.cuh"
#include "bench/ragged_bench_common.h"
#include "segred/segred.h"
#include "src/ops/segment_softmax_tiles.h"

#include <cub/block/block_scan.cuh>

using namespace segred;
using detail::SsKind;

namespace {

// Lists: short classes c = 0 .. kShort-1 (L <= 4 << c rows), each run by lane groups of
// LPR x PAR lanes (PAR lanes of a slot hold rows p, p + PAR, ...: at most kRowsPerLane rows a
// lane, in registers), and the block list (kShort): L above 8 x 32 / LPR rows (128 float32,
// 256 bfloat16), where a group would exceed a warp.
constexpr int kShort = 7;
constexpr int kLists = kShort + 1;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerLane = 8;
constexpr int kChunk = 4;  // short items a warp takes per atomic

struct Bins {
  int64_t* start;  // kLists x S: a list's segments' first rows
  int* len;        // kLists x S: their lengths
  unsigned* ctl;   // [0, kLists): counts; [kLists]: the block list's cursor; [kLists + 1]: the short items' cursor
  int64_t S;
  // Timing probes only (outputs incomplete): bit 0 runs the block list, bit 1 + c short class c.
  unsigned parts = ~0u;
  // The split variant: the block list cut into pieces of kThreads / LPR x kPieceU rows, whose
  // statistics the lanes kernel computes (piece_base: the first piece of each long segment,
  // ctl[kLists + 2] their number) and piece_write_kernel merges before writing the rows.
  unsigned* piece_base = nullptr;  // S + 1
  void* partial = nullptr;         // Stat[pieces][LPR][NV]
};
constexpr int kPieceU = 8;  // rows a thread a piece: one pass of a piece is one batch of loads

__device__ int list_of(int64_t L, int max_short_rows) {
  if (L <= 0) return -1;  // an empty segment has no rows to write
  if (L > max_short_rows) return kShort;
  int c = 0;
  while ((int64_t(4) << c) < L) ++c;
  return c;
}

// One thread a segment; whole warps (lanes past S take no list), so the match and
// the shuffle see all 32 lanes. Places are counted per warp (match), then per block
// (shared-memory atomics), then one global atomic per block and list.
__global__ void __launch_bounds__(256) bin_kernel(const int64_t* off, int64_t S, int max_short_rows, Bins b) {
  __shared__ unsigned block_n[kLists], block_base[kLists];
  if (threadIdx.x < kLists) block_n[threadIdx.x] = 0;
  __syncthreads();
  const int64_t s = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t st = 0, L = 0;
  if (s < S) {
    st = off[s];
    L = off[s + 1] - st;
  }
  const int list = s < S ? list_of(L, max_short_rows) : -1;
  const unsigned peers = __match_any_sync(0xffffffffu, list);
  const int lane = int(threadIdx.x & 31), leader = __ffs(int(peers)) - 1;
  unsigned base = 0;
  if (lane == leader && list >= 0) base = atomicAdd(&block_n[list], unsigned(__popc(int(peers))));
  base = __shfl_sync(0xffffffffu, base, leader);
  __syncthreads();
  if (threadIdx.x < kLists) block_base[threadIdx.x] = atomicAdd(&b.ctl[threadIdx.x], block_n[threadIdx.x]);
  __syncthreads();
  if (list >= 0) {
    const unsigned at = block_base[list] + base + unsigned(__popc(int(peers & ((1u << lane) - 1u))));
    b.start[list * b.S + at] = st;
    b.len[list * b.S + at] = int(L);
  }
}

// A lane's 16 bytes of a row as NV floats, and back.
template <class T> struct Lane;
template <> struct Lane<float> {
  static constexpr int NV = 4;
  static __device__ __forceinline__ void unpack(const uint4& u, float* f) {
    f[0] = __uint_as_float(u.x), f[1] = __uint_as_float(u.y), f[2] = __uint_as_float(u.z),
    f[3] = __uint_as_float(u.w);
  }
  static __device__ __forceinline__ uint4 pack(const float* f) {
    return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]), __float_as_uint(f[3]));
  }
};
template <> struct Lane<__nv_bfloat16> {
  static constexpr int NV = 8;
  static __device__ __forceinline__ void unpack(const uint4& u, float* f) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) f[2 * k] = __uint_as_float(w[k] << 16), f[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
  }
  static __device__ __forceinline__ unsigned bits(float v) {
    return unsigned(__bfloat16_as_ushort(__float2bfloat16_rn(v)));
  }
  static __device__ __forceinline__ uint4 pack(const float* f) {
    return make_uint4(bits(f[0]) | bits(f[1]) << 16, bits(f[2]) | bits(f[3]) << 16, bits(f[4]) | bits(f[5]) << 16,
                      bits(f[6]) | bits(f[7]) << 16);
  }
};

template <SsKind K, class T>
struct Ctx {
  using P = ops::ss::Pol<K, float>;
  using Stat = typename P::Stat;
  static constexpr int LPR = 8 * int(sizeof(T)) / 16;  // lanes a row (8 heads)
  static constexpr int NV = Lane<T>::NV;
  static constexpr int kMaxShortRows = kRowsPerLane * 32 / LPR;  // longer: the block list
  const uint4* in0;  // x (forward) or g
  const uint4* in1;  // y (backward)
  uint4* out;
};

// Class c's lane group: PAR lanes a slot, RR rows a lane.
template <class T> constexpr int par_of(int c) {
  return (4 << c) > kRowsPerLane ? (4 << c) / kRowsPerLane : 1;
}
template <class T> constexpr int group_lanes(int c) { return Ctx<SsKind::SoftmaxFwd, T>::LPR * par_of<T>(c); }
template <class T> constexpr bool class_exists(int c) { return group_lanes<T>(c) <= 32; }

// One short segment (L rows from row st; L == 0: an idle group) on a lane group of LPR x PAR
// lanes: lane (p, slot) loads rows p, p + PAR, ... (RR at most, the loops stop at the
// warp's most), two passes over the registers (m = max, NaN never wins; then s = the sum
// of 1 where x == m, exp(x - m) elsewhere, nothing for -inf: Pol::add's statistic), each
// merged over the PAR lanes by a butterfly (commutative steps: every lane ends with the same
// bits), then the rows out. Backward: d = sum g y, the same way.
template <SsKind K, class T, int RR, int PAR>
__device__ __forceinline__ void short_segment(const Ctx<K, T>& c, int64_t st, int L) {
  using C = Ctx<K, T>;
  using P = typename C::P;
  constexpr int LPR = C::LPR, NV = C::NV, GL = LPR * PAR;
  const int lane = int(threadIdx.x & 31), slot = lane % LPR, p = (lane / LPR) % PAR;
  const int mine = L > p ? (L - p + PAR - 1) / PAR : 0;  // rows of this lane
  const int most = int(__reduce_max_sync(0xffffffffu, unsigned(mine)));
  const int64_t v = (st + p) * LPR + slot;  // 16-byte vector of the lane's first row
  uint4 a[RR], b[P::kFwd ? 1 : RR];
#pragma unroll
  for (int i = 0; i < RR; ++i) {
    if (i >= most) break;
    if (i < mine) {
      a[i] = __ldcs(c.in0 + v + int64_t(i) * PAR * LPR);
      if constexpr (!P::kFwd) b[i] = __ldcs(c.in1 + v + int64_t(i) * PAR * LPR);
    }
  }
  typename P::Prep pr[NV];
  if constexpr (P::kFwd) {
    float m[NV], s[NV];
#pragma unroll
    for (int k = 0; k < NV; ++k) m[k] = -INFINITY, s[k] = 0.f;
#pragma unroll
    for (int i = 0; i < RR; ++i) {
      if (i >= most) break;
      if (i < mine) {
        float f[NV];
        Lane<T>::unpack(a[i], f);
#pragma unroll
        for (int k = 0; k < NV; ++k) m[k] = f[k] > m[k] ? f[k] : m[k];
      }
    }
#pragma unroll
    for (int o = LPR; o < GL; o <<= 1) {
#pragma unroll
      for (int k = 0; k < NV; ++k) {
        const float w = __shfl_xor_sync(0xffffffffu, m[k], o);
        m[k] = w > m[k] ? w : m[k];
      }
    }
#pragma unroll
    for (int i = 0; i < RR; ++i) {
      if (i >= most) break;
      if (i < mine) {
        float f[NV];
        Lane<T>::unpack(a[i], f);
#pragma unroll
        for (int k = 0; k < NV; ++k) {
          const float e = ops::ss::ss_exp_stat(f[k] - m[k]);
          s[k] += f[k] == -INFINITY ? 0.f : (f[k] == m[k] ? 1.f : e);
        }
      }
    }
#pragma unroll
    for (int o = LPR; o < GL; o <<= 1) {
#pragma unroll
      for (int k = 0; k < NV; ++k) s[k] += __shfl_xor_sync(0xffffffffu, s[k], o);
    }
#pragma unroll
    for (int k = 0; k < NV; ++k) pr[k] = P::prep(typename P::Stat{m[k], s[k]});
  } else {
    float d[NV];
#pragma unroll
    for (int k = 0; k < NV; ++k) d[k] = 0.f;
#pragma unroll
    for (int i = 0; i < RR; ++i) {
      if (i >= most) break;
      if (i < mine) {
        float g[NV], y[NV];
        Lane<T>::unpack(a[i], g);
        Lane<T>::unpack(b[i], y);
#pragma unroll
        for (int k = 0; k < NV; ++k) P::add(d[k], g[k], y[k]);
      }
    }
#pragma unroll
    for (int o = LPR; o < GL; o <<= 1) {
#pragma unroll
      for (int k = 0; k < NV; ++k) d[k] += __shfl_xor_sync(0xffffffffu, d[k], o);
    }
#pragma unroll
    for (int k = 0; k < NV; ++k) pr[k] = P::prep(d[k]);
  }
#pragma unroll
  for (int i = 0; i < RR; ++i) {
    if (i >= most) break;
    if (i < mine) {
      float f[NV], y[NV], o[NV];
      Lane<T>::unpack(a[i], f);
      if constexpr (!P::kFwd) Lane<T>::unpack(b[i], y);
#pragma unroll
      for (int k = 0; k < NV; ++k) o[k] = P::apply(f[k], P::kFwd ? 0.f : y[k], pr[k]);
      __stcs(c.out + v + int64_t(i) * PAR * LPR, Lane<T>::pack(o));
    }
  }
}

// One batch of U rows a thread (rows r0, r0 + RPI, ... below L): the loads (in0 to a, in1
// to b in the backward), issued together.
template <SsKind K, class T, int U, int RPI>
__device__ __forceinline__ void load_rows(const Ctx<K, T>& c, int64_t v, int r0, int L, uint4 (&a)[U], uint4 (&b)[U]) {
  constexpr int LPR = Ctx<K, T>::LPR;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int r = r0 + u * RPI;
    if (r < L) {
      a[u] = c.in0[v + int64_t(r) * LPR];
      if constexpr (!Ctx<K, T>::P::kFwd) b[u] = c.in1[v + int64_t(r) * LPR];
    }
  }
}

// The batch into the statistics t (Pol::add).
template <SsKind K, class T, int U, int RPI>
__device__ __forceinline__ void add_rows(const Ctx<K, T>& c, int64_t v, int r0, int L,
                                         typename Ctx<K, T>::Stat (&t)[Ctx<K, T>::NV]) {
  using P = typename Ctx<K, T>::P;
  constexpr int NV = Ctx<K, T>::NV;
  uint4 a[U], b[U];
  load_rows<K, T, U, RPI>(c, v, r0, L, a, b);
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if (r0 + u * RPI < L) {
      float f[NV], y[NV];
      Lane<T>::unpack(a[u], f);
      if constexpr (!P::kFwd) Lane<T>::unpack(b[u], y);
#pragma unroll
      for (int k = 0; k < NV; ++k) P::add(t[k], f[k], P::kFwd ? 0.f : y[k]);
    }
  }
}

// A loaded batch's output rows (Pol::apply with the segment's constants pr).
template <SsKind K, class T, int U, int RPI>
__device__ __forceinline__ void write_rows(const Ctx<K, T>& c, int64_t v, int r0, int L, const uint4 (&a)[U],
                                           const uint4 (&b)[U], const typename Ctx<K, T>::P::Prep (&pr)[Ctx<K, T>::NV]) {
  using P = typename Ctx<K, T>::P;
  constexpr int LPR = Ctx<K, T>::LPR, NV = Ctx<K, T>::NV;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int r = r0 + u * RPI;
    if (r < L) {
      float f[NV], y[NV], o[NV];
      Lane<T>::unpack(a[u], f);
      if constexpr (!P::kFwd) Lane<T>::unpack(b[u], y);
#pragma unroll
      for (int k = 0; k < NV; ++k) o[k] = P::apply(f[k], P::kFwd ? 0.f : y[k], pr[k]);
      __stcs(c.out + v + int64_t(r) * LPR, Lane<T>::pack(o));
    }
  }
}

// The block's statistics merged: over the lanes of a slot (butterfly: Pol::combine is
// commutative, so every lane ends with the same bits), then over the warps in a fixed order
// through shared memory; every thread ends with its slot's merged statistics.
template <SsKind K, class T>
__device__ __forceinline__ void block_merge(typename Ctx<K, T>::Stat (&t)[Ctx<K, T>::NV],
                                            typename Ctx<K, T>::Stat (*red)[Ctx<K, T>::LPR][Ctx<K, T>::NV]) {
  using C = Ctx<K, T>;
  using P = typename C::P;
  using Stat = typename C::Stat;
  constexpr int LPR = C::LPR, NV = C::NV;
#pragma unroll
  for (int o = LPR; o < 32; o <<= 1) {
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      Stat w;
      if constexpr (P::kFwd) {
        w.m = __shfl_xor_sync(0xffffffffu, t[k].m, o);
        w.s = __shfl_xor_sync(0xffffffffu, t[k].s, o);
      } else {
        w = __shfl_xor_sync(0xffffffffu, t[k], o);
      }
      t[k] = P::combine(t[k], w);
    }
  }
  const int warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31), slot = int(threadIdx.x) % LPR;
  if (lane < LPR) {
#pragma unroll
    for (int k = 0; k < NV; ++k) red[warp][lane][k] = t[k];
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    t[k] = red[0][slot][k];
    for (int w = 1; w < kWarps; ++w) t[k] = P::combine(t[k], red[w][slot][k]);
  }
  __syncthreads();
}

// The block list: the block on one segment: the online statistic over rows tid / LPR,
// + kThreads / LPR, ... (U rows a thread in flight), merged over the lanes of a slot
// (butterfly: Pol::combine is commutative, so every lane ends with the same bits), then
// over the warps in a fixed order through shared memory; then the rows again (L1 / L2,
// U in flight) for the output.
template <SsKind K, class T>
__device__ __noinline__ void block_segment(const Ctx<K, T>& c, int64_t st, int L,
                              typename Ctx<K, T>::Stat (*red)[Ctx<K, T>::LPR][Ctx<K, T>::NV]) {
  using C = Ctx<K, T>;
  using P = typename C::P;
  using Stat = typename C::Stat;
  constexpr int LPR = C::LPR, NV = C::NV, RPI = kThreads / LPR, U = P::kFwd ? 8 : 4;
  const int tid = int(threadIdx.x), slot = tid % LPR, r0 = tid / LPR;
  const int64_t v = st * LPR + slot;
  Stat t[NV];
#pragma unroll
  for (int k = 0; k < NV; ++k) t[k] = P::identity();
  for (int rb = r0; rb < L; rb += U * RPI) add_rows<K, T, U, RPI>(c, v, rb, L, t);
  block_merge<K, T>(t, red);
  typename P::Prep pr[NV];
#pragma unroll
  for (int k = 0; k < NV; ++k) pr[k] = P::prep(t[k]);
  for (int rb = r0; rb < L; rb += U * RPI) {
    uint4 a[U], b[U];
    load_rows<K, T, U, RPI>(c, v, rb, L, a, b);
    write_rows<K, T, U, RPI>(c, v, rb, L, a, b, pr);
  }
}

// ---- the split variant: long segments in pieces --------------------------------------

// One block: the first piece of each long segment (an exclusive scan of ceil(L / piece
// rows) over the block list, CUB's BlockScan a chunk of 1024), and their number.
template <class T>
__global__ void __launch_bounds__(1024) piece_scan_kernel(Bins b) {
  using Scan = cub::BlockScan<unsigned, 1024>;
  __shared__ typename Scan::TempStorage tmp;
  constexpr unsigned pr = unsigned(kThreads / Ctx<SsKind::SoftmaxFwd, T>::LPR * kPieceU);
  const unsigned n = b.ctl[kShort];
  unsigned carry = 0;
  for (unsigned at = 0; at < n; at += 1024) {
    const unsigned i = at + threadIdx.x;
    const unsigned cnt = i < n ? (unsigned(b.len[kShort * b.S + i]) + pr - 1) / pr : 0u;
    unsigned ex, total;
    Scan(tmp).ExclusiveSum(cnt, ex, total);
    if (i < n) b.piece_base[i] = carry + ex;
    carry += total;
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    b.piece_base[n] = carry;
    b.ctl[kLists + 2] = carry;
  }
}

// The long segment of piece q: the last i with piece_base[i] <= q.
__device__ __forceinline__ unsigned piece_segment(const Bins& b, unsigned q) {
  unsigned lo = 0, hi = b.ctl[kShort];  // piece_base[hi] = pieces > q
  while (hi - lo > 1) {
    const unsigned mid = (lo + hi) / 2;
    if (b.piece_base[mid] <= q) lo = mid;
    else hi = mid;
  }
  return lo;
}

// Pass 1 of piece q: the block's statistic of the piece's rows (one batch of kPieceU rows a
// thread, the online update, the butterfly and the fixed-order merge over the warps, as
// block_segment), stored at partial[q].
template <SsKind K, class T>
__device__ __noinline__ void piece_stat(const Ctx<K, T>& c, const Bins& b, unsigned q,
                                        typename Ctx<K, T>::Stat (*red)[Ctx<K, T>::LPR][Ctx<K, T>::NV]) {
  using C = Ctx<K, T>;
  using P = typename C::P;
  using Stat = typename C::Stat;
  constexpr int LPR = C::LPR, NV = C::NV, RPI = kThreads / LPR, U = kPieceU;
  const unsigned i = piece_segment(b, q);
  const int64_t st = b.start[kShort * b.S + i];
  const int L = b.len[kShort * b.S + i];
  const int r_begin = int(q - b.piece_base[i]) * RPI * U;
  const int tid = int(threadIdx.x), slot = tid % LPR, r0 = r_begin + tid / LPR;
  const int64_t v = st * LPR + slot;
  Stat t[NV];
#pragma unroll
  for (int k = 0; k < NV; ++k) t[k] = P::identity();
  add_rows<K, T, U, RPI>(c, v, r0, L, t);
  block_merge<K, T>(t, red);
  if (tid < LPR) {  // slot tid
    Stat* out = static_cast<Stat*>(b.partial) + (size_t(q) * LPR + size_t(tid)) * NV;
#pragma unroll
    for (int k = 0; k < NV; ++k) out[k] = t[k];
  }
}

// Pass 2 of every piece (a block a piece, persistent): its segment's statistic merged from
// the segment's pieces in piece order (the same bits in every piece), then the piece's rows.
template <SsKind K, class T>
__global__ void __launch_bounds__(kThreads) piece_write_kernel(Ctx<K, T> c, Bins b) {
  using C = Ctx<K, T>;
  using P = typename C::P;
  using Stat = typename C::Stat;
  constexpr int LPR = C::LPR, NV = C::NV, RPI = kThreads / LPR, U = kPieceU;
  const unsigned pieces = b.ctl[kLists + 2];
  const Stat* part = static_cast<const Stat*>(b.partial);
  const int tid = int(threadIdx.x), slot = tid % LPR;
  for (unsigned q = blockIdx.x; q < pieces; q += gridDim.x) {
    const unsigned i = piece_segment(b, q), p0 = b.piece_base[i], p1 = b.piece_base[i + 1];
    const int64_t st = b.start[kShort * b.S + i];
    const int L = b.len[kShort * b.S + i];
    const int r0 = int(q - p0) * RPI * U + tid / LPR;
    const int64_t v = st * LPR + slot;
    uint4 a[U], bb[U];
    load_rows<K, T, U, RPI>(c, v, r0, L, a, bb);  // in flight while the partials merge
    typename P::Prep pr[NV];
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      Stat m = part[(size_t(p0) * LPR + size_t(slot)) * NV + k];
      for (unsigned pp = p0 + 1; pp < p1; ++pp) m = P::combine(m, part[(size_t(pp) * LPR + size_t(slot)) * NV + k]);
      pr[k] = P::prep(m);
    }
    write_rows<K, T, U, RPI>(c, v, r0, L, a, bb, pr);
  }
}

// Short item u of class cl: its lane group's segment (start, length), or (0, 0).
template <class T>
__device__ __forceinline__ void short_meta(const Bins& b, int cl, unsigned u, int64_t& st, int& L) {
  const int gl = group_lanes<T>(cl);
  const unsigned idx = u * unsigned(32 / gl) + unsigned(int(threadIdx.x & 31) / gl);
  st = 0, L = 0;
  if (idx < b.ctl[cl]) st = b.start[cl * b.S + idx], L = b.len[cl * b.S + idx];
}

template <SsKind K, class T, int CL>
__device__ __forceinline__ void short_dispatch(const Ctx<K, T>& c, int cl, int64_t st, int L) {
  if constexpr (CL >= 0) {
    if (cl == CL) {
      if constexpr (class_exists<T>(CL))
        short_segment<K, T, ((4 << CL) < kRowsPerLane ? (4 << CL) : kRowsPerLane), par_of<T>(CL)>(c, st, L);
    } else {
      short_dispatch<K, T, CL - 1>(c, cl, st, L);
    }
  }
}

// Persistent blocks: the block list first (an atomic cursor: the longest segments start at
// once), then each warp the short items, kChunk a grab from one cursor over the classes
// longest first, the next grab's atomic in flight while the chunk runs, the chunk's
// segment starts and lengths loaded before its first segment.
// MB: the launch bounds' blocks an SM (2: 128 registers, 16 warps an SM; 3: 85, 24; 4: 64, 32).
// kSplit: the block list as pieces (piece_stat; the split variant), a kernel of its own so
// that the default one's registers stay as they were measured.
template <SsKind K, class T, int MB, bool kSplit = false>
__global__ void __launch_bounds__(kThreads, MB) lanes_kernel(Ctx<K, T> c, Bins b) {
  using C = Ctx<K, T>;
  __shared__ typename C::Stat red[kWarps][C::LPR][C::NV];
  __shared__ unsigned item_sh;
  for (; b.parts & 1;) {
    if (threadIdx.x == 0) item_sh = atomicAdd(&b.ctl[kLists], 1u);
    __syncthreads();
    const unsigned it = item_sh;
    __syncthreads();
    if constexpr (kSplit) {
      if (it >= b.ctl[kLists + 2]) break;
      piece_stat<K, T>(c, b, it, red);
    } else {
      if (it >= b.ctl[kShort]) break;
      block_segment<K, T>(c, b.start[kShort * b.S + it], b.len[kShort * b.S + it], red);
    }
  }
  // Item space: class kShort-1's items, then kShort-2's, ..., class 0's.
  unsigned first[kShort + 1];
  first[0] = 0;
#pragma unroll
  for (int k = 0; k < kShort; ++k) {
    const int cl = kShort - 1 - k;
    const unsigned g = unsigned(32 / group_lanes<T>(cl));
    first[k + 1] = first[k] + (class_exists<T>(cl) && (b.parts >> (1 + cl) & 1u) ? (b.ctl[cl] + g - 1) / g : 0u);
  }
  const unsigned total = first[kShort];
  const int lane = int(threadIdx.x & 31);
  unsigned grab = 0;
  if (lane == 0) grab = atomicAdd(&b.ctl[kLists + 1], unsigned(kChunk));
  unsigned base = __shfl_sync(0xffffffffu, grab, 0);
  while (base < total) {
    if (lane == 0) grab = atomicAdd(&b.ctl[kLists + 1], unsigned(kChunk));
    int64_t st[kChunk];
    int L[kChunk], cl[kChunk];
#pragma unroll
    for (int j = 0; j < kChunk; ++j) {
      const unsigned u = base + unsigned(j);
      int k = 0;
#pragma unroll
      for (int q = 1; q < kShort; ++q) k = first[q] <= u ? q : k;  // first[] stays in registers
      cl[j] = kShort - 1 - k;
      unsigned fk = first[0];
#pragma unroll
      for (int q = 1; q < kShort; ++q) fk = q == k ? first[q] : fk;
      if (u < total) short_meta<T>(b, cl[j], u - fk, st[j], L[j]);
      else st[j] = 0, L[j] = 0, cl[j] = -1;
    }
    // One copy of the segment code (not unrolled: unrolled, the compiler overlapped the
    // chunk's segments and spilled); the chunk's metadata shifts down in registers.
#pragma unroll 1
    for (int j = 0; j < kChunk; ++j) {
      short_dispatch<K, T, kShort - 1>(c, cl[0], st[0], L[0]);
#pragma unroll
      for (int q = 0; q + 1 < kChunk; ++q) st[q] = st[q + 1], L[q] = L[q + 1], cl[q] = cl[q + 1];
    }
    base = __shfl_sync(0xffffffffu, grab, 0);
  }
}

struct Proto {
  Bins b{};
  int64_t S = 0;
  const int64_t* off = nullptr;
  template <SsKind K, class T, int MB = 2>
  int grid() const {
    int per = 0, sms = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, lanes_kernel<K, T, MB>, kThreads, 0));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    return std::max(1, per) * sms;
  }
  template <class T> void bin() const {
    CK(cudaMemsetAsync(b.ctl, 0, (kLists + 2) * sizeof(unsigned)));
    bin_kernel<<<unsigned((S + 255) / 256), 256>>>(off, S, Ctx<SsKind::SoftmaxFwd, T>::kMaxShortRows, b);
  }
  template <SsKind K, class T, int MB = 2> void main(const void* in0, const void* in1, void* out, int g) const {
    CK(cudaMemsetAsync(b.ctl + kLists, 0, 2 * sizeof(unsigned)));  // the cursors
    Ctx<K, T> c{static_cast<const uint4*>(in0), static_cast<const uint4*>(in1), static_cast<uint4*>(out)};
    lanes_kernel<K, T, MB><<<g, kThreads>>>(c, b);
  }
  // The split variant: the pieces' scan, the lanes kernel (pieces' statistics, then the
  // short classes), the pieces' write pass.
  template <SsKind K, class T> void main_split(const void* in0, const void* in1, void* out, int g) const {
    const Bins& bs = b;
    CK(cudaMemsetAsync(b.ctl + kLists, 0, 2 * sizeof(unsigned)));
    piece_scan_kernel<T><<<1, 1024>>>(bs);
    Ctx<K, T> c{static_cast<const uint4*>(in0), static_cast<const uint4*>(in1), static_cast<uint4*>(out)};
    lanes_kernel<K, T, 2, true><<<g, kThreads>>>(c, bs);
    piece_write_kernel<K, T><<<g, kThreads>>>(c, bs);
  }
};

struct MS8 {
  float m, s;  // the size of the forward's statistic, for the partials' allocation (8 per piece: LPR x NV = 8)
};

struct Case {
  std::string name;
  const std::vector<int64_t>* deg;
  DType dtype;
};

template <class T>
void run_case(const Case& cs, int reps, bool& all_ok) {
  const DeviceRef gpu{Device::CUDA, 0}, cpu{Device::CPU, 0};
  const std::vector<int64_t>& deg = *cs.deg;
  const int64_t S = int64_t(deg.size()), H = 8;
  std::vector<int64_t> off(size_t(S + 1), 0);
  for (int64_t s = 0; s < S; ++s) off[size_t(s + 1)] = off[size_t(s)] + deg[size_t(s)];
  const int64_t rows = off.back(), n = rows * H;
  const Shape shape{rows, H};
  const int code = cs.dtype == DType::Float32 ? 0 : 3;
  Tensor x = Tensor::empty(shape, cs.dtype, gpu), y = Tensor::empty(shape, cs.dtype, gpu);
  Tensor g = Tensor::empty(shape, cs.dtype, gpu), gi = Tensor::empty(shape, cs.dtype, gpu);
  Tensor py = Tensor::empty(shape, cs.dtype, gpu), pgi = Tensor::empty(shape, cs.dtype, gpu);
  Tensor offs = Tensor::empty({S + 1}, DType::Int64, gpu);
  CK(cudaMemcpy(offs.data(), off.data(), off.size() * sizeof(int64_t), cudaMemcpyHostToDevice));
  init_kernel<<<4096, 256>>>(x.data(), n, code, 17, -4.f, 4.f);
  init_kernel<<<4096, 256>>>(g.data(), n, code, 91, -1.5f, 1.5f);
  CK(cudaGetLastError());
  Segments seg;
  seg.offsets = offs;
  seg.unsafe = true;
  auto lib_fwd = [&] { segment_softmax_out(SegmentSoftmaxOp::Softmax, x, seg, y); };
  auto lib_bwd = [&] { segment_softmax_backward_out(SegmentSoftmaxOp::Softmax, g, y, y, seg, gi); };

  Proto p;
  p.S = S;
  p.off = offs.ptr<int64_t>();
  p.b.S = S;
  CK(cudaMalloc(&p.b.start, size_t(kLists * S) * sizeof(int64_t)));
  CK(cudaMalloc(&p.b.len, size_t(kLists * S) * sizeof(int)));
  CK(cudaMalloc(&p.b.ctl, 2 * kLists * sizeof(unsigned)));
  CK(cudaMalloc(&p.b.piece_base, size_t(S + 1) * sizeof(unsigned)));
  // At most rows / (piece rows) + (long segments) pieces; a statistic is at most 8 bytes.
  CK(cudaMalloc(&p.b.partial, size_t(rows / 1024 + S + 1) * 8 * sizeof(MS8)));
  constexpr SsKind F = SsKind::SoftmaxFwd, B = SsKind::SoftmaxBwd;
  const int gf = p.grid<F, T>(), gb = p.grid<B, T>();
  auto pro_fwd = [&] {
    p.bin<T>();
    p.main<F, T>(x.data(), nullptr, py.data(), gf);
  };
  auto pro_bwd = [&] {
    p.bin<T>();
    p.main<B, T>(g.data(), y.data(), pgi.data(), gb);
  };
  lib_fwd();
  lib_bwd();
  // NaN everywhere first: a row the prototype does not write fails the check.
  CK(cudaMemset(py.data(), 0xff, size_t(n) * dtype_size(cs.dtype)));
  CK(cudaMemset(pgi.data(), 0xff, size_t(n) * dtype_size(cs.dtype)));
  pro_fwd();
  pro_bwd();
  CK(cudaDeviceSynchronize());
  CK(cudaGetLastError());
  // The bins (one set for both directions), as counted on the device.
  std::vector<unsigned> cnt(kLists);
  std::vector<int64_t> rows_in(kLists, 0);
  {
    p.bin<T>();
    CK(cudaMemcpy(cnt.data(), p.b.ctl, kLists * sizeof(unsigned), cudaMemcpyDeviceToHost));
    std::vector<int> len;
    for (int l = 0; l < kLists; ++l) {
      len.resize(cnt[size_t(l)]);
      CK(cudaMemcpy(len.data(), p.b.len + l * S, len.size() * sizeof(int), cudaMemcpyDeviceToHost));
      for (int v : len) rows_in[size_t(l)] += v;
    }
    std::string cs_, rs_;
    for (int l = 0; l < kLists; ++l) {
      cs_ += (l ? " " : "") + std::to_string(cnt[size_t(l)]);
      rs_ += (l ? " " : "") + std::to_string(rows_in[size_t(l)]);
    }
    std::printf("bins|%s|%s|%s|%s|grid fwd %d bwd %d\n", cs.name.c_str(), dname(cs.dtype), cs_.c_str(), rs_.c_str(), gf, gb);
  }
  const DeviceRef host{};
  Tensor hy = Tensor::copy_to(y, host), ho = Tensor::copy_to(offs, host);
  Segments hs;
  hs.offsets = ho;
  Tensor ry = Tensor::empty(shape, cs.dtype, cpu), rgi = Tensor::empty(shape, cs.dtype, cpu);
  const double tol = cs.dtype == DType::Float32 ? 1e-5 : 1.6e-2;
  {
    Tensor hx = Tensor::copy_to(x, host), hg = Tensor::copy_to(g, host);
    Tensor hgi = Tensor::copy_to(gi, host);
    Tensor hpy = Tensor::copy_to(py, host), hpgi = Tensor::copy_to(pgi, host);
    segment_softmax_out(SegmentSoftmaxOp::Softmax, hx, hs, ry);
    segment_softmax_backward_out(SegmentSoftmaxOp::Softmax, hg, hy, hy, hs, rgi);  // both backwards take y_lib
    const struct {
      const char* dir;
      const char* var;
      double e;
    } checks[] = {{"fwd", "library", max_abs_diff(hy, ry)}, {"bwd", "library", max_abs_diff(hgi, rgi)},
                  {"fwd", "lanes", max_abs_diff(hpy, ry)}, {"bwd", "lanes", max_abs_diff(hpgi, rgi)},
                  {"fwd", "lanes vs library", max_abs_diff(hpy, hy)}};
    for (const auto& k : checks) {
      const bool ok = k.e <= tol;
      all_ok &= ok;
      std::printf("check|%s|%s|%s|%s|%.3g|%.3g|%s\n", cs.name.c_str(), dname(cs.dtype), k.dir, k.var, k.e, tol,
                  ok ? "ok" : "MISMATCH");
    }
    std::fflush(stdout);
  }
  const double bytes = double(n) * dtype_size(cs.dtype), meta = double(S + 1) * 8;
  Tensor c0 = Tensor::empty(shape, cs.dtype, gpu), c1 = Tensor::empty(shape, cs.dtype, gpu);
  CK(cudaMemset(c0.data(), 1, size_t(bytes)));
  const double copy_ms =
      batch_ms([&] { CK(cudaMemcpyAsync(c1.data(), c0.data(), size_t(bytes), cudaMemcpyDeviceToDevice)); }, reps, 5);
  const double copy_bw = 2 * bytes / (copy_ms * 1e-3);
  // Bins kept from a last bin<dir>() for the "kernel only" rows.
  auto pro_fwd_main = [&] { p.main<F, T>(x.data(), nullptr, py.data(), gf); };
  auto pro_bwd_main = [&] { p.main<B, T>(g.data(), y.data(), pgi.data(), gb); };
  auto bin_only = [&] { p.bin<T>(); };
  struct Row {
    const char* dir;
    const char* var;
    double ms;
  };
  std::vector<Row> rows_out;
  rows_out.push_back({"fwd", "library", batch_ms(lib_fwd, reps, 5)});
  rows_out.push_back({"fwd", "lanes (bins + kernel)", batch_ms(pro_fwd, reps, 5)});
  p.bin<T>();
  rows_out.push_back({"fwd", "lanes kernel only", batch_ms(pro_fwd_main, reps, 5)});
  rows_out.push_back({"fwd", "bins only", batch_ms(bin_only, reps, 5)});
  rows_out.push_back({"bwd", "library", batch_ms(lib_bwd, reps, 5)});
  rows_out.push_back({"bwd", "lanes (bins + kernel)", batch_ms(pro_bwd, reps, 5)});
  p.bin<T>();
  rows_out.push_back({"bwd", "lanes kernel only", batch_ms(pro_bwd_main, reps, 5)});
  // Occupancy variants (launch bounds 3 and 4 blocks an SM), each validated first.
  auto variant = [&](auto mb, const char* fname, const char* bname) {
    constexpr int MB = decltype(mb)::value;
    const int g1 = p.grid<F, T, MB>(), g2 = p.grid<B, T, MB>();
    auto vf = [&] { p.main<F, T, MB>(x.data(), nullptr, py.data(), g1); };
    auto vb = [&] { p.main<B, T, MB>(g.data(), y.data(), pgi.data(), g2); };
    p.bin<T>();
    CK(cudaMemset(py.data(), 0xff, size_t(bytes)));  // NaN everywhere: a row not written fails the check
    CK(cudaMemset(pgi.data(), 0xff, size_t(bytes)));
    vf();
    vb();
    CK(cudaDeviceSynchronize());
    CK(cudaGetLastError());
    const double ef = max_abs_diff(Tensor::copy_to(py, host), ry), eb = max_abs_diff(Tensor::copy_to(pgi, host), rgi);
    for (int d = 0; d < 2; ++d) {
      const double e = d ? eb : ef;
      all_ok &= e <= tol;
      std::printf("check|%s|%s|%s|%s|%.3g|%.3g|%s\n", cs.name.c_str(), dname(cs.dtype), d ? "bwd" : "fwd",
                  d ? bname : fname, e, tol, e <= tol ? "ok" : "MISMATCH");
    }
    rows_out.push_back({"fwd", fname, batch_ms(vf, reps, 5)});
    rows_out.push_back({"bwd", bname, batch_ms(vb, reps, 5)});
  };
  variant(std::integral_constant<int, 3>{}, "lanes kernel only, bounds 3 blocks", "lanes kernel only, bounds 3 blocks");
  // The split variant (long segments in pieces), validated, then timed with its bins.
  {
    auto sf = [&] {
      p.bin<T>();
      p.main_split<F, T>(x.data(), nullptr, py.data(), gf);
    };
    auto sb = [&] {
      p.bin<T>();
      p.main_split<B, T>(g.data(), y.data(), pgi.data(), gb);
    };
    CK(cudaMemset(py.data(), 0xff, size_t(bytes)));  // NaN everywhere: a row not written fails the check
    CK(cudaMemset(pgi.data(), 0xff, size_t(bytes)));
    sf();
    sb();
    CK(cudaDeviceSynchronize());
    CK(cudaGetLastError());
    const double ef = max_abs_diff(Tensor::copy_to(py, host), ry), eb = max_abs_diff(Tensor::copy_to(pgi, host), rgi);
    for (int d = 0; d < 2; ++d) {
      const double e = d ? eb : ef;
      all_ok &= e <= tol;
      std::printf("check|%s|%s|%s|lanes split|%.3g|%.3g|%s\n", cs.name.c_str(), dname(cs.dtype), d ? "bwd" : "fwd", e,
                  tol, e <= tol ? "ok" : "MISMATCH");
    }
    rows_out.push_back({"fwd", "lanes split (bins + kernels)", batch_ms(sf, reps, 5)});
    rows_out.push_back({"bwd", "lanes split (bins + kernels)", batch_ms(sb, reps, 5)});
  }
  // Where the time goes: the kernel on one part of the work (outputs incomplete: timing
  // only): the block list alone, the short classes alone, each short class alone, with the
  // part's rows and its rate (data bytes moved: 2 x forward, 3 x backward).
  p.bin<T>();
  struct Part {
    std::string what;
    unsigned bits;
    int64_t rows;
  };
  std::vector<Part> parts = {{"block list", 1u, rows_in[kShort]}, {"short classes", ~1u, rows - rows_in[kShort]}};
  for (int cl = 0; cl < kShort; ++cl)
    if (cnt[size_t(cl)] > 0) parts.push_back({"class " + std::to_string(cl), 1u << (1 + cl), rows_in[size_t(cl)]});
  for (const Part& pt : parts) {
    p.b.parts = pt.bits;
    const double t[2] = {batch_ms(pro_fwd_main, reps, 5), batch_ms(pro_bwd_main, reps, 5)};
    for (int d = 0; d < 2; ++d)
      std::printf("probe|%s|%s|%s|%s alone|rows %lld|%.4f ms|%.0f GB/s\n", cs.name.c_str(), dname(cs.dtype),
                  d ? "bwd" : "fwd", pt.what.c_str(), (long long)pt.rows, t[d],
                  double(pt.rows) * double(H) * dtype_size(cs.dtype) * (d ? 3 : 2) / (t[d] * 1e-3) / 1e9);
  }
  std::fflush(stdout);
  p.b.parts = ~0u;
  variant(std::integral_constant<int, 4>{}, "lanes kernel only, bounds 4 blocks", "lanes kernel only, bounds 4 blocks");
  for (const Row& r : rows_out) {
    const bool bwd = r.dir[0] == 'b';
    const double floor_ms = ((bwd ? 3 : 2) * bytes + meta) / copy_bw * 1e3;
    std::printf("case|%s|%s|%s|%s|%.4f|%.1f|%.0f\n", cs.name.c_str(), dname(cs.dtype), r.dir, r.var, r.ms,
                100.0 * floor_ms / r.ms, copy_bw / 1e9);
  }
  std::fflush(stdout);
  CK(cudaFree(p.b.start));
  CK(cudaFree(p.b.len));
  CK(cudaFree(p.b.ctl));
  CK(cudaFree(p.b.piece_base));
  CK(cudaFree(p.b.partial));
}

}  // namespace

int main(int argc, char** argv) {
  std::string only, only_dtype;
  int reps = 15;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", a.c_str());
      return 2;
    }
    if (a == "--only") only = argv[++i];
    else if (a == "--dtype") only_dtype = argv[++i];
    else if (a == "--reps") reps = std::max(3, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device|%s\n", prop.name);
  const int64_t E = 10000000;
  const std::vector<int64_t> deg_gat = power_law_degrees(E, 8);
  const std::vector<int64_t> deg_uni(size_t(E / 10), 10);
  const std::vector<Case> cases = {
      {"GAT power-law, 8 heads", &deg_gat, DType::Float32},
      {"GAT power-law, 8 heads", &deg_gat, DType::BFloat16},
      {"uniform 10 per node, 8 heads", &deg_uni, DType::Float32},
      {"uniform 10 per node, 8 heads", &deg_uni, DType::BFloat16},
  };
  bool all_ok = true;
  for (const Case& c : cases) {
    if (!listed(only.c_str(), c.name) || (!only_dtype.empty() && only_dtype != dname(c.dtype))) continue;
    if (c.dtype == DType::Float32) run_case<float>(c, reps, all_ok);
    else run_case<__nv_bfloat16>(c, reps, all_ok);
  }
  return all_ok ? 0 : 1;
}
