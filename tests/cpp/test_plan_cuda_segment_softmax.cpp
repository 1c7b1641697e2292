// plan_segment_softmax for Backend::CUDA as a pure function (shared/TESTING.md,
// "Plan tests without a GPU"): every CUDA path of the ragged softmax family, and
// the 32/64-bit choice at element counts and offsets of 2^31-1, 2^31, 2^32-1,
// 2^32+1 and at the exact threshold, for heads 1 and > 1, batched rows, many
// segments, forward and backward, every op. Runs on CI without a GPU.
//
// The rule under test (src/core/segment_softmax_geometry.h): 32-bit only when
// every index a kernel forms is < 2^31. Tiles (under the test hook): outer*L*inner
// + 16, outer*S*inner, D + 2 * 8192 (D = outer*(S+1) + 1 + outer*L merge items),
// (tiles + 1)*inner + 256. Rows (the default): outer*L*inner + 16, outer*S*inner,
// the merge segments U plus a block, N + long_rows + chunk_rows, the long list's
// chunk statistics and entries times inner plus the persistent grids' overshoot.
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

std::string name(SegmentSoftmaxOp op, Direction d, int bits, bool tiles = false) {
  return std::string(to_string(op)) + (d == Direction::Fwd ? ".fwd" : ".bwd") + (tiles ? ".cuda.tiles.i" : ".cuda.rows.i") +
         std::to_string(bits);
}

struct ForceTiles {  // the tiles path (v2) under the test hook; resets on every exit
  ForceTiles() { detail::segment_softmax_force_tiles() = true; }
  ~ForceTiles() { detail::segment_softmax_force_tiles() = false; }
};

// The rows path (the default): its plan and the invariants of its geometry.
void expect_rows_plan(const SegmentSoftmaxProblem& p, int bits) {
  const Plan plan = plan_segment_softmax(p);
  EXPECT_EQ(std::string(plan.path), name(p.op, p.direction, bits)) << plan;
  EXPECT_EQ(plan.index_bits, bits) << plan;
  EXPECT_GT(plan.grid[0], 0) << plan;
  EXPECT_EQ(plan.block[0], 256) << plan;
  if (built_with_cuda()) {
    const PathInfo& info = path_info(plan.path);
    EXPECT_EQ(info.index_bits, bits);
    EXPECT_EQ(info.backend, Backend::CUDA);
    EXPECT_EQ(info.direction, p.direction);
  }
  const auto g = detail::segment_softmax_rows_geometry(p);
  EXPECT_EQ(plan.chunk, g.long_rows) << plan;
  EXPECT_GE(g.long_rows, int64_t(g.rows) * detail::kSrCache) << plan;
  EXPECT_LE(g.group, 32) << plan;
  EXPECT_EQ(g.group, g.lanes * g.rows) << plan;
  EXPECT_EQ(32 % g.group, 0) << plan;
  EXPECT_GE(int64_t(g.lanes) * g.vec * g.slabs, std::max<int64_t>(p.inner, 1)) << plan;
  EXPECT_EQ(g.width, int64_t(g.lanes) * g.vec) << plan;
  EXPECT_GT(g.chunk_rows, 0) << plan;
  EXPECT_GE(g.grid * (256 / g.group), g.segs) << plan;
  EXPECT_LT(g.grid, P31);
  // The long list's bounds: entries > long_rows rows each; chunks of chunk_rows.
  EXPECT_GE(g.max_entries, std::min(g.segs, g.positions / (g.long_rows + 1)) + 1);
  EXPECT_GE(g.max_chunks, g.positions / g.chunk_rows + g.max_entries);
  // The index width does not depend on the alignment the launch finds.
  EXPECT_EQ(detail::segment_softmax_rows_geometry(p, false).index_bits, g.index_bits);
  EXPECT_EQ(detail::segment_softmax_rows_geometry(p, false).long_rows, g.long_rows);
}

void expect_plan(const SegmentSoftmaxProblem& p, int bits) {
  expect_rows_plan(p, bits);
  const ForceTiles tiles;
  const Plan plan = plan_segment_softmax(p);
  EXPECT_EQ(std::string(plan.path), name(p.op, p.direction, bits, true)) << plan;
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
  EXPECT_LE(g.smem_bytes, detail::kSsSmemBudget) << plan;
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
// Where the two paths' thresholds differ: each path's own expectation.
void expect_each(int64_t outer, int64_t L, int64_t inner, int64_t S, int rows_bits, int tiles_bits) {
  SCOPED_TRACE(::testing::Message() << "outer " << outer << " L " << L << " inner " << inner << " S " << S);
  for (auto op : kOps)
    for (auto d : {Direction::Fwd, Direction::Bwd}) {
      const auto p = cuda_problem(op, d, outer, L, inner, S);
      expect_rows_plan(p, rows_bits);
      const ForceTiles tiles;
      EXPECT_EQ(std::string(plan_segment_softmax(p).path), name(op, d, tiles_bits, true));
    }
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
  // tiles: L + 3 + 16385 = 2^31 - 1 at P31 - 16389; rows: N + long_rows (256) +
  // chunk_rows (2048) + 1 = 2^31 - 1 at P31 - 2306.
  expect_each(1, P31 - 16389, 1, 1, 32, 32);
  expect_each(1, P31 - 16388, 1, 1, 32, 64);
  expect_each(1, P31 - 2306, 1, 1, 32, 64);
  expect_each(1, P31 - 2305, 1, 1, 64, 64);
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
  for (bool tiles : {false, true}) {
    detail::segment_softmax_force_tiles() = tiles;
    for (auto op : kOps)
      for (auto d : {Direction::Fwd, Direction::Bwd})
        for (int64_t L : {int64_t(1000), P32 + 1})
          planned.insert(std::string(plan_segment_softmax(cuda_problem(op, d, 1, L, 1, 5)).path));
  }
  detail::segment_softmax_force_tiles() = false;
  int n = 0;
  for (const PathInfo& p : paths()) {
    if (p.backend != Backend::CUDA || std::string(p.op).rfind("segment_", 0) != 0 || p.op == "segment_reduce") continue;
    ++n;
    EXPECT_TRUE(planned.count(std::string(p.name))) << p.name << " is registered but no plan picks it";
  }
  EXPECT_EQ(n, 24);
}

TEST(PlanCudaSegmentSoftmax, ForceIndex64Hook) {
  const auto p = cuda_problem(SegmentSoftmaxOp::Softmax, Direction::Fwd, 1, 100, 8, 4);
  EXPECT_EQ(plan_segment_softmax(p).index_bits, 32);
  detail::segment_softmax_force_index64() = true;
  const Plan forced = plan_segment_softmax(p);
  detail::segment_softmax_force_index64() = false;
  EXPECT_EQ(forced.index_bits, 64);
  EXPECT_EQ(std::string(forced.path), "segment_softmax.fwd.cuda.rows.i64");
  EXPECT_EQ(plan_segment_softmax(p).index_bits, 32);
  {
    const ForceTiles tiles;
    EXPECT_EQ(std::string(plan_segment_softmax(p).path), "segment_softmax.fwd.cuda.tiles.i32");
    detail::segment_softmax_force_index64() = true;
    EXPECT_EQ(std::string(plan_segment_softmax(p).path), "segment_softmax.fwd.cuda.tiles.i64");
    detail::segment_softmax_force_index64() = false;
  }
  EXPECT_EQ(std::string(plan_segment_softmax(p).path), "segment_softmax.fwd.cuda.rows.i32");
}

constexpr int64_t kGatEdges = 10000000, kGatNodes = 1086257;

// The rows path's geometry on the benchmark's shapes (bench/NOTES.md, "CUDA ragged
// softmax v3"): GAT 10M edges over ~1.09M nodes.
TEST(PlanCudaSegmentSoftmax, RowsGeometryWorkedExamples) {
  const int64_t E = kGatEdges, nodes = kGatNodes;
  auto geo = [](int64_t F, DType t, Direction d = Direction::Fwd, int64_t S = kGatNodes, int64_t L = kGatEdges) {
    return detail::segment_softmax_rows_geometry(cuda_problem(SegmentSoftmaxOp::Softmax, d, 1, L, F, S, t));
  };
  const auto g8 = geo(8, DType::Float32);  // 2 lanes x float4 per row, 4 rows: groups of 8 lanes
  EXPECT_EQ(g8.vec, 4);
  EXPECT_EQ(g8.lanes, 2);
  EXPECT_EQ(g8.rows, 4);
  EXPECT_EQ(g8.group, 8);
  EXPECT_EQ(g8.slabs, 1);
  EXPECT_EQ(g8.long_rows, 256);  // min(4 x 64, 16384 / 32)
  EXPECT_EQ(g8.chunk_rows, 1024);
  EXPECT_EQ(g8.segs, nodes + 2);
  EXPECT_EQ(g8.grid, (nodes + 2 + 31) / 32);
  EXPECT_EQ(g8.max_entries, E / 257 + 1);
  EXPECT_EQ(g8.index_bits, 32);
  const auto b8 = geo(8, DType::BFloat16);  // one lane x 8 bf16 per row
  EXPECT_EQ(b8.vec, 8);
  EXPECT_EQ(b8.lanes, 1);
  EXPECT_EQ(b8.group, 4);
  EXPECT_EQ(b8.long_rows, 256);
  EXPECT_EQ(b8.chunk_rows, 2048);
  const auto h1 = geo(1, DType::Float32);
  EXPECT_EQ(h1.vec, 1);
  EXPECT_EQ(h1.group, 4);
  EXPECT_EQ(h1.long_rows, 256);
  const auto h64 = geo(64, DType::Float32);  // 16 lanes x float4, 2 rows: a warp per segment
  EXPECT_EQ(h64.lanes, 16);
  EXPECT_EQ(h64.rows, 2);
  EXPECT_EQ(h64.group, 32);
  EXPECT_EQ(h64.long_rows, 64);  // 16384 / 256 bytes
  EXPECT_EQ(h64.chunk_rows, 128);
  const auto h200 = geo(200, DType::Float32);  // 32 lanes x float4 = 128 features, 2 slabs
  EXPECT_EQ(h200.lanes, 32);
  EXPECT_EQ(h200.slabs, 2);
  EXPECT_EQ(h200.rows, 1);
  EXPECT_EQ(h200.long_rows, 32);
  const auto h33 = geo(33, DType::Float32);  // scalar lanes
  EXPECT_EQ(h33.vec, 1);
  EXPECT_EQ(h33.lanes, 32);
  EXPECT_EQ(h33.slabs, 2);
  // Unaligned pointers: scalar lanes, the same long_rows and chunks.
  const auto u8 = detail::segment_softmax_rows_geometry(
      cuda_problem(SegmentSoftmaxOp::Softmax, Direction::Fwd, 1, E, 8, nodes, DType::Float32), false);
  EXPECT_EQ(u8.vec, 1);
  EXPECT_EQ(u8.lanes, 8);
  EXPECT_EQ(u8.long_rows, g8.long_rows);
  EXPECT_EQ(u8.chunk_rows, g8.chunk_rows);
  // Segments of ~1-2 rows: one row slot; 1 x 2^26 + 2^20 x 1: mean 65, 4 slots.
  EXPECT_EQ(geo(8, DType::Float32, Direction::Fwd, E, E).rows, 1);
  EXPECT_EQ(geo(1, DType::Float32, Direction::Bwd, (1 << 20) + 1, (1 << 26) + (1 << 20)).rows, 4);
  // Smaller blocks (launch viability): the same group, more blocks.
  const auto s64 = detail::segment_softmax_rows_geometry(
      cuda_problem(SegmentSoftmaxOp::Softmax, Direction::Fwd, 1, E, 8, nodes, DType::Float32), true, 64);
  EXPECT_EQ(s64.group, 8);
  EXPECT_EQ(s64.grid, (nodes + 2 + 7) / 8);
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
    EXPECT_LE(gb.smem_bytes, detail::kSsSmemBudget);
    EXPECT_GE(gb.items, g.items);
  }
}

}  // namespace
}  // namespace segred
