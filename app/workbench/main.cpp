// `octet-workbench`: the Qt window.
//
// Besides the window itself, a few flags make scripted runs possible (the
// screenshot script under Xvfb, start-up measurements):
//   --local [--nodes N] [--cabling ring|switch] [--model-roots DIRS]
//                        open the local embedded cluster whatever is remembered
//   --panel NAME         start on a panel (cluster, launch, dashboard, chat, routing, benchmarks)
//   --screenshots DIR    once every node is up, save DIR/<panel>.png of each panel and quit
//   --demo-model DIR     with --screenshots: first launch DIR (Launch panel), chat with it,
//                        run two small benchmark sweeps and compare them, so that every
//                        panel shows what it does
//   --screenshot FILE    with --quit-after: save a PNG of the window before quitting
//   --report-startup     print how long the window took to be usable (stderr)
#include <unistd.h>

#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QElapsedTimer>
#include <QIcon>
#include <QTemporaryDir>
#include <QThread>
#include <QTimer>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "octet/base/build_info.h"
#include "octet/base/file_util.h"
#include "octet/ui/bench_panel.h"
#include "octet/ui/chat_panel.h"
#include "octet/ui/instance_manager.h"
#include "octet/ui/launch_panel.h"
#include "octet/ui/main_window.h"
#include "octet/ui/plurals.h"
#include "octet/ui/routing_panel.h"

namespace {

// Milliseconds since this process was exec'd (kernel start time), or -1.
double MsSinceExec() {
  std::ifstream stat("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  unsigned long long start_ticks = 0;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 22) start_ticks = std::stoull(field);
  }
  std::ifstream up("/proc/uptime");
  double uptime_s = 0;
  if (!(up >> uptime_s)) return -1;
  return (uptime_s - static_cast<double>(start_ticks) / sysconf(_SC_CLK_TCK)) * 1000.0;
}

// Reports the first paint of the main window and the first idle turn of the
// event loop after it (the window is then drawn and answering input).
class StartupProbe : public QObject {
 public:
  StartupProbe(QWidget* window, QElapsedTimer* since_main) : window_(window), timer_(since_main) {}
  bool eventFilter(QObject* watched, QEvent* event) override {
    if (!done_ && watched == window_ && event->type() == QEvent::Paint) {
      done_ = true;
      const qint64 painted = timer_->elapsed();
      QTimer::singleShot(0, this, [this, painted] {
        std::fprintf(stderr,
                     "octet-workbench: first paint %lld ms after main, usable (event loop idle) "
                     "%lld ms after main, %.0f ms after exec\n",
                     static_cast<long long>(painted), static_cast<long long>(timer_->elapsed()),
                     MsSinceExec());
      });
    }
    return false;
  }

 private:
  QWidget* window_;
  QElapsedTimer* timer_;
  bool done_ = false;
};

// Processes events until `done` holds or `ms` pass (scripted runs only).
template <typename Pred>
bool RunUntil(Pred done, int ms) {
  QElapsedTimer t;
  t.start();
  while (!done() && t.elapsed() < ms) {
    QApplication::processEvents(QEventLoop::AllEvents, 50);
    QThread::msleep(5);
  }
  return done();
}

// The --demo-model walk through the panels before the screenshots.
void RunDemo(octet::ui::MainWindow& window, const QString& model, const QString& scratch) {
  using octet::ui::MainWindow;
  auto* launch = qobject_cast<octet::ui::LaunchPanel*>(window.panel(MainWindow::Panel::kLaunch));
  auto* chat = qobject_cast<octet::ui::ChatPanel*>(window.panel(MainWindow::Panel::kChat));
  auto* bench = qobject_cast<octet::ui::BenchPanel*>(window.panel(MainWindow::Panel::kBenchmarks));
  auto* routing = qobject_cast<octet::ui::RoutingPanel*>(window.panel(MainWindow::Panel::kRouting));
  bool shown = false;
  QObject::connect(launch, &octet::ui::LaunchPanel::planShown, &window, [&shown] { shown = true; });
  launch->setModelFolder(model);
  if (!RunUntil([&] { return shown; }, 15'000)) {
    std::fprintf(stderr, "octet-workbench: demo: %s was not read\n", qPrintable(model));
    return;
  }
  launch->launchInference();
  QString url;
  RunUntil(
      [&] {
        for (const auto& i : window.instances()->instances()) {
          if (i.state == octet::ui::InstanceInfo::State::kReady) url = i.url;
          if (i.state == octet::ui::InstanceInfo::State::kFailed) return true;
        }
        return !url.isEmpty();
      },
      90'000);
  if (url.isEmpty()) {
    std::fprintf(stderr, "octet-workbench: demo: the instance did not start\n");
    return;
  }
  chat->setConversationDir(scratch + QStringLiteral("/conversations"));
  chat->setEndpoint(url);
  chat->sendMessage(QStringLiteral("Hello! Which model are you, and what can you do?"));
  RunUntil([&] { return !chat->busy(); }, 60'000);
  QObject::connect(bench, &octet::ui::BenchPanel::sweepFinished, &window,
                   [](bool ok, const QString& detail) {
                     std::fprintf(stderr, "octet-workbench: demo sweep %s: %s\n",
                                  ok ? "done" : "failed", qPrintable(detail));
                   });
  bench->setStorePath(scratch + QStringLiteral("/bench-runs.sqlite"));
  bench->setEndpoint(url);
  for (const char* label : {"slots-4 run A", "slots-4 run B"}) {
    bench->setSweep(QStringLiteral("64"), QStringLiteral("16"), QStringLiteral("1,2,4"), 1,
                    QString::fromLatin1(label));
    bench->startSweep();
    RunUntil([&] { return !bench->running(); }, 120'000);
  }
  RunUntil([&] { return bench->runs().size() >= 2; }, 5'000);
  QList<qint64> ids;
  for (const auto& r : bench->runs()) ids << r.id;
  bench->compareRuns(ids);
  RunUntil([&] { return bench->compared().size() >= 2; }, 5'000);
  routing->tryPrompt();
  QApplication::processEvents();
}

// True when Qt can open a window here: a display, or a platform chosen by the user.
bool HaveDisplayOrPlatform() {
  for (const char* var : {"DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"}) {
    const char* v = std::getenv(var);
    if (v && *v) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  QElapsedTimer since_main;
  since_main.start();
  if (!HaveDisplayOrPlatform()) {
    // --help and --version need no window; anything else would make Qt abort
    // with a message about platform plugins, so say what is missing instead.
    bool info_only = false;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      info_only |= a == "--help" || a == "-h" || a == "--help-all" || a == "--version" || a == "-v";
    }
    if (!info_only) {
      std::fprintf(stderr,
                   "octet-workbench: no display (DISPLAY and WAYLAND_DISPLAY are unset). Run it "
                   "from a desktop session, under a virtual display (xvfb-run -a "
                   "octet-workbench), or with QT_QPA_PLATFORM=offscreen for scripted runs.\n");
      return 1;
    }
    qputenv("QT_QPA_PLATFORM", "offscreen");
  }
  QApplication app(argc, argv);
  QApplication::setApplicationName(QStringLiteral("octet-workbench"));
  QApplication::setOrganizationName(QStringLiteral("Octet"));
  QApplication::setApplicationVersion(QString::fromStdString(octet::GetBuildInfo().version));
  QApplication::setDesktopFileName(QStringLiteral("octet-workbench"));
  octet::ui::InstallEnglishPlurals();  // "1 node", "2 nodes" (no translations ship)
  {
    // The icon set of resources/icons, compiled in (the .desktop entry names the
    // same icon installed into the hicolor theme by the octet-workbench package).
    QIcon icon;
    for (int size : {16, 24, 32, 48, 64, 128, 256}) {
      icon.addFile(QStringLiteral(":/octet/icons/octet-workbench-%1.png").arg(size),
                   QSize(size, size));
    }
    QApplication::setWindowIcon(icon);
  }

  QCommandLineParser parser;
  parser.setApplicationDescription(QStringLiteral("Octet workbench: the cluster in one window."));
  parser.addHelpOption();
  parser.addVersionOption();
  QCommandLineOption quit_after(QStringLiteral("quit-after"),
                                QStringLiteral("Quit after MS milliseconds (scripted runs)."),
                                QStringLiteral("MS"));
  QCommandLineOption screenshot(QStringLiteral("screenshot"),
                                QStringLiteral("Save a PNG of the window before quitting."),
                                QStringLiteral("FILE"));
  QCommandLineOption screenshots(
      QStringLiteral("screenshots"),
      QStringLiteral("Once every node is up, save DIR/<panel>.png of each panel and quit."),
      QStringLiteral("DIR"));
  QCommandLineOption local(QStringLiteral("local"),
                           QStringLiteral("Open the local embedded cluster (not the remembered "
                                          "connection)."));
  QCommandLineOption nodes(QStringLiteral("nodes"),
                           QStringLiteral("Nodes of the local cluster (1-8, default 4)."),
                           QStringLiteral("N"));
  QCommandLineOption cabling(
      QStringLiteral("cabling"),
      QStringLiteral("Cabling of the local cluster: switch (default) or ring."),
      QStringLiteral("KIND"));
  QCommandLineOption model_roots(
      QStringLiteral("model-roots"),
      QStringLiteral("Folders local-cluster jobs may load models from (':'-separated)."),
      QStringLiteral("DIRS"));
  QCommandLineOption panel(QStringLiteral("panel"),
                           QStringLiteral("Start on this panel (cluster, launch, dashboard, chat, "
                                          "routing, benchmarks, deployments, models)."),
                           QStringLiteral("NAME"));
  QCommandLineOption telemetry_ms(
      QStringLiteral("telemetry-ms"),
      QStringLiteral("Telemetry interval asked of agents (default 500)."), QStringLiteral("MS"));
  QCommandLineOption report_startup(QStringLiteral("report-startup"),
                                    QStringLiteral("Print how long the window took to be usable."));
  QCommandLineOption demo_model(
      QStringLiteral("demo-model"),
      QStringLiteral("With --screenshots: launch this model folder, chat and benchmark first."),
      QStringLiteral("DIR"));
  QCommandLineOption window_size(QStringLiteral("window-size"),
                                 QStringLiteral("Window size, e.g. 1440x900 (scripted runs)."),
                                 QStringLiteral("WxH"));
  for (const auto* o :
       {&quit_after, &screenshot, &screenshots, &local, &nodes, &cabling, &model_roots, &panel,
        &telemetry_ms, &report_startup, &demo_model, &window_size}) {
    parser.addOption(*o);
  }
  parser.process(app);

  octet::ui::WorkbenchOptions options;
  if (parser.isSet(telemetry_ms)) {
    options.cluster.session.telemetry_interval_ms =
        static_cast<uint32_t>(std::max(50, parser.value(telemetry_ms).toInt()));
  }
  if (parser.isSet(local) || parser.isSet(nodes) || parser.isSet(cabling) ||
      parser.isSet(model_roots)) {
    octet::ui::ConnectionSpec spec;
    spec.kind = octet::ui::ConnectionSpec::Kind::kLocal;
    if (parser.isSet(nodes)) spec.local_nodes = std::clamp(parser.value(nodes).toInt(), 1, 8);
    if (parser.isSet(cabling)) {
      const QString c = parser.value(cabling);
      if (c != QLatin1String("ring") && c != QLatin1String("switch")) {
        std::fprintf(stderr, "octet-workbench: --cabling: ring or switch\n");
        return 2;
      }
      spec.local_cabling = c;
    }
    if (parser.isSet(model_roots)) {
      for (const QString& r : parser.value(model_roots).split(QLatin1Char(':'), Qt::SkipEmptyParts))
        spec.local_model_roots << QDir(r).absolutePath();
    }
    options.connection = spec;
  }

  octet::ui::MainWindow window(options);
  if (parser.isSet(panel)) {
    const QString want = parser.value(panel).toLower();
    bool found = false;
    for (int i = 0; i < octet::ui::MainWindow::kPanelCount; ++i) {
      const auto p = static_cast<octet::ui::MainWindow::Panel>(i);
      if (octet::ui::MainWindow::panelName(p).toLower() == want) {
        window.showPanel(p);
        found = true;
      }
    }
    if (!found) {
      std::fprintf(stderr, "octet-workbench: --panel: unknown panel '%s'\n", qPrintable(want));
      return 2;
    }
  }
  if (parser.isSet(window_size)) {
    const QStringList wh = parser.value(window_size).split(QLatin1Char('x'));
    if (wh.size() != 2 || wh[0].toInt() < 320 || wh[1].toInt() < 240) {
      std::fprintf(stderr, "octet-workbench: --window-size: WxH, e.g. 1440x900\n");
      return 2;
    }
    window.resize(wh[0].toInt(), wh[1].toInt());
  }
  StartupProbe probe(&window, &since_main);
  if (parser.isSet(report_startup)) window.installEventFilter(&probe);
  window.show();

  if (parser.isSet(screenshots)) {
    const QString dir = parser.value(screenshots);
    QDir().mkpath(dir);
    // Once every node is up (or after 30 s), one PNG per panel.
    auto* poll = new QTimer(&window);
    auto* waited = new QElapsedTimer;
    waited->start();
    const QString demo = parser.value(demo_model);
    QObject::connect(poll, &QTimer::timeout, &window, [&window, poll, waited, dir, demo] {
      const auto snap = window.controller()->snapshot();
      bool up = !snap->nodes.empty() && !snap->cabling.summary.empty();
      for (const auto& n : snap->nodes)
        up = up && n.state == octet::app::NodeState::kUp && n.has_telemetry;
      if (!up && waited->elapsed() < 30'000) return;
      poll->stop();
      delete waited;
      QTemporaryDir scratch;
      if (!demo.isEmpty()) RunDemo(window, QDir(demo).absolutePath(), scratch.path());
      for (int i = 0; i < octet::ui::MainWindow::kPanelCount; ++i) {
        const auto p = static_cast<octet::ui::MainWindow::Panel>(i);
        window.showPanel(p);
        RunUntil([] { return false; }, 400);  // let charts and lists settle
        const QString file =
            QDir(dir).filePath(octet::ui::MainWindow::panelName(p).toLower() + ".png");
        if (!window.grab().save(file)) {
          std::fprintf(stderr, "octet-workbench: could not write %s\n", qPrintable(file));
        }
      }
      QApplication::quit();
    });
    poll->start(250);
  }

  if (parser.isSet(quit_after)) {
    const int ms = parser.value(quit_after).toInt();
    const QString shot = parser.value(screenshot);
    QTimer::singleShot(ms, &window, [&window, shot] {
      if (!shot.isEmpty()) window.grab().save(shot);
      QApplication::quit();
    });
  }
  return QApplication::exec();
}
