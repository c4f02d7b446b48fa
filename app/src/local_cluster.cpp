#include "octet/app/local_cluster.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "octet/agent/cluster_token.h"
#include "octet/base/file_util.h"
#include "octet/base/log.h"
#include "octet/base/subprocess.h"

namespace octet::app {

std::string DefaultLocalStateDir(const std::string& name) {
  if (const char* x = std::getenv("XDG_STATE_HOME"); x && *x)
    return JoinPath(JoinPath(x, "octet"), name);
  if (const char* h = std::getenv("HOME"); h && *h) {
    return JoinPath(JoinPath(JoinPath(h, ".local/state"), "octet"), name);
  }
  return JoinPath(".octet-state", name);
}

namespace {

// Runs tasks on one thread that lives as long as the cluster. Agents are
// spawned here because PR_SET_PDEATHSIG kills a child when the thread that
// forked it exits, and a GUI may start the cluster from a short-lived worker.
class OwnerThread {
 public:
  OwnerThread() : thread_([this] { Loop(); }) {}
  ~OwnerThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  template <typename Fn>
  auto Run(Fn fn) -> decltype(fn()) {
    using R = decltype(fn());
    std::packaged_task<R()> task(std::move(fn));
    auto fut = task.get_future();
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back([&task] { task(); });
    }
    cv_.notify_all();
    return fut.get();
  }

 private:
  void Loop() {
    for (;;) {
      std::function<void()> t;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return quit_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        t = std::move(tasks_.front());
        tasks_.pop_front();
      }
      t();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;  // guarded by mu_
  bool quit_ = false;                        // guarded by mu_
  std::thread thread_;
};

}  // namespace

struct LocalCluster::Impl {
  LocalClusterOptions options;
  std::unique_ptr<OwnerThread> owner = std::make_unique<OwnerThread>();
  ClusterProfile profile;
  struct Node {
    std::string dir;
    std::string address;  // "127.0.0.1:PORT" once known
    std::unique_ptr<Subprocess> process;
  };
  std::vector<Node> nodes;

  Status StartAgent(size_t i, const std::string& listen, Deadline deadline) {
    Node& n = nodes[i];
    const std::string port_file = JoinPath(n.dir, "address");
    ::unlink(port_file.c_str());
    SpawnOptions so;
    so.argv = {options.agent_binary,
               "--listen",
               listen,
               "--token-file",
               profile.token_file(),
               "--state-dir",
               n.dir,
               "--memory-budget",
               std::to_string(options.memory_per_node_bytes),
               "--cabling",
               options.cabling,
               "--no-discovery",
               "--stop-grace-ms",
               std::to_string(options.stop_grace_ms),
               "--port-file",
               port_file};
    if (!options.octet_binary.empty()) {
      so.argv.insert(so.argv.end(), {"--octet-bin", options.octet_binary});
    }
    if (!options.octet_binary_flags.empty()) {
      std::string flags;
      for (const auto& f : options.octet_binary_flags) flags += (flags.empty() ? "" : ",") + f;
      so.argv.insert(so.argv.end(), {"--octet-bin-flags", flags});
    }
    // Each simulated node has a model store of its own (`octet pull --cluster`
    // copies onto every node), in its state folder; the agent adds it to its roots.
    so.argv.insert(so.argv.end(), {"--models-dir", JoinPath(n.dir, "hub")});
    if (!options.model_roots.empty()) {
      std::string roots;
      for (const auto& r : options.model_roots) roots += (roots.empty() ? "" : ",") + r;
      so.argv.insert(so.argv.end(), {"--model-roots", roots});
    }
    so.output_file = JoinPath(n.dir, "agent.log");
    so.die_with_parent = true;
    auto spawned = owner->Run([&so] { return Subprocess::Spawn(so); });
    if (!spawned.ok()) return spawned.status();
    n.process = std::move(*spawned);
    while (!deadline.expired()) {
      if (auto text = ReadFileToString(port_file); text.ok() && !text->empty()) {
        std::string a = *text;
        while (!a.empty() && (a.back() == '\n' || a.back() == ' ')) a.pop_back();
        n.address = a;
        return Status::Ok();
      }
      if (auto e = n.process->Poll()) {
        auto log = ReadFileToString(so.output_file);
        std::string last = log.ok() ? *log : "";
        while (!last.empty() && last.back() == '\n') last.pop_back();
        last = last.substr(last.rfind('\n') == std::string::npos ? 0 : last.rfind('\n') + 1);
        n.process.reset();
        return UnavailableError("local node " + std::to_string(i) + ": octet-agent " +
                                e->ToString() + (last.empty() ? "" : ": " + last));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return DeadlineExceededError("local node " + std::to_string(i) +
                                 ": agent not listening in time");
  }
};

Result<std::unique_ptr<LocalCluster>> LocalCluster::Start(LocalClusterOptions o,
                                                          Deadline deadline) {
  if (o.nodes < 1 || o.nodes > 8) return InvalidArgumentError("a local cluster has 1 to 8 nodes");
  if (o.cabling != "ring" && o.cabling != "switch") {
    return InvalidArgumentError("cabling '" + o.cabling + "' must be ring or switch");
  }
  if (o.memory_per_node_bytes == 0) return InvalidArgumentError("memory per node must be positive");
  OCTET_RETURN_IF_ERROR(ValidateNodeName(o.name).WithContext("local cluster"));
  if (o.state_dir.empty()) o.state_dir = DefaultLocalStateDir(o.name);
  if (o.agent_binary.empty()) {
    OCTET_ASSIGN_OR_RETURN(std::string self, SelfExecutablePath());
    o.agent_binary = JoinPath(DirName(self), "octet-agent");
  }
  if (o.model_roots.empty()) {
    if (const char* h = std::getenv("HOME"); h && *h) o.model_roots.push_back(h);
  }
  for (const std::string& r : o.extra_model_roots) {
    if (!r.empty() &&
        std::find(o.model_roots.begin(), o.model_roots.end(), r) == o.model_roots.end())
      o.model_roots.push_back(r);
  }
  if (::access(o.agent_binary.c_str(), X_OK) != 0) {
    return NotFoundError("octet-agent not found at " + o.agent_binary);
  }

  std::unique_ptr<LocalCluster> c(new LocalCluster);
  c->impl_ = std::make_unique<Impl>();
  Impl* im = c->impl_.get();
  im->options = o;
  ClusterProfile& p = im->profile;
  p.name = o.name;
  p.dir = o.state_dir;
  p.local = true;
  p.expected_cabling = o.cabling;
  OCTET_RETURN_IF_ERROR(MakeDirs(p.dir, 0700));
  // The token is kept across runs (the workbench may reconnect to agents it left).
  if (!agent::ReadTokenFile(p.token_file()).ok()) {
    OCTET_ASSIGN_OR_RETURN(std::string token, agent::GenerateClusterToken());
    OCTET_RETURN_IF_ERROR(agent::WriteTokenFile(p.token_file(), token));
  }
  im->nodes.resize(static_cast<size_t>(o.nodes));
  for (int i = 0; i < o.nodes; ++i) {
    im->nodes[static_cast<size_t>(i)].dir = JoinPath(p.dir, "node-" + std::to_string(i));
    OCTET_RETURN_IF_ERROR(MakeDirs(im->nodes[static_cast<size_t>(i)].dir, 0700));
  }
  for (size_t i = 0; i < im->nodes.size(); ++i) {
    OCTET_RETURN_IF_ERROR(im->StartAgent(i, "127.0.0.1:0", deadline));
    p.nodes.push_back({o.name + "-" + std::to_string(i), im->nodes[i].address});
  }
  return c;
}

LocalCluster::~LocalCluster() {
  if (!impl_) return;
  for (auto& n : impl_->nodes) {
    if (n.process) n.process->Kill(SIGTERM);
  }
  for (auto& n : impl_->nodes) {
    if (n.process)
      n.process->Terminate(std::chrono::milliseconds(impl_->options.stop_grace_ms + 2000));
    n.process.reset();
  }
}

const ClusterProfile& LocalCluster::profile() const { return impl_->profile; }
size_t LocalCluster::size() const { return impl_->nodes.size(); }
std::string LocalCluster::address(size_t node) const { return impl_->nodes.at(node).address; }
const std::string& LocalCluster::state_dir() const { return impl_->profile.dir; }

bool LocalCluster::running(size_t node) const {
  auto& n = impl_->nodes.at(node);
  return n.process && !n.process->Poll();
}

int LocalCluster::pid(size_t node) const {
  auto& n = impl_->nodes.at(node);
  return n.process ? n.process->pid() : 0;
}

Status LocalCluster::KillNode(size_t node) {
  if (node >= impl_->nodes.size()) return OutOfRangeError("no local node " + std::to_string(node));
  auto& n = impl_->nodes[node];
  if (!n.process)
    return FailedPreconditionError("local node " + std::to_string(node) + " is not running");
  n.process->Kill(SIGKILL);
  n.process->Wait(Deadline::AfterMs(10'000)).status().IgnoreError();
  n.process.reset();
  return Status::Ok();
}

Status LocalCluster::StopNode(size_t node) {
  if (node >= impl_->nodes.size()) return OutOfRangeError("no local node " + std::to_string(node));
  auto& n = impl_->nodes[node];
  if (!n.process) return Status::Ok();
  n.process->Terminate(std::chrono::milliseconds(impl_->options.stop_grace_ms + 2000));
  n.process.reset();
  return Status::Ok();
}

Status LocalCluster::RestartNode(size_t node, Deadline deadline) {
  if (node >= impl_->nodes.size()) return OutOfRangeError("no local node " + std::to_string(node));
  auto& n = impl_->nodes[node];
  if (n.process && !n.process->Poll()) {
    return FailedPreconditionError("local node " + std::to_string(node) + " is still running");
  }
  n.process.reset();
  // The port may linger in TIME_WAIT briefly; gRPC sets SO_REUSEADDR, so a few tries suffice.
  Status last;
  while (!deadline.expired()) {
    last = impl_->StartAgent(node, n.address, deadline);
    if (last.ok()) return last;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return last.ok() ? DeadlineExceededError("restart timed out") : last;
}

}  // namespace octet::app
