// Random-weight checkpoints with the real shapes of known models, for
// benchmarks and tests (a Qwen3-0.6B-shaped model without downloading one).
// The folder is a Hugging Face layout the engine (and other runtimes) load:
// config.json, model.safetensors, and for NVFP4 hf_quant_config.json with
// ModelOpt-style packed weights and scales. Weights are uniform with unit-
// variance outputs (scale 1.7/sqrt(fan-in)), norms are ones; the same seed
// writes the same bytes.
#pragma once

#include <cstdint>
#include <string>

#include "octet/base/status.h"

namespace octet::engine {

struct RandomModelShape {
  std::string architecture = "Qwen3ForCausalLM";  // or LlamaForCausalLM, Qwen2ForCausalLM
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

  // Qwen3-0.6B: vocab 151936, hidden 1024, 28 layers, 16 heads / 8 kv, head_dim
  // 128, intermediate 3072, tied embeddings (BF16, ~1.2 GB on disk).
  static RandomModelShape Qwen3_0_6B();
};

// Writes the checkpoint into `dir` (created); config.json last, so its presence
// marks a complete checkpoint.
Status WriteRandomCheckpoint(const RandomModelShape& shape, const std::string& dir);

}  // namespace octet::engine
