// Launch panel: pick a model folder (architecture, parameters, dtype, size on
// disk and the TP degrees the engine accepts, each refused one with its
// reason), the topology (TP degree up to the cluster's node count), the
// all-reduce algorithm and transport, and launch an inference instance
// (`octet serve`) or a router gateway (`octet route`) on this machine; stop
// them; follow their output (model load, rendezvous, errors) in the log.
//
// Training: pick a data folder (prepared by `octet train prepare`, or .txt
// files, which are prepared first into a scratch folder as a step of the
// run), a model config (preset or config.json), steps, ranks (1..nodes),
// sequence length, batch size and an output folder, and launch `octet train
// --figures` as a local run; its progress (stage, step k/N, loss) and its
// failure line show here, and once it finishes its output folder is chosen
// as the model to serve.
//
// On a cluster of agents (not the embedded local cluster) the three launch
// through the nodes' agents instead (InstanceManager::startRemote): inference
// as TP ranks on the first nodes that are up, the router on the node chosen
// beside it (the policy path is the one on that node), a training run as
// data-parallel ranks (Ranks) on the first nodes that are up, with data and
// output folders given as paths on the nodes (prepared data; an existing
// output folder inside the agents' model roots).
//
// Reading a model folder's headers runs on a pool thread; processes are
// managed by the InstanceManager.
#pragma once

#include <QStringList>
#include <QTemporaryDir>
#include <QWidget>
#include <memory>
#include <vector>

#include "octet/app/model_summary.h"
#include "octet/ui/cluster_controller.h"

class QComboBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTableWidget;

namespace octet::ui {

class InstanceManager;
struct InstanceInfo;

class LaunchPanel : public QWidget {
  Q_OBJECT
 public:
  LaunchPanel(ClusterController* controller, InstanceManager* instances, QWidget* parent = nullptr);

  // Reads a model folder (as Browse does) and shows what it holds.
  void setModelFolder(const QString& dir);
  // Shows a catalog entry (resources/models/NAME.json): planning only.
  void setCatalogEntry(const QString& file);
  // The planner's last verdict shown ("" before one).
  QString planVerdict() const;
  void setPolicyFile(const QString& file);
  // The id of the last instance launched from here (-1 before any).
  int lastLaunched() const { return last_launched_; }
  // The id of the last training run launched from here (-1 before any).
  int lastTraining() const { return training_id_; }

 signals:
  void modelSummaryShown(bool ok);
  void planShown(bool fits);
  // A training run from here ended well (`out_dir` is its model folder) / could
  // not start or failed (`why`: the refusal or the run's failure line).
  void trainingFinished(const QString& out_dir);
  void trainingFailed(const QString& why);

 public slots:
  void launchInference();
  void launchRemoteInference();
  void launchRouter();
  void launchRemoteRouter();
  void launchTraining();
  void launchRemoteTraining();
  void stopSelected();

 private:
  // The constructor's sections, top to bottom: each builds its card (parented
  // to the panel) and wires its own controls. The training card and flow are
  // in launch_panel_training.cpp.
  QWidget* buildModelCard();
  QWidget* buildTopologyCard();
  QWidget* buildTrainingCard();
  QWidget* buildRunningCard();
  void onSummary(const QString& dir, const app::ModelSummary& summary, const QString& error);
  void refreshTpChoices();
  void replan();
  void onPlan(const app::LaunchMemoryPlan& plan, const QString& error);
  void summarize(const QString& source, bool catalog);
  void refreshInstances();
  void onLogLine(int id, const QString& line);
  int selectedInstance() const;
  void showTrainingProgress(int id);
  void onExited(int id, bool failed, const QString& detail);
  void setTrainingState(const QString& text, bool bad);
  // A training launch that could not start (shown and signalled), or one that
  // did: remember its folders, follow its progress, select its row.
  void trainingRefused(const QString& why);
  void trainingStarted(int id, const QString& data, const QString& out, const QString& state);
  // The first `count` nodes that are up (indices, names); false when fewer are.
  bool upNodes(int count, std::vector<size_t>* nodes, QStringList* names) const;
  // On the embedded local cluster: why a job on the first `count` local nodes
  // that reads or writes `folders` cannot go through their agents (too few
  // up, a folder outside a node's model roots), or "" when it can.
  QString whyNotThroughLocalNodes(int count, const QStringList& folders) const;
  // Why `folders` cannot be read by the agents of `nodes`: the first folder
  // outside a node's model roots (as an agent resolves it), or "".
  QString whyOutsideRoots(const std::vector<size_t>& nodes, const QStringList& folders) const;
  // The same for a router on the chosen router node: its policy file.
  QString whyRouterNotThroughLocalNode() const;
  // The same for a training run of the chosen ranks (prepared data only).
  QString whyNotThroughLocalNodesForTraining(const QString& data, const QString& out) const;
  // "It runs on this machine beside the local nodes ...: WHY." ("" for "").
  QString besideNodesNote(const QString& why) const;
  // Which kernel backend the instance's ranks compute with, from their figures
  // (a remote instance's through the agents' telemetry, a local one's from
  // rank 0, whose followers run the same build and flags on this machine):
  // "backend avx512 on each of 2 ranks", "rank 0 cuda, rank 1 avx512", or "".
  QString backendsText(const InstanceInfo& info) const;
  // Refreshes the instance table when what backendsText says has changed.
  void refreshBackends();
  void refreshRouterNodes(const app::ClusterSnapshot& snap);
  // The speculative choices the model allows (MTP only with MTP layers) and
  // the draft length's range and default for the method chosen.
  void refreshSpeculative();
  std::string speculativeMethod() const;

  ClusterController* controller_;
  InstanceManager* instances_;
  QComboBox* model_;
  QLabel* model_info_;
  QLabel* plan_;
  QComboBox* tp_;
  QLabel* tp_why_;
  QComboBox* algo_;
  QComboBox* transport_;
  QComboBox* quantize_;  // the weights as stored, or NVFP4 at load
  QComboBox* speculative_;  // off, n-gram or the model's MTP head
  QSpinBox* draft_tokens_;  // drafts a step (the method's range and default)
  QLineEdit* policy_;
  QPushButton* launch_;
  QPushButton* launch_router_;
  QComboBox* router_node_;
  QStringList router_node_key_;  // the nodes (and whether up) router_node_ lists
  QPushButton* stop_;
  QProgressBar* progress_;
  QLabel* launch_state_;
  QTableWidget* table_;
  QPlainTextEdit* log_;
  QLineEdit* train_data_;
  QComboBox* train_config_;
  QSpinBox* train_steps_;
  QSpinBox* train_ranks_;
  QSpinBox* train_seq_len_;
  QSpinBox* train_batch_;
  QLineEdit* train_out_;
  QPushButton* launch_training_;
  QProgressBar* train_progress_;
  QLabel* train_state_;
  int training_id_ = -1;
  // Scratch folders holding data prepared from text for this session's runs.
  std::vector<std::unique_ptr<QTemporaryDir>> scratch_;
  std::optional<app::ModelSummary> summary_;
  int node_count_ = 0;
  int last_launched_ = -1;
  // Why the last inference instance or training run is beside the local
  // cluster's nodes and not on them ("" when it is not), said while it starts
  // and while it serves or trains.
  QString last_beside_nodes_;
  QString backends_key_;  // every instance's backendsText, as last shown
  int summary_generation_ = 0;
  int plan_generation_ = 0;
  int64_t node_memory_ = 0;  // the smallest node's memory (0: unknown)
  QString plan_verdict_;
};

}  // namespace octet::ui
