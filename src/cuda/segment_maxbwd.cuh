// max/min backward of segment_reduce in one read of x (session 7, issue #4).
//
// Before: a whole StatsFn reduction pass (main kernel + fixup_tree: per (segment,
// feature) the tie count for tie="split", the first/last tied position for
// "first"/"last"), then the elementwise pass read x again: 3N element bytes.
// Now (run_bwd, src/cuda/segment_reduce_impl.cuh):
//   flat_maxmin_bwd / feat_maxmin_bwd  one kernel per tile: the tile's staged (flat)
//       or just-loaded (features: the segment's rows are loaded twice by the same
//       lane, the second time from L1/L2) values give every segment's statistic
//       within the tile (StatsFn's value/combine, the exact integer combine), and
//       the tile writes gi with it (BwdFn::elem with that statistic: the same
//       expression as before, so a segment that lies wholly inside the tile gets
//       bitwise the old gradient). For the (at most two) segments that cross the
//       tile's edges the statistic is the tile's local view; the tile leaves it as
//       fixup_tree's carry/head records (the layout of the StatsFn pass) and,
//       for a segment longer than kShortFix tiles, a copy of the carry
//       (fixup_tree's phase 2 combines long segments' carries in place).
//   fixup_tree_rep<StatsFn>  fixup_tree: the exact total of every crossing
//       segment into stats[o] (crossing segments only; nothing else reads stats);
//       since session 8 it also compares each record of the segment with the
//       total and lists the records that need the repair (RepairList).
//   maxmin_repair  over that list only (session 7 ran it per (tile, feature)
//       over every tile: 40 us on 1d_2Mx32 for nothing): where a tile's local
//       record differs from the total (and the tile has ties): split: rewrite
//       the tile's part of the segment with g / k_total; first/last: rewrite the
//       one position the tile wrote g to (its local first/last tied position),
//       which is not the winner: 0. With random data a crossing segment's ties
//       lie in one tile, whose local record equals the total: the list is empty
//       and the repair's blocks exit at once. An all-equal long segment rewrites
//       its tiles (correct, one more read of that segment).
// Bytes: x read once (the repair reads only the rare re-written parts), gi
// written once, plus 2 Idx records per (tile, feature) written and read by the
// fix-up (3 for tiles of segments > kShortFix tiles), and the list's entries.
#pragma once
#include <climits>

#include "src/cuda/segment_kernels.cuh"

namespace segred::cuda {

// BwdFn's context for a max/min segment with a given statistic (BwdFn::ctx reads
// it from stats[]; here it comes from the tile). y: the value StatsFn's context
// already loaded (the same A(ld(y[o * inner + f]))).
template <class T, class Idx>
__device__ __forceinline__ typename BwdFn<T, Idx>::Ctx maxmin_ctx(const BwdFn<T, Idx>& bf, Idx v, Idx f, Idx stat) {
  using A = dacc_t<T>;
  typename BwdFn<T, Idx>::Ctx c{A(0), A(0), Idx(0), false};
  Idx o;
  if (!bf.map.real(v, o)) return c;
  c.real = true;
  c.g = A(ld(bf.g[o * bf.inner + f]));
  c.y = A(ld(bf.y[o * bf.inner + f]));
  c.stat = stat;
  return c;
}

// Whether the carry of a tile whose open segment is t must be kept for the
// repair: t crosses more than kShortFix tiles, so fixup_tree's phase 2 combines
// its carries in place (the same test as its phase 1: the tile holding t's end
// minus the first tile holding a carry of t). Short segments' carries stay.
template <class Idx>
__device__ __forceinline__ bool keep_carry(const Idx* q, Idx t, Idx items, Idx U) {
  return t < U && first_carry_tile(q, Idx(t + 1), items) - first_carry_tile(q, t, items) > kShortFix;
}

// inner == 1: flat_reduce's walk with StatsFn (lane partials, warp segmented
// scan), then the per-segment tile totals are handed to every lane that holds a
// part of the segment, then flat_elementwise's walk and write-back.
//   A lane's first segment (ti0): completed in the lane (done_first): the scan's
//     combine of the earlier lanes' partials and the lane's own (flat_reduce's r);
//     otherwise it is also the lane's open segment.
//   A lane's open segment at its end (ti_last): its total is the head total of
//     the next lane that completes a segment (the lanes in between hold only this
//     segment), or, when no later lane completes one, the scan at lane 31 (the
//     tile's carry: the segment crosses the tile's end).
//   Segments between (wholly inside the lane): counted again from shared memory
//     in the write walk.
// Launch bounds (256, 6) for i32: walk 2's tied-position tracking (session 8)
// took the bf16 kernel from 40 to 48 registers (5 blocks of 256 per SM instead
// of the 6 its shared memory allows); capped it is 40 again without spills
// (ptxas -v, sm_90).
template <class T, class Idx>
__global__ void __launch_bounds__(256, sizeof(Idx) == 4 ? 6 : 1) flat_maxmin_bwd(StatsFn<T, Idx> sf, BwdFn<T, Idx> bf, const T* __restrict__ x,
                                                       T* __restrict__ gi, const Idx* __restrict__ q, Idx W, Idx nel,
                                                       const Idx* __restrict__ tile_i, const Idx* __restrict__ tile_j,
                                                       Idx* __restrict__ carry, Idx* __restrict__ carry_keep,
                                                       Idx* __restrict__ head, Idx titems, Idx U,
                                                       unsigned* __restrict__ rep_count, unsigned* __restrict__ hpos,
                                                       unsigned* __restrict__ cpos) {
  using Raw = T;
  using S = Idx;
  extern __shared__ __align__(16) unsigned char smem[];
  if (blockIdx.x == 0 && threadIdx.x == 0) *rep_count = 0u;  // fixup_tree's repair list (runs after this kernel)
  const int lane = threadIdx.x & 31, wib = threadIdx.x >> 5;
  const Idx w = Idx(blockIdx.x) * Idx(blockDim.x >> 5) + wib;
  if (w >= W) return;  // whole warps only
  const bool vec = kFlatVec<Raw> && aligned16_dev(gi) && aligned16_dev(x);
  const auto t = flat_stage<Raw, Idx>(x, true, vec, nel, q, tile_i, tile_j, w,
                                      smem + size_t(wib) * flat_smem_per_warp<Raw, Idx>(), lane);
  int ti0, tj0, items0;
  flat_lane_split<kIpl<Raw>>(t.s_e, t.ns, t.ne, lane, ti0, tj0, items0);
  // Walk 1: statistics (flat_reduce with StatsFn, middle segments dropped).
  int ti = ti0, tj = tj0, items = items0;
  S acc = sf.identity(), first = acc;
  bool done_first = false;
  auto sc = sf.ctx(t.i0 + ti, 0);
  while (items > 0) {
    const int e = ti < t.ns ? int(t.s_e[ti]) : t.ne;
    const int run = min(e - tj, items);
    const int base = t.o + tj;
    for (int k = 0; k < run; ++k) acc = sf.combine(acc, sf.value(sc, t.j0 + tj + k, t.s_x[spad<Raw>(base + k)]));
    tj += run;
    items -= run;
    if (items > 0) {  // the next item completes segment ti
      if (!done_first) {
        first = acc;
        done_first = true;
      }
      acc = sf.identity();
      ++ti;
      --items;
      sc = sf.ctx(t.i0 + ti, 0);
    }
  }
  const int ti_last = ti;
  Idx key = t.i0 + ti;
  S val = acc;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const Idx k2 = __shfl_up_sync(kFull, key, off);
    const S v2 = __shfl_up_sync(kFull, val, off);
    if (lane >= off && k2 == key) val = sf.combine(v2, val);
  }
  Idx kin = __shfl_up_sync(kFull, key, 1);
  const S vin = __shfl_up_sync(kFull, val, 1);
  if (lane == 0) kin = -1;
  S head_total = sf.identity();
  if (done_first) {
    const Idx v = t.i0 + ti0;
    head_total = kin == v ? sf.combine(vin, first) : first;
    if (v == t.i0 && q[t.i0] < t.j0) head[w] = head_total;  // began in an earlier tile: fix-up record
  }
  const unsigned df = __ballot_sync(kFull, done_first);
  const unsigned later = lane == 31 ? 0u : (df & (kFull << (lane + 1)));
  const int nxt = later ? __ffs(int(later)) - 1 : 31;
  const S from_next = __shfl_sync(kFull, head_total, nxt);
  const S at_end = __shfl_sync(kFull, val, 31);
  const S tail_total = later ? from_next : at_end;
  if (!done_first) head_total = tail_total;
  if (lane == 31) {
    carry[w] = val;  // the segment open at the tile's end
    if (keep_carry(q, t.i1, titems, U)) carry_keep[w] = val;  // fixup_tree overwrites long segments' carries
  }
  // Walk 2: gradients, in place in the staged tile (own positions only). For
  // tie = split it also finds the first and the last tied position (tile-relative)
  // of the tile's two crossing segments (ti == 0: the head's, ti == t.ns: the
  // carry's): the repair of a listed record then writes those two and re-reads
  // only what lies between them, and nothing when the local count is <= 2.
  const bool split = sf.tie == 0;
  int hlo = INT_MAX, hhi = -1, clo = INT_MAX, chi = -1;
  ti = ti0;
  tj = tj0;
  items = items0;
  while (items > 0) {
    const int e = ti < t.ns ? int(t.s_e[ti]) : t.ne;
    const int run = min(e - tj, items);
    const int base = t.o + tj;
    S stat;
    if (ti == ti0) {
      stat = head_total;
    } else if (ti == ti_last) {
      stat = tail_total;
    } else {  // wholly inside this lane's items
      const auto c2 = sf.ctx(t.i0 + ti, 0);
      stat = sf.identity();
      for (int k = 0; k < run; ++k) stat = sf.combine(stat, sf.value(c2, t.j0 + tj + k, t.s_x[spad<Raw>(base + k)]));
    }
    const auto c = maxmin_ctx(bf, t.i0 + ti, Idx(0), stat);
    if (split && (ti == 0 || ti == t.ns)) {
      int rlo = INT_MAX, rhi = -1;
      for (int k = 0; k < run; ++k) {
        const int sp = spad<Raw>(base + k);
        const Raw raw = t.s_x[sp];
        t.s_x[sp] = bf.elem(c, t.j0 + tj + k, raw);
        if (ops::is_extremum(dacc_t<T>(ld(raw)), c.y)) {  // StatsFn::value's predicate: the counted positions
          rlo = min(rlo, tj + k);
          rhi = tj + k;
        }
      }
      if (ti == 0) {
        hlo = min(hlo, rlo);
        hhi = max(hhi, rhi);
      }
      if (ti == t.ns) {
        clo = min(clo, rlo);
        chi = max(chi, rhi);
      }
    } else {
      for (int k = 0; k < run; ++k) {
        const int sp = spad<Raw>(base + k);
        t.s_x[sp] = bf.elem(c, t.j0 + tj + k, t.s_x[sp]);
      }
    }
    tj += run;
    items -= run;
    if (items > 0) {
      ++ti;
      --items;
    }
  }
  if (split) {  // uniform over the grid
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      hlo = min(hlo, __shfl_xor_sync(kFull, hlo, off));
      hhi = max(hhi, __shfl_xor_sync(kFull, hhi, off));
      clo = min(clo, __shfl_xor_sync(kFull, clo, off));
      chi = max(chi, __shfl_xor_sync(kFull, chi, off));
    }
    if (lane == 0) {  // read only for listed records (local count >= 1: lo <= hi < kTile <= 2^16)
      hpos[w] = (unsigned(hlo) & 0xffffu) | (unsigned(hhi) << 16);
      cpos[w] = (unsigned(clo) & 0xffffu) | (unsigned(chi) << 16);
    }
  }
  __syncwarp();
  // Write-back: flat_elementwise's.
  if (kFlatVec<Raw> && vec) {
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

// The write side of feat_maxmin_bwd (session 8): BwdFn::elem of a max/min
// segment with its statistic folded in. Per feature the loop keeps y, the stat
// and the tied value (g / k for split, g for first/last; 0 for a ghost segment,
// so every position gets +0 as BwdFn::elem gives it) instead of BwdFn::Ctx's g,
// y, stat and real; the division runs once per (segment, feature) instead of
// once per tied position. The same expressions: bitwise the same gi.
template <class T, class Idx>
struct MaxminW {
  dacc_t<T> y, tv;
  Idx stat;
};
template <class T, class Idx>
__device__ __forceinline__ MaxminW<T, Idx> maxmin_w(const BwdFn<T, Idx>& bf, Idx v, Idx f, Idx stat) {
  using A = dacc_t<T>;
  MaxminW<T, Idx> m{A(0), A(0), Idx(-1)};
  Idx o;
  if (!bf.map.real(v, o)) return m;
  const A g = A(ld(bf.g[o * bf.inner + f]));
  m.y = A(ld(bf.y[o * bf.inner + f]));
  m.stat = stat;
  m.tv = bf.tie == 0 ? g / A(stat) : g;
  return m;
}
template <class T, class Idx>
__device__ __forceinline__ T maxmin_elem(const MaxminW<T, Idx>& m, bool split, Idx j, T raw) {
  using A = dacc_t<T>;
  return st<T>(ops::is_extremum(A(ld(raw)), m.y) && (split || j == m.stat) ? m.tv : A(0));
}

// inner > 1: feat_elementwise's walk; per segment of the tile, the rows are
// loaded once for the statistic (StatsFn, feat_reduce's order) and once more
// (the same lane, right after: L1/L2) for the write. Records as feat_reduce's.
template <class T, class Idx, int V>
__global__ void __launch_bounds__(256) feat_maxmin_bwd(StatsFn<T, Idx> sf, BwdFn<T, Idx> bf, const T* __restrict__ x,
                                                       T* __restrict__ gi, const Idx* __restrict__ q, Idx W, Idx slabs,
                                                       int G, Idx inner, const Idx* __restrict__ tile_i,
                                                       const Idx* __restrict__ tile_j, Idx* __restrict__ carry,
                                                       Idx* __restrict__ carry_keep, Idx* __restrict__ head,
                                                       Idx titems, Idx U, unsigned* __restrict__ rep_count) {
  using Raw = T;
  using S = Idx;
  if (blockIdx.x == 0 && threadIdx.x == 0) *rep_count = 0u;  // fixup_tree's repair list (runs after this kernel)
  const FeatLane<Idx> l = feat_lane<Idx>(G, V, slabs);
  if (l.w >= W || l.f0 >= inner) return;
  const Idx i0 = tile_i[l.w], j0 = tile_j[l.w], i1 = tile_i[l.w + 1], j1 = tile_j[l.w + 1];
  const bool crossing0 = q[i0] < j0;
  const Raw* p = x + l.f0;
  Raw* po = gi + l.f0;
  Idx j = j0;
  for (Idx i = i0;; ++i) {
    const Idx e = i < i1 ? q[i + 1] : j1;
    const Idx jb = j;
    typename StatsFn<T, Idx>::Ctx c[V];
    S acc[V];
#pragma unroll
    for (int v = 0; v < V; ++v) {
      c[v] = sf.ctx(i, l.f0 + v);
      acc[v] = sf.identity();
    }
    constexpr int UR = V >= 8 ? 4 : 8;  // row loads in flight per lane (fewer for V = 8: registers)
    for (; j + UR <= e; j += UR) {
      Vec<Raw, V> r[UR];
#pragma unroll
      for (int u = 0; u < UR; ++u) r[u] = load_vec<Raw, V>(p + (j + u) * inner);
#pragma unroll
      for (int u = 0; u < UR; ++u)
#pragma unroll
        for (int v = 0; v < V; ++v) acc[v] = sf.combine(acc[v], sf.value(c[v], j + u, r[u].v[v]));
    }
    for (; j < e; ++j) {
      const Vec<Raw, V> r = load_vec<Raw, V>(p + j * inner);
#pragma unroll
      for (int v = 0; v < V; ++v) acc[v] = sf.combine(acc[v], sf.value(c[v], j, r.v[v]));
    }
    if (i == i1) {
      const bool keep = keep_carry(q, i1, titems, U);
#pragma unroll
      for (int v = 0; v < V; ++v) {
        carry[l.w * inner + l.f0 + v] = acc[v];
        if (keep) carry_keep[l.w * inner + l.f0 + v] = acc[v];
      }
    } else if (i == i0 && crossing0) {
#pragma unroll
      for (int v = 0; v < V; ++v) head[l.w * inner + l.f0 + v] = acc[v];
    }
    MaxminW<T, Idx> b[V];
#pragma unroll
    for (int v = 0; v < V; ++v) b[v] = maxmin_w(bf, i, l.f0 + v, acc[v]);
    const bool split = bf.tie == 0;
    Idx jj = jb;
    constexpr int UW = V >= 8 ? 2 : 4;  // V = 8 (16-bit): 80 registers (3 blocks per SM) instead of 103 (2)
    for (; jj + UW <= e; jj += UW) {
      Vec<Raw, V> r[UW];
#pragma unroll
      for (int u = 0; u < UW; ++u) r[u] = load_vec<Raw, V>(p + (jj + u) * inner);
#pragma unroll
      for (int u = 0; u < UW; ++u) {
        Vec<Raw, V> o;
#pragma unroll
        for (int v = 0; v < V; ++v) o.v[v] = maxmin_elem(b[v], split, jj + u, r[u].v[v]);
        *reinterpret_cast<Vec<Raw, V>*>(po + (jj + u) * inner) = o;
      }
    }
    for (; jj < e; ++jj) {
      const Vec<Raw, V> r = load_vec<Raw, V>(p + jj * inner);
      Vec<Raw, V> o;
#pragma unroll
      for (int v = 0; v < V; ++v) o.v[v] = maxmin_elem(b[v], split, jj, r.v[v]);
      *reinterpret_cast<Vec<Raw, V>*>(po + jj * inner) = o;
    }
    if (i == i1) break;
  }
}

// After fixup_tree_rep<StatsFn> (stats[o] = the total of every crossing
// segment; list = the records whose local view was not the total, see
// RepairList in src/cuda/segment_kernels.cuh): each entry corrects one tile's
// part of one crossing segment for one feature. split: re-read that part and
// write g / k_total to its tied positions (every other position of a max/min
// segment already holds 0); first/last: the one position the tile wrote g to
// (its local first/last tied position) is not the winner: 0. inner == 1 (FLAT):
// one warp per entry; split: the first and last tied positions the fused kernel
// recorded (hpos/cpos) are written directly and only the positions between them
// are re-read (none when the local count is <= 2), lanes striding (coalesced);
// inner > 1: one thread per entry. The grid comes from the list's capacity
// (capped); the count is read on the device: with random data it is 0 and
// every block exits at once (no host sync). Entries write disjoint positions.
template <bool FLAT, class T, class Idx>
__global__ void __launch_bounds__(256) maxmin_repair(StatsFn<T, Idx> sf, BwdFn<T, Idx> bf, const T* __restrict__ x,
                                                     T* __restrict__ gi, const Idx* __restrict__ q,
                                                     const Idx* __restrict__ tile_i, const Idx* __restrict__ tile_j,
                                                     Idx inner, const Idx* __restrict__ list,
                                                     const unsigned* __restrict__ count,
                                                     const Idx* __restrict__ stats,
                                                     const unsigned* __restrict__ hpos,
                                                     const unsigned* __restrict__ cpos) {
  using A = dacc_t<T>;
  const int lane = FLAT ? int(threadIdx.x & 31) : 0;
  const int step = FLAT ? 32 : 1;
  const int64_t first = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / step;
  const int64_t n = int64_t(*count);
  if (first >= n) return;  // the common case: nothing to repair
  const int64_t stride = int64_t(gridDim.x) * blockDim.x / step;
  auto fix = [&](Idx t, Idx f, Idx r, Idx jb, Idx je, const unsigned* pos, Idx w) {
    if (r == sf.identity()) return;  // never listed (no tie in this tile's part)
    Idx o;
    if (!bf.map.real(t, o)) return;
    const Idx R = stats[o * inner + f];
    if (r == R) return;  // never listed (the local view was the whole one)
    const auto c = maxmin_ctx(bf, t, f, R);
    if (sf.tie == 0) {
      if constexpr (FLAT) {  // the tile's first and last tied positions of t (flat_maxmin_bwd's walk 2)
        const unsigned pk = pos[w];
        const Idx jl = tile_j[w] + Idx(pk & 0xffffu), jh = tile_j[w] + Idx(pk >> 16);
        if (lane == 0) gi[jl * inner + f] = bf.elem(c, jl, x[jl * inner + f]);
        if (lane == 1 && jh != jl) gi[jh * inner + f] = bf.elem(c, jh, x[jh * inner + f]);
        jb = jl + 1;
        je = r > 2 ? jh : jb;  // k <= 2: no tied position between them
      }
      for (Idx j = jb + Idx(lane); j < je; j += Idx(step)) {
        const T xv = x[j * inner + f];
        if (ops::is_extremum(A(ld(xv)), c.y)) gi[j * inner + f] = bf.elem(c, j, xv);
      }
    } else if (lane == 0) {
      gi[r * inner + f] = bf.elem(c, r, x[r * inner + f]);  // tied, not the winner: 0
    }
  };
  for (int64_t id = first; id < n; id += stride) {  // uniform over a warp (FLAT)
    const Idx code = list[2 * id], r = list[2 * id + 1];
    const Idx rec = code >> 1;
    const Idx w = rec / inner;
    const Idx f = rec - w * inner;
    if (code & 1) {  // carry: the segment open at w's end, from its start or w's
      const Idx t = tile_i[w + 1], b = q[t], j0 = tile_j[w];
      fix(t, f, r, b > j0 ? b : j0, tile_j[w + 1], cpos, w);
    } else {  // head: began in an earlier tile, ends in w
      const Idx t = tile_i[w];
      fix(t, f, r, tile_j[w], q[t + 1], hpos, w);
    }
  }
}

}  // namespace segred::cuda
