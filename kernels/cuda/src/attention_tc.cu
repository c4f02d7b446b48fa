// Prefill attention on the tensor cores (OCTET_CUDA_PREFILL_ATTENTION=tensor),
// flash-attention style: the scores never leave shared memory.
//
// One block: the same query head, W warps of 16 consecutive query tokens of
// one sequence. For each tile of 64 keys (up to the block's last position)
// the block stages the KV head's keys and values (F16 cache rows, as
// stored) in shared memory; each warp then
//   1. takes S = Q Kᵀ for its 16 rows on the tensor cores (WMMA 16x16x16,
//      half inputs, float accumulation) as Qhi Kᵀ + Qlo Kᵀ: each query row,
//      scaled by the softmax scale and by a power of two that puts its
//      largest element near 2^12, is split into two halves, hi = half(x)
//      and lo = half(x - hi), which carry 22 of its bits; the keys are
//      exact (the cache is half already);
//   2. updates each row's running maximum m and sum l (online softmax, keys
//      after the row's position masked) and forms P = exp(S - m), split the
//      same way into two halves;
//   3. rescales its output rows O (float, in shared memory) by exp(m_old -
//      m_new) and adds Phi V + Plo V on the tensor cores.
// Each row ends as O / l. The products are exact, the sums float: the
// result is the float reference up to float rounding (the split drops
// Qlo·K's and Plo·V's own last bits, about 2^-22 relative).
//
// Positions come from device memory, per query token; a position outside
// 0..n_keys - 1 gives a row of NaN, as the other prefill paths do.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "backend_kernels.h"
#include "cuda_check.h"
#include "device_util.cuh"

namespace octet::kernels::cuda {
namespace {

using namespace nvcuda;

constexpr int kRows = 16;  // query rows per warp (one WMMA tile high)
constexpr int kKeys = 64;  // keys per tile
constexpr int kFrag = 16;  // WMMA tile edge

struct TcArgs {
  const float* q;  // the sequence's first query row
  int64_t q_row_stride;
  float* out;  // the sequence's first output row
  int64_t out_row_stride;
  const __half* k;  // this sequence's cache
  const __half* v;
  int64_t position_stride, head_stride;
  const int32_t* positions;
  int n_tokens;
  int n_keys;
  int group;  // query heads per KV head
  int head_dim;
  float scale;
};

// Per warp: Qhi, Qlo [16][D] half; S [16][64] float; Phi, Plo [16][64] half;
// O [16][D] float. Per block: K, V [64][D] half, then one int (the block's
// last position). Every array starts 32-byte aligned (WMMA's requirement):
// each size is a multiple of 32 bytes for D a multiple of 16.
__host__ __device__ constexpr size_t WarpSmemBytes(int d) {
  return 2 * kRows * d * sizeof(__half) + kRows * kKeys * sizeof(float) +
         2 * kRows * kKeys * sizeof(__half) + kRows * d * sizeof(float);
}
__host__ __device__ constexpr size_t BlockSmemBytes(int d, int warps) {
  return warps * WarpSmemBytes(d) + 2 * kKeys * d * sizeof(__half) + 32;
}

using Accumulator = wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float>;

// acc += (Ahi + Alo) B over `steps` 16-wide steps, on the tensor cores. A:
// 16 rows at a_hi / a_lo, `lda` apart, step k at column 16 k; B: step k's
// 16 x 16 tile at b + k * b_step, `ldb` apart, in `BLayout`.
template <typename BLayout>
__device__ __forceinline__ void AddSplitProduct(Accumulator& acc, const __half* a_hi,
                                                const __half* a_lo, int lda, const __half* b,
                                                int b_step, int ldb, int steps) {
  for (int k = 0; k < steps; ++k) {
    wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, __half, BLayout> fb;
    wmma::load_matrix_sync(fb, b + k * b_step, ldb);
    wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, __half, wmma::row_major> fa;
    wmma::load_matrix_sync(fa, a_hi + k * kFrag, lda);
    wmma::mma_sync(acc, fa, fb, acc);
    wmma::load_matrix_sync(fa, a_lo + k * kFrag, lda);
    wmma::mma_sync(acc, fa, fb, acc);
  }
}

// Grid: x = group of W * 16 query tokens, y = query head.
template <int W>
__global__ void __launch_bounds__(W* kWarpSize) TensorCoreAttentionKernel(TcArgs a) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int d = a.head_dim;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  unsigned char* mine = smem + warp * WarpSmemBytes(d);
  __half* q_hi = reinterpret_cast<__half*>(mine);
  __half* q_lo = q_hi + kRows * d;
  float* s = reinterpret_cast<float*>(q_lo + kRows * d);
  __half* p_hi = reinterpret_cast<__half*>(s + kRows * kKeys);
  __half* p_lo = p_hi + kRows * kKeys;
  float* o = reinterpret_cast<float*>(p_lo + kRows * kKeys);
  __half* k_tile = reinterpret_cast<__half*>(smem + W * WarpSmemBytes(d));
  __half* v_tile = k_tile + kKeys * d;
  int& block_last = *reinterpret_cast<int*>(v_tile + kKeys * d);  // the largest valid position

  const int head = blockIdx.y;
  const int kv_head = head / a.group;
  const int first_row = (blockIdx.x * W + warp) * kRows;
  const __half* k_head = a.k + kv_head * a.head_stride;
  const __half* v_head = a.v + kv_head * a.head_stride;

  // Stage this warp's rows of q (scaled, split) and clear O; each row's
  // position and power-of-two factor go in registers of every lane.
  int pos[kRows];
  float unscale[kRows];  // 1 / the row's power-of-two factor
  int warp_last = -1;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int t = first_row + r;
    int p = -1;
    if (t < a.n_tokens) p = a.positions[t];
    const bool valid = t < a.n_tokens && p >= 0 && p < a.n_keys;
    pos[r] = valid ? p : -1;
    warp_last = max(warp_last, pos[r]);
    const float* row = a.q + static_cast<int64_t>(t) * a.q_row_stride + head * d;
    float big = 0.0f;
    if (valid) {
      for (int c = lane; c < d; c += kWarpSize) big = fmaxf(big, fabsf(row[c] * a.scale));
    }
    big = WarpMax(big);
    // x * 2^(12 - e) with e the exponent of the largest |x|: below 2^13,
    // far inside half's range, and the small values keep their bits.
    const int e = big > 0.0f ? max(ilogbf(big), -110) : 0;  // 2^(12 - e) stays finite
    const float factor = ldexpf(1.0f, 12 - e);
    unscale[r] = ldexpf(1.0f, e - 12);
    for (int c = lane; c < d; c += kWarpSize) {
      const float x = valid ? row[c] * a.scale * factor : 0.0f;
      const __half hi = __float2half_rn(x);
      q_hi[r * d + c] = hi;
      q_lo[r * d + c] = __float2half_rn(x - __half2float(hi));
      o[r * d + c] = 0.0f;
    }
  }
  if (threadIdx.x == 0) block_last = -1;
  __syncthreads();
  if (lane == 0) atomicMax(&block_last, warp_last);
  __syncthreads();
  const int last = block_last;

  float m[kRows], l[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }
  for (int j0 = 0; j0 <= last; j0 += kKeys) {
    // The tile's keys and values; rows past the block's last position zero.
    for (int i = threadIdx.x; i < kKeys * d; i += W * kWarpSize) {
      const int j = j0 + i / d, c = i % d;
      const int64_t at = static_cast<int64_t>(j) * a.position_stride + c;
      const bool in = j <= last;
      k_tile[i] = in ? k_head[at] : __float2half_rn(0.0f);
      v_tile[i] = in ? v_head[at] : __float2half_rn(0.0f);
    }
    __syncthreads();
    if (j0 <= warp_last) {
      // 1. S = Qhi Kᵀ + Qlo Kᵀ, 16 keys at a time. Kᵀ as WMMA's B operand is
      // the keys' rows read column-major.
      for (int n = 0; n < kKeys / kFrag; ++n) {
        Accumulator acc;
        wmma::fill_fragment(acc, 0.0f);
        AddSplitProduct<wmma::col_major>(acc, q_hi, q_lo, d, k_tile + n * kFrag * d, kFrag, d,
                                         d / kFrag);
        wmma::store_matrix_sync(s + n * kFrag, acc, kKeys, wmma::mem_row_major);
      }
      __syncwarp();
      // 2-3. The online softmax, a row at a time across the warp's lanes;
      // P split into halves; O rescaled.
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (pos[r] < j0) {  // no key of this tile (or an invalid row)
          for (int c = lane; c < kKeys; c += kWarpSize) {
            p_hi[r * kKeys + c] = __float2half_rn(0.0f);
            p_lo[r * kKeys + c] = __float2half_rn(0.0f);
          }
          continue;
        }
        float tile_max = -INFINITY;
        for (int c = lane; c < kKeys; c += kWarpSize) {
          if (j0 + c <= pos[r]) tile_max = fmaxf(tile_max, s[r * kKeys + c] * unscale[r]);
        }
        tile_max = WarpMax(tile_max);
        const float m_new = fmaxf(m[r], tile_max);  // finite: key j0 <= pos[r] is in
        const float alpha = expf(m[r] - m_new);     // 0 for the first tile (m = -inf)
        float sum = 0.0f;
        for (int c = lane; c < kKeys; c += kWarpSize) {
          const float p = j0 + c <= pos[r] ? expf(s[r * kKeys + c] * unscale[r] - m_new) : 0.0f;
          sum += p;
          const __half hi = __float2half_rn(p);
          p_hi[r * kKeys + c] = hi;
          p_lo[r * kKeys + c] = __float2half_rn(p - __half2float(hi));
        }
        l[r] = l[r] * alpha + WarpSum(sum);
        m[r] = m_new;
        for (int c = lane; c < d; c += kWarpSize) o[r * d + c] *= alpha;
      }
      __syncwarp();
      // O += Phi V + Plo V, 16 output columns at a time.
      for (int n = 0; n < d / kFrag; ++n) {
        Accumulator acc;
        wmma::load_matrix_sync(acc, o + n * kFrag, d, wmma::mem_row_major);
        AddSplitProduct<wmma::row_major>(acc, p_hi, p_lo, kKeys, v_tile + n * kFrag, kFrag * d, d,
                                         kKeys / kFrag);
        wmma::store_matrix_sync(o + n * kFrag, acc, d, wmma::mem_row_major);
      }
      __syncwarp();
    }
    __syncthreads();  // before the next tile overwrites the keys and values
  }
  // out = O / l; a row whose position is outside 0..n_keys - 1: NaN.
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int t = first_row + r;
    if (t >= a.n_tokens) continue;
    float* dst = a.out + static_cast<int64_t>(t) * a.out_row_stride + head * d;
    const float inv = pos[r] >= 0 ? 1.0f / l[r] : __int_as_float(0x7fc00000);
    for (int c = lane; c < d; c += kWarpSize) dst[c] = o[r * d + c] * inv;
  }
}

template <int W>
Status Launch(cudaStream_t stream, const TcArgs& a, int n_heads) {
  const size_t smem = BlockSmemBytes(a.head_dim, W);
  // Above 48 KiB, dynamic shared memory must be asked for (a host call of a
  // microsecond or so, once per prefill sequence and layer).
  OCTET_RETURN_IF_ERROR(CudaCheck(
      cudaFuncSetAttribute(TensorCoreAttentionKernel<W>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
      "cudaFuncSetAttribute (tensor-core attention, " + std::to_string(smem) +
          " bytes of shared memory)"));
  const int64_t groups = (a.n_tokens + W * kRows - 1) / (W * kRows);
  TensorCoreAttentionKernel<W>
      <<<dim3(static_cast<unsigned>(groups), static_cast<unsigned>(n_heads)), W * kWarpSize, smem,
         stream>>>(a);
  return CheckLaunch("TensorCoreAttentionKernel");
}

}  // namespace

bool TensorCoreAttentionFits(int64_t head_dim) {
  return head_dim > 0 && head_dim % kFrag == 0 && head_dim <= kTensorCoreAttentionMaxHeadDim;
}

Status LaunchTensorCoreAttention(cudaStream_t s, const AttentionArgs& a,
                                 const AttentionSequence& q) {
  if (q.n_tokens <= 0) return Status::Ok();
  if (q.kv_dtype != KvDtype::kF16 || !TensorCoreAttentionFits(a.head_dim) || q.n_keys <= 0) {
    return InvalidArgumentError(
        "LaunchTensorCoreAttention: an F16 cache, n_keys and a head_dim "
        "that is a multiple of 16 up to " +
        std::to_string(kTensorCoreAttentionMaxHeadDim) + " (got " + std::to_string(a.head_dim) +
        ")");
  }
  if (q.n_tokens > INT32_MAX || q.n_keys > INT32_MAX || a.n_heads > 65535) {
    return InvalidArgumentError("LaunchTensorCoreAttention: " + std::to_string(q.n_tokens) +
                                " tokens, " + std::to_string(q.n_keys) + " keys, " +
                                std::to_string(a.n_heads) + " heads");
  }
  const bool packed = q.position_stride == 0 && q.head_stride == 0;
  TcArgs t;
  t.q = a.q + q.first_token * a.q_row_stride;
  t.q_row_stride = a.q_row_stride;
  t.out = a.out + q.first_token * a.out_row_stride;
  t.out_row_stride = a.out_row_stride;
  t.k = static_cast<const __half*>(q.k_cache);
  t.v = static_cast<const __half*>(q.v_cache);
  t.position_stride = packed ? a.n_kv_heads * a.head_dim : q.position_stride;
  t.head_stride = packed ? a.head_dim : q.head_stride;
  t.positions = q.positions;
  t.n_tokens = static_cast<int>(q.n_tokens);
  t.n_keys = static_cast<int>(q.n_keys);
  t.group = static_cast<int>(a.n_heads / a.n_kv_heads);
  t.head_dim = static_cast<int>(a.head_dim);
  t.scale = a.scale;
  // Four warps a block up to head_dim 64, two above: at most 80 KiB of
  // shared memory (GB10 allows 99 KiB a block).
  if (a.head_dim <= 64) return Launch<4>(s, t, static_cast<int>(a.n_heads));
  return Launch<2>(s, t, static_cast<int>(a.n_heads));
}

}  // namespace octet::kernels::cuda
