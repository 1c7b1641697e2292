// segment_reduce backward on the CPU (SEMANTICS.md, segment_reduce_backward).
//
// Paths: segment_reduce.bwd.cpu.flat.i64 (inner == 1) and
// segment_reduce.bwd.cpu.features.i64 (inner > 1); same work split as the forward
// (segment_work.h). Per reduce, for a segment [b, b+n) and its upstream g:
//   sum   gi_j = g                   mean  gi_j = g / n
//   max/min, M = {j : isnan(x_j) || x_j == out}, c = |M|:
//         split: gi_j = g / c on M (every sign of g); first/last: g on the first/
//         last j of M. Needs c (or the first/last index) before writing, so a
//         segment is a stats pass then a write pass; a whole segment is still in
//         cache for the second pass, a long one is split into pieces whose stats
//         are combined in order.
//   prod  gi_j = g * start * prod_{k<j} x_k * prod_{k>j} x_k: an exclusive prefix
//         (running) times an exclusive suffix (a backward pass into scratch), O(n),
//         no division, so zeros need no special case. Long segments: piece
//         products give each piece its prefix and suffix factors.
// Rows outside every segment ([0, off[0]) and [off[S], L)) get 0.
//
// Compiled once per instruction set like the forward (segment_reduce_isa_bwd.inc
// through softmax_isa_kernels.inc, picked by softmax_isa()). Flat sum/mean fills
// and tie=split counts/writes of float32/float16/bfloat16 run explicit kVF-lane
// vector loops; a short segment's last vector store may run into the following
// segments of its block (rewritten next, in order): see the phase-1 loop. In phase
// 1, flat sum/mean/tie=split and sum/mean on rows of 2/4(/8) features write each
// run of consecutive short segments in one go (sr_run: vectors composed across
// segment boundaries, streamed straight to grad_input when it is large; flat
// float16 / bfloat16 runs: sr_run16, the same composed in 16-bit lanes).
#include "src/cpu/softmax_isa.h"  // first: the per-ISA build machinery of the CPU kernels

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>

#include "segred/trace.h"
#include "src/core/dispatch.h"
#include "src/cpu/kernels.h"
#include "src/cpu/segment_work.h"
#include "src/cpu/stream_store.h"
#include "src/ops/reduce_ops.h"

namespace segred::cpu {
namespace {

// Per-feature statistics of a max/min segment (or piece) for the write pass.
struct TieStats {
  int64_t count = 0;
  int64_t first = -1;  // row index within the segment
  int64_t last = -1;
  void add(const TieStats& o) {  // o follows *this in segment order
    if (o.count == 0) return;
    if (count == 0) first = o.first;
    last = o.last;
    count += o.count;
  }
};

template <class T>
struct Args {
  using A = acc_t<T>;
  const T* g;   // [outer, S, inner]
  const T* y;   // forward output, same shape
  const T* x;   // [outer, L, inner]
  T* gi;        // [outer, L, inner]
  int64_t L, S, inner;
  Reduce reduce;
  Tie tie;
  A start;  // initial or the identity
};

#define SEGRED_SOFTMAX_KERNELS "src/cpu/segment_reduce_isa_bwd.inc"
#include "src/cpu/softmax_isa_kernels.inc"
#undef SEGRED_SOFTMAX_KERNELS

}  // namespace

void segment_reduce_bwd(const Plan& plan, const detail::SegmentLayout& lay, const TensorView& grad,
                        const TensorView& output, const TensorView& data, Reduce reduce,
                        std::optional<double> initial, Tie tie, const TensorView& grad_input) {
  detail::record_launch(plan.path);
  const SoftmaxIsa isa = softmax_isa();  // the build for this CPU (tests cap it)
  SEGRED_DISPATCH_FLOAT(data.dtype, T, [&] {
    using A = acc_t<T>;
    A start = A(1);
    if (reduce == Reduce::Prod && initial) start = A(*initial);
    Args<T> a{grad.ptr<const T>(), output.ptr<const T>(), data.ptr<const T>(), grad_input.ptr<T>(),
              lay.L, lay.S, lay.inner, reduce, tie, start};
    SEGRED_SOFTMAX_ON_ISA(isa, run<T>(plan, lay, a))
  });
}

}  // namespace segred::cpu
