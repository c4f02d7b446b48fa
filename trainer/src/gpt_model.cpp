#include "octet/trainer/gpt_model.h"

#include <cmath>
#include <cstring>
#include <random>

#include "gpt_ops.h"

namespace octet::trainer {

// Everything the backward pass reads, for the current [B, T], plus backward
// scratch. Per-layer arrays are stacked: layer l's slice starts at l · (size of
// one layer's slice). Shapes: N = B·T rows, C n_embd, Q = C + 2·kv_dim (fused
// q|k|v row), F = 4·C, V vocab.
struct GptModel::Activations {
  int B = 0;
  int T = 0;
  bool has_targets = false;
  bool logits_valid = false;
  std::vector<int32_t> inputs;     // [N]
  std::vector<int32_t> targets;    // [N]
  std::vector<int32_t> positions;  // [N] t of each row, for RoPE
  std::vector<float> rstd0;        // [N] initial norm of the embedding
  std::vector<float> resid;        // [L+1, N, C] input of block l; [L] is the final stream
  std::vector<float> ln1;          // [L, N, C] norm(x) before attention
  std::vector<float> rstd1;        // [L, N]
  std::vector<float> qkv;          // [L, N, Q] q|k after RoPE + QK-norm, v as projected
  std::vector<float> rstd_qk;      // [L, N, H + Hkv]
  std::vector<float> probs;        // [L, B, H, T, T] causal softmax
  std::vector<float> atty;         // [L, N, C] attention output before c_proj
  std::vector<float> resid_mid;    // [L, N, C] stream after the attention residual
  std::vector<float> ln2;          // [L, N, C]
  std::vector<float> rstd2;        // [L, N]
  std::vector<float> fc_pre;       // [L, N, F] before ReLU²
  std::vector<float> fc_act;       // [L, N, F] after ReLU²
  std::vector<float> lnf;          // [N, C] final norm
  std::vector<float> rstdf;        // [N]
  std::vector<float> logits;       // [N, V] soft-capped; becomes dlogits in Backward
  std::vector<float> lse;          // [N]
  std::vector<float> losses;       // [N]
  // Backward scratch.
  std::vector<float> dresid;  // [N, C] gradient of the residual stream
  std::vector<float> dtmp;    // [N, C]
  std::vector<float> dqkv;    // [N, Q]
  std::vector<float> dfc;     // [N, F]
  std::vector<float> dprobs;  // [B, H, T, T]
};

namespace {

// Standard normal draws from a 64-bit Mersenne Twister via Box–Muller: the
// same numbers on every platform (std::normal_distribution is not specified
// bit-for-bit).
class NormalRng {
 public:
  explicit NormalRng(uint64_t seed) : gen_(seed) {}
  double Next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1;
    do {
      u1 = Uniform();
    } while (u1 <= 0.0);
    const double u2 = Uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2.0 * M_PI * u2);
    has_spare_ = true;
    return r * std::cos(2.0 * M_PI * u2);
  }

 private:
  double Uniform() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }
  std::mt19937_64 gen_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

}  // namespace

GptModel::GptModel(const GptConfig& config, kernels::KernelBackend* backend)
    : config_(config), backend_(backend), acts_(std::make_unique<Activations>()) {}

GptModel::~GptModel() = default;

Result<std::unique_ptr<GptModel>> GptModel::Create(const GptConfig& config,
                                                   kernels::KernelBackend* backend) {
  OCTET_RETURN_IF_ERROR(config.Validate());
  if (!backend) return InvalidArgumentError("GptModel needs a kernel backend");
  std::unique_ptr<GptModel> m(new GptModel(config, backend));
  const int64_t C = config.n_embd, V = config.vocab_size, KV = config.kv_dim(),
                F = config.mlp_dim();
  int64_t offset = 0;
  auto add = [&](std::string name, std::vector<int64_t> shape, ParamKind kind, int layer) {
    ParamTensor t;
    t.name = std::move(name);
    t.numel = 1;
    for (int64_t d : shape) t.numel *= d;
    t.shape = std::move(shape);
    t.offset = offset;
    t.kind = kind;
    t.layer = layer;
    offset += t.numel;
    m->tensors_.push_back(std::move(t));
  };
  add("transformer.wte.weight", {V, C}, ParamKind::kEmbedding, -1);
  for (int l = 0; l < config.n_layer; ++l) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    // c_q, c_k, c_v adjacent: together one [C + 2·KV, C] matrix (fused qkv).
    add(p + "attn.c_q.weight", {C, C}, ParamKind::kBlockMatrix, l);
    add(p + "attn.c_k.weight", {KV, C}, ParamKind::kBlockMatrix, l);
    add(p + "attn.c_v.weight", {KV, C}, ParamKind::kBlockMatrix, l);
    add(p + "attn.c_proj.weight", {C, C}, ParamKind::kBlockMatrix, l);
    add(p + "mlp.c_fc.weight", {F, C}, ParamKind::kBlockMatrix, l);
    add(p + "mlp.c_proj.weight", {C, F}, ParamKind::kBlockMatrix, l);
  }
  add("lm_head.weight", {V, C}, ParamKind::kHead, -1);
  m->params_.assign(offset, 0.0f);
  m->grads_.assign(offset, 0.0f);

  // inv_freq[i] = 1 / theta^(2i/D) in float32, as transformers computes it.
  const int D = config.head_dim();
  m->inv_freq_.resize(D / 2);
  m->inv_freq_neg_.resize(D / 2);
  for (int i = 0; i < D / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(D);
    const float f = 1.0f / std::pow(config.rope_theta, exponent);
    m->inv_freq_[i] = f;
    m->inv_freq_neg_[i] = -f;
  }
  return m;
}

const ParamTensor* GptModel::Find(std::string_view name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

void GptModel::InitWeights(uint64_t seed) {
  NormalRng rng(seed);
  for (const auto& t : tensors_) {
    float* p = param(t);
    const bool zero = t.kind == ParamKind::kHead || t.name.ends_with("attn.c_proj.weight") ||
                      t.name.ends_with("mlp.c_proj.weight");
    if (zero) {
      std::fill(p, p + t.numel, 0.0f);
      continue;
    }
    double std_dev = 1.0;  // wte
    if (t.kind == ParamKind::kBlockMatrix) {
      const double fan_out = static_cast<double>(t.rows()), fan_in = static_cast<double>(t.cols());
      std_dev = std::min(1.0, std::sqrt(fan_out / fan_in)) / std::sqrt(fan_in);
    }
    for (int64_t i = 0; i < t.numel; ++i) p[i] = static_cast<float>(rng.Next() * std_dev);
  }
}

void GptModel::ZeroGrads() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

void GptModel::EnsureActivations(int B, int T) {
  Activations& a = *acts_;
  if (a.B == B && a.T == T) return;
  const int64_t L = config_.n_layer, C = config_.n_embd, V = config_.vocab_size, H = config_.n_head,
                Hkv = config_.n_kv_head, F = config_.mlp_dim();
  const int64_t Q = C + 2 * config_.kv_dim();
  const int64_t N = int64_t{B} * T, TT = int64_t{B} * H * T * T;
  a.B = B;
  a.T = T;
  a.inputs.resize(N);
  a.targets.resize(N);
  a.positions.resize(N);
  for (int64_t i = 0; i < N; ++i) a.positions[i] = static_cast<int32_t>(i % T);
  a.rstd0.resize(N);
  a.resid.resize((L + 1) * N * C);
  a.ln1.resize(L * N * C);
  a.rstd1.resize(L * N);
  a.qkv.resize(L * N * Q);
  a.rstd_qk.resize(L * N * (H + Hkv));
  a.probs.resize(L * TT);
  a.atty.resize(L * N * C);
  a.resid_mid.resize(L * N * C);
  a.ln2.resize(L * N * C);
  a.rstd2.resize(L * N);
  a.fc_pre.resize(L * N * F);
  a.fc_act.resize(L * N * F);
  a.lnf.resize(N * C);
  a.rstdf.resize(N);
  a.logits.resize(N * V);
  a.lse.resize(N);
  a.losses.resize(N);
  a.dresid.resize(N * C);
  a.dtmp.resize(N * C);
  a.dqkv.resize(N * Q);
  a.dfc.resize(N * F);
  a.dprobs.resize(TT);
}

std::span<const float> GptModel::logits() const {
  if (!acts_->logits_valid) return {};
  return {acts_->logits.data(), acts_->logits.size()};
}

std::span<const float> GptModel::position_losses() const {
  if (!acts_->has_targets) return {};
  return {acts_->losses.data(), acts_->losses.size()};
}

Result<float> GptModel::Forward(const int32_t* inputs, const int32_t* targets, int B, int T) {
  if (B <= 0 || T <= 0) {
    return InvalidArgumentError("batch shape [" + std::to_string(B) + ", " + std::to_string(T) +
                                "] must be positive");
  }
  if (T > config_.sequence_len) {
    return InvalidArgumentError("sequence length " + std::to_string(T) +
                                " exceeds the model's sequence_len " +
                                std::to_string(config_.sequence_len));
  }
  const int64_t N = int64_t{B} * T;
  const int32_t V = config_.vocab_size;
  for (int64_t i = 0; i < N; ++i) {
    if (inputs[i] < 0 || inputs[i] >= V) {
      return InvalidArgumentError("input token " + std::to_string(inputs[i]) + " at [" +
                                  std::to_string(i / T) + ", " + std::to_string(i % T) +
                                  "] is outside the vocabulary [0, " + std::to_string(V) + ")");
    }
    if (targets && (targets[i] < 0 || targets[i] >= V)) {
      return InvalidArgumentError("target token " + std::to_string(targets[i]) + " at [" +
                                  std::to_string(i / T) + ", " + std::to_string(i % T) +
                                  "] is outside the vocabulary [0, " + std::to_string(V) + ")");
    }
  }
  EnsureActivations(B, T);
  Activations& a = *acts_;
  kernels::KernelBackend* be = backend_;
  kernels::ThreadPool* pool = be->host_thread_pool();
  const int64_t L = config_.n_layer, C = config_.n_embd, H = config_.n_head,
                Hkv = config_.n_kv_head, D = config_.head_dim(), KV = config_.kv_dim(),
                F = config_.mlp_dim();
  const int64_t Q = C + 2 * KV;
  const float eps = config_.norm_eps;
  std::memcpy(a.inputs.data(), inputs, N * sizeof(int32_t));
  if (targets) std::memcpy(a.targets.data(), targets, N * sizeof(int32_t));

  // x = norm(wte[idx])   [N, C]
  float* x0 = a.resid.data();
  ops::EmbeddingForward(pool, x0, a.inputs.data(), params_.data() + tensors_[0].offset, N, C);
  ops::RmsNormForward(pool, x0, a.rstd0.data(), x0, N, 1, C, C, eps);

  const ops::AttentionShape shape{B, T, H, Hkv, D, Q, Q, C, 1.0f / std::sqrt(float(D))};
  for (int64_t l = 0; l < L; ++l) {
    const ParamTensor* w = &tensors_[1 + 6 * l];  // c_q, c_k, c_v, attn.c_proj, c_fc, mlp.c_proj
    const float* w_qkv = params_.data() + w[0].offset;   // [Q, C]
    const float* w_o = params_.data() + w[3].offset;     // [C, C]
    const float* w_fc = params_.data() + w[4].offset;    // [F, C]
    const float* w_proj = params_.data() + w[5].offset;  // [C, F]
    const float* x = a.resid.data() + l * N * C;
    float* ln1 = a.ln1.data() + l * N * C;
    float* rstd1 = a.rstd1.data() + l * N;
    float* qkv = a.qkv.data() + l * N * Q;
    float* rstd_qk = a.rstd_qk.data() + l * N * (H + Hkv);
    float* probs = a.probs.data() + l * int64_t{B} * H * T * T;
    float* atty = a.atty.data() + l * N * C;
    float* mid = a.resid_mid.data() + l * N * C;
    float* ln2 = a.ln2.data() + l * N * C;
    float* rstd2 = a.rstd2.data() + l * N;
    float* fc_pre = a.fc_pre.data() + l * N * F;
    float* fc_act = a.fc_act.data() + l * N * F;
    float* out = a.resid.data() + (l + 1) * N * C;

    // Attention: h = norm(x); q|k|v = h·Wqkvᵀ; rope(q|k); norm(q|k) per head.
    ops::RmsNormForward(pool, ln1, rstd1, x, N, 1, C, C, eps);
    ops::MatmulForward(be, qkv, Q, ln1, C, w_qkv, N, C, Q, false);
    be->Rope(qkv, N, Q, H + Hkv, D, a.positions.data(), inv_freq_.data());
    ops::RmsNormForward(pool, qkv, rstd_qk, qkv, N, H + Hkv, D, Q, eps);
    ops::AttentionForward(be, pool, shape, qkv, qkv + C, qkv + C + KV, probs, atty);
    // mid = x + y·Woᵀ
    std::memcpy(mid, x, N * C * sizeof(float));
    ops::MatmulForward(be, mid, C, atty, C, w_o, N, C, C, true);
    // MLP: out = mid + relu(norm(mid)·Wfcᵀ)²·Wprojᵀ
    ops::RmsNormForward(pool, ln2, rstd2, mid, N, 1, C, C, eps);
    ops::MatmulForward(be, fc_pre, F, ln2, C, w_fc, N, C, F, false);
    ops::Relu2Forward(pool, fc_act, fc_pre, N * F);
    std::memcpy(out, mid, N * C * sizeof(float));
    ops::MatmulForward(be, out, C, fc_act, F, w_proj, N, F, C, true);
  }

  // logits = softcap(norm(x)·Wlmᵀ)   [N, V]
  const ParamTensor& lm = tensors_.back();
  ops::RmsNormForward(pool, a.lnf.data(), a.rstdf.data(), a.resid.data() + L * N * C, N, 1, C, C,
                      eps);
  ops::MatmulForward(be, a.logits.data(), V, a.lnf.data(), C, params_.data() + lm.offset, N, C, V,
                     false);
  ops::SoftcapCrossEntropyForward(pool, a.logits.data(), a.lse.data(), a.losses.data(),
                                  targets ? a.targets.data() : nullptr, N, V, config_.softcap);
  a.logits_valid = true;
  a.has_targets = targets != nullptr;
  if (!targets) return 0.0f;
  double sum = 0.0;
  for (int64_t i = 0; i < N; ++i) sum += a.losses[i];
  return static_cast<float>(sum / static_cast<double>(N));
}

Status GptModel::Backward(float loss_scale, const GradReadyFn& on_ready) {
  Activations& a = *acts_;
  if (!a.has_targets || !a.logits_valid) {
    return FailedPreconditionError(
        "Backward needs a Forward with targets first (and runs once per Forward)");
  }
  kernels::KernelBackend* be = backend_;
  kernels::ThreadPool* pool = be->host_thread_pool();
  const int B = a.B, T = a.T;
  const int64_t N = int64_t{B} * T;
  const int64_t L = config_.n_layer, C = config_.n_embd, H = config_.n_head,
                Hkv = config_.n_kv_head, D = config_.head_dim(), KV = config_.kv_dim(),
                F = config_.mlp_dim(), V = config_.vocab_size;
  const int64_t Q = C + 2 * KV;
  auto ready = [&](int64_t begin, int64_t end) {
    if (on_ready) on_ready(begin, end);
  };

  // Loss → logits: dlogits (in place of the logits)   [N, V]
  ops::SoftcapCrossEntropyBackward(pool, a.logits.data(), a.lse.data(), a.targets.data(), N, V,
                                   config_.softcap, loss_scale / static_cast<float>(N));
  a.logits_valid = false;
  // lm_head: dWlm += dlogitsᵀ·lnf; dlnf = dlogits·Wlm   [N, C]
  const ParamTensor& lm = tensors_.back();
  ops::MatmulBackward(be, a.dtmp.data(), C, grads_.data() + lm.offset, a.logits.data(), V,
                      a.lnf.data(), C, params_.data() + lm.offset, N, C, V, false);
  ready(lm.offset, lm.offset + lm.numel);
  // final norm → gradient of the residual stream
  float* dresid = a.dresid.data();
  ops::RmsNormBackward(pool, dresid, a.dtmp.data(), a.lnf.data(), a.rstdf.data(), N, 1, C, C,
                       false);

  const ops::AttentionShape shape{B, T, H, Hkv, D, Q, Q, C, 1.0f / std::sqrt(float(D))};
  for (int64_t l = L - 1; l >= 0; --l) {
    const ParamTensor* w = &tensors_[1 + 6 * l];
    const float* w_qkv = params_.data() + w[0].offset;
    const float* w_o = params_.data() + w[3].offset;
    const float* w_fc = params_.data() + w[4].offset;
    const float* w_proj = params_.data() + w[5].offset;
    float* dw_qkv = grads_.data() + w[0].offset;
    float* dw_o = grads_.data() + w[3].offset;
    float* dw_fc = grads_.data() + w[4].offset;
    float* dw_proj = grads_.data() + w[5].offset;
    const float* ln1 = a.ln1.data() + l * N * C;
    const float* rstd1 = a.rstd1.data() + l * N;
    const float* qkv = a.qkv.data() + l * N * Q;
    const float* rstd_qk = a.rstd_qk.data() + l * N * (H + Hkv);
    const float* probs = a.probs.data() + l * int64_t{B} * H * T * T;
    const float* atty = a.atty.data() + l * N * C;
    const float* ln2 = a.ln2.data() + l * N * C;
    const float* rstd2 = a.rstd2.data() + l * N;
    const float* fc_pre = a.fc_pre.data() + l * N * F;
    const float* fc_act = a.fc_act.data() + l * N * F;
    float* dtmp = a.dtmp.data();
    float* dfc = a.dfc.data();
    float* dqkv = a.dqkv.data();

    // MLP (out = mid + act·Wprojᵀ): dWproj += dresidᵀ·act; dact = dresid·Wproj
    ops::MatmulBackward(be, dfc, F, dw_proj, dresid, C, fc_act, F, w_proj, N, F, C, false);
    ready(w[5].offset, w[5].offset + w[5].numel);
    ops::Relu2Backward(pool, dfc, dfc, fc_pre, N * F);
    // dWfc += dpreᵀ·ln2; dln2 = dpre·Wfc
    ops::MatmulBackward(be, dtmp, C, dw_fc, dfc, F, ln2, C, w_fc, N, C, F, false);
    ready(w[4].offset, w[4].offset + w[4].numel);
    ops::RmsNormBackward(pool, dresid, dtmp, ln2, rstd2, N, 1, C, C, true);

    // Attention (mid = x + y·Woᵀ): dWo += dresidᵀ·y; dy = dresid·Wo
    ops::MatmulBackward(be, dtmp, C, dw_o, dresid, C, atty, C, w_o, N, C, C, false);
    ready(w[3].offset, w[3].offset + w[3].numel);
    ops::AttentionBackward(be, pool, shape, qkv, qkv + C, qkv + C + KV, probs, dtmp,
                           a.dprobs.data(), dqkv, dqkv + C, dqkv + C + KV);
    // QK-norm, then RoPE (its transpose is the rotation by −angle), in place.
    ops::RmsNormBackward(pool, dqkv, dqkv, qkv, rstd_qk, N, H + Hkv, D, Q, false);
    be->Rope(dqkv, N, Q, H + Hkv, D, a.positions.data(), inv_freq_neg_.data());
    // dWqkv += dqkvᵀ·ln1; dln1 = dqkv·Wqkv
    ops::MatmulBackward(be, dtmp, C, dw_qkv, dqkv, Q, ln1, C, w_qkv, N, C, Q, false);
    ready(w[0].offset, w[2].offset + w[2].numel);
    ops::RmsNormBackward(pool, dresid, dtmp, ln1, rstd1, N, 1, C, C, true);
  }

  // x0 = norm(wte[idx]): demb, then scatter-add into dwte.
  ops::RmsNormBackward(pool, a.dtmp.data(), dresid, a.resid.data(), a.rstd0.data(), N, 1, C, C,
                       false);
  const ParamTensor& wte = tensors_[0];
  ops::EmbeddingBackward(pool, grads_.data() + wte.offset, a.dtmp.data(), a.inputs.data(), N, C);
  ready(wte.offset, wte.offset + wte.numel);
  return Status::Ok();
}

}  // namespace octet::trainer
