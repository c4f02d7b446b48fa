// The window frame, driven from the keyboard and mouse: the eight panels in
// the navigation, Ctrl+1..8 switching, the status bar, English plurals, settings
// that survive a restart, and the start-up choice of cluster (remembered, else a saved
// profile of real agents, else the local embedded cluster).
#include <QLabel>
#include <QListWidget>
#include <QStackedWidget>
#include <QtTest>

#include "octet/agent/cluster_token.h"
#include "octet/app/cluster_import.h"
#include "octet/ui/connection.h"
#include "octet/ui/main_window.h"
#include "workbench_test_util.h"

using namespace octet;
using octet::ui::ConnectionSpec;
using octet::ui::MainWindow;

class TestMainWindow : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir dir_;
  ui::WorkbenchOptions Offline() {
    ui::WorkbenchOptions o;
    o.auto_connect = false;
    o.cluster.config_dir = dir_.path().toStdString() + "/config";
    return o;
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    test::IsolateWorkbench(dir_);
  }

  void opensWithPanelsStatusAndBuildInfo() {
    MainWindow w(Offline());
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QCOMPARE(w.windowTitle(), QStringLiteral("Octet Workbench"));
    auto* nav = w.findChild<QListWidget*>(QStringLiteral("navigation"));
    QVERIFY(nav);
    QStringList names;
    for (int i = 0; i < nav->count(); ++i) names << nav->item(i)->text();
    QCOMPARE(names, (QStringList{"Cluster", "Launch", "Dashboard", "Chat", "Routing", "Benchmarks",
                                 "Deployments", "Models"}));
    auto* info = w.findChild<QLabel*>(QStringLiteral("buildInfo"));
    QVERIFY(info);
    QVERIFY(info->text().startsWith(QStringLiteral("octet ")));
    auto* status = w.findChild<QLabel*>(QStringLiteral("connectionStatus"));
    QVERIFY(status);
    QCOMPARE(status->text(), QStringLiteral("Not connected"));
    auto* jobs = w.findChild<QLabel*>(QStringLiteral("jobsStatus"));
    QVERIFY(jobs);
    QCOMPARE(jobs->text(), QStringLiteral("no jobs running"));
  }

  // Counted strings read as English (no translations ship): tr("%n node(s)")
  // is "1 node" and "2 nodes", not "1 node(s)"; an uncounted string keeps
  // its text.
  void countsTakeEnglishPlurals() {
    QCOMPARE(QCoreApplication::translate("octet::ui::LaunchPanel", "the cluster has %n node(s)",
                                         nullptr, 1),
             QStringLiteral("the cluster has 1 node"));
    QCOMPARE(QCoreApplication::translate("octet::ui::LaunchPanel", "the cluster has %n node(s)",
                                         nullptr, 2),
             QStringLiteral("the cluster has 2 nodes"));
    QCOMPARE(
        QCoreApplication::translate("X", "%n rank(s) need as many nodes up, %1 are", nullptr, 0),
        QStringLiteral("0 ranks need as many nodes up, %1 are"));
    QCOMPARE(QCoreApplication::translate("X", "Cluster (s) view"),
             QStringLiteral("Cluster (s) view"));
    QCOMPARE(QCoreApplication::translate("X", "%n job running", nullptr, 3),
             QStringLiteral("3 job running"));
  }

  void shortcutsAndClicksSwitchPanels() {
    MainWindow w(Offline());
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QTest::keyClick(&w, Qt::Key_3, Qt::ControlModifier);
    QCOMPARE(w.currentPanel(), MainWindow::Panel::kDashboard);
    QVERIFY(w.panel(MainWindow::Panel::kDashboard)->isVisible());
    QTest::keyClick(&w, Qt::Key_6, Qt::ControlModifier);
    QCOMPARE(w.currentPanel(), MainWindow::Panel::kBenchmarks);
    // A click on "Cluster" in the navigation.
    auto* nav = w.findChild<QListWidget*>(QStringLiteral("navigation"));
    const QRect r = nav->visualItemRect(nav->item(0));
    QTest::mouseClick(nav->viewport(), Qt::LeftButton, {}, r.center());
    QCOMPARE(w.currentPanel(), MainWindow::Panel::kCluster);
    QVERIFY(w.panel(MainWindow::Panel::kCluster)->isVisible());
  }

  void lastPanelAndGeometryAreRemembered() {
    {
      MainWindow w(Offline());
      w.show();
      QVERIFY(QTest::qWaitForWindowExposed(&w));
      w.resize(1100, 700);
      QTest::keyClick(&w, Qt::Key_4, Qt::ControlModifier);
      w.close();
    }
    MainWindow again(Offline());
    QCOMPARE(again.currentPanel(), MainWindow::Panel::kChat);
    QCOMPARE(again.size(), QSize(1100, 700));
  }

  void startupPrefersRememberedThenProfileThenLocal() {
    const std::string config = dir_.path().toStdString() + "/startup-config";
    QSettings settings;
    settings.clear();
    // Nothing saved: the local cluster, 4 nodes on a switch.
    ConnectionSpec first = ui::StartupConnection(settings, config);
    QCOMPARE(first.kind, ConnectionSpec::Kind::kLocal);
    QCOMPARE(first.local_nodes, 4);
    QCOMPARE(first.local_cabling, QStringLiteral("switch"));
    // A profile of real agents exists: that one.
    const std::string token = dir_.path().toStdString() + "/token";
    QVERIFY(agent::WriteTokenFile(token, *agent::GenerateClusterToken()).ok());
    app::ClusterImport in;
    in.name = "lab";
    in.config_dir = config;
    in.nodes = {{"a", "10.1.1.1"}};
    in.token_file = token;
    QVERIFY(app::ImportCluster(in).ok());
    ConnectionSpec second = ui::StartupConnection(settings, config);
    QCOMPARE(second.kind, ConnectionSpec::Kind::kProfile);
    QCOMPARE(second.profile, QStringLiteral("lab"));
    // A remembered choice wins.
    ConnectionSpec ring;
    ring.local_nodes = 3;
    ring.local_cabling = QStringLiteral("ring");
    ring.Save(settings);
    ConnectionSpec third = ui::StartupConnection(settings, config);
    QCOMPARE(third.kind, ConnectionSpec::Kind::kLocal);
    QCOMPARE(third.local_nodes, 3);
    QCOMPARE(third.local_cabling, QStringLiteral("ring"));
    settings.clear();
  }
};

QTEST_MAIN(TestMainWindow)
#include "test_main_window.moc"
