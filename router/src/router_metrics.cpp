// RouterCore's figures: Stats (GET /v1/router/stats, octet route stats) and
// MetricsText (GET /metrics, Prometheus text format).
#include <algorithm>
#include <sstream>
#include <string>
#include <string_view>

#include "router_core.h"

namespace octet::router {

namespace {

std::string PromEscape(std::string_view s) {
  std::string r;
  for (char c : s) {
    if (c == '\\' || c == '"') r += '\\';
    if (c == '\n') {
      r += "\\n";
      continue;
    }
    r += c;
  }
  return r;
}

}  // namespace

RouterStats RouterCore::Stats() const {
  RouterStats s;
  auto rt = Snapshot();
  s.requests = requests_.load();
  s.overhead_us_p50 = overhead_.QuantileNs(0.5) / 1000.0;
  s.overhead_us_p99 = overhead_.QuantileNs(0.99) / 1000.0;
  if (!rt) return s;
  s.policy_generation = rt->generation;
  const int64_t now = NowMs();
  for (const auto& pool : rt->pools) {
    PoolStats p;
    p.pool = pool->spec->name;
    p.total_replicas = static_cast<uint32_t>(pool->replicas.size());
    for (const auto& r : pool->replicas) {
      if (r->Available(now)) ++p.healthy_replicas;
      p.in_flight += static_cast<uint32_t>(std::max(0, r->in_flight.load()));
    }
    p.requests = pool->counters->requests.load();
    p.errors = pool->counters->errors.load();
    p.tokens = pool->counters->tokens.load();
    p.ejections = pool->counters->ejections.load();
    s.pools.push_back(p);
  }
  for (size_t i = 0; i < rt->routes.size(); ++i)
    s.routes.push_back(RouteStats{rt->policy->routes[i].name, rt->routes[i]->decisions.load()});
  return s;
}

std::string RouterCore::MetricsText() const {
  auto rt = Snapshot();
  std::ostringstream o;
  auto head = [&](const char* name, const char* type, const char* help) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
  };
  // Prometheus histograms (not precomputed quantiles: those cannot be
  // combined across routers, nor turned into another quantile).
  auto histogram = [&](const std::string& name, const std::string& labels,
                       const LatencyHistogram& h) { h.prom().Write(o, name, labels); };
  o << prom::BuildInfoMetric();
  head("octet_router_requests_total", "counter", "Requests the gateway received.");
  o << "octet_router_requests_total " << requests_.load() << "\n";
  head("octet_router_bad_requests_total", "counter", "Requests rejected as malformed.");
  o << "octet_router_bad_requests_total " << bad_requests_.load() << "\n";
  head("octet_router_unrouted_total", "counter", "Requests no pool could take.");
  o << "octet_router_unrouted_total " << unrouted_.load() << "\n";
  head("octet_router_routing_overhead_seconds", "histogram",
       "Time to classify a request and pick its replica.");
  histogram("octet_router_routing_overhead_seconds", "", overhead_);
  head("octet_router_sessions", "gauge", "Session and replica pins held.");
  o << "octet_router_sessions " << pins_.size() << "\n";
  if (!rt) return o.str();
  head("octet_router_policy_generation", "gauge", "Policies applied since start.");
  o << "octet_router_policy_generation " << rt->generation << "\n";
  head("octet_router_route_decisions_total", "counter", "Decisions per route.");
  for (size_t i = 0; i < rt->routes.size(); ++i)
    o << "octet_router_route_decisions_total{route=\"" << PromEscape(rt->policy->routes[i].name)
      << "\"} " << rt->routes[i]->decisions.load() << "\n";
  struct Metric {
    const char* name;
    const char* help;
    std::atomic<uint64_t> PoolCounters::*field;
  };
  const Metric metrics[] = {
      {"octet_router_pool_requests_total", "Requests sent to the pool.", &PoolCounters::requests},
      {"octet_router_pool_errors_total", "Requests that failed on the pool.",
       &PoolCounters::errors},
      {"octet_router_pool_tokens_total", "Completion tokens the pool returned.",
       &PoolCounters::tokens},
      {"octet_router_pool_retries_total", "Retries on another replica.", &PoolCounters::retries},
      {"octet_router_pool_fallbacks_total", "Requests taken over from another pool.",
       &PoolCounters::fallbacks},
      {"octet_router_pool_escalations_total", "Requests escalated into the pool.",
       &PoolCounters::escalations},
      {"octet_router_pool_cancelled_total", "Requests cancelled because the client left.",
       &PoolCounters::cancelled},
      {"octet_router_ejections_total", "Replica ejections (outlier detection).",
       &PoolCounters::ejections},
  };
  for (const auto& m : metrics) {
    head(m.name, "counter", m.help);
    for (const auto& pool : rt->pools)
      o << m.name << "{pool=\"" << PromEscape(pool->spec->name) << "\"} "
        << (pool->counters.get()->*m.field).load() << "\n";
  }
  const int64_t now = NowMs();
  head("octet_router_replica_up", "gauge", "1 when the replica is healthy and not ejected.");
  for (const auto& pool : rt->pools)
    for (const auto& r : pool->replicas)
      o << "octet_router_replica_up{pool=\"" << PromEscape(pool->spec->name) << "\",replica=\""
        << PromEscape(r->url()) << "\"} " << (r->Available(now) ? 1 : 0) << "\n";
  head("octet_router_replica_in_flight", "gauge", "Outstanding requests per replica.");
  for (const auto& pool : rt->pools)
    for (const auto& r : pool->replicas)
      o << "octet_router_replica_in_flight{pool=\"" << PromEscape(pool->spec->name)
        << "\",replica=\"" << PromEscape(r->url()) << "\"} " << r->in_flight.load() << "\n";
  head("octet_router_ttft_seconds", "histogram", "Time to first forwarded byte, per pool.");
  for (const auto& pool : rt->pools)
    histogram("octet_router_ttft_seconds", "pool=\"" + PromEscape(pool->spec->name) + "\"",
              pool->counters->ttft);
  head("octet_router_request_duration_seconds", "histogram", "Whole request time, per pool.");
  for (const auto& pool : rt->pools)
    histogram("octet_router_request_duration_seconds",
              "pool=\"" + PromEscape(pool->spec->name) + "\"", pool->counters->duration);
  return o.str();
}

}  // namespace octet::router
