// CUDA entry points of the ragged softmax family (host-callable; no CUDA headers
// here). Called by the API layer (src/core/segment_softmax.cpp) after the shape
// checks (resolve_layout) and the plan; the metadata values are validated here,
// since they live on the device. Inputs may be strided (copied to contiguous
// scratch on the stream); outputs are contiguous. `stream` is a cudaStream_t.
#pragma once
#include "segred/plan.h"
#include "segred/segment_softmax.h"
#include "src/core/segments.h"

namespace segred::cuda {

void segment_softmax_fwd(const Plan& plan, SegmentSoftmaxOp op, const detail::SegmentLayout& lay, const Segments& seg,
                         const TensorView& data, const TensorView& out, void* stream);

// `data` is read by LogSumExp only (pass `output` for the others).
void segment_softmax_bwd(const Plan& plan, SegmentSoftmaxOp op, const detail::SegmentLayout& lay, const Segments& seg,
                         const TensorView& grad, const TensorView& output, const TensorView& data,
                         const TensorView& grad_input, void* stream);

}  // namespace segred::cuda
