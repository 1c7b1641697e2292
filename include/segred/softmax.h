// segred/softmax.h: dense softmax, log_softmax and their backward over any dim
// (shared/SEMANTICS.md, "softmax family").
//
// x is viewed as [outer, D, inner]: outer = prod(x.shape[:dim]), D = x.shape[dim],
// inner = prod(x.shape[dim+1:]). Every (outer, inner) index is one independent
// "row" of D values, consecutive ones `inner` elements apart. Two kernel paths,
// chosen by plan_softmax and visible in the trace:
//   lastdim  inner == 1: a row is D contiguous values.
//   spatial  inner > 1: a row is a strided column; the kernel walks a tile of
//            columns so that every load runs along `inner` (contiguous).
//
// Forward (per row):  m = max(x), s = sum exp(x - m)
//   softmax      y = exp(x - m) / s
//   log_softmax  y = x - m - log(s)
// Backward (fused: one reduction over the row, then the result; no temporary):
//   softmax      gI = y * (g - sum(g * y))
//   log_softmax  gI = g - exp(y) * sum(g)
// Accumulation in float32 for float32/float16/bfloat16, float64 for float64.
//
// Special values: a row of all -inf gives NaN; any NaN or +inf in a row makes the
// whole row NaN; D == 1 gives softmax 1, log_softmax 0, gradient 0 (for finite
// inputs); an empty tensor (D == 0 included) gives an empty result and runs no
// kernel; a 0-dim tensor is treated as shape [1] (dim must be 0 or -1) and the
// result is 0-dim.
//
// Preconditions (checked; a violation throws segred::ValueError or, for dtypes,
// segred::TypeError, naming the argument):
//  - x, grad, output: float32/float64/float16/bfloat16, on the CPU or one CUDA device, any strides
//    (a non-contiguous input is copied once; the result is the same).
//  - dim in [-ndim, ndim) (ndim counted as 1 for a 0-dim tensor), wrapped like a
//    Python index.
//  - grad and output: the same shape and dtype.
//  - outputs given to *_out: contiguous, the input's shape and dtype, on the input's device,
//    and not overlapping any input. A call that throws writes nothing.
// Results are deterministic: the reduction order depends only on the shape and
// the Plan, never on thread timing.
#pragma once
#include <cstdint>

#include "segred/plan.h"
#include "segred/tensor.h"

namespace segred {

// Forward: returns a new contiguous tensor of x's shape and dtype.
Tensor softmax(const TensorView& x, int64_t dim);
Tensor log_softmax(const TensorView& x, int64_t dim);
// Forward into `out` (contiguous, x's shape and dtype, not overlapping x).
void softmax_out(const TensorView& x, int64_t dim, const TensorView& out);
void log_softmax_out(const TensorView& x, int64_t dim, const TensorView& out);

// Backward: `grad` is the upstream gradient, `output` the forward's result (for
// log_softmax_backward, the log-probabilities); returns grad_input.
Tensor softmax_backward(const TensorView& grad, const TensorView& output, int64_t dim);
Tensor log_softmax_backward(const TensorView& grad, const TensorView& output, int64_t dim);
// Backward into `grad_input` (contiguous, output's shape and dtype, not
// overlapping grad or output).
void softmax_backward_out(const TensorView& grad, const TensorView& output, int64_t dim,
                          const TensorView& grad_input);
void log_softmax_backward_out(const TensorView& grad, const TensorView& output, int64_t dim,
                              const TensorView& grad_input);

// The problem a softmax plan is made for: everything the path choice may depend on.
struct SoftmaxProblem {
  Backend backend = Backend::CPU;
  Direction direction = Direction::Fwd;
  bool log = false;  // log_softmax (its own paths, so the trace names the op)
  DType dtype = DType::Float32;
  int64_t outer = 1;     // prod(shape[:dim])
  int64_t dim_size = 1;  // D, the reduced length
  int64_t inner = 1;     // prod(shape[dim+1:]): the stride between reduced values
  // CUDA device capabilities the work split depends on (defaults: the H200). The
  // launcher fills them from the device and may lower max_threads/max_cluster
  // when occupancy reports no resident block (shared/DESIGN.md, launch viability).
  int sm_count = 132;      // multiprocessors
  int max_threads = 1024;  // threads per block
  int max_cluster = 16;    // blocks per thread-block cluster (16 needs the non-portable opt-in)
  // CPU threads the work split is made for (the API layer fills it from
  // OpenMP's team size; default: one). Only the split depends on it: the
  // reduction order, and so every result, is the same for any value.
  int cpu_threads = 1;
  // The CPU's level-2 cache per core in bytes (the API layer fills it from sysfs,
  // sysconf as the fallback; 0: unknown). Where it is at least 1 MiB the spatial
  // tiles are sized to stay in it between a kernel's two passes (the rules measured
  // on the benchmark host); below that, and when unknown, they are whole rows of
  // the slab streamed twice and the long forward takes spatial_stream (session 25,
  // measured on a machine with 512 KiB). The reduction order, and so every result,
  // is the same either way.
  int64_t cpu_l2_bytes = 0;
};

// Pure: the [outer, D, inner] decomposition of `sizes` around `dim` (wrapped like
// Python; a 0-dim shape counts as [1]). Throws ValueError naming `dim` when it is
// out of range. No allocation of tensor memory; valid for any size.
SoftmaxProblem make_softmax_problem(const Shape& sizes, int64_t dim, DType dtype,
                                    Direction direction = Direction::Fwd, bool log = false,
                                    Backend backend = Backend::CPU);

// Pure: which path, index width and work split a call would use. No allocation,
// no device access; valid for sizes far beyond memory.
//  - path: "<softmax|log_softmax>.<fwd|bwd>.cpu.<lastdim|spatial>.i64", lastdim
//    exactly when inner == 1 (size-1 trailing dims fold into inner == 1); the
//    forward with inner > 1 takes "<op>.fwd.cpu.spatial_stream.i64" instead of
//    spatial when D > 512 and D * 128 * (accumulation + element size) > 1 MiB
//    (float32: D > 1024; 16-bit: D > 1365; float64: D > 512) on a CPU whose L2
//    (p.cpu_l2_bytes) is under 1 MiB or unknown.
//  - index_bits: 64 (CPU code indexes in 64 bits throughout).
//  - chunk: lastdim forward: elements of a row per online-max block (the block is
//    reduced twice, the second time from L1); lastdim backward: 0 (a row is one
//    item); spatial forward: columns per work item (a [D, chunk] tile of the
//    input is kept near L2 between its passes), at most inner; spatial backward
//    and spatial_stream: columns per work item, whole rows of the [D, inner]
//    slab where they fit (at most 4096) and enough items for p.cpu_threads; with
//    an L2 of >= 1 MiB the backward takes rows of 1 KiB (D <= 512) or 1024 columns.
Plan plan_softmax(const SoftmaxProblem& p);

}  // namespace segred
