#include "octet/ui/launch_panel.h"

#include <QApplication>
#include <QComboBox>
#include <QDateTime>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFontDatabase>
#include <QFormLayout>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QPlainTextEdit>
#include <QPointer>
#include <QProgressBar>
#include <QPushButton>
#include <QRegularExpression>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QShortcut>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QTableWidget>
#include <QThreadPool>
#include <QVBoxLayout>
#include <algorithm>
#include <map>

#include "launch_panel_internal.h"
#include "octet/app/local_instance.h"
#include "octet/app/training_run.h"
#include "octet/ui/instance_manager.h"
#include "octet/ui/resources.h"
#include "octet/ui/theme.h"
#include "octet/ui/widgets.h"

namespace octet::ui {

namespace {

QString Params(int64_t n) {
  if (n >= 1'000'000'000) return QStringLiteral("%1 B").arg(n / 1e9, 0, 'f', 2);
  if (n >= 1'000'000) return QStringLiteral("%1 M").arg(n / 1e6, 0, 'f', 1);
  if (n >= 1'000) return QStringLiteral("%1 K").arg(n / 1e3, 0, 'f', 1);
  return QString::number(n);
}

int64_t BusiestNodeActiveBytes(const app::LaunchMemoryPlan& p) {
  int64_t most = 0;
  for (const app::NodeMemoryPlan& n : p.per_node) {
    most = std::max(most, n.active_weight_bytes_per_token);
  }
  return most;
}

}  // namespace

void SetItemEnabled(QComboBox* box, int row, bool enabled, const QString& tooltip) {
  auto* model = qobject_cast<QStandardItemModel*>(box->model());
  if (!model) return;
  QStandardItem* item = model->item(row);
  item->setEnabled(enabled);
  item->setToolTip(tooltip);
}

std::string RemoteJobId(const QString& what) {
  QString base = what;
  base.replace(QRegularExpression(QStringLiteral("[^A-Za-z0-9._-]")), QStringLiteral("-"));
  return QStringLiteral("wb-%1-%2")
      .arg(base.left(40))
      .arg(QDateTime::currentMSecsSinceEpoch() % 100'000'000)
      .toStdString();
}

LaunchPanel::LaunchPanel(ClusterController* controller, InstanceManager* instances, QWidget* parent)
    : QWidget(parent), controller_(controller), instances_(instances) {
  setObjectName(QStringLiteral("launchPanel"));
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(18, 14, 18, 14);
  outer->addWidget(new PanelHeader(tr("Launch"),
                                   tr("Pick a model and a topology; run tensor-parallel inference, "
                                      "a router or a training run on this machine or, on a "
                                      "cluster of agents, on its nodes"),
                                   this));

  auto* top = new QHBoxLayout;
  outer->addLayout(top);
  top->addWidget(buildModelCard(), 3);
  top->addWidget(buildTopologyCard(), 2);
  outer->addWidget(buildTrainingCard());
  outer->addWidget(buildRunningCard(), 1);

  // What the panel follows: the instances it launched and the cluster's nodes.
  connect(instances_, &InstanceManager::changed, this, &LaunchPanel::refreshInstances);
  connect(instances_, &InstanceManager::logLine, this, &LaunchPanel::onLogLine);
  connect(instances_, &InstanceManager::trainingFigures, this, &LaunchPanel::showTrainingProgress);
  connect(instances_, &InstanceManager::stageChanged, this, &LaunchPanel::showTrainingProgress);
  connect(instances_, &InstanceManager::exited, this, &LaunchPanel::onExited);
  connect(instances_, &InstanceManager::instanceFigures, this, &LaunchPanel::refreshBackends);
  connect(controller_, &ClusterController::snapshotChanged, this, &LaunchPanel::refreshBackends);
  connect(controller_, &ClusterController::snapshotChanged, this, [this](const SnapshotPtr& s) {
    const int n = static_cast<int>(s->nodes.size());
    int64_t memory = 0;
    for (const auto& node : s->nodes) {
      // A simulated node's budget, else what the kernel reports.
      const int64_t m =
          static_cast<int64_t>(node.facts.memory.budget_bytes > 0 ? node.facts.memory.budget_bytes
                                                                  : node.facts.memory.total_bytes);
      if (m > 0 && (memory == 0 || m < memory)) memory = m;
    }
    train_ranks_->setMaximum(std::max(1, n));
    refreshRouterNodes(*s);
    if (n != node_count_ || memory != node_memory_) {
      node_count_ = n;
      node_memory_ = memory;
      refreshTpChoices();
    }
  });
  node_count_ = static_cast<int>(controller_->snapshot()->nodes.size());
  train_ranks_->setMaximum(std::max(1, node_count_));
  refreshRouterNodes(*controller_->snapshot());
  connect(tp_, qOverload<int>(&QComboBox::currentIndexChanged), this, [this] { replan(); });
  connect(quantize_, qOverload<int>(&QComboBox::currentIndexChanged), this,
          [this] { replan(); });
  connect(speculative_, qOverload<int>(&QComboBox::currentIndexChanged), this, [this] {
    const std::string method = speculativeMethod();
    draft_tokens_->setEnabled(method != "off");
    if (method != "off") {
      draft_tokens_->setRange(1, app::MaxDraftTokens(method));
      draft_tokens_->setValue(app::DefaultDraftTokens(method));
    }
    replan();  // the MTP layers count only when they are loaded
  });
  refreshSpeculative();
  refreshTpChoices();
}

std::string LaunchPanel::speculativeMethod() const {
  return speculative_->currentData().toString().toStdString();
}

void LaunchPanel::refreshSpeculative() {
  const bool has_mtp = summary_ && summary_->num_mtp_layers > 0;
  SetItemEnabled(speculative_, 2, has_mtp,
                 has_mtp ? QString()
                         : tr("this model has no multi-token-prediction layers; n-gram drafting "
                              "works with any model"));
  if (!has_mtp && speculativeMethod() == "mtp") speculative_->setCurrentIndex(0);
  const std::string method = speculativeMethod();
  draft_tokens_->setEnabled(method != "off");
  if (method == "off") {
    draft_tokens_->setRange(1, app::MaxDraftTokens("ngram"));
    draft_tokens_->setValue(app::DefaultDraftTokens("ngram"));
  }
}

// The model folder or catalog entry, what it holds, and its memory plan.
QWidget* LaunchPanel::buildModelCard() {
  auto* model_card = new Card(this);
  auto* ml = new QVBoxLayout(model_card);
  ml->addWidget(SectionLabel(tr("Model"), model_card));
  auto* pick = new QHBoxLayout;
  model_ = new QComboBox(model_card);
  model_->setObjectName(QStringLiteral("modelFolder"));
  model_->setEditable(true);
  model_->setInsertPolicy(QComboBox::NoInsert);
  model_->setMinimumContentsLength(28);
  model_->lineEdit()->setPlaceholderText(tr("model folder (config.json, *.safetensors)"));
  QSettings settings;
  for (const QString& dir : settings.value(QStringLiteral("launch/recentModels")).toStringList())
    model_->addItem(dir, QStringLiteral("dir:") + dir);
  // The model catalog: models too big to have here, for planning; and the
  // models that ship with the workbench (the demo model), to launch.
  const QString catalog = ResourcePath(QStringLiteral("models"));
  if (!catalog.isEmpty()) {
    const auto bundled = QDir(catalog).entryInfoList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Name);
    for (const QFileInfo& d : bundled) {
      const QString path = d.canonicalFilePath();
      if (!QFileInfo::exists(path + QStringLiteral("/config.json"))) continue;
      if (model_->findData(QStringLiteral("dir:") + path) >= 0) continue;  // a recent one
      model_->addItem(tr("bundled: %1").arg(d.fileName()), QStringLiteral("dir:") + path);
    }
    if (auto entries = app::ListCatalog(catalog.toStdString()); entries.ok()) {
      for (const app::ModelSummary& e : *entries) {
        model_->addItem(tr("catalog: %1").arg(QString::fromStdString(e.display_name)),
                        QStringLiteral("cat:") + QString::fromStdString(e.source));
      }
    }
  }
  model_->setCurrentIndex(-1);
  auto* browse = new QPushButton(tr("Browse…"), model_card);
  pick->addWidget(model_, 1);
  pick->addWidget(browse);
  ml->addLayout(pick);
  // What the model holds and its plan scroll where the panel is short (a
  // laptop's screen) rather than being cut off by the card's edge.
  auto* details = new QWidget;
  auto* dl = new QVBoxLayout(details);
  dl->setContentsMargins(0, 0, 0, 0);
  model_info_ = new QLabel(tr("No model chosen."), details);
  model_info_->setObjectName(QStringLiteral("modelInfo"));
  model_info_->setWordWrap(true);
  model_info_->setTextFormat(Qt::RichText);
  model_info_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  dl->addWidget(model_info_);
  dl->addWidget(SectionLabel(tr("Memory plan"), details));
  plan_ = new QLabel(details);
  plan_->setObjectName(QStringLiteral("memoryPlan"));
  plan_->setWordWrap(true);
  plan_->setTextFormat(Qt::RichText);
  plan_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  dl->addWidget(plan_);
  dl->addStretch(1);
  auto* scroll = new QScrollArea(model_card);
  scroll->setObjectName(QStringLiteral("modelDetails"));
  scroll->setFrameShape(QFrame::NoFrame);
  scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  scroll->setWidgetResizable(true);
  scroll->setMinimumHeight(8 * fontMetrics().height());
  scroll->setWidget(details);
  // The card's own background shows through.
  scroll->viewport()->setAutoFillBackground(false);
  details->setAutoFillBackground(false);
  ml->addWidget(scroll, 1);
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString dir =
        QFileDialog::getExistingDirectory(this, tr("Model folder"), model_->currentText());
    if (!dir.isEmpty()) setModelFolder(dir);
  });
  connect(model_->lineEdit(), &QLineEdit::editingFinished, this,
          [this] { setModelFolder(model_->currentText()); });
  connect(model_, qOverload<int>(&QComboBox::activated), this, [this](int row) {
    const QString data = model_->itemData(row).toString();
    if (data.startsWith(QLatin1String("cat:"))) {
      setCatalogEntry(data.mid(4));
    } else {
      setModelFolder(data.startsWith(QLatin1String("dir:")) ? data.mid(4) : model_->currentText());
    }
  });
  return model_card;
}

// TP degree, all-reduce algorithm and transport, Launch inference; the router's
// policy file (and node) and Launch router.
QWidget* LaunchPanel::buildTopologyCard() {
  QSettings settings;
  auto* topo_card = new Card(this);
  auto* tl = new QVBoxLayout(topo_card);
  tl->addWidget(SectionLabel(tr("Topology"), topo_card));
  auto* form = new QFormLayout;
  tp_ = new QComboBox(topo_card);
  tp_->setObjectName(QStringLiteral("tpDegree"));
  form->addRow(tr("TP degree"), tp_);
  algo_ = new QComboBox(topo_card);
  algo_->setObjectName(QStringLiteral("algorithm"));
  algo_->addItem(tr("auto"), QStringLiteral("auto"));
  algo_->addItem(tr("RoCEnante one-shot"), QStringLiteral("oneshot"));
  algo_->addItem(tr("RoCEnante ring"), QStringLiteral("ring"));
  algo_->addItem(tr("NCCL"), QStringLiteral("nccl"));
  SetItemEnabled(algo_, 3, false,
                 tr("octet serve runs the RoCEnante collectives; NCCL needs CUDA GPUs and is not "
                    "offered for serving here"));
  form->addRow(tr("All-reduce"), algo_);
  transport_ = new QComboBox(topo_card);
  transport_->setObjectName(QStringLiteral("transport"));
  transport_->addItem(tr("shared memory (one machine)"), QStringLiteral("shm"));
  transport_->addItem(tr("TCP"), QStringLiteral("tcp"));
  transport_->addItem(tr("RDMA verbs"), QStringLiteral("verbs"));
  SetItemEnabled(transport_, 2, false,
                 tr("local launches run every rank on this machine: shared memory or TCP"));
  form->addRow(tr("Transport"), transport_);
  quantize_ = new QComboBox(topo_card);
  quantize_->setObjectName(QStringLiteral("quantize"));
  quantize_->addItem(tr("as stored"), QStringLiteral("off"));
  quantize_->addItem(tr("NVFP4 at load"), QStringLiteral("nvfp4"));
  quantize_->setToolTip(
      tr("NVFP4 at load (octet serve --quantize nvfp4): each rank quantizes the linear weights "
         "its slice stores as BF16, F16 or F32 to 4-bit NVFP4 with per-16 scales as it loads: "
         "about a quarter of their memory and of the bytes a decode step reads; the logits move "
         "slightly. Weights already in NVFP4 stay as they are."));
  form->addRow(tr("Weights"), quantize_);
  // Speculative decoding: drafts checked in one batched forward (greedy
  // output unchanged, sampling keeps its distribution).
  auto* spec_row = new QHBoxLayout;
  speculative_ = new QComboBox(topo_card);
  speculative_->setObjectName(QStringLiteral("speculative"));
  speculative_->addItem(tr("off"), QStringLiteral("off"));
  speculative_->addItem(tr("n-gram (prompt lookup)"), QStringLiteral("ngram"));
  speculative_->addItem(tr("MTP head"), QStringLiteral("mtp"));
  speculative_->setToolTip(
      tr("Speculative decoding (octet serve --speculative): each step checks a few drafted "
         "tokens in one batched forward and keeps those the model agrees with; greedy output is "
         "unchanged and sampling keeps its distribution. n-gram drafts from the conversation so "
         "far (any model; strong where the answer copies its prompt); MTP drafts with the "
         "checkpoint's multi-token-prediction layers (loaded for it)."));
  draft_tokens_ = new QSpinBox(topo_card);
  draft_tokens_->setObjectName(QStringLiteral("draftTokens"));
  draft_tokens_->setPrefix(tr("drafts "));
  draft_tokens_->setToolTip(tr("tokens drafted per step (--draft-tokens)"));
  spec_row->addWidget(speculative_, 1);
  spec_row->addWidget(draft_tokens_);
  form->addRow(tr("Speculative"), spec_row);
  tl->addLayout(form);
  tp_why_ = new QLabel(topo_card);
  tp_why_->setObjectName(QStringLiteral("tpWhy"));
  tp_why_->setWordWrap(true);
  tp_why_->setForegroundRole(QPalette::PlaceholderText);
  tl->addWidget(tp_why_);
  auto* buttons = new QHBoxLayout;
  launch_ = new QPushButton(GlyphIcon(Glyph::kLaunch), tr("Launch inference"), topo_card);
  launch_->setObjectName(QStringLiteral("launchInference"));
  launch_->setDefault(true);
  launch_->setEnabled(false);
  buttons->addWidget(launch_);
  buttons->addStretch(1);
  tl->addLayout(buttons);
  tl->addSpacing(6);
  tl->addWidget(SectionLabel(tr("Router"), topo_card));
  auto* rrow = new QHBoxLayout;
  policy_ = new QLineEdit(topo_card);
  policy_->setObjectName(QStringLiteral("policyFile"));
  policy_->setPlaceholderText(tr("routing policy YAML"));
  policy_->setText(settings
                       .value(QStringLiteral("launch/policy"),
                              ResourcePath(QStringLiteral("routing/example-policy.yaml")))
                       .toString());
  auto* pbrowse = new QPushButton(tr("…"), topo_card);
  launch_router_ = new QPushButton(tr("Launch router"), topo_card);
  launch_router_->setObjectName(QStringLiteral("launchRouter"));
  // A cluster of agents: the node the router runs on (the policy file is the
  // one at that path on the node).
  router_node_ = new QComboBox(topo_card);
  router_node_->setObjectName(QStringLiteral("routerNode"));
  router_node_->setToolTip(tr("the node whose agent runs the router; the policy path is on it"));
  router_node_->setVisible(false);
  rrow->addWidget(policy_, 1);
  rrow->addWidget(pbrowse);
  rrow->addWidget(router_node_);
  rrow->addWidget(launch_router_);
  tl->addLayout(rrow);
  tl->addStretch(1);
  connect(pbrowse, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Routing policy"), policy_->text(),
                                                   tr("YAML (*.yaml *.yml)"));
    if (!f.isEmpty()) setPolicyFile(f);
  });
  connect(launch_, &QPushButton::clicked, this, &LaunchPanel::launchInference);
  connect(launch_router_, &QPushButton::clicked, this, &LaunchPanel::launchRouter);
  auto* shortcut = new QShortcut(QKeySequence(Qt::CTRL | Qt::Key_Return), this);
  shortcut->setContext(Qt::WidgetWithChildrenShortcut);
  connect(shortcut, &QShortcut::activated, this, &LaunchPanel::launchInference);
  return topo_card;
}

// The instances launched from here, Stop, and the selected one's output.
QWidget* LaunchPanel::buildRunningCard() {
  auto* run_card = new Card(this);
  auto* rl = new QVBoxLayout(run_card);
  auto* rhead = new QHBoxLayout;
  rhead->addWidget(SectionLabel(tr("Running"), run_card));
  rhead->addStretch(1);
  progress_ = new QProgressBar(run_card);
  progress_->setObjectName(QStringLiteral("launchProgress"));
  progress_->setRange(0, 0);
  progress_->setMaximumWidth(160);
  progress_->setVisible(false);
  launch_state_ = new QLabel(run_card);
  launch_state_->setObjectName(QStringLiteral("launchState"));
  launch_state_->setWordWrap(true);
  stop_ = new QPushButton(tr("Stop"), run_card);
  stop_->setObjectName(QStringLiteral("stopInstance"));
  stop_->setEnabled(false);
  rhead->addWidget(launch_state_, 2);
  rhead->addWidget(progress_);
  rhead->addWidget(stop_);
  rl->addLayout(rhead);
  table_ = new QTableWidget(0, 4, run_card);
  table_->setObjectName(QStringLiteral("instanceTable"));
  table_->setHorizontalHeaderLabels({tr("Instance"), tr("State"), tr("Endpoint"), tr("Detail")});
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->verticalHeader()->setVisible(false);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setMaximumHeight(130);
  rl->addWidget(table_);
  log_ = new QPlainTextEdit(run_card);
  log_->setObjectName(QStringLiteral("launchLog"));
  log_->setReadOnly(true);
  log_->setMaximumBlockCount(3000);
  log_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  log_->setPlaceholderText(tr("Output of the selected instance: model load, rendezvous, errors."));
  rl->addWidget(log_, 1);
  connect(stop_, &QPushButton::clicked, this, &LaunchPanel::stopSelected);
  connect(table_, &QTableWidget::itemSelectionChanged, this, [this] {
    const int id = selectedInstance();
    log_->clear();
    if (const InstanceInfo* info = instances_->find(id)) {
      log_->setPlainText(info->log.join(QLatin1Char('\n')));
      log_->verticalScrollBar()->setValue(log_->verticalScrollBar()->maximum());
    }
    const InstanceInfo* info = instances_->find(id);
    stop_->setEnabled(info && (info->state == InstanceInfo::State::kStarting ||
                               info->state == InstanceInfo::State::kReady ||
                               info->state == InstanceInfo::State::kRunning));
  });
  return run_card;
}

QString LaunchPanel::planVerdict() const { return plan_verdict_; }

void LaunchPanel::setPolicyFile(const QString& file) { policy_->setText(file); }

void LaunchPanel::setModelFolder(const QString& dir_in) {
  const QString dir = dir_in.trimmed();
  if (dir.isEmpty()) return;
  if (model_->currentText() != dir) model_->setEditText(dir);
  summarize(dir, false);
}

void LaunchPanel::setCatalogEntry(const QString& file) { summarize(file, true); }

void LaunchPanel::summarize(const QString& source, bool catalog) {
  model_info_->setText(tr("Reading %1 …").arg(source.toHtmlEscaped()));
  const int generation = ++summary_generation_;
  QPointer<LaunchPanel> self(this);
  QThreadPool::globalInstance()->start([self, source, catalog, generation] {
    auto r = catalog ? app::SummarizeCatalogEntry(source.toStdString(), 8)
                     : app::SummarizeModel(source.toStdString(), 8);
    app::ModelSummary summary;
    QString error;
    if (r.ok()) {
      summary = *r;
    } else {
      error = QString::fromStdString(r.status().message());
    }
    QMetaObject::invokeMethod(
        qApp,
        [self, source, summary, error, generation] {
          if (self && generation == self->summary_generation_)
            self->onSummary(source, summary, error);
        },
        Qt::QueuedConnection);
  });
}

void LaunchPanel::onSummary(const QString& dir, const app::ModelSummary& s, const QString& error) {
  if (!error.isEmpty()) {
    summary_.reset();
    refreshSpeculative();
    const QColor bad = StatusColorsFor(palette()).bad;
    model_info_->setText(
        QStringLiteral("<span style='color:%1'>%2</span>").arg(bad.name(), error.toHtmlEscaped()));
    refreshTpChoices();
    emit modelSummaryShown(false);
    return;
  }
  summary_ = s;
  refreshSpeculative();
  QString rows;
  auto row = [&rows](const QString& k, const QString& v) {
    rows += QStringLiteral("<tr><td style='padding-right:14px'><b>%1</b></td><td>%2</td></tr>")
                .arg(k, v.toHtmlEscaped());
  };
  row(tr("Name"), QString::fromStdString(s.display_name));
  if (s.from_catalog) {
    row(tr("Source"), tr("catalog entry%1 — for planning; launching needs the checkpoint folder")
                          .arg(s.fictional ? tr(" (fictional model)") : QString()));
    row(tr("Hub repo"), s.hub_repo.empty()
                            ? tr("none (fictional: no released checkpoint)")
                            : tr("%1 (octet pull %1)").arg(QString::fromStdString(s.hub_repo)));
  }
  row(tr("Architecture"), QString::fromStdString(s.architecture));
  row(tr("Parameters"),
      s.active_parameters > 0 && s.active_parameters < s.parameters
          ? tr("%1 (%2 active per token)").arg(Params(s.parameters), Params(s.active_parameters))
          : Params(s.parameters));
  row(tr("Weights dtype"), QString::fromStdString(s.dtype));
  row(tr("Size on disk"), s.num_mtp_layers > 0
                              ? tr("%1 (%2 in %n MTP layer(s), loaded only for MTP speculation)",
                                   nullptr, static_cast<int>(s.num_mtp_layers))
                                    .arg(QLocale().formattedDataSize(s.weight_bytes),
                                         QLocale().formattedDataSize(s.mtp_weight_bytes))
                              : QLocale().formattedDataSize(s.weight_bytes));
  row(tr("Read per token"),
      s.num_experts > 0
          ? tr("%1 of weights (%2 of %3 routed experts active)")
                .arg(QLocale().formattedDataSize(s.active_weight_bytes_per_token))
                .arg(s.experts_per_token)
                .arg(s.num_experts)
          : tr("%1 of weights").arg(QLocale().formattedDataSize(s.active_weight_bytes_per_token)));
  row(tr("Shape"), tr("%1 layers, hidden %2, %3 heads / %4 kv, vocab %5")
                       .arg(s.num_layers)
                       .arg(s.hidden_size)
                       .arg(s.num_heads)
                       .arg(s.num_kv_heads)
                       .arg(s.vocab_size));
  if (!s.from_catalog) {
    row(tr("Context"), QString::number(s.context));
    row(tr("Tokenizer"), s.has_tokenizer ? tr("tokenizer.json") : tr("none (chat needs one)"));
  }
  model_info_->setText(QStringLiteral("<table>%1</table>").arg(rows));
  if (s.from_catalog) {
    refreshTpChoices();
    emit modelSummaryShown(true);
    return;
  }
  // Remember the folder (most recent first, ten at most).
  QSettings settings;
  QStringList recent = settings.value(QStringLiteral("launch/recentModels")).toStringList();
  recent.removeAll(dir);
  recent.prepend(dir);
  while (recent.size() > 10) recent.removeLast();
  settings.setValue(QStringLiteral("launch/recentModels"), recent);
  refreshTpChoices();
  emit modelSummaryShown(true);
}

void LaunchPanel::refreshTpChoices() {
  const int previous = tp_->currentData().toInt();
  tp_->clear();
  const int nodes = std::max(1, node_count_);
  QStringList why;
  int first_valid = -1;
  for (int tp = 1; tp <= 8; ++tp) {
    QString reason;
    if (tp > nodes) {
      reason = tr("the cluster has %n node(s)", nullptr, nodes);
    } else if (summary_ && tp - 1 < static_cast<int>(summary_->tp_choices.size()) &&
               !summary_->tp_choices[tp - 1].valid) {
      reason = QString::fromStdString(summary_->tp_choices[tp - 1].why);
    }
    tp_->addItem(reason.isEmpty() ? QStringLiteral("TP %1").arg(tp)
                                  : QStringLiteral("TP %1 — not possible").arg(tp),
                 tp);
    SetItemEnabled(tp_, tp - 1, reason.isEmpty(), reason);
    if (reason.isEmpty() && first_valid < 0) first_valid = tp - 1;
    if (!reason.isEmpty() && tp <= nodes) {
      why << (reason.startsWith(QStringLiteral("TP"))
                  ? reason
                  : QStringLiteral("TP %1: %2").arg(tp).arg(reason));
    }
  }
  int want = first_valid;
  if (previous >= 1 && previous <= 8 &&
      tp_->model()->index(previous - 1, 0).flags() & Qt::ItemIsEnabled)
    want = previous - 1;
  tp_->setCurrentIndex(want);
  QString text = tr("Up to %n rank(s): one per node of the cluster.", nullptr, nodes);
  if (!why.isEmpty()) text += QLatin1Char('\n') + why.join(QLatin1Char('\n'));
  tp_why_->setText(text);
  launch_->setEnabled(summary_.has_value() && !summary_->from_catalog);
  replan();
}

void LaunchPanel::replan() {
  if (!summary_) {
    plan_->setText(tr("Choose a model to see whether it fits."));
    return;
  }
  const int nodes = std::max(1, tp_->currentData().toInt());
  // A node's memory as its agent reports it; 128 GiB (a DGX Spark) before any has.
  const int64_t memory = node_memory_ > 0 ? node_memory_ : (int64_t{128} << 30);
  const app::ModelSummary model = *summary_;
  const int64_t context = model.context > 0 ? std::min<int64_t>(model.context, 8192) : 8192;
  const bool quantize = quantize_->currentData().toString() == QLatin1String("nvfp4");
  const bool load_mtp = speculativeMethod() == "mtp";
  const int generation = ++plan_generation_;
  QPointer<LaunchPanel> self(this);
  QThreadPool::globalInstance()->start([self, model, nodes, memory, context, quantize, load_mtp,
                                        generation] {
    auto r = app::PlanModelMemory(model, nodes, memory, context, 1, quantize, load_mtp);
    app::LaunchMemoryPlan plan;
    QString error;
    if (r.ok()) {
      plan = *r;
    } else {
      error = QString::fromStdString(r.status().message());
    }
    QMetaObject::invokeMethod(
        qApp,
        [self, plan, error, generation] {
          if (self && generation == self->plan_generation_) self->onPlan(plan, error);
        },
        Qt::QueuedConnection);
  });
}

void LaunchPanel::onPlan(const app::LaunchMemoryPlan& p, const QString& error) {
  const StatusColors sc = StatusColorsFor(palette());
  if (!error.isEmpty()) {
    plan_verdict_ = error;
    plan_->setText(QStringLiteral("<span style='color:%1'>%2</span>")
                       .arg(sc.bad.name(), error.toHtmlEscaped()));
    emit planShown(false);
    return;
  }
  plan_verdict_ = QString::fromStdString(p.verdict);
  const QLocale loc;
  auto gb = [&loc](int64_t b) { return loc.formattedDataSize(std::max<int64_t>(0, b), 1); };
  QString html =
      QStringLiteral("<p style='color:%1'><b>%2</b> %3</p>")
          .arg((p.fits ? sc.good : sc.bad).name(), p.fits ? tr("Fits.") : tr("Does not fit."),
               plan_verdict_.toHtmlEscaped());
  html += QStringLiteral(
              "<table cellspacing=0 cellpadding=3><tr><th align=left>%1</th><th align=right>%2</th>"
              "<th align=right>%3</th><th align=right>%4</th><th align=right>%5</th>"
              "<th align=right>%6</th></tr>")
              .arg(tr("node"), tr("weights"), tr("KV cache"), tr("workspace"),
                   tr("reserve+headroom"), tr("free"));
  for (const app::NodeMemoryPlan& n : p.per_node) {
    html += QStringLiteral(
                "<tr><td>%1</td><td align=right>%2</td><td align=right>%3</td>"
                "<td align=right>%4</td><td align=right>%5</td>"
                "<td align=right style='color:%6'>%7</td></tr>")
                .arg(n.node)
                .arg(gb(n.weights_bytes), gb(n.kv_cache_bytes), gb(n.workspace_bytes),
                     gb(n.reserve_bytes + n.headroom_bytes), (n.fits ? sc.good : sc.bad).name(),
                     n.free_bytes < 0 ? tr("short %1").arg(gb(-n.free_bytes)) : gb(n.free_bytes));
  }
  html += QStringLiteral("</table><p>%1</p>")
              .arg(tr("Weights: %1 in memory; a decode step reads %2 (%3 on the busiest node)%4")
                       .arg(gb(p.weight_bytes), gb(p.active_weight_bytes_per_token),
                            gb(BusiestNodeActiveBytes(p)),
                            p.decode_tokens_per_s > 0
                                ? tr(", at most %1 for one sequence at %2 GB/s per node")
                                      .arg(FormatTps(p.decode_tokens_per_s))
                                      .arg(p.node_bandwidth / 1e9, 0, 'f', 0)
                                : QString())
                       .toHtmlEscaped());
  html += QStringLiteral("<small>%1</small>")
              .arg(tr("%1 per node, context %2, one sequence%3")
                       .arg(gb(p.node_memory))
                       .arg(summary_ && summary_->context > 0
                                ? std::min<int64_t>(summary_->context, 8192)
                                : 8192)
                       .arg(p.min_nodes > 0 ? tr("; fits from %n node(s)", nullptr, p.min_nodes)
                                            : QString())
                       .toHtmlEscaped());
  plan_->setText(html);
  emit planShown(p.fits);
}

int LaunchPanel::selectedInstance() const {
  const auto rows = table_->selectionModel()->selectedRows();
  if (rows.isEmpty()) return -1;
  return table_->item(rows.first().row(), 0)->data(Qt::UserRole).toInt();
}

void LaunchPanel::launchInference() {
  if (!summary_ || summary_->from_catalog) {
    launch_state_->setText(tr("Choose a model folder first (catalog entries are for planning)."));
    return;
  }
  const int tp = std::max(1, tp_->currentData().toInt());
  QString here_why;  // why a local cluster's instance runs beside its agents
  if (controller_->session()) {
    // A real cluster, or the local one when its nodes' agents may load the
    // folder: through the agents, so the node cards show the job and its memory.
    here_why = controller_->isLocal()
                   ? whyNotThroughLocalNodes(tp, {QString::fromStdString(summary_->source)})
                   : QString();
    if (here_why.isEmpty()) {
      launchRemoteInference();
      return;
    }
  }
  app::InstanceSpec spec;
  spec.kind = app::InstanceSpec::Kind::kInference;
  spec.model_dir = summary_->source;
  spec.tp = tp;
  spec.algo = algo_->currentData().toString().toStdString();
  spec.transport = transport_->currentData().toString().toStdString();
  spec.num_slots = 4;
  spec.context = static_cast<int>(std::min<int64_t>(summary_->context, 4096));
  spec.quantize = quantize_->currentData().toString().toStdString();
  spec.speculative = speculativeMethod();
  spec.draft_tokens = spec.speculative == "off" ? 0 : draft_tokens_->value();
  QString error;
  const QString name =
      QStringLiteral("%1 · TP %2").arg(QString::fromStdString(summary_->name)).arg(spec.tp);
  const int id = instances_->start(spec, name, &error);
  if (id < 0) {
    launch_state_->setText(tr("Could not start: %1").arg(error));
    return;
  }
  last_launched_ = id;
  last_beside_nodes_ = besideNodesNote(here_why);
  QString text =
      tr("Starting %1: loading the model, joining %n rank(s)…", nullptr, spec.tp).arg(name);
  if (!last_beside_nodes_.isEmpty()) text += QLatin1Char(' ') + last_beside_nodes_;
  launch_state_->setText(text);
  progress_->setVisible(true);
  refreshInstances();
  table_->selectRow(table_->rowCount() - 1);
}

// A cluster of agents (real nodes, or the local cluster's when they may load
// the folder): rank r on the r-th node that is up, started by that node's
// agent. The model folder is given by the same path on the nodes (the agents
// refuse a path outside their model roots, or one they lack).
void LaunchPanel::launchRemoteInference() {
  const int tp = std::max(1, tp_->currentData().toInt());
  std::vector<size_t> nodes;
  QStringList names;
  if (!upNodes(tp, &nodes, &names)) {
    launch_state_->setText(tr("Could not start: TP %1 needs %1 nodes up, %2 are.")
                               .arg(tp)
                               .arg(static_cast<int>(nodes.size())));
    return;
  }
  app::RemoteInstanceSpec spec;
  spec.model_dir = summary_->source;
  spec.nodes = nodes;
  spec.algo = algo_->currentData().toString().toStdString();
  spec.transport = transport_->currentData().toString().toStdString();
  spec.num_slots = 4;
  spec.context = static_cast<int>(std::min<int64_t>(summary_->context, 4096));
  spec.quantize = quantize_->currentData().toString().toStdString();
  spec.speculative = speculativeMethod();
  spec.draft_tokens = spec.speculative == "off" ? 0 : draft_tokens_->value();
  spec.job_id = RemoteJobId(QString::fromStdString(summary_->name));
  const QString name = QStringLiteral("%1 · TP %2 on %3")
                           .arg(QString::fromStdString(summary_->name))
                           .arg(tp)
                           .arg(names.join(QStringLiteral(", ")));
  const int id = instances_->startRemote(controller_->session(), spec, name, names);
  last_launched_ = id;
  last_beside_nodes_.clear();
  launch_state_->setText(
      tr("Starting %1 through the agents: loading the model, joining %n rank(s)…", nullptr, tp)
          .arg(name));
  progress_->setVisible(true);
  refreshInstances();
  table_->selectRow(table_->rowCount() - 1);
}

QString LaunchPanel::besideNodesNote(const QString& why) const {
  if (why.isEmpty()) return {};
  return tr("It runs on this machine beside the local nodes, and their cards do not show it: %1.")
      .arg(why);
}

QString LaunchPanel::whyNotThroughLocalNodes(int count, const QStringList& folders) const {
  std::vector<size_t> nodes;
  QStringList names;
  if (!upNodes(count, &nodes, &names)) {
    return tr("%n local node(s) needed up, %1 are", nullptr, count)
        .arg(static_cast<int>(nodes.size()));
  }
  return whyOutsideRoots(nodes, folders);
}

QString LaunchPanel::whyOutsideRoots(const std::vector<size_t>& nodes,
                                     const QStringList& folders) const {
  const auto snap = controller_->snapshot();
  for (const QString& folder : folders) {
    // As an agent resolves it (its real path inside a root's real path).
    const QString real = QFileInfo(folder).canonicalFilePath();
    for (size_t i : nodes) {
      const app::NodeView& n = snap->nodes[i];
      bool inside = false;
      for (const std::string& r : n.facts.model_roots) {
        const QString root = QFileInfo(QString::fromStdString(r)).canonicalFilePath();
        if (root.isEmpty() || real.isEmpty()) continue;
        if (real == root || real.startsWith(root.endsWith(QLatin1Char('/')) ? root : root + '/'))
          inside = true;
      }
      if (inside) continue;
      if (!n.has_facts) {
        return tr("node %1 has not said which folders it loads from yet")
            .arg(QString::fromStdString(n.name));
      }
      return tr("%1 is outside node %2's model folders (Connect: Model folders)")
          .arg(folder, QString::fromStdString(n.name));
    }
  }
  return {};
}

bool LaunchPanel::upNodes(int count, std::vector<size_t>* nodes, QStringList* names) const {
  const auto snap = controller_->snapshot();
  for (size_t i = 0; i < snap->nodes.size() && static_cast<int>(nodes->size()) < count; ++i) {
    if (snap->nodes[i].state != app::NodeState::kUp) continue;
    nodes->push_back(i);
    *names << QString::fromStdString(snap->nodes[i].name);
  }
  return static_cast<int>(nodes->size()) == count;
}

void LaunchPanel::stopSelected() {
  const int id = selectedInstance();
  if (id >= 0) instances_->stop(id);
}

void LaunchPanel::refreshInstances() {
  const int selected = selectedInstance();
  const StatusColors sc = StatusColorsFor(palette());
  const auto& list = instances_->instances();
  table_->setRowCount(static_cast<int>(list.size()));
  bool starting = false;
  for (int r = 0; r < list.size(); ++r) {
    const InstanceInfo& info = list[r];
    auto* name = new QTableWidgetItem(info.name);
    name->setData(Qt::UserRole, info.id);
    auto* state = new QTableWidgetItem(InstanceManager::stateName(info.state));
    QColor c = sc.muted;
    if (info.state == InstanceInfo::State::kReady || info.state == InstanceInfo::State::kRunning ||
        info.state == InstanceInfo::State::kFinished)
      c = sc.good;
    if (info.state == InstanceInfo::State::kStarting ||
        info.state == InstanceInfo::State::kStopping)
      c = sc.warning;
    if (info.state == InstanceInfo::State::kFailed) c = sc.bad;
    state->setForeground(c);
    table_->setItem(r, 0, name);
    table_->setItem(r, 1, state);
    table_->setItem(r, 2, new QTableWidgetItem(info.url));
    // An error, else (serving or training) which backend the ranks compute with.
    const bool live =
        info.state == InstanceInfo::State::kReady || info.state == InstanceInfo::State::kRunning;
    const QString detail_text = info.detail.isEmpty() && live ? backendsText(info) : info.detail;
    auto* detail = new QTableWidgetItem(detail_text);
    detail->setToolTip(detail_text);
    table_->setItem(r, 3, detail);
    starting = starting || info.state == InstanceInfo::State::kStarting;
    if (info.id == selected) table_->selectRow(r);
  }
  table_->resizeColumnsToContents();
  progress_->setVisible(starting);
  if (const InstanceInfo* last = instances_->find(last_launched_)) {
    if (last->state == InstanceInfo::State::kReady) {
      QString text = tr("%1 is serving on %2").arg(last->name, last->url);
      if (!last_beside_nodes_.isEmpty()) text += QStringLiteral(". ") + last_beside_nodes_;
      launch_state_->setText(text);
    } else if (last->state == InstanceInfo::State::kFailed) {
      launch_state_->setText(
          QStringLiteral("<span style='color:%1'>%2</span>")
              .arg(sc.bad.name(),
                   tr("%1 failed: %2").arg(last->name, last->detail).toHtmlEscaped()));
    } else if (last->state == InstanceInfo::State::kExited) {
      launch_state_->setText(tr("%1 stopped.").arg(last->name));
    } else if (last->state == InstanceInfo::State::kFinished) {
      launch_state_->setText(tr("%1 finished; the model is in %2").arg(last->name, last->out_dir));
    } else if (last->state == InstanceInfo::State::kRunning) {
      QString text = tr("%1 is training").arg(last->name);
      if (!last_beside_nodes_.isEmpty()) text += QStringLiteral(". ") + last_beside_nodes_;
      launch_state_->setText(text);
    }
  }
  const InstanceInfo* info = instances_->find(selectedInstance());
  stop_->setEnabled(info && (info->state == InstanceInfo::State::kStarting ||
                             info->state == InstanceInfo::State::kReady ||
                             info->state == InstanceInfo::State::kRunning));
}

QString LaunchPanel::backendsText(const InstanceInfo& info) const {
  std::map<uint32_t, std::string> by_rank;  // what each rank said
  if (!info.job_id.isEmpty()) {
    const std::string job = info.job_id.toStdString();
    for (const auto& n : controller_->snapshot()->nodes) {
      if (!n.has_telemetry) continue;
      for (const auto& w : n.telemetry.workers) {
        if (w.job_id == job && !w.backend.empty()) by_rank[w.rank] = w.backend;
      }
    }
  } else if (info.has_figures && !info.figures.backend.empty()) {
    // Rank 0's; the followers run the same build with the same flags here.
    for (int r = 0; r < info.ranks; ++r) by_rank[static_cast<uint32_t>(r)] = info.figures.backend;
  }
  if (by_rank.empty()) return {};
  bool same = static_cast<int>(by_rank.size()) == info.ranks;
  for (const auto& [rank, backend] : by_rank) same = same && backend == by_rank.begin()->second;
  if (same) {
    const QString name = QString::fromStdString(by_rank.begin()->second);
    return info.ranks == 1 ? tr("backend %1").arg(name)
                           : tr("backend %1 on each of %2 ranks").arg(name).arg(info.ranks);
  }
  QStringList parts;
  for (const auto& [rank, backend] : by_rank)
    parts << tr("rank %1 %2").arg(rank).arg(QString::fromStdString(backend));
  return parts.join(QStringLiteral(", "));
}

void LaunchPanel::refreshBackends() {
  QString key;
  for (const InstanceInfo& info : instances_->instances()) key += backendsText(info) + '\n';
  if (key == backends_key_) return;
  backends_key_ = key;
  refreshInstances();
}

void LaunchPanel::onLogLine(int id, const QString& line) {
  if (id == selectedInstance()) log_->appendPlainText(line);
}

}  // namespace octet::ui
