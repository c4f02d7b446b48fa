// `octet cluster init|add|status|links|local`: cluster profiles, what the
// agents of a cluster report, and the local embedded cluster.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <iostream>

#include "command.h"
#include "node_models_json.h"
#include "octet/agent/cluster_token.h"
#include "octet/app/cluster_profile.h"
#include "octet/app/cluster_session.h"
#include "octet/app/local_cluster.h"
#include "octet/base/args.h"
#include "octet/base/file_util.h"
#include "octet/base/host_port.h"
#include "octet/base/json.h"

namespace octet::cli {
namespace {

using nlohmann::json;
using namespace octet::app;

constexpr char kUsage[] =
    "usage: octet cluster <init|add|status|links|local> [flags]   (octet cluster <sub> --help)\n\n"
    "  init     create a cluster profile: token (0600) and, with --tls, a CA and node "
    "certificates\n"
    "  add      add a node to a profile (issues its certificate with TLS)\n"
    "  status   each node's facts, jobs and the cabling classification\n"
    "  links    what each agent hears on which interface, the cabling graph, link probes\n"
    "  local    run a local embedded cluster: N agents on 127.0.0.1 with a memory budget each\n";

int UsageError(const std::string& program, const std::string& msg) {
  std::cerr << WithProgram(program, msg) << "\n";
  return kExitUsage;
}
int Failure(const std::string& program, const std::string& msg) {
  std::cerr << WithProgram(program, msg) << "\n";
  return kExitFailure;
}

// Parses the flags; returns -1 to continue, or the exit code (help, usage error).
int ParseOrExit(ArgParser& p, const std::vector<std::string>& args, const std::string& program) {
  if (Status s = p.Parse(args); !s.ok()) return ParseUsageError(s);
  if (p.help_requested()) {
    std::cout << p.Usage();
    return kExitOk;
  }
  if (!p.positional().empty() && p.positional().size() > 1) {
    return UsageError(program, "unexpected argument '" + p.positional()[1] + "'");
  }
  return -1;
}

json ToJson(const NodeFacts& f) {
  json nics = json::array();
  for (const auto& n : f.interfaces) {
    nics.push_back({{"name", n.name},
                    {"mac", n.mac},
                    {"addresses", n.addresses},
                    {"speed_mbps", n.speed_mbps},
                    {"mtu", n.mtu},
                    {"up", n.up},
                    {"kind", n.kind},
                    {"discovery", n.discovery},
                    {"discovery_note", n.discovery_note}});
  }
  json gpus = json::array();
  for (const auto& g : f.gpus) {
    gpus.push_back({{"name", g.name},
                    {"cc", std::to_string(g.cc_major) + "." + std::to_string(g.cc_minor)},
                    {"memory_bytes", g.memory_bytes},
                    {"unified_memory", g.unified_memory}});
  }
  json rdma = json::array();
  for (const auto& d : f.rdma_devices) {
    json ports = json::array();
    for (const auto& p : d.ports) {
      json gid_table = json::array();
      for (const auto& g : p.gid_table) {
        gid_table.push_back(
            {{"index", g.index}, {"gid", g.gid}, {"type", g.type}, {"netdev", g.netdev}});
      }
      ports.push_back({{"port", p.port},
                       {"state", p.state},
                       {"phys_state", p.phys_state},
                       {"link_layer", p.link_layer},
                       {"netdev", p.netdev},
                       {"mtu", p.netdev_mtu},
                       {"active_mtu", p.active_mtu},
                       {"rate", p.rate},
                       {"gids", p.gids},
                       {"gid_table", gid_table}});
    }
    rdma.push_back(
        {{"name", d.name}, {"netdev", d.netdev}, {"pci_address", d.pci_address}, {"ports", ports}});
  }
  json roce_warnings = json::array();
  for (const auto& w : f.roce_warnings) {
    roce_warnings.push_back(
        {{"kind", w.kind}, {"device", w.device}, {"port", w.port}, {"message", w.message}});
  }
  return {{"node_id", f.node_id},
          {"hostname", f.hostname},
          {"os", f.os},
          {"cpu", {{"model", f.cpu_model}, {"cores", f.cpu_cores}, {"arch", f.cpu_arch}}},
          {"memory",
           {{"total_bytes", f.memory.total_bytes},
            {"available_bytes", f.memory.available_bytes},
            {"budget_bytes", f.memory.budget_bytes},
            {"unified", f.memory.unified},
            {"gpu_total_bytes", f.memory.gpu_total_bytes},
            {"gpu_free_bytes", f.memory.gpu_free_bytes}}},
          {"gpus", gpus},
          {"gpu_note", f.gpu_note},
          {"interfaces", nics},
          {"rdma_devices", rdma},
          {"rdma_note", f.rdma_note},
          {"nccl",
           {{"NCCL_IB_HCA", f.nccl.ib_hca},
            {"NCCL_SOCKET_IFNAME", f.nccl.socket_ifname},
            {"NCCL_IB_GID_INDEX", f.nccl.ib_gid_index},
            {"applied", f.nccl.applied}}},
          {"roce_warnings", roce_warnings},
          {"agent_version", f.agent_version},
          {"model_roots", f.model_roots},
          {"simulated", f.simulated},
          {"address", f.address},
          {"declared_cabling", f.declared_cabling}};
}

json ToJson(const JobStatus& j) {
  return {{"job_id", j.spec.job_id},
          {"kind", std::string(app::JobKindName(j.spec.kind))},
          {"rank", j.spec.rank},
          {"world_size", j.spec.world_size},
          {"state", j.state},
          {"exit_code", j.exit_code},
          {"signal", j.signal},
          {"exit_reason", j.exit_reason},
          {"pid", j.pid},
          {"rendezvous", j.spec.rendezvous}};
}

json ToJson(const CablingReport& c) {
  json edges = json::array();
  for (const auto& e : c.edges) {
    edges.push_back({{"a", e.a_node},
                     {"a_interface", e.a_interface},
                     {"a_address", e.a_address},
                     {"b", e.b_node},
                     {"b_interface", e.b_interface},
                     {"b_address", e.b_address},
                     {"bidirectional", e.bidirectional},
                     {"segment", e.segment}});
  }
  json segments = json::array();
  for (const auto& s : c.segments)
    segments.push_back({{"shared", s.shared}, {"endpoints", s.endpoints}});
  json problems = json::array();
  for (const auto& p : c.problems) {
    problems.push_back({{"kind", p.kind}, {"message", p.message}, {"nodes", p.nodes}});
  }
  return {{"kind", std::string(CablingKindName(c.kind))},
          {"declared", c.declared},
          {"summary", c.summary},
          {"edges", edges},
          {"segments", segments},
          {"ring_order", c.ring_order},
          {"problems", problems}};
}

json ToJson(const LinksReport& l) {
  json obs = json::array();
  for (const auto& o : l.observations) {
    obs.push_back({{"local_interface", o.local_interface},
                   {"peer_node_id", o.peer_node_id},
                   {"peer_interface", o.peer_interface},
                   {"peer_address", o.peer_address},
                   {"last_heard_unix_ms", o.last_heard_unix_ms}});
  }
  return {{"node_id", l.node_id},
          {"declared_cabling", l.declared_cabling},
          {"beacon_interfaces", l.beacon_interfaces},
          {"beacon_port", l.beacon_port},
          {"probe_port", l.probe_port},
          {"observations", obs}};
}

// The nodes to talk to: a saved profile (--cluster) or explicit --agents with a token file.
struct Target {
  std::string name;
  std::vector<ClusterSession::Member> members;
  std::string expected_cabling;
};

void AddTargetFlags(ArgParser& p) {
  p.Option("cluster", "NAME", "a saved cluster profile", "default");
  p.Option("agents", "HOST:PORT,...", "talk to these agents instead of a profile");
  p.Option("token-file", "FILE", "cluster token for --agents (default: $OCTET_CLUSTER_TOKEN_FILE)");
  p.Option("ca", "FILE", "cluster CA certificate for --agents over TLS");
  p.Option("cabling", "pair|ring|switch", "what you cabled (checks the classification against it)");
  p.Option("timeout-ms", "MS", "per-call deadline", "5000");
}

Result<Target> ResolveTarget(const ArgParser& p) {
  Target t;
  if (p.Given("agents")) {
    std::string token_file = p.GetString("token-file");
    if (token_file.empty()) {
      if (const char* e = std::getenv("OCTET_CLUSTER_TOKEN_FILE"); e && *e) token_file = e;
    }
    if (token_file.empty()) return InvalidArgumentError("--agents needs --token-file");
    OCTET_ASSIGN_OR_RETURN(std::string token, agent::ReadTokenFile(token_file));
    std::string ca;
    if (p.Given("ca")) {
      OCTET_ASSIGN_OR_RETURN(ca, ReadFileToString(p.GetString("ca")));
    }
    t.name = "agents";
    const auto list = p.GetList("agents");
    if (list.empty()) return InvalidArgumentError("--agents: empty list");
    for (const auto& a : list) {
      OCTET_ASSIGN_OR_RETURN(std::string address, NormalizeAgentAddress(a));
      AgentEndpoint e{address, token, ca, ""};
      t.members.push_back({address, e});
    }
  } else {
    OCTET_ASSIGN_OR_RETURN(ClusterProfile profile, LoadProfile(p.GetString("cluster")));
    t.name = profile.name;
    t.expected_cabling = profile.expected_cabling;
    for (size_t i = 0; i < profile.nodes.size(); ++i) {
      OCTET_ASSIGN_OR_RETURN(AgentEndpoint e, EndpointFor(profile, i));
      t.members.push_back({profile.nodes[i].name, e});
    }
    if (t.members.empty()) {
      return FailedPreconditionError("cluster '" + profile.name +
                                     "' has no nodes; add some with `octet cluster add`");
    }
  }
  if (p.Given("cabling")) t.expected_cabling = p.GetString("cabling");
  return t;
}

// ---- init ---------------------------------------------------------------------

int RunInit(const std::vector<std::string>& args) {
  const std::string prog = "octet cluster init";
  ArgParser p(prog,
              "Create a cluster profile: a new token (0600) and, with --tls, a cluster CA and a "
              "certificate per node (libcrypto, EC P-256). Copy the token (and the node's "
              "certificate and key) onto each node and start its agent with them.");
  p.Option("name", "NAME", "profile name", "default");
  p.Option("nodes", "NAME=HOST[:PORT],...", "nodes of the cluster (port 47100 when omitted)");
  p.Flag("tls", "make a cluster CA and node certificates");
  p.Option("cabling", "pair|ring|switch", "how the nodes are cabled (checked by status/links)");
  p.Option("config-dir", "DIR",
           "where profiles live (default: $OCTET_CONFIG_DIR or ~/.config/octet)");
  p.Flag("force", "replace an existing profile (new token, new certificates)");
  p.Flag("json", "print one JSON document");
  if (int rc = ParseOrExit(p, args, prog); rc >= 0) return rc;
  ClusterInitOptions o;
  o.name = p.GetString("name");
  o.config_dir = p.GetString("config-dir");
  o.tls = p.GetFlag("tls");
  o.force = p.GetFlag("force");
  o.expected_cabling = p.GetString("cabling");
  for (const auto& item : p.GetList("nodes")) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size()) {
      return UsageError(prog, "--nodes: '" + item + "' is not NAME=HOST[:PORT]");
    }
    o.nodes.push_back({item.substr(0, eq), item.substr(eq + 1)});
  }
  auto profile = InitCluster(o);
  if (!profile.ok()) {
    const bool usage = profile.status().code() == StatusCode::kInvalidArgument;
    return usage ? UsageError(prog, profile.status().message())
                 : Failure(prog, profile.status().message());
  }
  if (p.GetFlag("json")) {
    json nodes = json::array();
    for (const auto& n : profile->nodes) {
      json j = {{"name", n.name}, {"address", n.address}};
      if (profile->tls) {
        j["cert"] = profile->node_cert_file(n.name);
        j["key"] = profile->node_key_file(n.name);
      }
      nodes.push_back(j);
    }
    json out = {{"name", profile->name},
                {"dir", profile->dir},
                {"token_file", profile->token_file()},
                {"tls", profile->tls},
                {"nodes", nodes}};
    if (profile->tls) out["ca"] = profile->ca_cert_file();
    std::cout << out.dump(2) << "\n";
  } else {
    std::cerr << "cluster '" << profile->name << "' created in " << profile->dir << "\n"
              << "  token: " << profile->token_file() << " (mode 0600)\n";
    if (profile->tls) std::cerr << "  CA:    " << profile->ca_cert_file() << "\n";
    for (const auto& n : profile->nodes) {
      std::cerr << "  node " << n.name << " at " << n.address;
      if (profile->tls) std::cerr << "  cert " << profile->node_cert_file(n.name);
      std::cerr << "\n";
    }
    std::cerr << "on each node: installers/install-agent.sh --token-file TOKEN"
              << (profile->tls ? " --tls-cert NODE.pem --tls-key NODE.key" : "")
              << " --listen ADDR:PORT\n";
  }
  return kExitOk;
}

// ---- add ----------------------------------------------------------------------

int RunAdd(const std::vector<std::string>& args) {
  const std::string prog = "octet cluster add";
  ArgParser p(prog, "Add a node to a cluster profile (with TLS, also issue its certificate).");
  p.Positional("NAME", "the node's name");
  p.Option("address", "HOST[:PORT]", "where its agent listens (port 47100 when omitted)");
  p.Option("cluster", "NAME", "profile", "default");
  p.Option("config-dir", "DIR", "where profiles live");
  p.Flag("json", "print one JSON document");
  if (int rc = ParseOrExit(p, args, prog); rc >= 0) return rc;
  if (p.positional().size() != 1) return UsageError(prog, "give the node's NAME");
  if (!p.Given("address")) return UsageError(prog, "--address is required");
  auto profile = LoadProfile(p.GetString("cluster"), p.GetString("config-dir"));
  if (!profile.ok()) return Failure(prog, profile.status().message());
  Status s = AddNode(&*profile, {p.positional()[0], p.GetString("address")});
  if (!s.ok()) {
    return s.code() == StatusCode::kInvalidArgument ? UsageError(prog, s.message())
                                                    : Failure(prog, s.message());
  }
  const auto& n = profile->nodes;
  auto it = std::find_if(n.begin(), n.end(),
                         [&](const ClusterNode& x) { return x.name == p.positional()[0]; });
  if (p.GetFlag("json")) {
    json out = {{"cluster", profile->name}, {"name", it->name}, {"address", it->address}};
    if (profile->tls) {
      out["cert"] = profile->node_cert_file(it->name);
      out["key"] = profile->node_key_file(it->name);
    }
    std::cout << out.dump(2) << "\n";
  } else {
    std::cerr << "node " << it->name << " (" << it->address << ") added to cluster '"
              << profile->name << "'\n";
  }
  return kExitOk;
}

// ---- status -------------------------------------------------------------------

void PrintCablingHuman(const CablingReport& c) {
  std::cerr << "cabling: " << c.summary << "\n";
  for (const auto& e : c.edges) {
    std::cerr << "  " << e.a_node << ":" << e.a_interface << " <-> " << e.b_node << ":"
              << e.b_interface << (e.bidirectional ? "" : "  (one-way)") << "\n";
  }
  for (const auto& pr : c.problems) std::cerr << "  ! " << pr.message << "\n";
}

int RunStatus(const std::vector<std::string>& args) {
  const std::string prog = "octet cluster status";
  ArgParser p(prog,
              "Ask every agent of a cluster for its facts, links, jobs and models; classify the "
              "cabling. Exits 1 when some agent did not answer.\n"
              "--json: {cluster, cabling, nodes: [{name, address, reachable, and when reachable: "
              "facts, jobs, models_dir (its model store; \"\" : none) and models (one per "
              "snapshot: repo, commit, refs, snapshot, files, bytes, incomplete_files, "
              "missing_files, as `octet models --cluster NAME --json`; absent when the agent did "
              "not list them), else error}]}.");
  AddTargetFlags(p);
  p.Flag("json", "print one JSON document");
  if (int rc = ParseOrExit(p, args, prog); rc >= 0) return rc;
  auto timeout = p.GetInt("timeout-ms");
  if (!timeout.ok() || *timeout <= 0)
    return UsageError(prog, "--timeout-ms: expected a positive number");
  auto target = ResolveTarget(p);
  if (!target.ok()) {
    return target.status().code() == StatusCode::kInvalidArgument
               ? UsageError(prog, target.status().message())
               : Failure(prog, target.status().message());
  }
  const ClusterSnapshot snap = QueryCluster(target->name, target->members, target->expected_cabling,
                                            Deadline::AfterMs(*timeout));
  size_t up = 0;
  for (const auto& n : snap.nodes) up += n.state == NodeState::kUp ? 1 : 0;
  if (p.GetFlag("json")) {
    json nodes = json::array();
    for (const auto& n : snap.nodes) {
      json j = {{"name", n.name}, {"address", n.address}, {"reachable", n.state == NodeState::kUp}};
      if (n.state == NodeState::kUp) {
        j["facts"] = ToJson(n.facts);
        json jobs = json::array();
        for (const auto& job : n.jobs) jobs.push_back(ToJson(job));
        j["jobs"] = jobs;
        if (n.has_models) AddNodeModelsJson(n.models, &j);
      } else {
        j["error"] = n.last_error;
      }
      nodes.push_back(j);
    }
    std::cout << json{{"cluster", snap.cluster_name},
                      {"nodes", nodes},
                      {"cabling", ToJson(snap.cabling)}}
                     .dump(2)
              << "\n";
  } else {
    std::cerr << "cluster " << snap.cluster_name << ": " << up << " of " << snap.nodes.size()
              << " agents answered\n";
    for (const auto& n : snap.nodes) {
      if (n.state != NodeState::kUp) {
        std::cerr << "  " << n.name << "  " << n.address << "  UNREACHABLE: " << n.last_error
                  << "\n";
        continue;
      }
      const auto& f = n.facts;
      std::cerr << "  " << n.name << "  " << n.address << "  " << f.node_id << "  " << f.hostname
                << (f.simulated ? " (simulated)" : "") << "\n    " << f.cpu_cores << " CPUs ("
                << f.cpu_arch << ", " << f.cpu_model << "); memory "
                << FormatBytes(static_cast<double>(f.memory.available_bytes)) << " free of "
                << FormatBytes(static_cast<double>(f.memory.total_bytes)) << "; GPUs: "
                << (f.gpus.empty() ? f.gpu_note
                                   : std::to_string(f.gpus.size()) + " " + f.gpus[0].name)
                << "; RDMA: "
                << (f.rdma_devices.empty() ? f.rdma_note
                                           : std::to_string(f.rdma_devices.size()) + " device(s)")
                << "; jobs: " << n.jobs.size() << "\n";
      for (const auto& w : f.roce_warnings) std::cerr << "    RoCE: " << w.message << "\n";
      for (const auto& m : n.models.models) {
        std::cerr << "    model: " << m.repo << " " << m.commit.substr(0, 10) << " ("
                  << FormatBytes(static_cast<double>(m.bytes)) << ")\n";
      }
    }
    PrintCablingHuman(snap.cabling);
  }
  return up == snap.nodes.size() ? kExitOk : kExitFailure;
}

// ---- links --------------------------------------------------------------------

int RunLinks(const std::vector<std::string>& args) {
  const std::string prog = "octet cluster links";
  ArgParser p(prog,
              "What each agent hears on which interface, the cabling graph and its problems; "
              "with --probe, measured round-trip latency and throughput of every link.");
  AddTargetFlags(p);
  p.Flag("probe", "measure every link (RTT and one-way throughput)");
  p.Option("probe-bytes", "SIZE", "bulk transfer per link", "16M");
  p.Option("round-trips", "N", "latency samples per link", "100");
  p.Flag("json", "print one JSON document");
  if (int rc = ParseOrExit(p, args, prog); rc >= 0) return rc;
  auto timeout = p.GetInt("timeout-ms");
  auto bytes = p.GetBytes("probe-bytes");
  auto trips = p.GetInt("round-trips");
  if (!timeout.ok() || *timeout <= 0)
    return UsageError(prog, "--timeout-ms: expected a positive number");
  if (!bytes.ok() || *bytes < 0 || *bytes > (1ll << 30))
    return UsageError(prog, "--probe-bytes: 0..1G");
  if (!trips.ok() || *trips < 1 || *trips > 100000)
    return UsageError(prog, "--round-trips: 1..100000");
  auto target = ResolveTarget(p);
  if (!target.ok()) {
    return target.status().code() == StatusCode::kInvalidArgument
               ? UsageError(prog, target.status().message())
               : Failure(prog, target.status().message());
  }
  const ClusterSnapshot snap = QueryCluster(target->name, target->members, target->expected_cabling,
                                            Deadline::AfterMs(*timeout));
  // Probes go from each edge's first node to the second, over that link's addresses.
  json probes = json::array();
  std::vector<LinkProbeReport> reports;
  if (p.GetFlag("probe")) {
    for (const CablingEdge& e : snap.cabling.edges) {
      LinkProbeReport rep;
      rep.edge = e;
      size_t a = 0;
      while (a < target->members.size() && target->members[a].name != e.a_node) ++a;
      if (a == target->members.size() || e.b_address.empty() || e.b_probe_port == 0) {
        rep.error = "no address for " + e.b_node + " on this link";
      } else if (auto client = AgentClient::Create(target->members[a].endpoint); !client.ok()) {
        rep.error = client.status().ToString();
      } else {
        auto r =
            (*client)->ProbeLink(JoinHostPort(e.b_address, static_cast<uint16_t>(e.b_probe_port)),
                                 static_cast<uint64_t>(*bytes), static_cast<uint32_t>(*trips),
                                 Deadline::AfterMs(std::max<int64_t>(*timeout, 30'000)));
        if (r.ok()) {
          rep.ok = true;
          rep.result = *r;
        } else {
          rep.error = r.status().ToString();
        }
      }
      reports.push_back(rep);
      json j = {{"a", e.a_node},
                {"a_interface", e.a_interface},
                {"b", e.b_node},
                {"b_interface", e.b_interface},
                {"ok", rep.ok}};
      if (rep.ok) {
        j["rtt_us_p50"] = rep.result.rtt_us_p50;
        j["rtt_us_p99"] = rep.result.rtt_us_p99;
        j["throughput_gbps"] = rep.result.throughput_gbps;
        j["bytes"] = rep.result.bytes;
        j["round_trips"] = rep.result.round_trips;
      } else {
        j["error"] = rep.error;
      }
      probes.push_back(j);
    }
  }
  size_t up = 0;
  for (const auto& n : snap.nodes) up += n.state == NodeState::kUp ? 1 : 0;
  if (p.GetFlag("json")) {
    json nodes = json::array();
    for (const auto& n : snap.nodes) {
      json j = {{"name", n.name}, {"address", n.address}, {"reachable", n.state == NodeState::kUp}};
      if (n.has_links) j["links"] = ToJson(n.links);
      if (n.state != NodeState::kUp) j["error"] = n.last_error;
      nodes.push_back(j);
    }
    json out = {
        {"cluster", snap.cluster_name}, {"nodes", nodes}, {"cabling", ToJson(snap.cabling)}};
    if (p.GetFlag("probe")) out["probes"] = probes;
    std::cout << out.dump(2) << "\n";
  } else {
    for (const auto& n : snap.nodes) {
      std::cerr << n.name << " (" << (n.has_links ? n.links.node_id : n.last_error) << ")\n";
      if (!n.has_links) continue;
      if (!n.links.declared_cabling.empty())
        std::cerr << "  declared cabling: " << n.links.declared_cabling << "\n";
      for (const auto& o : n.links.observations) {
        std::cerr << "  on " << o.local_interface << " hears " << o.peer_node_id << " "
                  << o.peer_interface << " from " << o.peer_address << "\n";
      }
    }
    PrintCablingHuman(snap.cabling);
    for (const auto& r : reports) {
      std::cerr << "  probe " << r.edge.a_node << " -> " << r.edge.b_node << " ("
                << r.edge.a_interface << "): ";
      if (r.ok) {
        std::cerr << "RTT p50 " << r.result.rtt_us_p50 << " us, p99 " << r.result.rtt_us_p99
                  << " us, " << r.result.throughput_gbps << " Gbit/s\n";
      } else {
        std::cerr << r.error << "\n";
      }
    }
  }
  return up == snap.nodes.size() ? kExitOk : kExitFailure;
}

// ---- local --------------------------------------------------------------------

int g_stop_pipe[2] = {-1, -1};
void OnStop(int sig) {
  const char c = static_cast<char>(sig);
  (void)!::write(g_stop_pipe[1], &c, 1);
}

int RunLocal(const std::vector<std::string>& args) {
  const std::string prog = "octet cluster local";
  ArgParser p(prog,
              "Run a local embedded cluster: N octet-agent processes on 127.0.0.1, each a "
              "simulated node with its own port, node id and memory budget, and a declared "
              "cabling. Saved as profile NAME, so `octet cluster status --cluster NAME` works "
              "from another terminal. Runs until Ctrl-C (or --for seconds).");
  p.Option("nodes", "N", "number of nodes (1-8)", "4");
  p.Option("memory-per-node", "SIZE", "memory budget of each node", "32G");
  p.Option("cabling", "ring|switch", "declared cabling", "ring");
  p.Option("name", "NAME", "profile name", "local");
  p.Option("state-dir", "DIR",
           "node ids, token and agent logs (default: ~/.local/state/octet/NAME)");
  p.Option("model-roots", "DIR,...", "folders jobs may load models from (default: $HOME)");
  p.Option("config-dir", "DIR", "where the profile is saved");
  p.Option("for", "SECONDS", "stop after this long (default: until Ctrl-C)");
  p.Flag("json", "print one JSON document once the nodes are up");
  if (int rc = ParseOrExit(p, args, prog); rc >= 0) return rc;
  LocalClusterOptions o;
  auto nodes = p.GetInt("nodes");
  auto memory = p.GetBytes("memory-per-node");
  if (!nodes.ok() || *nodes < 1 || *nodes > 8) return UsageError(prog, "--nodes: 1 to 8");
  if (!memory.ok() || *memory <= 0)
    return UsageError(prog, "--memory-per-node: expected a size like 16G");
  o.nodes = static_cast<int>(*nodes);
  o.memory_per_node_bytes = static_cast<uint64_t>(*memory);
  o.cabling = p.GetString("cabling");
  if (o.cabling != "ring" && o.cabling != "switch")
    return UsageError(prog, "--cabling: ring or switch");
  o.name = p.GetString("name");
  if (Status s = ValidateNodeName(o.name); !s.ok())
    return UsageError(prog, "--name: " + s.message());
  o.state_dir = p.GetString("state-dir");
  o.model_roots = p.GetList("model-roots");
  double run_for = -1;
  if (p.Given("for")) {
    auto f = p.GetDouble("for");
    if (!f.ok() || *f < 0) return UsageError(prog, "--for: expected seconds");
    run_for = *f;
  }

  if (::pipe2(g_stop_pipe, O_CLOEXEC) != 0) return Failure(prog, "pipe failed");
  struct sigaction sa {};
  sa.sa_handler = OnStop;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);

  auto cluster = LocalCluster::Start(o, Deadline::AfterMs(30'000));
  if (!cluster.ok()) return Failure(prog, cluster.status().message());
  // Save a profile (with its own copy of the token) for other terminals and the workbench.
  ClusterProfile saved = (*cluster)->profile();
  saved.dir = ProfileDir(o.name, p.GetString("config-dir"));
  auto token = agent::ReadTokenFile((*cluster)->profile().token_file());
  if (!token.ok()) return Failure(prog, token.status().message());
  if (Status s = SaveProfile(saved); !s.ok()) return Failure(prog, s.message());
  if (Status s = agent::WriteTokenFile(saved.token_file(), *token); !s.ok())
    return Failure(prog, s.message());

  auto session = ClusterSession::Open((*cluster)->profile());
  if (!session.ok()) return Failure(prog, session.status().message());
  const bool all_up = (*session)->WaitUntil(
      [](const ClusterSnapshot& s) {
        for (const auto& n : s.nodes) {
          if (n.state != NodeState::kUp || !n.has_links) return false;
        }
        return true;
      },
      Deadline::AfterMs(15'000));
  const ClusterSnapshot snap = (*session)->Snapshot();
  if (p.GetFlag("json")) {
    json nodes = json::array();
    for (size_t i = 0; i < snap.nodes.size(); ++i) {
      const auto& n = snap.nodes[i];
      nodes.push_back({{"name", n.name},
                       {"address", n.address},
                       {"node_id", n.facts.node_id},
                       {"pid", (*cluster)->pid(i)},
                       {"memory_budget_bytes", n.facts.memory.budget_bytes},
                       {"up", n.state == NodeState::kUp}});
    }
    std::cout << json{{"cluster", o.name},
                      {"profile", saved.dir},
                      {"state_dir", (*cluster)->state_dir()},
                      {"token_file", saved.token_file()},
                      {"cabling", ToJson(snap.cabling)},
                      {"nodes", nodes}}
                     .dump(2)
              << "\n"
              << std::flush;
  }
  std::cerr << "local cluster '" << o.name << "': " << snap.nodes.size() << " nodes, "
            << FormatBytes(static_cast<double>(o.memory_per_node_bytes)) << " each, " << o.cabling
            << "\n";
  for (const auto& n : snap.nodes) {
    std::cerr << "  " << n.name << "  " << n.address << "  " << n.facts.node_id << "\n";
  }
  std::cerr << "cabling: " << snap.cabling.summary << "\n"
            << "profile saved as '" << o.name << "' (octet cluster status --cluster " << o.name
            << "); Ctrl-C stops the cluster\n";
  if (!all_up) std::cerr << prog << ": warning: not every node came up in time\n";
  (*session)->SetListener([](const ClusterEvent& e) {
    switch (e.kind) {
      case ClusterEvent::Kind::kNodeLost:
        std::cerr << "node " << e.node_name << " lost: " << e.detail << "\n";
        break;
      case ClusterEvent::Kind::kNodeRecovered:
        std::cerr << "node " << e.node_name << " recovered\n";
        break;
      case ClusterEvent::Kind::kCablingChanged:
        std::cerr << "cabling: " << e.detail << "\n";
        break;
      default:
        break;
    }
  });

  pollfd pfd{g_stop_pipe[0], POLLIN, 0};
  const Deadline until =
      run_for >= 0 ? Deadline::AfterMs(static_cast<int64_t>(run_for * 1000)) : Deadline::Never();
  while (!until.expired()) {
    const int r = ::poll(&pfd, 1, until.is_never() ? -1 : std::max(1, until.poll_timeout_ms()));
    if (r > 0) break;
    if (r < 0 && errno != EINTR) break;
  }
  (*session)->SetListener(nullptr);
  session->reset();
  cluster->reset();
  std::cerr << "local cluster '" << o.name << "' stopped\n";
  return all_up ? kExitOk : kExitFailure;
}

}  // namespace

int RunCluster(const std::vector<std::string>& args) {
  if (args.empty()) {
    std::cerr << kUsage;
    return kExitUsage;
  }
  const std::string& sub = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (sub == "--help" || sub == "-h" || sub == "help") {
    std::cout << kUsage;
    return kExitOk;
  }
  if (const Subcommand* s = FindSubcommand(ClusterSubcommands(), sub)) return s->run(rest);
  std::cerr << "octet cluster: unknown subcommand '" << sub << "' ("
            << SubcommandNames(ClusterSubcommands()) << ")\n";
  return kExitUsage;
}

const std::vector<Subcommand>& ClusterSubcommands() {
  static const std::vector<Subcommand> table = {{"init", RunInit},
                                                {"add", RunAdd},
                                                {"status", RunStatus},
                                                {"links", RunLinks},
                                                {"local", RunLocal}};
  return table;
}

}  // namespace octet::cli
