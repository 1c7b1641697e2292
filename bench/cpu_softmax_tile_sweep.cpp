// Tile-width sweep of the CPU spatial softmax (helper tool, not in CMake): runs
// segred::cpu::softmax_fwd / softmax_bwd with plan.chunk forced to each W given,
// median of 7 calls, GB/s as cpu_bench_softmax.cpp counts bytes (fwd 2 x tensor,
// bwd 3 x tensor) and % of a 1 GiB 2-thread copy measured here.
// Build (from the repo root, after building libsegred.a in BUILD):
//   g++ -O2 -std=c++20 -fopenmp -I. -Iinclude bench/cpu_softmax_tile_sweep.cpp BUILD/libsegred.a -o sweep
// Run: OMP_NUM_THREADS=2 taskset -c 0,1 ./sweep [fwd|bwd|both] [W ...]   (W = 0: the planner's;
// a W repeated alternates with the others in one process: the pairs of
// bench/NOTES.md, CPU softmax, session 5). SWEEP_CASES=013 picks cases by index;
// SWEEP_FORM / SWEEP_FORM_ODD=stream|spatial force the forward's kernel (session 25),
// SWEEP_STREAM_PAIRS=1 alternates ordinary and streaming stores, SWEEP_PF=a,b,... long-row
// prefetch distances (session 39), SWEEP_OVERLAP=01 the last-dim and spatial forwards'
// passes in turn and overlapped (session 40); SWEEP_LOG=1 log_softmax. (Session 28's
// SWEEP_RECOMPUTE_PAIRS, the forward recomputing its exps, went with that form:
// bench/NOTES.md, session 29.)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/fill_random.h"
#include "bench/memcpy_baseline.h"
#include "segred/segred.h"
#include "src/cpu/softmax_kernels.h"

using namespace segred;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "both";
  std::vector<int64_t> ws;
  for (int i = 2; i < argc; ++i) ws.push_back(std::atoll(argv[i]));
  if (ws.empty()) ws = {0};
  const double copy = [] {
    const size_t bytes = size_t(2) << 30;
    return double(bytes) / bench::memcpy_seconds(bytes) / 1e9;
  }();
  std::printf("copy %.1f GB/s, threads %d, isa %s\n", copy, omp_get_max_threads(), cpu::softmax_isa_name(cpu::softmax_isa()));
  struct C { Shape s; int64_t dim; DType dt; };
  const std::vector<C> cases = {{{32, 1000, 4096}, 1, DType::Float32},
                                {{8192, 8192}, 0, DType::Float32},
                                {{8, 4, 4194304}, 1, DType::Float32},
                                {{64, 256, 56, 56}, 1, DType::Float16},
                                {{64, 256, 56, 56}, 1, DType::Float32},
                                {{16, 2000, 4096}, 1, DType::Float32},
                                {{16384, 4096}, 1, DType::Float32},   // 6, 7: lastdim (the stream pairs only)
                                {{16384, 4096}, 1, DType::Float16},
                                {{2048, 65536}, 1, DType::Float32}};  // 8: lastdim, rows of 16 blocks
  // SWEEP_L2=bytes: plan with this L2 (cpu::softmax_l2_override), e.g. the
  // benchmark host's 2 MiB on a machine with less.
  if (const char* l2 = std::getenv("SWEEP_L2")) cpu::softmax_l2_override() = std::atoll(l2);
  const bool log = std::getenv("SWEEP_LOG") != nullptr;  // log_softmax instead of softmax
  const char* sel = std::getenv("SWEEP_CASES");  // e.g. "013": the cases' indices
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    if (sel && !std::strchr(sel, char('0' + ci))) continue;
    const C& c = cases[ci];
    Tensor x = Tensor::empty(c.s, c.dt), y = Tensor::empty(c.s, c.dt), g = Tensor::empty(c.s, c.dt),
           gi = Tensor::empty(c.s, c.dt);
    bench::fill_random(x, 1234, -8, 8);
    bench::fill_random(g, 99, -2, 2);
    std::memset(gi.data(), 0, size_t(gi.numel()) * size_t(dtype_size(c.dt)));
    if (log) log_softmax_out(x, c.dim, y);
    else softmax_out(x, c.dim, y);
    const double tb = double(x.numel() * dtype_size(c.dt));
    for (int bwd = 0; bwd < 2; ++bwd) {
      if ((bwd && mode == "fwd") || (!bwd && mode == "bwd")) continue;
      for (const int64_t& w : ws) {
        SoftmaxProblem p = make_softmax_problem(c.s, c.dim, c.dt, bwd ? Direction::Bwd : Direction::Fwd, log, Backend::CPU);
        p.cpu_threads = cpu::softmax_threads();  // as the API layer fills them
        p.cpu_l2_bytes = cpu::softmax_l2_bytes();
        Plan plan = plan_softmax(p);
        if (w > 0) plan.chunk = std::min<int64_t>(w, p.inner);
        // The forward's kernel forced (the plan picks by D): SWEEP_FORM=stream|spatial for
        // every W, SWEEP_FORM_ODD for the odd positions of the W list only (pairs).
        auto force = [&](const char* form) {
          if (!form || bwd) return;
          plan.path = std::string_view(form) == "stream" ? "softmax.fwd.cpu.spatial_stream.i64" : "softmax.fwd.cpu.spatial.i64";
        };
        force(std::getenv("SWEEP_FORM"));
        // SWEEP_STREAM_PAIRS=1: even positions of the W list with ordinary stores
        // (softmax_stream_mode 1), odd ones with streaming stores (2) (session 25).
        if (std::getenv("SWEEP_STREAM_PAIRS")) cpu::softmax_stream_mode() = (&w - ws.data()) % 2 == 1 ? 2 : 1;
        if ((&w - ws.data()) % 2 == 1) force(std::getenv("SWEEP_FORM_ODD"));
        // SWEEP_PF=a,b,...: the long-row prefetch distance (cpu::softmax_long_row_prefetch)
        // of the W list's positions in turn (session 39).
        if (const char* pfs = std::getenv("SWEEP_PF")) {
          std::vector<int64_t> v;
          for (const char* c = pfs; *c;) {
            v.push_back(std::atoll(c));
            while (*c && *c != ',') ++c;
            if (*c) ++c;
          }
          if (!v.empty()) cpu::softmax_long_row_prefetch() = v[size_t(&w - ws.data()) % v.size()];
        }
        // SWEEP_OVERLAP=a...: the last-dim and spatial forwards' overlap mode
        // (cpu::softmax_lastdim_overlap, softmax_spatial_overlap; one digit each) of the W list's positions
        // in turn, e.g. 01: passes in turn, then overlapped (session 40).
        if (const char* ov = std::getenv("SWEEP_OVERLAP")) {
          std::vector<int> v;
          for (const char* c = ov; *c; ++c) if (*c >= '0' && *c <= '9') v.push_back(*c - '0');
          cpu::softmax_lastdim_overlap() = v[size_t(&w - ws.data()) % v.size()];
          cpu::softmax_spatial_overlap() = v[size_t(&w - ws.data()) % v.size()];
        }
        std::vector<double> t;
        for (int k = 0; k < 8; ++k) {
          const auto t0 = std::chrono::steady_clock::now();
          if (bwd) cpu::softmax_bwd(plan, p, g, y, gi);
          else cpu::softmax_fwd(plan, p, x, y);
          t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        t.erase(t.begin());
        std::sort(t.begin(), t.end());
        const double gbps = (bwd ? 3 : 2) * tb / t[t.size() / 2] / 1e9;
        const char* form = plan.path.find("stream") != std::string_view::npos ? "stream" : "";
        std::printf("%-18s dim%ld %s %s %-6s W=%-5ld st%d pf%-5ld ov%d %8.2f ms %6.1f GB/s %4.0f%% copy\n", shape_string(c.s).c_str(),
                    long(c.dim), std::string(dtype_name(c.dt)).c_str(), bwd ? "bwd" : "fwd", form, long(plan.chunk),
                    int(cpu::softmax_stream_mode().load()), long(cpu::softmax_long_row_prefetch().load()), cpu::softmax_lastdim_overlap().load(),
                    t[t.size() / 2] * 1e3, gbps, 100 * gbps / copy);
        std::fflush(stdout);
      }
    }
  }
}
