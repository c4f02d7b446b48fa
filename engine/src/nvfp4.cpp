#include "octet/engine/nvfp4.h"

#include <cmath>
#include <cstring>

namespace octet::engine {

float AbsMax(const float* w, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(w[i]));
  return m;
}

float Nvfp4GlobalScale(float amax) { return amax / (6.0f * 448.0f); }

Result<Nvfp4Tensor> QuantizeNvfp4(const float* w, int64_t rows, int64_t cols, float global_scale) {
  if (cols % kernels::kNvfp4BlockSize != 0) {
    return InvalidArgumentError("NVFP4 needs the input dimension (" + std::to_string(cols) +
                                ") to be a multiple of 16");
  }
  if (!(global_scale > 0.0f) || !std::isfinite(global_scale)) {
    return InvalidArgumentError("NVFP4 global scale must be positive and finite");
  }
  Nvfp4Tensor t;
  t.rows = rows;
  t.cols = cols;
  t.global_scale = global_scale;
  t.packed.assign(rows * cols / 2, 0);
  t.scales.assign(rows * cols / kernels::kNvfp4BlockSize, 0);
  const int64_t blocks = cols / kernels::kNvfp4BlockSize;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      const float* blk = w + r * cols + b * kernels::kNvfp4BlockSize;
      const float block_amax = AbsMax(blk, kernels::kNvfp4BlockSize);
      const uint8_t scale_code = kernels::F32ToE4m3(block_amax / (6.0f * global_scale));
      t.scales[r * blocks + b] = scale_code;
      const float denom = kernels::E4m3ToF32(scale_code) * global_scale;
      for (int64_t j = 0; j < kernels::kNvfp4BlockSize; ++j) {
        const uint8_t code = denom > 0.0f ? kernels::F32ToE2m1(blk[j] / denom) : 0;
        const int64_t c = b * kernels::kNvfp4BlockSize + j;
        uint8_t& byte = t.packed[(r * cols + c) / 2];
        byte |= (c & 1) ? static_cast<uint8_t>(code << 4) : code;
      }
    }
  }
  return t;
}

Status AddNvfp4(SafetensorsWriter& writer, const std::string& module, const Nvfp4Tensor& t,
                float input_scale) {
  OCTET_RETURN_IF_ERROR(
      writer.AddOwned(module + ".weight", DType::kU8, {t.rows, t.cols / 2}, t.packed));
  OCTET_RETURN_IF_ERROR(writer.AddOwned(module + ".weight_scale", DType::kF8E4M3,
                                        {t.rows, t.cols / kernels::kNvfp4BlockSize}, t.scales));
  std::vector<uint8_t> s(4);
  std::memcpy(s.data(), &t.global_scale, 4);
  OCTET_RETURN_IF_ERROR(writer.AddOwned(module + ".weight_scale_2", DType::kF32, {}, s));
  if (input_scale > 0.0f) {
    std::memcpy(s.data(), &input_scale, 4);
    OCTET_RETURN_IF_ERROR(writer.AddOwned(module + ".input_scale", DType::kF32, {}, s));
  }
  return Status::Ok();
}

}  // namespace octet::engine
