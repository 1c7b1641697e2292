// The CUDA softmax kernel kinds (src/core/softmax_geometry.h describes them).
// Its own header so the kernel translation units do not depend on the geometry.
#pragma once
#include <cstdint>

namespace segred::detail {
enum class SoftmaxKernel : uint8_t { Warp, Block, Spatial };
}  // namespace segred::detail
