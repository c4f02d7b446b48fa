// The HTTP core's request parser (octet/base/http/request.h), shared by the
// router's gateway and `octet serve`, as the event loop calls it on bytes from
// the network: the head, then (when the head says so) a chunked body fed in
// pieces. Any bytes give a request or a 4xx/5xx with a message, and what is
// accepted keeps the limits the caller set.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "octet/base/http/request.h"

using namespace octet::http;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  // The event loop hands over the head without its final blank line.
  const size_t end = in.find("\r\n\r\n");
  const std::string_view head = end == std::string_view::npos ? in : in.substr(0, end);
  constexpr uint64_t kMaxBody = 1 << 20;
  Request req;
  ParseError err;
  if (!ParseRequestHead(head, kMaxBody, &req, &err)) {
    if (err.status != 400 && err.status != 413 && err.status != 417 && err.status != 501 &&
        err.status != 505) {
      std::abort();  // an error status the server does not send
    }
    if (err.message.empty()) std::abort();
    return 0;
  }
  if (req.content_length > kMaxBody) std::abort();  // the 413 limit was not applied
  if (req.method.empty()) std::abort();
  if (req.chunked && req.content_length != 0) std::abort();  // two framings at once
  (void)req.Header("content-type");
  (void)QueryParam(req.query, "model");
  if (!req.chunked || end == std::string_view::npos) return 0;
  // The rest is the chunked body, fed in pieces of a size the input picks.
  std::string_view body = in.substr(end + 4);
  const size_t step = body.empty() ? 1 : 1 + static_cast<unsigned char>(body[0]) % 16;
  ChunkedDecoder decoder(kMaxBody);
  std::string pending, decoded;
  for (size_t fed = 0; fed < body.size(); fed += step) {
    pending.append(body.substr(fed, step));
    size_t used = 0;
    const ChunkedDecoder::State st = decoder.Feed(pending, &used, &decoded);
    if (used > pending.size()) std::abort();
    pending.erase(0, used);
    if (decoded.size() > kMaxBody) std::abort();
    if (st == ChunkedDecoder::State::kError) {
      if (decoder.error().status != 400 && decoder.error().status != 413) std::abort();
      break;
    }
    if (st == ChunkedDecoder::State::kDone) break;
  }
  return 0;
}
