// plan_softmax / make_softmax_problem as pure functions (shared/TESTING.md, "Plan
// tests without a GPU"): shapes far past 2^31 and 2^32 elements, inner == 1 and
// inner > 1, dims of 1 and 2, all without allocating a tensor (only shapes go in).
#include <gtest/gtest.h>

#include "segred/segred.h"

namespace {

using namespace segred;
constexpr int64_t k2_31 = int64_t(1) << 31;
constexpr int64_t k2_32 = int64_t(1) << 32;

Plan plan_for(const Shape& s, int64_t dim, Direction dir = Direction::Fwd, bool log = false,
              DType dt = DType::Float32) {
  return plan_softmax(make_softmax_problem(s, dim, dt, dir, log));
}

TEST(SoftmaxPlan, DecompositionAroundDim) {
  const SoftmaxProblem p = make_softmax_problem({3, 5, 7, 11}, 1, DType::Float16, Direction::Bwd, true);
  EXPECT_EQ(p.outer, 3);
  EXPECT_EQ(p.dim_size, 5);
  EXPECT_EQ(p.inner, 77);
  EXPECT_EQ(p.direction, Direction::Bwd);
  EXPECT_TRUE(p.log);
  EXPECT_EQ(p.dtype, DType::Float16);
  // Negative dims wrap like Python.
  const SoftmaxProblem q = make_softmax_problem({3, 5, 7, 11}, -1, DType::Float32);
  EXPECT_EQ(q.outer, 105);
  EXPECT_EQ(q.dim_size, 11);
  EXPECT_EQ(q.inner, 1);
  const SoftmaxProblem r = make_softmax_problem({3, 5, 7, 11}, -4, DType::Float32);
  EXPECT_EQ(r.outer, 1);
  EXPECT_EQ(r.dim_size, 3);
  EXPECT_EQ(r.inner, 385);
  // 0-dim counts as [1]; dim 0 and -1 only.
  const SoftmaxProblem z = make_softmax_problem({}, -1, DType::Float64);
  EXPECT_EQ(z.outer, 1);
  EXPECT_EQ(z.dim_size, 1);
  EXPECT_EQ(z.inner, 1);
  EXPECT_THROW(make_softmax_problem({}, 1, DType::Float64), ValueError);
  EXPECT_THROW(make_softmax_problem({4, 4}, 2, DType::Float64), ValueError);
  EXPECT_THROW(make_softmax_problem({4, 4}, -3, DType::Float64), ValueError);
  try {
    make_softmax_problem({4, 4}, 7, DType::Float32);
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("dim=7"), std::string::npos) << e.what();
  }
}

// The TESTING.md defect: [1, 2, 2^31+1] over dim 1 has inner > 1 and must plan the
// 64-bit spatial path, forward and backward, for both ops.
TEST(SoftmaxPlan, SpatialPastInt32AndUint32) {
  for (const Shape& s : {Shape{1, 2, k2_31 + 1}, Shape{1, 2, k2_32 + 1}, Shape{3, 2, k2_32}}) {
    for (bool log : {false, true})
      for (Direction dir : {Direction::Fwd, Direction::Bwd}) {
        const Plan p = plan_for(s, 1, dir, log, DType::Float16);
        const std::string want = std::string(log ? "log_softmax." : "softmax.") +
                                 (dir == Direction::Fwd ? "fwd" : "bwd") + ".cpu.spatial.i64";
        EXPECT_EQ(p.path, want) << shape_string(s);
        EXPECT_EQ(p.index_bits, 64);
        EXPECT_GE(p.chunk, 128);
        EXPECT_LE(p.chunk, dir == Direction::Fwd ? 1024 : 4096);  // the backward: whole rows up to 4096
        EXPECT_EQ(p.chunk % 32, 0);                                // whole cache lines of float16
      }
  }
}

// [1, 1, N] over dim 2 is the lastdim path (inner == 1), whatever N.
TEST(SoftmaxPlan, LastdimPastInt32AndUint32) {
  for (int64_t n : {k2_31 - 1, k2_31, k2_31 + 1, k2_32 - 1, k2_32, k2_32 + 1, int64_t(1) << 40}) {
    EXPECT_EQ(plan_for({1, 1, n}, 2).path, "softmax.fwd.cpu.lastdim.i64");
    EXPECT_EQ(plan_for({1, 1, n}, -1, Direction::Bwd).path, "softmax.bwd.cpu.lastdim.i64");
    EXPECT_EQ(plan_for({n}, 0, Direction::Fwd, true).path, "log_softmax.fwd.cpu.lastdim.i64");
    EXPECT_EQ(plan_for({n, 2}, 1, Direction::Bwd, true).path, "log_softmax.bwd.cpu.lastdim.i64");
    EXPECT_EQ(plan_for({1, 1, n}, 2).index_bits, 64);
  }
  // Many short rows past 2^32 elements in all.
  EXPECT_EQ(plan_for({k2_32 + 3, 2}, 1).path, "softmax.fwd.cpu.lastdim.i64");
}

// Dims of 1 and 2: trailing size-1 dims fold into inner == 1 (lastdim); a reduced
// dim of 1 or 2 with inner > 1 is spatial; the tile never exceeds inner.
TEST(SoftmaxPlan, DimsOfOneAndTwo) {
  EXPECT_EQ(plan_for({7, 5, 1}, 1).path, "softmax.fwd.cpu.lastdim.i64");
  EXPECT_EQ(plan_for({7, 5, 1, 1}, 1, Direction::Bwd).path, "softmax.bwd.cpu.lastdim.i64");
  EXPECT_EQ(plan_for({7, 1}, 1).path, "softmax.fwd.cpu.lastdim.i64");
  EXPECT_EQ(plan_for({1, 7}, 0).path, "softmax.fwd.cpu.spatial.i64");
  EXPECT_EQ(plan_for({1, 7}, 0).chunk, 7);
  EXPECT_EQ(plan_for({2, 2}, 0).path, "softmax.fwd.cpu.spatial.i64");
  EXPECT_EQ(plan_for({2, 2}, 0).chunk, 2);
  EXPECT_EQ(plan_for({2, k2_31 + 1}, 0).path, "softmax.fwd.cpu.spatial.i64");
  EXPECT_EQ(plan_for({2, k2_31 + 1}, 0).chunk, 128);  // D = 2 < 16: a short forward keeps 512-byte rows
  EXPECT_EQ(plan_for({2, k2_31 + 1}, 0, Direction::Bwd).chunk, 4096);  // the backward: rows up to 4096
  EXPECT_EQ(plan_for({k2_31 + 1, 2}, 0).chunk, 2);     // inner = 2: a tile is the whole inner
  EXPECT_EQ(plan_for({k2_32, 1}, 0).path, "softmax.fwd.cpu.lastdim.i64");
  EXPECT_EQ(plan_for({1}, 0).path, "softmax.fwd.cpu.lastdim.i64");
  EXPECT_EQ(plan_for({}, 0).path, "softmax.fwd.cpu.lastdim.i64");
}

// The spatial backward's tiles (plan_softmax, kWholeRowMaxCols): whole rows of the
// [D, inner] slab up to 4096 columns, cut into equal pieces of whole cache lines
// until every thread has an item (a multiple of the threads below 4 per thread).
TEST(SoftmaxPlan, SpatialBackwardTilesAreWholeRowsForEveryThread) {
  auto w = [](const Shape& s, int64_t dim, int threads, DType dt = DType::Float32) {
    SoftmaxProblem p = make_softmax_problem(s, dim, dt, Direction::Bwd);
    p.cpu_threads = threads;
    return plan_softmax(p).chunk;
  };
  EXPECT_EQ(w({64, 256, 56, 56}, 1, 2), 3136);                    // whole rows
  EXPECT_EQ(w({64, 256, 56, 56}, 1, 2, DType::Float16), 3136);
  EXPECT_EQ(w({32, 1000, 4096}, 1, 2), 4096);
  EXPECT_EQ(w({16, 2000, 4096}, 1, 16), 4096);                    // 16 items on 16 threads: a multiple
  EXPECT_EQ(w({16, 2000, 4096}, 1, 64), 1024);                    // 64 items
  EXPECT_EQ(w({16, 2000, 4096}, 1, 48), 1376);                    // 3 pieces (1366 -> whole lines): 48 items
  EXPECT_EQ(w({8192, 8192}, 0, 1), 4096);                         // at most 4096 columns
  EXPECT_EQ(w({8192, 8192}, 0, 2), 4096);
  EXPECT_EQ(w({8192, 8192}, 0, 3), 2736);                         // 3 items: 2736, 2736, 2720
  EXPECT_EQ(w({8192, 8192}, 0, 16), 512);
  EXPECT_EQ(w({8192, 8192}, 0, 16, DType::Float16), 512);
  EXPECT_EQ(w({8192, 8192}, 0, 16, DType::Float64), 512);
  EXPECT_EQ(w({3, 3, 700}, 1, 2), 352);                           // 3 items on 2 threads -> 6
  EXPECT_EQ(w({3, 3, 700}, 1, 2, DType::Float16), 352);
  EXPECT_EQ(w({3, 3, 700}, 1, 2, DType::Float64), 352);
  EXPECT_EQ(w({9, 3, 700}, 1, 2), 700);                           // 9 items: >= 4 per thread
  EXPECT_EQ(w({8, 4, int64_t(1) << 22}, 1, 2), 4096);
  EXPECT_EQ(w({1, 5, 40}, 1, 8), 16);                             // 3 items of one cache line
  EXPECT_EQ(w({1, 5, 3}, 1, 8), 3);                               // narrower than a cache line
  EXPECT_EQ(w({2, 3, 0}, 1, 2), 0);                               // empty: no item (and no division by 0)
  EXPECT_EQ(w({0, 3, 5}, 1, 2), 5);
  EXPECT_EQ(w({2, 0, 5}, 1, 2), 5);
  // Sizes far beyond memory: still whole rows, at most inner.
  EXPECT_EQ(w({int64_t(1) << 40, 2, 3}, 1, 1024), 3);
  EXPECT_EQ(w({1, 2, int64_t(1) << 40}, 1, 1024), 4096);
}

// The forward past spatial's L2 rule (D > 512 and D * 128 * (accumulation +
// element size) > 1 MiB) streams where the L2 is small or unknown (the default
// problem's cpu_l2_bytes = 0): spatial_stream, for both ops, every dtype at its
// boundary; the backward never does.
TEST(SoftmaxPlan, SpatialStreamPastTheL2Rule) {
  struct B { DType dt; int64_t last_spatial; };
  for (const B& b : {B{DType::Float32, 1024}, B{DType::Float16, 1365}, B{DType::BFloat16, 1365},
                     B{DType::Float64, 512}})
    for (bool log : {false, true}) {
      const std::string op = log ? "log_softmax" : "softmax";
      SCOPED_TRACE(op + " " + std::string(dtype_name(b.dt)));
      EXPECT_EQ(plan_for({3, b.last_spatial, 40}, 1, Direction::Fwd, log, b.dt).path, op + ".fwd.cpu.spatial.i64");
      EXPECT_EQ(plan_for({3, b.last_spatial + 1, 40}, 1, Direction::Fwd, log, b.dt).path,
                op + ".fwd.cpu.spatial_stream.i64");
      EXPECT_EQ(plan_for({3, b.last_spatial + 1, 40}, 1, Direction::Bwd, log, b.dt).path, op + ".bwd.cpu.spatial.i64");
      EXPECT_EQ(plan_for({3, b.last_spatial + 1, 1}, 1, Direction::Fwd, log, b.dt).path, op + ".fwd.cpu.lastdim.i64");
      EXPECT_EQ(plan_for({b.last_spatial + 1, k2_32 + 1}, 0, Direction::Fwd, log, b.dt).path,
                op + ".fwd.cpu.spatial_stream.i64");
    }
  EXPECT_EQ(plan_for({1, 513, 40}, 1, Direction::Fwd, false, DType::Float64).path, "softmax.fwd.cpu.spatial_stream.i64");
  EXPECT_EQ(plan_for({1, 512, 40}, 1, Direction::Fwd, false, DType::Float64).path, "softmax.fwd.cpu.spatial.i64");
  // Its tiles are the backward's: whole rows for every thread.
  for (int threads : {1, 2, 3, 16}) {
    SoftmaxProblem f = make_softmax_problem({8192, 8192}, 0, DType::Float32, Direction::Fwd);
    SoftmaxProblem g = make_softmax_problem({8192, 8192}, 0, DType::Float32, Direction::Bwd);
    f.cpu_threads = g.cpu_threads = threads;
    EXPECT_EQ(plan_softmax(f).chunk, plan_softmax(g).chunk) << threads << " threads";
  }
}

// The worked examples in plan_softmax's comment, and the chunk rules.
TEST(SoftmaxPlan, ChunkRules) {
  EXPECT_EQ(plan_for({32, 1000, 4096}, 1).chunk, 128);
  EXPECT_EQ(plan_for({16384, 4096}, -1).chunk, 4096);
  EXPECT_EQ(plan_for({16384, 4096}, -1, Direction::Fwd, false, DType::Float64).chunk, 2048);
  EXPECT_EQ(plan_for({16384, 4096}, -1, Direction::Fwd, false, DType::BFloat16).chunk, 8192);
  EXPECT_EQ(plan_for({16384, 4096}, -1, Direction::Bwd).chunk, 0);
  // D <= 512: rows 1 KiB long both ways (at least 128 columns).
  EXPECT_EQ(plan_for({64, 256, 56, 56}, 1).chunk, 256);
  EXPECT_EQ(plan_for({64, 256, 56, 56}, 1, Direction::Fwd, false, DType::Float16).chunk, 512);
  EXPECT_EQ(plan_for({64, 256, 56, 56}, 1, Direction::Fwd, true, DType::BFloat16).chunk, 512);
  EXPECT_EQ(plan_for({64, 256, 56, 56}, 1, Direction::Fwd, false, DType::Float64).chunk, 128);
  EXPECT_EQ(plan_for({64, 512, 56, 56}, 1, Direction::Fwd, false, DType::Float16).chunk, 512);  // D = 512: still
  EXPECT_EQ(plan_for({8, 4, 4194304}, 1).chunk, 128);                   // D = 4 < 16: the forward keeps W = 128
  EXPECT_EQ(plan_for({8, 16, 4194304}, 1).chunk, 256);                  // D = 16: rows of 1 KiB
  EXPECT_EQ(plan_for({8, 4, 4194304}, 1, Direction::Bwd).chunk, 4096);  // the backward: rows up to 4096
  EXPECT_EQ(plan_for({64, 512, 300}, 1, Direction::Fwd, false, DType::Float16).chunk, 300);    // never wider than inner
  // The backward: whole rows of the slab (SpatialBackwardTiles below).
  EXPECT_EQ(plan_for({64, 256, 56, 56}, 1, Direction::Bwd).chunk, 3136);
  EXPECT_EQ(plan_for({64, 256, 56, 56}, 1, Direction::Bwd, true, DType::Float16).chunk, 3136);
  EXPECT_EQ(plan_for({64, 256, 56, 56}, 1, Direction::Bwd, false, DType::BFloat16).chunk, 3136);
  EXPECT_EQ(plan_for({64, 256, 56, 56}, 1, Direction::Bwd, false, DType::Float64).chunk, 3136);
  EXPECT_EQ(plan_for({64, 512, 300}, 1, Direction::Bwd, false, DType::Float16).chunk, 300);  // never wider than inner
  // D > 512: the backward's whole rows. The forward: 128 columns while the
  // [D, 128] tiles of x and of the exps fit in 1 MiB, else spatial_stream with
  // the backward's whole rows (SpatialStreamPastTheL2Rule below).
  EXPECT_EQ(plan_for({32, 1000, 4096}, 1, Direction::Bwd).chunk, 4096);
  EXPECT_EQ(plan_for({32, 1000, 4096}, 1, Direction::Fwd, true).chunk, 128);
  EXPECT_EQ(plan_for({4, 1024, 4096}, 1).chunk, 128);    // 1024 * 128 * 8 B = 1 MiB: fits
  EXPECT_EQ(plan_for({4, 1025, 4096}, 1).chunk, 4096);   // spatial_stream: whole rows
  EXPECT_EQ(plan_for({4, 1365, 4096}, 1, Direction::Fwd, false, DType::Float16).chunk, 128);  // 6 B per value
  EXPECT_EQ(plan_for({4, 1366, 4096}, 1, Direction::Fwd, false, DType::BFloat16).chunk, 4096);
  EXPECT_EQ(plan_for({4, 1000, 4096}, 1, Direction::Fwd, false, DType::Float64).chunk, 4096);  // 16 B per value: streamed
  EXPECT_EQ(plan_for({8192, 8192}, 0).chunk, 4096);
  EXPECT_EQ(plan_for({8192, 8192}, 0, Direction::Bwd).chunk, 4096);  // one thread (plan_for's default)
  EXPECT_EQ(plan_for({8192, 8192}, 0, Direction::Fwd, false, DType::Float64).chunk, 4096);
  EXPECT_EQ(plan_for({2000, 8192}, 0, Direction::Fwd, false, DType::Float16).chunk, 4096);
  EXPECT_EQ(plan_for({1000, 100}, 0).chunk, 100);  // never wider than inner
  // Huge D: streamed, whole rows.
  EXPECT_EQ(plan_for({1, k2_32, 1000}, 1).chunk, 1000);
  // Plans are values: equal for equal problems, printable.
  EXPECT_EQ(plan_for({8, 4, int64_t(1) << 24}, 1), plan_for({8, 4, int64_t(1) << 24}, 1));
  EXPECT_NE(plan_for({8, 4, 16}, 1).to_string().find("softmax.fwd.cpu.spatial.i64"), std::string::npos);
}

// Session 26: with an L2 of >= 1 MiB per core (SoftmaxProblem::cpu_l2_bytes; the
// benchmark host and the development machine have 2 MiB) the backward with D <= 512
// takes rows of 1 KiB like the forward's. Session 39: past D = 512 both L2 sizes plan
// alike (whole rows backward, spatial_stream forward past the L2 rule; before, the
// large L2 took 1024 columns and a tile of exps). The worked examples, then the boundary.
TEST(SoftmaxPlan, LargeL2Tiles) {
  auto plan = [](const Shape& s, int64_t dim, Direction dir = Direction::Fwd, bool log = false,
                 DType dt = DType::Float32, int64_t l2 = int64_t(2) << 20, int threads = 2) {
    SoftmaxProblem p = make_softmax_problem(s, dim, dt, dir, log);
    p.cpu_l2_bytes = l2;
    p.cpu_threads = threads;
    return plan_softmax(p);
  };
  const Direction B = Direction::Bwd;
  EXPECT_EQ(plan({32, 1000, 4096}, 1).chunk, 128);
  EXPECT_EQ(plan({32, 1000, 4096}, 1, B).chunk, 4096);                  // D > 512: whole rows
  EXPECT_EQ(plan({64, 256, 56, 56}, 1).chunk, 256);
  EXPECT_EQ(plan({64, 256, 56, 56}, 1, B).chunk, 256);                   // rows of 1 KiB, as the forward
  EXPECT_EQ(plan({64, 256, 56, 56}, 1, B, true, DType::Float16).chunk, 512);
  EXPECT_EQ(plan({64, 256, 56, 56}, 1, B, false, DType::BFloat16).chunk, 512);
  EXPECT_EQ(plan({64, 256, 56, 56}, 1, B, false, DType::Float64).chunk, 128);
  EXPECT_EQ(plan({8, 4, 4194304}, 1).chunk, 128);
  EXPECT_EQ(plan({8, 4, 4194304}, 1, B).chunk, 256);
  EXPECT_EQ(plan({64, 512, 300}, 1, B, false, DType::Float16).chunk, 300);  // never wider than inner
  EXPECT_EQ(plan({4, 1024, 4096}, 1).chunk, 128);                        // 1 MiB: fits
  EXPECT_EQ(plan({4, 1025, 4096}, 1).chunk, 4096);                       // spatial_stream: whole rows
  EXPECT_EQ(plan({4, 1366, 4096}, 1, Direction::Fwd, false, DType::BFloat16).chunk, 4096);
  EXPECT_EQ(plan({4, 1000, 4096}, 1, Direction::Fwd, false, DType::Float64).chunk, 4096);  // 16 B per value
  EXPECT_EQ(plan({8192, 8192}, 0).chunk, 4096);                          // 2 threads: 2 items of 4096
  EXPECT_EQ(plan({8192, 8192}, 0, B).chunk, 4096);
  EXPECT_EQ(plan({2000, 8192}, 0, Direction::Fwd, false, DType::Float16).chunk, 4096);
  EXPECT_EQ(plan({1, k2_32, 1000}, 1).chunk, 512);                       // huge D: whole rows, cut for 2 threads
  for (bool log : {false, true}) {
    const std::string op = log ? "log_softmax" : "softmax";
    EXPECT_EQ(plan({8192, 8192}, 0, Direction::Fwd, log).path, op + ".fwd.cpu.spatial_stream.i64");
    EXPECT_EQ(plan({3, 1024, 40}, 1, Direction::Fwd, log).path, op + ".fwd.cpu.spatial.i64");
    EXPECT_EQ(plan({3, 1025, 40}, 1, Direction::Fwd, log).path, op + ".fwd.cpu.spatial_stream.i64");
    EXPECT_EQ(plan({3, 512, 40}, 1, Direction::Fwd, log, DType::Float64).path, op + ".fwd.cpu.spatial.i64");
    EXPECT_EQ(plan({3, 513, 40}, 1, Direction::Fwd, log, DType::Float64).path, op + ".fwd.cpu.spatial_stream.i64");
    EXPECT_EQ(plan({3, 1025, 1}, 1, Direction::Fwd, log).path, op + ".fwd.cpu.lastdim.i64");
  }
  // The boundary: 1 MiB is large; 1 MiB - 1 and unknown (0) are the small-L2 rules
  // (they differ only for D <= 512 backwards); D = 512 / 513 at both sizes.
  EXPECT_EQ(plan({64, 256, 56, 56}, 1, B, false, DType::Float32, int64_t(1) << 20).chunk, 256);
  EXPECT_EQ(plan({64, 256, 56, 56}, 1, B, false, DType::Float32, (int64_t(1) << 20) - 1).chunk, 3136);
  EXPECT_EQ(plan({64, 256, 56, 56}, 1, B, false, DType::Float32, 0).chunk, 3136);
  for (int64_t l2 : {int64_t(0), int64_t(1) << 20}) {
    EXPECT_EQ(plan({4, 512, 4096}, 1, B, false, DType::Float32, l2).chunk, l2 ? 256 : 4096);
    EXPECT_EQ(plan({4, 513, 4096}, 1, B, false, DType::Float32, l2).chunk, 4096);
    EXPECT_EQ(plan({8192, 8192}, 0, Direction::Fwd, false, DType::Float32, l2).path, "softmax.fwd.cpu.spatial_stream.i64");
  }
  // The large-L2 rows of 1 KiB do not depend on the thread count.
  for (int threads : {1, 3, 16}) EXPECT_EQ(plan({64, 256, 56, 56}, 1, B, false, DType::Float32, int64_t(2) << 20, threads).chunk, 256);
}

TEST(SoftmaxPlan, EveryPlannedPathIsRegistered) {
  for (bool log : {false, true})
    for (Direction dir : {Direction::Fwd, Direction::Bwd})
      for (const Shape& s : {Shape{4, 4}, Shape{4, 4, 4}}) {
        const Plan p = plan_for(s, 1, dir, log);
        const PathInfo& info = path_info(p.path);
        EXPECT_EQ(info.op, log ? "log_softmax" : "softmax");
        EXPECT_EQ(info.direction, dir);
        EXPECT_EQ(info.backend, Backend::CPU);
        EXPECT_EQ(info.index_bits, p.index_bits);
      }
}

#ifndef SEGRED_WITH_CUDA
// Without the CUDA backend a CUDA problem has no path (test_plan_cuda_softmax.cpp
// covers the CUDA plans of a CUDA build).
TEST(SoftmaxPlan, CudaProblemIsRejectedInThisBuild) {
  SoftmaxProblem p = make_softmax_problem({4, 4}, 1, DType::Float32);
  p.backend = Backend::CUDA;
  EXPECT_THROW(plan_softmax(p), ValueError);
}
#endif

}  // namespace
