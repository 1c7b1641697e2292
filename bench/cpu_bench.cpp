// CPU benchmark of segment_reduce forward and backward (shared/PERFORMANCE.md),
// scaled to a small machine: the segment rows of the PERFORMANCE.md matrix at
// 2^25 elements, fp32 and bf16, plus a parallel memcpy of the same bytes.
//
// Bytes counted (PERFORMANCE.md): fwd = data + output + metadata; bwd = grad +
// output + data + grad_input + metadata for max/min (and prod), grad + grad_input
// + metadata for sum/mean (they read no data). bytes_per_second comes from
// SetBytesProcessed; the counter pct_memcpy is 100 * (time of a memcpy moving the
// same bytes: bytes/2 read + bytes/2 written, same thread count; measured on a
// copy of at least the data tensor's size, bench/memcpy_baseline.h) / (time of
// the call). Run with OMP_NUM_THREADS set to the cores to use; inputs are random,
// never zeros, and larger than the last-level cache.
//
// Environment: SEGRED_BENCH_LOG2 (default 25) sets the element count 2^n;
// SEGRED_BENCH_PREFETCH sets the short-segment kernels' prefetch distance in bytes
// (cpu::segment_prefetch_bytes, 0 = off) for an A/B of one binary (bench/cpu_ab.py
// with a wrapper script per setting).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/memcpy_baseline.h"
#include "segred/segred.h"
#include "src/cpu/kernels.h"

namespace {

using namespace segred;
using Clock = std::chrono::steady_clock;

int64_t log2_elems() {
  const char* s = std::getenv("SEGRED_BENCH_LOG2");
  return s ? std::atoll(s) : 25;
}

using bench::memcpy_seconds;  // bench/memcpy_baseline.h

enum class Dist { Fixed, Exponential, OneHuge };

struct Case {
  std::string name;
  DType dtype;
  Reduce reduce;
  bool backward;
  int64_t rows;    // L (elements of the segment axis)
  int64_t inner;   // features
  Dist dist;
  int64_t param;   // Fixed: segment length; Exponential: mean; OneHuge: huge length
};

// The inputs of one case, kept across Google Benchmark's repeated invocations.
struct Data {
  std::string key;
  Tensor x, lengths, out, grad, gi;
  int64_t bytes = 0;
  double memcpy_s = 0;
};
std::unique_ptr<Data>& cache() {
  static std::unique_ptr<Data> d;
  return d;
}

void fill_random(const Tensor& t, uint64_t seed) {
  const int64_t n = t.numel();
#pragma omp parallel
  {
    std::mt19937_64 rng(seed + uint64_t(omp_get_thread_num()) * 7919);
    std::uniform_real_distribution<float> u(0.5f, 1.5f);
    std::bernoulli_distribution sign(0.5);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const float v = sign(rng) ? u(rng) : -u(rng);
      if (t.dtype() == DType::Float32) t.ptr<float>()[i] = v;
      else t.ptr<bfloat16_t>()[i] = to_bfloat16(v);
    }
  }
}

std::vector<int64_t> make_lengths(const Case& c) {
  std::vector<int64_t> v;
  std::mt19937_64 rng(42);
  if (c.dist == Dist::Fixed) {
    v.assign(size_t(c.rows / c.param), c.param);
  } else if (c.dist == Dist::Exponential) {
    std::exponential_distribution<double> e(1.0 / double(c.param));
    int64_t left = c.rows;
    while (left > 0) {
      const int64_t n = std::min<int64_t>(left, int64_t(std::llround(e(rng))));
      v.push_back(n);
      left -= n;
    }
  } else {  // one huge segment in the middle of segments of 1
    const int64_t ones = c.rows - c.param;
    v.assign(size_t(ones / 2), 1);
    v.push_back(c.param);
    v.insert(v.end(), size_t(ones - ones / 2), 1);
  }
  return v;
}

Data& data_for(const Case& c) {
  auto& d = cache();
  const std::string key = c.name;
  if (d && d->key == key) return *d;
  d.reset();  // free the previous case first
  d = std::make_unique<Data>();
  d->key = key;
  const Shape shape = c.inner == 1 ? Shape{c.rows} : Shape{c.rows, c.inner};
  d->x = Tensor::empty(shape, c.dtype);
  fill_random(d->x, 1234);
  const std::vector<int64_t> lv = make_lengths(c);
  const int64_t S = int64_t(lv.size());
  d->lengths = Tensor::empty({S}, DType::Int64);
  std::copy(lv.begin(), lv.end(), d->lengths.ptr<int64_t>());
  Segments seg;
  seg.lengths = d->lengths.view();
  d->out = segment_reduce(d->x, c.reduce, seg);
  const int64_t es = dtype_size(c.dtype);
  const int64_t data_b = d->x.numel() * es, out_b = d->out.numel() * es, meta_b = S * 8;
  if (c.backward) {
    d->grad = Tensor::empty(d->out.sizes(), c.dtype);
    fill_random(d->grad, 99);
    d->gi = Tensor::empty(shape, c.dtype);
    segment_reduce_backward_out(d->grad, d->out, d->x, c.reduce, seg, Tie::Split, d->gi);  // first touch
    const bool reads_data = c.reduce != Reduce::Sum && c.reduce != Reduce::Mean;
    d->bytes = out_b /*grad*/ + data_b /*grad_input*/ + meta_b + (reads_data ? out_b + data_b : 0);
  } else {
    d->bytes = data_b + out_b + meta_b;
  }
  d->memcpy_s = memcpy_seconds(size_t(d->bytes), size_t(data_b));  // a copy of at least the data's size
  return *d;
}

void run_case(benchmark::State& state, const Case& c) {
  Data& d = data_for(c);
  Segments seg;
  seg.lengths = d.lengths.view();
  double total = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    if (c.backward)
      segment_reduce_backward_out(d.grad, d.out, d.x, c.reduce, seg, Tie::Split, d.gi);
    else
      segment_reduce_out(d.x, c.reduce, seg, d.out);
    total += std::chrono::duration<double>(Clock::now() - t0).count();
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * d.bytes);
  const double per = total / double(state.iterations());
  state.counters["pct_memcpy"] = 100.0 * d.memcpy_s / per;
  state.counters["memcpy_GBps"] = double(d.bytes) / d.memcpy_s / 1e9;
  state.counters["GBps"] = double(d.bytes) / per / 1e9;
}

void run_memcpy(benchmark::State& state) {
  const size_t half = size_t(state.range(0));
  const bench::CopyBuffers cb = bench::copy_buffers(half);
  for (auto _ : state) {
    bench::par_memcpy(cb.dst, cb.src, half);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(2 * half));
}

int register_all() {
  if (const char* pf = std::getenv("SEGRED_BENCH_PREFETCH")) cpu::segment_prefetch_bytes() = std::atoll(pf);
  const int64_t N = int64_t(1) << log2_elems();
  std::vector<Case> cases;
  for (DType t : {DType::Float32, DType::BFloat16}) {
    const std::string tn = t == DType::Float32 ? "fp32" : "bf16";
    for (bool bwd : {false, true}) {
      const std::string dn = bwd ? "bwd" : "fwd";
      auto add = [&](const std::string& what, Reduce r, int64_t rows, int64_t inner, Dist dist, int64_t param) {
        cases.push_back({what + "/" + std::string(to_string(r)) + "/" + tn + "/" + dn, t, r, bwd, rows, inner, dist,
                         param});
      };
      add("1d_seg32", Reduce::Sum, N, 1, Dist::Fixed, 32);
      add("1d_seg32", Reduce::Max, N, 1, Dist::Fixed, 32);
      add("1d_64_long", Reduce::Sum, N, 1, Dist::Fixed, N / 64);
      add("1d_64_long", Reduce::Max, N, 1, Dist::Fixed, N / 64);
      add("1d_exp40", Reduce::Sum, N, 1, Dist::Exponential, 40);
      // PERFORMANCE.md: one segment of 2^26 beside 1M of 1, i.e. 1/64 of the elements are singles.
      add("1d_huge_plus_ones", Reduce::Sum, N, 1, Dist::OneHuge, N - N / 64);
      add("2d_f128_seg16", Reduce::Sum, N / 128, 128, Dist::Fixed, 16);
      add("2d_f128_seg16", Reduce::Max, N / 128, 128, Dist::Fixed, 16);
      add("2d_f128_exp40", Reduce::Max, N / 128, 128, Dist::Exponential, 40);
      for (int64_t f : {4, 16, 64}) add("2d_f" + std::to_string(f) + "_seg16", Reduce::Sum, N / f, f, Dist::Fixed, 16);
    }
  }
  for (const Case& c : cases)
    benchmark::RegisterBenchmark(("segment_reduce/" + c.name).c_str(), [c](benchmark::State& s) { run_case(s, c); })
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MinTime(0.3);
  for (int64_t half : {N * 2, N * 4})  // bf16 data and fp32 data sizes, copied
    benchmark::RegisterBenchmark("memcpy", run_memcpy)
        ->Arg(half)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MinTime(0.3);
  return 0;
}
const int registered = register_all();

}  // namespace
