// Launchers of the CUDA kernels that only CudaBackend uses (internal to
// octet_kernels_cuda): the element-wise and row ops the decode-step
// launchers of cuda_ops.h do not cover, the general attention kernel, and the
// conversions the cuBLAS matmul path needs. Conventions as in cuda_ops.h:
// device pointers, float32 row-major activations, row strides in elements;
// arguments are checked by the caller (CudaBackend), the launchers only
// queue work and return the launch error.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "octet/base/status.h"
#include "octet/kernels/backend.h"
#include "octet/kernels/weight.h"

namespace octet::kernels::cuda {

// ---- element-wise -----------------------------------------------------------

Status LaunchFill(cudaStream_t s, float* x, int64_t n, float value);
Status LaunchScale(cudaStream_t s, float* x, int64_t n, float factor);
Status LaunchRelu2(cudaStream_t s, float* x, int64_t n);
Status LaunchSoftCap(cudaStream_t s, float* x, int64_t n, float cap);
// x[r, :] += v for rows of n, rows `stride` apart.
Status LaunchAddRowVector(cudaStream_t s, float* x, int64_t rows, int64_t n, int64_t stride,
                          const float* v);
// Each row of n (rows contiguous) replaced by its softmax.
Status LaunchSoftmax(cudaStream_t s, float* x, int64_t rows, int64_t n);
// out[r, :] = x[rows[r], :], out rows n apart.
Status LaunchGatherRows(cudaStream_t s, const float* x, int64_t ldx, const int64_t* rows,
                        int64_t n_rows, int64_t n, float* out);
// out[rows[r], :] += w[r] * x[r, :] in r order (one thread per column walks
// the rows, so repeated rows add up in order, deterministically).
Status LaunchScatterAddRows(cudaStream_t s, const float* x, int64_t ldx, const int64_t* rows,
                            const float* weights, int64_t n_rows, int64_t n, float* out,
                            int64_t ldo);
// One product's rows for LaunchScatterAddProducts: its m rows of x start at
// row x_row; row j goes to out row rows[j] times weights[j] (null: 1).
struct ScatterRows {
  const int64_t* rows;
  const float* weights;
  int64_t m;
  int64_t x_row;
};
// LaunchScatterAddRows of every product in order (rows in order within one):
// out[p.rows[j], :] += p.weights[j] * x[p.x_row + j, :], x rows n apart; one
// launch per kScatterProducts products, the same sums as a launch each.
inline constexpr int kScatterProducts = 64;
Status LaunchScatterAddProducts(cudaStream_t s, const float* x, const ScatterRows* products,
                                int64_t n_products, int64_t n, float* out, int64_t ldo);
// The rows of ids in [first_row, first_row + table.rows) decoded, zeros
// for the others (out rows table.cols apart).
Status LaunchEmbeddingShard(cudaStream_t s, const WeightMatrix& table, int64_t first_row,
                            const int32_t* ids, int64_t n, float* out);
Status LaunchKvStore(cudaStream_t s, const KvStoreArgs& a);
// KvStore of args[0..n) with one launch per kKvStoreBatch of them (the
// arguments travel as kernel parameters: nothing to upload).
inline constexpr int kKvStoreBatch = 16;
Status LaunchKvStoreBatch(cudaStream_t s, const KvStoreArgs* args, int64_t n);

// KernelBackend::PrepareQk in one launch: a block per (row, head) of q, then
// of k, holds the head in shared memory and normalizes it (QK-norm) before
// or after rotating it with the arithmetic of LaunchRmsNorm's and
// LaunchRopeHeads' kernels (the same block size, reduction and angles), so
// q and k are theirs bit for bit; then, with `first_row`, each k head's
// block stores its key and value into the cache of the row's sequence as
// LaunchKvStoreBatch does: a.stores[s] covers rows [first_row[s],
// first_row[s] + a.stores[s].n) of a.k (its k pointer at that row, its
// row_stride, n_kv_heads and head_dim a.k's), at most kKvStoreBatch of them,
// rows outside every store not stored; row r at position first_pos + (r -
// first_row[s]), or with `store_at_positions` at positions[r] (the same in
// the engine's steps, and what a recorded step must read afresh when it
// runs again). Without first_row the stores are left to the caller.
// head_dim at most kQkPrepMaxHeadDim.
inline constexpr int64_t kQkPrepMaxHeadDim = 1024;

// GemmAttention's steps (cuda_backend.cpp). One KV head's first n positions
// of an F16 cache (position p's head_dim values at src + p *
// position_stride) as float rows [n, head_dim] at dst.
Status LaunchWidenKvRows(cudaStream_t s, const uint16_t* src, int64_t n, int64_t head_dim,
                         int64_t position_stride, float* dst);
// Rows of scores, [heads, tokens, n_keys] (scaled already), each made the
// softmax over keys 0..positions[token] in place, the keys after it 0. A
// token whose position is negative, or not below n_keys, gets a row of NaN
// (so its output is NaN, as the table kernel's for a negative position).
Status LaunchCausalSoftmax(cudaStream_t s, float* scores, int64_t heads, int64_t tokens,
                           int64_t n_keys, const int32_t* positions);
Status LaunchQkPrep(cudaStream_t s, const KernelBackend::QkPrepArgs& a, const int64_t* first_row,
                    bool store_at_positions);

// A prefill sequence's attention on the tensor cores (attention_tc.cu;
// OCTET_CUDA_PREFILL_ATTENTION=tensor): an F16 cache, q.n_keys given, a
// head_dim that TensorCoreAttentionFits. Every query head of sequence `q`;
// a position outside 0..n_keys - 1 gives a row of NaN.
inline constexpr int64_t kTensorCoreAttentionMaxHeadDim = 128;
bool TensorCoreAttentionFits(int64_t head_dim);
Status LaunchTensorCoreAttention(cudaStream_t s, const AttentionArgs& a,
                                 const AttentionSequence& q);

// ---- matmul helpers (the cuBLAS path) ---------------------------------------

// x[m, k] (rows ldx apart) as two BF16 matrices stacked in `out` [2m, k]
// (rows k apart): rows 0..m-1 hi = bf16(x), rows m..2m-1 lo = bf16(x - hi),
// so hi + lo carries 16 significant bits of x (relative error <= 2^-17).
Status LaunchSplitBf16(cudaStream_t s, const float* x, int64_t m, int64_t ldx, int64_t k,
                       uint16_t* out);
// x[m, k] as one BF16 matrix [m, k] (rows k apart), rounded to nearest.
Status LaunchToBf16(cudaStream_t s, const float* x, int64_t m, int64_t ldx, int64_t k,
                    uint16_t* out);
// y[i, :n] = (accumulate ? y[i, :n] : 0) + t[i, :] (+ t[m + i, :] when `pair`),
// t rows n apart.
Status LaunchCombineRows(cudaStream_t s, const float* t, int64_t m, int64_t n, bool pair, float* y,
                         int64_t ldy, bool accumulate);
// Rows [row0, row0 + rows) of NVFP4 `w` as BF16 E2M1 * E4M3 products (exact;
// the global scale is left out), [rows, w.cols] with rows `ld` elements apart.
Status LaunchDequantNvfp4ToBf16(cudaStream_t s, const WeightMatrix& w, int64_t row0, int64_t rows,
                                uint16_t* out, int64_t ld);
// Rows [row0, row0 + rows) of an F16 or BF16 `w` widened to float, rows `ld` apart.
Status LaunchWidenRows(cudaStream_t s, const WeightMatrix& w, int64_t row0, int64_t rows,
                       float* out, int64_t ld);

// ---- attention --------------------------------------------------------------

// One sequence as the attention kernel reads it (a device table).
struct AttnSeqDesc {
  const void* k;
  const void* v;
  const int32_t* positions;
  int64_t position_stride;  // elements, resolved (never both zero)
  int64_t head_stride;
  int64_t first_token;
  int32_t f16;  // KvDtype::kF16
  int32_t pad;
};
// One query token: sequence index and token index within the sequence.
struct AttnItem {
  int32_t seq;
  int32_t token;
};

// A table of at most this many sequences and query tokens (a decode step's)
// travels in the kernels' parameters (GeneralAttentionArgs::inline_table):
// no upload before each layer's attention.
inline constexpr int kInlineAttnSeqs = 16;
inline constexpr int kInlineAttnItems = 16;

struct GeneralAttentionArgs {
  const float* q;
  int64_t q_row_stride;
  float* out;
  int64_t out_row_stride;
  int n_heads;
  int n_kv_heads;
  int head_dim;  // <= kGeneralAttentionMaxHeadDim
  float scale;
  const AttnSeqDesc* seqs;  // device
  const AttnItem* items;    // device, n_items of them
  int64_t n_items;
  // With inline_table, the table is these instead of seqs / items.
  int inline_table;
  AttnSeqDesc inline_seqs[kInlineAttnSeqs];
  AttnItem inline_items[kInlineAttnItems];
  int splits;  // >= 1; > 1 needs the workspace
  float* workspace;
};
inline constexpr int kGeneralAttentionMaxHeadDim = 256;
inline constexpr int kGeneralAttentionMaxSplits = 64;
// Floats of workspace a call with `splits` > 1 needs.
int64_t GeneralAttentionWorkspaceFloats(int64_t n_items, int64_t n_heads, int64_t head_dim,
                                        int64_t splits);
// Query heads per block for a group (1, 2, 4 or 8).
int GeneralAttentionHeadsPerBlock(int64_t group);
Status LaunchGeneralAttention(cudaStream_t s, const GeneralAttentionArgs& a);

}  // namespace octet::kernels::cuda
