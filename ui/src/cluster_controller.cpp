#include "octet/ui/cluster_controller.h"

#include <QMetaObject>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "octet/app/cluster_profile.h"
#include "octet/base/deadline.h"
#include "octet/ui/resources.h"

namespace octet::ui {

namespace {

// Job calls carry their own deadlines: a launch waits for every rank to start
// (not for the model to load); stop waits for the grace period of each rank.
constexpr int kLaunchDeadlineMs = 60'000;
constexpr int kStopDeadlineMs = 30'000;
constexpr int kProbeDeadlineMs = 60'000;
constexpr int kLogsDeadlineMs = 5'000;

void RegisterMetaTypes() {
  static const bool done = [] {
    qRegisterMetaType<SnapshotPtr>("octet::ui::SnapshotPtr");
    qRegisterMetaType<app::ClusterEvent>("octet::app::ClusterEvent");
    qRegisterMetaType<JobLaunchOutcome>("octet::ui::JobLaunchOutcome");
    qRegisterMetaType<JobStopOutcome>("octet::ui::JobStopOutcome");
    qRegisterMetaType<LogsOutcome>("octet::ui::LogsOutcome");
    qRegisterMetaType<ProbeOutcome>("octet::ui::ProbeOutcome");
    qRegisterMetaType<ClusterController::Phase>("octet::ui::ClusterController::Phase");
    return true;
  }();
  (void)done;
}

}  // namespace

// What one connection owns. Destroyed off the GUI thread (closing a session
// joins its node threads; stopping a local cluster waits for its agents).
struct ClusterController::Connection {
  std::unique_ptr<app::LocalCluster> local;
  std::unique_ptr<app::ClusterSession> session;
  ~Connection() {
    if (session) session->SetListener(nullptr);
    session.reset();  // before the agents go away, so nodes are not reported lost
    local.reset();
  }
};

// Polls the session's version and posts changed snapshots, one in flight at a time.
class ClusterController::Pump {
 public:
  Pump(ClusterController* owner, uint64_t generation, std::shared_ptr<Connection> connection,
       int interval_ms)
      : owner_(owner),
        generation_(generation),
        connection_(std::move(connection)),
        interval_(std::chrono::milliseconds(std::max(10, interval_ms))),
        thread_([this] { Loop(); }) {}
  ~Pump() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  void Loop() {
    uint64_t last = 0;
    bool first = true;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (!first) cv_.wait_for(lock, interval_, [this] { return stop_; });
        if (stop_) return;
      }
      first = false;
      if (in_flight_->load(std::memory_order_acquire)) continue;  // the GUI has not taken the last
      const uint64_t version = connection_->session->version();
      if (version == last) continue;
      auto snap = std::make_shared<const app::ClusterSnapshot>(connection_->session->Snapshot());
      last = snap->version;
      in_flight_->store(true, std::memory_order_release);
      QMetaObject::invokeMethod(
          owner_,
          [owner = owner_, generation = generation_, snap, flag = in_flight_] {
            flag->store(false, std::memory_order_release);
            owner->deliverSnapshot(generation, snap);
          },
          Qt::QueuedConnection);
    }
  }

  ClusterController* owner_;
  const uint64_t generation_;
  std::shared_ptr<Connection> connection_;
  const std::chrono::milliseconds interval_;
  std::shared_ptr<std::atomic<bool>> in_flight_ = std::make_shared<std::atomic<bool>>(false);
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

ClusterController::ClusterController(Options options, QObject* parent)
    : QObject(parent), options_(std::move(options)) {
  RegisterMetaTypes();
  lifecycle_.setMaxThreadCount(1);
  work_.setMaxThreadCount(4);
  snapshot_ = std::make_shared<const app::ClusterSnapshot>();
  phase_text_ = QStringLiteral("Not connected");
}

ClusterController::~ClusterController() {
  ++generation_;
  pump_.reset();
  work_.waitForDone();
  // A remote instance may keep the session (and its node threads) after this
  // controller is gone: its events must not reach it (deliveries are
  // serialized with this call, so none is in flight after it).
  if (connection_ && connection_->session) connection_->session->SetListener(nullptr);
  if (connection_) {
    lifecycle_.start([c = std::move(connection_)]() mutable { c.reset(); });
  }
  lifecycle_.waitForDone();
}

app::LocalCluster* ClusterController::localCluster() const {
  return connection_ ? connection_->local.get() : nullptr;
}

std::shared_ptr<app::ClusterSession> ClusterController::session() const {
  if (!connection_ || !connection_->session) return nullptr;
  return std::shared_ptr<app::ClusterSession>(connection_, connection_->session.get());
}

void ClusterController::setPhase(Phase phase, const QString& text) {
  phase_ = phase;
  phase_text_ = text;
  emit phaseChanged(phase, text);
}

void ClusterController::connectTo(const ConnectionSpec& spec) {
  disconnectCluster();
  spec_ = spec;
  const uint64_t generation = generation_;
  const bool local = spec.kind == ConnectionSpec::Kind::kLocal;
  setPhase(Phase::kStarting, local ? QStringLiteral("Starting %1…").arg(spec.Describe())
                                   : QStringLiteral("Connecting to %1…").arg(spec.Describe()));
  Options options = options_;
  // The demo model that ships with the workbench runs on the local nodes
  // whatever model folders the user chose.
  if (const QString bundled = ResourcePath(QStringLiteral("models")); local && !bundled.isEmpty())
    options.local.extra_model_roots.push_back(bundled.toStdString());
  lifecycle_.start([this, generation, spec, options] {
    auto connection = std::make_shared<Connection>();
    app::ClusterProfile profile;
    if (spec.kind == ConnectionSpec::Kind::kLocal) {
      app::LocalClusterOptions o = options.local;
      o.nodes = spec.local_nodes;
      o.cabling = spec.local_cabling.toStdString();
      o.memory_per_node_bytes = spec.local_memory_bytes;
      for (const QString& r : spec.local_model_roots) o.model_roots.push_back(r.toStdString());
      auto started = app::LocalCluster::Start(o, Deadline::AfterMs(30'000));
      if (!started.ok()) {
        const QString error = QString::fromStdString(started.status().message());
        QMetaObject::invokeMethod(
            this, [this, generation, error] { onConnectFailed(generation, error); },
            Qt::QueuedConnection);
        return;
      }
      connection->local = std::move(*started);
      profile = connection->local->profile();
    } else {
      auto loaded = app::LoadProfile(spec.profile.toStdString(), options.config_dir);
      if (!loaded.ok()) {
        const QString error = QString::fromStdString(loaded.status().message());
        QMetaObject::invokeMethod(
            this, [this, generation, error] { onConnectFailed(generation, error); },
            Qt::QueuedConnection);
        return;
      }
      profile = *loaded;
    }
    auto session = app::ClusterSession::Open(profile, options.session);
    if (!session.ok()) {
      const QString error = QString::fromStdString(session.status().message());
      QMetaObject::invokeMethod(
          this, [this, generation, error] { onConnectFailed(generation, error); },
          Qt::QueuedConnection);
      return;
    }
    connection->session = std::move(*session);
    connection->session->SetListener([this, generation](const app::ClusterEvent& event) {
      QMetaObject::invokeMethod(
          this,
          [this, generation, event] {
            if (generation != generation_) return;
            emit clusterEvent(event);
          },
          Qt::QueuedConnection);
    });
    QMetaObject::invokeMethod(
        this, [this, generation, connection] { onConnected(generation, connection); },
        Qt::QueuedConnection);
  });
}

void ClusterController::onConnected(uint64_t generation, std::shared_ptr<Connection> connection) {
  if (generation != generation_) {
    // Superseded while starting: close it off the GUI thread.
    lifecycle_.start([c = std::move(connection)]() mutable { c.reset(); });
    return;
  }
  connection_ = std::move(connection);
  pump_ = std::make_unique<Pump>(this, generation, connection_, options_.ui_interval_ms);
  setPhase(Phase::kConnected, QStringLiteral("%1 · connecting to agents…").arg(spec_.Describe()));
}

void ClusterController::onConnectFailed(uint64_t generation, const QString& error) {
  if (generation != generation_) return;
  setPhase(Phase::kFailed, QStringLiteral("%1: %2").arg(spec_.Describe(), error));
}

void ClusterController::disconnectCluster() {
  ++generation_;
  pump_.reset();
  if (connection_ && connection_->session) connection_->session->SetListener(nullptr);
  if (connection_) {
    lifecycle_.start([c = std::move(connection_)]() mutable { c.reset(); });
  }
  connection_.reset();
  snapshot_ = std::make_shared<const app::ClusterSnapshot>();
  emit snapshotChanged(snapshot_);
  if (phase_ != Phase::kIdle) setPhase(Phase::kIdle, QStringLiteral("Not connected"));
}

void ClusterController::deliverSnapshot(uint64_t generation, SnapshotPtr snapshot) {
  if (generation != generation_) return;
  snapshot_ = std::move(snapshot);
  ++delivered_;
  updateConnectedText();
  emit snapshotChanged(snapshot_);
}

void ClusterController::updateConnectedText() {
  if (phase_ != Phase::kConnected) return;
  int up = 0, lost = 0;
  for (const auto& n : snapshot_->nodes) {
    up += n.state == app::NodeState::kUp;
    lost += n.state == app::NodeState::kLost;
  }
  const int total = static_cast<int>(snapshot_->nodes.size());
  QString text = QStringLiteral("%1 · %2/%3 nodes up").arg(spec_.Describe()).arg(up).arg(total);
  if (lost > 0) text += QStringLiteral(" · %1 lost").arg(lost);
  if (text != phase_text_) setPhase(Phase::kConnected, text);
}

void ClusterController::refreshNow() {
  if (connection_) connection_->session->RefreshNow();
}

void ClusterController::launchJob(const app::JobRequest& request) {
  const QString id = QString::fromStdString(request.job_id);
  if (!connection_) {
    emit jobLaunched({id, false, QStringLiteral("not connected to a cluster"), {}});
    return;
  }
  const uint64_t generation = generation_;
  work_.start([this, generation, c = connection_, request, id] {
    auto r = c->session->LaunchJob(request, Deadline::AfterMs(kLaunchDeadlineMs));
    JobLaunchOutcome out;
    out.job_id = id;
    out.ok = r.ok();
    if (r.ok()) {
      out.launch = *r;
    } else {
      out.error = QString::fromStdString(r.status().message());
    }
    c->session->RefreshNow();
    QMetaObject::invokeMethod(
        this,
        [this, generation, out] {
          if (generation == generation_) emit jobLaunched(out);
        },
        Qt::QueuedConnection);
  });
}

void ClusterController::stopJob(const QString& job_id) {
  if (!connection_) {
    emit jobStopped({job_id, false, QStringLiteral("not connected to a cluster")});
    return;
  }
  const uint64_t generation = generation_;
  work_.start([this, generation, c = connection_, job_id] {
    Status s = c->session->StopJob(job_id.toStdString(), Deadline::AfterMs(kStopDeadlineMs));
    c->session->RefreshNow();
    JobStopOutcome out{job_id, s.ok(), QString::fromStdString(s.message())};
    QMetaObject::invokeMethod(
        this,
        [this, generation, out] {
          if (generation == generation_) emit jobStopped(out);
        },
        Qt::QueuedConnection);
  });
}

void ClusterController::probeLinks() {
  if (!connection_) {
    emit linksProbed({});
    return;
  }
  const uint64_t generation = generation_;
  work_.start([this, generation, c = connection_] {
    ProbeOutcome out;
    // Small transfers: a probe is a check a person waits for, not a benchmark.
    out.reports = c->session->ProbeLinks(4ull << 20, 50, Deadline::AfterMs(kProbeDeadlineMs));
    QMetaObject::invokeMethod(
        this,
        [this, generation, out] {
          if (generation == generation_) emit linksProbed(out);
        },
        Qt::QueuedConnection);
  });
}

void ClusterController::fetchLogs(const QString& job_id, int node) {
  if (!connection_ || node < 0 || static_cast<size_t>(node) >= connection_->session->size()) {
    emit logsFetched({job_id, node, false, QStringLiteral("no such node")});
    return;
  }
  const uint64_t generation = generation_;
  work_.start([this, generation, c = connection_, job_id, node] {
    auto r = c->session->client(static_cast<size_t>(node))
                 .ReadLogs(job_id.toStdString(), Deadline::AfterMs(kLogsDeadlineMs));
    LogsOutcome out;
    out.job_id = job_id;
    out.node = node;
    out.ok = r.ok();
    out.text = QString::fromStdString(r.ok() ? *r : r.status().message());
    QMetaObject::invokeMethod(
        this,
        [this, generation, out] {
          if (generation == generation_) emit logsFetched(out);
        },
        Qt::QueuedConnection);
  });
}

}  // namespace octet::ui
