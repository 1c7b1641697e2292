// In-process pairs (session 43): the same softmax calls on 4 KiB-page buffers (MADV_NOHUGEPAGE)
// and on detail::host_allocate buffers (huge pages from 4 MiB), alternated pair by pair, so a
// shared host's drift falls on both sides; prints medians and the median per-pair ratio.
//   g++ -O2 -std=c++20 -fopenmp -I include -I . bench/cpu_pages_pairs.cpp BUILD/libsegred.a -o pairs
//   OMP_NUM_THREADS=2 OMP_PROC_BIND=true ./pairs [PAIRS]
#include <omp.h>
#include <sys/mman.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "segred/segred.h"
#include "src/core/host_memory.h"
using namespace segred;
static void* small_pages(size_t n) { void* p = std::aligned_alloc(4096, (n + 4095) / 4096 * 4096); madvise(p, (n + 4095) / 4096 * 4096, MADV_NOHUGEPAGE); return p; }
int main(int argc, char** argv) {
  struct C { Shape s; int64_t dim; DType t; } cases[] = {
    {{8192, 8192}, 0, DType::Float32}, {{32, 1000, 4096}, 1, DType::Float32}, {{262144, 128}, -1, DType::Float16},
    {{64, 256, 56, 56}, 1, DType::Float32}, {{16384, 4096}, -1, DType::Float32}};
  const int P = argc > 1 ? atoi(argv[1]) : 7;
  for (auto& c : cases) {
    size_t n = 1; for (auto v : c.s) n *= size_t(v);
    const size_t bytes = n * dtype_size(c.t);
    void* buf[2][4];
    for (int k = 0; k < 2; ++k) for (int a = 0; a < 4; ++a) {
      buf[k][a] = k ? detail::host_allocate(bytes) : small_pages(bytes);
      std::memset(buf[k][a], 0, bytes);
      if (c.t == DType::Float32) { float* f = (float*)buf[k][a]; for (size_t i = 0; i < n; ++i) f[i] = float((i * 2654435761u) % 1000) / 250.f - 2.f; }
    }
    double t[2][3][64];
    for (int p = 0; p < P; ++p) for (int kk = 0; kk < 2; ++kk) {
      const int k = (p & 1) ? 1 - kk : kk;
      TensorView x(buf[k][0], c.t, c.s), y(buf[k][1], c.t, c.s), g(buf[k][2], c.t, c.s), gi(buf[k][3], c.t, c.s);
      auto t0 = std::chrono::steady_clock::now();
      softmax_out(x, c.dim, y);
      auto t1 = std::chrono::steady_clock::now();
      softmax_backward_out(g, y, c.dim, gi);
      auto t2 = std::chrono::steady_clock::now();
#pragma omp parallel
      { int nt = omp_get_num_threads(), id = omp_get_thread_num(); size_t per = bytes / nt / 64 * 64, b = id * per, e = id == nt - 1 ? bytes : b + per;
        std::memcpy((char*)buf[k][3] + b, (char*)buf[k][0] + b, e - b); }
      auto t3 = std::chrono::steady_clock::now();
      t[k][0][p] = std::chrono::duration<double, std::milli>(t1 - t0).count();
      t[k][1][p] = std::chrono::duration<double, std::milli>(t2 - t1).count();
      t[k][2][p] = std::chrono::duration<double, std::milli>(t3 - t2).count();
    }
    auto med = [&](double* v) { std::vector<double> w(v, v + P); std::sort(w.begin(), w.end()); return w[P / 2]; };
    // per-pair ratio median
    auto rmed = [&](int j) { std::vector<double> w; for (int p = 0; p < P; ++p) w.push_back(t[1][j][p] / t[0][j][p]); std::sort(w.begin(), w.end()); return w[P / 2]; };
    std::printf("%-22s dim %2lld %s | fwd 4K %.2f huge %.2f ratio %.2f | bwd 4K %.2f huge %.2f ratio %.2f | memcpy 4K %.2f huge %.2f ratio %.2f\n",
      shape_string(c.s).c_str(), (long long)c.dim, c.t == DType::Float32 ? "f32" : "f16", med(t[0][0]), med(t[1][0]), rmed(0), med(t[0][1]), med(t[1][1]), rmed(1), med(t[0][2]), med(t[1][2]), rmed(2));
    std::fflush(stdout);
    for (int k = 0; k < 2; ++k) for (int a = 0; a < 4; ++a) std::free(buf[k][a]);
  }
}
