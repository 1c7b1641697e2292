#include "python/src/arrays.h"

namespace segred::py {

namespace {
DType dtype_from(nb::dlpack::dtype t, const char* arg) {
  using C = nb::dlpack::dtype_code;
  const auto code = C(t.code);
  if (t.lanes == 1) {
    if (code == C::Float && t.bits == 32) return DType::Float32;
    if (code == C::Float && t.bits == 64) return DType::Float64;
    if (code == C::Float && t.bits == 16) return DType::Float16;
    if (code == C::Bfloat && t.bits == 16) return DType::BFloat16;
    if (code == C::Int && t.bits == 32) return DType::Int32;
    if (code == C::Int && t.bits == 64) return DType::Int64;
  }
  throw segred::TypeError(detail::cat(arg, ": unsupported dtype (DLPack code ", int(t.code), ", ", int(t.bits),
                                      " bits); expected float32, float64, float16, bfloat16, int32 or int64"));
}

template <class A>
TensorView make_view(const A& a, const char* arg) {
  Shape sizes(a.ndim()), strides(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) {
    sizes[i] = int64_t(a.shape(i));
    strides[i] = int64_t(a.stride(i));
  }
  DeviceRef dev;
  if (a.device_type() == nb::device::cuda::value) dev = {Device::CUDA, int(a.device_id())};
  else if (a.device_type() != nb::device::cpu::value)
    throw segred::TypeError(detail::cat(arg, ": arrays on device type ", a.device_type(),
                                        " are not supported (CPU and CUDA only)"));
  return TensorView(const_cast<void*>(static_cast<const void*>(a.data())), dtype_from(a.dtype(), arg), sizes,
                    strides, dev);
}

nb::dlpack::dtype dl_dtype(DType t) {
  switch (t) {
    case DType::Float32: return nb::dtype<float>();
    case DType::Float64: return nb::dtype<double>();
    case DType::Float16: return {uint8_t(nb::dlpack::dtype_code::Float), 16, 1};
    case DType::BFloat16: return {uint8_t(nb::dlpack::dtype_code::Bfloat), 16, 1};
    case DType::Int32: return nb::dtype<int32_t>();
    case DType::Int64: return nb::dtype<int64_t>();
  }
  return nb::dtype<float>();
}
}  // namespace

TensorView view_of(const InArray& a, const char* arg) { return make_view(a, arg); }
TensorView view_of(const OutArray& a, const char* arg) { return make_view(a, arg); }

nb::object to_array(Tensor t) {
  auto* owner = new Tensor(std::move(t));
  nb::capsule keep(owner, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  const auto& v = owner->view();
  std::vector<size_t> shape(v.sizes.begin(), v.sizes.end());
  std::vector<int64_t> strides(v.strides.begin(), v.strides.end());
  const bool cuda = v.device.type == Device::CUDA;
  nb::ndarray<> arr(v.data, shape.size(), shape.data(), keep, strides.data(), dl_dtype(v.dtype),
                    cuda ? nb::device::cuda::value : nb::device::cpu::value, cuda ? v.device.index : 0);
  return nb::cast(arr, nb::rv_policy::reference);
}

nb::object to_numpy(Tensor t) {
  SEGRED_CHECK(t.view().device.type == Device::CPU, ValueError, "result: only CPU results can become NumPy arrays");
  auto* owner = new Tensor(std::move(t));
  nb::capsule keep(owner, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  const auto& v = owner->view();
  std::vector<size_t> shape(v.sizes.begin(), v.sizes.end());
  std::vector<int64_t> strides(v.strides.begin(), v.strides.end());
  nb::ndarray<nb::numpy> arr(v.data, shape.size(), shape.data(), keep, strides.data(), dl_dtype(v.dtype));
  return nb::cast(arr, nb::rv_policy::reference);
}

}  // namespace segred::py
