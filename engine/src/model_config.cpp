#include "octet/engine/model_config.h"

#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "octet/base/file_util.h"
#include "octet/base/json.h"

namespace octet::engine {
namespace {

using nlohmann::json;

Status ReadIds(const json& v, std::vector<int32_t>* out) {
  if (v.is_number_integer()) {
    out->push_back(v.get<int32_t>());
  } else if (v.is_array()) {
    for (const auto& e : v) {
      if (!e.is_number_integer())
        return InvalidArgumentError("eos_token_id entries must be integers");
      out->push_back(e.get<int32_t>());
    }
  } else if (!v.is_null()) {
    return InvalidArgumentError("eos_token_id must be an integer or a list");
  }
  return Status::Ok();
}

Status ParseQuant(const json& q, bool from_hf_quant_config, QuantConfig* out,
                  const std::string& where) {
  std::string algo;
  if (q.contains("quant_algo") && q["quant_algo"].is_string())
    algo = q["quant_algo"].get<std::string>();
  if (!from_hf_quant_config && q.contains("quant_method") && q["quant_method"].is_string() &&
      q["quant_method"].get<std::string>() != "modelopt") {
    return UnimplementedError(where + ": quantization_config.quant_method '" +
                              q["quant_method"].get<std::string>() +
                              "' is not supported (supported: modelopt NVFP4)");
  }
  if (algo.empty()) return Status::Ok();
  if (algo != "NVFP4") {
    return UnimplementedError(where + ": quant_algo '" + algo +
                              "' is not supported (supported: NVFP4)");
  }
  out->nvfp4 = true;
  if (q.contains("group_size") && q["group_size"].is_number_integer()) {
    out->group_size = q["group_size"].get<int64_t>();
  }
  if (out->group_size != 16) {
    return UnimplementedError(where + ": NVFP4 group_size " + std::to_string(out->group_size) +
                              " is not supported (16 is)");
  }
  for (const char* key : {"exclude_modules", "ignore"}) {
    if (q.contains(key) && q[key].is_array()) {
      for (const auto& p : q[key]) {
        if (p.is_string()) out->exclude_modules.push_back(p.get<std::string>());
      }
    }
  }
  return Status::Ok();
}

// Sizes and constants a config may hold before anything is allocated from
// them: far beyond any model there is, so that a corrupt or hostile
// config.json gets an error naming the field rather than an out-of-memory
// abort, and numbers that would make the forward pass compute NaN (a negative
// epsilon, a zero RoPE base) are refused.
Status CheckLimits(const ModelConfig& c, const std::string& where) {
  struct Limit {
    const char* name;
    int64_t value, max;
  };
  for (const Limit& l :
       {Limit{"num_hidden_layers", c.num_layers, 4096},
        Limit{"hidden_size", c.hidden_size, int64_t{1} << 20},
        Limit{"intermediate_size", c.intermediate_size, int64_t{1} << 22},
        Limit{"num_attention_heads", c.num_heads, int64_t{1} << 14},
        Limit{"num_key_value_heads", c.num_kv_heads, int64_t{1} << 14},
        Limit{"vocab_size", c.vocab_size, int64_t{1} << 24},
        Limit{"max_position_embeddings", c.max_position_embeddings, int64_t{1} << 30}}) {
    if (l.value > l.max) {
      return InvalidArgumentError(where + ": \"" + l.name + "\" is " + std::to_string(l.value) +
                                  "; at most " + std::to_string(l.max) + " is accepted");
    }
  }
  if (!(c.rms_norm_eps > 0.0f) || !std::isfinite(c.rms_norm_eps)) {
    return InvalidArgumentError(where + ": \"rms_norm_eps\" must be a positive number, not " +
                                std::to_string(c.rms_norm_eps));
  }
  if (!(c.rope_theta > 0.0) || !std::isfinite(c.rope_theta)) {
    return InvalidArgumentError(where + ": \"rope_theta\" must be a positive number, not " +
                                std::to_string(c.rope_theta));
  }
  return Status::Ok();
}

// Optional integer >= min (a missing or null key keeps *out).
Status OptionalInt(const json& j, const char* key, int64_t min, const std::string& where,
                   int64_t* out) {
  if (!j.contains(key) || j[key].is_null()) return Status::Ok();
  if (!j[key].is_number_integer() || j[key].get<int64_t>() < min) {
    return InvalidArgumentError(where + ": \"" + key + "\" must be an integer of at least " +
                                std::to_string(min));
  }
  *out = j[key].get<int64_t>();
  return Status::Ok();
}

// Optional number in [min, max] (a missing or null key keeps *out); with
// `min_exclusive`, above min. Never a cast of something else: a string, or a
// float past the destination's range (undefined to convert), is refused,
// naming the key and the value.
Status OptionalNumber(const json& j, const char* key, const std::string& where, double min,
                      bool min_exclusive, double max, double* out) {
  if (!j.contains(key) || j[key].is_null()) return Status::Ok();
  const json& v = j[key];
  const double d = v.is_number() ? v.get<double>() : NAN;
  if (!v.is_number() || !std::isfinite(d) || d < min || (min_exclusive && d == min) || d > max) {
    char range[96];
    std::snprintf(range, sizeof(range), "a number %s %g%s", min_exclusive ? ">" : ">=", min,
                  max < std::numeric_limits<double>::max() ? " within a float's range" : "");
    return InvalidArgumentError(where + ": \"" + key + "\" must be " + range + ", not " + v.dump());
  }
  *out = d;
  return Status::Ok();
}

// Optional positive finite number (a missing or null key keeps *out).
Status OptionalPositive(const json& j, const char* key, const std::string& where, double* out) {
  return OptionalNumber(j, key, where, 0.0, true, std::numeric_limits<double>::max(), out);
}
// The same into a float: within a float's range.
Status OptionalPositive(const json& j, const char* key, const std::string& where, float* out) {
  double d = *out;
  OCTET_RETURN_IF_ERROR(
      OptionalNumber(j, key, where, 0.0, true, std::numeric_limits<float>::max(), &d));
  *out = static_cast<float>(d);
  return Status::Ok();
}

// nanochat's config.json (as `octet train` writes it and nanochat's GPTConfig
// names the fields): n_layer, n_head, n_kv_head (default n_head), n_embd,
// vocab_size, sequence_len, rope_theta (10000), softcap (15), norm_eps (1e-6).
// head_dim = n_embd / n_head, MLP width 4·n_embd, untied lm_head.
Status ParseNanochat(const json& j, const std::string& where, ModelConfig* c) {
  auto req = [&](const char* key, int64_t* out) -> Status {
    if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int64_t>() <= 0) {
      return InvalidArgumentError(where + ": \"" + key + "\" must be a positive integer");
    }
    *out = j[key].get<int64_t>();
    return Status::Ok();
  };
  c->arch = Architecture::kNanochat;
  if (c->architecture_name.empty()) c->architecture_name = "nanochat";
  OCTET_RETURN_IF_ERROR(req("n_layer", &c->num_layers));
  OCTET_RETURN_IF_ERROR(req("n_head", &c->num_heads));
  OCTET_RETURN_IF_ERROR(req("n_embd", &c->hidden_size));
  OCTET_RETURN_IF_ERROR(req("vocab_size", &c->vocab_size));
  c->num_kv_heads = c->num_heads;
  if (j.contains("n_kv_head")) OCTET_RETURN_IF_ERROR(req("n_kv_head", &c->num_kv_heads));
  if (c->num_heads % c->num_kv_heads != 0) {
    return InvalidArgumentError(where + ": n_head (" + std::to_string(c->num_heads) +
                                ") is not a multiple of n_kv_head (" +
                                std::to_string(c->num_kv_heads) + ")");
  }
  if (c->hidden_size % c->num_heads != 0 || (c->hidden_size / c->num_heads) % 2 != 0) {
    return InvalidArgumentError(where + ": n_embd (" + std::to_string(c->hidden_size) +
                                ") must split into n_head heads of an even size");
  }
  c->head_dim = c->hidden_size / c->num_heads;
  c->intermediate_size = 4 * c->hidden_size;
  if (j.contains("sequence_len"))
    OCTET_RETURN_IF_ERROR(req("sequence_len", &c->max_position_embeddings));
  c->rope_theta = 10000.0;
  c->rms_norm_eps = 1e-6f;
  OCTET_RETURN_IF_ERROR(OptionalPositive(j, "rope_theta", where, &c->rope_theta));
  OCTET_RETURN_IF_ERROR(OptionalPositive(j, "norm_eps", where, &c->rms_norm_eps));
  double cap = 15.0;  // 0: none
  OCTET_RETURN_IF_ERROR(
      OptionalNumber(j, "softcap", where, 0.0, false, std::numeric_limits<float>::max(), &cap));
  c->logit_softcap = static_cast<float>(cap);
  if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer()) {
    c->bos_token_id = j["bos_token_id"].get<int32_t>();
  }
  if (j.contains("eos_token_id")) {
    OCTET_RETURN_IF_ERROR(ReadIds(j["eos_token_id"], &c->eos_token_ids).WithContext(where));
  }
  c->tie_word_embeddings = false;
  c->qk_norm = true;
  c->parameter_free_norms = true;
  c->embedding_norm = true;
  c->qk_norm_after_rope = true;
  c->relu2_mlp = true;
  c->torch_dtype = j.value("torch_dtype", std::string());
  return Status::Ok();
}

struct KnownArchitecture {
  const char* class_name;
  const char* model_type;
  Architecture arch;
};
constexpr KnownArchitecture kArchitectures[] = {
    {"LlamaForCausalLM", "llama", Architecture::kLlama},
    {"Qwen2ForCausalLM", "qwen2", Architecture::kQwen2},
    {"Qwen3ForCausalLM", "qwen3", Architecture::kQwen3},
    {"Qwen3MoeForCausalLM", "qwen3_moe", Architecture::kQwen3Moe},
    {"Glm4MoeForCausalLM", "glm4_moe", Architecture::kGlm4Moe},
    {"MiniCPMForCausalLM", "minicpm", Architecture::kMiniCpm},
};

// Qwen3-MoE (num_experts, decoder_sparse_step, mlp_only_layers; softmax
// router) and GLM-4.5 (n_routed_experts, first_k_dense_replace, grouped
// sigmoid router with a score-correction bias, shared experts, MTP layers).
// Defaults are transformers' where a key is absent.
Status ParseMoe(const json& j, const std::string& where, ModelConfig* c) {
  MoeConfig& m = c->moe;
  const bool glm = c->arch == Architecture::kGlm4Moe;
  OCTET_RETURN_IF_ERROR(
      OptionalInt(j, glm ? "n_routed_experts" : "num_experts", 0, where, &m.num_experts));
  OCTET_RETURN_IF_ERROR(OptionalInt(j, "num_experts_per_tok", 1, where, &m.experts_per_token));
  OCTET_RETURN_IF_ERROR(
      OptionalInt(j, "moe_intermediate_size", 1, where, &m.expert_intermediate_size));
  if (j.contains("norm_topk_prob") && j["norm_topk_prob"].is_boolean()) {
    m.norm_topk_prob = j["norm_topk_prob"].get<bool>();
  } else {
    m.norm_topk_prob = glm;  // Glm4MoeConfig: true; Qwen3MoeConfig: false
  }
  m.moe_layer.assign(c->num_layers, false);
  if (m.num_experts > 0) {
    if (m.experts_per_token < 1 || m.experts_per_token > m.num_experts ||
        m.expert_intermediate_size < 1) {
      return InvalidArgumentError(
          where + ": a mixture-of-experts model needs num_experts_per_tok from 1 to its " +
          std::to_string(m.num_experts) + " experts and a positive moe_intermediate_size");
    }
    if (m.num_experts > 4096 || m.expert_intermediate_size > (int64_t{1} << 22)) {
      return InvalidArgumentError(where + ": " + std::to_string(m.num_experts) +
                                  " experts of width " +
                                  std::to_string(m.expert_intermediate_size) +
                                  " is beyond what is accepted (4096 experts of 2^22)");
    }
  }
  if (glm) {
    m.scoring = MoeConfig::Scoring::kSigmoid;
    m.score_correction_bias = true;
    int64_t first_dense = 1, shared = 1;
    double scaling = 1.0;
    OCTET_RETURN_IF_ERROR(OptionalInt(j, "first_k_dense_replace", 0, where, &first_dense));
    OCTET_RETURN_IF_ERROR(OptionalInt(j, "n_group", 1, where, &m.n_group));
    OCTET_RETURN_IF_ERROR(OptionalInt(j, "topk_group", 1, where, &m.topk_group));
    OCTET_RETURN_IF_ERROR(OptionalInt(j, "n_shared_experts", 0, where, &shared));
    OCTET_RETURN_IF_ERROR(OptionalPositive(j, "routed_scaling_factor", where, &scaling));
    OCTET_RETURN_IF_ERROR(OptionalInt(j, "num_nextn_predict_layers", 0, where, &c->num_mtp_layers));
    if (c->num_mtp_layers > 16) {
      return InvalidArgumentError(where + ": num_nextn_predict_layers " +
                                  std::to_string(c->num_mtp_layers) + " (at most 16)");
    }
    m.routed_scaling_factor = static_cast<float>(scaling);
    m.shared_intermediate_size = shared * m.expert_intermediate_size;
    if (j.contains("use_qk_norm") && j["use_qk_norm"].is_boolean()) {
      c->qk_norm = j["use_qk_norm"].get<bool>();
    }
    if (m.num_experts > 0) {
      const int64_t per_group = m.num_experts / m.n_group;
      if (m.num_experts % m.n_group != 0 || per_group < 2 || m.topk_group > m.n_group ||
          m.experts_per_token > m.topk_group * per_group) {
        return InvalidArgumentError(where + ": " + std::to_string(m.num_experts) +
                                    " experts in n_group " + std::to_string(m.n_group) +
                                    " (groups of at least 2), topk_group " +
                                    std::to_string(m.topk_group) + " and num_experts_per_tok " +
                                    std::to_string(m.experts_per_token) + " do not fit together");
      }
    }
    for (int64_t i = 0; i < c->num_layers; ++i) {
      m.moe_layer[i] = m.num_experts > 0 && i >= first_dense;
    }
    return Status::Ok();
  }
  int64_t step = 1;
  OCTET_RETURN_IF_ERROR(OptionalInt(j, "decoder_sparse_step", 1, where, &step));
  std::vector<int64_t> mlp_only;
  if (j.contains("mlp_only_layers") && j["mlp_only_layers"].is_array()) {
    for (const auto& e : j["mlp_only_layers"]) {
      if (!e.is_number_integer()) {
        return InvalidArgumentError(where + ": \"mlp_only_layers\" must list layer indices");
      }
      mlp_only.push_back(e.get<int64_t>());
    }
  }
  for (int64_t i = 0; i < c->num_layers; ++i) {
    const bool dense = std::find(mlp_only.begin(), mlp_only.end(), i) != mlp_only.end();
    m.moe_layer[i] = m.num_experts > 0 && !dense && (i + 1) % step == 0;
  }
  return Status::Ok();
}

// MiniCPM: x = embed * scale_emb; every block's output times
// scale_depth / sqrt(num_hidden_layers); logits from the normed hidden state
// divided by hidden_size / dim_model_base. Each is a Python double applied as a
// float32 factor, as transformers and vLLM do.
Status ParseMiniCpm(const json& j, const std::string& where, ModelConfig* c) {
  double scale_emb = 1.0, scale_depth = 1.0, dim_model_base = 1.0;
  OCTET_RETURN_IF_ERROR(OptionalPositive(j, "scale_emb", where, &scale_emb));
  OCTET_RETURN_IF_ERROR(OptionalPositive(j, "scale_depth", where, &scale_depth));
  OCTET_RETURN_IF_ERROR(OptionalPositive(j, "dim_model_base", where, &dim_model_base));
  c->embedding_scale = static_cast<float>(scale_emb);
  c->residual_scale =
      static_cast<float>(scale_depth / std::sqrt(static_cast<double>(c->num_layers)));
  c->logit_scale = 1.0f / static_cast<float>(static_cast<double>(c->hidden_size) / dim_model_base);
  return Status::Ok();
}

}  // namespace

std::string SupportedModelTypes() {
  std::string out;
  for (const KnownArchitecture& k : kArchitectures) out += std::string(k.model_type) + ", ";
  return out + "nanochat";
}

bool QuantConfig::Excluded(const std::string& module) const {
  for (const auto& p : exclude_modules) {
    if (fnmatch(p.c_str(), module.c_str(), 0) == 0) return true;
  }
  return false;
}

Result<ModelConfig> ParseModelConfig(const std::string& json_text, const std::string& where) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::parse_error& e) {
    return InvalidArgumentError(where + ": bad JSON at byte offset " + std::to_string(e.byte) +
                                ": " + e.what());
  } catch (const json::exception& e) {
    // Valid syntax the parser still refuses: a number beyond double's range.
    return InvalidArgumentError(where + ": unusable JSON: " + e.what());
  }
  if (!j.is_object()) return InvalidArgumentError(where + ": not a JSON object");
  ModelConfig c;
  try {
    std::string arch;
    if (j.contains("architectures") && j["architectures"].is_array() &&
        !j["architectures"].empty()) {
      arch = j["architectures"][0].get<std::string>();
    }
    c.architecture_name = arch;
    const std::string model_type = j.contains("model_type") && j["model_type"].is_string()
                                       ? j["model_type"].get<std::string>()
                                       : std::string();
    if (model_type == "nanochat" || arch == "NanochatForCausalLM") {
      OCTET_RETURN_IF_ERROR(ParseNanochat(j, where, &c));
      OCTET_RETURN_IF_ERROR(CheckLimits(c, where));
      return c;
    }
    // The architecture class names the implementation; model_type is used
    // where a config has no `architectures`.
    const KnownArchitecture* known = nullptr;
    for (const KnownArchitecture& k : kArchitectures) {
      if (arch.empty() ? model_type == k.model_type : arch == k.class_name) known = &k;
    }
    if (!known) {
      return UnimplementedError(where + ": unsupported architecture '" +
                                (arch.empty() ? "(none)" : arch) + "' (model_type '" +
                                (model_type.empty() ? "(none)" : model_type) +
                                "'); supported model_type values: " + SupportedModelTypes());
    }
    c.arch = known->arch;
    if (c.architecture_name.empty()) c.architecture_name = known->class_name;
    if (c.arch == Architecture::kQwen2) c.attention_bias = true;
    if (c.arch == Architecture::kQwen3 || c.arch == Architecture::kQwen3Moe) c.qk_norm = true;
    auto req = [&](const char* key, int64_t* out) -> Status {
      if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int64_t>() <= 0) {
        return InvalidArgumentError(where + ": \"" + key + "\" must be a positive integer");
      }
      *out = j[key].get<int64_t>();
      return Status::Ok();
    };
    OCTET_RETURN_IF_ERROR(req("vocab_size", &c.vocab_size));
    OCTET_RETURN_IF_ERROR(req("hidden_size", &c.hidden_size));
    OCTET_RETURN_IF_ERROR(req("intermediate_size", &c.intermediate_size));
    OCTET_RETURN_IF_ERROR(req("num_hidden_layers", &c.num_layers));
    OCTET_RETURN_IF_ERROR(req("num_attention_heads", &c.num_heads));
    c.num_kv_heads = c.num_heads;
    if (j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()) {
      OCTET_RETURN_IF_ERROR(req("num_key_value_heads", &c.num_kv_heads));
    }
    if (c.num_heads % c.num_kv_heads != 0) {
      return InvalidArgumentError(where + ": num_attention_heads (" + std::to_string(c.num_heads) +
                                  ") is not a multiple of num_key_value_heads (" +
                                  std::to_string(c.num_kv_heads) + ")");
    }
    if (j.contains("head_dim") && !j["head_dim"].is_null()) {
      OCTET_RETURN_IF_ERROR(req("head_dim", &c.head_dim));
    } else {
      if (c.hidden_size % c.num_heads != 0) {
        return InvalidArgumentError(where +
                                    ": hidden_size is not a multiple of num_attention_heads "
                                    "and no head_dim is given");
      }
      c.head_dim = c.hidden_size / c.num_heads;
    }
    if (c.head_dim % 2 != 0 || c.head_dim > 1024) {
      return InvalidArgumentError(where + ": head_dim " + std::to_string(c.head_dim) +
                                  " must be even and at most 1024");
    }
    OCTET_RETURN_IF_ERROR(OptionalPositive(j, "rms_norm_eps", where, &c.rms_norm_eps));
    OCTET_RETURN_IF_ERROR(OptionalPositive(j, "rope_theta", where, &c.rope_theta));
    if (j.contains("tie_word_embeddings") && j["tie_word_embeddings"].is_boolean()) {
      c.tie_word_embeddings = j["tie_word_embeddings"].get<bool>();
    }
    if (c.arch != Architecture::kQwen2 && j.contains("attention_bias") &&
        j["attention_bias"].is_boolean()) {
      c.attention_bias = j["attention_bias"].get<bool>();
    }
    if (c.arch == Architecture::kLlama && j.contains("mlp_bias") && j["mlp_bias"].is_boolean()) {
      c.mlp_bias = j["mlp_bias"].get<bool>();
    }
    if (j.contains("max_position_embeddings") && !j["max_position_embeddings"].is_null()) {
      OCTET_RETURN_IF_ERROR(req("max_position_embeddings", &c.max_position_embeddings));
    }
    if (j.contains("torch_dtype") && j["torch_dtype"].is_string()) {
      c.torch_dtype = j["torch_dtype"].get<std::string>();
    }
    if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer()) {
      c.bos_token_id = j["bos_token_id"].get<int32_t>();
    }
    if (j.contains("eos_token_id")) {
      OCTET_RETURN_IF_ERROR(ReadIds(j["eos_token_id"], &c.eos_token_ids).WithContext(where));
    }
    if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) {
      const json& rs = j["rope_scaling"];
      std::string type;
      if (rs.contains("rope_type") && rs["rope_type"].is_string())
        type = rs["rope_type"].get<std::string>();
      if (type.empty() && rs.contains("type") && rs["type"].is_string())
        type = rs["type"].get<std::string>();
      if (type == "llama3") {
        c.rope_scaling.llama3 = true;
        RopeScaling& r = c.rope_scaling;
        r.factor = 8.0;
        r.low_freq_factor = 1.0;
        r.high_freq_factor = 4.0;
        r.original_max_position_embeddings = 8192.0;
        const std::string in = where + ": rope_scaling";
        OCTET_RETURN_IF_ERROR(OptionalPositive(rs, "factor", in, &r.factor));
        OCTET_RETURN_IF_ERROR(OptionalPositive(rs, "low_freq_factor", in, &r.low_freq_factor));
        OCTET_RETURN_IF_ERROR(OptionalPositive(rs, "high_freq_factor", in, &r.high_freq_factor));
        OCTET_RETURN_IF_ERROR(OptionalPositive(rs, "original_max_position_embeddings", in,
                                               &r.original_max_position_embeddings));
      } else if (type != "default" && !type.empty()) {
        return UnimplementedError(where + ": rope_scaling type '" + type +
                                  "' is not supported (supported: llama3)");
      }
    }
    if (j.contains("use_sliding_window") && j["use_sliding_window"].is_boolean() &&
        j["use_sliding_window"].get<bool>()) {
      return UnimplementedError(where + ": use_sliding_window true is not supported");
    }
    c.rotary_dim = c.head_dim;
    if (j.contains("partial_rotary_factor") && j["partial_rotary_factor"].is_number()) {
      const double f = j["partial_rotary_factor"].get<double>();
      // transformers: int(head_dim * partial_rotary_factor).
      c.rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * f);
      if (!(f > 0.0 && f <= 1.0) || c.rotary_dim < 2 || c.rotary_dim % 2 != 0) {
        return InvalidArgumentError(where + ": partial_rotary_factor " + std::to_string(f) +
                                    " gives " + std::to_string(c.rotary_dim) +
                                    " rotary features of head_dim " + std::to_string(c.head_dim) +
                                    "; an even number from 2 to head_dim is needed");
      }
    }
    if (c.arch == Architecture::kQwen3Moe || c.arch == Architecture::kGlm4Moe) {
      OCTET_RETURN_IF_ERROR(ParseMoe(j, where, &c));
    }
    if (c.arch == Architecture::kMiniCpm) OCTET_RETURN_IF_ERROR(ParseMiniCpm(j, where, &c));
    if (j.contains("quantization_config") && j["quantization_config"].is_object()) {
      OCTET_RETURN_IF_ERROR(ParseQuant(j["quantization_config"], false, &c.quant, where));
    }
  } catch (const json::exception& e) {
    return InvalidArgumentError(where + ": " + e.what());
  }
  OCTET_RETURN_IF_ERROR(CheckLimits(c, where));
  return c;
}

Status CheckModelFolder(const std::string& dir) {
  if (!PathExists(dir)) return NotFoundError("model folder '" + dir + "' does not exist");
  if (!IsDirectory(dir)) {
    return InvalidArgumentError("'" + dir +
                                "' is a file: give the model's folder (the one that holds "
                                "config.json and the .safetensors files)");
  }
  if (!PathExists(JoinPath(dir, "config.json"))) {
    return NotFoundError("no config.json in '" + dir +
                         "': not a Hugging Face model folder (octet pull fetches one)");
  }
  return Status::Ok();
}

Result<ModelConfig> LoadModelConfig(const std::string& dir) {
  OCTET_RETURN_IF_ERROR(CheckModelFolder(dir));
  const std::string path = JoinPath(dir, "config.json");
  OCTET_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  OCTET_ASSIGN_OR_RETURN(ModelConfig c, ParseModelConfig(text, path));
  const std::string gen = JoinPath(dir, "generation_config.json");
  if (PathExists(gen)) {
    OCTET_ASSIGN_OR_RETURN(std::string g, ReadFileToString(gen));
    try {
      const json j = json::parse(g);
      if (j.is_object() && j.contains("eos_token_id")) {
        std::vector<int32_t> ids;
        OCTET_RETURN_IF_ERROR(ReadIds(j["eos_token_id"], &ids).WithContext(gen));
        for (int32_t id : ids) {
          bool seen = false;
          for (int32_t e : c.eos_token_ids) seen |= e == id;
          if (!seen) c.eos_token_ids.push_back(id);
        }
      }
    } catch (const json::exception& e) {
      return InvalidArgumentError(gen + ": " + e.what());
    }
  }
  const std::string quant = JoinPath(dir, "hf_quant_config.json");
  if (PathExists(quant)) {
    OCTET_ASSIGN_OR_RETURN(std::string q, ReadFileToString(quant));
    try {
      const json j = json::parse(q);
      if (j.is_object() && j.contains("quantization") && j["quantization"].is_object()) {
        QuantConfig qc;
        OCTET_RETURN_IF_ERROR(ParseQuant(j["quantization"], true, &qc, quant));
        if (qc.nvfp4) {
          // Patterns from both files apply.
          for (auto& p : c.quant.exclude_modules) qc.exclude_modules.push_back(p);
          c.quant = qc;
        }
      }
    } catch (const json::exception& e) {
      return InvalidArgumentError(quant + ": " + e.what());
    }
  }
  return c;
}

std::vector<float> RopeInvFreq(const ModelConfig& c) {
  // Partial RoPE: the exponent's denominator is the rotary dimension.
  const int64_t dim = c.rotary_dim > 0 ? c.rotary_dim : c.head_dim;
  const int64_t half = dim / 2;
  std::vector<float> inv(half);
  for (int64_t i = 0; i < half; ++i) {
    // transformers: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), in float32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    inv[i] = 1.0f / std::pow(static_cast<float>(c.rope_theta), exponent);
  }
  if (c.rope_scaling.llama3) {
    const double f = c.rope_scaling.factor, lo = c.rope_scaling.low_freq_factor,
                 hi = c.rope_scaling.high_freq_factor,
                 old = c.rope_scaling.original_max_position_embeddings;
    const double low_wavelen = old / lo, high_wavelen = old / hi;
    for (int64_t i = 0; i < half; ++i) {
      const float freq = inv[i];
      const float wavelen = 2.0f * static_cast<float>(M_PI) / freq;
      if (wavelen > low_wavelen) {
        inv[i] = static_cast<float>(freq / f);
      } else if (wavelen >= high_wavelen) {
        const float s = static_cast<float>((old / wavelen - lo) / (hi - lo));
        inv[i] = (1.0f - s) * freq / static_cast<float>(f) + s * freq;
      }
    }
  }
  return inv;
}

}  // namespace octet::engine
