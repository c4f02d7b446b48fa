// Link probe: measured round-trip latency and one-way throughput between two
// agents over one particular link, on demand.
//
// Every agent runs a ProbeServer (a small TCP endpoint, its port advertised in
// beacons and node facts). A prober connects to the peer's address on the link
// to measure, proves it holds the cluster token (HMAC of a server nonce), then
// runs `round_trips` 9-byte ping-pongs (TCP_NODELAY) and one bulk transfer of
// `bytes`. Unauthenticated connections are closed after the challenge.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "octet/base/deadline.h"
#include "octet/base/host_port.h"  // SplitHostPort, JoinHostPort
#include "octet/base/status.h"

namespace octet::agent {

// Connects a TCP socket (CLOEXEC, TCP_NODELAY) to host:port by the deadline.
Result<int> ConnectTcp(const std::string& host, uint16_t port, Deadline deadline);

class ProbeServer {
 public:
  // Listens on host:port (port 0: any free port).
  static Result<std::unique_ptr<ProbeServer>> Start(const std::string& host, uint16_t port,
                                                    std::string token);
  ~ProbeServer();  // closes every connection and joins the threads
  ProbeServer(const ProbeServer&) = delete;
  ProbeServer& operator=(const ProbeServer&) = delete;
  uint16_t port() const { return port_; }

 private:
  ProbeServer() = default;
  void AcceptLoop();
  void Serve(int fd, std::atomic<bool>* done);
  void JoinFinishedLocked();
  std::string token_;
  int listen_fd_ = -1;
  int stop_pipe_[2] = {-1, -1};
  uint16_t port_ = 0;
  std::thread accept_thread_;
  std::mutex mu_;
  struct Connection {
    std::thread thread;
    std::unique_ptr<std::atomic<bool>> done;
  };
  std::vector<Connection> connections_;  // guarded by mu_
  std::vector<int> conn_fds_;            // guarded by mu_
  std::atomic<bool> stopping_{false};
};

struct LinkProbeResult {
  double rtt_us_p50 = 0;
  double rtt_us_p99 = 0;
  double throughput_gbps = 0;  // gigabits per second, prober -> peer
  uint32_t round_trips = 0;
  uint64_t bytes = 0;
};

// Probes the peer's ProbeServer at host:port. `bytes` 0 skips the bulk transfer.
Result<LinkProbeResult> RunLinkProbe(const std::string& host, uint16_t port,
                                     const std::string& token, uint64_t bytes, uint32_t round_trips,
                                     Deadline deadline);

}  // namespace octet::agent
