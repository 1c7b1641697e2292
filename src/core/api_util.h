// Checks and conversions every API layer (segment_reduce, softmax, segment_softmax)
// shares: one definition each, so the ops' messages and rules cannot drift.
#pragma once
#include <utility>

#include "segred/error.h"
#include "segred/tensor.h"
#include "segred/trace.h"

namespace segred::detail {

inline Backend backend_of(const TensorView& t) {
  return t.device.type == Device::CPU ? Backend::CPU : Backend::CUDA;
}

// Contiguous input for the CPU kernels: the view itself, or a copy.
struct Contig {
  Tensor copy;
  TensorView view;
  explicit Contig(const TensorView& v) {
    if (v.is_contiguous()) {
      view = v;
    } else {
      copy = Tensor::contiguous_copy(v);
      view = copy.view();
    }
  }
};

// `name` must have exactly this shape, dtype and device.
inline void check_tensor(const char* op, const char* name, const TensorView& t, const Shape& shape, DType dtype,
                         DeviceRef dev) {
  SEGRED_CHECK(t.sizes == shape, ValueError, op, ": ", name, " has shape ", shape_string(t.sizes), ", expected ",
               shape_string(shape));
  SEGRED_CHECK(t.dtype == dtype, TypeError, op, ": ", name, " has dtype ", dtype_name(t.dtype), ", expected ",
               dtype_name(dtype));
  SEGRED_CHECK(t.device == dev, ValueError, op, ": ", name, " is on ", to_string(t.device), ", expected ",
               to_string(dev));
}

// True when the byte ranges two arrays can touch intersect (negative strides included).
inline bool overlaps(const TensorView& a, const TensorView& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  auto span = [](const TensorView& t) {
    int64_t lo = 0, hi = 0;
    for (size_t d = 0; d < t.sizes.size(); ++d) {
      const int64_t reach = (t.sizes[d] - 1) * t.strides[d];
      (reach < 0 ? lo : hi) += reach;
    }
    const char* p = static_cast<const char*>(t.data);
    return std::pair<const char*, const char*>(p + lo * dtype_size(t.dtype), p + (hi + 1) * dtype_size(t.dtype));
  };
  auto [a0, a1] = span(a);
  auto [b0, b1] = span(b);
  return a0 < b1 && b0 < a1;
}

// An output: the given shape/dtype/device, contiguous, and disjoint from every input.
inline void check_output(const char* op, const char* name, const TensorView& out, const Shape& shape, DType dtype,
                         DeviceRef dev, std::initializer_list<const TensorView*> inputs) {
  check_tensor(op, name, out, shape, dtype, dev);
  SEGRED_CHECK(out.is_contiguous(), ValueError, op, ": ", name, " must be contiguous");
  for (const TensorView* in : inputs)
    SEGRED_CHECK(!overlaps(out, *in), ValueError, op, ": ", name, " must not overlap an input");
}

}  // namespace segred::detail
