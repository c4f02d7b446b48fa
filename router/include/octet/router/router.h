// Router: routing decisions over a RoutingPolicy, with the runtime state that
// outlives any one policy — replica load (in-flight requests), health and
// outlier ejection, session pins, and the statistics behind /metrics.
//
// This is the plain C++ API the gateway (gateway.h) and `octet route` use
// (wire/proto/octet/v1/router.proto declares a RouterService for it, which no
// program serves yet):
//   Classify()        decision only (route, pool, score, reason); no load taken.
//   ValidatePolicy()  parse + validate YAML without applying it.
//   ApplyPolicy()     validate and install atomically; on any error the running
//                     policy stays. Requests already admitted keep the policy
//                     snapshot they started with; new requests use the new one.
//                     Session pins and replica state survive (matched by pool
//                     name and replica URL).
//   Stats(), MetricsText()  counters for RouterStats / Prometheus.
//
// Thread-safety: every public method may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "octet/base/clock.h"
#include "octet/base/json.h"
#include "octet/base/status.h"
#include "octet/router/policy.h"

namespace octet::router {

class PolicyRuntime;  // internal: one policy plus its pools' runtime state
class RouterCore;     // internal

// Header lookup for decisions: name is lower case; returns "" when absent.
using HeaderLookup = std::function<std::string(std::string_view name)>;

struct RouteDecision {
  std::string route;
  std::string pool;
  double score = -1;              // classifier score in [0, 1]; -1 when no classifier was consulted
  std::string reason;             // why, in words ("classifier difficulty score 0.82 >= 0.50")
  bool sticky = false;            // taken from a session pin
  bool fallback = false;          // the route's pool was down or saturated
  std::string session;            // the session key ("" without stickiness)
  std::string replica;            // the replica URL (filled by the gateway's pick)
  nlohmann::json ToJson() const;  // {"route", "pool", "score", "reason", ...}
};

// Resolves a job replica (`job:` in the policy) to its OpenAI endpoint URL.
using JobResolver = std::function<Result<std::string>(const std::string& job)>;

struct RouterOptions {
  JobResolver job_resolver;  // without one, a policy with job replicas is rejected
  // Monotonic time for ejections, session pins and health-check intervals
  // (null: Clock::Real()); tests pass a ManualClock and advance it. Must
  // outlive the router.
  Clock* clock = nullptr;
  bool active_health_checks = true;  // probe replicas in a background thread
};

struct PoolStats {
  std::string pool;
  uint32_t healthy_replicas = 0;  // healthy and not ejected
  uint32_t total_replicas = 0;
  uint64_t requests = 0;
  uint32_t in_flight = 0;
  uint64_t errors = 0;
  uint64_t tokens = 0;
  uint64_t ejections = 0;
};

struct RouteStats {
  std::string route;
  uint64_t decisions = 0;
};

struct RouterStats {
  std::vector<PoolStats> pools;
  std::vector<RouteStats> routes;
  uint64_t requests = 0;
  double overhead_us_p50 = 0;  // classify + pick replica, microseconds
  double overhead_us_p99 = 0;
  uint64_t policy_generation = 0;
  nlohmann::json ToJson() const;
};

class Router {
 public:
  // Installs `policy` (which must be valid; job replicas are resolved now).
  static Result<std::unique_ptr<Router>> Create(std::shared_ptr<const RoutingPolicy> policy,
                                                RouterOptions options = {});
  ~Router();
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  // ---- Policy ----
  std::shared_ptr<const RoutingPolicy> policy() const;
  uint64_t policy_generation() const;
  Status ApplyPolicy(std::shared_ptr<const RoutingPolicy> policy);
  // Parses `yaml` (errors as FILE:LINE:COL) and, when `apply`, installs it.
  PolicyParseResult ApplyPolicyYaml(std::string_view yaml, const std::string& file_name, bool apply,
                                    const PolicyParseOptions& options = {});
  static PolicyParseResult ValidatePolicy(std::string_view yaml, const std::string& file_name,
                                          const PolicyParseOptions& options = {});

  // ---- Deployment instances (`instance: NAME` pools) ----
  // Replaces the endpoints of the named instances (others keep theirs) and
  // re-installs the running policy, so `instance:` pools follow replicas that
  // moved; replica state of unchanged URLs survives. Each URL must parse as a
  // replica URL (nothing is installed otherwise).
  Status SetInstanceEndpoints(const std::map<std::string, std::vector<std::string>>& endpoints);
  std::map<std::string, std::vector<std::string>> InstanceEndpoints() const;

  // ---- Decisions ----
  // The decision for one OpenAI request body. Reads session pins (a pinned
  // session reports its pin) but never creates them, and takes no load.
  // `assume_healthy`: ignore replica health (the CLI's --classify, which has no
  // live pools); otherwise a down or saturated pool's fallback is reported.
  Result<RouteDecision> Classify(const nlohmann::json& request, const HeaderLookup& headers = {},
                                 bool assume_healthy = false) const;
  Result<RouteDecision> ClassifyJson(std::string_view request_json) const;

  // ---- Statistics ----
  RouterStats Stats() const;
  std::string MetricsText() const;  // Prometheus text exposition format

  // Internal: the gateway's access to routing with replica leases.
  RouterCore& core() { return *core_; }

 private:
  explicit Router(std::unique_ptr<RouterCore> core);
  std::unique_ptr<RouterCore> core_;
};

// Polls a policy file and applies it when its contents change; an invalid file
// is logged with its FILE:LINE:COL errors and the running policy stays.
class PolicyFileWatcher {
 public:
  // `on_result` (optional) sees every reload attempt (for logs and tests).
  using Callback = std::function<void(const PolicyParseResult& result, const Status& applied)>;
  PolicyFileWatcher(Router* router, std::string path, int64_t interval_ms, Callback on_result = {});
  ~PolicyFileWatcher();  // stops and joins the polling thread
  PolicyFileWatcher(const PolicyFileWatcher&) = delete;
  PolicyFileWatcher& operator=(const PolicyFileWatcher&) = delete;

  // Reads the file now and applies it if it changed since the last apply.
  void CheckNow();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace octet::router
