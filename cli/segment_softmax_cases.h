// The ragged softmax rows of `segred check`: every segment_reduce input of
// cli/cases.h (ties, infinities, NaN, empty segments, features, batched axis,
// offsets not starting at 0, a long segment) through segment_softmax,
// segment_log_softmax and segment_logsumexp, forward and backward (gradients of
// both signs), lengths (int64) and offsets (int32), float64 and float32, against
// the float64 reference (src/reference/segment_softmax_ref.h).
#pragma once
#include <functional>

#include "cli/report.h"
#include "segred/tensor.h"

namespace segred::cli {
size_t segment_softmax_case_count();
void run_segment_softmax_cases(DeviceRef dev, const std::function<void(Row)>& record);
}  // namespace segred::cli
