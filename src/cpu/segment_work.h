// How the CPU segment kernels split work across threads, independent of the
// length distribution (the CPU form of the merge-path lead in PERFORMANCE.md).
//
// A segment of n rows (each row = `inner` features) with n <= piece_rows is one
// task, handled whole by one thread. A longer segment is cut into pieces of
// piece_rows rows, and each piece into feature tiles of kFeatureTile; every
// (piece, tile) is a task, and the pieces' partial results are combined in
// piece order afterwards. The cut depends only on n and piece_rows (Plan.chunk),
// never on the thread count, so results are bitwise reproducible on any machine
// with the same build, and one segment of 2^26 beside a million segments of 1
// keeps every core busy.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "src/core/segments.h"

namespace segred::cpu {

constexpr int64_t kFeatureTile = 1024;

struct LongSegment {
  int64_t row, seg;      // which segment
  int64_t begin, n;      // rows [begin, begin + n) of the row's axis
  int64_t pieces;        // ceil(n / piece_rows)
  int64_t first_piece;   // index of its first piece in the global piece list
};

struct WorkSplit {
  int64_t piece_rows = 1;
  int64_t tiles = 1;  // feature tiles per piece
  std::vector<LongSegment> longs;
  int64_t total_pieces = 0;
};

inline WorkSplit split_work(const detail::SegmentLayout& lay, int64_t piece_rows) {
  WorkSplit w;
  w.piece_rows = std::max<int64_t>(1, piece_rows);
  w.tiles = std::max<int64_t>(1, (lay.inner + kFeatureTile - 1) / kFeatureTile);
  for (int64_t r = 0; r < lay.outer; ++r) {
    const int64_t* o = lay.row(r);
    for (int64_t s = 0; s < lay.S; ++s) {
      const int64_t n = o[s + 1] - o[s];
      if (n <= w.piece_rows) continue;
      const int64_t pieces = (n + w.piece_rows - 1) / w.piece_rows;
      w.longs.push_back({r, s, o[s], n, pieces, w.total_pieces});
      w.total_pieces += pieces;
    }
  }
  return w;
}

// Task t of the long-segment phase -> (long segment index, piece, tile). Tasks of
// one segment are consecutive; a binary search finds the segment.
struct PieceTask {
  int64_t li, piece, tile;
};
inline PieceTask piece_task(const WorkSplit& w, int64_t t) {
  const int64_t piece_global = t / w.tiles;
  const int64_t tile = t % w.tiles;
  auto it = std::upper_bound(w.longs.begin(), w.longs.end(), piece_global,
                             [](int64_t v, const LongSegment& l) { return v < l.first_piece; });
  const int64_t li = int64_t(it - w.longs.begin()) - 1;
  return {li, piece_global - w.longs[size_t(li)].first_piece, tile};
}

}  // namespace segred::cpu
