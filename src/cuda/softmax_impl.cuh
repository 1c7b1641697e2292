// CUDA kernels of the dense softmax family (shared/SEMANTICS.md, "softmax family").
//
// Versions (the work split is src/core/softmax_geometry.h; every kernel exists for
// fwd/bwd x softmax/log_softmax x int32/int64 indices x 16-byte/scalar loads x EV,
// the elements per thread per array: detail::softmax_elems_per_thread of the kernel
// kind, dtype, direction and vector width, and (v5) the short-row EV
// detail::softmax_short_elems_per_thread (warp 16, spatial E = 4), both shared with
// the geometry, which picks one; pick_kernel below instantiates exactly these):
//   warp_kernel     lastdim_warp:  inner == 1, D <= 32*EV. A group of `lanes`
//                   lanes per row; the row in registers; xor shuffles.
//   block_kernel    lastdim_block: inner == 1, longer rows. A block (or a cluster
//                   of blocks, partials exchanged through distributed shared
//                   memory) per row; resident when the row fits the registers,
//                   else online passes plus a re-read.
//   spatial_kernel  spatial: inner > 1. A [ty x tx] block owns tx*V consecutive
//                   columns; loads run along inner; ty threads (and a cluster)
//                   split D; the column tile is resident when it fits.
//   spatial_staged_kernel  spatial_staged (session 5; its own path since session
//                   6): inner > 1, long columns: the block's slice of the column
//                   tile staged in shared memory (cp.async), a cluster over D, no
//                   EV (detail::softmax_staged_geometry). Session 8: the 16-bit
//                   forward in staged_fwd16 (fewer instructions per element), at
//                   V = 8 (16-byte vectors, SpatialCx::reduce_rs) where the geometry
//                   takes them (detail::softmax_staged_vec_elems).
//
// The math, per row (a "row" is one (outer, inner) column of D values), with the
// building blocks of src/ops/softmax_ops.h (shared with the CPU kernels):
//   forward, resident: one reduction of (max, sum) pairs. Each thread takes its
//     own max mt (NaN wins; packed 16-bit pairs for 16-bit vectors) and
//     s = sum e, e = exp(x - sum_base(mt)); the pairs merge (MSOp) to the row's
//     (M, S); k is NaN unless M is finite (the NaN rule: all -inf, any NaN or +inf
//     -> NaN row), else softmax y = e * (exp(mt - M) / S), with e recomputed from
//     the raw x at the write (v4: the registers hold x as loaded, 2 bytes per
//     16-bit element, not e as float: twice the elements per thread, see Raw),
//     log_softmax y = (x - M) - log S. v2 reduced the max and then the sum (two
//     dependent block-wide reductions per row).
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
#include <cstring>
#include <limits>
#include <type_traits>

#include "src/core/softmax_geometry.h"
#include "src/core/softmax_kind.h"
#include "src/cuda/common.cuh"
#include "src/cuda/fast_divmod.h"
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
  int krows = 0;           // staged spatial: rows per thread
  int64_t stage_off = 0;   // staged spatial: byte offset of the staged data in shared memory
  int l2_hints = 0;        // lastdim_block, streamed rows: L2 eviction priorities (SoftmaxGeometry::l2_hints)
  int fwd16_fma = 1;       // 16-bit forward in the FFMA form (fma16_sum_base; 0: the form before session 22)
  // Session 41: the spatial kernels' set-up divides by these as a multiply-high and
  // a shift (fast_divmod.h; the 32-bit index variants only for inner, whose
  // dividends the Plan keeps below 2^31). fd_inner is invalid (d = 0) past 2^31 - 1.
  FastDivmod fd_cluster, fd_tx, fd_ty, fd_inner;
};

// n / d in the kernels' index type I: on 32-bit I through the launch-time
// constants f (every dividend of a 32-bit variant is below 2^31: the Plan's bound),
// on 64-bit I the plain division (a 64-bit variant's inner may not fit f).
template <class I> __device__ __forceinline__ I idiv(I n, I d, const FastDivmod& f) {
  if constexpr (sizeof(I) == 4) return I(f.div(int32_t(n)));
  else return n / d;
}

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
// 2^t as ex2.approx.ftz.f32 (one MUFU.EX2).
__device__ __forceinline__ float ex2_ftz(float t) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(t));
  return y;
}
// The per-element exp of the forward for T: for 16-bit T, ex2.approx.ftz (one
// MUFU.EX2 after the multiply; exp2f's subnormal fix-up is 3 more instructions per
// call, and the 16-bit forward, which takes two exps per element since v4, is
// instruction-bound: ptxas, 23 instructions per element with exp2f). The flush
// only zeroes e < 2^-126: S >= 1 does not see it, and y = e * k < 2^-126 rounds
// to 0 in float16 anyway (bfloat16 keeps subnormals down to 2^-133: there y is 0
// instead of a value below 2^-126, an absolute difference under 1.2e-38).
template <class T>
__device__ __forceinline__ dacc_t<T> dexp_elem(dacc_t<T> x) {
  if constexpr (sizeof(T) == 2) {
    return ex2_ftz(x * 1.4426950408889634f);
  } else {
    return dexp(x);
  }
}

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

// L2 eviction priorities: l2_evict_last / l2_evict_first, ld_hint / st_hint (src/cuda/common.cuh).

// Loaded data as it arrived, widened to the accumulation type where each element
// is used: 16-bit vectors as packed 32-bit words (two elements per register),
// everything else one element per register. v3 widened at the load, so a 16-bit
// thread spent 32 registers on 16 elements (32 bytes in flight) and the register
// file capped the bytes in flight per SM at half of float32's (bench/NOTES.md,
// "CUDA softmax version 4"). Packed words and a packed max, not Vec<__half, 8>
// members widened for the max: that first version took 185 registers in the warp
// kernel and spilled 216 bytes in the block kernel at EV = 64 (ptxas -v).
//
// launder(): an empty asm per register that the compiler must assume rewrites it.
// Called between the phases of a row (after the max, after the reduction) on
// 16-bit data, so the compiler recomputes the widened values (and the forward's
// exp(x - m)) from the raw words instead of carrying them across the phase in
// float registers, which would double the registers per element. The price is a
// conversion per element per phase and, in the softmax forward, a second exp.
template <class T, int V, int N, bool Packed = (sizeof(T) == 2 && V % 2 == 0)>
struct Raw {
  T e[N * V];
  __device__ __forceinline__ dacc_t<T> operator[](int k) const { return ld(e[k]); }
  __device__ __forceinline__ void load(int j, const Vec<T, V>* p) {
    const Vec<T, V> w = *p;
#pragma unroll
    for (int i = 0; i < V; ++i) e[j * V + i] = w.v[i];
  }
  // The same load with an L2 eviction policy (8- and 16-byte vectors; narrower
  // ones load without it).
  __device__ __forceinline__ void load_hint(int j, const Vec<T, V>* p, uint64_t pol) {
    if constexpr (sizeof(Vec<T, V>) == 16 || sizeof(Vec<T, V>) == 8) {
      const Vec<T, V> w = ld_hint(p, pol);
#pragma unroll
      for (int i = 0; i < V; ++i) e[j * V + i] = w.v[i];
    } else {
      load(j, p);
    }
  }
  __device__ __forceinline__ void pad(int j, T v) {
#pragma unroll
    for (int i = 0; i < V; ++i) e[j * V + i] = v;
  }
  // m[k % NS] = max(m[k % NS], element k) over every element (NaN wins).
  template <int NS> __device__ __forceinline__ void max_into(dacc_t<T> (&m)[NS]) const {
#pragma unroll
    for (int k = 0; k < N * V; ++k) m[k % NS] = ops::MaxTag::combine(m[k % NS], ld(e[k]));
  }
  __device__ __forceinline__ void launder() {
    if constexpr (sizeof(T) == 2) {
#pragma unroll
      for (int k = 0; k < N * V; ++k) {
        unsigned short u;
        memcpy(&u, &e[k], sizeof(u));
        asm volatile("" : "+h"(u));
        memcpy(&e[k], &u, sizeof(u));
      }
    }
  }
};

__device__ __forceinline__ float widen(const __half*, uint32_t w, bool hi) {
  __half2 h;
  memcpy(&h, &w, sizeof(h));
  return hi ? __high2float(h) : __low2float(h);
}
__device__ __forceinline__ float widen(const __nv_bfloat16*, uint32_t w, bool hi) {
  return __uint_as_float(hi ? (w & 0xffff0000u) : (w << 16));  // = __bfloat162float, exactly
}
// Packed max of two words of 16-bit pairs, NaN propagating (exact: no rounding).
__device__ __forceinline__ uint32_t pmax(const __half*, uint32_t a, uint32_t b) {
  __half2 x, y;
  memcpy(&x, &a, 4);
  memcpy(&y, &b, 4);
  const __half2 r = __hmax2_nan(x, y);
  uint32_t o;
  memcpy(&o, &r, 4);
  return o;
}
__device__ __forceinline__ uint32_t pmax(const __nv_bfloat16*, uint32_t a, uint32_t b) {
  __nv_bfloat162 x, y;
  memcpy(&x, &a, 4);
  memcpy(&y, &b, 4);
  const __nv_bfloat162 r = __hmax2_nan(x, y);
  uint32_t o;
  memcpy(&o, &r, 4);
  return o;
}

// Two floats rounded to nearest into one word of 16-bit pairs (lo = a): one
// conversion instruction (F2FP) for both, bit-identical to st<T> per element.
__device__ __forceinline__ uint32_t pack2(const __half*, float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);
  uint32_t o;
  memcpy(&o, &h, 4);
  return o;
}
__device__ __forceinline__ uint32_t pack2(const __nv_bfloat16*, float a, float b) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  uint32_t o;
  memcpy(&o, &h, 4);
  return o;
}

template <class T, int V, int N>
struct Raw<T, V, N, true> {
  static constexpr int W = V / 2;  // 32-bit words per vector
  struct alignas(sizeof(T) * V) Words {
    uint32_t q[W];
  };
  uint32_t u[N * W];
  __device__ __forceinline__ float operator[](int k) const {
    return widen(static_cast<const T*>(nullptr), u[k / 2], (k % 2) != 0);
  }
  __device__ __forceinline__ void load(int j, const Vec<T, V>* p) {
    const Words w = *reinterpret_cast<const Words*>(p);
#pragma unroll
    for (int q = 0; q < W; ++q) u[j * W + q] = w.q[q];
  }
  __device__ __forceinline__ void load_hint(int j, const Vec<T, V>* p, uint64_t pol) {
    if constexpr (sizeof(Words) == 16 || sizeof(Words) == 8) {
      const Words w = ld_hint(reinterpret_cast<const Words*>(p), pol);
#pragma unroll
      for (int q = 0; q < W; ++q) u[j * W + q] = w.q[q];
    } else {
      load(j, p);
    }
  }
  __device__ __forceinline__ void pad(int j, T v) {
    unsigned short b;
    memcpy(&b, &v, sizeof(b));
#pragma unroll
    for (int q = 0; q < W; ++q) u[j * W + q] = uint32_t(b) | (uint32_t(b) << 16);
  }
  // As the generic max_into, on packed pairs: one max instruction per two
  // elements and no widening (the max of 16-bit values is exact in 16 bits).
  // Word q holds elements 2q and 2q + 1, so with NS slots (1, or V even) the words
  // of one slot pair are those with equal q % (NS / 2).
  template <int NS> __device__ __forceinline__ void max_into(float (&m)[NS]) const {
    constexpr int C = NS == 1 ? 1 : NS / 2;
    static_assert(NS == 1 || NS % 2 == 0, "slots come in pairs");
    uint32_t a[C];
#pragma unroll
    for (int c = 0; c < C; ++c) a[c] = u[c];
#pragma unroll
    for (int q = C; q < N * W; ++q) a[q % C] = pmax(static_cast<const T*>(nullptr), a[q % C], u[q]);
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const float lo = widen(static_cast<const T*>(nullptr), a[c], false);
      const float hi = widen(static_cast<const T*>(nullptr), a[c], true);
      if constexpr (NS == 1) {
        m[0] = ops::MaxTag::combine(m[0], ops::MaxTag::combine(lo, hi));
      } else {
        m[2 * c] = ops::MaxTag::combine(m[2 * c], lo);
        m[2 * c + 1] = ops::MaxTag::combine(m[2 * c + 1], hi);
      }
    }
  }
  __device__ __forceinline__ void launder() {
#pragma unroll
    for (int q = 0; q < N * W; ++q) asm volatile("" : "+r"(u[q]));
  }
};

// Session 22: the 16-bit forward's sum against a base sb in one FFMA per element
// (first in staged_fwd16, session 8): e = 2^(x*log2e + nb) with nb = RN(-sb*log2e).
// fma(x, log2e, nb) is (x - sb)*log2e + dd exactly before its one rounding, with
// dd = sb*log2e + nb (nb's rounding error, exactly fma(sb, log2e, nb)), so every e
// of a slot carries the same factor 2^dd, and corr = 2^-dd turns their sum into the
// sum against sb. |dd| <= 2^-24 |sb log2e| < 2^-7 for |sb| <= 65504 (float16's
// range; NaN and +inf make the row NaN from the max alone): no term over- or
// underflows because of it. float16 only (kFma16): on the H200 it measured 0.89-1.00x
// the time of the form before on the register kernels, back to back (long spatial
// columns gained most, [128, 64, 8192] 0.89-0.92x, with fewer spilled registers; the
// block kernel's rows 0.99-1.00x: they are not issue-bound), while bfloat16 in this
// form (its slots with |sb| <= 2^16) ran 1.05-1.17x slower on the block and spatial
// kernels, so bfloat16 keeps the form before (bench/NOTES.md, session 22). Returns false (nb
// unused, corr = 1) for other types, or when `on` is false (SoftmaxTestCaps::fwd16_fma
// off: the benchmark's A/B).
constexpr float kL2e = 1.4426950408889634f;
template <class T>
inline constexpr bool kFma16 = std::is_same_v<T, __half>;
template <class T, class A, int NS>
__device__ __forceinline__ bool fma16_sum_base(const A (&sb)[NS], A (&nb)[NS], A (&corr)[NS], bool on) {
  bool fast = kFma16<T> && on;
#pragma unroll
  for (int i = 0; i < NS; ++i) {
    corr[i] = A(1);
    nb[i] = A(0);
  }
  if constexpr (kFma16<T>) {
#pragma unroll
    for (int i = 0; i < NS; ++i) nb[i] = __fmul_rn(-sb[i], kL2e);
    if (fast) {
#pragma unroll
      for (int i = 0; i < NS; ++i) corr[i] = ex2_ftz(-__fmaf_rn(sb[i], kL2e, nb[i]));
    }
  }
  return fast;
}
// log2 of a sum S >= 1 (lg2.approx: 2^-22 absolute error), for the exponent of the
// 16-bit softmax write 2^((x - M)*log2e - log2 S).
__device__ __forceinline__ float fast_log2(float s) { return __log2f(s); }
__device__ __forceinline__ double fast_log2(double s) { return ::log2(s); }

// Streamed rows (chunks > 1) read their data twice: once for the statistics and
// once more for the write. A context that can (lastdim_block, session 22) gives
// those two phases L2 eviction priorities: keep = true before the first read
// (evict_last), false before the re-read and the stores (evict_first), so the
// re-read finds the row in L2 while the rows of one wave together hold more
// bytes than L2 ([64, 262144]). Other contexts: nothing.
template <class Cx>
__device__ __forceinline__ void l2_phase(Cx& cx, bool keep) {
  if constexpr (requires { cx.set_l2_phase(keep); }) cx.set_l2_phase(keep);
}

// A context gives: T, NS (stat slots per thread: 1, or V columns for spatial), EV,
// Raw, load(which, chunk, raw, pad), store(chunk, f) (writes element k as f(k)),
// reduce<R, Op>(R (&)[NS]), chunks. Element k belongs to slot k % NS.
template <bool Log, class A, class Cx>
__device__ __forceinline__ void fwd_body(Cx& cx, bool f16fast) {
  constexpr int EV = Cx::EV, NS = Cx::NS;
  using I = typename Cx::Index;
  using T = typename Cx::T;
  const A ninf = ops::neg_inf<A>();
  const A nan = std::numeric_limits<A>::quiet_NaN();
  const T tninf = st<T>(ninf), tzero = st<T>(A(0));
  typename Cx::Raw x;
  A kk[NS], rb[NS];
  MS<A> ms[NS];
  if (cx.chunks == 1) {
    // One reduction per row, of (max, sum) pairs: each thread takes exp against
    // its own max mt (per slot), the pairs merge to the row's (M, S), and the
    // write rescales by exp(mt - M): softmax y = e * (exp(mt - M) / S), log_softmax
    // y = (x - M) - log S. The write recomputes e = exp(x - sum_base(mt)) from the
    // raw x (bit-identical to keeping it: same input, same dexp) so the registers
    // hold x at 2 bytes per 16-bit element instead of e at 4.
    cx.load(0, I(0), x, tninf);
    A mt[NS];
#pragma unroll
    for (int i = 0; i < NS; ++i) mt[i] = ninf;
    x.max_into(mt);
    x.launder();
    A sb[NS];
#pragma unroll
    for (int i = 0; i < NS; ++i) {
      sb[i] = ops::sum_base(mt[i]);  // all -inf (or padding): exp(-inf - 0) = 0
      ms[i] = {mt[i], A(0)};
    }
    // Session 5: 16-bit softmax with at most 16 elements per thread (the short
    // EVs: warp rows <= 512, spatial columns of D <= 4) keeps e = exp(x - sb) in
    // float registers for the write instead of recomputing it (one exp per
    // element, not two; 16 registers fit the 64-register bound there). Same
    // values: the write's recompute was bit-identical.
    constexpr bool kKeep = !Log && sizeof(T) == 2 && Cx::VEC % 2 == 0 && EV <= 16;  // packed vectors only
    // Session 22: the float16 forward in fewer instructions per element (fma16_sum_base,
    // the math of staged_fwd16): the sum's e = 2^(x*log2e + nb), one FFMA before the
    // exp in place of a subtraction and a multiply, corrected once per slot; the
    // softmax write y = 2^((x - M)*log2e - log2 S), one FFMA and the exp in place of
    // a multiply, the exp and a multiply by exp(mt - M) / S.
    A nb[NS], corr[NS];
    const bool fast = fma16_sum_base<T>(sb, nb, corr, f16fast);
    A e[kKeep ? EV : 1];
    if (fast) {
#pragma unroll
      for (int k = 0; k < EV; ++k) {
        const A ek = ex2_ftz(__fmaf_rn(x[k], kL2e, nb[k % NS]));
        if constexpr (kKeep) e[k] = ek;
        ms[k % NS].s += ek;
      }
#pragma unroll
      for (int i = 0; i < NS; ++i) ms[i].s *= corr[i];
    } else {
#pragma unroll
      for (int k = 0; k < EV; ++k) {
        const A ek = dexp_elem<T>(x[k] - sb[k % NS]);
        if constexpr (kKeep) e[k] = ek;
        ms[k % NS].s += ek;
      }
    }
    x.launder();
    cx.template reduce<MS<A>>(ms, MSOp{});
#pragma unroll
    for (int i = 0; i < NS; ++i) {
      // The NaN rule from M alone: NaN unless the row's max is finite. With M
      // finite, mt <= M, so the factor is in [0, 1] (0 for an all -inf slot) and
      // S >= 1 (the max's own term is exp(0) = 1, never rescaled).
      const bool finite = (ms[i].m - ms[i].m == A(0));
      if constexpr (Log) {
        kk[i] = finite ? ops::log_acc(ms[i].s) : nan;
      } else if constexpr (kKeep) {
        // kept e carry the factor 2^dd of the fast sum: corr (1 otherwise) takes it out
        kk[i] = finite ? dexp(mt[i] - ms[i].m) / ms[i].s * corr[i] : nan;
      } else if constexpr (kFma16<T>) {
        // the write from M and S alone (sb and corr are dead after the sum: fewer
        // registers live across the reduction)
        kk[i] = finite ? (fast ? -fast_log2(ms[i].s) : A(1) / ms[i].s) : nan;
      } else {
        kk[i] = finite ? dexp(mt[i] - ms[i].m) / ms[i].s : nan;
      }
      rb[i] = ms[i].m;
    }
    cx.store(I(0), [&](int k) -> A {
      if constexpr (kKeep) {
        return e[k] * kk[k % NS];
      } else {
        const A xv = x[k];
        if constexpr (Log) {
          return (xv - rb[k % NS]) - kk[k % NS];
        } else if constexpr (kFma16<T>) {
          return fast ? ex2_ftz(__fmaf_rn(xv - rb[k % NS], kL2e, kk[k % NS])) : dexp_elem<T>(xv - rb[k % NS]) * kk[k % NS];
        } else {
          return dexp_elem<T>(xv - sb[k % NS]) * kk[k % NS];
        }
      }
    });
    return;
  }
#pragma unroll
  for (int i = 0; i < NS; ++i) ms[i] = {ninf, A(0)};
  l2_phase(cx, true);  // the first read: kept in L2 for the write's re-read
  for (I c = 0; c < I(cx.chunks); ++c) {
    cx.load(0, c, x, tninf);
    A cm[NS];
#pragma unroll
    for (int i = 0; i < NS; ++i) cm[i] = ms[i].m;
    x.max_into(cm);
    x.launder();
    A sb[NS];
#pragma unroll
    for (int i = 0; i < NS; ++i) {
      ms[i].s *= ops::rescale(ms[i].m, cm[i]);
      ms[i].m = cm[i];
      sb[i] = ops::sum_base(cm[i]);
    }
    A nb[NS], corr[NS];
    if (fma16_sum_base<T>(sb, nb, corr, f16fast)) {  // session 22: as the resident sum, per chunk
      A cs[NS];
#pragma unroll
      for (int i = 0; i < NS; ++i) cs[i] = A(0);
#pragma unroll
      for (int k = 0; k < EV; ++k) cs[k % NS] += ex2_ftz(__fmaf_rn(x[k], kL2e, nb[k % NS]));
#pragma unroll
      for (int i = 0; i < NS; ++i) ms[i].s += cs[i] * corr[i];
    } else {
#pragma unroll
      for (int k = 0; k < EV; ++k) ms[k % NS].s += dexp_elem<T>(x[k] - sb[k % NS]);
    }
  }
  cx.template reduce<MS<A>>(ms, MSOp{});
  // The 16-bit softmax write as the resident one: 2^((x - M)*log2e - log2 S).
  const bool wfast = kFma16<T> && f16fast;
#pragma unroll
  for (int i = 0; i < NS; ++i) {
    const bool finite = (ms[i].m - ms[i].m == A(0));
    kk[i] = finite ? (Log ? ops::log_acc(ms[i].s) : wfast ? -fast_log2(ms[i].s) : A(1) / ms[i].s) : nan;
    rb[i] = finite ? ms[i].m : nan;
  }
  l2_phase(cx, false);  // the re-read (the data's last use) and the stores: evicted first
  for (I c = 0; c < I(cx.chunks); ++c) {
    cx.load(0, c, x, tzero);
    cx.store(c, [&](int k) -> A {
      const A xv = x[k];
      if (Log) return (xv - rb[k % NS]) - kk[k % NS];
      if (wfast) return ex2_ftz(__fmaf_rn(xv - rb[k % NS], kL2e, kk[k % NS]));
      return dexp_elem<T>(xv - rb[k % NS]) * kk[k % NS];
    });
  }
}

template <bool Log, class A, class Cx>
__device__ __forceinline__ void bwd_body(Cx& cx) {
  constexpr int EV = Cx::EV, NS = Cx::NS;
  using I = typename Cx::Index;
  using T = typename Cx::T;
  using Epi = std::conditional_t<Log, ops::LogSoftmaxBwd, ops::SoftmaxBwd>;
  const T tzero = st<T>(A(0));
  typename Cx::Raw g, y;
  A acc[NS];
#pragma unroll
  for (int i = 0; i < NS; ++i) acc[i] = A(0);
  if (cx.chunks == 1) {
    cx.load(0, I(0), g, tzero);
    cx.load(1, I(0), y, tzero);
#pragma unroll
    for (int k = 0; k < EV; ++k) acc[k % NS] += Epi::term(g[k], y[k]);
    g.launder();
    y.launder();
    cx.template reduce<A>(acc, SumOp{});
    cx.store(I(0), [&](int k) -> A { return Epi::apply(g[k], y[k], acc[k % NS]); });
    return;
  }
  l2_phase(cx, true);
  for (I c = 0; c < I(cx.chunks); ++c) {
    cx.load(0, c, g, tzero);
    if constexpr (!Log) cx.load(1, c, y, tzero);
#pragma unroll
    for (int k = 0; k < EV; ++k) acc[k % NS] += Log ? g[k] : g[k] * y[k];
  }
  cx.template reduce<A>(acc, SumOp{});
  l2_phase(cx, false);
  for (I c = 0; c < I(cx.chunks); ++c) {
    cx.load(0, c, g, tzero);
    cx.load(1, c, y, tzero);
    cx.store(c, [&](int k) -> A { return Epi::apply(g[k], y[k], acc[k % NS]); });
  }
}

// ---------------------------------------------------------------- contexts

// Elements per thread per array, per kernel kind: the full EV
// (detail::softmax_elems_per_thread) and the short-row EV
// (detail::softmax_short_elems_per_thread), the geometry's two choices (so plan and
// kernel agree). Every kernel takes its EV as a template argument; pick_kernel
// instantiates exactly these two values.
template <class T, detail::SoftmaxKernel K, bool Fwd, int V>
constexpr int kEV = detail::softmax_elems_per_thread(K, int(sizeof(T)), Fwd, V);
template <class T, detail::SoftmaxKernel K, bool Fwd, int V>
constexpr int kShortEV = detail::softmax_short_elems_per_thread(K, int(sizeof(T)), Fwd, V);

// lastdim_warp: lanes [0, L) of a group hold vectors lane, lane + L, ... of the row.
template <class T_, class I, int V, int EV_>
struct WarpCx {
  using T = T_;
  using Index = I;
  using A = dacc_t<T>;
  static constexpr int EV = EV_, NS = 1, NV = EV / V, VEC = V;
  using Raw = sm::Raw<T, V, NV>;
  const T* a;
  const T* b;
  T* out;
  I D;
  int lanes, lane;
  bool active;
  int64_t chunks = 1;
  __device__ __forceinline__ void load(int which, I c, Raw& r, T pad) const {
    const Vec<T, V>* p = reinterpret_cast<const Vec<T, V>*>(which ? b : a);
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      const I vi = (c * I(NV) + I(j)) * I(lanes) + I(lane);
      if (active && vi * I(V) < D) r.load(j, p + vi);
      else r.pad(j, pad);
    }
  }
  template <class F> __device__ __forceinline__ void store(I c, F f) const {
    Vec<T, V>* p = reinterpret_cast<Vec<T, V>*>(out);
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      const I vi = (c * I(NV) + I(j)) * I(lanes) + I(lane);
      if (active && vi * I(V) < D) {
        Vec<T, V> w;
#pragma unroll
        for (int i = 0; i < V; ++i) w.v[i] = st<T>(f(j * V + i));
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

template <class T, class I, bool Fwd, bool Log, int V, int EV>
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
    WarpCx<T, I, V, EV> cx{static_cast<const T*>(args.a) + base,
                       Fwd ? nullptr : static_cast<const T*>(args.b) + base,
                       static_cast<T*>(args.out) + base,
                       I(D),
                       lanes,
                       lane,
                       active};
    if constexpr (Fwd) fwd_body<Log, A>(cx, args.fwd16_fma != 0);
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
template <class T_, class I, int V, int EV_>
struct BlockCx {
  using T = T_;
  using Index = I;
  using A = dacc_t<T>;
  static constexpr int EV = EV_, NS = 1, NV = EV / V, VEC = V;
  using Raw = sm::Raw<T, V, NV>;
  const T* a;
  const T* b;
  T* out;
  I D;
  int B, t, C, rank;
  int64_t chunks;
  bool hints = false;  // SoftmaxGeometry::l2_hints: streamed rows' accesses carry pol
  uint64_t pol = 0;
  __device__ __forceinline__ void set_l2_phase(bool keep) {
    if (hints) pol = keep ? l2_evict_last() : l2_evict_first();
  }
  __device__ __forceinline__ I vidx(I c, int j) const { return ((c * I(C) + I(rank)) * I(NV) + I(j)) * I(B) + I(t); }
  __device__ __forceinline__ void load(int which, I c, Raw& r, T pad) const {
    const Vec<T, V>* p = reinterpret_cast<const Vec<T, V>*>(which ? b : a);
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      const I vi = vidx(c, j);
      if (vi * I(V) < D) {
        if (hints) r.load_hint(j, p + vi, pol);
        else r.load(j, p + vi);
      } else {
        r.pad(j, pad);
      }
    }
  }
  template <class F> __device__ __forceinline__ void store(I c, F f) const {
    Vec<T, V>* p = reinterpret_cast<Vec<T, V>*>(out);
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      const I vi = vidx(c, j);
      if (vi * I(V) < D) {
        Vec<T, V> w;
#pragma unroll
        for (int i = 0; i < V; ++i) w.v[i] = st<T>(f(j * V + i));
        if constexpr (sizeof(w) == 16 || sizeof(w) == 8) {
          if (hints) st_hint(p + vi, w, pol);
          else p[vi] = w;
        } else {
          p[vi] = w;
        }
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

template <class T, class I, bool Fwd, bool Log, int V, int EV>
__global__ void __launch_bounds__(1024) block_kernel(Args args) {
  using A = dacc_t<T>;
  const int C = args.cluster;
  const int rank = int(blockIdx.x % unsigned(C));
  const I rows = I(args.outer);
  const int64_t D = args.D;
  for (I row = I(blockIdx.x / unsigned(C)); row < rows; row += I(gridDim.x / unsigned(C))) {
    const int64_t base = int64_t(row) * D;  // row base: 64-bit
    BlockCx<T, I, V, EV> cx{static_cast<const T*>(args.a) + base,
                        Fwd ? nullptr : static_cast<const T*>(args.b) + base,
                        static_cast<T*>(args.out) + base,
                        I(D),
                        int(blockDim.x),
                        int(threadIdx.x),
                        C,
                        rank,
                        args.chunks,
                        args.l2_hints != 0};
    if constexpr (Fwd) fwd_body<Log, A>(cx, args.fwd16_fma != 0);
    else bwd_body<Log, A>(cx);
  }
}

// spatial: thread (ty_i, tx_i) holds V consecutive columns starting at the
// tile's column tx_i*V and rows d = ty_i + TY*((c*C + r)*E + j), j < E.
template <class T_, class I, int V, int EV_>
struct SpatialCx {
  using T = T_;
  using Index = I;
  using A = dacc_t<T>;
  static constexpr int EV = EV_, NS = V, E = EV / V, VEC = V;
  using Raw = sm::Raw<T, V, E>;
  const T* a;
  const T* b;
  T* out;
  I D, inner;
  int TX, TY, txi, tyi, C, rank;
  bool active;
  int64_t chunks;
  __device__ __forceinline__ I row(I c, int j) const { return I(tyi) + I(TY) * ((c * I(C) + I(rank)) * I(E) + I(j)); }
  __device__ __forceinline__ void load(int which, I c, Raw& r, T pad) const {
    const T* p = which ? b : a;
#pragma unroll
    for (int j = 0; j < E; ++j) {
      const I d = row(c, j);
      if (active && d < D) r.load(j, reinterpret_cast<const Vec<T, V>*>(p + d * inner));
      else r.pad(j, pad);
    }
  }
  template <class F> __device__ __forceinline__ void store(I c, F f) const {
#pragma unroll
    for (int j = 0; j < E; ++j) {
      const I d = row(c, j);
      if (active && d < D) {
        Vec<T, V> w;
#pragma unroll
        for (int i = 0; i < V; ++i) w.v[i] = st<T>(f(j * V + i));
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
        x[i] = shfl(t, txi);  // lane % TX: TX is a power of two (the xor offsets above need it)
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
  // One reduce-scatter step of reduce_rs at lane offset Off (>= TX: lanes of one
  // column), H = half the slots held; then the next step at Off / 2.
  template <int H, int Off, class R, class Op>
  __device__ __forceinline__ void rs_step(R (&x)[V], Op op, int lane, int& base) const {
    if constexpr (H >= 1 && Off >= 1) {
      if (Off < TX) return;
      const bool hi = (lane & Off) != 0;
#pragma unroll
      for (int j = 0; j < H; ++j) {
        const R keep = hi ? x[j + H] : x[j];
        const R send = hi ? x[j] : x[j + H];
        x[j] = op(keep, shfl_xor(send, Off));
      }
      base += hi ? H : 0;
      rs_step<H / 2, Off / 2>(x, op, lane, base);
    }
  }
  // reduce() with a reduce-scatter in place of the butterfly (session 8, the 16-bit
  // staged forward at V = 8, TX = 8: the butterfly takes log2(32 / TX) = 2 steps
  // of V merges each, 16 per thread, while a reduce-scatter halves the slots a
  // lane merges at each step: 4 + 2). Needs V * TX >= 32 (every lane ends with
  // V * TX / 32 whole slots of one column: lane bits `off` >= TX pick the upper
  // or lower half at each step); otherwise, for TX >= 32 and for one-warp blocks
  // (no scratch: SoftmaxGeometry::stage_offset), reduce(). Then the same
  // shared-memory and cluster stages as reduce(). Fixed order: results depend
  // only on the geometry.
  template <class R, class Op> __device__ __forceinline__ void reduce_rs(R (&x)[V], Op op) const {
    if (TX >= 32 || V * TX < 32 || TX * TY <= 32) {
      reduce<R>(x, op);
      return;
    }
    const int lin = tyi * TX + txi;
    const int lane = lin % 32;
    const int cols = TX * V;
    int base = 0;  // first slot this lane holds (its slots: base .. base + width - 1)
    // Step s halves the held slots (V >> s) at offset 16 >> s while it is >= TX.
    rs_step<V / 2, 16>(x, op, lane, base);
    const int width = V * TX / 32;
    const int G = TX * TY / 32;  // warps
    R* sm = reinterpret_cast<R*>(dyn_smem());
    R* fin = sm + G * cols;
    R* comb = fin + cols;
    {
      const int gid = lin / 32;
#pragma unroll
      for (int j = 0; j < V; ++j)
        if (j < width) sm[gid * cols + (base + j) * TX + txi] = x[j];
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
    cg::cluster_group cl = cg::this_cluster();
    cl.sync();
    for (int q = lin; q < cols; q += TX * TY) comb[q] = cluster_gather(fin + q, C, op);
    cl.sync();
#pragma unroll
    for (int i = 0; i < V; ++i) x[i] = comb[i * TX + txi];
  }
};

template <class T, class I, bool Fwd, bool Log, int V, int EV>
__global__ void __launch_bounds__(512, 2) spatial_kernel(Args args) {
  using A = dacc_t<T>;
  const int C = args.cluster;
  const int rank = args.fd_cluster.mod(int(blockIdx.x));
  const int TX = args.tx, TY = args.ty;
  const int tyi = args.fd_tx.div(int(threadIdx.x)), txi = int(threadIdx.x) - tyi * TX;
  const I inner = I(args.inner);
  const I ncols = I(args.outer) * inner;
  const I tiles = I(args.work);
  const int64_t slab = args.D * args.inner;
  const I tile_step = I(args.fd_cluster.div(int(gridDim.x)));
  for (I tile = I(args.fd_cluster.div(int(blockIdx.x))); tile < tiles; tile += tile_step) {
    const I col = tile * I(TX * V) + I(txi * V);
    const bool active = col < ncols;
    int64_t base = 0;  // column base: 64-bit
    if (active) {
      const I o = idiv<I>(col, inner, args.fd_inner);
      base = int64_t(o) * slab + int64_t(col - o * inner);
    }
    SpatialCx<T, I, V, EV> cx{static_cast<const T*>(args.a) + base,
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
    if constexpr (Fwd) fwd_body<Log, A>(cx, args.fwd16_fma != 0);
    else bwd_body<Log, A>(cx);
  }
}

// cp.async of one vector of B bytes (8 or 16) from global to shared memory.
template <int B>
__device__ __forceinline__ void cp_async(void* dst, const void* src) {
  const unsigned sa = unsigned(__cvta_generic_to_shared(dst));
  if constexpr (B == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(src) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(sa), "l"(src), "n"(B) : "memory");
  }
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

template <int B>
__device__ __forceinline__ void cp_async_hint(void* dst, const void* src, uint64_t pol) {
  const unsigned sa = unsigned(__cvta_generic_to_shared(dst));
  if constexpr (B == 16) {
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(src), "l"(pol)
                 : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global.L2::cache_hint [%0], [%1], %2, %3;\n" ::"r"(sa), "l"(src), "n"(B), "l"(pol)
                 : "memory");
  }
}
// Words of one staged vector of V 16-bit elements (V even): word q holds elements
// 2q (low half) and 2q + 1.
template <int V> struct alignas(2 * V) Words16 {
  uint32_t q[V / 2];
};

// The staged forward of a 16-bit column slice (session 8; bench/notes-s8-cuda-softmax.md).
// Same statistics and epilogue rules as the generic staged forward (fwd_body's
// resident path), fewer instructions per element:
//   max: packed pairs (__hmax2_nan: exact, NaN wins), widened once per slot.
//   sum: e = 2^(x*log2e + nb) with nb = RN(-sb*log2e), one FFMA instead of a
//     subtraction and a multiply. fma(x, log2e, nb) is (x - sb)*log2e + dd exactly
//     before its one rounding, dd = sb*log2e + nb (the rounding error of nb, exactly
//     fma(sb, log2e, nb)), so every e of the slot carries the same factor 2^dd and
//     s * 2^-dd is the sum against sb (|dd| <= 2^-24 |sb log2e|; for |sb| <= 2^16,
//     |dd| < 2^-7: no term over- or underflows because of it). Larger |sb|
//     (bfloat16 only; NaN and +inf too) take the generic loop.
//   write (softmax): y = 2^((x - M)*log2e - log2 S) with the column's merged (M, S):
//     one FADD, one FFMA, the exp; no per-thread factor exp(mt - M) / S (one
//     division and one exp per slot) and no multiply per element. -log2 S is NaN
//     unless M is finite (the NaN rule; S >= 1 otherwise). Error: the FFMA rounds
//     once, |t| 2^-24 (t the exponent, >= -25 for a nonzero 16-bit y), lg2.approx's
//     2^-22 absolute: under 2e-6 relative, against 2^-11 (float16) and 2^-8
//     (bfloat16) for the final rounding.
//   write (log_softmax): (x - M) - log S, as before.
template <bool Log, class T, class I, int V, class Cx>
__device__ __forceinline__ void staged_fwd16(const Vec<T, V>* s0, int ks, int na, T* go, I d0, I TY, I inner,
                                             const Cx& cx) {
  constexpr int W = V / 2;
  constexpr int U = 16 / V;  // rows per unrolled step: 16 elements (V = 8 at 4 rows: 64 registers and a spill)
  using Wd = Words16<V>;
  const T* tag = nullptr;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Wd* s = reinterpret_cast<const Wd*>(s0);
  MS<float> ms[V];
  {
    uint32_t a[W];
    {
      const T ni = st<T>(ops::neg_inf<float>());
      unsigned short b;
      memcpy(&b, &ni, sizeof(b));
#pragma unroll
      for (int q = 0; q < W; ++q) a[q] = uint32_t(b) | (uint32_t(b) << 16);
    }
#pragma unroll U
    for (int k = 0; k < na; ++k) {
      const Wd w = s[k * ks];
#pragma unroll
      for (int q = 0; q < W; ++q) a[q] = pmax(tag, a[q], w.q[q]);
    }
#pragma unroll
    for (int i = 0; i < V; ++i) ms[i] = {widen(tag, a[i / 2], (i % 2) != 0), 0.f};
  }
  {
    float nb[V];
    bool fast = true;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const float sb = ops::sum_base(ms[i].m);  // all -inf (or no rows): 0
      // float16: always (NaN and +inf make the row NaN from m alone, whatever s is).
      fast = fast && (std::is_same_v<T, __half> || fabsf(sb) <= 65536.f);
      nb[i] = __fmul_rn(-sb, kL2e);
    }
    if (fast) {
#pragma unroll U
      for (int k = 0; k < na; ++k) {
        const Wd w = s[k * ks];
#pragma unroll
        for (int i = 0; i < V; ++i)
          ms[i].s += ex2_ftz(__fmaf_rn(widen(tag, w.q[i / 2], (i % 2) != 0), kL2e, nb[i]));
      }
#pragma unroll
      for (int i = 0; i < V; ++i) ms[i].s *= ex2_ftz(-__fmaf_rn(ops::sum_base(ms[i].m), kL2e, nb[i]));
    } else {
#pragma unroll U
      for (int k = 0; k < na; ++k) {
        const Wd w = s[k * ks];
#pragma unroll
        for (int i = 0; i < V; ++i)
          ms[i].s += dexp_elem<T>(widen(tag, w.q[i / 2], (i % 2) != 0) - ops::sum_base(ms[i].m));
      }
    }
  }
  if constexpr (V >= 8) cx.template reduce_rs<MS<float>>(ms, MSOp{});
  else cx.template reduce<MS<float>>(ms, MSOp{});  // one butterfly step at TX = 16: no gain
  float M[V], c[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const bool finite = (ms[i].m - ms[i].m == 0.f);  // the NaN rule, as fwd_body
    M[i] = ms[i].m;
    c[i] = finite ? (Log ? ops::log_acc(ms[i].s) : -__log2f(ms[i].s)) : nan;
  }
  // Running pointers (the write's address is one 64-bit add per row, not a
  // 32-bit multiply, a sign extension and a shift): row d0 + TY*k of the column,
  // d < D, the same address as (d0 + TY*k) * inner.
  const Wd* sp = s;
  T* gp = go + int64_t(d0) * int64_t(inner);
  const int64_t gstep = int64_t(TY) * int64_t(inner);
#pragma unroll U
  for (int k = 0; k < na; ++k, sp += ks, gp += gstep) {
    const Wd w = *sp;
    float y[V];
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const float d = __fsub_rn(widen(tag, w.q[i / 2], (i % 2) != 0), M[i]);
      y[i] = Log ? d - c[i] : ex2_ftz(__fmaf_rn(d, kL2e, c[i]));
    }
    Wd o;  // two elements per conversion instruction (round to nearest, as st<T>)
#pragma unroll
    for (int q = 0; q < W; ++q) o.q[q] = pack2(tag, y[2 * q], y[2 * q + 1]);
    *reinterpret_cast<Wd*>(gp) = o;
  }
}

// spatial, staged (session 5; geometry: detail::softmax_staged_geometry): long
// columns. The block's slice of the column tile (rows rank*krows*TY .. +krows*TY,
// TX*V columns, 128-byte rows where it fits) is copied to shared memory with
// cp.async, so the bytes in flight are not capped by registers (64 KB per block,
// 3 blocks per SM, against 64 bytes x 1024 threads on the register path) and the
// register path's narrowing of long columns to 32-byte row segments (one L2
// request per sector) is not needed. Thread (tyi, txi) copies and later reads only
// its own slots, rows tyi + TY*k (k < krows) of vector txi, at
// [(k*TY + tyi)*TX + txi] (a warp touches consecutive 16- or 8-byte words: no bank
// conflicts), so no barrier orders the staging: cp.async.wait_all makes a
// thread's copies visible to itself. The (max, sum) pairs (fwd) or sums (bwd) of
// the TY threads of a column and the cluster ranks merge with SpatialCx::reduce
// (its scratch at the start of shared memory, the staged data after it). Math as
// fwd_body/bwd_body's resident path: one DRAM read and one write per element.
// StageY (backward, session 21; detail::SoftmaxGeometry::stage_y): only y is
// staged (into the first array's slots); each thread reads its rows of g from
// global memory into registers in batches of kGBatchBytes per thread, once for sum(g*y)
// (the first batch issued before the wait for y's copies) and again for the
// write, from L2 (the accesses' eviction priorities keep g there while y and the
// output stream past it). The DRAM bytes stay one read of g and y and one write
// (Nsight Compute, [8192, 8192] fp32: 792 MB of 805); half the shared memory per rank lets
// [8192, 8192]'s column tile of 128-byte rows fit 16 ranks. Same sums in the
// same order as the staged form at the same geometry.
constexpr int kGBatchBytes = 64;  // StageY: bytes of g per thread per batch (4 vectors of 16 B, 8 of 8 B)
template <class T, class I, bool Fwd, bool Log, int V, bool StageY>
__device__ __forceinline__ void spatial_staged_body(const Args& args) {
  using A = dacc_t<T>;
  using VT = Vec<T, V>;
  const int C = args.cluster;
  const int rank = args.fd_cluster.mod(int(blockIdx.x));
  const int TX = args.tx, TY = args.ty;
  const int tyi = args.fd_tx.div(int(threadIdx.x)), txi = int(threadIdx.x) - tyi * TX;
  const int cols = TX * V;
  const int K = args.krows;
  const I D = I(args.D);
  const I inner = I(args.inner);
  const I ncols = I(args.outer) * inner;
  const I tiles = I(args.work);
  const int64_t slab = args.D * args.inner;
  const I d0 = I(rank) * I(K) * I(TY) + I(tyi);  // this thread's first row; then every TY
  const I held = D > d0 ? idiv<I>(D - d0 + I(TY) - 1, I(TY), args.fd_ty) : I(0);
  const int n = held < I(K) ? int(held) : K;  // rows this thread holds
  const int ks = TX * TY;  // slot stride in vectors
  VT* s0 = reinterpret_cast<VT*>(dyn_smem() + args.stage_off) + tyi * TX + txi;
  VT* s1 = s0 + int64_t(K) * ks;  // bwd: y after g
  const A ninf = ops::neg_inf<A>();
  const A nan = std::numeric_limits<A>::quiet_NaN();
  const I tile_step = I(args.fd_cluster.div(int(gridDim.x)));
  for (I tile = I(args.fd_cluster.div(int(blockIdx.x))); tile < tiles; tile += tile_step) {
    const I col = tile * I(cols) + I(txi * V);
    const bool active = col < ncols;
    int64_t base = 0;  // column base: 64-bit
    if (active) {
      const I o = idiv<I>(col, inner, args.fd_inner);
      base = int64_t(o) * slab + int64_t(col - o * inner);
    }
    const int na = active ? n : 0;
    if constexpr (!Fwd && StageY) {
      // y into the first array's slots; g stays in global memory (read below).
      const T* gb = static_cast<const T*>(args.b) + base;
      const uint64_t first = l2_evict_first();
      for (int k = 0; k < na; ++k) cp_async_hint<sizeof(VT)>(s0 + k * ks, gb + (d0 + I(TY) * I(k)) * inner, first);
    } else {
      const T* ga = static_cast<const T*>(args.a) + base;
      for (int k = 0; k < na; ++k) cp_async<sizeof(VT)>(s0 + k * ks, ga + (d0 + I(TY) * I(k)) * inner);
      if constexpr (!Fwd) {
        const T* gb = static_cast<const T*>(args.b) + base;
        for (int k = 0; k < na; ++k) cp_async<sizeof(VT)>(s1 + k * ks, gb + (d0 + I(TY) * I(k)) * inner);
      }
      cp_async_wait_all();
    }
    SpatialCx<T, I, V, V> cx{nullptr, nullptr, nullptr, D, inner, TX, TY, txi, tyi, C, rank, active, 1};
    T* go = static_cast<T*>(args.out) + base;
    if constexpr (Fwd && sizeof(T) == 2 && V % 2 == 0) {
      // 16-bit (session 8, bench/notes-s8-cuda-softmax.md): packed max, the sum's
      // exp argument in one FFMA, the write's exp against the column's (M, S) in
      // one FADD + one FFMA (no per-element multiply by a per-thread factor).
      staged_fwd16<Log, T, I, V>(s0, ks, na, go, d0, I(TY), inner, cx);
    } else if constexpr (Fwd) {
      A mt[V], sb[V], kk[V], rb[V];
      MS<A> ms[V];
#pragma unroll
      for (int i = 0; i < V; ++i) mt[i] = ninf;
#pragma unroll 4
      for (int k = 0; k < na; ++k) {
        const VT w = s0[k * ks];
#pragma unroll
        for (int i = 0; i < V; ++i) mt[i] = ops::MaxTag::combine(mt[i], ld(w.v[i]));
      }
#pragma unroll
      for (int i = 0; i < V; ++i) {
        sb[i] = ops::sum_base(mt[i]);  // all -inf (or no rows): exp(-inf - 0) = 0
        ms[i] = {mt[i], A(0)};
      }
#pragma unroll 4
      for (int k = 0; k < na; ++k) {
        const VT w = s0[k * ks];
#pragma unroll
        for (int i = 0; i < V; ++i) ms[i].s += dexp_elem<T>(ld(w.v[i]) - sb[i]);
      }
      cx.template reduce<MS<A>>(ms, MSOp{});
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const bool finite = (ms[i].m - ms[i].m == A(0));  // the NaN rule, as fwd_body
        kk[i] = finite ? (Log ? ops::log_acc(ms[i].s) : dexp(mt[i] - ms[i].m) / ms[i].s) : nan;
        rb[i] = ms[i].m;
      }
#pragma unroll 4
      for (int k = 0; k < na; ++k) {
        const VT w = s0[k * ks];
        VT o;
#pragma unroll
        for (int i = 0; i < V; ++i) {
          const A xv = ld(w.v[i]);
          o.v[i] = st<T>(Log ? (xv - rb[i]) - kk[i] : dexp_elem<T>(xv - sb[i]) * kk[i]);
        }
        *reinterpret_cast<VT*>(go + (d0 + I(TY) * I(k)) * inner) = o;
      }
    } else if constexpr (StageY) {
      using Epi = std::conditional_t<Log, ops::LogSoftmaxBwd, ops::SoftmaxBwd>;
      constexpr int KB = kGBatchBytes / int(sizeof(VT));
      // g as loaded (Raw: 16-bit vectors as packed words, widened where used; as
      // Vec<__nv_bfloat16, 4>[8] the bfloat16 kernels spilled 180-264 bytes).
      using GRaw = Raw<T, V, KB>;
      const T* ga = static_cast<const T*>(args.a) + base;
      // L2 priorities: between its two reads g must stay in L2 while y and the
      // output stream through it (3 x 132 blocks touch ~76 MB per wave at [8192,
      // 8192] fp32, more than L2): the first read of g evict_last, y's copies, the
      // second read (g's last use) and the stores evict_first. Without them ncu
      // measured 946 MB of DRAM traffic where 805 MB are needed (L2 hit rate 38%).
      const uint64_t last = l2_evict_last(), first = l2_evict_first();
      auto load_g = [&](GRaw& gv, int k0, uint64_t pol) {
#pragma unroll
        for (int j = 0; j < KB; ++j) {
          if (k0 + j < na) {
            const VT v = ld_hint(reinterpret_cast<const VT*>(ga + (d0 + I(TY) * I(k0 + j)) * inner), pol);
            gv.load(j, &v);
          }
        }
      };
      A acc[V];
#pragma unroll
      for (int i = 0; i < V; ++i) acc[i] = A(0);
      for (int k0 = 0; k0 < na; k0 += KB) {
        GRaw gv;
        load_g(gv, k0, last);
        if (k0 == 0) cp_async_wait_all();  // y's copies, behind the first batch of g
#pragma unroll
        for (int j = 0; j < KB; ++j) {
          if (k0 + j < na) {
            const VT y = s0[(k0 + j) * ks];
#pragma unroll
            for (int i = 0; i < V; ++i) acc[i] += Epi::term(gv[j * V + i], ld(y.v[i]));
          }
        }
      }
      cx.template reduce<A>(acc, SumOp{});
      for (int k0 = 0; k0 < na; k0 += KB) {
        GRaw gv;
        load_g(gv, k0, first);  // the second read of g: from L2
#pragma unroll
        for (int j = 0; j < KB; ++j) {
          if (k0 + j < na) {
            const VT y = s0[(k0 + j) * ks];
            VT o;
#pragma unroll
            for (int i = 0; i < V; ++i) o.v[i] = st<T>(Epi::apply(gv[j * V + i], ld(y.v[i]), acc[i]));
            st_hint(reinterpret_cast<VT*>(go + (d0 + I(TY) * I(k0 + j)) * inner), o, first);
          }
        }
      }
    } else {
      using Epi = std::conditional_t<Log, ops::LogSoftmaxBwd, ops::SoftmaxBwd>;
      A acc[V];
#pragma unroll
      for (int i = 0; i < V; ++i) acc[i] = A(0);
#pragma unroll 4
      for (int k = 0; k < na; ++k) {
        const VT g = s0[k * ks], y = s1[k * ks];
#pragma unroll
        for (int i = 0; i < V; ++i) acc[i] += Epi::term(ld(g.v[i]), ld(y.v[i]));
      }
      cx.template reduce<A>(acc, SumOp{});
#pragma unroll 4
      for (int k = 0; k < na; ++k) {
        const VT g = s0[k * ks], y = s1[k * ks];
        VT o;
#pragma unroll
        for (int i = 0; i < V; ++i) o.v[i] = st<T>(Epi::apply(ld(g.v[i]), ld(y.v[i]), acc[i]));
        *reinterpret_cast<VT*>(go + (d0 + I(TY) * I(k)) * inner) = o;
      }
    }
  }
}

template <class T, class I, bool Fwd, bool Log, int V>
__global__ void __launch_bounds__(256) spatial_staged_kernel(Args args) {
  spatial_staged_body<T, I, Fwd, Log, V, false>(args);
}
// StageY: its own kernel, so that the bound of 3 blocks per SM (the 64 KB blocks'
// shared-memory limit; without it ptxas took 118-128 registers, 2 blocks per SM)
// leaves the other instantiations' registers as they were.
template <class T, class I, bool Log, int V>
__global__ void __launch_bounds__(256, 3) spatial_staged_y_kernel(Args args) {
  spatial_staged_body<T, I, false, Log, V, true>(args);
}

// The kernel of kind K at vector width V and EV elements per thread.
template <class T, class I, bool Fwd, bool Log, detail::SoftmaxKernel K, int V, int EV>
KernelFn kernel_of() {
  if constexpr (K == detail::SoftmaxKernel::Warp) return warp_kernel<T, I, Fwd, Log, V, EV>;
  else if constexpr (K == detail::SoftmaxKernel::Block) return block_kernel<T, I, Fwd, Log, V, EV>;
  else return spatial_kernel<T, I, Fwd, Log, V, EV>;
}

// Kind K at width V: the instantiation for `ev` (the full or the short EV; where
// both are equal, one kernel), nullptr for any other value.
template <class T, class I, bool Fwd, bool Log, detail::SoftmaxKernel K, int V>
KernelFn pick_ev(int ev) {
  constexpr int full = kEV<T, K, Fwd, V>, shrt = kShortEV<T, K, Fwd, V>;
  if (ev == full) return kernel_of<T, I, Fwd, Log, K, V, full>();
  if (ev == shrt) return kernel_of<T, I, Fwd, Log, K, V, shrt>();
  return nullptr;
}

// The kernel for (T, I, direction, log, geometry kind, vector width, EV); nullptr
// when that combination is not instantiated (the launcher reports an error).
// Vector widths: detail::softmax_vec_elems (the geometry's, so plan and kernel agree).
template <class T, class I, bool Fwd, bool Log>
KernelFn pick_kernel(detail::SoftmaxKernel k, int vec, int ev, int staged) {
  constexpr int V = detail::softmax_vec_elems(detail::SoftmaxKernel::Warp, int(sizeof(T)));
  constexpr int VS = detail::softmax_vec_elems(detail::SoftmaxKernel::Spatial, int(sizeof(T)));
  using K = detail::SoftmaxKernel;
  if (staged) {  // spatial, staged: vector loads of 2- and 4-byte types only
    if constexpr (sizeof(T) <= 4 && VS > 1) {
      if constexpr (!Fwd) {  // session 21: y staged, g from global memory (staged form 2)
        if (k == K::Spatial && vec == VS && staged == 2) return spatial_staged_y_kernel<T, I, Log, VS>;
      }
      if (staged == 2) return nullptr;
      if (k == K::Spatial && vec == VS) return spatial_staged_kernel<T, I, Fwd, Log, VS>;
      // Session 8: the 16-bit forward also at 16-byte vectors (V = 8,
      // detail::softmax_staged_vec_elems).
      constexpr int VW = detail::softmax_staged_vec_elems(int(sizeof(T)), Fwd);
      if constexpr (VW != VS) {
        if (k == K::Spatial && vec == VW) return spatial_staged_kernel<T, I, Fwd, Log, VW>;
      }
    }
    return nullptr;
  }
  switch (k) {
    case K::Warp:
      if (vec == V) return pick_ev<T, I, Fwd, Log, K::Warp, V>(ev);
      return vec == 1 ? pick_ev<T, I, Fwd, Log, K::Warp, 1>(ev) : nullptr;
    case K::Block:
      if (vec == V) return pick_ev<T, I, Fwd, Log, K::Block, V>(ev);
      return vec == 1 ? pick_ev<T, I, Fwd, Log, K::Block, 1>(ev) : nullptr;
    default:
      if (vec == VS) return pick_ev<T, I, Fwd, Log, K::Spatial, VS>(ev);
      // Session 14: short 16-bit forward columns at 16-byte vectors
      // (detail::softmax_spatial_short_vec_elems; its EV is 4 rows x 8).
      if constexpr (constexpr int VW = detail::softmax_spatial_short_vec_elems(int(sizeof(T)), Fwd); VW != VS) {
        if (vec == VW) return pick_ev<T, I, Fwd, Log, K::Spatial, VW>(ev);
      }
      return vec == 1 ? pick_ev<T, I, Fwd, Log, K::Spatial, 1>(ev) : nullptr;
  }
}

// Per (direction, dtype) translation units (softmax_{fwd,bwd}_<dtype>.cu).
#define SEGRED_SOFTMAX_PICK_DECL(dir, tag) \
  KernelFn pick_##dir##_##tag(bool log, bool i64, detail::SoftmaxKernel k, int vec, int ev, int staged);
SEGRED_SOFTMAX_PICK_DECL(fwd, f32)
SEGRED_SOFTMAX_PICK_DECL(fwd, f64)
SEGRED_SOFTMAX_PICK_DECL(fwd, f16)
SEGRED_SOFTMAX_PICK_DECL(fwd, bf16)
SEGRED_SOFTMAX_PICK_DECL(bwd, f32)
SEGRED_SOFTMAX_PICK_DECL(bwd, f64)
SEGRED_SOFTMAX_PICK_DECL(bwd, f16)
SEGRED_SOFTMAX_PICK_DECL(bwd, bf16)
#undef SEGRED_SOFTMAX_PICK_DECL

#define SEGRED_SOFTMAX_PICK_DEF(dir, tag, T, FWD)                                                               \
  KernelFn pick_##dir##_##tag(bool log, bool i64, detail::SoftmaxKernel k, int vec, int ev, int staged) {      \
    if (log)                                                                                                   \
      return i64 ? pick_kernel<T, int64_t, FWD, true>(k, vec, ev, staged)                                      \
                 : pick_kernel<T, int32_t, FWD, true>(k, vec, ev, staged);                                     \
    return i64 ? pick_kernel<T, int64_t, FWD, false>(k, vec, ev, staged)                                       \
               : pick_kernel<T, int32_t, FWD, false>(k, vec, ev, staged);                                      \
  }

}  // namespace segred::cuda::sm
