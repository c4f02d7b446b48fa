// The octet-agent's NodeService, TelemetryService, LinkService and JobService
// (wire/proto/octet/v1): each method checks the cluster token, then answers
// from the agent's state (agent_state.h); blocking work runs off gRPC's threads.
#include <grpcpp/alarm.h>

#include <algorithm>
#include <chrono>
#include <mutex>

#include "agent_state.h"
#include "octet/base/clock.h"
#include "octet/base/log.h"
#include "octet/v1/jobs.grpc.pb.h"
#include "octet/v1/links.grpc.pb.h"
#include "octet/v1/node.grpc.pb.h"
#include "octet/v1/telemetry.grpc.pb.h"
#include "octet/wire/proto_convert.h"

namespace octet::agent {
namespace {

// Our status as gRPC's (the codes are the same set).
grpc::Status ToGrpc(const Status& s) {
  using C = grpc::StatusCode;
  C c = C::UNKNOWN;
  switch (s.code()) {
    case StatusCode::kOk:
      return grpc::Status::OK;
    case StatusCode::kCancelled:
      c = C::CANCELLED;
      break;
    case StatusCode::kUnknown:
      c = C::UNKNOWN;
      break;
    case StatusCode::kInvalidArgument:
      c = C::INVALID_ARGUMENT;
      break;
    case StatusCode::kDeadlineExceeded:
      c = C::DEADLINE_EXCEEDED;
      break;
    case StatusCode::kNotFound:
      c = C::NOT_FOUND;
      break;
    case StatusCode::kAlreadyExists:
      c = C::ALREADY_EXISTS;
      break;
    case StatusCode::kPermissionDenied:
      c = C::PERMISSION_DENIED;
      break;
    case StatusCode::kResourceExhausted:
      c = C::RESOURCE_EXHAUSTED;
      break;
    case StatusCode::kFailedPrecondition:
      c = C::FAILED_PRECONDITION;
      break;
    case StatusCode::kAborted:
      c = C::ABORTED;
      break;
    case StatusCode::kOutOfRange:
      c = C::OUT_OF_RANGE;
      break;
    case StatusCode::kUnimplemented:
      c = C::UNIMPLEMENTED;
      break;
    case StatusCode::kInternal:
      c = C::INTERNAL;
      break;
    case StatusCode::kUnavailable:
      c = C::UNAVAILABLE;
      break;
    case StatusCode::kDataLoss:
      c = C::DATA_LOSS;
      break;
    case StatusCode::kUnauthenticated:
      c = C::UNAUTHENTICATED;
      break;
  }
  return grpc::Status(c, s.message());
}

using Impl = AgentServer::Impl;

// ---- NodeService ------------------------------------------------------------

class NodeServiceImpl final : public v1::NodeService::CallbackService {
 public:
  explicit NodeServiceImpl(Impl* a) : a_(a) {}
  grpc::ServerUnaryReactor* GetFacts(grpc::CallbackServerContext* ctx, const v1::GetFactsRequest*,
                                     v1::NodeFacts* reply) override {
    return a_->Unary(ctx, "NodeService/GetFacts", [this, reply] {
      a_->FillFacts(reply);
      return grpc::Status::OK;
    });
  }

 private:
  Impl* a_;
};

// ---- TelemetryService -------------------------------------------------------

// Writes one sample, waits the interval on a gRPC alarm, writes the next.
// Exactly one Finish: on cancellation (client gone, server shutdown) or a failed write.
class TelemetryWriter final : public grpc::ServerWriteReactor<v1::TelemetrySample> {
 public:
  TelemetryWriter(Impl* a, uint32_t interval_ms) : a_(a), interval_ms_(interval_ms) {
    std::lock_guard<std::mutex> lock(mu_);
    WriteNextLocked();
  }
  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok || cancelled_) {
      FinishLocked(grpc::Status::CANCELLED);
      return;
    }
    alarm_pending_ = true;
    alarm_.Set(std::chrono::system_clock::now() + std::chrono::milliseconds(interval_ms_),
               [this](bool fired) {
                 std::lock_guard<std::mutex> lock(mu_);
                 alarm_pending_ = false;
                 if (!fired || cancelled_) {
                   FinishLocked(grpc::Status::CANCELLED);
                   return;
                 }
                 WriteNextLocked();
               });
  }
  void OnCancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    if (alarm_pending_) {
      alarm_.Cancel();  // its callback finishes
    } else if (!writing_) {
      FinishLocked(grpc::Status::CANCELLED);
    }
  }
  void OnDone() override { delete this; }

 private:
  void WriteNextLocked() {
    sample_.Clear();
    a_->FillSample(&sample_, &cpu_prev_);
    writing_ = true;
    StartWrite(&sample_);
  }
  void FinishLocked(const grpc::Status& s) {
    if (finished_) return;
    finished_ = true;
    Finish(s);
  }
  Impl* a_;
  const uint32_t interval_ms_;
  std::mutex mu_;
  grpc::Alarm alarm_;
  v1::TelemetrySample sample_;  // guarded by mu_ (in flight while writing_)
  CpuTimes cpu_prev_;
  bool writing_ = false, alarm_pending_ = false, cancelled_ = false, finished_ = false;
};

class RejectedWriter : public grpc::ServerWriteReactor<v1::TelemetrySample> {
 public:
  explicit RejectedWriter(const grpc::Status& s) { Finish(s); }
  void OnDone() override { delete this; }
};

class TelemetryServiceImpl final : public v1::TelemetryService::CallbackService {
 public:
  explicit TelemetryServiceImpl(Impl* a) : a_(a) {}
  grpc::ServerWriteReactor<v1::TelemetrySample>* Stream(grpc::CallbackServerContext* ctx,
                                                        const v1::TelemetryRequest* req) override {
    grpc::Status auth = a_->Authorize(ctx, "TelemetryService/Stream");
    if (!auth.ok()) return new RejectedWriter(auth);
    const uint32_t interval =
        std::clamp<uint32_t>(req->interval_ms() ? req->interval_ms() : 1000, 50, 60000);
    return new TelemetryWriter(a_, interval);
  }

 private:
  Impl* a_;
};

// ---- LinkService ------------------------------------------------------------

class LinkServiceImpl final : public v1::LinkService::CallbackService {
 public:
  explicit LinkServiceImpl(Impl* a) : a_(a) {}
  grpc::ServerUnaryReactor* GetLinks(grpc::CallbackServerContext* ctx, const v1::GetLinksRequest*,
                                     v1::LinksReply* reply) override {
    return a_->Unary(ctx, "LinkService/GetLinks", [this, reply] {
      reply->set_node_id(a_->node_id);
      reply->set_declared_cabling(a_->config.declared_cabling);
      reply->set_probe_port(a_->probe_port);
      if (a_->discovery) {
        reply->set_beacon_port(a_->discovery->port());
        for (const auto& i : a_->discovery->BeaconInterfaces()) reply->add_beacon_interfaces(i);
        for (const auto& o : a_->discovery->Observations(a_->config.link_stale_ms)) {
          auto* po = reply->add_observations();
          po->set_local_interface(o.local_interface);
          po->set_peer_node_id(o.peer_node_id);
          po->set_peer_interface(o.peer_interface);
          po->set_peer_address(o.peer_address);
          po->set_last_heard_unix_ms(o.last_heard_unix_ms);
          po->set_peer_probe_port(o.peer_probe_port);
        }
      }
      return grpc::Status::OK;
    });
  }
  grpc::ServerUnaryReactor* ProbeLink(grpc::CallbackServerContext* ctx,
                                      const v1::ProbeLinkRequest* req,
                                      v1::ProbeLinkReply* reply) override {
    return a_->Unary(ctx, "LinkService/ProbeLink", [this, req, reply, ctx] {
      std::string host;
      uint16_t port = 0;
      if (Status s = SplitHostPort(req->peer_address(), &host, &port); !s.ok()) return ToGrpc(s);
      const uint64_t bytes = req->bytes() ? req->bytes() : (16u << 20);
      const uint32_t trips =
          req->round_trips() ? std::min<uint32_t>(req->round_trips(), 100000) : 100;
      // The probe ends by the call's own deadline when the client set one (at most 60 s).
      Deadline d = Deadline::AfterMs(60'000);
      const auto client_deadline = ctx->deadline();
      if (client_deadline != std::chrono::system_clock::time_point::max()) {
        const auto left = client_deadline - std::chrono::system_clock::now();
        d = Deadline::Min(
            d, Deadline::After(std::chrono::duration_cast<std::chrono::nanoseconds>(left)));
      }
      auto r = RunLinkProbe(host, port, a_->config.token, bytes, trips, d);
      if (!r.ok()) return ToGrpc(r.status());
      reply->set_rtt_us_p50(r->rtt_us_p50);
      reply->set_rtt_us_p99(r->rtt_us_p99);
      reply->set_throughput_gbps(r->throughput_gbps);
      reply->set_round_trips(r->round_trips);
      reply->set_bytes(r->bytes);
      return grpc::Status::OK;
    });
  }

 private:
  Impl* a_;
};

// ---- JobService -------------------------------------------------------------

using wire::FromProto;
using wire::ToProto;

// Streams a job's output from the start; with `follow`, until the job ends.
class LogWriter final : public grpc::ServerWriteReactor<v1::LogChunk> {
 public:
  LogWriter(Impl* a, std::string job_id, bool follow)
      : a_(a), job_id_(std::move(job_id)), follow_(follow) {
    if (!a_->supervisor->Get(job_id_).ok()) {
      finished_ = true;
      Finish(grpc::Status(grpc::StatusCode::NOT_FOUND, "no job '" + job_id_ + "' on this node"));
      return;
    }
    subscription_ = a_->supervisor->Subscribe(job_id_, [this] { Pump(); });
    Pump();
  }
  void OnWriteDone(bool ok) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      if (!ok) {
        FinishLocked(grpc::Status::CANCELLED);
        return;
      }
    }
    Pump();
  }
  void OnCancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    if (!writing_) FinishLocked(grpc::Status::CANCELLED);
  }
  void OnDone() override {
    if (subscription_) a_->supervisor->Unsubscribe(subscription_);
    delete this;
  }

 private:
  void Pump() {
    std::lock_guard<std::mutex> lock(mu_);
    if (writing_ || finished_) return;
    if (cancelled_) {
      FinishLocked(grpc::Status::CANCELLED);
      return;
    }
    auto r = a_->supervisor->ReadLogs(job_id_, offset_, 64 << 10);
    if (!r.ok()) {
      FinishLocked(grpc::Status(grpc::StatusCode::NOT_FOUND, r.status().message()));
      return;
    }
    offset_ = r->next_offset;
    if (!r->text.empty()) {
      chunk_.set_job_id(job_id_);
      chunk_.set_text(std::move(r->text));
      writing_ = true;
      StartWrite(&chunk_);
      return;
    }
    if (r->ended || !follow_) FinishLocked(grpc::Status::OK);
    // Else: wait for the next notification.
  }
  void FinishLocked(const grpc::Status& s) {
    if (finished_) return;
    finished_ = true;
    Finish(s);
  }
  Impl* a_;
  const std::string job_id_;
  const bool follow_;
  uint64_t subscription_ = 0;
  std::mutex mu_;
  v1::LogChunk chunk_;  // guarded by mu_
  uint64_t offset_ = 0;
  bool writing_ = false, cancelled_ = false, finished_ = false;
};

class RejectedLogWriter : public grpc::ServerWriteReactor<v1::LogChunk> {
 public:
  explicit RejectedLogWriter(const grpc::Status& s) { Finish(s); }
  void OnDone() override { delete this; }
};

class JobServiceImpl final : public v1::JobService::CallbackService {
 public:
  explicit JobServiceImpl(Impl* a) : a_(a) {}
  grpc::ServerUnaryReactor* Start(grpc::CallbackServerContext* ctx, const v1::StartJobRequest* req,
                                  v1::StartJobReply* reply) override {
    return a_->Unary(ctx, "JobService/Start", [this, req, reply] {
      auto r = a_->supervisor->Start(FromProto(req->spec()));
      if (!r.ok()) {
        OCTET_LOG(WARNING) << "job '" << req->spec().job_id()
                           << "' refused: " << r.status().ToString();
        return ToGrpc(r.status());
      }
      reply->set_job_id(r->job_id);
      reply->set_pid(static_cast<uint32_t>(r->pid));
      reply->set_rendezvous(r->rendezvous);
      return grpc::Status::OK;
    });
  }
  grpc::ServerUnaryReactor* Stop(grpc::CallbackServerContext* ctx, const v1::StopJobRequest* req,
                                 v1::StopJobReply* reply) override {
    return a_->Unary(ctx, "JobService/Stop", [this, req, reply] {
      auto r = a_->supervisor->Stop(req->job_id());
      if (!r.ok()) return ToGrpc(r.status());
      reply->set_stopped(*r);
      return grpc::Status::OK;
    });
  }
  grpc::ServerUnaryReactor* List(grpc::CallbackServerContext* ctx, const v1::ListJobsRequest*,
                                 v1::ListJobsReply* reply) override {
    return a_->Unary(ctx, "JobService/List", [this, reply] {
      for (const JobInfo& j : a_->supervisor->List()) {
        auto* p = reply->add_jobs();
        ToProto(j.spec, p->mutable_spec());
        p->set_state(std::string(JobStateName(j.state)));
        p->set_exit_code(j.exit_code);
        p->set_exit_reason(j.exit_reason);
        p->set_started_unix_ms(j.started_unix_ms);
        p->set_ended_unix_ms(j.ended_unix_ms);
        p->set_pid(static_cast<uint32_t>(j.pid));
        for (const auto& a : j.argv) p->add_argv(a);
        p->set_last_error_line(j.last_error_line);
        p->set_signal(j.signal);
      }
      return grpc::Status::OK;
    });
  }
  grpc::ServerWriteReactor<v1::LogChunk>* StreamLogs(grpc::CallbackServerContext* ctx,
                                                     const v1::StreamLogsRequest* req) override {
    grpc::Status auth = a_->Authorize(ctx, "JobService/StreamLogs");
    if (!auth.ok()) return new RejectedLogWriter(auth);
    return new LogWriter(a_, req->job_id(), req->follow());
  }

 private:
  Impl* a_;
};

}  // namespace

std::vector<std::unique_ptr<grpc::Service>> MakeNodeServices(Impl* agent) {
  std::vector<std::unique_ptr<grpc::Service>> services;
  services.push_back(std::make_unique<NodeServiceImpl>(agent));
  services.push_back(std::make_unique<TelemetryServiceImpl>(agent));
  services.push_back(std::make_unique<LinkServiceImpl>(agent));
  services.push_back(std::make_unique<JobServiceImpl>(agent));
  return services;
}

}  // namespace octet::agent
