// softmax / log_softmax forward on the CPU; the kernels are in
// softmax_fwd_kernels.inc, their vector layer in softmax_vec_kernels.inc, built
// once per instruction set (softmax_isa_kernels.inc), picked per call.
//
// Paths (src/core/registry.cpp; log_softmax has the same three under its own op name):
//   softmax.fwd.cpu.lastdim.i64   inner == 1: a row is D contiguous values, reduced
//       in blocks of plan.chunk values (max, then exps), written in one more pass;
//       rows of at most 16 vectors (8 on AVX2 / SSE2) are held in registers instead
//       (lastdim_short), rows of 16-bit values of >= 1024 take a fused pass (lastdim16).
//   softmax.fwd.cpu.spatial.i64   inner > 1: a work item is one outer index and a
//       tile of W = plan.chunk columns, the reduced values of a column `inner`
//       apart; every inner loop runs along the W contiguous columns.
//   softmax.fwd.cpu.spatial_stream.i64   inner > 1 and D too long for spatial's
//       [D, W] tiles of exps to stay in L2: tiles of whole slab rows (W =
//       plan.chunk, the backward's rule), the column statistics in one pass and
//       y in a second, each streaming the tile from start to end; two exps per
//       element and x read twice (from L2/L3 where the tile fits, else memory).
// The first two take one exp per element (softmax keeps the exps in a per-thread
// buffer and rescales per block at the end), read x once from memory and write y
// once (streaming stores for large calls; the second read of x, log_softmax, is
// from L2 when the row / tile fits there). OpenMP over rows / work items, static
// schedule; the reduction order is a function of D, W and plan.chunk only
// (spatial_stream's of D only: blocks of rows per column), so results are
// deterministic.
#include "src/cpu/softmax_isa.h"  // first: its compiler settings apply to every include

#include <omp.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <utility>  // std::index_sequence (the short-row kernel's lane reductions)

namespace segred::cpu {
namespace {

#define SEGRED_SOFTMAX_KERNELS "src/cpu/softmax_fwd_kernels.inc"
#include "src/cpu/softmax_isa_kernels.inc"

}  // namespace

const char* softmax_isa_name(SoftmaxIsa isa) {
  switch (isa) {
    case SoftmaxIsa::Avx512: return "avx512";
    case SoftmaxIsa::Avx2: return "avx2";
    default: return "baseline";
  }
}

SoftmaxIsa softmax_best_isa() {
#ifdef SEGRED_SOFTMAX_X86
  static const SoftmaxIsa best = [] {
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("bmi2");
    return avx2 && avx512 ? SoftmaxIsa::Avx512 : avx2 ? SoftmaxIsa::Avx2 : SoftmaxIsa::Baseline;
  }();
  return best;
#else
  return SoftmaxIsa::Baseline;
#endif
}

std::atomic<int>& softmax_isa_cap() {
  static std::atomic<int> cap{int(SoftmaxIsa::Avx512)};
  return cap;
}

SoftmaxIsa softmax_isa() {
  return SoftmaxIsa(std::min(int(softmax_best_isa()), softmax_isa_cap().load(std::memory_order_relaxed)));
}

std::atomic<int>& softmax_stream_mode() {
  static std::atomic<int> mode{0};
  return mode;
}

int64_t parse_cache_size(std::string_view s) {
  int64_t v = 0;
  size_t i = 0;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
    v = v * 10 + (s[i] - '0');
    if (v > (int64_t(1) << 40)) return 0;  // no cache is this large: malformed (and no overflow)
  }
  if (i == 0) return 0;
  const char u = i < s.size() ? s[i] : '\n';
  if (u == 'K') return v << 10;
  if (u == 'M') return v << 20;
  if (u == 'G') return v << 30;
  return u == '\n' || u == ' ' ? v : 0;
}

int64_t count_cpu_list(std::string_view s) {
  int64_t n = 0;
  size_t i = 0;
  auto num = [&](int64_t& v) {  // false when no digits or past 2^30 (no CPU numbers that high)
    const size_t b = i;
    for (v = 0; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
      v = v * 10 + (s[i] - '0');
      if (v > (int64_t(1) << 30)) return false;
    }
    return i > b;
  };
  while (i < s.size() && s[i] != '\n') {
    int64_t a = 0, b = 0;
    if (!num(a)) return 0;
    b = a;
    if (i < s.size() && s[i] == '-') {
      ++i;
      if (!num(b) || b < a) return 0;
    }
    n += b - a + 1;
    if (i < s.size() && s[i] == ',') ++i;
  }
  return n;
}

int64_t capped_llc_share(int64_t reported) { return std::min(reported, kMaxLlcSharePerCpu); }

namespace {

std::string read_small_file(const std::string& path) {
  std::string s;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    char buf[256];
    const size_t n = std::fread(buf, 1, sizeof buf, f);
    s.assign(buf, n);
    std::fclose(f);
  }
  return s;
}

// The last-level cache's share of one CPU as the machine reports it: the largest
// cache level that sysfs lists for cpu0, divided among the CPUs that share that
// instance. sysconf's _SC_LEVEL3_CACHE_SIZE is the fallback, divided among all
// online CPUs: on some virtual machines it reports the whole package's L3 (the
// development machine of session 25: 256 MiB from sysconf on 2 vCPUs whose L3
// instance is 32 MiB), so that outputs of 200 MB took ordinary stores and paid a
// read for ownership.
int64_t llc_share_reported() {
  int64_t best_level = 0, size = 0, sharing = 0;
  for (int i = 0; i < 16; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    const std::string level = read_small_file(dir + "level");
    if (level.empty()) continue;
    const int64_t lv = std::atoll(level.c_str());
    const int64_t sz = parse_cache_size(read_small_file(dir + "size"));
    const int64_t sh = count_cpu_list(read_small_file(dir + "shared_cpu_list"));
    if (lv > best_level && sz > 0 && sh > 0) {
      best_level = lv;
      size = sz;
      sharing = sh;
    }
  }
  if (best_level >= 2) return size / sharing;
  const int64_t cpus = std::max<long>(1, sysconf(_SC_NPROCESSORS_ONLN));
  long v = 0;
#ifdef _SC_LEVEL3_CACHE_SIZE
  v = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
  return (v > 0 ? int64_t(v) : int64_t(32) << 20) / cpus;  // unknown: assume 32 MiB
}

int64_t llc_share_per_cpu() { return capped_llc_share(llc_share_reported()); }

// cpu0's level-2 cache (the size of its instance: a core's, or a pair of SMT
// threads'), sysconf's _SC_LEVEL2_CACHE_SIZE as the fallback; 0 when neither says.
int64_t l2_of_cpu0() {
  for (int i = 0; i < 16; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    const std::string level = read_small_file(dir + "level");
    const std::string type = read_small_file(dir + "type");
    if (level.empty() || std::atoll(level.c_str()) != 2 || type.rfind("Instruction", 0) == 0) continue;
    const int64_t sz = parse_cache_size(read_small_file(dir + "size"));
    if (sz > 0) return sz;
  }
  long v = 0;
#ifdef _SC_LEVEL2_CACHE_SIZE
  v = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
  return v > 0 ? int64_t(v) : 0;
}

}  // namespace

std::atomic<int64_t>& softmax_long_row_prefetch() {
  static std::atomic<int64_t> v{kLongRowPrefetchBytes};
  return v;
}

std::atomic<int>& softmax_lastdim_overlap() {
  static std::atomic<int> v{1};
  return v;
}

std::atomic<int>& softmax_spatial_overlap() {
  static std::atomic<int> v{1};
  return v;
}

std::atomic<int64_t>& softmax_l2_override() {
  static std::atomic<int64_t> v{-1};
  return v;
}

int64_t softmax_l2_bytes() {
  const int64_t o = softmax_l2_override().load(std::memory_order_relaxed);
  if (o >= 0) return o;
  static const int64_t l2 = l2_of_cpu0();
  return l2;
}

bool softmax_stream_output(int64_t bytes_moved) {
  const int mode = softmax_stream_mode().load(std::memory_order_relaxed);
  if (mode != 0) return mode == 2;
  static const int64_t cpus = std::max<long>(1, sysconf(_SC_NPROCESSORS_ONLN));
  static const int64_t share = llc_share_per_cpu();
  const int64_t threads = std::clamp<int64_t>(omp_get_max_threads(), 1, cpus);
  return bytes_moved > share * threads;
}

int softmax_threads() { return std::max(1, omp_get_max_threads()); }

void softmax_widen(SoftmaxIsa isa, const half_t* in, float* out, int64_t n) { SEGRED_SOFTMAX_ON_ISA(isa, widen(in, out, n)) }
void softmax_widen(SoftmaxIsa isa, const bfloat16_t* in, float* out, int64_t n) {
  SEGRED_SOFTMAX_ON_ISA(isa, widen(in, out, n))
}
void softmax_narrow(SoftmaxIsa isa, const float* in, half_t* out, int64_t n) { SEGRED_SOFTMAX_ON_ISA(isa, narrow(in, out, n)) }
void softmax_narrow(SoftmaxIsa isa, const float* in, bfloat16_t* out, int64_t n) {
  SEGRED_SOFTMAX_ON_ISA(isa, narrow(in, out, n))
}

void softmax_vec_math(SoftmaxIsa isa, bool log, const float* in, float* out, int64_t n) {
  SEGRED_SOFTMAX_ON_ISA(isa, vec_math(log ? 1 : 0, in, out, n))
}
void softmax_vec_exp16(SoftmaxIsa isa, const float* in, float* out, int64_t n) { SEGRED_SOFTMAX_ON_ISA(isa, vec_math(2, in, out, n)) }

// Test hook (declared where used, tests/cpp/test_softmax.cpp): whether the
// spatial forward of this plan and problem prefetches its next blocks into L2
// only (softmax_fwd_kernels.inc, run; the same rule in every build).
bool softmax_spatial_prefetch_l2(const Plan& plan, const SoftmaxProblem& p) {
  bool l2 = false;
  SEGRED_DISPATCH_FLOAT(p.dtype, T, [&] { l2 = isa_base::spatial_prefetch_l2<T>(plan, p); });
  return l2;
}

void softmax_fwd(const Plan& plan, const SoftmaxProblem& p, const TensorView& x, const TensorView& out) {
  detail::record_launch(plan.path);
  const bool last = plan.path.find(".lastdim.") != std::string_view::npos;
  const bool stream = softmax_stream_output(2 * x.numel() * dtype_size(x.dtype));
  const SoftmaxIsa isa = softmax_isa();
  SEGRED_DISPATCH_FLOAT(x.dtype, T, [&] {
    const T* xp = x.ptr<const T>();
    T* yp = out.ptr<T>();
    SEGRED_SOFTMAX_ON_ISA(isa, run<T>(plan, p, xp, yp, last, stream))
  });
}

}  // namespace segred::cpu
