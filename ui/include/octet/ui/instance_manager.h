// The inference instances, router gateways and training runs the workbench
// started on this machine (app::LocalInstance), as Qt signals: each process's
// output lines, ready (with its URL), a training run's figures (its curves),
// exited (with its status and last error). Shared by the Launch panel (start,
// stop, log), the Chat panel (endpoints to talk to), the Routing panel
// (routers to apply a policy to) and the Dashboard (training curves).
//
// An inference instance, a router or a training run can also run on a remote
// cluster's nodes through their agents (app::RemoteInstance): startRemote()
// launches it on a pool thread (the agents' answers take a while), rank 0's
// log and its state come back through the agents (a training run's curves
// from rank 0's progress lines), and stop() stops it through them. Its entry
// is the same as a local one's (the Chat panel talks to its URL, the Routing
// panel to a router's, the Dashboard shows a run's curves), with `nodes` set.
//
// GUI thread only. Processes are started on the GUI thread (the child is tied
// to the thread that spawned it); output arrives on reader threads and is
// posted here; stopping (SIGTERM, up to 3 s grace) runs on a pool thread so
// the window never waits for a process to end.
#pragma once

#include <QList>
#include <QObject>
#include <QString>
#include <QThreadPool>
#include <atomic>
#include <memory>

#include "octet/app/local_instance.h"
#include "octet/app/remote_instance.h"

class QTimer;

namespace octet::ui {

struct InstanceInfo {
  // kReady: serving on `url` (inference, router). A training run is kStarting
  // while it prepares data and until its first figures, then kRunning, and
  // kFinished when it ended well (its output folder is a model folder).
  enum class State { kStarting, kReady, kRunning, kStopping, kExited, kFinished, kFailed };
  int id = 0;
  app::InstanceSpec::Kind kind = app::InstanceSpec::Kind::kInference;
  QString name;  // "qwen3-tiny TP 2", "router example-policy.yaml"
  QString url;   // once ready
  State state = State::kStarting;
  QString detail;   // exit status / last error
  QStringList log;  // the process's output (last 2000 lines)
  // The stage running (training from text: "preparing data", then "training").
  int stage = 0;
  int stage_count = 1;
  QString stage_name;
  // Training: the output folder (the model once finished) and the curves.
  QString out_dir;
  app::TrainingCurves training;
  // A remote instance: the nodes its ranks run on (rank order), else empty,
  // and the agents' job id (their telemetry names its ranks by it).
  QStringList nodes;
  QString job_id;
  int ranks = 1;  // processes: TP ranks, or a training run's data-parallel ranks
  // A local inference instance: rank 0's latest figures (`octet serve
  // --figures`, once a second) and when they came (ms since the epoch).
  bool has_figures = false;
  app::WorkerFigures figures;
  int64_t figures_unix_ms = 0;
};

class InstanceManager : public QObject {
  Q_OBJECT
 public:
  explicit InstanceManager(QObject* parent = nullptr);
  ~InstanceManager() override;  // stops every instance

  // The `octet` executable instances run when their spec names none ("" : beside this program).
  void setOctetBinary(const std::string& path) { octet_binary_ = path; }
  // Starts an instance; returns its id, or -1 with `error` set.
  int start(const app::InstanceSpec& spec, const QString& name, QString* error);
  // Launches `spec` on the nodes of `session` through their agents; returns
  // its id at once (state kStarting). An agent's refusal arrives as exited(failed).
  int startRemote(std::shared_ptr<app::ClusterSession> session, const app::RemoteInstanceSpec& spec,
                  const QString& name, const QStringList& node_names);
  void stop(int id);
  const QList<InstanceInfo>& instances() const { return infos_; }
  const InstanceInfo* find(int id) const;
  static QString stateName(InstanceInfo::State s);

 signals:
  void changed();                             // any state or list change
  void logLine(int id, const QString& line);  // one output line
  void ready(int id, const QString& url);
  void trainingFigures(int id);  // a training run's curves grew
  void instanceFigures(int id);  // a local inference instance's figures (InstanceInfo::figures)
  void stageChanged(int id);     // a run moved to its next stage
  void exited(int id, bool failed, const QString& detail);

 private:
  void onLine(int id, const QString& line);
  void onReady(int id, const QString& url);
  void onFigures(int id, const app::TrainingFigures& figures);
  void onWorkerFigures(int id, const app::WorkerFigures& figures);
  void pollExits();
  InstanceInfo* mutableInfo(int id);
  void onRemoteLaunched(int id, std::shared_ptr<app::RemoteInstance> instance,
                        const QString& error);
  void onRemoteStatus(int id, const app::RemoteInstanceStatus& status);

  struct Running {
    int id;
    std::shared_ptr<app::LocalInstance> instance;
    bool exit_seen;
  };
  QList<InstanceInfo> infos_;
  std::vector<Running> running_;
  // Remote instances while their jobs run (a null instance: still launching).
  struct RemoteRunning {
    int id;
    std::shared_ptr<app::RemoteInstance> instance;
    bool stop_requested;
  };
  std::vector<RemoteRunning> remote_;
  // Set when the manager goes away: a launch that completes afterwards stops its job.
  std::shared_ptr<std::atomic<bool>> closing_ = std::make_shared<std::atomic<bool>>(false);
  QTimer* poll_;
  QThreadPool stoppers_;
  int next_id_ = 1;
  std::string octet_binary_;
};

}  // namespace octet::ui
