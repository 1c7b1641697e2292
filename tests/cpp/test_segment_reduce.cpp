// segment_reduce forward and backward on the CPU against the float64 reference
// (shared/TESTING.md): every reduce and alias, every dtype, lengths and offsets,
// int32/int64 metadata, awkward sizes, batched axis, features, non-contiguous
// inputs, initial, NaN rules, constructed ties, the long-segment piece split,
// empty tensors, poisoned outputs, and each CPU path proven through the trace.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "src/cpu/softmax_kernels.h"
#include "src/cpu/stream_store.h"
#include "tests/cpp/cpu_scope.h"
#include "tests/cpp/segment_reduce_test_util.h"

namespace segred::testing {
namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// Paths recorded during a call.
std::vector<std::string> traced_paths(const std::function<void()>& f) {
  TraceSession ts;
  f();
  std::vector<std::string> out;
  for (const auto& r : ts.records()) out.push_back(r.path);
  return out;
}

// ---------------------------------------------------------------------------
// Trace: each CPU path, named for it, asserted through the trace.

void expect_single_record(const TraceSession& ts, const char* path, Direction dir) {
  const auto recs = ts.records();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].path, path);
  EXPECT_EQ(recs[0].op, "segment_reduce");
  EXPECT_EQ(recs[0].direction, dir);
  EXPECT_EQ(recs[0].backend, Backend::CPU);
  EXPECT_EQ(recs[0].index_bits, 64);
}

TEST(SegmentReducePaths, FwdCpuFlatI64) {
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const Layout lay = from_lengths({100}, 0, {random_lengths(rng, 100, 9)});
  const Tensor x = make_tensor(random_data(rng, 100, "sum", DType::Float32), lay.shape, DType::Float32);
  const Tensor meta = lay.meta();
  TraceSession ts;
  segment_reduce(x, Reduce::Sum, segments_of(lay, meta));
  expect_single_record(ts, "segment_reduce.fwd.cpu.flat.i64", Direction::Fwd);
}

TEST(SegmentReducePaths, FwdCpuFeaturesI64) {
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const Layout lay = from_lengths({50, 3}, 0, {random_lengths(rng, 50, 9)});
  const Tensor x = make_tensor(random_data(rng, 150, "max", DType::Float32), lay.shape, DType::Float32);
  const Tensor meta = lay.meta();
  TraceSession ts;
  segment_reduce(x, Reduce::Max, segments_of(lay, meta));
  expect_single_record(ts, "segment_reduce.fwd.cpu.features.i64", Direction::Fwd);
}

TEST(SegmentReducePaths, BwdCpuFlatI64) {
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const Layout lay = from_lengths({100}, 0, {random_lengths(rng, 100, 9)});
  const Tensor x = make_tensor(random_data(rng, 100, "max", DType::Float32), lay.shape, DType::Float32);
  const Tensor meta = lay.meta();
  const Segments seg = segments_of(lay, meta);
  const Tensor y = segment_reduce(x, Reduce::Max, seg);
  const Tensor g = make_tensor(mixed_grads(rng, y.numel(), DType::Float32), y.sizes(), DType::Float32);
  TraceSession ts;
  segment_reduce_backward(g, y, x, Reduce::Max, seg);
  expect_single_record(ts, "segment_reduce.bwd.cpu.flat.i64", Direction::Bwd);
}

TEST(SegmentReducePaths, BwdCpuFeaturesI64) {
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const Layout lay = from_lengths({50, 3}, 0, {random_lengths(rng, 50, 9)});
  const Tensor x = make_tensor(random_data(rng, 150, "sum", DType::Float32), lay.shape, DType::Float32);
  const Tensor meta = lay.meta();
  const Segments seg = segments_of(lay, meta);
  const Tensor y = segment_reduce(x, Reduce::Sum, seg);
  const Tensor g = make_tensor(mixed_grads(rng, y.numel(), DType::Float32), y.sizes(), DType::Float32);
  TraceSession ts;
  segment_reduce_backward(g, y, x, Reduce::Sum, seg);
  expect_single_record(ts, "segment_reduce.bwd.cpu.features.i64", Direction::Bwd);
}

// ---------------------------------------------------------------------------
// Random data against the reference.

class SegmentReduceDtype : public ::testing::TestWithParam<DType> {};

TEST_P(SegmentReduceDtype, LengthsAllReducesInt64) {
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  check_all_reduces(from_lengths({200}, 0, {random_lengths(rng, 200, 12)}), GetParam(), rng);
}

TEST_P(SegmentReduceDtype, OffsetsAllReducesInt32) {
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  auto lens = random_lengths(rng, 180, 12);
  std::vector<int64_t> off = {0};
  for (auto n : lens) off.push_back(off.back() + n);
  Layout lay = from_offsets({180}, 0, {off});
  lay.index_dtype = DType::Int32;
  check_all_reduces(lay, GetParam(), rng);
}

TEST_P(SegmentReduceDtype, LengthsInt32Features) {
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  Layout lay = from_lengths({97, 5}, 0, {random_lengths(rng, 97, 10)});
  lay.index_dtype = DType::Int32;
  check_all_reduces(lay, GetParam(), rng);
}

// Offsets that start after 0 and end before L: the forward ignores the elements
// outside, the backward gives them 0 (the reference does both).
TEST_P(SegmentReduceDtype, OffsetsNotStartingAtZero) {
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (DType idx : {DType::Int32, DType::Int64}) {
    Layout flat = from_offsets({40}, 0, {{5, 9, 9, 17, 30, 33}});
    flat.index_dtype = idx;
    check_all_reduces(flat, GetParam(), rng);
    Layout feat = from_offsets({40, 4}, 0, {{3, 3, 20, 21, 38}});
    feat.index_dtype = idx;
    check_all_reduces(feat, GetParam(), rng);
  }
  // The ignored elements really are ignored: make them huge and NaN.
  const DType t = GetParam();
  Layout lay = from_offsets({10}, 0, {{2, 5, 7}});
  std::vector<double> x = {kNaN, 1e4, 1, 2, 3, 4, 5, kNaN, -1e4, kInf};
  const Tensor meta = lay.meta();
  const Tensor data = make_tensor(x, lay.shape, t);
  EXPECT_EQ(to_vec(segment_reduce(data, Reduce::Sum, segments_of(lay, meta))), (std::vector<double>{6, 9}));
  EXPECT_EQ(to_vec(segment_reduce(data, Reduce::Max, segments_of(lay, meta))), (std::vector<double>{3, 5}));
  const Tensor y = segment_reduce(data, Reduce::Max, segments_of(lay, meta));
  const Tensor g = make_tensor({-2.5, 2.5}, {2}, t);
  const Tensor gi = segment_reduce_backward(g, y, data, Reduce::Max, segments_of(lay, meta));
  EXPECT_EQ(to_vec(gi), (std::vector<double>{0, 0, 0, 0, -2.5, 0, 2.5, 0, 0, 0}));
}

// Awkward sizes as the total length, as one segment, and as the segment count.
TEST_P(SegmentReduceDtype, AwkwardSizes) {
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const DType t = GetParam();
  for (int64_t n : {1, 2, 31, 33, 59, 97, 1025, 4097}) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    CheckOptions opt;
    opt.constant_grads = n <= 97;
    // One segment of n between two empty ones, lengths.
    check_all_reduces(from_lengths({n}, 0, {{0, n, 0}}), t, rng, opt);
    // L = n cut into random segments, offsets.
    auto lens = random_lengths(rng, n, 7);
    std::vector<int64_t> off = {0};
    for (auto k : lens) off.push_back(off.back() + k);
    check_all_reduces(from_offsets({n}, 0, {off}), t, rng, opt);
    // n segments (of length 0..3) with 3 features.
    std::vector<int64_t> l2(static_cast<size_t>(n));
    std::uniform_int_distribution<int64_t> d(0, 3);
    int64_t L = 0;
    for (auto& k : l2) L += (k = d(rng));
    check_all_reduces(from_lengths({L, 3}, 0, {l2}), t, rng, opt);
  }
}

// axis=1 with batched metadata: each leading index has its own segments.
TEST_P(SegmentReduceDtype, Axis1BatchedMetadata) {
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const DType t = GetParam();
  const int64_t B = 3, L = 33, S = 6;
  std::vector<std::vector<int64_t>> rows;
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int64_t> r(S, 0);
    std::uniform_int_distribution<int64_t> d(0, S - 1);
    for (int64_t i = 0; i < L; ++i) ++r[size_t(d(rng))];
    rows.push_back(r);
  }
  rows[1] = {0, 0, L, 0, 0, 0};  // one row with empty segments around a full one
  for (DType idx : {DType::Int32, DType::Int64}) {
    Layout a = from_lengths({B, L}, 1, rows);
    a.index_dtype = idx;
    check_all_reduces(a, t, rng);
    Layout b = from_lengths({B, L, 4}, 1, rows);
    b.index_dtype = idx;
    check_all_reduces(b, t, rng);
    // Offsets rows, some not starting at 0.
    std::vector<std::vector<int64_t>> orows = {{0, 10, 10, 33}, {4, 4, 20, 25}, {1, 2, 3, 4}};
    Layout c = from_offsets({B, L, 2}, 1, orows);
    c.index_dtype = idx;
    check_all_reduces(c, t, rng);
  }
  // Two leading dims: data [2, 3, L], lengths [2, 3, S].
  std::vector<std::vector<int64_t>> six;
  for (int i = 0; i < 6; ++i) six.push_back(random_lengths(rng, 20, 8));
  size_t smax = 0;
  for (auto& r : six) smax = std::max(smax, r.size());
  for (auto& r : six) r.resize(smax, 0);
  check_all_reduces(from_lengths({2, 3, 20}, 2, six), t, rng);
}

// axis=-1 is the last dim.
TEST_P(SegmentReduceDtype, AxisMinusOne) {
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  check_all_reduces(from_lengths({2, 31}, -1, {{10, 0, 21}, {31, 0, 0}}), GetParam(), rng);
  check_all_reduces(from_offsets({59}, -1, {{0, 20, 59}}), GetParam(), rng);
  // axis=-2 on a 3-D tensor is axis 1.
  check_all_reduces(from_lengths({2, 31, 3}, -2, {{10, 0, 21}, {1, 30, 0}}), GetParam(), rng);
}

// Non-contiguous data (transposed, stepped), grad and output equal the contiguous result.
TEST_P(SegmentReduceDtype, NonContiguousEqualsContiguous) {
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const DType t = GetParam();
  const int64_t L = 59, F = 5;
  const Layout lay = from_lengths({L, F}, 0, {random_lengths(rng, L, 9)});
  const Tensor meta = lay.meta();
  const Segments seg = segments_of(lay, meta);
  for (const char* r : kReduces) {
    SCOPED_TRACE(r);
    const Reduce red = parse_reduce(r);
    const std::vector<double> x = random_data(rng, L * F, r, t);
    const Tensor xc = make_tensor(x, {L, F}, t);
    // Transposed storage: buf is [F, L], the view [L, F] has strides {1, L}.
    std::vector<double> xt(static_cast<size_t>(L * F));
    for (int64_t i = 0; i < L; ++i)
      for (int64_t f = 0; f < F; ++f) xt[size_t(f * L + i)] = x[size_t(i * F + f)];
    const Tensor buf_t = make_tensor(xt, {F, L}, t);
    const TensorView xT(buf_t.data(), t, {L, F}, {1, L});
    // Stepped storage: every other element of a [L, 2F] buffer.
    std::vector<double> xs(size_t(L * 2 * F), kNaN);
    for (int64_t i = 0; i < L * F; ++i) xs[size_t(2 * i)] = x[size_t(i)];
    const Tensor buf_s = make_tensor(xs, {L, 2 * F}, t);
    const TensorView xS(buf_s.data(), t, {L, F}, {2 * F, 2});
    ASSERT_FALSE(xT.is_contiguous());
    ASSERT_FALSE(xS.is_contiguous());

    const Tensor yc = segment_reduce(xc, red, seg);
    EXPECT_TRUE(same_bits(yc, segment_reduce(xT, red, seg)));
    EXPECT_TRUE(same_bits(yc, segment_reduce(xS, red, seg)));

    // Backward with non-contiguous grad and output as well.
    const int64_t S = lay.S;
    const std::vector<double> gv = mixed_grads(rng, S * F, t);
    const Tensor gc = make_tensor(gv, {S, F}, t);
    std::vector<double> gs(size_t(S * F * 3), kNaN), ys(size_t(S * F * 3), kNaN);
    const std::vector<double> yv = to_vec(yc);
    for (int64_t i = 0; i < S * F; ++i) {
      gs[size_t(3 * i)] = gv[size_t(i)];
      ys[size_t(3 * i + 1)] = yv[size_t(i)];
    }
    const Tensor gbuf = make_tensor(gs, {S * F * 3}, t), ybuf = make_tensor(ys, {S * F * 3}, t);
    const TensorView gS(gbuf.data(), t, {S, F}, {3 * F, 3});
    const TensorView yS(static_cast<char*>(ybuf.data()) + dtype_size(t), t, {S, F}, {3 * F, 3});
    for (const char* tie : {"split", "first", "last"}) {
      SCOPED_TRACE(tie);
      const Tensor gic = segment_reduce_backward(gc, yc, xc, red, seg, parse_tie(tie));
      EXPECT_TRUE(same_bits(gic, segment_reduce_backward(gS, yS, xT, red, seg, parse_tie(tie))));
      EXPECT_TRUE(same_bits(gic, segment_reduce_backward(gc, yc, xS, red, seg, parse_tie(tie))));
    }
  }
  // Non-contiguous metadata (every other int of a buffer).
  const std::vector<int64_t> lv = lay.meta_values();
  std::vector<int64_t> lbuf(lv.size() * 2, -99);
  for (size_t i = 0; i < lv.size(); ++i) lbuf[2 * i] = lv[i];
  const Tensor lb = make_index(lbuf, {int64_t(lbuf.size())}, DType::Int64);
  Segments seg2;
  seg2.lengths = TensorView(lb.data(), DType::Int64, {int64_t(lv.size())}, {2});
  const Tensor xc = make_tensor(random_data(rng, L * F, "sum", t), {L, F}, t);
  EXPECT_TRUE(same_bits(segment_reduce(xc, Reduce::Sum, seg), segment_reduce(xc, Reduce::Sum, seg2)));
}

// initial takes part in every segment, empty or not; an empty segment gives
// initial for every reduce; mean = (initial + sum) / n.
TEST_P(SegmentReduceDtype, Initial) {
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const DType t = GetParam();
  for (double init : {0.5, -1.25, 3.0, 0.0}) {
    SCOPED_TRACE(::testing::Message() << "initial=" << init);
    Layout a = from_lengths({60}, 0, {{0, 7, 0, 1, 33, 19, 0}});
    a.initial = init;
    check_all_reduces(a, t, rng);
    Layout b = from_offsets({40, 3}, 0, {{2, 2, 9, 30, 30}});
    b.initial = init;
    check_all_reduces(b, t, rng);
  }
  // Explicit values.
  Layout lay = from_lengths({4}, 0, {{0, 4, 0}});
  lay.initial = 2.0;
  const Tensor meta = lay.meta();
  const Tensor x = make_tensor({1, 2, 3, 4}, {4}, t);
  auto fwd = [&](Reduce r) { return to_vec(segment_reduce(x, r, segments_of(lay, meta))); };
  EXPECT_EQ(fwd(Reduce::Sum), (std::vector<double>{2, 12, 2}));
  EXPECT_EQ(fwd(Reduce::Mean), (std::vector<double>{2, 3, 2}));  // (2 + 10) / 4; n excludes initial
  EXPECT_EQ(fwd(Reduce::Prod), (std::vector<double>{2, 48, 2}));
  EXPECT_EQ(fwd(Reduce::Max), (std::vector<double>{2, 4, 2}));
  EXPECT_EQ(fwd(Reduce::Min), (std::vector<double>{2, 1, 2}));
  // initial beating every element: max output is initial, M is empty, gradient 0.
  lay.initial = 10.0;
  const Tensor y = segment_reduce(x, Reduce::Max, segments_of(lay, meta));
  EXPECT_EQ(to_vec(y), (std::vector<double>{10, 10, 10}));
  const Tensor g = make_tensor({1, -2.5, 1}, {3}, t);
  EXPECT_EQ(to_vec(segment_reduce_backward(g, y, x, Reduce::Max, segments_of(lay, meta))),
            (std::vector<double>{0, 0, 0, 0}));
  // Infinite and NaN initial are representable in every dtype.
  lay.initial = -kInf;
  EXPECT_EQ(to_vec(segment_reduce(x, Reduce::Max, segments_of(lay, meta))), (std::vector<double>{-kInf, 4, -kInf}));
  lay.initial = kNaN;
  for (double v : to_vec(segment_reduce(x, Reduce::Min, segments_of(lay, meta)))) EXPECT_TRUE(std::isnan(v));
}

// Empty segments without initial: sum 0, prod 1, max -inf, min +inf, mean NaN;
// their backward is 0.
TEST_P(SegmentReduceDtype, EmptySegmentsStartValues) {
  const DType t = GetParam();
  for (bool feat : {false, true}) {
    const Layout lay = feat ? from_lengths({3, 2}, 0, {{0, 3, 0}}) : from_lengths({3}, 0, {{0, 3, 0}});
    const Tensor meta = lay.meta();
    const Tensor x = make_tensor(feat ? std::vector<double>{1, -1, 2, -2, 3, -3} : std::vector<double>{1, 2, 3},
                                 lay.shape, t);
    auto first = [&](Reduce r) { return to_vec(segment_reduce(x, r, segments_of(lay, meta)))[0]; };
    EXPECT_EQ(first(Reduce::Sum), 0.0);
    EXPECT_EQ(first(Reduce::Prod), 1.0);
    EXPECT_EQ(first(Reduce::Max), -kInf);
    EXPECT_EQ(first(Reduce::Min), kInf);
    EXPECT_TRUE(std::isnan(first(Reduce::Mean)));
    const auto y = to_vec(segment_reduce(x, Reduce::Mean, segments_of(lay, meta)));
    EXPECT_TRUE(std::isnan(y.back()));
  }
}

// NaN wins over everything in max/min, +-inf included, wherever it sits.
TEST_P(SegmentReduceDtype, NaNRules) {
  const DType t = GetParam();
  const Layout lay = from_lengths({12}, 0, {{3, 3, 2, 2, 2}});
  const Tensor meta = lay.meta();
  const std::vector<double> x = {kNaN, kInf, 1, -kInf, 2, kNaN, kInf, kNaN, kNaN, -kInf, 1, 2};
  const Tensor data = make_tensor(x, {12}, t);
  const auto mx = to_vec(segment_reduce(data, Reduce::Max, segments_of(lay, meta)));
  const auto mn = to_vec(segment_reduce(data, Reduce::Min, segments_of(lay, meta)));
  for (int s = 0; s < 4; ++s) {
    EXPECT_TRUE(std::isnan(mx[size_t(s)])) << "max segment " << s;
    EXPECT_TRUE(std::isnan(mn[size_t(s)])) << "min segment " << s;
  }
  EXPECT_EQ(mx[4], 2);
  EXPECT_EQ(mn[4], 1);
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (const char* r : kReduces) check_reduce(lay, t, r, x, rng);
  // NaN in one lane of a longer flat segment and in one feature column.
  for (int64_t pos : {0, 5, 8, 16, 40}) {
    std::vector<double> v(41);
    for (int i = 0; i < 41; ++i) v[size_t(i)] = (i % 5) - 2.0;
    v[size_t(pos)] = kNaN;
    check_reduce(from_lengths({41}, 0, {{41}}), t, "max", v, rng);
    check_reduce(from_lengths({41}, 0, {{41}}), t, "min", v, rng);
  }
}

// Constructed ties for tie = split / first / last, with every gradient sign.
TEST_P(SegmentReduceDtype, ConstructedTies) {
  const DType t = GetParam();
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  // segments: repeated max; all equal; -0/+0; +inf tie; -inf tie; NaN tie; ties at
  // both edges; single element; tie with a NaN and inf.
  const std::vector<std::vector<double>> segs = {
      {1, 3, 2, 3, 0},       {-1.5, -1.5, -1.5, -1.5}, {-0.0, 0.0, -1, -0.0}, {0.0, -0.0, 1e-3, -1e-3},
      {kInf, 1, kInf},       {-kInf, -kInf},           {1, kNaN, 3, kNaN},    {5, 1, 2, 5},
      {-5, 1, 2, -5},        {7},                      {kInf, kNaN, -kInf, kNaN, kInf}};
  std::vector<double> x;
  std::vector<int64_t> lens = {0};
  for (const auto& s : segs) {
    x.insert(x.end(), s.begin(), s.end());
    lens.push_back(int64_t(s.size()));
  }
  lens.push_back(0);
  const int64_t L = int64_t(x.size());
  for (const char* r : {"max", "min", "amax", "amin"}) check_reduce(from_lengths({L}, 0, {lens}), t, r, x, rng);
  // Same segments with 3 features: column f holds the data shifted, so ties sit at
  // different rows per column.
  std::vector<double> xf(static_cast<size_t>(L * 3));
  for (int64_t i = 0; i < L; ++i)
    for (int64_t f = 0; f < 3; ++f) xf[size_t(i * 3 + f)] = f == 0 ? x[size_t(i)] : f == 1 ? -x[size_t(i)] : x[size_t(L - 1 - i)];
  for (const char* r : {"max", "min"}) check_reduce(from_lengths({L, 3}, 0, {lens}), t, r, xf, rng);

  // Explicit expectations on [3, 1, 3] with g = -2.5.
  const Layout lay = from_lengths({3}, 0, {{3}});
  const Tensor meta = lay.meta();
  const Tensor d = make_tensor({3, 1, 3}, {3}, t);
  const Tensor y = segment_reduce(d, Reduce::Max, segments_of(lay, meta));
  const Tensor g = make_tensor({-2.5}, {1}, t);
  auto bwd = [&](Tie tie) { return to_vec(segment_reduce_backward(g, y, d, Reduce::Max, segments_of(lay, meta), tie)); };
  EXPECT_EQ(bwd(Tie::Split), (std::vector<double>{-1.25, 0, -1.25}));  // not -2.5 each (PyTorch's defect)
  EXPECT_EQ(bwd(Tie::First), (std::vector<double>{-2.5, 0, 0}));
  EXPECT_EQ(bwd(Tie::Last), (std::vector<double>{0, 0, -2.5}));
}

// Invariants: mean and max/min split gradients sum to g per segment; sum's to n*g;
// max/min split equals amax/amin bitwise.
TEST_P(SegmentReduceDtype, GradientInvariants) {
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const DType t = GetParam();
  const Layout lay = from_lengths({300}, 0, {random_lengths(rng, 300, 11)});
  const Tensor meta = lay.meta();
  const Segments seg = segments_of(lay, meta);
  for (const char* r : {"sum", "mean", "max", "min"}) {
    SCOPED_TRACE(r);
    const Tensor x = make_tensor(random_data(rng, 300, r, t), {300}, t);
    const Tensor y = segment_reduce(x, parse_reduce(r), seg);
    const std::vector<double> gv = mixed_grads(rng, lay.S, t);
    const Tensor g = make_tensor(gv, {lay.S}, t);
    const auto gi = to_vec(segment_reduce_backward(g, y, x, parse_reduce(r), seg, Tie::Split));
    for (int64_t s = 0; s < lay.S; ++s) {
      const int64_t b = lay.offsets[size_t(s)], e = lay.offsets[size_t(s + 1)];
      if (b == e) continue;
      double sum = 0;
      for (int64_t j = b; j < e; ++j) sum += gi[size_t(j)];
      const double expect = std::string(r) == "sum" ? double(e - b) * gv[size_t(s)] : gv[size_t(s)];
      EXPECT_NEAR(sum, expect, 4 * double(e - b) * unit_roundoff(t) * std::fabs(gv[size_t(s)]) + 1e-300)
          << "segment " << s << " n=" << e - b;
    }
    if (std::string(r) == "max" || std::string(r) == "min") {
      const Reduce alias = parse_reduce(std::string("a") + r);
      const Tensor ya = segment_reduce(x, alias, seg);
      EXPECT_TRUE(same_bits(y, ya));
      EXPECT_TRUE(same_bits(segment_reduce_backward(g, y, x, parse_reduce(r), seg, Tie::Split),
                            segment_reduce_backward(g, ya, x, alias, seg, Tie::Split)));
    }
  }
}

// prod with one zero, two zeros, a zero at each edge, and initial, against the O(n^2) reference.
TEST_P(SegmentReduceDtype, ProdZeros) {
  const DType t = GetParam();
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const std::vector<std::vector<double>> segs = {
      {2, 0, 3, -1.5}, {0, 2, 0, 3}, {0, 0}, {0}, {1.5, -2, 0.5}, {0, 1, 2, 3, 4}, {4, 3, 2, 1, 0}, {-0.0, 2, 0.0}};
  std::vector<double> x;
  std::vector<int64_t> lens;
  for (const auto& s : segs) {
    x.insert(x.end(), s.begin(), s.end());
    lens.push_back(int64_t(s.size()));
  }
  const int64_t L = int64_t(x.size());
  for (std::optional<double> init : {std::optional<double>{}, std::optional<double>{-1.5}, std::optional<double>{0.0}}) {
    Layout lay = from_lengths({L}, 0, {lens});
    lay.initial = init;
    check_reduce(lay, t, "prod", x, rng);
  }
  // Explicit: [2, 0, 3] with g = 2.5 -> [0, 15, 0]; [0, 2, 0] -> all 0.
  const Layout lay = from_lengths({6}, 0, {{3, 3}});
  const Tensor meta = lay.meta();
  const Tensor d = make_tensor({2, 0, 3, 0, 2, 0}, {6}, t);
  const Tensor y = segment_reduce(d, Reduce::Prod, segments_of(lay, meta));
  const Tensor g = make_tensor({2.5, -1}, {2}, t);
  EXPECT_EQ(to_vec(segment_reduce_backward(g, y, d, Reduce::Prod, segments_of(lay, meta))),
            (std::vector<double>{0, 15, 0, -0.0, 0, -0.0}));
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, SegmentReduceDtype, ::testing::ValuesIn(kFloatTypes),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// ---------------------------------------------------------------------------
// Half types accumulate in float32.

TEST(SegmentReduceHalf, BFloat16SumOf4096OnesIs4096) {
  for (DType t : {DType::BFloat16, DType::Float16}) {
    for (bool feat : {false, true}) {
      const Shape shape = feat ? Shape{4096, 2} : Shape{4096};
      const Tensor x = filled(shape, t, 1.0);
      const Tensor len = make_index({4096}, {1}, DType::Int64);
      Segments seg;
      seg.lengths = len.view();
      const auto y = to_vec(segment_reduce(x, Reduce::Sum, seg));
      for (double v : y) EXPECT_EQ(v, 4096.0) << dtype_name(t) << (feat ? " features" : " flat");
      const auto m = to_vec(segment_reduce(x, Reduce::Mean, seg));
      for (double v : m) EXPECT_EQ(v, 1.0);
    }
  }
}

// ---------------------------------------------------------------------------
// Long segments: the piece split (segment_work.h), next to many segments of 1.

// Float64 prod backward in O(n) (prefix/suffix), for segments too long for the
// O(n^2) reference; plain loops over the test's own float64 data.
std::vector<double> prod_backward_linear(const Layout& lay, const std::vector<double>& g, const std::vector<double>& x) {
  std::vector<double> gi(x.size(), 0.0);
  const int64_t inner = lay.inner(), L = lay.L();
  const double start = lay.initial.value_or(1.0);
  for (int64_t r = 0; r < lay.outer(); ++r)
    for (int64_t s = 0; s < lay.S; ++s) {
      const int64_t b = lay.offsets[size_t(r * (lay.S + 1) + s)], e = lay.offsets[size_t(r * (lay.S + 1) + s + 1)];
      for (int64_t f = 0; f < inner; ++f) {
        std::vector<double> suf(size_t(e - b + 1), 1.0);
        for (int64_t j = e - 1; j >= b; --j) suf[size_t(j - b)] = suf[size_t(j - b + 1)] * x[size_t((r * L + j) * inner + f)];
        double pre = start;
        for (int64_t j = b; j < e; ++j) {
          const size_t i = size_t((r * L + j) * inner + f);
          gi[i] = g[size_t((r * lay.S + s) * inner + f)] * pre * suf[size_t(j - b + 1)];
          pre *= x[i];
        }
      }
    }
  return gi;
}

struct LongCase {
  const char* name;
  int64_t inner;
};

class SegmentReduceLong : public ::testing::TestWithParam<DType> {};

// Data on a grid (k/8, |k| <= 16) so that float32 sums are exact; prod data is
// +-1 with a few powers of two so that products are exact too.
std::vector<double> grid_data(std::mt19937_64& rng, int64_t n, bool prod) {
  std::vector<double> v(static_cast<size_t>(n));
  std::uniform_int_distribution<int> k(-16, 16), c(0, 999);
  for (auto& x : v) {
    if (prod) {
      const int q = c(rng);
      x = q < 2 ? 2.0 : q < 4 ? 0.5 : (q % 2 ? 1.0 : -1.0);
    } else {
      const int q = k(rng);
      x = q == 0 ? 0.25 : q / 8.0;
    }
  }
  return v;
}

void check_long(DType t, int64_t inner, int64_t long_rows, int64_t ones, uint64_t seed) {
  SEGRED_SEED_TRACE(seed);
  SCOPED_TRACE(::testing::Message() << "inner=" << inner << " long_rows=" << long_rows << " dtype=" << dtype_name(t));
  std::mt19937_64 rng(seed);
  SegmentProblem sp;
  sp.inner = inner;
  sp.direction = Direction::Fwd;
  const int64_t piece = plan_segment_reduce(sp).chunk;
  ASSERT_GT(long_rows, piece) << "the long segment must exceed a piece to reach the split";
  // ones singles, the long segment, ones singles, an empty one.
  std::vector<int64_t> lens(size_t(ones), 1);
  lens.push_back(long_rows);
  lens.insert(lens.end(), size_t(ones), 1);
  lens.push_back(0);
  const int64_t L = long_rows + 2 * ones;
  const Shape shape = inner == 1 ? Shape{L} : Shape{L, inner};
  const Layout lay = from_lengths(shape, 0, {lens});
  const Tensor meta = lay.meta();
  const Segments seg = segments_of(lay, meta);
  const reference::Problem prob = lay.problem();
  const int64_t b = ones;  // first row of the long segment
  for (const char* r : {"sum", "mean", "max", "min", "prod"}) {
    SCOPED_TRACE(r);
    const bool tie_op = is_tie_reduce(r);
    std::vector<double> x = grid_data(rng, L * inner, std::string(r) == "prod");
    if (tie_op) {
      // Ties of the extremum at the segment's edges and across piece boundaries.
      const double ext = std::string(r) == "max" ? 3.0 : -3.0;
      for (int64_t j : {int64_t(0), piece - 1, piece, 2 * piece - 1, 2 * piece, long_rows - 1})
        if (j < long_rows)
          for (int64_t f = 0; f < inner; f += 2) x[size_t((b + j) * inner + f)] = ext;
      // In feature 1 (if any): a single NaN in the last piece.
      if (inner > 1) x[size_t((b + long_rows - 2) * inner + 1)] = kNaN;
    }
    x = rounded(t, x);
    const Reduce red = parse_reduce(r);
    Tensor data = make_tensor(x, shape, t);
    Tensor out = filled(lay.out_shape(), t, kNaN);
    {
      TraceSession ts;
      segment_reduce_out(data, red, seg, out);
      ASSERT_EQ(ts.records().size(), 1u);
      EXPECT_EQ(ts.records()[0].path, inner == 1 ? "segment_reduce.fwd.cpu.flat.i64" : "segment_reduce.fwd.cpu.features.i64");
    }
    const std::vector<double> y = to_vec(out);
    expect_forward(lay, t, r, x, y, reference::forward(prob, x, r));
    Tensor out2 = filled(lay.out_shape(), t, 7777.0);
    segment_reduce_out(data, red, seg, out2);
    EXPECT_TRUE(same_bits(out, out2)) << "forward not bitwise identical on a second run";

    const std::vector<double> gv = mixed_grads(rng, out.numel(), t);
    const Tensor g = make_tensor(gv, lay.out_shape(), t);
    const std::vector<std::string> ties = tie_op ? std::vector<std::string>{"split", "first", "last"}
                                                 : std::vector<std::string>{"split"};
    for (const auto& tie : ties) {
      SCOPED_TRACE(tie);
      Tensor gi = filled(shape, t, kNaN);
      segment_reduce_backward_out(g, out, data, red, seg, parse_tie(tie), gi);
      const std::vector<double> ref = std::string(r) == "prod" ? prod_backward_linear(lay, gv, x)
                                                               : reference::backward(prob, gv, y, x, r, tie);
      expect_backward(lay, t, r, tie, to_vec(gi), ref);
      Tensor gi2 = filled(shape, t, 7777.0);
      segment_reduce_backward_out(g, out, data, red, seg, parse_tie(tie), gi2);
      EXPECT_TRUE(same_bits(gi, gi2)) << "backward not bitwise identical on a second run";
    }
  }
}

TEST_P(SegmentReduceLong, FlatPieceSplit) { check_long(GetParam(), 1, 2 * 65536 + 1234, 3000, fresh_seed()); }
TEST_P(SegmentReduceLong, FeaturesPieceSplit) {
  // inner 3: pieces of 2^16/3 rows; inner 1500: pieces of 64 rows and 2 feature tiles.
  check_long(GetParam(), 3, 50000, 500, fresh_seed());
  check_long(GetParam(), 1500, 300, 20, fresh_seed());
}

// Long flat max/min segments, tie=split, grad_input streamed: phase 2 writes each
// piece while counting its ties, with the value of one tie (g / 1), and writes again
// only the ties of the segments whose whole count c is 2 or more (session 36). Every
// count the optimistic write can meet, each segment longer than a piece: c = 1 (one
// maximum, in the second piece), c = 4 (ties in three pieces, in the unaligned
// heads, in whole vectors and in the tail at the segment's end),
// c = 0 (an output that no element equals), c = 2 (two NaNs in two pieces, so y is
// NaN), c = 1 again at the segment's first element, then ties in every fourth
// element (more than an eighth of the units: the piece rewritten whole); gradients
// of every sign, -0 and non-unit ones. float32 takes the optimistic write, the 16-bit
// types count and mark the ties, then write from the marks (session 37: bits crossing
// 64-bit words where a piece's head is 15 elements). Streamed results must be bitwise
// the staged path's (the same call with streaming off) and match the float64 reference.
void check_streamed_flat_tie_split(DType t) {
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  CpuKnobScope restore;
  SegmentProblem sp;
  sp.inner = 1;
  sp.direction = Direction::Bwd;
  const int64_t P = plan_segment_reduce(sp).chunk;
  // Segment 3 starts 1 past a 16-element boundary (P is a multiple of 16): each of its
  // pieces has a head of 15 elements before the first aligned vector store.
  ASSERT_EQ(P % 16, 0);
  const std::vector<int64_t> lens = {5, P + 100, 8, 2 * P + 50, 3, P + 10, P + 20, 1, P + 1, P + 30};
  const Layout lay = from_lengths(Shape{std::accumulate(lens.begin(), lens.end(), int64_t(0))}, 0, {lens});
  const Tensor meta = lay.meta();
  const Segments seg = segments_of(lay, meta);
  std::vector<int64_t> start = {0};
  for (int64_t n : lens) start.push_back(start.back() + n);
  for (const char* r : {"max", "min"}) {
    SCOPED_TRACE(r);
    const double ext = std::string(r) == "max" ? 5.0 : -5.0;  // beyond grid_data's +-2
    std::vector<double> x = grid_data(rng, lay.L(), false);
    x[size_t(start[1] + P + 3)] = ext;                                   // c = 1
    for (int64_t j : {int64_t(0), P + 1, P + 40, 2 * P + 49}) x[size_t(start[3] + j)] = ext;  // c = 4
    x[size_t(start[6] + 3)] = kNaN;                                      // c = 2 (y NaN)
    x[size_t(start[6] + P + 5)] = kNaN;
    x[size_t(start[8])] = ext;                                           // c = 1, first element
    for (int64_t j = 0; j < lens[9]; j += 4) x[size_t(start[9] + j)] = ext;  // dense ties
    x = rounded(t, x);
    const Tensor data = make_tensor(x, lay.shape, t);
    const Reduce red = parse_reduce(r);
    std::vector<double> y = to_vec(segment_reduce(data, red, seg));
    y[5] = 2 * ext;  // c = 0: no element equals it
    const Tensor out = make_tensor(y, lay.out_shape(), t);
    const std::vector<double> gv = rounded(t, {0.75, -1.5, 2.0, -2.5, 3.0, -3.25, -0.0, 1.0, -1.0, -2.0});
    const Tensor g = make_tensor(gv, lay.out_shape(), t);
    const std::vector<double> ref = reference::backward(lay.problem(), gv, y, x, r, "split");
    for (int isa = 0; isa <= int(cpu::softmax_best_isa()); ++isa) {
      cpu::softmax_isa_cap() = isa;
      SCOPED_TRACE(cpu::softmax_isa_name(cpu::SoftmaxIsa(isa)));
      cpu::stream_output_bytes() = 0;
      Tensor streamed = filled(lay.shape, t, kNaN);
      {
        TraceSession ts;
        segment_reduce_backward_out(g, out, data, red, seg, Tie::Split, streamed);
        ASSERT_EQ(ts.records().size(), 1u);
        EXPECT_EQ(ts.records()[0].path, "segment_reduce.bwd.cpu.flat.i64");
      }
      expect_backward(lay, t, r, "split", to_vec(streamed), ref);
      cpu::stream_output_bytes() = int64_t(1) << 60;
      Tensor staged = filled(lay.shape, t, 7777.0);
      segment_reduce_backward_out(g, out, data, red, seg, Tie::Split, staged);
      EXPECT_TRUE(same_bits(streamed, staged)) << "streamed and staged backward differ";
    }
  }
}
TEST_P(SegmentReduceLong, StreamedFlatTieSplitEveryCount) { check_streamed_flat_tie_split(GetParam()); }
// float16 takes the 16-bit marks as bfloat16 does (the suite's other tests are not
// written for float16's range: a long segment's product overflows it).
TEST(SegmentReduceLong16, StreamedFlatTieSplitEveryCountFloat16) { check_streamed_flat_tie_split(DType::Float16); }

INSTANTIATE_TEST_SUITE_P(Dtypes, SegmentReduceLong, ::testing::Values(DType::Float32, DType::BFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// ---------------------------------------------------------------------------
// Signed zeros in the backward: grad_input = g (sum), g * (1/n) (mean), g / c on
// the ties (max/min, tie=split), so a -0 gradient gives -0 (bitwise, as the
// float64 reference and the CUDA backend); rows outside every segment and the
// non-extremum positions get +0. Session 5: the vector fills broadcast the value
// by adding it to +0 (splat), which turned -0 into +0. Every position's sign bit is
// checked, for short segments (the runs of sr_run, the per-segment fills), long
// ones (> 1000 rows, and past a piece: phase 2), 1-D and 2/4/16 features, every
// dtype, every instruction-set build this CPU runs, in place and streamed.

void check_signed_zero_grads(DType t, int64_t inner, const std::vector<int64_t>& off, int64_t L, std::mt19937_64& rng) {
  const Shape shape = inner == 1 ? Shape{L} : Shape{L, inner};
  const Layout lay = from_offsets(shape, 0, {off});
  const int64_t S = lay.S;
  const Tensor meta = lay.meta();
  const Segments seg = segments_of(lay, meta);
  std::vector<int64_t> seg_of(size_t(L), -1);  // the segment holding each row (-1: none)
  for (int64_t s = 0; s < S; ++s)
    for (int64_t j = off[size_t(s)]; j < off[size_t(s + 1)]; ++j) seg_of[size_t(j)] = s;
  // Gradients: mostly -0, some +0 and some nonzero of both signs.
  const double pick[] = {-0.0, -0.0, -0.0, 0.0, -1.5, 3.0};
  std::uniform_int_distribution<int> d(0, 5);
  std::vector<double> gv(size_t(S * inner));
  for (auto& v : gv) v = pick[d(rng)];
  const Tensor g = make_tensor(gv, lay.out_shape(), t);
  for (const char* r : {"sum", "mean", "max"}) {
    SCOPED_TRACE(r);
    const Reduce red = parse_reduce(r);
    const std::vector<double> x = random_data(rng, L * inner, r, t);  // max: a grid with ties, +-0
    const Tensor data = make_tensor(x, shape, t);
    const Tensor y = segment_reduce(data, red, seg);
    const std::vector<double> yv = to_vec(y);
    std::vector<int64_t> ties(size_t(S * inner), 0);  // max: the ties of each segment and feature
    for (int64_t j = 0; j < L; ++j)
      for (int64_t f = 0; f < inner; ++f)
        if (seg_of[size_t(j)] >= 0)
          ties[size_t(seg_of[size_t(j)] * inner + f)] += x[size_t(j * inner + f)] == yv[size_t(seg_of[size_t(j)] * inner + f)];
    Tensor gi = filled(shape, t, kNaN);
    segment_reduce_backward_out(g, y, data, red, seg, Tie::Split, gi);
    const std::vector<double> got = to_vec(gi);
    int failures = 0;
    for (int64_t j = 0; j < L && failures < 10; ++j)
      for (int64_t f = 0; f < inner; ++f) {
        const int64_t s = seg_of[size_t(j)], e = j * inner + f;
        const double o = got[size_t(e)];
        double want = 0.0;  // outside every segment, or not an extremum: +0
        bool exact = true;
        if (s >= 0) {
          const double gs = gv[size_t(s * inner + f)];
          if (red == Reduce::Sum) {
            want = gs;
          } else if (red == Reduce::Mean) {
            want = gs / double(off[size_t(s + 1)] - off[size_t(s)]);
            exact = gs == 0;  // the value is rounded; zero and the sign are exact
          } else if (x[size_t(e)] == yv[size_t(s * inner + f)]) {
            want = gs / double(ties[size_t(s * inner + f)]);
            exact = gs == 0;
          }
        }
        const bool ok = std::signbit(o) == std::signbit(want) && (o == 0) == (want == 0) && (!exact || o == want);
        if (!ok) {
          ++failures;
          ADD_FAILURE() << "grad_input[" << j << "][" << f << "] = " << o << (std::signbit(o) ? " (sign set)" : "")
                        << ", expected " << want << (std::signbit(want) ? " (sign set)" : "") << " (segment " << s
                        << ")";
        }
      }
  }
}

TEST(SegmentReduceSignedZero, BackwardKeepsNegativeZero) {
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  CpuKnobScope restore;
  for (int64_t inner : {1, 2, 4, 16}) {
    SegmentProblem sp;
    sp.inner = inner;
    sp.direction = Direction::Bwd;
    const int64_t piece = plan_segment_reduce(sp).chunk;
    // Short: lengths 1..40, the first segment starting at row 3, the last ending 5
    // rows before L (rows outside every segment).
    std::uniform_int_distribution<int64_t> len(1, 40);
    std::vector<int64_t> short_off = {3};
    for (int i = 0; i < 300; ++i) short_off.push_back(short_off.back() + len(rng));
    const int64_t short_L = short_off.back() + 5;
    // Long: 1..40-row segments around one of 1500 rows and one longer than a piece.
    std::vector<int64_t> long_off = {0};
    for (int64_t n : {int64_t(3), int64_t(1), int64_t(1500), int64_t(17), int64_t(2), std::max<int64_t>(1100, piece + 37),
                      int64_t(33), int64_t(1)})
      long_off.push_back(long_off.back() + n);
    const int64_t long_L = long_off.back();
    for (int isa = 0; isa <= int(cpu::softmax_best_isa()); ++isa)
      for (bool stream : {false, true}) {
        cpu::softmax_isa_cap() = isa;
        cpu::stream_output_bytes() = stream ? 0 : int64_t(1) << 40;
        for (DType t : kFloatTypes) {
          SCOPED_TRACE(::testing::Message() << "inner=" << inner << " dtype=" << dtype_name(t) << " isa "
                                            << cpu::softmax_isa_name(cpu::SoftmaxIsa(isa))
                                            << (stream ? ", streamed" : ""));
          {
            SCOPED_TRACE("short segments");
            check_signed_zero_grads(t, inner, short_off, short_L, rng);
          }
          {
            SCOPED_TRACE("long segments");
            check_signed_zero_grads(t, inner, long_off, long_L, rng);
          }
        }
      }
  }
}

// ---------------------------------------------------------------------------
// Empty tensors: correctly shaped results, no kernel where the output is empty.

TEST(SegmentReduceEmpty, ZeroLengthAxis) {
  // L = 0, S = 3: output [3] of start values; backward output is empty: no launch.
  const Tensor x = Tensor::empty({0}, DType::Float32);
  const Tensor len = make_index({0, 0, 0}, {3}, DType::Int64);
  Segments seg;
  seg.lengths = len.view();
  Tensor y;
  auto p = traced_paths([&] { y = segment_reduce(x, Reduce::Max, seg); });
  EXPECT_EQ(y.sizes(), (Shape{3}));
  EXPECT_EQ(to_vec(y), (std::vector<double>{-kInf, -kInf, -kInf}));
  EXPECT_EQ(p.size(), 1u);
  const Tensor g = filled({3}, DType::Float32, 1.0);
  Tensor gi;
  p = traced_paths([&] { gi = segment_reduce_backward(g, y, x, Reduce::Max, seg); });
  EXPECT_EQ(gi.sizes(), (Shape{0}));
  EXPECT_TRUE(p.empty());
}

TEST(SegmentReduceEmpty, ZeroSegments) {
  // S = 0 (offsets [k]): output [0]: no forward launch; backward writes zeros.
  const Tensor x = make_tensor({1, 2, 3, 4}, {4}, DType::Float32);
  const Tensor off = make_index({2}, {1}, DType::Int32);
  Segments seg;
  seg.offsets = off.view();
  Tensor y;
  auto p = traced_paths([&] { y = segment_reduce(x, Reduce::Sum, seg); });
  EXPECT_EQ(y.sizes(), (Shape{0}));
  EXPECT_TRUE(p.empty());
  const Tensor g = Tensor::empty({0}, DType::Float32);
  Tensor gi = filled({4}, DType::Float32, kNaN);
  segment_reduce_backward_out(g, y, x, Reduce::Sum, seg, Tie::Split, gi);
  EXPECT_EQ(to_vec(gi), (std::vector<double>{0, 0, 0, 0}));
  // Lengths of shape [0] with L = 0.
  const Tensor x0 = Tensor::empty({0, 5}, DType::Float16);
  const Tensor len = make_index({}, {0}, DType::Int64);
  Segments s2;
  s2.lengths = len.view();
  p = traced_paths([&] { y = segment_reduce(x0, Reduce::Mean, s2); });
  EXPECT_EQ(y.sizes(), (Shape{0, 5}));
  EXPECT_TRUE(p.empty());
}

TEST(SegmentReduceEmpty, ZeroOuter) {
  // data [0, 7, 2], axis 1, lengths [0, 3]: output [0, 3, 2], nothing launched.
  const Tensor x = Tensor::empty({0, 7, 2}, DType::BFloat16);
  const Tensor len = make_index({}, {0, 3}, DType::Int64);
  Segments seg;
  seg.lengths = len.view();
  seg.axis = 1;
  Tensor y;
  auto p = traced_paths([&] { y = segment_reduce(x, Reduce::Prod, seg); });
  EXPECT_EQ(y.sizes(), (Shape{0, 3, 2}));
  EXPECT_TRUE(p.empty());
  const Tensor g = Tensor::empty({0, 3, 2}, DType::BFloat16);
  Tensor gi;
  p = traced_paths([&] { gi = segment_reduce_backward(g, y, x, Reduce::Prod, seg); });
  EXPECT_EQ(gi.sizes(), (Shape{0, 7, 2}));
  EXPECT_TRUE(p.empty());
}

TEST(SegmentReduceEmpty, ZeroInner) {
  // data [5, 0]: output [S, 0], nothing launched.
  const Tensor x = Tensor::empty({5, 0}, DType::Float64);
  const Tensor len = make_index({2, 3}, {2}, DType::Int32);
  Segments seg;
  seg.lengths = len.view();
  Tensor y;
  auto p = traced_paths([&] { y = segment_reduce(x, Reduce::Sum, seg); });
  EXPECT_EQ(y.sizes(), (Shape{2, 0}));
  EXPECT_TRUE(p.empty());
}

// ---------------------------------------------------------------------------
// unsafe = true with bad metadata: no throw, no out-of-bounds access (ASan/UBSan
// in CI), every output element written. Lengths summing to less than L: the
// tail is ignored (and gets gradient 0).

void run_unsafe(const Shape& shape, int64_t axis, const Tensor& meta, bool lengths, DType t) {
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const int64_t n = numel(shape);
  for (const char* r : kReduces) {
    SCOPED_TRACE(r);
    const Tensor x = make_tensor(random_data(rng, n, r, t), shape, t);
    Segments seg;
    if (lengths) seg.lengths = meta.view();
    else seg.offsets = meta.view();
    seg.axis = axis;
    seg.unsafe = true;
    Tensor y;
    ASSERT_NO_THROW(y = segment_reduce(x, parse_reduce(r), seg));
    const Tensor g = make_tensor(mixed_grads(rng, y.numel(), t), y.sizes(), t);
    for (Tie tie : {Tie::Split, Tie::First, Tie::Last}) {
      Tensor gi = filled(shape, t, 7777.0);
      ASSERT_NO_THROW(segment_reduce_backward_out(g, y, x, parse_reduce(r), seg, tie, gi));
      for (double v : to_vec(gi)) ASSERT_NE(v, 7777.0) << "grad_input element not written";
    }
  }
}

TEST(SegmentReduceUnsafe, LengthsSummingToLessIgnoreTheTail) {
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (DType t : {DType::Float32, DType::BFloat16}) {
    // Reference: the same segments given as offsets (valid), tail ignored.
    const Layout ref_lay = from_offsets({20, 2}, 0, {{0, 3, 3, 12}});
    const Tensor len = make_index({3, 0, 9}, {3}, DType::Int32);
    for (const char* r : kReduces) {
      SCOPED_TRACE(r);
      const std::vector<double> x = random_data(rng, 40, r, t);
      const Tensor data = make_tensor(x, {20, 2}, t);
      Segments seg;
      seg.lengths = len.view();
      seg.unsafe = true;
      const Tensor y = segment_reduce(data, parse_reduce(r), seg);
      expect_forward(ref_lay, t, r, x, to_vec(y), reference::forward(ref_lay.problem(), x, canonical(r)));
      const std::vector<double> gv = mixed_grads(rng, y.numel(), t);
      const Tensor g = make_tensor(gv, y.sizes(), t);
      const Tensor gi = segment_reduce_backward(g, y, data, parse_reduce(r), seg);
      expect_backward(ref_lay, t, r, "split", to_vec(gi),
                      reference::backward(ref_lay.problem(), gv, to_vec(y), x, canonical(r), "split"));
      const auto giv = to_vec(gi);
      for (size_t i = 24; i < 40; ++i) EXPECT_EQ(giv[i], 0.0) << "tail element " << i;
    }
  }
}

TEST(SegmentReduceUnsafe, BadLengthsDoNotCrash) {
  for (DType t : {DType::Float32, DType::Float16}) {
    run_unsafe({10}, 0, make_index({3, 4, 50}, {3}, DType::Int64), true, t);               // too much
    run_unsafe({10}, 0, make_index({3, -4, 5, 2}, {4}, DType::Int32), true, t);            // negative
    run_unsafe({10}, 0, make_index({-100, 200, -7, 3}, {4}, DType::Int64), true, t);       // wild
    run_unsafe({10, 3}, 0, make_index({int64_t(1) << 62, 5}, {2}, DType::Int64), true, t);  // huge
    run_unsafe({2, 10}, 1, make_index({1, 2, 3, 40, -5, 1}, {2, 3}, DType::Int32), true, t);  // batched
    run_unsafe({10}, 0, make_index({0, 0, 0}, {3}, DType::Int64), true, t);               // sums to 0
  }
}

TEST(SegmentReduceUnsafe, BadOffsetsDoNotCrash) {
  for (DType t : {DType::Float32, DType::BFloat16}) {
    run_unsafe({10}, 0, make_index({0, 7, 3, 10}, {4}, DType::Int64), false, t);          // decreasing
    run_unsafe({10}, 0, make_index({2, 5, 30}, {3}, DType::Int32), false, t);             // past L
    run_unsafe({10}, 0, make_index({-5, 3, 8}, {3}, DType::Int64), false, t);             // negative start
    run_unsafe({10}, 0, make_index({50, 60}, {2}, DType::Int64), false, t);               // all past L
    run_unsafe({10, 2}, 0, make_index({9, -3, 4, int64_t(1) << 40}, {4}, DType::Int64), false, t);
    run_unsafe({3, 10}, 1, make_index({0, 5, 10, 10, 5, 0, -1, 11, 12}, {3, 3}, DType::Int32), false, t);
  }
}

}  // namespace
}  // namespace segred::testing
