// CUDA softmax benchmark (shared/PERFORMANCE.md): every softmax row of the matrix,
// forward and backward, float32/float16/bfloat16, segred's CUDA kernels timed with
// CUDA events (warm-up, median of repeats, inputs > L2 where the case is large),
// against a device-to-device copy measured in the same run, and cuDNN's softmax
// on the same buffers when libcudnn.so.9 can be loaded (bench/cudnn_softmax.h).
// Usage: cuda_softmax_bench [REPS [CUDNN_LIB_DIR...]]. Environment (session 41, for
// tools/gpu-ab's AB_BENCH=softmax): SEGRED_SOFTMAX_BENCH_ONLY=<substring> runs only
// the cases whose name contains it (several separated by ';'), SEGRED_SOFTMAX_BENCH_DTYPES=
// float16,... only those dtypes, SEGRED_SOFTMAX_BENCH_NO_CUDNN=1 skips cuDNN. Prints CSV:
//   copy|<GB/s>
//   case|<case>|<dtype>|<dir>|<path grid block>|<ms>|<bytes>|<% of copy>
//   cudnn_status|<available ... | unavailable (reason)>
//   cudnn|<case>|<dtype>|<dir>|<ms or ->|<% of copy or the cuDNN error>|<max |cuDNN - segred|>
//   floor|<case>|<dtype>|<dir>|<ms per call, 20 back to back>|<ms of a copy of the same bytes, alone>
// bench/cuda_softmax_bench.py runs torch on the same cases and joins the tables.
// Built by tools/gpu-check-softmax with nvcc against libsegred.a (and -ldl).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/cudnn_softmax.h"
#include "bench/cuda_bench_common.cuh"
#include "segred/segred.h"

using namespace segred;

struct Case {
  const char* name;
  Shape shape;
  int64_t dim;
};

// cuDNN on the buffers segred just used: forward x -> scratch, backward (y, g) ->
// scratch, each checked against segred's result (y, gi) and timed alike.
void bench_cudnn(cudnn_bench::Softmax& dnn, const Case& c, const char* dtname, int code, const Tensor& x,
                 const Tensor& y, const Tensor& g, const Tensor& gi, Tensor& scratch, double fbytes, double bbytes,
                 double copy_gbs, int reps, unsigned* dmax) {
  const SoftmaxProblem p = make_softmax_problem(c.shape, c.dim, x.dtype());
  const auto dt = code == 0 ? cudnn_bench::kFloat : code == 2 ? cudnn_bench::kHalf : cudnn_bench::kBFloat16;
  const int64_t n = x.numel();
  for (int fwd = 1; fwd >= 0; --fwd) {
    cudnn_bench::Status st = dnn.shape(dt, p.outer, p.dim_size, p.inner);
    auto call = [&] { return fwd ? dnn.forward(x.data(), scratch.data()) : dnn.backward(y.data(), g.data(), scratch.data()); };
    if (st == 0) st = call();
    if (st != 0) {
      std::printf("cudnn|%s|%s|%s|-|%s|-\n", c.name, dtname, fwd ? "fwd" : "bwd", dnn.error(st));
      continue;
    }
    CK(cudaMemset(dmax, 0, sizeof(unsigned)));
    maxdiff_kernel<<<1024, 256>>>(scratch.data(), fwd ? y.data() : gi.data(), n, code, dmax);
    unsigned bits = 0;
    CK(cudaMemcpy(&bits, dmax, sizeof(unsigned), cudaMemcpyDeviceToHost));
    float diff;
    std::memcpy(&diff, &bits, sizeof diff);
    const double ms = median_ms([&] { call(); }, reps);
    const double pct = 100.0 * ((fwd ? fbytes : bbytes) / (copy_gbs * 1e9)) / (ms * 1e-3);
    std::printf("cudnn|%s|%s|%s|%.4f|%.1f|%.3g\n", c.name, dtname, fwd ? "fwd" : "bwd", ms, pct, double(diff));
  }
  std::fflush(stdout);
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 25;
  std::vector<std::string> cudnn_dirs;
  for (int i = 2; i < argc; ++i) cudnn_dirs.push_back(argv[i]);
  // Copy bandwidth: 2 GiB device-to-device, bytes read + written.
  const size_t cb = size_t(1) << 31;
  void *c0, *c1;
  CK(cudaMalloc(&c0, cb));
  CK(cudaMalloc(&c1, cb));
  CK(cudaMemset(c0, 1, cb));
  const double copy_ms = median_ms([&] { CK(cudaMemcpyAsync(c1, c0, cb, cudaMemcpyDeviceToDevice)); }, reps);
  const double copy_gbs = 2.0 * double(cb) / (copy_ms * 1e-3) / 1e9;
  CK(cudaFree(c0));
  CK(cudaFree(c1));
  std::printf("copy|%.1f\n", copy_gbs);
  const char* only = std::getenv("SEGRED_SOFTMAX_BENCH_ONLY");
  const char* dtypes = std::getenv("SEGRED_SOFTMAX_BENCH_DTYPES");
  const char* no_cudnn = std::getenv("SEGRED_SOFTMAX_BENCH_NO_CUDNN");
  const bool skip_cudnn = no_cudnn && *no_cudnn && std::strcmp(no_cudnn, "0") != 0;
  cudnn_bench::Softmax dnn(cudnn_dirs);
  if (skip_cudnn) std::printf("cudnn_status|unavailable (SEGRED_SOFTMAX_BENCH_NO_CUDNN)\n");
  else if (dnn.ok()) std::printf("cudnn_status|available (cuDNN %zu, legacy cudnnSoftmaxForward/Backward)\n", dnn.version());
  else std::printf("cudnn_status|unavailable (%s)\n", dnn.why().c_str());
  unsigned* dmax = nullptr;
  CK(cudaMalloc(&dmax, sizeof(unsigned)));

  const std::vector<Case> cases = {
      {"[16384, 4096] dim -1", {16384, 4096}, -1},
      {"[262144, 128] dim -1", {262144, 128}, -1},
      {"[2048, 65536] dim -1", {2048, 65536}, -1},
      {"[64, 262144] dim -1", {64, 262144}, -1},
      {"[64, 256, 56, 56] dim 1", {64, 256, 56, 56}, 1},
      {"[32, 1000, 4096] dim 1", {32, 1000, 4096}, 1},
      {"[8, 4, 2^24] dim 1", {8, 4, int64_t(1) << 24}, 1},
      {"[8192, 8192] dim 0", {8192, 8192}, 0},
      {"[64, 128] dim -1 (small)", {64, 128}, -1},
      {"[4, 1000] dim -1 (small)", {4, 1000}, -1},
  };
  const DeviceRef gpu{Device::CUDA, 0};
  struct DT {
    DType t;
    const char* name;
    int code;
  };
  for (const Case& c : cases)
    for (DT dt : {DT{DType::Float32, "float32", 0}, DT{DType::Float16, "float16", 2}, DT{DType::BFloat16, "bfloat16", 3}}) {
      if (!listed(only, c.name) || !listed(dtypes, dt.name)) continue;
      const int64_t n = numel(c.shape);
      const int64_t es = dtype_size(dt.t);
      Tensor x = Tensor::empty(c.shape, dt.t, gpu), y = Tensor::empty(c.shape, dt.t, gpu);
      Tensor g = Tensor::empty(c.shape, dt.t, gpu), gi = Tensor::empty(c.shape, dt.t, gpu);
      init_kernel<<<4096, 256>>>(x.data(), n, dt.code, 17, -4.f, 4.f);
      init_kernel<<<4096, 256>>>(g.data(), n, dt.code, 91, -1.f, 1.f);
      CK(cudaGetLastError());
      softmax_out(x, c.dim, y);
      CK(cudaDeviceSynchronize());
      std::string path_f, path_b;
      {
        TraceSession t;
        softmax_out(x, c.dim, y);
        softmax_backward_out(g, y, c.dim, gi);
        CK(cudaDeviceSynchronize());
        const auto r = t.records();
        if (r.size() == 2) {
          path_f = r[0].path + " grid " + std::to_string(r[0].grid[0]) + " block " + std::to_string(r[0].block[0]);
          path_b = r[1].path + " grid " + std::to_string(r[1].grid[0]) + " block " + std::to_string(r[1].block[0]);
        }
      }
      const double fms = median_ms([&] { softmax_out(x, c.dim, y); }, reps);
      const double bms = median_ms([&] { softmax_backward_out(g, y, c.dim, gi); }, reps);
      const double fb = 2.0 * double(n * es), bb = 3.0 * double(n * es);
      const double fpct = 100.0 * (fb / (copy_gbs * 1e9)) / (fms * 1e-3);
      const double bpct = 100.0 * (bb / (copy_gbs * 1e9)) / (bms * 1e-3);
      std::printf("case|%s|%s|fwd|%s|%.4f|%.0f|%.1f\n", c.name, dt.name, path_f.c_str(), fms, fb, fpct);
      std::printf("case|%s|%s|bwd|%s|%.4f|%.0f|%.1f\n", c.name, dt.name, path_b.c_str(), bms, bb, bpct);
      {
        // Where a call's time goes (session 19): the same call 20 times back to back
        // between two events, per call (the kernel's steady-state rate: the host's
        // launch of one call overlaps the previous call's kernel), and a device copy
        // of the same bytes (half read, half written) timed like the table, alone
        // between two events: the floor of the table's method at this size, launch
        // latency included (bench/cuda_host_cost.cu measures that latency).
        const double f20 = batch_ms([&] { softmax_out(x, c.dim, y); }, reps, 20);
        const double b20 = batch_ms([&] { softmax_backward_out(g, y, c.dim, gi); }, reps, 20);
        const size_t half_b = size_t(bb / 2);
        void *s0 = nullptr, *s1 = nullptr;
        CK(cudaMalloc(&s0, half_b));
        CK(cudaMalloc(&s1, half_b));
        CK(cudaMemset(s0, 1, half_b));
        const double cf = median_ms([&] { CK(cudaMemcpyAsync(s1, s0, size_t(fb / 2), cudaMemcpyDeviceToDevice)); }, reps);
        const double cb = median_ms([&] { CK(cudaMemcpyAsync(s1, s0, half_b, cudaMemcpyDeviceToDevice)); }, reps);
        CK(cudaFree(s0));
        CK(cudaFree(s1));
        std::printf("floor|%s|%s|fwd|%.4f|%.4f\n", c.name, dt.name, f20, cf);
        std::printf("floor|%s|%s|bwd|%.4f|%.4f\n", c.name, dt.name, b20, cb);
      }
      std::fflush(stdout);
      if (!skip_cudnn && dnn.ok()) {
        Tensor scratch = Tensor::empty(c.shape, dt.t, gpu);
        bench_cudnn(dnn, c, dt.name, dt.code, x, y, g, gi, scratch, fb, bb, copy_gbs, reps, dmax);
      }
    }
  return 0;
}
