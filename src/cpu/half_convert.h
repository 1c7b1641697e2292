// Branch-free float16 <-> float32 conversions for CPU kernel loops.
//
// dtype.h's to_float/to_half are exact but branchy (a loop for subnormals), which
// keeps every loop that calls them scalar. These give the same values (exact
// widening; round-to-nearest-even narrowing, subnormals and overflow to inf
// included; a NaN stays quiet, with its sign and top payload bits) using only
// integer masks and one float add, so loops over them vectorise. Checked against
// dtype.h on every half value and on float sweeps in tests/cpp/test_softmax.cpp.
// After F. Giesen's half_to_float_fast5 / float_to_half_fast3_rtne (public domain).
#pragma once
#include <cstdint>
#include <cstring>

#include "segred/dtype.h"

namespace segred::cpu {

inline float half_to_float_vec(half_t h) {
  const uint32_t shifted = (uint32_t(h.bits) & 0x7fffu) << 13;  // exponent and mantissa
  const uint32_t exp = shifted & 0x0f800000u;
  uint32_t o = shifted + (uint32_t(127 - 15) << 23);
  o += exp == 0x0f800000u ? uint32_t(128 - 16) << 23 : 0u;  // inf / nan: exponent to 255
  o += exp == 0 ? 1u << 23 : 0u;                            // zero / subnormal: renormalise below
  float f;
  std::memcpy(&f, &o, 4);
  const float sub = exp == 0 ? 6.103515625e-05f : 0.0f;  // 2^-14
  f -= sub;
  uint32_t b;
  std::memcpy(&b, &f, 4);
  b |= (uint32_t(h.bits) & 0x8000u) << 16;
  std::memcpy(&f, &b, 4);
  return f;
}

inline half_t float_to_half_vec(float x) {
  uint32_t f;
  std::memcpy(&f, &x, 4);
  const uint32_t sign = f & 0x80000000u;
  f ^= sign;
  // Normal range: rebias the exponent, round to nearest even on the 13 dropped bits.
  const uint32_t odd = (f >> 13) & 1u;
  const uint32_t normal = (f + (uint32_t(15 - 127) << 23) + 0xfffu + odd) >> 13;
  // Subnormal range (|x| < 2^-14): the float add with 0.5 rounds (nearest even) at
  // the half subnormal's last place.
  float fa;
  std::memcpy(&fa, &f, 4);
  fa += 0.5f;
  uint32_t sb;
  std::memcpy(&sb, &fa, 4);
  const uint32_t subnormal = sb - 0x3f000000u;
  // NaN: quiet, the top payload bits kept (as dtype.h and F16C); inf and overflow: inf.
  const uint32_t special = f > 0x7f800000u ? 0x7e00u | ((f >> 13) & 0x3ffu) : 0x7c00u;
  uint32_t o = f >= 0x47800000u ? special : (f < 0x38800000u ? subnormal : normal);
  o |= sign >> 16;
  return half_t{uint16_t(o)};
}

// Load/store for kernel loops: the vectorisable forms for float16, dtype.h's
// (already branch-free) forms for the other types.
inline float ld(half_t v) { return half_to_float_vec(v); }
inline float ld(bfloat16_t v) { return load(v); }
inline float ld(float v) { return v; }
inline double ld(double v) { return v; }

template <class T> inline T st(acc_t<T> v) { return store<T>(v); }
template <> inline half_t st<half_t>(float v) { return float_to_half_vec(v); }

}  // namespace segred::cpu
