// float64 reference of the ragged softmax family: the plainest loops stating
// include/segred/segment_softmax.h, written without the online merge (max first,
// then the sum), independently of the kernels. Used by tests and `segred check`.
#pragma once
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "src/reference/segment_reduce_ref.h"

namespace segred::reference {

// op: "softmax", "log_softmax", "logsumexp".
inline std::vector<double> segment_softmax_forward(const Problem& p, const std::vector<double>& x,
                                                   const std::string& op) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  const bool lse = op == "logsumexp";
  std::vector<double> out(lse ? size_t(p.outer * p.S * p.inner) : x.size(), 0.0);
  for (int64_t r = 0; r < p.outer; ++r)
    for (int64_t s = 0; s < p.S; ++s)
      for (int64_t f = 0; f < p.inner; ++f) {
        const int64_t b = p.seg_begin(r, s), e = p.seg_end(r, s);
        auto X = [&](int64_t j) { return x[size_t((r * p.L + j) * p.inner + f)]; };
        bool any_nan = false, any_pinf = false;
        double m = -inf;
        for (int64_t j = b; j < e; ++j) {
          any_nan |= std::isnan(X(j));
          any_pinf |= X(j) == inf;
          if (!std::isnan(X(j))) m = std::max(m, X(j));
        }
        if (lse) {
          double v;
          if (any_nan) v = nan;
          else if (any_pinf) v = inf;
          else if (m == -inf) v = -inf;  // empty or all -inf
          else {
            double sum = 0;
            for (int64_t j = b; j < e; ++j) sum += std::exp(X(j) - m);
            v = m + std::log(sum);
          }
          out[size_t((r * p.S + s) * p.inner + f)] = v;
          continue;
        }
        const bool nan_seg = any_nan || any_pinf || m == -inf;
        double sum = 0;
        if (!nan_seg)
          for (int64_t j = b; j < e; ++j) sum += std::exp(X(j) - m);
        for (int64_t j = b; j < e; ++j) {
          double v = nan;
          if (!nan_seg) v = op == "softmax" ? std::exp(X(j) - m) / sum : X(j) - m - std::log(sum);
          out[size_t((r * p.L + j) * p.inner + f)] = v;
        }
      }
  return out;
}

// grad/output have the forward result's shape; x is needed for logsumexp only.
inline std::vector<double> segment_softmax_backward(const Problem& p, const std::vector<double>& grad,
                                                    const std::vector<double>& out, const std::vector<double>& x,
                                                    const std::string& op) {
  std::vector<double> gi(size_t(p.outer * p.L * p.inner), 0.0);
  for (int64_t r = 0; r < p.outer; ++r)
    for (int64_t s = 0; s < p.S; ++s)
      for (int64_t f = 0; f < p.inner; ++f) {
        const int64_t b = p.seg_begin(r, s), e = p.seg_end(r, s);
        auto at = [&](int64_t j) { return size_t((r * p.L + j) * p.inner + f); };
        if (op == "logsumexp") {
          const size_t o = size_t((r * p.S + s) * p.inner + f);
          for (int64_t j = b; j < e; ++j) gi[at(j)] = grad[o] * std::exp(x[at(j)] - out[o]);
          continue;
        }
        double sum = 0;
        for (int64_t j = b; j < e; ++j) sum += op == "softmax" ? grad[at(j)] * out[at(j)] : grad[at(j)];
        for (int64_t j = b; j < e; ++j)
          gi[at(j)] = op == "softmax" ? out[at(j)] * (grad[at(j)] - sum) : grad[at(j)] - std::exp(out[at(j)]) * sum;
      }
  return gi;
}

}  // namespace segred::reference
