// Device memory and device queries, implemented by the CUDA backend when it is
// built (src/cuda/device.cu) and by src/core/no_cuda.cpp otherwise.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace segred::detail {
std::shared_ptr<void> cuda_allocate(size_t bytes, int device);
// Synchronous copy between host and device memory (either direction, or device to device).
void cuda_copy(void* dst, const void* src, size_t bytes);
// Free memory of a CUDA device in bytes (cudaMemGetInfo), for callers that state a
// memory need and skip when it is not met (`segred check --large`); 0 without CUDA.
int64_t cuda_free_bytes(int device);
// Multiprocessors of a CUDA device (cached per device; DeviceError when the query fails).
int cuda_sm_count(int device);
}
