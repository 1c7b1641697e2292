// segment_reduce forward on the CPU.
//
// Paths (src/core/registry.cpp):
//   segment_reduce.fwd.cpu.flat.i64      inner == 1: a segment is a contiguous run
//       of scalars, reduced with kLanes independent accumulators (so the compiler
//       can vectorise a float sum without reassociating it) and a fixed lane tree.
//   segment_reduce.fwd.cpu.features.i64  inner > 1: a segment is n rows of `inner`
//       contiguous features; the accumulator is a row, the inner loop runs along
//       the features and vectorises.
// Both split long segments into pieces (segment_work.h). Reduction order for a
// segment is a function of its length and Plan.chunk only: deterministic.
//
// The kernels (segment_reduce_isa_fwd.inc) are compiled once per instruction set
// with the softmax kernels' machinery (softmax_isa_kernels.inc: baseline, AVX2 +
// FMA + F16C, AVX-512) and picked per call by softmax_isa() (its cap lets the
// tests run every build). float32/float16/bfloat16 sum, mean, max and min on the
// flat path, on rows of 2/4(/8) features, and on rows of 1, 2, 4 or 8 whole vectors
// of features (accumulators in registers, sr_wide_block), run explicit vector loops
// (segment_reduce_isa_vec.inc: kVF float lanes, a masked tail vector, NaN tracked
// in a sticky mask); float64 and prod keep the scalar-order loops below. A sum's
// order still depends only on the segment length, but differs between builds in
// the last bits (kVF lanes), as the softmax kernels' do.
#include "src/cpu/softmax_isa.h"  // first: the per-ISA build machinery of the CPU kernels

#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include "segred/trace.h"
#include "src/core/dispatch.h"
#include "src/cpu/kernels.h"
#include "src/cpu/segment_work.h"
#include "src/cpu/stream_store.h"
#include "src/ops/reduce_ops.h"

namespace segred::cpu {
namespace {

#define SEGRED_SOFTMAX_KERNELS "src/cpu/segment_reduce_isa_fwd.inc"
#include "src/cpu/softmax_isa_kernels.inc"
#undef SEGRED_SOFTMAX_KERNELS

}  // namespace

std::atomic<int64_t>& segment_prefetch_bytes() {
  static std::atomic<int64_t> bytes{8192};  // bench/NOTES.md, session 36: the sweep
  return bytes;
}

void segment_reduce_fwd(const Plan& plan, const detail::SegmentLayout& lay, const TensorView& data, Reduce reduce,
                        std::optional<double> initial, const TensorView& out) {
  detail::record_launch(plan.path);
  const bool flat = lay.inner == 1;
  const SoftmaxIsa isa = softmax_isa();  // the build for this CPU (tests cap it)
  SEGRED_DISPATCH_FLOAT(data.dtype, T, [&] {
    SEGRED_DISPATCH_REDUCE(reduce, Op, [&] {
      if (flat) {
        SEGRED_SOFTMAX_ON_ISA(isa, run<T, Op, true>(plan, lay, data.ptr<const T>(), reduce, initial, out.ptr<T>()))
      } else {
        SEGRED_SOFTMAX_ON_ISA(isa, run<T, Op, false>(plan, lay, data.ptr<const T>(), reduce, initial, out.ptr<T>()))
      }
    });
  });
}

}  // namespace segred::cpu
