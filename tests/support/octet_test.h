// Helpers shared by Octet's Qt Test suites.
//
// Paths come from the environment ctest sets (octet_add_test): the fixtures
// folder (OCTET_FIXTURES_DIR), the programs (OCTET_BIN_DIR) and the source tree
// (OCTET_SOURCE_DIR). Tests that need the fixtures call OCTET_REQUIRE_FIXTURES,
// which skips with "skipped: fixtures not found" on a clone without them.
#pragma once

#include <QtTest>

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

}  // namespace octet::test

#define OCTET_REQUIRE_FIXTURES()                                         \
  do {                                                                   \
    if (!::octet::test::FixturesPresent()) QSKIP("skipped: fixtures not found"); \
  } while (0)
