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

// The shape half of resolve_segments: every check that needs no metadata value
// (dtypes, devices, ndim, shapes, initial). lay.offsets stays empty. Used by the
// CUDA backend, whose metadata lives on the device.
SegmentLayout resolve_layout(const char* op, const TensorView& data, const Segments& seg);

// The value half: validates host metadata `m` (unless unsafe) with the same rules
// and messages as resolve_segments, and fills lay.offsets (clamped, monotone).
void normalise_offsets(const char* op, SegmentLayout& lay, const TensorView& m, bool use_lengths, bool unsafe);

// The API entry points with a stream: `stream` is a cudaStream_t (nullptr = the
// default stream) for CUDA tensors and ignored on the CPU. The public functions
// of segred/segment_reduce.h call these with the default stream. Device work is
// queued on `stream`; the only synchronisation is the metadata copy to the host
// that validation needs when seg.unsafe is false.
void segment_reduce_out_stream(const TensorView& data, Reduce reduce, const Segments& seg, const TensorView& out,
                               void* stream);
void segment_reduce_backward_out_stream(const TensorView& grad, const TensorView& output, const TensorView& data,
                                        Reduce reduce, const Segments& seg, Tie tie, const TensorView& grad_input,
                                        void* stream);

// Wraps a Python-style axis into [0, ndim) or throws ValueError naming `argname`.
int64_t wrap_axis(const char* op, const char* argname, int64_t axis, int64_t ndim);

// Throws ValueError unless `initial` is representable in dtype (finite stays finite).
void check_initial(const char* op, double initial, DType dtype);

}  // namespace segred::detail
