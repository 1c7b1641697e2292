// Ragged softmax family, fwd, float: the instantiations (segment_softmax_impl.cuh has
// the kernels and the launch code). One file per direction and dtype so builds run in parallel.
#include "src/cuda/segment_softmax_impl.cuh"

namespace segred::cuda {
template void run_segment_softmax_fwd<float, int32_t>(const SsArgs&);
template void run_segment_softmax_fwd<float, int64_t>(const SsArgs&);
}  // namespace segred::cuda
