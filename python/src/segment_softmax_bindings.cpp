// Bindings of the ragged softmax family (include/segred/segment_softmax.h). `op`
// is 0 softmax, 1 log_softmax, 2 logsumexp; Python signatures live in
// python/segred/_segment_softmax.py.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>

#include "python/src/arrays.h"
#include "segred/segment_softmax.h"
#include "segred/stream.h"

namespace nb = nanobind;

namespace segred::py {

namespace {
Segments make(const std::optional<InArray>& lengths, const std::optional<InArray>& offsets, int64_t axis,
              bool unsafe) {
  Segments s;
  if (lengths) s.lengths = view_of(*lengths, "lengths");
  if (offsets) s.offsets = view_of(*offsets, "offsets");
  s.axis = axis;
  s.unsafe = unsafe;
  return s;
}
SegmentSoftmaxOp op_of(int op) {
  SEGRED_CHECK(op >= 0 && op <= 2, ValueError, "segment softmax: unknown op ", op);
  return SegmentSoftmaxOp(op);
}
}  // namespace

void bind_segment_softmax(nb::module_& m) {
  m.def(
      "segment_softmax_out",
      [](int op, InArray data, std::optional<InArray> lengths, std::optional<InArray> offsets, int64_t axis,
         bool unsafe, OutArray out, uintptr_t stream) {
        const TensorView x = view_of(data, "data"), o = view_of(out, "out");
        const Segments seg = make(lengths, offsets, axis, unsafe);
        nb::gil_scoped_release release;
        StreamGuard guard(reinterpret_cast<void*>(stream));
        segment_softmax_out(op_of(op), x, seg, o);
      },
      nb::arg("op"), nb::arg("data"), nb::arg("lengths").none(), nb::arg("offsets").none(), nb::arg("axis"),
      nb::arg("unsafe"), nb::arg("out"), nb::arg("stream") = 0);
  m.def(
      "segment_softmax",
      [](int op, InArray data, std::optional<InArray> lengths, std::optional<InArray> offsets, int64_t axis,
         bool unsafe, uintptr_t stream) {
        const TensorView x = view_of(data, "data");
        const Segments seg = make(lengths, offsets, axis, unsafe);
        Tensor out;
        {
          nb::gil_scoped_release release;
          StreamGuard guard(reinterpret_cast<void*>(stream));
          const SegmentSoftmaxOp o = op_of(op);
          out = o == SegmentSoftmaxOp::Softmax      ? segment_softmax(x, seg)
                : o == SegmentSoftmaxOp::LogSoftmax ? segment_log_softmax(x, seg)
                                                    : segment_logsumexp(x, seg);
        }
        return to_array(std::move(out));
      },
      nb::arg("op"), nb::arg("data"), nb::arg("lengths").none(), nb::arg("offsets").none(), nb::arg("axis"),
      nb::arg("unsafe"), nb::arg("stream") = 0);
  m.def(
      "segment_softmax_backward_out",
      [](int op, InArray grad, InArray output, InArray data, std::optional<InArray> lengths,
         std::optional<InArray> offsets, int64_t axis, bool unsafe, OutArray grad_input, uintptr_t stream) {
        const TensorView g = view_of(grad, "grad"), y = view_of(output, "output"), x = view_of(data, "data"),
                         gi = view_of(grad_input, "grad_input");
        const Segments seg = make(lengths, offsets, axis, unsafe);
        nb::gil_scoped_release release;
        StreamGuard guard(reinterpret_cast<void*>(stream));
        segment_softmax_backward_out(op_of(op), g, y, x, seg, gi);
      },
      nb::arg("op"), nb::arg("grad"), nb::arg("output"), nb::arg("data"), nb::arg("lengths").none(),
      nb::arg("offsets").none(), nb::arg("axis"), nb::arg("unsafe"), nb::arg("grad_input"), nb::arg("stream") = 0);
  m.def(
      "segment_softmax_backward",
      [](int op, InArray grad, InArray output, InArray data, std::optional<InArray> lengths,
         std::optional<InArray> offsets, int64_t axis, bool unsafe, uintptr_t stream) {
        const TensorView g = view_of(grad, "grad"), y = view_of(output, "output"), x = view_of(data, "data");
        const Segments seg = make(lengths, offsets, axis, unsafe);
        Tensor gi;
        {
          nb::gil_scoped_release release;
          StreamGuard guard(reinterpret_cast<void*>(stream));
          gi = Tensor::empty(x.sizes, x.dtype, x.device);
          segment_softmax_backward_out(op_of(op), g, y, x, seg, gi);
        }
        return to_array(std::move(gi));
      },
      nb::arg("op"), nb::arg("grad"), nb::arg("output"), nb::arg("data"), nb::arg("lengths").none(),
      nb::arg("offsets").none(), nb::arg("axis"), nb::arg("unsafe"), nb::arg("stream") = 0);
}

}  // namespace segred::py
