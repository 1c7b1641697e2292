// The ragged softmax family on CUDA (shared/TESTING.md): the CPU suite's kinds of
// cases repeated on the device through the public API and compared with the
// float64 reference and with the CPU backend: every op, both directions, every
// dtype, lengths (int64) and offsets (int32, with ghost rows), axis 1 with
// batched metadata, heads 1, 3, 8, 33, 64, 200, empty segments, segments of one
// (softmax 1, log_softmax 0, gradient 0), special values per segment, gradients
// of every sign, one segment of 2^26 beside many of one, unsafe metadata clamped
// like the CPU, device-metadata validation with the CPU's messages, strided
// inputs, bitwise reproducibility; every CUDA path proven through the trace at 32
// bits and (test hook) 64 bits; and boundary execution past UINT32_MAX elements
// (CudaSegmentSoftmaxHuge.*: each states its memory need and skips when the GPU
// lacks it). Everything skips when no GPU is present.
#include <gtest/gtest.h>

#include "segred/segred.h"

#ifdef SEGRED_WITH_CUDA
#include <cuda_runtime.h>

#include <cstring>
#include <functional>
#include <set>

#include "cli/large.h"
#include "tests/cpp/segment_softmax_test_util.h"

namespace segred::testing::ss {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (::segred::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

constexpr DeviceRef kGpu{Device::CUDA, 0};
const double kInf = std::numeric_limits<double>::infinity();

std::set<std::string>& reached() {  // CUDA paths reached by this file (also under --gtest_filter)
  static std::set<std::string> s;
  return s;
}

double to_d(DType t, const void* p, size_t i) {
  switch (t) {
    case DType::Float32: return double(static_cast<const float*>(p)[i]);
    case DType::Float64: return static_cast<const double*>(p)[i];
    case DType::Float16: return double(to_float(static_cast<const half_t*>(p)[i]));
    default: return double(to_float(static_cast<const bfloat16_t*>(p)[i]));
  }
}
void from_d(DType t, void* p, size_t i, double v) {
  switch (t) {
    case DType::Float32: static_cast<float*>(p)[i] = float(v); break;
    case DType::Float64: static_cast<double*>(p)[i] = v; break;
    case DType::Float16: static_cast<half_t*>(p)[i] = to_half(float(v)); break;
    default: static_cast<bfloat16_t*>(p)[i] = to_bfloat16(float(v)); break;
  }
}
double round_to(DType t, double v) {
  double out;
  unsigned char buf[8];
  from_d(t, buf, 0, v);
  out = to_d(t, buf, 0);
  return out;
}

Tensor host_tensor(const std::vector<double>& v, const Shape& s, DType t) {
  Tensor h = Tensor::empty(s, t);
  for (size_t i = 0; i < v.size(); ++i) from_d(t, h.data(), i, v[i]);
  return h;
}
std::vector<double> values(const TensorView& t) {
  const Tensor h = t.device.type == Device::CPU ? Tensor::contiguous_copy(t) : Tensor::copy_to(t, DeviceRef{});
  std::vector<double> v(size_t(h.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = to_d(h.dtype(), h.data(), i);
  return v;
}
bool same_bits(const TensorView& a, const TensorView& b) {
  const Tensor ha = Tensor::copy_to(a, DeviceRef{}), hb = Tensor::copy_to(b, DeviceRef{});
  return std::memcmp(ha.data(), hb.data(), size_t(ha.numel()) * size_t(dtype_size(ha.dtype()))) == 0;
}
// A device tensor filled with the sentinel 12345 (an element left unwritten shows).
Tensor sentinel(const Shape& s, DType t) {
  return Tensor::copy_to(host_tensor(std::vector<double>(size_t(numel(s)), 12345.0), s, t), kGpu);
}

// The API shapes of a case: data [L(, F)] or [outer, L(, F)] (axis 1), metadata
// [S] / [outer, S] (lengths, int64) or [S + 1] / [outer, S + 1] (offsets, int32).
struct Shapes {
  Shape data, seg_out, meta;
  int64_t axis;
};
Shapes shapes_of(const Case& c, bool offsets) {
  Shapes s;
  const bool b = c.outer > 1;
  s.axis = b ? 1 : 0;
  s.data = b ? Shape{c.outer, c.L} : Shape{c.L};
  s.seg_out = b ? Shape{c.outer, c.S} : Shape{c.S};
  s.meta = b ? Shape{c.outer, c.S + (offsets ? 1 : 0)} : Shape{c.S + (offsets ? 1 : 0)};
  if (c.F > 1) {
    s.data.push_back(c.F);
    s.seg_out.push_back(c.F);
  }
  return s;
}

struct Meta {
  Tensor host, dev;
  Segments seg_host, seg_dev;
};
Meta metadata(const Case& c, bool offsets, bool unsafe = false) {
  const Shapes sh = shapes_of(c, offsets);
  Meta m;
  if (offsets) {
    m.host = Tensor::empty(sh.meta, DType::Int32);
    for (size_t i = 0; i < c.off.size(); ++i) m.host.ptr<int32_t>()[i] = int32_t(c.off[i]);
  } else {
    const auto l = c.lengths();
    m.host = Tensor::empty(sh.meta, DType::Int64);
    std::copy(l.begin(), l.end(), m.host.ptr<int64_t>());
  }
  m.dev = Tensor::copy_to(m.host, kGpu);
  (offsets ? m.seg_host.offsets : m.seg_host.lengths) = m.host.view();
  (offsets ? m.seg_dev.offsets : m.seg_dev.lengths) = m.dev.view();
  m.seg_host.axis = m.seg_dev.axis = sh.axis;
  m.seg_host.unsafe = m.seg_dev.unsafe = unsafe;
  return m;
}

// One kind on `dev`: returns the output; x/g/y as the public API takes them.
Tensor run_api(SsKind k, const Shapes& sh, const Segments& seg, const Inputs& in, DType t, DeviceRef dev,
               bool poison = false) {
  auto put = [&](const std::vector<double>& v, const Shape& s) {
    const Tensor h = host_tensor(v, s, t);
    return dev.type == Device::CPU ? h : Tensor::copy_to(h, dev);
  };
  const SegmentSoftmaxOp op = op_of(k);
  const Shape out_shape = (k == SsKind::LseFwd) ? sh.seg_out : sh.data;
  Tensor out = dev.type == Device::CPU || !poison ? Tensor::empty(out_shape, t, dev) : sentinel(out_shape, t);
  if (!is_bwd(k)) {
    const Tensor x = put(in.in0, sh.data);
    segment_softmax_out(op, x, seg, out);
  } else if (k == SsKind::LseBwd) {
    const Tensor x = put(in.in0, sh.data), g = put(in.seg0, sh.seg_out), y = put(in.seg1, sh.seg_out);
    segment_softmax_backward_out(op, g, y, x, seg, out);
  } else {
    const Tensor g = put(in.in0, sh.data), y = put(in.in1, sh.data);
    segment_softmax_backward_out(op, g, y, y, seg, out);
  }
  if (dev.type != Device::CPU) EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return out;
}

SegmentSoftmaxProblem problem_of(const Case& c, SsKind k, DType t) {
  return {Backend::CUDA, is_bwd(k) ? Direction::Bwd : Direction::Fwd, op_of(k), t, c.outer, c.L, c.F, c.S};
}

// The test hooks of the plan: 64-bit tile kernels on small inputs; the tile path, or the
// lane-group path wherever it applies (whatever detail::kSslByDefault says). Resets even when
// an assertion returns early.
struct ForcePaths {
  ForcePaths(bool i64, bool tiles) {
    detail::segment_softmax_force_index64() = i64;
    detail::segment_softmax_lanes_mode() = tiles ? -1 : 1;
  }
  ~ForcePaths() {
    detail::segment_softmax_force_index64() = false;
    detail::segment_softmax_lanes_mode() = 0;
  }
};

// The lane-group path can run the case (whatever the default).
bool lanes_apply(const Case& c, SsKind k, DType t) { return detail::segment_softmax_lanes(problem_of(c, k, t)).lpr > 0; }

// One case, one kind, one dtype: CUDA (poisoned output, trace-asserted path: the plan's,
// which the test recomputes) against the reference and the CPU backend, and bitwise
// reproducible. force64: the tile path's 64-bit kernels; tiles: the tile path where the
// lane-group path applies.
void check(const Case& c, SsKind k, DType t, bool offsets, bool force64, std::mt19937_64& rng, bool specials,
           bool dense = false, bool tiles = false) {
  const ForcePaths force(force64, tiles || force64);
  const std::string want = std::string(plan_segment_softmax(problem_of(c, k, t)).path);
  SCOPED_TRACE(::testing::Message() << kind_name(k) << " " << dtype_name(t) << " " << c.name
                                    << (offsets ? " offsets(int32)" : " lengths(int64)") << " " << want);
  if (!force64) {
    const char* tag = tiles ? ".cuda.tiles.i32" : ".cuda.lanes.i64";
    if (tiles || lanes_apply(c, k, t)) EXPECT_NE(want.find(tag), std::string::npos) << "the plan chose " << want;
  }
  const Inputs in = make_inputs(k, c, rng, specials, [t](double v) { return round_to(t, v); }, dense);
  const Shapes sh = shapes_of(c, offsets);
  const Meta m = metadata(c, offsets);
  Tensor out;
  {
    TraceSession trace;
    out = run_api(k, sh, m.seg_dev, in, t, kGpu, true);
    const auto recs = trace.records();
    if (out.numel() == 0) {  // nothing to write: nothing launched
      EXPECT_TRUE(recs.empty());
      return;
    }
    ASSERT_FALSE(recs.empty()) << "no CUDA launch";
    for (const auto& r : recs) {
      EXPECT_EQ(r.path, want);
      EXPECT_GT(r.grid[0], 0);
      EXPECT_GT(r.block[0], 0);
      reached().insert(r.path);
    }
  }
  const std::vector<double> got = values(out);
  const bool f64 = t == DType::Float64;
  EXPECT_TRUE(close(got, in, unit_out(t), f64)) << "CUDA vs the float64 reference";
  const std::vector<double> cpu = values(run_api(k, sh, m.seg_host, in, t, DeviceRef{}));
  EXPECT_TRUE(close(got, cpu, in.mag, unit_out(t), f64, 2.0)) << "CUDA vs the CPU backend";
  const Tensor again = run_api(k, sh, m.seg_dev, in, t, kGpu);
  EXPECT_TRUE(same_bits(out, again)) << "not bitwise reproducible";
}

// Every kind; where the lane-group path applies, on it and on the tile path.
void check_kinds(const Case& c, DType t, bool offsets, bool force64, std::mt19937_64& rng, bool specials,
                 bool dense = false) {
  for (SsKind k : kKinds) {
    check(c, k, t, offsets, force64, rng, specials, dense);
    if (!force64 && lanes_apply(c, k, t)) check(c, k, t, offsets, false, rng, specials, dense, true);
  }
}

// Typed (not value-parameterised) so the suite registers, and runs, in file
// order: ZzEveryCudaPathReached, at the end of the file, runs after it.
template <class T>
class CudaSegmentSoftmax : public ::testing::Test {};
TYPED_TEST_SUITE(CudaSegmentSoftmax, FloatTypes, DtypeName);

// Heads 1 (one lane per row), 3 and 33 (scalar lanes, slabs), 8, 64, 200 (slabs
// of 16 features): every kind, lengths and offsets with ghosts, batched rows, specials.
TYPED_TEST(CudaSegmentSoftmax, EveryKindHeadsAndLayoutsI32) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(101);
  const DType t = dtype_of<TypeParam>();
  int n = 0;
  for (int64_t F : {1, 3, 8, 33, 64, 200})
    for (const char* style : {"mixed", "ones", "long"}) {
      const bool offsets = n % 2 == 1;
      const Case c = make_case(rng, 1 + n % 3, F >= 64 ? 12 : 60, F, style, offsets, F >= 64 ? 400 : 5000);
      check_kinds(c, t, offsets, false, rng, n % 3 != 2);
      ++n;
    }
}

// The 64-bit kernels on small inputs (the plan's test hook), same checks.
TYPED_TEST(CudaSegmentSoftmax, EveryKindHeadsAndLayoutsForcedI64) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(202);
  const DType t = dtype_of<TypeParam>();
  int n = 0;
  for (int64_t F : {1, 8, 64})
    for (const char* style : {"mixed", "long"}) {
      const bool offsets = n % 2 == 0;
      const Case c = make_case(rng, 1 + n % 2, 40, F, style, offsets, F >= 64 ? 300 : 3000);
      check_kinds(c, t, offsets, true, rng, true);
      ++n;
    }
}


// The tile kernel's lock-step walk and row pass (session 4): several short
// segments per chunk (more than a lane keeps in registers: some written by the
// walk itself), one-row and empty segments, a 300-row segment across chunk and
// tile edges, ghosts, and a special value drawn for every (segment, feature):
// all -inf, NaN, +inf once or twice, -inf beside finite values, a huge spread.
TYPED_TEST(CudaSegmentSoftmax, ShortSegmentsDenseSpecials) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(808);
  const DType t = dtype_of<TypeParam>();
  int n = 0;
  for (int64_t F : {1, 2, 4, 8, 12, 64})
    for (int ghosts = 0; ghosts < 2; ++ghosts, ++n) {
      const Case c = short_segments_case(rng, 1 + n % 2, F >= 64 ? 200 : 3000, F, ghosts == 1);
      check_kinds(c, t, ghosts == 1, n % 3 == 2, rng, false, true);
    }
}

// Segments laid on the tile kernel's chunk grid (E rows per chunk, from the
// forward geometry the launch plans): exactly one chunk, one chunk and one row,
// one row short, empty, one row, runs of one-row segments (middle pieces past
// those a lane keeps), two chunks, repeated over many tiles (the grid drifts by
// the segment ends a tile holds, so every offset is reached); dense specials
// per (segment, feature). The row pass computes every piece's constants before
// its loop: a wrong one shows here at every position in the chunk.
TYPED_TEST(CudaSegmentSoftmax, ChunkGridPieces) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(909);
  const DType t = dtype_of<TypeParam>();
  int n = 0;
  // F = 4, 8, 64 with V = 4 (not float64): the shared-memory middle-piece slot (one
  // per thread, above 48 KiB of dynamic shared memory) and the pieces past it; 64:
  // slabs of 16 features (fp32), 4 lanes per row.
  for (int64_t F : {1, 4, 8, 64})
    for (int ghosts = 0; ghosts < 2; ++ghosts, ++n) {
      const SegmentSoftmaxProblem prob{Backend::CUDA, Direction::Fwd, SegmentSoftmaxOp::Softmax, t, 1, 1, F, 1};
      const int64_t E = detail::segment_softmax_geometry(prob).chunk_rows;
      const int64_t pat[] = {E, E + 1, E - 1, 0, 1, E - 1, 1, 1, 1, 0, 1, E > 4 ? E - 4 : 0, 2 * E, 0, E, 1, 1,
                             E > 2 ? E - 2 : 0, E};
      Case c;
      c.F = F;
      c.name = "chunk grid E=" + std::to_string(E) + " F=" + std::to_string(F) + (ghosts ? " +ghosts" : "");
      int64_t o = ghosts ? 3 : 0;
      c.off.push_back(o);
      for (int rep = 0; rep < 160; ++rep)
        for (int64_t v : pat) c.off.push_back(o += v);
      c.S = int64_t(c.off.size()) - 1;
      c.L = o + (ghosts ? 5 : 0);
      check_kinds(c, t, ghosts == 1, n % 2 == 1, rng, false, true);
    }
}

// Awkward sizes, segments of one, empty segments, degenerate layouts (float32).
TEST(CudaSegmentSoftmaxLayouts, AwkwardAndDegenerate) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(5);
  for (int64_t n : {1, 2, 31, 33, 59, 97, 1025, 4097})
    for (int64_t F : {1, 8}) {
      Case c;
      c.name = "one segment of " + std::to_string(n);
      c.L = n;
      c.F = F;
      c.S = 1;
      c.off = {0, n};
      check_kinds(c, DType::Float32, false, false, rng, false);
      c.name = std::to_string(n) + " segments of one beside empties";
      c.S = 2 * n;
      c.off.clear();
      for (int64_t s = 0; s <= c.S; ++s) c.off.push_back((s + 1) / 2);
      check_kinds(c, DType::Float32, true, false, rng, false);
    }
  std::vector<Case> cs(4);
  cs[0] = {"L=0, 4 empty segments", 1, 0, 3, 4, {0, 0, 0, 0, 0}};
  cs[1] = {"S=0: every row outside", 1, 5, 2, 0, {3}};
  cs[2] = {"batched empties and ghosts", 2, 6, 1, 3, {0, 0, 6, 6, 1, 1, 1, 5}};
  cs[3] = {"batched, one row all in one segment", 3, 4, 2, 2, {0, 4, 4, 0, 0, 4, 1, 2, 3}};
  for (const Case& c : cs) check_kinds(c, DType::Float32, true, false, rng, false);
}

// Segments of one: softmax 1, log_softmax 0, gradient 0 whatever g (exact).
TEST(CudaSegmentSoftmaxLayouts, SegmentsOfOneExact) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 3000;
  std::vector<double> x(static_cast<size_t>(n)), g(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    x[size_t(i)] = double(i % 17) - 8.5;
    g[size_t(i)] = double(i % 5) - 2.5;
  }
  const Tensor xd = Tensor::copy_to(host_tensor(x, {n}, DType::Float32), kGpu);
  const Tensor gd = Tensor::copy_to(host_tensor(g, {n}, DType::Float32), kGpu);
  std::vector<int64_t> ones(static_cast<size_t>(n), 1);
  Tensor lh = Tensor::empty({n}, DType::Int64);
  std::copy(ones.begin(), ones.end(), lh.ptr<int64_t>());
  const Tensor ld = Tensor::copy_to(lh, kGpu);
  Segments seg;
  seg.lengths = ld.view();
  for (auto v : values(segment_softmax(xd, seg))) EXPECT_EQ(v, 1.0);
  const Tensor lsm = segment_log_softmax(xd, seg);
  for (auto v : values(lsm)) EXPECT_EQ(v, 0.0);
  for (auto v : values(segment_softmax_backward(gd, segment_softmax(xd, seg), seg))) EXPECT_EQ(v, 0.0);
  for (auto v : values(segment_log_softmax_backward(gd, lsm, seg))) EXPECT_EQ(v, 0.0);
  const auto lse = values(segment_logsumexp(xd, seg));
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(lse[size_t(i)], round_to(DType::Float32, x[size_t(i)]));
}

// One segment of 2^26 beside 2^20 segments of one (the online merge across
// thousands of tiles, the long fix-up, the crossing pass), heads 1.
TEST(CudaSegmentSoftmaxLayouts, OneSegmentOf2p26BesideManyOfOne) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(26);
  Case c;
  c.name = "2^26 + 2^20 x 1";
  c.S = (int64_t(1) << 20) + 1;
  c.off.push_back(0);
  for (int64_t s = 0; s < c.S; ++s) c.off.push_back(c.off.back() + (s == (int64_t(1) << 19) ? (int64_t(1) << 26) : 1));
  c.L = c.off.back();
  for (SsKind k : {SsKind::SoftmaxFwd, SsKind::LseFwd, SsKind::SoftmaxBwd, SsKind::LogSoftmaxBwd})
    check(c, k, DType::Float32, false, false, rng, false);
  check(c, SsKind::LogSoftmaxFwd, DType::BFloat16, true, false, rng, false);
}

// The benchmark's geometry hooks (detail::SegmentSoftmaxTestCaps, session 42: the tile
// geometry sweeps of bench/cuda_segment_softmax_bench.cu): the launch takes the capped block
// (trace) and every kind stays right at smaller and larger blocks and tiles, including a
// tile part of 94 KiB (dynamic shared memory opted in past the 55 KiB of the rule).
struct SsCaps {  // resets even when an assertion returns early
  SsCaps(int block, int budget_kib) {
    detail::segment_softmax_test_caps().block = block;
    detail::segment_softmax_test_caps().budget_kib = budget_kib;
  }
  ~SsCaps() {
    detail::segment_softmax_test_caps().block = 0;
    detail::segment_softmax_test_caps().budget_kib = 0;
  }
};
TEST(CudaSegmentSoftmaxLayouts, BenchmarkGeometryCaps) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(42);
  const int caps[][2] = {{128, 0}, {64, 0}, {0, 94}, {0, 19}};
  int n = 0;
  for (const auto& cap : caps)
    for (int64_t F : {1, 8}) {
      SCOPED_TRACE(::testing::Message() << "block " << cap[0] << " budget " << cap[1] << " KiB, heads " << F);
      const SsCaps set(cap[0], cap[1]);
      const bool offsets = n % 2 == 1;
      const Case c = make_case(rng, 1, 400, F, n % 3 == 0 ? "long" : "mixed", offsets, 20000);
      if (cap[0] > 0) {
        const ForcePaths tiles(false, true);  // the caps are the tile path's
        const Shapes sh = shapes_of(c, offsets);
        const Meta m = metadata(c, offsets);
        const Inputs in = make_inputs(SsKind::SoftmaxFwd, c, rng, false, [](double v) { return v; });
        TraceSession trace;
        run_api(SsKind::SoftmaxFwd, sh, m.seg_dev, in, DType::Float32, kGpu);
        const auto recs = trace.records();
        // Records: prepare, the tile kernel, the fix-up, the crossing pass; only the tile kernel's block is capped.
        bool capped = false;
        for (const auto& r : recs) capped |= r.block[0] == cap[0];
        EXPECT_TRUE(capped) << "no launch took the capped block";
      }
      for (DType t : {DType::Float32, DType::BFloat16}) check_kinds(c, t, offsets, false, rng, n % 2 == 0);
      ++n;
    }
}

// ---- the lane-group path (src/cuda/segment_softmax_lanes.cuh) -----------------------------
//
// Every lanes-a-row instantiation (rows of 16 .. 512 bytes), every short class at both of its
// edges (4 << c rows and one more: the next class), the last short length and one more (the
// first cut into pieces), piece edges (piece_rows - 1 .. 2 piece_rows + 1), empty segments,
// ghost rows before, between (batched) and after the segments, dense specials per (segment,
// head); on the lane-group path and the tile path (check_kinds), every kind.
Case lanes_edges_case(std::mt19937_64& rng, int64_t outer, int64_t F, DType t, bool ghosts) {
  const SegmentSoftmaxProblem prob{Backend::CUDA, Direction::Fwd, SegmentSoftmaxOp::Softmax, t, 1, 1, F, 1};
  const detail::SegmentSoftmaxLanes lg = detail::segment_softmax_lanes(prob);
  EXPECT_GT(lg.lpr, 0) << "heads " << F << " " << dtype_name(t);
  std::vector<int64_t> lens = {0, 1, 2, 3};
  for (int64_t e = 4; e <= lg.max_short_rows; e *= 2) lens.insert(lens.end(), {e, e + 1});
  const int64_t P = lg.piece_rows, M = lg.max_short_rows;
  lens.insert(lens.end(), {M - 1, M, M + 1, P - 1, P, P + 1, 2 * P + 1, 0, 1});
  std::shuffle(lens.begin(), lens.end(), rng);
  Case c;
  c.F = F;
  c.outer = outer;
  c.S = int64_t(lens.size());
  c.name = "lane-group edges, heads " + std::to_string(F) + (ghosts ? " + ghosts" : "");
  int64_t total = 0;
  for (int64_t v : lens) total += v;
  c.L = total + (ghosts ? 7 : 0);
  for (int64_t r = 0; r < outer; ++r) {
    int64_t o = ghosts ? 3 + r : 0;  // ghost rows before and after each batch row's segments
    c.off.push_back(o);
    for (size_t i = 0; i < lens.size(); ++i) c.off.push_back(o += lens[(i + size_t(r)) % lens.size()]);
  }
  return c;
}

TEST(CudaSegmentSoftmaxLanes, EveryRowWidthClassAndPieceEdge) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(44);
  const struct {
    DType t;
    int64_t F;
  } rows[] = {{DType::Float32, 4},  {DType::Float32, 8},  {DType::Float32, 16},  {DType::Float32, 32},
              {DType::Float32, 64}, {DType::Float32, 128}, {DType::BFloat16, 8}, {DType::Float16, 16},
              {DType::BFloat16, 64}, {DType::Float16, 256}};
  int n = 0;
  for (const auto& r : rows) {
    const bool ghosts = n % 2 == 1;
    const Case c = lanes_edges_case(rng, 1 + n % 3, r.F, r.t, ghosts);
    check_kinds(c, r.t, ghosts, false, rng, false, true);
    ++n;
  }
}

// Inputs and output 16 bytes off alignment (views one element into a larger buffer): the path
// copies them to aligned scratch (and the output back); the same bits as aligned tensors.
TEST(CudaSegmentSoftmaxLanes, UnalignedViewsSameBits) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(45);
  std::uniform_real_distribution<double> u(-3, 3);
  const int64_t L = 700, F = 8;
  std::vector<double> v(size_t((L + 1) * F));
  for (auto& e : v) e = u(rng);
  // x: elements 1 .. L F of big (4 bytes past a 16-byte boundary) and an aligned copy.
  const Tensor big = Tensor::copy_to(host_tensor(v, {L + 1, F}, DType::Float32), kGpu);
  const TensorView xv(static_cast<float*>(big.data()) + 1, DType::Float32, {L, F}, {F, 1}, kGpu);
  const Tensor x = Tensor::copy_to(host_tensor(std::vector<double>(v.begin() + 1, v.begin() + 1 + L * F), {L, F},
                                               DType::Float32), kGpu);
  Tensor lh = Tensor::empty({5}, DType::Int64);
  const int64_t lens[] = {3, 0, 200, 400, 97};
  std::copy(lens, lens + 5, lh.ptr<int64_t>());
  const Tensor ld = Tensor::copy_to(lh, kGpu);
  Segments seg;
  seg.lengths = ld.view();
  Tensor obig = Tensor::empty({L + 1, F}, DType::Float32, kGpu);
  const TensorView ov(static_cast<float*>(obig.data()) + 1, DType::Float32, {L, F}, {F, 1}, kGpu);
  const ForcePaths lanes(false, false);
  for (SegmentSoftmaxOp op : {SegmentSoftmaxOp::Softmax, SegmentSoftmaxOp::LogSoftmax}) {
    SCOPED_TRACE(to_string(op));
    {
      TraceSession t;
      segment_softmax_out(op, xv, seg, ov);  // unaligned input and output
      ASSERT_FALSE(t.records().empty());
      EXPECT_NE(t.records().back().path.find(".cuda.lanes."), std::string::npos) << t.records().back().path;
    }
    const Tensor y = Tensor::empty({L, F}, DType::Float32, kGpu);
    segment_softmax_out(op, x, seg, y);
    EXPECT_EQ(values(ov), values(y)) << "forward";
    // Backward: grad unaligned (xv), output aligned (y), grad_input unaligned (ov).
    const Tensor gi = Tensor::empty({L, F}, DType::Float32, kGpu);
    segment_softmax_backward_out(op, x, y, y, seg, gi);
    segment_softmax_backward_out(op, xv, y, y, seg, ov);
    EXPECT_EQ(values(ov), values(gi)) << "backward";
  }
}

// ---- metadata on the device: validation and unsafe clamping

// The ValueError's message (or what was thrown instead).
std::string error_of(const std::function<void()>& f) {
  try { f(); } catch (const ValueError& e) { return e.what(); } catch (const std::exception& e) { return std::string("not a ValueError: ") + e.what(); }
  return "no error";
}

// 1-D int64 metadata on the host and on the device, as lengths or offsets.
struct MetaPair {
  Tensor host, dev;
  Segments sh, sd;
  MetaPair(const std::vector<int64_t>& v, bool lengths, bool unsafe = false) {
    host = Tensor::empty({int64_t(v.size())}, DType::Int64);
    std::copy(v.begin(), v.end(), host.ptr<int64_t>());
    dev = Tensor::copy_to(host, kGpu);
    (lengths ? sh.lengths : sh.offsets) = host.view();
    (lengths ? sd.lengths : sd.offsets) = dev.view();
    sh.unsafe = sd.unsafe = unsafe;
  }
};

TEST(CudaSegmentSoftmaxValidation, DeviceMetadataSameErrorsAsCpu) {
  SKIP_WITHOUT_GPU();
  const Tensor xh = host_tensor(std::vector<double>(10, 1.5), {10}, DType::Float32);
  const Tensor xd = Tensor::copy_to(xh, kGpu);
  struct Bad {
    std::vector<int64_t> v;
    bool lengths;
    const char* word;
  };
  const Bad bad[] = {{{3, -1, 8}, true, "lengths"},    {{3, 4, 4}, true, "lengths"},
                     {{0, 7, 3, 10}, false, "offsets"}, {{0, 3, 11}, false, "offsets"}};
  for (const auto& b : bad) {
    const MetaPair m(b.v, b.lengths);
    const std::string cpu = error_of([&] { segment_softmax(xh, m.sh); });
    const std::string gpu = error_of([&] { segment_softmax(xd, m.sd); });
    EXPECT_NE(gpu.find(b.word), std::string::npos) << gpu;
    EXPECT_EQ(gpu, cpu);
    EXPECT_NE(error_of([&] { segment_logsumexp(xd, m.sd); }).find(b.word), std::string::npos);
  }
  const MetaPair m({10}, true);  // metadata on the CPU, data on CUDA
  EXPECT_NE(error_of([&] { segment_softmax(xd, m.sh); }).find("lengths"), std::string::npos);
}

// unsafe: no validation; segments clamped into [0, L] exactly as the CPU clamps them.
TEST(CudaSegmentSoftmaxValidation, UnsafeMetadataClampedLikeTheCpu) {
  SKIP_WITHOUT_GPU();
  struct C {
    std::vector<int64_t> meta;
    bool lengths;
  };
  const C cases[] = {{{3, 4, 50}, true},  {{3, -4, 5, 2}, true}, {{-100, 200, -7, 3}, true},
                     {{0, 7, 3, 10}, false}, {{2, 5, 30}, false}, {{-5, 3, 8}, false}, {{50, 60}, false}};
  std::mt19937_64 rng(3);
  for (const auto& c : cases) {
    std::vector<double> x(10 * 4);
    std::uniform_real_distribution<double> u(-3, 3);
    for (auto& v : x) v = u(rng);
    const Tensor xh = host_tensor(x, {10, 4}, DType::Float32), xd = Tensor::copy_to(xh, kGpu);
    const MetaPair m(c.meta, c.lengths, true);
    const Segments &sh = m.sh, &sd = m.sd;
    for (SegmentSoftmaxOp op : {SegmentSoftmaxOp::Softmax, SegmentSoftmaxOp::LogSoftmax, SegmentSoftmaxOp::LogSumExp}) {
      const Tensor yc = op == SegmentSoftmaxOp::LogSumExp ? segment_logsumexp(xh, sh) : op == SegmentSoftmaxOp::Softmax ? segment_softmax(xh, sh) : segment_log_softmax(xh, sh);
      const Tensor yg = op == SegmentSoftmaxOp::LogSumExp ? segment_logsumexp(xd, sd) : op == SegmentSoftmaxOp::Softmax ? segment_softmax(xd, sd) : segment_log_softmax(xd, sd);
      const auto a = values(yc), b = values(yg);
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i)
        EXPECT_TRUE((std::isnan(a[i]) && std::isnan(b[i])) || a[i] == b[i] || std::fabs(a[i] - b[i]) <= 1e-5 * (1 + std::fabs(a[i])))
            << to_string(op) << " element " << i << ": cpu " << a[i] << ", cuda " << b[i];
    }
  }
}

TEST(CudaSegmentSoftmaxApi, StridedInputsEqualContiguous) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<double> u(-3, 3);
  std::vector<double> v(6 * 40);
  for (auto& e : v) e = u(rng);
  const Tensor base = Tensor::copy_to(host_tensor(v, {6, 40}, DType::Float32), kGpu);
  const TensorView tv(base.data(), DType::Float32, {40, 6}, {1, 40}, kGpu);  // the transpose, strided
  std::vector<double> tr(v.size());
  for (int64_t i = 0; i < 40; ++i)
    for (int64_t j = 0; j < 6; ++j) tr[size_t(i * 6 + j)] = v[size_t(j * 40 + i)];
  const Tensor contig = Tensor::copy_to(host_tensor(tr, {40, 6}, DType::Float32), kGpu);
  Tensor lh = Tensor::empty({4}, DType::Int64);
  const int64_t lens[] = {10, 0, 25, 5};
  std::copy(lens, lens + 4, lh.ptr<int64_t>());
  const Tensor ld = Tensor::copy_to(lh, kGpu);
  Segments seg;
  seg.lengths = ld.view();
  EXPECT_TRUE(same_bits(segment_softmax(tv, seg), segment_softmax(contig, seg)));
  EXPECT_TRUE(same_bits(segment_logsumexp(tv, seg), segment_logsumexp(contig, seg)));
  EXPECT_TRUE(same_bits(segment_log_softmax_backward(tv, tv, seg), segment_log_softmax_backward(contig, contig, seg)));
}

TEST(CudaSegmentSoftmaxApi, EmptyOutputsLaunchNothing) {
  SKIP_WITHOUT_GPU();
  const Tensor x = Tensor::empty({0, 3}, DType::Float32, kGpu);
  Tensor lh = Tensor::empty({2}, DType::Int64);
  lh.ptr<int64_t>()[0] = lh.ptr<int64_t>()[1] = 0;
  const Tensor ld = Tensor::copy_to(lh, kGpu);
  Segments seg;
  seg.lengths = ld.view();
  TraceSession t;
  EXPECT_EQ(segment_softmax(x, seg).numel(), 0);
  EXPECT_TRUE(t.records().empty());
  const Tensor lse = segment_logsumexp(x, seg);  // [2, 3] of -inf: a kernel runs
  for (auto v : values(lse)) EXPECT_EQ(v, -kInf);
}

// ---- boundary execution past UINT32_MAX elements (float16) -------------------
//
// L rows of F heads (L * F = 2^32 + 64 or more), three segments: [0, 2),
// [2, L - 2) (every tile but the first and last is inside it, so the fix-up's
// long phase and the crossing pass cover the whole tensor), [L - 2, L). Arrays
// are built on the device from a fill value and a few patched rows (cli/large.h);
// every expected value is exact in float16 (exp(-65376 - m) is 0 exactly).

constexpr double kBig = -65376.0;  // float16 0xfbfb
double f16(double v) { return round_to(DType::Float16, v); }

struct HugeLayout {
  int64_t L, F;
  Shape data, seg_out;
  Tensor off;
  Segments seg;
  explicit HugeLayout(int64_t F_) : F(F_) {
    L = ((int64_t(1) << 32) + 64) / F + (F == 1 ? 0 : 1);
    data = F == 1 ? Shape{L} : Shape{L, F};
    seg_out = F == 1 ? Shape{3} : Shape{3, F};
    Tensor oh = Tensor::empty({4}, DType::Int64);
    const int64_t o[] = {0, 2, L - 2, L};
    std::copy(o, o + 4, oh.ptr<int64_t>());
    off = Tensor::copy_to(oh, kGpu);
    seg.offsets = off.view();
  }
  // `fill` everywhere but the given rows (every head of a row alike).
  Tensor rows(double fill, const std::vector<std::pair<int64_t, double>>& rv, const Shape& shape) const {
    cli::FilledArray a{fill, {}};
    const int64_t per = shape.size() > 1 ? F : 1;
    for (auto [r, v] : rv)
      for (int64_t f = 0; f < per; ++f) a.patches.push_back({r * per + f, v});
    return cli::make_filled(shape, DType::Float16, a, kGpu);
  }
};

// `call` under a trace: every launch on the i64 path.
void expect_i64_path(const std::string& path, const std::function<void()>& call) {
  TraceSession t;
  call();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto r = t.records();
  ASSERT_FALSE(r.empty());
  for (const auto& rec : r) EXPECT_EQ(rec.path, path);
  reached().insert(path);
}

// Rows (of `nrows` rows of F heads) checked exactly at heads 0 and F - 1.
void expect_rows(const Tensor& out, int64_t nrows, int64_t F, const std::vector<std::pair<int64_t, double>>& rows) {
  std::vector<int64_t> at;
  std::vector<double> want;
  for (auto [r, v] : rows)
    for (int64_t f : {int64_t(0), F - 1}) {
      at.push_back(r * F + f);
      want.push_back(v);
      if (F == 1) break;
    }
  const std::vector<double> got = cli::read_elements(out, at);
  for (size_t k = 0; k < got.size(); ++k)
    EXPECT_EQ(got[k], want[k]) << "element " << at[k] << " (row " << at[k] / F << " of " << nrows << ")";
}

// tiles: the tile path's i64 kernels for softmax / log_softmax too (the test hook; F = 8
// float16 is a 16-byte row: the lane-group path otherwise). logsumexp: the tile path always.
void huge_forward_and_backward(int64_t F, bool tiles) {
  const ForcePaths force(false, tiles);
  const HugeLayout hl(F);
  const int64_t n = hl.L * F, L = hl.L;
  ASSERT_GT(n, int64_t(UINT32_MAX));
  const std::string short_of = cli::memory_shortfall(kGpu, 3 * n * 2);
  if (!short_of.empty()) GTEST_SKIP() << short_of;
  std::printf("[ boundary ] %lld rows x %lld heads float16 (%s per tensor)\n", (long long)L, (long long)F,
              cli::gib(n * 2).c_str());
  const double ln2 = std::log(2.0);
  const bool lanes = !tiles && F * 2 % 16 == 0;
  auto kernels = [&](SegmentSoftmaxOp op) { return lanes && op != SegmentSoftmaxOp::LogSumExp ? ".cuda.lanes.i64" : ".cuda.tiles.i64"; };
  auto fwd = [&](SegmentSoftmaxOp op, const Tensor& x, const TensorView& out) {
    expect_i64_path(std::string(to_string(op)) + ".fwd" + kernels(op), [&] { segment_softmax_out(op, x, hl.seg, out); });
  };
  auto bwd = [&](SegmentSoftmaxOp op, const Tensor& g, const Tensor& y, const Tensor& x, const TensorView& gi) {
    expect_i64_path(std::string(to_string(op)) + ".bwd" + kernels(op),
                    [&] { segment_softmax_backward_out(op, g, y, x, hl.seg, gi); });
  };
  {
    // x: -65376 but segment 0 (0, -65376); segment 1: 0 at its first and last rows; segment 2 (-65376, 2).
    const Tensor x = hl.rows(kBig, {{0, 0.0}, {2, 0.0}, {L - 3, 0.0}, {L - 1, 2.0}}, hl.data);
    const Tensor y = Tensor::empty(hl.data, DType::Float16, kGpu);
    fwd(SegmentSoftmaxOp::Softmax, x, y);
    expect_rows(y, L, F, {{0, 1.0}, {1, 0.0}, {2, 0.5}, {3, 0.0}, {L / 2, 0.0}, {L - 4, 0.0}, {L - 3, 0.5}, {L - 2, 0.0}, {L - 1, 1.0}});
    fwd(SegmentSoftmaxOp::LogSoftmax, x, y);
    const double mid = f16(-ln2), low = f16(kBig - ln2);
    expect_rows(y, L, F, {{0, 0.0}, {1, kBig}, {2, mid}, {3, low}, {L - 4, low}, {L - 3, mid}, {L - 2, f16(kBig - 2.0)}, {L - 1, 0.0}});
    // logsumexp (0, log 2, 2); backward with y = (0, 0, 2), g = (-2.5, 1.5, 3): g exp(x - y).
    const Tensor lse = Tensor::empty(hl.seg_out, DType::Float16, kGpu);
    fwd(SegmentSoftmaxOp::LogSumExp, x, lse);
    expect_rows(lse, 3, F, {{0, 0.0}, {1, f16(ln2)}, {2, 2.0}});
    const Tensor ys = hl.rows(0.0, {{2, 2.0}}, hl.seg_out), gs = hl.rows(1.5, {{0, -2.5}, {2, 3.0}}, hl.seg_out);
    bwd(SegmentSoftmaxOp::LogSumExp, gs, ys, x, y);
    expect_rows(y, L, F, {{0, -2.5}, {1, 0.0}, {2, 1.5}, {3, 0.0}, {L - 4, 0.0}, {L - 3, 1.5}, {L - 2, 0.0}, {L - 1, 3.0}});
  }
  {
    // softmax backward: g = y = 0 inside; segment 0: y (0.5, 0.5), g (2, -3) -> (1.25, -1.25);
    // segment 1: y 0.25 / 0.75, g 4 / -2 at its first / last row -> 1.125 / -1.125; segment 2 likewise.
    const Tensor g = hl.rows(0.0, {{0, 2.0}, {1, -3.0}, {2, 4.0}, {L - 3, -2.0}, {L - 2, 4.0}, {L - 1, -2.0}}, hl.data);
    const Tensor y = hl.rows(0.0, {{0, 0.5}, {1, 0.5}, {2, 0.25}, {L - 3, 0.75}, {L - 2, 0.25}, {L - 1, 0.75}}, hl.data);
    const Tensor gi = Tensor::empty(hl.data, DType::Float16, kGpu);
    bwd(SegmentSoftmaxOp::Softmax, g, y, y, gi);
    expect_rows(gi, L, F, {{0, 1.25}, {1, -1.25}, {2, 1.125}, {3, 0.0}, {L / 2, 0.0}, {L - 4, 0.0}, {L - 3, -1.125}, {L - 2, 1.125}, {L - 1, -1.125}});
  }
  {
    // log_softmax backward: g = 0, y = -65376 inside; segment 0: y (0, -65376), g (2, -3) -> (3, -3);
    // segment 1: y 0 at its first row, g 2 / -3 at first / last -> 3 / -3; segment 2: y (-65376, 0), g (-5, 0.5) -> (-5, 5).
    const Tensor g = hl.rows(0.0, {{0, 2.0}, {1, -3.0}, {2, 2.0}, {L - 3, -3.0}, {L - 2, -5.0}, {L - 1, 0.5}}, hl.data);
    const Tensor y = hl.rows(kBig, {{0, 0.0}, {2, 0.0}, {L - 1, 0.0}}, hl.data);
    const Tensor gi = Tensor::empty(hl.data, DType::Float16, kGpu);
    bwd(SegmentSoftmaxOp::LogSoftmax, g, y, y, gi);
    expect_rows(gi, L, F, {{0, 3.0}, {1, -3.0}, {2, 3.0}, {3, 0.0}, {L / 2, 0.0}, {L - 4, 0.0}, {L - 3, -3.0}, {L - 2, -5.0}, {L - 1, 5.0}});
  }
}

TEST(CudaSegmentSoftmaxHuge, Heads1_2p32p64Rows_Fp16_EveryKind) {
  SKIP_WITHOUT_GPU();
  huge_forward_and_backward(1, false);
}

TEST(CudaSegmentSoftmaxHuge, Heads8_2p32p64Elements_Fp16_EveryKind) {
  SKIP_WITHOUT_GPU();
  huge_forward_and_backward(8, true);
}

// The same past UINT32_MAX elements on the lane-group path (16-byte rows: the middle segment of
// ~5.4e8 rows is ~262k pieces merged by one warp a slot; the two short ones held in registers).
TEST(CudaSegmentSoftmaxHuge, Heads8_2p32p64Elements_Fp16_LaneGroups) {
  SKIP_WITHOUT_GPU();
  huge_forward_and_backward(8, false);
}

// Every CUDA path of the family reached by this file (the file's last test, so it runs last).
TEST(CudaSegmentSoftmaxTrace, ZzEveryCudaPathReached) {
  SKIP_WITHOUT_GPU();
  if (reached().empty()) GTEST_SKIP() << "the path tests did not run in this invocation";
  for (const PathInfo& info : paths())
    if (info.backend == Backend::CUDA && (std::string(info.name).find(".cuda.tiles.") != std::string::npos ||
                                          std::string(info.name).find(".cuda.lanes.") != std::string::npos))
      EXPECT_TRUE(reached().count(std::string(info.name))) << info.name << " was never reached";
}

}  // namespace
}  // namespace segred::testing::ss
#endif  // SEGRED_WITH_CUDA
