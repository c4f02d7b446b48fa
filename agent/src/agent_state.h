// The shared state of one octet-agent (AgentServer::Impl) and what its gRPC
// services build on: the token check, background threads for blocking work
// and the status mapping. Internal to the agent library.
//
// agent_server.cpp starts and stops the agent; agent_services.cpp holds the
// node, telemetry, link and job services; node_report.cpp fills the facts and
// telemetry samples the node reports; model_service.cpp the model store.
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/service_type.h>

#include <atomic>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "octet/agent/agent_server.h"
#include "octet/agent/cluster_token.h"
#include "octet/agent/job_supervisor.h"
#include "octet/agent/link_discovery.h"
#include "octet/agent/link_probe.h"
#include "octet/agent/node_facts.h"
#include "octet/agent/system_stats.h"
#include "octet/base/status.h"

namespace octet::v1 {
class NodeFacts;
class TelemetrySample;
}  // namespace octet::v1

namespace octet::agent {

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
  grpc::Status Authorize(grpc::CallbackServerContext* ctx, const char* method) const;

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

  // ---- what the node reports (node_report.cpp) ----
  // RDMA devices, the NCCL settings they call for and what looks wrong. Read
  // at every call: a fixed MTU or a newly cabled port shows without a restart.
  void FillRdma(v1::NodeFacts* f) const;
  // Memory as the node reports it: the kernel's, or the simulated budget minus
  // what this node's jobs use.
  void FillMemory(uint64_t* total, uint64_t* available, uint64_t* used) const;
  // Everything NodeService/GetFacts answers, the above included.
  void FillFacts(v1::NodeFacts* f) const;
  // One telemetry sample; `cpu_prev` carries the CPU reading between samples of one stream.
  void FillSample(v1::TelemetrySample* s, CpuTimes* cpu_prev) const;
};

// The node, telemetry, link and job services of `agent` (agent_services.cpp).
std::vector<std::unique_ptr<grpc::Service>> MakeNodeServices(AgentServer::Impl* agent);

}  // namespace octet::agent
