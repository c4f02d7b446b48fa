#include "octet/ui/instance_manager.h"

#include <QDateTime>
#include <QMetaObject>
#include <QPointer>
#include <QTimer>
#include <algorithm>
#include <functional>

namespace octet::ui {

namespace {

// Launching waits for every rank's agent to start its process (not for the
// model to load); stopping waits for each rank's grace period.
constexpr int kRemoteLaunchDeadlineMs = 60'000;
constexpr int kRemoteStopDeadlineMs = 30'000;

// Runs fn on the manager's (UI) thread from any thread, unless the manager is
// gone by then: how instance callbacks reach it.
void PostTo(const QPointer<InstanceManager>& self, std::function<void(InstanceManager*)> fn) {
  QMetaObject::invokeMethod(
      self.data(),
      [self, fn = std::move(fn)] {
        if (self) fn(self.data());
      },
      Qt::QueuedConnection);
}

}  // namespace

InstanceManager::InstanceManager(QObject* parent) : QObject(parent), poll_(new QTimer(this)) {
  poll_->setInterval(200);
  connect(poll_, &QTimer::timeout, this, &InstanceManager::pollExits);
  stoppers_.setMaxThreadCount(4);
}

InstanceManager::~InstanceManager() {
  closing_->store(true);
  for (Running& r : running_) r.instance->Stop(3000);
  running_.clear();
  // Remote jobs are stopped through their agents, side by side.
  for (RemoteRunning& r : remote_) {
    if (!r.instance) continue;  // still launching: the launch stops it (closing_)
    stoppers_.start([inst = std::move(r.instance)] {
      inst->Stop(Deadline::AfterMs(kRemoteStopDeadlineMs)).IgnoreError();
    });
  }
  remote_.clear();
  stoppers_.waitForDone();
}

QString InstanceManager::stateName(InstanceInfo::State s) {
  switch (s) {
    case InstanceInfo::State::kStarting:
      return tr("starting");
    case InstanceInfo::State::kReady:
      return tr("ready");
    case InstanceInfo::State::kRunning:
      return tr("running");
    case InstanceInfo::State::kFinished:
      return tr("finished");
    case InstanceInfo::State::kStopping:
      return tr("stopping");
    case InstanceInfo::State::kExited:
      return tr("stopped");
    case InstanceInfo::State::kFailed:
      return tr("failed");
  }
  return {};
}

const InstanceInfo* InstanceManager::find(int id) const {
  for (const InstanceInfo& i : infos_) {
    if (i.id == id) return &i;
  }
  return nullptr;
}

InstanceInfo* InstanceManager::mutableInfo(int id) {
  for (InstanceInfo& i : infos_) {
    if (i.id == id) return &i;
  }
  return nullptr;
}

int InstanceManager::start(const app::InstanceSpec& spec_in, const QString& name, QString* error) {
  app::InstanceSpec spec = spec_in;
  if (spec.octet_binary.empty()) spec.octet_binary = octet_binary_;
  const int id = next_id_++;
  QPointer<InstanceManager> self(this);
  auto on_line = [self, id](const std::string& line) {
    const QString text = QString::fromStdString(line);
    PostTo(self, [id, text](InstanceManager* m) { m->onLine(id, text); });
  };
  auto on_ready = [self, id](const std::string& url) {
    const QString text = QString::fromStdString(url);
    PostTo(self, [id, text](InstanceManager* m) { m->onReady(id, text); });
  };
  auto on_figures = [self, id](const app::TrainingFigures& f) {
    PostTo(self, [id, f](InstanceManager* m) { m->onFigures(id, f); });
  };
  auto on_worker_figures = [self, id](const app::WorkerFigures& f) {
    PostTo(self, [id, f](InstanceManager* m) { m->onWorkerFigures(id, f); });
  };
  auto started = app::LocalInstance::Start(spec, on_line, on_ready, on_figures, on_worker_figures);
  if (!started.ok()) {
    if (error) *error = QString::fromStdString(started.status().message());
    return -1;
  }
  InstanceInfo info;
  info.id = id;
  info.kind = spec.kind;
  info.name = name;
  info.ranks =
      std::max(1, spec.kind == app::InstanceSpec::Kind::kTraining ? spec.train_ranks : spec.tp);
  info.stage_count = (*started)->stage_count();
  info.stage_name = QString::fromStdString((*started)->stage_name(0));
  if (spec.kind == app::InstanceSpec::Kind::kTraining)
    info.out_dir = QString::fromStdString(spec.train_out_dir);
  infos_.append(info);
  running_.push_back({id, std::shared_ptr<app::LocalInstance>(std::move(*started)), false});
  poll_->start();
  emit changed();
  return id;
}

int InstanceManager::startRemote(std::shared_ptr<app::ClusterSession> session,
                                 const app::RemoteInstanceSpec& spec, const QString& name,
                                 const QStringList& node_names) {
  const int id = next_id_++;
  InstanceInfo info;
  info.id = id;
  info.kind = spec.kind == app::JobKind::kRouter     ? app::InstanceSpec::Kind::kRouter
              : spec.kind == app::JobKind::kTraining ? app::InstanceSpec::Kind::kTraining
                                                     : app::InstanceSpec::Kind::kInference;
  info.name = name;
  info.nodes = node_names;
  info.job_id = QString::fromStdString(spec.job_id);
  info.ranks = std::max<int>(1, static_cast<int>(spec.nodes.size()));
  if (spec.kind == app::JobKind::kTraining) {
    info.stage_name = QStringLiteral("training");
    info.out_dir = QString::fromStdString(spec.model_dir);
  }
  infos_.append(info);
  remote_.push_back({id, nullptr, false});
  emit changed();
  QPointer<InstanceManager> self(this);
  auto on_line = [self, id](const std::string& line) {
    const QString text = QString::fromStdString(line);
    PostTo(self, [id, text](InstanceManager* m) { m->onLine(id, text); });
  };
  auto on_status = [self, id](const app::RemoteInstanceStatus& status) {
    PostTo(self, [id, status](InstanceManager* m) { m->onRemoteStatus(id, status); });
  };
  auto on_figures = [self, id](const app::TrainingFigures& f) {
    PostTo(self, [id, f](InstanceManager* m) { m->onFigures(id, f); });
  };
  stoppers_.start([self, closing = closing_, session = std::move(session), spec, id, on_line,
                   on_status, on_figures] {
    auto r = app::RemoteInstance::Launch(session, spec, on_line, on_status,
                                         Deadline::AfterMs(kRemoteLaunchDeadlineMs), on_figures);
    std::shared_ptr<app::RemoteInstance> instance;
    QString error;
    if (r.ok()) {
      instance = std::move(*r);
    } else {
      error = QString::fromStdString(r.status().message());
    }
    if (instance && closing->load()) {
      // The window closed while the agents were starting it.
      instance->Stop(Deadline::AfterMs(kRemoteStopDeadlineMs)).IgnoreError();
      return;
    }
    PostTo(self,
           [id, instance, error](InstanceManager* m) { m->onRemoteLaunched(id, instance, error); });
  });
  return id;
}

void InstanceManager::onRemoteLaunched(int id, std::shared_ptr<app::RemoteInstance> instance,
                                       const QString& error) {
  auto it = std::find_if(remote_.begin(), remote_.end(),
                         [id](const RemoteRunning& r) { return r.id == id; });
  if (it == remote_.end()) {
    // Already ended (its failure came first): let it go off this thread.
    if (instance) stoppers_.start([instance] {});
    return;
  }
  if (!error.isEmpty()) {
    onRemoteStatus(id, {app::RemoteInstanceStatus::Phase::kFailed, "", error.toStdString()});
    return;
  }
  it->instance = instance;
  if (it->stop_requested) {
    stoppers_.start(
        [instance] { instance->Stop(Deadline::AfterMs(kRemoteStopDeadlineMs)).IgnoreError(); });
  }
}

void InstanceManager::onRemoteStatus(int id, const app::RemoteInstanceStatus& status) {
  InstanceInfo* info = mutableInfo(id);
  if (!info) return;
  using Phase = app::RemoteInstanceStatus::Phase;
  switch (status.phase) {
    case Phase::kStarting:
      return;
    case Phase::kReady:
      if (info->state != InstanceInfo::State::kStarting) return;
      info->state = InstanceInfo::State::kReady;
      info->url = QString::fromStdString(status.url);
      emit ready(id, info->url);
      emit changed();
      return;
    case Phase::kRunning:
      if (info->state != InstanceInfo::State::kStarting) return;
      info->state = InstanceInfo::State::kRunning;
      emit changed();
      return;
    case Phase::kStopping:
      info->state = InstanceInfo::State::kStopping;
      emit changed();
      return;
    case Phase::kStopped:
    case Phase::kFinished:
    case Phase::kFailed:
      break;
  }
  const bool failed = status.phase == Phase::kFailed;
  const bool finished = status.phase == Phase::kFinished;
  info->state = failed     ? InstanceInfo::State::kFailed
                : finished ? InstanceInfo::State::kFinished
                           : InstanceInfo::State::kExited;
  info->detail = failed     ? QString::fromStdString(status.error)
                 : finished ? tr("finished on every node; the model is in %1 on %2")
                                  .arg(info->out_dir, info->nodes.value(0))
                            : tr("stopped through the agents");
  info->url.clear();
  for (auto it = remote_.begin(); it != remote_.end(); ++it) {
    if (it->id != id) continue;
    // Its threads are joined when it goes: off the GUI thread.
    if (it->instance) stoppers_.start([instance = std::move(it->instance)] {});
    remote_.erase(it);
    break;
  }
  emit exited(id, failed, info->detail);
  emit changed();
}

void InstanceManager::onLine(int id, const QString& line) {
  InstanceInfo* info = mutableInfo(id);
  if (!info) return;
  info->log.append(line);
  if (info->log.size() > 2000) info->log.removeFirst();
  emit logLine(id, line);
}

void InstanceManager::onReady(int id, const QString& url) {
  InstanceInfo* info = mutableInfo(id);
  if (!info || info->state != InstanceInfo::State::kStarting) return;
  info->state = InstanceInfo::State::kReady;
  info->url = url;
  emit ready(id, url);
  emit changed();
}

void InstanceManager::onFigures(int id, const app::TrainingFigures& figures) {
  InstanceInfo* info = mutableInfo(id);
  if (!info) return;
  info->training.Add(figures);
  if (info->state == InstanceInfo::State::kStarting) {
    info->state = InstanceInfo::State::kRunning;
    emit changed();
  }
  emit trainingFigures(id);
}

void InstanceManager::onWorkerFigures(int id, const app::WorkerFigures& figures) {
  InstanceInfo* info = mutableInfo(id);
  if (!info) return;
  info->has_figures = true;
  info->figures = figures;
  info->figures_unix_ms = QDateTime::currentMSecsSinceEpoch();
  emit instanceFigures(id);
}

void InstanceManager::stop(int id) {
  for (RemoteRunning& r : remote_) {
    if (r.id != id) continue;
    r.stop_requested = true;
    if (InstanceInfo* info = mutableInfo(id)) info->state = InstanceInfo::State::kStopping;
    emit changed();
    // Through the agents, off the GUI thread; the status reports the end.
    if (r.instance) {
      stoppers_.start([instance = r.instance] {
        instance->Stop(Deadline::AfterMs(kRemoteStopDeadlineMs)).IgnoreError();
      });
    }
    return;
  }
  for (auto it = running_.begin(); it != running_.end(); ++it) {
    if (it->id != id) continue;
    std::shared_ptr<app::LocalInstance> inst = it->instance;
    if (InstanceInfo* info = mutableInfo(id)) info->state = InstanceInfo::State::kStopping;
    emit changed();
    // Terminate waits for the process: off the GUI thread. pollExits reports the end.
    stoppers_.start([inst] { inst->Stop(3000); });
    return;
  }
}

void InstanceManager::pollExits() {
  for (auto it = running_.begin(); it != running_.end();) {
    std::optional<ExitStatus> st = it->instance->Poll();  // may start the next stage
    if (InstanceInfo* info = mutableInfo(it->id); info && info->stage != it->instance->stage()) {
      info->stage = it->instance->stage();
      info->stage_name = QString::fromStdString(it->instance->stage_name(info->stage));
      emit stageChanged(it->id);
      emit changed();
    }
    if (!st || !it->exit_seen) {
      // The output reader may still be passing on the last lines (the error):
      // report the end one tick after it is seen.
      if (st) it->exit_seen = true;
      ++it;
      continue;
    }
    InstanceInfo* info = mutableInfo(it->id);
    const int id = it->id;
    const std::string last_error = it->instance->last_error();
    it = running_.erase(it);
    if (!info) continue;
    const bool stopping = info->state == InstanceInfo::State::kStopping;
    const bool failed = !stopping && !st->success();
    const bool finished = !stopping && !failed && info->kind == app::InstanceSpec::Kind::kTraining;
    info->state = failed     ? InstanceInfo::State::kFailed
                  : finished ? InstanceInfo::State::kFinished
                             : InstanceInfo::State::kExited;
    info->detail = QString::fromStdString(st->ToString());
    if (failed) {
      QString why = QString::fromStdString(last_error);
      if (why.isEmpty() && !info->log.isEmpty()) why = info->log.last();
      if (!why.isEmpty())
        info->detail = why + QStringLiteral(" (") + info->detail + QLatin1Char(')');
    }
    info->url.clear();
    emit exited(id, failed, info->detail);
    emit changed();
  }
  if (running_.empty()) poll_->stop();
}

}  // namespace octet::ui
