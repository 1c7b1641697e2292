// The ragged softmax family on the CPU (include/segred/segment_softmax.h).
//
// Paths: segment_{softmax,log_softmax,logsumexp}.{fwd,bwd}.cpu.i64. One task per
// (row, segment), dynamically scheduled over the cores; a task runs along the
// segment's rows with the inner features (heads) as the contiguous, vectorisable
// loop. Forward: one pass of the online max/sum merge (src/ops/segment_softmax_ops.h),
// then one write pass. Backward: one pass for sum(g*y) / sum(g), one write pass.
// Rows outside every segment get 0 (softmax, log_softmax and every backward).
// Sums run in blocks of kBlockRows rows whose results are merged (an online
// (max, sum) merge forward, an addition backward): one float32 sum over a whole
// long segment stalls (2^26 values of exp(x - m) ~ 0.1: the running sum reaches
// 2^23, whose spacing is 1, and its logsumexp came out 0.11 low).
// Limitation: a single segment is handled by one thread, so one huge segment
// beside tiny ones runs at one core's speed (correct, not balanced).
#include <algorithm>
#include <cmath>
#include <vector>

#include "segred/segment_softmax.h"
#include "segred/trace.h"
#include "src/core/dispatch.h"
#include "src/core/segments.h"
#include "src/cpu/segment_softmax_kernels.h"
#include "src/ops/segment_softmax_ops.h"

namespace segred::cpu {
namespace {

constexpr int64_t kBlockRows = 2048;

template <class T>
void zero_outside(const detail::SegmentLayout& lay, T* out) {
  const int64_t L = lay.L, S = lay.S, inner = lay.inner;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < lay.outer; ++r) {
    const int64_t* o = lay.row(r);
    T* gr = out + r * L * inner;
    std::fill(gr, gr + o[0] * inner, store<T>(acc_t<T>(0)));
    std::fill(gr + o[S] * inner, gr + L * inner, store<T>(acc_t<T>(0)));
  }
}

template <class T>
void forward(SegmentSoftmaxOp op, const detail::SegmentLayout& lay, const T* x, T* out) {
  using A = acc_t<T>;
  const int64_t L = lay.L, S = lay.S, inner = lay.inner;
  const A nan = std::numeric_limits<A>::quiet_NaN();
  if (op != SegmentSoftmaxOp::LogSumExp) zero_outside(lay, out);
#pragma omp parallel
  {
    std::vector<ops::OnlineLse<A>> st(static_cast<size_t>(inner)), blk(static_cast<size_t>(inner));
#pragma omp for schedule(dynamic, 16)
    for (int64_t t = 0; t < lay.outer * S; ++t) {
      const int64_t r = t / S, s = t % S;
      const int64_t b = lay.row(r)[s], n = lay.row(r)[s + 1] - b;
      const T* xs = x + (r * L + b) * inner;
      std::fill(st.begin(), st.end(), ops::OnlineLse<A>{});
      for (int64_t j0 = 0; j0 < n; j0 += kBlockRows) {
        std::fill(blk.begin(), blk.end(), ops::OnlineLse<A>{});
        for (int64_t j = j0; j < std::min(n, j0 + kBlockRows); ++j)
          for (int64_t f = 0; f < inner; ++f) blk[size_t(f)].add(A(load(xs[j * inner + f])));
        for (int64_t f = 0; f < inner; ++f) st[size_t(f)].merge(blk[size_t(f)]);
      }
      if (op == SegmentSoftmaxOp::LogSumExp) {
        T* o = out + t * inner;
        for (int64_t f = 0; f < inner; ++f) o[f] = store<T>(st[size_t(f)].lse());
        continue;
      }
      T* ys = out + (r * L + b) * inner;
      for (int64_t j = 0; j < n; ++j)
        for (int64_t f = 0; f < inner; ++f) {
          const auto& q = st[size_t(f)];
          const A v = A(load(xs[j * inner + f]));
          A y;
          if (q.softmax_nan()) y = nan;
          else if (op == SegmentSoftmaxOp::Softmax) y = std::exp(v - q.m) / q.s;
          else y = v - q.m - std::log(q.s);
          ys[j * inner + f] = store<T>(y);
        }
    }
  }
}

template <class T>
void backward(SegmentSoftmaxOp op, const detail::SegmentLayout& lay, const T* g, const T* y, const T* x, T* gi) {
  using A = acc_t<T>;
  const int64_t L = lay.L, S = lay.S, inner = lay.inner;
  zero_outside(lay, gi);
#pragma omp parallel
  {
    std::vector<A> sum(static_cast<size_t>(inner)), blk(static_cast<size_t>(inner));
#pragma omp for schedule(dynamic, 16)
    for (int64_t t = 0; t < lay.outer * S; ++t) {
      const int64_t r = t / S, s = t % S;
      const int64_t b = lay.row(r)[s], n = lay.row(r)[s + 1] - b;
      const int64_t base = (r * L + b) * inner;
      T* out = gi + base;
      if (op == SegmentSoftmaxOp::LogSumExp) {  // g and y are per segment; x per element
        const T* gs = g + t * inner;
        const T* ls = y + t * inner;
        for (int64_t j = 0; j < n; ++j)
          for (int64_t f = 0; f < inner; ++f)
            out[j * inner + f] =
                store<T>(A(load(gs[f])) * std::exp(A(load(x[base + j * inner + f])) - A(load(ls[f]))));
        continue;
      }
      const T* gs = g + base;
      const T* ys = y + base;
      std::fill(sum.begin(), sum.end(), A(0));
      for (int64_t j0 = 0; j0 < n; j0 += kBlockRows) {
        std::fill(blk.begin(), blk.end(), A(0));
        for (int64_t j = j0; j < std::min(n, j0 + kBlockRows); ++j)
          for (int64_t f = 0; f < inner; ++f) {
            const A gv = A(load(gs[j * inner + f]));
            blk[size_t(f)] += op == SegmentSoftmaxOp::Softmax ? gv * A(load(ys[j * inner + f])) : gv;
          }
        for (int64_t f = 0; f < inner; ++f) sum[size_t(f)] += blk[size_t(f)];
      }
      for (int64_t j = 0; j < n; ++j)
        for (int64_t f = 0; f < inner; ++f) {
          const A gv = A(load(gs[j * inner + f])), yv = A(load(ys[j * inner + f]));
          out[j * inner + f] = store<T>(op == SegmentSoftmaxOp::Softmax ? yv * (gv - sum[size_t(f)])
                                                                         : gv - std::exp(yv) * sum[size_t(f)]);
        }
    }
  }
}

}  // namespace

void segment_softmax_fwd(const Plan& plan, SegmentSoftmaxOp op, const detail::SegmentLayout& lay,
                         const TensorView& data, const TensorView& out) {
  detail::record_launch(plan.path);
  SEGRED_DISPATCH_FLOAT(data.dtype, T, [&] { forward<T>(op, lay, data.ptr<const T>(), out.ptr<T>()); });
}

void segment_softmax_bwd(const Plan& plan, SegmentSoftmaxOp op, const detail::SegmentLayout& lay,
                         const TensorView& grad, const TensorView& output, const TensorView& data,
                         const TensorView& grad_input) {
  detail::record_launch(plan.path);
  SEGRED_DISPATCH_FLOAT(grad.dtype, T, [&] {
    backward<T>(op, lay, grad.ptr<const T>(), output.ptr<const T>(), data.ptr<const T>(), grad_input.ptr<T>());
  });
}

}  // namespace segred::cpu
