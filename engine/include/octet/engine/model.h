// A decoder-only transformer (Llama-3, Qwen2, Qwen3, Qwen3-MoE, GLM-4.5 MoE,
// MiniCPM, nanochat) loaded from a Hugging Face folder, and its forward pass
// over a batch of sequences.
//
//   LoadOptions opt;  opt.threads = 2;  opt.progress = [](const LoadProgress& p) {...};
//   OCTET_ASSIGN_OR_RETURN(auto model, Model::Load("/models/qwen3-0.6b", opt));
//   OCTET_ASSIGN_OR_RETURN(KvCache cache, model->NewKvCache(/*slots=*/4, /*capacity=*/4096));
//   std::vector<SequenceChunk> batch = {
//       {.slot = 0, .start_pos = 0,  .tokens = prompt},      // prefill a new request
//       {.slot = 1, .start_pos = 37, .tokens = {last_id}}};  // decode another one
//   ForwardOutput out;
//   OCTET_RETURN_IF_ERROR(model->Forward(batch, cache, &out));
//   // out.logits: one row per sequence (its last token), or every token's row
//   // for a chunk with all_logits = true; out.row_begin[i] says where chunk i's
//   // rows start.
//
// Weights stay memory-mapped in their stored format (an NVFP4 model is not
// expanded to floats); a device backend copies them into its own memory
// (KernelBackend::PrepareWeight). The forward pass issues backend ops on the
// backend's memory only, and the engine never reads a device pointer. All tokens of a batch go
// through each matmul together, so one step reads every weight once however many sequences it
// carries.
//
// Tensor parallelism plugs in through LoadOptions::shard (which rows/columns
// of each weight this rank keeps; octet/engine/tensor_parallel.h makes the
// Megatron layout) and ForwardHooks: all_reduce is called at the two points
// per layer where a row-parallel layer's partial sums must be added across
// ranks (and once after a vocab-parallel embedding), gather_logits assembles
// the full vocabulary from each rank's vocab-parallel lm_head rows. Head counts
// used by the forward pass come from the loaded (possibly sliced) weights.
//
// Thread-safety: a Model is used by one thread at a time (Forward mutates
// scratch buffers and uses the backend's thread pool).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "octet/base/status.h"
#include "octet/engine/kv_cache.h"
#include "octet/engine/model_config.h"
#include "octet/engine/nvfp4.h"
#include "octet/engine/safetensors.h"
#include "octet/kernels/backend.h"
#include "octet/kernels/weight.h"

namespace octet {
class HugePageArena;
}

namespace octet::engine {

struct LoadProgress {
  int64_t bytes_done = 0;
  int64_t bytes_total = 0;
  int64_t tensors_done = 0;
  int64_t tensors_total = 0;
  std::string tensor;  // the tensor just loaded
};

// How a linear layer is split under tensor parallelism (Megatron layout).
enum class LinearRole {
  kColumnParallel,  // q/k/v, gate/up: output rows split across ranks
  kRowParallel,     // o_proj, down_proj: input columns split; outputs all-reduced
  kReplicated,      // kept whole on every rank
  kVocabParallel,   // embed_tokens, lm_head: vocabulary rows split across ranks
};

// The part of a [rows, cols] weight a rank keeps. Default: all of it.
struct WeightSlice {
  int64_t row_begin = 0;
  int64_t row_count = -1;  // -1: to the end
  int64_t col_begin = 0;
  int64_t col_count = -1;
};

// On-load quantization of the weights a checkpoint stores unquantized.
enum class LoadQuantize {
  kOff,    // every weight as stored
  kNvfp4,  // BF16/F16/F32 linear weights to NVFP4 (LoadOptions::quantize)
};
// "off" or "nvfp4" (the --quantize flag); InvalidArgument otherwise.
Result<LoadQuantize> ParseLoadQuantize(const std::string& name);
std::string_view LoadQuantizeName(LoadQuantize q);

struct LoadOptions {
  // Kernel backend: "auto", "avx512-amx", "avx512-rows", "avx512", "avx2", "neon", "scalar".
  std::string backend = "auto";
  int threads = 0;               // <= 0: all cores
  // Makes the backend instead of `backend` and `threads` where set: one the
  // caller builds (a wrapper around another, as the tests' recording
  // backend).
  std::function<Result<std::unique_ptr<kernels::KernelBackend>>()> make_backend;
  // Called after each tensor is validated and paged in (from the loading thread).
  std::function<void(const LoadProgress&)> progress;
  // Asked before each tensor; true ends the load with a Cancelled error (a
  // program told to stop while it loads a large checkpoint).
  std::function<bool()> cancelled;
  // Touch every weight page while loading (so the first token does not pay for
  // page faults, and progress means something). Off: pages load on first use.
  bool prefault = true;
  // Give NVFP4 weights their tile copy (kernels/weight.h) when the backend
  // reads one (KernelBackend::UsesNvfp4Tiles: the integer decode of AVX2,
  // AVX512-VNNI and NEON dotprod),
  // at the cost of the NVFP4 bytes once more in memory. Off: row-major only.
  bool nvfp4_tiles = true;
  // The most bytes the tile copy may take; layers past it keep the row-major
  // kernels (one log line says so). < 0: what the machine can spare when
  // loading starts, MemAvailable less this checkpoint's bytes (kept in the
  // page cache for prefill) and a reserve of max(1 GiB, MemTotal / 10); no
  // limit where /proc/meminfo cannot be read. Ranks that load at the same
  // time on one machine each measure that on their own (set it explicitly
  // there when memory is tight).
  int64_t nvfp4_tiles_max_bytes = -1;
  // Load the checkpoint's multi-token-prediction layer(s) (GLM-4.5's
  // num_nextn_predict_layers) for speculative decoding (Model::MtpDraft). A
  // model without one is then an error. Off: they are skipped (one log line).
  bool load_mtp = false;
  // Before anything is paged in, the bytes this rank will hold resident (its
  // share of the checkpoint's tensors: total / tp_ranks) are checked against
  // what the backend's memory can take (KernelBackend::AvailableMemory: the
  // host's MemAvailable; a GPU's free memory, or on unified memory (GB10) the
  // larger of that and MemAvailable): a model that fits on paper but not in
  // this machine's free memory is refused (ResourceExhausted, naming both
  // figures and which one it used) instead of thrashing. false: load anyway
  // (the CLI's --ignore-memory-check). No check where the figure cannot be read.
  bool check_memory = true;
  int tp_ranks = 1;                             // ranks the weights are split over
  std::string meminfo_path = "/proc/meminfo";  // tests point it at a file
  // kNvfp4: every linear weight the checkpoint stores as BF16, F16 or F32
  // (attention, MLPs, experts, the MTP projection, an untied lm_head) is
  // quantized to NVFP4 as it loads, by the rules of nvfp4.h (per-16 e4m3
  // scales; one global scale per tensor, shared by q/k/v and by gate/up as
  // ModelOpt fuses them, taken over the whole tensor so that every TP rank
  // quantizes its own slice to the same codes a single rank would). Weights
  // already NVFP4 stay as they are. Not quantized: the embedding table (its
  // rows are gathered exactly), MoE routers (routing decisions are sensitive
  // to them), matrices whose input size is not a multiple of 16. A tied
  // lm_head gets its own NVFP4 copy of the (local) embedding rows, so the
  // gather stays exact and decode reads 4.5 bits per lm_head weight. One log
  // line gives the bytes saved; Model::QuantizedBytesSaved() has them.
  LoadQuantize quantize = LoadQuantize::kOff;
  // Tensor-parallel sharding: given a linear weight's module name
  // ("model.layers.3.self_attn.q_proj", "model.embed_tokens", "lm_head"), its
  // role and full shape, the slice to keep. Null: keep everything. NVFP4
  // column slices must be 16-aligned. A vocab-parallel slice may only take
  // rows, and embed_tokens and lm_head must get the same rows.
  std::function<WeightSlice(const std::string& module, LinearRole role, int64_t rows, int64_t cols)>
      shard;
};

// A float parameter vector (a norm weight, a bias, RoPE's frequencies): its
// values as loaded, and the same values where the backend's ops read them
// (`host.data()` on a host backend, a buffer of the model's on a device).
struct ParamVector {
  std::vector<float> host;
  const float* device = nullptr;
  bool empty() const { return host.empty(); }
  int64_t size() const { return static_cast<int64_t>(host.size()); }
};

// A linear layer: weight view (+ optional float bias over its output rows).
// The weight is in the backend's memory (KernelBackend::PrepareWeight).
struct Linear {
  std::string name;  // module name, for messages
  LinearRole role = LinearRole::kReplicated;
  kernels::WeightMatrix weight;
  ParamVector bias;  // empty: none
};

// A SiLU-gated MLP, down(silu(gate(x)) * up(x)): one expert of a
// mixture-of-experts block, or its shared expert.
struct GatedMlp {
  Linear gate, up, down;
  bool empty() const { return gate.weight.rows == 0; }
};

// A mixture-of-experts MLP (Qwen3-MoE, GLM-4.5). Under tensor parallelism
// every expert (and the shared one) is split along its intermediate dimension
// like a dense MLP, and the router is whole on every rank, so all ranks route
// every token the same way.
struct MoeWeights {
  Linear router;                  // mlp.gate [experts, hidden], replicated
  std::vector<float> score_bias;  // e_score_correction_bias [experts] (GLM), else empty
  std::vector<GatedMlp> experts;  // mlp.experts.{e}
  GatedMlp shared;                // mlp.shared_experts (GLM), else empty
  // Where the backend routes on its own (KernelBackend::PrepareExperts):
  // its table of the experts and the bias in its memory (owned by the
  // Model); null otherwise.
  const void* device_experts = nullptr;
  const float* device_score_bias = nullptr;
};

// Parameter-free norms (nanochat) hold ones. A ReLU² MLP (nanochat) uses
// gate (c_fc) and down (c_proj) and leaves `up` empty. A mixture-of-experts
// layer leaves gate/up/down empty and has `moe`.
struct LayerWeights {
  ParamVector input_norm;      // [hidden]
  ParamVector post_norm;       // [hidden]
  ParamVector q_norm, k_norm;  // [head_dim] (Qwen3, nanochat), else empty
  Linear q, k, v, o, gate, up, down;
  MoeWeights moe;
  bool is_moe() const { return !moe.experts.empty(); }
};

// A multi-token-prediction layer (GLM-4.5 / DeepSeek-V3 "nextn"): from the
// main model's final hidden state h_j and the embedding of the token at j+1,
// u = eh_proj · [rmsnorm(e, enorm) ; rmsnorm(h, hnorm)], one decoder layer over
// its own KV cache, then rmsnorm(·, head_norm) · lm_headᵀ drafts the token at j+2.
struct MtpLayer {
  ParamVector enorm, hnorm, head_norm;  // [hidden]
  Linear eh_proj;                       // [hidden, 2 * hidden], whole on every rank
  kernels::WeightMatrix eh_embed;       // its columns 0..H-1 (the embedding half)
  kernels::WeightMatrix eh_hidden;      // columns H..2H-1 (the hidden-state half)
  LayerWeights layer;
};

// One sequence's part of a batch: `tokens` at positions start_pos, start_pos+1,
// ... in KV cache slot `slot`. The cache must already hold positions
// 0..start_pos-1 of that slot (from earlier steps); this step writes the rest.
struct SequenceChunk {
  int slot = 0;
  int64_t start_pos = 0;
  std::vector<int32_t> tokens;
  bool all_logits = false;  // logits for every token, not just the last
  // The chunk verifies speculative drafts (the sequence's next token, then
  // the drafts): a forward with such a chunk, of up to kMaxVerifyStepRows
  // rows in all, computes every row as a forward of that one token would, bit
  // for bit (KernelBackend::set_batch_invariant), so each verified position
  // gets plain decoding's logits and cache entries. A larger step (a prefill
  // chunk beside it) runs the batch kernels.
  bool verify = false;
};

// One sequence's part of a batched MTP draft (Model::MtpDraftBatch): chunk
// `chunk` of the last Forward, in slot `slot` from position `start_pos`; the
// tokens that followed its kept rows (`next`); up to `k` (>= 1) drafts.
struct MtpDraftRequest {
  size_t chunk = 0;
  int slot = 0;
  int64_t start_pos = 0;
  std::vector<int32_t> next;
  int k = 1;
};

// The most rows a forward runs batch-invariant for its verify chunks: 8
// sequences of a token and 7 drafts each; beyond it the step is prefill-sized.
inline constexpr int64_t kMaxVerifyStepRows = 64;

struct ForwardOutput {
  std::vector<float> logits;       // [rows, vocab]
  std::vector<int64_t> row_begin;  // per chunk: its first row in `logits`
  int64_t vocab = 0;
  const float* Row(int64_t r) const { return logits.data() + r * vocab; }
  // The last row of chunk i (its next-token prediction).
  const float* Last(size_t chunk) const;
};

// Hooks into the forward pass (tensor parallelism, tracing). Their pointers
// are in the backend's memory (host memory for the CPU backends; a device
// backend's hooks run on device buffers, e.g. NCCL), except `full`, which is
// host memory.
struct ForwardHooks {
  // Sums `n` floats elementwise across the ranks of a tensor-parallel group, in
  // place. Called after o_proj and after down_proj in every layer, and after
  // the embedding lookup of a vocab-parallel model. Null: single rank.
  std::function<Status(float* data, int64_t n)> all_reduce;
  // Vocab-parallel lm_head: `local` holds [rows, local_vocab] logits of this
  // rank's vocabulary range (Model::vocab_begin()..); fill `full` [rows,
  // vocab_size] with every rank's. Required when the vocabulary is sharded.
  std::function<Status(const float* local, int64_t rows, int64_t local_vocab, float* full)>
      gather_logits;
};

class Model {
 public:
  static Result<std::unique_ptr<Model>> Load(const std::string& dir, const LoadOptions& options);
  ~Model();

  const ModelConfig& config() const { return config_; }
  kernels::KernelBackend& backend() { return *backend_; }
  const std::string& dir() const { return dir_; }

  // Heads held by this rank (all of them unless sharded).
  int64_t local_heads() const { return local_heads_; }
  int64_t local_kv_heads() const { return local_kv_heads_; }
  // Vocabulary rows of embed_tokens / lm_head held by this rank (all unless sharded).
  int64_t vocab_begin() const { return vocab_begin_; }
  int64_t local_vocab() const { return local_vocab_; }

  // Bytes of weights one decode step of one token reads: every linear,
  // lm_head and the norms; of a mixture-of-experts layer, the router (and its
  // score-correction bias), the shared expert and experts_per_token routed
  // experts (the average expert size times top-k).
  int64_t WeightBytesPerToken() const;
  // Bytes of weights held in memory (mapped), for planning.
  int64_t WeightBytes() const { return store_->total_bytes(); }
  std::string WeightFormatSummary() const;  // "BF16", "NVFP4+BF16", ...
  // LoadOptions::quantize: stored bytes of the weights quantized at load less
  // their NVFP4 bytes (a tied lm_head's copy counted against it), this rank's.
  int64_t QuantizedBytesSaved() const { return quantized_bytes_saved_; }

  // A KV cache in the backend's memory. ResourceExhausted when there is none
  // to be had.
  Result<KvCache> NewKvCache(int slots, int64_t capacity,
                             kernels::KvDtype dtype = kernels::KvDtype::kF32) const;

  // Runs one step over `batch` (see SequenceChunk). Errors (nothing computed,
  // cache unchanged): an empty chunk, a token id outside [0, vocab), a slot out
  // of range, a start_pos beyond the slot's cached length, or a sequence that
  // would run past the cache capacity.
  Status Forward(const std::vector<SequenceChunk>& batch, KvCache& cache, ForwardOutput* out,
                 const ForwardHooks& hooks = {});

  const LayerWeights& layer(int64_t i) const { return layers_[i]; }
  const Linear& lm_head() const { return lm_head_; }

  // On: mixture-of-experts steps of up to kGroupedExpertsMaxTokens tokens
  // (decode, batched decode, MTP chains) run every chosen expert through
  // the backend's grouped ops (MatmulGrouped, MatmulScatterAdd) where it
  // has them. Off: one matmul call per expert and projection, as larger
  // steps always do. Both give the same sums. Unset, the backend decides
  // (KernelBackend::grouped_experts_max_tokens: the CUDA backend groups,
  // the CPU ones measured no gain and do not).
  //
  // Where the backend also routes (KernelBackend::PrepareExperts accepted:
  // the CUDA backend with OCTET_CUDA_MOE_ROUTING=device), unset steps of up
  // to grouped_experts_max_tokens tokens route and run their experts there
  // (MoeDecode) instead, with no host round trip; set either way, the host
  // routes.
  static constexpr int64_t kGroupedExpertsMaxTokens = 8;
  void set_grouped_experts(std::optional<bool> on) { grouped_experts_ = on; }
  // Whether the MoE layers have a backend table (the paragraph above).
  bool routes_experts_on_device() const;

  // ---- multi-token prediction (LoadOptions::load_mtp) ----
  int64_t mtp_layers() const { return static_cast<int64_t>(mtp_.size()); }
  // The MTP layers' own KV cache (one cache layer per MTP layer).
  Result<KvCache> NewMtpCache(int slots, int64_t capacity,
                              kernels::KvDtype dtype = kernels::KvDtype::kF32) const;
  // Drafts up to `k` tokens for chunk `chunk` of the last Forward (slot `slot`,
  // positions start_pos..): MTP position start_pos+i is fed that chunk's final
  // hidden state at row i and `next[i]`, the token that followed it (the
  // chunk's own next token; for its last kept row, the token just chosen).
  // `next` may be shorter than the chunk (the rows of rejected drafts are not
  // fed). Draft 1 is the argmax of the MTP logits at the last fed position;
  // drafts 2..k feed the layer's own output back (with MTP layer (j mod
  // layers) for draft j+1), as vLLM chains one MTP layer. `mtp_cache` (from
  // NewMtpCache) holds the MTP positions; chained positions are overwritten
  // by the next call. `logits`, when given, gets the MTP logits of every fed
  // row [next.size(), vocab] (the first draft step), then those of each
  // chained step's row (k - 1 more rows; tests compare both with references).
  // On a tensor-parallel shard every rank calls it with the same
  // arguments and the hooks of its Forward (the MTP layer's all-reduces, the
  // vocab-parallel embedding and logits); every rank gets the same drafts.
  Status MtpDraft(size_t chunk, int slot, int64_t start_pos, const std::vector<int32_t>& next,
                  KvCache& mtp_cache, int k, std::vector<int32_t>* drafts,
                  std::vector<float>* logits = nullptr, const ForwardHooks& hooks = {});
  // MtpDraft for several sequences of the last Forward at once (distinct
  // slots): each forward of the MTP layer and the lm_head runs over every
  // request's rows together (the first over all their fed rows, each chained
  // one over one row of every request still drafting), not once per
  // sequence. (*drafts)[r] gets request r's drafts; `logits`, when given, the
  // first step's logits of every fed row, request after request, then each
  // chained step's (one row per request still drafting, in request order).
  // Invalid requests fail the call before anything runs.
  Status MtpDraftBatch(const std::vector<MtpDraftRequest>& requests, KvCache& mtp_cache,
                       std::vector<std::vector<int32_t>>* drafts,
                       std::vector<float>* logits = nullptr, const ForwardHooks& hooks = {});
  // The same on the model's own MTP cache (ResetMtpCache), which a runner
  // keeps in step with its main cache (LocalRunner::ResetCache,
  // TpRuntime::ResetCache).
  Status MtpDraft(size_t chunk, int slot, int64_t start_pos, const std::vector<int32_t>& next,
                  int k, std::vector<int32_t>* drafts, std::vector<float>* logits = nullptr,
                  const ForwardHooks& hooks = {}) {
    return MtpDraft(chunk, slot, start_pos, next, mtp_cache_, k, drafts, logits, hooks);
  }
  Status MtpDraftBatch(const std::vector<MtpDraftRequest>& requests,
                       std::vector<std::vector<int32_t>>* drafts,
                       std::vector<float>* logits = nullptr, const ForwardHooks& hooks = {}) {
    return MtpDraftBatch(requests, mtp_cache_, drafts, logits, hooks);
  }
  // (Re)makes that cache: `slots` sequences of `capacity` positions (the main
  // cache's, plus room for a chain of drafts). No-op without MTP layers.
  Status ResetMtpCache(int slots, int64_t capacity, kernels::KvDtype dtype);
  // Copies the first `positions` positions of slot `src` of that cache to
  // slot `dst` (a runner's CopySlot: sequences forked from one prefill keep
  // the head's cache of the prompt too). No-op without MTP layers.
  Status CopyMtpSlot(int src, int dst, int64_t positions);

 private:
  Model();
  Status LoadWeights(const LoadOptions& options);
  // Brings every weight and parameter vector into the backend's memory and
  // checks that the backend runs every op the forward pass needs.
  Status PlaceOnBackend();
  class DecodeProfile;
  // One decoder layer over the step's T rows in the scratch residual stream
  // (Scratch::x), its keys and values stored in layer `cache_layer` of `cache`.
  Status RunLayer(const LayerWeights& L, KvCache& cache, int64_t cache_layer,
                  const std::vector<SequenceChunk>& batch, const std::vector<int64_t>& first,
                  int64_t T, const ForwardHooks& hooks, DecodeProfile& prof);
  // Whether Forward may record a step of T rows (KernelBackend::
  // BeginRecording): a decode-sized step on a device backend whose ops need
  // no result on the host before its logits: not under tensor parallelism
  // (the all-reduce hooks work on host memory), not while profiling (which
  // synchronizes), not with experts routed on the host.
  bool StepRecordable(int64_t T, bool vocab_parallel, const ForwardHooks& hooks,
                      const DecodeProfile& prof) const;
  // Runs a recordable step's `ops` (from the embedding to the logits): as the
  // backend's recording of the same step where it has one, else recorded
  // (and kept for the steps after), else op by op.
  Status RecordedStep(const std::vector<SequenceChunk>& batch, const KvCache& cache,
                      const std::function<Status()>& ops);
  // The mixture-of-experts MLP of layer `L` over the T normed rows `xn`,
  // its (partial, under TP) output written to `out` [T, hidden].
  Status MoeMlp(const LayerWeights& L, const float* xn, int64_t T, float* out);
  // PlaceOnBackend's step for one MoE layer (KernelBackend::PrepareExperts).
  Status PrepareDeviceExperts(MoeWeights& moe);

  std::string dir_;
  ModelConfig config_;
  std::unique_ptr<CheckpointStore> store_;
  std::unique_ptr<kernels::KernelBackend> backend_;
  int64_t local_heads_ = 0;
  int64_t local_kv_heads_ = 0;
  int64_t vocab_begin_ = 0;
  int64_t local_vocab_ = 0;
  ParamVector inv_freq_;
  kernels::WeightMatrix embed_;
  Linear lm_head_;
  ParamVector final_norm_;
  ParamVector embedding_norm_;  // [hidden] when config_.embedding_norm (nanochat: ones)
  // Backend memory holding the weights and parameters (empty on a host backend).
  std::vector<kernels::Buffer> placed_;
  std::vector<LayerWeights> layers_;
  std::vector<MtpLayer> mtp_;
  KvCache mtp_cache_;
  // The first row of each chunk of the last Forward (MtpDraft reads their
  // final hidden states, kept in the scratch when MTP layers are loaded).
  std::vector<int64_t> last_first_;
  std::vector<int64_t> last_rows_;
  // Copies of tensors whose bytes are not aligned to their element size in the file.
  std::vector<std::vector<uint8_t>> realigned_;
  // Weights quantized at load (LoadOptions::quantize); the views point here.
  std::vector<std::unique_ptr<Nvfp4Tensor>> quantized_;
  int64_t quantized_bytes_saved_ = 0;
  // NVFP4 tile copies (LoadOptions::nvfp4_tiles), in huge-page-advised memory.
  std::unique_ptr<HugePageArena> tile_arena_;

  std::optional<bool> grouped_experts_;  // unset: the backend's choice

  // The widest MLP intermediate of any layer, dense, expert or shared (the
  // scratch's gate/up width).
  int64_t max_mlp_width_ = 0;

  // Scratch, grown to the largest batch seen.
  struct Scratch;
  std::unique_ptr<Scratch> scratch_;
};

}  // namespace octet::engine
