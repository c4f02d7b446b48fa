// The NVFP4 decode matmul in integers: y[m, n] = x[m, k] · W[n, k]ᵀ for m <= 8
// activation rows, W's E2M1 codes turned into signed bytes and multiplied by
// the activations' integer parts with DP4A (the arithmetic and why:
// octet/kernels/nvfp4_int.h). Two kernels: one packs the activations (each
// 16-column block to 48 bytes of parts and a float scale), the other streams
// the weights once and multiplies.
//
// Work split of the matmul. A block of kIntThreads threads owns
// kIntRowsPerGroup x (kIntThreads / S) rows: the threads are cut into groups
// of S (S = 128 when a row has at least 128 chunks of 32 columns, else 32),
// each group owns kIntRowsPerGroup rows, and thread t of a group takes the
// chunks t, t + S, ... of each of its rows: every 16-byte weight load of a
// warp is one 512-byte stretch of a row, and a row's work is spread over S
// threads, so a 4096 x 4096 matrix is 1024 blocks of 4 rows rather than 128
// of 32 (the float kernel's split, which leaves too few bytes in flight on
// a large GPU at small n). For each chunk a thread decodes its rows' codes
// once (E2m1x4ToInt8; the block scales from a 256-entry table the block
// fills in shared memory) and then, per activation row, loads that row's 96
// bytes of parts for the chunk (L1-resident: every block reads them) and runs
// the DP4A chains of both blocks against each weight row. The group's
// threads sum their results with shuffles and, for S = 128, through shared
// memory; the first M x kIntRowsPerGroup threads of the group write y.
//
// What it takes (GemvNvfp4IntSupports): NVFP4 with k a multiple of 32 and
// code rows 16-byte aligned (base and stride), as every layer of the usual
// models and their TP slices; the backend sends anything else to the float
// kernel.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda_check.h"
#include "device_util.cuh"
#include "octet/kernels/cuda/cuda_ops.h"
#include "octet/kernels/format_decode.h"
#include "octet/kernels/nvfp4_int.h"

namespace octet::kernels::cuda {
namespace {

constexpr int kIntThreads = 128;
constexpr int kIntRowsPerGroup = 4;
constexpr int kChunkCols = 32;  // one 16-byte load of codes: two 16-column blocks
constexpr int kPackThreads = 256;

// ---- activations to integer parts -------------------------------------------

// One thread per (row, 16-column block).
__global__ void __launch_bounds__(kPackThreads)
    PackNvfp4IntKernel(const float* x, int m, int64_t ldx, int blocks, int8_t* parts,
                       float* scales) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kPackThreads + threadIdx.x;
  if (idx >= static_cast<int64_t>(m) * blocks) return;
  const int64_t i = idx / blocks, b = idx % blocks;
  float v[16];
  const float* src = x + i * ldx + b * 16;
#pragma unroll
  for (int c = 0; c < 16; ++c) v[c] = src[c];
  alignas(16) int8_t out[kNvfp4IntBlockBytes];
  scales[idx] = PackNvfp4IntBlock(v, out);
  uint4* dst = reinterpret_cast<uint4*>(parts + idx * kNvfp4IntBlockBytes);
  const uint4* o = reinterpret_cast<const uint4*>(out);
  dst[0] = o[0];
  dst[1] = o[1];
  dst[2] = o[2];
}

// ---- the matmul ---------------------------------------------------------------

struct IntParams {
  const int8_t* parts;  // [m][k / 16][48]
  const float* scales;  // [m][k / 16]
  const uint8_t* w;
  int64_t w_stride;  // bytes between rows of codes (a multiple of 16)
  const uint8_t* wscales;
  int64_t wscale_stride;  // bytes between rows of scales
  float out_scale;        // global scale x 1/2 (the codes are doubled)
  float* y;
  int64_t ldy;
  int n;
  int chunks;  // k / 32
  bool accumulate;
};

template <int M, int S>
__global__ void __launch_bounds__(kIntThreads) GemvNvfp4IntKernel(const IntParams p) {
  constexpr int R = kIntRowsPerGroup;
  constexpr int kGroups = kIntThreads / S;
  constexpr int kWarpsPerGroup = S / kWarpSize;
  const int group = threadIdx.x / S;
  const int t = threadIdx.x % S;
  const int row0 = (blockIdx.x * kGroups + group) * R;
  const int blocks = p.chunks * 2;
  // Every E4M3 scale code's value (DecodeE4m3): one shared-memory load per
  // block scale instead of the decode's dozen instructions (about a fifth of
  // the work per weight at one row otherwise).
  __shared__ float e4m3[256];
  for (int j = threadIdx.x; j < 256; j += kIntThreads)
    e4m3[j] = DecodeE4m3(static_cast<uint8_t>(j));
  __syncthreads();

  const uint8_t* wrow[R];
  const uint8_t* srow[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int row = min(row0 + r, p.n - 1);  // past n: read the last row, write nothing
    wrow[r] = p.w + row * p.w_stride;
    srow[r] = p.wscales + row * p.wscale_stride;
  }
  float acc[M][R];
#pragma unroll
  for (int i = 0; i < M; ++i) {
#pragma unroll
    for (int r = 0; r < R; ++r) acc[i][r] = 0.0f;
  }

  for (int c = t; c < p.chunks; c += S) {
    // The rows' codes (streamed: read once per call) and block scales.
    uint4 codes[R];
    uint8_t scale_code[R][2];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      codes[r] = __ldcs(reinterpret_cast<const uint4*>(wrow[r]) + c);
      scale_code[r][0] = __ldg(srow[r] + 2 * c);
      scale_code[r][1] = __ldg(srow[r] + 2 * c + 1);
    }
    Nvfp4IntChunk chunk[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint32_t words[4] = {codes[r].x, codes[r].y, codes[r].z, codes[r].w};
      DecodeNvfp4IntChunk(words, e4m3[scale_code[r][0]], e4m3[scale_code[r][1]], &chunk[r]);
    }
#pragma unroll
    for (int i = 0; i < M; ++i) {
      const int64_t blk0 = static_cast<int64_t>(i) * blocks + 2 * c;
      const uint4* ap = reinterpret_cast<const uint4*>(p.parts + blk0 * kNvfp4IntBlockBytes);
      uint32_t part[2][3][4];
#pragma unroll
      for (int b = 0; b < 2; ++b) {
#pragma unroll
        for (int pp = 0; pp < 3; ++pp) {
          const uint4 v = __ldg(ap + 3 * b + pp);
          part[b][pp][0] = v.x;
          part[b][pp][1] = v.y;
          part[b][pp][2] = v.z;
          part[b][pp][3] = v.w;
        }
      }
      const float2 as = __ldg(reinterpret_cast<const float2*>(p.scales + blk0));
      const float ascale[2] = {as.x, as.y};
      if (isinf(as.x) || isinf(as.y)) {  // an infinity in the activations: rare
#pragma unroll
        for (int r = 0; r < R; ++r) {
          acc[i][r] = Nvfp4IntChunkFmaAny(chunk[r], part, ascale, acc[i][r]);
        }
      } else {
#pragma unroll
        for (int r = 0; r < R; ++r) acc[i][r] = Nvfp4IntChunkFma(chunk[r], part, ascale, acc[i][r]);
      }
    }
  }

  // The group's sum: shuffles within each warp, then across its warps.
#pragma unroll
  for (int i = 0; i < M; ++i) {
#pragma unroll
    for (int r = 0; r < R; ++r) acc[i][r] = WarpSum(acc[i][r]);
  }
  __shared__ float partial[kIntThreads / kWarpSize][M * R];
  const int warp = threadIdx.x / kWarpSize;
  if constexpr (kWarpsPerGroup > 1) {
    if (threadIdx.x % kWarpSize == 0) {
#pragma unroll
      for (int i = 0; i < M; ++i) {
#pragma unroll
        for (int r = 0; r < R; ++r) partial[warp][i * R + r] = acc[i][r];
      }
    }
    __syncthreads();
  }
  if (t >= M * R) return;
  const int i = t / R, r = t % R;
  const int row = row0 + r;
  if (row >= p.n) return;
  float sum;
  if constexpr (kWarpsPerGroup > 1) {
    sum = 0.0f;
    for (int g = 0; g < kWarpsPerGroup; ++g) sum += partial[group * kWarpsPerGroup + g][t];
  } else {
    // Every lane of the (only) warp holds every sum; pick this thread's.
    sum = 0.0f;
#pragma unroll
    for (int ii = 0; ii < M; ++ii) {
#pragma unroll
      for (int rr = 0; rr < R; ++rr) sum = ii * R + rr == t ? acc[ii][rr] : sum;
    }
  }
  const float v = sum * p.out_scale;
  float* out = p.y + i * p.ldy + row;
  *out = p.accumulate ? *out + v : v;
}

template <int M, int S>
Status LaunchInt(cudaStream_t stream, const IntParams& p) {
  constexpr int kRowsPerBlock = kIntRowsPerGroup * (kIntThreads / S);
  const unsigned grid = static_cast<unsigned>(CeilDiv(p.n, kRowsPerBlock));
  GemvNvfp4IntKernel<M, S><<<grid, kIntThreads, 0, stream>>>(p);
  return CheckLaunch("GemvNvfp4IntKernel");
}

template <int S>
Status LaunchIntRows(cudaStream_t stream, int64_t m, const IntParams& p) {
  switch (m) {
    case 1:
      return LaunchInt<1, S>(stream, p);
    case 2:
      return LaunchInt<2, S>(stream, p);
    case 3:
      return LaunchInt<3, S>(stream, p);
    case 4:
      return LaunchInt<4, S>(stream, p);
    case 5:
      return LaunchInt<5, S>(stream, p);
    case 6:
      return LaunchInt<6, S>(stream, p);
    case 7:
      return LaunchInt<7, S>(stream, p);
    case 8:
      return LaunchInt<8, S>(stream, p);
  }
  return InternalError("LaunchGemvNvfp4Int: m out of range after the check");
}

}  // namespace

bool GemvNvfp4IntSupports(const WeightMatrix& w) {
  return w.format == WeightFormat::kNvfp4 && w.cols > 0 && w.cols % kChunkCols == 0 && w.data &&
         w.scales && Aligned(w.data, 16) && w.row_stride % 16 == 0 && w.row_stride >= w.cols / 2 &&
         w.scale_row_stride >= w.cols / kNvfp4BlockSize;
}

int64_t Nvfp4IntPackedBytes(int64_t m, int64_t k) {
  const int64_t blocks = k / kNvfp4BlockSize;
  return m * blocks * (kNvfp4IntBlockBytes + static_cast<int64_t>(sizeof(float)));
}

Status LaunchPackNvfp4Int(CUstream_st* stream, const float* x, int64_t m, int64_t ldx, int64_t k,
                          void* packed, int64_t packed_bytes) {
  if (m < 1 || m > kGemvMaxRows || k <= 0 || k % kChunkCols != 0 || ldx < k) {
    return InvalidArgumentError("LaunchPackNvfp4Int: m " + std::to_string(m) + ", k " +
                                std::to_string(k) + ", ldx " + std::to_string(ldx) + " (m 1.." +
                                std::to_string(kGemvMaxRows) +
                                ", k a positive multiple of 32, ldx >= k)");
  }
  if (!FitsInt(k) || !FitsInt(m * ldx)) {
    return InvalidArgumentError("LaunchPackNvfp4Int: sizes must fit in 31 bits");
  }
  if (!x || !packed || !Aligned(packed, 16) || packed_bytes < Nvfp4IntPackedBytes(m, k)) {
    return InvalidArgumentError(
        "LaunchPackNvfp4Int: null pointer, or packed space not 16-byte aligned or smaller than "
        "Nvfp4IntPackedBytes(m, k)");
  }
  const int blocks = static_cast<int>(k / kNvfp4BlockSize);
  int8_t* parts = static_cast<int8_t*>(packed);
  float* scales = reinterpret_cast<float*>(parts + m * blocks * kNvfp4IntBlockBytes);
  const unsigned grid = static_cast<unsigned>(CeilDiv(m * blocks, kPackThreads));
  PackNvfp4IntKernel<<<grid, kPackThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      x, static_cast<int>(m), ldx, blocks, parts, scales);
  return CheckLaunch("PackNvfp4IntKernel");
}

Status LaunchGemvNvfp4Int(CUstream_st* stream, const void* packed, int64_t m, const WeightMatrix& w,
                          float* y, int64_t ldy, bool accumulate) {
  const int64_t n = w.rows, k = w.cols;
  if (m < 1 || m > kGemvMaxRows) {
    return InvalidArgumentError("LaunchGemvNvfp4Int: m = " + std::to_string(m) +
                                " rows; it takes 1.." + std::to_string(kGemvMaxRows));
  }
  if (!GemvNvfp4IntSupports(w)) {
    return UnimplementedError("LaunchGemvNvfp4Int: a " + std::string(WeightFormatName(w.format)) +
                              " matrix of k " + std::to_string(k) + ", row stride " +
                              std::to_string(w.row_stride) +
                              " bytes: it takes NVFP4 weights with k a multiple of 32 and "
                              "16-byte aligned code rows");
  }
  if (!FitsInt(n) || !FitsInt(k) || !FitsInt(m * ldy)) {
    return InvalidArgumentError("LaunchGemvNvfp4Int: sizes must fit in 31 bits");
  }
  if (n == 0) return Status::Ok();
  if (!packed || !y || ldy < n) {
    return InvalidArgumentError("LaunchGemvNvfp4Int: null pointer or ldy shorter than a row");
  }
  const int64_t blocks = k / kNvfp4BlockSize;
  IntParams p{};
  p.parts = static_cast<const int8_t*>(packed);
  p.scales = reinterpret_cast<const float*>(p.parts + m * blocks * kNvfp4IntBlockBytes);
  p.w = static_cast<const uint8_t*>(w.data);
  p.w_stride = w.row_stride;
  p.wscales = w.scales;
  p.wscale_stride = w.scale_row_stride;
  p.out_scale = w.global_scale * 0.5f;
  p.y = y;
  p.ldy = ldy;
  p.n = static_cast<int>(n);
  p.chunks = static_cast<int>(k / kChunkCols);
  p.accumulate = accumulate;
  cudaStream_t cs = stream;
  return p.chunks >= kIntThreads ? LaunchIntRows<kIntThreads>(cs, m, p)
                                 : LaunchIntRows<kWarpSize>(cs, m, p);
}

}  // namespace octet::kernels::cuda
