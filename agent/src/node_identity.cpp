#include "octet/agent/node_identity.h"

#include <openssl/sha.h>

#include "octet/agent/cluster_token.h"
#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/base/log.h"

namespace octet::agent {
namespace {

std::string Trimmed(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t b = 0;
  while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  return s.substr(b);
}

bool WellFormedId(const std::string& id) {
  if (id.size() < 8 || id.size() > 64 || id.rfind("n-", 0) != 0) return false;
  for (char c : id) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-')) return false;
  }
  return true;
}

}  // namespace

std::string MachineFingerprint(const NodeIdentityPaths& paths) {
  std::string material;
  if (auto m = ReadFileToString(paths.machine_id_file); m.ok()) {
    material += "machine-id:" + Trimmed(*m) + "\n";
  }
  if (auto u = ReadFileToString(paths.product_uuid_file); u.ok()) {
    material += "product-uuid:" + Trimmed(*u) + "\n";
  }
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(material.data()), material.size(), d);
  return HexEncode(d, sizeof d);
}

Result<NodeIdentity> LoadOrCreateNodeIdentity(const NodeIdentityPaths& paths) {
  if (paths.state_dir.empty()) return InvalidArgumentError("node identity: no state directory");
  OCTET_RETURN_IF_ERROR(MakeDirs(paths.state_dir, 0755));
  const std::string file = JoinPath(paths.state_dir, "node_id");
  const std::string fingerprint = MachineFingerprint(paths);

  NodeIdentity out;
  if (auto text = ReadFileToString(file); text.ok()) {
    nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.value("node_id", "").size() > 0) {
      const std::string id = j.value("node_id", "");
      const std::string stored_fp = j.value("machine_fingerprint", "");
      if (WellFormedId(id) && stored_fp == fingerprint) {
        out.node_id = id;
        return out;
      }
      if (WellFormedId(id)) {
        OCTET_LOG(WARNING) << file << ": node id " << id
                           << " was made on a different machine (the machine id changed: a copied "
                              "image?); generating a new one";
        out.regenerated = true;
      } else {
        OCTET_LOG(WARNING) << file << ": malformed node id '" << id << "'; generating a new one";
      }
    } else {
      OCTET_LOG(WARNING) << file << ": not a node id record; generating a new one";
    }
  } else if (text.status().code() != StatusCode::kNotFound) {
    return text.status();
  }

  uint8_t random[6];
  OCTET_RETURN_IF_ERROR(FillRandom(random, sizeof random));
  out.node_id = "n-" + fingerprint.substr(0, 4) + "-" + HexEncode(random, sizeof random);
  out.created = true;
  nlohmann::json record = {{"node_id", out.node_id}, {"machine_fingerprint", fingerprint}};
  // A full state disk must not keep the node down: the id serves this run
  // (WriteFileAtomic leaves the old file whole), and the user is told.
  if (Status saved = WriteFileAtomic(file, record.dump(2) + "\n", 0644); !saved.ok()) {
    out.not_saved = saved.message();
    OCTET_LOG(WARNING) << file << ": node id " << out.node_id << " could not be saved ("
                       << out.not_saved
                       << "); this agent runs with it, but the next start makes another one "
                          "unless "
                       << paths.state_dir << " has room";
  }
  return out;
}

}  // namespace octet::agent
