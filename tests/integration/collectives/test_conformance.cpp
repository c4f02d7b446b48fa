// The conformance test of the collectives: every algorithm (one-shot, ring,
// auto) x transport (shm, tcp; verbs where a device exists) x dtype (f32,
// bf16, f16) x op (all-reduce in and out of place, all-gather,
// reduce-scatter, broadcast, send/recv, barrier) against the reference sum,
// with 2, 3, 4 and 8 ranks as separate processes, sizes from 1 element to
// 3 MiB including counts the world size does not divide. Each world size is
// its own ctest entry (test_collectives_conformance_N runs slot conformanceN).
#include <QtTest>

#include "octet/base/file_util.h"
#include "rank_group.h"
#include "rank_threads.h"
#include "rank_worker.h"

using namespace octet;
using namespace octet::collectives::test;

class TestConformance : public QObject {
  Q_OBJECT
 private:
  void Run(int ranks) {
    auto exe = SelfExecutablePath();
    QVERIFY(exe.ok());
    auto listener = collectives::LocalRendezvous::Open();
    QVERIFY2(listener.ok(), listener.status().ToString().c_str());
    const std::string rendezvous = listener->address();
    std::vector<std::vector<std::string>> argvs;
    for (int r = 0; r < ranks; ++r) {
      argvs.push_back(RankWorkerArgv(*exe, "conformance", rendezvous, ranks, r,
                                     {"--transports", "shm,tcp,verbs"}));
    }
    RankGroup g;
    QVERIFY(g.Start(argvs, &*listener).ok());
    const Deadline deadline = Deadline::AfterMs(280'000);
    bool timed_out = false;
    std::vector<ExitStatus> exits;
    for (int r = 0; r < ranks; ++r) exits.push_back(g.Wait(r, deadline, &timed_out));
    const std::string out = g.AllOutput();
    QVERIFY2(!timed_out, ("a rank did not finish in time\n" + out).c_str());
    for (int r = 0; r < ranks; ++r) {
      QVERIFY2(exits[r].success(), ("rank " + std::to_string(r) + ": " + exits[r].ToString() +
                                    "\n" + out).c_str());
    }
    // Each rank reports every transport x algorithm it ran (verbs may be
    // skipped on a machine without an RDMA device, and says why).
    const std::string rank0 = g.Output(0);
    for (const char* t : {"shm", "tcp"}) {
      for (const char* a : {"oneshot", "ring", "auto"}) {
        QVERIFY2(rank0.find(std::string("OK ") + t + " " + a + ":") != std::string::npos,
                 rank0.c_str());
      }
    }
    QVERIFY2(rank0.find("OK verbs") != std::string::npos ||
                 rank0.find("SKIP verbs: ") != std::string::npos,
             rank0.c_str());
    qInfo("%s", rank0.c_str());
  }

 private slots:
  void conformance2() { Run(2); }
  void conformance3() { Run(3); }
  void conformance4() { Run(4); }
  void conformance8() { Run(8); }
};

OCTET_QTEST_MAIN_WITH_RANK_WORKER(TestConformance)
#include "test_conformance.moc"
