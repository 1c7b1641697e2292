// CUDA device services shared by every CUDA kernel file: allocation for the
// owning Tensor and device queries. Kernels of the op families live beside it.
#include <cuda_runtime.h>

#include <mutex>
#include <vector>

#include "segred/error.h"
#include "segred/version.h"
#include "src/core/device_memory.h"

namespace segred {

bool built_with_cuda() { return true; }

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

namespace detail {
std::shared_ptr<void> cuda_allocate(size_t bytes, int device) {
  int prev = 0;
  cudaGetDevice(&prev);
  cudaError_t e = cudaSetDevice(device);
  void* p = nullptr;
  if (e == cudaSuccess) e = cudaMalloc(&p, bytes);
  cudaSetDevice(prev);
  SEGRED_CHECK(e == cudaSuccess, DeviceError, "Tensor::empty: cudaMalloc of ", bytes, " bytes on cuda:", device,
               " failed: ", cudaGetErrorString(e));
  return std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
}

void cuda_copy(void* dst, const void* src, size_t bytes) {
  const cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
  SEGRED_CHECK(e == cudaSuccess, DeviceError, "Tensor::to: cudaMemcpy of ", bytes, " bytes failed: ",
               cudaGetErrorString(e));
}

int64_t cuda_free_bytes(int device) {
  int prev = 0;
  cudaGetDevice(&prev);
  size_t free_b = 0, total = 0;
  if (cudaSetDevice(device) != cudaSuccess || cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
    cudaGetLastError();
    free_b = 0;
  }
  cudaSetDevice(prev);
  return int64_t(free_b);
}

int cuda_sm_count(int device) {
  static std::mutex mu;
  static std::vector<int> cache;
  std::lock_guard<std::mutex> lk(mu);
  if (cache.size() <= size_t(device)) cache.resize(size_t(device) + 1, 0);
  if (!cache[size_t(device)]) {
    int n = 0;
    const cudaError_t e = cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device);
    SEGRED_CHECK(e == cudaSuccess, DeviceError, "multiprocessor count of cuda:", device, ": ", cudaGetErrorString(e));
    cache[size_t(device)] = n;
  }
  return cache[size_t(device)];
}
}  // namespace detail

}  // namespace segred
