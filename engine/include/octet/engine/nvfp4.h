// NVFP4 quantization the NVIDIA ModelOpt way (NVFP4QTensor), for writing
// checkpoints the engine and other runtimes load: per 16 inputs one float8
// E4M3 scale, one float32 global scale (weight_scale_2) per tensor or per fused
// group (q/k/v share one, gate/up share one).
//
//   weight_scale_2 = amax / (6 * 448)
//   scale[r, b]    = e4m3(block_amax / (6 * weight_scale_2))       (round to nearest even)
//   code[r, c]     = E2M1_round(w / (float(scale) * weight_scale_2)) (ties to even, saturate 6)
//   packed byte    = code[2j+1] << 4 | code[2j]                       (low nibble = even column)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "octet/base/status.h"
#include "octet/engine/safetensors.h"
#include "octet/kernels/thread_pool.h"
#include "octet/kernels/weight.h"

namespace octet::engine {

struct Nvfp4Tensor {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint8_t> packed;  // [rows, cols / 2]
  std::vector<uint8_t> scales;  // [rows, cols / 16], e4m3 codes
  float global_scale = 1.0f;    // weight_scale_2

  kernels::WeightMatrix view() const {
    return kernels::WeightMatrix::Nvfp4(packed.data(), scales.data(), global_scale, rows, cols);
  }
};

// max |w[i]| (NaN is an error for the caller to avoid; it propagates here).
float AbsMax(const float* w, int64_t n);
// weight_scale_2 for a tensor (or fused group) whose largest magnitude is amax.
float Nvfp4GlobalScale(float amax);

// w is [rows, cols] row-major float; cols must be a multiple of 16.
Result<Nvfp4Tensor> QuantizeNvfp4(const float* w, int64_t rows, int64_t cols, float global_scale);

// ---- on-load quantization (LoadOptions::quantize) ----
//
// The same rules applied to a dense weight view (F32, BF16 or F16, any row
// stride: a tensor-parallel slice of a checkpoint tensor), the rows split over
// `pool` when given. A block whose scale rounds to zero gets zero codes.

// max |w| over a dense view (0 for an empty one).
Result<float> DenseAbsMax(const kernels::WeightMatrix& w, kernels::ThreadPool* pool = nullptr);
// w.cols must be a multiple of 16 and global_scale positive and finite.
Result<Nvfp4Tensor> QuantizeNvfp4Dense(const kernels::WeightMatrix& w, float global_scale,
                                       kernels::ThreadPool* pool = nullptr);
// weight_scale_2 for on-load quantization: Nvfp4GlobalScale(amax), or 1 for an
// all-zero tensor (every code then zero; any positive scale would do).
float Nvfp4GlobalScaleOrOne(float amax);

// Adds "<module>.weight" (U8), "<module>.weight_scale" (F8_E4M3),
// "<module>.weight_scale_2" (F32 scalar) and, when input_scale > 0,
// "<module>.input_scale" (F32 scalar). The writer keeps a copy.
Status AddNvfp4(SafetensorsWriter& writer, const std::string& module, const Nvfp4Tensor& t,
                float input_scale = 0.0f);

}  // namespace octet::engine
