// The CUDA softmax kernel kinds (src/core/softmax_geometry.h describes them) and
// their vector widths. Its own header so the kernel translation units do not
// depend on the geometry, yet both read the widths from one place.
#pragma once
#include <cstdint>

namespace segred::detail {
enum class SoftmaxKernel : uint8_t { Warp, Block, Spatial };

// Elements per vector load for an element of `es` bytes (when pointers and the
// row or column length allow vectors; else 1). Last-dim kernels: 16 bytes.
// Spatial: 16 bytes for 4- and 8-byte types, 8 bytes (4 elements) for 16-bit
// types: each vector element is a statistics slot of its own (a column), and 8
// slots per thread doubled the reduction work against float32 (v2: fp16 spatial
// at 40-50% of fp32's bandwidth).
constexpr int softmax_vec_elems(SoftmaxKernel k, int es) {
  const int v16 = 16 / (es > 0 ? es : 1);
  return k == SoftmaxKernel::Spatial && v16 > 4 ? 4 : v16;
}
}  // namespace segred::detail
