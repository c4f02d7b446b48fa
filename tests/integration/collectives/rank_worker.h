// One rank process of a collectives integration test. Each test executable
// doubles as its own rank worker: started as `<test> --rank-worker MODE ...`
// it runs RankWorkerMain instead of the Qt tests, so the test spawns copies
// of itself (SelfExecutablePath) as ranks.
//
// Modes:
//   conformance  every algorithm x transport x dtype x op x size, checked
//                against the reference sum; prints one "OK ..." line per
//                transport and algorithm, or "FAIL ..." and exits 1.
//   loop         all-reduces in a loop, each result checked, until an error:
//                prints "READY" after the first ones, then the error as
//                "ERROR <code>: <message>" and exits 3 (a wrong sum exits 4).
#pragma once

#include <string>
#include <vector>

#include "octet_test.h"  // ProgramVerdict: the exit code of a skipped premise

namespace octet::collectives::test {

inline constexpr const char* kRankWorkerFlag = "--rank-worker";

int RankWorkerMain(int argc, char** argv);

// argv for one rank: {exe, --rank-worker, mode, --rendezvous R, --ranks N,
// --rank r, extra...}.
std::vector<std::string> RankWorkerArgv(const std::string& exe, const std::string& mode,
                                        const std::string& rendezvous, int ranks, int rank,
                                        const std::vector<std::string>& extra);

}  // namespace octet::collectives::test

// Puts the rank-worker dispatch in front of a Qt Test main.
#define OCTET_QTEST_MAIN_WITH_RANK_WORKER(TestClass)                                       \
  int main(int argc, char** argv) {                                                        \
    if (argc > 1 && std::string(argv[1]) == ::octet::collectives::test::kRankWorkerFlag) { \
      return ::octet::collectives::test::RankWorkerMain(argc, argv);                       \
    }                                                                                      \
    TestClass tc;                                                                          \
    QTEST_SET_MAIN_SOURCE_PATH                                                             \
    return ::octet::test::ProgramVerdict(QTest::qExec(&tc, argc, argv));                   \
  }
