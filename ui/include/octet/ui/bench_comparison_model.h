// The Benchmarks panel's comparison of stored runs as one table model, fed by
// app's value types (app::BenchRun with its results), shared by the
// comparison table and both charts:
//
//   row      one per test any compared run has, ordered by (prompt, generation,
//            depth, concurrency): the tests of one (pp, tg, depth) shape are
//            adjacent rows, by concurrency (shapes() gives their blocks)
//   column   0 test name, 1 concurrency, then one value column per run (the
//            chosen metric's mean; empty where the run lacks the test or the
//            metric), then one delta column per run after the first: percent
//            against the first run (the baseline)
//
// The bar chart maps the value columns (QVBarModelMapper: one set per run);
// the line chart maps each run's value column over each shape's rows against
// the concurrency column (XYColumnMapping). Values follow the model through
// dataChanged (another metric); a run added or removed resets the model, and
// the panel maps the new columns. GUI thread only.
#pragma once

#include <QAbstractTableModel>
#include <QColor>
#include <QObject>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "octet/app/bench_store.h"

class QXYSeries;

namespace octet::ui {

class BenchComparisonModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  struct Metric {
    const char* key;    // the app::BenchResult field: "tg_throughput", ...
    const char* label;  // what a person reads: "decode tok/s (all requests)"
    bool higher_is_better;
  };
  // The metrics offered for comparison, the default (decode throughput) first.
  static const std::vector<Metric>& Metrics();
  // The metric `key` of a result; nullptr for a key app::BenchResult lacks.
  static const app::MetricStats* MetricOf(const app::BenchResult& r, const std::string& key);
  // "#12 label" (the run's id and label).
  static QString RunName(const app::BenchRun& run);

  // Rows [first_row, first_row + row_count) hold the tests of one shape.
  struct Shape {
    int64_t pp = 0, tg = 0, depth = 0;
    int first_row = 0, row_count = 0;
  };

  static constexpr int kTestColumn = 0;
  static constexpr int kConcurrencyColumn = 1;
  static constexpr int kFirstRunColumn = 2;

  explicit BenchComparisonModel(QObject* parent = nullptr);

  // The runs compared, the first the baseline (each with its results).
  void setRuns(std::vector<app::BenchRun> runs);
  // Appended as the last run; a run already compared (same id) is replaced.
  void addRun(const app::BenchRun& run);
  // False when no compared run has this id.
  bool removeRun(int64_t id);
  // One of Metrics()' keys; the values and deltas change, not the shape.
  void setMetric(const std::string& key);
  const std::string& metric() const { return metric_; }
  const Metric& metricInfo() const;
  // Delta cells are drawn in these (a change of 1% or more).
  void setDeltaColors(const QColor& better, const QColor& worse);

  const std::vector<app::BenchRun>& runs() const { return runs_; }
  const std::vector<Shape>& shapes() const { return shapes_; }
  int runColumn(int run) const { return kFirstRunColumn + run; }
  int deltaColumn(int run) const;  // run >= 1
  // The metric of run `run` at row `row`; nullopt where it has none.
  std::optional<double> value(int row, int run) const;
  double maxValue() const;  // 0 when there is no value
  int64_t concurrency(int row) const;
  QString testName(int row) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;

 private:
  using TestKey = std::tuple<int64_t, int64_t, int64_t, int64_t>;  // pp, tg, depth, concurrency
  // Recomputes tests_, names_ and shapes_ from runs_ (inside a reset).
  void rebuildRows();
  std::optional<double> deltaPercent(int row, int run) const;

  std::vector<app::BenchRun> runs_;
  std::vector<TestKey> tests_;
  std::vector<QString> names_;
  std::vector<Shape> shapes_;
  std::string metric_;
  QColor better_, worse_;
};

// Keeps a line or scatter series equal to the points (x, y) of the rows
// [first_row, first_row + row_count) of a model's two columns, as
// QVXYModelMapper does, except that a row whose y cell is empty is left out
// (QVXYModelMapper would draw it at 0: a run without that test is no point).
// Follows dataChanged; a structural change of the model is the owner's to map
// anew. Owned by (and deleted with) the series.
class XYColumnMapping : public QObject {
  Q_OBJECT
 public:
  XYColumnMapping(QAbstractItemModel* model, QXYSeries* series, int x_column, int y_column,
                  int first_row, int row_count);
  // The number of points mapped now.
  int refresh();

 private:
  QAbstractItemModel* model_;
  QXYSeries* series_;
  int x_column_, y_column_, first_row_, row_count_;
};

}  // namespace octet::ui
