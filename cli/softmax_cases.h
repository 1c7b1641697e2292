// The softmax rows of `segred check`: inputs chosen to reach both CPU paths
// (lastdim, spatial) and every special-value rule of SEMANTICS.md ("softmax
// family"), crossed with softmax / log_softmax and dtypes; each case runs the
// forward and the backward (gradients of every sign) through the public API and
// compares with the float64 reference (src/reference/softmax_ref.h).
#pragma once
#include <cstddef>
#include <functional>

#include "cli/report.h"
#include "segred/tensor.h"

namespace segred::cli {

// Number of softmax cases per device that has softmax paths (for progress bars).
size_t softmax_case_count(DeviceRef dev);

// Runs every softmax case on `dev` and hands one Row per case (op "softmax" or
// "log_softmax", the paths it reached) to `record`. CPU only for now: a CUDA
// device runs nothing here (the CUDA softmax paths are checked by their own
// suites; extending run_case to copy to and from the device is the next step).
void run_softmax_cases(DeviceRef dev, const std::function<void(Row)>& record);

}  // namespace segred::cli
