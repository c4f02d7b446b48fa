// RouterCore's decisions (classify, pick a pool and a replica, pin the
// session, retry, escalate, eject). Beside it: router_api.cpp (the Router API
// around them), latency_histogram.cpp, replica_state.cpp (a replica's
// connection pools), session_pins.cpp, health_check.cpp, router_metrics.cpp
// (stats, /metrics), policy_file_watcher.cpp.
#include "octet/router/router.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>

#include "octet/base/deadline.h"
#include "octet/base/file_util.h"
#include "octet/base/log.h"
#include "octet/router/classifier.h"
#include "router_core.h"

namespace octet::router {

using nlohmann::json;

// ---- PolicyRuntime -----------------------------------------------------------

const PoolRuntime* PolicyRuntime::FindPool(std::string_view name) const {
  for (const auto& p : pools)
    if (p->spec->name == name) return p.get();
  return nullptr;
}

const RouteSpec* PolicyRuntime::FindRoute(std::string_view name) const {
  for (const auto& r : policy->routes)
    if (r.name == name) return &r;
  return nullptr;
}
// ---- Decisions -----------------------------------------------------------------

namespace {

uint64_t NextRandom() {
  // splitmix64 per thread; seeded from the thread's address and the clock.
  thread_local uint64_t state =
      static_cast<uint64_t>(reinterpret_cast<uintptr_t>(&state)) ^ static_cast<uint64_t>(NowNs());
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::string FormatNumber(double v, int decimals) {
  char buf[64];
  if (decimals == 0 || std::floor(v) == v)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// "name 3 >= 2", "0.2 <= score 0.31 < 0.5"; empty when the range is empty.
std::string DescribeRange(const char* name, double value, const Range& r, int decimals) {
  const std::string v = FormatNumber(value, decimals);
  if (r.min && r.max)
    return FormatNumber(*r.min, decimals) + " <= " + name + " " + v + " < " +
           FormatNumber(*r.max, decimals);
  if (r.min) return std::string(name) + " " + v + " >= " + FormatNumber(*r.min, decimals);
  return std::string(name) + " " + v + " < " + FormatNumber(*r.max, decimals);
}

// Lazily computed classifier scores for one request.
class ScoreCache {
 public:
  ScoreCache(const RoutingPolicy& p, const json& req, const RequestFeatures& f)
      : policy_(p), request_(req), features_(f) {}
  double Get(const std::string& name) {
    for (const auto& [n, s] : scores_)
      if (n == name) return s;
    const ClassifierSpec* c = policy_.FindClassifier(name);
    // Fail open to "hard" (the strong pool) when a classifier cannot score:
    // a wrong "easy" costs quality, a wrong "hard" only capacity.
    const double s = (c && c->model) ? c->model->Score(request_, features_) : 1.0;
    scores_.emplace_back(name, s);
    return s;
  }

 private:
  const RoutingPolicy& policy_;
  const json& request_;
  const RequestFeatures& features_;
  std::vector<std::pair<std::string, double>> scores_;
};

// True when `m` matches; appends the matched conditions to *why.
bool Matches(const RoutingPolicy& policy, const RouteMatch& m, const RequestFeatures& f,
             const HeaderLookup& headers, ScoreCache& scores, double* score_out, std::string* why) {
  std::vector<std::string> parts;
  auto range = [&](const char* name, double v, const Range& r, int decimals) {
    if (r.empty()) return true;
    if (!r.Contains(v)) return false;
    parts.push_back(DescribeRange(name, v, r, decimals));
    return true;
  };
  if (!range("prompt_tokens", static_cast<double>(f.prompt_tokens), m.prompt_tokens, 0))
    return false;
  if (!range("turns", f.turns, m.turns, 0)) return false;
  if (!range("tools", f.tools, m.tools, 0)) return false;
  if (!range("tool_call_depth", f.tool_call_depth, m.tool_call_depth, 0)) return false;
  if (m.has_code) {
    if (f.has_code != *m.has_code) return false;
    parts.push_back(f.has_code ? "has code" : "no code");
  }
  if (m.has_math) {
    if (f.has_math != *m.has_math) return false;
    parts.push_back(f.has_math ? "has math" : "no math");
  }
  if (!m.scripts.empty()) {
    if (std::find(m.scripts.begin(), m.scripts.end(), f.script) == m.scripts.end()) return false;
    parts.push_back("script " + f.script);
  }
  if (!m.models.empty()) {
    if (std::find(m.models.begin(), m.models.end(), f.model) == m.models.end()) return false;
    parts.push_back("model " + f.model);
  }
  for (const auto& [name, value] : m.headers) {
    const std::string got = headers ? headers(name) : std::string();
    if (got != value) return false;
    parts.push_back("header " + name + ": " + value);
  }
  if (!m.keywords.empty()) {
    const std::string* hit = nullptr;
    for (const auto& k : m.keywords)
      if (f.last_user_text.find(k) != std::string::npos) {
        hit = &k;
        break;
      }
    if (!hit) return false;
    parts.push_back("keyword '" + *hit + "'");
  }
  if (!m.classifier.empty()) {
    const double s = scores.Get(m.classifier);
    *score_out = s;
    if (!m.score.empty()) {
      if (!m.score.Contains(s)) return false;
      parts.push_back("classifier " + m.classifier + " " + DescribeRange("score", s, m.score, 2));
    }
    if (m.hard) {
      const ClassifierSpec* c = policy.FindClassifier(m.classifier);
      const double t = c ? c->threshold : 0.5;
      const bool hard = s >= t;
      if (hard != *m.hard) return false;
      parts.push_back("classifier " + m.classifier + " score " + FormatNumber(s, 2) +
                      (hard ? " >= " : " < ") + FormatNumber(t, 2) +
                      (hard ? " (hard)" : " (easy)"));
    }
  }
  if (parts.empty()) parts.push_back("catch-all");
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) *why += ", ";
    *why += parts[i];
  }
  return true;
}

std::string SessionKeyOf(const StickinessSpec& s, const json& request,
                         const HeaderLookup& headers) {
  if (s.mode == StickinessMode::kOff) return "";
  if (s.mode == StickinessMode::kHeader || s.mode == StickinessMode::kHeaderOrPrefix) {
    const std::string v = headers ? headers(s.header) : std::string();
    if (!v.empty()) return "h:" + v;
    if (s.mode == StickinessMode::kHeader) return "";
  }
  const uint64_t h = ConversationPrefixHash(request);
  if (h == 0) return "";
  char buf[24];
  std::snprintf(buf, sizeof buf, "p:%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace

// ---- RouterCore ---------------------------------------------------------------

RouterCore::RouterCore(RouterOptions options)
    : options_(std::move(options)), clock_(options_.clock ? *options_.clock : Clock::Real()) {
  if (options_.active_health_checks) health_thread_ = std::thread([this] { HealthLoop(); });
}

RouterCore::~RouterCore() {
  {
    MutexLock lock(health_mu_);
    stop_ = true;
  }
  health_cv_.notify_all();
  if (health_thread_.joinable()) health_thread_.join();
}

std::shared_ptr<const PolicyRuntime> RouterCore::Snapshot() const {
  MutexLock lock(mu_);
  return runtime_;
}

Status RouterCore::Apply(std::shared_ptr<const RoutingPolicy> policy) {
  if (!policy) return InvalidArgumentError("no policy");
  // Resolve replica URLs first (job replicas through the resolver), so a
  // failure leaves the running policy untouched.
  struct Resolved {
    std::string url, key;
    ReplicaUrl parsed;
  };
  MutexLock applying(apply_mu_);
  std::vector<std::vector<Resolved>> resolved(policy->pools.size());
  std::map<std::string, std::vector<std::string>> instances;
  {
    MutexLock lock(mu_);
    instances = instances_;
  }
  for (size_t i = 0; i < policy->pools.size(); ++i) {
    const auto& pool = policy->pools[i];
    if (!pool.instance.empty()) {
      // A deployment's instance: the endpoints it was last told (none yet: down).
      auto it = instances.find(pool.instance);
      if (it == instances.end()) continue;
      for (const std::string& url : it->second) {
        Resolved res;
        std::string err;
        if (!ParseReplicaUrl(url, &res.parsed, &err))
          return InvalidArgumentError("pool '" + pool.name + "' instance '" + pool.instance +
                                      "' replica '" + url + "' " + err);
        res.url = url;
        res.key = pool.name + "\x1f" + url;
        resolved[i].push_back(std::move(res));
      }
      continue;
    }
    for (size_t k = 0; k < pool.replicas.size(); ++k) {
      const auto& spec = pool.replicas[k];
      std::string url = spec.url;
      if (!spec.job.empty()) {
        const std::string where = policy->source_file + ":" + std::to_string(spec.location.line) +
                                  ":" + std::to_string(spec.location.column);
        if (!options_.job_resolver)
          return FailedPreconditionError(where + ": pool '" + pool.name + "' replica " +
                                         std::to_string(k + 1) + " is agent job '" + spec.job +
                                         "', but this router has no agent to resolve jobs; give "
                                         "its 'url' instead");
        auto r = options_.job_resolver(spec.job);
        if (!r.ok()) return r.status().WithContext(where + ": job '" + spec.job + "'");
        url = *r;
      }
      Resolved res;
      std::string err;
      if (!ParseReplicaUrl(url, &res.parsed, &err))
        return InvalidArgumentError("pool '" + pool.name + "' replica '" + url + "' " + err);
      res.url = url;
      res.key = pool.name + "\x1f" + url;
      resolved[i].push_back(std::move(res));
    }
  }

  auto rt = std::make_shared<PolicyRuntime>();
  rt->policy = policy;
  MutexLock lock(mu_);
  std::map<std::string, std::shared_ptr<ReplicaState>> replicas;
  for (size_t i = 0; i < policy->pools.size(); ++i) {
    const auto& spec = policy->pools[i];
    auto pool = std::make_unique<PoolRuntime>();
    pool->spec = &spec;
    auto& counters = pool_counters_[spec.name];
    if (!counters) counters = std::make_shared<PoolCounters>();
    pool->counters = counters;
    for (size_t k = 0; k < resolved[i].size(); ++k) {
      const auto& r = resolved[i][k];
      std::shared_ptr<ReplicaState> state;
      if (auto it = replicas.find(r.key); it != replicas.end()) {
        state = it->second;  // the same URL twice in one pool: one state
      } else if (auto old = replicas_.find(r.key); old != replicas_.end()) {
        state = old->second;
      } else {
        std::string api_key;
        if (k < spec.replicas.size() && !spec.replicas[k].api_key_env.empty()) {
          const char* v = std::getenv(spec.replicas[k].api_key_env.c_str());
          if (v) api_key = v;
        }
        state = std::make_shared<ReplicaState>(spec.name, r.url, r.parsed, api_key);
      }
      replicas[r.key] = state;
      pool->replicas.push_back(state);
      pool->weights.push_back(k < spec.replicas.size() ? spec.replicas[k].weight : 1.0);
    }
    rt->pools.push_back(std::move(pool));
  }
  for (const auto& route : policy->routes) {
    auto& c = route_counters_[route.name];
    if (!c) c = std::make_shared<RouteCounters>();
    rt->routes.push_back(c);
  }
  rt->generation = ++generation_;
  replicas_ = std::move(replicas);  // states of removed replicas live on in their leases
  runtime_ = std::move(rt);
  health_cv_.notify_all();
  return Status();
}

RouterCore::PoolState RouterCore::StateOf(const PoolRuntime& pool, int64_t now) const {
  bool any_available = false;
  const int max = pool.spec->max_in_flight;
  for (const auto& r : pool.replicas) {
    if (!r->Available(now)) continue;
    any_available = true;
    if (max <= 0 || r->in_flight.load(std::memory_order_relaxed) < max)
      return PoolState::kAvailable;
  }
  return any_available ? PoolState::kSaturated : PoolState::kDown;
}

const PoolRuntime* RouterCore::UsablePool(const PolicyRuntime& rt, const PoolRuntime* start,
                                          const std::string& route_fallback, int64_t now,
                                          const std::vector<const PoolRuntime*>& skip,
                                          bool* saturated) const {
  std::vector<const PoolRuntime*> seen;
  const PoolRuntime* cur = start;
  bool first = true;
  while (cur && std::find(seen.begin(), seen.end(), cur) == seen.end()) {
    seen.push_back(cur);
    if (std::find(skip.begin(), skip.end(), cur) == skip.end()) {
      const PoolState s = StateOf(*cur, now);
      if (s == PoolState::kAvailable) return cur;
      if (s == PoolState::kSaturated) *saturated = true;
    }
    const std::string& next =
        (first && !route_fallback.empty()) ? route_fallback : cur->spec->fallback;
    first = false;
    cur = next.empty() ? nullptr : rt.FindPool(next);
  }
  return nullptr;
}

ReplicaLease RouterCore::Pick(const PoolRuntime& pool, int64_t now,
                              const std::vector<const ReplicaState*>& exclude,
                              const std::string& preferred) const {
  const int max = pool.spec->max_in_flight;
  auto usable = [&](const ReplicaState& r) {
    return r.Available(now) && std::find(exclude.begin(), exclude.end(), &r) == exclude.end() &&
           (max <= 0 || r.in_flight.load(std::memory_order_relaxed) < max);
  };
  // Takes a lease unless a racing request filled the last slot meanwhile.
  auto take = [&](const std::shared_ptr<ReplicaState>& r) -> bool {
    if (max <= 0) {
      r->in_flight.fetch_add(1, std::memory_order_acq_rel);
      return true;
    }
    int cur = r->in_flight.load(std::memory_order_relaxed);
    while (cur < max) {
      if (r->in_flight.compare_exchange_weak(cur, cur + 1, std::memory_order_acq_rel)) return true;
    }
    return false;
  };

  for (int round = 0; round < 4; ++round) {
    std::vector<size_t> cands;
    cands.reserve(pool.replicas.size());
    for (size_t i = 0; i < pool.replicas.size(); ++i)
      if (usable(*pool.replicas[i])) cands.push_back(i);
    if (cands.empty()) return {};
    if (!preferred.empty()) {
      // A pinned replica wins unless it is far busier than the idlest one:
      // conversations with the same opening share a prefix pin, and must not
      // pile onto one replica.
      constexpr int kPinSlack = 8;
      int least = INT32_MAX;
      for (size_t i : cands) least = std::min(least, pool.replicas[i]->in_flight.load());
      for (size_t i : cands) {
        if (pool.replicas[i]->url() == preferred &&
            pool.replicas[i]->in_flight.load() - least <= kPinSlack && take(pool.replicas[i]))
          return ReplicaLease(pool.replicas[i]);
      }
    }
    size_t chosen = cands[0];
    if (cands.size() > 1) {
      switch (pool.spec->load_balancing) {
        case LoadBalancing::kLeastRequest: {
          // Power of two choices: two distinct random candidates, the one with
          // fewer outstanding requests per unit of weight wins.
          const size_t a = cands[NextRandom() % cands.size()];
          size_t b = cands[NextRandom() % (cands.size() - 1)];
          if (b == a) b = cands.back();
          const double la = (pool.replicas[a]->in_flight.load() + 1) / pool.weights[a];
          const double lb = (pool.replicas[b]->in_flight.load() + 1) / pool.weights[b];
          chosen = lb < la ? b : a;
          break;
        }
        case LoadBalancing::kRoundRobin:
          chosen = cands[pool.round_robin.fetch_add(1, std::memory_order_relaxed) % cands.size()];
          break;
        case LoadBalancing::kWeightedRandom: {
          double total = 0;
          for (size_t i : cands) total += pool.weights[i];
          double x = static_cast<double>(NextRandom() >> 11) * 0x1.0p-53 * total;
          chosen = cands.back();
          for (size_t i : cands) {
            if (x < pool.weights[i]) {
              chosen = i;
              break;
            }
            x -= pool.weights[i];
          }
          break;
        }
      }
    }
    if (take(pool.replicas[chosen])) return ReplicaLease(pool.replicas[chosen]);
  }
  return {};
}

Result<RouteDecision> RouterCore::Decide(const PolicyRuntime& rt, const json& request,
                                         const RequestFeatures& features,
                                         const HeaderLookup& headers, bool assume_healthy,
                                         const RouteSpec** route_out, const PoolRuntime** pool_out,
                                         std::string* session_key) const {
  const RoutingPolicy& policy = *rt.policy;
  const int64_t now = NowMs();
  RouteDecision d;
  const std::string key = SessionKeyOf(policy.stickiness, request, headers);
  d.session = key;
  if (session_key) *session_key = key;

  const RouteSpec* route = nullptr;
  const PoolRuntime* pool = nullptr;
  SessionPins::Pin pin;
  if (!key.empty() && pins_.Lookup(key, now, policy.stickiness.ttl_s * 1000, &pin) &&
      !pin.pool.empty() && rt.FindPool(pin.pool)) {
    pool = rt.FindPool(pin.pool);
    route = rt.FindRoute(pin.route);
    d.route = pin.route;
    d.sticky = true;
    d.reason = "session pinned to pool '" + pin.pool + "'" + (pin.escalated ? " (escalated)" : "");
  } else {
    ScoreCache scores(policy, request, features);
    for (const auto& r : policy.routes) {
      std::string why;
      double score = -1;
      const bool hit = Matches(policy, r.match, features, headers, scores, &score, &why);
      if (score >= 0) d.score = score;
      if (hit) {
        route = &r;
        d.route = r.name;
        d.reason = "route '" + r.name + "': " + why;
        break;
      }
    }
    if (!route) return NotFoundError("no route matches the request");
    pool = rt.FindPool(route->pool);
    if (!pool) return InternalError("route '" + route->name + "' names a missing pool");
  }
  if (!assume_healthy) {
    const PoolState s = StateOf(*pool, now);
    if (s != PoolState::kAvailable) {
      bool saturated = false;
      const PoolRuntime* usable =
          UsablePool(rt, pool, route ? route->fallback : std::string(), now, {}, &saturated);
      const std::string state = s == PoolState::kDown ? "down" : "saturated";
      if (usable && usable != pool) {
        d.fallback = true;
        d.reason += "; pool '" + pool->spec->name + "' is " + state + ", fallback to pool '" +
                    usable->spec->name + "'";
        pool = usable;
      } else {
        d.reason += "; pool '" + pool->spec->name + "' is " + state +
                    " and no fallback pool can take the request";
      }
    }
  }
  d.pool = pool->spec->name;
  if (route_out) *route_out = route;
  if (pool_out) *pool_out = pool;
  return d;
}

void RouterCore::PinSession(RoutedRequest& rr, bool session_level) {
  if (rr.session_key.empty() || !rr.lease) return;
  const auto& s = rr.runtime->policy->stickiness;
  const int64_t now = NowMs();
  const auto max = static_cast<size_t>(s.max_sessions);
  // The replica pin keeps a conversation on the replica that holds its KV cache.
  pins_.Set(rr.session_key + '\x1f' + rr.pool->spec->name,
            SessionPins::Pin{"", "", rr.lease->url(), false}, now, max);
  if (session_level && s.scope == StickinessScope::kSession && !rr.decision.fallback) {
    SessionPins::Pin pin;
    const bool had = pins_.Lookup(rr.session_key, now, s.ttl_s * 1000, &pin);
    if (!had || pin.pool != rr.pool->spec->name) {
      pin = SessionPins::Pin{rr.pool->spec->name, rr.decision.route, "", rr.escalated};
    }
    pins_.Set(rr.session_key, pin, now, max);
  }
}

Result<RoutedRequest> RouterCore::Route(const json& request, const RequestFeatures& features,
                                        const HeaderLookup& headers) {
  RoutedRequest rr;
  rr.runtime = Snapshot();
  if (!rr.runtime) return UnavailableError("no routing policy installed");
  const PolicyRuntime& rt = *rr.runtime;
  OCTET_ASSIGN_OR_RETURN(rr.decision, Decide(rt, request, features, headers, false, &rr.route,
                                             &rr.pool, &rr.session_key));
  const int64_t now = NowMs();
  std::string preferred;
  if (!rr.session_key.empty()) {
    SessionPins::Pin pin;
    if (pins_.Lookup(rr.session_key + '\x1f' + rr.pool->spec->name, now,
                     rt.policy->stickiness.ttl_s * 1000, &pin))
      preferred = pin.replica;
  }
  rr.lease = Pick(*rr.pool, now, {}, preferred);
  if (!rr.lease) {
    // Nothing usable anywhere on the chain. Saturated: shed load. Down: try
    // the decided pool anyway (its replicas may have come back) rather than
    // refuse outright.
    bool saturated = false;
    const PoolRuntime* usable =
        UsablePool(rt, rr.pool, rr.route ? rr.route->fallback : "", now, {}, &saturated);
    if (usable) {
      rr.lease = Pick(*usable, now, {}, "");
      if (rr.lease) rr.pool = usable;
    }
    if (!rr.lease && saturated) {
      CountUnrouted();
      return ResourceExhaustedError("every pool that can take route '" + rr.decision.route +
                                    "' is saturated (max_in_flight)");
    }
    if (!rr.lease) {
      std::shared_ptr<ReplicaState> least;
      for (const auto& r : rr.pool->replicas)
        if (!least || r->in_flight.load() < least->in_flight.load()) least = r;
      if (!least) {
        CountUnrouted();
        return UnavailableError("pool '" + rr.pool->spec->name + "' has no replicas");
      }
      least->in_flight.fetch_add(1, std::memory_order_acq_rel);
      rr.lease = ReplicaLease(least);
      rr.decision.reason += "; no healthy replica: trying '" + least->url() + "' anyway";
    }
  }
  rr.decision.pool = rr.pool->spec->name;
  rr.decision.replica = rr.lease->url();
  rr.tried.push_back(rr.lease.get());
  rr.pools_tried.push_back(rr.pool);
  rr.retries_left = rr.pool->spec->retries.attempts;
  rr.lease->requests.fetch_add(1, std::memory_order_relaxed);
  rr.pool->counters->requests.fetch_add(1, std::memory_order_relaxed);
  if (rr.decision.fallback) rr.pool->counters->fallbacks.fetch_add(1, std::memory_order_relaxed);
  if (rr.route) {
    const size_t idx = static_cast<size_t>(rr.route - rt.policy->routes.data());
    if (idx < rt.routes.size()) rt.routes[idx]->decisions.fetch_add(1, std::memory_order_relaxed);
  }
  PinSession(rr, /*session_level=*/true);
  return rr;
}

bool RouterCore::Retry(RoutedRequest& rr, FailureKind failure) {
  if (rr.lease) ReportFailure(rr.lease.get(), *rr.pool, failure);
  const RetrySpec& rs = rr.pool->spec->retries;
  const bool retryable = (failure == FailureKind::kConnect && rs.on_connect_error) ||
                         (failure == FailureKind::kStatus5xx && rs.on_5xx) ||
                         (failure == FailureKind::kStatus429 && rs.on_429);
  if (!retryable) return false;
  const int64_t now = NowMs();
  ReplicaLease next;
  if (rr.retries_left > 0) next = Pick(*rr.pool, now, rr.tried, "");
  if (next) {
    --rr.retries_left;
    rr.pool->counters->retries.fetch_add(1, std::memory_order_relaxed);
  } else {
    // No retry left on this pool: fail over along the fallback chain.
    bool saturated = false;
    const PoolRuntime* other = UsablePool(*rr.runtime, rr.pool, rr.route ? rr.route->fallback : "",
                                          now, rr.pools_tried, &saturated);
    if (!other) return false;
    next = Pick(*other, now, rr.tried, "");
    if (!next) return false;
    rr.decision.reason += "; pool '" + rr.pool->spec->name + "' failed, fell back to pool '" +
                          other->spec->name + "'";
    rr.decision.fallback = true;
    rr.pool = other;
    rr.pools_tried.push_back(other);
    rr.retries_left = other->spec->retries.attempts;
    other->counters->fallbacks.fetch_add(1, std::memory_order_relaxed);
    other->counters->requests.fetch_add(1, std::memory_order_relaxed);
  }
  rr.lease = std::move(next);
  rr.lease->requests.fetch_add(1, std::memory_order_relaxed);
  rr.tried.push_back(rr.lease.get());
  rr.decision.pool = rr.pool->spec->name;
  rr.decision.replica = rr.lease->url();
  PinSession(rr, /*session_level=*/false);
  return true;
}

bool RouterCore::Escalate(RoutedRequest& rr) {
  if (!rr.route || rr.route->escalate.pool.empty() || rr.escalated) return false;
  const PoolRuntime* target = rr.runtime->FindPool(rr.route->escalate.pool);
  if (!target) return false;
  const int64_t now = NowMs();
  bool saturated = false;
  const PoolRuntime* usable = UsablePool(*rr.runtime, target, "", now, {}, &saturated);
  if (!usable) return false;
  ReplicaLease next = Pick(*usable, now, {}, "");
  if (!next) return false;
  rr.decision.reason +=
      "; escalated from pool '" + rr.pool->spec->name + "' to pool '" + usable->spec->name + "'";
  rr.escalated = true;
  rr.pool = usable;
  rr.lease = std::move(next);
  rr.lease->requests.fetch_add(1, std::memory_order_relaxed);
  rr.tried.push_back(rr.lease.get());
  rr.pools_tried.push_back(usable);
  rr.retries_left = usable->spec->retries.attempts;
  rr.decision.pool = usable->spec->name;
  rr.decision.replica = rr.lease->url();
  usable->counters->escalations.fetch_add(1, std::memory_order_relaxed);
  usable->counters->requests.fetch_add(1, std::memory_order_relaxed);
  if (rr.route->escalate.sticky && !rr.session_key.empty()) {
    const auto& s = rr.runtime->policy->stickiness;
    pins_.Set(rr.session_key, SessionPins::Pin{usable->spec->name, rr.route->name, "", true}, now,
              static_cast<size_t>(s.max_sessions));
  }
  PinSession(rr, /*session_level=*/false);
  return true;
}

void RouterCore::ReportSuccess(ReplicaState* replica, const PoolSpec& spec) {
  MutexLock lock(replica->mu);
  replica->consecutive_failures = 0;
  // The ejection multiplier decays once the replica has stayed good for a
  // base ejection time after returning.
  const int64_t now = NowMs();
  if (replica->ejection_count > 0 && replica->returned_at_ms > 0 &&
      now - replica->returned_at_ms >= spec.outlier_ejection.base_ejection_ms) {
    --replica->ejection_count;
    replica->returned_at_ms = now;
  }
}

void RouterCore::ReportFailure(ReplicaState* replica, const PoolRuntime& pool,
                               FailureKind failure) {
  replica->failures.fetch_add(1, std::memory_order_relaxed);
  if (failure == FailureKind::kStatus429) return;  // busy, not broken
  const auto& oe = pool.spec->outlier_ejection;
  const int64_t now = NowMs();
  MutexLock lock(replica->mu);
  if (now < replica->ejected_until_ms.load()) return;  // already out
  if (++replica->consecutive_failures < oe.consecutive_failures) return;
  // Respect max_ejected_percent, but one replica may always be ejected.
  int ejected = 0;
  for (const auto& r : pool.replicas)
    if (r.get() != replica && now < r->ejected_until_ms.load()) ++ejected;
  const double total = static_cast<double>(pool.replicas.size());
  if (ejected > 0 && (ejected + 1) * 100.0 / total > oe.max_ejected_percent) {
    OCTET_LOG(WARNING) << "pool '" << pool.spec->name << "': replica " << replica->url()
                       << " keeps failing but max_ejected_percent " << oe.max_ejected_percent
                       << " keeps it in rotation";
    replica->consecutive_failures = 0;
    return;
  }
  ++replica->ejection_count;
  const int64_t ms =
      std::min<int64_t>(oe.base_ejection_ms * replica->ejection_count, oe.max_ejection_ms);
  replica->ejected_until_ms.store(now + ms);
  replica->returned_at_ms = now + ms;
  replica->consecutive_failures = 0;
  pool.counters->ejections.fetch_add(1, std::memory_order_relaxed);
  OCTET_LOG(WARNING) << "pool '" << pool.spec->name << "': ejected replica " << replica->url()
                     << " for " << ms << " ms after " << oe.consecutive_failures
                     << " consecutive failures (ejection " << replica->ejection_count << ")";
}

// ---- Instances (pools that follow named instances) ---------------------------

Status RouterCore::SetInstances(const std::map<std::string, std::vector<std::string>>& endpoints) {
  for (const auto& [name, urls] : endpoints) {
    for (const std::string& url : urls) {
      ReplicaUrl parsed;
      std::string err;
      if (!ParseReplicaUrl(url, &parsed, &err))
        return InvalidArgumentError("instance '" + name + "' replica '" + url + "' " + err);
    }
  }
  std::shared_ptr<const RoutingPolicy> policy;
  {
    MutexLock lock(mu_);
    for (const auto& [name, urls] : endpoints) instances_[name] = urls;
    if (runtime_) policy = runtime_->policy;
  }
  return policy ? Apply(policy) : Status();
}

std::map<std::string, std::vector<std::string>> RouterCore::Instances() const {
  MutexLock lock(mu_);
  return instances_;
}

}  // namespace octet::router
