#include "octet/ui/memory_bars.h"

#include <QHelpEvent>
#include <QPainter>
#include <QPainterPath>
#include <QToolTip>
#include <map>

#include "octet/ui/job_colors.h"
#include "octet/ui/theme.h"

namespace octet::ui {

std::vector<MemoryRow> MemoryRowsFor(const app::ClusterSnapshot& s) {
  std::vector<MemoryRow> rows;
  for (const auto& n : s.nodes) {
    MemoryRow row;
    row.node = QString::fromStdString(n.name);
    row.up = n.state == app::NodeState::kUp;
    if (n.has_telemetry) {
      row.total_bytes = n.telemetry.mem_total_bytes;
    } else if (n.has_facts) {
      row.total_bytes = n.facts.memory.total_bytes;
    }
    uint64_t used = n.has_telemetry ? n.telemetry.mem_used_bytes : 0;
    std::map<std::string, uint64_t> per_job;  // ranks of one job on one node add up
    std::vector<std::string> order;
    if (n.has_telemetry) {
      for (const auto& w : n.telemetry.workers) {
        if (!per_job.count(w.job_id)) order.push_back(w.job_id);
        per_job[w.job_id] += w.memory_bytes;
      }
    }
    uint64_t jobs = 0;
    for (const auto& id : order) {
      const QString q = QString::fromStdString(id);
      row.segments.push_back({q, q, per_job[id]});
      jobs += per_job[id];
    }
    used = std::min(std::max(used, jobs), row.total_bytes);
    if (used > jobs) row.segments.push_back({QStringLiteral("other"), {}, used - jobs});
    if (row.total_bytes > used)
      row.segments.push_back({QStringLiteral("free"), {}, row.total_bytes - used});
    rows.push_back(std::move(row));
  }
  return rows;
}

MemoryBars::MemoryBars(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("memoryBars"));
  setMouseTracking(true);
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Preferred);
}

void MemoryBars::setSnapshot(const app::ClusterSnapshot& snapshot) {
  const size_t before = rows_.size();
  rows_ = MemoryRowsFor(snapshot);
  if (rows_.size() != before) updateGeometry();
  update();
}

int MemoryBars::rowHeight() const { return fontMetrics().height() + 12; }

QSize MemoryBars::sizeHint() const {
  return QSize(480, rowHeight() * static_cast<int>(std::max<size_t>(rows_.size(), 1)) +
                        fontMetrics().height() + 20);
}
QSize MemoryBars::minimumSizeHint() const { return QSize(240, rowHeight() * 2); }

void MemoryBars::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  const QPalette pal = palette();
  const StatusColors sc = StatusColorsFor(pal);
  const QFontMetrics fm = fontMetrics();
  hits_.clear();
  if (rows_.empty()) {
    p.setPen(sc.muted);
    p.drawText(rect(), Qt::AlignCenter, tr("No nodes yet"));
    return;
  }
  int name_w = fm.horizontalAdvance(QStringLiteral("node-00"));
  for (const auto& r : rows_) name_w = std::max(name_w, fm.horizontalAdvance(r.node));
  const int text_w = fm.horizontalAdvance(QStringLiteral("000 GiB of 000 GiB (100%)")) + 8;
  const int left = 8, bar_left = left + name_w + 14;
  const int bar_right = std::max(bar_left + 40, width() - text_w - 8);
  const int rh = rowHeight();
  int y = 6;
  std::vector<QString> legend_jobs;
  for (const auto& row : rows_) {
    p.setPen(row.up ? pal.color(QPalette::WindowText) : sc.muted);
    p.drawText(QRect(left, y, name_w, rh), Qt::AlignVCenter | Qt::AlignLeft, row.node);
    const QRectF bar(bar_left, y + (rh - 12) / 2.0, bar_right - bar_left, 12);
    QPainterPath clip;
    clip.addRoundedRect(bar, 4, 4);
    p.save();
    p.setClipPath(clip);
    p.setPen(Qt::NoPen);
    p.fillRect(bar, Mix(pal.color(QPalette::Base), pal.color(QPalette::Text), 0.08));
    double x = bar.left();
    uint64_t used = 0;
    for (const auto& seg : row.segments) {
      if (row.total_bytes == 0) break;
      const double w = bar.width() * static_cast<double>(seg.bytes) / row.total_bytes;
      QColor c;
      if (!seg.job_id.isEmpty()) {
        c = JobColor(seg.job_id, pal);
        if (std::find(legend_jobs.begin(), legend_jobs.end(), seg.job_id) == legend_jobs.end())
          legend_jobs.push_back(seg.job_id);
      } else if (seg.label == QLatin1String("other")) {
        c = sc.muted;
      } else {
        c = Qt::transparent;
      }
      if (c.alpha() > 0) p.fillRect(QRectF(x, bar.top(), w, bar.height()), c);
      hits_.push_back(
          {QRectF(x, bar.top() - 4, std::max(w, 2.0), bar.height() + 8),
           QStringLiteral("%1 on %2: %3")
               .arg(seg.label, row.node, FormatBytesIec(static_cast<double>(seg.bytes)))});
      if (seg.label != QLatin1String("free")) used += seg.bytes;
      x += w;
    }
    p.restore();
    p.setPen(QPen(Mix(pal.color(QPalette::Window), pal.color(QPalette::WindowText), 0.25), 1));
    p.setBrush(Qt::NoBrush);
    p.drawRoundedRect(bar, 4, 4);
    p.setPen(sc.muted);
    const QString text =
        row.total_bytes == 0
            ? tr("unknown")
            : QStringLiteral("%1 of %2 (%3%)")
                  .arg(FormatBytesIec(static_cast<double>(used)),
                       FormatBytesIec(static_cast<double>(row.total_bytes)))
                  .arg(std::lround(100.0 * static_cast<double>(used) / row.total_bytes));
    p.drawText(QRect(bar_right + 8, y, text_w, rh), Qt::AlignVCenter | Qt::AlignLeft, text);
    y += rh;
  }
  // Legend: jobs, other, free.
  int x = bar_left;
  y += 4;
  auto chip = [&](const QColor& c, const QString& label, bool outline) {
    const QRectF sw(x, y + (fm.height() - 10) / 2.0, 10, 10);
    p.setPen(outline ? QPen(sc.muted, 1) : Qt::NoPen);
    p.setBrush(c);
    p.drawRoundedRect(sw, 2, 2);
    p.setPen(sc.muted);
    p.drawText(QPointF(x + 14, y + fm.ascent()), label);
    x += 14 + fm.horizontalAdvance(label) + 16;
  };
  for (const auto& j : legend_jobs) chip(JobColor(j, pal), j, false);
  chip(sc.muted, tr("other use"), false);
  chip(Qt::transparent, tr("free"), true);
}

bool MemoryBars::event(QEvent* event) {
  if (event->type() == QEvent::ToolTip) {
    auto* help = static_cast<QHelpEvent*>(event);
    for (const auto& h : hits_) {
      if (h.rect.contains(help->pos())) {
        QToolTip::showText(help->globalPos(), h.text, this);
        return true;
      }
    }
    QToolTip::hideText();
    event->ignore();
    return true;
  }
  return QWidget::event(event);
}

}  // namespace octet::ui
