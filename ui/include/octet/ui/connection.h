// Which cluster the workbench talks to, and how that choice is remembered.
//
// Two kinds: the local embedded cluster (N simulated nodes on this machine,
// started and stopped with the window) or a saved cluster profile of real
// agents (what `octet cluster init` or the Connect dialog wrote). The choice
// is kept in QSettings under "connection/"; at start-up the remembered choice
// wins, else the first saved profile of real agents, else the local cluster
// (4 nodes, switch cabling), so a new user sees a working cluster at once.
#pragma once

#include <QSettings>
#include <QString>
#include <QStringList>
#include <cstdint>
#include <string>

namespace octet::ui {

struct ConnectionSpec {
  enum class Kind { kLocal, kProfile };
  Kind kind = Kind::kLocal;

  // kLocal: the embedded cluster's shape.
  int local_nodes = 4;                               // 1..8
  QString local_cabling = QStringLiteral("switch");  // "switch" or "ring"
  uint64_t local_memory_bytes = 128ull << 30;        // per node (a DGX Spark has 128 GB)
  QStringList local_model_roots;                     // folders jobs may load models from

  // kProfile: the profile name under <config>/clusters/.
  QString profile;

  bool operator==(const ConnectionSpec& o) const;
  // "local cluster · 4 nodes · switch", "cluster 'lab'"
  QString Describe() const;

  static ConnectionSpec Load(QSettings& settings, bool* remembered);
  void Save(QSettings& settings) const;
};

// The connection to open at start-up (see above). `config_dir` "" is the default.
ConnectionSpec StartupConnection(QSettings& settings, const std::string& config_dir = "");

}  // namespace octet::ui
