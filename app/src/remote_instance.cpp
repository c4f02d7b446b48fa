#include "octet/app/remote_instance.h"

#include <regex>

#include "octet/agent/link_probe.h"

namespace octet::app {

namespace {

constexpr int kListDeadlineMs = 3000;
constexpr int kStopAfterFailureMs = 15'000;
// A rank's agent that does not answer this many checks in a row fails the instance.
constexpr int kUnansweredChecks = 8;

std::string HostOfAgent(const std::string& address) {
  if (address.rfind("unix:", 0) == 0) return "127.0.0.1";
  std::string host;
  uint16_t port = 0;
  if (!agent::SplitHostPort(address, &host, &port).ok()) return address;
  return host;
}

// The agent's account of a rank that ended: its exit reason and the last
// error line the worker printed (when the reason does not already hold it).
std::string EndedWhy(const JobStatus& job) {
  std::string why = job.exit_reason.empty() ? job.state : job.exit_reason;
  if (!job.last_error_line.empty() && why.find(job.last_error_line) == std::string::npos) {
    why += ": " + job.last_error_line;
  }
  return why;
}

}  // namespace

std::string_view RemotePhaseName(RemoteInstanceStatus::Phase phase) {
  switch (phase) {
    case RemoteInstanceStatus::Phase::kStarting:
      return "starting";
    case RemoteInstanceStatus::Phase::kReady:
      return "ready";
    case RemoteInstanceStatus::Phase::kStopping:
      return "stopping";
    case RemoteInstanceStatus::Phase::kStopped:
      return "stopped";
    case RemoteInstanceStatus::Phase::kFailed:
      return "failed";
  }
  return "?";
}

Result<std::unique_ptr<RemoteInstance>> RemoteInstance::Launch(
    std::shared_ptr<ClusterSession> session, const RemoteInstanceSpec& spec, LineFn on_line,
    StatusFn on_status, Deadline deadline) {
  if (!session) return InvalidArgumentError("remote instance: no cluster session");
  if (spec.job_id.empty()) return InvalidArgumentError("remote instance: no job id");
  if (spec.model_dir.empty()) return InvalidArgumentError("remote instance: no model folder");
  if (spec.nodes.empty()) return InvalidArgumentError("remote instance: no nodes chosen");
  const ClusterSnapshot snap = session->Snapshot();
  std::vector<std::string> names;
  for (size_t n : spec.nodes) {
    if (n >= snap.nodes.size()) {
      return InvalidArgumentError("remote instance: node " + std::to_string(n) +
                                  ", but the cluster has " + std::to_string(snap.nodes.size()));
    }
    names.push_back(snap.nodes[n].name);
  }
  // Rank 0 serves where this machine reaches its agent. Every rank is given
  // the same flags (followers ignore the serving ones).
  const std::string host = HostOfAgent(snap.nodes[spec.nodes[0]].address);
  JobRequest req;
  req.job_id = spec.job_id;
  req.kind = JobKind::kInference;
  req.model = spec.model_dir;
  req.nodes = spec.nodes;
  req.transport = spec.transport;
  req.algorithm = spec.algo;
  req.port = spec.port;
  req.threads = spec.threads;
  req.extra_args = {"--host", host, "--slots", std::to_string(std::max(1, spec.num_slots))};
  // Port 0 is "no port" to the agent, so the worker is told itself to take any free one.
  if (spec.port == 0) req.extra_args.insert(req.extra_args.end(), {"--port", "0"});
  if (spec.context > 0) {
    req.extra_args.insert(req.extra_args.end(), {"--context", std::to_string(spec.context)});
  }
  OCTET_ASSIGN_OR_RETURN(JobLaunch launch, session->LaunchJob(req, deadline));
  (void)launch;

  std::unique_ptr<RemoteInstance> inst(new RemoteInstance);
  inst->session_ = std::move(session);
  inst->spec_ = spec;
  inst->on_line_ = std::move(on_line);
  inst->on_status_ = std::move(on_status);
  inst->node_names_ = std::move(names);
  RemoteInstance* self = inst.get();
  inst->logs_ = inst->session_->client(spec.nodes[0])
                    .StreamLogs(
                        spec.job_id, /*follow=*/true,
                        [self](const std::string& text) { self->OnLogText(text); },
                        [self](const Status&) {
                          // Rank 0's output ended: look at the jobs now.
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
  std::vector<std::string> lines;
  std::string ready_url;
  {
    std::lock_guard<std::mutex> lock(mu_);
    partial_.append(text);
    size_t eol;
    while ((eol = partial_.find('\n')) != std::string::npos) {
      std::string line = partial_.substr(0, eol);
      partial_.erase(0, eol + 1);
      if (line.rfind("@octet-figures", 0) == 0) continue;  // telemetry, not log text
      std::smatch m;
      if (status_.phase == RemoteInstanceStatus::Phase::kStarting && ready_url.empty() &&
          line.find("serving") != std::string::npos && std::regex_search(line, m, kServing)) {
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
  }
  if (!ready_url.empty()) {
    Update([&](RemoteInstanceStatus* s) {
      if (s->phase != RemoteInstanceStatus::Phase::kStarting) return false;
      s->phase = RemoteInstanceStatus::Phase::kReady;
      s->url = ready_url;
      return true;
    });
  }
}

void RemoteInstance::WatchLoop() {
  std::vector<int> unanswered(spec_.nodes.size(), 0);
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
    std::string failure;
    for (size_t r = 0; r < spec_.nodes.size(); ++r) {
      const std::string where = "rank " + std::to_string(r) + " on node " + node_names_[r];
      auto jobs = session_->client(spec_.nodes[r]).ListJobs(Deadline::AfterMs(kListDeadlineMs));
      if (!jobs.ok()) {
        if (++unanswered[r] >= kUnansweredChecks && failure.empty()) {
          failure = where + ": " + jobs.status().message();
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
        if (failure.empty()) failure = where + ": its agent no longer has the job";
        continue;
      }
      if (job->state == "running") continue;
      ++ended;
      if (failure.empty()) failure = where + ": " + EndedWhy(*job);
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
    if (failure.empty()) continue;
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
            s->phase == RemoteInstanceStatus::Phase::kStopped;
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
