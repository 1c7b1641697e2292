// What a CUDA call over segments does before its own kernels, shared by
// segment_reduce and the ragged softmax family (defined in src/cuda/segment_reduce.cu):
// metadata validation on the host (the CPU's rules and messages), contiguous
// copies of strided inputs, and the merge space q with its tile partition and the
// fix-up counter, built on the device by one cooperative kernel (prepare) from the
// raw metadata, clamped exactly like the CPU clamps it.
#pragma once
#include "segred/segment_reduce.h"
#include "src/core/segments.h"
#include "src/cuda/segment_reduce_impl.cuh"

namespace segred::cuda {

// unsafe = false: copies the metadata to the host (one synchronisation) and
// validates it; fills lay's offsets.
void validate_metadata(const char* op, detail::SegmentLayout& lay, const Segments& seg, cudaStream_t s);

// The contiguous form of a device tensor: itself, or a copy in `scratch`.
const void* contiguous_input(const char* op, const char* name, const TensorView& t, Scratch& scratch,
                             cudaStream_t s);

bool is_aligned16(const void* p);

// Arena bytes prepare_merge_space takes for c.geo (segs, positions, workers = tiles, items).
template <class Idx>
size_t merge_space_bytes(const detail::SegmentLayout& lay, const Segments& seg, const detail::SegmentGeometry& geo,
                         bool tiles = true);

// Queues prepare on c.stream: fills c.q, c.tile_i, c.tile_j, c.long_list and
// c.long_count ([0] the fix-up counter, 0; [1] 1 when a crossing segment may span
// more than kShortFix tiles) from c.arena; records the launch under c.path.
// tiles = false: q only (the ragged softmax's lane-group path needs no partition).
template <class Idx>
void prepare_merge_space(const char* op, const detail::SegmentLayout& lay, const Segments& seg, LaunchCtx& c,
                         bool tiles = true);

}  // namespace segred::cuda
