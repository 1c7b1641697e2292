// Before every include, so that every function of this file (the inline exp of
// src/ops/softmax_ops.h included) is compiled alike and still inlines: GCC keeps
// the range clamps of the polynomial exp as branches under its default
// -ftrapping-math, which leaves every exp loop scalar (measured 8x slower). No
// code here relies on floating-point exception flags. (Clang's default already.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
// softmax / log_softmax backward on the CPU, fused: per row one reduction pass
// acc = sum term(g, y) (softmax: g * y; log_softmax: g), then one pass writing
// gI = apply(g, y, acc) (softmax: y * (g - acc); log_softmax: g - exp(y) * acc).
// No temporary tensor: the second pass re-reads g and y, from cache when the row
// (lastdim) or the [D, W] tile (spatial) fits there.
//
// Paths (log_softmax has the same two under its own op name):
//   softmax.bwd.cpu.lastdim.i64   inner == 1: a row is D contiguous values; the
//       sum runs over blocks of 1024 values, each in 16 lanes combined by a fixed
//       tree, the block sums added in order.
//   softmax.bwd.cpu.spatial.i64   inner > 1: a work item is one outer index and a
//       tile of W = plan.chunk columns; the W sums live in an array (summed in
//       blocks of 32 rows) and every inner loop runs along the contiguous columns.
// OpenMP over rows / work items; reduction order fixed by the shape and the plan.
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
#include "src/cpu/softmax_bwd_kernels.inc"
}  // namespace isa_base

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define SEGRED_SOFTMAX_AVX2 1
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace isa_avx2 {
#include "src/cpu/softmax_bwd_kernels.inc"
}  // namespace isa_avx2
#pragma GCC pop_options
#endif

}  // namespace

void softmax_bwd(const Plan& plan, const SoftmaxProblem& p, const TensorView& grad, const TensorView& output,
                 const TensorView& grad_input) {
  detail::record_launch(plan.path);
  const bool last = plan.path.find(".lastdim.") != std::string_view::npos;
  SEGRED_DISPATCH_FLOAT(grad.dtype, T, [&] {
    const T* gp = grad.ptr<const T>();
    const T* yp = output.ptr<const T>();
    T* op = grad_input.ptr<T>();
#ifdef SEGRED_SOFTMAX_AVX2
    if (softmax_use_avx2()) return isa_avx2::run<T>(plan, p, gp, yp, op, last);
#endif
    isa_base::run<T>(plan, p, gp, yp, op, last);
  });
}

}  // namespace segred::cpu
