// Scaffolding shared by the CUDA softmax benchmarks (cuda_softmax_bench.cu,
// cuda_spatial_staged_bench.cu): error check, deterministic input fill, max |a - b|,
// and the median of event-timed calls.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/cuda_check.cuh"

// n values in [lo, hi) from a hash of the index (dt: 0 float32, 2 float16, else bfloat16).
__global__ void init_kernel(void* p, int64_t n, int dt, uint32_t seed, float lo, float hi) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ uint32_t(i >> 32) * 40503u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const float u = lo + (hi - lo) * float(h & 0xffffff) / float(0x1000000);
    if (dt == 0) static_cast<float*>(p)[i] = u;
    else if (dt == 2) static_cast<__half*>(p)[i] = __float2half(u);
    else static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(u);
  }
}

// max |a - b| over the first n elements (dt as init_kernel), as float bits in *out
// (non-negative floats order like their bits; NaN on either side counts as +inf).
__global__ void maxdiff_kernel(const void* a, const void* b, int64_t n, int dt, unsigned* out) {
  float m = 0.f;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float u, v;
    if (dt == 0) u = static_cast<const float*>(a)[i], v = static_cast<const float*>(b)[i];
    else if (dt == 2) u = __half2float(static_cast<const __half*>(a)[i]), v = __half2float(static_cast<const __half*>(b)[i]);
    else u = __bfloat162float(static_cast<const __nv_bfloat16*>(a)[i]), v = __bfloat162float(static_cast<const __nv_bfloat16*>(b)[i]);
    const float d = fabsf(u - v);
    m = (d != d) ? __int_as_float(0x7f800000) : fmaxf(m, d);
  }
  atomicMax(out, __float_as_uint(m));
}

// Whether `name` contains one of the ';'-separated parts of `list` (an empty part matches
// nothing; an empty or null list matches every name): the benchmarks' case filters.
inline bool listed(const char* list, const std::string& name) {
  if (!list || !*list) return true;
  const std::string l(list);
  for (size_t at = 0; at <= l.size();) {
    const size_t end = std::min(l.find(';', at), l.size());
    if (end > at && name.find(l.substr(at, end - at)) != std::string::npos) return true;
    at = end + 1;
  }
  return false;
}

// Median over `reps` rounds of `batch` back-to-back calls of f() between two
// events, per call, in ms: where the host submits faster than the GPU runs, the
// host's per-call cost is hidden (median_ms times each call alone and includes it).
template <class F>
double batch_ms(F&& f, int reps, int batch) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) f();
  CK(cudaDeviceSynchronize());
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a));
    for (int k = 0; k < batch; ++k) f();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms / float(batch));
  }
  std::sort(t.begin(), t.end());
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return t[t.size() / 2];
}

// Median over `reps` calls of f() on the default stream, each timed alone by events
// (3 warm-up calls first), in ms.
template <class F>
double median_ms(F&& f, int reps) {
  return batch_ms(f, reps, 1);
}
