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
// tests), written without branches or libm calls; 2^n is applied as two normal
// powers so results that are float subnormals are right too. NaN in, NaN out;
// -inf and x < -104 give 0; x > 88.73 gives +inf. double: libm (float64 is the
// reference-precision type).
//
// exp_poly is that float exp written once for a scalar float (F = float,
// I = int32_t) and for the CPU kernels' float vectors (GCC/Clang vector
// extensions, src/cpu/softmax_vec_kernels.inc; I the int32 vector of the same
// width). Only operators and always-inlined helpers, so that it inlines into
// kernels compiled for wider instruction sets (a call to a function of a wider
// target would not inline) at every optimisation level. Host only.
#if defined(__GNUC__)
#define SEGRED_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define SEGRED_ALWAYS_INLINE inline
#endif
template <class To, class From>
SEGRED_ALWAYS_INLINE To bits_as(const From& f) {
  static_assert(sizeof(To) == sizeof(From));
  To t;
  std::memcpy(&t, &f, sizeof t);
  return t;
}
// The three steps, apart so that a kernel can replace the outer ones with
// instructions of its own (AVX-512: vrndscaleps and vscalefps): exp_core is the
// polynomial on the reduced argument r = x - n ln2, |r| <= ln2 / 2; exp_clamped
// takes x already clamped to [-110, 89] (or NaN); exp_poly clamps first.
// Vector arguments by reference: GCC notes an ABI change for 64-byte vectors
// passed by value to a function outside an AVX-512 target region.
constexpr float kExpLog2e = 1.44269504088896341f;
constexpr float kExpLn2Hi = 0.693359375f, kExpLn2Lo = -2.12194440e-4f;  // ln2 = hi + lo
template <class F>
SEGRED_ALWAYS_INLINE F exp_core(const F& r) {
  F p = r * 1.9875691500e-4f + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * r * r + r + 1.0f;
}
template <class F, class I>
SEGRED_ALWAYS_INLINE F exp_clamped(const F& x) {
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const F t = x * kExpLog2e + magic;
  const F n = t - magic;
  const I ni = bits_as<I>(t) - 0x4b400000;  // bits of `magic`: ni = n as an integer, in [-159, 129]
  F r = x - n * kExpLn2Hi;
  r = r - n * kExpLn2Lo;
  const F p = exp_core(r);
  const I n1 = ni >> 1, n2 = ni - n1;  // each in [-80, 64]: 2^n1, 2^n2 are normal
  return p * bits_as<F>((n1 + 127) << 23) * bits_as<F>((n2 + 127) << 23);
}
template <class F, class I>
SEGRED_ALWAYS_INLINE F exp_poly(F x) {
  const F lo = F{} - 110.0f, hi = F{} + 89.0f;
  x = x < lo ? lo : x;  // NaN passes through both
  x = x > hi ? hi : x;
  return exp_clamped<F, I>(x);
}

SEGRED_HD float exp_acc(float x) {
#if defined(__CUDA_ARCH__)
  return ::expf(x);
#else
  return exp_poly<float, int32_t>(x);
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
