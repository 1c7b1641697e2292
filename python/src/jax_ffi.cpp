// XLA FFI handlers (jax.ffi) for segred's ops, so segred.jax works under jax.jit
// and jax.grad on CPU and GPU. Built when jaxlib's FFI headers are found at
// configure time (python/CMakeLists.txt); exported to Python as capsules that
// segred/jax.py registers with jax.ffi.register_ffi_target.
//
// XLA buffers are dense row-major; on GPU the handler runs on XLA's stream
// (PlatformStream), which becomes segred's current stream for the call. A
// segred error becomes an FFI InvalidArgument error (JAX raises it at run time).
#include <nanobind/nanobind.h>

#include <string>
#include <string_view>

#include "segred/segred.h"
#include "segred/stream.h"
#include "xla/ffi/api/ffi.h"

#ifdef SEGRED_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace nb = nanobind;
namespace ffi = xla::ffi;

namespace segred::py {
namespace {

DType dtype_of_buffer(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::F32: return DType::Float32;
    case ffi::DataType::F64: return DType::Float64;
    case ffi::DataType::F16: return DType::Float16;
    case ffi::DataType::BF16: return DType::BFloat16;
    case ffi::DataType::S32: return DType::Int32;
    case ffi::DataType::S64: return DType::Int64;
    default: throw segred::TypeError("jax: unsupported dtype");
  }
}

DeviceRef device_for(void* stream) {
  if (stream == nullptr) return {};
  int dev = 0;
#ifdef SEGRED_WITH_CUDA
  cudaGetDevice(&dev);
#endif
  return {Device::CUDA, dev};
}

TensorView view(const ffi::AnyBuffer& b, DeviceRef dev) {
  const auto dims = b.dimensions();
  Shape s(dims.begin(), dims.end());
  return TensorView(b.untyped_data(), dtype_of_buffer(b.element_type()), s, {}, dev);
}

template <class F>
ffi::Error guarded(void* stream, F&& f) {
  try {
    StreamGuard guard(stream);
    f();
    return ffi::Error::Success();
  } catch (const std::exception& e) {
    return ffi::Error::InvalidArgument(e.what());
  }
}

Segments segments(const TensorView& meta, bool offsets, int64_t axis, bool unsafe, bool has_initial,
                  double initial) {
  Segments s;
  (offsets ? s.offsets : s.lengths) = meta;
  s.axis = axis;
  s.unsafe = unsafe;
  if (has_initial) s.initial = initial;
  return s;
}

ffi::Error segment_reduce_impl(void* stream, ffi::AnyBuffer data, ffi::AnyBuffer meta,
                               ffi::Result<ffi::AnyBuffer> out, std::string_view reduce, bool offsets,
                               int64_t axis, bool unsafe, bool has_initial, double initial) {
  return guarded(stream, [&] {
    const DeviceRef dev = device_for(stream);
    segment_reduce_out(view(data, dev), parse_reduce(reduce),
                       segments(view(meta, dev), offsets, axis, unsafe, has_initial, initial), view(*out, dev));
  });
}

ffi::Error segment_reduce_backward_impl(void* stream, ffi::AnyBuffer grad, ffi::AnyBuffer output,
                                        ffi::AnyBuffer data, ffi::AnyBuffer meta,
                                        ffi::Result<ffi::AnyBuffer> grad_input, std::string_view reduce,
                                        bool offsets, int64_t axis, bool unsafe, bool has_initial,
                                        double initial, std::string_view tie) {
  return guarded(stream, [&] {
    const DeviceRef dev = device_for(stream);
    segment_reduce_backward_out(view(grad, dev), view(output, dev), view(data, dev), parse_reduce(reduce),
                                segments(view(meta, dev), offsets, axis, unsafe, has_initial, initial),
                                parse_tie(tie), view(*grad_input, dev));
  });
}

ffi::Error softmax_impl(void* stream, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> out, int64_t dim, bool log) {
  return guarded(stream, [&] {
    const DeviceRef dev = device_for(stream);
    (log ? log_softmax_out : softmax_out)(view(x, dev), dim, view(*out, dev));
  });
}

ffi::Error softmax_backward_impl(void* stream, ffi::AnyBuffer grad, ffi::AnyBuffer output,
                                 ffi::Result<ffi::AnyBuffer> grad_input, int64_t dim, bool log) {
  return guarded(stream, [&] {
    const DeviceRef dev = device_for(stream);
    (log ? log_softmax_backward_out : softmax_backward_out)(view(grad, dev), view(output, dev), dim,
                                                            view(*grad_input, dev));
  });
}

ffi::Error segment_softmax_impl(void* stream, ffi::AnyBuffer data, ffi::AnyBuffer meta,
                                ffi::Result<ffi::AnyBuffer> out, int64_t op, bool offsets, int64_t axis,
                                bool unsafe) {
  return guarded(stream, [&] {
    SEGRED_CHECK(op >= 0 && op <= 2, ValueError, "segment softmax: unknown op ", op);
    const DeviceRef dev = device_for(stream);
    segment_softmax_out(SegmentSoftmaxOp(op), view(data, dev), segments(view(meta, dev), offsets, axis, unsafe,
                                                                        false, 0.0),
                        view(*out, dev));
  });
}

ffi::Error segment_softmax_backward_impl(void* stream, ffi::AnyBuffer grad, ffi::AnyBuffer output,
                                         ffi::AnyBuffer data, ffi::AnyBuffer meta,
                                         ffi::Result<ffi::AnyBuffer> grad_input, int64_t op, bool offsets,
                                         int64_t axis, bool unsafe) {
  return guarded(stream, [&] {
    SEGRED_CHECK(op >= 0 && op <= 2, ValueError, "segment softmax: unknown op ", op);
    const DeviceRef dev = device_for(stream);
    segment_softmax_backward_out(SegmentSoftmaxOp(op), view(grad, dev), view(output, dev), view(data, dev),
                                 segments(view(meta, dev), offsets, axis, unsafe, false, 0.0),
                                 view(*grad_input, dev));
  });
}

// CPU handlers get no stream (nullptr); GPU handlers get XLA's.
ffi::Error segment_softmax_cpu(ffi::AnyBuffer d, ffi::AnyBuffer m, ffi::Result<ffi::AnyBuffer> o, int64_t op,
                               bool off, int64_t ax, bool u) {
  return segment_softmax_impl(nullptr, d, m, o, op, off, ax, u);
}
ffi::Error segment_softmax_backward_cpu(ffi::AnyBuffer g, ffi::AnyBuffer y, ffi::AnyBuffer d, ffi::AnyBuffer m,
                                        ffi::Result<ffi::AnyBuffer> gi, int64_t op, bool off, int64_t ax, bool u) {
  return segment_softmax_backward_impl(nullptr, g, y, d, m, gi, op, off, ax, u);
}
ffi::Error segment_reduce_cpu(ffi::AnyBuffer d, ffi::AnyBuffer m, ffi::Result<ffi::AnyBuffer> o, std::string_view r,
                              bool off, int64_t ax, bool u, bool hi, double i) {
  return segment_reduce_impl(nullptr, d, m, o, r, off, ax, u, hi, i);
}
ffi::Error segment_reduce_backward_cpu(ffi::AnyBuffer g, ffi::AnyBuffer y, ffi::AnyBuffer d, ffi::AnyBuffer m,
                                       ffi::Result<ffi::AnyBuffer> gi, std::string_view r, bool off, int64_t ax,
                                       bool u, bool hi, double i, std::string_view t) {
  return segment_reduce_backward_impl(nullptr, g, y, d, m, gi, r, off, ax, u, hi, i, t);
}
ffi::Error softmax_cpu(ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> o, int64_t dim, bool log) {
  return softmax_impl(nullptr, x, o, dim, log);
}
ffi::Error softmax_backward_cpu(ffi::AnyBuffer g, ffi::AnyBuffer y, ffi::Result<ffi::AnyBuffer> gi, int64_t dim,
                                bool log) {
  return softmax_backward_impl(nullptr, g, y, gi, dim, log);
}

}  // namespace

#define SEGRED_SEGMENT_ATTRS                                                                            \
  .Attr<std::string_view>("reduce").Attr<bool>("offsets").Attr<int64_t>("axis").Attr<bool>("unsafe") \
      .Attr<bool>("has_initial").Attr<double>("initial")

XLA_FFI_DEFINE_HANDLER_SYMBOL(SegredSegmentReduceCpu, segment_reduce_cpu,
                              ffi::Ffi::Bind().Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>()
                                  SEGRED_SEGMENT_ATTRS);
XLA_FFI_DEFINE_HANDLER_SYMBOL(SegredSegmentReduceBackwardCpu, segment_reduce_backward_cpu,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>() SEGRED_SEGMENT_ATTRS.Attr<std::string_view>("tie"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(SegredSoftmaxCpu, softmax_cpu,
                              ffi::Ffi::Bind().Arg<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>().Attr<int64_t>("dim").Attr<bool>(
                                  "log"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(SegredSoftmaxBackwardCpu, softmax_backward_cpu,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<int64_t>("dim")
                                  .Attr<bool>("log"));
#define SEGRED_SEGSOFT_ATTRS .Attr<int64_t>("op").Attr<bool>("offsets").Attr<int64_t>("axis").Attr<bool>("unsafe")
XLA_FFI_DEFINE_HANDLER_SYMBOL(SegredSegmentSoftmaxCpu, segment_softmax_cpu,
                              ffi::Ffi::Bind().Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>()
                                  SEGRED_SEGSOFT_ATTRS);
XLA_FFI_DEFINE_HANDLER_SYMBOL(SegredSegmentSoftmaxBackwardCpu, segment_softmax_backward_cpu,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>() SEGRED_SEGSOFT_ATTRS);
#ifdef SEGRED_WITH_CUDA
XLA_FFI_DEFINE_HANDLER_SYMBOL(SegredSegmentSoftmaxCuda, segment_softmax_impl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<void*>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>() SEGRED_SEGSOFT_ATTRS);
XLA_FFI_DEFINE_HANDLER_SYMBOL(SegredSegmentSoftmaxBackwardCuda, segment_softmax_backward_impl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<void*>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>() SEGRED_SEGSOFT_ATTRS);
XLA_FFI_DEFINE_HANDLER_SYMBOL(SegredSegmentReduceCuda, segment_reduce_impl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<void*>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>() SEGRED_SEGMENT_ATTRS);
XLA_FFI_DEFINE_HANDLER_SYMBOL(SegredSegmentReduceBackwardCuda, segment_reduce_backward_impl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<void*>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>() SEGRED_SEGMENT_ATTRS.Attr<std::string_view>("tie"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(SegredSoftmaxCuda, softmax_impl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<void*>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<int64_t>("dim")
                                  .Attr<bool>("log"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(SegredSoftmaxBackwardCuda, softmax_backward_impl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<void*>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<int64_t>("dim")
                                  .Attr<bool>("log"));
#endif

void bind_jax(nb::module_& m) {
  auto cap = [](XLA_FFI_Error* (*fn)(XLA_FFI_CallFrame*)) { return nb::capsule(reinterpret_cast<void*>(fn)); };
  nb::dict cpu, cuda;
  cpu["segred_segment_reduce"] = cap(SegredSegmentReduceCpu);
  cpu["segred_segment_reduce_backward"] = cap(SegredSegmentReduceBackwardCpu);
  cpu["segred_softmax"] = cap(SegredSoftmaxCpu);
  cpu["segred_softmax_backward"] = cap(SegredSoftmaxBackwardCpu);
  cpu["segred_segment_softmax"] = cap(SegredSegmentSoftmaxCpu);
  cpu["segred_segment_softmax_backward"] = cap(SegredSegmentSoftmaxBackwardCpu);
#ifdef SEGRED_WITH_CUDA
  cuda["segred_segment_reduce"] = cap(SegredSegmentReduceCuda);
  cuda["segred_segment_reduce_backward"] = cap(SegredSegmentReduceBackwardCuda);
  cuda["segred_softmax"] = cap(SegredSoftmaxCuda);
  cuda["segred_softmax_backward"] = cap(SegredSoftmaxBackwardCuda);
  cuda["segred_segment_softmax"] = cap(SegredSegmentSoftmaxCuda);
  cuda["segred_segment_softmax_backward"] = cap(SegredSegmentSoftmaxBackwardCuda);
#endif
  m.attr("jax_ffi_targets") = nb::dict();
  m.attr("jax_ffi_targets")["cpu"] = cpu;
  m.attr("jax_ffi_targets")["CUDA"] = cuda;
}

}  // namespace segred::py
