// CPU softmax kernel entry points. Inputs are contiguous [outer, D, inner] (the
// API layer copies strided inputs); outputs are contiguous, of the same shape,
// and fully written. p.log selects log_softmax; plan.path says which path runs.
#pragma once
#include <atomic>
#include <cstdint>
#include <string_view>

#include "segred/dtype.h"
#include "segred/plan.h"
#include "segred/softmax.h"
#include "segred/tensor.h"

// GCC on x86-64: the kernels are also built for AVX2 and AVX-512 (src/cpu/softmax_isa_kernels.inc).
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define SEGRED_SOFTMAX_X86 1
#endif

namespace segred::cpu {

void softmax_fwd(const Plan& plan, const SoftmaxProblem& p, const TensorView& x, const TensorView& out);

void softmax_bwd(const Plan& plan, const SoftmaxProblem& p, const TensorView& grad, const TensorView& output,
                 const TensorView& grad_input);

// The team size of the kernels' parallel regions (OpenMP's max threads, at
// least 1): what the API layer puts in SoftmaxProblem::cpu_threads.
int softmax_threads();
// The level-2 cache of cpu0 in bytes (sysfs, else sysconf; 0 when unknown), or the
// test override when it is >= 0 (default -1): what the API layer puts in
// SoftmaxProblem::cpu_l2_bytes.
int64_t softmax_l2_bytes();
std::atomic<int64_t>& softmax_l2_override();

// The builds of the kernels: the baseline ISA (x86-64: SSE2), AVX2 + FMA + F16C,
// AVX-512 (F, BW, VL, DQ); the last two with GCC on x86-64 only.
enum class SoftmaxIsa : int { Baseline = 0, Avx2 = 1, Avx512 = 2 };
const char* softmax_isa_name(SoftmaxIsa isa);
// The best build this CPU can run (and this compiler built).
SoftmaxIsa softmax_best_isa();
// The kernels run min(softmax_best_isa(), cap); tests lower the cap to run the
// other builds on this machine too (default: no cap).
std::atomic<int>& softmax_isa_cap();
SoftmaxIsa softmax_isa();

// Streaming (non-temporal) stores for outputs that are written once: mode 0 (the
// default) streams when the call moves more bytes than the last-level cache share
// of its threads (the output would leave the cache before anyone reads it), 1
// never, 2 always (tests force both).
std::atomic<int>& softmax_stream_mode();
bool softmax_stream_output(int64_t bytes_moved);
// The parsers behind that cache share (sysfs): a cache size ("32768K", "2M",
// "512"; 0 when malformed) and the CPU count of a list ("0-1", "0,2-3,8"; 0 when
// malformed).
int64_t parse_cache_size(std::string_view s);
int64_t count_cpu_list(std::string_view s);
// The share of the last-level cache that the rule above assumes per CPU: the
// machine's report, at most kMaxLlcSharePerCpu. Virtual machines can report the
// host package's whole L3 as shared by their few vCPUs: the development machine
// of session 38 reports 480 MiB shared by its 2 vCPUs (240 MiB a CPU), so that no
// call under 480 MiB streamed, while there streaming stores take 0.64-0.73 of the
// ordinary stores' time from 128 MiB moved (a 64 MiB float32 tensor), and ordinary
// stores are as fast or up to 1.11x faster only up to 64 MiB moved
// (bench/results/dev-session38/cpu-softmax-stream-crossover.md). No real part has more than ~16 MiB of
// LLC a core (3D V-Cache parts: 12 MiB), so the cap changes nothing where the
// report is physical (the H200 host: 300 MiB / 16 CPUs = 18.75 MiB a CPU).
inline constexpr int64_t kMaxLlcSharePerCpu = int64_t(32) << 20;
int64_t capped_llc_share(int64_t reported);

// The distance in bytes of the software prefetch along the rows of a long
// spatial tile (spatial_stream's two passes, the spatial backward's sum pass on
// rows past kWriteAheadMaxRow): each vector's pass prefetches the line this far
// ahead in its row (at most a row), or in the row it reads next past the tile's
// end. 0: off (the backward then prefetches whole rows ahead, as before session
// 39). Default: kLongRowPrefetchBytes; benchmarks and tests set it.
std::atomic<int64_t>& softmax_long_row_prefetch();
// Its default (bench/NOTES.md, session 39: measured on [8192, 8192] over dim 0,
// whose rows are 16 KiB of the slab a thread).
inline constexpr int64_t kLongRowPrefetchBytes = 4096;

// The last-dim forward's rows as a pipeline (session 40): 1 (default) writes row
// r in the loops that read row r + 1 for its statistics (every row of the float32
// / float64 kernel, block by block; rows of one block in the 16-bit kernel), so
// that the streaming stores of one row and the loads of the next are in flight
// together; 0: the passes of each row one after the other, as before. Either way
// every output bit is the same (the same operations in the same order per row).
std::atomic<int>& softmax_lastdim_overlap();
// The same pipeline in the spatial forward (session 40): 1 (default) writes tile t
// of a thread's tiles in the exps pass of tile t + 1 (when the two have the same
// width), so that the compute-bound statistics of one tile and the stores of the
// previous are in flight together; 0: each tile's write pass after its statistics.
// The same bits either way.
std::atomic<int>& softmax_spatial_overlap();

// Test hooks: n values through the kernels' vector loads (widen) and stores
// (narrow) of the given build, whole vectors and a partial last one.
void softmax_widen(SoftmaxIsa isa, const half_t* in, float* out, int64_t n);
void softmax_widen(SoftmaxIsa isa, const bfloat16_t* in, float* out, int64_t n);
void softmax_narrow(SoftmaxIsa isa, const float* in, half_t* out, int64_t n);
void softmax_narrow(SoftmaxIsa isa, const float* in, bfloat16_t* out, int64_t n);
// The kernels' float exp (log with log = true) of the given build on n values.
void softmax_vec_math(SoftmaxIsa isa, bool log, const float* in, float* out, int64_t n);
// The 16-bit forwards' exp (VecF::exp16) of the given build on n values.
void softmax_vec_exp16(SoftmaxIsa isa, const float* in, float* out, int64_t n);

}  // namespace segred::cpu
