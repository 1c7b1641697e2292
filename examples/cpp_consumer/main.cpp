// Max-pool each segment, then the gradient of a loss with a negative weight:
// the tied maxima share it (segred's tie="split"), they do not each take it whole.
#include <segred/segred.h>

#include <cstdio>
#include <vector>

int main() {
  std::vector<float> x = {1, 3, 3, 2, 5, 0};
  std::vector<int64_t> lengths = {4, 2};
  segred::Segments seg;
  seg.lengths = segred::TensorView(lengths.data(), segred::DType::Int64, {2});
  const segred::TensorView data(x.data(), segred::DType::Float32, {6});
  const segred::Tensor y = segred::segment_reduce(data, segred::Reduce::Max, seg);
  std::vector<float> g = {-1, 2};
  const segred::Tensor gi = segred::segment_reduce_backward(
      segred::TensorView(g.data(), segred::DType::Float32, {2}), y, data, segred::Reduce::Max, seg);
  std::printf("max = [%g, %g], grad = [", y.ptr<float>()[0], y.ptr<float>()[1]);
  for (int i = 0; i < 6; ++i) std::printf("%s%g", i ? ", " : "", gi.ptr<float>()[i]);
  std::printf("]\n");
  const bool ok = gi.ptr<float>()[1] == -0.5f && gi.ptr<float>()[2] == -0.5f && gi.ptr<float>()[4] == 2.0f;
  return ok ? 0 : 1;
}
