// The memory planner: will a model fit N nodes of M bytes each under tensor
// parallelism (one rank per node), and where does each node's memory go?
//
//   OCTET_ASSIGN_OR_RETURN(ModelFootprint m, LoadCatalogModel(catalog_dir, "glm-5.3-753b-nvfp4"));
//   PlanRequest r;  r.nodes = 4;                        // 128 GiB each, 8192 context, 1 sequence
//   OCTET_ASSIGN_OR_RETURN(MemoryPlan plan, PlanMemory(m, r));
//   plan.fits, plan.verdict, plan.per_node[0].weights_bytes, plan.degrees, plan.min_nodes
//
// A model is described by its weight tensors grouped by how TP splits them
// (the engine's layout, octet/engine/tensor_parallel.h; MoE experts are split
// like a dense MLP, each rank holding a slice of every expert) and their
// storage format, from either
//   - a model folder: config.json and the safetensors headers (exact bytes of
//     every tensor, NVFP4 block scales included), or
//   - a catalog entry (resources/models/*.json): architecture numbers and the
//     format of each part, from which the tensor bytes are computed (used for
//     models too big to download, and for the fictional future models).
//
// Per node (rank r of TP = nodes):
//   weights    its shard of every split tensor plus every replicated one
//   KV cache   context x concurrency positions x layers x 2 (K, V) x its kv heads
//              x head_dim x kv_dtype bytes (kv heads replicated when fewer than ranks)
//   workspace  activations of one step of max_batch_tokens tokens (f32 by default),
//              plus full-vocabulary logits for every sequence on rank 0
//   reserve    what the model never gets: memory the OS does not see, the OS and
//              its services, the runtime (CUDA context, communication buffers)
//   headroom   a share of the node kept free (allocator fragmentation, page
//              tables; running at 100% of memory invites the OOM killer)
// It fits when weights + KV + workspace + reserve + headroom <= node memory on
// every node and TP = nodes is a valid degree.
//
// Mixture-of-experts models: memory holds every expert (routed and shared);
// one decode step reads only the active weights (WeightUse below): attention,
// norms, dense MLPs, the router (and its score-correction bias), the shared
// expert, experts_per_token of the num_experts routed experts of each MoE
// layer (their average size times top-k), the final norm and lm_head. The
// embedding table is not counted per token (one row is looked up), unless it
// is tied to lm_head. Multi-token-prediction layers (model.layers.{L}.* of a
// GLM-4.5 / DeepSeek-V3 checkpoint) are stored in the checkpoint but the
// engine loads them only for MTP speculative decoding: their weights and KV
// cache count toward a node's memory only when PlanRequest::load_mtp says so,
// and never toward the plain decode step's bytes.
//
// Per-token bytes follow Model::WeightBytesPerToken(): a matrix's stored bytes
// (NVFP4: packed codes + e4m3 block scales; its two f32 scalars live in the
// weight descriptor and are not counted), a vector (norm, bias) as the f32
// the engine holds it in. One difference: the planner also counts the F32
// score-correction bias of a GLM router (4 x num_experts bytes per MoE layer).
// The decode estimate is the memory roofline of one sequence at the end of its
// context: node_bandwidth / (the busiest rank's active weight bytes + its KV
// cache of that sequence); communication and compute are not counted, so it
// is an upper bound.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "octet/base/status.h"
#include "octet/engine/tensor_parallel.h"

namespace octet::engine {

enum class ShardKind {
  kColumn,      // split by output rows across ranks (q, gate, up, experts' gate/up)
  kRow,         // split by input columns (o, down, experts' down)
  kKvColumn,    // k/v: split by kv heads, replicated when fewer kv heads than ranks
  kVocab,       // embedding, lm_head: vocabulary rows split
  kReplicated,  // norms, routers, scalar scales: whole on every rank
};

// When a decode step reads a group (see the header comment).
enum class WeightUse {
  kEveryToken,    // attention, dense MLPs, shared experts, routers, norms, lm_head
  kRoutedExpert,  // routed experts: experts_per_token of num_experts per token
  kLookup,        // an embedding table not tied to lm_head: one row per token
  kMtp,           // an MTP layer: in memory only when loaded, not read by plain decode
};

// What a tensor is, for the bytes a decode step reads of it.
enum class WeightKind {
  kMatrix,  // a linear layer's weight (NVFP4: with its block scales)
  kVector,  // a norm weight or bias: the engine holds it as f32
  kScalar,  // an NVFP4 weight_scale_2 / input_scale: kept in the weight descriptor
};

// `count` identical tensors of [rows, cols] in one storage format.
struct WeightGroup {
  std::string name;     // "experts", "attention q_proj", "embed_tokens", ...
  ShardKind shard = ShardKind::kReplicated;
  std::string format;   // "bf16", "f16", "f32", "nvfp4", "fp8"
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t count = 1;
  // For folders: the exact stored bytes of all `count` tensors (0: compute
  // from rows x cols x format).
  int64_t stored_bytes = 0;
  WeightUse use = WeightUse::kEveryToken;
  WeightKind kind = WeightKind::kMatrix;
};

struct ModelFootprint {
  std::string id;            // catalog name or folder
  std::string display_name;  // "GLM 5.3 753B (NVFP4)"
  std::string source;        // the catalog file or model folder it came from
  std::string note;          // where the numbers come from (catalog "note")
  bool fictional = false;    // numbers derived, not read from a released checkpoint
  // The Hugging Face repo of the released checkpoint ("Qwen/Qwen3-8B"; catalog
  // "hub_repo"); empty for fictional entries, which have none.
  std::string hub_repo;
  std::string architecture;
  std::string weight_format;  // summary: "NVFP4 experts + BF16", "BF16"
  TpModelShape shape;         // the dims TP validity depends on
  int64_t num_layers = 0;     // decoder layers of the main model (each holds a KV cache)
  int64_t num_mtp_layers = 0;  // MTP layers stored after them (own KV cache when loaded)
  int64_t params = 0;          // parameters of the main model
  int64_t extra_params = 0;    // parameters outside the published count (MTP heads)
  int64_t active_params = 0;   // per token (MoE); == params for dense models
  int64_t num_experts = 0;     // routed experts per MoE layer; 0: dense
  int64_t experts_per_token = 0;
  int64_t moe_intermediate_size = 0;
  int64_t shared_intermediate_size = 0;  // the shared expert's width (0: none)
  int64_t num_moe_layers = 0;            // of the main model's num_layers
  std::vector<WeightGroup> groups;

  int64_t TotalWeightBytes() const;  // the whole checkpoint (MTP layers included)
  int64_t MtpWeightBytes() const;    // of which the MTP layers
  // Weight bytes one decode step of one token reads on one rank (TP 1: the
  // whole model), as the header comment defines them.
  int64_t ActiveBytesPerToken() const { return ActiveBytesPerToken(1, 0); }
  int64_t ActiveBytesPerToken(int tp, int rank) const;
};

// Bytes of one [rows, cols] tensor in `format` (NVFP4: packed codes + one e4m3
// scale per 16 + the two f32 scalars). InvalidArgument for an unknown format.
Result<int64_t> TensorBytes(const std::string& format, int64_t rows, int64_t cols);

// From a model folder (config.json + safetensors headers).
Result<ModelFootprint> LoadFolderModel(const std::string& dir);
// From one catalog file, or the entry called `name` in a catalog folder.
Result<ModelFootprint> LoadCatalogFile(const std::string& path);
Result<ModelFootprint> LoadCatalogModel(const std::string& catalog_dir, const std::string& name);
// From a Hugging Face config.json (and the repo's hf_quant_config.json, ""
// when it has none) before any weight is downloaded: the architecture as the
// engine parses it, storage formats from torch_dtype and the quantization
// config (ModelOpt NVFP4 / FP8: every linear layer quantized except the
// modules its exclude_modules / ignore globs name; routers, embeddings and
// norms unquantized), tensor bytes computed like a catalog entry's. With
// `checkpoint_bytes` > 0 (the sum of the repo's safetensors file sizes) every
// group is scaled so the weights total those bytes: the files are what nodes
// will hold (headers included, an upper bound by a few KB), the config only
// how they split. `id` names the model (the repo id) in errors and plans.
Result<ModelFootprint> LoadHubConfigModel(const std::string& config_json,
                                          const std::string& quant_config_json,
                                          int64_t checkpoint_bytes, const std::string& id);
// The entries of a catalog folder (sorted by name).
Result<std::vector<ModelFootprint>> LoadCatalog(const std::string& catalog_dir);

struct PlanRequest {
  int nodes = 1;                              // one TP rank per node
  int64_t node_memory = int64_t{128} << 30;   // bytes per node
  int64_t context = 8192;                     // positions per sequence
  int64_t concurrency = 1;                    // sequences in flight
  std::string kv_dtype = "bf16";              // "bf16", "f16", "fp8", "f32"
  int64_t max_batch_tokens = 2048;            // tokens per forward step (prefill chunk)
  std::string activation_dtype = "bf16";      // "bf16" (GPU) or "f32" (this CPU engine)
  int64_t reserve = -1;                       // per node; -1: DefaultReserve(node_memory)
  double headroom = 0.05;                     // share of node memory kept free
  int max_tp = 8;                             // degrees listed in MemoryPlan::degrees
  // The run loads the model's MTP layers (speculative decoding with MTP
  // drafts): their weights and KV cache count. Off, as `octet serve` runs by
  // default.
  bool load_mtp = false;
  // The run quantizes the checkpoint's unquantized linear weights to NVFP4 as
  // it loads (--quantize nvfp4, LoadOptions::quantize): the plan counts the
  // model as QuantizedAtLoad() describes it.
  bool quantize_nvfp4 = false;
  double node_bandwidth = 273e9;  // bytes/s a node's memory reads (DGX Spark: ~273 GB/s)
};

// The default reserve for a node: 16 GiB for a 128 GiB DGX Spark, scaled with
// the node's memory (1/8 of it) and at least 2 GiB. See memory_plan.cpp for
// where the number comes from.
int64_t DefaultReserve(int64_t node_memory);

struct NodePlan {
  int node = 0;  // rank
  int64_t weights_bytes = 0;
  int64_t kv_cache_bytes = 0;
  int64_t workspace_bytes = 0;
  int64_t reserve_bytes = 0;
  int64_t headroom_bytes = 0;
  int64_t total_bytes = 0;
  int64_t free_bytes = 0;  // node memory - total (negative: short)
  bool fits = false;
  int64_t active_weight_bytes_per_token = 0;  // weights this rank reads per decode step
};

struct TpDegreeVerdict {
  int tp = 0;
  bool valid = false;
  std::string reason;  // why not (CheckTpDegree's message)
};

struct MemoryPlan {
  ModelFootprint model;
  PlanRequest request;
  int tp = 1;
  bool tp_valid = false;
  bool fits = false;
  std::string verdict;  // one sentence a person can act on
  std::vector<NodePlan> per_node;
  std::vector<TpDegreeVerdict> degrees;  // 1..request.max_tp
  int min_nodes = 0;                     // fewest nodes (valid degree) that fit, 0: none <= max_tp
  int64_t kv_bytes_per_token = 0;        // whole model, all ranks together
  int64_t weight_bytes = 0;              // what the nodes hold together (MTP per load_mtp)
  int64_t active_weight_bytes_per_token = 0;  // whole model (TP 1), see the header comment
  // Memory roofline of one sequence's decode at TP = nodes (tokens/s; 0 when
  // the degree is invalid): an upper bound, see the header comment.
  double decode_tokens_per_s = 0;
};

// The footprint a model has after on-load NVFP4 quantization, as Model::Load
// does it: every dense (bf16/f16/f32) matrix with a multiple of 16 inputs
// becomes NVFP4 (packed codes + e4m3 scales; its global scale lives in the
// weight descriptor), except embedding tables and MoE routers, which stay;
// a tied embedding gains an NVFP4 copy that lm_head reads every token (the
// table itself becomes a lookup).
ModelFootprint QuantizedAtLoad(const ModelFootprint& model);

Result<MemoryPlan> PlanMemory(const ModelFootprint& model, const PlanRequest& request);

}  // namespace octet::engine
