// API layer of the ragged softmax family: validation (segment_reduce's rules),
// planning, dispatch to the CPU or CUDA kernels.
#include "segred/segment_softmax.h"

#include "segred/error.h"
#include "src/core/api_util.h"
#include "src/core/segment_softmax_geometry.h"
#include "src/core/segments.h"
#include "src/cpu/segment_softmax_kernels.h"
#ifdef SEGRED_WITH_CUDA
#include "segred/stream.h"
#include "src/cuda/segment_softmax_kernels.h"
#endif

namespace segred {

std::string_view to_string(SegmentSoftmaxOp op) {
  switch (op) {
    case SegmentSoftmaxOp::Softmax: return "segment_softmax";
    case SegmentSoftmaxOp::LogSoftmax: return "segment_log_softmax";
    case SegmentSoftmaxOp::LogSumExp: return "segment_logsumexp";
  }
  return "?";
}

// CUDA: the merge-path tiles of src/core/segment_softmax_geometry.h, one path per
// op and direction, i32 when every index the kernels form stays below 2^31;
// chunk = merge items per tile. (Planning needs no device: any build answers.)
// CPU: one path per op and direction, 64-bit.
Plan plan_segment_softmax(const SegmentSoftmaxProblem& p) {
  if (p.backend == Backend::CUDA) {
    // The lane-group path where it applies (its grid: the resident blocks of every SM, known
    // at launch; the plan records the block and, as chunk, the longest segment held in registers).
    if (detail::segment_softmax_takes_lanes(p)) {
      const detail::SegmentSoftmaxLanes lg = detail::segment_softmax_lanes(p);
      Plan plan;
      plan.path = detail::segment_softmax_lanes_path(p.op, p.direction);
      plan.index_bits = 64;
      plan.block = {detail::kSslThreads, 1, 1};
      plan.chunk = lg.max_short_rows;
      return plan;
    }
    const detail::SegmentSoftmaxGeometry g = detail::segment_softmax_geometry(p);
    Plan plan;
    plan.path = detail::segment_softmax_cuda_path(p.op, p.direction, g.index_bits);
    plan.index_bits = g.index_bits;
    plan.grid = {g.grid, 1, 1};
    plan.block = {g.block, 1, 1};
    plan.chunk = g.items;
    return plan;
  }
  static constexpr std::string_view kPaths[3][2] = {
      {"segment_softmax.fwd.cpu.i64", "segment_softmax.bwd.cpu.i64"},
      {"segment_log_softmax.fwd.cpu.i64", "segment_log_softmax.bwd.cpu.i64"},
      {"segment_logsumexp.fwd.cpu.i64", "segment_logsumexp.bwd.cpu.i64"},
  };
  Plan plan;
  plan.path = kPaths[int(p.op)][p.direction == Direction::Fwd ? 0 : 1];
  plan.index_bits = 64;
  return plan;
}

namespace {

std::string op_name(SegmentSoftmaxOp op, Direction d) {
  return std::string(to_string(op)) + (d == Direction::Bwd ? "_backward" : "");
}

// CPU: shapes and metadata values; CUDA: shapes only (the metadata lives on the
// device and is validated by the CUDA entry point, unless unsafe).
detail::SegmentLayout resolve(const std::string& op, const TensorView& data, const Segments& seg) {
  SEGRED_CHECK(!seg.initial, ValueError, op, ": initial is not an argument of the segment softmax family");
  if (detail::backend_of(data) == Backend::CUDA) return detail::resolve_layout(op.c_str(), data, seg);
  return detail::resolve_segments(op.c_str(), data, seg);
}

[[noreturn, maybe_unused]] void no_cuda(const std::string& op) {
  throw ValueError(detail::cat(op, ": data is on CUDA but this segred build has no CUDA backend"));
}

Shape result_shape(SegmentSoftmaxOp op, const detail::SegmentLayout& lay, const Shape& data_shape) {
  Shape s = data_shape;
  if (op == SegmentSoftmaxOp::LogSumExp) s[size_t(lay.axis)] = lay.S;
  return s;
}

SegmentSoftmaxProblem problem(SegmentSoftmaxOp op, Direction d, const detail::SegmentLayout& lay,
                              const TensorView& data) {
  return {detail::backend_of(data), d, op, data.dtype, lay.outer, lay.L, lay.inner, lay.S};
}

}  // namespace

void segment_softmax_out(SegmentSoftmaxOp op, const TensorView& data, const Segments& seg, const TensorView& out) {
  const std::string name = op_name(op, Direction::Fwd);
  const auto lay = resolve(name, data, seg);
  detail::check_output(name.c_str(), "out", out, result_shape(op, lay, data.sizes), data.dtype, data.device,
                       {&data});
  const Plan plan = plan_segment_softmax(problem(op, Direction::Fwd, lay, data));
  if (detail::backend_of(data) == Backend::CUDA) {  // validates the device metadata even when out is empty
#ifdef SEGRED_WITH_CUDA
    cuda::segment_softmax_fwd(plan, op, lay, seg, data, out, current_stream());  // the caller's stream
    return;
#else
    no_cuda(name);
#endif
  }
  if (out.numel() == 0) return;  // nothing to write: no kernel runs
  detail::Contig x(data);
  cpu::segment_softmax_fwd(plan, op, lay, x.view, out);
}

namespace {
Tensor forward(SegmentSoftmaxOp op, const TensorView& data, const Segments& seg) {
  const auto lay = resolve(op_name(op, Direction::Fwd), data, seg);
  Tensor out = Tensor::empty(result_shape(op, lay, data.sizes), data.dtype, data.device);
  segment_softmax_out(op, data, seg, out);
  return out;
}
}  // namespace

Tensor segment_softmax(const TensorView& d, const Segments& s) { return forward(SegmentSoftmaxOp::Softmax, d, s); }
Tensor segment_log_softmax(const TensorView& d, const Segments& s) {
  return forward(SegmentSoftmaxOp::LogSoftmax, d, s);
}
Tensor segment_logsumexp(const TensorView& d, const Segments& s) { return forward(SegmentSoftmaxOp::LogSumExp, d, s); }

void segment_softmax_backward_out(SegmentSoftmaxOp op, const TensorView& grad, const TensorView& output,
                                  const TensorView& data, const Segments& seg, const TensorView& grad_input) {
  const std::string name = op_name(op, Direction::Bwd);
  const bool lse = op == SegmentSoftmaxOp::LogSumExp;
  // softmax / log_softmax: the data's shape is the output's; the metadata is
  // checked against it. logsumexp: against `data`.
  const TensorView& shape_ref = lse ? data : output;
  const auto lay = resolve(name, shape_ref, seg);
  const Shape out_shape = result_shape(op, lay, shape_ref.sizes);
  detail::check_tensor(name.c_str(), "output", output, out_shape, shape_ref.dtype, shape_ref.device);
  detail::check_tensor(name.c_str(), "grad", grad, out_shape, shape_ref.dtype, shape_ref.device);
  detail::check_output(name.c_str(), "grad_input", grad_input, shape_ref.sizes, shape_ref.dtype, shape_ref.device,
                       {&grad, &output, &data});
  const Plan plan = plan_segment_softmax(problem(op, Direction::Bwd, lay, shape_ref));
  if (detail::backend_of(shape_ref) == Backend::CUDA) {
#ifdef SEGRED_WITH_CUDA
    cuda::segment_softmax_bwd(plan, op, lay, seg, grad, output, shape_ref, grad_input, current_stream());
    return;
#else
    no_cuda(name);
#endif
  }
  if (grad_input.numel() == 0) return;
  detail::Contig g(grad), y(output), x(shape_ref);
  cpu::segment_softmax_bwd(plan, op, lay, g.view, y.view, x.view, grad_input);
}

Tensor segment_softmax_backward(const TensorView& grad, const TensorView& output, const Segments& seg) {
  Tensor gi = Tensor::empty(output.sizes, output.dtype, output.device);
  segment_softmax_backward_out(SegmentSoftmaxOp::Softmax, grad, output, output, seg, gi);
  return gi;
}
Tensor segment_log_softmax_backward(const TensorView& grad, const TensorView& output, const Segments& seg) {
  Tensor gi = Tensor::empty(output.sizes, output.dtype, output.device);
  segment_softmax_backward_out(SegmentSoftmaxOp::LogSoftmax, grad, output, output, seg, gi);
  return gi;
}
Tensor segment_logsumexp_backward(const TensorView& grad, const TensorView& output, const TensorView& data,
                                  const Segments& seg) {
  Tensor gi = Tensor::empty(data.sizes, data.dtype, data.device);
  segment_softmax_backward_out(SegmentSoftmaxOp::LogSumExp, grad, output, data, seg, gi);
  return gi;
}

}  // namespace segred
