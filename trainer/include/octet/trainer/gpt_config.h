// The shape of a nanochat-style GPT (../shared/fixtures/README.md, section B):
// untied token embedding and lm_head, parameter-free RMSNorm, half-split
// rotary embeddings followed by QK-norm, ReLU² MLP of width 4·n_embd, no
// biases, logits soft-capped as softcap·tanh(z / softcap).
//
// On disk it is the `config.json` of a checkpoint folder, with
// "model_type": "nanochat" and nanochat's own key names (n_layer, n_head,
// n_kv_head, n_embd, vocab_size, sequence_len, rope_theta, softcap, norm_eps);
// ToJson also writes the usual Hugging Face aliases (hidden_size,
// num_hidden_layers, ...) so generic tools can read the size.
//
// Presets follow nanochat's depth → width rule: n_embd = 64·depth, heads of
// head_dim 128 (d12: 768 wide, 6 heads; d20: 1280 wide, 10 heads). "tiny" is a
// small CPU demo shape. The vocabulary size comes from the tokenizer and the
// sequence length from the run, so presets take both.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "octet/base/status.h"

namespace octet::trainer {

struct GptConfig {
  int n_layer = 0;
  int n_head = 0;
  int n_kv_head = 0;  // grouped-query attention when < n_head (n_head % n_kv_head == 0)
  int n_embd = 0;
  int vocab_size = 0;
  int sequence_len = 0;  // longest sequence (T) the run uses
  float rope_theta = 10000.0f;
  float softcap = 15.0f;  // 0 disables the soft-cap
  float norm_eps = 1e-6f;
  // The token every training document starts with (-1: unknown). Written to
  // config.json as bos_token_id and eos_token_id (generation of a base model
  // stops where a new document would begin); not part of the shape.
  int bos_token_id = -1;

  int head_dim() const { return n_head > 0 ? n_embd / n_head : 0; }
  int kv_dim() const { return n_kv_head * head_dim(); }
  int mlp_dim() const { return 4 * n_embd; }

  // Every count positive, n_embd divisible by n_head into an even head_dim,
  // n_head divisible by n_kv_head. The error names the field.
  Status Validate() const;

  // Parameters: all of them, and those that are not the token embedding
  // (nanochat's 6N counts lm_head but not wte).
  int64_t NumParams() const;
  int64_t NumNonEmbeddingParams() const;
  // Training FLOPs per token at sequence length `seq_len`: 6·N (matmuls
  // forward+backward, N without wte) + 12·n_layer·n_head·head_dim·seq_len
  // (attention scores and values, forward+backward), as nanochat estimates it.
  double TrainingFlopsPerToken(int seq_len) const;

  // config.json text (nanochat keys plus Hugging Face aliases).
  std::string ToJson() const;
  // Parses config.json; `what` names the file in errors. Accepts nanochat keys
  // (and the Hugging Face aliases when those are absent). model_type, when
  // present, must be "nanochat".
  static Result<GptConfig> FromJson(std::string_view text, const std::string& what);
  static Result<GptConfig> Load(const std::string& path);

  // "tiny" or "d<depth>" (d2 ... d64). Errors list the known names.
  static Result<GptConfig> Preset(std::string_view name, int vocab_size, int sequence_len);
  // Names shown in --help.
  static std::vector<std::string> PresetNames();
  // The sequence length a preset is meant for (tiny 256, d<N> 2048).
  static int PresetSequenceLen(std::string_view name);
};

}  // namespace octet::trainer
