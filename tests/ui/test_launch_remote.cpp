// The Launch panel on a cluster of real agents (a saved profile, not the
// embedded local cluster): the inference instance is started through the
// nodes' agents as TP 2 across both nodes, its log and readiness come back
// through them, the nodes list its job, and Stop ends it on every node. A
// model folder outside the agents' model roots is refused, with the agent's
// words in the panel. A router is launched through the agent of the node
// chosen beside it, with a policy whose one pool is that instance, and the
// Chat panel talks to the model through the router's URL. A training run is
// data-parallel across both nodes' agents, its progress and curves come back
// through them, and it finishes with the model in its folder; one whose data
// is text is refused with the reason. The agents are real octet-agent
// processes on loopback. And on the workbench's own local cluster, inference,
// a router and training go through its nodes' agents when they may read the
// folders (the policy file), and run beside them, saying why, when not.
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTableWidget>
#include <QtTest>
#include <algorithm>

#include "octet/app/cluster_import.h"
#include "octet/app/local_cluster.h"
#include "octet/app/routing_policy_client.h"
#include "octet/ui/chat_panel.h"
#include "octet/ui/dashboard_panel.h"
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

void TypeInto(QLineEdit* edit, const QString& text) {
  edit->selectAll();
  QTest::keyClick(edit, Qt::Key_Delete);
  QTest::keyClicks(edit, text);
}

void TypeInto(QSpinBox* spin, int value) {
  spin->selectAll();
  QTest::keyClicks(spin, QString::number(value));
  QTest::keyClick(spin, Qt::Key_Tab);
}

}  // namespace

class TestLaunchRemote : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir dir_;
  QString model_;
  QString data_;  // prepared training data (the same path on both nodes)
  std::unique_ptr<app::LocalCluster> agents_;

  // Fills the training form for a 2-rank run and presses "Launch training".
  static void LaunchTraining(ui::LaunchPanel* launch, const QString& data, const QString& out) {
    TypeInto(launch->findChild<QLineEdit*>(QStringLiteral("trainingData")), data);
    TypeInto(launch->findChild<QLineEdit*>(QStringLiteral("trainingOut")), out);
    TypeInto(launch->findChild<QComboBox*>(QStringLiteral("trainingConfig"))->lineEdit(),
             QStringLiteral("tiny"));
    TypeInto(launch->findChild<QSpinBox*>(QStringLiteral("trainingSteps")), 4);
    TypeInto(launch->findChild<QSpinBox*>(QStringLiteral("trainingRanks")), 2);
    TypeInto(launch->findChild<QSpinBox*>(QStringLiteral("trainingSeqLen")), 32);
    TypeInto(launch->findChild<QSpinBox*>(QStringLiteral("trainingBatch")), 2);
    QTest::mouseClick(launch->findChild<QPushButton*>(QStringLiteral("launchTraining")),
                      Qt::LeftButton);
  }

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
    // Training data: a small text corpus (four documents, one of them for
    // validation), prepared as a user would on the nodes.
    QVERIFY(QDir().mkpath(dir_.path() + "/text"));
    uint32_t x = 777;
    for (int d = 0; d < 4; ++d) {
      QFile text(dir_.path() + QStringLiteral("/text/doc%1.txt").arg(d));
      QVERIFY(text.open(QIODevice::WriteOnly));
      const char* words[] = {"the", "node", "cable", "rank", "step", "loss", "ring", "model"};
      for (int i = 0; i < 2000; ++i) {
        x = x * 1664525u + 1013904223u;
        text.write(words[(x >> 16) % 8]);
        text.write(i % 12 == 11 ? ".\n" : " ");
      }
    }
    data_ = dir_.path() + "/data";
    const auto prepared =
        test::RunProgram({"octet", "train", "prepare", "--out", data_.toStdString(), "--vocab-size",
                          "300", (dir_.path() + "/text").toStdString()},
                         120'000);
    QVERIFY2(prepared.exit_code == 0, prepared.output.c_str());
    // Two agents that serve models from <dir>/models only.
    app::LocalClusterOptions o;
    o.nodes = 2;
    o.cabling = "switch";
    o.agent_binary = test::BinDir() + "/octet-agent";
    o.octet_binary = test::BinDir() + "/octet";
    o.state_dir = dir_.path().toStdString() + "/agents";
    // The models, the router's policy and the training data lie inside the
    // roots (an agent refuses any of them outside).
    o.model_roots = {dir_.path().toStdString()};
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
    // The weights quantized to NVFP4 as each rank loads: the plan counts them so
    // (fewer bytes on every node) and the ranks are told to.
    auto* plan = launch->findChild<QLabel*>(QStringLiteral("memoryPlan"));
    QVERIFY(QTest::qWaitFor([&] { return plan->text().contains(QStringLiteral("in memory")); },
                            10'000));
    const QString stored_plan = plan->text();
    auto* quantize = launch->findChild<QComboBox*>(QStringLiteral("quantize"));
    quantize->setCurrentIndex(quantize->findData(QStringLiteral("nvfp4")));
    const QString stored = test::WeightsInPlan(stored_plan);
    QVERIFY2(!stored.isEmpty(), qPrintable(stored_plan));
    QVERIFY2(QTest::qWaitFor([&] { return test::WeightsInPlan(plan->text()) != stored; }, 10'000),
             qPrintable(stored_plan + "\n->\n" + plan->text()));

    // n-gram speculation with 3 drafts a step: every rank is told.
    auto* spec = launch->findChild<QComboBox*>(QStringLiteral("speculative"));
    spec->setCurrentIndex(spec->findData(QStringLiteral("ngram")));
    launch->findChild<QSpinBox*>(QStringLiteral("draftTokens"))->setValue(3);

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
    // Which kernel backend each rank computes with, as their agents report it.
    const QRegularExpression both(QStringLiteral("^backend [a-z0-9-]+ on each of 2 ranks$"));
    QVERIFY2(
        QTest::qWaitFor([&] { return both.match(table->item(0, 3)->text()).hasMatch(); }, 15'000),
        qPrintable(table->item(0, 3)->text()));
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
    {
      const auto snap = w.controller()->snapshot();
      for (const auto& j : snap->nodes[0].jobs) {
        if (QString::fromStdString(j.spec.job_id) != job_id) continue;
        // As the agent launched it: its check writes each flag as --name=value.
        const auto& a = j.spec.extra_args;
        const auto q = std::find(a.begin(), a.end(), "--quantize");
        const bool told = std::find(a.begin(), a.end(), "--quantize=nvfp4") != a.end() ||
                          (q != a.end() && q + 1 != a.end() && *(q + 1) == "nvfp4");
        QVERIFY2(told, "the ranks were not told to quantize");
        auto has = [&a](const std::string& flag, const std::string& value) {
          const auto f = std::find(a.begin(), a.end(), flag);
          return std::find(a.begin(), a.end(), flag + "=" + value) != a.end() ||
                 (f != a.end() && f + 1 != a.end() && *(f + 1) == value);
        };
        QVERIFY2(has("--speculative", "ngram") && has("--draft-tokens", "3"),
                 "the ranks were not told to speculate");
      }
    }
    QVERIFY(QTest::qWaitFor(
        [&] { return log->toPlainText().contains(QStringLiteral("--quantize nvfp4: ")); }, 10'000));

    // A router on the second node, through its agent, whose one pool is the
    // instance; the Chat panel talks to the model through the router's URL.
    const QString policy = dir_.path() + "/via-router.yaml";
    {
      QFile f(policy);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(QStringLiteral("version: 1\ngateway:\n  host: 127.0.0.1\n  port: 8080\n"
                             "  threads: 4\n  watch: false\npools:\n  - name: small\n"
                             "    replicas:\n      - %1\nroutes:\n  - name: all\n"
                             "    pool: small\n")
                  .arg(url)
                  .toUtf8());
    }
    auto* policy_file = launch->findChild<QLineEdit*>(QStringLiteral("policyFile"));
    TypeInto(policy_file, policy);
    auto* router_node = launch->findChild<QComboBox*>(QStringLiteral("routerNode"));
    QVERIFY(router_node->isVisible());
    QCOMPARE(router_node->count(), 2);
    router_node->setCurrentIndex(1);
    const QString router_node_name = router_node->currentText();
    ready.clear();
    QTest::mouseClick(launch->findChild<QPushButton*>(QStringLiteral("launchRouter")),
                      Qt::LeftButton);
    QVERIFY2(ready.wait(30'000), qPrintable(state->text() + "\n" + log->toPlainText()));
    const int router_id = ready.first().at(0).toInt();
    const QString router_url = ready.first().at(1).toString();
    QVERIFY2(router_url.startsWith(QStringLiteral("http://127.0.0.1:")) && router_url != url &&
                 !router_url.endsWith(QStringLiteral(":8080")),
             qPrintable(router_url));
    const ui::InstanceInfo* router = w.instances()->find(router_id);
    QVERIFY(router && router->kind == app::InstanceSpec::Kind::kRouter);
    QCOMPARE(router->nodes, QStringList{router_node_name});
    QCOMPARE(table->rowCount(), 2);
    QCOMPARE(table->item(1, 1)->text(), QStringLiteral("ready"));
    QString router_job;
    QVERIFY(test::WaitForSnapshot(w, [&](const app::ClusterSnapshot& s) {
      for (const auto& j : s.nodes[1].jobs) {
        if (j.state == "running" && j.spec.kind == app::JobKind::kRouter)
          router_job = QString::fromStdString(j.spec.job_id);
      }
      return !router_job.isEmpty();
    }));
    w.showPanel(MainWindow::Panel::kChat);
    auto* chat = qobject_cast<ui::ChatPanel*>(w.panel(MainWindow::Panel::kChat));
    QVERIFY(chat);
    chat->setConversationDir(dir_.path() + "/conversations");
    // The router is offered as an endpoint beside the instance; pick it.
    auto* endpoints = chat->findChild<QComboBox*>(QStringLiteral("chatEndpoint"));
    const int router_row = endpoints->findData(router_url);
    QVERIFY2(router_row >= 0, qPrintable(router_url));
    QVERIFY(endpoints->findData(url) >= 0);
    endpoints->setCurrentIndex(router_row);
    QCOMPARE(chat->endpoint(), router_url);
    chat->findChild<QSpinBox*>(QStringLiteral("chatMaxTokens"))->setValue(16);
    QSignalSpy answered(chat, &ui::ChatPanel::replyFinished);
    chat->sendMessage(QStringLiteral("Through the remote router?"));
    QVERIFY(answered.wait(60'000));
    QVERIFY2(answered.first().first().toBool(), qPrintable(chat->messages().last().error));
    QVERIFY2(chat->messages().last().stats.contains(QStringLiteral("pool small")),
             qPrintable(chat->messages().last().stats));
    QVERIFY(!chat->messages().last().content.isEmpty());
    // Stop the router: through its agent.
    w.showPanel(MainWindow::Panel::kLaunch);
    table->selectRow(1);
    {
      QSignalSpy router_exited(w.instances(), &ui::InstanceManager::exited);
      QTest::mouseClick(launch->findChild<QPushButton*>(QStringLiteral("stopInstance")),
                        Qt::LeftButton);
      QVERIFY(router_exited.wait(30'000));
      QCOMPARE(router_exited.first().at(0).toInt(), router_id);
      QCOMPARE(router_exited.first().at(1).toBool(), false);
    }
    QVERIFY(test::WaitForSnapshot(w, [&](const app::ClusterSnapshot& s) {
      return !NodeHasJob(s, 1, router_job, "running");
    }));

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

  void trainsDataParallelAcrossTheNodes() {
    MainWindow w(Remote());
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(test::WaitForSnapshot(w, [](const app::ClusterSnapshot& s) {
      return s.nodes.size() == 2 && s.nodes[0].state == app::NodeState::kUp &&
             s.nodes[1].state == app::NodeState::kUp;
    }));
    w.showPanel(MainWindow::Panel::kLaunch);
    auto* launch = qobject_cast<ui::LaunchPanel*>(w.panel(MainWindow::Panel::kLaunch));
    QVERIFY(launch);
    auto* transport = launch->findChild<QComboBox*>(QStringLiteral("transport"));
    transport->setCurrentIndex(transport->findData(QStringLiteral("tcp")));
    auto* state = launch->findChild<QLabel*>(QStringLiteral("trainingState"));
    QSignalSpy failed(launch, &ui::LaunchPanel::trainingFailed);

    // Text is refused: the agents run training ranks, not `octet train prepare`.
    LaunchTraining(launch, dir_.path() + "/text", dir_.path() + "/models/run-text");
    QCOMPARE(failed.count(), 1);
    QVERIFY2(state->text().contains(QStringLiteral("prepare it on each node")),
             qPrintable(state->text()));
    QCOMPARE(launch->lastTraining(), -1);

    // Prepared data: rank r on node r, through its agent.
    const QString out = dir_.path() + "/models/run";
    QVERIFY(QDir().mkpath(out));
    QSignalSpy finished(launch, &ui::LaunchPanel::trainingFinished);
    LaunchTraining(launch, data_, out);
    const int id = launch->lastTraining();
    QVERIFY2(id > 0, qPrintable(state->text()));
    const ui::InstanceInfo* info = w.instances()->find(id);
    QVERIFY(info);
    QVERIFY(info->kind == app::InstanceSpec::Kind::kTraining);
    QCOMPARE(info->nodes.size(), 2);
    // Both nodes run a rank of the one job.
    QString job_id;
    QVERIFY(test::WaitForSnapshot(w, [&](const app::ClusterSnapshot& s) {
      for (const auto& j : s.nodes[0].jobs) {
        if (j.spec.kind == app::JobKind::kTraining && j.spec.rank == 0 && j.spec.world_size == 2)
          job_id = QString::fromStdString(j.spec.job_id);
      }
      if (job_id.isEmpty()) return false;
      for (const auto& j : s.nodes[1].jobs) {
        if (QString::fromStdString(j.spec.job_id) == job_id && j.spec.rank == 1) return true;
      }
      return false;
    }));
    QVERIFY2(finished.wait(120'000) || finished.count() == 1,
             qPrintable(state->text() + "\n" + w.instances()->find(id)->log.join('\n')));
    info = w.instances()->find(id);
    QVERIFY2(info->state == ui::InstanceInfo::State::kFinished,
             qPrintable(info->detail + "\n" + info->log.join('\n')));
    QCOMPARE(finished.first().first().toString(), out);
    const QString log = info->log.join('\n');
    QVERIFY2(log.contains(QStringLiteral("2 rank(s)")), qPrintable(log));
    QVERIFY2(log.contains(QStringLiteral("step 4/4")), qPrintable(log));
    QVERIFY2(state->text().contains(QStringLiteral("Finished")), qPrintable(state->text()));
    QVERIFY(QFile::exists(out + "/config.json"));
    // The curves, from rank 0's progress lines through its agent.
    QCOMPARE(info->training.train_loss().size(), size_t{4});
    w.showPanel(MainWindow::Panel::kDashboard);
    auto* dash = qobject_cast<ui::DashboardPanel*>(w.panel(MainWindow::Panel::kDashboard));
    QVERIFY(dash);
    QCOMPARE(dash->shownTrainingRun(), id);
    QTRY_COMPARE(dash->trainingRunLossChart()->points(QStringLiteral("train")).size(), 4);
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

  // The workbench's own local cluster: a folder inside its nodes' model
  // folders is launched through their agents (so the node cards list the job);
  // one outside runs on this machine beside them, and the panel says why. The
  // same for a training run's data and output folders.
  void localClusterLaunchesThroughItsNodesWhenTheyHoldTheFolder() {
    const QString elsewhere = dir_.path() + "/elsewhere";
    QVERIFY(QDir().mkpath(elsewhere));
    for (const bool inside : {true, false}) {
      MainWindow w(test::LocalWorkbench(dir_, 2, QStringLiteral("switch"), "",
                                        {inside ? dir_.path() : elsewhere}));
      w.show();
      QVERIFY(QTest::qWaitForWindowExposed(&w));
      QVERIFY(test::WaitForSnapshot(w, [](const app::ClusterSnapshot& s) {
        return s.nodes.size() == 2 && s.nodes[0].state == app::NodeState::kUp &&
               s.nodes[0].has_facts && s.nodes[1].state == app::NodeState::kUp &&
               s.nodes[1].has_facts;
      }));
      QVERIFY(w.controller()->isLocal());
      ui::LaunchPanel* launch = ChooseModel(w, model_);
      QVERIFY(launch);
      launch->findChild<QComboBox*>(QStringLiteral("tpDegree"))->setCurrentIndex(0);  // TP 1
      QSignalSpy ready(w.instances(), &ui::InstanceManager::ready);
      QTest::mouseClick(launch->findChild<QPushButton*>(QStringLiteral("launchInference")),
                        Qt::LeftButton);
      auto* state = launch->findChild<QLabel*>(QStringLiteral("launchState"));
      auto* log = launch->findChild<QPlainTextEdit*>(QStringLiteral("launchLog"));
      QVERIFY2(ready.wait(60'000), qPrintable(state->text() + "\n" + log->toPlainText()));
      const int id = ready.first().at(0).toInt();
      const ui::InstanceInfo* info = w.instances()->find(id);
      QVERIFY(info);
      if (inside) {
        QCOMPARE(info->nodes.size(), 1);
        QString job_id;
        QVERIFY(test::WaitForSnapshot(w, [&](const app::ClusterSnapshot& s) {
          for (const auto& j : s.nodes[0].jobs) {
            if (j.state == "running") job_id = QString::fromStdString(j.spec.job_id);
          }
          return !job_id.isEmpty();
        }));
        QVERIFY(job_id.startsWith(QStringLiteral("wb-")));
        QVERIFY2(!state->text().contains(QStringLiteral("beside the local nodes")),
                 qPrintable(state->text()));
      } else {
        QVERIFY(info->nodes.isEmpty());
        QVERIFY2(state->text().contains(QStringLiteral("beside the local nodes")) &&
                     state->text().contains(QStringLiteral("outside node ")),
                 qPrintable(state->text()));
        const auto snap = w.controller()->snapshot();
        for (const auto& n : snap->nodes) QVERIFY(n.jobs.empty());
      }
      auto* table = launch->findChild<QTableWidget*>(QStringLiteral("instanceTable"));

      // A router in front of it, on the second node when the policy lies in
      // its model folders; else here, saying why.
      const QString policy = dir_.path() + "/local-router.yaml";  // inside the roots or not
      {
        QFile f(policy);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(QStringLiteral("version: 1\ngateway:\n  host: 127.0.0.1\n  port: 0\n"
                               "  watch: false\npools:\n  - name: one\n    replicas:\n"
                               "      - %1\nroutes:\n  - name: all\n    pool: one\n")
                    .arg(info->url)
                    .toUtf8());
      }
      TypeInto(launch->findChild<QLineEdit*>(QStringLiteral("policyFile")), policy);
      auto* router_node = launch->findChild<QComboBox*>(QStringLiteral("routerNode"));
      QVERIFY(router_node->isVisible());
      QCOMPARE(router_node->count(), 2);
      router_node->setCurrentIndex(1);
      ready.clear();
      QTest::mouseClick(launch->findChild<QPushButton*>(QStringLiteral("launchRouter")),
                        Qt::LeftButton);
      QVERIFY2(ready.wait(30'000), qPrintable(state->text() + "\n" + log->toPlainText()));
      const int router_id = ready.first().at(0).toInt();
      const ui::InstanceInfo* router = w.instances()->find(router_id);
      QVERIFY(router && router->kind == app::InstanceSpec::Kind::kRouter);
      if (inside) {
        QCOMPARE(router->nodes, QStringList{QStringLiteral("local-1")});
        QVERIFY(test::WaitForSnapshot(w, [&](const app::ClusterSnapshot& s) {
          for (const auto& j : s.nodes[1].jobs) {
            if (j.state == "running" && j.spec.kind == app::JobKind::kRouter) return true;
          }
          return false;
        }));
        QVERIFY2(!state->text().contains(QStringLiteral("beside the local nodes")),
                 qPrintable(state->text()));
      } else {
        QVERIFY(router->nodes.isEmpty());
        QVERIFY2(state->text().contains(QStringLiteral("beside the local nodes")) &&
                     state->text().contains(QStringLiteral("outside node local-1")),
                 qPrintable(state->text()));
      }
      // The router answers, running this policy (its pool is the instance).
      const auto runs =
          app::FetchRouterPolicy(router->url.toStdString(), Deadline::AfterMs(10'000));
      QVERIFY2(runs.ok(), runs.status().ToString().c_str());
      QVERIFY2(runs->find(info->url.toStdString()) != std::string::npos, runs->c_str());
      table->selectRow(1);
      QSignalSpy router_exited(w.instances(), &ui::InstanceManager::exited);
      QTest::mouseClick(launch->findChild<QPushButton*>(QStringLiteral("stopInstance")),
                        Qt::LeftButton);
      QVERIFY(router_exited.wait(30'000));
      table->selectRow(0);
      QSignalSpy exited(w.instances(), &ui::InstanceManager::exited);
      QTest::mouseClick(launch->findChild<QPushButton*>(QStringLiteral("stopInstance")),
                        Qt::LeftButton);
      QVERIFY(exited.wait(30'000));
      QCOMPARE(exited.first().at(1).toBool(), false);
      if (inside) {
        QVERIFY(test::WaitForSnapshot(w, [&](const app::ClusterSnapshot& s) {
          for (const auto& j : s.nodes[0].jobs) {
            if (j.state == "running") return false;
          }
          return true;
        }));
      }
      // The demo model that ships with the workbench is offered, and runs
      // through the local nodes whatever their model folders are.
      // (Offered as "bundled: nanochat-demo" until it is a recent folder.)
      auto* box = launch->findChild<QComboBox*>(QStringLiteral("modelFolder"));
      const QString demo_dir =
          QFileInfo(QString::fromStdString(test::SourceDir()) + "/resources/models/nanochat-demo")
              .canonicalFilePath();
      const int demo = box->findData(QStringLiteral("dir:") + demo_dir);
      QStringList offered;
      for (int i = 0; i < box->count(); ++i) offered << box->itemText(i);
      QVERIFY2(demo >= 0,
               qPrintable(demo_dir + " is not offered: " + offered.join(QStringLiteral(" | "))));
      if (inside) QCOMPARE(box->itemText(demo), QStringLiteral("bundled: nanochat-demo"));
      QSignalSpy shown(launch, &ui::LaunchPanel::modelSummaryShown);
      box->setCurrentIndex(demo);
      emit box->activated(demo);
      QVERIFY(shown.count() == 1 || shown.wait(10'000));
      QVERIFY(shown.first().first().toBool());
      ready.clear();
      QTest::mouseClick(launch->findChild<QPushButton*>(QStringLiteral("launchInference")),
                        Qt::LeftButton);
      QVERIFY2(ready.wait(60'000), qPrintable(state->text() + "\n" + log->toPlainText()));
      QCOMPARE(w.instances()->find(ready.first().at(0).toInt())->nodes.size(), 1);
      QVERIFY2(!state->text().contains(QStringLiteral("beside the local nodes")),
               qPrintable(state->text()));
      table->selectRow(table->rowCount() - 1);  // after the model's and the router's rows
      exited.clear();
      QTest::mouseClick(launch->findChild<QPushButton*>(QStringLiteral("stopInstance")),
                        Qt::LeftButton);
      QVERIFY(exited.wait(30'000));

      // Training on both nodes: prepared data, and an output folder not made
      // yet (made here when the run goes through the nodes).
      const QString out = dir_.path() + (inside ? "/models/local-run" : "/models/beside-run");
      QSignalSpy finished(launch, &ui::LaunchPanel::trainingFinished);
      LaunchTraining(launch, data_, out);
      const int run = launch->lastTraining();
      QVERIFY2(run > 0, qPrintable(state->text()));
      if (inside) {
        QCOMPARE(w.instances()->find(run)->nodes.size(), 2);
        QVERIFY(test::WaitForSnapshot(w, [&](const app::ClusterSnapshot& s) {
          for (const auto& j : s.nodes[1].jobs) {
            if (j.spec.kind == app::JobKind::kTraining && j.spec.rank == 1) return true;
          }
          return false;
        }));
      } else {
        QVERIFY(w.instances()->find(run)->nodes.isEmpty());
        QVERIFY2(state->text().contains(QStringLiteral("beside the local nodes")) &&
                     state->text().contains(QStringLiteral("outside node ")),
                 qPrintable(state->text()));
      }
      QVERIFY2(finished.wait(120'000) || finished.count() == 1,
               qPrintable(w.instances()->find(run)->log.join('\n')));
      QVERIFY(QFile::exists(out + "/config.json"));
    }
  }
};

QTEST_MAIN(TestLaunchRemote)
#include "test_launch_remote.moc"
