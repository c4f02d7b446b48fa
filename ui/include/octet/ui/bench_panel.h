// Benchmarks panel: run an `octet bench`-equivalent sweep (prompt sizes,
// generation sizes, concurrency list, repetitions) against a running instance
// with progress; the runs of the SQLite run store (app::BenchRunStore, the
// file `octet bench --db` writes) in a table; select two or more to compare:
// a grouped bar chart of the chosen metric per test, lines of the metric vs
// concurrency (one per run), and a table of the metric per test and run with
// its change against the first (oldest) run; export the comparison as CSV and
// the charts as PNG. The stored runs are a BenchRunsModel; the comparison is
// one BenchComparisonModel that its table shows and both charts map.
//
// The sweep runs on a worker object (BenchSweeper) in a thread the panel owns,
// with its own store connection; reads of the store run on another
// (BenchStoreReader). Results arrive as queued signals. Closing the panel
// cancels a sweep (at its next streamed chunk) and joins both threads.
#pragma once

#include <QWidget>
#include <atomic>
#include <memory>
#include <vector>

#include "octet/app/bench_store.h"

class QChart;
class QChartView;
class QComboBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTableView;
class QThread;

namespace octet::ui {

class BenchComparisonModel;
class BenchRunsModel;
class BenchStoreReader;
class BenchSweeper;
class InstanceManager;

class BenchPanel : public QWidget {
  Q_OBJECT
 public:
  BenchPanel(InstanceManager* instances, QWidget* parent = nullptr);
  ~BenchPanel() override;

  // The run store file (default: <AppDataLocation>/bench-runs.sqlite).
  void setStorePath(const QString& path);
  QString storePath() const { return store_path_; }
  void setEndpoint(const QString& url);
  // The sweep's fields, as typed: "512,2048", "128", "1,2,4".
  void setSweep(const QString& pp, const QString& tg, const QString& concurrency, int runs,
                const QString& label);
  // Selects the runs with these ids in the table and compares them.
  void compareRuns(const QList<qint64>& ids);
  const std::vector<app::BenchRun>& runs() const { return runs_; }
  // Runs being compared (with results), oldest first (the baseline).
  const std::vector<app::BenchRun>& compared() const;
  // What the comparison table and charts show (runs may be added or removed).
  BenchComparisonModel* comparison() const { return comparison_; }
  QChart* barChart() const { return bar_chart_; }
  QChart* lineChart() const { return line_chart_; }
  bool running() const { return running_; }

 signals:
  void runsLoaded(int count);
  void sweepFinished(bool ok, const QString& detail);
  void comparisonShown(int runs);

 public slots:
  void startSweep();
  void cancelSweep();
  void reloadRuns();
  void compareSelected();
  bool exportCsv(const QString& file);
  bool exportPng(const QString& file);

 private:
  void onSweepProgress(quint64 id, int done, const QString& text, bool begun);
  void onSweepFinished(quint64 id, bool ok, const QString& detail, bool store_failed);
  void onRunsLoaded(const std::vector<app::BenchRun>& runs, const QString& error);
  void onCompareLoaded(const std::vector<app::BenchRun>& runs, const QString& error);
  void mapComparison();
  void fitChartsToValues();
  void refreshEndpoints();

  InstanceManager* instances_;
  QComboBox* endpoint_;
  QLineEdit* pp_;
  QLineEdit* tg_;
  QLineEdit* concurrency_;
  QSpinBox* repetitions_;
  QLineEdit* label_;
  QPushButton* run_;
  QPushButton* cancel_;
  QProgressBar* progress_;
  QLabel* progress_text_;
  QLabel* store_label_;
  BenchRunsModel* runs_model_;
  QTableView* table_;
  QComboBox* metric_;
  QPushButton* compare_;
  QChart* bar_chart_;
  QChart* line_chart_;
  QChartView* bar_view_;
  QChartView* line_view_;
  BenchComparisonModel* comparison_;
  QMetaObject::Connection fit_connection_;  // comparison_'s dataChanged -> fitChartsToValues
  QTableView* deltas_;
  QString store_path_;
  std::vector<app::BenchRun> runs_;
  // The running sweep's cancel flag (null when none) and its id.
  std::shared_ptr<std::atomic<bool>> sweep_;
  quint64 sweep_id_ = 0;
  bool running_ = false;
  int load_generation_ = 0;
  // Reads of the store (one at a time) on store_thread_; a sweep on
  // sweep_thread_ opens the store only after the reads queued before it, so
  // two connections never create a new file together. The destructor cancels
  // the sweep, then quits and joins sweep_thread_, then store_thread_.
  QThread* store_thread_;
  QThread* sweep_thread_;
  BenchStoreReader* reader_;  // lives in store_thread_
  BenchSweeper* sweeper_;     // lives in sweep_thread_
};

}  // namespace octet::ui
