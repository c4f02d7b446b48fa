// The tensor-parallel runtime: one model split across `world_size` rank
// processes (octet/engine/tensor_parallel.h layout), joined through a
// collectives Communicator.
//
// Rank 0 is the leader: it is a ModelRunner (the scheduler or the generation
// loop drives it) and broadcasts every call as a small step plan (the batch:
// slots, positions and token ids). The other ranks are followers: Follow()
// receives each plan and runs the same forward pass on their shard, until the
// leader calls Shutdown() or a peer fails.
//
//   TpRuntimeOptions o;  o.rendezvous = "10.0.0.1:29500";  o.world_size = 4;  o.rank = r;
//   OCTET_ASSIGN_OR_RETURN(auto tp, TpRuntime::Create("/models/qwen3-8b", o));
//   if (r == 0) { ... Generate(*tp, prompt, options) ...; tp->Shutdown(); }
//   else        { OCTET_RETURN_IF_ERROR(tp->Follow([] { return stop_requested; })); }
//
// Start-up: every rank loads its shard (only its slices of the memory-mapped
// files are read), then joins the communicator (waiting up to
// comm.connect_timeout_ms for slow loaders), then the ranks exchange their
// load status: a rank that could not load makes every rank fail with its
// reason ("rank 2: tensor '...' is missing").
//
// Failure is fail-stop, as in the Communicator: a peer that dies or stays
// silent past comm.peer_timeout_ms fails the current call on every surviving
// rank with an error naming it, and every later call fails the same way. An
// idle leader must call Idle() about once a second (a heartbeat) so that
// waiting followers do not mistake silence for death.
//
// A device backend (--backend cuda): the forward pass hands the hooks device
// buffers, and every communicator takes host memory (NCCL stages host buffers
// itself), so the hooks copy the partial sums (and the vocab-parallel logits)
// to host memory, run the collective there and copy the sums back; rank 0
// logs this once.
//
// Thread-safety: one thread at a time per rank (the communicator runs one
// collective at a time). stats() and figures may be read from any thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "octet/base/status.h"
#include "octet/base/thread_annotations.h"
#include "octet/collectives/communicator.h"
#include "octet/engine/model.h"
#include "octet/engine/model_runner.h"

namespace octet::engine {

struct TpRuntimeOptions {
  std::string rendezvous;  // HOST:PORT of rank 0 (ignored when world_size == 1)
  int world_size = 1;
  int rank = 0;
  collectives::CommunicatorOptions comm;
  LoadOptions load;  // backend, threads, progress; `shard` is set by the runtime
};

class TpRuntime final : public ModelRunner {
 public:
  // Collective (every rank calls it): loads this rank's shard and joins.
  static Result<std::unique_ptr<TpRuntime>> Create(const std::string& model_dir,
                                                   const TpRuntimeOptions& options);
  ~TpRuntime() override;

  int rank() const { return rank_; }
  int world_size() const override { return world_; }
  Model& model() { return *model_; }
  // Null when world_size == 1.
  collectives::Communicator* communicator() { return comm_.get(); }
  // "2 ranks over shm, ring" (or "1 rank").
  std::string Describe() const;

  // ModelRunner: rank 0 only (followers get FailedPrecondition).
  const ModelConfig& config() const override { return model_->config(); }
  kernels::KernelBackend& backend() override { return model_->backend(); }
  Status ResetCache(int num_slots, int64_t capacity, kernels::KvDtype dtype) override;
  int cache_slots() const override { return cache_.num_slots(); }
  int64_t cache_capacity() const override { return cache_.capacity(); }
  int64_t cache_bytes() const override { return cache_.bytes(); }
  Status Step(const std::vector<SequenceChunk>& batch, ForwardOutput* out) override;
  // Every rank copies its shard of the slot (a step plan): n > 1 sequences of
  // a request share one prefill across the group too.
  Status CopySlot(int src, int dst, int64_t positions) override;
  Status Idle() override;
  RunnerStats stats() const override;
  // The MTP head sharded like the main layers: rank 0 sends the call as a
  // plan and every rank drafts on its shard (the same drafts on all).
  int64_t mtp_layers() const override { return model_->mtp_layers(); }
  Status MtpDraftBatch(const std::vector<MtpDraftRequest>& requests,
                       std::vector<std::vector<int32_t>>* drafts,
                       std::vector<float>* logits = nullptr) override;

  // Rank 0: ends the followers' Follow() (they return OK). Idempotent.
  Status Shutdown();

  // Ranks > 0: mirror the leader until it shuts down (OK) or a peer fails
  // (the error, naming the peer). `stop` is polled between plans; once it
  // returns true (SIGTERM), Follow waits up to `stop_grace_ms` more for the
  // leader's shutdown and then returns Cancelled.
  Status Follow(const std::function<bool()>& stop, int stop_grace_ms = 3000);

  // The error that ended the group, if any (sticky).
  Status health() const;

 private:
  TpRuntime() = default;
  enum class PlanOp : uint32_t;
  Status SendPlan(PlanOp op, const std::vector<uint8_t>& payload);
  Status RunStep(const std::vector<SequenceChunk>& batch, ForwardOutput* out);
  Status Fail(Status s);

  int rank_ = 0;
  int world_ = 1;
  std::unique_ptr<Model> model_;
  std::unique_ptr<collectives::Communicator> comm_;
  KvCache cache_;
  ForwardHooks hooks_;
  std::vector<float> gather_in_, gather_out_;
  // A device backend's all-reduce and logits, in host memory (see above).
  std::vector<float> reduce_host_, logits_host_;
  uint64_t seq_ = 0;
  int64_t last_plan_ns_ = 0;
  bool shut_down_ = false;

  mutable Mutex mu_;
  RunnerStats stats_ GUARDED_BY(mu_);
  Status failure_ GUARDED_BY(mu_);
};

}  // namespace octet::engine
