// NetnsLab and the netns test helpers (netns_lab.h): `ip` and curl run in
// namespaces, agents started there, the cluster view described for failures.
#include "netns_lab.h"

#include <signal.h>
#include <unistd.h>

#include <QTemporaryFile>
#include <QThread>
#include <sstream>

#include "octet/agent/cluster_token.h"
#include "octet/base/file_util.h"
#include "octet_test.h"

namespace octet::app::netns_test {

std::string IpPath() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return "";
}

std::string Ip(std::vector<std::string> args) {
  args.insert(args.begin(), IpPath());
  auto r = test::RunProgram(args, 20'000);
  return r.exit_code == 0 ? "" : ("ip failed (" + std::to_string(r.exit_code) + "): " + r.output);
}

std::string Prefix() { return "octet-t" + std::to_string(::getpid()) + "-"; }

void RemoveStaleNamespaces() {
  auto list = test::RunProgram({IpPath(), "netns", "list"}, 10'000);
  std::istringstream in(list.output);
  std::string line;
  while (std::getline(in, line)) {
    const std::string name = line.substr(0, line.find(' '));
    if (name.rfind("octet-t", 0) != 0) continue;
    const int pid = std::atoi(name.c_str() + 7);
    if (pid > 0 && ::kill(pid, 0) != 0) Ip({"netns", "del", name});
  }
}

NetnsLab::~NetnsLab() {
  session_.reset();
  for (auto& a : agents_) a->Terminate(std::chrono::milliseconds(3000));
  agents_.clear();
  for (const auto& ns : namespaces_) Ip({"netns", "del", ns});
}

Status NetnsLab::AddNamespace(const std::string& ns) {
  if (std::string e = Ip({"netns", "add", ns}); !e.empty()) return UnavailableError(e);
  namespaces_.push_back(ns);
  if (std::string e = Ip({"-n", ns, "link", "set", "lo", "up"}); !e.empty())
    return UnavailableError(e);
  return Status::Ok();
}

Status NetnsLab::Run(std::vector<std::string> args) {
  if (std::string e = Ip(std::move(args)); !e.empty()) return UnavailableError(e);
  return Status::Ok();
}

Status NetnsLab::Cable(const std::string& ns_a, const std::string& if_a, const std::string& addr_a,
                       const std::string& ns_b, const std::string& if_b,
                       const std::string& addr_b) {
  OCTET_RETURN_IF_ERROR(Run(
      {"link", "add", if_a, "netns", ns_a, "type", "veth", "peer", "name", if_b, "netns", ns_b}));
  if (!addr_a.empty()) OCTET_RETURN_IF_ERROR(Run({"-n", ns_a, "addr", "add", addr_a, "dev", if_a}));
  if (!addr_b.empty()) OCTET_RETURN_IF_ERROR(Run({"-n", ns_b, "addr", "add", addr_b, "dev", if_b}));
  OCTET_RETURN_IF_ERROR(Run({"-n", ns_a, "link", "set", if_a, "up"}));
  return Run({"-n", ns_b, "link", "set", if_b, "up"});
}

Status NetnsLab::RoutedRing4(const std::string& net) {
  for (int i = 0; i < 4; ++i) OCTET_RETURN_IF_ERROR(AddNamespace(Ns(i)));
  for (int i = 0; i < 4; ++i) {
    const std::string cable = net + "." + std::to_string(i) + ".";
    OCTET_RETURN_IF_ERROR(
        Cable(Ns(i), "r1", cable + "1/24", Ns((i + 1) % 4), "r0", cable + "2/24"));
  }
  for (int i = 0; i < 4; ++i) {
    const std::string ns = Ns(i);
    OCTET_RETURN_IF_ERROR(
        Run({"netns", "exec", ns, "/sbin/sysctl", "-qw", "net.ipv4.ip_forward=1"}));
    const std::string next = net + "." + std::to_string(i) + ".2";
    const std::string prev = net + "." + std::to_string((i + 3) % 4) + ".1";
    OCTET_RETURN_IF_ERROR(Run({"-n", ns, "route", "add",
                               net + "." + std::to_string((i + 1) % 4) + ".0/24", "via", next}));
    OCTET_RETURN_IF_ERROR(Run({"-n", ns, "route", "add",
                               net + "." + std::to_string((i + 2) % 4) + ".0/24", "via", prev}));
  }
  return Status::Ok();
}

Status NetnsLab::StartAgents(int n, const std::string& dir, const std::string& token_file) {
  for (int i = 0; i < n; ++i) {
    const std::string node_dir = dir + "/" + tag_ + std::to_string(i);
    OCTET_RETURN_IF_ERROR(MakeDirs(node_dir, 0700));
    // Each namespace is a different machine: its own machine id.
    OCTET_RETURN_IF_ERROR(WriteFileAtomic(node_dir + "/machine-id", Ns(i) + "\n"));
    const std::string socket = node_dir + "/agent.sock";
    // TCP on the node's own network (ListenTcp), else a unix socket.
    const auto tcp = tcp_listen_.find(i);
    const std::string listen = tcp != tcp_listen_.end() ? tcp->second : "unix:" + socket;
    ::unlink((node_dir + "/address").c_str());
    SpawnOptions so;
    so.argv = {IpPath(),
               "netns",
               "exec",
               Ns(i),
               test::BinDir() + "/octet-agent",
               "--listen",
               listen,
               "--port-file",
               node_dir + "/address",
               "--token-file",
               token_file,
               "--state-dir",
               node_dir,
               "--machine-id-file",
               node_dir + "/machine-id",
               "--beacon-interval-ms",
               "200",
               "--link-stale-ms",
               "1200",
               "--probe-listen",
               "0.0.0.0:0",
               "--stop-grace-ms",
               "1000"};
    so.argv.insert(so.argv.end(), agent_args_.begin(), agent_args_.end());
    so.output_file = node_dir + "/agent.log";
    OCTET_ASSIGN_OR_RETURN(auto proc, Subprocess::Spawn(so));
    agents_.push_back(std::move(proc));
    members_.push_back(
        {"n" + std::to_string(i), {listen, *agent::ReadTokenFile(token_file), "", ""}});
    logs_.push_back(node_dir + "/agent.log");
    port_files_.push_back(node_dir + "/address");
  }
  // The port files appear once each agent listens.
  const Deadline d = Deadline::AfterMs(20'000);
  for (int i = 0; i < n; ++i) {
    while (!PathExists(port_files_[static_cast<size_t>(i)])) {
      if (d.expired())
        return DeadlineExceededError("agent in " + Ns(i) + " did not start: " + Log(i));
      if (agents_[static_cast<size_t>(i)]->Poll())
        return UnavailableError("agent in " + Ns(i) + " exited: " + Log(i));
      QThread::msleep(20);
    }
  }
  ClusterSessionOptions o;
  o.telemetry_interval_ms = 200;
  o.refresh_interval_ms = 300;
  o.retry_interval_ms = 200;
  OCTET_ASSIGN_OR_RETURN(session_, ClusterSession::Open(tag_, members_, o));
  return Status::Ok();
}

std::string NetnsLab::Log(int i) const {
  return ReadFileToString(logs_[static_cast<size_t>(i)]).value_or("");
}

bool NetnsLab::AgentsRunning() {
  for (auto& a : agents_) {
    if (a->Poll()) return false;
  }
  return true;
}

nlohmann::json LastJson(const std::string& output) {
  std::istringstream in(output);
  std::string line;
  nlohmann::json last;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] != '{') continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object()) last = j;
  }
  return last;
}

const JobStatus* FindJob(const ClusterSnapshot& s, size_t n, const std::string& id) {
  for (const auto& j : s.nodes[n].jobs) {
    if (j.spec.job_id == id) return &j;
  }
  return nullptr;
}

bool JobEndedEverywhere(const ClusterSnapshot& s, const std::string& id) {
  for (size_t n = 0; n < s.nodes.size(); ++n) {
    const JobStatus* j = FindJob(s, n, id);
    if (!j || j->state == "running") return false;
  }
  return true;
}

std::string JobsText(const ClusterSnapshot& s, const std::string& id) {
  std::string out;
  for (size_t n = 0; n < s.nodes.size(); ++n) {
    const JobStatus* j = FindJob(s, n, id);
    out += "\n  " + s.nodes[n].name + ": " +
           (j ? j->state + " (" + j->exit_reason + ") " + j->last_error_line : "not listed");
  }
  return out;
}

bool HasEdge(const CablingReport& r, const std::string& a, const std::string& ai,
             const std::string& b, const std::string& bi) {
  for (const auto& e : r.edges) {
    if ((e.a_node == a && e.a_interface == ai && e.b_node == b && e.b_interface == bi) ||
        (e.a_node == b && e.a_interface == bi && e.b_node == a && e.b_interface == ai)) {
      return true;
    }
  }
  return false;
}

std::string Describe(const ClusterSnapshot& s) {
  std::string out = s.cabling.summary;
  for (const auto& e : s.cabling.edges) {
    out += "\n  " + e.a_node + ":" + e.a_interface + " (" + e.a_address + ") <-> " + e.b_node +
           ":" + e.b_interface + " (" + e.b_address + ")";
  }
  for (const auto& p : s.cabling.problems) out += "\n  ! " + p.message;
  for (const auto& n : s.nodes)
    out += "\n  " + n.name + " " + std::string(NodeStateName(n.state)) + " " + n.last_error;
  return out;
}

CurlReply CurlFrom(const std::string& ns, const std::string& method, const std::string& url,
                   const std::string& bearer, const std::string& body) {
  QTemporaryFile out;
  if (!out.open()) return {"000", "cannot make a temporary file"};
  std::vector<std::string> argv = {
      IpPath(), "netns",        "exec", ns,    "/usr/bin/curl",
      "-s",     "-m",           "5",    "-o",  out.fileName().toStdString(),
      "-w",     "%{http_code}", "-X",   method};
  if (!bearer.empty()) argv.insert(argv.end(), {"-H", "Authorization: Bearer " + bearer});
  if (!body.empty())
    argv.insert(argv.end(), {"-H", "Content-Type: application/json", "--data-binary", body});
  argv.push_back(url);
  const auto r = test::RunProgram(argv, 15'000);
  return {r.output.substr(0, 3), ReadFileToString(out.fileName().toStdString()).value_or("")};
}

}  // namespace octet::app::netns_test
