// octet-agent: the per-node daemon, as a library so tests can run it
// in-process (the local embedded cluster starts octet-agent processes).
//
// An AgentServer serves the octet.v1 NodeService, TelemetryService,
// LinkService and JobService over gRPC (callback API). Every method of every
// service first checks the cluster token ("authorization: Bearer <token>"
// metadata, constant-time compare); a call without it or with a wrong one is
// answered UNAUTHENTICATED, logged with the method and the peer, and never
// executed. With a certificate and key the server speaks TLS only. It binds
// loopback unless told otherwise.
//
// Besides gRPC it runs link discovery (UDP beacons, see link_discovery.h), a
// link-probe endpoint (link_probe.h) and the job supervisor (job_supervisor.h).
// Shutdown (or destruction) ends streams, stops every job and joins threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "octet/agent/link_discovery.h"
#include "octet/agent/node_facts.h"
#include "octet/agent/node_identity.h"
#include "octet/base/status.h"

namespace octet::agent {

inline constexpr uint16_t kDefaultAgentPort = 47100;

struct AgentConfig {
  // gRPC address: "host:port" (port 0: any free port) or "unix:/path/to.sock".
  std::string listen = "127.0.0.1:47100";
  std::string token;         // the cluster token; required
  std::string tls_cert_pem;  // both set: TLS only
  std::string tls_key_pem;
  NodeIdentityPaths identity;            // where the node id is kept
  std::vector<std::string> model_roots;  // folders jobs may load models from
  // The model store (a Hugging Face hub cache) pulls go into and peers copy
  // from (models.proto). "" : <first model root>/hub. Added to the model roots
  // when outside them, so that what is pulled can be launched; created by the
  // first pull.
  std::string models_dir;
  // Local embedded cluster: a simulated node with this much memory (0: a real
  // node) and the cabling it declares, since loopback has no cables.
  uint64_t memory_budget_bytes = 0;
  std::string declared_cabling;  // "", "ring" or "switch"
  bool discovery = true;         // UDP beacons (off for simulated nodes)
  uint16_t beacon_port = kDefaultBeaconPort;
  int beacon_interval_ms = 1000;
  int link_stale_ms = 5000;  // an observation older than this is gone
  InterfaceFilter interfaces;
  // The sysfs tree RoCE facts are read from (roce.h): "" is /sys on a real node
  // and none on a simulated one; tests and recorded set-ups name another tree.
  std::string rdma_sys_root;
  // Link-probe endpoint "host:port". "" means any free port on loopback when
  // the gRPC address is loopback (or a unix socket), else on every address
  // (probes arrive over the cluster cables, not the management address). The
  // port is published in facts and beacons; connections must prove the token.
  std::string probe_listen;
  std::string octet_binary;  // "" : the `octet` beside this executable
  // Flags of a node owner's own `octet_binary` that jobs may pass (names
  // without "--"; job_arguments.h). Only the node owner sets these.
  std::vector<std::string> octet_binary_flags;
  int stop_grace_ms = 5000;
  // A model-service stream (a peer's file read, a pull's events) whose reader
  // takes nothing for this long ends (DEADLINE_EXCEEDED), freeing its thread
  // and stopping its work (a stopped pull resumes when run again).
  int stream_stall_ms = 60'000;
};

class AgentServer {
 public:
  static Result<std::unique_ptr<AgentServer>> Start(AgentConfig config);
  ~AgentServer();
  AgentServer(const AgentServer&) = delete;
  AgentServer& operator=(const AgentServer&) = delete;

  // Stops serving (in-flight streams are cancelled), stops every job. Idempotent.
  void Shutdown();

  const std::string& address() const;  // the bound address ("127.0.0.1:41234", "unix:/x")
  const std::string& node_id() const;
  uint16_t probe_port() const;

  struct Impl;

 private:
  AgentServer() = default;
  std::unique_ptr<Impl> impl_;
};

}  // namespace octet::agent
