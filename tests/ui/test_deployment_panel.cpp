// The Deployments panel on a local embedded cluster of 8 real octet-agent
// processes on a ring: the seed's layout (3 x TP 2 of qwen3-tiny, 2 x TP 1 of
// minicpm-tiny, a router in front whose pools are the instances) built by
// clicks and typing in the form — nodes chosen by clicking cards in the
// cabling view and rows of the checklist — with the checks shown as it is
// edited (a TP group's nodes half chosen, a 9-node deployment on 8 nodes);
// the placement table; "Save as deployment…" writes a file that the app's
// parser reads back to the same deployment, and "Open deployment…" brings it
// back after the form was changed. A typo in the YAML text shows the parser's
// error with its line and column. Apply starts the 5 replicas through the
// agents (each ready, on 8 distinct nodes, with the router), one replica is
// stopped from its row, and Down leaves no job running. Down pressed while an
// apply waits for a replica ends the apply and takes the deployment down. A
// fresh panel on the local cluster applies the bundled demo model as it is.
#include <QApplication>
#include <QCheckBox>
#include <QElapsedTimer>
#include <QFileDialog>
#include <QGroupBox>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStyle>
#include <QStyleOptionGroupBox>
#include <QTableWidget>
#include <QTextBlock>
#include <QTextCursor>
#include <QTimer>
#include <QtTest>
#include <csignal>
#include <set>

#include "octet/app/deployment.h"
#include "octet/app/deployment_edit.h"
#include "octet/ui/cabling_view.h"
#include "octet/ui/deployment_panel.h"
#include "workbench_test_util.h"

using namespace octet;
using octet::ui::DeploymentPanel;
using octet::ui::MainWindow;

namespace {

void TypeInto(QLineEdit* edit, const QString& text) {
  QVERIFY(edit);
  edit->setFocus();
  edit->selectAll();
  QTest::keyClick(edit, Qt::Key_Delete);
  QTest::keyClicks(edit, text);
}

void TypeInto(QSpinBox* spin, int value) {
  QVERIFY(spin);
  spin->setFocus();
  spin->selectAll();
  QTest::keyClicks(spin, QString::number(value));
  QTest::keyClick(spin, Qt::Key_Tab);
}

void Click(QWidget* w) {
  QVERIFY(w);
  QTest::mouseClick(w, Qt::LeftButton);
}

// Answers the next file dialog the panel opens with `path` (as a person
// typing it and pressing Save / Open).
void AnswerFileDialog(const QString& path) {
  auto* timer = new QTimer;
  timer->setInterval(50);
  auto tries = std::make_shared<int>(0);
  QObject::connect(timer, &QTimer::timeout, [timer, path, tries] {
    auto* dialog = qobject_cast<QFileDialog*>(QApplication::activeModalWidget());
    if (dialog) {
      dialog->selectFile(path);
      static_cast<QDialog*>(dialog)->accept();  // QFileDialog::accept, as the Save button
    }
    if (dialog || ++*tries > 200) {
      timer->stop();
      timer->deleteLater();
    }
  });
  timer->start();
}

// Clicks the checklist row of `node`.
void ClickNodeRow(QListWidget* list, const QString& node) {
  for (int i = 0; i < list->count(); ++i) {
    if (list->item(i)->data(Qt::UserRole).toString() == node) {
      QTest::mouseClick(list->viewport(), Qt::LeftButton, {},
                        list->visualItemRect(list->item(i)).center());
      return;
    }
  }
  QFAIL(qPrintable("no row for " + node));
}

bool AnyMessage(DeploymentPanel* p, const QString& part) {
  for (const QString& m : p->messages()) {
    if (m.contains(part)) return true;
  }
  return false;
}

// Whether a job of `deployment` runs on any node.
bool AnyJobRuns(const app::ClusterSnapshot& s, const std::string& deployment) {
  for (const auto& n : s.nodes) {
    for (const auto& j : n.jobs) {
      if (j.spec.deployment == deployment && j.state == "running") return true;
    }
  }
  return false;
}

}  // namespace

class TestDeploymentPanel : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir dir_;
  QString large_, small_;

 private slots:
  void initTestCase() {
    OCTET_REQUIRE_FIXTURES();
    QVERIFY(dir_.isValid());
    test::IsolateWorkbench(dir_);
    large_ = QString::fromStdString(test::FixturesDir()) + "/qwen3-tiny";
    small_ = QString::fromStdString(test::FixturesDir()) + "/minicpm-tiny";
  }

  void seedLayoutByClicksAppliedAndDown() {
    MainWindow w(test::LocalWorkbench(dir_, 8, QStringLiteral("ring"), "",
                                      {QString::fromStdString(test::FixturesDir()), dir_.path()}));
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(test::WaitForSnapshot(w, test::AllNodesUp, 90'000));
    w.showPanel(MainWindow::Panel::kDeployments);
    auto* panel = qobject_cast<DeploymentPanel*>(w.panel(MainWindow::Panel::kDeployments));
    QVERIFY(panel);
    QVERIFY(panel->isVisible());
    auto find_edit = [&](const char* name) {
      return panel->findChild<QLineEdit*>(QString::fromLatin1(name));
    };
    auto find_spin = [&](const char* name) {
      return panel->findChild<QSpinBox*>(QString::fromLatin1(name));
    };
    auto* nodes = panel->findChild<QListWidget*>(QStringLiteral("instanceNodes"));
    auto* table = panel->findChild<QTableWidget*>(QStringLiteral("deploymentInstances"));
    auto* cabling = panel->findChild<ui::CablingView*>(QStringLiteral("deploymentCabling"));
    QVERIFY(nodes && table && cabling);
    QVERIFY(QTest::qWaitFor([&] { return nodes->count() == 8; }, 10'000));
    QVERIFY(QTest::qWaitFor([&] { return cabling->nodeCardCount() == 8; }, 10'000));

    // ---- the layout, by clicks ----
    TypeInto(find_edit("deploymentName"), QStringLiteral("seed"));
    // The first row: 3 replicas of the TP 2 model.
    TypeInto(find_edit("instanceName"), QStringLiteral("large"));
    TypeInto(find_edit("instanceModel"), large_);
    TypeInto(find_spin("instanceTp"), 2);
    TypeInto(find_spin("instanceReplicas"), 3);
    // Its nodes: the first two by their cards in the cabling view ...
    for (const char* n : {"local-0", "local-1"}) {
      const QPoint at = cabling->nodeCardPosition(QString::fromLatin1(n));
      QVERIFY2(at.x() >= 0, n);
      QTest::mouseClick(cabling->viewport(), Qt::LeftButton, {}, at);
    }
    QCOMPARE(table->item(0, 4)->text(), QStringLiteral("local-0, local-1"));
    // ... half chosen: the check says how many the instance needs.
    QVERIFY2(AnyMessage(panel, QStringLiteral("need 6")), qPrintable(panel->messages().join("\n")));
    QVERIFY(!panel->deployment());
    // ... the rest in the checklist.
    for (const char* n : {"local-2", "local-3", "local-4", "local-5"})
      ClickNodeRow(nodes, QString::fromLatin1(n));
    QVERIFY2(panel->deployment(), qPrintable(panel->messages().join("\n")));
    // A click on a chosen node takes it out again, and back in.
    ClickNodeRow(nodes, QStringLiteral("local-5"));
    QVERIFY(!panel->deployment());
    ClickNodeRow(nodes, QStringLiteral("local-5"));
    QVERIFY(panel->deployment());

    // The second row: 2 replicas of the TP 1 model, placed.
    Click(panel->findChild<QPushButton*>(QStringLiteral("addInstance")));
    QCOMPARE(table->rowCount(), 2);
    TypeInto(find_edit("instanceName"), QStringLiteral("small"));
    TypeInto(find_edit("instanceModel"), small_);
    TypeInto(find_spin("instanceReplicas"), 2);
    // Too many for the cluster: 6 + 3 nodes of 8.
    TypeInto(find_spin("instanceReplicas"), 3);
    QVERIFY2(AnyMessage(panel, QStringLiteral("needs 9 nodes")),
             qPrintable(panel->messages().join("\n")));
    QVERIFY2(AnyMessage(panel, QStringLiteral("the cluster has 8")),
             qPrintable(panel->messages().join("\n")));
    QVERIFY(!panel->placement().ok());
    TypeInto(find_spin("instanceReplicas"), 2);

    // A router in front, with a new policy whose pools are the instances.
    auto* router_box = panel->findChild<QGroupBox*>(QStringLiteral("routerBox"));
    QVERIFY(!router_box->isChecked());
    {  // A click on the box's check mark.
      QStyleOptionGroupBox opt;
      opt.initFrom(router_box);
      opt.subControls = QStyle::SC_GroupBoxCheckBox;
      opt.text = router_box->title();
      opt.features = QStyleOptionFrame::None;
      opt.lineWidth = 1;
      const QRect mark = router_box->style()->subControlRect(
          QStyle::CC_GroupBox, &opt, QStyle::SC_GroupBoxCheckBox, router_box);
      QTest::mouseClick(router_box, Qt::LeftButton, {}, mark.center());
    }
    QVERIFY(router_box->isChecked());
    const QString policy = dir_.path() + "/seed-policy.yaml";
    AnswerFileDialog(policy);
    Click(panel->findChild<QPushButton*>(QStringLiteral("writePolicy")));
    QVERIFY(QFile::exists(policy));
    QVERIFY(panel->findChild<QGroupBox*>(QStringLiteral("routerBox"))->isChecked());
    auto* pools = panel->findChild<QLabel*>(QStringLiteral("routerPools"));
    QVERIFY2(pools->text().contains(QStringLiteral("large → instance large (3 × TP 2)")),
             qPrintable(pools->text()));
    QVERIFY2(pools->text().contains(QStringLiteral("small → instance small (2 × TP 1)")),
             qPrintable(pools->text()));

    // Valid, and placed: the table lists 5 replicas (+ the router) with memory.
    QVERIFY2(panel->deployment() && panel->placement().ok(),
             qPrintable(panel->messages().join("\n")));
    const app::Placement& pl = panel->placement();
    QCOMPARE(pl.replicas.size(), size_t{5});
    QCOMPARE(pl.replicas[0].nodes, (std::vector<std::string>{"local-0", "local-1"}));
    QCOMPARE(pl.replicas[2].nodes, (std::vector<std::string>{"local-4", "local-5"}));
    std::set<std::string> used;
    for (const auto& r : pl.replicas) {
      for (size_t k = 0; k < r.nodes.size(); ++k) {
        used.insert(r.nodes[k]);
        QVERIFY2(r.memory_bytes[k] > 0, r.replica.c_str());
      }
    }
    QCOMPARE(used.size(), size_t{8});
    auto* placement = panel->findChild<QTableWidget*>(QStringLiteral("placementTable"));
    QCOMPARE(placement->rowCount(), 6);
    QCOMPARE(placement->item(0, 0)->text(), QStringLiteral("large-0"));
    QVERIFY2(placement->item(0, 4)->text().contains(QStringLiteral("local-0 ")),
             qPrintable(placement->item(0, 4)->text()));
    QVERIFY2(placement->item(0, 4)->text().contains(QStringLiteral("of 8.00 GiB")),
             qPrintable(placement->item(0, 4)->text()));
    // The new policy gives no per-replica rates: the capacity says which is missing.
    auto* capacity = panel->findChild<QLabel*>(QStringLiteral("deploymentCapacity"));
    QVERIFY2(capacity->text().contains(QStringLiteral("rate of instance 'large' is unknown")),
             qPrintable(capacity->text()));
    const app::Deployment built = *panel->deployment();
    QCOMPARE(built.name, std::string("seed"));
    QCOMPARE(built.instances.size(), size_t{2});
    QCOMPARE(built.instances[0].tp, 2);
    QCOMPARE(built.instances[0].replicas, 3);
    QCOMPARE(built.instances[1].model, small_.toStdString());
    QCOMPARE(built.instances[1].tp, 1);
    QCOMPARE(built.instances[1].replicas, 2);
    QVERIFY(built.instances[1].nodes.empty());
    QVERIFY(built.router.present);
    QCOMPARE(built.router.policy, policy.toStdString());

    // ---- saved, then reopened after the form changed ----
    const QString file = dir_.path() + "/seed.yaml";
    AnswerFileDialog(file);
    Click(panel->findChild<QPushButton*>(QStringLiteral("saveDeployment")));
    QCOMPARE(panel->currentFile(), file);
    const app::DeploymentParseResult saved = app::LoadDeploymentFile(file.toStdString());
    QVERIFY2(saved.ok(), saved.status().ToString().c_str());
    std::string why;
    QVERIFY2(app::SameDeployment(built, *saved.deployment, &why), why.c_str());
    // The policy beside the file is named by its file name alone.
    QFile written(file);
    QVERIFY(written.open(QIODevice::ReadOnly));
    QVERIFY(written.readAll().contains("policy: seed-policy.yaml"));
    TypeInto(find_edit("deploymentName"), QStringLiteral("changed"));
    Click(panel->findChild<QPushButton*>(QStringLiteral("removeInstance")));
    QCOMPARE(table->rowCount(), 1);
    AnswerFileDialog(file);
    Click(panel->findChild<QPushButton*>(QStringLiteral("openDeployment")));
    QVERIFY(panel->deployment());
    QVERIFY2(app::SameDeployment(built, *panel->deployment(), &why), why.c_str());
    QCOMPARE(find_edit("deploymentName")->text(), QStringLiteral("seed"));
    QCOMPARE(table->rowCount(), 2);
    QCOMPARE(table->item(1, 0)->text(), QStringLiteral("small"));
    QCOMPARE(table->item(0, 4)->text(),
             QStringLiteral("local-0, local-1, local-2, local-3, local-4, local-5"));

    // ---- a typo in the text: the parser's error, with its line and column ----
    auto* text = panel->findChild<QPlainTextEdit*>(QStringLiteral("deploymentYaml"));
    const QStringList lines = text->toPlainText().split('\n');
    int line = -1;
    for (int i = 0; i < lines.size() && line < 0; ++i) {
      if (lines[i].trimmed() == QStringLiteral("replicas: 3")) line = i;
    }
    QVERIFY(line >= 0);
    const int column = static_cast<int>(lines[line].indexOf(QStringLiteral("replicas"))) + 1;
    QTextCursor cursor(text->document()->findBlockByNumber(line));
    cursor.movePosition(QTextCursor::StartOfBlock);
    cursor.movePosition(QTextCursor::Right, QTextCursor::MoveAnchor, column - 1 + 7);
    text->setTextCursor(cursor);
    text->setFocus();
    QTest::keyClick(text, Qt::Key_Delete);  // "replicas" -> "replica"
    const QString expected = QStringLiteral("%1:%2:%3: ").arg(file).arg(line + 1).arg(column);
    QVERIFY2(QTest::qWaitFor([&] { return AnyMessage(panel, expected); }, 5000),
             qPrintable(expected + " not in\n" + panel->messages().join("\n")));
    QVERIFY2(AnyMessage(panel, QStringLiteral("did you mean 'replicas'")),
             qPrintable(panel->messages().join("\n")));
    QVERIFY(!panel->deployment());
    QVERIFY(!panel->findChild<QPushButton*>(QStringLiteral("applyDeployment"))->isEnabled());
    QTest::keyClicks(text, QStringLiteral("s"));
    QVERIFY(QTest::qWaitFor([&] { return panel->deployment() != nullptr; }, 5000));
    QVERIFY2(app::SameDeployment(built, *panel->deployment(), &why), why.c_str());

    // ---- Watch before anything runs: refused (it never starts a deployment) ----
    auto* watch = panel->findChild<QCheckBox*>(QStringLiteral("watchDeployment"));
    QVERIFY(watch);
    Click(watch);
    QVERIFY(!watch->isChecked());
    QVERIFY(!panel->watched());
    QVERIFY2(panel->findChild<QLabel*>(QStringLiteral("deploymentState"))
                 ->text()
                 .contains(QStringLiteral("apply the deployment first")),
             qPrintable(panel->findChild<QLabel*>(QStringLiteral("deploymentState"))->text()));

    // ---- applied through the agents: 5 replicas ready on 8 nodes, a router ----
    QSignalSpy finished(panel, &DeploymentPanel::operationFinished);
    Click(panel->findChild<QPushButton*>(QStringLiteral("applyDeployment")));
    QVERIFY(panel->busy());
    auto* log = panel->findChild<QPlainTextEdit*>(QStringLiteral("deploymentLog"));
    QVERIFY2(finished.wait(400'000), qPrintable(log->toPlainText()));
    auto outcome = finished.takeFirst().at(0).value<ui::DeploymentOpOutcome>();
    QVERIFY2(outcome.ok, qPrintable(outcome.message + "\n" + log->toPlainText()));
    QCOMPARE(outcome.started.size(), 5);
    auto seed_status = [&]() -> const app::DeploymentStatus* {
      for (const auto& d : panel->running()) {
        if (d.name == "seed") return &d;
      }
      return nullptr;
    };
    QVERIFY(QTest::qWaitFor(
        [&] {
          const auto* d = seed_status();
          if (!d || d->instances.size() != 5 || !d->has_router) return false;
          for (const auto& r : d->instances) {
            if (r.state != "ready") return false;
          }
          return true;
        },
        30'000));
    std::set<std::string> running_nodes;
    for (const auto& r : seed_status()->instances) {
      for (const auto& n : r.nodes) QVERIFY2(running_nodes.insert(n).second, n.c_str());
    }
    QCOMPARE(running_nodes.size(), size_t{8});
    // The cabling view's cards name the replicas they run (in their job's colour).
    QVERIFY2(
        QTest::qWaitFor(
            [&] { return cabling->nodeJobsText(QStringLiteral("local-2")) == "large-1"; }, 10'000),
        qPrintable(cabling->nodeJobsText(QStringLiteral("local-2"))));
    QCOMPARE(cabling->nodeJobsText(QStringLiteral("local-3")), QStringLiteral("large-1"));
    for (const auto& r : seed_status()->instances) {
      for (const auto& n : r.nodes) {
        QVERIFY2(
            cabling->nodeJobsText(QString::fromStdString(n))
                .split(' ')
                .contains(QString::fromStdString(r.replica)),
            (n + ": " + cabling->nodeJobsText(QString::fromStdString(n)).toStdString()).c_str());
      }
    }
    auto* running = panel->findChild<QTableWidget*>(QStringLiteral("runningReplicas"));
    QCOMPARE(running->rowCount(), 6);
    QVERIFY(running->item(0, 0)->text().contains(QStringLiteral("large-0")));
    QCOMPARE(running->item(0, 1)->text(), QStringLiteral("ready"));
    QVERIFY(running->item(0, 3)->text().startsWith(QStringLiteral("http://")));

    // ---- watch: a killed replica is started again by the panel alone ----
    QVERIFY(!watch->isChecked());
    Click(watch);
    QVERIFY(watch->isChecked());
    QVERIFY(panel->watched() && panel->watched()->name == "seed");
    std::string victim;
    for (const auto& r : seed_status()->instances) {
      if (r.replica == "large-1") victim = r.job_id;
    }
    QVERIFY(!victim.empty());
    pid_t pid = 0;
    for (const auto& n : w.controller()->snapshot()->nodes) {
      for (const auto& j : n.jobs) {
        if (j.spec.job_id == victim && j.spec.rank == 0 && j.state == "running")
          pid = static_cast<pid_t>(j.pid);
      }
    }
    QVERIFY(pid > 0);
    QCOMPARE(::kill(pid, SIGKILL), 0);
    QVERIFY2(QTest::qWaitFor(
                 [&] {
                   const auto* d = seed_status();
                   if (!d) return false;
                   for (const auto& r : d->instances) {
                     if (r.replica == "large-1") return r.state == "ready" && r.job_id != victim;
                   }
                   return false;
                 },
                 240'000),
             qPrintable(log->toPlainText()));
    QVERIFY2(log->toPlainText().contains(QStringLiteral("watch: large-1 failed")),
             qPrintable(log->toPlainText()));
    QVERIFY(watch->isChecked());
    // The watch's apply ends after large-1 reads ready (it waits for every
    // replica and syncs the router); until then the panel takes no other
    // operation, so wait for its outcome (the last, should it have tried twice).
    QVERIFY2(QTest::qWaitFor([&] { return !finished.isEmpty() && !panel->busy(); }, 120'000),
             qPrintable(log->toPlainText()));
    outcome = finished.last().at(0).value<ui::DeploymentOpOutcome>();
    QVERIFY2(outcome.ok, qPrintable(outcome.message + "\n" + log->toPlainText()));
    finished.clear();

    // ---- one replica stopped from its row (which ends the watch) ----
    Click(panel->findChild<QPushButton*>(QStringLiteral("stopReplica:small-1")));
    QVERIFY(!watch->isChecked());
    QVERIFY(!panel->watched());
    QVERIFY2(
        log->toPlainText().contains(QStringLiteral("watch: off (small-1 was stopped by hand)")),
        qPrintable(log->toPlainText()));
    QVERIFY(QTest::qWaitFor(
        [&] {
          const auto* d = seed_status();
          if (!d) return false;
          for (const auto& r : d->instances) {
            if (r.replica == "small-1") return r.state != "ready" && r.state != "starting";
          }
          return true;  // no longer listed
        },
        30'000));

    // ---- down: no job left running ----
    Click(panel->findChild<QPushButton*>(QStringLiteral("downDeployment")));
    QVERIFY(finished.wait(90'000));
    outcome = finished.takeFirst().at(0).value<ui::DeploymentOpOutcome>();
    QVERIFY2(outcome.ok, qPrintable(outcome.message));
    QVERIFY(test::WaitForSnapshot(
        w,
        [](const app::ClusterSnapshot& s) {
          for (const auto& n : s.nodes) {
            for (const auto& j : n.jobs) {
              if (j.state == "running") return false;
            }
          }
          return true;
        },
        30'000));
    QVERIFY(QTest::qWaitFor(
        [&] {
          return seed_status() == nullptr || [&] {
            for (const auto& r : seed_status()->instances) {
              if (r.state == "ready") return false;
            }
            return true;
          }();
        },
        20'000));
  }

  // On the local cluster a fresh panel holds one instance of the demo model
  // that ships with the workbench: it checks clean and Apply runs it as it is.
  void aFreshPanelOnTheLocalClusterAppliesTheBundledDemo() {
    MainWindow w(test::LocalWorkbench(dir_, 2, QStringLiteral("switch")));
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(test::WaitForSnapshot(w, test::AllNodesUp, 90'000));
    w.showPanel(MainWindow::Panel::kDeployments);
    auto* panel = qobject_cast<DeploymentPanel*>(w.panel(MainWindow::Panel::kDeployments));
    QVERIFY(panel);
    QVERIFY2(QTest::qWaitFor([&] { return panel->deployment() != nullptr; }, 10'000),
             qPrintable(panel->messages().join("\n")));
    QCOMPARE(panel->deployment()->instances.size(), size_t{1});
    QVERIFY2(panel->messages().contains(QStringLiteral("1 replica on 1 of 2 nodes")),
             qPrintable(panel->messages().join("\n")));
    QVERIFY2(QString::fromStdString(panel->deployment()->instances[0].model)
                 .endsWith(QStringLiteral("/resources/models/nanochat-demo")),
             panel->deployment()->instances[0].model.c_str());
    QSignalSpy finished(panel, &DeploymentPanel::operationFinished);
    Click(panel->findChild<QPushButton*>(QStringLiteral("applyDeployment")));
    auto* log = panel->findChild<QPlainTextEdit*>(QStringLiteral("deploymentLog"));
    QVERIFY2(finished.wait(120'000), qPrintable(log->toPlainText()));
    auto outcome = finished.takeFirst().at(0).value<ui::DeploymentOpOutcome>();
    QVERIFY2(outcome.ok, qPrintable(outcome.message + "\n" + log->toPlainText()));
    QCOMPARE(outcome.started, QStringList{QStringLiteral("demo-0")});
    Click(panel->findChild<QPushButton*>(QStringLiteral("downDeployment")));
    QVERIFY(finished.wait(90'000));
    outcome = finished.takeFirst().at(0).value<ui::DeploymentOpOutcome>();
    QVERIFY2(outcome.ok, qPrintable(outcome.message));
    QCOMPARE(outcome.stopped.size(), 1);
  }

  // Down while an apply waits for a replica: the apply ends at once (what it
  // started is stopped) and the deployment goes down, long before the
  // apply's deadline. The replica is held in "starting" by a wrapper of the
  // octet binary that waits five minutes before it runs a worker.
  void downDuringAnApplyEndsItThenTakesTheDeploymentDown() {
    const QString wrapper = dir_.path() + "/slow-octet.sh";
    QVERIFY(test::WriteHeldWorkerOctet(wrapper.toStdString()));
    MainWindow w(test::LocalWorkbench(dir_, 2, QStringLiteral("ring"), wrapper.toStdString(),
                                      {QString::fromStdString(test::FixturesDir())}));
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(test::WaitForSnapshot(w, test::AllNodesUp, 90'000));
    w.showPanel(MainWindow::Panel::kDeployments);
    auto* panel = qobject_cast<DeploymentPanel*>(w.panel(MainWindow::Panel::kDeployments));
    QVERIFY(panel);
    const QString file = dir_.path() + "/held.yaml";
    {
      QFile f(file);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(QStringLiteral("version: 1\nname: held\ninstances:\n  - name: small\n"
                             "    model: %1\n    tp: 1\n    replicas: 1\n    slots: 2\n"
                             "    context: 128\n    threads: 1\n")
                  .arg(small_)
                  .toUtf8());
    }
    QString error;
    QVERIFY2(panel->openFile(file, &error), qPrintable(error));
    QSignalSpy finished(panel, &DeploymentPanel::operationFinished);
    Click(panel->findChild<QPushButton*>(QStringLiteral("applyDeployment")));
    QVERIFY(panel->busy());
    auto* log = panel->findChild<QPlainTextEdit*>(QStringLiteral("deploymentLog"));
    // The replica's job runs (its worker held): the apply waits for it.
    QVERIFY2(test::WaitForSnapshot(
                 w, [](const app::ClusterSnapshot& s) { return AnyJobRuns(s, "held"); }, 30'000),
             qPrintable(log->toPlainText()));
    QVERIFY(panel->busy());
    auto* down = panel->findChild<QPushButton*>(QStringLiteral("downDeployment"));
    QVERIFY(down->isEnabled());
    QElapsedTimer pressed;
    pressed.start();
    Click(down);
    QVERIFY(!down->isEnabled());
    QVERIFY2(log->toPlainText().contains(QStringLiteral("down held: ending its apply first")),
             qPrintable(log->toPlainText()));
    // First the apply's outcome (ended by the Down), then the down's.
    QVERIFY2(QTest::qWaitFor([&] { return finished.size() >= 2 && !panel->busy(); }, 60'000),
             qPrintable(log->toPlainText()));
    const qint64 took_ms = pressed.elapsed();
    const auto applied = finished.at(0).at(0).value<ui::DeploymentOpOutcome>();
    QVERIFY(applied.apply);
    QVERIFY(!applied.ok);
    QVERIFY2(applied.message.contains(QStringLiteral("stopped while waiting for small-0")),
             qPrintable(applied.message));
    const auto downed = finished.at(1).at(0).value<ui::DeploymentOpOutcome>();
    QVERIFY(!downed.apply);
    QVERIFY2(downed.ok, qPrintable(downed.message));
    QVERIFY2(took_ms < 60'000, qPrintable(QString::number(took_ms)));
    QVERIFY(down->isEnabled());
    QVERIFY(test::WaitForSnapshot(
        w, [](const app::ClusterSnapshot& s) { return !AnyJobRuns(s, "held"); }, 20'000));
    qInfo("Down during the apply: both ended %lld ms after it was pressed",
          static_cast<long long>(took_ms));
  }
};

QTEST_MAIN(TestDeploymentPanel)
#include "test_deployment_panel.moc"
