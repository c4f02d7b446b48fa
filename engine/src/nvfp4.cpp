#include "octet/engine/nvfp4.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <vector>

namespace octet::engine {

float AbsMax(const float* w, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(w[i]));
  return m;
}

float Nvfp4GlobalScale(float amax) { return amax / (6.0f * 448.0f); }

namespace {

// One block of 16 weights: its e4m3 scale code and its 8 packed bytes (low
// nibble = even column), by the rules in nvfp4.h.
void QuantizeBlock(const float* blk, float global_scale, uint8_t* scale, uint8_t* packed) {
  const float block_amax = AbsMax(blk, kernels::kNvfp4BlockSize);
  const uint8_t scale_code = kernels::F32ToE4m3(block_amax / (6.0f * global_scale));
  *scale = scale_code;
  const float denom = kernels::E4m3ToF32(scale_code) * global_scale;
  for (int64_t j = 0; j < kernels::kNvfp4BlockSize; j += 2) {
    const uint8_t lo = denom > 0.0f ? kernels::F32ToE2m1(blk[j] / denom) : 0;
    const uint8_t hi = denom > 0.0f ? kernels::F32ToE2m1(blk[j + 1] / denom) : 0;
    packed[j / 2] = static_cast<uint8_t>(hi << 4 | lo);
  }
}

Status CheckNvfp4Args(int64_t cols, float global_scale) {
  if (cols % kernels::kNvfp4BlockSize != 0) {
    return InvalidArgumentError("NVFP4 needs the input dimension (" + std::to_string(cols) +
                                ") to be a multiple of 16");
  }
  if (!(global_scale > 0.0f) || !std::isfinite(global_scale)) {
    return InvalidArgumentError("NVFP4 global scale must be positive and finite");
  }
  return Status::Ok();
}

Nvfp4Tensor EmptyTensor(int64_t rows, int64_t cols, float global_scale) {
  Nvfp4Tensor t;
  t.rows = rows;
  t.cols = cols;
  t.global_scale = global_scale;
  t.packed.assign(rows * cols / 2, 0);
  t.scales.assign(rows * cols / kernels::kNvfp4BlockSize, 0);
  return t;
}

bool DenseFormat(kernels::WeightFormat f) {
  return f == kernels::WeightFormat::kF32 || f == kernels::WeightFormat::kBF16 ||
         f == kernels::WeightFormat::kF16;
}

// Row r of a dense view as floats (exact widening).
void DenseRow(const kernels::WeightMatrix& w, int64_t r, float* out) {
  const uint8_t* row = static_cast<const uint8_t*>(w.data) + r * w.row_stride;
  switch (w.format) {
    case kernels::WeightFormat::kF32:
      std::memcpy(out, row, static_cast<size_t>(w.cols) * 4);
      return;
    case kernels::WeightFormat::kBF16:
    case kernels::WeightFormat::kF16:
      for (int64_t c = 0; c < w.cols; ++c) {
        uint16_t h;
        std::memcpy(&h, row + c * 2, 2);
        out[c] =
            w.format == kernels::WeightFormat::kBF16 ? kernels::Bf16ToF32(h) : kernels::F16ToF32(h);
      }
      return;
    default:
      return;
  }
}

// Splits rows into tasks of about 64 KiB of floats, over `pool` when given.
template <typename Fn>
void ForRowChunks(int64_t rows, int64_t cols, kernels::ThreadPool* pool, const Fn& fn) {
  const int64_t per_task = std::max<int64_t>(1, (int64_t{16} << 10) / std::max<int64_t>(1, cols));
  const int64_t tasks = (rows + per_task - 1) / per_task;
  auto run = [&](int64_t task, int) {
    const int64_t r0 = task * per_task;
    fn(r0, std::min(rows, r0 + per_task));
  };
  if (pool && tasks > 1) {
    pool->ParallelFor(tasks, run);
  } else {
    for (int64_t t = 0; t < tasks; ++t) run(t, 0);
  }
}

}  // namespace

Result<Nvfp4Tensor> QuantizeNvfp4(const float* w, int64_t rows, int64_t cols, float global_scale) {
  OCTET_RETURN_IF_ERROR(CheckNvfp4Args(cols, global_scale));
  Nvfp4Tensor t = EmptyTensor(rows, cols, global_scale);
  const int64_t blocks = cols / kernels::kNvfp4BlockSize;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      QuantizeBlock(w + r * cols + b * kernels::kNvfp4BlockSize, global_scale,
                    &t.scales[r * blocks + b],
                    &t.packed[(r * cols + b * kernels::kNvfp4BlockSize) / 2]);
    }
  }
  return t;
}

float Nvfp4GlobalScaleOrOne(float amax) { return amax > 0.0f ? Nvfp4GlobalScale(amax) : 1.0f; }

Result<float> DenseAbsMax(const kernels::WeightMatrix& w, kernels::ThreadPool* pool) {
  if (!DenseFormat(w.format)) {
    return InvalidArgumentError("only F32, BF16 and F16 weights can be quantized to NVFP4, not " +
                                std::string(kernels::WeightFormatName(w.format)));
  }
  std::mutex mu;
  float amax = 0.0f;
  ForRowChunks(w.rows, w.cols, pool, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(w.cols);
    float m = 0.0f;
    for (int64_t r = r0; r < r1; ++r) {
      DenseRow(w, r, row.data());
      m = std::max(m, AbsMax(row.data(), w.cols));
    }
    std::lock_guard<std::mutex> lock(mu);
    amax = std::max(amax, m);
  });
  return amax;
}

Result<Nvfp4Tensor> QuantizeNvfp4Dense(const kernels::WeightMatrix& w, float global_scale,
                                       kernels::ThreadPool* pool) {
  if (!DenseFormat(w.format)) {
    return InvalidArgumentError("only F32, BF16 and F16 weights can be quantized to NVFP4, not " +
                                std::string(kernels::WeightFormatName(w.format)));
  }
  OCTET_RETURN_IF_ERROR(CheckNvfp4Args(w.cols, global_scale));
  Nvfp4Tensor t = EmptyTensor(w.rows, w.cols, global_scale);
  const int64_t blocks = w.cols / kernels::kNvfp4BlockSize;
  ForRowChunks(w.rows, w.cols, pool, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(w.cols);
    for (int64_t r = r0; r < r1; ++r) {
      DenseRow(w, r, row.data());
      for (int64_t b = 0; b < blocks; ++b) {
        QuantizeBlock(row.data() + b * kernels::kNvfp4BlockSize, global_scale,
                      &t.scales[r * blocks + b],
                      &t.packed[(r * w.cols + b * kernels::kNvfp4BlockSize) / 2]);
      }
    }
  });
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
