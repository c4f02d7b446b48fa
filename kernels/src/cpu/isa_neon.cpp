// NEON kernels (aarch64, e.g. the Grace CPU of DGX Spark). NEON is part of the
// aarch64 baseline, so no target flags and no runtime check are needed. Kept
// deliberately plain: weights are decoded into a small float buffer and dotted
// with 4-lane FMAs. Checked against the scalar reference by the conformance
// test when the suite runs on arm64.
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

// Weights decoded 256 columns at a time into a stack buffer, then dotted.
void Gemv(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x, int64_t m, int64_t ldx,
          float* y, int64_t ldy, bool accumulate) {
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

const IsaKernels& NeonKernels() {
  static const IsaKernels k = {
      "neon",  DecodeRows, Gemv, DotTile, Dot, Axpy, Scale, Add, RmsNormRow, SiluMul, SoftmaxRow,
      nullptr,  // attend: CpuBackend composes dot, softmax_row and axpy
      nullptr,  // attend_f16: CpuBackend widens the rows, then composes
  };

  return k;
}

}  // namespace octet::kernels::cpu
