// CPU softmax kernel entry points. Inputs are contiguous [outer, D, inner] (the
// API layer copies strided inputs); outputs are contiguous, of the same shape,
// and fully written. p.log selects log_softmax; plan.path says which path runs.
#pragma once
#include "segred/plan.h"
#include "segred/softmax.h"
#include "segred/tensor.h"

namespace segred::cpu {

void softmax_fwd(const Plan& plan, const SoftmaxProblem& p, const TensorView& x, const TensorView& out);

void softmax_bwd(const Plan& plan, const SoftmaxProblem& p, const TensorView& grad, const TensorView& output,
                 const TensorView& grad_input);

}  // namespace segred::cpu
