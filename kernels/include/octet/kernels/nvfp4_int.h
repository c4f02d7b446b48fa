// NVFP4 products in integers, as inline functions that compile for the host
// and, under nvcc, for the device (OCTET_HD, format_decode.h): the arithmetic
// of the CUDA integer decode matmul (kernels/cuda/src/gemv_int.cu), kept here
// so that tests/unit/kernels/test_nvfp4_int checks it on any machine, code by
// code and block by block, with the host forms of the two device instructions
// it is built on.
//
// Why integers. The float decode kernel (gemv.cu) widens every E2M1 code to
// float through a half2 conversion, and conversions run at a fraction of the
// FMA rate: on an H200 it reads NVFP4 at 20-33% of the copy rate at one row.
// Here a 16-entry byte table (three PRMTs per four codes) turns codes into
// signed bytes, and DP4A multiplies four of them by four activation bytes and
// adds: no conversion per weight, one per 16-column block.
//
// The weights. 2 x E2M1 is an integer in -12..12 (E2M1 values are multiples
// of 1/2 up to 6), exactly a signed byte; the 1/2 goes on the result.
//
// The activations, exactly enough (the CPU tile kernels' scheme, isa_avx512_
// vnni.cpp): each 16-column block is scaled by a power of two 2^-e so its
// largest magnitude lies below 2^22, rounded to integers q (an error below
// 2^-23 of the block's largest value, about float's own rounding), and q is
// split into three signed bytes, q = b0 + 256 b1 + 65536 b2, so one block of
// one weight row is three 4-step DP4A chains, combined in int32 (at most
// 16 x 12 x 2^22 < 2^31: exact) and converted once. Non-finite blocks keep
// float's semantics: NaN anywhere makes the block's scale NaN (every product
// NaN); otherwise an infinity makes it +inf with q = the infinities' signs,
// and such a block is summed column by column in float (Nvfp4IntChunkFmaAny).
#pragma once

#include <cmath>
#include <cstdint>

#include "octet/kernels/format_decode.h"

// Loops over a few registers' worth, unrolled on the device (where an
// array indexed at run time would live in local memory); nothing for the
// host compilers (GCC warns about the pragma).
#if defined(__CUDA_ARCH__)
#define OCTET_UNROLL _Pragma("unroll")
#else
#define OCTET_UNROLL
#endif

namespace octet::kernels {

// Bytes of one packed activation block: three parts of 16 signed bytes.
inline constexpr int kNvfp4IntBlockBytes = 48;

// CUDA's __byte_perm: byte n of the result is byte (s >> 4n) & 7 of the eight
// bytes of (y:x), x's bytes first. Only the low three bits of each selector
// nibble count (callers keep the fourth clear).
OCTET_HD inline uint32_t BytePerm(uint32_t x, uint32_t y, uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, s);
#else
  const uint64_t b = static_cast<uint64_t>(y) << 32 | x;
  uint32_t r = 0;
  OCTET_UNROLL
  for (int n = 0; n < 4; ++n) {
    const uint32_t sel = (s >> (4 * n)) & 7u;
    r |= static_cast<uint32_t>((b >> (8 * sel)) & 0xffu) << (8 * n);
  }
  return r;
#endif
}

// CUDA's __dp4a for signed bytes: c + the sum of the four byte products.
OCTET_HD inline int32_t Dp4a(uint32_t a, uint32_t b, int32_t c) {
#if defined(__CUDA_ARCH__)
  return __dp4a(static_cast<int>(a), static_cast<int>(b), c);
#else
  OCTET_UNROLL
  for (int n = 0; n < 4; ++n) {
    c += static_cast<int8_t>(a >> (8 * n)) * static_cast<int8_t>(b >> (8 * n));
  }
  return c;
#endif
}

// The four E2M1 codes in the low four nibbles of `codes` (nibble n, column n)
// as four signed bytes 2 x value (byte n, column n). The table's positive and
// negative halves are looked up by the three magnitude bits, and a third PRMT
// picks, byte by byte, the half the sign bit names.
OCTET_HD inline uint32_t E2m1x4ToInt8(uint32_t codes) {
  constexpr uint32_t kPos0 = 0x03020100u;  // 0, 1, 2, 3      (codes 0-3: 0, 0.5, 1, 1.5)
  constexpr uint32_t kPos1 = 0x0c080604u;  // 4, 6, 8, 12     (codes 4-7: 2, 3, 4, 6)
  constexpr uint32_t kNeg0 = 0xfdfeff00u;  // 0, -1, -2, -3   (codes 8-11)
  constexpr uint32_t kNeg1 = 0xf4f8fafcu;  // -4, -6, -8, -12 (codes 12-15)
  const uint32_t mag = codes & 0x7777u;
  const uint32_t pos = BytePerm(kPos0, kPos1, mag);
  const uint32_t neg = BytePerm(kNeg0, kNeg1, mag);
  // Selector n: byte n of pos (n) or of neg (n + 4) by the code's bit 3.
  return BytePerm(pos, neg, 0x3210u | ((codes >> 1) & 0x4444u));
}

// One 16-column block of activations packed for the DP4A products: out[16 p
// + c] is byte p of column c's integer; the block's scale (2^e, or NaN / +inf
// as above) is returned. 0 for an all-zero block (q = 0 everywhere).
OCTET_HD inline float PackNvfp4IntBlock(const float* v, int8_t* out) {
  float amax = 0.0f;
  bool nan = false, inf = false;
  OCTET_UNROLL
  for (int c = 0; c < 16; ++c) {
    const float a = fabsf(v[c]);
    nan = nan || a != a;
    inf = inf || a == INFINITY;
    amax = a > amax ? a : amax;
  }
  int32_t q[16];
  float scale;
  if (nan || inf) {
    OCTET_UNROLL
    for (int c = 0; c < 16; ++c) q[c] = fabsf(v[c]) == INFINITY ? (v[c] > 0 ? 1 : -1) : 0;
    scale = nan ? NAN : INFINITY;
  } else if (amax == 0.0f) {
    OCTET_UNROLL
    for (int c = 0; c < 16; ++c) q[c] = 0;
    scale = 0.0f;
  } else {
    // amax < 2^e; v * 2^(22 - e) has magnitude below 2^22 and is exact
    // (scalbnf of a finite float by a power of two that stays in range), and
    // rounding it to an integer (to nearest, ties to even) gives |q| <= 2^22.
    int e;
    frexpf(amax, &e);
    OCTET_UNROLL
    for (int c = 0; c < 16; ++c) q[c] = static_cast<int32_t>(rintf(scalbnf(v[c], 22 - e)));
    // 2^(e - 22): a subnormal or zero for blocks below about 2^-104 (their
    // products stay far below any float sum they could join).
    scale = scalbnf(1.0f, e - 22);
  }
  OCTET_UNROLL
  for (int c = 0; c < 16; ++c) {
    // q = b0 + 256 q1 with b0 in -128..127; likewise q1 = b1 + 256 b2, and
    // |q| <= 2^22 keeps b2 in -64..64.
    const int32_t q1 = (q[c] + 128) >> 8;
    const int32_t q2 = (q1 + 128) >> 8;
    out[c] = static_cast<int8_t>(q[c] - q1 * 256);
    out[16 + c] = static_cast<int8_t>(q1 - q2 * 256);
    out[32 + c] = static_cast<int8_t>(q2);
  }
  return scale;
}

// The sum over one 16-column block of one weight row, (2 x E2M1 code) x q, in
// int32: w[0..3] are the row's codes of columns 0-3, 4-7, 8-11 and 12-15 as
// E2m1x4ToInt8 gives them, part[p][0..3] the block's part p as four words
// (PackNvfp4IntBlock's bytes 16p.. read as little-endian words).
OCTET_HD inline int32_t Nvfp4IntBlockDot(const uint32_t* w, const uint32_t (&part)[3][4]) {
  int32_t s[3];
  OCTET_UNROLL
  for (int p = 0; p < 3; ++p) {
    int32_t acc = 0;
    OCTET_UNROLL
    for (int t = 0; t < 4; ++t) acc = Dp4a(w[t], part[p][t], acc);
    s[p] = acc;
  }
  return s[0] + s[1] * 256 + s[2] * 65536;
}

// One chunk of a weight row, 32 columns (two blocks), decoded once for every
// activation row: w[2q] and w[2q + 1] are the signed bytes of columns 8q..8q+3
// and 8q+4..8q+7, scale[b] block b's E4M3 scale.
struct Nvfp4IntChunk {
  uint32_t w[8];
  float scale[2];
};

// From the chunk's 16 code bytes read as four little-endian words (word q:
// columns 8q..8q+7, low nibble first) and its blocks' decoded E4M3 scales
// (DecodeE4m3; the kernel looks them up in a table it fills with it).
OCTET_HD inline void DecodeNvfp4IntChunk(const uint32_t (&words)[4], float scale0, float scale1,
                                         Nvfp4IntChunk* out) {
  OCTET_UNROLL
  for (int q = 0; q < 4; ++q) {
    out->w[2 * q] = E2m1x4ToInt8(words[q]);
    out->w[2 * q + 1] = E2m1x4ToInt8(words[q] >> 16);
  }
  out->scale[0] = scale0;
  out->scale[1] = scale1;
}

// acc + the chunk's products with one activation row's two packed blocks
// there (parts[b]: block b's three parts as words; ascale[b]: its scale), in
// units of the weights' global scale x 2 (the codes are doubled). For blocks
// without infinities (a NaN scale makes every product NaN, as it should).
OCTET_HD inline float Nvfp4IntChunkFma(const Nvfp4IntChunk& c, const uint32_t (&parts)[2][3][4],
                                       const float (&ascale)[2], float acc) {
  OCTET_UNROLL
  for (int b = 0; b < 2; ++b) {
    const int32_t dot = Nvfp4IntBlockDot(c.w + 4 * b, parts[b]);
    acc = fmaf(static_cast<float>(dot), ascale[b] * c.scale[b], acc);
  }
  return acc;
}

// The same for any blocks, infinities included: an infinite block's sum is
// taken the way float takes it, column by column: an infinity times a zero
// weight is NaN, opposite infinities give NaN, its finite columns (q = 0)
// add nothing. Slow; for the rare chunk whose activations hold an infinity.
OCTET_HD inline float Nvfp4IntChunkFmaAny(const Nvfp4IntChunk& c, const uint32_t (&parts)[2][3][4],
                                          const float (&ascale)[2], float acc) {
  OCTET_UNROLL
  for (int b = 0; b < 2; ++b) {
    if (ascale[b] != INFINITY) {
      const int32_t dot = Nvfp4IntBlockDot(c.w + 4 * b, parts[b]);
      acc = fmaf(static_cast<float>(dot), ascale[b] * c.scale[b], acc);
      continue;
    }
    float sum = 0.0f;
    OCTET_UNROLL
    for (int col = 0; col < 16; ++col) {
      const int w = static_cast<int8_t>(c.w[4 * b + col / 4] >> (8 * (col % 4)));
      const int q = static_cast<int8_t>(parts[b][0][col / 4] >> (8 * (col % 4)));
      if (q != 0) sum += static_cast<float>(w) * (q > 0 ? INFINITY : -INFINITY);
    }
    acc += sum * c.scale[b];
  }
  return acc;
}

}  // namespace octet::kernels
