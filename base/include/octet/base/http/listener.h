// The listening socket of an HTTP server, with the rules every Octet server
// keeps: no SO_REUSEPORT (a second server on a busy port is an error, not a
// silent split of the traffic), SO_REUSEADDR only so a restart does not wait
// out TIME_WAIT, a backlog of SOMAXCONN (a burst of clients waits in the
// kernel instead of being refused), non-blocking and close-on-exec.
#pragma once

#include <string>

#include "octet/base/status.h"

namespace octet::http {

struct ListenSocket {
  int fd = -1;
  int port = 0;  // the bound port (the one asked for, or the kernel's pick for 0)
};

// Binds host:port ("" host: every address; port 0: any free port) and
// listens. A port in use is an error naming host:port. `who` prefixes the
// messages ("gateway", "serve").
Result<ListenSocket> Listen(const std::string& who, const std::string& host, int port);

}  // namespace octet::http
