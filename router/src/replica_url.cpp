#include "replica_url.h"

#include <cctype>

namespace octet::router {

bool ParseReplicaUrl(std::string_view url, ReplicaUrl* out, std::string* error) {
  ReplicaUrl r;
  std::string_view rest;
  if (url.substr(0, 7) == "http://") {
    r.scheme = "http";
    r.port = 80;
    rest = url.substr(7);
  } else if (url.substr(0, 8) == "https://") {
    r.scheme = "https";
    r.port = 443;
    rest = url.substr(8);
  } else {
    *error = "must start with http:// or https://";
    return false;
  }
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  if (path.find_first_of("?#") != std::string_view::npos) {
    *error = "must not have a query or fragment";
    return false;
  }
  std::string_view port_text;
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) {
      *error = "has an unclosed '[' in its host";
      return false;
    }
    r.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') {
        *error = "has text after its IPv6 host";
        return false;
      }
      port_text = after.substr(1);
    }
  } else {
    const size_t colon = authority.rfind(':');
    if (colon != std::string_view::npos) {
      r.host = std::string(authority.substr(0, colon));
      port_text = authority.substr(colon + 1);
    } else {
      r.host = std::string(authority);
    }
  }
  if (r.host.empty()) {
    *error = "has no host";
    return false;
  }
  for (char c : r.host) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ||
          c == ':')) {
      *error = "has an invalid character in its host";
      return false;
    }
  }
  if (!port_text.empty() || (authority.size() && authority.back() == ':')) {
    int port = 0;
    if (port_text.empty() || port_text.size() > 5) {
      *error = "has an invalid port";
      return false;
    }
    for (char c : port_text) {
      if (!std::isdigit(static_cast<unsigned char>(c))) {
        *error = "has an invalid port";
        return false;
      }
      port = port * 10 + (c - '0');
    }
    if (port < 1 || port > 65535) {
      *error = "has a port outside 1..65535";
      return false;
    }
    r.port = port;
  }
  std::string prefix(path);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  if (prefix.size() >= 3 && prefix.compare(prefix.size() - 3, 3, "/v1") == 0)
    prefix.resize(prefix.size() - 3);
  r.prefix = prefix;
  *out = std::move(r);
  return true;
}

}  // namespace octet::router
