// The runs of a benchmark run store as a table model (app::BenchRun as
// BenchRunStore::ListRuns gives them, newest first): the Benchmarks panel's
// "Stored runs" table. Columns: run ("#id label", the endpoint as tooltip),
// when, model, TP, transport, state (coloured: complete good; failed and
// interrupted bad; the error as tooltip), tests. Qt::UserRole of any cell is
// the run id. GUI thread only.
#pragma once

#include <QAbstractTableModel>
#include <QColor>
#include <vector>

#include "octet/app/bench_store.h"

namespace octet::ui {

class BenchRunsModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { kRun, kWhen, kModel, kTp, kTransport, kState, kTests, kColumnCount };

  explicit BenchRunsModel(QObject* parent = nullptr) : QAbstractTableModel(parent) {}

  void setRuns(std::vector<app::BenchRun> runs);
  const std::vector<app::BenchRun>& runs() const { return runs_; }
  // The id of the run at `row`.
  qint64 runId(int row) const;
  // The row of run `id`; -1 when not listed.
  int rowOf(qint64 id) const;
  void setStateColors(const QColor& good, const QColor& bad);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;

 private:
  std::vector<app::BenchRun> runs_;
  QColor good_, bad_;
};

}  // namespace octet::ui
