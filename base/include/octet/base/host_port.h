// "HOST:PORT" addresses as flags, profiles and job specs write them: a host
// name or IPv4 address with a port, or a bracketed IPv6 address (a zone
// included: "[fe80::1%ring0]:9"). One parser for the agent, the collectives'
// rendezvous and the cluster client.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "octet/base/status.h"

namespace octet {

struct HostPort {
  std::string host;  // without brackets
  uint16_t port = 0;
  std::string ToString() const;  // "host:port", "[v6]:port"
};

// Splits "host:port", "1.2.3.4:29500" or "[::1]:29500". The port may be 0
// (callers that need a bound port refuse it themselves). InvalidArgument,
// quoting the text, for an empty host, an unbracketed IPv6 address, or a port
// that is not a number in 0..65535.
Result<HostPort> ParseHostPort(std::string_view text);

// The same, into two variables (left unchanged on error).
Status SplitHostPort(std::string_view address, std::string* host, uint16_t* port);

// Joins a host and port, bracketing IPv6 hosts.
std::string JoinHostPort(std::string_view host, uint16_t port);

}  // namespace octet
