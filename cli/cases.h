// The verification matrix of `segred check`, as data: small inputs chosen to
// reach each rule of SEMANTICS.md (constructed ties, signed zeros, infinities,
// NaN, empty segments, offsets not starting at 0, features, batched axis), crossed
// with reduces, tie rules, gradient values and metadata forms by expand_cases().
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace segred::cli {

// One input: data as [outer, L, inner], segments as per-row lengths.
struct Input {
  std::string name;
  int64_t outer = 1, L = 0, inner = 1;
  std::vector<double> data;
  std::vector<int64_t> lengths;  // outer rows of S
  std::vector<std::string> reduces;  // empty: all five
  int64_t lead = 0;  // offsets form only: rows of padding before the first segment (offsets not starting at 0)
};

// One row of the matrix.
struct Case {
  std::string name;
  const Input* input;
  std::string reduce;
  bool offsets;
  std::optional<double> initial;
  std::string tie;  // "split" / "first" / "last" (max/min only; others "split")
  double grad;      // upstream gradient, the same for every segment, or the
  bool grad_varied; // ... a per-segment pattern of signs scaled by `grad`
  std::string dtype;  // "float64" / "float32"
};

const std::vector<Input>& inputs();
std::vector<Case> expand_cases(const std::vector<Input>& in);

}  // namespace segred::cli
