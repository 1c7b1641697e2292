// The verification matrix for Python (segred.align): the same case definitions
// and reference expectations that `segred check` uses (cli/cases.h), as dicts of
// NumPy arrays, so the matrix is defined once.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include "cli/cases.h"

namespace nb = nanobind;

namespace segred::py {

namespace {
template <class T>
nb::object array(const std::vector<T>& v, const Shape& shape) {
  auto* owner = new std::vector<T>(v);
  nb::capsule keep(owner, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  std::vector<size_t> s(shape.begin(), shape.end());
  return nb::cast(nb::ndarray<nb::numpy, T>(owner->data(), s.size(), s.data(), keep), nb::rv_policy::reference);
}
}  // namespace

void bind_check(nb::module_& m) {
  m.def("segment_cases", [] {
    nb::list out;
    for (const cli::Case& c : cli::segment_cases()) {
      const cli::Materialized mat = cli::materialize(c);
      nb::dict d;
      d["name"] = c.name;
      d["input"] = c.input->name;
      d["reduce"] = c.reduce;
      d["meta_kind"] = c.offsets ? "offsets" : "lengths";
      d["initial"] = c.initial ? nb::cast(*c.initial) : nb::none();
      d["tie"] = c.tie;
      d["grad_value"] = c.grad;
      d["grad_varied"] = c.grad_varied;
      d["dtype"] = c.dtype;
      d["axis"] = mat.axis;
      d["data"] = array(mat.data, mat.data_shape);
      d["meta"] = array(mat.meta, mat.meta_shape);
      d["grad"] = array(mat.grad, mat.out_shape);
      d["expected_out"] = array(mat.expected_out, mat.out_shape);
      d["expected_grad"] = array(mat.expected_grad, mat.data_shape);
      d["defect_grad_sign"] =
          mat.grad_sign_defect.empty() ? nb::none() : array(mat.grad_sign_defect, mat.data_shape);
      out.append(d);
    }
    return out;
  }, "The segment_reduce verification matrix with float64 reference expectations (cli/cases.h).");
}

}  // namespace segred::py
