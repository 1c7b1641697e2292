// CUDA kernels and launch code of the ragged softmax family: the block algorithm
// of src/ops/segment_softmax_tiles.h (its header has the phases and the math; the
// work split is src/core/segment_softmax_geometry.h) with __syncthreads and warp
// shuffles between the phases.
//
// One call (segment_softmax.cu validates, makes inputs contiguous, picks T and Idx):
//   prepare    segment_reduce's cooperative kernel: merge space q, tile partition,
//              fix-up counter (src/cuda/merge_space.cuh).
//   tile       one block per (tile, slab): stage, walk, scan, publish, edges,
//              copy-out (tile_kernel).
//   fixup      segment_reduce's fix-up kernel with FixFn: the statistics of the
//              segments that cross tile edges, in tile order; logsumexp: the
//              outputs, else fin[tile that completes the segment].
//   crossing   softmax / log_softmax, both directions: the rows of crossing
//              segments from fin (re-read from global memory).
// logsumexp backward has no statistic: prepare and tile only.
//
// Instantiated per (direction, dtype) in segment_softmax_{fwd,bwd}_<dtype>.cu.
#pragma once
#include <map>
#include <mutex>
#include <tuple>

#include "segred/segment_softmax.h"
#include "segred/trace.h"
#include "src/core/segment_softmax_geometry.h"
#include "src/cuda/common.cuh"
#include "src/cuda/merge_space.cuh"
#include "src/cuda/segment_softmax_lanes.cuh"
#include "src/ops/segment_softmax_tiles.h"

namespace segred::cuda {

// Everything a (direction, dtype) instantiation needs for one call.
struct SsArgs {
  cudaStream_t stream = nullptr;
  const char* op = "";
  SegmentSoftmaxProblem problem;
  bool aligned = true;  // every staged input and the output are 16-byte aligned
  bool lanes = false;   // the plan chose the lane-group path (segment_softmax_lanes.cuh)
  const detail::SegmentLayout* lay = nullptr;
  const Segments* seg = nullptr;
  Scratch* scratch = nullptr;
  const void* in0 = nullptr;   // x (forward, logsumexp backward) or g
  const void* in1 = nullptr;   // y (softmax / log_softmax backward)
  const void* seg0 = nullptr;  // logsumexp backward: g, y (per segment)
  const void* seg1 = nullptr;
  void* out = nullptr;
};

template <class T, class Idx> void run_segment_softmax_fwd(const SsArgs& a);  // T: host storage type
template <class T, class Idx> void run_segment_softmax_bwd(const SsArgs& a);

namespace ssk {

namespace tiles = ops::ss;
using detail::SsKind;

// Storage <-> accumulation conversions of the device (host bodies never run).
template <class D>
struct DevCv {
  using A = dacc_t<D>;
  static __host__ __device__ __forceinline__ A ld(D v) {
#if defined(__CUDA_ARCH__)
    return cuda::ld(v);
#else
    (void)v;
    return A(0);
#endif
  }
  static __host__ __device__ __forceinline__ D st(A v) {
#if defined(__CUDA_ARCH__)
    return cuda::st<D>(v);
#else
    (void)v;
    return D{};
#endif
  }
};

__device__ __forceinline__ float shfl_up_stat(float v, int d) { return __shfl_up_sync(kFull, v, d); }
__device__ __forceinline__ double shfl_up_stat(double v, int d) { return __shfl_up_sync(kFull, v, d); }
template <class A>
__device__ __forceinline__ tiles::MS<A> shfl_up_stat(const tiles::MS<A>& v, int d) {
  return tiles::MS<A>{__shfl_up_sync(kFull, v.m, d), __shfl_up_sync(kFull, v.s, d)};
}

template <SsKind K, class D, class Idx, int V>
__global__ void __launch_bounds__(256, 4) tile_kernel(tiles::Params<Idx> p) {
  using A = dacc_t<D>;
  using Cv = DevCv<D>;
  using P = tiles::Pol<K, A>;
  using Stat = typename P::Stat;
  extern __shared__ __align__(16) unsigned char ss_smem[];
  const int tid = int(threadIdx.x), nthr = int(blockDim.x);
  const tiles::Tile<Idx> t = tiles::tile_of(p, Idx(blockIdx.x));
  const tiles::Smem sm(ss_smem, p);
  tiles::stage<K, D>(p, t, sm, tid, nthr);
  __syncthreads();
  if constexpr (K == SsKind::LseBwd) {
    tiles::walk_lse_bwd<D, A, Cv, V>(p, t, sm, tid);
    __syncthreads();
    tiles::finish_tile<K, D, A, Cv>(p, t, sm, tid, nthr);
  } else {
    tiles::Lane<Stat, V> ln;
    tiles::walk<K, D, A, Cv, V>(ln, p, t, sm, tid);
    // Segmented scan over the chunks of each feature lane: inside the warp ...
    // (values move only when a lane of the warp takes them: most chunks' keys differ)
    const int G = p.lanes, lane = tid & 31;
    for (int d = G; d < 32; d <<= 1) {
      const int nk = __shfl_up_sync(kFull, ln.key, d);
      const bool take = lane >= d && nk == ln.key;
      if (__any_sync(kFull, take)) {
        Stat nv[V];
#pragma unroll
        for (int i = 0; i < V; ++i) nv[i] = shfl_up_stat(ln.sv[i], d);
        tiles::scan_take<K, A, V>(ln, nk, nv, take);
      }
    }
    // ... then across warps through shared memory.
    tiles::warp_total_out<K, A, V>(ln, sm, tid, G);
    __syncthreads();
    const int k0 = __shfl_sync(kFull, ln.key, lane % G);
    tiles::warp_carry_in<K, A, V>(ln, sm, tid, G, k0);
    if (G < 32) {  // exclusive value: chunk c - 1's inclusive (the warp's first chunk keeps the carry)
      const int nk = __shfl_up_sync(kFull, ln.key, G);
      if (lane >= G) ln.xkey = nk;
      const bool need = lane >= G && ln.first_closed && nk == ln.kf;  // the only use of xv (publish)
      if (__any_sync(kFull, need)) {
        Stat nv[V];
#pragma unroll
        for (int i = 0; i < V; ++i) nv[i] = shfl_up_stat(ln.sv[i], G);
        if (lane >= G)
#pragma unroll
          for (int i = 0; i < V; ++i) ln.xv[i] = nv[i];
      }
    }
    __syncthreads();  // the warp totals are read: publish reuses their shared memory
    tiles::publish<K, D, A, Cv, V>(ln, p, t, sm, tid);
    if constexpr (P::kRowOut) {
      __syncthreads();
      tiles::write_edges<K, D, A, Cv, V>(ln, p, t, sm, tid);
    }
    __syncthreads();
    tiles::finish_tile<K, D, A, Cv>(p, t, sm, tid, nthr);
  }
}

constexpr int kMaxSlab = 128;  // W <= 32 * V <= 128 features

template <SsKind K, class D, class Idx>
__global__ void __launch_bounds__(256) crossing_kernel(tiles::Params<Idx> p) {
  using A = dacc_t<D>;
  using P = tiles::Pol<K, A>;
  __shared__ typename P::Prep prep[2 * kMaxSlab];
  const int tid = int(threadIdx.x), nthr = int(blockDim.x);
  const tiles::Tile<Idx> t = tiles::tile_of(p, Idx(blockIdx.x));
  const tiles::Crossing<Idx> c = tiles::crossing_ranges(p, t);
  if (c.n == 0) return;  // the same for the whole block
  tiles::crossing_prep<K, A>(p, t, c, prep, tid, nthr);
  __syncthreads();
  tiles::crossing_apply<K, D, A, DevCv<D>>(p, t, c, prep, tid, nthr);
}

// The functor segment_reduce's fix-up kernel calls (src/cuda/segment_kernels.cuh).
template <SsKind K, class D, class Idx>
struct FixFn {
  using P = tiles::Pol<K, dacc_t<D>>;
  using A = typename P::Stat;
  tiles::Params<Idx> p;
  __device__ __forceinline__ A identity() const { return P::identity(); }
  __device__ __forceinline__ A combine(A a, A b) const { return P::combine(a, b); }
  __device__ __forceinline__ void finish(Idx v, Idx f, A acc) const {
    tiles::finish_crossing<K, D, dacc_t<D>, DevCv<D>>(p, v, f, acc);
  }
};

// Launch viability (DESIGN.md): occupancy must report a resident block. Above
// 48 KiB of dynamic shared memory (the V = 4 middle-piece slots: up to
// detail::kSsSmemLimit) the kernel opts in first, so the occupancy query sees the
// launch as it will run. The opt-in only ever grows per kernel (a cached answer
// for a smaller size stays valid after a larger one set the attribute).
template <class Kernel>
bool block_viable(Kernel k, int block, int64_t smem) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, int64_t>, bool> cache;
  static std::map<const void*, int64_t> opted;  // the attribute each kernel was set to
  const void* kp = reinterpret_cast<const void*>(k);
  const auto key = std::make_tuple(kp, block, smem);
  std::lock_guard<std::mutex> lk(mu);
  const auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  int64_t& cur = opted[kp];
  if (smem > 48 * 1024 && smem > cur) {
    if (cudaFuncSetAttribute(kp, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess) {
      cudaGetLastError();
      cache[key] = false;
      return false;
    }
    cur = smem;
  }
  int n = 0;
  const bool ok = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, block, size_t(smem)) == cudaSuccess && n >= 1;
  if (!ok) cudaGetLastError();
  cache[key] = ok;
  return ok;
}

template <SsKind K, class T, class Idx>
void run_kind(const SsArgs& a) {
  using D = typename Dev<T>::type;
  using A = dacc_t<D>;
  using P = tiles::Pol<K, A>;
  using Stat = typename P::Stat;
  constexpr int VMAX = sizeof(D) == 8 ? 2 : 4;
  if constexpr (K != SsKind::LseFwd && K != SsKind::LseBwd && sizeof(D) != 8) {
    if (a.lanes) return ssl::run<K, D>(a);
  }
  const SegmentSoftmaxProblem& pr = a.problem;
  const char* path = detail::segment_softmax_cuda_path(pr.op, pr.direction, sizeof(Idx) * 8).data();
  // Geometry and kernel: a smaller block (and tile) when occupancy reports none.
  detail::SegmentSoftmaxGeometry g;
  void (*kern)(tiles::Params<Idx>) = nullptr;
  for (int b = detail::ss_start_block();; b /= 2) {
    g = detail::segment_softmax_geometry(pr, a.aligned, b);
    kern = g.vec == VMAX ? tile_kernel<K, D, Idx, VMAX> : tile_kernel<K, D, Idx, 1>;
    if (block_viable(kern, b, g.smem_bytes)) break;
    SEGRED_CHECK(b > 32, DeviceError, a.op, ": no viable launch configuration for the tile kernel (occupancy "
                 "reports 0 resident blocks down to 32 threads)");
  }
  // Merge space, partition and fix-up counter (segment_reduce's prepare kernel).
  LaunchCtx c;
  c.stream = a.stream;
  c.geo.segs = g.segs;
  c.geo.positions = g.positions;
  c.geo.workers = g.tiles;
  c.geo.items = g.items;
  c.geo.index_bits = int(sizeof(Idx) * 8);
  c.outer = pr.outer;
  c.L = pr.axis_len;
  c.inner = pr.inner;
  c.S = pr.num_segments;
  c.path = path;
  const int64_t nstat = g.tiles * pr.inner;
  const int nstats = P::kReduce ? (P::kDeferred ? 3 : 2) : 0;
  Arena arena(*a.scratch, merge_space_bytes<Idx>(*a.lay, *a.seg, c.geo) + nstats * Arena::bytes<Stat>(nstat));
  c.arena = &arena;
  prepare_merge_space<Idx>(a.op, *a.lay, *a.seg, c);
  tiles::Params<Idx> p = tiles::params_of<Idx>(g, pr.num_segments, pr.inner);
  p.in0 = a.in0;
  p.in1 = a.in1;
  p.seg0 = a.seg0;
  p.seg1 = a.seg1;
  p.out = a.out;
  p.q = static_cast<const Idx*>(c.q);
  p.tile_i = static_cast<const Idx*>(c.tile_i);
  p.tile_j = static_cast<const Idx*>(c.tile_j);
  if constexpr (P::kReduce) {
    p.carry = arena.take<Stat>(nstat);
    p.head = arena.take<Stat>(nstat);
    if constexpr (P::kDeferred) p.fin = arena.take<Stat>(nstat);
  }
  kern<<<unsigned(g.grid), g.block, size_t(g.smem_bytes), a.stream>>>(p);
  check_launch("segment_softmax tile_kernel");
  impl::record(path, g.grid, g.block);
  if constexpr (P::kReduce) {
    int FX = 1;
    while (FX < 32 && FX < pr.inner) FX *= 2;
    const FixFn<K, D, Idx> fn{p};
    impl::launch_coop(fixup<FixFn<K, D, Idx>, Idx>, detail::ceil_div(g.tiles * FX, 256), 256, c, "fixup", fn, p.q,
                      p.tile_i, p.tile_j, Idx(g.tiles), Idx(g.items), Idx(pr.inner), FX,
                      static_cast<const Stat*>(p.carry), static_cast<const Stat*>(p.head),
                      static_cast<Idx*>(c.long_list), c.long_count);
  }
  if constexpr (P::kDeferred) {
    auto k = crossing_kernel<K, D, Idx>;
    const int block = viable_block(k, 256, 0, 32, "segment_softmax crossing_kernel");
    k<<<unsigned(g.grid), block, 0, a.stream>>>(p);
    check_launch("segment_softmax crossing_kernel");
    impl::record(path, g.grid, block);
  }
}

}  // namespace ssk

namespace ssk {
// The three kinds of one direction (base: SoftmaxFwd or SoftmaxBwd), by op.
template <class T, class Idx, int Base>
void run_direction(const SsArgs& a) {
  switch (a.problem.op) {
    case SegmentSoftmaxOp::Softmax: run_kind<SsKind(Base), T, Idx>(a); break;
    case SegmentSoftmaxOp::LogSoftmax: run_kind<SsKind(Base + 1), T, Idx>(a); break;
    case SegmentSoftmaxOp::LogSumExp: run_kind<SsKind(Base + 2), T, Idx>(a); break;
  }
}
}  // namespace ssk

template <class T, class Idx>
void run_segment_softmax_fwd(const SsArgs& a) { ssk::run_direction<T, Idx, int(detail::SsKind::SoftmaxFwd)>(a); }
template <class T, class Idx>
void run_segment_softmax_bwd(const SsArgs& a) { ssk::run_direction<T, Idx, int(detail::SsKind::SoftmaxBwd)>(a); }

}  // namespace segred::cuda
