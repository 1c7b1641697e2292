// The ragged softmax family on CUDA: metadata validation (unless unsafe), strided
// inputs -> contiguous copies, then the (direction, dtype, index width)
// instantiation of segment_softmax_impl.cuh, which builds the merge space and
// runs the kernels. Nothing synchronises except the validation's metadata copy.
#include "src/cuda/segment_softmax_kernels.h"

#include <optional>
#include <string>

#include "src/cuda/segment_softmax_impl.cuh"

namespace segred::cuda {

#define SEGRED_SS_EXTERN(T)                                                    \
  extern template void run_segment_softmax_fwd<T, int32_t>(const SsArgs&);    \
  extern template void run_segment_softmax_fwd<T, int64_t>(const SsArgs&);    \
  extern template void run_segment_softmax_bwd<T, int32_t>(const SsArgs&);    \
  extern template void run_segment_softmax_bwd<T, int64_t>(const SsArgs&);
SEGRED_SS_EXTERN(float)
SEGRED_SS_EXTERN(double)
SEGRED_SS_EXTERN(half_t)
SEGRED_SS_EXTERN(bfloat16_t)
#undef SEGRED_SS_EXTERN

namespace {

// The calling thread's device for the call's duration.
class OnDevice {
 public:
  explicit OnDevice(int dev) {
    cudaGetDevice(&prev_);
    if (prev_ != dev) SEGRED_CUDA_CHECK(cudaSetDevice(dev), "segment_softmax: cudaSetDevice");
  }
  ~OnDevice() { cudaSetDevice(prev_); }

 private:
  int prev_ = 0;
};

std::string op_name(SegmentSoftmaxOp op, Direction d) {
  return std::string(to_string(op)) + (d == Direction::Bwd ? "_backward" : "");
}

void run(const SsArgs& a, DType dt, int bits) {
  const bool fwd = a.problem.direction == Direction::Fwd;
  auto go = [&](auto tag) {
    using T = decltype(tag);
    if (fwd) (bits == 32 ? run_segment_softmax_fwd<T, int32_t> : run_segment_softmax_fwd<T, int64_t>)(a);
    else (bits == 32 ? run_segment_softmax_bwd<T, int32_t> : run_segment_softmax_bwd<T, int64_t>)(a);
  };
  switch (dt) {
    case DType::Float32: go(float{}); break;
    case DType::Float64: go(double{}); break;
    case DType::Float16: go(half_t{}); break;
    case DType::BFloat16: go(bfloat16_t{}); break;
    default: throw TypeError(detail::cat(a.op, ": unsupported dtype ", dtype_name(dt)));
  }
}

// The plan's path is the lane-group path (src/cuda/segment_softmax_lanes.cuh).
bool lanes_path(const Plan& plan) { return plan.path.find(".cuda.lanes.") != std::string_view::npos; }

SegmentSoftmaxProblem problem_of(SegmentSoftmaxOp op, Direction d, const detail::SegmentLayout& lay, DType dt) {
  return {Backend::CUDA, d, op, dt, lay.outer, lay.L, lay.inner, lay.S};
}

}  // namespace

namespace {
// The call context both directions share: device, validation, scratch, arguments.
struct Call {
  std::string name;
  OnDevice guard;
  cudaStream_t s;
  detail::SegmentLayout lay;
  std::optional<Scratch> scratch;
  SsArgs a;
  Call(SegmentSoftmaxOp op, Direction d, const detail::SegmentLayout& lay0, const Segments& seg, DType dt,
       const TensorView& out, void* stream)
      : name(op_name(op, d)), guard(out.device.index), s(static_cast<cudaStream_t>(stream)), lay(lay0) {
    if (!seg.unsafe) validate_metadata(name.c_str(), lay, seg, s);
    a.stream = s;
    a.op = name.c_str();
    a.problem = problem_of(op, d, lay, dt);
    a.lay = &lay;
    a.seg = &seg;
    a.out = out.data;
    if (out.numel() == 0) return;  // validated; nothing to write
    scratch.emplace(s);
    a.scratch = &*scratch;
  }
  const void* input(const char* what, const TensorView& t) { return contiguous_input(a.op, what, t, *scratch, s); }
};
}  // namespace

void segment_softmax_fwd(const Plan& plan, SegmentSoftmaxOp op, const detail::SegmentLayout& lay, const Segments& seg,
                         const TensorView& data, const TensorView& out, void* stream) {
  Call c(op, Direction::Fwd, lay, seg, data.dtype, out, stream);
  if (out.numel() == 0) return;
  c.a.in0 = c.input("data", data);
  c.a.aligned = is_aligned16(c.a.in0) && is_aligned16(c.a.out);
  c.a.lanes = lanes_path(plan);
  run(c.a, data.dtype, plan.index_bits);
}

void segment_softmax_bwd(const Plan& plan, SegmentSoftmaxOp op, const detail::SegmentLayout& lay, const Segments& seg,
                         const TensorView& grad, const TensorView& output, const TensorView& data,
                         const TensorView& grad_input, void* stream) {
  Call c(op, Direction::Bwd, lay, seg, grad_input.dtype, grad_input, stream);
  if (grad_input.numel() == 0) return;
  if (op == SegmentSoftmaxOp::LogSumExp) {  // gI = g_seg exp(x - y_seg): x staged, g and y per segment
    c.a.in0 = c.input("data", data);
    c.a.seg0 = c.input("grad", grad);
    c.a.seg1 = c.input("output", output);
  } else {
    c.a.in0 = c.input("grad", grad);
    c.a.in1 = c.input("output", output);
  }
  c.a.aligned = is_aligned16(c.a.in0) && is_aligned16(c.a.out) && (!c.a.in1 || is_aligned16(c.a.in1));
  c.a.lanes = lanes_path(plan);
  run(c.a, grad_input.dtype, plan.index_bits);
}

}  // namespace segred::cuda
