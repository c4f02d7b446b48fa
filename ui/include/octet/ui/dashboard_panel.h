// The live dashboard: headline figures (decode and prefill tok/s, running
// requests, jobs, memory) and Qt Charts of the recent past — decode and
// prefill tok/s per job, concurrency, all-reduce share, memory per node, and
// training loss and tok/s — fed from the workers' telemetry figures. A
// training run started on this machine from the Launch panel (given the
// InstanceManager) gets its own curves against the optimizer step: train and
// validation loss, and train tok/s, from its "@octet-figures" lines (parsed
// on the process's output reader thread, in app::LocalInstance). An inference
// instance started on this machine has no agent to report it: its own
// `octet serve --figures` lines (InstanceManager::instanceFigures) put it on
// the tok/s and concurrency charts and in the headline figures, under its name.
//
// History is kept all the time; the charts are only touched while the panel
// is visible (one replace() per series and sample), so telemetry costs the
// GUI thread little when a person looks elsewhere. When the panel is shown,
// its charts appear one per event-loop turn so the first draw does not hold
// the GUI thread for all six at once.
#pragma once

#include <QHash>
#include <QTimer>
#include <QWidget>
#include <functional>

#include "octet/ui/cluster_controller.h"
#include "octet/ui/telemetry_history.h"

QT_BEGIN_NAMESPACE
class QChart;
class QComboBox;
class QChartView;
class QLabel;
class QLineSeries;
class QValueAxis;
class QXYSeries;
QT_END_NAMESPACE

namespace octet::ui {

class PanelHeader;
class InstanceManager;

// A chart with a time axis and one line series per key.
class TimeChart : public QWidget {
  Q_OBJECT
 public:
  TimeChart(const QString& title, const QString& y_title, QWidget* parent = nullptr);
  QChart* chart() const { return chart_; }
  QChartView* view() const { return view_; }
  // Shows `points` under `key` (created on first use, labelled `name`).
  void setSeries(const QString& key, const QString& name, const QColor& color,
                 const QVector<QPointF>& points, bool dashed = false, bool right_axis = false);
  // Removes series whose keys are not in `keep`.
  void retain(const QSet<QString>& keep);
  void setTimeRange(double now, double window);
  void setRightAxisTitle(const QString& title);
  void setXAxisTitle(const QString& title);
  // The points of series `key` (empty when there is none).
  QList<QPointF> points(const QString& key) const;
  int seriesCount() const { return static_cast<int>(series_.size()); }
  void applyPalette();

 private:
  QChart* chart_;
  QChartView* view_;
  QValueAxis* x_;
  QValueAxis* y_;
  QValueAxis* y_right_ = nullptr;
  QHash<QString, QLineSeries*> series_;
  QHash<QString, bool> on_right_;
};

class DashboardPanel : public QWidget {
  Q_OBJECT
 public:
  enum class Chart { kDecode, kPrefill, kConcurrency, kAllReduce, kMemory, kTraining };
  explicit DashboardPanel(ClusterController* controller, QWidget* parent = nullptr);

  const TelemetryHistory& history() const { return history_; }
  TimeChart* chart(Chart which) const;
  // Feeds a snapshot directly (the controller's signal does the same).
  void addSnapshot(const app::ClusterSnapshot& snapshot);
  // Follows the training runs of `instances` (the newest one is shown).
  void setInstanceManager(InstanceManager* instances);
  // Curves of the shown local training run against the step: series "train"
  // and "val" (loss), "tps" (train tok/s).
  TimeChart* trainingRunLossChart() const { return run_loss_; }
  TimeChart* trainingRunTpsChart() const { return run_tps_; }
  int shownTrainingRun() const { return shown_run_; }

 protected:
  void showEvent(QShowEvent* event) override;
  void hideEvent(QHideEvent* event) override;
  void changeEvent(QEvent* event) override;
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  void refresh();
  void revealNextChart();
  void updateKpis(const app::ClusterSnapshot& snapshot);
  void refreshRunList();
  void refreshTrainingRun();

  ClusterController* controller_;
  PanelHeader* header_;
  TelemetryHistory history_;
  std::vector<TimeChart*> charts_;
  QLabel* kpi_decode_;
  QLabel* kpi_prefill_;
  QLabel* kpi_requests_;
  QLabel* kpi_jobs_;
  QLabel* kpi_memory_;
  QLabel* kpi_acceptance_;  // draft tokens kept / proposed, over speculating instances
  QLabel* empty_hint_;
  bool dirty_ = false;
  InstanceManager* instances_ = nullptr;
  QWidget* run_box_ = nullptr;
  QComboBox* run_choice_ = nullptr;
  QLabel* run_figures_ = nullptr;
  TimeChart* run_loss_ = nullptr;
  TimeChart* run_tps_ = nullptr;
  int shown_run_ = -1;
  int drawn_run_ = -1;  // the run whose points the charts hold
  bool run_dirty_ = false;
  int revealed_ = 0;             // charts_[0, revealed_) are shown
  bool awaiting_paint_ = false;  // the last revealed chart has not been painted yet
  QTimer reveal_fallback_;
};

}  // namespace octet::ui
