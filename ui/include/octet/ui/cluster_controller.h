// ClusterController: the workbench's one link to a cluster. It owns the
// ClusterSession (and, for the local embedded cluster, the LocalCluster whose
// agents it started) and turns what they report into Qt signals carrying
// plain values.
//
// Nothing here blocks the GUI thread:
//   - starting a local cluster, opening and closing a session run on a
//     lifecycle thread, in order (a new local cluster never overlaps the
//     teardown of the previous one);
//   - a pump thread polls the session's version counter every `ui_interval_ms`
//     and, when it changed, copies the snapshot and posts it to the GUI
//     thread. At most one snapshot is in flight: if the GUI is busy the pump
//     waits instead of queueing, so a slow frame never builds a backlog;
//   - job launch / stop, link probes and log reads run on a small thread pool
//     and answer with a signal.
// Results of an older connection (the person switched clusters meanwhile)
// are dropped by a generation counter.
//
// All public methods are called on the GUI thread; signals arrive there.
#pragma once

#include <QObject>
#include <QString>
#include <QThreadPool>
#include <QVector>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "octet/app/cluster_session.h"
#include "octet/app/local_cluster.h"
#include "octet/ui/connection.h"

namespace octet::ui {

using SnapshotPtr = std::shared_ptr<const app::ClusterSnapshot>;

// The outcome of an asynchronous job or probe call.
struct JobLaunchOutcome {
  QString job_id;
  bool ok = false;
  QString error;  // the session's message: names the node and rank that failed
  app::JobLaunch launch;
};
struct JobStopOutcome {
  QString job_id;
  bool ok = false;
  QString error;
};
struct LogsOutcome {
  QString job_id;
  int node = -1;
  bool ok = false;
  QString text;  // the job's output so far on that node (or the error)
};
struct ProbeOutcome {
  std::vector<app::LinkProbeReport> reports;
};

class ClusterController : public QObject {
  Q_OBJECT
 public:
  enum class Phase { kIdle, kStarting, kConnected, kFailed };

  struct Options {
    // Defaults for the local embedded cluster (binaries, state folder); the
    // shape (nodes, cabling, memory) comes from the ConnectionSpec.
    app::LocalClusterOptions local;
    app::ClusterSessionOptions session;
    int ui_interval_ms = 100;  // at most this many snapshots per second: 1000 / it
    std::string config_dir;    // "" : app::DefaultConfigDir()
  };

  explicit ClusterController(Options options, QObject* parent = nullptr);
  ~ClusterController() override;  // closes the session, stops a local cluster (joins)

  // Tears down the current connection (if any) and opens `spec`.
  void connectTo(const ConnectionSpec& spec);
  void disconnectCluster();

  Phase phase() const { return phase_; }
  QString phaseText() const { return phase_text_; }
  const ConnectionSpec& connection() const { return spec_; }
  bool isLocal() const {
    return phase_ != Phase::kIdle && spec_.kind == ConnectionSpec::Kind::kLocal;
  }
  // The latest snapshot delivered to the GUI thread (an empty one before the first).
  SnapshotPtr snapshot() const { return snapshot_; }
  // Snapshots delivered so far (for tests and the performance probe).
  uint64_t deliveredSnapshots() const { return delivered_; }

  // The local cluster while one is running (tests kill and restart nodes with it).
  app::LocalCluster* localCluster() const;
  // The session of the current connection (null when not connected). The
  // pointer keeps the connection alive for as long as it is held: a remote
  // instance outlives a switch to another cluster until it is stopped.
  std::shared_ptr<app::ClusterSession> session() const;
  const Options& options() const { return options_; }

  // Asynchronous calls; each answers with the matching signal.
  void launchJob(const app::JobRequest& request);
  void stopJob(const QString& job_id);
  void probeLinks();
  void fetchLogs(const QString& job_id, int node);
  void refreshNow();

 signals:
  void phaseChanged(octet::ui::ClusterController::Phase phase, const QString& text);
  void snapshotChanged(const octet::ui::SnapshotPtr& snapshot);
  void clusterEvent(const octet::app::ClusterEvent& event);
  void jobLaunched(const octet::ui::JobLaunchOutcome& outcome);
  void jobStopped(const octet::ui::JobStopOutcome& outcome);
  void linksProbed(const octet::ui::ProbeOutcome& outcome);
  void logsFetched(const octet::ui::LogsOutcome& outcome);

 private:
  struct Connection;
  class Pump;

  void setPhase(Phase phase, const QString& text);
  void onConnected(uint64_t generation, std::shared_ptr<Connection> connection);
  void onConnectFailed(uint64_t generation, const QString& error);
  void deliverSnapshot(uint64_t generation, SnapshotPtr snapshot);
  void updateConnectedText();

  Options options_;
  ConnectionSpec spec_;
  Phase phase_ = Phase::kIdle;
  QString phase_text_;
  uint64_t generation_ = 0;  // bumped by every connect/disconnect
  std::shared_ptr<Connection> connection_;
  std::unique_ptr<Pump> pump_;
  SnapshotPtr snapshot_;
  uint64_t delivered_ = 0;
  QThreadPool lifecycle_;  // one thread: start / open / teardown, in order
  QThreadPool work_;       // job, probe and log calls
};

}  // namespace octet::ui

Q_DECLARE_METATYPE(octet::ui::SnapshotPtr)
Q_DECLARE_METATYPE(octet::app::ClusterEvent)
Q_DECLARE_METATYPE(octet::ui::JobLaunchOutcome)
Q_DECLARE_METATYPE(octet::ui::JobStopOutcome)
Q_DECLARE_METATYPE(octet::ui::LogsOutcome)
Q_DECLARE_METATYPE(octet::ui::ProbeOutcome)
