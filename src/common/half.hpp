#pragma once
// Scalar conversions for the 16-bit float formats (IEEE half and bfloat16), which C++20 lacks.

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace rdmacoll::detail {

inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  float magnitude;
  if (exp == 0) {
    magnitude = std::ldexp(static_cast<float>(mant), -24);  // zero or subnormal
  } else if (exp == 31) {
    magnitude = mant ? std::nanf("") : INFINITY;
  } else {
    magnitude = std::ldexp(static_cast<float>(mant | 0x400u), static_cast<int>(exp) - 25);
  }
  return std::bit_cast<float>(std::bit_cast<uint32_t>(magnitude) | sign);
}

// Round to nearest even, as torch does.
inline uint16_t float_to_half(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00u;
  if (a >= 65520.0f) return sign | 0x7c00u;  // overflows to infinity
  if (a < 6.103515625e-05f) {                // subnormal half: multiples of 2^-24
    const float scaled = a * 16777216.0f;    // exact
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  const uint32_t ax = std::bit_cast<uint32_t>(a);
  uint32_t exp = ((ax >> 23) & 0xffu) - 127u + 15u;
  uint32_t mant = ax & 0x7fffffu;
  uint32_t half_mant = mant >> 13;
  const uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half_mant & 1u))) {
    ++half_mant;
    if (half_mant == 0x400u) {
      half_mant = 0;
      ++exp;
    }
  }
  return static_cast<uint16_t>(sign | (exp << 10) | half_mant);
}

inline float bfloat16_to_float(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

inline uint16_t float_to_bfloat16(float f) {
  if (std::isnan(f)) return 0x7fc0u;
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

}  // namespace rdmacoll::detail
