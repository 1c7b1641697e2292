// Uniform random inputs in [lo, hi) for the CPU softmax benchmarks (any float
// dtype), filled in parallel with one generator per OpenMP thread, so the pages
// are first-touched by the threads that will read them.
#pragma once
#include <omp.h>

#include <cstdint>
#include <random>

#include "segred/segred.h"

namespace segred::bench {

inline void fill_random(const Tensor& t, uint64_t seed, float lo, float hi) {
  const int64_t n = t.numel();
#pragma omp parallel
  {
    std::mt19937_64 rng(seed + uint64_t(omp_get_thread_num()) * 7919);
    std::uniform_real_distribution<float> u(lo, hi);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const float v = u(rng);
      switch (t.dtype()) {
        case DType::Float32: t.ptr<float>()[i] = v; break;
        case DType::Float16: t.ptr<half_t>()[i] = to_half(v); break;
        case DType::BFloat16: t.ptr<bfloat16_t>()[i] = to_bfloat16(v); break;
        default: t.ptr<double>()[i] = v; break;
      }
    }
  }
}

}  // namespace segred::bench
