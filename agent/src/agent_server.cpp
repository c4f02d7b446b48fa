#include "octet/agent/agent_server.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>

#include <chrono>
#include <mutex>

#include "agent_state.h"
#include "model_service.h"
#include "octet/agent/job_arguments.h"
#include "octet/agent/roce.h"
#include "octet/base/file_util.h"
#include "octet/base/log.h"

namespace octet::agent {

grpc::Status AgentServer::Impl::Authorize(grpc::CallbackServerContext* ctx,
                                          const char* method) const {
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

namespace {

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

  a->services = MakeNodeServices(a);
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
    md.stream_stall = std::chrono::milliseconds(std::max(cfg.stream_stall_ms, 1));
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
