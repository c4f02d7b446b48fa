// AVX2 + FMA + F16C kernels (x86-64). Compiled with -mavx2 -mfma -mf16c and
// only called after the runtime check in cpu_backend.cpp; see isa.h for why
// nothing here may instantiate std:: templates (C math functions only).
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "cpu/isa.h"

namespace octet::kernels::cpu {
namespace {

inline float Hsum(__m256 v) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
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

// NVFP4: 8 E2M1 codes from 4 bytes (low nibble first) -> 8 floats, each the
// code's value times the block scale already folded into `lut_scaled`
// (lut_scaled[i] = kE2m1Values[i] * scale; exact). Lane i shifts the word right
// by 4i so its nibble sits in bits 0-3; the permute uses bits 0-2 (magnitude)
// and bit 3 becomes the sign.
struct Nvfp4Decoder {
  __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  __m256i sign_bit = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  __m256 lut = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);

  inline __m256 Decode8(const uint8_t* p, __m256 lut_scaled) const {
    int32_t word;
    memcpy(&word, p, 4);
    const __m256i v = _mm256_srlv_epi32(_mm256_set1_epi32(word), shifts);
    const __m256 mag = _mm256_permutevar8x32_ps(lut_scaled, v);
    const __m256i sign = _mm256_and_si256(_mm256_slli_epi32(v, 28), sign_bit);
    return _mm256_xor_ps(mag, _mm256_castsi256_ps(sign));
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
          const __m256 lut =
              _mm256_mul_ps(dec.lut, _mm256_set1_ps(e4m3[scales[col / kNvfp4BlockSize]]));
          _mm256_storeu_ps(o + c, _mm256_mul_ps(dec.Decode8(row + col / 2, lut), gs));
          _mm256_storeu_ps(o + c + 8, _mm256_mul_ps(dec.Decode8(row + col / 2 + 4, lut), gs));
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
      _Pragma("GCC unroll 8") for (int i = 0; i < M; ++i) acc[j][i] = _mm256_fmadd_ps(wv, xv[i], acc[j][i]);
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
      const __m256 lut = _mm256_mul_ps(dec.lut, _mm256_set1_ps(e4m3[scales[j][b]]));
      const __m256 w0 = dec.Decode8(rows[j] + b * 8, lut);
      const __m256 w1 = dec.Decode8(rows[j] + b * 8 + 4, lut);
      _Pragma("GCC unroll 8") for (int i = 0; i < M; ++i) {
        acc[j][i] = _mm256_fmadd_ps(w0, x0[i], acc[j][i]);
        acc[j][i] = _mm256_fmadd_ps(w1, x1[i], acc[j][i]);
      }
    }
  }
  _Pragma("GCC unroll 8") for (int j = 0; j < R; ++j) {
    _Pragma("GCC unroll 8") for (int i = 0; i < M; ++i) {
      const float s = Hsum(acc[j][i]) * w.global_scale;
      float* out = y + i * ldy + j;
      *out = accumulate ? *out + s : s;
    }
  }
}

template <int M>
void GemvM(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x, int64_t ldx,
           float* y, int64_t ldy, bool accumulate) {
  const bool fp4 = w.format == WeightFormat::kNvfp4;
  int64_t r = row0;
  for (; r + 4 <= row1; r += 4) {
    if (fp4) {
      GemvNvfp4Rows<M, 4>(w, r, x, ldx, y + (r - row0), ldy, accumulate);
    } else {
      GemvDenseRows<M, 4>(w, r, x, ldx, y + (r - row0), ldy, accumulate);
    }
  }
  for (; r < row1; ++r) {
    if (fp4) {
      GemvNvfp4Rows<M, 1>(w, r, x, ldx, y + (r - row0), ldy, accumulate);
    } else {
      GemvDenseRows<M, 1>(w, r, x, ldx, y + (r - row0), ldy, accumulate);
    }
  }
}

void Gemv(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x, int64_t m,
          int64_t ldx, float* y, int64_t ldy, bool accumulate) {
  if (m == 1) {
    GemvM<1>(w, row0, row1, x, ldx, y, ldy, accumulate);
  } else {
    GemvM<2>(w, row0, row1, x, ldx, y, ldy, accumulate);
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
      _Pragma("GCC unroll 8") for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_fmadd_ps(av, bv[j], acc[i][j]);
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
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
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

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

void SoftmaxRow(float* x, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = expf(x[i] - mx);
    sum += x[i];
  }
  Scale(1.0f / sum, x, n);
}

}  // namespace

const IsaKernels& Avx2Kernels() {
  static const IsaKernels k = {
      "avx2", DecodeRows, Gemv, DotTile, Dot, Axpy, Scale, Add, RmsNormRow, SiluMul, SoftmaxRow,
  };
  return k;
}

}  // namespace octet::kernels::cpu
