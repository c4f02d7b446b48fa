// Decode attention (one query row per sequence) over head-major KV caches in
// float32 or IEEE half, flash-decoding style.
//
// Split kernel: one block per (split of keys, KV head [and slice of its query
// heads], sequence). The block reads its keys and values once for all the
// query heads that share the KV head (grouped-query attention: a group of 8
// heads costs the same cache traffic as one), in three phases:
//   1. scores: one key per thread, s = scale * q·k over head_dim with 16-byte
//      loads of the key row, q broadcast from shared memory; kept in shared
//      memory with the split's maximum per head;
//   2. p = exp(s - max), and their sum per head;
//   3. values: the block's threads tile a value row (head_dim / V lanes of V
//      elements, V = 16 bytes' worth) and take kThreads / (head_dim / V) keys
//      at a time; the per-lane sums are added across those key lanes in
//      shared memory.
// Each writes (max, sum, unnormalised output) per query head to the
// workspace. A split past the sequence's last key writes an empty partial
// (max -inf, sum 0), which the combine skips.
// Combine kernel: one block per (query head, sequence) merges the splits:
// out = Σ e^(m_i - M) o_i / Σ e^(m_i - M) l_i, M the largest m_i.
//
// The result equals the CPU reference's softmax(scale · q Kᵀ) V up to float
// rounding of the split-wise maxima and the summation order.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "cuda_check.h"
#include "device_util.cuh"
#include "octet/kernels/cuda/cuda_ops.h"
#include "octet/kernels/format_decode.h"

namespace octet::kernels::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxHeads = 8;  // query heads per block (a larger group takes several blocks)
constexpr int kMaxHeadDim = 256;
constexpr int kMaxChunk = static_cast<int>(kMaxKeysPerSplit);
constexpr int kCombineThreads = 128;

// 16 bytes of a cache row as floats.
template <typename T>
struct KvVec;
template <>
struct KvVec<float> {
  static constexpr int kElems = 4;
  __device__ static void Decode(const uint4& raw, float* out) {
    out[0] = __uint_as_float(raw.x);
    out[1] = __uint_as_float(raw.y);
    out[2] = __uint_as_float(raw.z);
    out[3] = __uint_as_float(raw.w);
  }
};
template <>
struct KvVec<uint16_t> {  // IEEE half bits
  static constexpr int kElems = 8;
  __device__ static void Decode(const uint4& raw, float* out) {
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = DecodeF16(static_cast<uint16_t>(w[i] & 0xffffu));
      out[2 * i + 1] = DecodeF16(static_cast<uint16_t>(w[i] >> 16));
    }
  }
};

struct AttnParams {
  const float* q;
  int64_t q_row_stride;
  float* out;
  int64_t out_row_stride;
  const void* k;
  const void* v;
  int64_t seq_stride;
  int64_t capacity;
  const int32_t* positions;
  int n_heads;
  int head_dim;
  int group;         // query heads per KV head
  int head_batches;  // blocks per KV head (group / heads per block, rounded up)
  float scale;
  int keys_per_split;
  int splits;
  // Workspace: partial outputs [n_seqs][n_heads][splits][head_dim], then
  // maxima and sums [n_seqs][n_heads][splits].
  float* part_o;
  float* part_m;
  float* part_l;
};

// Keys of sequence s: 0..positions[s], or none when the position is not in
// the cache (the combine then writes NaN).
__device__ __forceinline__ int KeysOf(const AttnParams& p, int s) {
  const int pos = p.positions[s];
  return pos >= 0 && pos < p.capacity ? pos + 1 : 0;
}

template <typename T, int H>
__global__ void __launch_bounds__(kThreads) AttentionSplitKernel(const AttnParams p) {
  constexpr int V = KvVec<T>::kElems;
  __shared__ __align__(16) float q_s[H][kMaxHeadDim];
  __shared__ float p_s[H][kMaxChunk];                  // scores, then exp(score - max)
  __shared__ __align__(16) float red_s[kThreads * V];  // value sums of one head, per key lane
  __shared__ float scratch[kThreads / kWarpSize];

  const int split = blockIdx.x;
  const int kvh = blockIdx.y / p.head_batches;
  const int first = (blockIdx.y % p.head_batches) * H;  // first query head of the group here
  const int nh = min(H, p.group - first);
  const int head0 = kvh * p.group + first;  // its index among all query heads
  const int s = blockIdx.z;
  const int D = p.head_dim;
  const int k0 = split * p.keys_per_split;
  const int k1 = min(k0 + p.keys_per_split, KeysOf(p, s));
  // Partial of local head h: part + h * splits.
  const int64_t part = (static_cast<int64_t>(s) * p.n_heads + head0) * p.splits + split;

  if (k0 >= k1) {
    if (threadIdx.x < nh) {
      p.part_m[part + threadIdx.x * p.splits] = -INFINITY;
      p.part_l[part + threadIdx.x * p.splits] = 0.0f;
    }
    return;
  }

  const int64_t head_offset = s * p.seq_stride + static_cast<int64_t>(kvh) * p.capacity * D;
  const T* kbase = static_cast<const T*>(p.k) + head_offset;
  const T* vbase = static_cast<const T*>(p.v) + head_offset;

  for (int idx = threadIdx.x; idx < nh * D; idx += kThreads) {
    const int h = idx / D, d = idx % D;
    q_s[h][d] = p.q[s * p.q_row_stride + static_cast<int64_t>(head0 + h) * D + d];
  }
  __syncthreads();

  // 1. Scores, one key per thread.
  float mx[H];
#pragma unroll
  for (int h = 0; h < H; ++h) mx[h] = -INFINITY;
  for (int j = k0 + threadIdx.x; j < k1; j += kThreads) {
    const uint4* krow = reinterpret_cast<const uint4*>(kbase + static_cast<int64_t>(j) * D);
    float dot[H];
#pragma unroll
    for (int h = 0; h < H; ++h) dot[h] = 0.0f;
    for (int vi = 0; vi < D / V; ++vi) {
      float kv[V];
      KvVec<T>::Decode(__ldg(krow + vi), kv);
#pragma unroll
      for (int h = 0; h < H; ++h) {
        if (h < nh) {
#pragma unroll
          for (int e = 0; e < V; ++e) dot[h] = fmaf(q_s[h][vi * V + e], kv[e], dot[h]);
        }
      }
    }
#pragma unroll
    for (int h = 0; h < H; ++h) {
      if (h < nh) {
        const float score = dot[h] * p.scale;
        p_s[h][j - k0] = score;
        mx[h] = fmaxf(mx[h], score);
      }
    }
  }

  // 2. Maxima, exponentials, sums (each thread revisits only its own keys).
  float m[H], l[H];
#pragma unroll
  for (int h = 0; h < H; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
    if (h < nh) m[h] = BlockMax(mx[h], scratch);  // nh is the same in the whole block
  }
  float sum[H];
#pragma unroll
  for (int h = 0; h < H; ++h) sum[h] = 0.0f;
  for (int j = k0 + threadIdx.x; j < k1; j += kThreads) {
#pragma unroll
    for (int h = 0; h < H; ++h) {
      if (h < nh) {
        const float e = expf(p_s[h][j - k0] - m[h]);
        p_s[h][j - k0] = e;
        sum[h] += e;
      }
    }
  }
#pragma unroll
  for (int h = 0; h < H; ++h) {
    if (h < nh) l[h] = BlockSum(sum[h], scratch);
  }
  __syncthreads();  // every p_s entry written before phase 3 reads them all

  // 3. Values: thread = (key lane kl, vector dv of the row).
  const int dvs = D / V;                 // vectors per row (<= 64)
  const int key_lanes = kThreads / dvs;  // keys at once (>= 2)
  const int kl = threadIdx.x / dvs;
  const int dv = threadIdx.x % dvs;
  float o[H][V];
#pragma unroll
  for (int h = 0; h < H; ++h) {
#pragma unroll
    for (int e = 0; e < V; ++e) o[h][e] = 0.0f;
  }
  if (kl < key_lanes) {
    for (int j = k0 + kl; j < k1; j += key_lanes) {
      float vv[V];
      KvVec<T>::Decode(
          __ldg(reinterpret_cast<const uint4*>(vbase + static_cast<int64_t>(j) * D) + dv), vv);
#pragma unroll
      for (int h = 0; h < H; ++h) {
        if (h < nh) {
          const float pj = p_s[h][j - k0];
#pragma unroll
          for (int e = 0; e < V; ++e) o[h][e] = fmaf(pj, vv[e], o[h][e]);
        }
      }
    }
  }
  // Add the key lanes' sums, one head at a time through red_s
  // (key_lanes * D <= kThreads * V floats).
#pragma unroll
  for (int h = 0; h < H; ++h) {
    if (h >= nh) break;  // uniform in the block
    if (kl < key_lanes) {
#pragma unroll
      for (int e = 0; e < V; ++e) red_s[kl * D + dv * V + e] = o[h][e];
    }
    __syncthreads();
    for (int d = threadIdx.x; d < D; d += kThreads) {
      float t = 0.0f;
      for (int r = 0; r < key_lanes; ++r) t += red_s[r * D + d];
      p.part_o[(part + static_cast<int64_t>(h) * p.splits) * D + d] = t;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
#pragma unroll
    for (int h = 0; h < H; ++h) {
      if (h < nh) {
        p.part_m[part + static_cast<int64_t>(h) * p.splits] = m[h];
        p.part_l[part + static_cast<int64_t>(h) * p.splits] = l[h];
      }
    }
  }
}

__global__ void __launch_bounds__(kCombineThreads) AttentionCombineKernel(const AttnParams p) {
  const int head = blockIdx.x;
  const int s = blockIdx.y;
  const int D = p.head_dim;
  float* out = p.out + s * p.out_row_stride + static_cast<int64_t>(head) * D;
  const int n_keys = KeysOf(p, s);
  // A position outside the cache or past the plan's splits: NaN, never a
  // softmax over part of the keys.
  if (n_keys == 0 || n_keys > static_cast<int64_t>(p.splits) * p.keys_per_split) {
    for (int d = threadIdx.x; d < D; d += kCombineThreads) out[d] = __int_as_float(0x7fc00000);
    return;
  }
  const int used = (n_keys + p.keys_per_split - 1) / p.keys_per_split;  // splits holding keys
  const int64_t base = (static_cast<int64_t>(s) * p.n_heads + head) * p.splits;
  float big = -INFINITY;
  for (int i = 0; i < used; ++i) big = fmaxf(big, p.part_m[base + i]);
  float denom = 0.0f;
  for (int i = 0; i < used; ++i) denom += expf(p.part_m[base + i] - big) * p.part_l[base + i];
  const float inv = 1.0f / denom;
  for (int d = threadIdx.x; d < D; d += kCombineThreads) {
    float acc = 0.0f;
    for (int i = 0; i < used; ++i) {
      acc = fmaf(expf(p.part_m[base + i] - big), p.part_o[(base + i) * D + d], acc);
    }
    out[d] = acc * inv;
  }
}

// Query heads per block: the smallest kernel width that holds the group (or 8).
int HeadsPerBlock(int64_t group) {
  return group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : kMaxHeads;
}

size_t WorkspaceBytes(const DecodeAttentionArgs& a, int64_t splits) {
  return static_cast<size_t>(a.n_seqs * a.n_heads * splits * (a.head_dim + 2)) * sizeof(float);
}

template <typename T, int H>
Status LaunchSplit(cudaStream_t stream, dim3 grid, const AttnParams& p) {
  AttentionSplitKernel<T, H><<<grid, kThreads, 0, stream>>>(p);
  return CheckLaunch("AttentionSplitKernel");
}

template <typename T>
Status LaunchSplitHeads(cudaStream_t stream, int heads, dim3 grid, const AttnParams& p) {
  switch (heads) {
    case 1:
      return LaunchSplit<T, 1>(stream, grid, p);
    case 2:
      return LaunchSplit<T, 2>(stream, grid, p);
    case 4:
      return LaunchSplit<T, 4>(stream, grid, p);
    default:
      return LaunchSplit<T, kMaxHeads>(stream, grid, p);
  }
}

}  // namespace

DecodeAttentionPlan PlanDecodeAttention(const DecodeAttentionArgs& args, int64_t max_keys,
                                        int sm_count, int64_t keys_per_split) {
  DecodeAttentionPlan plan;
  if (max_keys < 1) max_keys = 1;
  int64_t chunk = keys_per_split;
  if (chunk <= 0) {
    // Enough splits for about two blocks per multiprocessor, none shorter
    // than 64 keys (below that the per-split fixed cost dominates).
    const int64_t group = args.n_kv_heads > 0 ? args.n_heads / args.n_kv_heads : 1;
    const int64_t blocks_per_split =
        args.n_seqs * args.n_kv_heads * CeilDiv(group, HeadsPerBlock(group));
    const int64_t want = CeilDiv(2 * static_cast<int64_t>(sm_count > 0 ? sm_count : 1),
                                 blocks_per_split > 0 ? blocks_per_split : 1);
    chunk = CeilDiv(CeilDiv(max_keys, want), 32) * 32;
    chunk = chunk < 64 ? 64 : chunk > kMaxKeysPerSplit ? kMaxKeysPerSplit : chunk;
  }
  plan.keys_per_split = chunk;
  plan.splits = CeilDiv(max_keys, chunk);
  plan.workspace_bytes = WorkspaceBytes(args, plan.splits);
  return plan;
}

Status LaunchDecodeAttention(CUstream_st* stream, const DecodeAttentionArgs& a,
                             const DecodeAttentionPlan& plan, void* workspace,
                             size_t workspace_bytes) {
  const bool f16 = a.kv_dtype == KvDtype::kF16;
  const int64_t vec = f16 ? 8 : 4;  // elements per 16-byte load
  if (a.n_seqs < 1 || a.n_heads < 1 || a.n_kv_heads < 1 || a.n_heads % a.n_kv_heads != 0) {
    return InvalidArgumentError(
        "LaunchDecodeAttention: n_seqs, n_heads >= 1 and n_heads a "
        "multiple of n_kv_heads");
  }
  if (a.head_dim < vec || a.head_dim > kMaxHeadDim || a.head_dim % vec != 0) {
    return InvalidArgumentError("LaunchDecodeAttention: head_dim " + std::to_string(a.head_dim) +
                                " must be a multiple of " + std::to_string(vec) + " up to " +
                                std::to_string(kMaxHeadDim));
  }
  if (!a.q || !a.out || !a.positions || !a.k_cache || !a.v_cache || !workspace) {
    return InvalidArgumentError("LaunchDecodeAttention: null pointer");
  }
  if (!Aligned(a.k_cache, 16) || !Aligned(a.v_cache, 16) || !Aligned(workspace, 4) ||
      (a.n_seqs > 1 && a.seq_stride % vec != 0)) {
    return InvalidArgumentError(
        "LaunchDecodeAttention: caches must be 16-byte aligned (base and "
        "seq_stride), the workspace 4-byte aligned");
  }
  const int64_t row = a.n_heads * a.head_dim;
  if (a.capacity < 1 || !FitsInt(a.capacity) || a.q_row_stride < row || a.out_row_stride < row) {
    return InvalidArgumentError(
        "LaunchDecodeAttention: capacity >= 1 and row strides >= "
        "n_heads * head_dim");
  }
  if (plan.keys_per_split < 1 || plan.keys_per_split > kMaxKeysPerSplit || plan.splits < 1 ||
      !FitsInt(plan.splits * plan.keys_per_split) ||
      workspace_bytes < WorkspaceBytes(a, plan.splits)) {
    return InvalidArgumentError("LaunchDecodeAttention: plan out of range or workspace of " +
                                std::to_string(workspace_bytes) + " bytes < " +
                                std::to_string(WorkspaceBytes(a, plan.splits)));
  }
  const int64_t group = a.n_heads / a.n_kv_heads;
  const int heads = HeadsPerBlock(group);
  const int64_t batches = CeilDiv(group, heads);
  if (a.n_kv_heads * batches > 65535 || a.n_seqs > 65535 || !FitsInt(a.n_heads)) {
    return InvalidArgumentError(
        "LaunchDecodeAttention: more KV heads or sequences than a grid "
        "holds (65535)");
  }
  AttnParams p{};
  p.q = a.q;
  p.q_row_stride = a.q_row_stride;
  p.out = a.out;
  p.out_row_stride = a.out_row_stride;
  p.k = a.k_cache;
  p.v = a.v_cache;
  p.seq_stride = a.seq_stride;
  p.capacity = a.capacity;
  p.positions = a.positions;
  p.n_heads = static_cast<int>(a.n_heads);
  p.head_dim = static_cast<int>(a.head_dim);
  p.group = static_cast<int>(group);
  p.head_batches = static_cast<int>(batches);
  p.scale = a.scale;
  p.keys_per_split = static_cast<int>(plan.keys_per_split);
  p.splits = static_cast<int>(plan.splits);
  const int64_t partials = a.n_seqs * a.n_heads * plan.splits;
  p.part_o = static_cast<float*>(workspace);
  p.part_m = p.part_o + partials * a.head_dim;
  p.part_l = p.part_m + partials;

  const dim3 grid(static_cast<unsigned>(plan.splits), static_cast<unsigned>(a.n_kv_heads * batches),
                  static_cast<unsigned>(a.n_seqs));
  OCTET_RETURN_IF_ERROR(f16 ? LaunchSplitHeads<uint16_t>(stream, heads, grid, p)
                            : LaunchSplitHeads<float>(stream, heads, grid, p));
  AttentionCombineKernel<<<dim3(static_cast<unsigned>(a.n_heads), static_cast<unsigned>(a.n_seqs)),
                           kCombineThreads, 0, stream>>>(p);
  return CheckLaunch("AttentionCombineKernel");
}

}  // namespace octet::kernels::cuda
