// Helpers for the workbench's Qt Test suites: settings and profiles in a
// temporary folder (never the person's own), and window options that run a
// local embedded cluster of real octet-agent processes from the build.
#pragma once

#include <QSettings>
#include <QTemporaryDir>
#include <QtTest>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "octet/app/cluster_session.h"
#include "octet/ui/main_window.h"
#include "octet/ui/plurals.h"
#include "octet_test.h"
#include "random_checkpoint.h"

namespace octet::test {

// Points QSettings, cluster profiles and local-cluster state into `dir`.
inline void IsolateWorkbench(const QTemporaryDir& dir) {
  const QByteArray root = dir.path().toUtf8();
  qputenv("OCTET_CONFIG_DIR", root + "/config");
  qputenv("XDG_CONFIG_HOME", root + "/xdg-config");
  qputenv("XDG_STATE_HOME", root + "/xdg-state");
  QCoreApplication::setOrganizationName(QStringLiteral("OctetTest"));
  QCoreApplication::setApplicationName(QStringLiteral("octet-workbench-test"));
  QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, dir.path() + "/settings");
  QSettings().clear();
  ui::InstallEnglishPlurals();  // as the workbench does: "1 node", "2 nodes"
}

// Window options that connect to nothing at start (the test drives the panels
// itself) and run this build's `octet` for local instances.
inline ui::WorkbenchOptions OfflineWorkbench(const QTemporaryDir& dir) {
  ui::WorkbenchOptions o;
  o.auto_connect = false;
  o.cluster.config_dir = dir.path().toStdString() + "/config";
  o.source_dir = SourceDir();
  o.cluster.local.octet_binary = BinDir() + "/octet";
  return o;
}

// Window options for a local cluster of `nodes` simulated nodes.
inline ui::WorkbenchOptions LocalWorkbench(const QTemporaryDir& dir, int nodes,
                                           const QString& cabling,
                                           const std::string& octet_binary = "",
                                           const QStringList& model_roots = {}) {
  ui::WorkbenchOptions o;
  o.cluster.local.agent_binary = BinDir() + "/octet-agent";
  o.cluster.local.octet_binary = octet_binary.empty() ? BinDir() + "/octet" : octet_binary;
  o.cluster.local.state_dir = dir.path().toStdString() + "/cluster-state";
  o.cluster.local.stop_grace_ms = 1000;
  o.cluster.session.telemetry_interval_ms = 100;
  o.cluster.session.retry_interval_ms = 200;
  o.cluster.session.refresh_interval_ms = 300;
  o.cluster.config_dir = dir.path().toStdString() + "/config";
  ui::ConnectionSpec spec;
  spec.kind = ui::ConnectionSpec::Kind::kLocal;
  spec.local_nodes = nodes;
  spec.local_cabling = cabling;
  spec.local_memory_bytes = 8ull << 30;
  spec.local_model_roots = model_roots;
  o.connection = spec;
  return o;
}

// Waits (processing events) until the window's latest snapshot satisfies `pred`.
template <typename Pred>
bool WaitForSnapshot(ui::MainWindow& w, Pred pred, int timeout_ms = 30'000) {
  return QTest::qWaitFor([&] { return pred(*w.controller()->snapshot()); }, timeout_ms);
}

// The Launch panel's memory plan's "Weights: SIZE in memory" (SIZE; "" without one).
inline QString WeightsInPlan(const QString& plan) {
  const int at = plan.indexOf(QStringLiteral("Weights: "));
  const int end = plan.indexOf(QStringLiteral(" in memory"), at);
  return at < 0 || end < 0 ? QString() : plan.mid(at + 9, end - at - 9);
}

inline bool AllNodesUp(const app::ClusterSnapshot& s) {
  if (s.nodes.empty() || s.cabling.summary.empty()) return false;
  for (const auto& n : s.nodes) {
    if (n.state != app::NodeState::kUp || !n.has_telemetry || !n.has_links) return false;
  }
  return true;
}

// A small random Qwen3-shaped checkpoint carrying the real Qwen3 tokenizer
// (fixtures/tokenizers/qwen3), so that `octet serve` speaks text. Tests using
// it link octet::engine and require the fixtures.
inline Status WriteChatModel(const std::string& dir) {
  engine::RandomModelShape s;
  s.architecture = "Qwen3ForCausalLM";
  s.vocab_size = 151936;  // the tokenizer's ids
  s.hidden_size = 64;
  s.intermediate_size = 128;
  s.num_layers = 2;
  s.num_heads = 4;
  s.num_kv_heads = 2;
  s.head_dim = 16;
  s.max_position_embeddings = 2048;
  OCTET_RETURN_IF_ERROR(engine::WriteRandomCheckpoint(s, dir));
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
    std::error_code ec;
    std::filesystem::copy_file(FixturesDir() + "/tokenizers/qwen3/" + f, dir + "/" + f,
                               std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) return InternalError(std::string("copying ") + f + ": " + ec.message());
  }
  return Status::Ok();
}

}  // namespace octet::test
