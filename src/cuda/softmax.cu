// softmax family on CUDA: launch side. The geometry comes from the pure
// softmax_geometry (the Plan's source); this file adds what only the device can
// say: the SM count, pointer alignment (16-byte vectors or scalars), and launch
// viability (occupancy must report a resident block, and for a cluster launch a
// resident cluster; otherwise the block, then the cluster, is shrunk and the
// geometry recomputed; an error names the kernel when nothing fits).
// Strided inputs are copied to contiguous scratch first.
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "segred/error.h"
#include "segred/trace.h"
#include "src/core/device_memory.h"
#include "src/core/softmax_geometry.h"
#include "src/cuda/softmax_impl.cuh"
#include "src/cuda/softmax_kernels.h"

namespace segred::cuda {

namespace {

constexpr int kMaxDims = 8;
struct Strided {
  int nd = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
};

template <class W>
__global__ void softmax_strided_copy(W* dst, const W* src, int64_t n, Strided st) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t r = i, off = 0;
    for (int d = st.nd - 1; d >= 0; --d) {
      const int64_t k = r % st.sizes[d];
      r /= st.sizes[d];
      off += k * st.strides[d];
    }
    dst[i] = src[off];
  }
}

struct DeviceGuard {
  int prev = 0;
  bool moved = false;
  explicit DeviceGuard(int dev) {
    cudaGetDevice(&prev);
    if (prev != dev) {
      SEGRED_CUDA_CHECK(cudaSetDevice(dev), "softmax: cudaSetDevice");
      moved = true;
    }
  }
  ~DeviceGuard() {
    if (moved) cudaSetDevice(prev);
  }
};

// Contiguous device copy of a strided view, in `keep` (freed after the stream's work).
const void* contiguous(const char* op, const char* name, const TensorView& t, std::vector<void*>& keep,
                       cudaStream_t s) {
  if (t.is_contiguous()) return t.data;
  SEGRED_CHECK(t.ndim() <= kMaxDims, ValueError, op, ": ", name, " has ", t.ndim(),
               " dims; the CUDA backend copies strided inputs of up to ", kMaxDims, " dims");
  Strided st;
  st.nd = int(t.ndim());
  for (int d = 0; d < st.nd; ++d) {
    st.sizes[d] = t.sizes[size_t(d)];
    st.strides[d] = t.strides[size_t(d)];
  }
  const int64_t n = t.numel();
  const int es = dtype_size(t.dtype);
  void* dst = nullptr;
  SEGRED_CUDA_CHECK(cudaMallocAsync(&dst, size_t(n) * size_t(es), s), "softmax: scratch for a strided input");
  keep.push_back(dst);
  const int64_t grid = std::min<int64_t>((n + 255) / 256, 65535);
  switch (es) {
    case 2:
      softmax_strided_copy<<<unsigned(grid), 256, 0, s>>>(static_cast<uint16_t*>(dst),
                                                          static_cast<const uint16_t*>(t.data), n, st);
      break;
    case 4:
      softmax_strided_copy<<<unsigned(grid), 256, 0, s>>>(static_cast<uint32_t*>(dst),
                                                          static_cast<const uint32_t*>(t.data), n, st);
      break;
    default:
      softmax_strided_copy<<<unsigned(grid), 256, 0, s>>>(static_cast<uint64_t*>(dst),
                                                          static_cast<const uint64_t*>(t.data), n, st);
      break;
  }
  SEGRED_CUDA_CHECK(cudaGetLastError(), "softmax: launch of the strided copy");
  return dst;
}

// The kernel instantiated for the geometry's (kind, vector width, EV); an error
// naming the path, never another instantiation, when there is none (the plan tests
// assert that every geometry's EV is instantiated: detail::softmax_ev_instantiated).
sm::KernelFn pick(const char* op, const SoftmaxProblem& p, const detail::SoftmaxGeometry& g) {
  const bool f = p.direction == Direction::Fwd, log = p.log, i64 = g.index_bits == 64;
  const detail::SoftmaxKernel k = g.kernel;
  const int vec = g.vec, ev = g.ev;
  sm::KernelFn fn = nullptr;
  const int st = g.staged_form();  // 0 register, 1 staged, 2 staged y alone (bwd)
  switch (p.dtype) {
    case DType::Float32: fn = f ? sm::pick_fwd_f32(log, i64, k, vec, ev, st) : sm::pick_bwd_f32(log, i64, k, vec, ev, st); break;
    case DType::Float64: fn = f ? sm::pick_fwd_f64(log, i64, k, vec, ev, st) : sm::pick_bwd_f64(log, i64, k, vec, ev, st); break;
    case DType::Float16: fn = f ? sm::pick_fwd_f16(log, i64, k, vec, ev, st) : sm::pick_bwd_f16(log, i64, k, vec, ev, st); break;
    case DType::BFloat16:
      fn = f ? sm::pick_fwd_bf16(log, i64, k, vec, ev, st) : sm::pick_bwd_bf16(log, i64, k, vec, ev, st);
      break;
    default: throw TypeError("softmax: unsupported dtype on CUDA");
  }
  if (!fn)
    throw DeviceError(detail::cat(op, ": no kernel instantiated for ", detail::softmax_cuda_path(p, g), " with ", ev,
                                  " elements per thread at vector width ", vec, " (", dtype_name(p.dtype), ")"));
  return fn;
}

bool aligned16(const void* p) { return p == nullptr || (reinterpret_cast<uintptr_t>(p) % 16) == 0; }

// Opt `fn` in to `smem` bytes of dynamic shared memory on `dev` (needed above
// 48 KB: the staged spatial kernel takes 64 KB and more). A kernel's limit is only
// ever raised (to the largest asked for so far), so a launch that viable() once
// accepted never finds it lowered by another geometry's opt-in.
bool opt_in_smem(int dev, sm::KernelFn fn, size_t smem) {
  if (smem <= 48 * 1024) return true;
  static std::mutex mu;
  static std::map<std::pair<int, const void*>, size_t> limit;
  std::lock_guard<std::mutex> lk(mu);
  size_t& have = limit[{dev, reinterpret_cast<const void*>(fn)}];
  const bool cached = detail::softmax_test_caps().launch_cache.load(std::memory_order_relaxed);
  if (smem <= have && cached) return true;
  if (cudaFuncSetAttribute(reinterpret_cast<const void*>(fn), cudaFuncAttributeMaxDynamicSharedMemorySize,
                           int(std::max(smem, have))) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  have = std::max(smem, have);
  return true;
}

// Try the geometry; true when occupancy reports a resident block (and cluster).
bool viable_uncached(int dev, sm::KernelFn fn, const detail::SoftmaxGeometry& g, int as) {
  const size_t smem = size_t(g.smem_bytes(as));
  // Opt in first, so the occupancy queries see the launch as it will run.
  if (!opt_in_smem(dev, fn, smem)) return false;
  if (g.cluster > 8 &&
      cudaFuncSetAttribute(reinterpret_cast<const void*>(fn), cudaFuncAttributeNonPortableClusterSizeAllowed, 1) !=
          cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, g.threads(), smem) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (n < 1) return false;
  if (g.cluster > 1) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(unsigned(g.grid));
    cfg.blockDim = dim3(unsigned(g.threads()));
    cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = unsigned(g.cluster);
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    int nc = 0;
    if (cudaOccupancyMaxActiveClusters(&nc, fn, &cfg) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    if (nc < 1) return false;
  }
  return true;
}

// viable_uncached, cached per (device, kernel, threads, shared memory, cluster):
// the answer depends on nothing else (the cluster query's grid is the launch's,
// but a resident cluster does not depend on how many there are), and the attribute
// calls and occupancy queries are driver work on every launch otherwise. Measured
// on the H200 (session 14, bench/NOTES.md): no time difference a call timed alone
// could resolve; the 3-6 us such a call spends before its kernel lies elsewhere.
// SoftmaxTestCaps::launch_cache = false queries every time (the A/B).
bool viable(int dev, sm::KernelFn fn, const detail::SoftmaxGeometry& g, int as) {
  if (!detail::softmax_test_caps().launch_cache.load(std::memory_order_relaxed)) return viable_uncached(dev, fn, g, as);
  using Key = std::tuple<int, const void*, int, int64_t, int>;
  static std::mutex mu;
  static std::map<Key, bool> cache;
  const Key key{dev, reinterpret_cast<const void*>(fn), g.threads(), g.smem_bytes(as), g.cluster};
  {
    std::lock_guard<std::mutex> lk(mu);
    const auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  const bool ok = viable_uncached(dev, fn, g, as);
  std::lock_guard<std::mutex> lk(mu);
  cache[key] = ok;
  return ok;
}

void launch(const char* op, SoftmaxProblem p, const void* a, const void* b, void* out, int device, void* stream) {
  DeviceGuard guard(device);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  p.sm_count = detail::cuda_sm_count(device);
  const bool aligned = aligned16(a) && aligned16(b) && aligned16(out);
  const int as = p.dtype == DType::Float64 ? 8 : 4;
  // Candidates, largest first: the plan's caps, then a non-portable cluster
  // dropped, then halved blocks.
  std::vector<std::pair<int, int>> caps = {{p.max_threads, p.max_cluster}};
  if (p.max_cluster > 8) caps.push_back({p.max_threads, 8});
  for (int t = std::min(p.max_threads, 1024) / 2; t >= 32; t /= 2) caps.push_back({t, std::min(8, p.max_cluster)});
  caps.push_back({32, 1});
  for (auto [mt, mc] : caps) {
    SoftmaxProblem q = p;
    q.max_threads = mt;
    q.max_cluster = mc;
    const detail::SoftmaxGeometry g = detail::softmax_geometry(q, aligned);
    sm::KernelFn fn = pick(op, q, g);
    if (!viable(device, fn, g, as)) continue;
    sm::Args args;
    args.a = a;
    args.b = b;
    args.out = out;
    args.outer = p.outer;
    args.D = p.dim_size;
    args.inner = p.inner;
    args.lanes = g.lanes;
    args.tx = g.tx;
    args.ty = g.ty;
    args.cluster = g.cluster;
    args.chunks = g.chunks;
    args.l2_hints = g.l2_hints ? 1 : 0;
    args.fwd16_fma = detail::softmax_test_caps().fwd16_fma.load() ? 1 : 0;
    args.work = g.work;
    args.krows = g.krows;
    args.stage_off = g.stage_offset(as);
    args.fd_cluster = FastDivmod::make(g.cluster);
    args.fd_tx = FastDivmod::make(g.tx);
    args.fd_ty = FastDivmod::make(g.ty);
    args.fd_inner = FastDivmod::make(p.inner);  // invalid past 2^31 - 1: only the 64-bit variants see such an inner
    const size_t smem = size_t(g.smem_bytes(as));  // opted in by viable()
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(unsigned(g.grid));
    cfg.blockDim = dim3(unsigned(g.threads()));
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    if (g.cluster > 1) {
      attr[0].id = cudaLaunchAttributeClusterDimension;
      attr[0].val.clusterDim.x = unsigned(g.cluster);
      attr[0].val.clusterDim.y = 1;
      attr[0].val.clusterDim.z = 1;
      cfg.attrs = attr;
      cfg.numAttrs = 1;
    }
    SEGRED_CUDA_CHECK(cudaLaunchKernelEx(&cfg, fn, args), detail::cat(op, ": kernel launch"));
    SEGRED_CUDA_CHECK(cudaGetLastError(), detail::cat(op, ": kernel launch"));
    detail::record_launch(detail::softmax_cuda_path(q, g), {g.grid, 1, 1}, {g.threads(), 1, 1},
                          detail::softmax_cuda_variant(q, g));
    return;
  }
  throw DeviceError(detail::cat(op, ": no viable launch configuration (occupancy reports 0 resident blocks down to "
                                    "32 threads without clusters)"));
}

// Scratch copies, freed in stream order when the call returns or throws.
struct Keep {
  std::vector<void*> v;
  cudaStream_t s;
  explicit Keep(cudaStream_t st) : s(st) {}
  ~Keep() {
    for (void* q : v) cudaFreeAsync(q, s);
  }
};

const char* op_name(const SoftmaxProblem& p) {
  if (p.direction == Direction::Fwd) return p.log ? "log_softmax" : "softmax";
  return p.log ? "log_softmax_backward" : "softmax_backward";
}

}  // namespace

void softmax_check_device_pointer(const char* op, const char* name, const TensorView& t) {
  if (t.numel() == 0) return;
  cudaPointerAttributes attr{};
  const cudaError_t e = cudaPointerGetAttributes(&attr, t.data);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw ValueError(detail::cat(op, ": ", name, " is on ", to_string(t.device), " but its data is not CUDA device "
                                 "memory (", cudaGetErrorString(e), ")"));
  }
  SEGRED_CHECK(attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged, ValueError, op, ": ", name,
               " is on ", to_string(t.device), " but its data is not CUDA device memory");
}

void softmax_fwd(const SoftmaxProblem& p, const TensorView& x, const TensorView& out, void* stream) {
  const char* op = op_name(p);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  DeviceGuard guard(x.device.index);
  Keep keep(s);
  const void* xc = contiguous(op, "x", x, keep.v, s);
  launch(op, p, xc, nullptr, out.data, x.device.index, stream);
}

void softmax_bwd(const SoftmaxProblem& p, const TensorView& grad, const TensorView& output,
                 const TensorView& grad_input, void* stream) {
  const char* op = op_name(p);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  DeviceGuard guard(output.device.index);
  Keep keep(s);
  const void* g = contiguous(op, "grad", grad, keep.v, s);
  const void* y = contiguous(op, "output", output, keep.v, s);
  launch(op, p, g, y, grad_input.data, output.device.index, stream);
}

}  // namespace segred::cuda
