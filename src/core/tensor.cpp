#include "segred/tensor.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "segred/error.h"
#include "src/core/device_memory.h"
#include "src/core/host_memory.h"

namespace segred {

std::string to_string(DeviceRef d) {
  return d.type == Device::CPU ? std::string("cpu") : "cuda:" + std::to_string(d.index);
}

Shape contiguous_strides(const Shape& sizes) {
  Shape st(sizes.size());
  int64_t s = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    st[i] = s;
    s *= sizes[i] > 0 ? sizes[i] : 1;
  }
  return st;
}

int64_t numel(const Shape& sizes) {
  int64_t n = 1;
  for (auto s : sizes) n *= s;
  return n;
}

std::string shape_string(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

bool TensorView::is_contiguous() const {
  int64_t expect = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 1) continue;
    if (sizes[i] == 0) return true;
    if (strides[i] != expect) return false;
    expect *= sizes[i];
  }
  return true;
}

Tensor Tensor::empty(const Shape& sizes, DType dtype, DeviceRef device) {
  for (auto s : sizes) SEGRED_CHECK(s >= 0, ValueError, "Tensor::empty: sizes ", shape_string(sizes), " must be >= 0");
  Tensor t;
  const size_t bytes = size_t(segred::numel(sizes)) * size_t(dtype_size(dtype));
  const size_t alloc = bytes ? bytes : 1;
  if (device.type == Device::CPU) {
    void* p = detail::host_allocate(alloc);
    SEGRED_CHECK(p != nullptr, DeviceError, "Tensor::empty: out of host memory for ", bytes, " bytes");
    t.storage_ = std::shared_ptr<void>(p, [](void* q) { detail::host_free(q); });
  } else {
    t.storage_ = detail::cuda_allocate(alloc, device.index);
  }
  t.view_ = TensorView(t.storage_.get(), dtype, sizes, {}, device);
  return t;
}

Tensor Tensor::copy_to(const TensorView& v, DeviceRef device) {
  SEGRED_CHECK(v.is_contiguous(), ValueError, "Tensor::copy_to: the source must be contiguous");
  Tensor t = empty(v.sizes, v.dtype, device);
  const size_t bytes = size_t(v.numel()) * size_t(dtype_size(v.dtype));
  if (bytes == 0) return t;
  if (v.device.type == Device::CPU && device.type == Device::CPU)
    std::memcpy(t.data(), v.data, bytes);
  else
    detail::cuda_copy(t.data(), v.data, bytes);
  return t;
}

Tensor Tensor::contiguous_copy(const TensorView& v) {
  SEGRED_CHECK(v.device.type == Device::CPU, ValueError, "Tensor::contiguous_copy: tensor must be on the CPU, got ",
               to_string(v.device));
  Tensor t = empty(v.sizes, v.dtype, v.device);
  const int64_t n = v.numel();
  if (n == 0) return t;
  const int es = dtype_size(v.dtype);
  const auto* src = static_cast<const char*>(v.data);
  auto* dst = static_cast<char*>(t.data());
  const size_t nd = v.sizes.size();
  std::vector<int64_t> idx(nd, 0);
  // Odometer over the source; the innermost dimension is copied as a strided run.
  const int64_t inner = nd ? v.sizes[nd - 1] : 1;
  const int64_t inner_stride = nd ? v.strides[nd - 1] : 1;
  for (int64_t out = 0; out < n; out += inner) {
    int64_t off = 0;
    for (size_t d = 0; d + 1 < nd; ++d) off += idx[d] * v.strides[d];
    for (int64_t i = 0; i < inner; ++i) std::memcpy(dst + (out + i) * es, src + (off + i * inner_stride) * es, es);
    for (size_t d = nd - 1; d-- > 0;) {
      if (++idx[d] < v.sizes[d]) break;
      idx[d] = 0;
    }
  }
  return t;
}

}  // namespace segred
