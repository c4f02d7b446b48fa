// The core's requests and responses for handlers written against
// cpp-httplib's Request/Response types (the router's gateway and `octet
// serve`): a parsed Request becomes an httplib::Request, and an
// httplib::Response goes back through the core's Responder, either the whole
// body or the response's content provider run with a sink that writes through
// the loop and blocks (bounded by the core's write timeout) while the client's
// backlog is full. Header-only: octet_http itself does not depend on
// cpp-httplib; code that includes this already does.
#pragma once

#include <httplib.h>

#include <string_view>
#include <utility>

#include "octet/base/http/server.h"

namespace octet::http {

// The request as httplib's type; its body is moved out of `r`. The query
// string is not parsed into `params`: a handler that reads parameters sets
// the ones it knows from QueryParam(r.query, ...).
inline httplib::Request ToHttplibRequest(Request& r) {
  httplib::Request req;
  req.method = r.method;
  req.path = r.path;
  req.version = r.http11 ? "HTTP/1.1" : "HTTP/1.0";
  for (const auto& [name, value] : r.headers) req.headers.emplace(name, value);
  req.body = std::move(r.body);
  req.remote_addr = r.peer;
  return req;
}

inline void SendHttplibResponse(httplib::Response& res, Responder& out) {
  if (res.status == -1) res.status = 200;  // httplib: a handler that did not set it
  if (res.status <= 0) res.status = 500;
  const Headers headers(res.headers.begin(), res.headers.end());
  if (!res.content_provider_) {
    out.Send(res.status, headers, res.body);
    return;
  }
  bool done = false, failed = !out.BeginStream(res.status, headers);
  httplib::DataSink sink;
  sink.write = [&](const char* data, size_t n) -> bool {
    if (out.Write(std::string_view(data, n))) return true;
    failed = true;
    return false;
  };
  sink.is_writable = [&] { return !out.client_gone(); };
  sink.done = [&] { done = true; };
  while (!done && !failed) {
    if (!res.content_provider_(0, 0, sink)) failed = true;
  }
  res.content_provider_success_ = done && !failed;
  out.End(res.content_provider_success_);  // incomplete: the connection ends
  // ~Response runs the provider's releaser with content_provider_success_.
}

}  // namespace octet::http
