#include "octet/engine/memory_plan.h"

#include <dirent.h>
#include <fnmatch.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "octet/base/args.h"
#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/engine/model_config.h"
#include "octet/engine/safetensors.h"

namespace octet::engine {

using nlohmann::json;

namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

Result<int64_t> DtypeBytes(const std::string& dtype) {
  if (dtype == "bf16" || dtype == "f16") return 2;
  if (dtype == "fp8") return 1;
  if (dtype == "f32") return 4;
  return InvalidArgumentError("unknown element type '" + dtype + "' (bf16, f16, fp8, f32)");
}

// Per-rank share of a group of `g.rows` x `g.cols` tensors.
struct Local {
  int64_t rows, cols;
};
Local LocalShape(const WeightGroup& g, const TpModelShape& s, int tp, int rank) {
  switch (g.shard) {
    case ShardKind::kColumn:
      return {(g.rows + tp - 1) / tp, g.cols};
    case ShardKind::kRow:
      return {g.rows, (g.cols + tp - 1) / tp};
    case ShardKind::kKvColumn: {
      const int64_t kv = std::max<int64_t>(1, s.num_kv_heads);
      const int64_t local_kv = kv >= tp ? (kv + tp - 1) / tp : 1;
      return {g.rows / kv * local_kv, g.cols};
    }
    case ShardKind::kVocab: {
      const VocabRange v = VocabShard(g.rows, tp, rank);
      return {std::max<int64_t>(v.count, 0), g.cols};
    }
    case ShardKind::kReplicated:
      break;
  }
  return {g.rows, g.cols};
}

Result<int64_t> GroupBytesOnRank(const WeightGroup& g, const TpModelShape& s, int tp, int rank) {
  const Local l = LocalShape(g, s, tp, rank);
  if (g.stored_bytes > 0) {
    // Exact stored bytes scaled by the share of elements this rank keeps.
    const double frac = double(l.rows) * double(l.cols) / (double(g.rows) * double(g.cols));
    return static_cast<int64_t>(std::llround(double(g.stored_bytes) * frac));
  }
  OCTET_ASSIGN_OR_RETURN(int64_t one, TensorBytes(g.format, l.rows, l.cols));
  return one * g.count;
}

// Bytes of the group a decode step reads on this rank when it reads the group
// at all (WeightUse decides whether it does): a matrix's data and block
// scales, a vector as f32, a scalar not at all (see memory_plan.h).
int64_t GroupReadBytesOnRank(const WeightGroup& g, const TpModelShape& s, int tp, int rank) {
  const Local l = LocalShape(g, s, tp, rank);
  switch (g.kind) {
    case WeightKind::kScalar:
      return 0;
    case WeightKind::kVector:
      return l.rows * l.cols * 4 * g.count;
    case WeightKind::kMatrix:
      break;
  }
  if (g.stored_bytes > 0) {
    const double frac = double(l.rows) * double(l.cols) / (double(g.rows) * double(g.cols));
    return static_cast<int64_t>(std::llround(double(g.stored_bytes) * frac));
  }
  const int64_t n = l.rows * l.cols;
  if (g.format == "nvfp4") return (n / 2 + n / 16) * g.count;  // the f32 scalars not counted
  auto b = TensorBytes(g.format, l.rows, l.cols);
  return b.ok() ? *b * g.count : 0;
}

std::string Gib(int64_t bytes) { return FormatBytes(double(bytes)); }

// ---- catalog --------------------------------------------------------------------

// A catalog entry is a config.json in Hugging Face's key names plus planning
// keys (name, display_name, note, fictional, published, weight_format,
// formats). Its architecture is read by the engine's own config parser, so an
// entry says what the engine would load: `model_type` (or `architecture`, a
// transformers class name) must be one the engine supports, and the MoE
// layout (which layers are MoE, shared experts, groups), attention biases,
// q/k norms and MTP layers are the parser's.
Result<ModelFootprint> FromCatalogJson(const json& j, const std::string& where) {
  ModelFootprint m;
  m.source = where;
  m.id = j.value("name", "");
  if (m.id.empty()) return InvalidArgumentError(where + ": 'name' is required");
  m.display_name = j.value("display_name", m.id);
  m.note = j.value("note", "");
  m.fictional = j.value("fictional", false);
  if (j.contains("hub_repo") && !j["hub_repo"].is_null()) {
    if (!j["hub_repo"].is_string())
      return InvalidArgumentError(where + ": 'hub_repo' is not a string");
    m.hub_repo = j["hub_repo"].get<std::string>();
    // ORG/NAME, each of [A-Za-z0-9._-] (the Hub's repo ids).
    const size_t slash = m.hub_repo.find('/');
    const bool shape_ok = slash != std::string::npos && slash > 0 &&
                          slash + 1 < m.hub_repo.size() &&
                          m.hub_repo.find('/', slash + 1) == std::string::npos &&
                          std::all_of(m.hub_repo.begin(), m.hub_repo.end(), [](char ch) {
                            return std::isalnum(static_cast<unsigned char>(ch)) || ch == '/' ||
                                   ch == '.' || ch == '_' || ch == '-';
                          });
    if (!shape_ok) {
      return InvalidArgumentError(where + ": 'hub_repo' '" + m.hub_repo +
                                  "' is not a Hub repo id (ORG/NAME)");
    }
    if (m.fictional) {
      return InvalidArgumentError(where + ": a fictional entry has no Hub repo ('hub_repo' " +
                                  m.hub_repo + ")");
    }
  }
  const std::string architecture = j.value("architecture", "");
  json config = j;
  config.erase("architectures");
  if (!config.contains("model_type") && !architecture.empty()) {
    config["architectures"] = json::array({architecture});
  }
  OCTET_ASSIGN_OR_RETURN(ModelConfig c, ParseModelConfig(config.dump(), where));
  if (!architecture.empty() && architecture != c.architecture_name) {
    return InvalidArgumentError(where + ": 'architecture' " + architecture +
                                " is not the class the engine loads for model_type '" +
                                j.value("model_type", "") + "' (" + c.architecture_name + ")");
  }
  m.architecture = c.architecture_name;
  const int64_t V = c.vocab_size, H = c.hidden_size, L = c.num_layers;
  const int64_t heads = c.num_heads, kv = c.num_kv_heads, hd = c.head_dim;
  const int64_t inter = c.intermediate_size;
  const MoeConfig& moe = c.moe;
  const int64_t experts = moe.num_experts;
  const int64_t moe_inter = moe.expert_intermediate_size;
  const int64_t shared_inter = moe.shared_intermediate_size;
  int64_t moe_layers = 0;
  for (bool b : moe.moe_layer) moe_layers += b ? 1 : 0;
  const int64_t dense_layers = L - moe_layers;
  const int64_t mtp = c.num_mtp_layers;
  json formats = j.value("formats", json::object());
  const std::string def = formats.value("default", "bf16");
  auto fmt = [&](const char* part) { return formats.value(part, def); };
  const std::string weight_format = j.value("weight_format", "");

  m.shape = TpModelShape::From(c);
  m.num_layers = L;
  m.num_mtp_layers = mtp;
  m.num_experts = experts;
  m.experts_per_token = experts > 0 ? moe.experts_per_token : 0;
  m.moe_intermediate_size = experts > 0 ? moe_inter : 0;
  m.shared_intermediate_size = experts > 0 ? shared_inter : 0;
  m.num_moe_layers = moe_layers;

  // Layers of the main model and the MTP heads (each a full MoE layer plus a
  // [H, 2H] projection and three norms; they share the main model's embedding
  // and lm_head), counted apart.
  const bool o_bias = c.attention_bias && c.arch == Architecture::kLlama;
  auto add_layers = [&](int64_t n_layers, int64_t n_dense, bool main) {
    std::vector<WeightGroup> g;
    auto add = [&](std::string name, ShardKind shard, std::string format, int64_t rows,
                   int64_t cols, int64_t count, WeightUse use = WeightUse::kEveryToken,
                   WeightKind kind = WeightKind::kMatrix) {
      if (count <= 0) return;
      WeightGroup w;
      w.name = std::move(name);
      w.shard = shard;
      w.format = std::move(format);
      w.rows = rows;
      w.cols = cols;
      w.count = count;
      w.use = main ? use : WeightUse::kMtp;
      w.kind = kind;
      g.push_back(std::move(w));
    };
    const int64_t n_moe = n_layers - n_dense;
    add("attention q_proj", ShardKind::kColumn, fmt("attention"), heads * hd, H, n_layers);
    add("attention k_proj, v_proj", ShardKind::kKvColumn, fmt("attention"), kv * hd, H,
        2 * n_layers);
    add("attention o_proj", ShardKind::kRow, fmt("attention"), H, heads * hd, n_layers);
    if (c.attention_bias) {
      add("attention q bias", ShardKind::kColumn, fmt("norms"), heads * hd, 1, n_layers,
          WeightUse::kEveryToken, WeightKind::kVector);
      add("attention k, v biases", ShardKind::kKvColumn, fmt("norms"), kv * hd, 1, 2 * n_layers,
          WeightUse::kEveryToken, WeightKind::kVector);
    }
    if (o_bias) {
      add("attention o bias", ShardKind::kReplicated, fmt("norms"), H, 1, n_layers,
          WeightUse::kEveryToken, WeightKind::kVector);
    }
    add("norms", ShardKind::kReplicated, fmt("norms"), 1, H, 2 * n_layers, WeightUse::kEveryToken,
        WeightKind::kVector);
    if (c.qk_norm) {
      add("q/k norms", ShardKind::kReplicated, fmt("norms"), 1, hd, 2 * n_layers,
          WeightUse::kEveryToken, WeightKind::kVector);
    }
    add("mlp gate_proj, up_proj", ShardKind::kColumn, fmt("mlp"), inter, H, 2 * n_dense);
    add("mlp down_proj", ShardKind::kRow, fmt("mlp"), H, inter, n_dense);
    if (experts > 0) {
      add("experts gate_proj, up_proj", ShardKind::kColumn, fmt("experts"), moe_inter, H,
          2 * experts * n_moe, WeightUse::kRoutedExpert);
      add("experts down_proj", ShardKind::kRow, fmt("experts"), H, moe_inter, experts * n_moe,
          WeightUse::kRoutedExpert);
      if (shared_inter > 0) {
        add("shared experts gate_proj, up_proj", ShardKind::kColumn, fmt("shared_experts"),
            shared_inter, H, 2 * n_moe);
        add("shared experts down_proj", ShardKind::kRow, fmt("shared_experts"), H, shared_inter,
            n_moe);
      }
      add("router", ShardKind::kReplicated, fmt("router"), experts, H, n_moe);
      if (moe.score_correction_bias) {
        add("router score-correction bias", ShardKind::kReplicated, "f32", experts, 1, n_moe,
            WeightUse::kEveryToken, WeightKind::kVector);
      }
    }
    if (!main) {
      add("eh_proj", ShardKind::kReplicated, fmt("attention"), H, 2 * H, n_layers);
      add("enorm, hnorm, shared_head.norm", ShardKind::kReplicated, fmt("norms"), 1, H,
          3 * n_layers, WeightUse::kMtp, WeightKind::kVector);
      for (auto& x : g) x.name = "MTP " + x.name;
    }
    return g;
  };
  std::vector<WeightGroup> main = add_layers(L, dense_layers, true);
  {
    WeightGroup e{"embed_tokens", ShardKind::kVocab, fmt("embeddings"), V, H, 1};
    e.use = c.tie_word_embeddings ? WeightUse::kEveryToken : WeightUse::kLookup;
    main.push_back(e);
  }
  if (!c.tie_word_embeddings)
    main.push_back({"lm_head", ShardKind::kVocab, fmt("lm_head"), V, H, 1});
  {
    WeightGroup n{"final norm", ShardKind::kReplicated, fmt("norms"), 1, H, 1};
    n.kind = WeightKind::kVector;
    main.push_back(n);
  }
  // The MTP layers' MoE blocks are MoE whenever the main model's are.
  std::vector<WeightGroup> extra =
      mtp > 0 ? add_layers(mtp, experts > 0 ? 0 : mtp, false) : std::vector<WeightGroup>{};
  auto params = [](const std::vector<WeightGroup>& gs) {
    int64_t p = 0;
    for (const auto& g : gs) p += g.rows * g.cols * g.count;
    return p;
  };
  m.params = params(main);
  m.extra_params = params(extra);
  // Active per token: everything but the routed experts not chosen.
  m.active_params = m.params;
  if (experts > 0) {
    m.active_params -= (experts - m.experts_per_token) * 3 * H * moe_inter * moe_layers;
  }
  m.groups = std::move(main);
  m.groups.insert(m.groups.end(), extra.begin(), extra.end());
  for (const auto& g : m.groups) {
    OCTET_RETURN_IF_ERROR(TensorBytes(g.format, 1, 16).status().WithContext(where + ": " + g.name));
    if (g.format == "nvfp4") m.shape.nvfp4 = true;
  }
  m.weight_format = weight_format.empty() ? def : weight_format;
  return m;
}

}  // namespace

namespace {

int64_t GroupBytes(const WeightGroup& g) {
  if (g.stored_bytes > 0) return g.stored_bytes;
  auto b = TensorBytes(g.format, g.rows, g.cols);
  return b.ok() ? *b * g.count : 0;
}

}  // namespace

int64_t ModelFootprint::TotalWeightBytes() const {
  int64_t total = 0;
  for (const auto& g : groups) total += GroupBytes(g);
  return total;
}

int64_t ModelFootprint::MtpWeightBytes() const {
  int64_t total = 0;
  for (const auto& g : groups) {
    if (g.use == WeightUse::kMtp) total += GroupBytes(g);
  }
  return total;
}

int64_t ModelFootprint::ActiveBytesPerToken(int tp, int rank) const {
  int64_t every = 0, routed = 0;
  for (const auto& g : groups) {
    if (g.use == WeightUse::kEveryToken) every += GroupReadBytesOnRank(g, shape, tp, rank);
    if (g.use == WeightUse::kRoutedExpert) routed += GroupReadBytesOnRank(g, shape, tp, rank);
  }
  // The routed experts' average size times top-k (all experts of a model have
  // one shape, so this is exact).
  if (num_experts > 0) routed = routed / num_experts * experts_per_token;
  return every + routed;
}

Result<int64_t> TensorBytes(const std::string& format, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  if (format == "nvfp4") {
    // packed E2M1 codes + one e4m3 scale per 16 + weight_scale_2 and input_scale (f32).
    return n / 2 + (n + 15) / 16 + 8;
  }
  OCTET_ASSIGN_OR_RETURN(int64_t b, DtypeBytes(format));
  return n * b;
}

// Every tensor of the checkpoint is one group with its exact stored bytes,
// classified by its Hugging Face name: how TP splits it (the engine's layout)
// and when a decode step reads it (routed experts
// model.layers.{i}.mlp.experts.{e}.*; the MTP layers model.layers.{i >= L}.*;
// an untied embed_tokens).
Result<ModelFootprint> LoadFolderModel(const std::string& dir) {
  OCTET_ASSIGN_OR_RETURN(ModelConfig c, LoadModelConfig(dir));
  OCTET_ASSIGN_OR_RETURN(auto store, CheckpointStore::Open(dir));
  ModelFootprint m;
  m.id = BaseName(dir);
  m.display_name = m.id;
  m.source = dir;
  m.architecture = c.architecture_name;
  m.shape = TpModelShape::From(c);
  m.num_layers = c.num_layers;
  m.num_mtp_layers = c.num_mtp_layers;
  if (c.moe.num_experts > 0) {
    m.num_experts = c.moe.num_experts;
    m.experts_per_token = c.moe.experts_per_token;
    m.moe_intermediate_size = c.moe.expert_intermediate_size;
    m.shared_intermediate_size = c.moe.shared_intermediate_size;
    for (bool b : c.moe.moe_layer) m.num_moe_layers += b ? 1 : 0;
  }
  // The decoder layer a tensor belongs to (-1: none).
  auto layer_of = [](const std::string& n) -> int64_t {
    static const std::string kPrefix = "model.layers.";
    if (n.rfind(kPrefix, 0) != 0) return -1;
    int64_t i = 0;
    size_t p = kPrefix.size();
    if (p >= n.size() || !std::isdigit(static_cast<unsigned char>(n[p]))) return -1;
    for (; p < n.size() && std::isdigit(static_cast<unsigned char>(n[p])); ++p) {
      i = i * 10 + (n[p] - '0');
      if (i > (int64_t{1} << 20)) return -1;
    }
    return i;
  };
  std::set<std::string> formats;
  int64_t routed_params = 0;
  for (const TensorInfo* t : store->tensors()) {
    WeightGroup g;
    g.name = t->name;
    g.count = 1;
    g.stored_bytes = t->size_bytes;
    const bool scalar = t->numel() == 1 && t->shape.size() <= 1;
    if (t->shape.size() >= 2) {
      g.rows = t->shape[0];
      g.cols = t->numel() / std::max<int64_t>(1, t->shape[0]);
      g.kind = WeightKind::kMatrix;
    } else {
      g.rows = t->numel();  // a bias or norm follows its rows; a scalar has 1
      g.cols = 1;
      g.kind = scalar ? WeightKind::kScalar : WeightKind::kVector;
    }
    const std::string& n = t->name;
    auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
    if (scalar) {
      g.shard = ShardKind::kReplicated;
    } else if (has("embed_tokens") || n.rfind("lm_head.", 0) == 0 || has(".shared_head.head.")) {
      g.shard = ShardKind::kVocab;
    } else if (has(".q_proj.") || has(".gate_proj.") || has(".up_proj.")) {
      g.shard = ShardKind::kColumn;
    } else if (has(".k_proj.") || has(".v_proj.")) {
      g.shard = ShardKind::kKvColumn;
    } else if ((has(".o_proj.") || has(".down_proj.")) && t->shape.size() >= 2) {
      g.shard = ShardKind::kRow;  // (a row-parallel bias is whole on every rank)
    } else {
      g.shard = ShardKind::kReplicated;
    }
    const int64_t layer = layer_of(n);
    const bool mtp = layer >= c.num_layers;
    if (mtp) {
      g.use = WeightUse::kMtp;
    } else if (layer >= 0 && has(".mlp.experts.")) {
      g.use = WeightUse::kRoutedExpert;
    } else if (n.rfind("model.embed_tokens.", 0) == 0 && !c.tie_word_embeddings) {
      g.use = WeightUse::kLookup;
    }
    g.format = std::string(DTypeName(t->dtype));
    if (t->dtype == DType::kU8 || t->dtype == DType::kF8E4M3) formats.insert("NVFP4");
    else if (t->numel() > 1) formats.insert(std::string(DTypeName(t->dtype)));
    if (t->shape.size() >= 2 && !has("_scale")) {
      const int64_t params = t->dtype == DType::kU8 ? t->numel() * 2 : t->numel();
      (mtp ? m.extra_params : m.params) += params;
      if (g.use == WeightUse::kRoutedExpert) routed_params += params;
    }
    m.groups.push_back(std::move(g));
  }
  m.active_params = m.params;
  if (m.num_experts > 0) {
    m.active_params -= routed_params / m.num_experts * (m.num_experts - m.experts_per_token);
  }
  for (const auto& f : formats) m.weight_format += (m.weight_format.empty() ? "" : "+") + f;
  return m;
}

Result<ModelFootprint> LoadCatalogFile(const std::string& path) {
  OCTET_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return InvalidArgumentError(path + ": not a JSON object");
  return FromCatalogJson(j, path);
}

Result<ModelFootprint> LoadHubConfigModel(const std::string& config_json,
                                          const std::string& quant_config_json,
                                          int64_t checkpoint_bytes, const std::string& id) {
  const std::string where = id + " config.json";
  json config = json::parse(config_json, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) return InvalidArgumentError(where + ": not a JSON object");
  json quant;
  if (!quant_config_json.empty()) {
    quant = json::parse(quant_config_json, nullptr, /*allow_exceptions=*/false);
    if (!quant.is_object()) {
      return InvalidArgumentError(id + " hf_quant_config.json: not a JSON object");
    }
  }
  // Catalog keys are Octet's, never the repo's.
  json j = config;
  for (const char* k : {"name", "display_name", "note", "fictional", "hub_repo", "published",
                        "formats", "weight_format", "architecture"}) {
    j.erase(k);
  }
  j["name"] = id;
  j["display_name"] = id;
  if (!j.contains("model_type") && config.contains("architectures") &&
      config["architectures"].is_array() && !config["architectures"].empty() &&
      config["architectures"][0].is_string()) {
    j["architecture"] = config["architectures"][0];
  }
  std::string dtype = "bf16";
  const std::string torch_dtype = config.value("torch_dtype", config.value("dtype", ""));
  if (torch_dtype == "float16") dtype = "f16";
  if (torch_dtype == "float32") dtype = "f32";
  // The quantization: hf_quant_config.json {"quantization": {"quant_algo",
  // "exclude_modules"}}, else config.json's quantization_config {"quant_algo"
  // or "quant_method", "ignore" / "modules_to_not_convert"}.
  std::string algo;
  json exclude = json::array();
  auto read_quant = [&](const json& q) {
    if (!q.is_object()) return;
    std::string a = q.value("quant_algo", "");
    if (a.empty()) a = q.value("quant_method", "");
    for (auto& ch : a) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (a.find("nvfp4") != std::string::npos)
      algo = "nvfp4";
    else if (a.find("fp8") != std::string::npos)
      algo = "fp8";
    for (const char* k : {"exclude_modules", "ignore", "modules_to_not_convert"}) {
      if (q.contains(k) && q[k].is_array()) {
        for (const auto& e : q[k]) {
          if (e.is_string()) exclude.push_back(e);
        }
      }
    }
  };
  if (quant.is_object()) read_quant(quant.value("quantization", json::object()));
  if (algo.empty() && config.contains("quantization_config")) {
    read_quant(config["quantization_config"]);
  }
  json formats = {{"default", dtype}};
  std::string summary = dtype;
  if (!algo.empty()) {
    const int64_t layers = std::max<int64_t>(1, config.value("num_hidden_layers", int64_t{1}));
    // A part stays unquantized when the excluded globs name it in every layer.
    auto excluded = [&](const std::string& module_in_layer) {
      for (int64_t l = 0; l < layers; ++l) {
        const std::string name = module_in_layer.empty()
                                     ? std::string("lm_head")
                                     : "model.layers." + std::to_string(l) + "." + module_in_layer;
        bool hit = false;
        for (const auto& e : exclude) {
          if (::fnmatch(e.get<std::string>().c_str(), name.c_str(), 0) == 0) hit = true;
        }
        if (!hit) return false;
        if (module_in_layer.empty()) break;
      }
      return true;
    };
    std::vector<std::string> quantized;
    const std::pair<const char*, const char*> parts[] = {
        {"attention", "self_attn.q_proj"},
        {"mlp", "mlp.gate_proj"},
        {"experts", "mlp.experts.0.gate_proj"},
        {"shared_experts", "mlp.shared_experts.gate_proj"},
        {"lm_head", ""}};
    for (const auto& [part, module] : parts) {
      if (!excluded(module)) {
        formats[part] = algo;
        quantized.push_back(part);
      }
    }
    summary = algo == "nvfp4" ? "NVFP4" : "FP8";
    std::string list;
    for (const auto& q : quantized) list += (list.empty() ? "" : ", ") + q;
    for (auto& ch : dtype) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    summary += " (" + list + ") + " + dtype;
  } else {
    for (auto& ch : summary) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  }
  j["formats"] = formats;
  j["weight_format"] = summary;
  OCTET_ASSIGN_OR_RETURN(ModelFootprint m, FromCatalogJson(j, where));
  m.source = "hub:" + id;
  m.note.clear();
  if (checkpoint_bytes > 0) {
    const int64_t computed = m.TotalWeightBytes();
    if (computed > 0 && computed != checkpoint_bytes) {
      const double ratio = double(checkpoint_bytes) / double(computed);
      int64_t total = 0;
      for (auto& g : m.groups) {
        g.stored_bytes = std::max<int64_t>(1, std::llround(double(GroupBytes(g)) * ratio));
        total += g.stored_bytes;
      }
      // Rounding: the largest group absorbs the difference.
      auto largest = std::max_element(m.groups.begin(), m.groups.end(),
                                      [](const WeightGroup& a, const WeightGroup& b) {
                                        return a.stored_bytes < b.stored_bytes;
                                      });
      if (largest != m.groups.end()) largest->stored_bytes += checkpoint_bytes - total;
    }
  }
  return m;
}

Result<std::vector<ModelFootprint>> LoadCatalog(const std::string& catalog_dir) {
  DIR* d = ::opendir(catalog_dir.c_str());
  if (!d) return NotFoundError("model catalog folder '" + catalog_dir + "' does not exist");
  std::vector<std::string> files;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0) files.push_back(name);
  }
  ::closedir(d);
  std::sort(files.begin(), files.end());
  std::vector<ModelFootprint> out;
  for (const auto& f : files) {
    OCTET_ASSIGN_OR_RETURN(ModelFootprint m, LoadCatalogFile(JoinPath(catalog_dir, f)));
    out.push_back(std::move(m));
  }
  return out;
}

Result<ModelFootprint> LoadCatalogModel(const std::string& catalog_dir, const std::string& name) {
  OCTET_ASSIGN_OR_RETURN(auto all, LoadCatalog(catalog_dir));
  std::string names;
  for (auto& m : all) {
    if (m.id == name) return std::move(m);
    names += (names.empty() ? "" : ", ") + m.id;
  }
  return NotFoundError("'" + name + "' is neither a model folder nor a catalog entry (catalog: " +
                       names + ")");
}

// A 128 GiB DGX Spark (GB10, unified memory) keeps about 16 GiB from a model:
//   ~6-8 GiB  Linux never sees (public reports of DGX OS show MemTotal near
//             120-122 GiB of the 128 GiB)
//   ~6-8 GiB  DGX OS and its services at idle (desktop off or on)
//   ~1-2 GiB  the CUDA context, NCCL/RoCE buffers and CUDA graphs
// Other nodes: the same share (1/8) of their memory, at least 2 GiB.
int64_t DefaultReserve(int64_t node_memory) {
  return std::max<int64_t>(2 * kGiB, node_memory / 8);
}

ModelFootprint QuantizedAtLoad(const ModelFootprint& in) {
  ModelFootprint m = in;
  auto dense = [](std::string f) {
    for (char& ch : f) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return f == "bf16" || f == "f16" || f == "f32";
  };
  std::vector<WeightGroup> added;
  bool any = false;
  for (WeightGroup& g : m.groups) {
    if (g.kind != WeightKind::kMatrix || !dense(g.format) || g.cols % 16 != 0) continue;
    const bool embedding = g.name.find("embed_tokens") != std::string::npos;
    const bool router = g.name == "router" || g.name.find(".mlp.gate.") != std::string::npos;
    const bool mtp_head = g.name.find("shared_head") != std::string::npos;  // not loaded
    if (router || mtp_head) continue;
    const int64_t n = g.rows * g.cols;
    if (embedding) {
      if (g.use != WeightUse::kEveryToken) continue;  // untied: one row gathered per token
      WeightGroup copy = g;
      copy.name = "lm_head (NVFP4 copy of the tied embed_tokens)";
      copy.format = "nvfp4";
      copy.stored_bytes = (n / 2 + n / 16) * g.count;
      added.push_back(copy);
      g.use = WeightUse::kLookup;
      any = true;
      continue;
    }
    g.format = "nvfp4";
    g.stored_bytes = (n / 2 + n / 16) * g.count;
    any = true;
  }
  m.groups.insert(m.groups.end(), added.begin(), added.end());
  if (any) m.weight_format = "NVFP4 at load (from " + in.weight_format + ")";
  return m;
}

Result<MemoryPlan> PlanMemory(const ModelFootprint& in, const PlanRequest& r) {
  const ModelFootprint model = r.quantize_nvfp4 ? QuantizedAtLoad(in) : in;
  if (r.nodes < 1 || r.nodes > 1024) return InvalidArgumentError("nodes must be in 1..1024");
  if (r.node_memory <= 0) return InvalidArgumentError("node memory must be positive");
  if (r.context < 1) return InvalidArgumentError("context must be at least 1");
  if (r.concurrency < 1) return InvalidArgumentError("concurrency must be at least 1");
  if (!(r.headroom >= 0 && r.headroom < 1)) return InvalidArgumentError("headroom must be in [0, 1)");
  if (!(r.node_bandwidth > 0) || !std::isfinite(r.node_bandwidth)) {
    return InvalidArgumentError("node bandwidth must be a positive number of bytes/s");
  }
  OCTET_ASSIGN_OR_RETURN(int64_t kv_bytes, DtypeBytes(r.kv_dtype));
  OCTET_ASSIGN_OR_RETURN(int64_t act_bytes, DtypeBytes(r.activation_dtype));
  MemoryPlan plan;
  plan.model = model;
  plan.request = r;
  plan.tp = r.nodes;
  const TpModelShape& s = model.shape;
  for (int t = 1; t <= std::max(r.max_tp, r.nodes); ++t) {
    Status v = CheckTpDegree(s, t);
    if (t <= r.max_tp) plan.degrees.push_back({t, v.ok(), v.ok() ? "" : v.message()});
  }
  Status tp_ok = CheckTpDegree(s, plan.tp);
  plan.tp_valid = tp_ok.ok();
  // Layers holding a KV cache: the MTP layers only when the run loads them.
  const int64_t kv_layers = model.num_layers + (r.load_mtp ? model.num_mtp_layers : 0);
  plan.kv_bytes_per_token = kv_layers * 2 * s.num_kv_heads * s.head_dim * kv_bytes;
  plan.active_weight_bytes_per_token = model.ActiveBytesPerToken();
  for (const auto& g : model.groups) {
    if (g.use != WeightUse::kMtp || r.load_mtp) plan.weight_bytes += GroupBytes(g);
  }

  auto node_plan = [&](int tp, int rank, NodePlan* n) -> Status {
    n->node = rank;
    for (const auto& g : model.groups) {
      if (g.use == WeightUse::kMtp && !r.load_mtp) continue;
      OCTET_ASSIGN_OR_RETURN(int64_t b, GroupBytesOnRank(g, s, tp, rank));
      n->weights_bytes += b;
    }
    n->active_weight_bytes_per_token = model.ActiveBytesPerToken(tp, rank);
    const int64_t local_kv =
        s.num_kv_heads >= tp ? (s.num_kv_heads + tp - 1) / tp : 1;
    n->kv_cache_bytes =
        r.context * r.concurrency * kv_layers * 2 * local_kv * s.head_dim * kv_bytes;
    // One step's activations on this rank: residual, normed input, projection
    // output and attention output (H each), local q/k/v, local gate/up (the
    // widest of a dense MLP and each token's chosen experts plus the shared one).
    const int64_t H = s.hidden_size;
    const int64_t q_local = s.num_heads * s.head_dim / tp;
    const int64_t kv_local = local_kv * s.head_dim;
    int64_t ffn = s.intermediate_size;
    if (model.num_experts > 0) {
      ffn = std::max(
          model.num_moe_layers < model.num_layers ? ffn : 0,
          model.experts_per_token * model.moe_intermediate_size + model.shared_intermediate_size);
    }
    const int64_t ffn_local = ffn / tp;
    n->workspace_bytes = r.max_batch_tokens * (4 * H + q_local + 2 * kv_local + 2 * ffn_local) *
                         act_bytes;
    // Logits (f32): this rank's vocabulary slice for every sequence, and on
    // rank 0 the gathered full rows.
    const VocabRange v = VocabShard(s.vocab_size, tp, 0);
    n->workspace_bytes += r.concurrency * v.padded * 4 * tp;
    if (rank == 0) n->workspace_bytes += r.concurrency * s.vocab_size * 4;
    n->reserve_bytes = r.reserve >= 0 ? r.reserve : DefaultReserve(r.node_memory);
    n->headroom_bytes = static_cast<int64_t>(r.headroom * double(r.node_memory));
    n->total_bytes = n->weights_bytes + n->kv_cache_bytes + n->workspace_bytes + n->reserve_bytes +
                     n->headroom_bytes;
    n->free_bytes = r.node_memory - n->total_bytes;
    n->fits = n->free_bytes >= 0;
    return Status::Ok();
  };
  auto fits_on = [&](int tp, std::vector<NodePlan>* nodes) -> Result<bool> {
    nodes->assign(tp, NodePlan());
    bool all = true;
    for (int rank = 0; rank < tp; ++rank) {
      OCTET_RETURN_IF_ERROR(node_plan(tp, rank, &(*nodes)[rank]));
      all = all && (*nodes)[rank].fits;
    }
    return all;
  };
  OCTET_ASSIGN_OR_RETURN(bool memory_ok, fits_on(plan.tp, &plan.per_node));
  plan.fits = memory_ok && plan.tp_valid;
  // The decode roofline: the busiest rank's weights per token plus its KV
  // cache of one sequence at the end of the context.
  if (plan.tp_valid) {
    const int64_t local_kv =
        s.num_kv_heads >= plan.tp ? (s.num_kv_heads + plan.tp - 1) / plan.tp : 1;
    const int64_t kv_read = r.context * kv_layers * 2 * local_kv * s.head_dim * kv_bytes;
    int64_t busiest = 0;
    for (const auto& n : plan.per_node) {
      busiest = std::max(busiest, n.active_weight_bytes_per_token + kv_read);
    }
    if (busiest > 0) plan.decode_tokens_per_s = r.node_bandwidth / double(busiest);
  }
  for (int t = 1; t <= r.max_tp; ++t) {
    if (!CheckTpDegree(s, t).ok()) continue;
    std::vector<NodePlan> tmp;
    OCTET_ASSIGN_OR_RETURN(bool ok, fits_on(t, &tmp));
    if (ok) {
      plan.min_nodes = t;
      break;
    }
  }

  // The verdict.
  const NodePlan* worst = &plan.per_node[0];
  for (const auto& n : plan.per_node) {
    if (n.total_bytes > worst->total_bytes) worst = &n;
  }
  const std::string nodes = std::to_string(r.nodes) + (r.nodes == 1 ? " node" : " nodes");
  const std::string mem = " x " + Gib(r.node_memory);
  std::string elsewhere;
  if (plan.min_nodes > 0 && plan.min_nodes != r.nodes) {
    elsewhere = " It fits on " + std::to_string(plan.min_nodes) +
                (plan.min_nodes == 1 ? " node" : " nodes") + " (TP " +
                std::to_string(plan.min_nodes) + ").";
  } else if (plan.min_nodes == 0) {
    elsewhere = " It fits on no valid TP degree up to " + std::to_string(r.max_tp) + " nodes.";
  }
  if (!plan.tp_valid) {
    std::string valid;
    for (const auto& d : plan.degrees) {
      if (d.valid) valid += (valid.empty() ? "" : ", ") + std::to_string(d.tp);
    }
    plan.verdict = "does not fit " + nodes + mem + ": " + tp_ok.message() +
                   " (valid degrees: " + valid + ")." + elsewhere;
  } else if (plan.fits) {
    plan.verdict = "fits " + nodes + mem + " (TP " + std::to_string(plan.tp) + "): each node uses " +
                   Gib(worst->total_bytes) + ", " + Gib(worst->free_bytes) + " to spare.";
  } else {
    plan.verdict = "does not fit " + nodes + mem + " (TP " + std::to_string(plan.tp) +
                   "): a node needs " + Gib(worst->total_bytes) + ", " +
                   Gib(-worst->free_bytes) + " more than it has (weights alone " +
                   Gib(worst->weights_bytes) + ")." + elsewhere;
  }
  return plan;
}

}  // namespace octet::engine
