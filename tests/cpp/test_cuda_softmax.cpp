// CUDA softmax family on the GPU (shared/TESTING.md): the CPU backend's kinds of
// cases repeated on CUDA against the CPU backend and the float64 reference, on
// every CUDA path (trace-asserted) at 32 and 64 bits, special values on every
// path, strided inputs, and the boundary runs past 2^31 / UINT32_MAX elements
// (tests named CudaSoftmaxHuge.*: each states its memory need and skips when the
// GPU lacks it). Skips everything when no GPU is present.
#include <gtest/gtest.h>

#include "segred/segred.h"

#ifdef SEGRED_WITH_CUDA
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>

#include "src/core/softmax_geometry.h"
#include "src/reference/softmax_ref.h"

namespace {

using namespace segred;
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();
constexpr DeviceRef kGpu{Device::CUDA, 0};

#define SKIP_WITHOUT_GPU() \
  if (segred::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

template <class T> T from_double(double v) { return store<T>(acc_t<T>(v)); }
template <class T> double to_double(T v) { return double(load(v)); }

template <class T> struct Tol;
template <> struct Tol<double> { static constexpr double rel = 1e-12, abs = 1e-12; };
template <> struct Tol<float> { static constexpr double rel = 4e-6, abs = 4e-6; };
template <> struct Tol<half_t> { static constexpr double rel = 2.0 / 1024, abs = 1e-5; };
template <> struct Tol<bfloat16_t> { static constexpr double rel = 2.0 / 128, abs = 1e-5; };

// NaN meets NaN, infinities are equal, finite values within rel*|want| + abs*scale.
template <class T>
::testing::AssertionResult close(const std::vector<double>& got, const std::vector<double>& want, double scale,
                                 double slack = 1.0) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    if (std::isnan(w) || std::isnan(g)) {
      if (std::isnan(w) && std::isnan(g)) continue;
      return ::testing::AssertionFailure() << "at " << i << ": got " << g << ", want " << w;
    }
    if (std::isinf(w) || std::isinf(g)) {
      if (g == w) continue;
      return ::testing::AssertionFailure() << "at " << i << ": got " << g << ", want " << w;
    }
    const double tol = slack * (Tol<T>::rel * std::fabs(w) + Tol<T>::abs * scale);
    if (std::fabs(g - w) > tol)
      return ::testing::AssertionFailure() << "at " << i << ": got " << g << ", want " << w << " (tol " << tol << ")";
  }
  return ::testing::AssertionSuccess();
}

template <class T> Tensor to_gpu(const std::vector<double>& v, const Shape& shape) {
  Tensor h = Tensor::empty(shape, dtype_of<T>());
  for (size_t i = 0; i < v.size(); ++i) h.ptr<T>()[i] = from_double<T>(v[i]);
  return Tensor::copy_to(h, kGpu);
}
template <class T> std::vector<double> to_host(const TensorView& d) {
  Tensor h = Tensor::copy_to(d, DeviceRef{});
  std::vector<double> o(size_t(h.numel()));
  for (size_t i = 0; i < o.size(); ++i) o[i] = to_double(h.ptr<T>()[i]);
  return o;
}
template <class T> std::vector<double> rounded(const std::vector<double>& v) {
  std::vector<double> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = to_double(from_double<T>(v[i]));
  return o;
}
void poison(const TensorView& t) {
  ASSERT_EQ(cudaMemset(t.data, 0xff, size_t(t.numel()) * size_t(dtype_size(t.dtype))), cudaSuccess);  // NaN
}

// Every CUDA softmax path reached by this file (a coverage proof that also holds
// under --gtest_filter, which disables coverage_main's verdict).
std::set<std::string>& reached() {
  static std::set<std::string> s;
  return s;
}

struct Geo {
  Shape shape;
  int64_t dim;
};

// Shapes that reach every kernel shape: lane groups of 1..32 lanes, a block per
// row, clusters of 512-thread blocks and of 1024-thread blocks (16 x 1024 x EV >= D
// > 16 x 512 x EV; EV per dtype and direction, softmax_elems_per_thread: 16 to 64,
// so [1, 140000], [1, 300000] and [1, 600000] between them), streaming rows
// ([1, 1100000]: past 16 x 1024 x 64 for the 16-bit forward); spatial tiles with D
// in registers, a cluster over D, streaming D; vector and scalar widths; awkward
// sizes; the short-row EVs (warp rows <= 512, spatial D <= 4) next to the full
// ones. CudaSoftmaxShapes.ReachEveryGeometryVariant and
// .ReachEveryInstantiatedElementsPerThread (no GPU needed) check the coverage per
// dtype and direction.
const std::vector<Geo>& shapes() {
  static const std::vector<Geo> s = {
      {{7, 1}, -1},        {{9, 2}, -1},         {{5, 31}, -1},       {{6, 33}, -1},      {{4, 59}, -1},
      {{3, 97}, -1},       {{40, 128}, -1},      {{5, 512}, -1},      {{3, 513}, -1},     {{2, 1025}, -1},
      {{3, 4097}, -1},     {{2, 16384}, -1},     {{3, 40000}, -1},    {{1, 300001}, -1},  {{1, 140000}, -1},
      {{1, 300000}, -1},   {{1, 600000}, -1},    {{1, 1100000}, -1},  {{3, 2048}, -1},   {{140, 4096}, -1},
      {{1, 140001}, -1},   {{1, 100000}, -1},    {{1, 100001}, -1},   {{2, 33, 7}, 1},   {{1, 5000, 33}, 1},
      {{2, 3, 4, 5}, 3},
      {{3, 5, 7}, 1},      {{2, 33, 64}, 1},     {{4, 97, 8}, 1},     {{2, 1025, 16}, 1}, {{1, 5000, 32}, 1},
      {{2, 40000, 4}, 1},  {{3, 2, 1031}, 1},    {{2, 3, 5, 7}, 0},   {{1, 4, 3000}, 1},  {{6, 1, 9}, 1},
      {{4096, 8}, 0},      {{33, 2, 5}, 2},
      // v5 short-row EVs (softmax_short_elems_per_thread) and the full EV next to
      // them: warp rows of 520, 1000 and 1024 (vector, full EV: past 32 x 16), and
      // spatial columns of D = 1, 2, 3, 4 (E = 4) and 5 (full E), vector and scalar.
      {{3, 520}, -1},      {{5, 1000}, -1},      {{4, 1024}, -1},     {{9, 256}, -1},
      {{5, 1, 16}, 1},     {{4, 2, 24}, 1},      {{3, 3, 64}, 1},     {{2, 5, 40}, 1},     {{4, 3, 9}, 1},
      {{2, 4, 11}, 1},
      // Session 5, staged spatial (2- and 4-byte types, vector loads; columns the
      // register path would narrow below 128-byte rows): one block per tile
      // ([2, 300, 64]; bwd: a cluster of 2), tiles that straddle two outer slabs and
      // end in inactive columns ([3, 300, 20]); [2, 1025, 16] and [1, 5000, 32]
      // above take clusters of 4 to 16.
      {{2, 300, 64}, 1},   {{3, 300, 20}, 1},
      // Session 8: the 16-bit forward stages 16-byte vectors (V = 8) where inner %
      // 8 == 0 and a block holds > 44 KB ([2, 300, 64] one block, [1, 5000, 32]
      // 16 ranks); V = 4 stays for inner % 8 != 0 ([3, 300, 20] one block, this
      // one a cluster of 8) and smaller blocks ([2, 1025, 16]).
      {{1, 3000, 20}, 1},
      // Session 14: short 16-bit forward columns take 16-byte vectors where inner % 8
      // == 0 (the shapes above with D <= 4); 8-byte ones stay for inner % 8 == 4.
      {{3, 2, 12}, 1},
  };
  return s;
}

// Added to every random x (session 8: large magnitudes reach the 16-bit staged
// forward's exact-offset sum and, for bfloat16 past 2^16, its generic loop).
double& input_offset() {
  static double o = 0.0;
  return o;
}

// Random x with special columns: column 0 all -inf, 1 one NaN, 2 one +inf, 3 half -inf.
std::vector<double> make_input(const reference::SoftmaxShape& s, std::mt19937& rng, bool specials) {
  std::uniform_real_distribution<double> u(-4.0, 4.0);
  std::vector<double> x(s.size());
  for (auto& v : x) v = input_offset() + u(rng);
  if (!specials) return x;
  const int64_t ncols = s.outer * s.inner;
  auto col = [&](int64_t c, int64_t d) -> double& { return x[s.at(c / s.inner, d, c % s.inner)]; };
  if (ncols > 0)
    for (int64_t d = 0; d < s.D; ++d) col(0, d) = -kInf;
  if (ncols > 1) col(1, s.D / 2) = kNaN;
  if (ncols > 2) col(2, s.D - 1) = kInf;
  if (ncols > 3)
    for (int64_t d = 0; d < s.D; d += 2) col(3, d) = -kInf;
  return x;
}

// `expect`: when set, the launch's grid and block must be its (the race cases pin
// the geometry they were chosen for).
// `path_out`: when set, receives the CUDA path the launch reached.
template <class T>
void run_case(const Geo& c, bool log, Direction dir, bool force64, std::mt19937& rng,
              const detail::SoftmaxGeometry* expect = nullptr, std::string* path_out = nullptr) {
  const SoftmaxProblem p = make_softmax_problem(c.shape, c.dim, dtype_of<T>(), dir, log, Backend::CUDA);
  const reference::SoftmaxShape rs{p.outer, p.dim_size, p.inner};
  std::string what = shape_string(c.shape) + " dim " + std::to_string(c.dim) + (log ? " log" : "") +
                     (dir == Direction::Fwd ? " fwd " : " bwd ") + std::string(dtype_name(dtype_of<T>())) + (force64 ? " i64" : "");
  SCOPED_TRACE(what);
  const std::vector<double> x = rounded<T>(make_input(rs, rng, true));
  struct Force64 {  // reset even when an ASSERT returns early
    explicit Force64(bool f) { detail::softmax_force_index64() = f; }
    ~Force64() { detail::softmax_force_index64() = false; }
  } force(force64);
  TraceSession trace;
  std::vector<double> got, want, cpu;
  double scale = 1.0;
  if (dir == Direction::Fwd) {
    Tensor xd = to_gpu<T>(x, c.shape);
    Tensor out = Tensor::empty(c.shape, dtype_of<T>(), kGpu);
    poison(out);
    if (log) log_softmax_out(xd, c.dim, out);
    else softmax_out(xd, c.dim, out);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    got = to_host<T>(out);
    want = reference::softmax_forward(rs, x, log);
    Tensor xh = Tensor::copy_to(xd, DeviceRef{});
    cpu = to_host<T>(log ? log_softmax(xh, c.dim) : softmax(xh, c.dim));
    if (log) scale = 8.0;  // |x - m| up to 8 + log D: absolute error of the subtraction
  } else {
    std::vector<double> y = rounded<T>(reference::softmax_forward(rs, x, log));
    std::uniform_real_distribution<double> u(-2.0, 2.0);
    std::vector<double> g(y.size());
    for (size_t i = 0; i < g.size(); ++i) g[i] = (i % 7 == 3) ? 0.0 : u(rng);  // every sign, zeros
    g = rounded<T>(g);
    Tensor gd = to_gpu<T>(g, c.shape), yd = to_gpu<T>(y, c.shape);
    Tensor gi = Tensor::empty(c.shape, dtype_of<T>(), kGpu);
    poison(gi);
    if (log) log_softmax_backward_out(gd, yd, c.dim, gi);
    else softmax_backward_out(gd, yd, c.dim, gi);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    got = to_host<T>(gi);
    want = reference::softmax_backward(rs, g, y, log);
    Tensor gh = Tensor::copy_to(gd, DeviceRef{}), yh = Tensor::copy_to(yd, DeviceRef{});
    cpu = to_host<T>(log ? log_softmax_backward(gh, yh, c.dim) : softmax_backward(gh, yh, c.dim));
    // |sum| grows with D for log_softmax (sum g) and stays below max|g| for softmax.
    scale = log ? 2.0 * std::sqrt(double(p.dim_size)) + 2.0 : 2.0;
  }
  // The CUDA launch (the CPU comparison ran in the same session): exactly one.
  std::vector<std::string> cuda_paths;
  for (const auto& r : trace.records())
    if (r.backend == Backend::CUDA) {
      cuda_paths.push_back(r.path);
      if (expect) {
        EXPECT_EQ(r.grid[0], expect->grid) << r.path;
        EXPECT_EQ(r.block[0], expect->threads()) << r.path;
      }
    }
  ASSERT_EQ(cuda_paths.size(), 1u);
  const std::string path = cuda_paths[0];
  if (path_out) *path_out = path;
  if (expect)
    EXPECT_NE(path.find(expect->kernel == detail::SoftmaxKernel::Block ? ".lastdim_block."
                        : expect->kernel != detail::SoftmaxKernel::Spatial ? ".lastdim_warp."
                        : expect->staged                                   ? ".spatial_staged."
                                                                           : ".spatial."),
              std::string::npos)
        << path;
  reached().insert(path);
  EXPECT_EQ(path_info(path).index_bits, force64 ? 64 : 32) << path;
  const std::string planned(plan_softmax(p).path);
  auto family = [](const std::string& n) { return n.substr(0, n.rfind('.')); };
  EXPECT_EQ(family(path), family(planned)) << "trace " << path << " vs plan " << planned;
  EXPECT_TRUE(close<T>(got, want, scale)) << path;
  EXPECT_TRUE(close<T>(got, cpu, scale, 2.0)) << path << " (vs the CPU backend)";
}

template <class T> class CudaSoftmax : public ::testing::Test {};
using Dtypes = ::testing::Types<float, double, half_t, bfloat16_t>;
struct DtypeName {
  template <class T> static std::string GetName(int) { return std::string(dtype_name(dtype_of<T>())); }
};
TYPED_TEST_SUITE(CudaSoftmax, Dtypes, DtypeName);

// Every shape x {softmax, log_softmax} x {fwd, bwd}, special columns included,
// against the float64 reference and the CPU backend; 32-bit plans.
TYPED_TEST(CudaSoftmax, EveryPathAgainstReferenceAndCpuI32) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(1234);
  for (const Geo& c : shapes())
    for (bool log : {false, true})
      for (Direction dir : {Direction::Fwd, Direction::Bwd}) run_case<TypeParam>(c, log, dir, false, rng);
}

// The same with the 64-bit kernels forced on (the boundary tests reach them past
// 2^31; this proves their arithmetic on every geometry, also under the sanitizers).
TYPED_TEST(CudaSoftmax, EveryPathAgainstReferenceAndCpuI64) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(4321);
  for (const Geo& c : shapes())
    for (bool log : {false, true})
      for (Direction dir : {Direction::Fwd, Direction::Bwd}) run_case<TypeParam>(c, log, dir, true, rng);
}

// The staged spatial kernel's per-block budget for a scope (0: staging off, so
// every column takes the v5 register geometry), restored on exit.
struct StagingScope {
  explicit StagingScope(int64_t bytes) { detail::softmax_test_caps().stage_bytes = bytes; }
  ~StagingScope() { detail::softmax_test_caps().stage_bytes = int64_t(64) << 10; }
};

// Session 5: long spatial columns take the staged kernel; the register path's
// geometries for them (vector clusters, narrow tiles) stay reachable through the
// launcher's fallback caps and float64, so the spatial shapes run again with
// staging off, i32 and i64.
TYPED_TEST(CudaSoftmax, SpatialWithStagingOff) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(777);
  StagingScope off(0);
  for (const Geo& c : shapes()) {
    const SoftmaxProblem p = make_softmax_problem(c.shape, c.dim, dtype_of<TypeParam>(), Direction::Fwd, false, Backend::CUDA);
    if (p.inner == 1) continue;
    for (bool f64 : {false, true})
      for (bool log : {false, true})
        for (Direction dir : {Direction::Fwd, Direction::Bwd}) {
          std::string path;
          run_case<TypeParam>(c, log, dir, f64, rng, nullptr, &path);
          // Session 6: the register kernel has its own path name, staged or not.
          EXPECT_EQ(path, std::string(log ? "log_softmax" : "softmax") + (dir == Direction::Fwd ? ".fwd" : ".bwd") +
                              ".cuda.spatial.i" + (f64 ? "64" : "32"))
              << shape_string(c.shape);
        }
  }
}

// Session 6: the staged kernel reports its own paths. The shapes() entries whose
// plan stages (2- and 4-byte types, default caps) reach spatial_staged.i32 and
// (forced) .i64 in every op and direction: the trace names exactly the plan's
// staged path. (Every other spatial launch is asserted against its plan in
// run_case and traced as spatial in SpatialWithStagingOff.)
TYPED_TEST(CudaSoftmax, StagedShapesReachTheStagedPaths) {
  SKIP_WITHOUT_GPU();
  if (dtype_size(dtype_of<TypeParam>()) > 4) GTEST_SKIP() << "no staged kernel for float64";
  std::mt19937 rng(888);
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  int staged = 0;
  for (const Geo& c : shapes())
    for (bool f64 : {false, true})
      for (bool log : {false, true})
        for (Direction dir : {Direction::Fwd, Direction::Bwd}) {
          SoftmaxProblem p = make_softmax_problem(c.shape, c.dim, dtype_of<TypeParam>(), dir, log, Backend::CUDA);
          p.sm_count = sms;
          if (!detail::softmax_geometry(p).staged) continue;
          ++staged;
          std::string path;
          run_case<TypeParam>(c, log, dir, f64, rng, nullptr, &path);
          EXPECT_EQ(path, std::string(log ? "log_softmax" : "softmax") + (dir == Direction::Fwd ? ".fwd" : ".bwd") +
                              ".cuda.spatial_staged.i" + (f64 ? "64" : "32"))
              << shape_string(c.shape);
        }
  // 10 (shape, direction) pairs stage (5 fwd, 5 bwd; one block per tile and
  // clusters of 2 to 16), x i32/i64 x softmax/log_softmax.
  EXPECT_GE(staged, 10 * 2 * 2);
}

// Staged geometries at small sizes (every column staged: stage_min_d = 2; a
// small budget for clusters of 2 to 16), each dtype, i32 and i64, special columns
// included; the launch must be the staged geometry the plan gives.
TYPED_TEST(CudaSoftmax, StagedSpatialSmallShapes) {
  SKIP_WITHOUT_GPU();
  if (dtype_size(dtype_of<TypeParam>()) > 4) GTEST_SKIP() << "no staged kernel for float64";
  std::mt19937 rng(555);
  struct S {
    Geo geo;
    int64_t budget;
  };
  const std::vector<S> cases = {{{{3, 40, 72}, 1}, int64_t(64) << 10}, {{{1, 120, 72}, 1}, 8192},
                                {{{2, 700, 36}, 1}, 16384},           {{{5, 33, 4}, 1}, 4096},
                                {{{2, 2, 200}, 1}, int64_t(64) << 10}};
  int staged = 0;
  for (const S& c : cases) {
    auto& caps = detail::softmax_test_caps();
    caps.stage_min_d = 2;
    caps.stage_bytes = c.budget;
    struct Reset {
      ~Reset() {
        detail::softmax_test_caps().stage_min_d = 0;
        detail::softmax_test_caps().stage_bytes = int64_t(64) << 10;
      }
    } reset;
    for (bool f64 : {false, true})
      for (bool log : {false, true})
        for (Direction dir : {Direction::Fwd, Direction::Bwd}) {
          SoftmaxProblem p = make_softmax_problem(c.geo.shape, c.geo.dim, dtype_of<TypeParam>(), dir, log, Backend::CUDA);
          int sms = 0;
          cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
          p.sm_count = sms;
          detail::softmax_force_index64() = f64;
          const detail::SoftmaxGeometry g = detail::softmax_geometry(p);
          detail::softmax_force_index64() = false;
          staged += g.staged;
          std::string path;
          run_case<TypeParam>(c.geo, log, dir, f64, rng, g.staged ? &g : nullptr, &path);
          // Session 6: the staged launches report spatial_staged, the others spatial.
          EXPECT_EQ(path, std::string(log ? "log_softmax" : "softmax") + (dir == Direction::Fwd ? ".fwd" : ".bwd") +
                              (g.staged ? ".cuda.spatial_staged.i" : ".cuda.spatial.i") + (f64 ? "64" : "32"))
              << shape_string(c.geo.shape);
        }
  }
  EXPECT_GE(staged, 30);
}

// Session 21: the staged backward with y alone in shared memory (stage_y: g read
// from global memory in batches of 64 bytes a thread, 4 or 8 rows, twice), forced wherever it fits
// (SoftmaxTestCaps::stage_y_bwd = 1) and by the rule where g and y together do not
// fit: one block per tile, clusters of 2 to 16, rows per thread below, at and past
// one batch (1 to 32: the batch loop's partial last batch), tiles ending in
// inactive columns, every dtype with a staged kernel, i32 and i64, softmax and
// log_softmax, special columns; against the float64 reference and the CPU, the
// launch the plan's geometry and the trace's variant "stage_y".
TYPED_TEST(CudaSoftmax, StagedBackwardYAlone) {
  SKIP_WITHOUT_GPU();
  if (dtype_size(dtype_of<TypeParam>()) > 4) GTEST_SKIP() << "no staged kernel for float64";
  std::mt19937 rng(2121);
  struct S {
    Geo geo;
    int64_t budget;
    int force;  // stage_y_bwd: 1 forced, 0 the rule
  };
  const std::vector<S> cases = {{{{3, 40, 72}, 1}, int64_t(64) << 10, 1},  {{{1, 120, 72}, 1}, 8192, 1},
                                {{{2, 700, 36}, 1}, 16384, 1},            {{{5, 33, 4}, 1}, 4096, 1},
                                {{{1, 3000, 32}, 1}, int64_t(64) << 10, 1}, {{{2, 545, 64}, 1}, 16384, 1},
                                {{{1, 1100, 64}, 1}, 12288, 0},           {{{3, 2, 200}, 1}, int64_t(64) << 10, 1}};
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  int reached_y = 0;
  std::set<int> rows_per_thread, clusters;
  for (const S& c : cases) {
    auto& caps = detail::softmax_test_caps();
    caps.stage_min_d = 2;
    caps.stage_bytes = c.budget;
    caps.stage_y_bwd = c.force;
    struct Reset {
      ~Reset() {
        auto& caps = detail::softmax_test_caps();
        caps.stage_min_d = 0;
        caps.stage_bytes = int64_t(64) << 10;
        caps.stage_y_bwd = 0;
      }
    } reset;
    for (bool f64 : {false, true})
      for (bool log : {false, true}) {
        SoftmaxProblem p =
            make_softmax_problem(c.geo.shape, c.geo.dim, dtype_of<TypeParam>(), Direction::Bwd, log, Backend::CUDA);
        p.sm_count = sms;
        detail::softmax_force_index64() = f64;
        const detail::SoftmaxGeometry g = detail::softmax_geometry(p);
        const Plan plan = plan_softmax(p);
        detail::softmax_force_index64() = false;
        ASSERT_TRUE(g.staged && g.stage_y) << shape_string(c.geo.shape) << " budget " << c.budget;
        EXPECT_EQ(plan.variant, "stage_y") << plan;
        rows_per_thread.insert(g.krows);
        clusters.insert(g.cluster);
        TraceSession outer;
        std::string path;
        run_case<TypeParam>(c.geo, log, Direction::Bwd, f64, rng, &g, &path);
        EXPECT_EQ(path, std::string(log ? "log_softmax" : "softmax") + ".bwd.cuda.spatial_staged.i" + (f64 ? "64" : "32"));
        for (const auto& r : outer.records())
          if (r.backend == Backend::CUDA) {
            EXPECT_EQ(r.variant, "stage_y") << r.path;
            reached_y += r.variant == "stage_y";
          }
      }
  }
  EXPECT_EQ(reached_y, int(cases.size()) * 4);
  // Rows per thread on both sides of the batch of 8 (and past two), clusters of
  // one block up to 16 ranks.
  EXPECT_TRUE(rows_per_thread.count(1) || rows_per_thread.count(2));
  EXPECT_TRUE(*rows_per_thread.rbegin() > 8);
  EXPECT_TRUE(clusters.count(1));
  EXPECT_GE(*clusters.rbegin(), 8);
}

// Session 22: the float16 forward of the register kernels in the FFMA form
// (fma16_sum_base in src/cuda/softmax_impl.cuh: the sum's e = 2^(x log2e + nb)
// corrected per slot, the write 2^((x - M) log2e - log2 S)) and with it off
// (SoftmaxTestCaps::fwd16_fma = false: the form before), on every register kernel
// and form: lastdim_warp with kept e (D <= 512) and recomputed (D = 1000),
// lastdim_block resident (clusters through the thread cap) and streamed (two
// chunks: the caps of LongRowsStreamedInTwoChunks; and one block of 512 in two
// chunks, the 16-bit rule of session 22), the spatial register kernel
// at short and long columns (staging off); x around 0, 1000 and 30000 (float16: nb rounds by up
// to 2^-8; the other dtypes run the same cases in their one form: bfloat16 keeps
// the form before, measured faster); the special columns of make_input in each; softmax and log_softmax,
// i32 and i64; each against the float64 reference and the CPU backend.
TYPED_TEST(CudaSoftmax, Register16BitForwardFmaForm) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(2222);
  const bool b16 = std::is_same_v<TypeParam, bfloat16_t>;
  struct S {
    Geo geo;
    int max_threads = 1024;
    int sm_count = 1 << 20;
  };
  const std::vector<S> cases = {
      {{{7, 300}, -1}},                   // warp, kept e
      {{{5, 1000}, -1}},                  // warp, recomputed
      {{{3, 9000}, -1}, 64},              // block, resident, cluster
      {{{5, 40000}, -1}, 64, 1},          // block, streamed
      {{{5, 65536}, -1}, 1024, 1},        // 16-bit: one block of 512, two chunks (session 22)
      {{{3, 4, 40}, 1}},                  // spatial, short columns
      {{{2, 300, 24}, 1}, 1024, 1 << 20}  // spatial, long columns
  };
  std::set<std::string> kernels;
  for (const S& c : cases)
    for (double off : {0.0, 1000.0, b16 ? 1.0e6 : 30000.0})
      for (bool on : {true, false}) {
        auto& caps = detail::softmax_test_caps();
        struct Reset {
          ~Reset() {
            auto& caps = detail::softmax_test_caps();
            caps.max_threads = 1024;
            caps.sm_count = 1 << 20;
            caps.fwd16_fma = true;
            caps.stage_bytes = int64_t(64) << 10;
            input_offset() = 0.0;
          }
        } reset;
        caps.stage_bytes = 0;  // the spatial register kernel at every column length
        caps.max_threads = c.max_threads;
        caps.sm_count = c.sm_count;
        caps.fwd16_fma = on;
        input_offset() = off;
        for (bool f64 : {false, true})
          for (bool log : {false, true}) {
            SCOPED_TRACE(std::string(on ? "fma form" : "form before") + " offset " + std::to_string(off));
            std::string path;
            run_case<TypeParam>(c.geo, log, Direction::Fwd, f64, rng, nullptr, &path);
            const SoftmaxProblem p =
                make_softmax_problem(c.geo.shape, c.geo.dim, dtype_of<TypeParam>(), Direction::Fwd, log, Backend::CUDA);
            const detail::SoftmaxGeometry g = detail::softmax_geometry(p);
            EXPECT_FALSE(g.staged) << path;
            kernels.insert(path.substr(path.find(".cuda.") + 6, path.rfind('.') - path.find(".cuda.") - 6) +
                           (g.chunks > 1 ? " streamed" : "") + (g.cluster > 1 ? " cluster" : ""));
          }
      }
  std::string all;
  for (const auto& k : kernels) all += k + ", ";
  EXPECT_TRUE(kernels.count("spatial")) << all;
  EXPECT_TRUE(kernels.count("lastdim_block streamed cluster")) << all;
  if (dtype_size(dtype_of<TypeParam>()) <= 4)  // float64 (EV 8) sends the short rows to the block kernel
    for (const char* k : {"lastdim_warp", "lastdim_block cluster"})
      EXPECT_TRUE(kernels.count(k)) << k << " not reached; reached: " << all;
  if (dtype_size(dtype_of<TypeParam>()) == 2)  // a row of two blocks of 512 in one block (fwd16_rows_one_block)
    EXPECT_TRUE(kernels.count("lastdim_block streamed")) << all;
}

// Session 8: the 16-bit staged forward (staged_fwd16: packed max, exact-offset
// sum, (M, S) write; V = 8 with a reduce-scatter, V = 4) at both vector widths
// (SoftmaxTestCaps::stage_vec16_fwd; float32 runs the same cases on its own
// kernel), each against the float64 reference and the CPU backend, i32 and i64,
// softmax and log_softmax, the launch asserted to be the plan's geometry:
//   - slices ending exactly at a block's last row (D = ty * krows) and one row past;
//   - clusters of 16 ranks whose last rank holds 20 rows (threads with no rows),
//     the NaN (row D/2) and +inf (row D-1) columns of make_input in one rank each;
//   - 64-byte rows (TX = 4: the reduce-scatter down to one slot per lane), 32-byte
//     rows (TX = 2: V * TX < 32, the butterfly) and one-warp blocks (no scratch:
//     the butterfly), through the SM-count and thread caps;
//   - large magnitudes: x around 1000 and 30000 (float16; the sum's offset nb =
//     RN(-m log2e) rounds by up to 2^-8 there, which the kernel corrects), and for
//     bfloat16 around 10^6 (|m| > 2^16: the generic sum loop).
TYPED_TEST(CudaSoftmax, Staged16BitForwardWidthsAndBoundaries) {
  SKIP_WITHOUT_GPU();
  if (dtype_size(dtype_of<TypeParam>()) > 4) GTEST_SKIP() << "no staged kernel for float64";
  const bool b16 = std::is_same_v<TypeParam, bfloat16_t>;
  std::mt19937 rng(1618);
  struct S {
    Geo geo;
    int vec16;  // stage_vec16_fwd
    int64_t budget = int64_t(64) << 10;
    int sm_count = 1 << 20;
    int max_threads = 1024;
    double offset = 0.0;
  };
  const std::vector<S> cases = {
      {{{2, 256, 64}, 1}, 8},  {{{2, 256, 64}, 1}, 4},  {{{2, 257, 64}, 1}, 8},
      {{{2, 257, 64}, 1}, 4},  {{{1, 980, 64}, 1}, 8, 8192}, {{{1, 980, 64}, 1}, 4, 8192},
      {{{1, 300, 64}, 1}, 8, int64_t(64) << 10, 1},     // 64-byte rows
      {{{1, 300, 32}, 1}, 8, int64_t(64) << 10, 1},     // 32-byte rows
      {{{2, 300, 64}, 1}, 8, int64_t(64) << 10, 1 << 20, 32},  // one-warp blocks
      {{{2, 300, 64}, 1}, 8, int64_t(64) << 10, 1 << 20, 1024, 1000.0},
      {{{2, 300, 64}, 1}, 4, int64_t(64) << 10, 1 << 20, 1024, 1000.0},
      {{{1, 980, 64}, 1}, 8, 8192, 1 << 20, 1024, b16 ? 1.0e6 : 30000.0},
      {{{2, 300, 64}, 1}, 4, int64_t(64) << 10, 1 << 20, 1024, b16 ? 1.0e6 : 30000.0},
  };
  int v8 = 0, v4 = 0;
  for (const S& c : cases) {
    auto& caps = detail::softmax_test_caps();
    caps.stage_vec16_fwd = c.vec16;
    caps.stage_bytes = c.budget;
    caps.sm_count = c.sm_count;
    caps.max_threads = c.max_threads;
    input_offset() = c.offset;
    struct Reset {
      ~Reset() {
        auto& caps = detail::softmax_test_caps();
        caps.stage_vec16_fwd = 0;
        caps.stage_bytes = int64_t(64) << 10;
        caps.sm_count = 1 << 20;
        caps.max_threads = 1024;
        input_offset() = 0.0;
      }
    } reset;
    for (bool f64 : {false, true})
      for (bool log : {false, true}) {
        SoftmaxProblem p = make_softmax_problem(c.geo.shape, c.geo.dim, dtype_of<TypeParam>(), Direction::Fwd, log,
                                                Backend::CUDA);
        int sms = 0;
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
        p.sm_count = sms;
        detail::softmax_force_index64() = f64;
        const detail::SoftmaxGeometry g = detail::softmax_geometry(p);
        detail::softmax_force_index64() = false;
        ASSERT_TRUE(g.staged) << shape_string(c.geo.shape);
        if (dtype_size(dtype_of<TypeParam>()) == 2) {
          EXPECT_EQ(g.vec, c.vec16) << shape_string(c.geo.shape);
          (g.vec == 8 ? v8 : v4) += 1;
        }
        std::string path;
        run_case<TypeParam>(c.geo, log, Direction::Fwd, f64, rng, &g, &path);
        EXPECT_EQ(path, std::string(log ? "log_softmax" : "softmax") + ".fwd.cuda.spatial_staged.i" + (f64 ? "64" : "32"))
            << shape_string(c.geo.shape);
      }
  }
  if (dtype_size(dtype_of<TypeParam>()) == 2) {
    EXPECT_GE(v8, 8 * 4);
    EXPECT_GE(v4, 4 * 4);
  }
}

// Session 7 (issue #5): few long last-dim rows in a few waves stream in two
// chunks at half the resident capacity (softmax_geometry, lastdim_block;
// SoftmaxTestCaps::long_rows_streamed). Caps (1 SM: a wave is 1024 threads;
// 64-thread blocks) bring the rule down to rows of 8193 to 40000 elements, 5 rows
// (the special rows of make_input: all -inf, NaN mid-row, +inf at the last element,
// i.e. in the second chunk, every other -inf; and a plain row): a row of exactly
// two chunks, a second chunk of one vector (one element for scalar loads), a second
// chunk ending inside a cluster rank, scalar loads (D odd), i32 and i64, softmax
// and log_softmax. The launch must be the streamed geometry, and the rule off must
// give a resident one for the same shape. float64 is never streamed by the rule.
// The streamed vector rows run with L2 eviction priorities (session 22).
TYPED_TEST(CudaSoftmax, LongRowsStreamedInTwoChunks) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(707);
  auto& caps = detail::softmax_test_caps();
  struct Reset {
    ~Reset() {
      auto& c = detail::softmax_test_caps();
      c.max_threads = 1024;
      c.sm_count = 1 << 20;
      c.long_rows_streamed = true;
      c.long_rows_streamed_bwd16 = false;
    }
  } reset;
  // The 16-bit backward is not streamed by the rule since session 22; its streamed
  // form (still reached past 16 ranks of 512) runs here through the switch.
  caps.long_rows_streamed_bwd16 = true;
  caps.max_threads = 64;
  caps.sm_count = 1;
  const bool small = dtype_size(dtype_of<TypeParam>()) <= 4;
  std::set<std::string> kinds;
  int streamed = 0;
  for (int64_t D : {8192, 8193, 8196, 8200, 12000, 16384, 16392, 32768, 40000})
    for (Direction dir : {Direction::Fwd, Direction::Bwd}) {
      const Geo c{{5, D}, -1};
      SoftmaxProblem p = make_softmax_problem(c.shape, c.dim, dtype_of<TypeParam>(), dir, false, Backend::CUDA);
      caps.long_rows_streamed = false;
      const detail::SoftmaxGeometry r = detail::softmax_geometry(p);
      caps.long_rows_streamed = true;
      const detail::SoftmaxGeometry g = detail::softmax_geometry(p);
      if (g.kernel != detail::SoftmaxKernel::Block || g.chunks != 2 || r.chunks != 1) continue;
      EXPECT_TRUE(small) << shape_string(c.shape);
      EXPECT_EQ(g.tx, 64);
      const int64_t chunk = int64_t(g.cluster) * g.tx * g.ev;  // elements per chunk
      const int64_t last = D - chunk;                           // in the second chunk
      const int64_t per_rank = int64_t(g.tx) * g.ev;
      const std::string dn = dir == Direction::Fwd ? "fwd " : "bwd ";
      if (last == chunk) kinds.insert(dn + "two full chunks");
      if (last == g.vec) kinds.insert(dn + "one vector in the second chunk");
      if (last % per_rank != 0) kinds.insert(dn + "second chunk ends inside a rank");
      if (g.vec == 1) kinds.insert(dn + "scalar");
      // Session 22: vector loads of streamed rows carry L2 eviction priorities
      // (SoftmaxGeometry::l2_hints); scalar loads do not.
      EXPECT_EQ(g.l2_hints, g.vec > 1) << D;
      EXPECT_FALSE(r.l2_hints) << D;
      if (g.l2_hints) kinds.insert(dn + "l2 hints");
      for (bool f64 : {false, true})
        for (bool log : {false, true}) {
          ++streamed;
          std::string path;
          run_case<TypeParam>(c, log, dir, f64, rng, &g, &path);
          EXPECT_NE(path.find(".lastdim_block."), std::string::npos) << path;
        }
    }
  if (!small) {
    EXPECT_EQ(streamed, 0);
    return;
  }
  std::string all;
  for (const auto& k : kinds) all += k + ", ";
  for (const char* dn : {"fwd ", "bwd "})
    for (const char* k : {"two full chunks", "one vector in the second chunk", "second chunk ends inside a rank", "scalar",
                          "l2 hints"})
      EXPECT_TRUE(kinds.count(std::string(dn) + k)) << dn << k << " not reached; reached: " << all;
  EXPECT_GE(streamed, 4 * 2 * 4);
}

// The benchmark's geometry at the device's SM count: [34, 262144] streams on a
// 132-SM H200 in chunks 2: fp32 fwd 512 x 8, fp32 bwd 512 x 16 with 16-block
// non-portable clusters, 16-bit fwd 256 x 8 (since session 22; 512 x 4 before);
// the 16-bit bwd is resident since session 22 (512 x 16; streamed 512 x 8 before).
// Against the reference; softmax and log_softmax, i32.
TYPED_TEST(CudaSoftmax, LongRowsStreamedAtDeviceSize) {
  SKIP_WITHOUT_GPU();
  if (dtype_size(dtype_of<TypeParam>()) > 4) GTEST_SKIP() << "float64 is not streamed by the long-row rule";
  std::mt19937 rng(708);
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  int streamed = 0;
  const Geo c{{34, 262144}, -1};
  for (Direction dir : {Direction::Fwd, Direction::Bwd}) {
    SoftmaxProblem p = make_softmax_problem(c.shape, c.dim, dtype_of<TypeParam>(), dir, false, Backend::CUDA);
    p.sm_count = sms;
    const detail::SoftmaxGeometry g = detail::softmax_geometry(p);
    const bool b16 = dtype_size(dtype_of<TypeParam>()) == 2;
    const int tx = b16 && dir == Direction::Fwd ? 256 : 512;
    const bool s = g.kernel == detail::SoftmaxKernel::Block && g.chunks == 2 && g.tx == tx;
    streamed += s;
    if (sms == 132 && b16 && dir == Direction::Bwd) EXPECT_EQ(g.chunks, 1);
    for (bool log : {false, true}) run_case<TypeParam>(c, log, dir, false, rng, &g);
  }
  if (sms == 132) EXPECT_EQ(streamed, dtype_size(dtype_of<TypeParam>()) == 2 ? 1 : 2);
}

// The shared-memory, cluster and streaming geometries only, float32, i32 and
// i64: small enough for compute-sanitizer racecheck.
TEST(CudaSoftmaxSan, SharedMemoryClusterAndStreamingPaths) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(99);
  const std::vector<Geo> s = {{{3, 4097}, -1},  {{2, 16384}, -1},   {{1, 300001}, -1}, {{1, 140000}, -1}, {{1, 300000}, -1},
                              {{1, 600000}, -1}, {{2, 1025, 16}, 1}, {{1, 5000, 32}, 1}, {{2, 40000, 4}, 1}, {{4, 97, 8}, 1}};
  for (bool f64 : {false, true})
    for (const Geo& c : s)
      for (bool log : {false, true})
        for (Direction dir : {Direction::Fwd, Direction::Bwd}) run_case<float>(c, log, dir, f64, rng);
}

// ---- racecheck: every shared-memory geometry at its smallest ------------------
//
// compute-sanitizer racecheck over CudaSoftmaxSan.* (rows up to 600000) did not
// finish in 90 s. CudaSoftmaxRace.* reaches every geometry of the block and spatial
// kernels that touches shared memory or a barrier, at 516 to 9252 elements a case,
// float32 and float16, fwd and bwd, softmax and log_softmax (32-bit indices; the
// shared-memory code does not depend on the index type). Test caps
// (detail::softmax_test_caps: threads per block, blocks per cluster, clusters per
// grid, SM count) bring clusters, streaming rows and columns, 1024-thread blocks,
// wide spatial tiles and blocks that loop over several rows or tiles (shared memory
// reused across iterations: the hazard a single iteration per block never shows)
// down to those sizes; the launch's grid and block are asserted against the capped
// geometry. Filter for racecheck: --gtest_filter='CudaSoftmaxRace.*'.
// (The warp kernel and spatial tiles of one thread row use shuffles only.)
struct RaceCase {
  Geo geo;
  int max_threads, max_cluster;
  int64_t max_clusters;  // grid cap in clusters (1: every block loops over the work)
  int sm_count;          // cap on the SM count the geometry fills
  int64_t stage_bytes = 0;  // staged spatial: per-block budget (0: off, the register geometries)
  int stage_min_d = 0;                      // staged spatial: > 0 stages every column with D >= this
  int stage_vec16 = 0;                      // staged spatial: SoftmaxTestCaps::stage_vec16_fwd (session 8)
  int stage_y = 0;                          // staged backward: SoftmaxTestCaps::stage_y_bwd (session 21)
};

constexpr int64_t kNoCap = detail::kSoftmaxMaxClusters;

// Found by a search over shapes and caps (smallest element count per class).
const std::vector<RaceCase>& race_cases() {
  static const std::vector<RaceCase> c = {
      {{{1, 129, 4}, 1}, 64, 2, kNoCap, 132},   // spatial: streaming D, cluster 2
      {{{1, 33, 17}, 1}, 1024, 16, 1, 1},       // spatial, scalar: thread-row partials, looping
      {{{1, 129, 5}, 1}, 64, 16, kNoCap, 132},  // spatial, scalar: cluster
      {{{3, 33, 12}, 1}, 1024, 16, 1, 1},       // spatial: tx < 32 (warp groups), looping
      {{{3, 9, 48}, 1}, 1024, 16, 1, 1},        // spatial: tx >= 32, ty > 1, looping
      {{{3, 129, 12}, 1}, 64, 16, 1, 132},      // spatial: cluster, one group per block, looping
      {{{3, 257, 12}, 1}, 64, 16, 1, 1},        // spatial: cluster of blocks of several groups, looping
      {{{2, 1032}, -1}, 1024, 16, 1, 132},      // block of 64 per row, looping
      {{{2, 2056}, -1}, 64, 16, 1, 132},        // block clusters, looping
      {{{2, 2056}, -1}, 64, 1, 1, 132},         // block streaming, looping
      {{{1, 4104}, -1}, 64, 2, kNoCap, 132},    // block streaming in a cluster
      {{{2, 4104}, -1}, 64, 16, 1, 132},        // 16-bit fwd (EV 64): clusters, looping
      {{{2, 4104}, -1}, 64, 1, 1, 132},         // 16-bit fwd: streaming, looping
      {{{1, 8200}, -1}, 64, 2, kNoCap, 132},    // 16-bit fwd: streaming in a cluster
      {{{1, 8200}, -1}, 1024, 1, kNoCap, 132},  // float32 bwd: a block of 1024 threads
      // staged spatial (session 5): one block per tile, looping; clusters of 2 to 8
      // (an 8 KB budget per block), looping
      {{{3, 40, 72}, 1}, 1024, 16, 1, 1, int64_t(64) << 10, 2},
      {{{1, 120, 72}, 1}, 1024, 16, 1, 1, 8192, 2},
      // session 8: the same two at 16-byte vectors (16-bit forward: V = 8, the
      // reduce-scatter of SpatialCx::reduce_rs)
      {{{3, 40, 72}, 1}, 1024, 16, 1, 1, int64_t(64) << 10, 2, 8},
      {{{1, 120, 72}, 1}, 1024, 16, 1, 1, 8192, 2, 8},
      // session 21: the staged backward with y alone (g from global memory)
      {{{3, 40, 72}, 1}, 1024, 16, 1, 1, int64_t(64) << 10, 2, 0, 1},
      {{{1, 120, 72}, 1}, 1024, 16, 1, 1, 8192, 2, 0, 1},
  };
  return c;
}

struct CapsScope {  // restores the defaults even when an ASSERT returns early
  explicit CapsScope(const RaceCase& r) {
    auto& c = detail::softmax_test_caps();
    c.max_threads = r.max_threads;
    c.max_cluster = r.max_cluster;
    c.max_clusters = r.max_clusters;
    c.sm_count = r.sm_count;
    c.stage_bytes = r.stage_bytes;
    c.stage_min_d = r.stage_min_d;
    c.stage_vec16_fwd = r.stage_vec16;
    c.stage_y_bwd = r.stage_y;
  }
  ~CapsScope() {
    auto& c = detail::softmax_test_caps();
    c.max_threads = 1024;
    c.max_cluster = 16;
    c.max_clusters = detail::kSoftmaxMaxClusters;
    c.sm_count = 1 << 20;
    c.stage_bytes = int64_t(64) << 10;
    c.stage_min_d = 0;
    c.stage_vec16_fwd = 0;
    c.stage_y_bwd = 0;
  }
};

// The shared-memory class of a geometry; "" for the shuffle-only ones.
std::string race_class(const detail::SoftmaxGeometry& g) {
  const std::string loop = g.work > g.grid / g.cluster ? ".loop" : "";
  const std::string scalar = g.vec == 1 ? ".scalar" : "";
  if (g.kernel == detail::SoftmaxKernel::Block) {
    const char* k = g.tx == 1024 ? "block.1024"
                    : g.chunks > 1 ? (g.cluster > 1 ? "block.stream.cluster" : "block.stream")
                    : g.cluster > 1 ? "block.cluster"
                                    : "block.one";
    return k + scalar + loop;
  }
  if (g.kernel != detail::SoftmaxKernel::Spatial) return "";
  if (g.staged)
    return std::string(g.cluster > 1 ? "spatial.staged.cluster" : "spatial.staged") + (g.vec == 8 ? ".vec8" : "") +
           (g.stage_y ? ".y" : "") + loop;
  const int groups = g.tx < 32 ? std::max(1, g.tx * g.ty / 32) : g.ty;  // SpatialCx::reduce's G
  if (groups == 1 && g.cluster == 1) return "";
  const char* k = g.chunks > 1     ? "spatial.stream"
                  : g.cluster > 1  ? (groups > 1 ? "spatial.cluster" : "spatial.cluster.g1")
                  : g.tx < 32      ? "spatial.narrow"
                                   : "spatial.wide";
  return k + scalar + loop;
}

struct RaceRun {
  size_t idx;
  DType dt;
  Direction dir;
  std::string cls;
  detail::SoftmaxGeometry g;
};

// Each (dtype, direction, class) once, from the first case that reaches it.
std::vector<RaceRun> race_runs(int sm_count) {
  std::vector<RaceRun> runs;
  std::set<std::string> seen;
  for (size_t i = 0; i < race_cases().size(); ++i) {
    const RaceCase& r = race_cases()[i];
    CapsScope caps(r);
    for (DType dt : {DType::Float32, DType::Float16})
      for (Direction dir : {Direction::Fwd, Direction::Bwd}) {
        SoftmaxProblem p = make_softmax_problem(r.geo.shape, r.geo.dim, dt, dir, false, Backend::CUDA);
        p.sm_count = sm_count;
        const detail::SoftmaxGeometry g = detail::softmax_geometry(p);
        const std::string cls = race_class(g);
        const std::string key = std::string(dtype_name(dt)) + (dir == Direction::Fwd ? " fwd " : " bwd ") + cls;
        if (cls.empty() || !seen.insert(key).second) continue;
        runs.push_back({i, dt, dir, cls, g});
      }
  }
  return runs;
}

// No GPU needed: the race cases reach every shared-memory class in float32 and
// float16, forward and backward (block.1024 in float32 backward only).
TEST(CudaSoftmaxRaceShapes, ReachEverySharedMemoryGeometry) {
  const auto runs = race_runs(132);
  std::set<std::string> got;
  for (const RaceRun& r : runs)
    got.insert(std::string(dtype_name(r.dt)) + (r.dir == Direction::Fwd ? " fwd " : " bwd ") + r.cls);
  std::string all;
  for (const auto& v : got) all += v + ", ";
  for (DType dt : {DType::Float32, DType::Float16})
    for (Direction dir : {Direction::Fwd, Direction::Bwd})
      for (const char* want : {"block.one.loop", "block.cluster.loop", "block.stream.loop", "block.stream.cluster",
                               "spatial.stream", "spatial.narrow.loop", "spatial.narrow.scalar.loop",
                               "spatial.wide.loop", "spatial.cluster.loop", "spatial.cluster.g1.loop",
                               "spatial.staged.loop", "spatial.staged.cluster.loop"}) {
        const std::string key = std::string(dtype_name(dt)) + (dir == Direction::Fwd ? " fwd " : " bwd ") + want;
        EXPECT_TRUE(got.count(key)) << key << " not reached; reached: " << all;
      }
  // Session 8: the 16-bit forward's V = 8 staged kernel (reduce_rs), one block and clusters.
  for (const char* want : {"float16 fwd spatial.staged.vec8.loop", "float16 fwd spatial.staged.cluster.vec8.loop"})
    EXPECT_TRUE(got.count(want)) << want << " not reached; reached: " << all;
  // Session 21: the staged backward with y alone, one block and clusters.
  for (const char* dt : {"float32", "float16"})
    for (const char* want : {" bwd spatial.staged.y.loop", " bwd spatial.staged.cluster.y.loop"})
      EXPECT_TRUE(got.count(std::string(dt) + want)) << dt << want << " not reached; reached: " << all;
  EXPECT_TRUE(got.count("float32 bwd block.1024")) << all;
  bool scalar_cluster = false;
  for (const auto& v : got) scalar_cluster |= v.find("spatial.cluster") != std::string::npos && v.find(".scalar") != std::string::npos;
  EXPECT_TRUE(scalar_cluster) << all;
  // Small: at most 9252 elements a case, about 120 launches in all (session 21: +8, the y-alone staged backward).
  for (const RaceCase& r : race_cases()) EXPECT_LE(numel(r.geo.shape), 9252) << shape_string(r.geo.shape);
  EXPECT_LE(runs.size() * 2, 128u);
}

int device_sm_count() {
  int n = 0;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) n = 132;
  return n;
}

template <class T> void race(const char* what) {
  std::mt19937 rng(2024);
  int n = 0;
  for (const RaceRun& r : race_runs(device_sm_count())) {
    if (r.dt != dtype_of<T>()) continue;
    const RaceCase& c = race_cases()[r.idx];
    SCOPED_TRACE(std::string(what) + " " + r.cls + " caps " + std::to_string(c.max_threads) + "/" +
                 std::to_string(c.max_cluster) + "/" + std::to_string(c.max_clusters) + "/" + std::to_string(c.sm_count));
    CapsScope caps(c);
    for (bool log : {false, true}) {
      run_case<T>(c.geo, log, r.dir, false, rng, &r.g);
      ++n;
    }
  }
  EXPECT_GE(n, 40);
}

TEST(CudaSoftmaxRace, Float32SharedMemoryGeometries) {
  SKIP_WITHOUT_GPU();
  race<float>("float32");
}

TEST(CudaSoftmaxRace, Float16SharedMemoryGeometries) {
  SKIP_WITHOUT_GPU();
  race<half_t>("float16");
}

// No GPU needed: the geometry variants shapes() reaches, per dtype and direction.
// Each kernel holds raw (packed, for 16-bit vectors) registers whose count depends
// on dtype, direction and vector width (softmax_elems_per_thread), so each
// combination must reach each variant: lane groups, a block per row, clusters of
// 512 and of 1024 threads, streaming; spatial with shuffles only, shared memory, a
// cluster, streaming.
std::string geometry_variant(const detail::SoftmaxGeometry& g) {
  const std::string v = g.vec > 1 ? ".vec" : ".scalar";
  switch (g.kernel) {
    case detail::SoftmaxKernel::Warp: return "warp" + v;
    case detail::SoftmaxKernel::Block:
      return std::string("block.") +
             (g.chunks > 1 ? "stream" : g.cluster == 1 ? "one" : g.tx == 1024 ? "cluster1024" : "cluster") + v;
    default:
      if (g.staged) return std::string("spatial.staged") + (g.cluster > 1 ? ".cluster" : "") + (g.vec == 8 ? ".vec8" : v);
      return std::string("spatial.") + (g.chunks > 1 ? "stream" : g.cluster > 1 ? "cluster" : g.ty > 1 ? "smem" : "shfl") +
             (g.vec == 8 ? ".vec8" : v);
  }
}

TEST(CudaSoftmaxShapes, ReachEveryGeometryVariant) {
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16})
    for (Direction dir : {Direction::Fwd, Direction::Bwd}) {
      std::set<std::string> got;
      // Default caps, and with staging off (StagingOff below runs the spatial
      // shapes so: the register path's vector clusters are staged otherwise).
      for (int64_t stage : {int64_t(64) << 10, int64_t(0)}) {
        StagingScope scope(stage);
        for (const Geo& c : shapes())
          got.insert(geometry_variant(detail::softmax_geometry(
              make_softmax_problem(c.shape, c.dim, dt, dir, false, Backend::CUDA))));
      }
      std::string all;
      for (const auto& v : got) all += v + " ";
      // (A staged backward of one block per tile holds no more rows than the
      // register path at 128-byte rows, so at the default caps the backward stages
      // in clusters only; StagedSpatialSmallShapes and the race cases reach the
      // one-block backward through the test caps.)
      if (dtype_size(dt) <= 4) {
        for (const char* want : {dir == Direction::Fwd ? "spatial.staged.vec" : "spatial.staged.cluster.vec",
                                 "spatial.staged.cluster.vec"}) {
          EXPECT_TRUE(got.count(want)) << dtype_name(dt) << (dir == Direction::Fwd ? " fwd" : " bwd") << ": " << want
                                       << " not reached; reached: " << all;
        }
        // Session 8: the 16-bit forward's V = 8 staged kernel, one block and clusters.
        // Session 14: and its register kernel's V = 8 on short columns (D <= 4).
        if (dtype_size(dt) == 2 && dir == Direction::Fwd)
          for (const char* want : {"spatial.staged.vec8", "spatial.staged.cluster.vec8", "spatial.shfl.vec8"})
            EXPECT_TRUE(got.count(want)) << dtype_name(dt) << " fwd: " << want << " not reached; reached: " << all;
      }
      for (const char* want : {"warp.vec", "warp.scalar", "block.one.vec", "block.one.scalar", "block.cluster.vec",
                               "block.cluster.scalar", "block.cluster1024.vec", "block.cluster1024.scalar",
                               "block.stream.vec", "block.stream.scalar", "spatial.shfl.vec", "spatial.shfl.scalar",
                               "spatial.smem.vec", "spatial.smem.scalar", "spatial.cluster.vec",
                               "spatial.cluster.scalar", "spatial.stream.vec"})
        EXPECT_TRUE(got.count(want)) << dtype_name(dt) << (dir == Direction::Fwd ? " fwd" : " bwd") << ": " << want
                                     << " not reached; reached: " << all;
    }
}

// No GPU needed: every kernel instantiation, (kind, vector width, EV) per dtype and
// direction, is some shape's geometry, so the typed tests above run each one
// against the reference (v5 added the short-row EVs: the warp kernel's 16 and the
// spatial E = 4; softmax_short_elems_per_thread).
TEST(CudaSoftmaxShapes, ReachEveryInstantiatedElementsPerThread) {
  using detail::SoftmaxKernel;
  const char* kinds[3] = {"warp", "block", "spatial"};
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16})
    for (Direction dir : {Direction::Fwd, Direction::Bwd}) {
      const int es = dtype_size(dt);
      const bool fwd = dir == Direction::Fwd;
      auto name = [&](SoftmaxKernel k, int vec, int ev, bool staged = false) {
        return std::string(kinds[int(k)]) + (staged ? " staged" : "") + " vec " + std::to_string(vec) + " ev " +
               std::to_string(ev);
      };
      std::set<std::string> got, want;
      for (const Geo& c : shapes()) {
        const auto g = detail::softmax_geometry(make_softmax_problem(c.shape, c.dim, dt, dir, false, Backend::CUDA));
        got.insert(name(g.kernel, g.vec, g.ev, g.staged && g.vec != detail::softmax_vec_elems(g.kernel, es)));
      }
      for (SoftmaxKernel k : {SoftmaxKernel::Warp, SoftmaxKernel::Block, SoftmaxKernel::Spatial})
        for (int vec : {detail::softmax_vec_elems(k, es), 1})
          for (int ev : {detail::softmax_elems_per_thread(k, es, fwd, vec),
                         detail::softmax_short_elems_per_thread(k, es, fwd, vec)})
            want.insert(name(k, vec, ev));
      // Session 8: the staged 16-bit forward's 16-byte vectors (its EV is the
      // register geometry's, unused by the staged kernel; D > 4 there).
      if (detail::softmax_staged_vec_elems(es, fwd) != detail::softmax_vec_elems(SoftmaxKernel::Spatial, es))
        want.insert(name(SoftmaxKernel::Spatial, detail::softmax_staged_vec_elems(es, fwd),
                         detail::softmax_elems_per_thread(SoftmaxKernel::Spatial, es, fwd,
                                                          detail::softmax_vec_elems(SoftmaxKernel::Spatial, es)),
                         true));
      // Session 14: the register spatial kernel's 16-byte vectors on short 16-bit
      // forward columns (D <= 4: its EV of 4 rows x 8).
      if (const int vw = detail::softmax_spatial_short_vec_elems(es, fwd);
          vw != detail::softmax_vec_elems(SoftmaxKernel::Spatial, es))
        want.insert(name(SoftmaxKernel::Spatial, vw, detail::softmax_short_elems_per_thread(SoftmaxKernel::Spatial, es, fwd, vw)));
      for (const auto& w : want)
        EXPECT_TRUE(got.count(w)) << dtype_name(dt) << (fwd ? " fwd" : " bwd") << ": " << w << " not reached";
      for (const auto& w : got)
        EXPECT_TRUE(want.count(w)) << dtype_name(dt) << (fwd ? " fwd" : " bwd") << ": " << w << " is not instantiated";
    }
}

TEST(CudaSoftmaxTrace, EveryCudaSoftmaxPathReached) {
  SKIP_WITHOUT_GPU();
  if (reached().empty()) GTEST_SKIP() << "the path tests did not run in this invocation";
  for (const PathInfo& info : paths())
    if (info.backend == Backend::CUDA && (info.op == "softmax" || info.op == "log_softmax")) {
      EXPECT_TRUE(reached().count(std::string(info.name))) << info.name << " was never reached";
    }
}

TEST(CudaSoftmaxTrace, LaunchRecordsGridAndBlock) {
  SKIP_WITHOUT_GPU();
  Tensor x = to_gpu<float>(std::vector<double>(64 * 262144, 0.5), {64, 262144});
  TraceSession t;
  Tensor y = softmax(x, -1);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto r = t.records();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].path, "softmax.fwd.cuda.lastdim_block.i32");
  EXPECT_EQ(r[0].backend, Backend::CUDA);
  EXPECT_GE(r[0].grid[0], 132) << "64 long rows must fill the GPU";
  EXPECT_GT(r[0].block[0], 0);
  const auto h = to_host<float>(y);
  EXPECT_DOUBLE_EQ(h.front(), 1.0 / 262144);
  EXPECT_DOUBLE_EQ(h.back(), 1.0 / 262144);
}

TEST(CudaSoftmaxApi, StridedInputsEqualContiguous) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-3, 3);
  std::vector<double> v(6 * 40);
  for (auto& e : v) e = u(rng);
  Tensor a = to_gpu<float>(v, {6, 40});
  // The transpose [40, 6] as a strided view.
  TensorView t(a.data(), DType::Float32, {40, 6}, {1, 40}, kGpu);
  Tensor contig = Tensor::empty({40, 6}, DType::Float32);
  for (int64_t i = 0; i < 40; ++i)
    for (int64_t j = 0; j < 6; ++j) contig.ptr<float>()[i * 6 + j] = float(v[size_t(j * 40 + i)]);
  Tensor cd = Tensor::copy_to(contig, kGpu);
  for (int64_t dim : {0, 1}) {
    EXPECT_EQ(to_host<float>(softmax(t, dim)), to_host<float>(softmax(cd, dim)));
    EXPECT_EQ(to_host<float>(log_softmax_backward(t, t, dim)), to_host<float>(log_softmax_backward(cd, cd, dim)));
  }
}

TEST(CudaSoftmaxApi, EmptyAndHostPointerRules) {
  SKIP_WITHOUT_GPU();
  Tensor e = Tensor::empty({3, 0}, DType::Float32, kGpu);
  TraceSession t;
  Tensor r = softmax(e, 1);
  EXPECT_EQ(r.numel(), 0);
  EXPECT_TRUE(t.records().empty());
  std::vector<float> host(12, 1.0f);
  EXPECT_THROW(softmax(TensorView(host.data(), DType::Float32, {3, 4}, {}, kGpu), 1), ValueError);
}

TEST(CudaSoftmaxApi, DeterministicAcrossRuns) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(-5, 5);
  std::vector<double> v(3 * 300001);
  for (auto& e : v) e = u(rng);
  Tensor x = to_gpu<float>(v, {3, 300001});
  const auto a = to_host<float>(softmax(x, 1));
  const auto b = to_host<float>(softmax(x, 1));
  EXPECT_EQ(a, b);
}

// ---- boundary execution past 2^31 / UINT32_MAX elements (float16) -------------
//
// Values: interior elements from a byte pattern (cudaMemset), the first and last
// few elements patched; every expected value is exact in float16. A kernel whose
// offsets wrap reads or writes the wrong element at the end of the tensor.

constexpr uint8_t kBig = 0xfb;    // 0xfbfb = -65376 in float16: exp(-65376 - m) is 0 exactly
constexpr uint8_t kOne = 0x3c;    // 0x3c3c = 1.05859375
constexpr uint8_t kZero = 0x00;   // 0
constexpr uint8_t kHalfP = 0x38;  // 0x3838 = 0.52734375

double h(uint8_t b) { return to_double(half_t{uint16_t(b | (b << 8))}); }

struct Patch {
  int64_t at;
  double v;
};

class HugeBuffer {
 public:
  HugeBuffer(int64_t n, uint8_t fill) : n_(n) {
    if (cudaMalloc(&p_, size_t(n) * 2) != cudaSuccess) {
      cudaGetLastError();
      p_ = nullptr;
      return;
    }
    cudaMemset(p_, fill, size_t(n) * 2);
  }
  ~HugeBuffer() {
    if (p_) cudaFree(p_);
  }
  bool ok() const { return p_ != nullptr; }
  void patch(const std::vector<Patch>& ps) {
    for (const Patch& q : ps) {
      const half_t v = from_double<half_t>(q.v);
      cudaMemcpy(static_cast<char*>(p_) + q.at * 2, &v, 2, cudaMemcpyHostToDevice);
    }
  }
  double at(int64_t i) const {
    half_t v{};
    cudaMemcpy(&v, static_cast<const char*>(p_) + i * 2, 2, cudaMemcpyDeviceToHost);
    return to_double(v);
  }
  TensorView view(const Shape& s) const { return TensorView(p_, DType::Float16, s, {}, kGpu); }

 private:
  int64_t n_;
  void* p_ = nullptr;
};

bool enough_memory(int64_t bytes, std::string* msg) {
  size_t free_b = 0, total = 0;
  cudaMemGetInfo(&free_b, &total);
  if (int64_t(free_b) >= bytes) return true;
  *msg = "needs " + std::to_string(bytes >> 20) + " MiB of GPU memory, " + std::to_string(free_b >> 20) + " MiB free";
  return false;
}

struct Expect {
  int64_t at;
  double v;  // NaN: expect NaN
};

// One op on one shape: a = x (fwd) or grad (bwd), b = output (bwd).
void run_huge(const Shape& shape, int64_t dim, bool log, Direction dir, uint8_t fill_a,
              const std::vector<Patch>& pa, uint8_t fill_b, const std::vector<Patch>& pb,
              const std::vector<Expect>& expect, const std::string& kind) {
  const int64_t n = numel(shape);
  const int64_t bytes = n * 2 * (dir == Direction::Fwd ? 2 : 3);
  std::string msg;
  if (!enough_memory(bytes + (int64_t(1) << 30), &msg)) GTEST_SKIP() << msg;
  SCOPED_TRACE(shape_string(shape) + (log ? " log" : "") + (dir == Direction::Fwd ? " fwd" : " bwd"));
  HugeBuffer a(n, fill_a), out(n, 0xff);
  ASSERT_TRUE(a.ok() && out.ok());
  a.patch(pa);
  TraceSession t;
  if (dir == Direction::Fwd) {
    if (log) log_softmax_out(a.view(shape), dim, out.view(shape));
    else softmax_out(a.view(shape), dim, out.view(shape));
  } else {
    HugeBuffer b(n, fill_b);
    ASSERT_TRUE(b.ok());
    b.patch(pb);
    if (log) log_softmax_backward_out(a.view(shape), b.view(shape), dim, out.view(shape));
    else softmax_backward_out(a.view(shape), b.view(shape), dim, out.view(shape));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto r = t.records();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].path, std::string(log ? "log_softmax" : "softmax") + (dir == Direction::Fwd ? ".fwd" : ".bwd") +
                           ".cuda." + kind + ".i64");
  reached().insert(r[0].path);
  for (const Expect& e : expect) {
    const double got = out.at(e.at);
    if (std::isnan(e.v)) EXPECT_TRUE(std::isnan(got)) << "element " << e.at << ": got " << got << ", want NaN";
    else EXPECT_EQ(got, e.v) << "element " << e.at << " of " << n;
  }
}

double f16(double v) { return to_double(from_double<half_t>(v)); }

// [1, 2, 2^31 + 1] over dim 1 (spatial, D = 2, columns 2^31 + 1 apart): the
// shape on which torch._softmax_backward_data returns wrong gradients at both
// ends. Memory: 3 x 8 GiB (backward).
TEST(CudaSoftmaxHuge, Spatial_1x2x2p31p1_Fp16_FwdBwdSoftmaxAndLog) {
  SKIP_WITHOUT_GPU();
  const int64_t L = (int64_t(1) << 31) + 1, n = 2 * L;
  const Shape s{1, 2, L};
  const double ln2 = std::log(2.0);
  // Column c has elements c (d = 0) and L + c (d = 1).
  const std::vector<int64_t> cols = {0, 1, L - 2, L - 1};
  auto both = [&](int64_t c) { return std::vector<int64_t>{c, L + c}; };
  // Forward: interior (1.0586, 1.0586) -> 0.5 / -ln2; column 0 (0, -65376) -> (1, 0);
  // last column (-65376, 2) -> (0, 1) / (-65378 -> -65376 in fp16, 0).
  const std::vector<Patch> px = {{0, 0.0}, {L, h(kBig)}, {L - 1, h(kBig)}, {n - 1, 2.0}};
  for (bool log : {false, true}) {
    std::vector<Expect> e;
    e.push_back({0, log ? 0.0 : 1.0});
    e.push_back({L, log ? f16(h(kBig)) : 0.0});
    e.push_back({L - 1, log ? f16(h(kBig) - 2.0) : 0.0});
    e.push_back({n - 1, log ? 0.0 : 1.0});
    for (int64_t c : {int64_t(1), L - 2})
      for (int64_t i : both(c)) e.push_back({i, log ? f16(-ln2) : 0.5});
    run_huge(s, 1, log, Direction::Fwd, kOne, px, 0, {}, e, "spatial");
  }
  // softmax backward: interior g = 0, y = 0.527 -> 0; column 0: y (0.5, 0.5),
  // g (2, -3) -> (1.25, -1.25); last: y (0.25, 0.75), g (4, -2) -> (1.125, -1.125).
  {
    const std::vector<Patch> pg = {{0, 2.0}, {L, -3.0}, {L - 1, 4.0}, {n - 1, -2.0}};
    const std::vector<Patch> py = {{0, 0.5}, {L, 0.5}, {L - 1, 0.25}, {n - 1, 0.75}};
    std::vector<Expect> e = {{0, 1.25}, {L, -1.25}, {L - 1, 1.125}, {n - 1, -1.125}};
    for (int64_t c : {int64_t(1), L - 2})
      for (int64_t i : both(c)) e.push_back({i, 0.0});
    run_huge(s, 1, false, Direction::Bwd, kZero, pg, kHalfP, py, e, "spatial");
  }
  // log_softmax backward: interior g = 0 -> 0; column 0: y (0, -65376), g (2, -3)
  // -> (3, -3); last: y (-65376, 0), g (-5, 0.5) -> (-5, 5).
  {
    const std::vector<Patch> pg = {{0, 2.0}, {L, -3.0}, {L - 1, -5.0}, {n - 1, 0.5}};
    const std::vector<Patch> py = {{0, 0.0}, {L, h(kBig)}, {L - 1, h(kBig)}, {n - 1, 0.0}};
    std::vector<Expect> e = {{0, 3.0}, {L, -3.0}, {L - 1, -5.0}, {n - 1, 5.0}};
    for (int64_t c : {int64_t(1), L - 2})
      for (int64_t i : both(c)) e.push_back({i, 0.0});
    run_huge(s, 1, true, Direction::Bwd, kZero, pg, kHalfP, py, e, "spatial");
  }
}

// [1, 325, 13215284] over dim 1, 2^32 + 4 elements (spatial_staged, the smallest
// staged shape past UINT32_MAX: D = 325 >= 256 stages both directions, the inner
// size a multiple of 4 for the 8-byte vectors; the backward takes a cluster of 2).
// Column c holds elements d*C + c, so every column's rows pass 2^31 and 2^32:
// cp.async sources and stores at in-slab offsets d*C up to 2^32 - C + c. The
// same case as `segred check --large`'s large/spatial_staged rows. Memory: 3 x 8 GiB
// (backward).
TEST(CudaSoftmaxHuge, SpatialStaged_1x325x13215284_Fp16_FwdBwdSoftmaxAndLog) {
  SKIP_WITHOUT_GPU();
  const int64_t D = 325, C = 13215284, n = D * C, last = (D - 1) * C;
  ASSERT_EQ(n, (int64_t(1) << 32) + 4);
  const Shape s{1, D, C};
  const double q = f16(1.0 / 325), lq = f16(-std::log(325.0));
  // Interior columns: 1 and C - 2 (first and last rows), and the columns holding
  // elements 2^31 and 2^32.
  std::vector<int64_t> interior = {1, last + 1, C - 2, n - 2, int64_t(1) << 31, int64_t(1) << 32};
  // Forward: every element -65376 but 0 (element 0) and 2 (element n - 1): column
  // 0 -> (1, 0, ...) / (0, -65376, ...); last column -> (..., 0, 1) / (-65378 ->
  // -65376, ..., 0); interior 1/325 / -ln 325.
  const std::vector<Patch> px = {{0, 0.0}, {n - 1, 2.0}};
  for (bool log : {false, true}) {
    std::vector<Expect> e = {{0, log ? 0.0 : 1.0},
                             {C, log ? f16(h(kBig)) : 0.0},
                             {last, log ? f16(h(kBig)) : 0.0},
                             {C - 1, log ? f16(h(kBig) - 2.0) : 0.0},
                             {n - 1 - C, log ? f16(h(kBig) - 2.0) : 0.0},
                             {n - 1, log ? 0.0 : 1.0}};
    for (int64_t i : interior) e.push_back({i, log ? lq : q});
    run_huge(s, 1, log, Direction::Fwd, kBig, px, 0, {}, e, "spatial_staged");
  }
  // softmax backward: interior g = 0 -> 0; column 0: y (0.5, 0.527 ..., 0.5), g
  // (2, 0 ..., -3): sum g*y = -0.5 -> (1.25, 0.2637 ..., -1.25); last column: y
  // (0.25, 0.527 ..., 0.75), g (4, 0 ..., -2) -> (1.125, 0.2637 ..., -1.125).
  {
    const std::vector<Patch> pg = {{0, 2.0}, {last, -3.0}, {C - 1, 4.0}, {n - 1, -2.0}};
    const std::vector<Patch> py = {{0, 0.5}, {last, 0.5}, {C - 1, 0.25}, {n - 1, 0.75}};
    const double mid = h(kHalfP) * 0.5;  // 0.263671875
    std::vector<Expect> e = {{0, 1.25},     {C, mid},         {last, -1.25},
                             {C - 1, 1.125}, {n - 1 - C, mid}, {n - 1, -1.125}};
    for (int64_t i : interior) e.push_back({i, 0.0});
    run_huge(s, 1, false, Direction::Bwd, kZero, pg, kHalfP, py, e, "spatial_staged");
  }
  // log_softmax backward: interior g = 0 -> 0; column 0: y (0, -65376 ...), g (2,
  // 0 ..., -3): sum g = -1 -> (3, 0 ..., -3); last column: y (-65376 ..., 0), g
  // (-5, 0 ..., 0.5): sum g = -4.5 -> (-5, 0 ..., 5).
  {
    const std::vector<Patch> pg = {{0, 2.0}, {last, -3.0}, {C - 1, -5.0}, {n - 1, 0.5}};
    const std::vector<Patch> py = {{0, 0.0}, {n - 1, 0.0}};
    std::vector<Expect> e = {{0, 3.0}, {C, 0.0}, {last, -3.0}, {C - 1, -5.0}, {n - 1 - C, 0.0}, {n - 1, 5.0}};
    for (int64_t i : interior) e.push_back({i, 0.0});
    run_huge(s, 1, true, Direction::Bwd, kZero, pg, kBig, py, e, "spatial_staged");
  }
}

// One last-dim row of 2^31 + 2 elements (lastdim_block, a cluster streaming the
// row). Memory: 3 x 4 GiB.
TEST(CudaSoftmaxHuge, LastdimRow_2p31p2_Fp16_FwdBwdSoftmaxAndLog) {
  SKIP_WITHOUT_GPU();
  const int64_t n = (int64_t(1) << 31) + 2;
  const Shape s{1, n};
  const double ln2 = std::log(2.0);
  // Forward: interior -65376, ends 0 -> ends 0.5 / -ln2, interior 0 / -65376 - ln2.
  for (bool log : {false, true}) {
    const double in = log ? f16(h(kBig) - ln2) : 0.0, end = log ? f16(-ln2) : 0.5;
    run_huge(s, -1, log, Direction::Fwd, kBig, {{0, 0.0}, {n - 1, 0.0}}, 0, {},
             {{0, end}, {1, in}, {n / 2, in}, {n - 2, in}, {n - 1, end}}, "lastdim_block");
  }
  // softmax backward: interior y = 0, g = 1.0586; ends y = 0.5, g = 2 and -3:
  // sum g*y = -0.5 -> ends 1.25 and -1.25, interior 0.
  run_huge(s, -1, false, Direction::Bwd, kOne, {{0, 2.0}, {n - 1, -3.0}}, kZero, {{0, 0.5}, {n - 1, 0.5}},
           {{0, 1.25}, {1, 0.0}, {n - 2, 0.0}, {n - 1, -1.25}}, "lastdim_block");
  // log_softmax backward: interior g = 0, y = -65376; ends y = 0, g = 2 and -3:
  // sum g = -1 -> ends 3 and -2, interior 0.
  run_huge(s, -1, true, Direction::Bwd, kZero, {{0, 2.0}, {n - 1, -3.0}}, kBig, {{0, 0.0}, {n - 1, 0.0}},
           {{0, 3.0}, {1, 0.0}, {n - 2, 0.0}, {n - 1, -2.0}}, "lastdim_block");
}

// 2.2e9 rows of 1 (lastdim_warp, one lane per row; row counter past 2^31).
// Memory: 3 x 4.1 GiB.
TEST(CudaSoftmaxHuge, RowsOfOne_2p2e9_Fp16_FwdBwdSoftmaxAndLog) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 2200000000;
  const Shape s{n, 1};
  for (bool log : {false, true})  // D == 1: softmax 1, log 0; the last row -inf -> NaN
    run_huge(s, -1, log, Direction::Fwd, kOne, {{0, 5.0}, {n - 1, -kInf}}, 0, {},
             {{0, log ? 0.0 : 1.0}, {1, log ? 0.0 : 1.0}, {n - 2, log ? 0.0 : 1.0}, {n - 1, kNaN}}, "lastdim_warp");
  // softmax backward y*(g - g*y): y = 0 inside; row 0 (y 0.5, g 3) -> 0.75; last (0.25, -2) -> -0.375.
  run_huge(s, -1, false, Direction::Bwd, kOne, {{0, 3.0}, {n - 1, -2.0}}, kZero, {{0, 0.5}, {n - 1, 0.25}},
           {{0, 0.75}, {1, 0.0}, {n - 2, 0.0}, {n - 1, -0.375}}, "lastdim_warp");
  // log_softmax backward g - exp(y)*g: y = -65376 inside -> g; row 0 (y 0, g 3) -> 0; last (y 0, g -2) -> 0.
  run_huge(s, -1, true, Direction::Bwd, kOne, {{0, 3.0}, {n - 1, -2.0}}, kBig, {{0, 0.0}, {n - 1, 0.0}},
           {{0, 0.0}, {1, h(kOne)}, {n - 2, h(kOne)}, {n - 1, 0.0}}, "lastdim_warp");
}

// Session 18: 2^28 + 1 rows of 8 = 2^31 + 8 elements (lastdim_warp forward at
// 16-byte vectors: one lane per row holding one vector; element offsets past 2^31,
// so i64; the other huge last-dim tests load scalars). Interior rows equal -> 1/8
// (log: -ln 8); row 0 (0, -65376 x 7) -> (1, 0 x 7); the last row (-65376 x 7, 2)
// -> (0 x 7, 1). Memory: 2 x 4 GiB.
TEST(CudaSoftmaxHuge, RowsOfEight_2p28p1_Fp16_FwdSoftmaxAndLog) {
  SKIP_WITHOUT_GPU();
  const int64_t rows = (int64_t(1) << 28) + 1, n = 8 * rows;
  const Shape s{rows, 8};
  const double big = h(kBig);
  std::vector<Patch> pa = {{0, 0.0}, {n - 1, 2.0}};
  for (int k = 1; k < 8; ++k) pa.push_back({k, big});
  for (int k = 2; k <= 8; ++k) pa.push_back({n - k, big});
  for (bool log : {false, true}) {
    const double in = log ? f16(-std::log(8.0)) : 0.125;
    std::vector<Expect> e;
    for (int k = 0; k < 8; ++k) {
      e.push_back({k, k == 0 ? (log ? 0.0 : 1.0) : (log ? f16(big) : 0.0)});
      e.push_back({8 + k, in});
      e.push_back({n - 16 + k, in});
      e.push_back({n - 8 + k, k == 7 ? (log ? 0.0 : 1.0) : (log ? f16(big - 2.0) : 0.0)});
    }
    run_huge(s, -1, log, Direction::Fwd, kOne, pa, 0, {}, e, "lastdim_warp");
  }
}

// 1.1e9 rows of 2 (lastdim_warp, lane groups of one lane holding 2 elements).
// Memory: 3 x 4.1 GiB.
TEST(CudaSoftmaxHuge, RowsOfTwo_1p1e9_Fp16_FwdBwdSoftmaxAndLog) {
  SKIP_WITHOUT_GPU();
  const int64_t rows = 1100000000, n = 2 * rows;
  const Shape s{rows, 2};
  const double ln2 = std::log(2.0);
  // Interior pairs equal -> 0.5 / -ln2; row 0 (0, -65376) -> (1, 0); last (-65376, 2) -> (0, 1).
  for (bool log : {false, true}) {
    const double in = log ? f16(-ln2) : 0.5;
    run_huge(s, -1, log, Direction::Fwd, kOne, {{0, 0.0}, {1, h(kBig)}, {n - 2, h(kBig)}, {n - 1, 2.0}}, 0, {},
             {{0, log ? 0.0 : 1.0},
              {1, log ? f16(h(kBig)) : 0.0},
              {2, in},
              {3, in},
              {n - 4, in},
              {n - 3, in},
              {n - 2, log ? f16(h(kBig) - 2.0) : 0.0},
              {n - 1, log ? 0.0 : 1.0}},
             "lastdim_warp");
  }
  // softmax backward: g = 0 inside -> 0; row 0 y (0.5, 0.5) g (2, -3) -> (1.25, -1.25);
  // last y (0.25, 0.75) g (4, -2) -> (1.125, -1.125).
  run_huge(s, -1, false, Direction::Bwd, kZero, {{0, 2.0}, {1, -3.0}, {n - 2, 4.0}, {n - 1, -2.0}}, kHalfP,
           {{0, 0.5}, {1, 0.5}, {n - 2, 0.25}, {n - 1, 0.75}},
           {{0, 1.25}, {1, -1.25}, {2, 0.0}, {n - 3, 0.0}, {n - 2, 1.125}, {n - 1, -1.125}}, "lastdim_warp");
  // log_softmax backward: g = 0 inside -> 0; row 0 y (0, -65376) g (2, -3) -> (3, -3);
  // last y (-65376, 0) g (-5, 0.5) -> (-5, 5).
  run_huge(s, -1, true, Direction::Bwd, kZero, {{0, 2.0}, {1, -3.0}, {n - 2, -5.0}, {n - 1, 0.5}}, kHalfP,
           {{0, 0.0}, {1, h(kBig)}, {n - 2, h(kBig)}, {n - 1, 0.0}},
           {{0, 3.0}, {1, -3.0}, {2, 0.0}, {n - 3, 0.0}, {n - 2, -5.0}, {n - 1, 5.0}}, "lastdim_warp");
}

}  // namespace
#endif  // SEGRED_WITH_CUDA
