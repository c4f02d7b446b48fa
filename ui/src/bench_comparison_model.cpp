#include "octet/ui/bench_comparison_model.h"

#include <QXYSeries>
#include <algorithm>
#include <cmath>
#include <map>

namespace octet::ui {

const std::vector<BenchComparisonModel::Metric>& BenchComparisonModel::Metrics() {
  static const std::vector<Metric> metrics = {
      {"tg_throughput", QT_TR_NOOP("decode tok/s (all requests)"), true},
      {"pp_throughput", QT_TR_NOOP("prefill tok/s (all requests)"), true},
      {"tg_req_throughput", QT_TR_NOOP("decode tok/s per request"), true},
      {"pp_req_throughput", QT_TR_NOOP("prefill tok/s per request"), true},
      {"e2e_ttft", QT_TR_NOOP("time to first token (ms)"), false},
  };
  return metrics;
}

const app::MetricStats* BenchComparisonModel::MetricOf(const app::BenchResult& r,
                                                       const std::string& key) {
  if (key == "tg_throughput") return &r.tg_throughput;
  if (key == "pp_throughput") return &r.pp_throughput;
  if (key == "tg_req_throughput") return &r.tg_req_throughput;
  if (key == "pp_req_throughput") return &r.pp_req_throughput;
  if (key == "e2e_ttft") return &r.e2e_ttft;
  if (key == "ttfr") return &r.ttfr;
  if (key == "est_ppt") return &r.est_ppt;
  return nullptr;
}

QString BenchComparisonModel::RunName(const app::BenchRun& run) {
  QString name = QStringLiteral("#%1").arg(run.id);
  if (!run.label.empty()) name += QLatin1Char(' ') + QString::fromStdString(run.label);
  return name;
}

BenchComparisonModel::BenchComparisonModel(QObject* parent)
    : QAbstractTableModel(parent), metric_(Metrics().front().key) {}

void BenchComparisonModel::setRuns(std::vector<app::BenchRun> runs) {
  beginResetModel();
  runs_ = std::move(runs);
  rebuildRows();
  endResetModel();
}

void BenchComparisonModel::addRun(const app::BenchRun& run) {
  beginResetModel();
  auto same = std::find_if(runs_.begin(), runs_.end(),
                           [&](const app::BenchRun& r) { return r.id == run.id; });
  if (same != runs_.end()) {
    *same = run;
  } else {
    runs_.push_back(run);
  }
  rebuildRows();
  endResetModel();
}

bool BenchComparisonModel::removeRun(int64_t id) {
  auto it =
      std::find_if(runs_.begin(), runs_.end(), [&](const app::BenchRun& r) { return r.id == id; });
  if (it == runs_.end()) return false;
  beginResetModel();
  runs_.erase(it);
  rebuildRows();
  endResetModel();
  return true;
}

void BenchComparisonModel::setMetric(const std::string& key) {
  static const app::BenchResult kAnyResult;
  if (key == metric_ || MetricOf(kAnyResult, key) == nullptr) return;
  metric_ = key;
  if (rowCount() > 0 && !runs_.empty()) {
    emit dataChanged(index(0, kFirstRunColumn), index(rowCount() - 1, columnCount() - 1));
  }
}

const BenchComparisonModel::Metric& BenchComparisonModel::metricInfo() const {
  for (const Metric& m : Metrics()) {
    if (metric_ == m.key) return m;
  }
  return Metrics().front();
}

void BenchComparisonModel::setDeltaColors(const QColor& better, const QColor& worse) {
  better_ = better;
  worse_ = worse;
}

int BenchComparisonModel::deltaColumn(int run) const {
  return kFirstRunColumn + static_cast<int>(runs_.size()) + run - 1;
}

void BenchComparisonModel::rebuildRows() {
  std::map<TestKey, QString> tests;
  for (const app::BenchRun& run : runs_) {
    for (const app::BenchResult& r : run.results) {
      tests[{r.prompt_size, r.response_size, r.depth, r.concurrency}] =
          QString::fromStdString(r.test);
    }
  }
  tests_.clear();
  names_.clear();
  shapes_.clear();
  for (const auto& [key, name] : tests) {
    const auto& [pp, tg, depth, c] = key;
    const int row = static_cast<int>(tests_.size());
    if (shapes_.empty() || shapes_.back().pp != pp || shapes_.back().tg != tg ||
        shapes_.back().depth != depth) {
      shapes_.push_back({pp, tg, depth, row, 0});
    }
    ++shapes_.back().row_count;
    tests_.push_back(key);
    names_.push_back(name);
  }
}

std::optional<double> BenchComparisonModel::value(int row, int run) const {
  if (row < 0 || row >= rowCount() || run < 0 || run >= static_cast<int>(runs_.size())) {
    return std::nullopt;
  }
  const auto& [pp, tg, depth, c] = tests_[static_cast<size_t>(row)];
  for (const app::BenchResult& r : runs_[static_cast<size_t>(run)].results) {
    if (r.prompt_size != pp || r.response_size != tg || r.depth != depth || r.concurrency != c) {
      continue;
    }
    const app::MetricStats* m = MetricOf(r, metric_);
    if (m && !m->empty()) return m->mean;
  }
  return std::nullopt;
}

// As app::CompareRuns: (run - baseline) / baseline, 0 for a zero baseline.
std::optional<double> BenchComparisonModel::deltaPercent(int row, int run) const {
  const auto base = value(row, 0);
  const auto v = value(row, run);
  if (!base || !v) return std::nullopt;
  return *base != 0 ? (*v - *base) / *base * 100.0 : 0.0;
}

double BenchComparisonModel::maxValue() const {
  double max_value = 0;
  for (int row = 0; row < rowCount(); ++row) {
    for (int run = 0; run < static_cast<int>(runs_.size()); ++run) {
      if (auto v = value(row, run)) max_value = std::max(max_value, *v);
    }
  }
  return max_value;
}

int64_t BenchComparisonModel::concurrency(int row) const {
  return std::get<3>(tests_.at(static_cast<size_t>(row)));
}

QString BenchComparisonModel::testName(int row) const {
  return names_.at(static_cast<size_t>(row));
}

int BenchComparisonModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(tests_.size());
}

int BenchComparisonModel::columnCount(const QModelIndex& parent) const {
  if (parent.isValid()) return 0;
  const int runs = static_cast<int>(runs_.size());
  return kFirstRunColumn + runs + std::max(0, runs - 1);
}

QVariant BenchComparisonModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount() || index.column() >= columnCount()) return {};
  const int row = index.row(), col = index.column();
  const int runs = static_cast<int>(runs_.size());
  if (col == kTestColumn) return role == Qt::DisplayRole ? QVariant(testName(row)) : QVariant();
  if (col == kConcurrencyColumn) {
    if (role == Qt::DisplayRole) return static_cast<qlonglong>(concurrency(row));
    if (role == Qt::TextAlignmentRole) return int(Qt::AlignRight | Qt::AlignVCenter);
    return {};
  }
  if (col < kFirstRunColumn + runs) {
    const int run = col - kFirstRunColumn;
    if (role == Qt::DisplayRole) {
      // A number (the charts' mappers read it); empty where the run has none.
      const auto v = value(row, run);
      return v ? QVariant(*v) : QVariant();
    }
    if (role == Qt::TextAlignmentRole) return int(Qt::AlignRight | Qt::AlignVCenter);
    return {};
  }
  const int run = col - kFirstRunColumn - runs + 1;
  const auto d = deltaPercent(row, run);
  if (!d) return {};
  if (role == Qt::DisplayRole) {
    return QStringLiteral("%1%2 %")
        .arg(*d >= 0 ? QStringLiteral("+") : QString())
        .arg(*d, 0, 'f', 1);
  }
  if (role == Qt::TextAlignmentRole) return int(Qt::AlignRight | Qt::AlignVCenter);
  if (role == Qt::ForegroundRole && std::abs(*d) >= 1.0) {
    const bool better = metricInfo().higher_is_better ? *d > 0 : *d < 0;
    const QColor& c = better ? better_ : worse_;
    if (c.isValid()) return c;
  }
  return {};
}

QVariant BenchComparisonModel::headerData(int section, Qt::Orientation orientation,
                                          int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) {
    return QAbstractTableModel::headerData(section, orientation, role);
  }
  const int runs = static_cast<int>(runs_.size());
  if (section == kTestColumn) return tr("Test");
  if (section == kConcurrencyColumn) return tr("Concurrency");
  if (section < kFirstRunColumn + runs) {
    return RunName(runs_[static_cast<size_t>(section - kFirstRunColumn)]);
  }
  if (section < columnCount()) {
    const int run = section - kFirstRunColumn - runs + 1;
    return tr("Δ %1 vs %2").arg(RunName(runs_[static_cast<size_t>(run)]), RunName(runs_.front()));
  }
  return {};
}

// ---- XYColumnMapping ---------------------------------------------------------------

XYColumnMapping::XYColumnMapping(QAbstractItemModel* model, QXYSeries* series, int x_column,
                                 int y_column, int first_row, int row_count)
    : QObject(series),
      model_(model),
      series_(series),
      x_column_(x_column),
      y_column_(y_column),
      first_row_(first_row),
      row_count_(row_count) {
  connect(model_, &QAbstractItemModel::dataChanged, this, [this] { refresh(); });
  refresh();
}

int XYColumnMapping::refresh() {
  QList<QPointF> points;
  const int end = std::min(model_->rowCount(), first_row_ + row_count_);
  for (int row = first_row_; row < end; ++row) {
    const QVariant y = model_->index(row, y_column_).data();
    if (!y.isValid()) continue;
    points.append(QPointF(model_->index(row, x_column_).data().toDouble(), y.toDouble()));
  }
  series_->replace(points);
  return static_cast<int>(points.size());
}

}  // namespace octet::ui
