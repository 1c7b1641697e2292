#include "cli/softmax_cases.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

#include "segred/segred.h"
#include "src/reference/softmax_ref.h"

namespace segred::cli {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// One input: values of the logical shape (row-major), the dim, and whether the
// kernel sees it through a transposed (non-contiguous) view.
struct SoftmaxInput {
  std::string name;
  Shape shape;
  int64_t dim;
  std::vector<double> data;
  bool transposed = false;  // 2-D only: stored as [cols, rows], viewed with swapped strides
};

struct SoftmaxCase {
  std::string name;
  const SoftmaxInput* input;
  bool log;
  std::string dtype;
};

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
    // Columns longer than a spatial statistics block, tile narrower than inner.
    {
      const int64_t D = 1100, inner = 300;
      SoftmaxInput in{"long_columns_tiles", {D, inner}, 0, wave(size_t(D * inner), 8.0)};
      for (int64_t d = 0; d < 600; ++d) in.data[size_t(d * inner + 7)] = -kInf;
      in.data[size_t(1000 * inner + 7)] = 15.0;
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


struct Outcome {
  double err = 0;
  bool ok = true;
  std::string detail;
  std::set<std::string> paths;
};

bool has_softmax_paths(DeviceRef dev) {
  const Backend b = dev.type == Device::CPU ? Backend::CPU : Backend::CUDA;
  for (const auto& p : paths())
    if (p.backend == b && (p.op == "softmax" || p.op == "log_softmax")) return true;
  return false;
}

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
  static const double pattern[] = {1.0, -1.0, 0.0, 0.4, -2.5, 3.0};
  for (size_t i = 0; i < n; ++i) {
    xd[i] = store<T>(acc_t<T>(in.data[i]));
    x[i] = double(load(xd[i]));
    gd[i] = store<T>(acc_t<T>(pattern[i % 6] * (1.0 + double(i % 5) / 8)));
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
  const double tol = dt == DType::Float64 ? 1e-12 : dt == DType::Float32 ? 4e-6 : dt == DType::Float16 ? 2e-3 : 1.6e-2;
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
    record(Row{c.name, c.log ? "log_softmax" : "softmax", dev.type == Device::CPU ? "cpu" : "cuda", path, o.err,
               o.ok ? "ok" : "WRONG", o.detail});
  }
}

}  // namespace segred::cli
