// segred/plan.h: the Plan layer (shared/DESIGN.md).
//
// A Plan is the value a pure plan_* function returns for a problem description:
// which registered path runs, at which index width, with which launch geometry.
// Because planning allocates nothing and touches no device, a test can ask what a
// call on 2^32+1 elements would run and assert the answer.
#pragma once
#include <array>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

#include "segred/trace.h"

namespace segred {

struct Plan {
  std::string_view path;  // a registered path name
  int index_bits = 64;    // width of the kernel's element index arithmetic
  std::array<int64_t, 3> grid{0, 0, 0};   // CUDA only
  std::array<int64_t, 3> block{0, 0, 0};  // CUDA only
  int64_t chunk = 0;  // elements per work item (CPU: blocked-reduction width / task size)
  // A choice inside the path, where a path has one (segment_reduce's CUDA flat
  // forward: "fused_fixup" or "fixup_tree"; its feature forward in 8-byte
  // vectors: "half_vectors"; src/core/segment_geometry.h).
  std::string_view variant;

  bool operator==(const Plan&) const = default;
  std::string to_string() const;
};

std::ostream& operator<<(std::ostream& os, const Plan& p);

}  // namespace segred
