// Internal: the layers of the nanochat GPT, each op's forward beside its
// backward (llm.c style). Shapes are in the comments: B batch, T time, C
// n_embd, H query heads, Hkv kv heads, D head_dim, V vocab. Matrices are
// row-major; "rows `ld` apart" means a strided view into a wider buffer.
//
// Matmuls go through KernelBackend::Gemm; the rest are plain loops split
// into chunks on the backend's host thread pool (serial when it has none).
// Every op writes each output element from one task with a fixed summation
// order, so results do not depend on scheduling.
#pragma once

#include <cstdint>
#include <functional>

#include "octet/kernels/backend.h"
#include "octet/kernels/thread_pool.h"

namespace octet::trainer::ops {

// Runs fn(task) for task in [0, n) on `pool` (serially when null).
void ParallelFor(kernels::ThreadPool* pool, int64_t n, const std::function<void(int64_t)>& fn);

// ---- token embedding ---------------------------------------------------------
// out[i, :] = wte[ids[i], :]; out [N, C], wte [V, C].
void EmbeddingForward(kernels::ThreadPool* pool, float* out, const int32_t* ids, const float* wte,
                      int64_t n, int64_t C);
// dwte[ids[i], :] += dout[i, :], in position order per column block.
void EmbeddingBackward(kernels::ThreadPool* pool, float* dwte, const float* dout,
                       const int32_t* ids, int64_t n, int64_t C);

// ---- parameter-free RMSNorm ----------------------------------------------------
// Normalises `heads` vectors of `dim` per row: vector (r, h) starts at
// x + r·ld + h·dim (heads = 1 for the residual stream; H + Hkv for QK-norm
// over the adjacent q and k parts of a fused qkv row).
// out(r,h) = x(r,h)·rstd[r,h], rstd = 1/sqrt(mean(x(r,h)²) + eps); rstd
// [rows, heads]; out may equal x.
void RmsNormForward(kernels::ThreadPool* pool, float* out, float* rstd, const float* x,
                    int64_t rows, int64_t heads, int64_t dim, int64_t ld, float eps);
// dx (+)= rstd·(dout − out·mean(dout·out)), from the forward's output and
// rstd (same layout). dx may equal dout (in place) when !accumulate.
void RmsNormBackward(kernels::ThreadPool* pool, float* dx, const float* dout, const float* out,
                     const float* rstd, int64_t rows, int64_t heads, int64_t dim, int64_t ld,
                     bool accumulate);

// ---- linear layers (no bias): y = x·Wᵀ --------------------------------------------
// out[N, OC] (+)= in[N, IC] · W[OC, IC]ᵀ; `ld_in`/`ld_out` row strides.
void MatmulForward(kernels::KernelBackend* be, float* out, int64_t ld_out, const float* in,
                   int64_t ld_in, const float* w, int64_t N, int64_t IC, int64_t OC,
                   bool accumulate);
// dW[OC, IC] += dout[N, OC]ᵀ · in[N, IC]; din[N, IC] (+)= dout · W (skipped when
// din is null).
void MatmulBackward(kernels::KernelBackend* be, float* din, int64_t ld_din, float* dw,
                    const float* dout, int64_t ld_dout, const float* in, int64_t ld_in,
                    const float* w, int64_t N, int64_t IC, int64_t OC, bool accumulate_din);

// ---- causal self-attention ---------------------------------------------------------
// q [B·T, H, D] rows `ld_q` apart, k/v [B·T, Hkv, D] rows `ld_kv` apart,
// probs [B, H, T, T] (the causal softmax, zeros above the diagonal),
// y [B·T, H·D] rows `ld_y` apart. scale = D^-0.5.
struct AttentionShape {
  int64_t B, T, H, Hkv, D;
  int64_t ld_q, ld_kv, ld_y;
  float scale;
};
void AttentionForward(kernels::KernelBackend* be, kernels::ThreadPool* pool,
                      const AttentionShape& s, const float* q, const float* k, const float* v,
                      float* probs, float* y);
// dq, dk, dv written (not accumulated), same layouts as q, k, v; dprobs is
// [B, H, T, T] scratch.
void AttentionBackward(kernels::KernelBackend* be, kernels::ThreadPool* pool,
                       const AttentionShape& s, const float* q, const float* k, const float* v,
                       const float* probs, const float* dy, float* dprobs, float* dq, float* dk,
                       float* dv);

// ---- ReLU² ---------------------------------------------------------------------------
// out = max(x, 0)²; n elements.
void Relu2Forward(kernels::ThreadPool* pool, float* out, const float* x, int64_t n);
// dx = dout · 2·max(x, 0); dx may equal dout.
void Relu2Backward(kernels::ThreadPool* pool, float* dx, const float* dout, const float* x,
                   int64_t n);

// ---- soft-cap + cross-entropy ----------------------------------------------------
// In place on logits [N, V]: l = cap·tanh(l/cap) (cap 0: unchanged). With
// targets: lse[i] = logsumexp(l[i]), losses[i] = lse[i] − l[i, targets[i]].
void SoftcapCrossEntropyForward(kernels::ThreadPool* pool, float* logits, float* lse, float* losses,
                                const int32_t* targets, int64_t N, int64_t V, float cap);
// In place: logits (capped) become d(dloss · Σ losses)/d(raw logits) =
// dloss·(softmax − onehot)·(1 − (l/cap)²).
void SoftcapCrossEntropyBackward(kernels::ThreadPool* pool, float* logits, const float* lse,
                                 const int32_t* targets, int64_t N, int64_t V, float cap,
                                 float dloss);

}  // namespace octet::trainer::ops
