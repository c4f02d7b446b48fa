#include "replica_state.h"

#include <algorithm>
#include <chrono>

#include "octet/base/deadline.h"

namespace octet::router {

ReplicaState::ReplicaState(std::string pool, std::string url, ReplicaUrl parsed,
                           std::string api_key)
    : pool_(std::move(pool)),
      url_(std::move(url)),
      parsed_(std::move(parsed)),
      api_key_(std::move(api_key)) {}

httplib::Result ReplicaState::Get(const std::string& path, int timeout_ms) const {
  httplib::Client cli(parsed_.origin());
  cli.set_keep_alive(false);
  const auto timeout = std::chrono::milliseconds(timeout_ms);
  cli.set_connection_timeout(timeout);
  cli.set_read_timeout(timeout);
  cli.set_write_timeout(timeout);
  httplib::Headers headers;
  if (!api_key_.empty()) headers.emplace("Authorization", "Bearer " + api_key_);
  return cli.Get(parsed_.prefix + path, headers);
}

std::unique_ptr<httplib::Client> ReplicaState::AcquireClient(const TimeoutSpec& t) {
  std::unique_ptr<httplib::Client> c;
  std::vector<std::unique_ptr<httplib::Client>> stale;  // closed outside the lock
  {
    MutexLock lock(conn_mu_);
    const int64_t now = NowNs();
    while (!idle_.empty()) {
      IdleClient ic = std::move(idle_.back());
      idle_.pop_back();
      if (now - ic.since_ns < kIdleReuseNs) {
        c = std::move(ic.client);
        break;
      }
      stale.push_back(std::move(ic.client));
    }
    // Anything older than the newest stale one is stale too.
    if (!stale.empty()) {
      for (auto& ic : idle_) stale.push_back(std::move(ic.client));
      idle_.clear();
    }
  }
  if (!c) {
    c = std::make_unique<httplib::Client>(parsed_.origin());
    c->set_keep_alive(true);
    c->set_tcp_nodelay(true);
  }
  const auto ms = [](int64_t v) { return std::chrono::milliseconds(v); };
  c->set_connection_timeout(ms(t.connect_ms));
  c->set_read_timeout(ms(std::max(t.first_token_ms, t.idle_ms)));
  c->set_write_timeout(ms(std::max<int64_t>(t.connect_ms, 10000)));
  return c;
}

void ReplicaState::ReleaseClient(std::unique_ptr<httplib::Client> client) {
  MutexLock lock(conn_mu_);
  if (idle_.size() < kMaxIdleClients) idle_.push_back(IdleClient{std::move(client), NowNs()});
}

std::unique_ptr<UpstreamConn> ReplicaState::AcquireConn() {
  std::vector<std::unique_ptr<UpstreamConn>> stale;  // closed outside the lock
  std::unique_ptr<UpstreamConn> c;
  {
    MutexLock lock(conn_mu_);
    const int64_t now = NowNs();
    while (!idle_conns_.empty()) {
      IdleConn ic = std::move(idle_conns_.back());
      idle_conns_.pop_back();
      if (now - ic.since_ns < kIdleReuseNs) {
        c = std::move(ic.conn);
        break;
      }
      stale.push_back(std::move(ic.conn));
    }
    if (!stale.empty()) {
      for (auto& ic : idle_conns_) stale.push_back(std::move(ic.conn));
      idle_conns_.clear();
    }
  }
  // The server may have closed it meanwhile (its keep-alive timeout, a restart).
  if (c && !c->IdleAndOpen()) c.reset();
  return c;
}

void ReplicaState::ReleaseConn(std::unique_ptr<UpstreamConn> conn) {
  MutexLock lock(conn_mu_);
  if (idle_conns_.size() < kMaxIdleClients)
    idle_conns_.push_back(IdleConn{std::move(conn), NowNs()});
}

}  // namespace octet::router
