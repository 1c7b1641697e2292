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
#include "src/cpu/softmax_kernels.h"
#include "src/ops/softmax_ops.h"

namespace segred::cpu {
namespace {

constexpr int kLanes = 16;
constexpr int64_t kL1Block = 16 * 1024;  // bytes of input per statistics block (spatial)

template <class T> using A_t = acc_t<T>;

// max of x[0, n), NaN wins (ops::MaxTag); -inf for n == 0.
template <class T>
A_t<T> block_max(const T* x, int64_t n) {
  using A = A_t<T>;
  A lane[kLanes];
  for (auto& l : lane) l = ops::neg_inf<A>();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) lane[k] = ops::MaxTag::combine(lane[k], A(load(x[i + k])));
  for (; i < n; ++i) lane[0] = ops::MaxTag::combine(lane[0], A(load(x[i])));
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int k = 0; k < w; ++k) lane[k] = ops::MaxTag::combine(lane[k], lane[k + w]);
  return lane[0];
}

// sum of exp(x - base) over x[0, n), in a fixed lane order.
template <class T>
A_t<T> block_sum_exp(const T* x, int64_t n, A_t<T> base) {
  using A = A_t<T>;
  A lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) lane[k] += ops::exp_acc(A(load(x[i + k])) - base);
  for (; i < n; ++i) lane[0] += ops::exp_acc(A(load(x[i])) - base);
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int k = 0; k < w; ++k) lane[k] += lane[k + w];
  return lane[0];
}

template <class T, class Epi>
void lastdim(const Plan& plan, const SoftmaxProblem& p, const T* x, T* y) {
  using A = A_t<T>;
  const int64_t D = p.dim_size, rows = p.outer, C = plan.chunk;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * D;
    T* yr = y + r * D;
    A m = ops::neg_inf<A>(), s = A(0);
    for (int64_t c0 = 0; c0 < D; c0 += C) {
      const int64_t n = std::min(C, D - c0);
      const A mn = ops::MaxTag::combine(m, block_max(xr + c0, n));
      s *= ops::rescale(m, mn);
      m = mn;
      s += block_sum_exp(xr + c0, n, ops::sum_base(m));
    }
    const A base = ops::row_base(m), k = Epi::row_const(s);
    for (int64_t i = 0; i < D; ++i) yr[i] = store<T>(Epi::apply(A(load(xr[i])), base, k));
  }
}

template <class T, class Epi>
void spatial(const Plan& plan, const SoftmaxProblem& p, const T* x, T* y) {
  using A = A_t<T>;
  const int64_t D = p.dim_size, inner = p.inner, W = plan.chunk;
  const int64_t tiles = (inner + W - 1) / W;
  const int64_t R = std::max<int64_t>(1, kL1Block / (W * int64_t(sizeof(T))));
#pragma omp parallel
  {
    std::vector<A> mv(static_cast<size_t>(W)), sv(static_cast<size_t>(W)), tv(static_cast<size_t>(W)),
        pv(static_cast<size_t>(W));
    A* __restrict m = mv.data();
    A* __restrict s = sv.data();
    A* __restrict t = tv.data();
    A* __restrict part = pv.data();
#pragma omp for schedule(static)
    for (int64_t task = 0; task < p.outer * tiles; ++task) {
      const int64_t o = task / tiles, j0 = (task % tiles) * W, w = std::min(W, inner - j0);
      const T* xt = x + o * D * inner + j0;
      T* yt = y + o * D * inner + j0;
      for (int64_t j = 0; j < w; ++j) {
        m[j] = ops::neg_inf<A>();
        s[j] = A(0);
      }
      for (int64_t d0 = 0; d0 < D; d0 += R) {
        const int64_t d1 = std::min(D, d0 + R);
        for (int64_t j = 0; j < w; ++j) t[j] = ops::neg_inf<A>();
        for (int64_t d = d0; d < d1; ++d) {
          const T* row = xt + d * inner;
          for (int64_t j = 0; j < w; ++j) t[j] = ops::MaxTag::combine(t[j], A(load(row[j])));
        }
        for (int64_t j = 0; j < w; ++j) {
          const A mn = ops::MaxTag::combine(m[j], t[j]);
          s[j] *= ops::rescale(m[j], mn);
          m[j] = mn;
          t[j] = ops::sum_base(mn);
          part[j] = A(0);
        }
        // The block's sums apart, then added: a long column is summed as a sum of
        // block sums (error ~ (R + D / R) ulp rather than D ulp).
        for (int64_t d = d0; d < d1; ++d) {
          const T* row = xt + d * inner;
          for (int64_t j = 0; j < w; ++j) part[j] += ops::exp_acc(A(load(row[j])) - t[j]);
        }
        for (int64_t j = 0; j < w; ++j) s[j] += part[j];
      }
      for (int64_t j = 0; j < w; ++j) {
        m[j] = ops::row_base(m[j]);
        s[j] = Epi::row_const(s[j]);
      }
      for (int64_t d = 0; d < D; ++d) {
        const T* row = xt + d * inner;
        T* out = yt + d * inner;
        for (int64_t j = 0; j < w; ++j) out[j] = store<T>(Epi::apply(A(load(row[j])), m[j], s[j]));
      }
    }
  }
}

}  // namespace

void softmax_fwd(const Plan& plan, const SoftmaxProblem& p, const TensorView& x, const TensorView& out) {
  detail::record_launch(plan.path);
  const bool last = plan.path.find(".lastdim.") != std::string_view::npos;
  SEGRED_DISPATCH_FLOAT(x.dtype, T, [&] {
    const T* xp = x.ptr<const T>();
    T* yp = out.ptr<T>();
    if (p.log) {
      if (last) lastdim<T, ops::LogSoftmaxFwd>(plan, p, xp, yp);
      else spatial<T, ops::LogSoftmaxFwd>(plan, p, xp, yp);
    } else {
      if (last) lastdim<T, ops::SoftmaxFwd>(plan, p, xp, yp);
      else spatial<T, ops::SoftmaxFwd>(plan, p, xp, yp);
    }
  });
}

}  // namespace segred::cpu
