#include "octet/trainer/gpt_config.h"

#include <charconv>

#include "octet/base/file_util.h"
#include "octet/base/json.h"

namespace octet::trainer {
namespace {

constexpr int kPresetHeadDim = 128;

// nanochat: width = 64·depth, heads of 128 (rounded up; at least one).
GptConfig FromDepth(int depth) {
  GptConfig c;
  c.n_layer = depth;
  c.n_embd = 64 * depth;
  c.n_head = std::max(1, (c.n_embd + kPresetHeadDim - 1) / kPresetHeadDim);
  // Keep head_dim whole and even when 64·depth is not a multiple of 128.
  while (c.n_embd % c.n_head != 0 || (c.n_embd / c.n_head) % 2 != 0) ++c.n_head;
  c.n_kv_head = c.n_head;
  return c;
}

}  // namespace

Status GptConfig::Validate() const {
  auto positive = [](const char* name, int v) -> Status {
    if (v <= 0)
      return InvalidArgumentError(std::string(name) + " must be positive, got " +
                                  std::to_string(v));
    return Status::Ok();
  };
  OCTET_RETURN_IF_ERROR(positive("n_layer", n_layer));
  OCTET_RETURN_IF_ERROR(positive("n_head", n_head));
  OCTET_RETURN_IF_ERROR(positive("n_kv_head", n_kv_head));
  OCTET_RETURN_IF_ERROR(positive("n_embd", n_embd));
  OCTET_RETURN_IF_ERROR(positive("vocab_size", vocab_size));
  OCTET_RETURN_IF_ERROR(positive("sequence_len", sequence_len));
  if (n_embd % n_head != 0) {
    return InvalidArgumentError("n_embd " + std::to_string(n_embd) +
                                " is not divisible by n_head " + std::to_string(n_head));
  }
  if (head_dim() % 2 != 0) {
    return InvalidArgumentError("head_dim " + std::to_string(head_dim()) +
                                " must be even for rotary embeddings");
  }
  if (n_head % n_kv_head != 0) {
    return InvalidArgumentError("n_head " + std::to_string(n_head) +
                                " is not divisible by n_kv_head " + std::to_string(n_kv_head));
  }
  if (!(rope_theta > 0.0f)) return InvalidArgumentError("rope_theta must be positive");
  if (!(softcap >= 0.0f)) return InvalidArgumentError("softcap must be >= 0");
  if (!(norm_eps > 0.0f)) return InvalidArgumentError("norm_eps must be positive");
  return Status::Ok();
}

int64_t GptConfig::NumParams() const {
  return NumNonEmbeddingParams() + int64_t{vocab_size} * n_embd;
}

int64_t GptConfig::NumNonEmbeddingParams() const {
  const int64_t C = n_embd;
  const int64_t per_layer = C * C + 2 * C * kv_dim() + C * C + 2 * C * mlp_dim();
  return n_layer * per_layer + int64_t{vocab_size} * C;  // + lm_head
}

double GptConfig::TrainingFlopsPerToken(int seq_len) const {
  return 6.0 * static_cast<double>(NumNonEmbeddingParams()) +
         12.0 * n_layer * n_head * head_dim() * static_cast<double>(seq_len);
}

std::string GptConfig::ToJson() const {
  nlohmann::ordered_json j;
  j["model_type"] = "nanochat";
  j["architectures"] = {"NanochatForCausalLM"};
  j["n_layer"] = n_layer;
  j["n_head"] = n_head;
  j["n_kv_head"] = n_kv_head;
  j["n_embd"] = n_embd;
  j["vocab_size"] = vocab_size;
  j["sequence_len"] = sequence_len;
  j["rope_theta"] = rope_theta;
  j["softcap"] = softcap;
  j["norm_eps"] = norm_eps;
  if (bos_token_id >= 0) {
    j["bos_token_id"] = bos_token_id;
    j["eos_token_id"] = bos_token_id;
  }
  // Hugging Face aliases (informational; FromJson prefers the nanochat keys).
  j["hidden_size"] = n_embd;
  j["num_hidden_layers"] = n_layer;
  j["num_attention_heads"] = n_head;
  j["num_key_value_heads"] = n_kv_head;
  j["head_dim"] = head_dim();
  j["intermediate_size"] = mlp_dim();
  j["max_position_embeddings"] = sequence_len;
  j["rms_norm_eps"] = norm_eps;
  j["tie_word_embeddings"] = false;
  j["torch_dtype"] = "float32";
  return j.dump(2) + "\n";
}

Result<GptConfig> GptConfig::FromJson(std::string_view text, const std::string& what) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgumentError(what + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) return InvalidArgumentError(what + ": expected a JSON object");
  if (j.contains("model_type") && j["model_type"] != "nanochat") {
    return InvalidArgumentError(what + ": model_type is " + j["model_type"].dump() +
                                ", expected \"nanochat\"");
  }
  GptConfig c;
  auto get_int = [&](const char* key, const char* alias, int* out, bool required) -> Status {
    const char* k = j.contains(key) ? key : (alias && j.contains(alias) ? alias : nullptr);
    if (!k) {
      if (required) return InvalidArgumentError(what + ": missing \"" + key + "\"");
      return Status::Ok();
    }
    if (!j[k].is_number_integer()) {
      return InvalidArgumentError(what + ": \"" + k + "\" must be an integer");
    }
    *out = j[k].get<int>();
    return Status::Ok();
  };
  auto get_float = [&](const char* key, const char* alias, float* out) -> Status {
    const char* k = j.contains(key) ? key : (alias && j.contains(alias) ? alias : nullptr);
    if (!k) return Status::Ok();
    if (!j[k].is_number()) return InvalidArgumentError(what + ": \"" + k + "\" must be a number");
    *out = j[k].get<float>();
    return Status::Ok();
  };
  OCTET_RETURN_IF_ERROR(get_int("n_layer", "num_hidden_layers", &c.n_layer, true));
  OCTET_RETURN_IF_ERROR(get_int("n_head", "num_attention_heads", &c.n_head, true));
  c.n_kv_head = c.n_head;
  OCTET_RETURN_IF_ERROR(get_int("n_kv_head", "num_key_value_heads", &c.n_kv_head, false));
  OCTET_RETURN_IF_ERROR(get_int("n_embd", "hidden_size", &c.n_embd, true));
  OCTET_RETURN_IF_ERROR(get_int("vocab_size", nullptr, &c.vocab_size, true));
  OCTET_RETURN_IF_ERROR(get_int("sequence_len", "max_position_embeddings", &c.sequence_len, true));
  OCTET_RETURN_IF_ERROR(get_float("rope_theta", nullptr, &c.rope_theta));
  OCTET_RETURN_IF_ERROR(get_float("softcap", nullptr, &c.softcap));
  OCTET_RETURN_IF_ERROR(get_float("norm_eps", "rms_norm_eps", &c.norm_eps));
  if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer()) {
    c.bos_token_id = j["bos_token_id"].get<int>();
  }
  if (Status s = c.Validate(); !s.ok()) return s.WithContext(what);
  return c;
}

Result<GptConfig> GptConfig::Load(const std::string& path) {
  OCTET_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return FromJson(text, path);
}

Result<GptConfig> GptConfig::Preset(std::string_view name, int vocab_size, int sequence_len) {
  GptConfig c;
  if (name == "tiny") {
    // A CPU demo: ~1.2M block parameters, trains in minutes on two cores.
    c.n_layer = 4;
    c.n_embd = 192;
    c.n_head = 3;
    c.n_kv_head = 3;
  } else if (name.size() >= 2 && name[0] == 'd') {
    int depth = 0;
    auto [end, ec] = std::from_chars(name.data() + 1, name.data() + name.size(), depth);
    if (ec != std::errc() || end != name.data() + name.size() || depth < 2 || depth > 64) {
      return InvalidArgumentError("unknown preset '" + std::string(name) +
                                  "' (tiny, or d<depth> with depth 2..64, e.g. d12, d20)");
    }
    c = FromDepth(depth);
  } else {
    return InvalidArgumentError("unknown preset '" + std::string(name) +
                                "' (tiny, or d<depth> with depth 2..64, e.g. d12, d20)");
  }
  c.vocab_size = vocab_size;
  c.sequence_len = sequence_len;
  if (Status s = c.Validate(); !s.ok()) return s.WithContext("preset " + std::string(name));
  return c;
}

std::vector<std::string> GptConfig::PresetNames() { return {"tiny", "d4", "d8", "d12", "d20"}; }

int GptConfig::PresetSequenceLen(std::string_view name) { return name == "tiny" ? 256 : 2048; }

}  // namespace octet::trainer
