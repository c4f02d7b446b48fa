#include "octet/engine/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <dirent.h>
#include <nlohmann/json.hpp>

#include "octet/base/args.h"
#include "octet/base/file_util.h"
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

std::string Gib(int64_t bytes) { return FormatBytes(double(bytes)); }

// ---- catalog --------------------------------------------------------------------

int64_t Int(const json& j, const char* key, int64_t def = 0) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : def;
}

Result<ModelFootprint> FromCatalogJson(const json& j, const std::string& where) {
  ModelFootprint m;
  m.source = where;
  m.id = j.value("name", "");
  if (m.id.empty()) return InvalidArgumentError(where + ": 'name' is required");
  m.display_name = j.value("display_name", m.id);
  m.note = j.value("note", "");
  m.fictional = j.value("fictional", false);
  m.architecture = j.value("architecture", "");
  const int64_t V = Int(j, "vocab_size"), H = Int(j, "hidden_size");
  const int64_t L = Int(j, "num_hidden_layers"), heads = Int(j, "num_attention_heads");
  const int64_t kv = Int(j, "num_key_value_heads", heads);
  const int64_t hd = Int(j, "head_dim", heads > 0 ? H / heads : 0);
  const int64_t inter = Int(j, "intermediate_size");
  const int64_t experts = Int(j, "n_routed_experts");
  const int64_t per_tok = Int(j, "num_experts_per_tok");
  const int64_t shared = Int(j, "n_shared_experts");
  const int64_t moe_inter = Int(j, "moe_intermediate_size");
  const int64_t dense_layers = experts > 0 ? Int(j, "first_k_dense_replace") : L;
  const int64_t mtp = Int(j, "num_nextn_predict_layers");
  const bool tied = j.value("tie_word_embeddings", false);
  const bool qk_norm = j.value("qk_norm", false);
  for (auto [name, v] : {std::pair<const char*, int64_t>{"vocab_size", V}, {"hidden_size", H},
                         {"num_hidden_layers", L}, {"num_attention_heads", heads},
                         {"head_dim", hd}}) {
    if (v <= 0) return InvalidArgumentError(where + ": '" + name + "' must be a positive integer");
  }
  if (experts > 0 && (per_tok <= 0 || moe_inter <= 0)) {
    return InvalidArgumentError(where + ": an MoE entry needs num_experts_per_tok and "
                                        "moe_intermediate_size");
  }
  if (dense_layers > 0 && inter <= 0) {
    return InvalidArgumentError(where + ": 'intermediate_size' is required for dense layers");
  }
  json formats = j.value("formats", json::object());
  const std::string def = formats.value("default", "bf16");
  auto fmt = [&](const char* part) { return formats.value(part, def); };
  const std::string weight_format = j.value("weight_format", "");

  m.shape.num_heads = heads;
  m.shape.num_kv_heads = kv;
  m.shape.head_dim = hd;
  m.shape.hidden_size = H;
  m.shape.intermediate_size = experts > 0 ? moe_inter : inter;
  m.shape.vocab_size = V;
  m.shape.nvfp4 = false;
  m.num_layers = L + mtp;
  m.num_experts = experts;
  m.experts_per_token = per_tok;
  m.moe_intermediate_size = moe_inter;

  // Layers of the main model and the MTP heads (each a full MoE layer plus a
  // [H, 2H] projection and two norms), counted apart.
  auto add_layers = [&](int64_t n_layers, int64_t n_dense, bool main) {
    std::vector<WeightGroup> g;
    const int64_t moe_layers = n_layers - n_dense;
    g.push_back({"attention q_proj", ShardKind::kColumn, fmt("attention"), heads * hd, H, n_layers});
    g.push_back({"attention k_proj, v_proj", ShardKind::kKvColumn, fmt("attention"), kv * hd, H,
                 2 * n_layers});
    g.push_back({"attention o_proj", ShardKind::kRow, fmt("attention"), H, heads * hd, n_layers});
    g.push_back({"norms", ShardKind::kReplicated, fmt("norms"), 1, H, 2 * n_layers});
    if (qk_norm) g.push_back({"q/k norms", ShardKind::kReplicated, fmt("norms"), 1, hd, 2 * n_layers});
    if (n_dense > 0) {
      g.push_back({"mlp gate_proj, up_proj", ShardKind::kColumn, fmt("mlp"), inter, H, 2 * n_dense});
      g.push_back({"mlp down_proj", ShardKind::kRow, fmt("mlp"), H, inter, n_dense});
    }
    if (moe_layers > 0) {
      g.push_back({"experts gate_proj, up_proj", ShardKind::kColumn, fmt("experts"), moe_inter, H,
                   2 * experts * moe_layers});
      g.push_back({"experts down_proj", ShardKind::kRow, fmt("experts"), H, moe_inter,
                   experts * moe_layers});
      if (shared > 0) {
        g.push_back({"shared experts gate_proj, up_proj", ShardKind::kColumn, fmt("shared_experts"),
                     shared * moe_inter, H, 2 * moe_layers});
        g.push_back({"shared experts down_proj", ShardKind::kRow, fmt("shared_experts"), H,
                     shared * moe_inter, moe_layers});
      }
      g.push_back({"router", ShardKind::kReplicated, fmt("router"), experts, H, moe_layers});
    }
    if (!main) {
      g.push_back({"mtp eh_proj", ShardKind::kReplicated, fmt("attention"), H, 2 * H, n_layers});
      g.push_back({"mtp norms", ShardKind::kReplicated, fmt("norms"), 1, H, 3 * n_layers});
    }
    for (auto& x : g) {
      if (!main) x.name = "MTP " + x.name;
    }
    return g;
  };
  std::vector<WeightGroup> main = add_layers(L, dense_layers, true);
  main.push_back({"embed_tokens", ShardKind::kVocab, fmt("embeddings"), V, H, 1});
  if (!tied) main.push_back({"lm_head", ShardKind::kVocab, fmt("lm_head"), V, H, 1});
  main.push_back({"final norm", ShardKind::kReplicated, fmt("norms"), 1, H, 1});
  std::vector<WeightGroup> extra = mtp > 0 ? add_layers(mtp, 0, false) : std::vector<WeightGroup>{};
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
    const int64_t moe_layers = L - dense_layers;
    m.active_params -= (experts - per_tok) * 3 * H * moe_inter * moe_layers;
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

int64_t ModelFootprint::TotalWeightBytes() const {
  int64_t total = 0;
  for (const auto& g : groups) {
    if (g.stored_bytes > 0) {
      total += g.stored_bytes;
    } else {
      auto b = TensorBytes(g.format, g.rows, g.cols);
      total += b.ok() ? *b * g.count : 0;
    }
  }
  return total;
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
  std::set<std::string> formats;
  for (const TensorInfo* t : store->tensors()) {
    WeightGroup g;
    g.name = t->name;
    g.count = 1;
    g.stored_bytes = t->size_bytes;
    if (t->shape.size() >= 2) {
      g.rows = t->shape[0];
      g.cols = t->numel() / std::max<int64_t>(1, t->shape[0]);
    } else {
      g.rows = t->numel();  // a bias or norm follows its rows; a scalar has 1
      g.cols = 1;
    }
    const std::string& n = t->name;
    auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
    const bool scalar = t->numel() == 1;
    if (scalar) {
      g.shard = ShardKind::kReplicated;
    } else if (has("embed_tokens") || n.rfind("lm_head.", 0) == 0) {
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
    g.format = std::string(DTypeName(t->dtype));
    if (t->dtype == DType::kU8 || t->dtype == DType::kF8E4M3) formats.insert("NVFP4");
    else if (t->numel() > 1) formats.insert(std::string(DTypeName(t->dtype)));
    if (t->shape.size() >= 2 && !has("_scale")) {
      const int64_t params = t->dtype == DType::kU8 ? t->numel() * 2 : t->numel();
      m.params += params;
    }
    m.groups.push_back(std::move(g));
  }
  m.active_params = m.params;
  for (const auto& f : formats) m.weight_format += (m.weight_format.empty() ? "" : "+") + f;
  return m;
}

Result<ModelFootprint> LoadCatalogFile(const std::string& path) {
  OCTET_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return InvalidArgumentError(path + ": not a JSON object");
  return FromCatalogJson(j, path);
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

Result<MemoryPlan> PlanMemory(const ModelFootprint& model, const PlanRequest& r) {
  if (r.nodes < 1 || r.nodes > 1024) return InvalidArgumentError("nodes must be in 1..1024");
  if (r.node_memory <= 0) return InvalidArgumentError("node memory must be positive");
  if (r.context < 1) return InvalidArgumentError("context must be at least 1");
  if (r.concurrency < 1) return InvalidArgumentError("concurrency must be at least 1");
  if (!(r.headroom >= 0 && r.headroom < 1)) return InvalidArgumentError("headroom must be in [0, 1)");
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
  plan.kv_bytes_per_token = model.num_layers * 2 * s.num_kv_heads * s.head_dim * kv_bytes;

  auto node_plan = [&](int tp, int rank, NodePlan* n) -> Status {
    n->node = rank;
    for (const auto& g : model.groups) {
      OCTET_ASSIGN_OR_RETURN(int64_t b, GroupBytesOnRank(g, s, tp, rank));
      n->weights_bytes += b;
    }
    const int64_t local_kv =
        s.num_kv_heads >= tp ? (s.num_kv_heads + tp - 1) / tp : 1;
    n->kv_cache_bytes = r.context * r.concurrency * model.num_layers * 2 * local_kv * s.head_dim *
                        kv_bytes;
    // One step's activations on this rank: residual, normed input, projection
    // output and attention output (H each), local q/k/v, local gate/up (dense
    // MLP, or each token's chosen experts plus shared ones).
    const int64_t H = s.hidden_size;
    const int64_t q_local = s.num_heads * s.head_dim / tp;
    const int64_t kv_local = local_kv * s.head_dim;
    const int64_t ffn_local = model.num_experts > 0
                                  ? (model.experts_per_token + 1) * model.moe_intermediate_size / tp
                                  : s.intermediate_size / tp;
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
