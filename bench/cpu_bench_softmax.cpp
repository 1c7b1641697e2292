// CPU benchmark of the softmax family (shared/PERFORMANCE.md, softmax rows),
// scaled to a small machine (2 cores, 24 GB): the PERFORMANCE.md shapes where
// they fit, [8, 4, 2^22] instead of [8, 4, 2^24], plus the added rows ([8192, 8192]
// over dim 0, few long rows [64, 262144], small calls [64, 128] and [4, 1000]).
//
// Bytes counted (PERFORMANCE.md): fwd = 2 x tensor (x read, y written); bwd =
// 3 x tensor (g and y read, grad_input written). bytes_per_second comes from
// SetBytesProcessed; the counter pct_memcpy is 100 * (time of a parallel memcpy
// moving the same bytes: bytes/2 read + bytes/2 written, same thread count) /
// (time of the call); GBps and memcpy_GBps are the two rates. glibc's memcpy
// takes non-temporal stores only above a size threshold, so its rate at the
// call's size moves with the size (on the benchmark host, 2 threads: 19-21 GB/s
// for 64-256 MiB copies, 37 GB/s for 1 GiB): copy_GBps is the best of it and of
// a 1 GiB copy measured once per process, and pct_copy = 100 * GBps /
// copy_GBps, the steadier measure against the machine's copy bandwidth. Run with
// OMP_NUM_THREADS set to the cores to use; inputs are random (never zeros) and,
// except the small calls, larger than the last-level cache in total.
// Names: softmax/<shape>/dim<d>/<dtype>/<fwd|bwd>[/log]/<path kind>.
// Environment: SEGRED_BENCH_SOFTMAX_STREAM=0|1|2 sets the output store mode
// (cpu::softmax_stream_mode: 0 the plan's rule, 1 never stream, 2 always) for an
// A/B of one binary (bench/cpu_ab.py with a wrapper script per setting);
// SEGRED_BENCH_SOFTMAX_L2=BYTES the L2 size the CPU plan assumes
// (cpu::softmax_l2_override; its tile rules differ below and above 1 MiB);
// SEGRED_BENCH_SOFTMAX_PREFETCH=BYTES the long-row prefetch distance
// (cpu::softmax_long_row_prefetch; 0: off); SEGRED_BENCH_SOFTMAX_OVERLAP=0|1 the
// last-dim and spatial forwards' passes in turn or overlapped
// (cpu::softmax_lastdim_overlap, cpu::softmax_spatial_overlap).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/fill_random.h"
#include "bench/memcpy_baseline.h"
#include "segred/segred.h"
#include "src/cpu/softmax_kernels.h"

namespace {

using namespace segred;
using Clock = std::chrono::steady_clock;

using bench::memcpy_seconds;  // bench/memcpy_baseline.h

// Rate (bytes read + written per second) of the best memcpy: 1 GiB copied.
double peak_copy_GBps() {
  static const double rate = [] {
    const size_t bytes = size_t(2) << 30;
    return double(bytes) / memcpy_seconds(bytes) / 1e9;
  }();
  return rate;
}

struct Case {
  std::string name;
  Shape shape;
  int64_t dim;
  DType dtype;
  bool backward;
  bool log;
};

struct Data {
  std::string key;
  Tensor x, y, g, gi;
  int64_t bytes = 0;
  double memcpy_s = 0;
};
std::unique_ptr<Data>& cache() {
  static std::unique_ptr<Data> d;
  return d;
}

Data& data_for(const Case& c) {
  auto& d = cache();
  const std::string key = shape_string(c.shape) + std::to_string(int(c.dtype)) + std::to_string(c.dim);
  if (!d || d->key != key) {
    d.reset();
    d = std::make_unique<Data>();
    d->key = key;
    d->x = Tensor::empty(c.shape, c.dtype);
    bench::fill_random(d->x, 1234, -8.0f, 8.0f);
    d->y = Tensor::empty(c.shape, c.dtype);
    d->g = Tensor::empty(c.shape, c.dtype);
    bench::fill_random(d->g, 99, -2.0f, 2.0f);
    d->gi = Tensor::empty(c.shape, c.dtype);
    std::memset(d->gi.data(), 0, size_t(d->gi.numel()) * size_t(dtype_size(c.dtype)));  // first touch
  }
  // y of this op (first touch of y too).
  c.log ? log_softmax_out(d->x, c.dim, d->y) : softmax_out(d->x, c.dim, d->y);
  const int64_t tensor_b = d->x.numel() * dtype_size(c.dtype);
  d->bytes = (c.backward ? 3 : 2) * tensor_b;
  d->memcpy_s = memcpy_seconds(size_t(d->bytes));
  return *d;
}

void run_case(benchmark::State& state, const Case& c) {
  Data& d = data_for(c);
  std::vector<double> ts;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    if (c.backward)
      c.log ? log_softmax_backward_out(d.g, d.y, c.dim, d.gi) : softmax_backward_out(d.g, d.y, c.dim, d.gi);
    else
      c.log ? log_softmax_out(d.x, c.dim, d.y) : softmax_out(d.x, c.dim, d.y);
    ts.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    benchmark::ClobberMemory();
  }
  std::sort(ts.begin(), ts.end());
  const double med = ts[ts.size() / 2];
  state.SetBytesProcessed(int64_t(state.iterations()) * d.bytes);
  state.counters["pct_memcpy"] = 100.0 * d.memcpy_s / med;
  state.counters["memcpy_GBps"] = double(d.bytes) / d.memcpy_s / 1e9;
  state.counters["GBps"] = double(d.bytes) / med / 1e9;
  const double copy = std::max(peak_copy_GBps(), double(d.bytes) / d.memcpy_s / 1e9);
  state.counters["copy_GBps"] = copy;
  state.counters["pct_copy"] = 100.0 * double(d.bytes) / med / 1e9 / copy;
  state.counters["median_ms"] = med * 1e3;
}

int register_all() {
  if (const char* m = std::getenv("SEGRED_BENCH_SOFTMAX_STREAM")) cpu::softmax_stream_mode() = std::atoi(m);
  if (const char* l2 = std::getenv("SEGRED_BENCH_SOFTMAX_L2")) cpu::softmax_l2_override() = std::atoll(l2);
  if (const char* pf = std::getenv("SEGRED_BENCH_SOFTMAX_PREFETCH")) cpu::softmax_long_row_prefetch() = std::atoll(pf);
  if (const char* ov = std::getenv("SEGRED_BENCH_SOFTMAX_OVERLAP")) {
    cpu::softmax_lastdim_overlap() = std::atoi(ov);
    cpu::softmax_spatial_overlap() = std::atoi(ov);
  }
  struct Row {
    Shape shape;
    int64_t dim;
    std::vector<DType> dtypes;
    bool with_log;
  };
  const std::vector<Row> rows = {
      {{16384, 4096}, -1, {DType::Float16, DType::Float32}, true},
      {{262144, 128}, -1, {DType::Float16}, false},
      {{2048, 65536}, -1, {DType::Float32}, false},
      {{64, 262144}, -1, {DType::Float32}, false},
      {{64, 256, 56, 56}, 1, {DType::Float16, DType::Float32}, true},
      {{32, 1000, 4096}, 1, {DType::Float32}, false},
      {{8, 4, int64_t(1) << 22}, 1, {DType::Float32}, false},
      {{8192, 8192}, 0, {DType::Float32}, false},
      {{64, 128}, -1, {DType::Float32}, false},
      {{4, 1000}, -1, {DType::Float32}, false},
  };
  for (const Row& r : rows)
    for (DType t : r.dtypes)
      for (bool log : r.with_log ? std::vector<bool>{false, true} : std::vector<bool>{false})
        for (bool bwd : {false, true}) {
          std::string shape = shape_string(r.shape);
          shape.erase(std::remove(shape.begin(), shape.end(), ' '), shape.end());
          const SoftmaxProblem p = make_softmax_problem(r.shape, r.dim, t);
          const Case c{"softmax/" + shape + "/dim" + std::to_string(r.dim) + "/" + std::string(dtype_name(t)) + "/" +
                           (bwd ? "bwd" : "fwd") + (log ? "/log" : "") + (p.inner == 1 ? "/lastdim" : "/spatial"),
                       r.shape, r.dim, t, bwd, log};
          const bool small = numel(r.shape) < (1 << 20);
          benchmark::RegisterBenchmark(c.name.c_str(), [c](benchmark::State& s) { run_case(s, c); })
              ->Unit(small ? benchmark::kMicrosecond : benchmark::kMillisecond)
              ->UseRealTime()
              ->MinTime(small ? 0.2 : 0.5);
        }
  return 0;
}
const int registered = register_all();

}  // namespace
