// CUDA entry points of segment_reduce (host-callable; no CUDA headers here).
// Called by the API layer after the shape checks (resolve_layout) and the plan;
// the metadata values are validated here, since they live on the device.
// `stream` is a cudaStream_t (nullptr: the default stream).
#pragma once
#include "segred/plan.h"
#include "segred/segment_reduce.h"
#include "src/core/segments.h"

namespace segred::cuda {

void segment_reduce_fwd(const Plan& plan, const detail::SegmentLayout& lay, const Segments& seg,
                        const TensorView& data, Reduce reduce, const TensorView& out, void* stream);

void segment_reduce_bwd(const Plan& plan, const detail::SegmentLayout& lay, const Segments& seg,
                        const TensorView& grad, const TensorView& output, const TensorView& data, Reduce reduce,
                        Tie tie, const TensorView& grad_input, void* stream);

}  // namespace segred::cuda
