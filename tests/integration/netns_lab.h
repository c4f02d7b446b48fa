// The network-namespace lab of test_netns_cabling: `ip` run by absolute
// path, NetnsLab (namespaces, veth cables, an octet-agent in each namespace
// and a ClusterSession over them, all removed again on destruction), and the
// helpers the tests read the cluster view and jobs with.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "octet/app/cluster_session.h"
#include "octet/base/json.h"
#include "octet/base/subprocess.h"

namespace octet::app::netns_test {

// iproute2's `ip`, by absolute path (test::RunProgram resolves bare names in the build).
std::string IpPath();

// Runs `ip ...`; returns "" on success, else the output.
std::string Ip(std::vector<std::string> args);

std::string Prefix();

// Namespaces of earlier runs that died without cleaning up (their pid is gone).
void RemoveStaleNamespaces();

class NetnsLab {
 public:
  explicit NetnsLab(std::string tag) : tag_(std::move(tag)) {}
  ~NetnsLab();

  std::string Ns(int i) const { return Prefix() + tag_ + std::to_string(i); }

  Status AddNamespace(const std::string& ns);
  Status Run(std::vector<std::string> args);
  // A cable: a veth pair between two namespaces, both ends up with the given addresses.
  Status Cable(const std::string& ns_a, const std::string& if_a, const std::string& addr_a,
               const std::string& ns_b, const std::string& if_b, const std::string& addr_b);

  // Four namespaces Ns(0..3) in a ring of cables, n_i:r1 (NET.i.1/24) <->
  // n_{i+1}:r0 (NET.i.2/24), with ip_forward and static routes so every node
  // reaches every other, two hops at most: the subnet beyond the next node
  // through it, the one beyond the previous node through that one.
  Status RoutedRing4(const std::string& net);

  Status StartAgents(int n, const std::string& dir, const std::string& token_file);

  // Node i's agent listens on this TCP address (inside its namespace)
  // instead of a unix socket: the session then reaches it over the network.
  void ListenTcp(int i, std::string address) { tcp_listen_[i] = std::move(address); }

  // Flags added to every agent's command line (before StartAgents).
  void AddAgentArgs(std::vector<std::string> args) {
    agent_args_.insert(agent_args_.end(), args.begin(), args.end());
  }

  std::string Log(int i) const;
  bool AgentsRunning();
  ClusterSession& session() { return *session_; }

 private:
  std::string tag_;
  std::vector<std::string> namespaces_;
  std::vector<std::unique_ptr<Subprocess>> agents_;
  std::vector<ClusterSession::Member> members_;
  std::vector<std::string> logs_;
  std::vector<std::string> agent_args_;
  std::vector<std::string> port_files_;
  std::map<int, std::string> tcp_listen_;
  std::unique_ptr<ClusterSession> session_;
};

// The last line of `output` that is a JSON object.
nlohmann::json LastJson(const std::string& output);

// The job's status on node `n` in the snapshot (nullptr when not listed).
const JobStatus* FindJob(const ClusterSnapshot& s, size_t n, const std::string& id);

bool JobEndedEverywhere(const ClusterSnapshot& s, const std::string& id);

std::string JobsText(const ClusterSnapshot& s, const std::string& id);

bool HasEdge(const CablingReport& r, const std::string& a, const std::string& ai,
             const std::string& b, const std::string& bi);

std::string Describe(const ClusterSnapshot& s);

// An HTTP request with curl from inside namespace `ns`: the status code
// ("000" when nothing answered) and the body.
struct CurlReply {
  std::string code, body;
};
CurlReply CurlFrom(const std::string& ns, const std::string& method, const std::string& url,
                   const std::string& bearer = "", const std::string& body = "");

}  // namespace octet::app::netns_test
