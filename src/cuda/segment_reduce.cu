// segment_reduce on CUDA: metadata on the device -> the merge space q and the
// tile partition ("prepare": up to three plain kernels), strided inputs ->
// contiguous copies, then the (dtype, index width) instantiation.
//
// Metadata validation (SEMANTICS.md). unsafe = false: the metadata is copied to
// the host (one cudaMemcpy and a stream synchronisation: the documented cost of
// validation) and checked by the CPU backend's own normalise_offsets, so the
// rules and messages are the same on every backend. Either way q is then built
// on the device from the raw metadata by prepare, which reproduces the host
// clamping exactly (lengths: saturating running sum of clamp(len, 0, L);
// offsets: running max of clamp(off, 0, L), which equals the CPU's
// o[i+1] = clamp(in[i+1], o[i], L)), so every segment lies in [0, L] whatever the
// metadata holds; for validated metadata the clamp changes nothing.
//
// prepare (v7, session 5; v4-v6 were one cooperative kernel with grid.syncs at
// 25% occupancy: 25 us on every call, 72 us on 2M offsets), ordinary launches
// on the call's stream, each at full occupancy and through viable_block:
//   1. prep_q, one metadata item per thread: q[0], q[U], the lengths rows'
//      leading 0, the fix-up counter, the scan's tile states; offsets: q = row
//      base + clamped offset, which is the running max unless a clamped offset
//      drops within its row (then a flag is raised).
//   2. prep_scan, a single-pass scan (CUB's decoupled look-back) of the items
//      with the segmented operator ScanOp, written into q: lengths always;
//      offsets only with unsafe = true (validated offsets never drop), and then
//      every block returns at once unless prep_q raised the flag.
//   3. prep_partition, one thread per tile boundary (W + 1 of them,
//      partition_tile), when the call has tiles (every path but prod backward).
// All of it is integer arithmetic: any bracketing of the operator gives the
// same q, and the partition is the same search, so the tiles (and every result
// after them) are bitwise those of the cooperative kernel.
#include <algorithm>
#include <cub/agent/single_pass_scan_operators.cuh>
#include <cub/block/block_scan.cuh>
#include <vector>

#include "src/core/segment_geometry.h"
#include "src/cuda/kernels.h"
#include "segred/stream.h"
#include "src/cuda/merge_space.cuh"
#include "src/cuda/merge_space_probe.h"
#include "src/cuda/segment_reduce_impl.cuh"

namespace segred::cuda {

// Defined in segment_reduce_{fwd,bwd}_<dtype>.cu.
extern template void run_fwd<float, int32_t>(const FwdArgs&);
extern template void run_fwd<float, int64_t>(const FwdArgs&);
extern template void run_bwd<float, int32_t>(const BwdArgs&);
extern template void run_bwd<float, int64_t>(const BwdArgs&);
extern template void run_fwd<double, int32_t>(const FwdArgs&);
extern template void run_fwd<double, int64_t>(const FwdArgs&);
extern template void run_bwd<double, int32_t>(const BwdArgs&);
extern template void run_bwd<double, int64_t>(const BwdArgs&);
extern template void run_fwd<half_t, int32_t>(const FwdArgs&);
extern template void run_fwd<half_t, int64_t>(const FwdArgs&);
extern template void run_bwd<half_t, int32_t>(const BwdArgs&);
extern template void run_bwd<half_t, int64_t>(const BwdArgs&);
extern template void run_fwd<bfloat16_t, int32_t>(const FwdArgs&);
extern template void run_fwd<bfloat16_t, int64_t>(const FwdArgs&);
extern template void run_bwd<bfloat16_t, int32_t>(const BwdArgs&);
extern template void run_bwd<bfloat16_t, int64_t>(const BwdArgs&);

namespace {

constexpr int kMaxDims = 8;

struct Strided {
  int nd = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
};

Strided strided_of(const char* op, const char* name, const TensorView& t) {
  SEGRED_CHECK(t.ndim() <= kMaxDims, ValueError, op, ": ", name, " has ", t.ndim(), " dims; the CUDA backend supports up to ",
               kMaxDims);
  Strided s;
  s.nd = int(t.ndim());
  for (int d = 0; d < s.nd; ++d) {
    s.sizes[d] = t.sizes[size_t(d)];
    s.strides[d] = t.strides[size_t(d)];
  }
  return s;
}

// Metadata element (row r of the leading dims, column c), any strides.
struct MetaReader {
  const void* p;
  bool i32;
  Strided st;
  __host__ __device__ int64_t read(int64_t r, int64_t c) const {
    int64_t off = c * st.strides[st.nd - 1];
    for (int d = st.nd - 2; d >= 0; --d) {
      const int64_t i = r % st.sizes[d];
      r /= st.sizes[d];
      off += i * st.strides[d];
    }
    return i32 ? int64_t(static_cast<const int32_t*>(p)[off]) : static_cast<const int64_t*>(p)[off];
  }
};

// Scan element: (row, clamped value); row -1 is the empty element, a two-sided
// identity (padding of partial tiles, blocks without items).
struct KV {
  int64_t k, v;
};

// Segmented (by row) operator: within a row, saturating sum (lengths) or max
// (offsets) of values in [0, L]; a new row restarts. Associative on sequences
// whose rows do not decrease (the metadata in row-major order).
struct ScanOp {
  int64_t L;
  bool sum;
  __host__ __device__ KV operator()(const KV& a, const KV& b) const {
    if (b.k < 0) return a;
    if (a.k != b.k) return b;
    const int64_t v = sum ? (a.v + b.v < L ? a.v + b.v : L) : (a.v > b.v ? a.v : b.v);
    return KV{b.k, v};
  }
};

constexpr int kPrepBlock = 256;
constexpr int kPrepIpt = 4;                           // items per thread of the scan
constexpr int64_t kPrepTile = kPrepBlock * kPrepIpt;  // metadata items per scan block (tile)

// Tile states of the single-pass scan (decoupled look-back, CUB's building
// blocks): KV is 16 bytes, so status and values live in separate arrays.
using PrepTileState = cub::ScanTileState<KV>;

// What prepare queues for a call, decided on the host from the metadata's kind,
// size and the unsafe flag (no device value is read).
struct PrepPlan {
  int64_t items = 0;  // metadata items, outer * k
  int ntiles = 0;     // scan tiles (blocks of prep_scan); 0: no scan launched
  bool flag = false;  // offsets, unsafe: the scan runs only if prep_q saw a drop
  size_t state_bytes = 0;
};

template <class Idx>
struct PrepArgs {
  MetaReader m;                  // raw lengths or offsets, any strides
  int64_t outer = 0, S = 0, L = 0, k = 0;  // k: metadata entries per row (S or S + 1)
  bool lengths = false;
  int64_t items = 0;             // outer * k
  int ntiles = 0;                // scan tiles; 0: no scan
  PrepTileState state;           // ntiles tile states (initialised by prep_q)
  int* flag = nullptr;           // offsets + unsafe: drop seen (0 before prep_q)
  Idx* q = nullptr;              // outer * (S + 1) + 2 entries
  unsigned* long_count = nullptr;
};

// 1. One metadata item per thread (grid-stride only past 2^31 blocks): the
// entries no scan writes (q[0], q[U], the lengths rows' leading 0), the fix-up
// counter, the scan's tile states, and for offsets q = row base + clamped offset,
// which is the running max (the CPU's clamp) unless a clamped offset drops below
// its predecessor in the row: then the flag sends the call through the scan.
// Validated offsets never drop (and launch no scan).
template <class Idx>
__global__ void __launch_bounds__(kPrepBlock) prep_q(PrepArgs<Idx> a) {
  const int64_t gtid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t gstride = int64_t(gridDim.x) * blockDim.x;
  if (a.ntiles > 0) {
    PrepTileState st = a.state;
    st.InitializeStatus(a.ntiles);  // thread gtid initialises tile gtid (the grid covers ntiles)
  }
  if (gtid == 0) {
    a.q[0] = 0;
    a.q[a.outer * (a.S + 1) + 1] = Idx(a.outer * a.L);
    if (a.long_count) *a.long_count = 0;
  }
  if (a.lengths) {
    for (int64_t r = gtid; r < a.outer; r += gstride) a.q[1 + r * (a.S + 1)] = Idx(r * a.L);
    return;  // lengths: the scan writes the rest
  }
  auto clampv = [&](int64_t v) { return v < 0 ? int64_t(0) : (v > a.L ? a.L : v); };
  bool drop = false;
  for (int64_t idx = gtid; idx < a.items; idx += gstride) {
    const int64_t r = a.outer == 1 ? 0 : idx / a.k, c = idx - r * a.k;  // 1 row: no 64-bit division
    const int64_t v = clampv(a.m.read(r, c));
    if (c > 0 && clampv(a.m.read(r, c - 1)) > v) drop = true;
    a.q[1 + r * (a.S + 1) + c] = Idx(r * a.L + v);
  }
  if (drop && a.flag) *a.flag = 1;  // every writer writes 1
}

// 2. The scan (lengths always; offsets only when prep_q raised the flag, else
// every block returns at once): block t scans metadata items [t, t + 1) * 1024
// with the segmented operator, its prefix from the earlier tiles by CUB's
// decoupled look-back, and writes q (row bases added). Integer arithmetic: any
// bracketing gives the same q as the cooperative scan of v5.
template <class Idx>
__global__ void __launch_bounds__(kPrepBlock) prep_scan(PrepArgs<Idx> a) {
  if (a.flag && *static_cast<volatile int*>(a.flag) == 0) return;  // uniform over the grid
  using BlockScan = cub::BlockScan<KV, kPrepBlock>;
  using Prefix = cub::TilePrefixCallbackOp<KV, ScanOp, PrepTileState>;
  __shared__ struct {
    typename Prefix::TempStorage prefix;
    typename BlockScan::TempStorage scan;
  } tmp;
  const ScanOp op{a.L, a.lengths};
  const int tile = int(blockIdx.x);
  const int64_t idx0 = int64_t(tile) * kPrepTile + int64_t(threadIdx.x) * kPrepIpt;
  const int64_t lead = a.lengths ? 2 : 1;  // lengths entry c is the end of segment c
  auto clampv = [&](int64_t v) { return v < 0 ? int64_t(0) : (v > a.L ? a.L : v); };
  KV x[kPrepIpt];
  {
    int64_t r = a.outer == 1 ? 0 : idx0 / a.k, c = idx0 - r * a.k;  // k >= 1 when there are items
#pragma unroll
    for (int i = 0; i < kPrepIpt; ++i) {
      x[i] = idx0 + i < a.items ? KV{r, clampv(a.m.read(r, c))} : KV{-1, 0};
      if (++c == a.k) {
        c = 0;
        ++r;
      }
    }
  }
  PrepTileState st = a.state;
  if (tile == 0) {
    KV agg;
    BlockScan(tmp.scan).InclusiveScan(x, x, op, agg);
    if (threadIdx.x == 0) st.SetInclusive(0, agg);
  } else {
    Prefix pre(st, tmp.prefix, op, tile);
    BlockScan(tmp.scan).InclusiveScan(x, x, op, pre);
  }
#pragma unroll
  for (int i = 0; i < kPrepIpt; ++i) {
    const int64_t idx = idx0 + i;
    if (idx < a.items) {  // x[i].k = this item's row (a row change restarts the operator)
      const KV y = x[i];
      a.q[lead + y.k * (a.S + 1) + (idx - y.k * a.k)] = Idx(y.k * a.L + y.v);
    }
  }
}

// 3. The W + 1 tile boundaries of the merge space, one thread each (q is
// complete: it was written by the kernels before this one).
template <class Idx>
__global__ void __launch_bounds__(kPrepBlock) prep_partition(const Idx* __restrict__ q, Idx nseg, Idx nel,
                                                             int64_t W, int64_t items, Idx* tile_i, Idx* tile_j) {
  const int64_t w = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (w > W) return;
  partition_tile(q + 1, nseg, nel, w, items, tile_i, tile_j);
}

template <int ES>
struct Word;
template <> struct Word<2> { using type = uint16_t; };
template <> struct Word<4> { using type = uint32_t; };
template <> struct Word<8> { using type = uint64_t; };

template <class W>
__global__ void strided_copy(W* dst, const W* src, int64_t n, Strided st) {
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= n) return;
  int64_t rem = id, off = 0;
  for (int d = st.nd - 1; d >= 0; --d) {
    const int64_t i = rem % st.sizes[d];
    rem /= st.sizes[d];
    off += i * st.strides[d];
  }
  dst[id] = src[off];
}

struct DeviceGuard {
  int prev = 0, dev = 0;
  explicit DeviceGuard(int d) : dev(d) {
    cudaGetDevice(&prev);
    if (prev != dev) SEGRED_CUDA_CHECK(cudaSetDevice(dev), "segment_reduce: cudaSetDevice");
  }
  ~DeviceGuard() {
    if (prev != dev) cudaSetDevice(prev);
  }
};

// The contiguous form of a device tensor: itself or a copy in scratch.
const void* contiguous(const char* op, const char* name, const TensorView& t, Scratch& scratch, cudaStream_t s) {
  if (t.is_contiguous() || t.numel() == 0) return t.data;
  const Strided st = strided_of(op, name, t);
  const int64_t n = t.numel();
  const int es = dtype_size(t.dtype);
  void* dst = scratch.alloc<char>(n * es);
  const int block = 256;
  const unsigned grid = unsigned(detail::ceil_div(n, block));
  switch (es) {
    case 2: strided_copy<<<grid, block, 0, s>>>(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(t.data), n, st); break;
    case 4: strided_copy<<<grid, block, 0, s>>>(static_cast<uint32_t*>(dst), static_cast<const uint32_t*>(t.data), n, st); break;
    default: strided_copy<<<grid, block, 0, s>>>(static_cast<uint64_t*>(dst), static_cast<const uint64_t*>(t.data), n, st); break;
  }
  check_launch("strided_copy");
  return dst;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Validates device metadata on the host (unsafe = false); fills lay.offsets.
void validate_on_host(const char* op, detail::SegmentLayout& lay, const Segments& seg, cudaStream_t s) {
  const bool use_lengths = seg.lengths.has_value();
  const TensorView& m = use_lengths ? *seg.lengths : *seg.offsets;
  std::vector<char> buf;
  const int es = dtype_size(m.dtype);
  int64_t lo = 0, hi = 0;
  if (m.numel() > 0) {
    for (size_t d = 0; d < m.sizes.size(); ++d) {
      const int64_t ext = (m.sizes[d] - 1) * m.strides[d];
      (ext < 0 ? lo : hi) += ext;
    }
    buf.resize(size_t(hi - lo + 1) * size_t(es));
    SEGRED_CUDA_CHECK(cudaMemcpyAsync(buf.data(), static_cast<const char*>(m.data) + lo * es, buf.size(),
                                      cudaMemcpyDeviceToHost, s),
                      detail::cat(op, ": copying ", use_lengths ? "lengths" : "offsets", " to the host"));
    SEGRED_CUDA_CHECK(cudaStreamSynchronize(s), detail::cat(op, ": cudaStreamSynchronize"));
  } else {
    buf.resize(16);
  }
  const TensorView host(buf.data() - lo * es, m.dtype, m.sizes, m.strides, DeviceRef{});
  detail::normalise_offsets(op, lay, host, use_lengths, false);
}

// What prepare queues for this call's metadata.
PrepPlan prep_plan(const detail::SegmentLayout& lay, const Segments& seg) {
  const bool use_lengths = seg.lengths.has_value();
  const TensorView& m = use_lengths ? *seg.lengths : *seg.offsets;
  PrepPlan p;
  p.items = lay.outer * m.sizes.back();
  // Validated offsets (unsafe = false) are non-decreasing and in [0, L]: q is
  // base + offset exactly, no scan. Unsafe offsets may drop: the scan is queued
  // and runs only if prep_q saw a drop. Lengths always need it.
  if (p.items > 0 && (use_lengths || seg.unsafe)) {
    const int64_t nt = detail::ceil_div(p.items, kPrepTile);
    SEGRED_CHECK(nt < (int64_t(1) << 31) - 64, ValueError, "segment_reduce: ", p.items,
                 " metadata items are more than the CUDA backend's scan takes");
    p.ntiles = int(nt);
    p.flag = !use_lengths;
    PrepTileState::AllocationSize(p.ntiles, p.state_bytes);
  }
  return p;
}

// The arena bytes prepare takes for a call.
template <class Idx>
size_t prepare_bytes(const detail::SegmentGeometry& geo, const PrepPlan& pp, bool tiles) {
  size_t b = Arena::bytes<char>(int64_t(pp.state_bytes)) + Arena::bytes<int>(1) + Arena::bytes<Idx>(geo.segs + 1);
  if (tiles)
    b += 2 * Arena::bytes<Idx>(geo.workers + 1) + Arena::bytes<unsigned>(1) +
         Arena::bytes<Idx>(geo.workers / kShortFix + 1);
  return b;
}

unsigned grid_of(int64_t threads, int block) {
  return unsigned(std::clamp<int64_t>(detail::ceil_div(threads, block), 1, (int64_t(1) << 31) - 1));
}

// Queues prepare (prep_q, the scan when it may be needed, the partition); fills
// c.q and, with tiles, c.tile_i/tile_j/long_list/long_count. Never synchronises.
template <class Idx>
void run_prepare(const char* op, const detail::SegmentLayout& lay, const Segments& seg, bool tiles,
                 const PrepPlan& pp, LaunchCtx& c) {
  const bool use_lengths = seg.lengths.has_value();
  const TensorView& m = use_lengths ? *seg.lengths : *seg.offsets;
  const auto& geo = c.geo;
  PrepArgs<Idx> a;
  a.m = MetaReader{m.data, m.dtype == DType::Int32, strided_of(op, use_lengths ? "lengths" : "offsets", m)};
  a.outer = lay.outer;
  a.S = lay.S;
  a.L = lay.L;
  a.k = m.sizes.back();
  a.lengths = use_lengths;
  a.items = pp.items;
  a.ntiles = pp.ntiles;
  if (pp.ntiles > 0) {
    void* st = c.arena->take<char>(int64_t(pp.state_bytes));
    SEGRED_CUDA_CHECK(a.state.Init(pp.ntiles, st, pp.state_bytes), "segment_reduce: scan tile states");
  }
  if (pp.flag) {
    a.flag = c.arena->take<int>(1);
    SEGRED_CUDA_CHECK(cudaMemsetAsync(a.flag, 0, sizeof(int), c.stream), "segment_reduce: cudaMemsetAsync");
  }
  a.q = c.arena->take<Idx>(geo.segs + 1);
  Idx* tile_i = nullptr;
  Idx* tile_j = nullptr;
  if (tiles) {
    tile_i = c.arena->take<Idx>(geo.workers + 1);
    tile_j = c.arena->take<Idx>(geo.workers + 1);
    a.long_count = c.arena->take<unsigned>(1);
    c.long_list = c.arena->take<Idx>(geo.workers / kShortFix + 1);
    c.tile_i = tile_i;
    c.tile_j = tile_j;
    c.long_count = a.long_count;
  }
  c.q = a.q;
  {
    auto k = prep_q<Idx>;
    const int block = viable_block(k, kPrepBlock, 0, 32, "prepare (q)");
    const int64_t threads = std::max({use_lengths ? lay.outer : pp.items, int64_t(pp.ntiles), int64_t(1)});
    const unsigned grid = grid_of(threads, block);
    k<<<grid, block, 0, c.stream>>>(a);
    check_launch("prepare (q)");
    impl::record(c.path, grid, block);
  }
  if (pp.ntiles > 0) {
    auto k = prep_scan<Idx>;
    const int block = viable_block(k, kPrepBlock, 0, kPrepBlock, "prepare (scan)");  // BlockScan: exactly 256
    k<<<unsigned(pp.ntiles), block, 0, c.stream>>>(a);
    check_launch("prepare (scan)");
    impl::record(c.path, pp.ntiles, block);
  }
  if (tiles) {
    auto k = prep_partition<Idx>;
    const int block = viable_block(k, kPrepBlock, 0, 32, "prepare (partition)");
    const unsigned grid = grid_of(geo.workers + 1, block);
    k<<<grid, block, 0, c.stream>>>(a.q, Idx(geo.segs), Idx(geo.positions), geo.workers, geo.items, tile_i, tile_j);
    check_launch("prepare (partition)");
    impl::record(c.path, grid, block);
  }
}

SegmentProblem problem_of(const detail::SegmentLayout& lay, const TensorView& data, Reduce reduce, Direction dir) {
  return {Backend::CUDA, dir, reduce, data.dtype, lay.index_dtype, lay.outer, lay.L, lay.inner, lay.S};
}

template <class F>
void dispatch(DType dt, int bits, F&& f) {
  auto with = [&](auto tag) {
    using T = decltype(tag);
    if (bits == 32)
      f(T{}, int32_t{});
    else
      f(T{}, int64_t{});
  };
  switch (dt) {
    case DType::Float32: with(float{}); break;
    case DType::Float64: with(double{}); break;
    case DType::Float16: with(half_t{}); break;
    case DType::BFloat16: with(bfloat16_t{}); break;
    default: throw TypeError(detail::cat("segment_reduce: unsupported dtype ", dtype_name(dt)));
  }
}

// The launch context every call shares.
LaunchCtx ctx_of(const detail::SegmentLayout& lay, const detail::SegmentGeometry& geo, Direction dir, cudaStream_t s) {
  LaunchCtx c;
  c.stream = s;
  c.geo = geo;
  c.outer = lay.outer;
  c.L = lay.L;
  c.inner = lay.inner;
  c.S = lay.S;
  c.path = detail::segment_path(dir, geo);
  return c;
}

// The rest of a call at the (dtype, index width) instantiation: one scratch
// allocation for everything, prepare, then run(T, Idx) queues the kernels.
template <class Run>
void run_call(const char* op, const detail::SegmentLayout& lay, const Segments& seg, DType dt, Direction dir,
              Reduce reduce, Scratch& scratch, LaunchCtx& c, Run&& run) {
  dispatch(dt, c.geo.index_bits, [&](auto t, auto i) {
    using T = decltype(t);
    using Idx = decltype(i);
    const bool tiles = !c.geo.prod_bwd;
    const PrepPlan pp = prep_plan(lay, seg);
    Arena arena(scratch, prepare_bytes<Idx>(c.geo, pp, tiles) + run_scratch_bytes<T, Idx>(c, dir, reduce));
    c.arena = &arena;
    run_prepare<Idx>(op, lay, seg, tiles, pp, c);
    run(t, i);
    c.arena = nullptr;
  });
}

}  // namespace

void segment_reduce_fwd(const Plan&, const detail::SegmentLayout& lay0, const Segments& seg, const TensorView& data,
                        Reduce reduce, const TensorView& out, void* stream) {
  const char* op = "segment_reduce";
  DeviceGuard guard(data.device.index);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  detail::SegmentLayout lay = lay0;
  if (!seg.unsafe) validate_on_host(op, lay, seg, s);
  if (out.numel() == 0) return;
  Scratch scratch(s);
  const void* x = contiguous(op, "data", data, scratch, s);
  const SegmentProblem p = problem_of(lay, data, reduce, Direction::Fwd);
  FwdArgs a;
  a.c = ctx_of(lay, detail::segment_geometry(p, aligned16(x)), Direction::Fwd, s);
  a.x = x;
  a.out = out.data;
  a.reduce = reduce;
  a.initial = seg.initial;
  run_call(op, lay, seg, data.dtype, Direction::Fwd, reduce, scratch, a.c,
           [&](auto t, auto i) { run_fwd<decltype(t), decltype(i)>(a); });
}

void segment_reduce_bwd(const Plan&, const detail::SegmentLayout& lay0, const Segments& seg, const TensorView& grad,
                        const TensorView& output, const TensorView& data, Reduce reduce, Tie tie,
                        const TensorView& grad_input, void* stream) {
  const char* op = "segment_reduce_backward";
  DeviceGuard guard(data.device.index);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  detail::SegmentLayout lay = lay0;
  if (!seg.unsafe) validate_on_host(op, lay, seg, s);
  if (grad_input.numel() == 0) return;
  Scratch scratch(s);
  const bool need_x = reduce == Reduce::Max || reduce == Reduce::Min || reduce == Reduce::Prod;
  const bool need_y = reduce == Reduce::Max || reduce == Reduce::Min;
  const void* x = need_x ? contiguous(op, "data", data, scratch, s) : nullptr;
  const void* y = need_y ? contiguous(op, "output", output, scratch, s) : nullptr;
  const void* g = contiguous(op, "grad", grad, scratch, s);
  const SegmentProblem p = problem_of(lay, data, reduce, Direction::Bwd);
  const bool al = aligned16(grad_input.data) && (!x || aligned16(x));
  BwdArgs a;
  a.c = ctx_of(lay, detail::segment_geometry(p, al), Direction::Bwd, s);
  a.g = g;
  a.y = y;
  a.x = x;
  a.gi = grad_input.data;
  a.reduce = reduce;
  a.tie = tie;
  a.initial = seg.initial;
  run_call(op, lay, seg, data.dtype, Direction::Bwd, reduce, scratch, a.c,
           [&](auto t, auto i) { run_bwd<decltype(t), decltype(i)>(a); });
}

// ---- the call preparation shared with the ragged softmax family (src/cuda/merge_space.cuh)

void validate_metadata(const char* op, detail::SegmentLayout& lay, const Segments& seg, cudaStream_t s) {
  validate_on_host(op, lay, seg, s);
}

const void* contiguous_input(const char* op, const char* name, const TensorView& t, Scratch& scratch,
                             cudaStream_t s) {
  return contiguous(op, name, t, scratch, s);
}

bool is_aligned16(const void* p) { return aligned16(p); }

template <class Idx>
size_t merge_space_bytes(const detail::SegmentLayout& lay, const Segments& seg, const detail::SegmentGeometry& geo) {
  return prepare_bytes<Idx>(geo, prep_plan(lay, seg), true);
}

template <class Idx>
void prepare_merge_space(const char* op, const detail::SegmentLayout& lay, const Segments& seg, LaunchCtx& c) {
  run_prepare<Idx>(op, lay, seg, true, prep_plan(lay, seg), c);
}

template size_t merge_space_bytes<int32_t>(const detail::SegmentLayout&, const Segments&,
                                           const detail::SegmentGeometry&);
template size_t merge_space_bytes<int64_t>(const detail::SegmentLayout&, const Segments&,
                                           const detail::SegmentGeometry&);
template void prepare_merge_space<int32_t>(const char*, const detail::SegmentLayout&, const Segments&, LaunchCtx&);
template void prepare_merge_space<int64_t>(const char*, const detail::SegmentLayout&, const Segments&, LaunchCtx&);

// ---- test probe (src/cuda/merge_space_probe.h)

MergeSpaceProbe probe_merge_space(const TensorView& data, const Segments& seg, Reduce reduce, Direction dir) {
  const char* op = dir == Direction::Fwd ? "segment_reduce" : "segment_reduce_backward";
  DeviceGuard guard(data.device.index);
  const cudaStream_t s = static_cast<cudaStream_t>(current_stream());
  detail::SegmentLayout lay = detail::resolve_layout(op, data, seg);
  if (!seg.unsafe) validate_on_host(op, lay, seg, s);
  const SegmentProblem p = problem_of(lay, data, reduce, dir);
  LaunchCtx c = ctx_of(lay, detail::segment_geometry(p, aligned16(data.data)), dir, s);
  MergeSpaceProbe r;
  r.index_bits = c.geo.index_bits;
  r.segs = c.geo.segs;
  r.positions = c.geo.positions;
  r.workers = c.geo.workers;
  r.items = c.geo.items;
  r.tiles = !c.geo.prod_bwd;
  const PrepPlan pp = prep_plan(lay, seg);
  r.scan_tiles = pp.ntiles;
  Scratch scratch(s);
  auto go = [&](auto tag) {
    using Idx = decltype(tag);
    Arena arena(scratch, prepare_bytes<Idx>(c.geo, pp, r.tiles));
    c.arena = &arena;
    run_prepare<Idx>(op, lay, seg, r.tiles, pp, c);
    auto back = [&](const void* src, int64_t n) {
      std::vector<Idx> h(size_t(std::max<int64_t>(n, 0)));
      if (n > 0)
        SEGRED_CUDA_CHECK(cudaMemcpyAsync(h.data(), src, size_t(n) * sizeof(Idx), cudaMemcpyDeviceToHost, s),
                          "probe_merge_space: copy");
      return h;
    };
    const auto q = back(c.q, c.geo.segs + 1);
    std::vector<Idx> ti, tj;
    unsigned lc = 0;
    if (r.tiles) {
      ti = back(c.tile_i, c.geo.workers + 1);
      tj = back(c.tile_j, c.geo.workers + 1);
      SEGRED_CUDA_CHECK(cudaMemcpyAsync(&lc, c.long_count, sizeof(unsigned), cudaMemcpyDeviceToHost, s),
                        "probe_merge_space: copy");
    }
    SEGRED_CUDA_CHECK(cudaStreamSynchronize(s), "probe_merge_space: cudaStreamSynchronize");
    r.q.assign(q.begin(), q.end());
    r.tile_i.assign(ti.begin(), ti.end());
    r.tile_j.assign(tj.begin(), tj.end());
    r.long_count = r.tiles ? int64_t(lc) : -1;
    c.arena = nullptr;
  };
  if (c.geo.index_bits == 32)
    go(int32_t{});
  else
    go(int64_t{});
  return r;
}

}  // namespace segred::cuda
