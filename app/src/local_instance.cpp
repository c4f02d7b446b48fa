#include "octet/app/local_instance.h"

#include <chrono>
#include <filesystem>
#include <regex>

#include "octet/base/file_util.h"
#include "octet/engine/generate.h"
#include "octet/wire/figures_line.h"

namespace octet::app {

namespace {

Result<std::string> OctetBinary(const std::string& given) {
  std::string bin = given;
  if (bin.empty()) {
    OCTET_ASSIGN_OR_RETURN(std::string self, SelfExecutablePath());
    bin = (std::filesystem::path(self).parent_path() / "octet").string();
  }
  std::error_code ec;
  if (!std::filesystem::exists(bin, ec)) return NotFoundError(bin + ": the octet program is not there");
  return bin;
}

}  // namespace

namespace {
engine::SpeculativeMethod MethodOf(const std::string& method) {
  return method == "mtp" ? engine::SpeculativeMethod::kMtp : engine::SpeculativeMethod::kNgram;
}
}  // namespace

int DefaultDraftTokens(const std::string& method) {
  return engine::DefaultDraftTokens(MethodOf(method));
}

int MaxDraftTokens(const std::string& method) { return engine::MaxDraftTokens(MethodOf(method)); }

Status AppendSpeculativeArgs(const std::string& method, int draft_tokens,
                             std::vector<std::string>* argv) {
  if (method == "off") return Status::Ok();
  if (method != "ngram" && method != "mtp") {
    return InvalidArgumentError("--speculative must be off, ngram or mtp (got '" + method + "')");
  }
  const int max = MaxDraftTokens(method);
  if (draft_tokens < 0 || draft_tokens > max) {
    return InvalidArgumentError("--draft-tokens (drafts a step) must be from 1 to " +
                                std::to_string(max) + " for " + method + " speculation (got " +
                                std::to_string(draft_tokens) + ")");
  }
  argv->insert(argv->end(), {"--speculative", method});
  if (draft_tokens > 0) argv->insert(argv->end(), {"--draft-tokens", std::to_string(draft_tokens)});
  return Status::Ok();
}

Result<std::vector<std::string>> InstanceSpec::Argv() const {
  OCTET_ASSIGN_OR_RETURN(std::string bin, OctetBinary(octet_binary));
  std::vector<std::string> argv = {bin};
  if (kind == Kind::kInference) {
    if (model_dir.empty()) return InvalidArgumentError("no model folder chosen");
    if (tp < 1 || tp > 64) return InvalidArgumentError("TP degree must be in 1..64");
    argv.insert(argv.end(),
                {"serve", "--model", model_dir, "--tp", std::to_string(tp), "--transport",
                 transport, "--algo", algo, "--host", host, "--port", "0", "--grpc-port", "off",
                 "--slots", std::to_string(num_slots), "--figures"});
    if (!served_name.empty()) argv.insert(argv.end(), {"--served-model-name", served_name});
    if (context > 0) argv.insert(argv.end(), {"--context", std::to_string(context)});
    if (quantize != "off") argv.insert(argv.end(), {"--quantize", quantize});
    OCTET_RETURN_IF_ERROR(AppendSpeculativeArgs(speculative, draft_tokens, &argv));
  } else if (kind == Kind::kRouter) {
    if (policy_file.empty()) return InvalidArgumentError("no routing policy file chosen");
    argv.insert(argv.end(), {"route", "--policy", policy_file, "--host", host, "--port", "0"});
  } else {
    if (train_data_dir.empty()) return InvalidArgumentError("no training data folder chosen");
    if (train_out_dir.empty()) return InvalidArgumentError("no output folder chosen for the model");
    if (train_config.empty()) return InvalidArgumentError("no model config chosen");
    if (train_steps < 1) return InvalidArgumentError("the number of steps must be at least 1");
    if (train_ranks < 1 || train_ranks > 256)
      return InvalidArgumentError("ranks must be in 1..256");
    argv.insert(argv.end(), {"train", "--config", train_config, "--data", train_data_dir, "--out",
                             train_out_dir, "--steps", std::to_string(train_steps), "--ranks",
                             std::to_string(train_ranks), "--figures"});
    if (train_seq_len > 0) argv.insert(argv.end(), {"--seq-len", std::to_string(train_seq_len)});
    if (train_batch_size > 0)
      argv.insert(argv.end(), {"--batch-size", std::to_string(train_batch_size)});
    if (train_eval_every > 0)
      argv.insert(argv.end(), {"--eval-every", std::to_string(train_eval_every)});
    if (train_threads > 0) argv.insert(argv.end(), {"--threads", std::to_string(train_threads)});
  }
  return argv;
}

Result<std::vector<InstanceSpec::Stage>> InstanceSpec::Stages() const {
  if (kind != Kind::kTraining) {
    OCTET_ASSIGN_OR_RETURN(std::vector<std::string> argv, Argv());
    return std::vector<Stage>{{kind == Kind::kInference ? "serving" : "routing", std::move(argv)}};
  }
  OCTET_ASSIGN_OR_RETURN(TrainingDataKind data, ClassifyTrainingData(train_data_dir));
  if (data == TrainingDataKind::kPrepared) {
    OCTET_ASSIGN_OR_RETURN(std::vector<std::string> argv, Argv());
    return std::vector<Stage>{{"training", std::move(argv)}};
  }
  if (train_prepared_dir.empty()) {
    return InvalidArgumentError(train_data_dir +
                                " holds text files: a folder for the prepared data is needed");
  }
  if (train_vocab_size < 257) return InvalidArgumentError("the vocabulary must be at least 257");
  InstanceSpec train = *this;
  train.train_data_dir = train_prepared_dir;
  OCTET_ASSIGN_OR_RETURN(std::vector<std::string> train_argv, train.Argv());
  std::vector<std::string> prepare = {train_argv[0],      "train",
                                      "prepare",          "--out",
                                      train_prepared_dir, "--vocab-size",
                                      std::to_string(train_vocab_size), train_data_dir};
  return std::vector<Stage>{{"preparing data", std::move(prepare)},
                            {"training", std::move(train_argv)}};
}

Result<std::unique_ptr<LocalInstance>> LocalInstance::Start(const InstanceSpec& spec,
                                                            LineFn on_line, ReadyFn on_ready,
                                                            FiguresFn on_figures,
                                                            WorkerFiguresFn on_worker_figures) {
  OCTET_ASSIGN_OR_RETURN(std::vector<InstanceSpec::Stage> stages, spec.Stages());
  std::unique_ptr<LocalInstance> inst(new LocalInstance);
  inst->spec_ = spec;
  inst->on_line_ = std::move(on_line);
  inst->on_ready_ = std::move(on_ready);
  inst->on_figures_ = std::move(on_figures);
  inst->on_worker_figures_ = std::move(on_worker_figures);
  inst->stages_ = std::move(stages);
  OCTET_RETURN_IF_ERROR(inst->SpawnStage(0));
  return inst;
}

Status LocalInstance::SpawnStage(int i) {
  SpawnOptions o;
  o.argv = stages_[i].argv;
  o.on_output = [this](std::string_view chunk) { OnOutput(chunk); };
  OCTET_ASSIGN_OR_RETURN(std::unique_ptr<Subprocess> p, Subprocess::Spawn(o));
  if (process_) finished_.push_back(std::move(process_));
  process_ = std::move(p);
  stage_ = i;
  return Status::Ok();
}

LocalInstance::~LocalInstance() { Stop(3000); }

void LocalInstance::OnOutput(std::string_view chunk) {
  static const std::regex kServing(R"(on (http://[0-9A-Za-z.:\[\]-]+:[0-9]+))");
  std::vector<std::string> lines;
  std::vector<TrainingFigures> figures;
  std::vector<WorkerFigures> worker_figures;
  std::string ready_url;
  {
    std::lock_guard<std::mutex> lock(mu_);
    partial_.append(chunk);
    size_t eol;
    while ((eol = partial_.find('\n')) != std::string::npos) {
      std::string line = partial_.substr(0, eol);
      partial_.erase(0, eol + 1);
      if (IsFiguresLine(line)) {
        // Worker telemetry, not log text: parsed here, off the GUI thread.
        if (spec_.kind == InstanceSpec::Kind::kTraining) {
          if (auto f = ParseTrainingFigures(line); f.ok()) figures.push_back(std::move(*f));
        } else {
          WorkerFigures w;
          if (wire::ParseFiguresJson(std::string_view(line).substr(wire::kFiguresPrefix.size()), &w)
                  .ok()) {
            worker_figures.push_back(std::move(w));
          }
        }
        continue;
      }
      if (line.find("error") != std::string::npos) last_error_ = line;
      std::smatch m;
      if (base_url_.empty() && line.find("serving") != std::string::npos &&
          std::regex_search(line, m, kServing)) {
        base_url_ = m[1].str();
        ready_url = base_url_;
      }
      lines.push_back(std::move(line));
    }
  }
  for (const std::string& l : lines) {
    if (on_line_) on_line_(l);
  }
  for (const TrainingFigures& f : figures) {
    if (on_figures_) on_figures_(f);
  }
  for (const WorkerFigures& w : worker_figures) {
    if (on_worker_figures_) on_worker_figures_(w);
  }
  if (!ready_url.empty() && on_ready_) on_ready_(ready_url);
}

std::string LocalInstance::base_url() const {
  std::lock_guard<std::mutex> lock(mu_);
  return base_url_;
}

std::string LocalInstance::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_error_;
}

int LocalInstance::stage() const {
  std::lock_guard<std::mutex> lock(run_mu_);
  return stage_;
}

std::optional<ExitStatus> LocalInstance::Poll() {
  std::lock_guard<std::mutex> lock(run_mu_);
  // While Stop() waits for the process, it alone touches it.
  if (exit_ || stopping_ || !process_) return exit_;
  std::optional<ExitStatus> st = process_->Poll();
  if (!st) return std::nullopt;
  if (!st->success() || stage_ + 1 >= static_cast<int>(stages_.size())) {
    exit_ = st;
    return exit_;
  }
  if (Status s = SpawnStage(stage_ + 1); !s.ok()) {
    {
      std::lock_guard<std::mutex> out_lock(mu_);
      last_error_ = "cannot start " + stages_[stage_ + 1].name + ": " + s.message();
    }
    exit_ = ExitStatus{true, 1, 0};
    return exit_;
  }
  return std::nullopt;
}

ExitStatus LocalInstance::Stop(int grace_ms) {
  Subprocess* process = nullptr;
  {
    std::lock_guard<std::mutex> lock(run_mu_);
    if (exit_ || stopping_ || !process_) return exit_.value_or(ExitStatus{});
    stopping_ = true;
    process = process_.get();
  }
  // process_ is not replaced while stopping_ is set.
  const ExitStatus st = process->Terminate(std::chrono::milliseconds(grace_ms));
  std::lock_guard<std::mutex> lock(run_mu_);
  exit_ = st;
  return st;
}

}  // namespace octet::app
