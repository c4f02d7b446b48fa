#include "octet/agent/agent_server.h"

#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <list>
#include <mutex>
#include <thread>

#include "model_service.h"
#include "octet/agent/cluster_token.h"
#include "octet/agent/job_arguments.h"
#include "octet/agent/job_supervisor.h"
#include "octet/agent/link_probe.h"
#include "octet/agent/roce.h"
#include "octet/agent/system_stats.h"
#include "octet/base/clock.h"
#include "octet/base/file_util.h"
#include "octet/base/log.h"
#include "octet/v1/jobs.grpc.pb.h"
#include "octet/v1/links.grpc.pb.h"
#include "octet/v1/node.grpc.pb.h"
#include "octet/v1/telemetry.grpc.pb.h"
#include "octet/wire/proto_convert.h"

namespace octet::agent {
namespace {

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

// Threads for calls whose work may block (GPU probe, job start/stop, link
// probes): gRPC's callback threads must not. Finished threads are joined on
// the next Run; all are joined by JoinAll.
class BackgroundTasks {
 public:
  void Run(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = tasks_.begin(); it != tasks_.end();) {
      if (it->done->load()) {
        it->thread.join();
        it = tasks_.erase(it);
      } else {
        ++it;
      }
    }
    Task t;
    t.done = std::make_shared<std::atomic<bool>>(false);
    auto done = t.done;
    t.thread = std::thread([fn = std::move(fn), done] {
      fn();
      *done = true;
    });
    tasks_.push_back(std::move(t));
  }
  void JoinAll() {
    std::list<Task> tasks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks.swap(tasks_);
    }
    for (auto& t : tasks) t.thread.join();
  }

 private:
  struct Task {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::mutex mu_;
  std::list<Task> tasks_;  // guarded by mu_
};

}  // namespace

// ---------------------------------------------------------------------------
// Shared state of one agent: identity, config and the parts the services use.

struct AgentServer::Impl {
  AgentConfig config;
  std::string node_id;
  std::string address;
  uint16_t probe_port = 0;
  std::unique_ptr<TokenVerifier> verifier;
  std::unique_ptr<JobSupervisor> supervisor;
  std::unique_ptr<LinkDiscovery> discovery;
  std::unique_ptr<ProbeServer> probe_server;
  BackgroundTasks tasks;
  // Facts that do not change while the agent runs.
  std::string hostname, os;
  CpuFacts cpu;

  std::unique_ptr<grpc::Server> server;
  std::vector<std::unique_ptr<grpc::Service>> services;
  std::once_flag shutdown_once;

  // The token check every method starts with. OK, or UNAUTHENTICATED (logged).
  grpc::Status Authorize(grpc::CallbackServerContext* ctx, const char* method) const {
    const auto& md = ctx->client_metadata();
    auto it = md.find(kAuthMetadataKey);
    const char* why = nullptr;
    if (it == md.end()) {
      why = "no cluster token";
    } else {
      std::string_view value(it->second.data(), it->second.size());
      const std::string_view prefix = kBearerPrefix;
      if (value.substr(0, prefix.size()) != prefix ||
          !verifier->Matches(value.substr(prefix.size()))) {
        why = "wrong cluster token";
      }
    }
    if (!why) return grpc::Status::OK;
    OCTET_LOG(WARNING) << "rejected " << method << " from " << ctx->peer() << ": " << why;
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        std::string(why) + " (octet-agent " + node_id + ")");
  }

  // Unary call: authorize, then run `fn` (returning grpc::Status) on a
  // background thread and finish with its status.
  template <typename Fn>
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx, const char* method, Fn fn) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    grpc::Status auth = Authorize(ctx, method);
    if (!auth.ok()) {
      reactor->Finish(auth);
      return reactor;
    }
    tasks.Run([reactor, fn = std::move(fn)]() mutable { reactor->Finish(fn()); });
    return reactor;
  }

  bool simulated() const { return config.memory_budget_bytes > 0; }

  // Where RoCE facts are read from: the configured sysfs root, else /sys on a
  // real node and nowhere ("") on a simulated one (it has no devices of its own).
  std::string RdmaSysRoot() const {
    if (!config.rdma_sys_root.empty()) return config.rdma_sys_root;
    return simulated() ? std::string() : std::string("/sys");
  }

  // RDMA devices, the NCCL settings they call for and what looks wrong. Read
  // at every call: a fixed MTU or a newly cabled port shows without a restart.
  void FillRdma(v1::NodeFacts* f) const {
    const std::string root = RdmaSysRoot();
    if (root.empty()) {
      f->set_rdma_note("simulated node (no RDMA devices of its own)");
      return;
    }
    const RdmaProbe rdma = ReadRdmaSysfs(root);
    for (const auto& d : rdma.devices) {
      auto* pd = f->add_rdma_devices();
      pd->set_name(d.name);
      pd->set_netdev(d.netdev);
      pd->set_pci_address(d.pci_address);
      for (const auto& p : d.ports) {
        auto* pp = pd->add_ports();
        pp->set_port(p.port);
        pp->set_state(p.state);
        pp->set_phys_state(p.phys_state);
        pp->set_link_layer(p.link_layer);
        for (const auto& g : p.gids) pp->add_gids(g);
        pp->set_netdev(p.netdev);
        pp->set_netdev_mtu(static_cast<uint32_t>(std::max(p.mtu, 0)));
        pp->set_active_mtu(static_cast<uint32_t>(std::max(p.active_mtu, 0)));
        pp->set_rate(p.rate);
        for (const auto& g : p.gid_table) {
          auto* pg = pp->add_gid_table();
          pg->set_index(static_cast<uint32_t>(g.index));
          pg->set_gid(g.gid);
          pg->set_type(g.type);
          pg->set_netdev(g.netdev);
        }
      }
    }
    f->set_rdma_note(rdma.note);
    const NcclNetworkSettings nccl = NcclSettingsFor(rdma);
    auto* pn = f->mutable_nccl();
    for (const std::string& kv : nccl.env) {
      const size_t eq = kv.find('=');
      const std::string name = kv.substr(0, eq), value = kv.substr(eq + 1);
      if (name == "NCCL_IB_HCA") pn->set_ib_hca(value);
      if (name == "NCCL_SOCKET_IFNAME") pn->set_socket_ifname(value);
      if (name == "NCCL_IB_GID_INDEX") pn->set_ib_gid_index(value);
    }
    pn->set_applied(!simulated() && !nccl.env.empty());
    for (const RoceWarning& w : nccl.warnings) {
      auto* pw = f->add_roce_warnings();
      pw->set_kind(w.kind);
      pw->set_device(w.device);
      pw->set_port(w.port);
      pw->set_message(w.message);
    }
  }

  // Memory as the node reports it: the kernel's, or the simulated budget minus
  // what this node's jobs use.
  void FillMemory(uint64_t* total, uint64_t* available, uint64_t* used) const {
    if (simulated()) {
      uint64_t jobs = 0;
      for (const auto& f : supervisor->Figures()) jobs += f.memory_bytes;
      *total = config.memory_budget_bytes;
      *used = std::min(jobs, *total);
      *available = *total - *used;
      return;
    }
    auto m = ReadMemInfo();
    *total = m.ok() ? m->total_bytes : 0;
    *available = m.ok() ? m->available_bytes : 0;
    *used = *total > *available ? *total - *available : 0;
  }

  void FillFacts(v1::NodeFacts* f) const {
    f->set_node_id(node_id);
    f->set_hostname(hostname);
    f->set_os(os);
    f->set_agent_version(OCTET_VERSION);
    f->set_address(address);
    f->set_simulated(simulated());
    f->set_probe_port(probe_port);
    f->set_declared_cabling(config.declared_cabling);
    for (const auto& r : config.model_roots) f->add_model_roots(r);
    auto* c = f->mutable_cpu();
    c->set_model(cpu.model);
    c->set_cores(cpu.cores);
    c->set_arch(cpu.arch);

    const GpuProbe gpus = ProbeGpus();
    auto* m = f->mutable_memory();
    uint64_t total = 0, available = 0, used = 0;
    FillMemory(&total, &available, &used);
    m->set_total_bytes(total);
    m->set_available_bytes(available);
    m->set_budget_bytes(config.memory_budget_bytes);
    for (const auto& g : gpus.gpus) {
      auto* pg = f->add_gpus();
      pg->set_name(g.name);
      pg->set_cc_major(g.cc_major);
      pg->set_cc_minor(g.cc_minor);
      pg->set_memory_bytes(g.memory_bytes);
      pg->set_unified_memory(g.unified_memory);
    }
    if (!gpus.gpus.empty()) {
      m->set_unified(gpus.gpus[0].unified_memory);
      m->set_gpu_total_bytes(gpus.gpus[0].memory_bytes);
      m->set_gpu_free_bytes(gpus.gpus[0].free_bytes);
    }
    f->set_gpu_note(gpus.note);

    if (auto nics = ListInterfaces(config.interfaces); nics.ok()) {
      for (const auto& n : *nics) {
        if (n.loopback) continue;
        auto* pn = f->add_interfaces();
        pn->set_name(n.name);
        pn->set_mac(n.mac);
        for (const auto& a : n.ipv4) pn->add_addresses(a);
        for (const auto& a : n.ipv6) pn->add_addresses(a);
        pn->set_speed_mbps(n.speed_mbps);
        pn->set_mtu(n.mtu);
        pn->set_up(n.up);
        pn->set_kind(n.kind);
        pn->set_discovery(config.discovery && n.discovery);
        pn->set_discovery_note(!config.discovery ? "discovery off (simulated node)"
                                                 : n.discovery_note);
      }
    }
    FillRdma(f);
  }

  // One telemetry sample; `cpu_prev` carries the CPU reading between samples of one stream.
  void FillSample(v1::TelemetrySample* s, CpuTimes* cpu_prev) const {
    s->set_node_id(node_id);
    s->set_unix_ms(UnixMs());
    uint64_t total = 0, available = 0, used = 0;
    FillMemory(&total, &available, &used);
    s->set_mem_total_bytes(total);
    s->set_mem_used_bytes(used);
    s->set_mem_available_bytes(available);
    if (auto now = ReadCpuTimes(); now.ok()) {
      s->set_cpu_busy(cpu_prev->total ? CpuBusyFraction(*cpu_prev, *now) : 0.0);
      *cpu_prev = *now;
    }
    if (auto counters = ReadNetDev(); counters.ok()) {
      for (const auto& c : *counters) {
        if (c.name == "lo") continue;
        auto* pc = s->add_interfaces();
        pc->set_name(c.name);
        pc->set_rx_bytes(c.rx_bytes);
        pc->set_tx_bytes(c.tx_bytes);
      }
    }
    for (const auto& w : supervisor->Figures()) wire::ToProto(w, s->add_workers());
  }
};

namespace {

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

bool IsLoopbackHost(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

std::string HostOf(const std::string& listen) {
  if (listen.rfind("unix:", 0) == 0) return "127.0.0.1";
  std::string host;
  uint16_t port = 0;
  if (!SplitHostPort(listen, &host, &port).ok()) return "127.0.0.1";
  return host;
}

}  // namespace

Result<std::unique_ptr<AgentServer>> AgentServer::Start(AgentConfig config) {
  if (config.token.empty()) return InvalidArgumentError("octet-agent: a cluster token is required");
  if (config.tls_cert_pem.empty() != config.tls_key_pem.empty()) {
    return InvalidArgumentError("octet-agent: TLS needs both a certificate and a key");
  }
  if (!config.declared_cabling.empty() && config.declared_cabling != "ring" &&
      config.declared_cabling != "switch") {
    return InvalidArgumentError("declared cabling '" + config.declared_cabling +
                                "' must be ring or switch");
  }
  std::unique_ptr<AgentServer> server(new AgentServer);
  server->impl_ = std::make_unique<Impl>();
  Impl* a = server->impl_.get();
  a->config = std::move(config);
  const AgentConfig& cfg = a->config;

  OCTET_ASSIGN_OR_RETURN(NodeIdentity id, LoadOrCreateNodeIdentity(cfg.identity));
  a->node_id = id.node_id;
  a->verifier = std::make_unique<TokenVerifier>(cfg.token);
  a->hostname = ReadHostname();
  a->os = ReadOsDescription();
  a->cpu = ReadCpuFacts();

  JobSupervisorOptions jo;
  jo.octet_binary = cfg.octet_binary;
  if (jo.octet_binary.empty()) {
    auto self = SelfExecutablePath();
    jo.octet_binary = self.ok() ? JoinPath(DirName(*self), "octet") : "octet";
  }
  // The model store: pulls land there, jobs load from there.
  if (a->config.models_dir.empty() && !a->config.model_roots.empty()) {
    a->config.models_dir = JoinPath(a->config.model_roots.front(), "hub");
  }
  if (!a->config.models_dir.empty()) {
    // Created by the first pull, not here (a root may be read-only or not
    // mounted yet); NotFound means it would lie inside a root.
    auto inside = ResolveInsideRoots(a->config.models_dir, a->config.model_roots, "models dir");
    if (!inside.ok() && inside.status().code() != StatusCode::kNotFound) {
      a->config.model_roots.push_back(a->config.models_dir);
    }
  }
  jo.model_roots = cfg.model_roots;
  jo.owner_flags = cfg.octet_binary_flags;
  jo.stop_grace_ms = cfg.stop_grace_ms;
  jo.env = {"OCTET_NODE_ID=" + a->node_id};
  jo.router_admin_key = cfg.token;  // routers' admin tokens derive from it
  // NCCL's network settings from this node's RoCE facts, for the jobs that use
  // NCCL (a simulated node has none: its jobs share this machine's), derived
  // again at each launch so that they match the facts the workbench shows.
  if (cfg.memory_budget_bytes == 0) {
    const std::string root = a->RdmaSysRoot();
    const NcclNetworkSettings nccl = NcclSettingsFor(ReadRdmaSysfs(root));
    for (const auto& w : nccl.warnings) OCTET_LOG(WARNING) << "RoCE: " << w.message;
    jo.nccl_env_source = [root] { return NcclSettingsFor(ReadRdmaSysfs(root)).env; };
  }
  const std::string jo_binary = jo.octet_binary;
  a->supervisor = std::make_unique<JobSupervisor>(std::move(jo));

  // Link probe endpoint.
  if (!cfg.probe_listen.empty()) {
    std::string host;
    uint16_t port = 0;
    OCTET_RETURN_IF_ERROR(
        SplitHostPort(cfg.probe_listen, &host, &port).WithContext("--probe-listen"));
    OCTET_ASSIGN_OR_RETURN(a->probe_server, ProbeServer::Start(host, port, cfg.token));
  } else if (IsLoopbackHost(HostOf(cfg.listen))) {
    OCTET_ASSIGN_OR_RETURN(a->probe_server, ProbeServer::Start(HostOf(cfg.listen), 0, cfg.token));
  } else {
    // Every address, IPv6 and IPv4 (dual-stack), or IPv4 only where IPv6 is off.
    auto any6 = ProbeServer::Start("::", 0, cfg.token);
    if (any6.ok()) {
      a->probe_server = std::move(*any6);
    } else {
      OCTET_ASSIGN_OR_RETURN(a->probe_server, ProbeServer::Start("0.0.0.0", 0, cfg.token));
    }
  }
  a->probe_port = a->probe_server->port();

  if (cfg.discovery) {
    LinkDiscoveryOptions lo;
    lo.node_id = a->node_id;
    lo.token = cfg.token;
    lo.port = cfg.beacon_port;
    lo.interval_ms = cfg.beacon_interval_ms;
    lo.probe_port = a->probe_port;
    lo.filter = cfg.interfaces;
    OCTET_ASSIGN_OR_RETURN(a->discovery, LinkDiscovery::Start(std::move(lo)));
  }

  a->services.push_back(std::make_unique<NodeServiceImpl>(a));
  a->services.push_back(std::make_unique<TelemetryServiceImpl>(a));
  a->services.push_back(std::make_unique<LinkServiceImpl>(a));
  a->services.push_back(std::make_unique<JobServiceImpl>(a));
  {
    ModelServiceDeps md;
    md.authorize = [a](grpc::CallbackServerContext* ctx, const char* method) {
      return a->Authorize(ctx, method);
    };
    md.run_background = [a](std::function<void()> fn) { a->tasks.Run(std::move(fn)); };
    md.model_roots = a->config.model_roots;
    md.models_dir = a->config.models_dir;
    md.octet_binary = jo_binary;
    md.cluster_token = cfg.token;
    a->services.push_back(MakeModelService(std::move(md)));
  }

  std::shared_ptr<grpc::ServerCredentials> creds;
  if (!cfg.tls_cert_pem.empty()) {
    grpc::SslServerCredentialsOptions so;
    so.pem_key_cert_pairs.push_back({cfg.tls_key_pem, cfg.tls_cert_pem});
    creds = grpc::SslServerCredentials(so);
  } else {
    creds = grpc::InsecureServerCredentials();
  }
  grpc::ServerBuilder builder;
  int selected_port = 0;
  builder.AddListeningPort(cfg.listen, creds, &selected_port);
  for (auto& s : a->services) builder.RegisterService(s.get());
  a->server = builder.BuildAndStart();
  if (!a->server || (cfg.listen.rfind("unix:", 0) != 0 && selected_port == 0)) {
    return UnavailableError("octet-agent: cannot listen on " + cfg.listen +
                            " (address in use, or not an address of this node)");
  }
  if (cfg.listen.rfind("unix:", 0) == 0) {
    a->address = cfg.listen;
  } else {
    a->address = JoinHostPort(HostOf(cfg.listen), static_cast<uint16_t>(selected_port));
  }
  OCTET_LOG(INFO) << "octet-agent " << a->node_id << " listening on " << a->address
                  << (cfg.tls_cert_pem.empty() ? " (token auth, no TLS)" : " (token auth, TLS)")
                  << ", link probe port " << a->probe_port
                  << (a->discovery ? ", beacons on UDP " + std::to_string(a->discovery->port())
                                   : std::string(", discovery off"));
  return server;
}

AgentServer::~AgentServer() { Shutdown(); }

void AgentServer::Shutdown() {
  if (!impl_) return;
  Impl* a = impl_.get();
  std::call_once(a->shutdown_once, [a] {
    // Streams and calls in flight are cancelled after a short grace.
    if (a->server) {
      a->server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    }
    a->tasks.JoinAll();
    if (a->server) a->server->Wait();
    a->supervisor->StopAll();
    a->discovery.reset();
    a->probe_server.reset();
    a->supervisor.reset();
    OCTET_LOG(INFO) << "octet-agent " << a->node_id << " stopped";
  });
}

const std::string& AgentServer::address() const { return impl_->address; }
const std::string& AgentServer::node_id() const { return impl_->node_id; }
uint16_t AgentServer::probe_port() const { return impl_->probe_port; }

}  // namespace octet::agent
