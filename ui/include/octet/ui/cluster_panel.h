// The Cluster panel: cabling diagram, per-node memory bars, the links table
// with probe results, the problems the cabling analysis found, and the
// selected node's details. Fed by ClusterController snapshots; probes run
// through the controller (never on the GUI thread).
#pragma once

#include <QAbstractTableModel>
#include <QWidget>
#include <cstdint>
#include <map>
#include <string>

#include "octet/ui/cabling_view.h"
#include "octet/ui/cluster_controller.h"

class QListWidget;
class QPushButton;
class QTabWidget;
class QTableView;
class QTextBrowser;

namespace octet::ui {

class MemoryBars;
class PanelHeader;

// The links of the current cabling with their probe results, one row per edge.
class LinksModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { kFrom, kTo, kInterfaces, kSegment, kHeard, kLatency, kThroughput, kColumns };
  using QAbstractTableModel::QAbstractTableModel;
  void set(const app::CablingReport& cabling, const ProbeResults& probes);
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 private:
  app::CablingReport cabling_;
  ProbeResults probes_;
  std::string shown_key_;  // what the cells show, to skip resets that change nothing
};

// The CPU figure the Cluster panel shows for each node: the mean of the node's
// samples over about a second, changed once a second (as top does). At 10 Hz
// telemetry the raw figure changes with every sample: noise to a reader, and a
// repaint of every node card and a new layout of the details at each one. The
// clock is the samples' own (unix_ms), so a repeated sample counts once.
class CpuReadout {
 public:
  static constexpr int64_t kWindowMs = 1000;
  // Returns the figure to show for `node` (0..1) now that `sample` is its latest.
  double Shown(const std::string& node, const app::TelemetrySample& sample);
  void Forget(const std::string& node) { nodes_.erase(node); }

 private:
  struct Node {
    int64_t last_ms = 0;    // the latest sample counted
    int64_t window_ms = 0;  // where the window being summed began
    double sum = 0;
    int count = 0;
    double shown = 0;
  };
  std::map<std::string, Node> nodes_;
};

// HTML describing one node (facts, telemetry, interfaces, jobs) for the details pane.
QString NodeDetailsHtml(const app::NodeView& node, const QPalette& palette);

class ClusterPanel : public QWidget {
  Q_OBJECT
 public:
  explicit ClusterPanel(ClusterController* controller, QWidget* parent = nullptr);

  CablingView* cablingView() const { return view_; }
  MemoryBars* memoryBars() const { return memory_; }
  QString selectedNode() const { return view_->selectedNode(); }
  void selectNode(const QString& name);

 protected:
  void showEvent(QShowEvent* event) override;

 private:
  void onSnapshot(const SnapshotPtr& snapshot);
  void onPhase(ClusterController::Phase phase, const QString& text);
  void onProbed(const ProbeOutcome& outcome);
  void showDetails();
  // The snapshot as shown: the controller's with each CPU figure from cpu_.
  void updateShown(const app::ClusterSnapshot& s);

  ClusterController* controller_;
  PanelHeader* header_;
  CablingView* view_;
  MemoryBars* memory_;
  QTabWidget* tabs_;
  QTableView* links_table_;
  LinksModel* links_;
  QListWidget* problems_;
  QTextBrowser* details_;
  QPushButton* probe_button_;
  ProbeResults probes_;
  std::string details_key_;
  CpuReadout cpu_;
  app::ClusterSnapshot shown_;
  // A snapshot arrived while the panel was hidden: the links table, problems
  // and node details (text layout) catch up when it is shown, not 10 times a
  // second unseen.
  bool stale_ = false;
};

}  // namespace octet::ui
