// plan_softmax for Backend::CUDA as a pure function (shared/TESTING.md, "Plan tests
// without a GPU"): path and index width at shapes just below and above 2^31 and
// 2^32 elements, inner == 1 and inner > 1, dims of 1 and 2, for every CUDA path,
// without allocating. Also: every i32 plan keeps every index its kernel forms
// below 2^31, and every resident geometry covers D.
#include <gtest/gtest.h>

#include "segred/segred.h"

#ifdef SEGRED_WITH_CUDA
#include <set>

#include "cli/softmax_cases.h"
#include "src/core/softmax_geometry.h"

namespace {

using namespace segred;
constexpr int64_t k2_31 = int64_t(1) << 31;
constexpr int64_t k2_32 = int64_t(1) << 32;

// The vector widths the kernels instantiate (src/cuda/softmax_impl.cuh, pick_kernel):
// scalar, the kind's width, the staged 16-bit forward's 16-byte vectors (session 8)
// and the register spatial kernel's on short 16-bit forward columns (session 14).
bool vec_instantiated(const detail::SoftmaxGeometry& g, int es, bool fwd, int64_t D) {
  if (g.vec == 1 || g.vec == detail::softmax_vec_elems(g.kernel, es)) return true;
  if (g.staged) return g.vec == detail::softmax_staged_vec_elems(es, fwd);
  return g.kernel == detail::SoftmaxKernel::Spatial && D <= detail::kSoftmaxSpatialShortRows &&
         g.vec == detail::softmax_spatial_short_vec_elems(es, fwd);
}

SoftmaxProblem cuda_problem(const Shape& s, int64_t dim, Direction dir, bool log, DType dt) {
  return make_softmax_problem(s, dim, dt, dir, log, Backend::CUDA);
}

std::string expected_name(bool log, Direction dir, const char* kind, int bits) {
  return std::string(log ? "log_softmax" : "softmax") + (dir == Direction::Fwd ? ".fwd" : ".bwd") + ".cuda." + kind +
         ".i" + std::to_string(bits);
}

// Upper bounds of what the kernels of src/cuda/softmax_impl.cuh form, from the geometry.
int64_t max_formed_index(const SoftmaxProblem& p, const detail::SoftmaxGeometry& g) {
  const int64_t D = p.dim_size;
  const int64_t threads = int64_t(g.threads());
  int64_t m = g.grid * threads;  // global thread index
  if (g.kernel == detail::SoftmaxKernel::Warp) {
    const int64_t per_block = threads / g.lanes;
    m = std::max(m, p.outer + g.grid * per_block);                      // row counter + step
    m = std::max(m, int64_t(g.lanes) * (g.ev / g.vec) * g.vec);         // in-row element index
  } else if (g.kernel == detail::SoftmaxKernel::Block) {
    m = std::max(m, p.outer + g.grid / g.cluster);                      // row counter + step
    m = std::max(m, g.chunks * g.cluster * (g.ev / g.vec) * threads * g.vec);  // in-row element index
  } else if (g.staged) {
    const int64_t cols = int64_t(g.tx) * g.vec;
    m = std::max(m, g.work + g.grid / g.cluster);                       // tile counter + step
    m = std::max(m, g.work * cols);                                      // column index
    const int64_t dmax = int64_t(g.cluster) * g.krows * g.ty;           // row index d (first row + TY*k)
    m = std::max(m, dmax);
    m = std::max(m, std::min(dmax, D) * p.inner);                      // d * inner (formed only for d < D)
  } else {
    const int64_t cols = int64_t(g.tx) * g.vec;
    const int64_t E = g.ev / g.vec;
    m = std::max(m, g.work + g.grid / g.cluster);                       // tile counter + step
    m = std::max(m, g.work * cols);                                      // column index
    const int64_t dmax = int64_t(g.ty) * g.chunks * g.cluster * E;      // row index d
    m = std::max(m, dmax);
    m = std::max(m, std::min(dmax, D) * p.inner);                      // d * inner (formed only for d < D)
    m = std::max(m, g.chunks * g.cluster * E);
  }
  return m;
}

void expect_consistent(const SoftmaxProblem& p) {
  const Plan plan = plan_softmax(p);
  const detail::SoftmaxGeometry g = detail::softmax_geometry(p);
  const PathInfo& info = path_info(plan.path);
  EXPECT_EQ(info.backend, Backend::CUDA) << plan;
  EXPECT_EQ(info.index_bits, plan.index_bits) << plan;
  EXPECT_EQ(info.direction, p.direction) << plan;
  EXPECT_EQ(info.op, p.log ? "log_softmax" : "softmax") << plan;
  EXPECT_EQ(plan.index_bits, g.index_bits);
  if (plan.index_bits == 32) {
    EXPECT_LT(max_formed_index(p, g), k2_31) << plan;
  }
  // The geometry covers D: resident (chunks == 1) or enough chunks.
  const int64_t D = p.dim_size;
  if (g.kernel == detail::SoftmaxKernel::Warp) {
    EXPECT_GE(int64_t(g.lanes) * g.ev, D) << plan;
  } else if (g.kernel == detail::SoftmaxKernel::Block) {
    EXPECT_GE(g.chunks * g.cluster * g.threads() * int64_t(g.ev), D) << plan;
    EXPECT_EQ(g.grid % g.cluster, 0) << plan;
  } else if (g.staged) {
    // Staged spatial: the cluster's ranks hold the column, each rank krows x ty
    // rows of tx vectors in shared memory (1 array fwd, 2 bwd, 1 bwd with y
    // alone), within the budget; the Plan names the backward's form.
    const int es0 = dtype_size(p.dtype);
    const int na = (p.direction == Direction::Fwd || g.stage_y) ? 1 : 2;
    EXPECT_TRUE(!g.stage_y || p.direction == Direction::Bwd) << plan;
    EXPECT_EQ(plan.variant, p.direction == Direction::Fwd ? "" : g.stage_y ? "stage_y" : "stage_gy") << plan;
    EXPECT_GE(int64_t(g.cluster) * g.krows * g.ty, D) << plan;
    EXPECT_LT(int64_t(g.cluster) * (g.krows - 1) * g.ty, D) << plan << " (a rank with no rows)";
    EXPECT_EQ(g.chunks, 1) << plan;
    EXPECT_EQ(g.stage_bytes, int64_t(na) * g.krows * g.ty * g.tx * g.vec * es0) << plan;
    EXPECT_LE(g.stage_bytes, detail::softmax_test_caps().stage_bytes.load()) << plan;
    EXPECT_LE(g.smem_bytes(4), 227 * 1024) << plan;
    EXPECT_EQ(g.stage_offset(4) % 16, 0) << plan;
    EXPECT_LE(g.threads(), 256) << plan;
    EXPECT_LE(g.tx, 32) << plan;
    EXPECT_TRUE(g.tx * g.vec * es0 == 128 || g.tx * g.vec * es0 == 64 || g.tx * g.vec * es0 == 32) << plan;
    // Session 8: the 16-bit forward also at 16-byte vectors (softmax_staged_vec_elems).
    EXPECT_TRUE(g.vec == detail::softmax_vec_elems(detail::SoftmaxKernel::Spatial, es0) ||
                g.vec == detail::softmax_staged_vec_elems(es0, p.direction == Direction::Fwd))
        << plan;
    EXPECT_EQ(p.inner % g.vec, 0) << plan;
    EXPECT_LE(es0, 4) << plan;
    EXPECT_GE(g.work * g.tx * g.vec, p.outer * p.inner) << plan;
    EXPECT_EQ(g.grid % g.cluster, 0) << plan;
  } else {
    EXPECT_FALSE(g.stage_y) << plan;
    EXPECT_EQ(plan.variant, "") << plan;
    EXPECT_GE(g.chunks * g.cluster * int64_t(g.ty) * (g.ev / g.vec), D) << plan;
    EXPECT_GE(g.work * g.tx * g.vec, p.outer * p.inner) << plan;
    EXPECT_EQ(g.grid % g.cluster, 0) << plan;
  }
  // The kernels exist for this (kind, vector width, EV): the launcher picks an
  // instantiation by these three and fails on any other.
  const int es = dtype_size(p.dtype);
  const bool fwd = p.direction == Direction::Fwd;
  EXPECT_TRUE(vec_instantiated(g, es, fwd, D)) << plan << " vec " << g.vec;
  EXPECT_TRUE(detail::softmax_ev_instantiated(g.kernel, es, fwd, g.vec, g.ev)) << plan << " ev " << g.ev;
  EXPECT_EQ(g.ev, detail::softmax_pick_elems_per_thread(g.kernel, es, fwd, g.vec, D)) << plan;
  EXPECT_LE(g.threads(), 1024);
  EXPECT_GE(g.threads(), 32);
  EXPECT_LE(g.cluster, 16);
  EXPECT_LT(g.grid, k2_31);
}

struct Case {
  Shape shape;
  int64_t dim;
  const char* kind;
  int bits;
};

// Shapes around 2^31 and 2^32 elements, inner == 1 and > 1, dims of 1 and 2.
const std::vector<Case>& boundary_cases() {
  static const std::vector<Case> cases = {
      // dims of 1 and 2 over the last dim: lane groups of 1 and 2 lanes.
      {{k2_31 - 1, 1}, -1, "lastdim_warp", 64},
      {{k2_31, 1}, -1, "lastdim_warp", 64},
      {{k2_31 + 1, 1}, -1, "lastdim_warp", 64},
      {{k2_32 - 1, 1}, -1, "lastdim_warp", 64},
      {{k2_32 + 1, 1}, -1, "lastdim_warp", 64},
      {{2200000000, 1}, -1, "lastdim_warp", 64},
      {{k2_31 / 2, 2}, -1, "lastdim_warp", 64},
      {{k2_31 / 2 + 1, 2}, -1, "lastdim_warp", 64},
      {{k2_32 / 2 + 1, 2}, -1, "lastdim_warp", 64},
      {{1100000000, 2}, -1, "lastdim_warp", 64},
      {{k2_31 / 128, 128}, -1, "lastdim_warp", 64},
      // long rows: one row of 2^31 +- 1 and 2^32 +- 1 elements.
      {{1, k2_31 - 1}, -1, "lastdim_block", 64},
      {{1, k2_31 + 2}, -1, "lastdim_block", 64},
      {{1, k2_32 - 1}, -1, "lastdim_block", 64},
      {{1, k2_32 + 1}, -1, "lastdim_block", 64},
      {{k2_31 / 4096 + 1, 4096}, -1, "lastdim_block", 64},
      {{k2_32 / 4096, 4096}, -1, "lastdim_block", 64},
      // inner > 1: [1, 2, 2^31 + 1] over dim 1 (the PyTorch defect's shape), dims of
      // 1 and 2 with huge inner, and a huge reduced dim over dim 0.
      {{1, 2, k2_31 + 1}, 1, "spatial", 64},
      {{1, 2, k2_31 / 2}, 1, "spatial", 64},
      {{1, 2, k2_31 / 2 - 1}, 1, "spatial", 64},
      {{1, 1, k2_31 + 1}, 1, "spatial", 64},
      {{1, 1, k2_32}, 1, "spatial", 64},
      {{2, 1, k2_31}, 1, "spatial", 64},
      {{k2_31 + 1, 2}, 0, "spatial", 64},
      {{k2_32 + 1, 2}, 0, "spatial", 64},
      {{2, k2_31 / 2}, 0, "spatial", 64},
      {{8, 4, int64_t(1) << 28}, 1, "spatial", 64},
      // inner > 1, long columns with vector loads: the staged kernel (session 6: its
      // own path). [1, 325, 13215284] (2^32 + 4 elements: `segred check --large`'s
      // spatial_staged case), [1, 2047, 2^19] (exactly 2^30 - 2^19 elements: the
      // first i64 element count) and [2, 4096, 2^18 + 4] (past 2^31, clusters of
      // 16 in the backward) over dim 1.
      {{1, 325, 13215284}, 1, "spatial_staged", 64},
      {{1, 2047, int64_t(1) << 19}, 1, "spatial_staged", 64},
      {{2, 4096, (int64_t(1) << 18) + 4}, 1, "spatial_staged", 64},
  };
  return cases;
}

TEST(CudaSoftmaxPlan, BoundaryShapesPickPathAndIndexWidth) {
  for (const Case& c : boundary_cases())
    for (bool log : {false, true})
      for (Direction dir : {Direction::Fwd, Direction::Bwd})
        for (DType dt : {DType::Float32, DType::Float16}) {
          const SoftmaxProblem p = cuda_problem(c.shape, c.dim, dir, log, dt);
          const Plan plan = plan_softmax(p);
          EXPECT_EQ(std::string(plan.path), expected_name(log, dir, c.kind, c.bits))
              << shape_string(c.shape) << " dim " << c.dim << " " << dtype_name(dt);
          EXPECT_EQ(plan.index_bits, c.bits);
          expect_consistent(p);
        }
}

// The 32/64 threshold: 2*numel + 2^20 < 2^31, i.e. numel < 2^30 - 2^19.
TEST(CudaSoftmaxPlan, Int32ExactlyBelowTheBound) {
  const int64_t last32 = (k2_31 - detail::kSoftmaxIndexSlack) / 2 - 1;  // 2*n + slack = 2^31 - 2
  for (bool log : {false, true})
    for (Direction dir : {Direction::Fwd, Direction::Bwd}) {
      // rows of 1 (warp), one long row (block), spatial [1, 1, n] (dim 1, D = 1) and [n/2, 2] over dim 0.
      for (const auto& [shape, dim] : std::vector<std::pair<Shape, int64_t>>{
               {{last32, 1}, -1}, {{1, last32}, -1}, {{1, 1, last32}, 1}, {{last32 / 2, 2}, 0}}) {
        SoftmaxProblem p = cuda_problem(shape, dim, dir, log, DType::Float32);
        EXPECT_EQ(plan_softmax(p).index_bits, 32) << shape_string(shape);
        expect_consistent(p);
        Shape up = shape;
        for (auto& s : up)
          if (s == last32) s = last32 + 1;
          else if (s == last32 / 2) s = last32 / 2 + 1;
        p = cuda_problem(up, dim, dir, log, DType::Float32);
        EXPECT_EQ(plan_softmax(p).index_bits, 64) << shape_string(up);
        expect_consistent(p);
      }
    }
}

TEST(CudaSoftmaxPlan, EveryCudaPathIsPlannedAndRegistered) {
  // Small shapes that reach each kernel at 32 bits; with the boundary cases above
  // (64 bits) every registered CUDA softmax path is some plan's answer.
  std::set<std::string> planned;
  const std::vector<std::pair<Shape, int64_t>> small = {{{7, 1}, -1},      {{300, 100}, -1}, {{16, 4096}, -1},
                                                         {{2, 300000}, -1}, {{4, 6, 5}, 1},   {{8192, 64}, 0},
                                                         {{4, 300, 64}, 1}};  // last: spatial_staged (not fp64)
  for (bool log : {false, true})
    for (Direction dir : {Direction::Fwd, Direction::Bwd})
      for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
        for (const auto& [s, d] : small) {
          const SoftmaxProblem p = cuda_problem(s, d, dir, log, dt);
          planned.insert(std::string(plan_softmax(p).path));
          expect_consistent(p);
        }
        for (const Case& c : boundary_cases()) planned.insert(std::string(plan_softmax(cuda_problem(c.shape, c.dim, dir, log, dt)).path));
      }
  int n = 0;
  for (const PathInfo& info : paths()) {
    if (info.backend != Backend::CUDA || (info.op != "softmax" && info.op != "log_softmax")) continue;
    ++n;
    EXPECT_TRUE(planned.count(std::string(info.name))) << info.name << " is registered but no plan picks it";
  }
  EXPECT_EQ(n, 32);  // 4 kernels (lastdim_warp, lastdim_block, spatial, spatial_staged) x i32/i64 x op x dir
}

// Session 6: the staged spatial kernel is its own path, spatial_staged, named by
// the plan exactly when the geometry stages (SoftmaxGeometry::staged), on each
// side of the staging rules: forward D >= kSoftmaxStageFwdMinD (256), backward D
// >= kSoftmaxStageBwdMinD (64) and 128-byte staged rows only, 2- and 4-byte types
// (float64: spatial at any D), vector loads only (inner % V == 0).
TEST(CudaSoftmaxPlan, StagedPathOnEachSideOfTheStagingRules) {
  auto path = [](const Shape& s, Direction dir, bool log, DType dt, int max_cluster = 16) {
    SoftmaxProblem p = cuda_problem(s, 1, dir, log, dt);
    p.max_cluster = max_cluster;
    const Plan plan = plan_softmax(p);
    const detail::SoftmaxGeometry g = detail::softmax_geometry(p);
    // The name follows the geometry's staged flag, and it is registered.
    EXPECT_EQ(plan.path.find(".spatial_staged.") != std::string::npos, g.staged) << plan;
    expect_consistent(p);
    return std::string(plan.path);
  };
  const int64_t fwd_min = detail::kSoftmaxStageFwdMinD, bwd_min = detail::kSoftmaxStageBwdMinD;
  EXPECT_EQ(fwd_min, 256);
  EXPECT_EQ(bwd_min, 64);
  constexpr Direction F = Direction::Fwd, B = Direction::Bwd;
  for (bool log : {false, true}) {
    for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (log ? " log" : ""));
      // Forward: D = 255 register, 256 staged (inner 64: vector loads in every dtype).
      EXPECT_EQ(path({128, fwd_min - 1, 64}, F, log, dt), expected_name(log, F, "spatial", 32));
      EXPECT_EQ(path({128, fwd_min, 64}, F, log, dt), expected_name(log, F, "spatial_staged", 32));
      EXPECT_EQ(path({128, fwd_min + 1, 64}, F, log, dt), expected_name(log, F, "spatial_staged", 32));
      // Backward: D = 63 register, 64 staged (128-byte rows of g and y fit one block).
      EXPECT_EQ(path({128, bwd_min - 1, 64}, B, log, dt), expected_name(log, B, "spatial", 32));
      EXPECT_EQ(path({128, bwd_min, 64}, B, log, dt), expected_name(log, B, "spatial_staged", 32));
      // Between the thresholds: the backward stages, the forward does not.
      EXPECT_EQ(path({128, 200, 64}, F, log, dt), expected_name(log, F, "spatial", 32));
      EXPECT_EQ(path({128, 200, 64}, B, log, dt), expected_name(log, B, "spatial_staged", 32));
      // Scalar loads (inner % V != 0): the register path at any D.
      EXPECT_EQ(path({128, 1000, 66}, F, log, dt), expected_name(log, F, "spatial", 32));
      EXPECT_EQ(path({128, 1000, 66}, B, log, dt), expected_name(log, B, "spatial", 32));
      EXPECT_EQ(path({128, 1000, 64}, F, log, dt), expected_name(log, F, "spatial_staged", 32));
      EXPECT_EQ(path({128, 1000, 64}, B, log, dt), expected_name(log, B, "spatial_staged", 32));
    }
    // float64: no staged kernel.
    for (int64_t D : {fwd_min - 1, fwd_min, int64_t(1000), int64_t(8192)})
      for (Direction dir : {F, B})
        EXPECT_EQ(path({4, D, 64}, dir, log, DType::Float64), expected_name(log, dir, "spatial", 32)) << D;
  }
  // The 128-byte-row rule of the backward: [8192, 8192] over dim 0 (inner 8192).
  // At the default caps the forward stages 128-byte rows over 16 ranks and the
  // backward (g and y: 128 KB per rank of 16) stages y alone (session 21: 64 KB
  // per rank of 16, variant "stage_y"); with at most 8 blocks per cluster the
  // forward stages 64-byte rows, the backward, which stages 128-byte rows only
  // (y alone: 128 KB per rank of 8), keeps the register path.
  for (DType dt : {DType::Float32, DType::Float16}) {
    const int es = dtype_size(dt);
    for (int mc : {16, 8}) {
      SoftmaxProblem f = cuda_problem({8192, 8192}, 0, F, false, dt);
      f.max_cluster = mc;
      const auto gf = detail::softmax_geometry(f);
      EXPECT_TRUE(gf.staged) << mc;
      EXPECT_EQ(gf.tx * gf.vec * es, mc == 16 ? 128 : 64) << mc;
      EXPECT_EQ(plan_softmax(f).path, "softmax.fwd.cuda.spatial_staged.i32") << mc;
      SoftmaxProblem b = cuda_problem({8192, 8192}, 0, B, false, dt);
      b.max_cluster = mc;
      const auto gb = detail::softmax_geometry(b);
      EXPECT_EQ(gb.staged, mc == 16) << mc;
      EXPECT_EQ(gb.stage_y, mc == 16) << mc;
      EXPECT_EQ(plan_softmax(b).path, mc == 16 ? "softmax.bwd.cuda.spatial_staged.i32" : "softmax.bwd.cuda.spatial.i32")
          << mc;
      EXPECT_EQ(plan_softmax(b).variant, mc == 16 ? "stage_y" : "") << mc;
      if (mc == 16) {
        EXPECT_EQ(gb.tx * gb.vec * es, 128);
        EXPECT_EQ(gb.cluster, 16);
        EXPECT_EQ(gb.stage_bytes, int64_t(64) << 10);  // y only: 512 rows x 128 B per rank
        EXPECT_EQ(int64_t(gb.cluster) * gb.ty * gb.krows, 8192);
        EXPECT_EQ(gb.grid, 16 * 8192 / (128 / es));
        EXPECT_EQ(gb.staged_form(), 2);
      }
      // The test cap: never (the register path), and y alone where g and y fit.
      detail::softmax_test_caps().stage_y_bwd = 2;
      EXPECT_FALSE(detail::softmax_geometry(b).staged) << mc;
      detail::softmax_test_caps().stage_y_bwd = 0;
    }
  }
  {
    // Where g and y fit together the rule keeps both staged ("stage_gy"); the cap
    // (1) stages y alone wherever it fits, over fewer ranks.
    SoftmaxProblem b = cuda_problem({32, 1000, 4096}, 1, B, false, DType::Float32);
    auto g2 = detail::softmax_geometry(b);
    EXPECT_TRUE(g2.staged);
    EXPECT_FALSE(g2.stage_y);
    EXPECT_EQ(g2.staged_form(), 1);
    EXPECT_EQ(plan_softmax(b).variant, "stage_gy");
    detail::softmax_test_caps().stage_y_bwd = 1;
    const auto g1 = detail::softmax_geometry(b);
    EXPECT_TRUE(g1.staged && g1.stage_y);
    EXPECT_EQ(g1.cluster * 2, g2.cluster);
    EXPECT_EQ(g1.stage_bytes, g2.stage_bytes);
    EXPECT_EQ(plan_softmax(b).variant, "stage_y");
    EXPECT_EQ(plan_softmax(b).path, "softmax.bwd.cuda.spatial_staged.i32");
    // The forward has no such form: the cap does not touch it.
    SoftmaxProblem f = cuda_problem({32, 1000, 4096}, 1, F, false, DType::Float32);
    EXPECT_FALSE(detail::softmax_geometry(f).stage_y);
    EXPECT_EQ(plan_softmax(f).variant, "");
    detail::softmax_test_caps().stage_y_bwd = 0;
  }
  // A backward that stages at 16 ranks but not at 2 (128-byte rows of [3, 1000,
  // 64] fp32 g and y need 4 ranks): at 2 the fallback caps stage y alone (session
  // 21: 64 KB per rank of 2), at 1 they give the register path.
  EXPECT_EQ(path({3, 1000, 64}, B, false, DType::Float32, 16), "softmax.bwd.cuda.spatial_staged.i32");
  EXPECT_EQ(path({3, 1000, 64}, B, false, DType::Float32, 4), "softmax.bwd.cuda.spatial_staged.i32");
  EXPECT_EQ(path({3, 1000, 64}, B, false, DType::Float32, 2), "softmax.bwd.cuda.spatial_staged.i32");
  EXPECT_EQ(path({3, 1000, 64}, B, false, DType::Float32, 1), "softmax.bwd.cuda.spatial.i32");
  // Staging off (the test hook: budget 0): spatial everywhere.
  detail::softmax_test_caps().stage_bytes = 0;
  EXPECT_EQ(path({128, 1000, 64}, F, false, DType::Float32), "softmax.fwd.cuda.spatial.i32");
  EXPECT_EQ(path({128, 1000, 64}, B, true, DType::Float16), "log_softmax.bwd.cuda.spatial.i32");
  detail::softmax_test_caps().stage_bytes = int64_t(64) << 10;
}

// Session 6: spatial_staged's i32/i64 switch. Its kernel forms no index above the
// register spatial kernel's bound (softmax_geometry.h, "Index width"), so the rule
// is the same: i32 while 2*numel + 2^20 < 2^31, i.e. numel < 2^30 - 2^19 =
// 1073217536. Staged shapes need inner % 4 == 0, so numel is a multiple of 4:
// just below the bound [1, 4079, 263108] (4 * 4079 * 65777 = bound - 4; clusters
// of 8 fwd, 16 bwd in float32) and [1, 256, 4192252] (bound - 1024), at it [1,
// 2047, 2^19] (= bound) and [1, 256, 4192256] (= bound). No allocation.
TEST(CudaSoftmaxPlan, StagedIndexWidthAtTheBound) {
  const int64_t bound = (int64_t(1) << 30) - (int64_t(1) << 19);
  EXPECT_EQ(2 * bound + detail::kSoftmaxIndexSlack, k2_31);
  struct S {
    Shape shape;
    int bits;
  };
  const std::vector<S> cases = {{{1, 4079, 263108}, 32},
                                {{1, 256, 4192252}, 32},
                                {{1, 2047, int64_t(1) << 19}, 64},
                                {{1, 256, 4192256}, 64},
                                {{1, 325, 13215284}, 64}};
  EXPECT_EQ(numel(cases[0].shape), bound - 4);
  EXPECT_EQ(numel(cases[1].shape), bound - 1024);
  EXPECT_EQ(numel(cases[2].shape), bound);
  EXPECT_EQ(numel(cases[3].shape), bound);
  for (const S& c : cases)
    for (bool log : {false, true})
      for (Direction dir : {Direction::Fwd, Direction::Bwd}) {
        for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16}) {
          const SoftmaxProblem p = cuda_problem(c.shape, 1, dir, log, dt);
          const Plan plan = plan_softmax(p);
          EXPECT_EQ(std::string(plan.path), expected_name(log, dir, "spatial_staged", c.bits))
              << shape_string(c.shape) << " " << dtype_name(dt);
          EXPECT_EQ(plan.index_bits, c.bits);
          expect_consistent(p);  // i32: every index the staged kernel forms < 2^31
          // The same switch as the register kernel's (staging off).
          detail::softmax_test_caps().stage_bytes = 0;
          const Plan reg = plan_softmax(p);
          detail::softmax_test_caps().stage_bytes = int64_t(64) << 10;
          EXPECT_EQ(std::string(reg.path), expected_name(log, dir, "spatial", c.bits)) << shape_string(c.shape);
        }
        // float64 on the same shapes: spatial, the same width.
        const Plan f64 = plan_softmax(cuda_problem(c.shape, 1, dir, log, DType::Float64));
        EXPECT_EQ(std::string(f64.path), expected_name(log, dir, "spatial", c.bits)) << shape_string(c.shape);
      }
  // The forced-i64 test hook reaches spatial_staged.i64 on small shapes (the CUDA
  // tests run it against the reference).
  detail::softmax_force_index64() = true;
  EXPECT_EQ(std::string(plan_softmax(cuda_problem({2, 300, 64}, 1, Direction::Bwd, true, DType::Float16)).path),
            "log_softmax.bwd.cuda.spatial_staged.i64");
  detail::softmax_force_index64() = false;
  EXPECT_EQ(std::string(plan_softmax(cuda_problem({2, 300, 64}, 1, Direction::Bwd, true, DType::Float16)).path),
            "log_softmax.bwd.cuda.spatial_staged.i32");
}

// Session 21: the staged backward's two forms on each side of their rules, at
// 128-byte rows over at most 16 ranks of 64 KB (inner 64: every 2- and 4-byte
// dtype vectorises). A rank's 64 KB of 128-byte rows hold 512 rows: 256 of g and
// 256 of y, so g and y together fit D <= 16 x 256 = 4096 ("stage_gy"), y alone D
// <= 16 x 512 = 8192 ("stage_y", 4097 to 8192); D = 8193 takes the register path. The stage_y i32/i64 switch is the
// staged kernel's: [8192, 131000] over dim 0 (2 numel + 2^20 < 2^31) i32,
// [8192, 131008] (numel = 2^30 - 2^19, the bound) i64. No allocation.
TEST(CudaSoftmaxPlan, StageYOnEachSideOfItsRules) {
  struct S {
    int64_t D;
    const char* form;  // "stage_gy", "stage_y", "" (register path)
  };
  for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16})
    for (bool log : {false, true})
      for (const S& c : {S{4096, "stage_gy"}, S{4097, "stage_y"}, S{8192, "stage_y"}, S{8193, ""}}) {
        const SoftmaxProblem p = cuda_problem({2, c.D, 64}, 1, Direction::Bwd, log, dt);
        const Plan plan = plan_softmax(p);
        const auto g = detail::softmax_geometry(p);
        EXPECT_EQ(plan.variant, c.form) << c.D << " " << dtype_name(dt);
        EXPECT_EQ(std::string(plan.path),
                  expected_name(log, Direction::Bwd, *c.form ? "spatial_staged" : "spatial", 32))
            << c.D << " " << dtype_name(dt);
        if (*c.form) {
          EXPECT_EQ(g.tx * g.vec * dtype_size(dt), 128) << c.D;
          EXPECT_EQ(g.cluster, 16) << c.D;  // the fewest ranks that fit, at each of these D
        }
        expect_consistent(p);
        // The forward of the same shapes stages x (one array) at every D here.
        const Plan f = plan_softmax(cuda_problem({2, c.D, 64}, 1, Direction::Fwd, log, dt));
        EXPECT_EQ(f.variant, "") << c.D;
        EXPECT_EQ(std::string(f.path), expected_name(log, Direction::Fwd, "spatial_staged", 32)) << c.D;
      }
  const int64_t bound = (int64_t(1) << 30) - (int64_t(1) << 19);
  EXPECT_EQ(8192 * int64_t(131008), bound);
  for (DType dt : {DType::Float32, DType::Float16})
    for (auto [inner, bits] : {std::pair<int64_t, int>{131000, 32}, {131008, 64}}) {
      const SoftmaxProblem p = cuda_problem({8192, inner}, 0, Direction::Bwd, false, dt);
      const Plan plan = plan_softmax(p);
      EXPECT_EQ(std::string(plan.path), expected_name(false, Direction::Bwd, "spatial_staged", bits)) << inner;
      EXPECT_EQ(plan.variant, "stage_y") << inner;
      expect_consistent(p);  // i32: every index the kernel forms (g's loads included) < 2^31
    }
}

// `segred check` (cli/softmax_cases.cpp, no --large) on CUDA must reach every
// registered CUDA softmax path except the i64 twins (those need --large: their
// cases are test_check_large_softmax.cpp's): its inputs, in every dtype and op,
// forward and backward, plan to every i32 path, spatial_staged included
// (staged_columns, long_columns_tiles) and spatial (float64, short columns).
TEST(CudaSoftmaxPlan, CheckMatrixReachesEveryCudaI32Path) {
  std::set<std::string> planned, variants;
  for (const cli::SoftmaxCase& c : cli::softmax_cases()) {
    const cli::SoftmaxInput& in = *c.input;
    if (numel(in.shape) == 0) continue;  // no kernel runs
    DType dt = DType::Float64;
    for (DType t : {DType::Float64, DType::Float32, DType::Float16, DType::BFloat16})
      if (dtype_name(t) == c.dtype) dt = t;
    for (Direction dir : {Direction::Fwd, Direction::Bwd}) {
      const Plan plan = plan_softmax(make_softmax_problem(in.shape, in.dim, dt, dir, c.log, Backend::CUDA));
      planned.insert(std::string(plan.path));
      if (!plan.variant.empty()) variants.insert(std::string(plan.path) + " " + std::string(plan.variant));
    }
  }
  // Session 21: both forms of the staged backward (staged_columns: g and y;
  // staged_y_columns: y alone), softmax and log_softmax.
  for (const char* op : {"softmax", "log_softmax"})
    for (const char* form : {"stage_gy", "stage_y"}) {
      const std::string want = std::string(op) + ".bwd.cuda.spatial_staged.i32 " + form;
      EXPECT_TRUE(variants.count(want)) << want << " is not reached by the check matrix";
    }
  int n = 0;
  for (const PathInfo& info : paths()) {
    if (info.backend != Backend::CUDA || (info.op != "softmax" && info.op != "log_softmax") || info.index_bits != 32)
      continue;
    ++n;
    EXPECT_TRUE(planned.count(std::string(info.name))) << info.name << " is not reached by the check matrix";
  }
  EXPECT_EQ(n, 16);
  for (const auto& p : planned) EXPECT_NE(p.find(".i32"), std::string::npos) << p;
  // The staged input reaches spatial_staged in the 2- and 4-byte dtypes, spatial in float64.
  for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64})
    for (Direction dir : {Direction::Fwd, Direction::Bwd}) {
      const auto g = detail::softmax_geometry(make_softmax_problem({2, 300, 24}, 1, dt, dir, false, Backend::CUDA));
      EXPECT_EQ(g.staged, dt != DType::Float64) << dtype_name(dt);
    }
  bool has_staged_input = false;
  for (const cli::SoftmaxInput& in : cli::softmax_inputs())
    has_staged_input |= in.name == "staged_columns" && in.shape == Shape{2, 300, 24} && in.dim == 1;
  EXPECT_TRUE(has_staged_input);
}

// Elements per thread per array (v4): registers hold raw loaded vectors, 128 bytes
// in flight per thread on the last-dim kernels (fwd one array, bwd two), 64 bytes
// per array on spatial, 16 elements for scalar loads, 8 for float64.
TEST(CudaSoftmaxPlan, ElementsPerThread) {
  using detail::SoftmaxKernel;
  using detail::softmax_elems_per_thread;
  for (SoftmaxKernel k : {SoftmaxKernel::Warp, SoftmaxKernel::Block}) {
    EXPECT_EQ(softmax_elems_per_thread(k, 4, true, 4), 32);
    EXPECT_EQ(softmax_elems_per_thread(k, 4, false, 4), 16);
    EXPECT_EQ(softmax_elems_per_thread(k, 2, true, 8), 64);
    EXPECT_EQ(softmax_elems_per_thread(k, 2, false, 8), 32);
    EXPECT_EQ(softmax_elems_per_thread(k, 8, true, 2), 8);
    EXPECT_EQ(softmax_elems_per_thread(k, 8, false, 2), 8);
    for (int es : {2, 4})
      for (bool fwd : {true, false}) EXPECT_EQ(softmax_elems_per_thread(k, es, fwd, 1), 16);
  }
  EXPECT_EQ(softmax_elems_per_thread(SoftmaxKernel::Spatial, 4, true, 4), 16);
  EXPECT_EQ(softmax_elems_per_thread(SoftmaxKernel::Spatial, 4, false, 4), 16);
  EXPECT_EQ(softmax_elems_per_thread(SoftmaxKernel::Spatial, 2, true, 4), 32);
  EXPECT_EQ(softmax_elems_per_thread(SoftmaxKernel::Spatial, 2, false, 4), 32);
  EXPECT_EQ(softmax_elems_per_thread(SoftmaxKernel::Spatial, 2, true, 1), 16);
  EXPECT_EQ(softmax_elems_per_thread(SoftmaxKernel::Spatial, 8, true, 2), 8);
  // v5, short rows: the warp kernel 16 (v3's EV) where the full EV is larger, the
  // spatial kernel E = 4 rows (EV = 4 x vec).
  using detail::softmax_short_elems_per_thread;
  {
    const SoftmaxKernel k = SoftmaxKernel::Warp;
    EXPECT_EQ(softmax_short_elems_per_thread(k, 4, true, 4), 16);
    EXPECT_EQ(softmax_short_elems_per_thread(k, 4, false, 4), 16);
    EXPECT_EQ(softmax_short_elems_per_thread(k, 2, true, 8), 16);
    EXPECT_EQ(softmax_short_elems_per_thread(k, 2, false, 8), 16);
    EXPECT_EQ(softmax_short_elems_per_thread(k, 8, true, 2), 8);
    EXPECT_EQ(softmax_short_elems_per_thread(k, 2, true, 1), 16);
  }
  for (int es : {2, 4, 8})
    for (bool fwd : {true, false})
      EXPECT_EQ(softmax_short_elems_per_thread(SoftmaxKernel::Block, es, fwd, 16 / es),
                softmax_elems_per_thread(SoftmaxKernel::Block, es, fwd, 16 / es));
  EXPECT_EQ(softmax_short_elems_per_thread(SoftmaxKernel::Spatial, 4, true, 4), 16);   // E = 4 = full
  EXPECT_EQ(softmax_short_elems_per_thread(SoftmaxKernel::Spatial, 2, true, 4), 16);   // E 4 (full 8)
  EXPECT_EQ(softmax_short_elems_per_thread(SoftmaxKernel::Spatial, 2, false, 4), 16);
  EXPECT_EQ(softmax_short_elems_per_thread(SoftmaxKernel::Spatial, 2, true, 1), 4);    // E 4 (full 16)
  EXPECT_EQ(softmax_short_elems_per_thread(SoftmaxKernel::Spatial, 4, false, 1), 4);
  EXPECT_EQ(softmax_short_elems_per_thread(SoftmaxKernel::Spatial, 8, true, 2), 8);    // E 4 = full
  EXPECT_EQ(softmax_short_elems_per_thread(SoftmaxKernel::Spatial, 8, true, 1), 4);    // E 4 (full 8)
  // The geometry reports the EV it planned with, always an instantiated one.
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16})
    for (Direction dir : {Direction::Fwd, Direction::Bwd})
      for (const auto& [s, d] : std::vector<std::pair<Shape, int64_t>>{{{300, 100}, -1},
                                                                        {{16, 4096}, -1},
                                                                        {{3, 4097}, -1},
                                                                        {{3, 1000}, -1},
                                                                        {{4, 6, 8}, 1},
                                                                        {{4, 6, 5}, 1},
                                                                        {{4, 3, 8}, 1}}) {
        const SoftmaxProblem p = cuda_problem(s, d, dir, false, dt);
        const auto g = detail::softmax_geometry(p);
        const int es = dtype_size(dt);
        const bool fwd = dir == Direction::Fwd;
        EXPECT_EQ(g.ev, detail::softmax_pick_elems_per_thread(g.kernel, es, fwd, g.vec, p.dim_size))
            << shape_string(s) << " " << dtype_name(dt);
        EXPECT_TRUE(detail::softmax_ev_instantiated(g.kernel, es, fwd, g.vec, g.ev))
            << shape_string(s) << " " << dtype_name(dt);
      }
}

// The worked examples of src/core/softmax_geometry.h.
TEST(CudaSoftmaxPlan, WorkedExamples) {
  auto geo = [](const Shape& s, int64_t dim, DType dt, Direction dir = Direction::Fwd) {
    return detail::softmax_geometry(cuda_problem(s, dim, dir, false, dt));
  };
  constexpr Direction kBwd = Direction::Bwd;
  // [16384, 4096]: a block per row, resident; threads per row = 4096 / EV.
  auto g = geo({16384, 4096}, -1, DType::Float32);
  EXPECT_EQ(g.kernel, detail::SoftmaxKernel::Block);
  EXPECT_EQ(g.ev, 32);
  EXPECT_EQ(g.tx, 128);
  EXPECT_EQ(g.cluster, 1);
  EXPECT_EQ(g.chunks, 1);
  EXPECT_EQ(g.vec, 4);
  EXPECT_EQ(g.index_bits, 32);
  g = geo({16384, 4096}, -1, DType::Float32, kBwd);
  EXPECT_EQ(g.tx, 256);
  EXPECT_EQ(g.cluster, 1);
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    g = geo({16384, 4096}, -1, dt);
    EXPECT_EQ(g.kernel, detail::SoftmaxKernel::Block);
    EXPECT_EQ(g.vec, 8);
    EXPECT_EQ(g.ev, 64);
    EXPECT_EQ(g.tx, 64);
    EXPECT_EQ(g.grid, 16384);
    g = geo({16384, 4096}, -1, dt, kBwd);
    EXPECT_EQ(g.ev, 32);
    EXPECT_EQ(g.tx, 128);
  }
  // Long rows: blocks of 512 (two per SM) in a cluster of 4096 * 16 / (512 * EV)
  // blocks; 1024 only where a resident row needs more than 16 blocks of 512.
  // Session 7: [64, 262144] (2-8 waves of rows) streams in two chunks at half the
  // resident capacity (SoftmaxTestCaps::long_rows_streamed; off: the resident split).
  struct Long {
    DType dt;
    Direction dir;
    int tx_65536, cl_65536, ch_65536, tx_262144, cl_262144;  // [64, 262144]: resident (rule off)
    int tx_s, cl_s, ch_s;  // [64, 262144] by the rules: session 7's streaming (not the 16-bit bwd)
  };
  // Session 22: the float32 forward's resident rows in blocks of 256 (cluster 8);
  // SoftmaxTestCaps::block_threads_fwd32 = 512 gives the rule before (cluster 4).
  // The 16-bit forward's rows of two blocks of 512 stream through one block in two
  // chunks (SoftmaxTestCaps::fwd16_rows_one_block = false: the resident cluster 2).
  for (const Long& l :
       {Long{DType::Float32, Direction::Fwd, 256, 8, 1, 512, 16, 512, 8, 2},
        Long{DType::Float32, kBwd, 512, 8, 1, 1024, 16, 512, 16, 2},
        Long{DType::Float16, Direction::Fwd, 512, 1, 2, 256, 16, 256, 8, 2},
        Long{DType::Float16, kBwd, 512, 4, 1, 512, 16, 512, 16, 1},
        Long{DType::BFloat16, Direction::Fwd, 512, 1, 2, 256, 16, 256, 8, 2},
        Long{DType::BFloat16, kBwd, 512, 4, 1, 512, 16, 512, 16, 1}}) {
    SCOPED_TRACE(std::string(dtype_name(l.dt)) + (l.dir == Direction::Fwd ? " fwd" : " bwd"));
    g = geo({2048, 65536}, -1, l.dt, l.dir);
    EXPECT_EQ(g.kernel, detail::SoftmaxKernel::Block);
    EXPECT_EQ(g.tx, l.tx_65536);
    EXPECT_EQ(g.cluster, l.cl_65536);
    EXPECT_EQ(g.chunks, l.ch_65536);
    EXPECT_EQ(g.grid, 2048 * l.cl_65536);
    EXPECT_EQ(g.l2_hints, l.ch_65536 > 1);  // resident rows are read once
    detail::softmax_test_caps().block_threads_fwd32 = 512;
    detail::softmax_test_caps().fwd16_rows_one_block = false;
    const detail::SoftmaxGeometry g512 = geo({2048, 65536}, -1, l.dt, l.dir);
    detail::softmax_test_caps().block_threads_fwd32 = 256;
    detail::softmax_test_caps().fwd16_rows_one_block = true;
    EXPECT_EQ(g512.tx, 512);
    EXPECT_EQ(g512.chunks, 1);  // the rules before session 22: resident
    EXPECT_EQ(g512.cluster * g512.tx, g.cluster * g.tx * g.chunks);  // the same threads x chunks per row
    if (l.ch_65536 > 1) {
      // Few rows keep the cluster (the rows do not fill the GPU in one block each).
      const detail::SoftmaxGeometry few = geo({64, 65536}, -1, l.dt, l.dir);
      EXPECT_EQ(few.chunks, 1);
      EXPECT_EQ(few.cluster, 2);
      // Rows past two blocks of 512 keep a cluster (of 256-thread blocks: fwd16_block256).
      const detail::SoftmaxGeometry longer = geo({2048, 65536 + 8}, -1, l.dt, l.dir);
      EXPECT_EQ(longer.chunks, 1);
      EXPECT_EQ(longer.tx, 256);
      EXPECT_EQ(longer.cluster, 8);
    }
    // [64, 262144]: session 7 streams it in two chunks, since session 22 the 16-bit
    // forward in blocks of 256 (fwd16_block256) and not the 16-bit backward
    // (long_rows_streamed_bwd16: resident).
    g = geo({64, 262144}, -1, l.dt, l.dir);
    EXPECT_EQ(g.kernel, detail::SoftmaxKernel::Block);
    EXPECT_EQ(g.cluster, l.cl_s);
    EXPECT_EQ(g.tx, l.tx_s);
    EXPECT_EQ(g.chunks, l.ch_s);
    EXPECT_EQ(g.grid, 64 * l.cl_s);
    // Session 22: the re-read of a streamed row is kept in L2 by eviction
    // priorities (16-byte vectors here); the test cap turns them off.
    EXPECT_EQ(g.l2_hints, l.ch_s > 1);
    detail::softmax_test_caps().stream_l2_hints = false;
    EXPECT_FALSE(geo({64, 262144}, -1, l.dt, l.dir).l2_hints);
    detail::softmax_test_caps().stream_l2_hints = true;
    // The rules before session 22: every 2- and 4-byte row streamed in blocks of 512.
    detail::softmax_test_caps().fwd16_block256 = false;
    detail::softmax_test_caps().long_rows_streamed_bwd16 = true;
    const detail::SoftmaxGeometry before = geo({64, 262144}, -1, l.dt, l.dir);
    detail::softmax_test_caps().fwd16_block256 = true;
    detail::softmax_test_caps().long_rows_streamed_bwd16 = false;
    EXPECT_EQ(before.tx, 512);
    EXPECT_EQ(before.chunks, 2);
    detail::softmax_test_caps().long_rows_streamed = false;
    g = geo({64, 262144}, -1, l.dt, l.dir);
    detail::softmax_test_caps().long_rows_streamed = true;
    EXPECT_EQ(g.kernel, detail::SoftmaxKernel::Block);
    EXPECT_EQ(g.cluster, l.cl_262144);
    EXPECT_EQ(g.tx, l.tx_262144);
    EXPECT_EQ(g.chunks, 1);
    EXPECT_GE(g.grid, 512);
  }
  g = geo({100, 8192 + 16}, -1, DType::Float32, kBwd);  // just past one block of 512 x 16
  EXPECT_EQ(g.tx, 512);
  EXPECT_EQ(g.cluster, 2);
  g = geo({100, 16384 + 32}, -1, DType::Float32);  // just past one block of 512 x 32
  EXPECT_EQ(g.tx, 256);                             // the fp32 forward: blocks of 256 (session 22)
  EXPECT_EQ(g.cluster, 4);
  g = geo({4, 16 * 1024 * 16 + 16}, -1, DType::Float32, kBwd);  // past 16 x 1024 x 16: streaming
  EXPECT_EQ(g.tx, 512);
  EXPECT_EQ(g.cluster, 16);
  EXPECT_EQ(g.chunks, 3);
  g = geo({4, 16 * 1024 * 32 + 32}, -1, DType::Float32);  // past 16 x 1024 x 32: streaming
  EXPECT_EQ(g.tx, 512);
  EXPECT_EQ(g.cluster, 16);
  EXPECT_EQ(g.chunks, 3);
  g = geo({4, 16 * 1024 * 64 + 64}, -1, DType::Float16);  // past 16 x 1024 x 64: streaming
  EXPECT_EQ(g.tx, 512);
  EXPECT_EQ(g.cluster, 16);
  EXPECT_EQ(g.chunks, 3);
  g = geo({4, 16 * 1024 * 64}, -1, DType::Float16);  // exactly 16 x 1024 x 64: resident
  EXPECT_EQ(g.tx, 1024);
  EXPECT_EQ(g.cluster, 16);
  EXPECT_EQ(g.chunks, 1);
  // Spatial, 16-bit types: 8-byte vectors (4 statistics slots per thread), 8 rows
  // of them per thread (64 bytes, as float32's 4 rows of 16 bytes).
  for (Direction dir : {Direction::Fwd, kBwd}) {
    const bool fwd = dir == Direction::Fwd;
    g = geo({64, 256, 56, 56}, 1, DType::Float16, dir);
    EXPECT_EQ(g.kernel, detail::SoftmaxKernel::Spatial);
    EXPECT_EQ(g.vec, 4);
    EXPECT_EQ(g.ev, 32);
    EXPECT_TRUE(g.staged);  // session 5: fwd stages D >= 256, bwd D >= 64 (128-byte rows)
    EXPECT_EQ(g.tx, 16);
    EXPECT_EQ(g.ty, 16);
    EXPECT_EQ(g.krows, 16);
    EXPECT_EQ(g.chunks, 1);
    EXPECT_EQ(g.cluster, 1);
    // Session 5: long columns take the staged kernel (the v5 register geometry,
    // 32-byte rows: [8192, 8192] tx 4 x ty 128 x cluster 8, [32, 1000, 4096] tx 4
    // x ty 128, is what staging off gives).
    // Backward staging needs 128-byte rows: [8192, 8192] (2 MB of g and y per
    // 64-column tile, 128 KB per rank of 16) stages y alone (session 21: 64 KB per
    // rank of 16, g read twice).
    // Session 8: 64 KB staged blocks (3 per SM by shared memory) take 16-byte
    // vectors in the 16-bit forward: tx 8 x ty 32 (128-byte rows as before).
    g = geo({8192, 8192}, 0, DType::Float16, dir);
    EXPECT_TRUE(g.staged);
    EXPECT_EQ(g.stage_y, !fwd);
    EXPECT_EQ(g.cluster, 16);
    EXPECT_EQ(g.vec, fwd ? 8 : 4);
    EXPECT_EQ(g.tx, fwd ? 8 : 16);  // 128-byte staged rows
    EXPECT_EQ(g.ty, fwd ? 32 : 16);
    EXPECT_EQ(g.chunks, 1);
    EXPECT_EQ(g.krows, fwd ? 16 : 32);
    EXPECT_EQ(g.stage_bytes, int64_t(64) << 10);
    g = geo({32, 1000, 4096}, 1, DType::BFloat16, dir);
    EXPECT_TRUE(g.staged);
    EXPECT_EQ(g.vec, fwd ? 8 : 4);
    EXPECT_EQ(g.tx, fwd ? 8 : 16);  // 128-byte rows
    EXPECT_EQ(g.ty, fwd ? 32 : 16);
    EXPECT_EQ(g.cluster, dir == Direction::Fwd ? 2 : 4);
    EXPECT_EQ(g.krows, 16);
    EXPECT_EQ(g.grid, 2048 * g.cluster);
    {
      // The test cap forces either width (8 only where inner % 8 == 0).
      detail::softmax_test_caps().stage_vec16_fwd = 4;
      g = geo({32, 1000, 4096}, 1, DType::BFloat16, dir);
      EXPECT_EQ(g.vec, 4);
      EXPECT_EQ(g.tx, 16);
      EXPECT_EQ(g.krows, fwd ? 32 : 16);
      detail::softmax_test_caps().stage_vec16_fwd = 8;
      g = geo({64, 256, 56, 56}, 1, DType::Float16, dir);
      EXPECT_EQ(g.vec, fwd ? 8 : 4);
      EXPECT_EQ(g.tx, fwd ? 8 : 16);
      EXPECT_EQ(g.krows, fwd ? 8 : 16);
      g = geo({64, 256, 44}, 1, DType::Float16, dir);  // inner % 8 != 0
      EXPECT_TRUE(g.staged);
      EXPECT_EQ(g.vec, 4);
      detail::softmax_test_caps().stage_vec16_fwd = 0;
    }
    {
      detail::softmax_test_caps().stage_bytes = 0;  // staging off: the v5 geometry
      g = geo({8192, 8192}, 0, DType::Float16, dir);
      EXPECT_FALSE(g.staged);
      EXPECT_EQ(g.tx, 4);
      EXPECT_EQ(g.ty, 128);
      EXPECT_EQ(g.cluster, 8);
      EXPECT_EQ(g.chunks, 1);
      g = geo({32, 1000, 4096}, 1, DType::BFloat16, dir);
      EXPECT_FALSE(g.staged);
      EXPECT_EQ(g.tx, 4);
      EXPECT_EQ(g.ty, 128);
      EXPECT_EQ(g.cluster, 1);
      detail::softmax_test_caps().stage_bytes = int64_t(64) << 10;
    }
  }
  g = geo({64, 256, 56, 56}, 1, DType::Float32);
  EXPECT_EQ(g.ev, 16);
  EXPECT_TRUE(g.staged);
  EXPECT_EQ(g.tx, 8);
  EXPECT_EQ(g.ty, 32);
  EXPECT_EQ(g.krows, 8);
  g = geo({64, 256, 56, 56}, 1, DType::Float32, kBwd);
  EXPECT_TRUE(g.staged);
  EXPECT_EQ(g.tx, 8);
  EXPECT_EQ(g.ty, 32);
  EXPECT_EQ(g.krows, 8);
  EXPECT_EQ(g.stage_bytes, 2 * 8 * 32 * 128);
  g = geo({8, 4, int64_t(1) << 24}, 1, DType::BFloat16, kBwd);
  EXPECT_EQ(g.vec, 4);
  EXPECT_EQ(g.ev, 16);  // v5: E = 4 = D (v4: 8, half of each thread's rows empty)
  EXPECT_EQ(g.ty, 1);
  g = geo({8, 4, int64_t(1) << 24}, 1, DType::BFloat16);
  EXPECT_EQ(g.vec, 8);  // session 14: the 16-bit forward at 16-byte vectors, E = 4 = D
  EXPECT_EQ(g.ev, 32);
  EXPECT_EQ(g.ty, 1);
  g = geo({8192, 8192}, 0, DType::Float32);
  EXPECT_EQ(g.kernel, detail::SoftmaxKernel::Spatial);
  EXPECT_EQ(g.chunks, 1);
  EXPECT_TRUE(g.staged);
  EXPECT_EQ(g.tx, 8);  // 128-byte rows, 16 ranks of 512 rows (64 KB each)
  EXPECT_EQ(g.cluster * g.ty * g.krows, 8192);
  EXPECT_EQ(g.cluster, 16);
  g = geo({32, 1000, 4096}, 1, DType::Float32);
  EXPECT_TRUE(g.staged);
  EXPECT_EQ(g.tx, 8);  // 128-byte rows, 2 ranks of 512 rows (64 KB each)
  EXPECT_EQ(g.ty, 32);
  EXPECT_EQ(g.cluster, 2);
  EXPECT_EQ(g.krows, 16);
  EXPECT_EQ(g.grid, 8192);
  // float64, short columns (fwd D < 256, bwd D < 64) and a backward whose
  // 128-byte rows do not fit 16 ranks keep the register path.
  EXPECT_FALSE(geo({8192, 8192}, 0, DType::Float64).staged);
  EXPECT_FALSE(geo({128, 255, 64}, 1, DType::Float32).staged);
  EXPECT_TRUE(geo({128, 256, 64}, 1, DType::Float32).staged);
  EXPECT_FALSE(geo({128, 63, 64}, 1, DType::Float16, kBwd).staged);
  EXPECT_TRUE(geo({128, 64, 64}, 1, DType::Float16, kBwd).staged);
  EXPECT_FALSE(geo({8, 4, int64_t(1) << 24}, 1, DType::Float16).staged);
  EXPECT_TRUE(geo({8192, 8192}, 0, DType::Float32, kBwd).stage_y);  // session 21
  EXPECT_FALSE(geo({16384, 8192}, 0, DType::Float32, kBwd).staged);  // y alone: 128 KB per rank of 16
  g = geo({8, 4, int64_t(1) << 24}, 1, DType::Float32);
  EXPECT_EQ(g.kernel, detail::SoftmaxKernel::Spatial);
  EXPECT_EQ(g.ty, 1);
  EXPECT_GE(g.grid, 264);
  // [262144, 128]: a lane group per row, 128 / EV lanes; v5: EV 16 (v3's) in
  // every 2- and 4-byte dtype and direction, so 8 lanes (v4: 2 to 4).
  for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16})
    for (Direction dir : {Direction::Fwd, kBwd}) {
      g = geo({262144, 128}, -1, dt, dir);
      EXPECT_EQ(g.kernel, detail::SoftmaxKernel::Warp);
      EXPECT_EQ(g.ev, 16);
      EXPECT_EQ(g.lanes, 8);
      EXPECT_EQ(g.vec, 16 / dtype_size(dt));
    }
  // The warp path's reach: D <= 32 * EV.
  EXPECT_EQ(geo({100, 2048}, -1, DType::Float16).kernel, detail::SoftmaxKernel::Warp);
  EXPECT_EQ(geo({100, 2056}, -1, DType::Float16).kernel, detail::SoftmaxKernel::Block);
  EXPECT_EQ(geo({100, 1024}, -1, DType::Float32).kernel, detail::SoftmaxKernel::Warp);
  EXPECT_EQ(geo({100, 1024}, -1, DType::Float32, kBwd).kernel, detail::SoftmaxKernel::Block);
  EXPECT_EQ(geo({100, 513}, -1, DType::Float16).kernel, detail::SoftmaxKernel::Block);  // scalar: EV 16
  // Few blocks' worth of rows: a long row is spread over a cluster.
  g = geo({8, 32768}, -1, DType::Float32);
  EXPECT_GE(g.grid, 64);
}

// v5: short rows take the short EV. Last dim: rows of 32 .. 1024 in each dtype and
// direction (warp kernel at EV 16 up to 512, at the full EV past it, or the block
// kernel where 32 x full < D); spatial: D = 1 .. 5 with vector and scalar loads
// (E = 4 up to D = 4, the full E past it); [8, 4, 2^24] as v3 had it.
TEST(CudaSoftmaxPlan, ShortRowElementsPerThread) {
  using detail::SoftmaxKernel;
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16})
    for (Direction dir : {Direction::Fwd, Direction::Bwd}) {
      const int es = dtype_size(dt);
      const bool fwd = dir == Direction::Fwd;
      const int v16 = 16 / es;
      const int full = detail::softmax_elems_per_thread(SoftmaxKernel::Warp, es, fwd, v16);
      SCOPED_TRACE(std::string(dtype_name(dt)) + (fwd ? " fwd" : " bwd") + " full EV " + std::to_string(full));
      for (int64_t D : {32, 64, 128, 256, 512, 1024}) {
        const SoftmaxProblem p = cuda_problem({1000, D}, -1, dir, false, dt);
        const auto g = detail::softmax_geometry(p);
        expect_consistent(p);
        EXPECT_EQ(g.vec, v16) << D;
        if (D > 32 * full) {
          EXPECT_EQ(g.kernel, SoftmaxKernel::Block) << D;
          EXPECT_EQ(g.ev, full) << D;
          continue;
        }
        EXPECT_EQ(g.kernel, SoftmaxKernel::Warp) << D;
        const int want_ev = D <= 512 ? std::min(16, full) : full;
        EXPECT_EQ(g.ev, want_ev) << D;
        EXPECT_EQ(g.lanes, std::min<int64_t>(32, D / want_ev)) << D;
      }
      // [262144, 128]: 8 lanes of 16 (v3's geometry), float64 16 lanes of 8.
      auto g = detail::softmax_geometry(cuda_problem({262144, 128}, -1, dir, false, dt));
      EXPECT_EQ(g.kernel, SoftmaxKernel::Warp);
      EXPECT_EQ(g.lanes, es == 8 ? 16 : 8);
      EXPECT_EQ(g.tx, 256);
      // Spatial D = 1 .. 5: inner 8 (vector loads) and 9 (scalar). Session 14: the
      // 16-bit forward takes 16-byte vectors (V = 8) up to D = 4, 8-byte ones past it.
      const int vs = detail::softmax_vec_elems(SoftmaxKernel::Spatial, es);
      const int vshort = detail::softmax_spatial_short_vec_elems(es, fwd);
      EXPECT_EQ(vshort, fwd && es == 2 ? 8 : vs);
      for (int64_t inner : {8, 9})
        for (int64_t D = 1; D <= 5; ++D) {
          const SoftmaxProblem p = cuda_problem({6, D, inner}, 1, dir, false, dt);
          g = detail::softmax_geometry(p);
          expect_consistent(p);
          const int vec = inner == 8 ? (D <= 4 ? vshort : vs) : 1;
          EXPECT_EQ(g.kernel, SoftmaxKernel::Spatial);
          EXPECT_EQ(g.vec, vec) << D << " " << inner;
          const int E_full = detail::softmax_elems_per_thread(SoftmaxKernel::Spatial, es, fwd, vec) / vec;
          const int E = g.ev / vec;
          EXPECT_EQ(E, D <= 4 ? std::min(4, E_full) : E_full) << "D " << D << " inner " << inner;
          EXPECT_EQ(g.ty, detail::pow2_ceil(detail::ceil_div(D, E))) << "D " << D << " inner " << inner;
          EXPECT_EQ(g.cluster, 1);
          EXPECT_EQ(g.chunks, 1);
        }
      // [8, 4, 2^24] over dim 1: E = 4 = D, one thread row, 256 threads of vectors.
      g = detail::softmax_geometry(cuda_problem({8, 4, int64_t(1) << 24}, 1, dir, false, dt));
      EXPECT_EQ(g.kernel, SoftmaxKernel::Spatial);
      EXPECT_EQ(g.vec, vshort);
      EXPECT_EQ(g.ev / g.vec, 4);
      EXPECT_EQ(g.ty, 1);
      EXPECT_EQ(g.tx, 256);
      EXPECT_EQ(g.grid, (int64_t(8) << 24) / (256 * vshort));
      // Unaligned data, inner % 8 != 0, and the test cap at 4: the spatial width.
      EXPECT_EQ(detail::softmax_geometry(cuda_problem({8, 4, int64_t(1) << 24}, 1, dir, false, dt), false).vec, 1);
      EXPECT_EQ(detail::softmax_geometry(cuda_problem({8, 4, 12}, 1, dir, false, dt)).vec, vs);
      detail::softmax_test_caps().spatial_vec16_short = 4;
      EXPECT_EQ(detail::softmax_geometry(cuda_problem({8, 4, int64_t(1) << 24}, 1, dir, false, dt)).vec, vs);
      detail::softmax_test_caps().spatial_vec16_short = 0;
    }
}

// Every geometry the plan can produce has an instantiated kernel: sweeps of row
// lengths (last dim) and column lengths (spatial) in every dtype and direction,
// aligned (vector loads) and not (scalar), at the device caps and the launcher's
// smaller fallback caps.
TEST(CudaSoftmaxPlan, EveryGeometryHasAnInstantiatedKernel) {
  using detail::SoftmaxKernel;
  int n = 0;
  auto check = [&](const SoftmaxProblem& p, bool aligned) {
    const auto g = detail::softmax_geometry(p, aligned);
    const int es = dtype_size(p.dtype);
    const bool fwd = p.direction == Direction::Fwd;
    const std::string what = std::to_string(p.outer) + " x " + std::to_string(p.dim_size) + " x " +
                             std::to_string(p.inner) + " " + std::string(dtype_name(p.dtype)) + (fwd ? " fwd" : " bwd") +
                             (aligned ? "" : " unaligned") + " caps " + std::to_string(p.max_threads) + "/" +
                             std::to_string(p.max_cluster);
    ++n;
    ASSERT_TRUE(vec_instantiated(g, es, fwd, p.dim_size)) << what;
    if (!aligned) ASSERT_EQ(g.vec, 1) << what;
    ASSERT_TRUE(detail::softmax_ev_instantiated(g.kernel, es, fwd, g.vec, g.ev)) << what << " ev " << g.ev;
    ASSERT_EQ(g.ev % g.vec, 0) << what;
    const int64_t D = p.dim_size;
    if (g.kernel == SoftmaxKernel::Warp) ASSERT_GE(int64_t(g.lanes) * g.ev, D) << what;
    else if (g.kernel == SoftmaxKernel::Block) ASSERT_GE(g.chunks * g.cluster * g.threads() * int64_t(g.ev), D) << what;
    else if (g.staged) ASSERT_GE(int64_t(g.cluster) * g.ty * g.krows, D) << what;
    else ASSERT_GE(g.chunks * g.cluster * int64_t(g.ty) * (g.ev / g.vec), D) << what;
  };
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16})
    for (Direction dir : {Direction::Fwd, Direction::Bwd})
      for (bool aligned : {true, false}) {
        for (int64_t D = 1; D <= 2200; ++D) check(cuda_problem({3, D}, -1, dir, false, dt), aligned);
        for (int64_t D = 1; D <= 80; ++D)
          for (int64_t inner : {2, 3, 4, 5, 8, 9, 16, 33}) check(cuda_problem({2, D, inner}, 1, dir, false, dt), aligned);
        for (int mt : {512, 128, 32})
          for (int mc : {8, 1})
            for (const auto& [s, d] : std::vector<std::pair<Shape, int64_t>>{
                     {{3, 100}, -1}, {{3, 700}, -1}, {{3, 5000}, -1}, {{2, 300000}, -1}, {{4, 3, 64}, 1},
                     {{4, 6, 64}, 1}, {{2, 3000, 16}, 1}, {{2, 3000, 9}, 1}}) {
              SoftmaxProblem q = cuda_problem(s, d, dir, false, dt);
              q.max_threads = mt;
              q.max_cluster = mc;
              check(q, aligned);
            }
      }
  EXPECT_GT(n, 40000);
}

// Session 5: the staged spatial geometry (softmax_staged_geometry) over a sweep of
// column lengths, inner sizes, dtypes, directions, budgets and caps: staged only
// when D >= 256 (fwd) / 64 (bwd, 128-byte rows only), the vector loads apply, the
// type is 2 or 4 bytes
// and a slice fits the budget within the cluster cap; the widest row that fits
// within the cap is taken (a narrower one only to fill the GPU), with the fewest
// ranks, and it covers D with no empty rank. Every geometry passes
// expect_consistent.
TEST(CudaSoftmaxPlan, StagedSpatialGeometrySweep) {
  using detail::SoftmaxKernel;
  int staged = 0, total = 0;
  auto& caps = detail::softmax_test_caps();
  struct Reset {
    ~Reset() {
      detail::softmax_test_caps().stage_bytes = int64_t(64) << 10;
      detail::softmax_test_caps().stage_min_d = 0;
    }
  } reset;
  for (int64_t budget : {int64_t(64) << 10, int64_t(8) << 10, int64_t(160) << 10})
    for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16})
      for (Direction dir : {Direction::Fwd, Direction::Bwd})
        for (int64_t D : {2, 5, 63, 64, 65, 129, 255, 256, 257, 300, 511, 512, 513, 1000, 1025, 2049, 4097, 8192,
                          16385, 40000, 100000})
          for (int64_t inner : {4, 6, 8, 20, 64, 4096})
            for (int mc : {16, 8, 2, 1}) {
              caps.stage_bytes = budget;
              SoftmaxProblem p = cuda_problem({3, D, inner}, 1, dir, false, dt);
              p.max_cluster = mc;
              const auto g = detail::softmax_geometry(p);
              caps.stage_bytes = 0;
              const auto r = detail::softmax_geometry(p);  // the register geometry
              caps.stage_bytes = budget;
              const int es = dtype_size(dt);
              const std::string what = shape_string({3, D, inner}) + " " + std::string(dtype_name(dt)) +
                                       (dir == Direction::Fwd ? " fwd" : " bwd") + " budget " + std::to_string(budget) +
                                       " mc " + std::to_string(mc);
              ++total;
              EXPECT_FALSE(r.staged) << what;
              EXPECT_EQ(g.index_bits, r.index_bits) << what;
              EXPECT_EQ(g.ev, r.ev) << what;
              if (!g.staged) {
                EXPECT_EQ(g.tx, r.tx) << what;
                EXPECT_EQ(g.cluster, r.cluster) << what;
                EXPECT_EQ(g.chunks, r.chunks) << what;
              }
              const int vs = detail::softmax_vec_elems(SoftmaxKernel::Spatial, es);
              const bool eligible = es <= 4 && inner % vs == 0;
              const bool fwd = dir == Direction::Fwd;
              const int64_t min_d = fwd ? detail::kSoftmaxStageFwdMinD : detail::kSoftmaxStageBwdMinD;
              if (!eligible || D < min_d) {
                EXPECT_FALSE(g.staged) << what;
              }
              // A column the register path clusters or streams is long enough to stage
              // (it stays on the register path only when no slice fits).
              if (r.cluster > 1 || r.chunks > 1) {
                EXPECT_GE(D, min_d) << what;
              }
              if (!g.staged) continue;
              ++staged;
              EXPECT_LE(g.cluster, mc) << what;
              const int w = g.tx * g.vec * es;
              const int na = fwd ? 1 : 2;
              const int min_row = fwd ? 32 : 128;
              EXPECT_GE(w, min_row) << what;
              // No wider row fits within the cluster cap (when the pick is below 2 x sms
              // blocks: a narrower row that fills the GPU may be preferred otherwise).
              // than the fewest ranks needed.
              // (When the pick fills the GPU, a narrower row may have been preferred
              // for that: checked only for picks below 2 x sms blocks.)
              for (int wider = w * 2; wider <= 128 && g.grid < 2 * 132; wider *= 2) {
                const int ty = 256 / (wider / (g.vec * es));
                const int64_t k = detail::ceil_div(detail::ceil_div(D, mc), ty);
                EXPECT_GT(int64_t(na) * k * ty * wider, budget) << what << " w " << w << " wider " << wider;
              }
              // The fewest ranks at this width.
              if (g.cluster > 1) {
                const int64_t k = detail::ceil_div(detail::ceil_div(D, g.cluster / 2), g.ty);
                EXPECT_GT(int64_t(na) * k * g.ty * w, budget) << what;
              }
              expect_consistent(p);
            }
  EXPECT_GT(staged, 500);
  EXPECT_GT(total, 4000);
  // The launcher's fallback caps (fewer threads, smaller clusters): staged within
  // them, or the register path.
  caps.stage_bytes = int64_t(64) << 10;
  for (int mt : {1024, 256, 128, 64, 32})
    for (int mc : {16, 8, 4, 1})
      for (DType dt : {DType::Float32, DType::Float16})
        for (Direction dir : {Direction::Fwd, Direction::Bwd}) {
          SoftmaxProblem q = cuda_problem({8192, 8192}, 0, dir, false, dt);
          q.max_threads = mt;
          q.max_cluster = mc;
          const auto g = detail::softmax_geometry(q);
          EXPECT_LE(g.threads(), mt);
          EXPECT_LE(g.cluster, mc);
          expect_consistent(q);
        }
  // stage_min_d (test hook): every column of D >= it staged, short ones included.
  caps.stage_min_d = 2;
  for (DType dt : {DType::Float32, DType::Float16})
    for (Direction dir : {Direction::Fwd, Direction::Bwd}) {
      const SoftmaxProblem q = cuda_problem({3, 40, 72}, 1, dir, false, dt);
      const auto g = detail::softmax_geometry(q);
      EXPECT_TRUE(g.staged);
      EXPECT_EQ(g.cluster, 1);
      expect_consistent(q);
    }
}

// Session 7 (issue #5): few long last-dim rows stream in two chunks at half the
// resident capacity when the resident row needs >= 8 blocks of 512 and the rows
// take more than one and at most 8 waves (wave = 1024 threads x SMs). The
// benchmark shape, the edges where the choice flips (rows, row length, caps), the
// old geometry with the hook off, and never for float64.
TEST(CudaSoftmaxPlan, LongRowsStreamedInTwoChunks) {
  constexpr Direction kFwd = Direction::Fwd, kBwd = Direction::Bwd;
  // Session 7's rule as such: without session 22's 16-bit changes to it (the
  // 16-bit forward in blocks of 256, the 16-bit backward resident), which
  // WorkedExamples and Session22LongRowRules assert.
  struct Caps {
    Caps() {
      detail::softmax_test_caps().fwd16_block256 = false;
      detail::softmax_test_caps().long_rows_streamed_bwd16 = true;
    }
    ~Caps() {
      detail::softmax_test_caps().fwd16_block256 = true;
      detail::softmax_test_caps().long_rows_streamed_bwd16 = false;
    }
  } caps;
  auto geo = [](int64_t rows, int64_t D, DType dt, Direction dir, bool log = false) {
    return detail::softmax_geometry(cuda_problem({rows, D}, -1, dir, log, dt));
  };
  auto streamed = [](const detail::SoftmaxGeometry& g) {
    return g.kernel == detail::SoftmaxKernel::Block && g.chunks == 2 && g.tx == 512;
  };
  // [64, 262144]: every 2- and 4-byte dtype, direction and op; i32.
  struct B {
    DType dt;
    Direction dir;
    int cluster;
  };
  for (const B& b : {B{DType::Float32, kFwd, 8}, B{DType::Float32, kBwd, 16}, B{DType::Float16, kFwd, 4},
                     B{DType::Float16, kBwd, 8}, B{DType::BFloat16, kFwd, 4}, B{DType::BFloat16, kBwd, 8}})
    for (bool log : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(b.dt)) + (b.dir == kFwd ? " fwd" : " bwd") + (log ? " log" : ""));
      const auto g = geo(64, 262144, b.dt, b.dir, log);
      EXPECT_TRUE(streamed(g));
      EXPECT_EQ(g.cluster, b.cluster);
      EXPECT_EQ(g.grid, 64 * b.cluster);
      EXPECT_EQ(g.index_bits, 32);
      // Each chunk is half the row: the first full, the second exactly the rest.
      EXPECT_EQ(int64_t(g.cluster) * g.tx * g.ev, 262144 / 2);
      const SoftmaxProblem p = cuda_problem({64, 262144}, -1, b.dir, log, b.dt);
      EXPECT_EQ(std::string(plan_softmax(p).path),
                expected_name(log, b.dir, "lastdim_block", 32));
      expect_consistent(p);
    }
  // Rows: one wave or less stays resident; more than 8 waves stays resident.
  // fp32 fwd rows of 262144 need 8192 threads: 16 rows = 131072 <= 1024 x 132.
  EXPECT_EQ(geo(16, 262144, DType::Float32, kFwd).chunks, 1);
  EXPECT_TRUE(streamed(geo(17, 262144, DType::Float32, kFwd)));
  EXPECT_TRUE(streamed(geo(132, 262144, DType::Float32, kFwd)));  // 8 waves exactly
  EXPECT_EQ(geo(133, 262144, DType::Float32, kFwd).chunks, 1);
  // fp32 bwd (16384 threads a row, resident 1024 x 16): 8 rows resident, 9 streamed
  // (512 x 16), 66 rows = 8.0 waves streamed, 67 resident.
  EXPECT_EQ(geo(8, 262144, DType::Float32, kBwd).tx, 1024);
  EXPECT_EQ(geo(8, 262144, DType::Float32, kBwd).chunks, 1);
  EXPECT_TRUE(streamed(geo(9, 262144, DType::Float32, kBwd)));
  EXPECT_EQ(geo(9, 262144, DType::Float32, kBwd).cluster, 16);
  EXPECT_TRUE(streamed(geo(66, 262144, DType::Float32, kBwd)));
  EXPECT_EQ(geo(67, 262144, DType::Float32, kBwd).chunks, 1);
  // 16-bit fwd (4096 threads a row): 33 rows resident (one wave), 34 streamed.
  EXPECT_EQ(geo(33, 262144, DType::Float16, kFwd).chunks, 1);
  EXPECT_TRUE(streamed(geo(34, 262144, DType::BFloat16, kFwd)));
  // Row length: fp32 fwd D = 65536 needs 4 blocks of 512 (resident; since
  // session 22 as 8 blocks of 256); D = 65540 needs 8 of 512: streamed as 4 x 512,
  // chunks 2 (the second chunk holds 4 elements).
  EXPECT_EQ(geo(64, 65536, DType::Float32, kFwd).chunks, 1);
  EXPECT_EQ(geo(64, 65536, DType::Float32, kFwd).cluster, 8);
  EXPECT_EQ(geo(64, 65536, DType::Float32, kFwd).tx, 256);
  auto g = geo(64, 65540, DType::Float32, kFwd);
  EXPECT_TRUE(streamed(g));
  EXPECT_EQ(g.cluster, 4);
  EXPECT_EQ(int64_t(g.cluster) * g.tx * g.ev + 4, 65540);
  // [2048, 65536] (16-62 waves) and [16384, 4096] are not streamed by this rule
  // ([2048, 65536]'s 16-bit forward streams by session 22's one-block rule).
  for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16})
    for (Direction dir : {kFwd, kBwd}) {
      EXPECT_EQ(geo(2048, 65536, dt, dir).chunks, dtype_size(dt) == 2 && dir == kFwd ? 2 : 1);
      EXPECT_EQ(geo(16384, 4096, dt, dir).chunks, 1);
    }
  // Scalar loads (D % V != 0, EV 16): [64, 262143] fp32 fwd, resident 1024 x 16,
  // streamed 512 x 16.
  g = geo(64, 262143, DType::Float32, kFwd);
  EXPECT_EQ(g.vec, 1);
  EXPECT_TRUE(streamed(g));
  EXPECT_EQ(g.cluster, 16);
  expect_consistent(cuda_problem({64, 262143}, -1, kFwd, false, DType::Float32));
  // float64 is never streamed by this rule ([64, 262144] already streams at EV 8).
  EXPECT_EQ(geo(64, 262144, DType::Float64, kFwd).chunks, 8);
  EXPECT_EQ(geo(64, 131072, DType::Float64, kBwd).chunks, 1);
  // The launcher's first fallback (no non-portable cluster: max_cluster 8): the
  // resident fp32 fwd row would be 1024 x 8; streamed 512 x 8.
  SoftmaxProblem q = cuda_problem({64, 262144}, -1, kFwd, false, DType::Float32);
  q.max_cluster = 8;
  g = detail::softmax_geometry(q);
  EXPECT_TRUE(streamed(g));
  EXPECT_EQ(g.cluster, 8);
  expect_consistent(q);
  // Hook off: the resident geometry everywhere.
  detail::softmax_test_caps().long_rows_streamed = false;
  EXPECT_EQ(geo(64, 262144, DType::Float32, kFwd).chunks, 1);
  EXPECT_EQ(geo(64, 262144, DType::Float32, kBwd).tx, 1024);
  EXPECT_EQ(geo(64, 65540, DType::Float32, kFwd).chunks, 1);
  detail::softmax_test_caps().long_rows_streamed = true;
  // A sweep: every streamed geometry is exactly 2 chunks of 512-thread blocks, the
  // first chunk shorter than D, and consistent (i32 indices below the bound).
  int n = 0;
  for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64})
    for (Direction dir : {kFwd, kBwd})
      for (int64_t rows : {1, 8, 9, 17, 33, 34, 64, 100, 132, 133, 300})
        for (int64_t D : {65536, 65540, 100000, 131072, 131073, 200000, 262143, 262144, 262148, 300000, 524288}) {
          const SoftmaxProblem p = cuda_problem({rows, D}, -1, dir, false, dt);
          const auto h = detail::softmax_geometry(p);
          if (h.kernel != detail::SoftmaxKernel::Block || h.chunks != 2 || dtype_size(dt) > 4) continue;
          detail::softmax_test_caps().long_rows_streamed = false;
          const auto r = detail::softmax_geometry(p);
          detail::softmax_test_caps().long_rows_streamed = true;
          if (r.chunks != 1) continue;  // streamed before session 7 already
          ++n;
          SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(D) + " " + std::string(dtype_name(dt)));
          EXPECT_EQ(h.tx, 512);
          EXPECT_LT(int64_t(h.cluster) * h.tx * h.ev, D);
          EXPECT_GE(2 * int64_t(h.cluster) * h.tx * h.ev, D);
          EXPECT_GE(int64_t(r.cluster) * r.tx, 8 * 512);
          EXPECT_GT(rows * r.cluster * r.tx, int64_t(1024) * 132);
          EXPECT_LE(rows * r.cluster * r.tx, int64_t(8) * 1024 * 132);
          EXPECT_EQ(h.grid, rows * h.cluster);
          expect_consistent(p);
        }
  EXPECT_GT(n, 40);
}

// Session 22's rules on few long last-dim rows (sweep s22rows, bench/NOTES.md):
// the 16-bit forward's rows of more than two blocks of 512 take blocks of 256 where
// 16 ranks of 256 hold the row, resident or in session 7's streamed form; rows of
// one or two blocks keep 512 (two: one block in two chunks); the 16-bit backward is
// not streamed by session 7's rule; float32 is unchanged by both.
TEST(CudaSoftmaxPlan, Session22LongRowRules) {
  auto geo = [](int64_t rows, int64_t D, DType dt, Direction dir) {
    return detail::softmax_geometry(cuda_problem({rows, D}, -1, dir, false, dt));
  };
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    // resident, 4 -> 8 ranks ([1024, 131072]: 2048 threads a row, > 8 waves)
    auto g = geo(1024, 131072, dt, Direction::Fwd);
    EXPECT_EQ(g.tx, 256);
    EXPECT_EQ(g.cluster, 8);
    EXPECT_EQ(g.chunks, 1);
    // streamed by session 7's rule at 256: [128, 131072] -> 4 ranks of 256, 2 chunks
    g = geo(128, 131072, dt, Direction::Fwd);
    EXPECT_EQ(g.tx, 256);
    EXPECT_EQ(g.cluster, 4);
    EXPECT_EQ(g.chunks, 2);
    EXPECT_TRUE(g.l2_hints);
    // one and two blocks of 512 keep 512
    EXPECT_EQ(geo(4096, 32768, dt, Direction::Fwd).tx, 512);
    EXPECT_EQ(geo(2048, 65536, dt, Direction::Fwd).tx, 512);
    // past 16 ranks of 256 (D = 2^19: 8192 threads): not this rule
    g = geo(64, 524288, dt, Direction::Fwd);
    EXPECT_NE(g.tx, 256);
    // the backward: resident where session 7 streamed it
    for (int64_t rows : {32, 64, 128, 256}) {
      g = geo(rows, 262144, dt, Direction::Bwd);
      EXPECT_EQ(g.chunks, 1) << rows;
      EXPECT_FALSE(g.l2_hints) << rows;
    }
    // switches off: the rules before
    detail::softmax_test_caps().fwd16_block256 = false;
    detail::softmax_test_caps().long_rows_streamed_bwd16 = true;
    EXPECT_EQ(geo(1024, 131072, dt, Direction::Fwd).tx, 512);
    EXPECT_EQ(geo(64, 262144, dt, Direction::Bwd).chunks, 2);
    detail::softmax_test_caps().fwd16_block256 = true;
    detail::softmax_test_caps().long_rows_streamed_bwd16 = false;
    expect_consistent(cuda_problem({128, 131072}, -1, Direction::Fwd, false, dt));
    expect_consistent(cuda_problem({64, 262144}, -1, Direction::Bwd, false, dt));
  }
  // float32: neither rule
  EXPECT_EQ(geo(64, 262144, DType::Float32, Direction::Bwd).chunks, 2);
  EXPECT_EQ(geo(64, 262144, DType::Float32, Direction::Fwd).tx, 512);
}

TEST(CudaSoftmaxPlan, ForcedIndex64HookAndCapsShrink) {
  const SoftmaxProblem p = cuda_problem({16, 4096}, -1, Direction::Fwd, false, DType::Float32);
  EXPECT_EQ(plan_softmax(p).index_bits, 32);
  detail::softmax_force_index64() = true;
  EXPECT_EQ(std::string(plan_softmax(p).path), "softmax.fwd.cuda.lastdim_block.i64");
  detail::softmax_force_index64() = false;
  // Smaller caps (the launcher's viability fallback) still cover D.
  for (int mt : {1024, 512, 256, 128, 64, 32})
    for (int mc : {16, 8, 4, 1})
      for (const auto& [s, d] : std::vector<std::pair<Shape, int64_t>>{
               {{64, 262144}, -1}, {{3, 100000}, -1}, {{8192, 8192}, 0}, {{2, 3000, 16}, 1}, {{9, 500}, -1}}) {
        SoftmaxProblem q = cuda_problem(s, d, Direction::Bwd, true, DType::Float16);
        q.max_threads = mt;
        q.max_cluster = mc;
        const auto g = detail::softmax_geometry(q);
        EXPECT_LE(g.threads(), mt) << shape_string(s);
        EXPECT_LE(g.cluster, mc) << shape_string(s);
        expect_consistent(q);
      }
}

}  // namespace
#endif  // SEGRED_WITH_CUDA
