// Policy YAML -> RoutingPolicy, collecting every error with its line and column.
//
// The walk is schema-driven: each map is checked against its allowed keys
// (unknown keys get a did-you-mean), each value against its type and range,
// then names are cross-checked (unknown pool/classifier references, duplicate
// names, fallback cycles, unreachable routes). yaml-cpp exceptions never leave
// this file; a parse error becomes one PolicyError at the parser's mark.
#include "octet/router/policy.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include "octet/base/file_util.h"
#include "octet/router/classifier.h"
#include "octet/router/yaml_checker.h"
#include "octet/router/yaml_guard.h"
#include "replica_url.h"

namespace octet::router {

Status PolicyParseResult::status() const {
  if (ok()) return Status();
  std::string msg;
  for (const auto& e : errors) {
    if (!msg.empty()) msg += "\n";
    msg += e.ToString();
  }
  return InvalidArgumentError(msg);
}

std::string_view LoadBalancingName(LoadBalancing lb) {
  switch (lb) {
    case LoadBalancing::kLeastRequest:
      return "least_request";
    case LoadBalancing::kRoundRobin:
      return "round_robin";
    case LoadBalancing::kWeightedRandom:
      return "weighted_random";
  }
  return "?";
}

bool RouteMatch::catch_all() const {
  return score.empty() && !hard && prompt_tokens.empty() && turns.empty() && tools.empty() &&
         tool_call_depth.empty() && !has_code && !has_math && keywords.empty() && scripts.empty() &&
         models.empty() && headers.empty();
}

const PoolSpec* RoutingPolicy::FindPool(std::string_view name) const {
  for (const auto& p : pools)
    if (p.name == name) return &p;
  return nullptr;
}

const ClassifierSpec* RoutingPolicy::FindClassifier(std::string_view name) const {
  for (const auto& c : classifiers)
    if (c.name == name) return &c;
  return nullptr;
}

namespace {

using YAML::Node;

using Field = YamlField;

// The shared checker, plus the policy's {min, max} ranges.
class Checker : public YamlChecker {
 public:
  using YamlChecker::YamlChecker;

  // {min: a, max: b} with both in [lo, hi] and min <= max.
  bool ReadRange(const Field& f, double lo, double hi, const char* range_text, Range* out) {
    std::map<std::string, Field> m;
    if (!ReadMap(f.value, f.loc, "'" + f.name + "'", {"min", "max"}, &m)) return false;
    if (m.empty()) {
      Error(f.loc, "'" + f.name + "' needs 'min', 'max' or both");
      return false;
    }
    bool ok = true;
    double v = 0;
    if (auto it = m.find("min"); it != m.end()) {
      if (Number(it->second, &v, lo, hi, range_text))
        out->min = v;
      else
        ok = false;
    }
    if (auto it = m.find("max"); it != m.end()) {
      if (Number(it->second, &v, lo, hi, range_text))
        out->max = v;
      else
        ok = false;
    }
    if (ok && out->min && out->max && *out->min > *out->max) {
      Error(m["min"].loc, "'" + f.name + "': min " + std::to_string(*out->min) + " is above max " +
                              std::to_string(*out->max));
      ok = false;
    }
    return ok;
  }
};

// Where a name reference was written, for checks after the whole file is read.
struct PoolRefs {
  SourceLocation name, fallback;
};
struct RouteRefs {
  SourceLocation name, pool, fallback, escalate_pool, classifier, score, hard;
};

void ParseGateway(Checker& c, const Field& f, GatewaySpec* g) {
  std::map<std::string, Field> m;
  if (!c.ReadMap(f.value, f.loc, "'gateway'",
                 {"host", "port", "threads", "stream_keepalive_ms", "max_body_bytes", "model_name",
                  "watch", "watch_interval_ms"},
                 &m))
    return;
  if (auto* v = FindField(m, "host")) c.NonEmptyString(*v, &g->host);
  if (auto* v = FindField(m, "port")) c.Integer(*v, &g->port, 0, 65535);
  if (auto* v = FindField(m, "threads")) c.Integer(*v, &g->threads, 4, 4096);
  if (auto* v = FindField(m, "stream_keepalive_ms"))
    c.Integer(*v, &g->stream_keepalive_ms, 0, 3600000);
  if (auto* v = FindField(m, "max_body_bytes"))
    c.Integer(*v, &g->max_body_bytes, 1024, int64_t{1} << 32);
  if (auto* v = FindField(m, "model_name")) c.NonEmptyString(*v, &g->model_name);
  if (auto* v = FindField(m, "watch")) c.Bool(*v, &g->watch);
  if (auto* v = FindField(m, "watch_interval_ms"))
    c.Integer(*v, &g->watch_interval_ms, 50, 3600000);
}

void ParseReplica(Checker& c, const Node& node, SourceLocation where, const std::string& what,
                  ReplicaSpec* r) {
  const SourceLocation nl = YamlLocation(node);
  r->location = nl.line ? nl : where;
  if (node.IsScalar()) {  // shorthand: just the URL
    r->url = node.Scalar();
    ReplicaUrl parsed;
    std::string err;
    if (!ParseReplicaUrl(r->url, &parsed, &err))
      c.Error(r->location, what + " url " + QuoteValue(r->url) + " " + err);
    return;
  }
  std::map<std::string, Field> m;
  if (!c.ReadMap(node, where, what, {"url", "job", "weight", "api_key_env"}, &m)) return;
  const Field* url = FindField(m, "url");
  const Field* job = FindField(m, "job");
  if (url && job) {
    c.Error(job->key_loc, what + " has both 'url' and 'job'; give one");
  } else if (!url && !job) {
    c.Error(r->location,
            what + " needs 'url' (an OpenAI-compatible endpoint) or 'job' (an agent job)");
  }
  if (url && c.NonEmptyString(*url, &r->url)) {
    ReplicaUrl parsed;
    std::string err;
    if (!ParseReplicaUrl(r->url, &parsed, &err))
      c.Error(url->loc, "'url' " + QuoteValue(r->url) + " " + err);
  }
  if (job) c.Name(*job, &r->job);
  if (auto* v = FindField(m, "weight")) {
    double w = 1;
    if (c.Number(*v, &w, 0, 1e6, "(0, 1e6]")) {
      if (w <= 0)
        c.Error(v->loc, "'weight' must be above 0, got " + v->value.Scalar());
      else
        r->weight = w;
    }
  }
  if (auto* v = FindField(m, "api_key_env")) c.NonEmptyString(*v, &r->api_key_env);
}

void ParsePool(Checker& c, const Node& node, SourceLocation where, PoolSpec* p, PoolRefs* refs) {
  const SourceLocation nl = YamlLocation(node);
  p->location = nl.line ? nl : where;
  std::map<std::string, Field> m;
  if (!c.ReadMap(
          node, where, "a pool",
          {"name", "model", "replicas", "instance", "load_balancing", "max_in_flight", "fallback",
           "health_check", "outlier_ejection", "timeouts", "retries", "capacity"},
          &m))
    return;
  const Field* name = FindField(m, "name");
  if (!name)
    c.Missing(p->location, "name", "a pool");
  else if (c.Name(*name, &p->name))
    refs->name = name->loc;
  const std::string what = p->name.empty() ? std::string("a pool") : "pool '" + p->name + "'";
  if (auto* v = FindField(m, "model")) c.NonEmptyString(*v, &p->model);

  const Field* replicas = FindField(m, "replicas");
  const Field* instance = FindField(m, "instance");
  if (instance && replicas) {
    c.Error(instance->key_loc, what + " has both 'replicas' and 'instance'; give one");
  } else if (instance) {
    c.Name(*instance, &p->instance);
  } else if (!replicas) {
    c.Error(p->location, "missing required key 'replicas' in " + what +
                             " (or 'instance: NAME', a deployment's instance)");
  } else if (!replicas->value.IsSequence()) {
    c.Error(replicas->loc,
            "'replicas' of " + what + " must be a list, got " + DescribeNode(replicas->value));
  } else if (replicas->value.size() == 0) {
    c.Error(replicas->loc,
            "'replicas' of " + what + " is empty; a pool needs at least one replica");
  } else {
    int i = 0;
    for (const auto& r : replicas->value) {
      ReplicaSpec spec;
      ParseReplica(c, r, replicas->loc, "replica " + std::to_string(++i) + " of " + what, &spec);
      p->replicas.push_back(std::move(spec));
    }
  }
  if (auto* v = FindField(m, "load_balancing")) {
    size_t idx = 0;
    if (c.Enum(*v, {"least_request", "round_robin", "weighted_random"}, &idx))
      p->load_balancing = static_cast<LoadBalancing>(idx);
  }
  if (auto* v = FindField(m, "max_in_flight")) c.Integer(*v, &p->max_in_flight, 0, 1000000);
  if (auto* v = FindField(m, "fallback")) {
    if (c.Name(*v, &p->fallback)) refs->fallback = v->loc;
  }
  if (auto* f = FindField(m, "health_check")) {
    std::map<std::string, Field> h;
    auto& hc = p->health_check;
    if (c.ReadMap(f->value, f->loc, "'health_check' of " + what,
                  {"enabled", "path", "interval_ms", "timeout_ms", "unhealthy_threshold",
                   "healthy_threshold"},
                  &h)) {
      if (auto* v = FindField(h, "enabled")) c.Bool(*v, &hc.enabled);
      if (auto* v = FindField(h, "path")) {
        if (c.NonEmptyString(*v, &hc.path) && hc.path.front() != '/')
          c.Error(v->loc, "'path' must start with '/', got " + QuoteValue(hc.path));
      }
      if (auto* v = FindField(h, "interval_ms")) c.Integer(*v, &hc.interval_ms, 10, 3600000);
      if (auto* v = FindField(h, "timeout_ms")) c.Integer(*v, &hc.timeout_ms, 10, 600000);
      if (auto* v = FindField(h, "unhealthy_threshold"))
        c.Integer(*v, &hc.unhealthy_threshold, 1, 100);
      if (auto* v = FindField(h, "healthy_threshold")) c.Integer(*v, &hc.healthy_threshold, 1, 100);
    }
  }
  if (auto* f = FindField(m, "outlier_ejection")) {
    std::map<std::string, Field> o;
    auto& oe = p->outlier_ejection;
    if (c.ReadMap(
            f->value, f->loc, "'outlier_ejection' of " + what,
            {"consecutive_failures", "base_ejection_ms", "max_ejection_ms", "max_ejected_percent"},
            &o)) {
      if (auto* v = FindField(o, "consecutive_failures"))
        c.Integer(*v, &oe.consecutive_failures, 1, 1000);
      if (auto* v = FindField(o, "base_ejection_ms"))
        c.Integer(*v, &oe.base_ejection_ms, 1, 86400000);
      if (auto* v = FindField(o, "max_ejection_ms")) {
        if (c.Integer(*v, &oe.max_ejection_ms, 1, 86400000) &&
            oe.max_ejection_ms < oe.base_ejection_ms)
          c.Error(v->loc, "'max_ejection_ms' (" + std::to_string(oe.max_ejection_ms) +
                              ") is below 'base_ejection_ms' (" +
                              std::to_string(oe.base_ejection_ms) + ")");
      }
      if (auto* v = FindField(o, "max_ejected_percent"))
        c.Number(*v, &oe.max_ejected_percent, 0, 100, "[0, 100]");
    }
  }
  if (auto* f = FindField(m, "timeouts")) {
    std::map<std::string, Field> t;
    auto& to = p->timeouts;
    if (c.ReadMap(f->value, f->loc, "'timeouts' of " + what,
                  {"connect_ms", "first_token_ms", "idle_ms"}, &t)) {
      if (auto* v = FindField(t, "connect_ms")) c.Integer(*v, &to.connect_ms, 1, 600000);
      if (auto* v = FindField(t, "first_token_ms")) c.Integer(*v, &to.first_token_ms, 1, 3600000);
      if (auto* v = FindField(t, "idle_ms")) c.Integer(*v, &to.idle_ms, 1, 3600000);
    }
  }
  if (auto* f = FindField(m, "retries")) {
    std::map<std::string, Field> r;
    auto& rs = p->retries;
    if (c.ReadMap(f->value, f->loc, "'retries' of " + what, {"attempts", "on"}, &r)) {
      if (auto* v = FindField(r, "attempts")) c.Integer(*v, &rs.attempts, 0, 10);
      if (auto* v = FindField(r, "on")) {
        std::vector<std::string> kinds;
        if (c.StringList(*v, &kinds)) {
          rs.on_connect_error = rs.on_5xx = rs.on_429 = false;
          const std::vector<std::string> known = {"connect_error", "5xx", "429"};
          for (const auto& k : kinds) {
            if (k == "connect_error")
              rs.on_connect_error = true;
            else if (k == "5xx")
              rs.on_5xx = true;
            else if (k == "429")
              rs.on_429 = true;
            else
              c.Error(v->loc, "'on' of 'retries' must list connect_error, 5xx or 429, got " +
                                  QuoteValue(k) + DidYouMean(k, known));
          }
        }
      }
    }
  }
  if (auto* f = FindField(m, "capacity")) {
    std::map<std::string, Field> k;
    if (c.ReadMap(f->value, f->loc, "'capacity' of " + what,
                  {"nodes_per_replica", "requests_per_s"}, &k)) {
      if (auto* v = FindField(k, "nodes_per_replica"))
        c.Integer(*v, &p->capacity.nodes_per_replica, 1, 1024);
      if (auto* v = FindField(k, "requests_per_s"))
        c.Number(*v, &p->capacity.requests_per_s, 0, 1e9, "[0, 1e9]");
    }
  }
}

void ParseClassifier(Checker& c, const Node& node, SourceLocation where, ClassifierSpec* cl,
                     SourceLocation* name_loc, SourceLocation* weights_loc) {
  const SourceLocation nl = YamlLocation(node);
  cl->location = nl.line ? nl : where;
  std::map<std::string, Field> m;
  if (!c.ReadMap(node, where, "a classifier", {"name", "type", "weights", "threshold"}, &m)) return;
  const Field* name = FindField(m, "name");
  if (!name)
    c.Missing(cl->location, "name", "a classifier");
  else if (c.Name(*name, &cl->name))
    *name_loc = name->loc;
  const std::string what =
      cl->name.empty() ? std::string("a classifier") : "classifier '" + cl->name + "'";
  if (auto* v = FindField(m, "type")) {
    size_t idx = 0;
    if (c.Enum(*v, {"hashed_logistic"}, &idx)) cl->type = "hashed_logistic";
  }
  const Field* weights = FindField(m, "weights");
  if (!weights)
    c.Missing(cl->location, "weights", what);
  else if (c.NonEmptyString(*weights, &cl->weights_path))
    *weights_loc = weights->loc;
  if (auto* v = FindField(m, "threshold")) c.Number(*v, &cl->threshold, 0, 1, "[0, 1]");
}

void ParseMatch(Checker& c, const Field& f, const std::string& what, RouteMatch* match,
                RouteRefs* refs) {
  std::map<std::string, Field> m;
  if (!c.ReadMap(
          f.value, f.loc, "'match' of " + what,
          {"classifier", "score", "hard", "prompt_tokens", "turns", "tools", "tool_call_depth",
           "has_code", "has_math", "keywords", "script", "model", "headers"},
          &m))
    return;
  if (m.empty())
    c.Error(f.loc, "'match' of " + what + " is empty; leave it out for a catch-all route");
  constexpr double kBig = 1e12;
  if (auto* v = FindField(m, "classifier")) {
    if (c.Name(*v, &match->classifier)) refs->classifier = v->loc;
  }
  if (auto* v = FindField(m, "score")) {
    if (c.ReadRange(*v, 0, 1, "[0, 1]", &match->score)) refs->score = v->loc;
  }
  if (auto* v = FindField(m, "hard")) {
    bool b = false;
    if (c.Bool(*v, &b)) {
      match->hard = b;
      refs->hard = v->loc;
    }
  }
  if (auto* v = FindField(m, "prompt_tokens"))
    c.ReadRange(*v, 0, kBig, "[0, 1e12]", &match->prompt_tokens);
  if (auto* v = FindField(m, "turns")) c.ReadRange(*v, 0, kBig, "[0, 1e12]", &match->turns);
  if (auto* v = FindField(m, "tools")) c.ReadRange(*v, 0, kBig, "[0, 1e12]", &match->tools);
  if (auto* v = FindField(m, "tool_call_depth"))
    c.ReadRange(*v, 0, kBig, "[0, 1e12]", &match->tool_call_depth);
  if (auto* v = FindField(m, "has_code")) {
    bool b = false;
    if (c.Bool(*v, &b)) match->has_code = b;
  }
  if (auto* v = FindField(m, "has_math")) {
    bool b = false;
    if (c.Bool(*v, &b)) match->has_math = b;
  }
  if (auto* v = FindField(m, "keywords")) {
    if (c.StringList(*v, &match->keywords)) {
      for (auto& k : match->keywords)
        for (char& ch : k) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (match->keywords.empty()) c.Error(v->loc, "'keywords' is empty");
    }
  }
  if (auto* v = FindField(m, "script")) {
    const std::vector<std::string> scripts = {"latin", "cjk",    "cyrillic", "arabic", "devanagari",
                                              "greek", "hebrew", "thai",     "hangul", "none"};
    if (c.StringList(*v, &match->scripts)) {
      for (const auto& s : match->scripts) {
        if (std::find(scripts.begin(), scripts.end(), s) == scripts.end())
          c.Error(v->loc,
                  "'script' must list Unicode scripts (latin, cjk, cyrillic, arabic, "
                  "devanagari, greek, hebrew, thai, hangul, none), got " +
                      QuoteValue(s) + DidYouMean(s, scripts));
      }
    }
  }
  if (auto* v = FindField(m, "model")) c.StringList(*v, &match->models);
  if (auto* v = FindField(m, "headers")) {
    if (!v->value.IsMap()) {
      c.Error(v->loc,
              "'headers' must be a map of header name to value, got " + DescribeNode(v->value));
    } else {
      for (auto it = v->value.begin(); it != v->value.end(); ++it) {
        if (!it->first.IsScalar() || !it->second.IsScalar()) {
          c.Error(YamlLocation(it->first), "'headers' entries must be 'Name: value'");
          continue;
        }
        std::string name = it->first.Scalar();
        for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        match->headers.emplace_back(name, it->second.Scalar());
      }
    }
  }
}

void ParseRoute(Checker& c, const Node& node, SourceLocation where, RouteSpec* r, RouteRefs* refs) {
  const SourceLocation nl = YamlLocation(node);
  r->location = nl.line ? nl : where;
  std::map<std::string, Field> m;
  if (!c.ReadMap(node, where, "a route", {"name", "match", "pool", "fallback", "escalate"}, &m))
    return;
  const Field* name = FindField(m, "name");
  if (!name)
    c.Missing(r->location, "name", "a route");
  else if (c.Name(*name, &r->name))
    refs->name = name->loc;
  const std::string what = r->name.empty() ? std::string("a route") : "route '" + r->name + "'";
  if (auto* v = FindField(m, "match")) ParseMatch(c, *v, what, &r->match, refs);
  const Field* pool = FindField(m, "pool");
  if (!pool)
    c.Missing(r->location, "pool", what);
  else if (c.Name(*pool, &r->pool))
    refs->pool = pool->loc;
  if (auto* v = FindField(m, "fallback")) {
    if (c.Name(*v, &r->fallback)) refs->fallback = v->loc;
  }
  if (auto* f = FindField(m, "escalate")) {
    std::map<std::string, Field> e;
    if (c.ReadMap(f->value, f->loc, "'escalate' of " + what, {"pool", "on_status", "sticky"}, &e)) {
      const Field* ep = FindField(e, "pool");
      if (!ep)
        c.Missing(f->loc, "pool", "'escalate' of " + what);
      else if (c.Name(*ep, &r->escalate.pool))
        refs->escalate_pool = ep->loc;
      const Field* os = FindField(e, "on_status");
      if (!os) {
        c.Missing(f->loc, "on_status", "'escalate' of " + what);
      } else if (!os->value.IsSequence() || os->value.size() == 0) {
        c.Error(os->loc, "'on_status' must be a non-empty list of HTTP statuses, got " +
                             DescribeNode(os->value));
      } else {
        for (const auto& item : os->value) {
          Field itf{item, os->key_loc, YamlLocation(item).line ? YamlLocation(item) : os->loc,
                    "on_status"};
          int code = 0;
          if (c.Integer(itf, &code, 400, 599)) r->escalate.on_status.push_back(code);
        }
      }
      if (auto* v = FindField(e, "sticky")) c.Bool(*v, &r->escalate.sticky);
    }
  }
}

void ParseStickiness(Checker& c, const Field& f, StickinessSpec* s) {
  std::map<std::string, Field> m;
  if (!c.ReadMap(f.value, f.loc, "'stickiness'",
                 {"mode", "header", "scope", "ttl_s", "max_sessions"}, &m))
    return;
  if (auto* v = FindField(m, "mode")) {
    size_t idx = 0;
    if (c.Enum(*v, {"off", "header", "prefix", "header_or_prefix"}, &idx))
      s->mode = static_cast<StickinessMode>(idx);
  }
  if (auto* v = FindField(m, "header")) {
    if (c.NonEmptyString(*v, &s->header))
      for (char& ch : s->header)
        ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  }
  if (auto* v = FindField(m, "scope")) {
    size_t idx = 0;
    if (c.Enum(*v, {"session", "turn"}, &idx)) s->scope = static_cast<StickinessScope>(idx);
  }
  if (auto* v = FindField(m, "ttl_s")) c.Integer(*v, &s->ttl_s, 1, int64_t{365} * 86400);
  if (auto* v = FindField(m, "max_sessions")) c.Integer(*v, &s->max_sessions, 1, 100000000);
}

std::vector<std::string> Names(const std::vector<PoolSpec>& pools) {
  std::vector<std::string> n;
  for (const auto& p : pools) n.push_back(p.name);
  return n;
}

}  // namespace

PolicyParseResult ParsePolicy(std::string_view yaml, const std::string& file_name,
                              const PolicyParseOptions& options) {
  PolicyParseResult result;
  Checker c(file_name);
  // One document, no foreign tags, aliases that expand to a bounded size:
  // checked on the event stream before a tree is built and walked.
  if (const YamlShapeIssue shape = CheckYamlShape(yaml); !shape.ok()) {
    c.Error(SourceLocation{shape.line, shape.column}, shape.message);
    result.errors = c.TakeErrors();
    return result;
  }
  Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    // e.msg is the parser's reason without the mark prefix.
    const SourceLocation loc =
        e.mark.is_null() ? SourceLocation{} : SourceLocation{e.mark.line + 1, e.mark.column + 1};
    c.Error(loc, "YAML syntax error: " + e.msg);
    result.errors = c.TakeErrors();
    return result;
  }

  auto policy = std::make_shared<RoutingPolicy>();
  policy->source_file = file_name;
  policy->source_text = std::string(yaml);
  std::vector<PoolRefs> pool_refs;
  std::vector<RouteRefs> route_refs;
  std::vector<SourceLocation> classifier_names, classifier_weights;

  try {
    std::map<std::string, Field> top;
    const SourceLocation start{1, 1};
    if (root.IsNull()) {
      c.Error(start, "the policy is empty: it needs 'version', 'pools' and 'routes'");
    } else if (c.ReadMap(root, start, "the policy",
                         {"version", "gateway", "pools", "classifiers", "routes", "stickiness"},
                         &top)) {
      if (auto* v = FindField(top, "version")) {
        int version = 0;
        if (c.Integer(*v, &version, 1, 1000000) && version != 1)
          c.Error(v->loc, "unsupported 'version' " + std::to_string(version) +
                              " (this build reads version 1)");
      } else {
        c.Missing(start, "version", "the policy");
      }
      if (auto* v = FindField(top, "gateway")) ParseGateway(c, *v, &policy->gateway);

      const Field* pools = FindField(top, "pools");
      if (!pools) {
        c.Missing(start, "pools", "the policy");
      } else if (!pools->value.IsSequence() || pools->value.size() == 0) {
        c.Error(pools->loc,
                "'pools' must be a non-empty list of pools, got " + DescribeNode(pools->value));
      } else {
        for (const auto& node : pools->value) {
          PoolSpec p;
          PoolRefs refs;
          ParsePool(c, node, pools->loc, &p, &refs);
          policy->pools.push_back(std::move(p));
          pool_refs.push_back(refs);
        }
      }

      if (auto* v = FindField(top, "classifiers")) {
        if (!v->value.IsSequence()) {
          c.Error(v->loc, "'classifiers' must be a list, got " + DescribeNode(v->value));
        } else {
          for (const auto& node : v->value) {
            ClassifierSpec cl;
            SourceLocation nloc, wloc;
            ParseClassifier(c, node, v->loc, &cl, &nloc, &wloc);
            policy->classifiers.push_back(std::move(cl));
            classifier_names.push_back(nloc);
            classifier_weights.push_back(wloc);
          }
        }
      }

      const Field* routes = FindField(top, "routes");
      if (!routes) {
        c.Missing(start, "routes", "the policy");
      } else if (!routes->value.IsSequence() || routes->value.size() == 0) {
        c.Error(routes->loc,
                "'routes' must be a non-empty list of routes, got " + DescribeNode(routes->value));
      } else {
        for (const auto& node : routes->value) {
          RouteSpec r;
          RouteRefs refs;
          ParseRoute(c, node, routes->loc, &r, &refs);
          policy->routes.push_back(std::move(r));
          route_refs.push_back(refs);
        }
      }
      if (auto* v = FindField(top, "stickiness")) ParseStickiness(c, *v, &policy->stickiness);
    }
  } catch (const YAML::Exception& e) {
    const SourceLocation loc =
        e.mark.is_null() ? SourceLocation{} : SourceLocation{e.mark.line + 1, e.mark.column + 1};
    c.Error(loc, std::string("YAML error: ") + e.msg);
  }

  // ---- Cross-references ---------------------------------------------------
  auto& pools = policy->pools;
  const std::vector<std::string> pool_names = Names(pools);
  for (size_t i = 0; i < pools.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (!pools[i].name.empty() && pools[i].name == pools[j].name)
        c.Error(pool_refs[i].name, "duplicate pool name '" + pools[i].name + "' (first at line " +
                                       std::to_string(pool_refs[j].name.line) + ")");
    }
  }
  auto pool_exists = [&](const std::string& n) { return policy->FindPool(n) != nullptr; };
  for (size_t i = 0; i < pools.size(); ++i) {
    const auto& p = pools[i];
    if (p.fallback.empty()) continue;
    if (!pool_exists(p.fallback))
      c.Error(pool_refs[i].fallback, "pool '" + p.name + "' falls back to unknown pool '" +
                                         p.fallback + "'" + DidYouMean(p.fallback, pool_names));
  }
  // Fallback cycles: follow each pool's chain; report each cycle once, at the
  // fallback key (of the first pool in file order on the cycle) that closes it.
  std::set<std::string> reported;
  for (size_t i = 0; i < pools.size(); ++i) {
    std::vector<size_t> chain = {i};
    std::set<size_t> seen = {i};
    size_t cur = i;
    while (!pools[cur].fallback.empty()) {
      const PoolSpec* next = policy->FindPool(pools[cur].fallback);
      if (!next) break;
      const size_t k = static_cast<size_t>(next - pools.data());
      if (seen.count(k)) {
        if (k != i) break;  // a cycle further down the chain: reported from its own start
        size_t first = *std::min_element(chain.begin(), chain.end());
        std::string key;
        for (size_t x : std::set<size_t>(chain.begin(), chain.end())) key += pools[x].name + ",";
        if (first == i && reported.insert(key).second) {
          std::string path;
          for (size_t x : chain) path += pools[x].name + " -> ";
          path += pools[i].name;
          c.Error(pool_refs[chain.back()].fallback, "cycle in fallbacks: " + path);
        }
        break;
      }
      seen.insert(k);
      chain.push_back(k);
      cur = k;
    }
  }

  auto& classifiers = policy->classifiers;
  std::vector<std::string> classifier_name_list;
  for (size_t i = 0; i < classifiers.size(); ++i) {
    classifier_name_list.push_back(classifiers[i].name);
    for (size_t j = 0; j < i; ++j)
      if (!classifiers[i].name.empty() && classifiers[i].name == classifiers[j].name)
        c.Error(classifier_names[i], "duplicate classifier name '" + classifiers[i].name +
                                         "' (first at line " +
                                         std::to_string(classifier_names[j].line) + ")");
  }

  auto& routes = policy->routes;
  for (size_t i = 0; i < routes.size(); ++i) {
    auto& r = routes[i];
    const auto& refs = route_refs[i];
    for (size_t j = 0; j < i; ++j)
      if (!r.name.empty() && r.name == routes[j].name)
        c.Error(refs.name, "duplicate route name '" + r.name + "' (first at line " +
                               std::to_string(route_refs[j].name.line) + ")");
    const std::string what = "route '" + r.name + "'";
    if (!r.pool.empty() && !pool_exists(r.pool))
      c.Error(refs.pool,
              what + " sends to unknown pool '" + r.pool + "'" + DidYouMean(r.pool, pool_names));
    if (!r.fallback.empty()) {
      if (!pool_exists(r.fallback))
        c.Error(refs.fallback, what + " falls back to unknown pool '" + r.fallback + "'" +
                                   DidYouMean(r.fallback, pool_names));
      else if (r.fallback == r.pool)
        c.Error(refs.fallback,
                "cycle in fallbacks: " + what + " falls back to its own pool '" + r.pool + "'");
    }
    if (!r.escalate.pool.empty()) {
      if (!pool_exists(r.escalate.pool))
        c.Error(refs.escalate_pool, what + " escalates to unknown pool '" + r.escalate.pool + "'" +
                                        DidYouMean(r.escalate.pool, pool_names));
      else if (r.escalate.pool == r.pool)
        c.Error(refs.escalate_pool, what + " escalates to its own pool '" + r.pool + "'");
    }
    auto& m = r.match;
    if (!m.classifier.empty() && !policy->FindClassifier(m.classifier))
      c.Error(refs.classifier, what + " uses unknown classifier '" + m.classifier + "'" +
                                   DidYouMean(m.classifier, classifier_name_list));
    if ((!m.score.empty() || m.hard) && m.classifier.empty()) {
      const SourceLocation at = refs.score.line ? refs.score : refs.hard;
      if (classifiers.size() == 1 && !classifiers[0].name.empty()) {
        m.classifier = classifiers[0].name;  // the only classifier is the default
      } else if (classifiers.empty()) {
        c.Error(at, what + " tests a classifier score but the policy defines no 'classifiers'");
      } else {
        c.Error(
            at, what + " tests a classifier score: say which with 'classifier' (one of " + [&] {
              std::string s;
              for (const auto& n : classifier_name_list) s += (s.empty() ? "" : ", ") + n;
              return s;
            }() + ")");
      }
    }
    if (!m.classifier.empty() && m.score.empty() && !m.hard)
      c.Error(refs.classifier, what + " names classifier '" + m.classifier +
                                   "' but tests neither 'score' nor 'hard'");
  }
  // Every request must find a route: the last route is a catch-all, and no
  // route follows a catch-all (it could never match).
  for (size_t i = 0; i + 1 < routes.size(); ++i) {
    if (routes[i].match.catch_all()) {
      c.Error(route_refs[i + 1].name.line ? route_refs[i + 1].name : routes[i + 1].location,
              "route '" + routes[i + 1].name + "' is unreachable: route '" + routes[i].name +
                  "' above it has no 'match' and takes every request");
      break;
    }
  }
  if (!routes.empty() && !routes.back().match.catch_all())
    c.Error(route_refs.back().name.line ? route_refs.back().name : routes.back().location,
            "the last route ('" + routes.back().name +
                "') has a 'match': end 'routes' with a catch-all route (no 'match') so every "
                "request has a pool");

  // ---- Classifier weights ---------------------------------------------------
  if (options.load_classifier_weights) {
    const std::string base = !options.base_dir.empty() ? options.base_dir : DirName(file_name);
    for (size_t i = 0; i < classifiers.size(); ++i) {
      auto& cl = classifiers[i];
      if (cl.weights_path.empty()) continue;
      const std::string path = (cl.weights_path.front() == '/' || base.empty())
                                   ? cl.weights_path
                                   : JoinPath(base, cl.weights_path);
      auto model = HashedLogisticModel::Load(path);
      if (!model.ok()) {
        c.Error(classifier_weights[i], "classifier '" + cl.name + "': " + model.status().message());
        continue;
      }
      cl.weights_path = path;
      cl.model = std::make_shared<const HashedLogisticModel>(std::move(*model));
    }
  }

  result.errors = c.TakeErrors();
  if (result.errors.empty()) result.policy = std::move(policy);
  return result;
}

PolicyParseResult LoadPolicyFile(const std::string& path, const PolicyParseOptions& options) {
  auto text = ReadFileToString(path);
  if (!text.ok()) {
    PolicyParseResult r;
    r.errors.push_back(
        PolicyError{path, 0, 0, "cannot read the policy: " + text.status().message()});
    return r;
  }
  return ParsePolicy(*text, path, options);
}

}  // namespace octet::router
