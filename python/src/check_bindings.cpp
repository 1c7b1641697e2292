// The verification matrix for Python (segred.align): the same case definitions
// and reference expectations that `segred check` uses (cli/cases.h,
// cli/softmax_cases.h), as dicts of NumPy arrays, so the matrix is defined once.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include "cli/cases.h"
#include "cli/softmax_cases.h"

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

  m.def("softmax_cases", [] {
    nb::list out;
    for (const cli::SoftmaxCase& c : cli::softmax_cases()) {
      const cli::SoftmaxMaterialized mat = cli::materialize(c);
      const Shape& shape = c.input->shape;
      nb::dict d;
      d["name"] = c.name;
      d["input"] = c.input->name;
      d["op"] = c.log ? "log_softmax" : "softmax";
      d["log"] = c.log;
      d["dtype"] = c.dtype;
      d["dim"] = c.input->dim;
      d["transposed"] = c.input->transposed;
      d["tolerance"] = cli::softmax_tolerance(c.dtype);
      d["x"] = array(mat.x, shape);
      d["grad"] = array(mat.grad, shape);
      d["expected_out"] = array(mat.expected_out, shape);
      d["output"] = array(mat.output, shape);
      d["expected_grad"] = array(mat.expected_grad, shape);
      out.append(d);
    }
    return out;
  }, "The softmax verification matrix with float64 reference expectations (cli/softmax_cases.h).");

  m.def("softmax_large_cases", [](bool small) {
    nb::list out;
    const auto sizes = small ? cli::BoundarySizes::small_analogue() : cli::BoundarySizes{};
    for (const cli::LargeSoftmaxCase& c : cli::softmax_large_cases(sizes)) {
      nb::dict d;
      d["name"] = c.name;
      d["kernel"] = c.kernel;
      d["shape_name"] = c.shape_name;
      nb::list shape, checks, expected, ap, bp;
      for (int64_t s : c.shape) shape.append(s);
      d["shape"] = nb::tuple(shape);
      d["dim"] = c.dim;
      d["op"] = c.op();
      d["log"] = c.log;
      d["direction"] = c.dir == Direction::Fwd ? "fwd" : "bwd";
      d["dtype"] = std::string(dtype_name(c.dtype));
      d["numel"] = c.numel();
      d["bytes_needed"] = c.bytes_needed();
      d["arrays"] = c.arrays();
      d["boundary"] = c.boundary;
      d["cuda_path"] = c.cuda_path();
      d["a_fill"] = c.a.fill;
      d["b_fill"] = c.b.fill;
      for (const cli::Patch& p : c.a.patches) ap.append(nb::make_tuple(p.at, p.v));
      for (const cli::Patch& p : c.b.patches) bp.append(nb::make_tuple(p.at, p.v));
      d["a_patches"] = ap;
      d["b_patches"] = bp;
      for (int64_t i : c.checks) {
        checks.append(i);
        expected.append(cli::large_expected(c, i));
      }
      d["checks"] = checks;
      d["expected"] = expected;
      out.append(d);
    }
    return out;
  }, nb::arg("small") = false,
     "The softmax boundary cases of `segred check --large` (cli/softmax_cases.h) as data: arrays given by a fill\n"
     "value and patches, the elements checked and their exact expected values. small=True: the same rules at\n"
     "small sizes (the analogue the tests run).");
}

}  // namespace segred::py
