// CPU kernel entry points. Inputs are contiguous [outer, L, inner] (the API layer
// copies strided inputs); outputs are contiguous and fully written.
#pragma once
#include <atomic>
#include <cstdint>
#include <optional>

#include "segred/plan.h"
#include "segred/segment_reduce.h"
#include "src/core/segments.h"

namespace segred::cpu {

void segment_reduce_fwd(const Plan& plan, const detail::SegmentLayout& lay, const TensorView& data, Reduce reduce,
                        std::optional<double> initial, const TensorView& out);

void segment_reduce_bwd(const Plan& plan, const detail::SegmentLayout& lay, const TensorView& grad,
                        const TensorView& output, const TensorView& data, Reduce reduce,
                        std::optional<double> initial, Tie tie, const TensorView& grad_input);

// How far ahead (bytes) the short-segment kernels prefetch their data stream
// (SrPrefetch: the forward's reads, the max/min backward's tie pass); 0 turns the
// prefetch off. A benchmark knob (bench/NOTES.md, session 36): no result depends
// on it.
std::atomic<int64_t>& segment_prefetch_bytes();

}  // namespace segred::cpu
