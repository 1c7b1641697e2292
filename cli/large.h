// Boundary cases past 2^31 and 2^32 elements (`segred check --large`), as data:
// every array is given by a rule (one fill value, a few patched elements), so no
// host array of the tensor's size is ever built for the expectations, and the
// result is checked at a few elements (the start, the end, the patched elements,
// the elements around 2^31 and 2^32) against exact expected values. The helpers
// here are op-independent: the softmax boundary cases (cli/softmax_cases.cpp)
// use them, and a family that adds its own (the ragged softmax family in
// cli/segment_softmax_cases.cpp) builds its arrays, memory checks and
// point reads from the same pieces.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cli/report.h"
#include "segred/tensor.h"

namespace segred::cli {

struct Patch {
  int64_t at;  // flat (row-major) element index
  double v;
};

// An array given by a rule: `fill` everywhere except the patched elements.
struct FilledArray {
  double fill = 0;
  std::vector<Patch> patches;
  double at(int64_t i) const;  // the value of element i (the last patch of i wins)
};

// Bytes free for a boundary case on `dev`: available physical memory on the
// CPU, cudaMemGetInfo's free bytes on a CUDA device.
int64_t free_bytes(DeviceRef dev);
// "" when `need` bytes (plus 1 GiB of slack on a GPU) fit on `dev`, else the
// reason to skip: "needs 24.0 GiB, 11.3 GiB free on cuda".
std::string memory_shortfall(DeviceRef dev, int64_t need);
// When `need` bytes do not fit on `dev`: marks `row` skipped with the reason and
// returns true (the caller returns the row without running the case).
bool skip_if_short(Row& row, DeviceRef dev, int64_t need);
std::string gib(int64_t bytes);  // "24.0 GiB"

// A contiguous tensor of `shape` on `dev` holding `a` rounded to `dtype`. The
// fill is written by doubling copies on the device (log2(n) device-to-device
// copies, no host array of the tensor's size) and by a parallel loop on the CPU.
Tensor make_filled(const Shape& shape, DType dtype, const FilledArray& a, DeviceRef dev);
// The values of elements `at` of a contiguous tensor on any device, in float64
// (one small copy per element on a GPU).
std::vector<double> read_elements(const TensorView& t, const std::vector<int64_t>& at);
// `v` rounded to `dtype` (float16/bfloat16/float32/float64), as a double.
double round_to_dtype(double v, DType dtype);

// Elements worth checking in a tensor of n elements: the first and last four,
// the middle, and both sides of 2^31 and 2^32 (where 32-bit offsets overflow
// or wrap), plus `extra`; sorted, unique, inside [0, n).
std::vector<int64_t> boundary_points(int64_t n, const std::vector<int64_t>& extra = {});

}  // namespace segred::cli
