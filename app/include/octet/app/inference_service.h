// The gRPC InferenceService of a model instance (wire/proto/octet/v1/
// inference.proto: Generate streams GenerateChunk messages) over the engine's
// CompletionService: the same requests, templates, stop handling and
// scheduler as the OpenAI HTTP server, for clients that speak the cluster's
// wire API (the workbench's chat panel).
//
//   auto grpc = InferenceGrpcServer::Start(service, "127.0.0.1:0");
//   int port = (*grpc)->port();
//
// A request is chat (messages; the model's template), plain text (prompt) or
// token ids (prompt_ids). A sampling field the request leaves unset
// (max_tokens, temperature, top_p, top_k, repetition_penalty) takes the
// model's generation_config.json value (CompletionService::defaults), else the
// built-in default, as the HTTP server does; max_tokens 0 means "to the end of
// the context", temperature 0 is greedy, top_p 0 means 1. A client that cancels the call
// cancels the request. Errors: INVALID_ARGUMENT (bad request, prompt too long),
// NOT_FOUND (another model), RESOURCE_EXHAUSTED (queue full), UNAVAILABLE
// (the instance failed); a failure mid-stream ends with a chunk whose
// finish_reason is "error" and whose error says why. Insecure transport: bind
// it to loopback (or a trusted network), like the HTTP server.
//
// Thread-safety: Start/Stop from one thread; calls are served on gRPC's threads.
#pragma once

#include <memory>
#include <string>

#include "octet/base/status.h"
#include "octet/engine/completion.h"

namespace octet::app {

class InferenceGrpcServer {
 public:
  // `address` is "HOST:PORT" (PORT 0: any free port).
  static Result<std::unique_ptr<InferenceGrpcServer>> Start(engine::CompletionService& service,
                                                            const std::string& address);
  ~InferenceGrpcServer();  // Stop()
  InferenceGrpcServer(const InferenceGrpcServer&) = delete;
  InferenceGrpcServer& operator=(const InferenceGrpcServer&) = delete;

  int port() const;
  // Cancels open calls and stops serving (waits at most ~1 s for them).
  void Stop();

  struct Impl;

 private:
  InferenceGrpcServer() = default;
  std::unique_ptr<Impl> impl_;
};

}  // namespace octet::app
