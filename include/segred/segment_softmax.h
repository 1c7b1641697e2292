// segred/segment_softmax.h: softmax over ragged segments (SEMANTICS.md, "segment
// softmax family"): the attention of graph networks (a softmax over each node's
// incoming edges, per head) and of jagged batches.
//
// Segments, metadata and validation are exactly segment_reduce's (lengths or
// offsets, axis, batched metadata, unsafe); `initial` is not an argument here
// (ValueError if set). data is viewed as [outer, L, inner]; every inner index
// (e.g. an attention head) is an independent softmax.
//
// Per segment and inner index (m = max, s = sum exp(x - m), an online max/sum
// merge in one pass, so segments of any length are read twice in all):
//   segment_softmax      y = exp(x - m) / s          (data's shape; 0 outside segments)
//   segment_log_softmax  y = x - m - log(s)          (data's shape; 0 outside segments)
//   segment_logsumexp    y = m + log(s)              (segment_reduce's output shape)
// Backward (fused, no temporary):
//   softmax      gI = y * (g - sum_seg(g * y))
//   log_softmax  gI = g - exp(y) * sum_seg(g)
//   logsumexp    gI = g_seg * exp(x - y_seg)
// CUDA: data, metadata and outputs on one device; work is queued on the calling
// thread's current stream (segred/stream.h); unsafe = false copies the metadata to
// the host to validate it (one synchronisation), as segment_reduce does.
// Special values, per segment, as the dense softmax: all -inf -> NaN, any NaN or
// +inf -> NaN (softmax, log_softmax); a segment of 1 -> softmax 1, log_softmax 0,
// gradient 0. logsumexp (like torch.logsumexp): empty or all -inf -> -inf, any NaN
// -> NaN, otherwise +inf present -> +inf; its gradient is g * exp(x - y), so an
// all -inf segment gets NaN (the softmax of that segment).
#pragma once
#include "segred/plan.h"
#include "segred/segment_reduce.h"

namespace segred {

enum class SegmentSoftmaxOp : uint8_t { Softmax, LogSoftmax, LogSumExp };

Tensor segment_softmax(const TensorView& data, const Segments& seg);
Tensor segment_log_softmax(const TensorView& data, const Segments& seg);
Tensor segment_logsumexp(const TensorView& data, const Segments& seg);
// Into `out`: contiguous, of the result's shape and data's dtype, not overlapping data.
void segment_softmax_out(SegmentSoftmaxOp op, const TensorView& data, const Segments& seg, const TensorView& out);

// grad and output have the forward result's shape; the result has data's shape.
Tensor segment_softmax_backward(const TensorView& grad, const TensorView& output, const Segments& seg);
Tensor segment_log_softmax_backward(const TensorView& grad, const TensorView& output, const Segments& seg);
// logsumexp needs the data too: gI = g_seg * exp(x - y_seg).
Tensor segment_logsumexp_backward(const TensorView& grad, const TensorView& output, const TensorView& data,
                                  const Segments& seg);
// Into grad_input (contiguous, data's shape and dtype); `data` is used by LogSumExp only
// (pass `output` for the others, whose data shape equals the output's).
void segment_softmax_backward_out(SegmentSoftmaxOp op, const TensorView& grad, const TensorView& output,
                                  const TensorView& data, const Segments& seg, const TensorView& grad_input);

struct SegmentSoftmaxProblem {
  Backend backend = Backend::CPU;
  Direction direction = Direction::Fwd;
  SegmentSoftmaxOp op = SegmentSoftmaxOp::Softmax;
  DType dtype = DType::Float32;
  int64_t outer = 1, axis_len = 0, inner = 1, num_segments = 0;
};

// Pure: the path a call would run. CPU: one path per op and direction, 64-bit.
// CUDA: "<op>.<fwd|bwd>.cuda.tiles.i32|i64" (src/core/segment_softmax_geometry.h),
// i32 when every index the kernels form is below 2^31; chunk = merge items per tile.
Plan plan_segment_softmax(const SegmentSoftmaxProblem& p);

std::string_view to_string(SegmentSoftmaxOp op);

}  // namespace segred
