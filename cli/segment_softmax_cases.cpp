#include "cli/segment_softmax_cases.h"

#include <cmath>
#include <cstdio>
#include <set>

#include "cli/cases.h"
#include "segred/segred.h"
#include "src/reference/segment_softmax_ref.h"

namespace segred::cli {

namespace {
const char* kKinds[] = {"softmax", "log_softmax", "logsumexp"};
const double kGrads[] = {-2.5, 1.0};


template <class T>
Row run_one(const Input& in, const std::string& kind, bool offsets, double g0, const std::string& dtype) {
  Row row{"segment_" + kind + "/" + in.name + "/" + (offsets ? "offsets" : "lengths") + "/g=" +
              (g0 < 0 ? std::string("-2.5") : std::string("1")) + "/" + dtype,
          "segment_" + kind, "cpu", "", 0, "ok", ""};
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
  if (offsets) {
    mshape.back() += 1;
    seg.offsets = TensorView(offs.data(), DType::Int32, mshape);
  } else {
    seg.lengths = TensorView(lengths.data(), DType::Int64, mshape);
  }
  const TensorView data(xd.data(), dtype_of<T>(), dshape);
  const double tol = dtype_of<T>() == DType::Float64 ? 1e-11 : 2e-5;
  const SegmentSoftmaxOp op = kind == "softmax"       ? SegmentSoftmaxOp::Softmax
                              : kind == "log_softmax" ? SegmentSoftmaxOp::LogSoftmax
                                                      : SegmentSoftmaxOp::LogSumExp;
  TraceSession trace;
  const Tensor y = op == SegmentSoftmaxOp::Softmax      ? segment_softmax(data, seg)
                   : op == SegmentSoftmaxOp::LogSoftmax ? segment_log_softmax(data, seg)
                                                        : segment_logsumexp(data, seg);
  const auto want_y = reference::segment_softmax_forward(p, x, kind);
  std::vector<double> yd(want_y.size());
  for (size_t i = 0; i < yd.size(); ++i) {
    yd[i] = double(y.ptr<T>()[i]);
    if (!close_enough(yd[i], want_y[i], tol, row.err) && row.verdict == "ok") {
      row.verdict = "WRONG";
      row.detail = "forward[" + std::to_string(i) + "] = " + std::to_string(yd[i]) + ", expected " +
                   std::to_string(want_y[i]);
    }
  }
  std::vector<T> gd(want_y.size());
  std::vector<double> g(want_y.size());
  for (size_t i = 0; i < g.size(); ++i) g[i] = double(gd[i] = T(i % 2 ? g0 : -0.5 * g0));  // both signs
  Tensor gi = Tensor::empty(dshape, dtype_of<T>());
  segment_softmax_backward_out(op, TensorView(gd.data(), dtype_of<T>(), y.sizes()), y, data, seg, gi);
  const auto want_gi = reference::segment_softmax_backward(p, g, yd, x, kind);
  for (size_t i = 0; i < want_gi.size(); ++i) {
    const double got = double(gi.ptr<T>()[i]);
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

size_t segment_softmax_case_count() { return inputs().size() * 3 * 2 * 2 * 2; }

void run_segment_softmax_cases(DeviceRef dev, const std::function<void(Row)>& record) {
  if (dev.type != Device::CPU) return;  // no CUDA path for the ragged softmax family yet
  for (const Input& in : inputs())
    for (const char* kind : kKinds)
      for (bool offsets : {false, true}) {
        if (in.lead > 0 && !offsets) continue;
        for (double g0 : kGrads)
          for (const char* dt : {"float64", "float32"}) {
            Row row;
            try {
              row = std::string(dt) == "float64" ? run_one<double>(in, kind, offsets, g0, dt)
                                                 : run_one<float>(in, kind, offsets, g0, dt);
            } catch (const std::exception& e) {
              row = {std::string("segment_") + kind + "/" + in.name, std::string("segment_") + kind, "cpu", "", 0,
                     "WRONG", std::string("threw: ") + e.what()};
            }
            record(std::move(row));
          }
      }
}

}  // namespace segred::cli
