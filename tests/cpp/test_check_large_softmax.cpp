// The softmax boundary cases of `segred check --large` (cli/softmax_cases.h),
// without allocating them: every CUDA softmax path with i32/i64 variants has a
// case, and the pure plan sends each case to its i64 variant; the shapes, memory
// needs and checked elements are well-formed; the expected values (the float64
// reference on one row given as runs) equal the dense float64 reference on small
// analogues (the same rules at small sizes), equal the closed forms of
// CudaSoftmaxHuge.* at the real sizes, and are what segred's CPU kernels return on
// the small analogues (through the same runner `segred check --large` uses).
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "cli/softmax_cases.h"
#include "segred/segred.h"
#include "src/core/softmax_geometry.h"
#include "src/reference/softmax_ref.h"

namespace {

using namespace segred;
using cli::LargeSoftmaxCase;
constexpr int64_t k2_31 = int64_t(1) << 31;
constexpr int64_t k2_32 = int64_t(1) << 32;

SoftmaxProblem cuda_problem(const LargeSoftmaxCase& c) {
  return make_softmax_problem(c.shape, c.dim, c.dtype, c.dir, c.log, Backend::CUDA);
}

// Every CUDA softmax path name with an i32 and an i64 variant (the registry's, when
// this build has CUDA; the same names are built from the kernel list otherwise).
std::set<std::string> cuda_i64_paths_with_i32_twin() {
  std::set<std::string> out;
  for (const char* op : {"softmax", "log_softmax"})
    for (const char* dir : {".fwd", ".bwd"})
      for (const char* k : {"lastdim_warp", "lastdim_block", "spatial", "spatial_staged"})
        out.insert(std::string(op) + dir + ".cuda." + k + ".i64");
  if (built_with_cuda()) {
    std::set<std::string> reg;
    for (const PathInfo& p : paths()) {
      if (p.backend != Backend::CUDA || (p.op != "softmax" && p.op != "log_softmax") || p.index_bits != 64) continue;
      const std::string name(p.name);
      const std::string twin = name.substr(0, name.size() - 3) + "i32";
      for (const PathInfo& q : paths())
        if (q.name == twin) reg.insert(name);
    }
    EXPECT_EQ(reg, out) << "the registry's CUDA softmax paths changed: update this list and the boundary cases";
  }
  return out;
}

TEST(CheckLargeSoftmax, EveryCudaI64SoftmaxPathHasABoundaryCaseThePlanSendsThere) {
  std::set<std::string> reached;
  for (const LargeSoftmaxCase& c : cli::softmax_large_cases()) {
    const SoftmaxProblem p = cuda_problem(c);
    const detail::SoftmaxGeometry g = detail::softmax_geometry(p);
    EXPECT_EQ(g.index_bits, 64) << c.name;
    EXPECT_EQ(std::string(detail::softmax_cuda_path(p, g)), c.cuda_path()) << c.name;
#ifdef SEGRED_WITH_CUDA
    const Plan plan = plan_softmax(p);
    EXPECT_EQ(plan.path, c.cuda_path()) << c.name;
    EXPECT_EQ(plan.index_bits, 64) << c.name;
#endif
    reached.insert(c.cuda_path());
  }
  EXPECT_EQ(reached, cuda_i64_paths_with_i32_twin());
}

TEST(CheckLargeSoftmax, ShapesMemoryNeedsAndCheckedElementsAreWellFormed) {
  const auto cases = cli::softmax_large_cases();
  EXPECT_EQ(cases.size(), 20u);  // 5 shapes x {softmax, log_softmax} x {fwd, bwd}
  std::set<std::string> names;
  for (const LargeSoftmaxCase& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_TRUE(names.insert(c.name).second) << "duplicate name";
    EXPECT_EQ(c.dtype, DType::Float16);
    const int64_t n = c.numel();
    EXPECT_GT(n, k2_31);
    if (c.boundary == "UINT32_MAX") EXPECT_GT(n, k2_32);
    else EXPECT_EQ(c.boundary, "INT32_MAX");
    EXPECT_EQ(c.bytes_needed(), n * 2 * (c.dir == Direction::Fwd ? 2 : 3));
    EXPECT_LT(c.bytes_needed(), int64_t(25) << 30);  // fits the H200 (141 GB) many times over
    EXPECT_NE(c.name.find(c.kernel), std::string::npos);
    EXPECT_NE(c.name.find(c.op()), std::string::npos);
    // Checked: both ends, both sides of 2^31 (and of 2^32 past it), every patched element.
    std::set<int64_t> at(c.checks.begin(), c.checks.end());
    EXPECT_EQ(at.size(), c.checks.size());
    EXPECT_GE(c.checks.front(), 0);
    EXPECT_LT(c.checks.back(), n);
    for (int64_t i : {int64_t(0), n - 1, k2_31 - 1, k2_31}) EXPECT_TRUE(at.count(i)) << i;
    if (n > k2_32) EXPECT_TRUE(at.count(k2_32 - 1) && at.count(k2_32));
    for (const auto* arr : {&c.a, &c.b})
      for (const cli::Patch& p : arr->patches) {
        EXPECT_TRUE(p.at >= 0 && p.at < n) << p.at;
        EXPECT_TRUE(at.count(p.at)) << p.at;
      }
    if (c.dir == Direction::Fwd) EXPECT_TRUE(c.b.patches.empty());
  }
  // The spatial case is the torch reproducer: [1, 2, 2^31 + 1] over dim 1.
  EXPECT_EQ(cases[0].shape, (Shape{1, 2, k2_31 + 1}));
  EXPECT_EQ(cases[0].dim, 1);
  EXPECT_EQ(cases[0].kernel, "spatial");
  // The staged spatial case: [1, 325, 13215284] over dim 1, 2^32 + 4 elements,
  // vector loads (inner % 4 == 0), CUDA only (the CPU's spatial shape is above).
  int staged = 0;
  for (const LargeSoftmaxCase& c : cases) {
    if (c.kernel != "spatial_staged") continue;
    ++staged;
    EXPECT_EQ(c.shape, (Shape{1, 325, 13215284})) << c.name;
    EXPECT_EQ(c.numel(), k2_32 + 4) << c.name;
    EXPECT_EQ(c.shape[2] % 4, 0) << c.name;
    EXPECT_EQ(c.boundary, "UINT32_MAX") << c.name;
    EXPECT_FALSE(c.cpu) << c.name;
    const SoftmaxProblem p = cuda_problem(c);
    const detail::SoftmaxGeometry g = detail::softmax_geometry(p);
    EXPECT_TRUE(g.staged) << c.name;
    EXPECT_EQ(g.cluster, c.dir == Direction::Fwd ? 1 : 2) << c.name;
  }
  EXPECT_EQ(staged, 4);
}

cli::BoundarySizes small_sizes() { return cli::BoundarySizes::small_analogue(); }

// The run-length row reference equals the dense float64 reference (src/reference)
// at every element of the small analogues.
TEST(CheckLargeSoftmax, ExpectedValuesEqualTheDenseReferenceOnSmallAnalogues) {
  for (const LargeSoftmaxCase& c : cli::softmax_large_cases(small_sizes())) {
    SCOPED_TRACE(c.name);
    const int64_t n = c.numel();
    std::vector<double> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      a[size_t(i)] = cli::round_to_dtype(c.a.at(i), c.dtype);
      b[size_t(i)] = cli::round_to_dtype(c.b.at(i), c.dtype);
    }
    const SoftmaxProblem p = make_softmax_problem(c.shape, c.dim, c.dtype);
    const reference::SoftmaxShape rs{p.outer, p.dim_size, p.inner};
    const std::vector<double> want = c.dir == Direction::Fwd ? reference::softmax_forward(rs, a, c.log)
                                                             : reference::softmax_backward(rs, a, b, c.log);
    for (int64_t i = 0; i < n; ++i) {
      const double w = cli::round_to_dtype(want[size_t(i)], c.dtype), e = cli::large_expected(c, i);
      if (std::isnan(w)) EXPECT_TRUE(std::isnan(e)) << "element " << i;
      else EXPECT_EQ(e, w) << "element " << i;
    }
  }
}

// At the real sizes: the closed forms of CudaSoftmaxHuge.* (tests/cpp/test_cuda_softmax.cpp).
TEST(CheckLargeSoftmax, ExpectedValuesAreTheClosedFormsAtTheRealSizes) {
  const auto cases = cli::softmax_large_cases();
  auto find = [&](const std::string& kernel, const std::string& shape_prefix, bool log, Direction dir) {
    for (const auto& c : cases)
      if (c.kernel == kernel && c.shape_name.rfind(shape_prefix, 0) == 0 && c.log == log && c.dir == dir) return c;
    ADD_FAILURE() << "no case " << kernel << " " << shape_prefix;
    return cases[0];
  };
  const double ln2h = cli::round_to_dtype(-std::log(2.0), DType::Float16);
  const int64_t L = k2_31 + 1, n = 2 * L;
  {
    const auto f = find("spatial", "1x2x", false, Direction::Fwd);
    EXPECT_EQ(cli::large_expected(f, 0), 1.0);
    EXPECT_EQ(cli::large_expected(f, L), 0.0);
    EXPECT_EQ(cli::large_expected(f, n - 1), 1.0);
    EXPECT_EQ(cli::large_expected(f, 1), 0.5);
    EXPECT_EQ(cli::large_expected(f, k2_32), 0.5);
    const auto lf = find("spatial", "1x2x", true, Direction::Fwd);
    EXPECT_EQ(cli::large_expected(lf, L), -65376.0);
    EXPECT_EQ(cli::large_expected(lf, L - 1), -65376.0);  // big - 2 rounds to big
    EXPECT_EQ(cli::large_expected(lf, L + 1), ln2h);
    const auto b = find("spatial", "1x2x", false, Direction::Bwd);
    EXPECT_EQ(cli::large_expected(b, 0), 1.25);
    EXPECT_EQ(cli::large_expected(b, L), -1.25);
    EXPECT_EQ(cli::large_expected(b, L - 1), 1.125);
    EXPECT_EQ(cli::large_expected(b, n - 1), -1.125);
    EXPECT_EQ(cli::large_expected(b, 1), 0.0);  // torch 2.11 on CUDA: -0.52734375
    const auto lb = find("spatial", "1x2x", true, Direction::Bwd);
    EXPECT_EQ(cli::large_expected(lb, 0), 3.0);
    EXPECT_EQ(cli::large_expected(lb, L), -3.0);
    EXPECT_EQ(cli::large_expected(lb, L - 1), -5.0);
    EXPECT_EQ(cli::large_expected(lb, n - 1), 5.0);
    EXPECT_EQ(cli::large_expected(lb, k2_32 - 1), 0.0);
  }
  {
    // spatial_staged [1, 325, C]: element d*C + c.
    const int64_t D = 325, C = 13215284, m = D * C, last = (D - 1) * C;
    const double q = cli::round_to_dtype(1.0 / 325, DType::Float16);
    const double lq = cli::round_to_dtype(-std::log(325.0), DType::Float16);
    const auto f = find("spatial_staged", "1x325x", false, Direction::Fwd);
    EXPECT_EQ(cli::large_expected(f, 0), 1.0);
    EXPECT_EQ(cli::large_expected(f, last), 0.0);
    EXPECT_EQ(cli::large_expected(f, m - 1), 1.0);
    EXPECT_EQ(cli::large_expected(f, C - 1), 0.0);
    EXPECT_EQ(cli::large_expected(f, 1), q);
    EXPECT_EQ(cli::large_expected(f, k2_31), q);
    EXPECT_EQ(cli::large_expected(f, k2_32), q);
    const auto lf = find("spatial_staged", "1x325x", true, Direction::Fwd);
    EXPECT_EQ(cli::large_expected(lf, 0), 0.0);
    EXPECT_EQ(cli::large_expected(lf, C), -65376.0);
    EXPECT_EQ(cli::large_expected(lf, m - 1 - C), -65376.0);  // big - 2 rounds to big
    EXPECT_EQ(cli::large_expected(lf, m - 1), 0.0);
    EXPECT_EQ(cli::large_expected(lf, k2_32 - 1), lq);
    const auto b = find("spatial_staged", "1x325x", false, Direction::Bwd);
    EXPECT_EQ(cli::large_expected(b, 0), 1.25);
    EXPECT_EQ(cli::large_expected(b, last), -1.25);
    EXPECT_EQ(cli::large_expected(b, C), 0.263671875);  // y .527 x (0 + 0.5)
    EXPECT_EQ(cli::large_expected(b, C - 1), 1.125);
    EXPECT_EQ(cli::large_expected(b, m - 1), -1.125);
    EXPECT_EQ(cli::large_expected(b, m - 1 - C), 0.263671875);
    EXPECT_EQ(cli::large_expected(b, 1), 0.0);
    EXPECT_EQ(cli::large_expected(b, last + 1), 0.0);
    const auto lb = find("spatial_staged", "1x325x", true, Direction::Bwd);
    EXPECT_EQ(cli::large_expected(lb, 0), 3.0);
    EXPECT_EQ(cli::large_expected(lb, last), -3.0);
    EXPECT_EQ(cli::large_expected(lb, C), 0.0);
    EXPECT_EQ(cli::large_expected(lb, C - 1), -5.0);
    EXPECT_EQ(cli::large_expected(lb, m - 1), 5.0);
    EXPECT_EQ(cli::large_expected(lb, k2_32), 0.0);
    // The uniform interior values are far from a float16 rounding tie, so the
    // kernel's float result rounds as the float64 reference does.
    EXPECT_EQ(cli::round_to_dtype(double(1.0f / 325.0f), DType::Float16), q);
    EXPECT_EQ(cli::round_to_dtype(double(-std::log(325.0f)), DType::Float16), lq);
  }
  {
    const int64_t D = k2_31 + 2;
    const auto f = find("lastdim_block", "1x", false, Direction::Fwd);
    EXPECT_EQ(cli::large_expected(f, 0), 0.5);
    EXPECT_EQ(cli::large_expected(f, D - 1), 0.5);
    EXPECT_EQ(cli::large_expected(f, k2_31), 0.0);
    const auto lf = find("lastdim_block", "1x", true, Direction::Fwd);
    EXPECT_EQ(cli::large_expected(lf, D - 1), ln2h);
    EXPECT_EQ(cli::large_expected(lf, 1), -65376.0);
    EXPECT_EQ(cli::large_expected(find("lastdim_block", "1x", false, Direction::Bwd), D - 1), -1.25);
    EXPECT_EQ(cli::large_expected(find("lastdim_block", "1x", true, Direction::Bwd), 0), 3.0);
    EXPECT_EQ(cli::large_expected(find("lastdim_block", "1x", true, Direction::Bwd), D - 1), -2.0);
  }
  {
    const int64_t R = 2200000000;
    const auto f = find("lastdim_warp", "2200000000x1", false, Direction::Fwd);
    EXPECT_EQ(cli::large_expected(f, 0), 1.0);
    EXPECT_EQ(cli::large_expected(f, k2_31), 1.0);
    EXPECT_TRUE(std::isnan(cli::large_expected(f, R - 1)));  // a row of -inf
    EXPECT_EQ(cli::large_expected(find("lastdim_warp", "2200000000x1", false, Direction::Bwd), R - 1), -0.375);
    EXPECT_EQ(cli::large_expected(find("lastdim_warp", "2200000000x1", true, Direction::Bwd), k2_31), 1.05859375);
    const int64_t m = 2200000000;  // rows of two: 1.1e9 x 2
    EXPECT_EQ(cli::large_expected(find("lastdim_warp", "1100000000x2", false, Direction::Bwd), m - 2), 1.125);
    EXPECT_EQ(cli::large_expected(find("lastdim_warp", "1100000000x2", true, Direction::Bwd), m - 1), 5.0);
    EXPECT_EQ(cli::large_expected(find("lastdim_warp", "1100000000x2", true, Direction::Fwd), k2_31), ln2h);
  }
}

// The runner `segred check --large` uses, on the small analogues on the CPU:
// every checked element exact, the CPU path of the same layout reached.
TEST(CheckLargeSoftmax, SmallAnaloguesRunRightThroughTheCheckRunnerOnCpu) {
  for (const LargeSoftmaxCase& c : cli::softmax_large_cases(small_sizes())) {
    const cli::Row row = cli::run_softmax_large_case(c, DeviceRef{});
    EXPECT_EQ(row.verdict, "ok") << c.name << ": " << row.detail;
    const std::string layout = c.kernel.rfind("spatial", 0) == 0 ? "spatial" : "lastdim";
    EXPECT_EQ(row.paths, c.op() + (c.dir == Direction::Fwd ? ".fwd" : ".bwd") + ".cpu." + layout + ".i64") << c.name;
  }
}

TEST(CheckLargeSoftmax, BoundaryPointsStraddle2p31And2p32) {
  const auto p = cli::boundary_points(k2_32 + 2, {5});
  const std::set<int64_t> s(p.begin(), p.end());
  for (int64_t i : {int64_t(0), int64_t(3), int64_t(5), k2_31 - 1, k2_31, k2_32 - 1, k2_32, k2_32 + 1})
    EXPECT_TRUE(s.count(i)) << i;
  EXPECT_TRUE(std::is_sorted(p.begin(), p.end()));
  const auto q = cli::boundary_points(3);
  EXPECT_EQ(q, (std::vector<int64_t>{0, 1, 2}));
}

TEST(CheckLargeSoftmax, MemoryShortfallNamesTheNeed) {
  const std::string msg = cli::memory_shortfall(DeviceRef{}, int64_t(1) << 60);
  EXPECT_NE(msg.find("needs 1073741824.0 GiB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("free on cpu"), std::string::npos) << msg;
  EXPECT_EQ(cli::memory_shortfall(DeviceRef{}, 1024), "");
}

// make_filled / read_elements on the CPU (the CUDA build fills by doubling copies).
TEST(CheckLargeSoftmax, FilledArraysHoldTheirRule) {
  const cli::FilledArray a{-65376.0, {{0, 2.0}, {6, 0.25}, {6, 0.5}}};
  const Tensor t = cli::make_filled({7}, DType::Float16, a, DeviceRef{});
  EXPECT_EQ(cli::read_elements(t, {0, 1, 5, 6}), (std::vector<double>{2.0, -65376.0, -65376.0, 0.5}));
  EXPECT_EQ(a.at(6), 0.5);  // the last patch wins
  const Tensor u = cli::make_filled({2, 3}, DType::Float64, {0.1, {}}, DeviceRef{});
  EXPECT_EQ(cli::read_elements(u, {5}), std::vector<double>{0.1});
}

}  // namespace
