// segment_reduce's boundary cases of `segred check --large`: past 2^31 and 2^32
// elements, one case per CUDA segment_reduce path that has i32/i64 variants (the
// flat path and the features path, forward and backward), built from the pieces
// of cli/large.h: arrays given by a rule (zero everywhere except a few patched
// rows), results read at a few elements (both ends, both sides of 2^31 and 2^32,
// every patched element, the segment borders) against closed forms.
//
// Every case has three segments over the rows, [0, 3), [3, L-3), [L-3, L), so
// the middle segment spans the whole tensor (its reduction crosses every 32-bit
// boundary) and the outer two sit at the ends. For max the patched values tie in
// pairs in every segment and the gradients are signed (-1, -2.5, 2): the tie split
// must halve them for every sign; for sum the values are exact in float16.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cli/large.h"
#include "cli/report.h"
#include "segred/segred.h"

namespace segred::cli {

struct LargeSegmentCase {
  std::string name;    // "large/flat/max/2^32+3/float16"
  std::string reduce;  // "max" or "sum"
  DType dtype = DType::Float16;
  int64_t rows = 0;   // L: the reduced axis
  int64_t inner = 1;  // features (1: the flat path)
  std::string boundary;  // "INT32_MAX" or "UINT32_MAX": the 32-bit limit the tensor is past
  // Test hook: elements written into the data but not into the expectations, so
  // the runner must report WRONG (the tests prove it can fail).
  std::vector<Patch> defect;

  int64_t numel() const { return rows * inner; }
  Shape shape() const { return inner == 1 ? Shape{rows} : Shape{rows, inner}; }
  Shape out_shape() const { return inner == 1 ? Shape{3} : Shape{3, inner}; }
  int64_t bytes_needed() const { return 2 * numel() * dtype_size(dtype); }  // data + grad_input
  std::vector<int64_t> offsets() const { return {0, 3, rows - 3, rows}; }
  // The rows patched and their values (every feature of a patched row holds it).
  std::vector<std::pair<int64_t, double>> patched_rows() const;
  FilledArray data() const;
  static constexpr double kGrad[3] = {-1, -2.5, 2};  // the output gradient per segment
  double expected_out(int s) const;                   // segment s, every feature
  double expected_grad(int64_t element) const;        // grad_input, flat element index
  std::vector<int64_t> checks() const;                // grad_input elements read back
  // The CUDA paths the pure plan must choose: "segment_reduce.<fwd|bwd>.cuda.<flat|features>.i64".
  std::string cuda_path(Direction dir) const;
  std::string cpu_path(Direction dir) const;
};

// The cases; `small` gives the small analogues (same rules, a few dozen rows) the
// tests hold against a dense float64 reference.
std::vector<LargeSegmentCase> segment_reduce_large_cases(bool small = false);

// Runs one case on `dev` (skipped, with the reason, when memory is short): forward
// into a NaN-poisoned output, then backward (tie split) into a NaN-poisoned
// grad_input, both checked exactly; the row fails if the trace shows another path
// than the one the case is built to reach.
Row run_segment_reduce_large_case(const LargeSegmentCase& c, DeviceRef dev);
size_t segment_reduce_large_case_count(DeviceRef dev);
void run_segment_reduce_large_cases(DeviceRef dev, const std::function<void(Row)>& record);

}  // namespace segred::cli
