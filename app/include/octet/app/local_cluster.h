// The local embedded cluster: N octet-agent processes on 127.0.0.1, each a
// simulated node with its own port, node id (its own state folder) and memory
// budget, and a declared cabling (ring or switch), since loopback has no
// cables. Jobs launched on it really run, as processes on this machine (ranks
// talk over shm or TCP). It is what the workbench opens when no real cluster
// is configured, and `octet cluster local` runs it from the command line.
//
// Agents are child processes that die with their parent. KillNode (SIGKILL)
// and RestartNode (same port, same node id) let tests and the workbench show
// what a lost and recovered node looks like.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "octet/app/cluster_profile.h"
#include "octet/base/deadline.h"
#include "octet/base/status.h"

namespace octet::app {

struct LocalClusterOptions {
  int nodes = 4;  // 1..8
  uint64_t memory_per_node_bytes = 32ull << 30;
  std::string cabling = "ring";  // "ring" or "switch"
  std::string name = "local";
  // Where node ids, the token and agent logs live ("" : $XDG_STATE_HOME/octet/<name>,
  // else ~/.local/state/octet/<name>). Reusing it keeps the node ids.
  std::string state_dir;
  std::string agent_binary;              // "" : octet-agent beside this executable
  std::string octet_binary;              // what agents run for jobs ("" : beside the agent)
  std::vector<std::string>
      octet_binary_flags;                // that program's own flags (agent --octet-bin-flags)
  std::vector<std::string> model_roots;  // the folders jobs may load from (none: $HOME)
  // Added to model_roots whatever it holds, $HOME included: read-only models
  // that ship with the program (the workbench's bundled demo model).
  std::vector<std::string> extra_model_roots;
  // Each node's model store (`octet pull --cluster`) is its own: <state_dir>/node-I/hub.
  int stop_grace_ms = 3000;
};

class LocalCluster {
 public:
  // Starts every agent and waits (by `deadline`) until each is listening.
  static Result<std::unique_ptr<LocalCluster>> Start(LocalClusterOptions options,
                                                     Deadline deadline);
  ~LocalCluster();  // stops every agent (SIGTERM, then SIGKILL after a grace)
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  // A profile for sessions: nodes "<name>-0".. at their addresses, the token
  // file in the state folder, expected cabling as declared. Not saved.
  const ClusterProfile& profile() const;
  size_t size() const;
  std::string address(size_t node) const;
  const std::string& state_dir() const;
  bool running(size_t node) const;
  int pid(size_t node) const;

  Status KillNode(size_t node);                        // SIGKILL, like a crash
  Status StopNode(size_t node);                        // SIGTERM and wait
  Status RestartNode(size_t node, Deadline deadline);  // same port and node id

 private:
  LocalCluster() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Default state folder for a local cluster named `name`.
std::string DefaultLocalStateDir(const std::string& name);

}  // namespace octet::app
