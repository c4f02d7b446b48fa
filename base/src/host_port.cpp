#include "octet/base/host_port.h"

#include <charconv>

namespace octet {

std::string HostPort::ToString() const { return JoinHostPort(host, port); }

std::string JoinHostPort(std::string_view host, uint16_t port) {
  if (host.find(':') != std::string_view::npos) {
    return "[" + std::string(host) + "]:" + std::to_string(port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

Result<HostPort> ParseHostPort(std::string_view text) {
  const std::string quoted = "'" + std::string(text) + "'";
  HostPort hp;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return InvalidArgumentError("address " + quoted + ": expected [IPV6]:PORT");
    }
    hp.host = std::string(text.substr(1, close - 1));
    port_text = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      return InvalidArgumentError("address " + quoted + ": expected HOST:PORT");
    }
    hp.host = std::string(text.substr(0, colon));
    if (hp.host.find(':') != std::string::npos) {
      return InvalidArgumentError("address " + quoted +
                                  ": an IPv6 address needs brackets, [ADDRESS]:PORT");
    }
    port_text = text.substr(colon + 1);
  }
  if (hp.host.empty()) return InvalidArgumentError("address " + quoted + ": empty host");
  unsigned v = 0;
  const auto r = std::from_chars(port_text.data(), port_text.data() + port_text.size(), v);
  if (port_text.empty() || r.ec != std::errc() || r.ptr != port_text.data() + port_text.size() ||
      v > 65535) {
    return InvalidArgumentError("address " + quoted + ": the port must be a number 0-65535");
  }
  hp.port = static_cast<uint16_t>(v);
  return hp;
}

Status SplitHostPort(std::string_view address, std::string* host, uint16_t* port) {
  OCTET_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(address));
  *host = std::move(hp.host);
  *port = hp.port;
  return Status::Ok();
}

}  // namespace octet
