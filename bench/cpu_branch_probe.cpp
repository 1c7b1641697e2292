// Branch-misprediction probe of the CPU flat segment_reduce forward (session 19,
// bench/NOTES.md): one core, bfloat16 sum over 2^LOG2 elements (default 21: the
// data stays in cache, so the time is the kernel's instructions and branches, not
// the machine's memory noise), the lengths of cpu_bench.cpp's 1d_exp40 generator
// in four orders: shuffled (as generated), sorted, sorted with consecutive lengths
// made unequal (+1/-1 pairs: no uniform groups, but predictable tiers), and all
// equal. Prints the minimum and quartiles of 200 calls per order, twice.
// Build against a CPU build's static library:
//   g++ -O2 -std=c++20 -fopenmp -I include -I . bench/cpu_branch_probe.cpp BUILD/libsegred.a -o probe
//   OMP_NUM_THREADS=1 ./probe [LOG2]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>
#include "segred/segred.h"
using namespace segred;
int main(int argc, char** argv) {
  const int64_t N = int64_t(1) << (argc > 1 ? atoi(argv[1]) : 21);
  std::mt19937_64 rng(42);
  std::exponential_distribution<double> e(1.0 / 40);
  std::vector<int64_t> v;
  int64_t left = N;
  while (left > 0) { int64_t n = std::min<int64_t>(left, std::llround(e(rng))); v.push_back(n); left -= n; }
  std::vector<uint16_t> x(N);
  for (auto& b : x) b = uint16_t(0x3f80 + (rng() & 0x7f));  // bf16 in [1, 2)
  auto run = [&](std::vector<int64_t>& L, const char* what) {
    const int64_t S = int64_t(L.size());
    std::vector<uint16_t> out(S);
    TensorView xv(x.data(), DType::BFloat16, {N});
    TensorView lv(L.data(), DType::Int64, {S});
    TensorView ov(out.data(), DType::BFloat16, {S});
    Segments seg; seg.lengths = lv; seg.unsafe = true;
    std::vector<double> t;
    for (int r = 0; r < 200; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      segment_reduce_out(xv, Reduce::Sum, seg, ov);
      t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    std::printf("%-10s S=%lld min %.1f us p25 %.1f med %.1f  (%.2f ns/segment at min)\n", what, (long long)S, t[0], t[50], t[100], 1e3 * t[0] / S);
  };
  auto shuf = v;
  auto sorted = v; std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> fixed(v.size(), 0); { int64_t tot = 0; for (size_t i = 0; i < fixed.size(); ++i) { fixed[i] = N / int64_t(v.size()); tot += fixed[i]; } fixed.back() += N - tot; }
  auto jit = sorted;  // sorted, consecutive lengths made unequal (+1/-1 pairs): no uniform groups
  for (size_t i = 0; i + 1 < jit.size(); i += 2) if (jit[i + 1] > 0) { jit[i] += 1; jit[i + 1] -= 1; }
  for (int k = 0; k < 2; ++k) { run(shuf, "shuffled"); run(sorted, "sorted"); run(jit, "sortjit"); run(fixed, "equal"); }
}
