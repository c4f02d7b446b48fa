// Fail-stop: a rank killed (SIGKILL) or frozen (SIGSTOP) in the middle of a
// run of all-reduces gives every surviving rank an error that names it, the
// survivors' communicators end up poisoned, and nobody hangs or returns a
// wrong sum. Ranks are separate processes (this executable in --rank-worker
// loop mode).
#include <QtTest>

#include <signal.h>

#include "octet/base/file_util.h"
#include "rank_group.h"
#include "rank_threads.h"
#include "rank_worker.h"

using namespace octet;
using namespace octet::collectives;
using namespace octet::collectives::test;

namespace {
constexpr int kRanks = 4;
constexpr int kVictim = 2;
constexpr int kPeerTimeoutMs = 2000;
}  // namespace

class TestFailure : public QObject {
  Q_OBJECT
 private:
  void Start(RankGroup& g, const char* transport, const char* algo) {
    auto exe = SelfExecutablePath();
    QVERIFY(exe.ok());
    auto listener = LocalRendezvous::Open();
    QVERIFY2(listener.ok(), listener.status().ToString().c_str());
    const std::string rendezvous = listener->address();
    std::vector<std::vector<std::string>> argvs;
    for (int r = 0; r < kRanks; ++r) {
      argvs.push_back(RankWorkerArgv(*exe, "loop", rendezvous, kRanks, r,
                                     {"--transport", transport, "--algo", algo, "--count", "8192",
                                      "--timeout-ms", std::to_string(kPeerTimeoutMs)}));
    }
    QVERIFY(g.Start(argvs, &*listener).ok());
    QVERIFY2(g.WaitForText("READY", 60'000), g.AllOutput().c_str());
  }

  // Every survivor exits with the error naming the victim; `expect` is a
  // phrase of that error.
  void ExpectSurvivorsBlameVictim(RankGroup& g, const std::string& expect) {
    // Generous bound: the failure must surface within the peer timeout; the
    // rest is slack for a loaded CI machine. It only catches hangs.
    const Deadline deadline = Deadline::AfterMs(kPeerTimeoutMs + 30'000);
    for (int r = 0; r < kRanks; ++r) {
      if (r == kVictim) continue;
      bool timed_out = false;
      const ExitStatus e = g.Wait(r, deadline, &timed_out);
      const std::string out = g.Output(r);
      QVERIFY2(!timed_out, ("rank " + std::to_string(r) + " hung\n" + g.AllOutput()).c_str());
      QVERIFY2(out.find("WRONG") == std::string::npos, out.c_str());
      QVERIFY2(out.find("NOT_POISONED") == std::string::npos, out.c_str());
      QVERIFY2(e.exited && e.code == 3, (e.ToString() + "\n" + out).c_str());
      QVERIFY2(out.find("rank " + std::to_string(kVictim) + " (pid") != std::string::npos,
               out.c_str());
      QVERIFY2(out.find(expect) != std::string::npos, out.c_str());
      QVERIFY2(out.find("FAILED_PEER " + std::to_string(kVictim)) != std::string::npos,
               out.c_str());
    }
  }

 private slots:
  void killedRankIsNamed_data() {
    QTest::addColumn<QString>("transport");
    QTest::addColumn<QString>("algo");
    for (const char* t : {"shm", "tcp"}) {
      for (const char* a : {"oneshot", "ring"}) QTest::addRow("%s %s", t, a) << t << a;
    }
  }
  void killedRankIsNamed() {
    QFETCH(QString, transport);
    QFETCH(QString, algo);
    RankGroup g;
    Start(g, transport.toUtf8().constData(), algo.toUtf8().constData());
    if (QTest::currentTestFailed()) return;
    g.Kill(kVictim, SIGKILL);
    ExpectSurvivorsBlameVictim(g, "died");
  }

  void silentRankIsNamedAfterTheDeadline_data() {
    QTest::addColumn<QString>("transport");
    QTest::addColumn<QString>("algo");
    QTest::addRow("shm oneshot") << "shm" << "oneshot";
    QTest::addRow("shm ring") << "shm" << "ring";
    QTest::addRow("tcp ring") << "tcp" << "ring";
  }
  void silentRankIsNamedAfterTheDeadline() {
    QFETCH(QString, transport);
    QFETCH(QString, algo);
    RankGroup g;
    Start(g, transport.toUtf8().constData(), algo.toUtf8().constData());
    if (QTest::currentTestFailed()) return;
    g.Kill(kVictim, SIGSTOP);  // alive (connections open) but silent
    ExpectSurvivorsBlameVictim(g, "did not respond within " + std::to_string(kPeerTimeoutMs));
    g.Kill(kVictim, SIGKILL);
  }
};

OCTET_QTEST_MAIN_WITH_RANK_WORKER(TestFailure)
#include "test_failure.moc"
