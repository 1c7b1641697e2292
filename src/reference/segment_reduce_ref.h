// The float64 reference for segment_reduce and its backward: the plainest loops
// that state SEMANTICS.md, written independently of the kernels (no shared
// functors, no work split). Used by the GoogleTest suite and by `segred check`.
// Inputs are valid, contiguous [outer, L, inner] arrays and per-row offsets.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace segred::reference {

struct Problem {
  int64_t outer = 1, L = 0, inner = 1, S = 0;
  std::vector<int64_t> offsets;  // outer * (S + 1), valid
  std::optional<double> initial;
  int64_t seg_begin(int64_t r, int64_t s) const { return offsets[size_t(r * (S + 1) + s)]; }
  int64_t seg_end(int64_t r, int64_t s) const { return offsets[size_t(r * (S + 1) + s + 1)]; }
};

inline std::vector<int64_t> offsets_from_lengths(const std::vector<int64_t>& lengths, int64_t outer, int64_t S) {
  std::vector<int64_t> o;
  for (int64_t r = 0; r < outer; ++r) {
    int64_t acc = 0;
    o.push_back(0);
    for (int64_t s = 0; s < S; ++s) o.push_back(acc += lengths[size_t(r * S + s)]);
  }
  return o;
}

// reduce: "sum" "mean" "max" "min" "prod".
inline std::vector<double> forward(const Problem& p, const std::vector<double>& x, const std::string& reduce) {
  std::vector<double> out(size_t(p.outer * p.S * p.inner));
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t r = 0; r < p.outer; ++r)
    for (int64_t s = 0; s < p.S; ++s)
      for (int64_t f = 0; f < p.inner; ++f) {
        const int64_t b = p.seg_begin(r, s), e = p.seg_end(r, s);
        double v;
        if (reduce == "sum" || reduce == "mean") v = 0;
        else if (reduce == "prod") v = 1;
        else if (reduce == "max") v = -inf;
        else v = inf;
        if (p.initial) v = *p.initial;
        bool nan = std::isnan(v);
        for (int64_t j = b; j < e; ++j) {
          const double xj = x[size_t((r * p.L + j) * p.inner + f)];
          if (reduce == "sum" || reduce == "mean") v += xj;
          else if (reduce == "prod") v *= xj;
          else if (std::isnan(xj)) nan = true;
          else if (reduce == "max") v = std::max(v, xj);
          else v = std::min(v, xj);
        }
        if ((reduce == "max" || reduce == "min") && nan) v = std::nan("");
        if (reduce == "mean") {
          const int64_t n = e - b;
          v = n > 0 ? v / double(n) : (p.initial ? *p.initial : std::nan(""));
        }
        out[size_t((r * p.S + s) * p.inner + f)] = v;
      }
  return out;
}

// tie: "split" "first" "last". `out` is the forward output the gradient refers to.
inline std::vector<double> backward(const Problem& p, const std::vector<double>& grad, const std::vector<double>& out,
                                    const std::vector<double>& x, const std::string& reduce,
                                    const std::string& tie = "split") {
  std::vector<double> gi(x.size(), 0.0);
  for (int64_t r = 0; r < p.outer; ++r)
    for (int64_t s = 0; s < p.S; ++s)
      for (int64_t f = 0; f < p.inner; ++f) {
        const int64_t b = p.seg_begin(r, s), e = p.seg_end(r, s), n = e - b;
        const size_t oi = size_t((r * p.S + s) * p.inner + f);
        const double g = grad[oi], y = out[oi];
        auto X = [&](int64_t j) { return x[size_t((r * p.L + j) * p.inner + f)]; };
        auto GI = [&](int64_t j) -> double& { return gi[size_t((r * p.L + j) * p.inner + f)]; };
        if (reduce == "sum") {
          for (int64_t j = b; j < e; ++j) GI(j) = g;
        } else if (reduce == "mean") {
          for (int64_t j = b; j < e; ++j) GI(j) = g / double(n);
        } else if (reduce == "prod") {
          const double start = p.initial ? *p.initial : 1.0;
          for (int64_t j = b; j < e; ++j) {  // O(n^2) on purpose: the definition
            double prod = start;
            for (int64_t k = b; k < e; ++k)
              if (k != j) prod *= X(k);
            GI(j) = g * prod;
          }
        } else {
          std::vector<int64_t> m;
          for (int64_t j = b; j < e; ++j)
            if (std::isnan(X(j)) || X(j) == y) m.push_back(j);
          if (m.empty()) continue;
          if (tie == "split")
            for (int64_t j : m) GI(j) = g / double(m.size());
          else if (tie == "first")
            GI(m.front()) = g;
          else
            GI(m.back()) = g;
        }
      }
  return gi;
}

}  // namespace segred::reference
