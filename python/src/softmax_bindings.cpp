// Bindings of the softmax family (include/segred/softmax.h): softmax, log_softmax
// and their backward, NumPy (or any DLPack CPU array) in, NumPy out. Thin: the
// Python signatures and docs live in python/segred/_softmax.py.
#include <nanobind/nanobind.h>

#include "python/src/arrays.h"
#include "segred/softmax.h"
#include "segred/stream.h"

namespace nb = nanobind;

namespace segred::py {

namespace {

nb::object forward(bool log, const InArray& x, int64_t dim, uintptr_t stream) {
  const TensorView xv = view_of(x, "x");
  Tensor out;
  {
    nb::gil_scoped_release release;
    StreamGuard guard(reinterpret_cast<void*>(stream));
    out = log ? segred::log_softmax(xv, dim) : segred::softmax(xv, dim);
  }
  return to_array(std::move(out));
}

nb::object backward(bool log, const InArray& grad, const InArray& output, int64_t dim, uintptr_t stream) {
  const TensorView g = view_of(grad, "grad"), y = view_of(output, "output");
  Tensor gi;
  {
    nb::gil_scoped_release release;
    StreamGuard guard(reinterpret_cast<void*>(stream));
    gi = log ? segred::log_softmax_backward(g, y, dim) : segred::softmax_backward(g, y, dim);
  }
  return to_array(std::move(gi));
}

void forward_out(bool log, const InArray& x, int64_t dim, const OutArray& out, uintptr_t stream) {
  const TensorView xv = view_of(x, "x"), o = view_of(out, "out");
  nb::gil_scoped_release release;
  StreamGuard guard(reinterpret_cast<void*>(stream));
  (log ? segred::log_softmax_out : segred::softmax_out)(xv, dim, o);
}

void backward_out(bool log, const InArray& grad, const InArray& output, int64_t dim, const OutArray& gi,
                  uintptr_t stream) {
  const TensorView g = view_of(grad, "grad"), y = view_of(output, "output"), o = view_of(gi, "grad_input");
  nb::gil_scoped_release release;
  StreamGuard guard(reinterpret_cast<void*>(stream));
  (log ? segred::log_softmax_backward_out : segred::softmax_backward_out)(g, y, dim, o);
}

}  // namespace

// Each op allocates its result (a DLPack array on the input's device, wrapped into
// the caller's framework by python/segred) or, as name_out, writes into `out`.
// `stream`: the cudaStream_t to run on (0: the default stream).
void bind_softmax(nb::module_& m) {
  for (bool log : {false, true}) {
    const std::string name = log ? "log_softmax" : "softmax";
    m.def(name.c_str(), [log](InArray x, int64_t dim, uintptr_t stream) { return forward(log, x, dim, stream); },
          nb::arg("x"), nb::arg("dim"), nb::arg("stream") = 0);
    m.def((name + "_out").c_str(),
          [log](InArray x, int64_t dim, OutArray out, uintptr_t stream) { forward_out(log, x, dim, out, stream); },
          nb::arg("x"), nb::arg("dim"), nb::arg("out"), nb::arg("stream") = 0);
    m.def((name + "_backward").c_str(),
          [log](InArray g, InArray y, int64_t dim, uintptr_t stream) { return backward(log, g, y, dim, stream); },
          nb::arg("grad"), nb::arg("output"), nb::arg("dim"), nb::arg("stream") = 0);
    m.def((name + "_backward_out").c_str(),
          [log](InArray g, InArray y, int64_t dim, OutArray gi, uintptr_t stream) {
            backward_out(log, g, y, dim, gi, stream);
          },
          nb::arg("grad"), nb::arg("output"), nb::arg("dim"), nb::arg("grad_input"), nb::arg("stream") = 0);
  }
}

}  // namespace segred::py
