// CUDA max/min backward in one read of x (session 7, issue #4;
// src/cuda/segment_maxbwd.cuh): the boundaries of the fused kernel, the crossing
// records, fixup_tree's totals and the repair. Every case runs max and min (and
// amax/amin for the flat layouts), tie split/first/last, gradients -1, 0, +1, 2.5
// and a mixed pattern, against the CPU backend (the reference implementation of
// the same contract: equal values, NaN == NaN) and the float64 reference, and
// twice on the device (same bits). Ties are placed relative to the tile edges the
// geometry gives (merge item of position j in segment s of a 1-row layout whose
// offsets start at 0: j + s + 1; flat tiles of 512 items, 1024 for the 16-bit
// types; feature tiles of 32 items).
//
// Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "src/core/segment_geometry.h"
#include "tests/cpp/segment_reduce_test_util.h"

#ifdef SEGRED_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace segred::testing {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

bool equal_values(const TensorView& a, const TensorView& b, std::string* where) {
  const auto va = to_vec(a), vb = to_vec(b);
  if (va.size() != vb.size()) return false;
  for (size_t i = 0; i < va.size(); ++i)
    if (!same_value(va[i], vb[i])) {
      *where = ::testing::PrintToString(i) + ": " + ::testing::PrintToString(va[i]) + " vs " +
               ::testing::PrintToString(vb[i]);
      return false;
    }
  return true;
}

// Forward (device) then backward for every tie and gradient; CPU and reference.
// Returns the CUDA paths the backward calls reached.
std::set<std::string> check_maxbwd(const Layout& lay, DType t, const std::string& reduce, const std::vector<double>& x_in,
                                   std::mt19937_64& rng) {
  std::set<std::string> reached;
#ifdef SEGRED_WITH_CUDA
  const std::vector<double> x = rounded(t, x_in);
  SCOPED_TRACE(::testing::Message() << "maxbwd reduce=" << reduce << " dtype=" << dtype_name(t)
                                    << " shape=" << shape_string(lay.shape) << " S=" << lay.S
                                    << " index=" << dtype_name(lay.index_dtype));
  const Tensor data_h = make_tensor(x, lay.shape, t);
  const Tensor meta_h = lay.meta();
  const Tensor data = Tensor::copy_to(data_h, kGpu), meta = Tensor::copy_to(meta_h, kGpu);
  const Segments seg_h = segments_of(lay, meta_h), seg = segments_of(lay, meta);
  const Reduce red = parse_reduce(reduce);
  const Tensor out = segment_reduce(data, red, seg);
  const Tensor out_h = Tensor::copy_to(out, DeviceRef{});
  std::string where;
  EXPECT_TRUE(equal_values(out_h, segment_reduce(data_h, red, seg_h), &where)) << "forward differs from the CPU at "
                                                                                  << where;
  const std::vector<double> y = to_vec(out_h);
  std::vector<std::vector<double>> grads;
  for (double c : {-1.0, 0.0, 1.0, 2.5}) grads.emplace_back(size_t(out.numel()), c);
  grads.push_back(mixed_grads(rng, out.numel(), t));
  for (const char* tie : {"split", "first", "last"})
    for (const auto& gv : grads) {
      SCOPED_TRACE(::testing::Message() << "tie=" << tie << " grad[0]=" << (gv.empty() ? 0.0 : gv[0]));
      const Tensor grad_h = make_tensor(gv, lay.out_shape(), t);
      const Tensor grad = Tensor::copy_to(grad_h, kGpu);
      Tensor gi = Tensor::empty(lay.shape, t, kGpu);
      if (gi.numel()) EXPECT_EQ(cudaMemset(gi.data(), 0xff, size_t(gi.numel()) * dtype_size(t)), cudaSuccess);
      {
        TraceSession ts;
        segment_reduce_backward_out(grad, out, data, red, seg, parse_tie(tie), gi);
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        for (const auto& r : ts.records()) reached.insert(r.path);
      }
      const Tensor gi_h = Tensor::copy_to(gi, DeviceRef{});
      const Tensor gi_cpu = segment_reduce_backward(grad_h, out_h, data_h, red, seg_h, parse_tie(tie));
      EXPECT_TRUE(equal_values(gi_h, gi_cpu, &where)) << "backward differs from the CPU at " << where;
      expect_backward(lay, t, reduce, tie, to_vec(gi_h),
                      reference::backward(lay.problem(), gv, y, x, canonical(reduce), tie));
      Tensor gi2 = Tensor::empty(lay.shape, t, kGpu);
      if (gi2.numel()) EXPECT_EQ(cudaMemset(gi2.data(), 0, size_t(gi2.numel()) * dtype_size(t)), cudaSuccess);
      segment_reduce_backward_out(grad, out, data, red, seg, parse_tie(tie), gi2);
      EXPECT_TRUE(same_bits(gi_h, Tensor::copy_to(gi2, DeviceRef{}))) << "backward not bitwise reproducible";
    }
#else
  (void)lay, (void)t, (void)reduce, (void)x_in, (void)rng;
#endif
  return reached;
}

// Tile items of the path a 1-row layout of this dtype and inner takes.
int64_t tile_items(DType t, int64_t inner) { return inner > 1 ? 32 : (dtype_size(t) == 2 ? 1024 : 512); }

// One row of constructed segments around the tile edges. `T` = tile items; the
// tie value is `hi` (max) or -hi (min), the background strictly inside (-1, 1).
struct Built {
  std::vector<int64_t> lens;
  std::vector<double> x;  // positions (each repeated `inner` times below)
};

Built build_row(int64_t T, bool is_max, std::mt19937_64& rng) {
  const double top = is_max ? 5.0 : -5.0;
  std::uniform_int_distribution<int> bg(-7, 7);
  Built b;
  int64_t pos = 0;
  auto add = [&](int64_t n, const std::function<double(int64_t /*k in segment*/, int64_t /*merge item*/)>& f) {
    const int64_t s = int64_t(b.lens.size());
    for (int64_t k = 0; k < n; ++k) b.x.push_back(f(k, pos + k + s + 1));
    b.lens.push_back(n);
    pos += n;
  };
  auto back = [&](int64_t, int64_t) { return bg(rng) / 8.0; };
  add(0, back);
  add(7, back);
  // A tie split across two tiles: equal extremes at both ends of a 3-tile segment.
  add(3 * T, [&](int64_t k, int64_t m) { return k == 0 || k == 3 * T - 1 ? top : back(k, m); });
  add(0, back);
  add(0, back);
  // k = 3 in three different tiles.
  add(2 * T + 5, [&](int64_t k, int64_t m) { return k == 1 || k == T + 3 || k == 2 * T + 4 ? top : back(k, m); });
  // A lone extreme (random data's case) in a segment crossing a tile edge.
  add(T + 1, [&](int64_t k, int64_t m) { return k == T / 2 ? top : back(k, m); });
  // Ties at the first and at the last position of every tile the segment meets.
  add(5 * T, [&](int64_t k, int64_t m) { return m % T == 0 || m % T == T - 1 ? top : back(k, m); });
  // All equal, more than 32 tiles (fixup_tree's chunked phases).
  add(40 * T, [&](int64_t, int64_t) { return top; });
  add(1, back);
  // Three ties far apart in a segment of more than 32 tiles.
  add(40 * T + 3, [&](int64_t k, int64_t m) { return k == 2 || k == 17 * T || k == 40 * T + 1 ? top : back(k, m); });
  // NaN ties in different tiles (NaN is the max and the min).
  add(3 * T, [&](int64_t k, int64_t m) { return k == 5 || k == 2 * T + 7 ? kNaN : back(k, m); });
  // -0/+0 ties: every element a zero of either sign beside values on the far side.
  add(2 * T + 1, [&](int64_t k, int64_t) {
    return k % 3 == 2 ? (is_max ? -0.5 : 0.5) : (k % 2 ? -0.0 : 0.0);
  });
  // Short segments, many per tile, with ties inside.
  for (int r = 0; r < 40; ++r) add(r % 5, [&](int64_t k, int64_t m) { return k % 2 ? top : back(k, m); });
  // All equal, exactly one tile long, then a tile plus one.
  add(T, [&](int64_t, int64_t) { return top; });
  add(T + 1, [&](int64_t, int64_t) { return top; });
  return b;
}

void run_constructed(DType t, int64_t inner, DType index, std::mt19937_64& rng, std::set<std::string>& reached) {
  const int64_t T = tile_items(t, inner);
  for (const char* r : {"max", "min"}) {
    const bool is_max = std::string(r) == "max";
    const Built b = build_row(T, is_max, rng);
    const int64_t L = int64_t(b.x.size());
    std::vector<double> x;
    x.reserve(size_t(L * inner));
    for (double v : b.x)
      for (int64_t f = 0; f < inner; ++f) x.push_back(f % 3 == 1 && !std::isnan(v) ? v * 0.5 : v);  // features differ
    Layout lay = inner == 1 ? from_lengths({L}, 0, {b.lens}) : from_lengths({L, inner}, 0, {b.lens});
    lay.index_dtype = index;
    for (const auto& p : check_maxbwd(lay, t, r, x, rng)) reached.insert(p);
  }
}

TEST(CudaSegmentReduceMaxBwd, ConstructedTileEdgesFlat) {
  SEGRED_NEED_GPU();
  std::mt19937_64 rng(91);
  std::set<std::string> reached;
  for (DType t : {DType::Float32, DType::BFloat16, DType::Float64, DType::Float16})
    for (DType index : {DType::Int32, DType::Int64}) {
      if ((t == DType::Float64 || t == DType::Float16) && index == DType::Int64) continue;
      run_constructed(t, 1, index, rng, reached);
    }
  EXPECT_TRUE(reached.count("segment_reduce.bwd.cuda.flat.i32"));
}

TEST(CudaSegmentReduceMaxBwd, ConstructedTileEdgesFeatures) {
  SEGRED_NEED_GPU();
  std::mt19937_64 rng(92);
  std::set<std::string> reached;
  for (DType t : {DType::Float32, DType::BFloat16})
    for (int64_t inner : {4, 16, 128, 3})
      for (DType index : {DType::Int32, DType::Int64}) {
        if (inner == 128 && index == DType::Int64) continue;
        run_constructed(t, inner, index, rng, reached);
      }
  run_constructed(DType::Float64, 16, DType::Int32, rng, reached);
  run_constructed(DType::Float16, 8, DType::Int32, rng, reached);
  EXPECT_TRUE(reached.count("segment_reduce.bwd.cuda.features.i32"));
}

// Session 20, the flat kernels' aligned and element forms: the repair reads x with
// 16-byte vectors where x is aligned (repair_split_flat_vec: whole vectors of the
// tile's part, the fewer than VE positions before and after them one by one), and
// a full tile without a segment end (flat_maxmin_full_tile) folds and writes with
// vectors where x (loads) and x and gi (stores) are aligned, element by element
// otherwise. The constructed row (every repair case: ties in several tiles,
// all-equal segments of 40 tiles, NaN and signed-zero ties) behind e = 0 .. 8
// one-element segments, so that the parts and the full tiles begin at every phase
// mod 8; split, first and last; against the CPU and the reference (check_maxbwd),
// then with x one element into a buffer, with gi one element into one (x
// aligned), and with 2, 7 and 32 tiles per warp in the repair
// (SegmentTestCaps::repair_tiles): all must give the aligned call's bits.
TEST(CudaSegmentReduceMaxBwd, RepairVectorAndScalarReadsAgree) {
  SEGRED_NEED_GPU();
#ifdef SEGRED_WITH_CUDA
  std::mt19937_64 rng(97);
  for (DType t : {DType::Float32, DType::BFloat16, DType::Float16, DType::Float64})
    for (int64_t e = 0; e <= 8; ++e)
      for (const char* r : {"max", "min"}) {
        const bool is_max = std::string(r) == "max";
        Built b = build_row(tile_items(t, 1), is_max, rng);
        b.lens.insert(b.lens.begin(), size_t(e), 1);
        b.x.insert(b.x.begin(), size_t(e), 0.25);
        const int64_t L = int64_t(b.x.size());
        SCOPED_TRACE(::testing::Message() << dtype_name(t) << " " << r << " e " << e << " L " << L);
        const Layout lay = from_lengths({L}, 0, {b.lens});
        check_maxbwd(lay, t, r, b.x, rng);
        const std::vector<double> x = rounded(t, b.x);
        const Tensor data = Tensor::copy_to(make_tensor(x, {L}, t), kGpu);
        std::vector<double> xb(size_t(L + 1), 0.0);
        std::copy(x.begin(), x.end(), xb.begin() + 1);
        const Tensor buf = Tensor::copy_to(make_tensor(xb, {L + 1}, t), kGpu);
        const TensorView mis(static_cast<char*>(buf.data()) + dtype_size(t), t, {L}, {}, kGpu);
        const Tensor meta = Tensor::copy_to(lay.meta(), kGpu);
        const Segments seg = segments_of(lay, meta);
        const Reduce red = parse_reduce(r);
        const Tensor out = segment_reduce(data, red, seg);
        const Tensor grad = Tensor::copy_to(make_tensor(mixed_grads(rng, out.numel(), t), lay.out_shape(), t), kGpu);
        Tensor gbuf = Tensor::empty({L + 1}, t, kGpu);
        const TensorView gi_view(static_cast<char*>(gbuf.data()) + dtype_size(t), t, {L}, {}, kGpu);
        for (Tie tie : {Tie::Split, Tie::First, Tie::Last}) {
          SCOPED_TRACE(::testing::Message() << "tie " << int(tie));
          Tensor gi = Tensor::empty(lay.shape, t, kGpu), gi_mis = Tensor::empty(lay.shape, t, kGpu);
          segment_reduce_backward_out(grad, out, data, red, seg, tie, gi);
          const Tensor want = Tensor::copy_to(gi, DeviceRef{});
          segment_reduce_backward_out(grad, out, mis, red, seg, tie, gi_mis);
          EXPECT_TRUE(same_bits(want, Tensor::copy_to(gi_mis, DeviceRef{})))
              << "misaligned x (element loads) differs from aligned x (vector loads)";
          segment_reduce_backward_out(grad, out, data, red, seg, tie, gi_view);
          Tensor got = Tensor::empty({L + 1}, t, DeviceRef{});
          ASSERT_EQ(cudaMemcpy(got.data(), gbuf.data(), size_t(L + 1) * dtype_size(t), cudaMemcpyDeviceToHost),
                    cudaSuccess);
          const TensorView got_view(static_cast<char*>(got.data()) + dtype_size(t), t, {L}, {}, DeviceRef{});
          EXPECT_TRUE(same_bits(want, got_view)) << "misaligned gi (element stores) differs from aligned gi";
          // The repair's tiles per warp (the rule gives 1 at these sizes): several tiles per
          // warp, a last group of fewer, every lane a tile; the same bits.
          for (int G : {2, 7, 32}) {
            detail::segment_test_caps().repair_tiles = G;
            Tensor gi_g = Tensor::empty(lay.shape, t, kGpu);
            segment_reduce_backward_out(grad, out, data, red, seg, tie, gi_g);
            detail::segment_test_caps().repair_tiles = 0;
            EXPECT_TRUE(same_bits(want, Tensor::copy_to(gi_g, DeviceRef{}))) << "repair with " << G << " tiles per warp";
          }
        }
      }
#endif
}

// Low-cardinality random data (values in {0, 1, 2}, some NaN, both zeros): ties
// everywhere, at every offset from the tile and lane edges; lengths around the
// tile sizes and batched rows (outer > 1). Session 30: the feature kernel keeps tie
// bits for the first 64 rows of a segment's part in a tile where a lane holds at most 4
// features (16-bit rows at 8 features a lane have no window) and re-reads the rows
// past them; the feature layouts also run at 100 and 256
// merge items (SegmentTestCaps::feat_items), so that a lane's part of a segment is
// shorter than, equal to and longer than each window (at the rule's 32 items every
// part fits), first/last/split positions fall on both sides of it.
TEST(CudaSegmentReduceMaxBwd, RandomTiesEverywhere) {
  SEGRED_NEED_GPU();
  std::mt19937_64 rng(93);
  std::uniform_int_distribution<int> v(0, 40);
  for (DType t : {DType::Float32, DType::BFloat16})
    for (int64_t inner : {1, 4, 16})
      for (int64_t max_len : {3, 40, 700, 2500}) {
        const int64_t outer = 3, L = 5000;
        std::vector<std::vector<int64_t>> rows;
        size_t S = 0;
        for (int64_t r = 0; r < outer; ++r) {
          rows.push_back(random_lengths(rng, L, max_len));
          S = std::max(S, rows.back().size());
        }
        for (auto& row : rows) row.resize(S, 0);  // every row S segments (trailing empties)
        std::vector<double> x(size_t(outer * L * inner));
        for (auto& e : x) {
          const int k = v(rng);
          e = k == 0 ? kNaN : k == 1 ? -0.0 : k == 2 ? 0.0 : double(k % 3);
        }
        const Layout lay = inner == 1 ? from_lengths({outer, L}, 1, rows) : from_lengths({outer, L, inner}, 1, rows);
        for (const int items : {0, 100, 256}) {
          if (inner == 1 && items) continue;
          SCOPED_TRACE(::testing::Message() << "feat_items=" << items);
          detail::segment_test_caps().feat_items = items;
          for (const char* r : {"max", "min", "amax", "amin"}) check_maxbwd(lay, t, r, x, rng);
          detail::segment_test_caps().feat_items = 0;
        }
      }
}

// Session 8 (helper H14): boundaries of a list-based repair (fixup_tree listing
// the records whose local view differs from the total). That implementation was
// measured slower on the flat rows and reverted the same session (bench/NOTES.md,
// "Session 8, measured"); these cases test results only, so they stay, against
// whichever repair runs. The boundaries:
//   no crossing segment at all (one tile): the list stays empty;
//   every record listed: all-equal segments just over a tile long, so every
//   tile holds the tied end of one segment and the tied start of the next (the
//   list near its capacity, 2 records per (tile, feature));
//   long segments (> kShortFix tiles, fixup_tree's phases 2-3 list the kept
//   carries) with sparse ties in most of their tiles (the benchmark's bf16 case:
//   ~4 ties per tile), beside short ones.
void run_lens(DType t, int64_t inner, DType index, const std::vector<int64_t>& lens,
              const std::function<double(int64_t /*position*/, bool /*is_max*/)>& val, std::mt19937_64& rng,
              std::set<std::string>& reached) {
  int64_t L = 0;
  for (int64_t n : lens) L += n;
  for (const char* r : {"max", "min"}) {
    const bool is_max = std::string(r) == "max";
    std::vector<double> x;
    x.reserve(size_t(L * inner));
    for (int64_t j = 0; j < L; ++j) {
      const double v = val(j, is_max);
      for (int64_t f = 0; f < inner; ++f) x.push_back(f % 3 == 1 && !std::isnan(v) ? v * 0.5 : v);
    }
    Layout lay = inner == 1 ? from_lengths({L}, 0, {lens}) : from_lengths({L, inner}, 0, {lens});
    lay.index_dtype = index;
    for (const auto& p : check_maxbwd(lay, t, r, x, rng)) reached.insert(p);
  }
}

TEST(CudaSegmentReduceMaxBwd, RepairListEmptyNoCrossing) {
  SEGRED_NEED_GPU();
  std::mt19937_64 rng(94);
  std::set<std::string> reached;
  for (DType t : {DType::Float32, DType::BFloat16})
    for (int64_t inner : {1, 4, 16, 128})
      for (DType index : {DType::Int32, DType::Int64}) {
        // Fewer merge items (positions + segment ends) than one tile: no tile edge inside.
        const std::vector<int64_t> lens = inner == 1 ? std::vector<int64_t>{0, 5, 100, 3, 1, 90}
                                                     : std::vector<int64_t>{2, 0, 9, 3, 1};
        run_lens(t, inner, index, lens,
                 [](int64_t j, bool mx) { return (j % 4 == 1 ? 3.0 : double(j % 3) / 4.0) * (mx ? 1 : -1); }, rng,
                 reached);
      }
}

TEST(CudaSegmentReduceMaxBwd, RepairListEveryRecord) {
  SEGRED_NEED_GPU();
  std::mt19937_64 rng(95);
  std::set<std::string> reached;
  for (DType t : {DType::Float32, DType::BFloat16})
    for (int64_t inner : {1, 4, 16, 128})
      for (DType index : {DType::Int32, DType::Int64}) {
        if (inner == 128 && index == DType::Int64) continue;
        const int64_t T = tile_items(t, inner);
        std::vector<int64_t> lens(12, T + 3);
        lens.insert(lens.begin() + 5, {T - 1, 2 * T + 1, T + 1});
        run_lens(t, inner, index, lens, [](int64_t, bool mx) { return mx ? 7.0 : -7.0; }, rng, reached);
      }
  EXPECT_TRUE(reached.count("segment_reduce.bwd.cuda.flat.i32"));
  EXPECT_TRUE(reached.count("segment_reduce.bwd.cuda.features.i32"));
}

TEST(CudaSegmentReduceMaxBwd, RepairListLongSparseTies) {
  SEGRED_NEED_GPU();
  std::mt19937_64 rng(96);
  std::set<std::string> reached;
  for (DType t : {DType::Float32, DType::BFloat16})
    for (int64_t inner : {1, 4, 16, 128})
      for (DType index : {DType::Int32, DType::Int64}) {
        if (inner == 128 && index == DType::Int64) continue;
        const int64_t T = tile_items(t, inner);
        // Long (> 32 tiles), short crossing, a long one again, a one-tile one.
        const std::vector<int64_t> lens{40 * T + 7, 3, T + 2, 0, 34 * T - 5, 9, T};
        int64_t L = 0;
        for (int64_t n : lens) L += n;
        std::vector<char> tie(static_cast<size_t>(L));
        std::bernoulli_distribution p(4.0 / double(T));  // ~4 ties per tile
        for (auto& e : tie) e = p(rng);
        std::uniform_int_distribution<int> bg(-40, 40);
        std::vector<double> back(static_cast<size_t>(L));
        for (auto& e : back) e = bg(rng) / 16.0;
        run_lens(t, inner, index, lens,
                 [&](int64_t j, bool mx) { return tie[size_t(j)] ? (mx ? 9.0 : -9.0) : back[size_t(j)]; }, rng,
                 reached);
      }
  EXPECT_TRUE(reached.count("segment_reduce.bwd.cuda.flat.i32"));
  EXPECT_TRUE(reached.count("segment_reduce.bwd.cuda.features.i32"));
}

// Session 32, the tie lists of full flat tiles (flat_maxmin_full_tile keeps up to
// kTieList = 7 tied positions of a tile for split's repair, which then stores to them
// without reading x; with more it re-reads the tile). One segment of 12 tiles (tiles
// 1-11 of the row are full) after a short one and e empty ones: e = 0..8 moves the
// full tiles' first position through every alignment of a 16-byte vector (the first
// vector's positions before the tile, the scalars past the last round). Ties at tile
// offsets: 7 (the list full), 8 (one past: the re-read), the last one or two offsets
// (the scalar tail where the alignment leaves one), the first one or two, one in the
// middle, none; and one in the first, partial tile (a staged tile's carry), so every
// listed tile's count differs from the segment's total.
TEST(CudaSegmentReduceMaxBwd, FullTileTieLists) {
  SEGRED_NEED_GPU();
  std::mt19937_64 rng(97);
  std::set<std::string> reached;
  for (DType t : {DType::Float32, DType::BFloat16, DType::Float64, DType::Float16})
    for (DType index : {DType::Int32, DType::Int64}) {
      if ((t == DType::Float64 || t == DType::Float16) && index == DType::Int64) continue;
      const int64_t T = tile_items(t, 1);
      const std::map<int64_t, std::vector<int64_t>> ties{
          {1, {0, 1, 2, T / 2, T - 3, T - 2, T - 1}},
          {2, {3, 9, 17, T / 3, T / 2, T - 40, T - 5, T - 1}},
          {3, {T - 1}},
          {4, {T - 2, T - 1}},
          {5, {0}},
          {6, {0, 1}},
          {8, {T / 2}},
          {9, {0, T - 1}},
          {10, {5, 6, 7, 8, 9, 10, 11}},
      };
      const int step = dtype_size(t) == 2 ? 1 : 3;
      for (int e = 0; e <= 8; e += step) {
        std::vector<int64_t> lens{5};
        for (int k = 0; k < e; ++k) lens.push_back(0);
        const int64_t s = int64_t(lens.size());  // the long segment; its position j is merge item j + s + 1
        lens.push_back(12 * T + 3);
        lens.push_back(4);
        int64_t L = 0;
        for (int64_t n : lens) L += n;
        std::vector<char> tie(static_cast<size_t>(L), 0);
        for (const auto& [k, offs] : ties)
          for (int64_t r : offs) tie[size_t(k * T + r - s - 1)] = 1;
        tie[size_t(5 + 2)] = 1;  // the first, partial tile
        std::uniform_int_distribution<int> bg(-7, 7);
        std::vector<double> back(static_cast<size_t>(L));
        for (auto& v : back) v = bg(rng) / 8.0;
        SCOPED_TRACE(::testing::Message() << "empty segments before the long one: " << e);
        run_lens(t, 1, index, lens,
                 [&](int64_t j, bool mx) { return tie[size_t(j)] ? (mx ? 9.0 : -9.0) : back[size_t(j)]; }, rng,
                 reached);
      }
    }
  EXPECT_TRUE(reached.count("segment_reduce.bwd.cuda.flat.i32"));  // int64 metadata at this size: i32 too
}

// Session 30, the feature kernel's tie-bit window (64 rows where a lane holds at most
// 4 features; none for 16-bit types at 8 features a lane; rows past it are re-read): segments of 31-33, 63-65
// and 300-700 rows whose only extremum (or a pair of tied ones) sits at rows 0, 31,
// 32, 33, 63, 64, 65 and 200 from the segment's start, so that the one position
// first/last write, and split's tied positions, lie inside, at and past the window
// edge; at the rule's items and at 100 and 256 items (a tile's part of a segment,
// which is what the window counts from, then starts mid-segment too), with the
// rule's vectors and with half vectors forced (4 features a lane for 16-bit types:
// the 64-row window); float64 (two features a lane) and float16 beside float32 and
// bfloat16.
TEST(CudaSegmentReduceMaxBwd, TieBitWindowEdges) {
  SEGRED_NEED_GPU();
  std::mt19937_64 rng(98);
  std::set<std::string> reached;
  const std::vector<int64_t> lens{31, 32, 33, 63, 64, 65, 300, 1, 0, 700, 66};
  std::vector<int64_t> start;
  int64_t L = 0;
  for (int64_t n : lens) {
    start.push_back(L);
    L += n;
  }
  for (const std::vector<int64_t> at : {std::vector<int64_t>{0}, {31}, {32}, {33}, {63}, {64}, {65}, {200},
                                        {31, 32}, {0, 64}, {33, 65}}) {
    std::vector<char> peak(size_t(L), 0);
    for (size_t s = 0; s < lens.size(); ++s)
      for (int64_t k : at)
        if (k < lens[s]) peak[size_t(start[s] + k)] = 1;
    for (const int items : {0, 100, 256})
      for (const int half : {0, 2}) {  // the rule's vectors; half vectors forced (64-row window)
        SCOPED_TRACE(::testing::Message() << "feat_items=" << items << " half " << half << " peaks at " << at[0]);
        detail::segment_test_caps().feat_items = items;
        detail::segment_test_caps().feat_half_vec = half;
        for (DType t : {DType::Float32, DType::BFloat16, DType::Float64, DType::Float16})
          for (int64_t inner : {8, 16, 64}) {
            // 16-bit at inner 8 and 64 without half: 8 features a lane, no window (64:
            // several lanes a row; session 31); every other case: the 64-row window.
            if (t == DType::Float64 && (inner == 8 || half)) continue;
            if (inner == 64 && (t == DType::Float32 || t == DType::Float64 || half)) continue;
            run_lens(t, inner, DType::Int32, lens,
                     [&](int64_t j, bool mx) { return peak[size_t(j)] ? (mx ? 9.0 : -9.0) : double(j % 7) / 8.0; },
                     rng, reached);
          }
        detail::segment_test_caps().feat_items = 0;
        detail::segment_test_caps().feat_half_vec = 0;
      }
  }
  EXPECT_TRUE(reached.count("segment_reduce.bwd.cuda.features.i32"));
}

}  // namespace
}  // namespace segred::testing
