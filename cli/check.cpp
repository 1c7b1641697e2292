// `segred check`: the verification matrix (cases.h) through the public API, on
// each device, against the float64 reference; one row per case, then the path
// coverage table and `paths reached: N/M` per backend.
#include "cli/check.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "cli/cases.h"
#include "cli/report.h"
#include "cli/segment_reduce_large.h"
#include "cli/segment_softmax_cases.h"
#include "cli/softmax_cases.h"
#include "segred/segred.h"

namespace segred::cli {

namespace {

using Reached = std::map<std::string, std::vector<std::string>>;  // path -> cases



// Host array of T from doubles, moved to `dev`.
template <class T>
Tensor make(const std::vector<double>& v, const Shape& shape, DeviceRef dev) {
  Tensor h = Tensor::empty(shape, dtype_of<T>());
  for (size_t i = 0; i < v.size(); ++i) {
    if constexpr (std::is_same_v<T, half_t>) h.ptr<T>()[i] = to_half(float(v[i]));
    else h.ptr<T>()[i] = T(v[i]);
  }
  return dev.type == Device::CPU ? h : Tensor::copy_to(h, dev);
}

template <class T>
std::vector<double> fetch(const Tensor& t) {
  const Tensor h = t.view().device.type == Device::CPU ? t : Tensor::copy_to(t, {});
  std::vector<double> v(size_t(h.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    if constexpr (std::is_same_v<T, half_t>) v[i] = double(to_float(h.ptr<T>()[i]));
    else v[i] = double(h.ptr<T>()[i]);
  }
  return v;
}

void compare(const char* what, const std::vector<double>& got, const std::vector<double>& want, double tol,
             Row& row) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (close_enough(got[i], want[i], tol, row.err) || row.verdict == "WRONG") continue;
    row.verdict = "WRONG";
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s[%zu] = %.17g, expected %.17g", what, i, got[i], want[i]);
    row.detail = buf;
  }
}

std::string join(const std::set<std::string>& s) {
  std::string o;
  for (const auto& p : s) o += (o.empty() ? "" : ",") + p;
  return o;
}

template <class T>
Row run_segment_case(const Case& c, DeviceRef dev) {
  const Materialized m = materialize(c);
  Row row{c.name, "segment_reduce", device_name(dev), "", 0, "ok", ""};
  const Tensor data = make<T>(m.data, m.data_shape, dev);
  Tensor meta = Tensor::empty(m.meta_shape, c.offsets ? DType::Int32 : DType::Int64);
  for (size_t i = 0; i < m.meta.size(); ++i) {
    if (c.offsets) meta.ptr<int32_t>()[i] = int32_t(m.meta[i]);  // int32 metadata on purpose
    else meta.ptr<int64_t>()[i] = m.meta[i];
  }
  if (dev.type != Device::CPU) meta = Tensor::copy_to(meta, dev);
  Segments seg;
  seg.axis = m.axis;
  seg.initial = c.initial;
  (c.offsets ? seg.offsets : seg.lengths) = meta.view();
  const Reduce red = parse_reduce(c.reduce);
  const double tol = dtype_of<T>() == DType::Float64 ? 1e-12 : 2e-6;

  TraceSession trace;
  const Tensor y = segment_reduce(data, red, seg);
  compare("forward", fetch<T>(y), m.expected_out, tol, row);
  const Tensor g = make<T>(m.grad, m.out_shape, dev);
  // The backward refers to the reference output (rounded to T), like autograd
  // refers to the forward it saved; for max/min it equals segred's exactly.
  const Tensor yref = make<T>(m.expected_out, m.out_shape, dev);
  const Tensor gi = segment_reduce_backward(g, yref, data, red, seg, parse_tie(c.tie));
  compare("backward", fetch<T>(gi), m.expected_grad, tol, row);
  std::set<std::string> ps;
  for (const auto& r : trace.records()) ps.insert(r.path);
  row.paths = join(ps);
  return row;
}

}  // namespace

int run_check(const CheckOptions& opt) {
  const bool want_cpu = opt.device == "cpu" || opt.device == "all";
  const bool want_cuda = opt.device == "cuda" || opt.device == "all";
  if (!want_cpu && !want_cuda) {
    std::fprintf(stderr, "segred check: --device must be cpu, cuda or all, got '%s'\n", opt.device.c_str());
    return 2;
  }
  std::vector<DeviceRef> devices;
  if (want_cpu) devices.push_back({Device::CPU, 0});
  bool cuda_ran = false;
  if (want_cuda) {
    if (cuda_device_count() == 0) {
      std::printf("cuda: %s; no CUDA case ran\n", built_with_cuda() ? "no GPU present" : "this build has no CUDA backend");
      if (!want_cpu) return 2;
    } else {
      if (has_paths_for({Device::CUDA, 0}, {"segment_reduce"})) {
        devices.push_back({Device::CUDA, 0});
        cuda_ran = true;
      } else {
        std::printf("cuda: this build has no CUDA segment_reduce path; no CUDA case ran\n");
      }
    }
  }

  const std::vector<Case> cases = segment_cases();
  std::vector<Row> rows;
  Reached reached;
  int wrong = 0, skipped = 0;
  print_row_header();
  size_t total = 0;
  for (const DeviceRef dev : devices)
    total += cases.size() + softmax_case_count(dev) + segment_softmax_case_count(dev) +
             (opt.large ? segment_reduce_large_case_count(dev) + softmax_large_case_count(dev) +
                              segment_softmax_large_case_count(dev)
                        : 0);
  Progress progress(total);
  auto record = [&](Row row) {
    for (size_t a = 0, b; a < row.paths.size(); a = b + 1) {
      b = row.paths.find(',', a);
      if (b == std::string::npos) b = row.paths.size();
      reached[row.paths.substr(a, b - a)].push_back(row.name);
    }
    if (row.name.rfind("segment_reduce", 0) != 0 && row.op != "segment_reduce") progress.step(row.name);
    if (row.verdict == "WRONG") ++wrong;
    if (row.verdict == "skipped") ++skipped;
    if (!opt.quiet || row.verdict != "ok") print_row(row);
    rows.push_back(std::move(row));
  };
  for (const DeviceRef dev : devices) {
    for (const Case& c : cases) {
      progress.step(c.name);
      Row row;
      try {
        row = c.dtype == "float64" ? run_segment_case<double>(c, dev) : run_segment_case<float>(c, dev);
      } catch (const std::exception& e) {
        row = {c.name, "segment_reduce", device_name(dev), "", 0, "WRONG",
               std::string("threw: ") + e.what()};
      }
      record(std::move(row));
    }
    // Boundary cases past 2^31/2^32 elements, one family at a time (cli/*_large*, cli/*_cases.cpp).
    if (opt.large)
      run_segment_reduce_large_cases(dev, [&](Row r) {  // record() steps the bar for every family but this one
        progress.step(r.name);
        record(std::move(r));
      });
    run_softmax_cases(dev, record);  // cli/softmax_cases.cpp: the softmax family's rows
    if (opt.large) run_softmax_large_cases(dev, record);  // its boundary cases (every CUDA i64 path)
    run_segment_softmax_cases(dev, record);  // cli/segment_softmax_cases.cpp: the ragged softmax rows
    if (opt.large) run_segment_softmax_large_cases(dev, record);
  }

  // Coverage: every registered path of the devices checked.
  std::vector<CoverageLine> cov;
  std::map<std::string, std::pair<int, int>> per_backend;  // backend -> (reached, registered)
  // A CUDA i64 path beside an i32 twin is chosen only past 2^31 elements: its
  // smallest case is a --large one, so without --large it is listed, not required.
  auto needs_large = [&](const PathInfo& p) {
    if (opt.large || p.backend != Backend::CUDA || p.index_bits != 64) return false;
    const std::string name(p.name);
    const std::string twin = name.substr(0, name.size() - 3) + "i32";
    for (const PathInfo& q : paths())
      if (q.name == twin) return true;
    return false;
  };
  int deferred = 0;
  for (const PathInfo& p : paths()) {
    if (p.backend == Backend::CPU ? !want_cpu : !cuda_ran) continue;
    CoverageLine line{std::string(p.name), std::string(to_string(p.backend)), {}};
    if (auto it = reached.find(line.path); it != reached.end()) line.cases = it->second;
    if (line.cases.empty() && needs_large(p)) {
      ++deferred;
      std::printf("%-44s -  (i64: reached by --large only)\n", line.path.c_str());
      continue;
    }
    auto& pb = per_backend[line.backend];
    pb.second++;
    if (!line.cases.empty()) pb.first++;
    cov.push_back(std::move(line));
  }
  std::printf("\n%-44s %s\n", "path", "cases that reached it");
  if (deferred) std::printf("(%d CUDA i64 path(s) above need --large and are not counted)\n", deferred);
  for (const auto& c : cov)
    std::printf("%-44s %zu%s%s\n", c.path.c_str(), c.cases.size(), c.cases.empty() ? "  UNREACHED" : "  e.g. ",
                c.cases.empty() ? "" : c.cases.front().c_str());
  int n = 0, m = 0;
  std::string summary;
  for (const auto& [backend, nm] : per_backend) {
    std::printf("paths reached (%s): %d/%d\n", backend.c_str(), nm.first, nm.second);
    summary += "paths reached (" + backend + "): " + std::to_string(nm.first) + "/" + std::to_string(nm.second) + "; ";
    n += nm.first;
    m += nm.second;
  }
  const bool ok = wrong == 0 && n == m;
  summary += std::to_string(rows.size()) + " cases, " + std::to_string(wrong) + " wrong, " + std::to_string(skipped) +
             " skipped; check " + (ok ? "passed" : "FAILED");
  std::printf("%zu cases, %d wrong, %d skipped\n", rows.size(), wrong, skipped);
  std::printf("paths reached: %d/%d\n", n, m);
  std::printf("%s\n", ok ? "check passed" : "check FAILED");
  if (!opt.report.empty() && !write_report(opt.report, rows, cov, summary)) {
    std::fprintf(stderr, "segred check: cannot write %s\n", opt.report.c_str());
    return 1;
  }
  return ok ? 0 : 1;
}

}  // namespace segred::cli
