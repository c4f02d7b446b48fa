#include "octet/ui/cluster_panel.h"

#include <QGuiApplication>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QListWidget>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QSplitter>
#include <QTabWidget>
#include <QTableView>
#include <QTextBrowser>
#include <QVBoxLayout>

#include "octet/ui/memory_bars.h"
#include "octet/ui/theme.h"
#include "octet/ui/widgets.h"

namespace octet::ui {

// ---- LinksModel ---------------------------------------------------------------

void LinksModel::set(const app::CablingReport& cabling, const ProbeResults& probes) {
  // Every snapshot (10 Hz) brings the cabling again; the table is reset (and
  // repainted) only when a cell would show something else.
  std::string key;
  for (const auto& e : cabling.edges) {
    const bool shared = e.segment >= 0 &&
                        static_cast<size_t>(e.segment) < cabling.segments.size() &&
                        cabling.segments[e.segment].shared;
    key += EdgeKey(e) + (e.bidirectional ? "+" : "-") + (shared ? "S" : "D") + ";";
  }
  key += "#";
  for (const auto& [edge, r] : probes) {
    key += edge + (r.ok ? "ok" : r.error) + std::to_string(r.result.rtt_us_p50) + "/" +
           std::to_string(r.result.rtt_us_p99) + "/" + std::to_string(r.result.throughput_gbps) +
           ";";
  }
  if (key == shown_key_) return;
  beginResetModel();
  cabling_ = cabling;
  probes_ = probes;
  shown_key_ = std::move(key);
  endResetModel();
}

int LinksModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(cabling_.edges.size());
}
int LinksModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumns;
}

QVariant LinksModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case kFrom:
      return tr("From");
    case kTo:
      return tr("To");
    case kInterfaces:
      return tr("Interfaces");
    case kSegment:
      return tr("Medium");
    case kHeard:
      return tr("Heard");
    case kLatency:
      return tr("RTT p50 / p99");
    case kThroughput:
      return tr("Throughput");
  }
  return {};
}

QVariant LinksModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount()) return {};
  const app::CablingEdge& e = cabling_.edges[static_cast<size_t>(index.row())];
  const auto probe = probes_.find(EdgeKey(e));
  const bool shared = e.segment >= 0 && static_cast<size_t>(e.segment) < cabling_.segments.size() &&
                      cabling_.segments[e.segment].shared;
  if (role == Qt::DisplayRole) {
    switch (index.column()) {
      case kFrom:
        return QString::fromStdString(e.a_node);
      case kTo:
        return QString::fromStdString(e.b_node);
      case kInterfaces:
        return QStringLiteral("%1 ↔ %2").arg(QString::fromStdString(e.a_interface),
                                             QString::fromStdString(e.b_interface));
      case kSegment:
        return shared ? tr("switch") : tr("direct cable");
      case kHeard:
        return e.bidirectional ? tr("both ways") : tr("one way");
      case kLatency:
        if (probe == probes_.end()) return tr("not probed");
        if (!probe->second.ok) return QString::fromStdString(probe->second.error);
        return QStringLiteral("%1 / %2").arg(FormatMicros(probe->second.result.rtt_us_p50),
                                             FormatMicros(probe->second.result.rtt_us_p99));
      case kThroughput:
        if (probe == probes_.end() || !probe->second.ok) return QString();
        return QStringLiteral("%1 Gb/s").arg(probe->second.result.throughput_gbps, 0, 'f', 2);
    }
  }
  if (role == Qt::ForegroundRole) {
    const StatusColors sc = StatusColorsFor(QGuiApplication::palette());
    if (index.column() == kHeard && !e.bidirectional) return sc.warning;
    if ((index.column() == kLatency || index.column() == kThroughput) && probe != probes_.end() &&
        !probe->second.ok) {
      return sc.bad;
    }
  }
  if (role == Qt::TextAlignmentRole &&
      (index.column() == kLatency || index.column() == kThroughput)) {
    return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
  }
  return {};
}

// ---- node details ---------------------------------------------------------------

namespace {

QString Esc(const std::string& s) { return QString::fromStdString(s).toHtmlEscaped(); }

QString Row(const QString& key, const QString& value) {
  return QStringLiteral("<tr><td class='k'>%1</td><td>%2</td></tr>").arg(key, value);
}

}  // namespace

// ---- CpuReadout ---------------------------------------------------------------

double CpuReadout::Shown(const std::string& node, const app::TelemetrySample& sample) {
  auto [it, first] = nodes_.try_emplace(node);
  Node& n = it->second;
  if (first || sample.unix_ms < n.last_ms) {
    // A new node, or its agent's clock (or the agent) started over.
    n = Node{sample.unix_ms, sample.unix_ms, 0, 0, sample.cpu_busy};
    return n.shown;
  }
  if (sample.unix_ms == n.last_ms) return n.shown;  // the same sample again
  n.last_ms = sample.unix_ms;
  n.sum += sample.cpu_busy;
  ++n.count;
  if (sample.unix_ms - n.window_ms >= kWindowMs) {
    n.shown = n.sum / n.count;
    n.window_ms = sample.unix_ms;
    n.sum = 0;
    n.count = 0;
  }
  return n.shown;
}

// ---- node details ---------------------------------------------------------------

QString NodeDetailsHtml(const app::NodeView& n, const QPalette& pal) {
  const StatusColors sc = StatusColorsFor(pal);
  const QString muted = sc.muted.name();
  QString state_color = muted;
  if (n.state == app::NodeState::kUp) state_color = sc.good.name();
  if (n.state == app::NodeState::kLost) state_color = sc.bad.name();
  QString h;
  h += QStringLiteral(
           "<style>td{padding:1px 8px 1px 0;vertical-align:top;} td.k{color:%1;white-space:nowrap;}"
           " h3{margin:10px 0 4px 0;} .m{color:%1;}</style>")
           .arg(muted);
  h += QStringLiteral("<h2 style='margin-bottom:0'>%1</h2>").arg(Esc(n.name));
  h += QStringLiteral(
           "<p style='margin-top:2px'><b style='color:%1'>● %2</b> <span class='m'>%3</span></p>")
           .arg(state_color, QString::fromStdString(std::string(app::NodeStateName(n.state))),
                Esc(n.address));
  if (n.state == app::NodeState::kLost && !n.last_error.empty()) {
    h += QStringLiteral("<p style='color:%1'>%2</p>").arg(sc.bad.name(), Esc(n.last_error));
  }
  if (n.has_facts) {
    const app::NodeFacts& f = n.facts;
    h += QStringLiteral("<table>");
    h += Row(QObject::tr("host"),
             Esc(f.hostname) + (f.simulated ? QObject::tr(" (simulated node)") : QString()));
    h += Row(QObject::tr("node id"), QStringLiteral("<code>%1</code>").arg(Esc(f.node_id)));
    h += Row(QObject::tr("OS"), Esc(f.os));
    h += Row(QObject::tr("CPU"), QStringLiteral("%1 · %2 cores · %3")
                                     .arg(Esc(f.cpu_model))
                                     .arg(f.cpu_cores)
                                     .arg(Esc(f.cpu_arch)));
    if (f.gpus.empty()) {
      h += Row(QObject::tr("GPU"),
               QStringLiteral("<span class='m'>%1</span>")
                   .arg(f.gpu_note.empty() ? QObject::tr("none") : Esc(f.gpu_note)));
    }
    for (const auto& g : f.gpus) {
      h +=
          Row(QObject::tr("GPU"), QStringLiteral("%1 · sm_%2%3 · %4%5")
                                      .arg(Esc(g.name))
                                      .arg(g.cc_major)
                                      .arg(g.cc_minor)
                                      .arg(FormatBytesIec(static_cast<double>(g.memory_bytes)))
                                      .arg(g.unified_memory ? QObject::tr(" unified") : QString()));
    }
    QString mem = FormatBytesIec(static_cast<double>(f.memory.total_bytes));
    if (f.memory.budget_bytes) mem += QObject::tr(" (simulated budget)");
    if (f.memory.unified) mem += QObject::tr(" · unified CPU/GPU");
    h += Row(QObject::tr("memory"), mem);
    h += Row(QObject::tr("agent"), Esc(f.agent_version));
    QString roots;
    for (const auto& r : f.model_roots) roots += (roots.isEmpty() ? "" : "<br>") + Esc(r);
    h += Row(QObject::tr("model roots"), roots.isEmpty() ? QObject::tr("none") : roots);
    h += QStringLiteral("</table>");
  }
  if (n.has_telemetry) {
    const app::TelemetrySample& t = n.telemetry;
    h += QObject::tr("<h3>Now</h3><table>");
    h += Row(QObject::tr("CPU busy (1 s)"), QStringLiteral("%1%").arg(t.cpu_busy * 100, 0, 'f', 0));
    h += Row(QObject::tr("memory used"),
             QStringLiteral("%1 of %2")
                 .arg(FormatBytesIec(static_cast<double>(t.mem_used_bytes)),
                      FormatBytesIec(static_cast<double>(t.mem_total_bytes))));
    for (const auto& w : t.workers) {
      QString fig = QStringLiteral("%1 · rank %2 · %3 · %4")
                        .arg(Esc(w.kind))
                        .arg(w.rank)
                        .arg(Esc(w.state))
                        .arg(FormatBytesIec(static_cast<double>(w.memory_bytes)));
      if (w.decode_tps > 0) fig += QStringLiteral(" · decode %1").arg(FormatTps(w.decode_tps));
      if (w.train_step > 0)
        fig += QObject::tr(" · step %1 · loss %2").arg(w.train_step).arg(w.train_loss, 0, 'f', 3);
      h += Row(Esc(w.job_id), fig);
    }
    h += QStringLiteral("</table>");
  }
  if (n.has_facts && !n.facts.interfaces.empty()) {
    h += QObject::tr("<h3>Interfaces</h3><table>");
    for (const auto& i : n.facts.interfaces) {
      QString addrs;
      for (const auto& a : i.addresses) addrs += (addrs.isEmpty() ? "" : ", ") + Esc(a);
      QString speed =
          i.speed_mbps ? QStringLiteral("%1 Gb/s").arg(i.speed_mbps / 1000.0) : QString();
      h += Row(Esc(i.name),
               QStringLiteral("%1%2 %3 · mtu %4<br><span class='m'>%5</span>")
                   .arg(i.up ? QString() : QObject::tr("<b>down</b> · "), Esc(i.kind), speed)
                   .arg(i.mtu)
                   .arg(addrs));
    }
    h += QStringLiteral("</table>");
  }
  if (n.has_facts) {
    h += QObject::tr("<h3>RDMA</h3>");
    if (n.facts.rdma_devices.empty()) {
      h += QStringLiteral("<p class='m'>%1</p>")
               .arg(n.facts.rdma_note.empty() ? QObject::tr("none") : Esc(n.facts.rdma_note));
    } else {
      h += QStringLiteral("<table>");
      for (const auto& d : n.facts.rdma_devices) {
        QString ports;
        for (const auto& p : d.ports) {
          QString line =
              QStringLiteral("port %1 %2 %3").arg(p.port).arg(Esc(p.state), Esc(p.link_layer));
          if (!p.netdev.empty() && p.netdev != d.netdev) line += " · " + Esc(p.netdev);
          if (p.netdev_mtu) line += QStringLiteral(" · MTU %1").arg(p.netdev_mtu);
          if (p.active_mtu) line += QStringLiteral(" (RoCE %1)").arg(p.active_mtu);
          if (!p.rate.empty()) line += " · " + Esc(p.rate);
          QString gids;
          for (const auto& g : p.gid_table) {
            if (g.type != "RoCE v2") continue;
            gids += (gids.isEmpty() ? "" : ", ") +
                    QStringLiteral("%1: %2").arg(g.index).arg(Esc(g.gid));
          }
          if (!gids.isEmpty())
            line += QObject::tr("<br><span class='m'>RoCE v2 GIDs %1</span>").arg(gids);
          ports += (ports.isEmpty() ? "" : "<br>") + line;
        }
        QString where = Esc(d.netdev);
        if (!d.pci_address.empty()) where += " · " + Esc(d.pci_address);
        h += Row(Esc(d.name), where + "<br>" + ports);
      }
      h += QStringLiteral("</table>");
    }
    const app::NcclNetworkFacts& nccl = n.facts.nccl;
    if (!nccl.ib_hca.empty()) {
      h += QStringLiteral("<table>");
      h += Row(QStringLiteral("NCCL_IB_HCA"),
               QStringLiteral("<code>%1</code>").arg(Esc(nccl.ib_hca)));
      h += Row(QStringLiteral("NCCL_IB_GID_INDEX"),
               QStringLiteral("<code>%1</code>").arg(Esc(nccl.ib_gid_index)));
      if (!nccl.socket_ifname.empty()) {
        h += Row(QStringLiteral("NCCL_SOCKET_IFNAME"),
                 QStringLiteral("<code>%1</code>").arg(Esc(nccl.socket_ifname)));
      }
      h += QStringLiteral("</table>");
      h += QStringLiteral("<p class='m'>%1</p>")
               .arg(nccl.applied ? QObject::tr("given to this node's NCCL jobs")
                                 : QObject::tr("not given to jobs on this node"));
    }
    for (const auto& w : n.facts.roce_warnings) {
      h += QStringLiteral("<p style='color:%1'>⚠ %2</p>").arg(sc.warning.name(), Esc(w.message));
    }
  }
  if (n.has_models) {
    // What the node's store holds (octet pull --cluster), one row a snapshot.
    h += QObject::tr("<h3>Models</h3>");
    if (n.models.models.empty()) {
      h += QStringLiteral("<p class='m'>%1</p>")
               .arg(n.models.models_dir.empty()
                        ? QObject::tr("no model store")
                        : QObject::tr("none in %1").arg(Esc(n.models.models_dir)));
    } else {
      h += QStringLiteral("<table>");
      for (const auto& m : n.models.models) {
        QString refs;
        for (const auto& r : m.refs) refs += (refs.isEmpty() ? "" : ", ") + Esc(r);
        QString line = QObject::tr("%1 · %2 files · <code>%3</code>%4")
                           .arg(FormatBytesIec(static_cast<double>(m.bytes)))
                           .arg(m.files)
                           .arg(Esc(m.commit.substr(0, 12)))
                           .arg(refs.isEmpty() ? QString() : QStringLiteral(" (%1)").arg(refs));
        if (m.incomplete_files + m.missing_files > 0) {
          line += QStringLiteral("<br><span style='color:%1'>%2</span>")
                      .arg(sc.warning.name(), QObject::tr("%1 incomplete, %2 missing file(s)")
                                                  .arg(m.incomplete_files)
                                                  .arg(m.missing_files));
        }
        h += Row(Esc(m.repo), line);
      }
      h += QStringLiteral("</table>");
    }
  }
  if (!n.jobs.empty()) {
    h += QObject::tr("<h3>Jobs</h3><table>");
    for (const auto& j : n.jobs) {
      QString line = QStringLiteral("%1 · rank %2/%3 · <b>%4</b>")
                         .arg(QString::fromStdString(std::string(app::JobKindName(j.spec.kind))))
                         .arg(j.spec.rank)
                         .arg(j.spec.world_size)
                         .arg(Esc(j.state));
      if (!j.exit_reason.empty() && j.state != "running") line += "<br>" + Esc(j.exit_reason);
      h += Row(Esc(j.spec.job_id), line);
    }
    h += QStringLiteral("</table>");
  }
  return h;
}

// ---- panel ------------------------------------------------------------------------

ClusterPanel::ClusterPanel(ClusterController* controller, QWidget* parent)
    : QWidget(parent), controller_(controller) {
  setObjectName(QStringLiteral("clusterPanel"));
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(18, 14, 18, 14);
  header_ = new PanelHeader(tr("Cluster"), controller->phaseText(), this);
  probe_button_ = new QPushButton(GlyphIcon(Glyph::kProbe), tr("Probe links"), this);
  probe_button_->setObjectName(QStringLiteral("probeLinksButton"));
  probe_button_->setToolTip(tr("Measure round-trip time and throughput of every link (Ctrl+P)"));
  probe_button_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_P));
  auto* refresh = new QPushButton(GlyphIcon(Glyph::kRefresh), tr("Refresh"), this);
  refresh->setObjectName(QStringLiteral("refreshButton"));
  refresh->setToolTip(tr("Ask every agent for facts, links and jobs now (F5)"));
  refresh->setShortcut(QKeySequence(Qt::Key_F5));
  header_->addAction(probe_button_);
  header_->addAction(refresh);
  outer->addWidget(header_);

  auto* split = new QSplitter(Qt::Horizontal, this);
  split->setChildrenCollapsible(false);
  auto* left = new QSplitter(Qt::Vertical, split);
  left->setChildrenCollapsible(false);
  auto* diagram_card = new Card(left);
  auto* dl = new QVBoxLayout(diagram_card);
  dl->setContentsMargins(6, 6, 6, 6);
  view_ = new CablingView(diagram_card);
  view_->setBackgroundBrush(Qt::NoBrush);
  view_->setStyleSheet(QStringLiteral("background: transparent"));
  dl->addWidget(view_);

  tabs_ = new QTabWidget(left);
  tabs_->setObjectName(QStringLiteral("clusterTabs"));
  tabs_->setDocumentMode(true);
  auto* mem_scroll = new QScrollArea(tabs_);
  mem_scroll->setFrameShape(QFrame::NoFrame);
  mem_scroll->setWidgetResizable(true);
  memory_ = new MemoryBars(mem_scroll);
  mem_scroll->setWidget(memory_);
  tabs_->addTab(mem_scroll, tr("Memory"));
  links_ = new LinksModel(this);
  links_table_ = new QTableView(tabs_);
  links_table_->setObjectName(QStringLiteral("linksTable"));
  links_table_->setModel(links_);
  links_table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  links_table_->verticalHeader()->hide();
  links_table_->horizontalHeader()->setStretchLastSection(true);
  links_table_->setShowGrid(false);
  links_table_->setAlternatingRowColors(true);
  tabs_->addTab(links_table_, tr("Links"));
  problems_ = new QListWidget(tabs_);
  problems_->setObjectName(QStringLiteral("problemsList"));
  problems_->setWordWrap(true);
  tabs_->addTab(problems_, tr("Problems"));
  left->addWidget(diagram_card);
  left->addWidget(tabs_);
  left->setStretchFactor(0, 3);
  left->setStretchFactor(1, 1);

  details_ = new QTextBrowser(split);
  details_->setObjectName(QStringLiteral("nodeDetails"));
  details_->setOpenLinks(false);
  details_->setMinimumWidth(280);
  details_->setPlaceholderText(tr("Select a node to see its details."));
  split->addWidget(left);
  split->addWidget(details_);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 1);
  split->setSizes({900, 340});
  outer->addWidget(split, 1);

  connect(controller_, &ClusterController::snapshotChanged, this, &ClusterPanel::onSnapshot);
  connect(controller_, &ClusterController::phaseChanged, this, &ClusterPanel::onPhase);
  connect(controller_, &ClusterController::linksProbed, this, &ClusterPanel::onProbed);
  connect(view_, &CablingView::nodeSelected, this, [this](const QString&) { showDetails(); });
  connect(probe_button_, &QPushButton::clicked, this, [this] {
    probe_button_->setEnabled(false);
    probe_button_->setText(tr("Probing…"));
    controller_->probeLinks();
  });
  connect(refresh, &QPushButton::clicked, controller_, &ClusterController::refreshNow);
  onSnapshot(controller_->snapshot());
}

void ClusterPanel::selectNode(const QString& name) {
  view_->selectNode(name);
  showDetails();
}

void ClusterPanel::onPhase(ClusterController::Phase phase, const QString& text) {
  const auto* s = controller_->snapshot().get();
  if (phase != ClusterController::Phase::kConnected || s->cabling.summary.empty()) {
    header_->setSubtitle(text);
  }
  if (phase != ClusterController::Phase::kConnected) {
    probes_.clear();
  }
}

void ClusterPanel::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  if (stale_) onSnapshot(controller_->snapshot());
}

void ClusterPanel::updateShown(const app::ClusterSnapshot& s) {
  shown_ = s;
  for (auto& n : shown_.nodes) {
    if (n.has_telemetry) {
      n.telemetry.cpu_busy = cpu_.Shown(n.name, n.telemetry);
    } else {
      cpu_.Forget(n.name);
    }
  }
}

void ClusterPanel::onSnapshot(const SnapshotPtr& snapshot) {
  updateShown(*snapshot);
  const app::ClusterSnapshot& s = shown_;
  // The diagram's items and the bars follow while hidden (nothing is painted
  // then; shown, they are current, so the first paint is the only one).
  view_->setSnapshot(s);
  memory_->setSnapshot(s);
  if (!isVisible()) {
    stale_ = true;
    return;
  }
  stale_ = false;
  // Probe results of edges that no longer exist are dropped with the model reset.
  links_->set(s.cabling, probes_);
  if (!s.cabling.summary.empty()) {
    QString sub = QString::fromStdString(s.cabling.summary);
    sub = QStringLiteral("%1 · %2").arg(controller_->phaseText(), sub);
    header_->setSubtitle(sub);
  } else {
    header_->setSubtitle(controller_->phaseText());
  }
  // Problems list: rebuild only when it changed.
  // Cabling problems first, then each node's RoCE warnings.
  QStringList problems;
  for (const auto& p : s.cabling.problems) problems << QString::fromStdString(p.message);
  for (const auto& n : s.nodes) {
    if (!n.has_facts) continue;
    for (const auto& w : n.facts.roce_warnings) {
      problems << QStringLiteral("%1: %2").arg(QString::fromStdString(n.name),
                                               QString::fromStdString(w.message));
    }
  }
  QStringList shown;
  for (int i = 0; i < problems_->count(); ++i) shown << problems_->item(i)->text();
  if (shown != problems) {
    problems_->clear();
    const StatusColors sc = StatusColorsFor(palette());
    for (int i = 0; i < problems.size(); ++i) {
      auto* item = new QListWidgetItem(problems[i], problems_);
      const bool bad = static_cast<size_t>(i) < s.cabling.problems.size() &&
                       (s.cabling.problems[i].kind == "unreachable" ||
                        s.cabling.problems[i].kind == "missing-ring-link");
      item->setForeground(bad ? sc.bad : sc.warning);
    }
    tabs_->setTabText(
        2, problems.isEmpty() ? tr("Problems") : tr("Problems (%1)").arg(problems.size()));
  }
  if (view_->selectedNode().isEmpty() && !s.nodes.empty()) {
    view_->selectNode(QString::fromStdString(s.nodes[0].name));
  }
  showDetails();
}

void ClusterPanel::onProbed(const ProbeOutcome& outcome) {
  probe_button_->setEnabled(true);
  probe_button_->setText(tr("Probe links"));
  probes_.clear();
  for (const auto& r : outcome.reports) probes_[EdgeKey(r.edge)] = r;
  view_->setProbeResults(probes_);
  links_->set(controller_->snapshot()->cabling, probes_);
  links_table_->resizeColumnsToContents();
  tabs_->setCurrentWidget(links_table_);
}

void ClusterPanel::showDetails() {
  const QString name = view_->selectedNode();
  for (const auto& n : shown_.nodes) {
    if (QString::fromStdString(n.name) != name) continue;
    const QString html = NodeDetailsHtml(n, palette());
    const std::string key = html.toStdString();
    if (key == details_key_) return;
    details_key_ = key;
    const int scroll = details_->verticalScrollBar()->value();
    details_->setHtml(html);
    details_->verticalScrollBar()->setValue(scroll);
    return;
  }
  if (!details_key_.empty()) {
    details_key_.clear();
    details_->clear();
  }
}

}  // namespace octet::ui
