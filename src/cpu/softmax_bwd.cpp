// softmax / log_softmax backward on the CPU, fused: per row one reduction pass
// acc = sum term(g, y) (softmax: g * y; log_softmax: g), then one pass writing
// gI = apply(g, y, acc) (softmax: y * (g - acc); log_softmax: g - exp(y) * acc).
// No temporary tensor: the second pass re-reads g and y, from cache when the row
// (lastdim) or the [D, W] tile (spatial) fits there; gI is written once
// (streaming stores for large calls). Kernels in softmax_bwd_kernels.inc, built
// per instruction set like the forward (softmax_isa_kernels.inc).
//
// Paths (log_softmax has the same two under its own op name):
//   softmax.bwd.cpu.lastdim.i64   inner == 1: a row is D contiguous values.
//   softmax.bwd.cpu.spatial.i64   inner > 1: a work item is one outer index and a
//       tile of W = plan.chunk columns.
// OpenMP over rows / work items; reduction order fixed by the shape and the plan.
#include "src/cpu/softmax_isa.h"  // first: its compiler settings apply to every include

namespace segred::cpu {
namespace {

#define SEGRED_SOFTMAX_KERNELS "src/cpu/softmax_bwd_kernels.inc"
#include "src/cpu/softmax_isa_kernels.inc"

}  // namespace

void softmax_bwd(const Plan& plan, const SoftmaxProblem& p, const TensorView& grad, const TensorView& output,
                 const TensorView& grad_input) {
  detail::record_launch(plan.path);
  const bool last = plan.path.find(".lastdim.") != std::string_view::npos;
  const bool stream = softmax_stream_output(3 * grad.numel() * dtype_size(grad.dtype));
  const SoftmaxIsa isa = softmax_isa();
  SEGRED_DISPATCH_FLOAT(grad.dtype, T, [&] {
    const T* gp = grad.ptr<const T>();
    const T* yp = output.ptr<const T>();
    T* op = grad_input.ptr<T>();
    SEGRED_SOFTMAX_ON_ISA(isa, run<T>(plan, p, gp, yp, op, last, stream))
  });
}

}  // namespace segred::cpu
