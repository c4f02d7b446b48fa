#include "octet/app/chat_client.h"

#include <httplib.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "octet/base/http/client_error.h"
#include "octet/base/json.h"
#include "octet/engine/generate.h"

namespace octet::app {
namespace {

using nlohmann::json;

struct ParsedUrl {
  std::string scheme_host_port;  // what httplib::Client takes
  std::string prefix;            // path before /v1
};

Result<ParsedUrl> ParseBaseUrl(const std::string& url) {
  std::string u = url;
  while (!u.empty() && u.back() == '/') u.pop_back();
  if (u.size() >= 3 && u.compare(u.size() - 3, 3, "/v1") == 0) u.resize(u.size() - 3);
  if (u.rfind("http://", 0) != 0) {
    return InvalidArgumentError("endpoint '" + url + "': only http:// URLs are supported");
  }
  const size_t path = u.find('/', 7);
  ParsedUrl p;
  p.scheme_host_port = u.substr(0, path);
  if (path != std::string::npos) p.prefix = u.substr(path);
  if (p.scheme_host_port.size() <= 7) return InvalidArgumentError("endpoint '" + url + "': no host");
  return p;
}

std::string ServerError(int status, const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object() &&
      j["error"].contains("message") && j["error"]["message"].is_string()) {
    return "HTTP " + std::to_string(status) + ": " + j["error"]["message"].get<std::string>();
  }
  return "HTTP " + std::to_string(status) + (body.empty() ? "" : ": " + body.substr(0, 300));
}

double NumberOr(const json& j, const char* key, double fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

// A token count from a usage object: 0 when absent, not a number or out of int's range.
int CountOr(const json& j, const char* key) {
  const double v = NumberOr(j, key, 0);
  return v >= 0 && v <= 2147483647.0 ? static_cast<int>(v) : 0;
}

}  // namespace

std::string ChatRequestBody(const ChatRequest& r) {
  json msgs = json::array();
  for (const ChatMessage& m : r.messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
  json j = {{"messages", msgs}, {"stream", true}, {"stream_options", {{"include_usage", true}}}};
  // Unset fields are left out: the server's defaults apply (see the header).
  if (r.temperature) j["temperature"] = *r.temperature;
  if (r.top_p) j["top_p"] = *r.top_p;
  if (r.top_k) j["top_k"] = *r.top_k;
  if (r.repetition_penalty) j["repetition_penalty"] = *r.repetition_penalty;
  if (r.max_tokens) j["max_tokens"] = *r.max_tokens;
  if (!r.model.empty()) j["model"] = r.model;
  if (!r.stop.empty()) j["stop"] = r.stop;
  return j.dump();
}

bool ChatStreamParser::Feed(std::string_view bytes,
                            const std::function<void(const std::string&)>& on_delta) {
  return sse_.Feed(bytes, [&](const SseReader::Event& e) { Event(e.data, on_delta); });
}

void ChatStreamParser::Event(const std::string& data,
                             const std::function<void(const std::string&)>& on_delta) {
  if (data == "[DONE]") {
    done_ = true;
    return;
  }
  ChatReply& reply = reply_;
  json c = json::parse(data, nullptr, false);
  if (!c.is_object()) return;
  if (c.contains("choices") && c["choices"].is_array() && !c["choices"].empty()) {
    const json& ch = c["choices"][0];
    if (ch.is_object() && ch.contains("delta") && ch["delta"].is_object() &&
        ch["delta"].contains("content") && ch["delta"]["content"].is_string()) {
      const std::string piece = ch["delta"]["content"].get<std::string>();
      if (!piece.empty()) {
        if (reply.ttft_ms < 0) reply.ttft_ms = (NowNs() - start_ns_) / 1e6;
        reply.text += piece;
        if (on_delta) on_delta(piece);
      }
    }
    if (ch.is_object() && ch.contains("finish_reason") && ch["finish_reason"].is_string()) {
      reply.finish_reason = ch["finish_reason"].get<std::string>();
    }
  }
  if (c.contains("usage") && c["usage"].is_object()) {
    reply.prompt_tokens = CountOr(c["usage"], "prompt_tokens");
    reply.completion_tokens = CountOr(c["usage"], "completion_tokens");
  }
  if (c.contains("timings") && c["timings"].is_object()) {
    reply.server_ttft_ms = NumberOr(c["timings"], "ttft_ms", -1);
    reply.prefill_tps = NumberOr(c["timings"], "prefill_tps", -1);
    reply.decode_tps = NumberOr(c["timings"], "decode_tps", -1);
  }
}

Result<ChatReply> StreamChat(const ChatRequest& request,
                             const std::function<void(const std::string& delta)>& on_delta,
                             const std::atomic<bool>* cancel, Deadline deadline) {
  OCTET_ASSIGN_OR_RETURN(ParsedUrl url, ParseBaseUrl(request.base_url));
  httplib::Client client(url.scheme_host_port);
  client.set_connection_timeout(std::chrono::milliseconds(std::min<int64_t>(
      3000, std::max<int64_t>(1, deadline.poll_timeout_ms()))));
  // A long prefill sends nothing for a while: reads wait up to the deadline.
  client.set_read_timeout(
      std::chrono::milliseconds(std::max<int64_t>(1, deadline.poll_timeout_ms())));
  client.set_keep_alive(false);

  ChatStreamParser parser(NowNs());
  ChatReply& reply = parser.reply();
  const int64_t t0 = NowNs();
  int status = 0;
  std::string error_body;
  bool timed_out = false;
  bool too_long = false;

  httplib::Request req;
  req.method = "POST";
  req.path = url.prefix + "/v1/chat/completions";
  req.headers.emplace("Content-Type", "application/json");
  req.headers.emplace("Accept", "text/event-stream");
  if (!request.api_key.empty()) req.headers.emplace("Authorization", "Bearer " + request.api_key);
  req.body = ChatRequestBody(request);
  req.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    reply.pool = r.get_header_value("X-Octet-Pool");
    reply.route = r.get_header_value("X-Octet-Route");
    reply.replica = r.get_header_value("X-Octet-Replica");
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (cancel && cancel->load()) return false;
    if (deadline.expired()) {
      timed_out = true;
      return false;
    }
    if (status < 200 || status >= 300) {
      if (error_body.size() < 64 * 1024) error_body.append(data, n);
      return true;
    }
    if (!parser.Feed(std::string_view(data, n), on_delta)) {
      too_long = true;
      return false;
    }
    return true;
  };

  // The receiver sees `cancel` only when bytes arrive; while the server is
  // silent (a long prefill) a watcher stops the client instead, so a
  // cancelled request (a closed chat panel) never waits out the read timeout.
  std::atomic<bool> finished{false};
  std::thread watcher;
  if (cancel) {
    watcher = std::thread([&] {
      // Its own name, not the caller's it would inherit (a UI worker's).
      pthread_setname_np(pthread_self(), "chatCancelWatch");
      while (!finished.load()) {
        if (cancel->load()) {
          client.stop();
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
  }
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool ok = client.send(req, res, err);
  finished = true;
  if (watcher.joinable()) watcher.join();
  reply.total_ms = (NowNs() - t0) / 1e6;
  if (cancel && cancel->load()) {
    reply.finish_reason = "cancelled";
    return reply;
  }
  if (timed_out) return DeadlineExceededError("chat reply took longer than the deadline");
  if (too_long) {
    return DataLossError("the stream from " + request.base_url + " sent an event longer than " +
                         std::to_string(ChatStreamParser::kMaxEventBytes >> 20) + " MiB");
  }
  if (!ok && status == 0) {
    return UnavailableError("no answer from " + request.base_url + ": " +
                            http::ClientErrorText(err));
  }
  if (status < 200 || status >= 300) return UnavailableError(ServerError(status, error_body));
  if (!ok && !parser.done()) {
    return UnavailableError("the stream from " + request.base_url +
                            " ended early: " + http::ClientErrorText(err));
  }
  if (reply.finish_reason.empty()) reply.finish_reason = "stop";
  return reply;
}

Result<std::vector<std::string>> ListModels(const std::string& base_url, Deadline deadline) {
  OCTET_ASSIGN_OR_RETURN(ParsedUrl url, ParseBaseUrl(base_url));
  httplib::Client client(url.scheme_host_port);
  const auto ms = std::chrono::milliseconds(std::max<int64_t>(1, deadline.poll_timeout_ms()));
  client.set_connection_timeout(ms);
  client.set_read_timeout(ms);
  auto res = client.Get(url.prefix + "/v1/models");
  if (!res)
    return UnavailableError("no answer from " + base_url + ": " +
                            http::ClientErrorText(res.error()));
  if (res->status != 200) return UnavailableError(ServerError(res->status, res->body));
  json j = json::parse(res->body, nullptr, false);
  std::vector<std::string> ids;
  if (j.is_object() && j.contains("data") && j["data"].is_array()) {
    for (const json& m : j["data"]) {
      if (m.contains("id") && m["id"].is_string()) ids.push_back(m["id"].get<std::string>());
    }
  }
  return ids;
}

std::string GenerationDefaultsJson(const engine::GenerationDefaults& d) {
  const engine::SamplingParams builtin;
  auto entry = [](const auto& configured, json builtin_value) {
    if (configured) return json{{"value", *configured}, {"source", "generation_config.json"}};
    return json{{"value", builtin_value}, {"source", "built-in"}};
  };
  json j = {{"config", d.path.empty() ? json(nullptr) : json(d.path)},
            {"temperature", entry(d.temperature, builtin.temperature)},
            {"top_p", entry(d.top_p, builtin.top_p)},
            {"top_k", entry(d.top_k, builtin.top_k)},
            {"repetition_penalty", entry(d.repetition_penalty, builtin.repetition_penalty)},
            {"max_tokens", entry(d.max_new_tokens, nullptr)}};
  return j.dump();
}

std::vector<ServerDefault> ParseServerDefaults(const std::string& body, const std::string& model) {
  std::vector<ServerDefault> out;
  json j = json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array()) return out;
  const json* entry = nullptr;
  for (const json& m : j["data"]) {
    if (!m.is_object()) continue;
    if (model.empty() || (m.contains("id") && m["id"] == model)) {
      entry = &m;
      break;
    }
  }
  if (!entry || !entry->contains("generation_defaults")) return out;
  const json& g = (*entry)["generation_defaults"];
  if (!g.is_object()) return out;
  for (const char* name : {"temperature", "top_p", "top_k", "repetition_penalty", "max_tokens"}) {
    auto it = g.find(name);
    if (it == g.end() || !it->is_object()) continue;
    ServerDefault s;
    s.name = name;
    if (it->contains("value") && (*it)["value"].is_number()) s.value = (*it)["value"].get<double>();
    if (it->contains("source") && (*it)["source"].is_string()) {
      s.source = (*it)["source"].get<std::string>();
    }
    out.push_back(std::move(s));
  }
  return out;
}

Result<std::vector<ServerDefault>> FetchServerDefaults(const std::string& base_url,
                                                       const std::string& model,
                                                       const std::string& api_key,
                                                       Deadline deadline) {
  OCTET_ASSIGN_OR_RETURN(ParsedUrl url, ParseBaseUrl(base_url));
  httplib::Client client(url.scheme_host_port);
  const auto ms = std::chrono::milliseconds(std::max<int64_t>(1, deadline.poll_timeout_ms()));
  client.set_connection_timeout(ms);
  client.set_read_timeout(ms);
  httplib::Headers headers;
  if (!api_key.empty()) headers.emplace("Authorization", "Bearer " + api_key);
  auto res = client.Get(url.prefix + "/v1/models", headers);
  if (!res)
    return UnavailableError("no answer from " + base_url + ": " +
                            http::ClientErrorText(res.error()));
  if (res->status != 200) return UnavailableError(ServerError(res->status, res->body));
  return ParseServerDefaults(res->body, model);
}

}  // namespace octet::app
