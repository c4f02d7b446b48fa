// The cabling diagram's items: a node's card (state, address, RoCE rows,
// models, memory bar, jobs), a shared segment's switch box, and a link with its
// label; declared in cabling_items.h.
#include "cabling_items.h"

#include <QApplication>
#include <QFontMetricsF>
#include <QPainter>
#include <QPainterPath>
#include <algorithm>

#include "octet/ui/job_colors.h"
#include "octet/ui/theme.h"

namespace octet::ui {

using cabling::CardHeightFor;
using cabling::kCardWidth;
using cabling::kSwitchHeight;
using cabling::kSwitchWidth;
using cabling::ModelRowsFor;
using cabling::RoceRowText;

namespace {

// RoCE port rows on a card: one per port (a Spark has four: two QSFP ports of
// two PCIe halves each), at most kMaxRoceRows (the last says how many more).
constexpr double kRoceRowHeight = 15;
constexpr size_t kMaxRoceRows = 6;

QPalette Palette() { return QApplication::palette(); }

QFont ScaledFont(double point_delta, bool bold = false) {
  QFont f = QApplication::font();
  f.setPointSizeF(std::max(6.0, f.pointSizeF() + point_delta));
  f.setBold(bold);
  return f;
}

}  // namespace

namespace cabling {

// RoCE ports a node reports (Ethernet link layer), counted without building
// the summary: the shape key and card heights need only the count.
size_t RocePortCount(const app::NodeView& n) {
  if (!n.has_facts) return 0;
  size_t count = 0;
  for (const auto& d : n.facts.rdma_devices) {
    for (const auto& p : d.ports) count += p.link_layer == "Ethernet";
  }
  return count;
}

size_t RoceRowsFor(size_t ports) { return std::min(ports, kMaxRoceRows); }

// One row under the RoCE rows for the models the node's store holds.
size_t ModelRowsFor(const app::NodeView& n) {
  return n.has_models && !n.models.models.empty() ? 1 : 0;
}

// The rows take the blank band above the memory bar first, then grow the card.
double CardHeightFor(size_t roce_ports, size_t model_rows) {
  const double rows = static_cast<double>(RoceRowsFor(roce_ports) + model_rows);
  return std::max(kCardHeight, kCardHeight + rows * kRoceRowHeight - 20);
}

QSizeF CardHalfFor(const app::NodeView& n) {
  return QSizeF(kCardWidth / 2, CardHeightFor(RocePortCount(n), ModelRowsFor(n)) / 2);
}

}  // namespace cabling

namespace {

// "acme/tiny 1.2 MiB · org/big 3.4 GiB": each repo once, its largest snapshot.
QString ModelsLine(const app::NodeView& n) {
  if (!n.has_models) return {};
  std::vector<std::pair<std::string, int64_t>> repos;
  for (const auto& m : n.models.models) {
    auto it =
        std::find_if(repos.begin(), repos.end(), [&](const auto& r) { return r.first == m.repo; });
    if (it == repos.end()) {
      repos.emplace_back(m.repo, m.bytes);
    } else {
      it->second = std::max(it->second, m.bytes);
    }
  }
  QStringList parts;
  for (const auto& [repo, bytes] : repos) {
    parts << QStringLiteral("%1 %2").arg(QString::fromStdString(repo),
                                         FormatBytesIec(static_cast<double>(bytes)));
  }
  return parts.join(QStringLiteral(" · "));
}

std::vector<RoceRowText> RoceRowTexts(const app::RoceSummary& roce) {
  std::vector<RoceRowText> rows;
  const size_t n = roce.ports.size();
  const size_t shown = n > kMaxRoceRows ? kMaxRoceRows - 1 : n;
  for (size_t i = 0; i < shown; ++i) {
    const app::RocePortRow& r = roce.ports[i];
    RoceRowText t;
    t.device = QString::fromStdString(r.device);
    if (r.port != 1) t.device += QStringLiteral("/%1").arg(r.port);
    t.active = r.state == "ACTIVE";
    if (!r.warnings.empty()) {
      t.warning = true;
      QStringList words;
      for (const auto& w : r.warnings) {
        words << QString::fromStdString(app::RoceWarningShortText(w, &r));
      }
      t.status = QStringLiteral("⚠ ") + words.join(QStringLiteral(", "));
    } else {
      const QString state =
          t.active ? QStringLiteral("up") : QString::fromStdString(r.state).toLower();
      t.status = r.netdev_mtu ? QStringLiteral("%1 · MTU %2").arg(state).arg(r.netdev_mtu) : state;
    }
    rows.push_back(std::move(t));
  }
  if (shown < n) {
    RoceRowText more;
    size_t warned = 0;
    for (size_t i = shown; i < n; ++i) warned += !roce.ports[i].warnings.empty();
    more.device = QStringLiteral("+%1 more").arg(n - shown);
    more.warning = warned > 0;
    if (warned) more.status = QStringLiteral("⚠ %1 with warnings").arg(warned);
    rows.push_back(std::move(more));
  }
  return rows;
}

// The card's tooltip: every RoCE port in full, the NCCL settings, the warnings.
QString RoceToolTip(const app::NodeFacts& f, const app::RoceSummary& roce) {
  if (roce.ports.empty() && roce.warning_count == 0) return {};
  QStringList lines{QStringLiteral("RoCE ports")};
  for (const auto& r : roce.ports) {
    QString line = QStringLiteral("%1 port %2 · %3 · %4")
                       .arg(QString::fromStdString(r.device))
                       .arg(r.port)
                       .arg(QString::fromStdString(r.netdev.empty() ? "?" : r.netdev),
                            QString::fromStdString(r.state));
    if (!r.phys_state.empty())
      line += QStringLiteral(" (%1)").arg(QString::fromStdString(r.phys_state));
    if (r.netdev_mtu) line += QStringLiteral(" · MTU %1").arg(r.netdev_mtu);
    if (r.active_mtu) line += QStringLiteral(" (RoCE %1)").arg(r.active_mtu);
    if (!r.rate.empty()) line += QStringLiteral(" · ") + QString::fromStdString(r.rate);
    line += r.v2_gid_index >= 0 ? QStringLiteral(" · RoCE v2 GID %1").arg(r.v2_gid_index)
                                : QStringLiteral(" · no RoCE v2 IPv4 GID");
    lines << line;
  }
  if (!f.nccl.ib_hca.empty()) {
    lines << QStringLiteral("NCCL_IB_HCA=%1").arg(QString::fromStdString(f.nccl.ib_hca));
    lines
        << QStringLiteral("NCCL_IB_GID_INDEX=%1").arg(QString::fromStdString(f.nccl.ib_gid_index));
    if (!f.nccl.socket_ifname.empty()) {
      lines << QStringLiteral("NCCL_SOCKET_IFNAME=%1")
                   .arg(QString::fromStdString(f.nccl.socket_ifname));
    }
  }
  for (const auto& w : f.roce_warnings)
    lines << QStringLiteral("⚠ ") + QString::fromStdString(w.message);
  return lines.join(QChar('\n'));
}

}  // namespace

// ---- items ------------------------------------------------------------------

NodeCardItem::NodeCardItem(const QString& name) : name_(name) {
  setZValue(10);
  // Repainting a card that did not change is a pixmap copy (the view
  // repaints every item under the changed cards' regions).
  setCacheMode(QGraphicsItem::DeviceCoordinateCache);
  setAcceptedMouseButtons(Qt::LeftButton);
  setCursor(Qt::PointingHandCursor);
}

QRectF NodeCardItem::boundingRect() const {
  return QRectF(-kCardWidth / 2 - 4, -height_ / 2 - 4, kCardWidth + 8, height_ + 8);
}

QString NodeCardItem::modelsText() const { return ModelsLine(node_); }

void NodeCardItem::setView(const app::NodeView& node, const QString& problem, bool bad_problem) {
  node_ = node;
  problem_ = problem;
  bad_problem_ = bad_problem;
  // RoCE facts change with facts (every few seconds at most), not telemetry;
  // the summary of four ports is a few small strings either way.
  roce_ = node_.has_facts ? app::SummarizeRoce(node_.facts) : app::RoceSummary{};
  roce_rows_ = RoceRowTexts(roce_);
  QString tip = node_.has_facts ? RoceToolTip(node_.facts, roce_) : QString();
  if (tip != toolTip()) setToolTip(tip);
  QString face = Face();
  if (face == face_) return;
  face_ = std::move(face);
  const double height = CardHeightFor(roce_.ports.size(), ModelRowsFor(node_));
  if (height != height_) {
    prepareGeometryChange();
    height_ = height;
  }
  update();
}

void NodeCardItem::paint(QPainter* p, const QStyleOptionGraphicsItem*, QWidget*) {
  const QPalette pal = Palette();
  const StatusColors sc = StatusColorsFor(pal);
  const QRectF r(-kCardWidth / 2, -height_ / 2, kCardWidth, height_);
  p->setRenderHint(QPainter::Antialiasing);
  QColor state_color = sc.muted;
  QString state_text = QStringLiteral("connecting");
  if (node_.state == app::NodeState::kUp) {
    state_color = sc.good;
    state_text = QStringLiteral("up");
  } else if (node_.state == app::NodeState::kLost) {
    state_color = sc.bad;
    state_text = QStringLiteral("lost");
  }
  QColor border = Mix(pal.color(QPalette::Window), pal.color(QPalette::WindowText), 0.25);
  double border_width = 1.2;
  if (!problem_.isEmpty() || roce_.warning_count > 0) {
    border = bad_problem_ ? sc.bad : sc.warning;
    border_width = 2;
  }
  if (node_.state == app::NodeState::kLost) {
    border = sc.bad;
    border_width = 2;
  }
  if (selected_) {
    border = sc.accent;
    border_width = 2.6;
  }
  // Shadow, card, state stripe.
  p->setPen(Qt::NoPen);
  p->setBrush(QColor(0, 0, 0, IsDarkPalette(pal) ? 90 : 28));
  p->drawRoundedRect(r.translated(0, 2.5), 10, 10);
  p->setBrush(pal.color(QPalette::Base));
  p->setPen(QPen(border, border_width));
  p->drawRoundedRect(r, 10, 10);
  QPainterPath stripe;
  stripe.addRoundedRect(QRectF(r.left(), r.top(), 12, r.height()), 10, 10);
  QPainterPath clip;
  clip.addRect(QRectF(r.left(), r.top(), 5, r.height()));
  p->setPen(Qt::NoPen);
  p->setBrush(state_color);
  p->drawPath(stripe.intersected(clip));

  const double left = r.left() + 16, right = r.right() - 12;
  const QColor text = pal.color(QPalette::Text);
  // Title row: name and state chip.
  p->setFont(ScaledFont(1.5, true));
  p->setPen(text);
  QFontMetricsF fm(p->font());
  p->drawText(QPointF(left, r.top() + 8 + fm.ascent()), name_);
  p->setFont(ScaledFont(-1.5, true));
  QFontMetricsF chip_fm(p->font());
  const double chip_w = chip_fm.horizontalAdvance(state_text) + 14;
  const QRectF chip(right - chip_w, r.top() + 9, chip_w, chip_fm.height() + 4);
  p->setPen(Qt::NoPen);
  p->setBrush(Mix(state_color, pal.color(QPalette::Base), 0.82));
  p->drawRoundedRect(chip, chip.height() / 2, chip.height() / 2);
  p->setPen(state_color.darker(IsDarkPalette(pal) ? 80 : 115));
  p->drawText(chip, Qt::AlignCenter, state_text);

  // Second row: address and CPU load.
  p->setFont(ScaledFont(-1.5));
  QFontMetricsF small(p->font());
  double y = r.top() + 8 + fm.height() + 4 + small.ascent();
  p->setPen(sc.muted);
  QString sub = QString::fromStdString(node_.address);
  if (node_.has_telemetry && node_.state == app::NodeState::kUp) {
    sub += QStringLiteral("  ·  CPU %1%").arg(CpuPercent());
  }
  p->drawText(QPointF(left, y), small.elidedText(sub, Qt::ElideRight, right - left));
  y += small.height() + 1;
  p->drawText(QPointF(left, y), small.elidedText(HardwareText(), Qt::ElideRight, right - left));
  // RoCE ports: a dot for the link, the device, then state and MTU or what is wrong.
  y += 4;
  for (const RoceRowText& row : roce_rows_) {
    y += kRoceRowHeight;
    const QColor mark = row.warning ? sc.warning : row.active ? sc.good : sc.muted;
    p->setPen(Qt::NoPen);
    p->setBrush(mark);
    p->drawEllipse(QPointF(left + 3, y - small.ascent() / 2 + 1), 3, 3);
    p->setPen(row.warning ? sc.warning : pal.color(QPalette::Text));
    const double status_w = small.horizontalAdvance(row.status);
    const double device_w = std::max(0.0, right - left - 10 - status_w - 6);
    p->drawText(QPointF(left + 10, y), small.elidedText(row.device, Qt::ElideRight, device_w));
    p->setPen(row.warning ? sc.warning : sc.muted);
    p->drawText(QPointF(right - status_w, y), row.status);
  }
  // The models the node holds, names and sizes.
  if (ModelRowsFor(node_) > 0) {
    y += kRoceRowHeight;
    p->setPen(sc.muted);
    p->drawText(QPointF(left, y), small.elidedText(QObject::tr("models: ") + ModelsLine(node_),
                                                   Qt::ElideRight, right - left));
  }

  // Memory bar: each job's memory in its colour, the rest used, free.
  const double bar_top = r.bottom() - 44;
  const QRectF bar(left, bar_top, right - left, 9);
  const uint64_t total =
      node_.has_telemetry ? node_.telemetry.mem_total_bytes : node_.facts.memory.total_bytes;
  const uint64_t used = node_.has_telemetry ? node_.telemetry.mem_used_bytes : 0;
  p->setPen(Qt::NoPen);
  p->setBrush(Mix(pal.color(QPalette::Base), pal.color(QPalette::Text), 0.1));
  p->drawRoundedRect(bar, 4, 4);
  if (total > 0) {
    QPainterPath bar_clip;
    bar_clip.addRoundedRect(bar, 4, 4);
    p->save();
    p->setClipPath(bar_clip);
    double x = bar.left();
    uint64_t jobs_bytes = 0;
    if (node_.has_telemetry) {
      for (const auto& w : node_.telemetry.workers) {
        const double wpx = bar.width() * static_cast<double>(w.memory_bytes) / total;
        p->setBrush(JobColor(QString::fromStdString(w.job_id), pal));
        p->drawRect(QRectF(x, bar.top(), wpx, bar.height()));
        x += wpx;
        jobs_bytes += w.memory_bytes;
      }
    }
    if (used > jobs_bytes) {
      const double opx = bar.width() * static_cast<double>(used - jobs_bytes) / total;
      p->setBrush(sc.muted);
      p->drawRect(QRectF(x, bar.top(), opx, bar.height()));
    }
    p->restore();
  }
  p->setPen(sc.muted);
  p->drawText(QRectF(left, bar.bottom() + 2, right - left, small.height()), Qt::AlignLeft,
              MemoryText());
  const auto replicas = DeployedReplicas();
  if (replicas.empty()) {
    p->drawText(QRectF(left, bar.bottom() + 2, right - left, small.height()), Qt::AlignRight,
                JobsText());
  } else {
    // A deployment's replicas by name, each in its job's colour (right to left).
    double x = right;
    for (auto it = replicas.rbegin(); it != replicas.rend(); ++it) {
      const double w = small.horizontalAdvance(it->second);
      p->setPen(JobColor(it->first, pal));
      p->drawText(QRectF(x - w, bar.bottom() + 2, w, small.height()), Qt::AlignRight, it->second);
      x -= w + small.horizontalAdvance(QLatin1Char(' '));
    }
  }
  // Problem line (or the lost reason).
  const QString warn = WarningText();
  if (!warn.isEmpty()) {
    p->setPen(bad_problem_ || node_.state == app::NodeState::kLost ? sc.bad : sc.warning);
    p->drawText(QPointF(left, r.bottom() - 8),
                small.elidedText(QStringLiteral("⚠ ") + warn, Qt::ElideRight, right - left));
  }
}

QString NodeCardItem::HardwareText() const {
  if (!node_.has_facts) return {};
  QString hw;
  if (!node_.facts.gpus.empty()) {
    hw = QString::fromStdString(node_.facts.gpus[0].name);
  } else {
    hw = QStringLiteral("%1 cores %2")
             .arg(node_.facts.cpu_cores)
             .arg(QString::fromStdString(node_.facts.cpu_arch));
  }
  if (node_.facts.simulated) hw += QStringLiteral(" · simulated");
  return hw;
}

QString NodeCardItem::MemoryText() const {
  const uint64_t total = MemoryTotal();
  const uint64_t used = node_.has_telemetry ? node_.telemetry.mem_used_bytes : 0;
  return total > 0 ? QStringLiteral("%1 / %2").arg(FormatBytesIec(static_cast<double>(used)),
                                                   FormatBytesIec(static_cast<double>(total)))
                   : QStringLiteral("memory unknown");
}

std::vector<std::pair<QString, QString>> NodeCardItem::DeployedReplicas() const {
  std::vector<std::pair<QString, QString>> out;
  for (const auto& j : node_.jobs) {
    if (j.state == "running" && !j.spec.instance.empty())
      out.emplace_back(QString::fromStdString(j.spec.job_id),
                       QString::fromStdString(j.spec.instance));
  }
  return out;
}

QString NodeCardItem::JobsText() const {
  QStringList names;
  for (const auto& r : DeployedReplicas()) names << r.second;
  if (!names.isEmpty()) return names.join(QLatin1Char(' '));
  int running = 0;
  for (const auto& j : node_.jobs) running += j.state == "running";
  return running == 1 ? QStringLiteral("1 job") : QStringLiteral("%1 jobs").arg(running);
}

QString NodeCardItem::WarningText() const {
  if (node_.state == app::NodeState::kLost && !node_.last_error.empty())
    return QString::fromStdString(node_.last_error);
  if (!problem_.isEmpty() || roce_.warning_count == 0) return problem_;
  if (roce_.warning_count == 1) {
    const app::RoceWarning& w =
        roce_.node_warnings.empty() ? FirstPortWarning() : roce_.node_warnings[0];
    return QStringLiteral("RoCE: ") + QString::fromStdString(w.message);
  }
  return QStringLiteral("RoCE: %1 warnings").arg(roce_.warning_count);
}

const app::RoceWarning& NodeCardItem::FirstPortWarning() const {
  for (const auto& r : roce_.ports) {
    if (!r.warnings.empty()) return r.warnings[0];
  }
  return roce_.node_warnings.at(0);
}

QString NodeCardItem::Face() const {
  QStringList face = {QString::number(static_cast<int>(node_.state)),
                      QString::fromStdString(node_.address),
                      QString::number(node_.has_telemetry ? CpuPercent() : -1),
                      HardwareText(),
                      MemoryText(),
                      JobsText(),
                      ModelsLine(node_),
                      WarningText(),
                      QString::number(static_cast<int>(bad_problem_))};
  for (const RoceRowText& row : roce_rows_) {
    face << row.device << row.status << QString::number(row.warning * 2 + row.active);
  }
  const uint64_t total = MemoryTotal();
  if (total > 0 && node_.has_telemetry) {
    auto permille = [total](uint64_t bytes) {
      return QString::number(std::llround(1000.0 * static_cast<double>(bytes) / total));
    };
    for (const auto& w : node_.telemetry.workers) {
      face << QString::fromStdString(w.job_id) << permille(w.memory_bytes);
    }
    face << permille(node_.telemetry.mem_used_bytes);
  }
  return face.join(QChar(0x1f));
}

SegmentItem::SegmentItem(const QString& label) : label_(label) {
  setZValue(5);
  setCacheMode(QGraphicsItem::DeviceCoordinateCache);
}

QRectF SegmentItem::boundingRect() const {
  return QRectF(-kSwitchWidth / 2 - 2, -kSwitchHeight / 2 - 2, kSwitchWidth + 4, kSwitchHeight + 4);
}

void SegmentItem::paint(QPainter* p, const QStyleOptionGraphicsItem*, QWidget*) {
  const QPalette pal = Palette();
  const StatusColors sc = StatusColorsFor(pal);
  const QRectF r(-kSwitchWidth / 2, -kSwitchHeight / 2, kSwitchWidth, kSwitchHeight);
  p->setRenderHint(QPainter::Antialiasing);
  p->setPen(QPen(Mix(sc.accent, pal.color(QPalette::Base), 0.3), 1.5));
  p->setBrush(Mix(sc.accent, pal.color(QPalette::Base), 0.88));
  p->drawRoundedRect(r, 8, 8);
  // Port dots along the bottom edge.
  p->setPen(Qt::NoPen);
  p->setBrush(Mix(sc.accent, pal.color(QPalette::Base), 0.45));
  for (int i = 0; i < 8; ++i) {
    p->drawRoundedRect(QRectF(r.left() + 18 + i * 17.5, r.bottom() - 13, 11, 6), 1.5, 1.5);
  }
  p->setPen(pal.color(QPalette::Text));
  p->setFont(ScaledFont(0, true));
  p->drawText(r.adjusted(0, 6, 0, -16), Qt::AlignHCenter | Qt::AlignTop, label_);
}

LinkItem::LinkItem(QPointF a, QPointF b, Look look, QSizeF a_half, QSizeF b_half)
    : a_(a), b_(b), look_(look) {
  setZValue(1);
  setCacheMode(QGraphicsItem::DeviceCoordinateCache);
  const QPointF d = b - a;
  auto exit = [&](QSizeF half) {
    double t = 1;
    if (std::fabs(d.x()) > 1e-9) t = std::min(t, half.width() / std::fabs(d.x()));
    if (std::fabs(d.y()) > 1e-9) t = std::min(t, half.height() / std::fabs(d.y()));
    return t;
  };
  const double ta = exit(a_half), tb = 1 - exit(b_half);
  mid_ = ta < tb ? a + d * ((ta + tb) / 2) : (a + b) / 2;
}

QRectF LinkItem::boundingRect() const {
  QRectF r = QRectF(a_, b_).normalized().adjusted(-4, -4, 4, 4);
  return r.united(labelRect());
}

void LinkItem::paint(QPainter* p, const QStyleOptionGraphicsItem*, QWidget*) {
  const QPalette pal = Palette();
  const StatusColors sc = StatusColorsFor(pal);
  p->setRenderHint(QPainter::Antialiasing);
  QColor color = Mix(pal.color(QPalette::WindowText), pal.color(QPalette::Window), 0.35);
  QPen pen(color, 2.2);
  if (look_ == Look::kWarning) pen = QPen(sc.warning, 2.6);
  if (look_ == Look::kBroken) {
    pen = QPen(sc.bad, 2.6, Qt::DashLine);
    pen.setDashPattern({4, 3});
  }
  pen.setCapStyle(Qt::RoundCap);
  p->setPen(pen);
  p->drawLine(a_, b_);
  if (lines_.isEmpty()) return;
  const QRectF lr = labelRect();
  p->setPen(
      QPen(look_ == Look::kNormal ? Mix(color, pal.color(QPalette::Window), 0.5) : pen.color(), 1));
  p->setBrush(pal.color(QPalette::Window));
  p->drawRoundedRect(lr, 5, 5);
  p->setFont(ScaledFont(-2));
  QFontMetricsF fm(p->font());
  double y = lr.top() + 3 + fm.ascent();
  for (int i = 0; i < lines_.size(); ++i) {
    p->setPen(i == 0 ? pal.color(QPalette::WindowText) : sc.muted);
    if (look_ != Look::kNormal && i == 0) p->setPen(pen.color());
    p->drawText(QPointF(lr.center().x() - fm.horizontalAdvance(lines_[i]) / 2, y), lines_[i]);
    y += fm.height();
  }
}

QRectF LinkItem::labelRect() const {
  if (lines_.isEmpty()) return QRectF();
  QFont f = ScaledFont(-2);
  QFontMetricsF fm(f);
  double w = 0;
  for (const auto& l : lines_) w = std::max(w, fm.horizontalAdvance(l));
  const double h = fm.height() * lines_.size() + 6;
  const QPointF c = mid_;
  return QRectF(c.x() - w / 2 - 7, c.y() - h / 2, w + 14, h);
}

}  // namespace octet::ui
