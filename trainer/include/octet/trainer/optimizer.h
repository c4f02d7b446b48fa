// Optimizers for GptModel, the learning-rate schedule and gradient clipping.
//
// Two set-ups (OptimizerConfig::kind):
//   "adamw" — torch.optim.AdamW on every parameter: decoupled weight decay
//     p ·= 1 − lr·wd; m = β1·m + (1−β1)·g; v = β2·v + (1−β2)·g²;
//     p −= (lr / (1−β1^t)) · m / (sqrt(v)/sqrt(1−β2^t) + eps).
//   "muon" — nanochat's: Muon for the block matrices (c_q ... mlp.c_proj) and
//     AdamW (betas 0.8/0.95, eps 1e-10) for wte and lm_head with learning rates
//     scaled by (n_embd/768)^-0.5. Muon per matrix: buf = lerp(buf, g, 1−μ);
//     u = lerp(g, buf, μ) (Nesterov); u = NewtonSchulz5(u) (≈ U·Vᵀ of u's SVD,
//     in float32 here); p −= lr·sqrt(max(1, rows/cols))·u. μ warms from 0.85
//     to 0.95 over the first 300 steps.
//
// Every learning rate is multiplied by the schedule's factor at each step
// (LrSchedule: linear warm-up, constant, linear warm-down to final_lr_frac —
// nanochat's shape). Updates are deterministic; state (moments, momentum
// buffers, step count) is exposed by name for checkpoints.
//
// Thread-safety: one caller at a time; runs on the model's backend.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "octet/base/status.h"
#include "octet/trainer/gpt_model.h"

namespace octet::trainer {

struct OptimizerConfig {
  std::string kind = "adamw";  // "adamw" or "muon"

  // "adamw": one group for every parameter.
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;

  // "muon" (nanochat defaults).
  float matrix_lr = 0.02f;        // Muon, block matrices
  float embedding_lr = 0.2f;      // AdamW, wte (before the width scaling)
  float unembedding_lr = 0.004f;  // AdamW, lm_head (before the width scaling)
  float adam_beta1 = 0.8f;
  float adam_beta2 = 0.95f;
  float adam_eps = 1e-10f;
  float muon_momentum = 0.95f;
  float muon_momentum_start = 0.85f;
  int muon_momentum_warmup_steps = 300;
  int ns_steps = 5;

  Status Validate() const;
};

// One optimizer state tensor, for checkpoints ("<param>.exp_avg",
// "<param>.exp_avg_sq", "<param>.momentum_buffer").
struct StateTensor {
  std::string name;
  std::vector<int64_t> shape;
  float* data = nullptr;
  int64_t numel = 0;
};

class Optimizer {
 public:
  static Result<std::unique_ptr<Optimizer>> Create(const OptimizerConfig& config, GptModel* model);
  ~Optimizer();

  const OptimizerConfig& config() const { return config_; }
  // Applies one update from model->grads() with every learning rate times
  // `lr_multiplier`. Steps are counted from 1.
  Status Step(float lr_multiplier);
  int64_t steps_taken() const { return steps_; }
  void set_steps_taken(int64_t steps) { steps_ = steps; }

  // Views of the state buffers (owned by the optimizer).
  std::vector<StateTensor> StateTensors();

  // The learning rate each parameter group uses at multiplier 1, e.g. for logs:
  // {"adamw", lr} or {"wte", ...}, {"lm_head", ...}, {"muon", ...}.
  std::vector<std::pair<std::string, float>> BaseLearningRates() const;

 private:
  struct Group;
  Optimizer(const OptimizerConfig& config, GptModel* model);
  void AdamWUpdate(const ParamTensor& t, const Group& g, float lr);
  void MuonUpdate(const ParamTensor& t, float lr, float momentum);

  OptimizerConfig config_;
  GptModel* model_;
  int64_t steps_ = 0;
  std::vector<Group> groups_;      // per tensor of the model, same order
  std::vector<float> exp_avg_;     // AdamW m, laid out like the parameters (0-sized parts unused)
  std::vector<float> exp_avg_sq_;  // AdamW v
  std::vector<float> momentum_;    // Muon buffers, laid out like the parameters
  std::vector<float> update_;      // one Muon matrix's update (scratch)
};

// Newton–Schulz quintic iteration (a, b, c) = (3.4445, −4.7750, 2.0315) on a
// [rows, cols] matrix, `steps` times, after scaling to Frobenius norm ≤ 1:
// an approximate orthogonalisation (singular values pushed into ~[0.5, 1.5]).
// In place, through `backend`'s Gemm.
void NewtonSchulz5(kernels::KernelBackend* backend, float* matrix, int64_t rows, int64_t cols,
                   int steps);

// nanochat's schedule over `total_steps`: (s+1)/warmup for s < warmup_steps,
// then 1, and over the last warmdown_steps a linear fall to final_lr_frac.
struct LrSchedule {
  int64_t total_steps = 1;
  int64_t warmup_steps = 0;
  int64_t warmdown_steps = 0;
  float final_lr_frac = 0.0f;

  // Multiplier for step `s` (0-based).
  float Multiplier(int64_t s) const;
};

// L2 norm of all of `grads` (accumulated in double, fixed order); when
// max_norm > 0 and the norm exceeds it, scales grads by max_norm/(norm+1e-6)
// (torch.nn.utils.clip_grad_norm_). Returns the norm before clipping.
float ClipGradNorm(kernels::ThreadPool* pool, std::span<float> grads, float max_norm);

}  // namespace octet::trainer
