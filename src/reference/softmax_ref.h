// The float64 reference for the softmax family: the plainest loops that state
// SEMANTICS.md ("softmax family"), written independently of the kernels (no
// shared functors, no blocks, no online rescaling; the NaN rule as explicit
// tests). Used by the GoogleTest suite and by `segred check`.
// Arrays are contiguous [outer, D, inner].
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace segred::reference {

struct SoftmaxShape {
  int64_t outer = 1, D = 1, inner = 1;
  size_t at(int64_t o, int64_t d, int64_t i) const { return size_t((o * D + d) * inner + i); }
  size_t size() const { return size_t(outer * D * inner); }
};

// softmax (log = false) or log_softmax (log = true) along D.
inline std::vector<double> softmax_forward(const SoftmaxShape& s, const std::vector<double>& x, bool log) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> y(s.size());
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t i = 0; i < s.inner; ++i) {
      // The rule first: any NaN or +inf, or no value above -inf, makes the row NaN.
      bool bad = true;
      for (int64_t d = 0; d < s.D; ++d) {
        const double v = x[s.at(o, d, i)];
        if (std::isnan(v) || v == INFINITY) {
          bad = true;
          break;
        }
        if (v != -INFINITY) bad = false;
      }
      if (bad) {
        for (int64_t d = 0; d < s.D; ++d) y[s.at(o, d, i)] = nan;
        continue;
      }
      double m = -INFINITY;
      for (int64_t d = 0; d < s.D; ++d) m = std::max(m, x[s.at(o, d, i)]);
      double sum = 0;
      for (int64_t d = 0; d < s.D; ++d) sum += std::exp(x[s.at(o, d, i)] - m);
      for (int64_t d = 0; d < s.D; ++d) {
        const double v = x[s.at(o, d, i)];
        y[s.at(o, d, i)] = log ? (v - m) - std::log(sum) : std::exp(v - m) / sum;
      }
    }
  return y;
}

// softmax: gI = y * (g - sum(g * y)); log_softmax: gI = g - exp(y) * sum(g).
inline std::vector<double> softmax_backward(const SoftmaxShape& s, const std::vector<double>& g,
                                            const std::vector<double>& y, bool log) {
  std::vector<double> gi(s.size());
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t i = 0; i < s.inner; ++i) {
      double acc = 0;
      for (int64_t d = 0; d < s.D; ++d) acc += log ? g[s.at(o, d, i)] : g[s.at(o, d, i)] * y[s.at(o, d, i)];
      for (int64_t d = 0; d < s.D; ++d) {
        const double gv = g[s.at(o, d, i)], yv = y[s.at(o, d, i)];
        gi[s.at(o, d, i)] = log ? gv - std::exp(yv) * acc : yv * (gv - acc);
      }
    }
  return gi;
}

}  // namespace segred::reference
