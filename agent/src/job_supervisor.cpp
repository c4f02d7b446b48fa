#include "octet/agent/job_supervisor.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "octet/agent/cluster_token.h"
#include "octet/agent/job_arguments.h"
#include "octet/agent/link_probe.h"
#include "octet/agent/system_stats.h"
#include "octet/base/clock.h"
#include "octet/base/deadline.h"
#include "octet/base/log.h"
#include "octet/base/subprocess.h"
#include "octet/base/thread_annotations.h"
#include "octet/collectives/local_rendezvous.h"
#include "octet/wire/figures_line.h"

namespace octet::agent {
namespace {

bool ValidJobId(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) {
      return false;
    }
  }
  return id != "." && id != "..";
}

// A free TCP port on `host` (any address when `host` is not one of ours).
Result<uint16_t> FreeTcpPort(const std::string& host) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return UnavailableError(std::string("socket: ") + std::strerror(errno));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = 0;
    if (attempt == 0 && ::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) {
      ::close(fd);
      continue;
    }
    if (attempt == 1) a.sin_addr.s_addr = htonl(INADDR_ANY);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      socklen_t len = sizeof a;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
      ::close(fd);
      return static_cast<uint16_t>(ntohs(a.sin_port));
    }
    ::close(fd);
  }
  return UnavailableError("no free TCP port for the rendezvous on " + host);
}

}  // namespace

std::string_view JobStateName(JobState state) {
  switch (state) {
    case JobState::kRunning:
      return "running";
    case JobState::kExited:
      return "exited";
    case JobState::kFailed:
      return "failed";
    case JobState::kStopped:
      return "stopped";
  }
  return "?";
}

bool LooksLikeError(std::string_view line) {
  std::string lower(line);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* w : {"error", "fatal", "failed", "exception", "abort", "panic", "unreachable"}) {
    if (lower.find(w) != std::string::npos) return true;
  }
  // Log lines of our own format: "E 12:00:00.000 ...".
  return line.size() > 2 && line[0] == 'E' && line[1] == ' ';
}

Status CheckModelPath(const std::string& model, const std::vector<std::string>& roots,
                      std::string* resolved) {
  OCTET_ASSIGN_OR_RETURN(std::string real, ResolveInsideRoots(model, roots, "model"));
  if (resolved) *resolved = std::move(real);
  return Status::Ok();
}

Status ValidateJobSpec(const JobSpec& s, const std::vector<std::string>& model_roots,
                       JobSpec* launched, const std::vector<std::string>& owner_flags) {
  if (!ValidJobId(s.job_id)) {
    return InvalidArgumentError("job id '" + s.job_id + "' must be 1-64 of [A-Za-z0-9._-]");
  }
  if (s.port > 65535)
    return InvalidArgumentError("port " + std::to_string(s.port) + " out of range");
  if (s.threads > 4096)
    return InvalidArgumentError("threads " + std::to_string(s.threads) + " must be 0..4096");
  if (!s.deployment.empty() && !ValidJobId(s.deployment)) {
    return InvalidArgumentError("deployment '" + s.deployment + "' must be 1-64 of [A-Za-z0-9._-]");
  }
  if (!s.instance.empty() && !ValidJobId(s.instance)) {
    return InvalidArgumentError("instance '" + s.instance + "' must be 1-64 of [A-Za-z0-9._-]");
  }
  JobSpec out = s;
  OCTET_ASSIGN_OR_RETURN(out.extra_args,
                         CheckExtraArgs(s.kind, s.extra_args, model_roots, owner_flags));
  if (s.kind == JobKind::kRouter) {
    if (s.policy.empty())
      return InvalidArgumentError("router job '" + s.job_id + "' needs a policy file");
    OCTET_ASSIGN_OR_RETURN(out.policy, ResolveInsideRoots(s.policy, model_roots, "policy"));
    if (launched) *launched = std::move(out);
    return Status::Ok();
  }
  if (s.model.empty()) return InvalidArgumentError("job '" + s.job_id + "' has no model folder");
  if (s.world_size < 1 || s.world_size > 64) {
    return InvalidArgumentError("world size " + std::to_string(s.world_size) + " must be 1..64");
  }
  if (s.rank >= s.world_size) {
    return InvalidArgumentError("rank " + std::to_string(s.rank) + " must be below world size " +
                                std::to_string(s.world_size));
  }
  if (s.transport != "shm" && s.transport != "tcp" && s.transport != "verbs") {
    return InvalidArgumentError("transport '" + s.transport + "' must be shm, tcp or verbs");
  }
  if (s.algorithm != "auto" && s.algorithm != "oneshot" && s.algorithm != "ring" &&
      s.algorithm != "nccl") {
    return InvalidArgumentError("algorithm '" + s.algorithm +
                                "' must be auto, oneshot, ring or nccl");
  }
  if (!s.rendezvous.empty()) {
    std::string host;
    uint16_t port = 0;
    if (Status st = SplitHostPort(s.rendezvous, &host, &port); !st.ok()) {
      return st.WithContext("rendezvous");
    }
    if (port == 0 && s.rank != 0) {
      return InvalidArgumentError("rendezvous '" + s.rendezvous +
                                  "': only rank 0 may ask for a port (HOST:0)");
    }
  } else if (s.world_size > 1) {
    return InvalidArgumentError("job '" + s.job_id + "' with world size " +
                                std::to_string(s.world_size) + " needs a rendezvous HOST:PORT");
  }
  // The worker is launched with the path that was checked, not the one given
  // (a symlink swapped in between would otherwise lead out of the roots).
  OCTET_RETURN_IF_ERROR(CheckModelPath(s.model, model_roots, &out.model));
  if (launched) *launched = std::move(out);
  return Status::Ok();
}

std::vector<std::string> JobCommandLine(const JobSpec& s, const std::string& bin) {
  std::vector<std::string> argv{bin};
  if (s.kind == JobKind::kRouter) {
    argv.insert(argv.end(), {"route", "--policy", s.policy});
    if (s.port) argv.insert(argv.end(), {"--port", std::to_string(s.port)});
  } else {
    argv.insert(argv.end(),
                {"worker", "--job", std::string(JobKindName(s.kind)), "--model", s.model,
                 "--world-size", std::to_string(s.world_size), "--rank", std::to_string(s.rank),
                 "--rendezvous", s.rendezvous, "--transport", s.transport, "--algo", s.algorithm});
    if (s.port) argv.insert(argv.end(), {"--port", std::to_string(s.port)});
    if (s.threads) argv.insert(argv.end(), {"--threads", std::to_string(s.threads)});
  }
  argv.insert(argv.end(), s.extra_args.begin(), s.extra_args.end());
  return argv;
}

// ---------------------------------------------------------------------------

struct JobSupervisor::Impl {
  struct Job {
    JobInfo info;
    std::unique_ptr<Subprocess> process;  // touched only on the supervisor thread
    // Output and state, guarded by Impl::mu (a lock of the enclosing object,
    // which the analysis cannot name here: the functions that touch them
    // hold it, and AppendLogLocked says REQUIRES(mu)).
    std::string log;        // the kept tail
    uint64_t log_base = 0;  // offset of log[0] in the whole output
    std::string partial_line;
    std::string last_line;
    WorkerFigures figures;
    bool have_figures = false;
    bool stop_requested = false;
    Deadline kill_at = Deadline::Never();
    std::vector<std::promise<bool>> stop_waiters;
  };

  struct Request {
    enum Kind { kStart, kStop, kStopAll, kQuit } kind;
    JobSpec spec;
    std::string job_id;
    std::promise<Result<JobStarted>> started;
    std::promise<bool> stopped;
  };

  JobSupervisorOptions options;
  mutable Mutex mu;
  std::condition_variable cv;  // a request arrived
  std::map<std::string, std::shared_ptr<Job>> jobs GUARDED_BY(mu);
  std::deque<std::string> finished_order GUARDED_BY(mu);
  std::deque<std::unique_ptr<Request>> requests GUARDED_BY(mu);
  std::thread thread;

  // Subscriptions.
  Mutex notify_mu ACQUIRED_BEFORE(sub_mu);  // held while callbacks run (Unsubscribe waits on it)
  Mutex sub_mu;
  uint64_t next_sub GUARDED_BY(sub_mu) = 1;
  std::map<uint64_t, std::pair<std::string, std::function<void()>>> subs GUARDED_BY(sub_mu);

  void Notify(const std::string& job_id) EXCLUDES(notify_mu, sub_mu, mu) {
    MutexLock n(notify_mu);
    std::vector<std::function<void()>> fns;
    {
      MutexLock lock(sub_mu);
      for (auto& [id, s] : subs) {
        if (s.first == job_id) fns.push_back(s.second);
      }
    }
    for (auto& f : fns) f();
  }

  // Output arriving on a Subprocess reader thread.
  void OnOutput(const std::shared_ptr<Job>& job, std::string_view chunk) {
    bool appended = false;
    {
      MutexLock lock(mu);
      job->partial_line.append(chunk);
      size_t start = 0;
      for (;;) {
        const size_t nl = job->partial_line.find('\n', start);
        if (nl == std::string::npos) break;
        std::string_view line(job->partial_line.data() + start, nl - start);
        if (wire::IsFiguresLine(line)) {
          WorkerFigures f = job->figures;
          if (wire::ParseFiguresJson(line.substr(wire::kFiguresPrefix.size()), &f).ok()) {
            job->figures = f;
            job->have_figures = true;
          }
        } else {
          AppendLogLocked(job.get(), std::string(line) + "\n");
          appended = true;
        }
        start = nl + 1;
      }
      job->partial_line.erase(0, start);
      // A line longer than the whole log capacity is flushed as it comes.
      if (job->partial_line.size() > options.log_capacity_bytes) {
        AppendLogLocked(job.get(), job->partial_line);
        job->partial_line.clear();
        appended = true;
      }
    }
    if (appended) Notify(job->info.spec.job_id);
  }

  void AppendLogLocked(Job* job, const std::string& text) REQUIRES(mu) {
    job->log += text;
    std::string_view line(text);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
    if (!line.empty()) {
      job->last_line = std::string(line);
      if (LooksLikeError(line)) job->info.last_error_line = std::string(line);
    }
    if (job->log.size() > options.log_capacity_bytes) {
      const size_t drop = job->log.size() - options.log_capacity_bytes;
      job->log.erase(0, drop);
      job->log_base += drop;
    }
  }

  void Run() {
    for (;;) {
      std::unique_ptr<Request> req;
      {
        MutexLock lock(mu);
        const bool any_running = std::any_of(jobs.begin(), jobs.end(), [](const auto& j) {
          return j.second->info.state == JobState::kRunning;
        });
        if (requests.empty()) {
          lock.WaitOnceFor(cv, std::chrono::milliseconds(any_running ? 20 : 200));
        }
        if (!requests.empty()) {
          req = std::move(requests.front());
          requests.pop_front();
        }
      }
      if (req) {
        if (req->kind == Request::kQuit) {
          StopEverythingAndWait();
          return;
        }
        Handle(*req);
      }
      Reap();
    }
  }

  void Handle(Request& req) {
    switch (req.kind) {
      case Request::kStart:
        req.started.set_value(DoStart(req.spec));
        break;
      case Request::kStop: {
        std::shared_ptr<Job> job;
        {
          MutexLock lock(mu);
          auto it = jobs.find(req.job_id);
          if (it != jobs.end()) job = it->second;
          if (!job || job->info.state != JobState::kRunning) {
            req.stopped.set_value(false);
            return;
          }
          job->stop_waiters.push_back(std::move(req.stopped));
        }
        RequestStop(job);
        break;
      }
      case Request::kStopAll: {
        StopEverythingAndWait();
        req.stopped.set_value(true);
        break;
      }
      case Request::kQuit:
        break;
    }
  }

  void RequestStop(const std::shared_ptr<Job>& job) {
    bool first = false;
    {
      MutexLock lock(mu);
      first = !job->stop_requested;
      job->stop_requested = true;
      if (first) job->kill_at = Deadline::AfterMs(options.stop_grace_ms);
    }
    if (first && job->process) job->process->Kill(SIGTERM);
  }

  void StopEverythingAndWait() {
    std::vector<std::shared_ptr<Job>> running;
    {
      MutexLock lock(mu);
      for (auto& [id, j] : jobs) {
        if (j->info.state == JobState::kRunning) running.push_back(j);
      }
    }
    for (auto& j : running) RequestStop(j);
    const Deadline give_up = Deadline::AfterMs(options.stop_grace_ms + 10'000);
    while (!give_up.expired()) {
      Reap();
      bool any = false;
      {
        MutexLock lock(mu);
        for (auto& j : running) any = any || j->info.state == JobState::kRunning;
      }
      if (!any) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  Result<JobStarted> DoStart(JobSpec spec) {
    {
      MutexLock lock(mu);
      auto it = jobs.find(spec.job_id);
      if (it != jobs.end() && it->second->info.state == JobState::kRunning) {
        return AlreadyExistsError("job '" + spec.job_id +
                                  "' is already running on this node (pid " +
                                  std::to_string(it->second->info.pid) + ")");
      }
    }
    if (spec.kind != JobKind::kRouter && spec.rendezvous.empty() && spec.world_size == 1) {
      spec.rendezvous = "127.0.0.1:0";
    }
    // Rank 0's rendezvous when this supervisor picks the port: bound now and
    // handed to the worker (a port picked free and bound later by the worker
    // could be taken in between; local_rendezvous.h).
    std::optional<collectives::LocalRendezvous> rendezvous;
    if (spec.kind != JobKind::kRouter) {
      std::string host;
      uint16_t port = 0;
      OCTET_RETURN_IF_ERROR(SplitHostPort(spec.rendezvous, &host, &port));
      if (port == 0 && spec.rank == 0 && spec.world_size > 1) {  // one rank: no peers
        auto opened = collectives::LocalRendezvous::Open(host);
        if (opened.ok()) {
          rendezvous = std::move(*opened);
          spec.rendezvous = JoinHostPort(host, static_cast<uint16_t>(rendezvous->port()));
        }
      }
      if (port == 0 && !rendezvous) {  // not one of this node's IPv4 addresses
        OCTET_ASSIGN_OR_RETURN(port, FreeTcpPort(host));
        spec.rendezvous = JoinHostPort(host, port);
      }
      // Checked again just before the launch: `spec.model` is the resolved
      // path, and it must still lead inside the roots.
      std::string still;
      OCTET_RETURN_IF_ERROR(CheckModelPath(spec.model, options.model_roots, &still));
      if (still != spec.model) {
        return PermissionDeniedError("model '" + spec.model + "' changed while being started");
      }
    }
    auto job = std::make_shared<Job>();
    job->info.spec = spec;
    job->info.argv = JobCommandLine(spec, options.octet_binary);
    job->figures.job_id = spec.job_id;
    job->figures.rank = spec.rank;
    job->figures.kind = std::string(JobKindName(spec.kind));
    job->figures.state = "starting";

    SpawnOptions so;
    so.argv = job->info.argv;
    so.env = options.env;
    so.env.push_back("OCTET_JOB_ID=" + spec.job_id);
    if (spec.kind == JobKind::kRouter && !options.router_admin_key.empty()) {
      so.env.push_back(std::string(kRouterAdminTokenEnv) + "=" +
                       RouterAdminToken(options.router_admin_key, spec.job_id));
    }
    if (spec.algorithm == "nccl") {
      const std::vector<std::string> nccl_env =
          options.nccl_env_source ? options.nccl_env_source() : options.nccl_env;
      for (const std::string& kv : nccl_env) {
        const std::string key = kv.substr(0, kv.find('='));
        if (std::getenv(key.c_str()) == nullptr) so.env.push_back(kv);
      }
    }
    so.new_process_group = true;
    so.die_with_parent = true;  // tied to this long-lived thread
    std::weak_ptr<Job> weak = job;
    so.on_output = [this, weak](std::string_view chunk) {
      if (auto j = weak.lock()) OnOutput(j, chunk);
    };
    if (rendezvous) so.env.push_back(collectives::LocalRendezvous::EnvFor({&*rendezvous}));
    auto proc = Subprocess::Spawn(so);
    if (rendezvous) rendezvous->Close();  // the worker holds it now
    if (!proc.ok()) return proc.status().WithContext("job '" + spec.job_id + "'");
    job->process = std::move(*proc);
    job->info.pid = job->process->pid();
    job->info.started_unix_ms = UnixMs();
    job->info.state = JobState::kRunning;
    std::shared_ptr<Job> replaced;  // destroyed outside `mu`
    {
      MutexLock lock(mu);
      auto it = jobs.find(spec.job_id);
      if (it != jobs.end()) {  // an ended job of the same id is replaced
        replaced = it->second;
        finished_order.erase(std::remove(finished_order.begin(), finished_order.end(), spec.job_id),
                             finished_order.end());
      }
      jobs[spec.job_id] = job;
    }
    OCTET_LOG(INFO) << "job " << spec.job_id << " rank " << spec.rank << " started, pid "
                    << job->info.pid;
    JobStarted started;
    started.job_id = spec.job_id;
    started.pid = job->info.pid;
    started.rendezvous = spec.rendezvous;
    started.argv = job->info.argv;
    return started;
  }

  // Collects ended processes; escalates stops past their grace period.
  void Reap() {
    std::vector<std::shared_ptr<Job>> running;
    {
      MutexLock lock(mu);
      for (auto& [id, j] : jobs) {
        if (j->info.state == JobState::kRunning) running.push_back(j);
      }
    }
    for (auto& job : running) {
      if (!job->process) continue;
      if (job->stop_requested && job->kill_at.expired()) job->process->Kill(SIGKILL);
      auto exited = job->process->Poll();
      if (!exited) continue;
      // Wait() joins the output reader, so every byte is in the log before the job ends.
      auto st = job->process->Wait(Deadline::AfterMs(2000));
      const ExitStatus es = st.ok() ? *st : *exited;
      std::vector<std::promise<bool>> waiters;
      std::vector<std::shared_ptr<Job>> dropped;  // destroyed outside `mu` (their readers take it)
      {
        MutexLock lock(mu);
        if (!job->partial_line.empty()) {
          AppendLogLocked(job.get(), job->partial_line + "\n");
          job->partial_line.clear();
        }
        JobInfo& info = job->info;
        info.ended_unix_ms = UnixMs();
        info.exit_code = es.exited ? es.code : 0;
        info.signal = es.exited ? 0 : es.signal;
        if (job->stop_requested) {
          info.state = JobState::kStopped;
          info.exit_reason = "stopped (" + es.ToString() + ")";
        } else if (es.success()) {
          info.state = JobState::kExited;
          info.exit_reason = es.ToString();
        } else {
          info.state = JobState::kFailed;
          const std::string& detail =
              !info.last_error_line.empty() ? info.last_error_line : job->last_line;
          info.exit_reason = es.ToString() + (detail.empty() ? "" : ": " + detail);
        }
        job->figures.state = std::string(JobStateName(info.state));
        waiters.swap(job->stop_waiters);
        finished_order.push_back(info.spec.job_id);
        while (finished_order.size() > options.max_finished_jobs) {
          auto it = jobs.find(finished_order.front());
          if (it != jobs.end() && it->second->info.state != JobState::kRunning) {
            dropped.push_back(it->second);
            jobs.erase(it);
          }
          finished_order.pop_front();
        }
      }
      OCTET_LOG(INFO) << "job " << job->info.spec.job_id << " " << JobStateName(job->info.state)
                      << ": " << job->info.exit_reason;
      for (auto& w : waiters) w.set_value(true);
      Notify(job->info.spec.job_id);
    }
  }

  void Submit(std::unique_ptr<Request> req) {
    {
      MutexLock lock(mu);
      requests.push_back(std::move(req));
    }
    cv.notify_all();
  }
};

JobSupervisor::JobSupervisor(JobSupervisorOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  Impl* impl = impl_.get();
  impl_->thread = std::thread([impl] { impl->Run(); });
}

JobSupervisor::~JobSupervisor() {
  auto req = std::make_unique<Impl::Request>();
  req->kind = Impl::Request::kQuit;
  {
    MutexLock lock(impl_->mu);
    impl_->requests.push_back(std::move(req));
  }
  impl_->cv.notify_all();
  impl_->thread.join();
  // Processes are gone; destroying them joins their output readers, which
  // take `mu`, so they are destroyed outside it.
  std::map<std::string, std::shared_ptr<Impl::Job>> jobs;
  {
    MutexLock lock(impl_->mu);
    jobs.swap(impl_->jobs);
  }
  jobs.clear();
}

Result<JobStarted> JobSupervisor::Start(const JobSpec& spec) {
  JobSpec launched;
  OCTET_RETURN_IF_ERROR(
      ValidateJobSpec(spec, impl_->options.model_roots, &launched, impl_->options.owner_flags));
  auto req = std::make_unique<Impl::Request>();
  req->kind = Impl::Request::kStart;
  req->spec = std::move(launched);
  auto fut = req->started.get_future();
  impl_->Submit(std::move(req));
  if (fut.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    return DeadlineExceededError("job '" + spec.job_id +
                                 "': the supervisor did not start it in 30 s");
  }
  return fut.get();
}

Result<bool> JobSupervisor::Stop(const std::string& job_id) {
  {
    MutexLock lock(impl_->mu);
    if (impl_->jobs.find(job_id) == impl_->jobs.end()) {
      return NotFoundError("no job '" + job_id + "' on this node");
    }
  }
  auto req = std::make_unique<Impl::Request>();
  req->kind = Impl::Request::kStop;
  req->job_id = job_id;
  auto fut = req->stopped.get_future();
  impl_->Submit(std::move(req));
  if (fut.wait_for(std::chrono::milliseconds(impl_->options.stop_grace_ms + 15'000)) !=
      std::future_status::ready) {
    return DeadlineExceededError("job '" + job_id + "' did not end after SIGKILL");
  }
  return fut.get();
}

void JobSupervisor::StopAll() {
  auto req = std::make_unique<Impl::Request>();
  req->kind = Impl::Request::kStopAll;
  auto fut = req->stopped.get_future();
  impl_->Submit(std::move(req));
  fut.wait_for(std::chrono::milliseconds(impl_->options.stop_grace_ms + 15'000));
}

std::vector<JobInfo> JobSupervisor::List() const {
  MutexLock lock(impl_->mu);
  std::vector<JobInfo> out;
  for (const auto& [id, j] : impl_->jobs) out.push_back(j->info);
  std::sort(out.begin(), out.end(), [](const JobInfo& a, const JobInfo& b) {
    return a.started_unix_ms < b.started_unix_ms;
  });
  return out;
}

Result<JobInfo> JobSupervisor::Get(const std::string& job_id) const {
  MutexLock lock(impl_->mu);
  auto it = impl_->jobs.find(job_id);
  if (it == impl_->jobs.end()) return NotFoundError("no job '" + job_id + "' on this node");
  return it->second->info;
}

std::vector<WorkerFigures> JobSupervisor::Figures() const {
  std::vector<WorkerFigures> out;
  std::vector<pid_t> pids;
  {
    MutexLock lock(impl_->mu);
    for (const auto& [id, j] : impl_->jobs) {
      if (j->info.state != JobState::kRunning) continue;
      out.push_back(j->figures);
      pids.push_back(j->info.pid);
    }
  }
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].memory_bytes = ReadProcessRssBytes(pids[i]).value_or(0);
  }
  return out;
}

Result<JobSupervisor::LogRead> JobSupervisor::ReadLogs(const std::string& job_id, uint64_t offset,
                                                       size_t max_bytes) const {
  MutexLock lock(impl_->mu);
  auto it = impl_->jobs.find(job_id);
  if (it == impl_->jobs.end()) return NotFoundError("no job '" + job_id + "' on this node");
  const Impl::Job& j = *it->second;
  const uint64_t end = j.log_base + j.log.size();
  const uint64_t from = std::clamp<uint64_t>(offset, j.log_base, end);
  const size_t n = static_cast<size_t>(std::min<uint64_t>(end - from, max_bytes));
  LogRead r;
  r.text = j.log.substr(static_cast<size_t>(from - j.log_base), n);
  r.next_offset = from + n;
  r.ended = j.info.state != JobState::kRunning && r.next_offset == end;
  return r;
}

uint64_t JobSupervisor::Subscribe(const std::string& job_id, std::function<void()> on_change) {
  MutexLock lock(impl_->sub_mu);
  const uint64_t id = impl_->next_sub++;
  impl_->subs[id] = {job_id, std::move(on_change)};
  return id;
}

void JobSupervisor::Unsubscribe(uint64_t subscription) {
  MutexLock n(impl_->notify_mu);
  MutexLock lock(impl_->sub_mu);
  impl_->subs.erase(subscription);
}

}  // namespace octet::agent
