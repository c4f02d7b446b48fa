// A streaming OpenAI chat client for the workbench's chat playground: one
// POST /v1/chat/completions with "stream": true against `octet serve` or the
// router gateway (`octet route`), text deltas passed to a callback as the SSE
// chunks arrive, and the figures a person wants beside each reply: time to
// first token (measured here, and the server's own when it reports one),
// prefill and decode tokens/s (the server's "timings"), and the pool that
// answered when a router sat in between (its X-Octet-Pool header).
//
// Blocking: call StreamChat from a worker thread. `cancel` (may be null) is
// polled as each chunk arrives; setting it ends the request at the next chunk
// (a server generating tokens sends one per token).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "octet/base/deadline.h"
#include "octet/base/sse.h"
#include "octet/base/status.h"
#include "octet/engine/generation_defaults.h"

namespace octet::app {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

struct ChatRequest {
  std::string base_url;  // "http://127.0.0.1:8000" (no trailing /v1)
  std::string model;     // "" : the server's only model
  std::vector<ChatMessage> messages;
  // Sampling: a field left unset is not sent, so the server applies its
  // model's generation_config.json value, else its built-in default
  // (ServerDefaults says which and where from).
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int> top_k;
  std::optional<double> repetition_penalty;
  std::optional<int> max_tokens;
  std::vector<std::string> stop;
  std::string api_key;  // sent as a bearer token when set
};

struct ChatReply {
  std::string text;
  std::string finish_reason;  // "stop", "length", "cancelled"
  int prompt_tokens = 0;
  int completion_tokens = 0;
  double ttft_ms = -1;         // first content byte, measured by this client
  double server_ttft_ms = -1;  // the server's own figure (timings.ttft_ms), -1 if absent
  double prefill_tps = -1;     // timings.prefill_tps, -1 if absent
  double decode_tps = -1;      // timings.decode_tps, -1 if absent
  double total_ms = 0;
  std::string pool;     // X-Octet-Pool (routed), "" when direct
  std::string route;    // X-Octet-Route
  std::string replica;  // X-Octet-Replica
};

// The JSON body sent (exposed for tests and the "copy as curl" action).
std::string ChatRequestBody(const ChatRequest& request);

// The reply assembled from the server's text/event-stream (Server-Sent
// Events, framed by octet::SseReader) as its bytes arrive in chunks of any
// size: "[DONE]" ending the stream, each chat.completion.chunk's text
// delta, finish reason, usage and timings taken; other fields, comments and
// malformed JSON are ignored. StreamChat feeds it; exposed for tests and the
// fuzz target (tests/fuzz/fuzz_sse.cpp).
class ChatStreamParser {
 public:
  // An event is at most this long; a stream that sends more without a blank
  // line is refused (Feed returns false) instead of growing without bound.
  static constexpr size_t kMaxEventBytes = size_t{8} << 20;

  explicit ChatStreamParser(int64_t start_ns = 0) : start_ns_(start_ns), sse_(kMaxEventBytes) {}
  // Takes the next bytes; `on_delta` (may be empty) gets each text piece.
  // False when an event exceeds kMaxEventBytes (the reply so far is kept).
  bool Feed(std::string_view bytes, const std::function<void(const std::string&)>& on_delta);
  bool done() const { return done_; }  // "[DONE]" arrived
  ChatReply& reply() { return reply_; }

 private:
  void Event(const std::string& data, const std::function<void(const std::string&)>& on_delta);
  int64_t start_ns_;
  SseReader sse_;
  ChatReply reply_;
  bool done_ = false;
};

// Streams one reply. `on_delta` gets each piece of text in order (on the
// calling thread). Errors: Unavailable when nothing answers, the server's own
// error message for a 4xx/5xx, DeadlineExceeded past `deadline`.
Result<ChatReply> StreamChat(const ChatRequest& request,
                             const std::function<void(const std::string& delta)>& on_delta,
                             const std::atomic<bool>* cancel, Deadline deadline);

// One sampling setting as a server applies it to a request that leaves it
// out, and where the value comes from.
struct ServerDefault {
  std::string name;             // temperature, top_p, top_k, repetition_penalty, max_tokens
  std::optional<double> value;  // absent for max_tokens: up to the end of the context
  std::string source;           // "generation_config.json" or "built-in"
};

// The "generation_defaults" object `octet serve` adds to its /v1/models
// entry: for each setting {"value": v|null, "source": "generation_config.json"
// |"built-in"}, and "config": the file's path (null without one). The
// built-in values are the engine's (SamplingParams: greedy, no top-p/top-k
// limit, no penalty; max_tokens to the end of the context).
std::string GenerationDefaultsJson(const engine::GenerationDefaults& defaults);

// The settings of `model`'s entry ("" : the first) in a /v1/models body, in
// the order above; empty when the server does not say (another server).
std::vector<ServerDefault> ParseServerDefaults(const std::string& models_body,
                                               const std::string& model);

// GET /v1/models and ParseServerDefaults.
Result<std::vector<ServerDefault>> FetchServerDefaults(const std::string& base_url,
                                                       const std::string& model,
                                                       const std::string& api_key,
                                                       Deadline deadline);

// GET /v1/models: the model ids an endpoint serves.
Result<std::vector<std::string>> ListModels(const std::string& base_url, Deadline deadline);

}  // namespace octet::app
