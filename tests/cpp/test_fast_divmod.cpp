// The launch-time division constants of src/cuda/fast_divmod.h (the staged and
// register spatial softmax kernels' set-up, session 41) against the `/` and `%`
// they replace, on the host: every divisor up to 2^13 against dividends at each
// multiple's edges, divisors at every power of two and its neighbours up to
// 2^31 - 1, dividends up to 2^31 - 1, and random pairs. The device computes the
// same umulhi (its definition), so a wrong constant shows here without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "src/cuda/fast_divmod.h"

using segred::cuda::FastDivmod;

namespace {

// Dividends near 0, near 2^31 - 1, and at k*d - 1, k*d, k*d + 1 for several k
// (including the last multiples below 2^31).
std::vector<int32_t> dividends_for(int64_t d) {
  std::vector<int64_t> v;
  for (int64_t n = 0; n < 70; ++n) v.push_back(n);
  for (int64_t n = INT32_MAX - 70; n <= INT32_MAX; ++n) v.push_back(n);
  const int64_t top = int64_t(INT32_MAX) / d;
  for (int64_t k : {int64_t(1), int64_t(2), int64_t(3), int64_t(7), int64_t(1000), top / 2, top - 1, top, top + 1})
    for (int64_t e = -1; e <= 1; ++e) v.push_back(k * d + e);
  std::vector<int32_t> out;
  for (int64_t n : v)
    if (n >= 0 && n <= INT32_MAX) out.push_back(int32_t(n));
  return out;
}

void check(int64_t d) {
  const FastDivmod f = FastDivmod::make(d);
  ASSERT_TRUE(f.valid()) << "d = " << d;
  for (int32_t n : dividends_for(d)) {
    ASSERT_EQ(f.div(n), int32_t(n / d)) << "n = " << n << ", d = " << d;
    ASSERT_EQ(f.mod(n), int32_t(n % d)) << "n = " << n << ", d = " << d;
  }
}

}  // namespace

TEST(FastDivmod, EverySmallDivisor) {
  for (int64_t d = 1; d <= 8192; ++d) check(d);
}

TEST(FastDivmod, PowersOfTwoAndNeighboursUpTo2Pow31) {
  for (int b = 1; b <= 31; ++b) {
    const int64_t p = int64_t(1) << b;
    for (int64_t d : {p - 3, p - 2, p - 1, p, p + 1, p + 3})
      if (d >= 1 && d <= INT32_MAX) check(d);
  }
  // Shapes' inner products seen in the benchmarks (56 * 56, 4096, 2^24) and odd ones.
  for (int64_t d : {int64_t(3136), int64_t(4096), int64_t(1) << 24, int64_t(1000003), int64_t(INT32_MAX)}) check(d);
}

TEST(FastDivmod, RandomPairs) {
  std::mt19937_64 rng(41);
  for (int i = 0; i < 200000; ++i) {
    const int bits = int(rng() % 31) + 1;
    const int64_t d = int64_t(rng() % (uint64_t(1) << bits)) + 1;
    if (d > INT32_MAX) continue;
    const FastDivmod f = FastDivmod::make(d);
    const int32_t n = int32_t(rng() % (uint64_t(INT32_MAX) + 1));
    ASSERT_EQ(f.div(n), int32_t(n / d)) << "n = " << n << ", d = " << d;
    ASSERT_EQ(f.mod(n), int32_t(n % d)) << "n = " << n << ", d = " << d;
  }
}

TEST(FastDivmod, DivisorOutOfRangeIsInvalid) {
  EXPECT_FALSE(FastDivmod::make(0).valid());
  EXPECT_FALSE(FastDivmod::make(-5).valid());
  EXPECT_FALSE(FastDivmod::make(int64_t(INT32_MAX) + 1).valid());
  EXPECT_TRUE(FastDivmod::make(1).valid());
  EXPECT_TRUE(FastDivmod::make(INT32_MAX).valid());
}
