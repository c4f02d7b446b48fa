// Device-side helpers shared by the kernels (internal): warp and block
// reductions. Included by .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace octet::kernels::cuda {

inline constexpr int kWarpSize = 32;
inline constexpr unsigned kFullMask = 0xffffffffu;
// RmsNormKernel's block size. A kernel that repeats its reduction (the GEMV's
// fused norm, QkPrepKernel) runs blocks of as many threads, so its sums are
// RmsNormKernel's bit for bit.
inline constexpr int kNormThreads = 256;

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(kFullMask, v, offset);
  }
  return v;  // every lane holds the sum
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  }
  return v;
}

// Sum of `v` over the block, returned to every thread. `scratch` holds one
// float per warp (32 at most); the block size is a multiple of 32. Contains
// __syncthreads: every thread of the block must call it.
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  v = WarpSum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < warps; ++w) total += scratch[w];  // same order in every thread
  return total;
}

__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float m = scratch[0];
  for (int w = 1; w < warps; ++w) m = fmaxf(m, scratch[w]);
  return m;
}

// 1 / rms of x[0..dim) with eps, as RmsNorm: a block of kNormThreads threads
// sums the squares (each thread its strided share, then BlockSum), and every
// thread gets the result. RmsNormKernel, QkPrepKernel and the GEMV's fused
// norm all use it and NormScaled, so their norms agree bit for bit. Contains
// __syncthreads (BlockSum): every thread of the block must call it.
__device__ __forceinline__ float BlockInvRms(const float* x, int dim, float eps, float* scratch) {
  float ss = 0.0f;
  for (int i = threadIdx.x; i < dim; i += kNormThreads) ss = fmaf(x[i], x[i], ss);
  ss = BlockSum(ss, scratch);
  return 1.0f / sqrtf(ss / static_cast<float>(dim) + eps);
}
// Element i of the norm: x * inv, then times weight[i] (weight may be null).
__device__ __forceinline__ float NormScaled(float x, float inv, const float* weight, int64_t i) {
  const float v = x * inv;
  return weight ? weight[i] * v : v;
}

// One rotated RoPE pair, rounded product by product (no contraction into an
// FMA, so RopeKernel and QkPrepKernel give the same bits).
__device__ __forceinline__ void RotatePair(float a, float b, float c, float s, float* x, float* y) {
  *x = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
  *y = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
}

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// i over [0, n) across the grid's x dimension (blocks and their threads).
#define OCTET_GRID_STRIDE(i, n)                                                          \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

}  // namespace octet::kernels::cuda
