// HTTP/1.1 request heads as the gateway's event loop receives them: parsed
// from a byte buffer once "\r\n\r\n" has arrived, with the limits a public
// endpoint needs (head size, body size) applied by the caller. Bodies are
// framed by Content-Length only; a chunked request body is refused (501).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace octet::router {

struct HttpRequest {
  std::string method;  // as sent ("GET", "POST", ...)
  std::string path;    // the target before '?'
  std::string query;   // after '?', undecoded ("" when none)
  bool http11 = true;  // false: HTTP/1.0
  std::vector<std::pair<std::string, std::string>> headers;  // in order, values trimmed
  uint64_t content_length = 0;
  bool keep_alive = true;        // the client lets the connection carry another request
  bool expect_continue = false;  // "Expect: 100-continue"
  std::string body;

  // The first header named `name` (ASCII case-insensitive), or "".
  std::string Header(std::string_view name) const;
  bool HasHeader(std::string_view name) const;
};

struct HeadParseError {
  int status = 0;  // 400 malformed, 413 body too large, 501 chunked body, 505 not HTTP/1.x
  std::string message;
};

// Parses the head `head` (request line and header lines, without the final
// blank line). A Content-Length above max_body_bytes is a 413. Returns false
// with *error set when the head is not acceptable.
bool ParseRequestHead(std::string_view head, uint64_t max_body_bytes, HttpRequest* out,
                      HeadParseError* error);

// ASCII case folding, for header names and tokens (HTTP/1.1 is case-insensitive there).
char AsciiLower(char c);
bool AsciiIEquals(std::string_view a, std::string_view b);

// The value of `key` in an application/x-www-form-urlencoded query ("" when absent).
std::string QueryParam(std::string_view query, std::string_view key);

}  // namespace octet::router
