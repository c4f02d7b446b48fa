#include "octet/app/agent_client.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "octet/agent/cluster_token.h"
#include "octet/agent/link_probe.h"
#include "octet/v1/jobs.grpc.pb.h"
#include "octet/v1/links.grpc.pb.h"
#include "octet/v1/models.grpc.pb.h"
#include "octet/v1/node.grpc.pb.h"
#include "octet/v1/telemetry.grpc.pb.h"
#include "octet/wire/proto_convert.h"

namespace octet::app {
namespace {

Status FromGrpc(const grpc::Status& s, const std::string& address) {
  if (s.ok()) return Status::Ok();
  StatusCode c = StatusCode::kUnknown;
  switch (s.error_code()) {
    case grpc::StatusCode::CANCELLED:
      c = StatusCode::kCancelled;
      break;
    case grpc::StatusCode::INVALID_ARGUMENT:
      c = StatusCode::kInvalidArgument;
      break;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      c = StatusCode::kDeadlineExceeded;
      break;
    case grpc::StatusCode::NOT_FOUND:
      c = StatusCode::kNotFound;
      break;
    case grpc::StatusCode::ALREADY_EXISTS:
      c = StatusCode::kAlreadyExists;
      break;
    case grpc::StatusCode::PERMISSION_DENIED:
      c = StatusCode::kPermissionDenied;
      break;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      c = StatusCode::kResourceExhausted;
      break;
    case grpc::StatusCode::FAILED_PRECONDITION:
      c = StatusCode::kFailedPrecondition;
      break;
    case grpc::StatusCode::ABORTED:
      c = StatusCode::kAborted;
      break;
    case grpc::StatusCode::OUT_OF_RANGE:
      c = StatusCode::kOutOfRange;
      break;
    case grpc::StatusCode::UNIMPLEMENTED:
      c = StatusCode::kUnimplemented;
      break;
    case grpc::StatusCode::INTERNAL:
      c = StatusCode::kInternal;
      break;
    case grpc::StatusCode::UNAVAILABLE:
      c = StatusCode::kUnavailable;
      break;
    case grpc::StatusCode::DATA_LOSS:
      c = StatusCode::kDataLoss;
      break;
    case grpc::StatusCode::UNAUTHENTICATED:
      c = StatusCode::kUnauthenticated;
      break;
    default:
      c = StatusCode::kUnknown;
      break;
  }
  return Status(c, "agent " + address + ": " + s.error_message());
}

std::chrono::system_clock::time_point ToSystem(Deadline d) {
  if (d.is_never()) return std::chrono::system_clock::time_point::max();
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(d.remaining());
}

NodeFacts FromProto(const v1::NodeFacts& p) {
  NodeFacts f;
  f.node_id = p.node_id();
  f.hostname = p.hostname();
  f.os = p.os();
  f.cpu_model = p.cpu().model();
  f.cpu_cores = p.cpu().cores();
  f.cpu_arch = p.cpu().arch();
  const auto& m = p.memory();
  f.memory = {m.total_bytes(), m.available_bytes(), m.budget_bytes(),
              m.unified(),     m.gpu_total_bytes(), m.gpu_free_bytes()};
  for (const auto& g : p.gpus()) {
    f.gpus.push_back({g.name(), g.cc_major(), g.cc_minor(), g.memory_bytes(), g.unified_memory()});
  }
  f.gpu_note = p.gpu_note();
  for (const auto& n : p.interfaces()) {
    InterfaceFacts i;
    i.name = n.name();
    i.mac = n.mac();
    i.addresses.assign(n.addresses().begin(), n.addresses().end());
    i.speed_mbps = n.speed_mbps();
    i.mtu = n.mtu();
    i.up = n.up();
    i.kind = n.kind();
    i.discovery = n.discovery();
    i.discovery_note = n.discovery_note();
    f.interfaces.push_back(std::move(i));
  }
  for (const auto& d : p.rdma_devices()) {
    RdmaDeviceFacts r;
    r.name = d.name();
    r.netdev = d.netdev();
    r.pci_address = d.pci_address();
    for (const auto& port : d.ports()) {
      RdmaPortFacts rp;
      rp.port = port.port();
      rp.state = port.state();
      rp.link_layer = port.link_layer();
      rp.gids.assign(port.gids().begin(), port.gids().end());
      rp.phys_state = port.phys_state();
      rp.netdev = port.netdev();
      rp.active_mtu = port.active_mtu();
      rp.netdev_mtu = port.netdev_mtu();
      rp.rate = port.rate();
      for (const auto& g : port.gid_table()) {
        rp.gid_table.push_back({g.index(), g.gid(), g.type(), g.netdev()});
      }
      r.ports.push_back(std::move(rp));
    }
    f.rdma_devices.push_back(std::move(r));
  }
  f.rdma_note = p.rdma_note();
  f.nccl = {p.nccl().ib_hca(), p.nccl().socket_ifname(), p.nccl().ib_gid_index(),
            p.nccl().applied()};
  for (const auto& w : p.roce_warnings()) {
    f.roce_warnings.push_back({w.kind(), w.device(), w.port(), w.message()});
  }
  f.agent_version = p.agent_version();
  f.model_roots.assign(p.model_roots().begin(), p.model_roots().end());
  f.simulated = p.simulated();
  f.address = p.address();
  f.probe_port = p.probe_port();
  f.declared_cabling = p.declared_cabling();
  return f;
}

TelemetrySample FromProto(const v1::TelemetrySample& p) {
  TelemetrySample s;
  s.node_id = p.node_id();
  s.unix_ms = p.unix_ms();
  s.mem_total_bytes = p.mem_total_bytes();
  s.mem_used_bytes = p.mem_used_bytes();
  s.mem_available_bytes = p.mem_available_bytes();
  s.cpu_busy = p.cpu_busy();
  for (const auto& i : p.interfaces())
    s.interfaces.push_back({i.name(), i.rx_bytes(), i.tx_bytes()});
  for (const auto& w : p.workers()) s.workers.push_back(wire::FromProto(w));
  return s;
}

using wire::FromProto;
using wire::ToProto;

// A server stream read on its own thread with the synchronous API.
class ThreadStream final : public AgentStream {
 public:
  // `body` reads until the call ends and returns its status; it gets the context to use.
  ThreadStream(std::function<Status(grpc::ClientContext*)> body, AgentClient::EndCallback on_end) {
    thread_ = std::thread([this, body = std::move(body), on_end = std::move(on_end)] {
      Status s = body(&ctx_);
      done_ = true;
      if (on_end) on_end(s);
    });
  }
  ~ThreadStream() override {
    Cancel();
    thread_.join();
  }
  void Cancel() override { ctx_.TryCancel(); }
  bool done() const override { return done_; }

 private:
  grpc::ClientContext ctx_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace

struct AgentClient::Impl {
  AgentEndpoint endpoint;
  std::string bearer;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::NodeService::Stub> node;
  std::unique_ptr<v1::TelemetryService::Stub> telemetry;
  std::unique_ptr<v1::LinkService::Stub> links;
  std::unique_ptr<v1::JobService::Stub> jobs;
  std::unique_ptr<v1::ModelService::Stub> models;

  void Prepare(grpc::ClientContext* ctx, Deadline d) const {
    ctx->AddMetadata(agent::kAuthMetadataKey, bearer);
    if (!d.is_never()) ctx->set_deadline(ToSystem(d));
  }
  Status Err(const grpc::Status& s) const { return FromGrpc(s, endpoint.address); }
};

Result<std::unique_ptr<AgentClient>> AgentClient::Create(const AgentEndpoint& endpoint) {
  if (endpoint.address.empty()) return InvalidArgumentError("agent client: empty address");
  if (endpoint.token.empty()) return InvalidArgumentError("agent client: no cluster token");
  std::unique_ptr<AgentClient> c(new AgentClient);
  c->impl_ = std::make_unique<Impl>();
  Impl* im = c->impl_.get();
  im->endpoint = endpoint;
  im->bearer = std::string(agent::kBearerPrefix) + endpoint.token;

  grpc::ChannelArguments args;
  // Reconnect quickly after an agent restarts (gRPC's default backoff grows to minutes).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Notice a silently vanished peer (cable pulled) on long streams.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // One channel per client object: sessions do not share subchannels, so a
  // test that restarts an agent sees its own connection state.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (!endpoint.tls_ca_pem.empty()) {
    grpc::SslCredentialsOptions so;
    so.pem_root_certs = endpoint.tls_ca_pem;
    creds = grpc::SslCredentials(so);
    if (!endpoint.tls_server_name.empty()) {
      args.SetSslTargetNameOverride(endpoint.tls_server_name);
    }
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  im->channel = grpc::CreateCustomChannel(endpoint.address, creds, args);
  im->node = v1::NodeService::NewStub(im->channel);
  im->telemetry = v1::TelemetryService::NewStub(im->channel);
  im->links = v1::LinkService::NewStub(im->channel);
  im->jobs = v1::JobService::NewStub(im->channel);
  im->models = v1::ModelService::NewStub(im->channel);
  return c;
}

AgentClient::~AgentClient() = default;

const std::string& AgentClient::address() const { return impl_->endpoint.address; }

Result<NodeFacts> AgentClient::GetFacts(Deadline deadline) {
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx, deadline);
  v1::NodeFacts reply;
  grpc::Status s = impl_->node->GetFacts(&ctx, v1::GetFactsRequest(), &reply);
  if (!s.ok()) return impl_->Err(s);
  return FromProto(reply);
}

Result<LinksReport> AgentClient::GetLinks(Deadline deadline) {
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx, deadline);
  v1::LinksReply reply;
  grpc::Status s = impl_->links->GetLinks(&ctx, v1::GetLinksRequest(), &reply);
  if (!s.ok()) return impl_->Err(s);
  LinksReport r;
  r.node_id = reply.node_id();
  r.declared_cabling = reply.declared_cabling();
  r.beacon_interfaces.assign(reply.beacon_interfaces().begin(), reply.beacon_interfaces().end());
  r.beacon_port = reply.beacon_port();
  r.probe_port = reply.probe_port();
  for (const auto& o : reply.observations()) {
    r.observations.push_back({o.local_interface(), o.peer_node_id(), o.peer_interface(),
                              o.peer_address(), o.peer_probe_port(), o.last_heard_unix_ms()});
  }
  return r;
}

Result<LinkProbeResult> AgentClient::ProbeLink(const std::string& peer_probe_address,
                                               uint64_t bytes, uint32_t round_trips,
                                               Deadline deadline) {
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx, deadline);
  v1::ProbeLinkRequest req;
  req.set_peer_address(peer_probe_address);
  req.set_bytes(static_cast<uint32_t>(std::min<uint64_t>(bytes, UINT32_MAX)));
  req.set_round_trips(round_trips);
  v1::ProbeLinkReply reply;
  grpc::Status s = impl_->links->ProbeLink(&ctx, req, &reply);
  if (!s.ok()) return impl_->Err(s);
  return LinkProbeResult{reply.rtt_us_p50(), reply.rtt_us_p99(), reply.throughput_gbps(),
                         reply.round_trips(), reply.bytes()};
}

Result<JobStartResult> AgentClient::StartJob(const JobSpec& spec, Deadline deadline) {
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx, deadline);
  v1::StartJobRequest req;
  ToProto(spec, req.mutable_spec());
  v1::StartJobReply reply;
  grpc::Status s = impl_->jobs->Start(&ctx, req, &reply);
  if (!s.ok()) return impl_->Err(s);
  return JobStartResult{reply.job_id(), reply.pid(), reply.rendezvous()};
}

Result<bool> AgentClient::StopJob(const std::string& job_id, Deadline deadline) {
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx, deadline);
  v1::StopJobRequest req;
  req.set_job_id(job_id);
  v1::StopJobReply reply;
  grpc::Status s = impl_->jobs->Stop(&ctx, req, &reply);
  if (!s.ok()) return impl_->Err(s);
  return reply.stopped();
}

Result<std::vector<JobStatus>> AgentClient::ListJobs(Deadline deadline) {
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx, deadline);
  v1::ListJobsReply reply;
  grpc::Status s = impl_->jobs->List(&ctx, v1::ListJobsRequest(), &reply);
  if (!s.ok()) return impl_->Err(s);
  std::vector<JobStatus> out;
  for (const auto& j : reply.jobs()) {
    JobStatus st;
    st.spec = FromProto(j.spec());
    st.state = j.state();
    st.exit_code = j.exit_code();
    st.signal = j.signal();
    st.exit_reason = j.exit_reason();
    st.last_error_line = j.last_error_line();
    st.started_unix_ms = j.started_unix_ms();
    st.ended_unix_ms = j.ended_unix_ms();
    st.pid = j.pid();
    st.argv.assign(j.argv().begin(), j.argv().end());
    out.push_back(std::move(st));
  }
  return out;
}

Result<std::string> AgentClient::ReadLogs(const std::string& job_id, Deadline deadline) {
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx, deadline);
  v1::StreamLogsRequest req;
  req.set_job_id(job_id);
  req.set_follow(false);
  auto reader = impl_->jobs->StreamLogs(&ctx, req);
  std::string text;
  v1::LogChunk chunk;
  while (reader->Read(&chunk)) text += chunk.text();
  grpc::Status s = reader->Finish();
  if (!s.ok()) return impl_->Err(s);
  return text;
}

std::unique_ptr<AgentStream> AgentClient::StreamTelemetry(uint32_t interval_ms,
                                                          SampleCallback on_sample,
                                                          EndCallback on_end) {
  Impl* im = impl_.get();
  return std::make_unique<ThreadStream>(
      [im, interval_ms, on_sample = std::move(on_sample)](grpc::ClientContext* ctx) {
        im->Prepare(ctx, Deadline::Never());
        v1::TelemetryRequest req;
        req.set_interval_ms(interval_ms);
        auto reader = im->telemetry->Stream(ctx, req);
        v1::TelemetrySample sample;
        while (reader->Read(&sample)) {
          if (on_sample) on_sample(FromProto(sample));
        }
        return im->Err(reader->Finish());
      },
      std::move(on_end));
}

std::unique_ptr<AgentStream> AgentClient::StreamLogs(const std::string& job_id, bool follow,
                                                     TextCallback on_text, EndCallback on_end) {
  Impl* im = impl_.get();
  return std::make_unique<ThreadStream>(
      [im, job_id, follow, on_text = std::move(on_text)](grpc::ClientContext* ctx) {
        im->Prepare(ctx, Deadline::Never());
        v1::StreamLogsRequest req;
        req.set_job_id(job_id);
        req.set_follow(follow);
        auto reader = im->jobs->StreamLogs(ctx, req);
        v1::LogChunk chunk;
        while (reader->Read(&chunk)) {
          if (on_text) on_text(chunk.text());
        }
        return im->Err(reader->Finish());
      },
      std::move(on_end));
}

// ---- ModelService -------------------------------------------------------------

Result<NodeModels> AgentClient::ListModels(Deadline deadline) {
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx, deadline);
  v1::ListModelsReply reply;
  grpc::Status s = impl_->models->ListModels(&ctx, v1::ListModelsRequest(), &reply);
  if (!s.ok()) return impl_->Err(s);
  NodeModels out;
  out.models_dir = reply.models_dir();
  for (const auto& m : reply.models()) {
    NodeModel n;
    n.repo = m.repo();
    n.commit = m.commit();
    n.refs.assign(m.refs().begin(), m.refs().end());
    n.snapshot_dir = m.snapshot_dir();
    n.files = m.files();
    n.bytes = m.bytes();
    n.incomplete_files = m.incomplete_files();
    n.missing_files = m.missing_files();
    out.models.push_back(std::move(n));
  }
  return out;
}

Result<PeerSnapshot> AgentClient::GetSnapshot(const std::string& repo, const std::string& revision,
                                              Deadline deadline) {
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx, deadline);
  v1::GetSnapshotRequest req;
  req.set_repo(repo);
  req.set_revision(revision);
  v1::GetSnapshotReply reply;
  grpc::Status s = impl_->models->GetSnapshot(&ctx, req, &reply);
  if (!s.ok()) return impl_->Err(s);
  PeerSnapshot out;
  out.commit = reply.commit();
  for (const auto& f : reply.files()) {
    out.files.push_back({f.path(), f.size(), f.blob(), f.blob_path()});
  }
  return out;
}

Status AgentClient::ReadFile(const std::string& path, int64_t offset,
                             const std::function<Status(const char*, size_t)>& on_data,
                             Deadline deadline) {
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx, deadline);
  v1::ReadFileRequest req;
  req.set_path(path);
  req.set_offset(offset);
  auto reader = impl_->models->ReadFile(&ctx, req);
  v1::FileChunk chunk;
  Status failed;
  while (reader->Read(&chunk)) {
    failed = on_data(chunk.data().data(), chunk.data().size());
    if (!failed.ok()) {
      ctx.TryCancel();
      break;
    }
  }
  grpc::Status s = reader->Finish();
  if (!failed.ok()) return failed;
  return s.ok() ? Status::Ok() : impl_->Err(s);
}

Result<ModelPullEvent> AgentClient::PullModel(
    const ModelPullRequest& r, const std::function<void(const ModelPullEvent&)>& on_event,
    const std::atomic<bool>* cancel) {
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx, Deadline::Never());
  v1::PullModelRequest req;
  req.set_repo(r.repo);
  req.set_revision(r.revision);
  for (const auto& g : r.include) req.add_include(g);
  req.set_endpoint(r.endpoint);
  req.set_hf_token(r.hf_token);
  req.set_peer(r.peer);
  req.set_peer_tls_ca_pem(r.peer_tls_ca_pem);
  req.set_peer_tls_server_name(r.peer_tls_server_name);
  req.set_jobs(r.jobs);
  // The pull has no overall deadline (hundreds of GB); a cancel request, or
  // the channel's keepalive noticing a vanished agent, ends it.
  std::atomic<bool> ended{false};
  std::thread watcher([&] {
    while (!ended.load()) {
      if (cancel && cancel->load()) {
        ctx.TryCancel();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  auto reader = impl_->models->PullModel(&ctx, req);
  v1::PullModelEvent e;
  ModelPullEvent last;
  while (reader->Read(&e)) {
    ModelPullEvent m;
    m.line = e.line();
    m.files_done = e.files_done();
    m.files_total = e.files_total();
    m.bytes_done = e.bytes_done();
    m.bytes_total = e.bytes_total();
    m.bytes_per_s = e.bytes_per_s();
    m.finished = e.finished();
    m.ok = e.ok();
    m.error = e.error();
    m.commit = e.commit();
    m.snapshot_dir = e.snapshot_dir();
    m.network_bytes = e.network_bytes();
    m.files_downloaded = e.files_downloaded();
    if (on_event) on_event(m);
    if (m.finished) last = m;
  }
  grpc::Status s = reader->Finish();
  ended = true;
  watcher.join();
  if (!s.ok()) return impl_->Err(s);
  if (!last.finished) {
    return UnavailableError("agent " + impl_->endpoint.address +
                            ": the pull ended without an outcome");
  }
  return last;
}

}  // namespace octet::app
