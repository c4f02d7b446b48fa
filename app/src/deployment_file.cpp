// The deployment file; see deployment_file.h.
#include "octet/app/deployment_file.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <utility>

#include "octet/base/args.h"
#include "octet/base/file_util.h"
#include "octet/router/yaml_checker.h"
#include "octet/router/yaml_guard.h"

namespace octet::app {

std::string DeploymentError::ToString() const {
  return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message;
}

Status DeploymentParseResult::status() const {
  if (ok()) return Status::Ok();
  std::string all;
  for (const auto& e : errors) all += (all.empty() ? "" : "\n") + e.ToString();
  return InvalidArgumentError(all);
}

int Deployment::replica_count() const {
  int n = 0;
  for (const auto& i : instances) n += i.replicas;
  return n;
}

int Deployment::node_count() const {
  int n = 0;
  for (const auto& i : instances) n += i.tp * i.replicas;
  return n;
}

const DeployInstanceSpec* Deployment::Find(std::string_view instance) const {
  for (const auto& i : instances) {
    if (i.name == instance) return &i;
  }
  return nullptr;
}

namespace {

using YAML::Node;

using router::DescribeNode;
using router::FindField;
using router::QuoteValue;
using router::YamlLocation;
using Loc = router::SourceLocation;
using Field = router::YamlField;
using Checker = router::YamlChecker;

// The checker's errors as this header's type (app's public headers do not
// include the router's, so ui does not depend on it).
std::vector<DeploymentError> TakeErrors(Checker& c) {
  std::vector<DeploymentError> out;
  for (auto& e : c.TakeErrors())
    out.push_back({std::move(e.file), e.line, e.column, std::move(e.message)});
  return out;
}

const std::vector<std::string> kTopKeys = {"version", "name", "instances", "router"};
const std::vector<std::string> kInstanceKeys = {
    "name",         "model",     "tp",        "replicas",
    "nodes",        "transport", "algorithm", "kv_memory",
    "kv_dtype",     "slots",     "context",   "speculative",
    "draft_tokens", "backend",   "threads",   "served_model_name"};
const std::vector<std::string> kRouterKeys = {"policy", "node", "port"};

void ParseInstance(Checker& c, const Node& node, Loc where, int index, DeployInstanceSpec* in) {
  const Loc nl = YamlLocation(node).line ? YamlLocation(node) : where;
  in->line = nl.line;
  in->column = nl.column;
  std::string what = "instance " + std::to_string(index + 1);
  // Named in messages by its name when it has one, even before it is checked.
  if (node.IsMap() && node["name"] && node["name"].IsScalar() && !node["name"].Scalar().empty())
    what = "instance " + QuoteValue(node["name"].Scalar());
  std::map<std::string, Field> m;
  if (!c.ReadMap(node, where, what, kInstanceKeys, &m)) return;
  if (auto* f = FindField(m, "name")) {
    // NAME-R.<suffix> must fit an agent job id with the deployment's name.
    if (c.Name(*f, &in->name, 20, /*allow_dots=*/false)) what = "instance '" + in->name + "'";
  } else {
    c.Error(nl, "missing required key 'name' in " + what);
  }
  if (auto* f = FindField(m, "model"))
    c.NonEmptyString(*f, &in->model);
  else
    c.Error(nl, "missing required key 'model' in " + what + " (the model folder on the nodes)");
  bool counts_ok = true;  // the node count below is checked against valid numbers only
  if (auto* f = FindField(m, "tp")) counts_ok = c.Integer(*f, &in->tp, 1, 8) && counts_ok;
  if (auto* f = FindField(m, "replicas"))
    counts_ok = c.Integer(*f, &in->replicas, 1, 8) && counts_ok;
  if (auto* f = FindField(m, "nodes")) {
    if (!f->value.IsSequence()) {
      c.Error(f->loc, "'nodes' of " + what + " must be a list of node names, got " +
                          DescribeNode(f->value));
    } else {
      std::set<std::string> seen;
      for (const auto& n : f->value) {
        const Loc l = YamlLocation(n).line ? YamlLocation(n) : f->loc;
        if (!n.IsScalar() || n.Scalar().empty()) {
          c.Error(l, "'nodes' of " + what + ": a node name expected, got " + DescribeNode(n));
          continue;
        }
        if (!seen.insert(n.Scalar()).second) {
          c.Error(l, "'nodes' of " + what + " names " + QuoteValue(n.Scalar()) +
                         " twice; each rank of each replica needs a node of its own");
        }
        in->nodes.push_back(n.Scalar());
      }
      const size_t want = static_cast<size_t>(in->tp) * in->replicas;
      if (in->nodes.size() != want && counts_ok) {
        c.Error(f->loc, "'nodes' of " + what + " lists " + std::to_string(in->nodes.size()) +
                            " nodes, but " + std::to_string(in->replicas) + " replica" +
                            (in->replicas == 1 ? "" : "s") + " x TP " + std::to_string(in->tp) +
                            " need " + std::to_string(want));
      }
    }
  }
  if (auto* f = FindField(m, "transport")) c.Choice(*f, {"tcp", "verbs", "shm"}, &in->transport);
  if (auto* f = FindField(m, "algorithm"))
    c.Choice(*f, {"auto", "oneshot", "ring", "nccl"}, &in->algorithm);
  if (auto* f = FindField(m, "kv_memory")) {
    if (c.NonEmptyString(*f, &in->kv_memory)) {
      auto b = ParseByteSize(in->kv_memory);
      if (!b.ok() || *b <= 0)
        c.Error(f->loc, "'kv_memory' must be a size like 4GiB, got " + QuoteValue(in->kv_memory));
      else
        in->kv_memory_bytes = *b;
    }
  }
  if (auto* f = FindField(m, "kv_dtype")) c.Choice(*f, {"f32", "f16"}, &in->kv_dtype);
  if (auto* f = FindField(m, "slots")) c.Integer(*f, &in->num_slots, 1, 256);
  if (auto* f = FindField(m, "context")) c.Integer(*f, &in->context, 2, 1 << 20);
  if (auto* f = FindField(m, "speculative"))
    c.Choice(*f, {"off", "ngram", "mtp"}, &in->speculative);
  if (auto* f = FindField(m, "draft_tokens")) c.Integer(*f, &in->draft_tokens, 1, 8);
  if (auto* f = FindField(m, "backend"))
    c.Choice(*f, {"auto", "cuda", "avx512-amx", "avx512-rows", "avx512", "avx2", "neon", "scalar"},
             &in->backend);
  if (auto* f = FindField(m, "threads")) c.Integer(*f, &in->threads, 1, 4096);
  if (auto* f = FindField(m, "served_model_name")) c.Name(*f, &in->served_model_name, 256, true);
}

}  // namespace

DeploymentParseResult ParseDeployment(std::string_view yaml, const std::string& file_name) {
  DeploymentParseResult result;
  Checker c(file_name);
  const router::YamlShapeIssue shape = router::CheckYamlShape(yaml);
  if (!shape.ok()) {
    c.Error({shape.line, shape.column}, shape.message);
    result.errors = TakeErrors(c);
    return result;
  }
  Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    c.Error({e.mark.line + 1, e.mark.column + 1}, "YAML syntax: " + e.msg);
    result.errors = TakeErrors(c);
    return result;
  }
  auto d = std::make_shared<Deployment>();
  d->source_file = file_name;
  std::map<std::string, Field> top;
  if (!root || root.IsNull()) {
    c.Error({1, 1}, "the file is empty; a deployment needs 'version', 'name' and 'instances'");
  } else if (c.ReadMap(root, {1, 1}, "the deployment", kTopKeys, &top)) {
    const Loc rl = YamlLocation(root).line ? YamlLocation(root) : Loc{1, 1};
    if (auto* f = FindField(top, "version")) {
      if (c.Integer(*f, &d->version, 0, 1000) && d->version != 1)
        c.Error(f->loc, "'version' " + std::to_string(d->version) +
                            " is not known to this octet; version 1 is");
    } else {
      c.Error(rl, "missing required key 'version' (1) in the deployment");
    }
    if (auto* f = FindField(top, "name"))
      c.Name(*f, &d->name, 24, /*allow_dots=*/false);
    else
      c.Error(rl, "missing required key 'name' in the deployment");
    const Field* inst = FindField(top, "instances");
    if (!inst) {
      c.Error(rl, "missing required key 'instances' in the deployment");
    } else if (!inst->value.IsSequence() || inst->value.size() == 0) {
      c.Error(inst->loc, "'instances' must be a non-empty list of instances, got " +
                             DescribeNode(inst->value));
    } else {
      int i = 0;
      std::map<std::string, int> names;  // name -> line
      for (const auto& n : inst->value) {
        DeployInstanceSpec spec;
        ParseInstance(c, n, inst->loc, i++, &spec);
        if (!spec.name.empty()) {
          if (auto it = names.find(spec.name); it != names.end()) {
            c.Error({spec.line, spec.column}, "instance name " + QuoteValue(spec.name) +
                                                  " is used twice (first at line " +
                                                  std::to_string(it->second) + ")");
          } else {
            names[spec.name] = spec.line;
          }
        }
        d->instances.push_back(std::move(spec));
      }
      // A node named by two instances.
      std::map<std::string, std::string> owner;
      for (const auto& spec : d->instances) {
        for (const auto& node : spec.nodes) {
          auto [it, fresh] = owner.emplace(node, spec.name);
          if (!fresh && it->second != spec.name) {
            c.Error({spec.line, spec.column},
                    "node " + QuoteValue(node) + " is given to instance " + QuoteValue(it->second) +
                        " and to instance " + QuoteValue(spec.name) +
                        "; replicas need nodes of their own");
          }
        }
      }
    }
    if (auto* f = FindField(top, "router")) {
      std::map<std::string, Field> r;
      d->router.present = true;
      d->router.line = f->loc.line;
      d->router.column = f->loc.column;
      if (c.ReadMap(f->value, f->loc, "'router'", kRouterKeys, &r)) {
        if (auto* p = FindField(r, "policy")) {
          if (c.NonEmptyString(*p, &d->router.policy) && d->router.policy.front() != '/') {
            const std::string dir = DirName(file_name);
            d->router.policy = JoinPath(dir.empty() ? "." : dir, d->router.policy);
          }
        } else {
          c.Error(f->loc, "missing required key 'policy' in 'router' (a routing policy file)");
        }
        if (auto* p = FindField(r, "node")) c.NonEmptyString(*p, &d->router.node);
        if (auto* p = FindField(r, "port")) c.Integer(*p, &d->router.port, 0, 65535);
      }
    }
  }
  result.errors = TakeErrors(c);
  if (result.errors.empty()) result.deployment = std::move(d);
  return result;
}

DeploymentParseResult LoadDeploymentFile(const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) {
    DeploymentParseResult r;
    r.errors.push_back({path, 0, 0, text.status().message()});
    return r;
  }
  return ParseDeployment(*text, path);
}

}  // namespace octet::app
