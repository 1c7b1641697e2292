#include "cli/segment_reduce_large.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

namespace segred::cli {

std::vector<std::pair<int64_t, double>> LargeSegmentCase::patched_rows() const {
  const int64_t L = rows;
  if (reduce == "max")  // every segment's maximum tied twice; every other element 0
    return {{1, 5}, {2, 5}, {3, 3}, {L - 4, 3}, {L - 2, 7}, {L - 1, 7}};
  return {{1, 1}, {2, 2}, {3, 0.5}, {L - 4, 0.25}, {L - 2, 4}, {L - 1, 8}};  // sums exact in float16
}

FilledArray LargeSegmentCase::data() const {
  FilledArray a{0, {}};
  for (auto [r, v] : patched_rows())
    for (int64_t f = 0; f < inner; ++f) a.patches.push_back({r * inner + f, v});
  return a;
}

double LargeSegmentCase::expected_out(int s) const {
  // Closed forms of the rule above (the tests hold them against a dense float64
  // reference on the small analogues): max {5, 3, 7}, sum {1+2, 0.5+0.25, 4+8}.
  static constexpr double kMax[3] = {5, 3, 7}, kSum[3] = {3, 0.75, 12};
  return reduce == "max" ? kMax[s] : kSum[s];
}

double LargeSegmentCase::expected_grad(int64_t element) const {
  const int64_t r = element / inner;
  const int s = r < 3 ? 0 : r < rows - 3 ? 1 : 2;
  if (reduce == "sum") return kGrad[s];
  for (auto [pr, v] : patched_rows())
    if (pr == r && v == expected_out(s)) return kGrad[s] / 2;  // one of the two tied maxima: split
  return 0;
}

std::vector<int64_t> LargeSegmentCase::checks() const {
  std::vector<int64_t> extra;
  auto row = [&](int64_t r) {
    for (int64_t f = 0; f < inner; ++f) extra.push_back(r * inner + f);
  };
  for (auto [r, v] : patched_rows()) row(r);
  for (int64_t r : {int64_t(0), int64_t(2), int64_t(3), int64_t(4), rows - 5, rows - 4, rows - 3}) row(r);
  return boundary_points(numel(), extra);
}

std::string LargeSegmentCase::cuda_path(Direction dir) const {
  return std::string("segment_reduce.") + (dir == Direction::Fwd ? "fwd" : "bwd") + ".cuda." +
         (inner == 1 ? "flat" : "features") + ".i64";
}
std::string LargeSegmentCase::cpu_path(Direction dir) const {
  return std::string("segment_reduce.") + (dir == Direction::Fwd ? "fwd" : "bwd") + ".cpu." +
         (inner == 1 ? "flat" : "features") + ".i64";
}

std::vector<LargeSegmentCase> segment_reduce_large_cases(bool small) {
  const int64_t k31 = int64_t(1) << 31, k32 = int64_t(1) << 32;
  struct Shape2 {
    const char* label;
    DType dtype;
    int64_t rows, inner, small_rows;
    const char* boundary;
  };
  // flat: 1-D past INT32_MAX (float32) and UINT32_MAX (float16); features: 8
  // features per row, [2^28 + 3, 8] float32 = 2^31 + 24 elements and
  // [2^29 + 5, 8] float16 = 2^32 + 40 elements.
  const Shape2 shapes[] = {
      {"flat/2^31+1", DType::Float32, k31 + 1, 1, 17, "INT32_MAX"},
      {"flat/2^32+3", DType::Float16, k32 + 3, 1, 19, "UINT32_MAX"},
      {"features/[2^28+3,8]", DType::Float32, (k31 >> 3) + 3, 8, 11, "INT32_MAX"},
      {"features/[2^29+5,8]", DType::Float16, (k32 >> 3) + 5, 8, 13, "UINT32_MAX"},
  };
  std::vector<LargeSegmentCase> out;
  for (const Shape2& s : shapes)
    for (const char* red : {"max", "sum"}) {
      LargeSegmentCase c;
      c.reduce = red;
      c.dtype = s.dtype;
      c.rows = small ? s.small_rows : s.rows;
      c.inner = s.inner;
      c.boundary = s.boundary;
      const std::string shape(s.label);
      const size_t slash = shape.find('/');
      c.name = "large/" + shape.substr(0, slash) + "/" + red + "/" + shape.substr(slash + 1) + "/" +
               std::string(dtype_name(s.dtype)) + (small ? " (small analogue)" : "");
      out.push_back(std::move(c));
    }
  return out;
}

Row run_segment_reduce_large_case(const LargeSegmentCase& c, DeviceRef dev) {
  Row row{c.name, "segment_reduce", device_name(dev), "", 0, "ok", ""};
  if (skip_if_short(row, dev, c.bytes_needed())) return row;
  const auto t0 = std::chrono::steady_clock::now();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::set<std::string> ps;
  int bad = 0;
  size_t checked = 0;
  auto expect = [&](const char* what, int64_t at, double got, double want) {
    ++checked;
    if (close_enough(got, want, 0.0, row.err)) return;  // exact
    if (bad++ == 0) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "%s[%lld] = %.9g, expected %.9g", what, (long long)at, got, want);
      row.detail = buf;
    }
  };
  try {
    FilledArray rule = c.data();
    rule.patches.insert(rule.patches.end(), c.defect.begin(), c.defect.end());
    const Tensor data = make_filled(c.shape(), c.dtype, rule, dev);
    Tensor meta = Tensor::empty({4}, DType::Int64);
    const std::vector<int64_t> off = c.offsets();
    std::copy(off.begin(), off.end(), meta.ptr<int64_t>());
    if (dev.type != Device::CPU) meta = Tensor::copy_to(meta, dev);
    Segments seg;
    seg.offsets = meta.view();
    const Reduce red = parse_reduce(c.reduce);
    FilledArray g{0, {}}, yref{0, {}};
    for (int s = 0; s < 3; ++s)
      for (int64_t f = 0; f < c.inner; ++f) {
        g.patches.push_back({s * c.inner + f, LargeSegmentCase::kGrad[s]});
        yref.patches.push_back({s * c.inner + f, c.expected_out(s)});
      }
    TraceSession trace;
    // Forward into a NaN-poisoned output: an element the kernel fails to write reads wrong.
    const Tensor out = make_filled(c.out_shape(), c.dtype, {nan, {}}, dev);
    segment_reduce_out(data, red, seg, out);
    std::vector<int64_t> all(size_t(3 * c.inner));
    for (size_t i = 0; i < all.size(); ++i) all[i] = int64_t(i);
    const std::vector<double> y = read_elements(out, all);
    for (size_t i = 0; i < y.size(); ++i) expect("output", int64_t(i), y[i], c.expected_out(int(int64_t(i) / c.inner)));
    // Backward with tie split, against the reference output (as autograd saves it).
    const Tensor gi = make_filled(c.shape(), c.dtype, {nan, {}}, dev);
    segment_reduce_backward_out(make_filled(c.out_shape(), c.dtype, g, dev),
                                make_filled(c.out_shape(), c.dtype, yref, dev), data, red, seg, Tie::Split, gi);
    const std::vector<int64_t> at = c.checks();
    const std::vector<double> got = read_elements(gi, at);  // waits for the kernels
    for (size_t k = 0; k < got.size(); ++k) expect("grad_input", at[k], got[k], c.expected_grad(at[k]));
    for (const auto& r : trace.records()) ps.insert(r.path);
  } catch (const std::exception& e) {
    row.verdict = "WRONG";
    row.detail = std::string("threw: ") + e.what();
  }
  for (const auto& p : ps) row.paths += (row.paths.empty() ? "" : ",") + p;
  if (row.verdict == "ok" && bad) {
    row.verdict = "WRONG";
    row.detail = std::to_string(bad) + " of " + std::to_string(checked) + " checked elements wrong, " + row.detail;
  } else if (row.verdict == "ok") {
    row.detail = std::to_string(checked) + " elements exact";
    const bool cuda = dev.type == Device::CUDA;
    const std::string want = cuda ? c.cuda_path(Direction::Bwd) + "," + c.cuda_path(Direction::Fwd)
                                  : c.cpu_path(Direction::Bwd) + "," + c.cpu_path(Direction::Fwd);
    if (row.paths != want) {
      row.verdict = "WRONG";
      row.detail = "reached '" + row.paths + "', built to reach " + want;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  char buf[64];
  std::snprintf(buf, sizeof buf, "; needs %s; %.1f s", gib(c.bytes_needed()).c_str(), secs);
  row.detail += buf;
  return row;
}


size_t segment_reduce_large_case_count(DeviceRef dev) {
  return has_paths_for(dev, {"segment_reduce"}) ? segment_reduce_large_cases().size() : 0;
}

void run_segment_reduce_large_cases(DeviceRef dev, const std::function<void(Row)>& record) {
  if (!has_paths_for(dev, {"segment_reduce"})) return;
  for (const LargeSegmentCase& c : segment_reduce_large_cases()) record(run_segment_reduce_large_case(c, dev));
}

}  // namespace segred::cli
