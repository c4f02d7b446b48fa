#include "octet/ui/telemetry_history.h"

#include <algorithm>

namespace octet::ui {

void TelemetryHistory::Clear() {
  t0_ms_ = -1;
  now_ = 0;
  last_sample_ms_.clear();
  jobs_.clear();
  node_memory_.clear();
}

void TelemetryHistory::Trim(QVector<QPointF>* points) const {
  const double cutoff = now_ - window_s_;
  int drop = 0;
  while (drop < points->size() && (*points)[drop].x() < cutoff) ++drop;
  if (drop > 0) points->remove(0, drop);
}

bool TelemetryHistory::Add(const app::ClusterSnapshot& s) {
  bool added = false;
  // Per job, across the nodes' latest samples: sums and means over ranks.
  struct Across {
    double allreduce_sum = 0;
    int ranks = 0;
    double memory = 0;
  };
  std::map<QString, Across> across;
  for (const auto& n : s.nodes) {
    if (!n.has_telemetry) continue;
    for (const auto& w : n.telemetry.workers) {
      Across& a = across[QString::fromStdString(w.job_id)];
      a.allreduce_sum += w.allreduce_share;
      a.memory += static_cast<double>(w.memory_bytes);
      ++a.ranks;
    }
  }
  for (const auto& n : s.nodes) {
    if (!n.has_telemetry || n.telemetry.unix_ms <= 0) continue;
    const QString node = QString::fromStdString(n.name);
    auto last = last_sample_ms_.find(node);
    if (last != last_sample_ms_.end() && n.telemetry.unix_ms <= last->second) continue;
    last_sample_ms_[node] = n.telemetry.unix_ms;
    if (t0_ms_ < 0) t0_ms_ = n.telemetry.unix_ms;
    const double x = static_cast<double>(n.telemetry.unix_ms - t0_ms_) / 1000.0;
    now_ = std::max(now_, x);
    added = true;
    node_memory_[node].append(
        QPointF(x, static_cast<double>(n.telemetry.mem_used_bytes) / (1ull << 30)));
    for (const auto& w : n.telemetry.workers) {
      if (w.rank != 0) continue;
      const QString id = QString::fromStdString(w.job_id);
      JobHistory& j = jobs_[id];
      j.job_id = id;
      j.kind = QString::fromStdString(w.kind);
      j.state = QString::fromStdString(w.state);
      if (x <= j.last_x) continue;
      j.last_x = x;
      const Across& a = across[id];
      j.ranks_seen = a.ranks;
      if (j.kind == QLatin1String("training")) {
        if (w.train_step > 0) {
          j.train_loss.append(QPointF(x, w.train_loss));
          j.train_tps.append(QPointF(x, w.train_tps));
        }
      } else {
        j.prefill_tps.append(QPointF(x, w.prefill_tps));
        j.decode_tps.append(QPointF(x, w.decode_tps));
        j.running_requests.append(QPointF(x, w.running_requests));
        j.queued_requests.append(QPointF(x, w.queued_requests));
      }
      j.allreduce_percent.append(QPointF(x, a.ranks ? 100.0 * a.allreduce_sum / a.ranks : 0));
      j.memory_gib.append(QPointF(x, a.memory / (1ull << 30)));
    }
  }
  if (!added) return false;
  TrimAll();
  return true;
}

double TelemetryHistory::X(int64_t unix_ms) {
  if (t0_ms_ < 0) t0_ms_ = unix_ms;
  const double x = static_cast<double>(unix_ms - t0_ms_) / 1000.0;
  now_ = std::max(now_, x);
  return x;
}

bool TelemetryHistory::AddWorker(const QString& id, const app::WorkerFigures& w, int64_t unix_ms) {
  const double x = X(unix_ms);
  JobHistory& j = jobs_[id];
  j.job_id = id;
  j.kind = w.kind.empty() ? QStringLiteral("inference") : QString::fromStdString(w.kind);
  j.state = QString::fromStdString(w.state);
  if (x <= j.last_x) return false;
  j.last_x = x;
  j.ranks_seen = 1;
  j.prefill_tps.append(QPointF(x, w.prefill_tps));
  j.decode_tps.append(QPointF(x, w.decode_tps));
  j.running_requests.append(QPointF(x, w.running_requests));
  j.queued_requests.append(QPointF(x, w.queued_requests));
  j.allreduce_percent.append(QPointF(x, 100.0 * w.allreduce_share));
  j.memory_gib.append(QPointF(x, static_cast<double>(w.memory_bytes) / (1ull << 30)));
  TrimAll();
  return true;
}

void TelemetryHistory::TrimAll() {
  for (auto& [node, points] : node_memory_) Trim(&points);
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    JobHistory& j = it->second;
    for (QVector<QPointF>* v :
         {&j.prefill_tps, &j.decode_tps, &j.running_requests, &j.queued_requests,
          &j.allreduce_percent, &j.memory_gib, &j.train_loss, &j.train_tps}) {
      Trim(v);
    }
    // A job whose last point left the window is forgotten.
    if (j.last_x < now_ - window_s_) {
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace octet::ui
