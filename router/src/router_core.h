// Internals shared by the router's and the gateway's files: the runtime form
// of a policy (pools of replica states), replica leases, counters, and the
// RouterCore that decides, picks replicas, retries and ejects (router.cpp;
// its health checks in health_check.cpp, its figures in router_metrics.cpp).
#pragma once

#include <httplib.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "latency_histogram.h"
#include "octet/base/clock.h"
#include "octet/base/prom_metrics.h"
#include "octet/base/thread_annotations.h"
#include "octet/router/policy.h"
#include "octet/router/request_features.h"
#include "octet/router/router.h"
#include "replica_state.h"
#include "replica_url.h"
#include "session_pins.h"
#include "upstream_conn.h"

namespace octet::router {

// Per pool, kept across reloads by pool name. All fields are atomics.
struct PoolCounters {
  std::atomic<uint64_t> requests{0};     // requests answered (or attempted) by this pool
  std::atomic<uint64_t> errors{0};       // requests that failed on this pool
  std::atomic<uint64_t> tokens{0};       // completion tokens (usage, or stream events)
  std::atomic<uint64_t> retries{0};      // extra attempts on another replica
  std::atomic<uint64_t> fallbacks{0};    // requests this pool took for another pool
  std::atomic<uint64_t> escalations{0};  // requests escalated into this pool
  std::atomic<uint64_t> cancelled{0};    // client went away; upstream cancelled
  std::atomic<uint64_t> ejections{0};
  LatencyHistogram ttft{prom::TtftBuckets()};                // admitted -> first byte forwarded
  LatencyHistogram duration{prom::RequestLatencyBuckets()};  // admitted -> last byte forwarded
};

struct RouteCounters {
  std::atomic<uint64_t> decisions{0};
};

struct PoolRuntime {
  const PoolSpec* spec = nullptr;  // points into PolicyRuntime::policy
  std::vector<std::shared_ptr<ReplicaState>> replicas;
  std::vector<double> weights;  // parallel to replicas
  std::shared_ptr<PoolCounters> counters;
  mutable std::atomic<uint64_t> round_robin{0};
};

// A policy plus the runtime state of its pools. Immutable after construction
// (replica states themselves are shared and thread-safe).
class PolicyRuntime {
 public:
  std::shared_ptr<const RoutingPolicy> policy;
  uint64_t generation = 0;
  std::vector<std::unique_ptr<PoolRuntime>> pools;     // parallel to policy->pools
  std::vector<std::shared_ptr<RouteCounters>> routes;  // parallel to policy->routes

  const PoolRuntime* FindPool(std::string_view name) const;
  const RouteSpec* FindRoute(std::string_view name) const;
};

// One in-flight request on a replica: the count goes up on construction and
// down exactly once (Release or destruction).
class ReplicaLease {
 public:
  ReplicaLease() = default;
  explicit ReplicaLease(std::shared_ptr<ReplicaState> r) : replica_(std::move(r)) {}
  ReplicaLease(ReplicaLease&& o) noexcept : replica_(std::move(o.replica_)) {}
  ReplicaLease& operator=(ReplicaLease&& o) noexcept {
    if (this != &o) {
      Release();
      replica_ = std::move(o.replica_);
    }
    return *this;
  }
  ReplicaLease(const ReplicaLease&) = delete;
  ReplicaLease& operator=(const ReplicaLease&) = delete;
  ~ReplicaLease() { Release(); }
  void Release() {
    if (replica_) replica_->in_flight.fetch_sub(1, std::memory_order_acq_rel);
    replica_.reset();
  }
  ReplicaState* get() const { return replica_.get(); }
  ReplicaState* operator->() const { return replica_.get(); }
  const std::shared_ptr<ReplicaState>& shared() const { return replica_; }
  explicit operator bool() const { return replica_ != nullptr; }

 private:
  std::shared_ptr<ReplicaState> replica_;
};

enum class FailureKind {
  kConnect,  // could not connect / send, or the connection dropped before the first byte
  kStatus5xx,
  kStatus429,
  kMidStream,  // the upstream failed after bytes were forwarded (not retryable)
};

// A request admitted by RouterCore::Route: its decision, its policy snapshot
// and the replica it currently holds.
struct RoutedRequest {
  std::shared_ptr<const PolicyRuntime> runtime;
  RouteDecision decision;
  const RouteSpec* route = nullptr;
  const PoolRuntime* pool = nullptr;
  ReplicaLease lease;
  std::vector<const ReplicaState*> tried;  // replicas already attempted
  std::vector<const PoolRuntime*> pools_tried;
  std::string session_key;
  int retries_left = 0;
  bool escalated = false;
};

class RouterCore {
 public:
  explicit RouterCore(RouterOptions options);
  ~RouterCore();

  Status Apply(std::shared_ptr<const RoutingPolicy> policy) EXCLUDES(mu_, apply_mu_);
  // `instance:` pools' endpoints (see Router::SetInstanceEndpoints).
  Status SetInstances(const std::map<std::string, std::vector<std::string>>& endpoints)
      EXCLUDES(mu_);
  std::map<std::string, std::vector<std::string>> Instances() const EXCLUDES(mu_);
  std::shared_ptr<const PolicyRuntime> Snapshot() const EXCLUDES(mu_);
  int64_t NowMs() const { return clock_.NowMs(); }

  // The decision for a request under `rt` (no lease, no pin written).
  // `route_out`/`pool_out` receive the chosen route and pool.
  Result<RouteDecision> Decide(const PolicyRuntime& rt, const nlohmann::json& request,
                               const RequestFeatures& features, const HeaderLookup& headers,
                               bool assume_healthy, const RouteSpec** route_out,
                               const PoolRuntime** pool_out, std::string* session_key) const;

  // Decide, pick a replica and take a lease on it; pins the session.
  // Unavailable when no pool can take the request, ResourceExhausted when every
  // candidate pool is saturated.
  Result<RoutedRequest> Route(const nlohmann::json& request, const RequestFeatures& features,
                              const HeaderLookup& headers);

  // After `failure` before any byte reached the client: records it and moves
  // the request to another replica (same pool first, then the fallbacks).
  // False when the retry budget or the candidates are exhausted.
  bool Retry(RoutedRequest& rr, FailureKind failure);
  // Moves the request to its route's escalation pool; false when there is none.
  bool Escalate(RoutedRequest& rr);

  void ReportSuccess(ReplicaState* replica, const PoolSpec& spec) EXCLUDES(replica->mu);
  void ReportFailure(ReplicaState* replica, const PoolRuntime& pool, FailureKind failure)
      EXCLUDES(replica->mu);

  // Counters.
  void RecordOverhead(int64_t ns) { overhead_.Record(ns); }
  void CountRequest() { requests_.fetch_add(1, std::memory_order_relaxed); }
  void CountBadRequest() { bad_requests_.fetch_add(1, std::memory_order_relaxed); }
  void CountUnrouted() { unrouted_.fetch_add(1, std::memory_order_relaxed); }
  const LatencyHistogram& overhead() const { return overhead_; }
  RouterStats Stats() const;
  std::string MetricsText() const;
  SessionPins& pins() { return pins_; }

  // Runs one round of active health checks now (tests; the thread does it on its own).
  void CheckHealthNow();

 private:
  enum class PoolState { kAvailable, kSaturated, kDown };
  PoolState StateOf(const PoolRuntime& pool, int64_t now) const;
  // Picks and leases a replica of `pool` not in `exclude`; `preferred` (a URL)
  // wins when it is usable. Empty lease when none is usable.
  ReplicaLease Pick(const PoolRuntime& pool, int64_t now,
                    const std::vector<const ReplicaState*>& exclude,
                    const std::string& preferred) const;
  // The first usable pool of `start`'s fallback chain (route fallback first).
  const PoolRuntime* UsablePool(const PolicyRuntime& rt, const PoolRuntime* start,
                                const std::string& route_fallback, int64_t now,
                                const std::vector<const PoolRuntime*>& skip, bool* saturated) const;
  // Records the replica pin and, when `session_level`, the session's pool pin.
  void PinSession(RoutedRequest& rr, bool session_level);
  void HealthLoop() EXCLUDES(health_mu_);
  void CheckReplica(const std::shared_ptr<ReplicaState>& replica, const PoolSpec& spec)
      EXCLUDES(replica->mu);

  RouterOptions options_;
  Clock& clock_;  // options_.clock or the real one
  // One Apply at a time (instances_ read, then the runtime installed); taken before mu_.
  Mutex apply_mu_ ACQUIRED_BEFORE(mu_);
  mutable Mutex mu_;
  std::shared_ptr<const PolicyRuntime> runtime_ GUARDED_BY(mu_);
  uint64_t generation_ GUARDED_BY(mu_) = 0;
  std::map<std::string, std::shared_ptr<ReplicaState>> replicas_ GUARDED_BY(mu_);  // "pool\x1furl"
  std::map<std::string, std::vector<std::string>> instances_ GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<PoolCounters>> pool_counters_ GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<RouteCounters>> route_counters_ GUARDED_BY(mu_);

  SessionPins pins_;
  LatencyHistogram overhead_{prom::FastBuckets()};
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> bad_requests_{0};
  std::atomic<uint64_t> unrouted_{0};

  Mutex health_mu_;
  std::condition_variable health_cv_;  // stop_ set
  bool stop_ GUARDED_BY(health_mu_) = false;
  std::thread health_thread_;
};

}  // namespace octet::router
