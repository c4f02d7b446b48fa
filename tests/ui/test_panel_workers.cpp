// The Chat and Benchmarks panels run their HTTP work on worker objects in
// threads the panel owns: closing a panel in the middle of a streamed reply or
// of a sweep cancels the request (the server sees its client leave), joins the
// thread without hanging, and nothing arrives afterwards for the dead panel.
// The server is the router tests' OpenAI-compatible upstream on loopback,
// streaming slowly enough that the close always lands mid-stream. The work is
// seen on the panel's named threads (chatReply, benchSweep, benchStore), and
// none of them is left once the panel is deleted. Cancel pressed mid-request
// ends the sweep at once with its run stored (and listed) as interrupted.
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>
#include <memory>

#include "octet/app/bench_store.h"
#include "octet/ui/bench_panel.h"
#include "octet/ui/chat_panel.h"
#include "octet/ui/instance_manager.h"
#include "openai_upstream.h"

using namespace octet;

class TestPanelWorkers : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;

  // A server streaming `tokens` tokens, one every 20 ms.
  static std::unique_ptr<test::OpenAiUpstream> SlowServer(int tokens) {
    test::UpstreamOptions o;
    o.name = "slow";
    o.tokens = tokens;
    o.token_interval_ms = 20;
    auto up = test::OpenAiUpstream::Start(o);
    if (!up.ok()) qFatal("%s", up.status().ToString().c_str());
    return std::move(*up);
  }

  // Threads of this process named `name` (a QThread takes its objectName).
  static int ThreadsNamed(const QString& name) {
    int n = 0;
    const QDir tasks(QStringLiteral("/proc/self/task"));
    for (const QString& t : tasks.entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
      QFile comm(tasks.filePath(t + QStringLiteral("/comm")));
      if (comm.open(QIODevice::ReadOnly) && QString::fromUtf8(comm.readAll()).trimmed() == name)
        ++n;
    }
    return n;
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    QStandardPaths::setTestModeEnabled(true);
  }

  void chatClosedMidStream() {
    auto server = SlowServer(1000);  // 20 s if nobody stops it
    ui::InstanceManager instances;
    auto* chat = new ui::ChatPanel(&instances);
    chat->setConversationDir(dir_.path() + "/conversations");
    chat->setEndpoint(QString::fromStdString(server->url()));
    chat->show();
    QSignalSpy pieces(chat, &ui::ChatPanel::streamed);
    QSignalSpy finished(chat, &ui::ChatPanel::replyFinished);
    chat->sendMessage(QStringLiteral("Tell me a long story"));
    QVERIFY(chat->busy());
    // Tokens reach the panel from its worker while the stream goes on.
    QVERIFY(QTest::qWaitFor([&] { return pieces.count() >= 5; }, 10'000));
    QCOMPARE(finished.count(), 0);
    QCOMPARE(server->in_flight(), 1);
    QCOMPARE(ThreadsNamed(QStringLiteral("chatReply")), 1);  // the panel's worker thread

    QElapsedTimer t;
    t.start();
    delete chat;
    const qint64 close_ms = t.elapsed();
    // The worker stopped at its next chunk (a token every 20 ms) and was joined.
    QVERIFY2(close_ms < 3000, qPrintable(QStringLiteral("closing took %1 ms").arg(close_ms)));
    // (QThread::wait returns as the thread finishes; the OS thread is gone
    // a moment later.)
    QTRY_COMPARE_WITH_TIMEOUT(ThreadsNamed(QStringLiteral("chatReply")), 0, 1000);
    QVERIFY(QTest::qWaitFor([&] { return server->in_flight() == 0; }, 5000));
    QCOMPARE(server->completed(), 0);
    // Nothing queued by the worker reaches the deleted panel.
    QTest::qWait(200);
  }

  void chatStopsAndRepliesAgain() {
    auto server = SlowServer(1000);
    ui::InstanceManager instances;
    ui::ChatPanel chat(&instances);
    chat.setConversationDir(dir_.path() + "/conversations-stop");
    chat.setEndpoint(QString::fromStdString(server->url()));
    QSignalSpy pieces(&chat, &ui::ChatPanel::streamed);
    QSignalSpy finished(&chat, &ui::ChatPanel::replyFinished);
    chat.sendMessage(QStringLiteral("first"));
    QVERIFY(QTest::qWaitFor([&] { return pieces.count() >= 3; }, 10'000));
    chat.stopReply();
    QVERIFY(finished.wait(5000));
    QVERIFY(finished.last().first().toBool());  // stopped is not a failure
    QVERIFY(!chat.busy());
    QVERIFY(QTest::qWaitFor([&] { return server->in_flight() == 0; }, 5000));
    // The same worker serves the next reply, to its end.
    server->set_token_interval_ms(1);
    chat.sendMessage(QStringLiteral("second"));
    QVERIFY(finished.wait(20'000));
    QVERIFY2(finished.last().first().toBool(), qPrintable(chat.messages().last().error));
    QTRY_COMPARE_WITH_TIMEOUT(server->completed(), 1, 5000);
    QVERIFY(chat.messages().last().content.startsWith(QStringLiteral("slow:0 ")));
  }

  void benchClosedMidSweep() {
    auto server = SlowServer(1000);
    const QString store = dir_.path() + "/runs.sqlite";
    ui::InstanceManager instances;
    auto* bench = new ui::BenchPanel(&instances);
    QSignalSpy loaded(bench, &ui::BenchPanel::runsLoaded);
    bench->setStorePath(store);
    QVERIFY(loaded.wait(10'000));
    bench->setEndpoint(QString::fromStdString(server->url()));
    // 400 tokens at 20 ms: 8 s per request, three repetitions.
    bench->setSweep(QStringLiteral("16"), QStringLiteral("400"), QStringLiteral("1"), 3,
                    QStringLiteral("closed"));
    QSignalSpy finished(bench, &ui::BenchPanel::sweepFinished);
    QTest::mouseClick(bench->findChild<QPushButton*>(QStringLiteral("benchRun")), Qt::LeftButton);
    QVERIFY(bench->running());
    // The run is in the store (listed by the panel's reader) and its first
    // measured request streams.
    QVERIFY(QTest::qWaitFor(
        [&] { return !bench->runs().empty() && bench->runs().front().state == "running"; },
        20'000));
    auto* progress = bench->findChild<QLabel*>(QStringLiteral("benchProgressText"));
    QVERIFY(QTest::qWaitFor([&] { return progress->text().contains(QStringLiteral("measuring")); },
                            10'000));
    QVERIFY(QTest::qWaitFor([&] { return server->in_flight() == 1; }, 10'000));
    QTest::qWait(300);
    // (A request thread the sweep starts takes its creator's name too.)
    QVERIFY(ThreadsNamed(QStringLiteral("benchSweep")) >= 1);
    QCOMPARE(ThreadsNamed(QStringLiteral("benchStore")), 1);

    QElapsedTimer t;
    t.start();
    delete bench;
    const qint64 close_ms = t.elapsed();
    QVERIFY2(close_ms < 3000, qPrintable(QStringLiteral("closing took %1 ms").arg(close_ms)));
    // Both threads were joined: none is left running for the deleted panel.
    QTRY_COMPARE_WITH_TIMEOUT(ThreadsNamed(QStringLiteral("benchSweep")), 0, 1000);
    QTRY_COMPARE_WITH_TIMEOUT(ThreadsNamed(QStringLiteral("benchStore")), 0, 1000);
    QCOMPARE(finished.count(), 0);  // the panel was gone before the sweep ended
    QVERIFY(QTest::qWaitFor([&] { return server->in_flight() == 0; }, 5000));
    QTest::qWait(200);

    // The sweep ended before the panel was gone: its run is stored as
    // interrupted (the panel's cancel cut a request mid-stream: the run was
    // stopped, not failed), not left running.
    auto opened = app::BenchRunStore::Open(store.toStdString());
    QVERIFY2(opened.ok(), opened.status().ToString().c_str());
    auto runs = (*opened)->ListRuns(10);
    QVERIFY(runs.ok());
    QCOMPARE(runs->size(), size_t{1});
    QCOMPARE(runs->front().label, std::string("closed"));
    QCOMPARE(runs->front().state, std::string("interrupted"));
    QCOMPARE(runs->front().result_count, int64_t{0});
  }

  // Cancel pressed while a request streams: the request is cut, the sweep
  // ends at once, and the run is listed as interrupted (not failed).
  void benchCancelledMidRequest() {
    auto server = SlowServer(1000);
    ui::InstanceManager instances;
    ui::BenchPanel bench(&instances);
    QSignalSpy loaded(&bench, &ui::BenchPanel::runsLoaded);
    bench.setStorePath(dir_.path() + "/cancelled.sqlite");
    QVERIFY(loaded.wait(10'000));
    bench.setEndpoint(QString::fromStdString(server->url()));
    bench.setSweep(QStringLiteral("16"), QStringLiteral("400"), QStringLiteral("1"), 3,
                   QStringLiteral("cancelled"));
    QSignalSpy finished(&bench, &ui::BenchPanel::sweepFinished);
    QTest::mouseClick(bench.findChild<QPushButton*>(QStringLiteral("benchRun")), Qt::LeftButton);
    QVERIFY(QTest::qWaitFor([&] { return server->in_flight() == 1; }, 20'000));
    QTest::qWait(300);  // tokens are streaming
    QElapsedTimer t;
    t.start();
    QTest::mouseClick(bench.findChild<QPushButton*>(QStringLiteral("benchCancel")), Qt::LeftButton);
    QVERIFY(finished.wait(5000));
    QVERIFY2(t.elapsed() < 3000, qPrintable(QStringLiteral("%1 ms").arg(t.elapsed())));
    QCOMPARE(finished.first().first().toBool(), false);
    QVERIFY(!bench.running());
    auto* text = bench.findChild<QLabel*>(QStringLiteral("benchProgressText"));
    QVERIFY2(text->text().contains(QStringLiteral("interrupted")), qPrintable(text->text()));
    QVERIFY(QTest::qWaitFor(
        [&] { return !bench.runs().empty() && bench.runs().front().state == "interrupted"; },
        10'000));
    QCOMPARE(bench.runs().front().label, std::string("cancelled"));
    QVERIFY(QTest::qWaitFor([&] { return server->in_flight() == 0; }, 5000));
  }
};

QTEST_MAIN(TestPanelWorkers)
#include "test_panel_workers.moc"
