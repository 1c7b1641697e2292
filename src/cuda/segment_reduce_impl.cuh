// Host side of the CUDA segment_reduce kernels: per (T, Idx), the main kernel(s)
// and the fix-up of one call. The merge space q, the tile partition and the
// fix-up counter come from the prepare kernel (src/cuda/segment_reduce.cu), once
// per call, shared by both passes of the max/min backward. Every scratch buffer
// of a call is carved from one allocation (Arena). Instantiated per dtype in
// segment_reduce_{fwd,bwd}_<dtype>.cu so the instantiations compile in parallel.
#pragma once
#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <utility>

#include "segred/segment_reduce.h"
#include "segred/trace.h"
#include "src/core/segment_geometry.h"
#include "src/cuda/common.cuh"
#include "src/cuda/segment_kernels.cuh"
#include "src/cuda/segment_maxbwd.cuh"

namespace segred::cuda {

// The scratch of one call: one stream-ordered allocation of the size the caller
// computed (bytes()), handed out in 256-byte aligned pieces; a request that does
// not fit gets its own allocation, so a short estimate costs time, never memory
// safety.
class Arena {
 public:
  template <class T>
  static size_t bytes(int64_t n) {
    return (size_t(n > 0 ? n : 1) * sizeof(T) + 255) / 256 * 256;
  }
  Arena(Scratch& s, size_t total) : s_(s), left_(total) {
    if (total) base_ = s.alloc<char>(int64_t(total));
  }
  template <class T>
  T* take(int64_t n) {
    const size_t b = bytes<T>(n);
    if (b > left_) return s_.alloc<T>(n);
    T* p = reinterpret_cast<T*>(base_);
    base_ += b;
    left_ -= b;
    return p;
  }

 private:
  Scratch& s_;
  char* base_ = nullptr;
  size_t left_ = 0;
};

struct LaunchCtx {
  cudaStream_t stream = nullptr;
  detail::SegmentGeometry geo;
  const void* q = nullptr;       // Idx[geo.segs + 1], device
  const void* tile_i = nullptr;  // Idx[geo.workers + 1]: tile starts (not for prod backward)
  const void* tile_j = nullptr;
  void* long_list = nullptr;         // Idx[geo.workers / kShortFix + 1]
  unsigned* long_count = nullptr;    // [0] 0 after prepare: one reduction pass (one fixup) per call;
                                     // [1] prepare's long-segment flag (fixup_tree's early exit)
  unsigned long long* fuse_pub = nullptr;  // [2 (geo.workers + 1)] 0 after prepare: flat_reduce's fused
                                           // fix-up slots (pub, then part; src/cuda/fused_fixup_rule.h)
  int64_t outer = 1, L = 0, inner = 1, S = 0;
  const char* path = "";
  bool fixup_choice = false;  // the call has the fused / fixup_tree choice (has_fixup_variant)
  int pdl = 0;                // the main kernel after prepare as a programmatic dependent launch:
                              // 0 never, 1 where it pays (pdl_pays), 2 always
  Arena* arena = nullptr;
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
// Resident blocks of detail::kBlock threads per SM of the feature kernel a call with
// records runs (feat_reduce of the forward's reduce; feat_maxmin_bwd), `vec`: the vector
// instantiation (the forward: SegmentGeometry::vec; the backward: full vectors or not).
// SegmentProblem::feat_blocks_per_sm, the wave fit's input (session 26,
// src/core/segment_geometry.h). 0 when the query fails. Instantiated with run_fwd / run_bwd.
template <class T, class Idx> int feat_fwd_blocks_per_sm(Reduce reduce, int vec);
template <class T, class Idx> int feat_bwd_blocks_per_sm(int vec);

namespace impl {

inline void record(const char* path, int64_t grid, int block, std::string_view variant = {}) {
  detail::record_launch(path, {grid, 1, 1}, {block, 1, 1}, variant);
}

// Blocks of `block` threads a cooperative launch of `kernel` may use: the
// resident blocks per SM the occupancy query reports times the SMs. Cached per
// (kernel, device); launch viability (DESIGN.md) is the occupancy >= 1 check.
template <class Kernel>
int64_t coop_capacity(Kernel kernel, int block, const char* name) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, int64_t> cache;
  int dev = 0;
  SEGRED_CUDA_CHECK(cudaGetDevice(&dev), "segment_reduce: cudaGetDevice");
  const auto key = std::make_pair(reinterpret_cast<const void*>(kernel), dev);
  {
    std::lock_guard<std::mutex> lk(mu);
    const auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  int occ = 0, sms = 0, coop = 0;
  SEGRED_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kernel, block, 0),
                    detail::cat("segment_reduce: occupancy of ", name));
  SEGRED_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "segment_reduce: device query");
  SEGRED_CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev), "segment_reduce: device query");
  SEGRED_CHECK(occ >= 1, DeviceError, "segment_reduce: no viable launch configuration for ", name,
               " (occupancy reports 0 resident blocks of ", block, " threads)");
  SEGRED_CHECK(coop != 0, DeviceError, "segment_reduce: the device does not support cooperative launches (", name, ")");
  const int64_t cap = int64_t(sms) * occ;
  std::lock_guard<std::mutex> lk(mu);
  cache[key] = cap;
  return cap;
}

// Resident blocks per SM of `kernel` at `block` threads, no dynamic shared memory
// (the occupancy query, cached per kernel and device); 0 when the query fails.
template <class Kernel>
int resident_blocks(Kernel kernel, int block) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, int> cache;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  const auto key = std::make_pair(reinterpret_cast<const void*>(kernel), dev);
  std::lock_guard<std::mutex> lk(mu);
  const auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, block, 0) != cudaSuccess) {
    cudaGetLastError();
    n = 0;
  }
  cache[key] = n;
  return n;
}

// Cooperative launch of a grid-stride kernel with `want` blocks (clamped to
// [1, capacity]). If the driver finds the grid too large to be co-resident (a
// tool such as compute-sanitizer may change a kernel's resources), half of it is
// tried: every cooperative kernel here is correct for any grid size, and the
// driver accepts only grids it can keep resident.
template <class... Exp, class... Act>
void launch_coop(void (*kernel)(Exp...), int64_t want, int block, const LaunchCtx& c, const char* name,
                 const Act&... args) {
  const int64_t cap = coop_capacity(kernel, block, name);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(std::clamp<int64_t>(want, 1, cap)));
  cfg.blockDim = dim3(unsigned(block));
  cfg.dynamicSmemBytes = 0;
  cfg.stream = c.stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  for (;;) {
    const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, args...);
    if (e == cudaSuccess) break;
    cudaGetLastError();
    SEGRED_CHECK(e == cudaErrorCooperativeLaunchTooLarge && cfg.gridDim.x > 1, DeviceError,
                 "segment_reduce: launch of ", name, " failed: ", cudaGetErrorString(e));
    cfg.gridDim.x /= 2;
  }
  check_launch(name);
  record(c.path, cfg.gridDim.x, block);
}

// The main kernel of a call, queued right after prepare: a programmatic
// dependent launch where c says so (c.pdl; src/cuda/common.cuh).
template <class... Exp, class... Act>
void launch_main(const LaunchCtx& c, void (*k)(Exp...), int64_t grid, int block, size_t smem, const Act&... args) {
  const bool pdl = c.pdl == 2 || (c.pdl == 1 && pdl_pays(k, grid, block, smem));
  SEGRED_CUDA_CHECK(launch_after_prior(k, grid, block, smem, c.stream, pdl, args...),
                    "segment_reduce: launch of the main kernel");
}

// How flat_reduce reads the full tiles that hold no segment end: the plan's
// form (SegmentGeometry::flat_form, flat_form_rule in src/core/segment_geometry.h)
// where Fn has it; the passes that are not forwards have the staged form only.
template <class Fn>
FlatForm flat_form(int planned) {
  if (!kFlatFixedWalk<Fn>) return FlatForm::Staged;  // not a forward
  if (planned == 2) return FlatForm::Coalesced;
  return kFlatLaneForm<Fn> ? FlatForm::Lane : FlatForm::Staged;
}
// The flat_reduce instantiation of a form (only the forms Fn has are instantiated).
template <class Fn, class Idx>
auto flat_reduce_kernel(FlatForm f) {
  if constexpr (!kFlatFixedWalk<Fn>) {
    return flat_reduce<Fn, Idx, FlatForm::Staged>;
  } else {
    if (f == FlatForm::Coalesced) return flat_reduce<Fn, Idx, FlatForm::Coalesced>;
    if constexpr (kFlatLaneForm<Fn>) {
      return flat_reduce<Fn, Idx, FlatForm::Lane>;  // 16-bit forwards: lane-contiguous, never staged
    } else {
      return flat_reduce<Fn, Idx, FlatForm::Staged>;
    }
  }
}

// Features a lane of the forward's half vectors (8-byte loads; feat_vec_rule):
// 16-bit and float32 types.
template <class Raw>
constexpr bool kHasHalfVec = sizeof(Raw) == 2 || sizeof(Raw) == 4;
template <class Raw>
constexpr int kHalfVec = int(8 / sizeof(Raw));
// The feat_reduce instantiation of a vector width (SegmentGeometry::vec): full
// 16-byte vectors, one feature a lane, and for 16-bit and float32 types half vectors.
template <class Fn, class Idx>
auto feat_reduce_kernel(int vec) {
  using Raw = typename Fn::Raw;
  constexpr int VEC = int(16 / sizeof(Raw));
  if constexpr (kHasHalfVec<Raw>) {
    if (vec == kHalfVec<Raw>) return feat_reduce<Fn, Idx, kHalfVec<Raw>>;
  }
  return vec == VEC ? feat_reduce<Fn, Idx, VEC> : feat_reduce<Fn, Idx, 1>;
}

// The feat_maxmin_bwd instantiation of a vector width: as feat_reduce_kernel's
// (half vectors only when forced: feat_vec_rule, session 30).
template <class T, class Idx>
auto feat_maxmin_bwd_kernel(int vec) {
  constexpr int VEC = int(16 / sizeof(T));
  if constexpr (kHasHalfVec<T>) {
    if (vec == kHalfVec<T>) return feat_maxmin_bwd<T, Idx, kHalfVec<T>>;
  }
  return vec == VEC ? feat_maxmin_bwd<T, Idx, VEC> : feat_maxmin_bwd<T, Idx, 1>;
}

// Main kernel + fix-up of one reduction pass (forward, or max/min stats).
template <class Fn, class Idx>
void reduce_pass(const Fn& fn, const typename Fn::Raw* x, const LaunchCtx& c) {
  using A = typename Fn::A;
  using Raw = typename Fn::Raw;
  const auto& g = c.geo;
  const Idx* q = static_cast<const Idx*>(c.q);
  const Idx* tile_i = static_cast<const Idx*>(c.tile_i);
  const Idx* tile_j = static_cast<const Idx*>(c.tile_j);
  const Idx W = Idx(g.workers), inner = Idx(c.inner);
  A* carry = c.arena->take<A>(g.workers * c.inner);
  A* head = c.arena->take<A>(g.workers * c.inner);
  if (g.flat) {
    auto k = flat_reduce_kernel<Fn, Idx>(flat_form<Fn>(g.flat_form));
    const size_t spw = flat_smem_per_warp<Raw, Idx>();
    const int block = viable_block(k, g.block, spw, 32, "flat_reduce");
    const int64_t grid = detail::ceil_div(g.workers, block / 32);
    // The fix-up fused into flat_reduce (session 12) where the plan says so
    // (segment_geometry.h, fused_fixup_rule): no fixup_tree launch. double accumulators
    // keep the launch (a value and its flag must fit one 64-bit store). prepare
    // takes and zeroes the slots only for a geometry with the fused variant.
    const bool fused = sizeof(A) == 4 && g.fused_fixup && c.fuse_pub != nullptr;
    FuseFix<Idx> fz;
    if (fused) fz = FuseFix<Idx>{c.fuse_pub, c.fuse_pub + (g.workers + 1), Idx(g.items), Idx(g.segs)};
    launch_main(c, k, grid, block, spw * (block / 32), fn, x, q, W, Idx(g.positions), tile_i,
                tile_j, carry, head, fz, g.flat_ended == 1);
    check_launch("flat_reduce");
    // The variant that ran (the plan's, unless the slots are missing), where the call has the choice.
    record(c.path, grid, block, !c.fixup_choice ? "" : fused ? "fused_fixup" : "fixup_tree");
    if (fused) return;
  } else {
    auto k = feat_reduce_kernel<Fn, Idx>(g.vec);
    const int block = viable_block(k, g.block, 0, g.group, "feat_reduce");
    const int64_t grid = detail::ceil_div(g.workers * g.slabs * g.group, block);
    launch_main(c, k, grid, block, 0, fn, x, q, W, Idx(g.slabs), g.group, inner, tile_i, tile_j,
                carry, head);
    check_launch("feat_reduce");
    record(c.path, grid, block, detail::feat_vec_variant(g, int(sizeof(Raw))));  // the plan's variant
  }
  // Fix-up of tile-crossing segments: FX lanes per tile.
  int FX = 1;
  while (FX < 32 && FX < c.inner) FX *= 2;
  // fixup_tree writes the long segments' chunk partials over their carries.
  launch_coop(fixup_tree<Fn, Idx>, detail::ceil_div(g.workers * FX, 256), 256, c, "fixup_tree", fn, q, tile_i,
              tile_j, W, Idx(g.items), inner, FX, carry, static_cast<const A*>(head), static_cast<Idx*>(c.long_list),
              c.long_count);
}

template <class Fn, class Idx>
void elementwise_pass(const Fn& fn, const typename Fn::Raw* x, typename Fn::Raw* gi, const LaunchCtx& c) {
  using Raw = typename Fn::Raw;
  const auto& g = c.geo;
  const Idx* q = static_cast<const Idx*>(c.q);
  const Idx* tile_i = static_cast<const Idx*>(c.tile_i);
  const Idx* tile_j = static_cast<const Idx*>(c.tile_j);
  const Idx W = Idx(g.workers);
  if (g.flat) {
    auto k = flat_elementwise<Fn, Idx>;
    const size_t spw = flat_smem_per_warp<Raw, Idx>();
    const int block = viable_block(k, g.block, spw, 32, "flat_elementwise");
    const int64_t grid = detail::ceil_div(g.workers, block / 32);
    const int fill = detail::segment_test_caps().flat_fill.load(std::memory_order_relaxed);
    launch_main(c, k, grid, block, spw * (block / 32), fn, x, gi, q, W, Idx(g.positions), tile_i,
                tile_j, fill);
    check_launch("flat_elementwise");
    record(c.path, grid, block);
  } else if (!fn.needs_x() && g.slabs == 1 && c.inner * int64_t(sizeof(Raw)) <= 16) {
    // sum/mean, rows of at most 16 bytes: the warp writes its workers' rows side by
    // side (H200 at 32fb859: 2d_x16_f4 fp32 0.115 -> 0.058 ms, bf16 0.083 -> 0.074; with
    // wider rows, 2d_x16_f16/f64, the per-row segment walk cost more than it saved).
    constexpr int VEC = int(16 / sizeof(Raw));
    auto k = g.vec == VEC ? feat_rows_elementwise<Fn, Idx, VEC> : feat_rows_elementwise<Fn, Idx, 1>;
    const int block = viable_block(k, g.block, 0, 32, "feat_rows_elementwise");
    const int64_t grid = detail::ceil_div(g.workers * g.group, block);
    launch_main(c, k, grid, block, 0, fn, gi, q, W, g.group, Idx(c.inner), tile_i, tile_j);
    check_launch("feat_rows_elementwise");
    record(c.path, grid, block);
  } else {
    constexpr int VEC = int(16 / sizeof(Raw));
    auto k = g.vec == VEC ? feat_elementwise<Fn, Idx, VEC> : feat_elementwise<Fn, Idx, 1>;
    const int block = viable_block(k, g.block, 0, g.group, "feat_elementwise");
    const int64_t grid = detail::ceil_div(g.workers * g.slabs * g.group, block);
    launch_main(c, k, grid, block, 0, fn, x, gi, q, W, Idx(g.slabs), g.group, Idx(c.inner),
                tile_i, tile_j);
    check_launch("feat_elementwise");
    record(c.path, grid, block);
  }
}

// max/min backward in one read of x (src/cuda/segment_maxbwd.cuh): the fused
// kernel (gi with each tile's statistics + crossing records), fixup_tree over the
// records (totals of the crossing segments into stats), the repair.
template <class T, class Idx>
void maxmin_bwd_pass(const StatsFn<T, Idx>& sf, const BwdFn<T, Idx>& bf, const T* x, T* gi, Idx* stats,
                     const LaunchCtx& c) {
  const auto& g = c.geo;
  const Idx* q = static_cast<const Idx*>(c.q);
  const Idx* tile_i = static_cast<const Idx*>(c.tile_i);
  const Idx* tile_j = static_cast<const Idx*>(c.tile_j);
  const Idx W = Idx(g.workers), inner = Idx(c.inner);
  Idx* carry = c.arena->take<Idx>(g.workers * c.inner);
  Idx* head = c.arena->take<Idx>(g.workers * c.inner);
  Idx* keep = c.arena->take<Idx>(g.workers * c.inner);
  uint4* tie_rec = g.flat ? c.arena->take<uint4>(g.workers) : nullptr;  // flat: full tiles' ties (split)
  if (g.flat) {
    auto k = flat_maxmin_bwd<T, Idx>;
    const size_t spw = flat_smem_per_warp<T, Idx>();
    const int block = viable_block(k, g.block, spw, 32, "flat_maxmin_bwd");
    const int64_t grid = detail::ceil_div(g.workers, block / 32);
    launch_main(c, k, grid, block, spw * (block / 32), sf, bf, x, gi, q, W, Idx(g.positions),
                tile_i, tile_j, carry, keep, head, tie_rec, Idx(g.items), Idx(g.segs));
    check_launch("flat_maxmin_bwd");
    record(c.path, grid, block);
  } else {
    auto k = feat_maxmin_bwd_kernel<T, Idx>(g.vec);
    const int block = viable_block(k, g.block, 0, g.group, "feat_maxmin_bwd");
    const int64_t grid = detail::ceil_div(g.workers * g.slabs * g.group, block);
    launch_main(c, k, grid, block, 0, sf, bf, x, gi, q, W, Idx(g.slabs), g.group, inner, tile_i,
                tile_j, carry, keep, head, Idx(g.items), Idx(g.segs));
    check_launch("feat_maxmin_bwd");
    record(c.path, grid, block, detail::feat_vec_variant(g, int(sizeof(T))));  // the plan's variant
  }
  int FX = 1;
  while (FX < 32 && FX < c.inner) FX *= 2;
  launch_coop(fixup_tree<StatsFn<T, Idx>, Idx>, detail::ceil_div(g.workers * FX, 256), 256, c, "fixup_tree", sf, q,
              tile_i, tile_j, W, Idx(g.items), inner, FX, carry, static_cast<const Idx*>(head),
              static_cast<Idx*>(c.long_list), c.long_count);
  // The repair: flat, a warp per G tiles (its lanes find the tiles' jobs); features, a
  // thread per (tile, feature).
  const int forced = detail::segment_test_caps().repair_tiles.load(std::memory_order_relaxed);
  const int G = forced > 0 ? std::min(forced, 32) : detail::repair_tiles_per_warp(g.workers);
  const int64_t rgrid = detail::ceil_div(g.flat ? detail::ceil_div(g.workers, G) * 32 : g.workers * c.inner, 256);
  if (g.flat) {
    flat_maxmin_repair<T, Idx><<<unsigned(rgrid), 256, 0, c.stream>>>(
        sf, bf, x, gi, q, tile_i, tile_j, W, Idx(g.segs), Idx(g.items), static_cast<const Idx*>(carry),
        static_cast<const Idx*>(keep), static_cast<const Idx*>(head), stats, static_cast<const uint4*>(tie_rec), G);
    check_launch("flat_maxmin_repair");
  } else {
    feat_maxmin_repair<T, Idx><<<unsigned(rgrid), 256, 0, c.stream>>>(
        sf, bf, x, gi, q, tile_i, tile_j, W, Idx(g.segs), inner, Idx(g.items), static_cast<const Idx*>(carry),
        static_cast<const Idx*>(keep), static_cast<const Idx*>(head), stats);
    check_launch("feat_maxmin_repair");
  }
  record(c.path, rgrid, 256);
}

}  // namespace impl

// Scratch bytes run_fwd / run_bwd take from the arena (carries, heads, stats,
// prod's prefix buffer), beyond what prepare takes.
template <class T, class Idx>
size_t run_scratch_bytes(const LaunchCtx& c, Direction dir, Reduce reduce) {
  using D = typename Dev<T>::type;
  using A = dacc_t<D>;
  const int64_t tiles = c.geo.workers * c.inner;
  if (dir == Direction::Fwd) return 2 * Arena::bytes<A>(tiles);
  if (reduce == Reduce::Prod) return sizeof(D) < sizeof(A) ? Arena::bytes<A>(c.outer * c.L * c.inner) : 0;
  if (reduce == Reduce::Max || reduce == Reduce::Min)
    return Arena::bytes<Idx>(c.outer * c.S * c.inner) + 3 * Arena::bytes<Idx>(tiles) +  // stats; carry, head, keep
           (c.geo.flat ? Arena::bytes<uint4>(tiles) : 0);                                // flat: tie lists
  return 0;
}

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
      A* pre = sizeof(D) < sizeof(A) ? c.arena->take<A>(c.outer * c.L * c.inner) : nullptr;
      k<<<unsigned(grid), block, 0, c.stream>>>(static_cast<const D*>(a.g), static_cast<const D*>(a.x),
                                                static_cast<D*>(a.gi), static_cast<const int64_t*>(c.q), c.S, c.inner,
                                                c.geo.slabs, start, nwarps, pre);
      check_launch("prod_bwd_warp");
      impl::record(c.path, grid, block);
    }
    return;
  }
  Idx* stats = nullptr;
  StatsFn<D, Idx> sf{};
  if (a.reduce == Reduce::Max || a.reduce == Reduce::Min) {
    stats = c.arena->take<Idx>(c.outer * c.S * c.inner);
    sf.y = static_cast<const D*>(a.y);
    sf.stats = stats;
    sf.map = map;
    sf.inner = Idx(c.inner);
    sf.tie = tie;
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
  if (stats) {  // max/min: one read of x (src/cuda/segment_maxbwd.cuh)
    impl::maxmin_bwd_pass<D, Idx>(sf, fn, static_cast<const D*>(a.x), static_cast<D*>(a.gi), stats, c);
    return;
  }
  impl::elementwise_pass<BwdFn<D, Idx>, Idx>(fn, static_cast<const D*>(a.x), static_cast<D*>(a.gi), c);
}

template <class T, class Idx>
int feat_fwd_blocks_per_sm(Reduce reduce, int vec) {
  using D = typename Dev<T>::type;
  auto of = [&](auto op) {
    using Fn = FwdFn<D, decltype(op), Idx>;
    return impl::resident_blocks(impl::feat_reduce_kernel<Fn, Idx>(vec), detail::kBlock);  // reduce_pass's kernel
  };
  switch (reduce) {
    case Reduce::Sum:
    case Reduce::Mean: return of(ops::SumTag{});
    case Reduce::Prod: return of(ops::ProdTag{});
    case Reduce::Max: return of(ops::MaxTag{});
    case Reduce::Min: return of(ops::MinTag{});
  }
  return 0;
}

template <class T, class Idx>
int feat_bwd_blocks_per_sm(int vec) {
  using D = typename Dev<T>::type;
  return impl::resident_blocks(impl::feat_maxmin_bwd_kernel<D, Idx>(vec), detail::kBlock);  // maxmin_bwd_pass's
}

}  // namespace segred::cuda
