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
#include "src/cpu/softmax_kernels.h"
#include "src/ops/softmax_ops.h"

namespace segred::cpu {
namespace {

constexpr int kLanes = 16;
// A row's sum is a sum of block sums (lastdim: blocks of kSumBlock values in 16
// lanes; spatial: blocks of kSumRows rows per column), so its rounding error grows
// like the block count plus the block length, not like D.
constexpr int64_t kSumBlock = 1024;
constexpr int64_t kSumRows = 32;

template <class T, class Bwd>
void lastdim(const SoftmaxProblem& p, const T* g, const T* y, T* gi) {
  using A = acc_t<T>;
  const int64_t D = p.dim_size, rows = p.outer;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* gr = g + r * D;
    const T* yr = y + r * D;
    T* out = gi + r * D;
    A acc = A(0);
    for (int64_t b0 = 0; b0 < D; b0 += kSumBlock) {
      const int64_t b1 = std::min(D, b0 + kSumBlock);
      A lane[kLanes] = {};
      int64_t i = b0;
      for (; i + kLanes <= b1; i += kLanes)
        for (int k = 0; k < kLanes; ++k) lane[k] += Bwd::term(A(load(gr[i + k])), A(load(yr[i + k])));
      for (; i < b1; ++i) lane[0] += Bwd::term(A(load(gr[i])), A(load(yr[i])));
      for (int w = kLanes / 2; w > 0; w /= 2)
        for (int k = 0; k < w; ++k) lane[k] += lane[k + w];
      acc += lane[0];
    }
    for (int64_t j = 0; j < D; ++j) out[j] = store<T>(Bwd::apply(A(load(gr[j])), A(load(yr[j])), acc));
  }
}

template <class T, class Bwd>
void spatial(const Plan& plan, const SoftmaxProblem& p, const T* g, const T* y, T* gi) {
  using A = acc_t<T>;
  const int64_t D = p.dim_size, inner = p.inner, W = plan.chunk;
  const int64_t tiles = (inner + W - 1) / W;
#pragma omp parallel
  {
    std::vector<A> accv(static_cast<size_t>(W)), partv(static_cast<size_t>(W));
    A* __restrict acc = accv.data();
    A* __restrict part = partv.data();
#pragma omp for schedule(static)
    for (int64_t task = 0; task < p.outer * tiles; ++task) {
      const int64_t o = task / tiles, j0 = (task % tiles) * W, w = std::min(W, inner - j0);
      const int64_t base = o * D * inner + j0;
      for (int64_t j = 0; j < w; ++j) acc[j] = A(0);
      for (int64_t d0 = 0; d0 < D; d0 += kSumRows) {
        const int64_t d1 = std::min(D, d0 + kSumRows);
        for (int64_t j = 0; j < w; ++j) part[j] = A(0);
        for (int64_t d = d0; d < d1; ++d) {
          const T* gr = g + base + d * inner;
          const T* yr = y + base + d * inner;
          for (int64_t j = 0; j < w; ++j) part[j] += Bwd::term(A(load(gr[j])), A(load(yr[j])));
        }
        for (int64_t j = 0; j < w; ++j) acc[j] += part[j];
      }
      for (int64_t d = 0; d < D; ++d) {
        const T* gr = g + base + d * inner;
        const T* yr = y + base + d * inner;
        T* out = gi + base + d * inner;
        for (int64_t j = 0; j < w; ++j) out[j] = store<T>(Bwd::apply(A(load(gr[j])), A(load(yr[j])), acc[j]));
      }
    }
  }
}

}  // namespace

void softmax_bwd(const Plan& plan, const SoftmaxProblem& p, const TensorView& grad, const TensorView& output,
                 const TensorView& grad_input) {
  detail::record_launch(plan.path);
  const bool last = plan.path.find(".lastdim.") != std::string_view::npos;
  SEGRED_DISPATCH_FLOAT(grad.dtype, T, [&] {
    const T* gp = grad.ptr<const T>();
    const T* yp = output.ptr<const T>();
    T* op = grad_input.ptr<T>();
    if (p.log) {
      if (last) lastdim<T, ops::LogSoftmaxBwd>(p, gp, yp, op);
      else spatial<T, ops::LogSoftmaxBwd>(plan, p, gp, yp, op);
    } else {
      if (last) lastdim<T, ops::SoftmaxBwd>(p, gp, yp, op);
      else spatial<T, ops::SoftmaxBwd>(plan, p, gp, yp, op);
    }
  });
}

}  // namespace segred::cpu
