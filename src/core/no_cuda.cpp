// The CUDA entry points of a build without the CUDA backend.
#include "segred/error.h"
#include "segred/version.h"
#include "src/core/device_memory.h"

namespace segred {
bool built_with_cuda() { return false; }
int cuda_device_count() { return 0; }
namespace detail {
std::shared_ptr<void> cuda_allocate(size_t, int) {
  throw ValueError("device: this segred build has no CUDA backend (configure with SEGRED_ENABLE_CUDA=ON)");
}
void cuda_copy(void*, const void*, size_t) {
  throw ValueError("device: this segred build has no CUDA backend (configure with SEGRED_ENABLE_CUDA=ON)");
}
int64_t cuda_free_bytes(int) { return 0; }
int cuda_sm_count(int) { return 0; }
}  // namespace detail
}  // namespace segred
