// segment_reduce bwd instantiations for one dtype (compiled in parallel with the others).
#include "src/cuda/segment_reduce_impl.cuh"

namespace segred::cuda {
template void run_bwd<double, int32_t>(const BwdArgs&);
template void run_bwd<double, int64_t>(const BwdArgs&);
template int feat_bwd_blocks_per_sm<double, int32_t>(int);
template int feat_bwd_blocks_per_sm<double, int64_t>(int);
}  // namespace segred::cuda
