// A live session with a cluster: one AgentClient per node, kept connected, with
// node facts, the latest telemetry, links, jobs, the models each node holds and
// the cabling classification gathered in one snapshot. This is what the workbench (and `octet
// cluster status`) reads.
//
// For a GUI: nothing here blocks the caller except WaitUntil and the job/probe
// calls (run those on a worker thread). The session runs one thread per node:
// it fetches facts, links and jobs, keeps a telemetry stream open and notices
// the node going away. A Qt model can either
//   - poll: Snapshot() returns a consistent copy; version() is a cheap counter
//     that changes whenever anything in the snapshot does, or
//   - listen: SetListener() gets events (node up / lost / recovered, cabling
//     changed, jobs changed) on a session thread, one at a time, never while
//     the session's lock is held; forward them with a queued signal.
//
// Node lost / recovered: a node is lost when its telemetry stream fails (the
// agent died or refused) or stays silent for `lost_after_ms` (hung node,
// pulled cable); the session then retries every `retry_interval_ms` and
// reports it recovered when the agent answers again (same or restarted).
//
// Thread-safe. Destroying the session cancels streams and joins its threads.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "octet/app/agent_client.h"
#include "octet/app/cabling.h"
#include "octet/app/cluster_profile.h"
#include "octet/app/cluster_types.h"
#include "octet/base/deadline.h"
#include "octet/base/status.h"

namespace octet::app {

enum class NodeState { kConnecting, kUp, kLost };
std::string_view NodeStateName(NodeState state);  // "connecting", "up", "lost"

struct NodeView {
  std::string name;
  std::string address;
  NodeState state = NodeState::kConnecting;
  std::string last_error;  // why it is lost (or the last failed call)
  int64_t state_since_unix_ms = 0;
  uint32_t times_lost = 0;
  bool has_facts = false;
  NodeFacts facts;
  bool has_telemetry = false;
  TelemetrySample telemetry;  // the latest sample
  bool has_links = false;
  LinksReport links;
  std::vector<JobStatus> jobs;
  // The models in the node's store (its agent's ModelService), refreshed with
  // the links and jobs; has_models is false until the first answer.
  bool has_models = false;
  NodeModels models;
};

struct ClusterSnapshot {
  uint64_t version = 0;
  std::string cluster_name;
  std::vector<NodeView> nodes;  // profile order
  CablingReport cabling;        // recomputed whenever links or node states change
};

struct ClusterEvent {
  enum class Kind { kNodeUp, kNodeLost, kNodeRecovered, kCablingChanged, kJobsChanged };
  Kind kind = Kind::kNodeUp;
  int node = -1;  // index into the snapshot's nodes; -1 for cluster-wide events
  std::string node_name;
  std::string detail;  // the reason a node was lost; the new cabling summary
};

struct ClusterSessionOptions {
  uint32_t telemetry_interval_ms = 500;
  int lost_after_ms = 3000;        // a silent telemetry stream for this long: lost
  int retry_interval_ms = 500;     // reconnect attempts of a lost node
  int refresh_interval_ms = 2000;  // links and jobs of nodes that are up
  int facts_interval_ms = 10000;   // facts (interfaces come and go; GPU free memory)
  int call_timeout_ms = 5000;
  std::string expected_cabling;  // "" : the profile's
};

// A job across nodes: rank r runs on nodes[r]; the session wires the
// rendezvous (rank 0's node hosts it) and starts the ranks in order.
struct JobRequest {
  std::string job_id;
  JobKind kind = JobKind::kInference;
  std::string model;              // folder path on the nodes
  std::vector<size_t> nodes;      // node indices, one per rank
  std::string transport = "tcp";  // shm only when every rank shares one host
  std::string algorithm = "auto";
  uint32_t port = 0;   // serving port of rank 0 (or the router)
  std::string policy;  // router
  uint32_t threads = 0;
  std::vector<std::string> extra_args;
  std::string rendezvous_host;  // "" : the host rank 0's agent is reached at
  // `octet deploy`: recorded in every rank's job (JobSpec::deployment/instance).
  std::string deployment;
  std::string instance;
};

struct JobLaunch {
  std::string job_id;
  std::string rendezvous;  // HOST:PORT every rank was given
  std::vector<JobStartResult> ranks;
};

struct LinkProbeReport {
  CablingEdge edge;  // probed from edge.a_node to edge.b_node
  bool ok = false;
  std::string error;
  LinkProbeResult result;
};

class ClusterSession {
 public:
  struct Member {
    std::string name;
    AgentEndpoint endpoint;
  };
  static Result<std::unique_ptr<ClusterSession>> Open(const ClusterProfile& profile,
                                                      ClusterSessionOptions options = {});
  static Result<std::unique_ptr<ClusterSession>> Open(std::string cluster_name,
                                                      std::vector<Member> members,
                                                      ClusterSessionOptions options = {});
  ~ClusterSession();
  ClusterSession(const ClusterSession&) = delete;
  ClusterSession& operator=(const ClusterSession&) = delete;

  ClusterSnapshot Snapshot() const;
  uint64_t version() const;
  // Blocks until `pred` holds for the snapshot (checked at every change) or the deadline.
  bool WaitUntil(const std::function<bool(const ClusterSnapshot&)>& pred, Deadline deadline) const;
  // Replaces the listener (an empty function removes it).
  void SetListener(std::function<void(const ClusterEvent&)> listener);
  // Asks every node thread to refresh facts, links and jobs now.
  void RefreshNow();

  size_t size() const;
  AgentClient& client(size_t node);

  // Starts every rank (rank 0 first, for its rendezvous port); if one fails,
  // the ranks already started are stopped and the error names node and rank.
  Result<JobLaunch> LaunchJob(const JobRequest& request, Deadline deadline);
  // Stops the job on every node that is up (NotFound on a node is fine).
  Status StopJob(const std::string& job_id, Deadline deadline);
  // Probes every edge of the current cabling, one at a time (from a to b).
  std::vector<LinkProbeReport> ProbeLinks(uint64_t bytes, uint32_t round_trips, Deadline deadline);

 private:
  ClusterSession() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One-shot: asks every member once (in parallel) for facts, links and jobs and
// returns the snapshot a session would show, with states kUp or kLost. For
// command-line tools; a GUI keeps a ClusterSession instead.
ClusterSnapshot QueryCluster(const std::string& cluster_name,
                             const std::vector<ClusterSession::Member>& members,
                             const std::string& expected_cabling, Deadline deadline);

}  // namespace octet::app
