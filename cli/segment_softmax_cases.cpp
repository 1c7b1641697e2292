#include "cli/segment_softmax_cases.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

#include "cli/cases.h"
#include "cli/large.h"
#include "segred/segred.h"
#include "src/core/segment_softmax_geometry.h"
#include "src/reference/segment_softmax_ref.h"

namespace segred::cli {

namespace {
const char* kKinds[] = {"softmax", "log_softmax", "logsumexp"};
const double kGrads[] = {-2.5, 1.0};



// On the CPU the host arrays themselves; on CUDA copies (and the results copied back).
TensorView on(DeviceRef dev, const TensorView& host, Tensor& keep) {
  if (dev.type == Device::CPU) return host;
  keep = Tensor::copy_to(host, dev);
  return keep.view();
}
Tensor to_host(DeviceRef dev, const Tensor& t) { return dev.type == Device::CPU ? t : Tensor::copy_to(t, DeviceRef{}); }

// The shared matrix's inputs (cli/cases.cpp) and one of the ragged softmax's own: rows of 16
// bytes (4 heads: float32 takes the CUDA lane-group path, src/cuda/segment_softmax_lanes.cuh),
// batched, a segment in each short class and at its edges, two past the longest held in
// registers (cut into pieces), empty segments, one -inf.
const std::vector<Input>& ss_inputs() {
  static const std::vector<Input> all = [] {
    std::vector<Input> v = inputs();
    Input in;
    in.name = "heads4_lane_classes_and_pieces";
    in.outer = 2;
    in.inner = 4;
    in.lengths = {0, 1, 3, 4, 5, 9, 17, 33, 65, 129, 300, 2, 397, 0, 7, 1, 1, 64, 65, 8, 16, 2, 3, 4};
    in.L = 568;  // each row's lengths sum to it
    in.data.resize(size_t(in.outer * in.L * in.inner));
    for (size_t i = 0; i < in.data.size(); ++i) in.data[i] = 4.0 * std::sin(0.37 * double(i)) + double(i % 5) - 2.0;
    in.data[10] = -std::numeric_limits<double>::infinity();
    v.push_back(in);
    return v;
  }();
  return all;
}

bool has_paths(DeviceRef dev) {
  return has_paths_for(dev, {"segment_softmax", "segment_log_softmax", "segment_logsumexp"});
}

template <class T>
Row run_one(const Input& in, const std::string& kind, bool offsets, double g0, const std::string& dtype,
            DeviceRef dev) {
  Row row{"segment_" + kind + "/" + in.name + "/" + (offsets ? "offsets" : "lengths") + "/g=" +
              (g0 < 0 ? std::string("-2.5") : std::string("1")) + "/" + dtype,
          "segment_" + kind, device_name(dev), "", 0, "ok", ""};
  const int64_t S = int64_t(in.lengths.size()) / in.outer;
  std::vector<T> xd(in.data.size());
  std::vector<double> x(in.data.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = double(xd[i] = T(in.data[i]));
  reference::Problem p{in.outer, in.L, in.inner, S, reference::offsets_from_lengths(in.lengths, in.outer, S),
                       std::nullopt};
  for (auto& v : p.offsets) v += in.lead;
  std::vector<int64_t> lengths = in.lengths;
  std::vector<int32_t> offs(p.offsets.begin(), p.offsets.end());
  Shape dshape = in.outer > 1 ? Shape{in.outer, in.L} : Shape{in.L};
  if (in.inner > 1) dshape.push_back(in.inner);
  Segments seg;
  seg.axis = in.outer > 1 ? 1 : 0;
  Shape mshape = in.outer > 1 ? Shape{in.outer, S} : Shape{S};
  Tensor keep_meta, keep_data, keep_grad;
  if (offsets) {
    mshape.back() += 1;
    seg.offsets = on(dev, TensorView(offs.data(), DType::Int32, mshape), keep_meta);
  } else {
    seg.lengths = on(dev, TensorView(lengths.data(), DType::Int64, mshape), keep_meta);
  }
  const TensorView data = on(dev, TensorView(xd.data(), dtype_of<T>(), dshape), keep_data);
  const double tol = dtype_of<T>() == DType::Float64 ? 1e-11 : 2e-5;
  const SegmentSoftmaxOp op = kind == "softmax"       ? SegmentSoftmaxOp::Softmax
                              : kind == "log_softmax" ? SegmentSoftmaxOp::LogSoftmax
                                                      : SegmentSoftmaxOp::LogSumExp;
  TraceSession trace;
  const Tensor y = op == SegmentSoftmaxOp::Softmax      ? segment_softmax(data, seg)
                   : op == SegmentSoftmaxOp::LogSoftmax ? segment_log_softmax(data, seg)
                                                        : segment_logsumexp(data, seg);
  const Tensor yh = to_host(dev, y);
  const auto want_y = reference::segment_softmax_forward(p, x, kind);
  std::vector<double> yd(want_y.size());
  for (size_t i = 0; i < yd.size(); ++i) {
    yd[i] = double(yh.ptr<T>()[i]);
    if (!close_enough(yd[i], want_y[i], tol, row.err) && row.verdict == "ok") {
      row.verdict = "WRONG";
      row.detail = "forward[" + std::to_string(i) + "] = " + std::to_string(yd[i]) + ", expected " +
                   std::to_string(want_y[i]);
    }
  }
  std::vector<T> gd(want_y.size());
  std::vector<double> g(want_y.size());
  for (size_t i = 0; i < g.size(); ++i) g[i] = double(gd[i] = T(i % 2 ? g0 : -0.5 * g0));  // both signs
  Tensor gi = Tensor::empty(dshape, dtype_of<T>(), dev);
  segment_softmax_backward_out(op, on(dev, TensorView(gd.data(), dtype_of<T>(), y.sizes()), keep_grad), y, data, seg,
                               gi);
  const Tensor gih = to_host(dev, gi);
  const auto want_gi = reference::segment_softmax_backward(p, g, yd, x, kind);
  for (size_t i = 0; i < want_gi.size(); ++i) {
    const double got = double(gih.ptr<T>()[i]);
    if (!close_enough(got, want_gi[i], tol * 10, row.err) && row.verdict == "ok") {
      row.verdict = "WRONG";
      row.detail = "backward[" + std::to_string(i) + "] = " + std::to_string(got) + ", expected " +
                   std::to_string(want_gi[i]);
    }
  }
  std::set<std::string> ps;
  for (const auto& r : trace.records()) ps.insert(r.path);
  for (const auto& s : ps) row.paths += (row.paths.empty() ? "" : ",") + s;
  return row;
}
}  // namespace

size_t segment_softmax_case_count() { return ss_inputs().size() * 3 * 2 * 2 * 2; }
size_t segment_softmax_case_count(DeviceRef dev) { return has_paths(dev) ? segment_softmax_case_count() : 0; }

void run_segment_softmax_cases(DeviceRef dev, const std::function<void(Row)>& record) {
  if (!has_paths(dev)) return;
  // CUDA: the lane-group path wherever it applies (whatever its default,
  // src/core/segment_softmax_geometry.h), the tile path elsewhere, so both are checked.
  struct LanesOn {
    LanesOn() { detail::segment_softmax_lanes_mode() = 1; }
    ~LanesOn() { detail::segment_softmax_lanes_mode() = 0; }
  } lanes_on;
  for (const Input& in : ss_inputs())
    for (const char* kind : kKinds)
      for (bool offsets : {false, true}) {
        if (in.lead > 0 && !offsets) continue;
        for (double g0 : kGrads)
          for (const char* dt : {"float64", "float32"}) {
            Row row;
            try {
              row = std::string(dt) == "float64" ? run_one<double>(in, kind, offsets, g0, dt, dev)
                                                 : run_one<float>(in, kind, offsets, g0, dt, dev);
            } catch (const std::exception& e) {
              row = {std::string("segment_") + kind + "/" + in.name, std::string("segment_") + kind,
                     device_name(dev), "", 0, "WRONG", std::string("threw: ") + e.what()};
            }
            record(std::move(row));
          }
      }
}

// ---- boundary cases (--large, CUDA): past UINT32_MAX elements, every i64 path
//
// float16, L = 2^32 + 64 rows of one head, offsets {0, 2, L - 2, L}: a segment of
// two rows at each end and one of 2^32 + 60 rows between (every tile but the
// first and the last inside it). x = -65376 everywhere except x[0] = x[2] =
// x[L - 3] = 0 and x[L - 1] = 2; exp(-65376 - m) is 0 exactly, so every
// expected value is exact in float16. Forward and backward of each op in one row.
namespace {

constexpr double kBig = -65376.0;  // the float16 0xfbfb

struct Expect {
  int64_t at;
  double v;
};

Row run_large(SegmentSoftmaxOp op, DeviceRef dev) {
  const std::string kind = std::string(to_string(op));
  const int64_t L = (int64_t(1) << 32) + 64;
  Row row{"large/" + kind + "/(2^32+64) rows, segments 2 | 2^32+60 | 2/float16", kind, device_name(dev), "", 0, "ok",
          ""};
  const int64_t need = 4 * L * 2;  // output, g, y, gradient
  if (skip_if_short(row, dev, need)) return row;
  const auto t0 = std::chrono::steady_clock::now();
  std::set<std::string> ps;
  try {
    Tensor offh = Tensor::empty({4}, DType::Int64);
    const int64_t o[] = {0, 2, L - 2, L};
    std::copy(o, o + 4, offh.ptr<int64_t>());
    const Tensor off = Tensor::copy_to(offh, dev);
    Segments seg;
    seg.offsets = off.view();
    const FilledArray xa{kBig, {{0, 0.0}, {2, 0.0}, {L - 3, 0.0}, {L - 1, 2.0}}};
    const double ln2 = std::log(2.0);
    auto h = [](double v) { return round_to_dtype(v, DType::Float16); };
    std::vector<Expect> fwd, bwd;
    Tensor x = make_filled({L}, DType::Float16, xa, dev);
    Tensor out, gi;
    TraceSession trace;
    if (op == SegmentSoftmaxOp::LogSumExp) {
      out = segment_logsumexp(x, seg);
      fwd = {{0, 0.0}, {1, h(ln2)}, {2, 2.0}};
      // gI = g exp(x - y) with y = (0, 0, 2), g = (-2.5, 1.5, 3).
      const Tensor y = make_filled({3}, DType::Float16, FilledArray{0.0, {{2, 2.0}}}, dev);
      const Tensor g = make_filled({3}, DType::Float16, FilledArray{1.5, {{0, -2.5}, {2, 3.0}}}, dev);
      gi = segment_logsumexp_backward(g, y, x, seg);
      bwd = {{0, -2.5}, {1, 0.0}, {2, 1.5}, {3, 0.0}, {L / 2, 0.0}, {L - 4, 0.0}, {L - 3, 1.5}, {L - 2, 0.0}, {L - 1, 3.0}};
    } else if (op == SegmentSoftmaxOp::Softmax) {
      out = segment_softmax(x, seg);
      fwd = {{0, 1.0}, {1, 0.0}, {2, 0.5}, {3, 0.0}, {L / 2, 0.0}, {L - 4, 0.0}, {L - 3, 0.5}, {L - 2, 0.0}, {L - 1, 1.0}};
      x = Tensor();
      // y*(g - sum g*y): g = y = 0 inside; ends as in the gtest boundary case.
      const Tensor g = make_filled({L}, DType::Float16,
                                   FilledArray{0.0, {{0, 2.0}, {1, -3.0}, {2, 4.0}, {L - 3, -2.0}, {L - 2, 4.0}, {L - 1, -2.0}}}, dev);
      const Tensor y = make_filled({L}, DType::Float16,
                                   FilledArray{0.0, {{0, 0.5}, {1, 0.5}, {2, 0.25}, {L - 3, 0.75}, {L - 2, 0.25}, {L - 1, 0.75}}}, dev);
      gi = segment_softmax_backward(g, y, seg);
      bwd = {{0, 1.25}, {1, -1.25}, {2, 1.125}, {3, 0.0}, {L / 2, 0.0}, {L - 4, 0.0}, {L - 3, -1.125}, {L - 2, 1.125}, {L - 1, -1.125}};
    } else {
      out = segment_log_softmax(x, seg);
      const double mid = h(-ln2), low = h(kBig - ln2);
      fwd = {{0, 0.0}, {1, kBig}, {2, mid}, {3, low}, {L / 2, low}, {L - 4, low}, {L - 3, mid}, {L - 2, h(kBig - 2.0)}, {L - 1, 0.0}};
      x = Tensor();
      // g - exp(y) sum g: g = 0 and y = -65376 inside.
      const Tensor g = make_filled({L}, DType::Float16,
                                   FilledArray{0.0, {{0, 2.0}, {1, -3.0}, {2, 2.0}, {L - 3, -3.0}, {L - 2, -5.0}, {L - 1, 0.5}}}, dev);
      const Tensor y = make_filled({L}, DType::Float16, FilledArray{kBig, {{0, 0.0}, {2, 0.0}, {L - 1, 0.0}}}, dev);
      gi = segment_log_softmax_backward(g, y, seg);
      bwd = {{0, 3.0}, {1, -3.0}, {2, 3.0}, {3, 0.0}, {L / 2, 0.0}, {L - 4, 0.0}, {L - 3, -3.0}, {L - 2, -5.0}, {L - 1, 5.0}};
    }
    int bad = 0, total = 0;
    for (auto [t, ex] : {std::make_pair(&out, &fwd), std::make_pair(&gi, &bwd)}) {
      std::vector<int64_t> at;
      for (const Expect& e : *ex) at.push_back(e.at);
      const std::vector<double> got = read_elements(*t, at);
      for (size_t k = 0; k < got.size(); ++k, ++total) {
        if (close_enough(got[k], (*ex)[k].v, 0.0, row.err)) continue;
        if (bad++ == 0) {
          char buf[160];
          std::snprintf(buf, sizeof buf, "%s element %lld = %.9g, expected %.9g", t == &out ? "forward" : "backward",
                        (long long)at[k], got[k], (*ex)[k].v);
          row.detail = buf;
        }
      }
    }
    for (const auto& r : trace.records()) ps.insert(r.path);
    if (bad) {
      row.verdict = "WRONG";
      row.detail = std::to_string(bad) + " of " + std::to_string(total) + " checked elements wrong, " + row.detail;
    } else {
      row.detail = std::to_string(total) + " elements exact";
    }
  } catch (const std::exception& e) {
    row.verdict = "WRONG";
    row.detail = std::string("threw: ") + e.what();
  }
  for (const auto& p : ps) row.paths += (row.paths.empty() ? "" : ",") + p;
  const std::string want = kind + ".bwd.cuda.tiles.i64," + kind + ".fwd.cuda.tiles.i64";  // sorted
  if (row.verdict == "ok" && row.paths != want) {
    row.verdict = "WRONG";
    row.detail = "reached '" + row.paths + "', built to reach " + want;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "; needs %s; %.1f s", gib(need).c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  row.detail += buf;
  return row;
}

}  // namespace

size_t segment_softmax_large_case_count(DeviceRef dev) { return dev.type == Device::CUDA && has_paths(dev) ? 3 : 0; }

void run_segment_softmax_large_cases(DeviceRef dev, const std::function<void(Row)>& record) {
  if (dev.type != Device::CUDA || !has_paths(dev)) return;  // the CPU paths are 64-bit only: nothing to prove
  for (SegmentSoftmaxOp op : {SegmentSoftmaxOp::Softmax, SegmentSoftmaxOp::LogSoftmax, SegmentSoftmaxOp::LogSumExp})
    record(run_large(op, dev));
}

}  // namespace segred::cli
