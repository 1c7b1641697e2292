// Test inputs and checks of the ragged softmax suites (the CPU emulation of the
// CUDA block algorithm, tests/cpp/test_segment_softmax_tiles.cpp, and the GPU
// tests, tests/cpp/test_cuda_segment_softmax.cpp): random ragged layouts with
// ghosts (offsets not starting at 0, rows after the last segment), empty
// segments, segments of one, long segments and special values, the float64
// reference (src/reference/segment_softmax_ref.h) of every kind, and one
// tolerance rule.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "segred/segred.h"
#include "src/core/segment_softmax_geometry.h"
#include "src/reference/segment_softmax_ref.h"

namespace segred::testing::ss {

using detail::SsKind;

inline const char* kind_name(SsKind k) {
  static const char* names[] = {"softmax.fwd", "log_softmax.fwd", "logsumexp.fwd",
                                "softmax.bwd", "log_softmax.bwd", "logsumexp.bwd"};
  return names[int(k)];
}
inline const char* ref_op(SsKind k) {
  const int o = int(k) % 3;
  return o == 0 ? "softmax" : o == 1 ? "log_softmax" : "logsumexp";
}
inline SegmentSoftmaxOp op_of(SsKind k) { return SegmentSoftmaxOp(int(k) % 3); }
inline bool is_bwd(SsKind k) { return int(k) >= 3; }
constexpr SsKind kKinds[] = {SsKind::SoftmaxFwd, SsKind::LogSoftmaxFwd, SsKind::LseFwd,
                             SsKind::SoftmaxBwd, SsKind::LogSoftmaxBwd, SsKind::LseBwd};

// A layout: data [outer, L, F], per-row offsets (outer * (S + 1), valid).
struct Case {
  std::string name;
  int64_t outer = 1, L = 0, F = 1, S = 0;
  std::vector<int64_t> off;
  bool from_lengths() const {  // rows start at 0 and end at L: expressible as lengths
    for (int64_t r = 0; r < outer; ++r)
      if (off[size_t(r * (S + 1))] != 0 || off[size_t(r * (S + 1) + S)] != L) return false;
    return true;
  }
  reference::Problem problem() const { return {outer, L, F, S, off, std::nullopt}; }
  std::vector<int64_t> lengths() const {
    std::vector<int64_t> l;
    for (int64_t r = 0; r < outer; ++r)
      for (int64_t s = 0; s < S; ++s) l.push_back(off[size_t(r * (S + 1) + s + 1)] - off[size_t(r * (S + 1) + s)]);
    return l;
  }
};

// Segment lengths of one row by style: "mixed" (zeros, ones, short, a few of
// hundreds), "ones", "long" (ones around one long segment), "uniform".
inline std::vector<int64_t> row_lengths(std::mt19937_64& rng, int64_t S, const std::string& style, int64_t long_len) {
  std::vector<int64_t> l(static_cast<size_t>(S));
  std::uniform_int_distribution<int> pct(0, 99);
  for (int64_t s = 0; s < S; ++s) {
    if (style == "ones") {
      l[size_t(s)] = 1;
    } else if (style == "long") {
      l[size_t(s)] = s == S / 2 ? long_len : (s % 7 == 3 ? 0 : 1);
    } else if (style == "uniform") {
      l[size_t(s)] = 8;
    } else {
      const int u = pct(rng);
      l[size_t(s)] = u < 15 ? 0 : u < 40 ? 1 : u < 90 ? 2 + u % 23 : 50 + (u * 37) % 400;
    }
  }
  return l;
}

// `ghosts`: rows before the first and after the last segment (offsets form only).
inline Case make_case(std::mt19937_64& rng, int64_t outer, int64_t S, int64_t F, const std::string& style,
                      bool ghosts, int64_t long_len = 3000) {
  Case c;
  c.name = style + (ghosts ? "+ghosts" : "") + " outer=" + std::to_string(outer) + " S=" + std::to_string(S) +
           " F=" + std::to_string(F);
  c.outer = outer;
  c.S = S;
  c.F = F;
  std::vector<std::vector<int64_t>> rows;
  int64_t L = 0;
  std::uniform_int_distribution<int64_t> pad(0, 40);
  std::vector<int64_t> leads;
  for (int64_t r = 0; r < outer; ++r) {
    rows.push_back(row_lengths(rng, S, style, long_len));
    int64_t tot = 0;
    for (auto v : rows.back()) tot += v;
    const int64_t lead = ghosts ? pad(rng) : 0;
    leads.push_back(lead);
    L = std::max(L, lead + tot + (ghosts ? pad(rng) : 0));
  }
  if (!ghosts) {  // every row must sum to L: stretch the last segment of shorter rows
    for (auto& l : rows) {
      int64_t tot = 0;
      for (auto v : l) tot += v;
      if (S > 0) l.back() += L - tot;
    }
  }
  c.L = L;
  for (int64_t r = 0; r < outer; ++r) {
    int64_t o = leads[size_t(r)];
    c.off.push_back(o);
    for (auto v : rows[size_t(r)]) c.off.push_back(o += v);
  }
  return c;
}

// Many short segments (lengths 0-14, mostly 1-3: several per chunk of the CUDA
// tiles, more than a lane keeps) around one of 300 rows (crossing chunk and tile
// edges), `outer` rows; `ghosts`: 3 rows before and 5 after the segments.
inline Case short_segments_case(std::mt19937_64& rng, int64_t outer, int64_t S, int64_t F, bool ghosts) {
  static const int64_t lens[] = {0, 1, 1, 2, 1, 3, 1, 2, 5, 9, 1, 14, 0, 1, 40};
  std::uniform_int_distribution<int> pick(0, int(sizeof(lens) / sizeof(lens[0])) - 1);
  Case c;
  c.outer = outer;
  c.S = S;
  c.F = F;
  c.name = std::string("short segments") + (ghosts ? "+ghosts" : "") + " outer=" + std::to_string(outer) +
           " S=" + std::to_string(S) + " F=" + std::to_string(F);
  std::vector<std::vector<int64_t>> rows(static_cast<size_t>(outer));
  int64_t L = 0;
  for (auto& l : rows) {
    int64_t tot = ghosts ? 3 : 0;
    for (int64_t s = 0; s < S; ++s) tot += l.emplace_back(s == S / 2 ? 300 : lens[size_t(pick(rng))]);
    L = std::max(L, tot + (ghosts ? 5 : 0));
  }
  for (auto& l : rows) {
    int64_t o = ghosts ? 3 : 0, tot = 0;
    for (auto v : l) tot += v;
    if (!ghosts && S > 0) l.back() += L - tot;  // rows end at L
    c.off.push_back(o);
    for (auto v : l) c.off.push_back(o += v);
  }
  c.L = L;
  return c;
}

// Values: uniform in [-4, 4]; `specials` puts, per feature f < 6 of the first
// row, one segment of each kind (all -inf, a NaN, a +inf, two +inf, -inf beside
// finite values, a huge spread), where segments with >= 2 rows exist.
// `dense`: instead, every (segment, feature) of every outer row draws one of those
// kinds or none (a segment of one row included: a lone -inf, NaN or +inf).
inline std::vector<double> make_data(std::mt19937_64& rng, const Case& c, bool specials, bool dense = false) {
  const double inf = std::numeric_limits<double>::infinity();
  std::uniform_real_distribution<double> u(-4, 4);
  std::vector<double> x(size_t(c.outer * c.L * c.F));
  for (auto& v : x) v = u(rng);
  if (dense) {
    std::uniform_int_distribution<int> kind(0, 9);
    for (int64_t r = 0; r < c.outer; ++r)
      for (int64_t s = 0; s < c.S; ++s)
        for (int64_t f = 0; f < c.F; ++f) {
          const int64_t b = c.off[size_t(r * (c.S + 1) + s)], e = c.off[size_t(r * (c.S + 1) + s + 1)];
          if (e <= b) continue;
          auto at = [&](int64_t j) -> double& { return x[size_t((r * c.L + j) * c.F + f)]; };
          switch (kind(rng)) {
            case 0: for (int64_t j = b; j < e; ++j) at(j) = -inf; break;
            case 1: at(b + (e - b) / 2) = std::nan(""); break;
            case 2: at(e - 1) = inf; break;
            case 3: at(b) = inf; at(e - 1) = inf; break;
            case 4: for (int64_t j = b; j < e; j += 2) at(j) = -inf; break;
            case 5: at(b) = 60.0; at(e - 1) = -60.0; break;
            default: break;
          }
        }
    return x;
  }
  if (!specials) return x;
  int f = 0;
  for (int64_t s = 0; s < c.S && f < 6 && f < c.F; ++s) {
    const int64_t b = c.off[size_t(s)], e = c.off[size_t(s + 1)];
    if (e - b < 2) continue;
    auto at = [&](int64_t j) -> double& { return x[size_t(j * c.F + f)]; };
    switch (f) {
      case 0: for (int64_t j = b; j < e; ++j) at(j) = -inf; break;
      case 1: at(b + (e - b) / 2) = std::nan(""); break;
      case 2: at(e - 1) = inf; break;
      case 3: at(b) = inf; at(e - 1) = inf; break;
      case 4: for (int64_t j = b; j < e; j += 2) at(j) = -inf; break;
      default: at(b) = 60.0; at(e - 1) = -60.0; break;
    }
    ++f;
  }
  return x;
}

// Upstream gradients of every sign, zeros and values that are not 1.
inline std::vector<double> make_grad(std::mt19937_64& rng, size_t n) {
  std::uniform_real_distribution<double> u(0.5, 2.5);
  const double sign[] = {-1.0, 1.0, 0.0, -1.0, 1.0};
  std::vector<double> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = sign[i % 5] * u(rng);
  return g;
}

// The inputs of one kind and its expected output, all already rounded to the
// storage type by `round`.
struct Inputs {
  std::vector<double> in0, in1, seg0, seg1;  // staged arrays; logsumexp backward: g, y per segment
  std::vector<double> want;
  std::vector<double> mag;  // per output element: the magnitude its rounding error scales with
  std::vector<double> x;    // forward input (for the log_softmax tolerance)
};

template <class Round>
Inputs make_inputs(SsKind k, const Case& c, std::mt19937_64& rng, bool specials, Round round, bool dense = false) {
  Inputs in;
  const auto p = c.problem();
  std::vector<double> x = make_data(rng, c, specials, dense);
  for (auto& v : x) v = round(v);
  in.x = x;
  const std::string op = ref_op(k);
  if (!is_bwd(k)) {
    in.in0 = x;
    in.want = reference::segment_softmax_forward(p, x, op);
    in.mag.resize(in.want.size());
    for (size_t i = 0; i < in.want.size(); ++i)
      in.mag[i] = 1 + std::fabs(in.want[i]) + (op == "log_softmax" && std::isfinite(x[i]) ? std::fabs(x[i]) : 0);
    return in;
  }
  std::vector<double> y = reference::segment_softmax_forward(p, x, op);
  for (auto& v : y) v = round(v);
  std::vector<double> g = make_grad(rng, y.size());
  for (auto& v : g) v = round(v);
  in.want = reference::segment_softmax_backward(p, g, y, x, op);
  in.mag.assign(in.want.size(), 1.0);
  if (op == "logsumexp") {
    in.in0 = x;
    in.seg0 = g;
    in.seg1 = y;
    for (size_t i = 0; i < in.want.size(); ++i) in.mag[i] += std::fabs(in.want[i]);
    return in;
  }
  in.in0 = g;
  in.in1 = y;
  // |gI| scale: |g| + (softmax) |y| sum|g y| or (log_softmax) exp(y) sum|g|.
  for (int64_t r = 0; r < c.outer; ++r)
    for (int64_t s = 0; s < c.S; ++s)
      for (int64_t f = 0; f < c.F; ++f) {
        const int64_t b = p.seg_begin(r, s), e = p.seg_end(r, s);
        double sum = 0;
        for (int64_t j = b; j < e; ++j) {
          const size_t i = size_t((r * c.L + j) * c.F + f);
          sum += op == "softmax" ? std::fabs(g[i] * y[i]) : std::fabs(g[i]);
        }
        for (int64_t j = b; j < e; ++j) {
          const size_t i = size_t((r * c.L + j) * c.F + f);
          in.mag[i] = 1 + std::fabs(g[i]) + (op == "softmax" ? std::fabs(y[i]) * sum : std::exp(y[i]) * sum);
        }
      }
  return in;
}

// got vs want: NaN meets NaN, infinities are equal, finite values within
// slack * (4 u_out |want| + k_acc * mag) (k_acc: 1e-5 for float32 accumulation,
// 1e-11 for float64). `u_out`: unit roundoff of the stored type.
inline ::testing::AssertionResult close(const std::vector<double>& got, const std::vector<double>& want,
                                        const std::vector<double>& mag, double u_out, bool f64, double slack = 1) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  const double k_acc = f64 ? 1e-11 : 1e-5;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    if (std::isnan(w) || std::isnan(g)) {
      if (std::isnan(w) && std::isnan(g)) continue;
      return ::testing::AssertionFailure() << "element " << i << ": got " << g << ", want " << w;
    }
    if (std::isinf(w) || std::isinf(g)) {
      if (g == w) continue;
      return ::testing::AssertionFailure() << "element " << i << ": got " << g << ", want " << w;
    }
    const double tol = slack * (4 * u_out * std::fabs(w) + k_acc * mag[i]);
    if (!(std::fabs(g - w) <= tol))
      return ::testing::AssertionFailure() << "element " << i << ": got " << g << ", want " << w << " (tol " << tol
                                           << ")";
  }
  return ::testing::AssertionSuccess();
}
inline ::testing::AssertionResult close(const std::vector<double>& got, const Inputs& in, double u_out, bool f64) {
  return close(got, in.want, in.mag, u_out, f64);
}

// The four data types of the typed suites, named by their dtype.
using FloatTypes = ::testing::Types<float, double, half_t, bfloat16_t>;
struct DtypeName {
  template <class T> static std::string GetName(int) { return std::string(dtype_name(dtype_of<T>())); }
};

inline double unit_out(DType t) {
  return t == DType::Float64 ? std::ldexp(1.0, -53)
         : t == DType::Float32 ? std::ldexp(1.0, -24)
         : t == DType::Float16 ? std::ldexp(1.0, -11)
                               : std::ldexp(1.0, -8);
}

}  // namespace segred::testing::ss
