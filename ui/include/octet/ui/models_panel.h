// Models page: the models in this machine's Hugging Face cache (size,
// weight format, architecture, where), a repo id field with the memory
// planner's verdict for the current cluster before anything is downloaded
// (the Hub's file list and config.json only), Pull with progress (files,
// bytes, rate; cancellable, resumed by the next Pull) and Delete.
//
// Everything that touches the network or the disk runs off the GUI thread:
// listing and planning on pool threads, a pull on a PullWorker living on its
// own QThread, which the panel stops (cancel, then join) when it goes away.
// The cache and the Hub are the environment's (HF_HOME, HF_HUB_CACHE,
// HF_ENDPOINT, HF_TOKEN), as for `octet pull`.
#pragma once

#include <QString>
#include <QWidget>
#include <atomic>
#include <memory>

#include "octet/ui/cluster_controller.h"

class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QTableWidget;
class QThread;

namespace octet::ui {

// Runs one `app::hub::Pull` on the thread it lives on; progress and the
// outcome as queued signals.
class PullWorker : public QObject {
  Q_OBJECT
 public:
  explicit PullWorker(std::shared_ptr<std::atomic<bool>> cancel) : cancel_(std::move(cancel)) {}
 public slots:
  void pull(const QString& repo_ref);
 signals:
  void progress(const QString& text, int percent);
  void finished(bool ok, const QString& message);

 private:
  std::shared_ptr<std::atomic<bool>> cancel_;
};

class ModelsPanel : public QWidget {
  Q_OBJECT
 public:
  // `controller` (may be null) gives the current cluster's nodes and memory.
  explicit ModelsPanel(ClusterController* controller, QWidget* parent = nullptr);
  ~ModelsPanel() override;

  // Plans for this many nodes of this much memory (what the cluster's
  // snapshots otherwise set).
  void setPlanTarget(int nodes, int64_t node_memory);
  // Ask before deleting (on by default).
  void setConfirmDeletes(bool on) { confirm_deletes_ = on; }

  void refresh();  // re-reads the cache
  int localModelCount() const;
  QString planVerdict() const;  // "" before a plan
  bool pulling() const { return pulling_; }

 signals:
  void localModelsChanged();
  void planShown(bool ok);
  void pullFinished(bool ok, const QString& message);
  void pullRequested(const QString& repo_ref);  // to the worker

 private:
  void plan();
  void startPull();
  void cancelPull();
  void deleteSelected();
  void onPullFinished(bool ok, const QString& message);

  ClusterController* controller_;
  QTableWidget* local_ = nullptr;
  QLabel* cache_label_ = nullptr;
  QLabel* empty_hint_ = nullptr;  // in place of the table while the cache is empty
  QLineEdit* repo_ = nullptr;
  QPushButton* plan_button_ = nullptr;
  QPushButton* pull_button_ = nullptr;
  QPushButton* cancel_button_ = nullptr;
  QPushButton* delete_button_ = nullptr;
  QLabel* verdict_ = nullptr;
  QProgressBar* bar_ = nullptr;
  QLabel* progress_ = nullptr;
  QThread* thread_ = nullptr;
  PullWorker* worker_ = nullptr;
  std::shared_ptr<std::atomic<bool>> cancel_ = std::make_shared<std::atomic<bool>>(false);
  int nodes_ = 1;
  int64_t node_memory_ = int64_t{128} << 30;
  bool pulling_ = false;
  bool confirm_deletes_ = true;
  int list_generation_ = 0;
  int plan_generation_ = 0;
  QString verdict_text_;
};

}  // namespace octet::ui
