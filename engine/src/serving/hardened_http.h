// cpp-httplib's Server (0.11 from Debian, a compiled library) with the
// connection handling `octet serve` needs in front of untrusted clients:
//
//   - one buffered stream per connection, so pipelined requests are all read
//     and answered in order (the library's per-request stream dropped bytes
//     it had read ahead, leaving the client hanging);
//   - a deadline for a request's head (slowloris) and another for its body,
//     on top of the per-read idle timeout;
//   - a worker pool that grows on demand up to a bound (idle threads exit),
//     so slow or streaming connections do not starve /health;
//   - a listening socket without SO_REUSEPORT (a busy port is an error, not
//     a second server the kernel splits traffic with) and a listen backlog of
//     SOMAXCONN instead of the library's 5.
//
// Requests are still routed by httplib's handlers; RequestContext() gives
// the pre-routing handler a way to close the connection after its reply (a
// refused body that was never read must not be parsed as the next request).
#pragma once

#include <httplib.h>

#include <string>

#include "octet/base/status.h"

namespace octet::engine {

struct HardenedLimits {
  int head_timeout_ms = 10'000;   // first byte of a request -> end of its head
  int body_timeout_ms = 60'000;   // end of the head -> end of the body
  int idle_read_ms = 5'000;       // no byte for this long: the connection ends
  int keep_alive_ms = 30'000;     // idle between requests on one connection
  int write_timeout_ms = 30'000;  // a client that reads nothing for this long
  size_t max_requests_per_connection = 10'000;
  int min_threads = 8;     // kept alive while idle
  int max_threads = 1024;  // connections beyond this wait for a thread
};

// Per request, on the connection's thread.
struct RequestContext {
  bool close_after_reply = false;  // set by a handler: close once the reply is out
  std::string request_id;          // the x-request-id (the server's own when the client sent none)
  bool head_ok = false;            // the head parsed (the pre-routing handler ran)
};
RequestContext& CurrentRequest();

class HardenedServer : public httplib::Server {
 public:
  explicit HardenedServer(HardenedLimits limits);
  // Binds host:port (0: any free port) without SO_REUSEPORT and listens with
  // a backlog of SOMAXCONN; *bound is the port. Then listen_after_bind().
  Status Bind(const std::string& host, int port, int* bound);
  // Called by a pre-routing handler once the head was read: the body's own
  // deadline starts now.
  static void HeadDone();

 private:
  bool process_and_close_socket(socket_t sock) override;
  HardenedLimits limits_;
};

}  // namespace octet::engine
