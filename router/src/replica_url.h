// Replica URLs: "http://host[:port][/prefix]" or "https://...". The prefix is
// prepended to request paths; a trailing "/v1" (an OpenAI base URL) is dropped
// because the gateway forwards full "/v1/..." paths.
#pragma once

#include <string>
#include <string_view>

namespace octet::router {

struct ReplicaUrl {
  std::string scheme;  // "http" or "https"
  std::string host;
  int port = 0;
  std::string prefix;  // "" or "/something" without a trailing slash
  // "scheme://host:port", what an httplib::Client takes.
  std::string origin() const {
    const bool v6 = host.find(':') != std::string::npos;
    return scheme + "://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
  }
};

// Parses `url`; on failure returns false and says why in *error.
bool ParseReplicaUrl(std::string_view url, ReplicaUrl* out, std::string* error);

}  // namespace octet::router
