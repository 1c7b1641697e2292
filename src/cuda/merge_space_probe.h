// Test probe of the CUDA call preparation (host-callable; no CUDA headers): runs
// prepare exactly as a segment_reduce call over (data, seg) would (validation
// unless seg.unsafe, the geometry the call would use, the same kernels on the
// current stream) and copies its outputs back, so a test can compare them with a
// host reference of the merge space and the partition (segment_geometry.h).
// Synchronises the stream (it reads the results back). Defined in segment_reduce.cu.
#pragma once
#include <cstdint>
#include <vector>

#include "segred/segment_reduce.h"
#include "segred/trace.h"

namespace segred::cuda {

struct MergeSpaceProbe {
  int index_bits = 0;
  int64_t segs = 0, positions = 0, workers = 0, items = 0;  // U, N, tiles (W), merge items per tile
  bool tiles = false;    // a partition was built (every path but prod backward)
  int scan_tiles = 0;    // blocks of prepare that may run the scan (0: none can)
  std::vector<int64_t> q;               // U + 1 entries
  std::vector<int64_t> tile_i, tile_j;  // W + 1 entries each (empty without tiles)
  int64_t long_count = -1;              // the fix-up counter after prepare (0), -1 without tiles
  int64_t long_flag = -1;   // prepare's "a crossing segment may span > kShortFix tiles" (0/1), -1 without tiles
  // prep_spec 4 (session 33): 1 scattered, 2 scattered with long segments' records, 3 too many
  // records (the search after the sync); 0 another form, or the scan ran; -1 without tiles
  int scatter_form = -1;
  int sm_count = 0, feat_blocks_per_sm = 0;  // the wave fit's device facts the call planned with (SegmentProblem)
};

MergeSpaceProbe probe_merge_space(const TensorView& data, const Segments& seg, Reduce reduce = Reduce::Sum,
                                  Direction dir = Direction::Fwd);

}  // namespace segred::cuda
