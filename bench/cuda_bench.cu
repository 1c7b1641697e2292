// CUDA benchmark of segment_reduce (shared/PERFORMANCE.md): segred forward and
// backward, CUB DeviceSegmentedReduce (1-D sum/max), and a device-to-device copy
// (the floor) measured in the same process. Prints one RESULT line per
// measurement for bench/cuda_bench.py, which adds torch.segment_reduce on the
// same lengths (written to --dir) and prints the table.
//
// Method: CUDA events around each call, 3 warm-up calls, median of --reps;
// inputs rotated among copies so that each call's data is >= 240 MB (4x the L2);
// data never zeros. segred is called with unsafe = true and device offsets, the
// no-synchronisation mode a training loop uses; the sum rows are timed again with
// device lengths (LENGTHS lines: offsets ms, lengths ms, fwd then bwd).
// Flags: --only SUBSTRING (cases), --dtype float32|bfloat16, --reps N, --dir D, --graph,
// --feat-items N (session 24: every feature call at N merge items per worker, i.e.
// SegmentTestCaps::feat_items, in place of the plan's feat_items_rule; 0 the rule),
// --feat-half-vec N (session 29: SegmentTestCaps::feat_half_vec, the 16-bit feature
// forwards' vector width: 0 the rule, 1 16-byte vectors, 2 8-byte half vectors),
// --prep-spec N (session 33: SegmentTestCaps::prep_spec for every call, e.g. 4 the
// partition scattered by the segments; the fixed-cost table's modes restore it),
// --flat-ended N (session 34: SegmentTestCaps::flat_ended, how flat_reduce walks a tile
// with segment ends: 0 the rule, 1 staged by merge items, sessions 1-33's),
// --flat-block N (session 35: SegmentTestCaps::flat_block, threads a block of the flat
//   kernels; 0 the plan's 256)
// --items-sweep N,N,... (session 26: feature cases only, nothing else timed: per case,
// dtype, reduce and direction, every listed items value (0: the plan's rule) timed in
// --sweep-rounds rounds (default 3), the list's order rotated each round; SWEEP lines:
// case, dtype, reduce, dir, items, grid, ms of each round, bytes).
//
// Build (tools/gpu-check): nvcc -O3 -std=c++20 -arch=sm_90 --expt-relaxed-constexpr
//   -Xcompiler -fopenmp -I include -I . bench/cuda_bench.cu build/libsegred.a
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <cub/device/device_segmented_reduce.cuh>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "segred/segred.h"
#include "segred/stream.h"
#include "bench/cuda_check.cuh"
#include "src/core/segment_geometry.h"

using namespace segred;

namespace {

int g_reps = 20;
int g_prep_spec = -1;  // --prep-spec (SegmentTestCaps::prep_spec; -1: its default)
std::string g_only_reduce;  // --reduce sum|max: that reduce only (e.g. for Nsight Compute's first launches)
int g_feat_items = 0;  // --feat-items: SegmentTestCaps::feat_items of every call (0: the plan's rule)
int g_feat_half_vec = 0;  // --feat-half-vec: SegmentTestCaps::feat_half_vec (0 the rule, 1 full, 2 half vectors)
int g_flat_block = 0;  // --flat-block: SegmentTestCaps::flat_block (0 the plan's block)
int g_flat_ended = 0;  // --flat-ended: SegmentTestCaps::flat_ended (0 the rule, 1 the staged walk)
std::vector<int> g_sweep;  // --items-sweep: merge items per feature worker to time (0: the plan's rule)
int g_sweep_rounds = 3;

// Per call, `batch` calls back to back between two events (call i is f(i): the
// caller rotates its inputs by i), median over `reps` rounds. batch > 1: the kernels'
// steady-state rate, where a call's host work and launches overlap the previous
// call's kernels; batch 1: the call alone (median_ms, the tables' method).
double batch_ms(const std::function<void(int)>& f, int reps, int batch) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) f(i);
  CK(cudaDeviceSynchronize());
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a));
    for (int k = 0; k < batch; ++k) f(i * batch + k);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms / float(batch));
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return double(t[t.size() / 2]);
}

// One call between two events, median over `reps` (inputs rotated by the call index).
double median_ms(const std::function<void(int)>& f, int reps) { return batch_ms(f, reps, 1); }

// --graph: the same calls captured into CUDA graphs (one per input buffer) on a
// stream of their own and timed as graph launches. A call's kernels then follow
// each other without waiting for the host, so (plain - graph) is the host's
// submission cost that the plain time includes on an idle GPU (launches,
// occupancy queries, scratch allocation): how the split prepare's extra
// launches show (bench/NOTES.md, session 6). -1 when capture fails.
bool g_graph = false;

double graph_ms(const std::function<void(int)>& f, int reps, int nbuf) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  double r = -1;
  {
    StreamGuard guard(s);
    for (int i = 0; i < 3; ++i) f(i);
    CK(cudaStreamSynchronize(s));
    std::vector<cudaGraphExec_t> ex;
    bool ok = true;
    for (int b = 0; b < nbuf && ok; ++b) {
      cudaGraph_t g = nullptr;
      ok = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
      if (!ok) break;
      f(b);
      ok = cudaStreamEndCapture(s, &g) == cudaSuccess && g;
      cudaGraphExec_t e = nullptr;
      ok = ok && cudaGraphInstantiate(&e, g, 0) == cudaSuccess;
      if (g) cudaGraphDestroy(g);
      if (ok) ex.push_back(e);
    }
    if (!ok) {
      std::fprintf(stderr, "graph capture failed: %s\n", cudaGetErrorString(cudaGetLastError()));
    } else {
      cudaEvent_t a, b;
      CK(cudaEventCreate(&a));
      CK(cudaEventCreate(&b));
      for (int i = 0; i < 3 * nbuf; ++i) CK(cudaGraphLaunch(ex[size_t(i % nbuf)], s));
      CK(cudaStreamSynchronize(s));
      std::vector<float> t;
      for (int i = 0; i < reps; ++i) {
        CK(cudaEventRecord(a, s));
        CK(cudaGraphLaunch(ex[size_t(i % nbuf)], s));
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms);
      }
      std::sort(t.begin(), t.end());
      r = double(t[t.size() / 2]);
      cudaEventDestroy(a);
      cudaEventDestroy(b);
    }
    for (auto e : ex) cudaGraphExecDestroy(e);
  }
  CK(cudaStreamSynchronize(s));
  cudaGetLastError();
  cudaStreamDestroy(s);
  return r;
}

__global__ void fill(float* x, int64_t n, uint32_t salt) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ salt;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = float(h % 4096u) / 1024.0f - 2.0f + 0.0001f;  // [-2, 2), never all zero
  }
}
__global__ void to_bf16(const float* x, __nv_bfloat16* y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __float2bfloat16(x[i]);
}

struct Case {
  std::string name;
  int64_t inner;
  std::vector<int64_t> lengths;
  int64_t rows() const {
    int64_t r = 0;
    for (auto v : lengths) r += v;
    return r;
  }
};

std::vector<int64_t> exp_lengths(int64_t count, double mean, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> d(1.0 / mean);
  std::vector<int64_t> v(static_cast<size_t>(count));
  for (auto& x : v) x = int64_t(d(rng));
  return v;
}

std::vector<Case> cases() {
  std::vector<Case> c;
  c.push_back({"1d_small_4kx16", 1, std::vector<int64_t>(256, 16)});  // launch latency dominates
  c.push_back({"1d_2Mx32", 1, std::vector<int64_t>(size_t(1) << 21, 32)});
  c.push_back({"1d_64x1M", 1, std::vector<int64_t>(64, int64_t(1) << 20)});
  c.push_back({"1d_200k_exp40", 1, exp_lengths(200000, 40, 1)});
  c.push_back({"2d_64kx16_f128", 128, std::vector<int64_t>(65536, 16)});
  c.push_back({"2d_exp40_f128", 128, exp_lengths(26214, 40, 2)});
  {
    std::vector<int64_t> v(size_t(1) << 20, 1);
    v.insert(v.begin() + (1 << 19), int64_t(1) << 26);
    c.push_back({"1d_one2^26_1Mx1", 1, v});
  }
  c.push_back({"2d_x16_f4", 4, std::vector<int64_t>(size_t(1) << 18, 16)});
  c.push_back({"2d_x16_f16", 16, std::vector<int64_t>(size_t(1) << 17, 16)});
  c.push_back({"2d_x16_f64", 64, std::vector<int64_t>(size_t(1) << 16, 16)});
  return c;
}

struct Buf {
  void* p = nullptr;
  explicit Buf(size_t bytes) { CK(cudaMalloc(&p, bytes ? bytes : 1)); }
  ~Buf() { cudaFree(p); }
  Buf(const Buf&) = delete;
};

void run_case(const Case& c, DType dt, const char* dir_out) {
  const int64_t rows = c.rows(), inner = c.inner, S = int64_t(c.lengths.size());
  const int64_t n = rows * inner, nout = S * inner;
  const int es = dtype_size(dt);
  // Lengths for the torch side.
  if (dir_out) {
    const std::string path = std::string(dir_out) + "/" + c.name + ".i64";
    if (FILE* f = std::fopen(path.c_str(), "wb")) {
      std::fwrite(c.lengths.data(), 8, c.lengths.size(), f);
      std::fclose(f);
    }
  }
  std::vector<int64_t> offs(size_t(S + 1), 0);
  for (int64_t s = 0; s < S; ++s) offs[size_t(s + 1)] = offs[size_t(s)] + c.lengths[size_t(s)];
  Buf d_offs(offs.size() * 8), d_lens(std::max<size_t>(c.lengths.size(), 1) * 8);
  CK(cudaMemcpy(d_offs.p, offs.data(), offs.size() * 8, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_lens.p, c.lengths.data(), c.lengths.size() * 8, cudaMemcpyHostToDevice));
  const size_t bytes_in = size_t(n) * es;
  const int nbuf = int(std::clamp<int64_t>((int64_t(240) << 20) / int64_t(std::max<size_t>(bytes_in, 1)) + 1, 1, 6));
  std::vector<std::unique_ptr<Buf>> x, gi, out, grad;
  Buf tmpf(size_t(n) * 4);
  for (int b = 0; b < nbuf; ++b) {
    x.push_back(std::make_unique<Buf>(bytes_in));
    gi.push_back(std::make_unique<Buf>(bytes_in));
    out.push_back(std::make_unique<Buf>(size_t(nout) * es));
    grad.push_back(std::make_unique<Buf>(size_t(nout) * es));
    fill<<<1024, 256>>>(static_cast<float*>(tmpf.p), n, 77u + b);
    if (dt == DType::Float32)
      CK(cudaMemcpy(x.back()->p, tmpf.p, bytes_in, cudaMemcpyDeviceToDevice));
    else
      to_bf16<<<1024, 256>>>(static_cast<float*>(tmpf.p), static_cast<__nv_bfloat16*>(x.back()->p), n);
    fill<<<1024, 256>>>(static_cast<float*>(tmpf.p), nout, 991u + b);
    if (dt == DType::Float32)
      CK(cudaMemcpy(grad.back()->p, tmpf.p, size_t(nout) * 4, cudaMemcpyDeviceToDevice));
    else
      to_bf16<<<1024, 256>>>(static_cast<float*>(tmpf.p), static_cast<__nv_bfloat16*>(grad.back()->p), nout);
  }
  CK(cudaDeviceSynchronize());
  const DeviceRef gpu{Device::CUDA, 0};
  const Shape xs = inner == 1 ? Shape{rows} : Shape{rows, inner};
  const Shape os = inner == 1 ? Shape{S} : Shape{S, inner};
  const TensorView offv(d_offs.p, DType::Int64, {S + 1}, {}, gpu);
  Segments seg;
  seg.offsets = offv;
  seg.unsafe = true;
  const double meta = double(S + 1) * 8;
  // The same call with device lengths (how torch.segment_reduce is called): prepare
  // then scans the lengths instead of checking the offsets (src/cuda/segment_reduce.cu),
  // a different path of that kernel. Sum only: prepare is the same for every reduce.
  Segments seg_len;
  seg_len.lengths = TensorView(d_lens.p, DType::Int64, {S}, {}, gpu);
  seg_len.unsafe = true;
  for (const char* rname : {"sum", "max"}) {
    if (!g_only_reduce.empty() && g_only_reduce != rname) continue;
    const Reduce red = parse_reduce(rname);
    auto X = [&](int i) { return TensorView(x[size_t(i % nbuf)]->p, dt, xs, {}, gpu); };
    auto O = [&](int i) { return TensorView(out[size_t(i % nbuf)]->p, dt, os, {}, gpu); };
    auto G = [&](int i) { return TensorView(grad[size_t(i % nbuf)]->p, dt, os, {}, gpu); };
    auto GI = [&](int i) { return TensorView(gi[size_t(i % nbuf)]->p, dt, xs, {}, gpu); };
    if (!g_sweep.empty()) {  // --items-sweep: the items values alternated, nothing else
      const double bytes[2] = {double(n + nout) * es + meta,
                               red == Reduce::Sum ? double(nout + n) * es + meta : double(2 * nout + 2 * n) * es + meta};
      auto& caps = segred::detail::segment_test_caps();
      const size_t K = g_sweep.size();
      std::vector<std::vector<double>> ms(2 * K);
      for (int b = 0; b < nbuf; ++b) segment_reduce_out(X(b), red, seg, O(b));  // outputs for the backward
      for (int r = 0; r < g_sweep_rounds; ++r)
        for (size_t k0 = 0; k0 < K; ++k0) {
          const size_t k = (k0 + size_t(r)) % K;
          caps.feat_items = g_sweep[k];
          ms[2 * k].push_back(median_ms([&](int i) { segment_reduce_out(X(i), red, seg, O(i)); }, g_reps));
          ms[2 * k + 1].push_back(median_ms(
              [&](int i) { segment_reduce_backward_out(G(i), O(i), X(i), red, seg, Tie::Split, GI(i)); }, g_reps));
        }
      for (size_t k = 0; k < K; ++k)
        for (int d = 0; d < 2; ++d) {
          caps.feat_items = g_sweep[k];
          const Plan pl = plan_segment_reduce(SegmentProblem{Backend::CUDA, d ? Direction::Bwd : Direction::Fwd, red,
                                                            dt, DType::Int64, 1, rows, inner, S});
          std::printf("SWEEP\t%s\t%s\t%s\t%s\t%lld\t%lld", c.name.c_str(), std::string(dtype_name(dt)).c_str(),
                      rname, d ? "bwd" : "fwd", (long long)pl.chunk, (long long)pl.grid[0]);
          for (const double v : ms[2 * k + size_t(d)]) std::printf("\t%.5f", v);
          std::printf("\t%.0f\n", bytes[d]);
        }
      caps.feat_items = g_feat_items;
      std::fflush(stdout);
      continue;
    }
    const double tf = median_ms([&](int i) { segment_reduce_out(X(i), red, seg, O(i)); }, g_reps);
    const double bf = double(n + nout) * es + meta;
    for (int b = 0; b < nbuf; ++b) segment_reduce_out(X(b), red, seg, O(b));
    const double tb = median_ms(
        [&](int i) { segment_reduce_backward_out(G(i), O(i), X(i), red, seg, Tie::Split, GI(i)); }, g_reps);
    const double bb = red == Reduce::Sum ? double(nout + n) * es + meta : double(2 * nout + 2 * n) * es + meta;
    {
      // Where a call's time goes (session 19): the same call 20 times back to back,
      // per call, and a device copy of the same bytes (half read, half written)
      // timed like the table, alone between two events: the floor of the table's
      // method at this size, launch latency included (bench/cuda_host_cost.cu).
      const double f20 = batch_ms([&](int i) { segment_reduce_out(X(i), red, seg, O(i)); }, g_reps, 20);
      const double b20 = batch_ms(
          [&](int i) { segment_reduce_backward_out(G(i), O(i), X(i), red, seg, Tie::Split, GI(i)); }, g_reps, 20);
      Buf c0(size_t(std::max(bf, bb) / 2) + 16), c1(size_t(std::max(bf, bb) / 2) + 16);
      CK(cudaMemset(c0.p, 1, size_t(std::max(bf, bb) / 2)));
      const double cf = median_ms([&](int) { CK(cudaMemcpyAsync(c1.p, c0.p, size_t(bf / 2), cudaMemcpyDeviceToDevice)); }, g_reps);
      const double cb = median_ms([&](int) { CK(cudaMemcpyAsync(c1.p, c0.p, size_t(bb / 2), cudaMemcpyDeviceToDevice)); }, g_reps);
      std::printf("FLOOR\t%s\t%s\t%s\tfwd\t%.5f\t%.5f\t%.5f\t%.0f\n", c.name.c_str(), std::string(dtype_name(dt)).c_str(),
                  rname, tf, f20, cf, bf);
      std::printf("FLOOR\t%s\t%s\t%s\tbwd\t%.5f\t%.5f\t%.5f\t%.0f\n", c.name.c_str(), std::string(dtype_name(dt)).c_str(),
                  rname, tb, b20, cb, bb);
    }
    // CUB DeviceSegmentedReduce (1-D float32 only: its Sum/Max over float).
    double tc = -1;
    if (inner == 1 && dt == DType::Float32) {
      size_t temp = 0;
      const int64_t* o = static_cast<const int64_t*>(d_offs.p);
      auto call = [&](void* tp, size_t& tb_, int i) {
        const float* in = static_cast<const float*>(x[size_t(i % nbuf)]->p);
        float* op = static_cast<float*>(out[size_t(i % nbuf)]->p);
        if (red == Reduce::Sum)
          CK(cub::DeviceSegmentedReduce::Sum(tp, tb_, in, op, S, o, o + 1));
        else
          CK(cub::DeviceSegmentedReduce::Max(tp, tb_, in, op, S, o, o + 1));
      };
      call(nullptr, temp, 0);
      Buf tmp(temp);
      tc = median_ms([&](int i) { call(tmp.p, temp, i); }, g_reps);
    }
    if (red == Reduce::Sum) {
      const double lf = median_ms([&](int i) { segment_reduce_out(X(i), red, seg_len, O(i)); }, g_reps);
      const double lb = median_ms(
          [&](int i) { segment_reduce_backward_out(G(i), O(i), X(i), red, seg_len, Tie::Split, GI(i)); }, g_reps);
      std::printf("LENGTHS\t%s\t%s\t%s\t%.5f\t%.5f\t%.5f\t%.5f\n", c.name.c_str(),
                  std::string(dtype_name(dt)).c_str(), rname, tf, lf, tb, lb);
    }
    if (inner == 1) {  // session 12: the fused fix-up against the fixup_tree launch, same process
      auto& caps = segred::detail::segment_test_caps();
      caps.fused_fixup = 2;
      const double off = median_ms([&](int i) { segment_reduce_out(X(i), red, seg, O(i)); }, g_reps);
      caps.fused_fixup = 1;
      const double on = median_ms([&](int i) { segment_reduce_out(X(i), red, seg, O(i)); }, g_reps);
      caps.fused_fixup = 0;  // the rule (segment_geometry.h), as the table's row
      const Plan pl = plan_segment_reduce(
          SegmentProblem{Backend::CUDA, Direction::Fwd, red, dt, DType::Int64, 1, rows, 1, S});
      std::printf("FUSE\t%s\t%s\t%s\t%.5f\t%.5f\t%.5f\t%s\n", c.name.c_str(), std::string(dtype_name(dt)).c_str(),
                  rname, tf, on, off, pl.to_string().c_str());
    }
    if (inner == 1) {  // session 16: flat_reduce's full-tile forms (SegmentTestCaps::flat_direct 1 sessions 1-15,
                       // 2 coalesced), alternated twice in the same process
      auto& caps = segred::detail::segment_test_caps();
      auto fwd = [&](int i) { segment_reduce_out(X(i), red, seg, O(i)); };
      double dm[2][2];
      for (int rep = 0; rep < 2; ++rep)
        for (int k = 0; k < 2; ++k) {
          caps.flat_direct = 1 + k;
          dm[rep][k] = median_ms(fwd, g_reps);
        }
      caps.flat_direct = 0;
      std::printf("DIRECT\t%s\t%s\t%s\t%.5f", c.name.c_str(), std::string(dtype_name(dt)).c_str(), rname, tf);
      for (int k = 0; k < 2; ++k) std::printf("\t%.5f\t%.5f", dm[0][k], dm[1][k]);
      std::printf("\n");
    }
    if (inner > 1) {  // session 13: the plan's merge items per feature worker against 32, same process
      const Plan pf = plan_segment_reduce(
          SegmentProblem{Backend::CUDA, Direction::Fwd, red, dt, DType::Int64, 1, rows, inner, S});
      const Plan pb = plan_segment_reduce(
          SegmentProblem{Backend::CUDA, Direction::Bwd, red, dt, DType::Int64, 1, rows, inner, S});
      if (pf.chunk != 32 || pb.chunk != 32) {
        auto& caps = segred::detail::segment_test_caps();
        caps.feat_items = 32;
        const double f32i = median_ms([&](int i) { segment_reduce_out(X(i), red, seg, O(i)); }, g_reps);
        const double b32i = median_ms(
            [&](int i) { segment_reduce_backward_out(G(i), O(i), X(i), red, seg, Tie::Split, GI(i)); }, g_reps);
        caps.feat_items = g_feat_items;  // back to the table rows' items (0: feat_items_rule)
        std::printf("FEAT\t%s\t%s\t%s\t%.5f\t%.5f\t%.5f\t%.5f\t%lld\t%lld\n", c.name.c_str(),
                    std::string(dtype_name(dt)).c_str(), rname, tf, f32i, tb, b32i, (long long)pf.chunk,
                    (long long)pb.chunk);
      }
    }
    {  // session 15: a call's fixed cost, same process, the six forms timed back to back: {prep_spec, pdl} =
       // the default (session 33: prep_scatter_rule's partition, the dependent launch where pdl_pays: session
       // 16), the dependent launch always (session 15's), then without it: the raw offsets searched before
       // prepare's grid.sync (sessions 15-32's default), after it, q after it (sessions 5-14), the scatter (4)
      auto& caps = segred::detail::segment_test_caps();
      const int prep_spec = caps.prep_spec;  // the calls' own (--prep-spec or the default), restored below
      auto fwd = [&](int i) { segment_reduce_out(X(i), red, seg, O(i)); };
      auto bwd = [&](int i) { segment_reduce_backward_out(G(i), O(i), X(i), red, seg, Tie::Split, GI(i)); };
      constexpr int kModes = 6;
      const int modes[kModes][2] = {{5, 0}, {5, 1}, {0, 2}, {3, 2}, {2, 2}, {4, 2}};
      double f[kModes], b[kModes];
      for (int m = 0; m < kModes; ++m) {
        caps.prep_spec = modes[m][0];
        caps.pdl = modes[m][1];
        f[m] = median_ms(fwd, g_reps);
        b[m] = median_ms(bwd, g_reps);
      }
      caps.prep_spec = prep_spec;
      caps.pdl = 0;
      for (int d = 0; d < 2; ++d) {
        std::printf("PREP\t%s\t%s\t%s\t%s", c.name.c_str(), std::string(dtype_name(dt)).c_str(), rname,
                    d ? "bwd" : "fwd");
        for (int m = 0; m < kModes; ++m) std::printf("\t%.5f", d ? b[m] : f[m]);
        std::printf("\n");
      }
    }
    if (g_graph) {
      const double gf = graph_ms([&](int i) { segment_reduce_out(X(i), red, seg, O(i)); }, g_reps, nbuf);
      const double gb = graph_ms(
          [&](int i) { segment_reduce_backward_out(G(i), O(i), X(i), red, seg, Tie::Split, GI(i)); }, g_reps, nbuf);
      std::printf("GRAPH\t%s\t%s\t%s\t%.5f\t%.5f\t%.5f\t%.5f\n", c.name.c_str(),
                  std::string(dtype_name(dt)).c_str(), rname, tf, gf, tb, gb);
    }
    std::printf("RESULT\t%s\t%s\t%s\tfwd\t%.5f\t%.0f\t%.5f\n", c.name.c_str(), std::string(dtype_name(dt)).c_str(),
                rname, tf, bf, tc);
    std::printf("RESULT\t%s\t%s\t%s\tbwd\t%.5f\t%.0f\t-1\n", c.name.c_str(), std::string(dtype_name(dt)).c_str(),
                rname, tb, bb);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* dir = nullptr;
  std::string only, only_dtype;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) g_reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (!std::strcmp(argv[i], "--dtype") && i + 1 < argc) only_dtype = argv[++i];  // float32 | bfloat16
    else if (!std::strcmp(argv[i], "--reduce") && i + 1 < argc) g_only_reduce = argv[++i];
    else if (!std::strcmp(argv[i], "--graph")) g_graph = true;
    else if (!std::strcmp(argv[i], "--feat-items") && i + 1 < argc) g_feat_items = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--feat-half-vec") && i + 1 < argc) g_feat_half_vec = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--prep-spec") && i + 1 < argc) g_prep_spec = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--flat-ended") && i + 1 < argc) g_flat_ended = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--flat-block") && i + 1 < argc) g_flat_block = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--sweep-rounds") && i + 1 < argc) g_sweep_rounds = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--items-sweep") && i + 1 < argc) {
      for (const char* t = argv[++i]; *t;) {
        g_sweep.push_back(std::atoi(t));
        while (*t && *t != ',') ++t;
        if (*t == ',') ++t;
      }
    }
  }
  segred::detail::segment_test_caps().feat_items = g_feat_items;
  if (g_prep_spec >= 0) {
    segred::detail::segment_test_caps().prep_spec = g_prep_spec;
    std::printf("PREP_SPEC\t%d\n", g_prep_spec);
  }
  if (g_feat_items > 0) std::printf("FEAT_ITEMS\t%d\n", g_feat_items);
  segred::detail::segment_test_caps().feat_half_vec = g_feat_half_vec;
  if (g_feat_half_vec > 0) std::printf("FEAT_HALF_VEC\t%d\n", g_feat_half_vec);
  segred::detail::segment_test_caps().flat_ended = g_flat_ended;
  if (g_flat_ended > 0) std::printf("FLAT_ENDED\t%d\n", g_flat_ended);
  segred::detail::segment_test_caps().flat_block = g_flat_block;
  if (g_flat_block > 0) std::printf("FLAT_BLOCK\t%d\n", g_flat_block);
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("DEVICE\t%s\t%d SMs\n", prop.name, prop.multiProcessorCount);
  {
    const size_t bytes = size_t(1) << 30;
    Buf a(bytes), b(bytes);
    fill<<<1024, 256>>>(static_cast<float*>(a.p), int64_t(bytes / 4), 5u);
    const double t = median_ms([&](int) { CK(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice)); }, 10);
    std::printf("COPY\t%.1f\n", 2.0 * double(bytes) / (t * 1e-3) / 1e9);  // GB/s, read + write
  }
  for (const Case& c : cases()) {
    if (!only.empty() && c.name.find(only) == std::string::npos) continue;
    if (!g_sweep.empty() && c.inner == 1) continue;  // the sweep times feature cases only
    for (DType dt : {DType::Float32, DType::BFloat16})
      if (only_dtype.empty() || only_dtype == dtype_name(dt)) run_case(c, dt, dir);
  }
  return 0;
}
