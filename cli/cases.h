// The segment_reduce verification matrix of `segred check` and `segred align`,
// as data: small inputs chosen to reach each rule of SEMANTICS.md (constructed
// ties, signed zeros, infinities, NaN, empty segments, offsets not starting at 0,
// features, batched axis, a segment longer than a CPU work piece), crossed with
// reduces, tie rules, gradient signs, metadata forms, initial and dtypes by
// expand_cases(). Expected values come only from the float64 reference
// (src/reference/segment_reduce_ref.h), never from the implementation under test.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "segred/tensor.h"

namespace segred::cli {

// One input: data as [outer, L, inner], segments as per-row lengths.
struct Input {
  std::string name;
  int64_t outer = 1, L = 0, inner = 1;
  std::vector<double> data;
  std::vector<int64_t> lengths;      // outer rows of S
  std::vector<std::string> reduces;  // empty: all five
  int64_t lead = 0;  // offsets form only: rows of padding before the first segment (offsets not starting at 0)
};

// One row of the matrix.
struct Case {
  std::string name;
  const Input* input;
  std::string reduce;
  bool offsets;  // offsets (int32) or lengths (int64)
  std::optional<double> initial;
  std::string tie;    // "split" / "first" / "last" (max/min only; others "split")
  double grad;        // upstream gradient, the same for every segment, or the
  bool grad_varied;   // ... per-segment pattern {1, -1, 0, 0.4} scaled by `grad`
  std::string dtype;  // "float64" / "float32"
};

const std::vector<Input>& inputs();
std::vector<Case> expand_cases(const std::vector<Input>& in);
inline std::vector<Case> segment_cases() { return expand_cases(inputs()); }

// A case's arrays in float64 (data already rounded to the case dtype) with the
// reference's expectations, in the shapes the public API takes.
struct Materialized {
  Shape data_shape, meta_shape, out_shape;
  int64_t axis = 0;
  std::vector<double> data, grad;
  std::vector<int64_t> meta;  // lengths or offsets, row-major
  std::vector<double> expected_out, expected_grad;
  // The torch-CPU defect model (SEMANTICS.md deviation): the gradient PyTorch's
  // max/min backward gives, dividing among ties only when g > 0. Filled for
  // max/min; used by `segred align` to name the defect class of a wrong row.
  std::vector<double> grad_sign_defect;
};
Materialized materialize(const Case& c);

// The boundary cases past 2^31 and 2^32 elements (`--large`) are in
// cli/segment_reduce_large.h.

}  // namespace segred::cli
