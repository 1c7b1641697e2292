// max/min backward of segment_reduce in one read of x (session 7, issue #4).
//
// Before: a whole StatsFn reduction pass (main kernel + fixup_tree: per (segment,
// feature) the tie count for tie="split", the first/last tied position for
// "first"/"last"), then the elementwise pass read x again: 3N element bytes.
// Now (run_bwd, src/cuda/segment_reduce_impl.cuh):
//   flat_maxmin_bwd / feat_maxmin_bwd  one kernel per tile: the tile's staged (flat)
//       or just-loaded (features: a lane of at most 4 features keeps the tie bits
//       of a segment's first 64 rows, and loads only the rows past them a second
//       time) values give every segment's statistic within the tile (StatsFn's
//       value/combine, the exact integer combine), and the tile writes gi with it
//       (BwdFn::elem with that statistic: the same expression as before, so a
//       segment that lies wholly inside the tile gets bitwise the old gradient).
//       For the (at most two) segments that cross the tile's edges the statistic is
//       the tile's local view; the tile leaves it as fixup_tree's carry/head
//       records (the layout of the StatsFn pass) and, for a segment longer than
//       kShortFix tiles, a copy of the carry (fixup_tree's phase 2 combines long
//       segments' carries in place). A full flat tile without a segment end is not
//       staged (flat_maxmin_full_tile, session 20): read straight from x, as the
//       forwards' full tiles are.
//   fixup_tree<StatsFn>  unchanged: the exact total of every crossing segment
//       into stats[o] (crossing segments only; nothing else reads stats).
//   flat_maxmin_repair / feat_maxmin_repair  per (tile, feature) (flat: a warp
//       per 32 tiles, session 20): for the tile's crossing segments, where the
//       local record differs from the total (and the tile has ties): split:
//       rewrite the tile's part of the segment with g / k_total;
//       first/last: rewrite the one position the tile wrote g to (its local
//       first/last tied position), which is not the winner: 0. With random data a
//       crossing segment's ties lie in one tile, whose local record equals the
//       total: nothing is re-read. Where they do not, a full flat tile's tied
//       positions come from the tie list the fused kernel left (up to kTieList a
//       tile, session 32), so only a tile with more ties (an all-equal segment)
//       or a staged tile's crossing part is read again.
// Bytes: x read once (the repair reads only records and the rare re-written
// parts), gi written once, plus 2 Idx records per (tile, feature) written and
// read by the fix-up and by the repair (3 for tiles of segments > kShortFix tiles),
// and a 16-byte tie list per flat tile (written by full tiles under split).
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

// The gradient of a max/min (segment, feature) as its write loops use it (session
// 23): the tied value computed once per segment (split: st(g / k), first/last:
// st(g)), so a position costs a compare and a select. elem(split, j, raw) is
// bitwise BwdFn::elem(maxmin_ctx(...), j, raw): a position that is not tied (or,
// for first/last, not the one position `at`) gets st(A(0)) there as here, and a
// segment that is not real has tied = st(A(0)). Before, the per-position elem
// kept the real / kind / tie tests in the loop (ncu, H200, flat_maxmin_bwd fp32 on
// 2M segments of 32: 18 instructions per position in the write walk, 28% of the
// kernel's; bench/NOTES.md, session 23) and a feature lane kept V whole contexts
// (g, y, statistic, flag) live through its row loop.
template <class T, class Idx>
struct MaxminOut {
  using A = dacc_t<T>;
  A y;
  T tied;
  Idx at;
  __device__ __forceinline__ T elem(bool split, Idx j, T raw) const { return of_tie(split, j, is_tie(raw)); }
  // The tie predicate of a position of this segment (is_extremum against the output).
  __device__ __forceinline__ bool is_tie(T raw) const { return ops::is_extremum(A(ld(raw)), y); }
  // elem of a position whose tie predicate is known (t: StatsFn::tied, which also
  // holds only for a real segment, whose `tied` is then its own).
  __device__ __forceinline__ T of_tie(bool split, Idx j, bool t) const {
    return t && (split || j == at) ? tied : st<T>(A(0));
  }
};

// f(std::true_type) for split, f(std::false_type) for first/last: the write loops
// compiled once per form, so the position test leaves split's loop (walk 2 on
// fp32: 12 instructions per position with the test, ptxas sm_90).
template <class F>
__device__ __forceinline__ void with_split(bool split, F&& f) {
  if (split) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

template <class T, class Idx>
__device__ __forceinline__ MaxminOut<T, Idx> maxmin_out(const BwdFn<T, Idx>& bf, Idx v, Idx f, Idx stat) {
  const auto c = maxmin_ctx(bf, v, f, stat);
  MaxminOut<T, Idx> m;
  m.y = c.y;
  m.at = stat;
  // elem itself at a tied position: y is tied to itself (is_extremum, NaN
  // included), and j = stat is the one position first/last write; a segment that
  // is not real gets st(A(0)) from elem too. One source for the arithmetic.
  m.tied = bf.elem(c, stat, st<T>(c.y));
  return m;
}

// The feature kernel's write context: MaxminOut for 16-bit types, BwdFn's own
// context (with its per-position elem) for float32 and float64. H200, session 23
// (bench/NOTES.md), prebuilt benchmarks old / new alternated: with MaxminOut the
// 16-bit feature backwards ran 0.72-0.99x (2d_exp40_f128 bf16 0.550 -> 0.396 ms:
// 80 -> 64 registers, 3 -> 4 blocks per SM, the spill gone), but float32's ran
// 1.00-1.12x (68 -> 64 registers, also 3 -> 4 blocks per SM); not profiled. The
// likely cause: a lane re-reads its segment's rows for the write (from L1 at best),
// and a third more resident warps leave less L1 per warp for that re-read.
template <class T, class Idx>
using FeatOut = std::conditional_t<sizeof(T) == 2, MaxminOut<T, Idx>, typename BwdFn<T, Idx>::Ctx>;
template <class T, class Idx>
__device__ __forceinline__ FeatOut<T, Idx> feat_out(const BwdFn<T, Idx>& bf, Idx v, Idx f, Idx stat) {
  if constexpr (sizeof(T) == 2) {
    return maxmin_out(bf, v, f, stat);
  } else {
    return maxmin_ctx(bf, v, f, stat);
  }
}
// The write's value of position j from its tie predicate t (StatsFn::tied: the tie
// bits of the feature kernel's window) or from its raw value (out_elem: the rows
// re-read past the window): elem's value in either form, so the same bits.
template <class T, class Idx>
__device__ __forceinline__ T out_of_tie(const BwdFn<T, Idx>&, const MaxminOut<T, Idx>& m, bool split, Idx j, bool t) {
  return m.of_tie(split, j, t);
}
template <class T, class Idx>
__device__ __forceinline__ T out_of_tie(const BwdFn<T, Idx>& bf, const typename BwdFn<T, Idx>::Ctx& c, bool, Idx j,
                                        bool t) {
  return bf.elem_of_tie(c, j, t);
}
template <class T, class Idx, class O>
__device__ __forceinline__ T out_elem(const BwdFn<T, Idx>& bf, const O& o, bool split, Idx j, T raw) {
  return out_of_tie(bf, o, split, j, ops::is_extremum(dacc_t<T>(ld(raw)), o.y));
}

// Whether the carry of a tile whose open segment is t must be kept for the
// repair: t crosses more than kShortFix tiles, so fixup_tree's phase 2 combines
// its carries in place (the same test as its phase 1: the tile holding t's end
// minus the first tile holding a carry of t). Short segments' carries stay.
template <class Idx>
__device__ __forceinline__ bool keep_carry(const Idx* q, Idx t, Idx items, Idx U) {
  return t < U && first_carry_tile(q, Idx(t + 1), items) - first_carry_tile(q, t, items) > kShortFix;
}

// Session 32: the tied positions of a full flat tile, for split's repair. A full
// tile lies inside one segment that crosses both its edges, so its local count is
// the total only when no other tile of the segment holds a tie; where it is not,
// the repair gave the tile's tied positions g / k_total by reading the tile's x
// again (ncu, H200, session 20: 1d_64x1M bf16, ~63% of tiles re-read, ~85 MB in
// ~53 us of a 0.19 ms call; fp32 25 us). Now the fused kernel, which compares every
// position anyway, records up to kTieList of them (offsets from the tile's first
// position) in one 16-byte record per tile, and the repair stores to those
// positions without reading x. More ties than that (an all-equal segment) leave
// the record's count kNoTieList: the repair re-reads as before. Same positions,
// same expression (split_tied_value): the same gi.
constexpr int kTieList = 7;
constexpr unsigned kNoTieList = 0xffffu;
struct TieListRec {
  int n = 0;          // warp-uniform: ties seen so far (counting stops past kTieList)
  unsigned mine = 0;  // lane k holds the offset of tie k
};
// Adds the ties of this round: bit e of lane's m is the position p0 + e (offset
// from the tile's first position). Warp-uniform; one ballot where no lane has one.
__device__ __forceinline__ void tie_list_add(TieListRec& L, unsigned m, int p0, int lane) {
  for (unsigned bl = __ballot_sync(kFull, m != 0); bl != 0 && L.n <= kTieList; bl &= bl - 1) {
    const int src = __ffs(int(bl)) - 1;
    unsigned mm = __shfl_sync(kFull, m, src);
    const int b = __shfl_sync(kFull, p0, src);
    for (; mm != 0 && L.n <= kTieList; mm &= mm - 1) {
      if (lane == L.n) L.mine = unsigned(b + __ffs(int(mm)) - 1);
      ++L.n;
    }
  }
}
// The record: offsets 0..6 in the low 7 halves, the count (or kNoTieList) in the last.
__device__ __forceinline__ void tie_list_store(const TieListRec& L, uint4* __restrict__ rec, int lane) {
  unsigned h[kTieList];
#pragma unroll
  for (int k = 0; k < kTieList; ++k) h[k] = __shfl_sync(kFull, L.mine, k) & 0xffffu;
  if (lane == 0) {
    const unsigned n = L.n <= kTieList ? unsigned(L.n) : kNoTieList;
    *rec = make_uint4(h[0] | (h[1] << 16), h[2] | (h[3] << 16), h[4] | (h[5] << 16), h[6] | (n << 16));
  }
}
__device__ __forceinline__ unsigned tie_list_count(const uint4& r) { return r.w >> 16; }
__device__ __forceinline__ int tie_list_at(const uint4& r, int k) {  // k < kTieList
  const unsigned w = k < 2 ? r.x : k < 4 ? r.y : k < 6 ? r.z : r.w;
  return int((k & 1) ? (w >> 16) : (w & 0xffffu));
}

// A full flat tile without a segment end (kTile positions of one segment, which
// crosses both tile edges), session 20: the statistic is the tile's own total,
// folded straight from x with flat_fold_coalesced (the forwards' full-tile read:
// 16-byte loads spread over the tile), left as the tile's carry, and every
// position's gradient written from x again (the same lanes' vectors, now in L1),
// 16-byte stores where x and gi are both aligned. No staging, no walks: the same
// statistic (an exact integer combine) and the same elem per position as the
// staged path, so the same bits. Positions of the first vector that lie before the
// tile (o = j0 mod VE of them) belong to the previous tile and are not written;
// the o positions at the tile's end past the last round are lane 0's scalars.
template <class T, class Idx>
__device__ __forceinline__ void flat_maxmin_full_tile(const StatsFn<T, Idx>& sf, const BwdFn<T, Idx>& bf,
                                                      const T* __restrict__ x, T* __restrict__ gi, Idx w, Idx i0,
                                                      Idx j0, const Idx* __restrict__ q, Idx* __restrict__ carry,
                                                      Idx* __restrict__ carry_keep, uint4* __restrict__ tie_rec,
                                                      Idx titems, Idx U, int lane) {
  constexpr int VE = kVecE<T>, R = kTile<T> / (32 * VE);
  const bool vx = aligned16_dev(x);
  const Idx stat = flat_fold_coalesced(sf, sf.ctx(i0, 0), x, j0, vx, lane);
  if (lane == 31) {
    carry[w] = stat;  // the segment open at the tile's end
    if (keep_carry(q, i0, titems, U)) carry_keep[w] = stat;
  }
  const auto m = maxmin_out(bf, i0, Idx(0), stat);
  const bool split = bf.tie == 0;
  const int o = int(j0 % Idx(VE));
  const Idx jb = j0 - Idx(o);
  if (vx && aligned16_dev(gi)) {
    TieListRec L;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int rel = (32 * r + lane) * VE;
      const Vec<T, VE> v = load_vec<T, VE>(x + jb + Idx(rel));
      Vec<T, VE> out;
      unsigned tm = 0;  // bit e: position rel + e is tied (m.elem's predicate)
#pragma unroll
      for (int e = 0; e < VE; ++e) {
        const bool t = m.is_tie(v.v[e]);
        out.v[e] = m.of_tie(split, jb + Idx(rel + e), t);
        tm |= unsigned(t) << e;
      }
      if (rel >= o) {
        *reinterpret_cast<Vec<T, VE>*>(gi + jb + Idx(rel)) = out;
      } else {  // lane 0, round 0: the positions from o on are the tile's
#pragma unroll
        for (int e = 0; e < VE; ++e)
          if (e >= o) gi[jb + Idx(e)] = out.v[e];
        tm &= ~0u << o;
      }
      if (split) tie_list_add(L, tm, rel - o, lane);
    }
    unsigned tt = 0;  // lane 0: the o positions past the last round
    if (lane == 0)
      for (int e = 0; e < o; ++e) {
        const Idx j = jb + Idx(kTile<T> + e);
        const bool t = m.is_tie(x[j]);
        gi[j] = m.of_tie(split, j, t);
        tt |= unsigned(t) << e;
      }
    if (split) {
      tie_list_add(L, tt, kTile<T> - o, lane);
      tie_list_store(L, tie_rec + w, lane);
    }
  } else {  // misaligned x or gi: element loads and stores, the positions of the tile
#pragma unroll 4
    for (int k = lane; k < kTile<T>; k += 32) {
      const Idx j = j0 + Idx(k);
      gi[j] = m.elem(split, j, x[j]);
    }
    if (split && lane == 0) tie_rec[w] = make_uint4(0u, 0u, 0u, kNoTieList << 16);  // no list: the repair re-reads
  }
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
                                                       Idx* __restrict__ head, uint4* __restrict__ tie_rec,
                                                       Idx titems, Idx U) {
  wait_prior_grid();  // launched after prepare (launch_after_prior)
  using Raw = T;
  using S = Idx;
  extern __shared__ __align__(16) unsigned char smem[];
  const int lane = threadIdx.x & 31, wib = threadIdx.x >> 5;
  const Idx w = Idx(blockIdx.x) * Idx(blockDim.x >> 5) + wib;
  if (w >= W) return;  // whole warps only
  {
    const Idx i0 = tile_i[w], j0 = tile_j[w];
    if (tile_i[w + 1] == i0 && tile_j[w + 1] - j0 == Idx(kTile<Raw>)) {  // warp-uniform
      flat_maxmin_full_tile(sf, bf, x, gi, w, i0, j0, q, carry, carry_keep, tie_rec, titems, U, lane);
      return;
    }
  }
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
  const bool split = bf.tie == 0;
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
    const auto m = maxmin_out(bf, t.i0 + ti, Idx(0), stat);
    with_split(split, [&](auto sp_c) {
      for (int k = 0; k < run; ++k) {
        const int sp = spad<Raw>(base + k);
        t.s_x[sp] = m.elem(decltype(sp_c)::value, t.j0 + tj + k, t.s_x[sp]);
      }
    });
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
// loaded once for the statistic (StatsFn, feat_reduce's order), leaving tie bits for
// its first kMaskRows rows; the write gives those rows their gradient from the bits
// and loads the rows past them again (the same lane, right after: L1/L2 at best).
// Records as feat_reduce's.
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
  const bool split = bf.tie == 0;
  const Raw* p = x + l.f0;
  Raw* po = gi + l.f0;
  // Session 29: the write loop's re-read of a row (its last use) and its gi store
  // (never read here again) are marked L2 evict_first, where a row load is a 16-byte
  // vector, so that the streams of gi written and x re-read do not push out the rows
  // whose statistic is still being taken (ncu, H100: the kernel moved ~1.45x the data's
  // bytes from DRAM; bench/NOTES.md, session 29). The same values: cache policy only.
  // H100 (run 5): the hinted rows 0.92-1.00x, but 2d_x16_f4 fp32 (one lane reads a whole
  // row, G = 1) 1.03x; bench/patches/session29-maxbwd-hints-g1.patch leaves G = 1 rows
  // plain (not run on a GPU).
  constexpr bool kHints = sizeof(Vec<Raw, V>) == 16;
  const uint64_t first = kHints ? l2_evict_first() : 0;
  auto reread_row = [](const Raw* a, uint64_t pol) {
    if constexpr (kHints) {
      return ld_hint(reinterpret_cast<const Vec<Raw, V>*>(a), pol);
    } else {
      (void)pol;
      return load_vec<Raw, V>(a);
    }
  };
  auto write_row = [](Raw* a, const Vec<Raw, V>& o, uint64_t pol) {
    if constexpr (kHints) {
      st_hint(reinterpret_cast<Vec<Raw, V>*>(a), o, pol);
    } else {
      (void)pol;
      *reinterpret_cast<Vec<Raw, V>*>(a) = o;
    }
  };
  // Session 30, tie masks: the statistic's pass keeps one bit per (row, feature) of a
  // segment's first kMaskRows rows in the tile, the tie predicate (StatsFn::tied), and the
  // write pass gives those rows their gradient from the bit (out_of_tie: elem's value for
  // that predicate) without reading x again; rows past the window are re-read as before.
  // Before, every row was read twice, and ncu (H100, session 29) counted ~1.9x x's bytes
  // from DRAM: between a row's two reads every resident lane streams its own segment,
  // more than L2 holds. The same predicate and expressions: the same bits.
  // H100 (session 30, run 1): float32 (V = 4) max backwards 0.79-0.99x, but bfloat16 at V =
  // 8 with a 32-row window 1.07x (2d_64kx16_f128) and 1.61x (2d_exp40_f128): 80 registers (3
  // blocks per SM instead of 4) and the DRAM bytes fell (448 -> 309 MB) while the time rose. So
  // V = 8 (16-bit full vectors) keeps session 29's form, without a window; 16-bit rows take
  // the window at V = 4 (half vectors, feat_vec_rule) or V = 1.
  // Session 31 kept V = 8's bits in shared memory instead (a byte per row, 16 KiB per block,
  // 64 registers: bench/patches/session31-maxbwd-smem-window.patch). H100: the DRAM reads fell
  // (bf16 2d_exp40_f128 501 -> 318 MB) but the time did not (0.89x on 2d_64kx16_f128, 1.03x
  // on 2d_exp40_f128 and 2d_x16_f64): at 4 blocks of 256 per SM the kernel runs at its
  // occupancy cap (46% of the warps active, 50% the most), bound by the latency of a lane's
  // serial segments, not by the re-read's bytes. Not taken (bench/NOTES.md, session 31).
  using M = uint64_t;
  constexpr int kMaskRows = V <= 4 ? 64 : 0;
  Idx j = j0;
  for (Idx i = i0;; ++i) {
    const Idx e = i < i1 ? q[i + 1] : j1;
    const Idx jb = j;
    const Idx jm = e - jb < Idx(kMaskRows) ? e : jb + Idx(kMaskRows);  // rows [jb, jm) keep a tie bit
    typename StatsFn<T, Idx>::Ctx c[V];
    S acc[V];
    M mk[V];
#pragma unroll
    for (int v = 0; v < V; ++v) {
      c[v] = sf.ctx(i, l.f0 + v);
      acc[v] = sf.identity();
      mk[v] = 0;
    }
    constexpr int UR = V >= 8 ? 4 : 8;  // row loads in flight per lane (fewer for V = 8: registers)
    if constexpr (kMaskRows > 0) {
      for (; j + UR <= jm; j += UR) {
        Vec<Raw, V> r[UR];
#pragma unroll
        for (int u = 0; u < UR; ++u) r[u] = load_vec<Raw, V>(p + (j + u) * inner);
#pragma unroll
        for (int u = 0; u < UR; ++u)
#pragma unroll
          for (int v = 0; v < V; ++v) {
            const bool t = sf.tied(c[v], r[u].v[v]);
            acc[v] = sf.combine(acc[v], sf.of_tie(t, j + u));
            mk[v] |= M(t) << int(j + u - jb);
          }
      }
      for (; j < jm; ++j) {
        const Vec<Raw, V> r = load_vec<Raw, V>(p + j * inner);
#pragma unroll
        for (int v = 0; v < V; ++v) {
          const bool t = sf.tied(c[v], r.v[v]);
          acc[v] = sf.combine(acc[v], sf.of_tie(t, j));
          mk[v] |= M(t) << int(j - jb);
        }
      }
    }
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
    FeatOut<T, Idx> b[V];
#pragma unroll
    for (int v = 0; v < V; ++v) b[v] = feat_out<T, Idx>(bf, i, l.f0 + v, acc[v]);
    // The window's rows: stores only.
    Idx jj = jb;
    if constexpr (kMaskRows > 0) {
#pragma unroll 4
      for (; jj < jm; ++jj) {
        Vec<Raw, V> o;
#pragma unroll
        for (int v = 0; v < V; ++v) o.v[v] = out_of_tie(bf, b[v], split, jj, bool((mk[v] >> int(jj - jb)) & M(1)));
        write_row(po + jj * inner, o, first);
      }
    }
    // Rows past the window: re-read (the last use of the row).
    constexpr int UW = V >= 8 ? 2 : 4;  // V = 8 (16-bit): 80 registers (3 blocks per SM) instead of 103 (2)
    for (; jj + UW <= e; jj += UW) {
      Vec<Raw, V> r[UW];
#pragma unroll
      for (int u = 0; u < UW; ++u) r[u] = reread_row(p + (jj + u) * inner, first);
#pragma unroll
      for (int u = 0; u < UW; ++u) {
        Vec<Raw, V> o;
#pragma unroll
        for (int v = 0; v < V; ++v) o.v[v] = out_elem(bf, b[v], split, jj + u, r[u].v[v]);
        write_row(po + (jj + u) * inner, o, first);
      }
    }
    for (; jj < e; ++jj) {
      const Vec<Raw, V> r = reread_row(p + jj * inner, first);
      Vec<Raw, V> o;
#pragma unroll
      for (int v = 0; v < V; ++v) o.v[v] = out_elem(bf, b[v], split, jj, r.v[v]);
      write_row(po + jj * inner, o, first);
    }
    if (i == i1) break;
  }
}

// Split's gradient does not depend on the position: elem of one tied raw value
// (y itself, tied by is_extremum, NaN included) is every tied position's, so the
// repair loops store it without the division per position (and no call in them).
template <class T, class Idx>
__device__ __forceinline__ T split_tied_value(const BwdFn<T, Idx>& bf, const typename BwdFn<T, Idx>::Ctx& c) {
  return bf.elem(c, Idx(0), st<T>(c.y));
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
  const T tied = split_tied_value(bf, c);
  const Idx va = (jb + Idx(VE - 1)) / Idx(VE), vb = je / Idx(VE);  // whole vectors [va, vb)
  if (va >= vb) {
    for (Idx j = jb + Idx(lane); j < je; j += 32)
      if (ops::is_extremum(A(ld(x[j])), c.y)) gi[j] = tied;
    return;
  }
  // The edge positions' loads go out with the first round's vectors (one round trip).
  const Idx jh = jb + Idx(lane), jt = vb * Idx(VE) + Idx(lane);
  const bool eh = jh < va * Idx(VE), et = jt < je;
  const T xh = eh ? x[jh] : T{}, xt = et ? x[jt] : T{};
  for (Idx v0 = va + Idx(lane); v0 < vb + Idx(lane); v0 += Idx(32 * kRepVecs)) {  // warp-uniform rounds
    Vec<T, VE> r[kRepVecs];
#pragma unroll
    for (int u = 0; u < kRepVecs; ++u)
      if (v0 + Idx(32 * u) < vb) r[u] = load_vec<T, VE>(x + (v0 + Idx(32 * u)) * Idx(VE));
    if (v0 == va + Idx(lane)) {
      if (eh && ops::is_extremum(A(ld(xh)), c.y)) gi[jh] = tied;
      if (et && ops::is_extremum(A(ld(xt)), c.y)) gi[jt] = tied;
    }
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
// total (see the header comment). Only tied positions are rewritten (every other
// position of a max/min segment already holds 0). Each tile writes only its own
// positions. The job of one crossing record: its segment t, the record r, the
// tile's part [jb, je) of t, and t's gradient context with the total (c.stat).
template <class T, class Idx>
struct RepairJob {
  Idx t, r, jb, je;
  typename BwdFn<T, Idx>::Ctx c;
};

// Whether record r of segment t needs a fix, and then its context: r is a tie
// record (not the identity: a part without a tie, or a ghost segment, never
// does) of a real segment whose total differs from it.
template <class T, class Idx>
__device__ __forceinline__ bool repair_needed(const StatsFn<T, Idx>& sf, const BwdFn<T, Idx>& bf,
                                              const Idx* __restrict__ stats, Idx inner, Idx f, RepairJob<T, Idx>& j) {
  if (j.r == sf.identity()) return false;
  Idx o;
  if (!bf.map.real(j.t, o)) return false;
  const Idx R = stats[o * inner + f];
  if (j.r == R) return false;  // the local view was the whole one
  j.c = maxmin_ctx(bf, j.t, f, R);
  return true;
}

// The (at most two) crossing records of tile w, feature f: the segment that began
// in an earlier tile and ends in w (the head record), and the one open at w's end
// (the carry; kept apart for segments > kShortFix tiles, whose carries fixup_tree
// overwrites).
template <class Idx>
struct TileRecords {
  bool has_head, has_carry;
  Idx head_t, head_jb, head_je, carry_t, carry_jb, carry_je;
};
template <class Idx>
__device__ __forceinline__ TileRecords<Idx> tile_records(const Idx* __restrict__ q, const Idx* __restrict__ tile_i,
                                                         const Idx* __restrict__ tile_j, Idx w, Idx U) {
  TileRecords<Idx> r{};
  const Idx i0 = tile_i[w], i1 = tile_i[w + 1], j0 = tile_j[w], j1 = tile_j[w + 1];
  r.has_head = i1 > i0 && q[i0] < j0;
  if (r.has_head) {
    r.head_t = i0;
    r.head_jb = j0;
    r.head_je = q[i0 + 1];
  }
  r.has_carry = i1 < U;
  if (r.has_carry) {
    const Idx b = q[i1];
    r.carry_t = i1;
    r.carry_jb = b > j0 ? b : j0;
    r.carry_je = j1;
  }
  return r;
}

// inner > 1: one thread per (tile, feature), at most kFeatItems rows each,
// consecutive features in consecutive lanes.
template <class T, class Idx>
__global__ void __launch_bounds__(256) feat_maxmin_repair(StatsFn<T, Idx> sf, BwdFn<T, Idx> bf, const T* __restrict__ x,
                                                          T* __restrict__ gi, const Idx* __restrict__ q,
                                                          const Idx* __restrict__ tile_i, const Idx* __restrict__ tile_j,
                                                          Idx W, Idx U, Idx inner, Idx titems,
                                                          const Idx* __restrict__ carry,
                                                          const Idx* __restrict__ carry_keep,
                                                          const Idx* __restrict__ head, const Idx* __restrict__ stats) {
  using A = dacc_t<T>;
  const int64_t total = int64_t(W) * int64_t(inner);
  auto fix = [&](Idx f, RepairJob<T, Idx> j) {
    if (!repair_needed(sf, bf, stats, inner, f, j)) return;
    if (sf.tie == 0) {
      const T tied = split_tied_value(bf, j.c);
      for (Idx p = j.jb; p < j.je; ++p)
        if (ops::is_extremum(A(ld(x[p * inner + f])), j.c.y)) gi[p * inner + f] = tied;
    } else {
      gi[j.r * inner + f] = bf.elem(j.c, j.r, x[j.r * inner + f]);  // tied, not the winner: 0
    }
  };
  for (int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; id < total;
       id += int64_t(gridDim.x) * blockDim.x) {
    const Idx w = Idx(id / int64_t(inner));
    const Idx f = Idx(id - int64_t(w) * int64_t(inner));
    const TileRecords<Idx> tr = tile_records(q, tile_i, tile_j, w, U);
    if (tr.has_head) fix(f, RepairJob<T, Idx>{tr.head_t, head[w * inner + f], tr.head_jb, tr.head_je, {}});
    if (tr.has_carry) {
      const Idx* rec = keep_carry(q, tr.carry_t, titems, U) ? carry_keep : carry;
      fix(f, RepairJob<T, Idx>{tr.carry_t, rec[w * inner + f], tr.carry_jb, tr.carry_je, {}});
    }
  }
}

// inner == 1: a warp per G tiles (detail::repair_tiles_per_warp). Lane l < G
// finds tile (G k + l)'s jobs (its records, bounds, the totals and the segments'
// contexts: every dependent load of the chain made for G tiles at once), then
// the warp runs the jobs one after
// another, its lanes over the job's positions (split: 16-byte vectors where x is
// aligned, repair_split_flat_vec; first/last: the one write). Session 20: with a
// warp per tile, every tile waited through that chain of loads, needed or not
// (ncu, 1d_64x1M: 55 us of fp32's 238 with 12% of the tiles re-read, 60 us of
// bf16's 244 with ~63%).
template <class T, class Idx>
__global__ void __launch_bounds__(256) flat_maxmin_repair(StatsFn<T, Idx> sf, BwdFn<T, Idx> bf, const T* __restrict__ x,
                                                          T* __restrict__ gi, const Idx* __restrict__ q,
                                                          const Idx* __restrict__ tile_i, const Idx* __restrict__ tile_j,
                                                          Idx W, Idx U, Idx titems, const Idx* __restrict__ carry,
                                                          const Idx* __restrict__ carry_keep,
                                                          const Idx* __restrict__ head, const Idx* __restrict__ stats,
                                                          const uint4* __restrict__ tie_rec, int G) {
  using A = dacc_t<T>;
  const int lane = int(threadIdx.x & 31);
  const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int64_t warps = (int64_t(gridDim.x) * blockDim.x) >> 5;
  const bool vec = aligned16_dev(x);
  for (int64_t base = warp * G; base < int64_t(W); base += warps * G) {
    const Idx w = Idx(base + lane);
    RepairJob<T, Idx> job[2];
    bool need[2] = {false, false};
    uint4 tl = make_uint4(0u, 0u, 0u, kNoTieList << 16);  // the carry job's tie list, if any
    if (lane < G && w < Idx(W)) {
      const TileRecords<Idx> tr = tile_records(q, tile_i, tile_j, w, U);
      if (tr.has_head) {
        job[0] = RepairJob<T, Idx>{tr.head_t, head[w], tr.head_jb, tr.head_je, {}};
        need[0] = repair_needed(sf, bf, stats, Idx(1), Idx(0), job[0]);
      }
      if (tr.has_carry) {
        const Idx* rec = keep_carry(q, tr.carry_t, titems, U) ? carry_keep : carry;
        job[1] = RepairJob<T, Idx>{tr.carry_t, rec[w], tr.carry_jb, tr.carry_je, {}};
        need[1] = repair_needed(sf, bf, stats, Idx(1), Idx(0), job[1]);
        // A full tile (flat_maxmin_bwd's test): its carry job is the whole tile,
        // [j0, j0 + kTile), whose ties the fused kernel listed (split only).
        const bool full = tile_i[w + 1] == tile_i[w] && tile_j[w + 1] - tile_j[w] == Idx(kTile<T>);
        if (need[1] && full && sf.tie == 0) tl = tie_rec[w];
      }
    }
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      for (unsigned m = __ballot_sync(kFull, need[k]); m != 0; m &= m - 1) {
        const int src = __ffs(int(m)) - 1;
        RepairJob<T, Idx> j;
        j.r = __shfl_sync(kFull, job[k].r, src);
        j.jb = __shfl_sync(kFull, job[k].jb, src);
        j.je = __shfl_sync(kFull, job[k].je, src);
        j.c.g = __shfl_sync(kFull, job[k].c.g, src);
        j.c.y = __shfl_sync(kFull, job[k].c.y, src);
        j.c.stat = __shfl_sync(kFull, job[k].c.stat, src);
        j.c.real = true;  // repair_needed: a real segment
        uint4 lst = make_uint4(0u, 0u, 0u, kNoTieList << 16);
        if (k == 1) {
          lst.x = __shfl_sync(kFull, tl.x, src);
          lst.y = __shfl_sync(kFull, tl.y, src);
          lst.z = __shfl_sync(kFull, tl.z, src);
          lst.w = __shfl_sync(kFull, tl.w, src);
        }
        const unsigned nl = tie_list_count(lst);
        if (nl <= unsigned(kTieList)) {  // split, a full tile: its listed ties only (j.jb is its j0)
          if (lane < int(nl)) gi[j.jb + Idx(tie_list_at(lst, lane))] = split_tied_value(bf, j.c);
        } else if (sf.tie == 0 && vec) {
          repair_split_flat_vec(bf, j.c, x, gi, j.jb, j.je, lane);
        } else if (sf.tie == 0) {
          const T tied = split_tied_value(bf, j.c);
          for (Idx p = j.jb + Idx(lane); p < j.je; p += 32)
            if (ops::is_extremum(A(ld(x[p])), j.c.y)) gi[p] = tied;
        } else if (lane == 0) {
          gi[j.r] = bf.elem(j.c, j.r, x[j.r]);  // tied, not the winner: 0
        }
      }
    }
  }
}

}  // namespace segred::cuda
