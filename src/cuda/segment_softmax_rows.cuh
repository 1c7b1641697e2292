// The rows path of the CUDA ragged softmax family (v3, the default; the work split
// and its constants: src/core/segment_softmax_geometry.h, "rows path").
//
// One call:
//   qscan_agg, qscan_write  q: the metadata scanned per row (lengths: clamped
//              saturating sum; offsets: clamped running max), exactly the CPU's
//              clamping (src/core/segments.cpp), as int64 values qv.
//   rows       one lane group per merge segment (ghosts included): statistics in
//              registers and shuffles, then the rows; segments longer than
//              long_rows are appended to the long list.
//   long_stats, long_final, long_write: the long list in chunks (persistent
//              grids; they return at once when the list is empty).
// Included by segment_softmax_impl.cuh (which has SsArgs, DevCv and block_viable).
#pragma once
#include <cub/block/block_scan.cuh>

#include "src/ops/segment_softmax_rows.h"

namespace segred::cuda::ssr {

namespace tiles = ops::ss;
using detail::SsKind;

constexpr int kMetaDims = 8;

// Metadata element (row r of the layout, column c), any strides (as segment_reduce's
// prepare reads it: leading metadata dims decompose the row index, innermost first).
struct MetaRd {
  const void* p = nullptr;
  bool i32 = false;
  int nd = 1;
  int64_t sizes[kMetaDims] = {};
  int64_t strides[kMetaDims] = {};
  __device__ int64_t read(int64_t r, int64_t c) const {
    int64_t off = c * strides[nd - 1];
    for (int d = nd - 2; d >= 0; --d) {
      const int64_t i = r % sizes[d];
      r /= sizes[d];
      off += i * strides[d];
    }
    return i32 ? int64_t(static_cast<const int32_t*>(p)[off]) : static_cast<const int64_t*>(p)[off];
  }
};

using ops::sr::KV;
using ops::sr::QOp;
using ops::sr::QView;

struct QScanArgs {
  MetaRd m;
  int64_t items = 0, k = 1, L = 0;
  bool lengths = false;
  KV* agg = nullptr;
  int64_t* qv = nullptr;
};

using QScan = cub::BlockScan<KV, detail::kSrBlock>;

static __device__ __forceinline__ void q_load(const QScanArgs& a, int64_t base, KV (&x)[detail::kSrMetaIpt]) {
  const int64_t idx = base + int64_t(threadIdx.x) * detail::kSrMetaIpt;
  int64_t r = idx / a.k, c = idx - r * a.k;
#pragma unroll
  for (int i = 0; i < detail::kSrMetaIpt; ++i) {
    if (idx + i < a.items) {
      const int64_t v = a.m.read(r, c);
      x[i] = KV{r, ops::sr::clamp_meta(v, a.L)};
    } else {
      x[i] = KV{-1, 0};
    }
    if (++c == a.k) {
      c = 0;
      ++r;
    }
  }
}

// Block b: the aggregate of metadata items [b * tile, (b + 1) * tile).
static __global__ void __launch_bounds__(detail::kSrBlock) qscan_agg(QScanArgs a) {
  __shared__ typename QScan::TempStorage tmp;
  KV x[detail::kSrMetaIpt];
  q_load(a, int64_t(blockIdx.x) * detail::kSrMetaTile, x);
  KV agg;
  QScan(tmp).InclusiveScan(x, x, QOp{a.L, a.lengths}, agg);
  if (threadIdx.x == 0) a.agg[blockIdx.x] = agg;
}

// Block b: the earlier blocks' aggregates folded (in order), then its items
// scanned and written: qv[item] = the clamped scan value.
static __global__ void __launch_bounds__(detail::kSrBlock) qscan_write(QScanArgs a) {
  __shared__ typename QScan::TempStorage tmp;
  const QOp op{a.L, a.lengths};
  const int64_t b = blockIdx.x;
  KV pre{-1, 0};
  for (int64_t j0 = 0; j0 < b; j0 += detail::kSrMetaTile) {
    KV x[detail::kSrMetaIpt];
#pragma unroll
    for (int i = 0; i < detail::kSrMetaIpt; ++i) {
      const int64_t j = j0 + int64_t(threadIdx.x) * detail::kSrMetaIpt + i;
      x[i] = j < b ? a.agg[j] : KV{-1, 0};
    }
    KV t;
    QScan(tmp).InclusiveScan(x, x, op, t);
    __syncthreads();
    pre = op(pre, t);
  }
  KV x[detail::kSrMetaIpt];
  const int64_t base = b * detail::kSrMetaTile;
  q_load(a, base, x);
  KV t;
  QScan(tmp).InclusiveScan(x, x, op, t);
#pragma unroll
  for (int i = 0; i < detail::kSrMetaIpt; ++i) {
    const int64_t idx = base + int64_t(threadIdx.x) * detail::kSrMetaIpt + i;
    if (idx < a.items) a.qv[idx] = op(pre, x[i]).v;
  }
}

template <class Idx>
struct RParams {
  const void* in0 = nullptr;  // x (forward, logsumexp backward) or g
  const void* in1 = nullptr;  // y (softmax / log_softmax backward)
  const void* seg0 = nullptr;  // logsumexp backward: g, y per segment
  const void* seg1 = nullptr;
  void* out = nullptr;
  QView<Idx> q;
  Idx F = 1, width = 1, slabs = 1, long_rows = 0, chunk_rows = 1;
  int lanes = 1, rows = 1, group = 1, fin_lanes = 1;
  unsigned long long* counter = nullptr;  // (entries << 32) + chunks
  Idx* ent_v = nullptr;     // merge segment of long entry e
  Idx* ent_a = nullptr;     // its first row
  Idx* ent_n = nullptr;     // its rows
  Idx* ent_base = nullptr;  // its first chunk id (increasing in e)
  void* part = nullptr;     // Stat[max_chunks * F]
  void* fin = nullptr;      // Stat[max_entries * F]
};

template <class D, int V, class A>
__device__ __forceinline__ void widen(const tiles::Vec<D, V>& w, A (&v)[V]) {
#pragma unroll
  for (int i = 0; i < V; ++i) v[i] = cuda::ld(w.v[i]);
}
template <class D, int V>
__device__ __forceinline__ tiles::Vec<D, V> load_vec(const void* base, int64_t at) {
  return *reinterpret_cast<const tiles::Vec<D, V>*>(static_cast<const D*>(base) + at);
}
template <class D, int V, class A>
__device__ __forceinline__ void store_vec(void* base, int64_t at, const A (&v)[V]) {
  tiles::Vec<D, V> w;
#pragma unroll
  for (int i = 0; i < V; ++i) w.v[i] = cuda::st<D>(v[i]);
  *reinterpret_cast<tiles::Vec<D, V>*>(static_cast<D*>(base) + at) = w;
}

template <class A>
__device__ __forceinline__ A shfl_xor(unsigned mask, A v, int d) {
  return __shfl_xor_sync(mask, v, d);
}

// The row epilogue of kind K for one element: (v0, v1) -> output; zeros for ghosts.
template <SsKind K, class A>
__device__ __forceinline__ A row_out(bool real, A v0, A v1, const typename tiles::Pol<K, A>::Prep& pr) {
  using P = tiles::Pol<K, A>;
  if (!real) return A(0);
  if constexpr (K == SsKind::LseBwd) return pr.a * tiles::ss_exp(v0 - pr.b);  // g_seg exp(x - y_seg)
  else return P::apply(v0, v1, pr);
}

template <SsKind K, class D, class Idx, int V>
__global__ void __launch_bounds__(detail::kSrBlock, detail::ss_arrays(K) == 2 ? 2 : 3) rows_kernel(RParams<Idx> p) {
  using A = dacc_t<D>;
  using P = tiles::Pol<K, A>;
  using Stat = typename P::Stat;
  using Prep = typename P::Prep;
  constexpr int KC = detail::kSrCache;
  constexpr bool kTwo = P::kArrays == 2;
  const int tid = int(threadIdx.x), PG = p.group, G = p.lanes, R = p.rows;
  const int gib = tid / PG, lig = tid - gib * PG, slot = lig / G, fl = lig - slot * G;
  const Idx v = Idx(blockIdx.x) * Idx(int(blockDim.x) / PG) + Idx(gib);
  if (v >= p.q.U) return;  // whole groups leave together
  const int lane = tid & 31;
  const unsigned mask = PG == 32 ? 0xffffffffu : (((1u << PG) - 1u) << (lane & ~(PG - 1)));
  Idx a, b;
  p.q.bounds(v, a, b);
  const Idx n = b > a ? b - a : Idx(0);
  if (n > p.long_rows) {  // the long path
    if (lig == 0) {
      const Idx nch = ops::sr::chunks_of(n, p.chunk_rows);
      const unsigned long long old = atomicAdd(p.counter, (1ull << 32) + (unsigned long long)nch);
      const Idx e = Idx(old >> 32);
      p.ent_v[e] = v;
      p.ent_a[e] = a;
      p.ent_n[e] = n;
      p.ent_base[e] = Idx(old & 0xffffffffull);
    }
    return;
  }
  Idx o = 0;
  const bool real = tiles::real_segment(v, p.q.S, p.q.U, o);
  if (K == SsKind::LseFwd && !real) return;
  const Idx nit = (n + Idx(R) - 1) / Idx(R);
  const bool cached = nit <= Idx(KC);
  for (Idx f0 = 0; f0 < p.F; f0 += p.width) {
    const Idx f = f0 + Idx(fl * V);
    const bool active = f < p.F;
    auto at = [&](Idx j) { return int64_t((a + j) * p.F + f); };
    tiles::Vec<D, V> c0[KC], c1[KC];
    Prep pr[V];
    if constexpr (K == SsKind::LseBwd) {
#pragma unroll
      for (int i = 0; i < V; ++i) pr[i] = Prep{A(0), A(0)};
      if (real && active)
#pragma unroll
        for (int i = 0; i < V; ++i) {
          pr[i].a = cuda::ld(static_cast<const D*>(p.seg0)[o * p.F + f + Idx(i)]);
          pr[i].b = cuda::ld(static_cast<const D*>(p.seg1)[o * p.F + f + Idx(i)]);
        }
      if (cached) {
#pragma unroll
        for (int it = 0; it < KC; ++it) {
          const Idx j = Idx(it * R + slot);
          if (active && j < n) c0[it] = load_vec<D, V>(p.in0, at(j));
        }
      }
    } else if constexpr (P::kFwd) {
      A m[V], x[V];
#pragma unroll
      for (int i = 0; i < V; ++i) m[i] = -P::inf();
      if (cached) {
#pragma unroll
        for (int it = 0; it < KC; ++it) {
          const Idx j = Idx(it * R + slot);
          if (active && j < n) {
            c0[it] = load_vec<D, V>(p.in0, at(j));
            widen(c0[it], x);
#pragma unroll
            for (int i = 0; i < V; ++i) m[i] = x[i] > m[i] ? x[i] : m[i];  // a NaN never wins
          }
        }
      } else if (active) {
#pragma unroll 4
        for (Idx j = slot; j < n; j += R) {
          widen(load_vec<D, V>(p.in0, at(j)), x);
#pragma unroll
          for (int i = 0; i < V; ++i) m[i] = x[i] > m[i] ? x[i] : m[i];
        }
      }
      for (int d = G; d < PG; d <<= 1)
#pragma unroll
        for (int i = 0; i < V; ++i) {
          const A t = shfl_xor(mask, m[i], d);
          m[i] = t > m[i] ? t : m[i];
        }
      A base[V], eq[V], s[V];
#pragma unroll
      for (int i = 0; i < V; ++i) {
        base[i] = m[i] == -P::inf() ? A(0) : m[i];  // all -inf: exp(-inf - 0) = 0
        eq[i] = m[i] == -P::inf() ? std::numeric_limits<A>::quiet_NaN() : m[i];  // x == eq adds exactly 1
        s[i] = A(0);
      }
      auto add = [&](const A (&xv)[V]) {
#pragma unroll
        for (int i = 0; i < V; ++i) s[i] += xv[i] == eq[i] ? A(1) : tiles::ss_exp(xv[i] - base[i]);
      };
      if (cached) {
#pragma unroll
        for (int it = 0; it < KC; ++it) {
          const Idx j = Idx(it * R + slot);
          if (active && j < n) {
            widen(c0[it], x);
            add(x);
          }
        }
      } else if (active) {
#pragma unroll 4
        for (Idx j = slot; j < n; j += R) {
          widen(load_vec<D, V>(p.in0, at(j)), x);
          add(x);
        }
      }
      for (int d = G; d < PG; d <<= 1)
#pragma unroll
        for (int i = 0; i < V; ++i) s[i] += shfl_xor(mask, s[i], d);
      if constexpr (K == SsKind::LseFwd) {
        if (slot == 0 && active)
#pragma unroll
          for (int i = 0; i < V; ++i)
            static_cast<D*>(p.out)[o * p.F + f + Idx(i)] = cuda::st<D>(P::lse(Stat{m[i], s[i]}));
        continue;
      } else {
#pragma unroll
        for (int i = 0; i < V; ++i) pr[i] = P::prep(Stat{m[i], s[i]});
      }
    } else {  // softmax / log_softmax backward: sum g*y or sum g
      A t[V], g[V], y[V];
#pragma unroll
      for (int i = 0; i < V; ++i) t[i] = A(0);
      if (cached) {
#pragma unroll
        for (int it = 0; it < KC; ++it) {
          const Idx j = Idx(it * R + slot);
          if (active && j < n) {
            c0[it] = load_vec<D, V>(p.in0, at(j));
            c1[it] = load_vec<D, V>(p.in1, at(j));
            widen(c0[it], g);
            widen(c1[it], y);
#pragma unroll
            for (int i = 0; i < V; ++i) P::add(t[i], g[i], y[i]);
          }
        }
      } else if (active) {
#pragma unroll 4
        for (Idx j = slot; j < n; j += R) {
          widen(load_vec<D, V>(p.in0, at(j)), g);
          widen(load_vec<D, V>(p.in1, at(j)), y);
#pragma unroll
          for (int i = 0; i < V; ++i) P::add(t[i], g[i], y[i]);
        }
      }
      for (int d = G; d < PG; d <<= 1)
#pragma unroll
        for (int i = 0; i < V; ++i) t[i] += shfl_xor(mask, t[i], d);
#pragma unroll
      for (int i = 0; i < V; ++i) pr[i] = P::prep(t[i]);
    }
    if constexpr (K != SsKind::LseFwd) {  // the rows
      A v0[V], v1[V], r[V];
#pragma unroll
      for (int i = 0; i < V; ++i) v1[i] = A(0);
      if (cached) {
#pragma unroll
        for (int it = 0; it < KC; ++it) {
          const Idx j = Idx(it * R + slot);
          if (active && j < n) {
            widen(c0[it], v0);
            if constexpr (kTwo) widen(c1[it], v1);
#pragma unroll
            for (int i = 0; i < V; ++i) r[i] = row_out<K, A>(real, v0[i], v1[i], pr[i]);
            store_vec<D, V>(p.out, at(j), r);
          }
        }
      } else if (active) {
#pragma unroll 4
        for (Idx j = slot; j < n; j += R) {
          widen(load_vec<D, V>(p.in0, at(j)), v0);
          if constexpr (kTwo) widen(load_vec<D, V>(p.in1, at(j)), v1);
#pragma unroll
          for (int i = 0; i < V; ++i) r[i] = row_out<K, A>(real, v0[i], v1[i], pr[i]);
          store_vec<D, V>(p.out, at(j), r);
        }
      }
    }
  }
}

// ---------------------------------------------------------------- long path

static __device__ __forceinline__ void long_count(const unsigned long long* c, int64_t& entries, int64_t& chunks) {
  const unsigned long long v = *c;
  entries = int64_t(v >> 32);
  chunks = int64_t(v & 0xffffffffull);
}

// Chunk statistics: block per (chunk, slab); thread (row slot rs, lane fl) walks
// rows rs, rs + RB, ... of the chunk; a fixed tree over the row slots.
template <SsKind K, class D, class Idx, int V>
__global__ void __launch_bounds__(detail::kSrBlock) long_stats(RParams<Idx> p) {
  using A = dacc_t<D>;
  using P = tiles::Pol<K, A>;
  using Stat = typename P::Stat;
  __shared__ A red[detail::kSrBlock * V];
  int64_t ne, nc;
  long_count(p.counter, ne, nc);
  const Idx items = Idx(nc) * p.slabs;
  const int tid = int(threadIdx.x), G = p.lanes, RB = int(blockDim.x) / G, rs = tid / G, fl = tid - rs * G;
  Stat* part = static_cast<Stat*>(p.part);
  auto tree = [&](bool is_max) {  // red[(rs * G + fl) * V + i] over rs, fixed order
    for (int s = RB / 2; s > 0; s >>= 1) {
      __syncthreads();
      if (rs < s)
#pragma unroll
        for (int i = 0; i < V; ++i) {
          A& x = red[(rs * G + fl) * V + i];
          const A y = red[((rs + s) * G + fl) * V + i];
          x = is_max ? (y > x ? y : x) : x + y;
        }
    }
    __syncthreads();
  };
  for (Idx w = Idx(blockIdx.x); w < items; w += Idx(gridDim.x)) {
    const Idx ch = w / p.slabs, sl = w - ch * p.slabs;
    const ops::sr::Chunk<Idx> k = ops::sr::chunk_of(p.ent_base, p.ent_a, p.ent_n, Idx(ne), ch, p.chunk_rows);
    const Idx e = k.e, r0 = k.r0, cn = k.cn;
    const Idx f = sl * p.width + Idx(fl * V);
    const bool active = f < p.F;
    auto at = [&](Idx r) { return int64_t((r0 + r) * p.F + f); };
    A x[V];
    if constexpr (P::kFwd) {
      A m[V];
#pragma unroll
      for (int i = 0; i < V; ++i) m[i] = -P::inf();
      if (active)
#pragma unroll 4
        for (Idx r = rs; r < cn; r += RB) {
          widen(load_vec<D, V>(p.in0, at(r)), x);
#pragma unroll
          for (int i = 0; i < V; ++i) m[i] = x[i] > m[i] ? x[i] : m[i];
        }
#pragma unroll
      for (int i = 0; i < V; ++i) red[(rs * G + fl) * V + i] = m[i];
      tree(true);
      A base[V], eq[V], s[V];
#pragma unroll
      for (int i = 0; i < V; ++i) {
        m[i] = red[fl * V + i];
        base[i] = m[i] == -P::inf() ? A(0) : m[i];
        eq[i] = m[i] == -P::inf() ? std::numeric_limits<A>::quiet_NaN() : m[i];
        s[i] = A(0);
      }
      __syncthreads();  // everyone has read the max before red is reused
      if (active)
#pragma unroll 4
        for (Idx r = rs; r < cn; r += RB) {
          widen(load_vec<D, V>(p.in0, at(r)), x);
#pragma unroll
          for (int i = 0; i < V; ++i) s[i] += x[i] == eq[i] ? A(1) : tiles::ss_exp(x[i] - base[i]);
        }
#pragma unroll
      for (int i = 0; i < V; ++i) red[(rs * G + fl) * V + i] = s[i];
      tree(false);
      if (rs == 0 && active)
#pragma unroll
        for (int i = 0; i < V; ++i) part[ch * p.F + f + Idx(i)] = Stat{m[i], red[fl * V + i]};
    } else {
      A t[V], y[V];
#pragma unroll
      for (int i = 0; i < V; ++i) t[i] = A(0);
      if (active)
#pragma unroll 4
        for (Idx r = rs; r < cn; r += RB) {
          widen(load_vec<D, V>(p.in0, at(r)), x);
          widen(load_vec<D, V>(p.in1, at(r)), y);
#pragma unroll
          for (int i = 0; i < V; ++i) P::add(t[i], x[i], y[i]);
        }
#pragma unroll
      for (int i = 0; i < V; ++i) red[(rs * G + fl) * V + i] = t[i];
      tree(false);
      if (rs == 0 && active)
#pragma unroll
        for (int i = 0; i < V; ++i) part[ch * p.F + f + Idx(i)] = red[fl * V + i];
    }
    __syncthreads();  // red is reused by the next item
  }
}

// Per (entry, group of fin_lanes features): the entry's chunk partials combined in
// chunk order: thread (j, fi) folds chunks j, j + sub, ... in order, then a fixed
// tree over j. Logsumexp: the output; else fin[entry].
template <SsKind K, class D, class Idx>
__global__ void __launch_bounds__(detail::kSrBlock) long_final(RParams<Idx> p) {
  using A = dacc_t<D>;
  using P = tiles::Pol<K, A>;
  using Stat = typename P::Stat;
  __shared__ Stat red[detail::kSrBlock];
  int64_t ne, nc;
  long_count(p.counter, ne, nc);
  const int tid = int(threadIdx.x), FB = p.fin_lanes, sub = int(blockDim.x) / FB, j0 = tid / FB, fi = tid - j0 * FB;
  const Idx fgroups = (p.F + Idx(FB) - 1) / Idx(FB);
  const Idx items = Idx(ne) * fgroups;
  const Stat* part = static_cast<const Stat*>(p.part);
  for (Idx w = Idx(blockIdx.x); w < items; w += Idx(gridDim.x)) {
    const Idx e = w / fgroups, fg = w - e * fgroups;
    const Idx f = fg * Idx(FB) + Idx(fi);
    const Idx nch = ops::sr::chunks_of(p.ent_n[e], p.chunk_rows), base = p.ent_base[e];
    Stat acc = P::identity();
    if (f < p.F)
#pragma unroll 8
      for (Idx j = j0; j < nch; j += Idx(sub)) acc = P::combine(acc, part[(base + j) * p.F + f]);
    red[tid] = acc;
    for (int s = sub / 2; s > 0; s >>= 1) {
      __syncthreads();
      if (j0 < s) red[tid] = P::combine(red[tid], red[tid + s * FB]);
    }
    __syncthreads();
    if (j0 == 0 && f < p.F) {
      if constexpr (K == SsKind::LseFwd) {
        Idx o;
        if (tiles::real_segment(p.ent_v[e], p.q.S, p.q.U, o))
          static_cast<D*>(p.out)[o * p.F + f] = cuda::st<D>(P::lse(red[tid]));
      } else {
        static_cast<Stat*>(p.fin)[e * p.F + f] = red[tid];
      }
    }
    __syncthreads();
  }
}

// The rows of long entries: block per (chunk, slab), from fin (or, logsumexp
// backward, from g and y of the segment); zeros for ghosts.
template <SsKind K, class D, class Idx, int V>
__global__ void __launch_bounds__(detail::kSrBlock) long_write(RParams<Idx> p) {
  using A = dacc_t<D>;
  using P = tiles::Pol<K, A>;
  using Stat = typename P::Stat;
  using Prep = typename P::Prep;
  int64_t ne, nc;
  long_count(p.counter, ne, nc);
  const Idx items = Idx(nc) * p.slabs;
  const int tid = int(threadIdx.x), G = p.lanes, RB = int(blockDim.x) / G, rs = tid / G, fl = tid - rs * G;
  for (Idx w = Idx(blockIdx.x); w < items; w += Idx(gridDim.x)) {
    const Idx ch = w / p.slabs, sl = w - ch * p.slabs;
    const ops::sr::Chunk<Idx> k = ops::sr::chunk_of(p.ent_base, p.ent_a, p.ent_n, Idx(ne), ch, p.chunk_rows);
    const Idx e = k.e, r0 = k.r0, cn = k.cn;
    const Idx f = sl * p.width + Idx(fl * V);
    if (f >= p.F) continue;
    Idx o = 0;
    const bool real = tiles::real_segment(p.ent_v[e], p.q.S, p.q.U, o);
    Prep pr[V];
#pragma unroll
    for (int i = 0; i < V; ++i) {
      if constexpr (K == SsKind::LseBwd) {
        pr[i] = Prep{A(0), A(0)};
        if (real) {
          pr[i].a = cuda::ld(static_cast<const D*>(p.seg0)[o * p.F + f + Idx(i)]);
          pr[i].b = cuda::ld(static_cast<const D*>(p.seg1)[o * p.F + f + Idx(i)]);
        }
      } else {
        pr[i] = P::prep(static_cast<const Stat*>(p.fin)[e * p.F + f + Idx(i)]);
      }
    }
    A v0[V], v1[V], r[V];
#pragma unroll
    for (int i = 0; i < V; ++i) v1[i] = A(0);
#pragma unroll 4
    for (Idx rr = rs; rr < cn; rr += RB) {
      const int64_t at = int64_t((r0 + rr) * p.F + f);
      widen(load_vec<D, V>(p.in0, at), v0);
      if constexpr (P::kArrays == 2) widen(load_vec<D, V>(p.in1, at), v1);
#pragma unroll
      for (int i = 0; i < V; ++i) r[i] = row_out<K, A>(real, v0[i], v1[i], pr[i]);
      store_vec<D, V>(p.out, at, r);
    }
  }
}

// ---------------------------------------------------------------- launch

// Resident blocks of `k` at `block` threads on the current device (SMs x occupancy),
// cached per (kernel, block, device).
template <class Kernel>
int64_t resident_blocks(Kernel k, int block) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, int>, int64_t> cache;
  int dev = 0;
  SEGRED_CUDA_CHECK(cudaGetDevice(&dev), "segment_softmax: cudaGetDevice");
  const auto key = std::make_tuple(reinterpret_cast<const void*>(k), block, dev);
  std::lock_guard<std::mutex> lk(mu);
  const auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  int occ = 0, sms = 0;
  SEGRED_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k, block, 0), "segment_softmax: occupancy");
  SEGRED_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "segment_softmax: device query");
  SEGRED_CHECK(occ >= 1, DeviceError, "segment_softmax: no viable launch configuration for a long-path kernel "
               "(occupancy reports 0 resident blocks of ", block, " threads)");
  const int64_t n = int64_t(sms) * occ;
  cache[key] = n;
  return n;
}

template <SsKind K, class T, class Idx>
void run_rows(const SsArgs& a) {
  using D = typename Dev<T>::type;
  using A = dacc_t<D>;
  using P = tiles::Pol<K, A>;
  using Stat = typename P::Stat;
  constexpr int VMAX = 16 / int(sizeof(D));
  const SegmentSoftmaxProblem& pr = a.problem;
  const char* path = detail::segment_softmax_cuda_rows_path(pr.op, pr.direction, sizeof(Idx) * 8).data();
  const Segments& seg = *a.seg;
  const bool lengths = seg.lengths.has_value();
  const TensorView& m = lengths ? *seg.lengths : *seg.offsets;
  detail::SegmentSoftmaxRowsGeometry g;
  void (*kern)(RParams<Idx>) = nullptr;
  for (int b = detail::kSrBlock;; b /= 2) {
    g = detail::segment_softmax_rows_geometry(pr, a.aligned, b, lengths);
    kern = g.vec == VMAX ? rows_kernel<K, D, Idx, VMAX> : rows_kernel<K, D, Idx, 1>;
    if (ssk::block_viable(kern, b, 0)) break;
    SEGRED_CHECK(b > 32, DeviceError, a.op, ": no viable launch configuration for the rows kernel (occupancy "
                 "reports 0 resident blocks down to 32 threads)");
  }
  // Scratch: qv, scan aggregates, the long list, chunk partials, final statistics.
  const int64_t F = std::max<int64_t>(pr.inner, 1);
  const int64_t k = m.sizes.empty() ? 1 : m.sizes.back();
  const int64_t items = pr.outer * k;
  const int64_t nblk = (items + detail::kSrMetaTile - 1) / detail::kSrMetaTile;
  const int64_t nstat = P::kReduce ? g.max_chunks * F : 0, nfin = P::kDeferred ? g.max_entries * F : 0;
  Arena arena(*a.scratch, Arena::bytes<int64_t>(items) + Arena::bytes<KV>(nblk) + Arena::bytes<unsigned long long>(1) +
                              4 * Arena::bytes<Idx>(g.max_entries) + Arena::bytes<Stat>(nstat) +
                              Arena::bytes<Stat>(nfin));
  QScanArgs qa;
  SEGRED_CHECK(int(m.sizes.size()) >= 1 && int(m.sizes.size()) <= kMetaDims, ValueError, a.op, ": ",
               lengths ? "lengths" : "offsets", " has ", m.sizes.size(), " dims; the CUDA backend supports 1 to ",
               kMetaDims);
  qa.m.p = m.data;
  qa.m.i32 = m.dtype == DType::Int32;
  qa.m.nd = int(m.sizes.size());
  for (int d = 0; d < qa.m.nd; ++d) {
    qa.m.sizes[d] = m.sizes[size_t(d)];
    qa.m.strides[d] = m.strides[size_t(d)];
  }
  qa.items = items;
  qa.k = std::max<int64_t>(k, 1);
  qa.L = pr.axis_len;
  qa.lengths = lengths;
  qa.qv = arena.take<int64_t>(items);
  qa.agg = arena.take<KV>(nblk);
  RParams<Idx> p;
  p.in0 = a.in0;
  p.in1 = a.in1;
  p.seg0 = a.seg0;
  p.seg1 = a.seg1;
  p.out = a.out;
  p.q.qv = qa.qv;
  p.q.S = Idx(pr.num_segments);
  p.q.L = Idx(pr.axis_len);
  p.q.outer = Idx(pr.outer);
  p.q.U = Idx(g.segs);
  p.q.lengths = lengths;
  p.F = Idx(F);
  p.width = Idx(g.width);
  p.slabs = Idx(g.slabs);
  p.long_rows = Idx(g.long_rows);
  p.chunk_rows = Idx(g.chunk_rows);
  p.lanes = g.lanes;
  p.rows = g.rows;
  p.group = g.group;
  int fb = 1;
  while (fb < 32 && fb < F) fb *= 2;
  p.fin_lanes = fb;
  p.counter = arena.take<unsigned long long>(1);
  p.ent_v = arena.take<Idx>(g.max_entries);
  p.ent_a = arena.take<Idx>(g.max_entries);
  p.ent_n = arena.take<Idx>(g.max_entries);
  p.ent_base = arena.take<Idx>(g.max_entries);
  if constexpr (P::kReduce) p.part = arena.take<Stat>(nstat);
  if constexpr (P::kDeferred) p.fin = arena.take<Stat>(nfin);
  SEGRED_CHECK(g.max_chunks < (int64_t(1) << 32) && g.max_entries < (int64_t(1) << 31), DeviceError, a.op,
               ": too many rows for the long-segment list (", g.positions, ")");
  SEGRED_CUDA_CHECK(cudaMemsetAsync(p.counter, 0, sizeof(unsigned long long), a.stream),
                    detail::cat(a.op, ": clearing the long-segment counter"));
  if (items > 0) {
    qscan_agg<<<unsigned(nblk), detail::kSrBlock, 0, a.stream>>>(qa);
    check_launch("segment_softmax qscan_agg");
    impl::record(path, nblk, detail::kSrBlock);
    qscan_write<<<unsigned(nblk), detail::kSrBlock, 0, a.stream>>>(qa);
    check_launch("segment_softmax qscan_write");
    impl::record(path, nblk, detail::kSrBlock);
  }
  kern<<<unsigned(g.grid), g.block, 0, a.stream>>>(p);
  check_launch("segment_softmax rows_kernel");
  impl::record(path, g.grid, g.block);
  // The long path: persistent grids, as many blocks as are resident (at most the
  // work there can be); each reads the list's counts on the device.
  const int64_t max_items = g.max_chunks * g.slabs;
  auto persistent = [&](auto kernel, int64_t most, const char* name) {
    const int64_t nb = std::max<int64_t>(1, std::min<int64_t>(most, resident_blocks(kernel, detail::kSrBlock)));
    kernel<<<unsigned(nb), detail::kSrBlock, 0, a.stream>>>(p);
    check_launch(name);
    impl::record(path, nb, detail::kSrBlock);
  };
  if constexpr (P::kReduce) {
    persistent(g.vec == VMAX ? long_stats<K, D, Idx, VMAX> : long_stats<K, D, Idx, 1>, max_items,
               "segment_softmax long_stats");
    persistent(long_final<K, D, Idx>, g.max_entries * ((F + fb - 1) / fb), "segment_softmax long_final");
  }
  if constexpr (P::kRowOut && K != SsKind::LseFwd) {
    persistent(g.vec == VMAX ? long_write<K, D, Idx, VMAX> : long_write<K, D, Idx, 1>, max_items,
               "segment_softmax long_write");
  }
}

}  // namespace segred::cuda::ssr
