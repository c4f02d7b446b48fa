// Editing deployment files; see deployment_edit.h.
#include "octet/app/deployment_edit.h"

#include <yaml-cpp/yaml.h>

#include "octet/base/file_util.h"
#include "octet/router/policy.h"

namespace octet::app {

namespace {

// The router's policy as the file should name it: relative when it lies in
// the file's folder (ParseDeployment resolves it against that folder).
std::string PolicyAsWritten(const std::string& policy, const std::string& file_path) {
  const std::string dir = DirName(file_path);
  if (dir.empty() || policy.empty()) return policy;
  const std::string base = BaseName(policy);
  if (!base.empty() && JoinPath(dir, base) == policy) return base;
  return policy;
}

}  // namespace

std::string DeploymentToYaml(const Deployment& d, const std::string& file_path) {
  const DeployInstanceSpec defaults;
  YAML::Emitter e;
  e.SetIndent(2);
  e << YAML::Comment("Octet deployment: octet deploy check|apply FILE --cluster NAME");
  e << YAML::Newline;
  e << YAML::BeginMap;
  e << YAML::Key << "version" << YAML::Value << d.version;
  e << YAML::Key << "name" << YAML::Value << d.name;
  e << YAML::Key << "instances" << YAML::Value << YAML::BeginSeq;
  for (const auto& i : d.instances) {
    e << YAML::BeginMap;
    e << YAML::Key << "name" << YAML::Value << i.name;
    e << YAML::Key << "model" << YAML::Value << i.model;
    e << YAML::Key << "tp" << YAML::Value << i.tp;
    e << YAML::Key << "replicas" << YAML::Value << i.replicas;
    if (!i.nodes.empty()) {
      e << YAML::Key << "nodes" << YAML::Value << YAML::Flow << YAML::BeginSeq;
      for (const auto& n : i.nodes) e << n;
      e << YAML::EndSeq;
    }
    auto text = [&](const char* key, const std::string& v, const std::string& def) {
      if (v != def) e << YAML::Key << key << YAML::Value << v;
    };
    auto number = [&](const char* key, int v, int def) {
      if (v != def) e << YAML::Key << key << YAML::Value << v;
    };
    text("transport", i.transport, defaults.transport);
    text("algorithm", i.algorithm, defaults.algorithm);
    text("kv_memory", i.kv_memory, defaults.kv_memory);
    text("kv_dtype", i.kv_dtype, defaults.kv_dtype);
    number("slots", i.num_slots, defaults.num_slots);
    number("context", i.context, defaults.context);
    text("speculative", i.speculative, defaults.speculative);
    number("draft_tokens", i.draft_tokens, defaults.draft_tokens);
    text("backend", i.backend, defaults.backend);
    number("threads", i.threads, defaults.threads);
    text("served_model_name", i.served_model_name, defaults.served_model_name);
    e << YAML::EndMap;
  }
  e << YAML::EndSeq;
  if (d.router.present) {
    e << YAML::Key << "router" << YAML::Value << YAML::BeginMap;
    e << YAML::Key << "policy" << YAML::Value << PolicyAsWritten(d.router.policy, file_path);
    if (!d.router.node.empty()) e << YAML::Key << "node" << YAML::Value << d.router.node;
    if (d.router.port != 0) e << YAML::Key << "port" << YAML::Value << d.router.port;
    e << YAML::EndMap;
  }
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

bool SameDeployment(const Deployment& a, const Deployment& b, std::string* difference) {
  auto differ = [&](const std::string& what) {
    if (difference) *difference = what;
    return false;
  };
  if (a.version != b.version) return differ("version");
  if (a.name != b.name) return differ("name");
  if (a.instances.size() != b.instances.size()) return differ("the number of instances");
  for (size_t k = 0; k < a.instances.size(); ++k) {
    const auto& x = a.instances[k];
    const auto& y = b.instances[k];
    const std::string at = "instance " + std::to_string(k + 1) + " ('" + x.name + "'): ";
    if (x.name != y.name) return differ(at + "name");
    if (x.model != y.model) return differ(at + "model");
    if (x.tp != y.tp) return differ(at + "tp");
    if (x.replicas != y.replicas) return differ(at + "replicas");
    if (x.nodes != y.nodes) return differ(at + "nodes");
    if (x.transport != y.transport) return differ(at + "transport");
    if (x.algorithm != y.algorithm) return differ(at + "algorithm");
    if (x.kv_memory != y.kv_memory) return differ(at + "kv_memory");
    if (x.kv_dtype != y.kv_dtype) return differ(at + "kv_dtype");
    if (x.num_slots != y.num_slots) return differ(at + "slots");
    if (x.context != y.context) return differ(at + "context");
    if (x.speculative != y.speculative) return differ(at + "speculative");
    if (x.draft_tokens != y.draft_tokens) return differ(at + "draft_tokens");
    if (x.backend != y.backend) return differ(at + "backend");
    if (x.threads != y.threads) return differ(at + "threads");
    if (x.served_model_name != y.served_model_name) return differ(at + "served_model_name");
  }
  if (a.router.present != b.router.present) return differ("router");
  if (a.router.present) {
    if (a.router.policy != b.router.policy) return differ("router policy");
    if (a.router.node != b.router.node) return differ("router node");
    if (a.router.port != b.router.port) return differ("router port");
  }
  return true;
}

RouterPolicyCheck CheckRouterPolicy(const Deployment& d) {
  RouterPolicyCheck out;
  if (!d.router.present) return out;
  const router::PolicyParseResult r = router::LoadPolicyFile(d.router.policy);
  if (!r.ok()) {
    for (const auto& e : r.errors) out.errors.push_back(e.ToString());
    return out;
  }
  for (const auto& pool : r.policy->pools) {
    out.pools.emplace_back(pool.name, pool.instance);
    if (!pool.instance.empty() && !d.Find(pool.instance)) {
      out.errors.push_back(d.router.policy + ":" + std::to_string(pool.location.line) + ":" +
                           std::to_string(pool.location.column) + ": pool '" + pool.name +
                           "' names instance '" + pool.instance +
                           "', which the deployment does not have");
    }
  }
  return out;
}

std::string PolicyForInstances(const Deployment& d) {
  YAML::Emitter e;
  e.SetIndent(2);
  e << YAML::Comment("Routing policy of deployment '" + d.name +
                     "': one pool per instance (octet deploy tells the router their replicas)");
  e << YAML::Newline;
  e << YAML::BeginMap;
  e << YAML::Key << "version" << YAML::Value << 1;
  e << YAML::Key << "gateway" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "host" << YAML::Value << "0.0.0.0";
  e << YAML::Key << "port" << YAML::Value << 0;
  e << YAML::EndMap;
  e << YAML::Key << "pools" << YAML::Value << YAML::BeginSeq;
  for (size_t k = 0; k < d.instances.size(); ++k) {
    const auto& i = d.instances[k];
    e << YAML::BeginMap;
    e << YAML::Key << "name" << YAML::Value << i.name;
    e << YAML::Key << "instance" << YAML::Value << i.name;
    if (k > 0) e << YAML::Key << "fallback" << YAML::Value << d.instances[0].name;
    e << YAML::EndMap;
  }
  e << YAML::EndSeq;
  e << YAML::Key << "routes" << YAML::Value << YAML::BeginSeq;
  for (const auto& i : d.instances) {
    e << YAML::BeginMap;
    e << YAML::Key << "name" << YAML::Value << i.name;
    e << YAML::Key << "match" << YAML::Value << YAML::BeginMap;
    e << YAML::Key << "model" << YAML::Value << YAML::Flow << YAML::BeginSeq << i.name;
    if (!i.served_model_name.empty() && i.served_model_name != i.name) e << i.served_model_name;
    e << YAML::EndSeq << YAML::EndMap;
    e << YAML::Key << "pool" << YAML::Value << i.name;
    e << YAML::EndMap;
  }
  if (!d.instances.empty()) {
    e << YAML::BeginMap;
    e << YAML::Key << "name" << YAML::Value << "default";
    e << YAML::Key << "pool" << YAML::Value << d.instances[0].name;
    e << YAML::EndMap;
  }
  e << YAML::EndSeq;
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

}  // namespace octet::app
