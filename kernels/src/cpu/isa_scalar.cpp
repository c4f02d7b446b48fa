// The reference kernels: plain loops, one element at a time, float32
// arithmetic. Every other ISA is tested against these.
#include <cmath>
#include <cstring>

#include "cpu/isa.h"

namespace octet::kernels::cpu {
namespace {

void DecodeRows(const WeightMatrix& w, int64_t row0, int64_t nrows, int64_t col0, int64_t ncols,
                float* out, int64_t ldo) {
  for (int64_t r = 0; r < nrows; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + (row0 + r) * w.row_stride;
    float* o = out + r * ldo;
    switch (w.format) {
      case WeightFormat::kF32:
        std::memcpy(o, row + col0 * 4, ncols * 4);
        break;
      case WeightFormat::kBF16:
        for (int64_t c = 0; c < ncols; ++c) {
          uint16_t h;
          std::memcpy(&h, row + (col0 + c) * 2, 2);
          o[c] = Bf16ToF32(h);
        }
        break;
      case WeightFormat::kF16:
        for (int64_t c = 0; c < ncols; ++c) {
          uint16_t h;
          std::memcpy(&h, row + (col0 + c) * 2, 2);
          o[c] = F16ToF32(h);
        }
        break;
      case WeightFormat::kNvfp4: {
        const uint8_t* scales = w.scales + (row0 + r) * w.scale_row_stride;
        for (int64_t c = 0; c < ncols; ++c) {
          const int64_t col = col0 + c;
          const uint8_t byte = row[col / 2];
          const uint8_t code = (col & 1) ? (byte >> 4) : (byte & 0xf);
          // E2M1 * scale is exact in float32; the global scale rounds once.
          o[c] = kE2m1Values[code] * E4m3ToF32(scales[col / kNvfp4BlockSize]) * w.global_scale;
        }
        break;
      }
    }
  }
}

float Dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

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
  for (int i = 0; i < mr; ++i) {
    for (int j = 0; j < nr; ++j) {
      const float s = Dot(a + i * lda, b + j * ldb, kc);
      c[i * ldc + j] = accumulate ? c[i * ldc + j] + s : s;
    }
  }
}

void Axpy(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void Scale(float alpha, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= alpha;
}

void Add(const float* a, const float* b, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void RmsNormRow(const float* x, const float* w, float eps, int64_t n, float* out) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = w ? w[i] * (x[i] * inv) : x[i] * inv;
}

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void SoftmaxRow(float* x, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace

const IsaKernels& ScalarKernels() {
  static const IsaKernels k = {
      "scalar", DecodeRows, Gemv, DotTile, Dot, Axpy, Scale, Add, RmsNormRow, SiluMul, SoftmaxRow,
      nullptr,  // attend: CpuBackend composes dot, softmax_row and axpy
      nullptr,  // attend_f16: CpuBackend widens the rows, then composes
  };

  return k;
}

}  // namespace octet::kernels::cpu
