// A small OpenAI-compatible HTTP server for router tests and benchmarks: a real
// server on loopback that streams tokens at a set pace, and can be told to
// return errors, fail its health check, or die mid-stream.
//
// Responses name the upstream ("<name>:<i> " per token) so a test can tell which
// replica answered. Thread-safe: the knobs may change while requests run.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "octet/base/json.h"
#include "octet/base/status.h"

namespace httplib {
class Server;
}

namespace octet::test {

struct UpstreamOptions {
  std::string name = "upstream";
  int ttft_ms = 0;            // delay before the first token (prefill)
  int token_interval_ms = 1;  // delay between tokens
  int tokens = 8;             // tokens per response unless max_tokens asks for fewer
  int threads = 320;
  // What /v1/models announces as the model's generation_defaults (as `octet
  // serve` does); null: none.
  nlohmann::json generation_defaults;
};

class OpenAiUpstream {
 public:
  static Result<std::unique_ptr<OpenAiUpstream>> Start(const UpstreamOptions& options,
                                                       int port = 0);
  ~OpenAiUpstream();
  void Stop();  // closes the listener and every connection

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const std::string& name() const { return options_.name; }

  // Knobs.
  void set_fail_status(int status) { fail_status_ = status; }  // 0 = answer normally
  void set_healthy(bool healthy) { healthy_ = healthy; }       // /health 200 or 503
  void set_ttft_ms(int ms) { ttft_ms_ = ms; }
  void set_token_interval_ms(int ms) { token_interval_ms_ = ms; }
  void set_die_after_tokens(int n) { die_after_tokens_ = n; }      // -1 = never
  void set_reject_status(int status) { reject_status_ = status; }  // 4xx with an error body

  // Counters.
  int requests() const { return requests_.load(); }
  int completed() const { return completed_.load(); }
  int cancelled() const { return cancelled_.load(); }  // a stream write failed: the peer left
  int in_flight() const { return in_flight_.load(); }
  int max_in_flight() const { return max_in_flight_.load(); }
  int health_checks() const { return health_checks_.load(); }
  int models_requests() const { return models_requests_.load(); }  // GET /v1/models
  std::string last_body() const;
  std::string last_header(const std::string& name) const;
  void ResetCounters();

 private:
  OpenAiUpstream() = default;
  void Setup();
  UpstreamOptions options_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<int> fail_status_{0}, reject_status_{0};
  std::atomic<bool> healthy_{true};
  std::atomic<int> ttft_ms_{0}, token_interval_ms_{1}, die_after_tokens_{-1};
  std::atomic<int> requests_{0}, completed_{0}, cancelled_{0}, in_flight_{0}, max_in_flight_{0},
      health_checks_{0}, models_requests_{0};
  mutable std::mutex mu_;
  std::string last_body_;                            // guarded by mu_
  std::map<std::string, std::string> last_headers_;  // lower-case names; guarded by mu_
};

}  // namespace octet::test
