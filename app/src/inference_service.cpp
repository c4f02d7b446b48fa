#include "octet/app/inference_service.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <mutex>

#include "octet/engine/generate.h"
#include "octet/v1/inference.grpc.pb.h"

namespace octet::app {
namespace {

namespace v1 = ::octet::v1;

grpc::Status ToGrpc(const Status& s) {
  grpc::StatusCode code = grpc::StatusCode::INTERNAL;
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kFailedPrecondition:
      code = grpc::StatusCode::INVALID_ARGUMENT;
      break;
    case StatusCode::kNotFound:
      code = grpc::StatusCode::NOT_FOUND;
      break;
    case StatusCode::kResourceExhausted:
      code = grpc::StatusCode::RESOURCE_EXHAUSTED;
      break;
    case StatusCode::kUnavailable:
      code = grpc::StatusCode::UNAVAILABLE;
      break;
    case StatusCode::kCancelled:
      code = grpc::StatusCode::CANCELLED;
      break;
    default:
      break;
  }
  return grpc::Status(code, s.message());
}

// The bridge between the scheduler thread (which says "something new") and
// the reactor (which may be gone). Held by shared_ptr from both sides.
struct Pump {
  std::recursive_mutex mu;
  class GenerateWriter* writer = nullptr;  // null once the reactor is done
};

// One Generate call: writes a chunk whenever the request has something new,
// one write in flight at a time, and exactly one Finish.
class GenerateWriter final : public grpc::ServerWriteReactor<v1::GenerateChunk> {
 public:
  GenerateWriter(engine::CompletionService& svc, const v1::GenerateRequest& req)
      : pump_(std::make_shared<Pump>()) {
    pump_->writer = this;
    Status started = Begin(svc, req);
    std::lock_guard<std::recursive_mutex> lock(pump_->mu);
    if (!started.ok()) {
      FinishLocked(ToGrpc(started));
      return;
    }
    std::weak_ptr<Pump> weak = pump_;
    stream_->SetNotify([weak] {
      auto p = weak.lock();
      if (!p) return;
      std::lock_guard<std::recursive_mutex> lock(p->mu);
      if (p->writer) p->writer->WriteNextLocked();
    });
    WriteNextLocked();
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::recursive_mutex> lock(pump_->mu);
    writing_ = false;
    if (!ok) {
      if (stream_) stream_->Cancel();
      FinishLocked(grpc::Status::CANCELLED);
      return;
    }
    if (last_written_) {
      FinishLocked(grpc::Status::OK);
      return;
    }
    WriteNextLocked();
  }
  void OnCancel() override {
    std::lock_guard<std::recursive_mutex> lock(pump_->mu);
    if (stream_) stream_->Cancel();
    if (!writing_) FinishLocked(grpc::Status::CANCELLED);
  }
  void OnDone() override {
    {
      std::lock_guard<std::recursive_mutex> lock(pump_->mu);
      pump_->writer = nullptr;  // the scheduler thread no longer reaches us
    }
    delete this;
  }

 private:
  Status Begin(engine::CompletionService& svc, const v1::GenerateRequest& req) {
    if (!req.model().empty() && !svc.model_name().empty() && req.model() != svc.model_name()) {
      return NotFoundError("the model '" + req.model() + "' is not served here (this is '" +
                           svc.model_name() + "')");
    }
    engine::CompletionRequest r;
    if (req.messages_size() > 0) {
      r.chat = true;
      for (const auto& m : req.messages()) r.messages.push_back({m.role(), m.content()});
    } else if (req.prompt_ids_size() > 0) {
      r.has_prompt_ids = true;
      r.prompt_ids.assign(req.prompt_ids().begin(), req.prompt_ids().end());
    } else if (!req.prompt().empty()) {
      r.prompt = req.prompt();
    } else {
      return InvalidArgumentError("give messages, prompt or prompt_ids");
    }
    // A field the request sets wins, then the model's generation_config.json
    // (the service's defaults), then the built-in default: as over HTTP.
    const engine::GenerationDefaults& d = svc.defaults();
    if (req.has_max_tokens() && req.max_tokens() > 0) r.max_tokens = req.max_tokens();
    if (req.has_temperature()) {
      r.sampling.temperature = req.temperature();
    } else if (d.temperature) {
      r.sampling.temperature = *d.temperature;
    }
    if (req.has_top_p() && req.top_p() > 0) {
      r.sampling.top_p = req.top_p();
    } else if (d.top_p) {
      r.sampling.top_p = *d.top_p;
    }
    if (req.has_top_k()) {
      r.sampling.top_k = req.top_k();
    } else if (d.top_k) {
      r.sampling.top_k = *d.top_k;
    }
    if (req.has_repetition_penalty()) {
      r.sampling.repetition_penalty = req.repetition_penalty();
    } else if (d.repetition_penalty) {
      r.sampling.repetition_penalty = *d.repetition_penalty;
    }
    OCTET_RETURN_IF_ERROR(engine::ValidateSampling(r.sampling));
    r.sampling.seed = req.seed();
    for (const auto& s : req.stop()) r.stop.push_back(s);
    OCTET_ASSIGN_OR_RETURN(stream_, svc.Start(r));
    return Status::Ok();
  }

  // Writes the next chunk when there is one and no write is in flight.
  void WriteNextLocked() {
    if (writing_ || finished_ || last_written_ || !stream_) return;
    engine::CompletionDelta d;
    if (!stream_->Next(Deadline::AfterMs(0), &d)) return;  // nothing new yet
    chunk_.Clear();
    for (int32_t id : d.ids) chunk_.add_ids(id);
    chunk_.set_text(d.text);
    if (d.done) {
      chunk_.set_done(true);
      chunk_.set_finish_reason(d.finish_reason);
      if (!d.error.ok()) chunk_.set_error(d.error.message());
      chunk_.mutable_usage()->set_prompt_tokens(static_cast<uint32_t>(d.prompt_tokens));
      chunk_.mutable_usage()->set_completion_tokens(static_cast<uint32_t>(d.completion_tokens));
      chunk_.mutable_timing()->set_ttft_ms(d.timing.ttft_ms());
      chunk_.mutable_timing()->set_prefill_tps(d.timing.prefill_tps(d.prompt_tokens));
      chunk_.mutable_timing()->set_decode_tps(d.timing.decode_tps(d.completion_tokens));
      last_written_ = true;
    } else if (d.ids.empty()) {
      return;
    }
    writing_ = true;
    StartWrite(&chunk_);
  }
  void FinishLocked(const grpc::Status& s) {
    if (finished_) return;
    finished_ = true;
    Finish(s);
  }

  std::shared_ptr<Pump> pump_;
  std::unique_ptr<engine::CompletionStream> stream_;  // guarded by pump_->mu
  v1::GenerateChunk chunk_;
  bool writing_ = false, last_written_ = false, finished_ = false;
};

class InferenceServiceImpl final : public v1::InferenceService::CallbackService {
 public:
  explicit InferenceServiceImpl(engine::CompletionService& svc) : svc_(svc) {}
  grpc::ServerWriteReactor<v1::GenerateChunk>* Generate(grpc::CallbackServerContext*,
                                                        const v1::GenerateRequest* req) override {
    return new GenerateWriter(svc_, *req);
  }

 private:
  engine::CompletionService& svc_;
};

}  // namespace

struct InferenceGrpcServer::Impl {
  explicit Impl(engine::CompletionService& s) : service(s) {}
  InferenceServiceImpl service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

Result<std::unique_ptr<InferenceGrpcServer>> InferenceGrpcServer::Start(
    engine::CompletionService& service, const std::string& address) {
  std::unique_ptr<InferenceGrpcServer> s(new InferenceGrpcServer());
  s->impl_ = std::make_unique<Impl>(service);
  grpc::ServerBuilder b;
  b.AddListeningPort(address, grpc::InsecureServerCredentials(), &s->impl_->port);
  b.RegisterService(&s->impl_->service);
  s->impl_->server = b.BuildAndStart();
  if (!s->impl_->server || s->impl_->port == 0) {
    return UnavailableError("cannot serve gRPC on " + address + " (in use, or not an address here)");
  }
  return s;
}

InferenceGrpcServer::~InferenceGrpcServer() { Stop(); }

int InferenceGrpcServer::port() const { return impl_->port; }

void InferenceGrpcServer::Stop() {
  if (!impl_ || !impl_->server) return;
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  impl_->server->Wait();
  impl_->server.reset();
}

}  // namespace octet::app
