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
#include <QTableWidget>
#include <QThread>
#include <QVBoxLayout>
#include <QValueAxis>
#include <map>
#include <set>

#include "bench_workers.h"
#include "octet/app/bench_runner.h"
#include "octet/ui/instance_manager.h"
#include "octet/ui/theme.h"
#include "octet/ui/widgets.h"

namespace octet::ui {

namespace {

struct MetricDef {
  const char* key;
  const char* label;
  bool higher_is_better;
};
constexpr MetricDef kMetrics[] = {
    {"tg_throughput", "decode tok/s (all requests)", true},
    {"pp_throughput", "prefill tok/s (all requests)", true},
    {"tg_req_throughput", "decode tok/s per request", true},
    {"pp_req_throughput", "prefill tok/s per request", true},
    {"e2e_ttft", "time to first token (ms)", false},
};

const app::MetricStats* Metric(const app::BenchResult& r, const std::string& key) {
  if (key == "tg_throughput") return &r.tg_throughput;
  if (key == "pp_throughput") return &r.pp_throughput;
  if (key == "tg_req_throughput") return &r.tg_req_throughput;
  if (key == "pp_req_throughput") return &r.pp_req_throughput;
  if (key == "e2e_ttft") return &r.e2e_ttft;
  if (key == "ttfr") return &r.ttfr;
  if (key == "est_ppt") return &r.est_ppt;
  return nullptr;
}

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

QString RunName(const app::BenchRun& r) {
  QString name = QStringLiteral("#%1").arg(r.id);
  if (!r.label.empty()) name += QLatin1Char(' ') + QString::fromStdString(r.label);
  return name;
}

using TestKey = std::tuple<int64_t, int64_t, int64_t, int64_t>;  // pp, tg, depth, concurrency
TestKey KeyOf(const app::BenchResult& r) {
  return {r.prompt_size, r.response_size, r.depth, r.concurrency};
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
  table_ = new QTableWidget(0, 7, left);
  table_->setObjectName(QStringLiteral("benchRunsTable"));
  table_->setHorizontalHeaderLabels(
      {tr("Run"), tr("When"), tr("Model"), tr("TP"), tr("Transport"), tr("State"), tr("Tests")});
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->verticalHeader()->setVisible(false);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::ExtendedSelection);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  ll->addWidget(table_, 1);
  auto* ch = new QHBoxLayout;
  metric_ = new QComboBox(left);
  metric_->setObjectName(QStringLiteral("benchMetric"));
  for (const MetricDef& m : kMetrics) metric_->addItem(tr(m.label), QString::fromLatin1(m.key));
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
  deltas_ = new QTableWidget(0, 6, right);
  deltas_->setObjectName(QStringLiteral("benchDeltas"));
  deltas_->setHorizontalHeaderLabels(
      {tr("Test"), tr("Metric"), tr("Baseline"), tr("Run"), tr("Value"), tr("Δ")});
  deltas_->horizontalHeader()->setStretchLastSection(true);
  deltas_->verticalHeader()->setVisible(false);
  deltas_->setEditTriggers(QAbstractItemView::NoEditTriggers);
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
          [this] { drawComparison(); });
  connect(table_, &QTableWidget::itemSelectionChanged, this, [this] {
    compare_->setEnabled(table_->selectionModel()->selectedRows().size() >= 2);
  });
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
  for (int r = 0; r < table_->rowCount(); ++r) {
    if (ids.contains(table_->item(r, 0)->data(Qt::UserRole).toLongLong())) {
      table_->selectionModel()->select(table_->model()->index(r, 0),
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
    selected.insert(table_->item(i.row(), 0)->data(Qt::UserRole).toLongLong());
  runs_ = runs;
  const StatusColors sc = StatusColorsFor(palette());
  table_->setRowCount(static_cast<int>(runs_.size()));
  for (int r = 0; r < static_cast<int>(runs_.size()); ++r) {
    const app::BenchRun& run = runs_[r];
    auto* id = new QTableWidgetItem(RunName(run));
    id->setData(Qt::UserRole, static_cast<qlonglong>(run.id));
    id->setToolTip(QString::fromStdString(run.url));
    table_->setItem(r, 0, id);
    table_->setItem(r, 1, new QTableWidgetItem(
                              QDateTime::fromMSecsSinceEpoch(run.created_unix_ms)
                                  .toString(QStringLiteral("MMM d HH:mm:ss"))));
    table_->setItem(r, 2, new QTableWidgetItem(QString::fromStdString(run.topology.model)));
    table_->setItem(r, 3, new QTableWidgetItem(QString::number(run.topology.tp)));
    table_->setItem(r, 4, new QTableWidgetItem(QString::fromStdString(run.topology.transport)));
    auto* state = new QTableWidgetItem(QString::fromStdString(run.state));
    if (run.state == "complete") state->setForeground(sc.good);
    if (run.state == "failed" || run.state == "interrupted") state->setForeground(sc.bad);
    if (!run.error.empty()) state->setToolTip(QString::fromStdString(run.error));
    table_->setItem(r, 5, state);
    table_->setItem(r, 6, new QTableWidgetItem(QString::number(run.result_count)));
    if (selected.contains(run.id)) {
      table_->selectionModel()->select(table_->model()->index(r, 0),
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
  for (int r : rows) ids.push_back(table_->item(r, 0)->data(Qt::UserRole).toLongLong());
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
  compared_ = runs;
  drawComparison();
  emit comparisonShown(static_cast<int>(compared_.size()));
}

void BenchPanel::drawComparison() {
  if (compared_.size() < 2) return;
  const std::string key = metric_->currentData().toString().toStdString();
  const QString metric_label = metric_->currentText();
  bool higher_is_better = true;
  for (const MetricDef& m : kMetrics) {
    if (key == m.key) higher_is_better = m.higher_is_better;
  }
  const QPalette pal = palette();
  const QColor text = pal.color(QPalette::WindowText);
  auto style = [&](QChart* chart) {
    chart->setBackgroundBrush(pal.color(QPalette::Base));
    chart->setTitleBrush(text);
    chart->legend()->setLabelColor(text);
    chart->legend()->setAlignment(Qt::AlignBottom);
  };

  // Tests present in any run, in (pp, tg, depth, concurrency) order.
  std::map<TestKey, QString> tests;
  for (const app::BenchRun& run : compared_) {
    for (const app::BenchResult& r : run.results) tests[KeyOf(r)] = QString::fromStdString(r.test);
  }

  // Grouped bars: one set per run, one category per test.
  bar_chart_->removeAllSeries();
  for (QAbstractAxis* a : bar_chart_->axes()) {
    bar_chart_->removeAxis(a);
    delete a;
  }
  auto* bars = new QBarSeries;
  double max_value = 0;
  for (size_t i = 0; i < compared_.size(); ++i) {
    auto* set = new QBarSet(RunName(compared_[i]));
    set->setColor(SeriesColor(static_cast<int>(i), pal));
    set->setBorderColor(SeriesColor(static_cast<int>(i), pal));
    std::map<TestKey, double> values;
    for (const app::BenchResult& r : compared_[i].results) {
      if (const app::MetricStats* m = Metric(r, key); m && !m->empty()) values[KeyOf(r)] = m->mean;
    }
    for (const auto& [k, name] : tests) {
      const double v = values.count(k) ? values[k] : 0.0;
      *set << v;
      max_value = std::max(max_value, v);
    }
    bars->append(set);
  }
  bar_chart_->addSeries(bars);
  // Short category names when only the concurrency differs ("c1", "c2", ...).
  std::set<std::tuple<int64_t, int64_t, int64_t>> test_shapes;
  for (const auto& [k, name] : tests) test_shapes.insert({std::get<0>(k), std::get<1>(k), std::get<2>(k)});
  auto* categories = new QBarCategoryAxis;
  for (const auto& [k, name] : tests) {
    categories->append(test_shapes.size() == 1 ? QStringLiteral("c%1").arg(std::get<3>(k)) : name);
  }
  if (test_shapes.size() == 1) {
    const auto& shape = *test_shapes.begin();
    categories->setTitleText(tr("concurrency (pp%1 tg%2)").arg(std::get<0>(shape)).arg(std::get<1>(shape)));
    categories->setTitleBrush(text);
  }
  categories->setLabelsColor(text);
  auto* bar_y = new QValueAxis;
  bar_y->setRange(0, max_value > 0 ? max_value * 1.12 : 1);
  bar_y->setLabelFormat(QStringLiteral("%.0f"));
  bar_y->setTitleText(metric_label);
  bar_y->setLabelsColor(text);
  bar_y->setTitleBrush(text);
  bar_chart_->addAxis(categories, Qt::AlignBottom);
  bar_chart_->addAxis(bar_y, Qt::AlignLeft);
  bars->attachAxis(categories);
  bars->attachAxis(bar_y);
  bar_chart_->setTitle(tr("%1 per test").arg(metric_label));
  style(bar_chart_);

  // Lines vs concurrency: per run and per (pp, tg, depth) shape.
  line_chart_->removeAllSeries();
  for (QAbstractAxis* a : line_chart_->axes()) {
    line_chart_->removeAxis(a);
    delete a;
  }
  std::set<std::tuple<int64_t, int64_t, int64_t>> shapes;
  int64_t max_c = 1;
  for (const auto& [k, name] : tests) {
    shapes.insert({std::get<0>(k), std::get<1>(k), std::get<2>(k)});
    max_c = std::max(max_c, std::get<3>(k));
  }
  auto* line_x = new QValueAxis;
  line_x->setRange(1, std::max<int64_t>(2, max_c));
  line_x->setTitleText(tr("concurrency"));
  line_x->setLabelFormat(QStringLiteral("%d"));
  line_x->setTickCount(static_cast<int>(std::min<int64_t>(std::max<int64_t>(2, max_c), 9)));
  line_x->setLabelsColor(text);
  line_x->setTitleBrush(text);
  auto* line_y = new QValueAxis;
  line_y->setRange(0, max_value > 0 ? max_value * 1.12 : 1);
  line_y->setLabelFormat(QStringLiteral("%.0f"));
  line_y->setTitleText(metric_label);
  line_y->setLabelsColor(text);
  line_y->setTitleBrush(text);
  line_chart_->addAxis(line_x, Qt::AlignBottom);
  line_chart_->addAxis(line_y, Qt::AlignLeft);
  for (size_t i = 0; i < compared_.size(); ++i) {
    for (const auto& shape : shapes) {
      auto* series = new QLineSeries;
      QString name = RunName(compared_[i]);
      if (shapes.size() > 1) {
        name += QStringLiteral(" pp%1 tg%2").arg(std::get<0>(shape)).arg(std::get<1>(shape));
      }
      series->setName(name);
      std::map<int64_t, double> points;
      for (const app::BenchResult& r : compared_[i].results) {
        if (std::make_tuple(r.prompt_size, r.response_size, r.depth) != shape) continue;
        if (const app::MetricStats* m = Metric(r, key); m && !m->empty()) points[r.concurrency] = m->mean;
      }
      if (points.empty()) {
        delete series;
        continue;
      }
      for (const auto& [c, v] : points) series->append(static_cast<double>(c), v);
      QPen pen(SeriesColor(static_cast<int>(i), pal));
      pen.setWidthF(2.2);
      series->setPen(pen);
      series->setPointsVisible(true);
      line_chart_->addSeries(series);
      series->attachAxis(line_x);
      series->attachAxis(line_y);
    }
  }
  line_chart_->setTitle(tr("%1 vs concurrency").arg(metric_label));
  style(line_chart_);

  // Deltas against the first (oldest) run.
  const StatusColors sc = StatusColorsFor(pal);
  deltas_->setRowCount(0);
  const app::BenchRun& base = compared_[0];
  for (size_t i = 1; i < compared_.size(); ++i) {
    for (const app::ComparisonRow& row : app::CompareRuns(base, compared_[i])) {
      for (const auto& m : row.metrics) {
        if (m.name != key) continue;
        const int r = deltas_->rowCount();
        deltas_->insertRow(r);
        deltas_->setItem(r, 0, new QTableWidgetItem(QString::fromStdString(row.test)));
        deltas_->setItem(r, 1, new QTableWidgetItem(metric_label));
        deltas_->setItem(r, 2, new QTableWidgetItem(
                                   QStringLiteral("%1: %2").arg(RunName(base)).arg(m.a, 0, 'f', 1)));
        deltas_->setItem(r, 3, new QTableWidgetItem(RunName(compared_[i])));
        deltas_->setItem(r, 4, new QTableWidgetItem(QString::number(m.b, 'f', 1)));
        auto* d = new QTableWidgetItem(QStringLiteral("%1%2 %")
                                           .arg(m.delta_pct >= 0 ? QStringLiteral("+") : QString())
                                           .arg(m.delta_pct, 0, 'f', 1));
        const bool better = higher_is_better ? m.delta_pct > 0 : m.delta_pct < 0;
        if (std::abs(m.delta_pct) >= 1.0) d->setForeground(better ? sc.good : sc.bad);
        deltas_->setItem(r, 5, d);
      }
    }
  }
  deltas_->resizeColumnsToContents();
}

bool BenchPanel::exportCsv(const QString& file) {
  if (compared_.empty()) return false;
  QString out = QStringLiteral(
      "run_id,label,test,prompt_size,response_size,depth,concurrency,metric,mean,std,"
      "delta_vs_run_%1_pct\n")
                    .arg(compared_[0].id);
  auto quote = [](QString s) {
    if (s.contains(QLatin1Char(',')) || s.contains(QLatin1Char('"'))) {
      s.replace(QLatin1String("\""), QLatin1String("\"\""));
      s = QLatin1Char('"') + s + QLatin1Char('"');
    }
    return s;
  };
  for (const app::BenchRun& run : compared_) {
    std::map<std::pair<std::string, std::string>, double> deltas;  // (test, metric) -> %
    if (run.id != compared_[0].id) {
      for (const auto& row : app::CompareRuns(compared_[0], run))
        for (const auto& m : row.metrics) deltas[{row.test, m.name}] = m.delta_pct;
    }
    for (const app::BenchResult& r : run.results) {
      for (const MetricDef& def : kMetrics) {
        const app::MetricStats* m = Metric(r, def.key);
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
