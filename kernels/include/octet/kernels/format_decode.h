// The stored number formats (weight.h) decoded to float one element at a time,
// as inline functions that compile for the host and, under nvcc, for the
// device too (OCTET_HD). The CUDA kernels decode weights and KV caches with
// these; tests/unit/kernels/test_format_decode checks every code of every
// format against the reference conversions in weight.h (Bf16ToF32, F16ToF32,
// E4m3ToF32, kE2m1Values), and tests/gpu/test_cuda_kernels checks the device
// kernels that use them code by code again.
//
// Values are computed from their bits with a few integer and float operations
// instead of a table: a table lookup in a kernel is a dependent load from
// memory (or constant-cache serialisation when the lanes' codes differ).
//
// Everything here is exact: each format's every value is a float, so there is
// no rounding, only bit placement. NaN codes decode to a quiet NaN (the
// payload is not preserved everywhere; only NaN-ness is part of the contract).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define OCTET_HD __host__ __device__
#else
#define OCTET_HD
#endif

namespace octet::kernels {

// The float whose IEEE-754 bits are `bits`.
OCTET_HD inline float FloatFromBits(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

// bfloat16: the upper half of a float.
OCTET_HD inline float DecodeBf16(uint16_t h) {
  return FloatFromBits(static_cast<uint32_t>(h) << 16);
}

// IEEE binary16 (1 sign, 5 exponent bits with bias 15, 10 mantissa bits).
OCTET_HD inline float DecodeF16(uint16_t h) {
#if defined(__CUDA_ARCH__)
  // One cvt.f32.f16: every half is exactly a float, so the hardware widening
  // is the same function as the arithmetic below (tests/gpu checks all codes).
  return __half2float(__ushort_as_half(h));
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact (mant < 2^10).
    const float v = static_cast<float>(mant) * 0x1p-24f;
    return sign ? -v : v;
  }
  if (exp == 31) return FloatFromBits(sign | 0x7f800000u | (mant << 13));  // inf, NaN
  // Rebias the exponent (15 -> 127) and widen the mantissa (10 -> 23 bits).
  return FloatFromBits(sign | ((exp + 112u) << 23) | (mant << 13));
#endif
}

// float8 E4M3 "fn" (1 sign, 4 exponent bits with bias 7, 3 mantissa bits; no
// infinities; 0x7f and 0xff are NaN; subnormals below 2^-6).
OCTET_HD inline float DecodeE4m3(uint8_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x80u) << 24;
  const uint32_t exp = (code >> 3) & 0xfu;
  const uint32_t mant = code & 0x7u;
  if ((code & 0x7fu) == 0x7fu) return FloatFromBits(0x7fc00000u);
  if (exp == 0) {
    // Zero or subnormal: mant/8 * 2^-6 = mant * 2^-9, exact.
    const float v = static_cast<float>(mant) * 0x1p-9f;
    return sign ? -v : v;
  }
  // 2^(exp-7) * (1 + mant/8): exponent field exp - 7 + 127, mantissa on top.
  return FloatFromBits(sign | ((exp + 120u) << 23) | (mant << 20));
}

// E2M1 (FP4): bit 3 the sign, bits 2..1 the exponent (bias 1), bit 0 the
// mantissa: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives. Only the low four
// bits of `code` are read.
OCTET_HD inline float DecodeE2m1(uint32_t code) {
  const uint32_t mag = code & 0x7u;
  // Codes 0 and 1 are the subnormals 0 and 0.5; from 2 on the value is
  // 2^(e-1) * (1 + m/2), i.e. exponent field (mag >> 1) - 1 + 127.
  const float v = mag < 2 ? 0.5f * static_cast<float>(mag)
                          : FloatFromBits((((mag >> 1) + 126u) << 23) | ((mag & 1u) << 22));
  return (code & 0x8u) ? -v : v;
}

// The E2M1 code of column `col` of an NVFP4 row (two codes per byte, the even
// column in the low nibble).
OCTET_HD inline uint32_t Nvfp4Code(const uint8_t* row, int64_t col) {
  const uint8_t byte = row[col >> 1];
  return (col & 1) ? (byte >> 4) : (byte & 0xfu);
}

}  // namespace octet::kernels
