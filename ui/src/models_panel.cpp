#include "octet/ui/models_panel.h"

#include <QApplication>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QMessageBox>
#include <QPointer>
#include <QProgressBar>
#include <QPushButton>
#include <QTableWidget>
#include <QThread>
#include <QThreadPool>
#include <QVBoxLayout>
#include <algorithm>
#include <vector>

#include "octet/app/hub.h"
#include "octet/app/model_summary.h"
#include "octet/ui/widgets.h"

namespace octet::ui {
namespace {

struct LocalRow {
  app::hub::LocalModel model;
  QString format, architecture;  // from the snapshot's config and headers ("" : unreadable)
};

QString Size(int64_t bytes) { return QLocale().formattedDataSize(bytes); }

// Column order of the local models table.
enum Column { kRepo, kRevision, kSize, kFormat, kArchitecture, kWhere, kColumns };

}  // namespace

void PullWorker::pull(const QString& repo_ref) {
  cancel_->store(false);
  auto ref = app::hub::ParseRepoRef(repo_ref.trimmed().toStdString());
  if (!ref.ok()) {
    emit finished(false, QString::fromStdString(ref.status().message()));
    return;
  }
  const app::hub::HubConfig c = app::hub::HubConfig::FromEnvironment();
  app::hub::PullOptions o;
  o.cancel = cancel_.get();
  o.progress = [this](const app::hub::PullProgress& p) {
    const int percent = p.bytes_total > 0
                            ? static_cast<int>(100.0 * double(p.bytes_done) / double(p.bytes_total))
                            : 0;
    QString text = tr("%1 of %2 files, %3 of %4, %5/s")
                       .arg(p.files_done)
                       .arg(p.files_total)
                       .arg(Size(p.bytes_done), Size(p.bytes_total), Size(int64_t(p.bytes_per_s)));
    if (p.eta_s >= 0) text += tr(", about %1 s left").arg(static_cast<int>(p.eta_s + 0.5));
    if (!p.active.empty()) text += QStringLiteral(" — ") + QString::fromStdString(p.active[0].path);
    emit progress(text, percent);
  };
  auto r = app::hub::Pull(c, *ref, o);
  if (!r.ok()) {
    emit finished(false, QString::fromStdString(r.status().message()));
    return;
  }
  int downloaded = 0;
  for (const auto& f : r->files) downloaded += f.downloaded ? 1 : 0;
  emit finished(true, tr("%1: %2 files, %3 (%4 downloaded) in %5")
                          .arg(QString::fromStdString(r->ref.ToString()))
                          .arg(r->files.size())
                          .arg(Size(r->bytes_total))
                          .arg(downloaded)
                          .arg(QString::fromStdString(r->snapshot_dir)));
}

ModelsPanel::ModelsPanel(ClusterController* controller, QWidget* parent)
    : QWidget(parent), controller_(controller) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(18, 14, 18, 14);
  layout->addWidget(new PanelHeader(
      tr("Models"), tr("This machine's Hugging Face cache: plan a Hub model, pull it, delete it"),
      this));
  cache_label_ = new QLabel(this);
  cache_label_->setObjectName(QStringLiteral("cacheDir"));
  cache_label_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  cache_label_->setForegroundRole(QPalette::PlaceholderText);
  layout->addWidget(cache_label_);
  layout->addWidget(SectionLabel(tr("In the cache"), this));

  local_ = new QTableWidget(0, kColumns, this);
  local_->setObjectName(QStringLiteral("localModels"));
  local_->setHorizontalHeaderLabels(
      {tr("Repo"), tr("Revision"), tr("Size"), tr("Format"), tr("Architecture"), tr("Where")});
  local_->horizontalHeader()->setStretchLastSection(true);
  local_->setSelectionBehavior(QAbstractItemView::SelectRows);
  local_->setSelectionMode(QAbstractItemView::SingleSelection);
  local_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  local_->verticalHeader()->hide();
  layout->addWidget(local_, 1);
  // Shown in place of the table while the cache holds nothing.
  empty_hint_ = new QLabel(
      tr("No models in the cache yet. Enter a Hub repo below (for example Qwen/Qwen3-0.6B): "
         "Plan says whether it fits the cluster before anything is downloaded, Pull fetches it "
         "(an interrupted pull resumes), and a pulled model can be launched from Launch."),
      this);
  empty_hint_->setObjectName(QStringLiteral("emptyCacheHint"));
  empty_hint_->setWordWrap(true);
  empty_hint_->setAlignment(Qt::AlignCenter);
  empty_hint_->setForegroundRole(QPalette::PlaceholderText);
  empty_hint_->setMinimumHeight(120);
  layout->addWidget(empty_hint_, 1);
  empty_hint_->hide();

  auto* local_buttons = new QHBoxLayout;
  auto* refresh_button = new QPushButton(tr("Refresh"), this);
  refresh_button->setObjectName(QStringLiteral("refreshModels"));
  delete_button_ = new QPushButton(tr("Delete"), this);
  delete_button_->setObjectName(QStringLiteral("deleteModel"));
  delete_button_->setToolTip(tr("Removes every snapshot and blob of the selected repo"));
  local_buttons->addWidget(refresh_button);
  local_buttons->addWidget(delete_button_);
  local_buttons->addStretch(1);
  layout->addLayout(local_buttons);
  delete_button_->setEnabled(false);
  connect(local_->selectionModel(), &QItemSelectionModel::selectionChanged, this,
          [this] { delete_button_->setEnabled(local_->selectionModel()->hasSelection()); });

  layout->addSpacing(8);
  layout->addWidget(SectionLabel(tr("From the Hugging Face Hub"), this));

  auto* get = new QHBoxLayout;
  repo_ = new QLineEdit(this);
  repo_->setObjectName(QStringLiteral("repoId"));
  repo_->setPlaceholderText(tr("ORG/NAME[@REVISION], e.g. Qwen/Qwen3-8B"));
  plan_button_ = new QPushButton(tr("Plan"), this);
  plan_button_->setObjectName(QStringLiteral("planRepo"));
  plan_button_->setToolTip(
      tr("The planner's verdict for the current cluster from the Hub's file list and "
         "config.json; nothing is downloaded"));
  pull_button_ = new QPushButton(tr("Pull"), this);
  pull_button_->setObjectName(QStringLiteral("pullRepo"));
  cancel_button_ = new QPushButton(tr("Cancel"), this);
  cancel_button_->setObjectName(QStringLiteral("cancelPull"));
  cancel_button_->setEnabled(false);
  get->addWidget(new QLabel(tr("Hub repo:"), this));
  get->addWidget(repo_, 1);
  get->addWidget(plan_button_);
  get->addWidget(pull_button_);
  get->addWidget(cancel_button_);
  layout->addLayout(get);

  verdict_ = new QLabel(this);
  verdict_->setObjectName(QStringLiteral("hubVerdict"));
  verdict_->setWordWrap(true);
  verdict_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(verdict_);
  bar_ = new QProgressBar(this);
  bar_->setObjectName(QStringLiteral("pullProgress"));
  bar_->setRange(0, 100);
  bar_->setValue(0);
  bar_->hide();  // until a pull starts
  layout->addWidget(bar_);
  progress_ = new QLabel(this);
  progress_->setObjectName(QStringLiteral("pullStatus"));
  progress_->setWordWrap(true);
  layout->addWidget(progress_);

  thread_ = new QThread(this);
  thread_->setObjectName(QStringLiteral("octet-pull"));
  worker_ = new PullWorker(cancel_);
  worker_->moveToThread(thread_);
  connect(thread_, &QThread::finished, worker_, &QObject::deleteLater);
  connect(this, &ModelsPanel::pullRequested, worker_, &PullWorker::pull, Qt::QueuedConnection);
  connect(
      worker_, &PullWorker::progress, this,
      [this](const QString& text, int percent) {
        if (!pulling_) return;
        bar_->setValue(percent);
        progress_->setText(text);
      },
      Qt::QueuedConnection);
  connect(worker_, &PullWorker::finished, this, &ModelsPanel::onPullFinished, Qt::QueuedConnection);
  thread_->start();

  connect(refresh_button, &QPushButton::clicked, this, &ModelsPanel::refresh);
  connect(delete_button_, &QPushButton::clicked, this, &ModelsPanel::deleteSelected);
  connect(plan_button_, &QPushButton::clicked, this, &ModelsPanel::plan);
  connect(repo_, &QLineEdit::returnPressed, this, &ModelsPanel::plan);
  connect(pull_button_, &QPushButton::clicked, this, &ModelsPanel::startPull);
  connect(cancel_button_, &QPushButton::clicked, this, &ModelsPanel::cancelPull);

  if (controller_) {
    connect(controller_, &ClusterController::snapshotChanged, this, [this](const SnapshotPtr& s) {
      int64_t memory = 0;
      for (const auto& node : s->nodes) {
        const int64_t m = static_cast<int64_t>(node.facts.memory.budget_bytes > 0
                                                   ? node.facts.memory.budget_bytes
                                                   : node.facts.memory.total_bytes);
        if (m > 0 && (memory == 0 || m < memory)) memory = m;
      }
      if (!s->nodes.empty()) nodes_ = static_cast<int>(s->nodes.size());
      if (memory > 0) node_memory_ = memory;
    });
  }
  refresh();
}

ModelsPanel::~ModelsPanel() {
  // A pull in flight stops at its next read; its partial files stay for the next one.
  cancel_->store(true);
  thread_->quit();
  thread_->wait();
}

void ModelsPanel::setPlanTarget(int nodes, int64_t node_memory) {
  nodes_ = std::max(1, nodes);
  node_memory_ = node_memory;
}

int ModelsPanel::localModelCount() const { return local_->rowCount(); }
QString ModelsPanel::planVerdict() const { return verdict_text_; }

void ModelsPanel::refresh() {
  const int generation = ++list_generation_;
  QPointer<ModelsPanel> self(this);
  QThreadPool::globalInstance()->start([self, generation] {
    const app::hub::HubConfig c = app::hub::HubConfig::FromEnvironment();
    auto models = app::hub::ListLocalModels(c);
    std::vector<LocalRow> rows;
    QString error;
    if (models.ok()) {
      for (const auto& m : *models) {
        LocalRow row{m, {}, {}};
        if (!m.commit.empty() && m.missing_files == 0) {
          if (auto s = app::SummarizeModel(m.snapshot_dir, 1); s.ok()) {
            row.format = QString::fromStdString(s->dtype);
            row.architecture = QString::fromStdString(s->architecture);
          }
        }
        rows.push_back(std::move(row));
      }
    } else {
      error = QString::fromStdString(models.status().message());
    }
    const QString cache = QString::fromStdString(c.cache_dir);
    QMetaObject::invokeMethod(
        qApp,
        [self, generation, rows, error, cache] {
          if (!self || generation != self->list_generation_) return;
          self->cache_label_->setText(error.isEmpty() ? tr("Cache: %1").arg(cache)
                                                      : tr("Cache: %1 (%2)").arg(cache, error));
          self->local_->setRowCount(0);
          for (const auto& r : rows) {
            const int i = self->local_->rowCount();
            self->local_->insertRow(i);
            QString refs;
            for (const auto& ref : r.model.refs)
              refs += (refs.isEmpty() ? "" : ",") + QString::fromStdString(ref);
            const QString commit = QString::fromStdString(r.model.commit.substr(0, 10));
            QString where = QString::fromStdString(r.model.snapshot_dir);
            if (r.model.commit.empty()) where = tr("nothing finished yet");
            if (r.model.incomplete_files > 0) {
              where += tr(" (%n partial file(s): Pull resumes)", nullptr, r.model.incomplete_files);
            }
            const QString cells[kColumns] = {
                QString::fromStdString(r.model.repo),
                refs.isEmpty() ? commit : refs + " (" + commit + ")",
                Size(r.model.commit.empty() ? r.model.repo_bytes : r.model.bytes),
                r.format.isEmpty() ? tr("-") : r.format,
                r.architecture.isEmpty() ? tr("-") : r.architecture,
                where};
            for (int c = 0; c < kColumns; ++c) {
              self->local_->setItem(i, c, new QTableWidgetItem(cells[c]));
            }
          }
          self->local_->resizeColumnsToContents();
          const bool empty = rows.empty() && error.isEmpty();
          self->local_->setVisible(!empty);
          self->empty_hint_->setVisible(empty);
          emit self->localModelsChanged();
        },
        Qt::QueuedConnection);
  });
}

void ModelsPanel::plan() {
  const QString repo = repo_->text().trimmed();
  if (repo.isEmpty()) return;
  const int generation = ++plan_generation_;
  const int nodes = nodes_;
  const int64_t memory = node_memory_;
  verdict_->setText(tr("Asking the Hub for %1's file list and config …").arg(repo));
  QPointer<ModelsPanel> self(this);
  QThreadPool::globalInstance()->start([self, generation, repo, nodes, memory] {
    QString text;
    bool ok = false;
    // A pulled repo is planned from its folder; any other from the Hub.
    const app::hub::HubConfig c = app::hub::HubConfig::FromEnvironment();
    auto ref = app::hub::ParseRepoRef(repo.toStdString());
    Result<app::ModelSummary> summary = InvalidArgumentError("");
    QString from;
    if (!ref.ok()) {
      summary = ref.status();
    } else if (auto snap = app::hub::ResolveSnapshot(c, *ref); snap.ok()) {
      summary = app::SummarizeModel(*snap, 8);
      from = tr("planned from the pulled copy");
    } else {
      auto info = app::FetchHubModelInfo(repo.toStdString());
      if (info.ok()) {
        summary = app::SummarizeHubModel(*info, 8);
        from = tr("planned from the Hub before download (%1 in %2 safetensors file(s), commit %3)")
                   .arg(Size(info->safetensors_bytes))
                   .arg(info->safetensors_files)
                   .arg(QString::fromStdString(info->commit.substr(0, 12)));
      } else {
        summary = info.status();
      }
    }
    if (summary.ok()) {
      auto p = app::PlanModelMemory(*summary, nodes, memory);
      if (p.ok()) {
        ok = true;
        text = tr("%1 on %n node(s) of %2: %3 — %4", nullptr, nodes)
                   .arg(repo, Size(memory), QString::fromStdString(p->verdict), from);
      } else {
        text = QString::fromStdString(p.status().message());
      }
    } else {
      text = QString::fromStdString(summary.status().message());
    }
    QMetaObject::invokeMethod(
        qApp,
        [self, generation, text, ok] {
          if (!self || generation != self->plan_generation_) return;
          self->verdict_text_ = ok ? text : QString();
          self->verdict_->setText(text);
          emit self->planShown(ok);
        },
        Qt::QueuedConnection);
  });
}

void ModelsPanel::startPull() {
  const QString repo = repo_->text().trimmed();
  if (repo.isEmpty() || pulling_) return;
  pulling_ = true;
  pull_button_->setEnabled(false);
  cancel_button_->setEnabled(true);
  bar_->setValue(0);
  bar_->show();
  progress_->setText(tr("Pulling %1 …").arg(repo));
  emit pullRequested(repo);
}

void ModelsPanel::cancelPull() {
  if (!pulling_) return;
  cancel_->store(true);
  progress_->setText(tr("Stopping … (partial files are kept; Pull resumes them)"));
}

void ModelsPanel::onPullFinished(bool ok, const QString& message) {
  pulling_ = false;
  pull_button_->setEnabled(true);
  cancel_button_->setEnabled(false);
  if (ok) bar_->setValue(100);
  progress_->setText(ok ? message : tr("Pull failed: %1").arg(message));
  refresh();
  emit pullFinished(ok, message);
}

void ModelsPanel::deleteSelected() {
  const auto rows = local_->selectionModel()->selectedRows();
  if (rows.isEmpty()) return;
  const QString repo = local_->item(rows.front().row(), kRepo)->text();
  if (confirm_deletes_ &&
      QMessageBox::question(this, tr("Delete model"),
                            tr("Delete %1 from the cache (every snapshot and blob)?").arg(repo)) !=
          QMessageBox::Yes) {
    return;
  }
  const app::hub::HubConfig c = app::hub::HubConfig::FromEnvironment();
  if (Status s = app::hub::RemoveLocalModel(c, repo.toStdString()); !s.ok()) {
    progress_->setText(tr("Delete failed: %1").arg(QString::fromStdString(s.message())));
  } else {
    progress_->setText(tr("Deleted %1").arg(repo));
  }
  refresh();
}

}  // namespace octet::ui
