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

// Phase 1 of every CPU segment kernel: the short segments (n <= piece_rows), each
// whole, on all threads; returns the split of the long ones for phase 2.
//
// The flattened segments t = r * S + s are cut into blocks of about kBlockWork work
// units, a segment costing its n * inner elements plus kSegCost (the per-segment
// set-up, so a million segments of 1 are not one block). cost(t) is monotone in t,
// so each block finds its own bounds by binary search on the offsets: no serial
// O(S) pass. Blocks are scheduled dynamically; body(state, r, s, t0, t1, has_long)
// runs segments t0..t1-1 starting at row r, segment s, and must skip segments
// longer than piece_rows (has_long: whether there are any). Each block also lists
// its long segments, joined in block order, so the long-segment split is the same
// as a serial scan would give.
// Below kSerialWork units everything runs on the calling thread (waking the team
// costs more than a small call).
constexpr int64_t kBlockWork = int64_t(1) << 16, kSegCost = 16, kSerialWork = int64_t(1) << 15;

template <class MakeState, class Body>
WorkSplit run_short_segments(const detail::SegmentLayout& lay, int64_t piece_rows, MakeState make_state, Body body) {
  WorkSplit w;
  w.piece_rows = std::max<int64_t>(1, piece_rows);
  w.tiles = std::max<int64_t>(1, (lay.inner + kFeatureTile - 1) / kFeatureTile);
  const int64_t S = lay.S, T = lay.outer * S, L = lay.L, inner = lay.inner;
  if (T == 0) return w;
  auto cost = [&](int64_t t) {  // monotone in t
    const int64_t r = t == T ? lay.outer - 1 : t / S, s = t - r * S;
    return (r * L + lay.row(r)[s]) * inner + kSegCost * t;
  };
  const int64_t total = cost(T) - cost(0);
  const int64_t blocks = std::max<int64_t>(1, total / kBlockWork);
  // First t with cost(t) - cost(0) >= k * total / blocks, known to be >= from: galloping
  // from `from`, then a binary search, so that a search from the previous bound touches
  // only the offsets between the two (the ones those blocks then read).
  auto bound = [&](int64_t k, int64_t from) {
    if (k == 0) return int64_t(0);
    if (k == blocks) return T;
    const int64_t target = cost(0) + int64_t((__int128)total * k / blocks);
    int64_t lo = from, hi = from;
    for (int64_t step = 1; hi < T && cost(hi) < target; step *= 2) {  // every t < lo is below target
      lo = hi + 1;
      hi = std::min(T, hi + step);
    }
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (cost(mid) >= target) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  };
  // f(r, row r's offsets, s, cnt) for each stretch [s, s + cnt) of one row of t0..t1-1.
  auto for_stretches = [&](int64_t r, int64_t s, int64_t t0, int64_t t1, auto f) {
    const int64_t* o = lay.row(r);
    for (int64_t t = t0; t < t1;) {
      const int64_t cnt = std::min(t1 - t, S - s);
      f(r, o, s, cnt);
      t += cnt;
      s += cnt;
      if (s == S) {
        s = 0;
        o = lay.row(++r);
      }
    }
  };
  // The block bounds, each found once (a block's end is the next one's start), a
  // thread's consecutive ones from its previous one: every search's last steps miss
  // the cache on a large offsets array (two binary searches a block were ~6% of the
  // 1d_exp40 bf16 forward's samples, session 37).
  std::vector<int64_t> bounds(static_cast<size_t>(blocks + 1));
  std::vector<std::vector<LongSegment>> longs(static_cast<size_t>(blocks));
#pragma omp parallel if (total >= kSerialWork && blocks > 1)
  {
    int64_t prev_k = -2, prev_b = 0;  // this thread's last bound
#pragma omp for schedule(static)
    for (int64_t k = 0; k <= blocks; ++k) {
      const int64_t b = bound(k, prev_k == k - 1 ? prev_b : 0);
      bounds[size_t(k)] = b;
      prev_k = k;
      prev_b = b;
    }
    auto state = make_state();
#pragma omp for schedule(dynamic, 1)
    for (int64_t k = 0; k < blocks; ++k) {
      const int64_t t0 = bounds[size_t(k)], t1 = bounds[size_t(k + 1)];
      if (t0 == t1) continue;
      const int64_t r0 = t0 / S, s0 = t0 - r0 * S;
      // Whether the block holds a long segment, per stretch of one row: none when
      // the stretch spans at most piece_rows rows (lengths are >= 0), which a block
      // of about kBlockWork units of short segments does: one subtraction per
      // stretch. Otherwise a branch-free max of the lengths (a few instructions per
      // segment). Before the body, so that it can skip its own search for long
      // segments (the backward's runs: ~8 instructions per segment, ~18% of the
      // 1d_seg32 bf16 sum backward's kernel samples).
      bool has_long = false;
      for_stretches(r0, s0, t0, t1, [&](int64_t, const int64_t* o, int64_t s, int64_t cnt) {
        if (has_long || o[s + cnt] - o[s] <= w.piece_rows) return;
        int64_t mx = 0;
        for (int64_t i = s; i < s + cnt; ++i) mx = std::max(mx, o[i + 1] - o[i]);
        has_long = mx > w.piece_rows;
      });
      body(state, r0, s0, t0, t1, has_long);
      // The block's long segments, in order (the listing only where one is long).
      if (has_long)
        for_stretches(r0, s0, t0, t1, [&](int64_t r, const int64_t* o, int64_t s, int64_t cnt) {
          for (int64_t i = s; i < s + cnt; ++i) {
            const int64_t n = o[i + 1] - o[i];
            if (n > w.piece_rows) longs[size_t(k)].push_back({r, i, o[i], n, (n + w.piece_rows - 1) / w.piece_rows, 0});
          }
        });
    }
  }
  for (auto& bl : longs)
    for (LongSegment& l : bl) {
      l.first_piece = w.total_pieces;
      w.total_pieces += l.pieces;
      w.longs.push_back(l);
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
