// Stand-in test program for test_skip_verdict: one function of each kind a
// real test program has. test_skip_verdict runs it with a choice of functions
// and checks the exit code ctest will judge it by.
#include <QtTest>

#include "octet_test.h"

class SkipProbe : public QObject {
  Q_OBJECT
 private slots:
  void passes() { QVERIFY(true); }
  void fails() { QFAIL("this function fails on purpose"); }
  // A function that cannot run on this machine (say, a GPU is present, so a
  // fallback path is not taken): the program's verdict is its other functions'.
  void hardwareSkip() { QSKIP("this machine has the device, the fallback is not taken"); }
  // The program's premise is absent.
  void premiseAbsent() { OCTET_SKIP_PREMISE("no network namespaces here"); }
  void needsFixtures() {
    OCTET_REQUIRE_FIXTURES();
    QVERIFY(QFileInfo(QString::fromStdString(octet::test::FixturesDir())).isDir());
  }
};

QTEST_APPLESS_MAIN(SkipProbe)
#include "skip_probe.moc"
