// The softmax rows of `segred check` and `segred align`: inputs chosen to reach
// both CPU paths (lastdim, spatial) and every special-value rule of SEMANTICS.md
// ("softmax family"), crossed with softmax / log_softmax and dtypes; each case runs
// the forward and the backward (gradients of every sign) through the public API and
// compares with the float64 reference (src/reference/softmax_ref.h).
//
// With --large, the boundary cases: for every CUDA softmax path with i32/i64
// variants, a shape the plan sends to its i64 variant (i64 from 2*numel + 2^20 >=
// 2^31), the smallest of its kernel past 2^31 elements (past 2^32 for spatial and
// spatial_staged: the shape of torch 2.11's spatial backward defect), so a kernel forming 32-bit
// offsets there fails visibly; forward and backward, softmax and log_softmax, in
// float16, with arrays given by a rule (cli/large.h) and expected values computed
// by the float64 reference on the checked element's row only. A family adding its
// own boundary cases (the ragged softmax family, cli/segment_softmax_cases.cpp)
// follows the same pattern: a case list as data (shape, FilledArray inputs,
// checked elements, memory need), an expectation per checked element from its
// own reference, a runner built on cli/large.h, and a run_*_large_cases(dev,
// record) call beside run_softmax_large_cases in cli/check.cpp.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "cli/large.h"
#include "cli/report.h"
#include "segred/tensor.h"
#include "segred/trace.h"

namespace segred::cli {

// One input: values of the logical shape (row-major), the dim, and whether the
// kernel sees it through a transposed (non-contiguous) view.
struct SoftmaxInput {
  std::string name;
  Shape shape;
  int64_t dim;
  std::vector<double> data;
  bool transposed = false;  // 2-D only: stored as [cols, rows], viewed with swapped strides
  // The CPU's L2 in bytes the CPU plan sees for this input (cpu::softmax_l2_override;
  // -1: the machine's): session 26's two tile families, each reached on every machine.
  int64_t cpu_l2 = -1;
};

struct SoftmaxCase {
  std::string name;  // "<input>/<softmax|log_softmax>/<dtype>"
  const SoftmaxInput* input;
  bool log;
  std::string dtype;  // "float64" / "float32" / "float16" / "bfloat16"
};

const std::vector<SoftmaxInput>& softmax_inputs();
std::vector<SoftmaxCase> softmax_cases();
// Scaled-error tolerance of a softmax row of `dtype` (report.h's close_enough).
double softmax_tolerance(const std::string& dtype);

// A case's arrays in float64 (values rounded to the case dtype) and the float64
// reference's expectations, for an implementation that is not segred (segred
// align): the backward's `output` is the reference forward rounded to the dtype.
struct SoftmaxMaterialized {
  std::vector<double> x, grad;     // logical shape, row-major
  std::vector<double> expected_out;
  std::vector<double> output;      // expected_out rounded to the dtype: the backward's input
  std::vector<double> expected_grad;
};
SoftmaxMaterialized materialize(const SoftmaxCase& c);

// Number of softmax cases per device that has softmax paths (for progress bars).
size_t softmax_case_count(DeviceRef dev);

// Runs every softmax case on `dev` (CPU or CUDA: inputs are copied to the device,
// results back) and hands one Row per case (op "softmax" or "log_softmax", the
// paths it reached) to `record`.
void run_softmax_cases(DeviceRef dev, const std::function<void(Row)>& record);

// ---- boundary cases (--large) ----------------------------------------------

// One boundary run: one op, one direction, one shape. `a` is x (forward) or grad
// (backward), `b` the backward's output. Expected values are those of `checks`.
struct LargeSoftmaxCase {
  std::string name;    // "large/<kernel>/<shape>/<op>.<fwd|bwd>/float16"
  std::string kernel;  // the CUDA kernel the shape is built for: lastdim_warp, lastdim_block, spatial,
                       // spatial_staged
  std::string shape_name;  // "1x2x(2^31+1) dim 1"
  Shape shape;
  int64_t dim;
  bool log;
  Direction dir;
  DType dtype = DType::Float16;
  FilledArray a, b;
  std::vector<int64_t> checks;  // flat elements checked (boundary_points + every patched element)
  std::string boundary;         // "UINT32_MAX" or "INT32_MAX": the 32-bit limit the shape is past
  bool cpu = true;              // also run on the CPU by `segred check --large`

  int64_t numel() const { return segred::numel(shape); }
  int arrays() const { return dir == Direction::Fwd ? 2 : 3; }  // inputs + the output
  int64_t bytes_needed() const { return numel() * dtype_size(dtype) * arrays(); }
  std::string op() const { return log ? "log_softmax" : "softmax"; }
  // The CUDA path the plan must choose: "<op>.<fwd|bwd>.cuda.<kernel>.i64".
  std::string cuda_path() const;
};

// Sizes of the boundary shapes; the defaults are the real ones. Tests build the
// same cases at small sizes (the "small analogue": same rules, same checks
// relative to the ends) to prove the expected values without 8 GiB arrays.
struct BoundarySizes {
  int64_t spatial_cols = (int64_t(1) << 31) + 1;  // [1, 2, L] over dim 1: 2^32 + 2 elements
  int64_t lastdim_row = (int64_t(1) << 31) + 2;   // [1, D] over dim -1
  int64_t rows_of_one = 2200000000;               // [R, 1] over dim -1
  int64_t rows_of_two = 1100000000;               // [R, 2] over dim -1: 2.2e9 elements
  // [1, 325, C] over dim 1 (spatial_staged: D = 325 >= 256 staged in both
  // directions, C % 4 == 0 for 8-byte float16 vectors): 325 * 13215284 = 2^32 + 4.
  int64_t staged_cols = 13215284;
  // The small analogue used by the tests (C++ and segred.align's).
  static BoundarySizes small_analogue() { return {9, 11, 7, 6, 12}; }
};
std::vector<LargeSoftmaxCase> softmax_large_cases(const BoundarySizes& sizes = {});

// The expected value of element i of a boundary case, rounded to its dtype: the
// float64 reference (SEMANTICS.md's rules) applied to i's row only, the row given
// as runs (the fill value times its count, plus the patched elements of the row),
// so a row of 2^31 elements costs as much as a row of 5.
double large_expected(const LargeSoftmaxCase& c, int64_t i);

// Runs one boundary case on `dev` (skipped, with the reason, when the memory is
// short): one Row with the path it reached; on CUDA, a path other than
// cuda_path() is WRONG (the case is named for the path it must reach).
Row run_softmax_large_case(const LargeSoftmaxCase& c, DeviceRef dev);
// The boundary cases `segred check --large` runs on `dev`: all of them on CUDA;
// on the CPU (one path per layout, no index-width variants) those with `cpu` set.
size_t softmax_large_case_count(DeviceRef dev);
void run_softmax_large_cases(DeviceRef dev, const std::function<void(Row)>& record);

}  // namespace segred::cli
