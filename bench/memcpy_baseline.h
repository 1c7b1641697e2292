// The CPU benchmarks' bandwidth baseline: a parallel memcpy split across the
// OpenMP threads the way the kernels split their work, timed on buffers that are
// allocated and first-touched once, outside any timing.
#pragma once
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "src/core/host_memory.h"

namespace segred::bench {

inline void par_memcpy(char* dst, const char* src, size_t n) {
#pragma omp parallel
  {
    const size_t nt = size_t(omp_get_num_threads()), t = size_t(omp_get_thread_num());
    const size_t per = (n + nt - 1) / nt / 64 * 64 + 64;
    const size_t b = std::min(n, t * per), e = std::min(n, b + per);
    if (e > b) std::memcpy(dst + b, src + b, e - b);
  }
}

// Two buffers of at least `half` bytes each (source, destination), allocated and
// first-touched once per size increase, outside any timing.
struct CopyBuffers {
  char* src;
  char* dst;
};
inline CopyBuffers copy_buffers(size_t half) {
  static size_t cap = 0;
  struct Free {
    void operator()(char* p) const { detail::host_free(p); }
  };
  static std::unique_ptr<char[], Free> a, b;
  if (half > cap) {  // the Tensor's allocator: the same pages as the op's tensors
    a.reset(static_cast<char*>(detail::host_allocate(half)));
    b.reset(static_cast<char*>(detail::host_allocate(half)));
    cap = half;
    std::memset(a.get(), 1, half);
    std::memset(b.get(), 2, half);
  }
  return {a.get(), b.get()};
}

// Median seconds of 9 memcpys that each move `bytes` (bytes/2 read, bytes/2 written).
//
// at_least: copy at least this many bytes per memcpy (0: bytes/2), and scale the
// time to `bytes` (bandwidth measured on the larger copy). The segment_reduce
// benchmark passes the size of its data tensor, so that a bf16 case, whose bytes/2
// (half the bytes the op moves) is ~34 MiB, does not measure a copy that the
// benchmark host's large LLC (a VM reporting 300 MiB) partly keeps cached across
// repetitions while the op streams its output to memory: every case's copy then
// reads and writes at least a data tensor's size (the moved bytes it is scaled to
// stay the op's bytes; cases that move more than twice the data, the max/min
// backwards, are unchanged).
inline double memcpy_seconds(size_t bytes, size_t at_least = 0) {
  const size_t half = std::max(bytes / 2, at_least);
  const CopyBuffers buf = copy_buffers(half);
  std::vector<double> t;
  par_memcpy(buf.dst, buf.src, half);  // warm-up
  for (int i = 0; i < 9; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    par_memcpy(buf.dst, buf.src, half);
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2] * (double(bytes) / double(2 * half));
}

}  // namespace segred::bench
