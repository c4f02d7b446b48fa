// HTTP/1.1 responses as bytes: the status line and headers, a body framed by
// Content-Length, by chunked transfer coding, or (HTTP/1.0 streams) by the
// end of the connection, and server-sent events (text/event-stream) inside it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace octet::http {

using Headers = std::vector<std::pair<std::string, std::string>>;

// The reason phrase of an HTTP status ("OK", "Not Found", ...).
const char* ReasonPhrase(int status);

// How a response's body is delimited.
enum class BodyFraming {
  kLength,   // "Content-Length: N" (N = the body's size given)
  kChunked,  // "Transfer-Encoding: chunked" (HTTP/1.1 streams)
  kClose,    // no length: the body ends when the connection closes (HTTP/1.0 streams)
};

// "HTTP/1.1 <status> <reason>\r\n", `headers` in order (any Content-Length,
// Transfer-Encoding or Connection among them is dropped: the framing decides
// those), the framing's header, "Connection: close" when `close`, and the
// blank line. `content_length` is used with kLength only.
std::string ResponseHead(int status, const Headers& headers, BodyFraming framing,
                         size_t content_length, bool close);

// One chunk of a chunked body ("<hex size>\r\n<data>\r\n"); empty data gives
// nothing (an empty chunk would end the body).
std::string ChunkFrame(std::string_view data);
// The end of a chunked body: the zero-size chunk and no trailers.
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";

// One server-sent event: an "event: <type>" line when `type` is not empty,
// one "data: " line per line of `data` (split on LF, CRLF or CR so that a
// reader sees `data` again, joined with "\n"), and the blank line that ends it.
std::string SseEvent(std::string_view data, std::string_view type = {});

}  // namespace octet::http
