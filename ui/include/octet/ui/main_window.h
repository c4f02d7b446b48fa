// The workbench's main window: a navigation column (Cluster, Launch,
// Dashboard, Chat, Routing, Benchmarks, Deployments, Models) beside the panels, a status bar with
// the connection state, menus with keyboard shortcuts, and settings (window
// geometry, last panel, the cluster connection) kept with QSettings.
//
// At start the window shows at once; the cluster (local embedded cluster or a
// saved profile, see connection.h) is opened in the background by the
// ClusterController and the panels fill in as snapshots arrive.
#pragma once

#include <QMainWindow>
#include <optional>

#include "octet/ui/cluster_controller.h"
#include "octet/ui/connection.h"

class QLabel;
class QListWidget;
class QStackedWidget;

namespace octet::ui {

class InstanceManager;

struct WorkbenchOptions {
  ClusterController::Options cluster;
  bool auto_connect = true;                  // open a cluster at start
  std::optional<ConnectionSpec> connection;  // instead of the remembered/start-up choice
  std::string source_dir;                    // where resources/ is ("" : beside the binary)
};

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  enum class Panel {
    kCluster = 0,
    kLaunch,
    kDashboard,
    kChat,
    kRouting,
    kBenchmarks,
    kDeployments,
    kModels
  };
  static constexpr int kPanelCount = 8;

  explicit MainWindow(WorkbenchOptions options = {}, QWidget* parent = nullptr);
  ~MainWindow() override;

  ClusterController* controller() const { return controller_; }
  InstanceManager* instances() const { return instances_; }
  void showPanel(Panel panel);
  Panel currentPanel() const;
  QWidget* panel(Panel panel) const;
  static QString panelName(Panel panel);

  // Opens a connection and remembers it in the settings.
  void connectTo(const ConnectionSpec& spec);

 protected:
  void closeEvent(QCloseEvent* event) override;
  void changeEvent(QEvent* event) override;

 private:
  void buildMenus();
  void buildStatusBar();
  void onPhase(ClusterController::Phase phase, const QString& text);
  void onSnapshot(const SnapshotPtr& snapshot);
  void updateJobsText(const SnapshotPtr& snapshot);
  void openConnectDialog();
  void openAddNodeDialog();
  void showShortcuts();
  void showAbout();
  void restoreSettings();

  WorkbenchOptions options_;
  ClusterController* controller_;
  InstanceManager* instances_;
  QListWidget* nav_;
  QStackedWidget* stack_;
  QLabel* status_dot_;
  QLabel* status_text_;
  QLabel* jobs_text_;
};

}  // namespace octet::ui
