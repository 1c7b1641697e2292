// Segment metadata, resolved: validation (SEMANTICS.md) and normalisation of
// lengths/offsets into clamped int64 offsets per row, done once on the host so
// every CPU kernel sees the same, always in-bounds, description.
#pragma once
#include <cstdint>
#include <vector>

#include "segred/segment_reduce.h"

namespace segred::detail {

struct SegmentLayout {
  int64_t axis = 0;  // wrapped
  int64_t outer = 1, L = 0, inner = 1, S = 0;
  DType index_dtype = DType::Int64;
  // outer rows of S+1 offsets; monotone within a row and inside [0, L], so that
  // segment s of row r is [offsets[r*(S+1)+s], offsets[r*(S+1)+s+1]).
  std::vector<int64_t> offsets;
  const int64_t* row(int64_t r) const { return offsets.data() + r * (S + 1); }
};

// Checks data and metadata (op names the caller in messages, e.g. "segment_reduce")
// and returns the resolved layout. Throws ValueError/TypeError naming the argument.
SegmentLayout resolve_segments(const char* op, const TensorView& data, const Segments& seg);

// Wraps a Python-style axis into [0, ndim) or throws ValueError naming `argname`.
int64_t wrap_axis(const char* op, const char* argname, int64_t axis, int64_t ndim);

// Throws ValueError unless `initial` is representable in dtype (finite stays finite).
void check_initial(const char* op, double initial, DType dtype);

}  // namespace segred::detail
