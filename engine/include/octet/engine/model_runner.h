// A ModelRunner is one model instance as a generation loop or the serving
// scheduler drives it: a KV cache of fixed slots and a Step that runs one
// batched forward pass over it. LocalRunner is a Model in this process; a
// tensor-parallel group (TpRuntime, octet/engine/tp_runtime.h) is a runner on
// its rank 0 whose every call is mirrored by the other ranks.
//
//   LocalRunner runner(*model);
//   OCTET_RETURN_IF_ERROR(runner.ResetCache(/*slots=*/8, /*capacity=*/4096, kernels::KvDtype::kF32));
//   OCTET_RETURN_IF_ERROR(runner.Step(batch, &out));   // see Model::Forward
//
// Thread-safety: one thread at a time (the scheduler's).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "octet/base/status.h"
#include "octet/engine/kv_cache.h"
#include "octet/engine/model.h"

namespace octet::engine {

// Where a runner's time went, cumulative since it was made (nanoseconds).
struct RunnerStats {
  uint64_t steps = 0;
  int64_t step_ns = 0;       // inside Step (all of it)
  int64_t allreduce_ns = 0;  // inside the all-reduces of the forward pass
  int64_t comm_ns = 0;       // inside every collective (all-reduce, logits gather, step plans)
  uint64_t allreduce_calls = 0;
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  virtual const ModelConfig& config() const = 0;
  // The kernels of this rank (the sampler of rank 0 uses them).
  virtual kernels::KernelBackend& backend() = 0;
  // Ranks in the group (1 for a local model).
  virtual int world_size() const { return 1; }

  // (Re)creates the KV cache with `num_slots` sequences of up to `capacity`
  // positions each, elements of `dtype`, on every rank. Old contents are dropped.
  virtual Status ResetCache(int num_slots, int64_t capacity, kernels::KvDtype dtype) = 0;
  virtual int cache_slots() const = 0;
  virtual int64_t cache_capacity() const = 0;
  // Bytes of KV cache this rank holds.
  virtual int64_t cache_bytes() const = 0;

  // One forward pass over `batch` (Model::Forward's contract); `out` gets the
  // full-vocabulary logits.
  virtual Status Step(const std::vector<SequenceChunk>& batch, ForwardOutput* out) = 0;

  // Copies the first `positions` cached positions of slot `src` into slot
  // `dst` on every rank (n > 1 sequences of a request share one prefill).
  // Unimplemented where a runner cannot (the caller then prefills `dst`).
  virtual Status CopySlot(int src, int dst, int64_t positions) {
    return UnimplementedError("this runner cannot copy KV cache slots");
  }

  // Called by an idle caller about once a second: a TP group sends its
  // followers a heartbeat so that their waits do not run into the peer deadline.
  virtual Status Idle() { return Status::Ok(); }

  virtual RunnerStats stats() const = 0;

  // The model, when this runner is one rank holding all of it; null for a
  // tensor-parallel group.
  virtual Model* local_model() { return nullptr; }

  // ---- the MTP draft head (models loaded with LoadOptions::load_mtp) ----
  // Its layers (0: none loaded, no MTP drafting).
  virtual int64_t mtp_layers() const { return 0; }
  // Model::MtpDraftBatch for chunks of the last Step (one request each, in
  // distinct slots), on the runner's own MTP cache (which ResetCache makes
  // beside the main cache, with kMtpChainPositions more positions), on every
  // rank of a group. `logits`, when given, gets the first draft step's logits
  // of every fed row, then each chained step's (rank 0's; Model::MtpDraftBatch).
  virtual Status MtpDraftBatch(const std::vector<MtpDraftRequest>& requests,
                               std::vector<std::vector<int32_t>>* drafts,
                               std::vector<float>* logits = nullptr) {
    return UnimplementedError("this runner has no multi-token-prediction head");
  }
  // The same for one chunk.
  Status MtpDraft(size_t chunk, int slot, int64_t start_pos, const std::vector<int32_t>& next,
                  int k, std::vector<int32_t>* drafts, std::vector<float>* logits = nullptr) {
    drafts->clear();
    std::vector<std::vector<int32_t>> made;
    OCTET_RETURN_IF_ERROR(
        MtpDraftBatch({MtpDraftRequest{chunk, slot, start_pos, next, k}}, &made, logits));
    if (made.size() != 1) {
      return InternalError("MtpDraftBatch gave " + std::to_string(made.size()) +
                           " draft lists for one request");
    }
    *drafts = std::move(made.front());
    return Status::Ok();
  }
};

// The MTP cache's room past the main cache's capacity: a chain of drafts runs
// up to this many positions beyond the main cache's last.
inline constexpr int64_t kMtpChainPositions = 8;

// A model in this process, on one rank (no sharding).
class LocalRunner final : public ModelRunner {
 public:
  explicit LocalRunner(Model& model) : model_(model) {}

  const ModelConfig& config() const override { return model_.config(); }
  kernels::KernelBackend& backend() override { return model_.backend(); }
  Status ResetCache(int num_slots, int64_t capacity, kernels::KvDtype dtype) override;
  int cache_slots() const override { return cache_.num_slots(); }
  int64_t cache_capacity() const override { return cache_.capacity(); }
  int64_t cache_bytes() const override { return cache_.bytes(); }
  Status Step(const std::vector<SequenceChunk>& batch, ForwardOutput* out) override;
  Status CopySlot(int src, int dst, int64_t positions) override;
  RunnerStats stats() const override { return stats_; }
  Model* local_model() override { return &model_; }
  int64_t mtp_layers() const override { return model_.mtp_layers(); }
  Status MtpDraftBatch(const std::vector<MtpDraftRequest>& requests,
                       std::vector<std::vector<int32_t>>* drafts,
                       std::vector<float>* logits = nullptr) override {
    return model_.MtpDraftBatch(requests, drafts, logits);
  }

 private:
  Model& model_;
  KvCache cache_;
  RunnerStats stats_;
};

}  // namespace octet::engine
