// ReplicaState: one replica endpoint's load, health and ejection state, and
// its pools of idle keep-alive connections (httplib::Client for worker
// exchanges, UpstreamConn for the gateway's loop streams).
#pragma once

#include <httplib.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "octet/base/thread_annotations.h"
#include "octet/router/policy.h"
#include "replica_url.h"
#include "upstream_conn.h"

namespace octet::router {

// One replica endpoint. Shared by every policy version that has the same pool
// name and URL, so load and health carry across a reload.
class ReplicaState {
 public:
  ReplicaState(std::string pool, std::string url, ReplicaUrl parsed, std::string api_key);

  const std::string& pool() const { return pool_; }
  const std::string& url() const { return url_; }
  const ReplicaUrl& parsed() const { return parsed_; }
  const std::string& api_key() const { return api_key_; }

  bool Available(int64_t now_ms) const {
    return healthy.load(std::memory_order_relaxed) &&
           now_ms >= ejected_until_ms.load(std::memory_order_relaxed);
  }

  // A keep-alive client from the idle list, or a new one; configured with `t`.
  std::unique_ptr<httplib::Client> AcquireClient(const TimeoutSpec& t) EXCLUDES(conn_mu_);
  // One GET of `path` (under the replica's URL prefix, with its API key) on a
  // connection of its own, every phase bounded by `timeout_ms`: the health
  // check's and the gateway's /v1/models lookup.
  httplib::Result Get(const std::string& path, int timeout_ms) const;
  // Returns a client whose last exchange completed cleanly.
  void ReleaseClient(std::unique_ptr<httplib::Client> client) EXCLUDES(conn_mu_);
  // The same for the gateway's streaming connections (plain http only): an idle
  // keep-alive connection that is still open, or nullptr (the caller connects).
  std::unique_ptr<UpstreamConn> AcquireConn() EXCLUDES(conn_mu_);
  void ReleaseConn(std::unique_ptr<UpstreamConn> conn) EXCLUDES(conn_mu_);

  std::atomic<int> in_flight{0};
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> failures{0};
  std::atomic<bool> healthy{true};
  std::atomic<int64_t> ejected_until_ms{0};
  std::atomic<int64_t> next_check_ms{0};

  // Outlier ejection (RouterCore::ReportFailure/ReportSuccess) and active
  // health checks (health_check.cpp) count under mu.
  Mutex mu;
  int consecutive_failures GUARDED_BY(mu) = 0;
  int ejection_count GUARDED_BY(mu) = 0;
  int64_t returned_at_ms GUARDED_BY(mu) = 0;  // when the last ejection ended (multiplier decay)
  int check_failures GUARDED_BY(mu) = 0;
  int check_successes GUARDED_BY(mu) = 0;
  // The body of the replica's last 200 answer to GET /v1/models and when it
  // came (router clock, ms; 0: never). The health checks refresh it, so that
  // the gateway's /v1/models answers without a round trip to a replica.
  std::string models_body GUARDED_BY(mu);
  int64_t models_at_ms GUARDED_BY(mu) = 0;
  // A passing health check refreshes the answer once it is this old; the
  // gateway asks itself only when it is twice this old (health checks off).
  static constexpr int64_t kModelsRefreshMs = 30'000;

 private:
  const std::string pool_, url_;
  const ReplicaUrl parsed_;
  const std::string api_key_;
  // Idle keep-alive connections, most recently used last. Few and short-lived:
  // an idle connection costs an httplib-based upstream (`octet serve`) a thread
  // that polls it every ~10 ms, and servers close idle connections after a few
  // seconds (httplib: 5 s), so one older than 2 s is not reused.
  static constexpr size_t kMaxIdleClients = 16;
  static constexpr int64_t kIdleReuseNs = 2'000'000'000;
  struct IdleClient {
    std::unique_ptr<httplib::Client> client;
    int64_t since_ns;
  };
  Mutex conn_mu_;
  std::vector<IdleClient> idle_ GUARDED_BY(conn_mu_);
  struct IdleConn {
    std::unique_ptr<UpstreamConn> conn;
    int64_t since_ns;
  };
  std::vector<IdleConn> idle_conns_ GUARDED_BY(conn_mu_);
};

}  // namespace octet::router
