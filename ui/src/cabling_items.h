// The cabling diagram's scene items (cabling_items.cpp draws them): a node's
// card, a shared segment's switch box and a link, and the card sizes the
// layout (cabling_view.cpp) places them by. Internal to the ui library.
#pragma once

#include <QGraphicsItem>
#include <QPointF>
#include <QRectF>
#include <QSizeF>
#include <QString>
#include <QStringList>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "octet/app/cluster_session.h"

namespace octet::ui {

namespace cabling {

inline constexpr double kCardWidth = 236;
inline constexpr double kCardHeight = 132;
inline constexpr double kSwitchWidth = 170;
inline constexpr double kSwitchHeight = 54;
inline const QSizeF kSwitchHalf(kSwitchWidth / 2, kSwitchHeight / 2);

// Card sizes: a card grows with its RoCE and model rows; the layout and the
// links' labels keep clear of it by these.
size_t RocePortCount(const app::NodeView& n);
size_t RoceRowsFor(size_t ports);
size_t ModelRowsFor(const app::NodeView& n);
double CardHeightFor(size_t roce_ports, size_t model_rows);
QSizeF CardHalfFor(const app::NodeView& n);

// One RoCE row as drawn: the device, and its state and MTU or its warnings.
struct RoceRowText {
  QString device;
  QString status;
  bool warning = false;
  bool active = false;
};

}  // namespace cabling

class NodeCardItem : public QGraphicsItem {
 public:
  explicit NodeCardItem(const QString& name);
  QRectF boundingRect() const override;
  QString jobsText() const { return JobsText(); }
  QString modelsText() const;
  const QString& name() const { return name_; }
  const std::vector<cabling::RoceRowText>& roceRows() const { return roce_rows_; }
  void setSelectedCard(bool on) {
    if (on == selected_) return;
    selected_ = on;
    update();
  }
  // Telemetry arrives at 10 Hz; the card is redrawn only when something it
  // shows changed (the figures as drawn, not the raw samples).
  void setView(const app::NodeView& node, const QString& problem, bool bad_problem);

  void paint(QPainter* p, const QStyleOptionGraphicsItem*, QWidget*) override;

 private:
  long CpuPercent() const { return std::lround(node_.telemetry.cpu_busy * 100); }
  uint64_t MemoryTotal() const {
    return node_.has_telemetry ? node_.telemetry.mem_total_bytes : node_.facts.memory.total_bytes;
  }
  QString HardwareText() const;
  QString MemoryText() const;
  // The running jobs of `octet deploy` replicas on this node: (job id, replica name).
  std::vector<std::pair<QString, QString>> DeployedReplicas() const;
  QString JobsText() const;
  QString WarningText() const;
  const app::RoceWarning& FirstPortWarning() const;
  // Everything paint() draws, with the memory bar in tenths of a percent.
  QString Face() const;

  QString name_;
  app::NodeView node_;
  QString problem_;
  bool bad_problem_ = false;
  bool selected_ = false;
  QString face_;  // what the card shows; a change repaints it
  app::RoceSummary roce_;
  std::vector<cabling::RoceRowText> roce_rows_;
  double height_ = cabling::kCardHeight;
};

class SegmentItem : public QGraphicsItem {
 public:
  explicit SegmentItem(const QString& label);
  QRectF boundingRect() const override;
  void paint(QPainter* p, const QStyleOptionGraphicsItem*, QWidget*) override;

 private:
  QString label_;
};

class LinkItem : public QGraphicsItem {
 public:
  enum class Look { kNormal, kWarning, kBroken };
  // `a_half` and `b_half`: half the size of what sits at each end (the label
  // goes in the middle of the part of the line that is not hidden by it).
  LinkItem(QPointF a, QPointF b, Look look, QSizeF a_half, QSizeF b_half);
  void setLabel(const QStringList& lines) {
    prepareGeometryChange();
    lines_ = lines;
    update();
  }
  const QStringList& label() const { return lines_; }
  Look look() const { return look_; }
  QRectF boundingRect() const override;
  void paint(QPainter* p, const QStyleOptionGraphicsItem*, QWidget*) override;

 private:
  QRectF labelRect() const;
  QPointF a_, b_, mid_;
  Look look_;
  QStringList lines_;
};

}  // namespace octet::ui
