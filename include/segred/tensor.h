// segred/tensor.h: the non-owning view kernels see, and an owning tensor for C++ users.
//
// Sizes and strides are in elements (not bytes), like PyTorch and DLPack. A view
// may be non-contiguous; ops accept any strides (SEMANTICS.md) and produce
// contiguous outputs.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "segred/dtype.h"

namespace segred {

enum class Device : uint8_t { CPU, CUDA };

struct DeviceRef {
  Device type = Device::CPU;
  int index = 0;
  bool operator==(const DeviceRef&) const = default;
};

std::string to_string(DeviceRef d);

using Shape = std::vector<int64_t>;

// Row-major strides for `sizes`.
Shape contiguous_strides(const Shape& sizes);
// Product of sizes (1 for a 0-dim shape).
int64_t numel(const Shape& sizes);
std::string shape_string(const Shape& s);

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::Float32;
  DeviceRef device{};
  Shape sizes;
  Shape strides;  // elements; empty means contiguous

  TensorView() = default;
  TensorView(void* d, DType t, Shape s, Shape st = {}, DeviceRef dev = {})
      : data(d), dtype(t), device(dev), sizes(std::move(s)), strides(std::move(st)) {
    if (strides.empty()) strides = contiguous_strides(sizes);
  }

  int64_t ndim() const { return int64_t(sizes.size()); }
  int64_t numel() const { return segred::numel(sizes); }
  int64_t size(int64_t d) const { return sizes[size_t(d)]; }
  // True when the elements are laid out row-major without gaps (size-1 dims ignored).
  bool is_contiguous() const;
  template <class T> T* ptr() const { return static_cast<T*>(data); }
};

// An owning tensor: allocates contiguous memory on the CPU or a CUDA device. Host
// buffers are 64-byte aligned; from 4 MiB on they are 2 MiB-aligned and advised
// MADV_HUGEPAGE on Linux, as NumPy's allocator does (src/core/host_memory.h).
class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(const Shape& sizes, DType dtype, DeviceRef device = {});
  // Contiguous copy of any view on the CPU (the view must be on the CPU).
  static Tensor contiguous_copy(const TensorView& v);
  // Contiguous copy of a contiguous view on another device (CPU <-> CUDA).
  static Tensor copy_to(const TensorView& v, DeviceRef device);

  const TensorView& view() const { return view_; }
  operator const TensorView&() const { return view_; }
  void* data() const { return view_.data; }
  template <class T> T* ptr() const { return view_.ptr<T>(); }
  const Shape& sizes() const { return view_.sizes; }
  DType dtype() const { return view_.dtype; }
  int64_t numel() const { return view_.numel(); }

 private:
  std::shared_ptr<void> storage_;
  TensorView view_;
};

}  // namespace segred
