#include "octet/app/cluster_session.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "octet/base/clock.h"
#include "octet/base/host_port.h"
#include "octet/base/log.h"

namespace octet::app {
namespace {

bool SameJobs(const std::vector<JobStatus>& a, const std::vector<JobStatus>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].spec.job_id != b[i].spec.job_id || a[i].state != b[i].state || a[i].pid != b[i].pid) {
      return false;
    }
  }
  return true;
}

std::string HostOfAddress(const std::string& address) {
  if (address.rfind("unix:", 0) == 0) return "127.0.0.1";
  std::string host;
  uint16_t port = 0;
  if (!SplitHostPort(address, &host, &port).ok()) return address;
  return host;
}

bool IsLoopbackHost(const std::string& host) {
  return host == "127.0.0.1" || host == "::1" || host == "localhost" || host.rfind("127.", 0) == 0;
}

}  // namespace

std::string_view NodeStateName(NodeState state) {
  switch (state) {
    case NodeState::kConnecting:
      return "connecting";
    case NodeState::kUp:
      return "up";
    case NodeState::kLost:
      return "lost";
  }
  return "?";
}

struct ClusterSession::Impl {
  struct Node {
    std::unique_ptr<AgentClient> client;
    std::thread thread;
    bool ever_up = false;  // guarded by mu
    std::atomic<int64_t> last_sample_ns{0};
    std::atomic<bool> refresh{false};
  };

  ClusterSessionOptions options;
  std::string expected_cabling;
  std::vector<std::unique_ptr<Node>> nodes;

  mutable std::mutex mu;
  mutable std::condition_variable changed;  // notified on every version bump
  ClusterSnapshot snap;                     // guarded by mu
  std::vector<ClusterEvent> pending;        // guarded by mu: events to deliver

  std::mutex listener_mu;  // serializes deliveries; guards listener
  std::function<void(const ClusterEvent&)> listener;

  std::mutex wake_mu;
  std::condition_variable wake;  // node threads sleep on it
  std::atomic<bool> stopping{false};

  // Call with mu held after changing snap.
  void BumpLocked() {
    ++snap.version;
    changed.notify_all();
  }

  void RecomputeCablingLocked() {
    std::vector<CablingNodeInput> in;
    for (const NodeView& v : snap.nodes) {
      CablingNodeInput c;
      c.name = v.name;
      c.reachable = v.state == NodeState::kUp && v.has_links;
      c.error = v.state == NodeState::kUp ? "" : v.last_error;
      if (c.reachable) c.links = v.links;
      in.push_back(std::move(c));
    }
    CablingReport next = AnalyzeCabling(in, expected_cabling);
    const bool differs = next.kind != snap.cabling.kind || next.summary != snap.cabling.summary;
    snap.cabling = std::move(next);
    if (differs) {
      pending.push_back({ClusterEvent::Kind::kCablingChanged, -1, "", snap.cabling.summary});
    }
  }

  void Deliver() {
    std::vector<ClusterEvent> events;
    {
      std::lock_guard<std::mutex> lock(mu);
      events.swap(pending);
    }
    if (events.empty()) return;
    std::lock_guard<std::mutex> lock(listener_mu);
    if (!listener) return;
    for (const auto& e : events) listener(e);
  }

  void SleepMs(int ms) {
    std::unique_lock<std::mutex> lock(wake_mu);
    wake.wait_for(lock, std::chrono::milliseconds(ms), [this] { return stopping.load(); });
  }

  void MarkUp(size_t i, NodeFacts facts) {
    {
      std::lock_guard<std::mutex> lock(mu);
      NodeView& v = snap.nodes[i];
      Node& nd = *nodes[i];
      const NodeState before = v.state;
      v.facts = std::move(facts);
      v.has_facts = true;
      if (before != NodeState::kUp) {
        v.state = NodeState::kUp;
        v.state_since_unix_ms = UnixMs();
        v.last_error.clear();
        pending.push_back(
            {nd.ever_up ? ClusterEvent::Kind::kNodeRecovered : ClusterEvent::Kind::kNodeUp,
             static_cast<int>(i), v.name, ""});
        if (nd.ever_up) {
          OCTET_LOG(INFO) << "node " << v.name << " recovered";
        }
        nd.ever_up = true;
      }
      BumpLocked();
    }
    Deliver();
  }

  void MarkDown(size_t i, const Status& why) {
    {
      std::lock_guard<std::mutex> lock(mu);
      NodeView& v = snap.nodes[i];
      const NodeState before = v.state;
      v.last_error = why.ToString();
      if (before != NodeState::kLost) {
        v.state = NodeState::kLost;
        v.state_since_unix_ms = UnixMs();
        v.has_telemetry = false;
        v.has_links = false;
        if (before == NodeState::kUp) {
          ++v.times_lost;
          pending.push_back(
              {ClusterEvent::Kind::kNodeLost, static_cast<int>(i), v.name, v.last_error});
          OCTET_LOG(WARNING) << "node " << v.name << " lost: " << v.last_error;
        }
        RecomputeCablingLocked();
      }
      BumpLocked();
    }
    Deliver();
  }

  void OnSample(size_t i, const TelemetrySample& s) {
    nodes[i]->last_sample_ns = NowNs();
    std::lock_guard<std::mutex> lock(mu);
    snap.nodes[i].telemetry = s;
    snap.nodes[i].has_telemetry = true;
    BumpLocked();
  }

  // Links and jobs of node i; facts too when asked.
  void Refresh(size_t i, bool facts) {
    AgentClient& c = *nodes[i]->client;
    const Deadline d = Deadline::AfterMs(options.call_timeout_ms);
    auto links = c.GetLinks(d);
    auto jobs = c.ListJobs(d);
    auto models = c.ListModels(d);
    Result<NodeFacts> f = facts ? c.GetFacts(d) : Result<NodeFacts>(UnavailableError("not asked"));
    {
      std::lock_guard<std::mutex> lock(mu);
      NodeView& v = snap.nodes[i];
      if (v.state != NodeState::kUp) return;
      if (links.ok()) {
        v.links = std::move(*links);
        v.has_links = true;
      }
      if (jobs.ok()) {
        if (!SameJobs(v.jobs, *jobs)) {
          pending.push_back({ClusterEvent::Kind::kJobsChanged, static_cast<int>(i), v.name, ""});
        }
        v.jobs = std::move(*jobs);
      }
      if (models.ok()) {
        v.models = std::move(*models);
        v.has_models = true;
      }
      if (f.ok()) v.facts = std::move(*f);
      RecomputeCablingLocked();
      BumpLocked();
    }
    Deliver();
  }

  void NodeLoop(size_t i) {
    Node& nd = *nodes[i];
    while (!stopping) {
      auto facts = nd.client->GetFacts(Deadline::AfterMs(options.call_timeout_ms));
      if (stopping) break;
      if (!facts.ok()) {
        MarkDown(i, facts.status());
        SleepMs(options.retry_interval_ms);
        continue;
      }
      MarkUp(i, std::move(*facts));
      Refresh(i, false);

      std::mutex end_mu;
      bool ended = false;
      Status end_status;
      nd.last_sample_ns = NowNs();
      auto stream = nd.client->StreamTelemetry(
          options.telemetry_interval_ms, [this, i](const TelemetrySample& s) { OnSample(i, s); },
          [&](const Status& s) {
            {
              std::lock_guard<std::mutex> lock(end_mu);
              ended = true;
              end_status = s;
            }
            wake.notify_all();
          });
      Deadline next_refresh = Deadline::AfterMs(options.refresh_interval_ms);
      Deadline next_facts = Deadline::AfterMs(options.facts_interval_ms);
      Status lost_reason;
      for (;;) {
        {
          std::unique_lock<std::mutex> lock(wake_mu);
          wake.wait_for(lock, std::chrono::milliseconds(100));
        }
        if (stopping) break;
        {
          std::lock_guard<std::mutex> lock(end_mu);
          if (ended) {
            lost_reason = end_status.ok() ? UnavailableError("telemetry stream ended") : end_status;
            break;
          }
        }
        const int64_t silent_ms = (NowNs() - nd.last_sample_ns.load()) / 1'000'000;
        if (silent_ms > options.lost_after_ms) {
          lost_reason =
              DeadlineExceededError("no telemetry for " + std::to_string(silent_ms) + " ms");
          break;
        }
        const bool asked = nd.refresh.exchange(false);
        const bool facts_due = asked || next_facts.expired();
        if (facts_due || next_refresh.expired()) {
          Refresh(i, facts_due);
          next_refresh = Deadline::AfterMs(options.refresh_interval_ms);
          if (facts_due) next_facts = Deadline::AfterMs(options.facts_interval_ms);
        }
      }
      stream.reset();  // cancels and joins the reader
      if (stopping) break;
      MarkDown(i, lost_reason);
      SleepMs(options.retry_interval_ms);
    }
  }
};

Result<std::unique_ptr<ClusterSession>> ClusterSession::Open(const ClusterProfile& profile,
                                                             ClusterSessionOptions options) {
  std::vector<Member> members;
  for (size_t i = 0; i < profile.nodes.size(); ++i) {
    OCTET_ASSIGN_OR_RETURN(AgentEndpoint e, EndpointFor(profile, i));
    members.push_back({profile.nodes[i].name, std::move(e)});
  }
  if (options.expected_cabling.empty()) options.expected_cabling = profile.expected_cabling;
  return Open(profile.name, std::move(members), std::move(options));
}

Result<std::unique_ptr<ClusterSession>> ClusterSession::Open(std::string cluster_name,
                                                             std::vector<Member> members,
                                                             ClusterSessionOptions options) {
  if (members.empty()) return InvalidArgumentError("cluster '" + cluster_name + "' has no nodes");
  std::unique_ptr<ClusterSession> s(new ClusterSession);
  s->impl_ = std::make_unique<Impl>();
  Impl* im = s->impl_.get();
  im->options = options;
  im->expected_cabling = options.expected_cabling;
  im->snap.cluster_name = std::move(cluster_name);
  for (auto& m : members) {
    auto node = std::make_unique<Impl::Node>();
    OCTET_ASSIGN_OR_RETURN(node->client, AgentClient::Create(m.endpoint));
    NodeView v;
    v.name = m.name;
    v.address = m.endpoint.address;
    v.state_since_unix_ms = UnixMs();
    im->snap.nodes.push_back(std::move(v));
    im->nodes.push_back(std::move(node));
  }
  for (size_t i = 0; i < im->nodes.size(); ++i) {
    im->nodes[i]->thread = std::thread([im, i] { im->NodeLoop(i); });
  }
  return s;
}

ClusterSession::~ClusterSession() {
  impl_->stopping = true;
  impl_->wake.notify_all();
  for (auto& n : impl_->nodes) n->thread.join();
}

ClusterSnapshot ClusterSession::Snapshot() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->snap;
}

uint64_t ClusterSession::version() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->snap.version;
}

bool ClusterSession::WaitUntil(const std::function<bool(const ClusterSnapshot&)>& pred,
                               Deadline deadline) const {
  std::unique_lock<std::mutex> lock(impl_->mu);
  for (;;) {
    if (pred(impl_->snap)) return true;
    if (deadline.expired()) return false;
    impl_->changed.wait_for(lock, std::min<std::chrono::nanoseconds>(
                                      deadline.remaining(), std::chrono::milliseconds(200)));
  }
}

void ClusterSession::SetListener(std::function<void(const ClusterEvent&)> listener) {
  std::lock_guard<std::mutex> lock(impl_->listener_mu);
  impl_->listener = std::move(listener);
}

void ClusterSession::RefreshNow() {
  for (auto& n : impl_->nodes) n->refresh = true;
  impl_->wake.notify_all();
}

size_t ClusterSession::size() const { return impl_->nodes.size(); }
AgentClient& ClusterSession::client(size_t node) { return *impl_->nodes.at(node)->client; }

Result<JobLaunch> ClusterSession::LaunchJob(const JobRequest& req, Deadline deadline) {
  if (req.nodes.empty()) return InvalidArgumentError("job '" + req.job_id + "': no nodes chosen");
  const ClusterSnapshot snap = Snapshot();
  for (size_t r = 0; r < req.nodes.size(); ++r) {
    const size_t n = req.nodes[r];
    if (n >= snap.nodes.size()) {
      return InvalidArgumentError("job '" + req.job_id + "': rank " + std::to_string(r) +
                                  " on node " + std::to_string(n) + ", but the cluster has " +
                                  std::to_string(snap.nodes.size()));
    }
    for (size_t q = 0; q < r; ++q) {
      if (req.nodes[q] == n) {
        return InvalidArgumentError("job '" + req.job_id + "': node " + snap.nodes[n].name +
                                    " chosen twice (one rank per node)");
      }
    }
    if (snap.nodes[n].state != NodeState::kUp) {
      return UnavailableError("job '" + req.job_id + "': node " + snap.nodes[n].name + " is " +
                              std::string(NodeStateName(snap.nodes[n].state)));
    }
  }
  if (req.kind == JobKind::kRouter && req.nodes.size() != 1) {
    return InvalidArgumentError("a router job runs on exactly one node");
  }
  std::string host = req.rendezvous_host;
  if (host.empty()) host = HostOfAddress(snap.nodes[req.nodes[0]].address);
  if (req.transport == "shm" && req.nodes.size() > 1) {
    for (size_t n : req.nodes) {
      if (!IsLoopbackHost(HostOfAddress(snap.nodes[n].address)) || !snap.nodes[n].facts.simulated) {
        return InvalidArgumentError("transport shm needs every rank on one host; node " +
                                    snap.nodes[n].name +
                                    " is a separate machine (use tcp or verbs)");
      }
    }
  }

  JobLaunch launch;
  launch.job_id = req.job_id;
  const uint32_t world = static_cast<uint32_t>(req.nodes.size());
  for (uint32_t r = 0; r < world; ++r) {
    JobSpec spec;
    spec.job_id = req.job_id;
    spec.kind = req.kind;
    spec.model = req.model;
    spec.world_size = world;
    spec.rank = r;
    spec.rendezvous =
        req.kind == JobKind::kRouter ? "" : (r == 0 ? JoinHostPort(host, 0) : launch.rendezvous);
    spec.transport = req.transport;
    spec.algorithm = req.algorithm;
    spec.port = r == 0 ? req.port : 0;
    spec.policy = req.policy;
    spec.threads = req.threads;
    spec.extra_args = req.extra_args;
    spec.deployment = req.deployment;
    spec.instance = req.instance;
    const size_t n = req.nodes[r];
    auto started = client(n).StartJob(spec, deadline);
    if (!started.ok()) {
      for (uint32_t q = 0; q < r; ++q) {
        client(req.nodes[q]).StopJob(req.job_id, Deadline::AfterMs(15'000)).status().IgnoreError();
      }
      return started.status().WithContext("job '" + req.job_id + "' rank " + std::to_string(r) +
                                          " on node " + snap.nodes[n].name);
    }
    if (r == 0) launch.rendezvous = started->rendezvous;
    launch.ranks.push_back(std::move(*started));
  }
  RefreshNow();
  return launch;
}

Status ClusterSession::StopJob(const std::string& job_id, Deadline deadline) {
  const ClusterSnapshot snap = Snapshot();
  Status first_error;
  bool found = false;
  for (size_t n = 0; n < snap.nodes.size(); ++n) {
    if (snap.nodes[n].state != NodeState::kUp) continue;
    auto r = client(n).StopJob(job_id, deadline);
    if (r.ok()) {
      found = true;
    } else if (r.status().code() != StatusCode::kNotFound && first_error.ok()) {
      first_error = r.status();
    }
  }
  RefreshNow();
  if (!first_error.ok()) return first_error;
  if (!found) return NotFoundError("no node has job '" + job_id + "'");
  return Status::Ok();
}

std::vector<LinkProbeReport> ClusterSession::ProbeLinks(uint64_t bytes, uint32_t round_trips,
                                                        Deadline deadline) {
  const ClusterSnapshot snap = Snapshot();
  std::vector<LinkProbeReport> out;
  for (const CablingEdge& e : snap.cabling.edges) {
    LinkProbeReport rep;
    rep.edge = e;
    size_t a = snap.nodes.size();
    for (size_t i = 0; i < snap.nodes.size(); ++i) {
      if (snap.nodes[i].name == e.a_node) a = i;
    }
    if (a == snap.nodes.size() || e.b_address.empty() || e.b_probe_port == 0) {
      rep.error = "no address for " + e.b_node + " on this link";
      out.push_back(std::move(rep));
      continue;
    }
    auto r = client(a).ProbeLink(JoinHostPort(e.b_address, static_cast<uint16_t>(e.b_probe_port)),
                                 bytes, round_trips, deadline);
    if (r.ok()) {
      rep.ok = true;
      rep.result = *r;
    } else {
      rep.error = r.status().ToString();
    }
    out.push_back(std::move(rep));
  }
  return out;
}

ClusterSnapshot QueryCluster(const std::string& cluster_name,
                             const std::vector<ClusterSession::Member>& members,
                             const std::string& expected_cabling, Deadline deadline) {
  ClusterSnapshot snap;
  snap.cluster_name = cluster_name;
  snap.nodes.resize(members.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < members.size(); ++i) {
    threads.emplace_back([&, i] {
      NodeView& v = snap.nodes[i];
      v.name = members[i].name;
      v.address = members[i].endpoint.address;
      v.state_since_unix_ms = UnixMs();
      auto client = AgentClient::Create(members[i].endpoint);
      if (!client.ok()) {
        v.state = NodeState::kLost;
        v.last_error = client.status().ToString();
        return;
      }
      auto facts = (*client)->GetFacts(deadline);
      if (!facts.ok()) {
        v.state = NodeState::kLost;
        v.last_error = facts.status().ToString();
        return;
      }
      v.state = NodeState::kUp;
      v.facts = std::move(*facts);
      v.has_facts = true;
      if (auto links = (*client)->GetLinks(deadline); links.ok()) {
        v.links = std::move(*links);
        v.has_links = true;
      }
      if (auto jobs = (*client)->ListJobs(deadline); jobs.ok()) v.jobs = std::move(*jobs);
      if (auto models = (*client)->ListModels(deadline); models.ok()) {
        v.models = std::move(*models);
        v.has_models = true;
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<CablingNodeInput> in;
  for (const NodeView& v : snap.nodes) {
    in.push_back({v.name, v.state == NodeState::kUp && v.has_links, v.last_error, v.links});
  }
  snap.cabling = AnalyzeCabling(in, expected_cabling);
  snap.version = 1;
  return snap;
}

}  // namespace octet::app
