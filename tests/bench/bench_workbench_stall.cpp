// The workbench's UI thread under live telemetry: a window on a local embedded
// cluster of N simulated nodes (default 8) whose agents send telemetry at 10 Hz,
// the Dashboard (charts) and Cluster (cabling, memory bars) panels shown in
// turn, while a 5 ms timer on the UI thread records how late each tick is.
// A late tick is time the event loop could not answer input: the stall.
// Prints the longest stall, the 99th percentile, how many exceeded 16 ms, the
// snapshots received, and one JSON line. Also the time to the first paint.
//
//   bench_workbench_stall [--nodes 8] [--seconds 20] [--switch-panels 1]
//                         [--panel dashboard|cluster]
// --switch-panels 0 keeps one panel shown (telemetry-driven redraws only): the
// Dashboard, or the one --panel names.
// Runs on the offscreen platform unless QT_QPA_PLATFORM says otherwise. The
// agents share this machine's cores with the window: on a loaded machine the
// stall includes the OS scheduling the UI thread late, so the UI thread's own
// CPU time between ticks is printed too (the part that is this program's work).
// --trace 1 also times every event delivery on the UI thread and prints, for
// each tick more than 8 ms late or with more than 6 ms of UI-thread CPU in its
// gap, the deliveries over 1 ms that ended there (wall and CPU), then those
// deliveries summed by kind.
#include <time.h>

#include <QApplication>
#include <QElapsedTimer>
#include <QEvent>
#include <QMetaEnum>
#include <QTemporaryDir>
#include <QTimer>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <vector>

#include "octet/ui/main_window.h"
#include "octet_test.h"

namespace {

double ThreadCpuMs() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

// With --trace: times every event delivery on the UI thread (wall and the UI
// thread's own CPU time), so a late tick can be attributed to the event that
// held the loop, and CPU work told apart from the OS running something else.
struct TracedEvent {
  qint64 end_ns;
  double wall_ms;
  double cpu_ms;
  int depth;
  QString what;
};

class TracingApplication : public QApplication {
 public:
  using QApplication::QApplication;
  bool tracing = false;
  QElapsedTimer* clock = nullptr;
  std::vector<TracedEvent> events;  // deliveries over 1 ms

  bool notify(QObject* receiver, QEvent* event) override {
    if (!tracing || !clock) return QApplication::notify(receiver, event);
    const qint64 t0 = clock->nsecsElapsed();
    const double c0 = ThreadCpuMs();
    const int type = event->type();
    // Named before delivery: a DeferredDelete destroys the receiver.
    const char* class_name = receiver->metaObject()->className();
    const QString object_name = receiver->objectName();
    ++depth_;
    const bool r = QApplication::notify(receiver, event);
    --depth_;
    const qint64 t1 = clock->nsecsElapsed();
    const double wall = (t1 - t0) / 1e6;
    if (wall > 1.0) {
      const char* type_name =
          QEvent::staticMetaObject.enumerator(QEvent::staticMetaObject.indexOfEnumerator("Type"))
              .valueToKey(type);
      events.push_back({t1, wall, ThreadCpuMs() - c0, depth_,
                        QStringLiteral("%1 to %2 '%3'")
                            .arg(type_name ? type_name : "?")
                            .arg(class_name)
                            .arg(object_name)});
    }
    return r;
  }

 private:
  int depth_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  int nodes = 8, seconds = 20, switch_panels = 1, trace = 0;
  bool cluster_panel = false;  // the panel shown when not switching
  for (int i = 1; i < argc; i += 2) {
    const bool has_value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--nodes") && has_value) {
      nodes = std::clamp(std::atoi(argv[i + 1]), 1, 8);
    } else if (!std::strcmp(argv[i], "--seconds") && has_value) {
      seconds = std::max(3, std::atoi(argv[i + 1]));
    } else if (!std::strcmp(argv[i], "--switch-panels") && has_value) {
      switch_panels = std::atoi(argv[i + 1]);
    } else if (!std::strcmp(argv[i], "--panel") && has_value &&
               (!std::strcmp(argv[i + 1], "dashboard") || !std::strcmp(argv[i + 1], "cluster"))) {
      cluster_panel = !std::strcmp(argv[i + 1], "cluster");
    } else if (!std::strcmp(argv[i], "--trace") && has_value) {
      trace = std::atoi(argv[i + 1]);
    } else {
      const bool help = !std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h");
      std::fprintf(help ? stdout : stderr,
                   "usage: bench_workbench_stall [--nodes 1-8] [--seconds S] [--switch-panels 0|1] "
                   "[--panel dashboard|cluster] [--trace 0|1]\n");
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
  TracingApplication app(argc, argv);
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
  std::vector<qint64> tick_ns;
  QElapsedTimer clock;
  clock.start();
  app.clock = &clock;
  app.tracing = trace != 0;
  qint64 last = clock.nsecsElapsed();
  const qint64 start_ns = last;
  // The UI thread's own CPU time between ticks: the part of a stall that is
  // this process's work, not the OS running other processes first.
  std::vector<double> busy_ms;
  double last_cpu = ThreadCpuMs();
  QTimer tick;
  tick.setTimerType(Qt::PreciseTimer);
  tick.setInterval(5);
  QObject::connect(&tick, &QTimer::timeout, [&] {
    const qint64 now = clock.nsecsElapsed();
    late_ms.push_back(std::max(0.0, (now - last) / 1e6 - 5.0));
    tick_ns.push_back(now);
    const double cpu = ThreadCpuMs();
    busy_ms.push_back(cpu - last_cpu);
    last_cpu = cpu;
    last = now;
  });
  QTimer flip;  // Dashboard and Cluster in turn, each drawn while updating
  flip.setInterval(2000);
  int panel = 0;
  QObject::connect(&flip, &QTimer::timeout, [&] {
    w.showPanel(panel++ % 2 ? octet::ui::MainWindow::Panel::kCluster
                            : octet::ui::MainWindow::Panel::kDashboard);
  });
  w.showPanel(cluster_panel && !switch_panels ? octet::ui::MainWindow::Panel::kCluster
                                              : octet::ui::MainWindow::Panel::kDashboard);
  QTimer::singleShot(seconds * 1000, &app, &QCoreApplication::quit);
  tick.start();
  if (switch_panels) flip.start();
  app.exec();

  app.tracing = false;
  if (trace) {
    // Each tick more than 8 ms late, or whose gap held more than 6 ms of the UI
    // thread's own CPU time, with the deliveries that ended in its gap.
    for (size_t i = 0; i < late_ms.size(); ++i) {
      if (late_ms[i] <= 8 && busy_ms[i] <= 6) continue;
      const qint64 from = i ? tick_ns[i - 1] : start_ns;
      std::printf("%s tick at %.3f s: %.1f ms late (%.1f ms of UI-thread cpu)\n",
                  late_ms[i] > 8 ? "late" : "busy", (tick_ns[i] - start_ns) / 1e9, late_ms[i],
                  busy_ms[i]);
      for (const TracedEvent& e : app.events) {
        if (e.end_ns <= from || e.end_ns > tick_ns[i]) continue;
        std::printf("  %*s%.1f ms wall, %.1f ms cpu: %s\n", 2 * e.depth, "", e.wall_ms, e.cpu_ms,
                    qPrintable(e.what));
      }
    }
  }
  if (trace) {
    // Where the UI thread's time went: deliveries over 1 ms by kind, top level only.
    std::map<QString, std::pair<int, double>> by_kind;
    for (const TracedEvent& e : app.events) {
      if (e.depth != 0) continue;
      auto& k = by_kind[e.what];
      ++k.first;
      k.second += e.cpu_ms;
    }
    for (const auto& [what, k] : by_kind) {
      std::printf("over 1 ms: %4d x %s, %.1f ms cpu in all\n", k.first, qPrintable(what), k.second);
    }
  }
  std::vector<double> sorted = late_ms;
  std::sort(sorted.begin(), sorted.end());
  const double max = sorted.empty() ? 0 : sorted.back();
  const double p99 = sorted.empty() ? 0 : sorted[sorted.size() * 99 / 100];
  const long over16 = std::count_if(sorted.begin(), sorted.end(), [](double v) { return v > 16; });
  std::vector<double> busy_sorted = busy_ms;
  std::sort(busy_sorted.begin(), busy_sorted.end());
  const double busy_max = busy_sorted.empty() ? 0 : busy_sorted.back();
  const long busy_over16 =
      std::count_if(busy_sorted.begin(), busy_sorted.end(), [](double v) { return v > 16; });
  // The UI thread's whole CPU time over the run, as a share of one core.
  double busy_total = 0;
  for (double b : busy_ms) busy_total += b;
  const double busy_share = 100.0 * busy_total / (seconds * 1000.0);
  std::printf(
      "workbench UI stall (%s): %d nodes at 10 Hz for %d s: %zu ticks, %d snapshots; "
      "max stall %.1f ms, p99 %.1f ms, %ld ticks > 16 ms; longest UI-thread cpu between "
      "ticks %.1f ms, %ld > 16 ms; UI thread busy %.1f%% of a core; window shown %lld ms after "
      "start, all nodes up after %lld ms "
      "more\n",
      switch_panels   ? "Dashboard and Cluster switched every 2 s"
      : cluster_panel ? "Cluster shown"
                      : "Dashboard shown",
      nodes, seconds, late_ms.size(), snapshots, max, p99, over16, busy_max, busy_over16,
      busy_share, static_cast<long long>(shown_ms), static_cast<long long>(up_ms));
  std::printf(
      "{\"bench\":\"workbench_stall\",\"switch_panels\":%d,\"panel\":\"%s\",\"nodes\":%d,"
      "\"seconds\":%d,\"ticks\":%"
      "zu,"
      "\"snapshots\":%d,\"max_stall_ms\":%.2f,\"p99_stall_ms\":%.2f,\"over_16ms\":%ld,"
      "\"max_busy_ms\":%.2f,\"busy_over_16ms\":%ld,\"busy_percent\":%.2f,\"shown_ms\":%lld}\n",
      switch_panels,
      switch_panels   ? "both"
      : cluster_panel ? "cluster"
                      : "dashboard",
      nodes, seconds, late_ms.size(), snapshots, max, p99, over16, busy_max, busy_over16,
      busy_share, static_cast<long long>(shown_ms));
  return 0;
}
