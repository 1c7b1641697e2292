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
  // segment s of row r is [row(r)[s], row(r)[s+1]). They live in `offsets` (owned),
  // or, with OffsetStorage::Borrow, at `borrowed`: the caller's own metadata when it
  // is already valid contiguous int64 offsets (read in place, nothing written), else
  // a per-thread scratch buffer reused from call to call (no fresh pages to fault in
  // on every call). Borrowed offsets are valid until the calling thread normalises
  // metadata again or the caller's metadata changes: i.e. for one API call.
  std::vector<int64_t> offsets;
  const int64_t* borrowed = nullptr;
  const int64_t* row(int64_t r) const { return (borrowed ? borrowed : offsets.data()) + r * (S + 1); }
};

enum class OffsetStorage { Own, Borrow };

// Checks data and metadata (op names the caller in messages, e.g. "segment_reduce")
// and returns the resolved layout, its offsets borrowed (OffsetStorage::Borrow: valid
// for the current call). Throws ValueError/TypeError naming the argument.
SegmentLayout resolve_segments(const char* op, const TensorView& data, const Segments& seg);

// The shape half of resolve_segments: every check that needs no metadata value
// (dtypes, devices, ndim, shapes, initial). lay.offsets stays empty. Used by the
// CUDA backend, whose metadata lives on the device.
SegmentLayout resolve_layout(const char* op, const TensorView& data, const Segments& seg);

// The value half: validates host metadata `m` (unless unsafe) with the same rules
// and messages as resolve_segments, and fills the layout's offsets (clamped,
// monotone): lay.offsets with Own, lay.borrowed with Borrow (see SegmentLayout).
// Large metadata is validated and scanned on all threads (a blocked segmented
// scan); the first invalid entry is reported exactly as a serial pass would.
void normalise_offsets(const char* op, SegmentLayout& lay, const TensorView& m, bool use_lengths, bool unsafe,
                       OffsetStorage storage = OffsetStorage::Own);

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
