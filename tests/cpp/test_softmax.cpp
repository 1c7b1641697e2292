// CPU softmax family: softmax, log_softmax and their backward (SEMANTICS.md,
// "softmax family"), against the float64 reference in src/reference/softmax_ref.h
// and against exact values, for all four dtypes and both CPU paths. Every test
// that is named for a path asserts through the trace that it reached that path.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdlib>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "segred/segred.h"
#include "src/cpu/half_convert.h"
#include "src/cpu/softmax_kernels.h"
#include "src/ops/softmax_ops.h"
#include "src/reference/softmax_ref.h"

namespace {

using namespace segred;
constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- dtype helpers -------------------------------------------------------------

template <class T> T from_double(double v) { return store<T>(acc_t<T>(v)); }
template <class T> double to_double(T v) { return double(load(v)); }

template <class T> std::vector<T> to_t(const std::vector<double>& v) {
  std::vector<T> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = from_double<T>(v[i]);
  return o;
}
// The values a T array really holds (the reference sees the rounded inputs).
template <class T> std::vector<double> as_double(const T* p, size_t n) {
  std::vector<double> o(n);
  for (size_t i = 0; i < n; ++i) o[i] = to_double(p[i]);
  return o;
}
template <class T> std::vector<double> as_double(const Tensor& t) {
  return as_double(t.ptr<T>(), size_t(t.numel()));
}

// Tolerance |got - want| <= rel * |want| + abs: rel is the rounding of the final
// store in T (half an ulp, doubled for slack) plus the float32/float64 compute
// error; abs covers cancellation in x - m - log(s) and g - sum, and the
// subnormal floor of the 16-bit types.
template <class T> struct Tol;
template <> struct Tol<double> { static constexpr double rel = 1e-12, abs = 1e-12; };
template <> struct Tol<float> { static constexpr double rel = 2e-6, abs = 2e-6; };
template <> struct Tol<half_t> { static constexpr double rel = 1.0 / 1024, abs = 4e-6; };
template <> struct Tol<bfloat16_t> { static constexpr double rel = 1.0 / 128, abs = 4e-6; };

// NaN must meet NaN, infinities must be equal, finite values within tolerance.
// cond (optional): a per-element magnitude the error scales with besides |want|
// (a backward's column sum), added at Tol::rel * scale.
template <class T>
::testing::AssertionResult all_close(const std::vector<double>& got, const std::vector<double>& want,
                                     double scale = 1.0, const std::vector<double>* cond = nullptr) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    bool ok;
    if (std::isnan(w) || std::isnan(g)) ok = std::isnan(w) && std::isnan(g);
    else if (std::isinf(w) || std::isinf(g)) ok = g == w;
    else {
      const double c = cond && std::isfinite((*cond)[i]) ? (*cond)[i] : 0.0;
      ok = std::fabs(g - w) <= Tol<T>::rel * (std::fabs(w) + scale * c) + Tol<T>::abs * scale;
    }
    if (!ok)
      return ::testing::AssertionFailure() << "element " << i << ": got " << g << ", expected " << w << " ("
                                           << dtype_name(dtype_of<T>()) << ")";
  }
  return ::testing::AssertionSuccess();
}

// ---- shapes ----------------------------------------------------------------------

struct Problem {
  Shape shape;
  int64_t dim;
  reference::SoftmaxShape ref;  // [outer, D, inner] of the wrapped dim
};

Problem decompose(const Shape& shape, int64_t dim) {
  const int64_t nd = std::max<int64_t>(1, int64_t(shape.size()));
  const int64_t d = dim < 0 ? dim + nd : dim;
  reference::SoftmaxShape r;
  if (!shape.empty()) {
    r.outer = r.inner = 1;
    for (int64_t i = 0; i < d; ++i) r.outer *= shape[size_t(i)];
    r.D = shape[size_t(d)];
    for (int64_t i = d + 1; i < int64_t(shape.size()); ++i) r.inner *= shape[size_t(i)];
  }
  return {shape, dim, r};
}

// The path a call must reach: lastdim when inner == 1, else spatial, except the
// forward over a D past spatial's L2 rule (plan_softmax): spatial_stream.
std::string path_of(bool log, Direction dir, const reference::SoftmaxShape& s, DType dt) {
  const int64_t l2_rows = dt == DType::Float64 ? 512 : dt == DType::Float32 ? 1024 : 1365;
  const char* kind = s.inner == 1                                              ? "lastdim"
                     : dir == Direction::Fwd && s.D > 512 && s.D > l2_rows ? "spatial_stream"
                                                                           : "spatial";
  return std::string(log ? "log_softmax." : "softmax.") + (dir == Direction::Fwd ? "fwd" : "bwd") + ".cpu." + kind +
         ".i64";
}

// Random generator with the seed in every failure message.
struct Rng {
  uint64_t seed;
  std::mt19937_64 gen;
  // SEGRED_SEED from the environment reproduces a run (as segment_reduce_test_util.h).
  Rng() : seed(std::getenv("SEGRED_SEED") ? std::strtoull(std::getenv("SEGRED_SEED"), nullptr, 10)
                                          : std::random_device{}() | (uint64_t(std::random_device{}()) << 32)),
          gen(seed) {}
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(gen); }
  int64_t pick(const std::vector<int64_t>& v) { return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(gen)]; }
  // Upstream gradients of every sign: negative, zero, positive, not 1.
  std::vector<double> grads(size_t n) {
    std::vector<double> g(n);
    for (size_t i = 0; i < n; ++i) g[i] = i % 7 == 3 ? 0.0 : uniform(-2.5, 2.5);
    return g;
  }
  std::vector<double> values(size_t n, double spread = 4.0) {
    std::vector<double> x(n);
    for (auto& v : x) v = uniform(-spread, spread);
    return x;
  }
};

#define SEED_TRACE(rng) SCOPED_TRACE(::testing::Message() << "seed " << (rng).seed)

// Runs forward and backward of softmax and log_softmax on x (T values) over dim
// and compares with the reference; asserts the path of every call.
template <class T>
void check_against_reference(const Problem& pr, const std::vector<double>& x_in, const std::vector<double>& g_in) {
  const DType dt = dtype_of<T>();
  std::vector<T> xt = to_t<T>(x_in), gt = to_t<T>(g_in);
  const std::vector<double> x = as_double(xt.data(), xt.size()), g = as_double(gt.data(), gt.size());
  const TensorView xv(xt.data(), dt, pr.shape), gv(gt.data(), dt, pr.shape);
  for (bool log : {false, true}) {
    SCOPED_TRACE(::testing::Message() << (log ? "log_softmax" : "softmax") << " shape " << shape_string(pr.shape)
                                      << " dim " << pr.dim);
    TraceSession trace;
    const Tensor y = log ? log_softmax(xv, pr.dim) : softmax(xv, pr.dim);
    EXPECT_EQ(y.sizes(), pr.shape);
    EXPECT_EQ(y.dtype(), dt);
    EXPECT_TRUE(all_close<T>(as_double<T>(y), reference::softmax_forward(pr.ref, x, log), log ? 8.0 : 1.0));
    // Backward on the kernel's own output (rounded to T), against the analytic formula.
    const std::vector<double> yv = as_double<T>(y);
    const Tensor gi = log ? log_softmax_backward(gv, y, pr.dim) : softmax_backward(gv, y, pr.dim);
    // The backward's rounding grows with its column sum, not with |gi| (g - e^y sum(g) cancels): each
    // element's bound adds the column's conditioning, e^y sum|g| (log) or |y| sum|g y| (softmax), at
    // the relative tolerance (session 8: a fresh seed failed [1, 4100, 260] fp32 log_softmax backward
    // by 7.2e-5 against a bound of 6.5e-5 that ignored it).
    std::vector<double> cond(g.size(), 0.0);
    for (int64_t o = 0; o < pr.ref.outer; ++o)
      for (int64_t i = 0; i < pr.ref.inner; ++i) {
        double sum = 0;
        for (int64_t d = 0; d < pr.ref.D; ++d) {
          const size_t k = pr.ref.at(o, d, i);
          sum += std::fabs(g[k]) * (log ? 1.0 : std::fabs(yv[k]));
        }
        for (int64_t d = 0; d < pr.ref.D; ++d) {
          const size_t k = pr.ref.at(o, d, i);
          cond[k] = log ? std::exp(yv[k]) * sum : std::fabs(yv[k]) * sum;
        }
      }
    EXPECT_TRUE(all_close<T>(as_double<T>(gi), reference::softmax_backward(pr.ref, g, yv, log), 8.0, &cond));
    const auto rec = trace.records();
    if (pr.ref.size() == 0) {
      EXPECT_TRUE(rec.empty());
      continue;
    }
    ASSERT_EQ(rec.size(), 2u);
    EXPECT_EQ(rec[0].path, path_of(log, Direction::Fwd, pr.ref, dt));
    EXPECT_EQ(rec[1].path, path_of(log, Direction::Bwd, pr.ref, dt));
    EXPECT_EQ(rec[0].op, log ? "log_softmax" : "softmax");
  }
}

// Special values on both paths: every row kind of SEMANTICS.md side by side in one
// tensor, rows along the last dim (lastdim) and the same rows as columns (spatial).
template <class T> void special_value_rows_both_paths(Rng& rng) {
  const std::vector<std::vector<double>> rows = {
      {-kInf, -kInf, -kInf, -kInf},  // all -inf -> NaN
      {1.0, kNaN, 2.0, -kInf},       // a NaN -> NaN
      {1.0, kInf, 2.0, 3.0},         // a +inf -> NaN
      {kInf, kInf, -kInf, 0.0},      // +inf twice -> NaN
      {kNaN, -kInf, -kInf, -kInf},   // NaN among -inf -> NaN
      {-kInf, 1.0, -kInf, 1.0},      // -inf elements -> exactly 0, the rest 0.5
      {-kInf, -kInf, -kInf, 2.0},    // one finite value -> one-hot
      {800.0, -800.0, 400.0, 0.0},   // large spread: exp underflows to 0 (float64 too)
      {-3.0, -3.0, -3.0, -3.0},      // all equal
      {2.0, 1.0, kNaN, -1.0},        // a NaN below the max -> NaN
  };
  const int64_t R = int64_t(rows.size()), D = 4;
  std::vector<double> last, spat(size_t(R * D));
  for (const auto& r : rows) last.insert(last.end(), r.begin(), r.end());
  for (int64_t r = 0; r < R; ++r)
    for (int64_t d = 0; d < D; ++d) spat[size_t(d * R + r)] = rows[size_t(r)][size_t(d)];
  const auto g = rng.grads(size_t(R * D));
  check_against_reference<T>(decompose({R, D}, 1), last, g);
  check_against_reference<T>(decompose({D, R}, 0), spat, g);
  // Spot checks that do not rely on the reference.
  const DType dt = dtype_of<T>();
  auto xt = to_t<T>(last);
  const Tensor y = softmax(TensorView(xt.data(), dt, {R, D}), 1);
  for (int64_t r : {0, 1, 2, 3, 4, 9})
    for (int64_t d = 0; d < D; ++d) EXPECT_TRUE(std::isnan(to_double(y.ptr<T>()[r * D + d]))) << "row " << r;
  EXPECT_EQ(to_double(y.ptr<T>()[5 * D + 0]), 0.0);
  EXPECT_EQ(to_double(y.ptr<T>()[5 * D + 1]), 0.5);
  EXPECT_EQ(to_double(y.ptr<T>()[6 * D + 3]), 1.0);
  EXPECT_EQ(to_double(y.ptr<T>()[7 * D + 1]), 0.0);
}

template <class T> class SoftmaxDtype : public ::testing::Test {};
using Dtypes = ::testing::Types<float, double, half_t, bfloat16_t>;
struct DtypeName {
  template <class T> static std::string GetName(int) { return std::string(dtype_name(dtype_of<T>())); }
};
TYPED_TEST_SUITE(SoftmaxDtype, Dtypes, DtypeName);

// Random shapes of 1 to 4 dims from awkward sizes, every dim, negative dims too:
// reaches both paths of both ops in both directions.
TYPED_TEST(SoftmaxDtype, RandomShapesEveryDimAgainstReference) {
  Rng rng;
  SEED_TRACE(rng);
  const std::vector<int64_t> sizes = {1, 2, 3, 5, 7, 31, 33, 59, 97};
  for (int rep = 0; rep < 12; ++rep) {
    const int nd = 1 + rep % 4;
    Shape shape;
    for (int i = 0; i < nd; ++i) shape.push_back(rng.pick(sizes));
    while (numel(shape) > 40000) shape[size_t(std::uniform_int_distribution<int>(0, nd - 1)(rng.gen))] = 2;
    const size_t n = size_t(numel(shape));
    const auto x = rng.values(n, rep % 3 == 2 ? 30.0 : 4.0);
    const auto g = rng.grads(n);
    for (int64_t dim = -nd; dim < nd; ++dim) check_against_reference<TypeParam>(decompose(shape, dim), x, g);
  }
}

// The kernels are built per instruction set (baseline, AVX2, AVX-512) and the
// suite otherwise runs only the best one this CPU has: the same checks on every
// build this CPU can run (capped through softmax_isa_cap), each with normal and
// with streaming (non-temporal) output stores forced, on both paths: rows across
// blocks and vector tails, spatial tiles narrower than inner, short and long D,
// and every special-value row kind.
// OpenMP's team size for a test's calls, the previous one back at scope exit
// (or at restore()).
// The L2 size the API layer plans with (cpu::softmax_l2_override), restored on exit.
struct L2Scope {
  const int64_t saved = cpu::softmax_l2_override().load();
  explicit L2Scope(int64_t bytes) { cpu::softmax_l2_override() = bytes; }
  ~L2Scope() { cpu::softmax_l2_override() = saved; }
};

struct OmpThreadsScope {
  int saved = omp_get_max_threads();
  OmpThreadsScope() = default;
  explicit OmpThreadsScope(int n) { omp_set_num_threads(n); }
  void restore() const { omp_set_num_threads(saved); }
  ~OmpThreadsScope() { restore(); }
};

struct IsaAndStreamScope {
  ~IsaAndStreamScope() {
    cpu::softmax_isa_cap() = int(cpu::SoftmaxIsa::Avx512);
    cpu::softmax_stream_mode() = 0;
  }
};
std::vector<cpu::SoftmaxIsa> runnable_isas() {
  std::vector<cpu::SoftmaxIsa> v;
  for (int i = 0; i <= int(cpu::softmax_best_isa()); ++i) v.push_back(cpu::SoftmaxIsa(i));
  return v;
}

TYPED_TEST(SoftmaxDtype, EveryIsaBuildAndStoreModeAgainstReference) {
  IsaAndStreamScope restore;
  Rng rng;
  SEED_TRACE(rng);
  const std::vector<std::pair<Shape, int64_t>> shapes = {
      {{7, 3000}, 1}, {{2, 3 * 8192 + 7}, 1}, {{9, 4}, -1}, {{5, 97, 33}, 1}, {{3, 40, 300}, 1}, {{1200, 70}, 0}, {{2, 600, 150}, 1}};
  std::vector<std::vector<double>> xs, gs;
  for (const auto& [shape, dim] : shapes) {
    const size_t n = size_t(numel(shape));
    auto x = rng.values(n, 6.0);
    x[3] = -kInf;
    xs.push_back(x);
    gs.push_back(rng.grads(n));
  }
  for (cpu::SoftmaxIsa isa : runnable_isas())
    for (int mode : {1, 2}) {
      SCOPED_TRACE(::testing::Message() << "isa " << cpu::softmax_isa_name(isa) << (mode == 2 ? ", streaming stores" : ""));
      cpu::softmax_isa_cap() = int(isa);
      cpu::softmax_stream_mode() = mode;
      ASSERT_EQ(cpu::softmax_isa(), isa);
      for (size_t k = 0; k < shapes.size(); ++k)
        check_against_reference<TypeParam>(decompose(shapes[k].first, shapes[k].second), xs[k], gs[k]);
      special_value_rows_both_paths<TypeParam>(rng);
    }
}

// Streaming stores start at an aligned address: outputs that are not aligned to
// a vector (every offset of a few elements) are written whole and right.
TYPED_TEST(SoftmaxDtype, StreamingStoresAtEveryAlignment) {
  using T = TypeParam;
  IsaAndStreamScope restore;
  cpu::softmax_stream_mode() = 2;
  Rng rng;
  SEED_TRACE(rng);
  const DType dt = dtype_of<T>();
  for (const auto& [shape, dim] : std::vector<std::pair<Shape, int64_t>>{{{3, 1000}, 1}, {{3, 40, 77}, 1}}) {
    const Problem pr = decompose(shape, dim);
    const size_t n = pr.ref.size();
    std::vector<T> xt = to_t<T>(rng.values(n)), gt = to_t<T>(rng.grads(n));
    const auto x = as_double(xt.data(), n), g = as_double(gt.data(), n);
    for (size_t off = 0; off < 17; ++off) {
      SCOPED_TRACE(::testing::Message() << shape_string(shape) << " output offset " << off);
      std::vector<T> y(n + off, from_double<T>(kNaN)), gi(n + off, from_double<T>(kNaN));
      const TensorView yv(y.data() + off, dt, shape), giv(gi.data() + off, dt, shape);
      softmax_out(TensorView(xt.data(), dt, shape), dim, yv);
      const auto yd = as_double(y.data() + off, n);
      EXPECT_TRUE(all_close<T>(yd, reference::softmax_forward(pr.ref, x, false)));
      softmax_backward_out(TensorView(gt.data(), dt, shape), yv, dim, giv);
      EXPECT_TRUE(all_close<T>(as_double(gi.data() + off, n), reference::softmax_backward(pr.ref, g, yd, false), 8.0));
    }
  }
}

// The short-row kernel runs rows of up to 8 vectors (4 on AVX2 / SSE2) two at a
// time (session 38, short_rows R = 2) with each row's operations and order those
// of a row alone: a row's bits must not depend on whether it was paired, so 7
// rows at once (three pairs and a single) equal the same rows one call each, bit
// for bit but for the sign of a NaN, random and special-value rows, every ISA
// build and store mode.
TYPED_TEST(SoftmaxDtype, ShortRowsPairedBitwiseAsAlone) {
  using T = TypeParam;
  IsaAndStreamScope restore;
  Rng rng;
  SEED_TRACE(rng);
  const DType dt = dtype_of<T>();
  constexpr int64_t kRows = 7;
  for (cpu::SoftmaxIsa isa : runnable_isas())
    for (int mode : {1, 2}) {
      cpu::softmax_isa_cap() = int(isa);
      cpu::softmax_stream_mode() = mode;
      for (int64_t D : {1, 5, 16, 33, 64, 100, 128}) {
        SCOPED_TRACE(::testing::Message() << "isa " << cpu::softmax_isa_name(isa) << " mode " << mode << " D " << D);
        std::vector<double> xd = rng.values(size_t(kRows * D), 6.0);
        xd[size_t(2 * D)] = kNaN;                                           // row 2: NaN
        for (int64_t i = 0; i < D; ++i) xd[size_t(4 * D + i)] = -kInf;     // row 4: all -inf
        xd[size_t(5 * D + D - 1)] = kInf;                                   // row 5: +inf last
        std::vector<T> xt = to_t<T>(xd);
        for (bool log : {false, true}) {
          std::vector<T> all(size_t(kRows * D)), one(size_t(kRows * D));
          const Shape sh{kRows, D};
          log ? log_softmax_out(TensorView(xt.data(), dt, sh), 1, TensorView(all.data(), dt, sh))
              : softmax_out(TensorView(xt.data(), dt, sh), 1, TensorView(all.data(), dt, sh));
          for (int64_t r = 0; r < kRows; ++r) {
            const Shape s1{1, D};
            const TensorView xv(xt.data() + r * D, dt, s1), yv(one.data() + r * D, dt, s1);
            log ? log_softmax_out(xv, 1, yv) : softmax_out(xv, 1, yv);
          }
          // Bit for bit, except which NaN (x86 returns an operand's NaN, and the
          // compiler may order a commutative NaN-propagating operation either way:
          // SEMANTICS.md fixes no NaN bits).
          const auto a = as_double(all.data(), all.size()), b = as_double(one.data(), one.size());
          for (size_t i = 0; i < all.size(); ++i) {
            if (std::isnan(a[i]) && std::isnan(b[i])) continue;
            ASSERT_EQ(std::memcmp(&all[i], &one[i], sizeof(T)), 0)
                << (log ? "log_softmax" : "softmax") << " element " << i << ": " << a[i] << " paired, " << b[i] << " alone";
          }
        }
      }
    }
}

// A forward pipeline knob (0: passes in turn, 1: overlapped) must change no
// output bit: x of shape sh over dim 1 with the knob at 0 and at 1, on every ISA
// build, store mode, 1-3 threads, softmax and log_softmax, the path asserted
// through the trace (`path`: the path's name after the op), the same bits but for
// the sign of a NaN (SEMANTICS.md fixes no NaN bits). The knob is restored on
// exit, also after a failed ASSERT.
template <class T>
void overlap_changes_no_bit(std::atomic<int>& knob, const Shape& sh, const std::vector<T>& xt, const std::string& path) {
  IsaAndStreamScope restore;
  OmpThreadsScope restore_threads;
  struct KnobScope {
    std::atomic<int>& k;
    const int saved = k.load();
    ~KnobScope() { k = saved; }
  } restore_knob{knob};
  const DType dt = dtype_of<T>();
  for (cpu::SoftmaxIsa isa : runnable_isas())
    for (int mode : {1, 2})
      for (int threads : {1, 2, 3})
        for (bool log : {false, true}) {
          SCOPED_TRACE(::testing::Message() << (log ? "log_softmax " : "softmax ") << shape_string(sh) << " isa "
                                            << cpu::softmax_isa_name(isa) << " mode " << mode << " threads " << threads);
          cpu::softmax_isa_cap() = int(isa);
          cpu::softmax_stream_mode() = mode;
          omp_set_num_threads(threads);
          std::vector<T> ys[2];
          for (int ov : {0, 1}) {
            knob = ov;
            ys[ov].assign(xt.size(), T{});
            TraceSession trace;
            const TensorView xv(const_cast<T*>(xt.data()), dt, sh), yv(ys[ov].data(), dt, sh);
            log ? log_softmax_out(xv, 1, yv) : softmax_out(xv, 1, yv);
            const auto rec = trace.records();
            ASSERT_EQ(rec.size(), 1u);
            EXPECT_EQ(rec[0].path, std::string(log ? "log_softmax" : "softmax") + path);
          }
          const auto a = as_double(ys[0].data(), ys[0].size()), b = as_double(ys[1].data(), ys[1].size());
          for (size_t i = 0; i < a.size(); ++i) {
            if (std::isnan(a[i]) && std::isnan(b[i])) continue;
            ASSERT_EQ(std::memcmp(&ys[0][i], &ys[1][i], sizeof(T)), 0)
                << "element " << i << ": " << a[i] << " in turn, " << b[i] << " overlapped";
          }
        }
}

// The last-dim forward of rows of one block writes row r in the loop that reads
// row r + 1 (session 40, cpu::softmax_lastdim_overlap): the same operations in the
// same order per row, so the same bits (but for the sign of a NaN) as the passes
// one after the other. Rows of one block in each kernel (lastdim, the 16-bit
// lastdim16) and of several (which the knob leaves alone); rows whose vectors
// start off a streaming store's alignment (odd D, D = 1000: every other row, so
// the pipeline mixes both forms); rows of several blocks (D = 9000, 8200: block b
// of row r written in the max pass of block b of row r + 1); one row per thread
// and many, 1, 2 and 3 threads;
// rows of NaN, all -inf, +inf, and one whose first vector is far under its max
// (the 16-bit kernel's speculative bases fail: its exps again against the max);
// every ISA build and store mode.
TYPED_TEST(SoftmaxDtype, LastDimOverlapChangesNoBit) {
  using T = TypeParam;
  Rng rng;
  SEED_TRACE(rng);
  for (const auto& [R, D] : std::vector<std::pair<int64_t, int64_t>>{
           {7, 4096}, {5, 1000}, {9, 1027}, {40, 2048}, {33, 1100}, {3, 9000}, {6, 8200}, {2, 1536}}) {
    std::vector<double> xd = rng.values(size_t(R * D), 6.0);
    xd[size_t(D + D / 2)] = kNaN;  // row 1: NaN
    if (R > 2)
      for (int64_t i = 0; i < D; ++i) xd[size_t(2 * D + i)] = -kInf;  // row 2: all -inf
    if (R > 4) {
      xd[size_t(3 * D + D - 1)] = kInf;  // row 3: +inf last
      for (int64_t i = 0; i < 64; ++i) xd[size_t(4 * D + i)] = -200.0;  // row 4: first vector 300 under the max
      xd[size_t(4 * D + D / 3)] = 100.0;
    }
    overlap_changes_no_bit<T>(cpu::softmax_lastdim_overlap(), Shape{R, D}, to_t<T>(xd), ".fwd.cpu.lastdim.i64");
  }
}

// The spatial forward writes tile t of a thread's tiles in the exps pass of tile
// t + 1 (session 40, cpu::softmax_spatial_overlap): the same bits (but for the
// sign of a NaN) as each tile's write pass after its statistics. Tiles of several
// statistics blocks (D = 300) and of one (D = 20, 64); a last tile narrower than
// the others in each outer index (its predecessor then written alone); tiles of
// a whole inner dim that is not a multiple of four vectors (inner = 300, 200: the
// pass's last, partial vectors write the waiting tile's too); rows off a
// streaming store's alignment (inner = 1030: every tile written alone when
// streaming); one task per thread and many, 1-3 threads; columns of NaN, all
// -inf, +inf; every ISA build and store mode.
TYPED_TEST(SoftmaxDtype, SpatialOverlapChangesNoBit) {
  using T = TypeParam;
  Rng rng;
  SEED_TRACE(rng);
  for (const Shape& sh :
       std::vector<Shape>{{4, 300, 700}, {2, 20, 1030}, {5, 64, 1024}, {1, 40, 300}, {7, 40, 300}, {6, 40, 200}}) {
    const int64_t O = sh[0], D = sh[1], I = sh[2];
    std::vector<double> xd = rng.values(size_t(O * D * I), 6.0);
    auto at = [&](int64_t o, int64_t d, int64_t i) -> double& { return xd[size_t((o * D + d) * I + i)]; };
    at(0, D / 2, 3) = kNaN;                                      // column 3: NaN
    for (int64_t d = 0; d < D; ++d) at(O - 1, d, I - 1) = -kInf;  // the last outer's last column: all -inf
    at(0, D - 1, I / 2) = kInf;                                   // +inf last in a middle column
    overlap_changes_no_bit<T>(cpu::softmax_spatial_overlap(), sh, to_t<T>(xd), ".fwd.cpu.spatial.i64");
  }
}

// Rows longer than the lastdim block (plan.chunk) and columns longer than a
// spatial statistics block, with the maximum in a late block, a first block of
// only -inf, and a spatial tile narrower than inner (partial last tile).
TYPED_TEST(SoftmaxDtype, LongRowsAcrossBlocksAgainstReference) {
  Rng rng;
  SEED_TRACE(rng);
  {
    const int64_t D = 3 * 8192 + 7;  // > 3 blocks for every dtype
    auto x = rng.values(size_t(2 * D));
    for (int64_t i = 0; i < 9000; ++i) x[size_t(i)] = -kInf;  // row 0: first block(s) all -inf
    x[size_t(D - 5)] = 9.0;                                   // row 0: max near the end
    x[size_t(D + 1)] = 7.5;                                   // row 1: max in the first block
    check_against_reference<TypeParam>(decompose({2, D}, -1), x, rng.grads(size_t(2 * D)));
  }
  {
    const int64_t D = 1200, inner = 1100;  // spatial, long D: several row blocks, W < inner (a partial last tile)
    auto x = rng.values(size_t(D * inner));
    for (int64_t d = 0; d < 700; ++d) x[size_t(d * inner + 3)] = -kInf;  // column 3: -inf prefix
    x[size_t(1100 * inner + 3)] = 11.0;
    check_against_reference<TypeParam>(decompose({D, inner}, 0), x, rng.grads(size_t(D * inner)));
  }
}

// The 16-bit last-dim forward of rows of >= 1024 values (session 7) takes its
// exps against speculative per-lane bases (the row's first vector, then the
// running lane max) and re-does a row against its max when a base ends outside
// [M - 64, M] (so also when an exp's argument exceeded 64). Rows that keep the speculation (random, a
// spread just under the margin, -inf late) and rows that break it (a block over
// the margin; a leading -inf with every value negative; a first element far
// below the max), special values late in a row, row lengths around vector
// multiples of every build (4, 8, 16 lanes), and rows of several blocks with the
// max rising within the margin in one block and past it in a later one: every
// ISA build, both store modes, against the float64 reference. (Float32 and
// float64 take the two-pass kernel, and rows of up to 16 vectors of every type
// but float64 the short-row kernel: the same rows check them.)
TYPED_TEST(SoftmaxDtype, LastdimSpeculativeBasesEveryIsaAndStoreMode) {
  IsaAndStreamScope restore;
  Rng rng;
  SEED_TRACE(rng);
  constexpr int kKinds = 11;
  auto row_of = [&](int kind, int64_t D) {
    std::vector<double> r = rng.values(size_t(D), 6.0);
    switch (kind) {
      case 0: break;                                              // random: the speculation holds
      case 1: for (auto& v : r) v += 40.0; r[0] = -30.0; break;   // a lane over its base by > 64: block re-done
      case 2: for (auto& v : r) v = v / 2 - 6.0; for (int64_t i = 0; i < std::min<int64_t>(D, 3); ++i) r[size_t(i)] = -kInf; break;  // bases 0 > M
      case 3: r[0] = -80.0; break;                                // a base below M - 64
      case 4: r[size_t(D - 1)] = kNaN; break;                     // NaN last
      case 5: r[size_t(D - 1)] = kInf; break;                     // +inf last
      case 6: for (auto& v : r) v = -kInf; r[size_t(D - 1)] = 3.0; break;  // one finite value, last
      case 7: for (auto& v : r) v = -kInf; break;                 // all -inf
      case 8: for (auto& v : r) v = std::fabs(v) / 8; r[0] = 0.0; r[size_t(D - 1)] = 63.5; break;  // bases >= M - 64: exps up to e^63.5 kept
      case 9: r[size_t(D - 1)] = -kInf; break;                    // -inf last
      default: for (auto& v : r) v -= 200.0; break;               // all far below 0
    }
    return r;
  };
  for (cpu::SoftmaxIsa isa : runnable_isas())
    for (int mode : {1, 2}) {
      SCOPED_TRACE(::testing::Message() << "isa " << cpu::softmax_isa_name(isa) << (mode == 2 ? ", streaming stores" : ""));
      cpu::softmax_isa_cap() = int(isa);
      cpu::softmax_stream_mode() = mode;
      // Rows of D >= 1024 (kFusedMinD) take the fused kernel, rows of at most 16
      // vectors (8 on AVX2 / SSE2) the short-row kernel in registers (session 9;
      // every type but float64), the others the two-pass kernel with exp16:
      // lengths around vector multiples of all three.
      for (int64_t D : {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256,
                        257, 1023, 1024, 1025,
                        1027, 1028, 1029, 1031, 1032, 1033, 1039, 1040, 1041, 1055, 1057}) {
        std::vector<double> x;
        for (int k = 0; k < kKinds; ++k) {
          const auto r = row_of(k, D);
          x.insert(x.end(), r.begin(), r.end());
        }
        check_against_reference<TypeParam>(decompose({kKinds, D}, 1), x, rng.grads(x.size()));
      }
      // Several blocks (plan.chunk: 8192 16-bit values, 4096 float32).
      const int64_t D = 3 * 8192 + 5;
      std::vector<double> x;
      {
        auto r = rng.values(size_t(D), 4.0);  // max rises by ~46 in block 1 (kept), by ~70 more in block 2 (re-done)
        for (int64_t i = 8192; i < 16384; ++i) r[size_t(i)] += 46.0;
        for (int64_t i = 16384; i < 16400; ++i) r[size_t(i)] = 120.0 - double(i - 16384);
        x.insert(x.end(), r.begin(), r.end());
      }
      {
        auto r = rng.values(size_t(D), 4.0);  // max rises within the margin in every block
        for (int64_t i = 0; i < D; ++i) r[size_t(i)] += double(i / 4096) * 12.0;
        x.insert(x.end(), r.begin(), r.end());
      }
      {
        auto r = rng.values(size_t(D), 4.0);  // leading -inf lanes, every value far below 0
        for (auto& v : r) v -= 200.0;
        for (int64_t i = 0; i < 5; ++i) r[size_t(i)] = -kInf;
        x.insert(x.end(), r.begin(), r.end());
      }
      {
        auto r = rng.values(size_t(D), 4.0);  // NaN in the last block's tail
        r[size_t(D - 2)] = kNaN;
        x.insert(x.end(), r.begin(), r.end());
      }
      // Small upstream gradients: with a row's probability on one element, the
      // float32 backward's sum of 24581 gradients (an existing kernel, not under
      // test here) would otherwise come near its tolerance.
      auto g = rng.grads(x.size());
      for (auto& v : g) v /= 64;
      check_against_reference<TypeParam>(decompose({4, D}, -1), x, g);
    }
}

// The spatial forward's tile widths (plan_softmax, session 5): a long D takes
// W = 128 while the [D, 128] tiles of x and of the exps fit in 1 MiB, else at
// least 256 columns; D <= 512 rows of 1 KiB (session 10); a short D (one
// statistics block per tile) prefetches the tile two ahead. Shapes that reach
// each branch (the plan is asserted), with a partial last tile, tiles across
// outer indices, special values in late blocks and in the partial tile, on every
// ISA build with both store modes, and a non-contiguous input equal to its
// contiguous copy. [2, 300, 700]: several blocks per tile whose last block is
// shorter than the next tile's first, rows not on cache lines, a narrower
// partial tile followed by a whole one (the next rows' prefetches of each case).

// Each case (shape over dim 1, data xs[k], gradients gs[k]) against the float64
// reference on every ISA build, with ordinary and with streaming stores.
template <class T, class Cases>
void check_cases_every_isa_and_store(const Cases& cases, const std::vector<std::vector<double>>& xs,
                                     const std::vector<std::vector<double>>& gs) {
  for (cpu::SoftmaxIsa isa : runnable_isas())
    for (int mode : {1, 2}) {
      SCOPED_TRACE(::testing::Message() << "isa " << cpu::softmax_isa_name(isa) << (mode == 2 ? ", streaming stores" : ""));
      cpu::softmax_isa_cap() = int(isa);
      cpu::softmax_stream_mode() = mode;
      for (size_t k = 0; k < cases.size(); ++k) check_against_reference<T>(decompose(cases[k].shape, 1), xs[k], gs[k]);
    }
}

TYPED_TEST(SoftmaxDtype, SpatialTileWidthsOfThePlanAgainstReference) {
  using T = TypeParam;
  IsaAndStreamScope restore;
  Rng rng;
  SEED_TRACE(rng);
  const DType dt = dtype_of<T>();
  const bool f64 = dt == DType::Float64;
  struct Case {
    Shape shape;
    int64_t w;  // the forward plan's tile width on one thread
  };
  // The calls run on 3 threads, so that the tiles of whole rows (spatial_stream,
  // the backward) are cut for them whatever this machine's thread count.
  OmpThreadsScope threads(3);
  const std::vector<Case> cases = {
      {{2, 1000, 300}, f64 ? 300 : 128},  // fits 1 MiB (float64: spatial_stream, whole rows)
      // spatial_stream: whole rows on one thread; on 3: W = 260 / 3 -> 96 (whole
      // lines; float64 88), tiles 96, 96, 68 (float64 88, 88, 84): partial vectors
      {{1, 4100, 260}, 260},
      {{3, 3, 700}, 128},  // D = 3 < 16: the forward keeps W = 128; one block per tile, partial tile
      {{2, 300, 700}, std::max<int64_t>(128, 1024 / int64_t(sizeof(T)))},  // D <= 512: rows of 1 KiB
  };
  std::vector<std::vector<double>> xs, gs;
  for (const Case& c : cases) {
    EXPECT_EQ(plan_softmax(make_softmax_problem(c.shape, 1, dt)).chunk, c.w) << shape_string(c.shape);
    const int64_t O = c.shape[0], D = c.shape[1], I = c.shape[2];
    auto x = rng.values(size_t(O * D * I), 6.0);
    auto at = [&](int64_t o, int64_t d, int64_t j) -> double& { return x[size_t((o * D + d) * I + j)]; };
    const int64_t last = O - 1, pj = I - 2;  // pj: a column of the partial last tile
    for (int64_t d = 0; d < D; ++d) {
      if (d < D / 2 + 1) at(0, d, 5) = -kInf;  // -inf prefix across blocks
      at(last, d, pj) = -kInf;                // all -inf: NaN
    }
    at(0, D - 1, 130) = 40.0;   // the max in the last block (second tile)
    at(0, D - 2, 7) = kInf;     // +inf late: NaN
    at(last, D - 1, 9) = kNaN;  // NaN in the last row: NaN
    at(last, 0, pj - 1) = kNaN;
    xs.push_back(x);
    gs.push_back(rng.grads(x.size()));
  }
  check_cases_every_isa_and_store<T>(cases, xs, gs);
  threads.restore();
  // Non-contiguous: the [1, 4100, 260] case read through a view with D and inner
  // swapped in storage (logical [1, 4100, 260] over storage [1, 260, 4100]).
  const Case& c = cases[1];
  const int64_t D = c.shape[1], I = c.shape[2];
  std::vector<T> st(size_t(D * I)), gst(size_t(D * I));
  for (int64_t d = 0; d < D; ++d)
    for (int64_t j = 0; j < I; ++j) {
      st[size_t(j * D + d)] = from_double<T>(xs[1][size_t(d * I + j)]);
      gst[size_t(j * D + d)] = from_double<T>(gs[1][size_t(d * I + j)]);
    }
  const TensorView xv(st.data(), dt, c.shape, {D * I, 1, D}), gv(gst.data(), dt, c.shape, {D * I, 1, D});
  ASSERT_FALSE(xv.is_contiguous());
  const Tensor xc = Tensor::contiguous_copy(xv), gc = Tensor::contiguous_copy(gv);
  for (bool log : {false, true}) {
    SCOPED_TRACE(log ? "log_softmax, non-contiguous" : "softmax, non-contiguous");
    const Tensor y = log ? log_softmax(xv, 1) : softmax(xv, 1), yc = log ? log_softmax(xc, 1) : softmax(xc, 1);
    ASSERT_EQ(0, std::memcmp(y.data(), yc.data(), size_t(y.numel()) * sizeof(T)));
    const Tensor gi = log ? log_softmax_backward(gv, y, 1) : softmax_backward(gv, y, 1);
    const Tensor gic = log ? log_softmax_backward(gc, yc, 1) : softmax_backward(gc, yc, 1);
    ASSERT_EQ(0, std::memcmp(gi.data(), gic.data(), size_t(gi.numel()) * sizeof(T)));
  }
}

// Outputs poisoned with NaN before the call; finite inputs, so every element
// must come back finite and right: proves every element was written.
TYPED_TEST(SoftmaxDtype, PoisonedOutputsAreFullyWritten) {
  using T = TypeParam;
  Rng rng;
  SEED_TRACE(rng);
  const DType dt = dtype_of<T>();
  for (const auto& [shape, dim] : std::vector<std::pair<Shape, int64_t>>{
           {{37, 1001}, 1}, {{5, 300, 77}, 1}, {{4097}, 0}, {{3, 2, 4097}, 0}, {{129, 3}, -2}}) {
    const Problem pr = decompose(shape, dim);
    const size_t n = pr.ref.size();
    std::vector<T> xt = to_t<T>(rng.values(n)), gt = to_t<T>(rng.grads(n));
    const auto x = as_double(xt.data(), n), g = as_double(gt.data(), n);
    const TensorView xv(xt.data(), dt, shape), gv(gt.data(), dt, shape);
    for (bool log : {false, true}) {
      SCOPED_TRACE(::testing::Message() << (log ? "log_softmax " : "softmax ") << shape_string(shape) << " dim " << dim);
      std::vector<T> y(n, from_double<T>(kNaN)), gi(n, from_double<T>(kNaN));
      const TensorView yv(y.data(), dt, shape), giv(gi.data(), dt, shape);
      TraceSession trace;
      log ? log_softmax_out(xv, dim, yv) : softmax_out(xv, dim, yv);
      const auto yd = as_double(y.data(), n);
      log ? log_softmax_backward_out(gv, yv, dim, giv) : softmax_backward_out(gv, yv, dim, giv);
      const auto gid = as_double(gi.data(), n);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_TRUE(std::isfinite(yd[i])) << "forward element " << i << " not written";
        ASSERT_TRUE(std::isfinite(gid[i])) << "backward element " << i << " not written";
      }
      EXPECT_TRUE(all_close<T>(yd, reference::softmax_forward(pr.ref, x, log), log ? 8.0 : 1.0));
      EXPECT_TRUE(all_close<T>(gid, reference::softmax_backward(pr.ref, g, yd, log), 8.0));
      const auto rec = trace.records();
      ASSERT_EQ(rec.size(), 2u);
      EXPECT_EQ(rec[0].path, path_of(log, Direction::Fwd, pr.ref, dt));
      EXPECT_EQ(rec[1].path, path_of(log, Direction::Bwd, pr.ref, dt));
    }
  }
}

// Exact where the math is exact: [0, log 3] -> [0.25, 0.75] (to the rounding of
// log 3 and exp in T), and with y = [0.25, 0.75], g = [1, 0] the softmax gradient
// is exactly [+0.1875, -0.1875]; log_softmax of [0, -inf] is exactly [0, -inf],
// and its gradient with g = [0.5, 2] exactly [-2, 2]. Both paths.
TYPED_TEST(SoftmaxDtype, ExactDimOfTwoBothPaths) {
  using T = TypeParam;
  const DType dt = dtype_of<T>();
  const double l3 = std::log(3.0);
  // lastdim: shape [2] dim 0; spatial: shape [2, 3] dim 0 (3 identical columns).
  for (bool spatial : {false, true}) {
    SCOPED_TRACE(spatial ? "spatial" : "lastdim");
    const Shape shape = spatial ? Shape{2, 3} : Shape{2};
    const int64_t cols = spatial ? 3 : 1;
    auto col = [&](double a, double b) {
      std::vector<T> v;
      for (int64_t i = 0; i < cols; ++i) v.push_back(from_double<T>(a));
      for (int64_t i = 0; i < cols; ++i) v.push_back(from_double<T>(b));
      return v;
    };
    auto x = col(0.0, l3);
    TraceSession trace;
    const Tensor y = softmax(TensorView(x.data(), dt, shape), 0);
    // 16-bit types: log 3 itself is rounded to T, which moves the result by up to about one ulp of T.
    const double eps = std::is_same_v<T, double> ? 1e-15 : std::is_same_v<T, float> ? 3e-7 : Tol<T>::rel * 2;
    for (int64_t i = 0; i < cols; ++i) {
      EXPECT_NEAR(to_double(y.ptr<T>()[i]), 0.25, 0.25 * eps);
      EXPECT_NEAR(to_double(y.ptr<T>()[cols + i]), 0.75, 0.75 * eps);
    }
    auto yq = col(0.25, 0.75), g = col(1.0, 0.0);
    const Tensor gi = softmax_backward(TensorView(g.data(), dt, shape), TensorView(yq.data(), dt, shape), 0);
    for (int64_t i = 0; i < cols; ++i) {
      EXPECT_EQ(to_double(gi.ptr<T>()[i]), 0.1875);
      EXPECT_EQ(to_double(gi.ptr<T>()[cols + i]), -0.1875);
    }
    auto xl = col(0.0, -kInf);
    const Tensor yl = log_softmax(TensorView(xl.data(), dt, shape), 0);
    const Tensor ys = softmax(TensorView(xl.data(), dt, shape), 0);
    auto gl = col(0.5, 2.0);
    const Tensor gil = log_softmax_backward(TensorView(gl.data(), dt, shape), yl, 0);
    for (int64_t i = 0; i < cols; ++i) {
      EXPECT_EQ(to_double(yl.ptr<T>()[i]), 0.0);
      EXPECT_EQ(to_double(yl.ptr<T>()[cols + i]), -kInf);
      EXPECT_EQ(to_double(ys.ptr<T>()[i]), 1.0);
      EXPECT_EQ(to_double(ys.ptr<T>()[cols + i]), 0.0);
      EXPECT_EQ(to_double(gil.ptr<T>()[i]), -2.0);
      EXPECT_EQ(to_double(gil.ptr<T>()[cols + i]), 2.0);
    }
    const std::string kind = spatial ? "spatial" : "lastdim";
    std::vector<std::string> want = {"softmax.fwd.cpu." + kind + ".i64", "softmax.bwd.cpu." + kind + ".i64",
                                     "log_softmax.fwd.cpu." + kind + ".i64", "softmax.fwd.cpu." + kind + ".i64",
                                     "log_softmax.bwd.cpu." + kind + ".i64"};
    const auto rec = trace.records();
    ASSERT_EQ(rec.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(rec[i].path, want[i]);
  }
}

// Special values on both paths (see special_value_rows_both_paths).
TYPED_TEST(SoftmaxDtype, SpecialValueRowsBothPaths) {
  Rng rng;
  SEED_TRACE(rng);
  special_value_rows_both_paths<TypeParam>(rng);
}

// A dim of size 1: softmax 1, log_softmax 0, gradient 0 (both ops), both paths.
TYPED_TEST(SoftmaxDtype, DimOfSizeOneBothPaths) {
  using T = TypeParam;
  const DType dt = dtype_of<T>();
  Rng rng;
  SEED_TRACE(rng);
  for (const auto& [shape, dim] : std::vector<std::pair<Shape, int64_t>>{{{6, 1}, 1}, {{1, 6}, 0}, {{2, 1, 3}, 1}}) {
    const size_t n = size_t(numel(shape));
    auto x = to_t<T>(rng.values(n, 50.0)), g = to_t<T>(rng.grads(n));
    const TensorView xv(x.data(), dt, shape), gv(g.data(), dt, shape);
    const Tensor y = softmax(xv, dim), yl = log_softmax(xv, dim);
    const Tensor gi = softmax_backward(gv, y, dim), gil = log_softmax_backward(gv, yl, dim);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(to_double(y.ptr<T>()[i]), 1.0);
      EXPECT_EQ(to_double(yl.ptr<T>()[i]), 0.0);
      EXPECT_EQ(to_double(gi.ptr<T>()[i]), 0.0);
      EXPECT_EQ(to_double(gil.ptr<T>()[i]), 0.0);
    }
  }
}

// ---- empty, 0-dim ---------------------------------------------------------------

TEST(SoftmaxCpu, EmptyTensorsAndDimOfSizeZeroLaunchNothing) {
  float dummy[4] = {1, 2, 3, 4};
  for (const auto& [shape, dim] : std::vector<std::pair<Shape, int64_t>>{
           {{3, 0}, 1}, {{3, 0}, 0}, {{0, 5}, 1}, {{0, 5}, -2}, {{0}, 0}, {{2, 0, 4}, 1}, {{2, 3, 0}, 1}}) {
    SCOPED_TRACE(shape_string(shape) + " dim " + std::to_string(dim));
    const TensorView x(dummy, DType::Float32, shape);
    TraceSession trace;
    for (bool log : {false, true}) {
      const Tensor y = log ? log_softmax(x, dim) : softmax(x, dim);
      EXPECT_EQ(y.sizes(), shape);
      const Tensor gi = log ? log_softmax_backward(x, y, dim) : softmax_backward(x, y, dim);
      EXPECT_EQ(gi.sizes(), shape);
      softmax_out(x, dim, TensorView(dummy + 2, DType::Float32, shape));  // empty out: nothing written
    }
    EXPECT_TRUE(trace.records().empty()) << "a kernel ran on an empty tensor";
  }
  EXPECT_EQ(dummy[2], 3.0f);
}

TEST(SoftmaxCpu, ZeroDimIsTreatedAsOneElementLastdim) {
  double v = 3.5, g = -1.25;
  const TensorView x(&v, DType::Float64, {}), gv(&g, DType::Float64, {});
  TraceSession trace;
  for (int64_t dim : {0, -1}) {
    const Tensor y = softmax(x, dim), yl = log_softmax(x, dim);
    EXPECT_TRUE(y.sizes().empty());
    EXPECT_EQ(y.ptr<double>()[0], 1.0);
    EXPECT_EQ(yl.ptr<double>()[0], 0.0);
    EXPECT_EQ(softmax_backward(gv, y, dim).ptr<double>()[0], 0.0);
    EXPECT_EQ(log_softmax_backward(gv, yl, dim).ptr<double>()[0], 0.0);
  }
  const auto rec = trace.records();
  ASSERT_EQ(rec.size(), 8u);
  EXPECT_EQ(rec[0].path, "softmax.fwd.cpu.lastdim.i64");
  EXPECT_THROW(softmax(x, 1), ValueError);
  EXPECT_THROW(softmax(x, -2), ValueError);
  double inf = kInf;
  EXPECT_TRUE(std::isnan(softmax(TensorView(&inf, DType::Float64, {}), 0).ptr<double>()[0]));
}

// ---- trace, one test per path ----------------------------------------------------

struct PathCase {
  bool log;
  Direction dir;
  bool spatial;
};

void expect_single_launch(const PathCase& c) {
  std::vector<float> x(6 * 5), g(6 * 5);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = float(i % 7) * 0.5f - 1.0f;
    g[i] = float(i % 5) - 2.0f;
  }
  const Shape shape{6, 5};
  const int64_t dim = c.spatial ? 0 : 1;
  const TensorView xv(x.data(), DType::Float32, shape), gv(g.data(), DType::Float32, shape);
  const Tensor y = c.log ? log_softmax(xv, dim) : softmax(xv, dim);
  TraceSession trace;
  if (c.dir == Direction::Fwd) c.log ? log_softmax(xv, dim) : softmax(xv, dim);
  else c.log ? log_softmax_backward(gv, y, dim) : softmax_backward(gv, y, dim);
  const auto rec = trace.records();
  ASSERT_EQ(rec.size(), 1u);
  const std::string op = c.log ? "log_softmax" : "softmax";
  EXPECT_EQ(rec[0].path, op + (c.dir == Direction::Fwd ? ".fwd" : ".bwd") + ".cpu." +
                             (c.spatial ? "spatial" : "lastdim") + ".i64");
  EXPECT_EQ(rec[0].op, op);
  EXPECT_EQ(rec[0].direction, c.dir);
  EXPECT_EQ(rec[0].backend, Backend::CPU);
  EXPECT_EQ(rec[0].index_bits, 64);
  EXPECT_NO_THROW(path_info(rec[0].path));
}

TEST(SoftmaxTrace, SoftmaxFwdLastdim) { expect_single_launch({false, Direction::Fwd, false}); }
TEST(SoftmaxTrace, SoftmaxFwdSpatial) { expect_single_launch({false, Direction::Fwd, true}); }
TEST(SoftmaxTrace, SoftmaxBwdLastdim) { expect_single_launch({false, Direction::Bwd, false}); }
TEST(SoftmaxTrace, SoftmaxBwdSpatial) { expect_single_launch({false, Direction::Bwd, true}); }
TEST(SoftmaxTrace, LogSoftmaxFwdLastdim) { expect_single_launch({true, Direction::Fwd, false}); }
TEST(SoftmaxTrace, LogSoftmaxFwdSpatial) { expect_single_launch({true, Direction::Fwd, true}); }
TEST(SoftmaxTrace, LogSoftmaxBwdLastdim) { expect_single_launch({true, Direction::Bwd, false}); }
TEST(SoftmaxTrace, LogSoftmaxBwdSpatial) { expect_single_launch({true, Direction::Bwd, true}); }

// The forward over a long D (past spatial's L2 rule: float32 D > 1024) takes
// spatial_stream, one launch, values against the reference; the backward of the
// same shape stays spatial.
void expect_stream_launch(bool log) {
  const L2Scope small_l2(512 << 10);  // (every L2 size streams these; session 39)
  const int64_t D = 1030, I = 3;
  std::vector<float> x(size_t(D * I)), g(size_t(D * I));
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = float(i % 13) * 0.75f - 4.0f;
    g[i] = float(i % 5) - 2.0f;
  }
  const Shape shape{D, I};
  const TensorView xv(x.data(), DType::Float32, shape), gv(g.data(), DType::Float32, shape);
  TraceSession trace;
  const Tensor y = log ? log_softmax(xv, 0) : softmax(xv, 0);
  const Tensor gi = log ? log_softmax_backward(gv, y, 0) : softmax_backward(gv, y, 0);
  const auto rec = trace.records();
  ASSERT_EQ(rec.size(), 2u);
  const std::string op = log ? "log_softmax" : "softmax";
  EXPECT_EQ(rec[0].path, op + ".fwd.cpu.spatial_stream.i64");
  EXPECT_EQ(rec[1].path, op + ".bwd.cpu.spatial.i64");
  EXPECT_EQ(rec[0].op, op);
  EXPECT_EQ(rec[0].direction, Direction::Fwd);
  EXPECT_NO_THROW(path_info(rec[0].path));
  const reference::SoftmaxShape r{1, D, I};
  const std::vector<double> xd(x.begin(), x.end());
  EXPECT_TRUE(all_close<float>(as_double(y.ptr<const float>(), x.size()), reference::softmax_forward(r, xd, log),
                               log ? 8.0 : 1.0));
}
TEST(SoftmaxTrace, SoftmaxFwdSpatialStream) { expect_stream_launch(false); }
TEST(SoftmaxTrace, LogSoftmaxFwdSpatialStream) { expect_stream_launch(true); }

TEST(SoftmaxTrace, EveryCpuSoftmaxPathIsRegistered) {
  int n = 0;
  for (const auto& p : paths())
    if (p.backend == Backend::CPU && (p.op == "softmax" || p.op == "log_softmax")) {
      ++n;
      EXPECT_EQ(p.index_bits, 64);
    }
  EXPECT_EQ(n, 10);  // lastdim, spatial x fwd, bwd x both ops; spatial_stream x fwd x both ops
}

// ---- strides ---------------------------------------------------------------------

// A transposed view and a slice with a step give bitwise the result of their
// contiguous copy, forward and backward, over every dim.
TEST(SoftmaxCpu, NonContiguousInputsEqualTheirContiguousCopy) {
  Rng rng;
  SEED_TRACE(rng);
  const int64_t A = 37, B = 53;
  std::vector<float> base(size_t(A * B)), gbase(size_t(A * B));
  for (auto& v : base) v = float(rng.uniform(-5, 5));
  for (auto& v : gbase) v = float(rng.uniform(-2, 2));
  // Transposed: logical [B, A] over storage [A, B].
  const TensorView xt(base.data(), DType::Float32, {B, A}, {1, B});
  const TensorView gt(gbase.data(), DType::Float32, {B, A}, {1, B});
  // Slice with a step: rows 1, 3, 5, ... and columns 0, 3, 6, ... of [A, B].
  const TensorView xs(base.data() + B, DType::Float32, {A / 2, (B + 2) / 3}, {2 * B, 3});
  const TensorView gs(gbase.data() + B, DType::Float32, {A / 2, (B + 2) / 3}, {2 * B, 3});
  for (const auto& [x, g] : std::vector<std::pair<TensorView, TensorView>>{{xt, gt}, {xs, gs}}) {
    ASSERT_FALSE(x.is_contiguous());
    const Tensor xc = Tensor::contiguous_copy(x), gc = Tensor::contiguous_copy(g);
    for (int64_t dim : {0, 1, -1}) {
      for (bool log : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "dim " << dim << (log ? " log" : ""));
        const Tensor y = log ? log_softmax(x, dim) : softmax(x, dim);
        const Tensor yc = log ? log_softmax(xc, dim) : softmax(xc, dim);
        ASSERT_EQ(0, std::memcmp(y.data(), yc.data(), size_t(y.numel()) * 4));
        // Non-contiguous grad and output: output as a transposed copy of y.
        const Tensor gi = log ? log_softmax_backward(g, y, dim) : softmax_backward(g, y, dim);
        const Tensor gic = log ? log_softmax_backward(gc, yc, dim) : softmax_backward(gc, yc, dim);
        ASSERT_EQ(0, std::memcmp(gi.data(), gic.data(), size_t(gi.numel()) * 4));
      }
    }
  }
  // A non-contiguous output argument to the backward (transposed storage).
  const Tensor yc = softmax(Tensor::contiguous_copy(xt), 1);
  std::vector<float> ystore(size_t(A * B));
  for (int64_t i = 0; i < B; ++i)
    for (int64_t j = 0; j < A; ++j) ystore[size_t(j * B + i)] = yc.ptr<float>()[i * A + j];
  const TensorView yt(ystore.data(), DType::Float32, {B, A}, {1, B});
  const Tensor gi = softmax_backward(gt, yt, 1), gic = softmax_backward(Tensor::contiguous_copy(gt), yc, 1);
  EXPECT_EQ(0, std::memcmp(gi.data(), gic.data(), size_t(gi.numel()) * 4));
}

// Same inputs, same bits, run after run (threads split the rows).
TEST(SoftmaxCpu, DeterministicAcrossRuns) {
  Rng rng;
  SEED_TRACE(rng);
  for (const auto& [shape, dim] : std::vector<std::pair<Shape, int64_t>>{{{64, 20000}, 1}, {{4, 3000, 300}, 1}}) {
    std::vector<float> x(size_t(numel(shape)));
    for (auto& v : x) v = float(rng.uniform(-8, 8));
    const TensorView xv(x.data(), DType::Float32, shape);
    const Tensor a = softmax(xv, dim), b = softmax(xv, dim);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), x.size() * 4));
    const Tensor ga = softmax_backward(xv, a, dim), gb = softmax_backward(xv, a, dim);
    EXPECT_EQ(0, std::memcmp(ga.data(), gb.data(), x.size() * 4));
  }
}

// The split depends on the thread count, a result never does: the backward's
// sums run over rows per column whatever the tile width.
TEST(SoftmaxCpu, SpatialBackwardBitwiseEqualForEveryThreadCount) {
  Rng rng;
  SEED_TRACE(rng);
  OmpThreadsScope restore;
  for (const auto& [shape, dim] : std::vector<std::pair<Shape, int64_t>>{{{3, 70, 700}, 1}, {{300, 9000}, 0}}) {
    const int64_t n = numel(shape);
    std::vector<float> x(static_cast<size_t>(n)), g(static_cast<size_t>(n));
    for (auto& v : x) v = float(rng.uniform(-8, 8));
    for (auto& v : g) v = float(rng.uniform(-2, 2));
    const TensorView xv(x.data(), DType::Float32, shape), gv(g.data(), DType::Float32, shape);
    const Tensor y = softmax(xv, dim), ly = log_softmax(xv, dim);
    std::vector<Tensor> gi, lgi;
    for (int threads : {1, 2, 3, 5}) {
      omp_set_num_threads(threads);
      SoftmaxProblem p = make_softmax_problem(shape, dim, DType::Float32, Direction::Bwd);
      p.cpu_threads = threads;
      SCOPED_TRACE(testing::Message() << shape_string(shape) << ", " << threads << " threads: W = " << plan_softmax(p).chunk);
      gi.push_back(softmax_backward(gv, y, dim));
      lgi.push_back(log_softmax_backward(gv, ly, dim));
      EXPECT_EQ(0, std::memcmp(gi.back().data(), gi.front().data(), size_t(n) * 4));
      EXPECT_EQ(0, std::memcmp(lgi.back().data(), lgi.front().data(), size_t(n) * 4));
    }
  }
}

// Session 26: the two tile families (plan_softmax, kLargeL2Bytes): each shape under an
// L2 of 2 MiB (backward rows of 1 KiB where D <= 512) and of 512 KiB (whole rows),
// against the reference, with the paths traced as planned; the backward's bits equal
// under both. (Past D = 512 both plan alike since session 39.)
TEST(SoftmaxCpu, LargeAndSmallL2TilesGiveTheSameBits) {
  Rng rng;
  SEED_TRACE(rng);
  OmpThreadsScope restore;
  omp_set_num_threads(2);
  for (const auto& [shape, dim] : std::vector<std::pair<Shape, int64_t>>{
           {{3, 70, 700}, 1}, {{2, 1100, 300}, 1}, {{1400, 257}, 0}, {{2, 4, 3000}, 1}, {{5, 600, 40}, 1}}) {
    const Problem pr = decompose(shape, dim);
    const size_t n = pr.ref.size();
    std::vector<double> xd = rng.values(n), gd = rng.grads(n);
    std::vector<float> x(xd.begin(), xd.end()), g(gd.begin(), gd.end());
    xd.assign(x.begin(), x.end());
    gd.assign(g.begin(), g.end());
    const TensorView xv(x.data(), DType::Float32, shape), gv(g.data(), DType::Float32, shape);
    for (bool log : {false, true}) {
      std::vector<Tensor> ys, gis;
      for (int64_t l2 : {int64_t(2) << 20, int64_t(512) << 10}) {
        SCOPED_TRACE(::testing::Message() << (log ? "log_softmax " : "softmax ") << shape_string(shape) << " dim "
                                          << dim << ", L2 " << l2);
        const L2Scope scope(l2);
        TraceSession trace;
        ys.push_back(log ? log_softmax(xv, dim) : softmax(xv, dim));
        gis.push_back(log ? log_softmax_backward(gv, ys.back(), dim) : softmax_backward(gv, ys.back(), dim));
        const auto rec = trace.records();
        ASSERT_EQ(rec.size(), 2u);
        EXPECT_EQ(rec[0].path, path_of(log, Direction::Fwd, pr.ref, DType::Float32));
        EXPECT_EQ(rec[1].path, path_of(log, Direction::Bwd, pr.ref, DType::Float32));
        const auto yd = as_double(ys.back().ptr<const float>(), n);
        EXPECT_TRUE(all_close<float>(yd, reference::softmax_forward(pr.ref, xd, log), log ? 8.0 : 1.0));
        EXPECT_TRUE(all_close<float>(as_double(gis.back().ptr<const float>(), n),
                                     reference::softmax_backward(pr.ref, gd, yd, log), 8.0));
      }
      // The backward's sums run over rows per column whatever the tile: the same bits
      // (from the same y). The forwards are each checked against the reference above.
      const L2Scope small_l2(512 << 10);
      const Tensor gi_small = log ? log_softmax_backward(gv, ys[0], dim) : softmax_backward(gv, ys[0], dim);
      EXPECT_EQ(0, std::memcmp(gis[0].data(), gi_small.data(), n * 4)) << shape_string(shape);
    }
  }
}

// Session 39: spatial_stream's passes and the spatial backward's sum pass (rows
// over 1 KiB) prefetch along the tile's rows, and past a row's end into the row
// the pass reads next (cpu::softmax_long_row_prefetch). A prefetch moves no value:
// every distance gives the bits of none, forward and backward, on tiles cut from
// whole rows (W < inner: the wrap to the next row or block) and whole, on both
// threads, for float32 and float16, softmax and log_softmax.
TEST(SoftmaxCpu, LongRowPrefetchChangesNoBit) {
  Rng rng;
  SEED_TRACE(rng);
  OmpThreadsScope restore;
  omp_set_num_threads(2);
  const L2Scope small_l2(512 << 10);  // (every L2 size streams these; session 39)
  struct PrefetchScope {  // the distance restored on exit, also after a failed ASSERT
    const int64_t saved = cpu::softmax_long_row_prefetch().load();
    ~PrefetchScope() { cpu::softmax_long_row_prefetch() = saved; }
  } restore_prefetch;
  for (const auto& [shape, dim] : std::vector<std::pair<Shape, int64_t>>{
           {{1, 1400, 300}, 1}, {{1400, 257}, 0}, {{2, 1400, 3}, 1}, {{3, 1500, 40}, 1},  // D > 1365: float16 streams too
           {{2, 1400, 600}, 1}}) {  // backward rows of 2400 / 1200 bytes: the sum pass prefetches along them
    const int64_t n = numel(shape);
    std::vector<float> x(static_cast<size_t>(n)), g(static_cast<size_t>(n));
    for (auto& v : x) v = float(rng.uniform(-8, 8));
    for (auto& v : g) v = float(rng.uniform(-2, 2));
    std::vector<half_t> xh(x.size()), gh(g.size());
    for (size_t i = 0; i < x.size(); ++i) {
      xh[i] = to_half(x[i]);
      gh[i] = to_half(g[i]);
    }
    for (DType dt : {DType::Float32, DType::Float16}) {
      const bool f32 = dt == DType::Float32;
      const TensorView xv = f32 ? TensorView(x.data(), dt, shape) : TensorView(xh.data(), dt, shape);
      const TensorView gv = f32 ? TensorView(g.data(), dt, shape) : TensorView(gh.data(), dt, shape);
      const size_t bytes = size_t(n) * size_t(dtype_size(dt));
      for (bool log : {false, true}) {
        const std::string op = log ? "log_softmax" : "softmax";
        std::vector<Tensor> ys, gis;
        for (int64_t pf : {int64_t(0), int64_t(64), int64_t(4096), int64_t(1) << 30}) {
          SCOPED_TRACE(::testing::Message() << op << " " << shape_string(shape) << " dim " << dim << " "
                                            << dtype_name(dt) << ", prefetch " << pf);
          cpu::softmax_long_row_prefetch() = pf;
          TraceSession trace;
          ys.push_back(log ? log_softmax(xv, dim) : softmax(xv, dim));
          // The backward from the first y, so that only the prefetch differs.
          gis.push_back(log ? log_softmax_backward(gv, ys.front(), dim) : softmax_backward(gv, ys.front(), dim));
          const auto rec = trace.records();
          ASSERT_EQ(rec.size(), 2u);
          EXPECT_EQ(rec[0].path, op + ".fwd.cpu.spatial_stream.i64");
          EXPECT_EQ(rec[1].path, op + ".bwd.cpu.spatial.i64");
          EXPECT_EQ(0, std::memcmp(ys.back().data(), ys.front().data(), bytes));
          EXPECT_EQ(0, std::memcmp(gis.back().data(), gis.front().data(), bytes));
        }
      }
    }
  }
}

// The sysfs parsers behind the streaming-store rule's cache share.
TEST(SoftmaxCpu, CacheSizeAndCpuListParsers) {
  EXPECT_EQ(cpu::parse_cache_size("32768K\n"), int64_t(32) << 20);
  EXPECT_EQ(cpu::parse_cache_size("2M"), int64_t(2) << 20);
  EXPECT_EQ(cpu::parse_cache_size("1G\n"), int64_t(1) << 30);
  EXPECT_EQ(cpu::parse_cache_size("512\n"), 512);
  EXPECT_EQ(cpu::parse_cache_size(""), 0);
  EXPECT_EQ(cpu::parse_cache_size("K"), 0);
  EXPECT_EQ(cpu::parse_cache_size("12X"), 0);
  EXPECT_EQ(cpu::parse_cache_size("99999999999999999999K"), 0);
  EXPECT_EQ(cpu::count_cpu_list("0-1\n"), 2);
  EXPECT_EQ(cpu::count_cpu_list("0"), 1);
  EXPECT_EQ(cpu::count_cpu_list("0,2-3,8\n"), 4);
  EXPECT_EQ(cpu::count_cpu_list("0-15,32-47"), 32);
  EXPECT_EQ(cpu::count_cpu_list(""), 0);
  EXPECT_EQ(cpu::count_cpu_list("3-1"), 0);
  EXPECT_EQ(cpu::count_cpu_list("a"), 0);
  EXPECT_EQ(cpu::count_cpu_list("0-99999999999999999999"), 0);
  EXPECT_EQ(cpu::count_cpu_list("99999999999999999999"), 0);
}

// The LLC share behind the streaming rule: physical reports pass through, a
// virtual machine's whole-package L3 over 2 vCPUs (session 38: 480 MiB / 2) is
// capped, and with the cap 2 threads stream a call moving 128 MiB but not one
// moving 64 MiB (the crossover measured on that machine).
TEST(SoftmaxCpu, LlcShareCappedForVirtualMachineReports) {
  const int64_t MiB = int64_t(1) << 20;
  EXPECT_EQ(cpu::capped_llc_share(300 * MiB / 16), 300 * MiB / 16);
  EXPECT_EQ(cpu::capped_llc_share(2 * MiB), 2 * MiB);
  EXPECT_EQ(cpu::capped_llc_share(480 * MiB / 2), cpu::kMaxLlcSharePerCpu);
  const int64_t threshold = 2 * cpu::capped_llc_share(480 * MiB / 2);
  EXPECT_GT(128 * MiB, threshold);
  EXPECT_LE(64 * MiB, threshold);
}

// ---- validation --------------------------------------------------------------------

template <class E, class F>
void expect_error_naming(F&& f, const std::string& name) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one naming '" << name << "'";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << "message: " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

TEST(SoftmaxCpu, ValidationErrorsNameTheArgument) {
  std::vector<float> a(12, 0.5f), b(12, 0.25f);
  std::vector<int32_t> ints(12, 1);
  std::vector<float> out(12, 7.0f);
  const TensorView x(a.data(), DType::Float32, {3, 4}), y(b.data(), DType::Float32, {3, 4});
  const TensorView o(out.data(), DType::Float32, {3, 4});
  // dim out of range, both signs, every entry point
  expect_error_naming<ValueError>([&] { softmax(x, 2); }, "dim=2");
  expect_error_naming<ValueError>([&] { log_softmax(x, -3); }, "dim=-3");
  expect_error_naming<ValueError>([&] { softmax_out(x, 5, o); }, "dim");
  expect_error_naming<ValueError>([&] { softmax_backward(x, y, 2); }, "dim");
  expect_error_naming<ValueError>([&] { log_softmax_backward(x, y, -3); }, "dim");
  // grad / output mismatch
  expect_error_naming<ValueError>([&] { softmax_backward(TensorView(a.data(), DType::Float32, {4, 3}), y, 1); },
                                  "grad");
  expect_error_naming<ValueError>([&] { log_softmax_backward(TensorView(a.data(), DType::Float32, {12}), y, 0); },
                                  "grad");
  expect_error_naming<TypeError>([&] { softmax_backward(TensorView(a.data(), DType::Float64, {3, 2}),
                                                        TensorView(b.data(), DType::Float32, {3, 2}), 1); },
                                 "grad");
  // outputs: shape, dtype, contiguity, overlap
  expect_error_naming<ValueError>([&] { softmax_out(x, 1, TensorView(out.data(), DType::Float32, {4, 3})); }, "out");
  std::vector<double> dout(12, 7.0);
  expect_error_naming<TypeError>([&] { softmax_out(x, 1, TensorView(dout.data(), DType::Float64, {3, 4})); }, "out");
  expect_error_naming<ValueError>([&] { softmax_out(x, 1, TensorView(out.data(), DType::Float32, {3, 4}, {1, 3})); },
                                  "out");
  expect_error_naming<ValueError>([&] { softmax_out(x, 1, x); }, "out");
  expect_error_naming<ValueError>(
      [&] { softmax_backward_out(x, y, 1, TensorView(out.data(), DType::Float32, {3, 3})); }, "grad_input");
  expect_error_naming<ValueError>([&] { log_softmax_backward_out(x, y, 1, y); }, "grad_input");
  // unsupported dtypes
  expect_error_naming<TypeError>([&] { softmax(TensorView(ints.data(), DType::Int32, {3, 4}), 1); }, "x");
  expect_error_naming<TypeError>([&] { log_softmax(TensorView(ints.data(), DType::Int64, {6}), 0); }, "x");
  expect_error_naming<TypeError>([&] {
    softmax_backward(TensorView(ints.data(), DType::Int32, {3, 4}), TensorView(ints.data(), DType::Int32, {3, 4}), 1);
  }, "grad");
  expect_error_naming<TypeError>([&] {
    log_softmax_backward(y, TensorView(ints.data(), DType::Int32, {3, 4}), 1);
  }, "output");
  // A failed call wrote nothing into the caller's output.
  for (float v : out) EXPECT_EQ(v, 7.0f);
  for (double v : dout) EXPECT_EQ(v, 7.0);
  // A CPU pointer labelled as a CUDA tensor: rejected (no CUDA path without the
  // CUDA backend; with it, the device-pointer check).
  EXPECT_THROW(softmax(TensorView(a.data(), DType::Float32, {3, 4}, {}, {Device::CUDA, 0}), 1), ValueError);
}

// ---- building block ------------------------------------------------------------

// The kernels' branch-free float16 conversions equal dtype.h's exact ones: every
// half widened, every half and a float sweep (subnormals, ties, overflow) narrowed.
TEST(SoftmaxOps, VectorisableHalfConversionsAreExact) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const half_t h{uint16_t(b)};
    const float want = to_float(h), got = cpu::half_to_float_vec(h);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << b;
      continue;
    }
    ASSERT_EQ(0, std::memcmp(&want, &got, 4)) << "half bits " << b;
    ASSERT_EQ(cpu::float_to_half_vec(want).bits, h.bits) << "round trip of half bits " << b;
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 2000000; ++i) {
    float x = std::ldexp(float(rng() % 1000003) / 1000003.0f, int(rng() % 48) - 30);
    if (i % 2) x = -x;
    if (i % 1000 == 0) x = std::nextafter(65520.0f, i % 2000 ? 0.0f : 1e30f);
    ASSERT_EQ(cpu::float_to_half_vec(x).bits, to_half(x).bits) << x;
  }
  EXPECT_EQ(cpu::float_to_half_vec(std::numeric_limits<float>::infinity()).bits, 0x7c00);
  EXPECT_EQ(cpu::float_to_half_vec(-1e30f).bits, 0xfc00);
  EXPECT_EQ(cpu::float_to_half_vec(std::numeric_limits<float>::quiet_NaN()).bits & 0x7e00, 0x7e00);
}

// Floats that exercise a narrowing conversion: a sweep over the half range and
// beyond (normals, subnormals, values that round to 0, overflow), every rounding
// tie of half and of bfloat16 near the sweep's values and their neighbours, and
// the special values.
std::vector<float> narrowing_inputs() {
  std::vector<float> v;
  std::mt19937 rng(7);
  for (int i = 0; i < 1000000; ++i) {
    float x = std::ldexp(float(rng() % 1000003) / 1000003.0f, int(rng() % 60) - 40);
    if (i % 2) x = -x;
    v.push_back(x);
    uint32_t b;
    std::memcpy(&b, &x, 4);
    for (uint32_t tie : {0x1000u, 0x8000u}) {  // half's and bfloat16's half-way points
      const uint32_t t = (b & ~(2 * tie - 1)) | tie;
      for (uint32_t u : {t - 1, t, t + 1}) {
        float f;
        std::memcpy(&f, &u, 4);
        v.push_back(f);
      }
    }
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float f : {0.0f, -0.0f, inf, -inf, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e30f, 5.96e-8f, 2.98e-8f,
                  2.9802322e-8f, 1e-45f, std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN()})
    v.push_back(f);
  for (uint32_t u : {0x7f800001u, 0xff800001u, 0x7fc01234u, 0x7fa00000u, 0x7fffe000u, 0x7f812345u}) {  // NaN payloads
    float f;
    std::memcpy(&f, &u, 4);
    v.push_back(f);
  }
  return v;
}

// The kernels' vector conversions of every build this CPU runs (F16C on AVX2 and
// AVX-512; integer rounding for bfloat16) give exactly dtype.h's results: every
// float16 and bfloat16 value widened, every one narrowed back, and the float
// inputs above narrowed (NaNs included: quiet, sign and top payload bits kept).
// Odd lengths: the partial last vector goes through the same code.
TEST(SoftmaxOps, VectorConversionsOfEveryIsaBuildAreExact) {
  std::vector<half_t> hs(65537);
  std::vector<bfloat16_t> bs(65537);
  for (uint32_t b = 0; b < 65537; ++b) {
    hs[b] = half_t{uint16_t(b)};
    bs[b] = bfloat16_t{uint16_t(b)};
  }
  const std::vector<float> fs = narrowing_inputs();
  for (cpu::SoftmaxIsa isa : runnable_isas()) {
    SCOPED_TRACE(cpu::softmax_isa_name(isa));
    std::vector<float> wh(hs.size()), wb(bs.size());
    cpu::softmax_widen(isa, hs.data(), wh.data(), int64_t(hs.size()));
    cpu::softmax_widen(isa, bs.data(), wb.data(), int64_t(bs.size()));
    for (size_t b = 0; b < hs.size(); ++b) {
      const float want_h = to_float(hs[b]), want_b = to_float(bs[b]);
      ASSERT_EQ(std::isnan(wh[b]), std::isnan(want_h)) << "half bits " << b;
      if (!std::isnan(want_h)) ASSERT_EQ(0, std::memcmp(&want_h, &wh[b], 4)) << "half bits " << b;
      ASSERT_EQ(0, std::memcmp(&want_b, &wb[b], 4)) << "bfloat16 bits " << b;
    }
    std::vector<half_t> nh(fs.size());
    std::vector<bfloat16_t> nb(fs.size());
    cpu::softmax_narrow(isa, fs.data(), nh.data(), int64_t(fs.size()));
    cpu::softmax_narrow(isa, fs.data(), nb.data(), int64_t(fs.size()));
    for (size_t i = 0; i < fs.size(); ++i) {
      ASSERT_EQ(nh[i].bits, to_half(fs[i]).bits) << "float " << fs[i] << " to half";
      ASSERT_EQ(nb[i].bits, to_bfloat16(fs[i]).bits) << "float " << fs[i] << " to bfloat16";
    }
    // Every non-NaN half and bfloat16 value survives the round trip.
    std::vector<half_t> rh(hs.size());
    std::vector<bfloat16_t> rb(bs.size());
    cpu::softmax_narrow(isa, wh.data(), rh.data(), int64_t(wh.size()));
    cpu::softmax_narrow(isa, wb.data(), rb.data(), int64_t(wb.size()));
    for (size_t b = 0; b < hs.size(); ++b) {
      if (!std::isnan(wh[b])) ASSERT_EQ(rh[b].bits, hs[b].bits) << b;
      if (!std::isnan(wb[b])) ASSERT_EQ(rb[b].bits, bs[b].bits) << b;
    }
  }
}

// ulp distance of got from the double want, in float ulps (subnormal ulps below
// the normal range).
double ulps(float got, double want) {
  const double ulp = std::fabs(want) < 1.1754943508222875e-38 ? 1.401298464324817e-45
                                                              : std::ldexp(1.0, std::ilogb(want) - 23);
  return std::fabs(double(got) - want) / ulp;
}

// The kernels' vector exp (AVX-512: vrndscaleps / vscalefps) and log of every
// build: within 2 ulp of double over the ranges softmax uses, special values exact.
TEST(SoftmaxOps, VectorExpAndLogOfEveryIsaBuild) {
  std::vector<float> xe, xl;
  for (float x = -103.0f; x < 88.7f; x += 0.0137f) xe.push_back(x);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (float x : {0.0f, -inf, -200.0f, inf, 89.0f, nan, -100.0f}) xe.push_back(x);
  for (float x = 1.0f; x < 2e7f; x *= 1.000173f) xl.push_back(x);
  for (float x : {0.5f, 0.70710677f, 1.4142135f, 1e-30f, 3e30f, nan}) xl.push_back(x);
  for (cpu::SoftmaxIsa isa : runnable_isas()) {
    SCOPED_TRACE(cpu::softmax_isa_name(isa));
    std::vector<float> e(xe.size()), l(xl.size());
    cpu::softmax_vec_math(isa, false, xe.data(), e.data(), int64_t(xe.size()));
    cpu::softmax_vec_math(isa, true, xl.data(), l.data(), int64_t(xl.size()));
    double worst_e = 0, worst_l = 0;
    for (size_t i = 0; i + 7 < xe.size(); ++i) worst_e = std::max(worst_e, ulps(e[i], std::exp(double(xe[i]))));
    for (size_t i = 0; i + 1 < xl.size(); ++i) worst_l = std::max(worst_l, ulps(l[i], std::log(double(xl[i]))));
    EXPECT_LE(worst_e, 2.0);
    EXPECT_LE(worst_l, 2.0);
    const size_t s = xe.size() - 7;
    EXPECT_EQ(e[s + 0], 1.0f);
    EXPECT_EQ(e[s + 1], 0.0f);
    EXPECT_EQ(e[s + 2], 0.0f);
    EXPECT_EQ(e[s + 3], inf);
    EXPECT_EQ(e[s + 4], inf);
    EXPECT_TRUE(std::isnan(e[s + 5]));
    EXPECT_GT(e[s + 6], 0.0f);  // a subnormal result, not flushed
    EXPECT_TRUE(std::isnan(l.back()));
  }
}

// The 16-bit forwards' exp (VecF::exp16: degree-5 polynomial) of every build:
// within 3 ulp over the range those forwards use (arguments <= 0 there; up to 64
// for the fused last-dim pass), subnormal results included (measured: AVX2 and
// AVX-512 within 2, the SSE2 baseline, without FMA, 2.2); exact specials.
TEST(SoftmaxOps, VectorExp16OfEveryIsaBuild) {
  std::vector<float> xe;
  for (float x = -103.0f; x < 88.0f; x += 0.0137f) xe.push_back(x);
  for (float x = -1.0f; x < 1.0f; x += 1.0f / 4096) xe.push_back(x);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (float x : {0.0f, -inf, -200.0f, nan, -100.0f, -1e30f}) xe.push_back(x);
  for (cpu::SoftmaxIsa isa : runnable_isas()) {
    SCOPED_TRACE(cpu::softmax_isa_name(isa));
    std::vector<float> e(xe.size());
    cpu::softmax_vec_exp16(isa, xe.data(), e.data(), int64_t(xe.size()));
    double worst = 0;
    for (size_t i = 0; i + 6 < xe.size(); ++i) worst = std::max(worst, ulps(e[i], std::exp(double(xe[i]))));
    EXPECT_LE(worst, 3.0);
    const size_t s = xe.size() - 6;
    EXPECT_EQ(e[s + 0], 1.0f);
    EXPECT_EQ(e[s + 1], 0.0f);
    EXPECT_EQ(e[s + 2], 0.0f);
    EXPECT_TRUE(std::isnan(e[s + 3]));
    EXPECT_GT(e[s + 4], 0.0f);  // a subnormal result, not flushed
    EXPECT_EQ(e[s + 5], 0.0f);
  }
}

// The float exp of the epilogues (a polynomial on the host) against double exp:
// within 2 ulp over the whole range softmax uses, subnormal results included,
// and the special values exact.
TEST(SoftmaxOps, ExpAccFloatWithinTwoUlp) {
  double worst = 0;
  for (float x = -103.0f; x < 88.7f; x += 0.0137f) worst = std::max(worst, ulps(ops::exp_acc(x), std::exp(double(x))));
  EXPECT_LE(worst, 2.0);
  EXPECT_EQ(ops::exp_acc(0.0f), 1.0f);
  EXPECT_EQ(ops::exp_acc(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(ops::exp_acc(-200.0f), 0.0f);
  EXPECT_EQ(ops::exp_acc(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(ops::exp_acc(89.0f), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(ops::exp_acc(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_GT(ops::exp_acc(-100.0f), 0.0f);  // a subnormal result, not flushed
}

}  // namespace

namespace segred::cpu {
// Test hook of src/cpu/softmax_fwd.cpp: whether the spatial forward of this plan
// and problem prefetches its next blocks into L2 only (prefetcht2).
bool softmax_spatial_prefetch_l2(const Plan& plan, const SoftmaxProblem& p);
}  // namespace segred::cpu

namespace {

// The spatial forward's kernel that prefetches the next block into L2 only
// (session 12, softmax_fwd_kernels.inc run): rows 4 KiB apart (inner * size a
// multiple of 4096: every dtype, both ops; W = 1 KiB rows with several tiles and
// blocks, and a long D) and 16-bit softmax tiles of 512 columns
// (128 KiB of exps per block: [2, 300, 700], whose partial tile of 188 columns
// follows a whole one); float32 / float64 and log_softmax at [2, 300, 700] keep
// the prefetcht0 kernel. Which kernel each call takes is asserted through the
// kernel's own rule (the hook), so the shapes keep reaching the kernel they are
// here for; each against the float64 reference on every ISA build with both
// store modes, with -inf prefixes across blocks, +inf, NaN and the max in late
// blocks. (A prefetch cannot change a result: what this catches is the kernel
// instantiated for kPfL2 computing anything but the other's values.)
TYPED_TEST(SoftmaxDtype, SpatialPrefetchToL2KernelAgainstReference) {
  using T = TypeParam;
  IsaAndStreamScope restore;
  Rng rng;
  SEED_TRACE(rng);
  const DType dt = dtype_of<T>();
  const int64_t i4k = 4096 / int64_t(sizeof(T));  // inner of rows 4 KiB apart
  struct Case {
    Shape shape;
    bool l2_softmax, l2_log;  // the kernel each op must take
  };
  const bool half = sizeof(T) == 2;
  const std::vector<Case> cases = {
      {{2, 100, i4k}, true, true},        // D <= 512: 1 KiB rows, 4 tiles per outer index, 2-7 blocks
      {{1, 560, i4k}, true, true},        // D > 512: narrower tiles (W = 128 but float64), 9-35 blocks
      {{2, 300, 700}, half, false},       // 16-bit softmax at W = 512; the others at t0
  };
  std::vector<std::vector<double>> xs, gs;
  for (const Case& c : cases) {
    for (bool log : {false, true}) {
      const SoftmaxProblem p = make_softmax_problem(c.shape, 1, dt, Direction::Fwd, log);
      EXPECT_EQ(cpu::softmax_spatial_prefetch_l2(plan_softmax(p), p), log ? c.l2_log : c.l2_softmax)
          << shape_string(c.shape) << (log ? " log_softmax" : " softmax");
    }
    const int64_t O = c.shape[0], D = c.shape[1], I = c.shape[2];
    ASSERT_GT(D, 64);  // several statistics blocks (R <= 64): the exps pass prefetches the next one
    auto x = rng.values(size_t(O * D * I), 6.0);
    auto at = [&](int64_t o, int64_t d, int64_t j) -> double& { return x[size_t((o * D + d) * I + j)]; };
    const int64_t last = O - 1;
    for (int64_t d = 0; d < D / 2 + 1; ++d) at(0, d, 5) = -kInf;  // -inf prefix across blocks
    at(0, D - 1, I - 3) = 40.0;                                      // the max in the last block, last tile
    at(0, D - 2, 7) = kInf;                                          // +inf late: NaN
    at(last, D - 1, 9) = kNaN;                                       // NaN in the last row: NaN
    at(last, 70, I - 1) = -50.0;                                     // a low value in the partial tile
    xs.push_back(x);
    gs.push_back(rng.grads(x.size()));
  }
  check_cases_every_isa_and_store<T>(cases, xs, gs);
}

}  // namespace
