#include "octet/trainer/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "gpt_ops.h"

namespace octet::trainer {

struct Optimizer::Group {
  enum class Algo { kAdamW, kMuon } algo = Algo::kAdamW;
  float lr = 0.0f;
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.0f;
};

namespace {

constexpr int64_t kChunk = 16384;  // elements per task of element-wise updates

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

Status OptimizerConfig::Validate() const {
  if (kind != "adamw" && kind != "muon") {
    return InvalidArgumentError("unknown optimizer '" + kind + "' (adamw or muon)");
  }
  auto beta_ok = [](float b) { return b >= 0.0f && b < 1.0f; };
  if (!(lr >= 0.0f) || !(matrix_lr >= 0.0f) || !(embedding_lr >= 0.0f) ||
      !(unembedding_lr >= 0.0f)) {
    return InvalidArgumentError("learning rates must be >= 0");
  }
  if (!beta_ok(beta1) || !beta_ok(beta2) || !beta_ok(adam_beta1) || !beta_ok(adam_beta2)) {
    return InvalidArgumentError("betas must be in [0, 1)");
  }
  if (!(eps > 0.0f) || !(adam_eps > 0.0f)) return InvalidArgumentError("eps must be > 0");
  if (!(weight_decay >= 0.0f)) return InvalidArgumentError("weight decay must be >= 0");
  if (!beta_ok(muon_momentum) || !beta_ok(muon_momentum_start)) {
    return InvalidArgumentError("Muon momentum must be in [0, 1)");
  }
  if (ns_steps < 1) return InvalidArgumentError("ns_steps must be >= 1");
  return Status::Ok();
}

Optimizer::Optimizer(const OptimizerConfig& config, GptModel* model)
    : config_(config), model_(model) {}

Optimizer::~Optimizer() = default;

Result<std::unique_ptr<Optimizer>> Optimizer::Create(const OptimizerConfig& config,
                                                     GptModel* model) {
  OCTET_RETURN_IF_ERROR(config.Validate());
  if (!model) return InvalidArgumentError("Optimizer needs a model");
  std::unique_ptr<Optimizer> o(new Optimizer(config, model));
  const float width_scale = std::pow(static_cast<float>(model->config().n_embd) / 768.0f, -0.5f);
  bool any_adam = false, any_muon = false;
  for (const auto& t : model->tensors()) {
    Group g;
    if (config.kind == "adamw") {
      g.lr = config.lr;
      g.beta1 = config.beta1;
      g.beta2 = config.beta2;
      g.eps = config.eps;
      g.weight_decay = config.weight_decay;
    } else if (t.kind == ParamKind::kBlockMatrix) {
      g.algo = Group::Algo::kMuon;
      g.lr = config.matrix_lr;
    } else {
      g.lr = (t.kind == ParamKind::kEmbedding ? config.embedding_lr : config.unembedding_lr) *
             width_scale;
      g.beta1 = config.adam_beta1;
      g.beta2 = config.adam_beta2;
      g.eps = config.adam_eps;
      g.weight_decay = config.weight_decay;
    }
    any_adam |= g.algo == Group::Algo::kAdamW;
    any_muon |= g.algo == Group::Algo::kMuon;
    o->groups_.push_back(g);
  }
  const size_t n = model->params().size();
  if (any_adam) {
    o->exp_avg_.assign(n, 0.0f);
    o->exp_avg_sq_.assign(n, 0.0f);
  }
  if (any_muon) o->momentum_.assign(n, 0.0f);
  return o;
}

std::vector<std::pair<std::string, float>> Optimizer::BaseLearningRates() const {
  if (config_.kind == "adamw") return {{"adamw", config_.lr}};
  std::vector<std::pair<std::string, float>> out;
  const auto& tensors = model_->tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].kind == ParamKind::kEmbedding) out.push_back({"wte (adamw)", groups_[i].lr});
    if (tensors[i].kind == ParamKind::kHead) out.push_back({"lm_head (adamw)", groups_[i].lr});
  }
  out.push_back({"matrices (muon)", config_.matrix_lr});
  return out;
}

std::vector<StateTensor> Optimizer::StateTensors() {
  std::vector<StateTensor> out;
  const auto& tensors = model_->tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const ParamTensor& t = tensors[i];
    if (groups_[i].algo == Group::Algo::kAdamW) {
      out.push_back({t.name + ".exp_avg", t.shape, exp_avg_.data() + t.offset, t.numel});
      out.push_back({t.name + ".exp_avg_sq", t.shape, exp_avg_sq_.data() + t.offset, t.numel});
    } else {
      out.push_back({t.name + ".momentum_buffer", t.shape, momentum_.data() + t.offset, t.numel});
    }
  }
  return out;
}

Status Optimizer::Step(float lr_multiplier) {
  ++steps_;
  const auto& tensors = model_->tensors();
  // Muon momentum warms up linearly over the first steps (0-based step index).
  const double frac =
      config_.muon_momentum_warmup_steps > 0
          ? std::min(1.0, static_cast<double>(steps_ - 1) / config_.muon_momentum_warmup_steps)
          : 1.0;
  const float momentum =
      static_cast<float>((1.0 - frac) * config_.muon_momentum_start + frac * config_.muon_momentum);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const float lr = groups_[i].lr * lr_multiplier;
    if (groups_[i].algo == Group::Algo::kAdamW) {
      AdamWUpdate(tensors[i], groups_[i], lr);
    } else {
      MuonUpdate(tensors[i], lr, momentum);
    }
  }
  return Status::Ok();
}

void Optimizer::AdamWUpdate(const ParamTensor& t, const Group& g, float lr) {
  // torch.optim.AdamW (single-tensor): scalars in double, element math in float.
  const double bc1 = 1.0 - std::pow(static_cast<double>(g.beta1), static_cast<double>(steps_));
  const double bc2 = 1.0 - std::pow(static_cast<double>(g.beta2), static_cast<double>(steps_));
  const float step_size = static_cast<float>(lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float decay = 1.0f - lr * g.weight_decay;
  const float b1 = g.beta1, b2 = g.beta2, eps = g.eps;
  const float one_minus_b1 = 1.0f - b1, one_minus_b2 = 1.0f - b2;
  float* p = model_->param(t);
  const float* grad = model_->grad(t);
  float* m = exp_avg_.data() + t.offset;
  float* v = exp_avg_sq_.data() + t.offset;
  const int64_t n = t.numel;
  ops::ParallelFor(model_->backend()->host_thread_pool(), CeilDiv(n, kChunk), [&](int64_t task) {
    const int64_t end = std::min(n, (task + 1) * kChunk);
    for (int64_t j = task * kChunk; j < end; ++j) {
      if (g.weight_decay != 0.0f) p[j] *= decay;
      m[j] = m[j] * b1 + grad[j] * one_minus_b1;
      v[j] = v[j] * b2 + grad[j] * grad[j] * one_minus_b2;
      const float denom = std::sqrt(v[j]) / bc2_sqrt + eps;
      p[j] -= step_size * (m[j] / denom);
    }
  });
}

void Optimizer::MuonUpdate(const ParamTensor& t, float lr, float momentum) {
  float* p = model_->param(t);
  const float* grad = model_->grad(t);
  float* buf = momentum_.data() + t.offset;
  const int64_t n = t.numel;
  update_.resize(n);
  float* u = update_.data();
  kernels::ThreadPool* pool = model_->backend()->host_thread_pool();
  // buf = lerp(buf, g, 1 − μ);  u = lerp(g, buf, μ)  (Nesterov)
  ops::ParallelFor(pool, CeilDiv(n, kChunk), [&](int64_t task) {
    const int64_t end = std::min(n, (task + 1) * kChunk);
    for (int64_t j = task * kChunk; j < end; ++j) {
      buf[j] += (1.0f - momentum) * (grad[j] - buf[j]);
      u[j] = grad[j] + momentum * (buf[j] - grad[j]);
    }
  });
  NewtonSchulz5(model_->backend(), u, t.rows(), t.cols(), config_.ns_steps);
  const float scale =
      lr * std::sqrt(std::max(1.0f, static_cast<float>(t.rows()) / static_cast<float>(t.cols())));
  ops::ParallelFor(pool, CeilDiv(n, kChunk), [&](int64_t task) {
    const int64_t end = std::min(n, (task + 1) * kChunk);
    for (int64_t j = task * kChunk; j < end; ++j) p[j] -= scale * u[j];
  });
}

void NewtonSchulz5(kernels::KernelBackend* backend, float* matrix, int64_t rows, int64_t cols,
                   int steps) {
  constexpr float a = 3.4445f, b = -4.7750f, c = 2.0315f;
  // Work on X [m, n] with m <= n (the transpose of a tall matrix).
  const bool tall = rows > cols;
  const int64_t m = tall ? cols : rows, n = tall ? rows : cols;
  std::vector<float> x(m * n), x_next(m * n), A(m * m), B(m * m);
  if (tall) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = 0; k < cols; ++k) x[k * n + r] = matrix[r * cols + k];
    }
  } else {
    std::memcpy(x.data(), matrix, m * n * sizeof(float));
  }
  double ss = 0.0;
  for (float v : x) ss += double{v} * v;
  const float inv_norm = static_cast<float>(1.0 / (std::sqrt(ss) + 1e-7));
  for (float& v : x) v *= inv_norm;
  for (int s = 0; s < steps; ++s) {
    // A = X·Xᵀ [m, m]
    backend->Gemm(false, true, m, m, n, 1.0f, x.data(), n, x.data(), n, 0.0f, A.data(), m);
    // B = b·A + c·A·A
    B = A;
    backend->Gemm(false, false, m, m, m, c, A.data(), m, A.data(), m, b, B.data(), m);
    // X = a·X + B·X
    x_next = x;
    backend->Gemm(false, false, m, n, m, 1.0f, B.data(), m, x.data(), n, a, x_next.data(), n);
    x.swap(x_next);
  }
  if (tall) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = 0; k < cols; ++k) matrix[r * cols + k] = x[k * n + r];
    }
  } else {
    std::memcpy(matrix, x.data(), m * n * sizeof(float));
  }
}

float LrSchedule::Multiplier(int64_t s) const {
  if (warmup_steps > 0 && s < warmup_steps) {
    return static_cast<float>(s + 1) / static_cast<float>(warmup_steps);
  }
  if (warmdown_steps <= 0 || s <= total_steps - warmdown_steps) return 1.0f;
  const float progress = static_cast<float>(total_steps - s) / static_cast<float>(warmdown_steps);
  return progress + (1.0f - progress) * final_lr_frac;
}

float ClipGradNorm(kernels::ThreadPool* pool, std::span<float> grads, float max_norm) {
  const int64_t n = static_cast<int64_t>(grads.size());
  const int64_t tasks = CeilDiv(n, kChunk);
  std::vector<double> partial(tasks, 0.0);
  ops::ParallelFor(pool, tasks, [&](int64_t task) {
    const int64_t end = std::min(n, (task + 1) * kChunk);
    double s = 0.0;
    for (int64_t j = task * kChunk; j < end; ++j) s += double{grads[j]} * grads[j];
    partial[task] = s;
  });
  double total = 0.0;
  for (double s : partial) total += s;  // fixed order: deterministic
  const float norm = static_cast<float>(std::sqrt(total));
  if (max_norm > 0.0f && norm > max_norm) {
    const float scale = max_norm / (norm + 1e-6f);
    ops::ParallelFor(pool, tasks, [&](int64_t task) {
      const int64_t end = std::min(n, (task + 1) * kChunk);
      for (int64_t j = task * kChunk; j < end; ++j) grads[j] *= scale;
    });
  }
  return norm;
}

}  // namespace octet::trainer
