// segred/dtype.h: element types of data and metadata, and the host half types.
#pragma once
#include <cstdint>
#include <cstring>
#include <string_view>

namespace segred {

enum class DType : uint8_t { Float32, Float64, Float16, BFloat16, Int32, Int64 };

constexpr int dtype_size(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Float64: return 8;
    case DType::Float16: return 2;
    case DType::BFloat16: return 2;
    case DType::Int32: return 4;
    case DType::Int64: return 8;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
  }
  return "?";
}

constexpr bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}
constexpr bool is_index(DType t) { return t == DType::Int32 || t == DType::Int64; }

// Host storage types for the 16-bit floats. Plain 16-bit payloads with exact,
// round-to-nearest-even conversions; kernels convert to float32 on load and back
// on store (SEMANTICS.md: half types accumulate in float32).
struct half_t {
  uint16_t bits;
};
struct bfloat16_t {
  uint16_t bits;
};

inline float to_float(half_t h) {
  const uint32_t sign = uint32_t(h.bits & 0x8000u) << 16;
  uint32_t exp = (h.bits >> 10) & 0x1f;
  uint32_t man = h.bits & 0x3ffu;
  uint32_t f;
  if (exp == 0x1f) {
    f = sign | 0x7f800000u | (man << 13);  // inf / nan
  } else if (exp != 0) {
    f = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    f = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do {
      ++e;
      man <<= 1;
    } while ((man & 0x400u) == 0);
    f = sign | uint32_t(112 - e) << 23 | ((man & 0x3ffu) << 13);
  }
  float out;
  std::memcpy(&out, &f, 4);
  return out;
}

inline half_t to_half(float x) {
  uint32_t f;
  std::memcpy(&f, &x, 4);
  const uint16_t sign = uint16_t((f >> 16) & 0x8000u);
  const uint32_t absf = f & 0x7fffffffu;
  if (absf >= 0x7f800000u) {  // inf or nan (keep nan quiet)
    return {uint16_t(sign | 0x7c00u | (absf > 0x7f800000u ? 0x200u | ((absf >> 13) & 0x3ffu) : 0u))};
  }
  if (absf >= 0x477ff000u) return {uint16_t(sign | 0x7c00u)};  // rounds to >= 65520: inf
  if (absf < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    if (absf < 0x33000000u) return {sign};  // < 2^-25 rounds to 0
    const uint32_t e = absf >> 23;
    const uint32_t man = (absf & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24
    uint32_t h = man >> shift;
    const uint32_t rem = man & ((1u << shift) - 1);
    const uint32_t half_way = 1u << (shift - 1);
    if (rem > half_way || (rem == half_way && (h & 1u))) ++h;
    return {uint16_t(sign | h)};
  }
  uint32_t h = ((absf >> 13) - (112u << 10));
  const uint32_t rem = absf & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return {uint16_t(sign | h)};
}

inline float to_float(bfloat16_t b) {
  const uint32_t f = uint32_t(b.bits) << 16;
  float out;
  std::memcpy(&out, &f, 4);
  return out;
}

inline bfloat16_t to_bfloat16(float x) {
  uint32_t f;
  std::memcpy(&f, &x, 4);
  if ((f & 0x7fffffffu) > 0x7f800000u) return {uint16_t((f >> 16) | 0x40u)};  // quiet nan
  const uint32_t lsb = (f >> 16) & 1u;
  f += 0x7fffu + lsb;  // round to nearest even
  return {uint16_t(f >> 16)};
}

// Load/store between a storage type and its accumulation type.
template <class T> struct Acc { using type = T; };
template <> struct Acc<half_t> { using type = float; };
template <> struct Acc<bfloat16_t> { using type = float; };
template <class T> using acc_t = typename Acc<T>::type;

inline float load(half_t v) { return to_float(v); }
inline float load(bfloat16_t v) { return to_float(v); }
inline float load(float v) { return v; }
inline double load(double v) { return v; }

template <class T> inline T store(acc_t<T> v);
template <> inline float store<float>(float v) { return v; }
template <> inline double store<double>(double v) { return v; }
template <> inline half_t store<half_t>(float v) { return to_half(v); }
template <> inline bfloat16_t store<bfloat16_t>(float v) { return to_bfloat16(v); }

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::Float32; }
template <> constexpr DType dtype_of<double>() { return DType::Float64; }
template <> constexpr DType dtype_of<half_t>() { return DType::Float16; }
template <> constexpr DType dtype_of<bfloat16_t>() { return DType::BFloat16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::Int32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::Int64; }

}  // namespace segred
