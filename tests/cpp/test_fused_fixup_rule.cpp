// flat_reduce's fused fix-up (src/cuda/fused_fixup_rule.h, session 12) replayed on
// the CPU: a host partition of the merge space into tiles of `items` merge items,
// each tile's carry and head as exact integer partials (sums of position ids),
// then every tile's publications and waits as fuse_fixup makes them, the tiles
// advanced in random interleavings (a waiting tile only moves on once what it
// waits for is published). Checks, for every layout: every wait is on a lower
// tile (so the lowest unfinished tile can always move: no deadlock); each
// crossing segment is finished exactly once, by its completing tile, with the
// exact total (re-read, short, or through the runs' parts); no other segment is
// finished by the fix-up; no slot is written twice. Small `items` give long segments (> kFuseShort carries, several runs)
// cheaply. It runs on every machine: a rule error shows up here, not on the H200.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "src/cuda/fused_fixup_rule.h"

namespace segred::testing {
namespace {

namespace fuse = segred::cuda::fuse;

struct Layout {
  std::vector<int64_t> q;  // U + 1 segment starts, q[U] = N
  int64_t U = 0, N = 0;
};

struct Tiles {
  int64_t W = 0;
  std::vector<int64_t> ti, tj;  // W + 1 boundaries
  std::vector<int64_t> carry;   // W: positions' sum of the segment open at the tile's end
  std::vector<int64_t> head;    // W: positions' sum of the crossing segment the tile completes
  std::vector<bool> has_head;
};

// The merge order: segment v's positions q[v] .. q[v+1]-1, then its end item.
Tiles partition(const Layout& L, int64_t items) {
  Tiles t;
  const int64_t D = L.U + L.N;
  t.W = (D + items - 1) / items;
  t.ti.assign(size_t(t.W + 1), 0);
  t.tj.assign(size_t(t.W + 1), 0);
  t.carry.assign(size_t(t.W), 0);
  t.head.assign(size_t(t.W), 0);
  t.has_head.assign(size_t(t.W), false);
  int64_t i = 0, j = 0;  // ends and positions consumed
  for (int64_t d = 0; d <= D; ++d) {
    if (d % items == 0 || d == D) {
      const int64_t w = d == D ? t.W : d / items;
      t.ti[size_t(w)] = i;
      t.tj[size_t(w)] = j;
    }
    if (d == D) break;
    if (i < L.U && j >= L.q[size_t(i + 1)])
      ++i;  // the end item of segment i
    else
      ++j;  // position j
  }
  EXPECT_EQ(i, L.U);
  EXPECT_EQ(j, L.N);
  for (int64_t w = 0; w < t.W; ++w) {
    const int64_t i0 = t.ti[size_t(w)], i1 = t.ti[size_t(w + 1)];
    const int64_t j0 = t.tj[size_t(w)], j1 = t.tj[size_t(w + 1)];
    if (i1 < L.U)  // segment i1 is open at the end: its positions in [j0, j1)
      for (int64_t p = std::max(j0, L.q[size_t(i1)]); p < j1; ++p) t.carry[size_t(w)] += p + 1;
    if (i1 > i0 && L.q[size_t(i0)] < j0) {  // flat_reduce's head condition
      t.has_head[size_t(w)] = true;
      for (int64_t p = j0; p < L.q[size_t(i0 + 1)]; ++p) t.head[size_t(w)] += p + 1;
    }
  }
  return t;
}

struct Replay {
  const Layout& L;
  int64_t items;
  const Tiles& t;
  std::vector<int64_t> pub, part;  // published values
  std::vector<bool> pub_set, part_set;
  std::vector<int> stage;          // per tile: 0 carry to publish, 1 run part, 2 head, 3 done
  std::vector<int> finished;       // per segment: times finished by the fix-up
  std::vector<int64_t> result;     // per segment
  int fired_runs = 0, fired_long = 0, fired_reread = 0, fired_short = 0;

  Replay(const Layout& l, int64_t it, const Tiles& tt) : L(l), items(it), t(tt) {
    pub.assign(size_t(t.W + 1), 0);
    part.assign(size_t(t.W + 1), 0);
    pub_set.assign(size_t(t.W + 1), false);
    part_set.assign(size_t(t.W + 1), false);
    stage.assign(size_t(t.W), 0);
    finished.assign(size_t(L.U), 0);
    result.assign(size_t(L.U), 0);
  }
  int64_t fct(int64_t v) const { return fuse::first_carry_tile<int64_t>(v, L.q[size_t(v)], items); }
  void publish(std::vector<int64_t>& a, std::vector<bool>& set, int64_t at, int64_t v) {
    EXPECT_FALSE(set[size_t(at)]) << "slot " << at << " published twice";
    a[size_t(at)] = v;
    set[size_t(at)] = true;
  }
  // One step of tile w when what it waits for is there; false when it must wait.
  bool step(int64_t w) {
    const int64_t t_open = t.ti[size_t(w + 1)];
    int& st = stage[size_t(w)];
    if (st == 0) {
      if (t_open < L.U) publish(pub, pub_set, w, t.carry[size_t(w)]);
      st = 1;
      return true;
    }
    if (st == 1) {
      if (t_open < L.U) {
        const int64_t w0 = fct(t_open), we = fct(t_open + 1);
        EXPECT_LE(w0, w);
        EXPECT_LT(w, we);
        if (fuse::is_long(w0, we)) {
          int64_t rs = 0, re = 0;
          fuse::run_of<int64_t>(w, w0, we, rs, re);
          EXPECT_LE(rs, w);
          EXPECT_LT(w, re);
          if (w == re - 1) {
            for (int64_t k = rs; k < re; ++k) {
              EXPECT_LE(k, w) << "a run's last tile waits on a higher tile";
              if (!pub_set[size_t(k)]) return false;
            }
            int64_t p = 0;
            for (int64_t k = rs; k < re; ++k) p += pub[size_t(k)];
            publish(part, part_set, rs, p);
            ++fired_runs;
          }
        }
      }
      st = 2;
      return true;
    }
    if (st == 2) {
      if (t.has_head[size_t(w)]) {
        const int64_t th = t.ti[size_t(w)], w0 = fct(th);
        EXPECT_LT(w0, w);
        int64_t acc = 0;
        const int64_t before = t.tj[size_t(w)] - L.q[size_t(th)];
        if (fuse::reread(before)) {  // no wait: the positions before the tile re-read
          for (int64_t p = L.q[size_t(th)]; p < t.tj[size_t(w)]; ++p) acc += p + 1;
          ++fired_reread;
        } else if (!fuse::is_long(w0, w)) {
          for (int64_t p = w0; p < w; ++p)
            if (!pub_set[size_t(p)]) return false;
          for (int64_t p = w0; p < w; ++p) acc += pub[size_t(p)];
          ++fired_short;
        } else {
          for (int64_t m = 0; m < fuse::runs(w0, w); ++m) {
            const int64_t slot = fuse::run_slot(m, w0);
            int64_t rs = 0, re = 0;
            fuse::run_of<int64_t>(slot, w0, w, rs, re);
            EXPECT_EQ(rs, slot) << "run " << m << " of a segment does not start at its slot";
            EXPECT_LT(re - 1, w) << "the completing tile waits on a higher tile";
            if (!part_set[size_t(slot)]) return false;
          }
          for (int64_t m = 0; m < fuse::runs(w0, w); ++m) acc += part[size_t(fuse::run_slot(m, w0))];
          ++fired_long;
        }
        acc += t.head[size_t(w)];
        ++finished[size_t(th)];
        result[size_t(th)] = acc;
      }
      st = 3;
      return true;
    }
    return false;
  }
};

int g_fired_long = 0, g_fired_runs = 0, g_fired_reread = 0, g_fired_short = 0;  // paths reached (asserted)

void check_layout(const Layout& L, int64_t items, std::mt19937_64& rng, const char* what, int orders = 3) {
  SCOPED_TRACE(::testing::Message() << what << ": U " << L.U << ", N " << L.N << ", items " << items);
  const Tiles t = partition(L, items);
  for (int o = 0; o < orders; ++o) {
    Replay r(L, items, t);
    // Interleavings: in index order, in reverse (every tile tries before the
    // lower ones it waits for), and random picks among the unfinished tiles.
    std::vector<int64_t> live(size_t(t.W));
    std::iota(live.begin(), live.end(), 0);
    if (o == 1) std::reverse(live.begin(), live.end());
    while (!live.empty()) {
      bool moved = false;
      for (size_t k = 0; k < live.size();) {
        const size_t pick = o >= 2 ? k + size_t(rng() % (live.size() - k)) : k;
        std::swap(live[k], live[pick]);
        const int64_t w = live[k];
        while (r.step(w)) moved = true;
        if (r.stage[size_t(w)] == 3) {
          live[k] = live.back();
          live.pop_back();
        } else {
          ++k;
        }
      }
      ASSERT_TRUE(moved) << "no tile can move: the waits form a cycle";
    }
    g_fired_long += r.fired_long;
    g_fired_runs += r.fired_runs;
    g_fired_reread += r.fired_reread;
    g_fired_short += r.fired_short;
    for (int64_t s = 0; s < L.U; ++s) {
      const int64_t w0 = r.fct(s), we = r.fct(s + 1);
      const bool crossing = w0 < we && L.q[size_t(s)] < t.tj[size_t(we)];
      ASSERT_EQ(r.finished[size_t(s)], crossing ? 1 : 0) << "segment " << s << " (carries " << w0 << ".." << we << ")";
      if (!crossing) continue;
      int64_t want = 0;
      for (int64_t p = L.q[size_t(s)]; p < L.q[size_t(s + 1)]; ++p) want += p + 1;
      ASSERT_EQ(r.result[size_t(s)], want) << "segment " << s;
    }
  }
}

Layout from_lengths(const std::vector<int64_t>& len) {
  Layout L;
  L.U = int64_t(len.size());
  L.q.assign(size_t(L.U + 1), 0);
  for (int64_t v = 0; v < L.U; ++v) L.q[size_t(v + 1)] = L.q[size_t(v)] + len[size_t(v)];
  L.N = L.q[size_t(L.U)];
  return L;
}

TEST(FusedFixupRule, EveryCrossingSegmentFinishedOnceWithItsTotal) {
  std::mt19937_64 rng(12);
  g_fired_long = g_fired_runs = g_fired_reread = g_fired_short = 0;
  // The benchmark's shapes, scaled: equal short segments, few long ones, one
  // huge beside many singles, exponential lengths with empty segments.
  for (const int64_t items : {3, 4, 7, 16, 512}) {
    check_layout(from_lengths(std::vector<int64_t>(700, 32)), items, rng, "equal 32");
    check_layout(from_lengths(std::vector<int64_t>(5, 5000)), items, rng, "5 x 5000");
    std::vector<int64_t> huge(3000, 1);
    huge[1] = 70000;
    check_layout(from_lengths(huge), items, rng, "huge beside singles");
    std::exponential_distribution<double> ex(1.0 / 40);
    std::vector<int64_t> e(2000);
    for (auto& v : e) v = int64_t(ex(rng));
    check_layout(from_lengths(e), items, rng, "exponential");
  }
  EXPECT_GT(g_fired_long, 0);
  EXPECT_GT(g_fired_runs, g_fired_long);
  EXPECT_GT(g_fired_reread, 0);
  EXPECT_GT(g_fired_short, 0);
}

TEST(FusedFixupRule, RunAndShortBoundaries) {
  // Segments whose carry counts sit at the short/long edge (kFuseShort, +1) and
  // at run edges (multiples of kFuseRun, +-1), at every start phase within a tile
  // and a chunk; empty segments between them; a segment ending exactly at a tile end.
  std::mt19937_64 rng(7);
  g_fired_long = g_fired_runs = g_fired_reread = g_fired_short = 0;
  const int64_t items = 4;
  std::vector<int64_t> len;
  for (const int64_t carries :
       {int64_t(1), int64_t(2), int64_t(fuse::kFuseShort) - 1, int64_t(fuse::kFuseShort), int64_t(fuse::kFuseShort) + 1,
        int64_t(fuse::kFuseShort) + 2, fuse::kFuseRun - 1, fuse::kFuseRun, fuse::kFuseRun + 1, 2 * fuse::kFuseRun + 3}) {
    for (int64_t phase = 0; phase < items + 1; ++phase) {
      len.push_back(carries * items - 1 + phase % 3);
      len.push_back(0);
      len.push_back(phase);
    }
  }
  check_layout(from_lengths(len), items, rng, "edges", 6);
  for (int64_t shift = 1; shift < 9; ++shift) {
    std::vector<int64_t> l2(size_t(shift), 1);
    l2.insert(l2.end(), len.begin(), len.end());
    check_layout(from_lengths(l2), items, rng, "edges shifted", 3);
  }
  // The whole tensor one segment, and all segments empty but one position.
  check_layout(from_lengths({int64_t(50000)}), 8, rng, "one segment");
  check_layout(from_lengths({0, 0, 0, 1, 0, 0}), 1, rng, "singletons");
  EXPECT_GT(g_fired_long, 0);
  EXPECT_GT(g_fired_runs, g_fired_long);
  EXPECT_GT(g_fired_reread, 0);
  EXPECT_GT(g_fired_short, 0);
}

}  // namespace
}  // namespace segred::testing
