// Deployments (`octet deploy`): a cluster split into instances on chosen
// nodes — N replicas of a model at TP k each, every replica on nodes of its
// own — with an optional request router in front whose policy pools may say
// `instance: NAME`. resources/deploy/example-deployment.yaml documents the file.
//
//  - ParseDeployment (deployment_file.h): the YAML file, validated like a
//    routing policy: every error as FILE:LINE:COL, unknown keys with the
//    nearest known one suggested, the router's YAML guard against alias
//    bombs first.
//  - PlaceDeployment: which nodes run which replica. Each replica's ranks on
//    distinct nodes, replicas on disjoint nodes, each node's memory counted as
//    `octet plan` counts it (engine::PlanMemory: weights + KV + workspace +
//    reserve + headroom); on a ring each TP group on adjacent nodes, and a
//    split that needs links a ring does not have is refused with why.
//  - ApplyDeployment / ReadDeployments / DownDeployment: the replicas (and
//    the router) as agent jobs that carry their deployment and replica name
//    (JobSpec::deployment / instance), so the agents are the source of truth:
//    status read back by any later process, apply of a changed file changes
//    only the replicas whose spec changed.
//
// Qt-free; the CLI (app/cli/cmd_deploy.cpp) and the workbench use the same code.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "octet/app/cluster_session.h"
#include "octet/app/deployment_file.h"
#include "octet/base/deadline.h"
#include "octet/base/status.h"

namespace octet::app {

// A model folder (or policy file) as a file names it and as an agent reports
// it (the resolved real path): the same when equal as written, once
// normalised ("a/../b", a trailing '/'), or when this machine resolves the
// named path to the reported one (a local cluster, the same mount everywhere).
bool SameModelFolder(const std::string& reported, const std::string& named);

// ---- placement ----------------------------------------------------------------------

struct PlacementNode {
  std::string name;
  int64_t memory_bytes = 0;  // the node's memory (a local node's budget)
  bool up = true;
  std::string down_reason;  // why it is not up (said with "node X is not up")
};

// A model's memory on each rank of a TP group, as the planner counts it.
struct ReplicaMemory {
  std::vector<int64_t> per_rank_bytes;  // weights + KV + workspace + reserve + headroom
  std::string note;                     // where the numbers come from
};
using MemoryEstimator = std::function<Result<ReplicaMemory>(const DeployInstanceSpec& instance,
                                                            int64_t node_memory_bytes)>;

struct PlacementInput {
  std::vector<PlacementNode> nodes;  // the cluster, profile order
  // "ring", "switch", "direct-pair", "single", or anything else (unknown: warned).
  std::string cabling;
  std::vector<std::string> ring_order;  // names around the ring (cabling == "ring")
  MemoryEstimator memory;               // null: memory not checked (a warning)
  // Replicas already running and kept (apply of a changed file): their nodes
  // are taken first, by replica name.
  std::map<std::string, std::vector<std::string>> fixed;
};

struct ReplicaPlacement {
  std::string instance;
  std::string replica;  // "large-0"
  int index = 0;
  std::vector<std::string> nodes;     // rank r on nodes[r]
  std::vector<int64_t> memory_bytes;  // per rank, as planned (0: unknown)
  std::vector<int64_t> node_memory;   // per rank: the node's memory
};

struct Placement {
  std::vector<ReplicaPlacement> replicas;  // instance by instance, replica by replica
  std::string router_node;                 // "" without a router
  std::vector<std::string> warnings;
  std::vector<std::string> errors;  // empty: placed
  std::string memory_note;
  bool ok() const { return errors.empty(); }
};

Placement PlaceDeployment(const Deployment& deployment, const PlacementInput& input);

// The planner's memory for an instance's model folder (read on this machine;
// when it is not there, the catalog entry of its folder name, from
// `catalog_dir`), at the instance's context, slots and KV type.
MemoryEstimator PlannerMemoryEstimator(std::string catalog_dir);

// The placement input of a live cluster: node memory from the agents' facts,
// cabling from the session's analysis.
PlacementInput PlacementInputFrom(const ClusterSnapshot& snapshot);

// ---- capacity ----------------------------------------------------------------------

// What `octet route plan` predicts for a deployment: the largest-TP instance
// is the large pool, the others together the small one (the requests not sent
// to the large pool spread over them in proportion to their capacity),
// against the whole cluster serving the large model alone.
struct InstanceRate {
  std::string instance;
  int replicas = 0, tp = 1;
  double requests_per_s = 0;  // per replica; 0: unknown
  std::string source;         // where it came from, in words
  int64_t bench_run = 0;      // the stored `octet bench` run it came from (0: none)
};

struct DeploymentCapacity {
  bool available = false;
  std::string reason;               // why not, when not available
  std::vector<InstanceRate> rates;  // one per instance, file order
  std::string large;                // the large pool's instance
  std::string text;                 // the `octet route plan` table and the rates
  std::string json;                 // the plan as JSON (route plan's fields, "rates", "available")
};

// Per-replica rates: from the newest complete run in `bench_store_path` ("" :
// none) of the instance's model (its folder, or a served name that is the
// folder's name) at its TP degree, as concurrency / (e2e TTFT + response
// tokens / per-request decode rate) of its highest-concurrency test; else
// the router policy's capacity.requests_per_s of the pool that names the
// instance. `cluster_nodes` 0: the nodes the deployment uses.
DeploymentCapacity PlanDeploymentCapacity(const Deployment& deployment, int cluster_nodes,
                                          const std::string& bench_store_path,
                                          const std::vector<double>& fractions = {0.25, 0.5});

// ---- running it -------------------------------------------------------------------

struct DeployedReplica {
  std::string deployment;
  std::string replica;   // "large-0", or "router"
  std::string instance;  // "large" ("" for the router)
  std::string job_id;
  std::string model;
  int tp = 0;
  std::vector<std::string> nodes;  // rank order
  std::string state;               // "ready", "starting", "failed", "stopped"
  std::string url;                 // rank 0's (the router's) http://HOST:PORT
  std::string error;
  std::vector<std::string> extra_args;  // as started (what apply compares)
  int threads = 0;                      // as started (0: the worker's default)
  std::string transport, algorithm;
  bool router = false;
};

struct DeploymentStatus {
  std::string name;
  std::vector<DeployedReplica> instances;  // sorted by replica name
  bool has_router = false;
  DeployedReplica router;
};

// What the agents run, grouped by deployment (every node asked; a node that
// does not answer leaves its ranks out, and a replica missing ranks reads
// failed). Job URLs come from rank 0's output; "ready" is a replica whose
// every rank runs and whose /health answers 200.
std::vector<DeploymentStatus> ReadDeployments(ClusterSession& session, Deadline deadline);
// The same, with the nodes that did not answer (their jobs are missing above).
struct NodeSilence {
  std::string node;
  bool up = false;    // the session has it up (a slow answer, not a lost node)
  std::string error;  // the failed call's
};
std::vector<DeploymentStatus> ReadDeployments(ClusterSession& session, Deadline deadline,
                                              std::vector<NodeSilence>* silent);

// What keeps `deployment` from running as its file asks, for `deploy watch`
// and the workbench's watch: each replica it asks for that is missing, failed
// or stopped ("large-1 failed (exit 137)"), and a router that is not running;
// "" when all are ready or starting. Judge only a read in which every up node
// answered (ReadDeployments' `silent`): a silent node's replicas read missing.
std::string WhatIsAmiss(const Deployment& deployment, const std::vector<DeploymentStatus>& running);

struct ApplyOptions {
  Deadline deadline = Deadline::AfterMs(600'000);    // everything ready by then
  std::function<void(const std::string&)> progress;  // one line at a time
  int poll_interval_ms = 300;
  // A node that is not up when apply begins (its telemetry late on a loaded
  // machine, an agent reconnecting) is waited for this long before the
  // placement, which then refuses a replica that needs it, naming the node.
  int node_wait_ms = 10'000;
  // The cluster token (the profile's, AgentEndpoint::token): the router job's
  // admin token derives from it (RouterAdminToken), so apply can tell a router
  // on a remote node the endpoints. "" : sent without (accepted from loopback).
  std::string cluster_token;
  // Asked while apply waits for replicas to be ready: true ends the wait as
  // a failure would (Cancelled; what this apply started is stopped). A replica
  // that fails, or is stopped, while apply waits ends it the same way.
  std::function<bool()> cancelled;
};

struct ApplyResult {
  Placement placement;
  std::vector<std::string> started;  // replica names started by this apply
  std::vector<std::string> kept;     // running ones left as they were
  std::vector<std::string> stopped;  // running ones stopped (changed or removed)
  DeploymentStatus status;           // after the apply
};

// Starts what the file asks for that is not running as asked, stops what it
// no longer asks for, then (re)starts the router and tells it the endpoints of
// every instance (POST /v1/router/instances). Waits until every replica is
// ready; when one fails, stops what this apply started and returns why.
Result<ApplyResult> ApplyDeployment(ClusterSession& session, const Deployment& deployment,
                                    const PlacementInput& input, const ApplyOptions& options);

// Tells a running router the endpoints of the deployment's instances (the
// ready replicas' URLs); what apply does last, and what keeps the router on
// replicas that were restarted elsewhere.
Status SyncRouterInstances(const DeploymentStatus& status, Deadline deadline);
// The same with the router's admin token: what a router on another node
// (not on this machine's loopback) needs. `cluster_token` "" : none sent.
Status SyncRouterInstances(const DeploymentStatus& status, const std::string& cluster_token,
                           Deadline deadline);

// Stops every job of the deployment on every node; the names stopped.
Result<std::vector<std::string>> DownDeployment(ClusterSession& session, const std::string& name,
                                                Deadline deadline);

}  // namespace octet::app
