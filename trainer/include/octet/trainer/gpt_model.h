// GptModel: the nanochat GPT's parameters, gradients and activations, with a
// forward pass that computes the loss and a backward pass that accumulates
// every parameter's gradient — written layer by layer in the manner of llm.c
// (src/gpt_ops.h has each op's forward and backward side by side).
//
// Semantics (../shared/fixtures/README.md, section B), all float32:
//   x = norm(wte[idx])                                  [B,T,C]
//   per block: h = norm(x); q,k,v = h·Wqᵀ, h·Wkᵀ, h·Wvᵀ; q,k = rope(q),rope(k);
//              q,k = norm(q),norm(k) per head; y = causal softmax(q·kᵀ/√hd)·v;
//              x += y·Woᵀ; x += relu(norm(x)·Wfcᵀ)²·Wprojᵀ
//   logits = softcap·tanh(norm(x)·Wlmᵀ / softcap); loss = mean cross-entropy.
// norm(x) = x·rsqrt(mean(x²) + eps), no weight.
//
// Memory. All parameters live in one contiguous float buffer (and the
// gradients in another of the same layout), tensor after tensor in this order:
// wte, then per layer c_q, c_k, c_v, attn.c_proj, mlp.c_fc, mlp.c_proj, then
// lm_head. Backward finishes gradients from the end of the buffer towards the
// start, which is what lets a data-parallel bucketer reduce a contiguous tail
// while the rest of backward runs. Activations for a [B,T] batch are sized on
// first use and kept (llm.c-style: everything backward needs is stored).
//
// Compute goes through a kernels::KernelBackend (Gemm for every matmul, Rope);
// the element-wise ops are plain loops on the backend's host thread pool.
// Results are deterministic: the same inputs give bit-identical losses and
// gradients whatever the thread count's scheduling.
//
// Thread-safety: one caller at a time (like the backend it drives).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "octet/base/status.h"
#include "octet/kernels/backend.h"
#include "octet/trainer/gpt_config.h"

namespace octet::trainer {

// What an optimizer treats a tensor as (nanochat: Muon for block matrices,
// AdamW for the embedding and the head).
enum class ParamKind { kEmbedding, kBlockMatrix, kHead };

struct ParamTensor {
  std::string name;            // "transformer.h.0.attn.c_q.weight"
  std::vector<int64_t> shape;  // [out, in] for linear weights, [V, C] for wte
  int64_t offset = 0;          // first element in the parameter / gradient buffer
  int64_t numel = 0;
  ParamKind kind = ParamKind::kBlockMatrix;
  int layer = -1;  // block index; -1 for wte and lm_head

  int64_t rows() const { return shape.empty() ? 1 : shape[0]; }
  int64_t cols() const { return shape.size() < 2 ? 1 : shape[1]; }
};

// Called during Backward when the gradients in [begin, end) (element offsets
// in the gradient buffer) are final for this backward pass. Successive calls
// cover the buffer from its end down to offset 0 without gaps or overlap.
using GradReadyFn = std::function<void(int64_t begin, int64_t end)>;

class GptModel {
 public:
  // `backend` must outlive the model. Parameters are zero until InitWeights or
  // a load fills them.
  static Result<std::unique_ptr<GptModel>> Create(const GptConfig& config,
                                                  kernels::KernelBackend* backend);
  ~GptModel();
  GptModel(const GptModel&) = delete;
  GptModel& operator=(const GptModel&) = delete;

  const GptConfig& config() const { return config_; }
  kernels::KernelBackend* backend() const { return backend_; }

  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  const ParamTensor* Find(std::string_view name) const;
  int64_t num_params() const { return static_cast<int64_t>(params_.size()); }
  std::span<float> params() { return params_; }
  std::span<const float> params() const { return params_; }
  std::span<float> grads() { return grads_; }
  std::span<const float> grads() const { return grads_; }
  float* param(const ParamTensor& t) { return params_.data() + t.offset; }
  float* grad(const ParamTensor& t) { return grads_.data() + t.offset; }

  // nanochat's initialisation, deterministic in `seed`: linear weights
  // N(0, std) with std = min(1, sqrt(fan_out/fan_in)) / sqrt(fan_in); wte
  // N(0, 1); lm_head, attn.c_proj and mlp.c_proj zero.
  void InitWeights(uint64_t seed);

  // Runs the forward pass over `inputs` [B, T] (row-major token ids, each in
  // [0, vocab_size)) and, when `targets` [B, T] is given, returns the mean
  // cross-entropy over the B·T positions (without targets: 0). T must be <=
  // config().sequence_len. Errors: bad sizes or an id out of range (named with
  // its position). Keeps what Backward needs.
  Result<float> Forward(const int32_t* inputs, const int32_t* targets, int B, int T);

  // Logits [B, T, V] of the last Forward (after the soft-cap); overwritten by
  // Backward.
  std::span<const float> logits() const;
  // Per-position losses [B, T] of the last Forward with targets (nats).
  std::span<const float> position_losses() const;

  // Accumulates d(loss_scale · loss)/dθ into grads() for the last Forward
  // (which must have had targets). Use loss_scale = 1/n for n accumulated
  // micro-batches. `on_ready` (may be empty) sees each finished gradient range.
  Status Backward(float loss_scale, const GradReadyFn& on_ready = {});

  void ZeroGrads();

 private:
  struct Activations;
  GptModel(const GptConfig& config, kernels::KernelBackend* backend);
  void EnsureActivations(int B, int T);

  GptConfig config_;
  kernels::KernelBackend* backend_;
  std::vector<ParamTensor> tensors_;
  std::vector<float> params_;
  std::vector<float> grads_;
  std::vector<float> inv_freq_;      // [head_dim/2] RoPE frequencies
  std::vector<float> inv_freq_neg_;  // negated: RoPE backward rotates the other way
  std::unique_ptr<Activations> acts_;
};

}  // namespace octet::trainer
