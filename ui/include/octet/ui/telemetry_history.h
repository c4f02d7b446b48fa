// TelemetryHistory: the recent past of every job and node, built from
// successive cluster snapshots, for the dashboard's charts.
//
// A job's point is taken when its rank 0 reports a new sample: tok/s,
// requests and training figures are rank 0's (every rank of a TP instance
// works on the same tokens; rank 0 of a DP run reports the global figures);
// the all-reduce share is the mean over the ranks seen, memory the sum.
// x is seconds since the history's first sample. Points older than `window_s`
// before the newest are dropped.
#pragma once

#include <QPointF>
#include <QString>
#include <QVector>
#include <cstdint>
#include <map>

#include "octet/app/cluster_session.h"

namespace octet::ui {

struct JobHistory {
  QString job_id;
  QString kind;   // "inference", "training", "router"
  QString state;  // the worker's latest state
  QVector<QPointF> prefill_tps;
  QVector<QPointF> decode_tps;
  QVector<QPointF> running_requests;
  QVector<QPointF> queued_requests;
  QVector<QPointF> allreduce_percent;  // 0..100
  QVector<QPointF> memory_gib;         // all ranks
  QVector<QPointF> train_loss;         // training jobs only
  QVector<QPointF> train_tps;
  double last_x = -1;
  int ranks_seen = 0;
};

class TelemetryHistory {
 public:
  explicit TelemetryHistory(double window_s = 120) : window_s_(window_s) {}

  // Adds what is new in `snapshot`; returns whether anything was added.
  bool Add(const app::ClusterSnapshot& snapshot);
  // Adds rank 0's figures of a job no agent reports (an instance the
  // workbench started on this machine, app::LocalInstance) under `job_id`,
  // sampled at `unix_ms` (the clock of the agents' samples); returns whether
  // it was new.
  bool AddWorker(const QString& job_id, const app::WorkerFigures& figures, int64_t unix_ms);
  void Clear();

  const std::map<QString, JobHistory>& jobs() const { return jobs_; }
  // Per node: memory used (GiB) over time.
  const std::map<QString, QVector<QPointF>>& nodeMemory() const { return node_memory_; }
  double now() const { return now_; }  // x of the newest sample
  double window() const { return window_s_; }

 private:
  void Trim(QVector<QPointF>* points) const;
  void TrimAll();
  double X(int64_t unix_ms);

  double window_s_;
  int64_t t0_ms_ = -1;
  double now_ = 0;
  std::map<QString, int64_t> last_sample_ms_;  // per node
  std::map<QString, JobHistory> jobs_;
  std::map<QString, QVector<QPointF>> node_memory_;
};

}  // namespace octet::ui
