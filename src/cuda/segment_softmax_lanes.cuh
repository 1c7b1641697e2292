// The lane-group path of the ragged softmax family (session 44; the rule and the applicability
// are src/core/segment_softmax_geometry.h, "the lane-group path"; the prototype's measurements
// and the reasoning are bench/NOTES.md, sessions 42-44).
//
// Why: the tile kernel walks rows in lock-step across a warp and pays, per row, the
// bookkeeping of the pieces that end there (~2.7 warp instructions an element on GAT degrees,
// session 37). Here a short segment of L rows belongs WHOLE to one lane group (LPR lanes of 16
// bytes hold a row; PAR slots of the group take rows p, p + PAR, ...), which keeps its rows in
// registers: two passes over them (the max, then the sum of exp against it) and the output,
// no shared memory, no shuffles but the group's butterfly. A warp runs as long as its longest
// segment, so segments are binned by length first and a warp's groups come from one bin.
//
// One call, on the stream:
//   prepare   segment_reduce's prepare kernel without the tile partition: the merge ends q
//             (src/core/segment_geometry.h: segment v covers positions [q[v], q[v+1]), ghosts
//             included), clamped as the CPU clamps, so no metadata reaches outside the data.
//   count     a thread a merge segment: its list (short class c: L <= 4 << c rows; long:
//             more than max_short_rows rows, and every ghost with rows, whose rows are 0),
//             counted per warp (match), per block (shared atomics), then one global atomic
//             per block and list.
//   place     the same classification again; a short segment's slot from the list's cursor
//             (aggregated the same way) after the lists before it; a long one from ONE 64-bit
//             atomic that returns both its index and its first piece (pieces: piece_rows rows
//             each), so the pieces' starts are monotone in the entries' order.
//   lanes     persistent blocks: first the pieces (a block a piece, from an atomic cursor:
//             one batch of kSslPieceU loads a thread, the online statistic, the block's merge
//             in a fixed order) into partial[piece]; then each warp the short items, kChunk a
//             grab from one cursor over the classes longest first.
//   merge     a warp per (long segment, slot): its pieces' partials combined in a fixed order
//             (lane l: pieces l, l + 32, ..., then a butterfly), into seg_stat.
//   write     persistent blocks, a block a piece: the rows again with the segment's constants
//             (a ghost's rows: 0).
// A segment's arithmetic never depends on which warp or block takes it: the atomics change
// no bit, and the result is bitwise reproducible. The math is ops::ss::Pol's (the tile
// kernel's statistic, merge and epilogue), so the special values are the tile path's; the
// short segments' two passes (max, then the sum against it) round differently from the
// online form, within the same tolerance against the float64 reference.
#pragma once
#include <map>
#include <mutex>
#include <type_traits>

#include "src/core/segment_softmax_geometry.h"
#include "src/cuda/common.cuh"
#include "src/cuda/merge_space.cuh"
#include "src/ops/segment_softmax_tiles.h"

namespace segred::cuda::ssl {

using detail::SsKind;
constexpr int kThreads = detail::kSslThreads;
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerLane = detail::kSslRowsPerLane;
constexpr int kPieceU = detail::kSslPieceU;
constexpr int kShort = 7;      // short classes c = 0 .. 6: L <= 4 << c (up to 256 rows)
constexpr int kLong = kShort;  // the list of long segments and ghost rows
constexpr int kLists = kShort + 1;
constexpr int kChunk = 4;      // short items a warp takes per atomic
// Control words (zeroed once a call): list counts, list cursors, the pieces' cursor, the short
// items' cursor.
constexpr int kCount = 0, kCursor = kLists, kPieceCursor = 2 * kLists, kShortCursor = 2 * kLists + 1,
              kCtl = 2 * kLists + 2;

struct Bins {
  const int64_t* q = nullptr;  // merge ends
  int64_t U = 0;               // merge segments
  int64_t S1 = 1;              // S + 1: segment v = 1 + r (S + 1) + s; ghosts v = 0 and s = S
  int64_t* start = nullptr;    // entries, list by list: a segment's first position
  int* len = nullptr;          // its rows; a ghost's -rows (written 0)
  unsigned* ctl = nullptr;     // kCtl words
  unsigned long long* lng = nullptr;  // (long entries << 32) | pieces
  unsigned* piece_base = nullptr;     // [long entries]: an entry's first piece
  void* partial = nullptr;            // Stat[pieces][LPR][NV]
  void* seg_stat = nullptr;           // Stat[long entries][LPR][NV]
  int max_short_rows = 0;
  int piece_rows = 0;
};

// Merge segment v: first position, rows, list (-1: no rows).
__device__ __forceinline__ int classify(const Bins& b, int64_t v, int64_t& st, int& len) {
  st = b.q[v];
  const int64_t L = b.q[v + 1] - st;
  len = int(L);
  if (L <= 0) return -1;
  const bool ghost = v == 0 || (v - 1) % b.S1 == b.S1 - 1;
  if (ghost) {
    len = -len;
    return kLong;
  }
  if (L > b.max_short_rows) return kLong;
  int c = 0;
  while ((int64_t(4) << c) < L) ++c;
  return c;
}

// (count_kernel and place_kernel are static: this header is compiled into every dtype's
// instantiation file.)
// Places per warp (match), then per block (shared atomics); returns the thread's rank inside
// the block's share of its list, and leaves each list's block count in block_n.
__device__ __forceinline__ unsigned block_rank(int list, unsigned* block_n) {
  const unsigned peers = __match_any_sync(kFull, list);
  const int lane = int(threadIdx.x & 31), leader = __ffs(int(peers)) - 1;
  unsigned base = 0;
  if (lane == leader && list >= 0) base = atomicAdd(&block_n[list], unsigned(__popc(int(peers))));
  base = __shfl_sync(kFull, base, leader);
  return base + unsigned(__popc(int(peers & ((1u << lane) - 1u))));
}

static __global__ void __launch_bounds__(256) count_kernel(Bins b) {
  __shared__ unsigned block_n[kLists];
  if (threadIdx.x < kLists) block_n[threadIdx.x] = 0;
  __syncthreads();
  const int64_t v = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t st = 0;
  int len = 0;
  const int list = v < b.U ? classify(b, v, st, len) : -1;
  block_rank(list, block_n);
  __syncthreads();
  if (threadIdx.x < kLists && block_n[threadIdx.x]) atomicAdd(&b.ctl[kCount + threadIdx.x], block_n[threadIdx.x]);
}

static __global__ void __launch_bounds__(256) place_kernel(Bins b) {
  __shared__ unsigned block_n[kLists], block_base[kLists], list_base[kLists];
  if (threadIdx.x < kLists) block_n[threadIdx.x] = 0;
  if (threadIdx.x == 0) {
    unsigned acc = 0;
    for (int l = 0; l < kLists; ++l) list_base[l] = acc, acc += b.ctl[kCount + l];
  }
  __syncthreads();
  const int64_t v = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t st = 0;
  int len = 0;
  const int list = v < b.U ? classify(b, v, st, len) : -1;
  const int slist = list == kLong ? -1 : list;  // long entries take their place below
  const unsigned rank = block_rank(slist, block_n);
  __syncthreads();
  if (threadIdx.x < kLong && block_n[threadIdx.x])
    block_base[threadIdx.x] = atomicAdd(&b.ctl[kCursor + threadIdx.x], block_n[threadIdx.x]);
  __syncthreads();
  unsigned at = 0;
  if (slist >= 0) {
    at = list_base[slist] + block_base[slist] + rank;
  } else if (list == kLong) {
    const unsigned rows = unsigned(len < 0 ? -len : len), pr = unsigned(b.piece_rows);
    const unsigned long long old = atomicAdd(b.lng, (1ull << 32) | ((rows + pr - 1) / pr));
    const unsigned i = unsigned(old >> 32);
    b.piece_base[i] = unsigned(old);
    at = list_base[kLong] + i;
  }
  if (list >= 0) {
    b.start[at] = st;
    b.len[at] = len;
  }
}

// A lane's 16 bytes of a row as NV accumulation values, and back (cuda::ld / cuda::st: the
// tile path's conversions, round to nearest even).
template <class D>
struct Lane {
  static constexpr int NV = 16 / int(sizeof(D));
  union U16 {
    uint4 u;
    float f[4];
    unsigned short h[8];
  };
  static __device__ __forceinline__ D of_bits(unsigned short h) {
    if constexpr (std::is_same_v<D, __half>) return __ushort_as_half(h);
    else return __ushort_as_bfloat16(h);
  }
  static __device__ __forceinline__ unsigned short bits_of(D v) {
    if constexpr (std::is_same_v<D, __half>) return __half_as_ushort(v);
    else return __bfloat16_as_ushort(v);
  }
  static __device__ __forceinline__ void unpack(const uint4& u, float* f) {
    U16 x;
    x.u = u;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      if constexpr (std::is_same_v<D, float>) f[k] = x.f[k];
      else f[k] = cuda::ld(of_bits(x.h[k]));
    }
  }
  static __device__ __forceinline__ uint4 pack(const float* f) {
    U16 x;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      if constexpr (std::is_same_v<D, float>) x.f[k] = f[k];
      else x.h[k] = bits_of(cuda::st<D>(f[k]));
    }
    return x.u;
  }
};

template <SsKind K, class D, int LPR_>
struct Ctx {
  using P = ops::ss::Pol<K, float>;
  using Stat = typename P::Stat;
  static constexpr int LPR = LPR_;
  static constexpr int NV = Lane<D>::NV;
  const uint4* in0;  // x (forward) or g
  const uint4* in1;  // y (backward)
  uint4* out;
};

// Class c's lane group: PAR slots of LPR lanes, at most kRowsPerLane rows a lane.
constexpr int par_of(int c) { return (4 << c) > kRowsPerLane ? (4 << c) / kRowsPerLane : 1; }
constexpr int rows_of(int c) { return (4 << c) < kRowsPerLane ? (4 << c) : kRowsPerLane; }
template <int LPR> constexpr bool class_exists(int c) { return LPR * par_of(c) <= 32; }

// One short segment (L rows from position st; L == 0: an idle group) on its lane group: lane
// (p, slot) loads rows p, p + PAR, ... (RR at most; the loops stop at the warp's most), two
// passes over the registers (m = the max, NaN never wins; then s = the sum of 1 where x == m,
// exp(x - m) elsewhere, nothing for -inf: Pol::add's statistic read against the final max),
// each merged over the PAR slots by a butterfly (commutative steps: every lane ends with the
// same bits), then the rows out. Backward: d = Pol::add's sum over the rows, the same way.
template <SsKind K, class D, int LPR, int RR, int PAR>
__device__ __forceinline__ void short_segment(const Ctx<K, D, LPR>& c, int64_t st, int L) {
  using C = Ctx<K, D, LPR>;
  using P = typename C::P;
  constexpr int NV = C::NV, GL = LPR * PAR;
  const int lane = int(threadIdx.x & 31), slot = lane % LPR, p = (lane / LPR) % PAR;
  const int mine = L > p ? (L - p + PAR - 1) / PAR : 0;  // rows of this lane
  const int most = int(__reduce_max_sync(kFull, unsigned(mine)));
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
        Lane<D>::unpack(a[i], f);
#pragma unroll
        for (int k = 0; k < NV; ++k) m[k] = f[k] > m[k] ? f[k] : m[k];
      }
    }
#pragma unroll
    for (int o = LPR; o < GL; o <<= 1) {
#pragma unroll
      for (int k = 0; k < NV; ++k) {
        const float w = __shfl_xor_sync(kFull, m[k], o);
        m[k] = w > m[k] ? w : m[k];
      }
    }
#pragma unroll
    for (int i = 0; i < RR; ++i) {
      if (i >= most) break;
      if (i < mine) {
        float f[NV];
        Lane<D>::unpack(a[i], f);
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
      for (int k = 0; k < NV; ++k) s[k] += __shfl_xor_sync(kFull, s[k], o);
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
        Lane<D>::unpack(a[i], g);
        Lane<D>::unpack(b[i], y);
#pragma unroll
        for (int k = 0; k < NV; ++k) P::add(d[k], g[k], y[k]);
      }
    }
#pragma unroll
    for (int o = LPR; o < GL; o <<= 1) {
#pragma unroll
      for (int k = 0; k < NV; ++k) d[k] += __shfl_xor_sync(kFull, d[k], o);
    }
#pragma unroll
    for (int k = 0; k < NV; ++k) pr[k] = P::prep(d[k]);
  }
#pragma unroll
  for (int i = 0; i < RR; ++i) {
    if (i >= most) break;
    if (i < mine) {
      float f[NV], y[NV], o[NV];
      Lane<D>::unpack(a[i], f);
      if constexpr (!P::kFwd) Lane<D>::unpack(b[i], y);
#pragma unroll
      for (int k = 0; k < NV; ++k) o[k] = P::apply(f[k], P::kFwd ? 0.f : y[k], pr[k]);
      __stcs(c.out + v + int64_t(i) * PAR * LPR, Lane<D>::pack(o));
    }
  }
}

// One batch of kPieceU rows a thread (rows r0, r0 + RPI, ... below L), loads issued together.
template <SsKind K, class D, int LPR>
__device__ __forceinline__ void load_rows(const Ctx<K, D, LPR>& c, int64_t v, int r0, int L, uint4 (&a)[kPieceU],
                                          uint4 (&b)[kPieceU]) {
  constexpr int RPI = kThreads / LPR;
#pragma unroll
  for (int u = 0; u < kPieceU; ++u) {
    const int r = r0 + u * RPI;
    if (r < L) {
      a[u] = c.in0[v + int64_t(r) * LPR];
      if constexpr (!Ctx<K, D, LPR>::P::kFwd) b[u] = c.in1[v + int64_t(r) * LPR];
    }
  }
}

// Statistics combined over the lanes whose ids differ only in bits FIRST .. 16 (an xor
// butterfly: Pol::combine is commutative, so every lane ends with the same bits).
template <class P, int NV, int FIRST>
__device__ __forceinline__ void butterfly(typename P::Stat (&t)[NV]) {
#pragma unroll
  for (int o = FIRST; o < 32; o <<= 1) {
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      typename P::Stat w;
      if constexpr (P::kFwd) {
        w.m = __shfl_xor_sync(kFull, t[k].m, o);
        w.s = __shfl_xor_sync(kFull, t[k].s, o);
      } else {
        w = __shfl_xor_sync(kFull, t[k], o);
      }
      t[k] = P::combine(t[k], w);
    }
  }
}

// The statistics of a block of threads over a piece, merged: over the lanes of a slot
// (butterfly), then over the warps in a fixed order through shared memory; thread tid < LPR
// ends with slot tid's.
template <SsKind K, class D, int LPR>
__device__ __forceinline__ void block_merge(typename Ctx<K, D, LPR>::Stat (&t)[Ctx<K, D, LPR>::NV],
                                            typename Ctx<K, D, LPR>::Stat (*red)[LPR][Ctx<K, D, LPR>::NV]) {
  using C = Ctx<K, D, LPR>;
  using P = typename C::P;
  using Stat = typename C::Stat;
  constexpr int NV = C::NV;
  butterfly<P, NV, LPR>(t);
  const int warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
  if (lane < LPR) {
#pragma unroll
    for (int k = 0; k < NV; ++k) red[warp][lane][k] = t[k];
  }
  __syncthreads();
  if (int(threadIdx.x) < LPR) {
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      t[k] = red[0][threadIdx.x][k];
      for (int w = 1; w < kWarps; ++w) t[k] = P::combine(t[k], red[w][threadIdx.x][k]);
    }
  }
  __syncthreads();
}

// The long entry of piece q: the last i with piece_base[i] <= q (n entries).
__device__ __forceinline__ unsigned piece_entry(const Bins& b, unsigned n, unsigned q) {
  unsigned lo = 0, hi = n;
  while (hi - lo > 1) {
    const unsigned mid = (lo + hi) / 2;
    if (b.piece_base[mid] <= q) lo = mid;
    else hi = mid;
  }
  return lo;
}

__device__ __forceinline__ unsigned long_base(const Bins& b) {
  unsigned acc = 0;
#pragma unroll
  for (int l = 0; l < kLong; ++l) acc += b.ctl[kCount + l];
  return acc;
}

// Piece q's statistic (pass 1 of a long segment): one batch of loads, the online update,
// the block's merge; stored at partial[q][slot][k].
template <SsKind K, class D, int LPR>
__device__ __noinline__ void piece_stat(const Ctx<K, D, LPR>& c, const Bins& b, unsigned lbase, unsigned n, unsigned q,
                                        typename Ctx<K, D, LPR>::Stat (*red)[LPR][Ctx<K, D, LPR>::NV]) {
  using C = Ctx<K, D, LPR>;
  using P = typename C::P;
  using Stat = typename C::Stat;
  constexpr int NV = C::NV;
  const unsigned i = piece_entry(b, n, q);
  const int L = b.len[lbase + i];
  if (L < 0) return;  // a ghost: no statistic (the whole block returns)
  const int64_t st = b.start[lbase + i];
  const int tid = int(threadIdx.x), slot = tid % LPR;
  const int r0 = int(q - b.piece_base[i]) * b.piece_rows + tid / LPR;
  const int64_t v = st * LPR + slot;
  Stat t[NV];
#pragma unroll
  for (int k = 0; k < NV; ++k) t[k] = P::identity();
  uint4 a[kPieceU], bb[kPieceU];
  load_rows<K, D, LPR>(c, v, r0, L, a, bb);
#pragma unroll
  for (int u = 0; u < kPieceU; ++u) {
    if (r0 + u * (kThreads / LPR) < L) {
      float f[NV], y[NV];
      Lane<D>::unpack(a[u], f);
      if constexpr (!P::kFwd) Lane<D>::unpack(bb[u], y);
#pragma unroll
      for (int k = 0; k < NV; ++k) P::add(t[k], f[k], P::kFwd ? 0.f : y[k]);
    }
  }
  block_merge<K, D, LPR>(t, red);
  if (tid < LPR) {
    Stat* out = static_cast<Stat*>(b.partial) + (size_t(q) * LPR + size_t(tid)) * NV;
#pragma unroll
    for (int k = 0; k < NV; ++k) out[k] = t[k];
  }
}

// Short item u of class cl: its lane group's segment (start, rows), or (0, 0).
template <int LPR>
__device__ __forceinline__ void short_meta(const Bins& b, const unsigned* lbase, int cl, unsigned u, int64_t& st,
                                           int& L) {
  const int gl = LPR * par_of(cl);
  const unsigned idx = u * unsigned(32 / gl) + unsigned(int(threadIdx.x & 31) / gl);
  st = 0, L = 0;
  if (idx < b.ctl[kCount + cl]) st = b.start[lbase[cl] + idx], L = b.len[lbase[cl] + idx];
}

template <SsKind K, class D, int LPR, int CL>
__device__ __forceinline__ void short_dispatch(const Ctx<K, D, LPR>& c, int cl, int64_t st, int L) {
  if constexpr (CL >= 0) {
    if (cl == CL) {
      if constexpr (class_exists<LPR>(CL)) short_segment<K, D, LPR, rows_of(CL), par_of(CL)>(c, st, L);
    } else {
      short_dispatch<K, D, LPR, CL - 1>(c, cl, st, L);
    }
  }
}

// Persistent blocks (2 an SM: 128 registers; 3 and 4 measured slower, session 44): the pieces
// first (an atomic cursor, a block a piece), then each warp the short items, kChunk a grab
// from one cursor over the classes longest first, the next grab's atomic in flight while the
// chunk runs.
template <SsKind K, class D, int LPR>
__global__ void __launch_bounds__(kThreads, 2) lanes_kernel(Ctx<K, D, LPR> c, Bins b) {
  using C = Ctx<K, D, LPR>;
  __shared__ typename C::Stat red[kWarps][LPR][C::NV];
  __shared__ unsigned item_sh;
  const unsigned long long lw = *b.lng;
  const unsigned n = unsigned(lw >> 32), pieces = unsigned(lw);
  unsigned lbase[kLists];
  lbase[0] = 0;
#pragma unroll
  for (int l = 1; l < kLists; ++l) lbase[l] = lbase[l - 1] + b.ctl[kCount + l - 1];
  for (;;) {
    if (threadIdx.x == 0) item_sh = atomicAdd(&b.ctl[kPieceCursor], 1u);
    __syncthreads();
    const unsigned it = item_sh;
    __syncthreads();
    if (it >= pieces) break;
    piece_stat<K, D, LPR>(c, b, lbase[kLong], n, it, red);
  }
  // Item space: class kShort-1's items, then kShort-2's, ..., class 0's.
  unsigned first[kShort + 1];
  first[0] = 0;
#pragma unroll
  for (int k = 0; k < kShort; ++k) {
    const int cl = kShort - 1 - k;
    const unsigned g = unsigned(32 / (LPR * par_of(cl)));
    first[k + 1] = first[k] + (class_exists<LPR>(cl) ? (b.ctl[kCount + cl] + g - 1) / g : 0u);
  }
  const unsigned total = first[kShort];
  const int lane = int(threadIdx.x & 31);
  unsigned grab = 0;
  if (lane == 0) grab = atomicAdd(&b.ctl[kShortCursor], unsigned(kChunk));
  unsigned base = __shfl_sync(kFull, grab, 0);
  while (base < total) {
    if (lane == 0) grab = atomicAdd(&b.ctl[kShortCursor], unsigned(kChunk));
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
      if (u < total) short_meta<LPR>(b, lbase, cl[j], u - fk, st[j], L[j]);
      else st[j] = 0, L[j] = 0, cl[j] = -1;
    }
    // One copy of the segment code (not unrolled: unrolled, the compiler overlapped the
    // chunk's segments and spilled); the chunk's metadata shifts down in registers.
#pragma unroll 1
    for (int j = 0; j < kChunk; ++j) {
      short_dispatch<K, D, LPR, kShort - 1>(c, cl[0], st[0], L[0]);
#pragma unroll
      for (int q = 0; q + 1 < kChunk; ++q) st[q] = st[q + 1], L[q] = L[q + 1], cl[q] = cl[q + 1];
    }
    base = __shfl_sync(kFull, grab, 0);
  }
}

// A warp per (long entry, slot): the entry's pieces combined in a fixed order (lane l takes
// pieces l, l + 32, ... in turn, then a butterfly: Pol::combine is commutative, so every lane
// ends with the same bits, whatever the schedule).
template <SsKind K, class D, int LPR>
__global__ void __launch_bounds__(256) merge_kernel(Bins b) {
  using C = Ctx<K, D, LPR>;
  using P = typename C::P;
  using Stat = typename C::Stat;
  constexpr int NV = C::NV;
  const unsigned long long lw = *b.lng;
  const unsigned n = unsigned(lw >> 32), pieces = unsigned(lw);
  const unsigned lb = long_base(b);
  const Stat* part = static_cast<const Stat*>(b.partial);
  Stat* out = static_cast<Stat*>(b.seg_stat);
  const int lane = int(threadIdx.x & 31);
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t w = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; w < int64_t(n) * LPR; w += warps) {
    const unsigned i = unsigned(w / LPR);
    const int slot = int(w % LPR);
    if (b.len[lb + i] < 0) continue;  // a ghost (the whole warp)
    const unsigned p0 = b.piece_base[i], p1 = i + 1 < n ? b.piece_base[i + 1] : pieces;
    Stat t[NV];
#pragma unroll
    for (int k = 0; k < NV; ++k) t[k] = P::identity();
    for (unsigned p = p0 + unsigned(lane); p < p1; p += 32)
#pragma unroll
      for (int k = 0; k < NV; ++k) t[k] = P::combine(t[k], part[(size_t(p) * LPR + size_t(slot)) * NV + k]);
    butterfly<P, NV, 1>(t);
    if (lane == 0)
#pragma unroll
      for (int k = 0; k < NV; ++k) out[(size_t(i) * LPR + size_t(slot)) * NV + k] = t[k];
  }
}

// Pass 2 of every piece (a block a piece, persistent): the rows with the segment's constants;
// a ghost's rows 0.
template <SsKind K, class D, int LPR>
__global__ void __launch_bounds__(kThreads) write_kernel(Ctx<K, D, LPR> c, Bins b) {
  using C = Ctx<K, D, LPR>;
  using P = typename C::P;
  using Stat = typename C::Stat;
  constexpr int NV = C::NV, RPI = kThreads / LPR;
  const unsigned long long lw = *b.lng;
  const unsigned n = unsigned(lw >> 32), pieces = unsigned(lw);
  const unsigned lb = long_base(b);
  const Stat* ss = static_cast<const Stat*>(b.seg_stat);
  const int tid = int(threadIdx.x), slot = tid % LPR;
  for (unsigned q = blockIdx.x; q < pieces; q += gridDim.x) {
    const unsigned i = piece_entry(b, n, q);
    const int64_t st = b.start[lb + i];
    const int len = b.len[lb + i];
    const int L = len < 0 ? -len : len;
    const int r0 = int(q - b.piece_base[i]) * b.piece_rows + tid / LPR;
    const int64_t v = st * LPR + slot;
    if (len < 0) {
#pragma unroll
      for (int u = 0; u < kPieceU; ++u)
        if (r0 + u * RPI < L) c.out[v + int64_t(r0 + u * RPI) * LPR] = make_uint4(0, 0, 0, 0);
      continue;
    }
    uint4 a[kPieceU], bb[kPieceU];
    load_rows<K, D, LPR>(c, v, r0, L, a, bb);  // in flight while the constants load
    typename P::Prep pr[NV];
#pragma unroll
    for (int k = 0; k < NV; ++k) pr[k] = P::prep(ss[(size_t(i) * LPR + size_t(slot)) * NV + k]);
#pragma unroll
    for (int u = 0; u < kPieceU; ++u) {
      const int r = r0 + u * RPI;
      if (r < L) {
        float f[NV], y[NV], o[NV];
        Lane<D>::unpack(a[u], f);
        if constexpr (!P::kFwd) Lane<D>::unpack(bb[u], y);
#pragma unroll
        for (int k = 0; k < NV; ++k) o[k] = P::apply(f[k], P::kFwd ? 0.f : y[k], pr[k]);
        __stcs(c.out + v + int64_t(r) * LPR, Lane<D>::pack(o));
      }
    }
  }
}

// Resident blocks of a persistent kernel on the current device (occupancy x SMs), cached per
// kernel and device; an error when none is resident (DESIGN.md, "Launch viability").
template <class Kernel>
int persistent_grid(Kernel k, const char* name) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, int> cache;
  int dev = 0;
  SEGRED_CUDA_CHECK(cudaGetDevice(&dev), "segment_softmax: cudaGetDevice");
  const auto key = std::make_pair(reinterpret_cast<const void*>(k), dev);
  std::lock_guard<std::mutex> lk(mu);
  const auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  int per = 0, sms = 0;
  SEGRED_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k, kThreads, 0), name);
  SEGRED_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), name);
  SEGRED_CHECK(per >= 1, DeviceError, name, ": no viable launch configuration (occupancy reports 0 resident blocks of ",
               kThreads, " threads)");
  return cache[key] = per * sms;
}

// A device copy of n bytes into fresh (256-byte aligned) scratch.
inline void* aligned_copy(const void* src, int64_t n, Scratch& scratch, cudaStream_t s) {
  void* d = scratch.alloc<unsigned char>(n);
  SEGRED_CUDA_CHECK(cudaMemcpyAsync(d, src, size_t(n), cudaMemcpyDeviceToDevice, s), "segment_softmax: aligned copy");
  return d;
}

template <SsKind K, class D, int LPR, class Args>
void run_lpr(const Args& a, const detail::SegmentSoftmaxLanes& lg) {
  using C = Ctx<K, D, LPR>;
  using Stat = typename C::Stat;
  const SegmentSoftmaxProblem& pr = a.problem;
  const char* path = detail::segment_softmax_lanes_path(pr.op, pr.direction).data();
  const int64_t positions = pr.outer * pr.axis_len, S1 = pr.num_segments + 1, U = pr.outer * S1 + 1;
  // Inputs and output 16-byte aligned (a lane moves 16 bytes): otherwise through aligned copies.
  const int64_t bytes = positions * pr.inner * int64_t(sizeof(D));
  const void* in0 = a.in0;
  const void* in1 = a.in1;
  void* out = a.out;
  if (!is_aligned16(in0)) in0 = aligned_copy(in0, bytes, *a.scratch, a.stream);
  if (in1 && !is_aligned16(in1)) in1 = aligned_copy(in1, bytes, *a.scratch, a.stream);
  if (!is_aligned16(out)) out = a.scratch->template alloc<unsigned char>(bytes);
  // Bounds: entries (segments with rows) <= positions; long entries <= positions /
  // (max_short_rows + 1) + the ghosts (outer + 1); pieces <= positions / piece_rows + long entries.
  const int64_t entries = std::min(U, positions);
  const int64_t nl = std::min(entries, positions / (lg.max_short_rows + 1) + pr.outer + 1);
  const int64_t npieces = positions / lg.piece_rows + nl;
  LaunchCtx c;
  c.stream = a.stream;
  c.geo.segs = U;
  c.geo.positions = positions;
  c.geo.workers = 0;
  c.geo.index_bits = 64;
  c.outer = pr.outer;
  c.L = pr.axis_len;
  c.inner = pr.inner;
  c.S = pr.num_segments;
  c.path = path;
  constexpr int nctl = 1 + (kCtl + 1) / 2;  // the 64-bit long counter, then the control words
  Arena arena(*a.scratch, merge_space_bytes<int64_t>(*a.lay, *a.seg, c.geo, false) +
                              Arena::bytes<unsigned long long>(nctl) + Arena::bytes<int64_t>(entries) +
                              Arena::bytes<int>(entries) + Arena::bytes<unsigned>(nl) +
                              Arena::bytes<Stat>(npieces * LPR * C::NV) + Arena::bytes<Stat>(nl * LPR * C::NV));
  c.arena = &arena;
  prepare_merge_space<int64_t>(a.op, *a.lay, *a.seg, c, false);
  Bins b;
  b.q = static_cast<const int64_t*>(c.q);
  b.U = U;
  b.S1 = S1;
  unsigned long long* w = arena.take<unsigned long long>(nctl);
  b.lng = w;
  b.ctl = reinterpret_cast<unsigned*>(w + 1);
  b.start = arena.take<int64_t>(entries);
  b.len = arena.take<int>(entries);
  b.piece_base = arena.take<unsigned>(nl);
  b.partial = arena.take<Stat>(npieces * LPR * C::NV);
  b.seg_stat = arena.take<Stat>(nl * LPR * C::NV);
  b.max_short_rows = lg.max_short_rows;
  b.piece_rows = int(lg.piece_rows);
  SEGRED_CUDA_CHECK(cudaMemsetAsync(w, 0, nctl * sizeof(unsigned long long), a.stream), "segment_softmax: memset");
  const unsigned gb = unsigned(detail::ceil_div(U, 256));
  count_kernel<<<gb, 256, 0, a.stream>>>(b);
  check_launch("segment_softmax count_kernel");
  impl::record(path, gb, 256);
  place_kernel<<<gb, 256, 0, a.stream>>>(b);
  check_launch("segment_softmax place_kernel");
  impl::record(path, gb, 256);
  const C ctx{static_cast<const uint4*>(in0), static_cast<const uint4*>(in1), static_cast<uint4*>(out)};
  const int gl = persistent_grid(lanes_kernel<K, D, LPR>, "segment_softmax lanes_kernel");
  lanes_kernel<K, D, LPR><<<gl, kThreads, 0, a.stream>>>(ctx, b);
  check_launch("segment_softmax lanes_kernel");
  impl::record(path, gl, kThreads);
  const int gm = int(std::min<int64_t>(std::max<int64_t>(detail::ceil_div(nl * LPR, 8), 1), 4 * gl));
  merge_kernel<K, D, LPR><<<gm, 256, 0, a.stream>>>(b);
  check_launch("segment_softmax merge_kernel");
  impl::record(path, gm, 256);
  const int gw = int(std::min<int64_t>(std::max<int64_t>(npieces, 1), persistent_grid(write_kernel<K, D, LPR>,
                                                                                      "segment_softmax write_kernel")));
  write_kernel<K, D, LPR><<<gw, kThreads, 0, a.stream>>>(ctx, b);
  check_launch("segment_softmax write_kernel");
  impl::record(path, gw, kThreads);
  if (out != a.out)
    SEGRED_CUDA_CHECK(cudaMemcpyAsync(a.out, out, size_t(bytes), cudaMemcpyDeviceToDevice, a.stream),
                      "segment_softmax: output copy");
}

// The lane-group path for one kind: the instantiation of the call's lanes a row. Args:
// src/cuda/segment_softmax_impl.cuh's SsArgs.
template <SsKind K, class D, class Args>
void run(const Args& a) {
  const detail::SegmentSoftmaxLanes lg = detail::segment_softmax_lanes(a.problem);
  switch (lg.lpr) {
    case 1: run_lpr<K, D, 1>(a, lg); break;
    case 2: run_lpr<K, D, 2>(a, lg); break;
    case 4: run_lpr<K, D, 4>(a, lg); break;
    case 8: run_lpr<K, D, 8>(a, lg); break;
    case 16: run_lpr<K, D, 16>(a, lg); break;
    case 32: run_lpr<K, D, 32>(a, lg); break;
    default: throw DeviceError(detail::cat(a.op, ": the lane-group path cannot run this call (planner bug)"));
  }
}

}  // namespace segred::cuda::ssl
