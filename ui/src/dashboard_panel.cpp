#include "octet/ui/dashboard_panel.h"

#include <QChart>
#include <QChartView>
#include <QComboBox>
#include <QEvent>
#include <QGridLayout>
#include <QHideEvent>
#include <QLabel>
#include <QLegendMarker>
#include <QLineSeries>
#include <QSet>
#include <QVBoxLayout>
#include <QValueAxis>
#include <algorithm>
#include <cmath>

#include "octet/ui/instance_manager.h"
#include "octet/ui/job_colors.h"
#include "octet/ui/theme.h"
#include "octet/ui/widgets.h"

namespace octet::ui {

namespace {

// Brings a series in line with `points` (both sorted by x) in one replace():
// one geometry update of the chart item per series and tick. (Qt Charts'
// append(QList) adds point by point, each a full update, and removePoints is
// another: a panel shown after being hidden caught up in O(new points x n).)
// Nothing is done when the series already holds exactly these points.
void SyncSeries(QXYSeries* s, const QVector<QPointF>& points) {
  const int n = s->count();
  if (n == points.size() &&
      (n == 0 || (s->at(0) == points.front() && s->at(n - 1) == points.back()))) {
    return;
  }
  s->replace(QList<QPointF>(points.begin(), points.end()));
}

QLabel* KpiTile(const QString& title, const QString& object_name, QWidget* parent, QLayout* into) {
  auto* card = new Card(parent);
  auto* l = new QVBoxLayout(card);
  l->setContentsMargins(14, 10, 14, 10);
  l->setSpacing(2);
  l->addWidget(SectionLabel(title, card));
  auto* value = new QLabel(QStringLiteral("—"), card);
  value->setObjectName(object_name);
  QFont f = value->font();
  f.setPointSizeF(f.pointSizeF() * 1.6);
  f.setBold(true);
  value->setFont(f);
  l->addWidget(value);
  into->addWidget(card);
  return value;
}

}  // namespace

// ---- TimeChart ----------------------------------------------------------------

TimeChart::TimeChart(const QString& title, const QString& y_title, QWidget* parent)
    : QWidget(parent), chart_(new QChart), x_(new QValueAxis), y_(new QValueAxis) {
  auto* l = new QVBoxLayout(this);
  l->setContentsMargins(0, 0, 0, 0);
  chart_->setTitle(title);
  chart_->legend()->setAlignment(Qt::AlignBottom);
  chart_->setMargins(QMargins(4, 4, 4, 4));
  chart_->setBackgroundRoundness(8);
  chart_->setAnimationOptions(QChart::NoAnimation);
  x_->setTitleText(tr("seconds"));
  x_->setLabelFormat(QStringLiteral("%.0f"));
  x_->setTickCount(7);
  x_->setRange(0, 120);
  y_->setTitleText(y_title);
  y_->setLabelFormat(QStringLiteral("%.4g"));
  y_->setRange(0, 1);
  y_->setTickCount(5);
  chart_->addAxis(x_, Qt::AlignBottom);
  chart_->addAxis(y_, Qt::AlignLeft);
  view_ = new QChartView(chart_, this);
  view_->setRenderHint(QPainter::Antialiasing);
  view_->setMinimumSize(240, 200);
  l->addWidget(view_);
  applyPalette();
}

void TimeChart::setRightAxisTitle(const QString& title) {
  if (!y_right_) {
    y_right_ = new QValueAxis;
    y_right_->setLabelFormat(QStringLiteral("%.4g"));
    y_right_->setRange(0, 1);
    y_right_->setTickCount(5);
    chart_->addAxis(y_right_, Qt::AlignRight);
  }
  y_right_->setTitleText(title);
  applyPalette();
}

void TimeChart::setXAxisTitle(const QString& title) { x_->setTitleText(title); }

QList<QPointF> TimeChart::points(const QString& key) const {
  const QLineSeries* s = series_.value(key, nullptr);
  return s ? s->points() : QList<QPointF>();
}

void TimeChart::applyPalette() {
  const QPalette pal = palette();
  const bool dark = IsDarkPalette(pal);
  chart_->setBackgroundBrush(pal.color(QPalette::Base));
  chart_->setBackgroundPen(
      QPen(Mix(pal.color(QPalette::Window), pal.color(QPalette::WindowText), 0.18), 1));
  chart_->setPlotAreaBackgroundVisible(false);
  const QColor text = pal.color(QPalette::Text);
  const QColor muted = StatusColorsFor(pal).muted;
  const QColor grid = Mix(pal.color(QPalette::Base), text, dark ? 0.16 : 0.1);
  QFont title = font();
  title.setBold(true);
  chart_->setTitleFont(title);
  chart_->setTitleBrush(text);
  chart_->legend()->setLabelColor(text);
  QFont small = font();
  small.setPointSizeF(small.pointSizeF() * 0.88);
  chart_->legend()->setFont(small);
  for (QValueAxis* a : {x_, y_, y_right_}) {
    if (!a) continue;
    a->setLabelsBrush(muted);
    a->setLabelsFont(small);
    a->setTitleBrush(muted);
    a->setTitleFont(small);
    a->setGridLineColor(grid);
    a->setMinorGridLineColor(grid);
    a->setLinePenColor(grid);
  }
  view_->setBackgroundBrush(pal.color(QPalette::Window));
}

void TimeChart::setSeries(const QString& key, const QString& name, const QColor& color,
                          const QVector<QPointF>& points, bool dashed, bool right_axis) {
  QLineSeries* s = series_.value(key, nullptr);
  if (!s) {
    s = new QLineSeries(chart_);
    s->setName(name);
    QPen pen(color, 2.2);
    if (dashed) pen.setStyle(Qt::DashLine);
    s->setPen(pen);
    chart_->addSeries(s);
    s->attachAxis(x_);
    s->attachAxis(right_axis && y_right_ ? y_right_ : y_);
    series_.insert(key, s);
    on_right_.insert(key, right_axis && y_right_);
  }
  SyncSeries(s, points);
}

void TimeChart::retain(const QSet<QString>& keep) {
  for (auto it = series_.begin(); it != series_.end();) {
    if (!keep.contains(it.key())) {
      chart_->removeSeries(it.value());
      delete it.value();
      on_right_.remove(it.key());
      it = series_.erase(it);
    } else {
      ++it;
    }
  }
}

void TimeChart::setTimeRange(double now, double window) {
  const double hi = std::max(now, window);
  x_->setRange(hi - window, hi);
  double max_left = 0, max_right = 0;
  for (auto it = series_.begin(); it != series_.end(); ++it) {
    double& m = on_right_.value(it.key()) ? max_right : max_left;
    for (const QPointF& p : it.value()->points()) {
      if (p.x() >= hi - window) m = std::max(m, p.y());
    }
  }
  // Round tick labels; a chart with two value axes keeps one grid (four
  // intervals on both sides).
  const int most = y_right_ ? 4 : 6;
  ApplyNiceScale(y_, NiceScaleFor(max_left * 1.1, 4, most));
  if (y_right_) ApplyNiceScale(y_right_, NiceScaleFor(max_right * 1.1, 4, 4));
}

// ---- DashboardPanel -------------------------------------------------------------

DashboardPanel::DashboardPanel(ClusterController* controller, QWidget* parent)
    : QWidget(parent), controller_(controller) {
  setObjectName(QStringLiteral("dashboardPanel"));
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(18, 14, 18, 14);
  header_ = new PanelHeader(
      tr("Dashboard"), tr("Live figures of the running jobs, from each worker's telemetry"), this);
  outer->addWidget(header_);
  auto* kpis = new QHBoxLayout;
  kpis->setSpacing(10);
  kpi_decode_ = KpiTile(tr("Decode"), QStringLiteral("kpiDecode"), this, kpis);
  kpi_prefill_ = KpiTile(tr("Prefill"), QStringLiteral("kpiPrefill"), this, kpis);
  kpi_requests_ = KpiTile(tr("Requests running"), QStringLiteral("kpiRequests"), this, kpis);
  kpi_jobs_ = KpiTile(tr("Jobs running"), QStringLiteral("kpiJobs"), this, kpis);
  kpi_memory_ = KpiTile(tr("Cluster memory"), QStringLiteral("kpiMemory"), this, kpis);
  kpi_acceptance_ = KpiTile(tr("Draft acceptance"), QStringLiteral("kpiAcceptance"), this, kpis);
  kpi_acceptance_->setToolTip(
      tr("Speculative decoding: the share of drafted tokens the model kept, over every instance "
         "launched with --speculative (— when none drafts)"));
  outer->addLayout(kpis);
  empty_hint_ = new QLabel(
      tr("No job is running. Launch an instance or a training run from <b>Launch</b> (Ctrl+2); "
         "its tokens per second appear here as they happen."),
      this);
  empty_hint_->setObjectName(QStringLiteral("dashboardHint"));
  empty_hint_->setForegroundRole(QPalette::PlaceholderText);
  outer->addWidget(empty_hint_);

  auto* grid = new QGridLayout;
  grid->setSpacing(10);
  charts_.push_back(new TimeChart(tr("Decode tok/s per job"), tr("tok/s"), this));
  charts_.push_back(new TimeChart(tr("Prefill tok/s per job"), tr("tok/s"), this));
  charts_.push_back(new TimeChart(tr("Concurrency"), tr("requests"), this));
  charts_.push_back(new TimeChart(tr("All-reduce share of step time"), tr("%"), this));
  charts_.push_back(new TimeChart(tr("Memory used per node"), tr("GiB"), this));
  charts_.push_back(new TimeChart(tr("Training"), tr("loss"), this));
  charts_.back()->setRightAxisTitle(tr("tok/s"));
  const char* names[] = {"chartDecode",    "chartPrefill", "chartConcurrency",
                         "chartAllReduce", "chartMemory",  "chartTraining"};
  for (int i = 0; i < 6; ++i) {
    charts_[i]->setObjectName(QLatin1String(names[i]));
    // Hidden until revealed after the panel shows (see revealNextChart); the
    // grid keeps their places meanwhile.
    QSizePolicy policy = charts_[i]->sizePolicy();
    policy.setRetainSizeWhenHidden(true);
    charts_[i]->setSizePolicy(policy);
    charts_[i]->setVisible(false);
    charts_[i]->view()->viewport()->installEventFilter(this);
    grid->addWidget(charts_[i], i / 3, i % 3);
  }
  installEventFilter(this);  // the panel's own paint starts the charts (eventFilter)
  reveal_fallback_.setSingleShot(true);
  reveal_fallback_.setInterval(100);
  connect(&reveal_fallback_, &QTimer::timeout, this, [this] {
    if (awaiting_paint_) revealNextChart();
  });
  outer->addLayout(grid, 1);

  // A training run started from the Launch panel: its curves against the step.
  run_box_ = new QWidget(this);
  run_box_->setObjectName(QStringLiteral("trainingRunBox"));
  auto* rl = new QVBoxLayout(run_box_);
  rl->setContentsMargins(0, 6, 0, 0);
  auto* rhead = new QHBoxLayout;
  rhead->addWidget(SectionLabel(tr("Training run on this machine"), run_box_));
  run_choice_ = new QComboBox(run_box_);
  run_choice_->setObjectName(QStringLiteral("trainingRun"));
  run_choice_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  rhead->addWidget(run_choice_);
  run_figures_ = new QLabel(run_box_);
  run_figures_->setObjectName(QStringLiteral("trainingRunFigures"));
  run_figures_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  rhead->addWidget(run_figures_, 1);
  rl->addLayout(rhead);
  auto* rcharts = new QHBoxLayout;
  run_loss_ = new TimeChart(tr("Loss"), tr("loss"), run_box_);
  run_loss_->setObjectName(QStringLiteral("chartRunLoss"));
  run_loss_->setXAxisTitle(tr("step"));
  run_tps_ = new TimeChart(tr("Training tok/s"), tr("tok/s"), run_box_);
  run_tps_->setObjectName(QStringLiteral("chartRunTps"));
  run_tps_->setXAxisTitle(tr("step"));
  rcharts->addWidget(run_loss_);
  rcharts->addWidget(run_tps_);
  rl->addLayout(rcharts);
  run_box_->setVisible(false);
  outer->addWidget(run_box_, 1);
  connect(run_choice_, qOverload<int>(&QComboBox::activated), this, [this] {
    shown_run_ = run_choice_->currentData().toInt();
    run_dirty_ = true;
    if (isVisible()) refreshTrainingRun();
  });

  connect(controller_, &ClusterController::snapshotChanged, this,
          [this](const SnapshotPtr& s) { addSnapshot(*s); });
  connect(controller_, &ClusterController::phaseChanged, this,
          [this](ClusterController::Phase phase, const QString&) {
            if (phase == ClusterController::Phase::kStarting) {
              history_.Clear();
              dirty_ = true;
              if (isVisible()) refresh();
            }
          });
}

TimeChart* DashboardPanel::chart(Chart which) const { return charts_[static_cast<int>(which)]; }

void DashboardPanel::addSnapshot(const app::ClusterSnapshot& snapshot) {
  if (history_.Add(snapshot)) dirty_ = true;
  if (isVisible()) {
    updateKpis(snapshot);
    if (dirty_) refresh();
  }
}

void DashboardPanel::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  updateKpis(*controller_->snapshot());
  refresh();
  if (run_dirty_) refreshTrainingRun();
  if (revealed_ == 0) {
    // The first chart follows the panel's own first paint (its header and
    // figures), the next one each chart's paint.
    awaiting_paint_ = true;
    reveal_fallback_.start();
  }
}

void DashboardPanel::hideEvent(QHideEvent* event) {
  QWidget::hideEvent(event);
  if (event->spontaneous()) return;  // the window minimised: the charts stay as they are
  // Shown again, the panel draws its charts one per event-loop turn again.
  for (auto* c : charts_) c->setVisible(false);
  revealed_ = 0;
  awaiting_paint_ = false;
  reveal_fallback_.stop();
}

// The first draw of six charts (resize, layout, axes, text) is tens of
// milliseconds of GUI-thread time at once. Shown one per event-loop turn,
// each after the previous one has been painted, the panel answers input
// between charts; the headline figures appear at once.
void DashboardPanel::revealNextChart() {
  awaiting_paint_ = false;
  reveal_fallback_.stop();
  if (!isVisible() || revealed_ >= static_cast<int>(charts_.size())) return;
  charts_[revealed_++]->setVisible(true);
  awaiting_paint_ = true;
  // Normally the chart's paint schedules the next; this only covers a chart
  // that is not painted (a window that is not exposed).
  reveal_fallback_.start();
}

bool DashboardPanel::eventFilter(QObject* watched, QEvent* event) {
  QObject* last_shown = revealed_ > 0 ? charts_[revealed_ - 1]->view()->viewport() : this;
  if (event->type() == QEvent::Paint && awaiting_paint_ && watched == last_shown) {
    awaiting_paint_ = false;
    // Queued: runs after this paint and the rest of its update request.
    QMetaObject::invokeMethod(this, &DashboardPanel::revealNextChart, Qt::QueuedConnection);
  }
  return QWidget::eventFilter(watched, event);
}

void DashboardPanel::setInstanceManager(InstanceManager* instances) {
  instances_ = instances;
  connect(instances_, &InstanceManager::changed, this, &DashboardPanel::refreshRunList);
  connect(instances_, &InstanceManager::trainingFigures, this, [this](int id) {
    if (id != shown_run_) return;
    run_dirty_ = true;
    if (isVisible()) refreshTrainingRun();
  });
  // Inference instances started on this machine: their `octet serve
  // --figures` lines, plotted like an agent's workers (keyed by their name).
  connect(instances_, &InstanceManager::instanceFigures, this, [this](int id) {
    const InstanceInfo* info = instances_->find(id);
    if (!info || !info->has_figures) return;
    if (history_.AddWorker(info->name, info->figures, info->figures_unix_ms)) dirty_ = true;
    if (isVisible()) {
      updateKpis(*controller_->snapshot());
      if (dirty_) refresh();
    }
  });
  refreshRunList();
}

void DashboardPanel::refreshRunList() {
  QList<int> ids;
  QStringList names;
  for (const InstanceInfo& info : instances_->instances()) {
    if (info.kind != app::InstanceSpec::Kind::kTraining) continue;
    ids.append(info.id);
    names.append(QStringLiteral("%1 (%2)").arg(info.name, InstanceManager::stateName(info.state)));
  }
  // A new run is shown as it starts; otherwise the choice stays.
  const int newest = ids.isEmpty() ? -1 : ids.last();
  const bool added = newest > 0 && run_choice_->findData(newest) < 0;
  run_choice_->clear();
  for (int i = 0; i < ids.size(); ++i) run_choice_->addItem(names[i], ids[i]);
  if (added || !ids.contains(shown_run_)) shown_run_ = newest;
  run_choice_->setCurrentIndex(run_choice_->findData(shown_run_));
  run_box_->setVisible(!ids.isEmpty());
  run_dirty_ = true;
  if (isVisible()) refreshTrainingRun();
}

void DashboardPanel::refreshTrainingRun() {
  run_dirty_ = false;
  const InstanceInfo* info = instances_ ? instances_->find(shown_run_) : nullptr;
  if (drawn_run_ != shown_run_) {
    // Another run's points: start over (the series are matched by step).
    run_loss_->retain({});
    run_tps_->retain({});
    drawn_run_ = shown_run_;
  }
  if (!info) {
    run_figures_->clear();
    return;
  }
  const app::TrainingCurves& c = info->training;
  auto to_points = [](const std::vector<app::TrainingPoint>& v) {
    QVector<QPointF> out;
    out.reserve(static_cast<int>(v.size()));
    for (const app::TrainingPoint& p : v) out.append(QPointF(static_cast<double>(p.step), p.value));
    return out;
  };
  const QPalette pal = palette();
  run_loss_->setSeries(QStringLiteral("train"), tr("train loss"), SeriesColor(0, pal),
                       to_points(c.train_loss()));
  run_loss_->setSeries(QStringLiteral("val"), tr("validation loss"), SeriesColor(1, pal),
                       to_points(c.val_loss()), true);
  run_tps_->setSeries(QStringLiteral("tps"), tr("train tok/s"), SeriesColor(2, pal),
                      to_points(c.train_tps()));
  int64_t last = c.total_steps();
  if (!c.train_loss().empty()) last = std::max(last, c.train_loss().back().step);
  const double x_max = static_cast<double>(std::max<int64_t>(1, last));
  run_loss_->setTimeRange(x_max, x_max);
  run_tps_->setTimeRange(x_max, x_max);
  QString text = InstanceManager::stateName(info->state);
  if (const auto& f = c.latest(); f && f->has_step) {
    text += tr(" · step %1/%2 · loss %3 · %4 tok/s · step %5 ms (compute %6, all-reduce %7%) · "
               "MFU %8%")
                .arg(f->train_step)
                .arg(f->train_total_steps)
                .arg(f->train_loss, 0, 'f', 4)
                .arg(f->train_tps, 0, 'f', 0)
                .arg(f->step_ms, 0, 'f', 0)
                .arg(f->compute_ms, 0, 'f', 0)
                .arg(100 * f->allreduce_share, 0, 'f', 1)
                .arg(100 * f->mfu, 0, 'f', 2);
    if (f->has_val) {
      text += tr(" · validation loss %1 at step %2").arg(f->val_loss, 0, 'f', 4).arg(f->val_step);
      if (f->val_bpb >= 0) text += tr(" (%1 bits/byte)").arg(f->val_bpb, 0, 'f', 3);
    }
  }
  run_figures_->setText(text);
}

void DashboardPanel::changeEvent(QEvent* event) {
  if (event->type() == QEvent::PaletteChange) {
    for (auto* c : charts_) c->applyPalette();
    if (run_loss_) run_loss_->applyPalette();
    if (run_tps_) run_tps_->applyPalette();
  }
  QWidget::changeEvent(event);
}

void DashboardPanel::updateKpis(const app::ClusterSnapshot& s) {
  double decode = 0, prefill = 0;
  int requests = 0;
  uint64_t drafted = 0, accepted = 0;
  QSet<QString> jobs;
  uint64_t used = 0, total = 0;
  for (const auto& n : s.nodes) {
    for (const auto& j : n.jobs) {
      if (j.state == "running") jobs.insert(QString::fromStdString(j.spec.job_id));
    }
    if (!n.has_telemetry) continue;
    used += n.telemetry.mem_used_bytes;
    total += n.telemetry.mem_total_bytes;
    for (const auto& w : n.telemetry.workers) {
      if (w.rank != 0) continue;
      decode += w.decode_tps;
      prefill += w.prefill_tps;
      requests += static_cast<int>(w.running_requests);
      drafted += w.spec_drafted_tokens;
      accepted += w.spec_accepted_tokens;
    }
  }
  // Inference instances started on this machine (no agent reports them).
  if (instances_) {
    for (const InstanceInfo& info : instances_->instances()) {
      if (info.kind != app::InstanceSpec::Kind::kInference || !info.has_figures ||
          info.state != InstanceInfo::State::kReady || !info.nodes.isEmpty()) {
        continue;
      }
      jobs.insert(QStringLiteral("local/%1").arg(info.id));
      decode += info.figures.decode_tps;
      prefill += info.figures.prefill_tps;
      requests += static_cast<int>(info.figures.running_requests);
      drafted += info.figures.spec_drafted_tokens;
      accepted += info.figures.spec_accepted_tokens;
    }
  }
  kpi_decode_->setText(FormatTps(decode));
  kpi_prefill_->setText(FormatTps(prefill));
  kpi_requests_->setText(QString::number(requests));
  kpi_jobs_->setText(QString::number(jobs.size()));
  kpi_memory_->setText(
      total ? QStringLiteral("%1 / %2").arg(FormatBytesIec(static_cast<double>(used)),
                                            FormatBytesIec(static_cast<double>(total)))
            : QStringLiteral("—"));
  kpi_acceptance_->setText(
      drafted ? QStringLiteral("%1 %").arg(
                    100.0 * static_cast<double>(accepted) / static_cast<double>(drafted), 0, 'f', 1)
              : QStringLiteral("—"));
  empty_hint_->setVisible(jobs.isEmpty());
}

void DashboardPanel::refresh() {
  dirty_ = false;
  const QPalette pal = palette();
  QSet<QString> inference, training, nodes;
  for (const auto& [id, j] : history_.jobs()) {
    const QColor c = JobColor(id, pal);
    if (j.kind == QLatin1String("training")) {
      training.insert(id + "/loss");
      training.insert(id + "/tps");
      // What a series shows comes first: a legend elides a long job id at
      // its end, and two series of one job must stay apart.
      charts_[5]->setSeries(id + "/loss", tr("loss · %1").arg(id), c, j.train_loss);
      charts_[5]->setSeries(id + "/tps", tr("tok/s · %1").arg(id), c, j.train_tps, true, true);
    } else {
      inference.insert(id);
      charts_[0]->setSeries(id, id, c, j.decode_tps);
      charts_[1]->setSeries(id, id, c, j.prefill_tps);
      charts_[2]->setSeries(id, tr("running · %1").arg(id), c, j.running_requests);
      charts_[2]->setSeries(id + "/q", tr("queued · %1").arg(id), c, j.queued_requests, true);
    }
    charts_[3]->setSeries(id, id, c, j.allreduce_percent);
  }
  int i = 0;
  for (const auto& [node, points] : history_.nodeMemory()) {
    nodes.insert(node);
    charts_[4]->setSeries(node, node, SeriesColor(i++, pal), points);
  }
  QSet<QString> concurrency = inference;
  for (const auto& id : inference) concurrency.insert(id + "/q");
  QSet<QString> all_jobs;
  for (const auto& [id, j] : history_.jobs()) all_jobs.insert(id);
  charts_[0]->retain(inference);
  charts_[1]->retain(inference);
  charts_[2]->retain(concurrency);
  charts_[3]->retain(all_jobs);
  charts_[4]->retain(nodes);
  charts_[5]->retain(training);
  for (auto* c : charts_) c->setTimeRange(history_.now(), history_.window());
}

}  // namespace octet::ui
