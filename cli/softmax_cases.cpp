#include "cli/softmax_cases.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

#include "segred/segred.h"
#include "src/cpu/softmax_kernels.h"
#include "src/reference/softmax_ref.h"

namespace segred::cli {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// The upstream gradient of element i: every sign, zero, and values other than 1.
double grad_pattern(size_t i) {
  static const double pattern[] = {1.0, -1.0, 0.0, 0.4, -2.5, 3.0};
  return pattern[i % 6] * (1.0 + double(i % 5) / 8);
}

// Deterministic values in [-a, a] (no RNG: the matrix is the same every run).
std::vector<double> wave(size_t n, double a) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = a * std::sin(0.7 * double(i) + 0.3 * double(i % 13));
  return v;
}

// The special rows of SEMANTICS.md, as rows along the last dim (lastdim path) and
// as columns (spatial path).
const std::vector<std::pair<std::string, std::vector<double>>>& special_rows() {
  static const std::vector<std::pair<std::string, std::vector<double>>> rows = {
      {"all_neg_inf", {-kInf, -kInf, -kInf, -kInf, -kInf}},
      {"nan", {1.0, kNaN, 2.0, -kInf, 0.5}},
      {"nan_among_neg_inf", {-kInf, -kInf, kNaN, -kInf, -kInf}},
      {"pos_inf", {1.0, kInf, 2.0, 3.0, -1.0}},
      {"pos_and_neg_inf", {kInf, -kInf, -kInf, 0.0, kInf}},
      {"some_neg_inf", {-kInf, 1.0, -kInf, 1.0, 0.0}},
      {"one_finite", {-kInf, -kInf, -kInf, 2.0, -kInf}},
      {"large_spread", {800.0, -800.0, 400.0, 0.0, 799.0}},
      {"all_equal", {-3.0, -3.0, -3.0, -3.0, -3.0}},
      {"exact_quarter", {0.0, std::log(3.0), -kInf, -kInf, -kInf}},
  };
  return rows;
}

}  // namespace

const std::vector<SoftmaxInput>& softmax_inputs() {
  static const std::vector<SoftmaxInput> all = [] {
    std::vector<SoftmaxInput> v;
    v.push_back({"random_lastdim", {5, 33}, -1, wave(5 * 33, 4.0)});
    v.push_back({"random_lastdim_3d", {2, 3, 97}, 2, wave(2 * 3 * 97, 6.0)});
    v.push_back({"random_spatial", {3, 17, 10}, 1, wave(3 * 17 * 10, 4.0)});
    v.push_back({"random_spatial_dim0", {33, 6}, 0, wave(33 * 6, 5.0)});
    v.push_back({"random_spatial_neg_dim", {4, 31, 2, 3}, -3, wave(4 * 31 * 6, 3.0)});
    v.push_back({"transposed_lastdim", {9, 14}, 1, wave(9 * 14, 4.0), true});
    v.push_back({"transposed_spatial", {9, 14}, 0, wave(9 * 14, 4.0), true});
    // One row longer than three lastdim blocks, its first block all -inf and its
    // max in the last block: the online (m, s) merge across blocks.
    {
      const int64_t D = 3 * 8192 + 5;
      SoftmaxInput in{"long_row_blocks", {2, D}, 1, wave(size_t(2 * D), 8.0)};
      for (int64_t i = 0; i < 9000; ++i) in.data[size_t(i)] = -kInf;
      in.data[size_t(D - 2)] = 20.0;
      v.push_back(in);
    }
    // Columns longer than a spatial statistics block, tile narrower than inner
    // (on CUDA: spatial_staged in the 2- and 4-byte dtypes, a cluster over D;
    // spatial in float64).
    // On the CPU with both L2 sizes the plan tells apart (session 26): 512 KiB takes
    // spatial_stream forward and whole rows backward, 2 MiB spatial with a long tile of
    // exps forward and 1024 columns backward.
    for (const int64_t l2 : {int64_t(512) << 10, int64_t(2) << 20}) {
      const int64_t D = 1100, inner = 300;
      SoftmaxInput in{std::string("long_columns_tiles_l2_") + (l2 < (int64_t(1) << 20) ? "512k" : "2m"),
                      {D, inner}, 0, wave(size_t(D * inner), 8.0)};
      for (int64_t d = 0; d < 600; ++d) in.data[size_t(d * inner + 7)] = -kInf;
      in.data[size_t(1000 * inner + 7)] = 15.0;
      in.cpu_l2 = l2;
      v.push_back(in);
    }
    // Columns of 5000 over dim 0, 64 wide (session 21): on CUDA the backward's g
    // and y do not fit 16 ranks at 128-byte rows, so it stages y alone (Plan
    // variant "stage_y") in the 2- and 4-byte dtypes; column 7 is -inf in its first
    // 600 rows (ranks 0 and 1) and has its max (15) in row 4000 (rank 12).
    {
      const int64_t D = 5000, inner = 64;
      SoftmaxInput in{"staged_y_columns", {D, inner}, 0, wave(size_t(D * inner), 8.0)};
      for (int64_t d = 0; d < 600; ++d) in.data[size_t(d * inner + 7)] = -kInf;
      in.data[size_t(4000 * inner + 7)] = 15.0;
      v.push_back(in);
    }
    // Columns of 300 over dim 1 of [2, 300, 24]: on CUDA the staged spatial
    // kernel (spatial_staged) in the 2- and 4-byte dtypes (vector loads: 24 % 4 ==
    // 0; D >= 256, so both directions; the backward over a cluster of 2), its
    // column tiles straddling the two outer slabs (float32: 32 columns) or ending
    // in inactive columns (16-bit: 64); float64 takes spatial. Special columns:
    // in slab 0, column 0 all -inf and column 1 one NaN; in slab 1, column 2 one
    // +inf (last row), column 3 every other row -inf, column 4 its max (20) in the
    // last row.
    {
      const int64_t O = 2, D = 300, I = 24;
      SoftmaxInput in{"staged_columns", {O, D, I}, 1, wave(size_t(O * D * I), 6.0)};
      auto at = [&](int64_t o, int64_t d, int64_t c) -> double& { return in.data[size_t((o * D + d) * I + c)]; };
      for (int64_t d = 0; d < D; ++d) at(0, d, 0) = -kInf;
      at(0, 150, 1) = kNaN;
      at(1, 299, 2) = kInf;
      for (int64_t d = 0; d < D; d += 2) at(1, d, 3) = -kInf;
      at(1, D - 1, 4) = 20.0;
      v.push_back(in);
    }
    // Special rows, both layouts.
    const auto& rows = special_rows();
    const int64_t R = int64_t(rows.size()), D = 5;
    SoftmaxInput last{"special_rows_lastdim", {R, D}, 1, {}};
    SoftmaxInput spat{"special_rows_spatial", {D, R}, 0, std::vector<double>(size_t(R * D))};
    for (int64_t r = 0; r < R; ++r)
      for (int64_t d = 0; d < D; ++d) {
        last.data.push_back(rows[size_t(r)].second[size_t(d)]);
        spat.data[size_t(d * R + r)] = rows[size_t(r)].second[size_t(d)];
      }
    v.push_back(last);
    v.push_back(spat);
    for (const auto& [name, row] : rows) {
      v.push_back({"row_" + name + "_lastdim", {1, D}, 1, row});
      v.push_back({"row_" + name + "_spatial", {D, 1, 2}, 0, {}});
      for (double x : row) v.back().data.insert(v.back().data.end(), {x, x});
    }
    v.push_back({"dim_size_1_lastdim", {4, 1}, 1, {3.0, -kInf, 1e30, -2.0}});
    v.push_back({"dim_size_1_spatial", {1, 4}, 0, {3.0, 0.0, 1e30, -2.0}});
    v.push_back({"dim_size_0", {3, 0}, 1, {}});
    v.push_back({"dim_size_0_spatial", {0, 3}, 0, {}});
    v.push_back({"empty_tensor", {0, 4}, 1, {}});
    v.push_back({"zero_dim", {}, 0, {2.5}});
    return v;
  }();
  return all;
}

std::vector<SoftmaxCase> softmax_cases() {
  std::vector<SoftmaxCase> out;
  for (const SoftmaxInput& in : softmax_inputs())
    for (bool log : {false, true})
      for (const char* dt : {"float64", "float32", "float16", "bfloat16"}) {
        out.push_back({in.name + (log ? "/log_softmax/" : "/softmax/") + dt, &in, log, dt});
      }
  return out;
}

double softmax_tolerance(const std::string& dtype) {
  return dtype == "float64" ? 1e-12 : dtype == "float32" ? 4e-6 : dtype == "float16" ? 2e-3 : 1.6e-2;
}

namespace {

struct Outcome {
  double err = 0;
  bool ok = true;
  std::string detail;
  std::set<std::string> paths;
};

bool has_softmax_paths(DeviceRef dev) { return has_paths_for(dev, {"softmax", "log_softmax"}); }

// A host array moved to `dev` (a no-op on the CPU), keeping its strides.
struct OnDevice {
  Tensor copy;
  TensorView view;
  OnDevice(const TensorView& host, const Shape& storage, DeviceRef dev) : view(host) {
    if (dev.type == Device::CPU) return;
    copy = Tensor::copy_to(TensorView(host.data, host.dtype, storage), dev);
    view = TensorView(copy.data(), host.dtype, host.sizes, host.strides, dev);
  }
};

template <class T>
Outcome run_case(const SoftmaxCase& c, DeviceRef dev) {
  const SoftmaxInput& in = *c.input;
  Outcome o;
  const DType dt = dtype_of<T>();
  const size_t n = size_t(numel(in.shape));
  // Values rounded to T once; the reference sees the rounded values.
  std::vector<T> xd(n), gd(n);
  std::vector<double> x(n), g(n);
  for (size_t i = 0; i < n; ++i) {
    xd[i] = store<T>(acc_t<T>(in.data[i]));
    x[i] = double(load(xd[i]));
    gd[i] = store<T>(acc_t<T>(grad_pattern(i)));
    g[i] = double(load(gd[i]));
  }
  // The transposed form: storage [cols, rows], viewed as [rows, cols].
  std::vector<T> xs = xd, gs = gd;
  TensorView xv(xd.data(), dt, in.shape), gv(gd.data(), dt, in.shape);
  if (in.transposed) {
    const int64_t rows = in.shape[0], cols = in.shape[1];
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        xs[size_t(j * rows + i)] = xd[size_t(i * cols + j)];
        gs[size_t(j * rows + i)] = gd[size_t(i * cols + j)];
      }
    xv = TensorView(xs.data(), dt, in.shape, {1, rows});
    gv = TensorView(gs.data(), dt, in.shape, {1, rows});
  }
  const Shape storage = in.transposed ? Shape{in.shape[1], in.shape[0]} : in.shape;
  const OnDevice xdev(xv, storage, dev), gdev(gv, storage, dev);
  const SoftmaxProblem p = make_softmax_problem(in.shape, in.dim, dt);
  const reference::SoftmaxShape rs{p.outer, p.dim_size, p.inner};
  const double tol = softmax_tolerance(c.dtype);
  auto compare = [&](const char* what, const T* got, const std::vector<double>& want) {
    for (size_t i = 0; i < want.size(); ++i) {
      const double v = double(load(got[i]));
      if (!close_enough(v, want[i], tol, o.err) && o.ok) {
        o.ok = false;
        o.detail = std::string(what) + "[" + std::to_string(i) + "] = " + std::to_string(v) + ", expected " +
                   std::to_string(want[i]);
      }
    }
  };

  struct L2Scope {  // the input's L2 for the CPU plan, restored on exit
    int64_t saved = cpu::softmax_l2_override().load();
    explicit L2Scope(int64_t v) {
      if (v >= 0) cpu::softmax_l2_override() = v;
    }
    ~L2Scope() { cpu::softmax_l2_override() = saved; }
  } l2_scope(dev.type == Device::CPU ? in.cpu_l2 : -1);
  TraceSession trace;
  const Tensor ydev = c.log ? log_softmax(xdev.view, in.dim) : softmax(xdev.view, in.dim);
  const Tensor y = dev.type == Device::CPU ? ydev : Tensor::copy_to(ydev, {});
  if (y.sizes() != in.shape) {
    o.ok = false;
    o.detail = "forward shape " + shape_string(y.sizes());
  }
  compare("forward", y.ptr<T>(), reference::softmax_forward(rs, x, c.log));
  std::vector<double> yv(n);
  for (size_t i = 0; i < n; ++i) yv[i] = double(load(y.ptr<T>()[i]));
  const Tensor gidev = c.log ? log_softmax_backward(gdev.view, ydev, in.dim) : softmax_backward(gdev.view, ydev, in.dim);
  const Tensor gi = dev.type == Device::CPU ? gidev : Tensor::copy_to(gidev, {});
  compare("backward", gi.ptr<T>(), reference::softmax_backward(rs, g, yv, c.log));
  const auto rec = trace.records();
  for (const auto& r : rec) o.paths.insert(r.path);
  // Empty tensors launch nothing; everything else launches a forward and a
  // backward path (the CPU exactly one of each).
  size_t fwd = 0, bwd = 0;
  for (const auto& r : rec) (r.direction == Direction::Fwd ? fwd : bwd)++;
  const bool launches_ok = n == 0 ? rec.empty()
                           : dev.type == Device::CPU ? (fwd == 1 && bwd == 1)
                                                     : (fwd >= 1 && bwd >= 1);
  if (!launches_ok && o.ok) {
    o.ok = false;
    o.detail = std::to_string(fwd) + " forward and " + std::to_string(bwd) + " backward launches";
  }
  return o;
}

}  // namespace

size_t softmax_case_count(DeviceRef dev) {
  return has_softmax_paths(dev) ? softmax_cases().size() : 0;
}

void run_softmax_cases(DeviceRef dev, const std::function<void(Row)>& record) {
  if (!has_softmax_paths(dev)) return;
  for (const SoftmaxCase& c : softmax_cases()) {
    Outcome o;
    try {
      if (c.dtype == "float64") o = run_case<double>(c, dev);
      else if (c.dtype == "float32") o = run_case<float>(c, dev);
      else if (c.dtype == "float16") o = run_case<half_t>(c, dev);
      else o = run_case<bfloat16_t>(c, dev);
    } catch (const std::exception& e) {
      o.ok = false;
      o.detail = std::string("threw: ") + e.what();
    }
    std::string path;
    for (const auto& p : o.paths) path += (path.empty() ? "" : ",") + p;
    if (o.ok && path.empty()) o.detail = "empty: no kernel ran";
    record(Row{c.name, c.log ? "log_softmax" : "softmax", device_name(dev), path, o.err,
               o.ok ? "ok" : "WRONG", o.detail});
  }
}


// ---- materialized cases (segred align) --------------------------------------

namespace {
DType dtype_named(const std::string& name) {
  for (DType t : {DType::Float64, DType::Float32, DType::Float16, DType::BFloat16})
    if (dtype_name(t) == name) return t;
  return DType::Float64;
}
}  // namespace

SoftmaxMaterialized materialize(const SoftmaxCase& c) {
  const SoftmaxInput& in = *c.input;
  const DType dt = dtype_named(c.dtype);
  const size_t n = size_t(numel(in.shape));
  SoftmaxMaterialized m;
  for (size_t i = 0; i < n; ++i) {
    m.x.push_back(round_to_dtype(in.data[i], dt));
    m.grad.push_back(round_to_dtype(grad_pattern(i), dt));
  }
  const SoftmaxProblem p = make_softmax_problem(in.shape, in.dim, dt);
  const reference::SoftmaxShape rs{p.outer, p.dim_size, p.inner};
  m.expected_out = reference::softmax_forward(rs, m.x, c.log);
  for (double v : m.expected_out) m.output.push_back(round_to_dtype(v, dt));
  m.expected_grad = reference::softmax_backward(rs, m.grad, m.output, c.log);
  return m;
}

// ---- boundary cases (--large) ----------------------------------------------

std::string LargeSoftmaxCase::cuda_path() const {
  return op() + (dir == Direction::Fwd ? ".fwd" : ".bwd") + ".cuda." + kernel + ".i64";
}

std::vector<LargeSoftmaxCase> softmax_large_cases(const BoundarySizes& z) {
  // float16 values whose results are exact (those of tests/cpp/test_cuda_softmax.cpp,
  // CudaSoftmaxHuge.*): big = 0xfbfb = -65376 (exp(big - m) is 0 exactly, and
  // big - ln2 rounds back to big), one = 0x3c3c = 1.05859375, halfp = 0x3838 = 0.52734375.
  const double big = -65376.0, one = 1.05859375, halfp = 0.52734375;
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<LargeSoftmaxCase> out;
  auto add = [&](const std::string& kernel, const std::string& shape_name, const Shape& shape, int64_t dim,
                 const std::string& boundary, bool log, Direction dir, FilledArray a, FilledArray b,
                 std::vector<int64_t> extra) {
    LargeSoftmaxCase c;
    c.kernel = kernel;
    c.shape_name = shape_name;
    c.shape = shape;
    c.dim = dim;
    c.log = log;
    c.dir = dir;
    c.a = std::move(a);
    c.b = std::move(b);
    c.boundary = boundary;
    // The CPU has one path per layout and no index-width variants: the spatial
    // shape (past 2^32) and the last-dim row (past 2^31) reach both; the
    // lastdim_warp shapes would repeat cpu.lastdim and the spatial_staged one
    // cpu.spatial, so they run on CUDA only.
    c.cpu = kernel != "lastdim_warp" && kernel != "spatial_staged";
    for (const auto* arr : {&c.a, &c.b})
      for (const Patch& p : arr->patches) extra.push_back(p.at);
    c.checks = boundary_points(c.numel(), extra);
    c.name = "large/" + kernel + "/" + shape_name + "/" + c.op() + (dir == Direction::Fwd ? ".fwd" : ".bwd") +
             "/float16";
    out.push_back(std::move(c));
  };
  const Direction F = Direction::Fwd, B = Direction::Bwd;
  // spatial: [1, 2, L] over dim 1, 2^32 + 2 elements. Column c holds elements c
  // (d = 0) and L + c (d = 1): the shape on which torch 2.11's spatial backward
  // (uint32 offsets) is wrong at both ends.
  {
    const int64_t L = z.spatial_cols, n = 2 * L;
    const Shape s{1, 2, L};
    const std::string sn = "1x2x" + std::to_string(L) + ".dim1";
    const std::vector<int64_t> cols = {1, L + 1, L - 2, n - 2};  // interior columns 1 and L-2
    // forward: interior (one, one) -> 0.5 / -ln2; column 0 (0, big) -> (1, 0);
    // last column (big, 2) -> (0, 1) / (big - 2 -> big, 0).
    const FilledArray x{one, {{0, 0.0}, {L, big}, {L - 1, big}, {n - 1, 2.0}}};
    for (bool log : {false, true}) add("spatial", sn, s, 1, "UINT32_MAX", log, F, x, {}, cols);
    // softmax backward: interior g = 0 -> 0; column 0 y (.5, .5) g (2, -3) -> (1.25, -1.25);
    // last y (.25, .75) g (4, -2) -> (1.125, -1.125).
    add("spatial", sn, s, 1, "UINT32_MAX", false, B, {0.0, {{0, 2.0}, {L, -3.0}, {L - 1, 4.0}, {n - 1, -2.0}}},
        {halfp, {{0, 0.5}, {L, 0.5}, {L - 1, 0.25}, {n - 1, 0.75}}}, cols);
    // log_softmax backward: interior g = 0 -> 0; column 0 y (0, big) g (2, -3) -> (3, -3);
    // last y (big, 0) g (-5, .5) -> (-5, 5).
    add("spatial", sn, s, 1, "UINT32_MAX", true, B, {0.0, {{0, 2.0}, {L, -3.0}, {L - 1, -5.0}, {n - 1, 0.5}}},
        {halfp, {{0, 0.0}, {L, big}, {L - 1, big}, {n - 1, 0.0}}}, cols);
  }
  // spatial_staged: [1, 325, C] over dim 1, 2^32 + 4 elements (C = 13215284, a
  // multiple of 4: the staged kernel needs vector loads; D = 325 >= 256 stages
  // both directions, the backward over a cluster of 2; rows of 325 are not a
  // multiple of the block's thread rows). Column c holds elements d*C + c; the
  // in-slab offsets d*C pass 2^31 and 2^32 in every column. Interior columns
  // are uniform: softmax 1/325 and log_softmax -ln 325 in float16 (far from a
  // rounding tie: float and float64 round to the same float16).
  {
    const int64_t D = 325, L = z.staged_cols, n = D * L;
    const Shape s{1, D, L};
    const std::string sn = "1x325x" + std::to_string(L) + ".dim1";
    const int64_t last = (D - 1) * L;  // column 0's last row
    // Checked besides boundary_points: column 0's second and last rows, column 1's
    // last row, the last column's first, second and second-to-last rows.
    const std::vector<int64_t> cols = {L, last, last + 1, L - 1, 2 * L - 1, n - 1 - L};
    // forward: every element big but 0 (element 0) and 2 (element n-1): column 0
    // -> (1, 0, ..., 0) / (0, big, ...); last column -> (0, ..., 1) / (big - 2 ->
    // big, ..., 0); interior 1/325 / -ln 325.
    const FilledArray x{big, {{0, 0.0}, {n - 1, 2.0}}};
    for (bool log : {false, true}) add("spatial_staged", sn, s, 1, "UINT32_MAX", log, F, x, {}, cols);
    // softmax backward: interior g = 0 -> 0; column 0 y (.5 first, .5 last, .527
    // between) g (2, -3, 0) -> acc -0.5 -> (1.25, -1.25, .2637); last column y (.25,
    // .75) g (4, -2) -> (1.125, -1.125, .2637 between).
    add("spatial_staged", sn, s, 1, "UINT32_MAX", false, B,
        {0.0, {{0, 2.0}, {last, -3.0}, {L - 1, 4.0}, {n - 1, -2.0}}},
        {halfp, {{0, 0.5}, {last, 0.5}, {L - 1, 0.25}, {n - 1, 0.75}}}, cols);
    // log_softmax backward: interior g = 0 -> 0; column 0 y (0, big ...) g (2, -3)
    // -> (3, -3, 0 between); last column y (big ..., 0) g (-5, .5) -> (-5, 5).
    add("spatial_staged", sn, s, 1, "UINT32_MAX", true, B,
        {0.0, {{0, 2.0}, {last, -3.0}, {L - 1, -5.0}, {n - 1, 0.5}}}, {big, {{0, 0.0}, {n - 1, 0.0}}}, cols);
  }
  // lastdim_block: one row of D = 2^31 + 2 elements (a cluster streaming the row).
  {
    const int64_t n = z.lastdim_row;
    const Shape s{1, n};
    const std::string sn = "1x" + std::to_string(n) + ".dim-1";
    // forward: interior big, ends 0 -> ends 0.5 / -ln2, interior 0 / big.
    for (bool log : {false, true})
      add("lastdim_block", sn, s, -1, "INT32_MAX", log, F, {big, {{0, 0.0}, {n - 1, 0.0}}}, {}, {});
    // softmax backward: interior y = 0; ends y = .5, g = 2 and -3: sum g*y = -0.5
    // -> ends 1.25 and -1.25, interior 0.
    add("lastdim_block", sn, s, -1, "INT32_MAX", false, B, {one, {{0, 2.0}, {n - 1, -3.0}}},
        {0.0, {{0, 0.5}, {n - 1, 0.5}}}, {});
    // log_softmax backward: interior g = 0, y = big; ends y = 0: sum g = -1 -> 3, -2, interior 0.
    add("lastdim_block", sn, s, -1, "INT32_MAX", true, B, {0.0, {{0, 2.0}, {n - 1, -3.0}}},
        {big, {{0, 0.0}, {n - 1, 0.0}}}, {});
  }
  // lastdim_warp: 2.2e9 rows of 1 (one lane per row; the row counter passes 2^31).
  {
    const int64_t n = z.rows_of_one;
    const Shape s{n, 1};
    const std::string sn = std::to_string(n) + "x1.dim-1";
    // forward: D == 1 -> 1 / 0; the last row -inf -> NaN.
    for (bool log : {false, true})
      add("lastdim_warp", sn, s, -1, "INT32_MAX", log, F, {one, {{0, 5.0}, {n - 1, -inf}}}, {}, {});
    // softmax backward y*(g - g*y): y = 0 inside; row 0 (y .5, g 3) -> .75; last (.25, -2) -> -.375.
    add("lastdim_warp", sn, s, -1, "INT32_MAX", false, B, {one, {{0, 3.0}, {n - 1, -2.0}}},
        {0.0, {{0, 0.5}, {n - 1, 0.25}}}, {});
    // log_softmax backward g - exp(y)*g: y = big inside -> g; rows 0 and last (y 0) -> 0.
    add("lastdim_warp", sn, s, -1, "INT32_MAX", true, B, {one, {{0, 3.0}, {n - 1, -2.0}}},
        {big, {{0, 0.0}, {n - 1, 0.0}}}, {});
  }
  // lastdim_warp: 1.1e9 rows of 2 (2.2e9 elements; lane groups of one lane holding 2).
  {
    const int64_t R = z.rows_of_two, n = 2 * R;
    const Shape s{R, 2};
    const std::string sn = std::to_string(R) + "x2.dim-1";
    // forward: interior pairs equal -> 0.5 / -ln2; row 0 (0, big) -> (1, 0); last (big, 2) -> (0, 1).
    for (bool log : {false, true})
      add("lastdim_warp", sn, s, -1, "INT32_MAX", log, F, {one, {{0, 0.0}, {1, big}, {n - 2, big}, {n - 1, 2.0}}},
          {}, {});
    // softmax backward: g = 0 inside -> 0; row 0 y (.5, .5) g (2, -3) -> (1.25, -1.25);
    // last y (.25, .75) g (4, -2) -> (1.125, -1.125).
    add("lastdim_warp", sn, s, -1, "INT32_MAX", false, B, {0.0, {{0, 2.0}, {1, -3.0}, {n - 2, 4.0}, {n - 1, -2.0}}},
        {halfp, {{0, 0.5}, {1, 0.5}, {n - 2, 0.25}, {n - 1, 0.75}}}, {});
    // log_softmax backward: g = 0 inside -> 0; row 0 y (0, big) g (2, -3) -> (3, -3);
    // last y (big, 0) g (-5, .5) -> (-5, 5).
    add("lastdim_warp", sn, s, -1, "INT32_MAX", true, B, {0.0, {{0, 2.0}, {1, -3.0}, {n - 2, -5.0}, {n - 1, 0.5}}},
        {halfp, {{0, 0.0}, {1, big}, {n - 2, big}, {n - 1, 0.0}}}, {});
  }
  return out;
}

double large_expected(const LargeSoftmaxCase& c, int64_t i) {
  // [outer, D, inner] around dim, computed here (not by the library under test).
  const int64_t nd = int64_t(c.shape.size());
  const int64_t dim = c.dim < 0 ? c.dim + nd : c.dim;
  int64_t D = c.shape[size_t(dim)], inner = 1;
  for (int64_t k = dim + 1; k < nd; ++k) inner *= c.shape[size_t(k)];
  const int64_t o = i / (D * inner), j = i % inner;
  auto in_row = [&](int64_t e) { return e / (D * inner) == o && e % inner == j; };
  // The row as runs: every patched element of the row once, the fill for the rest.
  struct Run {
    double a, b;
    int64_t count;
  };
  std::vector<int64_t> patched;
  for (const auto* arr : {&c.a, &c.b})
    for (const Patch& p : arr->patches)
      if (in_row(p.at) && std::find(patched.begin(), patched.end(), p.at) == patched.end()) patched.push_back(p.at);
  std::vector<Run> runs;
  for (int64_t e : patched) runs.push_back({round_to_dtype(c.a.at(e), c.dtype), round_to_dtype(c.b.at(e), c.dtype), 1});
  if (D > int64_t(patched.size()))
    runs.push_back({round_to_dtype(c.a.fill, c.dtype), round_to_dtype(c.b.fill, c.dtype), D - int64_t(patched.size())});
  const double a = round_to_dtype(c.a.at(i), c.dtype), b = round_to_dtype(c.b.at(i), c.dtype);
  double v;
  if (c.dir == Direction::Fwd) {
    // SEMANTICS.md: any NaN or +inf, or no value above -inf, makes the row NaN.
    bool bad = true;
    for (const Run& r : runs) {
      if (std::isnan(r.a) || r.a == INFINITY) {
        bad = true;
        break;
      }
      if (r.a != -INFINITY) bad = false;
    }
    if (bad) return std::numeric_limits<double>::quiet_NaN();
    double m = -INFINITY, s = 0;
    for (const Run& r : runs) m = std::max(m, r.a);
    for (const Run& r : runs) s += double(r.count) * std::exp(r.a - m);
    v = c.log ? (a - m) - std::log(s) : std::exp(a - m) / s;
  } else {
    // softmax: gI = y * (g - sum(g * y)); log_softmax: gI = g - exp(y) * sum(g).
    double acc = 0;
    for (const Run& r : runs) acc += double(r.count) * (c.log ? r.a : r.a * r.b);
    v = c.log ? a - std::exp(b) * acc : b * (a - acc);
  }
  return round_to_dtype(v, c.dtype);
}

Row run_softmax_large_case(const LargeSoftmaxCase& c, DeviceRef dev) {
  Row row{c.name, c.op(), device_name(dev), "", 0, "ok", ""};
  const std::string need = "needs " + gib(c.bytes_needed());
  if (skip_if_short(row, dev, c.bytes_needed())) return row;
  const auto t0 = std::chrono::steady_clock::now();
  std::set<std::string> ps;
  try {
    const Tensor a = make_filled(c.shape, c.dtype, c.a, dev);
    // Poisoned (NaN), so an element the kernel fails to write reads wrong.
    const Tensor out = make_filled(c.shape, c.dtype, {std::numeric_limits<double>::quiet_NaN(), {}}, dev);
    TraceSession trace;
    if (c.dir == Direction::Fwd) {
      if (c.log) log_softmax_out(a, c.dim, out);
      else softmax_out(a, c.dim, out);
    } else {
      const Tensor b = make_filled(c.shape, c.dtype, c.b, dev);
      if (c.log) log_softmax_backward_out(a, b, c.dim, out);
      else softmax_backward_out(a, b, c.dim, out);
    }
    const std::vector<double> got = read_elements(out, c.checks);  // waits for the kernel
    for (const auto& r : trace.records()) ps.insert(r.path);
    int bad = 0;
    for (size_t k = 0; k < got.size(); ++k) {
      const double want = large_expected(c, c.checks[k]);
      if (close_enough(got[k], want, 0.0, row.err)) continue;  // exact (NaN meets NaN)
      if (bad++ == 0) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "element %lld = %.9g, expected %.9g", (long long)c.checks[k], got[k], want);
        row.detail = buf;
      }
    }
    if (bad) {
      row.verdict = "WRONG";
      row.detail = std::to_string(bad) + " of " + std::to_string(got.size()) + " checked elements wrong, " + row.detail;
    } else {
      row.detail = std::to_string(got.size()) + " elements exact";
    }
  } catch (const std::exception& e) {
    row.verdict = "WRONG";
    row.detail = std::string("threw: ") + e.what();
  }
  for (const auto& p : ps) row.paths += (row.paths.empty() ? "" : ",") + p;
  if (dev.type == Device::CUDA && row.verdict == "ok" && row.paths != c.cuda_path()) {
    row.verdict = "WRONG";
    row.detail = "reached '" + row.paths + "', built to reach " + c.cuda_path();
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  char buf[48];
  std::snprintf(buf, sizeof buf, "; %s; %.1f s", need.c_str(), secs);
  row.detail += buf;
  return row;
}

size_t softmax_large_case_count(DeviceRef dev) {
  if (!has_softmax_paths(dev)) return 0;
  size_t k = 0;
  for (const LargeSoftmaxCase& c : softmax_large_cases()) k += dev.type != Device::CPU || c.cpu;
  return k;
}

void run_softmax_large_cases(DeviceRef dev, const std::function<void(Row)>& record) {
  if (!has_softmax_paths(dev)) return;
  for (const LargeSoftmaxCase& c : softmax_large_cases())
    if (dev.type != Device::CPU || c.cpu) record(run_softmax_large_case(c, dev));
}

}  // namespace segred::cli
