#include "octet/engine/openai_server.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "octet/base/api_key.h"
#include "octet/base/http/httplib_adapter.h"
#include "octet/base/http/server.h"
#include "octet/base/json.h"
#include "octet/base/log.h"
#include "octet/base/prom_metrics.h"
#include "octet/base/thread_annotations.h"
#include "openai_request.h"
#include "openai_structured.h"
#include "serving_metrics.h"

namespace octet::engine {

using nlohmann::json;
using namespace openai;  // the request fields and reply pieces (openai_request.h)

namespace {

constexpr int kKeepAliveMs = 500;

// A reply with ErrorBody(e) and e.status.
void SendError(httplib::Response& res, const HttpError& e) {
  res.status = e.status;
  res.set_content(ErrorBody(e).dump(), "application/json");
}

}  // namespace

// ---- server -------------------------------------------------------------------------

// What the server keeps per client connection (the HTTP core's Connection::ext).
struct ConnState : http::Connection::Extension {
  std::string request_id;  // of the current request: the client's x-request-id or ours
};

using RouteHandler = std::function<void(const httplib::Request&, httplib::Response&)>;

// The server is a handler of the HTTP core shared with the router's gateway
// (octet/base/http/server.h): the core owns connections, parsing, limits and
// deadlines; each request's handler runs on one of the core's workers with
// httplib's Request/Response types, and its response (or its SSE stream)
// goes back through the core's Responder.
struct OpenAiServer::Impl : http::Handler {
  CompletionService& service;
  OpenAiServerOptions options;
  std::unique_ptr<http::Server> server;
  const int64_t started_at = static_cast<int64_t>(std::time(nullptr));  // "created"
  ServingHistograms histograms{options.histogram_max_tokens};
  std::atomic<uint64_t> next_id{1};
  json info = json::object();
  // Exact routes by "METHOD PATH" (HEAD takes GET's); /v1/models/{id} is matched by prefix.
  std::map<std::string, RouteHandler> routes;

  Impl(CompletionService& s, OpenAiServerOptions o) : service(s), options(std::move(o)) {}

  std::string NewId(const char* prefix) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s-%llx%06llx", prefix,
                  static_cast<unsigned long long>(std::time(nullptr)),
                  static_cast<unsigned long long>(next_id++));
    return buf;
  }

  // Parses the body as a JSON object; an error response is sent when it is not.
  std::optional<json> Body(const httplib::Request& req, httplib::Response& res) {
    json j = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      SendError(res, {400, "the request body is not valid JSON", "invalid_request_error"});
      return std::nullopt;
    }
    if (!j.is_object()) {
      SendError(res, {400, "the request body must be a JSON object", "invalid_request_error"});
      return std::nullopt;
    }
    return j;
  }

  std::optional<HttpError> CheckModel(const json& j) {
    auto it = j.find("model");
    if (it == j.end() || it->is_null()) return std::nullopt;  // lenient, like vLLM
    if (!it->is_string())
      return HttpError{400, "'model' must be a string", "invalid_request_error", "model"};
    const std::string name = it->get<std::string>();
    if (!service.model_name().empty() && name != service.model_name()) {
      return HttpError{404,
                       "The model '" + name + "' does not exist (this server serves '" +
                           service.model_name() + "')",
                       "invalid_request_error", "model", "model_not_found"};
    }
    return std::nullopt;
  }

  void HandleGenerate(const httplib::Request& req, httplib::Response& res, bool chat) {
    auto body = Body(req, res);
    if (!body) return;
    const json& j = *body;
    if (auto e = CheckModel(j)) return SendError(res, *e);
    CompletionRequest r;
    bool stream = false, include_usage = false, return_ids = false;
    if (auto e = ParseCommon(j, &r, &stream, &include_usage, &return_ids))
      return SendError(res, *e);
    if (auto e = chat ? ParseMessages(j, &r) : ParsePrompt(j, &r)) return SendError(res, *e);
    if (auto e = ParseLogprobs(j, chat, &r)) return SendError(res, *e);
    if (auto e = ApplyGenerationDefaults(j, service.defaults(), &r)) return SendError(res, *e);
    ToolMode tools;
    if (auto e = ParseStructuredFields(req.body, chat, service, &r, &tools)) {
      return SendError(res, {400, e->message, "invalid_request_error", e->param});
    }
    auto started = service.StartN(r);
    if (!started.ok()) {
      HttpError e = FromStatus(started.status());
      if (!e.param.empty() && !chat && e.code == "context_length_exceeded") e.param = "prompt";
      if (started.status().code() == StatusCode::kInvalidArgument &&
          started.status().message().rfind("n must", 0) == 0) {
        e.param = "n";
      }
      return SendError(res, e);
    }
    const std::string id = NewId(chat ? "chatcmpl" : "cmpl");
    const int64_t created = static_cast<int64_t>(std::time(nullptr));
    const std::string model = service.model_name();
    const bool logprobs = r.logprobs >= 0;
    if (!stream) {
      return Collect(std::move(*started), res, chat, id, created, model, return_ids, logprobs,
                     tools);
    }
    Stream(std::move(*started), res, chat, id, created, model, include_usage, return_ids, logprobs,
           tools);
  }

  // Non-streaming: wait for the whole reply (every choice).
  void Collect(std::vector<std::unique_ptr<CompletionStream>> streams, httplib::Response& res,
               bool chat, const std::string& id, int64_t created, const std::string& model,
               bool return_ids, bool logprobs, const ToolMode& tools = {}) {
    json choices = json::array();
    std::vector<CompletionDelta> finals;
    for (size_t index = 0; index < streams.size(); ++index) {
      CompletionStream& s = *streams[index];
      std::string text;
      std::vector<int32_t> ids;
      std::vector<TokenLogprob> lps;
      CompletionDelta d, last;
      TokenClock clock;
      for (;;) {
        if (!s.Next(Deadline::AfterMs(1000), &d)) continue;
        clock.Arrived(d, histograms);
        text += d.text;
        ids.insert(ids.end(), d.ids.begin(), d.ids.end());
        for (TokenLogprob& t : d.logprobs) lps.push_back(std::move(t));
        if (d.done) {
          last = d;
          break;
        }
      }
      if (last.finish_reason == "error" || last.finish_reason == "cancelled") {
        HttpError e = FromStatus(last.error.ok() ? UnavailableError("the request was cancelled")
                                                 : last.error);
        if (e.status < 500) e.status = 500, e.type = "server_error";
        return SendError(res, e);  // the other choices' streams cancel as they go
      }
      json choice = {{"index", index}, {"finish_reason", FinishReason(last.finish_reason)}};
      if (chat) {
        choice["message"] = {{"role", "assistant"}, {"content", text}};
        choice["logprobs"] = logprobs ? ChatLogprobs(service.tokenizer(), lps) : json(nullptr);
        if (tools.parse) ApplyToolCalls(text, &choice);  // message.tool_calls
      } else {
        choice["text"] = text;
        int64_t offset = 0;
        choice["logprobs"] =
            logprobs ? CompletionLogprobs(service.tokenizer(), lps, &offset) : json(nullptr);
      }
      if (return_ids) choice["token_ids"] = ids;
      choices.push_back(std::move(choice));
      histograms.Record(last);
      finals.push_back(std::move(last));
    }
    json out = {{"id", id},
                {"object", chat ? "chat.completion" : "text_completion"},
                {"created", created},
                {"model", model},
                {"choices", std::move(choices)},
                {"usage", Usage(finals)},
                {"timings", Timings(finals.front())}};
    res.set_content(out.dump(), "application/json");
  }

  // Streaming: Server-Sent Events, one chunk per batch of new tokens of a
  // choice; with n > 1 the choices' chunks interleave as their tokens come.
  void Stream(std::vector<std::unique_ptr<CompletionStream>> streams, httplib::Response& res,
              bool chat, const std::string& id, int64_t created, const std::string& model,
              bool include_usage, bool return_ids, bool logprobs, const ToolMode& tools = {}) {
    // Any stream's news wakes the writer.
    struct Wake {
      Mutex mu;
      std::condition_variable cv;
      uint64_t events GUARDED_BY(mu) = 0;
    };
    struct State {
      std::vector<std::unique_ptr<CompletionStream>> streams;
      std::vector<bool> done;
      std::vector<int64_t> text_offset;
      std::vector<CompletionDelta> finals;
      std::vector<ToolCallStreamFilter> filters;  // chat with tools: one per choice
      std::shared_ptr<Wake> wake = std::make_shared<Wake>();
      std::vector<TokenClock> clocks;  // per choice: inter-token gaps for /metrics
      ServingHistograms* histograms = nullptr;
      bool sent_role = false;
      bool finished = false;
      void CancelAll() {
        for (auto& s : streams) s->Cancel();
      }
    };
    auto st = std::make_shared<State>();
    st->streams = std::move(streams);
    st->done.assign(st->streams.size(), false);
    st->text_offset.assign(st->streams.size(), 0);
    st->finals.resize(st->streams.size());
    st->clocks.resize(st->streams.size());
    st->histograms = &histograms;
    if (chat && tools.parse) st->filters.assign(st->streams.size(), ToolCallStreamFilter(tools));
    for (auto& s : st->streams) {
      s->SetNotify([wake = st->wake] {
        {
          MutexLock lock(wake->mu);
          wake->events += 1;
        }
        wake->cv.notify_all();
      });
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    auto chunk = [=](size_t index, const json& delta_or_text, const json& finish) {
      json choice = {{"index", index}, {"finish_reason", finish}};
      if (chat) {
        choice["delta"] = delta_or_text;
      } else {
        choice["text"] = delta_or_text;
        choice["logprobs"] = nullptr;
      }
      return json{{"id", id},
                  {"object", chat ? "chat.completion.chunk" : "text_completion"},
                  {"created", created},
                  {"model", model},
                  {"choices", json::array({choice})}};
    };
    const Tokenizer* tok = service.tokenizer();
    res.set_chunked_content_provider(
        "text/event-stream",
        [st, chunk, chat, include_usage, return_ids, logprobs, tok, id, created, model](
            size_t, httplib::DataSink& sink) -> bool {
          auto send = [&](const std::string& payload) {
            const std::string event = "data: " + payload + "\n\n";
            return sink.write(event.data(), event.size());
          };
          if (st->finished) {
            sink.done();
            return true;
          }
          if (chat && !st->sent_role) {
            st->sent_role = true;
            for (size_t i = 0; i < st->streams.size(); ++i) {
              if (!send(chunk(i, json{{"role", "assistant"}, {"content", ""}}, nullptr).dump())) {
                st->CancelAll();
                return false;
              }
            }
          }
          uint64_t seen;
          {
            MutexLock lock(st->wake->mu);
            seen = st->wake->events;
          }
          bool any = false;
          for (size_t i = 0; i < st->streams.size(); ++i) {
            if (st->done[i]) continue;
            CompletionDelta d;
            // One choice waits as before; several are polled, then wait for news.
            const Deadline wait =
                st->streams.size() == 1 ? Deadline::AfterMs(kKeepAliveMs) : Deadline::AfterMs(0);
            if (!st->streams[i]->Next(wait, &d)) continue;
            st->clocks[i].Arrived(d, *st->histograms);
            any = true;
            // Chat with tools: the text as content and tool-call deltas, in order.
            std::vector<json> tool_deltas;
            if (!st->filters.empty()) {
              tool_deltas = st->filters[i].Push(d.text);
              d.text.clear();
              if (!tool_deltas.empty() && tool_deltas.front().contains("content")) {
                d.text = tool_deltas.front()["content"].get<std::string>();
                tool_deltas.erase(tool_deltas.begin());
              }
            }
            if (!d.text.empty() || (return_ids && !d.ids.empty()) ||
                (logprobs && !d.logprobs.empty())) {
              json c = chunk(i, chat ? json{{"content", d.text}} : json(d.text), nullptr);
              if (return_ids) c["choices"][0]["token_ids"] = d.ids;
              if (logprobs && !d.logprobs.empty()) {
                c["choices"][0]["logprobs"] =
                    chat ? ChatLogprobs(tok, d.logprobs)
                         : CompletionLogprobs(tok, d.logprobs, &st->text_offset[i]);
              }
              if (!send(c.dump())) {
                st->CancelAll();
                return false;
              }
            }
            for (const json& delta : tool_deltas) {
              if (!send(chunk(i, delta, nullptr).dump())) {
                st->CancelAll();
                return false;
              }
            }
            if (!d.done) continue;
            st->done[i] = true;
            if (d.finish_reason == "error" || d.finish_reason == "cancelled") {
              st->finished = true;
              st->CancelAll();
              HttpError e = FromStatus(d.error.ok() ? UnavailableError("the request was cancelled")
                                                    : d.error);
              e.type = "server_error";
              send(ErrorBody(e).dump());
              send("[DONE]");
              sink.done();
              return true;
            }
            st->finals[i] = d;
            st->histograms->Record(d);
            const bool all_done =
                std::all_of(st->done.begin(), st->done.end(), [](bool b) { return b; });
            std::string finish = FinishReason(d.finish_reason);
            if (!st->filters.empty()) {
              // What the filter still held (a call sent whole, content).
              bool called = false;
              for (const json& delta : st->filters[i].Finish(&called)) {
                if (!send(chunk(i, delta, nullptr).dump())) {
                  st->CancelAll();
                  return false;
                }
              }
              if (called) finish = "tool_calls";
            }
            json last = chunk(i, chat ? json::object() : json(""), finish);
            if (all_done) {
              // The last choice to end carries the request's usage.
              last["usage"] = Usage(st->finals);
              last["timings"] = Timings(d);
            }
            if (!send(last.dump())) {
              st->CancelAll();
              return false;
            }
            if (!all_done) continue;
            st->finished = true;
            if (include_usage) {
              json u = {{"id", id},
                        {"object", chat ? "chat.completion.chunk" : "text_completion"},
                        {"created", created},
                        {"model", model},
                        {"choices", json::array()},
                        {"usage", Usage(st->finals)}};
              send(u.dump());
            }
            send("[DONE]");
            sink.done();
            return true;
          }
          if (any) return true;
          if (st->streams.size() > 1) {
            Wake& wake = *st->wake;
            MutexLock lock(wake.mu);
            if (lock.WaitFor(wake.cv, std::chrono::milliseconds(kKeepAliveMs),
                             [&wake, seen]() REQUIRES(wake.mu) { return wake.events != seen; })) {
              return true;
            }
          }
          // Nothing new: a comment line keeps proxies patient and shows
          // whether the client is still there.
          static const char kKeepAlive[] = ": keep-alive\n\n";
          if (!sink.write(kKeepAlive, sizeof kKeepAlive - 1)) {
            st->CancelAll();
            return false;
          }
          return true;
        },
        [st](bool success) {
          if (!success || !st->finished) st->CancelAll();
        });
  }

  // The entry /v1/models lists and /v1/models/{id} returns.
  json ModelEntry() {
    json m = {{"id", service.model_name()},
              {"object", "model"},
              {"created", started_at},
              {"owned_by", "octet"},
              {"max_model_len", service.scheduler().options().context}};
    m.update(info);
    return m;
  }

  // ---- The HTTP core's callbacks (loop thread).

  uint64_t MaxBodyBytes() override { return options.max_body_bytes; }

  // Before a request's body is read (the core has refused bad framing, two
  // Content-Length headers and a body over max_body_bytes already): its
  // x-request-id, and the API key.
  bool OnHead(http::Connection* c) override {
    if (!c->ext) c->ext = std::make_unique<ConnState>();
    std::string& request_id = static_cast<ConnState&>(*c->ext).request_id;
    const http::Request& req = c->request();
    const std::string given = req.Header("x-request-id");
    bool usable = !given.empty() && given.size() <= 128;
    for (unsigned char ch : given) usable = usable && ch > 0x20 && ch < 0x7f;
    request_id = usable ? given : NewId("req");
    if (!options.api_key.empty() && (req.path != "/health" || options.api_key_health) &&
        !BearerMatches(req.Header("Authorization"), options.api_key)) {
      const HttpError e{401,
                        req.HasHeader("Authorization")
                            ? "Incorrect API key provided."
                            : "You didn't provide an API key (Authorization: Bearer KEY).",
                        "invalid_request_error", "", "invalid_api_key"};
      // The body (if any) is unread: the core closes after this answer rather
      // than parse it as the next request.
      server->Respond(c, 401,
                      {{"Content-Type", "application/json"},
                       {"WWW-Authenticate", "Bearer"},
                       {"x-request-id", request_id}},
                      ErrorBody(e).dump(), true);
      return false;
    }
    return true;
  }

  void OnRequest(http::Connection* c) override {
    const http::Request& req = c->request();
    const std::string request_id = static_cast<ConnState&>(*c->ext).request_id;
    const std::string method = req.method == "HEAD" ? "GET" : req.method;
    RouteHandler handler;
    if (auto it = routes.find(method + " " + req.path); it != routes.end()) {
      handler = it->second;
    } else if (method == "GET" && req.path.rfind("/v1/models/", 0) == 0 &&
               req.path.size() > sizeof("/v1/models/") - 1) {
      // Model ids may hold '/' ("org/name"): everything after /v1/models/ is the id.
      handler = [this](const httplib::Request& r, httplib::Response& res) {
        HandleModelById(r.path.substr(sizeof("/v1/models/") - 1), res);
      };
    } else {
      handler = [](const httplib::Request& r, httplib::Response& res) {
        SendError(res, {404, "no route " + r.method + " " + r.path, "invalid_request_error"});
      };
    }
    server->HandToWorker(c, [this, handler = std::move(handler), request_id](http::Request& r,
                                                                             http::Responder& out) {
      RunHandler(handler, r, request_id, out);
    });
  }

  // ---- Worker threads.

  void RunHandler(const RouteHandler& handler, http::Request& r, const std::string& request_id,
                  http::Responder& out) {
    const httplib::Request req = http::ToHttplibRequest(r);
    httplib::Response res;
    try {
      handler(req, res);
    } catch (const std::exception& e) {
      res = httplib::Response();
      SendError(res, {500, e.what(), "server_error"});
    } catch (...) {
      res = httplib::Response();
      SendError(res, {500, "internal error", "server_error"});
    }
    if (res.status == -1) res.status = 200;  // httplib: a handler that did not set it
    if (res.status >= 400 && res.body.empty() && !res.content_provider_) {
      SendError(res, {res.status, "HTTP " + std::to_string(res.status),
                      res.status >= 500 ? "server_error" : "invalid_request_error"});
    }
    res.set_header("x-request-id", request_id);
    // One log line per API request (not per /health or /metrics poll).
    if (req.path.rfind("/v1/", 0) == 0) {
      OCTET_LOG(INFO) << "http " << req.method << " " << req.path << " " << res.status
                      << " request_id=" << request_id << " from " << req.remote_addr;
    }
    http::SendHttplibResponse(res, out);
  }

  void HandleModelById(const std::string& wanted, httplib::Response& res) {
    if (wanted != service.model_name()) {
      return SendError(res, {404, "The model '" + wanted + "' does not exist",
                             "invalid_request_error", "model", "model_not_found"});
    }
    res.set_content(ModelEntry().dump(), "application/json");
  }

  void Routes() {
    routes["GET /health"] = [this](const httplib::Request&, httplib::Response& res) {
      Status h = service.scheduler().health();
      json out = {{"status", h.ok() ? "ok" : "failed"}, {"model", service.model_name()}};
      if (!h.ok()) out["error"] = h.message();
      out.update(info);
      res.status = h.ok() ? 200 : 503;
      res.set_content(out.dump(), "application/json");
    };
    routes["GET /v1/models"] = [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(json{{"object", "list"}, {"data", json::array({ModelEntry()})}}.dump(),
                      "application/json");
    };
    routes["POST /v1/chat/completions"] = [this](const httplib::Request& req,
                                                 httplib::Response& res) {
      HandleGenerate(req, res, true);
    };
    routes["POST /v1/completions"] = [this](const httplib::Request& req, httplib::Response& res) {
      HandleGenerate(req, res, false);
    };
    routes["POST /tokenize"] = [this](const httplib::Request& req, httplib::Response& res) {
      auto body = Body(req, res);
      if (!body) return;
      const Tokenizer* tok = service.tokenizer();
      if (!tok) return SendError(res, {400, "this model has no tokenizer.json"});
      const json& j = *body;
      const json text = j.contains("content") ? j["content"] : j.value("prompt", json(nullptr));
      if (!text.is_string()) {
        return SendError(res, {400, "'content' (or 'prompt') must be a string",
                               "invalid_request_error", "content"});
      }
      EncodeOptions eo;
      const json special =
          j.contains("add_special") ? j["add_special"] : j.value("add_special_tokens", json(false));
      if (!special.is_boolean()) {
        return SendError(
            res, {400, "'add_special' must be a boolean", "invalid_request_error", "add_special"});
      }
      eo.add_special_tokens = special.get<bool>();
      const std::vector<TokenId> ids = tok->Encode(text.get<std::string>(), eo);
      res.set_content(json{{"tokens", ids}, {"count", ids.size()}}.dump(), "application/json");
    };
    routes["POST /detokenize"] = [this](const httplib::Request& req, httplib::Response& res) {
      auto body = Body(req, res);
      if (!body) return;
      const Tokenizer* tok = service.tokenizer();
      if (!tok) return SendError(res, {400, "this model has no tokenizer.json"});
      const json& j = *body;
      if (!j.contains("tokens") || !j["tokens"].is_array()) {
        return SendError(res, {400, "'tokens' must be an array of token ids",
                               "invalid_request_error", "tokens"});
      }
      std::vector<TokenId> ids;
      for (const json& v : j["tokens"]) {
        if (!v.is_number_integer()) {
          return SendError(res, {400, "'tokens' must be an array of token ids",
                                 "invalid_request_error", "tokens"});
        }
        ids.push_back(static_cast<TokenId>(v.get<int64_t>()));
      }
      auto text = tok->Decode(ids);
      if (!text.ok())
        return SendError(res, {400, text.status().message(), "invalid_request_error", "tokens"});
      res.set_content(json{{"content", *text}, {"prompt", *text}}.dump(), "application/json");
    };
    routes["GET /metrics"] = [this](const httplib::Request&, httplib::Response& res) {
      std::string text = PrometheusMetrics(service.scheduler().Metrics(), service.model_name());
      text += histograms.Text(service.model_name());
      text += prom::BuildInfoMetric();
      if (options.extra_metrics) text += options.extra_metrics();
      res.set_content(text, "text/plain; version=0.0.4");
    };
  }
};

Result<std::unique_ptr<OpenAiServer>> OpenAiServer::Start(CompletionService& service,
                                                          const OpenAiServerOptions& options) {
  std::unique_ptr<OpenAiServer> s(new OpenAiServer());
  s->impl_ = std::make_unique<Impl>(service, options);
  Impl& m = *s->impl_;
  if (!options.info_json.empty()) {
    json info = json::parse(options.info_json, nullptr, false);
    if (info.is_object()) m.info = info;
  }
  m.Routes();
  http::ServerOptions core;
  core.name = "serve";
  core.max_workers = static_cast<size_t>(std::max(8, options.http_threads));
  core.keep_alive_timeout_ms = 30'000;
  core.error_body = [](int status, const std::string& message) {
    return ErrorBody({status, message, "invalid_request_error"}).dump();
  };
  m.server = std::make_unique<http::Server>(std::move(core), &m);
  OCTET_RETURN_IF_ERROR(m.server->Start(options.host, options.port));
  return s;
}

OpenAiServer::~OpenAiServer() { Stop(); }

int OpenAiServer::port() const { return impl_->server->port(); }

void OpenAiServer::Stop(int64_t drain_ms) {
  if (!impl_ || !impl_->server) return;
  impl_->server->Stop(drain_ms);
}

std::string PrometheusMetrics(const SchedulerMetrics& m, const std::string& model_name) {
  std::ostringstream o;
  const std::string label = "{model=\"" + prom::EscapeLabel(model_name) + "\"}";
  // Counters are integers and written in full (17 significant digits for the rest).
  auto metric = [&](const char* name, const char* type, const char* help, double value) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n"
      << name << label << " " << prom::Value(value) << "\n";
  };
  metric("octet_requests_running", "gauge", "Requests holding a KV cache slot.", m.running);
  metric("octet_requests_queued", "gauge", "Requests waiting for a KV cache slot.", m.queued);
  metric("octet_kv_cache_slots", "gauge", "KV cache slots (sequences in flight at most).",
         m.num_slots);
  metric("octet_kv_cache_used_fraction", "gauge",
         "Cached positions over the KV cache's capacity (0..1).", m.kv_used_fraction);
  metric("octet_kv_cache_bytes", "gauge", "Bytes of KV cache on this rank.",
         static_cast<double>(m.kv_cache_bytes));
  metric("octet_prefill_tokens_per_second", "gauge",
         "Prompt tokens processed per second over the last 5 s.", m.prefill_tps);
  metric("octet_decode_tokens_per_second", "gauge",
         "Tokens generated per second (all requests) over the last 5 s.", m.decode_tps);
  metric("octet_step_seconds", "gauge", "Mean forward step time over the last 5 s.",
         m.step_ms * 1e-3);
  metric("octet_allreduce_time_share", "gauge",
         "Share of step time spent in tensor-parallel all-reduces over the last 5 s (0..1).",
         m.allreduce_share);
  metric("octet_collective_time_share", "gauge",
         "Share of step time spent in any collective (all-reduce, logits gather, step plans).",
         m.comm_share);
  metric("octet_requests_total", "counter", "Requests accepted.",
         static_cast<double>(m.requests_total));
  metric("octet_requests_finished_total", "counter", "Requests that ended with stop or length.",
         static_cast<double>(m.requests_finished));
  metric("octet_requests_cancelled_total", "counter", "Requests cancelled (client went away).",
         static_cast<double>(m.requests_cancelled));
  metric("octet_requests_failed_total", "counter", "Requests that ended with an error.",
         static_cast<double>(m.requests_failed));
  metric("octet_prompt_tokens_total", "counter", "Prompt tokens processed.",
         static_cast<double>(m.prompt_tokens_total));
  metric("octet_generation_tokens_total", "counter", "Tokens generated.",
         static_cast<double>(m.generation_tokens_total));
  metric("octet_steps_total", "counter", "Forward steps run.", static_cast<double>(m.steps_total));
  metric("octet_step_seconds_total", "counter", "Time spent in forward steps.",
         m.step_seconds_total);
  metric("octet_allreduce_seconds_total", "counter", "Time spent in all-reduces.",
         m.allreduce_seconds_total);
  metric("octet_decode_only_steps_total", "counter",
         "Forward steps that carried no prompt token (decode only).",
         static_cast<double>(m.decode_only_steps_total));
  metric("octet_decode_only_tokens_total", "counter", "Tokens generated by decode-only steps.",
         static_cast<double>(m.decode_only_tokens_total));
  metric("octet_decode_only_seconds_total", "counter",
         "Wall time of decode-only steps, each from the end of the previous step to its own end "
         "(forward pass plus the scheduler's work between steps).",
         m.decode_only_seconds_total);
  metric("octet_spec_drafted_tokens_total", "counter",
         "Speculative decoding: tokens drafted for verification.",
         static_cast<double>(m.spec_drafted_tokens_total));
  metric("octet_spec_accepted_tokens_total", "counter",
         "Speculative decoding: drafted tokens the model kept.",
         static_cast<double>(m.spec_accepted_tokens_total));
  metric("octet_spec_verifications_total", "counter",
         "Speculative decoding: sequence rows of a step that carried a draft.",
         static_cast<double>(m.spec_verifications_total));
  metric("octet_spec_acceptance_rate", "gauge",
         "Speculative decoding: drafted tokens kept over drafted, the last 5 s (0..1).",
         m.spec_acceptance_rate);
  // octet_time_to_first_token_seconds and the other request histograms:
  // ServingHistograms (serving_metrics.h), written by the server's /metrics.
  return o.str();
}

}  // namespace octet::engine
