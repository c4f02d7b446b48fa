// The Launch panel's training section and flow: its card, a local run
// (`octet train`, with text prepared first into a scratch folder) or a
// data-parallel run through the nodes' agents, and its progress and end.
#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QVBoxLayout>
#include <algorithm>
#include <climits>

#include "launch_panel_internal.h"
#include "octet/app/training_run.h"
#include "octet/ui/instance_manager.h"
#include "octet/ui/launch_panel.h"
#include "octet/ui/theme.h"
#include "octet/ui/widgets.h"

namespace octet::ui {

// Data, output folder, config, steps, ranks, sequence length and batch size,
// Launch training, and the run's progress.
QWidget* LaunchPanel::buildTrainingCard() {
  QSettings settings;
  auto* train_card = new Card(this);
  auto* trl = new QVBoxLayout(train_card);
  trl->addWidget(SectionLabel(tr("Training"), train_card));
  auto* tgrid = new QGridLayout;
  tgrid->setHorizontalSpacing(10);
  train_data_ = new QLineEdit(train_card);
  train_data_->setObjectName(QStringLiteral("trainingData"));
  train_data_->setPlaceholderText(
      tr("data folder: prepared (meta.json, train-*.bin) or .txt files"));
  train_data_->setText(settings.value(QStringLiteral("launch/trainingData")).toString());
  auto* dbrowse = new QPushButton(tr("…"), train_card);
  train_out_ = new QLineEdit(train_card);
  train_out_->setObjectName(QStringLiteral("trainingOut"));
  train_out_->setPlaceholderText(tr("output folder (becomes a model folder)"));
  train_out_->setText(settings.value(QStringLiteral("launch/trainingOut")).toString());
  auto* obrowse = new QPushButton(tr("…"), train_card);
  train_config_ = new QComboBox(train_card);
  train_config_->setObjectName(QStringLiteral("trainingConfig"));
  train_config_->setEditable(true);
  train_config_->setInsertPolicy(QComboBox::NoInsert);
  for (const char* preset : {"tiny", "d4", "d6", "d8", "d12", "d20"})
    train_config_->addItem(QLatin1String(preset));
  train_config_->setToolTip(
      tr("a preset (tiny: a CPU demo; d<depth>: width 64×depth) or the "
         "path of a config.json"));
  train_steps_ = new QSpinBox(train_card);
  train_steps_->setObjectName(QStringLiteral("trainingSteps"));
  train_steps_->setRange(1, 10'000'000);
  train_steps_->setValue(200);
  train_ranks_ = new QSpinBox(train_card);
  train_ranks_->setObjectName(QStringLiteral("trainingRanks"));
  train_ranks_->setRange(1, 1);
  train_ranks_->setToolTip(
      tr("data-parallel ranks: processes on this machine (octet train --ranks) or, on a "
         "cluster of agents, one per node"));
  train_seq_len_ = new QSpinBox(train_card);
  train_seq_len_->setObjectName(QStringLiteral("trainingSeqLen"));
  train_seq_len_->setRange(0, 65536);
  train_seq_len_->setSpecialValueText(tr("config's"));
  train_batch_ = new QSpinBox(train_card);
  train_batch_->setObjectName(QStringLiteral("trainingBatch"));
  train_batch_->setRange(1, 4096);
  train_batch_->setValue(8);
  train_batch_->setToolTip(tr("sequences per rank per micro-batch"));
  // One full-width card under the model and topology: two rows, the folders
  // on the first, the run's shape and the button on the second.
  tgrid->addWidget(new QLabel(tr("Data"), train_card), 0, 0);
  tgrid->addWidget(train_data_, 0, 1, 1, 5);
  tgrid->addWidget(dbrowse, 0, 6);
  tgrid->addWidget(new QLabel(tr("Output"), train_card), 0, 7);
  tgrid->addWidget(train_out_, 0, 8, 1, 4);
  tgrid->addWidget(obrowse, 0, 12);
  tgrid->addWidget(new QLabel(tr("Config"), train_card), 1, 0);
  tgrid->addWidget(train_config_, 1, 1);
  tgrid->addWidget(new QLabel(tr("Steps"), train_card), 1, 2);
  tgrid->addWidget(train_steps_, 1, 3);
  tgrid->addWidget(new QLabel(tr("Ranks"), train_card), 1, 4);
  tgrid->addWidget(train_ranks_, 1, 5);
  tgrid->addWidget(new QLabel(tr("Sequence"), train_card), 1, 7);
  tgrid->addWidget(train_seq_len_, 1, 8);
  tgrid->addWidget(new QLabel(tr("Batch"), train_card), 1, 9);
  tgrid->addWidget(train_batch_, 1, 10);
  launch_training_ = new QPushButton(GlyphIcon(Glyph::kLaunch), tr("Launch training"), train_card);
  launch_training_->setObjectName(QStringLiteral("launchTraining"));
  tgrid->addWidget(launch_training_, 1, 11, 1, 2);
  tgrid->setColumnStretch(1, 1);
  tgrid->setColumnStretch(8, 1);
  trl->addLayout(tgrid);
  auto* trow = new QHBoxLayout;
  train_progress_ = new QProgressBar(train_card);
  train_progress_->setObjectName(QStringLiteral("trainingProgress"));
  train_progress_->setVisible(false);
  train_state_ = new QLabel(train_card);
  train_state_->setObjectName(QStringLiteral("trainingState"));
  train_state_->setWordWrap(true);
  train_state_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  train_state_->setVisible(false);  // takes a line only when it says something
  trow->addWidget(train_state_, 1);
  trow->addWidget(train_progress_, 1);
  trl->addLayout(trow);
  connect(dbrowse, &QPushButton::clicked, this, [this] {
    const QString dir =
        QFileDialog::getExistingDirectory(this, tr("Training data folder"), train_data_->text());
    if (!dir.isEmpty()) train_data_->setText(dir);
  });
  connect(obrowse, &QPushButton::clicked, this, [this] {
    const QString dir =
        QFileDialog::getExistingDirectory(this, tr("Output folder"), train_out_->text());
    if (!dir.isEmpty()) train_out_->setText(dir);
  });
  connect(launch_training_, &QPushButton::clicked, this, &LaunchPanel::launchTraining);
  return train_card;
}

void LaunchPanel::setTrainingState(const QString& text, bool bad) {
  train_state_->setVisible(!text.isEmpty());
  if (bad) {
    train_state_->setText(QStringLiteral("<span style='color:%1'>%2</span>")
                              .arg(StatusColorsFor(palette()).bad.name(), text.toHtmlEscaped()));
  } else {
    train_state_->setText(text.toHtmlEscaped());
  }
}

void LaunchPanel::launchTraining() {
  const QString data = train_data_->text().trimmed();
  const QString out = train_out_->text().trimmed();
  QString here_why;  // why a local cluster's run stays beside its nodes
  if (controller_->session()) {
    if (controller_->isLocal()) {
      here_why = whyNotThroughLocalNodesForTraining(data, out);
      // An agent resolves the output folder's real path: it must exist.
      if (here_why.isEmpty() && !QFileInfo::exists(out) && !QDir().mkpath(out))
        return trainingRefused(tr("could not make the output folder %1").arg(out));
    }
    if (here_why.isEmpty()) {
      launchRemoteTraining();
      return;
    }
  }
  app::InstanceSpec spec;
  spec.kind = app::InstanceSpec::Kind::kTraining;
  spec.train_data_dir = data.toStdString();
  spec.train_out_dir = out.toStdString();
  spec.train_config = train_config_->currentText().trimmed().toStdString();
  spec.train_steps = train_steps_->value();
  spec.train_ranks = train_ranks_->value();
  spec.train_seq_len = train_seq_len_->value();
  spec.train_batch_size = train_batch_->value();
  // About ten validations over the run (each also ends the run's curve).
  spec.train_eval_every = std::max(1, train_steps_->value() / 10);
  spec.train_vocab_size = 4096;
  // Text is tokenized first, into a scratch folder of this session. Only the
  // top of the data folder is looked at here (meta.json, then the first .txt).
  auto data_kind = app::ClassifyTrainingData(spec.train_data_dir);
  if (data_kind.ok() && *data_kind == app::TrainingDataKind::kText) {
    auto scratch = std::make_unique<QTemporaryDir>(QDir::tempPath() +
                                                   QStringLiteral("/octet-train-data-XXXXXX"));
    if (!scratch->isValid()) {
      setTrainingState(tr("Could not start: no scratch folder for the prepared data (%1)")
                           .arg(scratch->errorString()),
                       true);
      return;
    }
    spec.train_prepared_dir = (scratch->path() + QStringLiteral("/data")).toStdString();
    scratch_.push_back(std::move(scratch));
  }
  QString error;
  const QString name = tr("train %1 · %2 steps · %n rank(s)", nullptr, spec.train_ranks)
                           .arg(QString::fromStdString(spec.train_config))
                           .arg(spec.train_steps);
  const int id = instances_->start(spec, name, &error);
  if (id < 0) return trainingRefused(error);
  const QString beside = besideNodesNote(here_why);
  trainingStarted(id, data, out,
                  tr("Starting %1…").arg(name) + (beside.isEmpty() ? QString() : ' ' + beside));
  last_beside_nodes_ = beside;
}

// The local cluster's agents run prepared data only (text is tokenized by a
// run on this machine), reading it and writing the model inside their roots.
QString LaunchPanel::whyNotThroughLocalNodesForTraining(const QString& data,
                                                        const QString& out) const {
  if (data.isEmpty() || out.isEmpty()) return tr("no data or output folder chosen");
  auto kind = app::ClassifyTrainingData(data.toStdString());
  if (!kind.ok()) return QString::fromStdString(kind.status().message());
  if (*kind == app::TrainingDataKind::kText) {
    return tr("the data is text, which a run here prepares first");
  }
  // A new output folder is judged by the folder it will be made in.
  return whyNotThroughLocalNodes(
      train_ranks_->value(), {data, QFileInfo::exists(out) ? out : QFileInfo(out).absolutePath()});
}

void LaunchPanel::trainingRefused(const QString& why) {
  setTrainingState(tr("Could not start: %1").arg(why), true);
  launch_state_->setText(tr("Could not start: %1").arg(why));
  emit trainingFailed(why);
}

void LaunchPanel::trainingStarted(int id, const QString& data, const QString& out,
                                  const QString& state) {
  QSettings settings;
  settings.setValue(QStringLiteral("launch/trainingData"), data);
  settings.setValue(QStringLiteral("launch/trainingOut"), out);
  last_launched_ = id;
  last_beside_nodes_.clear();
  training_id_ = id;
  train_progress_->setRange(0, 0);
  train_progress_->setVisible(true);
  launch_state_->setText(state);
  showTrainingProgress(id);
  refreshInstances();
  table_->selectRow(table_->rowCount() - 1);
}

// A data-parallel run across the first `ranks` nodes that are up: rank r of
// `octet train` on the r-th, started by its agent, joined through the
// collectives rendezvous rank 0's agent opens. The data and output folders are
// paths on the nodes: prepared data at the same path on each, and an existing
// output folder inside the agents' model roots (rank 0 writes the model there).
void LaunchPanel::launchRemoteTraining() {
  const QString data = train_data_->text().trimmed();
  const QString out = train_out_->text().trimmed();
  if (data.isEmpty()) return trainingRefused(tr("no training data folder chosen"));
  if (out.isEmpty()) return trainingRefused(tr("no output folder chosen for the model"));
  // The agents run training ranks only: text must be prepared on the nodes
  // first. Checked when this machine sees the folder too (a shared path).
  auto data_kind = app::ClassifyTrainingData(data.toStdString());
  if (data_kind.ok() && *data_kind == app::TrainingDataKind::kText) {
    return trainingRefused(tr("%1 holds text files; the nodes' agents run training ranks only: prepare "
                     "it on each node first (octet train prepare --out DIR %1) and choose DIR")
                      .arg(data));
  }
  const int ranks = train_ranks_->value();
  std::vector<size_t> nodes;
  QStringList names;
  if (!upNodes(ranks, &nodes, &names)) {
    return trainingRefused(tr("%n rank(s) need as many nodes up, %1 are", nullptr, ranks)
                      .arg(static_cast<int>(nodes.size())));
  }
  app::RemoteInstanceSpec spec;
  spec.kind = app::JobKind::kTraining;
  spec.model_dir = out.toStdString();
  spec.nodes = nodes;
  spec.algo = algo_->currentData().toString().toStdString();
  spec.transport = transport_->currentData().toString().toStdString();
  spec.train_data_dir = data.toStdString();
  spec.train_config = train_config_->currentText().trimmed().toStdString();
  spec.train_steps = train_steps_->value();
  spec.train_seq_len = train_seq_len_->value();
  spec.train_batch_size = train_batch_->value();
  spec.train_eval_every = std::max(1, train_steps_->value() / 10);
  spec.job_id = RemoteJobId(QStringLiteral("train-") + QString::fromStdString(spec.train_config));
  const QString name = tr("train %1 · %2 steps · %n rank(s) on %3", nullptr, ranks)
                           .arg(QString::fromStdString(spec.train_config))
                           .arg(spec.train_steps)
                           .arg(names.join(QStringLiteral(", ")));
  const int id = instances_->startRemote(controller_->session(), spec, name, names);
  trainingStarted(id, data, out, tr("Starting %1 through the agents…").arg(name));
}

void LaunchPanel::showTrainingProgress(int id) {
  if (id != training_id_) return;
  const InstanceInfo* info = instances_->find(id);
  if (!info || info->state == InstanceInfo::State::kFailed ||
      info->state == InstanceInfo::State::kFinished || info->state == InstanceInfo::State::kExited)
    return;
  const QString step = info->stage_count > 1
                           ? tr("Step %1 of %2: ").arg(info->stage + 1).arg(info->stage_count)
                           : QString();
  const auto& latest = info->training.latest();
  if (info->stage_name != QLatin1String("training")) {
    train_progress_->setRange(0, 0);
    setTrainingState(
        step + tr("%1 (tokenizer and token shards, vocabulary 4096)…").arg(info->stage_name),
        false);
    return;
  }
  if (!latest || !latest->has_step) {
    train_progress_->setRange(0, 0);
    setTrainingState(step + tr("training: building the model, first step…"), false);
    return;
  }
  const int64_t total = std::max<int64_t>(1, info->training.total_steps());
  const auto& losses = info->training.train_loss();
  const int64_t done = losses.empty() ? 0 : losses.back().step;
  train_progress_->setRange(0, static_cast<int>(std::min<int64_t>(total, INT32_MAX)));
  train_progress_->setValue(static_cast<int>(std::min<int64_t>(done, INT32_MAX)));
  QString text = step + tr("training: step %1/%2, loss %3, %4 tok/s")
                            .arg(done)
                            .arg(total)
                            .arg(latest->train_loss, 0, 'f', 4)
                            .arg(latest->train_tps, 0, 'f', 0);
  if (latest->has_val) text += tr(", validation loss %1").arg(latest->val_loss, 0, 'f', 4);
  setTrainingState(text, false);
}

void LaunchPanel::onExited(int id, bool failed, const QString& detail) {
  if (id != training_id_) return;
  const InstanceInfo* info = instances_->find(id);
  if (!info) return;
  train_progress_->setVisible(false);
  if (failed) {
    setTrainingState(tr("Training failed (%1): %2").arg(info->stage_name, detail), true);
    emit trainingFailed(detail);
  } else if (info->state == InstanceInfo::State::kFinished) {
    setTrainingState(
        tr("Finished: the model is in %1 (chosen above: launch inference to serve it).")
            .arg(info->out_dir),
        false);
    // The output folder is a model folder (config.json, model.safetensors,
    // tokenizer.json); a remote run's is on its rank 0 node, chosen here only
    // when this machine sees it too.
    if (info->nodes.isEmpty() || QFileInfo::exists(info->out_dir + QStringLiteral("/config.json")))
      setModelFolder(info->out_dir);
    emit trainingFinished(info->out_dir);
  } else {
    setTrainingState(tr("Training stopped."), false);
  }
}

}  // namespace octet::ui
