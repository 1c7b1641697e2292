// plan_segment_reduce as a pure function (shared/TESTING.md, "Plan tests without
// a GPU"): path and index width at element counts and offsets far too large to
// allocate (2^31-1, 2^31, 2^32-1, 2^32+1 and beyond), inner 1 and > 1, dims of 1;
// Plan printing and equality.
#include <gtest/gtest.h>

#include <sstream>

#include "segred/segred.h"
#include "src/core/segment_geometry.h"

namespace segred {
namespace {

SegmentProblem problem(Direction dir, int64_t outer, int64_t L, int64_t inner, int64_t S,
                       DType dtype = DType::Float32, DType idx = DType::Int64, Reduce r = Reduce::Sum) {
  SegmentProblem p;
  p.backend = Backend::CPU;
  p.direction = dir;
  p.reduce = r;
  p.dtype = dtype;
  p.index_dtype = idx;
  p.outer = outer;
  p.axis_len = L;
  p.inner = inner;
  p.num_segments = S;
  return p;
}

constexpr int64_t k2_31m1 = (int64_t(1) << 31) - 1;
constexpr int64_t k2_31 = int64_t(1) << 31;
constexpr int64_t k2_32m1 = (int64_t(1) << 32) - 1;
constexpr int64_t k2_32p1 = (int64_t(1) << 32) + 1;

TEST(PlanSegmentReduce, HugeFlatIsFlatI64) {
  for (int64_t n : {k2_31m1, k2_31, k2_32m1, int64_t(1) << 32, k2_32p1, int64_t(1) << 40}) {
    for (Direction dir : {Direction::Fwd, Direction::Bwd}) {
      for (DType idx : {DType::Int32, DType::Int64}) {
        SCOPED_TRACE(::testing::Message() << "n=" << n << " dir=" << to_string(dir) << " index=" << dtype_name(idx));
        // One segment of n, n segments of 1, and batched rows whose total is n.
        for (const SegmentProblem& p : {problem(dir, 1, n, 1, 1, DType::Float16, idx), problem(dir, 1, n, 1, n),
                                        problem(dir, 2, n, 1, 3, DType::BFloat16, idx)}) {
          const Plan plan = plan_segment_reduce(p);
          EXPECT_EQ(plan.path, dir == Direction::Fwd ? "segment_reduce.fwd.cpu.flat.i64" : "segment_reduce.bwd.cpu.flat.i64");
          EXPECT_EQ(plan.index_bits, 64);
          EXPECT_EQ(path_info(plan.path).index_bits, 64);
          EXPECT_GT(plan.chunk, 0);
        }
      }
    }
  }
}

TEST(PlanSegmentReduce, HugeFeaturesIsFeaturesI64) {
  // Element counts at the boundaries with inner > 1 (inner * L crosses 2^31, 2^32).
  struct Case { int64_t L, inner; };
  for (Case c : {Case{k2_31m1, 2}, Case{int64_t(1) << 30, 2}, Case{int64_t(1) << 30, 4}, Case{k2_32m1, 3},
                 Case{k2_32p1, 2}, Case{3, k2_31m1}, Case{2, k2_31}, Case{1, k2_32p1}, Case{k2_32p1, 1024}}) {
    for (Direction dir : {Direction::Fwd, Direction::Bwd}) {
      SCOPED_TRACE(::testing::Message() << "L=" << c.L << " inner=" << c.inner << " dir=" << to_string(dir));
      const Plan plan = plan_segment_reduce(problem(dir, 1, c.L, c.inner, 7, DType::Float32, DType::Int32, Reduce::Max));
      EXPECT_EQ(plan.path,
                dir == Direction::Fwd ? "segment_reduce.fwd.cpu.features.i64" : "segment_reduce.bwd.cpu.features.i64");
      EXPECT_EQ(plan.index_bits, 64);
      EXPECT_GE(plan.chunk, 1);
    }
  }
}

TEST(PlanSegmentReduce, DimsOfOneAndEmpty) {
  // L = 1, outer huge (axis > 0); inner 1 -> flat; zero sizes plan without error.
  EXPECT_EQ(plan_segment_reduce(problem(Direction::Fwd, k2_32p1, 1, 1, 1)).path, "segment_reduce.fwd.cpu.flat.i64");
  EXPECT_EQ(plan_segment_reduce(problem(Direction::Bwd, k2_31, 1, 2, 1)).path, "segment_reduce.bwd.cpu.features.i64");
  EXPECT_EQ(plan_segment_reduce(problem(Direction::Fwd, 0, 0, 1, 0)).path, "segment_reduce.fwd.cpu.flat.i64");
  EXPECT_EQ(plan_segment_reduce(problem(Direction::Bwd, 1, 0, 5, 3)).index_bits, 64);
}

TEST(PlanSegmentReduce, PathsAreRegistered) {
  int cpu = 0;
  for (const auto& p : paths())
    if (p.op == "segment_reduce" && p.backend == Backend::CPU) {
      ++cpu;
      EXPECT_EQ(p.index_bits, 64);
    }
  EXPECT_EQ(cpu, 4);
  for (Direction dir : {Direction::Fwd, Direction::Bwd})
    for (int64_t inner : {1, 2}) {
      const PathInfo& info = path_info(plan_segment_reduce(problem(dir, 1, 100, inner, 3)).path);
      EXPECT_EQ(info.op, "segment_reduce");
      EXPECT_EQ(info.direction, dir);
      EXPECT_EQ(info.backend, Backend::CPU);
    }
}

TEST(PlanSegmentReduce, PrintingAndEquality) {
  const Plan a = plan_segment_reduce(problem(Direction::Fwd, 1, k2_32p1, 1, 5));
  const Plan b = plan_segment_reduce(problem(Direction::Fwd, 1, k2_32p1, 1, 5));
  const Plan c = plan_segment_reduce(problem(Direction::Bwd, 1, k2_32p1, 1, 5));
  const Plan d = plan_segment_reduce(problem(Direction::Fwd, 1, k2_32p1, 8, 5));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, d);
  const std::string s = a.to_string();
  EXPECT_NE(s.find("segment_reduce.fwd.cpu.flat.i64"), std::string::npos) << s;
  EXPECT_NE(s.find("index_bits=64"), std::string::npos) << s;
  EXPECT_NE(s.find("chunk="), std::string::npos) << s;
  std::ostringstream os;
  os << a;
  EXPECT_EQ(os.str(), s);
  EXPECT_NE(c.to_string(), s);
  Plan e = a;
  e.index_bits = 32;
  EXPECT_NE(e, a);
  EXPECT_NE(e.to_string(), s);
}

TEST(PlanSegmentReduce, PureAndDeterministic) {
  // Same answer every time, at sizes no machine could allocate.
  const SegmentProblem p = problem(Direction::Bwd, 3, int64_t(1) << 45, 7, int64_t(1) << 20);
  const Plan first = plan_segment_reduce(p);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(plan_segment_reduce(p), first);
}

}  // namespace
}  // namespace segred

// Session 20: tiles per warp of the flat max/min repair: one tile per warp while
// the warps fit one wave (kRepairWaveWarps), then the fewest (a power of two) that
// keep them within it, at most 32.
TEST(PlanSegmentReduce, RepairTilesPerWarp) {
  using segred::detail::kRepairWaveWarps;
  using segred::detail::repair_tiles_per_warp;
  EXPECT_EQ(repair_tiles_per_warp(0), 1);
  EXPECT_EQ(repair_tiles_per_warp(1), 1);
  EXPECT_EQ(repair_tiles_per_warp(kRepairWaveWarps), 1);
  EXPECT_EQ(repair_tiles_per_warp(kRepairWaveWarps + 1), 2);
  EXPECT_EQ(repair_tiles_per_warp(2 * kRepairWaveWarps), 2);
  EXPECT_EQ(repair_tiles_per_warp(65544), 8);    // 1d_64x1M bf16 (1024-item tiles)
  EXPECT_EQ(repair_tiles_per_warp(131080), 16);  // 1d_64x1M fp32 (512-item tiles)
  EXPECT_EQ(repair_tiles_per_warp(32 * kRepairWaveWarps), 32);
  EXPECT_EQ(repair_tiles_per_warp(int64_t(1) << 40), 32);  // capped: the grid strides beyond one wave
  for (int64_t w : {int64_t(5), int64_t(9000), int64_t(100000), int64_t(1) << 22}) {
    const int g = repair_tiles_per_warp(w);
    EXPECT_EQ(g & (g - 1), 0) << w;
    EXPECT_TRUE(g == 32 || (w + g - 1) / g <= kRepairWaveWarps) << w;
    EXPECT_TRUE(g == 1 || (w + g / 2 - 1) / (g / 2) > kRepairWaveWarps) << w;  // the fewest
  }
}
