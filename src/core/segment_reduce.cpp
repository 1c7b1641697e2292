// segment_reduce API layer: argument checks, planning, backend dispatch.
// Knows the contract (SEMANTICS.md), not the kernels.
#include <cstring>

#include "segred/error.h"
#include "segred/segment_reduce.h"
#include "segred/stream.h"
#include "src/core/segment_geometry.h"
#include "src/core/api_util.h"
#include "src/core/segments.h"
#include "src/cuda/kernels.h"
#include "src/cpu/kernels.h"

namespace segred {

Reduce parse_reduce(std::string_view s) {
  if (s == "sum") return Reduce::Sum;
  if (s == "mean") return Reduce::Mean;
  if (s == "max" || s == "amax") return Reduce::Max;
  if (s == "min" || s == "amin") return Reduce::Min;
  if (s == "prod") return Reduce::Prod;
  throw ValueError(detail::cat("segment_reduce: reduce='", s,
                               "' is not supported; expected one of sum, mean, max, min, prod, amax, amin"));
}

Tie parse_tie(std::string_view s) {
  if (s == "split") return Tie::Split;
  if (s == "first") return Tie::First;
  if (s == "last") return Tie::Last;
  throw ValueError(detail::cat("segment_reduce_backward: tie='", s, "' is not supported; expected split, first or last"));
}

std::string_view to_string(Reduce r) {
  switch (r) {
    case Reduce::Sum: return "sum";
    case Reduce::Mean: return "mean";
    case Reduce::Max: return "max";
    case Reduce::Min: return "min";
    case Reduce::Prod: return "prod";
  }
  return "?";
}

std::string_view to_string(Tie t) { return t == Tie::Split ? "split" : t == Tie::First ? "first" : "last"; }

// CPU plan: one path per (direction, inner == 1 or not), 64-bit indices always.
// chunk = rows per piece of a long segment (segment_work.h): 2^16 scalars for the
// flat path, so a piece (256 KiB of float32) stays in L2 between the two passes
// of the backward; with features, 2^16 elements but at least 64 rows.
//
// CUDA plan: segment_geometry (src/core/segment_geometry.h) is the work split;
// the path is flat (inner == 1) or features, i32 when every index the kernels
// form stays below 2^31, and prod backward has its own 64-bit path. chunk = merge
// items per worker (a warp tile for flat, a feature group otherwise).
Plan plan_segment_reduce(const SegmentProblem& p) {
  Plan plan;
  const bool flat = p.inner == 1;
  if (p.backend == Backend::CUDA) {
    const detail::SegmentGeometry g = detail::segment_geometry(p);
    plan.path = detail::segment_path(p.direction, g);
    plan.index_bits = g.index_bits;
    plan.grid = {g.grid, 1, 1};
    plan.block = {g.block, 1, 1};
    plan.chunk = g.items;
    if (detail::has_fixup_variant(g, p.direction)) plan.variant = g.fused_fixup ? "fused_fixup" : "fixup_tree";
    if (const char* v = detail::feat_vec_variant(g, dtype_size(p.dtype)); *v) plan.variant = v;
    return plan;
  }
  if (p.direction == Direction::Fwd)
    plan.path = flat ? "segment_reduce.fwd.cpu.flat.i64" : "segment_reduce.fwd.cpu.features.i64";
  else
    plan.path = flat ? "segment_reduce.bwd.cpu.flat.i64" : "segment_reduce.bwd.cpu.features.i64";
  plan.index_bits = 64;
  constexpr int64_t kPieceElems = int64_t(1) << 16;
  plan.chunk = flat ? kPieceElems : std::max<int64_t>(64, kPieceElems / std::max<int64_t>(1, p.inner));
  return plan;
}

namespace {

using detail::backend_of;
using detail::Contig;

SegmentProblem problem(const detail::SegmentLayout& lay, const TensorView& data, Reduce reduce, Direction dir) {
  return {backend_of(data), dir, reduce, data.dtype, lay.index_dtype, lay.outer, lay.L, lay.inner, lay.S};
}

}  // namespace

Shape segment_reduce_output_shape(const TensorView& data, const Segments& seg) {
  const auto lay = detail::resolve_layout("segment_reduce", data, seg);
  Shape s = data.sizes;
  s[size_t(lay.axis)] = lay.S;
  return s;
}

void detail::segment_reduce_out_stream(const TensorView& data, Reduce reduce, const Segments& seg,
                                       const TensorView& out, void* stream) {
  const char* op = "segment_reduce";
  const bool cuda = backend_of(data) == Backend::CUDA;
  const auto lay = cuda ? detail::resolve_layout(op, data, seg) : detail::resolve_segments(op, data, seg);
  Shape shape = data.sizes;
  shape[size_t(lay.axis)] = lay.S;
  detail::check_output(op, "out", out, shape, data.dtype, data.device, {&data});
  const Plan plan = plan_segment_reduce(problem(lay, data, reduce, Direction::Fwd));
  if (cuda) {
#ifdef SEGRED_WITH_CUDA
    cuda::segment_reduce_fwd(plan, lay, seg, data, reduce, out, stream);
    return;
#else
    (void)stream;
    throw ValueError("segment_reduce: data is on CUDA but this segred build has no CUDA backend");
#endif
  }
  if (out.numel() == 0) return;  // nothing to write: no kernel runs
  Contig x(data);
  cpu::segment_reduce_fwd(plan, lay, x.view, reduce, seg.initial, out);
}

void segment_reduce_out(const TensorView& data, Reduce reduce, const Segments& seg, const TensorView& out) {
  detail::segment_reduce_out_stream(data, reduce, seg, out, current_stream());  // segred/stream.h
}

Tensor segment_reduce(const TensorView& data, Reduce reduce, const Segments& seg) {
  Tensor out = Tensor::empty(segment_reduce_output_shape(data, seg), data.dtype, data.device);
  segment_reduce_out(data, reduce, seg, out);
  return out;
}

void detail::segment_reduce_backward_out_stream(const TensorView& grad, const TensorView& output,
                                                const TensorView& data, Reduce reduce, const Segments& seg, Tie tie,
                                                const TensorView& grad_input, void* stream) {
  const char* op = "segment_reduce_backward";
  const bool cuda = backend_of(data) == Backend::CUDA;
  const auto lay = cuda ? detail::resolve_layout(op, data, seg) : detail::resolve_segments(op, data, seg);
  Shape shape = data.sizes;
  shape[size_t(lay.axis)] = lay.S;
  detail::check_tensor(op, "grad", grad, shape, data.dtype, data.device);
  detail::check_tensor(op, "output", output, shape, data.dtype, data.device);
  detail::check_output(op, "grad_input", grad_input, data.sizes, data.dtype, data.device, {&grad, &output, &data});
  const Plan plan = plan_segment_reduce(problem(lay, data, reduce, Direction::Bwd));
  if (cuda) {
#ifdef SEGRED_WITH_CUDA
    cuda::segment_reduce_bwd(plan, lay, seg, grad, output, data, reduce, tie, grad_input, stream);
    return;
#else
    (void)stream;
    throw ValueError("segment_reduce_backward: data is on CUDA but this segred build has no CUDA backend");
#endif
  }
  if (grad_input.numel() == 0) return;
  Contig g(grad), y(output), x(data);
  cpu::segment_reduce_bwd(plan, lay, g.view, y.view, x.view, reduce, seg.initial, tie, grad_input);
}

void segment_reduce_backward_out(const TensorView& grad, const TensorView& output, const TensorView& data,
                                 Reduce reduce, const Segments& seg, Tie tie, const TensorView& grad_input) {
  detail::segment_reduce_backward_out_stream(grad, output, data, reduce, seg, tie, grad_input, current_stream());
}

Tensor segment_reduce_backward(const TensorView& grad, const TensorView& output, const TensorView& data,
                               Reduce reduce, const Segments& seg, Tie tie) {
  Tensor gi = Tensor::empty(data.sizes, data.dtype, data.device);
  segment_reduce_backward_out(grad, output, data, reduce, seg, tie, gi);
  return gi;
}

}  // namespace segred
