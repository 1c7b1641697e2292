// segred/segment_reduce.h: segment reductions and their backward (SEMANTICS.md).
//
// data is viewed as [outer, L, inner]: outer = prod(data.shape[:axis]),
// L = data.shape[axis], inner = prod(data.shape[axis+1:]). Each of the outer rows
// has its own S segments (metadata row r = lengths[r, :] or offsets[r, :]).
//
// Preconditions (checked; a violation throws segred::ValueError/TypeError naming
// the argument, the row and the rule):
//  - data: float32/float64/float16/bfloat16, ndim >= 1, any strides.
//  - exactly one of lengths/offsets, int32 or int64, ndim == axis + 1,
//    shape[:-1] == data.shape[:axis].
//  - unless unsafe: lengths >= 0 and each row sums to L; offsets non-decreasing
//    per row, offsets[..., 0] >= 0, offsets[..., -1] <= L.
//  - unsafe = true skips those checks; segments are still clamped into [0, L],
//    so no metadata can make segred read or write outside its tensors.
//  - outputs given to *_out must be contiguous, of the documented shape and dtype,
//    and must not alias an input.
//
// CUDA: data, metadata and outputs on the same CUDA device. These functions queue
// their kernels on the calling thread's current stream (segred/stream.h: the
// default stream unless a StreamGuard is alive; the framework bindings set it to
// the caller's stream). unsafe =
// false copies the metadata to the host to validate it (one synchronisation);
// unsafe = true never synchronises.
#pragma once
#include <optional>
#include <string_view>

#include "segred/plan.h"
#include "segred/tensor.h"

namespace segred {

enum class Reduce : uint8_t { Sum, Mean, Max, Min, Prod };
enum class Tie : uint8_t { Split, First, Last };

// "sum" | "mean" | "max" | "min" | "prod" | "amax" | "amin"; anything else: ValueError.
Reduce parse_reduce(std::string_view s);
// "split" | "first" | "last"; anything else: ValueError.
Tie parse_tie(std::string_view s);
std::string_view to_string(Reduce r);
std::string_view to_string(Tie t);

// How the segments are described: exactly one of lengths / offsets.
struct Segments {
  std::optional<TensorView> lengths;
  std::optional<TensorView> offsets;
  int64_t axis = 0;               // wrapped like a Python index
  bool unsafe = false;            // skip metadata validation (segments still clamped)
  std::optional<double> initial;  // replaces the start value of every segment
};

// Shape of segment_reduce's output: data.shape with axis replaced by S.
Shape segment_reduce_output_shape(const TensorView& data, const Segments& seg);

Tensor segment_reduce(const TensorView& data, Reduce reduce, const Segments& seg);
void segment_reduce_out(const TensorView& data, Reduce reduce, const Segments& seg,
                        const TensorView& out);

// grad and output have the output's shape; the result has data's shape and dtype.
// seg.unsafe is honoured as in the forward.
Tensor segment_reduce_backward(const TensorView& grad, const TensorView& output,
                               const TensorView& data, Reduce reduce, const Segments& seg,
                               Tie tie = Tie::Split);
void segment_reduce_backward_out(const TensorView& grad, const TensorView& output,
                                 const TensorView& data, Reduce reduce, const Segments& seg,
                                 Tie tie, const TensorView& grad_input);

// The problem a plan is made for: everything the path choice may depend on.
struct SegmentProblem {
  Backend backend = Backend::CPU;
  Direction direction = Direction::Fwd;
  Reduce reduce = Reduce::Sum;
  DType dtype = DType::Float32;
  DType index_dtype = DType::Int64;
  int64_t outer = 1;         // rows with their own metadata
  int64_t axis_len = 0;      // L
  int64_t inner = 1;         // features reduced independently
  int64_t num_segments = 0;  // S per row
  // CUDA device facts the feature work split depends on (src/core/segment_geometry.h,
  // feat_wave_items). The launcher fills them from the device: the multiprocessors, and
  // the resident 256-thread blocks per SM of the feature kernel the call runs (the
  // occupancy query). 0 blocks (the default): not known, no wave fit.
  int sm_count = 132;
  int feat_blocks_per_sm = 0;
};

// Pure: which path, index width and work split a call would use. No allocation,
// no device access; valid for sizes far beyond memory.
Plan plan_segment_reduce(const SegmentProblem& p);

}  // namespace segred
