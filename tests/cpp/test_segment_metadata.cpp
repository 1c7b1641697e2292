// Segment metadata normalisation (src/core/segments.cpp) and the CPU block
// schedule (src/cpu/segment_work.h) at sizes that take the parallel paths.
//
// normalise_offsets validates and scans large metadata on all threads (a blocked
// segmented scan). These tests hold it against the serial definition written out
// here (SEMANTICS.md: clamped running sum of lengths, running max of offsets,
// both inside [0, L]) on random valid and invalid metadata, int32 and int64,
// batched rows, and check that invalid metadata far into a large tensor gives the
// message for the first invalid entry, as a serial pass would.
#include <gtest/gtest.h>

#include <omp.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "src/core/segments.h"
#include "src/cpu/stream_store.h"
#include "tests/cpp/segment_reduce_test_util.h"

namespace segred::detail {
// src/core/segments.cpp's test hook: normalise_offsets calls on this thread whose
// lengths took the fused pass for valid lengths.
int64_t& fused_lengths_calls();
}  // namespace segred::detail

namespace segred::testing {
namespace {

// The serial definition, independent of the library's code.
std::vector<int64_t> expected_offsets(const std::vector<int64_t>& meta, int64_t rows, int64_t k, int64_t L,
                                      bool use_lengths) {
  const int64_t S = use_lengths ? k : k - 1;
  std::vector<int64_t> o(size_t(rows * (S + 1)));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t* in = meta.data() + r * k;
    int64_t* out = o.data() + r * (S + 1);
    if (use_lengths) {
      out[0] = 0;
      for (int64_t i = 0; i < S; ++i) out[i + 1] = std::min(L, out[i] + std::clamp<int64_t>(in[i], 0, L));
    } else {
      out[0] = std::clamp<int64_t>(in[0], 0, L);
      for (int64_t i = 0; i < S; ++i) out[i + 1] = std::clamp<int64_t>(in[i + 1], out[i], L);
    }
  }
  return o;
}

detail::SegmentLayout layout(int64_t rows, int64_t L, int64_t S) {
  detail::SegmentLayout lay;
  lay.outer = rows;
  lay.L = L;
  lay.S = S;
  return lay;
}

std::vector<int64_t> row_of(const detail::SegmentLayout& lay) {
  std::vector<int64_t> v;
  for (int64_t r = 0; r < lay.outer; ++r) v.insert(v.end(), lay.row(r), lay.row(r) + lay.S + 1);
  return v;
}

// Valid metadata with S segments per row (lengths summing to L, or offsets).
std::vector<int64_t> valid_meta(std::mt19937_64& rng, int64_t rows, int64_t S, int64_t L, bool use_lengths) {
  std::vector<int64_t> v;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int64_t> cuts(size_t(S - 1));
    std::uniform_int_distribution<int64_t> d(0, L);
    for (auto& c : cuts) c = d(rng);
    std::sort(cuts.begin(), cuts.end());
    std::vector<int64_t> off = {0};
    off.insert(off.end(), cuts.begin(), cuts.end());
    off.push_back(L);
    if (use_lengths)
      for (int64_t i = 0; i < S; ++i) v.push_back(off[size_t(i + 1)] - off[size_t(i)]);
    else
      v.insert(v.end(), off.begin(), off.end());
  }
  return v;
}

std::string error_of(const detail::SegmentLayout& lay0, const Tensor& m, bool use_lengths) {
  detail::SegmentLayout lay = lay0;
  try {
    detail::normalise_offsets("segment_reduce", lay, m, use_lengths, false);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "no error";
}

TEST(SegmentMetadata, ParallelScanEqualsSerialDefinition) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "SEGRED_SEED=" << seed);
  std::mt19937_64 rng(seed);
  for (bool use_lengths : {true, false})
    for (DType it : {DType::Int64, DType::Int32})
      for (int64_t rows : {1, 3})
        for (bool unsafe : {false, true}) {
          const int64_t S = 70001, L = 900000, k = use_lengths ? S : S + 1;
          SCOPED_TRACE(::testing::Message() << "lengths=" << use_lengths << " " << dtype_name(it) << " rows=" << rows
                                            << " unsafe=" << unsafe);
          std::vector<int64_t> meta = valid_meta(rng, rows, S, L, use_lengths);
          if (unsafe) {  // garbage: negatives, values past L, decreasing runs
            std::uniform_int_distribution<int64_t> pos(0, int64_t(meta.size()) - 1), val(-50, L + 50);
            for (int i = 0; i < 3000; ++i) meta[size_t(pos(rng))] = val(rng);
          }
          const Tensor m = make_index(meta, {rows, k}, it);
          const auto want = expected_offsets(meta, rows, k, L, use_lengths);
          for (auto storage : {detail::OffsetStorage::Own, detail::OffsetStorage::Borrow}) {
            auto lay = layout(rows, L, S);
            detail::normalise_offsets("segment_reduce", lay, m, use_lengths, unsafe, storage);
            EXPECT_EQ(row_of(lay), want);
          }
        }
}

TEST(SegmentMetadata, ValidContiguousInt64OffsetsAreReadInPlace) {
  std::mt19937_64 rng(7);
  const int64_t S = 100000, L = 1 << 20;
  const auto meta = valid_meta(rng, 2, S, L, false);
  const Tensor m = make_index(meta, {2, S + 1}, DType::Int64);
  auto lay = layout(2, L, S);
  detail::normalise_offsets("segment_reduce", lay, m, false, false, detail::OffsetStorage::Borrow);
  EXPECT_EQ(lay.borrowed, m.ptr<int64_t>());
  EXPECT_TRUE(lay.offsets.empty());
  EXPECT_EQ(row_of(lay), meta);
  // Owned storage (the CUDA backend's host copy) never aliases the input.
  auto own = layout(2, L, S);
  detail::normalise_offsets("segment_reduce", own, m, false, false);
  EXPECT_EQ(own.borrowed, nullptr);
  EXPECT_EQ(row_of(own), meta);
}

// Invalid metadata deep inside a large row: the message names the first invalid
// entry (the serial pass's message), whatever the threads saw first.
TEST(SegmentMetadata, LargeInvalidMetadataReportsTheFirstInvalidEntry) {
  std::mt19937_64 rng(11);
  const int64_t S = 200000, L = 1 << 21;
  for (DType it : {DType::Int64, DType::Int32}) {
    SCOPED_TRACE(dtype_name(it));
    {  // two negative lengths: the first one is reported
      auto meta = valid_meta(rng, 2, S, L, true);
      meta[size_t(S + 150000)] = -1;
      meta[size_t(S + 190000)] = -2;
      const std::string e = error_of(layout(2, L, S), make_index(meta, {2, S}, it), true);
      EXPECT_NE(e.find("lengths[row 1][150000] = -1 must be >= 0"), std::string::npos) << e;
    }
    {  // a length that overshoots L in the middle of row 0
      auto meta = valid_meta(rng, 1, S, L, true);
      meta[123456] += L;
      const std::string e = error_of(layout(1, L, S), make_index(meta, {1, S}, it), true);
      EXPECT_NE(e.find("its first 123457 entries already sum to more"), std::string::npos) << e;
    }
    {  // lengths that sum to less than L
      auto meta = valid_meta(rng, 1, S, L, true);
      *std::max_element(meta.begin(), meta.end()) -= 1;
      const std::string e = error_of(layout(1, L, S), make_index(meta, {1, S}, it), true);
      EXPECT_NE(e.find("must sum to data.shape[axis] = " + std::to_string(L) + ", got " + std::to_string(L - 1)),
                std::string::npos) << e;
    }
    {  // decreasing offsets at two places: the first is reported
      auto meta = valid_meta(rng, 1, S, L, false);
      meta[170000] = meta[169999] - 1;
      meta[180000] = -5;
      const std::string e = error_of(layout(1, L, S), make_index(meta, {1, S + 1}, it), false);
      EXPECT_NE(e.find("non-decreasing, but offsets[170000]"), std::string::npos) << e;
    }
    {  // the last offset past L
      auto meta = valid_meta(rng, 1, S, L, false);
      meta[size_t(S)] = L + 1;
      const std::string e = error_of(layout(1, L, S), make_index(meta, {1, S + 1}, it), false);
      EXPECT_NE(e.find("offsets[row 0][-1] = " + std::to_string(L + 1)), std::string::npos) << e;
    }
  }
}

// Valid lengths take a fused one-pass scan (lengths_valid_scan); anything it cannot
// prove valid goes to the general pass. Held against the serial definition: many
// short rows (row ends inside and at the edges of the per-thread chunks, carries
// across several chunks), 1..7 threads, int32 and int64; lengths so large that
// the fused pass cannot rule out overflow (valid ones too: the general pass
// decides), sums that wrap around 2^64 back to L, negative int32 lengths.
TEST(SegmentMetadata, FusedLengthsScanEqualsSerialDefinition) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "SEGRED_SEED=" << seed);
  std::mt19937_64 rng(seed);
  const int saved = omp_get_max_threads();
  struct Restore {
    int n;
    ~Restore() { omp_set_num_threads(n); }
  } restore{saved};
  for (int threads : {1, 2, 3, 7}) {
    omp_set_num_threads(threads);
    for (DType it : {DType::Int64, DType::Int32})
      for (int64_t S : {1, 2, 3, 7, 40}) {
        const int64_t rows = (int64_t(1) << 17) / S + 5, L = 3 * S + 1;
        SCOPED_TRACE(::testing::Message() << "threads=" << threads << " " << dtype_name(it) << " S=" << S);
        const auto meta = valid_meta(rng, rows, S, L, true);
        const Tensor m = make_index(meta, {rows, S}, it);
        const auto want = expected_offsets(meta, rows, S, L, true);
        for (bool unsafe : {false, true}) {
          auto lay = layout(rows, L, S);
          const int64_t fused = detail::fused_lengths_calls();
          detail::normalise_offsets("segment_reduce", lay, m, true, unsafe, detail::OffsetStorage::Borrow);
          EXPECT_EQ(row_of(lay), want);
          EXPECT_EQ(detail::fused_lengths_calls(), fused + 1) << "valid lengths must take the fused pass";
        }
        // One row off by one (its last length), far in: the serial message.
        auto bad = meta;
        bad[size_t((rows - 3) * S + S - 1)] += 1;
        const std::string e = error_of(layout(rows, L, S), make_index(bad, {rows, S}, it), true);
        EXPECT_NE(e.find("lengths[row " + std::to_string(rows - 3) + "]"), std::string::npos) << e;
        auto lay = layout(rows, L, S);
        detail::normalise_offsets("segment_reduce", lay, make_index(bad, {rows, S}, it), true, true);
        EXPECT_EQ(row_of(lay), expected_offsets(bad, rows, S, L, true));
      }
  }
  for (int threads : {2, 3, 7}) {  // one long row over every chunk: carries through several chunks
    omp_set_num_threads(threads);
    SCOPED_TRACE(::testing::Message() << "one row, threads=" << threads);
    const int64_t S = (int64_t(1) << 17) + 3, L = 5 * S;
    const auto meta = valid_meta(rng, 1, S, L, true);
    auto lay = layout(1, L, S);
    const int64_t fused = detail::fused_lengths_calls();
    detail::normalise_offsets("segment_reduce", lay, make_index(meta, {1, S}, DType::Int64), true, false);
    EXPECT_EQ(row_of(lay), expected_offsets(meta, 1, S, L, true));
    EXPECT_EQ(detail::fused_lengths_calls(), fused + 1);
  }
  omp_set_num_threads(saved);
  const int64_t fused = detail::fused_lengths_calls();  // none of the cases below takes the fused pass
  const int64_t big = int64_t(1) << 62;
  {  // valid, but too large for the fused pass's overflow bound: the general pass accepts it
    const std::vector<int64_t> meta = {big, 0, 0, 0};
    auto lay = layout(1, big, 4);
    detail::normalise_offsets("segment_reduce", lay, make_index(meta, {1, 4}, DType::Int64), true, false);
    EXPECT_EQ(row_of(lay), (std::vector<int64_t>{0, big, big, big, big}));
  }
  {  // 4 * 2^62 + 5 wraps to 5 = L: rejected (validating), clamped (unsafe)
    const std::vector<int64_t> meta = {big, big, big, big, 5};
    const Tensor m = make_index(meta, {1, 5}, DType::Int64);
    const std::string e = error_of(layout(1, 5, 5), m, true);
    EXPECT_NE(e.find("lengths[row 0] must sum to data.shape[axis] = 5, but its first 1 entries already sum to more"),
              std::string::npos) << e;
    auto lay = layout(1, 5, 5);
    detail::normalise_offsets("segment_reduce", lay, m, true, true);
    EXPECT_EQ(row_of(lay), (std::vector<int64_t>{0, 5, 5, 5, 5, 5}));
  }
  {  // a negative int32 length in a row that sums to L
    const std::vector<int64_t> meta = {3, -1, 4};
    const Tensor m = make_index(meta, {1, 3}, DType::Int32);
    const std::string e = error_of(layout(1, 6, 3), m, true);
    EXPECT_NE(e.find("lengths[row 0][1] = -1 must be >= 0"), std::string::npos) << e;
    auto lay = layout(1, 6, 3);
    detail::normalise_offsets("segment_reduce", lay, m, true, true);
    EXPECT_EQ(row_of(lay), expected_offsets(meta, 1, 3, 6, true));
  }
  EXPECT_EQ(detail::fused_lengths_calls(), fused);
}

// The phase-1 block schedule at a size that runs many blocks on all threads:
// batched rows of short segments (empty ones included) with long segments (past
// Plan.chunk) in the middle, sum/mean/max/min forward and backward against the
// float64 reference.
TEST(SegmentMetadata, BlockScheduleManySegmentsBatchedWithLongOnes) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "SEGRED_SEED=" << seed);
  std::mt19937_64 rng(seed);
  const int64_t L = 160000;
  std::vector<std::vector<int64_t>> rows;
  for (int r = 0; r < 3; ++r) {
    std::vector<int64_t> row = random_lengths(rng, 40000, 12);
    row.push_back(70000 + r);  // longer than a piece (2^16 scalars)
    const int64_t used = 40000 + 70000 + r;
    auto tail = random_lengths(rng, L - used, 5);
    row.insert(row.end(), tail.begin(), tail.end());
    rows.push_back(row);
  }
  const size_t S = std::max({rows[0].size(), rows[1].size(), rows[2].size()});
  for (auto& row : rows) row.resize(S, 0);  // pad with empty segments
  // prod is left out: a product of 70000 values in +-[0.9, 1.1] leaves float32's
  // range; the long prod split has its own tests (SegmentReduceLong).
  Layout lay = from_lengths({3, L}, 1, rows);
  for (const char* r : {"sum", "mean", "max", "min"}) {
    check_reduce(lay, DType::Float32, r, random_data(rng, 3 * L, r, DType::Float32), rng);
    lay.use_lengths = false;
    check_reduce(lay, DType::BFloat16, r, random_data(rng, 3 * L, r, DType::BFloat16), rng);
    lay.use_lengths = true;
  }
}

// grad_input through the streaming stage (stream_store.h), forced on small
// outputs: the same bits as the ordinary stores, for every reduce, flat and
// features, short and long segments, at odd alignments (a view starting one
// element into its buffer).
TEST(SegmentMetadata, StreamedGradInputSameBitsAsPlainStores) {
  std::mt19937_64 rng(5);
  struct Restore {
    int64_t saved = cpu::stream_output_bytes();
    ~Restore() { cpu::stream_output_bytes() = saved; }
  } restore;
  for (int64_t inner : {1, 3, 64}) {
    const int64_t L = inner == 1 ? 200000 : 3000;
    std::vector<int64_t> lens = random_lengths(rng, L / 2, 9);
    lens.push_back(L - L / 2);  // long: past a piece for the flat case
    Layout lay = from_lengths(inner == 1 ? Shape{L} : Shape{L, inner}, 0, {lens});
    const Tensor meta = lay.meta();
    const Segments seg = segments_of(lay, meta);
    for (const char* r : {"sum", "mean", "max", "prod"}) {
      SCOPED_TRACE(::testing::Message() << "inner=" << inner << " reduce=" << r);
      const Reduce red = parse_reduce(r);
      const Tensor x = make_tensor(random_data(rng, L * inner, r, DType::Float32), lay.shape, DType::Float32);
      const Tensor y = segment_reduce(x, red, seg);
      const Tensor g = make_tensor(mixed_grads(rng, y.numel(), DType::Float32), y.sizes(), DType::Float32);
      cpu::stream_output_bytes() = int64_t(1) << 60;
      const Tensor plain = segment_reduce_backward(g, y, x, red, seg, Tie::Split);
      cpu::stream_output_bytes() = 0;
      Tensor buf = Tensor::empty({L * inner + 1}, DType::Float32);
      TensorView gi(buf.ptr<float>() + 1, DType::Float32, lay.shape);  // 4 bytes past a 64-byte boundary
      segment_reduce_backward_out(g, y, x, red, seg, Tie::Split, gi);
      EXPECT_TRUE(same_bits(plain.view(), gi));
    }
  }
}

}  // namespace
}  // namespace segred::testing
