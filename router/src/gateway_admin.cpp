// The gateway's info and admin endpoints, run on worker threads:
// POST /v1/route (the decision without forwarding), GET /v1/models, GET
// /health, and the admin endpoints /v1/router/policy and
// /v1/router/instances (allowed from loopback or with the admin token).
// /metrics and /v1/router/stats are one-liners in Dispatch (gateway_conn.cpp).
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

void Gateway::Impl::HandleModels(httplib::Response& res) {
  auto snap = core->Snapshot();
  json data = json::array();
  std::set<std::string> seen;
  auto add = [&](const std::string& id, const std::string& owner) {
    if (id.empty() || !seen.insert(id).second) return;
    data.push_back({{"id", id}, {"object", "model"}, {"created", 0}, {"owned_by", owner}});
  };
  add(snap->policy->gateway.model_name, "octet-router");
  for (const auto& p : snap->policy->pools)
    add(p.model.empty() ? p.name : p.model, "octet-router/" + p.name);
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
