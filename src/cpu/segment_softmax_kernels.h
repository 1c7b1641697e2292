// CPU kernels of the ragged softmax family; inputs contiguous, outputs fully written.
#pragma once
#include "segred/segment_softmax.h"
#include "src/core/segments.h"

namespace segred::cpu {
void segment_softmax_fwd(const Plan& plan, SegmentSoftmaxOp op, const detail::SegmentLayout& lay,
                         const TensorView& data, const TensorView& out);
void segment_softmax_bwd(const Plan& plan, SegmentSoftmaxOp op, const detail::SegmentLayout& lay,
                         const TensorView& grad, const TensorView& output, const TensorView& data,
                         const TensorView& grad_input);
}  // namespace segred::cpu
