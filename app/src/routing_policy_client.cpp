#include "octet/app/routing_policy_client.h"

#include <httplib.h>

#include <algorithm>
#include <regex>

#include "octet/base/http/client_error.h"
#include "octet/base/json.h"
#include "octet/router/policy.h"
#include "octet/router/router.h"

namespace octet::app {

namespace {

using nlohmann::json;

PolicyIssue FromRouter(const router::PolicyError& e) {
  return {e.line, e.column, e.message, e.ToString()};
}

// Job replicas have no address when nothing is contacted: a reserved .invalid
// name stands in so the policy can be installed (as `octet route --classify`).
Result<std::string> OfflineJobResolver(const std::string& job) {
  return std::string("http://") + job + ".job.invalid:1";
}

RoutingDecision FromJson(const json& j) {
  RoutingDecision d;
  d.route = j.value("route", "");
  d.pool = j.value("pool", "");
  d.reason = j.value("reason", "");
  if (auto it = j.find("score"); it != j.end() && it->is_number()) d.score = it->get<double>();
  d.sticky = j.value("sticky", false);
  d.fallback = j.value("fallback", false);
  d.replica = j.value("replica", "");
  return d;
}

// A client for `base_url` whose timeouts end at `deadline`.
Result<std::unique_ptr<httplib::Client>> MakeClient(const std::string& base_url,
                                                    Deadline deadline) {
  if (base_url.rfind("http://", 0) != 0) {
    return InvalidArgumentError("router address '" + base_url +
                                "' must be http://HOST:PORT (the gateway of `octet route`)");
  }
  auto client = std::make_unique<httplib::Client>(base_url);
  if (!client->is_valid()) return InvalidArgumentError("bad router address '" + base_url + "'");
  const int ms = deadline.is_never() ? 10'000 : std::max(1, deadline.poll_timeout_ms());
  client->set_connection_timeout(std::chrono::milliseconds(ms));
  client->set_read_timeout(std::chrono::milliseconds(ms));
  client->set_write_timeout(std::chrono::milliseconds(ms));
  return client;
}

Status HttpError(const std::string& base_url, const std::string& what, const httplib::Result& r) {
  if (!r) {
    return UnavailableError("router " + base_url + ": " + what + ": " +
                            http::ClientErrorText(r.error()));
  }
  std::string message = r->body;
  json j = json::parse(r->body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object())
    message = j["error"].value("message", r->body);
  const std::string text =
      "router " + base_url + ": " + what + ": HTTP " + std::to_string(r->status) + ": " + message;
  if (r->status == 403) return PermissionDeniedError(text);
  if (r->status == 400 || r->status == 422) return InvalidArgumentError(text);
  return UnavailableError(text);
}

}  // namespace

PolicyIssue ParsePolicyIssue(const std::string& text) {
  static const std::regex kPattern(R"(^(.*):(\d+):(\d+): (.*)$)");
  std::smatch m;
  PolicyIssue issue;
  issue.text = text;
  if (std::regex_match(text, m, kPattern)) {
    issue.line = std::stoi(m[2].str());
    issue.column = std::stoi(m[3].str());
    issue.message = m[4].str();
  } else {
    issue.message = text;
  }
  return issue;
}

PolicyCheck CheckRoutingPolicy(std::string_view yaml, const std::string& file_name) {
  PolicyCheck out;
  const router::PolicyParseResult r = router::ParsePolicy(yaml, file_name);
  out.valid = r.ok();
  for (const auto& e : r.errors) out.errors.push_back(FromRouter(e));
  if (r.ok()) {
    for (const auto& p : r.policy->pools) out.pools.push_back(p.name);
    for (const auto& c : r.policy->classifiers) out.classifiers.push_back(c.name);
    for (const auto& rt : r.policy->routes) out.routes.push_back(rt.name);
  }
  return out;
}

std::string ChatRequestJson(const std::string& prompt, const std::string& system_prompt,
                            const std::string& model) {
  json messages = json::array();
  if (!system_prompt.empty()) messages.push_back({{"role", "system"}, {"content", system_prompt}});
  messages.push_back({{"role", "user"}, {"content", prompt}});
  json body{{"messages", messages}};
  if (!model.empty()) body["model"] = model;
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<RoutingDecision> DecideOffline(std::string_view yaml, const std::string& file_name,
                                      const std::string& request_json) {
  const router::PolicyParseResult r = router::ParsePolicy(yaml, file_name);
  if (!r.ok()) return r.status();
  router::RouterOptions options;
  options.active_health_checks = false;
  options.job_resolver = OfflineJobResolver;
  OCTET_ASSIGN_OR_RETURN(auto router, router::Router::Create(r.policy, options));
  json request = json::parse(request_json, nullptr, false);
  if (request.is_discarded() || !request.is_object())
    return InvalidArgumentError("the request is not a JSON object");
  OCTET_ASSIGN_OR_RETURN(router::RouteDecision d,
                         router->Classify(request, {}, /*assume_healthy=*/true));
  return FromJson(d.ToJson());
}

Result<PolicyApplyResult> SendPolicyToRouter(const std::string& base_url, std::string_view yaml,
                                             bool apply, Deadline deadline,
                                             const std::string& admin_token) {
  OCTET_ASSIGN_OR_RETURN(auto client, MakeClient(base_url, deadline));
  httplib::Headers headers;
  if (!admin_token.empty()) headers.emplace("Authorization", "Bearer " + admin_token);
  const std::string path = std::string("/v1/router/policy?apply=") + (apply ? "true" : "false");
  auto r = client->Post(path, headers, std::string(yaml), "application/yaml");
  if (!r || (r->status != 200 && r->status != 422)) return HttpError(base_url, "policy", r);
  json j = json::parse(r->body, nullptr, false);
  if (!j.is_object()) return DataLossError("router " + base_url + ": policy: reply is not JSON");
  PolicyApplyResult out;
  out.valid = j.value("valid", false);
  out.applied = j.value("applied", false);
  out.policy_generation = j.value("policy_generation", uint64_t{0});
  if (auto it = j.find("errors"); it != j.end() && it->is_array()) {
    for (const auto& e : *it) {
      if (e.is_string()) out.errors.push_back(ParsePolicyIssue(e.get<std::string>()));
    }
  }
  return out;
}

Result<std::string> FetchRouterPolicy(const std::string& base_url, Deadline deadline,
                                      const std::string& admin_token) {
  OCTET_ASSIGN_OR_RETURN(auto client, MakeClient(base_url, deadline));
  httplib::Headers headers;
  if (!admin_token.empty()) headers.emplace("Authorization", "Bearer " + admin_token);
  auto r = client->Get("/v1/router/policy", headers);
  if (!r || r->status != 200) return HttpError(base_url, "policy", r);
  return r->body;
}

Result<RoutingDecision> DecideOnRouter(const std::string& base_url, const std::string& request_json,
                                       Deadline deadline) {
  OCTET_ASSIGN_OR_RETURN(auto client, MakeClient(base_url, deadline));
  auto r = client->Post("/v1/route", request_json, "application/json");
  if (!r || r->status != 200) return HttpError(base_url, "route", r);
  json j = json::parse(r->body, nullptr, false);
  if (!j.is_object()) return DataLossError("router " + base_url + ": route: reply is not JSON");
  return FromJson(j);
}

}  // namespace octet::app
