// CPU softmax kernel entry points. Inputs are contiguous [outer, D, inner] (the
// API layer copies strided inputs); outputs are contiguous, of the same shape,
// and fully written. p.log selects log_softmax; plan.path says which path runs.
#pragma once
#include <atomic>

#include "segred/plan.h"
#include "segred/softmax.h"
#include "segred/tensor.h"

namespace segred::cpu {

void softmax_fwd(const Plan& plan, const SoftmaxProblem& p, const TensorView& x, const TensorView& out);

// The kernels are built for the baseline ISA and, on x86-64 with GCC, for AVX2 +
// FMA, chosen by the CPU's features. Tests set this to false to run the baseline
// kernels on an AVX2 machine too (defined in src/core/softmax.cpp).
std::atomic<bool>& softmax_allow_avx2();
// The one dispatch decision both directions use: AVX2 + FMA kernels were built,
// the CPU has them, and softmax_allow_avx2() is true (defined in softmax_fwd.cpp).
bool softmax_use_avx2();

void softmax_bwd(const Plan& plan, const SoftmaxProblem& p, const TensorView& grad, const TensorView& output,
                 const TensorView& grad_input);

}  // namespace segred::cpu
