#include "octet/ui/connect_dialog.h"

#include <QButtonGroup>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QDir>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPushButton>
#include <QRadioButton>
#include <QSpinBox>
#include <QStackedWidget>
#include <QTableWidget>
#include <QVBoxLayout>

#include "octet/app/cluster_import.h"
#include "octet/app/cluster_profile.h"
#include "octet/ui/theme.h"

namespace octet::ui {

namespace {

QWidget* FileRow(QLineEdit* edit, const QString& caption, QWidget* parent) {
  auto* row = new QWidget(parent);
  auto* l = new QHBoxLayout(row);
  l->setContentsMargins(0, 0, 0, 0);
  l->addWidget(edit, 1);
  auto* browse = new QPushButton(QObject::tr("Browse…"), row);
  l->addWidget(browse);
  QObject::connect(browse, &QPushButton::clicked, row, [edit, caption, row] {
    const QString f = QFileDialog::getOpenFileName(row, caption, edit->text());
    if (!f.isEmpty()) edit->setText(f);
  });
  return row;
}

QLabel* ErrorLabel(QWidget* parent) {
  auto* l = new QLabel(parent);
  l->setObjectName(QStringLiteral("connectError"));
  l->setWordWrap(true);
  l->setTextInteractionFlags(Qt::TextSelectableByMouse);
  QPalette pal = l->palette();
  pal.setColor(QPalette::WindowText, StatusColorsFor(pal).bad);
  l->setPalette(pal);
  l->hide();
  return l;
}

}  // namespace

ConnectDialog::ConnectDialog(const ConnectionSpec& current, std::string config_dir, QWidget* parent)
    : QDialog(parent), config_dir_(std::move(config_dir)), current_(current), result_(current) {
  setObjectName(QStringLiteral("connectDialog"));
  setWindowTitle(tr("Connect cluster"));
  auto* layout = new QVBoxLayout(this);
  auto* choices = new QHBoxLayout;
  kind_ = new QButtonGroup(this);
  const QString labels[] = {tr("Local embedded cluster"), tr("Saved profile"), tr("Agents")};
  const char* names[] = {"localChoice", "profileChoice", "agentsChoice"};
  for (int i = 0; i < 3; ++i) {
    auto* b = new QRadioButton(labels[i], this);
    b->setObjectName(QLatin1String(names[i]));
    kind_->addButton(b, i);
    choices->addWidget(b);
  }
  choices->addStretch(1);
  layout->addLayout(choices);
  pages_ = new QStackedWidget(this);
  pages_->addWidget(buildLocalPage());
  pages_->addWidget(buildProfilePage());
  pages_->addWidget(buildAgentsPage());
  layout->addWidget(pages_, 1);
  error_ = ErrorLabel(this);
  layout->addWidget(error_);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
  buttons->button(QDialogButtonBox::Ok)->setText(tr("Connect"));
  buttons->button(QDialogButtonBox::Ok)->setObjectName(QStringLiteral("connectButton"));
  layout->addWidget(buttons);
  connect(buttons, &QDialogButtonBox::accepted, this, &ConnectDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, this, &ConnectDialog::reject);
  connect(kind_, &QButtonGroup::idClicked, this, [this](int id) {
    pages_->setCurrentIndex(id);
    error_->hide();
  });
  const int initial = current.kind == ConnectionSpec::Kind::kProfile ? 1 : 0;
  kind_->button(initial)->setChecked(true);
  pages_->setCurrentIndex(initial);
  resize(640, 460);
}

QWidget* ConnectDialog::buildLocalPage() {
  auto* page = new QWidget(this);
  auto* form = new QFormLayout(page);
  auto* intro = new QLabel(
      tr("Simulated nodes on this machine: one octet-agent per node on 127.0.0.1 with its own "
         "memory budget. Jobs really run, as processes here."),
      page);
  intro->setWordWrap(true);
  form->addRow(intro);
  nodes_ = new QSpinBox(page);
  nodes_->setObjectName(QStringLiteral("localNodes"));
  nodes_->setRange(1, 8);
  nodes_->setValue(current_.local_nodes);
  form->addRow(tr("Nodes"), nodes_);
  cabling_ = new QComboBox(page);
  cabling_->setObjectName(QStringLiteral("localCabling"));
  cabling_->addItem(tr("switch (every node on one switch)"), QStringLiteral("switch"));
  cabling_->addItem(tr("ring (each node cabled to two neighbours)"), QStringLiteral("ring"));
  cabling_->setCurrentIndex(current_.local_cabling == QLatin1String("ring") ? 1 : 0);
  form->addRow(tr("Cabling"), cabling_);
  memory_gib_ = new QSpinBox(page);
  memory_gib_->setObjectName(QStringLiteral("localMemory"));
  memory_gib_->setRange(1, 4096);
  memory_gib_->setSuffix(tr(" GiB per node"));
  memory_gib_->setValue(static_cast<int>(current_.local_memory_bytes >> 30));
  form->addRow(tr("Memory"), memory_gib_);
  model_roots_ = new QLineEdit(current_.local_model_roots.join(QLatin1Char(':')), page);
  model_roots_->setObjectName(QStringLiteral("localModelRoots"));
  model_roots_->setPlaceholderText(
      tr("folders jobs may load models from, ':'-separated (default: home)"));
  form->addRow(tr("Model folders"), model_roots_);
  return page;
}

QWidget* ConnectDialog::buildProfilePage() {
  auto* page = new QWidget(this);
  auto* l = new QVBoxLayout(page);
  profiles_ = new QListWidget(page);
  profiles_->setObjectName(QStringLiteral("profileList"));
  for (const auto& p : app::ListProfiles(config_dir_)) {
    if (p.local) continue;  // only valid while `octet cluster local` runs
    QString text = QStringLiteral("%1 — %2 node%3%4")
                       .arg(QString::fromStdString(p.name))
                       .arg(p.nodes)
                       .arg(p.nodes == 1 ? "" : "s")
                       .arg(p.tls ? tr(" · TLS") : QString());
    if (!p.error.empty()) text += QStringLiteral(" — ") + QString::fromStdString(p.error);
    auto* item = new QListWidgetItem(text, profiles_);
    item->setData(Qt::UserRole, QString::fromStdString(p.name));
    if (!p.error.empty()) item->setFlags(item->flags() & ~Qt::ItemIsEnabled);
    if (QString::fromStdString(p.name) == current_.profile) profiles_->setCurrentItem(item);
  }
  auto* hint = new QLabel(
      profiles_->count() == 0
          ? tr("No saved profiles yet. Create one with <code>octet cluster init</code>, or type "
               "the agents under <b>Agents</b>.")
          : tr("Profiles live in %1/clusters.")
                .arg(QString::fromStdString(config_dir_.empty() ? app::DefaultConfigDir()
                                                                : config_dir_)),
      page);
  hint->setWordWrap(true);
  l->addWidget(profiles_, 1);
  l->addWidget(hint);
  return page;
}

QWidget* ConnectDialog::buildAgentsPage() {
  auto* page = new QWidget(this);
  auto* form = new QFormLayout(page);
  name_ = new QLineEdit(page);
  name_->setObjectName(QStringLiteral("clusterName"));
  name_->setPlaceholderText(tr("a name for this cluster, e.g. desk"));
  form->addRow(tr("Cluster name"), name_);
  agents_ = new QTableWidget(1, 2, page);
  agents_->setObjectName(QStringLiteral("agentsTable"));
  agents_->setHorizontalHeaderLabels(
      {tr("Node name (optional)"), tr("Agent address (host[:port])")});
  agents_->horizontalHeader()->setStretchLastSection(true);
  agents_->horizontalHeader()->resizeSection(0, 180);
  agents_->verticalHeader()->hide();
  auto* rows = new QWidget(page);
  auto* rl = new QHBoxLayout(rows);
  rl->setContentsMargins(0, 0, 0, 0);
  auto* add = new QPushButton(tr("Add row"), rows);
  auto* remove = new QPushButton(tr("Remove row"), rows);
  rl->addWidget(add);
  rl->addWidget(remove);
  rl->addStretch(1);
  connect(add, &QPushButton::clicked, this, [this] { agents_->insertRow(agents_->rowCount()); });
  connect(remove, &QPushButton::clicked, this, [this] {
    if (agents_->rowCount() > 1)
      agents_->removeRow(agents_->currentRow() >= 0 ? agents_->currentRow()
                                                    : agents_->rowCount() - 1);
  });
  form->addRow(tr("Agents"), agents_);
  form->addRow(QString(), rows);
  token_file_ = new QLineEdit(page);
  token_file_->setObjectName(QStringLiteral("tokenFile"));
  token_file_->setPlaceholderText(tr("the cluster token (mode 0600), from octet cluster init"));
  form->addRow(tr("Token file"), FileRow(token_file_, tr("Cluster token"), page));
  ca_file_ = new QLineEdit(page);
  ca_file_->setObjectName(QStringLiteral("caFile"));
  ca_file_->setPlaceholderText(tr("optional: the cluster CA certificate (ca.pem) for TLS"));
  form->addRow(tr("TLS CA"), FileRow(ca_file_, tr("Cluster CA certificate"), page));
  expected_ = new QComboBox(page);
  expected_->addItem(tr("not stated"), QString());
  expected_->addItem(tr("direct pair"), QStringLiteral("pair"));
  expected_->addItem(tr("ring"), QStringLiteral("ring"));
  expected_->addItem(tr("switch"), QStringLiteral("switch"));
  form->addRow(tr("Cabled as"), expected_);
  return page;
}

void ConnectDialog::showError(const QString& text) {
  error_->setText(text);
  error_->show();
}

void ConnectDialog::accept() {
  ConnectionSpec spec = current_;
  switch (kind_->checkedId()) {
    case 0: {
      spec.kind = ConnectionSpec::Kind::kLocal;
      spec.local_nodes = nodes_->value();
      spec.local_cabling = cabling_->currentData().toString();
      spec.local_memory_bytes = static_cast<uint64_t>(memory_gib_->value()) << 30;
      spec.local_model_roots.clear();
      for (const QString& r : model_roots_->text().split(QLatin1Char(':'), Qt::SkipEmptyParts)) {
        const QString dir = QDir(r.trimmed()).absolutePath();
        if (!QDir(dir).exists()) {
          showError(tr("Model folder %1 does not exist.").arg(dir));
          return;
        }
        spec.local_model_roots << dir;
      }
      break;
    }
    case 1: {
      auto* item = profiles_->currentItem();
      if (!item) {
        showError(tr("Pick a profile."));
        return;
      }
      spec.kind = ConnectionSpec::Kind::kProfile;
      spec.profile = item->data(Qt::UserRole).toString();
      break;
    }
    case 2: {
      app::ClusterImport in;
      in.name = name_->text().trimmed().toStdString();
      in.config_dir = config_dir_;
      for (int r = 0; r < agents_->rowCount(); ++r) {
        auto* n = agents_->item(r, 0);
        auto* a = agents_->item(r, 1);
        const QString address = a ? a->text().trimmed() : QString();
        if (address.isEmpty()) continue;
        in.nodes.push_back(
            {n ? n->text().trimmed().toStdString() : std::string(), address.toStdString()});
      }
      in.token_file = token_file_->text().trimmed().toStdString();
      in.tls_ca_file = ca_file_->text().trimmed().toStdString();
      in.expected_cabling = expected_->currentData().toString().toStdString();
      in.replace = true;  // typing the same name again updates that cluster
      auto p = app::ImportCluster(in);
      if (!p.ok()) {
        showError(QString::fromStdString(p.status().message()));
        return;
      }
      spec.kind = ConnectionSpec::Kind::kProfile;
      spec.profile = QString::fromStdString(p->name);
      break;
    }
  }
  result_ = spec;
  QDialog::accept();
}

// ---- Add node -------------------------------------------------------------------

AddNodeDialog::AddNodeDialog(const ConnectionSpec& current, std::string config_dir, QWidget* parent)
    : QDialog(parent), config_dir_(std::move(config_dir)), current_(current), result_(current) {
  setObjectName(QStringLiteral("addNodeDialog"));
  setWindowTitle(tr("Add node"));
  auto* layout = new QVBoxLayout(this);
  auto* form = new QFormLayout;
  name_ = new QLineEdit(this);
  name_->setObjectName(QStringLiteral("nodeName"));
  address_ = new QLineEdit(this);
  address_->setObjectName(QStringLiteral("nodeAddress"));
  address_->setPlaceholderText(tr("host[:port] of the node's octet-agent"));
  if (current.kind == ConnectionSpec::Kind::kLocal) {
    auto* note = new QLabel(tr("The local cluster has %1 node(s); adding one restarts it with %2.")
                                .arg(current.local_nodes)
                                .arg(std::min(8, current.local_nodes + 1)),
                            this);
    note->setWordWrap(true);
    layout->addWidget(note);
    name_->setEnabled(false);
    address_->setEnabled(false);
  } else {
    layout->addWidget(new QLabel(tr("Add an agent to cluster '%1'.").arg(current.profile), this));
  }
  form->addRow(tr("Node name"), name_);
  form->addRow(tr("Address"), address_);
  layout->addLayout(form);
  error_ = ErrorLabel(this);
  layout->addWidget(error_);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
  buttons->button(QDialogButtonBox::Ok)->setText(tr("Add"));
  layout->addWidget(buttons);
  connect(buttons, &QDialogButtonBox::accepted, this, &AddNodeDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, this, &AddNodeDialog::reject);
}

void AddNodeDialog::accept() {
  ConnectionSpec spec = current_;
  if (spec.kind == ConnectionSpec::Kind::kLocal) {
    if (spec.local_nodes >= 8) {
      error_->setText(tr("The local cluster already has the most nodes (8)."));
      error_->show();
      return;
    }
    ++spec.local_nodes;
  } else {
    auto profile = app::LoadProfile(spec.profile.toStdString(), config_dir_);
    Status s = profile.ok() ? app::AddNode(&*profile, {name_->text().trimmed().toStdString(),
                                                       address_->text().trimmed().toStdString()})
                            : profile.status();
    if (!s.ok()) {
      error_->setText(QString::fromStdString(s.message()));
      error_->show();
      return;
    }
  }
  result_ = spec;
  QDialog::accept();
}

}  // namespace octet::ui
