// A Hugging Face model folder's config.json (+ generation_config.json,
// hf_quant_config.json) reduced to what the forward pass needs.
//
// Supported architectures: LlamaForCausalLM (Llama-3, with `rope_scaling`
// rope_type llama3), Qwen2ForCausalLM (q/k/v biases), Qwen3ForCausalLM
// (q_norm/k_norm per head before RoPE, explicit head_dim), the mixture-of-
// experts Qwen3MoeForCausalLM (softmax router) and Glm4MoeForCausalLM
// (GLM-4.5: sigmoid router with a score-correction bias and group-limited
// top-k, shared experts, partial RoPE, an optional MTP layer),
// MiniCPMForCausalLM (scaled embedding, residual branches and logits), and
// nanochat ("model_type": "nanochat", what `octet train` writes; nanochat's
// key names n_layer/n_head/n_kv_head/n_embd/sequence_len/softcap/norm_eps and
// tensor names transformer.wte / transformer.h.{i}.attn.c_q ... / lm_head).
// Weights F32, BF16, F16, and ModelOpt NVFP4 (quant_algo NVFP4, group size
// 16; MoE experts one tensor set per expert, as ModelOpt exports them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "octet/base/status.h"

namespace octet::engine {

enum class Architecture { kLlama, kQwen2, kQwen3, kQwen3Moe, kGlm4Moe, kMiniCpm, kNanochat };

// The config.json `model_type` values the engine loads, for messages
// ("llama, qwen2, qwen3, qwen3_moe, glm4_moe, minicpm, nanochat").
std::string SupportedModelTypes();

// A mixture-of-experts MLP (Qwen3-MoE, GLM-4.5), as config.json describes it.
struct MoeConfig {
  enum class Scoring { kSoftmax, kSigmoid };
  int64_t num_experts = 0;  // 0: no MoE layers
  int64_t experts_per_token = 0;
  int64_t expert_intermediate_size = 0;  // moe_intermediate_size
  bool norm_topk_prob = false;
  Scoring scoring = Scoring::kSoftmax;
  // Sigmoid routers: experts in n_group consecutive groups; only the
  // topk_group groups with the largest group score (sum of their two largest
  // biased scores) compete. 1/1: no group limit.
  int64_t n_group = 1;
  int64_t topk_group = 1;
  bool score_correction_bias = false;  // mlp.gate.e_score_correction_bias [E], F32
  float routed_scaling_factor = 1.0f;
  int64_t shared_intermediate_size = 0;  // 0: no shared expert
  std::vector<bool> moe_layer;           // per decoder layer: MoE or dense MLP
};

struct RopeScaling {
  bool llama3 = false;  // rope_type "llama3"; otherwise no scaling
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position_embeddings = 8192.0;
};

struct QuantConfig {
  bool nvfp4 = false;  // quant_algo NVFP4 (ModelOpt)
  int64_t group_size = 16;
  std::vector<std::string> exclude_modules;  // fnmatch patterns (exclude_modules / ignore)

  // Whether a module ("model.layers.0.mlp.down_proj", "lm_head") is left unquantized.
  bool Excluded(const std::string& module) const;
};

struct ModelConfig {
  Architecture arch = Architecture::kLlama;
  std::string architecture_name;  // as written in config.json
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  float rms_norm_eps = 1e-6f;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v biases (Qwen2 always; Llama: also o_proj)
  bool mlp_bias = false;        // Llama mlp_bias: gate/up/down biases
  bool qk_norm = false;         // Qwen3, nanochat
  // nanochat's variations on the Llama block (all false/0 for the others):
  bool parameter_free_norms = false;  // every RMSNorm is x·rsqrt(mean(x²)+eps), no weight
  bool embedding_norm = false;        // RMSNorm right after the embedding lookup
  bool qk_norm_after_rope = false;    // QK-norm after RoPE (Qwen3: before)
  bool relu2_mlp = false;             // MLP relu(x·W_fcᵀ)²·W_projᵀ instead of SwiGLU
  float logit_softcap = 0.0f;         // > 0: logits = cap·tanh(z / cap)
  // Partial RoPE (GLM-4.5): only the first rotary_dim features of each head
  // rotate (pairs i, i + rotary_dim/2); the others pass. = head_dim when full.
  int64_t rotary_dim = 0;
  // MiniCPM's scales (1 elsewhere): x = embed * embedding_scale; each block's
  // output is multiplied by residual_scale before it is added to x; the final
  // normed hidden state by logit_scale before lm_head.
  float embedding_scale = 1.0f;
  float residual_scale = 1.0f;
  float logit_scale = 1.0f;
  MoeConfig moe;
  // Multi-token-prediction layers stored after the decoder layers
  // (num_nextn_predict_layers, GLM-4.5 / DeepSeek-V3 layout).
  int64_t num_mtp_layers = 0;
  int64_t max_position_embeddings = 0;
  int32_t bos_token_id = -1;
  std::vector<int32_t> eos_token_ids;  // config.json and generation_config.json, merged
  std::string torch_dtype;
  QuantConfig quant;
};

// Whether DIR looks like a model folder: it exists, is a folder and holds a
// config.json; the error says which of the three is not so (a mistyped path
// reads "does not exist", not as a missing file inside it).
Status CheckModelFolder(const std::string& dir);
// Reads DIR/config.json (required), DIR/generation_config.json and
// DIR/hf_quant_config.json (optional). Errors name the file and the key.
Result<ModelConfig> LoadModelConfig(const std::string& dir);
// The same from config.json text (for tests); `where` names it in errors.
Result<ModelConfig> ParseModelConfig(const std::string& json_text, const std::string& where);

// RoPE inverse frequencies [rotary_dim / 2], float32, with Llama-3 scaling
// applied (as transformers computes them).
std::vector<float> RopeInvFreq(const ModelConfig& config);

}  // namespace octet::engine
