// segment_reduce's boundary cases of `segred check --large`
// (cli/segment_reduce_large.h), without allocating them: every CUDA
// segment_reduce path with i32/i64 variants has a case the pure plan sends to its
// i64 variant; the closed-form expected values equal a dense float64 reference on
// the small analogues (the same rules on a few dozen rows); and the runner that
// `segred check --large` uses passes on segred's CPU kernels at those sizes and
// fails on a wrong answer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "cli/segment_reduce_large.h"
#include "segred/segred.h"

namespace {

using namespace segred;
using cli::LargeSegmentCase;

SegmentProblem cuda_problem(const LargeSegmentCase& c, Direction dir) {
  SegmentProblem p;
  p.backend = Backend::CUDA;
  p.direction = dir;
  p.reduce = parse_reduce(c.reduce);
  p.dtype = c.dtype;
  p.index_dtype = DType::Int64;
  p.outer = 1;
  p.axis_len = c.rows;
  p.inner = c.inner;
  p.num_segments = 3;
  return p;
}

TEST(CheckLargeSegmentReduce, EveryCudaI64PathWithAnI32TwinHasABoundaryCaseThePlanSendsThere) {
  std::set<std::string> want = {"segment_reduce.fwd.cuda.flat.i64", "segment_reduce.bwd.cuda.flat.i64",
                                "segment_reduce.fwd.cuda.features.i64", "segment_reduce.bwd.cuda.features.i64"};
  if (built_with_cuda()) {
    std::set<std::string> reg;
    for (const PathInfo& p : paths()) {
      if (p.backend != Backend::CUDA || p.op != "segment_reduce" || p.index_bits != 64) continue;
      const std::string name(p.name), twin = name.substr(0, name.size() - 3) + "i32";
      for (const PathInfo& q : paths())
        if (q.name == twin) reg.insert(name);
    }
    EXPECT_EQ(reg, want) << "the registry's CUDA segment_reduce paths changed: update the boundary cases";
  }
  std::set<std::string> reached;
  std::set<std::string> boundaries;
  for (const LargeSegmentCase& c : cli::segment_reduce_large_cases()) {
    EXPECT_GT(c.numel(), c.boundary == "UINT32_MAX" ? int64_t(UINT32_MAX) : int64_t(INT32_MAX)) << c.name;
    boundaries.insert(c.boundary + "/" + (c.inner == 1 ? "flat" : "features"));
    for (Direction dir : {Direction::Fwd, Direction::Bwd}) {
      const Plan plan = plan_segment_reduce(cuda_problem(c, dir));
      EXPECT_EQ(std::string(plan.path), c.cuda_path(dir)) << c.name;
      EXPECT_EQ(plan.index_bits, 64) << c.name;
      reached.insert(std::string(plan.path));
    }
  }
  EXPECT_EQ(reached, want);
  EXPECT_EQ(boundaries.size(), 4u) << "each path past both INT32_MAX and UINT32_MAX";
}

// The dense float64 reference of one case at its (small) size: sum and max per
// segment and feature, max backward split evenly among the elements equal to the
// maximum (SEMANTICS.md), every element.
struct Dense {
  std::vector<double> out, grad;
};
Dense dense_reference(const LargeSegmentCase& c) {
  const cli::FilledArray a = c.data();
  const std::vector<int64_t> off = c.offsets();
  Dense d;
  d.out.assign(size_t(3 * c.inner), 0);
  d.grad.assign(size_t(c.numel()), 0);
  for (int s = 0; s < 3; ++s)
    for (int64_t f = 0; f < c.inner; ++f) {
      double acc = c.reduce == "max" ? -INFINITY : 0;
      for (int64_t r = off[size_t(s)]; r < off[size_t(s) + 1]; ++r) {
        const double v = cli::round_to_dtype(a.at(r * c.inner + f), c.dtype);
        acc = c.reduce == "max" ? std::max(acc, v) : acc + v;
      }
      d.out[size_t(s * c.inner + f)] = acc;
      int ties = 0;
      for (int64_t r = off[size_t(s)]; r < off[size_t(s) + 1]; ++r)
        ties += cli::round_to_dtype(a.at(r * c.inner + f), c.dtype) == acc;
      for (int64_t r = off[size_t(s)]; r < off[size_t(s) + 1]; ++r) {
        const int64_t e = r * c.inner + f;
        if (c.reduce == "sum") d.grad[size_t(e)] = LargeSegmentCase::kGrad[s];
        else if (cli::round_to_dtype(a.at(e), c.dtype) == acc) d.grad[size_t(e)] = LargeSegmentCase::kGrad[s] / ties;
      }
    }
  return d;
}

TEST(CheckLargeSegmentReduce, ClosedFormsEqualTheDenseReferenceOnTheSmallAnalogues) {
  for (const LargeSegmentCase& c : cli::segment_reduce_large_cases(/*small=*/true)) {
    const Dense d = dense_reference(c);
    for (int64_t i = 0; i < 3 * c.inner; ++i) EXPECT_EQ(c.expected_out(int(i / c.inner)), d.out[size_t(i)]) << c.name;
    for (int64_t e = 0; e < c.numel(); ++e) EXPECT_EQ(c.expected_grad(e), d.grad[size_t(e)]) << c.name << " element " << e;
    // The checked elements include every patched one and both ends.
    const std::vector<int64_t> at = c.checks();
    EXPECT_EQ(at.front(), 0);
    EXPECT_EQ(at.back(), c.numel() - 1);
    for (const cli::Patch& p : c.data().patches)
      EXPECT_TRUE(std::binary_search(at.begin(), at.end(), p.at)) << c.name << " patch " << p.at;
  }
}

TEST(CheckLargeSegmentReduce, TheRunnerPassesOnTheCpuKernelsAtSmallSizes) {
  for (const LargeSegmentCase& c : cli::segment_reduce_large_cases(/*small=*/true)) {
    const cli::Row row = cli::run_segment_reduce_large_case(c, DeviceRef{});
    EXPECT_EQ(row.verdict, "ok") << c.name << ": " << row.detail;
    EXPECT_EQ(row.paths, c.cpu_path(Direction::Bwd) + "," + c.cpu_path(Direction::Fwd)) << c.name;
  }
}

TEST(CheckLargeSegmentReduce, TheRunnerReportsAWrongElementInTheMiddleSegment) {
  // One element of the long middle segment raised to 100 in the data only: the
  // forward (sum and max) disagrees with the closed forms, so the runner must say
  // WRONG and name the middle segment's first output element.
  for (const LargeSegmentCase& base : cli::segment_reduce_large_cases(/*small=*/true)) {
    LargeSegmentCase c = base;
    c.defect = {{5 * c.inner, 100}};
    const cli::Row row = cli::run_segment_reduce_large_case(c, DeviceRef{});
    EXPECT_EQ(row.verdict, "WRONG") << c.name;
    EXPECT_NE(row.detail.find("output[" + std::to_string(c.inner) + "]"), std::string::npos) << row.detail;
  }
}

}  // namespace
