// Test helpers for the segment_reduce suites: tensors from float64 values,
// metadata, seeds, tolerances derived from the dtype, and one checker that runs
// forward and backward of a layout against the float64 reference
// (src/reference/segment_reduce_ref.h).
//
// Tolerances (shared/TESTING.md): max/min forward exact; otherwise bounded by the
// error of a plain computation in the same precision: u_st (unit roundoff of the
// stored dtype) for the final rounding, plus (n + c) * u_acc (float32, or float64
// for double data) times the sum of magnitudes for the accumulation. The
// reference is computed on the inputs already rounded to the dtype.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "segred/segred.h"
#include "src/reference/segment_reduce_ref.h"

namespace segred::testing {

inline constexpr DType kFloatTypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};
inline const char* const kReduces[] = {"sum", "mean", "max", "min", "prod", "amax", "amin"};

// The CUDA suites (test_cuda_segment_reduce*.cpp): device 0; a test skips without a GPU.
inline const DeviceRef kGpu{Device::CUDA, 0};
#define SEGRED_NEED_GPU() \
  if (::segred::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device present"

// The reference's name for a reduce ("amax" -> "max").
inline std::string canonical(const std::string& r) {
  if (r == "amax") return "max";
  if (r == "amin") return "min";
  return r;
}
inline bool is_tie_reduce(const std::string& r) { return canonical(r) == "max" || canonical(r) == "min"; }

// Seed: SEGRED_SEED from the environment, else fresh per call. Always put it in a
// SCOPED_TRACE so a failure prints it.
inline uint64_t fresh_seed() {
  if (const char* s = std::getenv("SEGRED_SEED")) return std::strtoull(s, nullptr, 10);
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd();
}
#define SEGRED_SEED_TRACE(seed) SCOPED_TRACE(::testing::Message() << "seed=" << (seed) << " (rerun with SEGRED_SEED=" << (seed) << ")")

// Unit roundoff of the stored dtype and of its accumulation type.
inline double unit_roundoff(DType t) {
  switch (t) {
    case DType::Float64: return std::ldexp(1.0, -53);
    case DType::Float32: return std::ldexp(1.0, -24);
    case DType::Float16: return std::ldexp(1.0, -11);
    case DType::BFloat16: return std::ldexp(1.0, -8);
    default: return 0;
  }
}
inline double acc_roundoff(DType t) { return t == DType::Float64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24); }
inline double denorm(DType t) {
  switch (t) {
    case DType::Float64: return std::numeric_limits<double>::denorm_min();
    case DType::Float32: return double(std::numeric_limits<float>::denorm_min());
    case DType::Float16: return std::ldexp(1.0, -24);
    case DType::BFloat16: return std::ldexp(1.0, -133);
    default: return 0;
  }
}

// v rounded to dtype t (exactly what storing it does).
inline double round_to(DType t, double v) {
  switch (t) {
    case DType::Float64: return v;
    case DType::Float32: return double(float(v));
    case DType::Float16: return double(to_float(to_half(float(v))));
    case DType::BFloat16: return double(to_float(to_bfloat16(float(v))));
    default: return v;
  }
}
inline std::vector<double> rounded(DType t, std::vector<double> v) {
  for (auto& x : v) x = round_to(t, x);
  return v;
}

inline void store_value(DType t, void* base, int64_t i, double v) {
  switch (t) {
    case DType::Float64: static_cast<double*>(base)[i] = v; break;
    case DType::Float32: static_cast<float*>(base)[i] = float(v); break;
    case DType::Float16: static_cast<half_t*>(base)[i] = to_half(float(v)); break;
    case DType::BFloat16: static_cast<bfloat16_t*>(base)[i] = to_bfloat16(float(v)); break;
    case DType::Int32: static_cast<int32_t*>(base)[i] = int32_t(v); break;
    case DType::Int64: static_cast<int64_t*>(base)[i] = int64_t(v); break;
  }
}
inline double load_value(DType t, const void* base, int64_t i) {
  switch (t) {
    case DType::Float64: return static_cast<const double*>(base)[i];
    case DType::Float32: return static_cast<const float*>(base)[i];
    case DType::Float16: return to_float(static_cast<const half_t*>(base)[i]);
    case DType::BFloat16: return to_float(static_cast<const bfloat16_t*>(base)[i]);
    case DType::Int32: return static_cast<const int32_t*>(base)[i];
    case DType::Int64: return double(static_cast<const int64_t*>(base)[i]);
  }
  return 0;
}

// A contiguous tensor holding v (row-major for `shape`).
inline Tensor make_tensor(const std::vector<double>& v, const Shape& shape, DType t) {
  Tensor out = Tensor::empty(shape, t);
  EXPECT_EQ(int64_t(v.size()), out.numel());
  for (int64_t i = 0; i < out.numel(); ++i) store_value(t, out.data(), i, v[size_t(i)]);
  return out;
}
inline Tensor filled(const Shape& shape, DType t, double v) {
  Tensor out = Tensor::empty(shape, t);
  for (int64_t i = 0; i < out.numel(); ++i) store_value(t, out.data(), i, v);
  return out;
}
inline Tensor make_index(const std::vector<int64_t>& v, const Shape& shape, DType t) {
  Tensor out = Tensor::empty(shape, t);
  EXPECT_EQ(int64_t(v.size()), out.numel());
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (t == DType::Int32) out.ptr<int32_t>()[i] = int32_t(v[size_t(i)]);
    else out.ptr<int64_t>()[i] = v[size_t(i)];
  }
  return out;
}
// Values of any view (any strides) in row-major order, as float64.
inline std::vector<double> to_vec(const TensorView& t) {
  Tensor c = Tensor::contiguous_copy(t);
  std::vector<double> v(size_t(c.numel()));
  for (int64_t i = 0; i < c.numel(); ++i) v[size_t(i)] = load_value(t.dtype, c.data(), i);
  return v;
}
inline bool same_bits(const TensorView& a, const TensorView& b) {
  if (a.sizes != b.sizes || a.dtype != b.dtype) return false;
  Tensor ca = Tensor::contiguous_copy(a), cb = Tensor::contiguous_copy(b);
  return std::memcmp(ca.data(), cb.data(), size_t(ca.numel() * dtype_size(a.dtype))) == 0;
}

// A segment layout as the test describes it: the data shape, the axis argument,
// per-row offsets (valid), and whether the call passes lengths or offsets.
struct Layout {
  Shape shape;
  int64_t axis = 0;  // as passed (may be negative)
  int64_t S = 0;
  std::vector<int64_t> offsets;  // outer * (S + 1)
  bool use_lengths = true;
  DType index_dtype = DType::Int64;
  std::optional<double> initial;

  int64_t ax() const { return axis < 0 ? axis + int64_t(shape.size()) : axis; }
  int64_t outer() const {
    int64_t o = 1;
    for (int64_t d = 0; d < ax(); ++d) o *= shape[size_t(d)];
    return o;
  }
  int64_t L() const { return shape[size_t(ax())]; }
  int64_t inner() const {
    int64_t n = 1;
    for (size_t d = size_t(ax()) + 1; d < shape.size(); ++d) n *= shape[d];
    return n;
  }
  Shape out_shape() const {
    Shape s = shape;
    s[size_t(ax())] = S;
    return s;
  }
  Shape meta_shape() const {
    Shape s(shape.begin(), shape.begin() + ax());
    s.push_back(use_lengths ? S : S + 1);
    return s;
  }
  std::vector<int64_t> meta_values() const {
    std::vector<int64_t> v;
    for (int64_t r = 0; r < outer(); ++r)
      for (int64_t s = 0; s < (use_lengths ? S : S + 1); ++s) {
        const int64_t* o = offsets.data() + r * (S + 1);
        v.push_back(use_lengths ? o[s + 1] - o[s] : o[s]);
      }
    return v;
  }
  Tensor meta() const { return make_index(meta_values(), meta_shape(), index_dtype); }
  reference::Problem problem() const { return {outer(), L(), inner(), S, offsets, initial}; }
  int64_t seg_len(int64_t r, int64_t s) const { return offsets[size_t(r * (S + 1) + s + 1)] - offsets[size_t(r * (S + 1) + s)]; }
};

// Segments pointing at `meta` (which must outlive the returned value).
inline Segments segments_of(const Layout& lay, const Tensor& meta) {
  Segments seg;
  if (lay.use_lengths) seg.lengths = meta.view();
  else seg.offsets = meta.view();
  seg.axis = lay.axis;
  seg.initial = lay.initial;
  return seg;
}

// Layout from lengths rows (offsets start at 0, each row sums to L).
inline Layout from_lengths(Shape shape, int64_t axis, const std::vector<std::vector<int64_t>>& rows) {
  Layout l;
  l.shape = std::move(shape);
  l.axis = axis;
  l.S = rows.empty() ? 0 : int64_t(rows[0].size());
  for (const auto& row : rows) {
    int64_t acc = 0;
    l.offsets.push_back(0);
    for (auto n : row) l.offsets.push_back(acc += n);
  }
  l.use_lengths = true;
  return l;
}
inline Layout from_offsets(Shape shape, int64_t axis, const std::vector<std::vector<int64_t>>& rows) {
  Layout l;
  l.shape = std::move(shape);
  l.axis = axis;
  l.S = rows.empty() ? 0 : int64_t(rows[0].size()) - 1;
  for (const auto& row : rows) l.offsets.insert(l.offsets.end(), row.begin(), row.end());
  l.use_lengths = false;
  return l;
}

// Random lengths in [0, max_len] summing exactly to L (the last one takes the rest).
inline std::vector<int64_t> random_lengths(std::mt19937_64& rng, int64_t L, int64_t max_len) {
  std::vector<int64_t> v;
  std::uniform_int_distribution<int64_t> d(0, max_len);
  int64_t left = L;
  while (left > 0) {
    const int64_t n = std::min(left, d(rng));
    v.push_back(n);
    left -= n;
  }
  v.push_back(0);  // an empty segment at the end, always
  return v;
}

// Random data suited to a reduce, rounded to the dtype, never all zeros.
//  sum/mean: uniform [-2, 2];  max/min: a coarse grid k/4 in [-2, 2] with signed
//  zeros, so that ties occur;  prod: +-[0.9, 1.1] so products of thousands stay finite.
inline std::vector<double> random_data(std::mt19937_64& rng, int64_t n, const std::string& reduce, DType t) {
  std::vector<double> v(static_cast<size_t>(n));
  const std::string r = canonical(reduce);
  std::uniform_real_distribution<double> u(-2, 2), p(0.9, 1.1);
  std::uniform_int_distribution<int> k(-8, 8), coin(0, 1);
  for (auto& x : v) {
    if (r == "max" || r == "min") {
      const int q = k(rng);
      x = q == 0 ? (coin(rng) ? -0.0 : 0.0) : q / 4.0;
    } else if (r == "prod") {
      x = coin(rng) ? p(rng) : -p(rng);
    } else {
      x = u(rng);
    }
  }
  return rounded(t, v);
}

// Upstream gradients: the pattern -2.5, -1, 0, 1, 2.5, random signed, per output
// element (every sign in one call), or a constant.
inline std::vector<double> mixed_grads(std::mt19937_64& rng, int64_t n, DType t) {
  std::vector<double> v(static_cast<size_t>(n));
  std::uniform_real_distribution<double> u(-3, 3);
  const double pat[] = {-2.5, -1, 0, 1, 2.5};
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = (i % 6 < 5) ? pat[i % 6] : u(rng);
  return rounded(t, v);
}

// Sum of |x| over each segment per feature (plus |initial|), for tolerances.
inline std::vector<double> abs_sums(const Layout& lay, const std::vector<double>& x) {
  reference::Problem p = lay.problem();
  std::vector<double> ax(x.size());
  for (size_t i = 0; i < x.size(); ++i) ax[i] = std::fabs(x[i]);
  if (p.initial) p.initial = std::fabs(*p.initial);
  return reference::forward(p, ax, "sum");
}

inline bool same_value(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

// Forward: got vs the float64 reference on the same (rounded) inputs.
inline void expect_forward(const Layout& lay, DType t, const std::string& reduce, const std::vector<double>& x,
                           const std::vector<double>& got, const std::vector<double>& ref) {
  ASSERT_EQ(got.size(), ref.size());
  const std::string r = canonical(reduce);
  const std::vector<double> as = (r == "sum" || r == "mean") ? abs_sums(lay, x) : std::vector<double>{};
  const double ust = unit_roundoff(t), uacc = acc_roundoff(t);
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 10; ++i) {
    const int64_t inner = lay.inner(), s = int64_t(i) / inner % lay.S, row = int64_t(i) / inner / lay.S;
    const double n = double(lay.seg_len(row, s));
    const double e = ref[i], g = got[i];
    bool ok;
    double tol = 0;
    if (std::isnan(e) || std::isinf(e) || r == "max" || r == "min") {
      ok = same_value(g, e);
    } else {
      if (r == "sum") tol = ust * std::fabs(e) + (n + 2) * uacc * as[i];
      else if (r == "mean") tol = ust * std::fabs(e) + (n + 3) * uacc * as[i] / std::max(1.0, n);
      else tol = (ust + (n + 2) * uacc) * std::fabs(e);
      tol = 2 * tol + denorm(t);
      ok = std::fabs(g - e) <= tol;
    }
    if (!ok) {
      ++failures;
      ADD_FAILURE() << reduce << " forward [" << dtype_name(t) << "] out[" << i << "] (row " << row << ", segment "
                    << s << ", n=" << n << "): got " << g << ", expected " << e << " (tol " << tol << ")";
    }
  }
}

// Backward: got vs the reference. Tolerance: sum and first/last exact, split and
// mean one division, prod a chain of n products.
inline void expect_backward(const Layout& lay, DType t, const std::string& reduce, const std::string& tie,
                            const std::vector<double>& got, const std::vector<double>& ref) {
  ASSERT_EQ(got.size(), ref.size());
  const std::string r = canonical(reduce);
  const double ust = unit_roundoff(t), uacc = acc_roundoff(t);
  // Segment length per element (0 outside segments) for the prod bound.
  std::vector<int64_t> len(got.size(), 0);
  if (r == "prod") {
    const int64_t inner = lay.inner(), L = lay.L();
    for (int64_t row = 0; row < lay.outer(); ++row)
      for (int64_t s = 0; s < lay.S; ++s) {
        const int64_t b = lay.offsets[size_t(row * (lay.S + 1) + s)], e = lay.offsets[size_t(row * (lay.S + 1) + s + 1)];
        for (int64_t j = b; j < e; ++j)
          for (int64_t f = 0; f < inner; ++f) len[size_t((row * L + j) * inner + f)] = e - b;
      }
  }
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 10; ++i) {
    const double e = ref[i], g = got[i];
    double tol = 0;
    if (r == "mean" || ((r == "max" || r == "min") && tie == "split")) tol = 2 * (ust + 2 * uacc) * std::fabs(e) + denorm(t);
    else if (r == "prod") tol = 2 * (ust + double(len[i] + 3) * uacc) * std::fabs(e) + denorm(t);
    const bool ok = (std::isnan(e) || std::isinf(e) || tol == 0) ? same_value(g, e) : std::fabs(g - e) <= tol;
    if (!ok) {
      ++failures;
      ADD_FAILURE() << reduce << " backward tie=" << tie << " [" << dtype_name(t) << "] grad_input[" << i << "]: got "
                    << g << ", expected " << e << " (tol " << tol << ")";
    }
  }
}

struct CheckOptions {
  bool constant_grads = true;  // also run with g = -2.5, -1, 0, 1, 2.5 everywhere
  bool ref_backward = true;    // compare backward to the reference (O(n^2) for prod)
  bool check_poison = true;    // second call with a sentinel prefill must give the same bits
};

// Runs forward (out prefilled with NaN, then with a sentinel: both fully written,
// same bits) and backward for every tie of this reduce and every gradient
// pattern, against the reference. Returns the forward output.
inline Tensor check_reduce(const Layout& lay, DType t, const std::string& reduce, const std::vector<double>& x_in,
                           std::mt19937_64& rng, const CheckOptions& opt = {}) {
  const std::vector<double> x = rounded(t, x_in);
  SCOPED_TRACE(::testing::Message() << "reduce=" << reduce << " dtype=" << dtype_name(t) << " shape="
                                    << shape_string(lay.shape) << " axis=" << lay.axis << " S=" << lay.S
                                    << (lay.use_lengths ? " lengths" : " offsets") << " index="
                                    << dtype_name(lay.index_dtype));
  const Tensor data = make_tensor(x, lay.shape, t);
  const Tensor meta = lay.meta();
  const Segments seg = segments_of(lay, meta);
  const Reduce red = parse_reduce(reduce);
  const reference::Problem prob = lay.problem();

  Tensor out = filled(lay.out_shape(), t, NAN);
  segment_reduce_out(data, red, seg, out);
  const std::vector<double> got = to_vec(out);
  expect_forward(lay, t, reduce, x, got, reference::forward(prob, x, canonical(reduce)));
  if (opt.check_poison) {
    Tensor out2 = filled(lay.out_shape(), t, 7777.0);
    segment_reduce_out(data, red, seg, out2);
    EXPECT_TRUE(same_bits(out, out2)) << "forward: an output element was not written (sentinel survived) or the "
                                         "result is not deterministic";
  }
  Tensor alloc = segment_reduce(data, red, seg);
  EXPECT_TRUE(same_bits(out, alloc)) << "segment_reduce and segment_reduce_out differ";

  std::vector<std::vector<double>> grads = {mixed_grads(rng, out.numel(), t)};
  if (opt.constant_grads)
    for (double c : {-2.5, -1.0, 0.0, 1.0, 2.5}) grads.emplace_back(size_t(out.numel()), c);
  const std::vector<std::string> ties = is_tie_reduce(reduce) ? std::vector<std::string>{"split", "first", "last"}
                                                              : std::vector<std::string>{"split"};
  for (const auto& tie : ties)
    for (const auto& gv : grads) {
      SCOPED_TRACE(::testing::Message() << "tie=" << tie << " grad[0]=" << (gv.empty() ? 0.0 : gv[0]));
      const Tensor grad = make_tensor(gv, lay.out_shape(), t);
      Tensor gi = filled(lay.shape, t, NAN);
      segment_reduce_backward_out(grad, out, data, red, seg, parse_tie(tie), gi);
      if (opt.ref_backward)
        expect_backward(lay, t, reduce, tie, to_vec(gi),
                        reference::backward(prob, gv, got, x, canonical(reduce), tie));
      if (opt.check_poison) {
        Tensor gi2 = filled(lay.shape, t, 7777.0);
        segment_reduce_backward_out(grad, out, data, red, seg, parse_tie(tie), gi2);
        EXPECT_TRUE(same_bits(gi, gi2)) << "backward: a grad_input element was not written or not deterministic";
      }
    }
  return out;
}

// The ValueError's message of f(), "no error", or what was thrown instead.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ValueError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no error";
}

// check_reduce for every reduce (and alias) with random data suited to it.
inline void check_all_reduces(const Layout& lay, DType t, std::mt19937_64& rng, const CheckOptions& opt = {}) {
  const int64_t n = numel(lay.shape);
  for (const char* r : kReduces) check_reduce(lay, t, r, random_data(rng, n, r, t), rng, opt);
}

}  // namespace segred::testing
