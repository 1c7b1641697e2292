// Ragged softmax family, bwd, bfloat16_t: the instantiations (segment_softmax_impl.cuh has
// the kernels and the launch code). One file per direction and dtype so builds run in parallel.
#include "src/cuda/segment_softmax_impl.cuh"

namespace segred::cuda {
template void run_segment_softmax_bwd<bfloat16_t, int32_t>(const SsArgs&);
template void run_segment_softmax_bwd<bfloat16_t, int64_t>(const SsArgs&);
}  // namespace segred::cuda
