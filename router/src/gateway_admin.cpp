// The gateway's info and admin endpoints, run on worker threads:
// POST /v1/route (the decision without forwarding), GET /v1/models, GET
// /health, and the admin endpoints /v1/router/policy and
// /v1/router/instances (allowed from loopback or with the admin token).
// /metrics and /v1/router/stats are one-liners in OnRequest (gateway_conn.cpp).
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gateway_impl.h"
#include "octet/base/api_key.h"
#include "octet/base/file_util.h"

namespace octet::router {
namespace {

bool IsLoopback(const std::string& addr) {
  return addr == "127.0.0.1" || addr == "::1" || addr.rfind("127.", 0) == 0 ||
         addr.rfind("::ffff:127.", 0) == 0;
}

}  // namespace

void Gateway::Impl::HandleRoute(const httplib::Request& req, httplib::Response& res) {
  json body = json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    res.status = 400;
    res.set_content(
        OpenAiError("the request body is not a JSON object", "invalid_request_error", 400),
        "application/json");
    return;
  }
  const HeaderLookup headers = [&req](std::string_view name) {
    return req.get_header_value(std::string(name));
  };
  auto d = router->Classify(body, headers);
  if (!d.ok()) {
    res.status = 503;
    res.set_content(OpenAiError(d.status().message(), "unavailable", 503), "application/json");
    return;
  }
  res.set_content(Dump(d->ToJson()), "application/json");
}

// The generation_defaults object a replica announces for `model` in its own
// /v1/models (`octet serve` puts its model's generation_config.json values
// there), or null when it announces none. The answer is the one the health
// checks keep (ReplicaState::models_body); only when there is none, or it is
// older than two refresh periods (health checks off), is the replica asked
// now, within the pool's health-check timeout, and the answer kept.
json Gateway::Impl::ReplicaGenerationDefaults(ReplicaState& replica, const PoolSpec& spec,
                                              const std::string& model, int64_t now_ms) {
  std::string body;
  {
    MutexLock lock(replica.mu);
    if (replica.models_at_ms != 0 &&
        now_ms - replica.models_at_ms < 2 * ReplicaState::kModelsRefreshMs)
      body = replica.models_body;
  }
  if (body.empty()) {
    auto res = replica.Get("/v1/models", spec.health_check.timeout_ms);
    if (!res || res->status != 200) return nullptr;
    body = res->body;
    MutexLock lock(replica.mu);
    replica.models_body = body;
    replica.models_at_ms = now_ms;
  }
  const json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("data") || !doc["data"].is_array()) return nullptr;
  for (const json& m : doc["data"]) {
    if (!m.is_object() || !m.contains("generation_defaults")) continue;
    if (!model.empty() && m.value("id", std::string()) != model) continue;
    const json& g = m["generation_defaults"];
    return g.is_object() ? g : json(nullptr);
  }
  return nullptr;
}

// One entry per model the router answers for: its own name (it may route to
// any pool) and each pool's model. A pool's entry carries the
// generation_defaults of its first available replica (as the health checks
// last saw them; see ReplicaGenerationDefaults), so that a
// client of the router (octet chat, the workbench's chat) shows and applies
// the same defaults as a client of the replica; the router's own name carries
// them only when every pool announces the same.
void Gateway::Impl::HandleModels(httplib::Response& res) {
  auto snap = core->Snapshot();
  const int64_t now = core->NowMs();
  json data = json::array();
  std::set<std::string> seen;
  auto entry = [&](const std::string& id, const std::string& owner) {
    return json{{"id", id}, {"object", "model"}, {"created", started_at}, {"owned_by", owner}};
  };
  std::vector<json> pool_defaults;
  for (size_t i = 0; i < snap->policy->pools.size(); ++i) {
    const PoolSpec& p = snap->policy->pools[i];
    const std::string id = p.model.empty() ? p.name : p.model;
    json defaults = nullptr;
    for (const auto& r : snap->pools[i]->replicas) {
      if (!r->Available(now)) continue;
      defaults = ReplicaGenerationDefaults(*r, p, p.model, now);
      break;
    }
    pool_defaults.push_back(defaults);
    if (id.empty() || !seen.insert(id).second) continue;
    json e = entry(id, "octet-router/" + p.name);
    if (!defaults.is_null()) e["generation_defaults"] = defaults;
    data.push_back(std::move(e));
  }
  const std::string& name = snap->policy->gateway.model_name;
  if (!name.empty() && seen.insert(name).second) {
    json e = entry(name, "octet-router");
    const bool same = !pool_defaults.empty() &&
                      std::all_of(pool_defaults.begin(), pool_defaults.end(),
                                  [&](const json& d) { return d == pool_defaults.front(); });
    if (same && !pool_defaults.front().is_null()) e["generation_defaults"] = pool_defaults.front();
    data.insert(data.begin(), std::move(e));
  }
  res.set_content(Dump(json{{"object", "list"}, {"data", data}}), "application/json");
}

void Gateway::Impl::HandleHealth(httplib::Response& res) {
  const RouterStats s = router->Stats();
  bool any = false;
  json pools = json::array();
  for (const auto& p : s.pools) {
    any = any || p.healthy_replicas > 0;
    pools.push_back({{"pool", p.pool},
                     {"healthy_replicas", p.healthy_replicas},
                     {"total_replicas", p.total_replicas}});
  }
  res.status = any ? 200 : 503;
  res.set_content(Dump(json{{"status", any ? "ok" : "unavailable"}, {"pools", pools}}),
                  "application/json");
}

bool Gateway::Impl::AdminAllowed(const httplib::Request& req) const {
  if (IsLoopback(req.remote_addr)) return true;
  // In constant time: an early exit would tell a caller off loopback how much
  // of a guessed token is right.
  return !options.admin_token.empty() &&
         BearerMatches(req.get_header_value("Authorization"), options.admin_token);
}

// GET: {"instances": {NAME: [URL, ...]}}; POST the same shape to replace the
// endpoints of the instances named (`instance:` pools; octet deploy does it).
void Gateway::Impl::HandleInstances(const httplib::Request& req, httplib::Response& res) {
  if (!AdminAllowed(req)) {
    res.status = 403;
    res.set_content(
        OpenAiError("instance changes are allowed from loopback or with the admin token",
                    "permission_error", 403),
        "application/json");
    return;
  }
  if (req.method == "POST") {
    const json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    std::map<std::string, std::vector<std::string>> endpoints;
    std::string bad;
    if (!body.is_object() || !body.contains("instances") || !body["instances"].is_object()) {
      bad = "the body must be {\"instances\": {\"NAME\": [\"http://HOST:PORT\", ...]}}";
    } else {
      for (const auto& [name, urls] : body["instances"].items()) {
        if (!urls.is_array()) {
          bad = "instance '" + name + "': a list of URLs expected";
          break;
        }
        for (const auto& u : urls) {
          if (!u.is_string()) {
            bad = "instance '" + name + "': every URL must be a string";
            break;
          }
          endpoints[name].push_back(u.get<std::string>());
        }
        endpoints[name];  // an empty list clears the instance
      }
    }
    Status s = bad.empty() ? router->SetInstanceEndpoints(endpoints) : InvalidArgumentError(bad);
    if (!s.ok()) {
      res.status = 400;
      res.set_content(OpenAiError(s.message(), "invalid_request_error", 400), "application/json");
      return;
    }
  }
  json out = json::object();
  for (const auto& [name, urls] : router->InstanceEndpoints()) out[name] = urls;
  res.set_content(Dump(json{{"instances", out}}), "application/json");
}

void Gateway::Impl::HandlePolicy(const httplib::Request& req, httplib::Response& res) {
  if (!AdminAllowed(req)) {
    res.status = 403;
    res.set_content(OpenAiError("policy changes are allowed from loopback or with the admin token",
                                "permission_error", 403),
                    "application/json");
    return;
  }
  if (req.method == "GET") {
    auto p = router->policy();
    res.set_content(p ? p->source_text : "", "application/yaml");
    return;
  }
  const std::string apply_param = req.get_param_value("apply");
  const bool apply = apply_param.empty() || apply_param == "true" || apply_param == "1";
  auto current = router->policy();
  // Relative weights paths resolve against the running policy's folder.
  PolicyParseOptions opts;
  if (current) opts.base_dir = DirName(current->source_file);
  const std::string name = current ? current->source_file : "policy.yaml";
  PolicyParseResult r = router->ApplyPolicyYaml(req.body, name, apply, opts);
  json errors = json::array();
  for (const auto& e : r.errors) errors.push_back(e.ToString());
  res.status = r.ok() ? 200 : 422;
  res.set_content(Dump(json{{"valid", r.ok()},
                            {"applied", r.ok() && apply},
                            {"errors", errors},
                            {"policy_generation", router->policy_generation()}}),
                  "application/json");
}

}  // namespace octet::router
