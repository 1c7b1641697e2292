// The CPU segment_reduce kernels are built per instruction set (baseline, AVX2,
// AVX-512: src/cpu/segment_reduce_isa_*.inc through the softmax kernels'
// multiversioning) and a normal run reaches only the best one this CPU has. Here
// every build this CPU can run (capped through softmax_isa_cap), each with grad_input
// written in place and streamed (the stage, or the runs' streaming stores), against the float64
// reference: flat segment lengths 0, 1 and every vector width +-1 (4, 8, 16 lanes),
// a short last segment at the very end of the tensor (tail loads that cannot read
// a full vector), offsets leaving rows outside every segment (vector stores that
// run on must stop before them), NaN / +-inf / ties at every lane position, many
// short segments over several parallel blocks, batched rows, small feature counts,
// runs of short segments between long ones across block boundaries.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "src/cpu/softmax_kernels.h"
#include "src/cpu/stream_store.h"
#include "tests/cpp/cpu_scope.h"
#include "tests/cpp/segment_reduce_test_util.h"

namespace segred::testing {
namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

using IsaScope = CpuKnobScope;  // tests/cpp/cpu_scope.h

// Every build this CPU runs, each with in-place and staged (streamed) grad_input.
template <class F> void for_each_isa_and_store(F&& f) {
  IsaScope restore;
  for (int i = 0; i <= int(cpu::softmax_best_isa()); ++i)
    for (bool stream : {false, true}) {
      const auto isa = cpu::SoftmaxIsa(i);
      SCOPED_TRACE(::testing::Message() << "isa " << cpu::softmax_isa_name(isa) << (stream ? ", staged output" : ""));
      cpu::softmax_isa_cap() = i;
      ASSERT_EQ(cpu::softmax_isa(), isa);
      cpu::stream_output_bytes() = stream ? 0 : int64_t(1) << 40;
      f();
    }
}

// Lengths 0, 1 and around every vector width, then a short segment last (it ends at
// the tensor's end).
std::vector<int64_t> edge_lengths() {
  std::vector<int64_t> v = {0, 1, 0, 0, 2, 3};
  for (int64_t w : {4, 8, 16, 32})
    for (int64_t d : {-1, 0, 1}) v.push_back(w + d);
  for (int64_t n : {1, 0, 5, 1, 2, 7, 0, 3}) v.push_back(n);
  return v;
}
int64_t sum_of(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

class SegmentReduceIsa : public ::testing::TestWithParam<DType> {};

TEST_P(SegmentReduceIsa, EdgeLengthsEveryBuild) {
  const DType t = GetParam();
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const std::vector<int64_t> lens = edge_lengths();
  const int64_t L = sum_of(lens);
  for_each_isa_and_store([&] {
    check_all_reduces(from_lengths({L}, 0, {lens}), t, rng);
    // Batched rows (axis 1), int32 offsets, a row ending in a segment of 1.
    std::vector<int64_t> lens2(lens.rbegin(), lens.rend());
    check_all_reduces(from_lengths({2, L}, 1, {lens, lens2}), t, rng);
    // Features 2, 3, 4 (rows narrower than a vector).
    for (int64_t f : {2, 3, 4}) check_all_reduces(from_lengths({L, f}, 0, {lens}), t, rng);
  });
}

TEST_P(SegmentReduceIsa, OffsetsWithUncoveredRowsEveryBuild) {
  const DType t = GetParam();
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  // Rows [0, 3) and [36, 60) are outside every segment and must get gradient 0 and
  // stay out of the forward, whatever the vector stores of the segment before do.
  for_each_isa_and_store([&] {
    check_all_reduces(from_offsets({60}, 0, {{3, 4, 5, 12, 13, 30, 33, 35, 36}}), t, rng);
    check_all_reduces(from_offsets({2, 40}, 1, {{1, 2, 3, 20, 21}, {0, 17, 18, 33, 34}}), t, rng);
  });
}

TEST_P(SegmentReduceIsa, SpecialValuesAtEveryLaneEveryBuild) {
  const DType t = GetParam();
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for_each_isa_and_store([&] {
    // One segment of 33 (two 16-lane vectors and a tail of 1) after a segment of 7.
    const Layout lay = from_lengths({40}, 0, {{7, 33}});
    for (int64_t pos = 0; pos < 40; pos += 3)
      for (double special : {kNaN, kInf, -kInf}) {
        std::vector<double> x(40);
        for (int i = 0; i < 40; ++i) x[size_t(i)] = double((i * 7) % 5) - 2.0;  // ties of +-2
        x[size_t(pos)] = special;
        for (const char* r : {"max", "min", "sum"}) check_reduce(lay, t, r, x, rng, {false, true, true});
      }
  });
}

TEST_P(SegmentReduceIsa, ManyShortSegmentsParallelBlocksEveryBuild) {
  const DType t = GetParam();
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const int64_t L = 70000;  // several work blocks (segment_work.h), so several threads
  const std::vector<int64_t> lens = random_lengths(rng, L, 40);
  for_each_isa_and_store([&] {
    const Layout lay = from_lengths({L}, 0, {lens});
    for (const char* r : {"sum", "mean", "max", "min"})
      check_reduce(lay, t, r, random_data(rng, L, r, t), rng, {false, true, true});
  });
}

// Runs of consecutive short segments are written in one go (backward: sr_run,
// vectors composed across segment boundaries, streamed when the output is large):
// lengths 0, 1, 2 and every vector width +-1 in runs, broken by long segments
// (> Plan.chunk, written by phase 2) between them and with one short segment
// between two long ones, several parallel blocks whose boundaries fall at
// different places of the pattern (a prefix of singles shifts them), NaN / +-inf /
// signed zeros in the short segments, rows of 2 and 4 features, batched rows with
// rows outside every segment; every build, streamed and plain stores.
TEST_P(SegmentReduceIsa, ShortRunsMixedWithLongAtBlockBoundariesEveryBuild) {
  const DType t = GetParam();
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  std::vector<int64_t> pat = {0, 1, 2, 0, 0, 1, 1};
  for (int64_t w : {4, 8, 16})
    for (int64_t d : {-1, 0, 1}) pat.push_back(w + d);
  pat.insert(pat.end(), {2, 1, 0, 33, 1});
  const int64_t piece = int64_t(1) << 16;  // Plan.chunk of the flat path: a longer segment is "long"
  for (int64_t shift : {0, 7}) {
    std::vector<int64_t> lens(size_t(shift), 1);
    auto shorts = [&](int64_t reps) {
      for (int64_t k = 0; k < reps; ++k) lens.insert(lens.end(), pat.begin(), pat.end());
    };
    shorts(80);
    lens.push_back(piece + 17);  // long between two runs
    lens.push_back(0);
    lens.push_back(3);
    lens.push_back(piece + 2);  // long, short, long
    shorts(160);
    lens.push_back(1);
    const int64_t L = sum_of(lens);
    SCOPED_TRACE(::testing::Message() << "shift " << shift << ", L " << L << ", S " << lens.size());
    for_each_isa_and_store([&] {
      const Layout lay = from_lengths({L}, 0, {lens});
      for (const char* r : {"sum", "mean", "max", "min"}) {
        std::vector<double> x = random_data(rng, L, r, t);
        std::uniform_int_distribution<int64_t> pos(0, L - 1);
        for (double special : {kNaN, kInf, -kInf, kNaN})
          for (int k = 0; k < 20; ++k) x[size_t(pos(rng))] = special;
        check_reduce(lay, t, r, x, rng, {false, true, shift == 0});
      }
    });
  }
  // Rows of 2 and 4 features (sum/mean backward runs compose a feature pattern per
  // segment): several blocks, a long segment (> 2^16 / inner rows) inside.
  for (int64_t f : {2, 4}) {
    std::vector<int64_t> lens(3, 1);
    for (int64_t k = 0; k < 150; ++k) lens.insert(lens.end(), pat.begin(), pat.end());
    lens.push_back((piece / f) + 5);
    for (int64_t k = 0; k < 50; ++k) lens.insert(lens.end(), pat.begin(), pat.end());
    const int64_t L = sum_of(lens);
    for_each_isa_and_store([&] {
      const Layout lay = from_lengths({L, f}, 0, {lens});
      for (const char* r : {"sum", "mean"}) check_reduce(lay, t, r, random_data(rng, L * f, r, t), rng, {false, true, false});
    });
  }
  // Batched rows (axis 1) whose runs end at a row's end, with rows outside every segment.
  std::vector<int64_t> o0 = {3}, o1 = {0};
  for (int64_t k = 0; k < 3000; ++k) {
    o0.push_back(o0.back() + pat[size_t(k) % pat.size()]);
    o1.push_back(o1.back() + pat[size_t(k * 7 + 3) % pat.size()]);
  }
  const int64_t L2 = std::max(o0.back(), o1.back()) + 5;
  for_each_isa_and_store([&] {
    const Layout lay = from_offsets({2, L2}, 1, {o0, o1});
    for (const char* r : {"sum", "mean", "max", "min"}) check_reduce(lay, t, r, random_data(rng, 2 * L2, r, t), rng);
  });
}

// Rows of a multiple of every build's kVF features (16, 128; 48 batched): the backward's
// sum/mean fills and tie=split writes take whole short segments a vector of
// features at a time straight to grad_input (sr_fill_wide, sr_tie_wide), streamed
// or not; lengths 0..33 around a long segment (> the piece rows: phase 2's),
// batched rows with rows outside every segment, NaN / +-inf at random places.
TEST_P(SegmentReduceIsa, WideFeatureRowsEveryBuild) {
  const DType t = GetParam();
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (int64_t f : {16, 128}) {
    const int64_t piece = std::max<int64_t>(64, (int64_t(1) << 16) / f);
    std::vector<int64_t> lens = {0, 1, 2, 0, 3, 15, 16, 17, 1, 0, 33, 5, piece + 3, 2, 0, 7, 1};
    const int64_t L = sum_of(lens);
    SCOPED_TRACE(::testing::Message() << "features " << f << ", L " << L);
    for_each_isa_and_store([&] {
      const Layout lay = from_lengths({L, f}, 0, {lens});
      for (const char* r : {"sum", "mean", "max", "min"}) {
        std::vector<double> x = random_data(rng, L * f, r, t);
        std::uniform_int_distribution<int64_t> pos(0, L * f - 1);
        for (double special : {kNaN, kInf, -kInf})
          for (int k = 0; k < 10; ++k) x[size_t(pos(rng))] = special;
        check_reduce(lay, t, r, x, rng, {false, true, false});
      }
    });
  }
  for (int64_t f : {48}) {
    std::vector<int64_t> o0 = {3}, o1 = {0};
    for (int64_t k = 0; k < 60; ++k) {
      o0.push_back(o0.back() + (k * 5) % 19);
      o1.push_back(o1.back() + (k * 11 + 3) % 23);
    }
    const int64_t L2 = std::max(o0.back(), o1.back()) + 4;
    SCOPED_TRACE(::testing::Message() << "batched, features " << f);
    for_each_isa_and_store([&] {
      const Layout lay = from_offsets({2, L2, f}, 1, {o0, o1});
      for (const char* r : {"sum", "mean", "max", "min"}) check_reduce(lay, t, r, random_data(rng, 2 * L2 * f, r, t), rng);
    });
  }
}

// The flat forward reduces kVF segments at once, and rows of 2/4/8 features
// kVF / inner segments at once (segment_reduce_isa_fwd.inc, sr_flat_block /
// sr_narrow_block: per-segment vector loops, then one batched lane tree, start
// value, mean and store per group). A segment's result must not depend on its
// neighbours or on its position in a group: each output is compared bit for bit
// with the same segment reduced alone (a one-segment call), for lengths 0, 1, every
// vector width +-1 and 2x/3x the width, groups broken by long segments (> Plan.chunk,
// phase 2) and by the block / tensor end, NaN / +-inf / signed-zero ties, an initial
// value of -0 and of 2.5, batched rows (axis 1), 1/2/4/8 features, every build.
TEST_P(SegmentReduceIsa, ShortSegmentGroupsEqualEachSegmentAloneEveryBuild) {
  const DType t = GetParam();
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  // 96 ... 257: several 4 kVF steps of the AVX-512 masked run (sr_flat_run_masked's pass 2).
  std::vector<int64_t> pat = {0, 1, 2, 0, 0, 1, 1, 31, 32, 33, 47, 48, 49, 64, 65, 96, 128, 129, 200, 257};
  for (int64_t w : {4, 8, 16})
    for (int64_t d : {-1, 0, 1}) pat.push_back(w + d);
  for (int64_t inner : {1, 2, 4, 8}) {
    const int64_t piece = inner == 1 ? int64_t(1) << 16 : std::max<int64_t>(64, (int64_t(1) << 16) / inner);
    std::vector<int64_t> lens;
    for (int64_t k = 0; k < 24; ++k) {
      std::vector<int64_t> p = pat;
      std::shuffle(p.begin(), p.end(), rng);
      lens.insert(lens.end(), p.begin(), p.begin() + int64_t(k % 5 + 9));
      if (k == 13) lens.push_back(piece + 3);  // a long segment inside a group
      if (k == 22) {
        lens.push_back(piece + 1);
        lens.push_back(2);
        lens.push_back(piece + 40);  // long, short, long
      }
    }
    lens.push_back(5);  // a short segment at the very end
    const int64_t L = sum_of(lens), S = int64_t(lens.size());
    SCOPED_TRACE(::testing::Message() << "inner " << inner << ", L " << L << ", S " << S);
    IsaScope restore;
    for (int isa = 0; isa <= int(cpu::softmax_best_isa()); ++isa) {  // (the forward has no streamed output)
      SCOPED_TRACE(::testing::Message() << "isa " << cpu::softmax_isa_name(cpu::SoftmaxIsa(isa)));
      cpu::softmax_isa_cap() = isa;
      for (const char* r : {"sum", "mean", "max", "min"}) {
        const Reduce rd = parse_reduce(r);
        std::vector<double> x = random_data(rng, 2 * L * inner, r, t);
        std::uniform_int_distribution<int64_t> pos(0, 2 * L * inner - 1);
        for (double special : {kNaN, kInf, -kInf})
          for (int k = 0; k < 12; ++k) x[size_t(pos(rng))] = special;
        x[1] = kNaN;  // in the first (short) segments
        x = rounded(t, x);
        for (int batched = 0; batched < (inner == 1 || inner == 4 ? 2 : 1); ++batched) {
          // batched: rows [2, L(, inner)] on axis 1, the second row's lengths reversed.
          std::vector<int64_t> meta = lens;
          if (batched) meta.insert(meta.end(), lens.rbegin(), lens.rend());
          Shape xs = batched ? Shape{2, L} : Shape{L};
          if (inner > 1) xs.push_back(inner);
          const int64_t rows = batched ? 2 : 1;
          const Tensor xt = make_tensor(std::vector<double>(x.begin(), x.begin() + rows * L * inner), xs, t);
          const Tensor mt = make_index(meta, batched ? Shape{2, S} : Shape{S}, DType::Int64);
          for (int ini = 0; ini < 3; ++ini) {
            Segments seg;
            seg.lengths = mt.view();
            seg.axis = batched ? 1 : 0;
            if (ini == 1) seg.initial = -0.0;
            if (ini == 2) seg.initial = 2.5;
            const Tensor out = segment_reduce(xt, rd, seg);
            ASSERT_EQ(out.numel(), rows * S * inner);
            const size_t es = size_t(dtype_size(t));
            int64_t b = 0;
            for (int64_t i = 0; i < rows * S; ++i) {
              if (i % S == 0) b = (i / S) * L;
              const int64_t n = meta[size_t(i)];
              if (n > piece) {  // phase 2's (not grouped): checked by the other tests
                b += n;
                continue;
              }
              std::vector<double> xi(x.begin() + b * inner, x.begin() + (b + n) * inner);
              const Tensor one = make_tensor(xi, inner > 1 ? Shape{n, inner} : Shape{n}, t);
              const Tensor ml = make_index({n}, Shape{1}, DType::Int64);
              Segments s1;
              s1.lengths = ml.view();
              s1.initial = seg.initial;
              const Tensor o1 = segment_reduce(one, rd, s1);
              ASSERT_EQ(std::memcmp(static_cast<const char*>(out.data()) + size_t(i * inner) * es, o1.data(),
                                    size_t(inner) * es),
                        0)
                  << r << " segment " << i << " of length " << n << ", initial " << ini << ", batched " << batched
                  << ": " << load_value(t, out.data(), i * inner) << " vs alone " << load_value(t, o1.data(), 0);
              if (n == 0 && ini == 1)  // an empty segment is the initial value, -0 included
                ASSERT_TRUE(std::signbit(load_value(t, out.data(), i * inner))) << r << " segment " << i;
              b += n;
            }
          }
        }
      }
    }
  }
}

// Segments of `lengths` with initial value case ini (0: none, 1: -0, 2: 2.5) and the
// float start value a sum over them begins from (the order tests' emulations).
struct WithInitial {
  Segments seg;
  float start;
};
WithInitial with_initial(const Tensor& lengths, int ini) {
  WithInitial w{Segments{}, ini == 2 ? 2.5f : ini == 1 ? -0.0f : 0.0f};
  w.seg.lengths = lengths.view();
  if (ini == 1) w.seg.initial = -0.0;
  if (ini == 2) w.seg.initial = 2.5;
  return w;
}

// The flat forward's order of additions, emulated in float: per segment two kVF-lane
// accumulators (vectors of the pair loop to a0 / a1, an odd vector to a0, the tail
// padded with +0 to a1), a0 + a1, then the lane tree (lane k + lane k + W/2, halving),
// start + r, the mean. sr_flat_block forms the vectors of segments of up to 4 kVF with
// count-masked loads instead of loops (sr_flat_lanes_short), longer ones with the loop:
// both must give exactly this order (the contract "a function of n alone"). Lengths 0
// to 200 (both tiers and the loop around 2 kVF and 4 kVF of every build, and the AVX-512
// masked run of mixed-tier groups, sr_flat_run_masked, up to several steps), shuffled, data
// spanning 24-60 binades (so a different order changes the bits), initial none / -0 / 2.5,
// sum and mean, every build, bit for bit.
// bfloat16 in the AVX-512 build (pairs = true) takes the parity order instead
// (segment_reduce_isa_vec.inc, kSrPairs): x[32b + 2j] to a0[j], x[32b + 2j + 1] to
// a1[j] for every block of 32, a partial last block padded with +0.
float emulated_flat_sum(const std::vector<float>& x, int64_t b, int64_t n, int kvf, bool pairs = false) {
  std::vector<float> a0(size_t(kvf), 0.0f), a1(size_t(kvf), 0.0f);
  int64_t i = 0;
  if (pairs)
    for (; i < n; i += 2 * kvf)
      for (int k = 0; k < kvf; ++k) {
        a0[size_t(k)] += i + 2 * k < n ? x[size_t(b + i + 2 * k)] : 0.0f;
        a1[size_t(k)] += i + 2 * k + 1 < n ? x[size_t(b + i + 2 * k + 1)] : 0.0f;
      }
  for (; i + 2 * kvf <= n; i += 2 * kvf)
    for (int k = 0; k < kvf; ++k) {
      a0[size_t(k)] += x[size_t(b + i + k)];
      a1[size_t(k)] += x[size_t(b + i + kvf + k)];
    }
  if (i + kvf <= n) {
    for (int k = 0; k < kvf; ++k) a0[size_t(k)] += x[size_t(b + i + k)];
    i += kvf;
  }
  if (i < n)
    for (int k = 0; k < kvf; ++k) a1[size_t(k)] += i + k < n ? x[size_t(b + i + k)] : 0.0f;
  for (int k = 0; k < kvf; ++k) a0[size_t(k)] += a1[size_t(k)];
  for (int w = kvf; w > 1; w /= 2)
    for (int k = 0; k < w / 2; ++k) a0[size_t(k)] += a0[size_t(k + w / 2)];
  return a0[0];
}

TEST_P(SegmentReduceIsa, FlatSumOrderIsTheLaneContractEveryBuild) {
  const DType t = GetParam();
  if (t == DType::Float64) GTEST_SKIP() << "float64 keeps the scalar-order loops";
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  std::vector<int64_t> lens;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<int64_t> p;
    for (int64_t n = 0; n <= 72; ++n) p.push_back(n);
    std::shuffle(p.begin(), p.end(), rng);
    lens.insert(lens.end(), p.begin(), p.end());
  }
  lens.push_back(3);  // a short segment at the very end of the tensor
  const int64_t L = sum_of(lens), S = int64_t(lens.size());
  std::uniform_real_distribution<double> u(1.0, 2.0);
  // Exponent spans wider than the float accumulator's 24 bits hold, so rounding
  // happens and a different order shows (16-bit types: within their range).
  std::uniform_int_distribution<int> e(t == DType::BFloat16 ? -30 : t == DType::Float16 ? -14 : -12,
                                       t == DType::BFloat16 ? 30 : t == DType::Float16 ? 10 : 12);
  // Data 1 (cancelling): each segment is +-s with pairs of +B and -B (B = 2^25 s, s = 1;
  // float16: B = 2^14, s = 2^-11) at random places. The exact sum is a small multiple
  // of s, but float absorbs an s added to a +-B, so the result counts the s that
  // met no B before it cancelled: an order's fingerprint that survives the rounding
  // of a 16-bit output (data 0's differences mostly do not).
  const double B = t == DType::Float16 ? 16384.0 : 33554432.0, sm = B / 33554432.0;
  const Tensor mt = make_index(lens, Shape{S}, DType::Int64);
  for (int data = 0; data < 2; ++data) {
    SCOPED_TRACE(data ? "cancelling data" : "wide binades");
    std::vector<double> xd(static_cast<size_t>(L));
    for (auto& v : xd) v = ((rng() & 1) ? 1.0 : -1.0) * (data ? sm : std::ldexp(u(rng), e(rng)));
    if (data) {
      int64_t b = 0;
      for (int64_t n : lens) {
        if (n < 4) {
          b += n;
          continue;
        }
        std::uniform_int_distribution<int64_t> pos(b, b + n - 1);
        for (int64_t k = 0; k < n / 4; ++k) {
          xd[size_t(pos(rng))] = B;
          xd[size_t(pos(rng))] = -B;  // (may land on the +B: then that B is gone; still exact)
        }
        b += n;
      }
    }
    xd = rounded(t, xd);
    const std::vector<float> xf(xd.begin(), xd.end());  // exact: the dtype's values
    const Tensor xt = make_tensor(xd, Shape{L}, t);
    IsaScope restore;
    for (int isa = 0; isa <= int(cpu::softmax_best_isa()); ++isa) {
      SCOPED_TRACE(::testing::Message() << "isa " << cpu::softmax_isa_name(cpu::SoftmaxIsa(isa)));
      cpu::softmax_isa_cap() = isa;
      const int kvf = isa == 0 ? 4 : isa == 1 ? 8 : 16;
      const bool pairs = isa == 2 && t == DType::BFloat16;
      for (const char* r : {"sum", "mean"})
        for (int ini = 0; ini < 3; ++ini) {
          const auto [seg, start] = with_initial(mt, ini);
          const bool mean = std::string(r) == "mean";
          const Tensor out = segment_reduce(xt, parse_reduce(r), seg);
          int64_t b = 0;
          for (int64_t i = 0; i < S; ++i) {
            const int64_t n = lens[size_t(i)];
            float v = start + emulated_flat_sum(xf, b, n, kvf, pairs);
            if (n == 0) v = mean ? (ini ? start : std::numeric_limits<float>::quiet_NaN()) : start;
            else if (mean) v = v / float(n);
            const double want = round_to(t, double(v)), got = load_value(t, out.data(), i);
            ASSERT_TRUE(same_value(want, got) && std::signbit(want) == std::signbit(got))
                << r << " segment " << i << " of length " << n << ", initial " << ini << ": " << got << " vs "
                << want;
            b += n;
          }
        }
    }
  }
}

// sr_flat_block picks the vector form per group of kVF segments: lengths that look
// uniform (span and half span m and m/2 times the first length, the group in one row)
// take the loop, the others the count-masked tiers (up to 4 kVF). Both must give the
// lane contract's bits: runs of one length n (every n around kVF, 2 kVF, 4 kVF of
// every build: whole uniform groups and partial ones), runs of n - 1 / n + 1
// alternating (equal spans, unequal lengths: the check says uniform), a run of n with
// one n + 1 in its middle, random lengths between, two rows of offsets (groups
// crossing the row end), sum / mean against the emulated order, max / min / sum with
// NaN and infinities against each segment alone, every build.
TEST_P(SegmentReduceIsa, UniformAndMixedLengthGroupsEveryBuild) {
  const DType t = GetParam();
  if (t == DType::Float64) GTEST_SKIP() << "float64 keeps the scalar-order loops";
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> any_len(0, 200);  // past 4 kVF: the masked run's steps
  std::vector<int64_t> lens;
  for (int64_t n : {0, 1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 48, 49, 63, 64, 65, 72}) {
    for (int k = 0; k < 37; ++k) lens.push_back(n);
    if (n > 0)
      for (int k = 0; k < 20; ++k) lens.push_back(k % 2 ? n + 1 : n - 1);
    for (int k = 0; k < 17; ++k) lens.push_back(k == 8 ? n + 1 : n);
    for (int k = 0; k < 11; ++k) lens.push_back(any_len(rng));
  }
  lens.push_back(3);
  const int64_t L = sum_of(lens), S = int64_t(lens.size());
  std::uniform_real_distribution<double> u(1.0, 2.0);
  std::uniform_int_distribution<int> e(t == DType::BFloat16 ? -30 : t == DType::Float16 ? -14 : -12,
                                       t == DType::BFloat16 ? 30 : t == DType::Float16 ? 10 : 12);
  std::vector<double> xd(static_cast<size_t>(2 * L));
  for (auto& v : xd) v = ((rng() & 1) ? 1.0 : -1.0) * std::ldexp(u(rng), e(rng));
  xd = rounded(t, xd);
  const std::vector<float> xf(xd.begin(), xd.end());
  std::vector<double> xs = xd;  // with specials, for the alone comparison
  std::uniform_int_distribution<int64_t> pos(0, 2 * L - 1);
  for (double special : {kNaN, kInf, -kInf})
    for (int k = 0; k < 40; ++k) xs[size_t(pos(rng))] = special;
  std::vector<int64_t> meta = lens;
  meta.insert(meta.end(), lens.begin(), lens.end());
  const Tensor mt = make_index(meta, Shape{2, S}, DType::Int64);
  IsaScope restore;
  for (int isa = 0; isa <= int(cpu::softmax_best_isa()); ++isa) {
    SCOPED_TRACE(::testing::Message() << "isa " << cpu::softmax_isa_name(cpu::SoftmaxIsa(isa)));
    cpu::softmax_isa_cap() = isa;
    const int kvf = isa == 0 ? 4 : isa == 1 ? 8 : 16;
    const bool pairs = isa == 2 && t == DType::BFloat16;
    for (int special = 0; special < 2; ++special) {
      const Tensor xt = make_tensor(special ? xs : xd, Shape{2, L}, t);
      for (const char* r : {"sum", "mean", "max", "min"}) {
        const bool order = !special && (std::string(r) == "sum" || std::string(r) == "mean");
        for (int ini = 0; ini < 2; ++ini) {
          Segments seg;
          seg.lengths = mt.view();
          seg.axis = 1;
          if (ini == 1) seg.initial = 2.5;
          const Tensor out = segment_reduce(xt, parse_reduce(r), seg);
          ASSERT_EQ(out.numel(), 2 * S);
          const size_t es = size_t(dtype_size(t));
          for (int64_t i = 0, b = 0; i < 2 * S; ++i) {
            if (i == S) b = L;
            const int64_t n = meta[size_t(i)];
            if (order) {
              const bool mean = std::string(r) == "mean";
              const float start = ini ? 2.5f : 0.0f;
              float v = start + emulated_flat_sum(xf, b, n, kvf, pairs);
              if (n == 0) v = mean ? (ini ? start : std::numeric_limits<float>::quiet_NaN()) : start;
              else if (mean) v = v / float(n);
              const double want = round_to(t, double(v)), got = load_value(t, out.data(), i);
              ASSERT_TRUE(same_value(want, got) && std::signbit(want) == std::signbit(got))
                  << r << " segment " << i << " of length " << n << ", initial " << ini << ": " << got << " vs "
                  << want;
            } else if (std::string(r) != "mean") {
              const std::vector<double>& src = special ? xs : xd;
              std::vector<double> xi(src.begin() + b, src.begin() + b + n);
              const Tensor one = make_tensor(xi, Shape{n}, t);
              const Tensor ml = make_index({n}, Shape{1}, DType::Int64);
              Segments s1;
              s1.lengths = ml.view();
              s1.initial = seg.initial;
              const Tensor o1 = segment_reduce(one, parse_reduce(r), s1);
              const bool eq = std::memcmp(static_cast<const char*>(out.data()) + size_t(i) * es, o1.data(), es) == 0;
              // (a sum of two NaNs may differ in the NaN's sign: SEMANTICS.md fixes no NaN bits)
              const double got = load_value(t, out.data(), i), alone = load_value(t, o1.data(), 0);
              ASSERT_TRUE(eq || (std::isnan(got) && std::isnan(alone)))
                  << r << " segment " << i << " of length " << n << ", initial " << ini << ": " << got
                  << " vs alone " << alone;
            }
            b += n;
          }
        }
      }
    }
  }
}

// Rows made of one length only: every group of kVF segments takes the uniform form,
// and groups end exactly at a row's end (S a multiple of kVF) or run across it (S =
// 37: the check sends those to the tiers), in batched rows; each output bit for bit
// that of the segment alone, sum / mean / max / min with NaN and infinities, every build;
// also uniform groups of long segments (reduced as empty there, then by phase 2).
TEST_P(SegmentReduceIsa, UniformRowsEndingAtGroupBoundariesEveryBuild) {
  const DType t = GetParam();
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  IsaScope restore;
  for (int64_t S : {16, 48, 37})
    for (int64_t n : {0, 1, 15, 16, 17, 31, 32, 33, 64, 65, 72, 65537}) {
      if (n == 65537 && S != 16) continue;  // a uniform group of long segments (phase 2's: > Plan.chunk)
      const int64_t rows = n > 1000 ? 1 : 3, L = S * n;
      SCOPED_TRACE(::testing::Message() << "S " << S << ", n " << n);
      for (const char* r : {"sum", "mean", "max", "min"}) {
        std::vector<double> x = random_data(rng, std::max<int64_t>(1, rows * L), r, t);
        x.resize(size_t(rows * L));
        if (!x.empty()) {
          std::uniform_int_distribution<int64_t> pos(0, rows * L - 1);
          for (double special : {kNaN, kInf, -kInf})
            for (int k = 0; k < 3; ++k) x[size_t(pos(rng))] = special;
        }
        x = rounded(t, x);
        const Tensor xt = make_tensor(x, Shape{rows, L}, t);
        const Tensor mt = make_index(std::vector<int64_t>(size_t(rows * S), n), Shape{rows, S}, DType::Int64);
        Segments seg;
        seg.lengths = mt.view();
        seg.axis = 1;
        for (int isa = 0; isa <= int(cpu::softmax_best_isa()); ++isa) {
          SCOPED_TRACE(::testing::Message() << "isa " << cpu::softmax_isa_name(cpu::SoftmaxIsa(isa)));
          cpu::softmax_isa_cap() = isa;
          const Tensor out = segment_reduce(xt, parse_reduce(r), seg);
          ASSERT_EQ(out.numel(), rows * S);
          const size_t es = size_t(dtype_size(t));
          for (int64_t i = 0; i < rows * S; ++i) {
            if (n > 1000 && i % 5 != 0) continue;  // (long ones: a few; each alone call wakes the threads)
            const int64_t b = i * n;  // rows * S segments of n back to back
            std::vector<double> xi(x.begin() + b, x.begin() + b + n);
            const Tensor one = make_tensor(xi, Shape{n}, t);
            const Tensor ml = make_index({n}, Shape{1}, DType::Int64);
            Segments s1;
            s1.lengths = ml.view();
            const Tensor o1 = segment_reduce(one, parse_reduce(r), s1);
            const double got = load_value(t, out.data(), i), alone = load_value(t, o1.data(), 0);
            const bool eq = std::memcmp(static_cast<const char*>(out.data()) + size_t(i) * es, o1.data(), es) == 0;
            ASSERT_TRUE(eq || (std::isnan(got) && std::isnan(alone)))
                << r << " segment " << i << ": " << got << " vs alone " << alone;
          }
        }
      }
    }
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, SegmentReduceIsa, ::testing::ValuesIn(kFloatTypes),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// ---- Session 10 (H20): the forward on rows of whole vectors of features ----------

// Rows of 1, 2, 4 or 8 vectors of features (inner == kVF ... 8 kVF of a build:
// sr_wide_block, accumulators in registers, streamed stores when the output is large)
// must keep the generic loop's order: per feature start, then rows 0, 1, ... in turn,
// then / n. Sum and mean bit for bit against that order emulated in float (data over
// many binades, so another order shows), initial none / -0 / 2.5; max / min / sum with
// NaN / +-inf / signed zeros against the float64 reference; lengths 0..33 around a long
// segment (> the piece rows: phase 2's), batched rows with rows outside every segment;
// features 8 ... 256 (wide in some builds, not in others: 48, 256), every build,
// streamed and plain stores.
class SegmentReduceWideRows : public ::testing::TestWithParam<DType> {};

TEST_P(SegmentReduceWideRows, ForwardOrderAndSpecialsEveryBuild) {
  const DType t = GetParam();
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(1.0, 2.0);
  // Float16: sums of up to 33 values of up to 2^5 stay finite.
  std::uniform_int_distribution<int> e(t == DType::BFloat16 ? -30 : -12,
                                       t == DType::BFloat16 ? 30 : t == DType::Float16 ? 4 : 12);
  for (int64_t f : {8, 16, 32, 48, 64, 128, 256}) {
    const int64_t piece = std::max<int64_t>(64, (int64_t(1) << 16) / f);
    std::vector<int64_t> lens;
    for (int64_t n = 0; n <= 33; ++n) lens.push_back(n);
    std::shuffle(lens.begin(), lens.end(), rng);
    lens.insert(lens.begin() + 11, piece + 3);
    lens.push_back(1);  // a short segment at the very end of the tensor
    const int64_t L = sum_of(lens), S = int64_t(lens.size());
    SCOPED_TRACE(::testing::Message() << "features " << f << ", L " << L);
    std::vector<double> xd(size_t(L * f));
    for (auto& v : xd) v = ((rng() & 1) ? 1.0 : -1.0) * std::ldexp(u(rng), e(rng));
    xd = rounded(t, xd);
    const Tensor xt = make_tensor(xd, Shape{L, f}, t);
    const Tensor mt = make_index(lens, Shape{S}, DType::Int64);
    for_each_isa_and_store([&] {
      // Rows narrower than a vector take sr_narrow_block (lanes folded: another order).
      const int64_t kvf = cpu::softmax_isa() == cpu::SoftmaxIsa::Avx512 ? 16
                          : cpu::softmax_isa() == cpu::SoftmaxIsa::Avx2 ? 8
                                                                        : 4;
      if (t != DType::Float64 && f >= kvf)
        for (const char* r : {"sum", "mean"})
          for (int ini = 0; ini < 3; ++ini) {
            const auto [seg, start] = with_initial(mt, ini);
            const bool mean = std::string(r) == "mean";
            const Tensor out = segment_reduce(xt, parse_reduce(r), seg);
            int64_t b = 0;
            for (int64_t i = 0; i < S; ++i) {
              const int64_t n = lens[size_t(i)];
              if (n <= piece)  // (a long segment's pieces are summed apart)
                for (int64_t k = 0; k < f; ++k) {
                  float v = start;
                  for (int64_t j = 0; j < n; ++j) v += float(xd[size_t((b + j) * f + k)]);
                  if (mean) v = n > 0 ? v / float(n) : ini ? start : std::numeric_limits<float>::quiet_NaN();
                  const double want = round_to(t, double(v)), got = load_value(t, out.data(), i * f + k);
                  ASSERT_TRUE(same_value(want, got) && std::signbit(want) == std::signbit(got))
                      << r << " segment " << i << " of length " << n << ", feature " << k << ", initial " << ini
                      << ": " << got << " vs " << want;
                }
              b += n;
            }
          }
      if (f != 16 && f != 48 && f != 128) return;  // (time: the reference checks on three widths)
      const Layout lay = from_lengths({L, f}, 0, {lens});
      for (const char* r : {"sum", "max", "min"}) {
        std::vector<double> x = random_data(rng, L * f, r, t);
        std::uniform_int_distribution<int64_t> pos(0, L * f - 1);
        for (double special : {kNaN, kInf, -kInf, -0.0})
          for (int k = 0; k < 12; ++k) x[size_t(pos(rng))] = special;
        check_reduce(lay, t, r, x, rng, {false, false, true});
      }
    });
  }
  // Batched rows (axis 1) with rows outside every segment, offsets not starting at 0.
  for (int64_t f : {32}) {
    std::vector<int64_t> o0 = {3}, o1 = {0};
    for (int64_t k = 0; k < 40; ++k) {
      o0.push_back(o0.back() + (k * 5) % 19);
      o1.push_back(o1.back() + (k * 11 + 3) % 23);
    }
    const int64_t L2 = std::max(o0.back(), o1.back()) + 4;
    SCOPED_TRACE(::testing::Message() << "batched, features " << f);
    for_each_isa_and_store([&] {
      const Layout lay = from_offsets({2, L2, f}, 1, {o0, o1});
      for (const char* r : {"mean", "max"})
        check_reduce(lay, t, r, random_data(rng, 2 * L2 * f, r, t), rng, {false, false, true});
    });
  }
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, SegmentReduceWideRows, ::testing::ValuesIn(kFloatTypes),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// ---- Session 10 (H19): flat 16-bit backward runs composed in 16-bit lanes ---------

// The flat sum / mean / max-min (tie=split) backward of float16 and bfloat16 writes
// its runs of short segments in 16-bit lanes (sr_run16): segment values narrowed kVF
// segments at a time (tie counts over groups cut at 4096 rows), the tie predicate on
// the bit patterns, and on AVX-512, where the lengths vary, a fixed number of blend
// steps per vector plus a loop where more segments start inside it. Lengths: mixes of
// 0..80 (several starts per vector, empty segments at vector edges), 0..3, runs of 32
// (equal lengths: the other loop), segments of 1000..5000 rows (groups cut by rows,
// whole-vector stores), a long one between two runs (phase 2); data on the tie grid
// (signed zeros) with NaN / +-inf; batched rows with offsets past 0 and rows outside
// every segment; every build, streamed and plain stores, against the float64 reference.
class SegmentReduce16BitRuns : public ::testing::TestWithParam<DType> {};

TEST_P(SegmentReduce16BitRuns, FlatBackwardRunsEveryBuild) {
  const DType t = GetParam();
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> short_len(0, 80), tiny(0, 3), mid(1000, 5000);
  auto mixed = [&](int count) {
    std::vector<int64_t> v;
    for (int k = 0; k < count; ++k) {
      const int kind = k % 23;
      v.push_back(kind < 12 ? short_len(rng) : kind < 18 ? tiny(rng) : kind == 22 && k % 5 == 0 ? mid(rng) : 32);
    }
    return v;
  };
  std::vector<int64_t> lens = mixed(3000);
  lens.insert(lens.begin() + 1500, (int64_t(1) << 16) + 9);  // long (> the piece rows)
  const int64_t L = sum_of(lens);
  SCOPED_TRACE(::testing::Message() << "L " << L << ", S " << lens.size());
  for_each_isa_and_store([&] {
    const Layout lay = from_lengths({L}, 0, {lens});
    for (const char* r : {"sum", "mean", "max", "min"}) {
      std::vector<double> x = random_data(rng, L, r, t);
      std::uniform_int_distribution<int64_t> pos(0, L - 1);
      for (double special : {kNaN, kInf, -kInf, -0.0})
        for (int k = 0; k < 30; ++k) x[size_t(pos(rng))] = special;
      check_reduce(lay, t, r, x, rng, {false, true, false});
    }
  });
  std::vector<int64_t> o0 = {3}, o1 = {0};
  for (int64_t n : mixed(600)) o0.push_back(o0.back() + n);
  for (int64_t n : mixed(500)) o1.push_back(o1.back() + n);
  while (o1.size() < o0.size()) o1.push_back(o1.back() + short_len(rng));
  while (o0.size() < o1.size()) o0.push_back(o0.back() + short_len(rng));
  const int64_t L2 = std::max(o0.back(), o1.back()) + 5;
  SCOPED_TRACE(::testing::Message() << "batched, L " << L2);
  for_each_isa_and_store([&] {
    const Layout lay = from_offsets({2, L2}, 1, {o0, o1});
    for (const char* r : {"sum", "mean", "max"}) check_reduce(lay, t, r, random_data(rng, 2 * L2, r, t), rng, {false, true, true});
  });
}

INSTANTIATE_TEST_SUITE_P(Storage16, SegmentReduce16BitRuns, ::testing::Values(DType::Float16, DType::BFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// ---- Session 11 (H22): the forward on rows of 2 / 4 / 8 features, uniform groups ----

// sr_narrow_block folds G = kVF / features segments at a time, groups starting at
// multiples of G; a group of G equal lengths in one row of offsets is read as G
// interleaved runs of vectors (sr_narrow_lanes_uniform), the others per segment, and
// a whole group's output vector is streamed when the output is large. Every output
// must be bit for bit that of the segment alone (one segment: the per-segment form;
// NaN bits excepted): runs of one length n (whole and partial vectors per segment,
// n = 0, long ones of phase 2), one n + 1 in each run (the group check must see it),
// random lengths between, batched rows whose groups cross a row's end (S = 37, offsets
// not starting at 0, rows outside every segment), sum / mean / max / min with NaN and
// +-inf, initial none / 2.5, every build, streamed and plain stores; a block split
// (many segments: blocks start at any segment) with the float64 reference.
class SegmentReduceNarrowRows : public ::testing::TestWithParam<DType> {};

TEST_P(SegmentReduceNarrowRows, UniformGroupsEqualEachSegmentAloneEveryBuild) {
  const DType t = GetParam();
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> any_len(0, 40);
  for (int64_t f : {2, 4, 8}) {
    const int64_t piece = std::max<int64_t>(64, (int64_t(1) << 16) / f);  // (above Plan.chunk's rows: phase 2)
    std::vector<int64_t> lens;
    for (int64_t n : {0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 33}) {
      for (int k = 0; k < 37; ++k) lens.push_back(k == 21 ? n + 1 : n);
      for (int k = 0; k < 5; ++k) lens.push_back(any_len(rng));
    }
    for (int k = 0; k < 8; ++k) lens.push_back(piece + 1);  // uniform groups of long segments
    for (int k = 0; k < 9; ++k) lens.push_back(16);
    lens.push_back(3);  // a short segment at the very end of the tensor
    const int64_t L = sum_of(lens), S = int64_t(lens.size());
    // Batched: 3 rows of 37 offsets each, uniform runs, the first offset 2.
    std::vector<std::vector<int64_t>> offs(3);
    for (int64_t row = 0; row < 3; ++row) {
      offs[size_t(row)] = {2};
      for (int64_t k = 0; k < 37; ++k) offs[size_t(row)].push_back(offs[size_t(row)].back() + (k == 30 ? 7 : 4 + row));
    }
    const int64_t L2 = offs[2].back() + 3;
    SCOPED_TRACE(::testing::Message() << "features " << f << ", L " << L);
    for (const char* r : {"sum", "mean", "max", "min"}) {
      const bool mm = std::string(r) == "max" || std::string(r) == "min";
      auto data = [&](int64_t n) {
        std::vector<double> x = random_data(rng, n, mm ? r : "sum", t);
        std::uniform_int_distribution<int64_t> pos(0, n - 1);
        for (double special : {kNaN, kInf, -kInf})
          for (int k = 0; k < 6; ++k) x[size_t(pos(rng))] = special;
        return rounded(t, x);
      };
      const std::vector<double> x = data(L * f), x2 = data(3 * L2 * f);
      const Tensor xt = make_tensor(x, Shape{L, f}, t), xt2 = make_tensor(x2, Shape{3, L2, f}, t);
      const Tensor mt = make_index(lens, Shape{S}, DType::Int64);
      std::vector<int64_t> ov;
      for (const auto& row : offs) ov.insert(ov.end(), row.begin(), row.end());
      const Tensor ot = make_index(ov, Shape{3, 38}, DType::Int64);
      for_each_isa_and_store([&] {
        for (int ini = 0; ini < 2; ++ini)
          for (int batched = 0; batched < 2; ++batched) {
            Segments seg;
            if (batched) {
              seg.offsets = ot.view();
              seg.axis = 1;
            } else {
              seg.lengths = mt.view();
            }
            if (ini) seg.initial = 2.5;
            const Tensor out = segment_reduce(batched ? xt2 : xt, parse_reduce(r), seg);
            const std::vector<double>& src = batched ? x2 : x;
            const int64_t count = batched ? 3 * 37 : S;
            const size_t es = size_t(dtype_size(t));
            for (int64_t i = 0; i < count; ++i) {
              int64_t b, n;
              if (batched) {
                const auto& row = offs[size_t(i / 37)];
                b = (i / 37) * L2 + row[size_t(i % 37)];
                n = row[size_t(i % 37) + 1] - row[size_t(i % 37)];
              } else {
                b = 0;
                for (int64_t k = 0; k < i; ++k) b += lens[size_t(k)];
                n = lens[size_t(i)];
              }
              if (n > piece && i % 3 != 0) continue;  // (long ones: a few)
              std::vector<double> xi(src.begin() + b * f, src.begin() + (b + n) * f);
              const Tensor one = make_tensor(xi, Shape{n, f}, t);
              const Tensor ml = make_index({n}, Shape{1}, DType::Int64);
              Segments s1;
              s1.lengths = ml.view();
              s1.initial = seg.initial;
              const Tensor o1 = segment_reduce(one, parse_reduce(r), s1);
              for (int64_t k = 0; k < f; ++k) {
                const double got = load_value(t, out.data(), i * f + k), alone = load_value(t, o1.data(), k);
                const bool eq = std::memcmp(static_cast<const char*>(out.data()) + size_t(i * f + k) * es,
                                            static_cast<const char*>(o1.data()) + size_t(k) * es, es) == 0;
                ASSERT_TRUE(eq || (std::isnan(got) && std::isnan(alone)))
                    << r << (batched ? " batched" : "") << " segment " << i << " of length " << n << ", feature " << k
                    << ", initial " << ini << ": " << got << " vs alone " << alone;
              }
            }
          }
      });
    }
    // Many segments of 16 rows and a few odd ones: several parallel blocks, each
    // starting at any segment (groups cut at multiples of G), against float64.
    std::vector<int64_t> many(4099, 16);
    for (size_t k = 100; k < many.size(); k += 997) many[k] = 5;
    const Layout lay = from_lengths({sum_of(many), f}, 0, {many});
    for_each_isa_and_store([&] {
      for (const char* r : {"sum", "max"})
        check_reduce(lay, t, r, random_data(rng, sum_of(many) * f, r, t), rng, {false, false, true});
    });
  }
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, SegmentReduceNarrowRows, ::testing::ValuesIn(kFloatTypes),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// ---- Session 11 (H23): flat sum / mean backward runs of varying lengths ----

// sr_run16 (float16, bfloat16) and sr_run (float32) write a run of short segments
// whose lengths vary through a stage of 2 KiB: every segment stores its value over
// 3 whole vectors (16-bit) or 64 elements (float32) from its start (the next
// segments overwrite the rest), a loop for the remainder of a longer one, then the
// chunk is copied out. Lengths here: exponential (mean 40, zeros included), the
// fixed stores' reach and one off (48 and 96 elements; 64 for float32),
// segments ending exactly at a chunk's end (with empty ones there), segments
// spanning several chunks, empty ones at the run's end; runs from offset 0 and from
// offset 3 (the first and last vectors partial), against float64, every build,
// streamed and plain.
class SegmentReduceStagedFills : public ::testing::TestWithParam<DType> {};

// Two batched rows of offsets over `lens` without its last length: row 0 from 3
// in order, row 1 from 0 in reverse order, and an axis length 5 past both ends.
std::tuple<std::vector<int64_t>, std::vector<int64_t>, int64_t> two_batched_rows(const std::vector<int64_t>& lens) {
  std::vector<int64_t> o0 = {3}, o1 = {0};
  for (size_t k = 0; k + 1 < lens.size(); ++k) {
    o0.push_back(o0.back() + lens[k]);
    o1.push_back(o1.back() + lens[lens.size() - 2 - k]);
  }
  const int64_t L2 = std::max(o0.back(), o1.back()) + 5;
  return {o0, o1, L2};
}

TEST_P(SegmentReduceStagedFills, VaryingFlatFillsEveryBuild) {
  const DType t = GetParam();
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> expo(1.0 / 40.0);
  std::vector<int64_t> lens;
  auto add_expo = [&](int count) {
    for (int k = 0; k < count; ++k) lens.push_back(int64_t(std::llround(expo(rng))));
  };
  add_expo(300);
  for (int64_t n : {47, 48, 49, 63, 64, 65, 95, 96, 97, 1, 0, 2}) lens.push_back(n);
  // Up to the next multiple of 1024 elements (a chunk end for either stage), then
  // empty segments there.
  lens.push_back(1024 - sum_of(lens) % 1024);
  for (int k = 0; k < 3; ++k) lens.push_back(0);
  add_expo(200);
  for (int64_t n : {2500, 0, 1023, 1, 1025}) lens.push_back(n);
  add_expo(200);
  for (int k = 0; k < 2; ++k) lens.push_back(0);
  const int64_t L = sum_of(lens);
  SCOPED_TRACE(::testing::Message() << "L " << L << ", S " << lens.size());
  const auto [o0, o1, L2] = two_batched_rows(lens);
  for_each_isa_and_store([&] {
    const Layout lay = from_lengths({L}, 0, {lens});
    for (const char* r : {"sum", "mean"}) check_reduce(lay, t, r, random_data(rng, L, r, t), rng, {true, true, true});
    const Layout lay2 = from_offsets({2, L2}, 1, {o0, o1});
    for (const char* r : {"sum", "mean"})
      check_reduce(lay2, t, r, random_data(rng, 2 * L2, r, t), rng, {false, true, true});
  });
}

INSTANTIATE_TEST_SUITE_P(FloatStorage, SegmentReduceStagedFills,
                         ::testing::Values(DType::Float32, DType::Float16, DType::BFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// ---- Session 12 (H25): flat sum / mean backward runs of single-element segments ----

// sr_run16 (float16, bfloat16) and sr_run (float32) write a run whose segments all
// hold one element (1d_huge_plus_ones: the singles beside a long segment) a chunk
// at a time from the upstream values themselves (16-bit: the group fill's values
// stored as they are; float32: g's vectors), each chunk checked first (o[s + k] ==
// o[s] + k), else the general path. Runs here: singles between long segments
// (phase 2's), a run that only looks like singles (equal spans: a 0 then a 2 inside),
// an empty one inside, runs of 1 to 40 singles, runs ending at the tensor's end;
// from offset 0 and batched from offset 3 (partial first vectors). Against float64,
// every build, streamed and plain; then bit for bit the baseline build's output
// (the equal-length loop) with NaNs, signalling NaNs, -0 and infinities in g.
class SegmentReduceSingles : public ::testing::TestWithParam<DType> {};

TEST_P(SegmentReduceSingles, FlatSingleRunsEveryBuild) {
  const DType t = GetParam();
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const int64_t kLong = 70000;  // over a piece (2^16 rows): phase 2 writes it
  std::vector<int64_t> lens;
  auto ones = [&](int64_t n) { lens.insert(lens.end(), size_t(n), 1); };
  ones(1500);
  lens.push_back(kLong);
  ones(2100);
  lens.push_back(0);
  lens.push_back(2);  // the run's spans still equal its count: looks like singles
  ones(1300);
  lens.push_back(kLong);
  for (int64_t n : {1, 2, 7, 16, 17, 31, 32, 33, 40}) {
    ones(n);
    lens.push_back(kLong + n);
  }
  ones(900);
  lens.push_back(0);  // an empty one inside a run of singles
  ones(1100);
  const int64_t L = sum_of(lens);
  SCOPED_TRACE(::testing::Message() << "L " << L << ", S " << lens.size());
  const auto [o0, o1, L2] = two_batched_rows(lens);
  const Layout lay = from_lengths({L}, 0, {lens});
  const Layout lay2 = from_offsets({2, L2}, 1, {o0, o1});
  for_each_isa_and_store([&] {
    for (const char* r : {"sum", "mean"}) {
      check_reduce(lay, t, r, random_data(rng, L, r, t), rng, {false, true, false});
      check_reduce(lay2, t, r, random_data(rng, 2 * L2, r, t), rng, {false, true, false});
    }
  });
  // Bit for bit the baseline build's output, specials in g (signalling NaNs too).
  const int64_t es = dtype_size(t);
  for (const Layout* ly : {&lay, &lay2}) {
    const Tensor meta = ly->meta();
    const Segments seg = segments_of(*ly, meta);
    const Tensor x = make_tensor(random_data(rng, numel(ly->shape), "sum", t), ly->shape, t);
    std::vector<double> gv = mixed_grads(rng, numel(ly->out_shape()), t);
    for (size_t k = 0; k < gv.size(); k += 5) gv[k] = k % 3 == 0 ? kNaN : k % 3 == 1 ? -0.0 : -kInf;
    const Tensor grad = make_tensor(gv, ly->out_shape(), t);
    const Tensor out = segment_reduce(x, Reduce::Sum, seg);
    for (size_t k = 2; k < gv.size(); k += 7) {  // signalling NaNs of either sign
      char* gp = static_cast<char*>(grad.data()) + k * size_t(es);
      if (t == DType::Float32) {
        const uint32_t b = k % 2 ? 0xff800001u : 0x7f810000u;
        std::memcpy(gp, &b, 4);
      } else {
        const uint16_t b = t == DType::BFloat16 ? (k % 2 ? 0xff81 : 0x7f81) : (k % 2 ? 0xfc01 : 0x7c02);
        std::memcpy(gp, &b, 2);
      }
    }
    for (Reduce red : {Reduce::Sum, Reduce::Mean}) {
      Tensor want;
      for_each_isa_and_store([&] {
        Tensor gi = filled(ly->shape, t, 7777.0);
        segment_reduce_backward_out(grad, out, x, red, seg, Tie::Split, gi);
        if (!want.data()) want = std::move(gi);  // the baseline build, plain stores
        else EXPECT_TRUE(same_bits(gi, want)) << (red == Reduce::Sum ? "sum" : "mean") << ": not the baseline's bits";
      });
    }
  }
}

// sr_flat_block (forward): a group of kVF segments of one length of 1 to 4 whole
// vectors, checked segment by segment, reads them with the length a constant
// (sr_flat_lanes_fixed). Lengths here: runs of equal whole-vector lengths for every
// build's kVF (4, 8, 16: 4 to 128 elements), runs whose spans look equal but whose
// lengths differ (31/33, 0/64, 15/17), a long segment after them; plain and batched
// (a second row of offsets). Every segment's output bit for bit that segment
// reduced alone (no group), every build, sum / mean / max / min with NaN and inf.
TEST_P(SegmentReduceSingles, ForwardFixedLengthGroupsEveryBuild) {
  const DType t = GetParam();
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  std::vector<int64_t> lens;
  for (int64_t n : {4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 32, 16}) lens.insert(lens.end(), 37, n);
  std::vector<int64_t> odd(40, 32);
  odd[5] = 31;
  odd[6] = 33;
  odd[20] = 0;
  odd[21] = 64;
  lens.insert(lens.end(), odd.begin(), odd.end());
  std::vector<int64_t> odd16(40, 16);
  odd16[3] = 15;
  odd16[9] = 17;
  lens.insert(lens.end(), odd16.begin(), odd16.end());
  lens.push_back((int64_t(1) << 16) + 5);  // long: phase 2
  lens.insert(lens.end(), 21, 8);
  const int64_t L = sum_of(lens), S = int64_t(lens.size());
  SCOPED_TRACE(::testing::Message() << "L " << L << ", S " << S);
  const int64_t es = dtype_size(t);
  IsaScope restore;
  for (int isa = 0; isa <= int(cpu::softmax_best_isa()); ++isa) {
    SCOPED_TRACE(::testing::Message() << "isa " << cpu::softmax_isa_name(cpu::SoftmaxIsa(isa)));
    cpu::softmax_isa_cap() = isa;
    for (const char* r : {"sum", "mean", "max", "min"}) {
      std::vector<double> x = random_data(rng, 2 * L, r, t);
      std::uniform_int_distribution<int64_t> pos(0, 2 * L - 1);
      for (double special : {kNaN, kInf, -kInf})
        for (int k = 0; k < 8; ++k) x[size_t(pos(rng))] = special;
      x = rounded(t, x);
      for (int batched = 0; batched < 2; ++batched) {
        std::vector<int64_t> meta = lens;
        if (batched) meta.insert(meta.end(), lens.rbegin(), lens.rend());
        const int64_t rows = batched ? 2 : 1;
        const Tensor xt = make_tensor(std::vector<double>(x.begin(), x.begin() + rows * L), batched ? Shape{2, L} : Shape{L}, t);
        const Tensor mt = make_index(meta, batched ? Shape{2, S} : Shape{S}, DType::Int64);
        Segments seg;
        seg.lengths = mt.view();
        seg.axis = batched ? 1 : 0;
        const Tensor out = segment_reduce(xt, parse_reduce(r), seg);
        int64_t b = 0;
        for (int64_t i = 0; i < rows * S; ++i) {
          const int64_t n = meta[size_t(i)];
          if (i == S) b = L;  // the second row starts at its own row
          if (n <= (int64_t(1) << 16)) {
            const Tensor one = make_tensor(std::vector<double>(x.begin() + b, x.begin() + b + n), Shape{n}, t);
            const Tensor ml = make_index({n}, Shape{1}, DType::Int64);
            Segments s1;
            s1.lengths = ml.view();
            const Tensor o1 = segment_reduce(one, parse_reduce(r), s1);
            const double got = load_value(t, out.data(), i), alone = load_value(t, o1.data(), 0);
            const bool eq = std::memcmp(static_cast<const char*>(out.data()) + size_t(i) * es, o1.data(), size_t(es)) == 0;
            ASSERT_TRUE(eq || (std::isnan(got) && std::isnan(alone)))
                << r << (batched ? " batched" : "") << " segment " << i << " of length " << n << ": " << got
                << " vs alone " << alone;
          }
          b += n;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(FloatStorage, SegmentReduceSingles,
                         ::testing::Values(DType::Float32, DType::Float16, DType::BFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace segred::testing
