// CUDA ragged softmax benchmark without Python (session 42): the cases of
// bench/cuda_segment_softmax_bench.py on segred alone, so a device call can time
// prebuilt binaries (tools/gpu-prebuild) against each other and sweep the tile
// geometry without the ~190 s module build. The torch composition column, and
// so the committed table, stay with the Python script.
//
// Usage: cuda_segment_softmax_bench [--only SUBSTR[;SUBSTR...]] [--dtype float32|bfloat16]
//          [--reps N] [--block N] [--budget-kib N] [--edges N]
//   --block, --budget-kib: detail::SegmentSoftmaxTestCaps (src/core/segment_softmax_geometry.h),
//   the threads a tile block starts at and the tile's shared-memory budget; 0 = the rule.
// Cases (as the Python script; the data differ: degrees from this file's generator, x
// uniform in [-4, 4), g in [-1.5, 1.5)): GAT power-law degrees (Pareto tail exponent 2.5,
// mean ~10, clipped at 100k, 2% isolated nodes) over E = 10M edges with 8 heads (float32,
// bfloat16), 1 head and 64 heads (float32); one segment of 2^26 beside 2^20 of one (1 head);
// uniform 10 edges a node, 8 heads; (session 44) uniform 40 and 200, 8 heads float32. Where
// the plan takes the lane-group path, the tile path is timed too (two "case" rows: the path
// column tells them apart).
// Every (case, dtype) is validated before it is timed: forward and backward against the
// CPU backend on the same inputs (segred's float64-reference-tested CPU kernels), max abs
// error against a tolerance of the output type.
// Timing: CUDA events around batches of 5 back-to-back calls (unsafe = true: no metadata
// validation, no synchronisation), median of --reps batches; floor: a device copy of the
// data's bytes measured per case, forward 2 x data + offsets, backward 3 x data + offsets.
// Prints:
//   device|<name>
//   case|<case>|<dtype>|<dir>|<path grid block>|<ms>|<% of copy>|<copy GB/s>
//   check|<case>|<dtype>|<dir>|<max abs err>|<tolerance>|ok or MISMATCH
// and exits 1 on a mismatch.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/cuda_bench_common.cuh"
#include "bench/ragged_bench_common.h"
#include "segred/segred.h"
#include "src/core/segment_softmax_geometry.h"

using namespace segred;

namespace {

struct Case {
  std::string name;
  const std::vector<int64_t>* deg;
  int64_t heads;
  DType dtype;
};

}  // namespace

int main(int argc, char** argv) {
  std::string only, only_dtype;
  int reps = 15, block = 0, budget = 0;
  int64_t E = 10000000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--only") only = next();
    else if (a == "--dtype") only_dtype = next();
    else if (a == "--reps") reps = std::max(3, std::atoi(next().c_str()));
    else if (a == "--block") block = std::atoi(next().c_str());
    else if (a == "--budget-kib") budget = std::atoi(next().c_str());
    else if (a == "--edges") E = std::max<int64_t>(1000, std::atoll(next().c_str()));
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  detail::segment_softmax_test_caps().block = block;
  detail::segment_softmax_test_caps().budget_kib = budget;
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device|%s\n", prop.name);
  std::printf("caps|block %d|budget_kib %d|edges %lld\n", block, budget, (long long)E);

  const std::vector<int64_t> deg_gat = power_law_degrees(E, 8);
  const int64_t ones = int64_t(1) << 20;
  std::vector<int64_t> deg_big(size_t(ones + 1), 1);
  deg_big[size_t(ones / 2)] = E >= 10000000 ? int64_t(1) << 26 : int64_t(1) << 22;
  const std::vector<int64_t> deg_uni(size_t(E / 10), 10);
  const std::vector<int64_t> deg_uni40(size_t(E / 40), 40), deg_uni200(size_t(E / 200), 200);
  const std::vector<Case> cases = {
      {"GAT power-law, 8 heads", &deg_gat, 8, DType::Float32},
      {"GAT power-law, 8 heads", &deg_gat, 8, DType::BFloat16},
      {"GAT power-law, 1 head", &deg_gat, 1, DType::Float32},
      {"GAT power-law, 64 heads", &deg_gat, 64, DType::Float32},
      {"1 x 2^26 + 1M x 1, 1 head", &deg_big, 1, DType::Float32},
      {"uniform 10 per node, 8 heads", &deg_uni, 8, DType::Float32},
      {"1 x 2^26 + 1M x 1, 1 head", &deg_big, 1, DType::BFloat16},
      {"uniform 10 per node, 8 heads", &deg_uni, 8, DType::BFloat16},
      // session 44: one short class of the lane-group path alone (40 rows), and segments past
      // its registers (200 rows: one piece each), float32 8 heads
      {"uniform 40 per node, 8 heads", &deg_uni40, 8, DType::Float32},
      {"uniform 200 per node, 8 heads", &deg_uni200, 8, DType::Float32},
  };
  const DeviceRef gpu{Device::CUDA, 0}, cpu{Device::CPU, 0};
  bool all_ok = true;
  for (const Case& c : cases) {
    if (!listed(only.c_str(), c.name) || (!only_dtype.empty() && only_dtype != dname(c.dtype))) continue;
    const std::vector<int64_t>& deg = *c.deg;
    const int64_t S = int64_t(deg.size());
    std::vector<int64_t> off(size_t(S + 1), 0);
    for (int64_t s = 0; s < S; ++s) off[size_t(s + 1)] = off[size_t(s)] + deg[size_t(s)];
    const int64_t rows = off.back();
    const Shape shape = c.heads > 1 ? Shape{rows, c.heads} : Shape{rows};
    const int64_t n = rows * c.heads;
    const int code = c.dtype == DType::Float32 ? 0 : 3;
    Tensor x = Tensor::empty(shape, c.dtype, gpu), y = Tensor::empty(shape, c.dtype, gpu);
    Tensor g = Tensor::empty(shape, c.dtype, gpu), gi = Tensor::empty(shape, c.dtype, gpu);
    Tensor offs = Tensor::empty({S + 1}, DType::Int64, gpu);
    CK(cudaMemcpy(offs.data(), off.data(), off.size() * sizeof(int64_t), cudaMemcpyHostToDevice));
    init_kernel<<<4096, 256>>>(x.data(), n, code, 17, -4.f, 4.f);
    init_kernel<<<4096, 256>>>(g.data(), n, code, 91, -1.5f, 1.5f);
    CK(cudaGetLastError());
    Segments seg;
    seg.offsets = offs;
    seg.unsafe = true;
    auto fwd = [&] { segment_softmax_out(SegmentSoftmaxOp::Softmax, x, seg, y); };
    auto bwd = [&] { segment_softmax_backward_out(SegmentSoftmaxOp::Softmax, g, y, y, seg, gi); };
    // The lane-group path where it applies (the hook, whatever the default), then the tile path, each
    // validated before it is timed. Outputs NaN-filled first: a row a path leaves unwritten fails.
    const SegmentSoftmaxProblem prob{Backend::CUDA, Direction::Fwd, SegmentSoftmaxOp::Softmax, c.dtype, 1, rows,
                                     c.heads, S};
    const bool lanes = detail::segment_softmax_lanes(prob).lpr > 0;
    for (int force_tiles = 0; force_tiles <= (lanes ? 1 : 0); ++force_tiles) {
    detail::segment_softmax_lanes_mode() = force_tiles == 1 ? -1 : 1;
    CK(cudaMemset(y.data(), 0xff, size_t(n) * size_t(dtype_size(c.dtype))));
    CK(cudaMemset(gi.data(), 0xff, size_t(n) * size_t(dtype_size(c.dtype))));
    std::string path[2];
    {
      TraceSession t;
      fwd();
      bwd();
      CK(cudaDeviceSynchronize());
      for (const auto& r : t.records()) {
        const int d = r.direction == Direction::Bwd ? 1 : 0;
        if (!path[d].empty()) path[d] += " + ";
        path[d] += r.path + " grid " + std::to_string(r.grid[0]) + " block " + std::to_string(r.block[0]);
      }
    }
    // Validation: the CPU backend on the same inputs (y_gpu feeds the backward on both sides).
    {
      const DeviceRef host{};
      Tensor hx = Tensor::copy_to(x, host), hg = Tensor::copy_to(g, host), hy = Tensor::copy_to(y, host);
      Tensor hgi = Tensor::copy_to(gi, host), ho = Tensor::copy_to(offs, host);
      Segments hs;
      hs.offsets = ho;
      Tensor ry = Tensor::empty(shape, c.dtype, cpu), rgi = Tensor::empty(shape, c.dtype, cpu);
      segment_softmax_out(SegmentSoftmaxOp::Softmax, hx, hs, ry);
      segment_softmax_backward_out(SegmentSoftmaxOp::Softmax, hg, hy, hy, hs, rgi);
      // float32: a few ulps of values <= 1 (softmax) and of |g| <= 1.5 (backward);
      // bfloat16: one rounding of the output (2^-8 relative) on values <= 1.5.
      const double tol = c.dtype == DType::Float32 ? 1e-5 : 1.6e-2;
      const double ef = max_abs_diff(hy, ry), eb = max_abs_diff(hgi, rgi);
      for (int d = 0; d < 2; ++d) {
        const double e = d ? eb : ef;
        const bool ok = e <= tol;
        all_ok &= ok;
        std::printf("check|%s|%s|%s|%.3g|%.3g|%s\n", c.name.c_str(), dname(c.dtype), d ? "bwd" : "fwd", e, tol,
                    ok ? "ok" : "MISMATCH");
      }
      std::fflush(stdout);
    }
    // Floor: a device copy of the data's bytes, measured now.
    const double bytes = double(n) * dtype_size(c.dtype), meta = double(S + 1) * 8;
    Tensor c0 = Tensor::empty(shape, c.dtype, gpu), c1 = Tensor::empty(shape, c.dtype, gpu);
    CK(cudaMemset(c0.data(), 1, size_t(bytes)));
    const double copy_ms =
        batch_ms([&] { CK(cudaMemcpyAsync(c1.data(), c0.data(), size_t(bytes), cudaMemcpyDeviceToDevice)); }, reps, 5);
    const double copy_bw = 2 * bytes / (copy_ms * 1e-3);
    const double ms[2] = {batch_ms(fwd, reps, 5), batch_ms(bwd, reps, 5)};
    for (int d = 0; d < 2; ++d) {
      const double floor_ms = ((d ? 3 : 2) * bytes + meta) / copy_bw * 1e3;
      std::printf("case|%s|%s|%s|%s|%.4f|%.1f|%.0f\n", c.name.c_str(), dname(c.dtype), d ? "bwd" : "fwd",
                  path[d].c_str(), ms[d], 100.0 * floor_ms / ms[d], copy_bw / 1e9);
    }
    std::fflush(stdout);
    }
    detail::segment_softmax_lanes_mode() = 0;
  }
  return all_ok ? 0 : 1;
}
