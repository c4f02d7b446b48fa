#include "octet/ui/bench_runs_model.h"

#include <QDateTime>

#include "octet/ui/bench_comparison_model.h"

namespace octet::ui {

void BenchRunsModel::setRuns(std::vector<app::BenchRun> runs) {
  beginResetModel();
  runs_ = std::move(runs);
  endResetModel();
}

qint64 BenchRunsModel::runId(int row) const {
  return row >= 0 && row < rowCount() ? runs_[static_cast<size_t>(row)].id : 0;
}

int BenchRunsModel::rowOf(qint64 id) const {
  for (int row = 0; row < rowCount(); ++row) {
    if (runs_[static_cast<size_t>(row)].id == id) return row;
  }
  return -1;
}

void BenchRunsModel::setStateColors(const QColor& good, const QColor& bad) {
  good_ = good;
  bad_ = bad;
  if (rowCount() > 0) emit dataChanged(index(0, kState), index(rowCount() - 1, kState));
}

int BenchRunsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(runs_.size());
}

int BenchRunsModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

QVariant BenchRunsModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount()) return {};
  const app::BenchRun& run = runs_[static_cast<size_t>(index.row())];
  if (role == Qt::UserRole) return static_cast<qlonglong>(run.id);
  const int col = index.column();
  if (role == Qt::DisplayRole) {
    switch (col) {
      case kRun:
        return BenchComparisonModel::RunName(run);
      case kWhen:
        return QDateTime::fromMSecsSinceEpoch(run.created_unix_ms)
            .toString(QStringLiteral("MMM d HH:mm:ss"));
      case kModel:
        return QString::fromStdString(run.topology.model);
      case kTp:
        return QString::number(run.topology.tp);
      case kTransport:
        return QString::fromStdString(run.topology.transport);
      case kState:
        return QString::fromStdString(run.state);
      case kTests:
        return QString::number(run.result_count);
      default:
        return {};
    }
  }
  if (role == Qt::ToolTipRole) {
    if (col == kRun) return QString::fromStdString(run.url);
    if (col == kState && !run.error.empty()) return QString::fromStdString(run.error);
    return {};
  }
  if (role == Qt::ForegroundRole && col == kState) {
    if (run.state == "complete" && good_.isValid()) return good_;
    if ((run.state == "failed" || run.state == "interrupted") && bad_.isValid()) return bad_;
  }
  return {};
}

QVariant BenchRunsModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) {
    return QAbstractTableModel::headerData(section, orientation, role);
  }
  switch (section) {
    case kRun:
      return tr("Run");
    case kWhen:
      return tr("When");
    case kModel:
      return tr("Model");
    case kTp:
      return tr("TP");
    case kTransport:
      return tr("Transport");
    case kState:
      return tr("State");
    case kTests:
      return tr("Tests");
    default:
      return {};
  }
}

}  // namespace octet::ui
