#include "octet/ui/bench_panel.h"

#include <QApplication>
#include <QBarCategoryAxis>
#include <QBarSeries>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QComboBox>
#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLegendMarker>
#include <QLineEdit>
#include <QLineSeries>
#include <QLogValueAxis>
#include <QPainter>
#include <QPointer>
#include <QProgressBar>
#include <QPushButton>
#include <QScatterSeries>
#include <QSpinBox>
#include <QSplitter>
#include <QStandardPaths>
#include <QStyledItemDelegate>
#include <QTableView>
#include <QThread>
#include <QVBarModelMapper>
#include <QVBoxLayout>
#include <QValueAxis>
#include <map>

#include "bench_workers.h"
#include "octet/app/bench_runner.h"
#include "octet/ui/bench_comparison_model.h"
#include "octet/ui/bench_runs_model.h"
#include "octet/ui/instance_manager.h"
#include "octet/ui/theme.h"
#include "octet/ui/widgets.h"

namespace octet::ui {

namespace {

// "512, 2048" -> {512, 2048}; false when a piece is not a positive integer.
bool ParseList(const QString& text, std::vector<int64_t>* out) {
  out->clear();
  for (const QString& piece : text.split(QLatin1Char(','), Qt::SkipEmptyParts)) {
    bool ok = false;
    const qlonglong v = piece.trimmed().toLongLong(&ok);
    if (!ok || v <= 0) return false;
    out->push_back(v);
  }
  return !out->empty();
}

// Numbers of the comparison table with one decimal (the model gives doubles,
// which its charts' mappers read).
class OneDecimalDelegate : public QStyledItemDelegate {
 public:
  using QStyledItemDelegate::QStyledItemDelegate;
  QString displayText(const QVariant& value, const QLocale& locale) const override {
    if (value.typeId() == QMetaType::Double) return locale.toString(value.toDouble(), 'f', 1);
    return QStyledItemDelegate::displayText(value, locale);
  }
};

// Removes a chart's series and axes (deleting them, and the mappings the
// series own).
void ClearChart(QChart* chart) {
  chart->removeAllSeries();
  for (QAbstractAxis* a : chart->axes()) {
    chart->removeAxis(a);
    delete a;
  }
}

}  // namespace

BenchPanel::BenchPanel(InstanceManager* instances, QWidget* parent)
    : QWidget(parent),
      instances_(instances),
      store_thread_(new QThread(this)),
      sweep_thread_(new QThread(this)),
      reader_(new BenchStoreReader),
      sweeper_(new BenchSweeper(reader_)) {
  setObjectName(QStringLiteral("benchPanel"));
  qRegisterMetaType<std::vector<app::BenchRun>>();
  store_thread_->setObjectName(QStringLiteral("benchStore"));
  sweep_thread_->setObjectName(QStringLiteral("benchSweep"));
  reader_->moveToThread(store_thread_);
  sweeper_->moveToThread(sweep_thread_);
  store_thread_->start();
  sweep_thread_->start();
  connect(reader_, &BenchStoreReader::runsListed, this,
          [this](int generation, const std::vector<app::BenchRun>& runs, const QString& error) {
            if (generation == load_generation_) onRunsLoaded(runs, error);
          });
  connect(reader_, &BenchStoreReader::runsRead, this, &BenchPanel::onCompareLoaded);
  connect(sweeper_, &BenchSweeper::progress, this, &BenchPanel::onSweepProgress);
  connect(sweeper_, &BenchSweeper::finished, this, &BenchPanel::onSweepFinished);
  store_path_ = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) +
                QStringLiteral("/bench-runs.sqlite");
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(18, 14, 18, 14);
  auto* header = new PanelHeader(tr("Benchmarks"), tr("Run sweeps and compare stored runs"), this);
  auto* open = new QPushButton(tr("Open store…"), header);
  header->addAction(open);
  outer->addWidget(header);

  // ---- sweep ----
  auto* sweep_card = new Card(this);
  auto* sl = new QVBoxLayout(sweep_card);
  auto* row1 = new QHBoxLayout;
  row1->addWidget(new QLabel(tr("Endpoint"), sweep_card));
  endpoint_ = new QComboBox(sweep_card);
  endpoint_->setObjectName(QStringLiteral("benchEndpoint"));
  endpoint_->setEditable(true);
  endpoint_->setInsertPolicy(QComboBox::NoInsert);
  endpoint_->setMinimumContentsLength(24);
  endpoint_->lineEdit()->setPlaceholderText(tr("launch an instance, or type http://host:port"));
  row1->addWidget(endpoint_, 2);
  auto field = [&](const QString& label, const QString& name, const QString& value, int width) {
    row1->addWidget(new QLabel(label, sweep_card));
    auto* e = new QLineEdit(value, sweep_card);
    e->setObjectName(name);
    e->setMaximumWidth(width);
    row1->addWidget(e);
    return e;
  };
  pp_ = field(tr("Prompt"), QStringLiteral("benchPp"), QStringLiteral("512"), 110);
  tg_ = field(tr("Generate"), QStringLiteral("benchTg"), QStringLiteral("128"), 90);
  concurrency_ = field(tr("Concurrency"), QStringLiteral("benchConcurrency"), QStringLiteral("1,2,4"), 110);
  pp_->setToolTip(tr("prompt tokens, comma-separated"));
  tg_->setToolTip(tr("generated tokens, comma-separated"));
  concurrency_->setToolTip(tr("concurrent requests, comma-separated"));
  row1->addWidget(new QLabel(tr("Runs"), sweep_card));
  repetitions_ = new QSpinBox(sweep_card);
  repetitions_->setObjectName(QStringLiteral("benchRuns"));
  repetitions_->setRange(1, 20);
  repetitions_->setValue(3);
  row1->addWidget(repetitions_);
  sl->addLayout(row1);
  auto* row2 = new QHBoxLayout;
  row2->addWidget(new QLabel(tr("Label"), sweep_card));
  label_ = new QLineEdit(sweep_card);
  label_->setObjectName(QStringLiteral("benchLabel"));
  label_->setPlaceholderText(tr("e.g. tp2-ring"));
  label_->setMaximumWidth(200);
  row2->addWidget(label_);
  run_ = new QPushButton(GlyphIcon(Glyph::kBenchmarks), tr("Run sweep"), sweep_card);
  run_->setObjectName(QStringLiteral("benchRun"));
  cancel_ = new QPushButton(tr("Cancel"), sweep_card);
  cancel_->setObjectName(QStringLiteral("benchCancel"));
  cancel_->setEnabled(false);
  progress_ = new QProgressBar(sweep_card);
  progress_->setObjectName(QStringLiteral("benchProgress"));
  progress_->setRange(0, 1);
  progress_->setValue(0);
  progress_text_ = new QLabel(sweep_card);
  progress_text_->setObjectName(QStringLiteral("benchProgressText"));
  progress_text_->setWordWrap(true);
  row2->addWidget(run_);
  row2->addWidget(cancel_);
  row2->addWidget(progress_, 1);
  row2->addWidget(progress_text_, 2);
  sl->addLayout(row2);
  outer->addWidget(sweep_card);

  // ---- stored runs | comparison ----
  auto* split = new QSplitter(Qt::Horizontal, this);
  auto* left = new Card(split);
  auto* ll = new QVBoxLayout(left);
  auto* lh = new QHBoxLayout;
  lh->addWidget(SectionLabel(tr("Stored runs"), left));
  lh->addStretch(1);
  auto* reload = new QPushButton(tr("Reload"), left);
  lh->addWidget(reload);
  ll->addLayout(lh);
  store_label_ = new QLabel(left);
  store_label_->setObjectName(QStringLiteral("benchStore"));
  store_label_->setForegroundRole(QPalette::PlaceholderText);
  store_label_->setWordWrap(true);
  ll->addWidget(store_label_);
  runs_model_ = new BenchRunsModel(this);
  table_ = new QTableView(left);
  table_->setObjectName(QStringLiteral("benchRunsTable"));
  table_->setModel(runs_model_);
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->verticalHeader()->setVisible(false);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::ExtendedSelection);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  ll->addWidget(table_, 1);
  auto* ch = new QHBoxLayout;
  metric_ = new QComboBox(left);
  metric_->setObjectName(QStringLiteral("benchMetric"));
  for (const BenchComparisonModel::Metric& m : BenchComparisonModel::Metrics())
    metric_->addItem(BenchComparisonModel::tr(m.label), QString::fromLatin1(m.key));
  compare_ = new QPushButton(tr("Compare selected"), left);
  compare_->setObjectName(QStringLiteral("benchCompare"));
  compare_->setEnabled(false);
  ch->addWidget(metric_, 1);
  ch->addWidget(compare_);
  ll->addLayout(ch);
  auto* eh = new QHBoxLayout;
  auto* csv = new QPushButton(tr("Export CSV…"), left);
  csv->setObjectName(QStringLiteral("benchExportCsv"));
  auto* png = new QPushButton(tr("Export PNG…"), left);
  png->setObjectName(QStringLiteral("benchExportPng"));
  eh->addWidget(csv);
  eh->addWidget(png);
  eh->addStretch(1);
  ll->addLayout(eh);

  auto* right = new QWidget(split);
  auto* rl = new QVBoxLayout(right);
  rl->setContentsMargins(0, 0, 0, 0);
  bar_chart_ = new QChart;
  bar_chart_->setAnimationOptions(QChart::NoAnimation);
  bar_chart_->setTitle(tr("Select two or more runs and press Compare"));
  bar_chart_->setBackgroundRoundness(6);
  bar_view_ = new QChartView(bar_chart_, right);
  bar_view_->setObjectName(QStringLiteral("benchBarChart"));
  bar_view_->setRenderHint(QPainter::Antialiasing);
  line_chart_ = new QChart;
  line_chart_->setAnimationOptions(QChart::NoAnimation);
  line_chart_->setBackgroundRoundness(6);
  line_view_ = new QChartView(line_chart_, right);
  line_view_->setObjectName(QStringLiteral("benchLineChart"));
  line_view_->setRenderHint(QPainter::Antialiasing);
  auto* charts = new QHBoxLayout;
  charts->addWidget(bar_view_, 1);
  charts->addWidget(line_view_, 1);
  rl->addLayout(charts, 3);
  // The comparison: one row per test, the metric per run and its change
  // against the first run; the charts above map the same model.
  comparison_ = new BenchComparisonModel(this);
  deltas_ = new QTableView(right);
  deltas_->setObjectName(QStringLiteral("benchDeltas"));
  deltas_->setModel(comparison_);
  deltas_->setItemDelegate(new OneDecimalDelegate(deltas_));
  deltas_->horizontalHeader()->setStretchLastSection(true);
  deltas_->verticalHeader()->setVisible(false);
  deltas_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  deltas_->setSelectionMode(QAbstractItemView::NoSelection);
  rl->addWidget(deltas_, 2);
  split->addWidget(left);
  split->addWidget(right);
  split->setStretchFactor(0, 2);
  split->setStretchFactor(1, 4);
  split->setSizes({460, 920});
  outer->addWidget(split, 1);

  connect(run_, &QPushButton::clicked, this, &BenchPanel::startSweep);
  connect(cancel_, &QPushButton::clicked, this, &BenchPanel::cancelSweep);
  connect(reload, &QPushButton::clicked, this, &BenchPanel::reloadRuns);
  connect(compare_, &QPushButton::clicked, this, &BenchPanel::compareSelected);
  connect(metric_, qOverload<int>(&QComboBox::currentIndexChanged), this,
          [this] { comparison_->setMetric(metric_->currentData().toString().toStdString()); });
  // The charts follow the comparison model: new runs are mapped anew, new
  // values (another metric) flow through the mappings, then the axes follow
  // (mapComparison connects that last, after the mappings).
  connect(comparison_, &QAbstractItemModel::modelReset, this, &BenchPanel::mapComparison);
  connect(table_->selectionModel(), &QItemSelectionModel::selectionChanged, this,
          [this] { compare_->setEnabled(table_->selectionModel()->selectedRows().size() >= 2); });
  connect(open, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Benchmark run store"), store_path_,
                                                   tr("SQLite (*.sqlite *.db);;All files (*)"));
    if (!f.isEmpty()) setStorePath(f);
  });
  connect(csv, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getSaveFileName(this, tr("Export comparison"),
                                                   QStringLiteral("comparison.csv"), tr("CSV (*.csv)"));
    if (!f.isEmpty()) exportCsv(f);
  });
  connect(png, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getSaveFileName(this, tr("Export charts"),
                                                   QStringLiteral("comparison.png"), tr("PNG (*.png)"));
    if (!f.isEmpty()) exportPng(f);
  });
  connect(instances_, &InstanceManager::changed, this, &BenchPanel::refreshEndpoints);
  refreshEndpoints();
  setStorePath(store_path_);
}

BenchPanel::~BenchPanel() {
  if (sweep_) *sweep_ = true;
  // The sweeper first: it may be waiting for the reader (see BenchSweeper).
  sweep_thread_->quit();
  sweep_thread_->wait();
  store_thread_->quit();
  store_thread_->wait();
  delete sweeper_;
  delete reader_;
}

void BenchPanel::setEndpoint(const QString& url) { endpoint_->setEditText(url); }

void BenchPanel::setSweep(const QString& pp, const QString& tg, const QString& concurrency,
                          int runs, const QString& label) {
  pp_->setText(pp);
  tg_->setText(tg);
  concurrency_->setText(concurrency);
  repetitions_->setValue(runs);
  label_->setText(label);
}

void BenchPanel::compareRuns(const QList<qint64>& ids) {
  table_->clearSelection();
  for (qint64 id : ids) {
    if (const int r = runs_model_->rowOf(id); r >= 0) {
      table_->selectionModel()->select(runs_model_->index(r, 0),
                                       QItemSelectionModel::Select | QItemSelectionModel::Rows);
    }
  }
  compareSelected();
}

void BenchPanel::refreshEndpoints() {
  const QString current = endpoint_->currentText();
  endpoint_->blockSignals(true);
  endpoint_->clear();
  for (const InstanceInfo& info : instances_->instances()) {
    if (info.state == InstanceInfo::State::kReady) endpoint_->addItem(info.url, info.url);
  }
  endpoint_->blockSignals(false);
  if (!current.isEmpty()) {
    endpoint_->setEditText(current);
  } else if (endpoint_->count() > 0) {
    endpoint_->setCurrentIndex(endpoint_->count() - 1);
  }
}

void BenchPanel::setStorePath(const QString& path) {
  store_path_ = path;
  store_label_->setText(tr("Store: %1").arg(QDir::toNativeSeparators(path)));
  reloadRuns();
}

void BenchPanel::reloadRuns() {
  const int generation = ++load_generation_;
  const std::string path = store_path_.toStdString();
  QDir().mkpath(QFileInfo(store_path_).absolutePath());
  QMetaObject::invokeMethod(
      reader_, [reader = reader_, generation, path] { reader->listRuns(generation, path); });
}

void BenchPanel::onRunsLoaded(const std::vector<app::BenchRun>& runs, const QString& error) {
  if (!error.isEmpty()) {
    store_label_->setText(tr("Store %1: %2").arg(store_path_, error));
    return;
  }
  QSet<qint64> selected;
  for (const QModelIndex& i : table_->selectionModel()->selectedRows())
    selected.insert(runs_model_->runId(i.row()));
  runs_ = runs;
  const StatusColors sc = StatusColorsFor(palette());
  runs_model_->setStateColors(sc.good, sc.bad);
  runs_model_->setRuns(runs_);
  // A reset forgets the selection: the runs selected before stay selected.
  for (qint64 id : selected) {
    if (const int r = runs_model_->rowOf(id); r >= 0) {
      table_->selectionModel()->select(runs_model_->index(r, 0),
                                       QItemSelectionModel::Select | QItemSelectionModel::Rows);
    }
  }
  table_->resizeColumnsToContents();
  store_label_->setText(tr("Store: %1 — %n run(s)", nullptr, static_cast<int>(runs_.size()))
                            .arg(QDir::toNativeSeparators(store_path_)));
  emit runsLoaded(static_cast<int>(runs_.size()));
}

void BenchPanel::startSweep() {
  if (running_) return;
  app::BenchConfig c;
  const int i = endpoint_->findText(endpoint_->currentText());
  c.url = (i >= 0 ? endpoint_->itemData(i).toString() : endpoint_->currentText()).trimmed().toStdString();
  if (c.url.empty()) {
    progress_text_->setText(tr("Choose an endpoint: launch an instance on the Launch panel."));
    emit sweepFinished(false, progress_text_->text());
    return;
  }
  if (!ParseList(pp_->text(), &c.pp) || !ParseList(tg_->text(), &c.tg) ||
      !ParseList(concurrency_->text(), &c.concurrency)) {
    progress_text_->setText(tr("Prompt, generate and concurrency are lists of positive numbers, "
                               "e.g. 512,2048."));
    emit sweepFinished(false, progress_text_->text());
    return;
  }
  c.runs = repetitions_->value();
  c.label = label_->text().trimmed().toStdString();
  running_ = true;
  run_->setEnabled(false);
  cancel_->setEnabled(true);
  const int total = static_cast<int>(c.pp.size() * c.tg.size() * c.concurrency.size()) * c.runs;
  progress_->setRange(0, total);
  progress_->setValue(0);
  progress_text_->setText(tr("Measuring latency…"));
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  sweep_ = cancel;
  const quint64 id = ++sweep_id_;
  const std::string path = store_path_.toStdString();
  QMetaObject::invokeMethod(
      sweeper_, [sweeper = sweeper_, id, c, path, cancel] { sweeper->run(id, c, path, cancel); });
}

void BenchPanel::onSweepProgress(quint64 id, int done, const QString& text, bool begun) {
  if (!sweep_ || id != sweep_id_) return;
  progress_->setValue(std::min(done, progress_->maximum()));
  progress_text_->setText(text);
  if (begun) reloadRuns();  // the run appears as "running"
}

void BenchPanel::onSweepFinished(quint64 id, bool ok, const QString& detail, bool store_failed) {
  if (!sweep_ || id != sweep_id_) return;
  const bool cancelled = *sweep_;
  running_ = false;
  sweep_.reset();
  run_->setEnabled(true);
  cancel_->setEnabled(false);
  if (store_failed) {
    progress_text_->setText(tr("Cannot open the run store: %1").arg(detail));
    emit sweepFinished(false, detail);
    return;
  }
  if (ok) progress_->setValue(progress_->maximum());
  if (ok) {
    progress_text_->setText(detail);
  } else if (cancelled) {
    progress_text_->setText(
        tr("Cancelled: the run is stored as interrupted, with the tests finished before."));
  } else {
    progress_text_->setText(tr("The sweep failed: %1").arg(detail));
  }
  reloadRuns();
  emit sweepFinished(ok, detail);
}

void BenchPanel::cancelSweep() {
  if (sweep_) *sweep_ = true;
  progress_text_->setText(tr("Cancelling: the requests in flight are cut…"));
}

void BenchPanel::compareSelected() {
  std::vector<int64_t> ids;
  QList<int> rows;
  for (const QModelIndex& i : table_->selectionModel()->selectedRows()) rows << i.row();
  std::sort(rows.begin(), rows.end());
  for (int r : rows) ids.push_back(runs_model_->runId(r));
  if (ids.size() < 2) return;
  // Oldest first: the baseline is the earliest run.
  std::sort(ids.begin(), ids.end());
  const std::string path = store_path_.toStdString();
  QMetaObject::invokeMethod(reader_,
                            [reader = reader_, ids, path] { reader->readRuns(ids, path); });
}

void BenchPanel::onCompareLoaded(const std::vector<app::BenchRun>& runs, const QString& error) {
  if (!error.isEmpty()) {
    bar_chart_->setTitle(tr("Cannot read the runs: %1").arg(error));
    return;
  }
  const StatusColors sc = StatusColorsFor(palette());
  comparison_->setDeltaColors(sc.good, sc.bad);
  comparison_->setMetric(metric_->currentData().toString().toStdString());
  comparison_->setRuns(runs);  // the charts follow (mapComparison)
  emit comparisonShown(static_cast<int>(comparison_->runs().size()));
}

const std::vector<app::BenchRun>& BenchPanel::compared() const { return comparison_->runs(); }

// The charts' series for the comparison model as it is now: one bar set per
// run column (QVBarModelMapper), one line per run and (pp, tg, depth) shape
// over that shape's rows (XYColumnMapping). Values reach them from the model.
void BenchPanel::mapComparison() {
  ClearChart(bar_chart_);
  ClearChart(line_chart_);
  const auto& runs = comparison_->runs();
  if (runs.empty() || comparison_->rowCount() == 0) {
    bar_chart_->setTitle(tr("Select two or more runs and press Compare"));
    line_chart_->setTitle(QString());
    return;
  }
  const QPalette pal = palette();
  const QColor text = pal.color(QPalette::WindowText);
  const auto& shapes = comparison_->shapes();

  // Grouped bars: one set per run, one category per test (row).
  auto* bars = new QBarSeries;
  auto* mapper = new QVBarModelMapper(bars);
  mapper->setFirstBarSetColumn(comparison_->runColumn(0));
  mapper->setLastBarSetColumn(comparison_->runColumn(static_cast<int>(runs.size()) - 1));
  mapper->setFirstRow(0);
  mapper->setRowCount(comparison_->rowCount());
  mapper->setSeries(bars);
  mapper->setModel(comparison_);
  bar_chart_->addSeries(bars);
  // Short category names when only the concurrency differs ("c1", "c2", ...).
  auto* categories = new QBarCategoryAxis;
  for (int row = 0; row < comparison_->rowCount(); ++row) {
    categories->append(shapes.size() == 1 ? QStringLiteral("c%1").arg(comparison_->concurrency(row))
                                          : comparison_->testName(row));
  }
  if (shapes.size() == 1) {
    categories->setTitleText(
        tr("concurrency (pp%1 tg%2)").arg(shapes.front().pp).arg(shapes.front().tg));
    categories->setTitleBrush(text);
  }
  categories->setLabelsColor(text);
  auto* bar_y = new QValueAxis;
  bar_y->setLabelFormat(QStringLiteral("%.0f"));
  bar_y->setLabelsColor(text);
  bar_y->setTitleBrush(text);
  bar_chart_->addAxis(categories, Qt::AlignBottom);
  bar_chart_->addAxis(bar_y, Qt::AlignLeft);
  bars->attachAxis(categories);
  bars->attachAxis(bar_y);

  // Lines vs concurrency: per run and per shape the run has tests of.
  int64_t max_c = 1;
  for (int row = 0; row < comparison_->rowCount(); ++row)
    max_c = std::max(max_c, comparison_->concurrency(row));
  auto* line_x = new QValueAxis;
  line_x->setRange(1, std::max<int64_t>(2, max_c));
  line_x->setTitleText(tr("concurrency"));
  line_x->setLabelFormat(QStringLiteral("%d"));
  line_x->setTickCount(static_cast<int>(std::min<int64_t>(std::max<int64_t>(2, max_c), 9)));
  line_x->setLabelsColor(text);
  line_x->setTitleBrush(text);
  auto* line_y = new QValueAxis;
  line_y->setLabelFormat(QStringLiteral("%.0f"));
  line_y->setLabelsColor(text);
  line_y->setTitleBrush(text);
  line_chart_->addAxis(line_x, Qt::AlignBottom);
  line_chart_->addAxis(line_y, Qt::AlignLeft);
  for (size_t i = 0; i < runs.size(); ++i) {
    for (const BenchComparisonModel::Shape& shape : shapes) {
      const bool has_shape =
          std::any_of(runs[i].results.begin(), runs[i].results.end(), [&](const auto& r) {
            return r.prompt_size == shape.pp && r.response_size == shape.tg &&
                   r.depth == shape.depth;
          });
      if (!has_shape) continue;
      auto* series = new QLineSeries;
      QString name = BenchComparisonModel::RunName(runs[i]);
      if (shapes.size() > 1) name += QStringLiteral(" pp%1 tg%2").arg(shape.pp).arg(shape.tg);
      series->setName(name);
      QPen pen(SeriesColor(static_cast<int>(i), pal));
      pen.setWidthF(2.2);
      series->setPen(pen);
      series->setPointsVisible(true);
      new XYColumnMapping(comparison_, series, BenchComparisonModel::kConcurrencyColumn,
                          comparison_->runColumn(static_cast<int>(i)), shape.first_row,
                          shape.row_count);
      line_chart_->addSeries(series);
      series->attachAxis(line_x);
      series->attachAxis(line_y);
    }
  }
  for (QChart* chart : {bar_chart_, line_chart_}) {
    chart->setBackgroundBrush(pal.color(QPalette::Base));
    chart->setTitleBrush(text);
    chart->legend()->setLabelColor(text);
    chart->legend()->setAlignment(Qt::AlignBottom);
  }
  deltas_->resizeColumnsToContents();
  // After the mappings' own connections, so that it sees their new points.
  disconnect(fit_connection_);
  fit_connection_ =
      connect(comparison_, &QAbstractItemModel::dataChanged, this, &BenchPanel::fitChartsToValues);
  fitChartsToValues();
}

// What depends on the values, not on which runs and tests are compared: the
// value axes' ranges, the titles, the bar colours (the mapper makes new sets)
// and which lines have points for this metric.
void BenchPanel::fitChartsToValues() {
  if (bar_chart_->series().isEmpty()) return;
  const QString metric_label = BenchComparisonModel::tr(comparison_->metricInfo().label);
  const double max_value = comparison_->maxValue();
  const QPalette pal = palette();
  for (QChart* chart : {bar_chart_, line_chart_}) {
    for (QAbstractAxis* a : chart->axes(Qt::Vertical)) {
      if (auto* y = qobject_cast<QValueAxis*>(a)) {
        ApplyNiceScale(y, NiceScaleFor(max_value * 1.05));
        y->setTitleText(metric_label);
      }
    }
  }
  if (auto* bars = qobject_cast<QBarSeries*>(bar_chart_->series().first())) {
    const QList<QBarSet*> sets = bars->barSets();
    for (int i = 0; i < sets.size(); ++i) {
      sets[i]->setColor(SeriesColor(i, pal));
      sets[i]->setBorderColor(SeriesColor(i, pal));
    }
  }
  for (QAbstractSeries* s : line_chart_->series()) {
    auto* line = static_cast<QLineSeries*>(s);
    line->setVisible(line->count() > 0);
    for (QLegendMarker* marker : line_chart_->legend()->markers(line))
      marker->setVisible(line->count() > 0);
  }
  bar_chart_->setTitle(tr("%1 per test").arg(metric_label));
  line_chart_->setTitle(tr("%1 vs concurrency").arg(metric_label));
}

bool BenchPanel::exportCsv(const QString& file) {
  const std::vector<app::BenchRun>& compared = comparison_->runs();
  if (compared.empty()) return false;
  QString out = QStringLiteral(
                    "run_id,label,test,prompt_size,response_size,depth,concurrency,metric,mean,std,"
                    "delta_vs_run_%1_pct\n")
                    .arg(compared[0].id);
  auto quote = [](QString s) {
    if (s.contains(QLatin1Char(',')) || s.contains(QLatin1Char('"'))) {
      s.replace(QLatin1String("\""), QLatin1String("\"\""));
      s = QLatin1Char('"') + s + QLatin1Char('"');
    }
    return s;
  };
  for (const app::BenchRun& run : compared) {
    std::map<std::pair<std::string, std::string>, double> deltas;  // (test, metric) -> %
    if (run.id != compared[0].id) {
      for (const auto& row : app::CompareRuns(compared[0], run))
        for (const auto& m : row.metrics) deltas[{row.test, m.name}] = m.delta_pct;
    }
    for (const app::BenchResult& r : run.results) {
      for (const BenchComparisonModel::Metric& def : BenchComparisonModel::Metrics()) {
        const app::MetricStats* m = BenchComparisonModel::MetricOf(r, def.key);
        if (!m || m->empty()) continue;
        auto d = deltas.find({r.test, def.key});
        out += QStringLiteral("%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11\n")
                   .arg(run.id)
                   .arg(quote(QString::fromStdString(run.label)), quote(QString::fromStdString(r.test)))
                   .arg(r.prompt_size)
                   .arg(r.response_size)
                   .arg(r.depth)
                   .arg(r.concurrency)
                   .arg(QString::fromLatin1(def.key))
                   .arg(m->mean, 0, 'f', 3)
                   .arg(m->std, 0, 'f', 3)
                   .arg(d == deltas.end() ? QString() : QString::number(d->second, 'f', 2));
      }
    }
  }
  QFile f(file);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate)) {
    progress_text_->setText(tr("Cannot write %1: %2").arg(file, f.errorString()));
    return false;
  }
  f.write(out.toUtf8());
  progress_text_->setText(tr("Exported %1").arg(file));
  return true;
}

bool BenchPanel::exportPng(const QString& file) {
  // Both charts side by side, at twice the on-screen resolution.
  const QSize a = bar_view_->size(), b = line_view_->size();
  QImage image(QSize(a.width() + b.width(), std::max(a.height(), b.height())) * 2,
               QImage::Format_ARGB32_Premultiplied);
  image.setDevicePixelRatio(2);
  image.fill(palette().color(QPalette::Window));
  QPainter painter(&image);
  painter.setRenderHint(QPainter::Antialiasing);
  bar_view_->render(&painter, QRectF(0, 0, a.width(), a.height()));
  line_view_->render(&painter, QRectF(a.width(), 0, b.width(), b.height()));
  painter.end();
  const bool ok = image.save(file, "PNG");
  progress_text_->setText(ok ? tr("Exported %1").arg(file) : tr("Cannot write %1").arg(file));
  return ok;
}

}  // namespace octet::ui
