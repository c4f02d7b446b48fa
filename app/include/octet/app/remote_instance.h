// A job run by the agents of a cluster: an inference instance, a router
// gateway or a data-parallel training run, each rank an `octet worker` (or,
// for the router, `octet route`) job on node nodes[r], started through that
// node's agent (ClusterSession::LaunchJob wires the rendezvous, rank 0
// first).
//
//  - Inference: tensor-parallel rank r of the model on nodes[r]. Rank 0
//    serves OpenAI HTTP at the address its agent is reached at (so this
//    machine can talk to it), on `port` or any free port; the URL is the one
//    rank 0 prints.
//  - Router: `octet route --policy FILE` on one node (nodes has one entry),
//    the policy file's path being the one on that node; it serves like rank 0
//    of an instance, and is ready once it prints its address.
//  - Training: data-parallel rank r of `octet train` on nodes[r] (world size
//    = nodes.size(), the collectives rendezvous hosted by rank 0's node).
//    model_dir is the run's folder on the nodes (inside their model roots,
//    existing): rank 0 writes the checkpoints and the final model there. The
//    data folder must hold prepared data (`octet train prepare`) at the same
//    path on every node. The run is kRunning from its first step and
//    kFinished when every rank exited well; rank 0's progress lines are
//    folded into figures (FoldTrainingLogLine) for the curves.
//
// While it runs, rank 0's output is followed through its agent (line by line,
// for the Launch panel's log), and every rank's job is watched through its
// agent: a rank that ends on its own (for training: one that fails) fails the
// job with that rank's node and the agent's words (exit reason, the last
// error line it printed), and the other ranks are stopped. Stop() stops every
// rank through the agents.
//
// What the workbench uses for a remote cluster; the embedded local cluster
// runs its jobs on this machine (LocalInstance). Qt-free.
//
// Threads: Launch() and Stop() block on agent calls (call them off a GUI
// thread). `on_line`, `on_status` and `on_figures` run on the instance's own
// threads, one call at a time, never after the destructor returns.
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
#include "octet/app/training_run.h"
#include "octet/base/deadline.h"
#include "octet/base/status.h"

namespace octet::app {

struct RemoteInstanceSpec {
  JobKind kind = JobKind::kInference;  // kInference | kRouter | kTraining
  std::string job_id;                  // unique on the nodes while their agents keep it
  // Inference: the model folder's path on the nodes (inside their model
  // roots). Training: the run's output folder on the nodes (likewise).
  std::string model_dir;
  // Rank r on nodes[r] (session indices): the TP degree (inference) or the
  // data-parallel ranks (training); one node for a router.
  std::vector<size_t> nodes;
  std::string transport = "tcp";  // tcp | verbs (shm only when every rank is on one host)
  std::string algo = "auto";      // auto | oneshot | ring | nccl
  uint32_t port = 0;              // rank 0's HTTP port on its node; 0: any free one
  int num_slots = 4;              // KV cache slots (--slots)
  int context = 0;                // 0: the model's (capped by the server)
  std::string quantize = "off";   // off | nvfp4 (--quantize: each rank quantizes its slice)
  std::string speculative = "off";  // off | ngram | mtp (--speculative; every rank is told)
  int draft_tokens = 0;             // --draft-tokens; 0: the method's default
  uint32_t threads = 0;           // compute threads per rank; 0: the worker decides
  int poll_interval_ms = 250;     // how often the ranks' jobs are checked
  // Router: the policy YAML's path on its node.
  std::string policy_file;
  // Training (`octet train` flags): prepared data at this path on every node,
  // a preset or a config.json path (on the nodes), the optimizer steps, and
  // sequence length / sequences per rank per micro-batch / validation every K
  // steps (0: octet train's defaults; no validation).
  std::string train_data_dir;
  std::string train_config = "tiny";
  int64_t train_steps = 100;
  int train_seq_len = 0;
  int train_batch_size = 0;
  int train_eval_every = 0;
};

struct RemoteInstanceStatus {
  // kReady: serving (inference, router). kRunning: training, from its first
  // step; kFinished: training whose every rank exited well.
  enum class Phase { kStarting, kReady, kRunning, kStopping, kStopped, kFinished, kFailed };
  Phase phase = Phase::kStarting;
  std::string url;    // "http://HOST:PORT" while ready
  std::string error;  // kFailed: "rank R on node NAME: <the agent's exit reason / error line>"
};
std::string_view RemotePhaseName(RemoteInstanceStatus::Phase phase);

class RemoteInstance {
 public:
  using LineFn = std::function<void(const std::string& line)>;
  using StatusFn = std::function<void(const RemoteInstanceStatus& status)>;
  using FiguresFn = std::function<void(const TrainingFigures& figures)>;

  // Starts every rank through the agents. An agent that refuses (a model path
  // outside its roots or missing, a busy job id, a node that is not up) is an
  // error naming the rank and node; ranks already started are stopped.
  // `on_figures` gets a training run's figures as rank 0 reports its steps.
  static Result<std::unique_ptr<RemoteInstance>> Launch(std::shared_ptr<ClusterSession> session,
                                                        const RemoteInstanceSpec& spec,
                                                        LineFn on_line, StatusFn on_status,
                                                        Deadline deadline,
                                                        FiguresFn on_figures = nullptr);
  // Stops following the job. The job itself keeps running unless Stop() was called.
  ~RemoteInstance();
  RemoteInstance(const RemoteInstance&) = delete;
  RemoteInstance& operator=(const RemoteInstance&) = delete;

  const RemoteInstanceSpec& spec() const { return spec_; }
  RemoteInstanceStatus status() const;
  // Stops every rank through the agents; the status becomes kStopped once
  // every rank has ended (a failed or finished one keeps its phase).
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
  FiguresFn on_figures_;
  std::vector<std::string> node_names_;  // per rank

  mutable std::mutex mu_;
  std::condition_variable cv_;
  RemoteInstanceStatus status_;  // guarded by mu_
  std::string partial_;          // guarded by mu_: a log line not yet ended
  TrainingFigures figures_;      // guarded by mu_: training, folded from rank 0's log
  bool stopping_ = false;        // guarded by mu_
  bool logs_ended_ = false;      // guarded by mu_: rank 0's output stream ended
  bool quit_ = false;            // guarded by mu_
  std::mutex callback_mu_;       // one callback at a time
  std::unique_ptr<AgentStream> logs_;
  std::thread watcher_;
};

}  // namespace octet::app
