// Per-node memory occupancy: one bar per node, split into the memory each job
// uses (in the job's colour), other use (the OS and processes Octet did not
// start; zero on simulated nodes), and free; with a legend of the jobs.
// Hovering a segment names it and its size.
#pragma once

#include <QString>
#include <QWidget>
#include <vector>

#include "octet/app/cluster_session.h"

namespace octet::ui {

struct MemorySegment {
  QString label;   // job id, "other" or "free"
  QString job_id;  // empty for other/free
  uint64_t bytes = 0;
};
struct MemoryRow {
  QString node;
  bool up = false;
  uint64_t total_bytes = 0;
  std::vector<MemorySegment> segments;  // jobs (by id), then other, then free; sums to total
};
// The rows for a snapshot (pure; the widget paints them).
std::vector<MemoryRow> MemoryRowsFor(const app::ClusterSnapshot& snapshot);

class MemoryBars : public QWidget {
  Q_OBJECT
 public:
  explicit MemoryBars(QWidget* parent = nullptr);
  void setSnapshot(const app::ClusterSnapshot& snapshot);
  const std::vector<MemoryRow>& rows() const { return rows_; }
  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* event) override;
  bool event(QEvent* event) override;

 private:
  struct Hit {
    QRectF rect;
    QString text;
  };
  int rowHeight() const;
  std::vector<MemoryRow> rows_;
  std::vector<Hit> hits_;
};

}  // namespace octet::ui
