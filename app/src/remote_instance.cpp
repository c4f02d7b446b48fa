#include "octet/app/remote_instance.h"

#include <regex>

#include "agent_job_text.h"
#include "octet/agent/link_probe.h"
#include "octet/app/local_instance.h"
#include "octet/wire/figures_line.h"

namespace octet::app {

namespace {

constexpr int kListDeadlineMs = 3000;
constexpr int kStopAfterFailureMs = 15'000;
// A rank's agent that does not answer this many checks in a row fails the instance.
constexpr int kUnansweredChecks = 8;
// Checks a finished training run waits for rank 0's output stream to end.
constexpr int kLogDrainChecks = 20;
// When one rank has failed, how long the others may take to end before the
// cause is chosen among the failed ones (see WatchLoop).
constexpr int64_t kFailureSettleMs = 2000;

// A rank that ended badly, and how its agent said so.
struct RankFailure {
  size_t rank = 0;
  bool signalled = false;  // ended by a signal (killed): never a consequence of a peer
  std::string text;        // "rank R on node N: ..."
};

}  // namespace

std::string_view RemotePhaseName(RemoteInstanceStatus::Phase phase) {
  switch (phase) {
    case RemoteInstanceStatus::Phase::kStarting:
      return "starting";
    case RemoteInstanceStatus::Phase::kReady:
      return "ready";
    case RemoteInstanceStatus::Phase::kRunning:
      return "running";
    case RemoteInstanceStatus::Phase::kStopping:
      return "stopping";
    case RemoteInstanceStatus::Phase::kStopped:
      return "stopped";
    case RemoteInstanceStatus::Phase::kFinished:
      return "finished";
    case RemoteInstanceStatus::Phase::kFailed:
      return "failed";
  }
  return "?";
}

Result<std::unique_ptr<RemoteInstance>> RemoteInstance::Launch(
    std::shared_ptr<ClusterSession> session, const RemoteInstanceSpec& spec, LineFn on_line,
    StatusFn on_status, Deadline deadline, FiguresFn on_figures) {
  const char* what = spec.kind == JobKind::kRouter     ? "remote router"
                     : spec.kind == JobKind::kTraining ? "remote training run"
                                                       : "remote instance";
  auto refuse = [what](const std::string& why) {
    return InvalidArgumentError(std::string(what) + ": " + why);
  };
  if (!session) return refuse("no cluster session");
  if (spec.job_id.empty()) return refuse("no job id");
  if (spec.nodes.empty()) return refuse("no nodes chosen");
  if (spec.kind == JobKind::kRouter) {
    if (spec.policy_file.empty()) return refuse("no routing policy file chosen");
    if (spec.nodes.size() != 1) return refuse("a router runs on exactly one node");
  } else if (spec.model_dir.empty()) {
    return refuse(spec.kind == JobKind::kTraining ? "no output folder chosen"
                                                  : "no model folder chosen");
  }
  if (spec.kind == JobKind::kTraining) {
    if (spec.train_data_dir.empty()) return refuse("no training data folder chosen");
    if (spec.train_config.empty()) return refuse("no model config chosen");
    if (spec.train_steps < 1) return refuse("the number of steps must be at least 1");
  }
  const ClusterSnapshot snap = session->Snapshot();
  std::vector<std::string> names;
  for (size_t n : spec.nodes) {
    if (n >= snap.nodes.size()) {
      return refuse("node " + std::to_string(n) + ", but the cluster has " +
                    std::to_string(snap.nodes.size()));
    }
    names.push_back(snap.nodes[n].name);
  }
  // A server (rank 0 of inference, the router) listens where this machine
  // reaches its agent. Every rank is given the same flags (followers ignore
  // the serving ones).
  const std::string host = HostOfAgent(snap.nodes[spec.nodes[0]].address);
  JobRequest req;
  req.job_id = spec.job_id;
  req.kind = spec.kind;
  req.nodes = spec.nodes;
  req.transport = spec.transport;
  req.algorithm = spec.algo;
  req.threads = spec.threads;
  if (spec.kind == JobKind::kTraining) {
    // `octet worker --job training` hands these to `octet train` (with --out
    // the run's folder and --figures), joined as rank r of nodes.size().
    req.model = spec.model_dir;
    req.extra_args = {"--config",          spec.train_config, "--data",
                      spec.train_data_dir, "--steps",         std::to_string(spec.train_steps)};
    if (spec.train_seq_len > 0) {
      req.extra_args.insert(req.extra_args.end(),
                            {"--seq-len", std::to_string(spec.train_seq_len)});
    }
    if (spec.train_batch_size > 0) {
      req.extra_args.insert(req.extra_args.end(),
                            {"--batch-size", std::to_string(spec.train_batch_size)});
    }
    if (spec.train_eval_every > 0) {
      req.extra_args.insert(req.extra_args.end(),
                            {"--eval-every", std::to_string(spec.train_eval_every)});
    }
  } else {
    req.port = spec.port;
    req.extra_args = {"--host", host};
    if (spec.kind == JobKind::kRouter) {
      req.policy = spec.policy_file;
    } else {
      req.model = spec.model_dir;
      req.extra_args.insert(req.extra_args.end(),
                            {"--slots", std::to_string(std::max(1, spec.num_slots))});
      if (spec.context > 0) {
        req.extra_args.insert(req.extra_args.end(), {"--context", std::to_string(spec.context)});
      }
      if (spec.quantize != "off") {
        req.extra_args.insert(req.extra_args.end(), {"--quantize", spec.quantize});
      }
      OCTET_RETURN_IF_ERROR(
          AppendSpeculativeArgs(spec.speculative, spec.draft_tokens, &req.extra_args));
    }
    // Port 0 is "no port" to the agent, so the server is told itself to take
    // any free one (a router would otherwise take its policy's gateway.port).
    if (spec.port == 0) req.extra_args.insert(req.extra_args.end(), {"--port", "0"});
  }
  OCTET_ASSIGN_OR_RETURN(JobLaunch launch, session->LaunchJob(req, deadline));
  (void)launch;

  std::unique_ptr<RemoteInstance> inst(new RemoteInstance);
  inst->session_ = std::move(session);
  inst->spec_ = spec;
  inst->on_line_ = std::move(on_line);
  inst->on_status_ = std::move(on_status);
  inst->on_figures_ = std::move(on_figures);
  inst->node_names_ = std::move(names);
  RemoteInstance* self = inst.get();
  inst->logs_ = inst->session_->client(spec.nodes[0])
                    .StreamLogs(
                        spec.job_id, /*follow=*/true,
                        [self](const std::string& text) { self->OnLogText(text); },
                        [self](const Status&) {
                          // Rank 0's output ended: look at the jobs now.
                          {
                            std::lock_guard<std::mutex> lock(self->mu_);
                            self->logs_ended_ = true;
                          }
                          self->cv_.notify_all();
                        });
  inst->watcher_ = std::thread([self] { self->WatchLoop(); });
  return inst;
}

RemoteInstance::~RemoteInstance() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  logs_.reset();  // cancels the stream and joins its thread
}

RemoteInstanceStatus RemoteInstance::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

void RemoteInstance::Update(const std::function<bool(RemoteInstanceStatus*)>& change) {
  RemoteInstanceStatus next;
  {
    std::lock_guard<std::mutex> lock(mu_);
    next = status_;
    if (!change(&next)) return;
    if (status_.phase == next.phase && status_.url == next.url && status_.error == next.error) {
      return;
    }
    status_ = next;
  }
  std::lock_guard<std::mutex> callback(callback_mu_);
  if (on_status_) on_status_(next);
}

void RemoteInstance::OnLogText(const std::string& text) {
  static const std::regex kServing(R"(on (http://[0-9A-Za-z.:\[\]-]+:[0-9]+))");
  const bool training = spec_.kind == JobKind::kTraining;
  std::vector<std::string> lines;
  std::vector<TrainingFigures> figures;
  std::string ready_url;
  bool running = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    partial_.append(text);
    size_t eol;
    while ((eol = partial_.find('\n')) != std::string::npos) {
      std::string line = partial_.substr(0, eol);
      partial_.erase(0, eol + 1);
      if (wire::IsFiguresLine(line)) continue;  // telemetry, not log text
      std::smatch m;
      if (training) {
        if (FoldTrainingLogLine(line, &figures_)) {
          figures.push_back(figures_);
          running = running || figures_.has_step;
        }
      } else if (status_.phase == RemoteInstanceStatus::Phase::kStarting && ready_url.empty() &&
                 line.find("serving") != std::string::npos &&
                 std::regex_search(line, m, kServing)) {
        ready_url = m[1].str();
      }
      lines.push_back(std::move(line));
    }
  }
  {
    std::lock_guard<std::mutex> callback(callback_mu_);
    for (const std::string& l : lines) {
      if (on_line_) on_line_(l);
    }
    for (const TrainingFigures& f : figures) {
      if (on_figures_) on_figures_(f);
    }
  }
  if (!ready_url.empty() || running) {
    Update([&](RemoteInstanceStatus* s) {
      if (s->phase != RemoteInstanceStatus::Phase::kStarting) return false;
      s->phase =
          running ? RemoteInstanceStatus::Phase::kRunning : RemoteInstanceStatus::Phase::kReady;
      s->url = ready_url;
      return true;
    });
  }
}

void RemoteInstance::WatchLoop() {
  std::vector<int> unanswered(spec_.nodes.size(), 0);
  int finish_checks = 0;
  int64_t settle_until_ns = 0;  // set by the first failure seen
  for (;;) {
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(std::max(20, spec_.poll_interval_ms)),
                   [this] { return quit_; });
      if (quit_) return;
      stopping = stopping_;
    }
    // Each rank's job as its agent reports it.
    size_t ended = 0;
    size_t finished = 0;  // training ranks that exited well
    std::vector<RankFailure> failures;  // by rank
    for (size_t r = 0; r < spec_.nodes.size(); ++r) {
      const std::string where = "rank " + std::to_string(r) + " on node " + node_names_[r];
      auto jobs = session_->client(spec_.nodes[r]).ListJobs(Deadline::AfterMs(kListDeadlineMs));
      if (!jobs.ok()) {
        if (++unanswered[r] >= kUnansweredChecks) {
          failures.push_back({r, false, where + ": " + jobs.status().message()});
        }
        continue;
      }
      unanswered[r] = 0;
      const JobStatus* job = nullptr;
      for (const JobStatus& j : *jobs) {
        if (j.spec.job_id == spec_.job_id) job = &j;
      }
      if (!job) {
        ++ended;
        failures.push_back({r, false, where + ": its agent no longer has the job"});
        continue;
      }
      if (job->state == "running") continue;
      ++ended;
      // A training rank is done when it exits well; the others wait for the
      // last ones (rank 0 exports the model after the final barrier).
      if (spec_.kind == JobKind::kTraining && job->state == "exited" && job->exit_code == 0) {
        ++finished;
        continue;
      }
      failures.push_back({r, job->signal != 0, where + ": " + EndedWhy(*job)});
    }
    if (stopping) {
      if (ended == spec_.nodes.size()) {
        Update([](RemoteInstanceStatus* s) {
          s->phase = RemoteInstanceStatus::Phase::kStopped;
          s->url.clear();
          return true;
        });
        return;
      }
      continue;
    }
    if (failures.empty() && finished == spec_.nodes.size()) {
      // Rank 0's last lines (its final step) may still be on their way: the
      // end is reported once its output stream has ended (or after a while).
      bool logs_ended;
      {
        std::lock_guard<std::mutex> lock(mu_);
        logs_ended = logs_ended_;
      }
      if (!logs_ended && ++finish_checks < kLogDrainChecks) continue;
      Update([&](RemoteInstanceStatus* s) {  // under mu_
        s->phase = stopping_ ? RemoteInstanceStatus::Phase::kStopped
                             : RemoteInstanceStatus::Phase::kFinished;
        return true;
      });
      return;
    }
    if (failures.empty()) continue;
    // When one rank fails, its peers end soon after because they lost it; the
    // first one seen is not always the cause. Wait a moment for the others,
    // then name a rank ended by a signal (killed), else the lowest failed one
    // (rank 0 reads the model for all and names a lost peer).
    if (ended < spec_.nodes.size()) {
      if (settle_until_ns == 0) settle_until_ns = NowNs() + kFailureSettleMs * 1'000'000;
      if (NowNs() < settle_until_ns) continue;
    }
    const RankFailure* cause = &failures.front();
    for (const RankFailure& f : failures) {
      if (f.signalled && !cause->signalled) cause = &f;
    }
    const std::string failure = cause->text;
    // Not a failure when Stop() came while the ranks were being looked at.
    bool failed = false;
    Update([&](RemoteInstanceStatus* s) {  // under mu_
      failed = !stopping_;
      if (!failed) return false;
      s->phase = RemoteInstanceStatus::Phase::kFailed;
      s->url.clear();
      s->error = failure;
      return true;
    });
    if (failed) {
      // The other ranks would wait for their peer until their own timeouts.
      session_->StopJob(spec_.job_id, Deadline::AfterMs(kStopAfterFailureMs)).IgnoreError();
      return;
    }
  }
}

Status RemoteInstance::Stop(Deadline deadline) {
  bool ended = false;
  Update([&](RemoteInstanceStatus* s) {  // under mu_
    ended = s->phase == RemoteInstanceStatus::Phase::kFailed ||
            s->phase == RemoteInstanceStatus::Phase::kStopped ||
            s->phase == RemoteInstanceStatus::Phase::kFinished;
    if (ended) return false;
    stopping_ = true;
    s->phase = RemoteInstanceStatus::Phase::kStopping;
    s->url.clear();
    return true;
  });
  if (ended) return Status::Ok();
  Status s = session_->StopJob(spec_.job_id, deadline);
  cv_.notify_all();
  // NotFound: every rank had already ended; the watcher reports the end either way.
  if (s.code() == StatusCode::kNotFound) return Status::Ok();
  return s;
}

}  // namespace octet::app
