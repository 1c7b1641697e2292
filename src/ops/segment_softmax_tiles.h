// The block algorithm of the CUDA ragged softmax kernels (src/cuda/segment_softmax_kernels.cuh),
// written as host/device phase functions: the CUDA kernels call the phases with
// __syncthreads (and warp shuffles) between them, and a CPU test
// (tests/cpp/test_segment_softmax_tiles.cpp) runs the very same functions thread
// by thread, phase by phase, on every geometry, against the float64 reference.
//
// Work split: src/core/segment_softmax_geometry.h. One block per (tile, slab).
//
// Math (SEMANTICS.md, "segment softmax family"; include/segred/segment_softmax.h):
//   forward statistics per (segment, feature): (m, s), sum exp(x - m) = s, over
//     a piece of rows: m = max (NaN never wins), s = sum of 1 where x == m (keeps
//     +inf + +inf finite) else exp(x - m) (a NaN makes s NaN; an all -inf piece
//     has s = 0); the online form (Pol::add: -inf adds nothing, x > m rescales s
//     by exp(m - x)) gives the same pieces' statistics one element at a time.
//     Merging (m1, s1), (m2, s2): m = max, s = s1 r(m1, m) + s2 r(m2, m) with
//     r(a, m) = 1 when a == m else exp(a - m). NaN rule: a segment with a NaN
//     (s is NaN), a +inf (m = +inf) or only -inf (s == 0) gives NaN (softmax,
//     log_softmax); logsumexp = s == 0 ? -inf : m + log s.
//   backward statistic: sum g*y (softmax) or sum g (log_softmax); logsumexp
//     backward needs none: gI = g_seg exp(x - y_seg).
//
// Phases of the main kernel (one block = one tile of `nrows` rows and `ns`
// completed segments, tile-local segment k = merge segment i0 + k; k == ns is the
// segment still open at the tile's end):
//   stage       rows x slab features of each input -> shared memory (coalesced,
//               16-byte vectors), and the tile-relative segment ends e[k].
//   walk        thread (chunk c, feature lane fl) walks rows [c*E, c*E + E) for V
//               features in ONE pass, the same instructions for every row (the
//               lanes of a warp stay in lock-step whatever the segment lengths):
//               the online statistic (Pol::add: one exp per element forward, a
//               sum backward), reset where a segment ends. A segment that starts
//               and ends inside the chunk (a middle piece) is final there:
//               logsumexp stores it; the row-output kinds keep the first NF of
//               them in registers and the next NS in the thread's shared-memory
//               slot (V = 4: NF = 0, NS = 1) for the row pass and, after the pass,
//               write the rows of the others in place (write_pieces: max, sum of
//               exp, rows).
//               Left: the partial of the chunk's first segment (if it closes in
//               the chunk) and of the segment open at its end.
//   scan        segmented inclusive scan over the chunks of each feature lane of
//               (key = open segment or a unique negative per chunk, partial):
//               shuffles inside a warp, warp totals through shared memory. Keys of
//               equal value are contiguous, which makes the keyed combine
//               associative. Exclusive value = chunk c-1's inclusive.
//   publish     a chunk that closes a segment begun in an earlier chunk has its
//               tile total: stored per chunk in shared memory (or as logsumexp);
//               the tile's head (partial of segment 0 when it began in an earlier
//               tile) and carry (partial of the open segment) go to global memory.
//   edges       the row pass (write_edges): every row of the chunk in one loop,
//               the epilogue constants switching where a piece ends (first
//               segment's total, kept middle pieces, rows the walk wrote, the open
//               segment's total from the chunk that closes it).
//   finish      copy-out of every row not deferred (below); logsumexp: -inf for
//               the empty segments.
// Segments crossing tile edges ("deferred": segment 0 begun earlier, the open
// segment) are completed by segment_reduce's fix-up kernel from the heads and
// carries (finish_crossing: the final statistic of the segment tile w completes,
// at fin[w], or the logsumexp output), then the crossing pass rewrites their rows
// (re-read from global memory). Ghost segments (outside every real segment) are
// zeros in the tile itself.
#pragma once
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "src/core/segment_softmax_geometry.h"
#include "src/ops/reduce_ops.h"

namespace segred::ops::ss {

using detail::SsKind;

// exp and log in the accumulation type. float on the device: exp2f(x * log2 e),
// as the dense softmax (src/cuda/softmax_impl.cuh).
SEGRED_HD float ss_exp(float x) {
#if defined(__CUDA_ARCH__)
  return exp2f(x * 1.4426950408889634f);
#else
  return std::exp(x);
#endif
}
SEGRED_HD double ss_exp(double x) { return ::exp(x); }
// exp of the statistics only (online update, piece sums, merges): the argument is
// <= 0 and the result only ever adds to (or scales) a sum that is >= 1 wherever
// it is used, so on the device float drops exp2f's subnormal fix-up (3 of its 5
// instructions per call: ex2.approx.ftz, as the dense softmax's 16-bit forward):
// an e < 2^-126 flushed to 0 changes no sum. The output's exp (Pol::apply) stays
// ss_exp, so a subnormal softmax output stays subnormal.
SEGRED_HD float ss_exp_stat(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
  return y;
#else
  return std::exp(x);
#endif
}
SEGRED_HD double ss_exp_stat(double x) { return ::exp(x); }
SEGRED_HD float ss_log(float x) { return ::logf(x); }
SEGRED_HD double ss_log(double x) { return ::log(x); }

template <class A> struct MS {
  A m, s;  // no initialisers: usable in __shared__ arrays
};

// The statistic, its merge and the epilogues of one kind.
template <SsKind K, class A>
struct Pol {
  static constexpr bool kFwd = K == SsKind::SoftmaxFwd || K == SsKind::LogSoftmaxFwd || K == SsKind::LseFwd;
  static constexpr bool kLog = K == SsKind::LogSoftmaxFwd || K == SsKind::LogSoftmaxBwd;
  static constexpr bool kRowOut = K != SsKind::LseFwd;   // writes data's shape
  static constexpr bool kReduce = K != SsKind::LseBwd;   // has a per-segment statistic
  static constexpr bool kDeferred = kRowOut && kReduce;  // crossing rows wait for the fix-up
  static constexpr int kArrays = detail::ss_arrays(K);
  using Stat = std::conditional_t<kFwd, MS<A>, A>;
  struct Prep {
    A a, b;
  };
  static constexpr A inf() { return std::numeric_limits<A>::infinity(); }

  static SEGRED_HD Stat identity() {
    if constexpr (kFwd) return Stat{-inf(), A(0)};
    else return A(0);
  }
  // Merge with one exp: e = exp(-|a.m - b.m|) scales the side with the smaller
  // max; the larger side keeps its sum (factor 1 exactly). Equal maxima (+inf
  // with +inf, -inf with -inf: a.m - b.m would be NaN) take e = 1, so two all
  // -inf parts merge to (-inf, 0); -inf against a finite max: exp(-inf) = 0.
  // m is never NaN; a NaN s stays NaN through * and +.
  static SEGRED_HD Stat combine(const Stat& a, const Stat& b) {
    if constexpr (kFwd) {
      const bool agt = a.m > b.m;
      const A d = a.m - b.m;
      const A e = a.m == b.m ? A(1) : ss_exp_stat(agt ? -d : d);
      return agt ? Stat{a.m, a.s + b.s * e} : Stat{b.m, a.s * e + b.s};
    } else {
      return a + b;
    }
  }
  // v0: x (forward) or g; v1: y (backward). Forward: the online update written
  // with selects only (one exp, no branch: the walk runs it for every row of a
  // chunk in lock-step across the warp): -inf adds nothing; x > m rescales s by
  // exp(m - x) = exp(-|x - m|) and adds 1; x == m adds exactly 1 (+inf + +inf
  // stays finite); else exp(x - m) = exp(-|x - m|) (m = +inf: 0; x NaN: NaN).
  static SEGRED_HD void add(Stat& t, A v0, A v1) {
    if constexpr (kFwd) {
      const bool gt = v0 > t.m, eq = v0 == t.m, skip = v0 == -inf();
      const A d = v0 - t.m;
      const A e = ss_exp_stat(d < A(0) ? d : -d);  // -|x - m|; NaN stays NaN
      const A s = gt ? t.s * e + A(1) : t.s + (eq ? A(1) : e);
      t.s = skip ? t.s : s;
      t.m = gt ? v0 : t.m;
    } else if constexpr (kLog) {
      t += v0;
    } else {
      t += v0 * v1;
    }
  }
  // Per-segment constants of the row epilogue.
  static SEGRED_HD Prep prep(const Stat& t) {
    if constexpr (kFwd) {
      const bool nan = !(t.s == t.s) || t.m == inf() || t.s == A(0);
      return Prep{nan ? std::numeric_limits<A>::quiet_NaN() : t.m, kLog ? ss_log(t.s) : A(1) / t.s};
    } else {
      return Prep{t, A(0)};
    }
  }
  // A Prep in a Stat's bytes (the shared-memory middle-piece slot): forward
  // (a, b) as (m, s); backward only a (b is 0: prep's Prep{t, 0}).
  static SEGRED_HD Stat pack(const Prep& p) {
    if constexpr (kFwd) return Stat{p.a, p.b};
    else return p.a;
  }
  static SEGRED_HD Prep unpack(const Stat& t) {
    if constexpr (kFwd) return Prep{t.m, t.s};
    else return Prep{t, A(0)};
  }
  static SEGRED_HD A apply(A v0, A v1, const Prep& p) {
    if constexpr (K == SsKind::SoftmaxFwd) return ss_exp(v0 - p.a) * p.b;
    else if constexpr (K == SsKind::LogSoftmaxFwd) return (v0 - p.a) - p.b;
    else if constexpr (K == SsKind::SoftmaxBwd) return v1 * (v0 - p.a);
    else return v0 - ss_exp(v1) * p.a;  // log_softmax backward
  }
  static SEGRED_HD A lse(const Stat& t) {
    if constexpr (kFwd) return t.s == A(0) ? -inf() : t.m + ss_log(t.s);
    else return A(0);
  }
};

template <class T, int N> struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

// Everything a block needs, filled from the geometry by the launcher (or the test).
template <class Idx>
struct Params {
  const void* in0 = nullptr;   // staged: x (forward, logsumexp backward) or g
  const void* in1 = nullptr;   // staged: y (softmax / log_softmax backward)
  const void* seg0 = nullptr;  // logsumexp backward: g and y, one value per segment
  const void* seg1 = nullptr;
  void* out = nullptr;         // data's shape, or one value per segment (logsumexp forward)
  const Idx* q = nullptr;      // merge space: U + 1 offsets (segment_geometry.h)
  const Idx* tile_i = nullptr;  // tiles + 1 tile starts
  const Idx* tile_j = nullptr;
  void* carry = nullptr;  // Stat[tiles * F]: partial of the segment open at the tile's end
  void* head = nullptr;   // Stat[tiles * F]: partial of segment 0 when it began earlier
  void* fin = nullptr;    // Stat[tiles * F]: final statistic of the segment tile w completes
  Idx S = 0, U = 0, F = 1, tiles = 0, slabs = 1, items = 1;  // items: merge items per tile (T)
  int width = 1, lanes = 1, chunk_rows = 1, cvec = 1;
  bool contiguous = true;
  int array_bytes = 0, smem_ends = 0, smem_stats = 0, smem_keys = 0, smem_slots = 0;
};

template <class Idx>
Params<Idx> params_of(const detail::SegmentSoftmaxGeometry& g, int64_t S, int64_t F) {
  Params<Idx> p;
  p.S = Idx(S);
  p.U = Idx(g.segs);
  p.F = Idx(F);
  p.tiles = Idx(g.tiles);
  p.slabs = Idx(g.slabs);
  p.items = Idx(g.items);
  p.width = int(g.width);
  p.lanes = g.lanes;
  p.chunk_rows = g.chunk_rows;
  p.cvec = g.cvec;
  p.contiguous = g.contiguous;
  p.array_bytes = int(g.array_bytes);
  p.smem_ends = int(g.smem_ends);
  p.smem_stats = int(g.smem_stats);
  p.smem_keys = int(g.smem_keys);
  p.smem_slots = int(g.smem_slots);
  return p;
}

// Merge segment v -> its output index o (row * S + s); false for a ghost.
template <class Idx>
SEGRED_HD bool real_segment(Idx v, Idx S, Idx U, Idx& o) {
  if (v < 1 || v >= U) return false;
  if (v - 1 <= S) {  // first outer row (every segment of a 1-D problem): no division
    o = v - 1;
    return v - 1 < S;
  }
  const Idx r = (v - 1) / (S + 1), s = (v - 1) - r * (S + 1);
  o = r * S + s;
  return s < S;
}

// The tile that completes merge segment v: the last w with tile_i[w] <= v.
template <class Idx>
SEGRED_HD Idx completing_tile(const Idx* tile_i, Idx tiles, Idx v) {
  Idx lo = 1, hi = tiles;  // tile_i[tiles] = U > v
  while (lo < hi) {
    const Idx mid = lo + (hi - lo) / 2;
    if (tile_i[mid] > v) hi = mid;
    else lo = mid + 1;
  }
  return lo - 1;
}

// First k in [0, n) with e[k] > a (n when none): the segment of tile row a.
SEGRED_HD int first_end_after(const uint16_t* e, int n, int a) {
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (int(e[mid]) > a) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

template <class Idx>
struct Tile {
  Idx w = 0, i0 = 0, j0 = 0, i1 = 0, j1 = 0, f0 = 0;
  int wr = 0, ns = 0, nrows = 0, pad = 0;
  bool cross_in = false;  // segment i0 began before the tile
};

template <class Idx>
SEGRED_HD Tile<Idx> tile_of(const Params<Idx>& p, Idx bid) {
  Tile<Idx> t;
  t.w = bid / p.slabs;
  const Idx slab = bid - t.w * p.slabs;
  t.i0 = p.tile_i[t.w];
  t.j0 = p.tile_j[t.w];
  t.i1 = p.tile_i[t.w + 1];
  t.j1 = p.tile_j[t.w + 1];
  t.f0 = slab * Idx(p.width);
  t.wr = int(p.F - t.f0 < Idx(p.width) ? p.F - t.f0 : Idx(p.width));
  t.ns = int(t.i1 - t.i0);
  t.nrows = int(t.j1 - t.j0);
  t.cross_in = p.q[t.i0] < t.j0;
  t.pad = p.contiguous && p.cvec > 1 ? int((t.j0 * p.F) % Idx(p.cvec)) : 0;
  return t;
}

// Shared memory of a block (layout: SegmentSoftmaxGeometry).
struct Smem {
  unsigned char* base;
  int array_bytes, ends_at, stats_at, keys_at, slots_at;
  template <class Idx>
  SEGRED_HD Smem(unsigned char* b, const Params<Idx>& p)
      : base(b),
        array_bytes(p.array_bytes),
        ends_at(p.smem_ends),
        stats_at(p.smem_stats),
        keys_at(p.smem_keys),
        slots_at(p.smem_slots) {}
  template <class T> SEGRED_HD T* array(int k) const { return reinterpret_cast<T*>(base + k * array_bytes); }
  SEGRED_HD uint16_t* ends() const { return reinterpret_cast<uint16_t*>(base + ends_at); }
  template <class S> SEGRED_HD S* stats() const { return reinterpret_cast<S*>(base + stats_at); }
  SEGRED_HD int* keys() const { return reinterpret_cast<int*>(base + keys_at); }
  // Middle-piece slots (detail::ss_smem_slots): thread tid's V statistics at tid * V.
  template <class S> SEGRED_HD S* slots() const { return reinterpret_cast<S*>(base + slots_at); }
};

// ---------------------------------------------------------------- staging

template <class T, bool Load>
SEGRED_HD void move1(T* g, T* s) {
  if (Load) *s = *g;
  else *g = *s;
}
template <class T, int N, bool Load>
SEGRED_HD void moveN(T* g, T* s) {
  using VT = Vec<T, N>;
  if (Load) *reinterpret_cast<VT*>(s) = *reinterpret_cast<const VT*>(g);
  else *reinterpret_cast<VT*>(g) = *reinterpret_cast<const VT*>(s);
}

// Rows [r_lo, r_hi) of the tile's slab between the tensor `g` and the staged array
// `s` (Load: g -> s), the block's threads cooperating. Element (r, f) is staged at
// pad + r*W + f; in the contiguous layout that is pad + (e - j0*F) for global
// element e, congruent to e modulo the vector width, so 16-byte vectors line up
// on both sides (scalars at the unaligned ends).
template <class T, bool Load, class Idx>
SEGRED_HD void copy_rows(const Params<Idx>& p, const Tile<Idx>& t, T* g, T* s, int r_lo, int r_hi, int tid,
                         int nthr) {
  constexpr int VC = 16 / int(sizeof(T));
  if (r_lo >= r_hi) return;
  if (p.contiguous) {
    const Idx E0 = t.j0 * p.F, a = E0 + Idx(r_lo) * p.F, b = E0 + Idx(r_hi) * p.F;
    auto slot = [&](Idx e) { return s + (t.pad + int(e - E0)); };
    if (p.cvec > 1) {
      Idx va = (a + VC - 1) / VC * VC, vb = b / VC * VC;
      if (va > b) va = b;
      if (vb < va) vb = va;
      const int nhead = int(va - a), nscalar = nhead + int(b - vb);
      for (int k = tid; k < nscalar; k += nthr) {
        const Idx e = k < nhead ? a + Idx(k) : vb + Idx(k - nhead);
        move1<T, Load>(g + e, slot(e));
      }
      const int nv = int((vb - va) / VC);
      for (int k = tid; k < nv; k += nthr) {
        const Idx e = va + Idx(k) * VC;
        moveN<T, VC, Load>(g + e, slot(e));
      }
    } else {
      const int n = int(b - a);
      for (int k = tid; k < n; k += nthr) move1<T, Load>(g + a + Idx(k), slot(a + Idx(k)));
    }
    return;
  }
  // Slabs: one row segment of wr features per row (vectors when cvec > 1: the
  // launcher checks inner % cvec == 0 and W % cvec == 0).
  const int rv = p.cvec, per = t.wr / rv, n = (r_hi - r_lo) * per;
  for (int k = tid; k < n; k += nthr) {
    const int rr = k / per, c = (k - rr * per) * rv, r = r_lo + rr;
    T* gp = g + ((t.j0 + Idx(r)) * p.F + t.f0 + Idx(c));
    T* sp = s + (r * p.width + c);
    if (rv > 1) moveN<T, VC, Load>(gp, sp);
    else move1<T, Load>(gp, sp);
  }
}

// Stage every input array and the tile-relative segment ends.
template <SsKind K, class T, class Idx>
SEGRED_HD void stage(const Params<Idx>& p, const Tile<Idx>& t, const Smem& sm, int tid, int nthr) {
  copy_rows<T, true>(p, t, const_cast<T*>(static_cast<const T*>(p.in0)), sm.array<T>(0), 0, t.nrows, tid, nthr);
  if constexpr (detail::ss_arrays(K) == 2)
    copy_rows<T, true>(p, t, const_cast<T*>(static_cast<const T*>(p.in1)), sm.array<T>(1), 0, t.nrows, tid, nthr);
  uint16_t* e = sm.ends();
  for (int k = tid; k < t.ns; k += nthr) e[k] = uint16_t(p.q[t.i0 + Idx(k) + 1] - t.j0);
}

// ---------------------------------------------------------------- rows in shared memory

template <class T, class A, class Cv, int V>
SEGRED_HD void read_row(const T* s, int idx, A (&v)[V]) {
  if constexpr (V == 1) {
    v[0] = Cv::ld(s[idx]);
  } else {
    const Vec<T, V> w = *reinterpret_cast<const Vec<T, V>*>(s + idx);
    for (int i = 0; i < V; ++i) v[i] = Cv::ld(w.v[i]);
  }
}
template <class T, class A, class Cv, int V>
SEGRED_HD void write_row(T* s, int idx, const A (&v)[V]) {
  if constexpr (V == 1) {
    s[idx] = Cv::st(v[0]);
  } else {
    Vec<T, V> w;
    for (int i = 0; i < V; ++i) w.v[i] = Cv::st(v[i]);
    *reinterpret_cast<Vec<T, V>*>(s + idx) = w;
  }
}

// One row of the row-output kinds rewritten in place (array 0) from its
// segment's epilogue constants pr (P::prep of the final statistics): softmax /
// log_softmax forward from x, backward from (g, y); zeros for a ghost row.
template <SsKind K, class T, class A, class Cv, int V, class Idx>
SEGRED_HD void output_row(const Params<Idx>& p, const Tile<Idx>& t, const Smem& sm, int fl, int r, bool real,
                          const typename Pol<K, A>::Prep (&pr)[V]) {
  using P = Pol<K, A>;
  T* s0 = sm.array<T>(0);
  const T* s1 = sm.array<T>(P::kArrays - 1);
  const int idx = t.pad + r * p.width + fl * V;
  A o[V];
  if (real) {
    A v0[V], v1[V];
    read_row<T, A, Cv, V>(s0, idx, v0);
    if constexpr (P::kArrays == 2) read_row<T, A, Cv, V>(s1, idx, v1);
    else
      for (int i = 0; i < V; ++i) v1[i] = A(0);
    for (int i = 0; i < V; ++i) o[i] = P::apply(v0[i], v1[i], pr[i]);
  } else {
    for (int i = 0; i < V; ++i) o[i] = A(0);
  }
  write_row<T, A, Cv, V>(s0, idx, o);
}

// Rows [r0, r1) of one segment for this lane's V features, rewritten in place
// (array 0) from its final statistics, or zeros for a ghost.
template <SsKind K, class T, class A, class Cv, int V, class Idx>
SEGRED_HD void write_segment_rows(const Params<Idx>& p, const Tile<Idx>& t, const Smem& sm, int fl, int r0, int r1,
                                  bool real, const typename Pol<K, A>::Stat (&st)[V]) {
  using P = Pol<K, A>;
  typename P::Prep pr[V];
  if (real)
    for (int i = 0; i < V; ++i) pr[i] = P::prep(st[i]);
  for (int r = r0; r < r1; ++r) output_row<K, T, A, Cv, V>(p, t, sm, fl, r, real, pr);
}

// logsumexp of merge segment v for this lane's V features (nothing for a ghost).
template <SsKind K, class T, class A, class Cv, int V, class Idx>
SEGRED_HD void write_lse(const Params<Idx>& p, const Tile<Idx>& t, int fl, Idx v,
                         const typename Pol<K, A>::Stat (&st)[V]) {
  Idx o;
  if (!real_segment(v, p.S, p.U, o)) return;
  T* out = static_cast<T*>(p.out) + (o * p.F + t.f0 + Idx(fl * V));
  for (int i = 0; i < V; ++i) out[i] = Cv::st(Pol<K, A>::lse(st[i]));
}

// ---------------------------------------------------------------- walk and scan

// Middle pieces (segments that begin and end inside one chunk) whose statistics
// a lane keeps until the row pass: NF of them in registers (V = 1: 4, V = 2: 2,
// V = 4: none: one slot of 4 (max, sum) pairs made ptxas spill ~200 bytes under
// the (256, 4) launch bounds), then NS in shared memory (V = 4: one slot per
// thread, Smem::slots, outside the tile's budget); the chunk's further middle
// pieces are written by the walk itself (write_pieces). Which kinds use the
// shared slot: detail::ss_smem_slots (the geometry allocates it from the same rule).
using detail::ss_fifo;

template <class Stat, int V, int NF = ss_fifo(V), int NS = ss_fifo(V) == 0 ? 1 : 0>
struct Lane {
  static constexpr int kFifo = NF, kSlots = NS, kKept = NF + NS;
  int a = 0, b = 0;                  // rows [a, b) of this thread's chunk
  int kf = 0, kl = 0;                // segment of row a; segment open at the chunk's end
  int first_end = 0, last_start = 0;  // rows [a, first_end) of kf; [last_start, b) of kl
  bool active = false, first_closed = false, last_open = false;
  int key = 0, xkey = 0;  // scan key; exclusive (chunk c - 1) key
  Stat pf[V];             // partial of kf; after publish its tile total
  Stat sv[V];             // partial of kl; after the scan the inclusive value
  Stat xv[V];             // exclusive value
  int nq = 0;             // middle pieces kept (the first nq after kf, in row order)
  int ovf = -1;           // first row of the middle pieces the walk wrote (-1: none)
  int qend[kKept > 0 ? kKept : 1], qk[kKept > 0 ? kKept : 1];  // their end rows and tile-local segments
  Stat qv[NF > 0 ? NF : 1][V];  // the final statistics of the first NF (the NS next: Smem::slots)
};

// The statistic of rows [r0, r1) of one segment for this lane's V features.
// Forward: two passes over the staged rows, max then sum of exp(x - max) (about
// half the instructions of the online update per element); the +inf, -inf and
// NaN cases come out as the online merge gives them: a NaN makes s NaN, m = +inf
// counts the +inf values (x == m adds 1), an all -inf piece has s = 0.
// Backward: one pass, sum of g*y or of g.
template <SsKind K, class T, class A, class Cv, int V, class Idx>
SEGRED_HD void piece_stat(const Params<Idx>& p, const Tile<Idx>& t, const Smem& sm, int fl, int r0, int r1,
                          typename Pol<K, A>::Stat (&out)[V]) {
  using P = Pol<K, A>;
  const T* s0 = sm.array<T>(0);
  const T* s1 = sm.array<T>(P::kArrays - 1);
  if constexpr (P::kFwd) {
    A m[V], eq[V], base[V], s[V];
    for (int i = 0; i < V; ++i) m[i] = -P::inf();
    for (int r = r0; r < r1; ++r) {
      A v[V];
      read_row<T, A, Cv, V>(s0, t.pad + r * p.width + fl * V, v);
      for (int i = 0; i < V; ++i) m[i] = v[i] > m[i] ? v[i] : m[i];  // a NaN never wins
    }
    for (int i = 0; i < V; ++i) {
      base[i] = m[i] == -P::inf() ? A(0) : m[i];  // all -inf: exp(-inf - 0) = 0
      eq[i] = m[i] == -P::inf() ? std::numeric_limits<A>::quiet_NaN() : m[i];  // x == eq adds exactly 1
      s[i] = A(0);
    }
    for (int r = r0; r < r1; ++r) {
      A v[V];
      read_row<T, A, Cv, V>(s0, t.pad + r * p.width + fl * V, v);
      for (int i = 0; i < V; ++i) s[i] += v[i] == eq[i] ? A(1) : ss_exp_stat(v[i] - base[i]);
    }
    for (int i = 0; i < V; ++i) out[i] = typename P::Stat{m[i], s[i]};
  } else {
    for (int i = 0; i < V; ++i) out[i] = A(0);
    for (int r = r0; r < r1; ++r) {
      const int idx = t.pad + r * p.width + fl * V;
      A g[V], y[V];
      read_row<T, A, Cv, V>(s0, idx, g);
      read_row<T, A, Cv, V>(s1, idx, y);
      for (int i = 0; i < V; ++i) P::add(out[i], g[i], y[i]);
    }
  }
}

// Middle pieces of rows [r0, r1) (each begins and ends inside the chunk),
// written on the spot: statistic (piece_stat), then the rows. Only the pieces
// past the lane's NF kept ones come here.
template <SsKind K, class T, class A, class Cv, int V, class Idx>
SEGRED_HD void write_pieces(const Params<Idx>& p, const Tile<Idx>& t, const Smem& sm, int fl, int r0, int r1) {
  const uint16_t* e = sm.ends();
  int k = first_end_after(e, t.ns, r0), start = r0;
  while (start < r1) {
    const int end = int(e[k]);
    typename Pol<K, A>::Stat part[V];
    piece_stat<K, T, A, Cv, V>(p, t, sm, fl, start, end, part);
    Idx o;
    write_segment_rows<K, T, A, Cv, V>(p, t, sm, fl, start, end, real_segment(t.i0 + Idx(k), p.S, p.U, o), part);
    ++k;
    while (k < t.ns && int(e[k]) == end) ++k;  // empty segments
    start = end;
  }
}

// The statistics of the chunk's pieces in one pass over its rows, the same
// instructions for every row (Pol::add; the lanes of a warp stay in lock-step
// whatever the segment lengths): a piece that closes at row r (r + 1 = e[k]) is
// the chunk's first piece (its total comes from the scan), or a middle piece:
// logsumexp forward writes its output, the row-output kinds keep the first NF
// in registers and the next NS in the thread's shared-memory slot for the row
// pass (write_edges) and write the rest on the spot after the pass
// (write_pieces). Left: the partial of the first piece (if it closes in the
// chunk) and of the piece open at the chunk's end.
template <SsKind K, class T, class A, class Cv, int V, class Idx, int NF, int NS>
SEGRED_HD void walk(Lane<typename Pol<K, A>::Stat, V, NF, NS>& ln, const Params<Idx>& p, const Tile<Idx>& t,
                    const Smem& sm, int tid) {
  using P = Pol<K, A>;
  using Stat = typename P::Stat;
  // The geometry allocates the slots by the same rule (kinds without a row pass never reach them).
  static_assert(NS <= 1 && (!P::kDeferred || NS == detail::ss_smem_slots(K, V)), "slots: geometry and walk differ");
  const int G = p.lanes, c = tid / G, fl = tid - c * G;
  ln.a = c * p.chunk_rows;
  ln.b = ln.a + p.chunk_rows < t.nrows ? ln.a + p.chunk_rows : t.nrows;
  ln.active = ln.a < ln.b && fl * V < t.wr;
  ln.first_closed = ln.last_open = false;
  ln.key = -(c + 1);  // unique per chunk: matches no neighbour
  ln.nq = 0;
  ln.ovf = -1;
  for (int i = 0; i < V; ++i) ln.pf[i] = ln.sv[i] = P::identity();
  if (!ln.active) return;
  const uint16_t* e = sm.ends();
  const T* s0 = sm.array<T>(0);
  const T* s1 = sm.array<T>(P::kArrays - 1);
  // Piece [start, end) of segment k; end = INT_MAX when no segment closes after row a.
  int k = first_end_after(e, t.ns, ln.a), start = ln.a;
  int end = k < t.ns ? int(e[k]) : INT_MAX;
  for (int r = ln.a; r < ln.b; ++r) {  // ln.sv: the partial of the current piece
    const int idx = t.pad + r * p.width + fl * V;
    A v0[V], v1[V];
    read_row<T, A, Cv, V>(s0, idx, v0);
    if constexpr (P::kArrays == 2) read_row<T, A, Cv, V>(s1, idx, v1);
    else
      for (int i = 0; i < V; ++i) v1[i] = A(0);
    for (int i = 0; i < V; ++i) P::add(ln.sv[i], v0[i], v1[i]);
    if (r + 1 != end) continue;
    if (start == ln.a) {  // may have begun in an earlier chunk: its total comes from the scan
      ln.first_closed = true;
      ln.kf = k;
      ln.first_end = end;
      for (int i = 0; i < V; ++i) ln.pf[i] = ln.sv[i];
    } else if constexpr (K == SsKind::LseFwd) {  // begins and ends in the chunk: final
      write_lse<K, T, A, Cv, V>(p, t, fl, t.i0 + Idx(k), ln.sv);
    } else if (ln.nq < NF) {
      for (int j = 0; j < NF; ++j)  // static indices: the slots stay in registers
        if (j == ln.nq) {
          ln.qend[j] = end;
          ln.qk[j] = k;
          for (int i = 0; i < V; ++i) ln.qv[j][i] = ln.sv[i];
        }
      ++ln.nq;
    } else if (NS > 0 && ln.nq < NF + NS) {  // the shared-memory slot (index NF)
      if constexpr (NS > 0) {
        ln.qend[NF] = end;
        ln.qk[NF] = k;
        Stat* slot = sm.slots<Stat>() + tid * V;
        for (int i = 0; i < V; ++i) slot[i] = ln.sv[i];
      }
      ++ln.nq;
    } else if (ln.ovf < 0) {
      ln.ovf = start;
    }
    ++k;
    while (k < t.ns && int(e[k]) == end) ++k;  // empty segments
    start = end;
    end = k < t.ns ? int(e[k]) : INT_MAX;
    for (int i = 0; i < V; ++i) ln.sv[i] = P::identity();
  }
  if (start < ln.b) {  // open at the chunk's end
    ln.last_open = true;
    ln.last_start = start;
    ln.key = k;
  }
  ln.kl = k;
  if (!ln.first_closed) ln.kf = k;
  if constexpr (P::kRowOut)
    if (ln.ovf >= 0) write_pieces<K, T, A, Cv, V>(p, t, sm, fl, ln.ovf, ln.last_open ? ln.last_start : ln.b);
}

// One Hillis-Steele step: the partial of the chunk `d` chunks earlier (nkey, nv).
template <SsKind K, class A, int V>
SEGRED_HD void scan_take(Lane<typename Pol<K, A>::Stat, V>& ln, int nkey, const typename Pol<K, A>::Stat (&nv)[V],
                         bool valid) {
  if (!valid || nkey != ln.key) return;
  for (int i = 0; i < V; ++i) ln.sv[i] = Pol<K, A>::combine(nv[i], ln.sv[i]);
}

// The last chunk of each warp publishes its warp-inclusive value.
template <SsKind K, class A, int V>
SEGRED_HD void warp_total_out(const Lane<typename Pol<K, A>::Stat, V>& ln, const Smem& sm, int tid, int G) {
  using Stat = typename Pol<K, A>::Stat;
  const int lane = tid & 31, warp = tid >> 5;
  if (lane < 32 - G) return;
  const int slot = warp * G + (lane - (32 - G));
  sm.keys()[slot] = ln.key;
  for (int i = 0; i < V; ++i) sm.stats<Stat>()[slot * V + i] = ln.sv[i];
}

// Carry from the earlier warps (k0: key of this warp's first chunk for this
// feature lane), folded into the inclusive value when this chunk's run reaches
// back past the warp's start; left as the exclusive value (right for the warp's
// first chunk). The chain over the earlier warps runs only where its result is
// used: the run continues from the previous warp, or (the warp's first chunk)
// the previous warp ends inside the segment this chunk closes.
template <SsKind K, class A, int V>
SEGRED_HD void warp_carry_in(Lane<typename Pol<K, A>::Stat, V>& ln, const Smem& sm, int tid, int G, int k0) {
  using P = Pol<K, A>;
  using Stat = typename P::Stat;
  const int warp = tid >> 5, fl = tid % G, lane = tid & 31;
  const int* keys = sm.keys();
  const Stat* st = sm.stats<Stat>();
  const int prev = warp > 0 ? keys[(warp - 1) * G + fl] : INT_MIN;  // the chain's last key
  ln.xkey = prev;
  for (int i = 0; i < V; ++i) ln.xv[i] = P::identity();
  const bool inclusive = k0 == ln.key && prev == ln.key;
  const bool exclusive = lane < G && ln.first_closed && prev == ln.kf;
  if (!inclusive && !exclusive) return;
  int ck = INT_MIN;
  Stat cv[V];
  for (int i = 0; i < V; ++i) cv[i] = P::identity();
  for (int w = 0; w < warp; ++w) {
    const int slot = w * G + fl;
    if (keys[slot] == ck) {
      for (int i = 0; i < V; ++i) cv[i] = P::combine(cv[i], st[slot * V + i]);
    } else {
      ck = keys[slot];
      for (int i = 0; i < V; ++i) cv[i] = st[slot * V + i];
    }
  }
  if (inclusive)
    for (int i = 0; i < V; ++i) ln.sv[i] = P::combine(cv[i], ln.sv[i]);
  for (int i = 0; i < V; ++i) ln.xv[i] = cv[i];
}

// Tile totals of the segments chunks close; head and carry of the tile.
template <SsKind K, class T, class A, class Cv, int V, class Idx>
SEGRED_HD void publish(Lane<typename Pol<K, A>::Stat, V>& ln, const Params<Idx>& p, const Tile<Idx>& t,
                       const Smem& sm, int tid) {
  using P = Pol<K, A>;
  using Stat = typename P::Stat;
  const int G = p.lanes, c = tid / G, fl = tid - c * G;
  Stat* carry = static_cast<Stat*>(p.carry);
  Stat* head = static_cast<Stat*>(p.head);
  const Idx at = t.w * p.F + t.f0 + Idx(fl * V);
  if (c == 0 && fl * V < t.wr) {  // what no chunk's walk can write
    if (t.nrows == 0)
      for (int i = 0; i < V; ++i) carry[at + i] = P::identity();
    if (t.ns > 0 && t.cross_in && sm.ends()[0] == 0)
      for (int i = 0; i < V; ++i) head[at + i] = P::identity();
  }
  if (!ln.active) return;
  if (ln.first_closed) {
    if (ln.xkey == ln.kf)
      for (int i = 0; i < V; ++i) ln.pf[i] = P::combine(ln.xv[i], ln.pf[i]);
    if (ln.kf == 0 && t.cross_in) {
      for (int i = 0; i < V; ++i) head[at + i] = ln.pf[i];
    } else if constexpr (K == SsKind::LseFwd) {
      write_lse<K, T, A, Cv, V>(p, t, fl, t.i0 + Idx(ln.kf), ln.pf);
    } else {
      for (int i = 0; i < V; ++i) sm.stats<Stat>()[tid * V + i] = ln.pf[i];
    }
  }
  if (ln.b == t.nrows)
    for (int i = 0; i < V; ++i) carry[at + i] = ln.last_open ? ln.sv[i] : P::identity();
}

// The row pass (row-output kinds): every row of the chunk in one loop, the same
// instructions per row, its piece's epilogue constants changing at piece ends:
// the first piece (tile total after publish), the kept middle pieces, the rows
// the walk already wrote (skipped), the open piece (total from the chunk that
// closes it). Rows of deferred segments (crossing a tile edge) are left alone:
// the copy-out skips them, the crossing pass writes them; ghost rows get zeros.
// Every piece's constants (P::prep: IEEE 1/s or log s, real_segment, the closing
// chunk's total) are computed BEFORE the loop: a piece ends at a different row in
// each lane, so inside the loop the warp ran that epilogue once per distinct row
// (ncu, GAT 8 heads fp32: the open piece's epilogue ~4.9 times per warp, ~14% of
// the kernel's instructions); the loop now only moves registers at a piece end.
// The kept middle pieces: NF in registers, or (NF = 0, V = 4) NS = 1 in the
// thread's shared-memory slot, whose statistics the set-up replaces by their
// epilogue constants (Pol::pack), loaded at the switch to its run: no registers
// held across the loop for it.
template <SsKind K, class T, class A, class Cv, int V, class Idx, int NF, int NS>
SEGRED_HD void write_edges(Lane<typename Pol<K, A>::Stat, V, NF, NS>& ln, const Params<Idx>& p, const Tile<Idx>& t,
                           const Smem& sm, int tid) {
  using P = Pol<K, A>;
  using Stat = typename P::Stat;
  using Prep = typename P::Prep;
  constexpr int NT = NF + NS, NQ = NF > 0 ? NF : 1;
  static_assert(NS == 0 || (NS == 1 && NF == 0), "a shared-memory slot only without register slots");
  if (!ln.active) return;
  const int fl = tid % p.lanes;
  auto deferred = [&](int k) { return k == t.ns || (k == 0 && t.cross_in); };
  // Constants of segment k's piece from its statistics st: real (else zeros),
  // write (else left to the crossing pass).
  auto piece = [&](int k, const Stat (&st)[V], Prep (&pr)[V], bool& real, bool& write) {
    Idx o;
    real = real_segment(t.i0 + Idx(k), p.S, p.U, o);
    write = !real || !deferred(k);
    for (int i = 0; i < V; ++i) pr[i] = Prep{A(0), A(0)};
    if (real && write)
      for (int i = 0; i < V; ++i) pr[i] = P::prep(st[i]);
  };
  // The open piece: total from the chunk that closes it (tile-local).
  Prep po[V];
  bool realo = false, writeo = false;  // no open piece: not written (every row is in a run before it)
  for (int i = 0; i < V; ++i) po[i] = Prep{A(0), A(0)};
  if (ln.last_open) {
    Stat tot[V];
    for (int i = 0; i < V; ++i) tot[i] = P::identity();
    if (!deferred(ln.kl)) {
      const int cend = (int(sm.ends()[ln.kl]) - 1) / p.chunk_rows;
      for (int i = 0; i < V; ++i) tot[i] = sm.stats<Stat>()[(cend * p.lanes + fl) * V + i];
    }
    piece(ln.kl, tot, po, realo, writeo);
  }
  // The kept middle pieces, in row order; flags as bits (slot j: bit j).
  Prep qp[NQ][V];
  int qreal = 0, qwrite = 0;
  if constexpr (NS > 0) {  // the shared-memory slot (this thread's own: no barrier needed)
    for (int i = 0; i < V; ++i) qp[0][i] = Prep{A(0), A(0)};
    if (ln.nq > 0) {
      bool rj = false, wj = false;
      Stat* slot = sm.slots<Stat>() + tid * V;
      Stat st[V];
      for (int i = 0; i < V; ++i) st[i] = slot[i];
      piece(ln.qk[0], st, qp[0], rj, wj);
      for (int i = 0; i < V; ++i) slot[i] = P::pack(qp[0][i]);
      qreal = int(rj);
      qwrite = int(wj);
    }
  } else {
    for (int j = 0; j < NQ; ++j) {  // static indices: the slots stay in registers
      for (int i = 0; i < V; ++i) qp[j][i] = Prep{A(0), A(0)};
      if (j < ln.nq) {
        bool rj = false, wj = false;
        piece(ln.qk[j], ln.qv[j], qp[j], rj, wj);
        qreal |= int(rj) << j;
        qwrite |= int(wj) << j;
      }
    }
  }
  Prep pr[V];
  for (int i = 0; i < V; ++i) pr[i] = Prep{A(0), A(0)};
  bool write = false, real = false;
  int hi = ln.a;  // end of the current run of rows
  if (ln.first_closed) {
    hi = ln.first_end;
    piece(ln.kf, ln.pf, pr, real, write);
  }
  for (int r = ln.a; r < ln.b; ++r) {
    while (r == hi) {  // next run (each is non-empty, so this ends)
      if (ln.nq > 0) {
        hi = ln.qend[0];
        if constexpr (NS > 0) {
          const Stat* slot = sm.slots<Stat>() + tid * V;
          for (int i = 0; i < V; ++i) pr[i] = P::unpack(slot[i]);
        } else {
          for (int i = 0; i < V; ++i) pr[i] = qp[0][i];
        }
        real = (qreal & 1) != 0;
        write = (qwrite & 1) != 0;
        for (int j = 0; j + 1 < NT; ++j) {  // shift: slot 0 is always the next one
          ln.qend[j] = ln.qend[j + 1];
          for (int i = 0; i < V; ++i) qp[j][i] = qp[j + 1][i];
        }
        qreal >>= 1;
        qwrite >>= 1;
        --ln.nq;
      } else if (r == ln.ovf) {  // written by the walk
        hi = ln.last_open ? ln.last_start : ln.b;
        write = false;
      } else {  // the open piece (r == last_start)
        hi = ln.b;
        for (int i = 0; i < V; ++i) pr[i] = po[i];
        real = realo;
        write = writeo;
      }
    }
    if (!write) continue;
    output_row<K, T, A, Cv, V>(p, t, sm, fl, r, real, pr);
  }
}

// Copy-out of the tile's finished rows; logsumexp: the empty segments.
template <SsKind K, class T, class A, class Cv, class Idx>
SEGRED_HD void finish_tile(const Params<Idx>& p, const Tile<Idx>& t, const Smem& sm, int tid, int nthr) {
  using P = Pol<K, A>;
  const uint16_t* e = sm.ends();
  Idx o;
  if constexpr (K == SsKind::LseFwd) {
    T* out = static_cast<T*>(p.out);
    for (int k = tid; k < t.ns * t.wr; k += nthr) {
      const int s = k / t.wr, f = k - s * t.wr;
      const Idx start = s == 0 ? p.q[t.i0] - t.j0 : Idx(e[s - 1]);
      if (start == Idx(e[s]) && real_segment(t.i0 + Idx(s), p.S, p.U, o))
        out[o * p.F + t.f0 + Idx(f)] = Cv::st(-P::inf());
    }
  } else {
    int lo = 0, hi = t.nrows;
    if constexpr (P::kDeferred) {
      if (t.ns == 0) {
        if (real_segment(t.i0, p.S, p.U, o)) hi = 0;
      } else {
        if (t.cross_in && real_segment(t.i0, p.S, p.U, o)) lo = e[0];
        if (real_segment(t.i1, p.S, p.U, o)) hi = e[t.ns - 1];
      }
    }
    copy_rows<T, false>(p, t, static_cast<T*>(p.out), sm.array<T>(0), lo, hi, tid, nthr);
  }
}

// logsumexp backward: no statistic; every row from its segment's g and y.
template <class T, class A, class Cv, int V, class Idx>
SEGRED_HD void walk_lse_bwd(const Params<Idx>& p, const Tile<Idx>& t, const Smem& sm, int tid) {
  const int G = p.lanes, c = tid / G, fl = tid - c * G;
  const int a = c * p.chunk_rows, b = a + p.chunk_rows < t.nrows ? a + p.chunk_rows : t.nrows;
  if (a >= b || fl * V >= t.wr) return;
  const uint16_t* e = sm.ends();
  T* s0 = sm.array<T>(0);
  int k = first_end_after(e, t.ns, a);
  A gs[V], ys[V];
  bool real = false;
  auto load = [&] {
    Idx o;
    real = real_segment(t.i0 + Idx(k), p.S, p.U, o);
    if (!real) return;
    const Idx at = o * p.F + t.f0 + Idx(fl * V);
    for (int i = 0; i < V; ++i) {
      gs[i] = Cv::ld(static_cast<const T*>(p.seg0)[at + i]);
      ys[i] = Cv::ld(static_cast<const T*>(p.seg1)[at + i]);
    }
  };
  load();
  for (int r = a; r < b; ++r) {
    const int idx = t.pad + r * p.width + fl * V;
    A v[V], o[V];
    read_row<T, A, Cv, V>(s0, idx, v);
    for (int i = 0; i < V; ++i) o[i] = real ? gs[i] * ss_exp(v[i] - ys[i]) : A(0);
    write_row<T, A, Cv, V>(s0, idx, o);
    if (k < t.ns && int(e[k]) == r + 1) {
      ++k;
      while (k < t.ns && int(e[k]) == r + 1) ++k;
      if (r + 1 < b) load();
    }
  }
}

// ---------------------------------------------------------------- crossing segments

// The final statistic of crossing merge segment v (called by the fix-up for
// the tile that completes it): logsumexp's output, else fin[that tile].
template <SsKind K, class T, class A, class Cv, class Idx>
SEGRED_HD void finish_crossing(const Params<Idx>& p, Idx v, Idx f, const typename Pol<K, A>::Stat& acc) {
  using P = Pol<K, A>;
  if constexpr (K == SsKind::LseFwd) {
    Idx o;
    if (real_segment(v, p.S, p.U, o)) static_cast<T*>(p.out)[o * p.F + f] = Cv::st(P::lse(acc));
  } else {
    static_cast<typename P::Stat*>(p.fin)[completing_tile(p.tile_i, p.tiles, v) * p.F + f] = acc;
  }
}

// Row ranges of the tile that belong to real crossing segments, and the tiles
// whose fin holds their statistics.
template <class Idx>
struct Crossing {
  int n = 0;
  int lo[2] = {0, 0}, hi[2] = {0, 0};
  Idx wc[2] = {0, 0};
};

template <class Idx>
SEGRED_HD Crossing<Idx> crossing_ranges(const Params<Idx>& p, const Tile<Idx>& t) {
  Crossing<Idx> c;
  Idx o;
  if (t.ns > 0 && t.cross_in && real_segment(t.i0, p.S, p.U, o)) {
    const int hi = int(p.q[t.i0 + 1] - t.j0);
    if (hi > 0) {
      c.lo[c.n] = 0;
      c.hi[c.n] = hi;
      c.wc[c.n++] = t.w;
    }
  }
  if (real_segment(t.i1, p.S, p.U, o)) {
    const Idx lo = p.q[t.i1] > t.j0 ? p.q[t.i1] - t.j0 : Idx(0);
    if (lo < Idx(t.nrows)) {
      c.lo[c.n] = int(lo);
      c.hi[c.n] = t.nrows;
      // The tile that completes t.i1 holds its end, merge item t.i1 + q[t.i1 + 1]
      // (tiles of `items` merge items): one load instead of completing_tile's
      // log2(tiles) dependent ones (~14 on GAT), which set the crossing pass's time.
      c.wc[c.n++] = (t.i1 + p.q[t.i1 + 1]) / p.items;
    }
  }
  return c;
}

// Per (range, slab feature) epilogue constants, into `prep` (2 * width entries).
template <SsKind K, class A, class Idx>
SEGRED_HD void crossing_prep(const Params<Idx>& p, const Tile<Idx>& t, const Crossing<Idx>& c,
                             typename Pol<K, A>::Prep* prep, int tid, int nthr) {
  using P = Pol<K, A>;
  const auto* fin = static_cast<const typename P::Stat*>(p.fin);
  for (int k = tid; k < c.n * t.wr; k += nthr) {
    const int r = k / t.wr, f = k - r * t.wr;
    prep[k] = P::prep(fin[c.wc[r] * p.F + t.f0 + Idx(f)]);
  }
}

constexpr int kCrossUnroll = 4;  // rows a thread of crossing_apply loads before it writes

template <SsKind K, class T, class A, class Cv, class Idx>
SEGRED_HD void crossing_apply(const Params<Idx>& p, const Tile<Idx>& t, const Crossing<Idx>& c,
                              const typename Pol<K, A>::Prep* prep, int tid, int nthr) {
  using P = Pol<K, A>;
  const T* in0 = static_cast<const T*>(p.in0);
  const T* in1 = static_cast<const T*>(P::kArrays == 2 ? p.in1 : p.in0);
  T* out = static_cast<T*>(p.out);
  if (P::kArrays == 1 && nthr % t.wr == 0) {
    // Forward only (session 7 on the H200, 32fb859: the forwards 3-12% faster, the
    // backwards, which load two arrays here, 4-9% slower: they keep the loop below).
    // The block is a whole number of rows of the slab (every power-of-two width):
    // each thread keeps one feature f, so its epilogue constant stays in a register
    // and no element pays a division, and it loads kCrossUnroll rows before it
    // writes any. (Session 7: with one load in flight per thread, since out may
    // alias the inputs as far as the compiler knows, ncu had crossing_kernel at
    // 16% of DRAM bandwidth, stalled on its loads: 63 us of GAT 8 heads fp32 fwd.)
    constexpr int U = kCrossUnroll;
    const int f = tid % t.wr, step = nthr / t.wr;
    for (int r = 0; r < c.n; ++r) {
      const int rows = c.hi[r] - c.lo[r];
      const auto pr = prep[r * t.wr + f];
      const Idx base = (t.j0 + Idx(c.lo[r])) * p.F + t.f0 + Idx(f);
      int rr = tid / t.wr;
      for (; rr + (U - 1) * step < rows; rr += U * step) {
        A v0[U];
#pragma unroll
        for (int u = 0; u < U; ++u) v0[u] = A(Cv::ld(in0[base + Idx(rr + u * step) * p.F]));
#pragma unroll
        for (int u = 0; u < U; ++u) out[base + Idx(rr + u * step) * p.F] = Cv::st(P::apply(v0[u], A(0), pr));
      }
      for (; rr < rows; rr += step) {
        const Idx at = base + Idx(rr) * p.F;
        out[at] = Cv::st(P::apply(A(Cv::ld(in0[at])), A(0), pr));
      }
    }
    return;
  }
  for (int r = 0; r < c.n; ++r) {
    const int n = (c.hi[r] - c.lo[r]) * t.wr;
    const Idx base = (t.j0 + Idx(c.lo[r])) * p.F + t.f0;
    for (int k = tid; k < n; k += nthr) {
      const int rr = t.wr == 1 ? k : k / t.wr, f = k - rr * t.wr;
      const Idx at = base + Idx(rr) * p.F + Idx(f);
      const A v1 = P::kArrays == 2 ? A(Cv::ld(in1[at])) : A(0);
      out[at] = Cv::st(P::apply(Cv::ld(in0[at]), v1, prep[r * t.wr + f]));
    }
  }
}

}  // namespace segred::ops::ss
