// Decode matmuls: y[m, n] = x[m, k] · W[n, k]ᵀ for m <= 8 activation rows,
// W in BF16 or NVFP4, dequantized in registers. A decode step reads every
// weight once, so the kernel is written for memory bandwidth: W streams
// through 16-byte loads exactly once whatever m is, and x is reused from
// shared memory and registers.
//
// Work split. A block of kWarps warps owns kRowsPerBlock consecutive rows of
// W, each warp kRowsPerWarp of them; a lane handles the same columns of its
// warp's rows, so every x value it loads from shared memory serves all of
// them. The block walks k in tiles of kTileCols columns:
//   1. each lane loads its 16-byte chunks of the tile for its rows into
//      registers (BF16: 4 chunks of 8 values per row; NVFP4: 1 chunk of 32
//      codes and its 2 E4M3 scales) — issued first, so that their latency
//      overlaps step 2 (NVFP4 a tile ahead, during the previous tile's
//      step 3);
//   2. the block stages x[0..m)[tile] in shared memory (zeros past k);
//   3. each lane multiplies its chunks by the staged x, m rows at a time.
// At the end each warp sums its lanes with shuffles and lane 0 writes the
// m x kRowsPerWarp results. Out-of-range rows (n not a multiple of
// kRowsPerBlock) read the last row again and are not written.
//
// Shared memory traffic. Lane l reads x[8l..8l+7] (BF16) or x[32l..32l+31]
// (NVFP4) as float4s, 32 or 128 bytes apart: unpadded, two (BF16) or all
// eight (NVFP4) lanes of a quarter-warp would hit the same banks. Each 32
// columns of the staged tile are followed by 4 floats of padding
// (PaddedCol), which makes every float4 load of the kernel conflict-free.
//
// Rows whose start is 16-byte aligned (base and stride: a matrix in its own
// cudaMalloc with k a multiple of 8 (BF16) or 32 (NVFP4), i.e. every layer of
// the usual models) take the vector loads; other rows, and the partial
// chunk at the end of a row (k not a multiple of the chunk), are read element
// by element into the same register layout with the missing columns as zero
// codes, so one compute path serves all.
//
// Budget, per 16 bytes of weights and activation row: BF16 8 FMAs plus 8
// conversions (shifts); NVFP4 32 FMAs, 16 two-code decodes to half2 (two
// shifts and two logic ops each, Nvfp4PairToHalf2), 32 widenings to float
// and 2 scale FMAs (the block scale goes on each 16-column partial sum). On
// GB10 (273 GB/s over 48 SMs) that is far below the SMs' rate; on H200
// (4.8 TB/s over 132 SMs) NVFP4 at several activation rows is bound by these
// instructions rather than by memory (bench_cuda shows which).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda_check.h"
#include "device_util.cuh"
#include "octet/kernels/cuda/cuda_ops.h"
#include "octet/kernels/format_decode.h"

namespace octet::kernels::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kRowsPerWarp = 4;
constexpr int kRowsPerBlock = kWarps * kRowsPerWarp;
constexpr int kThreads = kWarps * kWarpSize;
static_assert(kThreads == kNormThreads, "the fused norm repeats RmsNormKernel's reduction");
constexpr int kTileCols = 1024;
// 4 floats of padding after every 32 columns (see the file comment).
constexpr int kPaddedTileCols = kTileCols + kTileCols / 32 * 4;

__device__ __forceinline__ int PaddedCol(int c) { return c + (c >> 5) * 4; }

__device__ __forceinline__ uint32_t Word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// The E2M1 codes in bits 0..3 and 16..19 of `v` as the halves of a half2,
// each equal to its code's value times 2^-14 (exactly): a code's exponent and
// mantissa bits (2..0) become the half's exponent's low two bits and top
// mantissa bit (bits 11..9), its sign (bit 3) the half's sign. E2M1's
// exponent bias 1 against binary16's 15 is the 2^-14, and E2M1's subnormal
// (0.5) lands on a binary16 subnormal, so the hardware widening to float
// (one instruction a value) finishes the decode that DecodeE2m1 does with a
// handful. Other bits of `v` are ignored.
__device__ __forceinline__ __half2 Nvfp4PairToHalf2(uint32_t v) {
  const uint32_t bits = ((v << 9) & 0x0e000e00u) | ((v << 12) & 0x80008000u);
  return *reinterpret_cast<const __half2*>(&bits);
}

// What one 16-byte chunk of a format holds.
template <WeightFormat F>
struct ChunkTraits;
template <>
struct ChunkTraits<WeightFormat::kBF16> {
  static constexpr int kCols = 8;
  __device__ static int64_t ByteOffset(int col) { return static_cast<int64_t>(col) * 2; }
};
template <>
struct ChunkTraits<WeightFormat::kNvfp4> {
  static constexpr int kCols = 32;
  __device__ static int64_t ByteOffset(int col) { return col / 2; }  // col is a multiple of 32
};
// Chunks per lane per row per tile: the tile is one pass of the warp.
template <WeightFormat F>
constexpr int kChunksPerTile = kTileCols / (kWarpSize * ChunkTraits<F>::kCols);
static_assert(kChunksPerTile<WeightFormat::kBF16> == 4 &&
              kChunksPerTile<WeightFormat::kNvfp4> == 1);

struct GemvParams {
  const float* x;
  int64_t ldx;
  const uint8_t* w;
  int64_t w_stride;       // bytes between rows of w
  const uint8_t* scales;  // NVFP4
  int64_t scale_stride;   // bytes between rows of scales
  float global_scale;     // NVFP4 (applied to the sums)
  float* y;
  int64_t ldy;
  int n;
  int k;
  bool accumulate;
  bool vector_rows;  // every row starts 16-byte aligned
  // GemvProduct's: kRmsNorm's scale or kSiluMul's up, and the norm's eps.
  const float* aux;
  float norm_eps;
};

// The chunk of `row` that starts at column `col`, columns at or past k read
// as zero codes (+0.0 in both formats).
template <WeightFormat F>
__device__ __forceinline__ uint4 LoadChunk(const uint8_t* row, int col, int k, bool vector_rows) {
  constexpr int kCols = ChunkTraits<F>::kCols;
  if (vector_rows && col + kCols <= k) {
    // Streamed (evict-first): each weight is read once per call.
    return __ldcs(reinterpret_cast<const uint4*>(row + ChunkTraits<F>::ByteOffset(col)));
  }
  uint32_t word[4] = {0, 0, 0, 0};
  if constexpr (F == WeightFormat::kBF16) {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + col;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      if (col + e < k) word[e / 2] |= static_cast<uint32_t>(__ldg(p + e)) << (16 * (e % 2));
    }
  } else {
    const uint8_t* p = row + col / 2;
#pragma unroll
    for (int b = 0; b < 16; ++b) {
      const int c = col + 2 * b;  // the byte's even column
      if (c < k) {
        uint32_t byte = __ldg(p + b);
        if (c + 1 >= k) byte &= 0xfu;  // its odd column is past the end: padding
        word[b / 4] |= byte << (8 * (b % 4));
      }
    }
  }
  return make_uint4(word[0], word[1], word[2], word[3]);
}

// Block `block` of the product `p` (its rows kRowsPerBlock * block onwards).
// GemvKernel runs one product, GemvGroupedKernel several: the same code per
// block, so a product's results are the same bit for bit either way.
// S: how x is staged (GemvStaging; a template parameter, so that the plain
// kernels' code is what it was when an H200 measured it).
template <WeightFormat F, int M, GemvStaging S = GemvStaging::kPlain>
__device__ __forceinline__ void GemvBlock(const GemvParams& p, int block) {
  constexpr int R = kRowsPerWarp;
  constexpr int U = kChunksPerTile<F>;
  constexpr int kCols = ChunkTraits<F>::kCols;
  // x[0..M)[tile], 16-byte aligned rows for the float4 loads.
  __shared__ __align__(16) float xs[M][kPaddedTileCols];

  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int row0 = block * kRowsPerBlock + warp * R;

  const uint8_t* wrow[R];
  const uint8_t* srow[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int row = min(row0 + r, p.n - 1);
    wrow[r] = p.w + row * p.w_stride;
    srow[r] = F == WeightFormat::kNvfp4 ? p.scales + row * p.scale_stride : nullptr;
  }

  float acc[M][R];
#pragma unroll
  for (int i = 0; i < M; ++i) {
#pragma unroll
    for (int r = 0; r < R; ++r) acc[i][r] = 0.0f;
  }

  // This lane's weights of the tile at column t0: its chunks and (NVFP4)
  // the raw E4M3 codes of their two block scales (0, i.e. +0.0, past k),
  // decoded only where they are used, so that nothing waits on the loads
  // before then.
  uint4 chunk[R][U];
  uint32_t scale_code[R][U][2];
  auto load_tile = [&](int t0, uint4(&c)[R][U], uint32_t(&sc)[R][U][2]) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int col = t0 + (u * kWarpSize + lane) * kCols;
        c[r][u] = LoadChunk<F>(wrow[r], col, p.k, p.vector_rows);
        if constexpr (F == WeightFormat::kNvfp4) {
          sc[r][u][0] = col < p.k ? __ldg(srow[r] + col / 16) : 0u;
          sc[r][u][1] = col + 16 < p.k ? __ldg(srow[r] + col / 16 + 1) : 0u;
        }
      }
    }
  };
  // With one chunk a lane a row per tile (NVFP4), too
  // few bytes are in flight to cover the memory latency if each tile's loads
  // waited for the previous tile's arithmetic: the next tile's loads are
  // issued before the current one is multiplied (double buffering in
  // registers). Four chunks a row keep enough in flight without the extra
  // registers. (NVFP4 in 4096-column tiles at one or two rows, four chunks
  // and one barrier pair per row of an 8B-class layer, needed 255 registers,
  // one block an SM, and was slower on an H200 at 14336 and 16384 rows.)
  constexpr bool kPrefetch = U == 1;
  if constexpr (kPrefetch) load_tile(0, chunk, scale_code);

  // With kRmsNorm, each x row's 1 / rms first, while the first tile's weights
  // are in flight: RmsNormKernel's own reduction (BlockInvRms, NormScaled;
  // both run kNormThreads threads), so the staged values below are its
  // output bit for bit.
  __shared__ float inv_rms[M];
  if constexpr (S == GemvStaging::kRmsNorm) {
    __shared__ float red[kWarps];
    for (int i = 0; i < M; ++i) {
      const float inv = BlockInvRms(p.x + i * p.ldx, p.k, p.norm_eps, red);
      if (threadIdx.x == 0) inv_rms[i] = inv;
    }
    // The staging loop's first barrier orders these writes before its reads.
  }

  for (int t0 = 0; t0 < p.k; t0 += kTileCols) {
    // 1. This tile's weights (already loaded where prefetched).
    if constexpr (!kPrefetch) load_tile(t0, chunk, scale_code);
    // 2. Stage x. The first barrier keeps the previous tile's readers ahead
    // of these writes, the second the writes ahead of the readers.
    __syncthreads();
    for (int idx = threadIdx.x; idx < M * kTileCols; idx += kThreads) {
      const int i = idx / kTileCols;
      const int c = idx % kTileCols;
      float v = t0 + c < p.k ? p.x[i * p.ldx + t0 + c] : 0.0f;
      if (S == GemvStaging::kRmsNorm && t0 + c < p.k) {
        v = NormScaled(v, inv_rms[i], p.aux, t0 + c);  // as RmsNormKernel
      } else if (S == GemvStaging::kSiluMul && t0 + c < p.k) {
        v = v / (1.0f + expf(-v)) * p.aux[i * p.ldx + t0 + c];  // as SiluMulKernel
      }
      xs[i][PaddedCol(c)] = v;
    }
    __syncthreads();
    uint4 next_chunk[R][U];
    uint32_t next_scale_code[R][U][2];
    const bool more = kPrefetch && t0 + kTileCols < p.k;
    if (more) load_tile(t0 + kTileCols, next_chunk, next_scale_code);
    // 3. Multiply, four columns (one float4 of x per activation row) at a time.
    if constexpr (F == WeightFormat::kBF16) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int c = (u * kWarpSize + lane) * kCols + half * 4;
          float w[R][4];
#pragma unroll
          for (int r = 0; r < R; ++r) {
            const uint32_t lo = Word(chunk[r][u], 2 * half);      // columns c, c+1
            const uint32_t hi = Word(chunk[r][u], 2 * half + 1);  // columns c+2, c+3
            w[r][0] = DecodeBf16(static_cast<uint16_t>(lo & 0xffffu));
            w[r][1] = DecodeBf16(static_cast<uint16_t>(lo >> 16));
            w[r][2] = DecodeBf16(static_cast<uint16_t>(hi & 0xffffu));
            w[r][3] = DecodeBf16(static_cast<uint16_t>(hi >> 16));
          }
#pragma unroll
          for (int i = 0; i < M; ++i) {
            const float4 xv = *reinterpret_cast<const float4*>(&xs[i][PaddedCol(c)]);
#pragma unroll
            for (int r = 0; r < R; ++r) {
              acc[i][r] = fmaf(xv.x, w[r][0], acc[i][r]);
              acc[i][r] = fmaf(xv.y, w[r][1], acc[i][r]);
              acc[i][r] = fmaf(xv.z, w[r][2], acc[i][r]);
              acc[i][r] = fmaf(xv.w, w[r][3], acc[i][r]);
            }
          }
        }
      }
    } else {
      // Column j (0..31) of the chunk is nibble j % 8 of word j / 8 (two
      // codes per byte, low nibble first, little-endian words). Word q holds
      // columns 8q..8q+7; its pair p (0..3) is columns 8q+p and 8q+p+4, which
      // sit at bits 4p and 4p+16: one half2 (Nvfp4PairToHalf2) and two
      // cvts give both. The products are summed per 16-column block and the
      // block's scale applied once to the sum.
#pragma unroll
      for (int u = 0; u < U; ++u) {
#pragma unroll
        for (int blk = 0; blk < 2; ++blk) {
          float part[M][R];
#pragma unroll
          for (int i = 0; i < M; ++i) {
#pragma unroll
            for (int r = 0; r < R; ++r) part[i][r] = 0.0f;
          }
#pragma unroll
          for (int qq = 0; qq < 2; ++qq) {
            const int q = blk * 2 + qq;
            const int c = (u * kWarpSize + lane) * kCols + q * 8;
            float lo[R][4], hi[R][4];  // columns c+p and c+p+4, times 2^-14
#pragma unroll
            for (int r = 0; r < R; ++r) {
              const uint32_t word = Word(chunk[r][u], q);
#pragma unroll
              for (int pr = 0; pr < 4; ++pr) {
                const float2 f = __half22float2(Nvfp4PairToHalf2(word >> (4 * pr)));
                lo[r][pr] = f.x;
                hi[r][pr] = f.y;
              }
            }
#pragma unroll
            for (int i = 0; i < M; ++i) {
              const float4 xa = *reinterpret_cast<const float4*>(&xs[i][PaddedCol(c)]);
              const float4 xb = *reinterpret_cast<const float4*>(&xs[i][PaddedCol(c + 4)]);
#pragma unroll
              for (int r = 0; r < R; ++r) {
                part[i][r] = fmaf(xa.x, lo[r][0], part[i][r]);
                part[i][r] = fmaf(xa.y, lo[r][1], part[i][r]);
                part[i][r] = fmaf(xa.z, lo[r][2], part[i][r]);
                part[i][r] = fmaf(xa.w, lo[r][3], part[i][r]);
                part[i][r] = fmaf(xb.x, hi[r][0], part[i][r]);
                part[i][r] = fmaf(xb.y, hi[r][1], part[i][r]);
                part[i][r] = fmaf(xb.z, hi[r][2], part[i][r]);
                part[i][r] = fmaf(xb.w, hi[r][3], part[i][r]);
              }
            }
          }
          float scale[R];
#pragma unroll
          for (int r = 0; r < R; ++r) {
            scale[r] = DecodeE4m3(static_cast<uint8_t>(scale_code[r][u][blk]));
          }
#pragma unroll
          for (int i = 0; i < M; ++i) {
#pragma unroll
            for (int r = 0; r < R; ++r) acc[i][r] = fmaf(part[i][r], scale[r], acc[i][r]);
          }
        }
      }
    }
    if (more) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          chunk[r][u] = next_chunk[r][u];
          scale_code[r][u][0] = next_scale_code[r][u][0];
          scale_code[r][u][1] = next_scale_code[r][u][1];
        }
      }
    }
  }

#pragma unroll
  for (int i = 0; i < M; ++i) {
#pragma unroll
    for (int r = 0; r < R; ++r) acc[i][r] = WarpSum(acc[i][r]);
  }
  if (lane != 0) return;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int row = row0 + r;
    if (row >= p.n) break;
#pragma unroll
    for (int i = 0; i < M; ++i) {
      // NVFP4's global scale goes on the sum (the CPU decode kernels do the
      // same), with the 2^14 that Nvfp4PairToHalf2 leaves out.
      const float v =
          F == WeightFormat::kNvfp4 ? acc[i][r] * (p.global_scale * 0x1p14f) : acc[i][r];
      float* out = p.y + i * p.ldy + row;
      *out = p.accumulate ? *out + v : v;
    }
  }
}

template <WeightFormat F, int M>
__global__ void __launch_bounds__(kThreads) GemvKernel(const GemvParams p) {
  GemvBlock<F, M>(p, blockIdx.x);
}

// Products of one format and row count in one launch (LaunchGemvGrouped):
// product s owns blocks [first_block[s], first_block[s + 1]). Passed as the
// kernel's parameters (under the 4 KiB every driver takes), so nothing is
// copied to the device first.
constexpr int kGroupedProducts = 32;
struct GemvGroupedParams {
  GemvParams p[kGroupedProducts];
  int first_block[kGroupedProducts + 1];
  int n;
  GemvStaging staging;  // every product's
};
static_assert(sizeof(GemvGroupedParams) <= 4096, "kernel parameters above 4 KiB");

template <WeightFormat F, int M, GemvStaging S>
__global__ void __launch_bounds__(kThreads) GemvGroupedKernel(const GemvGroupedParams g) {
  const int b = blockIdx.x;
  int lo = 0, hi = g.n - 1;  // the last product whose first block is <= b
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (g.first_block[mid] <= b) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  GemvBlock<F, M, S>(g.p[lo], b - g.first_block[lo]);
}

// LaunchGemvRouted: grid (row blocks, slots, matrices). The slot's expert
// comes from device memory, so the launch needs nothing from the host.
__device__ __forceinline__ GemvParams RoutedParams(const GemvRoutedArgs& a,
                                                   const DeviceGemvMatrix& m, int64_t s, int z) {
  GemvParams p{};
  p.x = a.x + (s / a.x_div) * a.ldx;
  p.ldx = a.ldx;
  p.w = m.data;
  p.w_stride = m.row_stride;
  p.scales = m.scales;
  p.scale_stride = m.scale_row_stride;
  p.global_scale = m.global_scale;
  p.y = (z == 0 ? a.y[0] : a.y[1]) + s * a.ldy;  // constant indices: `a` stays in
                                                 // the parameter space
  p.ldy = a.ldy;
  p.n = m.rows;
  p.k = m.cols;
  p.accumulate = false;
  p.vector_rows = m.vector_rows != 0;
  return p;
}

__global__ void __launch_bounds__(kThreads) GemvRoutedKernel(const GemvRoutedArgs a) {
  const int64_t s = blockIdx.y;
  const int z = blockIdx.z;
  const int32_t e = a.chosen[s];
  if (e < 0 || e >= a.num_experts) return;
  const DeviceExpert& ex = a.experts[e];
  const int which = z == 0 ? a.which[0] : a.which[1];
  const DeviceGemvMatrix& m = which == 0 ? ex.gate : which == 1 ? ex.up : ex.down;
  if (static_cast<int64_t>(blockIdx.x) * kRowsPerBlock >= m.rows) return;
  // The format is the same for the whole block.
  if (m.nvfp4) {
    const GemvParams p = RoutedParams(a, m, s, z);
    GemvBlock<WeightFormat::kNvfp4, 1>(p, blockIdx.x);
  } else {
    const GemvParams p = RoutedParams(a, m, s, z);
    GemvBlock<WeightFormat::kBF16, 1>(p, blockIdx.x);
  }
}

template <WeightFormat F, int M>
Status Launch(cudaStream_t stream, const GemvParams& p) {
  const unsigned blocks = static_cast<unsigned>(CeilDiv(p.n, kRowsPerBlock));
  GemvKernel<F, M><<<blocks, kThreads, 0, stream>>>(p);
  return CheckLaunch(F == WeightFormat::kBF16 ? "GemvKernel<BF16>" : "GemvKernel<NVFP4>");
}

template <WeightFormat F, int M>
Status LaunchGrouped(cudaStream_t stream, const GemvGroupedParams& g) {
  const unsigned blocks = static_cast<unsigned>(g.first_block[g.n]);
  switch (g.staging) {
    case GemvStaging::kPlain:
      GemvGroupedKernel<F, M, GemvStaging::kPlain><<<blocks, kThreads, 0, stream>>>(g);
      break;
    case GemvStaging::kRmsNorm:
      GemvGroupedKernel<F, M, GemvStaging::kRmsNorm><<<blocks, kThreads, 0, stream>>>(g);
      break;
    case GemvStaging::kSiluMul:
      GemvGroupedKernel<F, M, GemvStaging::kSiluMul><<<blocks, kThreads, 0, stream>>>(g);
      break;
  }
  return CheckLaunch(F == WeightFormat::kBF16 ? "GemvGroupedKernel<BF16>"
                                              : "GemvGroupedKernel<NVFP4>");
}

// Launches L<F, m>(stream, arg) for the run-time row count m (1..8).
template <WeightFormat F, template <WeightFormat, int> class L, class Arg>
Status ForRows(cudaStream_t stream, int64_t m, const Arg& arg) {
  switch (m) {
    case 1:
      return L<F, 1>::Run(stream, arg);
    case 2:
      return L<F, 2>::Run(stream, arg);
    case 3:
      return L<F, 3>::Run(stream, arg);
    case 4:
      return L<F, 4>::Run(stream, arg);
    case 5:
      return L<F, 5>::Run(stream, arg);
    case 6:
      return L<F, 6>::Run(stream, arg);
    case 7:
      return L<F, 7>::Run(stream, arg);
    case 8:
      return L<F, 8>::Run(stream, arg);
  }
  return InternalError("LaunchGemv: m out of range after the check");
}
template <WeightFormat F, int M>
struct One {
  static Status Run(cudaStream_t s, const GemvParams& p) { return Launch<F, M>(s, p); }
};
template <WeightFormat F, int M>
struct Grouped {
  static Status Run(cudaStream_t s, const GemvGroupedParams& g) {
    return LaunchGrouped<F, M>(s, g);
  }
};

// The kernel's parameters for one product after LaunchGemv's checks (`who`
// names the launcher in the errors); *skip when there is nothing to launch
// (m or n zero, or k zero while accumulating).
Result<GemvParams> MakeParams(const char* who, const float* x, int64_t m, int64_t ldx,
                              const WeightMatrix& w, float* y, int64_t ldy, bool accumulate,
                              bool* skip) {
  const int64_t n = w.rows, k = w.cols;
  const std::string name = who;
  *skip = true;
  if (m < 0 || m > kGemvMaxRows) {
    return InvalidArgumentError(name + ": m = " + std::to_string(m) +
                                " rows; the decode kernel takes 1.." +
                                std::to_string(kGemvMaxRows));
  }
  if (w.format != WeightFormat::kBF16 && w.format != WeightFormat::kNvfp4) {
    return UnimplementedError(name + ": " + std::string(WeightFormatName(w.format)) +
                              " weights (the CUDA decode kernel reads BF16 and NVFP4)");
  }
  if (!FitsInt(n) || !FitsInt(k) || !FitsInt(m * ldx) || !FitsInt(m * ldy)) {
    return InvalidArgumentError(name + ": sizes must fit in 31 bits");
  }
  GemvParams p{};
  if (m == 0 || n == 0) return p;
  if (k == 0 && accumulate) return p;  // adds nothing
  if (!x || !y || (k > 0 && !w.data) || ldx < k || ldy < n) {
    return InvalidArgumentError(name + ": null pointer or row stride shorter than a row");
  }
  p.x = x;
  p.ldx = ldx;
  p.w = static_cast<const uint8_t*>(w.data);
  p.w_stride = w.row_stride;
  p.y = y;
  p.ldy = ldy;
  p.n = static_cast<int>(n);
  p.k = static_cast<int>(k);
  p.accumulate = accumulate;
  p.vector_rows = Aligned(w.data, 16) && w.row_stride % 16 == 0;
  if (w.format == WeightFormat::kBF16) {
    if (!Aligned(w.data, 2) || w.row_stride % 2 != 0 || w.row_stride < 2 * k) {
      return InvalidArgumentError(name + ": BF16 rows must be 2-byte aligned and hold k values");
    }
  } else {
    if ((k > 0 && !w.scales) || w.row_stride < (k + 1) / 2 ||
        w.scale_row_stride < CeilDiv(k, kNvfp4BlockSize)) {
      return InvalidArgumentError(name +
                                  ": NVFP4 rows need (k+1)/2 code bytes and "
                                  "ceil(k/16) scales");
    }
    p.scales = w.scales;
    p.scale_stride = w.scale_row_stride;
    p.global_scale = w.global_scale;
  }
  *skip = false;
  return p;
}

}  // namespace

Status LaunchGemv(CUstream_st* stream, const float* x, int64_t m, int64_t ldx,
                  const WeightMatrix& w, float* y, int64_t ldy, bool accumulate) {
  bool skip = true;
  OCTET_ASSIGN_OR_RETURN(const GemvParams p,
                         MakeParams("LaunchGemv", x, m, ldx, w, y, ldy, accumulate, &skip));
  if (skip) return Status::Ok();
  cudaStream_t cs = stream;  // the runtime's name for CUstream_st*
  return w.format == WeightFormat::kBF16 ? ForRows<WeightFormat::kBF16, One>(cs, m, p)
                                         : ForRows<WeightFormat::kNvfp4, One>(cs, m, p);
}

Status LaunchGemvGrouped(CUstream_st* stream, int64_t m, const GemvProduct* products,
                         int n_products) {
  if (n_products < 0 || (n_products > 0 && !products)) {
    return InvalidArgumentError("LaunchGemvGrouped: null or negative product list");
  }
  if (m < 1 || m > kGemvMaxRows) {
    return InvalidArgumentError("LaunchGemvGrouped: m = " + std::to_string(m) +
                                " rows; the decode kernel takes 1.." +
                                std::to_string(kGemvMaxRows));
  }
  // Every product checked before anything is queued.
  WeightFormat format = WeightFormat::kBF16;
  for (int i = 0; i < n_products; ++i) {
    const GemvProduct& q = products[i];
    if (!q.w) {
      return InvalidArgumentError("LaunchGemvGrouped: product " + std::to_string(i) +
                                  " without weights");
    }
    if (i == 0) format = q.w->format;
    if (q.staging != products[0].staging) {
      return InvalidArgumentError("LaunchGemvGrouped: product " + std::to_string(i) +
                                  " stages x in another way than product 0; one launch "
                                  "stages every product's x alike");
    }
    if (q.staging == GemvStaging::kSiluMul && !q.aux) {
      return InvalidArgumentError("LaunchGemvGrouped: product " + std::to_string(i) +
                                  " multiplies silu(x) by a null up");
    }
    if (q.staging != GemvStaging::kPlain && q.staging != GemvStaging::kRmsNorm &&
        q.staging != GemvStaging::kSiluMul) {
      return InvalidArgumentError("LaunchGemvGrouped: product " + std::to_string(i) +
                                  " has an unknown staging");
    }
    if (q.w->format != format) {
      return InvalidArgumentError("LaunchGemvGrouped: product " + std::to_string(i) + " is " +
                                  std::string(WeightFormatName(q.w->format)) + ", product 0 " +
                                  std::string(WeightFormatName(format)) +
                                  "; one launch takes one format");
    }
    bool skip = true;
    OCTET_RETURN_IF_ERROR(
        MakeParams("LaunchGemvGrouped", q.x, m, q.ldx, *q.w, q.y, q.ldy, q.accumulate, &skip)
            .status());
  }
  cudaStream_t cs = stream;
  GemvGroupedParams g{};
  g.staging = n_products > 0 ? products[0].staging : GemvStaging::kPlain;
  int64_t blocks = 0;
  auto flush = [&]() -> Status {
    if (g.n == 0) return Status::Ok();
    g.first_block[g.n] = static_cast<int>(blocks);
    const Status s = format == WeightFormat::kBF16
                         ? ForRows<WeightFormat::kBF16, Grouped>(cs, m, g)
                         : ForRows<WeightFormat::kNvfp4, Grouped>(cs, m, g);
    g.n = 0;
    blocks = 0;
    return s;
  };
  for (int i = 0; i < n_products; ++i) {
    const GemvProduct& q = products[i];
    bool skip = true;
    OCTET_ASSIGN_OR_RETURN(GemvParams p, MakeParams("LaunchGemvGrouped", q.x, m, q.ldx, *q.w, q.y,
                                                    q.ldy, q.accumulate, &skip));
    if (skip) continue;  // nothing to write
    p.aux = q.aux;
    p.norm_eps = q.norm_eps;
    const int64_t b = CeilDiv(p.n, kRowsPerBlock);
    if (g.n == kGroupedProducts || blocks + b > INT32_MAX) OCTET_RETURN_IF_ERROR(flush());
    g.p[g.n] = p;
    g.first_block[g.n] = static_cast<int>(blocks);
    ++g.n;
    blocks += b;
  }
  return flush();
}

Result<DeviceGemvMatrix> MakeDeviceGemvMatrix(const WeightMatrix& w) {
  if (w.rows <= 0 || w.cols <= 0) {
    return InvalidArgumentError("MakeDeviceGemvMatrix: an empty matrix");
  }
  // LaunchGemv's checks, on a one-row product with pointers of the right shape.
  bool skip = true;
  static float dummy;  // only compared with null
  OCTET_ASSIGN_OR_RETURN(const GemvParams p, MakeParams("MakeDeviceGemvMatrix", &dummy, 1, w.cols,
                                                        w, &dummy, w.rows, false, &skip));
  DeviceGemvMatrix m{};
  m.data = p.w;
  m.row_stride = p.w_stride;
  m.scales = p.scales;
  m.scale_row_stride = p.scale_stride;
  m.global_scale = p.global_scale;
  m.rows = p.n;
  m.cols = p.k;
  m.vector_rows = p.vector_rows ? 1 : 0;
  m.nvfp4 = w.format == WeightFormat::kNvfp4 ? 1 : 0;
  return m;
}

Status LaunchGemvRouted(CUstream_st* stream, const GemvRoutedArgs& a) {
  if (a.n_slots == 0) return Status::Ok();
  if (!a.experts || !a.chosen || !a.x || a.num_experts <= 0 || a.n_slots < 0 || a.n_slots > 65535 ||
      a.n_mats < 1 || a.n_mats > 2 || a.x_div < 1 || a.rows <= 0 || !FitsInt(a.rows)) {
    return InvalidArgumentError("LaunchGemvRouted: null tables, no experts, " +
                                std::to_string(a.n_slots) + " slots (1..65535), " +
                                std::to_string(a.n_mats) + " matrices (1 or 2) or " +
                                std::to_string(a.rows) + " rows");
  }
  for (int z = 0; z < a.n_mats; ++z) {
    if (!a.y[z] || a.which[z] < 0 || a.which[z] > 2 || a.ldy < a.rows) {
      return InvalidArgumentError("LaunchGemvRouted: output " + std::to_string(z) +
                                  " null, of matrix " + std::to_string(a.which[z]) +
                                  " (0..2) or with rows " + std::to_string(a.ldy) + " < " +
                                  std::to_string(a.rows) + " apart");
    }
  }
  const dim3 grid(static_cast<unsigned>(CeilDiv(a.rows, kRowsPerBlock)),
                  static_cast<unsigned>(a.n_slots), static_cast<unsigned>(a.n_mats));
  cudaStream_t cs = stream;
  GemvRoutedKernel<<<grid, kThreads, 0, cs>>>(a);
  return CheckLaunch("GemvRoutedKernel");
}

}  // namespace octet::kernels::cuda
