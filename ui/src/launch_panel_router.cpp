// The Launch panel's router flow: the node a cluster's router runs on, and
// `octet route --policy FILE` started by that node's agent (on the local
// cluster too, when the policy lies inside the node's model roots) or on this
// machine. (Its widgets sit on the topology card, built in launch_panel.cpp.)
#include <QComboBox>
#include <QFileInfo>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QSettings>
#include <QTableWidget>

#include "launch_panel_internal.h"
#include "octet/ui/instance_manager.h"
#include "octet/ui/launch_panel.h"

namespace octet::ui {

void LaunchPanel::refreshRouterNodes(const app::ClusterSnapshot& snap) {
  const bool remote = controller_->session() != nullptr;  // a cluster, local or not
  router_node_->setVisible(remote);
  // Rebuilt only when the nodes or their states change (snapshots come at 10 Hz).
  QStringList key;
  for (const auto& node : snap.nodes) {
    key << QString::fromStdString(node.name) +
               (node.state == app::NodeState::kUp ? QStringLiteral("+") : QStringLiteral("-"));
  }
  if (!remote) key.clear();
  if (key == router_node_key_) return;
  router_node_key_ = key;
  const QString current = router_node_->currentText();
  router_node_->clear();
  if (!remote) return;
  for (size_t i = 0; i < snap.nodes.size(); ++i) {
    router_node_->addItem(QString::fromStdString(snap.nodes[i].name), static_cast<int>(i));
    if (snap.nodes[i].state != app::NodeState::kUp) {
      SetItemEnabled(router_node_, static_cast<int>(i), false,
                     tr("node %1 is %2")
                         .arg(QString::fromStdString(snap.nodes[i].name),
                              QString::fromLatin1(app::NodeStateName(snap.nodes[i].state))));
    }
  }
  const int keep = router_node_->findText(current);
  if (keep >= 0) {
    router_node_->setCurrentIndex(keep);
  } else {
    for (size_t i = 0; i < snap.nodes.size(); ++i) {
      if (snap.nodes[i].state == app::NodeState::kUp) {
        router_node_->setCurrentIndex(static_cast<int>(i));
        break;
      }
    }
  }
}

void LaunchPanel::launchRouter() {
  QString here_why;  // why a local cluster's router runs beside its agents
  if (controller_->session()) {
    here_why = controller_->isLocal() ? whyRouterNotThroughLocalNode() : QString();
    if (here_why.isEmpty()) {
      launchRemoteRouter();
      return;
    }
  }
  app::InstanceSpec spec;
  spec.kind = app::InstanceSpec::Kind::kRouter;
  spec.policy_file = policy_->text().trimmed().toStdString();
  QString error;
  const QString name = tr("router · %1").arg(QFileInfo(policy_->text()).fileName());
  const int id = instances_->start(spec, name, &error);
  if (id < 0) {
    launch_state_->setText(tr("Could not start: %1").arg(error));
    return;
  }
  QSettings().setValue(QStringLiteral("launch/policy"), policy_->text());
  last_launched_ = id;
  last_beside_nodes_ = besideNodesNote(here_why);
  QString text = tr("Starting %1…").arg(name);
  if (!last_beside_nodes_.isEmpty()) text += QLatin1Char(' ') + last_beside_nodes_;
  launch_state_->setText(text);
  progress_->setVisible(true);
  refreshInstances();
  table_->selectRow(table_->rowCount() - 1);
}

QString LaunchPanel::whyRouterNotThroughLocalNode() const {
  const QString policy = policy_->text().trimmed();
  if (policy.isEmpty()) return {};  // launchRemoteRouter says what is missing
  const auto snap = controller_->snapshot();
  const int node = router_node_->currentData().isValid() ? router_node_->currentData().toInt() : -1;
  if (node < 0 || node >= static_cast<int>(snap->nodes.size()) ||
      snap->nodes[node].state != app::NodeState::kUp) {
    return tr("no local node is up for it");
  }
  return whyOutsideRoots({static_cast<size_t>(node)}, {policy});
}

// `octet route --policy FILE` on the chosen node, started by its agent; FILE is
// the path on that node. It serves where this machine reaches the agent.
void LaunchPanel::launchRemoteRouter() {
  const QString policy = policy_->text().trimmed();
  if (policy.isEmpty()) {
    launch_state_->setText(tr("Could not start: no routing policy file chosen"));
    return;
  }
  const auto snap = controller_->snapshot();
  const int node = router_node_->currentData().isValid() ? router_node_->currentData().toInt() : -1;
  if (node < 0 || node >= static_cast<int>(snap->nodes.size()) ||
      snap->nodes[node].state != app::NodeState::kUp) {
    launch_state_->setText(tr("Could not start: choose a node that is up for the router"));
    return;
  }
  const QString node_name = QString::fromStdString(snap->nodes[node].name);
  app::RemoteInstanceSpec spec;
  spec.kind = app::JobKind::kRouter;
  spec.policy_file = policy.toStdString();
  spec.nodes = {static_cast<size_t>(node)};
  spec.job_id = RemoteJobId(QStringLiteral("router"));
  const QString name = tr("router · %1 on %2").arg(QFileInfo(policy).fileName(), node_name);
  const int id = instances_->startRemote(controller_->session(), spec, name, {node_name});
  QSettings().setValue(QStringLiteral("launch/policy"), policy_->text());
  last_launched_ = id;
  last_beside_nodes_.clear();
  launch_state_->setText(tr("Starting %1 through its agent…").arg(name));
  progress_->setVisible(true);
  refreshInstances();
  table_->selectRow(table_->rowCount() - 1);
}

}  // namespace octet::ui
