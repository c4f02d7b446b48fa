#include "octet/ui/main_window.h"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QHBoxLayout>
#include <QKeySequence>
#include <QLabel>
#include <QListWidget>
#include <QMenuBar>
#include <QMessageBox>
#include <QPushButton>
#include <QScreen>
#include <QSettings>
#include <QStackedWidget>
#include <QStatusBar>
#include <QTimer>
#include <QVBoxLayout>

#include "octet/app/local_cluster.h"
#include "octet/base/build_info.h"
#include "octet/ui/cluster_panel.h"
#include "octet/ui/connect_dialog.h"
#include "octet/ui/bench_panel.h"
#include "octet/ui/chat_panel.h"
#include "octet/ui/dashboard_panel.h"
#include "octet/ui/deployment_panel.h"
#include "octet/ui/instance_manager.h"
#include "octet/ui/launch_panel.h"
#include "octet/ui/models_panel.h"
#include "octet/ui/resources.h"
#include "octet/ui/routing_panel.h"
#include "octet/ui/theme.h"
#include "octet/ui/widgets.h"

namespace octet::ui {

namespace {

Glyph PanelGlyph(MainWindow::Panel p) {
  switch (p) {
    case MainWindow::Panel::kCluster:
      return Glyph::kCluster;
    case MainWindow::Panel::kLaunch:
      return Glyph::kLaunch;
    case MainWindow::Panel::kDashboard:
      return Glyph::kDashboard;
    case MainWindow::Panel::kChat:
      return Glyph::kChat;
    case MainWindow::Panel::kRouting:
      return Glyph::kRouting;
    case MainWindow::Panel::kBenchmarks:
      return Glyph::kBenchmarks;
    case MainWindow::Panel::kDeployments:
      return Glyph::kDeployments;
    case MainWindow::Panel::kModels:
      return Glyph::kModels;
  }
  return Glyph::kCluster;
}

QString NavStyle() {
  return QStringLiteral(
      "QListWidget#navigation { background: transparent; border: none; outline: 0; }"
      "QListWidget#navigation::item { padding: 8px 10px; margin: 1px 8px; border-radius: 6px; }"
      "QListWidget#navigation::item:selected { background: palette(highlight);"
      "  color: palette(highlighted-text); }"
      "QListWidget#navigation::item:hover:!selected { background: palette(midlight); }");
}

}  // namespace

QString MainWindow::panelName(Panel p) {
  switch (p) {
    case Panel::kCluster:
      return tr("Cluster");
    case Panel::kLaunch:
      return tr("Launch");
    case Panel::kDashboard:
      return tr("Dashboard");
    case Panel::kChat:
      return tr("Chat");
    case Panel::kRouting:
      return tr("Routing");
    case Panel::kBenchmarks:
      return tr("Benchmarks");
    case Panel::kDeployments:
      return tr("Deployments");
    case Panel::kModels:
      return tr("Models");
  }
  return {};
}

MainWindow::MainWindow(WorkbenchOptions options, QWidget* parent)
    : QMainWindow(parent), options_(std::move(options)) {
  setWindowTitle(QStringLiteral("Octet Workbench"));
  setObjectName(QStringLiteral("octetMainWindow"));
  if (!options_.source_dir.empty()) {
    SetResourceRoot(QString::fromStdString(options_.source_dir) + QStringLiteral("/resources"));
  }
  if (options_.cluster.local.state_dir.empty()) {
    // Not the CLI's folder: `octet cluster local` may run beside the window.
    options_.cluster.local.state_dir = app::DefaultLocalStateDir("workbench");
  }
  options_.cluster.local.name = "local";
  controller_ = new ClusterController(options_.cluster, this);

  // Navigation column: product name, panels, connection button.
  auto* central = new QWidget(this);
  auto* row = new QHBoxLayout(central);
  row->setContentsMargins(0, 0, 0, 0);
  row->setSpacing(0);
  auto* side = new QFrame(central);
  side->setObjectName(QStringLiteral("sideBar"));
  side->setAutoFillBackground(true);
  side->setBackgroundRole(QPalette::AlternateBase);
  auto* sl = new QVBoxLayout(side);
  sl->setContentsMargins(0, 14, 0, 10);
  auto* brand = new QLabel(QStringLiteral("Octet"), side);
  QFont bf = brand->font();
  bf.setPointSizeF(bf.pointSizeF() * 1.5);
  bf.setBold(true);
  brand->setFont(bf);
  brand->setContentsMargins(20, 0, 0, 0);
  auto* tagline = new QLabel(tr("cluster workbench"), side);
  tagline->setContentsMargins(20, 0, 0, 10);
  tagline->setForegroundRole(QPalette::PlaceholderText);
  sl->addWidget(brand);
  sl->addWidget(tagline);
  nav_ = new QListWidget(side);
  nav_->setObjectName(QStringLiteral("navigation"));
  nav_->setIconSize(QSize(20, 20));
  nav_->setStyleSheet(NavStyle());
  nav_->setFrameShape(QFrame::NoFrame);
  nav_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  QFont nf = nav_->font();
  nf.setPointSizeF(nf.pointSizeF() * 1.08);
  nav_->setFont(nf);
  sl->addWidget(nav_, 1);
  auto* connect_button = new QPushButton(GlyphIcon(Glyph::kConnect), tr("Connect cluster…"), side);
  connect_button->setObjectName(QStringLiteral("sideConnectButton"));
  connect_button->setFlat(true);
  connect(connect_button, &QPushButton::clicked, this, &MainWindow::openConnectDialog);
  auto* cbw = new QHBoxLayout;
  cbw->setContentsMargins(10, 0, 10, 0);
  cbw->addWidget(connect_button);
  sl->addLayout(cbw);
  side->setFixedWidth(196);
  row->addWidget(side);

  stack_ = new QStackedWidget(central);
  stack_->setObjectName(QStringLiteral("panels"));
  row->addWidget(stack_, 1);
  setCentralWidget(central);

  stack_->addWidget(new ClusterPanel(controller_, stack_));
  instances_ = new InstanceManager(this);
  instances_->setOctetBinary(options_.cluster.local.octet_binary);
  stack_->addWidget(new LaunchPanel(controller_, instances_, stack_));
  auto* dashboard = new DashboardPanel(controller_, stack_);
  dashboard->setInstanceManager(instances_);
  stack_->addWidget(dashboard);
  auto* chat = new ChatPanel(instances_, stack_);
  stack_->addWidget(chat);
  stack_->addWidget(new RoutingPanel(instances_, stack_));
  auto* bench = new BenchPanel(instances_, stack_);
  stack_->addWidget(bench);
  stack_->addWidget(new DeploymentPanel(controller_, stack_));
  stack_->addWidget(new ModelsPanel(controller_, stack_));
  // A freshly launched inference instance becomes the chat's endpoint.
  connect(instances_, &InstanceManager::ready, chat, [this, chat, bench](int id, const QString& url) {
    const InstanceInfo* info = instances_->find(id);
    if (info && (info->kind == app::InstanceSpec::Kind::kInference || chat->endpoint().isEmpty()))
      chat->setEndpoint(url);
    if (info && info->kind == app::InstanceSpec::Kind::kInference) bench->setEndpoint(url);
  });
  for (int i = 0; i < kPanelCount; ++i) {
    const auto p = static_cast<Panel>(i);
    auto* item = new QListWidgetItem(GlyphIcon(PanelGlyph(p)), panelName(p), nav_);
    item->setSizeHint(QSize(0, nav_->fontMetrics().height() + 20));
    item->setToolTip(tr("%1 (Ctrl+%2)").arg(panelName(p)).arg(i + 1));
  }
  connect(nav_, &QListWidget::currentRowChanged, stack_, &QStackedWidget::setCurrentIndex);
  nav_->setCurrentRow(0);

  buildMenus();
  buildStatusBar();
  connect(controller_, &ClusterController::phaseChanged, this, &MainWindow::onPhase);
  connect(controller_, &ClusterController::snapshotChanged, this, &MainWindow::onSnapshot);
  connect(instances_, &InstanceManager::changed, this,
          [this] { updateJobsText(controller_->snapshot()); });
  updateJobsText(controller_->snapshot());
  onPhase(controller_->phase(), controller_->phaseText());
  restoreSettings();

  if (options_.auto_connect) {
    ConnectionSpec spec;
    if (options_.connection) {
      spec = *options_.connection;
    } else {
      QSettings settings;
      spec = StartupConnection(settings, options_.cluster.config_dir);
    }
    // After the first paint: the window is usable before any agent answers.
    QTimer::singleShot(0, this, [this, spec] { controller_->connectTo(spec); });
  }
}

MainWindow::~MainWindow() = default;

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu(tr("&Cluster"));
  QAction* connect_action = file->addAction(GlyphIcon(Glyph::kConnect), tr("&Connect cluster…"));
  connect_action->setObjectName(QStringLiteral("actionConnect"));
  connect_action->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_O));
  connect(connect_action, &QAction::triggered, this, &MainWindow::openConnectDialog);
  QAction* add_node = file->addAction(tr("&Add node…"));
  add_node->setObjectName(QStringLiteral("actionAddNode"));
  add_node->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_N));
  connect(add_node, &QAction::triggered, this, &MainWindow::openAddNodeDialog);
  QAction* local = file->addAction(tr("Use the &local cluster"));
  connect(local, &QAction::triggered, this, [this] {
    QSettings settings;
    bool remembered = false;
    ConnectionSpec spec = ConnectionSpec::Load(settings, &remembered);
    spec.kind = ConnectionSpec::Kind::kLocal;
    connectTo(spec);
  });
  QAction* disconnect_action = file->addAction(tr("&Disconnect"));
  connect(disconnect_action, &QAction::triggered, controller_,
          &ClusterController::disconnectCluster);
  file->addSeparator();
  QAction* quit = file->addAction(tr("&Quit"));
  quit->setShortcut(QKeySequence::Quit);
  quit->setMenuRole(QAction::QuitRole);
  connect(quit, &QAction::triggered, this, &QWidget::close);

  QMenu* view = menuBar()->addMenu(tr("&View"));
  for (int i = 0; i < kPanelCount; ++i) {
    const auto p = static_cast<Panel>(i);
    QAction* a = view->addAction(GlyphIcon(PanelGlyph(p)), panelName(p));
    a->setShortcut(QKeySequence(Qt::CTRL | static_cast<Qt::Key>(Qt::Key_1 + i)));
    connect(a, &QAction::triggered, this, [this, p] { showPanel(p); });
  }
  view->addSeparator();
  QAction* full = view->addAction(tr("&Full screen"));
  full->setShortcut(QKeySequence::FullScreen);
  full->setCheckable(true);
  connect(full, &QAction::toggled, this, [this](bool on) {
    if (on) {
      showFullScreen();
    } else {
      showNormal();
    }
  });

  QMenu* help = menuBar()->addMenu(tr("&Help"));
  QAction* keys = help->addAction(tr("&Keyboard shortcuts"));
  keys->setShortcut(QKeySequence::HelpContents);
  connect(keys, &QAction::triggered, this, &MainWindow::showShortcuts);
  QAction* about = help->addAction(tr("&About Octet"));
  about->setMenuRole(QAction::AboutRole);
  connect(about, &QAction::triggered, this, &MainWindow::showAbout);
}

void MainWindow::buildStatusBar() {
  status_dot_ = new QLabel(this);
  status_dot_->setObjectName(QStringLiteral("connectionDot"));
  status_text_ = new QLabel(this);
  status_text_->setObjectName(QStringLiteral("connectionStatus"));
  jobs_text_ = new QLabel(this);
  jobs_text_->setObjectName(QStringLiteral("jobsStatus"));
  auto* info = new QLabel(QString::fromStdString(GetBuildInfo().ToString()), this);
  info->setObjectName(QStringLiteral("buildInfo"));
  info->setForegroundRole(QPalette::PlaceholderText);
  statusBar()->addWidget(status_dot_);
  statusBar()->addWidget(status_text_, 1);
  statusBar()->addPermanentWidget(jobs_text_);
  statusBar()->addPermanentWidget(info);
}

void MainWindow::onPhase(ClusterController::Phase phase, const QString& text) {
  const StatusColors sc = StatusColorsFor(palette());
  QColor c = sc.muted;
  if (phase == ClusterController::Phase::kStarting) c = sc.warning;
  if (phase == ClusterController::Phase::kFailed) c = sc.bad;
  if (phase == ClusterController::Phase::kConnected) {
    c = sc.good;
    for (const auto& n : controller_->snapshot()->nodes) {
      if (n.state != app::NodeState::kUp) c = sc.warning;
    }
  }
  status_dot_->setText(
      QStringLiteral("<span style='color:%1;font-size:large'>●</span>").arg(c.name()));
  status_text_->setText(text);
}

void MainWindow::onSnapshot(const SnapshotPtr& snapshot) {
  updateJobsText(snapshot);
  onPhase(controller_->phase(), controller_->phaseText());
}

// The agents' running jobs, and the processes started on this machine (a
// server, router or training run from the Launch panel), which no agent
// reports; an instance on a cluster's nodes is one of the agents' jobs.
void MainWindow::updateJobsText(const SnapshotPtr& snapshot) {
  QSet<QString> jobs;
  if (snapshot) {
    for (const auto& n : snapshot->nodes) {
      for (const auto& j : n.jobs) {
        if (j.state == "running") jobs.insert(QString::fromStdString(j.spec.job_id));
      }
    }
  }
  int local = 0;
  for (const InstanceInfo& info : instances_->instances()) {
    if (!info.nodes.isEmpty()) continue;
    switch (info.state) {
      case InstanceInfo::State::kStarting:
      case InstanceInfo::State::kReady:
      case InstanceInfo::State::kRunning:
      case InstanceInfo::State::kStopping:
        ++local;
        break;
      default:
        break;
    }
  }
  const int total = static_cast<int>(jobs.size()) + local;
  if (total == 0) {
    jobs_text_->setText(tr("no jobs running"));
  } else if (local == 0) {
    jobs_text_->setText(tr("%n job(s) running", nullptr, total));
  } else if (local == total) {
    jobs_text_->setText(tr("%n job(s) running on this machine", nullptr, total));
  } else {
    jobs_text_->setText(tr("%n job(s) running, %1 on this machine", nullptr, total).arg(local));
  }
}

void MainWindow::showPanel(Panel panel) { nav_->setCurrentRow(static_cast<int>(panel)); }

MainWindow::Panel MainWindow::currentPanel() const {
  return static_cast<Panel>(std::max(0, stack_->currentIndex()));
}

QWidget* MainWindow::panel(Panel panel) const { return stack_->widget(static_cast<int>(panel)); }

void MainWindow::connectTo(const ConnectionSpec& spec) {
  QSettings settings;
  spec.Save(settings);
  controller_->connectTo(spec);
}

void MainWindow::openConnectDialog() {
  QSettings settings;
  bool remembered = false;
  ConnectionSpec current = controller_->phase() == ClusterController::Phase::kIdle
                               ? ConnectionSpec::Load(settings, &remembered)
                               : controller_->connection();
  ConnectDialog dialog(current, options_.cluster.config_dir, this);
  if (dialog.exec() == QDialog::Accepted) connectTo(dialog.result());
}

void MainWindow::openAddNodeDialog() {
  AddNodeDialog dialog(controller_->connection(), options_.cluster.config_dir, this);
  if (dialog.exec() == QDialog::Accepted) connectTo(dialog.result());
}

void MainWindow::showShortcuts() {
  QString rows;
  for (int i = 0; i < kPanelCount; ++i) {
    rows += QStringLiteral("<tr><td><b>Ctrl+%1</b></td><td>%2</td></tr>")
                .arg(i + 1)
                .arg(panelName(static_cast<Panel>(i)));
  }
  rows +=
      tr("<tr><td><b>Ctrl+Shift+O</b></td><td>Connect cluster</td></tr>"
         "<tr><td><b>Ctrl+Shift+N</b></td><td>Add node</td></tr>"
         "<tr><td><b>F5</b></td><td>Refresh the cluster</td></tr>"
         "<tr><td><b>Ctrl+P</b></td><td>Probe links (Cluster)</td></tr>"
         "<tr><td><b>Ctrl+Return</b></td><td>Send (Chat), launch (Launch)</td></tr>"
         "<tr><td><b>Ctrl+Q</b></td><td>Quit</td></tr>");
  QMessageBox::information(this, tr("Keyboard shortcuts"),
                           QStringLiteral("<table cellpadding=3>%1</table>").arg(rows));
}

void MainWindow::showAbout() {
  QMessageBox::about(
      this, tr("About Octet"),
      tr("<h3>Octet Workbench</h3><p>A desk-side cluster workbench for 1–8 DGX Spark nodes: "
         "cabling, memory, live tokens per second, launching tensor-parallel inference, routing "
         "and training, chatting, routing policies and benchmark comparisons.</p><p>%1</p>")
          .arg(QString::fromStdString(GetBuildInfo().ToString()).toHtmlEscaped()));
}

void MainWindow::restoreSettings() {
  QSettings settings;
  if (!restoreGeometry(settings.value(QStringLiteral("window/geometry")).toByteArray())) {
    // First start: most of the screen, never more than it.
    QSize size(1320, 840);
    if (const QScreen* screen = QApplication::primaryScreen()) {
      size = size.boundedTo(screen->availableSize() * 0.92);
    }
    resize(size);
  }
  restoreState(settings.value(QStringLiteral("window/state")).toByteArray());
  const int panel = settings.value(QStringLiteral("window/panel"), 0).toInt();
  if (panel >= 0 && panel < kPanelCount) nav_->setCurrentRow(panel);
}

void MainWindow::closeEvent(QCloseEvent* event) {
  QSettings settings;
  settings.setValue(QStringLiteral("window/geometry"), saveGeometry());
  settings.setValue(QStringLiteral("window/state"), saveState());
  settings.setValue(QStringLiteral("window/panel"), stack_->currentIndex());
  QMainWindow::closeEvent(event);
}

void MainWindow::changeEvent(QEvent* event) {
  if (event->type() == QEvent::PaletteChange) {
    nav_->setStyleSheet(NavStyle());  // palette(...) references resolve when set
    onPhase(controller_->phase(), controller_->phaseText());
  }
  QMainWindow::changeEvent(event);
}

}  // namespace octet::ui
