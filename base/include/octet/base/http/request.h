// HTTP/1.1 requests as a server receives them from untrusted clients: the
// head parsed from a byte buffer once "\r\n\r\n" has arrived, and a chunked
// body decoded as its bytes arrive. Every limit a public endpoint needs is
// applied here or by the caller named below, and every refusal carries the
// status to answer with and a message saying what was wrong.
//
// Framing rules (RFC 9112 section 6): a body is framed by one Content-Length
// or by "Transfer-Encoding: chunked"; a second Content-Length header (equal
// or not), both framings at once, or any other transfer coding is refused,
// so that no proxy in front of us can read the request differently.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace octet::http {

struct Request {
  std::string method;                                        // as sent ("GET", "POST", ...)
  std::string path;                                          // the target before '?'
  std::string query;                                         // after '?', undecoded ("" when none)
  bool http11 = true;                                        // false: HTTP/1.0
  std::vector<std::pair<std::string, std::string>> headers;  // in order, values trimmed
  uint64_t content_length = 0;   // 0 when chunked (the decoded size is body.size())
  bool chunked = false;          // "Transfer-Encoding: chunked"
  bool keep_alive = true;        // the client lets the connection carry another request
  bool expect_continue = false;  // "Expect: 100-continue"
  std::string body;              // filled by the server once the body has arrived
  std::string peer;              // the client's address (set by the server)

  // The first header named `name` (ASCII case-insensitive), or "".
  std::string Header(std::string_view name) const;
  bool HasHeader(std::string_view name) const;
  // Removes every header named `name`, then appends `name: value`.
  void SetHeader(std::string_view name, std::string value);
};

struct ParseError {
  // 400 malformed, 413 body too large, 417 unknown Expect, 501 transfer coding
  // other than chunked, 505 not HTTP/1.x.
  int status = 0;
  std::string message;
};

// Parses `head` (request line and header lines, without the final blank
// line). A Content-Length above max_body_bytes is a 413. Returns false with
// *error set when the head is not acceptable. The caller bounds the head's
// size (431) before calling.
bool ParseRequestHead(std::string_view head, uint64_t max_body_bytes, Request* out,
                      ParseError* error);

// Decodes a chunked body as it arrives: chunk sizes in hex, extensions
// ignored, trailers read and dropped. The decoded body may not exceed
// max_body_bytes (413), a chunk-size line or the trailers not 8 KiB (400).
class ChunkedDecoder {
 public:
  enum class State { kNeedMore, kDone, kError };
  explicit ChunkedDecoder(uint64_t max_body_bytes) : max_body_bytes_(max_body_bytes) {}

  // Consumes from `in` (setting *consumed), appending decoded bytes to *body.
  // kDone: the last chunk and the trailers were read; bytes after them in
  // `in` are the next request. kError: error() says why.
  State Feed(std::string_view in, size_t* consumed, std::string* body);
  const ParseError& error() const { return error_; }

 private:
  enum class Phase { kSize, kData, kDataEnd, kTrailer };
  State Fail(int status, std::string message);

  uint64_t max_body_bytes_;
  Phase phase_ = Phase::kSize;
  uint64_t remaining_ = 0;  // kData: bytes of the current chunk still to come
  std::string line_;        // kSize / kTrailer: the line so far
  size_t trailer_bytes_ = 0;
  ParseError error_;
};

// ASCII case folding, for header names and tokens (HTTP/1.1 is case-insensitive there).
char AsciiLower(char c);
bool AsciiIEquals(std::string_view a, std::string_view b);
// True when the comma-separated list `value` holds `token` (case-insensitive).
bool HasToken(std::string_view value, std::string_view token);

// The value of `key` in an application/x-www-form-urlencoded query ("" when absent).
std::string QueryParam(std::string_view query, std::string_view key);

}  // namespace octet::http
