// The `octet` program's top-level contract: --version, --help, unknown
// commands, and commands whose issue has not landed saying so.
#include <QtTest>
#include <regex>

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
  void didYouMean() {
    auto r = RunProgram({"octet", "serv"});
    QCOMPARE(r.exit_code, 2);
    QVERIFY2(r.output.find("did you mean 'serve'?") != std::string::npos, r.output.c_str());
    r = RunProgram({"octet", "generate", "--modle", "/nonexistent"});
    QCOMPARE(r.exit_code, 2);
    QVERIFY2(r.output.find("did you mean --model?") != std::string::npos, r.output.c_str());
    r = RunProgram({"octet", "serve", "--prot", "8000"});
    QCOMPARE(r.exit_code, 2);
    QVERIFY2(r.output.find("did you mean --port?") != std::string::npos, r.output.c_str());
  }
  // serve and route: malformed values are usage errors (exit 2) before
  // anything loads, and the program is named once.
  void usageErrorsExitTwoWithOnePrefix() {
    const std::regex doubled("(octet [a-z-]+: )\\1|octet: octet");
    const std::vector<std::vector<std::string>> cases = {
        {"octet", "serve", "--no-such-flag-here"},
        {"octet", "route", "--no-such-flag-here"},
        {"octet", "serve", "--model", "/nonexistent", "--port", "eighty"},
        {"octet", "serve", "--model", "/nonexistent", "--port", "99999"},
        {"octet", "serve", "--model", "/nonexistent", "--api-key", "a", "--api-key-file",
         "/dev/null"},
        {"octet", "serve", "--model", "/nonexistent", "--api-key-health"},
        {"octet", "route", "--policy", "/nonexistent.yaml", "--port", "99999"},
        {"octet", "route", "--policy", "/nonexistent.yaml", "--api-key", "a b"},
    };
    for (const auto& argv : cases) {
      std::string line;
      for (const auto& a : argv) line += a + " ";
      auto r = RunProgram(argv, 60'000);
      QVERIFY2(r.exit_code == 2,
               (line + "-> exit " + std::to_string(r.exit_code) + ": " + r.output).c_str());
      QVERIFY2(!std::regex_search(r.output, doubled), (line + "-> " + r.output).c_str());
    }
  }
};

QTEST_APPLESS_MAIN(TestCli)
#include "test_cli.moc"
