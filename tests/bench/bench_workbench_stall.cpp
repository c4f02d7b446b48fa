// The workbench's UI thread under live telemetry: a window on a local embedded
// cluster of N simulated nodes (default 8) whose agents send telemetry at 10 Hz,
// the Dashboard (charts) and Cluster (cabling, memory bars) panels shown in
// turn, while a 5 ms timer on the UI thread records how late each tick is.
// A late tick is time the event loop could not answer input: the stall.
// Prints the longest stall, the 99th percentile, how many exceeded 16 ms, the
// snapshots received, and one JSON line. Also the time to the first paint.
//
//   bench_workbench_stall [--nodes 8] [--seconds 20] [--switch-panels 1]
// --switch-panels 0 keeps the Dashboard shown (telemetry-driven redraws only).
// Runs on the offscreen platform unless QT_QPA_PLATFORM says otherwise. The
// agents share this machine's cores with the window: on a loaded machine the
// figure includes the OS scheduling the UI thread late.
#include <QApplication>
#include <QElapsedTimer>
#include <QTemporaryDir>
#include <QTimer>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "octet/ui/main_window.h"
#include "octet_test.h"

int main(int argc, char** argv) {
  int nodes = 8, seconds = 20, switch_panels = 1;
  for (int i = 1; i < argc; i += 2) {
    const bool has_value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--nodes") && has_value) {
      nodes = std::clamp(std::atoi(argv[i + 1]), 1, 8);
    } else if (!std::strcmp(argv[i], "--seconds") && has_value) {
      seconds = std::max(3, std::atoi(argv[i + 1]));
    } else if (!std::strcmp(argv[i], "--switch-panels") && has_value) {
      switch_panels = std::atoi(argv[i + 1]);
    } else {
      const bool help = !std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h");
      std::fprintf(
          help ? stdout : stderr,
          "usage: bench_workbench_stall [--nodes 1-8] [--seconds S] [--switch-panels 0|1]\n");
      return help ? 0 : 2;
    }
  }
  if (!qEnvironmentVariableIsSet("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  QTemporaryDir dir;
  const QByteArray root = dir.path().toUtf8();
  qputenv("XDG_CONFIG_HOME", root + "/xdg");
  qputenv("OCTET_CONFIG_DIR", root + "/config");
  QElapsedTimer since_start;
  since_start.start();
  QApplication app(argc, argv);
  QCoreApplication::setOrganizationName(QStringLiteral("OctetBench"));

  const std::string bin =
      octet::test::BinDir().empty() ? std::string(OCTET_BIN_DIR_DEFAULT) : octet::test::BinDir();
  octet::ui::WorkbenchOptions o;
  o.cluster.local.agent_binary = bin + "/octet-agent";
  o.cluster.local.octet_binary = bin + "/octet";
  o.cluster.local.state_dir = dir.path().toStdString() + "/state";
  o.cluster.local.stop_grace_ms = 1000;
  o.cluster.session.telemetry_interval_ms = 100;  // 10 Hz
  o.cluster.config_dir = dir.path().toStdString() + "/config";
  octet::ui::ConnectionSpec spec;
  spec.kind = octet::ui::ConnectionSpec::Kind::kLocal;
  spec.local_nodes = nodes;
  spec.local_cabling = QStringLiteral("switch");
  o.connection = spec;
  octet::ui::MainWindow w(o);
  w.resize(1440, 900);
  w.show();
  QApplication::processEvents();
  const qint64 shown_ms = since_start.elapsed();

  // Wait for every node up with telemetry, then measure.
  QElapsedTimer wait;
  wait.start();
  while (wait.elapsed() < 60'000) {
    QApplication::processEvents(QEventLoop::AllEvents, 50);
    const auto snap = w.controller()->snapshot();
    int up = 0;
    for (const auto& n : snap->nodes)
      up += n.state == octet::app::NodeState::kUp && n.has_telemetry;
    if (up == nodes) break;
  }
  const qint64 up_ms = wait.elapsed();

  int snapshots = 0;
  QObject::connect(w.controller(), &octet::ui::ClusterController::snapshotChanged, &w,
                   [&snapshots] { ++snapshots; });
  std::vector<double> late_ms;
  QElapsedTimer clock;
  clock.start();
  qint64 last = clock.nsecsElapsed();
  QTimer tick;
  tick.setTimerType(Qt::PreciseTimer);
  tick.setInterval(5);
  QObject::connect(&tick, &QTimer::timeout, [&] {
    const qint64 now = clock.nsecsElapsed();
    late_ms.push_back(std::max(0.0, (now - last) / 1e6 - 5.0));
    last = now;
  });
  QTimer flip;  // Dashboard and Cluster in turn, each drawn while updating
  flip.setInterval(2000);
  int panel = 0;
  QObject::connect(&flip, &QTimer::timeout, [&] {
    w.showPanel(panel++ % 2 ? octet::ui::MainWindow::Panel::kCluster
                            : octet::ui::MainWindow::Panel::kDashboard);
  });
  w.showPanel(octet::ui::MainWindow::Panel::kDashboard);
  QTimer::singleShot(seconds * 1000, &app, &QCoreApplication::quit);
  tick.start();
  if (switch_panels) flip.start();
  app.exec();

  std::vector<double> sorted = late_ms;
  std::sort(sorted.begin(), sorted.end());
  const double max = sorted.empty() ? 0 : sorted.back();
  const double p99 = sorted.empty() ? 0 : sorted[sorted.size() * 99 / 100];
  const long over16 = std::count_if(sorted.begin(), sorted.end(), [](double v) { return v > 16; });
  std::printf(
      "workbench UI stall (%s): %d nodes at 10 Hz for %d s: %zu ticks, %d snapshots; "
      "max stall %.1f ms, p99 %.1f ms, %ld ticks > 16 ms; window shown %lld ms after "
      "start, all nodes up after %lld ms more\n",
      switch_panels ? "Dashboard and Cluster switched every 2 s" : "Dashboard shown", nodes,
      seconds, late_ms.size(), snapshots, max, p99, over16, static_cast<long long>(shown_ms),
      static_cast<long long>(up_ms));
  std::printf(
      "{\"bench\":\"workbench_stall\",\"switch_panels\":%d,\"nodes\":%d,\"seconds\":%d,\"ticks\":%"
      "zu,"
      "\"snapshots\":%d,\"max_stall_ms\":%.2f,\"p99_stall_ms\":%.2f,\"over_16ms\":%ld,"
      "\"shown_ms\":%lld}\n",
      switch_panels, nodes, seconds, late_ms.size(), snapshots, max, p99, over16,
      static_cast<long long>(shown_ms));
  return 0;
}
