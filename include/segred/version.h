#pragma once
namespace segred {
constexpr const char* version = "0.1.0";
// True when this build contains the CUDA backend.
bool built_with_cuda();
// Number of CUDA devices visible (0 without CUDA or without a GPU); never throws.
int cuda_device_count();
}  // namespace segred
