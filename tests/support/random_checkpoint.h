// Random-weight checkpoints with the real shapes of known models, for
// benchmarks and tests (a Qwen3-0.6B-shaped model without downloading one).
// The folder is a Hugging Face layout the engine (and other runtimes) load:
// config.json, model.safetensors, and for NVFP4 hf_quant_config.json with
// ModelOpt-style packed weights and scales (exclude_modules naming what stays
// BF16). A mixture-of-experts shape writes a Qwen3-MoE checkpoint (model_type
// qwen3_moe, one tensor set per expert). Weights are uniform with unit-
// variance outputs (scale 1.7/sqrt(fan-in)), norms are ones; the same seed
// writes the same bytes.
//
// Test support (octet_test_support, tests/support/CMakeLists.txt): tests and
// benchmark programs link it; no production library carries it. Its names
// stay in octet::engine.
#pragma once

#include <cstdint>
#include <string>

#include "octet/base/status.h"

namespace octet::engine {

struct RandomModelShape {
  // Or LlamaForCausalLM, Qwen2ForCausalLM, Qwen3MoeForCausalLM (needs
  // num_experts), Glm4MoeForCausalLM (the same MoE fields).
  std::string architecture = "Qwen3ForCausalLM";
  int64_t vocab_size = 320;
  int64_t hidden_size = 64;
  int64_t intermediate_size = 128;
  int64_t num_layers = 2;
  int64_t num_heads = 4;
  int64_t num_kv_heads = 2;
  int64_t head_dim = 16;
  double rope_theta = 1e6;
  bool tie_word_embeddings = true;
  bool nvfp4 = false;           // linear layers as ModelOpt NVFP4 (lm_head excluded)
  bool attention_bias = false;  // q/k/v biases (Qwen2 always has them)
  int64_t max_position_embeddings = 40960;
  // Llama-3.1/3.2 rope_scaling (rope_type llama3, factor 32, original context 8192).
  bool llama3_rope_scaling = false;
  uint64_t seed = 42;
  // Qwen3-MoE: every layer's MLP is a router `mlp.gate` [num_experts, hidden]
  // (softmax, top experts_per_token, normalised) and `mlp.experts.{e}` gated
  // MLPs of moe_intermediate_size; intermediate_size is then only the config's.
  int64_t num_experts = 0;
  int64_t experts_per_token = 0;
  int64_t moe_intermediate_size = 0;
  // The routed experts alone as ModelOpt NVFP4 (per expert, gate_proj and
  // up_proj share one weight_scale_2), attention, routers, embeddings and
  // lm_head BF16 and listed in exclude_modules, as ModelOpt exports MoE
  // models. `nvfp4` quantizes attention too; routers never.
  bool nvfp4_experts = false;
  // GLM-4.5 (Glm4MoeForCausalLM): sigmoid routing with a score-correction
  // bias (zeros), `shared_experts` shared experts of moe_intermediate_size,
  // q/k/v biases, QK norms, half-rotary heads, and `mtp_layers` multi-token-
  // prediction layers after the decoder layers (enorm, hnorm, eh_proj, a
  // full MoE decoder layer, shared_head.norm). Every layer is an MoE layer.
  int64_t shared_experts = 1;
  int64_t mtp_layers = 0;

  // Qwen3-0.6B: vocab 151936, hidden 1024, 28 layers, 16 heads / 8 kv, head_dim
  // 128, intermediate 3072, tied embeddings (BF16, ~1.2 GB on disk).
  static RandomModelShape Qwen3_0_6B();
  // Qwen3-30B-A3B's layer shape with `layers` layers (it has 48): vocab
  // 151936, hidden 2048, 32 heads / 4 kv of head_dim 128, 128 experts of 768,
  // top-8, untied lm_head; NVFP4 experts (nvfp4_experts). Per layer ~340 MB of
  // experts and ~38 MB of BF16 attention; embeddings and lm_head 622 MB each.
  static RandomModelShape Qwen3_30B_A3B(int64_t layers);
  // GLM-4.5's architecture (above) at that layer shape, with one shared
  // expert and one MTP layer: `layers` decoder layers plus the MTP layer.
  static RandomModelShape Glm4MoeAtQwen3_30B_A3B(int64_t layers);
};

// Writes the checkpoint into `dir` (created); config.json last, so its presence
// marks a complete checkpoint.
Status WriteRandomCheckpoint(const RandomModelShape& shape, const std::string& dir);

}  // namespace octet::engine
