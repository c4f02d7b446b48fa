#include "octet/app/cluster_profile.h"

#include <arpa/inet.h>

#include <cstdlib>

#include "octet/agent/agent_server.h"
#include "octet/agent/cluster_token.h"
#include "octet/app/cluster_import.h"
#include "octet/app/tls_material.h"
#include "octet/base/file_util.h"
#include "octet/base/host_port.h"
#include "octet/base/json.h"

namespace octet::app {
namespace {

constexpr char kProfileFile[] = "cluster.json";

bool IsIpLiteral(const std::string& host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

Status IssueNodeCertificate(const ClusterProfile& p, const ClusterNode& node) {
  OCTET_ASSIGN_OR_RETURN(std::string ca_cert, ReadFileToString(p.ca_cert_file()));
  OCTET_ASSIGN_OR_RETURN(std::string ca_key, ReadFileToString(p.ca_key_file()));
  std::vector<std::string> dns{node.name, "localhost"};
  std::vector<std::string> ips{"127.0.0.1", "::1"};
  if (node.address.rfind("unix:", 0) != 0) {
    std::string host;
    uint16_t port = 0;
    OCTET_RETURN_IF_ERROR(SplitHostPort(node.address, &host, &port));
    if (IsIpLiteral(host)) {
      if (host != "127.0.0.1" && host != "::1") ips.push_back(host);
    } else if (host != node.name && host != "localhost") {
      dns.push_back(host);
    }
  }
  OCTET_ASSIGN_OR_RETURN(PemPair cert, MakeNodeCertificate({ca_cert, ca_key}, node.name, dns, ips));
  OCTET_RETURN_IF_ERROR(MakeDirs(JoinPath(p.dir, "nodes"), 0700));
  OCTET_RETURN_IF_ERROR(WriteFileAtomic(p.node_cert_file(node.name), cert.cert_pem, 0644));
  OCTET_RETURN_IF_ERROR(WriteFileAtomic(p.node_key_file(node.name), cert.key_pem, 0600));
  return Status::Ok();
}

}  // namespace

std::string ClusterProfile::token_file() const { return JoinPath(dir, "token"); }
std::string ClusterProfile::ca_cert_file() const { return JoinPath(dir, "ca.pem"); }
std::string ClusterProfile::ca_key_file() const { return JoinPath(dir, "ca.key"); }
std::string ClusterProfile::node_cert_file(const std::string& node) const {
  return JoinPath(JoinPath(dir, "nodes"), node + ".pem");
}
std::string ClusterProfile::node_key_file(const std::string& node) const {
  return JoinPath(JoinPath(dir, "nodes"), node + ".key");
}

std::string DefaultConfigDir() {
  if (const char* d = std::getenv("OCTET_CONFIG_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CONFIG_HOME"); x && *x) return JoinPath(x, "octet");
  if (const char* h = std::getenv("HOME"); h && *h)
    return JoinPath(JoinPath(h, ".config"), "octet");
  return ".octet";
}

std::string ProfileDir(const std::string& name, const std::string& config_dir) {
  return JoinPath(JoinPath(config_dir.empty() ? DefaultConfigDir() : config_dir, "clusters"), name);
}

Status ValidateNodeName(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 63 && name != "." && name != "..";
  for (char c : name) {
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-');
  }
  if (!ok) return InvalidArgumentError("name '" + name + "' must be 1-63 of [A-Za-z0-9._-]");
  return Status::Ok();
}

Result<std::string> NormalizeAgentAddress(const std::string& address) {
  if (address.rfind("unix:", 0) == 0) {
    if (address.size() <= 5)
      return InvalidArgumentError("empty unix socket path in '" + address + "'");
    return address;
  }
  std::string host;
  uint16_t port = 0;
  if (SplitHostPort(address, &host, &port).ok()) {
    if (port == 0) return InvalidArgumentError("address '" + address + "' needs a port");
    return address;
  }
  // No port: a plain host name or IP (IPv6 without brackets too).
  if (address.empty() || address.find_first_of(" /[]") != std::string::npos ||
      (address.find(':') != std::string::npos && !IsIpLiteral(address))) {
    return InvalidArgumentError("bad agent address '" + address + "' (expected HOST[:PORT])");
  }
  return JoinHostPort(address, agent::kDefaultAgentPort);
}

Result<ClusterProfile> LoadProfileDir(const std::string& dir) {
  const std::string file = JoinPath(dir, kProfileFile);
  OCTET_ASSIGN_OR_RETURN(std::string text, ReadFileToString(file));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return DataLossError(file + ": not a JSON object");
  ClusterProfile p;
  p.dir = dir;
  auto str = [&](const char* k) {
    auto it = j.find(k);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  auto boolean = [&](const char* k) {
    auto it = j.find(k);
    return it != j.end() && it->is_boolean() && it->get<bool>();
  };
  p.name = str("name");
  p.tls = boolean("tls");
  p.local = boolean("local");
  p.expected_cabling = str("expected_cabling");
  if (auto it = j.find("nodes"); it != j.end()) {
    if (!it->is_array()) return DataLossError(file + ": 'nodes' is not a list");
    for (size_t i = 0; i < it->size(); ++i) {
      const auto& n = (*it)[i];
      if (!n.is_object() || !n.contains("name") || !n.contains("address") ||
          !n["name"].is_string() || !n["address"].is_string()) {
        return DataLossError(file + ": nodes[" + std::to_string(i) +
                             "] needs a name and an address");
      }
      p.nodes.push_back({n["name"].get<std::string>(), n["address"].get<std::string>()});
    }
  }
  return p;
}

Result<ClusterProfile> LoadProfile(const std::string& name, const std::string& config_dir) {
  const std::string dir = ProfileDir(name, config_dir);
  auto p = LoadProfileDir(dir);
  if (!p.ok() && p.status().code() == StatusCode::kNotFound) {
    // The profiles there are, by name: a running `octet cluster local` saves
    // 'local', which the default 'default' does not find.
    std::string saved;
    for (const ProfileSummary& s : ListProfiles(config_dir)) {
      if (s.error.empty()) saved += (saved.empty() ? "" : ", ") + s.name;
    }
    return NotFoundError(
        "no cluster profile '" + name + "' (" + dir + "); " +
        (saved.empty() ? std::string() : "saved profiles: " + saved + " (--cluster NAME); ") +
        "create one with `octet cluster init`");
  }
  return p;
}

Status SaveProfile(const ClusterProfile& p) {
  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& n : p.nodes) nodes.push_back({{"name", n.name}, {"address", n.address}});
  nlohmann::json j = {{"name", p.name},
                      {"nodes", nodes},
                      {"tls", p.tls},
                      {"expected_cabling", p.expected_cabling},
                      {"local", p.local}};
  OCTET_RETURN_IF_ERROR(MakeDirs(p.dir, 0700));
  return WriteFileAtomic(JoinPath(p.dir, kProfileFile), j.dump(2) + "\n", 0644);
}

Result<ClusterProfile> InitCluster(const ClusterInitOptions& o) {
  OCTET_RETURN_IF_ERROR(ValidateNodeName(o.name).WithContext("cluster"));
  if (!o.expected_cabling.empty() && o.expected_cabling != "pair" && o.expected_cabling != "ring" &&
      o.expected_cabling != "switch") {
    return InvalidArgumentError("expected cabling '" + o.expected_cabling +
                                "' must be pair, ring or switch");
  }
  ClusterProfile p;
  p.name = o.name;
  p.dir = ProfileDir(o.name, o.config_dir);
  p.tls = o.tls;
  p.expected_cabling = o.expected_cabling;
  if (PathExists(JoinPath(p.dir, kProfileFile)) && !o.force) {
    return AlreadyExistsError("cluster '" + o.name + "' already exists (" + p.dir +
                              "); use --force to replace it (new token and certificates)");
  }
  for (const auto& n : o.nodes) {
    OCTET_RETURN_IF_ERROR(ValidateNodeName(n.name).WithContext("node"));
    OCTET_ASSIGN_OR_RETURN(std::string address, NormalizeAgentAddress(n.address));
    for (const auto& existing : p.nodes) {
      if (existing.name == n.name) return InvalidArgumentError("node '" + n.name + "' given twice");
    }
    p.nodes.push_back({n.name, address});
  }
  OCTET_RETURN_IF_ERROR(MakeDirs(p.dir, 0700));
  OCTET_ASSIGN_OR_RETURN(std::string token, agent::GenerateClusterToken());
  OCTET_RETURN_IF_ERROR(agent::WriteTokenFile(p.token_file(), token));
  if (o.tls) {
    OCTET_ASSIGN_OR_RETURN(PemPair ca, MakeCertificateAuthority("Octet cluster " + o.name + " CA"));
    OCTET_RETURN_IF_ERROR(WriteFileAtomic(p.ca_key_file(), ca.key_pem, 0600));
    OCTET_RETURN_IF_ERROR(WriteFileAtomic(p.ca_cert_file(), ca.cert_pem, 0644));
    for (const auto& n : p.nodes) OCTET_RETURN_IF_ERROR(IssueNodeCertificate(p, n));
  }
  OCTET_RETURN_IF_ERROR(SaveProfile(p));
  return p;
}

Status AddNode(ClusterProfile* p, const ClusterNode& node) {
  OCTET_RETURN_IF_ERROR(ValidateNodeName(node.name).WithContext("node"));
  OCTET_ASSIGN_OR_RETURN(std::string address, NormalizeAgentAddress(node.address));
  bool replaced = false;
  for (auto& n : p->nodes) {
    if (n.name == node.name) {
      n.address = address;
      replaced = true;
    }
  }
  if (!replaced) p->nodes.push_back({node.name, address});
  if (p->tls) OCTET_RETURN_IF_ERROR(IssueNodeCertificate(*p, {node.name, address}));
  return SaveProfile(*p);
}

Result<AgentEndpoint> EndpointFor(const ClusterProfile& p, size_t index) {
  if (index >= p.nodes.size()) return OutOfRangeError("no node " + std::to_string(index));
  AgentEndpoint e;
  e.address = p.nodes[index].address;
  OCTET_ASSIGN_OR_RETURN(e.token, agent::ReadTokenFile(p.token_file()));
  if (p.tls) {
    OCTET_ASSIGN_OR_RETURN(e.tls_ca_pem, ReadFileToString(p.ca_cert_file()));
    e.tls_server_name = p.nodes[index].name;
  }
  return e;
}

}  // namespace octet::app
