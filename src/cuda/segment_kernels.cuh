// segment_reduce CUDA kernels (forward and backward), templated on the element
// type T, the index type Idx (int32_t for the .i32 paths, int64_t for .i64) and
// a functor Fn that says what is reduced or written per element.
//
// Versions (the work split and the merge space q are described in
// src/core/segment_geometry.h):
//   flat_reduce      inner == 1. One warp per tile of 512 merge items: the tile's
//                    positions and segment ends are staged in shared memory with
//                    coalesced loads (v6: 16-byte vectors for the 16-bit types when
//                    the data is 16-byte aligned); each lane merge-path-searches its
//                    16 (16-bit: 32) items there and walks them; a 5-step warp
//                    segmented scan (keys = segment ids, monotone across lanes) joins
//                    the lanes' partials. Session 34: the 16-bit forwards walk a
//                    tile with segment ends by positions instead (flat_lane_ended:
//                    lane l the tile's positions 32 l .. 32 l + 31 straight from x, a
//                    mask of the ends a lane, no staging, no search).
//   feat_reduce      inner > 1. A group of G lanes walks `items` merge items (32-128:
//                    detail::feat_items_rule);
//                    each position is one vector load per lane (V features).
//   fixup_tree       segment_reduce's fix-up (v5): fixup's phase 1, then the long
//                    segments' carries in chunks of 32 tiles across the whole grid
//                    and a tree per segment (see the kernel). fixup stays for the
//                    ragged softmax family. Session 12: the inner == 1 forward may
//                    instead finish its crossing segments inside flat_reduce
//                    (fuse_fixup below, src/cuda/fused_fixup_rule.h) when the plan
//                    says so (SegmentGeometry::fused_fixup).
//   fixup            the segments that cross tile edges (one cooperative launch):
//                    every tile leaves a carry (partial of the segment open at its
//                    end) and, when it completes a segment that began in an earlier
//                    tile, a head partial. Phase 1: one lane group per tile (one lane
//                    when inner == 1, else up to a warp over the features) combines the
//                    carries of the tiles the segment spans, in tile order, and its
//                    head, when they are <= 32 tiles; longer ones go to a list (an
//                    integer atomic; each entry's result does not depend on the list
//                    order). Phase 2 (after grid.sync): one block per listed segment,
//                    strided carries and a fixed-order tree.
//   flat_elementwise / feat_elementwise   backward of sum and mean (max/min: one
//                    read of x in src/cuda/segment_maxbwd.cuh): the same
//                    walk, writing every position's gradient (ghost positions 0);
//                    sum/mean with several workers per warp write the warp's rows
//                    side by side instead (feat_rows_elementwise, its own kernel).
//   prod_bwd_warp    backward of prod: one warp per (segment, 32 features):
//                    exclusive prefix products (forward pass, written), then
//                    exclusive suffix products (reverse pass, multiplied in): O(n),
//                    no division, zeros need no special case.
// Math per reduce: shared/SEMANTICS.md; the functors in src/ops/reduce_ops.h give
// identity, combine and the NaN rule, and is_extremum the max/min tie predicate.
// Every reduction order depends only on the problem shape: results are bitwise
// reproducible. No float atomics anywhere.
#pragma once
#include <cooperative_groups.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "src/core/segment_geometry.h"
#include "src/cuda/common.cuh"
#include "src/cuda/fused_fixup_rule.h"
#include "src/ops/reduce_ops.h"

namespace segred::cuda {

constexpr int kShortFix = 32;  // crossing segments spanning more tiles go to phase 2 of fixup
constexpr unsigned kFull = 0xffffffffu;

// Merge segment v -> output row*S + s, or false for a ghost (segment_geometry.h).
template <class Idx>
struct SegMap {
  Idx S;  // real segments per row
  Idx U;  // merge segments
  __device__ __forceinline__ bool real(Idx v, Idx& o) const {
    if (v <= 0 || v >= U) return false;
    const Idx u = v - 1;
    const Idx r = u < S + 1 ? Idx(0) : u / (S + 1);  // no division in row 0 (every 1-row call)
    const Idx s = u - r * (S + 1);
    if (s == S) return false;
    o = r * S + s;
    return true;
  }
};

// Merge-path search (CUB's MergePathSearch with b = 0, 1, 2, ...): the split of
// diagonal d into i segment ends and j positions. ends[v] = end of segment v;
// `ends` is a pointer or any type with operator[] (CgRead below).
template <class Idx, class P>
__device__ __forceinline__ void merge_search_range(const P& ends, Idx d, Idx lo, Idx hi, Idx& i, Idx& j) {
  while (lo < hi) {
    const Idx mid = lo + (hi - lo) / 2;
    if (Idx(ends[mid]) <= d - mid - 1)
      lo = mid + 1;
    else
      hi = mid;
  }
  i = lo;
  j = d - lo;
}

template <class Idx, class P>
__device__ __forceinline__ void merge_search(const P& ends, Idx nseg, Idx nel, Idx d, Idx& i, Idx& j) {
  merge_search_range(ends, d, d > nel ? d - nel : Idx(0), d < nseg ? d : nseg, i, j);
}

// The same split, found by galloping from the proportional guess
// d * nseg / (nseg + nel): exact for equal lengths, so a tile of 2M segments of
// 32 finds its start in ~4 dependent loads instead of ~21 (a binary search over
// global memory is latency, not bandwidth, and every tile pays it). The gallop
// stops after kGallopProbes probes (v5; v4 galloped on, ~2x the binary search's
// depth when the guess is far off, e.g. inside one 2^26 segment beside 1M
// singles): then a binary search of the bracket left, at most
// kGallopProbes + log2(nseg) probes. The split has one answer, so the cap
// changes the cost, never (i, j).
constexpr int kGallopProbes = 8;

template <class Idx, class P>
__device__ __forceinline__ void merge_search_global(const P& ends, Idx nseg, Idx nel, Idx d, Idx& i, Idx& j) {
  Idx lo = d > nel ? d - nel : Idx(0);
  Idx hi = d < nseg ? d : nseg;
  if (lo < hi) {
    const double frac = double(nseg) / double(nseg + nel);
    Idx g = Idx(double(d) * frac);
    g = g < lo ? lo : (g >= hi ? hi - 1 : g);
    // P(m): ends[m] <= d - m - 1  (the answer is > m). Find the first m with !P.
    if (Idx(ends[g]) <= d - g - 1) {
      Idx step = 1, a = g + 1;  // answer in [a, hi]
      for (int n = 0; n < kGallopProbes && a < hi; ++n) {
        const Idx probe = hi - a > step ? a + step - 1 : hi - 1;
        if (Idx(ends[probe]) <= d - probe - 1) {
          a = probe + 1;
          step *= 2;
        } else {
          hi = probe;
          break;
        }
      }
      lo = a;
    } else {
      Idx step = 1, b = g;  // answer in [lo, b]
      for (int n = 0; n < kGallopProbes && b > lo; ++n) {
        const Idx probe = b - lo > step ? b - step : lo;
        if (Idx(ends[probe]) <= d - probe - 1) {
          lo = probe + 1;
          break;
        }
        b = probe;
        step *= 2;
      }
      hi = b;
    }
  }
  merge_search_range(ends, d, lo, hi, i, j);
}

// ---------------------------------------------------------------- functors

// Forward: out[seg, f] = finish(start (+) x...).
template <class T, class Op, class Idx>
struct FwdFn {
  using Raw = T;
  using A = dacc_t<T>;
  struct Ctx {};
  T* out;
  const Idx* q;
  SegMap<Idx> map;
  Idx inner;
  A start;
  A empty_mean;
  bool mean;
  __device__ __forceinline__ A identity() const { return Op::template identity<A>(); }
  __device__ __forceinline__ A combine(A a, A b) const { return Op::combine(a, b); }
  __device__ __forceinline__ Ctx ctx(Idx, Idx) const { return {}; }
  __device__ __forceinline__ A value(const Ctx&, Idx, T raw) const { return A(ld(raw)); }
  __device__ __forceinline__ void finish(Idx v, Idx f, A acc) const {
    Idx o;
    if (!map.real(v, o)) return;
    A r = Op::combine(start, acc);
    if (mean) {
      const Idx n = q[v + 1] - q[v];
      r = n > 0 ? r / A(n) : empty_mean;
    }
    out[o * inner + f] = st<T>(r);
  }
};

// max/min backward: per (segment, feature) the tie count (split), the first or
// the last tied position (first/last). Exact integer combine. (Since session 7
// computed inside the backward's own kernel, src/cuda/segment_maxbwd.cuh, with
// fixup_tree only for the segments that cross tiles.)
template <class T, class Idx>
struct StatsFn {
  using Raw = T;
  using A = Idx;
  using F = dacc_t<T>;
  struct Ctx {
    F y;
    bool real;
  };
  const T* y;
  Idx* stats;
  SegMap<Idx> map;
  Idx inner;
  int tie;  // 0 split, 1 first, 2 last
  __device__ __forceinline__ A identity() const {
    return tie == 0 ? A(0) : tie == 1 ? std::numeric_limits<A>::max() : A(-1);
  }
  __device__ __forceinline__ A combine(A a, A b) const {
    return tie == 0 ? a + b : tie == 1 ? (a < b ? a : b) : (a > b ? a : b);
  }
  __device__ __forceinline__ Ctx ctx(Idx v, Idx f) const {
    Idx o;
    const bool r = map.real(v, o);
    return {r ? F(ld(y[o * inner + f])) : F(0), r};
  }
  // Whether position j of raw value `raw` is tied to the segment's output (the tie
  // predicate of SEMANTICS.md), and its value for the statistic given that.
  __device__ __forceinline__ bool tied(const Ctx& c, T raw) const {
    return c.real && ops::is_extremum(F(ld(raw)), c.y);
  }
  __device__ __forceinline__ A of_tie(bool t, Idx j) const {
    if (!t) return identity();
    return tie == 0 ? A(1) : j;
  }
  // of_tie(tied(c, raw), j), written out: in that form ptxas gave feat_maxmin_bwd<bf16,
  // i32, 8> 80 registers (3 blocks per SM) instead of 64 (4), session 30.
  __device__ __forceinline__ A value(const Ctx& c, Idx j, T raw) const {
    if (!c.real || !ops::is_extremum(F(ld(raw)), c.y)) return identity();
    return tie == 0 ? A(1) : j;
  }
  __device__ __forceinline__ void finish(Idx v, Idx f, A acc) const {
    Idx o;
    if (map.real(v, o)) stats[o * inner + f] = acc;
  }
};

// Backward of sum, mean, max, min: the gradient of one position.
template <class T, class Idx>
struct BwdFn {
  using Raw = T;
  using A = dacc_t<T>;
  struct Ctx {
    A g, y;
    Idx stat;
    bool real;
  };
  const T* g;
  const T* y;
  const Idx* stats;
  const Idx* q;
  SegMap<Idx> map;
  Idx inner;
  int kind;  // 0 sum, 1 mean, 2 max/min
  int tie;   // 0 split, 1 first, 2 last
  __host__ __device__ bool needs_x() const { return kind == 2; }
  __device__ __forceinline__ Ctx ctx(Idx v, Idx f) const {
    Ctx c{A(0), A(0), Idx(0), false};
    Idx o;
    if (!map.real(v, o)) return c;
    c.real = true;
    c.g = A(ld(g[o * inner + f]));
    if (kind == 1) {
      const Idx n = q[v + 1] - q[v];
      c.g = c.g * (A(1) / A(n > 0 ? n : 1));
    } else if (kind == 2) {
      c.y = A(ld(y[o * inner + f]));
      c.stat = stats[o * inner + f];
    }
    return c;
  }
  __device__ __forceinline__ T elem(const Ctx& c, Idx j, T raw) const {
    A v = A(0);
    if (c.real) {
      if (kind != 2) {
        v = c.g;
      } else if (ops::is_extremum(A(ld(raw)), c.y)) {
        v = tied_value(c, j);
      }
    }
    return st<T>(v);
  }
  // max/min: the gradient of a tied position j of a real segment (elem's, once the
  // tie predicate has held). split: g / k; first/last: g at the one position.
  __device__ __forceinline__ A tied_value(const Ctx& c, Idx j) const {
    if (tie == 0) return c.g / A(c.stat);
    return j == c.stat ? c.g : A(0);
  }
  // elem of a position whose tie predicate is known (`t`: StatsFn::tied), kind 2.
  __device__ __forceinline__ T elem_of_tie(const Ctx& c, Idx j, bool t) const {
    return st<T>(c.real && t ? tied_value(c, j) : A(0));
  }
};

// ---------------------------------------------------------------- flat (inner == 1)

template <class Raw>
constexpr int kIpl = detail::flat_items_per_lane(int(sizeof(Raw)));  // merge items per lane
template <class Raw>
constexpr int kTile = 32 * kIpl<Raw>;  // merge items per warp tile

// 16-byte vectors (Vec): the flat kernels stage positions with them, the feature
// kernels load rows with them.
template <class Raw, int V>
struct alignas(sizeof(Raw) * V) Vec {
  Raw v[V];
};

template <class Raw, int V>
__device__ __forceinline__ Vec<Raw, V> load_vec(const Raw* p) {
  return *reinterpret_cast<const Vec<Raw, V>*>(p);
}

__device__ __forceinline__ bool aligned16_dev(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
// A 16-bit element from its bits (the low half of a staged word is the lower address).
template <class Raw>
__device__ __forceinline__ Raw raw_from_bits(uint16_t b) {
  static_assert(sizeof(Raw) == 2, "16-bit types only");
  Raw r;
  memcpy(&r, &b, 2);
  return r;
}
template <class Raw>
__device__ __forceinline__ uint16_t bits_of(Raw r) {
  static_assert(sizeof(Raw) == 2, "16-bit types only");
  uint16_t b;
  memcpy(&b, &r, 2);
  return b;
}
// Whether the flat kernels stage with vectors: the 16-bit types only. Their
// per-element staging issued 64-byte warp loads and is L1-bound (ncu, session 4:
// bf16 flat_reduce at 86% memory throughput, 27% DRAM). A 4-byte element load
// already moves 128 bytes per warp, and a lane's 4 elements of one vector land
// 2-way bank-conflicted in the padded layout (lane l's k-th store at word
// 4 l + l / 4 + ..., banks repeat every 16 lanes): for fp32 vector staging
// trades 11 load instructions for 16 extra shared-store cycles and 8 registers
// (64 -> 48 warps), against a kernel already at 51% L1/shared throughput; fp32
// keeps the per-element staging (with the unsigned index). 8-byte types likewise.
template <class Raw>
constexpr bool kFlatVec = sizeof(Raw) == 2;

// Staged positions (Raw) and tile-relative segment ends (int16: at most 1024).
// Positions are padded by kPad elements (4 bytes for the 16-bit types, one
// element otherwise) per kIpl: lane l walks positions near l * kIpl, and without
// the pad the 32 lanes of a warp hit 2 banks (a 16-way conflict on every staged
// load of the walk); with it, lane l's words start in bank 17 l mod 32 (4- and
// 2-byte types). The 4-byte pad keeps 16-bit pairs (2m, 2m + 1) in one word, so
// they are staged and written back as 32-bit shared accesses. v6: 16-bit tiles
// are staged from the 16-byte boundary at or before the tile's first position
// (kVecE<Raw> - 1 elements more at most), so that the staging is 16-byte vector
// loads (and the elementwise write-back 16-byte stores) instead of one 64-byte
// warp load per element (kFlatVec). Index arithmetic is unsigned: a signed
// idx / kIpl costs three more instructions per staged or walked element.
template <class Raw>
constexpr int kVecE = 16 / int(sizeof(Raw));  // elements per 16-byte vector
template <class Raw>
constexpr int kPad = sizeof(Raw) == 2 ? 2 : 1;
template <class Raw>
__device__ __forceinline__ int spad(int idx) {
  const unsigned u = unsigned(idx);
  return int(u + u / unsigned(kIpl<Raw>) * unsigned(kPad<Raw>));
}
// Padded distance between positions idx and idx + 32.
template <class Raw>
constexpr int kRow = 32 + 32 / kIpl<Raw> * kPad<Raw>;
static_assert(32 % detail::flat_items_per_lane(4) == 0 && 32 % detail::flat_items_per_lane(2) == 0,
              "kRow needs kIpl to divide 32");
template <class Raw>
constexpr int kTilePadded = (kTile<Raw> + kVecE<Raw>) + ((kTile<Raw> + kVecE<Raw>) / kIpl<Raw> + 1) * kPad<Raw>;
// Vectors a warp stages per tile, and the rounds of 32 lanes that takes.
template <class Raw>
constexpr int kStageRounds = ((kTile<Raw> + kVecE<Raw> - 1) / kVecE<Raw> + 1 + 31) / 32;

template <class Raw, class Idx>
constexpr size_t flat_smem_per_warp() {
  return (size_t(kTilePadded<Raw>) * sizeof(Raw) + size_t(kTile<Raw> + 1) * sizeof(int16_t) + 15) / 16 * 16;
}

// Global loads that bypass L1: for data another block wrote earlier in the same
// (cooperative) kernel, read after a grid.sync.
template <class T>
struct CgRead {
  const T* p;
  __device__ __forceinline__ T operator[](int64_t k) const { return __ldcg(p + k); }
};

// Tile w's start in the merge space (w in [0, W], W + 1 boundaries), so the main
// kernels read their coordinates instead of searching. `q` as in
// segment_geometry.h; run by the prepare kernel (src/cuda/segment_reduce.cu)
// after it has written q.
template <class Idx, class Q>
__device__ __forceinline__ void partition_tile(const Q& q1, Idx nseg, Idx nel, int64_t w, int64_t items,
                                               Idx* tile_i, Idx* tile_j) {
  const int64_t total = int64_t(nseg) + int64_t(nel);
  const Idx d = Idx(w * items < total ? w * items : total);
  Idx i, j;
  merge_search_global(q1, nseg, nel, d, i, j);  // q1[v] = q[v + 1]: the end of segment v
  tile_i[w] = i;
  tile_j[w] = j;
}

// Warp prologue shared by the flat kernels: tile coordinates and staging.
// Position p of the tile (tile-relative, [0, ne)) is staged at s_x[spad(o + p)].
template <class Raw, class Idx>
struct FlatTile {
  Idx i0, j0, i1, j1;
  int ns, ne;
  int o;  // j0 - jb: the staged elements before the tile's first position (0 when !vec)
  Raw* s_x;
  int16_t* s_e;
};

// `vec`: x (when loaded) and every pointer the caller vectorises are 16-byte
// aligned; the tile is then staged from jb = j0 rounded down to a whole vector,
// one 16-byte load per vector, all of a lane's loads in flight before its first
// shared store. A vector that would reach past the tensor's last position (nel)
// is loaded element by element; only positions in [j0, j1) are stored.
template <class Raw, class Idx>
__device__ __forceinline__ FlatTile<Raw, Idx> flat_stage(const Raw* __restrict__ x, bool load_x, bool vec, Idx nel,
                                                         const Idx* __restrict__ q, const Idx* __restrict__ tile_i,
                                                         const Idx* __restrict__ tile_j, Idx w,
                                                         unsigned char* smem_warp, int lane) {
  constexpr int VE = kVecE<Raw>;
  constexpr int R = kStageRounds<Raw>;
  FlatTile<Raw, Idx> t;
  t.s_x = reinterpret_cast<Raw*>(smem_warp);
  t.s_e = reinterpret_cast<int16_t*>(smem_warp + size_t(kTilePadded<Raw>) * sizeof(Raw));
  t.i0 = tile_i[w];
  t.j0 = tile_j[w];
  t.i1 = tile_i[w + 1];
  t.j1 = tile_j[w + 1];
  t.ns = int(t.i1 - t.i0);
  t.ne = int(t.j1 - t.j0);
  t.o = vec ? int(t.j0 % Idx(VE)) : 0;  // j0 >= 0
  if (load_x) {
    if (kFlatVec<Raw> && vec) {
      const Idx jb = t.j0 - Idx(t.o);
      const Raw* xb = x + jb;
      const int lo = t.o, hi = t.o + t.ne;  // staged elements [lo, hi), relative to jb
      // One vector per lane and round; a vector past nel (the tensor's last one
      // only) is read element by element when stored.
      Vec<Raw, VE> v[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int a = (r * 32 + lane) * VE;
        if (a < hi && jb + Idx(a + VE) <= nel) v[r] = load_vec<Raw, VE>(xb + a);
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int a = (r * 32 + lane) * VE;
        if (a >= lo && a + VE <= hi) {  // then jb + a + VE <= j1 <= nel
          if constexpr (sizeof(Raw) == 2) {  // 4 words: pairs never straddle a pad
            const uint4 b = *reinterpret_cast<const uint4*>(&v[r]);
            const uint32_t wd[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
            for (int m = 0; m < 4; ++m) *reinterpret_cast<uint32_t*>(t.s_x + spad<Raw>(a + 2 * m)) = wd[m];
          } else {
#pragma unroll
            for (int e = 0; e < VE; ++e) t.s_x[spad<Raw>(a + e)] = v[r].v[e];
          }
        } else if (a < hi) {
          const bool whole = jb + Idx(a + VE) <= nel;
#pragma unroll
          for (int e = 0; e < VE; ++e)
            if (a + e >= lo && a + e < hi) t.s_x[spad<Raw>(a + e)] = whole ? v[r].v[e] : xb[a + e];
        }
      }
    } else {
      // One per-lane pointer into x and into the tile, constant offsets per k:
      // the loads and stores take immediate offsets. (Written as x + t.j0 and
      // xs[32 k + lane], nvcc formed a 64-bit address per element, reloading x
      // from the constant bank each time: ~12 instructions per staged element,
      // 230 of flat_reduce's 826 per warp on 2M x 32 fp32; ncu source counters,
      // session 5.) All loads are issued before the first shared store, and the
      // stores are unconditional (slots past ne get 0; no kernel reads them):
      // under a predicate nvcc rebuilt the shared address per store.
      const Raw* __restrict__ xl = x + (int64_t(t.j0) + lane);
      Raw* sl = t.s_x + spad<Raw>(lane);  // spad(32 k + lane) = spad(lane) + k * kRow (kIpl divides 32)
      const int left = t.ne - lane;       // positions this lane stages: k * 32 < left
      Raw v[kIpl<Raw>];
#pragma unroll
      for (int k = 0; k < kIpl<Raw>; ++k) v[k] = k * 32 < left ? xl[k * 32] : Raw(0);
#pragma unroll
      for (int k = 0; k < kIpl<Raw>; ++k) sl[k * kRow<Raw>] = v[k];
    }
  }
  for (int k = lane; k < t.ns; k += 32) t.s_e[k] = int16_t(q[t.i0 + k + 1] - t.j0);
  __syncwarp();
  return t;
}

// The lane's share of the tile: items [ld0, ld1) of the tile's merge items,
// starting at (ti, tj) (segment, position; tile-relative).
template <int IPL, class E>
__device__ __forceinline__ void flat_lane_split(const E* s_e, int ns, int ne, int lane, int& ti, int& tj,
                                                int& items) {
  const int tot = ns + ne;
  const int ld0 = min(lane * IPL, tot);
  const int ld1 = min(ld0 + IPL, tot);
  merge_search(s_e, ns, ne, ld0, ti, tj);
  items = ld1 - ld0;
}

// The lane's kIpl position slots from staged index b (the tile's o + tj), in
// order: f(k, value of position k). Slots past the lane's positions are read
// too (they lie inside the warp's shared block: at most kIpl + 2 elements past
// the staged tile's end; s_e follows s_x); the caller decides what to combine.
template <class Raw, class Idx, class F>
__device__ __forceinline__ void flat_lane_slots(const FlatTile<Raw, Idx>& t, int b, F&& f) {
  constexpr int IPL = kIpl<Raw>;
  if constexpr (sizeof(Raw) == 2) {
    // Words of staged pairs (2m, 2m + 1) from eb = b rounded down to even: word
    // w holds staged elements eb + 2 w, eb + 2 w + 1 (pairs never straddle a
    // pad); one pad (one word) at most lies inside the lane's IPL / 2 + 1 words.
    const int par = b & 1, eb = b - par;
    // The IPL / 2 + 2 words from w0 are loaded with immediate offsets; word w of
    // the lane is wr[w], or wr[w + 1] past the pad (a select, not an address).
    const uint32_t* w0 = reinterpret_cast<const uint32_t*>(t.s_x + spad<Raw>(eb));
    const int lim = (IPL - int(unsigned(eb) % unsigned(IPL))) / 2;  // words from lim on: one word further
    uint32_t wr[IPL / 2 + 2], wd[IPL / 2 + 1];
#pragma unroll
    for (int w = 0; w < IPL / 2 + 2; ++w) wr[w] = w0[w];
#pragma unroll
    for (int w = 0; w <= IPL / 2; ++w) wd[w] = w >= lim ? wr[w + 1] : wr[w];
    const unsigned sh = unsigned(par) * 16u;
#pragma unroll
    for (int w = 0; w < IPL / 2; ++w) {
      const uint32_t pr = __funnelshift_r(wd[w], wd[w + 1], sh);  // positions 2 w, 2 w + 1
      f(2 * w, raw_from_bits<Raw>(uint16_t(pr & 0xffffu)));
      f(2 * w + 1, raw_from_bits<Raw>(uint16_t(pr >> 16)));
    }
  } else {
    // IPL + kPad slots from s0 with immediate offsets; slot k is v[k], or
    // v[k + kPad] past the pad (a select instead of a per-slot address).
    static_assert(kPad<Raw> == 1, "one pad element");
    const Raw* s0 = t.s_x + spad<Raw>(b);
    const int lim = IPL - int(unsigned(b) % unsigned(IPL));  // slots from lim on: past one pad
    Raw v[IPL + 1];
#pragma unroll
    for (int k = 0; k <= IPL; ++k) v[k] = s0[k];
#pragma unroll
    for (int k = 0; k < IPL; ++k) f(k, k >= lim ? v[k + 1] : v[k]);
  }
}

// flat_reduce's walk without run loops (session 8, H13), for functors whose
// context does not depend on the segment (FwdFn: every forward). The run loop
// below it (one run per segment piece, pieces between pads, loops whose trip
// counts differ per lane) was ~400 of the 714 warp instructions per tile on
// 2M x 32 fp32 (bf16: ~515 of 1110; ncu source counters at 99b3069, session 8):
// the warp issued the union of every lane's control paths. Here the lane's kIpl
// merge items are walked as kIpl position slots, fully unrolled and predicated:
//   1. the lane's segment ends (a short loop: 0-1 on 2M x 32): bit r of `rst`
//      for an end with r of the lane's positions before it; np positions;
//   2. slot k < np: acc = combine(acc, value(position k)); before it, when bit k
//      is set, `done` takes acc and acc restarts at the identity (one segment
//      end or several at the same position); with one end, `done` is `first`;
//   3. lanes with 2+ ends (rare) re-walk their first segment's positions and
//      the segments that begin and end inside the lane (empty ones included)
//      from shared memory, and finish the latter.
// Every segment sees the old combine sequence (identity, then its positions in
// order), `first`, the open partial and the segment index are the old ones:
// bitwise the old results. On return ti is the lane's open segment and items 0.
template <class Fn>
constexpr bool kFlatFixedWalk = std::is_empty<typename Fn::Ctx>::value;

template <class Fn, class Raw, class Idx, class A, class C>
__device__ __forceinline__ void flat_walk_fixed(const Fn& fn, const C& c, const FlatTile<Raw, Idx>& t, int& ti, int& tj,
                                                int& items, A& acc, A& first, bool& done_first) {
  constexpr int IPL = kIpl<Raw>;
  static_assert(IPL <= 32, "one bit per slot");
  // A full tile without a segment end (warp-uniform: the tile's coordinates):
  // every lane holds IPL positions of the one open segment, so the walk is the
  // plain fold over the same slots in the same order (bitwise the general walk
  // with rst = 0, np = IPL), without its per-slot reset test and k < np
  // predicate: ~2 instructions per element instead of ~5 (session 8's readings of
  // H13: the long-segment rows lost 5-17% to that predicate work). Nearly every
  // tile of a long segment takes it (64 x 1M: 2047 of 2048 per segment).
  if (t.ns == 0 && t.ne == kTile<Raw>) {
    const Idx jl = t.j0 + Idx(tj);
    flat_lane_slots(t, t.o + tj, [&](int k, Raw xr) { acc = fn.combine(acc, fn.value(c, jl + k, xr)); });
    tj += items;
    items = 0;
    return;
  }
  unsigned rst = 0;
  int nel = 0;
  while (ti + nel < t.ns) {
    const int r = int(t.s_e[ti + nel]) - tj;  // >= 0 (merge path: s_e[ti] >= tj)
    if (r + nel >= items) break;              // the end's merge item is past the lane's
    rst |= 1u << r;                            // r + nel < items <= IPL
    ++nel;
  }
  const int np = items - nel;
  const int b = t.o + tj;  // staged index of the lane's first position
  const Idx jl = t.j0 + Idx(tj);
  // `done`: the partial that the last reset dropped (the lane's first segment's
  // when nel == 1; nel >= 2 re-walks it below).
  A done = acc;
  flat_lane_slots(t, b, [&](int k, Raw xr) {
    if ((rst >> k) & 1u) {
      done = acc;
      acc = fn.identity();
    }
    if (k < np) acc = fn.combine(acc, fn.value(c, jl + k, xr));
  });
  first = done;
  if (nel >= 2) {  // rare: segments wholly inside the lane (the lane's ends 1 .. nel - 1)
    auto walk = [&](int p0, int p1) {
      A a = fn.identity();
      for (int p = p0; p < p1; ++p) a = fn.combine(a, fn.value(c, jl + p, t.s_x[spad<Raw>(b + p)]));
      return a;
    };
    int p0 = int(t.s_e[ti]) - tj;
    first = walk(0, p0);
    for (int m = 1; m < nel; ++m) {
      const int p1 = int(t.s_e[ti + m]) - tj;
      fn.finish(t.i0 + Idx(ti + m), 0, walk(p0, p1));
      p0 = p1;
    }
  }
  done_first = nel > 0;
  ti += nel;
  tj += np;
  items = 0;
}

// Warp segmented inclusive scan of (open segment, partial) in lane order; keys
// are monotone. Lane l returns the combine of the partials of lanes <= l with its key.
template <class Fn, class Idx, class A>
__device__ __forceinline__ A flat_warp_scan(const Fn& fn, Idx key, A val, int lane) {
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const Idx k2 = __shfl_up_sync(kFull, key, off);
    const A v2 = __shfl_up_sync(kFull, val, off);
    if (lane >= off && k2 == key) val = fn.combine(v2, val);
  }
  return val;
}

// Session 10: a full 16-bit tile without a segment end, read straight from x
// (16-byte aligned) into registers, without the shared-memory staging: lane l
// folds positions j0 + 32 l .. j0 + 32 l + 31 in order, exactly the slots
// flat_walk_fixed's plain fold combines, so the partials and the warp scan after
// them are bitwise the staged path's. The lane's 32 positions start o = j0 mod 8
// elements into the aligned vector at jb + 32 l (jb = j0 - o): five 16-byte loads
// (the fifth only when o > 0) give 20 words, and position pair m is the funnel
// shift of words m + o / 2 and m + o / 2 + 1 by 16 (o & 1) bits; o is the same
// for the whole warp, so the word offset is a uniform switch over 4 unrolled
// copies instead of a register index. ncu at c29931d (1d_64x1M bf16 sum fwd):
// flat_reduce issue-bound (~19 warp instructions per element of a lane, SM 76%,
// DRAM 62%), the staging and its shared stores and loads a large part of them.
// Session 34: the same words serve the tiles with segment ends (flat_lane_ended);
// `vec` false (x not 16-byte aligned) reads them element by element, the same
// words, so a misaligned call folds the same values in the same order; `live`
// false (a lane with no position in its tile) loads nothing (words 0).
template <class Raw, class Idx>
__device__ __forceinline__ void flat_lane_words(const Raw* __restrict__ x, Idx j0, Idx nel, int lane, bool vec,
                                                bool live, uint32_t (&wd)[20]) {
  static_assert(sizeof(Raw) == 2 && kIpl<Raw> == 32, "16-bit tiles: 32 positions per lane");
  const int o = int(j0 % Idx(8));
  const Idx jb = j0 - Idx(o) + Idx(32 * lane);  // 16-byte aligned when vec
  // Session 35: a lane whose vectors all lie before nel (every lane but the
  // tensor's last few) takes them with no per-vector test: the five tests and
  // their element-load branches were ~70 of flat_lane_ended's 690 warp
  // instructions a tile (ncu source counters, session 34 run 2).
  if (vec && live && jb + Idx(o > 0 ? 40 : 32) <= nel) {
#pragma unroll
    for (int r = 0; r < 5; ++r) {
      const uint4 b =
          r < 4 || o > 0 ? *reinterpret_cast<const uint4*>(x + jb + Idx(8 * r)) : make_uint4(0u, 0u, 0u, 0u);
      wd[4 * r] = b.x;
      wd[4 * r + 1] = b.y;
      wd[4 * r + 2] = b.z;
      wd[4 * r + 3] = b.w;
    }
    return;
  }
#pragma unroll
  for (int r = 0; r < 5; ++r) {
    uint4 b = make_uint4(0u, 0u, 0u, 0u);
    if (live && (r < 4 || o > 0)) {
      if (vec && jb + Idx(8 * r + 8) <= nel) {
        b = *reinterpret_cast<const uint4*>(x + jb + Idx(8 * r));
      } else {  // misaligned data, or the tensor's last vector: the positions before nel only
        uint32_t e[4] = {0u, 0u, 0u, 0u};
#pragma unroll
        for (int k = 0; k < 8; ++k)
          if (jb + Idx(8 * r + k) < nel) e[k / 2] |= uint32_t(bits_of(x[jb + Idx(8 * r + k)])) << (16 * (k & 1));
        b = make_uint4(e[0], e[1], e[2], e[3]);
      }
    }
    wd[4 * r] = b.x;
    wd[4 * r + 1] = b.y;
    wd[4 * r + 2] = b.z;
    wd[4 * r + 3] = b.w;
  }
}
// f(k, position k's value), k = 0 .. 31, in order, from the words of flat_lane_words
// (o = j0 mod 8).
template <int C, class Raw, class F>
__device__ __forceinline__ void flat_lane_pairs(const uint32_t (&wd)[20], unsigned sh, F& f) {
#pragma unroll
  for (int m = 0; m < 16; ++m) {
    const uint32_t pr = __funnelshift_r(wd[m + C], wd[m + C + 1], sh);
    f(2 * m, raw_from_bits<Raw>(uint16_t(pr & 0xffffu)));
    f(2 * m + 1, raw_from_bits<Raw>(uint16_t(pr >> 16)));
  }
}
template <class Raw, class F>
__device__ __forceinline__ void flat_lane_each(const uint32_t (&wd)[20], int o, F&& f) {
  const unsigned sh = unsigned(o & 1) * 16u;
  switch (o >> 1) {
    case 0: flat_lane_pairs<0, Raw>(wd, sh, f); break;
    case 1: flat_lane_pairs<1, Raw>(wd, sh, f); break;
    case 2: flat_lane_pairs<2, Raw>(wd, sh, f); break;
    default: flat_lane_pairs<3, Raw>(wd, sh, f); break;
  }
}
template <class Fn, class Raw, class Idx, class A, class Ctx>
__device__ __forceinline__ void flat_fold_direct(const Fn& fn, const Ctx& c, const Raw* __restrict__ x, Idx j0,
                                                 Idx nel, int lane, A& acc) {
  uint32_t wd[20];
  flat_lane_words(x, j0, nel, lane, true, true, wd);
  const Idx jl = j0 + Idx(32 * lane);
  flat_lane_each<Raw>(wd, int(j0 % Idx(8)), [&](int k, Raw xr) { acc = fn.combine(acc, fn.value(c, jl + Idx(k), xr)); });
}

// Session 16: a full tile without a segment end read with coalesced loads: the
// tile's 16-byte vectors from jb = j0 - o (o = j0 mod VE) in rounds of 32 lanes,
// lane l taking vector 32 r + l of round r (kTile / (32 VE) rounds: 4 for every
// dtype), so each load instruction of the warp covers 512 contiguous bytes where
// the lane-contiguous form above (lane l's 32 positions 32 l .. 32 l + 31)
// spreads a warp's load over the tile's whole 2 KB. The o positions before
// the tile (lane 0's first vector) are not combined; the o positions at the
// tile's end past the last round (j0 + kTile - o .. j0 + kTile - 1, always inside
// the tile, so below nel) are lane 0's, read as scalars. The lanes' partials
// then meet in a shuffle butterfly, which leaves the tile total in every lane.
// Deterministic (the order depends only on j0, not on the address: data that is
// not 16-byte aligned is read in the same order with element loads, `vec`
// false, so an aligned and a misaligned call give the same bits), but not the
// staged fold's order: a sum's bits differ from the staged and lane-contiguous forms.
// H200, session 16 (bench/NOTES.md; same process, against the lane-contiguous
// form): bf16 sum 0.84 on 1d_64x1M and 0.92 on 1d_one2^26_1Mx1, max 0.94 and 0.97,
// the rows without full tiles 0.99-1.00. So the 16-bit forwards take it. For float32
// the coalesced kernel was 0.95-1.06 of the staged one (the extra path costs the
// general walk registers: 1d_2Mx32, whose tiles all hold segment ends, 1.05), and a
// lane-contiguous read 1.06-1.16: float32 sum and mean take it on long segments only
// (the plan's flat_form_rule, src/core/segment_geometry.h), the rest is staged.
template <class Fn, class Raw, class Idx, class Ctx, class A = typename Fn::A>
__device__ __forceinline__ A flat_fold_coalesced(const Fn& fn, const Ctx& c, const Raw* __restrict__ x, Idx j0,
                                                 bool vec, int lane) {
  constexpr int VE = kVecE<Raw>, R = kTile<Raw> / (32 * VE);
  static_assert(kTile<Raw> % (32 * VE) == 0, "whole rounds of 32 vectors");
  const int o = int(j0 % Idx(VE));
  const Idx jb = j0 - Idx(o);  // >= 0; 16-byte aligned when vec
  Raw ex[VE > 1 ? VE - 1 : 1];  // lane 0's tail positions, loaded first (always inside the tile)
#pragma unroll
  for (int e = 0; e < VE - 1; ++e) ex[e] = (lane == 0 && e < o) ? x[jb + Idx(kTile<Raw> + e)] : Raw{};
  A acc = fn.identity();
  // Position jb + rel of round r, element e (rel = (32 r + lane) VE + e) in that
  // order; rel < o lies before the tile (lane 0, round 0).
  auto take = [&](int r, int e, Raw xr) {
    const int rel = (32 * r + lane) * VE + e;
    if (r > 0 || rel >= o) acc = fn.combine(acc, fn.value(c, jb + Idx(rel), xr));
  };
  if (vec) {
    Vec<Raw, VE> v[R];
#pragma unroll
    for (int r = 0; r < R; ++r) v[r] = load_vec<Raw, VE>(x + jb + Idx((32 * r + lane) * VE));
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int e = 0; e < VE; ++e) take(r, e, v[r].v[e]);
  } else {  // misaligned data: element loads, the same order; a rolled loop keeps the vector path's registers
#pragma unroll 1
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int e = 0; e < VE; ++e) take(r, e, x[jb + Idx((32 * r + lane) * VE + e)]);
  }
#pragma unroll
  for (int e = 0; e < VE - 1; ++e)
    if (lane == 0 && e < o) acc = fn.combine(acc, fn.value(c, jb + Idx(kTile<Raw> + e), ex[e]));
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc = fn.combine(acc, __shfl_xor_sync(kFull, acc, off));
  return acc;
}

// How flat_reduce reads a full tile without a segment end: its template
// argument, one instantiation per form (so that a form's registers do not
// depend on the others' code), chosen on the host per call (flat_form in
// segment_reduce_impl.cuh).
enum class FlatForm : int { Staged = 0, Lane = 1, Coalesced = 2 };
// Whether the lane-contiguous form exists for Fn: the 16-bit types.
template <class Fn>
constexpr bool kFlatLaneForm = sizeof(typename Fn::Raw) == 2;

// ---------------------------------------------------------------- fused fix-up
// flat_reduce's crossing segments, combined inside flat_reduce itself (session
// 12): the rule and the orders are in src/cuda/fused_fixup_rule.h. It replaces
// the fixup_tree launch of the inner == 1 forward for float accumulators (ncu,
// session 10: fixup_tree took 5-21 us per call, mostly at its grid.syncs, plus a
// dependent launch). double keeps fixup_tree (a 64-bit value and its flag do
// not fit one store).
template <class Idx>
struct FuseFix {
  unsigned long long* pub = nullptr;   // [W + 1] (flag, carry bits), zeroed by prepare; null: fixup_tree follows
  unsigned long long* part = nullptr;  // [W + 1] (flag, run partial bits), zeroed by prepare
  Idx items = 0;                       // merge items per tile
  Idx U = 0;                           // merge segments (tile_i[W])
};

// A published float: flag 1 in the high word, the value's bits in the low one,
// one 64-bit store, so a reader that sees the flag sees the value (no fence).
__device__ __forceinline__ void fuse_publish(unsigned long long* p, float v) {
  *reinterpret_cast<volatile unsigned long long*>(p) = (1ull << 32) | __float_as_uint(v);
}
// Waits until slot p is published (by a lower tile); its value.
__device__ __forceinline__ float fuse_wait(const unsigned long long* p) {
  unsigned long long v;
  while (((v = *reinterpret_cast<const volatile unsigned long long*>(p)) >> 32) == 0) __nanosleep(100);
  return __uint_as_float(unsigned(v));
}

// q[t_open] and q[t_open + 1] for tile w's carry, loaded before the tile's walk
// so that the epilogue does not wait for them (0 when unused).
template <class Idx>
struct FuseOpen {
  Idx q0 = 0, q1 = 0;
};
template <class Idx>
__device__ __forceinline__ FuseOpen<Idx> fuse_open(const Idx* __restrict__ q, const FuseFix<Idx>& fz, Idx t_open) {
  FuseOpen<Idx> o;
  if (fz.pub != nullptr && t_open < fz.U) {
    o.q0 = q[t_open];
    o.q1 = q[t_open + 1];
  }
  return o;
}

// get(k), k = 0 .. K - 1, combined in a fixed order: lane l folds k = l, l + 32,
// ... in order (4 in flight), then a shuffle tree. Every lane returns it.
template <class Fn, class Idx, class Get>
__device__ __forceinline__ float fuse_fold(const Fn& fn, Get get, Idx K, int lane) {
  float acc = fn.identity();
  for (Idx k0 = 0; k0 < K; k0 += 128) {
    float v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const Idx k = k0 + Idx(32 * u + lane);
      v[u] = k < K ? get(k) : fn.identity();
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) acc = fn.combine(acc, v[u]);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc = fn.combine(acc, __shfl_down_sync(kFull, acc, off));
  return __shfl_sync(kFull, acc, 0);
}

// pub[w0 .. w0 + n) combined in tile order (n <= kFuseShort): fixup_tree's
// phase-1 order, so short crossing segments keep their bits. Every lane returns it.
template <class Fn, class Idx>
__device__ __forceinline__ float fuse_serial(const Fn& fn, const unsigned long long* pub, Idx w0, Idx n, int lane) {
  static_assert(fuse::kFuseShort <= 64, "two carries per lane");
  const float v0 = Idx(lane) < n ? fuse_wait(pub + w0 + lane) : fn.identity();
  const float v1 = Idx(lane + 32) < n ? fuse_wait(pub + w0 + 32 + lane) : fn.identity();
  float acc = fn.identity();
  for (Idx k = 0; k < n; ++k) acc = fn.combine(acc, __shfl_sync(kFull, k < 32 ? v0 : v1, int(k & 31)));
  return acc;
}

// Tile w's part of the fix-up (warp-uniform arguments but val): publish the
// carry (lane 31's val) when a segment t_open is open at the tile's end, and, at
// the end of a long segment's run, the run's part; then, when the tile completes
// the crossing segment th (has_head; its head value in every lane), wait for
// that segment's carries or parts and finish it. qo: fuse_open(q, fz, t_open).
// pre: with reread (fuse::reread of segment th's positions before tile w), lane
// l's re-read position q[th] + l (identity past them), loaded before the walk.
template <class Fn, class Idx>
__device__ __forceinline__ void fuse_fixup(const Fn& fn, const Idx* __restrict__ q, const FuseFix<Idx>& fz, Idx w,
                                           typename Fn::A val, Idx t_open, FuseOpen<Idx> qo, bool has_head, Idx th,
                                           typename Fn::A head_val, bool reread, typename Fn::A pre, int lane) {
  if constexpr (sizeof(typename Fn::A) == 4) {
    if (t_open < fz.U) {
      if (lane == 31) fuse_publish(fz.pub + w, val);
      const Idx w0 = fuse::first_carry_tile(t_open, qo.q0, fz.items);
      const Idx we = fuse::first_carry_tile(Idx(t_open + 1), qo.q1, fz.items);
      if (fuse::is_long(w0, we)) {
        Idx rs, re;
        fuse::run_of(w, w0, we, rs, re);
        if (w == re - 1) {
          __syncwarp();  // lane 31's publication before the other lanes read it
          const float p = fuse_fold(fn, [&](Idx k) { return fuse_wait(fz.pub + rs + k); }, Idx(re - rs), lane);
          if (lane == 0) fuse_publish(fz.part + rs, p);
        }
      }
    }
    if (has_head && reread) {  // no wait: the positions before the tile, as re-read
      float acc = pre;
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) acc = fn.combine(acc, __shfl_down_sync(kFull, acc, off));
      if (lane == 0) fn.finish(th, 0, fn.combine(acc, head_val));
    } else if (has_head) {
      const Idx w0 = fuse::first_carry_tile(th, q[th], fz.items);
      const float acc =
          fuse::is_long(w0, w)
              ? fuse_fold(fn, [&](Idx m) { return fuse_wait(fz.part + fuse::run_slot(m, w0)); }, fuse::runs(w0, w),
                          lane)
              : fuse_serial(fn, fz.pub, w0, Idx(w - w0), lane);
      if (lane == 0) fn.finish(th, 0, fn.combine(acc, head_val));
    }
  } else {
    (void)fn, (void)q, (void)fz, (void)w, (void)val, (void)t_open, (void)qo, (void)has_head, (void)th, (void)head_val,
        (void)reread, (void)pre, (void)lane;
  }
}

// Session 34: a 16-bit forward's tile that holds segment ends (or is the last,
// partial one), walked by positions instead of merge items
// (SegmentGeometry::flat_ended, flat_ended_rule in src/core/segment_geometry.h).
// Lane l takes the tile's positions 32 l .. 32 l + 31 (np of them; lanes past
// the tile's ne positions none), read straight from x like a full tile
// (flat_lane_words), and folds them in order. A segment end e (tile-relative:
// the segment's positions end before position e) is bit (e - 1) mod 32 of lane
// (e - 1) / 32's mask m; at a set bit the lane stores its partial (the segment's
// value when the segment began in the lane) in shared memory at the bit's rank
// among the tile's set bits, and restarts at the identity. Several ends at one
// position (empty segments) set one bit; ends at e = 0 none (their segments
// hold no position of the tile). The warp segmented scan over (rank of the lane's
// open segment, partial) then joins each lane's first stored partial to the
// earlier lanes' part of its segment, exactly as flat_reduce's staged walk joins
// `first`, and the warp writes the segments' values one per lane from there.
// Against the staged walk (sessions 1-33, merge items split 32 a lane): no
// shared-memory staging of x or of the ends, no merge search, no per-lane loop
// over ends; every segment is the identity, its positions in order, then the
// scan's tree across lanes, deterministic for the shape; the lane boundaries are
// 32 positions apart instead of 32 merge items, so a sum's last bits differ
// from the staged walk's. Why (ncu source counters, H100, session 33, 1d_2Mx32
// bf16 sum): the staged walk issued 890 warp instructions a tile, its
// arithmetic 39 of them; bench/NOTES.md session 34 has the prediction and the
// measurement.
// Shared memory (the warp's staging area): the 32 lane masks, the 32 lanes'
// first ranks, the ns ends (int16, tile-relative), then the partials: at most
// d + 1 of them (d distinct end positions, d <= min(ns, ne), plus the last lane's
// snapshot below). With ns + ne <= 1024, 2 ns + 4 (min(ns, ne) + 1) is largest at
// ns = ne = 512.
template <class Fn, class Idx>
constexpr size_t kLaneEndedSmem = 256 + 2 * 512 + 513 * sizeof(typename Fn::A);

template <class Fn, class Idx>
__device__ __forceinline__ void flat_lane_ended(const Fn& fn, const typename Fn::Raw* __restrict__ x,
                                                const Idx* __restrict__ q, Idx w, Idx i0, Idx j0, Idx i1, Idx j1,
                                                Idx nel, typename Fn::A* carry, typename Fn::A* head,
                                                const FuseFix<Idx>& fz, unsigned char* smem_warp, int lane) {
  using A = typename Fn::A;
  using Raw = typename Fn::Raw;
  static_assert(kLaneEndedSmem<Fn, Idx> <= flat_smem_per_warp<Raw, Idx>(), "the warp's staging area holds it");
  const int ns = int(i1 - i0), ne = int(j1 - j0);
  const int np = min(32, ne - 32 * lane);  // the lane's positions (<= 0: none)
  uint32_t wd[20];
  flat_lane_words(x, j0, nel, lane, aligned16_dev(x), np > 0, wd);
  const auto c = fn.ctx(i0, 0);  // the same for every segment (kFlatFixedWalk)
  uint32_t* s_m = reinterpret_cast<uint32_t*>(smem_warp);
  int* s_b = reinterpret_cast<int*>(smem_warp + 128);
  int16_t* s_e = reinterpret_cast<int16_t*>(smem_warp + 256);
  A* s_val = reinterpret_cast<A*>(smem_warp + 256 + (2 * ns + 3) / 4 * 4);
  s_m[lane] = 0u;
  __syncwarp();
  // Whole-warp rounds (a loop whose trip count differed per lane left the warp
  // diverged at the shuffles below: ncu, run 1, ~18% of the stall samples in their
  // collective fallback). An end e > 0 sets bit (e - 1) mod 32 of word (e - 1) / 32;
  // the atomic is unconditional (no branch): an end at 0 ors nothing.
  auto mark = [&](int e) { atomicOr(&s_m[max(e - 1, 0) >> 5], e > 0 ? 1u << ((e - 1) & 31) : 0u); };
  if (ns <= 32) {  // one round (1d_2Mx32's tiles: ~32 ends, ~1 a word)
    const int e = lane < ns ? int(q[i0 + Idx(lane + 1)] - j0) : 0;  // in [0, ne]
    if (lane < ns) s_e[lane] = int16_t(e);
    mark(e);
  } else {
    // Session 35: many ends (the 2^26-beside-1M row's tiles of one-position
    // segments hold 512). One round a load and its atomic made each round wait for
    // its load (16 dependent L2 round trips a tile), and 32 consecutive ends, one or
    // two mask words, were 32 atomics on one or two addresses, serialised (run 2:
    // that row 1.05x the staged walk's time). So the loads first, into s_e, then
    // the atomics with lane l taking ends l R + r (R rounds): a round's 32 ends lie
    // R positions apart or more, in different words on such tiles.
#pragma unroll 4
    for (int k0 = 0; k0 < ns; k0 += 32)
      if (k0 + lane < ns) s_e[k0 + lane] = int16_t(q[i0 + Idx(k0 + lane + 1)] - j0);
    __syncwarp();
    const int R = (ns + 31) >> 5;
    for (int r = 0; r < R; ++r) {
      const int k = lane * R + r;
      mark(k < ns ? int(s_e[k]) : 0);
    }
  }
  __syncwarp();
  const uint32_t m = s_m[lane];
  const int cnt = __popc(m);
  int base = cnt;  // inclusive scan of the counts, then exclusive: the rank of the lane's first bit
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const int n = __shfl_up_sync(kFull, base, off);
    if (lane >= off) base += n;
  }
  base -= cnt;
  s_b[lane] = base;
  // The last lane with positions (np < 32) also stores its partial after its last
  // position (one more bit, unless an end is there already): its open partial.
  const uint32_t mw = np > 0 && np < 32 ? m | (1u << (np - 1)) : m;
  A acc = fn.identity();
  A* sp = s_val + base;  // where the next stored partial goes
  const Idx jl = j0 + Idx(32 * lane);
  flat_lane_each<Raw>(wd, int(j0 % Idx(8)), [&](int k, Raw xr) {
    acc = fn.combine(acc, fn.value(c, jl + Idx(k), xr));
    if ((mw >> k) & 1u) {
      *sp++ = acc;
      acc = fn.identity();
    }
  });
  // Keys: the rank of the lane's open segment, monotone across lanes. The last lane
  // with positions stored one partial more (at `key`) unless an end closed it.
  const int key = base + cnt;
  // (The stores' count, not a comparison with sp: the walk then keeps one pointer.)
  acc = __popc(mw) > cnt ? s_val[key] : np < 32 ? fn.identity() : acc;
  // The fused fix-up's loads (after the walk: fewer registers live through it).
  const FuseOpen<Idx> qo = fuse_open(q, fz, i1);
  // Segment i0 began before the tile: its part here is the head, for the fix-up.
  const Idx qs = q[i0];
  const bool has_head = ns > 0 && qs < j0;
  bool reread = false;
  A pre = fn.identity();
  if (fz.pub != nullptr && has_head && fuse::reread(Idx(j0 - qs))) {  // as flat_reduce's staged path
    reread = true;
    const Idx j = qs + Idx(lane);
    if (j < j0) pre = fn.value(c, j, x[j]);
  }
  const A val = flat_warp_scan(fn, key, acc, lane);
  int kin = __shfl_up_sync(kFull, key, 1);
  const A vin = __shfl_up_sync(kFull, val, 1);
  if (lane == 0) kin = -1;
  if (key > base && kin == base) s_val[base] = fn.combine(vin, s_val[base]);  // the earlier lanes' part first
  __syncwarp();
  // Segment i0 + k: positions [q[i0 + k], q[i0 + k + 1]) - j0 = [ep, e). It holds
  // tile positions when e > max(ep, 0); its value is then the partial at the rank
  // of bit e - 1, else the identity (no position here: empty, or ending at e = 0).
  const A head_val = ns > 0 && s_e[0] > 0 ? s_val[0] : fn.identity();  // end 0's rank is 0
  for (int k0 = 0; k0 < ns; k0 += 32) {  // whole-warp rounds: converged for the fix-up's shuffles
    const int k = k0 + lane;
    if (k < ns && !(k == 0 && has_head)) {
      const int e = s_e[k], ep = k > 0 ? int(s_e[k - 1]) : 0;  // k = 0, not a head: segment i0 starts at j0
      A r = fn.identity();
      if (e > ep) {
        const int p = e - 1, l = p >> 5;
        r = s_val[s_b[l] + __popc(s_m[l] & ((1u << (p & 31)) - 1u))];
      }
      fn.finish(i0 + Idx(k), 0, r);
    }
  }
  if (fz.pub == nullptr) {  // fixup_tree follows
    if (lane == 0 && has_head) head[w] = head_val;
    if (lane == 31) carry[w] = val;
    return;
  }
  fuse_fixup(fn, q, fz, w, val, i1, qo, has_head, i0, head_val, reread, pre, lane);
}

// Blocks of 256 per SM that flat_reduce (32-bit indices) asks registers for:
// the shared memory per warp allows 8 (fp32), 6 (16-bit), 5 (8-byte). Without
// the bound the unrolled walk takes 40 (fp32) / 47 (bf16) registers, i.e. 48 /
// 40 warps per SM instead of 64 / 48; with it 32 (fp32: 12 bytes of spill
// outside the walk, ptxas -v) / 40 (bf16, no spill). 64-bit indices: no bound.
template <class Raw, class Idx>
constexpr int kFlatMinBlocks = sizeof(Idx) != 4 ? 1 : sizeof(Raw) == 4 ? 8 : sizeof(Raw) == 2 ? 6 : 1;

template <class Fn, class Idx, FlatForm F = FlatForm::Staged>
__global__ void __launch_bounds__(256, kFlatMinBlocks<typename Fn::Raw, Idx>)
    flat_reduce(Fn fn, const typename Fn::Raw* __restrict__ x, const Idx* __restrict__ q, Idx W, Idx nel,
                const Idx* __restrict__ tile_i, const Idx* __restrict__ tile_j, typename Fn::A* carry,
                typename Fn::A* head, FuseFix<Idx> fz,  // fz.pub null: carry/head for fixup_tree
                bool lane_ended) {  // tiles with segment ends: flat_lane_ended (16-bit forwards)
  wait_prior_grid();  // launched after prepare (launch_after_prior)
  using A = typename Fn::A;
  using Raw = typename Fn::Raw;
  extern __shared__ __align__(16) unsigned char smem[];
  const int lane = threadIdx.x & 31, wib = threadIdx.x >> 5;
  const Idx w = Idx(blockIdx.x) * Idx(blockDim.x >> 5) + wib;
  if (w >= W) return;  // whole warps only
  static_assert(F == FlatForm::Staged || kFlatFixedWalk<Fn>, "the direct forms are the forwards'");
  static_assert(F != FlatForm::Lane || kFlatLaneForm<Fn>, "the lane-contiguous form: 16-bit types");
  if constexpr (F != FlatForm::Staged) {
    const Idx i0 = tile_i[w], j0 = tile_j[w];
    const bool aligned = aligned16_dev(x);
    // warp-uniform; the lane-contiguous form needs aligned data, the coalesced one reads either
    if (tile_i[w + 1] == i0 && tile_j[w + 1] - j0 == Idx(kTile<Raw>) && (F == FlatForm::Coalesced || aligned)) {
      const FuseOpen<Idx> qo = fuse_open(q, fz, i0);
      A val;
      if constexpr (F == FlatForm::Coalesced) {
        val = flat_fold_coalesced(fn, fn.ctx(i0, 0), x, j0, aligned, lane);
      } else {
        A acc = fn.identity();
        flat_fold_direct(fn, fn.ctx(i0, 0), x, j0, nel, lane, acc);
        val = flat_warp_scan(fn, i0, acc, lane);  // one open segment: the plain scan
      }
      if (fz.pub == nullptr) {
        if (lane == 31) carry[w] = val;  // fixup_tree follows
      } else {
        fuse_fixup(fn, q, fz, w, val, i0, qo, false, i0, val, false, val, lane);
      }
      return;
    }
    if constexpr (kFlatLaneForm<Fn>) {
      if (lane_ended) {
        flat_lane_ended(fn, x, q, w, i0, j0, tile_i[w + 1], tile_j[w + 1], nel, carry, head, fz,
                        smem + size_t(wib) * flat_smem_per_warp<Raw, Idx>(), lane);
        return;
      }
    }
  }
  const auto t = flat_stage<Raw, Idx>(x, true, kFlatVec<Raw> && aligned16_dev(x), nel, q, tile_i, tile_j, w,
                                      smem + size_t(wib) * flat_smem_per_warp<Raw, Idx>(), lane);
  const FuseOpen<Idx> qo = fuse_open(q, fz, t.i1);
  // Fused fix-up: the crossing segment this tile completes, if it has at most
  // kFuseReread positions before the tile, re-read from x now (one load per lane,
  // in flight during the walk) instead of waited for at the end (fused_fixup_rule.h).
  bool reread = false;
  A pre = fn.identity();
  if (fz.pub != nullptr && t.i1 > t.i0) {
    const Idx qs = q[t.i0];
    if (qs < t.j0 && fuse::reread(Idx(t.j0 - qs))) {
      reread = true;
      const Idx j = qs + Idx(lane);
      if (j < t.j0) pre = fn.value(fn.ctx(t.i0, 0), j, x[j]);
    }
  }
  int ti, tj, items;
  flat_lane_split<kIpl<Raw>>(t.s_e, t.ns, t.ne, lane, ti, tj, items);
  const int ti_start = ti;
  A acc = fn.identity(), first = acc;
  bool done_first = false;
  auto c = fn.ctx(t.i0 + ti, 0);
  if constexpr (kFlatFixedWalk<Fn>) {
    flat_walk_fixed<Fn>(fn, c, t, ti, tj, items, acc, first, done_first);
  } else {
  while (items > 0) {
    const int e = ti < t.ns ? int(t.s_e[ti]) : t.ne;
    const int run = min(e - tj, items);
    const int base = t.o + tj;
    int k = 0;
    if constexpr (sizeof(Raw) == 2) {  // pairs (even, odd) share a word: one shared load per 2 elements
      if ((base & 1) && run > 0) {
        acc = fn.combine(acc, fn.value(c, t.j0 + tj, t.s_x[spad<Raw>(base)]));
        k = 1;
      }
#pragma unroll 2
      for (; k + 2 <= run; k += 2) {
        const uint32_t wv = *reinterpret_cast<const uint32_t*>(t.s_x + spad<Raw>(base + k));
        acc = fn.combine(acc, fn.value(c, t.j0 + tj + k, raw_from_bits<Raw>(uint16_t(wv & 0xffffu))));
        acc = fn.combine(acc, fn.value(c, t.j0 + tj + k + 1, raw_from_bits<Raw>(uint16_t(wv >> 16))));
      }
    }
    if constexpr (sizeof(Raw) != 2) {  // pieces between pads (<= 2 per run): plain address increments
      while (k < run) {
        const int p = base + k;
        const int len = min(run - k, kIpl<Raw> - int(unsigned(p) % unsigned(kIpl<Raw>)));
        const Raw* sp = t.s_x + spad<Raw>(p);
        const Idx jk = t.j0 + tj + k;
        for (int i = 0; i < len; ++i) acc = fn.combine(acc, fn.value(c, jk + i, sp[i]));
        k += len;
      }
    }
    for (; k < run; ++k) acc = fn.combine(acc, fn.value(c, t.j0 + tj + k, t.s_x[spad<Raw>(base + k)]));
    tj += run;
    items -= run;
    if (items > 0) {  // the next item completes segment ti
      if (!done_first) {
        first = acc;
        done_first = true;
      } else {
        fn.finish(t.i0 + ti, 0, acc);
      }
      acc = fn.identity();
      ++ti;
      --items;
      c = fn.ctx(t.i0 + ti, 0);
    }
  }
  }
  const Idx key = t.i0 + ti;
  const A val = flat_warp_scan(fn, key, acc, lane);
  Idx kin = __shfl_up_sync(kFull, key, 1);
  const A vin = __shfl_up_sync(kFull, val, 1);
  if (lane == 0) kin = -1;
  bool head_lane = false;
  A hv = fn.identity();
  if (done_first) {
    const Idx v = t.i0 + ti_start;
    const A r = kin == v ? fn.combine(vin, first) : first;
    if (v == t.i0 && q[t.i0] < t.j0) {  // began in an earlier tile: the fix-up combines
      head_lane = true;
      hv = r;
      if (fz.pub == nullptr) head[w] = r;
    } else {
      fn.finish(v, 0, r);
    }
  }
  if (fz.pub == nullptr) {
    if (lane == 31) carry[w] = val;  // fixup_tree follows
    return;
  }
  const unsigned hb = __ballot_sync(kFull, head_lane);
  const A head_val = __shfl_sync(kFull, hv, hb ? __ffs(hb) - 1 : 0);
  fuse_fixup(fn, q, fz, w, val, t.i1, qo, hb != 0, t.i0, head_val, reread, pre, lane);
}

// flat_elementwise for a backward that reads no data (sum, mean), gi 16-byte
// aligned (session 23). The gradient of a position is its segment's one value
// (BwdFn::elem depends neither on the position nor on x there), so the tile is
// written in the write-back's layout directly, without the walk: lanes k <= ns
// put segment i0 + k's end (relative to j0) and its value, elem of its context,
// in shared memory; then lane l writes vectors l, l + 32, ... of the tile's
// 16-byte aligned span, finding the segment of the vector's first position by a
// binary search over the ends and stepping over ends inside the vector. The same
// elem per position: bitwise the walk's gi. ncu (H200, 1d_2Mx32 fp32 sum bwd,
// bench/NOTES.md session 23): the walk form issued ~820 warp instructions per
// tile of 512 (the merge split of the lane's items, the per-run loops, the
// in-place shared writes, the per-element write-back), 134 us at 40% of DRAM.
// The tile: segments [i0, i0 + ns], positions [j0, j0 + ne) (the caller read them).
template <class Fn, class Idx>
__device__ __forceinline__ void flat_fill_tile(const Fn& fn, typename Fn::Raw* __restrict__ gi,
                                               const Idx* __restrict__ q, Idx i0, Idx j0, int ns, int ne,
                                               unsigned char* smem_warp, int lane) {
  using Raw = typename Fn::Raw;
  constexpr int VE = kVecE<Raw>;
  Raw* s_v = reinterpret_cast<Raw*>(smem_warp);  // ns + 1 <= kTile + 1 values (s_x's room)
  int16_t* s_e = reinterpret_cast<int16_t*>(smem_warp + size_t(kTilePadded<Raw>) * sizeof(Raw));
  for (int k = lane; k <= ns; k += 32) {
    if (k < ns) s_e[k] = int16_t(q[i0 + Idx(k + 1)] - j0);
    s_v[k] = fn.elem(fn.ctx(i0 + Idx(k), 0), j0, Raw(0.0f));
  }
  __syncwarp();
  const int o = int(j0 % Idx(VE));
  Raw* gb = gi + (j0 - Idx(o));
#pragma unroll 1
  for (int r = 0; r < kStageRounds<Raw>; ++r) {
    const int a = (r * 32 + lane) * VE;  // the vector's first slot; tile position a - o
    if (a + VE <= o || a >= o + ne) continue;
    const int p0 = a - o > 0 ? a - o : 0;
    int lo = 0, hi = ns;  // the first k with s_e[k] > p0 (ns: none)
    while (lo < hi) {
      const int mid = (lo + hi) >> 1;
      if (int(s_e[mid]) <= p0) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    int k = lo;
    int nxt = k < ns ? int(s_e[k]) : INT_MAX;
    Raw val = s_v[k];
    Vec<Raw, VE> out;
#pragma unroll
    for (int e = 0; e < VE; ++e) {
      const int p = a - o + e;
      while (p >= nxt) {  // segment ends inside the vector (empty segments included)
        ++k;
        nxt = k < ns ? int(s_e[k]) : INT_MAX;
        val = s_v[k];
      }
      out.v[e] = val;
    }
    if (a >= o && a + VE <= o + ne) {
      // One st.global.v4: written as a Vec or uint4 store, nvcc split it into 4-byte
      // (float32) or 2-byte (16-bit) stores (PTX of run 4; bf16 ran 1.7-3.3x slower).
      static_assert(sizeof(out) == sizeof(uint4), "16-byte vectors");
      uint4 u;
      memcpy(&u, &out, sizeof(u));
      asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(gb + a), "r"(u.x), "r"(u.y), "r"(u.z),
                   "r"(u.w)
                   : "memory");
    } else {
#pragma unroll
      for (int e = 0; e < VE; ++e)
        if (a + e >= o && a + e < o + ne) gb[a + e] = out.v[e];
    }
  }
}

// fill (SegmentTestCaps::flat_fill): 0 the rule below, 1 the walk for every tile,
// 2 flat_fill_tile for every tile it can write (sum/mean, gi 16-byte aligned).
template <class Fn, class Idx>
__global__ void __launch_bounds__(256) flat_elementwise(Fn fn, const typename Fn::Raw* __restrict__ x,
                                                        typename Fn::Raw* __restrict__ gi,
                                                        const Idx* __restrict__ q, Idx W, Idx nel,
                                                        const Idx* __restrict__ tile_i,
                                                        const Idx* __restrict__ tile_j, int fill) {
  wait_prior_grid();  // launched after prepare (launch_after_prior)
  using Raw = typename Fn::Raw;
  extern __shared__ __align__(16) unsigned char smem[];
  const int lane = threadIdx.x & 31, wib = threadIdx.x >> 5;
  const Idx w = Idx(blockIdx.x) * Idx(blockDim.x >> 5) + wib;
  if (w >= W) return;
  const bool need_x = fn.needs_x();
  // sum, mean: flat_fill_tile (session 23) for tiles that hold a segment end and
  // whose segments average 4 positions or more. A tile inside one segment keeps
  // the walk (one run there; in run 4 the fill was 1.09-1.14x slower on the
  // long-segment rows, not explained), and so does a tile of mostly one-position
  // segments (run 5: 1d_one2^26_1Mx1 bf16 sum bwd 1.095x with the fill, its
  // tiles of ~512 segments of 1 stepping over an end at every position).
  if (!need_x && aligned16_dev(gi) && fill != 1) {
    const Idx i0 = tile_i[w], j0 = tile_j[w];
    const int ns = int(tile_i[w + 1] - i0), ne = int(tile_j[w + 1] - j0);
    if (fill == 2 || (ns > 0 && 4 * ns <= ne)) {
      flat_fill_tile(fn, gi, q, i0, j0, ns, ne, smem + size_t(wib) * flat_smem_per_warp<Raw, Idx>(), lane);
      return;
    }
  }
  // Vectors for both the staging and the write-back, or for neither (one layout).
  const bool vec = kFlatVec<Raw> && aligned16_dev(gi) && (!need_x || aligned16_dev(x));
  const auto t = flat_stage<Raw, Idx>(x, need_x, vec, nel, q, tile_i, tile_j, w,
                                      smem + size_t(wib) * flat_smem_per_warp<Raw, Idx>(), lane);
  int ti, tj, items;
  flat_lane_split<kIpl<Raw>>(t.s_e, t.ns, t.ne, lane, ti, tj, items);
  auto c = fn.ctx(t.i0 + ti, 0);
  while (items > 0) {
    const int e = ti < t.ns ? int(t.s_e[ti]) : t.ne;
    const int run = min(e - tj, items);
    const int base = t.o + tj;
    int k = 0;
    if constexpr (sizeof(Raw) == 2) {  // pairs (even, odd) of the run: one shared load and store per word
      if ((base & 1) && run > 0) {
        const int sp = spad<Raw>(base);
        t.s_x[sp] = fn.elem(c, t.j0 + tj, need_x ? t.s_x[sp] : Raw(0.0f));
        k = 1;
      }
#pragma unroll 1
      for (; k + 2 <= run; k += 2) {
        uint32_t* wp = reinterpret_cast<uint32_t*>(t.s_x + spad<Raw>(base + k));
        const uint32_t wv = need_x ? *wp : 0u;  // 0u: two +0.0 (the Raw(0.0f) of the scalar loop)
        const Raw e0 = fn.elem(c, t.j0 + tj + k, raw_from_bits<Raw>(uint16_t(wv & 0xffffu)));
        const Raw e1 = fn.elem(c, t.j0 + tj + k + 1, raw_from_bits<Raw>(uint16_t(wv >> 16)));
        *wp = uint32_t(bits_of(e0)) | (uint32_t(bits_of(e1)) << 16);  // both positions are this lane's
      }
    }
    if constexpr (sizeof(Raw) != 2) {  // pieces between pads (<= 2 per run)
      while (k < run) {
        const int p = base + k;
        const int len = min(run - k, kIpl<Raw> - int(unsigned(p) % unsigned(kIpl<Raw>)));
        Raw* sp = t.s_x + spad<Raw>(p);
        const Idx jk = t.j0 + tj + k;
        for (int i = 0; i < len; ++i) sp[i] = fn.elem(c, jk + i, need_x ? sp[i] : Raw(0.0f));  // own: in place
        k += len;
      }
    }
    for (; k < run; ++k) {
      const int sp = spad<Raw>(base + k);
      const Raw xv = need_x ? t.s_x[sp] : Raw(0.0f);
      t.s_x[sp] = fn.elem(c, t.j0 + tj + k, xv);  // own positions only: in place
    }
    tj += run;
    items -= run;
    if (items > 0) {
      ++ti;
      --items;
      c = fn.ctx(t.i0 + ti, 0);
    }
  }
  __syncwarp();
  if (kFlatVec<Raw> && vec) {  // whole vectors in [j0, j1): one 16-byte store; the 2 edge ones per element
    constexpr int VE = kVecE<Raw>;
    Raw* gb = gi + (t.j0 - Idx(t.o));
    const int lo = t.o, hi = t.o + t.ne;
#pragma unroll
    for (int r = 0; r < kStageRounds<Raw>; ++r) {
      const int a = (r * 32 + lane) * VE;
      if (a >= lo && a + VE <= hi) {
        if constexpr (sizeof(Raw) == 2) {
          uint4 b;
          b.x = *reinterpret_cast<const uint32_t*>(t.s_x + spad<Raw>(a));
          b.y = *reinterpret_cast<const uint32_t*>(t.s_x + spad<Raw>(a + 2));
          b.z = *reinterpret_cast<const uint32_t*>(t.s_x + spad<Raw>(a + 4));
          b.w = *reinterpret_cast<const uint32_t*>(t.s_x + spad<Raw>(a + 6));
          *reinterpret_cast<uint4*>(gb + a) = b;
        } else {
          Vec<Raw, VE> v;
#pragma unroll
          for (int e = 0; e < VE; ++e) v.v[e] = t.s_x[spad<Raw>(a + e)];
          *reinterpret_cast<Vec<Raw, VE>*>(gb + a) = v;
        }
      } else if (a < hi) {
#pragma unroll
        for (int e = 0; e < VE; ++e)
          if (a + e >= lo && a + e < hi) gb[a + e] = t.s_x[spad<Raw>(a + e)];
      }
    }
  } else {
    Raw* out = gi + t.j0;
    const Raw* sl = t.s_x + spad<Raw>(lane);
#pragma unroll
    for (int k = 0; k < kIpl<Raw>; ++k) {
      const int idx = k * 32 + lane;
      if (idx < t.ne) out[idx] = sl[k * kRow<Raw>];
    }
  }
}

// ---------------------------------------------------------------- features (inner > 1)

// Group geometry of the calling lane.
template <class Idx>
struct FeatLane {
  Idx w, slab, f0;
  int lig;
};

template <class Idx>
__device__ __forceinline__ FeatLane<Idx> feat_lane(int G, int V, Idx slabs) {
  const Idx gtid = Idx(blockIdx.x) * Idx(blockDim.x) + Idx(threadIdx.x);
  const Idx gid = gtid / G;
  FeatLane<Idx> l;
  l.lig = int(gtid - gid * G);
  l.w = gid / slabs;
  l.slab = gid - l.w * slabs;
  l.f0 = (l.slab * G + l.lig) * V;
  return l;
}

// feat_next_end (session 23): feat_reduce over 4- and 8-byte types loads the end
// of a tile's next segment, q[i + 2], before the current segment's rows, so the
// load is in flight while they are. Before, each segment began with q[i + 1] and
// only then its row loads, whose loop bound it is: one L2 round trip in series
// per segment. H200 (bench/NOTES.md, session 23, run 3; prebuilt benchmarks
// alternated): float32 forwards 0.84-1.00x (2d_x16_f16 sum 0.0911 -> 0.0764 ms),
// bfloat16 0.99-1.05x (max 1.02-1.05: not taken for 16-bit types; feat_elementwise
// 0.99-1.03: not taken; feat_maxmin_bwd: 14 more registers in bf16, not taken).
// float64 follows float32 (not timed). The same values in the same order.
//
// Tried with it, measured slower and removed (run 4): the worker's first lane
// asking L2 for the tile's whole row range at its start (cp.async.bulk.prefetch.L2):
// feature forwards 1.18-1.42x, max backwards 1.04-1.25x, and ncu's DRAM throughput
// rose while the kernel slowed (bf16 2d_64kx16_f128: 97 -> 123 us at 62 -> 69% DRAM):
// more bytes from DRAM than the rows themselves.
template <class Fn, class Idx, int V>
__global__ void __launch_bounds__(256) feat_reduce(Fn fn, const typename Fn::Raw* __restrict__ x,
                                                   const Idx* __restrict__ q, Idx W, Idx slabs, int G, Idx inner,
                                                   const Idx* __restrict__ tile_i, const Idx* __restrict__ tile_j,
                                                   typename Fn::A* __restrict__ carry,
                                                   typename Fn::A* __restrict__ head) {
  wait_prior_grid();  // launched after prepare (launch_after_prior)
  using A = typename Fn::A;
  using Raw = typename Fn::Raw;
  const FeatLane<Idx> l = feat_lane<Idx>(G, V, slabs);
  if (l.w >= W || l.f0 >= inner) return;
  const Idx i0 = tile_i[l.w], j0 = tile_j[l.w], i1 = tile_i[l.w + 1], j1 = tile_j[l.w + 1];
  const bool crossing0 = q[i0] < j0;
  A acc[V];
#pragma unroll
  for (int v = 0; v < V; ++v) acc[v] = fn.identity();
  Idx j = j0;
  constexpr bool kNextEnd = sizeof(Raw) >= 4;  // feat_next_end: 16-bit max forwards lost 2-5% with it
  Idx e_next = kNextEnd && i0 < i1 ? q[i0 + 1] : j1;
  for (Idx i = i0;; ++i) {
    Idx e;
    if constexpr (kNextEnd) {
      e = e_next;
      e_next = i + 1 < i1 ? q[i + 2] : j1;  // in flight during this segment's rows (feat_next_end)
    } else {
      e = i < i1 ? q[i + 1] : j1;
    }
    typename Fn::Ctx c[V];
#pragma unroll
    for (int v = 0; v < V; ++v) c[v] = fn.ctx(i, l.f0 + v);
    const Raw* p = x + l.f0;
    for (; j + 8 <= e; j += 8) {  // 8 row loads in flight per lane
      Vec<Raw, V> r[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) r[u] = load_vec<Raw, V>(p + (j + u) * inner);
#pragma unroll
      for (int u = 0; u < 8; ++u)
#pragma unroll
        for (int v = 0; v < V; ++v) acc[v] = fn.combine(acc[v], fn.value(c[v], j + u, r[u].v[v]));
    }
    for (; j < e; ++j) {
      const Vec<Raw, V> r = load_vec<Raw, V>(p + j * inner);
#pragma unroll
      for (int v = 0; v < V; ++v) acc[v] = fn.combine(acc[v], fn.value(c[v], j, r.v[v]));
    }
    if (i == i1) break;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      if (i == i0 && crossing0)
        head[l.w * inner + l.f0 + v] = acc[v];
      else
        fn.finish(i, l.f0 + v, acc[v]);
      acc[v] = fn.identity();
    }
  }
#pragma unroll
  for (int v = 0; v < V; ++v) carry[l.w * inner + l.f0 + v] = acc[v];
}

// feat_elementwise's walk for a backward that reads no data (sum, mean) when a
// warp holds several workers and a row is at most 16 bytes (session 7). The warp's 32 / G
// workers own consecutive tiles, so their rows are one contiguous range; the warp
// writes it R = 32 / G rows side by side per step (one coalesced store), each
// lane walking q forward to its row's segment (its context reloaded only when
// the segment changes). The per-worker walk puts a warp's lanes a tile (~30 rows)
// apart, so each of its stores touched 32 lines: ncu at 3227ff8 had 2d_x16_f4
// sum bwd's feat_elementwise at 20% of DRAM bandwidth, stalled on the LSU queue.
// Its own kernel (inlined into feat_elementwise the two walks made ptxas spill).
// Launch: the grid of feat_elementwise, blockDim a multiple of 32.
template <class Fn, class Idx, int V>
__global__ void __launch_bounds__(256) feat_rows_elementwise(Fn fn, typename Fn::Raw* __restrict__ gi,
                                                             const Idx* __restrict__ q, Idx W, int G, Idx inner,
                                                             const Idx* __restrict__ tile_i,
                                                             const Idx* __restrict__ tile_j) {
  wait_prior_grid();  // launched after prepare (launch_after_prior)
  using Raw = typename Fn::Raw;
  const int lane = int(threadIdx.x) & 31;
  const Idx gtid = Idx(blockIdx.x) * Idx(blockDim.x) + Idx(threadIdx.x);
  const Idx wf = (gtid - Idx(lane)) >> (__ffs(G) - 1);  // the warp's first worker (G a power of two)
  if (wf >= W) return;
  const int R = 32 / G, rl = lane / G;
  const Idx f0 = Idx(lane - rl * G) * Idx(V);
  if (f0 >= inner) return;
  const Idx J1 = tile_j[wf + Idx(R) < W ? wf + Idx(R) : W];
  Idx i = tile_i[wf], ci = Idx(-1);
  typename Fn::Ctx c[V];
  for (Idx j = tile_j[wf] + Idx(rl); j < J1; j += Idx(R)) {
    while (q[i + 1] <= j) ++i;  // q[U] = N > j: stops at the row's segment
    if (i != ci) {
#pragma unroll
      for (int v = 0; v < V; ++v) c[v] = fn.ctx(i, f0 + Idx(v));
      ci = i;
    }
    Vec<Raw, V> o;
#pragma unroll
    for (int v = 0; v < V; ++v) o.v[v] = fn.elem(c[v], j, Raw(0.0f));
    *reinterpret_cast<Vec<Raw, V>*>(gi + j * inner + f0) = o;
  }
}

template <class Fn, class Idx, int V>
__global__ void __launch_bounds__(256) feat_elementwise(Fn fn, const typename Fn::Raw* __restrict__ x,
                                                        typename Fn::Raw* __restrict__ gi,
                                                        const Idx* __restrict__ q, Idx W, Idx slabs, int G,
                                                        Idx inner, const Idx* __restrict__ tile_i,
                                                        const Idx* __restrict__ tile_j) {
  wait_prior_grid();  // launched after prepare (launch_after_prior)
  using Raw = typename Fn::Raw;
  const FeatLane<Idx> l = feat_lane<Idx>(G, V, slabs);
  if (l.w >= W || l.f0 >= inner) return;
  const Idx i0 = tile_i[l.w], j0 = tile_j[l.w], i1 = tile_i[l.w + 1], j1 = tile_j[l.w + 1];
  const bool need_x = fn.needs_x();
  Idx j = j0;
  for (Idx i = i0; i <= i1; ++i) {
    const Idx e = i < i1 ? q[i + 1] : j1;
    typename Fn::Ctx c[V];
#pragma unroll
    for (int v = 0; v < V; ++v) c[v] = fn.ctx(i, l.f0 + v);
    for (; j < e; ++j) {
      const Idx off = j * inner + l.f0;
      Vec<Raw, V> r;
      if (need_x) {
        r = load_vec<Raw, V>(x + off);
      } else {
#pragma unroll
        for (int v = 0; v < V; ++v) r.v[v] = Raw(0.0f);
      }
      Vec<Raw, V> o;
#pragma unroll
      for (int v = 0; v < V; ++v) o.v[v] = fn.elem(c[v], j, r.v[v]);
      *reinterpret_cast<Vec<Raw, V>*>(gi + off) = o;
    }
  }
}

// ---------------------------------------------------------------- fix-up

// The first tile whose carry belongs to segment t (t crosses into a later tile):
// the tile holding merge item t - 1 + q[t] (the end of segment t - 1), since
// merge item m + q[m + 1] is the end of segment m. Equal to the first k >= 1
// with tile_i[k] >= t, minus one (v3 searched tile_i for it).
template <class Idx>
__device__ __forceinline__ Idx first_carry_tile(const Idx* q, Idx t, Idx items) {
  return t == 0 ? Idx(0) : (t - 1 + q[t]) / items;
}

// Cooperative launch, blockDim 256; FX lanes per tile in phase 1 (a power of two
// <= 32; 1 when inner == 1). *long_count is 0 at entry (the prepare kernel).
template <class Fn, class Idx>
__global__ void __launch_bounds__(256) fixup(Fn fn, const Idx* __restrict__ q, const Idx* __restrict__ tile_i,
                                             const Idx* __restrict__ tile_j, Idx W, Idx items, Idx inner, int FX,
                                             const typename Fn::A* __restrict__ carry,
                                             const typename Fn::A* __restrict__ head, Idx* long_list,
                                             unsigned* long_count) {
  using A = typename Fn::A;
  __shared__ A sh[256];
  const int lane = int(threadIdx.x) & (FX - 1);
  const Idx groups = Idx(gridDim.x) * Idx(blockDim.x / FX);
  for (Idx w = (Idx(blockIdx.x) * Idx(blockDim.x) + Idx(threadIdx.x)) / FX; w < W; w += groups) {
    const Idx t = tile_i[w];
    if (!(tile_i[w + 1] > t && q[t] < tile_j[w])) continue;  // no crossing segment completes in w
    const Idx w0 = first_carry_tile(q, t, items);
    if (w - w0 > kShortFix) {
      if (lane == 0) long_list[atomicAdd(long_count, 1u)] = w;
      continue;
    }
    for (Idx f = lane; f < inner; f += FX) {
      A acc = fn.identity();
      for (Idx p = w0; p < w; ++p) acc = fn.combine(acc, carry[p * inner + f]);
      fn.finish(t, f, fn.combine(acc, head[w * inner + f]));
    }
  }
  cooperative_groups::this_grid().sync();
  // Phase 2: one block per long crossing segment: lanes x features (32, or 1 when
  // inner == 1) by strided carries, then a fixed-order tree in shared memory.
  const unsigned nlong = __ldcg(long_count);
  const int FY = inner == 1 ? 1 : 32;
  const int CY = 256 / FY;
  const int fx = int(threadIdx.x) % FY, cy = int(threadIdx.x) / FY;
  for (unsigned e = blockIdx.x; e < nlong; e += gridDim.x) {
    const Idx w = __ldcg(long_list + e);
    const Idx t = tile_i[w];
    const Idx w0 = first_carry_tile(q, t, items);
    const Idx cnt = w - w0;
    for (Idx f0 = 0; f0 < inner; f0 += FY) {
      const Idx f = f0 + fx;
      A acc = fn.identity();
      if (f < inner)
        for (Idx p = cy; p < cnt; p += CY) acc = fn.combine(acc, carry[(w0 + p) * inner + f]);
      sh[threadIdx.x] = acc;
      __syncthreads();
      for (int s = CY / 2; s > 0; s >>= 1) {
        if (cy < s) sh[cy * FY + fx] = fn.combine(sh[cy * FY + fx], sh[(cy + s) * FY + fx]);
        __syncthreads();
      }
      if (cy == 0 && f < inner) fn.finish(t, f, fn.combine(sh[fx], head[w * inner + f]));
      __syncthreads();
    }
  }
}

// segment_reduce's fix-up (v5). Phase 1 as in fixup: crossing segments of
// <= kShortFix tiles combined by the lane group of the tile that completes them,
// longer ones listed. When the list is not empty, the long segments' carries are
// combined in two more fixed-order steps instead of v4's one block per segment
// looping over all its carries (131k carries for one 2^26 segment: one block,
// ~512 serial combines per thread, while the grid waited):
//   phase 2 (after grid.sync): the tiles are cut into aligned chunks of
//     kFixChunk; one thread per (chunk, feature) combines, for each of the (at
//     most two) runs of a long segment's carries in the chunk, the run in tile
//     order and writes the result over the run's first carry (the run's tiles
//     belong to this thread alone, so in place is safe);
//   phase 3 (after grid.sync): one block per long segment combines its partials
//     (at tile w0, then at every chunk start in (w0, w)) with v4's strided
//     fixed-order tree, then the head.
// The order depends only on the shape: bitwise reproducible. The partials are
// written by other blocks of this launch, so phase 3 reads them through L2.
constexpr int kFixChunk = 32;

template <class Fn, class Idx>
__global__ void __launch_bounds__(256) fixup_tree(Fn fn, const Idx* __restrict__ q, const Idx* __restrict__ tile_i,
                                                  const Idx* __restrict__ tile_j, Idx W, Idx items, Idx inner, int FX,
                                                  typename Fn::A* carry, const typename Fn::A* __restrict__ head,
                                                  Idx* long_list, unsigned* long_count) {
  using A = typename Fn::A;
  __shared__ A sh[256];
  const int lane = int(threadIdx.x) & (FX - 1);
  const Idx groups = Idx(gridDim.x) * Idx(blockDim.x / FX);
  for (Idx w = (Idx(blockIdx.x) * Idx(blockDim.x) + Idx(threadIdx.x)) / FX; w < W; w += groups) {
    const Idx t = tile_i[w];
    if (!(tile_i[w + 1] > t && q[t] < tile_j[w])) continue;  // no crossing segment completes in w
    const Idx w0 = first_carry_tile(q, t, items);
    if (w - w0 > kShortFix) {
      if (lane == 0) long_list[atomicAdd(long_count, 1u)] = w;
      continue;
    }
    for (Idx f = lane; f < inner; f += FX) {
      A acc = fn.identity();
      for (Idx p = w0; p < w; ++p) acc = fn.combine(acc, carry[p * inner + f]);
      fn.finish(t, f, fn.combine(acc, head[w * inner + f]));
    }
  }
  // long_count[1] (written by prepare) is 0 when no crossing segment spans more
  // than kShortFix tiles: phase 1 listed none, and nothing after the grid.sync
  // has work. The same value in every block. (Session 6: the grid.sync and the
  // counter's re-read were part of the 5-12 us this kernel takes on calls of
  // short segments; bench/NOTES.md.)
  if (long_count[1] == 0) return;
  cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  grid.sync();
  const unsigned nlong = __ldcg(long_count);
  if (nlong == 0) return;  // the same value in every block: no grid.sync is skipped by some only
  // Phase 2: chunk partials of the long segments' carries. A long segment has
  // more than kShortFix >= kFixChunk carries, so within one chunk it either holds
  // the chunk's first tile or starts inside the chunk and holds its last tile: at
  // most two long runs per chunk, found from the chunk's two ends (no walk over
  // the chunk's short runs, e.g. 32 tiles of single-element segments).
  static_assert(kFixChunk <= kShortFix, "a long segment must reach a chunk edge");
  const Idx U = tile_i[W];  // every segment end lies before the last boundary
  const int64_t nchunk = (int64_t(W) + kFixChunk - 1) / kFixChunk;
  const int64_t work = nchunk * int64_t(inner);
  const int64_t gstride = int64_t(gridDim.x) * blockDim.x;
  auto combine_run = [&](Idx b, Idx e, Idx f) {  // carries [b, e) in tile order, 8 loads in flight
    constexpr int B = 8;
    A acc = fn.identity();
    for (Idx p0 = b; p0 < e; p0 += B) {
      A v[B];
#pragma unroll
      for (int u = 0; u < B; ++u) v[u] = p0 + u < e ? carry[(p0 + u) * inner + f] : fn.identity();
#pragma unroll
      for (int u = 0; u < B; ++u)
        if (p0 + u < e) acc = fn.combine(acc, v[u]);
    }
    carry[b * inner + f] = acc;  // the run's tiles belong to this thread alone
  };
  for (int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; id < work; id += gstride) {
    const int64_t k = id / int64_t(inner);
    const Idx f = Idx(id - k * int64_t(inner));
    const Idx s0 = Idx(k * kFixChunk);
    const Idx cend = Idx((k + 1) * kFixChunk < int64_t(W) ? (k + 1) * kFixChunk : int64_t(W));
    // The carry of tile p belongs to segment tile_i[p + 1] (open at the end of p);
    // segment t owns the carries of tiles [first_carry_tile(t), first_carry_tile(t + 1)).
    const Idx ta = tile_i[s0 + 1], tb = tile_i[cend];  // tile_i[W] = U: nothing open
    if (ta < U) {
      const Idx w0 = first_carry_tile(q, ta, items), we = first_carry_tile(q, Idx(ta + 1), items);
      if (we - w0 > kShortFix) combine_run(s0, we < cend ? we : cend, f);  // the segment phase 1 listed (w = we)
    }
    if (tb < U && tb != ta) {  // starts inside the chunk (tile s0 belongs to ta): w0 > s0
      const Idx w0 = first_carry_tile(q, tb, items), we = first_carry_tile(q, Idx(tb + 1), items);
      if (we - w0 > kShortFix) combine_run(w0, cend, f);
    }
  }
  grid.sync();
  // Phase 3: one block per long segment, over its partials: lanes x features (32,
  // or 1 when inner == 1) by strided partials, then a fixed-order tree.
  const int FY = inner == 1 ? 1 : 32;
  const int CY = 256 / FY;
  const int fx = int(threadIdx.x) % FY, cy = int(threadIdx.x) / FY;
  for (unsigned e = blockIdx.x; e < nlong; e += gridDim.x) {
    const Idx w = __ldcg(long_list + e);
    const Idx t = tile_i[w];
    const Idx w0 = first_carry_tile(q, t, items);
    const Idx c0 = w0 / kFixChunk;
    const Idx np = (w - 1) / kFixChunk - c0 + 1;  // partial 0 at w0, partial m > 0 at (c0 + m) * kFixChunk
    for (Idx f0 = 0; f0 < inner; f0 += FY) {
      const Idx f = f0 + fx;
      A acc = fn.identity();
      if (f < inner)
        for (Idx m0 = cy; m0 < np; m0 += CY * 4) {
          A v[4];
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            const Idx m = m0 + u * CY;
            const Idx slot = m == 0 ? w0 : (c0 + m) * kFixChunk;
            v[u] = m < np ? __ldcg(carry + slot * inner + f) : fn.identity();
          }
#pragma unroll
          for (int u = 0; u < 4; ++u)
            if (m0 + u * CY < np) acc = fn.combine(acc, v[u]);
        }
      sh[threadIdx.x] = acc;
      __syncthreads();
      for (int s = CY / 2; s > 0; s >>= 1) {
        if (cy < s) sh[cy * FY + fx] = fn.combine(sh[cy * FY + fx], sh[(cy + s) * FY + fx]);
        __syncthreads();
      }
      if (cy == 0 && f < inner) fn.finish(t, f, fn.combine(sh[fx], head[w * inner + f]));
      __syncthreads();
    }
  }
}

// ---------------------------------------------------------------- prod backward

template <class T>
__global__ void __launch_bounds__(256) prod_bwd_warp(const T* __restrict__ g, const T* __restrict__ x,
                                                     T* __restrict__ gi, const int64_t* __restrict__ q, int64_t S,
                                                     int64_t inner, int64_t slabs, dacc_t<T> start,
                                                     int64_t nwarps, dacc_t<T>* __restrict__ pre_buf) {
  // The prefix pass stores g * start * prefix in the accumulation type: in pre_buf
  // for the 16-bit types (no double rounding, no half overflow between passes),
  // in gi itself when T is its own accumulation type.
  using A = dacc_t<T>;
  auto put = [&](int64_t o, A v) {
    if (pre_buf)
      pre_buf[o] = v;
    else
      gi[o] = st<T>(v);
  };
  auto get = [&](int64_t o) -> A { return pre_buf ? pre_buf[o] : A(ld(gi[o])); };
  const int64_t wid = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (wid >= nwarps) return;
  const int64_t seg = wid / slabs, slab = wid - seg * slabs;
  const int64_t r = seg / S, s = seg - r * S;
  const int64_t v = 1 + r * (S + 1) + s;
  const int64_t b = q[v], e = q[v + 1];
  if (inner == 1) {
    const A gs = A(ld(g[seg])) * start;
    A pre = A(1);
    for (int64_t base = b; base < e; base += 32) {
      const int64_t j = base + lane;
      const A xv = j < e ? A(ld(x[j])) : A(1);
      A inc = xv;
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const A o = __shfl_up_sync(kFull, inc, off);
        if (lane >= off) inc = o * inc;
      }
      A exc = __shfl_up_sync(kFull, inc, 1);
      if (lane == 0) exc = A(1);
      if (j < e) put(j, gs * (pre * exc));
      pre = pre * __shfl_sync(kFull, inc, 31);
    }
    A suf = A(1);
    const int64_t nchunks = (e - b + 31) / 32;
    for (int64_t k = nchunks - 1; k >= 0; --k) {
      const int64_t j = b + k * 32 + lane;
      const A xv = j < e ? A(ld(x[j])) : A(1);
      A inc = xv;
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const A o = __shfl_down_sync(kFull, inc, off);
        if (lane + off < 32) inc = inc * o;
      }
      A exc = __shfl_down_sync(kFull, inc, 1);
      if (lane == 31) exc = A(1);
      if (j < e) gi[j] = st<T>(get(j) * (exc * suf));
      suf = __shfl_sync(kFull, inc, 0) * suf;
    }
    return;
  }
  const int64_t f = slab * 32 + lane;
  if (f >= inner) return;
  const A gs = A(ld(g[seg * inner + f])) * start;
  A pre = A(1);
  for (int64_t j = b; j < e; ++j) {
    const int64_t o = j * inner + f;
    put(o, gs * pre);
    pre = pre * A(ld(x[o]));
  }
  A suf = A(1);
  for (int64_t j = e - 1; j >= b; --j) {
    const int64_t o = j * inner + f;
    gi[o] = st<T>(get(o) * suf);
    suf = suf * A(ld(x[o]));
  }
}

}  // namespace segred::cuda
