// The Router API (router.h) around RouterCore: creating one, applying and
// validating policies, instance endpoints, classification without routing,
// and the JSON forms of its decisions and stats. The decisions themselves are
// in router.cpp.
#include <memory>
#include <string>

#include "octet/router/classifier.h"
#include "octet/router/router.h"
#include "router_core.h"

namespace octet::router {

using nlohmann::json;

json RouteDecision::ToJson() const {
  json j{{"route", route},
         {"pool", pool},
         {"score", score >= 0 ? json(score) : json(nullptr)},
         {"reason", reason}};
  if (sticky) j["sticky"] = true;
  if (fallback) j["fallback"] = true;
  if (!replica.empty()) j["replica"] = replica;
  return j;
}

json RouterStats::ToJson() const {
  json pools_json = json::array();
  for (const auto& p : pools)
    pools_json.push_back({{"pool", p.pool},
                          {"healthy_replicas", p.healthy_replicas},
                          {"total_replicas", p.total_replicas},
                          {"requests", p.requests},
                          {"in_flight", p.in_flight},
                          {"errors", p.errors},
                          {"tokens", p.tokens},
                          {"ejections", p.ejections}});
  json routes_json = json::array();
  for (const auto& r : routes)
    routes_json.push_back({{"route", r.route}, {"decisions", r.decisions}});
  return json{{"pools", pools_json},
              {"routes", routes_json},
              {"requests", requests},
              {"overhead_us_p50", overhead_us_p50},
              {"overhead_us_p99", overhead_us_p99},
              {"policy_generation", policy_generation}};
}

Router::Router(std::unique_ptr<RouterCore> core) : core_(std::move(core)) {}
Router::~Router() = default;

Result<std::unique_ptr<Router>> Router::Create(std::shared_ptr<const RoutingPolicy> policy,
                                               RouterOptions options) {
  auto core = std::make_unique<RouterCore>(std::move(options));
  OCTET_RETURN_IF_ERROR(core->Apply(std::move(policy)));
  return std::unique_ptr<Router>(new Router(std::move(core)));
}

std::shared_ptr<const RoutingPolicy> Router::policy() const {
  auto rt = core_->Snapshot();
  return rt ? rt->policy : nullptr;
}

uint64_t Router::policy_generation() const {
  auto rt = core_->Snapshot();
  return rt ? rt->generation : 0;
}

Status Router::ApplyPolicy(std::shared_ptr<const RoutingPolicy> policy) {
  return core_->Apply(std::move(policy));
}

Status Router::SetInstanceEndpoints(
    const std::map<std::string, std::vector<std::string>>& endpoints) {
  return core_->SetInstances(endpoints);
}

std::map<std::string, std::vector<std::string>> Router::InstanceEndpoints() const {
  return core_->Instances();
}

PolicyParseResult Router::ValidatePolicy(std::string_view yaml, const std::string& file_name,
                                         const PolicyParseOptions& options) {
  return ParsePolicy(yaml, file_name, options);
}

PolicyParseResult Router::ApplyPolicyYaml(std::string_view yaml, const std::string& file_name,
                                          bool apply, const PolicyParseOptions& options) {
  PolicyParseResult r = ParsePolicy(yaml, file_name, options);
  if (r.ok() && apply) {
    Status s = core_->Apply(r.policy);
    if (!s.ok()) {
      r.errors.push_back(PolicyError{file_name, 0, 0, s.message()});
      r.policy.reset();
    }
  }
  return r;
}

Result<RouteDecision> Router::Classify(const json& request, const HeaderLookup& headers,
                                       bool assume_healthy) const {
  auto rt = core_->Snapshot();
  if (!rt) return UnavailableError("no routing policy installed");
  if (!request.is_object()) return InvalidArgumentError("a request must be a JSON object");
  const RequestFeatures f = ExtractFeatures(request);
  return core_->Decide(*rt, request, f, headers, assume_healthy, nullptr, nullptr, nullptr);
}

Result<RouteDecision> Router::ClassifyJson(std::string_view request_json) const {
  json request = json::parse(request_json, nullptr, false);
  if (request.is_discarded()) return InvalidArgumentError("the request is not valid JSON");
  return Classify(request);
}

RouterStats Router::Stats() const { return core_->Stats(); }
std::string Router::MetricsText() const { return core_->MetricsText(); }

}  // namespace octet::router
