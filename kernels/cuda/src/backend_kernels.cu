// The CUDA kernels behind CudaBackend's ops that cuda_ops.h does not cover
// (backend_kernels.h): element-wise and row ops, the KV store, the
// conversions of the cuBLAS matmul path, and the general attention kernel
// (prefill and decode, any number of sequences, any KV layout and dtype).
//
// Arithmetic follows the scalar CPU backend (isa_scalar.cpp, cpu_backend.cpp)
// in the same order where that is cheap; results differ from it by the
// summation order of reductions and 1-2 ulp of expf / tanhf. No fast-math.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "backend_kernels.h"
#include "cuda_check.h"
#include "device_util.cuh"
#include "octet/kernels/format_decode.h"

namespace octet::kernels::cuda {
namespace {

constexpr int kFlat = 256;
constexpr int kMaxFlatBlocks = 4096;

unsigned FlatBlocks(int64_t n) {
  const int64_t b = CeilDiv(n, kFlat);
  return static_cast<unsigned>(b < 1 ? 1 : (b > kMaxFlatBlocks ? kMaxFlatBlocks : b));
}
unsigned GridY(int64_t rows) { return static_cast<unsigned>(rows < 65535 ? rows : 65535); }

// ---- element-wise -------------------------------------------------------------

__global__ void FillKernel(float* x, int64_t n, float v) { OCTET_GRID_STRIDE(i, n) x[i] = v; }
__global__ void ScaleKernel(float* x, int64_t n, float s) { OCTET_GRID_STRIDE(i, n) x[i] *= s; }
__global__ void Relu2Kernel(float* x, int64_t n) {
  OCTET_GRID_STRIDE(i, n) {
    const float v = x[i];
    x[i] = v > 0.0f ? v * v : 0.0f;
  }
}
__global__ void SoftCapKernel(float* x, int64_t n, float cap) {
  OCTET_GRID_STRIDE(i, n) x[i] = cap * tanhf(x[i] / cap);
}

// Rows by blockIdx.y (grid-stride), columns by x.
__global__ void AddRowVectorKernel(float* x, int64_t rows, int64_t n, int64_t stride,
                                   const float* v) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    OCTET_GRID_STRIDE(c, n) x[r * stride + c] += v[c];
  }
}

__global__ void GatherRowsKernel(const float* x, int64_t ldx, const int64_t* rows, int64_t n_rows,
                                 int64_t n, float* out) {
  for (int64_t r = blockIdx.y; r < n_rows; r += gridDim.y) {
    const float* src = x + rows[r] * ldx;
    OCTET_GRID_STRIDE(c, n) out[r * n + c] = src[c];
  }
}

// One thread per column walks every row in order: a row named twice gets both
// additions in r order, as in the reference.
__global__ void ScatterAddRowsKernel(const float* x, int64_t ldx, const int64_t* rows,
                                     const float* weights, int64_t n_rows, int64_t n, float* out,
                                     int64_t ldo) {
  OCTET_GRID_STRIDE(c, n) {
    for (int64_t r = 0; r < n_rows; ++r) {
      // A product rounded, then a sum rounded, as the CPU backends compute it
      // (no fused multiply-add): the op is exact against them.
      const float w = weights ? weights[r] : 1.0f;
      float* o = out + rows[r] * ldo + c;
      *o = __fadd_rn(*o, __fmul_rn(w, x[r * ldx + c]));
    }
  }
}

struct ScatterProductsParams {
  ScatterRows p[kScatterProducts];
  int n;
};
static_assert(sizeof(ScatterProductsParams) <= 4096, "kernel parameters above 4 KiB");
__global__ void ScatterAddProductsKernel(const float* x, const ScatterProductsParams g, int64_t n,
                                         float* out, int64_t ldo) {
  OCTET_GRID_STRIDE(c, n) {
    for (int s = 0; s < g.n; ++s) {
      const ScatterRows& p = g.p[s];
      for (int64_t r = 0; r < p.m; ++r) {
        // ScatterAddRowsKernel's expression: the same sums.
        const float w = p.weights ? p.weights[r] : 1.0f;
        float* o = out + p.rows[r] * ldo + c;
        *o = __fadd_rn(*o, __fmul_rn(w, x[(p.x_row + r) * n + c]));
      }
    }
  }
}

// One block per row: max, exp and sum, scale.
constexpr int kRowThreads = 256;
__global__ void __launch_bounds__(kRowThreads) SoftmaxKernel(float* x, int64_t n) {
  __shared__ float scratch[kRowThreads / kWarpSize];
  float* row = x + blockIdx.x * n;
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += kRowThreads) mx = fmaxf(mx, row[i]);
  mx = BlockMax(mx, scratch);
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kRowThreads) {
    const float e = expf(row[i] - mx);
    row[i] = e;
    sum += e;
  }
  sum = BlockSum(sum, scratch);
  const float inv = 1.0f / sum;
  for (int64_t i = threadIdx.x; i < n; i += kRowThreads) row[i] *= inv;
}

struct TableParams {
  WeightFormat format;
  const uint8_t* data;
  int64_t row_stride;
  const uint8_t* scales;
  int64_t scale_stride;
  float global_scale;
  int64_t rows;
  int64_t cols;
};

__device__ __forceinline__ float TableAt(const TableParams& p, int64_t r, int64_t c) {
  const uint8_t* row = p.data + r * p.row_stride;
  switch (p.format) {
    case WeightFormat::kF32:
      return reinterpret_cast<const float*>(row)[c];
    case WeightFormat::kBF16:
      return DecodeBf16(reinterpret_cast<const uint16_t*>(row)[c]);
    case WeightFormat::kF16:
      return DecodeF16(reinterpret_cast<const uint16_t*>(row)[c]);
    default:  // NVFP4, in the reference's order: (E2M1 * scale) * global
      return DecodeE2m1(Nvfp4Code(row, c)) *
             DecodeE4m3(p.scales[r * p.scale_stride + c / kNvfp4BlockSize]) * p.global_scale;
  }
}

TableParams Table(const WeightMatrix& w) {
  TableParams p{};
  p.format = w.format;
  p.data = static_cast<const uint8_t*>(w.data);
  p.row_stride = w.row_stride;
  p.scales = w.scales;
  p.scale_stride = w.scale_row_stride;
  p.global_scale = w.global_scale;
  p.rows = w.rows;
  p.cols = w.cols;
  return p;
}

__global__ void EmbeddingShardKernel(const TableParams p, int64_t first_row, const int32_t* ids,
                                     int64_t n, float* out) {
  for (int64_t i = blockIdx.y; i < n; i += gridDim.y) {
    const int64_t local = static_cast<int64_t>(ids[i]) - first_row;
    float* o = out + i * p.cols;
    const bool mine = local >= 0 && local < p.rows;
    OCTET_GRID_STRIDE(c, p.cols) o[c] = mine ? TableAt(p, local, c) : 0.0f;
  }
}

// One (token, kv head) of one sequence's store, the token's at position
// `pos` (a.first_pos + t, or the step's position of its row): threads over
// head_dim.
__device__ __forceinline__ void KvStoreRow(const KvStoreArgs& a, int64_t t, int64_t h,
                                           int64_t pos) {
  const int64_t dst = h * a.head_stride + pos * a.position_stride;
  const float* ks = a.k + t * a.row_stride + h * a.head_dim;
  const float* vs = a.v + t * a.row_stride + h * a.head_dim;
  for (int64_t c = threadIdx.x; c < a.head_dim; c += blockDim.x) {
    if (a.dtype == KvDtype::kF32) {
      static_cast<float*>(a.k_cache)[dst + c] = ks[c];
      static_cast<float*>(a.v_cache)[dst + c] = vs[c];
    } else {
      // Saturate at the largest finite half (NaN passes through as NaN),
      // then round to nearest even, as F32ToF16 (clamped) does.
      constexpr float kMaxHalf = 65504.0f;
      float kv = ks[c], vv = vs[c];
      kv = kv > kMaxHalf ? kMaxHalf : (kv < -kMaxHalf ? -kMaxHalf : kv);
      vv = vv > kMaxHalf ? kMaxHalf : (vv < -kMaxHalf ? -kMaxHalf : vv);
      static_cast<uint16_t*>(a.k_cache)[dst + c] = __half_as_ushort(__float2half_rn(kv));
      static_cast<uint16_t*>(a.v_cache)[dst + c] = __half_as_ushort(__float2half_rn(vv));
    }
  }
}

// Grid: x = (token, kv head), threads over head_dim.
__global__ void KvStoreKernel(const KvStoreArgs a) {
  const int64_t t = blockIdx.x / a.n_kv_heads;
  KvStoreRow(a, t, blockIdx.x % a.n_kv_heads, a.first_pos + t);
}

// Up to kKvStoreBatch sequences' stores. Grid: x = the (sequence, token, kv
// head) triples, sequence s's from first_block[s] on.
struct KvStoreBatchParams {
  KvStoreArgs a[kKvStoreBatch];
  int64_t first_block[kKvStoreBatch + 1];
  int n;
};
__global__ void KvStoreBatchKernel(const KvStoreBatchParams p) {
  const int64_t b = blockIdx.x;
  int s = 0;
  while (s + 1 < p.n && b >= p.first_block[s + 1]) ++s;
  const KvStoreArgs& a = p.a[s];
  const int64_t local = b - p.first_block[s];
  const int64_t t = local / a.n_kv_heads;
  KvStoreRow(a, t, local % a.n_kv_heads, a.first_pos + t);
}

// ---- QK-norm, RoPE and the KV store: one block per (row, head) --------------

constexpr int kMaxRopeHalf = kQkPrepMaxHeadDim / 2;

struct QkPrepParams {
  float* q;
  float* k;
  int q_heads;
  int k_heads;
  int head_dim;
  int half;  // rotary_dim / 2
  const int32_t* positions;
  const float* inv_freq;
  int norm;  // 0 none, 1 before RoPE, 2 after
  const float* q_norm;
  const float* k_norm;
  float eps;
  KvStoreArgs stores[kKvStoreBatch];
  int64_t first_row[kKvStoreBatch];
  int n_stores;
  int store_at_positions;  // 1: row r's position is positions[r], not first_pos + t
};
static_assert(sizeof(QkPrepParams) <= 4096, "kernel parameters above 4 KiB");

// RmsNormKernel's arithmetic (elementwise.cu) on the head in shared memory,
// in place.
__device__ __forceinline__ void NormHead(float* head, const float* weight, int dim, float eps,
                                         float* scratch) {
  const float inv = BlockInvRms(head, dim, eps, scratch);
  for (int i = threadIdx.x; i < dim; i += kNormThreads)
    head[i] = NormScaled(head[i], inv, weight, i);
  __syncthreads();
}

__global__ void __launch_bounds__(kNormThreads) QkPrepKernel(const QkPrepParams p) {
  __shared__ float scratch[kNormThreads / kWarpSize];
  __shared__ float cs[kMaxRopeHalf];
  __shared__ float sn[kMaxRopeHalf];
  __shared__ float head[kQkPrepMaxHeadDim];
  const int heads = p.q_heads + p.k_heads;
  const int64_t row = blockIdx.x / heads;
  const int h = static_cast<int>(blockIdx.x % heads);
  const bool is_q = h < p.q_heads;
  float* v = is_q ? p.q + (row * p.q_heads + h) * p.head_dim
                  : p.k + (row * p.k_heads + (h - p.q_heads)) * p.head_dim;
  const float* weight = is_q ? p.q_norm : p.k_norm;
  const int d = p.head_dim;
  for (int i = threadIdx.x; i < d; i += kNormThreads) head[i] = v[i];
  // float32 angle, as RopeKernel.
  const float pos = static_cast<float>(p.positions[row]);
  for (int i = threadIdx.x; i < p.half; i += kNormThreads) {
    sincosf(pos * p.inv_freq[i], &sn[i], &cs[i]);
  }
  __syncthreads();
  if (p.norm == 1) NormHead(head, weight, d, p.eps, scratch);
  for (int i = threadIdx.x; i < p.half; i += kNormThreads) {
    const float a = head[i];
    const float b = head[i + p.half];
    RotatePair(a, b, cs[i], sn[i], &head[i], &head[i + p.half]);
  }
  __syncthreads();
  if (p.norm == 2) NormHead(head, weight, d, p.eps, scratch);
  for (int i = threadIdx.x; i < d; i += kNormThreads) v[i] = head[i];
  if (is_q) return;
  // The key just written (visible to this block after the barrier) and the
  // value into the row's sequence's cache, as KvStoreBatchKernel.
  __syncthreads();
  for (int s = 0; s < p.n_stores; ++s) {
    const KvStoreArgs& a = p.stores[s];
    const int64_t t = row - p.first_row[s];
    if (t >= 0 && t < a.n) {
      // A negative position (a replayed step's, from device memory) would
      // write before the cache: store nothing, as KvStore refuses it.
      const int64_t pos = p.store_at_positions ? p.positions[row] : a.first_pos + t;
      if (pos >= 0) KvStoreRow(a, t, h - p.q_heads, pos);
      break;
    }
  }
}

// ---- matmul helpers -----------------------------------------------------------

// Round to nearest even (NaN stays a quiet NaN), as F32ToBf16.
__device__ __forceinline__ uint16_t ToBf16(float f) {
  const uint32_t bits = __float_as_uint(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

__global__ void SplitBf16Kernel(const float* x, int64_t m, int64_t ldx, int64_t k, uint16_t* out,
                                bool split) {
  for (int64_t r = blockIdx.y; r < m; r += gridDim.y) {
    OCTET_GRID_STRIDE(c, k) {
      const float v = x[r * ldx + c];
      const uint16_t hi = ToBf16(v);
      out[r * k + c] = hi;
      if (split) out[(m + r) * k + c] = ToBf16(v - DecodeBf16(hi));
    }
  }
}

__global__ void CombineRowsKernel(const float* t, int64_t m, int64_t n, bool pair, float* y,
                                  int64_t ldy, bool accumulate) {
  for (int64_t r = blockIdx.y; r < m; r += gridDim.y) {
    OCTET_GRID_STRIDE(c, n) {
      float v = t[r * n + c];
      if (pair) v += t[(m + r) * n + c];
      float* o = y + r * ldy + c;
      *o = accumulate ? *o + v : v;
    }
  }
}

__global__ void DequantNvfp4Kernel(const TableParams p, int64_t row0, int64_t rows, uint16_t* out,
                                   int64_t ld) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const int64_t src = row0 + r;
    const uint8_t* row = p.data + src * p.row_stride;
    OCTET_GRID_STRIDE(c, p.cols) {
      // E2M1 (<= 2 significant bits) x E4M3 (4) is exact in BF16 (8).
      const float v =
          DecodeE2m1(Nvfp4Code(row, c)) * DecodeE4m3(p.scales[src * p.scale_stride + c / 16]);
      out[r * ld + c] = ToBf16(v);
    }
  }
}

__global__ void WidenRowsKernel(const TableParams p, int64_t row0, int64_t rows, float* out,
                                int64_t ld) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    OCTET_GRID_STRIDE(c, p.cols) out[r * ld + c] = TableAt(p, row0 + r, c);
  }
}

// ---- attention ------------------------------------------------------------------
//
// One block per (query token, KV head [and slice of its query heads], split
// of the keys). The block walks its keys in chunks of kChunk with an online
// softmax (running maximum and sum per head, the output rescaled when the
// maximum grows):
//   scores: each warp takes keys of the chunk, its lanes split head_dim (so a
//           key row is read coalesced whatever its layout), q from shared
//           memory, a warp sum per query head;
//   update: warp w updates heads w, w+4, ...: the chunk's maximum, p = exp(s - m),
//           their sum, the correction exp(m_old - m_new);
//   values: thread d owns output features d and d + 128 for every head, and
//           adds p_j * v_j[d] over the chunk's keys (coalesced over d).
// The split a block takes is computed on the device from the token's
// position, so the host needs no key count: keys 0..pos are cut into
// `splits` parts of at least kMinSplitKeys keys; a part past the end is
// empty. With one split the block writes the normalised output; otherwise
// (max, sum, unnormalised output) go to the workspace and a combine kernel
// merges them. A token whose position is negative gets NaN.
constexpr int kAttnThreads = 128;
constexpr int kAttnWarps = kAttnThreads / kWarpSize;
constexpr int kChunk = 64;
constexpr int kMinSplitKeys = 64;
constexpr int kMaxD = kGeneralAttentionMaxHeadDim;
constexpr int kDPerThread = kMaxD / kAttnThreads;

__device__ __forceinline__ float KvAt(const void* base, bool f16, int64_t i) {
  return f16 ? DecodeF16(static_cast<const uint16_t*>(base)[i])
             : static_cast<const float*>(base)[i];
}

template <int H>
__global__ void __launch_bounds__(kAttnThreads)
    GeneralAttentionKernel(const GeneralAttentionArgs a) {
  __shared__ float q_s[H][kMaxD];
  __shared__ float p_s[H][kChunk];
  __shared__ float m_s[H], l_s[H], corr_s[H];

  const AttnItem item = a.inline_table ? a.inline_items[blockIdx.x] : a.items[blockIdx.x];
  const AttnSeqDesc sd = a.inline_table ? a.inline_seqs[item.seq] : a.seqs[item.seq];
  const int group = a.n_heads / a.n_kv_heads;
  const int batches = (group + H - 1) / H;
  const int kvh = blockIdx.y / batches;
  const int first = (blockIdx.y % batches) * H;
  const int nh = min(H, group - first);
  const int head0 = kvh * group + first;
  const int D = a.head_dim;
  const int split = blockIdx.z;
  const int splits = gridDim.z;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int64_t row = sd.first_token + item.token;
  const int pos = sd.positions[item.token];
  const int64_t n_keys = pos >= 0 ? static_cast<int64_t>(pos) + 1 : 0;
  int64_t per = (n_keys + splits - 1) / splits;
  per = per < kMinSplitKeys ? kMinSplitKeys : per;
  const int64_t k0 = split * per;
  const int64_t k1 = min(k0 + per, n_keys);
  const bool f16 = sd.f16 != 0;
  const int64_t head_off = static_cast<int64_t>(kvh) * sd.head_stride;

  for (int i = threadIdx.x; i < nh * D; i += kAttnThreads) {
    const int h = i / D, d = i % D;
    q_s[h][d] = a.q[row * a.q_row_stride + static_cast<int64_t>(head0 + h) * D + d];
  }
  if (threadIdx.x < H) {
    m_s[threadIdx.x] = -INFINITY;
    l_s[threadIdx.x] = 0.0f;
  }
  float o[H][kDPerThread];
#pragma unroll
  for (int h = 0; h < H; ++h) {
#pragma unroll
    for (int i = 0; i < kDPerThread; ++i) o[h][i] = 0.0f;
  }
  __syncthreads();

  for (int64_t c0 = k0; c0 < k1; c0 += kChunk) {
    const int cn = static_cast<int>(min(static_cast<int64_t>(kChunk), k1 - c0));
    // Scores.
    for (int j = warp; j < cn; j += kAttnWarps) {
      const int64_t kb = head_off + (c0 + j) * sd.position_stride;
      float dot[H];
#pragma unroll
      for (int h = 0; h < H; ++h) dot[h] = 0.0f;
      for (int d = lane; d < D; d += kWarpSize) {
        const float kv = KvAt(sd.k, f16, kb + d);
#pragma unroll
        for (int h = 0; h < H; ++h) {
          if (h < nh) dot[h] = fmaf(q_s[h][d], kv, dot[h]);
        }
      }
#pragma unroll
      for (int h = 0; h < H; ++h) {
        if (h < nh) {
          const float s = WarpSum(dot[h]);
          if (lane == 0) p_s[h][j] = s * a.scale;
        }
      }
    }
    __syncthreads();
    // Online softmax update, one warp per head.
    for (int h = warp; h < nh; h += kAttnWarps) {
      const float s0 = lane < cn ? p_s[h][lane] : -INFINITY;
      const float s1 = lane + kWarpSize < cn ? p_s[h][lane + kWarpSize] : -INFINITY;
      const float m_old = m_s[h];
      const float m_new = fmaxf(m_old, WarpMax(fmaxf(s0, s1)));
      const float e0 = lane < cn ? expf(s0 - m_new) : 0.0f;
      const float e1 = lane + kWarpSize < cn ? expf(s1 - m_new) : 0.0f;
      if (lane < cn) p_s[h][lane] = e0;
      if (lane + kWarpSize < cn) p_s[h][lane + kWarpSize] = e1;
      const float sum = WarpSum(e0 + e1);
      if (lane == 0) {
        const float corr = expf(m_old - m_new);  // 0 on the first chunk
        l_s[h] = l_s[h] * corr + sum;
        m_s[h] = m_new;
        corr_s[h] = corr;
      }
    }
    __syncthreads();
    // Values.
#pragma unroll
    for (int i = 0; i < kDPerThread; ++i) {
      const int d = threadIdx.x + i * kAttnThreads;
      if (d < D) {
#pragma unroll
        for (int h = 0; h < H; ++h) o[h][i] *= corr_s[h];
        for (int j = 0; j < cn; ++j) {
          const float vv = KvAt(sd.v, f16, head_off + (c0 + j) * sd.position_stride + d);
#pragma unroll
          for (int h = 0; h < H; ++h) o[h][i] = fmaf(p_s[h][j], vv, o[h][i]);
        }
      }
    }
    __syncthreads();  // p_s and corr_s are rewritten by the next chunk
  }

  if (splits == 1) {
#pragma unroll
    for (int h = 0; h < H; ++h) {
      if (h >= nh) break;
      const float l = l_s[h];
      float* out = a.out + row * a.out_row_stride + static_cast<int64_t>(head0 + h) * D;
#pragma unroll
      for (int i = 0; i < kDPerThread; ++i) {
        const int d = threadIdx.x + i * kAttnThreads;
        if (d < D) out[d] = n_keys > 0 ? o[h][i] / l : __int_as_float(0x7fc00000);
      }
    }
    return;
  }
  // Partials: o [items][n_heads][splits][D], then m and l [items][n_heads][splits].
  const int64_t partials = a.n_items * a.n_heads * splits;
  float* part_o = a.workspace;
  float* part_m = part_o + partials * D;
  float* part_l = part_m + partials;
#pragma unroll
  for (int h = 0; h < H; ++h) {
    if (h >= nh) break;
    const int64_t idx = (blockIdx.x * static_cast<int64_t>(a.n_heads) + head0 + h) * splits + split;
#pragma unroll
    for (int i = 0; i < kDPerThread; ++i) {
      const int d = threadIdx.x + i * kAttnThreads;
      if (d < D) part_o[idx * D + d] = o[h][i];
    }
    if (threadIdx.x == 0) {
      part_m[idx] = m_s[h];
      part_l[idx] = l_s[h];
    }
  }
}

// One block per (item, query head): out = Σ e^(m_i - M) o_i / Σ e^(m_i - M) l_i.
__global__ void __launch_bounds__(kAttnThreads)
    GeneralAttentionCombineKernel(const GeneralAttentionArgs a, int splits) {
  const int64_t item = blockIdx.x;
  const int head = blockIdx.y;
  const int D = a.head_dim;
  const AttnItem it = a.inline_table ? a.inline_items[item] : a.items[item];
  const AttnSeqDesc sd = a.inline_table ? a.inline_seqs[it.seq] : a.seqs[it.seq];
  const int64_t row = sd.first_token + it.token;
  float* out = a.out + row * a.out_row_stride + static_cast<int64_t>(head) * D;
  const int64_t partials = a.n_items * a.n_heads * splits;
  const float* part_o = a.workspace;
  const float* part_m = part_o + partials * D;
  const float* part_l = part_m + partials;
  const int64_t base = (item * a.n_heads + head) * splits;
  float big = -INFINITY;
  for (int i = 0; i < splits; ++i) big = fmaxf(big, part_m[base + i]);
  if (big == -INFINITY) {  // no keys (a negative position)
    for (int d = threadIdx.x; d < D; d += kAttnThreads) out[d] = __int_as_float(0x7fc00000);
    return;
  }
  float denom = 0.0f;
  for (int i = 0; i < splits; ++i) {
    if (part_m[base + i] != -INFINITY) denom += expf(part_m[base + i] - big) * part_l[base + i];
  }
  const float inv = 1.0f / denom;
  for (int d = threadIdx.x; d < D; d += kAttnThreads) {
    float acc = 0.0f;
    for (int i = 0; i < splits; ++i) {
      if (part_m[base + i] != -INFINITY) {
        acc = fmaf(expf(part_m[base + i] - big), part_o[(base + i) * D + d], acc);
      }
    }
    out[d] = acc * inv;
  }
}

template <int H>
Status LaunchAttentionH(cudaStream_t s, dim3 grid, const GeneralAttentionArgs& a) {
  GeneralAttentionKernel<H><<<grid, kAttnThreads, 0, s>>>(a);
  return CheckLaunch("GeneralAttentionKernel");
}

}  // namespace

Status LaunchFill(cudaStream_t s, float* x, int64_t n, float value) {
  if (n <= 0) return Status::Ok();
  FillKernel<<<FlatBlocks(n), kFlat, 0, s>>>(x, n, value);
  return CheckLaunch("FillKernel");
}

Status LaunchScale(cudaStream_t s, float* x, int64_t n, float factor) {
  if (n <= 0) return Status::Ok();
  ScaleKernel<<<FlatBlocks(n), kFlat, 0, s>>>(x, n, factor);
  return CheckLaunch("ScaleKernel");
}

Status LaunchRelu2(cudaStream_t s, float* x, int64_t n) {
  if (n <= 0) return Status::Ok();
  Relu2Kernel<<<FlatBlocks(n), kFlat, 0, s>>>(x, n);
  return CheckLaunch("Relu2Kernel");
}

Status LaunchSoftCap(cudaStream_t s, float* x, int64_t n, float cap) {
  if (n <= 0) return Status::Ok();
  SoftCapKernel<<<FlatBlocks(n), kFlat, 0, s>>>(x, n, cap);
  return CheckLaunch("SoftCapKernel");
}

Status LaunchAddRowVector(cudaStream_t s, float* x, int64_t rows, int64_t n, int64_t stride,
                          const float* v) {
  if (rows <= 0 || n <= 0) return Status::Ok();
  AddRowVectorKernel<<<dim3(FlatBlocks(n), GridY(rows)), kFlat, 0, s>>>(x, rows, n, stride, v);
  return CheckLaunch("AddRowVectorKernel");
}

Status LaunchSoftmax(cudaStream_t s, float* x, int64_t rows, int64_t n) {
  if (rows <= 0 || n <= 0) return Status::Ok();
  if (rows > INT32_MAX) return InvalidArgumentError("Softmax: more than 2^31 rows");
  SoftmaxKernel<<<static_cast<unsigned>(rows), kRowThreads, 0, s>>>(x, n);
  return CheckLaunch("SoftmaxKernel");
}

Status LaunchGatherRows(cudaStream_t s, const float* x, int64_t ldx, const int64_t* rows,
                        int64_t n_rows, int64_t n, float* out) {
  if (n_rows <= 0 || n <= 0) return Status::Ok();
  GatherRowsKernel<<<dim3(FlatBlocks(n), GridY(n_rows)), kFlat, 0, s>>>(x, ldx, rows, n_rows, n,
                                                                        out);
  return CheckLaunch("GatherRowsKernel");
}

Status LaunchScatterAddRows(cudaStream_t s, const float* x, int64_t ldx, const int64_t* rows,
                            const float* weights, int64_t n_rows, int64_t n, float* out,
                            int64_t ldo) {
  if (n_rows <= 0 || n <= 0) return Status::Ok();
  // Small blocks: the parallelism is the columns only.
  constexpr int kThreads = 64;
  const int64_t blocks = CeilDiv(n, kThreads);
  ScatterAddRowsKernel<<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), kThreads, 0, s>>>(
      x, ldx, rows, weights, n_rows, n, out, ldo);
  return CheckLaunch("ScatterAddRowsKernel");
}

Status LaunchScatterAddProducts(cudaStream_t s, const float* x, const ScatterRows* products,
                                int64_t n_products, int64_t n, float* out, int64_t ldo) {
  if (n_products <= 0 || n <= 0) return Status::Ok();
  if (!x || !out || !products || ldo < n) {
    return InvalidArgumentError("ScatterAddProducts: null pointer or an out row shorter than n");
  }
  constexpr int kThreads = 64;  // as LaunchScatterAddRows
  const int64_t blocks = CeilDiv(n, kThreads);
  for (int64_t i = 0; i < n_products; ++i) {  // all checked before anything is queued
    const ScatterRows& p = products[i];
    if (p.m < 0 || p.x_row < 0 || (p.m > 0 && !p.rows)) {
      return InvalidArgumentError("ScatterAddProducts: product " + std::to_string(i) +
                                  " with negative rows or without its row list");
    }
  }
  ScatterProductsParams g{};
  auto flush = [&]() -> Status {
    if (g.n == 0) return Status::Ok();
    ScatterAddProductsKernel<<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), kThreads, 0,
                               s>>>(x, g, n, out, ldo);
    g.n = 0;
    return CheckLaunch("ScatterAddProductsKernel");
  };
  for (int64_t i = 0; i < n_products; ++i) {
    if (products[i].m == 0) continue;
    if (g.n == kScatterProducts) OCTET_RETURN_IF_ERROR(flush());
    g.p[g.n++] = products[i];
  }
  return flush();
}

Status LaunchEmbeddingShard(cudaStream_t s, const WeightMatrix& table, int64_t first_row,
                            const int32_t* ids, int64_t n, float* out) {
  if (n <= 0 || table.cols <= 0) return Status::Ok();
  EmbeddingShardKernel<<<dim3(FlatBlocks(table.cols), GridY(n)), kFlat, 0, s>>>(
      Table(table), first_row, ids, n, out);
  return CheckLaunch("EmbeddingShardKernel");
}

Status LaunchKvStore(cudaStream_t s, const KvStoreArgs& a) {
  if (a.n <= 0 || a.n_kv_heads <= 0 || a.head_dim <= 0) return Status::Ok();
  const int64_t blocks = a.n * a.n_kv_heads;
  if (blocks > INT32_MAX) return InvalidArgumentError("KvStore: too many rows");
  const int threads = a.head_dim >= 128 ? 128 : (a.head_dim >= 64 ? 64 : 32);
  KvStoreKernel<<<static_cast<unsigned>(blocks), threads, 0, s>>>(a);
  return CheckLaunch("KvStoreKernel");
}

Status LaunchKvStoreBatch(cudaStream_t s, const KvStoreArgs* args, int64_t n) {
  for (int64_t i0 = 0; i0 < n; i0 += kKvStoreBatch) {
    KvStoreBatchParams p{};
    int64_t blocks = 0;
    int head_dim = 0;
    for (int64_t i = i0; i < n && i < i0 + kKvStoreBatch; ++i) {
      const KvStoreArgs& a = args[i];
      if (a.n <= 0 || a.n_kv_heads <= 0 || a.head_dim <= 0) continue;  // nothing to store
      p.a[p.n] = a;
      p.first_block[p.n] = blocks;
      ++p.n;
      blocks += a.n * a.n_kv_heads;
      head_dim = a.head_dim > head_dim ? static_cast<int>(a.head_dim) : head_dim;
    }
    if (p.n == 0) continue;
    p.first_block[p.n] = blocks;
    if (blocks > INT32_MAX) return InvalidArgumentError("KvStoreBatch: too many rows");
    const int threads = head_dim >= 128 ? 128 : (head_dim >= 64 ? 64 : 32);
    KvStoreBatchKernel<<<static_cast<unsigned>(blocks), threads, 0, s>>>(p);
    OCTET_RETURN_IF_ERROR(CheckLaunch("KvStoreBatchKernel"));
  }
  return Status::Ok();
}

// ---- prefill attention through GEMMs: the steps between them ---------------

namespace {

__global__ void WidenKvRowsKernel(const uint16_t* src, int64_t n, int64_t head_dim,
                                  int64_t position_stride, float* dst) {
  for (int64_t p = blockIdx.y; p < n; p += gridDim.y) {
    OCTET_GRID_STRIDE(d, head_dim) dst[p * head_dim + d] = DecodeF16(src[p * position_stride + d]);
  }
}

// Grid: x = token, y = head; threads over the row's keys.
__global__ void __launch_bounds__(kNormThreads)
    CausalSoftmaxKernel(float* scores, int64_t tokens, int64_t n_keys, const int32_t* positions) {
  __shared__ float scratch[kNormThreads / kWarpSize];
  float* row = scores + (blockIdx.y * tokens + blockIdx.x) * n_keys;
  const int64_t pos = positions[blockIdx.x];
  if (pos < 0 || pos >= n_keys) {
    for (int64_t j = threadIdx.x; j < n_keys; j += kNormThreads) {
      row[j] = __int_as_float(0x7fc00000);
    }
    return;
  }
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j <= pos; j += kNormThreads) m = fmaxf(m, row[j]);
  m = BlockMax(m, scratch);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j <= pos; j += kNormThreads) sum += expf(row[j] - m);
  const float inv = 1.0f / BlockSum(sum, scratch);
  for (int64_t j = threadIdx.x; j < n_keys; j += kNormThreads) {
    row[j] = j <= pos ? expf(row[j] - m) * inv : 0.0f;
  }
}

}  // namespace

Status LaunchWidenKvRows(cudaStream_t s, const uint16_t* src, int64_t n, int64_t head_dim,
                         int64_t position_stride, float* dst) {
  if (n <= 0 || head_dim <= 0) return Status::Ok();
  WidenKvRowsKernel<<<dim3(FlatBlocks(head_dim), GridY(n)), kFlat, 0, s>>>(src, n, head_dim,
                                                                           position_stride, dst);
  return CheckLaunch("WidenKvRowsKernel");
}

Status LaunchCausalSoftmax(cudaStream_t s, float* scores, int64_t heads, int64_t tokens,
                           int64_t n_keys, const int32_t* positions) {
  if (heads <= 0 || tokens <= 0 || n_keys <= 0) return Status::Ok();
  if (heads > 65535 || tokens > INT32_MAX) {
    return InvalidArgumentError("LaunchCausalSoftmax: " + std::to_string(heads) + " heads of " +
                                std::to_string(tokens) + " tokens (at most 65535 and 2^31 - 1)");
  }
  CausalSoftmaxKernel<<<dim3(static_cast<unsigned>(tokens), static_cast<unsigned>(heads)),
                        kNormThreads, 0, s>>>(scores, tokens, n_keys, positions);
  return CheckLaunch("CausalSoftmaxKernel");
}

Status LaunchQkPrep(cudaStream_t s, const KernelBackend::QkPrepArgs& a, const int64_t* first_row,
                    bool store_at_positions) {
  const int64_t heads = a.q_heads + a.k_heads;
  if (a.rows < 0 || a.q_heads < 0 || a.k_heads < 0 || a.head_dim < 0 ||
      a.head_dim > kQkPrepMaxHeadDim || a.rotary_dim < 0 || a.rotary_dim % 2 != 0 ||
      a.rotary_dim > a.head_dim || !FitsInt(heads) ||
      (heads > 0 && a.rows > (int64_t{1} << 31) / heads - 1)) {
    return InvalidArgumentError("LaunchQkPrep: " + std::to_string(a.rows) + " rows of " +
                                std::to_string(a.q_heads) + " + " + std::to_string(a.k_heads) +
                                " heads of " + std::to_string(a.head_dim) +
                                " features, rotary_dim " + std::to_string(a.rotary_dim) +
                                ": head_dim at most " + std::to_string(kQkPrepMaxHeadDim) +
                                ", rotary_dim even and at most head_dim, rows x heads under 2^31");
  }
  const int64_t n_stores = first_row ? a.n_stores : 0;
  if (n_stores < 0 || n_stores > kKvStoreBatch || (n_stores > 0 && !a.stores)) {
    return InvalidArgumentError("LaunchQkPrep: " + std::to_string(n_stores) + " stores (at most " +
                                std::to_string(kKvStoreBatch) + ") or a null store list");
  }
  const int64_t kvd = a.k_heads * a.head_dim;
  for (int64_t i = 0; i < n_stores; ++i) {
    const KvStoreArgs& st = a.stores[i];
    const int64_t r = first_row[i];
    if (st.n < 0 || r < 0 || r + st.n > a.rows || st.row_stride != kvd ||
        st.n_kv_heads != a.k_heads || st.head_dim != a.head_dim ||
        (st.n > 0 && st.k != a.k + r * kvd) ||
        (st.n > 0 && (!st.v || !st.k_cache || !st.v_cache || st.first_pos < 0)) ||
        (st.dtype != KvDtype::kF32 && st.dtype != KvDtype::kF16)) {
      return InvalidArgumentError("LaunchQkPrep: store " + std::to_string(i) + " is not rows [" +
                                  std::to_string(r) + ", " + std::to_string(r + st.n) +
                                  ") of this call's keys, or lacks a "
                                  "value or cache pointer, or starts before position 0, or has "
                                  "an unknown dtype");
    }
  }
  if (a.rows == 0 || heads == 0 || a.head_dim == 0) return Status::Ok();
  if ((a.q_heads > 0 && !a.q) || (a.k_heads > 0 && !a.k) || !a.positions ||
      (a.rotary_dim > 0 && !a.inv_freq)) {
    return InvalidArgumentError("LaunchQkPrep: null q, k, positions or inv_freq");
  }
  QkPrepParams k{};
  k.q = a.q;
  k.k = a.k;
  k.q_heads = static_cast<int>(a.q_heads);
  k.k_heads = static_cast<int>(a.k_heads);
  k.head_dim = static_cast<int>(a.head_dim);
  k.half = static_cast<int>(a.rotary_dim / 2);
  k.positions = a.positions;
  k.inv_freq = a.inv_freq;
  k.norm = a.qk_norm ? (a.norm_after_rope ? 2 : 1) : 0;
  k.q_norm = a.q_norm;
  k.k_norm = a.k_norm;
  k.eps = a.eps;
  k.n_stores = static_cast<int>(n_stores);
  k.store_at_positions = store_at_positions ? 1 : 0;
  for (int64_t i = 0; i < n_stores; ++i) {
    k.stores[i] = a.stores[i];
    k.first_row[i] = first_row[i];
  }
  QkPrepKernel<<<static_cast<unsigned>(a.rows * heads), kNormThreads, 0, s>>>(k);
  return CheckLaunch("QkPrepKernel");
}

Status LaunchSplitBf16(cudaStream_t s, const float* x, int64_t m, int64_t ldx, int64_t k,
                       uint16_t* out) {
  if (m <= 0 || k <= 0) return Status::Ok();
  SplitBf16Kernel<<<dim3(FlatBlocks(k), GridY(m)), kFlat, 0, s>>>(x, m, ldx, k, out, true);
  return CheckLaunch("SplitBf16Kernel");
}

Status LaunchToBf16(cudaStream_t s, const float* x, int64_t m, int64_t ldx, int64_t k,
                    uint16_t* out) {
  if (m <= 0 || k <= 0) return Status::Ok();
  SplitBf16Kernel<<<dim3(FlatBlocks(k), GridY(m)), kFlat, 0, s>>>(x, m, ldx, k, out, false);
  return CheckLaunch("SplitBf16Kernel");
}

Status LaunchCombineRows(cudaStream_t s, const float* t, int64_t m, int64_t n, bool pair, float* y,
                         int64_t ldy, bool accumulate) {
  if (m <= 0 || n <= 0) return Status::Ok();
  CombineRowsKernel<<<dim3(FlatBlocks(n), GridY(m)), kFlat, 0, s>>>(t, m, n, pair, y, ldy,
                                                                    accumulate);
  return CheckLaunch("CombineRowsKernel");
}

Status LaunchDequantNvfp4ToBf16(cudaStream_t s, const WeightMatrix& w, int64_t row0, int64_t rows,
                                uint16_t* out, int64_t ld) {
  if (rows <= 0 || w.cols <= 0) return Status::Ok();
  DequantNvfp4Kernel<<<dim3(FlatBlocks(w.cols), GridY(rows)), kFlat, 0, s>>>(Table(w), row0, rows,
                                                                             out, ld);
  return CheckLaunch("DequantNvfp4Kernel");
}

Status LaunchWidenRows(cudaStream_t s, const WeightMatrix& w, int64_t row0, int64_t rows,
                       float* out, int64_t ld) {
  if (rows <= 0 || w.cols <= 0) return Status::Ok();
  WidenRowsKernel<<<dim3(FlatBlocks(w.cols), GridY(rows)), kFlat, 0, s>>>(Table(w), row0, rows, out,
                                                                          ld);
  return CheckLaunch("WidenRowsKernel");
}

int64_t GeneralAttentionWorkspaceFloats(int64_t n_items, int64_t n_heads, int64_t head_dim,
                                        int64_t splits) {
  return splits <= 1 ? 0 : n_items * n_heads * splits * (head_dim + 2);
}

int GeneralAttentionHeadsPerBlock(int64_t group) {
  return group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : 8;
}

Status LaunchGeneralAttention(cudaStream_t s, const GeneralAttentionArgs& a) {
  if (a.n_items <= 0) return Status::Ok();
  const int64_t group = a.n_heads / a.n_kv_heads;
  const int heads = GeneralAttentionHeadsPerBlock(group);
  const int64_t batches = CeilDiv(group, heads);
  if (a.inline_table && a.n_items > kInlineAttnItems) {
    return InvalidArgumentError("Attention: an inline table of more than " +
                                std::to_string(kInlineAttnItems) + " query tokens");
  }
  if (a.n_items > INT32_MAX || a.n_kv_heads * batches > 65535 || a.splits < 1 ||
      a.splits > kGeneralAttentionMaxSplits || a.head_dim < 1 ||
      a.head_dim > kGeneralAttentionMaxHeadDim) {
    return InvalidArgumentError("Attention: grid or head_dim out of range");
  }
  const dim3 grid(static_cast<unsigned>(a.n_items), static_cast<unsigned>(a.n_kv_heads * batches),
                  static_cast<unsigned>(a.splits));
  switch (heads) {
    case 1:
      OCTET_RETURN_IF_ERROR(LaunchAttentionH<1>(s, grid, a));
      break;
    case 2:
      OCTET_RETURN_IF_ERROR(LaunchAttentionH<2>(s, grid, a));
      break;
    case 4:
      OCTET_RETURN_IF_ERROR(LaunchAttentionH<4>(s, grid, a));
      break;
    default:
      OCTET_RETURN_IF_ERROR(LaunchAttentionH<8>(s, grid, a));
      break;
  }
  if (a.splits == 1) return Status::Ok();
  GeneralAttentionCombineKernel<<<dim3(static_cast<unsigned>(a.n_items),
                                       static_cast<unsigned>(a.n_heads)),
                                  kAttnThreads, 0, s>>>(a, a.splits);
  return CheckLaunch("GeneralAttentionCombineKernel");
}

}  // namespace octet::kernels::cuda
