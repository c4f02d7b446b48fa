// The cabling diagram: nodes as cards (state, address, memory bar, jobs; the
// replicas of `octet deploy` by name, in their job's colour),
// links as edges labelled with their interfaces and, once probed, latency and
// throughput; shared segments (a switch) as a box the nodes hang from.
//
// Layout follows the classification: a ring is drawn as a circle in ring
// order, a switch as a star around the switch box, anything else as a circle
// in profile order with its segments placed among their members. Problems the
// analysis found are drawn where they are: a ring's missing link as a dashed
// red edge between the chain's ends, one-way links and unexpected peers in the
// warning colour, unreachable or lost nodes with a red frame.
//
// Each card lists the node's RoCE ports (link state and MTU, from the agent's
// RDMA facts) and marks what the agent warns about: an MTU under 9000, a
// ConnectX-7 port half that is down or has no IPv4 address while the other is
// in use, a port without a RoCE v2 GID; the full facts, the NCCL settings and
// the warnings' text are in the card's tooltip.
//
// The view rebuilds its items only when the shape changes (nodes, edges,
// segments, RoCE row counts); telemetry updates only repaint the cards, so
// 10 Hz updates stay cheap on the GUI thread.
#pragma once

#include <QGraphicsView>
#include <QHash>
#include <QPointF>
#include <QString>
#include <map>
#include <vector>

#include "octet/app/cluster_session.h"

namespace octet::ui {

class NodeCardItem;
class LinkItem;
class SegmentItem;

// Positions of node cards and segment boxes (scene coordinates, card centres).
struct CablingLayout {
  std::vector<QPointF> nodes;     // one per snapshot node
  std::vector<QPointF> segments;  // one per cabling segment (used for shared ones)
};
CablingLayout LayoutCabling(const app::ClusterSnapshot& snapshot);

// Probe results by edge key ("a|a_if|b|b_if").
using ProbeResults = std::map<std::string, app::LinkProbeReport>;
std::string EdgeKey(const app::CablingEdge& edge);

class CablingView : public QGraphicsView {
  Q_OBJECT
 public:
  explicit CablingView(QWidget* parent = nullptr);

  void setSnapshot(const app::ClusterSnapshot& snapshot);
  void setProbeResults(const ProbeResults& results);
  // Selects a node's card by name ("" clears).
  void selectNode(const QString& name);
  QString selectedNode() const { return selected_; }

  // For tests: what is drawn.
  int nodeCardCount() const { return static_cast<int>(cards_.size()); }
  int linkCount() const { return static_cast<int>(links_.size()); }
  int warningLinkCount() const;
  QStringList linkLabels() const;
  int switchCount() const { return static_cast<int>(segments_.size()); }
  // A node's RoCE rows as drawn, "device: status" ("rocep1s0f1: up · MTU 9000",
  // "roceP2p1s0f1: ⚠ half down"), and how many rows of all cards carry a warning.
  QStringList roceRows(const QString& name) const;
  int roceWarningRowCount() const;
  // The card's tooltip: RoCE ports in full, NCCL settings, warnings.
  QString nodeToolTip(const QString& name) const;
  // The jobs line of a node's card: "2 jobs", or the `octet deploy` replicas it
  // runs by name ("large-0"), each drawn in its job's colour.
  QString nodeJobsText(const QString& name) const;
  // The models line of a node's card: each repo its store holds with its size
  // ("acme/tiny 1.2 MiB · org/big 3.4 GiB"); "" when it holds none.
  QString nodeModelsText(const QString& name) const;
  // Where a node's card is, in view (viewport) coordinates; (-1,-1) when absent.
  QPoint nodeCardPosition(const QString& name) const;

 signals:
  void nodeSelected(const QString& name);

 protected:
  void resizeEvent(QResizeEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  bool event(QEvent* event) override;

 private:
  void rebuild(const app::ClusterSnapshot& snapshot);
  void refreshCards(const app::ClusterSnapshot& snapshot);
  void refreshLinks();
  void fit();
  std::string shapeKey(const app::ClusterSnapshot& snapshot) const;

  QGraphicsScene* scene_;
  std::string shape_key_;
  std::vector<NodeCardItem*> cards_;
  std::vector<LinkItem*> links_;
  std::vector<SegmentItem*> segments_;
  app::ClusterSnapshot snapshot_;
  ProbeResults probes_;
  QString selected_;
};

}  // namespace octet::ui
