// Client helpers for router tests and benchmarks: one OpenAI request through
// cpp-httplib, streaming or not, recording what a client sees (status, the
// router's decision headers, the body, how many chunks it came in, and when
// the first one arrived).
#pragma once

#include <httplib.h>

#include <chrono>
#include <string>
#include <thread>

#include "octet/base/deadline.h"
#include "octet/base/json.h"

namespace octet::test {

// Polls `cond` every 10 ms until it holds or `ms` pass.
template <typename F>
bool WaitFor(F cond, int ms = 5000) {
  const Deadline d = Deadline::AfterMs(ms);
  while (!d.expired()) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return cond();
}


struct ClientResult {
  bool transport_ok = false;  // false: the connection failed or was aborted
  int status = 0;
  std::string body;
  int chunks = 0;  // body pieces received (streaming: roughly one per token)
  std::string route, pool, replica, content_type;
  double ttft_ms = -1;  // request sent -> first body byte
  std::string error;
};

inline nlohmann::json ChatRequest(const std::string& text, bool stream, int max_tokens = 0) {
  nlohmann::json r{{"model", "octet-router"},
                   {"messages", nlohmann::json::array({{{"role", "user"}, {"content", text}}})},
                   {"stream", stream}};
  if (max_tokens > 0) r["max_tokens"] = max_tokens;
  return r;
}

// POSTs `body` to `path` on 127.0.0.1:port. When abort_after_chunks >= 0 the
// client hangs up after that many body chunks (a departing client).
inline ClientResult PostJson(int port, const std::string& path, const std::string& body,
                             const httplib::Headers& headers = {}, int abort_after_chunks = -1,
                             int timeout_s = 30) {
  ClientResult r;
  httplib::Client cli("127.0.0.1", port);
  cli.set_connection_timeout(std::chrono::seconds(5));
  cli.set_read_timeout(std::chrono::seconds(timeout_s));
  cli.set_write_timeout(std::chrono::seconds(5));
  cli.set_tcp_nodelay(true);
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.headers = headers;
  req.headers.emplace("Content-Type", "application/json");
  req.body = body;
  const int64_t t0 = NowNs();
  req.response_handler = [&](const httplib::Response& res) {
    r.status = res.status;
    r.route = res.get_header_value("X-Octet-Route");
    r.pool = res.get_header_value("X-Octet-Pool");
    r.replica = res.get_header_value("X-Octet-Replica");
    r.content_type = res.get_header_value("Content-Type");
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (r.chunks == 0) r.ttft_ms = static_cast<double>(NowNs() - t0) / 1e6;
    ++r.chunks;
    r.body.append(data, n);
    return abort_after_chunks < 0 || r.chunks < abort_after_chunks;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  r.transport_ok = cli.send(req, res, err);
  if (!r.transport_ok) r.error = httplib::to_string(err);
  return r;
}

inline ClientResult Chat(int port, const std::string& text, bool stream,
                         const httplib::Headers& headers = {}, int abort_after_chunks = -1) {
  return PostJson(port, "/v1/chat/completions", ChatRequest(text, stream).dump(), headers,
                  abort_after_chunks);
}

inline ClientResult Get(int port, const std::string& path) {
  ClientResult r;
  httplib::Client cli("127.0.0.1", port);
  cli.set_connection_timeout(std::chrono::seconds(5));
  cli.set_read_timeout(std::chrono::seconds(10));
  auto res = cli.Get(path);
  r.transport_ok = static_cast<bool>(res);
  if (res) {
    r.status = res->status;
    r.body = res->body;
    r.content_type = res->get_header_value("Content-Type");
  } else {
    r.error = httplib::to_string(res.error());
  }
  return r;
}

// The content of a streamed chat response: the concatenated delta contents, and
// whether it ended with [DONE] / carried an error event.
struct StreamText {
  std::string text;
  bool done = false;
  bool error = false;
  int events = 0;
};

inline StreamText ParseSse(const std::string& body) {
  StreamText s;
  size_t start = 0;
  while (start < body.size()) {
    size_t nl = body.find('\n', start);
    if (nl == std::string::npos) nl = body.size();
    const std::string line = body.substr(start, nl - start);
    start = nl + 1;
    if (line.rfind("data: ", 0) != 0) continue;
    const std::string payload = line.substr(6);
    if (payload == "[DONE]") {
      s.done = true;
      continue;
    }
    auto j = nlohmann::json::parse(payload, nullptr, false);
    if (j.is_discarded()) continue;
    ++s.events;
    if (j.contains("error")) s.error = true;
    if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
      const auto& c = j["choices"][0];
      if (c.contains("delta") && c["delta"].contains("content") &&
          c["delta"]["content"].is_string())
        s.text += c["delta"]["content"].get<std::string>();
      else if (c.contains("text") && c["text"].is_string())
        s.text += c["text"].get<std::string>();
    }
  }
  return s;
}

// "name:0 name:1 ... name:(n-1) " — what a test upstream streams.
inline std::string ExpectedTokens(const std::string& name, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += name + ":" + std::to_string(i) + " ";
  return s;
}

}  // namespace octet::test
