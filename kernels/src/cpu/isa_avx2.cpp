// AVX2 + FMA + F16C kernels (x86-64). Compiled with -mavx2 -mfma -mf16c and
// only called after the runtime check in src/backend.cpp; see isa.h for why
// nothing here may instantiate std:: templates (C math functions only).
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "cpu/isa.h"

namespace octet::kernels::cpu {
namespace {

#define OCTET_INLINE inline __attribute__((always_inline))
#define OCTET_INLINE_LAMBDA __attribute__((always_inline))

inline float Hsum(__m256 v) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

// Hsum of eight vectors at once, lane i = Hsum(v_i) bit for bit: the same
// pairs added in the same order (lo + hi halves, then lanes 0+2 and 1+3, then
// those two), only transposed, so 21 shuffles and adds make eight sums where
// eight Hsums take 48. A matmul of few columns (128 on nanochat-demo) spent a
// third of its time in the per-output Hsums.
OCTET_INLINE __m256 Hsum8(__m256 v0, __m256 v1, __m256 v2, __m256 v3, __m256 v4, __m256 v5,
                          __m256 v6, __m256 v7) {
  // [v.lo + v.hi | w.lo + w.hi]: four lanes of each.
  auto halves = [](__m256 v, __m256 w) OCTET_INLINE_LAMBDA {
    return _mm256_add_ps(_mm256_permute2f128_ps(v, w, 0x20), _mm256_permute2f128_ps(v, w, 0x31));
  };
  const __m256 u04 = halves(v0, v4), u15 = halves(v1, v5), u26 = halves(v2, v6),
               u37 = halves(v3, v7);
  // Lanes 0+2 and 1+3 of each: [v0 v0 v1 v1 | v4 v4 v5 v5] and v2, v3, v6, v7.
  auto pairs = [](__m256 u, __m256 t) OCTET_INLINE_LAMBDA {
    const __m256d ud = _mm256_castps_pd(u), td = _mm256_castps_pd(t);
    return _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(ud, td)),
                         _mm256_castpd_ps(_mm256_unpackhi_pd(ud, td)));
  };
  const __m256 x = pairs(u04, u15), y = pairs(u26, u37);
  return _mm256_add_ps(_mm256_shuffle_ps(x, y, 0x88), _mm256_shuffle_ps(x, y, 0xdd));
}

// out (+)= sum * scale (NVFP4's global scale), the add fused when adding:
// written out because GCC fuses `*out + sum * scale` in some kernels and not
// in others, and a row's bits must not depend on which kernel its batch takes.
OCTET_INLINE void StoreScaled(float* out, float sum, float scale, bool accumulate) {
  *out = accumulate ? fmaf(sum, scale, *out) : sum * scale;
}

// `v`, kept in a register: GCC otherwise folds a vector load that feeds
// several FMAs into each of them as a memory operand, and a step of two
// weight rows against 5 activation rows then issues 12 loads for 10 FMAs (the
// load ports, two 256-bit loads a cycle, become the bound).
OCTET_INLINE __m256 InRegister(__m256 v) {
  __asm__("" : "+x"(v));
  return v;
}

inline __m256 LoadBf16x8(const uint8_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

inline __m256 LoadF16x8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

inline __m256 LoadF32x8(const uint8_t* p) {
  return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
}

// NVFP4: 8 E2M1 codes from 4 bytes (low nibble first) -> their 8 values.
// Lane i shifts the word right by 4i so its nibble sits in bits 0-3; the
// permute reads bits 0-2 (the magnitude m). The sign (bit 3) is moved to bit
// 31 by shifting the lane left by 28, which also drags m into bits 28-30; the
// table holds value[m] ^ (m << 28), so one xor restores those bits and applies
// the sign: no mask needed (4 ALU ops per 8 values).
struct Nvfp4Decoder {
  __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  __m256 lut = _mm256_castsi256_ps(_mm256_xor_si256(
      _mm256_castps_si256(_mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f)),
      _mm256_setr_epi32(0, 1 << 28, 2 << 28, 3 << 28, 4 << 28, 5 << 28, 6 << 28, 7 << 28)));

  inline __m256 Decode8(const uint8_t* p) const {
    int32_t word;
    memcpy(&word, p, 4);
    const __m256i v = _mm256_srlv_epi32(_mm256_set1_epi32(word), shifts);
    const __m256 mag = _mm256_permutevar8x32_ps(lut, v);
    return _mm256_xor_ps(mag, _mm256_castsi256_ps(_mm256_slli_epi32(v, 28)));
  }
};

float ScalarAt(const WeightMatrix& w, const uint8_t* row, int64_t c) {
  switch (w.format) {
    case WeightFormat::kF32: {
      float v;
      memcpy(&v, row + c * 4, 4);
      return v;
    }
    case WeightFormat::kBF16: {
      uint16_t h;
      memcpy(&h, row + c * 2, 2);
      const uint32_t bits = static_cast<uint32_t>(h) << 16;  // not Bf16ToF32: see isa.h
      float f;
      memcpy(&f, &bits, 4);
      return f;
    }
    case WeightFormat::kF16: {
      uint16_t h;
      memcpy(&h, row + c * 2, 2);
      return _cvtsh_ss(h);
    }
    case WeightFormat::kNvfp4:
      break;  // handled block-wise
  }
  return 0.0f;
}

// ---- decode_rows ------------------------------------------------------------

void DecodeRows(const WeightMatrix& w, int64_t row0, int64_t nrows, int64_t col0, int64_t ncols,
                float* out, int64_t ldo) {
  const float* e4m3 = E4m3Table();
  const Nvfp4Decoder dec;
  for (int64_t r = 0; r < nrows; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + (row0 + r) * w.row_stride;
    float* o = out + r * ldo;
    int64_t c = 0;
    switch (w.format) {
      case WeightFormat::kF32:
        memcpy(o, row + col0 * 4, ncols * 4);
        c = ncols;
        break;
      case WeightFormat::kBF16:
        for (; c + 8 <= ncols; c += 8) _mm256_storeu_ps(o + c, LoadBf16x8(row + (col0 + c) * 2));
        break;
      case WeightFormat::kF16:
        for (; c + 8 <= ncols; c += 8) _mm256_storeu_ps(o + c, LoadF16x8(row + (col0 + c) * 2));
        break;
      case WeightFormat::kNvfp4: {
        const uint8_t* scales = w.scales + (row0 + r) * w.scale_row_stride;
        const __m256 gs = _mm256_set1_ps(w.global_scale);
        for (; c < ncols; c += kNvfp4BlockSize) {
          const int64_t col = col0 + c;
          // (E2M1 * scale) is exact; then the global scale: the reference order.
          const __m256 s = _mm256_set1_ps(e4m3[scales[col / kNvfp4BlockSize]]);
          _mm256_storeu_ps(o + c, _mm256_mul_ps(_mm256_mul_ps(dec.Decode8(row + col / 2), s), gs));
          _mm256_storeu_ps(o + c + 8,
                           _mm256_mul_ps(_mm256_mul_ps(dec.Decode8(row + col / 2 + 4), s), gs));
        }
        break;
      }
    }
    for (; c < ncols; ++c) o[c] = ScalarAt(w, row, col0 + c);
  }
}

// ---- gemv: 4 weight rows x M activation rows per pass ------------------------

template <int M, int R>
void GemvDenseRows(const WeightMatrix& w, int64_t r0, const float* x, int64_t ldx, float* y,
                   int64_t ldy, bool accumulate) {
  const uint8_t* rows[R];
  _Pragma("GCC unroll 8") for (int j = 0; j < R; ++j) {
    rows[j] = static_cast<const uint8_t*>(w.data) + (r0 + j) * w.row_stride;
  }
  __m256 acc[R][M];
  _Pragma("GCC unroll 8") for (int j = 0; j < R; ++j) {
    _Pragma("GCC unroll 8") for (int i = 0; i < M; ++i) acc[j][i] = _mm256_setzero_ps();
  }
  const int64_t k = w.cols;
  int64_t c = 0;
  for (; c + 8 <= k; c += 8) {
    __m256 xv[M];
    _Pragma("GCC unroll 8") for (int i = 0; i < M; ++i) xv[i] = _mm256_loadu_ps(x + i * ldx + c);
    _Pragma("GCC unroll 8") for (int j = 0; j < R; ++j) {
      __m256 wv;
      if (w.format == WeightFormat::kBF16) {
        wv = LoadBf16x8(rows[j] + c * 2);
      } else if (w.format == WeightFormat::kF16) {
        wv = LoadF16x8(rows[j] + c * 2);
      } else {
        wv = LoadF32x8(rows[j] + c * 4);
      }
      _Pragma("GCC unroll 8") for (int i = 0; i < M; ++i) acc[j][i] =
          _mm256_fmadd_ps(wv, xv[i], acc[j][i]);
    }
  }
  _Pragma("GCC unroll 8") for (int j = 0; j < R; ++j) {
    _Pragma("GCC unroll 8") for (int i = 0; i < M; ++i) {
      float s = Hsum(acc[j][i]);
      for (int64_t t = c; t < k; ++t) s += ScalarAt(w, rows[j], t) * x[i * ldx + t];
      float* out = y + i * ldy + j;
      *out = accumulate ? *out + s : s;
    }
  }
}

template <int M, int R>
void GemvNvfp4Rows(const WeightMatrix& w, int64_t r0, const float* x, int64_t ldx, float* y,
                   int64_t ldy, bool accumulate) {
  const float* e4m3 = E4m3Table();
  const Nvfp4Decoder dec;
  const uint8_t* rows[R];
  const uint8_t* scales[R];
  _Pragma("GCC unroll 8") for (int j = 0; j < R; ++j) {
    rows[j] = static_cast<const uint8_t*>(w.data) + (r0 + j) * w.row_stride;
    scales[j] = w.scales + (r0 + j) * w.scale_row_stride;
  }
  __m256 acc[R][M];
  _Pragma("GCC unroll 8") for (int j = 0; j < R; ++j) {
    _Pragma("GCC unroll 8") for (int i = 0; i < M; ++i) acc[j][i] = _mm256_setzero_ps();
  }
  const int64_t blocks = w.cols / kNvfp4BlockSize;
  for (int64_t b = 0; b < blocks; ++b) {
    __m256 x0[M], x1[M];
    _Pragma("GCC unroll 8") for (int i = 0; i < M; ++i) {
      x0[i] = _mm256_loadu_ps(x + i * ldx + b * 16);
      x1[i] = _mm256_loadu_ps(x + i * ldx + b * 16 + 8);
    }
    _Pragma("GCC unroll 8") for (int j = 0; j < R; ++j) {
      const __m256 s = _mm256_set1_ps(e4m3[scales[j][b]]);
      const __m256 w0 = dec.Decode8(rows[j] + b * 8);
      const __m256 w1 = dec.Decode8(rows[j] + b * 8 + 4);
      _Pragma("GCC unroll 8") for (int i = 0; i < M; ++i) {
        const __m256 t = _mm256_fmadd_ps(w1, x1[i], _mm256_mul_ps(w0, x0[i]));
        acc[j][i] = _mm256_fmadd_ps(t, s, acc[j][i]);
      }
    }
  }
  _Pragma("GCC unroll 8") for (int j = 0; j < R; ++j) {
    _Pragma("GCC unroll 8") for (int i = 0; i < M; ++i) {
      StoreScaled(y + i * ldy + j, Hsum(acc[j][i]), w.global_scale, accumulate);
    }
  }
}

// Explicit 4-row kernels with named accumulators (see DotTile4x3 for why).
// Dense rows: Load(row, c) gives 8 floats of columns c..c+7.
struct LoadBf16 {
  static constexpr int kBytes = 2;
  static __m256 Load(const uint8_t* row, int64_t c) { return LoadBf16x8(row + c * 2); }
};
struct LoadF16 {
  static constexpr int kBytes = 2;
  static __m256 Load(const uint8_t* row, int64_t c) { return LoadF16x8(row + c * 2); }
};
struct LoadF32 {
  static constexpr int kBytes = 4;
  static __m256 Load(const uint8_t* row, int64_t c) { return LoadF32x8(row + c * 4); }
};

// Decode streams weights from DRAM, 4 rows at a time. The hardware prefetcher
// alone does not keep up (one core: ~9 GB/s on 2 KiB rows against ~14 GB/s on
// 4 KiB ones), so the kernels also prefetch the same columns of the next group
// of rows (`prefetch` bytes further on, 0 for none) while they work on this
// one. This prefetches kLines 64-byte lines at `offset` bytes past each of the
// 4 rows.
template <int kLines>
OCTET_INLINE void PrefetchRows4(const uint8_t* const* rows, int64_t offset) {
  for (int j = 0; j < 4; ++j) {
    for (int line = 0; line < kLines; ++line) {
      _mm_prefetch(reinterpret_cast<const char*>(rows[j] + offset + line * 64), _MM_HINT_T0);
    }
  }
}

inline void Store(float* out, float v, bool accumulate) { *out = accumulate ? *out + v : v; }

template <class L>
void Gemv4Dense(const WeightMatrix& w, const uint8_t* const* rows, int64_t prefetch, const float* x,
                int64_t ldx, int64_t m, float* y, int64_t ldy, int64_t ystep, bool accumulate) {
  const int64_t k = w.cols;
  const float* x0 = x;
  const float* x1 = x + ldx;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;  // x row 0
  __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;                   // x row 1
  int64_t c = 0;
  if (m == 1) {
    if (prefetch != 0) {
      // 32 columns per step: one 64-byte line of each BF16/F16 row (two of F32).
      for (; c + 32 <= k; c += 32) {
        PrefetchRows4<L::kBytes / 2>(rows, prefetch + c * L::kBytes);
        for (int u = 0; u < 32; u += 8) {
          const __m256 xv = _mm256_loadu_ps(x0 + c + u);
          a0 = _mm256_fmadd_ps(L::Load(rows[0], c + u), xv, a0);
          a1 = _mm256_fmadd_ps(L::Load(rows[1], c + u), xv, a1);
          a2 = _mm256_fmadd_ps(L::Load(rows[2], c + u), xv, a2);
          a3 = _mm256_fmadd_ps(L::Load(rows[3], c + u), xv, a3);
        }
      }
    }
    for (; c + 8 <= k; c += 8) {
      const __m256 xv = _mm256_loadu_ps(x0 + c);
      a0 = _mm256_fmadd_ps(L::Load(rows[0], c), xv, a0);
      a1 = _mm256_fmadd_ps(L::Load(rows[1], c), xv, a1);
      a2 = _mm256_fmadd_ps(L::Load(rows[2], c), xv, a2);
      a3 = _mm256_fmadd_ps(L::Load(rows[3], c), xv, a3);
    }
  } else {
    for (; c + 8 <= k; c += 8) {
      const __m256 xv = _mm256_loadu_ps(x0 + c), xw = _mm256_loadu_ps(x1 + c);
      __m256 wv = L::Load(rows[0], c);
      a0 = _mm256_fmadd_ps(wv, xv, a0);
      b0 = _mm256_fmadd_ps(wv, xw, b0);
      wv = L::Load(rows[1], c);
      a1 = _mm256_fmadd_ps(wv, xv, a1);
      b1 = _mm256_fmadd_ps(wv, xw, b1);
      wv = L::Load(rows[2], c);
      a2 = _mm256_fmadd_ps(wv, xv, a2);
      b2 = _mm256_fmadd_ps(wv, xw, b2);
      wv = L::Load(rows[3], c);
      a3 = _mm256_fmadd_ps(wv, xv, a3);
      b3 = _mm256_fmadd_ps(wv, xw, b3);
    }
  }
  alignas(32) float sums[8];  // [x row][weight row]
  _mm256_store_ps(sums, Hsum8(a0, a1, a2, a3, b0, b1, b2, b3));
  for (int64_t i = 0; i < m; ++i) {
    for (int j = 0; j < 4; ++j) {
      float s = sums[i * 4 + j];
      for (int64_t t = c; t < k; ++t) s += ScalarAt(w, rows[j], t) * x[i * ldx + t];
      Store(y + i * ldy + j * ystep, s, accumulate);
    }
  }
}

// Two weight rows against M = 3 to 6 activation rows (batched decode): each
// weight vector is decoded once and used M times; 2 * M accumulators, named
// (GCC keeps arrays of __m256 in memory), rows past M compiled out.
template <class L, int M>
void Gemv2DenseM(const WeightMatrix& w, const uint8_t* r0, const uint8_t* r1, int64_t prefetch,
                 const float* x, int64_t ldx, float* y, int64_t ldy, bool accumulate) {
  static_assert(M >= 3 && M <= 6);
  const int64_t k = w.cols;
  const float *x0 = x, *x1 = x + ldx, *x2 = x + 2 * ldx;
  // Rows past M alias the last one (never read).
  const float *x3 = x + (M > 3 ? 3 : M - 1) * ldx, *x4 = x + (M > 4 ? 4 : M - 1) * ldx,
              *x5 = x + (M - 1) * ldx;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0;  // row r0
  __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0, b4 = a0, b5 = a0;                   // row r1
  int64_t c = 0;
  auto step = [&](int64_t c) OCTET_INLINE_LAMBDA {
    const __m256 w0 = L::Load(r0, c), w1 = L::Load(r1, c);
    __m256 xv = InRegister(_mm256_loadu_ps(x0 + c));
    a0 = _mm256_fmadd_ps(w0, xv, a0);
    b0 = _mm256_fmadd_ps(w1, xv, b0);
    xv = InRegister(_mm256_loadu_ps(x1 + c));
    a1 = _mm256_fmadd_ps(w0, xv, a1);
    b1 = _mm256_fmadd_ps(w1, xv, b1);
    xv = InRegister(_mm256_loadu_ps(x2 + c));
    a2 = _mm256_fmadd_ps(w0, xv, a2);
    b2 = _mm256_fmadd_ps(w1, xv, b2);
    if constexpr (M >= 4) {
      xv = InRegister(_mm256_loadu_ps(x3 + c));
      a3 = _mm256_fmadd_ps(w0, xv, a3);
      b3 = _mm256_fmadd_ps(w1, xv, b3);
    }
    if constexpr (M >= 5) {
      xv = InRegister(_mm256_loadu_ps(x4 + c));
      a4 = _mm256_fmadd_ps(w0, xv, a4);
      b4 = _mm256_fmadd_ps(w1, xv, b4);
    }
    if constexpr (M == 6) {
      xv = InRegister(_mm256_loadu_ps(x5 + c));
      a5 = _mm256_fmadd_ps(w0, xv, a5);
      b5 = _mm256_fmadd_ps(w1, xv, b5);
    }
  };
  if (prefetch != 0) {
    for (; c + 32 <= k; c += 32) {  // 32 columns: one line of each BF16 row (two of F32)
      for (int line = 0; line < L::kBytes / 2; ++line) {
        _mm_prefetch(reinterpret_cast<const char*>(r0 + prefetch + c * L::kBytes + line * 64),
                     _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(r1 + prefetch + c * L::kBytes + line * 64),
                     _MM_HINT_T0);
      }
      for (int u = 0; u < 32; u += 8) step(c + u);
    }
  }
  for (; c + 8 <= k; c += 8) step(c);
  // Weight row j's sum against x row i at j * kStride + i.
  constexpr int kStride = M <= 4 ? 4 : 6;
  alignas(32) float sums[16];
  if constexpr (M <= 4) {
    _mm256_store_ps(sums, Hsum8(a0, a1, a2, a3, b0, b1, b2, b3));
  } else {
    _mm256_store_ps(sums, Hsum8(a0, a1, a2, a3, a4, a5, b0, b1));
    _mm256_store_ps(sums + 8, Hsum8(b2, b3, b4, b5, b2, b3, b4, b5));
  }
  const uint8_t* rows[2] = {r0, r1};
  for (int j = 0; j < 2; ++j) {
    for (int i = 0; i < M; ++i) {
      float s = sums[j * kStride + i];
      for (int64_t t = c; t < k; ++t) s += ScalarAt(w, rows[j], t) * x[i * ldx + t];
      Store(y + i * ldy + j, s, accumulate);
    }
  }
}

// Three weight rows against M = 3 or 4 activation rows: 9 or 12
// accumulators, so the FMAs' latency (4 cycles, 2 a cycle) has slack that
// Gemv2DenseM's 6 or 8 lack. Each output summed in the same order as there.
template <class L, int M>
void Gemv3DenseM4(const WeightMatrix& w, const uint8_t* r0, int64_t prefetch, const float* x,
                  int64_t ldx, float* y, int64_t ldy, bool accumulate) {
  static_assert(M == 3 || M == 4);
  const int64_t k = w.cols;
  const uint8_t* r1 = r0 + w.row_stride;
  const uint8_t* r2 = r1 + w.row_stride;
  const float *x0 = x, *x1 = x + ldx, *x2 = x + 2 * ldx, *x3 = x + (M - 1) * ldx;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;  // row r0
  __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;                   // row r1
  __m256 e0 = a0, e1 = a0, e2 = a0, e3 = a0;                   // row r2
  int64_t c = 0;
  auto step = [&](int64_t c) OCTET_INLINE_LAMBDA {
    const __m256 w0 = L::Load(r0, c), w1 = L::Load(r1, c), w2 = L::Load(r2, c);
    __m256 xv = _mm256_loadu_ps(x0 + c);
    a0 = _mm256_fmadd_ps(w0, xv, a0);
    b0 = _mm256_fmadd_ps(w1, xv, b0);
    e0 = _mm256_fmadd_ps(w2, xv, e0);
    xv = _mm256_loadu_ps(x1 + c);
    a1 = _mm256_fmadd_ps(w0, xv, a1);
    b1 = _mm256_fmadd_ps(w1, xv, b1);
    e1 = _mm256_fmadd_ps(w2, xv, e1);
    xv = _mm256_loadu_ps(x2 + c);
    a2 = _mm256_fmadd_ps(w0, xv, a2);
    b2 = _mm256_fmadd_ps(w1, xv, b2);
    e2 = _mm256_fmadd_ps(w2, xv, e2);
    if constexpr (M == 4) {
      xv = _mm256_loadu_ps(x3 + c);
      a3 = _mm256_fmadd_ps(w0, xv, a3);
      b3 = _mm256_fmadd_ps(w1, xv, b3);
      e3 = _mm256_fmadd_ps(w2, xv, e3);
    }
  };
  if (prefetch != 0) {
    for (; c + 32 <= k; c += 32) {
      for (int line = 0; line < L::kBytes / 2; ++line) {
        const int64_t o = prefetch + c * L::kBytes + line * 64;
        _mm_prefetch(reinterpret_cast<const char*>(r0 + o), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(r1 + o), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(r2 + o), _MM_HINT_T0);
      }
      for (int u = 0; u < 32; u += 8) step(c + u);
    }
  }
  for (; c + 8 <= k; c += 8) step(c);
  alignas(32) float sums[16];  // weight row j's sum against x row i at j * 4 + i
  _mm256_store_ps(sums, Hsum8(a0, a1, a2, a3, b0, b1, b2, b3));
  _mm256_store_ps(sums + 8, Hsum8(e0, e1, e2, e3, e0, e1, e2, e3));
  const uint8_t* rows[3] = {r0, r1, r2};
  for (int j = 0; j < 3; ++j) {
    for (int i = 0; i < M; ++i) {
      float s = sums[j * 4 + i];
      for (int64_t t = c; t < k; ++t) s += ScalarAt(w, rows[j], t) * x[i * ldx + t];
      Store(y + i * ldy + j, s, accumulate);
    }
  }
}

// One NVFP4 row's block b against x (16 floats xl|xh): the 16 products summed
// unscaled, then one FMA by the block scale into acc (the global scale is
// applied once at the end).
OCTET_INLINE __m256 Nvfp4BlockDot(const Nvfp4Decoder& dec, const uint8_t* row, __m256 xl, __m256 xh,
                                  __m256 scale, __m256 acc) {
  const __m256 t = _mm256_fmadd_ps(dec.Decode8(row + 4), xh, _mm256_mul_ps(dec.Decode8(row), xl));
  return _mm256_fmadd_ps(t, scale, acc);
}

// Four rows against one activation row; named accumulators only (GCC spills
// arrays of __m256 to the stack).
void Gemv4Nvfp4M1(const WeightMatrix& w, const uint8_t* r0, const uint8_t* r1, const uint8_t* r2,
                  const uint8_t* r3, const uint8_t* s0, const uint8_t* s1, const uint8_t* s2,
                  const uint8_t* s3, const float* x, float* y, bool accumulate) {
  const float* e4m3 = E4m3Table();
  const Nvfp4Decoder dec;
  const int64_t blocks = w.cols / kNvfp4BlockSize;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t b = 0; b < blocks; ++b) {
    const __m256 xl = _mm256_loadu_ps(x + b * 16), xh = _mm256_loadu_ps(x + b * 16 + 8);
    a0 = Nvfp4BlockDot(dec, r0 + b * 8, xl, xh, _mm256_broadcast_ss(e4m3 + s0[b]), a0);
    a1 = Nvfp4BlockDot(dec, r1 + b * 8, xl, xh, _mm256_broadcast_ss(e4m3 + s1[b]), a1);
    a2 = Nvfp4BlockDot(dec, r2 + b * 8, xl, xh, _mm256_broadcast_ss(e4m3 + s2[b]), a2);
    a3 = Nvfp4BlockDot(dec, r3 + b * 8, xl, xh, _mm256_broadcast_ss(e4m3 + s3[b]), a3);
  }
  StoreScaled(y + 0, Hsum(a0), w.global_scale, accumulate);
  StoreScaled(y + 1, Hsum(a1), w.global_scale, accumulate);
  StoreScaled(y + 2, Hsum(a2), w.global_scale, accumulate);
  StoreScaled(y + 3, Hsum(a3), w.global_scale, accumulate);
}

// Two rows against two activation rows (each weight block decoded once).
void Gemv2Nvfp4M2(const WeightMatrix& w, const uint8_t* r0, const uint8_t* r1, const uint8_t* s0,
                  const uint8_t* s1, const float* x, int64_t ldx, float* y, int64_t ldy,
                  bool accumulate) {
  const float* e4m3 = E4m3Table();
  const Nvfp4Decoder dec;
  const int64_t blocks = w.cols / kNvfp4BlockSize;
  const float* x1 = x + ldx;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0;
  for (int64_t b = 0; b < blocks; ++b) {
    const __m256 xl = _mm256_loadu_ps(x + b * 16), xh = _mm256_loadu_ps(x + b * 16 + 8);
    const __m256 yl = _mm256_loadu_ps(x1 + b * 16), yh = _mm256_loadu_ps(x1 + b * 16 + 8);
    const __m256 sc0 = _mm256_broadcast_ss(e4m3 + s0[b]), sc1 = _mm256_broadcast_ss(e4m3 + s1[b]);
    const __m256 w0l = dec.Decode8(r0 + b * 8), w0h = dec.Decode8(r0 + b * 8 + 4);
    const __m256 w1l = dec.Decode8(r1 + b * 8), w1h = dec.Decode8(r1 + b * 8 + 4);
    a0 = _mm256_fmadd_ps(_mm256_fmadd_ps(w0h, xh, _mm256_mul_ps(w0l, xl)), sc0, a0);
    a1 = _mm256_fmadd_ps(_mm256_fmadd_ps(w1h, xh, _mm256_mul_ps(w1l, xl)), sc1, a1);
    b0 = _mm256_fmadd_ps(_mm256_fmadd_ps(w0h, yh, _mm256_mul_ps(w0l, yl)), sc0, b0);
    b1 = _mm256_fmadd_ps(_mm256_fmadd_ps(w1h, yh, _mm256_mul_ps(w1l, yl)), sc1, b1);
  }
  StoreScaled(y + 0, Hsum(a0), w.global_scale, accumulate);
  StoreScaled(y + 1, Hsum(a1), w.global_scale, accumulate);
  StoreScaled(y + ldy + 0, Hsum(b0), w.global_scale, accumulate);
  StoreScaled(y + ldy + 1, Hsum(b1), w.global_scale, accumulate);
}

// Dense rows shorter than a 4 KiB page (1024 BF16 columns: most matrices of
// Qwen3-0.6B): four streams of 4 rows each would meet in one page, two rows
// at a time, which the hardware prefetcher follows badly. Instead each of the
// 4 streams walks `span` consecutive rows (a page or more of contiguous
// memory), as long rows do. A/B in one process, 2 threads, BF16: 1024-column
// rows 28 -> 34 GB/s, 512-column rows 21 -> 27 GB/s (2048-column rows: 33).
// Handles whole groups of 4 * span rows from row0 and returns the first row it
// left for the plain loop.
int64_t GemvDenseShortRows(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x,
                           int64_t m, int64_t ldx, float* y, int64_t ldy, bool accumulate) {
  const int64_t row_bytes = w.cols * (w.format == WeightFormat::kF32 ? 4 : 2);
  if (row_bytes == 0 || row_bytes >= 4096 || w.row_stride != row_bytes)
    return row0;  // long, strided
  const int64_t span = 4096 / row_bytes < 8 ? 4096 / row_bytes : 8;
  int64_t r = row0;
  for (; r + 4 * span <= row1; r += 4 * span) {
    const uint8_t* base = static_cast<const uint8_t*>(w.data) + r * w.row_stride;
    // The next group, past this call's rows too (see Gemv).
    const int64_t prefetch = 4 * span * w.row_stride;
    for (int64_t h = 0; h < span; ++h) {
      const uint8_t* rows[4];
      for (int j = 0; j < 4; ++j) rows[j] = base + (j * span + h) * w.row_stride;
      float* out = y + (r - row0) + h;  // stream j's row h is output j * span + h
      switch (w.format) {
        case WeightFormat::kBF16:
          Gemv4Dense<LoadBf16>(w, rows, prefetch, x, ldx, m, out, ldy, span, accumulate);
          break;
        case WeightFormat::kF16:
          Gemv4Dense<LoadF16>(w, rows, prefetch, x, ldx, m, out, ldy, span, accumulate);
          break;
        default:
          Gemv4Dense<LoadF32>(w, rows, prefetch, x, ldx, m, out, ldy, span, accumulate);
          break;
      }
    }
  }
  return r;
}

// m = 3 or 4 activation rows: dense weights two rows at a time, each decoded
// once (Gemv2DenseM); NVFP4 in passes of two activation rows.
void GemvBatch(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x, int64_t m,
               int64_t ldx, float* y, int64_t ldy, bool accumulate);

template <class L>
void GemvWideDense(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x, int64_t m,
                   int64_t ldx, float* y, int64_t ldy, bool accumulate);

void Gemv(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x, int64_t m, int64_t ldx,
          float* y, int64_t ldy, bool accumulate) {
  if (m > 4 && w.format == WeightFormat::kBF16) {
    return GemvWideDense<LoadBf16>(w, row0, row1, x, m, ldx, y, ldy, accumulate);
  }
  if (m > 4 && w.format == WeightFormat::kF16) {
    return GemvWideDense<LoadF16>(w, row0, row1, x, m, ldx, y, ldy, accumulate);
  }
  if (m > 4 && w.format == WeightFormat::kF32) {
    return GemvWideDense<LoadF32>(w, row0, row1, x, m, ldx, y, ldy, accumulate);
  }
  if (m > 4) {  // passes of at most 4 activation rows
    Gemv(w, row0, row1, x, 4, ldx, y, ldy, accumulate);
    Gemv(w, row0, row1, x + 4 * ldx, m - 4, ldx, y + 4 * ldy, ldy, accumulate);
    return;
  }
  if (m > 2) return GemvBatch(w, row0, row1, x, m, ldx, y, ldy, accumulate);
  const bool fp4 = w.format == WeightFormat::kNvfp4;
  int64_t r = row0;
  if (!fp4) r = GemvDenseShortRows(w, row0, row1, x, m, ldx, y, ldy, accumulate);
  for (; r + 4 <= row1; r += 4) {
    const uint8_t* rows[4];
    const uint8_t* scales[4];
    for (int j = 0; j < 4; ++j) {
      rows[j] = static_cast<const uint8_t*>(w.data) + (r + j) * w.row_stride;
      scales[j] = fp4 ? w.scales + (r + j) * w.scale_row_stride : nullptr;
    }
    float* out = y + (r - row0);
    // The next group, past this call's rows too: the thread pool runs a
    // thread's tasks in order through a range of its own, so the rows after a
    // task are usually the same thread's next task, and its first lines are
    // then on their way (prefetches never fault; at the end of a range it is a
    // few KiB read twice). A/B in one process, bench_gemv: the BF16 lm_head
    // 3-12% faster than with the prefetch stopping at the task's last group.
    const int64_t prefetch = 4 * w.row_stride;
    switch (w.format) {
      case WeightFormat::kNvfp4:
        if (m == 1) {
          Gemv4Nvfp4M1(w, rows[0], rows[1], rows[2], rows[3], scales[0], scales[1], scales[2],
                       scales[3], x, out, accumulate);
        } else {
          Gemv2Nvfp4M2(w, rows[0], rows[1], scales[0], scales[1], x, ldx, out, ldy, accumulate);
          Gemv2Nvfp4M2(w, rows[2], rows[3], scales[2], scales[3], x, ldx, out + 2, ldy, accumulate);
        }
        break;
      case WeightFormat::kBF16:
        Gemv4Dense<LoadBf16>(w, rows, prefetch, x, ldx, m, out, ldy, 1, accumulate);
        break;
      case WeightFormat::kF16:
        Gemv4Dense<LoadF16>(w, rows, prefetch, x, ldx, m, out, ldy, 1, accumulate);
        break;
      case WeightFormat::kF32:
        Gemv4Dense<LoadF32>(w, rows, prefetch, x, ldx, m, out, ldy, 1, accumulate);
        break;
    }
  }
  for (; r < row1; ++r) {  // the last < 4 rows
    if (m == 1) {
      if (fp4) {
        GemvNvfp4Rows<1, 1>(w, r, x, ldx, y + (r - row0), ldy, accumulate);
      } else {
        GemvDenseRows<1, 1>(w, r, x, ldx, y + (r - row0), ldy, accumulate);
      }
    } else {
      if (fp4) {
        GemvNvfp4Rows<2, 1>(w, r, x, ldx, y + (r - row0), ldy, accumulate);
      } else {
        GemvDenseRows<2, 1>(w, r, x, ldx, y + (r - row0), ldy, accumulate);
      }
    }
  }
}

// Rows [r, row1) of the call's rows [row0, row1) two at a time against M
// activation rows (Gemv2DenseM); returns the row it left (row1, or one
// before it).
template <class L, int M>
int64_t GemvDensePairs(const WeightMatrix& w, int64_t row0, int64_t r, int64_t row1,
                       const float* x, int64_t ldx, float* y, int64_t ldy, bool accumulate) {
  for (; r + 2 <= row1; r += 2) {
    const uint8_t* r0 = static_cast<const uint8_t*>(w.data) + r * w.row_stride;
    // Two pairs ahead, past this call's rows too (see Gemv).
    Gemv2DenseM<L, M>(w, r0, r0 + w.row_stride, 4 * w.row_stride, x, ldx, y + (r - row0), ldy,
                      accumulate);
  }
  return r;
}

template <class L>
void GemvBatchDense(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x, int64_t m,
                    int64_t ldx, float* y, int64_t ldy, bool accumulate) {
  int64_t r = row0;
  for (; r + 3 <= row1; r += 3) {
    const uint8_t* r0 = static_cast<const uint8_t*>(w.data) + r * w.row_stride;
    // Two triples ahead, past this call's rows too (see Gemv).
    if (m == 4) {
      Gemv3DenseM4<L, 4>(w, r0, 6 * w.row_stride, x, ldx, y + (r - row0), ldy, accumulate);
    } else {
      Gemv3DenseM4<L, 3>(w, r0, 6 * w.row_stride, x, ldx, y + (r - row0), ldy, accumulate);
    }
  }
  r = m == 4 ? GemvDensePairs<L, 4>(w, row0, r, row1, x, ldx, y, ldy, accumulate)
             : GemvDensePairs<L, 3>(w, row0, r, row1, x, ldx, y, ldy, accumulate);
  if (r < row1) {
    if (m == 4) {
      GemvDenseRows<4, 1>(w, r, x, ldx, y + (r - row0), ldy, accumulate);
    } else {
      GemvDenseRows<3, 1>(w, r, x, ldx, y + (r - row0), ldy, accumulate);
    }
  }
}

// 5 to 8 activation rows of dense weights. 5 and 6: two weight rows against
// all of them (10 or 12 accumulators). 7 and 8: each three weight rows take
// activation rows 0-3, then 4 to m-1, while those weight rows are in L1. Two
// passes of 4 rows over a task's rows instead (its weights from L2 the second
// time) left the first pass waiting on memory: it reads the weights at twice
// the rate the 8 rows' FMAs use them. The three-row split is what 5 and 6
// rows took before: its second pass of 1 or 2 rows waits on the FMAs' latency
// (3 or 6 chains of 4 cycles), so 5 rows cost 10 cycles per 8 columns of three
// weight rows where the FMA ports need 7.5 (a 5-row verify step of
// nanochat-demo, F32 in cache: 2.3x one row).
template <class L>
void GemvWideDense(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x, int64_t m,
                   int64_t ldx, float* y, int64_t ldy, bool accumulate) {
  const float* xb = x + 4 * ldx;
  const int64_t mb = m - 4;
  int64_t r = row0;
  if (m <= 6) {
    r = m == 6 ? GemvDensePairs<L, 6>(w, row0, r, row1, x, ldx, y, ldy, accumulate)
               : GemvDensePairs<L, 5>(w, row0, r, row1, x, ldx, y, ldy, accumulate);
  } else {
    for (; r + 3 <= row1; r += 3) {
      const uint8_t* r0 = static_cast<const uint8_t*>(w.data) + r * w.row_stride;
      float* out = y + (r - row0);
      // Two triples ahead, past this call's rows too (see Gemv).
      Gemv3DenseM4<L, 4>(w, r0, 6 * w.row_stride, x, ldx, out, ldy, accumulate);
      float* outb = out + 4 * ldy;
      if (mb == 4) {
        Gemv3DenseM4<L, 4>(w, r0, 0, xb, ldx, outb, ldy, accumulate);
      } else {
        Gemv3DenseM4<L, 3>(w, r0, 0, xb, ldx, outb, ldy, accumulate);
      }
    }
  }
  if (r < row1) {  // the last one or two rows: passes of at most 4
    Gemv(w, r, row1, x, 4, ldx, y + (r - row0), ldy, accumulate);
    Gemv(w, r, row1, xb, mb, ldx, y + (r - row0) + 4 * ldy, ldy, accumulate);
  }
}

void GemvBatch(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x, int64_t m,
               int64_t ldx, float* y, int64_t ldy, bool accumulate) {
  switch (w.format) {
    case WeightFormat::kNvfp4:
      Gemv(w, row0, row1, x, 2, ldx, y, ldy, accumulate);
      Gemv(w, row0, row1, x + 2 * ldx, m - 2, ldx, y + 2 * ldy, ldy, accumulate);
      break;
    case WeightFormat::kBF16:
      GemvBatchDense<LoadBf16>(w, row0, row1, x, m, ldx, y, ldy, accumulate);
      break;
    case WeightFormat::kF16:
      GemvBatchDense<LoadF16>(w, row0, row1, x, m, ldx, y, ldy, accumulate);
      break;
    case WeightFormat::kF32:
      GemvBatchDense<LoadF32>(w, row0, row1, x, m, ldx, y, ldy, accumulate);
      break;
  }
}

// ---- dot_tile: the GEMM micro-kernel ----------------------------------------

template <int MR, int NR>
void DotTileT(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t kc, float* c,
              int64_t ldc, bool accumulate) {
  __m256 acc[MR][NR];
  _Pragma("GCC unroll 8") for (int i = 0; i < MR; ++i) {
    _Pragma("GCC unroll 8") for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 8 <= kc; k += 8) {
    __m256 bv[NR];
    _Pragma("GCC unroll 8") for (int j = 0; j < NR; ++j) bv[j] = _mm256_loadu_ps(b + j * ldb + k);
    _Pragma("GCC unroll 8") for (int i = 0; i < MR; ++i) {
      const __m256 av = _mm256_loadu_ps(a + i * lda + k);
      _Pragma("GCC unroll 8") for (int j = 0; j < NR; ++j) acc[i][j] =
          _mm256_fmadd_ps(av, bv[j], acc[i][j]);
    }
  }
  _Pragma("GCC unroll 8") for (int i = 0; i < MR; ++i) {
    _Pragma("GCC unroll 8") for (int j = 0; j < NR; ++j) {
      float s = Hsum(acc[i][j]);
      for (int64_t t = k; t < kc; ++t) s += a[i * lda + t] * b[j * ldb + t];
      float* out = c + i * ldc + j;
      *out = accumulate ? *out + s : s;
    }
  }
}

// An MR x 3 tile (MR <= 4) with named accumulators (GCC keeps arrays of
// __m256 in memory even when the loops unroll, which costs 3x here); rows past
// MR are compiled out.
template <int MR>
void DotTileMx3(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t kc, float* c,
                int64_t ldc, bool accumulate) {
  const float *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda;
  const float *b0 = b, *b1 = b + ldb, *b2 = b + 2 * ldb;
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c10 = c00, c11 = c00, c12 = c00;
  __m256 c20 = c00, c21 = c00, c22 = c00, c30 = c00, c31 = c00, c32 = c00;
  int64_t k = 0;
  for (; k + 8 <= kc; k += 8) {
    const __m256 w0 = _mm256_loadu_ps(b0 + k), w1 = _mm256_loadu_ps(b1 + k),
                 w2 = _mm256_loadu_ps(b2 + k);
    __m256 av = _mm256_loadu_ps(a0 + k);
    c00 = _mm256_fmadd_ps(av, w0, c00);
    c01 = _mm256_fmadd_ps(av, w1, c01);
    c02 = _mm256_fmadd_ps(av, w2, c02);
    if constexpr (MR > 1) {
      av = _mm256_loadu_ps(a1 + k);
      c10 = _mm256_fmadd_ps(av, w0, c10);
      c11 = _mm256_fmadd_ps(av, w1, c11);
      c12 = _mm256_fmadd_ps(av, w2, c12);
    }
    if constexpr (MR > 2) {
      av = _mm256_loadu_ps(a2 + k);
      c20 = _mm256_fmadd_ps(av, w0, c20);
      c21 = _mm256_fmadd_ps(av, w1, c21);
      c22 = _mm256_fmadd_ps(av, w2, c22);
    }
    if constexpr (MR > 3) {
      av = _mm256_loadu_ps(a3 + k);
      c30 = _mm256_fmadd_ps(av, w0, c30);
      c31 = _mm256_fmadd_ps(av, w1, c31);
      c32 = _mm256_fmadd_ps(av, w2, c32);
    }
  }
  const __m256 acc[4][3] = {{c00, c01, c02}, {c10, c11, c12}, {c20, c21, c22}, {c30, c31, c32}};
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < 3; ++j) {
      float sum = Hsum(acc[i][j]);
      for (int64_t t = k; t < kc; ++t) sum += a[i * lda + t] * b[j * ldb + t];
      float* out = c + i * ldc + j;
      *out = accumulate ? *out + sum : sum;
    }
  }
}

template <int MR>
void DotTileRows(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t kc, int nr,
                 float* c, int64_t ldc, bool accumulate) {
  switch (nr) {
    case 1:
      DotTileT<MR, 1>(a, lda, b, ldb, kc, c, ldc, accumulate);
      break;
    case 2:
      DotTileT<MR, 2>(a, lda, b, ldb, kc, c, ldc, accumulate);
      break;
    default:
      DotTileT<MR, 3>(a, lda, b, ldb, kc, c, ldc, accumulate);
      break;
  }
}

void DotTile(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t kc, int mr, int nr,
             float* c, int64_t ldc, bool accumulate) {
  if (nr == 3) {
    switch (mr) {
      case 1:
        return DotTileMx3<1>(a, lda, b, ldb, kc, c, ldc, accumulate);
      case 2:
        return DotTileMx3<2>(a, lda, b, ldb, kc, c, ldc, accumulate);
      case 3:
        return DotTileMx3<3>(a, lda, b, ldb, kc, c, ldc, accumulate);
      default:
        return DotTileMx3<4>(a, lda, b, ldb, kc, c, ldc, accumulate);
    }
  }
  switch (mr) {
    case 1:
      DotTileRows<1>(a, lda, b, ldb, kc, nr, c, ldc, accumulate);
      break;
    case 2:
      DotTileRows<2>(a, lda, b, ldb, kc, nr, c, ldc, accumulate);
      break;
    case 3:
      DotTileRows<3>(a, lda, b, ldb, kc, nr, c, ldc, accumulate);
      break;
    default:
      DotTileRows<4>(a, lda, b, ldb, kc, nr, c, ldc, accumulate);
      break;
  }
}

// ---- vector helpers ---------------------------------------------------------

float Dot(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8)
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  float s = Hsum(_mm256_add_ps(s0, s1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void Axpy(float alpha, const float* x, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += alpha * x[i];
}

void Scale(float alpha, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(av, _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] *= alpha;
}

void Add(const float* a, const float* b, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  }
  for (; i < n; ++i) out[i] = a[i] + b[i];
}

void RmsNormRow(const float* x, const float* w, float eps, int64_t n, float* out) {
  const float inv = 1.0f / sqrtf(Dot(x, x, n) / static_cast<float>(n) + eps);
  const __m256 iv = _mm256_set1_ps(inv);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), iv);
    if (w) v = _mm256_mul_ps(_mm256_loadu_ps(w + i), v);
    _mm256_storeu_ps(out + i, v);
  }
  for (; i < n; ++i) out[i] = w ? w[i] * (x[i] * inv) : x[i] * inv;
}

// exp of 8 floats, less than 1 ulp from the exact value for every float input
// (0.94 ulp at worst over all 2^32 bit patterns, checked once exhaustively;
// test_kernel_vector_exp checks a spread and the edges): exp(x) = 2^n * exp(r) with n = round(x /
// ln 2) and r = x - n ln 2 (|r| <= ln 2 / 2, ln 2 split in two so n * C1 is exact), exp(r) by its
// degree-7 Taylor polynomial (truncation < 0.15 ulp), and 2^n applied as two factors 2^(n/2) so
// that n from -150 (subnormal results) to 128 (overflow to +inf) needs only normal powers of two
// and the result is rounded once. Inputs are clamped to [-104, 89] (outside it exp rounds to 0 or
// +inf), so -inf gives 0 and +inf gives +inf; NaN stays NaN. Why not expf: decode softmax and SiLU
// take millions of exps per step, one call each.
OCTET_INLINE __m256 Exp8(__m256 x) {
  // max/min return their second operand for a NaN x; the NaN is put back last.
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-104.0f)), _mm256_set1_ps(89.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // ln 2 = C1 + C2, C1 with 9 significant bits: n * C1 is exact for |n| <= 150.
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  // 2^n = 2^n1 * 2^n2, n1 = floor(n / 2) and n2 = n - n1 in [-75, 64]: both normal.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  const __m256 e = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);  // p * s1 is exact
  return _mm256_blendv_ps(e, _mm256_add_ps(x, x), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = Exp8(_mm256_xor_ps(g, sign));  // exp(-g)
    _mm256_storeu_ps(
        out + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
  }
  if (i < n) {  // the tail through the same vector exp, so no element depends on n
    float buf[8] = {};
    for (int64_t t = i; t < n; ++t) buf[t - i] = -gate[t];
    _mm256_storeu_ps(buf, Exp8(_mm256_loadu_ps(buf)));
    for (int64_t t = i; t < n; ++t) out[t] = gate[t] / (1.0f + buf[t - i]) * up[t];
  }
}

void SoftmaxRow(float* x, int64_t n) {
  // max ignores NaN elements like the scalar reference (max_ps keeps its
  // second operand when the first is NaN).
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) vmax = _mm256_max_ps(_mm256_loadu_ps(x + i), vmax);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  float mx = -INFINITY;
  for (int t = 0; t < 8; ++t) mx = lanes[t] > mx ? lanes[t] : mx;
  for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  const __m256 vm = _mm256_set1_ps(mx);
  __m256 acc = _mm256_setzero_ps();
  i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = Exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  float sum = Hsum(acc);
  if (i < n) {
    float buf[8] = {};
    for (int64_t t = i; t < n; ++t) buf[t - i] = x[t] - mx;
    _mm256_storeu_ps(buf, Exp8(_mm256_loadu_ps(buf)));
    for (int64_t t = i; t < n; ++t) {
      x[t] = buf[t - i];
      sum += x[t];
    }
  }
  Scale(1.0f / sum, x, n);
}

// tanh of 8 floats within kVectorTanhMaxAbsError (isa.h). |x| < 0.5: the odd
// Taylor series x + x^3 (c3 + c5 x^2 + ... + c15 x^12) (truncation below 1e-8
// relative there), so small logits keep their relative precision. Otherwise
// 1 - 2 / (exp(2|x|) + 1) with the sign of x put back; |x| is clamped to 10
// first (tanh rounds to 1 from 9.011). Why not tanhf: one call per logit was
// ~21 us per vocabulary row of 4096, a tenth of a small model's decode step.
OCTET_INLINE __m256 Tanh8(__m256 x) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 ax = _mm256_andnot_ps(sign, x);  // tanh(|x|), then x's sign (so -0 stays -0)
  const __m256 x2 = _mm256_mul_ps(ax, ax);
  __m256 p = _mm256_set1_ps(-929569.0f / 638512875.0f);
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(21844.0f / 6081075.0f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-1382.0f / 155925.0f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(62.0f / 2835.0f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-17.0f / 315.0f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(2.0f / 15.0f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-1.0f / 3.0f));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(ax, x2), p, ax);
  // Not (|x| >= 0.5) is true for NaN: the small branch, NaN.
  const __m256 use_small = _mm256_cmp_ps(ax, _mm256_set1_ps(0.5f), _CMP_NGE_UQ);
  __m256 t = small;
  // The exp and the division only where a lane needs them: most logits of a
  // soft-capped model sit below cap / 2 (nanochat-demo: 83% of 8-lane groups).
  if (_mm256_movemask_ps(use_small) != 0xff) {
    // min keeps its second operand (10) for a NaN |x|; the small branch carries the NaN.
    const __m256 axc = _mm256_min_ps(ax, _mm256_set1_ps(10.0f));
    const __m256 e = Exp8(_mm256_add_ps(axc, axc));
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 big =
        _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
    t = _mm256_blendv_ps(big, small, use_small);
  }
  return _mm256_or_ps(t, _mm256_and_ps(x, sign));
}

void SoftCap(float* x, int64_t n, float cap) {
  const __m256 inv = _mm256_set1_ps(1.0f / cap), c = _mm256_set1_ps(cap);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(x + i, _mm256_mul_ps(c, Tanh8(_mm256_mul_ps(_mm256_loadu_ps(x + i), inv))));
  }
  if (i < n) {  // the tail through the same vector code
    float buf[8] = {};
    for (int64_t t = i; t < n; ++t) buf[t - i] = x[t];
    _mm256_storeu_ps(buf, _mm256_mul_ps(c, Tanh8(_mm256_mul_ps(_mm256_loadu_ps(buf), inv))));
    for (int64_t t = i; t < n; ++t) x[t] = buf[t - i];
  }
}

void Relu2(float* x, int64_t n) {
  const __m256 zero = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    _mm256_storeu_ps(x + i, _mm256_and_ps(_mm256_mul_ps(v, v), _mm256_cmp_ps(v, zero, _CMP_GT_OQ)));
  }
  for (; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] * x[i] : 0.0f;
}

// The maximum in four vectors of lanes (MAXPS gives its second operand, the
// running maximum, where x is NaN, so a NaN never enters), then the first
// element equal to it.
int64_t Argmax(const float* x, int64_t n) {
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  __m256 m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
    m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
    m2 = _mm256_max_ps(_mm256_loadu_ps(x + i + 16), m2);
    m3 = _mm256_max_ps(_mm256_loadu_ps(x + i + 24), m3);
  }
  for (; i + 8 <= n; i += 8) m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
  float m = -INFINITY;
  for (float l : lanes) m = l > m ? l : m;
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  const __m256 mv = _mm256_set1_ps(m);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + j), mv, _CMP_EQ_OQ));
    if (hit != 0) return j + __builtin_ctz(static_cast<unsigned>(hit));
  }
  for (; j < n; ++j) {
    if (x[j] == m) return j;
  }
  return 0;
}

// K/V cache elements: float, or IEEE half (an F16 cache) widened exactly by F16C.
OCTET_INLINE __m256 LoadKv8(const float* p) { return _mm256_loadu_ps(p); }
OCTET_INLINE __m256 LoadKv8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
OCTET_INLINE float KvAt(const float* p) { return *p; }
OCTET_INLINE float KvAt(const uint16_t* p) { return _cvtsh_ss(*p); }
OCTET_INLINE void PrefetchKv(const void* p) {
  _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0);
}

float DotKv(const float* q, const float* k, int64_t n) { return Dot(q, k, n); }
float DotKv(const float* q, const uint16_t* k, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + c), LoadKv8(k + c), acc);
  float sum = Hsum(acc);
  for (; c < n; ++c) sum += q[c] * KvAt(k + c);
  return sum;
}

// Attention for the query heads of one KV head (decode reads the whole KV
// cache of a sequence once per token: at 8 sequences it was a fifth of a
// decode step when done as a dot and an axpy call per key). Scores take four
// keys per pass over q; the value sum runs 64 columns at a time with the 8
// accumulators in registers, so `out` is written once instead of read and
// written per key. E: the cache's element (float, or uint16_t half).
//
// The query vectors of a call (the heads of a group, and with AttendCausal
// the rows of a verify step) go two at a time where they can: a pair shares
// each K and V load, where one vector alone is bound by the loads (a 4-key
// pass loads 40 vectors for 32 FMAs). Every score and output element is
// computed by the same operations in the same order whether its vector is
// paired or alone (a key's score is its own 8-lane sum and tree; an output
// lane sums its keys in order), so a vector's bits never depend on its
// company: the batch-invariant verify steps rely on that.
OCTET_INLINE int64_t MinI64(int64_t a, int64_t b) { return a < b ? a : b; }

struct AttendVector {
  const float* q;  // hd floats
  float* s;        // n_keys scores, then probabilities
  float* out;      // hd floats
  int64_t n_keys;
};

// Prefetch keys j + 8 .. j + 11 (the cache's rows are kv_stride apart).
template <class E>
OCTET_INLINE void PrefetchKeys(const E* k, int64_t j, int64_t kv_stride, int64_t hd) {
  constexpr int64_t kPerLine = 64 / sizeof(E);  // cache elements per 64-byte line
  for (int t = 0; t < 4; ++t) {
    for (int64_t c = 0; c < hd; c += kPerLine) PrefetchKv(k + (j + 8 + t) * kv_stride + c);
  }
}

// Keys j..j+3's scores from their 8-lane sums: three horizontal adds for the
// four, then the halves; each key's lanes are added in one fixed tree.
OCTET_INLINE void StoreScores4(__m256 a0, __m256 a1, __m256 a2, __m256 a3, float scale, float* s) {
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  const __m128 sums = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  _mm_storeu_ps(s, _mm_mul_ps(sums, _mm_set1_ps(scale)));
}

// Scores of one vector for its keys [j, end) in 4-key passes (end - j a
// multiple of 4, hd of 8), prefetching while 8 keys remain before `n_keys`.
template <class E>
void ScoresAlone(const AttendVector& u, const E* k, int64_t kv_stride, int64_t j, int64_t end,
                 int64_t hd, float scale) {
  for (; j < end; j += 4) {
    const E *k0 = k + j * kv_stride, *k1 = k0 + kv_stride, *k2 = k1 + kv_stride,
            *k3 = k2 + kv_stride;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    if (j + 8 < u.n_keys) PrefetchKeys(k, j, kv_stride, hd);
    for (int64_t c = 0; c < hd; c += 8) {
      const __m256 qv = _mm256_loadu_ps(u.q + c);
      a0 = _mm256_fmadd_ps(qv, LoadKv8(k0 + c), a0);
      a1 = _mm256_fmadd_ps(qv, LoadKv8(k1 + c), a1);
      a2 = _mm256_fmadd_ps(qv, LoadKv8(k2 + c), a2);
      a3 = _mm256_fmadd_ps(qv, LoadKv8(k3 + c), a3);
    }
    StoreScores4(a0, a1, a2, a3, scale, u.s + j);
  }
}

// a[t] += pu * x[t] and b[t] += pw * x[t], t < 4: one vector's four
// products and its partner's, from the same loads.
OCTET_INLINE void FmaPair4(__m256 pu, __m256 pw, const __m256 x[4], __m256 a[4], __m256 b[4]) {
#pragma GCC unroll 4
  for (int t = 0; t < 4; ++t) {
    a[t] = _mm256_fmadd_ps(pu, x[t], a[t]);
    b[t] = _mm256_fmadd_ps(pw, x[t], b[t]);
  }
}

// a[t] += p * row[8 t .. 8 t + 7], t < 4 (32 columns of one value row).
template <class E>
OCTET_INLINE void FmaRow4(__m256 p, const E* row, __m256 a[4]) {
#pragma GCC unroll 4
  for (int t = 0; t < 4; ++t) a[t] = _mm256_fmadd_ps(p, LoadKv8(row + 8 * t), a[t]);
}

// Scores of two vectors for keys [0, end) (both have at least `end`, a
// multiple of 4), each K vector loaded once for both.
template <class E>
void ScoresPair(const AttendVector& u, const AttendVector& w, const E* k, int64_t kv_stride,
                int64_t end, int64_t hd, float scale) {
  for (int64_t j = 0; j < end; j += 4) {
    const E *k0 = k + j * kv_stride, *k1 = k0 + kv_stride, *k2 = k1 + kv_stride,
            *k3 = k2 + kv_stride;
    __m256 a[4], b[4];
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) a[t] = b[t] = _mm256_setzero_ps();
    if (j + 8 < u.n_keys) PrefetchKeys(k, j, kv_stride, hd);
    for (int64_t c = 0; c < hd; c += 8) {
      const __m256 x[4] = {InRegister(LoadKv8(k0 + c)), InRegister(LoadKv8(k1 + c)),
                           InRegister(LoadKv8(k2 + c)), InRegister(LoadKv8(k3 + c))};
      FmaPair4(_mm256_loadu_ps(u.q + c), _mm256_loadu_ps(w.q + c), x, a, b);
    }
    StoreScores4(a[0], a[1], a[2], a[3], scale, u.s + j);
    StoreScores4(b[0], b[1], b[2], b[3], scale, w.s + j);
  }
}

// A vector's scores from key `j` on, as a call for it alone makes them: the
// rest of its 4-key passes, then a dot per key for the last n_keys % 4 (or
// for every key when hd is not a multiple of 8).
template <class E>
void ScoresFinish(const AttendVector& u, const E* k, int64_t kv_stride, int64_t j, int64_t hd,
                  float scale) {
  if (hd % 8 == 0) {
    const int64_t end = u.n_keys / 4 * 4;
    ScoresAlone(u, k, kv_stride, j, end, hd, scale);
    j = end;
  }
  for (; j < u.n_keys; ++j) u.s[j] = DotKv(u.q, k + j * kv_stride, hd) * scale;
}

// out = sum_j p_j v_j for one vector: 64 columns a pass, then 8, then one.
template <class E>
void ValuesAlone(const AttendVector& u, const E* v, int64_t kv_stride, int64_t hd) {
  constexpr int64_t kPerLine = 64 / sizeof(E);
  const float* p = u.s;
  const int64_t n_keys = u.n_keys;
  float* o = u.out;
  int64_t c = 0;
  for (; c + 64 <= hd; c += 64) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (int64_t j = 0; j < n_keys; ++j) {
      const __m256 pj = _mm256_broadcast_ss(p + j);
      const E* vj = v + j * kv_stride + c;
      if (j + 8 < n_keys) {
        for (int64_t e = 0; e < 64; e += kPerLine) PrefetchKv(vj + 8 * kv_stride + e);
      }
      a0 = _mm256_fmadd_ps(pj, LoadKv8(vj), a0);
      a1 = _mm256_fmadd_ps(pj, LoadKv8(vj + 8), a1);
      a2 = _mm256_fmadd_ps(pj, LoadKv8(vj + 16), a2);
      a3 = _mm256_fmadd_ps(pj, LoadKv8(vj + 24), a3);
      a4 = _mm256_fmadd_ps(pj, LoadKv8(vj + 32), a4);
      a5 = _mm256_fmadd_ps(pj, LoadKv8(vj + 40), a5);
      a6 = _mm256_fmadd_ps(pj, LoadKv8(vj + 48), a6);
      a7 = _mm256_fmadd_ps(pj, LoadKv8(vj + 56), a7);
    }
    _mm256_storeu_ps(o + c, a0);
    _mm256_storeu_ps(o + c + 8, a1);
    _mm256_storeu_ps(o + c + 16, a2);
    _mm256_storeu_ps(o + c + 24, a3);
    _mm256_storeu_ps(o + c + 32, a4);
    _mm256_storeu_ps(o + c + 40, a5);
    _mm256_storeu_ps(o + c + 48, a6);
    _mm256_storeu_ps(o + c + 56, a7);
  }
  for (; c + 8 <= hd; c += 8) {
    __m256 a = _mm256_setzero_ps();
    for (int64_t j = 0; j < n_keys; ++j) {
      a = _mm256_fmadd_ps(_mm256_broadcast_ss(p + j), LoadKv8(v + j * kv_stride + c), a);
    }
    _mm256_storeu_ps(o + c, a);
  }
  for (; c < hd; ++c) {
    float a = 0.0f;
    for (int64_t j = 0; j < n_keys; ++j) a += p[j] * KvAt(v + j * kv_stride + c);
    o[c] = a;
  }
}

// The same for two vectors (hd a multiple of 32), 32 columns a pass: keys
// both have go to both from one load of V; the longer one's last keys
// continue its own sums. Each output lane adds its keys in ValuesAlone's order.
template <class E>
void ValuesPair(const AttendVector& u, const AttendVector& w, const E* v, int64_t kv_stride,
                int64_t hd) {
  constexpr int64_t kPerLine = 64 / sizeof(E);
  const int64_t both = MinI64(u.n_keys, w.n_keys);
  for (int64_t c = 0; c < hd; c += 32) {
    __m256 a[4], b[4];
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) a[t] = b[t] = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j < both; ++j) {
      const E* vj = v + j * kv_stride + c;
      if (j + 8 < both) {
        for (int64_t e = 0; e < 32; e += kPerLine) PrefetchKv(vj + 8 * kv_stride + e);
      }
      const __m256 x[4] = {InRegister(LoadKv8(vj)), InRegister(LoadKv8(vj + 8)),
                           InRegister(LoadKv8(vj + 16)), InRegister(LoadKv8(vj + 24))};
      FmaPair4(_mm256_broadcast_ss(u.s + j), _mm256_broadcast_ss(w.s + j), x, a, b);
    }
    for (int64_t t = j; t < u.n_keys; ++t)
      FmaRow4(_mm256_broadcast_ss(u.s + t), v + t * kv_stride + c, a);
    for (int64_t t = j; t < w.n_keys; ++t)
      FmaRow4(_mm256_broadcast_ss(w.s + t), v + t * kv_stride + c, b);
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) {
      _mm256_storeu_ps(u.out + c + 8 * t, a[t]);
      _mm256_storeu_ps(w.out + c + 8 * t, b[t]);
    }
  }
}

// Attention of n vectors against one KV head's keys and values, two at a
// time (the last one of an odd count alone).
template <class E>
void AttendVectors(const AttendVector* vecs, int64_t n, const E* k, const E* v, int64_t kv_stride,
                   int64_t hd, float scale) {
  for (int64_t i = 0; i < n; i += 2) {
    const AttendVector& u = vecs[i];
    if (i + 1 < n && hd % 8 == 0) {
      const AttendVector& w = vecs[i + 1];
      const int64_t both = MinI64(u.n_keys, w.n_keys) / 4 * 4;
      ScoresPair(u, w, k, kv_stride, both, hd, scale);
      ScoresFinish(w, k, kv_stride, both, hd, scale);
      ScoresFinish(u, k, kv_stride, both, hd, scale);
    } else {
      ScoresFinish(u, k, kv_stride, 0, hd, scale);
      if (i + 1 < n) ScoresFinish(vecs[i + 1], k, kv_stride, 0, hd, scale);
    }
  }
  for (int64_t i = 0; i < n; ++i) SoftmaxRow(vecs[i].s, vecs[i].n_keys);
  for (int64_t i = 0; i < n; i += 2) {
    if (i + 1 < n && hd % 32 == 0) {
      ValuesPair(vecs[i], vecs[i + 1], v, kv_stride, hd);
    } else {
      ValuesAlone(vecs[i], v, kv_stride, hd);
      if (i + 1 < n) ValuesAlone(vecs[i + 1], v, kv_stride, hd);
    }
  }
}

// Vectors of one call at a time on the stack.
constexpr int64_t kAttendBatch = 32;

template <class E>
void Attend(const float* q, int64_t q_stride, int64_t n_q, const E* k, const E* v,
            int64_t kv_stride, int64_t n_keys, int64_t hd, float scale, float* scores, float* out,
            int64_t out_stride) {
  AttendVector vecs[kAttendBatch];
  for (int64_t i0 = 0; i0 < n_q; i0 += kAttendBatch) {
    const int64_t n = MinI64(kAttendBatch, n_q - i0);
    for (int64_t i = 0; i < n; ++i) {
      vecs[i] = {q + (i0 + i) * q_stride, scores + (i0 + i) * n_keys, out + (i0 + i) * out_stride,
                 n_keys};
    }
    AttendVectors(vecs, n, k, v, kv_stride, hd, scale);
  }
}

// IsaKernels::attend_causal: rows r < n_rows at consecutive positions, row r
// attending keys [0, n_keys + r); its n_q heads are vectors of their own.
// Heads of one row pair up (the same keys); with one head, neighbouring rows.
template <class E>
void AttendCausal(const float* q, int64_t q_row_stride, int64_t n_rows, int64_t n_q, const E* k,
                  const E* v, int64_t kv_stride, int64_t n_keys, int64_t hd, float scale,
                  float* scores, float* out, int64_t out_row_stride) {
  AttendVector vecs[kAttendBatch];
  int64_t n = 0;
  float* s = scores;
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t h = 0; h < n_q; ++h) {
      vecs[n++] = {q + r * q_row_stride + h * hd, s, out + r * out_row_stride + h * hd, n_keys + r};
      s += n_keys + r;
      if (n == kAttendBatch) {  // even: pairs stay as they were formed
        AttendVectors(vecs, n, k, v, kv_stride, hd, scale);
        n = 0;
      }
    }
  }
  if (n > 0) AttendVectors(vecs, n, k, v, kv_stride, hd, scale);
}

// qt, acc and kb (8 x hd each), pt (8 x 8), al and inv (8 each).
int64_t AttendRowsWork(int64_t hd) { return 3 * 8 * hd + 8 * 8 + 2 * 8; }

// Prefill attention (IsaKernels::attend_rows) as the AVX-512 table's, with
// eight query rows of one head in the lanes and blocks of eight keys: score
// vector t (key j0 + t, a row a lane) sums K[j0 + t][d] (broadcast) x Qt[d]
// over the head, Qt the rows' queries transposed; the block's maximum, the
// rescale of earlier sums and the exps are lane-wise (one Exp8 a key for the
// eight rows); each row's weighted sum of values, kept in `acc`, takes the
// key's probability as a broadcast. The row kernel (Attend) reads the head's
// whole K and V again for every row (from L2 past ~100 keys); here a block's
// key and value rows serve eight rows. Keys past a row's position get -inf
// (exp gives 0); lanes past n_rows repeat the last row and are not stored.
template <int HD, class E>
void AttendRowsHd(const float* q, int64_t q_row_stride, int64_t n_rows, int64_t group,
                  const int32_t* positions, const E* k, const E* v, int64_t kv_stride, float scale,
                  float* out, int64_t out_row_stride, float* work) {
  constexpr int C = HD / 8;  // vectors a head row
  float* qt = work;          // [HD][8]: the rows' queries, transposed
  float* acc = qt + 8 * HD;  // [8][HD]: each row's weighted sum of values
  float* kb = acc + 8 * HD;  // [8][HD]: an F16 block of keys as floats
  float* pt = kb + 8 * HD;   // [8][8]: a block's probabilities, key-major
  float* al = pt + 8 * 8;    // [8]: a block's rescale factors
  float* inv = al + 8;       // [8]: 1 / each row's sum
  const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int64_t r0 = 0; r0 < n_rows; r0 += 8) {
    const int nr = n_rows - r0 < 8 ? static_cast<int>(n_rows - r0) : 8;
    alignas(32) int32_t pos[8];
    int32_t last = 0;
    for (int i = 0; i < 8; ++i) {
      pos[i] = positions[r0 + (i < nr ? i : nr - 1)];
      last = pos[i] > last ? pos[i] : last;
    }
    const __m256i posv = _mm256_load_si256(reinterpret_cast<const __m256i*>(pos));
    const int64_t n_keys = static_cast<int64_t>(last) + 1;
    for (int64_t g = 0; g < group; ++g) {
      for (int i = 0; i < 8; ++i) {
        const float* qi = q + (r0 + (i < nr ? i : nr - 1)) * q_row_stride + g * HD;
        for (int d = 0; d < HD; ++d) qt[d * 8 + i] = qi[d];
      }
      for (int i = 0; i < 8 * HD; i += 8) _mm256_storeu_ps(acc + i, _mm256_setzero_ps());
      __m256 m = neg_inf, l = _mm256_setzero_ps();
      for (int64_t j0 = 0; j0 < n_keys; j0 += 8) {
        const int nb = n_keys - j0 < 8 ? static_cast<int>(n_keys - j0) : 8;
        const float* kf;
        int64_t kstride;
        if constexpr (sizeof(E) == 4) {
          kf = reinterpret_cast<const float*>(k) + j0 * kv_stride;
          kstride = kv_stride;
        } else {
          for (int t = 0; t < nb; ++t) {
            for (int c = 0; c < HD; c += 8) {
              _mm256_storeu_ps(kb + t * HD + c, LoadKv8(k + (j0 + t) * kv_stride + c));
            }
          }
          kf = kb;
          kstride = HD;
        }
        __m256 sc[8];
#pragma GCC unroll 8
        for (int t = 0; t < 8; ++t) sc[t] = _mm256_setzero_ps();
        for (int d = 0; d < HD; ++d) {
          const __m256 qd = _mm256_loadu_ps(qt + d * 8);
#pragma GCC unroll 8
          for (int t = 0; t < 8; ++t) {
            if (t < nb)
              sc[t] = _mm256_fmadd_ps(_mm256_broadcast_ss(kf + t * kstride + d), qd, sc[t]);
          }
        }
        __m256 bm = neg_inf;
#pragma GCC unroll 8
        for (int t = 0; t < 8; ++t) {
          // Key j0 + t: -inf in the lanes of rows before it, and past the block.
          const __m256 later = _mm256_castsi256_ps(
              _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(j0 + t)), posv));
          sc[t] = t < nb ? _mm256_blendv_ps(_mm256_mul_ps(sc[t], vscale), neg_inf, later) : neg_inf;
          bm = _mm256_max_ps(bm, sc[t]);
        }
        // Key 0 is in every row's range, so from the first block on m is finite.
        const __m256 nm = _mm256_max_ps(m, bm);
        const __m256 alpha = Exp8(_mm256_sub_ps(m, nm));
        m = nm;
        __m256 bl = _mm256_setzero_ps();
#pragma GCC unroll 8
        for (int t = 0; t < 8; ++t) {
          const __m256 p = Exp8(_mm256_sub_ps(sc[t], nm));
          bl = _mm256_add_ps(bl, p);
          _mm256_storeu_ps(pt + t * 8, p);
        }
        l = _mm256_fmadd_ps(l, alpha, bl);
        _mm256_storeu_ps(al, alpha);
        for (int c = 0; c < C; ++c) {
          __m256 a[8];
#pragma GCC unroll 8
          for (int i = 0; i < 8; ++i) {
            a[i] =
                _mm256_mul_ps(_mm256_loadu_ps(acc + i * HD + c * 8), _mm256_broadcast_ss(al + i));
          }
          for (int t = 0; t < nb; ++t) {
            const __m256 vv = LoadKv8(v + (j0 + t) * kv_stride + c * 8);
#pragma GCC unroll 8
            for (int i = 0; i < 8; ++i) {
              a[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(pt + t * 8 + i), vv, a[i]);
            }
          }
#pragma GCC unroll 8
          for (int i = 0; i < 8; ++i) _mm256_storeu_ps(acc + i * HD + c * 8, a[i]);
        }
      }
      _mm256_storeu_ps(inv, _mm256_div_ps(_mm256_set1_ps(1.0f), l));
      for (int i = 0; i < nr; ++i) {
        float* o = out + (r0 + i) * out_row_stride + g * HD;
        const __m256 s = _mm256_broadcast_ss(inv + i);
        for (int c = 0; c < C; ++c) {
          _mm256_storeu_ps(o + c * 8, _mm256_mul_ps(_mm256_loadu_ps(acc + i * HD + c * 8), s));
        }
      }
    }
  }
}

template <class E>
void AttendRows(const float* q, int64_t q_row_stride, int64_t n_rows, int64_t group,
                const int32_t* positions, const E* k, const E* v, int64_t kv_stride, int64_t hd,
                float scale, float* out, int64_t out_row_stride, float* work) {
  if (hd == 128) {
    AttendRowsHd<128>(q, q_row_stride, n_rows, group, positions, k, v, kv_stride, scale, out,
                      out_row_stride, work);
  } else {  // 64: CpuBackend sends no other
    AttendRowsHd<64>(q, q_row_stride, n_rows, group, positions, k, v, kv_stride, scale, out,
                     out_row_stride, work);
  }
}

}  // namespace

void ExpAvx2(const float* x, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, Exp8(_mm256_loadu_ps(x + i)));
  if (i < n) {
    float buf[8] = {};
    for (int64_t t = i; t < n; ++t) buf[t - i] = x[t];
    _mm256_storeu_ps(buf, Exp8(_mm256_loadu_ps(buf)));
    for (int64_t t = i; t < n; ++t) out[t] = buf[t - i];
  }
}

const IsaKernels& Avx2Kernels() {
  static const IsaKernels k = [] {
    IsaKernels t = {
        "avx2",  DecodeRows, Gemv,          DotTile,          Dot, Axpy, Scale, Add, RmsNormRow,
        SiluMul, SoftmaxRow, Attend<float>, Attend<uint16_t>,
    };
    t.soft_cap = SoftCap;
    t.relu2 = Relu2;
    t.argmax = Argmax;
    t.attend_rows_work = AttendRowsWork;
    t.attend_rows = AttendRows<float>;
    t.attend_rows_f16 = AttendRows<uint16_t>;
    t.attend_causal = AttendCausal<float>;
    t.attend_causal_f16 = AttendCausal<uint16_t>;
    AddAvx2GemmKernels(&t);
    AddAvx2Nvfp4TileKernels(&t);
    // Zen 3, 2 threads, a throwaway harness timing Matmul both ways in
    // alternation (medians): the decode kernels against the GEMM at 9 / 16 /
    // 32 / 64 rows, BF16 6144 x 2048 0.68 / 0.78 / 0.87 / 1.06x, F16 3072 x
    // 1024 0.64 / 0.61 / 0.78 / 0.82x, F32 1.07 / 1.00 / 1.00 / 1.00x, NVFP4
    // from tiles 6144 x 2048 0.44 / 0.64 / 0.82 / 1.06x and an expert's
    // 768 x 2048 and 2048 x 768 0.43-0.45 / 0.66-0.69 / 0.89-0.94 / 1.10-1.16x,
    // NVFP4 row-major 1.00 / 1.36 / 1.75 / 2.22x. NVFP4 stays at 8 rows (see
    // CpuBackend::DecodeRows): the tile kernels would take their 15-bit
    // activation rounding into prefill chunks too, which moved single-rank
    // against TP logits of qwen3-tiny-nvfp4 past test_tensor_parallel's 1e-4.
    t.decode_batch_rows = 32;
    return t;
  }();
  return k;
}

}  // namespace octet::kernels::cpu
