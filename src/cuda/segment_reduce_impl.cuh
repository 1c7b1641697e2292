// Host side of the CUDA segment_reduce kernels: one pass = main kernel + fix-up,
// per (T, Idx). Instantiated per dtype in segment_reduce_{fwd,bwd}_<dtype>.cu so
// the instantiations compile in parallel.
#pragma once
#include <optional>
#include <string_view>

#include "segred/segment_reduce.h"
#include "segred/trace.h"
#include "src/core/segment_geometry.h"
#include "src/cuda/common.cuh"
#include "src/cuda/segment_kernels.cuh"

namespace segred::cuda {

struct LaunchCtx {
  cudaStream_t stream = nullptr;
  detail::SegmentGeometry geo;
  const void* q = nullptr;  // Idx[geo.segs + 1], device
  int64_t outer = 1, L = 0, inner = 1, S = 0;
  const char* path = "";
  Scratch* scratch = nullptr;
};

struct FwdArgs {
  LaunchCtx c;
  const void* x = nullptr;
  void* out = nullptr;
  Reduce reduce = Reduce::Sum;
  std::optional<double> initial;
};

struct BwdArgs {
  LaunchCtx c;
  const void* g = nullptr;
  const void* y = nullptr;
  const void* x = nullptr;
  void* gi = nullptr;
  Reduce reduce = Reduce::Sum;
  Tie tie = Tie::Split;
  std::optional<double> initial;
};

template <class T, class Idx> void run_fwd(const FwdArgs& a);  // T: host storage type
template <class T, class Idx> void run_bwd(const BwdArgs& a);

namespace impl {

inline void record(const char* path, int64_t grid, int block) {
  detail::record_launch(path, {grid, 1, 1}, {block, 1, 1});
}

// The W + 1 tile boundaries of the merge space (tile_i/tile_j, scratch).
template <class Idx>
void run_partition(const LaunchCtx& c, Idx*& tile_i, Idx*& tile_j) {
  const auto& g = c.geo;
  tile_i = c.scratch->alloc<Idx>(g.workers + 1);
  tile_j = c.scratch->alloc<Idx>(g.workers + 1);
  auto k = partition<Idx>;
  const int block = viable_block(k, 256, 0, 32, "partition");
  const int64_t grid = detail::ceil_div(g.workers + 1, block);
  k<<<unsigned(grid), block, 0, c.stream>>>(static_cast<const Idx*>(c.q), Idx(g.segs), Idx(g.positions),
                                            Idx(g.workers), Idx(g.items), tile_i, tile_j);
  check_launch("partition");
  record(c.path, grid, block);
}

// Main kernel + fix-up of one reduction pass (forward, or max/min stats).
template <class Fn, class Idx>
void reduce_pass(const Fn& fn, const typename Fn::Raw* x, const LaunchCtx& c) {
  using A = typename Fn::A;
  using Raw = typename Fn::Raw;
  const auto& g = c.geo;
  const Idx* q = static_cast<const Idx*>(c.q);
  const Idx W = Idx(g.workers), nseg = Idx(g.segs), inner = Idx(c.inner);
  Idx *tile_i, *tile_j;
  run_partition<Idx>(c, tile_i, tile_j);
  A* carry = c.scratch->alloc<A>(g.workers * c.inner);
  A* head = c.scratch->alloc<A>(g.workers * c.inner);
  if (g.flat) {
    auto k = flat_reduce<Fn, Idx>;
    const size_t spw = flat_smem_per_warp<Raw, Idx>();
    const int block = viable_block(k, g.block, spw, 32, "flat_reduce");
    const int64_t grid = detail::ceil_div(g.workers, block / 32);
    k<<<unsigned(grid), block, spw * (block / 32), c.stream>>>(fn, x, q, W, tile_i, tile_j, carry, head);
    check_launch("flat_reduce");
    record(c.path, grid, block);
  } else {
    constexpr int VEC = int(16 / sizeof(Raw));
    auto k = g.vec == VEC ? feat_reduce<Fn, Idx, VEC> : feat_reduce<Fn, Idx, 1>;
    const int block = viable_block(k, g.block, 0, g.group, "feat_reduce");
    const int64_t grid = detail::ceil_div(g.workers * g.slabs * g.group, block);
    k<<<unsigned(grid), block, 0, c.stream>>>(fn, x, q, W, Idx(g.slabs), g.group, inner, tile_i, tile_j, carry,
                                              head);
    check_launch("feat_reduce");
    record(c.path, grid, block);
  }
  // Fix-up of tile-crossing segments.
  unsigned* long_count = c.scratch->alloc<unsigned>(1);
  SEGRED_CUDA_CHECK(cudaMemsetAsync(long_count, 0, sizeof(unsigned), c.stream), "segment_reduce: cudaMemsetAsync");
  const int64_t max_long = g.workers / kShortFix + 1;
  Idx* long_list = c.scratch->alloc<Idx>(max_long);
  {
    auto k = fixup_short<Fn, Idx>;
    const int block = viable_block(k, 256, 0, 32, "fixup_short");
    const int64_t grid = detail::ceil_div(g.workers * c.inner, block);
    k<<<unsigned(grid), block, 0, c.stream>>>(fn, q, tile_i, tile_j, W, nseg, inner, carry, head, long_list,
                                              long_count);
    check_launch("fixup_short");
    record(c.path, grid, block);
  }
  {
    auto k = fixup_long<Fn, Idx>;
    viable_block(k, 256, 0, 256, "fixup_long");  // the tree needs all 256 threads
    k<<<unsigned(max_long), 256, 0, c.stream>>>(fn, tile_i, inner, carry, head, long_list, long_count);
    check_launch("fixup_long");
    record(c.path, max_long, 256);
  }
}

template <class Fn, class Idx>
void elementwise_pass(const Fn& fn, const typename Fn::Raw* x, typename Fn::Raw* gi, const LaunchCtx& c) {
  using Raw = typename Fn::Raw;
  const auto& g = c.geo;
  const Idx* q = static_cast<const Idx*>(c.q);
  const Idx W = Idx(g.workers);
  Idx *tile_i, *tile_j;
  run_partition<Idx>(c, tile_i, tile_j);
  if (g.flat) {
    auto k = flat_elementwise<Fn, Idx>;
    const size_t spw = flat_smem_per_warp<Raw, Idx>();
    const int block = viable_block(k, g.block, spw, 32, "flat_elementwise");
    const int64_t grid = detail::ceil_div(g.workers, block / 32);
    k<<<unsigned(grid), block, spw * (block / 32), c.stream>>>(fn, x, gi, q, W, tile_i, tile_j);
    check_launch("flat_elementwise");
    record(c.path, grid, block);
  } else {
    constexpr int VEC = int(16 / sizeof(Raw));
    auto k = g.vec == VEC ? feat_elementwise<Fn, Idx, VEC> : feat_elementwise<Fn, Idx, 1>;
    const int block = viable_block(k, g.block, 0, g.group, "feat_elementwise");
    const int64_t grid = detail::ceil_div(g.workers * g.slabs * g.group, block);
    k<<<unsigned(grid), block, 0, c.stream>>>(fn, x, gi, q, W, Idx(g.slabs), g.group, Idx(c.inner), tile_i, tile_j);
    check_launch("feat_elementwise");
    record(c.path, grid, block);
  }
}

}  // namespace impl

template <class T, class Idx>
void run_fwd(const FwdArgs& a) {
  using D = typename Dev<T>::type;
  using A = dacc_t<D>;
  const LaunchCtx& c = a.c;
  const SegMap<Idx> map{Idx(c.S), Idx(c.geo.segs)};
  auto go = [&](auto op) {
    using Op = decltype(op);
    FwdFn<D, Op, Idx> fn;
    fn.out = static_cast<D*>(a.out);
    fn.q = static_cast<const Idx*>(c.q);
    fn.map = map;
    fn.inner = Idx(c.inner);
    fn.start = a.initial ? A(*a.initial) : Op::template identity<A>();
    fn.empty_mean = a.initial ? A(*a.initial) : std::numeric_limits<A>::quiet_NaN();
    fn.mean = a.reduce == Reduce::Mean;
    impl::reduce_pass<FwdFn<D, Op, Idx>, Idx>(fn, static_cast<const D*>(a.x), c);
  };
  switch (a.reduce) {
    case Reduce::Sum:
    case Reduce::Mean: go(ops::SumTag{}); break;
    case Reduce::Prod: go(ops::ProdTag{}); break;
    case Reduce::Max: go(ops::MaxTag{}); break;
    case Reduce::Min: go(ops::MinTag{}); break;
  }
}

template <class T, class Idx>
void run_bwd(const BwdArgs& a) {
  using D = typename Dev<T>::type;
  using A = dacc_t<D>;
  const LaunchCtx& c = a.c;
  const SegMap<Idx> map{Idx(c.S), Idx(c.geo.segs)};
  const int tie = a.tie == Tie::Split ? 0 : a.tie == Tie::First ? 1 : 2;
  if (a.reduce == Reduce::Prod) {
    if constexpr (sizeof(Idx) == 8) {
      SEGRED_CUDA_CHECK(cudaMemsetAsync(a.gi, 0, size_t(c.outer * c.L * c.inner) * sizeof(D), c.stream),
                        "segment_reduce_backward: cudaMemsetAsync");
      const int64_t nwarps = c.geo.workers;
      if (nwarps == 0) return;
      auto k = prod_bwd_warp<D>;
      const int block = viable_block(k, c.geo.block, 0, 32, "prod_bwd_warp");
      const int64_t grid = detail::ceil_div(nwarps * 32, block);
      const A start = a.initial ? A(*a.initial) : A(1);
      A* pre = sizeof(D) < sizeof(A) ? c.scratch->alloc<A>(c.outer * c.L * c.inner) : nullptr;
      k<<<unsigned(grid), block, 0, c.stream>>>(static_cast<const D*>(a.g), static_cast<const D*>(a.x),
                                                static_cast<D*>(a.gi), static_cast<const int64_t*>(c.q), c.S, c.inner,
                                                c.geo.slabs, start, nwarps, pre);
      check_launch("prod_bwd_warp");
      impl::record(c.path, grid, block);
    }
    return;
  }
  Idx* stats = nullptr;
  if (a.reduce == Reduce::Max || a.reduce == Reduce::Min) {
    stats = c.scratch->alloc<Idx>(c.outer * c.S * c.inner);
    StatsFn<D, Idx> sf;
    sf.y = static_cast<const D*>(a.y);
    sf.stats = stats;
    sf.map = map;
    sf.inner = Idx(c.inner);
    sf.tie = tie;
    impl::reduce_pass<StatsFn<D, Idx>, Idx>(sf, static_cast<const D*>(a.x), c);
  }
  BwdFn<D, Idx> fn;
  fn.g = static_cast<const D*>(a.g);
  fn.y = static_cast<const D*>(a.y);
  fn.stats = stats;
  fn.q = static_cast<const Idx*>(c.q);
  fn.map = map;
  fn.inner = Idx(c.inner);
  fn.kind = a.reduce == Reduce::Sum ? 0 : a.reduce == Reduce::Mean ? 1 : 2;
  fn.tie = tie;
  impl::elementwise_pass<BwdFn<D, Idx>, Idx>(fn, static_cast<const D*>(a.x), static_cast<D*>(a.gi), c);
}

}  // namespace segred::cuda
