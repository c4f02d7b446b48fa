// What the workbench's Launch panel shows about a model before anything is
// loaded — a model folder (config.json and the safetensors headers; nothing
// beyond the headers is read) or a catalog entry (resources/models/*.json):
// architecture, parameters, weight format, bytes, the tensor-parallel degrees
// the engine accepts (each refused one with the engine's reason), and the
// memory planner's verdict for N nodes with the per-node breakdown (weights,
// KV cache, workspace, reserve, headroom), the weight bytes a decode step
// reads (a mixture-of-experts model: its active experts only) and the decode
// estimate they give. Plain types: ui/ sees no engine header.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "octet/base/status.h"

namespace octet::app {

struct TpChoice {
  int tp = 1;
  bool valid = false;
  std::string why;  // empty when valid: "4 kv heads are not divisible by 3"
};

struct ModelSummary {
  std::string source;        // the folder, or the catalog file
  bool from_catalog = false;  // a catalog entry: planning only, nothing to launch
  bool from_hub = false;      // a Hub repo not downloaded: planned from HubModelInfo below
  std::string name;          // the folder name (the served model id) or catalog name
  std::string display_name;  // "Qwen3-8B (BF16)"
  std::string note;          // catalog: where the numbers come from
  bool fictional = false;
  std::string hub_repo;      // catalog: the released checkpoint's Hub repo ("" when fictional)
  std::string architecture;  // "Qwen3ForCausalLM"
  std::string dtype;         // the weight format: "BF16", "NVFP4 experts + BF16"
  int64_t parameters = 0;
  int64_t active_parameters = 0;  // per token (MoE); == parameters for dense models
  int64_t weight_bytes = 0;       // the whole checkpoint
  // Weights one decode step of one token reads at TP 1: all of a dense model's
  // but its embedding table; of an MoE model, its active experts only.
  int64_t active_weight_bytes_per_token = 0;
  int64_t num_experts = 0;  // routed experts per MoE layer (0: dense)
  int64_t experts_per_token = 0;
  int64_t num_mtp_layers = 0;    // multi-token-prediction layers in the checkpoint
  int64_t mtp_weight_bytes = 0;  // their share of weight_bytes (loaded for MTP speculation only)
  int64_t num_layers = 0;
  int64_t hidden_size = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t vocab_size = 0;
  int64_t context = 0;  // max_position_embeddings (folders)
  bool has_tokenizer = false;
  std::vector<TpChoice> tp_choices;  // degrees 1..max_tp
  // from_hub: what the plan is made from (config.json, hf_quant_config.json
  // and the safetensors files' total size).
  std::string hub_config_json, hub_quant_config_json;
  int64_t hub_checkpoint_bytes = 0;
};

// A Hub repo before any weight is downloaded: its file list (sizes), then
// config.json and, when listed, hf_quant_config.json — nothing else. The
// weights are its top-level *.safetensors files. HubConfig from the
// environment (HF_ENDPOINT, HF_TOKEN, ...).
struct HubModelInfo {
  std::string repo, revision, commit, endpoint;
  int safetensors_files = 0;
  int64_t safetensors_bytes = 0;
  std::vector<std::string> files_read;  // "config.json", "hf_quant_config.json"
  std::string config_json, quant_config_json;
};
Result<HubModelInfo> FetchHubModelInfo(const std::string& repo_ref);
// The summary of such a repo (from_hub): parameters and bytes as the config
// gives them, scaled to the files' sizes (engine::LoadHubConfigModel).
Result<ModelSummary> SummarizeHubModel(const HubModelInfo& info, int max_tp = 8);

// A model folder. Errors name the file.
Result<ModelSummary> SummarizeModel(const std::string& dir, int max_tp = 8);
// One catalog file (resources/models/NAME.json).
Result<ModelSummary> SummarizeCatalogEntry(const std::string& path, int max_tp = 8);
// Every entry of a catalog folder, sorted by name.
Result<std::vector<ModelSummary>> ListCatalog(const std::string& catalog_dir, int max_tp = 8);

struct NodeMemoryPlan {
  int node = 0;  // TP rank
  int64_t weights_bytes = 0;
  int64_t kv_cache_bytes = 0;
  int64_t workspace_bytes = 0;
  int64_t reserve_bytes = 0;
  int64_t headroom_bytes = 0;
  int64_t total_bytes = 0;
  int64_t free_bytes = 0;  // node memory - total (negative: short)
  bool fits = false;
  int64_t active_weight_bytes_per_token = 0;  // weights this node reads per decode step
};

struct LaunchMemoryPlan {
  int nodes = 1;
  int64_t node_memory = 0;
  bool tp_valid = false;
  bool fits = false;
  std::string verdict;  // one sentence a person can act on
  std::vector<NodeMemoryPlan> per_node;
  int min_nodes = 0;  // fewest nodes that fit (0: none up to 8)
  int64_t weight_bytes = 0;                   // what the nodes hold together
  int64_t active_weight_bytes_per_token = 0;  // whole model, per decode step
  double node_bandwidth = 0;                  // bytes/s assumed per node
  // Memory-bound decode of one sequence at the end of its context (tok/s; an
  // upper bound: communication not counted; 0 when the degree is invalid).
  double decode_tokens_per_s = 0;
};

// The planner's verdict for `nodes` nodes (one TP rank each) of `node_memory`
// bytes, `context` positions and `concurrency` sequences, for what the
// workbench launches (`octet serve`: float32 KV cache; with `quantize_nvfp4`,
// --quantize nvfp4: the unquantized linear weights count as NVFP4; the MTP
// layers and their KV cache only with `load_mtp`, --speculative mtp); the
// decode estimate at a DGX Spark's ~273 GB/s per node.
Result<LaunchMemoryPlan> PlanModelMemory(const ModelSummary& model, int nodes, int64_t node_memory,
                                         int64_t context = 8192, int64_t concurrency = 1,
                                         bool quantize_nvfp4 = false, bool load_mtp = false);

}  // namespace octet::app
