#include "octet/ui/cabling_view.h"

#include <QEvent>
#include <QGraphicsItem>
#include <QGraphicsScene>
#include <QMouseEvent>
#include <QPainter>
#include <QResizeEvent>
#include <algorithm>
#include <cmath>
#include <set>

#include "cabling_items.h"
#include "octet/ui/theme.h"

namespace octet::ui {

using cabling::CardHalfFor;
using cabling::kCardWidth;
using cabling::kSwitchHalf;
using cabling::RocePortCount;
using cabling::RoceRowsFor;

namespace {

constexpr double kPi = 3.14159265358979323846;

}  // namespace

std::string EdgeKey(const app::CablingEdge& e) {
  return e.a_node + "|" + e.a_interface + "|" + e.b_node + "|" + e.b_interface;
}

CablingLayout LayoutCabling(const app::ClusterSnapshot& s) {
  CablingLayout out;
  const size_t n = s.nodes.size();
  out.nodes.assign(n, QPointF(0, 0));
  out.segments.assign(s.cabling.segments.size(), QPointF(0, 0));
  if (n == 0) return out;
  // Order around the circle: ring order when there is one, else profile order.
  std::vector<size_t> order;
  if (s.cabling.kind == app::CablingKind::kRing && s.cabling.ring_order.size() == n) {
    for (const auto& name : s.cabling.ring_order) {
      for (size_t i = 0; i < n; ++i) {
        if (s.nodes[i].name == name) order.push_back(i);
      }
    }
  }
  if (order.size() != n) {
    order.clear();
    for (size_t i = 0; i < n; ++i) order.push_back(i);
  }
  if (n == 1) {
    out.nodes[0] = QPointF(0, s.cabling.segments.empty() ? 0 : -120);
  } else if (n == 2) {
    out.nodes[order[0]] = QPointF(-260, 0);
    out.nodes[order[1]] = QPointF(260, 0);
  } else {
    // An ellipse wider than tall (cards are wide); even counts start half a
    // step off the top so four nodes make a square, not a diamond.
    const double r = std::max(240.0, 0.5 * (kCardWidth + 60) / std::sin(kPi / n));
    const double rx = r * 1.3, ry = r * 0.82;
    const double start = -90.0 - (n % 2 == 0 ? 180.0 / n : 0.0);
    for (size_t k = 0; k < n; ++k) {
      const double a = (start + 360.0 * k / n) * kPi / 180.0;
      out.nodes[order[k]] = QPointF(rx * std::cos(a), ry * std::sin(a));
    }
  }
  // A shared segment sits at the centroid of its members (the centre for a full switch).
  for (size_t g = 0; g < s.cabling.segments.size(); ++g) {
    const auto& seg = s.cabling.segments[g];
    QPointF sum(0, 0);
    int count = 0;
    std::set<size_t> members;
    for (const auto& ep : seg.endpoints) {
      const std::string node = ep.substr(0, ep.rfind(':'));
      for (size_t i = 0; i < n; ++i) {
        if (s.nodes[i].name == node) members.insert(i);
      }
    }
    for (size_t i : members) {
      sum += out.nodes[i];
      ++count;
    }
    out.segments[g] = count > 0 ? sum / count : QPointF(0, 0);
    if (n == 2 && seg.shared) out.segments[g] = QPointF(0, 140);
    if (n == 1 && seg.shared) out.segments[g] = QPointF(0, 60);
  }
  return out;
}

// ---- view -------------------------------------------------------------------

CablingView::CablingView(QWidget* parent)
    : QGraphicsView(parent), scene_(new QGraphicsScene(this)) {
  setObjectName(QStringLiteral("cablingView"));
  setScene(scene_);
  setRenderHint(QPainter::Antialiasing);
  setRenderHint(QPainter::TextAntialiasing);
  setFrameShape(QFrame::NoFrame);
  setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  // Only the changed cards' regions: the cards sit around an ellipse, so the
  // rect bounding two changed cards is most of the view (bench_workbench_stall).
  setViewportUpdateMode(QGraphicsView::MinimalViewportUpdate);
  setMinimumSize(320, 240);
}

std::string CablingView::shapeKey(const app::ClusterSnapshot& s) const {
  std::string key = std::to_string(static_cast<int>(s.cabling.kind)) + "#";
  // A card's height follows its RoCE rows; a new count re-lays the diagram.
  for (const auto& n : s.nodes)
    key += n.name + "/" + std::to_string(RoceRowsFor(RocePortCount(n))) + ",";
  key += "#";
  for (const auto& e : s.cabling.edges) key += EdgeKey(e) + (e.bidirectional ? "+" : "-") + ";";
  key += "#";
  for (const auto& g : s.cabling.segments)
    key += (g.shared ? "S" : "D") + std::to_string(g.endpoints.size());
  key += "#";
  for (const auto& p : s.cabling.problems) key += p.kind + ":" + p.message + ";";
  return key;
}

void CablingView::setSnapshot(const app::ClusterSnapshot& snapshot) {
  snapshot_ = snapshot;
  const std::string key = shapeKey(snapshot);
  if (key != shape_key_) {
    shape_key_ = key;
    rebuild(snapshot);
  } else {
    refreshCards(snapshot);
  }
}

void CablingView::setProbeResults(const ProbeResults& results) {
  probes_ = results;
  rebuild(snapshot_);
}

int CablingView::warningLinkCount() const {
  int n = 0;
  for (const auto* l : links_) n += l->look() != LinkItem::Look::kNormal;
  return n;
}

QStringList CablingView::linkLabels() const {
  QStringList out;
  for (const auto* l : links_) out << l->label().join(QStringLiteral(" / "));
  return out;
}

QStringList CablingView::roceRows(const QString& name) const {
  QStringList out;
  for (const auto* c : cards_) {
    if (c->name() != name) continue;
    for (const auto& r : c->roceRows()) out << r.device + QStringLiteral(": ") + r.status;
  }
  return out;
}

int CablingView::roceWarningRowCount() const {
  int n = 0;
  for (const auto* c : cards_) {
    for (const auto& r : c->roceRows()) n += r.warning;
  }
  return n;
}

QString CablingView::nodeToolTip(const QString& name) const {
  for (const auto* c : cards_) {
    if (c->name() == name) return c->toolTip();
  }
  return {};
}

QString CablingView::nodeJobsText(const QString& name) const {
  for (const auto* c : cards_) {
    if (c->name() == name) return c->jobsText();
  }
  return {};
}

QString CablingView::nodeModelsText(const QString& name) const {
  for (const auto* c : cards_) {
    if (c->name() == name) return c->modelsText();
  }
  return {};
}

QPoint CablingView::nodeCardPosition(const QString& name) const {
  for (const auto* c : cards_) {
    if (c->name() == name) return mapFromScene(c->pos());
  }
  return QPoint(-1, -1);
}

void CablingView::rebuild(const app::ClusterSnapshot& s) {
  scene_->clear();
  cards_.clear();
  links_.clear();
  segments_.clear();
  const CablingLayout layout = LayoutCabling(s);
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < s.nodes.size(); ++i) index[s.nodes[i].name] = i;

  auto probe_text = [this](const app::CablingEdge& e) -> QString {
    auto it = probes_.find(EdgeKey(e));
    if (it == probes_.end()) return {};
    if (!it->second.ok) return QStringLiteral("probe failed");
    const auto& r = it->second.result;
    return QStringLiteral("%1 · %2 Gb/s")
        .arg(FormatMicros(r.rtt_us_p50))
        .arg(r.throughput_gbps, 0, 'f', r.throughput_gbps >= 10 ? 1 : 2);
  };

  // Shared segments: a box with one spoke per member interface.
  for (size_t g = 0; g < s.cabling.segments.size(); ++g) {
    const auto& seg = s.cabling.segments[g];
    if (!seg.shared) continue;
    auto* box = new SegmentItem(s.cabling.declared ? QStringLiteral("switch (declared)")
                                                   : QStringLiteral("switch"));
    box->setPos(layout.segments[g]);
    scene_->addItem(box);
    segments_.push_back(box);
    for (const auto& ep : seg.endpoints) {
      const size_t colon = ep.rfind(':');
      const std::string node = ep.substr(0, colon), iface = ep.substr(colon + 1);
      auto it = index.find(node);
      if (it == index.end()) continue;
      // The worst probe among this node's pairs on the segment.
      QString worst;
      double worst_gbps = -1;
      bool one_way = false;
      for (const auto& e : s.cabling.edges) {
        if (e.segment != static_cast<int>(g) || (e.a_node != node && e.b_node != node)) continue;
        one_way = one_way || !e.bidirectional;
        auto pr = probes_.find(EdgeKey(e));
        if (pr == probes_.end()) continue;
        if (!pr->second.ok) {
          worst = QStringLiteral("probe failed");
          worst_gbps = 0;
        } else if (worst_gbps < 0 || pr->second.result.throughput_gbps < worst_gbps) {
          worst_gbps = pr->second.result.throughput_gbps;
          worst = QStringLiteral("worst pair ") + probe_text(e);
        }
      }
      auto* link = new LinkItem(layout.nodes[it->second], layout.segments[g],
                                one_way ? LinkItem::Look::kWarning : LinkItem::Look::kNormal,
                                CardHalfFor(s.nodes[it->second]), kSwitchHalf);
      QStringList label{QString::fromStdString(iface)};
      if (!worst.isEmpty()) label << worst;
      link->setLabel(label);
      scene_->addItem(link);
      links_.push_back(link);
    }
  }
  // Direct cables.
  for (const auto& e : s.cabling.edges) {
    if (e.segment >= 0 && static_cast<size_t>(e.segment) < s.cabling.segments.size() &&
        s.cabling.segments[e.segment].shared) {
      continue;
    }
    auto a = index.find(e.a_node), b = index.find(e.b_node);
    if (a == index.end() || b == index.end()) continue;
    auto* link = new LinkItem(layout.nodes[a->second], layout.nodes[b->second],
                              e.bidirectional ? LinkItem::Look::kNormal : LinkItem::Look::kWarning,
                              CardHalfFor(s.nodes[a->second]), CardHalfFor(s.nodes[b->second]));
    QStringList label{QStringLiteral("%1 ↔ %2").arg(QString::fromStdString(e.a_interface),
                                                    QString::fromStdString(e.b_interface))};
    if (!e.bidirectional) label << QStringLiteral("one-way");
    if (QString p = probe_text(e); !p.isEmpty()) label << p;
    link->setLabel(label);
    scene_->addItem(link);
    links_.push_back(link);
  }
  // A ring's missing cable, where it should be.
  for (const auto& p : s.cabling.problems) {
    if (p.kind != "missing-ring-link" || p.nodes.size() != 2) continue;
    auto a = index.find(p.nodes[0]), b = index.find(p.nodes[1]);
    if (a == index.end() || b == index.end()) continue;
    auto* link =
        new LinkItem(layout.nodes[a->second], layout.nodes[b->second], LinkItem::Look::kBroken,
                     CardHalfFor(s.nodes[a->second]), CardHalfFor(s.nodes[b->second]));
    link->setLabel({QStringLiteral("missing link")});
    scene_->addItem(link);
    links_.push_back(link);
  }
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    auto* card = new NodeCardItem(QString::fromStdString(s.nodes[i].name));
    card->setPos(layout.nodes[i]);
    card->setSelectedCard(card->name() == selected_);
    scene_->addItem(card);
    cards_.push_back(card);
  }
  refreshCards(s);
  fit();
}

void CablingView::refreshCards(const app::ClusterSnapshot& s) {
  for (size_t i = 0; i < cards_.size() && i < s.nodes.size(); ++i) {
    QString problem;
    bool bad = false;
    for (const auto& p : s.cabling.problems) {
      if (p.kind == "missing-ring-link") continue;  // drawn as an edge
      if (std::find(p.nodes.begin(), p.nodes.end(), s.nodes[i].name) == p.nodes.end()) continue;
      if (!problem.isEmpty()) continue;
      problem = QString::fromStdString(p.kind);
      if (p.kind == "unreachable") {
        problem = QStringLiteral("unreachable");
        bad = true;
      }
    }
    cards_[i]->setView(s.nodes[i], problem, bad);
  }
}

void CablingView::selectNode(const QString& name) {
  selected_ = name;
  for (auto* c : cards_) c->setSelectedCard(c->name() == name);
}

void CablingView::fit() {
  if (scene_->items().isEmpty()) return;
  QRectF r = scene_->itemsBoundingRect().adjusted(-24, -24, 24, 24);
  scene_->setSceneRect(r);
  const double sx = viewport()->width() / r.width();
  const double sy = viewport()->height() / r.height();
  const double s = std::min({sx, sy, 1.25});
  setTransform(QTransform::fromScale(s, s));
  centerOn(r.center());
}

void CablingView::resizeEvent(QResizeEvent* event) {
  QGraphicsView::resizeEvent(event);
  fit();
}

void CablingView::mousePressEvent(QMouseEvent* event) {
  for (QGraphicsItem* item : items(event->pos())) {
    for (auto* card : cards_) {
      if (card == item) {
        selectNode(card->name());
        emit nodeSelected(card->name());
        return;
      }
    }
  }
  QGraphicsView::mousePressEvent(event);
}

bool CablingView::event(QEvent* event) {
  if (event->type() == QEvent::PaletteChange || event->type() == QEvent::ApplicationPaletteChange) {
    // Items draw from cached pixmaps: each must be redrawn in the new colours.
    for (QGraphicsItem* item : scene_->items()) item->update();
  }
  return QGraphicsView::event(event);
}

}  // namespace octet::ui
