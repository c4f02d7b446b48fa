// The cabling diagram's RoCE rows, fed as the workbench feeds it: agents (in
// process, as real nodes) read the recorded Spark tree of tests/data/sysfs and
// variants of it; their facts come through the app's AgentClient into a
// cluster snapshot; the view draws each node's RoCE ports and marks what the
// agents warn about (MTU under 9000, a port half down, no RoCE v2 GID). The
// node details and the card tooltips carry the NCCL settings and the
// warnings' text.
#include <QElapsedTimer>
#include <QPalette>
#include <QtTest>

#include "octet/agent/agent_server.h"
#include "octet/app/agent_client.h"
#include "octet/app/cluster_session.h"
#include "octet/ui/cabling_view.h"
#include "octet/ui/cluster_panel.h"
#include "octet/ui/theme.h"
#include "octet_test.h"
#include "recorded_sysfs.h"

using namespace octet;

namespace {

constexpr char kToken[] = "roce-view-token-0123456789";

// Pixels of the view close to `color` (the warning colour's marks and text).
int PixelsNear(const QImage& image, const QColor& color) {
  int n = 0;
  for (int y = 0; y < image.height(); ++y) {
    for (int x = 0; x < image.width(); ++x) {
      const QColor c = image.pixelColor(x, y);
      n += std::abs(c.red() - color.red()) + std::abs(c.green() - color.green()) +
               std::abs(c.blue() - color.blue()) <
           40;
    }
  }
  return n;
}

}  // namespace

class TestCablingRoce : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir dir_;
  std::vector<std::unique_ptr<agent::AgentServer>> agents_;

  // A real node's facts as the workbench gets them, from an agent reading `tree`.
  app::NodeView NodeFrom(const std::string& name, const std::string& tree) {
    agent::AgentConfig c;
    c.listen = "127.0.0.1:0";
    c.token = kToken;
    c.identity.state_dir = dir_.path().toStdString() + "/" + name;
    c.discovery = false;
    c.rdma_sys_root = tree;
    auto server = agent::AgentServer::Start(c);
    if (!server.ok()) qFatal("agent: %s", server.status().ToString().c_str());
    auto client = app::AgentClient::Create({(*server)->address(), kToken, "", ""});
    if (!client.ok()) qFatal("client: %s", client.status().ToString().c_str());
    auto facts = (*client)->GetFacts(Deadline::AfterMs(10'000));
    if (!facts.ok()) qFatal("facts: %s", facts.status().ToString().c_str());
    app::NodeView n;
    n.name = name;
    n.address = (*server)->address();
    n.state = app::NodeState::kUp;
    n.has_facts = true;
    n.facts = *facts;
    agents_.push_back(std::move(*server));
    return n;
  }

 private slots:
  void initTestCase() { QVERIFY(dir_.isValid()); }
  void cleanupTestCase() { agents_.clear(); }

  void rowsAndWarningsOnTheCards() {
    const std::string root = dir_.path().toStdString();
    const std::string faulty = test::SparkWithMtu1500AndDownHalf(root + "/faulty-sys");
    const std::string v1_only = test::SparkWithoutRoceV2(root + "/v1-sys");
    QVERIFY(!faulty.empty() && !v1_only.empty());

    app::ClusterSnapshot s;
    s.cluster_name = "sparks";
    s.nodes.push_back(NodeFrom("spark-a", test::RecordedSysfs()));
    s.nodes.push_back(NodeFrom("spark-b", faulty));
    s.nodes.push_back(NodeFrom("spark-c", v1_only));

    ui::CablingView view;
    view.resize(1000, 700);
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    view.setSnapshot(s);
    QCOMPARE(view.nodeCardCount(), 3);

    // A healthy Spark: the cabled port's halves up at 9000, the idle port down.
    const QStringList a = view.roceRows(QStringLiteral("spark-a"));
    QCOMPARE(a, (QStringList{QStringLiteral("roceP2p1s0f0: down · MTU 1500"),
                             QStringLiteral("rocep1s0f0: down · MTU 1500"),
                             QStringLiteral("roceP2p1s0f1: up · MTU 9000"),
                             QStringLiteral("rocep1s0f1: up · MTU 9000")}));
    // 1500 MTU on the half NCCL uses, the other half down.
    const QStringList b = view.roceRows(QStringLiteral("spark-b"));
    QVERIFY2(b.contains(QStringLiteral("rocep1s0f1: ⚠ MTU 1500")), qPrintable(b.join('\n')));
    QVERIFY2(b.contains(QStringLiteral("roceP2p1s0f1: ⚠ half down")), qPrintable(b.join('\n')));
    // RoCE v2 off on both halves.
    const QStringList c = view.roceRows(QStringLiteral("spark-c"));
    QVERIFY2(c.contains(QStringLiteral("rocep1s0f1: ⚠ no v2 GID")), qPrintable(c.join('\n')));
    QVERIFY2(c.contains(QStringLiteral("roceP2p1s0f1: ⚠ no v2 GID")), qPrintable(c.join('\n')));
    QCOMPARE(view.roceWarningRowCount(), 4);

    // The tooltip says what to do and what NCCL gets.
    const QString tip_b = view.nodeToolTip(QStringLiteral("spark-b"));
    QVERIFY2(tip_b.contains(QStringLiteral("NCCL_IB_HCA==rocep1s0f1:1")), qPrintable(tip_b));
    QVERIFY2(tip_b.contains(QStringLiteral("set MTU 9000 on both ends")), qPrintable(tip_b));
    QVERIFY2(tip_b.contains(QStringLiteral("bring enP2p1s0f1np1 up")), qPrintable(tip_b));
    QVERIFY(view.nodeToolTip(QStringLiteral("spark-a")).contains(QStringLiteral("RoCE v2 GID 3")));

    // What a person sees: warning-coloured marks on the faulty cards only.
    const QColor warning = ui::StatusColorsFor(view.palette()).warning;
    app::ClusterSnapshot healthy = s;
    healthy.nodes.resize(1);
    ui::CablingView healthy_view;
    healthy_view.resize(1000, 700);
    healthy_view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&healthy_view));
    healthy_view.setSnapshot(healthy);
    const int calm = PixelsNear(healthy_view.grab().toImage(), warning);
    const int alarmed = PixelsNear(view.grab().toImage(), warning);
    QVERIFY2(alarmed > calm + 200, qPrintable(QStringLiteral("%1 vs %2").arg(alarmed).arg(calm)));
    if (const QByteArray out = qgetenv("OCTET_SCREENSHOT_DIR"); !out.isEmpty()) {
      view.grab().save(QString::fromUtf8(out) + QStringLiteral("/cabling-roce.png"));
    }

    // The node details list the ports, the NCCL settings and the warnings.
    const QString details = ui::NodeDetailsHtml(s.nodes[1], view.palette());
    QVERIFY2(details.contains(QStringLiteral("NCCL_IB_HCA")), qPrintable(details));
    QVERIFY(details.contains(QStringLiteral("=rocep1s0f1:1")));
    QVERIFY(details.contains(QStringLiteral("MTU 1500")));
    QVERIFY(details.contains(QStringLiteral("has MTU 1500")));

    // Telemetry-rate refreshes keep the shape (no rebuild): the same rows. The
    // time per refresh is printed, not judged (bench_workbench_stall measures).
    QElapsedTimer timer;
    timer.start();
    for (int i = 0; i < 20; ++i) {
      s.nodes[1].has_telemetry = true;
      s.nodes[1].telemetry.cpu_busy = i / 20.0;
      view.setSnapshot(s);
    }
    qInfo("setSnapshot of 3 RoCE nodes: %.1f us per telemetry refresh",
          timer.nsecsElapsed() / 20e3);
    QCOMPARE(view.roceRows(QStringLiteral("spark-b")), b);

    // The fault fixed (facts as a healthy node's): the marks go.
    s.nodes[1].facts = s.nodes[0].facts;
    view.setSnapshot(s);
    QCOMPARE(view.roceWarningRowCount(), 2);  // spark-c's
  }
};

QTEST_MAIN(TestCablingRoce)
#include "test_cabling_roce.moc"
