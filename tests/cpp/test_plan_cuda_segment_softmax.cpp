// plan_segment_softmax for Backend::CUDA as a pure function (shared/TESTING.md,
// "Plan tests without a GPU"): every CUDA path of the ragged softmax family, and
// the 32/64-bit choice at element counts and offsets of 2^31-1, 2^31, 2^32-1,
// 2^32+1 and at the exact threshold, for heads 1 and > 1, batched rows, many
// segments, forward and backward, every op. Runs on CI without a GPU.
//
// The rule under test (src/core/segment_softmax_geometry.h): 32-bit only when
// every index a kernel forms is < 2^31: outer*L*inner + 16, outer*S*inner,
// D + 2 * 8192 (D = outer*(S+1) + 1 + outer*L merge items), (tiles + 1)*inner + 256.
#include <gtest/gtest.h>

#include <set>

#include "segred/segred.h"
#include "src/core/segment_softmax_geometry.h"

namespace segred {
namespace {

constexpr int64_t P31 = int64_t(1) << 31;
constexpr int64_t P32 = int64_t(1) << 32;
const SegmentSoftmaxOp kOps[] = {SegmentSoftmaxOp::Softmax, SegmentSoftmaxOp::LogSoftmax, SegmentSoftmaxOp::LogSumExp};

SegmentSoftmaxProblem cuda_problem(SegmentSoftmaxOp op, Direction d, int64_t outer, int64_t L, int64_t inner,
                                   int64_t S, DType t = DType::Float32) {
  return {Backend::CUDA, d, op, t, outer, L, inner, S};
}

std::string name(SegmentSoftmaxOp op, Direction d, int bits) {
  return std::string(to_string(op)) + (d == Direction::Fwd ? ".fwd" : ".bwd") + ".cuda.tiles.i" + std::to_string(bits);
}

// The plan under the lane-group hook (-1: the tile path; 1: the lane-group path wherever it
// applies; src/core/segment_softmax_geometry.h).
Plan plan_with(const SegmentSoftmaxProblem& p, int lanes_mode) {
  detail::segment_softmax_lanes_mode() = lanes_mode;
  const Plan plan = plan_segment_softmax(p);
  detail::segment_softmax_lanes_mode() = 0;
  return plan;
}
Plan tiles_plan(const SegmentSoftmaxProblem& p) { return plan_with(p, -1); }
Plan lanes_plan(const SegmentSoftmaxProblem& p) { return plan_with(p, 1); }

void expect_plan(const SegmentSoftmaxProblem& p, int bits) {
  const Plan plan = tiles_plan(p);
  EXPECT_EQ(std::string(plan.path), name(p.op, p.direction, bits)) << plan;
  EXPECT_EQ(plan.index_bits, bits) << plan;
  EXPECT_GT(plan.grid[0], 0) << plan;
  EXPECT_EQ(plan.block[0], 256) << plan;
  EXPECT_GT(plan.chunk, 0) << plan;
  if (built_with_cuda()) {
    const PathInfo& info = path_info(plan.path);
    EXPECT_EQ(info.index_bits, bits);
    EXPECT_EQ(info.backend, Backend::CUDA);
    EXPECT_EQ(info.direction, p.direction);
    EXPECT_EQ(std::string(info.op), std::string(to_string(p.op)));
  }
  // The geometry behind it: the tile fits the shared-memory budget, the chunks
  // cover the tile, the lanes cover the slab, E is odd.
  const auto g = detail::segment_softmax_geometry(p);
  EXPECT_LE(g.smem_slots, detail::kSsSmemBudget) << plan;  // the tile part
  EXPECT_LE(g.smem_bytes, detail::kSsSmemLimit) << plan;   // with the V = 4 middle-piece slots
  EXPECT_EQ(g.slot_bytes, detail::ss_smem_slots(g.kind, g.vec) * int64_t(g.block) * g.vec * g.stat_bytes) << plan;
  EXPECT_EQ(g.smem_bytes, g.smem_slots + g.slot_bytes) << plan;
  EXPECT_GE(int64_t(g.chunks) * g.chunk_rows, g.items) << plan;
  EXPECT_EQ(g.chunk_rows % 2, 1) << plan;
  EXPECT_GE(int64_t(g.lanes) * g.vec, g.width) << plan;
  EXPECT_LE(g.width * dtype_size(p.dtype), 64);
  EXPECT_LE(g.width, 128);
  EXPECT_EQ(g.grid, g.tiles * g.slabs);
  EXPECT_LT(g.grid, P31);
}

void expect_all(int64_t outer, int64_t L, int64_t inner, int64_t S, int bits, DType t = DType::Float32) {
  SCOPED_TRACE(::testing::Message() << "outer " << outer << " L " << L << " inner " << inner << " S " << S << " "
                                    << dtype_name(t));
  for (auto op : kOps)
    for (auto d : {Direction::Fwd, Direction::Bwd}) expect_plan(cuda_problem(op, d, outer, L, inner, S, t), bits);
}

TEST(PlanCudaSegmentSoftmax, EveryPathSmallIs32Bit) {
  for (DType t : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16})
    for (int64_t inner : {1, 3, 8, 64, 200}) expect_all(1, 1000, inner, 10, 32, t);
  expect_all(3, 1000, 8, 7, 32);  // batched
  expect_all(1, 0, 1, 5, 32);     // no rows
  expect_all(1, 7, 1, 0, 32);     // no segments
}

TEST(PlanCudaSegmentSoftmax, ElementCountsAtTheBoundaries) {
  // heads = 1: the merge diagonal (L + S + 2 + 2 * 8192) decides below 2^31.
  for (int64_t L : {P31 - 1, P31, P32 - 1, P32, P32 + 1, 3 * P32}) expect_all(1, L, 1, 1, 64);
  expect_all(1, P31 - 16389, 1, 1, 32);  // L + 3 + 16385 = 2^31 - 1
  expect_all(1, P31 - 16388, 1, 1, 64);
  // 8 heads: the element offset N*F + 16 decides.
  expect_all(1, (P31 - 24) / 8, 8, 1000, 32);  // 2^31 - 24 elements
  expect_all(1, (P31 - 16) / 8, 8, 1000, 64);  // 2^31 - 16
  expect_all(1, P31 / 8, 8, 1000, 64);
  expect_all(1, (P32 - 8) / 8, 8, 1000, 64);  // 2^32 - 8
  expect_all(1, P32 / 8 + 1, 8, 1000, 64);
  // 64 heads.
  expect_all(1, P31 / 64 - 1, 64, 100, 32);
  expect_all(1, P31 / 64, 64, 100, 64);
  expect_all(1, P32 / 64 + 1, 64, 100, 64);
  // Batched rows: outer * L crosses.
  expect_all(2, P31 / 2, 1, 3, 64);
  expect_all(2, P31 / 4, 1, 3, 32);
  expect_all(4, P32 / 4 + 1, 1, 3, 64);
  // Many segments on few rows: the segment count (merge space, per-segment outputs).
  expect_all(1, 10, 1, P31 - 1, 64);
  expect_all(1, 10, 1, int64_t(1) << 30, 32);
  expect_all(1, 10, 8, P31 / 8, 64);  // outer * S * inner = 2^31 (logsumexp's output)
  // The shapes of the boundary tests (test_cuda_segment_softmax.cpp).
  expect_all(1, P32 + 64, 1, 3, 64, DType::Float16);
  expect_all(1, (P32 + 64) / 8, 8, 3, 64, DType::Float16);
}

TEST(PlanCudaSegmentSoftmax, EveryRegisteredCudaPathIsPlanned) {
  if (!built_with_cuda()) GTEST_SKIP() << "no CUDA paths in this build";
  std::set<std::string> planned;
  for (auto op : kOps)
    for (auto d : {Direction::Fwd, Direction::Bwd})
      for (int64_t L : {int64_t(1000), P32 + 1})
        for (int64_t inner : {1, 8}) planned.insert(std::string(lanes_plan(cuda_problem(op, d, 1, L, inner, 5)).path));
  int n = 0;
  for (const PathInfo& p : paths()) {
    if (p.backend != Backend::CUDA || std::string(p.op).rfind("segment_", 0) != 0 || p.op == "segment_reduce") continue;
    ++n;
    EXPECT_TRUE(planned.count(std::string(p.name))) << p.name << " is registered but no plan picks it";
  }
  EXPECT_EQ(n, 16);  // 12 tile paths, 4 lane-group paths
}

TEST(PlanCudaSegmentSoftmax, ForceIndex64Hook) {
  const auto p = cuda_problem(SegmentSoftmaxOp::Softmax, Direction::Fwd, 1, 100, 3, 4);  // 12-byte rows: tiles
  EXPECT_EQ(plan_segment_softmax(p).index_bits, 32);
  detail::segment_softmax_force_index64() = true;
  const Plan forced = plan_segment_softmax(p);
  detail::segment_softmax_force_index64() = false;
  EXPECT_EQ(forced.index_bits, 64);
  EXPECT_EQ(std::string(forced.path), "segment_softmax.fwd.cuda.tiles.i64");
  EXPECT_EQ(plan_segment_softmax(p).index_bits, 32);
}

// The worked example of src/core/segment_softmax_geometry.h and the shapes of
// the other head counts.
TEST(PlanCudaSegmentSoftmax, WorkedExampleGeometry) {
  const int64_t E = 10000000, nodes = 1000000;
  const auto g = detail::segment_softmax_geometry(cuda_problem(SegmentSoftmaxOp::Softmax, Direction::Fwd, 1, E, 8, nodes));
  EXPECT_EQ(g.vec, 4);
  EXPECT_EQ(g.width, 8);
  EXPECT_EQ(g.slabs, 1);
  EXPECT_EQ(g.lanes, 2);
  EXPECT_EQ(g.chunks, 128);
  EXPECT_EQ(g.items, 1142);
  EXPECT_EQ(g.chunk_rows, 9);
  EXPECT_EQ(g.tiles, 9633);
  EXPECT_EQ(g.grid, 9633);
  EXPECT_EQ(g.index_bits, 32);
  EXPECT_TRUE(g.contiguous);
  EXPECT_EQ(g.cvec, 4);
  // Shared memory: 48064 bytes of tile (unchanged by the slots) + 256 x 4 (max, sum)
  // floats of middle-piece slots. Blocks per SM on an H100/H200 (228 KiB, 1 KiB
  // reserved per block): 4 before (49088 each) and after (57280 each), the number
  // the (256, 4) launch bounds' 64 registers allow.
  EXPECT_EQ(g.smem_slots, 48064);
  EXPECT_EQ(g.slot_bytes, 8192);
  EXPECT_EQ(g.smem_bytes, 56256);
  EXPECT_LE(4 * (g.smem_bytes + 1024), 228 * 1024);
  EXPECT_EQ(detail::kSsSmemLimit, 47 * 1024 + 8192);
  EXPECT_LE(4 * (detail::kSsSmemLimit + 1024), 228 * 1024);
  // Backward: a sum per feature (4 KiB of slots); logsumexp: no slots (no row pass).
  const auto gbw = detail::segment_softmax_geometry(cuda_problem(SegmentSoftmaxOp::Softmax, Direction::Bwd, 1, E, 8, nodes));
  EXPECT_EQ(gbw.slot_bytes, 4096);
  EXPECT_EQ(detail::segment_softmax_geometry(cuda_problem(SegmentSoftmaxOp::LogSumExp, Direction::Fwd, 1, E, 8, nodes)).slot_bytes, 0);
  EXPECT_EQ(detail::segment_softmax_geometry(cuda_problem(SegmentSoftmaxOp::LogSumExp, Direction::Bwd, 1, E, 8, nodes)).slot_bytes, 0);
  // V = 1 and float64's V = 2 keep their middle pieces in registers: no slots.
  EXPECT_EQ(detail::segment_softmax_geometry(cuda_problem(SegmentSoftmaxOp::Softmax, Direction::Fwd, 1, E, 1, nodes)).slot_bytes, 0);
  EXPECT_EQ(detail::segment_softmax_geometry(cuda_problem(SegmentSoftmaxOp::Softmax, Direction::Fwd, 1, E, 8, nodes, DType::Float64)).slot_bytes, 0);
  // The same plan twice (pure).
  const auto p = cuda_problem(SegmentSoftmaxOp::Softmax, Direction::Fwd, 1, E, 8, nodes);
  EXPECT_EQ(plan_segment_softmax(p), plan_segment_softmax(p));
  // heads 1: (48128 - 3136) / 6 = 7498-item tiles, one lane per row, 256 chunks of 31 rows.
  const auto g1 = detail::segment_softmax_geometry(cuda_problem(SegmentSoftmaxOp::Softmax, Direction::Fwd, 1, E, 1, nodes));
  EXPECT_EQ(g1.items, 7498);
  EXPECT_EQ(g1.lanes, 1);
  EXPECT_EQ(g1.chunk_rows, 31);
  // heads 64: slabs of 16 features (64 bytes), 4 lanes per row, 64 chunks.
  const auto g64 = detail::segment_softmax_geometry(cuda_problem(SegmentSoftmaxOp::Softmax, Direction::Bwd, 1, E, 64, nodes));
  EXPECT_EQ(g64.width, 16);
  EXPECT_EQ(g64.slabs, 4);
  EXPECT_EQ(g64.lanes, 4);
  EXPECT_EQ(g64.chunks, 64);
  EXPECT_EQ(g64.arrays, 2);
  EXPECT_GE(g64.items, 250);
  // bfloat16, 64 heads: 32 features (64 bytes) per slab.
  EXPECT_EQ(detail::segment_softmax_geometry(cuda_problem(SegmentSoftmaxOp::Softmax, Direction::Fwd, 1, E, 64, nodes, DType::BFloat16)).width, 32);
  const auto g200 = detail::segment_softmax_geometry(cuda_problem(SegmentSoftmaxOp::Softmax, Direction::Fwd, 1, E, 200, nodes));
  EXPECT_EQ(g200.width, 16);
  EXPECT_EQ(g200.slabs, 13);  // 12 x 16 + 8
  EXPECT_FALSE(g200.contiguous);
  EXPECT_EQ(g200.cvec, 4);
  const auto g33 = detail::segment_softmax_geometry(cuda_problem(SegmentSoftmaxOp::Softmax, Direction::Fwd, 1, E, 33, nodes));
  EXPECT_EQ(g33.vec, 1);
  EXPECT_EQ(g33.width, 16);
  EXPECT_EQ(g33.slabs, 3);
  EXPECT_EQ(g33.cvec, 1);  // 33 % 4 != 0: scalar row copies
  // Unaligned pointers: scalar copies.
  EXPECT_EQ(detail::segment_softmax_geometry(p, false).cvec, 1);
  // Smaller blocks (launch viability) keep every invariant.
  for (int b : {128, 64, 32}) {
    const auto gb = detail::segment_softmax_geometry(p, true, b);
    EXPECT_EQ(gb.chunks, b / gb.lanes);
    EXPECT_GE(int64_t(gb.chunks) * gb.chunk_rows, gb.items);
    EXPECT_LE(gb.smem_slots, detail::kSsSmemBudget);
    EXPECT_LE(gb.smem_bytes, detail::kSsSmemLimit);
    EXPECT_EQ(gb.slot_bytes, int64_t(b) * 4 * 8);
    EXPECT_GE(gb.items, g.items);
  }
}

// The benchmark hooks (SegmentSoftmaxTestCaps): the plan follows them (the plan is the
// geometry that runs), out-of-range values are ignored, and the defaults are the rule.
TEST(PlanCudaSegmentSoftmax, TestCapsBlockAndBudget) {  // the tile path's caps
  const int64_t E = 10000000, nodes = 1000000;
  const auto p = cuda_problem(SegmentSoftmaxOp::Softmax, Direction::Fwd, 1, E, 8, nodes);
  auto& caps = detail::segment_softmax_test_caps();
  const Plan base = tiles_plan(p);
  caps.block = 128;
  const Plan b128 = tiles_plan(p);
  const auto g128 = detail::segment_softmax_geometry(p);
  caps.block = 0;
  EXPECT_EQ(b128.block[0], 128);
  EXPECT_EQ(g128.chunks, 64);
  EXPECT_EQ(g128.chunk_rows % 2, 1);
  EXPECT_GE(int64_t(g128.chunks) * g128.chunk_rows, g128.items);
  EXPECT_GT(g128.items, 1142);  // half the per-thread statistics and keys: a larger tile in the same budget
  EXPECT_LE(g128.smem_slots, detail::kSsSmemBudget);
  caps.budget_kib = 94;
  const auto g94 = detail::segment_softmax_geometry(p);
  const Plan p94 = tiles_plan(p);
  caps.budget_kib = 0;
  EXPECT_LE(g94.smem_slots, 94 * 1024);
  EXPECT_GT(g94.items, 2 * 1142);
  EXPECT_EQ(p94.chunk, g94.items);
  EXPECT_LT(p94.grid[0], base.grid[0]);
  for (int bad : {-32, 1, 48, 512, 100000}) {  // not a multiple of 32 in [32, 256]: the rule
    caps.block = bad;
    EXPECT_EQ(tiles_plan(p), base) << bad;
  }
  caps.block = 0;
  for (int bad : {-1, 7, 201}) {
    caps.budget_kib = bad;
    EXPECT_EQ(tiles_plan(p), base) << bad;
  }
  caps.budget_kib = 0;
  EXPECT_EQ(tiles_plan(p), base);
  EXPECT_EQ(base.block[0], 256);
  EXPECT_EQ(base.chunk, 1142);
}


// ---- the lane-group path (src/core/segment_softmax_geometry.h, "the lane-group path") ------

namespace lanes {

std::string lanes_name(SegmentSoftmaxOp op, Direction d) {
  return std::string(to_string(op)) + (d == Direction::Fwd ? ".fwd" : ".bwd") + ".cuda.lanes.i64";
}

// softmax and log_softmax, both directions, on the lane-group path with lpr lanes a row;
// logsumexp on the tile path.
void expect_lanes(int64_t outer, int64_t L, int64_t inner, int64_t S, DType t, int lpr) {
  SCOPED_TRACE(::testing::Message() << "outer " << outer << " L " << L << " inner " << inner << " S " << S << " "
                                    << dtype_name(t));
  for (auto op : kOps)
    for (auto d : {Direction::Fwd, Direction::Bwd}) {
      const auto p = cuda_problem(op, d, outer, L, inner, S, t);
      const Plan plan = lanes_plan(p);
      if (op == SegmentSoftmaxOp::LogSumExp) {
        EXPECT_NE(std::string(plan.path).find(".cuda.tiles."), std::string::npos) << plan;
        continue;
      }
      EXPECT_EQ(std::string(plan.path), lanes_name(op, d)) << plan;
      EXPECT_EQ(plan.index_bits, 64) << plan;
      EXPECT_EQ(plan.block[0], detail::kSslThreads) << plan;
      const auto g = detail::segment_softmax_lanes(p);
      EXPECT_EQ(g.lpr, lpr);
      EXPECT_EQ(g.max_short_rows, detail::kSslRowsPerLane * 32 / lpr);  // a lane group is at most a warp
      EXPECT_EQ(plan.chunk, g.max_short_rows) << plan;
      EXPECT_EQ(g.piece_rows, int64_t(detail::kSslThreads / lpr) * detail::kSslPieceU);
      if (built_with_cuda()) {
        const PathInfo& info = path_info(plan.path);
        EXPECT_EQ(info.index_bits, 64);
        EXPECT_EQ(info.direction, d);
      }
    }
}

// The tile path for every op (the lane-group path does not apply).
void expect_tiles(int64_t outer, int64_t L, int64_t inner, int64_t S, DType t) {
  SCOPED_TRACE(::testing::Message() << "outer " << outer << " L " << L << " inner " << inner << " S " << S << " "
                                    << dtype_name(t));
  for (auto op : kOps)
    for (auto d : {Direction::Fwd, Direction::Bwd}) {
      const auto p = cuda_problem(op, d, outer, L, inner, S, t);
      EXPECT_EQ(detail::segment_softmax_lanes(p).lpr, 0);
      EXPECT_NE(std::string(lanes_plan(p).path).find(".cuda.tiles."), std::string::npos);
    }
}

TEST(PlanCudaSegmentSoftmaxLanes, RowsOf16BytesTimesAPowerOfTwo) {
  for (int64_t inner : {4, 8, 16, 32, 64, 128}) expect_lanes(1, 1000, inner, 10, DType::Float32, int(inner / 4));
  for (DType t : {DType::Float16, DType::BFloat16})
    for (int64_t inner : {8, 16, 32, 64, 128, 256}) expect_lanes(1, 1000, inner, 10, t, int(inner / 8));
  expect_lanes(3, 1000, 8, 7, DType::Float32, 2);  // batched
  // Elsewhere the tile path: rows not 16 x 2^k bytes, wider than 512 bytes, float64.
  for (int64_t inner : {1, 2, 3, 12, 24, 33, 256}) expect_tiles(1, 1000, inner, 10, DType::Float32);
  for (int64_t inner : {1, 4, 12, 512}) expect_tiles(1, 1000, inner, 10, DType::BFloat16);
  for (int64_t inner : {2, 8, 64}) expect_tiles(1, 1000, inner, 10, DType::Float64);
}

// The path's 32-bit counters: positions (outer * L) and merge segments (outer (S + 1) + 1)
// below 2^31; element offsets are 64-bit, so element counts past 2^32 stay on it.
TEST(PlanCudaSegmentSoftmaxLanes, CountersAtTheBoundaries) {
  expect_lanes(1, P31 - 1, 8, 1000, DType::Float32, 2);  // 2^34 elements
  expect_tiles(1, P31, 8, 1000, DType::Float32);
  expect_lanes(2, P31 / 2 - 1, 4, 3, DType::Float32, 1);
  expect_tiles(2, P31 / 2, 4, 3, DType::Float32);
  expect_lanes(1, 10, 8, P31 - 3, DType::Float32, 2);  // merge segments 2^31 - 1
  expect_tiles(1, 10, 8, P31 - 2, DType::Float32);     // 2^31
  expect_tiles(2, 10, 8, P31 / 2, DType::Float32);
  // The boundary test's shape (test_cuda_segment_softmax.cpp): 2^32 + 64 elements of 8 heads.
  expect_lanes(1, (P32 + 64) / 8 + 1, 8, 3, DType::Float16, 1);
  expect_lanes(1, P32 / 16 + 1, 16, 3, DType::Float16, 2);
}

TEST(PlanCudaSegmentSoftmaxLanes, ModeHook) {
  const auto p = cuda_problem(SegmentSoftmaxOp::Softmax, Direction::Bwd, 1, 100, 8, 4);
  EXPECT_EQ(std::string(lanes_plan(p).path), "segment_softmax.bwd.cuda.lanes.i64");
  EXPECT_EQ(std::string(tiles_plan(p).path), "segment_softmax.bwd.cuda.tiles.i32");
  EXPECT_EQ(std::string(plan_segment_softmax(p).path),
            detail::kSslByDefault ? "segment_softmax.bwd.cuda.lanes.i64" : "segment_softmax.bwd.cuda.tiles.i32");
  EXPECT_EQ(detail::segment_softmax_lanes_mode().load(), 0);
}

}  // namespace lanes

}  // namespace
}  // namespace segred
