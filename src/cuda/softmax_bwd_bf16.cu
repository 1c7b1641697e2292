// softmax family, bwd, __nv_bfloat16: the kernel instantiations (softmax_impl.cuh has
// the versions and the math). One file per direction and dtype so builds run in
// parallel.
#include "src/cuda/softmax_impl.cuh"

namespace segred::cuda::sm {
SEGRED_SOFTMAX_PICK_DEF(bwd, bf16, __nv_bfloat16, false)
}  // namespace segred::cuda::sm
