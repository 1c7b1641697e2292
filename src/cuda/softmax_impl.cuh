// CUDA kernels of the dense softmax family (shared/SEMANTICS.md, "softmax family").
//
// Versions (the work split is src/core/softmax_geometry.h; every kernel exists for
// fwd/bwd x softmax/log_softmax x int32/int64 indices x 16-byte/scalar loads):
//   warp_kernel     lastdim_warp:  inner == 1, D <= 32*EV. A group of `lanes`
//                   lanes per row; the row in registers; xor shuffles.
//   block_kernel    lastdim_block: inner == 1, longer rows. A block (or a cluster
//                   of blocks, partials exchanged through distributed shared
//                   memory) per row; resident when the row fits the registers,
//                   else online passes plus a re-read.
//   spatial_kernel  spatial: inner > 1. A [ty x tx] block owns tx*V consecutive
//                   columns; loads run along inner; ty threads (and a cluster)
//                   split D; the column tile is resident when it fits.
//
// The math, per row (a "row" is one (outer, inner) column of D values), with the
// building blocks of src/ops/softmax_ops.h (shared with the CPU kernels):
//   forward, resident: one reduction of (max, sum) pairs. Each thread takes its
//     own max mt (NaN wins) and e = exp(x - sum_base(mt)), kept in registers, and
//     s = sum e; the pairs merge (MSOp) to the row's (M, S); k is NaN unless M is
//     finite (the NaN rule: all -inf, any NaN or +inf -> NaN row), else softmax
//     y = e * (exp(mt - M) / S), log_softmax y = (x - M) - log S. One exp per
//     element; v2 reduced the max and then the sum (two dependent block-wide
//     reductions per row, the forward's main cost at 28-86% of copy).
//   forward, streaming: per chunk cm = max(m, chunk max), s = s*exp(m - cm) +
//     sum exp(x - sum_base(cm)); partial (m, s) pairs merge with the same rule
//     across threads, blocks and cluster ranks; then a second read writes
//     apply(x, row_base(m), k).
//   backward (fused, no g*y temporary): acc = sum term(g, y) (g*y or g), then
//     gI = apply(g, y, acc): softmax y*(g - acc), log_softmax g - exp(y)*acc.
// Accumulation: float for float/half/bfloat16, double for double. Reductions run
// in a fixed order (butterflies, then lane 0's value broadcast, then warp/group
// partials in index order, then cluster ranks in order): results depend only on
// the shape and the geometry, never on timing.
//
// Index type I: row/tile counters, in-row and in-slab offsets, loop counters.
// Row and column bases are int64 in both variants (the geometry's bound covers
// every I value the kernel forms).
#pragma once
#include <cooperative_groups.h>

#include <cstdint>
#include <limits>
#include <type_traits>

#include "src/core/softmax_kind.h"
#include "src/cuda/common.cuh"
#include "src/ops/softmax_ops.h"

namespace segred::cuda::sm {

namespace cg = cooperative_groups;

struct Args {
  const void* a = nullptr;  // fwd: x; bwd: grad
  const void* b = nullptr;  // bwd: output (y)
  void* out = nullptr;
  int64_t outer = 1, D = 1, inner = 1;
  int lanes = 1, tx = 32, ty = 1, cluster = 1;
  int64_t chunks = 1, work = 0;
};

using KernelFn = void (*)(Args);

template <class T, int V> struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

template <class A> struct MS {
  A m, s;
};

struct SumOp {
  template <class A> __device__ __forceinline__ A operator()(A a, A b) const { return a + b; }
};
// exp in the accumulation type: float as exp2f(x * log2 e) (MUFU.EX2 plus the
// subnormal fix-up: about 3 instructions against expf's 7; the rounding of the
// product adds |x| * 2^-24 relative error, 1.2e-6 at x - m = -20, inside the
// float32 tolerance); double as exp.
__device__ __forceinline__ float dexp(float x) { return exp2f(x * 1.4426950408889634f); }
__device__ __forceinline__ double dexp(double x) { return ::exp(x); }

// Merge of two (max, sum of exp against that max) pairs: one exp, of the smaller
// max against the merged one; the larger side keeps its sum unscaled (factor 1
// exactly). Against sum_base(m), so two all -inf parts (m = -inf, s = 0) merge to
// (-inf, 0) and not to NaN. When m is NaN or +inf, s may be NaN: every epilogue
// turns such a row into NaN from m alone (the NaN rule), whatever s is.
struct MSOp {
  template <class A> __device__ __forceinline__ MS<A> operator()(MS<A> a, MS<A> b) const {
    const A m = ops::MaxTag::combine(a.m, b.m);
    const bool a_hi = a.m >= b.m;
    const A hs = a_hi ? a.s : b.s, ls = a_hi ? b.s : a.s, lm = a_hi ? b.m : a.m;
    return {m, hs + ls * dexp(lm - ops::sum_base(m))};
  }
};

template <class A> __device__ __forceinline__ A shfl_xor(A v, int off) { return __shfl_xor_sync(0xffffffffu, v, off); }
template <class A> __device__ __forceinline__ MS<A> shfl_xor(MS<A> v, int off) {
  return {__shfl_xor_sync(0xffffffffu, v.m, off), __shfl_xor_sync(0xffffffffu, v.s, off)};
}
template <class A> __device__ __forceinline__ A shfl(A v, int src) { return __shfl_sync(0xffffffffu, v, src); }
template <class A> __device__ __forceinline__ MS<A> shfl(MS<A> v, int src) {
  return {__shfl_sync(0xffffffffu, v.m, src), __shfl_sync(0xffffffffu, v.s, src)};
}

// Combine a value across the C blocks of this block's cluster, rank order.
// `slot` is this block's shared-memory slot (same offset in every block); the
// caller has written the block's total into it.
// Combine `slot` across the C <= 16 blocks of this block's cluster, in rank
// order; called by one thread per value (not by every thread: remote loads are
// slow, and C x threads of them made the cluster paths 8x slower in v1).
template <class R, class Op>
__device__ __forceinline__ R cluster_gather(const R* slot, int C, Op op) {
  cg::cluster_group cl = cg::this_cluster();
  R* p = const_cast<R*>(slot);
  R t = *cl.map_shared_rank(p, 0);
#pragma unroll 4
  for (int r = 1; r < C; ++r) t = op(t, *cl.map_shared_rank(p, r));  // loads independent: unrolled, in flight together
  return t;
}

// ---------------------------------------------------------------- row bodies

// A context gives: NS (stat slots per thread: 1, or V columns for spatial), EV,
// load(which, chunk, v, pad), store(chunk, v), reduce<R, Op>(R (&)[NS]), chunks.
template <bool Log, class A, class Cx>
__device__ __forceinline__ void fwd_body(Cx& cx) {
  constexpr int EV = Cx::EV, NS = Cx::NS;
  using I = typename Cx::Index;
  const A ninf = ops::neg_inf<A>();
  const A nan = std::numeric_limits<A>::quiet_NaN();
  A v[EV];
  A kk[NS], rb[NS];
  MS<A> st[NS];
  if (cx.chunks == 1) {
    // One reduction per row, of (max, sum) pairs: each thread takes exp against
    // its own max mt (per slot), the pairs merge to the row's (M, S), and the
    // write rescales by exp(mt - M): softmax y = e * (exp(mt - M) / S), log_softmax
    // y = (x - M) - log S. Still one exp per element (plus one per slot).
    cx.load(0, I(0), v, ninf);
    A mt[NS];
#pragma unroll
    for (int i = 0; i < NS; ++i) mt[i] = ninf;
#pragma unroll
    for (int k = 0; k < EV; ++k) mt[k % NS] = ops::MaxTag::combine(mt[k % NS], v[k]);
    A sb[NS];
#pragma unroll
    for (int i = 0; i < NS; ++i) {
      sb[i] = ops::sum_base(mt[i]);  // all -inf (or padding): exp(-inf - 0) = 0
      st[i] = {mt[i], A(0)};
    }
#pragma unroll
    for (int k = 0; k < EV; ++k) {
      const A e = dexp(v[k] - sb[k % NS]);
      st[k % NS].s += e;
      if constexpr (!Log) v[k] = e;
    }
    cx.template reduce<MS<A>>(st, MSOp{});
#pragma unroll
    for (int i = 0; i < NS; ++i) {
      // The NaN rule from M alone: NaN unless the row's max is finite. With M
      // finite, mt <= M, so the factor is in [0, 1] (0 for an all -inf slot) and
      // S >= 1 (the max's own term is exp(0) = 1, never rescaled).
      const bool finite = (st[i].m - st[i].m == A(0));
      kk[i] = finite ? (Log ? ops::log_acc(st[i].s) : dexp(mt[i] - st[i].m) / st[i].s) : nan;
      rb[i] = st[i].m;
    }
#pragma unroll
    for (int k = 0; k < EV; ++k) v[k] = Log ? (v[k] - rb[k % NS]) - kk[k % NS] : v[k] * kk[k % NS];
    cx.store(I(0), v);
    return;
  }
#pragma unroll
  for (int i = 0; i < NS; ++i) st[i] = {ninf, A(0)};
  for (I c = 0; c < I(cx.chunks); ++c) {
    cx.load(0, c, v, ninf);
    A cm[NS];
#pragma unroll
    for (int i = 0; i < NS; ++i) cm[i] = st[i].m;
#pragma unroll
    for (int k = 0; k < EV; ++k) cm[k % NS] = ops::MaxTag::combine(cm[k % NS], v[k]);
    A sb[NS];
#pragma unroll
    for (int i = 0; i < NS; ++i) {
      st[i].s *= ops::rescale(st[i].m, cm[i]);
      st[i].m = cm[i];
      sb[i] = ops::sum_base(cm[i]);
    }
#pragma unroll
    for (int k = 0; k < EV; ++k) st[k % NS].s += dexp(v[k] - sb[k % NS]);
  }
  cx.template reduce<MS<A>>(st, MSOp{});
#pragma unroll
  for (int i = 0; i < NS; ++i) {
    const bool finite = (st[i].m - st[i].m == A(0));
    kk[i] = finite ? (Log ? ops::log_acc(st[i].s) : A(1) / st[i].s) : nan;
    rb[i] = finite ? st[i].m : nan;
  }
  for (I c = 0; c < I(cx.chunks); ++c) {
    cx.load(0, c, v, A(0));
#pragma unroll
    for (int k = 0; k < EV; ++k)
      v[k] = Log ? (v[k] - rb[k % NS]) - kk[k % NS] : dexp(v[k] - rb[k % NS]) * kk[k % NS];
    cx.store(c, v);
  }
}

template <bool Log, class A, class Cx>
__device__ __forceinline__ void bwd_body(Cx& cx) {
  constexpr int EV = Cx::EV, NS = Cx::NS;
  using I = typename Cx::Index;
  using Epi = std::conditional_t<Log, ops::LogSoftmaxBwd, ops::SoftmaxBwd>;
  A g[EV], y[EV], acc[NS];
#pragma unroll
  for (int i = 0; i < NS; ++i) acc[i] = A(0);
  if (cx.chunks == 1) {
    cx.load(0, I(0), g, A(0));
    cx.load(1, I(0), y, A(0));
#pragma unroll
    for (int k = 0; k < EV; ++k) acc[k % NS] += Epi::term(g[k], y[k]);
    cx.template reduce<A>(acc, SumOp{});
#pragma unroll
    for (int k = 0; k < EV; ++k) g[k] = Epi::apply(g[k], y[k], acc[k % NS]);
    cx.store(I(0), g);
    return;
  }
  for (I c = 0; c < I(cx.chunks); ++c) {
    cx.load(0, c, g, A(0));
    if constexpr (!Log) cx.load(1, c, y, A(0));
#pragma unroll
    for (int k = 0; k < EV; ++k) acc[k % NS] += Log ? g[k] : g[k] * y[k];
  }
  cx.template reduce<A>(acc, SumOp{});
  for (I c = 0; c < I(cx.chunks); ++c) {
    cx.load(0, c, g, A(0));
    cx.load(1, c, y, A(0));
#pragma unroll
    for (int k = 0; k < EV; ++k) g[k] = Epi::apply(g[k], y[k], acc[k % NS]);
    cx.store(c, g);
  }
}

// ---------------------------------------------------------------- contexts

template <class T> constexpr int kEV = sizeof(T) == 8 ? 8 : 16;

// lastdim_warp: lanes [0, L) of a group hold vectors lane, lane + L, ... of the row.
template <class T, class I, int V>
struct WarpCx {
  using Index = I;
  using A = dacc_t<T>;
  static constexpr int EV = kEV<T>, NS = 1, NV = EV / V;
  const T* a;
  const T* b;
  T* out;
  I D;
  int lanes, lane;
  bool active;
  int64_t chunks = 1;
  __device__ __forceinline__ void load(int which, I c, A (&v)[EV], A pad) const {
    const Vec<T, V>* p = reinterpret_cast<const Vec<T, V>*>(which ? b : a);
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      const I vi = (c * I(NV) + I(j)) * I(lanes) + I(lane);
      if (active && vi * I(V) < D) {
        const Vec<T, V> w = p[vi];
#pragma unroll
        for (int i = 0; i < V; ++i) v[j * V + i] = ld(w.v[i]);
      } else {
#pragma unroll
        for (int i = 0; i < V; ++i) v[j * V + i] = pad;
      }
    }
  }
  __device__ __forceinline__ void store(I c, const A (&v)[EV]) const {
    Vec<T, V>* p = reinterpret_cast<Vec<T, V>*>(out);
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      const I vi = (c * I(NV) + I(j)) * I(lanes) + I(lane);
      if (active && vi * I(V) < D) {
        Vec<T, V> w;
#pragma unroll
        for (int i = 0; i < V; ++i) w.v[i] = st<T>(v[j * V + i]);
        p[vi] = w;
      }
    }
  }
  template <class R, class Op> __device__ __forceinline__ void reduce(R (&x)[1], Op op) const {
    R t = x[0];
    for (int off = lanes / 2; off >= 1; off /= 2) t = op(t, shfl_xor(t, off));
    x[0] = shfl(t, int(threadIdx.x % 32) / lanes * lanes);  // the group's first lane
  }
};

template <class T, class I, bool Fwd, bool Log, int V>
__global__ void __launch_bounds__(256) warp_kernel(Args args) {
  using A = dacc_t<T>;
  const int lanes = args.lanes;
  const I rows = I(args.outer);
  const I per_block = I(blockDim.x / lanes);
  const I group = I(threadIdx.x / lanes);
  const int lane = int(threadIdx.x % lanes);
  const int64_t D = args.D;
  for (I r0 = I(blockIdx.x) * per_block; r0 < rows; r0 += I(gridDim.x) * per_block) {
    const I row = r0 + group;
    const bool active = row < rows;
    const int64_t base = active ? int64_t(row) * D : 0;  // row base: 64-bit
    WarpCx<T, I, V> cx{static_cast<const T*>(args.a) + base,
                       Fwd ? nullptr : static_cast<const T*>(args.b) + base,
                       static_cast<T*>(args.out) + base,
                       I(D),
                       lanes,
                       lane,
                       active};
    if constexpr (Fwd) fwd_body<Log, A>(cx);
    else bwd_body<Log, A>(cx);
  }
}

// Shared memory of the block and spatial kernels, aligned for double pairs.
__device__ __forceinline__ unsigned char* dyn_smem() {
  extern __shared__ __align__(16) unsigned char segred_softmax_smem[];
  return segred_softmax_smem;
}

// lastdim_block: thread t of cluster rank r holds vectors
// ((c*C + r)*NV + j)*B + t of the row, j < NV, chunk c.
template <class T, class I, int V>
struct BlockCx {
  using Index = I;
  using A = dacc_t<T>;
  static constexpr int EV = kEV<T>, NS = 1, NV = EV / V;
  const T* a;
  const T* b;
  T* out;
  I D;
  int B, t, C, rank;
  int64_t chunks;
  __device__ __forceinline__ I vidx(I c, int j) const { return ((c * I(C) + I(rank)) * I(NV) + I(j)) * I(B) + I(t); }
  __device__ __forceinline__ void load(int which, I c, A (&v)[EV], A pad) const {
    const Vec<T, V>* p = reinterpret_cast<const Vec<T, V>*>(which ? b : a);
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      const I vi = vidx(c, j);
      if (vi * I(V) < D) {
        const Vec<T, V> w = p[vi];
#pragma unroll
        for (int i = 0; i < V; ++i) v[j * V + i] = ld(w.v[i]);
      } else {
#pragma unroll
        for (int i = 0; i < V; ++i) v[j * V + i] = pad;
      }
    }
  }
  __device__ __forceinline__ void store(I c, const A (&v)[EV]) const {
    Vec<T, V>* p = reinterpret_cast<Vec<T, V>*>(out);
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      const I vi = vidx(c, j);
      if (vi * I(V) < D) {
        Vec<T, V> w;
#pragma unroll
        for (int i = 0; i < V; ++i) w.v[i] = st<T>(v[j * V + i]);
        p[vi] = w;
      }
    }
  }
  template <class R, class Op> __device__ __forceinline__ void reduce(R (&x)[1], Op op) const {
    R* wp = reinterpret_cast<R*>(dyn_smem());  // [32] warp partials, then [1] block total
    R tot = x[0];
    for (int off = 16; off >= 1; off /= 2) tot = op(tot, shfl_xor(tot, off));
    const int nw = B / 32;
    if (t % 32 == 0) wp[t / 32] = tot;
    __syncthreads();
    tot = wp[0];
    for (int w = 1; w < nw; ++w) tot = op(tot, wp[w]);
    if (C > 1) {
      // wp[32]: this block's total; wp[33]: the cluster's. The first cluster
      // barrier publishes the totals (and orders the wp reads above before any
      // rewrite); the second keeps each slot alive until every rank has read it.
      cg::cluster_group cl = cg::this_cluster();
      if (t == 0) wp[32] = tot;
      cl.sync();
      if (t == 0) wp[33] = cluster_gather(wp + 32, C, op);
      cl.sync();
      tot = wp[33];
    } else {
      __syncthreads();
    }
    x[0] = tot;
  }
};

template <class T, class I, bool Fwd, bool Log, int V>
__global__ void __launch_bounds__(1024) block_kernel(Args args) {
  using A = dacc_t<T>;
  const int C = args.cluster;
  const int rank = int(blockIdx.x % unsigned(C));
  const I rows = I(args.outer);
  const int64_t D = args.D;
  for (I row = I(blockIdx.x / unsigned(C)); row < rows; row += I(gridDim.x / unsigned(C))) {
    const int64_t base = int64_t(row) * D;  // row base: 64-bit
    BlockCx<T, I, V> cx{static_cast<const T*>(args.a) + base,
                        Fwd ? nullptr : static_cast<const T*>(args.b) + base,
                        static_cast<T*>(args.out) + base,
                        I(D),
                        int(blockDim.x),
                        int(threadIdx.x),
                        C,
                        rank,
                        args.chunks};
    if constexpr (Fwd) fwd_body<Log, A>(cx);
    else bwd_body<Log, A>(cx);
  }
}

// spatial: thread (ty_i, tx_i) holds V consecutive columns starting at the
// tile's column tx_i*V and rows d = ty_i + TY*((c*C + r)*E + j), j < E.
template <class T, class I, int V>
struct SpatialCx {
  using Index = I;
  using A = dacc_t<T>;
  static constexpr int EV = kEV<T>, NS = V, E = EV / V;
  const T* a;
  const T* b;
  T* out;
  I D, inner;
  int TX, TY, txi, tyi, C, rank;
  bool active;
  int64_t chunks;
  __device__ __forceinline__ I row(I c, int j) const { return I(tyi) + I(TY) * ((c * I(C) + I(rank)) * I(E) + I(j)); }
  __device__ __forceinline__ void load(int which, I c, A (&v)[EV], A pad) const {
    const T* p = which ? b : a;
#pragma unroll
    for (int j = 0; j < E; ++j) {
      const I d = row(c, j);
      if (active && d < D) {
        const Vec<T, V> w = *reinterpret_cast<const Vec<T, V>*>(p + d * inner);
#pragma unroll
        for (int i = 0; i < V; ++i) v[j * V + i] = ld(w.v[i]);
      } else {
#pragma unroll
        for (int i = 0; i < V; ++i) v[j * V + i] = pad;
      }
    }
  }
  __device__ __forceinline__ void store(I c, const A (&v)[EV]) const {
#pragma unroll
    for (int j = 0; j < E; ++j) {
      const I d = row(c, j);
      if (active && d < D) {
        Vec<T, V> w;
#pragma unroll
        for (int i = 0; i < V; ++i) w.v[i] = st<T>(v[j * V + i]);
        *reinterpret_cast<Vec<T, V>*>(out + d * inner) = w;
      }
    }
  }
  // Per column: butterfly over the ty values inside a warp, then the warps'
  // (or ty rows') partials in shared memory in order, then the cluster ranks.
  template <class R, class Op> __device__ __forceinline__ void reduce(R (&x)[V], Op op) const {
    const int lin = tyi * TX + txi;
    const int lane = lin % 32;
    const int cols = TX * V;
    if (TX < 32) {
#pragma unroll
      for (int i = 0; i < V; ++i) {
        R t = x[i];
        for (int off = TX; off < 32; off *= 2) t = op(t, shfl_xor(t, off));
        x[i] = shfl(t, lane % TX);
      }
    }
    const int G = TX < 32 ? TX * TY / 32 : TY;
    // [G][cols] partials, [cols] block totals, [cols] cluster totals; column
    // txi*V + i of the tile lives at i*TX + txi, so a warp's lanes touch
    // consecutive words (v1's txi*V + i was an 8-way bank conflict at V = 8).
    R* sm = reinterpret_cast<R*>(dyn_smem());
    R* fin = sm + G * cols;
    R* comb = fin + cols;
    if (G > 1) {
      const int gid = TX < 32 ? lin / 32 : tyi;
      if (TX >= 32 || lane < TX) {
#pragma unroll
        for (int i = 0; i < V; ++i) sm[gid * cols + i * TX + txi] = x[i];
      }
      __syncthreads();
      for (int q = lin; q < cols; q += TX * TY) {
        R t = sm[q];
#pragma unroll 8
        for (int g = 1; g < G; ++g) t = op(t, sm[g * cols + q]);
        fin[q] = t;
      }
      __syncthreads();
      if (C == 1) {
#pragma unroll
        for (int i = 0; i < V; ++i) x[i] = fin[i * TX + txi];
        __syncthreads();  // fin is read before the next reduction rewrites it
        return;
      }
    } else if (C > 1) {
      if (tyi == 0) {
#pragma unroll
        for (int i = 0; i < V; ++i) fin[i * TX + txi] = x[i];
      }
    } else {
      return;  // one thread row per column: the butterfly was the whole reduction
    }
    // Cluster: one thread per column gathers the C block totals (rank order).
    cg::cluster_group cl = cg::this_cluster();
    cl.sync();
    for (int q = lin; q < cols; q += TX * TY) comb[q] = cluster_gather(fin + q, C, op);
    cl.sync();
#pragma unroll
    for (int i = 0; i < V; ++i) x[i] = comb[i * TX + txi];
  }
};

template <class T, class I, bool Fwd, bool Log, int V>
__global__ void __launch_bounds__(512, 2) spatial_kernel(Args args) {
  using A = dacc_t<T>;
  const int C = args.cluster;
  const int rank = int(blockIdx.x % unsigned(C));
  const int TX = args.tx, TY = args.ty;
  const int txi = int(threadIdx.x) % TX, tyi = int(threadIdx.x) / TX;
  const I inner = I(args.inner);
  const I ncols = I(args.outer) * inner;
  const I tiles = I(args.work);
  const int64_t slab = args.D * args.inner;
  for (I tile = I(blockIdx.x / unsigned(C)); tile < tiles; tile += I(gridDim.x / unsigned(C))) {
    const I col = tile * I(TX * V) + I(txi * V);
    const bool active = col < ncols;
    int64_t base = 0;  // column base: 64-bit
    if (active) {
      const I o = col / inner;
      base = int64_t(o) * slab + int64_t(col - o * inner);
    }
    SpatialCx<T, I, V> cx{static_cast<const T*>(args.a) + base,
                          Fwd ? nullptr : static_cast<const T*>(args.b) + base,
                          static_cast<T*>(args.out) + base,
                          I(args.D),
                          inner,
                          TX,
                          TY,
                          txi,
                          tyi,
                          C,
                          rank,
                          active,
                          args.chunks};
    if constexpr (Fwd) fwd_body<Log, A>(cx);
    else bwd_body<Log, A>(cx);
  }
}

// The kernel for (T, I, direction, log, geometry kind, vector width).
// Vector widths: detail::softmax_vec_elems (the geometry's, so plan and kernel agree).
template <class T, class I, bool Fwd, bool Log>
KernelFn pick_kernel(detail::SoftmaxKernel k, int vec) {
  constexpr int V = detail::softmax_vec_elems(detail::SoftmaxKernel::Warp, int(sizeof(T)));
  constexpr int VS = detail::softmax_vec_elems(detail::SoftmaxKernel::Spatial, int(sizeof(T)));
  const bool v = vec != 1;
  switch (k) {
    case detail::SoftmaxKernel::Warp:
      return v ? warp_kernel<T, I, Fwd, Log, V> : warp_kernel<T, I, Fwd, Log, 1>;
    case detail::SoftmaxKernel::Block:
      return v ? block_kernel<T, I, Fwd, Log, V> : block_kernel<T, I, Fwd, Log, 1>;
    default:
      return v ? spatial_kernel<T, I, Fwd, Log, VS> : spatial_kernel<T, I, Fwd, Log, 1>;
  }
}

// Per (direction, dtype) translation units (softmax_{fwd,bwd}_<dtype>.cu).
#define SEGRED_SOFTMAX_PICK_DECL(dir, tag) \
  KernelFn pick_##dir##_##tag(bool log, bool i64, detail::SoftmaxKernel k, int vec);
SEGRED_SOFTMAX_PICK_DECL(fwd, f32)
SEGRED_SOFTMAX_PICK_DECL(fwd, f64)
SEGRED_SOFTMAX_PICK_DECL(fwd, f16)
SEGRED_SOFTMAX_PICK_DECL(fwd, bf16)
SEGRED_SOFTMAX_PICK_DECL(bwd, f32)
SEGRED_SOFTMAX_PICK_DECL(bwd, f64)
SEGRED_SOFTMAX_PICK_DECL(bwd, f16)
SEGRED_SOFTMAX_PICK_DECL(bwd, bf16)
#undef SEGRED_SOFTMAX_PICK_DECL

#define SEGRED_SOFTMAX_PICK_DEF(dir, tag, T, FWD)                                                      \
  KernelFn pick_##dir##_##tag(bool log, bool i64, detail::SoftmaxKernel k, int vec) {                 \
    if (log) return i64 ? pick_kernel<T, int64_t, FWD, true>(k, vec) : pick_kernel<T, int32_t, FWD, true>(k, vec); \
    return i64 ? pick_kernel<T, int64_t, FWD, false>(k, vec) : pick_kernel<T, int32_t, FWD, false>(k, vec);       \
  }

}  // namespace segred::cuda::sm
