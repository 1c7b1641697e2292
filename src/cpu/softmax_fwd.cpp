// Before every include, so that every function of this file (the inline exp of
// src/ops/softmax_ops.h included) is compiled alike and still inlines: GCC keeps
// the range clamps of the polynomial exp as branches under its default
// -ftrapping-math, which leaves every exp loop scalar (measured 8x slower). No
// code here relies on floating-point exception flags. (Clang's default already.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
// softmax / log_softmax forward on the CPU.
//
// Paths (src/core/registry.cpp; log_softmax has the same two under its own op name):
//   softmax.fwd.cpu.lastdim.i64   inner == 1. A row is D contiguous values. It is
//       read in blocks of plan.chunk values: block max (16 NaN-propagating lanes),
//       then the block's sum of exp against the running max, read again from L1,
//       merged into the running (m, s) (src/ops/softmax_ops.h). A final pass
//       writes y = epilogue(x, m, s), reading the row from L2 when it fits there.
//       Memory traffic: one read and one write of the tensor for rows up to L2
//       size, two reads and one write beyond.
//   softmax.fwd.cpu.spatial.i64   inner > 1. A row is a column, `inner` apart. A
//       work item is one outer index and a tile of W = plan.chunk columns: the
//       statistics of the W columns are kept in arrays and every inner loop runs
//       along the W contiguous columns (vectorised, streaming). The [D, W] tile
//       is read in blocks of R rows (R * W values ~ 16 KiB, in L1 for the block's
//       second read; the block's sum of exp is formed apart and then added, so a
//       long column is a sum of block sums) for the statistics, then once more to write the result (from
//       L2 when D * W values fit there; plan_softmax sizes W for that).
// Both: OpenMP over rows / work items, static schedule; the reduction order is a
// function of D, W and plan.chunk only, so results are deterministic.
#include <algorithm>
#include <vector>

#include "segred/trace.h"
#include "src/core/dispatch.h"
#include "src/cpu/half_convert.h"
#include "src/cpu/softmax_kernels.h"
#include "src/ops/softmax_ops.h"

namespace segred::cpu {
namespace {

// The kernels, compiled twice: for the build's baseline (x86-64: SSE2) and, with
// GCC on x86-64, for AVX2 + FMA, picked once per process by the CPU's features.
// The exp polynomial and the conversions are ~25 vector operations per vector, so
// the 8-wide form with FMA runs them ~2.5x faster (measured 1.87 -> 0.72 ns per
// float exp in L1); results may differ in the last bit between the two (FMA
// contraction), never between runs on one machine.
namespace isa_base {
#include "src/cpu/softmax_fwd_kernels.inc"
}  // namespace isa_base

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define SEGRED_SOFTMAX_AVX2 1
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace isa_avx2 {
#include "src/cpu/softmax_fwd_kernels.inc"
}  // namespace isa_avx2
#pragma GCC pop_options
#endif

}  // namespace

bool softmax_use_avx2() {
#ifdef SEGRED_SOFTMAX_AVX2
  static const bool cpu_has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return cpu_has && softmax_allow_avx2().load(std::memory_order_relaxed);
#else
  return false;
#endif
}

void softmax_fwd(const Plan& plan, const SoftmaxProblem& p, const TensorView& x, const TensorView& out) {
  detail::record_launch(plan.path);
  const bool last = plan.path.find(".lastdim.") != std::string_view::npos;
  SEGRED_DISPATCH_FLOAT(x.dtype, T, [&] {
    const T* xp = x.ptr<const T>();
    T* yp = out.ptr<T>();
#ifdef SEGRED_SOFTMAX_AVX2
    if (softmax_use_avx2()) return isa_avx2::run<T>(plan, p, xp, yp, last);
#endif
    isa_base::run<T>(plan, p, xp, yp, last);
  });
}

}  // namespace segred::cpu
