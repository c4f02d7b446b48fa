// The `octet` program's top-level contract: --version, --help, unknown
// commands, and commands whose issue has not landed saying so.
#include <QtTest>
#include <regex>
#include <sstream>

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
  // Every command and subcommand octet lists (`octet help --commands`, its
  // own table): an unknown flag and a flag left without its value are usage
  // errors (exit 2) with a message on stderr that names the flag and the
  // program once. The value-taking flags come from each command's --help.
  void everyCommandRefusesBadFlags() {
    auto listed = RunProgram({"octet", "help", "--commands"});
    QCOMPARE(listed.exit_code, 0);
    std::vector<std::vector<std::string>> commands;
    std::istringstream lines(listed.output);
    for (std::string line; std::getline(lines, line);) {
      std::istringstream words(line);
      std::vector<std::string> w;
      for (std::string x; words >> x;) w.push_back(x);
      if (!w.empty()) commands.push_back(w);
    }
    // Every command of octet --help, and the subcommands CLI.md names.
    QVERIFY2(commands.size() >= 25, listed.output.c_str());
    for (const char* must : {"cluster status", "cluster local", "deploy check", "bench list",
                             "models rm", "route plan", "train prepare", "worker", "chat"}) {
      QVERIFY2(listed.output.find(std::string(must) + "\n") != std::string::npos, must);
    }
    const std::string octet = octet::test::BinDir() + "/octet";
    // stderr only: stdout goes to /dev/null.
    auto stderr_of = [&](const std::vector<std::string>& words) {
      std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1 >/dev/null",
                                       octet};
      argv.insert(argv.end(), words.begin(), words.end());
      return RunProgram(argv, 60'000);
    };
    const std::regex doubled("(octet[a-z -]*: ).*\\1");
    const std::regex value_option("^  --([a-z0-9-]+) [^ ]");
    std::vector<std::string> failures;
    int checked = 0;
    auto check = [&](std::vector<std::string> words, const std::string& flag) {
      std::string line = "octet";
      for (const auto& a : words) line += " " + a;
      auto r = stderr_of(words);
      ++checked;
      if (r.exit_code != 2 || r.output.find(flag) == std::string::npos ||
          std::regex_search(r.output, doubled)) {
        failures.push_back(line + " -> exit " + std::to_string(r.exit_code) + ": " + r.output);
      }
    };
    for (const auto& cmd : commands) {
      auto words = cmd;
      words.push_back("--no-such-flag-here");
      check(words, "--no-such-flag-here");
      std::vector<std::string> help = {"octet"};
      help.insert(help.end(), cmd.begin(), cmd.end());
      help.push_back("--help");
      auto h = RunProgram(help);
      if (h.exit_code != 0) {
        failures.push_back(cmd.front() + " ... --help exits " + std::to_string(h.exit_code));
        continue;
      }
      std::istringstream usage(h.output);
      for (std::string line; std::getline(usage, line);) {
        std::smatch m;
        if (!std::regex_search(line, m, value_option)) continue;
        auto missing = cmd;
        missing.push_back("--" + m[1].str());
        check(missing, "--" + m[1].str());
      }
    }
    qInfo("checked %d command lines", checked);
    std::string all;
    for (const auto& f : failures) all += f + "\n";
    QVERIFY2(failures.empty(), all.c_str());
  }
};

QTEST_APPLESS_MAIN(TestCli)
#include "test_cli.moc"
