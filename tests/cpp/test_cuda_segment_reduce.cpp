// segment_reduce on CUDA (shared/TESTING.md): the CPU suite's cases repeated on
// the device and compared with the float64 reference and with the CPU backend;
// constructed ties with gradients of every sign; device metadata validated with
// the CPU's messages; unsafe metadata clamped exactly like the CPU; every CUDA
// path proven through the trace; and boundary execution past UINT32_MAX elements
// for each path that has 32- and 64-bit variants.
//
// Every test skips when no CUDA device is present (CI), so the file builds and
// runs everywhere; the GPU run is tools/gpu-check.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

#include "src/core/segment_geometry.h"
#include "tests/cpp/segment_reduce_test_util.h"

#ifdef SEGRED_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace segred::testing {
namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

Tensor dev(const TensorView& h) { return Tensor::copy_to(Tensor::contiguous_copy(h), kGpu); }
Tensor host(const TensorView& d) { return Tensor::copy_to(d, DeviceRef{}); }

#ifdef SEGRED_WITH_CUDA
// A device tensor of `shape` with every byte 0xff (NaN in every float dtype).
Tensor poisoned(const Shape& shape, DType t) {
  Tensor d = Tensor::empty(shape, t, kGpu);
  if (d.numel()) EXPECT_EQ(cudaMemset(d.data(), 0xff, size_t(d.numel()) * dtype_size(t)), cudaSuccess);
  return d;
}
#endif

// Equal values, NaN == NaN and -0 == +0 (NaN payloads and the sign of a zero
// max may differ between backends that combine in different orders).
bool same_values(const TensorView& a, const TensorView& b) {
  const auto va = to_vec(a), vb = to_vec(b);
  if (va.size() != vb.size()) return false;
  for (size_t i = 0; i < va.size(); ++i)
    if (!same_value(va[i], vb[i])) return false;
  return true;
}

Segments dev_segments(const Layout& lay, const Tensor& meta_dev) { return segments_of(lay, meta_dev); }

// Every path a call launched.
std::set<std::string> paths_of(const TraceSession& ts) {
  std::set<std::string> out;
  for (const auto& r : ts.records()) {
    EXPECT_EQ(r.backend, Backend::CUDA) << r.path;
    EXPECT_GT(r.grid[0], 0) << r.path;
    EXPECT_GT(r.block[0], 0) << r.path;
    out.insert(r.path);
  }
  return out;
}

struct CudaCheck {
  bool unsafe = false;
  bool all_grads = false;  // also constant gradients -2.5, 0, 1
};

// Forward and backward of `lay` on CUDA against the float64 reference, the CPU
// backend (max/min bitwise; others within the reference tolerance), poisoned
// outputs, and run-to-run bit equality. Returns the CUDA paths reached.
std::set<std::string> check_cuda(const Layout& lay, DType t, const std::string& reduce, const std::vector<double>& x_in,
                                 std::mt19937_64& rng, const CudaCheck& opt = {}) {
  std::set<std::string> reached;
#ifdef SEGRED_WITH_CUDA
  const std::vector<double> x = rounded(t, x_in);
  SCOPED_TRACE(::testing::Message() << "CUDA reduce=" << reduce << " dtype=" << dtype_name(t) << " shape="
                                    << shape_string(lay.shape) << " axis=" << lay.axis << " S=" << lay.S
                                    << (lay.use_lengths ? " lengths" : " offsets") << " index="
                                    << dtype_name(lay.index_dtype));
  const Tensor data_h = make_tensor(x, lay.shape, t);
  const Tensor meta_h = lay.meta();
  const Tensor data = dev(data_h), meta = dev(meta_h);
  Segments seg_h = segments_of(lay, meta_h), seg = dev_segments(lay, meta);
  seg_h.unsafe = seg.unsafe = opt.unsafe;
  const Reduce red = parse_reduce(reduce);
  const reference::Problem prob = lay.problem();

  Tensor out = poisoned(lay.out_shape(), t);
  {
    TraceSession ts;
    segment_reduce_out(data, red, seg, out);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (const auto& p : paths_of(ts)) reached.insert(p);
  }
  const Tensor out_h = host(out);
  const std::vector<double> got = to_vec(out_h);
  expect_forward(lay, t, reduce, x, got, reference::forward(prob, x, canonical(reduce)));
  const Tensor cpu_out = segment_reduce(data_h, red, seg_h);
  if (is_tie_reduce(reduce)) EXPECT_TRUE(same_values(out_h, cpu_out)) << "CUDA max/min forward differs from the CPU";
  {
    Tensor out2 = poisoned(lay.out_shape(), t);
    segment_reduce_out(data, red, seg, out2);
    EXPECT_TRUE(same_bits(out_h, host(out2))) << "forward not bitwise reproducible";
  }
  std::vector<std::vector<double>> grads = {mixed_grads(rng, out.numel(), t)};
  if (opt.all_grads)
    for (double c : {-2.5, 0.0, 1.0}) grads.emplace_back(size_t(out.numel()), c);
  const std::vector<std::string> ties = is_tie_reduce(reduce) ? std::vector<std::string>{"split", "first", "last"}
                                                              : std::vector<std::string>{"split"};
  for (const auto& tie : ties)
    for (const auto& gv : grads) {
      SCOPED_TRACE(::testing::Message() << "tie=" << tie << " grad[0]=" << (gv.empty() ? 0.0 : gv[0]));
      const Tensor grad_h = make_tensor(gv, lay.out_shape(), t);
      const Tensor grad = dev(grad_h);
      Tensor gi = poisoned(lay.shape, t);
      {
        TraceSession ts;
        segment_reduce_backward_out(grad, out, data, red, seg, parse_tie(tie), gi);
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        for (const auto& p : paths_of(ts)) reached.insert(p);
      }
      const Tensor gi_h = host(gi);
      expect_backward(lay, t, reduce, tie, to_vec(gi_h), reference::backward(prob, gv, got, x, canonical(reduce), tie));
      const Tensor gi_cpu = segment_reduce_backward(grad_h, out_h, data_h, red, seg_h, parse_tie(tie));
      if (is_tie_reduce(reduce) || canonical(reduce) == "sum")
        EXPECT_TRUE(same_values(gi_h, gi_cpu)) << "CUDA backward differs from the CPU";
      Tensor gi2 = poisoned(lay.shape, t);
      segment_reduce_backward_out(grad, out, data, red, seg, parse_tie(tie), gi2);
      EXPECT_TRUE(same_bits(gi_h, host(gi2))) << "backward not bitwise reproducible";
    }
#else
  (void)lay, (void)t, (void)reduce, (void)x_in, (void)rng, (void)opt;
#endif
  return reached;
}

std::set<std::string> cuda_all_reduces(const Layout& lay, DType t, std::mt19937_64& rng, const CudaCheck& opt = {}) {
  std::set<std::string> reached;
  for (const char* r : kReduces) {
    const int64_t n = numel(lay.shape);
    for (const auto& p : check_cuda(lay, t, r, random_data(rng, n, r, t), rng, opt)) reached.insert(p);
  }
  return reached;
}

bool has(const std::set<std::string>& s, const char* p) { return s.count(p) > 0; }

class CudaSegmentReduce : public ::testing::TestWithParam<DType> {};

// ---------------------------------------------------------------------------
// Paths, each proven through the trace.

TEST_P(CudaSegmentReduce, FlatPathsI32AllReduces) {
  SEGRED_NEED_GPU();
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const Layout lay = from_lengths({3000}, 0, {random_lengths(rng, 3000, 40)});
  const auto reached = cuda_all_reduces(lay, GetParam(), rng, {false, true});
  EXPECT_TRUE(has(reached, "segment_reduce.fwd.cuda.flat.i32"));
  EXPECT_TRUE(has(reached, "segment_reduce.bwd.cuda.flat.i32"));
  EXPECT_TRUE(has(reached, "segment_reduce.bwd.cuda.prod_warp.i64"));
}

TEST_P(CudaSegmentReduce, FeaturesPathsI32AllReduces) {
  SEGRED_NEED_GPU();
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  // inner 4, 16, 64 (vector loads), 3 and 33 (scalar lanes), 130 (two slabs).
  for (int64_t inner : {4, 16, 64, 3, 33, 130}) {
    SCOPED_TRACE(inner);
    const Layout lay = from_lengths({300, inner}, 0, {random_lengths(rng, 300, 20)});
    const auto reached = cuda_all_reduces(lay, GetParam(), rng);
    EXPECT_TRUE(has(reached, "segment_reduce.fwd.cuda.features.i32"));
    EXPECT_TRUE(has(reached, "segment_reduce.bwd.cuda.features.i32"));
    EXPECT_TRUE(has(reached, "segment_reduce.bwd.cuda.prod_warp.i64"));
  }
}

// ---------------------------------------------------------------------------
// The CPU suite's layouts on CUDA.

TEST_P(CudaSegmentReduce, OffsetsInt32NotStartingAtZero) {
  SEGRED_NEED_GPU();
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  Layout a = from_offsets({50}, 0, {{3, 3, 10, 11, 40, 44}});
  a.index_dtype = DType::Int32;
  cuda_all_reduces(a, GetParam(), rng);
  Layout b = from_offsets({50, 8}, 0, {{7, 9, 9, 30}});
  b.index_dtype = DType::Int32;
  cuda_all_reduces(b, GetParam(), rng);
}

TEST_P(CudaSegmentReduce, AwkwardSizes) {
  SEGRED_NEED_GPU();
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (int64_t n : {1, 2, 31, 33, 59, 97, 1025, 4097}) {
    SCOPED_TRACE(n);
    cuda_all_reduces(from_lengths({n}, 0, {random_lengths(rng, n, 7)}), GetParam(), rng);
    cuda_all_reduces(from_lengths({n}, 0, {{n}}), GetParam(), rng);  // one segment
    cuda_all_reduces(from_lengths({n, 5}, 0, {random_lengths(rng, n, 9)}), GetParam(), rng);
  }
}

TEST_P(CudaSegmentReduce, Axis1BatchedMetadataAndAxisMinusOne) {
  SEGRED_NEED_GPU();
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  cuda_all_reduces(from_lengths({3, 40}, 1, {{10, 0, 30}, {40, 0, 0}, {1, 2, 37}}), GetParam(), rng);
  cuda_all_reduces(from_lengths({2, 37, 6}, 1, {{5, 32}, {0, 37}}), GetParam(), rng);
  cuda_all_reduces(from_offsets({2, 3, 29}, -1, {{0, 4, 4, 29}, {2, 3, 20, 21}, {0, 0, 0, 0}, {29, 29, 29, 29},
                                                  {1, 10, 11, 28}, {5, 6, 7, 8}}),
                    GetParam(), rng);
}

TEST_P(CudaSegmentReduce, InitialAndEmptySegments) {
  SEGRED_NEED_GPU();
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (double init : {0.5, -3.0}) {
    Layout lay = from_lengths({20, 3}, 0, {{0, 5, 0, 15, 0}});
    lay.initial = init;
    cuda_all_reduces(lay, GetParam(), rng);
    Layout flat = from_lengths({20}, 0, {{0, 5, 0, 15, 0}});
    flat.initial = init;
    cuda_all_reduces(flat, GetParam(), rng);
  }
  cuda_all_reduces(from_lengths({0}, 0, {{0, 0, 0}}), GetParam(), rng);  // L = 0
}

// One segment spanning far more than 32 tiles beside many tiny ones: the long
// fix-up (one block per crossing segment), the short one, and empty segments.
TEST_P(CudaSegmentReduce, HugeSegmentBesideTinyOnes) {
  SEGRED_NEED_GPU();
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  std::vector<int64_t> lens(3000, 1);
  lens[1500] = 60000;
  lens[10] = 0;
  int64_t L = 0;
  for (auto v : lens) L += v;
  for (const char* r : {"sum", "max", "min", "mean"})
    check_cuda(from_lengths({L}, 0, {lens}), GetParam(), r, random_data(rng, L, r, GetParam()), rng);
  std::vector<int64_t> lens2(200, 1);
  lens2[100] = 9000;  // 9000 rows of 4 features: 9000 merge items / 32 per group
  int64_t L2 = 0;
  for (auto v : lens2) L2 += v;
  for (const char* r : {"sum", "max", "prod"})
    check_cuda(from_lengths({L2, 4}, 0, {lens2}), GetParam(), r, random_data(rng, L2 * 4, r, GetParam()), rng);
}

// Several long segments (each > 32 tiles, so fixup_tree's chunk partials and tree
// run, v5), back to back and beside short and empty ones, so that a 32-tile chunk
// holds the end of one long segment and the start of the next, and a long
// segment starts mid-chunk: flat (fp32 512-item and 16-bit 1024-item tiles) and
// features (inner 3: one lane per row, inner 64: vector loads), every reduce that
// has a fix-up (forward and the max/min statistics pass, every tie rule).
TEST_P(CudaSegmentReduce, LongSegmentsChunkedFixup) {
  SEGRED_NEED_GPU();
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const std::vector<int64_t> lens = {40000, 0, 50000, 1, 1, 70000, 5, 36000, 36000, 3};
  int64_t L = 0;
  for (auto v : lens) L += v;
  for (const char* r : {"sum", "max", "min", "mean"})
    check_cuda(from_lengths({L}, 0, {lens}), GetParam(), r, random_data(rng, L, r, GetParam()), rng);
  const std::vector<int64_t> rows = {3000, 0, 2500, 1, 4000, 1100, 7};
  int64_t R = 0;
  for (auto v : rows) R += v;
  for (int64_t inner : {3, 64})
    for (const char* r : {"sum", "max"})
      check_cuda(from_offsets({R, inner}, 0, {[&] {
                                std::vector<int64_t> o{0};
                                for (auto v : rows) o.push_back(o.back() + v);
                                return o;
                              }()}),
                 GetParam(), r, random_data(rng, R * inner, r, GetParam()), rng);
}

// Session 13: the feature paths at every merge-item count per worker the plan can
// take (detail::feat_items_rule: 128 and 64 on wide rows, 88 on narrow ones, 32; the
// wave fit's counts just above them, e.g. 132), plus 7 and 1 (tiles
// shorter than most segments: nearly every segment crosses), forced through
// SegmentTestCaps::feat_items: wide rows with vector loads (inner 128, 64), a scalar
// row (inner 3), a long segment spanning > 32 tiles at every count (fixup_tree's
// chunked phases), empty and single segments, a batched axis-1 layout; forward and
// backward of every reduce with a fix-up (and sum/mean's record-free backward),
// against the reference and the CPU (check_cuda). The plan reports the forced count.
TEST_P(CudaSegmentReduce, FeatureTilesOfEveryItemCount) {
  SEGRED_NEED_GPU();
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const DType t = GetParam();
  std::vector<int64_t> lens = random_lengths(rng, 3000, 40);
  lens.insert(lens.begin() + int64_t(lens.size() / 2), {0, 9000, 0, 1});  // 9000 rows: > 32 tiles of 128 items
  int64_t R = 0;
  for (auto v : lens) R += v;
  auto& caps = detail::segment_test_caps();
  for (const int items : {128, 64, 88, 132, 7, 1}) {  // 88, 132: session 26's narrow rows, wave fit
    SCOPED_TRACE(::testing::Message() << "feat_items=" << items);
    caps.feat_items = items;
    SegmentProblem prob;
    prob.backend = Backend::CUDA;
    prob.dtype = t;
    prob.axis_len = R;
    prob.inner = 128;
    prob.num_segments = int64_t(lens.size());
    EXPECT_EQ(plan_segment_reduce(prob).chunk, items);
    for (int64_t inner : {128, 64, 3})
      for (const char* r : {"sum", "max", "min", "mean"})
        check_cuda(from_lengths({R, inner}, 0, {lens}), t, r, random_data(rng, R * inner, r, t), rng);
    for (const char* r : {"sum", "max"})
      check_cuda(from_lengths({2, 37, 64}, 1, {{5, 32}, {0, 37}}), t, r, random_data(rng, 2 * 37 * 64, r, t), rng);
  }
  caps.feat_items = 0;
}

// Session 29: the feature forward in half vectors (8-byte loads: 4 features a lane for
// 16-bit types, 2 for float32). Three forms (SegmentTestCaps::feat_half_vec): full
// vectors (1), half vectors wherever inner allows (2), the rule (0: 16-bit types from
// inner 16, float32 never). 16-bit widths: half vectors by the rule (128, 16), only
// when forced (12, 4), full vectors (8), neither (6); every forward reduce; axis 1
// with batched metadata. Each form against the reference and the CPU (check_cuda);
// float64 has no such form (the plan's variant is checked). At the same merge items
// the forms combine every feature's rows in the same order (a lane's features change,
// not a feature's rows), so their outputs must be the same bits. The trace names the half-vector form
// exactly where the plan says so (plan.variant).
TEST_P(CudaSegmentReduce, FeatureHalfVectorsAgree) {
  SEGRED_NEED_GPU();
#ifdef SEGRED_WITH_CUDA
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const DType t = GetParam();
  auto& caps = detail::segment_test_caps();
  const int es = dtype_size(t);
  if (es == 8) {  // float64: no half vectors (the plan test covers its widths)
    caps.feat_half_vec = 2;
    SegmentProblem prob;
    prob.backend = Backend::CUDA;
    prob.dtype = t;
    prob.axis_len = 1000;
    prob.inner = 128;
    prob.num_segments = 10;
    EXPECT_EQ(plan_segment_reduce(prob).variant, "");
    caps.feat_half_vec = 0;
    return;
  }
  std::vector<int64_t> lens = random_lengths(rng, 400, 40);
  lens.insert(lens.begin() + int64_t(lens.size() / 2), {0, 1500, 0, 1});  // one segment over many tiles
  int64_t R = 0;
  for (auto v : lens) R += v;
  for (const int items : {88, 7}) {
    caps.feat_items = items;
    for (const int64_t inner : {128, 16, 12, 8, 6, 4})
      for (const char* r : {"sum", "mean", "max", "min", "prod"}) {
        SCOPED_TRACE(::testing::Message() << "items " << items << " inner " << inner << " " << r);
        const Layout lay = from_lengths({R, inner}, 0, {lens});
        const std::vector<double> x = rounded(t, random_data(rng, R * inner, r, t));
        const Tensor data = dev(make_tensor(x, lay.shape, t)), meta = dev(lay.meta());
        const Segments seg = dev_segments(lay, meta);
        SegmentProblem prob;
        prob.backend = Backend::CUDA;
        prob.direction = Direction::Fwd;
        prob.reduce = parse_reduce(r);
        prob.dtype = t;
        prob.axis_len = R;
        prob.inner = inner;
        prob.num_segments = int64_t(lens.size());
        Tensor out[3];
        for (const int form : {1, 2, 0}) {  // full, half wherever inner allows, the rule (inner >= 16)
          caps.feat_half_vec = form;
          const bool half = inner % (8 / es) == 0 &&
                            (form == 2 || (form == 0 && es == 2 && inner >= detail::kHalfVecMinInner));
          EXPECT_EQ(plan_segment_reduce(prob).variant, half ? "half_vectors" : "") << "form " << form;
          check_cuda(lay, t, r, x, rng);
          out[form] = poisoned(lay.out_shape(), t);
          TraceSession ts;
          segment_reduce_out(data, parse_reduce(r), seg, out[form]);
          EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          int with_half = 0;
          for (const TraceRecord& rec : ts.records()) with_half += rec.variant == "half_vectors";
          EXPECT_EQ(with_half, half ? 1 : 0) << "form " << form;
        }
        EXPECT_TRUE(same_bits(host(out[1]), host(out[2]))) << "half vectors differ from full vectors";
        EXPECT_TRUE(same_bits(host(out[1]), host(out[0]))) << "the rule's form differs from full vectors";
        // Session 30: the max/min backward's half vectors (the rule's and forced; check_cuda
        // above ran every tie against the CPU in each form). Its gradient is per position from exact
        // integer statistics: the same bits in every form, and the trace names the form.
        if (r == std::string("max") || r == std::string("min")) {
          const Tensor grad = dev(make_tensor(mixed_grads(rng, out[1].numel(), t), lay.out_shape(), t));
          for (Tie tie : {Tie::Split, Tie::First, Tie::Last}) {
            Tensor gi[3];
            for (const int form : {1, 2, 0}) {
              caps.feat_half_vec = form;
              prob.direction = Direction::Bwd;
              // The rule (session 30): float32 wherever inner is even, 16-bit for inner in [16, 64).
              const bool rule = es == 4 || (inner >= detail::kHalfVecMinInner && inner < detail::kHalfVecBwdMaxInner);
              const bool half = inner % (8 / es) == 0 && (form == 2 || (form == 0 && rule));
              EXPECT_EQ(plan_segment_reduce(prob).variant, half ? "half_vectors" : "") << "bwd form " << form;
              gi[form] = poisoned(lay.shape, t);
              TraceSession ts;
              segment_reduce_backward_out(grad, out[1], data, parse_reduce(r), seg, tie, gi[form]);
              EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
              int with_half = 0;
              for (const TraceRecord& rec : ts.records()) with_half += rec.variant == "half_vectors";
              EXPECT_EQ(with_half, half ? 1 : 0) << "bwd form " << form;
            }
            EXPECT_TRUE(same_bits(host(gi[1]), host(gi[2]))) << "backward: half vectors differ, tie " << int(tie);
            EXPECT_TRUE(same_bits(host(gi[1]), host(gi[0]))) << "backward: the rule's form differs, tie " << int(tie);
          }
          prob.direction = Direction::Fwd;
        }
      }
    for (const char* r : {"sum", "max"})  // axis 1, batched metadata
      for (const int form : {1, 2, 0}) {
        caps.feat_half_vec = form;
        check_cuda(from_lengths({2, 37, 64}, 1, {{5, 32}, {0, 37}}), t, r, random_data(rng, 2 * 37 * 64, r, t), rng);
      }
  }
  caps.feat_items = 0;
  caps.feat_half_vec = 0;
#endif
}

// Segments of kmin..kmax flat tiles (512 merge items, 1024 for 16-bit types), each
// length off by each of `ds` items, every one followed by a short segment
// (1 + (k * mul + d) % mod) so that the tile alignment of the next one varies.
std::vector<int64_t> tile_multiple_lengths(int64_t kmin, int64_t kmax, DType t, std::initializer_list<int64_t> ds,
                                           int64_t mul, int64_t mod) {
  const int64_t items = dtype_size(t) == 2 ? 1024 : 512;
  std::vector<int64_t> lens;
  for (int64_t k = kmin; k <= kmax; ++k)
    for (int64_t d : ds) {
      lens.push_back(k * items + d);
      lens.push_back(1 + (k * mul + d) % mod);
    }
  return lens;
}

// Session 6: fixup_tree returns after phase 1 when prepare found no crossing
// segment spanning more than 32 tiles (long_count[1] == 0). Segments of 30 to 34
// flat tiles (512 merge items, 1024 for 16-bit types), each length off by a few
// items and separated by short ones so that their tile alignment varies, land on
// both sides of the threshold: the results must equal the reference and the CPU
// whichever side each is on (a flag of 0 with a listed segment would leave that
// segment's output unwritten: poisoned).
TEST_P(CudaSegmentReduce, SegmentsAroundTheLongFixupThreshold) {
  SEGRED_NEED_GPU();
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const std::vector<int64_t> lens = tile_multiple_lengths(30, 34, GetParam(), {-2, 0, 3}, 7, 13);
  int64_t L = 0;
  for (auto v : lens) L += v;
  for (const char* r : {"sum", "max"})
    check_cuda(from_lengths({L}, 0, {lens}), GetParam(), r, random_data(rng, L, r, GetParam()), rng);
}

// Session 12: the inner == 1 forward may combine crossing segments inside flat_reduce
// (src/cuda/fused_fixup_rule.h): the completing tile reads up to kFuseShort = 64
// published carries, else the parts of aligned 256-tile runs, and re-reads from x the
// positions of a crossing segment before it when there are at most 32. Segments of 62 to 66 tiles
// (each length off by a few items, short ones between so their tile alignment
// varies) straddle the short/long edge; segments of 300k-600k elements span
// several runs (256 fp32 tiles = 131072 items), start mid-chunk, and end in the
// chunk where the next long one starts; empty and single segments between.
TEST_P(CudaSegmentReduce, FusedFixupShortLongAndRuns) {
  SEGRED_NEED_GPU();
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  std::vector<int64_t> lens = tile_multiple_lengths(62, 66, GetParam(), {-3, 0, 2}, 5, 11);
  for (int64_t v : {int64_t(300001), int64_t(0), int64_t(1), int64_t(600000), int64_t(140000), int64_t(7),
                    int64_t(262145)})
    lens.push_back(v);
  // Short segments: nearly every tile completes one that began in the tile before,
  // with 1 to 40 positions there (re-read from x up to kFuseReread = 32, else waited for).
  for (int64_t i = 0; i < 4000; ++i) lens.push_back(1 + (i * 37) % 40);
  int64_t L = 0;
  for (auto v : lens) L += v;
  auto& caps = detail::segment_test_caps();
  // Session 13: the variant that ran, through the trace: the forward's flat_reduce
  // record names it ("fused_fixup" / "fixup_tree"); no other record has one. Under
  // the rule (force 0) it is the plan's variant for this problem.
  SegmentProblem prob;
  prob.backend = Backend::CUDA;
  prob.direction = Direction::Fwd;
  prob.dtype = GetParam();
  prob.index_dtype = DType::Int64;
  prob.axis_len = L;
  prob.num_segments = int64_t(lens.size());
  for (const int force : {1, 2, 0}) {  // fused, the fixup_tree launch it replaces (the benchmark's A/B), the rule
    SCOPED_TRACE(force == 1 ? "fused fix-up" : force == 2 ? "fixup_tree" : "the plan's rule");
    caps.fused_fixup = force;
    const std::string want = force == 0                                ? std::string(plan_segment_reduce(prob).variant)
                             : force == 1 && GetParam() != DType::Float64 ? "fused_fixup"
                                                                         : "fixup_tree";
    EXPECT_FALSE(want.empty());
    TraceSession ts;
    for (const char* r : {"sum", "max", "min", "mean"})
      check_cuda(from_lengths({L}, 0, {lens}), GetParam(), r, random_data(rng, L, r, GetParam()), rng);
    int with_variant = 0;
    for (const TraceRecord& rec : ts.records()) {
      if (rec.variant.empty()) continue;
      ++with_variant;
      EXPECT_EQ(rec.variant, want) << rec.path;
      EXPECT_EQ(rec.backend, Backend::CUDA) << rec.path;
      EXPECT_EQ(rec.path.rfind("segment_reduce.fwd.cuda.flat.", 0), 0u) << rec.path;
    }
    EXPECT_GE(with_variant, 4);  // at least one CUDA forward per reduce
  }
  caps.fused_fixup = 0;
}

// Session 15: the main kernel after prepare is a programmatic dependent launch
// where pdl_pays says so (SegmentTestCaps::pdl = 0, since session 16 the default
// every other test runs); pdl = 1 always, 2 never. Every main kernel that follows prepare (flat
// and feature reduce, flat / feature / row elementwise, both max/min
// backwards), lengths and offsets: the ordinary launch against the reference and
// the CPU, and every form bitwise equal to it, forward and backward.
TEST_P(CudaSegmentReduce, DependentLaunchMatchesOrdinary) {
  SEGRED_NEED_GPU();
#ifdef SEGRED_WITH_CUDA
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const DType t = GetParam();
  auto& caps = detail::segment_test_caps();
  std::vector<int64_t> lens = tile_multiple_lengths(1, 3, t, {-3, 0, 5}, 7, 19);
  for (int64_t i = 0; i < 700; ++i) lens.push_back(i % 9 == 0 ? 0 : 1 + (i * 13) % 37);
  int64_t L = 0;
  for (auto v : lens) L += v;
  for (const int64_t inner : {int64_t(1), int64_t(4), int64_t(16), int64_t(128)})
    for (const bool use_lengths : {true, false}) {
      Layout lay = from_lengths(inner == 1 ? Shape{L} : Shape{L, inner}, 0, {lens});
      lay.use_lengths = use_lengths;
      SCOPED_TRACE(::testing::Message() << "inner " << inner << (use_lengths ? " lengths" : " offsets"));
      for (const char* r : {"sum", "mean", "max", "prod"}) {
        const std::vector<double> x = rounded(t, random_data(rng, L * inner, r, t));
        caps.pdl = 2;  // never
        check_cuda(lay, t, r, x, rng);
        const Tensor data = dev(make_tensor(x, lay.shape, t)), meta = dev(lay.meta());
        const Segments seg = dev_segments(lay, meta);
        const Reduce red = parse_reduce(r);
        Tensor out[3], gi[3];
        Tensor g;
        constexpr int kForms[3] = {2, 0, 1};  // never, the rule, always
        for (int k = 0; k < 3; ++k) {
          caps.pdl = kForms[k];
          out[k] = poisoned(lay.out_shape(), t);
          segment_reduce_out(data, red, seg, out[k]);
          if (k == 0) g = dev(make_tensor(mixed_grads(rng, out[0].numel(), t), lay.out_shape(), t));
          gi[k] = poisoned(lay.shape, t);
          segment_reduce_backward_out(g, out[k], data, red, seg, Tie::Split, gi[k]);
        }
        for (int k = 1; k < 3; ++k) {
          EXPECT_TRUE(same_bits(host(out[0]), host(out[k]))) << r << " forward: pdl " << kForms[k] << " differs";
          EXPECT_TRUE(same_bits(host(gi[0]), host(gi[k]))) << r << " backward: pdl " << kForms[k] << " differs";
        }
      }
    }
  caps.pdl = 0;
#endif
}

// v6: the flat kernels stage a tile with 16-byte vectors from the vector boundary
// at or before its first position when data (and, backward, grad_input) are
// 16-byte aligned, element by element otherwise. Every tile phase (j0 mod the
// vector width) occurs; the tensor's last vector is partial (L odd); empty
// segments, a long one, NaN, ties and gradients of every sign are in the data. Aligned: the
// reference and the CPU (check_cuda); misaligned data, grad_input or both: the
// same bits as aligned (same tiles, same combine order, other staging).
TEST_P(CudaSegmentReduce, FlatVectorStagingMatchesScalar) {
  SEGRED_NEED_GPU();
#ifdef SEGRED_WITH_CUDA
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const DType t = GetParam();
  const int es = dtype_size(t);
  for (int64_t L : {int64_t(4093), int64_t(20011)}) {
    SCOPED_TRACE(L);
    // Session 10: one segment of 3 x 1024 + 5 (whole tiles without a segment end in
    // every dtype: flat_reduce's plain fold, flat_elementwise's fill of sum/mean).
    constexpr int64_t kLong = 3 * 1024 + 5;
    std::vector<int64_t> lens = random_lengths(rng, L - kLong, 70);
    lens.insert(lens.begin() + int64_t(lens.size() / 2), {0, 0, 0});  // an empty run mid-tensor
    lens.insert(lens.begin() + int64_t(lens.size() / 3), kLong);
    const Layout lay = from_lengths({L}, 0, {lens});
    const Tensor meta = dev(lay.meta());
    const Segments seg = dev_segments(lay, meta);
    for (const char* r : {"sum", "max", "min", "mean"}) {
      SCOPED_TRACE(r);
      std::vector<double> x = random_data(rng, L, r, t);
      for (int64_t k = 5; k < L; k += 997) x[size_t(k)] = kNaN;
      x[size_t(L - 1)] = kNaN;  // in the tensor's last, partial vector
      check_cuda(lay, t, r, x, rng);
      // The same values at element offsets 0 (aligned), 1, 2, 3 of a padded buffer.
      auto placed = [&](const std::vector<double>& v, int64_t off) {
        std::vector<double> b(v.size() + 8, 0.0);
        std::copy(v.begin(), v.end(), b.begin() + off);
        return dev(make_tensor(b, {int64_t(b.size())}, t));
      };
      auto view = [&](const Tensor& b, int64_t off, int64_t n) {
        return TensorView(static_cast<char*>(b.data()) + off * es, t, {n}, {}, kGpu);
      };
      const Reduce red = parse_reduce(r);
      const std::vector<double> gv = mixed_grads(rng, lay.S, t);
      const Tensor grad = dev(make_tensor(gv, {lay.S}, t));
      const std::vector<std::string> ties =
          is_tie_reduce(r) ? std::vector<std::string>{"split", "first", "last"} : std::vector<std::string>{"split"};
      Tensor y_ref, gi_ref[3];
      for (int64_t xo : {0, 1, 2, 3})
        for (int64_t go : {0, 1, 3}) {
          if (xo != 0 && go != 0 && xo != go) continue;
          SCOPED_TRACE(::testing::Message() << "data offset " << xo << ", grad_input offset " << go);
          const Tensor xb = placed(x, xo);
          const TensorView xv = view(xb, xo, L);
          Tensor y = poisoned({lay.S}, t);
          segment_reduce_out(xv, red, seg, y);
          if (xo == 0 && go == 0)
            y_ref = host(y);
          else
            EXPECT_TRUE(same_bits(host(y), y_ref)) << "forward differs from the aligned call";
          for (size_t ti = 0; ti < ties.size(); ++ti) {
            SCOPED_TRACE(ties[ti]);
            Tensor gb = poisoned({L + 8}, t);
            const TensorView gi = view(gb, go, L);
            segment_reduce_backward_out(grad, y, xv, red, seg, parse_tie(ties[ti]), gi);
            const Tensor gh = host(gi);
            if (xo == 0 && go == 0)
              gi_ref[ti] = Tensor::contiguous_copy(gh.view());
            else
              EXPECT_TRUE(same_bits(gh, gi_ref[ti])) << "backward differs from the aligned call";
            // Nothing written outside the view (the neighbours of the edge vectors).
            const std::vector<double> all = to_vec(host(gb));
            for (int64_t k = 0; k < L + 8; ++k)
              if (k < go || k >= go + L) EXPECT_TRUE(std::isnan(all[size_t(k)])) << "element " << k << " overwritten";
          }
        }
    }
  }
#endif
}

// Session 10: 16-bit flat_reduce reads a full tile without a segment end straight
// from x, lane l's 32 positions from the 16-byte vector at or before them (o = j0
// mod 8 elements in; a fifth vector when o > 0). e segments of length 1 and then
// one of k tiles - 2 e: the last full tile ends exactly at the tensor's end, with
// o = -e mod 8 over e = 1..8, so lane 31's fifth vector reaches past the tensor
// (read element by element up to its end). Forward against the reference and the
// CPU, backward too (check_cuda); the misaligned-data twin is the vector-staging
// test above.
TEST_P(CudaSegmentReduce, FlatDirectTilesAtTheTensorEnd) {
  SEGRED_NEED_GPU();
#ifdef SEGRED_WITH_CUDA
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const DType t = GetParam();
  const int64_t tile = dtype_size(t) == 2 ? 1024 : 512;
  for (int64_t k : {2, 3})
    for (int64_t e = 1; e <= 8; ++e) {
      std::vector<int64_t> lens(size_t(e), 1);
      lens.push_back(k * tile - 2 * e);
      int64_t L = 0;
      for (auto n : lens) L += n;
      SCOPED_TRACE(::testing::Message() << "k " << k << " e " << e << " L " << L);
      const Layout lay = from_lengths({L}, 0, {lens});
      for (const char* r : {"sum", "max", "min"}) check_cuda(lay, t, r, random_data(rng, L, r, t), rng);
    }
#endif
}

// Session 16: the forms in which flat_reduce reads a full tile that holds no
// segment end (SegmentTestCaps::flat_direct): 0 the plan's rule (flat_form_rule:
// 16-bit coalesced, float32 sum/mean coalesced on long segments), 1 sessions
// 1-15's (staged, 16-bit lane-contiguous), 2 coalesced for every dtype. Every
// form against the reference and the CPU, run to run (check_cuda),
// on tiles at every phase j0 mod 8 (e one-element segments before a long one:
// lane 0's masked head and its scalar tail in the coalesced read), a last full
// tile that ends at the tensor's end or one element before it, data with NaN,
// infinities and signed zeros, every forward reduce and dtype. The forms may
// differ in the last bits of a sum (other combine orders); max and min may not:
// the same values in every form (up to the sign of a zero result, which follows
// the first zero combined). Misaligned data (one element into a buffer) gives
// the aligned call's bits in every form.
TEST_P(CudaSegmentReduce, FlatFullTileFormsAgree) {
  SEGRED_NEED_GPU();
#ifdef SEGRED_WITH_CUDA
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const DType t = GetParam();
  auto& caps = detail::segment_test_caps();
  const int64_t tile = dtype_size(t) == 2 ? 1024 : 512;
  for (int64_t tail : {0, 1})
    for (int64_t e = 0; e <= 8; ++e) {
      std::vector<int64_t> lens(size_t(e), 1);
      lens.push_back(3 * tile + 7 - 2 * e);
      lens.push_back(tile / 2);
      lens.push_back(2 * tile - 3 + tail);  // the last full tile ends at the tensor's end (tail 0) or not
      int64_t L = 0;
      for (auto n : lens) L += n;
      SCOPED_TRACE(::testing::Message() << "e " << e << " tail " << tail << " L " << L);
      const Layout lay = from_lengths({L}, 0, {lens});
      for (const char* r : {"sum", "mean", "max", "min", "prod"}) {
        std::vector<double> x = rounded(t, random_data(rng, L, r, t));
        if (e == 3) {  // special values inside full tiles
          x[size_t(e + 100)] = std::numeric_limits<double>::quiet_NaN();
          x[size_t(e + 3 * tile + 40)] = std::numeric_limits<double>::infinity();
          x[size_t(L - 5)] = -std::numeric_limits<double>::infinity();
          x[size_t(L - 9)] = -0.0;
        }
        const Tensor data = dev(make_tensor(x, lay.shape, t)), meta = dev(lay.meta());
        const Segments seg = dev_segments(lay, meta);
        // The same data one element into a buffer: not 16-byte aligned (the coalesced
        // form's element loads, the other forms' staging), the same bits as aligned.
        std::vector<double> xb(size_t(L + 1), 0.0);
        std::copy(x.begin(), x.end(), xb.begin() + 1);
        const Tensor buf = dev(make_tensor(xb, {L + 1}, t));
        const TensorView mis(static_cast<char*>(buf.data()) + dtype_size(t), t, {L}, {}, kGpu);
        Tensor out[3];
        for (int form = 0; form < 3; ++form) {
          caps.flat_direct = form;
          SCOPED_TRACE(::testing::Message() << r << " flat_direct " << form);
          check_cuda(lay, t, r, x, rng);
          out[form] = poisoned(lay.out_shape(), t);
          segment_reduce_out(data, parse_reduce(r), seg, out[form]);
          Tensor out_mis = poisoned(lay.out_shape(), t);
          segment_reduce_out(mis, parse_reduce(r), seg, out_mis);
          EXPECT_TRUE(same_bits(host(out[form]), host(out_mis))) << "misaligned data differs from aligned";
        }
        if (std::string(r) == "max" || std::string(r) == "min")  // the same value (the sign of a zero max may differ)
          for (int form = 1; form < 3; ++form)
            EXPECT_TRUE(same_values(host(out[0]), host(out[form]))) << r << ": flat_direct " << form << " differs";
      }
    }
  caps.flat_direct = 0;
#endif
}

// Session 24: the flat sum/mean backward writes a tile by the walk or by
// flat_fill_tile (SegmentTestCaps::flat_fill: 0 the rule, 1 the walk everywhere, 2
// the fill everywhere, tiles inside one segment and tiles of one-position
// segments included). Layouts with ends at every lane and vector edge, runs of
// empty and one-position segments, a segment over several tiles, a partial last
// tile; gi aligned, and one element into a buffer (misaligned: the walk in every
// form). Every form checked against the reference and the CPU, and all bitwise equal.
TEST_P(CudaSegmentReduce, FlatFillFormsAgree) {
  SEGRED_NEED_GPU();
#ifdef SEGRED_WITH_CUDA
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const DType t = GetParam();
  auto& caps = detail::segment_test_caps();
  const int64_t tile = dtype_size(t) == 2 ? 1024 : 512;
  std::vector<std::vector<int64_t>> layouts;
  layouts.push_back({1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 31, 32, 33});  // ends at every vector slot
  layouts.push_back({0, 0, 3, 0, 1, 1, 1, 1, 1, 1, 40, 0, 0, 2});         // empty and one-position runs
  {
    std::vector<int64_t> mixed;
    for (int k = 0; k < 300; ++k) mixed.push_back(int64_t(rng() % 11));   // several tiles of short segments
    mixed.push_back(3 * tile + 5);                                          // one over several tiles
    for (int k = 0; k < 700; ++k) mixed.push_back(1);                       // tiles of one-position segments
    mixed.push_back(tile - 1);                                              // a partial last tile
    layouts.push_back(mixed);
  }
  for (const auto& lens : layouts) {
    int64_t L = 0;
    for (auto n : lens) L += n;
    SCOPED_TRACE(::testing::Message() << "S " << lens.size() << " L " << L);
    const Layout lay = from_lengths({L}, 0, {lens});
    for (const char* r : {"sum", "mean"}) {
      const std::vector<double> x = rounded(t, random_data(rng, L, r, t));
      const Tensor data = dev(make_tensor(x, lay.shape, t)), meta = dev(lay.meta());
      const Segments seg = dev_segments(lay, meta);
      Tensor y = poisoned(lay.out_shape(), t);
      segment_reduce_out(data, parse_reduce(r), seg, y);
      const Tensor g = dev(make_tensor(mixed_grads(rng, y.numel(), t), lay.out_shape(), t));
      // gi one element into a buffer: not 16-byte aligned, so the walk whatever the form.
      const Tensor buf = dev(make_tensor(std::vector<double>(size_t(L + 1), 0.0), {L + 1}, t));
      const TensorView mis(static_cast<char*>(buf.data()) + dtype_size(t), t, {L}, {}, kGpu);
      Tensor gi[3];
      for (int form = 0; form < 3; ++form) {
        caps.flat_fill = form;
        SCOPED_TRACE(::testing::Message() << r << " flat_fill " << form);
        check_cuda(lay, t, r, x, rng);
        gi[form] = poisoned(lay.shape, t);
        segment_reduce_backward_out(g, y, data, parse_reduce(r), seg, Tie::Split, gi[form]);
        segment_reduce_backward_out(g, y, data, parse_reduce(r), seg, Tie::Split, mis);
        EXPECT_TRUE(same_bits(host(gi[form]), host(mis))) << "misaligned gi differs from aligned";
      }
      for (int form = 1; form < 3; ++form)
        EXPECT_TRUE(same_bits(host(gi[0]), host(gi[form]))) << r << ": flat_fill " << form << " differs";
    }
  }
  caps.flat_fill = 0;
#endif
}

// Session 8: flat_reduce walks a lane's merge items as a fixed, predicated loop
// over its kIpl position slots (segment ends as bits, the pad as a select, the
// segments that begin and end inside one lane re-walked). Layouts that put
// segment ends at every lane and tile edge (lengths kIpl - 1, kIpl, kIpl + 1,
// 2 kIpl - 1, tile - 1, ...), several ends in one lane, runs of empty segments,
// ends right at a lane's first or last item, a partial last tile, rows of a
// batched axis (ghost segments), offsets and lengths, int32 and int64 metadata.
// Integer data (|x| <= 3, segments <= 80 long): sums are exact in every dtype,
// so the forward sum/max/min must equal the exact host result bit for bit (a
// slot read or dropped by mistake changes a sum by >= 1), in both walks of a tile
// with segment ends (session 34: by positions, the 16-bit default, and staged by
// merge items), with the fix-up fused and as fixup_tree, and from misaligned data;
// then check_cuda (reference, CPU, run-to-run) on random data for every reduce.
TEST_P(CudaSegmentReduce, FlatFixedWalkLaneAndTileEdges) {
  SEGRED_NEED_GPU();
#ifdef SEGRED_WITH_CUDA
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const DType t = GetParam();
  auto& caps = detail::segment_test_caps();
  const int64_t ipl = dtype_size(t) == 2 ? 32 : 16, tile = 32 * ipl;
  std::vector<std::vector<int64_t>> patterns;
  for (int64_t n : {ipl - 1, ipl, ipl + 1, 2 * ipl - 1, 2 * ipl, ipl / 2 - 1, ipl / 2})
    patterns.push_back(std::vector<int64_t>(size_t(3 * tile / (n + 1) + 7), n));
  // 3 tile + 5: whole tiles without a segment end (flat_walk_fixed's plain fold)
  patterns.push_back({tile - 1, tile - 1, tile, tile - 2, 0, tile - 1, 1, 2 * tile - 2, 0, 0, tile, 3 * tile + 5});
  {
    std::vector<int64_t> v;  // several ends per lane, empty runs, ends at slot 0 and at the lane's last slot
    for (int64_t k = 0; v.size() < size_t(2 * tile); ++k) {
      const int64_t pick = k % 11;
      v.push_back(pick < 3 ? 0 : pick < 6 ? 1 : pick < 8 ? 2 : pick == 8 ? ipl - 2 : pick == 9 ? 3 : ipl - 1);
    }
    patterns.push_back(v);
  }
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<int64_t> v;
    std::uniform_int_distribution<int64_t> d(0, 3 * ipl);
    std::uniform_int_distribution<int> z(0, 3);
    while (v.size() < size_t(3 * tile)) v.push_back(z(rng) == 0 ? 0 : std::min<int64_t>(d(rng), 80));
    patterns.push_back(v);
  }
  std::uniform_int_distribution<int> xi(-3, 3);
  for (size_t pi = 0; pi < patterns.size(); ++pi) {
    std::vector<int64_t> lens = patterns[pi];
    for (auto& n : lens) n = std::min<int64_t>(n, 80);
    if (pi == 7) lens = patterns[pi];  // the tile-length pattern: sums up to 3 * 2 tile; max/min only exact
    int64_t L = 0;
    for (auto n : lens) L += n;
    for (int variant = 0; variant < 3; ++variant) {
      SCOPED_TRACE(::testing::Message() << "pattern " << pi << " variant " << variant << " L " << L);
      Layout lay;
      if (variant == 0) {
        lay = from_lengths({L}, 0, {lens});
      } else if (variant == 1) {  // offsets, int32, a partial last tile (drop the tail of the tensor)
        std::vector<int64_t> off = {0};
        for (auto n : lens) off.push_back(off.back() + n);
        lay = from_offsets({L + 37}, 0, {off});
        lay.index_dtype = DType::Int32;
      } else {  // two rows of a batched axis: ghost segments between them
        lay = from_lengths({2, L}, 1, {lens, lens});
      }
      const int64_t N = numel(lay.shape);
      std::vector<double> x(static_cast<size_t>(N));
      for (auto& v : x) v = double(xi(rng));
      const Tensor data_h = make_tensor(x, lay.shape, t);
      const Tensor data = dev(data_h), meta = dev(lay.meta());
      const Segments seg = dev_segments(lay, meta);
      // The same data one element into a buffer (not 16-byte aligned: element loads).
      std::vector<double> xb(size_t(N + 1), 0.0);
      std::copy(x.begin(), x.end(), xb.begin() + 1);
      const Tensor buf = dev(make_tensor(xb, {N + 1}, t));
      const TensorView mis(static_cast<char*>(buf.data()) + dtype_size(t), t, lay.shape, {}, kGpu);
      // Both walks of a tile with segment ends (flat_ended: 0 the rule, by positions
      // for 16-bit types; 1 staged by merge items), the fix-up fused and not.
      for (const char* r : {"sum", "max", "min"}) {
        if (pi == 7 && std::string(r) == "sum") continue;
        const std::vector<double> want = reference::forward(lay.problem(), x, r);  // exact: integer data
        for (int walk = 0; walk < 2; ++walk)
          for (int fuse : {1, 2}) {
            caps.flat_ended = walk;
            caps.fused_fixup = fuse;
            SCOPED_TRACE(::testing::Message() << r << " flat_ended " << walk << " fused_fixup " << fuse);
            for (int aligned = 1; aligned >= (walk == 0 && fuse == 1 ? 0 : 1); --aligned) {
              Tensor y = poisoned(lay.out_shape(), t);
              segment_reduce_out(aligned ? data.view() : mis, parse_reduce(r), seg, y);
              const std::vector<double> got = to_vec(host(y));
              ASSERT_EQ(got.size(), want.size());
              size_t bad = 0;
              for (size_t k = 0; k < got.size(); ++k)
                if (!same_value(got[k], want[k]) && bad++ < 5)
                  ADD_FAILURE() << "output " << k << ": " << got[k] << " != " << want[k] << " (exact)"
                                << (aligned ? "" : ", misaligned data");
              EXPECT_EQ(bad, 0u);
            }
          }
      }
      caps.flat_ended = 0;
      caps.fused_fixup = 0;
      if (variant != 2 || pi % 3 == 0)
        for (const char* r : {"sum", "mean", "max", "prod"}) check_cuda(lay, t, r, random_data(rng, N, r, t), rng);
    }
  }
#endif
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, CudaSegmentReduce, ::testing::ValuesIn(kFloatTypes),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// ---------------------------------------------------------------------------
// Constructed ties, gradients of every sign (SEMANTICS.md: split for every sign).

TEST(CudaSegmentReduceTies, ConstructedTiesNegativeGradients) {
  SEGRED_NEED_GPU();
  std::mt19937_64 rng(7);
  for (DType t : {DType::Float32, DType::BFloat16}) {
    for (int64_t inner : {1, 4}) {
      // all equal; repeated max at the edges; -0/+0; +-inf ties; NaN; a lone max.
      const std::vector<std::vector<double>> segs = {{2, 2, 2, 2},      {5, 1, 5, 0, 5}, {-0.0, 0.0, -0.0},
                                                     {kInf, 1, kInf},   {-kInf, -kInf},  {1, kNaN, 3, kNaN},
                                                     {3, 1, 2},         {7}};
      std::vector<int64_t> lens;
      std::vector<double> x;
      for (const auto& s : segs) {
        lens.push_back(int64_t(s.size()));
        for (double v : s)
          for (int64_t f = 0; f < inner; ++f) x.push_back(v);
      }
      const int64_t L = int64_t(x.size()) / inner;
      const Layout lay = inner == 1 ? from_lengths({L}, 0, {lens}) : from_lengths({L, inner}, 0, {lens});
      for (const char* r : {"max", "min", "amax", "amin"}) check_cuda(lay, t, r, x, rng, {false, true});
    }
  }
}

// ---------------------------------------------------------------------------
// Metadata on the device: validation (same messages as the CPU) and unsafe.

TEST(CudaSegmentReduceValidation, DeviceMetadataSameErrorsAsCpu) {
  SEGRED_NEED_GPU();
  const Tensor data_h = filled({10}, DType::Float32, 1.5);
  const Tensor data = dev(data_h);
  struct Bad {
    std::vector<int64_t> v;
    bool lengths;
    const char* word;
  };
  const Bad bad[] = {{{3, -1, 8}, true, "lengths"},   {{3, 4, 4}, true, "lengths"},     {{3, 4, 2}, true, "lengths"},
                     {{0, 7, 3, 10}, false, "offsets"}, {{-1, 3, 10}, false, "offsets"}, {{0, 3, 11}, false, "offsets"}};
  for (const auto& b : bad)
    for (DType it : {DType::Int32, DType::Int64}) {
      const Tensor m_h = make_index(b.v, {int64_t(b.v.size())}, it);
      const Tensor m = dev(m_h);
      Segments sh, sd;
      (b.lengths ? sh.lengths : sh.offsets) = m_h.view();
      (b.lengths ? sd.lengths : sd.offsets) = m.view();
      const std::string cpu = error_of([&] { segment_reduce(data_h, Reduce::Sum, sh); });
      const std::string gpu = error_of([&] { segment_reduce(data, Reduce::Sum, sd); });
      EXPECT_NE(gpu.find(b.word), std::string::npos) << gpu;
      EXPECT_EQ(gpu, cpu);
      const Tensor g = dev(filled({int64_t(b.v.size()) - (b.lengths ? 0 : 1)}, DType::Float32, 1.0));
      const std::string bwd = error_of([&] { segment_reduce_backward(g, g, data, Reduce::Max, sd); });
      EXPECT_NE(bwd.find(b.word), std::string::npos) << bwd;
    }
  // Metadata on the CPU with data on CUDA: a clear error naming the argument.
  Segments mixed;
  const Tensor m_h = make_index({10}, {1}, DType::Int64);
  mixed.lengths = m_h.view();
  EXPECT_NE(error_of([&] { segment_reduce(data, Reduce::Sum, mixed); }).find("lengths"), std::string::npos);
}

// unsafe = true with host data d_h and metadata m_h: forward and backward (g =
// -1.5) on CUDA equal the CPU's for each reduce.
void expect_unsafe_like_cpu(const Tensor& d_h, const Tensor& m_h, bool lengths, int64_t axis,
                            std::initializer_list<Reduce> reduces) {
  const Tensor d = dev(d_h), m = dev(m_h);
  Segments sh, sd;
  (lengths ? sh.lengths : sh.offsets) = m_h.view();
  (lengths ? sd.lengths : sd.offsets) = m.view();
  sh.axis = sd.axis = axis;
  sh.unsafe = sd.unsafe = true;
  for (Reduce r : reduces) {
    const Tensor yc = segment_reduce(d_h, r, sh);
    const Tensor yg = host(segment_reduce(d, r, sd));
    EXPECT_TRUE(same_values(yc, yg)) << "forward " << to_string(r);
    const Tensor g_h = make_tensor(std::vector<double>(size_t(yc.numel()), -1.5), yc.sizes(), DType::Float32);
    const Tensor gc = segment_reduce_backward(g_h, yc, d_h, r, sh);
    const Tensor gg = host(segment_reduce_backward(dev(g_h), dev(yc), d, r, sd));
    EXPECT_TRUE(same_values(gc, gg)) << "backward " << to_string(r);
  }
}

// unsafe = true: no validation, segments clamped on the device exactly as the CPU
// clamps them (max/min compared bitwise, sum on integers exactly).
TEST(CudaSegmentReduceUnsafe, BadMetadataClampedLikeTheCpu) {
  SEGRED_NEED_GPU();
  struct Case {
    Shape shape;
    int64_t axis;
    std::vector<int64_t> meta;
    Shape meta_shape;
    bool lengths;
  };
  const Case cases[] = {
      {{10}, 0, {3, 4, 50}, {3}, true},          {{10}, 0, {3, -4, 5, 2}, {4}, true},
      {{10}, 0, {-100, 200, -7, 3}, {4}, true},  {{10, 3}, 0, {int64_t(1) << 62, 5}, {2}, true},
      {{2, 10}, 1, {1, 2, 3, 40, -5, 1}, {2, 3}, true}, {{10}, 0, {0, 0, 0}, {3}, true},
      {{10}, 0, {0, 7, 3, 10}, {4}, false},      {{10}, 0, {2, 5, 30}, {3}, false},
      {{10}, 0, {-5, 3, 8}, {3}, false},         {{10}, 0, {50, 60}, {2}, false},
      {{10, 2}, 0, {9, -3, 4, int64_t(1) << 40}, {4}, false},
      {{3, 10}, 1, {0, 5, 10, 10, 5, 0, -1, 11, 12}, {3, 3}, false}};
  for (const auto& c : cases)
    for (DType it : {DType::Int32, DType::Int64}) {
      if (it == DType::Int32 && std::any_of(c.meta.begin(), c.meta.end(), [](int64_t v) { return v > (1 << 30); }))
        continue;
      SCOPED_TRACE(::testing::Message() << "meta=" << shape_string(c.meta) << " " << dtype_name(it));
      std::vector<double> x(size_t(numel(c.shape)));
      for (size_t i = 0; i < x.size(); ++i) x[i] = double(int64_t(i * 7 % 11) - 5);
      expect_unsafe_like_cpu(make_tensor(x, c.shape, DType::Float32), make_index(c.meta, c.meta_shape, it),
                             c.lengths, c.axis,
                             {Reduce::Sum, Reduce::Max, Reduce::Min, Reduce::Prod, Reduce::Mean});
    }
}

// Metadata long enough that the device scan of prepare (src/cuda/segment_reduce.cu)
// spans several blocks (~1024 items each since v5), with rows that cross block edges:
// valid metadata (safe, against the reference and the CPU), then wrong metadata
// (unsafe: negative, too large, decreasing, saturating mid-row) clamped exactly
// like the CPU.
TEST(CudaSegmentReduceScan, MetadataAcrossScanBlocks) {
  SEGRED_NEED_GPU();
  const uint64_t seed = fresh_seed();
  SEGRED_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  // Safe: 1-D ~15k segments; batched [4, L] with 3000 segments per row (12000 items).
  const int64_t L1 = 100000;
  for (const char* r : {"sum", "max", "mean"})
    check_cuda(from_lengths({L1}, 0, {random_lengths(rng, L1, 12)}), DType::Float32, r,
               random_data(rng, L1, r, DType::Float32), rng);
  {
    const int64_t S = 3000;
    std::uniform_int_distribution<int64_t> len(0, 12);
    std::vector<std::vector<int64_t>> rows(4, std::vector<int64_t>(size_t(S)));
    int64_t L = 0;
    for (auto& row : rows) {
      int64_t sum = 0;
      for (auto& v : row) sum += (v = len(rng));
      L = std::max(L, sum);
    }
    for (auto& row : rows) {
      int64_t sum = 0;
      for (auto v : row) sum += v;
      row.back() += L - sum;
    }
    Layout lay = from_lengths({4, L, 2}, 1, rows);
    check_cuda(lay, DType::Float32, "max", random_data(rng, 4 * L * 2, "max", DType::Float32), rng);
    std::vector<std::vector<int64_t>> offs;
    for (const auto& row : rows) {
      std::vector<int64_t> o{0};
      for (auto v : row) o.push_back(o.back() + v);
      offs.push_back(o);
    }
    Layout lo = from_offsets({4, L, 2}, 1, offs);
    lo.index_dtype = DType::Int32;
    check_cuda(lo, DType::Float32, "sum", random_data(rng, 4 * L * 2, "sum", DType::Float32), rng);
  }
  // Unsafe: wrong metadata of every kind, compared with the CPU bit for bit.
  struct Case {
    Shape shape;
    int64_t axis;
    Shape meta_shape;
    bool lengths;
  };
  const Case cases[] = {{{50000}, 0, {12000}, true},
                        {{50000}, 0, {9001}, false},
                        {{3, 20000}, 1, {3, 5000}, true},
                        {{3, 20000, 2}, 1, {3, 4001}, false}};
  for (const auto& c : cases)
    for (DType it : {DType::Int32, DType::Int64}) {
      const int64_t L = c.shape[size_t(c.axis)];
      const int64_t k = c.meta_shape.back();
      std::vector<int64_t> meta;
      for (int64_t r = 0; r < numel(c.meta_shape) / k; ++r) {
        int64_t o = -40;
        for (int64_t i = 0; i < k; ++i) {
          const uint64_t u = rng();
          if (c.lengths) {
            int64_t v = int64_t(u % 12) - 3;  // [-3, 8]: negative and zero lengths, rows saturate at L or not
            if (u % 1777 == 0) v = it == DType::Int32 ? (int64_t(1) << 30) : (int64_t(1) << 40);
            meta.push_back(v);
          } else {
            o += int64_t(u % 13) - 2;  // mostly increasing, with drops
            if (u % 997 == 0) o -= 3000;
            meta.push_back(u % 7919 == 0 ? L + 7 : o);
          }
        }
      }
      SCOPED_TRACE(::testing::Message() << "unsafe " << (c.lengths ? "lengths " : "offsets ")
                                        << shape_string(c.meta_shape) << " " << dtype_name(it));
      std::vector<double> x(size_t(numel(c.shape)));
      for (size_t i = 0; i < x.size(); ++i) x[i] = double(int64_t(i * 7 % 11) - 5);  // exact sums
      // prod left out: its backward on long clamped segments rounds differently per backend.
      expect_unsafe_like_cpu(make_tensor(x, c.shape, DType::Float32), make_index(meta, c.meta_shape, it), c.lengths,
                             c.axis, {Reduce::Sum, Reduce::Max, Reduce::Min, Reduce::Mean});
    }
}

// prepare's speculative pass for offsets (v5): valid offsets write q in one pass;
// one drop anywhere sends the call through the full scan. 5000 offsets make 5
// scan blocks of 1000 items (threads of 4 items): a single drop at a scan-block
// edge (item 1000), at a thread edge (1004), inside a thread (1006), at the last
// item, and a drop that the clamp hides (both values above L), each compared
// with the CPU bit for bit.
TEST(CudaSegmentReduceScan, OffsetsSpeculativeDropAnywhere) {
  SEGRED_NEED_GPU();
  const int64_t k = 5000, L = 3 * k;
  std::vector<double> x(static_cast<size_t>(L));
  for (size_t i = 0; i < x.size(); ++i) x[i] = double(int64_t(i * 5 % 13) - 6);
  const Tensor d = make_tensor(x, {L}, DType::Float32);
  for (int64_t at : {int64_t(1000), int64_t(1004), int64_t(1006), k - 1, int64_t(-1), int64_t(-2)})
    for (DType it : {DType::Int32, DType::Int64}) {
      std::vector<int64_t> meta(static_cast<size_t>(k));
      for (int64_t i = 0; i < k; ++i) meta[size_t(i)] = 3 * i;
      if (at >= 0) meta[size_t(at)] = meta[size_t(at)] - 7;  // below its predecessor
      if (at == -2) {                                        // above L and dropping: clamped, no drop
        meta[size_t(k - 2)] = L + 50;
        meta[size_t(k - 1)] = L + 10;
      }
      SCOPED_TRACE(::testing::Message() << "drop at " << at << " " << dtype_name(it));
      expect_unsafe_like_cpu(d, make_index(meta, {k}, it), false, 0,
                             {Reduce::Sum, Reduce::Max, Reduce::Min, Reduce::Mean});
    }
}

TEST(CudaSegmentReduce, NonContiguousEqualsContiguous) {
  SEGRED_NEED_GPU();
  std::mt19937_64 rng(11);
  // data [6, 40] viewed transposed as [40, 6] (axis 0 of the view, inner 6).
  const std::vector<double> x = random_data(rng, 240, "max", DType::Float32);
  const Tensor base = dev(make_tensor(x, {6, 40}, DType::Float32));
  const TensorView tv(base.data(), DType::Float32, {40, 6}, {1, 40}, kGpu);
  const Tensor contig = dev(Tensor::contiguous_copy(TensorView(host(base).data(), DType::Float32, {40, 6}, {1, 40})));
  const Tensor len = dev(make_index({10, 0, 25, 5}, {4}, DType::Int64));
  Segments seg;
  seg.lengths = len.view();
  for (Reduce r : {Reduce::Sum, Reduce::Max, Reduce::Prod}) {
    const Tensor a = host(segment_reduce(tv, r, seg)), b = host(segment_reduce(contig, r, seg));
    EXPECT_TRUE(same_bits(a, b)) << to_string(r);
    const Tensor g = dev(make_tensor(mixed_grads(rng, 24, DType::Float32), {4, 6}, DType::Float32));
    const Tensor y = dev(b);
    EXPECT_TRUE(same_bits(host(segment_reduce_backward(g, y, tv, r, seg)),
                          host(segment_reduce_backward(g, y, contig, r, seg))));
  }
}

// ---------------------------------------------------------------------------
// Boundary execution past UINT32_MAX elements: the smallest shape that reaches
// each 64-bit path, values chosen so the expected result is exact, checked at
// the start and the end of the tensor.

#ifdef SEGRED_WITH_CUDA
bool enough_memory(size_t need, std::string& why) {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return false;
  why = detail::cat("needs ", need >> 20, " MiB of device memory, ", free_b >> 20, " MiB free");
  return free_b > need + (size_t(512) << 20);
}

void put_half(void* base, int64_t i, double v) {
  const half_t h = to_half(float(v));
  ASSERT_EQ(cudaMemcpy(static_cast<half_t*>(base) + i, &h, 2, cudaMemcpyHostToDevice), cudaSuccess);
}
std::vector<double> get_half(const void* base, int64_t i, int64_t n) {
  std::vector<half_t> h(static_cast<size_t>(n));
  EXPECT_EQ(cudaMemcpy(h.data(), static_cast<const half_t*>(base) + i, size_t(n) * 2, cudaMemcpyDeviceToHost),
            cudaSuccess);
  std::vector<double> v;
  for (auto e : h) v.push_back(to_float(e));
  return v;
}

// float16 0x3c3c = 1.05859375 = 271/256: sums of up to 2^13 of them are exact in
// float32 whatever the order, and 1024 of them (1084) is exact in float16.
constexpr double kFill = 271.0 / 256.0;
constexpr int kFillByte = 0x3c;

struct Boundary {
  int64_t L, inner, seg_len, S;
  Tensor data, meta;
  Segments seg;
};

Boundary boundary_problem(int64_t L, int64_t inner, int64_t seg_len) {
  Boundary b;
  b.L = L;
  b.inner = inner;
  b.seg_len = seg_len;
  b.S = (L + seg_len - 1) / seg_len;
  b.data = Tensor::empty(inner == 1 ? Shape{L} : Shape{L, inner}, DType::Float16, kGpu);
  EXPECT_EQ(cudaMemset(b.data.data(), kFillByte, size_t(L * inner) * 2), cudaSuccess);
  std::vector<int64_t> lens(size_t(b.S), seg_len);
  lens.back() = L - seg_len * (b.S - 1);
  b.meta = Tensor::copy_to(make_index(lens, {b.S}, DType::Int64), kGpu);
  b.seg.lengths = b.meta.view();
  return b;
}

std::string only_path(const TraceSession& ts) {
  std::set<std::string> p;
  for (const auto& r : ts.records()) p.insert(r.path);
  return p.size() == 1 ? *p.begin() : "several paths: " + std::to_string(p.size());
}

// Forward sum then backward max (tie split) and sum on one boundary problem. Markers: the
// first element 2.0 and the last 3.0 (unique maxima of the first and last
// segments); every other segment is all-equal (a tie of seg_len elements).
void run_boundary(int64_t L, int64_t inner, int64_t seg_len, const char* fwd_path, const char* bwd_path) {
  const size_t bytes = size_t(L * inner) * 2;
  std::string why;
  if (!enough_memory(2 * bytes, why)) GTEST_SKIP() << "boundary test " << why;
  std::printf("[ boundary ] %s: %lld x %lld float16 (%.2f GiB per tensor), %s\n", fwd_path, (long long)L,
              (long long)inner, double(bytes) / double(1ull << 30), why.c_str());
  Boundary b = boundary_problem(L, inner, seg_len);
  ASSERT_GT(numel(b.data.sizes()), int64_t(UINT32_MAX));
  for (int64_t f = 0; f < inner; ++f) {
    put_half(b.data.data(), f, 2.0);
    put_half(b.data.data(), (L - 1) * inner + f, 3.0);
  }
  const int64_t last_len = L - seg_len * (b.S - 1);
  // Forward sum.
  Tensor out = Tensor::empty(inner == 1 ? Shape{b.S} : Shape{b.S, inner}, DType::Float16, kGpu);
  {
    TraceSession ts;
    segment_reduce_out(b.data, Reduce::Sum, b.seg, out);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(only_path(ts), fwd_path);
  }
  const auto head = get_half(out.data(), 0, 2 * inner), tail = get_half(out.data(), (b.S - 2) * inner, 2 * inner);
  for (int64_t f = 0; f < inner; ++f) {
    EXPECT_EQ(head[size_t(f)], round_to(DType::Float16, kFill * double(seg_len - 1) + 2.0)) << "out[0]";
    EXPECT_EQ(head[size_t(inner + f)], round_to(DType::Float16, kFill * double(seg_len))) << "out[1]";
    EXPECT_EQ(tail[size_t(f)], round_to(DType::Float16, kFill * double(seg_len))) << "out[S-2]";
    EXPECT_EQ(tail[size_t(inner + f)], round_to(DType::Float16, kFill * double(last_len - 1) + 3.0)) << "out[S-1]";
  }
  // Forward max, then backward max with tie split and g = -2 (negative: split anyway).
  Tensor y = Tensor::empty(out.sizes(), DType::Float16, kGpu);
  segment_reduce_out(b.data, Reduce::Max, b.seg, y);
  Tensor g = Tensor::empty(out.sizes(), DType::Float16, kGpu);
  {
    std::vector<half_t> gv(size_t(out.numel()), to_half(-2.0f));
    ASSERT_EQ(cudaMemcpy(g.data(), gv.data(), gv.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  }
  out = Tensor();  // free before the gradient
  Tensor gi = Tensor::empty(b.data.sizes(), DType::Float16, kGpu);
  {
    TraceSession ts;
    segment_reduce_backward_out(g, y, b.data, Reduce::Max, b.seg, Tie::Split, gi);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(only_path(ts), bwd_path);
  }
  const int64_t n = 2 * seg_len * inner;
  const auto gh = get_half(gi.data(), 0, n), gt = get_half(gi.data(), L * inner - n, n);
  const double split = round_to(DType::Float16, -2.0 / double(seg_len));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = i / inner;
    EXPECT_EQ(gh[size_t(i)], row == 0 ? -2.0 : row < seg_len ? 0.0 : split) << "grad_input[" << i << "]";
    const int64_t trow = L - n / inner + row;  // absolute row of gt[i]
    const int64_t seg_begin = seg_len * (b.S - 1);
    const double want = trow == L - 1 ? -2.0 : trow >= seg_begin ? 0.0 : split;
    if (gt[size_t(i)] != want) {
      ADD_FAILURE() << "grad_input row " << trow << ": got " << gt[size_t(i)] << ", expected " << want;
      break;
    }
  }
  // Backward sum (reads no data; with features, the warp-row walk of
  // feat_rows_elementwise): every gradient -2, at both ends.
  std::string sum_path = fwd_path;
  sum_path.replace(sum_path.find(".fwd."), 5, ".bwd.");
  {
    TraceSession ts;
    segment_reduce_backward_out(g, y, b.data, Reduce::Sum, b.seg, Tie::Split, gi);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(only_path(ts), sum_path);
  }
  const auto sh = get_half(gi.data(), 0, n), stl = get_half(gi.data(), L * inner - n, n);
  for (int64_t i = 0; i < n; ++i)
    if (sh[size_t(i)] != -2.0 || stl[size_t(i)] != -2.0) {
      ADD_FAILURE() << "sum backward, element " << i << " from either end: " << sh[size_t(i)] << ", "
                    << stl[size_t(i)] << ", expected -2";
      break;
    }
}
#endif

TEST(CudaSegmentReduceBoundary, FlatI64PastUint32Max) {
  SEGRED_NEED_GPU();
#ifdef SEGRED_WITH_CUDA
  // 2^32 + 2^20 + 3 float16 elements (8.6 GB), segments of 1024 (the last one 3+2^20%...).
  run_boundary((int64_t(1) << 32) + (int64_t(1) << 20) + 3, 1, 1024, "segment_reduce.fwd.cuda.flat.i64",
               "segment_reduce.bwd.cuda.flat.i64");
#endif
}

TEST(CudaSegmentReduceBoundary, FeaturesI64PastUint32Max) {
  SEGRED_NEED_GPU();
#ifdef SEGRED_WITH_CUDA
  // [2^29 + 5, 8] float16 = 2^32 + 40 elements (8.6 GB), segments of 128 rows.
  run_boundary((int64_t(1) << 29) + 5, 8, 128, "segment_reduce.fwd.cuda.features.i64",
               "segment_reduce.bwd.cuda.features.i64");
#endif
}

}  // namespace
}  // namespace segred::testing
