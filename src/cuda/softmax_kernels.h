// CUDA entry points of the softmax family (host-callable; no CUDA headers here).
// Called by the API layer (src/core/softmax.cpp) after validation and planning.
// Inputs may be strided (copied to contiguous scratch on the stream); outputs are
// contiguous. `stream` is a cudaStream_t (nullptr: the default stream). Nothing
// synchronises.
#pragma once
#include "segred/softmax.h"
#include "segred/tensor.h"

namespace segred::cuda {

// ValueError naming `name` unless t's data is CUDA device (or managed) memory.
void softmax_check_device_pointer(const char* op, const char* name, const TensorView& t);

void softmax_fwd(const SoftmaxProblem& p, const TensorView& x, const TensorView& out, void* stream);
void softmax_bwd(const SoftmaxProblem& p, const TensorView& grad, const TensorView& output,
                 const TensorView& grad_input, void* stream);

}  // namespace segred::cuda
