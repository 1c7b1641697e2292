// plan_segment_reduce for Backend::CUDA as a pure function (shared/TESTING.md,
// "Plan tests without a GPU"): every CUDA path, and the 32/64-bit choice at
// element counts and offsets of 2^31-1, 2^31, 2^32-1, 2^32+1 and at the exact
// threshold, for inner 1 and > 1, batched rows, forward and backward. Runs on CI
// without a GPU (the planner touches no device).
//
// The rule under test (src/core/segment_geometry.h): 32-bit only when every
// index a kernel forms is < 2^31. For the flat path the largest is the merge
// diagonal rounded up to whole 512-item tiles plus one tile, so with
// D = outer*(S+1) + 1 + outer*L merge items, i32 <=> D <= 2^31 - 1024. With
// features the element offset outer*L*inner usually dominates.
#include <gtest/gtest.h>

#include "segred/segred.h"
#include "src/core/segment_geometry.h"

namespace segred {
namespace {

SegmentProblem cuda_problem(Direction dir, int64_t outer, int64_t L, int64_t inner, int64_t S,
                            DType dtype = DType::Float32, Reduce r = Reduce::Sum) {
  SegmentProblem p;
  p.backend = Backend::CUDA;
  p.direction = dir;
  p.reduce = r;
  p.dtype = dtype;
  p.index_dtype = DType::Int64;
  p.outer = outer;
  p.axis_len = L;
  p.inner = inner;
  p.num_segments = S;
  return p;
}

constexpr int64_t P31 = int64_t(1) << 31;
constexpr int64_t P32 = int64_t(1) << 32;

void expect_path(const SegmentProblem& p, const std::string& path, int bits) {
  const Plan plan = plan_segment_reduce(p);
  EXPECT_EQ(std::string(plan.path), path) << plan;
  EXPECT_EQ(plan.index_bits, bits) << plan;
  EXPECT_GT(plan.grid[0], 0) << plan;
  EXPECT_EQ(plan.block[0], 256) << plan;
  if (built_with_cuda()) {
    const PathInfo& info = path_info(plan.path);  // registered
    EXPECT_EQ(info.index_bits, bits);
    EXPECT_EQ(info.backend, Backend::CUDA);
    EXPECT_EQ(info.direction, p.direction);
  }
}

TEST(PlanCudaSegmentReduce, EveryPathSmall) {
  for (DType t : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    SCOPED_TRACE(dtype_name(t));
    expect_path(cuda_problem(Direction::Fwd, 1, 1000, 1, 10, t), "segment_reduce.fwd.cuda.flat.i32", 32);
    expect_path(cuda_problem(Direction::Bwd, 1, 1000, 1, 10, t), "segment_reduce.bwd.cuda.flat.i32", 32);
    expect_path(cuda_problem(Direction::Fwd, 1, 1000, 16, 10, t), "segment_reduce.fwd.cuda.features.i32", 32);
    expect_path(cuda_problem(Direction::Bwd, 1, 1000, 16, 10, t), "segment_reduce.bwd.cuda.features.i32", 32);
    for (int64_t inner : {1, 7})
      expect_path(cuda_problem(Direction::Bwd, 1, 1000, inner, 10, t, Reduce::Prod),
                  "segment_reduce.bwd.cuda.prod_warp.i64", 64);
    // Forward prod is an ordinary reduction.
    expect_path(cuda_problem(Direction::Fwd, 1, 1000, 1, 10, t, Reduce::Prod), "segment_reduce.fwd.cuda.flat.i32",
                32);
  }
}

TEST(PlanCudaSegmentReduce, WorkedExampleGeometry) {
  // 1-D float32, 2^26 elements, 2^21 segments of 32 (segment_geometry.h).
  const Plan p = plan_segment_reduce(cuda_problem(Direction::Fwd, 1, int64_t(1) << 26, 1, int64_t(1) << 21));
  EXPECT_EQ(p.grid[0], 16897);
  EXPECT_EQ(p.block[0], 256);
  EXPECT_EQ(p.chunk, 512);
  EXPECT_EQ(p.index_bits, 32);
  // Pure: the same problem gives the same plan.
  EXPECT_EQ(p, plan_segment_reduce(cuda_problem(Direction::Fwd, 1, int64_t(1) << 26, 1, int64_t(1) << 21)));
}

// Session 12: the flat forward's fix-up variant (detail::fused_fixup_rule): fused
// for one wave of tiles (<= 8192) or at most a quarter as many merge segments as tiles;
// never for float64 (value and flag in one 64-bit store), never for the backward
// or features. The benchmark's shapes, then the rule's edges exactly.
TEST(PlanCudaSegmentReduce, FusedFixupVariant) {
  auto variant = [](int64_t L, int64_t S, DType t = DType::Float32, Direction d = Direction::Fwd, int64_t inner = 1) {
    return std::string(plan_segment_reduce(cuda_problem(d, 1, L, inner, S, t)).variant);
  };
  const int64_t M = int64_t(1) << 20;
  for (DType t : {DType::Float32, DType::BFloat16, DType::Float16}) {
    SCOPED_TRACE(dtype_name(t));
    EXPECT_EQ(variant(4096 * 16, 4096, t), "fused_fixup");                     // 1d_small: one wave
    EXPECT_EQ(variant(64 * M, 64, t), "fused_fixup");                          // 1d_64x1M
    EXPECT_EQ(variant(2 * M * 32, 2 * M, t), "fixup_tree");                    // 1d_2Mx32: every tile waits
    // 1d_200k_exp40: 16 k fp32 tiles; 8 k 16-bit tiles (1024 items each): one wave.
    EXPECT_EQ(variant(200000 * 40, 200000, t), t == DType::Float32 ? "fixup_tree" : "fused_fixup");
    EXPECT_EQ(variant(int64_t(1) << 32, 3, t), "fused_fixup");                 // i64 too
    EXPECT_EQ(variant(64 * M, 64, t, Direction::Bwd), "");                     // backward: no variant
    EXPECT_EQ(variant(64 * M, 64, t, Direction::Fwd, 4), "");                  // features: no variant
  }
  EXPECT_EQ(variant(64 * M, 64, DType::Float64), "fixup_tree");
  // Edges, fp32 (512 items per tile; D = S + 2 + L merge items, W = ceil(D / 512)).
  const int64_t wave = detail::kFusedWaveTiles;
  EXPECT_EQ(variant(wave * 512 - 2 - 3000 - 1, 3000, DType::Float32), "fused_fixup");  // W = 8192 exactly
  EXPECT_EQ(variant(wave * 512 - 2 - 3000 + 1, 3000, DType::Float32), "fixup_tree");   // W = 8193, 4 S > W
  // W = 20000 tiles: 4 U <= W up to U = S + 2 = 5000 merge segments.
  EXPECT_EQ(variant(20000 * 512 - 2 - 4998, 4998, DType::Float32), "fused_fixup");
  EXPECT_EQ(variant(20000 * 512 - 2 - 4999, 4999, DType::Float32), "fixup_tree");
  // The override of the tests and the benchmark's A/B.
  auto& caps = detail::segment_test_caps();
  caps.fused_fixup = 1;
  EXPECT_EQ(variant(2 * M * 32, 2 * M), "fused_fixup");
  EXPECT_EQ(variant(64 * M, 64, DType::Float64), "fixup_tree");
  caps.fused_fixup = 2;
  EXPECT_EQ(variant(64 * M, 64), "fixup_tree");
  caps.fused_fixup = 0;
}

// Session 33: prep_scatter_rule (src/core/segment_geometry.h), prepare's choice
// between the partition scattered by the segments and the search before its
// grid.sync: at most two rounds of 1024 metadata entries a scan block, and a mean
// segment under 16 tiles. The benchmark's shapes on an H100 (528 scan blocks at most)
// and both edges of each bound.
TEST(PlanCudaSegmentReduce, PrepScatterRule) {
  using detail::prep_scatter_rule;
  const int64_t M = int64_t(1) << 20, cap = 528;
  auto blocks = [&](int64_t meta) { return std::min(detail::ceil_div(meta, 1024), cap); };
  auto rule = [&](int64_t meta, int64_t positions, int64_t tile) {
    return prep_scatter_rule(meta, blocks(meta), positions, tile);
  };
  EXPECT_TRUE(rule(200001, 200000 * 40, 1024));          // 1d_200k_exp40
  EXPECT_TRUE(rule(M + 2, (int64_t(1) << 26) + M, 1024));  // 1d_one2^26_1Mx1: 2 rounds
  EXPECT_TRUE(rule(4097, 4096 * 16, 512));               // 1d_small_4kx16
  EXPECT_FALSE(rule(2 * M + 1, 2 * M * 32, 1024));       // 1d_2Mx32: 4 rounds
  EXPECT_FALSE(rule(65, 64 * M, 1024));                  // 1d_64x1M: 1M positions a segment
  EXPECT_TRUE(prep_scatter_rule(2 * 1024 * cap, cap, 1, 512));  // two rounds exactly
  EXPECT_FALSE(prep_scatter_rule(2 * 1024 * cap + 1, cap, 1, 512));
  EXPECT_TRUE(prep_scatter_rule(10, 1, 10 * (16 * 512 - 1), 512));  // a mean just under 16 tiles
  EXPECT_FALSE(prep_scatter_rule(10, 1, 10 * 16 * 512, 512));
  EXPECT_FALSE(prep_scatter_rule(0, 0, 100, 512));  // no metadata: nothing to scatter from
  EXPECT_FALSE(prep_scatter_rule(10, 1, 100, 0));
  EXPECT_TRUE(prep_scatter_rule(int64_t(1) << 40, int64_t(1) << 30, int64_t(1) << 44, 32));  // no overflow
}

// Session 17: how flat_reduce reads a full tile without a segment end
// (flat_form_rule, src/core/segment_geometry.h): 16-bit types coalesced (2);
// float32 sum and mean coalesced from a mean segment length of kFlatCoalescedLen
// = 4096 positions, else staged (0); max, min, prod, float64, the backward and
// features staged; the override of the tests and the benchmark (flat_direct 1, 2).
TEST(PlanCudaSegmentReduce, FlatFullTileForm) {
  auto form = [](int64_t outer, int64_t L, int64_t S, DType t, Reduce r = Reduce::Sum,
                 Direction d = Direction::Fwd, int64_t inner = 1) {
    return detail::segment_geometry(cuda_problem(d, outer, L, inner, S, t, r)).flat_form;
  };
  const int64_t M = int64_t(1) << 20, K = detail::kFlatCoalescedLen;
  for (DType t : {DType::BFloat16, DType::Float16})
    for (Reduce r : {Reduce::Sum, Reduce::Max, Reduce::Prod}) {
      EXPECT_EQ(form(1, 2 * M * 32, 2 * M, t, r), 2);
      EXPECT_EQ(form(1, 64 * M, 64, t, r), 2);
    }
  EXPECT_EQ(form(1, 64 * M, 64, DType::Float32), 2);                    // 1d_64x1M
  EXPECT_EQ(form(1, 64 * M, 64, DType::Float32, Reduce::Mean), 2);
  EXPECT_EQ(form(1, (int64_t(1) << 26) + M, M + 1, DType::Float32), 0);  // 2^26 beside 1M of 1: mean 65
  EXPECT_EQ(form(1, 2 * M * 32, 2 * M, DType::Float32), 0);             // 1d_2Mx32
  EXPECT_EQ(form(1, 200000 * 40, 200000, DType::Float32), 0);           // 1d_200k_exp40
  EXPECT_EQ(form(1, 10 * K, 10, DType::Float32), 2);                    // the edge: mean exactly K
  EXPECT_EQ(form(1, 10 * K - 1, 10, DType::Float32), 0);
  EXPECT_EQ(form(4, 3 * K, 3, DType::Float32), 2);                      // batched: per row's segments
  EXPECT_EQ(form(4, 3 * K - 1, 3, DType::Float32), 0);
  EXPECT_EQ(form(1, 5 * K, 0, DType::Float32), 2);                      // no segment: no division by 0
  EXPECT_EQ(form(1, int64_t(1) << 33, 2, DType::Float32), 2);           // past 2^32 (i64)
  for (Reduce r : {Reduce::Max, Reduce::Min, Reduce::Prod}) EXPECT_EQ(form(1, 64 * M, 64, DType::Float32, r), 0);
  EXPECT_EQ(form(1, 64 * M, 64, DType::Float64), 0);
  EXPECT_EQ(form(1, 64 * M, 64, DType::Float32, Reduce::Sum, Direction::Bwd), 0);     // backward: staged only
  EXPECT_EQ(form(1, 64 * M, 64, DType::BFloat16, Reduce::Sum, Direction::Bwd), 0);
  EXPECT_EQ(form(1, 64 * M, 64, DType::Float32, Reduce::Sum, Direction::Fwd, 4), 0);  // features
  auto& caps = detail::segment_test_caps();
  caps.flat_direct = 1;  // sessions 1-15: 16-bit lane-contiguous, else staged
  EXPECT_EQ(form(1, 64 * M, 64, DType::BFloat16), 1);
  EXPECT_EQ(form(1, 64 * M, 64, DType::Float32), 0);
  caps.flat_direct = 2;  // coalesced for all
  EXPECT_EQ(form(1, 2 * M * 32, 2 * M, DType::Float32, Reduce::Max), 2);
  EXPECT_EQ(form(1, 64 * M, 64, DType::Float64), 2);
  caps.flat_direct = 0;
}

// Session 34: how flat_reduce walks a tile with segment ends (flat_ended_rule):
// by positions (1) for the 16-bit forwards, every reduce and length distribution,
// both index widths; staged by merge items (0) for float32, float64, the backward
// and features; the override of the tests and the benchmark (flat_ended 1: staged).
TEST(PlanCudaSegmentReduce, FlatEndedTileWalk) {
  auto ended = [](int64_t outer, int64_t L, int64_t S, DType t, Reduce r = Reduce::Sum,
                  Direction d = Direction::Fwd, int64_t inner = 1) {
    return detail::segment_geometry(cuda_problem(d, outer, L, inner, S, t, r)).flat_ended;
  };
  const int64_t M = int64_t(1) << 20;
  for (DType t : {DType::BFloat16, DType::Float16})
    for (Reduce r : {Reduce::Sum, Reduce::Mean, Reduce::Max, Reduce::Min, Reduce::Prod}) {
      EXPECT_EQ(ended(1, 2 * M * 32, 2 * M, t, r), 1);
      EXPECT_EQ(ended(1, 200000 * 40, 200000, t, r), 1);
      EXPECT_EQ(ended(4, 3 * M, 3, t, r), 1);
      EXPECT_EQ(ended(1, int64_t(1) << 33, 2, t, r), 1);  // past 2^32 (i64)
      EXPECT_EQ(ended(1, 2 * M * 32, 2 * M, t, r, Direction::Bwd), 0);
      EXPECT_EQ(ended(1, 2 * M * 32, 2 * M, t, r, Direction::Fwd, 4), 0);
    }
  EXPECT_EQ(detail::segment_geometry(cuda_problem(Direction::Fwd, 1, int64_t(1) << 33, 1, 2, DType::BFloat16,
                                                  Reduce::Sum)).index_bits, 64);
  for (DType t : {DType::Float32, DType::Float64}) EXPECT_EQ(ended(1, 2 * M * 32, 2 * M, t), 0);
  auto& caps = detail::segment_test_caps();
  caps.flat_ended = 1;  // sessions 1-33: staged everywhere
  EXPECT_EQ(ended(1, 2 * M * 32, 2 * M, DType::BFloat16), 0);
  EXPECT_EQ(ended(1, 2 * M * 32, 2 * M, DType::Float16, Reduce::Max), 0);
  caps.flat_ended = 0;
}

// Session 35: SegmentTestCaps::flat_block (the benchmark's --flat-block) sets the
// threads a block of the flat (inner == 1) kernels only, and only to a multiple of
// 32 in [32, 1024]; the grid follows it (one tile a warp).
TEST(PlanCudaSegmentReduce, FlatBlockCap) {
  const int64_t M = int64_t(1) << 20;
  auto geo = [&](int64_t inner) {
    return detail::segment_geometry(cuda_problem(Direction::Fwd, 1, 2 * M * 32, inner, 2 * M, DType::BFloat16,
                                                 Reduce::Sum));
  };
  auto& caps = detail::segment_test_caps();
  const auto flat0 = geo(1), feat0 = geo(4);
  EXPECT_EQ(flat0.block, detail::kBlock);
  for (const int fb : {64, 128, 512}) {
    caps.flat_block = fb;
    const auto flat = geo(1), feat = geo(4);
    EXPECT_EQ(flat.block, fb);
    EXPECT_EQ(flat.grid, detail::ceil_div(flat.workers * 32, fb));
    EXPECT_EQ(flat.workers, flat0.workers);
    EXPECT_EQ(feat.block, feat0.block);  // feature calls keep the plan's block
    EXPECT_EQ(feat.grid, feat0.grid);
  }
  for (const int bad : {-32, 16, 100, 2048}) {
    caps.flat_block = bad;
    EXPECT_EQ(geo(1).block, detail::kBlock) << bad;
  }
  caps.flat_block = 0;
}

// Session 29: features per lane of a feature call (feat_vec_rule): 16-byte vectors
// where inner is a multiple of them and the data aligned, else 1; the 16-bit
// forwards take 8-byte half vectors (Plan::variant "half_vectors") by the rule where
// inner is a multiple of 4 and >= kHalfVecMinInner (16), wherever inner is a multiple
// of 4 under feat_half_vec = 2, never under 1; the backwards never. Half-vector
// forwards of rows >= 256 bytes take kHalfVecWideItems (256) while the launch keeps
// kFeatMinThreads.
TEST(PlanCudaSegmentReduce, FeatureVectorWidth) {
  const int64_t R = int64_t(1) << 20;
  auto prob = [&](DType t, int64_t inner, Direction d, Reduce r, int64_t rows = 0) {
    if (rows == 0) rows = R;
    return cuda_problem(d, 1, rows, inner, rows / 16, t, r);
  };
  auto geo = [&](DType t, int64_t inner, Direction d = Direction::Fwd, Reduce r = Reduce::Sum, bool aligned = true) {
    return detail::segment_geometry(prob(t, inner, d, r), aligned);
  };
  auto& caps = detail::segment_test_caps();
  for (const int cap : {0, 1, 2}) {
    SCOPED_TRACE(::testing::Message() << "feat_half_vec " << cap);
    caps.feat_half_vec = cap;
    const bool wide = cap != 1, narrow = cap == 2;  // half vectors at inner >= 16 / below 16
    for (DType t : {DType::BFloat16, DType::Float16}) {
      EXPECT_EQ(geo(t, 128).vec, wide ? 4 : 8);
      EXPECT_EQ(geo(t, 128).group, wide ? 32 : 16);
      EXPECT_EQ(geo(t, 64).vec, wide ? 4 : 8);
      EXPECT_EQ(geo(t, 16).vec, wide ? 4 : 8);
      EXPECT_EQ(geo(t, 20).vec, wide ? 4 : 1);
      EXPECT_EQ(geo(t, 12).vec, narrow ? 4 : 1);
      EXPECT_EQ(geo(t, 8).vec, narrow ? 4 : 8);
      EXPECT_EQ(geo(t, 4).vec, narrow ? 4 : 1);
      EXPECT_EQ(geo(t, 4).group, narrow ? 1 : 4);
      EXPECT_EQ(geo(t, 6).vec, 1);
      EXPECT_EQ(geo(t, 18).vec, 1);
      EXPECT_EQ(geo(t, 128, Direction::Fwd, Reduce::Max).vec, wide ? 4 : 8);
      EXPECT_EQ(geo(t, 128, Direction::Fwd, Reduce::Sum, false).vec, 1);  // misaligned data
      for (Reduce r : {Reduce::Sum, Reduce::Max, Reduce::Min}) {
        // Backwards (session 30): the sum/mean backward keeps full vectors; the max/min
        // backward takes half vectors by the rule for inner in [16, 64), anywhere when forced.
        const bool mm = r != Reduce::Sum, half_bwd = narrow && mm, rule_bwd = cap != 1 && mm;
        EXPECT_EQ(geo(t, 128, Direction::Bwd, r).vec, half_bwd ? 4 : 8);
        EXPECT_EQ(geo(t, 64, Direction::Bwd, r).vec, half_bwd ? 4 : 8);
        EXPECT_EQ(geo(t, 60, Direction::Bwd, r).vec, rule_bwd ? 4 : 1);
        EXPECT_EQ(geo(t, 16, Direction::Bwd, r).vec, rule_bwd ? 4 : 8);
        EXPECT_EQ(geo(t, 16, Direction::Bwd, r).group, rule_bwd ? 4 : 2);
        EXPECT_EQ(geo(t, 12, Direction::Bwd, r).vec, half_bwd ? 4 : 1);
        EXPECT_EQ(geo(t, 8, Direction::Bwd, r).vec, half_bwd ? 4 : 8);
        EXPECT_EQ(geo(t, 4, Direction::Bwd, r).vec, half_bwd ? 4 : 1);
      }
      // Items: 256 for the wide half-vector rows (2d_64kx16_f128: 139 k threads), the
      // old rule's 128 with full vectors and where 256 would leave < 2^17 threads.
      EXPECT_EQ(geo(t, 128).items, wide ? 256 : 128);
      EXPECT_EQ(geo(t, 64).items, 88);  // 128-byte half-vector rows: the narrow rule's
      // Half the rows: 256 items would leave 69.6 k threads; feat_items_rule then gives 128 at
      // 32 half-vector lanes (139 k threads), 64 at 16 full-vector lanes.
      EXPECT_EQ(detail::segment_geometry(prob(t, 128, Direction::Fwd, Reduce::Sum, R / 2)).items, wide ? 128 : 64);
      EXPECT_EQ(plan_segment_reduce(prob(t, 128, Direction::Fwd, Reduce::Sum)).variant, wide ? "half_vectors" : "");
      EXPECT_EQ(plan_segment_reduce(prob(t, 128, Direction::Fwd, Reduce::Sum)).chunk, wide ? 256 : 128);
      EXPECT_EQ(plan_segment_reduce(prob(t, 128, Direction::Bwd, Reduce::Max)).variant, narrow ? "half_vectors" : "");
      EXPECT_EQ(plan_segment_reduce(prob(t, 16, Direction::Bwd, Reduce::Min)).variant, wide ? "half_vectors" : "");
      EXPECT_EQ(plan_segment_reduce(prob(t, 16, Direction::Bwd, Reduce::Sum)).variant, "");
    }
    // float32: half vectors (2 features a lane) only when forced; float64 never.
    EXPECT_EQ(geo(DType::Float32, 128).vec, narrow ? 2 : 4);
    EXPECT_EQ(geo(DType::Float32, 128).slabs, narrow ? 2 : 1);
    EXPECT_EQ(geo(DType::Float32, 128).items, 128);
    EXPECT_EQ(geo(DType::Float32, 16).vec, narrow ? 2 : 4);
    EXPECT_EQ(geo(DType::Float32, 6).vec, narrow ? 2 : 1);
    EXPECT_EQ(geo(DType::Float32, 5).vec, 1);
    // The float32 max/min backward: half vectors by the rule wherever inner is even (session 30).
    for (const int64_t inner : {128, 64, 16, 4, 6})
      EXPECT_EQ(geo(DType::Float32, inner, Direction::Bwd, Reduce::Max).vec, cap != 1 ? 2 : inner % 4 ? 1 : 4);
    EXPECT_EQ(geo(DType::Float32, 5, Direction::Bwd, Reduce::Min).vec, 1);
    EXPECT_EQ(geo(DType::Float32, 128, Direction::Bwd, Reduce::Sum).vec, 4);
    EXPECT_EQ(geo(DType::Float64, 128, Direction::Bwd, Reduce::Max).vec, 2);
    EXPECT_EQ(geo(DType::Float64, 128).vec, 2);
    EXPECT_EQ(plan_segment_reduce(prob(DType::Float32, 128, Direction::Fwd, Reduce::Sum)).variant,
              narrow ? "half_vectors" : "");
    EXPECT_EQ(plan_segment_reduce(prob(DType::Float64, 128, Direction::Fwd, Reduce::Sum)).variant, "");
  }
  caps.feat_half_vec = 0;
}

// Session 13: merge items per feature worker (detail::feat_items_rule, Plan::chunk):
// 128 for wide rows (a worker reads >= 256 bytes of a row) in the calls that keep
// records (forward, max/min backward) while >= 2^17 threads remain, else 64, else 32;
// narrow rows and the sum/mean backward keep 32. The benchmark's shapes, then the
// thread bound's edges exactly.
TEST(PlanCudaSegmentReduce, FeatureItemsPerWorker) {
  auto chunk = [](int64_t L, int64_t inner, int64_t S, DType t, Direction d = Direction::Fwd,
                  Reduce r = Reduce::Sum) {
    return plan_segment_reduce(cuda_problem(d, 1, L, inner, S, t, r)).chunk;
  };
  const int64_t M = int64_t(1) << 20;
  for (DType t : {DType::Float32, DType::BFloat16}) {
    SCOPED_TRACE(dtype_name(t));
    // 2d_64kx16_f128: D = 65538 + 2^20 = 1,114,114 -> 8705 workers of 128 items:
    // fp32 32 lanes (278,560 threads); the bf16 forward (session 29) 32 half-vector
    // lanes of 4 at 256 items (4353 workers, 139,296 threads), its backwards 16 lanes of 8.
    EXPECT_EQ(chunk(M, 128, 65536, t), t == DType::BFloat16 ? 256 : 128);
    EXPECT_EQ(chunk(M, 128, 65536, t, Direction::Bwd, Reduce::Max), 128);
    EXPECT_EQ(chunk(M, 128, 65536, t, Direction::Bwd, Reduce::Min), 128);
    EXPECT_EQ(chunk(M, 128, 65536, t, Direction::Bwd, Reduce::Sum), 32);   // no records
    EXPECT_EQ(chunk(M, 128, 65536, t, Direction::Bwd, Reduce::Mean), 32);
    // Narrow rows (session 26): 88 items in the calls with records, 32 without.
    EXPECT_EQ(chunk(4 * M, 4, 4 * M / 16, t), 88);                         // 2d_x16_f4
    EXPECT_EQ(chunk(4 * M, 4, 4 * M / 16, t, Direction::Bwd, Reduce::Max), 88);
    EXPECT_EQ(chunk(4 * M, 4, 4 * M / 16, t, Direction::Bwd, Reduce::Sum), 32);
    EXPECT_EQ(chunk(M, 16, M / 16, t), 88);                                // 2d_x16_f16
    EXPECT_EQ(chunk(M, 16, M / 16, t, Direction::Bwd, Reduce::Min), 88);
  }
  // 2d_x16_f64: fp32 rows of 64 are 16 lanes x 4 x 4 B = 256 B (wide), bf16 8 x 8 x 2 B (narrow).
  EXPECT_EQ(chunk(M, 64, M / 16, DType::Float32), 128);
  EXPECT_EQ(chunk(M, 64, M / 16, DType::BFloat16), 88);
  // The narrow bound: fp32 inner 4 is one lane of 4 (a worker is one thread), S = 1:
  // 88 items while ceil(D / 88) >= 2^14, else 32.
  const int64_t N = int64_t(1) << 14;
  EXPECT_EQ(chunk(88 * (N - 1) + 1 - 3, 4, 1, DType::Float32), 88);
  EXPECT_EQ(chunk(88 * (N - 1) - 3, 4, 1, DType::Float32), 32);
  EXPECT_EQ(chunk(M, 128, 65536, DType::Float64), 128);  // 32 lanes x 2 x 8 B
  EXPECT_EQ(chunk(M, 128, 65536, DType::Float32, Direction::Bwd, Reduce::Prod), 0);  // its own kernel
  // Edges, fp32 inner 128 (32 lanes, one slab; S = 1: D = 3 + L): 128 items while
  // ceil(D / 128) * 32 >= 2^17, i.e. D > 128 x 4095, then 64 items while
  // ceil(D / 64) * 32 >= 2^17 (D > 64 x 4095), then 32.
  const int64_t K = int64_t(1) << 12;  // 2^17 threads / 32 lanes = workers needed
  EXPECT_EQ(chunk(128 * (K - 1) + 1 - 3, 128, 1, DType::Float32), 128);  // ceil(D / 128) = 4096
  EXPECT_EQ(chunk(128 * (K - 1) - 3, 128, 1, DType::Float32), 64);       // 4095 workers of 128
  EXPECT_EQ(chunk(64 * (K - 1) + 1 - 3, 128, 1, DType::Float32), 64);
  EXPECT_EQ(chunk(64 * (K - 1) - 3, 128, 1, DType::Float32), 32);
  // The override of the tests and the benchmark's A/B.
  auto& caps = detail::segment_test_caps();
  caps.feat_items = 32;
  EXPECT_EQ(chunk(M, 128, 65536, DType::Float32), 32);
  caps.feat_items = 7;
  EXPECT_EQ(chunk(1000, 16, 10, DType::Float32, Direction::Bwd, Reduce::Sum), 7);
  caps.feat_items = 0;
  // Index width counts the longer tiles (tiles_round * items): unchanged at these sizes.
  expect_path(cuda_problem(Direction::Fwd, 1, M, 128, 65536), "segment_reduce.fwd.cuda.features.i32", 32);
}

// Session 26: the wave fit (detail::feat_wave_items). A grid over k >= 1 whole waves by
// at most 1/8 of a wave takes the items that k waves hold; the launcher gives the
// kernel's resident blocks per SM (SegmentProblem::feat_blocks_per_sm; 0: no fit).
TEST(PlanCudaSegmentReduce, FeatureWaveFit) {
  const int64_t M = int64_t(1) << 20;
  auto plan = [&](DType t, Direction d, Reduce r, int blocks_per_sm) {  // 2d_64kx16_f128
    SegmentProblem p = cuda_problem(d, 1, M, 128, 65536, t, r);
    p.feat_blocks_per_sm = blocks_per_sm;
    return plan_segment_reduce(p);
  };
  // 2d_64kx16_f128 bf16 max backward: 16 threads per worker, 128 items -> 8705 workers,
  // 545 blocks; at 4 blocks per SM a wave is 528: 17 over, <= 528 / 8, so the items
  // of 528 x 256 / 16 = 8448 workers: ceil(1,114,114 / 8448) = 132, grid 528.
  const Plan fit = plan(DType::BFloat16, Direction::Bwd, Reduce::Max, 4);
  EXPECT_EQ(fit.chunk, 132);
  EXPECT_EQ(fit.grid[0], 528);
  EXPECT_EQ(plan(DType::BFloat16, Direction::Bwd, Reduce::Max, 0).chunk, 128);  // not known: no fit
  EXPECT_EQ(plan(DType::BFloat16, Direction::Bwd, Reduce::Max, 5).chunk, 128);  // 545 < 660: one wave
  EXPECT_EQ(plan(DType::BFloat16, Direction::Bwd, Reduce::Sum, 4).chunk, 32);   // no records: no fit
  // fp32 forward at 5 per SM: 1089 blocks = 660 + 429, a tail too large to fold in.
  EXPECT_EQ(plan(DType::Float32, Direction::Fwd, Reduce::Sum, 5).chunk, 128);
  // Fewer SMs, same rule: 66 SMs x 4 = 264 per wave; 545 = 2 x 264 + 17: two waves.
  {
    SegmentProblem p = cuda_problem(Direction::Bwd, 1, M, 128, 65536, DType::BFloat16, Reduce::Max);
    p.feat_blocks_per_sm = 4;
    p.sm_count = 66;
    EXPECT_EQ(plan_segment_reduce(p).chunk, 132);
    EXPECT_EQ(plan_segment_reduce(p).grid[0], 528);
  }
  // The forced items of the tests are not fitted.
  auto& caps = detail::segment_test_caps();
  caps.feat_items = 128;
  EXPECT_EQ(plan(DType::BFloat16, Direction::Bwd, Reduce::Max, 4).chunk, 128);
  caps.feat_items = 0;
  // The rule itself: the tail bound's edge, exact waves, no whole wave.
  using detail::feat_wave_items;
  // 1 thread per worker, block 256, wave 100 blocks: D = 256 x 100 x 32 items fills one
  // wave exactly at 32 items; 12 more blocks (12 x 8 <= 100) fold in, 13 do not.
  const int64_t one = 256 * 100 * 32;
  EXPECT_EQ(feat_wave_items(32, one, 1, 1, 256, 100), 32);                       // exact
  EXPECT_EQ(feat_wave_items(32, one + 256 * 12 * 32, 1, 1, 256, 100), 36);      // 112 blocks -> 100
  EXPECT_EQ(feat_wave_items(32, one + 256 * 13 * 32, 1, 1, 256, 100), 32);      // 113: left as is
  EXPECT_EQ(feat_wave_items(32, one / 2, 1, 1, 256, 100), 32);                  // half a wave
  EXPECT_EQ(feat_wave_items(32, one, 1, 1, 256, 0), 32);                        // no wave known
  for (int64_t extra : {int64_t(1), int64_t(255), int64_t(256 * 12 * 32)}) {    // the fitted grid is <= one wave
    const int64_t D = one + extra, items = feat_wave_items(32, D, 1, 1, 256, 100);
    EXPECT_LE(detail::ceil_div(detail::ceil_div(D, items), 256), 100) << extra;
  }
}

TEST(PlanCudaSegmentReduce, FlatThresholdExact) {
  for (Direction d : {Direction::Fwd, Direction::Bwd}) {
    const char* i32 = d == Direction::Fwd ? "segment_reduce.fwd.cuda.flat.i32" : "segment_reduce.bwd.cuda.flat.i32";
    const char* i64 = d == Direction::Fwd ? "segment_reduce.fwd.cuda.flat.i64" : "segment_reduce.bwd.cuda.flat.i64";
    // S = 1: D = 3 + L. Last 32-bit problem: D = 2^31 - 1024.
    expect_path(cuda_problem(d, 1, P31 - 1024 - 3, 1, 1), i32, 32);
    expect_path(cuda_problem(d, 1, P31 - 1024 - 2, 1, 1), i64, 64);
    // Element counts at the named boundaries: all 64-bit (the merge space adds S + 2).
    for (int64_t L : {P31 - 1, P31, P32 - 1, P32 + 1, P32 * 3}) {
      SCOPED_TRACE(L);
      expect_path(cuda_problem(d, 1, L, 1, 1), i64, 64);
      expect_path(cuda_problem(d, 1, L, 1, 1000000), i64, 64);
    }
    // Many segments on few elements: the segment count alone crosses.
    expect_path(cuda_problem(d, 1, 10, 1, P31 - 1), i64, 64);
    expect_path(cuda_problem(d, 1, 10, 1, (int64_t(1) << 30)), i32, 32);
    // Batched rows: row r's offsets are r * L in the merge space.
    expect_path(cuda_problem(d, 2, (int64_t(1) << 30) - 1024, 1, 1), i32, 32);  // D = 2^31 - 2043
    expect_path(cuda_problem(d, 2, int64_t(1) << 30, 1, 1), i64, 64);           // D = 2^31 + 5
    expect_path(cuda_problem(d, 4, P32 / 4 + 1, 1, 3), i64, 64);
  }
}

TEST(PlanCudaSegmentReduce, FeaturesThreshold) {
  for (Direction d : {Direction::Fwd, Direction::Bwd}) {
    const char* i32 =
        d == Direction::Fwd ? "segment_reduce.fwd.cuda.features.i32" : "segment_reduce.bwd.cuda.features.i32";
    const char* i64 =
        d == Direction::Fwd ? "segment_reduce.fwd.cuda.features.i64" : "segment_reduce.bwd.cuda.features.i64";
    // inner 128: elements = 128 L.
    expect_path(cuda_problem(d, 1, (int64_t(1) << 24) - 1, 128, 1000), i32, 32);  // 2^31 - 128
    expect_path(cuda_problem(d, 1, int64_t(1) << 24, 128, 1000), i64, 64);        // 2^31
    expect_path(cuda_problem(d, 1, (int64_t(1) << 25) - 1, 128, 1000), i64, 64);  // 2^32 - 128
    expect_path(cuda_problem(d, 1, (int64_t(1) << 25) + 1, 128, 1000), i64, 64);  // 2^32 + 128
    // inner 4 (one lane per row), inner 3 (scalar lanes).
    expect_path(cuda_problem(d, 1, (int64_t(1) << 29) - 1, 4, 7), i32, 32);  // 2^31 - 4
    expect_path(cuda_problem(d, 1, int64_t(1) << 29, 4, 7), i64, 64);        // 2^31
    expect_path(cuda_problem(d, 1, P31 / 3, 3, 7), i32, 32);                 // 2^31 - 2
    expect_path(cuda_problem(d, 1, P31 / 3 + 1, 3, 7), i64, 64);             // 2^31 + 1
    expect_path(cuda_problem(d, 1, (P32 - 1) / 3, 3, 7), i64, 64);           // 2^32 - 1
    expect_path(cuda_problem(d, 1, (P32 + 2) / 3, 3, 7), i64, 64);           // 2^32 + 2
    // The output offset alone: outer*S*inner = 2^31.
    expect_path(cuda_problem(d, 1, 2, 2, P31 / 2), i64, 64);
    // Batched: outer 2 x [2^23, 128] = 2^31 elements.
    expect_path(cuda_problem(d, 2, int64_t(1) << 23, 128, 5), i64, 64);
    expect_path(cuda_problem(d, 2, (int64_t(1) << 23) - 1, 128, 5), i32, 32);
    // The boundary-execution shapes of test_cuda_segment_reduce.cpp.
    expect_path(cuda_problem(d, 1, (int64_t(1) << 29) + 5, 8, ((int64_t(1) << 29) + 5 + 127) / 128, DType::Float16),
                i64, 64);
  }
  expect_path(cuda_problem(Direction::Fwd, 1, P32 + (int64_t(1) << 20) + 3, 1, 4195329, DType::Float16),
              "segment_reduce.fwd.cuda.flat.i64", 64);
}

TEST(PlanCudaSegmentReduce, GeometryVectorAndGroups) {
  using detail::segment_geometry;
  const auto g128 = segment_geometry(cuda_problem(Direction::Fwd, 1, 100, 128, 3));
  EXPECT_EQ(g128.vec, 4);
  EXPECT_EQ(g128.group, 32);
  EXPECT_EQ(g128.slabs, 1);
  const auto g4 = segment_geometry(cuda_problem(Direction::Fwd, 1, 100, 4, 3));
  EXPECT_EQ(g4.vec, 4);
  EXPECT_EQ(g4.group, 1);
  const auto h16 = segment_geometry(cuda_problem(Direction::Fwd, 1, 100, 16, 3, DType::Float16));
  EXPECT_EQ(h16.vec, 4);  // the 16-bit forward's half vectors (session 29)
  EXPECT_EQ(h16.group, 4);
  const auto h16b = segment_geometry(cuda_problem(Direction::Bwd, 1, 100, 16, 3, DType::Float16, Reduce::Max));
  EXPECT_EQ(h16b.vec, 4);  // the max/min backward's half vectors at inner 16 (session 30)
  EXPECT_EQ(h16b.group, 4);
  const auto h16s = segment_geometry(cuda_problem(Direction::Bwd, 1, 100, 16, 3, DType::Float16, Reduce::Sum));
  EXPECT_EQ(h16s.vec, 8);  // the sum backward: full vectors
  EXPECT_EQ(h16s.group, 2);
  const auto g3 = segment_geometry(cuda_problem(Direction::Fwd, 1, 100, 3, 3));
  EXPECT_EQ(g3.vec, 1);
  EXPECT_EQ(g3.group, 4);
  const auto g130 = segment_geometry(cuda_problem(Direction::Fwd, 1, 100, 130, 3));
  EXPECT_EQ(g130.vec, 1);
  EXPECT_EQ(g130.group, 32);
  EXPECT_EQ(g130.slabs, 5);
  // Unaligned pointers fall back to scalar lanes.
  EXPECT_EQ(segment_geometry(cuda_problem(Direction::Fwd, 1, 100, 128, 3), false).vec, 1);
}

}  // namespace
}  // namespace segred
