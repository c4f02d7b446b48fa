// The Cluster panel against a local embedded cluster of real octet-agent
// processes: the diagram shows the declared cabling (ring: a cycle of cards
// and cables; switch: a star around the switch), memory bars carry each node's
// budget, clicking a card shows that node, "Probe links" fills in latency and
// throughput, and a killed agent shows as lost (red) until it comes back.
#include <QDir>
#include <QFile>
#include <QLabel>
#include <QListWidget>
#include <QPushButton>
#include <QTableView>
#include <QTextBrowser>
#include <QtTest>
#include <cmath>

#include "octet/ui/cabling_view.h"
#include "octet/ui/cluster_panel.h"
#include "octet/ui/memory_bars.h"
#include "octet/ui/widgets.h"
#include "workbench_test_util.h"

using namespace octet;
using octet::ui::MainWindow;

class TestClusterPanel : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir dir_;

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    test::IsolateWorkbench(dir_);
  }

  // The panel's CPU figure: the mean of about a second of samples, changed once
  // a second; a sample delivered again (another node's refresh) counts once,
  // and an agent that starts over starts the figure over.
  void cpuFigureIsTheMeanOfASecondChangedOnceASecond() {
    ui::CpuReadout cpu;
    auto at = [](int64_t ms, double busy) {
      app::TelemetrySample s;
      s.unix_ms = ms;
      s.cpu_busy = busy;
      return s;
    };
    QCOMPARE(cpu.Shown("a", at(10'000, 0.9)), 0.9);  // the first sample as it is
    // 10 Hz: the figure holds while the second fills...
    for (int i = 1; i < 10; ++i)
      QCOMPARE(cpu.Shown("a", at(10'000 + 100 * i, i % 2 ? 0.2 : 0.4)), 0.9);
    QCOMPARE(cpu.Shown("a", at(10'900, 0.4)), 0.9);  // the same sample again: not counted
    // ...and is the mean of the second's samples when it is full.
    const double mean = (5 * 0.2 + 4 * 0.4 + 0.6) / 10;
    QVERIFY(std::abs(cpu.Shown("a", at(11'000, 0.6)) - mean) < 1e-12);
    QVERIFY(std::abs(cpu.Shown("a", at(11'100, 1.0)) - mean) < 1e-12);
    // Nodes are apart.
    QCOMPARE(cpu.Shown("b", at(11'100, 0.05)), 0.05);
    // Samples a second apart (2 Hz is the default; 1 Hz here) each show.
    ui::CpuReadout slow;
    QCOMPARE(slow.Shown("a", at(0, 0.1)), 0.1);
    QCOMPARE(slow.Shown("a", at(1000, 0.3)), 0.3);
    QCOMPARE(slow.Shown("a", at(2000, 0.5)), 0.5);
    // An agent restarted (its clock behind the last sample): shown as it comes.
    QCOMPARE(cpu.Shown("a", at(500, 0.7)), 0.7);
    QCOMPARE(cpu.Shown("a", at(600, 0.1)), 0.7);
  }

  void ringClusterLiveProbeLoseAndRecover() {
    MainWindow w(test::LocalWorkbench(dir_, 3, QStringLiteral("ring")));
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(test::WaitForSnapshot(w, test::AllNodesUp));
    auto* panel = w.findChild<ui::ClusterPanel*>();
    QVERIFY(panel);
    ui::CablingView* view = panel->cablingView();
    QVERIFY(QTest::qWaitFor([&] { return view->linkCount() == 3; }, 5000));
    QCOMPARE(view->nodeCardCount(), 3);
    QCOMPARE(view->switchCount(), 0);
    QVERIFY2(view->linkLabels().join(",").contains(QStringLiteral("sim1 ↔ sim0")),
             qPrintable(view->linkLabels().join(",")));
    auto* subtitle = panel->findChild<QLabel*>(QStringLiteral("panelSubtitle"));
    QVERIFY(subtitle->text().contains(QStringLiteral("ring of 3")));
    auto* status = w.findChild<QLabel*>(QStringLiteral("connectionStatus"));
    QVERIFY2(status->text().contains(QStringLiteral("3/3 nodes up")), qPrintable(status->text()));

    // Memory: each node's budget, nothing used by jobs.
    const auto& rows = panel->memoryBars()->rows();
    QCOMPARE(rows.size(), size_t{3});
    for (const auto& r : rows) QCOMPARE(r.total_bytes, 8ull << 30);

    // Clicking a card shows that node.
    const QPoint at = view->nodeCardPosition(QStringLiteral("local-2"));
    QVERIFY(at.x() >= 0);
    QTest::mouseClick(view->viewport(), Qt::LeftButton, {}, at);
    QCOMPARE(panel->selectedNode(), QStringLiteral("local-2"));
    auto* details = panel->findChild<QTextBrowser*>(QStringLiteral("nodeDetails"));
    QVERIFY(QTest::qWaitFor(
        [&] { return details->toPlainText().contains(QStringLiteral("local-2")); }, 3000));
    QVERIFY(details->toPlainText().contains(QStringLiteral("simulated")));

    // Probe links: latency and throughput per link, in the table and on the diagram.
    auto* probe = panel->findChild<QPushButton*>(QStringLiteral("probeLinksButton"));
    QTest::mouseClick(probe, Qt::LeftButton);
    QVERIFY(!probe->isEnabled());
    auto* table = panel->findChild<QTableView*>(QStringLiteral("linksTable"));
    QVERIFY(QTest::qWaitFor([&] { return probe->isEnabled(); }, 60'000));
    QCOMPARE(table->model()->rowCount(), 3);
    for (int r = 0; r < 3; ++r) {
      const QString rtt = table->model()->index(r, ui::LinksModel::kLatency).data().toString();
      QVERIFY2(rtt.contains(QStringLiteral("µs")) || rtt.contains(QStringLiteral("ms")),
               qPrintable(rtt));
      QVERIFY(
          table->model()->index(r, ui::LinksModel::kThroughput).data().toString().endsWith("Gb/s"));
    }
    QVERIFY(view->linkLabels().join(",").contains(QStringLiteral("Gb/s")));

    // A crashed agent: the node is lost, its card and the problems list say so.
    QVERIFY(w.controller()->localCluster()->KillNode(1).ok());
    QVERIFY(test::WaitForSnapshot(
        w, [](const app::ClusterSnapshot& s) { return s.nodes[1].state == app::NodeState::kLost; },
        15'000));
    auto* problems = panel->findChild<QListWidget*>(QStringLiteral("problemsList"));
    QVERIFY(QTest::qWaitFor([&] { return problems->count() > 0; }, 5000));
    bool unreachable = false;
    for (int i = 0; i < problems->count(); ++i)
      unreachable = unreachable || problems->item(i)->text().contains(QStringLiteral("local-1"));
    QVERIFY(unreachable);
    QVERIFY(
        QTest::qWaitFor([&] { return status->text().contains(QStringLiteral("1 lost")); }, 3000));
    QVERIFY(view->linkCount() < 3);

    // It comes back: the ring is whole again and the problems are gone.
    QVERIFY(w.controller()->localCluster()->RestartNode(1, Deadline::AfterMs(20'000)).ok());
    QVERIFY(test::WaitForSnapshot(w, [](const app::ClusterSnapshot& s) {
      return test::AllNodesUp(s) && s.cabling.kind == app::CablingKind::kRing;
    }));
    QVERIFY(
        QTest::qWaitFor([&] { return problems->count() == 0 && view->linkCount() == 3; }, 5000));
  }

  void switchClusterIsAStar() {
    MainWindow w(test::LocalWorkbench(dir_, 4, QStringLiteral("switch")));
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(test::WaitForSnapshot(w, test::AllNodesUp));
    auto* panel = w.findChild<ui::ClusterPanel*>();
    ui::CablingView* view = panel->cablingView();
    QVERIFY(QTest::qWaitFor([&] { return view->switchCount() == 1; }, 5000));
    QCOMPARE(view->nodeCardCount(), 4);
    QCOMPARE(view->linkCount(), 4);  // one spoke per node
    QCOMPARE(view->warningLinkCount(), 0);
    auto* table = panel->findChild<QTableView*>(QStringLiteral("linksTable"));
    QCOMPARE(table->model()->rowCount(), 6);  // every pair shares the switch
    QCOMPARE(table->model()->index(0, ui::LinksModel::kSegment).data().toString(),
             QStringLiteral("switch"));
  }
  // Which node holds which model: each node's store (its agent's
  // ModelService, in the Hugging Face cache layout) on its card, names and
  // sizes, and in full in its details; refreshed as the store changes.
  void nodeCardsShowTheirModels() {
    MainWindow w(test::LocalWorkbench(dir_, 2, QStringLiteral("switch")));
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(test::WaitForSnapshot(w, test::AllNodesUp));
    const QString state = dir_.path() + "/cluster-state";
    auto put = [&](int node, const QString& folder, const QString& commit,
                   const QList<QPair<QString, int>>& files) {
      const QString repo = QStringLiteral("%1/node-%2/hub/%3").arg(state).arg(node).arg(folder);
      QVERIFY(QDir().mkpath(repo + "/snapshots/" + commit));
      QVERIFY(QDir().mkpath(repo + "/refs"));
      QFile ref(repo + "/refs/main");
      QVERIFY(ref.open(QIODevice::WriteOnly));
      ref.write(commit.toUtf8());
      for (const auto& [name, bytes] : files) {
        QFile f(repo + "/snapshots/" + commit + "/" + name);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(QByteArray(bytes, 'x'));
      }
    };
    put(0, QStringLiteral("models--acme--tiny"), QStringLiteral("1111aaaa2222bbbb"),
        {{QStringLiteral("config.json"), 1024}, {QStringLiteral("model.safetensors"), 2048}});
    put(1, QStringLiteral("models--acme--other"), QStringLiteral("3333cccc4444dddd"),
        {{QStringLiteral("model.safetensors"), 3 << 20}});
    auto* panel = w.findChild<ui::ClusterPanel*>();
    ui::CablingView* view = panel->cablingView();
    QVERIFY2(QTest::qWaitFor(
                 [&] {
                   return view->nodeModelsText(QStringLiteral("local-0")) ==
                              QStringLiteral("acme/tiny 3.00 KiB") &&
                          view->nodeModelsText(QStringLiteral("local-1")) ==
                              QStringLiteral("acme/other 3.00 MiB");
                 },
                 10'000),
             qPrintable(view->nodeModelsText(QStringLiteral("local-0")) + " | " +
                        view->nodeModelsText(QStringLiteral("local-1"))));
    // The details of the clicked node list them in full.
    QTest::mouseClick(view->viewport(), Qt::LeftButton, {},
                      view->nodeCardPosition(QStringLiteral("local-1")));
    auto* details = panel->findChild<QTextBrowser*>(QStringLiteral("nodeDetails"));
    QVERIFY(QTest::qWaitFor(
        [&] { return details->toPlainText().contains(QStringLiteral("acme/other")); }, 5000));
    QVERIFY2(details->toPlainText().contains(QStringLiteral("1 files · 3333cccc4444")),
             qPrintable(details->toPlainText()));
    QVERIFY(!details->toPlainText().contains(QStringLiteral("acme/tiny")));
    // A model pulled onto node 1 later shows on its card at the next refresh.
    put(1, QStringLiteral("models--acme--tiny"), QStringLiteral("1111aaaa2222bbbb"),
        {{QStringLiteral("config.json"), 1024}});
    QVERIFY2(QTest::qWaitFor(
                 [&] {
                   return view->nodeModelsText(QStringLiteral("local-1")) ==
                          QStringLiteral("acme/other 3.00 MiB · acme/tiny 1.00 KiB");
                 },
                 10'000),
             qPrintable(view->nodeModelsText(QStringLiteral("local-1"))));
  }
};

QTEST_MAIN(TestClusterPanel)
#include "test_cluster_panel.moc"
