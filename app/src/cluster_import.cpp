#include "octet/app/cluster_import.h"

#include <algorithm>
#include <filesystem>

#include "octet/agent/cluster_token.h"
#include "octet/base/file_util.h"

namespace octet::app {

std::vector<ProfileSummary> ListProfiles(const std::string& config_dir) {
  std::vector<ProfileSummary> out;
  const std::string root =
      JoinPath(config_dir.empty() ? DefaultConfigDir() : config_dir, "clusters");
  std::error_code ec;
  for (std::filesystem::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_directory(ec)) continue;
    const std::string dir = it->path().string();
    if (!PathExists(JoinPath(dir, "cluster.json"))) continue;
    ProfileSummary s;
    s.dir = dir;
    s.name = it->path().filename().string();
    auto p = LoadProfileDir(dir);
    if (p.ok()) {
      if (!p->name.empty()) s.name = p->name;
      s.nodes = p->nodes.size();
      s.tls = p->tls;
      s.local = p->local;
    } else {
      s.error = p.status().message();
    }
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(),
            [](const ProfileSummary& a, const ProfileSummary& b) { return a.name < b.name; });
  return out;
}

Result<ClusterProfile> ImportCluster(const ClusterImport& spec) {
  OCTET_RETURN_IF_ERROR(ValidateNodeName(spec.name).WithContext("cluster"));
  if (spec.nodes.empty()) return InvalidArgumentError("a cluster needs at least one node address");
  if (!spec.expected_cabling.empty() && spec.expected_cabling != "pair" &&
      spec.expected_cabling != "ring" && spec.expected_cabling != "switch") {
    return InvalidArgumentError("expected cabling '" + spec.expected_cabling +
                                "' must be pair, ring or switch");
  }
  ClusterProfile p;
  p.name = spec.name;
  p.dir = ProfileDir(spec.name, spec.config_dir);
  p.tls = !spec.tls_ca_file.empty();
  p.expected_cabling = spec.expected_cabling;
  for (size_t i = 0; i < spec.nodes.size(); ++i) {
    ClusterNode n = spec.nodes[i];
    if (n.name.empty()) n.name = "node-" + std::to_string(i);
    OCTET_RETURN_IF_ERROR(ValidateNodeName(n.name).WithContext("node " + std::to_string(i)));
    OCTET_ASSIGN_OR_RETURN(n.address, NormalizeAgentAddress(n.address));
    for (const auto& other : p.nodes) {
      if (other.name == n.name)
        return InvalidArgumentError("node name '" + n.name + "' is used twice");
      if (other.address == n.address)
        return InvalidArgumentError("address '" + n.address + "' is used twice");
    }
    p.nodes.push_back(std::move(n));
  }
  if (spec.token_file.empty()) return InvalidArgumentError("a token file is required");
  OCTET_ASSIGN_OR_RETURN(std::string token, agent::ReadTokenFile(spec.token_file));
  std::string ca_pem;
  if (p.tls) {
    OCTET_ASSIGN_OR_RETURN(ca_pem, ReadFileToString(spec.tls_ca_file));
    if (ca_pem.find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
      return InvalidArgumentError(spec.tls_ca_file + ": not a PEM certificate");
    }
  }
  if (PathExists(JoinPath(p.dir, "cluster.json")) && !spec.replace) {
    return AlreadyExistsError("cluster '" + spec.name + "' already exists (" + p.dir + ")");
  }
  OCTET_RETURN_IF_ERROR(SaveProfile(p));
  OCTET_RETURN_IF_ERROR(agent::WriteTokenFile(p.token_file(), token));
  if (p.tls) OCTET_RETURN_IF_ERROR(WriteFileAtomic(p.ca_cert_file(), ca_pem, 0644));
  return p;
}

}  // namespace octet::app
