// The Deployments panel: a cluster split into instances on chosen nodes with
// a router in front (`octet deploy`, octet/app/deployment.h), edited, checked,
// applied and watched from the window.
//
//  - The editor: the instances as rows (name, model folder, TP, replicas,
//    nodes); the selected row's fields below, its nodes chosen by clicking
//    node cards in the cabling view or in a checklist (none: placed); an
//    optional router (policy file, node, port) whose pools may name instances
//    (the pools are listed with the instance each names; "New policy…" writes
//    one pool per instance). The YAML the form stands for is shown beside it
//    and may be edited as text: the form follows every valid edit.
//  - Validation as you edit, through the app's own code: the parser's
//    FILE:LINE:COL errors, the router policy's, and the placement's (a
//    deployment that needs more nodes than the cluster has, one that does not
//    fit a node's memory, a split a ring cannot carry); the placement table
//    (replica -> nodes, memory per node as `octet plan` counts it), and the
//    capacity `octet route plan` predicts for it (app::PlanDeploymentCapacity,
//    as `octet deploy check`: rates from the Benchmarks panel's run store, else
//    the router policy's capacity).
//  - "Open deployment…" / "Save as deployment…": the file `octet deploy`
//    reads (app::DeploymentToYaml, which ParseDeployment reads back the same).
//  - Apply / Down: app::ApplyDeployment / DownDeployment, the code of
//    `octet deploy apply|down`, on a worker thread (QThreadPool); progress and
//    the outcome come back as value-type signals, the window never waits.
//  - The running deployments (app::ReadDeployments, read every 2 s on a
//    worker thread while connected): each replica's state, nodes, endpoint
//    and decode tok/s (rank 0's figures from the telemetry the Dashboard
//    gets), in the colour its memory has in the cabling view, whose node
//    cards name the replicas they run; Stop ends one replica (its job on
//    every node), Down the whole deployment. Down during an apply ends the
//    apply first (it stops what it started, within a poll interval), then
//    takes that deployment down.
//  - Watch (`octet deploy watch`): while checked, the deployment applied
//    last is applied again whenever a read finds one of its replicas or its
//    router failed or gone (app::WhatIsAmiss; never on a read that a node
//    left unanswered). Status is read while watching even with the panel
//    hidden; after an apply that failed it waits 10 s before trying again.
//    Stop and Down by hand turn it off, so they are not undone.
//
// GUI thread only, like every panel; closing it waits for an apply in flight.
#pragma once

#include <QDeadlineTimer>
#include <QStringList>
#include <QThreadPool>
#include <QWidget>
#include <atomic>
#include <memory>
#include <vector>

#include "octet/app/deployment.h"
#include "octet/ui/cluster_controller.h"

class QGroupBox;
class QLabel;
class QLineEdit;
class QListWidget;
class QListWidgetItem;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;
class QCheckBox;
class QComboBox;
class QTableWidget;
class QTimer;

namespace octet::ui {

class CablingView;

// What an apply or a down came to.
struct DeploymentOpOutcome {
  bool apply = true;  // false: down
  bool ok = false;
  QString name;     // the deployment
  QString message;  // the error, or what was started / kept / stopped
  QStringList started, kept, stopped;
};

// One read of what the agents run, per deployment.
struct DeploymentStatusRead {
  uint64_t generation = 0;
  std::vector<app::DeploymentStatus> deployments;
  QStringList silent_up;  // nodes up that did not answer (their jobs are missing)
};

class DeploymentPanel : public QWidget {
  Q_OBJECT
 public:
  explicit DeploymentPanel(ClusterController* controller, QWidget* parent = nullptr);
  ~DeploymentPanel() override;

  // The YAML shown; the deployment it holds (null while it has errors); the
  // messages shown (errors, then warnings); the file opened or saved last.
  QString yamlText() const;
  std::shared_ptr<const app::Deployment> deployment() const { return parsed_; }
  QStringList messages() const;
  QString currentFile() const { return file_; }
  const app::Placement& placement() const { return placement_; }
  // The deployments the agents run, as last read.
  const std::vector<app::DeploymentStatus>& running() const { return running_; }
  // Whether an apply or a down is in flight.
  bool busy() const { return busy_; }
  // What the watch keeps running (null: not watching).
  std::shared_ptr<const app::Deployment> watched() const { return watched_; }

  // What "Open deployment…" / "Save as deployment…" do once a file is chosen.
  bool openFile(const QString& path, QString* error = nullptr);
  bool saveFile(const QString& path, QString* error = nullptr);

 signals:
  // After every check of the editor's content: whether it can be applied.
  void validated(bool ok);
  void progressLine(const QString& line);
  void operationFinished(const octet::ui::DeploymentOpOutcome& outcome);
  void statusRead(const octet::ui::DeploymentStatusRead& read);
  void runningChanged();

 public slots:
  void openDeployment();
  void saveDeploymentAs();
  void writePolicyForInstances();
  void applyDeployment();
  void downDeployment();
  // Starts (true) or ends the watch: the last applied deployment, else the
  // editor's when a deployment of its name runs. False when there is none.
  bool setWatching(bool on);
  void refreshStatus();

 protected:
  void showEvent(QShowEvent* event) override;

 private:
  // Form -> model -> text, and text -> model -> form.
  void formChanged();
  void textEdited();
  void setText(const QString& text);
  void check();
  void refreshForm();
  void refreshInstanceRow(int row);
  void showInstance(int row);
  void refreshNodeList();
  void toggleNode(const QString& node);
  void addInstance();
  void removeInstance();
  void showPlacement();
  void showCapacity(const app::Deployment& deployment, int cluster_nodes);
  // What the agents run.
  void onSnapshot(const SnapshotPtr& snapshot);
  void onStatusRead(const DeploymentStatusRead& read);
  void onOperation(const DeploymentOpOutcome& outcome);
  void refreshRunning();
  void refreshRates();
  void setState(const QString& text, bool bad);
  void startApply(std::shared_ptr<const app::Deployment> deployment, bool by_watch);
  void startDown(const std::string& name);
  void stopWatching(const QString& why);
  app::PlacementInput placementInput() const;
  QString fileLabel() const;
  QString chooseFile(bool save, const QString& caption, const QString& start);

  ClusterController* controller_;
  app::Deployment model_;                          // what the form shows
  std::shared_ptr<const app::Deployment> parsed_;  // the text's deployment (null: errors)
  app::Placement placement_;
  QString file_;
  bool updating_ = false;  // the form or text is being set from the model
  int current_ = -1;       // the instance shown in the fields

  QLineEdit* name_;
  QTableWidget* instances_;
  QPushButton* add_;
  QPushButton* remove_;
  QLineEdit* inst_name_;
  QLineEdit* inst_model_;
  QSpinBox* inst_tp_;
  QSpinBox* inst_replicas_;
  QListWidget* nodes_;
  CablingView* cabling_;
  QGroupBox* router_box_;
  QLineEdit* policy_;
  QComboBox* router_node_;
  QSpinBox* router_port_;
  QLabel* pools_;
  QPlainTextEdit* text_;
  QTimer* text_timer_;
  QListWidget* messages_;
  QTableWidget* placement_table_;
  QLabel* capacity_;
  QPushButton* apply_;
  QPushButton* down_;
  QCheckBox* watch_;
  QLabel* state_;
  QPlainTextEdit* log_;
  QTableWidget* running_table_;
  QTimer* status_timer_;

  QStringList node_names_;
  std::string nodes_key_;  // node names, states and memory: a change re-checks
  std::vector<app::DeploymentStatus> running_;
  std::string running_key_;
  bool busy_ = false;
  std::shared_ptr<const app::Deployment> applying_;  // the apply in flight's
  // Set by Down during an apply: the apply's wait ends (ApplyOptions::cancelled).
  std::shared_ptr<std::atomic<bool>> apply_cancel_;
  std::string down_after_apply_;  // the deployment Down takes down once the apply ends
  std::shared_ptr<const app::Deployment> applied_;   // the last that succeeded
  std::shared_ptr<const app::Deployment> watched_;   // null: not watching
  QDeadlineTimer watch_retry_{0};  // after a failed apply, the watch waits for this
  bool reading_ = false;
  uint64_t generation_ = 0;
  std::shared_ptr<std::atomic<bool>> closing_ = std::make_shared<std::atomic<bool>>(false);
  QThreadPool ops_;    // apply / down, one at a time
  QThreadPool reads_;  // status reads
};

}  // namespace octet::ui

Q_DECLARE_METATYPE(octet::ui::DeploymentOpOutcome)
Q_DECLARE_METATYPE(octet::ui::DeploymentStatusRead)
