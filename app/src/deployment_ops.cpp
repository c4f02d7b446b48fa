// Running a deployment through the agents; see deployment.h.
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include "agent_job_text.h"
#include "octet/agent/cluster_token.h"
#include "octet/agent/link_probe.h"
#include "octet/app/deployment.h"
#include "octet/base/json.h"

namespace octet::app {

namespace {

constexpr int kCallMs = 5000;

int64_t RemainingMs(const Deadline& d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d.remaining()).count();
}

// "http://HOST:PORT" from a server's "... serving ... on http://HOST:PORT" line.
std::string ServingUrl(const std::string& log) {
  static const std::regex kServing(R"(on (http://[0-9A-Za-z.:\[\]-]+:[0-9]+))");
  std::string url;
  size_t pos = 0;
  while (pos < log.size()) {
    size_t eol = log.find('\n', pos);
    if (eol == std::string::npos) eol = log.size();
    const std::string line = log.substr(pos, eol - pos);
    std::smatch m;
    if (line.find("serving") != std::string::npos && std::regex_search(line, m, kServing)) {
      url = m[1].str();
    }
    pos = eol + 1;
  }
  return url;
}

// The HTTP status of GET url + path, or -1 when nothing answers.
int HttpGetStatus(const std::string& url, const std::string& path, int timeout_ms) {
  httplib::Client cli(url);
  cli.set_connection_timeout(std::chrono::milliseconds(timeout_ms));
  cli.set_read_timeout(std::chrono::milliseconds(timeout_ms));
  auto res = cli.Get(path);
  return res ? res->status : -1;
}

// The agent's job id of a replica: unique per start, so a stopped job the
// agent still lists never collides with the next one.
std::string NewJobId(const std::string& deployment, const std::string& replica) {
  static const char* kDigits = "0123456789abcdefghijklmnopqrstuvwxyz";
  uint64_t v = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                         std::chrono::system_clock::now().time_since_epoch())
                                         .count());
  std::string suffix;
  for (int i = 0; i < 7; ++i, v /= 36) suffix.insert(suffix.begin(), kDigits[v % 36]);
  return deployment + "." + replica + "." + suffix;
}

// The worker flags of an instance, as `octet serve` takes them, each one
// word "--flag=value": the form the agent keeps them in (CheckExtraArgs), so
// a running replica's flags compare equal to the file's.
std::vector<std::string> InstanceArgs(const DeployInstanceSpec& i, const std::string& host) {
  std::vector<std::string> a = {"--host=" + host, "--port=0",
                                "--slots=" + std::to_string(i.num_slots)};
  if (i.context > 0) a.push_back("--context=" + std::to_string(i.context));
  if (!i.kv_memory.empty()) a.push_back("--kv-memory=" + i.kv_memory);
  if (i.kv_dtype != "f32") a.push_back("--kv-dtype=" + i.kv_dtype);
  if (i.speculative != "off") a.push_back("--speculative=" + i.speculative);
  if (i.draft_tokens > 0) a.push_back("--draft-tokens=" + std::to_string(i.draft_tokens));
  if (!i.backend.empty()) a.push_back("--backend=" + i.backend);
  if (!i.served_model_name.empty()) a.push_back("--served-model-name=" + i.served_model_name);
  return a;
}

std::vector<std::string> RouterArgs(const DeployRouterSpec& r, const std::string& host) {
  return {"--host=" + host, "--port=" + std::to_string(r.port)};
}

struct Rank {
  size_t node = 0;
  JobStatus job;
};

}  // namespace

PlacementInput PlacementInputFrom(const ClusterSnapshot& snap) {
  PlacementInput in;
  for (const auto& n : snap.nodes) {
    PlacementNode p;
    p.name = n.name;
    p.up = n.state == NodeState::kUp;
    if (!p.up) {
      p.down_reason = std::string(NodeStateName(n.state)) +
                      (n.last_error.empty() ? std::string() : ": " + n.last_error);
    }
    if (n.has_facts) {
      p.memory_bytes = static_cast<int64_t>(
          n.facts.memory.budget_bytes ? n.facts.memory.budget_bytes : n.facts.memory.total_bytes);
    }
    in.nodes.push_back(std::move(p));
  }
  in.cabling = std::string(CablingKindName(snap.cabling.kind));
  in.ring_order = snap.cabling.ring_order;
  return in;
}

std::vector<DeploymentStatus> ReadDeployments(ClusterSession& session, Deadline deadline) {
  return ReadDeployments(session, deadline, nullptr);
}

std::vector<DeploymentStatus> ReadDeployments(ClusterSession& session, Deadline deadline,
                                              std::vector<NodeSilence>* silent) {
  if (silent) silent->clear();
  const ClusterSnapshot snap = session.Snapshot();
  const size_t n = snap.nodes.size();
  std::vector<Result<std::vector<JobStatus>>> lists(n, std::vector<JobStatus>{});
  {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        lists[i] = session.client(i).ListJobs(Deadline::Min(deadline, Deadline::AfterMs(kCallMs)));
      });
    }
    for (auto& t : threads) t.join();
  }
  // deployment -> replica -> job id -> ranks
  std::map<std::string, std::map<std::string, std::map<std::string, std::vector<Rank>>>> groups;
  for (size_t i = 0; i < n; ++i) {
    if (!lists[i].ok()) {
      if (silent) {
        silent->push_back({snap.nodes[i].name, snap.nodes[i].state == NodeState::kUp,
                           lists[i].status().message()});
      }
      continue;
    }
    for (const JobStatus& j : *lists[i]) {
      if (j.spec.deployment.empty() || j.spec.instance.empty()) continue;
      groups[j.spec.deployment][j.spec.instance][j.spec.job_id].push_back({i, j});
    }
  }
  std::vector<DeploymentStatus> out;
  for (auto& [dep, replicas] : groups) {
    DeploymentStatus ds;
    ds.name = dep;
    bool any_running = false;
    for (auto& [replica, jobs] : replicas) {
      // The job that is running, else the newest.
      const std::vector<Rank>* chosen = nullptr;
      bool chosen_running = false;
      int64_t chosen_started = -1;
      for (auto& [id, ranks] : jobs) {
        bool running = false;
        int64_t started = 0;
        for (const auto& r : ranks) {
          running = running || r.job.state == "running";
          started = std::max(started, r.job.started_unix_ms);
        }
        if (!chosen || (running && !chosen_running) ||
            (running == chosen_running && started > chosen_started)) {
          chosen = &ranks;
          chosen_running = running;
          chosen_started = started;
        }
      }
      if (!chosen) continue;
      const JobSpec& spec = chosen->front().job.spec;
      DeployedReplica r;
      r.deployment = dep;
      r.replica = replica;
      r.router = spec.kind == JobKind::kRouter;
      r.instance = r.router ? "" : replica.substr(0, replica.rfind('-'));
      r.job_id = spec.job_id;
      r.model = r.router ? spec.policy : spec.model;
      r.transport = spec.transport;
      r.algorithm = spec.algorithm;
      r.extra_args = spec.extra_args;
      r.threads = static_cast<int>(spec.threads);
      const uint32_t world = r.router ? 1 : std::max<uint32_t>(1, spec.world_size);
      r.tp = static_cast<int>(world);
      r.nodes.assign(world, "");
      std::vector<const Rank*> by_rank(world, nullptr);
      for (const auto& rk : *chosen) {
        if (rk.job.spec.rank < world) {
          by_rank[rk.job.spec.rank] = &rk;
          r.nodes[rk.job.spec.rank] = snap.nodes[rk.node].name;
        }
      }
      size_t running = 0, stopped = 0, exited = 0;
      std::string failure;
      for (uint32_t k = 0; k < world; ++k) {
        const Rank* rk = by_rank[k];
        if (!rk) {
          if (failure.empty())
            failure = "rank " + std::to_string(k) + ": no node answering lists it";
          continue;
        }
        if (rk->job.state == "running") {
          ++running;
        } else if (rk->job.state == "stopped") {
          ++stopped;
        } else {
          // A rank that exited cleanly may have ended because a peer was
          // stopped; it reads failed only when nothing explains it.
          if (rk->job.state == "exited") ++exited;
          if (!failure.empty()) continue;
          failure = "rank " + std::to_string(k) + " on node " + snap.nodes[rk->node].name + ": " +
                    EndedWhy(rk->job);
        }
      }
      if (running > 0) any_running = true;
      if (running == world) {
        auto log = session.client(by_rank[0]->node).ReadLogs(r.job_id, Deadline::AfterMs(kCallMs));
        if (log.ok()) r.url = ServingUrl(*log);
        // A router answers /health 503 until a pool can serve: it is up.
        const int health = r.url.empty() ? -1 : HttpGetStatus(r.url, "/health", 1000);
        r.state = (r.router ? health > 0 : health == 200) ? "ready" : "starting";
      } else if (running == 0 && stopped > 0 && stopped + exited == world) {
        // Stopped, its other ranks ending cleanly when their peer went away
        // (before the agent's stop reached them).
        r.state = "stopped";
      } else {
        r.state = "failed";
        r.error = failure.empty() ? "some ranks stopped, others run" : failure;
      }
      if (r.router) {
        ds.has_router = true;
        ds.router = std::move(r);
      } else {
        ds.instances.push_back(std::move(r));
      }
    }
    if (any_running) out.push_back(std::move(ds));
  }
  return out;
}

Status SyncRouterInstances(const DeploymentStatus& status, Deadline deadline) {
  return SyncRouterInstances(status, "", deadline);
}

Status SyncRouterInstances(const DeploymentStatus& status, const std::string& cluster_token,
                           Deadline deadline) {
  if (!status.has_router || status.router.url.empty()) {
    return FailedPreconditionError("deployment '" + status.name + "' has no running router");
  }
  nlohmann::json instances = nlohmann::json::object();
  for (const auto& r : status.instances) {
    if (!instances.contains(r.instance)) instances[r.instance] = nlohmann::json::array();
    if (r.state == "ready" && !r.url.empty()) instances[r.instance].push_back(r.url);
  }
  httplib::Client cli(status.router.url);
  const int ms = static_cast<int>(std::clamp<int64_t>(RemainingMs(deadline), 100, 10'000));
  cli.set_connection_timeout(std::chrono::milliseconds(ms));
  cli.set_read_timeout(std::chrono::milliseconds(ms));
  httplib::Headers headers;
  if (!cluster_token.empty()) {
    headers.emplace("Authorization",
                    "Bearer " + agent::RouterAdminToken(cluster_token, status.router.job_id));
  }
  auto res = cli.Post("/v1/router/instances", headers,
                      nlohmann::json{{"instances", instances}}.dump(), "application/json");
  if (!res) {
    return UnavailableError("router " + status.router.url +
                            ": no answer to POST /v1/router/instances");
  }
  if (res->status != 200) {
    return FailedPreconditionError("router " + status.router.url + " refused the endpoints (" +
                                   std::to_string(res->status) + "): " + res->body);
  }
  return Status::Ok();
}

namespace {

const DeploymentStatus* FindStatus(const std::vector<DeploymentStatus>& all,
                                   const std::string& name) {
  for (const auto& d : all) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

void StopJobs(ClusterSession& session, const std::vector<std::string>& ids) {
  std::vector<std::thread> threads;
  for (const auto& id : ids) {
    threads.emplace_back(
        [&session, id] { session.StopJob(id, Deadline::AfterMs(20'000)).IgnoreError(); });
  }
  for (auto& t : threads) t.join();
}

}  // namespace

namespace {

// Why a running replica is not kept as the file asks ("" : kept).
template <typename HostOf>
std::string WhyNotKept(const DeployedReplica& r, const DeployInstanceSpec* spec, int idx,
                       const std::map<std::string, size_t>& node_index, const HostOf& host_of) {
  if (!spec) return "instance '" + r.instance + "' is no longer in the file";
  if (idx >= spec->replicas) {
    return "the file asks for " + std::to_string(spec->replicas) + " replica(s) of '" + spec->name +
           "'";
  }
  if (r.state == "failed") return "it failed (" + r.error + ")";
  if (r.state == "stopped") return "it is stopped";
  if (!SameModelFolder(r.model, spec->model)) {
    return "model " + r.model + " -> " + spec->model;
  }
  if (r.tp != spec->tp) return "tp " + std::to_string(r.tp) + " -> " + std::to_string(spec->tp);
  if (r.transport != spec->transport) return "transport " + r.transport + " -> " + spec->transport;
  if (r.algorithm != spec->algorithm) return "algorithm " + r.algorithm + " -> " + spec->algorithm;
  if (r.threads != spec->threads) {
    return "threads " + std::to_string(r.threads) + " -> " + std::to_string(spec->threads);
  }
  if (r.nodes.empty() || !node_index.count(r.nodes[0])) return "its rank 0 node is unknown";
  for (const auto& n : r.nodes) {
    if (!node_index.count(n)) return "node '" + n + "' is not in the cluster";
  }
  const std::vector<std::string> args = InstanceArgs(*spec, host_of(r.nodes[0]));
  if (r.extra_args != args) {
    auto join = [](const std::vector<std::string>& v) {
      std::string out;
      for (const auto& a : v) out += (out.empty() ? "" : " ") + a;
      return out;
    };
    return "flags '" + join(r.extra_args) + "' -> '" + join(args) + "'";
  }
  if (!spec->nodes.empty() &&
      !std::equal(r.nodes.begin(), r.nodes.end(), spec->nodes.begin() + idx * spec->tp)) {
    return "the file names other nodes for it";
  }
  return "";
}

}  // namespace

std::string WhatIsAmiss(const Deployment& d, const std::vector<DeploymentStatus>& all) {
  const DeploymentStatus* cur = nullptr;
  for (const auto& s : all) {
    if (s.name == d.name) cur = &s;
  }
  std::string amiss;
  auto add = [&](const std::string& what, const DeployedReplica* r) {
    std::string s = what + (r ? " " + r->state : std::string(" is not running"));
    if (r && !r->error.empty()) s += " (" + r->error + ")";
    amiss += (amiss.empty() ? "" : "; ") + s;
  };
  auto live = [](const DeployedReplica& r) { return r.state == "ready" || r.state == "starting"; };
  for (const auto& i : d.instances) {
    for (int k = 0; k < i.replicas; ++k) {
      const std::string name = i.name + "-" + std::to_string(k);
      const DeployedReplica* found = nullptr;
      if (cur) {
        for (const auto& r : cur->instances) {
          if (r.replica == name) found = &r;
        }
      }
      if (!found || !live(*found)) add(name, found);
    }
  }
  if (d.router.present) {
    const DeployedReplica* r = cur && cur->has_router ? &cur->router : nullptr;
    if (!r || !live(*r)) add("the router", r);
  }
  return amiss;
}

Result<ApplyResult> ApplyDeployment(ClusterSession& session, const Deployment& d,
                                    const PlacementInput& input_in, const ApplyOptions& options) {
  auto say = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  // A node not up yet (its telemetry late on a loaded machine, its agent
  // reconnecting) gets options.node_wait_ms before anything is decided; the
  // placement then refuses a replica that still needs it, naming it.
  auto all_up = [](const ClusterSnapshot& s) {
    for (const auto& n : s.nodes) {
      if (n.state != NodeState::kUp || !n.has_facts) return false;
    }
    return true;
  };
  if (options.node_wait_ms > 0 && !all_up(session.Snapshot())) {
    std::string late;
    for (const auto& n : session.Snapshot().nodes) {
      if (n.state != NodeState::kUp || !n.has_facts) late += (late.empty() ? "" : ", ") + n.name;
    }
    say("waiting up to " + std::to_string(options.node_wait_ms) + " ms for " + late);
    session.WaitUntil(all_up,
                      Deadline::Min(options.deadline, Deadline::AfterMs(options.node_wait_ms)));
  }
  const ClusterSnapshot snap = session.Snapshot();
  std::map<std::string, size_t> node_index;
  for (size_t i = 0; i < snap.nodes.size(); ++i) node_index[snap.nodes[i].name] = i;
  PlacementInput input = input_in;
  for (auto& pn : input.nodes) {
    auto it = node_index.find(pn.name);
    if (it == node_index.end()) continue;
    const NodeView& v = snap.nodes[it->second];
    pn.up = v.state == NodeState::kUp;
    pn.down_reason.clear();
    if (!pn.up) {
      pn.down_reason = std::string(NodeStateName(v.state)) + " after waiting " +
                       std::to_string(options.node_wait_ms) + " ms" +
                       (v.last_error.empty() ? std::string() : ": " + v.last_error);
    }
    if (pn.memory_bytes == 0 && v.has_facts) {
      pn.memory_bytes = static_cast<int64_t>(
          v.facts.memory.budget_bytes ? v.facts.memory.budget_bytes : v.facts.memory.total_bytes);
    }
  }
  auto host_of = [&](const std::string& node) {
    return HostOfAgent(snap.nodes[node_index.at(node)].address);
  };

  // What runs now. A node that is up but did not say which jobs it runs (a
  // slow answer on a loaded machine) is asked again until node_wait_ms: a
  // replica missing from the listing would otherwise be started twice.
  std::vector<DeploymentStatus> before;
  {
    const Deadline asked_until =
        Deadline::Min(options.deadline, Deadline::AfterMs(std::max(0, options.node_wait_ms)));
    for (;;) {
      std::vector<NodeSilence> silent;
      before = ReadDeployments(session, options.deadline, &silent);
      std::string up_but_silent;
      for (const auto& s : silent) {
        if (s.up) up_but_silent += (up_but_silent.empty() ? "" : "; ") + s.node + ": " + s.error;
      }
      if (up_but_silent.empty()) break;
      if (asked_until.expired()) {
        return UnavailableError(
            "cannot tell what runs on every node, so nothing was changed (no answer to "
            "ListJobs after " +
            std::to_string(options.node_wait_ms) + " ms from " + up_but_silent + ")");
      }
      say("asking again which jobs run (" + up_but_silent + ")");
      std::this_thread::sleep_for(std::chrono::milliseconds(options.poll_interval_ms));
    }
  }
  const DeploymentStatus* current = FindStatus(before, d.name);

  // What runs as asked is kept: same model, TP, transport, algorithm and
  // flags, not failed, on the named nodes when the file names them.
  ApplyResult result;
  input.fixed.clear();
  std::set<std::string> kept;
  std::vector<std::string> to_stop;
  std::vector<std::string> reasons;  // said once the placement holds
  if (current) {
    for (const auto& r : current->instances) {
      const DeployInstanceSpec* spec = d.Find(r.instance);
      const int idx = std::atoi(r.replica.substr(r.replica.rfind('-') + 1).c_str());
      const std::string why = WhyNotKept(r, spec, idx, node_index, host_of);
      const bool keep = why.empty();
      if (!keep && r.state != "stopped") {
        const bool removed = !spec || idx >= spec->replicas;
        reasons.push_back((removed ? "stopping " : "restarting ") + r.replica + ": " + why);
      }
      if (keep) {
        kept.insert(r.replica);
        input.fixed[r.replica] = r.nodes;
        result.kept.push_back(r.replica);
      } else if (r.state != "stopped") {
        to_stop.push_back(r.job_id);
        result.stopped.push_back(r.replica);
      }
    }
  }
  result.placement = PlaceDeployment(d, input);
  if (!result.placement.ok()) {
    std::string all;
    for (const auto& e : result.placement.errors) all += (all.empty() ? "" : "\n") + e;
    return FailedPreconditionError(all);
  }
  for (const auto& line : reasons) say(line);
  if (!to_stop.empty()) {
    say("stopping " + std::to_string(to_stop.size()) + " replica(s) that changed or were removed");
    StopJobs(session, to_stop);
  }

  // Start the others, rank 0 first on each (ClusterSession::LaunchJob).
  std::vector<std::string> started_ids;
  auto undo = [&](const std::string& why) -> Status {
    StopJobs(session, started_ids);
    return FailedPreconditionError(why + " (stopped what this apply started)");
  };
  for (const auto& p : result.placement.replicas) {
    if (kept.count(p.replica)) continue;
    const DeployInstanceSpec* spec = d.Find(p.instance);
    JobRequest req;
    req.job_id = NewJobId(d.name, p.replica);
    req.kind = JobKind::kInference;
    req.model = spec->model;
    for (const auto& n : p.nodes) req.nodes.push_back(node_index.at(n));
    req.transport = spec->transport;
    req.algorithm = spec->algorithm;
    req.threads = static_cast<uint32_t>(spec->threads);
    req.extra_args = InstanceArgs(*spec, host_of(p.nodes[0]));
    req.deployment = d.name;
    req.instance = p.replica;
    std::string nodes;
    for (const auto& n : p.nodes) nodes += (nodes.empty() ? "" : ", ") + n;
    say("starting " + p.replica + " (" + spec->model + ", TP " + std::to_string(spec->tp) +
        ") on " + nodes);
    auto launched = session.LaunchJob(req, options.deadline);
    if (!launched.ok()) return undo(p.replica + ": " + launched.status().message());
    started_ids.push_back(req.job_id);
    result.started.push_back(p.replica);
  }

  // Wait until every replica is ready, or one fails.
  auto wait_ready = [&](const std::set<std::string>& names,
                        bool router) -> Result<DeploymentStatus> {
    for (;;) {
      const auto all = ReadDeployments(session, options.deadline);
      const DeploymentStatus* s = FindStatus(all, d.name);
      size_t ready = 0;
      std::string pending;
      if (s) {
        std::vector<DeployedReplica> rs = s->instances;
        if (s->has_router) rs.push_back(s->router);
        for (const auto& r : rs) {
          if (!names.count(r.replica) || r.router != router) continue;
          if (r.state == "failed") return UnavailableError(r.replica + " failed: " + r.error);
          // Stopped (by hand, or by another apply or down) while this apply
          // waited: it will not be ready, so waiting out the deadline is no use.
          if (r.state == "stopped") {
            return AbortedError(r.replica + " was stopped while this apply waited for it");
          }
          if (r.state == "ready") {
            ++ready;
          } else {
            pending = r.replica;
          }
        }
        if (ready == names.size()) return *s;
      }
      if (options.cancelled && options.cancelled()) {
        return CancelledError("stopped while waiting" +
                              (pending.empty() ? std::string() : " for " + pending));
      }
      if (options.deadline.expired()) {
        return DeadlineExceededError(
            "not ready in time" +
            (pending.empty() ? std::string() : ": " + pending + " " + "still starting"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(options.poll_interval_ms));
    }
  };
  std::set<std::string> replica_names;
  for (const auto& p : result.placement.replicas) replica_names.insert(p.replica);
  auto ready = wait_ready(replica_names, /*router=*/false);
  if (!ready.ok()) return undo(ready.status().message());
  say(std::to_string(replica_names.size()) + " replica(s) ready");

  // The router: kept when it runs with the same policy on the same node.
  if (d.router.present) {
    const std::string& node = result.placement.router_node;
    const std::vector<std::string> args = RouterArgs(d.router, host_of(node));
    DeploymentStatus s = *ready;
    const bool keep_router =
        s.has_router && s.router.state != "failed" && s.router.state != "stopped" &&
        SameModelFolder(s.router.model, d.router.policy) &&
        s.router.nodes == std::vector<std::string>{node} && s.router.extra_args == args;
    if (!keep_router) {
      if (s.has_router && s.router.state != "stopped") StopJobs(session, {s.router.job_id});
      JobRequest req;
      req.job_id = NewJobId(d.name, "router");
      req.kind = JobKind::kRouter;
      req.nodes = {node_index.at(node)};
      req.policy = d.router.policy;
      req.extra_args = args;
      req.deployment = d.name;
      req.instance = "router";
      say("starting the router on " + node + " (" + d.router.policy + ")");
      auto launched = session.LaunchJob(req, options.deadline);
      if (!launched.ok()) return undo("the router: " + launched.status().message());
      started_ids.push_back(req.job_id);
      auto r = wait_ready({"router"}, /*router=*/true);
      if (!r.ok()) return undo(r.status().message());
      s = *r;
    }
    if (Status st = SyncRouterInstances(s, options.cluster_token, options.deadline); !st.ok())
      return undo(st.message());
    say("router on " + s.router.url + " told the endpoints of every instance");
    result.status = s;
  } else {
    result.status = *ready;
    if (result.status.has_router) {
      say("stopping the router (the file no longer has one)");
      StopJobs(session, {result.status.router.job_id});
      result.status.has_router = false;
    }
  }
  return result;
}

Result<std::vector<std::string>> DownDeployment(ClusterSession& session, const std::string& name,
                                                Deadline deadline) {
  const size_t n = session.size();
  std::set<std::string> ids;
  std::vector<std::string> names;
  bool any_answer = false;
  for (size_t i = 0; i < n; ++i) {
    auto jobs = session.client(i).ListJobs(deadline);
    if (!jobs.ok()) continue;
    any_answer = true;
    for (const JobStatus& j : *jobs) {
      if (j.spec.deployment != name || j.state != "running") continue;
      if (ids.insert(j.spec.job_id).second) names.push_back(j.spec.instance);
    }
  }
  if (!any_answer) return UnavailableError("no agent of the cluster answers");
  StopJobs(session, std::vector<std::string>(ids.begin(), ids.end()));
  // Until the agents say every one has ended (its memory is free then).
  for (;;) {
    bool running = false;
    for (size_t i = 0; i < n && !running; ++i) {
      auto jobs = session.client(i).ListJobs(Deadline::Min(deadline, Deadline::AfterMs(kCallMs)));
      if (!jobs.ok()) continue;
      for (const JobStatus& j : *jobs) {
        running = running || (j.spec.deployment == name && j.state == "running");
      }
    }
    if (!running) break;
    if (deadline.expired()) {
      return DeadlineExceededError("deployment '" + name + "': some jobs still run after stopping");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace octet::app
