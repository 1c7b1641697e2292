// segred._C: the nanobind module. Thin: converts arrays and arguments, calls the
// C++ API, maps segred errors to Python exceptions (SEMANTICS.md, "Errors").
// The Python-facing signatures and docs live in python/segred/__init__.py.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include "python/src/arrays.h"
#include "segred/stream.h"
#include "src/cpu/softmax_kernels.h"

namespace nb = nanobind;
using namespace segred;
using segred::py::InArray;

namespace segred::py {
void bind_extensions(nb::module_& m);  // python/src/extensions.cpp: bindings of the other op families
void bind_check(nb::module_& m);       // python/src/check_bindings.cpp: the verification matrix
void bind_jax(nb::module_& m);         // python/src/jax_ffi.cpp (or no_jax.cpp): XLA FFI handlers
}

namespace {

Segments make_segments(const std::optional<InArray>& lengths, const std::optional<InArray>& offsets, int64_t axis,
                       bool unsafe, std::optional<double> initial) {
  Segments s;
  if (lengths) s.lengths = py::view_of(*lengths, "lengths");
  if (offsets) s.offsets = py::view_of(*offsets, "offsets");
  s.axis = axis;
  s.unsafe = unsafe;
  s.initial = initial;
  return s;
}

}  // namespace

NB_MODULE(_C, m) {
  m.doc() = "segred native module (use the segred package, not this module)";

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const segred::TypeError& e) {
      PyErr_SetString(PyExc_TypeError, e.what());
    } catch (const segred::ValueError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const segred::DeviceError& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });

  // Each op: `name(...) -> array` allocates its result (a DLPack-capable array on
  // the input's device, wrapped into the caller's framework by python/segred), and
  // `name_out(..., out)` writes into a caller-allocated array (torch's allocator).
  // `stream` is the cudaStream_t to run on (0: the default stream).
  m.def(
      "segment_reduce",
      [](InArray data, std::string_view reduce, std::optional<InArray> lengths, std::optional<InArray> offsets,
         int64_t axis, bool unsafe, std::optional<double> initial, uintptr_t stream) {
        const Reduce r = parse_reduce(reduce);
        const TensorView x = py::view_of(data, "data");
        Segments seg = make_segments(lengths, offsets, axis, unsafe, initial);
        Tensor out;
        {
          nb::gil_scoped_release release;
          StreamGuard guard(reinterpret_cast<void*>(stream));
          out = segred::segment_reduce(x, r, seg);
        }
        return py::to_array(std::move(out));
      },
      nb::arg("data"), nb::arg("reduce"), nb::arg("lengths").none(), nb::arg("offsets").none(), nb::arg("axis"),
      nb::arg("unsafe"), nb::arg("initial").none(), nb::arg("stream") = 0);

  m.def(
      "segment_reduce_out",
      [](InArray data, std::string_view reduce, std::optional<InArray> lengths, std::optional<InArray> offsets,
         int64_t axis, bool unsafe, std::optional<double> initial, py::OutArray out, uintptr_t stream) {
        const Reduce r = parse_reduce(reduce);
        const TensorView x = py::view_of(data, "data"), o = py::view_of(out, "out");
        Segments seg = make_segments(lengths, offsets, axis, unsafe, initial);
        nb::gil_scoped_release release;
        StreamGuard guard(reinterpret_cast<void*>(stream));
        segred::segment_reduce_out(x, r, seg, o);
      },
      nb::arg("data"), nb::arg("reduce"), nb::arg("lengths").none(), nb::arg("offsets").none(), nb::arg("axis"),
      nb::arg("unsafe"), nb::arg("initial").none(), nb::arg("out"), nb::arg("stream") = 0);

  m.def(
      "segment_reduce_backward",
      [](InArray grad, InArray output, InArray data, std::string_view reduce, std::optional<InArray> lengths,
         std::optional<InArray> offsets, int64_t axis, std::optional<double> initial, std::string_view tie,
         bool unsafe, uintptr_t stream) {
        const Reduce r = parse_reduce(reduce);
        const Tie t = parse_tie(tie);
        const TensorView g = py::view_of(grad, "grad"), y = py::view_of(output, "output"),
                         x = py::view_of(data, "data");
        Segments seg = make_segments(lengths, offsets, axis, unsafe, initial);
        Tensor gi;
        {
          nb::gil_scoped_release release;
          StreamGuard guard(reinterpret_cast<void*>(stream));
          gi = segred::segment_reduce_backward(g, y, x, r, seg, t);
        }
        return py::to_array(std::move(gi));
      },
      nb::arg("grad"), nb::arg("output"), nb::arg("data"), nb::arg("reduce"), nb::arg("lengths").none(),
      nb::arg("offsets").none(), nb::arg("axis"), nb::arg("initial").none(), nb::arg("tie"), nb::arg("unsafe"),
      nb::arg("stream") = 0);

  m.def(
      "segment_reduce_backward_out",
      [](InArray grad, InArray output, InArray data, std::string_view reduce, std::optional<InArray> lengths,
         std::optional<InArray> offsets, int64_t axis, std::optional<double> initial, std::string_view tie,
         bool unsafe, py::OutArray grad_input, uintptr_t stream) {
        const Reduce r = parse_reduce(reduce);
        const Tie t = parse_tie(tie);
        const TensorView g = py::view_of(grad, "grad"), y = py::view_of(output, "output"),
                         x = py::view_of(data, "data"), gi = py::view_of(grad_input, "grad_input");
        Segments seg = make_segments(lengths, offsets, axis, unsafe, initial);
        nb::gil_scoped_release release;
        StreamGuard guard(reinterpret_cast<void*>(stream));
        segred::segment_reduce_backward_out(g, y, x, r, seg, t, gi);
      },
      nb::arg("grad"), nb::arg("output"), nb::arg("data"), nb::arg("reduce"), nb::arg("lengths").none(),
      nb::arg("offsets").none(), nb::arg("axis"), nb::arg("initial").none(), nb::arg("tie"), nb::arg("unsafe"),
      nb::arg("grad_input"), nb::arg("stream") = 0);

  // Trace and registry.
  nb::class_<TraceRecord>(m, "TraceRecord")
      .def_ro("op", &TraceRecord::op)
      .def_prop_ro("direction", [](const TraceRecord& r) { return std::string(to_string(r.direction)); })
      .def_prop_ro("backend", [](const TraceRecord& r) { return std::string(to_string(r.backend)); })
      .def_ro("path", &TraceRecord::path)
      .def_ro("index_bits", &TraceRecord::index_bits)
      .def_ro("variant", &TraceRecord::variant)
      .def_prop_ro("grid", [](const TraceRecord& r) { return std::vector<int64_t>(r.grid.begin(), r.grid.end()); })
      .def_prop_ro("block", [](const TraceRecord& r) { return std::vector<int64_t>(r.block.begin(), r.block.end()); })
      .def("__repr__", [](const TraceRecord& r) {
        return "TraceRecord(path='" + r.path + "', op='" + r.op + "', direction='" +
               std::string(to_string(r.direction)) + "', backend='" + std::string(to_string(r.backend)) +
               "', index_bits=" + std::to_string(r.index_bits) +
               (r.variant.empty() ? std::string() : ", variant='" + r.variant + "'") + ")";
      });

  nb::class_<TraceSession>(m, "TraceSession")
      .def(nb::init<>())
      .def("records", &TraceSession::records)
      .def("stop", &TraceSession::stop);

  nb::class_<PathInfo>(m, "PathInfo")
      .def_prop_ro("name", [](const PathInfo& p) { return std::string(p.name); })
      .def_prop_ro("op", [](const PathInfo& p) { return std::string(p.op); })
      .def_prop_ro("direction", [](const PathInfo& p) { return std::string(to_string(p.direction)); })
      .def_prop_ro("backend", [](const PathInfo& p) { return std::string(to_string(p.backend)); })
      .def_ro("index_bits", &PathInfo::index_bits)
      .def("__repr__", [](const PathInfo& p) { return "PathInfo(name='" + std::string(p.name) + "')"; });

  m.def("paths", [] { return segred::paths(); }, nb::rv_policy::copy);
  // The address segred reads an array at: tests use it to prove inputs are not copied.
  m.def("data_ptr", [](InArray a) { return reinterpret_cast<uintptr_t>(a.data()); }, nb::arg("array"));
  m.def("built_with_cuda", &segred::built_with_cuda);
  m.def("cuda_device_count", &segred::cuda_device_count);
  // Test hooks (session 34): the CPU's L2 in bytes as the CPU softmax plan sees it, and
  // its override (>= 0: that size; -1: the detected one), so that the tests reach both
  // sides of the plan's L2 rule (spatial_stream below 1 MiB) on any host.
  m.def("_cpu_l2_bytes", &segred::cpu::softmax_l2_bytes);
  m.def("_set_cpu_l2_bytes", [](int64_t v) { segred::cpu::softmax_l2_override() = v < 0 ? -1 : v; }, nb::arg("bytes"));
  m.attr("__version__") = segred::version;

  segred::py::bind_extensions(m);
  segred::py::bind_check(m);
  segred::py::bind_jax(m);
}
