// Bindings of the softmax family (include/segred/softmax.h): softmax, log_softmax
// and their backward, NumPy (or any DLPack CPU array) in, NumPy out. Thin: the
// Python signatures and docs live in python/segred/_softmax.py.
#include <nanobind/nanobind.h>

#include "python/src/arrays.h"
#include "segred/softmax.h"

namespace nb = nanobind;

namespace segred::py {

namespace {

nb::object forward(bool log, const InArray& x, int64_t dim) {
  const TensorView xv = view_of(x, "x");
  Tensor out;
  {
    nb::gil_scoped_release release;
    out = log ? segred::log_softmax(xv, dim) : segred::softmax(xv, dim);
  }
  return to_numpy(std::move(out));
}

nb::object backward(bool log, const InArray& grad, const InArray& output, int64_t dim) {
  const TensorView g = view_of(grad, "grad"), y = view_of(output, "output");
  Tensor gi;
  {
    nb::gil_scoped_release release;
    gi = log ? segred::log_softmax_backward(g, y, dim) : segred::softmax_backward(g, y, dim);
  }
  return to_numpy(std::move(gi));
}

}  // namespace

void bind_softmax(nb::module_& m) {
  m.def("softmax", [](InArray x, int64_t dim) { return forward(false, x, dim); }, nb::arg("x"), nb::arg("dim"));
  m.def("log_softmax", [](InArray x, int64_t dim) { return forward(true, x, dim); }, nb::arg("x"), nb::arg("dim"));
  m.def(
      "softmax_backward", [](InArray g, InArray y, int64_t dim) { return backward(false, g, y, dim); },
      nb::arg("grad"), nb::arg("output"), nb::arg("dim"));
  m.def(
      "log_softmax_backward", [](InArray g, InArray y, int64_t dim) { return backward(true, g, y, dim); },
      nb::arg("grad"), nb::arg("output"), nb::arg("dim"));
}

}  // namespace segred::py
