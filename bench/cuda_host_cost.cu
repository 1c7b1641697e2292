// Where a CUDA call's time before its kernel goes (issues #4, #5): the host side of
// one segred call, piece by piece, against a bare kernel launch.
//
// The benchmark tables time each call alone between two events on an idle GPU, so
// everything the host does between the first event and the launch reaching the GPU
// is in the number (bench/NOTES.md, session 14: [262144, 128] float16 forward 35.8 us
// back to back, 39-42 us alone, 32.5 us of kernel by ncu). This program measures:
//   host ns per operation: the driver queries a segred call makes (cudaGetDevice,
//     cudaPointerGetAttributes), the pure plan (make_softmax_problem + plan_softmax),
//     a bare launch of an empty kernel (<<<>>> and cudaLaunchKernelEx), and whole
//     segred calls on small shapes (calls back to back, the GPU idle enough that the
//     host is the limit; a sync every 200 calls keeps the launch queue short);
//   host us of one call with the GPU idle (sync before each): the time from the call's
//     entry to its return, what the table's method adds before the launch;
//   event us: one call alone between two events (the tables' method) and 20 back to
//     back / 20, for an empty kernel (the method's floor) and segred calls; the
//     [262144, 128] float16 forward both first and last in the process (session 18
//     timed it 0.0417 ms in the table and 0.0391 ms later in the same process).
// Usage: cuda_host_cost [N]. Prints a Markdown table.
// Built by tools/gpu-session (BENCHES containing "host") with nvcc against libsegred.a.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/cuda_bench_common.cuh"
#include "segred/segred.h"

using namespace segred;
using Clock = std::chrono::steady_clock;

__global__ void empty_kernel(int* p) {
  if (p && threadIdx.x == 1023) *p = 0;
}

// Median over 7 rounds of n calls of f(), host ns per call; sync_every > 0 syncs the
// device every that many calls (inside the timing: it is part of sustaining them).
template <class F> double host_ns(F&& f, int n, int sync_every) {
  for (int i = 0; i < 50; ++i) f();
  CK(cudaDeviceSynchronize());
  std::vector<double> t;
  for (int r = 0; r < 7; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) {
      f();
      if (sync_every > 0 && (i + 1) % sync_every == 0) CK(cudaDeviceSynchronize());
    }
    if (sync_every > 0) CK(cudaDeviceSynchronize());
    t.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / n);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Host us of one call with the device idle before it (median of n).
template <class F> double one_call_host_us(F&& f, int n) {
  for (int i = 0; i < 5; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < n; ++i) {
    CK(cudaDeviceSynchronize());
    const auto t0 = Clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  CK(cudaDeviceSynchronize());
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void row(const char* what, const char* unit, double v) { std::printf("| %s | %s | %.3f |\n", what, unit, v); }

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 2000;
  const DeviceRef gpu{Device::CUDA, 0};
  int* flag = nullptr;
  CK(cudaMalloc(&flag, 4));
  // Shapes: the small call of the softmax table, and the mid row whose gap is the fixed cost.
  Tensor xs = Tensor::empty({64, 128}, DType::Float16, gpu), ys = Tensor::empty({64, 128}, DType::Float16, gpu);
  Tensor gs = Tensor::empty({64, 128}, DType::Float16, gpu), gis = Tensor::empty({64, 128}, DType::Float16, gpu);
  Tensor xm = Tensor::empty({262144, 128}, DType::Float16, gpu), ym = Tensor::empty({262144, 128}, DType::Float16, gpu);
  init_kernel<<<1024, 256>>>(xs.data(), xs.numel(), 2, 5, -4.f, 4.f);
  init_kernel<<<1024, 256>>>(gs.data(), gs.numel(), 2, 7, -1.f, 1.f);
  init_kernel<<<4096, 256>>>(xm.data(), xm.numel(), 2, 9, -4.f, 4.f);
  // segment_reduce: 4096 float32 elements in 128 segments of 32, offsets on the device, unsafe.
  Tensor xr = Tensor::empty({4096}, DType::Float32, gpu), orr = Tensor::empty({128}, DType::Float32, gpu);
  init_kernel<<<64, 256>>>(xr.data(), xr.numel(), 0, 11, -1.f, 1.f);
  std::vector<int64_t> offs(129);
  for (int s = 0; s <= 128; ++s) offs[size_t(s)] = 32 * s;
  Tensor offd = Tensor::empty({129}, DType::Int64, gpu);
  CK(cudaMemcpy(offd.data(), offs.data(), offs.size() * 8, cudaMemcpyHostToDevice));
  Segments seg;
  seg.offsets = offd.view();
  seg.unsafe = true;
  CK(cudaDeviceSynchronize());

  auto mid_fwd = [&] { softmax_out(xm, -1, ym); };
  auto first_single = median_ms(mid_fwd, 25);
  auto first_b2b = batch_ms(mid_fwd, 15, 20);

  std::printf("| what | unit | value |\n|---|---|---|\n");
  int dev = 0;
  row("cudaGetDevice", "host ns / op", host_ns([&] { cudaGetDevice(&dev); }, n, 0));
  cudaPointerAttributes attr{};
  row("cudaPointerGetAttributes (device pointer)", "host ns / op",
      host_ns([&] { cudaPointerGetAttributes(&attr, xm.data()); }, n, 0));
  row("make_softmax_problem + plan_softmax, [262144, 128] float16 CUDA", "host ns / op", host_ns([&] {
        const SoftmaxProblem p = make_softmax_problem({262144, 128}, -1, DType::Float16, Direction::Fwd, false,
                                                      Backend::CUDA);
        const Plan pl = plan_softmax(p);
        if (pl.path.empty()) std::abort();
      }, n, 0));
  row("empty kernel <<<2, 256>>>", "host ns / launch", host_ns([&] { empty_kernel<<<2, 256>>>(flag); }, n, 200));
  row("empty kernel cudaLaunchKernelEx", "host ns / launch", host_ns([&] {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(2);
        cfg.blockDim = dim3(256);
        CK(cudaLaunchKernelEx(&cfg, empty_kernel, flag));
      }, n, 200));
  row("softmax_out [64, 128] float16", "host ns / call", host_ns([&] { softmax_out(xs, -1, ys); }, n, 200));
  row("softmax_backward_out [64, 128] float16", "host ns / call",
      host_ns([&] { softmax_backward_out(gs, ys, -1, gis); }, n, 200));
  row("segment_reduce_out sum, 128 x 32 float32, offsets, unsafe", "host ns / call",
      host_ns([&] { segment_reduce_out(xr, Reduce::Sum, seg, orr); }, n, 200));
  row("empty kernel, one launch, GPU idle", "host us / call", one_call_host_us([&] { empty_kernel<<<2, 256>>>(flag); }, 200));
  row("softmax_out [64, 128] float16, GPU idle", "host us / call", one_call_host_us([&] { softmax_out(xs, -1, ys); }, 200));
  row("softmax_out [262144, 128] float16, GPU idle", "host us / call", one_call_host_us(mid_fwd, 200));
  row("segment_reduce_out sum 128 x 32, GPU idle", "host us / call",
      one_call_host_us([&] { segment_reduce_out(xr, Reduce::Sum, seg, orr); }, 200));
  row("empty kernel, events around one launch", "event us", 1e3 * median_ms([&] { empty_kernel<<<2, 256>>>(flag); }, 101));
  row("empty kernel, 20 back to back / 20", "event us",
      1e3 * batch_ms([&] { empty_kernel<<<2, 256>>>(flag); }, 25, 20));
  row("softmax_out [64, 128] float16, events around one call", "event us",
      1e3 * median_ms([&] { softmax_out(xs, -1, ys); }, 101));
  row("softmax_out [64, 128] float16, 20 back to back / 20", "event us",
      1e3 * batch_ms([&] { softmax_out(xs, -1, ys); }, 25, 20));
  row("segment_reduce_out sum 128 x 32, events around one call", "event us",
      1e3 * median_ms([&] { segment_reduce_out(xr, Reduce::Sum, seg, orr); }, 101));
  row("softmax_out [262144, 128] float16, one call (first in the process)", "event us", 1e3 * first_single);
  row("softmax_out [262144, 128] float16, 20 back to back / 20 (first)", "event us", 1e3 * first_b2b);
  row("softmax_out [262144, 128] float16, one call (last in the process)", "event us", 1e3 * median_ms(mid_fwd, 25));
  row("softmax_out [262144, 128] float16, 20 back to back / 20 (last)", "event us", 1e3 * batch_ms(mid_fwd, 15, 20));
  CK(cudaFree(flag));
  return 0;
}
