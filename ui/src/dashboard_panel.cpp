#include "octet/ui/dashboard_panel.h"

#include <QChart>
#include <QChartView>
#include <QEvent>
#include <QGridLayout>
#include <QLabel>
#include <QLegendMarker>
#include <QLineSeries>
#include <QSet>
#include <QVBoxLayout>
#include <QValueAxis>
#include <algorithm>
#include <cmath>

#include "octet/ui/job_colors.h"
#include "octet/ui/theme.h"
#include "octet/ui/widgets.h"

namespace octet::ui {

namespace {

// Brings a series in line with `points` (both sorted by x): drops what fell
// out of the window at the front, appends what is new at the back. A series
// that does not match (a restarted job) is replaced whole.
void SyncSeries(QXYSeries* s, const QVector<QPointF>& points) {
  const int n = s->count();
  if (n == 0 || points.isEmpty()) {
    if (n != 0 || !points.isEmpty()) s->replace(QList<QPointF>(points.begin(), points.end()));
    return;
  }
  const double first = points.front().x();
  int drop = 0;
  while (drop < n && s->at(drop).x() < first) ++drop;
  if (drop == n) {
    s->replace(QList<QPointF>(points.begin(), points.end()));
    return;
  }
  if (s->at(drop).x() != first) {
    s->replace(QList<QPointF>(points.begin(), points.end()));
    return;
  }
  if (drop > 0) s->removePoints(0, drop);
  const double last = s->at(s->count() - 1).x();
  auto it = std::upper_bound(points.begin(), points.end(), last,
                             [](double x, const QPointF& p) { return x < p.x(); });
  if (it != points.end()) s->append(QList<QPointF>(it, points.end()));
}

double NiceCeiling(double v) {
  if (v <= 0) return 1;
  double step = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * step >= v) return m * step;
  }
  return 10 * step;
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
  y_->setRange(0, NiceCeiling(max_left * 1.1));
  if (y_right_) y_right_->setRange(0, NiceCeiling(max_right * 1.1));
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
    grid->addWidget(charts_[i], i / 3, i % 3);
  }
  outer->addLayout(grid, 1);
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
}

void DashboardPanel::changeEvent(QEvent* event) {
  if (event->type() == QEvent::PaletteChange) {
    for (auto* c : charts_) c->applyPalette();
  }
  QWidget::changeEvent(event);
}

void DashboardPanel::updateKpis(const app::ClusterSnapshot& s) {
  double decode = 0, prefill = 0;
  int requests = 0;
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
      charts_[5]->setSeries(id + "/loss", id + tr(" loss"), c, j.train_loss);
      charts_[5]->setSeries(id + "/tps", id + tr(" tok/s"), c, j.train_tps, true, true);
    } else {
      inference.insert(id);
      charts_[0]->setSeries(id, id, c, j.decode_tps);
      charts_[1]->setSeries(id, id, c, j.prefill_tps);
      charts_[2]->setSeries(id, id + tr(" running"), c, j.running_requests);
      charts_[2]->setSeries(id + "/q", id + tr(" queued"), c, j.queued_requests, true);
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
