#include "octet/ui/deployment_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFontDatabase>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QIcon>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPixmap>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSaveFile>
#include <QScrollArea>
#include <QSpinBox>
#include <QSplitter>
#include <QStandardPaths>
#include <QTabWidget>
#include <QTableWidget>
#include <QTimer>
#include <QVBoxLayout>
#include <algorithm>
#include <map>
#include <optional>

#include "deployment_panel_cells.h"
#include "octet/app/deployment_edit.h"
#include "octet/ui/cabling_view.h"
#include "octet/ui/job_colors.h"
#include "octet/ui/resources.h"
#include "octet/ui/theme.h"
#include "octet/ui/widgets.h"

namespace octet::ui {

using deployment_cells::Cell;
using deployment_cells::NodesText;
using deployment_cells::Q;

namespace {

constexpr int kStatusIntervalMs = 2000;

QTableWidget* MakeTable(const QStringList& headers, const QString& name, QWidget* parent) {
  auto* t = new QTableWidget(0, static_cast<int>(headers.size()), parent);
  t->setObjectName(name);
  t->setHorizontalHeaderLabels(headers);
  t->verticalHeader()->setVisible(false);
  t->setSelectionBehavior(QAbstractItemView::SelectRows);
  t->setSelectionMode(QAbstractItemView::SingleSelection);
  t->setEditTriggers(QAbstractItemView::NoEditTriggers);
  t->horizontalHeader()->setStretchLastSection(true);
  t->setAlternatingRowColors(true);
  return t;
}

}  // namespace

DeploymentPanel::DeploymentPanel(ClusterController* controller, QWidget* parent)
    : QWidget(parent), controller_(controller) {
  qRegisterMetaType<DeploymentOpOutcome>();
  qRegisterMetaType<DeploymentStatusRead>();
  ops_.setMaxThreadCount(1);
  reads_.setMaxThreadCount(1);
  setObjectName(QStringLiteral("deploymentPanel"));

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(16, 12, 16, 12);
  auto* header =
      new PanelHeader(tr("Deployments"), tr("Models on chosen nodes, a router in front"), this);
  auto* open = new QPushButton(tr("Open deployment…"), header);
  open->setObjectName(QStringLiteral("openDeployment"));
  auto* save = new QPushButton(tr("Save as deployment…"), header);
  save->setObjectName(QStringLiteral("saveDeployment"));
  apply_ = new QPushButton(tr("Apply"), this);
  apply_->setObjectName(QStringLiteral("applyDeployment"));
  apply_->setToolTip(
      tr("Start every replica through the nodes' agents, then the router "
         "(octet deploy apply); a changed file changes only what changed"));
  down_ = new QPushButton(tr("Down"), this);
  down_->setObjectName(QStringLiteral("downDeployment"));
  down_->setToolTip(tr("Stop every replica and the router of this deployment (octet deploy down)"));
  watch_ = new QCheckBox(tr("Watch"), this);
  watch_->setObjectName(QStringLiteral("watchDeployment"));
  watch_->setToolTip(
      tr("Keep the deployment applied last running (octet deploy watch): apply it again when "
         "a replica or the router fails or is gone. Stop and Down turn this off."));
  header->addAction(open);
  header->addAction(save);
  layout->addWidget(header);
  connect(open, &QPushButton::clicked, this, &DeploymentPanel::openDeployment);
  connect(save, &QPushButton::clicked, this, &DeploymentPanel::saveDeploymentAs);
  connect(apply_, &QPushButton::clicked, this, &DeploymentPanel::applyDeployment);
  connect(down_, &QPushButton::clicked, this, &DeploymentPanel::downDeployment);
  connect(watch_, &QCheckBox::clicked, this, [this](bool on) { setWatching(on); });

  // The three columns scroll when the window is smaller than they need (they
  // never make the window's minimum size larger).
  auto* scroll = new QScrollArea(this);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  auto* split = new QSplitter(Qt::Horizontal);
  scroll->setWidget(split);
  layout->addWidget(scroll, 1);

  // ---- left: the form ----
  auto* form_side = new QWidget(split);
  auto* fl = new QVBoxLayout(form_side);
  fl->setContentsMargins(0, 0, 6, 0);
  auto* name_row = new QFormLayout;
  name_ = new QLineEdit(form_side);
  name_->setObjectName(QStringLiteral("deploymentName"));
  name_->setPlaceholderText(tr("letters, digits, '_' and '-'"));
  name_row->addRow(tr("Name"), name_);
  fl->addLayout(name_row);
  fl->addWidget(SectionLabel(tr("Instances"), form_side));
  instances_ = MakeTable({tr("Name"), tr("Model folder"), tr("TP"), tr("Replicas"), tr("Nodes")},
                         QStringLiteral("deploymentInstances"), form_side);
  instances_->setMinimumHeight(110);
  fl->addWidget(instances_, 1);
  auto* row_buttons = new QHBoxLayout;
  add_ = new QPushButton(tr("Add instance"), form_side);
  add_->setObjectName(QStringLiteral("addInstance"));
  remove_ = new QPushButton(tr("Remove instance"), form_side);
  remove_->setObjectName(QStringLiteral("removeInstance"));
  row_buttons->addWidget(add_);
  row_buttons->addWidget(remove_);
  row_buttons->addStretch(1);
  fl->addLayout(row_buttons);

  auto* inst_box = new QGroupBox(tr("Selected instance"), form_side);
  auto* ib = new QVBoxLayout(inst_box);
  auto* inst_form = new QFormLayout;
  inst_name_ = new QLineEdit(inst_box);
  inst_name_->setObjectName(QStringLiteral("instanceName"));
  inst_model_ = new QLineEdit(inst_box);
  inst_model_->setObjectName(QStringLiteral("instanceModel"));
  inst_model_->setPlaceholderText(tr("folder path on the nodes"));
  auto* browse_model = new QPushButton(tr("Browse…"), inst_box);
  browse_model->setObjectName(QStringLiteral("browseModel"));
  auto* model_row = new QHBoxLayout;
  model_row->addWidget(inst_model_, 1);
  model_row->addWidget(browse_model);
  inst_tp_ = new QSpinBox(inst_box);
  inst_tp_->setObjectName(QStringLiteral("instanceTp"));
  inst_tp_->setRange(1, 8);
  inst_replicas_ = new QSpinBox(inst_box);
  inst_replicas_->setObjectName(QStringLiteral("instanceReplicas"));
  inst_replicas_->setRange(1, 8);
  inst_form->addRow(tr("Name"), inst_name_);
  inst_form->addRow(tr("Model"), model_row);
  inst_form->addRow(tr("TP"), inst_tp_);
  inst_form->addRow(tr("Replicas"), inst_replicas_);
  ib->addLayout(inst_form);
  auto* nodes_col = new QVBoxLayout;
  auto* nodes_label = new QLabel(tr("Nodes (click; none: placed)"), inst_box);
  nodes_label->setForegroundRole(QPalette::PlaceholderText);
  nodes_col->addWidget(nodes_label);
  nodes_ = new QListWidget(inst_box);
  nodes_->setObjectName(QStringLiteral("instanceNodes"));
  nodes_->setToolTip(
      tr("The nodes of this instance's ranks, replica by replica (TP x replicas "
         "of them); click a node here or its card in the cabling view"));
  nodes_col->addWidget(nodes_, 1);
  auto* clear_nodes = new QPushButton(tr("Let it be placed"), inst_box);
  clear_nodes->setObjectName(QStringLiteral("clearNodes"));
  nodes_col->addWidget(clear_nodes);
  ib->addLayout(nodes_col, 1);
  fl->addWidget(inst_box);

  router_box_ = new QGroupBox(tr("Router in front"), form_side);
  router_box_->setObjectName(QStringLiteral("routerBox"));
  router_box_->setCheckable(true);
  router_box_->setChecked(false);
  auto* rf = new QFormLayout(router_box_);
  policy_ = new QLineEdit(router_box_);
  policy_->setObjectName(QStringLiteral("routerPolicy"));
  policy_->setPlaceholderText(tr("routing policy file (pools may say `instance: NAME`)"));
  auto* browse_policy = new QPushButton(tr("Browse…"), router_box_);
  browse_policy->setObjectName(QStringLiteral("browsePolicy"));
  auto* new_policy = new QPushButton(tr("New policy…"), router_box_);
  new_policy->setObjectName(QStringLiteral("writePolicy"));
  new_policy->setToolTip(tr("Write a routing policy with one pool per instance"));
  auto* policy_row = new QHBoxLayout;
  policy_row->addWidget(policy_, 1);
  policy_row->addWidget(browse_policy);
  rf->addRow(tr("Policy"), policy_row);
  rf->addRow(QString(), new_policy);
  router_node_ = new QComboBox(router_box_);
  router_node_->setObjectName(QStringLiteral("routerNode"));
  router_node_->addItem(tr("placed"), QString());
  rf->addRow(tr("Node"), router_node_);
  router_port_ = new QSpinBox(router_box_);
  router_port_->setObjectName(QStringLiteral("routerPort"));
  router_port_->setRange(0, 65535);
  router_port_->setSpecialValueText(tr("any free port"));
  rf->addRow(tr("Port"), router_port_);
  pools_ = new QLabel(router_box_);
  pools_->setObjectName(QStringLiteral("routerPools"));
  pools_->setWordWrap(true);
  rf->addRow(tr("Pools"), pools_);
  fl->addWidget(router_box_);
  split->addWidget(form_side);

  // ---- middle: the file, the checks, the placement ----
  auto* mid = new QWidget(split);
  auto* ml = new QVBoxLayout(mid);
  ml->setContentsMargins(6, 0, 6, 0);
  ml->addWidget(SectionLabel(tr("Deployment file"), mid));
  text_ = new QPlainTextEdit(mid);
  text_->setObjectName(QStringLiteral("deploymentYaml"));
  text_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  text_->setLineWrapMode(QPlainTextEdit::NoWrap);
  ml->addWidget(text_, 3);
  ml->addWidget(SectionLabel(tr("Checks"), mid));
  messages_ = new QListWidget(mid);
  messages_->setObjectName(QStringLiteral("deploymentMessages"));
  messages_->setWordWrap(true);
  ml->addWidget(messages_, 1);
  ml->addWidget(SectionLabel(tr("Placement"), mid));
  placement_table_ =
      MakeTable({tr("Replica"), tr("Model"), tr("TP"), tr("Nodes"), tr("Memory per node")},
                QStringLiteral("placementTable"), mid);
  ml->addWidget(placement_table_, 2);
  capacity_ = new QLabel(mid);
  capacity_->setObjectName(QStringLiteral("deploymentCapacity"));
  capacity_->setWordWrap(true);
  capacity_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  capacity_->setToolTip(
      tr("What `octet route plan` predicts for this deployment: aggregate "
         "throughput against the whole cluster serving the large model alone"));
  ml->addWidget(capacity_);
  split->addWidget(mid);

  // ---- right: the cluster and what runs ----
  auto* right = new QWidget(split);
  auto* rl = new QVBoxLayout(right);
  rl->setContentsMargins(6, 0, 0, 0);
  rl->addWidget(SectionLabel(tr("Cluster"), right));
  cabling_ = new CablingView(right);
  cabling_->setObjectName(QStringLiteral("deploymentCabling"));
  cabling_->setMinimumHeight(220);
  rl->addWidget(cabling_, 3);
  rl->addWidget(SectionLabel(tr("Running"), right));
  running_table_ =
      MakeTable({tr("Replica"), tr("State"), tr("Nodes"), tr("Endpoint"), tr("tok/s"), QString()},
                QStringLiteral("runningReplicas"), right);
  rl->addWidget(running_table_, 2);
  auto* run_buttons = new QHBoxLayout;
  run_buttons->addWidget(apply_);
  run_buttons->addWidget(down_);
  run_buttons->addWidget(watch_);
  run_buttons->addStretch(1);
  rl->addLayout(run_buttons);
  state_ = new QLabel(right);
  state_->setObjectName(QStringLiteral("deploymentState"));
  state_->setWordWrap(true);
  state_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  rl->addWidget(state_);
  log_ = new QPlainTextEdit(right);
  log_->setObjectName(QStringLiteral("deploymentLog"));
  log_->setReadOnly(true);
  log_->setMaximumBlockCount(2000);
  log_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  rl->addWidget(log_, 1);
  split->addWidget(right);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 3);
  split->setStretchFactor(2, 3);

  // ---- wiring ----
  text_timer_ = new QTimer(this);
  text_timer_->setSingleShot(true);
  text_timer_->setInterval(250);
  connect(text_timer_, &QTimer::timeout, this, &DeploymentPanel::textEdited);
  connect(text_, &QPlainTextEdit::textChanged, this, [this] {
    if (!updating_) text_timer_->start();
  });
  connect(name_, &QLineEdit::textEdited, this, [this](const QString& t) {
    model_.name = t.toStdString();
    formChanged();
  });
  connect(instances_, &QTableWidget::currentCellChanged, this,
          [this](int row, int, int, int) { showInstance(row); });
  connect(add_, &QPushButton::clicked, this, &DeploymentPanel::addInstance);
  connect(remove_, &QPushButton::clicked, this, &DeploymentPanel::removeInstance);
  auto instance_field = [this](auto apply) {
    if (updating_ || current_ < 0 || current_ >= static_cast<int>(model_.instances.size())) return;
    apply(model_.instances[static_cast<size_t>(current_)]);
    refreshInstanceRow(current_);
    formChanged();
  };
  connect(inst_name_, &QLineEdit::textEdited, this, [instance_field](const QString& t) {
    instance_field([&](app::DeployInstanceSpec& i) { i.name = t.toStdString(); });
  });
  connect(inst_model_, &QLineEdit::textEdited, this, [instance_field](const QString& t) {
    instance_field([&](app::DeployInstanceSpec& i) { i.model = t.toStdString(); });
  });
  connect(inst_tp_, &QSpinBox::valueChanged, this, [instance_field](int v) {
    instance_field([&](app::DeployInstanceSpec& i) { i.tp = v; });
  });
  connect(inst_replicas_, &QSpinBox::valueChanged, this, [instance_field](int v) {
    instance_field([&](app::DeployInstanceSpec& i) { i.replicas = v; });
  });
  connect(browse_model, &QPushButton::clicked, this, [this, instance_field] {
    if (current_ < 0) return;
    const QString dir =
        QFileDialog::getExistingDirectory(this, tr("Model folder"), inst_model_->text());
    if (dir.isEmpty()) return;
    inst_model_->setText(dir);
    instance_field([&](app::DeployInstanceSpec& i) { i.model = dir.toStdString(); });
  });
  connect(nodes_, &QListWidget::itemClicked, this,
          [this](QListWidgetItem* item) { toggleNode(item->data(Qt::UserRole).toString()); });
  connect(cabling_, &CablingView::nodeSelected, this, &DeploymentPanel::toggleNode);
  connect(clear_nodes, &QPushButton::clicked, this, [this, instance_field] {
    instance_field([](app::DeployInstanceSpec& i) { i.nodes.clear(); });
    refreshNodeList();
  });
  connect(router_box_, &QGroupBox::toggled, this, [this](bool on) {
    if (updating_) return;
    model_.router.present = on;
    formChanged();
  });
  connect(policy_, &QLineEdit::textEdited, this, [this](const QString& t) {
    model_.router.policy = t.toStdString();
    formChanged();
  });
  connect(browse_policy, &QPushButton::clicked, this, [this] {
    const QString f = chooseFile(false, tr("Routing policy"), policy_->text());
    if (f.isEmpty()) return;
    model_.router.policy = f.toStdString();
    formChanged();
  });
  connect(new_policy, &QPushButton::clicked, this, &DeploymentPanel::writePolicyForInstances);
  connect(router_node_, &QComboBox::activated, this, [this](int index) {
    model_.router.node = router_node_->itemData(index).toString().toStdString();
    formChanged();
  });
  connect(router_port_, &QSpinBox::valueChanged, this, [this](int v) {
    if (updating_) return;
    model_.router.port = v;
    formChanged();
  });

  connect(this, &DeploymentPanel::progressLine, log_, &QPlainTextEdit::appendPlainText);
  connect(this, &DeploymentPanel::operationFinished, this, &DeploymentPanel::onOperation);
  connect(this, &DeploymentPanel::statusRead, this, &DeploymentPanel::onStatusRead);
  connect(controller_, &ClusterController::snapshotChanged, this, &DeploymentPanel::onSnapshot);
  connect(controller_, &ClusterController::jobStopped, this, [this](const JobStopOutcome& o) {
    if (!o.ok) setState(tr("Stopping %1 failed: %2").arg(o.job_id, o.error), true);
    refreshStatus();
  });
  status_timer_ = new QTimer(this);
  status_timer_->setInterval(kStatusIntervalMs);
  connect(status_timer_, &QTimer::timeout, this, [this] {
    // Hidden and not watching: no reads (Apply and Down read once done).
    if (isVisible() || watched_) refreshStatus();
  });
  status_timer_->start();

  // A new deployment: one instance to start from. On the local cluster, the
  // demo model that ships with the workbench (every local node may load it),
  // so that Apply works as the panel opens; elsewhere the model is for the
  // user to give (a folder path on the nodes).
  model_.name = "deployment";
  app::DeployInstanceSpec first;
  first.name = "large";
  if (controller_->connection().kind == ConnectionSpec::Kind::kLocal) {
    if (const QString demo = ResourcePath(QStringLiteral("models/nanochat-demo"));
        !demo.isEmpty()) {
      first.name = "demo";
      first.model = demo.toStdString();
    }
  }
  model_.instances.push_back(first);
  current_ = 0;
  refreshForm();
  formChanged();
  onSnapshot(controller_->snapshot());
}

DeploymentPanel::~DeploymentPanel() {
  closing_->store(true);
  ops_.waitForDone();
  reads_.waitForDone();
}

QString DeploymentPanel::yamlText() const { return text_->toPlainText(); }

QStringList DeploymentPanel::messages() const {
  QStringList out;
  for (int i = 0; i < messages_->count(); ++i) out << messages_->item(i)->text();
  return out;
}

QString DeploymentPanel::fileLabel() const {
  return file_.isEmpty() ? QStringLiteral("untitled-deployment.yaml") : file_;
}

// ---- form and text ----------------------------------------------------------------

void DeploymentPanel::formChanged() {
  if (updating_) return;
  setText(Q(app::DeploymentToYaml(model_, file_.toStdString())));
  check();
  if (parsed_) {
    // The parser's view (policy paths resolved) is the model from now on.
    const int keep = current_;
    model_ = *parsed_;
    current_ = keep;
  }
}

void DeploymentPanel::setText(const QString& text) {
  if (text == text_->toPlainText()) return;
  updating_ = true;
  text_->setPlainText(text);
  updating_ = false;
  text_timer_->stop();
}

void DeploymentPanel::textEdited() {
  check();
  if (parsed_) {
    const int keep = current_;
    model_ = *parsed_;
    current_ = std::min(keep, static_cast<int>(model_.instances.size()) - 1);
    refreshForm();
  }
}

void DeploymentPanel::check() {
  const std::string label = fileLabel().toStdString();
  const app::DeploymentParseResult r =
      app::ParseDeployment(text_->toPlainText().toStdString(), label);
  messages_->clear();
  const StatusColors sc = StatusColorsFor(palette());
  auto add = [&](const QString& text, const QColor& color) {
    auto* item = new QListWidgetItem(text, messages_);
    item->setForeground(color);
  };
  parsed_ = r.deployment;
  placement_ = app::Placement();
  capacity_->clear();
  bool ok = r.ok();
  for (const auto& e : r.errors) add(Q(e.ToString()), sc.bad);
  if (r.ok()) {
    const app::RouterPolicyCheck policy = app::CheckRouterPolicy(*r.deployment);
    for (const auto& e : policy.errors) add(Q(e), sc.bad);
    ok = ok && policy.errors.empty();
    QStringList pools;
    for (const auto& [pool, instance] : policy.pools) {
      if (instance.empty()) {
        pools << tr("%1: listed replicas").arg(Q(pool));
      } else if (const auto* i = r.deployment->Find(instance)) {
        pools << tr("%1 → instance %2 (%3 × TP %4)")
                     .arg(Q(pool), Q(instance))
                     .arg(i->replicas)
                     .arg(i->tp);
      } else {
        pools << tr("%1 → instance %2 (not in this deployment)").arg(Q(pool), Q(instance));
      }
    }
    pools_->setText(r.deployment->router.present
                        ? (pools.isEmpty() ? tr("—") : pools.join(QStringLiteral("\n")))
                        : QString());
    const SnapshotPtr snap = controller_->snapshot();
    if (!snap || snap->nodes.empty()) {
      add(tr("Connect a cluster to see where the replicas would run."), sc.muted);
    } else {
      placement_ = app::PlaceDeployment(*r.deployment, placementInput());
      for (const auto& e : placement_.errors) add(Q(label + ": " + e), sc.bad);
      for (const auto& w : placement_.warnings) add(tr("warning: %1").arg(Q(w)), sc.warning);
      ok = ok && placement_.ok();
      if (placement_.ok()) {
        showCapacity(*r.deployment, static_cast<int>(snap->nodes.size()));
      }
      if (ok) {
        add(tr("%n replica(s) on %1 of %2 nodes%3", nullptr,
               static_cast<int>(r.deployment->replica_count()))
                .arg(r.deployment->node_count())
                .arg(snap->nodes.size())
                .arg(placement_.router_node.empty()
                         ? QString()
                         : tr(", the router on %1").arg(Q(placement_.router_node))),
            sc.good);
      }
    }
  } else {
    pools_->clear();
  }
  showPlacement();
  apply_->setEnabled(ok && !busy_);
  emit validated(ok);
}

void DeploymentPanel::showCapacity(const app::Deployment& d, int cluster_nodes) {
  // The Benchmarks panel's run store (its default place), when there is one.
  const QString store = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) +
                        QStringLiteral("/bench-runs.sqlite");
  const app::DeploymentCapacity cap = app::PlanDeploymentCapacity(
      d, cluster_nodes, QFileInfo::exists(store) ? store.toStdString() : std::string());
  if (cap.available) {
    capacity_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
    capacity_->setText(Q(cap.text).trimmed());
  } else {
    capacity_->setFont(font());
    capacity_->setText(tr("Capacity: %1").arg(Q(cap.reason.empty() ? cap.text : cap.reason)));
  }
}

void DeploymentPanel::showPlacement() {
  placement_table_->setRowCount(0);
  for (const auto& r : placement_.replicas) {
    const app::DeployInstanceSpec* spec = parsed_ ? parsed_->Find(r.instance) : nullptr;
    QStringList memory;
    for (size_t k = 0; k < r.nodes.size(); ++k) {
      const int64_t m = k < r.memory_bytes.size() ? r.memory_bytes[k] : 0;
      const int64_t total = k < r.node_memory.size() ? r.node_memory[k] : 0;
      memory << tr("%1 %2 of %3")
                    .arg(Q(r.nodes[k]),
                         m > 0 ? FormatBytesIec(static_cast<double>(m)) : QStringLiteral("?"),
                         total > 0 ? FormatBytesIec(static_cast<double>(total))
                                   : QStringLiteral("?"));
    }
    const int row = placement_table_->rowCount();
    placement_table_->insertRow(row);
    placement_table_->setItem(row, 0, Cell(Q(r.replica)));
    placement_table_->setItem(row, 1,
                              Cell(spec ? QFileInfo(Q(spec->model)).fileName() : QString()));
    placement_table_->setItem(row, 2, Cell(spec ? QString::number(spec->tp) : QString()));
    placement_table_->setItem(row, 3, Cell(NodesText(r.nodes)));
    placement_table_->setItem(row, 4, Cell(memory.join(QStringLiteral(" · "))));
  }
  if (!placement_.router_node.empty()) {
    const int row = placement_table_->rowCount();
    placement_table_->insertRow(row);
    placement_table_->setItem(row, 0, Cell(tr("router")));
    placement_table_->setItem(row, 3, Cell(Q(placement_.router_node)));
  }
  placement_table_->setToolTip(Q(placement_.memory_note));
  placement_table_->resizeColumnsToContents();
}

void DeploymentPanel::refreshForm() {
  updating_ = true;
  if (name_->text() != Q(model_.name)) name_->setText(Q(model_.name));
  instances_->setRowCount(static_cast<int>(model_.instances.size()));
  for (int r = 0; r < instances_->rowCount(); ++r) refreshInstanceRow(r);
  router_box_->setChecked(model_.router.present);
  if (policy_->text() != Q(model_.router.policy)) policy_->setText(Q(model_.router.policy));
  int node_index = router_node_->findData(Q(model_.router.node));
  if (node_index < 0) {
    router_node_->addItem(Q(model_.router.node), Q(model_.router.node));
    node_index = router_node_->count() - 1;
  }
  router_node_->setCurrentIndex(node_index);
  router_port_->setValue(model_.router.port);
  updating_ = false;
  if (current_ >= static_cast<int>(model_.instances.size())) current_ = -1;
  if (current_ < 0 && !model_.instances.empty()) current_ = 0;
  if (current_ >= 0 && instances_->currentRow() != current_) {
    instances_->setCurrentCell(current_, 0);  // showInstance through the signal
  } else {
    showInstance(current_);
  }
}

void DeploymentPanel::refreshInstanceRow(int row) {
  if (row < 0 || row >= static_cast<int>(model_.instances.size())) return;
  const auto& i = model_.instances[static_cast<size_t>(row)];
  instances_->setItem(row, 0, Cell(Q(i.name)));
  instances_->setItem(row, 1, Cell(Q(i.model)));
  instances_->setItem(row, 2, Cell(QString::number(i.tp)));
  instances_->setItem(row, 3, Cell(QString::number(i.replicas)));
  instances_->setItem(row, 4, Cell(i.nodes.empty() ? tr("placed") : NodesText(i.nodes)));
}

void DeploymentPanel::showInstance(int row) {
  current_ = row < static_cast<int>(model_.instances.size()) ? row : -1;
  const bool any = current_ >= 0;
  for (QWidget* w : std::initializer_list<QWidget*>{inst_name_, inst_model_, inst_tp_,
                                                    inst_replicas_, nodes_, remove_})
    w->setEnabled(any);
  updating_ = true;
  if (any) {
    const auto& i = model_.instances[static_cast<size_t>(current_)];
    if (inst_name_->text() != Q(i.name)) inst_name_->setText(Q(i.name));
    if (inst_model_->text() != Q(i.model)) inst_model_->setText(Q(i.model));
    inst_tp_->setValue(i.tp);
    inst_replicas_->setValue(i.replicas);
  } else {
    inst_name_->clear();
    inst_model_->clear();
  }
  updating_ = false;
  refreshNodeList();
}

void DeploymentPanel::refreshNodeList() {
  const std::vector<std::string>* chosen =
      current_ >= 0 ? &model_.instances[static_cast<size_t>(current_)].nodes : nullptr;
  // Which instance holds each node (to show it beside the name).
  std::map<std::string, std::string> holder;
  for (const auto& i : model_.instances) {
    for (const auto& n : i.nodes) holder[n] = i.name;
  }
  // Items are updated in place (a click's own item must outlive its signal).
  if (nodes_->count() != static_cast<int>(node_names_.size())) {
    nodes_->clear();
    for (const QString& name : node_names_) {
      auto* item = new QListWidgetItem(name, nodes_);
      item->setData(Qt::UserRole, name);
      // Clicking the row toggles it (not only the box): the mark is ours to set.
      item->setFlags(Qt::ItemIsEnabled | Qt::ItemIsSelectable);
    }
  }
  for (int row = 0; row < static_cast<int>(node_names_.size()); ++row) {
    const QString& name = node_names_[row];
    const std::string n = name.toStdString();
    const bool on = chosen && std::find(chosen->begin(), chosen->end(), n) != chosen->end();
    QString text = name;
    if (on && chosen) {
      const auto pos = std::find(chosen->begin(), chosen->end(), n) - chosen->begin();
      const int tp = std::max(1, model_.instances[static_cast<size_t>(current_)].tp);
      text += tr("  (replica %1, rank %2)").arg(pos / tp).arg(pos % tp);
    } else if (holder.count(n)) {
      text += tr("  (%1)").arg(Q(holder[n]));
    }
    QListWidgetItem* item = nodes_->item(row);
    item->setData(Qt::UserRole, name);
    if (item->text() != text) item->setText(text);
    item->setCheckState(on ? Qt::Checked : Qt::Unchecked);
  }
}

void DeploymentPanel::toggleNode(const QString& node) {
  if (current_ < 0 || current_ >= static_cast<int>(model_.instances.size()) || node.isEmpty())
    return;
  auto& nodes = model_.instances[static_cast<size_t>(current_)].nodes;
  const std::string n = node.toStdString();
  auto it = std::find(nodes.begin(), nodes.end(), n);
  if (it != nodes.end()) {
    nodes.erase(it);
  } else {
    nodes.push_back(n);  // rank order is click order
  }
  refreshInstanceRow(current_);
  formChanged();
  refreshNodeList();
}

void DeploymentPanel::addInstance() {
  app::DeployInstanceSpec i;
  // A name no instance has yet.
  for (int k = static_cast<int>(model_.instances.size()) + 1;; ++k) {
    i.name = "instance" + std::to_string(k);
    if (!model_.Find(i.name)) break;
  }
  model_.instances.push_back(i);
  current_ = static_cast<int>(model_.instances.size()) - 1;
  refreshForm();
  formChanged();
  inst_name_->setFocus();
  inst_name_->selectAll();
}

void DeploymentPanel::removeInstance() {
  if (current_ < 0 || current_ >= static_cast<int>(model_.instances.size())) return;
  model_.instances.erase(model_.instances.begin() + current_);
  current_ = std::min(current_, static_cast<int>(model_.instances.size()) - 1);
  refreshForm();
  formChanged();
}

// ---- files ------------------------------------------------------------------------

QString DeploymentPanel::chooseFile(bool save, const QString& caption, const QString& start) {
  QFileDialog dialog(this, caption, start, tr("YAML files (*.yaml *.yml);;All files (*)"));
  dialog.setObjectName(QStringLiteral("deploymentFileDialog"));
  dialog.setAcceptMode(save ? QFileDialog::AcceptSave : QFileDialog::AcceptOpen);
  dialog.setFileMode(save ? QFileDialog::AnyFile : QFileDialog::ExistingFile);
  if (save) dialog.setDefaultSuffix(QStringLiteral("yaml"));
  if (dialog.exec() != QDialog::Accepted || dialog.selectedFiles().isEmpty()) return {};
  return dialog.selectedFiles().first();
}

void DeploymentPanel::openDeployment() {
  const QString f = chooseFile(false, tr("Open deployment"), file_);
  if (f.isEmpty()) return;
  QString error;
  if (!openFile(f, &error)) setState(error, true);
}

void DeploymentPanel::saveDeploymentAs() {
  const QString start = file_.isEmpty() ? Q(model_.name) + QStringLiteral(".yaml") : file_;
  const QString f = chooseFile(true, tr("Save as deployment"), start);
  if (f.isEmpty()) return;
  QString error;
  if (!saveFile(f, &error)) setState(error, true);
}

bool DeploymentPanel::openFile(const QString& path, QString* error) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) {
    if (error) *error = tr("Cannot read %1: %2").arg(path, f.errorString());
    return false;
  }
  file_ = QFileInfo(path).absoluteFilePath();
  // The text as written (with its comments): its errors' lines are the file's.
  updating_ = true;
  text_->setPlainText(QString::fromUtf8(f.readAll()));
  updating_ = false;
  text_timer_->stop();
  current_ = 0;
  textEdited();
  setState(tr("Opened %1").arg(file_), false);
  return true;
}

bool DeploymentPanel::saveFile(const QString& path, QString* error) {
  const QString absolute = QFileInfo(path).absoluteFilePath();
  // Written from the model (not the text) so that it parses back the same;
  // when the text has errors it is saved as it is (a draft to fix later).
  QString text = text_->toPlainText();
  if (parsed_) text = Q(app::DeploymentToYaml(*parsed_, absolute.toStdString()));
  QSaveFile out(absolute);
  if (!out.open(QIODevice::WriteOnly) || out.write(text.toUtf8()) < 0 || !out.commit()) {
    if (error) *error = tr("Cannot write %1: %2").arg(absolute, out.errorString());
    return false;
  }
  file_ = absolute;
  setText(text);
  check();
  setState(parsed_ ? tr("Saved %1").arg(file_) : tr("Saved %1 (it has errors)").arg(file_),
           !parsed_);
  return true;
}

void DeploymentPanel::writePolicyForInstances() {
  const QString start = file_.isEmpty() ? Q(model_.name) + QStringLiteral("-policy.yaml")
                                        : QFileInfo(file_).absolutePath() + "/" +
                                              QFileInfo(file_).completeBaseName() +
                                              QStringLiteral("-policy.yaml");
  const QString f = chooseFile(true, tr("New routing policy"), start);
  if (f.isEmpty()) return;
  QSaveFile out(f);
  const std::string text = app::PolicyForInstances(model_);
  if (!out.open(QIODevice::WriteOnly) ||
      out.write(text.data(), static_cast<qint64>(text.size())) < 0 || !out.commit()) {
    setState(tr("Cannot write %1: %2").arg(f, out.errorString()), true);
    return;
  }
  model_.router.present = true;
  model_.router.policy = QFileInfo(f).absoluteFilePath().toStdString();
  refreshForm();
  formChanged();
}

}  // namespace octet::ui
