// Trainer: one rank's pre-training loop — data, forward/backward with
// gradient accumulation, data-parallel gradient averaging overlapped with
// backward, clipping after the reduction, the optimizer step on the LR
// schedule, validation (loss and bits per byte), checkpoints and resume.
//
// Each optimizer step consumes total_batch_tokens tokens: world ranks ×
// grad_accum micro-batches × [B, T]. Every rank runs the same step on its own
// disjoint slice of each global micro-batch (DataLoader); after the last
// micro-batch's backward the gradients are all-reduced and averaged bucket by
// bucket (GradientBucketer), so all ranks hold identical gradients, clip them
// identically and take identical optimizer steps — parameters never need to
// be broadcast after the identical initialisation.
//
// Determinism: with the same world size, the same options and data, two runs
// produce bit-identical losses and weights; a run resumed from a checkpoint
// continues exactly as the uninterrupted run would have.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "octet/base/status.h"
#include "octet/kernels/backend.h"
#include "octet/trainer/gpt_config.h"
#include "octet/trainer/gpt_model.h"
#include "octet/trainer/grad_sync.h"
#include "octet/trainer/optimizer.h"
#include "octet/trainer/token_shards.h"

namespace octet::trainer {

struct TrainOptions {
  std::string data_dir;  // token shards (octet train prepare)
  std::string out_dir;   // checkpoints and the final model
  GptConfig model;       // vocab_size must equal the data's
  OptimizerConfig optimizer;
  int batch_size = 8;              // B: sequences per rank per micro-batch
  int64_t total_batch_tokens = 0;  // per optimizer step, all ranks; 0 = world·B·T
  int64_t steps = 100;             // optimizer steps of the whole run
  int64_t warmup_steps = 0;
  float warmdown_frac = 0.2f;  // share of the steps over which the LR falls
  float final_lr_frac = 0.0f;
  float grad_clip = 1.0f;        // max global L2 norm; 0 = no clipping
  int64_t checkpoint_every = 0;  // steps; 0 = only at the end
  int keep_checkpoints = 2;
  int64_t eval_every = 0;  // steps; 0 = only at the end (when there is a val split)
  int eval_batches = 4;    // micro-batches per rank per evaluation
  uint64_t seed = 42;
  bool resume = false;              // continue from OUT/checkpoints/latest
  int64_t bucket_bytes = 25 << 20;  // gradient all-reduce bucket size
  // Rank 0 writes the averaged gradients (before clipping) of the first step
  // this run takes (step 1, or the first after --resume) as safetensors.
  std::string grads_out;
  double peak_flops = 0;          // per rank, for MFU; 0 = EstimatePeakFlops
  int sync_timeout_ms = 600'000;  // bound on waiting for the gradient all-reduce
};

struct StepReport {
  int64_t step = 0;  // 1-based: optimizer steps completed
  int64_t total_steps = 0;
  float loss = 0;  // mean over the step's tokens on all ranks
  float lr_multiplier = 0;
  float grad_norm = 0;  // before clipping
  int64_t tokens = 0;   // this step, all ranks
  double step_ms = 0;
  double compute_ms = 0;         // forward + backward
  double allreduce_wait_ms = 0;  // waiting for gradients after backward (not hidden)
  double allreduce_busy_ms = 0;  // time inside all-reduce calls (mostly overlapped)
  double tokens_per_second = 0;  // all ranks
  double mfu = 0;                // model FLOPs utilisation, 0..1 (estimate)
};

struct EvalReport {
  int64_t step = 0;
  float val_loss = 0;
  float val_bpb = -1;  // bits per byte; < 0 when the data has no token_bytes.npy
  int64_t tokens = 0;
};

// FLOP/s one rank with `threads` threads can peak at: threads × clock (from
// /proc/cpuinfo) × 32 (8-wide FMA, two pipes). An estimate for MFU figures.
double EstimatePeakFlops(int threads);

class Trainer {
 public:
  // `main` and `background` (two channels to the same ranks; null for one
  // rank) carry the loss/eval reductions and the gradient buckets
  // (DataParallelGroup, dp_group.h, makes them from a Communicator).
  static Result<std::unique_ptr<Trainer>> Create(const TrainOptions& options,
                                                 kernels::KernelBackend* backend,
                                                 GradientCollective* main,
                                                 GradientCollective* background);
  ~Trainer();

  // Trains from the current step to options.steps; evaluates and checkpoints
  // as configured and at the end; rank 0 exports the final model to OUT.
  Status Run(const std::function<void(const StepReport&)>& on_step,
             const std::function<void(const EvalReport&)>& on_eval);

  // One optimizer step (exposed for tests).
  Result<StepReport> Step();
  // Forward/backward over this step's micro-batches and the gradient
  // reduction, leaving averaged gradients in model().grads() (exposed for tests).
  Status ComputeGradients(StepReport* report);
  Result<EvalReport> Evaluate();
  Status Checkpoint();

  GptModel& model() { return *model_; }
  Optimizer& optimizer() { return *optimizer_; }
  int64_t step() const { return step_; }
  int grad_accum() const { return grad_accum_; }
  int rank() const { return rank_; }
  int world_size() const { return world_; }
  bool has_validation() const { return val_ != nullptr; }
  // Settings recorded in checkpoints (JSON object).
  std::string SettingsJson() const;

 private:
  Trainer() = default;

  TrainOptions opt_;
  kernels::KernelBackend* backend_ = nullptr;
  GradientCollective* main_ = nullptr;
  int rank_ = 0;
  int world_ = 1;
  int grad_accum_ = 1;
  int64_t step_ = 0;
  bool grads_written_ = false;  // grads_out handled
  LrSchedule schedule_;
  double flops_per_token_ = 0;
  double peak_flops_ = 0;
  std::unique_ptr<GptModel> model_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<TokenDataset> train_;
  std::unique_ptr<TokenDataset> val_;
  std::unique_ptr<DataLoader> loader_;
  std::unique_ptr<GradientBucketer> bucketer_;
  std::vector<int32_t> token_bytes_;  // [vocab] or empty
  std::vector<int32_t> x_, y_;
};

}  // namespace octet::trainer
