// A RoutingPolicy is the validated, immutable form of a routing policy YAML file:
// the pools of OpenAI-compatible replicas, the classifiers, the ordered routes,
// session stickiness and the gateway settings. resources/routing/example-policy.yaml
// documents every key.
//
// ParsePolicy() either returns a complete policy or the full list of errors, each
// with the YAML line and column it refers to ("FILE:LINE:COL: message"); a policy
// with any error is never returned, so a half-valid policy can never be applied.
// A RoutingPolicy is immutable once built and shared through
// std::shared_ptr<const RoutingPolicy>: requests hold the snapshot they started
// with while a reload installs a new one.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "octet/base/status.h"
#include "octet/router/yaml_error.h"

namespace octet::router {

class HashedLogisticModel;

// One validation error: ToString() is "FILE:LINE:COL: message".
using PolicyError = YamlError;

// A numeric interval used by route matches: min <= x < max (either side optional).
struct Range {
  std::optional<double> min;  // inclusive
  std::optional<double> max;  // exclusive
  bool Contains(double x) const { return (!min || x >= *min) && (!max || x < *max); }
  bool empty() const { return !min && !max; }
};

enum class LoadBalancing { kLeastRequest, kRoundRobin, kWeightedRandom };
std::string_view LoadBalancingName(LoadBalancing lb);

enum class StickinessMode { kOff, kHeader, kPrefix, kHeaderOrPrefix };
enum class StickinessScope { kSession, kTurn };

struct ReplicaSpec {
  // Exactly one of url / job is set. A job replica names an instance the agent
  // launched; the Router turns it into a URL through its JobResolver.
  std::string url;  // "http://host:port[/base]" or https://...
  std::string job;
  double weight = 1.0;      // > 0; used by weighted_random and least_request
  std::string api_key_env;  // environment variable holding a bearer token, or ""
  SourceLocation location;
};

struct HealthCheckSpec {
  bool enabled = true;
  std::string path = "/health";
  int64_t interval_ms = 2000;
  int64_t timeout_ms = 1000;
  int unhealthy_threshold = 2;  // consecutive failed checks before marking down
  int healthy_threshold = 1;    // consecutive good checks before marking up
};

struct OutlierEjectionSpec {
  int consecutive_failures = 5;     // connection errors / 5xx in a row
  int64_t base_ejection_ms = 5000;  // n-th ejection lasts n * base, capped at max
  int64_t max_ejection_ms = 300000;
  double max_ejected_percent = 100;  // at least one replica may always be ejected
};

struct TimeoutSpec {
  int64_t connect_ms = 2000;
  int64_t first_token_ms = 120000;  // request sent -> first response body byte
  int64_t idle_ms = 60000;          // longest gap between two response chunks
};

struct RetrySpec {
  int attempts = 2;  // extra tries on other replicas before any byte reached the client
  bool on_connect_error = true;
  bool on_5xx = true;
  bool on_429 = true;
};

struct CapacitySpec {
  int nodes_per_replica = 1;
  double requests_per_s = 0;  // per replica; 0 = not given
};

struct PoolSpec {
  std::string name;
  std::string model;  // written into forwarded requests' "model" when set
  std::vector<ReplicaSpec> replicas;
  // `instance: NAME` instead of `replicas`: the replicas of a deployment's
  // instance (`octet deploy`), whose endpoints the router is told through
  // Router::SetInstanceEndpoints (POST /v1/router/instances) and follows as
  // they change. Until told, the pool has no replicas (down).
  std::string instance;
  LoadBalancing load_balancing = LoadBalancing::kLeastRequest;
  int max_in_flight = 0;  // per replica, 0 = unlimited
  std::string fallback;   // pool name or ""
  HealthCheckSpec health_check;
  OutlierEjectionSpec outlier_ejection;
  TimeoutSpec timeouts;
  RetrySpec retries;
  CapacitySpec capacity;
  SourceLocation location;
};

struct ClassifierSpec {
  std::string name;
  std::string type = "hashed_logistic";
  std::string weights_path;  // resolved against the policy file's folder
  double threshold = 0.5;    // the score above which the classifier calls a request hard
  std::shared_ptr<const HashedLogisticModel> model;
  SourceLocation location;
};

struct RouteMatch {
  std::string classifier;  // the classifier whose score `score` tests ("" = none)
  Range score;
  std::optional<bool> hard;  // score >= the classifier's threshold
  Range prompt_tokens;       // approximate: UTF-8 bytes / 4
  Range turns;               // user messages
  Range tools;               // tools offered
  Range tool_call_depth;     // assistant tool-call rounds since the last user message
  std::optional<bool> has_code;
  std::optional<bool> has_math;
  std::vector<std::string> keywords;  // any of them in the last user message (lower case)
  std::vector<std::string> scripts;   // dominant Unicode script of the request
  std::vector<std::string> models;    // the request's "model" field
  std::vector<std::pair<std::string, std::string>> headers;  // name (lower case), value
  bool catch_all() const;
};

struct EscalationSpec {
  std::string pool;            // "" = no escalation
  std::vector<int> on_status;  // upstream statuses that escalate before any byte is sent
  bool sticky = true;          // the session stays on the escalation pool afterwards
};

struct RouteSpec {
  std::string name;
  RouteMatch match;
  std::string pool;
  std::string fallback;  // overrides the pool's own fallback ("" = the pool's)
  EscalationSpec escalate;
  SourceLocation location;
};

struct StickinessSpec {
  StickinessMode mode = StickinessMode::kOff;
  std::string header = "x-session-id";  // lower case
  StickinessScope scope = StickinessScope::kSession;
  int64_t ttl_s = 3600;
  int64_t max_sessions = 100000;
};

struct GatewaySpec {
  std::string host = "127.0.0.1";
  int port = 8080;
  int threads = 320;  // worker threads (non-streaming and https requests, admin endpoints)
  int64_t stream_keepalive_ms = 1000;  // SSE comment while a stream waits (0 = off)
  int64_t max_body_bytes = 16 << 20;
  std::string model_name = "octet-router";  // model id meaning "let the router choose"
  bool watch = true;                        // reload when the file changes
  int64_t watch_interval_ms = 1000;
};

struct RoutingPolicy {
  std::string source_file;  // as given to ParsePolicy (for messages)
  std::string source_text;  // the YAML text
  GatewaySpec gateway;
  std::vector<PoolSpec> pools;
  std::vector<ClassifierSpec> classifiers;
  std::vector<RouteSpec> routes;
  StickinessSpec stickiness;

  const PoolSpec* FindPool(std::string_view name) const;
  const ClassifierSpec* FindClassifier(std::string_view name) const;
};

// The result of parsing: a policy, or (policy == nullptr) every error found,
// sorted by line and column.
struct PolicyParseResult {
  std::shared_ptr<const RoutingPolicy> policy;
  std::vector<PolicyError> errors;
  bool ok() const { return policy != nullptr; }
  // InvalidArgument whose message lists every error, one per line; OK when valid.
  Status status() const;
};

struct PolicyParseOptions {
  // Folder relative weights paths are read from ("" = the folder of file_name).
  std::string base_dir;
  // Load and check classifier weight files (off only for syntax-only checks).
  bool load_classifier_weights = true;
};

// Parses and validates policy YAML. `file_name` is used in error messages and
// to resolve relative paths.
PolicyParseResult ParsePolicy(std::string_view yaml, const std::string& file_name,
                              const PolicyParseOptions& options = {});
// Reads and parses a policy file; a missing file is one error at 0:0.
PolicyParseResult LoadPolicyFile(const std::string& path, const PolicyParseOptions& options = {});

}  // namespace octet::router
