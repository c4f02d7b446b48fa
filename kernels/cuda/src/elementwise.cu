// Row-wise and element-wise ops of a decode step: RMSNorm, RoPE, SiLU·mul,
// add, embedding gather and argmax. Each follows the arithmetic of the scalar
// CPU backend (isa_scalar.cpp, cpu_backend.cpp) in the same order where that
// is cheap, so the results differ from it only by the summation order of the
// reductions and by 1-2 ulp of expf / sincosf; the embedding gather is
// bit-identical. No fast-math: the math functions are the accurate ones.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda_check.h"
#include "device_util.cuh"
#include "octet/kernels/cuda/cuda_ops.h"
#include "octet/kernels/format_decode.h"

namespace octet::kernels::cuda {
namespace {

constexpr int kRowThreads = 256;      // RMSNorm, embedding: one block per row
static_assert(kRowThreads == kNormThreads);
constexpr int kArgmaxThreads = 1024;  // argmax: one block
constexpr int kFlatThreads = 256;     // element-wise ops
constexpr int kMaxFlatBlocks = 4096;  // grid-stride beyond this
constexpr int kMaxRopeHalf = 512;     // head_dim <= 1024, as in the CPU backend

// ---- RMSNorm: one block per row ---------------------------------------------

__global__ void __launch_bounds__(kRowThreads)
    RmsNormKernel(const float* x, const float* weight, float eps, int dim, int64_t stride,
                  float* out) {
  __shared__ float scratch[kRowThreads / kWarpSize];
  const float* xr = x + blockIdx.x * stride;
  float* outr = out + blockIdx.x * stride;
  // BlockInvRms ends in a barrier after which every read of the row is done,
  // so out may be x: each element is then read and written by the same thread.
  const float inv = BlockInvRms(xr, dim, eps, scratch);
  for (int i = threadIdx.x; i < dim; i += kRowThreads) outr[i] = NormScaled(xr[i], inv, weight, i);
}

// ---- RoPE: one block per row, every head ------------------------------------

__global__ void __launch_bounds__(kRowThreads)
    RopeKernel(float* x, int64_t row_stride, int n_heads, int head_stride, int head_dim,
               const int32_t* positions, const float* inv_freq) {
  __shared__ float cs[kMaxRopeHalf];
  __shared__ float sn[kMaxRopeHalf];
  const int half = head_dim / 2;
  // float32 angle, as transformers and the CPU backend compute it.
  const float pos = static_cast<float>(positions[blockIdx.x]);
  for (int i = threadIdx.x; i < half; i += kRowThreads) sincosf(pos * inv_freq[i], &sn[i], &cs[i]);
  __syncthreads();
  float* row = x + blockIdx.x * row_stride;
  for (int p = threadIdx.x; p < n_heads * half; p += kRowThreads) {
    const int h = p / half;
    const int i = p % half;
    float* v = row + h * head_stride;
    const float a = v[i];
    const float b = v[i + half];
    RotatePair(a, b, cs[i], sn[i], &v[i], &v[i + half]);
  }
}

// ---- SiLU·mul and add: grid-stride ------------------------------------------

__global__ void SiluMulKernel(const float* gate, const float* up, int rows, int n, int64_t stride,
                              float* out) {
  for (int r = blockIdx.y; r < rows; r += gridDim.y) {
    const int64_t base = r * stride;
    for (int64_t c = blockIdx.x * blockDim.x + threadIdx.x; c < n;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const float g = gate[base + c];
      out[base + c] = g / (1.0f + expf(-g)) * up[base + c];
    }
  }
}

__global__ void AddKernel(const float* a, const float* b, int64_t n, float* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = a[i] + b[i];
  }
}

// ---- embedding: one block per id --------------------------------------------

struct EmbeddingParams {
  WeightFormat format;
  const uint8_t* data;
  int64_t row_stride;
  const uint8_t* scales;
  int64_t scale_stride;
  float global_scale;
  int rows;
  int cols;
};

__global__ void __launch_bounds__(kRowThreads)
    EmbeddingKernel(const EmbeddingParams p, const int32_t* ids, float* out) {
  const int32_t id = ids[blockIdx.x];
  float* o = out + static_cast<int64_t>(blockIdx.x) * p.cols;
  if (id < 0 || id >= p.rows) {
    for (int c = threadIdx.x; c < p.cols; c += kRowThreads) o[c] = __int_as_float(0x7fc00000);
    return;
  }
  const uint8_t* row = p.data + id * p.row_stride;
  for (int c = threadIdx.x; c < p.cols; c += kRowThreads) {
    float v;
    switch (p.format) {
      case WeightFormat::kF32:
        v = reinterpret_cast<const float*>(row)[c];
        break;
      case WeightFormat::kBF16:
        v = DecodeBf16(reinterpret_cast<const uint16_t*>(row)[c]);
        break;
      case WeightFormat::kF16:
        v = DecodeF16(reinterpret_cast<const uint16_t*>(row)[c]);
        break;
      default:  // kNvfp4, in the reference's order: (E2M1 * scale) * global
        v = DecodeE2m1(Nvfp4Code(row, c)) *
            DecodeE4m3(p.scales[id * p.scale_stride + c / kNvfp4BlockSize]) * p.global_scale;
        break;
    }
    o[c] = v;
  }
}

// ---- argmax: one block ------------------------------------------------------

// A candidate: index -1 is "none yet" (every element so far NaN).
struct Best {
  float value;
  int64_t index;
};

// The better of two candidates: the larger value, the lower index on ties.
__device__ __forceinline__ Best Better(Best a, Best b) {
  if (b.index < 0) return a;
  if (a.index < 0) return b;
  if (b.value > a.value || (b.value == a.value && b.index < a.index)) return b;
  return a;
}

__global__ void __launch_bounds__(kArgmaxThreads)
    ArgmaxKernel(const float* x, int64_t n, int64_t* index) {
  __shared__ Best warp_best[kArgmaxThreads / kWarpSize];
  // Each thread scans its elements in increasing order, keeping the first of
  // equal values (strict >); a NaN never compares greater, so it never enters.
  Best best{0.0f, -1};
  for (int64_t i = threadIdx.x; i < n; i += kArgmaxThreads) {
    const float v = x[i];
    if (!isnan(v) && (best.index < 0 || v > best.value)) best = Best{v, i};
  }
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    Best other;
    other.value = __shfl_xor_sync(kFullMask, best.value, offset);
    other.index = __shfl_xor_sync(kFullMask, best.index, offset);
    best = Better(best, other);
  }
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  if (lane == 0) warp_best[warp] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    Best b = warp_best[0];
    for (int w = 1; w < kArgmaxThreads / kWarpSize; ++w) b = Better(b, warp_best[w]);
    *index = b.index < 0 ? 0 : b.index;
  }
}

unsigned FlatBlocks(int64_t n, int threads) {
  const int64_t blocks = CeilDiv(n, threads);
  return static_cast<unsigned>(blocks < 1 ? 1
                                          : (blocks > kMaxFlatBlocks ? kMaxFlatBlocks : blocks));
}

}  // namespace

cudaError_t CheckKernelImage() {
  // Loading one of this file's kernels fails with cudaErrorNoKernelImageForDevice
  // (or InvalidDeviceFunction) when the build holds neither SASS nor PTX that
  // the current device can run.
  cudaFuncAttributes attributes{};
  return cudaFuncGetAttributes(&attributes, AddKernel);
}

Status LaunchRmsNorm(CUstream_st* stream, const float* x, const float* weight, float eps,
                     int64_t rows, int64_t dim, int64_t stride, float* out) {
  if (!FitsInt(rows) || !FitsInt(dim) || stride < dim) {
    return InvalidArgumentError("LaunchRmsNorm: rows and dim must fit in 31 bits, stride >= dim");
  }
  if (rows == 0 || dim == 0) return Status::Ok();
  if (!x || !out) return InvalidArgumentError("LaunchRmsNorm: null x or out");
  RmsNormKernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(
      x, weight, eps, static_cast<int>(dim), stride, out);
  return CheckLaunch("RmsNormKernel");
}

Status LaunchRope(CUstream_st* stream, float* x, int64_t rows, int64_t row_stride, int64_t n_heads,
                  int64_t head_dim, const int32_t* positions, const float* inv_freq) {
  return LaunchRopeHeads(stream, x, rows, row_stride, n_heads, head_dim, head_dim, positions,
                         inv_freq);
}

Status LaunchRopeHeads(CUstream_st* stream, float* x, int64_t rows, int64_t row_stride,
                       int64_t n_heads, int64_t head_stride, int64_t rotary_dim,
                       const int32_t* positions, const float* inv_freq) {
  if (rotary_dim % 2 != 0 || rotary_dim < 0 || rotary_dim > 2 * kMaxRopeHalf ||
      head_stride < rotary_dim || !FitsInt(rows) || !FitsInt(n_heads * head_stride) ||
      (n_heads > 0 && row_stride < (n_heads - 1) * head_stride + rotary_dim)) {
    return InvalidArgumentError(
        "LaunchRope: rotary_dim " + std::to_string(rotary_dim) + ", head_stride " +
        std::to_string(head_stride) + ", " + std::to_string(n_heads) + " heads, row_stride " +
        std::to_string(row_stride) +
        ": the rotated dimension must be even and at most 1024, heads at least that far apart, "
        "and rows long enough for every head");
  }
  if (rows == 0 || n_heads == 0 || rotary_dim == 0) return Status::Ok();
  if (!x || !positions || !inv_freq) return InvalidArgumentError("LaunchRope: null pointer");
  RopeKernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(
      x, row_stride, static_cast<int>(n_heads), static_cast<int>(head_stride),
      static_cast<int>(rotary_dim), positions, inv_freq);
  return CheckLaunch("RopeKernel");
}

Status LaunchSiluMul(CUstream_st* stream, const float* gate, const float* up, int64_t rows,
                     int64_t n, int64_t stride, float* out) {
  if (!FitsInt(rows) || !FitsInt(n) || stride < n) {
    return InvalidArgumentError("LaunchSiluMul: rows and n must fit in 31 bits, stride >= n");
  }
  if (rows == 0 || n == 0) return Status::Ok();
  if (!gate || !up || !out) return InvalidArgumentError("LaunchSiluMul: null pointer");
  const dim3 grid(FlatBlocks(n, kFlatThreads), static_cast<unsigned>(rows < 65535 ? rows : 65535));
  SiluMulKernel<<<grid, kFlatThreads, 0, stream>>>(gate, up, static_cast<int>(rows),
                                                   static_cast<int>(n), stride, out);
  return CheckLaunch("SiluMulKernel");
}

Status LaunchAdd(CUstream_st* stream, const float* a, const float* b, int64_t n, float* out) {
  if (n < 0) return InvalidArgumentError("LaunchAdd: n < 0");
  if (n == 0) return Status::Ok();
  if (!a || !b || !out) return InvalidArgumentError("LaunchAdd: null pointer");
  AddKernel<<<FlatBlocks(n, kFlatThreads), kFlatThreads, 0, stream>>>(a, b, n, out);
  return CheckLaunch("AddKernel");
}

Status LaunchEmbedding(CUstream_st* stream, const WeightMatrix& table, const int32_t* ids,
                       int64_t n, float* out) {
  if (!FitsInt(n) || !FitsInt(table.rows) || !FitsInt(table.cols)) {
    return InvalidArgumentError("LaunchEmbedding: sizes must fit in 31 bits");
  }
  if (n == 0 || table.cols == 0) return Status::Ok();
  if (!ids || !out || !table.data) return InvalidArgumentError("LaunchEmbedding: null pointer");
  // Element alignment of the rows (the kernel reads whole elements).
  const int64_t element = table.format == WeightFormat::kF32     ? 4
                          : table.format == WeightFormat::kNvfp4 ? 1
                                                                 : 2;
  if (!Aligned(table.data, element) || table.row_stride % element != 0) {
    return InvalidArgumentError("LaunchEmbedding: " + std::string(WeightFormatName(table.format)) +
                                " rows must be aligned to their element size");
  }
  if (table.format == WeightFormat::kNvfp4 && !table.scales) {
    return InvalidArgumentError("LaunchEmbedding: NVFP4 table without scales");
  }
  EmbeddingParams p{};
  p.format = table.format;
  p.data = static_cast<const uint8_t*>(table.data);
  p.row_stride = table.row_stride;
  p.scales = table.scales;
  p.scale_stride = table.scale_row_stride;
  p.global_scale = table.global_scale;
  p.rows = static_cast<int>(table.rows);
  p.cols = static_cast<int>(table.cols);
  EmbeddingKernel<<<static_cast<unsigned>(n), kRowThreads, 0, stream>>>(p, ids, out);
  return CheckLaunch("EmbeddingKernel");
}

Status LaunchArgmax(CUstream_st* stream, const float* x, int64_t n, int64_t* index) {
  if (n < 1) return InvalidArgumentError("LaunchArgmax: n must be at least 1");
  if (!x || !index) return InvalidArgumentError("LaunchArgmax: null pointer");
  ArgmaxKernel<<<1, kArgmaxThreads, 0, stream>>>(x, n, index);
  return CheckLaunch("ArgmaxKernel");
}

}  // namespace octet::kernels::cuda
