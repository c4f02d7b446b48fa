// AVX-512 (F, BW, DQ, VL, VBMI) kernels on x86-64 for the decode GEMVs that
// are compute-bound on AVX2: NVFP4 at every batch size, and dense weights
// against 3-8 activation rows; everything else is the AVX2 table. Compiled
// with -mavx512... and only called after the runtime check in backend.cpp; see
// isa.h for why nothing here may instantiate std:: templates.
//
// Why NVFP4 needs it: on AVX2 an NVFP4 GEMV is compute-bound. Turning 8 E2M1
// codes into floats takes five shuffle/shift ops there (AVX2 has no 16-entry
// permute), so two cores decode ~10 GB/s of packed weights, a third of this
// machine's memory bandwidth. With AVX-512, one VPMULTISHIFTQB puts each of a
// block's 16 codes in its own lane and one 16-entry VPERMPS maps code (sign
// included) to value: two ops per 16 weights.
#include <immintrin.h>
#include <string.h>

#include "cpu/isa.h"

// GCC 12 reports its own AVX-512 intrinsics (the masked forms behind
// _mm512_multishift_epi64_epi8 and _mm512_reduce_add_ps) as reading an
// uninitialised value (GCC PR 105593); the code here has none.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace octet::kernels::cpu {
namespace {

#define OCTET_INLINE inline __attribute__((always_inline))
#define OCTET_INLINE_LAMBDA __attribute__((always_inline))

// One NVFP4 block (8 bytes, 16 codes, low nibble first) -> its 16 E2M1 values.
struct Nvfp4Decoder16 {
  // Byte 4i%8 of qword i/2 (the low byte of 32-bit lane i) takes the 8 bits at
  // 4i of the block's 64-bit word: code i in its low 4 bits. VPERMPS reads
  // only those 4 bits, so the rest of each lane does not matter.
  __m512i select =
      _mm512_set_epi64((60LL << 32) | 56, (52LL << 32) | 48, (44LL << 32) | 40, (36LL << 32) | 32,
                       (28LL << 32) | 24, (20LL << 32) | 16, (12LL << 32) | 8, (4LL << 32) | 0);
  __m512 values = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f,
                                 -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);

  OCTET_INLINE __m512 Decode16(const uint8_t* block) const { return Decode16(block, values); }
  // The same through another 16-entry table (e.g. the values times a scale).
  OCTET_INLINE __m512 Decode16(const uint8_t* block, __m512 table) const {
    int64_t word;
    memcpy(&word, block, 8);
    const __m512i codes = _mm512_multishift_epi64_epi8(select, _mm512_set1_epi64(word));
    return _mm512_permutexvar_ps(codes, table);
  }
};

// The 16 E2M1 values times each of the 256 E4M3 scales (exact in f32): one
// 64-byte row per scale byte, 16 KiB that stay in L1. Loading a block's row
// replaces a broadcast and a multiply on the two vector ports that the
// decode is bound by; filled once, by Avx512Kernels().
alignas(64) float g_scaled_values[256][16];

void FillScaledValues() {
  static const float kValues[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                    -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  const float* e4m3 = E4m3Table();
  for (int s = 0; s < 256; ++s) {
    for (int c = 0; c < 16; ++c) g_scaled_values[s][c] = kValues[c] * e4m3[s];
  }
}

OCTET_INLINE __m512 ScaledValues(uint8_t scale) { return _mm512_load_ps(g_scaled_values[scale]); }

OCTET_INLINE void Store(float* out, float v, bool accumulate) { *out = accumulate ? *out + v : v; }

// Prefetch distance: the same columns of the next group of 4 rows (0: none).
// See isa_avx2.cpp (Gemv4Dense) for why decode prefetches.
OCTET_INLINE void Prefetch(const uint8_t* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
}

// Four weight rows against one activation row. Each block's codes go through
// its scale's row of g_scaled_values (the reference's dequantized weight before
// the global scale), then one FMA with x; the global scale is applied once at
// the end. Two permutes and an FMA per 16 weights on the two 512-bit ports;
// measured about 13 G weights/s (7 GB/s packed) per core, still below what
// memory gives: NVFP4 decode stays compute-bound here.
void Gemv4M1(const WeightMatrix& w, const uint8_t* const* rows, const uint8_t* const* scales,
             int64_t prefetch, const float* x, float* y, bool accumulate) {
  const Nvfp4Decoder16 dec;
  const int64_t blocks = w.cols / kNvfp4BlockSize;
  const uint8_t *r0 = rows[0], *r1 = rows[1], *r2 = rows[2], *r3 = rows[3];
  const uint8_t *s0 = scales[0], *s1 = scales[1], *s2 = scales[2], *s3 = scales[3];
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  auto block = [&](int64_t b) OCTET_INLINE_LAMBDA {
    const __m512 xv = _mm512_loadu_ps(x + b * 16);
    a0 = _mm512_fmadd_ps(dec.Decode16(r0 + b * 8, ScaledValues(s0[b])), xv, a0);
    a1 = _mm512_fmadd_ps(dec.Decode16(r1 + b * 8, ScaledValues(s1[b])), xv, a1);
    a2 = _mm512_fmadd_ps(dec.Decode16(r2 + b * 8, ScaledValues(s2[b])), xv, a2);
    a3 = _mm512_fmadd_ps(dec.Decode16(r3 + b * 8, ScaledValues(s3[b])), xv, a3);
  };
  int64_t b = 0;
  for (; b + 8 <= blocks; b += 8) {  // 8 blocks = one 64-byte line per row
    if (prefetch != 0) {
      Prefetch(r0 + prefetch + b * 8);
      Prefetch(r1 + prefetch + b * 8);
      Prefetch(r2 + prefetch + b * 8);
      Prefetch(r3 + prefetch + b * 8);
    }
#pragma GCC unroll 8
    for (int u = 0; u < 8; ++u) block(b + u);
  }
  for (; b < blocks; ++b) block(b);
  Store(y + 0, _mm512_reduce_add_ps(a0) * w.global_scale, accumulate);
  Store(y + 1, _mm512_reduce_add_ps(a1) * w.global_scale, accumulate);
  Store(y + 2, _mm512_reduce_add_ps(a2) * w.global_scale, accumulate);
  Store(y + 3, _mm512_reduce_add_ps(a3) * w.global_scale, accumulate);
}

// Four weight rows (rows past nrows repeat row 0 and are not stored) against
// M = 2..4 activation rows (batched decode). Each weight block is decoded once
// (through its scale's row of g_scaled_values) however many activation rows
// use it.
template <int M>
void Gemv4Mx(const WeightMatrix& w, const uint8_t* const* rows, const uint8_t* const* scales,
             int nrows, const float* x, int64_t ldx, float* y, int64_t ldy, bool accumulate) {
  static_assert(M >= 2 && M <= 4);
  const Nvfp4Decoder16 dec;
  const int64_t blocks = w.cols / kNvfp4BlockSize;
  const float *x0 = x, *x1 = x + ldx, *x2 = x + 2 * ldx, *x3 = x + (M - 1) * ldx;
  __m512 a00 = _mm512_setzero_ps(), a01 = a00, a02 = a00, a03 = a00;  // a<row><x row>
  __m512 a10 = a00, a11 = a00, a12 = a00, a13 = a00;
  __m512 a20 = a00, a21 = a00, a22 = a00, a23 = a00;
  __m512 a30 = a00, a31 = a00, a32 = a00, a33 = a00;
  for (int64_t b = 0; b < blocks; ++b) {
    const __m512 xv0 = _mm512_loadu_ps(x0 + b * 16), xv1 = _mm512_loadu_ps(x1 + b * 16);
    const __m512 xv2 = M > 2 ? _mm512_loadu_ps(x2 + b * 16) : xv0;
    const __m512 xv3 = M > 3 ? _mm512_loadu_ps(x3 + b * 16) : xv0;
    auto row = [&](int j, __m512& c0, __m512& c1, __m512& c2, __m512& c3) OCTET_INLINE_LAMBDA {
      const __m512 table = ScaledValues(scales[j][b]);
      const __m512 wv = dec.Decode16(rows[j] + b * 8, table);
      c0 = _mm512_fmadd_ps(wv, xv0, c0);
      c1 = _mm512_fmadd_ps(wv, xv1, c1);
      if constexpr (M > 2) c2 = _mm512_fmadd_ps(wv, xv2, c2);
      if constexpr (M > 3) c3 = _mm512_fmadd_ps(wv, xv3, c3);
    };
    row(0, a00, a01, a02, a03);
    row(1, a10, a11, a12, a13);
    row(2, a20, a21, a22, a23);
    row(3, a30, a31, a32, a33);
  }
  const __m512 acc[4][4] = {
      {a00, a01, a02, a03}, {a10, a11, a12, a13}, {a20, a21, a22, a23}, {a30, a31, a32, a33}};
  for (int j = 0; j < nrows; ++j) {
    for (int i = 0; i < M; ++i) {
      Store(y + i * ldy + j, _mm512_reduce_add_ps(acc[j][i]) * w.global_scale, accumulate);
    }
  }
}

// ---- dense batched decode: two weight rows x M = 3..8 activation rows -----

// 16 BF16 / F16 / F32 weights as floats.
OCTET_INLINE __m512 LoadBf16x16(const uint8_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
struct LoadBf16 {
  static constexpr int kBytes = 2;
  static OCTET_INLINE __m512 Load(const uint8_t* row, int64_t c) {
    return LoadBf16x16(row + c * 2);
  }
};
struct LoadF16 {
  static constexpr int kBytes = 2;
  static OCTET_INLINE __m512 Load(const uint8_t* row, int64_t c) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + c * 2)));
  }
};
struct LoadF32 {
  static constexpr int kBytes = 4;
  static OCTET_INLINE __m512 Load(const uint8_t* row, int64_t c) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row + c * 4));
  }
};

// The weight value at column c of a dense row (the < 16-column tail).
float DenseAt(const WeightMatrix& w, const uint8_t* row, int64_t c) {
  switch (w.format) {
    case WeightFormat::kBF16: {
      uint16_t h;
      memcpy(&h, row + c * 2, 2);
      const uint32_t bits = static_cast<uint32_t>(h) << 16;
      float f;
      memcpy(&f, &bits, 4);
      return f;
    }
    case WeightFormat::kF16: {
      uint16_t h;
      memcpy(&h, row + c * 2, 2);
      return _cvtsh_ss(h);
    }
    default: {
      float f;
      memcpy(&f, row + c * 4, 4);
      return f;
    }
  }
}

// Two weight rows (r1 may equal r0; then only row 0 is stored) against M
// activation rows: each 16-weight vector is converted once and used M times,
// 2*M accumulators of the 32 registers. A batch of 8 decode rows is one pass
// over the weights instead of two, at twice the AVX2 FMA width (this CPU
// family has two 512-bit FMA ports). Prefetches `prefetch` bytes ahead like
// the AVX2 kernels.
template <class L, int M>
void Gemv2DenseMx(const WeightMatrix& w, const uint8_t* r0, const uint8_t* r1, bool store_r1,
                  int64_t prefetch, const float* x, int64_t ldx, float* y, int64_t ldy,
                  bool accumulate) {
  static_assert(M >= 3 && M <= 8);
  const int64_t k = w.cols;
  // Fully unrolled (constant indices), so the arrays live in registers.
  __m512 a[M], b[M];
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) a[i] = b[i] = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 16 <= k; c += 16) {
    if (prefetch != 0 && (c * L::kBytes) % 64 == 0) {
      Prefetch(r0 + prefetch + c * L::kBytes);
      Prefetch(r1 + prefetch + c * L::kBytes);
    }
    const __m512 w0 = L::Load(r0, c), w1 = L::Load(r1, c);
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      const __m512 xv = _mm512_loadu_ps(x + i * ldx + c);
      a[i] = _mm512_fmadd_ps(w0, xv, a[i]);
      b[i] = _mm512_fmadd_ps(w1, xv, b[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
    float s0 = _mm512_reduce_add_ps(a[i]), s1 = _mm512_reduce_add_ps(b[i]);
    for (int64_t t = c; t < k; ++t) {
      s0 += DenseAt(w, r0, t) * x[i * ldx + t];
      s1 += DenseAt(w, r1, t) * x[i * ldx + t];
    }
    Store(y + i * ldy, s0, accumulate);
    if (store_r1) Store(y + i * ldy + 1, s1, accumulate);
  }
}

// Batched decode walks the columns in blocks of this many: M activation rows
// of a block (8 x 4 KiB) stay in L1 while the task's weight rows stream past;
// whole 3072-column rows (8 x 12 KiB of activations) do not. A/B, 8 rows, 2
// threads, BF16 from DRAM: 1024 x 3072 64 -> 78-84 GFLOP/s, 1024 x 2048 62-65
// -> 68-77; matrices of up to 1024 columns are unchanged (one block).
constexpr int64_t kBatchColumnBlock = 1024;

template <class L, int M>
void GemvDenseBatch(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x, int64_t ldx,
                    float* y, int64_t ldy, bool accumulate) {
  const int64_t block = w.cols > kBatchColumnBlock ? kBatchColumnBlock : w.cols;
  for (int64_t c0 = 0; c0 < w.cols; c0 += block) {
    const int64_t nc = w.cols - c0 < block ? w.cols - c0 : block;
    const WeightMatrix part = nc == w.cols ? w : w.ColSlice(c0, nc);
    for (int64_t r = row0; r < row1; r += 2) {
      const uint8_t* r0 = static_cast<const uint8_t*>(part.data) + r * part.row_stride;
      const bool pair = r + 1 < row1;
      // Two pairs ahead, within this call.
      const int64_t prefetch = r + 6 <= row1 ? 4 * part.row_stride : 0;
      Gemv2DenseMx<L, M>(part, r0, pair ? r0 + part.row_stride : r0, pair, prefetch, x + c0, ldx,
                         y + (r - row0), ldy, accumulate || c0 > 0);
    }
  }
}

template <class L>
void GemvDense(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x, int64_t m,
               int64_t ldx, float* y, int64_t ldy, bool accumulate) {
  switch (m) {
    case 3:
      return GemvDenseBatch<L, 3>(w, row0, row1, x, ldx, y, ldy, accumulate);
    case 4:
      return GemvDenseBatch<L, 4>(w, row0, row1, x, ldx, y, ldy, accumulate);
    case 5:
      return GemvDenseBatch<L, 5>(w, row0, row1, x, ldx, y, ldy, accumulate);
    case 6:
      return GemvDenseBatch<L, 6>(w, row0, row1, x, ldx, y, ldy, accumulate);
    case 7:
      return GemvDenseBatch<L, 7>(w, row0, row1, x, ldx, y, ldy, accumulate);
    default:
      return GemvDenseBatch<L, 8>(w, row0, row1, x, ldx, y, ldy, accumulate);
  }
}

void Gemv(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x, int64_t m, int64_t ldx,
          float* y, int64_t ldy, bool accumulate) {
  if (w.format != WeightFormat::kNvfp4) {
    // One or two rows: memory-bound, and the AVX2 kernels keep up.
    if (m <= 2) return Avx2Kernels().gemv(w, row0, row1, x, m, ldx, y, ldy, accumulate);
    switch (w.format) {
      case WeightFormat::kBF16:
        return GemvDense<LoadBf16>(w, row0, row1, x, m, ldx, y, ldy, accumulate);
      case WeightFormat::kF16:
        return GemvDense<LoadF16>(w, row0, row1, x, m, ldx, y, ldy, accumulate);
      default:
        return GemvDense<LoadF32>(w, row0, row1, x, m, ldx, y, ldy, accumulate);
    }
  }
  if (m > 4) {  // passes of at most 4 activation rows
    Gemv(w, row0, row1, x, 4, ldx, y, ldy, accumulate);
    Gemv(w, row0, row1, x + 4 * ldx, m - 4, ldx, y + 4 * ldy, ldy, accumulate);
    return;
  }
  for (int64_t r = row0; r < row1; r += 4) {
    const int nrows = static_cast<int>(row1 - r < 4 ? row1 - r : 4);
    const uint8_t* rows[4];
    const uint8_t* scales[4];
    for (int j = 0; j < 4; ++j) {
      const int64_t row = r + (j < nrows ? j : 0);
      rows[j] = static_cast<const uint8_t*>(w.data) + row * w.row_stride;
      scales[j] = w.scales + row * w.scale_row_stride;
    }
    float* out = y + (r - row0);
    if (m == 1 && nrows == 4) {
      // Prefetch only rows this call owns (the next call's may be another thread's).
      const int64_t prefetch = r + 8 <= row1 ? 4 * w.row_stride : 0;
      Gemv4M1(w, rows, scales, prefetch, x, out, accumulate);
    } else if (m == 1) {
      float tmp[4];
      Gemv4M1(w, rows, scales, 0, x, tmp, false);
      for (int j = 0; j < nrows; ++j) Store(out + j, tmp[j], accumulate);
    } else if (m == 2) {
      Gemv4Mx<2>(w, rows, scales, nrows, x, ldx, out, ldy, accumulate);
    } else if (m == 3) {
      Gemv4Mx<3>(w, rows, scales, nrows, x, ldx, out, ldy, accumulate);
    } else {
      Gemv4Mx<4>(w, rows, scales, nrows, x, ldx, out, ldy, accumulate);
    }
  }
}

void DecodeRows(const WeightMatrix& w, int64_t row0, int64_t nrows, int64_t col0, int64_t ncols,
                float* out, int64_t ldo) {
  if (w.format != WeightFormat::kNvfp4) {
    Avx2Kernels().decode_rows(w, row0, nrows, col0, ncols, out, ldo);
    return;
  }
  const float* e4m3 = E4m3Table();
  const Nvfp4Decoder16 dec;
  const __m512 gs = _mm512_set1_ps(w.global_scale);
  for (int64_t r = 0; r < nrows; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + (row0 + r) * w.row_stride;
    const uint8_t* scales = w.scales + (row0 + r) * w.scale_row_stride;
    float* o = out + r * ldo;
    for (int64_t c = 0; c < ncols; c += kNvfp4BlockSize) {
      const int64_t col = col0 + c;
      // (E2M1 * scale) is exact; then the global scale: the reference order.
      const __m512 s = _mm512_set1_ps(e4m3[scales[col / kNvfp4BlockSize]]);
      _mm512_storeu_ps(o + c, _mm512_mul_ps(_mm512_mul_ps(dec.Decode16(row + col / 2), s), gs));
    }
  }
}

// ---- attention -----------------------------------------------------------

// The AVX2 op with whole 128-column heads in registers: per pair of query
// heads, scores take four keys per pass reading each key row once for both
// heads, and the value sum keeps both heads' 128 columns in 16 accumulators,
// reading each value row once (AVX2 reads it four times: two 64-column passes
// per head). Other head sizes and odd group sizes go to the AVX2 op.
// E: the cache's element (float, or uint16_t half widened by VCVTPH2PS).
OCTET_INLINE __m512 LoadKv16(const float* p) { return _mm512_loadu_ps(p); }
OCTET_INLINE __m512 LoadKv16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
void AttendAvx2(const float* q, int64_t q_stride, int64_t n_q, const float* k, const float* v,
                int64_t kv_stride, int64_t n_keys, int64_t hd, float scale, float* scores,
                float* out, int64_t out_stride) {
  Avx2Kernels().attend(q, q_stride, n_q, k, v, kv_stride, n_keys, hd, scale, scores, out,
                       out_stride);
}
void AttendAvx2(const float* q, int64_t q_stride, int64_t n_q, const uint16_t* k, const uint16_t* v,
                int64_t kv_stride, int64_t n_keys, int64_t hd, float scale, float* scores,
                float* out, int64_t out_stride) {
  Avx2Kernels().attend_f16(q, q_stride, n_q, k, v, kv_stride, n_keys, hd, scale, scores, out,
                           out_stride);
}

template <class E>
void Attend(const float* q, int64_t q_stride, int64_t n_q, const E* k, const E* v,
            int64_t kv_stride, int64_t n_keys, int64_t hd, float scale, float* scores, float* out,
            int64_t out_stride) {
  if (hd != 128 || n_q % 2 != 0) {
    AttendAvx2(q, q_stride, n_q, k, v, kv_stride, n_keys, hd, scale, scores, out, out_stride);
    return;
  }
  constexpr int kLines = 128 * sizeof(E) / 64;  // 64-byte lines per cache row
  for (int64_t i = 0; i < n_q; i += 2) {
    const float* q0 = q + i * q_stride;
    const float* q1 = q0 + q_stride;
    float* s0 = scores + i * n_keys;
    float* s1 = s0 + n_keys;
    for (int64_t j = 0; j < n_keys; ++j) {
      const E* kj = k + j * kv_stride;
      if (j + 8 < n_keys) {
        for (int line = 0; line < kLines; ++line)
          Prefetch(reinterpret_cast<const uint8_t*>(kj + 8 * kv_stride) + line * 64);
      }
      __m512 a = _mm512_setzero_ps(), b = a;
#pragma GCC unroll 8
      for (int c = 0; c < 128; c += 16) {
        const __m512 kv = LoadKv16(kj + c);
        a = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + c), kv, a);
        b = _mm512_fmadd_ps(_mm512_loadu_ps(q1 + c), kv, b);
      }
      s0[j] = _mm512_reduce_add_ps(a) * scale;
      s1[j] = _mm512_reduce_add_ps(b) * scale;
    }
    Avx2Kernels().softmax_row(s0, n_keys);
    Avx2Kernels().softmax_row(s1, n_keys);
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    __m512 b0 = a0, b1 = a0, b2 = a0, b3 = a0, b4 = a0, b5 = a0, b6 = a0, b7 = a0;
    for (int64_t j = 0; j < n_keys; ++j) {
      const E* vj = v + j * kv_stride;
      if (j + 8 < n_keys) {
        for (int line = 0; line < kLines; ++line)
          Prefetch(reinterpret_cast<const uint8_t*>(vj + 8 * kv_stride) + line * 64);
      }
      const __m512 p = _mm512_set1_ps(s0[j]), r = _mm512_set1_ps(s1[j]);
      __m512 x = LoadKv16(vj);
      a0 = _mm512_fmadd_ps(p, x, a0), b0 = _mm512_fmadd_ps(r, x, b0);
      x = LoadKv16(vj + 16);
      a1 = _mm512_fmadd_ps(p, x, a1), b1 = _mm512_fmadd_ps(r, x, b1);
      x = LoadKv16(vj + 32);
      a2 = _mm512_fmadd_ps(p, x, a2), b2 = _mm512_fmadd_ps(r, x, b2);
      x = LoadKv16(vj + 48);
      a3 = _mm512_fmadd_ps(p, x, a3), b3 = _mm512_fmadd_ps(r, x, b3);
      x = LoadKv16(vj + 64);
      a4 = _mm512_fmadd_ps(p, x, a4), b4 = _mm512_fmadd_ps(r, x, b4);
      x = LoadKv16(vj + 80);
      a5 = _mm512_fmadd_ps(p, x, a5), b5 = _mm512_fmadd_ps(r, x, b5);
      x = LoadKv16(vj + 96);
      a6 = _mm512_fmadd_ps(p, x, a6), b6 = _mm512_fmadd_ps(r, x, b6);
      x = LoadKv16(vj + 112);
      a7 = _mm512_fmadd_ps(p, x, a7), b7 = _mm512_fmadd_ps(r, x, b7);
    }
    float* o0 = out + i * out_stride;
    float* o1 = o0 + out_stride;
    const __m512 oa[8] = {a0, a1, a2, a3, a4, a5, a6, a7}, ob[8] = {b0, b1, b2, b3, b4, b5, b6, b7};
    for (int c = 0; c < 8; ++c) {
      _mm512_storeu_ps(o0 + 16 * c, oa[c]);
      _mm512_storeu_ps(o1 + 16 * c, ob[c]);
    }
  }
}

}  // namespace

const IsaKernels& Avx512Kernels() {
  static const IsaKernels k = [] {
    FillScaledValues();
    IsaKernels t = Avx2Kernels();
    t.name = "avx512";
    t.gemv = Gemv;
    t.decode_rows = DecodeRows;
    t.attend = Attend<float>;
    t.attend_f16 = Attend<uint16_t>;
    return t;
  }();
  return k;
}

}  // namespace octet::kernels::cpu
