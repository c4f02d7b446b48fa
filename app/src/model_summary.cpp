#include "octet/app/model_summary.h"

#include <algorithm>
#include <filesystem>

#include "octet/app/hub.h"
#include "octet/engine/memory_plan.h"
#include "octet/engine/model_config.h"
#include "octet/engine/tensor_parallel.h"

namespace octet::app {
namespace {

ModelSummary FromFootprint(const engine::ModelFootprint& f, int max_tp) {
  ModelSummary s;
  s.source = f.source;
  s.name = f.id;
  s.display_name = f.display_name.empty() ? f.id : f.display_name;
  s.note = f.note;
  s.fictional = f.fictional;
  s.hub_repo = f.hub_repo;
  s.architecture = f.architecture;
  s.dtype = f.weight_format;
  s.parameters = f.params + f.extra_params;
  s.active_parameters = f.active_params;
  s.weight_bytes = f.TotalWeightBytes();
  s.active_weight_bytes_per_token = f.ActiveBytesPerToken();
  s.num_experts = f.num_experts;
  s.experts_per_token = f.experts_per_token;
  s.num_mtp_layers = f.num_mtp_layers;
  s.mtp_weight_bytes = f.MtpWeightBytes();
  s.num_layers = f.num_layers;
  s.hidden_size = f.shape.hidden_size;
  s.num_heads = f.shape.num_heads;
  s.num_kv_heads = f.shape.num_kv_heads;
  s.vocab_size = f.shape.vocab_size;
  for (int tp = 1; tp <= max_tp; ++tp) {
    TpChoice c;
    c.tp = tp;
    const Status st = engine::CheckTpDegree(f.shape, tp);
    c.valid = st.ok();
    if (!st.ok()) c.why = st.message();
    s.tp_choices.push_back(c);
  }
  return s;
}

}  // namespace

Result<ModelSummary> SummarizeModel(const std::string& dir, int max_tp) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return NotFoundError(dir + ": not a folder");
  OCTET_ASSIGN_OR_RETURN(engine::ModelFootprint f, engine::LoadFolderModel(dir));
  ModelSummary s = FromFootprint(f, max_tp);
  std::string abs = fs::absolute(dir, ec).lexically_normal().string();
  while (abs.size() > 1 && abs.back() == '/') abs.pop_back();
  s.source = abs;
  s.name = fs::path(abs).filename().string();
  if (s.display_name.empty() || s.display_name == f.id) s.display_name = s.name;
  OCTET_ASSIGN_OR_RETURN(engine::ModelConfig config, engine::LoadModelConfig(dir));
  s.context = config.max_position_embeddings;
  if (s.dtype.empty()) s.dtype = config.torch_dtype;
  s.has_tokenizer = fs::exists(fs::path(dir) / "tokenizer.json", ec);
  return s;
}

Result<ModelSummary> SummarizeCatalogEntry(const std::string& path, int max_tp) {
  OCTET_ASSIGN_OR_RETURN(engine::ModelFootprint f, engine::LoadCatalogFile(path));
  ModelSummary s = FromFootprint(f, max_tp);
  s.source = path;
  s.from_catalog = true;
  return s;
}

Result<std::vector<ModelSummary>> ListCatalog(const std::string& catalog_dir, int max_tp) {
  OCTET_ASSIGN_OR_RETURN(std::vector<engine::ModelFootprint> all, engine::LoadCatalog(catalog_dir));
  std::vector<ModelSummary> out;
  for (const engine::ModelFootprint& f : all) {
    ModelSummary s = FromFootprint(f, max_tp);
    s.from_catalog = true;
    out.push_back(std::move(s));
  }
  return out;
}

Result<HubModelInfo> FetchHubModelInfo(const std::string& repo_ref) {
  OCTET_ASSIGN_OR_RETURN(hub::RepoRef ref, hub::ParseRepoRef(repo_ref));
  const hub::HubConfig c = hub::HubConfig::FromEnvironment();
  if (c.offline) {
    return FailedPreconditionError(ref.ToString() + ": HF_HUB_OFFLINE is set, and planning from " +
                                   "the Hub needs its file list");
  }
  OCTET_ASSIGN_OR_RETURN(hub::RepoInfo repo, hub::FetchRepoInfo(c, ref));
  HubModelInfo info;
  info.repo = ref.repo;
  info.revision = ref.revision;
  info.commit = repo.commit;
  info.endpoint = c.endpoint;
  bool has_config = false, has_quant = false;
  for (const auto& f : repo.files) {
    if (f.path == "config.json") has_config = true;
    if (f.path == "hf_quant_config.json") has_quant = true;
    if (f.path.find('/') == std::string::npos && f.path.size() > 12 &&
        f.path.compare(f.path.size() - 12, 12, ".safetensors") == 0) {
      info.safetensors_bytes += std::max<int64_t>(0, f.size);
      ++info.safetensors_files;
    }
  }
  if (!has_config) {
    return NotFoundError(ref.ToString() + " (commit " + repo.commit +
                         ") has no config.json: not a transformers model repo");
  }
  if (info.safetensors_files == 0) {
    return FailedPreconditionError(ref.ToString() + " (commit " + repo.commit +
                                   ") has no top-level .safetensors files: the engine loads "
                                   "safetensors checkpoints only");
  }
  OCTET_ASSIGN_OR_RETURN(info.config_json, hub::FetchSmallFile(c, repo, "config.json"));
  info.files_read.push_back("config.json");
  if (has_quant) {
    OCTET_ASSIGN_OR_RETURN(info.quant_config_json,
                           hub::FetchSmallFile(c, repo, "hf_quant_config.json"));
    info.files_read.push_back("hf_quant_config.json");
  }
  return info;
}

Result<ModelSummary> SummarizeHubModel(const HubModelInfo& info, int max_tp) {
  const std::string id = info.revision == "main" ? info.repo : info.repo + "@" + info.revision;
  OCTET_ASSIGN_OR_RETURN(engine::ModelFootprint f,
                         engine::LoadHubConfigModel(info.config_json, info.quant_config_json,
                                                    info.safetensors_bytes, id));
  ModelSummary s = FromFootprint(f, max_tp);
  s.source = "hub:" + id;
  s.from_hub = true;
  s.hub_repo = info.repo;
  s.hub_config_json = info.config_json;
  s.hub_quant_config_json = info.quant_config_json;
  s.hub_checkpoint_bytes = info.safetensors_bytes;
  return s;
}

Result<LaunchMemoryPlan> PlanModelMemory(const ModelSummary& model, int nodes, int64_t node_memory,
                                         int64_t context, int64_t concurrency, bool quantize_nvfp4,
                                         bool load_mtp) {
  engine::ModelFootprint f;
  if (model.from_catalog) {
    OCTET_ASSIGN_OR_RETURN(f, engine::LoadCatalogFile(model.source));
  } else if (model.from_hub) {
    OCTET_ASSIGN_OR_RETURN(
        f, engine::LoadHubConfigModel(model.hub_config_json, model.hub_quant_config_json,
                                      model.hub_checkpoint_bytes, model.name));
  } else {
    OCTET_ASSIGN_OR_RETURN(f, engine::LoadFolderModel(model.source));
  }
  engine::PlanRequest r;
  r.nodes = nodes;
  r.node_memory = node_memory;
  r.context = context;
  r.concurrency = concurrency;
  // What the workbench launches: `octet serve` with its default float32 KV
  // cache (the planner's own default, bf16, is what GPU engines keep).
  r.kv_dtype = "f32";
  r.quantize_nvfp4 = quantize_nvfp4;
  r.load_mtp = load_mtp;
  OCTET_ASSIGN_OR_RETURN(engine::MemoryPlan plan, engine::PlanMemory(f, r));
  LaunchMemoryPlan out;
  out.nodes = nodes;
  out.node_memory = node_memory;
  out.tp_valid = plan.tp_valid;
  out.fits = plan.fits;
  out.verdict = plan.verdict;
  out.min_nodes = plan.min_nodes;
  for (const engine::NodePlan& n : plan.per_node) {
    out.per_node.push_back({n.node, n.weights_bytes, n.kv_cache_bytes, n.workspace_bytes,
                            n.reserve_bytes, n.headroom_bytes, n.total_bytes, n.free_bytes, n.fits,
                            n.active_weight_bytes_per_token});
  }
  out.weight_bytes = plan.weight_bytes;
  out.active_weight_bytes_per_token = plan.active_weight_bytes_per_token;
  out.node_bandwidth = r.node_bandwidth;
  out.decode_tokens_per_s = plan.decode_tokens_per_s;
  return out;
}

}  // namespace octet::app
