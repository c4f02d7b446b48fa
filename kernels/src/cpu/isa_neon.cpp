// NEON kernels (aarch64, e.g. the Grace CPU of DGX Spark). NEON is part of the
// aarch64 baseline, so this table needs no target flags and no runtime check:
// it runs on every aarch64 CPU (an ARMv8.0 Cortex-A53 included). Beside the
// plain weight decode and FMA dots: BF16/F16/F32 weights widened in registers
// for decode (no staging buffer), a vector exp for softmax and SiLU, and a
// one-pass attention that reads each key and value once for all the query
// heads that share it (online softmax over blocks of keys). The tables with
// SDOT and BFMMLA kernels (isa_neon_ext.cpp) start from this one. Checked
// against the scalar reference by the conformance test under qemu (ctest -L
// arm64: once with a Grace-like CPU, once with plain NEON).
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "cpu/isa.h"

namespace octet::kernels::cpu {
namespace {

// ---- decode_rows ------------------------------------------------------------

void DecodeRows(const WeightMatrix& w, int64_t row0, int64_t nrows, int64_t col0, int64_t ncols,
                float* out, int64_t ldo) {
  const float* e4m3 = E4m3Table();
  // E2M1 code -> 2 * value, as int8 (exact).
  static const int8_t kTwiceE2m1[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  const int8x16_t table = vld1q_s8(kTwiceE2m1);
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
        for (; c + 4 <= ncols; c += 4) {
          uint16_t h[4];
          memcpy(h, row + (col0 + c) * 2, 8);
          vst1q_f32(o + c, vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(h), 16)));
        }
        for (; c < ncols; ++c) {
          uint16_t h;
          memcpy(&h, row + (col0 + c) * 2, 2);
          const uint32_t bits = static_cast<uint32_t>(h) << 16;
          memcpy(o + c, &bits, 4);
        }
        break;
      case WeightFormat::kF16:
        for (; c + 4 <= ncols; c += 4) {
          uint16_t h[4];
          memcpy(h, row + (col0 + c) * 2, 8);
          vst1q_f32(o + c, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h))));
        }
        for (; c < ncols; ++c) {
          uint16_t h[4] = {0, 0, 0, 0};
          memcpy(h, row + (col0 + c) * 2, 2);
          o[c] = vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h))), 0);
        }
        break;
      case WeightFormat::kNvfp4: {
        const uint8_t* scales = w.scales + (row0 + r) * w.scale_row_stride;
        for (; c < ncols; c += kNvfp4BlockSize) {
          const int64_t col = col0 + c;
          const uint8x8_t packed = vld1_u8(row + col / 2);
          const uint8x8_t lo = vand_u8(packed, vdup_n_u8(0x0f));  // even columns
          const uint8x8_t hi = vshr_n_u8(packed, 4);              // odd columns
          const uint8x8x2_t z = vzip_u8(lo, hi);                  // column order
          const int8x16_t v = vqtbl1q_s8(table, vcombine_u8(z.val[0], z.val[1]));
          const int16x8_t v0 = vmovl_s8(vget_low_s8(v));
          const int16x8_t v1 = vmovl_s8(vget_high_s8(v));
          // (2 * E2M1) * (scale / 2) == E2M1 * scale exactly; then the global scale.
          const float32x4_t s = vdupq_n_f32(0.5f * e4m3[scales[col / kNvfp4BlockSize]]);
          const float32x4_t gs = vdupq_n_f32(w.global_scale);
          vst1q_f32(o + c, vmulq_f32(vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(v0))), s), gs));
          vst1q_f32(o + c + 4,
                    vmulq_f32(vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(v0))), s), gs));
          vst1q_f32(o + c + 8,
                    vmulq_f32(vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(v1))), s), gs));
          vst1q_f32(o + c + 12,
                    vmulq_f32(vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(v1))), s), gs));
        }
        break;
      }
    }
  }
}

}  // namespace

// exp(x) = 2^n exp(r), n = round(x / ln 2), r = x - n ln 2 (|r| <= ln 2 / 2,
// from a two-part ln 2 with FMAs), exp(r) by its Taylor series to r^7
// (truncation below 1e-8 relative), and 2^n applied as two powers of two so
// that results in the subnormal range round once. x is clamped to [-104, 89]
// first: below, exp(x) rounds to 0; above, to +inf. NaN stays NaN (FMAX and
// FMIN propagate it).
static inline float32x4_t ExpNeonV(float32x4_t x) {
  x = vmaxq_f32(vminq_f32(x, vdupq_n_f32(89.0f)), vdupq_n_f32(-104.0f));
  const float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504088896341f)));
  float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693145751953125f));
  r = vfmsq_f32(r, n, vdupq_n_f32(1.42860682030941723212e-6f));
  float32x4_t p = vdupq_n_f32(1.0f / 5040.0f);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 720.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 120.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 24.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 6.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
  const int32x4_t ni = vcvtq_s32_f32(n);
  const int32x4_t n1 = vshrq_n_s32(ni, 1);
  const int32x4_t n2 = vsubq_s32(ni, n1);
  const float32x4_t s1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n1, vdupq_n_s32(127)), 23));
  const float32x4_t s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n2, vdupq_n_s32(127)), 23));
  return vmulq_f32(vmulq_f32(p, s1), s2);
}

void ExpNeon(const float* x, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(out + i, ExpNeonV(vld1q_f32(x + i)));
  if (i < n) {
    float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t j = i; j < n; ++j) t[j - i] = x[j];
    vst1q_f32(t, ExpNeonV(vld1q_f32(t)));
    for (int64_t j = i; j < n; ++j) out[j] = t[j - i];
  }
}

namespace {

float Dot(const float* a, const float* b, int64_t n) {
  float32x4_t s0 = vdupq_n_f32(0.0f), s1 = vdupq_n_f32(0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
    s1 = vfmaq_f32(s1, vld1q_f32(a + i + 4), vld1q_f32(b + i + 4));
  }
  for (; i + 4 <= n; i += 4) s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
  float s = vaddvq_f32(vaddq_f32(s0, s1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Widened weights, 8 columns at a time, against up to kGemvMaxRows activation
// rows (M, a template argument so the accumulators stay in registers).
struct Bf16Loader {
  static float32x4_t Lo(const uint8_t* p) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(reinterpret_cast<const uint16_t*>(p)), 16));
  }
  static float32x4_t Hi(const uint8_t* p) { return Lo(p + 8); }
  static float One(const uint8_t* p) {
    uint16_t h;
    memcpy(&h, p, 2);
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
  }
  static constexpr int kBytes = 2;
};
struct F16Loader {
  static float32x4_t Lo(const uint8_t* p) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const uint16_t*>(p))));
  }
  static float32x4_t Hi(const uint8_t* p) { return Lo(p + 8); }
  static float One(const uint8_t* p) {
    uint16_t h[4] = {0, 0, 0, 0};
    memcpy(h, p, 2);
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h))), 0);
  }
  static constexpr int kBytes = 2;
};
struct F32Loader {
  static float32x4_t Lo(const uint8_t* p) { return vld1q_f32(reinterpret_cast<const float*>(p)); }
  static float32x4_t Hi(const uint8_t* p) { return Lo(p + 16); }
  static float One(const uint8_t* p) {
    float f;
    memcpy(&f, p, 4);
    return f;
  }
  static constexpr int kBytes = 4;
};

template <class L, int M>
void GemvWidened(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x, int64_t ldx,
                 float* y, int64_t ldy, bool accumulate) {
  const int64_t k = w.cols;
  for (int64_t r = row0; r < row1; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + r * w.row_stride;
    float32x4_t acc0[M], acc1[M];
    for (int i = 0; i < M; ++i) acc0[i] = acc1[i] = vdupq_n_f32(0.0f);
    int64_t c = 0;
    for (; c + 8 <= k; c += 8) {
      const float32x4_t w0 = L::Lo(row + c * L::kBytes);
      const float32x4_t w1 = L::Hi(row + c * L::kBytes);
      for (int i = 0; i < M; ++i) {
        acc0[i] = vfmaq_f32(acc0[i], vld1q_f32(x + i * ldx + c), w0);
        acc1[i] = vfmaq_f32(acc1[i], vld1q_f32(x + i * ldx + c + 4), w1);
      }
    }
    for (int i = 0; i < M; ++i) {
      float s = vaddvq_f32(vaddq_f32(acc0[i], acc1[i]));
      for (int64_t t = c; t < k; ++t) s += x[i * ldx + t] * L::One(row + t * L::kBytes);
      float* out = y + i * ldy + (r - row0);
      *out = accumulate ? *out + s : s;
    }
  }
}

template <class L>
void GemvWidenedRows(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x, int64_t m,
                     int64_t ldx, float* y, int64_t ldy, bool accumulate) {
  switch (m) {
    case 1:
      return GemvWidened<L, 1>(w, row0, row1, x, ldx, y, ldy, accumulate);
    case 2:
      return GemvWidened<L, 2>(w, row0, row1, x, ldx, y, ldy, accumulate);
    case 3:
      return GemvWidened<L, 3>(w, row0, row1, x, ldx, y, ldy, accumulate);
    case 4:
      return GemvWidened<L, 4>(w, row0, row1, x, ldx, y, ldy, accumulate);
    case 5:
      return GemvWidened<L, 5>(w, row0, row1, x, ldx, y, ldy, accumulate);
    case 6:
      return GemvWidened<L, 6>(w, row0, row1, x, ldx, y, ldy, accumulate);
    case 7:
      return GemvWidened<L, 7>(w, row0, row1, x, ldx, y, ldy, accumulate);
    default:
      return GemvWidened<L, 8>(w, row0, row1, x, ldx, y, ldy, accumulate);
  }
}

// NVFP4 rows: decoded 256 columns at a time into a stack buffer, then dotted.
void Gemv(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x, int64_t m, int64_t ldx,
          float* y, int64_t ldy, bool accumulate) {
  if (m <= 0) return;
  switch (w.format) {
    case WeightFormat::kBF16:
      return GemvWidenedRows<Bf16Loader>(w, row0, row1, x, m, ldx, y, ldy, accumulate);
    case WeightFormat::kF16:
      return GemvWidenedRows<F16Loader>(w, row0, row1, x, m, ldx, y, ldy, accumulate);
    case WeightFormat::kF32:
      if (w.row_stride % 4 == 0 && reinterpret_cast<uintptr_t>(w.data) % 4 == 0) {
        return GemvWidenedRows<F32Loader>(w, row0, row1, x, m, ldx, y, ldy, accumulate);
      }
      break;
    case WeightFormat::kNvfp4:
      break;
  }
  constexpr int64_t kChunk = 256;  // a multiple of the NVFP4 block
  float buf[kChunk];
  for (int64_t r = row0; r < row1; ++r) {
    float sums[kGemvMaxRows] = {};
    for (int64_t c0 = 0; c0 < w.cols; c0 += kChunk) {
      const int64_t n = w.cols - c0 < kChunk ? w.cols - c0 : kChunk;
      DecodeRows(w, r, 1, c0, n, buf, kChunk);
      for (int64_t i = 0; i < m; ++i) sums[i] += Dot(x + i * ldx + c0, buf, n);
    }
    for (int64_t i = 0; i < m; ++i) {
      float* out = y + i * ldy + (r - row0);
      *out = accumulate ? *out + sums[i] : sums[i];
    }
  }
}

void DotTile(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t kc, int mr, int nr,
             float* c, int64_t ldc, bool accumulate) {
  float32x4_t acc[kTileRows][kTileCols];
  for (int i = 0; i < mr; ++i) {
    for (int j = 0; j < nr; ++j) acc[i][j] = vdupq_n_f32(0.0f);
  }
  int64_t k = 0;
  for (; k + 4 <= kc; k += 4) {
    for (int i = 0; i < mr; ++i) {
      const float32x4_t av = vld1q_f32(a + i * lda + k);
      for (int j = 0; j < nr; ++j) acc[i][j] = vfmaq_f32(acc[i][j], av, vld1q_f32(b + j * ldb + k));
    }
  }
  for (int i = 0; i < mr; ++i) {
    for (int j = 0; j < nr; ++j) {
      float s = vaddvq_f32(acc[i][j]);
      for (int64_t t = k; t < kc; ++t) s += a[i * lda + t] * b[j * ldb + t];
      float* out = c + i * ldc + j;
      *out = accumulate ? *out + s : s;
    }
  }
}

void Axpy(float alpha, const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), vld1q_f32(x + i), alpha));
  for (; i < n; ++i) y[i] += alpha * x[i];
}

void Scale(float alpha, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vmulq_n_f32(vld1q_f32(y + i), alpha));
  for (; i < n; ++i) y[i] *= alpha;
}

void Add(const float* a, const float* b, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(out + i, vaddq_f32(vld1q_f32(a + i), vld1q_f32(b + i)));
  for (; i < n; ++i) out[i] = a[i] + b[i];
}

void RmsNormRow(const float* x, const float* w, float eps, int64_t n, float* out) {
  const float inv = 1.0f / sqrtf(Dot(x, x, n) / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = w ? w[i] * (x[i] * inv) : x[i] * inv;
}

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t g = vld1q_f32(gate + i);
    const float32x4_t e = ExpNeonV(vnegq_f32(g));
    vst1q_f32(out + i, vmulq_f32(vdivq_f32(g, vaddq_f32(vdupq_n_f32(1.0f), e)), vld1q_f32(up + i)));
  }
  for (; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

void SoftmaxRow(float* x, int64_t n) {
  float mx = -INFINITY;
  int64_t i = 0;
  if (n >= 4) {
    float32x4_t m4 = vdupq_n_f32(-INFINITY);
    for (; i + 4 <= n; i += 4) m4 = vmaxq_f32(m4, vld1q_f32(x + i));
    mx = vmaxvq_f32(m4);
  }
  for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  const float32x4_t mv = vdupq_n_f32(mx);
  float32x4_t s4 = vdupq_n_f32(0.0f);
  i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t e = ExpNeonV(vsubq_f32(vld1q_f32(x + i), mv));
    vst1q_f32(x + i, e);
    s4 = vaddq_f32(s4, e);
  }
  float sum = vaddvq_f32(s4);
  for (; i < n; ++i) {
    x[i] = expf(x[i] - mx);
    sum += x[i];
  }
  Scale(1.0f / sum, x, n);
}

// ---- one-pass attention -----------------------------------------------------
//
// Each key and value row is read once for all n_q query heads (grouped-query
// attention shares them): keys go in blocks of kKeyBlock; per query, the
// block's scores, their maximum, the running sum's and output's rescale by
// exp(old max - new max) when it grows, then the block's values weighted by
// exp(score - max). The output rows accumulate in place and take 1 / sum at
// the end. `scores` (n_q * n_keys floats, as the interface gives) holds each
// query's running maximum and sum.
constexpr int64_t kKeyBlock = 16;

float F16One(const uint16_t* p) {
  uint16_t h[4] = {p[0], 0, 0, 0};
  return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h))), 0);
}
float DotF16(const float* a, const uint16_t* b, int64_t n) {
  float32x4_t s0 = vdupq_n_f32(0.0f), s1 = vdupq_n_f32(0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(b + i));
    s0 = vfmaq_f32(s0, vld1q_f32(a + i), vcvt_f32_f16(vget_low_f16(h)));
    s1 = vfmaq_f32(s1, vld1q_f32(a + i + 4), vcvt_high_f32_f16(h));
  }
  float s = vaddvq_f32(vaddq_f32(s0, s1));
  for (; i < n; ++i) s += a[i] * F16One(b + i);
  return s;
}
void AxpyF16(float alpha, const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(x + i));
    vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), vcvt_f32_f16(vget_low_f16(h)), alpha));
    vst1q_f32(y + i + 4, vfmaq_n_f32(vld1q_f32(y + i + 4), vcvt_high_f32_f16(h), alpha));
  }
  for (; i < n; ++i) y[i] += alpha * F16One(x + i);
}

struct F32Rows {
  static float DotRow(const float* q, const float* k, int64_t n) { return Dot(q, k, n); }
  static void AxpyRow(float a, const float* v, float* o, int64_t n) { Axpy(a, v, o, n); }
};
struct F16Rows {
  static float DotRow(const float* q, const uint16_t* k, int64_t n) { return DotF16(q, k, n); }
  static void AxpyRow(float a, const uint16_t* v, float* o, int64_t n) { AxpyF16(a, v, o, n); }
};

template <class R, class T>
void AttendOnePass(const float* q, int64_t q_stride, int64_t n_q, const T* k, const T* v,
                   int64_t kv_stride, int64_t n_keys, int64_t hd, float scale, float* scores,
                   float* out, int64_t out_stride) {
  if (n_keys <= 0) {  // no keys: zero output, as the composed form gives
    for (int64_t i = 0; i < n_q; ++i) {
      for (int64_t d = 0; d < hd; ++d) out[i * out_stride + d] = 0.0f;
    }
    return;
  }
  float* run_max = scores;
  float* run_sum = scores + n_q;  // n_q * n_keys >= 2 n_q whenever n_keys >= 2
  float small[2 * 64];
  if (n_keys < 2) {
    run_max = small;
    run_sum = small + 64;
  }
  for (int64_t i0 = 0; i0 < n_q; i0 += 64) {
    const int64_t nq = n_q - i0 < 64 ? n_q - i0 : 64;
    for (int64_t i = 0; i < nq; ++i) {
      run_max[i] = -INFINITY;
      run_sum[i] = 0.0f;
      float* o = out + (i0 + i) * out_stride;
      for (int64_t d = 0; d < hd; ++d) o[d] = 0.0f;
    }
    for (int64_t j0 = 0; j0 < n_keys; j0 += kKeyBlock) {
      const int64_t nb = n_keys - j0 < kKeyBlock ? n_keys - j0 : kKeyBlock;
      for (int64_t i = 0; i < nq; ++i) {
        const float* qi = q + (i0 + i) * q_stride;
        float* o = out + (i0 + i) * out_stride;
        float s[kKeyBlock];
        float bmax = -INFINITY;
        for (int64_t j = 0; j < nb; ++j) {
          s[j] = R::DotRow(qi, k + (j0 + j) * kv_stride, hd) * scale;
          bmax = s[j] > bmax ? s[j] : bmax;
        }
        const float new_max = bmax > run_max[i] ? bmax : run_max[i];
        if (new_max > run_max[i] && run_max[i] != -INFINITY) {
          const float c = expf(run_max[i] - new_max);
          run_sum[i] *= c;
          Scale(c, o, hd);
        }
        run_max[i] = new_max;
        int64_t j = 0;
        const float32x4_t mv = vdupq_n_f32(new_max);
        for (; j + 4 <= nb; j += 4) vst1q_f32(s + j, ExpNeonV(vsubq_f32(vld1q_f32(s + j), mv)));
        for (; j < nb; ++j) s[j] = expf(s[j] - new_max);
        for (j = 0; j < nb; ++j) {
          run_sum[i] += s[j];
          R::AxpyRow(s[j], v + (j0 + j) * kv_stride, o, hd);
        }
      }
    }
    for (int64_t i = 0; i < nq; ++i) Scale(1.0f / run_sum[i], out + (i0 + i) * out_stride, hd);
  }
}

void Attend(const float* q, int64_t q_stride, int64_t n_q, const float* k, const float* v,
            int64_t kv_stride, int64_t n_keys, int64_t hd, float scale, float* scores, float* out,
            int64_t out_stride) {
  AttendOnePass<F32Rows>(q, q_stride, n_q, k, v, kv_stride, n_keys, hd, scale, scores, out,
                         out_stride);
}

void AttendF16(const float* q, int64_t q_stride, int64_t n_q, const uint16_t* k, const uint16_t* v,
               int64_t kv_stride, int64_t n_keys, int64_t hd, float scale, float* scores,
               float* out, int64_t out_stride) {
  AttendOnePass<F16Rows>(q, q_stride, n_q, k, v, kv_stride, n_keys, hd, scale, scores, out,
                         out_stride);
}

// tanh of 4 floats by the method of the AVX2 table's Tanh8 (isa_avx2.cpp:
// within kVectorTanhMaxAbsError): the odd Taylor series below |x| = 0.5,
// 1 - 2 / (exp(2|x|) + 1) with x's sign above (|x| clamped to 10; tanh rounds
// to 1 from 9.011).
static inline float32x4_t TanhNeonV(float32x4_t x) {
  const float32x4_t ax = vabsq_f32(x);  // tanh(|x|), then x's sign (so -0 stays -0)
  const float32x4_t x2 = vmulq_f32(ax, ax);
  float32x4_t p = vdupq_n_f32(-929569.0f / 638512875.0f);
  p = vfmaq_f32(vdupq_n_f32(21844.0f / 6081075.0f), p, x2);
  p = vfmaq_f32(vdupq_n_f32(-1382.0f / 155925.0f), p, x2);
  p = vfmaq_f32(vdupq_n_f32(62.0f / 2835.0f), p, x2);
  p = vfmaq_f32(vdupq_n_f32(-17.0f / 315.0f), p, x2);
  p = vfmaq_f32(vdupq_n_f32(2.0f / 15.0f), p, x2);
  p = vfmaq_f32(vdupq_n_f32(-1.0f / 3.0f), p, x2);
  const float32x4_t small = vfmaq_f32(ax, vmulq_f32(ax, x2), p);
  const uint32x4_t use_big = vcgeq_f32(ax, vdupq_n_f32(0.5f));  // false for NaN
  float32x4_t t = small;
  // The exp and the division only where a lane needs them (as the AVX2 table).
  if (vmaxvq_u32(use_big) != 0) {
    // FMINNM gives 10 for a NaN |x|; the NaN comes from the small branch.
    const float32x4_t axc = vminnmq_f32(ax, vdupq_n_f32(10.0f));
    const float32x4_t e = ExpNeonV(vaddq_f32(axc, axc));
    const float32x4_t one = vdupq_n_f32(1.0f);
    const float32x4_t big = vsubq_f32(one, vdivq_f32(vdupq_n_f32(2.0f), vaddq_f32(e, one)));
    t = vbslq_f32(use_big, big, small);
  }
  return vbslq_f32(vdupq_n_u32(0x80000000u), x, t);  // x's sign bit, t's others
}

void SoftCap(float* x, int64_t n, float cap) {
  const float32x4_t inv = vdupq_n_f32(1.0f / cap), c = vdupq_n_f32(cap);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    vst1q_f32(x + i, vmulq_f32(c, TanhNeonV(vmulq_f32(vld1q_f32(x + i), inv))));
  if (i < n) {  // the tail through the same vector code
    float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t j = i; j < n; ++j) t[j - i] = x[j];
    vst1q_f32(t, vmulq_f32(c, TanhNeonV(vmulq_f32(vld1q_f32(t), inv))));
    for (int64_t j = i; j < n; ++j) x[j] = t[j - i];
  }
}

void Relu2(float* x, int64_t n) {
  const float32x4_t zero = vdupq_n_f32(0.0f);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t v = vld1q_f32(x + i);
    const uint32x4_t positive = vcgtq_f32(v, zero);  // false for NaN
    vst1q_f32(x + i,
              vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(vmulq_f32(v, v)), positive)));
  }
  for (; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] * x[i] : 0.0f;
}

// The AVX2 table's Argmax in 4 lanes; FMAXNM gives the number where one
// operand is NaN, so a NaN never enters.
int64_t Argmax(const float* x, int64_t n) {
  const float32x4_t ninf = vdupq_n_f32(-INFINITY);
  float32x4_t m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    m0 = vmaxnmq_f32(vld1q_f32(x + i), m0);
    m1 = vmaxnmq_f32(vld1q_f32(x + i + 4), m1);
    m2 = vmaxnmq_f32(vld1q_f32(x + i + 8), m2);
    m3 = vmaxnmq_f32(vld1q_f32(x + i + 12), m3);
  }
  for (; i + 4 <= n; i += 4) m0 = vmaxnmq_f32(vld1q_f32(x + i), m0);
  float m = vmaxnmvq_f32(vmaxnmq_f32(vmaxnmq_f32(m0, m1), vmaxnmq_f32(m2, m3)));
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  const float32x4_t mv = vdupq_n_f32(m);
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    if (vmaxvq_u32(vceqq_f32(vld1q_f32(x + j), mv)) != 0) break;
  }
  for (; j < n; ++j) {
    if (x[j] == m) return j;
  }
  return 0;
}

}  // namespace

const IsaKernels& NeonKernels() {
  static const IsaKernels k = [] {
    IsaKernels t = {
        "neon", DecodeRows, Gemv,    DotTile,    Dot,    Axpy,      Scale,
        Add,    RmsNormRow, SiluMul, SoftmaxRow, Attend, AttendF16,
    };
    t.soft_cap = SoftCap;
    t.relu2 = Relu2;
    t.argmax = Argmax;
    return t;
  }();
  return k;
}

}  // namespace octet::kernels::cpu
