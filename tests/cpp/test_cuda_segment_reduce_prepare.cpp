// The CUDA call preparation of segment_reduce and the ragged softmax (prepare,
// src/cuda/segment_reduce.cu: one cooperative kernel) against a host reference: the merge space q of segment_geometry.h built
// from the metadata clamped exactly like the CPU clamps it, and the W + 1 tile
// boundaries of the merge path (the split of diagonal w * items: the first
// segment end v with q[v + 1] > d - v - 1), for awkward metadata: empty segments
// at both ends, one huge segment beside 1M segments of 1, lengths and offsets,
// offsets not starting at 0, int32 and int64 metadata, batched metadata on
// axis > 0, every tile size (512 / 1024 flat items, 32 feature items), the
// 64-bit q of the prod backward, invalid metadata (safe: the CPU's error;
// unsafe: clamped, scan fallback across tile edges), and unsafe = true never
// synchronising (the call is captured into a CUDA graph). Offsets calls take both
// partition forms (PrepArgs::spec, SegmentTestCaps::prep_spec): the tiles
// searched from the raw offsets before the drop check or after it, redone from
// q after the scan when the offsets drop; and the search from q after the sync.
//
// Every test skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>

#include "tests/cpp/segment_reduce_test_util.h"

#ifdef SEGRED_WITH_CUDA
#include <cuda_runtime.h>

#include "segred/stream.h"
#include "src/core/segment_geometry.h"
#include "src/cuda/merge_space_probe.h"

namespace segred::testing {
namespace {


Tensor dev(const TensorView& h) { return Tensor::copy_to(Tensor::contiguous_copy(h), kGpu); }
Tensor host(const TensorView& d) { return Tensor::copy_to(d, DeviceRef{}); }

// Host reference of q (segment_geometry.h) for raw row-major metadata of `outer`
// rows of k entries, clamped like the CPU: lengths: saturating running sum of
// clamp(len, 0, L); offsets: o[0] = clamp(in[0], 0, L), o[i] = clamp(in[i], o[i-1], L).
std::vector<int64_t> ref_q(const std::vector<int64_t>& meta, int64_t outer, int64_t k, int64_t L, bool lengths) {
  const int64_t S = lengths ? k : k - 1;
  std::vector<int64_t> q{0};
  for (int64_t r = 0; r < outer; ++r) {
    std::vector<int64_t> o(size_t(S + 1));
    const int64_t* in = meta.data() + r * k;
    if (lengths) {
      o[0] = 0;
      for (int64_t s = 0; s < S; ++s) o[size_t(s + 1)] = std::min(o[size_t(s)] + std::clamp<int64_t>(in[s], 0, L), L);
    } else {
      o[0] = std::clamp<int64_t>(in[0], 0, L);
      for (int64_t i = 1; i <= S; ++i) o[size_t(i)] = std::clamp<int64_t>(in[i], o[size_t(i - 1)], L);
    }
    for (int64_t s = 0; s <= S; ++s) q.push_back(r * L + o[size_t(s)]);
  }
  q.push_back(outer * L);
  return q;
}

// Host reference partition: tile w starts at diagonal d = min(w * items, U + N),
// split into i segment ends and j = d - i positions, i the first v in
// [max(0, d - N), min(d, U)) with q[v + 1] > d - v - 1 (else the upper bound).
void ref_partition(const std::vector<int64_t>& q, int64_t U, int64_t N, int64_t W, int64_t items,
                   std::vector<int64_t>& ti, std::vector<int64_t>& tj) {
  ti.assign(size_t(W + 1), 0);
  tj.assign(size_t(W + 1), 0);
  for (int64_t w = 0; w <= W; ++w) {
    const int64_t d = std::min(w * items, U + N);
    int64_t lo = std::max<int64_t>(d - N, 0), hi = std::min(d, U);
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (q[size_t(mid + 1)] <= d - mid - 1)
        lo = mid + 1;
      else
        hi = mid;
    }
    ti[size_t(w)] = lo;
    tj[size_t(w)] = d - lo;
  }
}

// First index where a and b differ (sizes included), for a short message.
::testing::AssertionResult same_vec(const char* what, const std::vector<int64_t>& got,
                                    const std::vector<int64_t>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what << ": " << got.size() << " entries, want " << want.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i])
      return ::testing::AssertionFailure() << what << "[" << i << "] = " << got[i] << ", want " << want[i] << " (of "
                                           << got.size() << ")";
  return ::testing::AssertionSuccess();
}

struct Meta {
  std::vector<int64_t> v;
  Shape shape;  // [outer..., k] or [k]
  bool lengths;
};

// SegmentTestCaps::prep_spec for one scope, how an offsets call without a drop
// partitions: 0 from the raw offsets before prepare's grid.sync, 1 prepare's
// rule, 2 from q after the sync, 3 from the raw offsets after it, 4 scattered by
// the segments before the sync (session 33; long segments' boundaries after it), 5
// (the default) prep_scatter_rule's choice of 4 or 0.
struct PrepSpec {
  int old;
  explicit PrepSpec(int v) : old(detail::segment_test_caps().prep_spec.exchange(v)) {}
  ~PrepSpec() { detail::segment_test_caps().prep_spec = old; }
};
constexpr int kPrepSpecModes[] = {0, 1, 2, 3, 4, 5};

cuda::MergeSpaceProbe expect_prepare_once(const Shape& shape, int64_t axis, DType dt, const Meta& m, DType it,
                                          bool unsafe, Reduce red, Direction dir);

// prepare's outputs for data of `shape` (axis, dtype) and metadata m, against
// the host reference, with every partition form (PrepSpec): offsets that drop
// (unsafe) make the raw offsets' partition wrong, and the scan must redo it.
void expect_prepare(const Shape& shape, int64_t axis, DType dt, const Meta& m, DType it, bool unsafe,
                    Reduce red = Reduce::Sum, Direction dir = Direction::Fwd) {
  for (int spec : kPrepSpecModes) {
    SCOPED_TRACE(::testing::Message() << "prep_spec " << spec);
    PrepSpec guard(spec);
    expect_prepare_once(shape, axis, dt, m, it, unsafe, red, dir);
  }
}

// Returns the probe, for tests that also assert which form ran.
cuda::MergeSpaceProbe expect_prepare_once(const Shape& shape, int64_t axis, DType dt, const Meta& m, DType it,
                                          bool unsafe, Reduce red, Direction dir) {
  SCOPED_TRACE(::testing::Message() << "data " << shape_string(shape) << " axis " << axis << " " << dtype_name(dt)
                                    << (m.lengths ? " lengths " : " offsets ") << shape_string(m.shape) << " "
                                    << dtype_name(it) << (unsafe ? " unsafe" : " safe"));
  const Tensor data = Tensor::empty(shape, dt, kGpu);  // prepare reads no data
  const Tensor md = dev(make_index(m.v, m.shape, it));
  Segments sd;
  (m.lengths ? sd.lengths : sd.offsets) = md.view();
  sd.axis = axis;
  sd.unsafe = unsafe;
  const cuda::MergeSpaceProbe p = cuda::probe_merge_space(data.view(), sd, red, dir);
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= shape[size_t(d)];
  const int64_t L = shape[size_t(axis)];
  const int64_t k = m.shape.back();
  const int64_t S = m.lengths ? k : k - 1;
  const int64_t U = outer * (S + 1) + 1, N = outer * L;
  EXPECT_EQ(p.segs, U);
  EXPECT_EQ(p.positions, N);
  const std::vector<int64_t> q = ref_q(m.v, outer, k, L, m.lengths);
  EXPECT_TRUE(same_vec("q", p.q, q));
  // The scan may run for lengths, and for offsets only when unsafe (validated
  // offsets never drop: q is the speculative pass alone).
  EXPECT_EQ(p.scan_tiles > 0, outer * k > 0 && (m.lengths || unsafe));
  if (!p.tiles) return p;
  std::vector<int64_t> ti, tj;
  ref_partition(q, U, N, p.workers, p.items, ti, tj);
  EXPECT_TRUE(same_vec("tile_i", p.tile_i, ti));
  EXPECT_TRUE(same_vec("tile_j", p.tile_j, tj));
  EXPECT_EQ(p.long_count, 0);
  return p;
}

Meta offsets_of(const std::vector<int64_t>& lens, int64_t start = 0) {
  Meta m{{start}, {int64_t(lens.size()) + 1}, false};
  for (int64_t l : lens) m.v.push_back(m.v.back() + l);
  return m;
}
Meta lengths_of(const std::vector<int64_t>& lens) { return {lens, {int64_t(lens.size())}, true}; }
int64_t total(const std::vector<int64_t>& lens) {
  int64_t s = 0;
  for (int64_t l : lens) s += l;
  return s;
}

const DType kIndexTypes[] = {DType::Int32, DType::Int64};
// Flat tiles of 512 (4- and 8-byte) and 1024 (16-bit) merge items.
const DType kDataTypes[] = {DType::Float32, DType::BFloat16, DType::Float64, DType::Float16};

TEST(CudaSegmentReducePrepare, SmallAwkwardMetadata) {
  SEGRED_NEED_GPU();
  const std::vector<int64_t> ends_empty{0, 0, 5, 0, 3, 1, 0, 0};
  for (DType it : kIndexTypes)
    for (bool unsafe : {false, true}) {
      // Empty segments at start and end, lengths and offsets.
      expect_prepare({9}, 0, DType::Float32, lengths_of(ends_empty), it, unsafe);
      expect_prepare({9}, 0, DType::Float32, offsets_of(ends_empty), it, unsafe);
      // Offsets not starting at 0, ending before L (both ghosts non-empty).
      expect_prepare({12}, 0, DType::Float32, Meta{{3, 5, 5, 9}, {4}, false}, it, unsafe);
      // One segment; no segment at all (offsets: one entry; lengths: unsafe
      // only, since safe lengths must sum to L); lengths short of L (unsafe).
      expect_prepare({7}, 0, DType::Float32, lengths_of({7}), it, unsafe);
      expect_prepare({7}, 0, DType::Float32, Meta{{4}, {1}, false}, it, unsafe);
      if (unsafe) {
        expect_prepare({7}, 0, DType::Float32, Meta{{}, {0}, true}, it, unsafe);
        expect_prepare({12}, 0, DType::BFloat16, lengths_of({2, 3}), it, unsafe);
      }
      // Features (32-item tiles), axis 0.
      expect_prepare({9, 5}, 0, DType::Float32, offsets_of(ends_empty), it, unsafe);
    }
}

TEST(CudaSegmentReducePrepare, RandomMetadataEveryTileSize) {
  SEGRED_NEED_GPU();
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (DType dt : kDataTypes)
    for (DType it : kIndexTypes) {
      // ~5000 segments (5 scan tiles), lengths 0-40 with empty runs.
      std::vector<int64_t> lens(5000);
      for (auto& l : lens) l = rng() % 5 == 0 ? 0 : int64_t(rng() % 41);
      const int64_t T = total(lens), L = T + 17;  // offsets: leading or trailing ghost of 17
      expect_prepare({T}, 0, dt, lengths_of(lens), it, false);
      expect_prepare({L}, 0, dt, offsets_of(lens), it, false);
      expect_prepare({L}, 0, dt, offsets_of(lens, 17), it, true);  // valid, unsafe: no drop, scan returns at once
      expect_prepare({T, 3}, 0, dt, lengths_of(lens), it, false);  // features
    }
}

// Batched metadata on axis > 0: rows of different totals, row edges inside scan
// tiles and merge tiles.
TEST(CudaSegmentReducePrepare, BatchedAxisOne) {
  SEGRED_NEED_GPU();
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const int64_t R = 3, S = 1500;
  std::vector<std::vector<int64_t>> rows(R, std::vector<int64_t>(S));
  int64_t L = 0;
  for (auto& row : rows) {
    for (auto& l : row) l = int64_t(rng() % 9);
    L = std::max(L, total(row));
  }
  L += 4;
  Meta lm{{}, {R, S}, true}, om{{}, {R, S + 1}, false};
  for (auto& row : rows) {
    int64_t o = int64_t(rng() % 5);  // offsets not starting at 0, rows ending before L
    om.v.push_back(o);
    for (int64_t l : row) om.v.push_back(o = std::min(o + l, L));
    row.back() += L - total(row);  // lengths rows sum to L (the last segment of each row takes the rest)
    lm.v.insert(lm.v.end(), row.begin(), row.end());
  }
  for (DType it : kIndexTypes)
    for (bool unsafe : {false, true}) {
      expect_prepare({R, L}, 1, DType::Float32, lm, it, unsafe);
      expect_prepare({R, L}, 1, DType::BFloat16, om, it, unsafe);
      expect_prepare({R, L, 2}, 1, DType::Float32, lm, it, unsafe);
      expect_prepare({R, L, 8}, 1, DType::BFloat16, om, it, unsafe);
    }
}

// Session 8: phases 1-2 walk each scan block's range as 8 warp ranges in steps of
// 32 items. Short batched rows put several row edges inside every step (k = 1, 3,
// 31, 32, 33 metadata entries per row), warp ranges start and end mid-row, and
// some warps of the last block have no items; lengths rows with negative and
// huge entries (unsafe: clamped, saturating) as well.
TEST(CudaSegmentReducePrepare, ShortBatchedRowsInsideWarpSteps) {
  SEGRED_NEED_GPU();
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (int64_t S : {int64_t(1), int64_t(3), int64_t(31), int64_t(32), int64_t(33)}) {
    const int64_t R = 9000 / S + 37;  // thousands of items: several scan blocks and warp steps
    const int64_t L = 3 * S + 5;
    Meta lm{{}, {R, S}, true}, om{{}, {R, S + 1}, false}, um{{}, {R, S}, true};
    for (int64_t r = 0; r < R; ++r) {
      int64_t o = int64_t(rng() % 3), rest = L;
      om.v.push_back(o);
      for (int64_t i = 0; i < S; ++i) {
        const int64_t l = i + 1 == S ? rest : std::min<int64_t>(rest, int64_t(rng() % 5));
        rest -= l;
        lm.v.push_back(l);  // rows sum to L
        om.v.push_back(o = std::min(o + int64_t(rng() % 5), L));
        um.v.push_back(rng() % 11 == 0 ? -3 : (rng() % 13 == 0 ? L + 100 : int64_t(rng() % 5)));
      }
    }
    SCOPED_TRACE(::testing::Message() << "S " << S << " rows " << R);
    for (DType it : kIndexTypes) {
      expect_prepare({R, L}, 1, DType::Float32, lm, it, false);
      expect_prepare({R, L}, 1, DType::BFloat16, om, it, true);
      expect_prepare({R, L, 2}, 1, DType::Float32, um, it, true);
    }
  }
}

// One huge segment beside 1M segments of 1 (first or last): many merge tiles
// inside one segment, ~1000 scan tiles of look-back.
TEST(CudaSegmentReducePrepare, HugeSegmentBesideOneMillionOnes) {
  SEGRED_NEED_GPU();
  const int64_t huge = int64_t(1) << 22, ones = int64_t(1) << 20;
  for (bool huge_first : {true, false}) {
    std::vector<int64_t> lens(size_t(ones), 1);
    lens.insert(huge_first ? lens.begin() : lens.end(), huge);
    const int64_t L = huge + ones;
    for (DType it : kIndexTypes) {
      expect_prepare({L}, 0, DType::Float32, lengths_of(lens), it, false);
      expect_prepare({L}, 0, DType::BFloat16, offsets_of(lens), it, true);
      expect_prepare({L}, 0, DType::Float32, offsets_of(lens), it, false);
    }
  }
}

// Session 33: prep_spec 4 scatters the partition by the segments; each of its
// three forms is reached and gives the reference tiles: no segment with more than
// 16 boundaries (1), long segments' records written after the sync (2), and more
// than 64 records in a block or more than 64 blocks with records, where the
// search after the sync runs instead (3). Records at the merge space's start and
// end (a long first segment, a long tail after the last offset) included.
TEST(CudaSegmentReducePrepare, ScatterFormsEveryCase) {
  SEGRED_NEED_GPU();
  PrepSpec guard(4);
  for (DType dt : {DType::Float32, DType::BFloat16}) {
    const int64_t items = dt == DType::BFloat16 ? 1024 : 512;
    struct Case {
      const char* name;
      std::vector<int64_t> lens;
      int64_t start, tail;  // positions before the first offset and after the last
      int form;
    };
    std::vector<Case> cases;
    cases.push_back({"short", std::vector<int64_t>(3000, 16), 0, 0, 1});
    cases.push_back({"short, offset start and tail", std::vector<int64_t>(3000, 16), 7, 5, 1});
    {
      std::vector<int64_t> l(3000, 16);
      l[1234] = 40 * items + 5;
      cases.push_back({"one long", l, 0, 0, 2});
      l[0] = 17 * items;  // a long first segment and a long tail
      cases.push_back({"long first and tail", l, 0, 20 * items + 3, 2});
    }
    {
      std::vector<int64_t> l(100, 20 * items + 1);  // 100 records in one block
      cases.push_back({"100 long in a block", l, 0, 0, 3});
    }
    {
      std::vector<int64_t> l(70 * 1024, 1);  // one long segment in each of 70 scan blocks
      for (size_t i = 500; i < l.size(); i += 1024) l[i] = 17 * items;
      cases.push_back({"70 blocks with records", l, 0, 0, 3});
    }
    for (const Case& c : cases)
      for (DType it : kIndexTypes)
        for (bool unsafe : {true, false}) {
          SCOPED_TRACE(::testing::Message() << c.name << " " << dtype_name(dt) << " " << dtype_name(it)
                                            << (unsafe ? " unsafe" : " safe"));
          const Meta m = offsets_of(c.lens, c.start);
          const int64_t L = c.start + total(c.lens) + c.tail;
          const cuda::MergeSpaceProbe p = expect_prepare_once({L}, 0, dt, m, it, unsafe, Reduce::Sum, Direction::Fwd);
          ASSERT_EQ(p.items, items);
          EXPECT_EQ(p.scatter_form, c.form);
        }
  }
}

// Session 33: the default (prep_spec 5) takes the scatter where prep_scatter_rule
// says so and the search before the sync elsewhere, and each gives the reference
// tiles: short segments in one round a scan block (scattered), 2M segments of 4 (four
// rounds: searched), 64 segments of 40 tiles (long on average: searched), one long
// segment among 3000 short ones (scattered, with a record).
TEST(CudaSegmentReducePrepare, DefaultFollowsTheScatterRule) {
  SEGRED_NEED_GPU();
  PrepSpec guard(5);
  const int64_t items = 512;  // float32 flat tiles
  struct Case {
    const char* name;
    std::vector<int64_t> lens;
    bool scatter;
  };
  std::vector<int64_t> one_long(3000, 16);
  one_long[77] = 40 * items;
  const Case cases[] = {{"3000 x 16", std::vector<int64_t>(3000, 16), true},
                        {"2M x 4", std::vector<int64_t>(size_t(2) << 20, 4), false},
                        {"64 x 40 tiles", std::vector<int64_t>(64, 40 * items), false},
                        {"one long among 3000", one_long, true}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Meta m = offsets_of(c.lens);
    const int64_t L = total(c.lens);
    const cuda::MergeSpaceProbe p =
        expect_prepare_once({L}, 0, DType::Float32, m, DType::Int64, true, Reduce::Sum, Direction::Fwd);
    ASSERT_EQ(p.items, items);
    if (c.scatter)
      EXPECT_GE(p.scatter_form, 1);
    else
      EXPECT_EQ(p.scatter_form, 0);
  }
}

// The prod backward has no tiles and a 64-bit q.
TEST(CudaSegmentReducePrepare, ProdBackwardQ64) {
  SEGRED_NEED_GPU();
  for (DType it : kIndexTypes)
    for (bool unsafe : {false, true}) {
      expect_prepare({13}, 0, DType::Float32, lengths_of({0, 4, 0, 9, 0}), it, unsafe, Reduce::Prod, Direction::Bwd);
      expect_prepare({20, 3}, 0, DType::Float32, offsets_of({0, 4, 0, 9, 0}, 2), it, unsafe, Reduce::Prod,
                     Direction::Bwd);
    }
}

// Invalid metadata: safe calls raise the CPU's error; unsafe calls build the
// clamped q, with drops of the offsets at scan-tile edges (1024 items), inside a
// thread's 4 items, at the last item, hidden by the clamp; negative, huge and
// saturating lengths.
TEST(CudaSegmentReducePrepare, InvalidMetadata) {
  SEGRED_NEED_GPU();
  for (DType it : kIndexTypes) {
    const Meta bad[] = {{{3, -1, 8}, {3}, true}, {{0, 7, 3, 10}, {4}, false}, {{-1, 3, 10}, {3}, false},
                        {{0, 3, 11}, {3}, false}};
    for (const Meta& m : bad) {
      const Tensor data_h = filled({10}, DType::Float32, 1.0);
      Segments sh, sd;
      const Tensor mh = make_index(m.v, m.shape, it), md = dev(mh);
      (m.lengths ? sh.lengths : sh.offsets) = mh.view();
      (m.lengths ? sd.lengths : sd.offsets) = md.view();
      const std::string cpu = error_of([&] { segment_reduce(data_h, Reduce::Sum, sh); });
      const Tensor data = dev(data_h);
      const std::string gpu = error_of([&] { cuda::probe_merge_space(data.view(), sd); });
      EXPECT_NE(cpu, "no error");
      EXPECT_EQ(gpu, cpu);
      expect_prepare({10}, 0, DType::Float32, m, it, true);
    }
    const int64_t k = 5000, L = 3 * k;
    for (int64_t at : {int64_t(1024), int64_t(2047), int64_t(2048), int64_t(1006), k - 1, int64_t(-1), int64_t(-2)}) {
      Meta m{std::vector<int64_t>(size_t(k)), {k}, false};
      for (int64_t i = 0; i < k; ++i) m.v[size_t(i)] = 3 * i;
      if (at >= 0) m.v[size_t(at)] -= 7;
      if (at == -2) {  // above L and dropping: clamped, no drop
        m.v[size_t(k - 2)] = L + 50;
        m.v[size_t(k - 1)] = L + 10;
      }
      SCOPED_TRACE(::testing::Message() << "drop at " << at);
      expect_prepare({L}, 0, DType::Float32, m, it, true);
      expect_prepare({L, 2}, 0, DType::BFloat16, m, it, true);
    }
    Meta lm{{}, {4000}, true};
    for (int64_t i = 0; i < 4000; ++i)
      lm.v.push_back(i % 97 == 0 ? -5 : (i % 1777 == 0 ? (it == DType::Int32 ? (int64_t(1) << 30) : (int64_t(1) << 40)) : i % 7));
    expect_prepare({9000}, 0, DType::Float32, lm, it, true);  // saturates at L mid-way
    Meta bm{{}, {3, 1201}, false};                            // batched, unsafe, drops in rows 1 and 2
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t i = 0; i <= 1200; ++i) bm.v.push_back(r == 0 ? i : (i == 600 + r ? 5 : 2 * i - 40));
    expect_prepare({3, 2000}, 1, DType::Float32, bm, it, true);
  }
}

// Session 6: prepare raises long_count[1] when a crossing segment may span more
// than kShortFix (32) tiles, and fixup_tree skips its grid.sync and phases 2-3
// when it is 0. The flag must be 1 whenever fixup_tree's phase 1 would list a
// segment (tile we of its end minus tile w0 of its predecessor's end > 32, from
// the probe's q and tiles), and it should be 0 for short segments (else the
// early exit never runs). CudaSegmentReduce.SegmentsAroundTheLongFixupThreshold
// checks the results around the same threshold.
// Session 15: offsets (every partition form, PrepSpec) as well as lengths.
TEST(CudaSegmentReducePrepare, LongSegmentFlag) {
  SEGRED_NEED_GPU();
  for (DType dt : {DType::Float32, DType::BFloat16})
    for (int meta = 0; meta < 7; ++meta) {  // lengths; offsets with prep_spec = meta - 1
      const int64_t items = dt == DType::BFloat16 ? 1024 : 512;
      PrepSpec guard(meta == 0 ? 0 : meta - 1);
      for (int64_t k : {int64_t(0), int64_t(28), int64_t(30), int64_t(31), int64_t(32), int64_t(33), int64_t(40)}) {
        std::vector<int64_t> lens(3000, 16);
        if (k > 0) lens[1234] = k * items + 5;
        const int64_t L = total(lens);
        const Tensor data = Tensor::empty({L}, dt, kGpu);
        const Meta m = meta == 0 ? lengths_of(lens) : offsets_of(lens);
        const Tensor md = dev(make_index(m.v, m.shape, DType::Int64));
        Segments sd;
        (meta == 0 ? sd.lengths : sd.offsets) = md.view();
        sd.unsafe = meta != 0;  // offsets: the drop check decides, as in the benchmark's calls
        const cuda::MergeSpaceProbe p = cuda::probe_merge_space(data.view(), sd);
        ASSERT_EQ(p.items, items);
        bool listed = false;  // fixup_tree's phase-1 rule, on the probe's q and tiles
        for (int64_t w = 0; w < p.workers; ++w) {
          const int64_t t = p.tile_i[size_t(w)];
          if (!(p.tile_i[size_t(w + 1)] > t && p.q[size_t(t)] < p.tile_j[size_t(w)])) continue;
          const int64_t w0 = t == 0 ? 0 : (t - 1 + p.q[size_t(t)]) / items;
          listed = listed || w - w0 > 32;
        }
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " segment of " << k << " tiles, "
                                          << (meta == 0 ? "lengths" : "offsets, prep_spec ") << (meta == 0 ? 0 : meta - 1));
        if (listed) EXPECT_EQ(p.long_flag, 1);
        if (k == 0 || k == 28) EXPECT_EQ(p.long_flag, 0) << "short segments must let fixup_tree skip its grid.sync";
        if (k == 40) EXPECT_TRUE(listed);
      }
    }
}

// unsafe = true never synchronises: the whole call (prepare included) is
// captured into a CUDA graph, which a synchronisation or a device-to-host copy
// would break; the replay equals the eager call.
TEST(CudaSegmentReducePrepare, UnsafeCallIsGraphCapturable) {
  SEGRED_NEED_GPU();
  const int64_t k = 3000, L = 3 * k;
  std::vector<double> x(static_cast<size_t>(L));
  for (size_t i = 0; i < x.size(); ++i) x[i] = double(int64_t(i * 7 % 11) - 5);
  const Tensor d = dev(make_tensor(x, {L}, DType::Float32));
  std::vector<int64_t> offs(static_cast<size_t>(k)), lens(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) {
    offs[size_t(i)] = i == 1500 ? 3 * i - 8 : 3 * i;  // one drop: the scan runs inside the graph
    lens[size_t(i)] = i % 5;
  }
  for (bool lengths : {false, true}) {
    SCOPED_TRACE(lengths ? "lengths" : "offsets");
    const Tensor md = dev(make_index(lengths ? lens : offs, {k}, DType::Int64));
    Segments sd;
    (lengths ? sd.lengths : sd.offsets) = md.view();
    sd.unsafe = true;
    const Tensor want = host(segment_reduce(d, Reduce::Sum, sd));  // also warms every cache
    Tensor out = Tensor::empty(want.sizes(), DType::Float32, kGpu);
    ASSERT_EQ(cudaMemset(out.data(), 0xff, size_t(out.numel()) * 4), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    cudaGraph_t g = nullptr;
    std::string err;
    cudaError_t e;
    {
      StreamGuard guard(s);
      ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
      err = error_of([&] { segment_reduce_out(d, Reduce::Sum, sd, out); });
      e = cudaStreamEndCapture(s, &g);
    }
    EXPECT_EQ(err, "no error");
    ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
    cudaGraphExec_t ge = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(ge, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    const auto a = to_vec(want), b = to_vec(host(out));
    EXPECT_EQ(a, b);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    cudaStreamDestroy(s);
  }
}

// Session 26: the wave fit reaches the call (src/core/segment_geometry.h, feat_wave_items).
// 2d_64kx16_f128 in bf16, max backward: the call plans with the device's SMs and the
// resident blocks of its feature kernel (the occupancy query), and its merge items are
// the pure plan's for those facts. On the H200 (132 SMs; feat_maxmin_bwd bf16 at 64
// registers: 4 blocks of 256 per SM) that is 132 items, where the plan without the facts
// says 128. The sum backward keeps no records and plans without them (32 items).
TEST(CudaSegmentReducePrepare, WaveFitReachesTheCall) {
  SEGRED_NEED_GPU();
  const int64_t R = int64_t(1) << 20, S = 65536;
  const Tensor data = Tensor::empty({R, 128}, DType::BFloat16, kGpu);  // prepare reads no data
  const Tensor md = dev(make_index(std::vector<int64_t>(size_t(S), 16), {S}, DType::Int64));
  Segments sd;
  sd.lengths = md.view();
  sd.unsafe = true;
  const cuda::MergeSpaceProbe p = cuda::probe_merge_space(data.view(), sd, Reduce::Max, Direction::Bwd);
  EXPECT_GT(p.sm_count, 0);
  EXPECT_GE(p.feat_blocks_per_sm, 1);
  SegmentProblem prob;
  prob.backend = Backend::CUDA;
  prob.direction = Direction::Bwd;
  prob.reduce = Reduce::Max;
  prob.dtype = DType::BFloat16;
  prob.axis_len = R;
  prob.inner = 128;
  prob.num_segments = S;
  prob.sm_count = p.sm_count;
  prob.feat_blocks_per_sm = p.feat_blocks_per_sm;
  EXPECT_EQ(p.items, plan_segment_reduce(prob).chunk);
  if (p.sm_count == 132 && p.feat_blocks_per_sm == 4) EXPECT_EQ(p.items, 132);
  std::printf("wave fit: %d SMs, %d blocks per SM, %lld items\n", p.sm_count, p.feat_blocks_per_sm,
              static_cast<long long>(p.items));
  const cuda::MergeSpaceProbe ps = cuda::probe_merge_space(data.view(), sd, Reduce::Sum, Direction::Bwd);
  EXPECT_EQ(ps.feat_blocks_per_sm, 0);
  EXPECT_EQ(ps.items, 32);
}

}  // namespace
}  // namespace segred::testing

#endif  // SEGRED_WITH_CUDA
