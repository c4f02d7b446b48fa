// The router gateway's HTTP/1.1 request-head parser (router/src/http_request.*)
// and its query decoding, as the event loop calls them on bytes from the
// network: any bytes give a request or a 4xx/5xx with a message, and what is
// accepted keeps the limits the caller set.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "http_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  // The event loop hands over the head without its final blank line.
  const size_t end = in.find("\r\n\r\n");
  const std::string_view head = end == std::string_view::npos ? in : in.substr(0, end);
  constexpr uint64_t kMaxBody = 1 << 20;
  octet::router::HttpRequest req;
  octet::router::HeadParseError err;
  if (octet::router::ParseRequestHead(head, kMaxBody, &req, &err)) {
    if (req.content_length > kMaxBody) std::abort();  // the 413 limit was not applied
    if (req.method.empty()) std::abort();
    (void)req.Header("content-type");
    (void)octet::router::QueryParam(req.query, "model");
  } else {
    if (err.status != 400 && err.status != 413 && err.status != 417 && err.status != 501 &&
        err.status != 505) {
      std::abort();  // an error status the gateway does not send
    }
    if (err.message.empty()) std::abort();
  }
  return 0;
}
