#include "openai_upstream.h"

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <csignal>

#include "octet/base/deadline.h"
#include "octet/base/json.h"

namespace octet::test {
namespace {

using nlohmann::json;

void SleepMs(int ms) {
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

Result<std::unique_ptr<OpenAiUpstream>> OpenAiUpstream::Start(const UpstreamOptions& options,
                                                              int port) {
  std::signal(SIGPIPE, SIG_IGN);
  std::unique_ptr<OpenAiUpstream> u(new OpenAiUpstream());
  u->options_ = options;
  u->ttft_ms_ = options.ttft_ms;
  u->token_interval_ms_ = options.token_interval_ms;
  u->server_ = std::make_unique<httplib::Server>();
  const int threads = options.threads;
  u->server_->new_task_queue = [threads] {
    return new httplib::ThreadPool(static_cast<size_t>(threads));
  };
  u->server_->set_tcp_nodelay(true);
  int listen_fd = -1;
  u->server_->set_socket_options([&listen_fd](int fd) {
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    listen_fd = fd;
  });
  u->Setup();
  if (port == 0) {
    u->port_ = u->server_->bind_to_any_port("127.0.0.1");
  } else {
    u->port_ = u->server_->bind_to_port("127.0.0.1", port) ? port : -1;
  }
  if (u->port_ <= 0) return UnavailableError("test upstream: cannot bind 127.0.0.1");
  if (listen_fd >= 0) ::listen(listen_fd, 1024);
  httplib::Server* srv = u->server_.get();
  u->thread_ = std::thread([srv] { srv->listen_after_bind(); });
  const Deadline d = Deadline::AfterMs(5000);
  while (!srv->is_running() && !d.expired())
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return u;
}

OpenAiUpstream::~OpenAiUpstream() { Stop(); }

void OpenAiUpstream::Stop() {
  if (!server_) return;
  server_->stop();
  if (thread_.joinable()) thread_.join();
  server_.reset();
}

std::string OpenAiUpstream::last_body() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_body_;
}

std::string OpenAiUpstream::last_header(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = last_headers_.find(Lower(name));
  return it == last_headers_.end() ? "" : it->second;
}

void OpenAiUpstream::ResetCounters() {
  requests_ = completed_ = cancelled_ = max_in_flight_ = health_checks_ = models_requests_ = 0;
}

void OpenAiUpstream::Setup() {
  server_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    ++health_checks_;
    res.status = healthy_ ? 200 : 503;
    res.set_content(healthy_ ? "{\"status\":\"ok\"}" : "{\"status\":\"down\"}", "application/json");
  });
  server_->Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    ++models_requests_;
    json model = {{"id", options_.name}, {"object", "model"}};
    if (!options_.generation_defaults.is_null())
      model["generation_defaults"] = options_.generation_defaults;
    res.set_content(json{{"object", "list"}, {"data", json::array({model})}}.dump(),
                    "application/json");
  });
  auto handler = [this](const httplib::Request& req, httplib::Response& res, bool chat) {
    ++requests_;
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_body_ = req.body;
      last_headers_.clear();
      for (const auto& [k, v] : req.headers) last_headers_[Lower(k)] = v;
    }
    if (int s = fail_status_.load(); s != 0) {
      res.status = s;
      res.set_content(
          "{\"error\":{\"message\":\"injected failure\",\"code\":" + std::to_string(s) + "}}",
          "application/json");
      return;
    }
    if (int s = reject_status_.load(); s != 0) {
      res.status = s;
      res.set_content("{\"error\":{\"message\":\"rejected by " + options_.name +
                          "\",\"code\":" + std::to_string(s) + "}}",
                      "application/json");
      return;
    }
    json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object()) {
      res.status = 400;
      res.set_content("{\"error\":{\"message\":\"bad json\"}}", "application/json");
      return;
    }
    int tokens = options_.tokens;
    if (body.contains("max_tokens") && body["max_tokens"].is_number_integer())
      tokens = std::max(1, std::min(tokens, body["max_tokens"].get<int>()));
    const std::string model = body.value("model", std::string("unknown"));
    const bool stream = body.value("stream", false);
    const int now_in = ++in_flight_;
    int prev = max_in_flight_.load();
    while (now_in > prev && !max_in_flight_.compare_exchange_weak(prev, now_in)) {
    }
    if (!stream) {
      SleepMs(ttft_ms_.load());
      std::string text;
      for (int i = 0; i < tokens; ++i) {
        if (i) SleepMs(token_interval_ms_.load());
        text += options_.name + ":" + std::to_string(i) + " ";
      }
      json msg = chat ? json{{"role", "assistant"}, {"content", text}} : json();
      json choice = chat ? json{{"index", 0}, {"message", msg}, {"finish_reason", "stop"}}
                         : json{{"index", 0}, {"text", text}, {"finish_reason", "stop"}};
      json out{
          {"id", "cmpl-" + options_.name},
          {"object", chat ? "chat.completion" : "text_completion"},
          {"model", model},
          {"choices", json::array({choice})},
          {"usage",
           {{"prompt_tokens", 5}, {"completion_tokens", tokens}, {"total_tokens", 5 + tokens}}}};
      res.set_content(out.dump(), "application/json");
      --in_flight_;
      ++completed_;
      return;
    }
    const int die_after = die_after_tokens_.load();
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, tokens, model, chat, die_after](size_t, httplib::DataSink& sink) {
          SleepMs(ttft_ms_.load());
          auto event = [&](const json& j) {
            const std::string s = "data: " + j.dump() + "\n\n";
            return sink.write(s.data(), s.size());
          };
          for (int i = 0; i < tokens; ++i) {
            if (i) SleepMs(token_interval_ms_.load());
            if (die_after >= 0 && i >= die_after) return false;  // drop the connection mid-stream
            json delta =
                chat ? json{{"content", options_.name + ":" + std::to_string(i) + " "}} : json();
            if (chat && i == 0) delta["role"] = "assistant";
            json choice = chat ? json{{"index", 0}, {"delta", delta}, {"finish_reason", nullptr}}
                               : json{{"index", 0},
                                      {"text", options_.name + ":" + std::to_string(i) + " "},
                                      {"finish_reason", nullptr}};
            if (!event(json{{"id", "chunk-" + options_.name},
                            {"object", chat ? "chat.completion.chunk" : "text_completion"},
                            {"model", model},
                            {"choices", json::array({choice})}})) {
              ++cancelled_;
              return false;
            }
          }
          const std::string done = "data: [DONE]\n\n";
          if (!sink.write(done.data(), done.size())) {
            ++cancelled_;
            return false;
          }
          sink.done();
          ++completed_;
          return true;
        },
        [this](bool) { --in_flight_; });
  };
  server_->Post(
      "/v1/chat/completions",
      [handler](const httplib::Request& req, httplib::Response& res) { handler(req, res, true); });
  server_->Post("/v1/completions", [handler](const httplib::Request& req, httplib::Response& res) {
    handler(req, res, false);
  });
}

}  // namespace octet::test
