// segment_reduce fwd instantiations for one dtype (compiled in parallel with the others).
#include "src/cuda/segment_reduce_impl.cuh"

namespace segred::cuda {
template void run_fwd<::segred::bfloat16_t, int32_t>(const FwdArgs&);
template void run_fwd<::segred::bfloat16_t, int64_t>(const FwdArgs&);
template int feat_fwd_blocks_per_sm<::segred::bfloat16_t, int32_t>(Reduce, int);
template int feat_fwd_blocks_per_sm<::segred::bfloat16_t, int64_t>(Reduce, int);
}  // namespace segred::cuda
