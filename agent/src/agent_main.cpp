// octet-agent: the per-node daemon (see octet/agent/agent_server.h).
//
//   octet-agent --token-file /etc/octet/token [--listen 10.0.0.1:47100]
//               [--tls-cert node.pem --tls-key node.key] [--model-roots /models]
//
// Runs until SIGINT or SIGTERM, then stops every job it started and exits 0.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <iostream>

#include "octet/agent/agent_server.h"
#include "octet/agent/cluster_token.h"
#include "octet/base/args.h"
#include "octet/base/build_info.h"
#include "octet/base/file_util.h"
#include "octet/base/log.h"
#include "octet/collectives/runtime_libraries.h"

namespace {

// SIGINT/SIGTERM are caught by a handler that writes to a pipe the main thread
// waits on. (Blocking them instead would be inherited by every job process
// through fork and exec, and a worker could then not be stopped gracefully.)
int g_signal_pipe[2] = {-1, -1};
void OnStopSignal(int sig) {
  const char c = static_cast<char>(sig);
  (void)!::write(g_signal_pipe[1], &c, 1);
}

std::string DefaultStateDir() {
  if (::geteuid() == 0) return "/var/lib/octet";
  if (const char* x = std::getenv("XDG_STATE_HOME"); x && *x) return std::string(x) + "/octet";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.local/state/octet";
  return ".octet-state";
}

int Fail(const std::string& msg, int code = 1) {
  std::cerr << "octet-agent: " << msg << "\n";
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  octet::ArgParser p("octet-agent",
                     "Per-node Octet agent: node facts, telemetry, link discovery, jobs (gRPC).");
  p.Option("listen", "ADDR", "gRPC address: HOST:PORT (port 0: any) or unix:/PATH",
           "127.0.0.1:" + std::to_string(octet::agent::kDefaultAgentPort));
  p.Option("token-file", "FILE", "the cluster token (mode 0600; from `octet cluster init`)");
  p.Option("tls-cert", "FILE", "this node's certificate (PEM); with --tls-key: TLS only");
  p.Option("tls-key", "FILE", "this node's private key (PEM)");
  p.Option("state-dir", "DIR", "where the node id is kept", DefaultStateDir());
  p.Option("machine-id-file", "FILE", "machine id behind the node id", "/etc/machine-id");
  p.Option("model-roots", "DIR,...", "folders jobs may load models from");
  p.Option("models-dir", "DIR",
           "where `octet pull --cluster` puts models on this node (a Hugging Face hub cache; "
           "default: FIRST-MODEL-ROOT/hub; a model root itself)");
  p.Option("memory-budget", "SIZE", "simulate a node with this much memory (local cluster)");
  p.Option("cabling", "ring|switch", "declared cabling of a simulated node (local cluster)");
  p.Flag("no-discovery", "send no link beacons");
  p.Option("beacon-port", "PORT", "UDP port of the link beacons",
           std::to_string(octet::agent::kDefaultBeaconPort));
  p.Option("beacon-interval-ms", "MS", "time between beacons", "1000");
  p.Option("link-stale-ms", "MS",
           "forget a link not heard for this long (default: max(5000, 4 beacons))");
  p.Option("interfaces", "GLOB,...", "beacon only on these interfaces");
  p.Option("ignore-interfaces", "GLOB,...", "never beacon on these interfaces");
  p.Option("probe-listen", "HOST:PORT",
           "link-probe endpoint (default: the --listen host, any port)");
  p.Option("octet-bin", "PATH", "the octet program run for jobs (default: beside octet-agent)");
  p.Option("octet-bin-flags", "NAME,...",
           "flags of your own --octet-bin program that jobs may pass (as --NAME or --NAME=VALUE); "
           "octet's own flags are checked against a fixed allow-list");
  p.Option("stop-grace-ms", "MS", "SIGTERM to SIGKILL grace when stopping a job", "5000");
  p.Option("rdma-sys-root", "DIR",
           "read RoCE facts from this sysfs tree instead of /sys (a recorded set-up)");
  p.Option("port-file", "FILE", "write the bound address here once listening");
  p.Option("log-level", "LEVEL", "debug, info, warning or error", "info");
  p.Flag("version", "print the version and which run-time libraries (CUDA, NCCL, verbs) load");
  if (octet::Status s = p.Parse(argc, argv); !s.ok()) return Fail(s.message(), 2);
  if (p.help_requested()) {
    std::cout << p.Usage();
    return 0;
  }
  if (p.GetFlag("version")) {
    std::cout << "octet-agent " << octet::GetBuildInfo().version << "\n"
              << octet::GetBuildInfo().ToString() << "\n"
              << octet::collectives::RuntimeLibrariesLine() << "\n";
    return 0;
  }
  if (!p.positional().empty()) return Fail("unexpected argument '" + p.positional()[0] + "'", 2);
  octet::LogLevel level;
  if (!octet::ParseLogLevel(p.GetString("log-level"), &level)) {
    return Fail("--log-level: unknown level '" + p.GetString("log-level") + "'", 2);
  }
  octet::SetLogLevel(level);

  octet::agent::AgentConfig cfg;
  cfg.listen = p.GetString("listen");
  if (!p.Given("token-file")) return Fail("--token-file is required (see `octet cluster init`)", 2);
  auto token = octet::agent::ReadTokenFile(p.GetString("token-file"));
  if (!token.ok()) return Fail(token.status().message(), 2);
  cfg.token = *token;
  if (p.Given("tls-cert") != p.Given("tls-key"))
    return Fail("--tls-cert and --tls-key go together", 2);
  if (p.Given("tls-cert")) {
    auto cert = octet::ReadFileToString(p.GetString("tls-cert"));
    auto key = octet::ReadFileToString(p.GetString("tls-key"));
    if (!cert.ok()) return Fail(cert.status().message(), 2);
    if (!key.ok()) return Fail(key.status().message(), 2);
    cfg.tls_cert_pem = *cert;
    cfg.tls_key_pem = *key;
  }
  cfg.identity.state_dir = p.GetString("state-dir");
  cfg.identity.machine_id_file = p.GetString("machine-id-file");
  cfg.model_roots = p.GetList("model-roots");
  cfg.models_dir = p.GetString("models-dir");
  if (p.Given("memory-budget")) {
    auto b = p.GetBytes("memory-budget");
    if (!b.ok() || *b <= 0) return Fail("--memory-budget: expected a size like 16G", 2);
    cfg.memory_budget_bytes = static_cast<uint64_t>(*b);
  }
  cfg.declared_cabling = p.GetString("cabling");
  if (!cfg.declared_cabling.empty() && cfg.declared_cabling != "ring" &&
      cfg.declared_cabling != "switch") {
    return Fail("--cabling must be ring or switch", 2);
  }
  // A simulated node shares the host's real interfaces with its siblings: no beacons.
  cfg.discovery = !p.GetFlag("no-discovery") && cfg.memory_budget_bytes == 0;
  auto beacon_port = p.GetInt("beacon-port");
  auto interval = p.GetInt("beacon-interval-ms");
  auto grace = p.GetInt("stop-grace-ms");
  if (!beacon_port.ok() || *beacon_port < 0 || *beacon_port > 65535)
    return Fail("--beacon-port: bad port", 2);
  if (!interval.ok() || *interval < 50) return Fail("--beacon-interval-ms: at least 50", 2);
  if (!grace.ok() || *grace < 0) return Fail("--stop-grace-ms: bad value", 2);
  cfg.beacon_port = static_cast<uint16_t>(*beacon_port);
  cfg.beacon_interval_ms = static_cast<int>(*interval);
  cfg.link_stale_ms = std::max(5000, 4 * cfg.beacon_interval_ms);
  if (p.Given("link-stale-ms")) {
    auto stale = p.GetInt("link-stale-ms");
    if (!stale.ok() || *stale < 2 * cfg.beacon_interval_ms) {
      return Fail("--link-stale-ms: at least two beacon intervals", 2);
    }
    cfg.link_stale_ms = static_cast<int>(*stale);
  }
  cfg.stop_grace_ms = static_cast<int>(*grace);
  cfg.interfaces.only = p.GetList("interfaces");
  cfg.interfaces.ignore = p.GetList("ignore-interfaces");
  cfg.probe_listen = p.GetString("probe-listen");
  cfg.octet_binary = p.GetString("octet-bin");
  cfg.octet_binary_flags = p.GetList("octet-bin-flags");
  cfg.rdma_sys_root = p.GetString("rdma-sys-root");

  if (::pipe2(g_signal_pipe, O_CLOEXEC) != 0) return Fail("pipe failed");
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);

  auto server = octet::agent::AgentServer::Start(std::move(cfg));
  if (!server.ok()) return Fail(server.status().message());
  octet::SetLogTag("agent " + (*server)->node_id());
  if (p.Given("port-file")) {
    if (auto s = octet::WriteFileAtomic(p.GetString("port-file"), (*server)->address() + "\n");
        !s.ok()) {
      return Fail(s.message());
    }
  }
  char sig = 0;
  while (::read(g_signal_pipe[0], &sig, 1) < 0 && errno == EINTR) {
  }
  OCTET_LOG(INFO) << "signal " << static_cast<int>(sig) << ": shutting down";
  (*server)->Shutdown();
  return 0;
}
