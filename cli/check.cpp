// `segred check`: the verification matrix (cases.h) through the public API,
// against the float64 reference (src/reference), with the path each case reached.
#include "cli/check.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "cli/cases.h"
#include "segred/segred.h"
#include "src/reference/segment_reduce_ref.h"

namespace segred::cli {

namespace {

struct Outcome {
  double err = 0;  // max scaled error over forward and backward
  bool ok = true;
  std::string detail;
  std::set<std::string> paths;
};

// |a - b| scaled by tolerance; NaN must meet NaN, infinities must be equal.
bool close(double got, double want, double tol, double& err) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return got == want;
  const double e = std::fabs(got - want) / (1.0 + std::fabs(want));
  err = std::max(err, e);
  return e <= tol;
}

template <class T>
Outcome run_case(const Case& c) {
  const Input& in = *c.input;
  Outcome o;
  const int64_t S = int64_t(in.lengths.size()) / in.outer;
  const DType dt = dtype_of<T>();
  // Data rounded to T once; the reference sees the rounded values.
  std::vector<T> xd(in.data.size());
  std::vector<double> x(in.data.size());
  for (size_t i = 0; i < x.size(); ++i) {
    xd[i] = T(in.data[i]);
    x[i] = double(xd[i]);
  }
  reference::Problem p{in.outer, in.L, in.inner, S, reference::offsets_from_lengths(in.lengths, in.outer, S), c.initial};
  for (auto& v : p.offsets) v += in.lead;
  std::vector<int64_t> lengths = in.lengths;
  std::vector<int32_t> offsets(p.offsets.begin(), p.offsets.end());  // int32 metadata on purpose

  Shape dshape = in.outer > 1 ? Shape{in.outer, in.L} : Shape{in.L};
  if (in.inner > 1) dshape.push_back(in.inner);
  const int64_t axis = in.outer > 1 ? 1 : 0;
  TensorView data(xd.data(), dt, dshape);
  Segments seg;
  seg.axis = axis;
  seg.initial = c.initial;
  Shape mshape = in.outer > 1 ? Shape{in.outer, S} : Shape{S};
  if (c.offsets) {
    mshape.back() += 1;
    seg.offsets = TensorView(offsets.data(), DType::Int32, mshape);
  } else {
    seg.lengths = TensorView(lengths.data(), DType::Int64, mshape);
  }
  const Reduce red = parse_reduce(c.reduce);
  const double tol = dt == DType::Float64 ? 1e-12 : 2e-6;

  TraceSession trace;
  const Tensor y = segment_reduce(data, red, seg);
  const std::vector<double> want_y = reference::forward(p, x, c.reduce);
  for (size_t i = 0; i < want_y.size(); ++i) {
    const double got = double(y.ptr<T>()[i]);
    if (!close(got, want_y[i], tol, o.err) && o.ok) {
      o.ok = false;
      o.detail = "forward[" + std::to_string(i) + "] = " + std::to_string(got) + ", expected " + std::to_string(want_y[i]);
    }
  }
  // Upstream gradient: c.grad everywhere, or a per-segment pattern of every sign.
  static const double pattern[] = {1.0, -1.0, 0.0, 0.4};
  std::vector<T> gd(want_y.size());
  std::vector<double> g(want_y.size());
  for (size_t i = 0; i < g.size(); ++i) {
    gd[i] = T(c.grad_varied ? c.grad * pattern[(i / size_t(in.inner)) % 4] : c.grad);
    g[i] = double(gd[i]);
  }
  std::vector<double> y_ref(want_y.size());
  for (size_t i = 0; i < y_ref.size(); ++i) y_ref[i] = double(y.ptr<T>()[i]);
  const Tensor gi =
      segment_reduce_backward(TensorView(gd.data(), dt, y.sizes()), y, data, red, seg, parse_tie(c.tie));
  const std::vector<double> want_gi = reference::backward(p, g, y_ref, x, c.reduce, c.tie);
  for (size_t i = 0; i < want_gi.size(); ++i) {
    const double got = double(gi.ptr<T>()[i]);
    if (!close(got, want_gi[i], tol, o.err) && o.ok) {
      o.ok = false;
      o.detail = "backward[" + std::to_string(i) + "] = " + std::to_string(got) + ", expected " +
                 std::to_string(want_gi[i]);
    }
  }
  for (const auto& r : trace.records()) o.paths.insert(r.path);
  return o;
}

}  // namespace

int run_check(const std::string& device, bool quiet) {
  const bool want_cpu = device == "cpu" || device == "all";
  const bool want_cuda = device == "cuda" || device == "all";
  if (!want_cpu && !want_cuda) {
    std::fprintf(stderr, "segred check: --device must be cpu, cuda or all, got '%s'\n", device.c_str());
    return 2;
  }
  int failures = 0;
  std::map<std::string, std::vector<std::string>> reached;
  if (want_cuda) {
    if (cuda_device_count() == 0) {
      std::printf("cuda: %s; no CUDA case ran\n",
                  built_with_cuda() ? "no GPU present" : "this build has no CUDA backend");
      if (device == "cuda") return 2;
    } else {
      std::printf("cuda: segment_reduce has no CUDA path in this build yet; no CUDA case ran\n");
    }
  }
  if (want_cpu) {
    const auto cases = expand_cases(inputs());
    std::printf("%-64s %-6s %-40s %-9s %s\n", "case", "device", "path", "max err", "verdict");
    for (const Case& c : cases) {
      Outcome o;
      try {
        o = c.dtype == "float64" ? run_case<double>(c) : run_case<float>(c);
      } catch (const std::exception& e) {
        o.ok = false;
        o.detail = std::string("threw: ") + e.what();
      }
      std::string path;
      for (const auto& p : o.paths) {
        path += (path.empty() ? "" : ",") + p;
        reached[p].push_back(c.name);
      }
      if (!o.ok) ++failures;
      if (!quiet || !o.ok)
        std::printf("%-64s %-6s %-40s %-9.2e %s%s%s\n", c.name.c_str(), "cpu", path.c_str(), o.err,
                    o.ok ? "ok" : "WRONG", o.ok ? "" : ": ", o.detail.c_str());
    }
    std::printf("\n%zu cases on cpu, %d wrong\n", cases.size(), failures);
  }
  // Coverage: every registered path of the devices checked.
  std::printf("\n%-44s %s\n", "path", "cases that reached it");
  int n = 0, m = 0;
  for (const PathInfo& p : paths()) {
    if (p.backend == Backend::CPU ? !want_cpu : !(want_cuda && cuda_device_count() > 0)) continue;
    ++m;
    const auto it = reached.find(std::string(p.name));
    const size_t k = it == reached.end() ? 0 : it->second.size();
    if (k) ++n;
    std::printf("%-44s %zu%s%s\n", std::string(p.name).c_str(), k, k ? " e.g. " : "  UNREACHED",
                k ? it->second.front().c_str() : "");
  }
  std::printf("paths reached: %d/%d\n", n, m);
  const bool ok = failures == 0 && n == m;
  std::printf("%s\n", ok ? "check passed" : "check FAILED");
  return ok ? 0 : 1;
}

}  // namespace segred::cli
