// installers/install-agent.sh and the systemd unit: into a scratch root, the
// programs, the token (0600), the TLS key (0600), the flags file and a unit
// that systemd-analyze accepts; bad arguments are refused with exit 2.
#include <sys/stat.h>

#include <QtTest>

#include "octet/agent/cluster_token.h"
#include "octet/base/file_util.h"
#include "octet_test.h"

using namespace octet;
using octet::test::RunProgram;

namespace {
unsigned Mode(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 0777;
}
}  // namespace

class TestAgentInstaller : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir dir_;
  std::string Script() { return test::SourceDir() + "/installers/install-agent.sh"; }
  std::string D() { return dir_.path().toStdString(); }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    QVERIFY(agent::WriteTokenFile(D() + "/token", "installer-test-token").ok());
    QVERIFY(WriteFileAtomic(D() + "/node.pem", "-----BEGIN CERTIFICATE-----\n").ok());
    QVERIFY(WriteFileAtomic(D() + "/node.key", "-----BEGIN PRIVATE KEY-----\n", 0600).ok());
  }

  void installsIntoARoot() {
    const std::string root = D() + "/root";
    auto r =
        RunProgram({"/bin/bash", Script(), "--token-file", D() + "/token", "--root", root, "--bin",
                    test::BinDir(), "--listen", "10.0.0.1:47100", "--tls-cert", D() + "/node.pem",
                    "--tls-key", D() + "/node.key", "--model-roots", "/srv/models"},
                   60'000);
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    QCOMPARE(Mode(root + "/usr/local/bin/octet-agent"), 0755u);
    QCOMPARE(Mode(root + "/usr/local/bin/octet"), 0755u);
    QCOMPARE(Mode(root + "/etc/octet"), 0700u);
    QCOMPARE(Mode(root + "/etc/octet/token"), 0600u);
    QCOMPARE(Mode(root + "/etc/octet/node.key"), 0600u);
    QCOMPARE(*ReadFileToString(root + "/etc/octet/token"), std::string("installer-test-token\n"));
    const std::string env = *ReadFileToString(root + "/etc/octet/agent.env");
    QVERIFY2(
        env.find("OCTET_AGENT_ARGS=\"--listen 10.0.0.1:47100 --model-roots /srv/models --tls-cert "
                 "/etc/octet/node.pem --tls-key /etc/octet/node.key\"") != std::string::npos,
        env.c_str());
    const std::string unit = *ReadFileToString(root + "/etc/systemd/system/octet-agent.service");
    QVERIFY(unit.find("ExecStart=/usr/local/bin/octet-agent --token-file /etc/octet/token") !=
            std::string::npos);
    QVERIFY(unit.find("@BINDIR@") == std::string::npos);
    QVERIFY(unit.find("WantedBy=multi-user.target") != std::string::npos);
    // The flags the unit passes are ones octet-agent accepts.
    auto help = RunProgram({root + "/usr/local/bin/octet-agent", "--help"}, 10'000);
    QCOMPARE(help.exit_code, 0);
    for (const char* flag :
         {"--token-file", "--state-dir", "--listen", "--model-roots", "--tls-cert", "--tls-key"}) {
      QVERIFY2(help.output.find(flag) != std::string::npos, flag);
    }
  }

  void unitPassesSystemdAnalyze() {
    const char* analyze = "/usr/bin/systemd-analyze";
    if (::access(analyze, X_OK) != 0) QSKIP("systemd-analyze not installed");
    // Verify a copy whose ExecStart points at the built program (the installed path is in a scratch
    // root).
    std::string unit =
        *ReadFileToString(test::SourceDir() + "/installers/systemd/octet-agent.service");
    QVERIFY(unit.find("@BINDIR@") != std::string::npos);
    for (size_t at; (at = unit.find("@BINDIR@")) != std::string::npos;)
      unit.replace(at, 8, test::BinDir());
    QVERIFY(WriteFileAtomic(D() + "/octet-agent.service", unit).ok());
    auto r = RunProgram({analyze, "verify", D() + "/octet-agent.service"}, 30'000);
    QVERIFY2(r.exit_code == 0 && r.output.find("octet-agent.service:") == std::string::npos,
             r.output.c_str());
  }

  void badArgumentsAreRefused() {
    struct Case {
      std::vector<std::string> args;
      const char* says;
    };
    const std::vector<Case> cases = {
        {{}, "--token-file is required"},
        {{"--token-file", D() + "/missing"}, "cannot read token file"},
        {{"--token-file", D() + "/token", "--tls-cert", D() + "/node.pem"}, "go together"},
        {{"--token-file", D() + "/token", "--listen", "nowhere"}, "ADDR:PORT"},
        {{"--token-file", D() + "/token", "--bin", D()}, "no octet-agent"},
        {{"--frobnicate"}, "unknown argument"},
    };
    for (const auto& c : cases) {
      std::vector<std::string> argv = {"/bin/bash", Script(), "--root", D() + "/never"};
      argv.insert(argv.end(), c.args.begin(), c.args.end());
      auto r = RunProgram(argv, 30'000);
      QVERIFY2(r.exit_code == 2, (std::string(c.says) + ": " + r.output).c_str());
      QVERIFY2(r.output.find(c.says) != std::string::npos, r.output.c_str());
    }
    QVERIFY(!PathExists(D() + "/never/etc/octet/token"));
  }
};

QTEST_GUILESS_MAIN(TestAgentInstaller)
#include "test_agent_installer.moc"
