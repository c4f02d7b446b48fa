// RouterCore's active health checks: the thread RouterCore's constructor
// starts (RouterOptions::active_health_checks) runs a round every 50 ms; a
// round GETs the health path of every replica whose interval is due, each on
// its own thread, and takes a replica out of rotation after
// unhealthy_threshold failures in a row, back after healthy_threshold
// successes. A check that passes also refreshes the replica's cached
// /v1/models answer when it is ReplicaState::kModelsRefreshMs old (ReplicaState::models_body,
// what the gateway's /v1/models reads). Passive ejection (outlier detection)
// is RouterCore::ReportFailure.
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "octet/base/http/client_error.h"
#include "octet/base/log.h"
#include "router_core.h"

namespace octet::router {

// A round every kRoundMs of the router's clock; each replica's own interval
// decides whether the round checks it.
constexpr int64_t kRoundMs = 50;

void RouterCore::CheckReplica(const std::shared_ptr<ReplicaState>& replica, const PoolSpec& spec) {
  const auto& hc = spec.health_check;
  auto res = replica->Get(hc.path, hc.timeout_ms);
  const bool ok = res && res->status >= 200 && res->status < 300;
  // A healthy replica's /v1/models, for the gateway's (ReplicaState::kModelsRefreshMs; the
  // health answer itself when the path is /v1/models).
  std::optional<std::string> models;
  if (ok && hc.path == "/v1/models") {
    models = res->body;
  } else if (ok) {
    int64_t at;
    {
      MutexLock lock(replica->mu);
      at = replica->models_at_ms;
    }
    if (at == 0 || NowMs() - at >= ReplicaState::kModelsRefreshMs) {
      auto m = replica->Get("/v1/models", hc.timeout_ms);
      if (m && m->status == 200) models = m->body;
    }
  }
  MutexLock lock(replica->mu);
  if (models) {
    replica->models_body = std::move(*models);
    replica->models_at_ms = NowMs();
  }
  if (ok) {
    replica->check_failures = 0;
    ++replica->check_successes;
    if (!replica->healthy.load() && replica->check_successes >= hc.healthy_threshold) {
      replica->healthy.store(true);
      OCTET_LOG(INFO) << "pool '" << spec.name << "': replica " << replica->url()
                      << " passes its health check again";
    }
  } else {
    replica->check_successes = 0;
    ++replica->check_failures;
    if (replica->healthy.load() && replica->check_failures >= hc.unhealthy_threshold) {
      replica->healthy.store(false);
      OCTET_LOG(WARNING) << "pool '" << spec.name << "': replica " << replica->url() << " failed "
                         << replica->check_failures << " health checks ("
                         << (res ? "status " + std::to_string(res->status)
                                 : http::ClientErrorText(res.error()))
                         << "); out of rotation";
    }
  }
}

void RouterCore::CheckHealthNow() {
  auto rt = Snapshot();
  if (!rt) return;
  const int64_t now = NowMs();
  std::vector<std::thread> checks;
  for (const auto& pool : rt->pools) {
    if (!pool->spec->health_check.enabled) continue;
    for (const auto& r : pool->replicas) {
      if (r->next_check_ms.load() > now) continue;
      r->next_check_ms.store(now + pool->spec->health_check.interval_ms);
      const PoolSpec* spec = pool->spec;
      checks.emplace_back([this, r, spec, rt] { CheckReplica(r, *spec); });
    }
  }
  for (auto& t : checks) t.join();
}

void RouterCore::HealthLoop() {
  while (true) {
    {
      MutexLock lock(health_mu_);
      if (clock_.WaitForMs(lock, health_cv_, kRoundMs,
                           [this]() REQUIRES(health_mu_) { return stop_; }))
        return;
    }
    CheckHealthNow();
  }
}

}  // namespace octet::router
