// An inference instance run by the agents of a cluster: tensor-parallel rank
// r of the model runs as an `octet worker` job on node nodes[r], started
// through that node's agent (ClusterSession::LaunchJob wires the rendezvous,
// rank 0 first). Rank 0 serves OpenAI HTTP at the address its agent is
// reached at (so this machine can talk to it), on `port` or any free port;
// the URL is the one rank 0 prints.
//
// While it runs, rank 0's output is followed through its agent (line by line,
// for the Launch panel's log), the instance is ready once rank 0 prints the
// address it serves on, and every rank's job is watched through its agent:
// a rank that ends on its own fails the instance with that rank's node and
// the agent's words (exit reason, the last error line it printed), and the
// other ranks are stopped. Stop() stops every rank through the agents.
//
// What the workbench uses for a remote cluster; the embedded local cluster
// runs its instances on this machine (LocalInstance). Qt-free.
//
// Threads: Launch() and Stop() block on agent calls (call them off a GUI
// thread). `on_line` and `on_status` run on the instance's own threads, one
// call at a time, never after the destructor returns.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "octet/app/cluster_session.h"
#include "octet/base/deadline.h"
#include "octet/base/status.h"

namespace octet::app {

struct RemoteInstanceSpec {
  std::string job_id;         // unique on the nodes while their agents keep it
  std::string model_dir;      // the model folder's path on the nodes (inside their model roots)
  std::vector<size_t> nodes;  // rank r on nodes[r] (session indices); the TP degree is the count
  std::string transport = "tcp";  // tcp | verbs (shm only when every rank is on one host)
  std::string algo = "auto";      // auto | oneshot | ring | nccl
  uint32_t port = 0;              // rank 0's HTTP port on its node; 0: any free one
  int num_slots = 4;              // KV cache slots (--slots)
  int context = 0;                // 0: the model's (capped by the server)
  uint32_t threads = 0;           // compute threads per rank; 0: the worker decides
  int poll_interval_ms = 250;     // how often the ranks' jobs are checked
};

struct RemoteInstanceStatus {
  enum class Phase { kStarting, kReady, kStopping, kStopped, kFailed };
  Phase phase = Phase::kStarting;
  std::string url;    // "http://HOST:PORT" while ready
  std::string error;  // kFailed: "rank R on node NAME: <the agent's exit reason / error line>"
};
std::string_view RemotePhaseName(RemoteInstanceStatus::Phase phase);

class RemoteInstance {
 public:
  using LineFn = std::function<void(const std::string& line)>;
  using StatusFn = std::function<void(const RemoteInstanceStatus& status)>;

  // Starts every rank through the agents. An agent that refuses (a model path
  // outside its roots or missing, a busy job id, a node that is not up) is an
  // error naming the rank and node; ranks already started are stopped.
  static Result<std::unique_ptr<RemoteInstance>> Launch(std::shared_ptr<ClusterSession> session,
                                                        const RemoteInstanceSpec& spec,
                                                        LineFn on_line, StatusFn on_status,
                                                        Deadline deadline);
  // Stops following the job. The job itself keeps running unless Stop() was called.
  ~RemoteInstance();
  RemoteInstance(const RemoteInstance&) = delete;
  RemoteInstance& operator=(const RemoteInstance&) = delete;

  const RemoteInstanceSpec& spec() const { return spec_; }
  RemoteInstanceStatus status() const;
  // Stops every rank through the agents; the status becomes kStopped once
  // every rank has ended (a failed instance keeps kFailed).
  Status Stop(Deadline deadline);

 private:
  RemoteInstance() = default;
  void OnLogText(const std::string& text);
  void WatchLoop();
  // Applies `change` to the status under mu_ (it returns false to leave it),
  // then calls on_status when the status changed (outside mu_).
  void Update(const std::function<bool(RemoteInstanceStatus*)>& change);

  std::shared_ptr<ClusterSession> session_;
  RemoteInstanceSpec spec_;
  LineFn on_line_;
  StatusFn on_status_;
  std::vector<std::string> node_names_;  // per rank

  mutable std::mutex mu_;
  std::condition_variable cv_;
  RemoteInstanceStatus status_;  // guarded by mu_
  std::string partial_;          // guarded by mu_: a log line not yet ended
  bool stopping_ = false;        // guarded by mu_
  bool quit_ = false;            // guarded by mu_
  std::mutex callback_mu_;       // one callback at a time
  std::unique_ptr<AgentStream> logs_;
  std::thread watcher_;
};

}  // namespace octet::app
