// Division by a launch-time constant as a multiply-high and a shift (Granlund and
// Montgomery, "Division by invariant integers using multiplication", PLDI 1994;
// the 31-bit form of CUTLASS's FastDivmod), host- and device-callable and free of
// CUDA headers, so that a CPU test (tests/cpp/test_fast_divmod.cpp) checks the
// constants the launchers compute.
//
// Why (bench/NOTES.md, session 41): the GPU has no integer divider. A 32-bit `/`
// or `%` by a runtime value is ~20 instructions (I2F.RP, MUFU.RCP, F2I, IMAD.HI
// and corrections) on one dependent chain. Nsight Compute of the staged spatial
// softmax forward (session 40) found five of them in each warp's set-up before its
// first load (the block's cluster rank and tile, the thread's column and row, the
// tile's outer index, the held-row count): ~80 of the set-up's 221 instructions,
// in a kernel that runs one tile a block.
//
// Math. For a divisor d in [2, 2^31) let l = ceil(log2 d), p = 31 + l and
// m = ceil(2^p / d) (< 2^32: d > 2^(l-1), and d = 2^l gives m = 2^31). For a
// dividend n in [0, 2^31): m*d = 2^p + e with 0 <= e < d <= 2^l, so
//   n*m / 2^p = n/d + n*e/(d*2^p),  and  n*e < 2^31 * 2^l = 2^p,
// so the error term is below 1/d and floor(n*m / 2^p) = floor(n/d): the quotient
// is umulhi(n, m) >> (p - 32). d = 1 takes the dividend as is (m would be 2^31
// with a shift of -1). Dividends and divisors outside [0, 2^31) are not handled:
// the kernels use it only on their 32-bit index variants, whose Plan bounds keep
// every dividend below 2^31 (the 64-bit variants keep the plain division).
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define SEGRED_FDM_HD __host__ __device__ __forceinline__
#else
#define SEGRED_FDM_HD inline
#endif

namespace segred::cuda {

struct FastDivmod {
  int32_t d = 1;       // the divisor
  uint32_t mul = 0;    // m (0 for d = 1)
  uint32_t shift = 0;  // p - 32

  // The constants for divisor d, 1 <= d < 2^31 (the launchers check; a divisor
  // outside that range gives d = 0 and `valid()` false).
  static FastDivmod make(int64_t d) {
    FastDivmod f;
    if (d < 1 || d > INT32_MAX) {
      f.d = 0;
      return f;
    }
    f.d = int32_t(d);
    if (d == 1) return f;
    int l = 0;
    while ((int64_t(1) << l) < d) ++l;
    const int p = 31 + l;
    f.mul = uint32_t(((uint64_t(1) << p) + uint64_t(d) - 1) / uint64_t(d));
    f.shift = uint32_t(p - 32);
    return f;
  }
  SEGRED_FDM_HD bool valid() const { return d >= 1; }

  // floor(n / d) for 0 <= n < 2^31.
  SEGRED_FDM_HD int32_t div(int32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t hi = __umulhi(uint32_t(n), mul);
#else
    const uint32_t hi = uint32_t((uint64_t(uint32_t(n)) * mul) >> 32);
#endif
    return d == 1 ? n : int32_t(hi >> shift);
  }
  // n mod d for 0 <= n < 2^31.
  SEGRED_FDM_HD int32_t mod(int32_t n) const { return n - div(n) * d; }
};

}  // namespace segred::cuda
