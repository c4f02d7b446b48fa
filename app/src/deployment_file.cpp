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

struct Loc {
  int line = 0, column = 0;
};

Loc LocOf(const Node& n) {
  const YAML::Mark m = n.Mark();
  if (m.line < 0 || m.pos < 0) return {};
  return {m.line + 1, m.column + 1};
}

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// " (did you mean 'replicas'?)" for the nearest known key, or " (known keys: ...)".
std::string Suggest(const std::string& key, const std::vector<std::string>& known) {
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const auto& k : known) {
    const size_t d = EditDistance(key, k);
    if (d < best_d) best_d = d, best = k;
  }
  if (!best.empty() && best_d <= std::max<size_t>(2, best.size() / 3)) {
    return " (did you mean '" + best + "'?)";
  }
  std::string list;
  for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
  return " (known keys: " + list + ")";
}

std::string Describe(const Node& n) {
  if (n.IsMap()) return "a map";
  if (n.IsSequence()) return "a list";
  if (n.IsNull()) return "nothing";
  return "'" + n.Scalar() + "'";
}

struct Field {
  Node value;
  Loc key, loc;
  std::string name;
};

class Checker {
 public:
  explicit Checker(std::string file) : file_(std::move(file)) {}
  void Error(Loc l, std::string msg) {
    errors_.push_back({file_, l.line, l.column, std::move(msg)});
  }
  std::vector<DeploymentError> Take() {
    std::stable_sort(errors_.begin(), errors_.end(), [](const auto& a, const auto& b) {
      return a.line != b.line ? a.line < b.line : a.column < b.column;
    });
    return std::move(errors_);
  }
  bool any() const { return !errors_.empty(); }

  bool ReadMap(const Node& node, Loc where, const std::string& what,
               const std::vector<std::string>& known, std::map<std::string, Field>* out) {
    if (!node.IsMap()) {
      Error(LocOf(node).line ? LocOf(node) : where, what + " must be a map, got " + Describe(node));
      return false;
    }
    for (auto it = node.begin(); it != node.end(); ++it) {
      const Loc kl = LocOf(it->first);
      if (!it->first.IsScalar()) {
        Error(kl, "a key in " + what + " must be a plain name");
        continue;
      }
      const std::string name = it->first.Scalar();
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        Error(kl, "unknown key '" + name + "' in " + what + Suggest(name, known));
        continue;
      }
      if (auto prev = out->find(name); prev != out->end()) {
        Error(kl, "duplicate key '" + name + "' in " + what + " (first at line " +
                      std::to_string(prev->second.key.line) + ")");
        continue;
      }
      Field f;
      f.value = it->second;
      f.key = kl;
      f.loc = LocOf(it->second).line ? LocOf(it->second) : kl;
      f.name = name;
      (*out)[name] = f;
    }
    return true;
  }

  bool String(const Field& f, std::string* out) {
    if (!f.value.IsScalar() || f.value.Scalar().empty()) {
      Error(f.loc, "'" + f.name + "' must be a non-empty string, got " + Describe(f.value));
      return false;
    }
    *out = f.value.Scalar();
    return true;
  }

  // Letters, digits, '-', '_' (and '.' when `dots`): names that become job ids.
  bool Name(const Field& f, std::string* out, size_t max_len, bool dots) {
    if (!String(f, out)) return false;
    for (char c : *out) {
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' ||
            (dots && c == '.'))) {
        Error(f.loc, "'" + f.name + "' must use only letters, digits, '_'" +
                         std::string(dots ? ", '.'" : "") + " and '-', got '" + *out + "'");
        return false;
      }
    }
    if (out->size() > max_len) {
      Error(f.loc, "'" + f.name + "' must be at most " + std::to_string(max_len) +
                       " characters, got " + std::to_string(out->size()));
      return false;
    }
    return true;
  }

  bool Integer(const Field& f, int* out, int lo, int hi) {
    const std::string s = f.value.IsScalar() ? f.value.Scalar() : "";
    char* end = nullptr;
    const long long v = s.empty() ? 0 : std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || end != s.c_str() + s.size()) {
      Error(f.loc, "'" + f.name + "' must be an integer, got " + Describe(f.value));
      return false;
    }
    if (v < lo || v > hi) {
      Error(f.loc, "'" + f.name + "' must be in " + std::to_string(lo) + ".." + std::to_string(hi) +
                       ", got " + s);
      return false;
    }
    *out = static_cast<int>(v);
    return true;
  }

  bool Choice(const Field& f, const std::vector<std::string>& choices, std::string* out) {
    if (!String(f, out)) return false;
    if (std::find(choices.begin(), choices.end(), *out) != choices.end()) return true;
    std::string list;
    for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
    Error(f.loc, "'" + f.name + "' must be one of " + list + ", got '" + *out + "'");
    return false;
  }

 private:
  std::string file_;
  std::vector<DeploymentError> errors_;
};

const Field* Get(const std::map<std::string, Field>& m, const char* key) {
  auto it = m.find(key);
  return it == m.end() ? nullptr : &it->second;
}

const std::vector<std::string> kTopKeys = {"version", "name", "instances", "router"};
const std::vector<std::string> kInstanceKeys = {
    "name",         "model",     "tp",        "replicas",
    "nodes",        "transport", "algorithm", "kv_memory",
    "kv_dtype",     "slots",     "context",   "speculative",
    "draft_tokens", "backend",   "threads",   "served_model_name"};
const std::vector<std::string> kRouterKeys = {"policy", "node", "port"};

void ParseInstance(Checker& c, const Node& node, Loc where, int index, DeployInstanceSpec* in) {
  const Loc nl = LocOf(node).line ? LocOf(node) : where;
  in->line = nl.line;
  in->column = nl.column;
  std::string what = "instance " + std::to_string(index + 1);
  // Named in messages by its name when it has one, even before it is checked.
  if (node.IsMap() && node["name"] && node["name"].IsScalar() && !node["name"].Scalar().empty())
    what = "instance '" + node["name"].Scalar() + "'";
  std::map<std::string, Field> m;
  if (!c.ReadMap(node, where, what, kInstanceKeys, &m)) return;
  if (auto* f = Get(m, "name")) {
    // NAME-R.<suffix> must fit an agent job id with the deployment's name.
    if (c.Name(*f, &in->name, 20, /*dots=*/false)) what = "instance '" + in->name + "'";
  } else {
    c.Error(nl, "missing required key 'name' in " + what);
  }
  if (auto* f = Get(m, "model"))
    c.String(*f, &in->model);
  else
    c.Error(nl, "missing required key 'model' in " + what + " (the model folder on the nodes)");
  bool counts_ok = true;  // the node count below is checked against valid numbers only
  if (auto* f = Get(m, "tp")) counts_ok = c.Integer(*f, &in->tp, 1, 8) && counts_ok;
  if (auto* f = Get(m, "replicas")) counts_ok = c.Integer(*f, &in->replicas, 1, 8) && counts_ok;
  if (auto* f = Get(m, "nodes")) {
    if (!f->value.IsSequence()) {
      c.Error(f->loc,
              "'nodes' of " + what + " must be a list of node names, got " + Describe(f->value));
    } else {
      std::set<std::string> seen;
      for (const auto& n : f->value) {
        const Loc l = LocOf(n).line ? LocOf(n) : f->loc;
        if (!n.IsScalar() || n.Scalar().empty()) {
          c.Error(l, "'nodes' of " + what + ": a node name expected, got " + Describe(n));
          continue;
        }
        if (!seen.insert(n.Scalar()).second) {
          c.Error(l, "'nodes' of " + what + " names '" + n.Scalar() +
                         "' twice; each rank of each replica needs a node of its own");
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
  if (auto* f = Get(m, "transport")) c.Choice(*f, {"tcp", "verbs", "shm"}, &in->transport);
  if (auto* f = Get(m, "algorithm"))
    c.Choice(*f, {"auto", "oneshot", "ring", "nccl"}, &in->algorithm);
  if (auto* f = Get(m, "kv_memory")) {
    if (c.String(*f, &in->kv_memory)) {
      auto b = ParseByteSize(in->kv_memory);
      if (!b.ok() || *b <= 0)
        c.Error(f->loc, "'kv_memory' must be a size like 4GiB, got '" + in->kv_memory + "'");
      else
        in->kv_memory_bytes = *b;
    }
  }
  if (auto* f = Get(m, "kv_dtype")) c.Choice(*f, {"f32", "f16"}, &in->kv_dtype);
  if (auto* f = Get(m, "slots")) c.Integer(*f, &in->num_slots, 1, 256);
  if (auto* f = Get(m, "context")) c.Integer(*f, &in->context, 2, 1 << 20);
  if (auto* f = Get(m, "speculative")) c.Choice(*f, {"off", "ngram", "mtp"}, &in->speculative);
  if (auto* f = Get(m, "draft_tokens")) c.Integer(*f, &in->draft_tokens, 1, 8);
  if (auto* f = Get(m, "backend"))
    c.Choice(*f, {"auto", "cuda", "avx512-amx", "avx512", "avx2", "neon", "scalar"}, &in->backend);
  if (auto* f = Get(m, "threads")) c.Integer(*f, &in->threads, 1, 4096);
  if (auto* f = Get(m, "served_model_name")) c.Name(*f, &in->served_model_name, 256, true);
}

}  // namespace

DeploymentParseResult ParseDeployment(std::string_view yaml, const std::string& file_name) {
  DeploymentParseResult result;
  Checker c(file_name);
  const router::YamlShapeIssue shape = router::CheckYamlShape(yaml);
  if (!shape.ok()) {
    c.Error({shape.line, shape.column}, shape.message);
    result.errors = c.Take();
    return result;
  }
  Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    c.Error({e.mark.line + 1, e.mark.column + 1}, "YAML syntax: " + e.msg);
    result.errors = c.Take();
    return result;
  }
  auto d = std::make_shared<Deployment>();
  d->source_file = file_name;
  std::map<std::string, Field> top;
  if (!root || root.IsNull()) {
    c.Error({1, 1}, "the file is empty; a deployment needs 'version', 'name' and 'instances'");
  } else if (c.ReadMap(root, {1, 1}, "the deployment", kTopKeys, &top)) {
    const Loc rl = LocOf(root).line ? LocOf(root) : Loc{1, 1};
    if (auto* f = Get(top, "version")) {
      if (c.Integer(*f, &d->version, 0, 1000) && d->version != 1)
        c.Error(f->loc, "'version' " + std::to_string(d->version) +
                            " is not known to this octet; version 1 is");
    } else {
      c.Error(rl, "missing required key 'version' (1) in the deployment");
    }
    if (auto* f = Get(top, "name"))
      c.Name(*f, &d->name, 24, /*dots=*/false);
    else
      c.Error(rl, "missing required key 'name' in the deployment");
    const Field* inst = Get(top, "instances");
    if (!inst) {
      c.Error(rl, "missing required key 'instances' in the deployment");
    } else if (!inst->value.IsSequence() || inst->value.size() == 0) {
      c.Error(inst->loc,
              "'instances' must be a non-empty list of instances, got " + Describe(inst->value));
    } else {
      int i = 0;
      std::map<std::string, int> names;  // name -> line
      for (const auto& n : inst->value) {
        DeployInstanceSpec spec;
        ParseInstance(c, n, inst->loc, i++, &spec);
        if (!spec.name.empty()) {
          if (auto it = names.find(spec.name); it != names.end()) {
            c.Error({spec.line, spec.column}, "instance name '" + spec.name +
                                                  "' is used twice (first at line " +
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
            c.Error({spec.line, spec.column}, "node '" + node + "' is given to instance '" +
                                                  it->second + "' and to instance '" + spec.name +
                                                  "'; replicas need nodes of their own");
          }
        }
      }
    }
    if (auto* f = Get(top, "router")) {
      std::map<std::string, Field> r;
      d->router.present = true;
      d->router.line = f->loc.line;
      d->router.column = f->loc.column;
      if (c.ReadMap(f->value, f->loc, "'router'", kRouterKeys, &r)) {
        if (auto* p = Get(r, "policy")) {
          if (c.String(*p, &d->router.policy) && d->router.policy.front() != '/') {
            const std::string dir = DirName(file_name);
            d->router.policy = JoinPath(dir.empty() ? "." : dir, d->router.policy);
          }
        } else {
          c.Error(f->loc, "missing required key 'policy' in 'router' (a routing policy file)");
        }
        if (auto* p = Get(r, "node")) c.String(*p, &d->router.node);
        if (auto* p = Get(r, "port")) c.Integer(*p, &d->router.port, 0, 65535);
      }
    }
  }
  result.errors = c.Take();
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
