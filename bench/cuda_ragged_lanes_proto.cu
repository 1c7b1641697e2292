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
// Scope: heads = 8 (rows of 16 or 32 bytes), softmax forward and backward, float32 and
// bfloat16, 1-D offsets, 32-bit row counts per segment. Validated against the CPU backend
// like bench/cuda_segment_softmax_bench.cu, then timed (batches of 5, median) with and
// without the binning kernel, beside segment_softmax_out on the same tensors.
//
// Usage: cuda_ragged_lanes_proto [--only SUBSTR[;SUBSTR...]] [--dtype float32|bfloat16] [--reps N]
// Prints:
//   bins|<case>|<dtype>|<dir>|<segments per list>|<rows per list>
//   check|<case>|<dtype>|<dir>|<variant>|<max abs err vs CPU>|<tolerance>|ok or MISMATCH
//   case|<case>|<dtype>|<dir>|<variant>|<ms>|<% of copy>|<copy GB/s>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/cuda_bench_common.cuh"
#include "bench/ragged_degrees.h"
#include "segred/segred.h"
#include "src/ops/segment_softmax_tiles.h"

using namespace segred;
using detail::SsKind;

namespace {

constexpr int kLists = 5;
constexpr int kBlockMin = 1024;  // rows from which a segment is a whole block's
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

struct Bins {
  int64_t* start;  // kLists x S: a list's segments' first rows
  int* len;        // kLists x S: their lengths
  unsigned* ctl;   // [0, kLists): counts; [kLists]: the block list's cursor
  int64_t S;
};

__device__ int list_of(int64_t L, int rr) {
  if (L <= 0) return -1;  // an empty segment has no rows to write
  if (L <= rr / 4) return 0;
  if (L <= rr / 2) return 1;
  if (L <= rr) return 2;
  return L < kBlockMin ? 3 : 4;
}

// One thread a segment; whole warps (lanes past S take no list), so the match and
// the shuffle see all 32 lanes. Places are counted per warp (match), then per block
// (shared-memory atomics), then one global atomic per block and list: ~5 global
// atomics a block of 256 segments, not one a segment.
__global__ void __launch_bounds__(256) bin_kernel(const int64_t* off, int64_t S, int rr, Bins b) {
  __shared__ unsigned block_n[kLists], block_base[kLists];
  if (threadIdx.x < kLists) block_n[threadIdx.x] = 0;
  __syncthreads();
  const int64_t s = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t st = 0, L = 0;
  if (s < S) {
    st = off[s];
    L = off[s + 1] - st;
  }
  const int list = s < S ? list_of(L, rr) : -1;
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
  const uint4* in0;  // x (forward) or g
  const uint4* in1;  // y (backward)
  uint4* out;
};

// Lists 0-2: a warp takes G = 32 / LPR segments of one list; lane group gi holds segment
// gi's rows in registers (RR at most; the loops stop at the warp's longest).
template <SsKind K, class T, int RR>
__device__ void short_item(const Ctx<K, T>& c, const int64_t* st_list, const int* len_list, unsigned count,
                           unsigned item) {
  using C = Ctx<K, T>;
  using P = typename C::P;
  constexpr int LPR = C::LPR, NV = C::NV, G = 32 / LPR;
  const int lane = int(threadIdx.x & 31), slot = lane % LPR;
  const unsigned idx = item * G + unsigned(lane / LPR);
  int L = 0;
  int64_t st = 0;
  if (idx < count) st = st_list[idx], L = len_list[idx];
  const int lmax = __reduce_max_sync(0xffffffffu, unsigned(L));
  const int64_t v = st * LPR + slot;  // 16-byte vector of row 0
  uint4 a[RR], b[P::kFwd ? 1 : RR];
#pragma unroll
  for (int r = 0; r < RR; ++r) {
    if (r >= lmax) break;
    if (r < L) {
      a[r] = __ldcs(c.in0 + v + r * LPR);
      if constexpr (!P::kFwd) b[r] = __ldcs(c.in1 + v + r * LPR);
    }
  }
  typename P::Prep pr[NV];
  if constexpr (P::kFwd) {
    // Two passes over the registers: m = max (NaN never wins), then s = the sum of
    // 1 where x == m, exp(x - m) elsewhere, nothing for -inf (Pol::add's statistic).
    float m[NV], s[NV];
#pragma unroll
    for (int k = 0; k < NV; ++k) m[k] = -INFINITY, s[k] = 0.f;
#pragma unroll
    for (int r = 0; r < RR; ++r) {
      if (r >= lmax) break;
      if (r < L) {
        float f[NV];
        Lane<T>::unpack(a[r], f);
#pragma unroll
        for (int k = 0; k < NV; ++k) m[k] = f[k] > m[k] ? f[k] : m[k];
      }
    }
#pragma unroll
    for (int r = 0; r < RR; ++r) {
      if (r >= lmax) break;
      if (r < L) {
        float f[NV];
        Lane<T>::unpack(a[r], f);
#pragma unroll
        for (int k = 0; k < NV; ++k) {
          const float e = ops::ss::ss_exp_stat(f[k] - m[k]);
          s[k] += f[k] == -INFINITY ? 0.f : (f[k] == m[k] ? 1.f : e);
        }
      }
    }
#pragma unroll
    for (int k = 0; k < NV; ++k) pr[k] = P::prep(typename P::Stat{m[k], s[k]});
  } else {
    float d[NV];
#pragma unroll
    for (int k = 0; k < NV; ++k) d[k] = 0.f;
#pragma unroll
    for (int r = 0; r < RR; ++r) {
      if (r >= lmax) break;
      if (r < L) {
        float g[NV], y[NV];
        Lane<T>::unpack(a[r], g);
        Lane<T>::unpack(b[r], y);
#pragma unroll
        for (int k = 0; k < NV; ++k) P::add(d[k], g[k], y[k]);
      }
    }
#pragma unroll
    for (int k = 0; k < NV; ++k) pr[k] = P::prep(d[k]);
  }
#pragma unroll
  for (int r = 0; r < RR; ++r) {
    if (r >= lmax) break;
    if (r < L) {
      float f[NV], y[NV], o[NV];
      Lane<T>::unpack(a[r], f);
      if constexpr (!P::kFwd) Lane<T>::unpack(b[r], y);
#pragma unroll
      for (int k = 0; k < NV; ++k) o[k] = P::apply(f[k], P::kFwd ? 0.f : y[k], pr[k]);
      __stcs(c.out + v + r * LPR, Lane<T>::pack(o));
    }
  }
}

// Lists 3 and 4: NT threads (a warp or the block) on one segment: the online statistic
// over rows tid / LPR, + NT / LPR, ..., merged over the lanes of the same slot
// (butterfly: Pol::combine is commutative, so every lane ends with the same bits), then
// over the warps in a fixed order through shared memory; then the rows again (L1 / L2)
// for the output.
template <SsKind K, class T, bool kBlock>
__device__ void group_item(const Ctx<K, T>& c, int64_t st, int L,
                           typename Ctx<K, T>::Stat (*red)[Ctx<K, T>::LPR][Ctx<K, T>::NV]) {
  using C = Ctx<K, T>;
  using P = typename C::P;
  using Stat = typename C::Stat;
  constexpr int LPR = C::LPR, NV = C::NV, NT = kBlock ? kThreads : 32, RPI = NT / LPR, U = P::kFwd ? 8 : 4;
  const int tid = kBlock ? int(threadIdx.x) : int(threadIdx.x & 31), slot = tid % LPR, r0 = tid / LPR;
  const int64_t v = st * LPR + slot;
  Stat t[NV];
#pragma unroll
  for (int k = 0; k < NV; ++k) t[k] = P::identity();
  for (int rb = r0; rb < L; rb += U * RPI) {
    uint4 a[U], b[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int r = rb + u * RPI;
      if (r < L) {
        a[u] = c.in0[v + int64_t(r) * LPR];
        if constexpr (!P::kFwd) b[u] = c.in1[v + int64_t(r) * LPR];
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (rb + u * RPI < L) {
        float f[NV], y[NV];
        Lane<T>::unpack(a[u], f);
        if constexpr (!P::kFwd) Lane<T>::unpack(b[u], y);
#pragma unroll
        for (int k = 0; k < NV; ++k) P::add(t[k], f[k], P::kFwd ? 0.f : y[k]);
      }
    }
  }
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
  if constexpr (kBlock) {
    const int warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
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
  typename P::Prep pr[NV];
#pragma unroll
  for (int k = 0; k < NV; ++k) pr[k] = P::prep(t[k]);
  for (int r = r0; r < L; r += RPI) {
    const uint4 a = c.in0[v + int64_t(r) * LPR];
    float f[NV], y[NV], o[NV];
    Lane<T>::unpack(a, f);
    if constexpr (!P::kFwd) Lane<T>::unpack(c.in1[v + int64_t(r) * LPR], y);
#pragma unroll
    for (int k = 0; k < NV; ++k) o[k] = P::apply(f[k], P::kFwd ? 0.f : y[k], pr[k]);
    __stcs(c.out + v + int64_t(r) * LPR, Lane<T>::pack(o));
  }
}

// Persistent blocks: the block list first (atomic cursor: the longest segments start at
// once), then each warp independently the warp list and the short lists (longest list
// first), items strided over the grid's warps.
template <SsKind K, class T, int RR>
__global__ void __launch_bounds__(kThreads, 2) lanes_kernel(Ctx<K, T> c, Bins b) {
  using C = Ctx<K, T>;
  __shared__ typename C::Stat red[kWarps][C::LPR][C::NV];
  __shared__ unsigned item_sh;
  const unsigned* cnt = b.ctl;
  for (;;) {
    if (threadIdx.x == 0) item_sh = atomicAdd(&b.ctl[kLists], 1u);
    __syncthreads();
    const unsigned it = item_sh;
    __syncthreads();
    if (it >= cnt[4]) break;
    group_item<K, T, true>(c, b.start[4 * b.S + it], b.len[4 * b.S + it], red);
  }
  const unsigned nw = gridDim.x * kWarps, w = blockIdx.x * kWarps + (threadIdx.x >> 5);
  for (unsigned it = w; it < cnt[3]; it += nw) group_item<K, T, false>(c, b.start[3 * b.S + it], b.len[3 * b.S + it], red);
  constexpr unsigned G = 32 / C::LPR;
  const unsigned n2 = (cnt[2] + G - 1) / G, n1 = (cnt[1] + G - 1) / G, n0 = (cnt[0] + G - 1) / G;
  for (unsigned it = w; it < n2; it += nw) short_item<K, T, RR>(c, b.start + 2 * b.S, b.len + 2 * b.S, cnt[2], it);
  for (unsigned it = w; it < n1; it += nw) short_item<K, T, RR / 2>(c, b.start + b.S, b.len + b.S, cnt[1], it);
  for (unsigned it = w; it < n0; it += nw) short_item<K, T, RR / 4>(c, b.start, b.len, cnt[0], it);
}

template <SsKind K> constexpr int kRR = Ctx<K, float>::P::kFwd ? 16 : 8;

struct Proto {
  Bins b{};
  int64_t S = 0;
  const int64_t* off = nullptr;
  template <SsKind K, class T>
  int grid() const {
    int per = 0, sms = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, lanes_kernel<K, T, kRR<K>>, kThreads, 0));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    return std::max(1, per) * sms;
  }
  template <SsKind K> void bin() const {
    CK(cudaMemsetAsync(b.ctl, 0, (kLists + 1) * sizeof(unsigned)));
    bin_kernel<<<unsigned((S + 255) / 256), 256>>>(off, S, kRR<K>, b);
  }
  template <SsKind K, class T> void main(const void* in0, const void* in1, void* out, int g) const {
    CK(cudaMemsetAsync(b.ctl + kLists, 0, sizeof(unsigned)));  // the block list's cursor
    Ctx<K, T> c{static_cast<const uint4*>(in0), static_cast<const uint4*>(in1), static_cast<uint4*>(out)};
    lanes_kernel<K, T, kRR<K>><<<g, kThreads>>>(c, b);
  }
};

struct Case {
  std::string name;
  const std::vector<int64_t>* deg;
  DType dtype;
};

const char* dname(DType t) { return t == DType::Float32 ? "float32" : "bfloat16"; }

double max_abs_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double u, v;
    if (a.dtype() == DType::Float32) u = a.ptr<float>()[i], v = b.ptr<float>()[i];
    else u = double(to_float(a.ptr<bfloat16_t>()[i])), v = double(to_float(b.ptr<bfloat16_t>()[i]));
    if (std::isnan(u) && std::isnan(v)) continue;
    const double d = std::fabs(u - v);
    m = std::isnan(d) ? INFINITY : std::max(m, d);
  }
  return m;
}

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
  constexpr SsKind F = SsKind::SoftmaxFwd, B = SsKind::SoftmaxBwd;
  const int gf = p.grid<F, T>(), gb = p.grid<B, T>();
  auto pro_fwd = [&] {
    p.bin<F>();
    p.main<F, T>(x.data(), nullptr, py.data(), gf);
  };
  auto pro_bwd = [&] {
    p.bin<B>();
    p.main<B, T>(g.data(), y.data(), pgi.data(), gb);
  };
  lib_fwd();
  lib_bwd();
  pro_fwd();
  pro_bwd();
  CK(cudaDeviceSynchronize());
  CK(cudaGetLastError());
  // The bins of each direction, as counted on the device.
  for (int d = 0; d < 2; ++d) {
    if (d == 0) p.bin<F>();
    else p.bin<B>();
    std::vector<unsigned> cnt(kLists);
    CK(cudaMemcpy(cnt.data(), p.b.ctl, kLists * sizeof(unsigned), cudaMemcpyDeviceToHost));
    std::vector<int64_t> rows_in(kLists, 0);
    std::vector<int> len;
    for (int l = 0; l < kLists; ++l) {
      len.resize(cnt[size_t(l)]);
      CK(cudaMemcpy(len.data(), p.b.len + l * S, len.size() * sizeof(int), cudaMemcpyDeviceToHost));
      for (int v : len) rows_in[size_t(l)] += v;
    }
    std::printf("bins|%s|%s|%s|%u %u %u %u %u|%lld %lld %lld %lld %lld|grid %d\n", cs.name.c_str(), dname(cs.dtype),
                d ? "bwd" : "fwd", cnt[0], cnt[1], cnt[2], cnt[3], cnt[4], (long long)rows_in[0], (long long)rows_in[1],
                (long long)rows_in[2], (long long)rows_in[3], (long long)rows_in[4], d ? gb : gf);
  }
  {
    const DeviceRef host{};
    Tensor hx = Tensor::copy_to(x, host), hg = Tensor::copy_to(g, host), hy = Tensor::copy_to(y, host);
    Tensor hgi = Tensor::copy_to(gi, host), ho = Tensor::copy_to(offs, host);
    Tensor hpy = Tensor::copy_to(py, host), hpgi = Tensor::copy_to(pgi, host);
    Segments hs;
    hs.offsets = ho;
    Tensor ry = Tensor::empty(shape, cs.dtype, cpu), rgi = Tensor::empty(shape, cs.dtype, cpu);
    segment_softmax_out(SegmentSoftmaxOp::Softmax, hx, hs, ry);
    segment_softmax_backward_out(SegmentSoftmaxOp::Softmax, hg, hy, hy, hs, rgi);  // both backwards take y_lib
    const double tol = cs.dtype == DType::Float32 ? 1e-5 : 1.6e-2;
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
  auto bin_only = [&] { p.bin<F>(); };
  struct Row {
    const char* dir;
    const char* var;
    double ms;
  };
  std::vector<Row> rows_out;
  rows_out.push_back({"fwd", "library", batch_ms(lib_fwd, reps, 5)});
  rows_out.push_back({"fwd", "lanes (bins + kernel)", batch_ms(pro_fwd, reps, 5)});
  p.bin<F>();
  rows_out.push_back({"fwd", "lanes kernel only", batch_ms(pro_fwd_main, reps, 5)});
  rows_out.push_back({"fwd", "bins only", batch_ms(bin_only, reps, 5)});
  rows_out.push_back({"bwd", "library", batch_ms(lib_bwd, reps, 5)});
  rows_out.push_back({"bwd", "lanes (bins + kernel)", batch_ms(pro_bwd, reps, 5)});
  p.bin<B>();
  rows_out.push_back({"bwd", "lanes kernel only", batch_ms(pro_bwd_main, reps, 5)});
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
