// Helpers shared by Octet's Qt Test suites.
//
// Paths come from the environment ctest sets (octet_add_test): the fixtures
// folder (OCTET_FIXTURES_DIR), the programs (OCTET_BIN_DIR) and the source tree
// (OCTET_SOURCE_DIR).
//
// Skips. A program is reported skipped to ctest only through its exit code
// (kSkipExitCode, the tests' SKIP_RETURN_CODE), and only when the premise of
// what it tests is absent: the fixtures on a clone without them
// (OCTET_REQUIRE_FIXTURES), root or network namespaces for multi-host tests
// (OCTET_SKIP_PREMISE). Such a skip is remembered, and a program in which
// nothing failed then exits with kSkipExitCode instead of 0; a failure
// anywhere in the program still fails it. A function that cannot run on this
// machine while the rest of the program can (a GPU or an RDMA device present,
// a tool missing) uses plain QSKIP: it shows as skipped in the program's
// output and leaves the program's verdict to its other functions. Including
// this header after <QtTest> is what gives QTEST_MAIN and its siblings this
// behaviour.
#pragma once

#include <QFile>
#include <QtTest>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "octet/base/deadline.h"
#include "octet/base/subprocess.h"

namespace octet::test {

inline std::string Env(const char* name, const char* fallback = "") {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}
inline std::string FixturesDir() { return Env("OCTET_FIXTURES_DIR"); }
inline std::string BinDir() { return Env("OCTET_BIN_DIR"); }
inline std::string SourceDir() { return Env("OCTET_SOURCE_DIR"); }
// Writes `path`: an executable stand-in for `octet` that holds `octet worker`
// (a job's rank) for five minutes before it runs it, ended at once by SIGTERM
// or SIGINT, and runs any other command as this build's octet. A replica
// started through it stays "starting": for tests of what happens while an
// apply waits for it. False when the file cannot be written.
inline bool WriteHeldWorkerOctet(const std::string& path) {
  QFile f(QString::fromStdString(path));
  if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate)) return false;
  const std::string script =
      "#!/bin/sh\n"
      "if [ \"$1\" = worker ]; then\n"
      "  sleep 300 & s=$!\n"
      "  trap 'kill $s; exit 143' TERM INT\n"
      "  wait $s\n"
      "fi\n"
      "exec '" +
      BinDir() + "/octet' \"$@\"\n";
  const bool written = f.write(script.data(), static_cast<qint64>(script.size())) ==
                       static_cast<qint64>(script.size());
  f.close();
  return written && f.setPermissions(QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
}
// The flags of tests/unit/agent/fake_worker.cpp, the stand-in for `octet` in
// agent tests: an agent running it is told to allow them (--octet-bin-flags).
inline const std::vector<std::string>& FakeWorkerFlags() {
  static const std::vector<std::string> flags = {"fake-lines",       "fake-error", "fake-figures",
                                                 "fake-ignore-term", "fake-sleep", "fake-wait-ms",
                                                 "fake-exit"};
  return flags;
}

inline bool FixturesPresent() {
  const std::string d = FixturesDir();
  return !d.empty() && QFileInfo(QString::fromStdString(d + "/README.md")).exists();
}

struct CommandResult {
  int exit_code = -1;       // -signal when killed
  std::string output;       // stdout and stderr, merged
  bool timed_out = false;
};

// Runs a program (argv[0] relative to OCTET_BIN_DIR unless absolute) with a
// deadline; the child is killed if it overruns.
inline CommandResult RunProgram(std::vector<std::string> argv, int timeout_ms = 60'000,
                                std::vector<std::string> env = {}) {
  CommandResult r;
  if (!argv.empty() && argv[0].find('/') == std::string::npos) argv[0] = BinDir() + "/" + argv[0];
  auto out = std::make_shared<std::string>();
  auto mu = std::make_shared<std::mutex>();
  SpawnOptions o;
  o.argv = argv;
  o.env = std::move(env);
  o.on_output = [out, mu](std::string_view chunk) {
    std::lock_guard<std::mutex> lock(*mu);
    out->append(chunk);
  };
  auto p = Subprocess::Spawn(o);
  if (!p.ok()) {
    r.output = p.status().ToString();
    return r;
  }
  auto st = (*p)->Wait(Deadline::AfterMs(timeout_ms));
  if (!st.ok()) {
    r.timed_out = true;
    (*p)->Terminate(std::chrono::milliseconds(500));
  } else {
    r.exit_code = st->exited ? st->code : -st->signal;
  }
  std::lock_guard<std::mutex> lock(*mu);
  r.output = *out;
  return r;
}

// The exit code ctest reads as "skipped" (octet_add_test sets SKIP_RETURN_CODE).
inline constexpr int kSkipExitCode = 77;

// Set by OCTET_SKIP_PREMISE: the program's premise is absent on this machine.
inline bool& PremiseAbsent() {
  static bool absent = false;
  return absent;
}

// What a test program returns, given Qt Test's result (the number of failed
// functions, or -1 for a usage error).
inline int ProgramVerdict(int qt_result) {
  if (qt_result == 0 && PremiseAbsent()) {
    std::fprintf(stderr, "octet test: premise absent on this machine, exit %d (skipped)\n",
                 kSkipExitCode);
    return kSkipExitCode;
  }
  return qt_result;
}

}  // namespace octet::test

// Skips the current function because the program's premise is absent; the
// program then exits with kSkipExitCode unless something else failed.
#define OCTET_SKIP_PREMISE(why)            \
  do {                                     \
    ::octet::test::PremiseAbsent() = true; \
    QSKIP(why);                            \
  } while (0)

#define OCTET_REQUIRE_FIXTURES()                                                      \
  do {                                                                                \
    if (!::octet::test::FixturesPresent())                                            \
      OCTET_SKIP_PREMISE("fixtures not found (OCTET_FIXTURES_DIR has no README.md)"); \
  } while (0)

// QTEST_MAIN, QTEST_GUILESS_MAIN and QTEST_APPLESS_MAIN all expand this
// wrapper; Octet's version passes Qt Test's result through ProgramVerdict.
#undef QTEST_MAIN_WRAPPER
#define QTEST_MAIN_WRAPPER(TestObject, ...)                            \
  static int OctetRunQtTest(int argc, char* argv[]) {                  \
    TESTLIB_SELFCOVERAGE_START(#TestObject)                            \
    QT_PREPEND_NAMESPACE(QTest::Internal::callInitMain)<TestObject>(); \
    __VA_ARGS__                                                        \
    TestObject tc;                                                     \
    QTEST_SET_MAIN_SOURCE_PATH                                         \
    return QTest::qExec(&tc, argc, argv);                              \
  }                                                                    \
  int main(int argc, char* argv[]) {                                   \
    return ::octet::test::ProgramVerdict(OctetRunQtTest(argc, argv));  \
  }
