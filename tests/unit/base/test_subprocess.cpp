#include <QtTest>

#include <signal.h>

#include <mutex>

#include "octet/base/subprocess.h"

using namespace octet;

class TestSubprocess : public QObject {
  Q_OBJECT
 private slots:
  void capturesOutputAndExitCode() {
    std::string out;
    std::mutex mu;
    SpawnOptions o;
    o.argv = {"sh", "-c", "echo hello; echo err >&2; exit 3"};
    o.on_output = [&](std::string_view c) {
      std::lock_guard<std::mutex> l(mu);
      out.append(c);
    };
    auto p = Subprocess::Spawn(o);
    QVERIFY(p.ok());
    auto st = (*p)->Wait(Deadline::AfterMs(10'000));
    QVERIFY(st.ok());
    QVERIFY(st->exited);
    QCOMPARE(st->code, 3);
    QVERIFY(out.find("hello") != std::string::npos);
    QVERIFY(out.find("err") != std::string::npos);
  }
  void missingProgramIsAnError() {
    SpawnOptions o;
    o.argv = {"/nonexistent/octet-nothing"};
    auto p = Subprocess::Spawn(o);
    QVERIFY(!p.ok());
    QVERIFY(p.status().message().find("octet-nothing") != std::string::npos);
  }
  void waitHasADeadlineAndKillEnds() {
    SpawnOptions o;
    o.argv = {"sleep", "30"};
    auto p = Subprocess::Spawn(o);
    QVERIFY(p.ok());
    QElapsedTimer t;
    t.start();
    auto st = (*p)->Wait(Deadline::AfterMs(100));
    QCOMPARE(st.status().code(), StatusCode::kDeadlineExceeded);
    QVERIFY(t.elapsed() < 5000);
    (*p)->Kill(SIGKILL);
    auto st2 = (*p)->Wait(Deadline::AfterMs(5000));
    QVERIFY(st2.ok());
    QVERIFY(!st2->exited);
    QCOMPARE(st2->signal, SIGKILL);
  }
  void grandchildHoldingThePipeDoesNotBlockWait() {
    SpawnOptions o;
    o.argv = {"sh", "-c", "sleep 20 & echo started"};
    o.new_process_group = false;  // the grandchild outlives the group kill
    o.on_output = [](std::string_view) {};
    auto p = Subprocess::Spawn(o);
    QVERIFY(p.ok());
    QElapsedTimer t;
    t.start();
    auto st = (*p)->Wait(Deadline::AfterMs(10'000));
    QVERIFY(st.ok());
    QVERIFY(t.elapsed() < 5000);
  }
  void environmentIsPassed() {
    std::string out;
    SpawnOptions o;
    o.argv = {"sh", "-c", "echo $OCTET_TEST_VALUE"};
    o.env = {"OCTET_TEST_VALUE=seven"};
    o.on_output = [&](std::string_view c) { out.append(c); };
    auto p = Subprocess::Spawn(o);
    QVERIFY(p.ok());
    QVERIFY((*p)->Wait(Deadline::AfterMs(10'000)).ok());
    QCOMPARE(out, std::string("seven\n"));
  }
};

QTEST_APPLESS_MAIN(TestSubprocess)
#include "test_subprocess.moc"
