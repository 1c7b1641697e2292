// Softmax building blocks shared by the CPU and (future) CUDA kernels
// (DESIGN.md, layer 4): the online max/sum-of-exp merge, the NaN rule, and the
// forward and backward epilogues. Everything is a scalar function of the
// accumulation type A (float or double), branch-free, so a CPU loop over it
// vectorises and a CUDA thread can call it as is.
//
// Online softmax statistics. A row is reduced block by block; after each block
// with maximum mc the running (m, s) become
//   m' = max(m, mc)                  (NaN-propagating, ops::MaxTag)
//   s' = s * exp(m - m') + sum_block exp(x - base(m'))
// where base(m') = m' except that an all -inf prefix (m' == -inf) uses 0, so
// exp(-inf - 0) = 0 adds nothing instead of exp(-inf + inf) = NaN. With a finite
// final m, s lies in [1, D]. The NaN rule of SEMANTICS.md then needs no per
// element test: row_base(m) is NaN unless m is finite (m = NaN: a NaN in the row;
// m = +inf: a +inf in the row; m = -inf: every value is -inf), and every
// epilogue turns a NaN base into NaN for the whole row.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "src/ops/reduce_ops.h"

namespace segred::ops {

// exp in the accumulation type. float: Cody-Waite range reduction and Cephes'
// degree-6 minimax polynomial (max error about 2 ulp, measured against double in
// tests), written without branches or libm calls so that a loop over it
// vectorises; 2^n is applied as two normal powers so results that are float
// subnormals are right too. NaN in, NaN out; -inf and x < -104 give 0; x > 88.73
// gives +inf. double: libm (float64 is the reference-precision type).
SEGRED_HD float exp_acc(float x) {
#if defined(__CUDA_ARCH__)
  return ::expf(x);
#else
  // Quiet comparisons (no FP exception on NaN), so the compiler may turn these
  // selects into vector blends; with `<` under -ftrapping-math it keeps a branch
  // and the whole loop stays scalar (measured: 8x slower). NaN passes through.
  x = std::isless(x, -110.0f) ? -110.0f : x;
  x = std::isgreater(x, 89.0f) ? 89.0f : x;
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = x * 1.44269504088896341f + magic;
  const float n = t - magic;
  int32_t ni;
  std::memcpy(&ni, &t, 4);
  ni -= 0x4b400000;  // bits of `magic`: ni = n as an integer, in [-159, 129]
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t n1 = ni >> 1, n2 = ni - n1;  // each in [-80, 64]: 2^n1, 2^n2 are normal
  const uint32_t b1 = uint32_t(n1 + 127) << 23, b2 = uint32_t(n2 + 127) << 23;
  float s1, s2;
  std::memcpy(&s1, &b1, 4);
  std::memcpy(&s2, &b2, 4);
  return p * s1 * s2;
#endif
}
SEGRED_HD double exp_acc(double x) { return std::exp(x); }

SEGRED_HD float log_acc(float x) { return std::log(x); }
SEGRED_HD double log_acc(double x) { return std::log(x); }

template <class A> SEGRED_HD A neg_inf() { return -std::numeric_limits<A>::infinity(); }

// The block-merge of the online statistics (see the top of this file).
// Factor that rescales a sum taken against m_old to one against m_new.
template <class A> SEGRED_HD A rescale(A m_old, A m_new) { return m_old == m_new ? A(1) : exp_acc(m_old - m_new); }
// What to subtract before exp while the running max is m.
template <class A> SEGRED_HD A sum_base(A m) { return m == neg_inf<A>() ? A(0) : m; }
// The NaN rule: the row's base is its max when finite, else NaN (x - x is 0 only for finite x).
template <class A> SEGRED_HD A row_base(A m) { return (m - m == A(0)) ? m : std::numeric_limits<A>::quiet_NaN(); }

// Forward epilogues: from the final statistics (base = row_base(m), s) to a
// per-row constant k, then y = apply(x, base, k) per element.
struct SoftmaxFwd {
  static constexpr bool log = false;
  template <class A> static SEGRED_HD A row_const(A s) { return A(1) / s; }
  template <class A> static SEGRED_HD A apply(A x, A base, A k) { return exp_acc(x - base) * k; }
};
struct LogSoftmaxFwd {
  static constexpr bool log = true;
  template <class A> static SEGRED_HD A row_const(A s) { return log_acc(s); }
  template <class A> static SEGRED_HD A apply(A x, A base, A k) { return (x - base) - k; }
};

// Backward: acc = sum over the row of term(g, y); then gI = apply(g, y, acc).
struct SoftmaxBwd {
  static constexpr bool log = false;
  template <class A> static SEGRED_HD A term(A g, A y) { return g * y; }
  template <class A> static SEGRED_HD A apply(A g, A y, A acc) { return y * (g - acc); }
};
struct LogSoftmaxBwd {
  static constexpr bool log = true;
  template <class A> static SEGRED_HD A term(A g, A /*y*/) { return g; }
  template <class A> static SEGRED_HD A apply(A g, A y, A acc) { return g - exp_acc(y) * acc; }
};

}  // namespace segred::ops
