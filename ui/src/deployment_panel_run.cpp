// The Deployments panel's other half: what the agents run (status reads, the
// Running table with per-replica tok/s), Apply and Down on a worker thread,
// and the watch. The editor half is deployment_panel.cpp; see the header.
#include <QCheckBox>
#include <QComboBox>
#include <QLabel>
#include <QPixmap>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QTableWidget>
#include <optional>
#include <utility>

#include "deployment_panel_cells.h"
#include "octet/ui/cabling_view.h"
#include "octet/ui/deployment_panel.h"
#include "octet/ui/job_colors.h"
#include "octet/ui/resources.h"
#include "octet/ui/theme.h"
#include "octet/ui/widgets.h"

namespace octet::ui {

using deployment_cells::Cell;
using deployment_cells::NodesText;
using deployment_cells::Q;

namespace {

constexpr int kApplyDeadlineMs = 600'000;  // as `octet deploy apply --wait-ms`
constexpr int kDownDeadlineMs = 60'000;
constexpr int kReadDeadlineMs = 10'000;
constexpr int kWatchRetryMs = 10'000;  // after a failed apply (status is read every 2 s)

// The model catalog `octet plan` falls back on for model folders that are
// not on this machine (they are paths on the nodes).
std::string CatalogDir() { return ResourcePath(QStringLiteral("models")).toStdString(); }

}  // namespace

// ---- the cluster ------------------------------------------------------------------

app::PlacementInput DeploymentPanel::placementInput() const {
  app::PlacementInput in = app::PlacementInputFrom(*controller_->snapshot());
  in.memory = app::PlannerMemoryEstimator(CatalogDir());
  return in;
}

void DeploymentPanel::onSnapshot(const SnapshotPtr& snapshot) {
  if (!snapshot) return;
  if (isVisible()) cabling_->setSnapshot(*snapshot);
  std::string key;
  QStringList names;
  for (const auto& n : snapshot->nodes) {
    names << Q(n.name);
    key +=
        n.name + "|" + std::to_string(static_cast<int>(n.state)) + "|" +
        std::to_string(n.has_facts ? n.facts.memory.budget_bytes + n.facts.memory.total_bytes : 0) +
        ";";
  }
  key += std::string(app::CablingKindName(snapshot->cabling.kind));
  if (key != nodes_key_) {
    nodes_key_ = key;
    if (names != node_names_) {
      node_names_ = names;
      refreshNodeList();
      const QString chosen = router_node_->currentData().toString();
      router_node_->clear();
      router_node_->addItem(tr("placed"), QString());
      for (const auto& n : node_names_) router_node_->addItem(n, n);
      const int at = router_node_->findData(chosen);
      router_node_->setCurrentIndex(std::max(0, at));
    }
    check();  // the cluster changed: the placement may too
  }
  refreshRates();
}

void DeploymentPanel::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  if (const SnapshotPtr s = controller_->snapshot()) cabling_->setSnapshot(*s);
  refreshStatus();
}

void DeploymentPanel::refreshStatus() {
  auto session = controller_->session();
  if (!session || reading_) return;
  reading_ = true;
  const uint64_t generation = ++generation_;
  reads_.start([this, session, generation, closing = closing_] {
    DeploymentStatusRead read;
    read.generation = generation;
    std::vector<app::NodeSilence> silent;
    read.deployments = app::ReadDeployments(*session, Deadline::AfterMs(kReadDeadlineMs), &silent);
    for (const auto& s : silent) {
      if (s.up) read.silent_up << Q(s.node);
    }
    if (!closing->load()) emit statusRead(read);
  });
}

void DeploymentPanel::onStatusRead(const DeploymentStatusRead& read) {
  reading_ = false;
  if (read.generation != generation_) return;
  std::string key;
  for (const auto& d : read.deployments) {
    key += d.name + ":";
    for (const auto& r : d.instances)
      key += r.replica + "/" + r.job_id + "/" + r.state + "/" + r.url + ";";
    if (d.has_router)
      key += "router/" + d.router.job_id + "/" + d.router.state + "/" + d.router.url;
    key += "|";
  }
  running_ = read.deployments;
  if (key != running_key_) {
    running_key_ = key;
    refreshRunning();
  }
  emit runningChanged();
  if (!watched_ || busy_ || !watch_retry_.hasExpired()) return;
  if (!read.silent_up.isEmpty()) return;  // its replicas would read missing: no guessing
  const std::string amiss = app::WhatIsAmiss(*watched_, running_);
  if (amiss.empty()) return;
  log_->appendPlainText(tr("watch: %1: applying %2").arg(Q(amiss), Q(watched_->name)));
  startApply(watched_, true);
}

void DeploymentPanel::refreshRunning() {
  running_table_->setRowCount(0);
  const QPalette pal = palette();
  const StatusColors sc = StatusColorsFor(pal);
  for (const auto& d : running_) {
    std::vector<const app::DeployedReplica*> rows;
    for (const auto& r : d.instances) rows.push_back(&r);
    if (d.has_router) rows.push_back(&d.router);
    for (const app::DeployedReplica* r : rows) {
      const int row = running_table_->rowCount();
      running_table_->insertRow(row);
      const QString id = Q(r->job_id);
      auto* name =
          Cell(Q(d.name) + QStringLiteral(" / ") + (r->router ? tr("router") : Q(r->replica)));
      name->setData(Qt::UserRole, id);
      if (!id.isEmpty()) {
        QPixmap swatch(12, 12);
        swatch.fill(JobColor(id, pal));
        name->setIcon(QIcon(swatch));
      }
      running_table_->setItem(row, 0, name);
      auto* state = Cell(Q(r->state));
      state->setForeground(r->state == "ready"    ? sc.good
                           : r->state == "failed" ? sc.bad
                                                  : sc.warning);
      if (!r->error.empty()) state->setToolTip(Q(r->error));
      running_table_->setItem(row, 1, state);
      running_table_->setItem(row, 2, Cell(NodesText(r->nodes)));
      running_table_->setItem(row, 3, Cell(Q(r->url)));
      running_table_->setItem(row, 4, Cell(QStringLiteral("—")));
      if (!r->router && !id.isEmpty() && r->state != "stopped") {
        auto* stop = new QPushButton(tr("Stop"), running_table_);
        stop->setObjectName(QStringLiteral("stopReplica:") + Q(r->replica));
        stop->setToolTip(tr("Stop %1 on every node it runs on").arg(Q(r->replica)));
        const QString replica = Q(r->replica);
        const std::string deployment = d.name;
        connect(stop, &QPushButton::clicked, this, [this, id, stop, replica, deployment] {
          stop->setEnabled(false);
          if (watched_ && watched_->name == deployment)
            stopWatching(tr("%1 was stopped by hand").arg(replica));
          controller_->stopJob(id);
        });
        running_table_->setCellWidget(row, 5, stop);
      }
    }
  }
  running_table_->resizeColumnsToContents();
  refreshRates();
}

void DeploymentPanel::refreshRates() {
  const SnapshotPtr s = controller_->snapshot();
  if (!s || running_table_->rowCount() == 0) return;
  std::map<QString, double> tps;  // job id -> rank 0's decode tok/s
  for (const auto& n : s->nodes) {
    if (!n.has_telemetry) continue;
    for (const auto& w : n.telemetry.workers) {
      if (w.rank == 0) tps[Q(w.job_id)] += w.decode_tps;
    }
  }
  for (int row = 0; row < running_table_->rowCount(); ++row) {
    QTableWidgetItem* name = running_table_->item(row, 0);
    QTableWidgetItem* rate = running_table_->item(row, 4);
    if (!name || !rate) continue;
    auto it = tps.find(name->data(Qt::UserRole).toString());
    const QString text = it == tps.end() ? QStringLiteral("—") : FormatTps(it->second);
    if (rate->text() != text) rate->setText(text);
  }
}

// ---- apply / down -----------------------------------------------------------------

void DeploymentPanel::setState(const QString& text, bool bad) {
  const StatusColors sc = StatusColorsFor(palette());
  state_->setText(text);
  QPalette p = state_->palette();
  p.setColor(QPalette::WindowText, bad ? sc.bad : palette().color(QPalette::WindowText));
  state_->setPalette(p);
}

void DeploymentPanel::applyDeployment() {
  if (busy_) return;
  check();
  if (!parsed_ || !placement_.ok()) {
    setState(tr("Fix the deployment's errors first (see Checks)."), true);
    return;
  }
  startApply(parsed_, false);
}

void DeploymentPanel::startApply(std::shared_ptr<const app::Deployment> deployment, bool by_watch) {
  auto session = controller_->session();
  if (!session) {
    setState(tr("Connect a cluster first."), true);
    return;
  }
  busy_ = true;
  apply_->setEnabled(false);
  down_->setEnabled(true);  // Down ends the apply, then takes the deployment down
  applying_ = deployment;
  apply_cancel_ = std::make_shared<std::atomic<bool>>(false);
  const app::Deployment d = *deployment;
  const app::PlacementInput input = placementInput();
  setState(
      by_watch ? tr("Watch: applying %1 again…").arg(Q(d.name)) : tr("Applying %1…").arg(Q(d.name)),
      false);
  if (!by_watch) log_->appendPlainText(tr("apply %1").arg(Q(d.name)));
  // The cluster's profile: the router's admin token derives from its token
  // (apply tells a router on another node the replicas' endpoints with it).
  std::optional<app::ClusterProfile> profile;
  if (app::LocalCluster* local = controller_->localCluster()) {
    profile = local->profile();
  } else if (controller_->connection().kind == ConnectionSpec::Kind::kProfile) {
    auto loaded = app::LoadProfile(controller_->connection().profile.toStdString(),
                                   controller_->options().config_dir);
    if (loaded.ok()) profile = *loaded;
  }
  ops_.start([this, session, d, input, profile, closing = closing_, cancel = apply_cancel_] {
    app::ApplyOptions o;
    o.deadline = Deadline::AfterMs(kApplyDeadlineMs);
    if (profile) {
      if (auto endpoint = app::EndpointFor(*profile, 0); endpoint.ok())
        o.cluster_token = endpoint->token;
    }
    o.progress = [this, closing](const std::string& line) {
      if (!closing->load()) emit progressLine(Q(line));
    };
    // Closing the panel, or Down, ends an apply that waits for replicas
    // (within a poll interval) instead of holding the window's destructor,
    // or the Down, for up to the apply's deadline; what it started is stopped.
    o.cancelled = [closing, cancel] { return closing->load() || cancel->load(); };
    const auto r = app::ApplyDeployment(*session, d, input, o);
    DeploymentOpOutcome out;
    out.apply = true;
    out.name = Q(d.name);
    out.ok = r.ok();
    if (r.ok()) {
      for (const auto& n : r->started) out.started << Q(n);
      for (const auto& n : r->kept) out.kept << Q(n);
      for (const auto& n : r->stopped) out.stopped << Q(n);
      for (const auto& w : r->placement.warnings) {
        if (!closing->load()) emit progressLine(QStringLiteral("warning: ") + Q(w));
      }
    } else {
      out.message = Q(r.status().message());
    }
    if (!closing->load()) emit operationFinished(out);
  });
}

void DeploymentPanel::downDeployment() {
  if (busy_) {
    // During an apply: end it first, then take its deployment down (onOperation).
    // During a down (the button is disabled then), or pressed twice: nothing more.
    if (!applying_ || !down_after_apply_.empty()) return;
    down_after_apply_ = applying_->name;
    apply_cancel_->store(true);
    if (watched_ && watched_->name == down_after_apply_)
      stopWatching(tr("%1 is going down").arg(Q(down_after_apply_)));
    down_->setEnabled(false);
    setState(tr("Ending the apply of %1, then stopping it…").arg(Q(down_after_apply_)), false);
    log_->appendPlainText(tr("down %1: ending its apply first").arg(Q(down_after_apply_)));
    return;
  }
  if (!controller_->session()) {
    setState(tr("Connect a cluster first."), true);
    return;
  }
  // The editor's deployment, else the only one running.
  std::string name = parsed_ ? parsed_->name : model_.name;
  bool runs = false;
  for (const auto& d : running_) runs = runs || d.name == name;
  if (!runs && running_.size() == 1) name = running_[0].name;
  if (name.empty()) return;
  startDown(name);
}

void DeploymentPanel::startDown(const std::string& name) {
  auto session = controller_->session();
  if (!session) {
    setState(tr("Connect a cluster first."), true);
    return;
  }
  if (watched_ && watched_->name == name) stopWatching(tr("%1 is going down").arg(Q(name)));
  busy_ = true;
  apply_->setEnabled(false);
  down_->setEnabled(false);
  setState(tr("Stopping %1…").arg(Q(name)), false);
  log_->appendPlainText(tr("down %1").arg(Q(name)));
  ops_.start([this, session, name, closing = closing_] {
    const auto r = app::DownDeployment(*session, name, Deadline::AfterMs(kDownDeadlineMs));
    DeploymentOpOutcome out;
    out.apply = false;
    out.name = Q(name);
    out.ok = r.ok();
    if (r.ok()) {
      for (const auto& n : *r) out.stopped << Q(n);
    } else {
      out.message = Q(r.status().message());
    }
    if (!closing->load()) emit operationFinished(out);
  });
}

void DeploymentPanel::onOperation(const DeploymentOpOutcome& o) {
  busy_ = false;
  down_->setEnabled(true);
  if (o.apply && o.ok) {
    applied_ = applying_;
    // An apply by hand while watching: the watch keeps what was applied now.
    if (watched_) watched_ = applied_;
  } else if (o.apply && watched_) {
    watch_retry_ = QDeadlineTimer(kWatchRetryMs);  // not again at every status read
  }
  applying_.reset();
  if (!o.ok) {
    setState(
        tr("%1 %2 failed: %3").arg(o.apply ? tr("Apply of") : tr("Down of"), o.name, o.message),
        true);
    log_->appendPlainText(o.message);
  } else if (o.apply) {
    setState(tr("%1 applied: started %2, kept %3, stopped %4")
                 .arg(o.name)
                 .arg(o.started.size())
                 .arg(o.kept.size())
                 .arg(o.stopped.size()),
             false);
  } else {
    setState(tr("%1 is down: stopped %2 job(s)").arg(o.name).arg(o.stopped.size()), false);
  }
  check();
  // Down was pressed during this apply: now that it has ended, the down.
  if (o.apply && !down_after_apply_.empty()) {
    const std::string name = std::exchange(down_after_apply_, {});
    startDown(name);
    return;
  }
  // What runs now (a read already in flight is superseded).
  reading_ = false;
  refreshStatus();
}

// ---- watch ------------------------------------------------------------------------

bool DeploymentPanel::setWatching(bool on) {
  if (!on) {
    if (watched_) stopWatching(tr("turned off"));
    return true;
  }
  // What was applied last, else the editor's deployment when one of that
  // name runs (applied before the window was opened): turning the watch on
  // never starts a deployment that is not running.
  std::shared_ptr<const app::Deployment> d = applied_;
  if (!d && parsed_) {
    for (const auto& r : running_) {
      if (r.name == parsed_->name) d = parsed_;
    }
  }
  if (!d) {
    watch_->setChecked(false);
    setState(tr("Nothing to watch: apply the deployment first (or open the file of one that "
                "runs)."),
             true);
    return false;
  }
  watched_ = std::move(d);
  watch_->setChecked(true);
  log_->appendPlainText(tr("watch: keeping %1 running").arg(Q(watched_->name)));
  refreshStatus();
  return true;
}

void DeploymentPanel::stopWatching(const QString& why) {
  if (!watched_) return;
  log_->appendPlainText(tr("watch: off (%1)").arg(why));
  watched_.reset();
  watch_->setChecked(false);
}

}  // namespace octet::ui
