// softmax family API layer: argument checks, the [outer, D, inner] problem,
// planning, backend dispatch. Knows the contract (SEMANTICS.md), not the kernels.
#include "segred/softmax.h"

#include <algorithm>

#include "segred/error.h"
#include "src/core/api_util.h"
#include "src/cpu/softmax_kernels.h"
#include "src/core/softmax_geometry.h"
#ifdef SEGRED_WITH_CUDA
#include "segred/stream.h"
#include "src/cuda/softmax_kernels.h"
#endif

namespace segred {

namespace {

// Cache budget and tile widths behind plan_softmax's work split (CPU), measured
// on 2 cores of the benchmark host (bench/NOTES.md, "CPU softmax"). 16 KiB: a
// lastdim block that is reduced twice in a row (max, then sum of exp) stays in
// L1d (32-48 KiB on current x86 cores). Spatial forward tiles of W columns:
// rows of 1 KiB (W = 1024 B / the element size, at least 128) while D <= 512,
// the tile then in L2 between the two passes (the two rules below). (The
// backward's tiles had the same rows, and 4 KiB rows past D = 512, until session
// 25 measured whole rows of the slab faster: its own rule below.) The forward
// with D > 512 (session 5, interleaved pairs on the host): W = 128 while its
// [D, 128] tiles of x and of the exps (accumulation type) fit in 1 MiB, half of
// L2 (D <= 1024 in float32: [32, 1000, 4096] 11.0 -> 12.1 GB/s against W =
// 1024). Past that D the tile of exps spills whatever its width, and the forward
// takes the spatial_stream path (session 25): no buffer of exps, the statistics
// and the write pass each stream whole rows of the slab (the backward's tiles),
// one exp more per value. Development machine, in-process pairs against spatial
// at its W then (the exps tile kept near 4 MiB, 256 columns): [8192, 8192] dim 0
// 81-118 -> 53-78 ms (0.63-0.66x), [16, 2000, 4096] 0.92-0.99x; at D = 1000,
// where spatial's tile fits L2, the streamed form measured 1.1-1.25x slower
// ([32, 1000, 4096]: its second read of x comes from memory, spatial's from L2).
// The backward with D <= 512 (session 9, development machine, W alternated in one
// process, bench/cpu_softmax_tile_sweep.cpp): rows of 1 KiB, W = 1024 B / the
// element size (256 float32, 512 16-bit), [64, 256, 56, 56] float16 41.7-42.7 ->
// 27.1-29.6 ms, float32 54.7-83.1 -> 35.3-42.6 ms against W = 128 (session 25:
// whole rows faster still, see kWholeRowMaxCols). The forward with D <= 512 takes
// the same rows (session 10): with the kernel's prefetches spread over its exps pass, perf of [64, 256, 56, 56] float16 put
// 19.5% of the kernel's samples on the prefetches at W = 128 and 6.5% at 512 (the
// hardware's L2 prefetcher follows a run of 16 lines in a page, not one of 4);
// its tiles of x and of the exps stay within L2 (D = 512: 1.5 MiB in 16-bit types).
constexpr int64_t kL1Block = 16 * 1024;
constexpr int64_t kTileCols = 128;
constexpr int64_t kLongDim = 512;
constexpr int64_t kL2TileBytes = int64_t(1) << 20;
constexpr int64_t kRowBytes = 1024;
// ... but not a forward over fewer rows than this: [8, 4, 2^22] float32 (D = 4)
// measured 1.18x slower at W = 256 than at 128 (H200 host, 2 pinned cores, both
// rounds of session 10's A/B; the development machine's sweep 0.95-1.14), so a
// short forward keeps W = 128 (a [D, W] tile of a few rows is no long walk of
// pages; the backward's D = 4 gained from 1 KiB rows in session 9's sweep).
constexpr int64_t kShortFwdRows = 16;
// The spatial backward and spatial_stream (session 25, development machine, 2 threads, AVX2;
// bench/cpu_softmax_tile_sweep.cpp, W alternated in one process): its two passes
// (sum g*y per column, then the write) each stream the tile once, and they
// stream fastest when the tile is contiguous memory, i.e. whole rows of the
// [D, inner] slab: [64, 256, 56, 56] float16 16.5 -> 12.3-13.9 ms, float32
// 27-28 -> 23-25 ms at W = 3136 against rows of 1 KiB; [32, 1000, 4096] 108-112
// -> 92-105 ms and [8192, 8192] dim 0 66-86 -> 50-56 ms at W = 4096 against
// 1024; [8, 4, 2^22] and [16, 2000, 4096] the same. So W = inner, cut into the
// fewest equal pieces (whole cache lines) of at most kWholeRowMaxCols columns (the
// per-column sums, 2 x 16 KiB in float32, stay in L1d) that give every thread
// work: at least p.cpu_threads items, and a multiple of them while there are
// fewer than 4 per thread (3 items on 2 threads would leave one idle for a
// third of the call). The sums run over rows per column whatever W, so W never
// changes a result.
constexpr int64_t kWholeRowMaxCols = 4096;
constexpr int64_t kWholeRowItemsPerThread = 4;
// Session 26: which of the two tile families a machine gets. The H200 host's 2
// pinned cores (Intel Xeon, 2 MiB of L2 per core), A/B of session 25's binary
// against d700c8f's (bench/results/h200-session26/run1-b816d3c/cpu-ab.md, 3 alternated
// rounds): the whole-row backward 1.28-1.40x slower on [64, 256, 56, 56] (float32
// 66% -> 46% of memcpy), 1.18x on [8, 4, 2^22], 1.13x on [8192, 8192]; spatial_stream
// 1.32x slower on [8192, 8192] (40% -> 33%); no row faster beyond the noise. There a
// tile of 1 KiB rows (or 1024 columns) stays in L2 between the two passes, and the
// forward's 4 MiB tile of exps (below) in its L2 and L3. On the development machine
// (512 KiB of L2) the same tiles spill and the whole rows won (0.54-0.97x). So the
// tiles of sessions 5-10 where L2 >= kLargeL2Bytes, whole rows and spatial_stream below
// it and where the size is unknown (they assume no cache between the passes).
// Session 39: for a long D (> kLongDim) that split is gone. spatial_stream now
// prefetches along its rows (cpu::softmax_long_row_prefetch) and sums its
// statistics with exp16, and on the development machine (Intel VM, 2 MiB of L2)
// the small-L2 family beat the large-L2 one on every long-D row (3 alternated
// rounds, bench/results/dev-session39/): [8192, 8192] dim 0 forward 0.84x
// (spatial_stream against the 256-column tile of exps), backward 0.88x and [32,
// 1000, 4096] backward 0.87x (whole rows against 1024 columns); while D <= 512
// the large-L2 tiles stay ([64, 256, 56, 56] backward 1.17-1.39x slower in whole
// rows there, [8, 4, 2^22] 1.12x). On the H200 host's 2 cores (session 26 had found
// the old spatial_stream 1.32x slower there, without the prefetch), the two forms
// alternated in one process (bench/results/h200-session39/): [8192, 8192] forward and
// backward 0.90-0.93x, [32, 1000, 4096] backward 1.02-1.05x (slower), so one rule.
constexpr int64_t kLargeL2Bytes = int64_t(1) << 20;

int64_t whole_row_cols(const SoftmaxProblem& p, int64_t es) {
  if (p.inner <= 0 || p.outer <= 0 || p.dim_size <= 0) return std::max<int64_t>(0, p.inner);  // no item runs
  const int64_t threads = std::max(1, p.cpu_threads), line = std::max<int64_t>(1, 64 / es);
  auto width = [&](int64_t k) { return std::min(p.inner, ((p.inner + k - 1) / k + line - 1) / line * line); };
  auto balanced = [&](int64_t k) {
    const int64_t items = p.outer * ((p.inner + width(k) - 1) / width(k));
    return items >= kWholeRowItemsPerThread * threads || (items >= threads && items % threads == 0);
  };
  int64_t k = (p.inner + kWholeRowMaxCols - 1) / kWholeRowMaxCols;
  // Bounded: outer * k reaches kWholeRowItemsPerThread * threads after that many steps
  // at most, and a tile of one cache line ends it anyway.
  while (!balanced(k) && width(k) > line) ++k;
  return width(k);
}

const char* op_name(bool log, Direction d) {
  if (d == Direction::Fwd) return log ? "log_softmax" : "softmax";
  return log ? "log_softmax_backward" : "softmax_backward";
}

}  // namespace

SoftmaxProblem make_softmax_problem(const Shape& sizes, int64_t dim, DType dtype, Direction direction, bool log,
                                    Backend backend) {
  const char* op = op_name(log, direction);
  const int64_t nd = std::max<int64_t>(1, int64_t(sizes.size()));  // 0-dim counts as [1]
  SEGRED_CHECK(dim >= -nd && dim < nd, ValueError, op, ": dim=", dim, " is out of range for a tensor with ",
               sizes.size(), " dim(s) (expected ", -nd, " <= dim < ", nd, ")");
  const int64_t d = dim < 0 ? dim + nd : dim;
  SoftmaxProblem p;
  p.backend = backend;
  p.direction = direction;
  p.log = log;
  p.dtype = dtype;
  if (sizes.empty()) return p;  // [1]: outer = D = inner = 1
  p.outer = 1;
  p.inner = 1;
  for (int64_t i = 0; i < d; ++i) p.outer *= sizes[size_t(i)];
  p.dim_size = sizes[size_t(d)];
  for (int64_t i = d + 1; i < int64_t(sizes.size()); ++i) p.inner *= sizes[size_t(i)];
  return p;
}

// CPU plan. One path per (op, direction, inner == 1 or not; the forward's
// spatial_stream past the L2 rule), 64-bit indices. The worked examples below are
// for a small or unknown L2 (cpu_l2_bytes < 1 MiB); with >= 1 MiB (the benchmark
// host, the development machine) the one difference: the backward with D <= 512
// takes rows of 1 KiB like the forward's ([64, 256, 56, 56]: W = 256).
// Worked example, softmax forward float32 over dim 1 of [32, 1000, 4096]:
// inner = 4096 > 1: spatial; D = 1000 > 512, and 1000 * 128 * (4 + 4) B <= 1 MiB:
// W = 128, 32 outer indices x 32 tiles = 1024 work items of a [1000, 128] tile
// (the backward: whole rows, W = 4096, 32 items). Over dim 0 of [8192, 8192]:
// 8192 * 128 * 8 B > 1 MiB: spatial_stream, whole rows like the backward (on 2
// threads: 8192 / 4096 -> 2 items of W = 4096; on 16: 16 of 512).
// Over dim 1 of [64, 256, 56, 56]: forward rows of 1 KiB, W = 256 in float32,
// 512 in 16-bit types (128 in float64); the backward whole rows, W = 3136. Over
// dim -1 of [16384, 4096]: lastdim, blocks of 16 KiB / 4 B = 4096.
Plan plan_softmax(const SoftmaxProblem& p) {
#ifdef SEGRED_WITH_CUDA
  // CUDA plan: the pure work split of src/core/softmax_geometry.h (lastdim_warp,
  // lastdim_block, spatial, spatial_staged when the geometry stages the column
  // tile; i32 when 2*numel + 2^20 < 2^31, for every kernel).
  if (p.backend == Backend::CUDA) {
    const detail::SoftmaxGeometry g = detail::softmax_geometry(p);
    Plan plan;
    plan.path = detail::softmax_cuda_path(p, g);
    plan.index_bits = g.index_bits;
    plan.grid = {g.grid, 1, 1};
    plan.block = {g.threads(), 1, 1};
    plan.chunk = g.chunks;
    plan.variant = detail::softmax_cuda_variant(p, g);
    return plan;
  }
#endif
  SEGRED_CHECK(p.backend == Backend::CPU, ValueError, op_name(p.log, p.direction),
               ": no CUDA path for softmax in this build yet (x must be on the CPU)");
  Plan plan;
  const bool last = p.inner == 1;
  const bool fwd = p.direction == Direction::Fwd;
  const int64_t es = std::max(1, dtype_size(p.dtype));
  const int64_t acc = p.dtype == DType::Float64 ? 8 : 4;  // the forward's exps: accumulation type
  // The forward's [D, 128] tiles of x and of the exps fit in half of L2 up to this D.
  const int64_t l2_rows = kL2TileBytes / (kTileCols * (acc + es));
  const bool large_l2 = p.cpu_l2_bytes >= kLargeL2Bytes;
  const bool streamed = !last && fwd && p.dim_size > kLongDim && p.dim_size > l2_rows;
  if (p.log) {
    if (fwd) plan.path = last ? "log_softmax.fwd.cpu.lastdim.i64"
                         : streamed ? "log_softmax.fwd.cpu.spatial_stream.i64" : "log_softmax.fwd.cpu.spatial.i64";
    else plan.path = last ? "log_softmax.bwd.cpu.lastdim.i64" : "log_softmax.bwd.cpu.spatial.i64";
  } else {
    if (fwd) plan.path = last ? "softmax.fwd.cpu.lastdim.i64"
                         : streamed ? "softmax.fwd.cpu.spatial_stream.i64" : "softmax.fwd.cpu.spatial.i64";
    else plan.path = last ? "softmax.bwd.cpu.lastdim.i64" : "softmax.bwd.cpu.spatial.i64";
  }
  plan.index_bits = 64;
  const int64_t row_cols = std::max(kTileCols, kRowBytes / es);  // rows of 1 KiB
  if (last) {
    plan.chunk = fwd ? kL1Block / es : 0;
  } else if (large_l2 && !fwd && p.dim_size <= kLongDim) {
    plan.chunk = std::min(row_cols, p.inner);
  } else if (!fwd || streamed) {
    plan.chunk = whole_row_cols(p, es);
  } else {
    // D > 512 here fits the L2 rule (D <= l2_rows): [D, 128] tiles; D < 16 keeps 128 too.
    const bool cols128 = p.dim_size > kLongDim || p.dim_size < kShortFwdRows;
    plan.chunk = std::min(cols128 ? kTileCols : row_cols, p.inner);
  }
  return plan;
}

namespace {

using detail::backend_of;
using detail::Contig;
using detail::overlaps;

void check_input(const char* op, const char* name, const TensorView& t) {
  SEGRED_CHECK(is_floating(t.dtype), TypeError, op, ": ", name, " has dtype ", dtype_name(t.dtype),
               "; expected float32, float64, float16 or bfloat16");
  SEGRED_CHECK(t.strides.size() == t.sizes.size(), ValueError, op, ": ", name, " has ", t.sizes.size(),
               " sizes but ", t.strides.size(), " strides");
  for (auto s : t.sizes) SEGRED_CHECK(s >= 0, ValueError, op, ": ", name, " has a negative size in ", shape_string(t.sizes));
}

void check_like(const char* op, const char* name, const TensorView& t, const char* ref_name, const TensorView& ref) {
  SEGRED_CHECK(t.sizes == ref.sizes, ValueError, op, ": ", name, " has shape ", shape_string(t.sizes), ", expected ",
               ref_name, "'s shape ", shape_string(ref.sizes));
  SEGRED_CHECK(t.dtype == ref.dtype, TypeError, op, ": ", name, " has dtype ", dtype_name(t.dtype), ", expected ",
               ref_name, "'s dtype ", dtype_name(ref.dtype));
  SEGRED_CHECK(t.device == ref.device, ValueError, op, ": ", name, " is on ", to_string(t.device), ", expected ",
               ref_name, "'s device ", to_string(ref.device));
}

void forward_out(bool log, const TensorView& x, int64_t dim, const TensorView& out) {
  const char* op = op_name(log, Direction::Fwd);
  check_input(op, "x", x);
  SoftmaxProblem p = make_softmax_problem(x.sizes, dim, x.dtype, Direction::Fwd, log, backend_of(x));
  p.cpu_threads = cpu::softmax_threads();
  p.cpu_l2_bytes = cpu::softmax_l2_bytes();
  check_like(op, "out", out, "x", x);
  SEGRED_CHECK(out.is_contiguous(), ValueError, op, ": out must be contiguous");
  SEGRED_CHECK(!overlaps(out, x), ValueError, op, ": out must not overlap x");
  const Plan plan = plan_softmax(p);
  if (x.numel() == 0) return;  // empty tensor or D == 0: nothing to write, no kernel runs
#ifdef SEGRED_WITH_CUDA
  if (p.backend == Backend::CUDA) {
    cuda::softmax_check_device_pointer(op, "x", x);
    cuda::softmax_check_device_pointer(op, "out", out);
    cuda::softmax_fwd(p, x, out, current_stream());  // the caller's stream (segred/stream.h)
    return;
  }
#endif
  Contig xc(x);
  cpu::softmax_fwd(plan, p, xc.view, out);
}

void backward_out(bool log, const TensorView& grad, const TensorView& output, int64_t dim,
                  const TensorView& grad_input) {
  const char* op = op_name(log, Direction::Bwd);
  check_input(op, "grad", grad);
  check_input(op, "output", output);
  check_like(op, "grad", grad, "output", output);
  SoftmaxProblem p = make_softmax_problem(output.sizes, dim, output.dtype, Direction::Bwd, log, backend_of(output));
  p.cpu_threads = cpu::softmax_threads();
  p.cpu_l2_bytes = cpu::softmax_l2_bytes();
  check_like(op, "grad_input", grad_input, "output", output);
  SEGRED_CHECK(grad_input.is_contiguous(), ValueError, op, ": grad_input must be contiguous");
  SEGRED_CHECK(!overlaps(grad_input, grad) && !overlaps(grad_input, output), ValueError, op,
               ": grad_input must not overlap grad or output");
  const Plan plan = plan_softmax(p);
  if (output.numel() == 0) return;
#ifdef SEGRED_WITH_CUDA
  if (p.backend == Backend::CUDA) {
    cuda::softmax_check_device_pointer(op, "grad", grad);
    cuda::softmax_check_device_pointer(op, "output", output);
    cuda::softmax_check_device_pointer(op, "grad_input", grad_input);
    cuda::softmax_bwd(p, grad, output, grad_input, current_stream());
    return;
  }
#endif
  Contig g(grad), y(output);
  cpu::softmax_bwd(plan, p, g.view, y.view, grad_input);
}

Tensor forward(bool log, const TensorView& x, int64_t dim) {
  const char* op = op_name(log, Direction::Fwd);
  check_input(op, "x", x);
  plan_softmax(make_softmax_problem(x.sizes, dim, x.dtype, Direction::Fwd, log, backend_of(x)));  // validate first
#ifdef SEGRED_WITH_CUDA
  if (backend_of(x) == Backend::CUDA) cuda::softmax_check_device_pointer(op, "x", x);  // before allocating
#endif
  Tensor out = Tensor::empty(x.sizes, x.dtype, x.device);
  forward_out(log, x, dim, out);
  return out;
}

Tensor backward(bool log, const TensorView& grad, const TensorView& output, int64_t dim) {
  const char* op = op_name(log, Direction::Bwd);
  check_input(op, "grad", grad);
  check_input(op, "output", output);
  check_like(op, "grad", grad, "output", output);
  plan_softmax(make_softmax_problem(output.sizes, dim, output.dtype, Direction::Bwd, log, backend_of(output)));
#ifdef SEGRED_WITH_CUDA
  if (backend_of(output) == Backend::CUDA) {  // before allocating
    cuda::softmax_check_device_pointer(op, "grad", grad);
    cuda::softmax_check_device_pointer(op, "output", output);
  }
#endif
  Tensor gi = Tensor::empty(output.sizes, output.dtype, output.device);
  backward_out(log, grad, output, dim, gi);
  return gi;
}

}  // namespace

Tensor softmax(const TensorView& x, int64_t dim) { return forward(false, x, dim); }
Tensor log_softmax(const TensorView& x, int64_t dim) { return forward(true, x, dim); }
void softmax_out(const TensorView& x, int64_t dim, const TensorView& out) { forward_out(false, x, dim, out); }
void log_softmax_out(const TensorView& x, int64_t dim, const TensorView& out) { forward_out(true, x, dim, out); }

Tensor softmax_backward(const TensorView& grad, const TensorView& output, int64_t dim) {
  return backward(false, grad, output, dim);
}
Tensor log_softmax_backward(const TensorView& grad, const TensorView& output, int64_t dim) {
  return backward(true, grad, output, dim);
}
void softmax_backward_out(const TensorView& grad, const TensorView& output, int64_t dim,
                          const TensorView& grad_input) {
  backward_out(false, grad, output, dim, grad_input);
}
void log_softmax_backward_out(const TensorView& grad, const TensorView& output, int64_t dim,
                              const TensorView& grad_input) {
  backward_out(true, grad, output, dim, grad_input);
}

}  // namespace segred
