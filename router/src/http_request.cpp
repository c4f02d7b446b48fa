#include "http_request.h"

#include <cstdlib>

namespace octet::router {
namespace {

// True when the comma-separated list `value` holds `token` (case-insensitive).
bool HasToken(std::string_view value, std::string_view token) {
  size_t start = 0;
  while (start <= value.size()) {
    size_t comma = value.find(',', start);
    if (comma == std::string_view::npos) comma = value.size();
    std::string_view item = value.substr(start, comma - start);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (AsciiIEquals(item, token)) return true;
    start = comma + 1;
  }
  return false;
}

bool IsTokenChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string PercentDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && HexValue(s[i + 1]) >= 0 && HexValue(s[i + 2]) >= 0) {
      out += static_cast<char>(HexValue(s[i + 1]) * 16 + HexValue(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

std::string HttpRequest::Header(std::string_view name) const {
  for (const auto& [n, v] : headers)
    if (AsciiIEquals(n, name)) return v;
  return std::string();
}

bool HttpRequest::HasHeader(std::string_view name) const {
  for (const auto& h : headers)
    if (AsciiIEquals(h.first, name)) return true;
  return false;
}

bool ParseRequestHead(std::string_view head, uint64_t max_body_bytes, HttpRequest* out,
                      HeadParseError* error) {
  auto fail = [error](int status, std::string message) {
    error->status = status;
    error->message = std::move(message);
    return false;
  };
  // Tolerate blank lines before the request line (RFC 9112 2.2).
  while (head.substr(0, 2) == "\r\n") head.remove_prefix(2);
  size_t eol = head.find("\r\n");
  const std::string_view line = head.substr(0, eol);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos || sp1 == 0)
    return fail(400, "malformed request line");
  out->method = std::string(line.substr(0, sp1));
  for (char c : out->method)
    if (!IsTokenChar(c)) return fail(400, "malformed request method");
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (version == "HTTP/1.1") {
    out->http11 = true;
  } else if (version == "HTTP/1.0") {
    out->http11 = false;
  } else {
    return fail(505, "only HTTP/1.0 and HTTP/1.1 are supported");
  }
  if (target.empty() || target.front() != '/') return fail(400, "the request target is not a path");
  const size_t q = target.find('?');
  out->path = std::string(target.substr(0, q));
  out->query = q == std::string_view::npos ? std::string() : std::string(target.substr(q + 1));

  out->headers.clear();
  bool has_length = false, close = !out->http11, keep_alive = false;
  size_t pos = eol == std::string_view::npos ? head.size() : eol + 2;
  while (pos < head.size()) {
    size_t next = head.find("\r\n", pos);
    if (next == std::string_view::npos) next = head.size();
    const std::string_view h = head.substr(pos, next - pos);
    pos = next + 2;
    const size_t colon = h.find(':');
    if (colon == std::string_view::npos || colon == 0) return fail(400, "malformed header line");
    const std::string_view name = h.substr(0, colon);
    for (char c : name)
      if (!IsTokenChar(c)) return fail(400, "malformed header name");
    std::string_view value = h.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    if (AsciiIEquals(name, "Content-Length")) {
      if (value.empty() || value.size() > 18) return fail(400, "bad Content-Length");
      uint64_t n = 0;
      for (char c : value) {
        if (c < '0' || c > '9') return fail(400, "bad Content-Length");
        n = n * 10 + static_cast<uint64_t>(c - '0');
      }
      if (has_length && n != out->content_length) return fail(400, "conflicting Content-Length");
      has_length = true;
      out->content_length = n;
    } else if (AsciiIEquals(name, "Transfer-Encoding")) {
      return fail(501, "chunked request bodies are not supported; send Content-Length");
    } else if (AsciiIEquals(name, "Connection")) {
      if (HasToken(value, "close")) close = true;
      if (HasToken(value, "keep-alive")) keep_alive = true;
    } else if (AsciiIEquals(name, "Expect")) {
      if (!AsciiIEquals(value, "100-continue")) return fail(417, "unsupported Expect header");
      out->expect_continue = true;
    }
    out->headers.emplace_back(std::string(name), std::string(value));
  }
  if (!has_length) out->content_length = 0;
  out->keep_alive = out->http11 ? !close : (keep_alive && !close);
  if (out->content_length > max_body_bytes)
    return fail(413, "request body is larger than gateway.max_body_bytes");
  return true;
}

std::string QueryParam(std::string_view query, std::string_view key) {
  size_t start = 0;
  while (start <= query.size()) {
    size_t amp = query.find('&', start);
    if (amp == std::string_view::npos) amp = query.size();
    const std::string_view item = query.substr(start, amp - start);
    const size_t eq = item.find('=');
    if (PercentDecode(item.substr(0, eq)) == key)
      return eq == std::string_view::npos ? std::string() : PercentDecode(item.substr(eq + 1));
    start = amp + 1;
  }
  return std::string();
}

char AsciiLower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool AsciiIEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (AsciiLower(a[i]) != AsciiLower(b[i])) return false;
  return true;
}

}  // namespace octet::router
