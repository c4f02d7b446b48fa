// The job supervisor: runs the processes of jobs on this node and watches them.
//
// A job rank is one `octet worker` process (inference instance rank, training
// rank) or one `octet route` process (router), started with the collectives
// rendezvous wired in:
//
//   octet worker --job inference|training --model DIR --world-size N --rank R
//                --rendezvous HOST:PORT --transport shm|tcp|verbs
//                --algo auto|oneshot|ring|nccl [--port P] [--threads T] [extra...]
//   octet route --policy FILE [--port P] [extra...]
//
// Rank 0's node hosts the rendezvous: a rank-0 spec may say "HOST:0" and the
// supervisor substitutes a free TCP port (returned to the caller for the other
// ranks). A model folder, a router's policy and every path among the extra
// arguments must resolve (symlinks followed) to a path inside one of the
// configured model roots, or the job is refused; the process is started with
// the resolved paths. Extra arguments are checked against an allow-list per
// job kind (job_arguments.h).
//
// Output (stdout and stderr merged) is kept per job (the last `log_capacity`
// bytes) for StreamLogs. A line "@octet-figures {json}" is not log text: it
// carries the worker's live figures (keys as in WorkerFigures below) for
// telemetry. When a process ends the job records the exit code or signal and
// the last output line that looks like an error. Destroying the supervisor
// stops every job (SIGTERM to the process group, then SIGKILL after the grace
// period); if the agent dies instead, the kernel kills them (PR_SET_PDEATHSIG
// tied to the supervisor's own long-lived thread).
//
// Thread-safe. Every process operation runs on the supervisor's thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "octet/base/status.h"
#include "octet/wire/job.h"

namespace octet::agent {

// The job and figures values are the wire's (octet/wire/job.h): the agent
// and its clients share one definition.
using wire::JobKind;
using wire::JobKindName;
using wire::JobSpec;
using wire::WorkerFigures;

enum class JobState { kRunning, kExited, kFailed, kStopped };
std::string_view JobStateName(JobState state);  // "running", "exited", "failed", "stopped"

struct JobInfo {
  JobSpec spec;
  JobState state = JobState::kRunning;
  pid_t pid = 0;
  std::vector<std::string> argv;
  int exit_code = 0;        // valid when the process exited
  int signal = 0;           // the signal that ended it, 0 when it exited
  std::string exit_reason;  // "exit code 3: error: peer rank 2 unreachable", "stopped", ...
  std::string last_error_line;
  int64_t started_unix_ms = 0;
  int64_t ended_unix_ms = 0;
};

struct JobStarted {
  std::string job_id;
  pid_t pid = 0;
  std::string rendezvous;  // as given to the worker (port resolved)
  std::vector<std::string> argv;
};

struct JobSupervisorOptions {
  std::string octet_binary;  // the program run as "<bin> worker ..." / "<bin> route ..."
  std::vector<std::string> model_roots;  // folders models, policies and data may come from
  // Flags (names without "--") of a node owner's own `octet_binary` that jobs
  // may pass besides the allow-list of job_arguments.h; empty for `octet`.
  std::vector<std::string> owner_flags;
  size_t log_capacity_bytes = 4u << 20;  // output kept per job
  int stop_grace_ms = 5000;              // SIGTERM -> SIGKILL
  size_t max_finished_jobs = 64;         // ended jobs kept for List and logs
  std::vector<std::string> env;          // added to every job's environment
  // Added to the environment of jobs whose algorithm is "nccl" (roce.h:
  // NCCL_IB_HCA, NCCL_IB_GID_INDEX, NCCL_SOCKET_IFNAME), unless the agent's own
  // environment already sets that variable (an operator's choice wins).
  std::vector<std::string> nccl_env;
  // When set, asked at each launch of such a job instead of `nccl_env` (the
  // agent derives them from the RoCE facts of that moment).
  std::function<std::vector<std::string>()> nccl_env_source;
  // When set (the agent sets the cluster token), a router job gets
  // OCTET_ROUTER_ADMIN_TOKEN=RouterAdminToken(key, job id) in its environment
  // (cluster_token.h): the token `octet deploy` sends to tell it endpoints.
  std::string router_admin_key;
};

// Checks a spec without running anything. `model_roots` and `owner_flags` as in
// the options. On success `launched` (when given) gets the spec as it is to be
// run: the model folder and the policy file as their resolved real paths, the
// extra arguments as CheckExtraArgs (job_arguments.h) returns them. Model
// folders, policies and path arguments must lie inside the roots.
Status ValidateJobSpec(const JobSpec& spec, const std::vector<std::string>& model_roots,
                       JobSpec* launched = nullptr,
                       const std::vector<std::string>& owner_flags = {});
// OK when `model` resolves inside one of `roots`; `resolved` gets the real path.
Status CheckModelPath(const std::string& model, const std::vector<std::string>& roots,
                      std::string* resolved);
// The command line for a job (after validation), with `octet_binary` as argv[0].
std::vector<std::string> JobCommandLine(const JobSpec& spec, const std::string& octet_binary);
// Whether an output line looks like an error report ("error", "fatal", "failed", ...).
bool LooksLikeError(std::string_view line);

class JobSupervisor {
 public:
  explicit JobSupervisor(JobSupervisorOptions options);
  ~JobSupervisor();
  JobSupervisor(const JobSupervisor&) = delete;
  JobSupervisor& operator=(const JobSupervisor&) = delete;

  // Validates, resolves the rendezvous port for rank 0, and starts the process.
  // AlreadyExists when a job with this id is running; PermissionDenied for a
  // model outside the roots; InvalidArgument for a bad spec.
  Result<JobStarted> Start(const JobSpec& spec);
  // Stops a running job and waits until it has ended (grace period, then
  // SIGKILL). Returns true when it was running, false when it had already ended.
  Result<bool> Stop(const std::string& job_id);
  // Stops every running job (what shutdown does).
  void StopAll();

  std::vector<JobInfo> List() const;
  Result<JobInfo> Get(const std::string& job_id) const;
  // Live figures of the running jobs (memory read now).
  std::vector<WorkerFigures> Figures() const;

  struct LogRead {
    std::string text;
    uint64_t next_offset = 0;  // pass back to continue
    bool ended = false;        // the job has ended and everything up to next_offset was read
  };
  // Output from byte `offset` of the job's output (or from the oldest byte
  // still kept, when older ones were dropped), at most `max_bytes`.
  Result<LogRead> ReadLogs(const std::string& job_id, uint64_t offset, size_t max_bytes) const;
  // `on_change` is called (on a supervisor thread, without locks held) when
  // the job has new output or has ended. Returns an id for Unsubscribe, which
  // returns only once no call to `on_change` is running.
  uint64_t Subscribe(const std::string& job_id, std::function<void()> on_change);
  void Unsubscribe(uint64_t subscription);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace octet::agent
