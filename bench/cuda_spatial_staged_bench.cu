// Spatial softmax, staged (session 5) against the register path on the spatial
// benchmark shapes: each case timed with the staged geometry at several per-block
// budgets and with staging off (detail::softmax_test_caps().stage_bytes = 0: the
// v5 register geometry), the outputs compared (max |staged - register|).
// Build: nvcc -O3 -std=c++20 -arch=sm_90 --expt-relaxed-constexpr -I include -I . \
//   bench/cuda_spatial_staged_bench.cu BUILD/libsegred.a -o spatial_staged_bench
// Usage: spatial_staged_bench [REPS [all|s14|s21|s22|s22rows]]. Prints one line per (case, dtype, dir, mode);
// the backward's st is its staged form (0 register, 1 staged, 2 y alone: SoftmaxGeometry::staged_form).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/cuda_bench_common.cuh"
#include "segred/segred.h"
#include "src/core/softmax_geometry.h"

using namespace segred;

float maxdiff(const Tensor& a, const Tensor& b, int code, unsigned* dmax) {
  CK(cudaMemset(dmax, 0, sizeof(unsigned)));
  maxdiff_kernel<<<1024, 256>>>(a.data(), b.data(), a.numel(), code, dmax);
  unsigned bits = 0;
  CK(cudaMemcpy(&bits, dmax, sizeof(unsigned), cudaMemcpyDeviceToHost));
  float d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 15;
  const size_t cb = size_t(1) << 31;
  void *c0, *c1;
  CK(cudaMalloc(&c0, cb));
  CK(cudaMalloc(&c1, cb));
  CK(cudaMemset(c0, 1, cb));
  const double copy_ms = median_ms([&] { CK(cudaMemcpyAsync(c1, c0, cb, cudaMemcpyDeviceToDevice)); }, reps);
  const double copy_gbs = 2.0 * double(cb) / (copy_ms * 1e-3) / 1e9;
  CK(cudaFree(c0));
  CK(cudaFree(c1));
  std::printf("copy %.1f GB/s\n", copy_gbs);
  unsigned* dmax = nullptr;
  CK(cudaMalloc(&dmax, sizeof(unsigned)));
  struct Case {
    const char* name;
    Shape shape;
    int64_t dim;
  };
  std::vector<Case> cases = {
      {"[32, 1000, 4096] dim 1", {32, 1000, 4096}, 1},
      {"[8192, 8192] dim 0", {8192, 8192}, 0},
      {"[64, 256, 56, 56] dim 1", {64, 256, 56, 56}, 1},
      {"[16, 4000, 4096] dim 1", {16, 4000, 4096}, 1},
      {"[8, 4, 2^24] dim 1", {8, 4, int64_t(1) << 24}, 1},
      {"[128, 64, 8192] dim 1", {128, 64, 8192}, 1},
      {"[262144, 128] dim -1", {262144, 128}, -1},
      {"[64, 262144] dim -1", {64, 262144}, -1},
      {"[2048, 65536] dim -1", {2048, 65536}, -1},
      {"[16384, 4096] dim -1", {16384, 4096}, -1},
  };
  struct Mode {
    const char* name;
    int64_t bytes = 64 << 10;                  // SoftmaxTestCaps::stage_bytes (0: staging off)
    int min_d = 0, row_fwd = 32, row_bwd = 128;  // stage_min_d, stage_min_row_fwd / _bwd
    int vec16 = 0;  // session 8: SoftmaxTestCaps::stage_vec16_fwd (0: the rule, 4 / 8: forced)
    int short16 = 0;    // session 14: SoftmaxTestCaps::spatial_vec16_short (0: the rule, 4 / 8: forced)
    bool cache = true;  // session 14: SoftmaxTestCaps::launch_cache
    int stage_y = 0;    // session 21: SoftmaxTestCaps::stage_y_bwd (0: the rule, 1: y alone where it fits, 2: never)
    int max_threads = 1024;  // session 22: SoftmaxTestCaps::max_threads (smaller blocks, more cluster ranks)
    bool hints = true;       // session 22: SoftmaxTestCaps::stream_l2_hints
    bool streamed = true;    // SoftmaxTestCaps::long_rows_streamed (session 7's rule)
    int b32 = 256;           // session 22: SoftmaxTestCaps::block_threads_fwd32 (512: the rule before)
    bool fma16 = true;       // session 22: SoftmaxTestCaps::fwd16_fma
    bool lastdim_only = false;  // s22: a mode of the last-dim block kernel only (spatial cases skip it)
    int max_cluster = 16;       // s22: SoftmaxTestCaps::max_cluster (1: a row in one block, streamed past it)
    bool one_block16 = true;    // s22: SoftmaxTestCaps::fwd16_rows_one_block (false: the rule before)
    bool rows16_before = false;  // s22rows: fwd16_block256 off and long_rows_streamed_bwd16 on (the rules before)
  };
  // Argument 2 "all": also the row-width and forced-staging variants (the default
  // policy is detail::softmax_geometry's).
  // Session 8: the 16-bit staged forward at V = 4 and at V = 8 (the rule picks per
  // shape; inner % 8 == 0 for V = 8), for the A/B of bench/notes-s8-cuda-softmax.md.
  std::vector<Mode> modes = {{"register", 0, 0, 32, 128},
                             {"default", 64 << 10, 0, 32, 128},
                             {"fwdvec4", 64 << 10, 0, 32, 128, 4},
                             {"fwdvec8", 64 << 10, 0, 32, 128, 8}};
  // Session 14 ("s14"): the short 16-bit forward columns at V = 4 and 8, and the
  // launcher's viability cache off (session 14 also measured 512-thread staged
  // blocks here, modes t512 and t512v4, since removed: bench/NOTES.md).
  if (argc > 2 && std::string(argv[2]) == "s14")
    modes = {{"default", 64 << 10, 0, 32, 128},
             {"nocache", 64 << 10, 0, 32, 128, 0, 0, false},
             {"short4", 64 << 10, 0, 32, 128, 0, 4},
             {"short8", 64 << 10, 0, 32, 128, 0, 8}};
  // Session 21 ("s21"): the staged backward with y alone (SoftmaxGeometry::stage_y)
  // against the rule without it (the register path where g and y do not fit, the
  // two-array staging elsewhere) and forced wherever y alone fits; spatial cases only.
  const bool s21 = argc > 2 && std::string(argv[2]) == "s21";
  if (s21)
    modes = {{"register", 0, 0, 32, 128},
             {"default", 64 << 10, 0, 32, 128},
             {"nostagey", 64 << 10, 0, 32, 128, 0, 0, true, 2},
             {"stagey", 64 << 10, 0, 32, 128, 0, 0, true, 1}};
  // Session 22 ("s22"): the 16-bit forwards without the FFMA form (noffma: the
  // exps as before session 22; every case); the last-dim block kernel (last-dim
  // cases only): the float32 forward's resident
  // rows at 512 threads (b512, the rule before), streamed rows with and without
  // L2 eviction priorities (SoftmaxGeometry::l2_hints), without session 7's streaming
  // rule, every block capped at 256 and 128 threads (twice and four times the
  // cluster ranks, the same bytes per thread), and rows without clusters (c1s: one
  // block of <= 512 per row, streamed where it does not hold the row; c1r: blocks of
  // up to 1024; c2r16: the 16-bit forward's rows of two blocks of 512 resident in a
  // cluster of 2, the rule before fwd16_rows_one_block); last-dim cases only.
  const bool s22 = argc > 2 && std::string(argv[2]) == "s22";
  if (s22)
    modes = {{"register", 0, 0, 32, 128},
             {"default", 64 << 10, 0, 32, 128},
             Mode{.name = "noffma", .fma16 = false},
             Mode{.name = "b512", .b32 = 512, .lastdim_only = true},
             Mode{.name = "nohint", .hints = false, .lastdim_only = true},
             Mode{.name = "resident", .streamed = false, .lastdim_only = true},
             Mode{.name = "t256", .max_threads = 256, .lastdim_only = true},
             Mode{.name = "t128", .max_threads = 128, .lastdim_only = true},
             Mode{.name = "c2r16", .lastdim_only = true, .one_block16 = false},
             Mode{.name = "c1s", .max_threads = 512, .lastdim_only = true, .max_cluster = 1},
             Mode{.name = "c1r", .lastdim_only = true, .max_cluster = 1}};
  // Session 22 ("s22rows"): few long last-dim rows, rows x lengths, for a new form of
  // session 7's streaming rule now that streamed rows carry L2 priorities: the
  // default against no streaming rule (resident), blocks capped at 256 / 128, and
  // (r16old, run 9 on) the rules before fwd16_block256 and long_rows_streamed_bwd16.
  const bool s22rows = argc > 2 && std::string(argv[2]) == "s22rows";
  if (s22rows) {
    modes = {{"register", 0, 0, 32, 128},
             {"default", 64 << 10, 0, 32, 128},
             Mode{.name = "resident", .streamed = false, .lastdim_only = true},
             Mode{.name = "t256", .max_threads = 256, .lastdim_only = true},
             Mode{.name = "t128", .max_threads = 128, .lastdim_only = true},
             Mode{.name = "r16old", .lastdim_only = true, .rows16_before = true}};
    cases.clear();
    for (int64_t rows : {16, 32, 64, 128, 256})
      for (int64_t D : {131072, 262144})
        cases.push_back({nullptr, {rows, D}, -1});
    for (int64_t rows : {512, 1024}) cases.push_back({nullptr, {rows, 131072}, -1});
    cases.push_back({nullptr, {2048, 65544}, -1});
  }
  if (argc > 2 && std::string(argv[2]) == "all")
    modes.insert(modes.end(), {{"fwdrow128", 64 << 10, 0, 128, 128}, {"fwdrow64", 64 << 10, 0, 64, 128},
                               {"bwdrow64", 64 << 10, 0, 32, 64}, {"bwdrow32", 64 << 10, 0, 32, 32},
                               {"forced", 64 << 10, 2, 32, 128}});
  // s22: more last-dim row lengths around the float32 forward's 256-thread rule
  // (resident rows of 2, 4, 8 and 16 blocks of 512 before it).
  if (s22)
    cases.insert(cases.end(), {{"[8192, 16384] dim -1", {8192, 16384}, -1},
                               {"[4096, 32768] dim -1", {4096, 32768}, -1},
                               {"[1024, 131072] dim -1", {1024, 131072}, -1},
                               {"[256, 262144] dim -1", {256, 262144}, -1}});
  // The test caps of a mode (Mode{"default"}: the defaults).
  auto apply = [](const Mode& m) {
    auto& caps = detail::softmax_test_caps();
    caps.stage_bytes = m.bytes;
    caps.stage_min_d = m.min_d;
    caps.stage_min_row_fwd = m.row_fwd;
    caps.stage_min_row_bwd = m.row_bwd;
    caps.stage_vec16_fwd = m.vec16;
    caps.spatial_vec16_short = m.short16;
    caps.launch_cache = m.cache;
    caps.stage_y_bwd = m.stage_y;
    caps.max_threads = m.max_threads;
    caps.stream_l2_hints = m.hints;
    caps.long_rows_streamed = m.streamed;
    caps.block_threads_fwd32 = m.b32;
    caps.fwd16_fma = m.fma16;
    caps.max_cluster = m.max_cluster;
    caps.fwd16_rows_one_block = m.one_block16;
    caps.fwd16_block256 = !m.rows16_before;
    caps.long_rows_streamed_bwd16 = m.rows16_before;
  };
  const DeviceRef gpu{Device::CUDA, 0};
  struct DT {
    DType t;
    const char* name;
    int code;
  };
  std::vector<std::string> names;  // s22rows: names of the generated cases
  names.reserve(cases.size());
  for (Case& c : cases)
    if (c.name == nullptr) {
      names.push_back("[" + std::to_string(c.shape[0]) + ", " + std::to_string(c.shape[1]) + "] dim -1");
      c.name = names.back().c_str();
    }
  for (const Case& c : cases)
    for (DT dt : {DT{DType::Float32, "float32", 0}, DT{DType::Float16, "float16", 2}, DT{DType::BFloat16, "bfloat16", 3}}) {
      if (s21 && c.dim < 0) continue;  // the last-dim kernels have no staged form
      const int64_t n = numel(c.shape);
      const int64_t es = dtype_size(dt.t);
      Tensor x = Tensor::empty(c.shape, dt.t, gpu), y = Tensor::empty(c.shape, dt.t, gpu);
      Tensor g = Tensor::empty(c.shape, dt.t, gpu), gi = Tensor::empty(c.shape, dt.t, gpu);
      Tensor y0 = Tensor::empty(c.shape, dt.t, gpu), gi0 = Tensor::empty(c.shape, dt.t, gpu);
      init_kernel<<<4096, 256>>>(x.data(), n, dt.code, 17, -4.f, 4.f);
      init_kernel<<<4096, 256>>>(g.data(), n, dt.code, 91, -1.f, 1.f);
      CK(cudaGetLastError());
      for (const Mode& m : modes) {
        if (c.dim >= 0 && m.lastdim_only) continue;
        apply(m);
        std::string path_f, path_b;
        {
          TraceSession t;
          softmax_out(x, c.dim, y);
          softmax_backward_out(g, y0, c.dim, gi);
          CK(cudaDeviceSynchronize());
          const auto r = t.records();
          if (r.size() == 2) {
            path_f = "grid " + std::to_string(r[0].grid[0]) + " block " + std::to_string(r[0].block[0]);
            path_b = "grid " + std::to_string(r[1].grid[0]) + " block " + std::to_string(r[1].block[0]);
          }
        }
        const auto p = make_softmax_problem(c.shape, c.dim, dt.t, Direction::Fwd, false, Backend::CUDA);
        auto pf = p;
        pf.sm_count = 132;
        auto pb = pf;
        pb.direction = Direction::Bwd;
        const auto gf = detail::softmax_geometry(pf), gb = detail::softmax_geometry(pb);
        if (m.bytes == 0) {
          softmax_out(x, c.dim, y0);
          softmax_backward_out(g, y0, c.dim, gi0);
          CK(cudaDeviceSynchronize());
        }
        float df = 0, db = 0;
        if (m.bytes != 0) {
          softmax_out(x, c.dim, y);
          softmax_backward_out(g, y0, c.dim, gi);
          CK(cudaDeviceSynchronize());
          df = maxdiff(y, y0, dt.code, dmax);
          db = maxdiff(gi, gi0, dt.code, dmax);
        }
        const double fms = median_ms([&] { softmax_out(x, c.dim, y); }, reps);
        const double bms = median_ms([&] { softmax_backward_out(g, y0, c.dim, gi); }, reps);
        // Session 14: the same calls 20 at a time between two events, per call: where
        // the host keeps ahead of the GPU, its launch cost is out of this time.
        const double fb2b = batch_ms([&] { softmax_out(x, c.dim, y); }, reps, 20);
        const double bb2b = batch_ms([&] { softmax_backward_out(g, y0, c.dim, gi); }, reps, 20);
        const double fb = 2.0 * double(n * es), bb = 3.0 * double(n * es);
        const double fpct = 100.0 * (fb / (copy_gbs * 1e9)) / (fms * 1e-3);
        const double bpct = 100.0 * (bb / (copy_gbs * 1e9)) / (bms * 1e-3);
        std::printf("%-24s %-8s %-10s fwd %7.4f ms %5.1f%% b2b %7.4f [%s st%d v%d tx%d ty%d c%d k%d ch%lld h%d] diff %.3g | bwd %7.4f ms %5.1f%% b2b %7.4f [%s st%d tx%d ty%d c%d k%d ch%lld h%d] diff %.3g\n",
                    c.name, dt.name, m.name, fms, fpct, fb2b, path_f.c_str(), int(gf.staged), gf.vec, gf.tx, gf.ty,
                    gf.cluster, gf.krows, (long long)gf.chunks, int(gf.l2_hints), double(df), bms, bpct, bb2b,
                    path_b.c_str(), gb.staged_form(), gb.tx, gb.ty, gb.cluster, gb.krows, (long long)gb.chunks,
                    int(gb.l2_hints), double(db));
        std::fflush(stdout);
      }
      apply(Mode{"default"});  // the caps back to their defaults
    }
  return 0;
}
