// The routing policy editor's back end, without Qt: validation with the
// router's own validator (the same errors, at the same line:col, as
// `octet route --check`), routing decisions under a policy that is only in the
// editor (nothing is contacted: replicas are assumed healthy, as in
// `octet route --classify`), and the admin calls of a running router gateway
// (`octet route`): read its policy, validate or apply (hot reload) a new one,
// ask for a decision.
//
// Thread-safety: every function is independent; call them from a worker
// thread (validation loads the classifier weights the policy names; the HTTP
// calls block until their deadline).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "octet/base/deadline.h"
#include "octet/base/status.h"

namespace octet::app {

struct PolicyIssue {
  int line = 0;    // 1-based; 0 when the error has no position
  int column = 0;  // 1-based
  std::string message;
  std::string text;  // "FILE:LINE:COL: message"
};

struct PolicyCheck {
  bool valid = false;
  std::vector<PolicyIssue> errors;  // sorted by line and column
  std::vector<std::string> pools;   // valid policies only
  std::vector<std::string> classifiers;
  std::vector<std::string> routes;
};

// Validates policy YAML. `file_name` is used in messages and relative paths
// (classifier weights) resolve against its folder.
PolicyCheck CheckRoutingPolicy(std::string_view yaml, const std::string& file_name);

struct RoutingDecision {
  std::string route;
  std::string pool;
  double score = -1;  // classifier score in [0, 1]; -1 when no classifier was consulted
  std::string reason;
  bool sticky = false;
  bool fallback = false;
  std::string replica;  // filled only by a running router that picked one
};

// An OpenAI chat request body for one user prompt (and an optional system prompt).
std::string ChatRequestJson(const std::string& prompt, const std::string& system_prompt = "",
                            const std::string& model = "");

// The decision the policy in `yaml` makes for `request_json`, offline.
// InvalidArgument with every policy error when the policy is not valid.
Result<RoutingDecision> DecideOffline(std::string_view yaml, const std::string& file_name,
                                      const std::string& request_json);

// ---- a running router: base_url "http://host:port" ----
struct PolicyApplyResult {
  bool valid = false;
  bool applied = false;
  std::vector<PolicyIssue> errors;
  uint64_t policy_generation = 0;  // the router's generation after the call
};
// POST /v1/router/policy: validates (and with `apply`, installs) `yaml`.
// Only loopback callers, or callers with the admin token, may do this.
Result<PolicyApplyResult> SendPolicyToRouter(const std::string& base_url, std::string_view yaml,
                                             bool apply, Deadline deadline,
                                             const std::string& admin_token = "");
// GET /v1/router/policy: the YAML the router runs.
Result<std::string> FetchRouterPolicy(const std::string& base_url, Deadline deadline,
                                      const std::string& admin_token = "");
// POST /v1/route: the running router's decision (with its live pool health).
Result<RoutingDecision> DecideOnRouter(const std::string& base_url, const std::string& request_json,
                                       Deadline deadline);

// Splits "FILE:LINE:COL: message" (the file may itself contain ':').
PolicyIssue ParsePolicyIssue(const std::string& text);

}  // namespace octet::app
