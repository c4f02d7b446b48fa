#include "octet/trainer/trainer.h"

#include <cmath>
#include <fstream>

#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/base/log.h"
#include "octet/base/npy.h"
#include "octet/trainer/checkpoint.h"
#include "octet/trainer/model_io.h"

namespace octet::trainer {

double EstimatePeakFlops(int threads) {
  double mhz = 0;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("cpu MHz", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) mhz = std::atof(line.c_str() + colon + 1);
      break;
    }
  }
  if (mhz <= 0) mhz = 2000;  // aarch64 kernels often do not report a clock
  return std::max(1, threads) * mhz * 1e6 * 32.0;
}

Trainer::~Trainer() = default;

std::string Trainer::SettingsJson() const {
  nlohmann::ordered_json j;
  j["model"] = nlohmann::json::parse(opt_.model.ToJson());
  j["optimizer"] = opt_.optimizer.kind;
  j["batch_size"] = opt_.batch_size;
  j["sequence_len"] = opt_.model.sequence_len;
  j["total_batch_tokens"] = opt_.total_batch_tokens;
  j["world_size"] = world_;
  j["grad_accum"] = grad_accum_;
  j["steps"] = opt_.steps;
  j["warmup_steps"] = opt_.warmup_steps;
  j["warmdown_frac"] = opt_.warmdown_frac;
  j["final_lr_frac"] = opt_.final_lr_frac;
  j["grad_clip"] = opt_.grad_clip;
  j["seed"] = opt_.seed;
  j["data"] = opt_.data_dir;
  return j.dump();
}

Result<std::unique_ptr<Trainer>> Trainer::Create(const TrainOptions& options,
                                                 kernels::KernelBackend* backend,
                                                 GradientCollective* main,
                                                 GradientCollective* background) {
  std::unique_ptr<Trainer> t(new Trainer());
  t->opt_ = options;
  t->backend_ = backend;
  t->main_ = main;
  t->rank_ = main ? main->rank() : 0;
  t->world_ = main ? main->world_size() : 1;
  if (t->world_ > 1 && !background) {
    return InvalidArgumentError("data parallel training needs a second collective channel");
  }
  TrainOptions& o = t->opt_;
  if (o.batch_size <= 0) return InvalidArgumentError("batch size must be positive");
  if (o.steps < 0) return InvalidArgumentError("steps must be >= 0");
  OCTET_RETURN_IF_ERROR(o.model.Validate());
  const int64_t T = o.model.sequence_len;
  const int64_t per_micro = int64_t{t->world_} * o.batch_size * T;
  if (o.total_batch_tokens == 0) o.total_batch_tokens = per_micro;
  if (o.total_batch_tokens % per_micro != 0) {
    return InvalidArgumentError(
        "total batch of " + std::to_string(o.total_batch_tokens) +
        " tokens is not a multiple of ranks x batch x sequence = " + std::to_string(per_micro));
  }
  t->grad_accum_ = static_cast<int>(o.total_batch_tokens / per_micro);

  OCTET_ASSIGN_OR_RETURN(DataMeta meta, DataMeta::Load(o.data_dir));
  if (meta.vocab_size != o.model.vocab_size) {
    return InvalidArgumentError("the data's vocabulary has " + std::to_string(meta.vocab_size) +
                                " tokens but the model's has " +
                                std::to_string(o.model.vocab_size));
  }
  if (o.model.bos_token_id < 0) o.model.bos_token_id = meta.bos_id;  // for config.json
  OCTET_ASSIGN_OR_RETURN(t->train_, TokenDataset::Open(o.data_dir, "train"));
  if (!meta.val_files.empty()) {
    OCTET_ASSIGN_OR_RETURN(t->val_, TokenDataset::Open(o.data_dir, "val"));
    if (t->val_->size() < per_micro + 1 && o.eval_batches > 0) {
      OCTET_LOG(WARNING) << "validation split has " << t->val_->size()
                         << " tokens, fewer than one batch; validation is off";
      t->val_.reset();
    }
  }
  if (o.eval_batches <= 0) t->val_.reset();
  const std::string token_bytes_path = JoinPath(o.data_dir, "token_bytes.npy");
  if (PathExists(token_bytes_path)) {
    OCTET_ASSIGN_OR_RETURN(NpyArray a, ReadNpy(token_bytes_path));
    if (a.numel() != meta.vocab_size) {
      return DataLossError(token_bytes_path + ": " + std::to_string(a.numel()) +
                           " entries for a vocabulary of " + std::to_string(meta.vocab_size));
    }
    for (int64_t v : a.AsInt64()) t->token_bytes_.push_back(static_cast<int32_t>(v));
  }
  OCTET_ASSIGN_OR_RETURN(
      t->loader_, DataLoader::Create(t->train_.get(), o.batch_size, int(T), t->rank_, t->world_));

  OCTET_ASSIGN_OR_RETURN(t->model_, GptModel::Create(o.model, backend));
  t->model_->InitWeights(o.seed);
  OCTET_ASSIGN_OR_RETURN(t->optimizer_, Optimizer::Create(o.optimizer, t->model_.get()));
  t->schedule_.total_steps = o.steps;
  t->schedule_.warmup_steps = o.warmup_steps;
  t->schedule_.warmdown_steps = static_cast<int64_t>(std::llround(o.warmdown_frac * o.steps));
  t->schedule_.final_lr_frac = o.final_lr_frac;
  t->flops_per_token_ = o.model.TrainingFlopsPerToken(int(T));
  t->peak_flops_ = o.peak_flops > 0 ? o.peak_flops : EstimatePeakFlops(backend->num_threads());
  t->x_.resize(int64_t{o.batch_size} * T);
  t->y_.resize(int64_t{o.batch_size} * T);

  if (o.resume) {
    OCTET_ASSIGN_OR_RETURN(std::string dir, LatestCheckpoint(o.out_dir));
    CheckpointState state;
    OCTET_RETURN_IF_ERROR(LoadCheckpoint(dir, *t->model_, *t->optimizer_, &state));
    const auto saved = nlohmann::json::parse(state.settings_json, nullptr, false);
    const auto now = nlohmann::json::parse(t->SettingsJson());
    for (const char* key : {"optimizer", "sequence_len", "total_batch_tokens"}) {
      if (saved.is_object() && saved.contains(key) && saved[key] != now[key]) {
        return InvalidArgumentError(dir + ": the checkpoint was trained with " + key + " " +
                                    saved[key].dump() + ", this run asks for " + now[key].dump());
      }
    }
    t->step_ = state.step;
    t->loader_->set_position(state.loader);
    if (t->rank_ == 0) {
      OCTET_LOG(INFO) << "resuming from " << dir << " at step " << state.step;
    }
  } else if (PathExists(JoinPath(JoinPath(o.out_dir, "checkpoints"), "latest"))) {
    return AlreadyExistsError(o.out_dir +
                              " already holds checkpoints: pass --resume to continue "
                              "that run, or choose another --out");
  }
  if (t->world_ > 1) {
    t->bucketer_ = std::make_unique<GradientBucketer>(
        t->model_->grads().data(), t->model_->num_params(),
        PlanBuckets(t->model_->tensors(), o.bucket_bytes), background);
  }
  return t;
}

Status Trainer::ComputeGradients(StepReport* report) {
  const int B = opt_.batch_size, T = opt_.model.sequence_len;
  const int64_t t0 = NowNs();
  model_->ZeroGrads();
  double loss_sum = 0;
  const float scale = 1.0f / static_cast<float>(grad_accum_);
  for (int micro = 0; micro < grad_accum_; ++micro) {
    loader_->Next(x_.data(), y_.data());
    OCTET_ASSIGN_OR_RETURN(float loss, model_->Forward(x_.data(), y_.data(), B, T));
    loss_sum += loss;
    const bool last = micro == grad_accum_ - 1;
    if (bucketer_ && last) {
      bucketer_->Begin();
      OCTET_RETURN_IF_ERROR(model_->Backward(
          scale, [this](int64_t begin, int64_t end) { bucketer_->OnReady(begin, end); }));
    } else {
      OCTET_RETURN_IF_ERROR(model_->Backward(scale));
    }
  }
  report->compute_ms = static_cast<double>(NowNs() - t0) * 1e-6;
  float loss = static_cast<float>(loss_sum / grad_accum_);
  if (bucketer_) {
    OCTET_RETURN_IF_ERROR(bucketer_->Finish(Deadline::AfterMs(opt_.sync_timeout_ms)));
    report->allreduce_wait_ms = static_cast<double>(bucketer_->last_wait_ns()) * 1e-6;
    report->allreduce_busy_ms = static_cast<double>(bucketer_->last_busy_ns()) * 1e-6;
    OCTET_RETURN_IF_ERROR(main_->AllReduceSum(&loss, 1));
    loss /= static_cast<float>(world_);
  }
  report->loss = loss;
  return Status::Ok();
}

Result<StepReport> Trainer::Step() {
  StepReport r;
  const int64_t t0 = NowNs();
  OCTET_RETURN_IF_ERROR(ComputeGradients(&r));
  if (!grads_written_ && !opt_.grads_out.empty() && rank_ == 0) {
    OCTET_RETURN_IF_ERROR(SaveGradients(*model_, opt_.grads_out));
  }
  grads_written_ = true;
  r.grad_norm = ClipGradNorm(backend_->host_thread_pool(), model_->grads(), opt_.grad_clip);
  r.lr_multiplier = schedule_.Multiplier(step_);
  OCTET_RETURN_IF_ERROR(optimizer_->Step(r.lr_multiplier));
  ++step_;
  r.step = step_;
  r.total_steps = opt_.steps;
  r.tokens = opt_.total_batch_tokens;
  r.step_ms = static_cast<double>(NowNs() - t0) * 1e-6;
  r.tokens_per_second = r.step_ms > 0 ? static_cast<double>(r.tokens) / (r.step_ms * 1e-3) : 0;
  r.mfu = flops_per_token_ * r.tokens_per_second / (peak_flops_ * world_);
  return r;
}

Result<EvalReport> Trainer::Evaluate() {
  EvalReport r;
  r.step = step_;
  if (!val_) return FailedPreconditionError("no validation split");
  const int B = opt_.batch_size, T = opt_.model.sequence_len;
  OCTET_ASSIGN_OR_RETURN(auto loader, DataLoader::Create(val_.get(), B, T, rank_, world_));
  // [nats, tokens, nats over byte-carrying targets, bytes]
  double sums[4] = {0, 0, 0, 0};
  for (int i = 0; i < opt_.eval_batches; ++i) {
    loader->Next(x_.data(), y_.data());
    OCTET_RETURN_IF_ERROR(model_->Forward(x_.data(), y_.data(), B, T).status());
    const auto losses = model_->position_losses();
    for (size_t k = 0; k < losses.size(); ++k) {
      sums[0] += losses[k];
      sums[1] += 1;
      if (!token_bytes_.empty() && token_bytes_[y_[k]] > 0) {
        sums[2] += losses[k];
        sums[3] += token_bytes_[y_[k]];
      }
    }
  }
  if (main_ && world_ > 1) {
    float f[4] = {float(sums[0]), float(sums[1]), float(sums[2]), float(sums[3])};
    OCTET_RETURN_IF_ERROR(main_->AllReduceSum(f, 4));
    for (int i = 0; i < 4; ++i) sums[i] = f[i];
  }
  r.tokens = static_cast<int64_t>(sums[1]);
  r.val_loss = static_cast<float>(sums[0] / std::max(1.0, sums[1]));
  if (!token_bytes_.empty() && sums[3] > 0) {
    r.val_bpb = static_cast<float>(sums[2] / (std::log(2.0) * sums[3]));
  }
  return r;
}

Status Trainer::Checkpoint() {
  if (rank_ != 0) return Status::Ok();
  CheckpointState state;
  state.step = step_;
  state.loader = loader_->position();
  state.settings_json = SettingsJson();
  return SaveCheckpoint(opt_.out_dir, *model_, *optimizer_, state, opt_.data_dir,
                        opt_.keep_checkpoints);
}

Status Trainer::Run(const std::function<void(const StepReport&)>& on_step,
                    const std::function<void(const EvalReport&)>& on_eval) {
  auto eval = [&]() -> Status {
    if (!val_) return Status::Ok();
    OCTET_ASSIGN_OR_RETURN(EvalReport e, Evaluate());
    if (on_eval) on_eval(e);
    return Status::Ok();
  };
  while (step_ < opt_.steps) {
    OCTET_ASSIGN_OR_RETURN(StepReport r, Step());
    if (on_step) on_step(r);
    const bool last = step_ == opt_.steps;
    if (!last && opt_.eval_every > 0 && step_ % opt_.eval_every == 0) OCTET_RETURN_IF_ERROR(eval());
    if (!last && opt_.checkpoint_every > 0 && step_ % opt_.checkpoint_every == 0) {
      OCTET_RETURN_IF_ERROR(Checkpoint());
    }
  }
  OCTET_RETURN_IF_ERROR(eval());
  OCTET_RETURN_IF_ERROR(Checkpoint());
  if (rank_ == 0) OCTET_RETURN_IF_ERROR(ExportModel(opt_.out_dir, *model_, opt_.data_dir));
  if (main_ && world_ > 1) OCTET_RETURN_IF_ERROR(main_->Barrier());
  return Status::Ok();
}

}  // namespace octet::trainer
