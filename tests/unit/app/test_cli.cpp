// The `octet` program's top-level contract: --version, --help, unknown
// commands, and commands whose issue has not landed saying so.
#include <QtTest>

#include "octet_test.h"

using octet::test::RunProgram;

class TestCli : public QObject {
  Q_OBJECT
 private slots:
  void versionPrintsBuildLine() {
    auto r = RunProgram({"octet", "--version"});
    QCOMPARE(r.exit_code, 0);
    QVERIFY2(r.output.rfind("octet ", 0) == 0, r.output.c_str());
  }
  void helpListsEveryContractCommand() {
    auto r = RunProgram({"octet", "--help"});
    QCOMPARE(r.exit_code, 0);
    for (const char* c : {"generate", "chat", "tokenize", "serve", "plan", "collbench", "route", "train",
                          "bench", "cluster", "worker"}) {
      QVERIFY2(r.output.find(std::string("  ") + c + " ") != std::string::npos, c);
    }
  }
  void unknownCommandIsUsageError() {
    auto r = RunProgram({"octet", "frobnicate"});
    QCOMPARE(r.exit_code, 2);
    QVERIFY(r.output.find("unknown command 'frobnicate'") != std::string::npos);
  }
};

QTEST_APPLESS_MAIN(TestCli)
#include "test_cli.moc"
