// Cluster profiles: which nodes make a cluster, the token that authenticates
// calls to their agents and, with TLS, the cluster CA and node certificates.
//
// A profile lives in <config>/clusters/<name>/ where <config> is
// $OCTET_CONFIG_DIR, else $XDG_CONFIG_HOME/octet, else ~/.config/octet:
//
//   cluster.json         {"name", "nodes": [{"name", "address"}], "tls", "expected_cabling",
//   "local"} token                the cluster token, mode 0600 ca.pem, ca.key       cluster CA (key
//   0600), with --tls nodes/<node>.pem     node certificate and key (0600) to copy onto that node
//   nodes/<node>.key
//
// The folder is created 0700. Node names are [A-Za-z0-9._-]{1,63}; addresses
// are HOST:PORT (":47100" is added when the port is missing) or unix:/PATH.
#pragma once

#include <string>
#include <vector>

#include "octet/app/agent_client.h"
#include "octet/base/status.h"

namespace octet::app {

struct ClusterNode {
  std::string name;
  std::string address;
};

struct ClusterProfile {
  std::string name;
  std::string dir;  // the profile folder
  std::vector<ClusterNode> nodes;
  bool tls = false;
  std::string expected_cabling;  // "", "pair", "ring" or "switch": what the owner cabled
  bool local = false;            // a local embedded cluster (`octet cluster local`)

  std::string token_file() const;
  std::string ca_cert_file() const;
  std::string ca_key_file() const;
  std::string node_cert_file(const std::string& node) const;
  std::string node_key_file(const std::string& node) const;
};

std::string DefaultConfigDir();
// <config_dir or DefaultConfigDir()>/clusters/<name>
std::string ProfileDir(const std::string& name, const std::string& config_dir = "");

Status ValidateNodeName(const std::string& name);
// "host" -> "host:47100"; "host:p", "[v6]:p" and "unix:/x" are kept. Errors name the text.
Result<std::string> NormalizeAgentAddress(const std::string& address);

Result<ClusterProfile> LoadProfile(const std::string& name, const std::string& config_dir = "");
Result<ClusterProfile> LoadProfileDir(const std::string& dir);
Status SaveProfile(const ClusterProfile& profile);

struct ClusterInitOptions {
  std::string name = "default";
  std::string config_dir;  // "" : DefaultConfigDir()
  std::vector<ClusterNode> nodes;
  bool tls = false;
  std::string expected_cabling;
  bool force = false;  // replace an existing profile (new token, new CA)
};
// Creates the profile folder, a new token and, with tls, the CA and a
// certificate per node. AlreadyExists unless `force`.
Result<ClusterProfile> InitCluster(const ClusterInitOptions& options);

// Adds (or replaces the address of) a node; with TLS, issues its certificate. Saves.
Status AddNode(ClusterProfile* profile, const ClusterNode& node);

// What a client needs to call node `index`: address, token, CA and certificate name.
Result<AgentEndpoint> EndpointFor(const ClusterProfile& profile, size_t index);

}  // namespace octet::app
