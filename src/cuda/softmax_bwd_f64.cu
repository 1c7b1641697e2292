// softmax family, bwd, double: the kernel instantiations (softmax_impl.cuh has
// the versions and the math). One file per direction and dtype so builds run in
// parallel.
#include "src/cuda/softmax_impl.cuh"

namespace segred::cuda::sm {
SEGRED_SOFTMAX_PICK_DEF(bwd, f64, double, false)
}  // namespace segred::cuda::sm
