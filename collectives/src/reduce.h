// Sum reductions for the collectives: plain loops the compiler vectorises
// (x86-64 SSE/AVX, aarch64 NEON), over f32, bf16 and f16.
//
// bf16 and f16 inputs are widened to f32, summed in f32 in the order the
// sources are given, and rounded once to nearest-even on store. Summing in a
// fixed source order is what makes one-shot results bit-identical on every
// rank. NaN stays NaN, overflow becomes infinity.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "octet/collectives/types.h"

namespace octet::collectives {

// The conversions are written with all-ones/all-zeros masks instead of
// branches so that loops over them vectorise.
inline uint32_t MaskIf(bool c) { return 0u - static_cast<uint32_t>(c); }

inline float Bf16ToF32(uint16_t h) { return std::bit_cast<float>(uint32_t{h} << 16); }

inline uint16_t F32ToBf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x40u;
  const uint32_t nan = MaskIf((u & 0x7fffffffu) > 0x7f800000u);
  return static_cast<uint16_t>((rounded & ~nan) | (quiet_nan & nan));
}

inline float F16ToF32(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t em = h & 0x7fffu;
  // Normal and subnormal halves: move exponent+mantissa into place and
  // rebias the exponent by multiplying with 2^(127-15); exact.
  const uint32_t finite = std::bit_cast<uint32_t>(std::bit_cast<float>(em << 13) * 0x1p112f);
  const uint32_t special = 0x7f800000u | (em << 13);  // inf, NaN (payload kept)
  const uint32_t is_special = MaskIf(em >= 0x7c00u);
  return std::bit_cast<float>(sign | (finite & ~is_special) | (special & is_special));
}

inline uint16_t F32ToF16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7fffffffu;
  // Normal results: rebias the exponent (-112 << 23), round to nearest even
  // on bit 13; a carry out of the mantissa correctly bumps the exponent (and
  // reaches infinity at 65520).
  const uint32_t normal = (a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> 13;
  // Subnormal results (|f| < 2^-14): let the FPU round by adding 0.5, whose
  // ulp is 2^-24, the f16 subnormal step.
  const uint32_t subnormal = std::bit_cast<uint32_t>(std::bit_cast<float>(a) + 0.5f) - 0x3f000000u;
  const uint32_t big = 0x7c00u | (MaskIf(a > 0x7f800000u) & 0x200u);  // inf, or NaN 0x7e00
  const uint32_t is_big = MaskIf(a >= 0x47800000u);
  const uint32_t is_sub = MaskIf(a < 0x38800000u);
  const uint32_t small = (subnormal & is_sub) | (normal & ~is_sub);
  return static_cast<uint16_t>(sign | (big & is_big) | (small & ~is_big));
}

// dst[i] = srcs[0][i] + srcs[1][i] + ... + srcs[n-1][i], for `count` elements
// of `dtype`, summed in that order. dst may be one of the sources (the sum of
// an element is formed before it is stored); sources may not otherwise
// overlap dst. n >= 1 (n == 1 copies).
void ReduceSum(DType dtype, void* dst, const void* const* srcs, int n, size_t count);

// dst[i] = a[i] + b[i] (a first); dst may equal a or b.
inline void ReduceSum2(DType dtype, void* dst, const void* a, const void* b, size_t count) {
  const void* srcs[2] = {a, b};
  ReduceSum(dtype, dst, srcs, 2, count);
}

}  // namespace octet::collectives
