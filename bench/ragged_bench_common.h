// What the ragged softmax benchmarks share (bench/cuda_segment_softmax_bench.cu,
// session 43 prototype, now src/cuda/segment_softmax_lanes.cuh): GAT-like node in-degrees from a power law, and the
// comparison of a result with the CPU backend's.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "segred/segred.h"

// Node in-degrees summing to exactly E (bench/cuda_segment_softmax_bench.py's
// power_law_degrees): floor(x_m (1 + Lomax(a))) with a = alpha - 1, x_m set for the
// mean, clipped to [1, max_deg], a fraction of isolated nodes, the last node cut so
// the sum is E, shuffled.
inline std::vector<int64_t> power_law_degrees(int64_t E, uint64_t seed, double alpha = 2.5, double mean = 10.0,
                                              int64_t max_deg = 100000, double isolated = 0.02) {
  const double a = alpha - 1.0, xm = mean * (a - 1.0) / a;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<int64_t> deg;
  int64_t sum = 0;
  while (sum < E) {
    const double x = xm * std::pow(1.0 - u(rng), -1.0 / a);  // x_m (1 + Lomax(a))
    int64_t d = std::clamp<int64_t>(int64_t(std::floor(x)), 1, max_deg);
    if (u(rng) < isolated) d = 0;
    deg.push_back(d);
    sum += d;
  }
  deg.back() -= sum - E;
  std::shuffle(deg.begin(), deg.end(), rng);
  return deg;
}

inline const char* dname(segred::DType t) { return t == segred::DType::Float32 ? "float32" : "bfloat16"; }

// max |a - b| of two host tensors of one float dtype, NaN on one side only = inf.
inline double max_abs_diff(const segred::Tensor& a, const segred::Tensor& b) {
  double m = 0;
  const int64_t n = a.numel();
  for (int64_t i = 0; i < n; ++i) {
    double u, v;
    if (a.dtype() == segred::DType::Float32) u = a.ptr<float>()[i], v = b.ptr<float>()[i];
    else
      u = double(segred::to_float(a.ptr<segred::bfloat16_t>()[i])),
      v = double(segred::to_float(b.ptr<segred::bfloat16_t>()[i]));
    if (std::isnan(u) && std::isnan(v)) continue;
    const double d = std::fabs(u - v);
    m = std::isnan(d) ? INFINITY : std::max(m, d);
  }
  return m;
}
