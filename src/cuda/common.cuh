// CUDA building blocks shared by the segred kernels: device element types, the
// launch-viability helper (DESIGN.md, "Launch viability"), stream-ordered scratch
// memory and error checks. Host + device; include only from .cu files.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "segred/dtype.h"
#include "segred/error.h"

namespace segred::cuda {

#define SEGRED_CUDA_CHECK(expr, what)                                                               \
  do {                                                                                              \
    const cudaError_t segred_e_ = (expr);                                                           \
    if (segred_e_ != cudaSuccess)                                                                   \
      throw ::segred::DeviceError(::segred::detail::cat(what, ": ", cudaGetErrorString(segred_e_))); \
  } while (0)

// Host storage type -> device storage type (same bits).
template <class T> struct Dev { using type = T; };
template <> struct Dev<half_t> { using type = __half; };
template <> struct Dev<bfloat16_t> { using type = __nv_bfloat16; };

// Accumulation type (SEMANTICS.md: float32 for the 16-bit floats).
template <class T> struct DAcc { using type = T; };
template <> struct DAcc<__half> { using type = float; };
template <> struct DAcc<__nv_bfloat16> { using type = float; };
template <class T> using dacc_t = typename DAcc<T>::type;

__device__ __forceinline__ float ld(__half v) { return __half2float(v); }
__device__ __forceinline__ float ld(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float ld(float v) { return v; }
__device__ __forceinline__ double ld(double v) { return v; }

template <class T> __device__ __forceinline__ T st(dacc_t<T> v);
template <> __device__ __forceinline__ float st<float>(float v) { return v; }
template <> __device__ __forceinline__ double st<double>(double v) { return v; }
template <> __device__ __forceinline__ __half st<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 st<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// Launch viability: a configuration is accepted only when the occupancy query
// reports at least one resident block; otherwise the block is halved and asked
// again, down to `min_block`, then a DeviceError names the kernel. Launches here
// are 1-D, so there is one dimension to shrink. smem_per_warp: dynamic shared
// memory per warp of the block (the flat kernels stage a tile per warp).
template <class Kernel>
int viable_block(Kernel kernel, int block, size_t smem_per_warp, int min_block, const char* name) {
  // The answer depends only on (kernel, block, smem): cached, since the
  // occupancy query and the attribute call cost host time on every launch.
  static std::mutex mu;
  static std::unordered_map<const void*, int> cache;
  const void* key = reinterpret_cast<const void*>(kernel);
  {
    std::lock_guard<std::mutex> lk(mu);
    const auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  for (int b = block; b >= min_block && b >= 32; b /= 2) {
    const size_t smem = smem_per_warp * size_t(b / 32);
    if (smem > 48 * 1024 &&
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    int n = 0;
    const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, b, smem);
    if (e == cudaSuccess && n >= 1) {
      std::lock_guard<std::mutex> lk(mu);
      cache[key] = b;
      return b;
    }
    cudaGetLastError();
  }
  throw DeviceError(detail::cat("segment_reduce: no viable launch configuration for ", name,
                                " (occupancy reports 0 resident blocks down to ", min_block, " threads)"));
}

// Programmatic dependent launch (Hopper): a kernel queued with
// launch_after_prior(..., pdl = true) may be scheduled while the kernel before it
// in the stream still runs, and waits in wait_prior_grid() until that kernel has
// completed and its writes are visible; so the launch and the block scheduling
// of the second kernel overlap the tail of the first instead of following it.
// Every kernel launched that way calls wait_prior_grid() before it reads or
// writes global memory; without the launch attribute the wait returns at once.
// allow_dependents() in the first kernel lets the second be scheduled before the
// first's blocks exit (its correctness never depends on where it is called).
__device__ __forceinline__ void wait_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Whether the current device takes programmatic dependent launches (compute
// capability 9.0 and newer), cached per device.
inline bool pdl_supported() {
  static std::mutex mu;
  static std::unordered_map<int, bool> cache;
  int dev = 0;
  SEGRED_CUDA_CHECK(cudaGetDevice(&dev), "segment_reduce: cudaGetDevice");
  std::lock_guard<std::mutex> lk(mu);
  const auto it = cache.find(dev);
  if (it != cache.end()) return it->second;
  int major = 0;
  SEGRED_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev),
                    "segment_reduce: device query");
  return cache[dev] = major >= 9;
}

// Whether the dependent launch of a grid of `grid` blocks pays. H200, session 15
// (bench/NOTES.md): 1-2 us less per call on most rows, but 5-9 us more on
// 2d_x16_f4 fp32, whose feat_reduce is half a wave (545 blocks, 8 fit per SM):
// the reading (not measured) is that blocks that start while prepare still holds
// the SMs go to the SMs that free first, up to 8 on one, instead of ~4 on each,
// and a latency-bound kernel of one partial wave then waits for its fullest SMs.
// So the rule: not for a grid of more blocks than SMs but fewer than the GPU
// holds at once. It is SegmentTestCaps::pdl = 1, tested on the H200 but not yet
// timed; the default launches every main kernel this way. The occupancy query is
// cached per (device, kernel, block, shared memory).
template <class Kernel>
bool pdl_pays(Kernel kernel, int64_t grid, int block, size_t smem) {
  static std::mutex mu;
  static std::map<std::tuple<int, const void*, int, size_t>, std::pair<int, int>> cache;  // (SMs, per SM)
  int dev = 0;
  SEGRED_CUDA_CHECK(cudaGetDevice(&dev), "segment_reduce: cudaGetDevice");
  const auto key = std::make_tuple(dev, reinterpret_cast<const void*>(kernel), block, smem);
  std::pair<int, int> v{0, 0};
  {
    std::lock_guard<std::mutex> lk(mu);
    const auto it = cache.find(key);
    if (it != cache.end()) v = it->second;
  }
  if (v.first == 0) {
    SEGRED_CUDA_CHECK(cudaDeviceGetAttribute(&v.first, cudaDevAttrMultiProcessorCount, dev),
                      "segment_reduce: device query");
    SEGRED_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v.second, kernel, block, smem),
                      "segment_reduce: occupancy query");
    std::lock_guard<std::mutex> lk(mu);
    cache[key] = v;
  }
  return grid <= v.first || grid >= int64_t(v.first) * v.second;
}

// kernel<<<grid, block, smem, s>>>(args...), as a programmatic dependent launch
// of the kernel before it in `s` when `pdl` (see wait_prior_grid); the launch's
// own error code.
template <class... Exp, class... Act>
cudaError_t launch_after_prior(void (*kernel)(Exp...), int64_t grid, int block, size_t smem, cudaStream_t s, bool pdl,
                        const Act&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(grid));
  cfg.blockDim = dim3(unsigned(block));
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

inline void check_launch(const char* name) {
  const cudaError_t e = cudaGetLastError();
  SEGRED_CHECK(e == cudaSuccess, DeviceError, "segment_reduce: launch of ", name, " failed: ", cudaGetErrorString(e));
}

// segred's own stream-ordered memory pool per device, with no release threshold:
// scratch freed at the end of a call stays mapped for the next one. (The default
// pool returns memory to the system at every synchronisation, and re-mapping it
// costs tens of microseconds per call.)
inline cudaMemPool_t scratch_pool() {
  static std::mutex mu;
  static std::unordered_map<int, cudaMemPool_t> pools;
  int dev = 0;
  SEGRED_CUDA_CHECK(cudaGetDevice(&dev), "segment_reduce: cudaGetDevice");
  std::lock_guard<std::mutex> lk(mu);
  const auto it = pools.find(dev);
  if (it != pools.end()) return it->second;
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = dev;
  cudaMemPool_t pool;
  SEGRED_CUDA_CHECK(cudaMemPoolCreate(&pool, &props), "segment_reduce: cudaMemPoolCreate");
  uint64_t threshold = UINT64_MAX;
  SEGRED_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
                    "segment_reduce: cudaMemPoolSetAttribute");
  pools[dev] = pool;
  return pool;
}

// Stream-ordered scratch: allocations are freed on the same stream when the
// object goes out of scope, after the kernels queued before that point.
class Scratch {
 public:
  explicit Scratch(cudaStream_t s) : s_(s), pool_(scratch_pool()) {}
  ~Scratch() {
    for (void* p : ptrs_) cudaFreeAsync(p, s_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <class T>
  T* alloc(int64_t n) {
    void* p = nullptr;
    const size_t bytes = size_t(n > 0 ? n : 1) * sizeof(T);
    SEGRED_CUDA_CHECK(cudaMallocFromPoolAsync(&p, bytes, pool_, s_), "segment_reduce: cudaMallocFromPoolAsync of scratch");
    ptrs_.push_back(p);
    return static_cast<T*>(p);
  }

 private:
  cudaStream_t s_;
  cudaMemPool_t pool_;
  std::vector<void*> ptrs_;
};

// L2 eviction priorities (session 21, the softmax stage_y backward; session 22, the
// streamed last-dim rows; session 29, the feature max/min backward's write loop): a
// policy for every access of an instruction (createpolicy.fractional, fraction 1), and
// vector loads and stores of 8 or 16 bytes that carry one (.L2::cache_hint).
__device__ __forceinline__ uint64_t l2_evict_last() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}
__device__ __forceinline__ uint64_t l2_evict_first() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}
// One vector V of 8 or 16 bytes loaded / stored with a policy.
template <class VT>
__device__ __forceinline__ VT ld_hint(const VT* p, uint64_t pol) {
  static_assert(sizeof(VT) == 16 || sizeof(VT) == 8, "8- or 16-byte vectors");
  uint32_t w[sizeof(VT) / 4];
  if constexpr (sizeof(VT) == 16) {
    asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
                 : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                 : "l"(p), "l"(pol));
  } else {
    asm volatile("ld.global.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;\n" : "=r"(w[0]), "=r"(w[1]) : "l"(p), "l"(pol));
  }
  VT v;
  memcpy(&v, w, sizeof(VT));
  return v;
}
template <class VT>
__device__ __forceinline__ void st_hint(VT* p, const VT& v, uint64_t pol) {
  static_assert(sizeof(VT) == 16 || sizeof(VT) == 8, "8- or 16-byte vectors");
  uint32_t w[sizeof(VT) / 4];
  memcpy(w, &v, sizeof(VT));
  if constexpr (sizeof(VT) == 16) {
    asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, %5;\n" ::"l"(p), "r"(w[0]), "r"(w[1]),
                 "r"(w[2]), "r"(w[3]), "l"(pol)
                 : "memory");
  } else {
    asm volatile("st.global.L2::cache_hint.v2.u32 [%0], {%1, %2}, %3;\n" ::"l"(p), "r"(w[0]), "r"(w[1]), "l"(pol)
                 : "memory");
  }
}

}  // namespace segred::cuda
