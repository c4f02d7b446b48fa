#include "random_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/base/xorshift_rng.h"
#include "octet/engine/nvfp4.h"
#include "octet/engine/safetensors.h"

namespace octet::engine {
namespace {

using Rng = XorShiftRng;

std::vector<float> RandomMatrix(int64_t rows, int64_t cols, Rng& rng) {
  std::vector<float> w(static_cast<size_t>(rows * cols));
  const float scale = 1.7f / std::sqrt(static_cast<float>(cols));
  for (auto& x : w) x = rng.Next() * scale;
  return w;
}

}  // namespace

RandomModelShape RandomModelShape::Qwen3_0_6B() {
  RandomModelShape s;
  s.architecture = "Qwen3ForCausalLM";
  s.vocab_size = 151936;
  s.hidden_size = 1024;
  s.intermediate_size = 3072;
  s.num_layers = 28;
  s.num_heads = 16;
  s.num_kv_heads = 8;
  s.head_dim = 128;
  s.rope_theta = 1e6;
  s.tie_word_embeddings = true;
  return s;
}

RandomModelShape RandomModelShape::Qwen3_30B_A3B(int64_t layers) {
  RandomModelShape s;
  s.architecture = "Qwen3MoeForCausalLM";
  s.vocab_size = 151936;
  s.hidden_size = 2048;
  s.intermediate_size = 6144;
  s.num_layers = layers;
  s.num_heads = 32;
  s.num_kv_heads = 4;
  s.head_dim = 128;
  s.rope_theta = 1e6;
  s.tie_word_embeddings = false;
  s.num_experts = 128;
  s.experts_per_token = 8;
  s.moe_intermediate_size = 768;
  s.nvfp4_experts = true;
  return s;
}

RandomModelShape RandomModelShape::Glm4MoeAtQwen3_30B_A3B(int64_t layers) {
  RandomModelShape s = Qwen3_30B_A3B(layers);
  s.architecture = "Glm4MoeForCausalLM";
  s.shared_experts = 1;
  s.mtp_layers = 1;
  return s;
}

namespace {

// A linear layer to write: `group` members share the NVFP4 global scale (the
// fused q/k/v and gate/up of a serving runtime).
struct Lin {
  std::string name;
  int64_t out, in;
  int group;
  bool bias;
};

// Writes `lins` of module prefix `p`: random weights (all drawn before any
// bias, in order), BF16 or NVFP4.
Status AddLinears(SafetensorsWriter& w, const std::string& p, const std::vector<Lin>& lins,
                  bool nvfp4, Rng& rng) {
  std::vector<std::vector<float>> mats;
  for (const Lin& li : lins) mats.push_back(RandomMatrix(li.out, li.in, rng));
  for (size_t i = 0; i < lins.size(); ++i) {
    const Lin& li = lins[i];
    if (li.bias) {
      std::vector<float> b(static_cast<size_t>(li.out));
      for (auto& x : b) x = 0.1f * rng.Next();
      OCTET_RETURN_IF_ERROR(w.AddFloat(p + li.name + ".bias", {li.out}, b.data(), DType::kBF16));
    }
    if (!nvfp4) {
      OCTET_RETURN_IF_ERROR(
          w.AddFloat(p + li.name + ".weight", {li.out, li.in}, mats[i].data(), DType::kBF16));
      continue;
    }
    float amax = 0;
    for (size_t j = 0; j < lins.size(); ++j) {
      if (lins[j].group == li.group) {
        amax = std::max(amax, AbsMax(mats[j].data(), static_cast<int64_t>(mats[j].size())));
      }
    }
    OCTET_ASSIGN_OR_RETURN(Nvfp4Tensor q,
                           QuantizeNvfp4(mats[i].data(), li.out, li.in, Nvfp4GlobalScale(amax)));
    OCTET_RETURN_IF_ERROR(AddNvfp4(w, p + li.name, q, 1.0f / 448.0f));
  }
  return Status::Ok();
}

}  // namespace

Status WriteRandomCheckpoint(const RandomModelShape& s, const std::string& dir) {
  const bool glm = s.architecture == "Glm4MoeForCausalLM";
  const bool moe = s.architecture == "Qwen3MoeForCausalLM" || glm;
  const bool qwen3 = s.architecture == "Qwen3ForCausalLM" || moe;  // QK norms
  const bool qwen2 = s.architecture == "Qwen2ForCausalLM";
  const bool llama = s.architecture == "LlamaForCausalLM";
  if (!qwen3 && !qwen2 && !llama) {
    return InvalidArgumentError("unknown architecture '" + s.architecture + "'");
  }
  if (moe && (s.num_experts < 1 || s.experts_per_token < 1 || s.experts_per_token > s.num_experts ||
              s.moe_intermediate_size < 1)) {
    return InvalidArgumentError(
        "an MoE shape needs num_experts, experts_per_token (at most num_experts) and "
        "moe_intermediate_size");
  }
  if (!glm && s.mtp_layers > 0) {
    return InvalidArgumentError("MTP layers are written for Glm4MoeForCausalLM only");
  }
  if (s.nvfp4 &&
      (s.hidden_size % 16 || s.intermediate_size % 16 || (s.num_heads * s.head_dim) % 16)) {
    return InvalidArgumentError("NVFP4 needs every input size to be a multiple of 16");
  }
  const bool fp4_experts = moe && (s.nvfp4 || s.nvfp4_experts);
  if (fp4_experts && (s.hidden_size % 16 || s.moe_intermediate_size % 16)) {
    return InvalidArgumentError(
        "NVFP4 experts need hidden and expert sizes that are multiples of 16");
  }
  OCTET_RETURN_IF_ERROR(MakeDirs(dir));
  const bool bias = qwen2 || glm || s.attention_bias;
  nlohmann::json cfg = {
      {"architectures", {s.architecture}},
      {"model_type",
       llama ? "llama" : (qwen2 ? "qwen2" : (glm ? "glm4_moe" : (moe ? "qwen3_moe" : "qwen3")))},
      {"vocab_size", s.vocab_size},
      {"hidden_size", s.hidden_size},
      {"intermediate_size", s.intermediate_size},
      {"num_hidden_layers", s.num_layers},
      {"num_attention_heads", s.num_heads},
      {"num_key_value_heads", s.num_kv_heads},
      {"head_dim", s.head_dim},
      {"rms_norm_eps", 1e-6},
      {"rope_theta", s.rope_theta},
      {"tie_word_embeddings", s.tie_word_embeddings},
      {"max_position_embeddings", s.max_position_embeddings},
      {"bos_token_id", 1},
      {"eos_token_id", 2},
      {"torch_dtype", "bfloat16"},
  };
  if (llama) cfg["attention_bias"] = s.attention_bias;
  if (glm) {
    cfg["n_routed_experts"] = s.num_experts;
    cfg["num_experts_per_tok"] = s.experts_per_token;
    cfg["moe_intermediate_size"] = s.moe_intermediate_size;
    cfg["n_shared_experts"] = s.shared_experts;
    cfg["n_group"] = 1;
    cfg["topk_group"] = 1;
    cfg["routed_scaling_factor"] = 2.5;
    cfg["norm_topk_prob"] = true;
    cfg["first_k_dense_replace"] = 0;
    cfg["partial_rotary_factor"] = 0.5;
    cfg["use_qk_norm"] = true;
    cfg["attention_bias"] = true;
    cfg["num_nextn_predict_layers"] = s.mtp_layers;
  } else if (moe) {
    cfg["num_experts"] = s.num_experts;
    cfg["num_experts_per_tok"] = s.experts_per_token;
    cfg["moe_intermediate_size"] = s.moe_intermediate_size;
    cfg["norm_topk_prob"] = true;
    cfg["decoder_sparse_step"] = 1;
    cfg["mlp_only_layers"] = nlohmann::json::array();
  }
  if (s.llama3_rope_scaling) {
    cfg["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", 32.0},
                           {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0},
                           {"original_max_position_embeddings", 8192}};
  }
  if (s.nvfp4 || fp4_experts) {
    // What stays unquantized, named as ModelOpt's exporter summarises it:
    // lm_head, and per MoE layer its router (and its attention when only the
    // experts are quantized).
    nlohmann::json exclude = {"lm_head"};
    for (int64_t l = 0; moe && l < s.num_layers + s.mtp_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      if (!s.nvfp4) exclude.push_back(p + "self_attn*");
      if (!s.nvfp4 && glm) exclude.push_back(p + "mlp.shared_experts*");
      if (l >= s.num_layers) exclude.push_back(p + "eh_proj");
      exclude.push_back(p + "mlp.gate");
    }
    cfg["quantization_config"] = {
        {"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}, {"ignore", exclude}};
    nlohmann::json q = {
        {"producer", {{"name", "octet random checkpoint"}}},
        {"quantization",
         {{"quant_algo", "NVFP4"}, {"group_size", 16}, {"exclude_modules", exclude}}}};
    OCTET_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(dir, "hf_quant_config.json"), q.dump(2)));
  }
  Rng rng(s.seed);
  SafetensorsWriter w;
  w.SetMetadata("format", "pt");
  std::vector<float> ones(static_cast<size_t>(std::max(s.hidden_size, s.head_dim)), 1.0f);
  {
    auto e = RandomMatrix(s.vocab_size, s.hidden_size, rng);
    OCTET_RETURN_IF_ERROR(w.AddFloat("model.embed_tokens.weight", {s.vocab_size, s.hidden_size},
                                     e.data(), DType::kBF16));
  }
  if (!s.tie_word_embeddings) {
    auto h = RandomMatrix(s.vocab_size, s.hidden_size, rng);
    OCTET_RETURN_IF_ERROR(
        w.AddFloat("lm_head.weight", {s.vocab_size, s.hidden_size}, h.data(), DType::kBF16));
  }
  OCTET_RETURN_IF_ERROR(
      w.AddFloat("model.norm.weight", {s.hidden_size}, ones.data(), DType::kBF16));
  for (int64_t l = 0; l < s.num_layers + s.mtp_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    if (l >= s.num_layers) {  // an MTP layer's own tensors, then a decoder layer's
      for (const char* norm : {"enorm.weight", "hnorm.weight", "shared_head.norm.weight"}) {
        OCTET_RETURN_IF_ERROR(w.AddFloat(p + norm, {s.hidden_size}, ones.data(), DType::kBF16));
      }
      OCTET_RETURN_IF_ERROR(
          AddLinears(w, p, {{"eh_proj", s.hidden_size, 2 * s.hidden_size, 0, false}}, false, rng));
    }
    OCTET_RETURN_IF_ERROR(
        w.AddFloat(p + "input_layernorm.weight", {s.hidden_size}, ones.data(), DType::kBF16));
    OCTET_RETURN_IF_ERROR(w.AddFloat(p + "post_attention_layernorm.weight", {s.hidden_size},
                                     ones.data(), DType::kBF16));
    if (qwen3) {
      OCTET_RETURN_IF_ERROR(
          w.AddFloat(p + "self_attn.q_norm.weight", {s.head_dim}, ones.data(), DType::kBF16));
      OCTET_RETURN_IF_ERROR(
          w.AddFloat(p + "self_attn.k_norm.weight", {s.head_dim}, ones.data(), DType::kBF16));
    }
    std::vector<Lin> lins = {
        {"self_attn.q_proj", s.num_heads * s.head_dim, s.hidden_size, 0, bias},
        {"self_attn.k_proj", s.num_kv_heads * s.head_dim, s.hidden_size, 0, bias},
        {"self_attn.v_proj", s.num_kv_heads * s.head_dim, s.hidden_size, 0, bias},
        {"self_attn.o_proj", s.hidden_size, s.num_heads * s.head_dim, 1, llama && s.attention_bias},
    };
    if (!moe) {
      lins.push_back({"mlp.gate_proj", s.intermediate_size, s.hidden_size, 2, false});
      lins.push_back({"mlp.up_proj", s.intermediate_size, s.hidden_size, 2, false});
      lins.push_back({"mlp.down_proj", s.hidden_size, s.intermediate_size, 3, false});
    }
    OCTET_RETURN_IF_ERROR(AddLinears(w, p, lins, s.nvfp4, rng));
    if (!moe) continue;
    OCTET_RETURN_IF_ERROR(
        AddLinears(w, p, {{"mlp.gate", s.num_experts, s.hidden_size, 0, false}}, false, rng));
    const int64_t F = s.moe_intermediate_size;
    if (glm) {
      const std::vector<float> zeros(static_cast<size_t>(s.num_experts), 0.0f);
      OCTET_RETURN_IF_ERROR(w.AddFloat(p + "mlp.gate.e_score_correction_bias", {s.num_experts},
                                       zeros.data(), DType::kF32));
      const int64_t SF = F * s.shared_experts;
      OCTET_RETURN_IF_ERROR(
          AddLinears(w, p,
                     {{"mlp.shared_experts.gate_proj", SF, s.hidden_size, 0, false},
                      {"mlp.shared_experts.up_proj", SF, s.hidden_size, 0, false},
                      {"mlp.shared_experts.down_proj", s.hidden_size, SF, 1, false}},
                     s.nvfp4, rng));
    }
    for (int64_t e = 0; e < s.num_experts; ++e) {
      const std::string x = "mlp.experts." + std::to_string(e) + ".";
      OCTET_RETURN_IF_ERROR(AddLinears(w, p,
                                       {{x + "gate_proj", F, s.hidden_size, 0, false},
                                        {x + "up_proj", F, s.hidden_size, 0, false},
                                        {x + "down_proj", s.hidden_size, F, 1, false}},
                                       fp4_experts, rng));
    }
  }
  OCTET_RETURN_IF_ERROR(w.Write(JoinPath(dir, "model.safetensors")));
  return WriteFileAtomic(JoinPath(dir, "config.json"), cfg.dump(2));
}

}  // namespace octet::engine
