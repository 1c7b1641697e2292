// The ragged softmax rows of `segred check`: every segment_reduce input of
// cli/cases.h (ties, infinities, NaN, empty segments, features, batched axis,
// offsets not starting at 0, a long segment) through segment_softmax,
// segment_log_softmax and segment_logsumexp, forward and backward (gradients of
// both signs), lengths (int64) and offsets (int32), float64 and float32, against
// the float64 reference (src/reference/segment_softmax_ref.h); on the CPU and on
// CUDA.
#pragma once
#include <functional>

#include "cli/report.h"
#include "segred/tensor.h"

namespace segred::cli {
size_t segment_softmax_case_count();                // per device that has ragged softmax paths
size_t segment_softmax_case_count(DeviceRef dev);   // 0 when `dev` has none
// On the CPU, and on CUDA when the build has its paths (the arrays are copied to
// the device, the results back).
void run_segment_softmax_cases(DeviceRef dev, const std::function<void(Row)>& record);

// `--large`: one row per op on CUDA (forward and backward past UINT32_MAX
// elements, float16, exact values at both ends; 32 GiB of device memory, skipped
// with the reason when short), reaching every i64 path of the family.
size_t segment_softmax_large_case_count(DeviceRef dev);
void run_segment_softmax_large_cases(DeviceRef dev, const std::function<void(Row)>& record);
}  // namespace segred::cli
