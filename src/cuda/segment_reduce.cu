// segment_reduce on CUDA: metadata on the device -> the merge space q, strided
// inputs -> contiguous copies, then the (dtype, index width) instantiation.
//
// Metadata validation (SEMANTICS.md). unsafe = false: the metadata is copied to
// the host (one cudaMemcpy and a stream synchronisation: the documented cost of
// validation) and checked by the CPU backend's own normalise_offsets, so the
// rules and messages are the same on every backend; the clamped offsets then go
// back to the device as q. unsafe = true: nothing is synchronised; q is built on
// the device by one CUB scan over (row, value) pairs that reproduces the host
// clamping exactly (lengths: saturating running sum of clamp(len, 0, L);
// offsets: running max of clamp(off, 0, L)), so every segment lies in [0, L]
// whatever the metadata holds.
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <cub/device/device_scan.cuh>
#include <vector>

#include "src/core/segment_geometry.h"
#include "src/cuda/kernels.h"
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

struct KV {
  int64_t k, v;  // row, value
};

// Segmented (by row) scan operator; associative for values in [0, L].
struct KVOp {
  int64_t L;
  bool sum;
  __host__ __device__ KV operator()(const KV& a, const KV& b) const {
    if (a.k != b.k) return b;
    const int64_t v = sum ? (a.v + b.v < L ? a.v + b.v : L) : (a.v > b.v ? a.v : b.v);
    return KV{b.k, v};
  }
};

struct MetaIn {
  MetaReader m;
  int64_t k, L;
  __host__ __device__ KV operator()(int64_t i) const {
    const int64_t r = i / k, c = i - r * k;
    int64_t v = m.read(r, c);
    v = v < 0 ? 0 : (v > L ? L : v);
    return KV{r, v};
  }
};

// Plain (one row, or row-banded) forms: one int64 per item, half the traffic of KV.
struct SatSum {
  int64_t L;
  __host__ __device__ int64_t operator()(int64_t a, int64_t b) const { return a + b < L ? a + b : L; }
};
struct MaxOp {
  __host__ __device__ int64_t operator()(int64_t a, int64_t b) const { return a > b ? a : b; }
};
// lengths of a single row: clamp(len, 0, L).
struct RowIn {
  MetaReader m;
  int64_t L;
  __host__ __device__ int64_t operator()(int64_t i) const {
    const int64_t v = m.read(0, i);
    return v < 0 ? int64_t(0) : (v > L ? L : v);
  }
};
// offsets: clamp(off, 0, L) + r * (L + 1). Rows occupy disjoint increasing bands,
// so one global running max is each row's running max (minus its band base).
struct BandedIn {
  MetaReader m;
  int64_t k, L;
  __host__ __device__ int64_t operator()(int64_t i) const {
    const int64_t r = i / k, c = i - r * k;
    int64_t v = m.read(r, c);
    v = v < 0 ? 0 : (v > L ? L : v);
    return v + r * (L + 1);
  }
};

// mode 0: kv (lengths, batched); 1: plain saturating sums (lengths, one row);
// 2: banded running max (offsets).
template <class Idx>
__global__ void write_q(Idx* q, const KV* kv, const int64_t* plain, int mode, int64_t outer, int64_t S, int64_t L) {
  const int64_t n = outer * (S + 1);
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id == 0) {
    q[0] = 0;
    q[n + 1] = Idx(outer * L);
  }
  if (id >= n) return;
  const int64_t r = id / (S + 1), s = id - r * (S + 1);
  int64_t v;
  if (mode == 0)
    v = s == 0 ? 0 : kv[r * S + s - 1].v;
  else if (mode == 1)
    v = s == 0 ? 0 : plain[s - 1];
  else
    v = plain[id] - r * (L + 1);
  q[1 + id] = Idx(r * L + v);
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
  int prev = 0;
  explicit DeviceGuard(int dev) {
    cudaGetDevice(&prev);
    SEGRED_CUDA_CHECK(cudaSetDevice(dev), "segment_reduce: cudaSetDevice");
  }
  ~DeviceGuard() { cudaSetDevice(prev); }
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

template <class Idx>
const Idx* build_q(const char* op, const detail::SegmentLayout& lay, const Segments& seg,
                   const detail::SegmentGeometry& geo, Scratch& scratch, cudaStream_t s) {
  const int64_t n = geo.segs + 1;
  Idx* q = scratch.alloc<Idx>(n);
  const int64_t outer = lay.outer, S = lay.S, L = lay.L;
  if (!lay.offsets.empty() || outer == 0) {  // validated on the host
    std::vector<Idx> hq(static_cast<size_t>(n));
    hq[0] = 0;
    for (int64_t r = 0; r < outer; ++r)
      for (int64_t k = 0; k <= S; ++k) hq[size_t(1 + r * (S + 1) + k)] = Idx(r * L + lay.row(r)[k]);
    hq[size_t(n - 1)] = Idx(outer * L);
    SEGRED_CUDA_CHECK(cudaMemcpyAsync(q, hq.data(), size_t(n) * sizeof(Idx), cudaMemcpyHostToDevice, s),
                      detail::cat(op, ": copying offsets to the device"));
    SEGRED_CUDA_CHECK(cudaStreamSynchronize(s), detail::cat(op, ": cudaStreamSynchronize"));
    return q;
  }
  // unsafe: scan on the device.
  const bool use_lengths = seg.lengths.has_value();
  const TensorView& m = use_lengths ? *seg.lengths : *seg.offsets;
  const int64_t k = m.sizes.back();
  const int64_t items = outer * k;
  const MetaReader rd{m.data, m.dtype == DType::Int32, strided_of(op, use_lengths ? "lengths" : "offsets", m)};
  const int mode = use_lengths ? (outer == 1 ? 1 : 0) : 2;
  KV* kv = nullptr;
  int64_t* plain = nullptr;
  if (items > 0) {
    size_t temp = 0;
    auto scan = [&](auto it, auto* out, auto opr) {
      SEGRED_CUDA_CHECK(cub::DeviceScan::InclusiveScan(nullptr, temp, it, out, opr, items, s), "segment_reduce: scan");
      void* tmp = scratch.alloc<char>(int64_t(temp));
      SEGRED_CUDA_CHECK(cub::DeviceScan::InclusiveScan(tmp, temp, it, out, opr, items, s), "segment_reduce: scan");
    };
    auto count = thrust::counting_iterator<int64_t>(0);
    if (mode == 0) {
      kv = scratch.alloc<KV>(items);
      scan(thrust::make_transform_iterator(count, MetaIn{rd, k, L}), kv, KVOp{L, true});
    } else if (mode == 1) {
      plain = scratch.alloc<int64_t>(items);
      scan(thrust::make_transform_iterator(count, RowIn{rd, L}), plain, SatSum{L});
    } else {
      plain = scratch.alloc<int64_t>(items);
      scan(thrust::make_transform_iterator(count, BandedIn{rd, k, L}), plain, MaxOp{});
    }
  }
  const int64_t threads = std::max<int64_t>(outer * (S + 1), 1);
  write_q<Idx><<<unsigned(detail::ceil_div(threads, 256)), 256, 0, s>>>(q, kv, plain, mode, outer, S, L);
  check_launch("write_q");
  return q;
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
  const detail::SegmentGeometry geo = detail::segment_geometry(p, aligned16(x));
  FwdArgs a;
  a.c.stream = s;
  a.c.geo = geo;
  a.c.outer = lay.outer;
  a.c.L = lay.L;
  a.c.inner = lay.inner;
  a.c.S = lay.S;
  a.c.path = detail::segment_path(Direction::Fwd, geo);
  a.c.scratch = &scratch;
  a.x = x;
  a.out = out.data;
  a.reduce = reduce;
  a.initial = seg.initial;
  dispatch(data.dtype, geo.index_bits, [&](auto t, auto i) {
    using T = decltype(t);
    using Idx = decltype(i);
    a.c.q = build_q<Idx>(op, lay, seg, geo, scratch, s);
    run_fwd<T, Idx>(a);
  });
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
  const detail::SegmentGeometry geo = detail::segment_geometry(p, al);
  BwdArgs a;
  a.c.stream = s;
  a.c.geo = geo;
  a.c.outer = lay.outer;
  a.c.L = lay.L;
  a.c.inner = lay.inner;
  a.c.S = lay.S;
  a.c.path = detail::segment_path(Direction::Bwd, geo);
  a.c.scratch = &scratch;
  a.g = g;
  a.y = y;
  a.x = x;
  a.gi = grad_input.data;
  a.reduce = reduce;
  a.tie = tie;
  a.initial = seg.initial;
  dispatch(data.dtype, geo.index_bits, [&](auto t, auto i) {
    using T = decltype(t);
    using Idx = decltype(i);
    a.c.q = build_q<Idx>(op, lay, seg, geo, scratch, s);
    run_bwd<T, Idx>(a);
  });
}

}  // namespace segred::cuda
