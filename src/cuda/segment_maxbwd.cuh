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
//   fixup_tree<StatsFn>  unchanged: the exact total of every crossing segment
//       into stats[o] (crossing segments only; nothing else reads stats).
//   maxmin_repair  one thread per (tile, feature): for the tile's crossing
//       segments, where the local record differs from the total (and the tile has
//       ties): split: rewrite the tile's part of the segment with g / k_total;
//       first/last: rewrite the one position the tile wrote g to (its local
//       first/last tied position), which is not the winner: 0. With random data a
//       crossing segment's ties lie in one tile, whose local record equals the
//       total: nothing is re-read. An all-equal long segment rewrites its tiles
//       (correct, one more read of that segment).
// Bytes: x read once (the repair reads only records and the rare re-written
// parts), gi written once, plus 2 Idx records per (tile, feature) written and
// read by the fix-up and by the repair (3 for tiles of segments > kShortFix tiles).
#pragma once
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
template <class T, class Idx>
__global__ void __launch_bounds__(256) flat_maxmin_bwd(StatsFn<T, Idx> sf, BwdFn<T, Idx> bf, const T* __restrict__ x,
                                                       T* __restrict__ gi, const Idx* __restrict__ q, Idx W, Idx nel,
                                                       const Idx* __restrict__ tile_i, const Idx* __restrict__ tile_j,
                                                       Idx* __restrict__ carry, Idx* __restrict__ carry_keep,
                                                       Idx* __restrict__ head, Idx titems, Idx U) {
  wait_prior_grid();  // launched after prepare (launch_after_prior)
  using Raw = T;
  using S = Idx;
  extern __shared__ __align__(16) unsigned char smem[];
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
  // Walk 2: gradients, in place in the staged tile (own positions only).
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
    for (int k = 0; k < run; ++k) {
      const int sp = spad<Raw>(base + k);
      t.s_x[sp] = bf.elem(c, t.j0 + tj + k, t.s_x[sp]);
    }
    tj += run;
    items -= run;
    if (items > 0) {
      ++ti;
      --items;
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

// inner > 1: feat_elementwise's walk; per segment of the tile, the rows are
// loaded once for the statistic (StatsFn, feat_reduce's order) and once more
// (the same lane, right after: L1/L2) for the write. Records as feat_reduce's.
template <class T, class Idx, int V>
__global__ void __launch_bounds__(256) feat_maxmin_bwd(StatsFn<T, Idx> sf, BwdFn<T, Idx> bf, const T* __restrict__ x,
                                                       T* __restrict__ gi, const Idx* __restrict__ q, Idx W, Idx slabs,
                                                       int G, Idx inner, const Idx* __restrict__ tile_i,
                                                       const Idx* __restrict__ tile_j, Idx* __restrict__ carry,
                                                       Idx* __restrict__ carry_keep, Idx* __restrict__ head,
                                                       Idx titems, Idx U) {
  wait_prior_grid();  // launched after prepare (launch_after_prior)
  using Raw = T;
  using S = Idx;
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
    typename BwdFn<T, Idx>::Ctx b[V];
#pragma unroll
    for (int v = 0; v < V; ++v) b[v] = maxmin_ctx(bf, i, l.f0 + v, acc[v]);
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
        for (int v = 0; v < V; ++v) o.v[v] = bf.elem(b[v], jj + u, r[u].v[v]);
        *reinterpret_cast<Vec<Raw, V>*>(po + (jj + u) * inner) = o;
      }
    }
    for (; jj < e; ++jj) {
      const Vec<Raw, V> r = load_vec<Raw, V>(p + jj * inner);
      Vec<Raw, V> o;
#pragma unroll
      for (int v = 0; v < V; ++v) o.v[v] = bf.elem(b[v], jj, r.v[v]);
      *reinterpret_cast<Vec<Raw, V>*>(po + jj * inner) = o;
    }
    if (i == i1) break;
  }
}

// The split repair of a flat tile's part [jb, je) of one crossing segment, x
// 16-byte aligned: every tied position gets bf.elem with the segment's total
// count (c). Session 20: the part is at most one tile (kTile positions: 2 KB of
// fp32 or 16-bit data), so each lane issues all its 16-byte loads of it (kRepVecs,
// 4 per lane for a whole fp32 or 16-bit tile) before it tests any: one memory
// round trip per tile. The scalar loop (one 2- or 4-byte load per lane, 32
// dependent rounds per 16-bit tile) kept a re-reading warp on the latency of every
// 64 bytes. The positions and the expression are the scalar loop's: the same gi.
// The (fewer than VE) positions before the first and after the last whole vector
// are read one by one, so no load leaves [jb, je).
template <class T, class Idx, class Ctx, class BF>
__device__ __forceinline__ void repair_split_flat_vec(const BF& bf, const Ctx& c, const T* __restrict__ x,
                                                      T* __restrict__ gi, Idx jb, Idx je, int lane) {
  using A = dacc_t<T>;
  constexpr int VE = kVecE<T>, kRepVecs = 4;
  // Split's gradient does not depend on the position: elem of one tied raw value
  // (y itself, tied by is_extremum, NaN included) is every tied position's, so the
  // loops store it without the division per position (and no call in the loops).
  const T tied = bf.elem(c, jb, st<T>(c.y));
  auto one = [&](Idx j) {
    if (ops::is_extremum(A(ld(x[j])), c.y)) gi[j] = tied;
  };
  const Idx va = (jb + Idx(VE - 1)) / Idx(VE), vb = je / Idx(VE);  // whole vectors [va, vb)
  if (va >= vb) {
    for (Idx j = jb + Idx(lane); j < je; j += 32) one(j);
    return;
  }
  if (jb + Idx(lane) < va * Idx(VE)) one(jb + Idx(lane));
  if (vb * Idx(VE) + Idx(lane) < je) one(vb * Idx(VE) + Idx(lane));
  for (Idx v0 = va + Idx(lane); v0 < vb; v0 += Idx(32 * kRepVecs)) {
    Vec<T, VE> r[kRepVecs];
#pragma unroll
    for (int u = 0; u < kRepVecs; ++u)
      if (v0 + Idx(32 * u) < vb) r[u] = load_vec<T, VE>(x + (v0 + Idx(32 * u)) * Idx(VE));
#pragma unroll
    for (int u = 0; u < kRepVecs; ++u) {
      const Idx j0 = (v0 + Idx(32 * u)) * Idx(VE);
#pragma unroll
      for (int e = 0; e < VE; ++e)
        if (v0 + Idx(32 * u) < vb && ops::is_extremum(A(ld(r[u].v[e])), c.y)) gi[j0 + Idx(e)] = tied;
    }
  }
}

// After fixup_tree<StatsFn> (stats[o] = the total of every crossing segment):
// the tile's crossing segments are corrected where its local record was not the
// total (see the header comment). inner == 1 (FLAT): one warp per tile, the
// lanes stride over the re-scanned positions (coalesced; 16-byte vectors where x
// is aligned: repair_split_flat_vec); inner > 1: one thread
// per (tile, feature), at most kFeatItems rows each, consecutive features in
// consecutive lanes. Only tied positions are rewritten (every other position of
// a max/min segment already holds 0). Each tile writes only its own positions.
template <bool FLAT, class T, class Idx>
__global__ void __launch_bounds__(256) maxmin_repair(StatsFn<T, Idx> sf, BwdFn<T, Idx> bf, const T* __restrict__ x,
                                                     T* __restrict__ gi, const Idx* __restrict__ q,
                                                     const Idx* __restrict__ tile_i, const Idx* __restrict__ tile_j,
                                                     Idx W, Idx U, Idx inner, Idx titems, const Idx* __restrict__ carry,
                                                     const Idx* __restrict__ carry_keep,
                                                     const Idx* __restrict__ head, const Idx* __restrict__ stats) {
  using A = dacc_t<T>;
  const int lane = FLAT ? int(threadIdx.x & 31) : 0;
  const int step = FLAT ? 32 : 1;
  const int64_t total = int64_t(W) * int64_t(inner);
  const int64_t first = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / step;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x / step;
  const bool vec = FLAT && aligned16_dev(x);  // the vector re-read (16-byte loads of x)
  auto fix = [&](Idx t, Idx f, Idx r, Idx jb, Idx je) {
    if (r == sf.identity()) return;  // no tie in this tile's part (ghost segments: always)
    Idx o;
    if (!bf.map.real(t, o)) return;
    const Idx R = stats[o * inner + f];
    if (r == R) return;  // the local view was the whole one
    const auto c = maxmin_ctx(bf, t, f, R);
    if (FLAT && sf.tie == 0 && vec) {
      repair_split_flat_vec(bf, c, x, gi, jb, je, lane);
    } else if (sf.tie == 0) {
      for (Idx j = jb + Idx(lane); j < je; j += Idx(step)) {
        const T xv = x[j * inner + f];
        if (ops::is_extremum(A(ld(xv)), c.y)) gi[j * inner + f] = bf.elem(c, j, xv);
      }
    } else if (lane == 0) {
      gi[r * inner + f] = bf.elem(c, r, x[r * inner + f]);  // tied, not the winner: 0
    }
  };
  for (int64_t id = first; id < total; id += stride) {
    const Idx w = Idx(id / int64_t(inner));
    const Idx f = Idx(id - int64_t(w) * int64_t(inner));
    const Idx i0 = tile_i[w], i1 = tile_i[w + 1], j0 = tile_j[w], j1 = tile_j[w + 1];
    if (i1 > i0 && q[i0] < j0) fix(i0, f, head[w * inner + f], j0, q[i0 + 1]);  // began earlier, ends in w
    if (i1 < U) {                                                                // open at w's end
      const Idx b = q[i1];
      const Idx* rec = keep_carry(q, i1, titems, U) ? carry_keep : carry;  // short: fixup_tree left it
      fix(i1, f, rec[w * inner + f], b > j0 ? b : j0, j1);
    }
  }
}

}  // namespace segred::cuda
