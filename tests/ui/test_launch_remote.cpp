// The Launch panel on a cluster of real agents (a saved profile, not the
// embedded local cluster): the inference instance is started through the
// nodes' agents as TP 2 across both nodes, its log and readiness come back
// through them, the nodes list its job, and Stop ends it on every node. A
// model folder outside the agents' model roots is refused, with the agent's
// words in the panel. The agents are real octet-agent processes on loopback.
#include <QComboBox>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QTableWidget>
#include <QtTest>

#include "octet/app/cluster_import.h"
#include "octet/app/local_cluster.h"
#include "octet/ui/instance_manager.h"
#include "octet/ui/launch_panel.h"
#include "octet/ui/main_window.h"
#include "workbench_test_util.h"

using namespace octet;
using octet::ui::MainWindow;

namespace {

// Whether node `node` of the snapshot lists job `id` in `state`.
bool NodeHasJob(const app::ClusterSnapshot& s, size_t node, const QString& id,
                const std::string& state) {
  if (node >= s.nodes.size()) return false;
  for (const auto& j : s.nodes[node].jobs) {
    if (QString::fromStdString(j.spec.job_id) == id && j.state == state) return true;
  }
  return false;
}

}  // namespace

class TestLaunchRemote : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir dir_;
  QString model_;
  std::unique_ptr<app::LocalCluster> agents_;

  ui::WorkbenchOptions Remote() {
    ui::WorkbenchOptions o = test::OfflineWorkbench(dir_);
    o.auto_connect = true;
    o.cluster.session.telemetry_interval_ms = 200;
    o.cluster.session.refresh_interval_ms = 300;
    ui::ConnectionSpec spec;
    spec.kind = ui::ConnectionSpec::Kind::kProfile;
    spec.profile = QStringLiteral("lab");
    o.connection = spec;
    return o;
  }

  // Opens the Launch panel and chooses `folder`; returns the panel.
  ui::LaunchPanel* ChooseModel(MainWindow& w, const QString& folder) {
    w.showPanel(MainWindow::Panel::kLaunch);
    auto* launch = qobject_cast<ui::LaunchPanel*>(w.panel(MainWindow::Panel::kLaunch));
    if (!launch) return nullptr;
    QSignalSpy shown(launch, &ui::LaunchPanel::modelSummaryShown);
    auto* box = launch->findChild<QComboBox*>(QStringLiteral("modelFolder"));
    box->lineEdit()->clear();
    QTest::keyClicks(box->lineEdit(), folder);
    QTest::keyClick(box->lineEdit(), Qt::Key_Return);
    if (!shown.wait(10'000) || !shown.first().first().toBool()) return nullptr;
    return launch;
  }

 private slots:
  void initTestCase() {
    OCTET_REQUIRE_FIXTURES();
    QVERIFY(dir_.isValid());
    test::IsolateWorkbench(dir_);
    model_ = dir_.path() + "/models/qwen3-chat";
    const Status written = test::WriteChatModel(model_.toStdString());
    QVERIFY2(written.ok(), written.ToString().c_str());
    // Two agents that serve models from <dir>/models only.
    app::LocalClusterOptions o;
    o.nodes = 2;
    o.cabling = "switch";
    o.agent_binary = test::BinDir() + "/octet-agent";
    o.octet_binary = test::BinDir() + "/octet";
    o.state_dir = dir_.path().toStdString() + "/agents";
    o.model_roots = {dir_.path().toStdString() + "/models"};
    o.stop_grace_ms = 1000;
    auto started = app::LocalCluster::Start(o, Deadline::AfterMs(30'000));
    QVERIFY2(started.ok(), started.status().ToString().c_str());
    agents_ = std::move(*started);
    // The workbench knows them only as a saved profile of agents.
    app::ClusterImport in;
    in.name = "lab";
    in.config_dir = dir_.path().toStdString() + "/config";
    in.nodes = agents_->profile().nodes;
    in.token_file = agents_->profile().token_file();
    const auto imported = app::ImportCluster(in);
    QVERIFY2(imported.ok(), imported.status().ToString().c_str());
  }

  void cleanupTestCase() { agents_.reset(); }

  void launchesThroughTheAgentsAndStops() {
    MainWindow w(Remote());
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(test::WaitForSnapshot(w, [](const app::ClusterSnapshot& s) {
      return s.nodes.size() == 2 && s.nodes[0].state == app::NodeState::kUp &&
             s.nodes[1].state == app::NodeState::kUp;
    }));
    QVERIFY(!w.controller()->isLocal());
    ui::LaunchPanel* launch = ChooseModel(w, model_);
    QVERIFY(launch);
    auto* tp = launch->findChild<QComboBox*>(QStringLiteral("tpDegree"));
    QVERIFY(tp->model()->index(1, 0).flags() & Qt::ItemIsEnabled);
    tp->setCurrentIndex(1);  // TP 2: one rank per node
    auto* transport = launch->findChild<QComboBox*>(QStringLiteral("transport"));
    transport->setCurrentIndex(transport->findData(QStringLiteral("tcp")));

    QSignalSpy ready(w.instances(), &ui::InstanceManager::ready);
    QTest::mouseClick(launch->findChild<QPushButton*>(QStringLiteral("launchInference")),
                      Qt::LeftButton);
    auto* log = launch->findChild<QPlainTextEdit*>(QStringLiteral("launchLog"));
    auto* state = launch->findChild<QLabel*>(QStringLiteral("launchState"));
    QVERIFY2(ready.wait(60'000), qPrintable(state->text() + "\n" + log->toPlainText()));
    const int id = ready.first().at(0).toInt();
    const QString url = ready.first().at(1).toString();
    QVERIFY2(url.startsWith(QStringLiteral("http://127.0.0.1:")), qPrintable(url));
    const ui::InstanceInfo* info = w.instances()->find(id);
    QVERIFY(info);
    QCOMPARE(info->nodes.size(), 2);
    QVERIFY(info->name.contains(info->nodes.join(QStringLiteral(", "))));
    auto* table = launch->findChild<QTableWidget*>(QStringLiteral("instanceTable"));
    QCOMPARE(table->item(0, 1)->text(), QStringLiteral("ready"));
    QVERIFY(state->text().contains(url));
    // Rank 0's output, through its agent, in the panel's log.
    QVERIFY(QTest::qWaitFor([&] { return log->toPlainText().contains(QStringLiteral("serving")); },
                            10'000));
    // Each node runs its rank, as the cluster view reports it.
    QString job_id;
    QVERIFY(test::WaitForSnapshot(w, [&](const app::ClusterSnapshot& s) {
      for (const auto& j : s.nodes[0].jobs) {
        if (j.state == "running") job_id = QString::fromStdString(j.spec.job_id);
      }
      return !job_id.isEmpty() && NodeHasJob(s, 1, job_id, "running");
    }));
    QVERIFY(job_id.startsWith(QStringLiteral("wb-")));

    // Stop: through the agents, on both nodes.
    table->selectRow(0);
    QSignalSpy exited(w.instances(), &ui::InstanceManager::exited);
    QTest::mouseClick(launch->findChild<QPushButton*>(QStringLiteral("stopInstance")),
                      Qt::LeftButton);
    QVERIFY(exited.wait(30'000));
    QCOMPARE(exited.first().at(1).toBool(), false);  // not a failure
    QCOMPARE(table->item(0, 1)->text(), QStringLiteral("stopped"));
    QVERIFY(test::WaitForSnapshot(w, [&](const app::ClusterSnapshot& s) {
      return !NodeHasJob(s, 0, job_id, "running") && !NodeHasJob(s, 1, job_id, "running");
    }));
  }

  void theAgentsRefusalIsShown() {
    MainWindow w(Remote());
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(test::WaitForSnapshot(w, [](const app::ClusterSnapshot& s) {
      return s.nodes.size() == 2 && s.nodes[0].state == app::NodeState::kUp;
    }));
    // A model this machine has, outside the agents' model roots.
    const QString outside = QString::fromStdString(test::FixturesDir()) + "/qwen3-tiny";
    ui::LaunchPanel* launch = ChooseModel(w, outside);
    QVERIFY(launch);
    QSignalSpy exited(w.instances(), &ui::InstanceManager::exited);
    QTest::mouseClick(launch->findChild<QPushButton*>(QStringLiteral("launchInference")),
                      Qt::LeftButton);
    QVERIFY(exited.wait(30'000));
    QCOMPARE(exited.first().at(1).toBool(), true);
    auto* state = launch->findChild<QLabel*>(QStringLiteral("launchState"));
    QVERIFY2(state->text().contains(QStringLiteral("outside this agent&#x27;s model roots")) ||
                 state->text().contains(QStringLiteral("outside this agent's model roots")),
             qPrintable(state->text()));
    QVERIFY2(state->text().contains(QStringLiteral("rank 0 on node")), qPrintable(state->text()));
    auto* table = launch->findChild<QTableWidget*>(QStringLiteral("instanceTable"));
    QCOMPARE(table->item(0, 1)->text(), QStringLiteral("failed"));
  }
};

QTEST_MAIN(TestLaunchRemote)
#include "test_launch_remote.moc"
