// Connecting to a cluster of real agents from the workbench: listing the saved
// cluster profiles, and saving what a person typed into the "Connect cluster"
// dialog (node addresses, a token file, optionally the cluster CA) as a
// profile, so the next start (and `octet cluster status --cluster NAME`)
// finds it again.
//
// An imported profile owns copies of its secrets: the token is copied into the
// profile folder (0600) and the CA certificate beside it, so moving or
// deleting the files the person picked does not break the profile. The CA
// private key is never needed (nor copied): nodes of an imported TLS cluster
// already have their certificates.
#pragma once

#include <string>
#include <vector>

#include "octet/app/cluster_profile.h"
#include "octet/base/status.h"

namespace octet::app {

struct ProfileSummary {
  std::string name;
  std::string dir;
  size_t nodes = 0;
  bool tls = false;
  bool local = false;  // saved by `octet cluster local` (only valid while that runs)
  std::string error;   // non-empty when cluster.json could not be read
};

// Every folder under <config_dir or DefaultConfigDir()>/clusters/ holding a
// cluster.json, sorted by name. Unreadable profiles are listed with `error`.
std::vector<ProfileSummary> ListProfiles(const std::string& config_dir = "");

struct ClusterImport {
  std::string name;                // profile name ([A-Za-z0-9._-]{1,63})
  std::string config_dir;          // "" : DefaultConfigDir()
  std::vector<ClusterNode> nodes;  // names optional: "node-<i>" when empty
  std::string token_file;          // required: the cluster token
  std::string tls_ca_file;         // non-empty: TLS, with this cluster CA certificate
  std::string expected_cabling;    // "", "pair", "ring" or "switch"
  bool replace = false;            // overwrite an existing profile of that name
};

// Validates every field (errors name the field and the value), then writes
// <config>/clusters/<name>/{cluster.json, token, ca.pem}. AlreadyExists when a
// profile of that name exists and !replace.
Result<ClusterProfile> ImportCluster(const ClusterImport& spec);

}  // namespace octet::app
