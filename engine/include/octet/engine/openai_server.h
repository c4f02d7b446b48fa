// The OpenAI-compatible HTTP front end of a model instance (rank 0):
//
//   GET  /v1/models               the one model served (with its context length)
//   GET  /v1/models/{id}          that entry; 404 "model_not_found" for another id
//   POST /v1/chat/completions     chat (the model's chat template), "stream": true for SSE
//   POST /v1/completions          text or token-id prompts ("prompt": [1, 2, 3])
//   POST /tokenize, /detokenize   the server's tokenizer (llama.cpp / vLLM style), so that
//                                 clients can build prompts of an exact token length
//   GET  /health                  200 while serving, 503 once the instance failed
//   GET  /metrics                 Prometheus text: tok/s, TTFT, queue, KV use, all-reduce share
//
// Requests follow the OpenAI API (model, messages/prompt, max_tokens or
// max_completion_tokens, temperature (default 1), top_p, seed, stop, stream,
// n = 1) plus the vLLM/llama.cpp extensions top_k, ignore_eos, min_tokens,
// return_token_ids and chat_template_kwargs.enable_thinking. Every response
// carries "usage" and "timings" (queue_ms, ttft_ms, prefill_tps, decode_tps);
// a stream carries them in its last chunk. Errors use OpenAI's body
// {"error": {"message", "type", "param", "code"}}: 400 for malformed JSON or
// invalid fields (negative max_tokens, a prompt longer than the context: code
// "context_length_exceeded"), 404 for an unknown model ("model_not_found"),
// 429 when the queue is full, 500/503 when the instance failed.
//
// A streamed request whose client goes away is cancelled at the next token or
// keep-alive (every 0.5 s). A non-streaming request runs to its end.
//
// Operations: every response carries "x-request-id" (the client's own, when
// it sent a printable one of at most 128 bytes, else a new one), and API
// requests are logged with it. With an API key, requests without
// "Authorization: Bearer KEY" get 401. Two Content-Length headers (or one
// beside Transfer-Encoding) get 400 and a body over max_body_bytes 413, both
// before the body is read. Connections are served by the HTTP core the
// router's gateway shares (octet/base/http/server.h): one event loop,
// pipelining, head/body/idle/write deadlines, a bounded pool of workers for
// the handlers, no SO_REUSEPORT (a busy port is an error), a listen backlog
// of SOMAXCONN.
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "octet/base/status.h"
#include "octet/engine/completion.h"

namespace octet::engine {

struct OpenAiServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (port() says which)
  // Worker threads at most (started on demand; a streaming request holds one
  // while it runs; more requests wait in the queue). Slow clients hold none.
  int http_threads = 1024;
  // Larger bodies get 413 before they are read (from Content-Length).
  size_t max_body_bytes = 32u << 20;
  // When set, every route but /health (unless api_key_health) needs
  // "Authorization: Bearer KEY"; otherwise 401 with an OpenAI error body.
  std::string api_key;
  bool api_key_health = false;
  // The largest length bucket of the prompt/generation histograms (the context).
  int64_t histogram_max_tokens = 4096;
  // Extra Prometheus lines appended to /metrics (e.g. the TP group's figures).
  std::function<std::string()> extra_metrics;
  // Extra fields for /v1/models' entry and /health, as a JSON object text
  // ("{\"tp\": 2}"); empty: none.
  std::string info_json;
};

class OpenAiServer {
 public:
  // Binds and starts serving on a thread of its own.
  static Result<std::unique_ptr<OpenAiServer>> Start(CompletionService& service,
                                                     const OpenAiServerOptions& options);
  ~OpenAiServer();  // Stop()
  OpenAiServer(const OpenAiServer&) = delete;
  OpenAiServer& operator=(const OpenAiServer&) = delete;

  int port() const;
  // Stops listening and joins the listener (requests still streaming end when
  // their scheduler requests end). With `drain_ms`, the answers being written
  // (the errors of requests the scheduler ended, say) first reach their
  // clients, for at most that long (http::Server::Stop).
  void Stop(int64_t drain_ms = 0);

  struct Impl;

 private:
  OpenAiServer() = default;
  std::unique_ptr<Impl> impl_;
};

// Prometheus text for a scheduler's figures (what /metrics serves).
std::string PrometheusMetrics(const SchedulerMetrics& m, const std::string& model_name);

}  // namespace octet::engine
