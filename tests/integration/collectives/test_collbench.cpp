// `octet collbench` as a user runs it (docs/CLI.md): --help, usage errors
// with exit 2 and a one-line reason, a spawned run whose --json document has
// one row per size with zero wrong elements, NCCL falling back cleanly
// without a GPU, and a job joined rank by rank with --rendezvous/--rank.
#include <QtTest>
#include <thread>

#include "octet/base/json.h"
#include "octet/collectives/local_rendezvous.h"
#include "octet_test.h"
#include "rank_threads.h"

using octet::test::RunProgram;

namespace {
nlohmann::json ParseJson(const std::string& out) {
  // stdout and stderr are merged: the document is the line starting with '{'.
  size_t at = 0;
  while (at < out.size()) {
    const size_t end = out.find('\n', at);
    const std::string line =
        out.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (!line.empty() && line.front() == '{') return nlohmann::json::parse(line, nullptr, false);
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return nlohmann::json::value_t::discarded;
}
}  // namespace

class TestCollbench : public QObject {
  Q_OBJECT
 private slots:
  void helpListsTheContractFlags() {
    auto r = RunProgram({"octet", "collbench", "--help"});
    QCOMPARE(r.exit_code, 0);
    for (const char* f :
         {"--ranks", "--transport", "--algo", "--op", "--dtype", "--min-bytes", "--max-bytes",
          "--factor", "--iters", "--warmup", "--check", "--json", "--rendezvous", "--rank"}) {
      QVERIFY2(r.output.find(f) != std::string::npos, f);
    }
  }

  void badInputIsAUsageError_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("reason");
    QTest::newRow("unknown flag") << QStringList{"--frobnicate"} << "--frobnicate";
    QTest::newRow("bad transport")
        << QStringList{"--transport", "carrier-pigeon"} << "carrier-pigeon";
    QTest::newRow("bad op") << QStringList{"--op", "all_to_all"} << "all_to_all";
    QTest::newRow("bad dtype") << QStringList{"--dtype", "f64"} << "f64";
    QTest::newRow("bad size") << QStringList{"--max-bytes", "lots"} << "lots";
    QTest::newRow("min over max") << QStringList{"--min-bytes", "1M", "--max-bytes", "1K"}
                                  << "--min-bytes";
    QTest::newRow("rank without rendezvous") << QStringList{"--rank", "1"} << "--rendezvous";
    QTest::newRow("rank out of range")
        << QStringList{"--rendezvous", "127.0.0.1:1", "--rank", "5"} << "--rank";
  }
  void badInputIsAUsageError() {
    QFETCH(QStringList, args);
    QFETCH(QString, reason);
    std::vector<std::string> argv = {"octet", "collbench"};
    for (const QString& a : args) argv.push_back(a.toStdString());
    auto r = RunProgram(argv);
    QCOMPARE(r.exit_code, 2);
    QVERIFY2(r.output.find(reason.toStdString()) != std::string::npos, r.output.c_str());
    QCOMPARE(std::count(r.output.begin(), r.output.end(), '\n'), 1);  // one line
  }

  void spawnedRunPrintsRowsWithNothingWrong_data() {
    QTest::addColumn<QString>("op");
    QTest::addColumn<QString>("transport");
    QTest::addColumn<QString>("algo");
    QTest::newRow("all_reduce shm auto") << "all_reduce"
                                         << "shm"
                                         << "auto";
    QTest::newRow("all_reduce tcp ring") << "all_reduce"
                                         << "tcp"
                                         << "ring";
    QTest::newRow("all_gather shm oneshot") << "all_gather"
                                            << "shm"
                                            << "oneshot";
    QTest::newRow("reduce_scatter tcp auto") << "reduce_scatter"
                                             << "tcp"
                                             << "auto";
  }
  void spawnedRunPrintsRowsWithNothingWrong() {
    QFETCH(QString, op);
    QFETCH(QString, transport);
    QFETCH(QString, algo);
    auto r = RunProgram({"octet",       "collbench",
                         "--ranks",     "3",
                         "--transport", transport.toStdString(),
                         "--algo",      algo.toStdString(),
                         "--op",        op.toStdString(),
                         "--dtype",     "bf16",
                         "--min-bytes", "8",
                         "--max-bytes", "256K",
                         "--factor",    "4",
                         "--iters",     "5",
                         "--warmup",    "1",
                         "--check",     "--json"},
                        120'000);
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    const nlohmann::json doc = ParseJson(r.output);
    QVERIFY2(!doc.is_discarded(), r.output.c_str());
    QCOMPARE(doc["op"].get<std::string>(), op.toStdString());
    QCOMPARE(doc["transport"].get<std::string>(), transport.toStdString());
    QCOMPARE(doc["ranks"].get<int>(), 3);
    QCOMPARE(doc["wrong"].get<int64_t>(), 0);
    const auto& rows = doc["rows"];
    QVERIFY(rows.size() >= 6);
    const int n = 3;
    for (const auto& row : rows) {
      QCOMPARE(row["wrong"].get<int64_t>(), 0);
      const double p50 = row["time_us_p50"], p99 = row["time_us_p99"];
      QVERIFY(p50 > 0 && p99 >= p50);
      // algbw = bytes / p50; busbw follows nccl-tests' factors.
      const double algbw = row["algbw_gbps"], busbw = row["busbw_gbps"];
      QVERIFY(std::fabs(algbw - row["bytes"].get<double>() / (p50 * 1e3)) <= 1e-9 + algbw * 1e-9);
      const double factor = op == "all_reduce" ? 2.0 * (n - 1) / n : double(n - 1) / n;
      QVERIFY(std::fabs(busbw - algbw * factor) <= 1e-12 + busbw * 1e-9);
      if (op != "all_reduce") QCOMPARE(row["bytes"].get<int64_t>() % (2 * n), 0);
    }
  }

  void ncclWithoutGpuFallsBackAndSaysSo() {
    auto r = RunProgram({"octet", "collbench", "--ranks", "2", "--algo", "nccl", "--max-bytes",
                         "1K", "--iters", "2", "--warmup", "0", "--check", "--json"},
                        60'000);
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    const nlohmann::json doc = ParseJson(r.output);
    QVERIFY2(!doc.is_discarded(), r.output.c_str());
    if (doc["transport"] == "nccl")
      QSKIP("this machine has a usable GPU: the fallback path is not taken");
    QCOMPARE(doc["requested_transport"].get<std::string>(), std::string("nccl"));
    QVERIFY(doc["fallback_reason"].get<std::string>().find("nccl unavailable") == 0);
    QCOMPARE(doc["wrong"].get<int64_t>(), 0);
  }

  void joinedRanksFormOneJob() {
    // Bound before either rank starts; rank 0 inherits it (both inherit
    // this process's descriptors, only rank 0 is told).
    auto listener = octet::collectives::LocalRendezvous::Open();
    QVERIFY2(listener.ok(), listener.status().ToString().c_str());
    const std::string rv = listener->address();
    octet::test::CommandResult r0, r1;
    std::thread t([&] {
      r1 = RunProgram({"octet", "collbench", "--ranks", "2", "--rendezvous", rv, "--rank", "1",
                       "--max-bytes", "4K", "--iters", "3", "--check"},
                      60'000);
    });
    r0 = RunProgram({"octet", "collbench", "--ranks", "2", "--rendezvous", rv, "--rank", "0",
                     "--max-bytes", "4K", "--iters", "3", "--check"},
                    60'000, {octet::collectives::LocalRendezvous::EnvFor({&*listener})});
    t.join();
    QVERIFY2(r0.exit_code == 0 && r1.exit_code == 0, (r0.output + r1.output).c_str());
    // Rank 0 prints the table, nccl-tests style; rank 1 prints no rows.
    QVERIFY2(r0.output.find("#wrong") != std::string::npos, r0.output.c_str());
    QVERIFY2(r0.output.find("    4096 ") != std::string::npos, r0.output.c_str());
    QVERIFY2(r1.output.find("4096") == std::string::npos, r1.output.c_str());
  }

  void missingPeerFailsTheRunWithAReason() {
    // A joined rank whose rank 0 never shows up gives up at the connect
    // deadline with a reason instead of hanging.
    auto r = RunProgram({"octet", "collbench", "--ranks", "2", "--rendezvous",
                         octet::collectives::test::LoopbackRendezvous(), "--rank", "1",
                         "--connect-timeout-ms", "500"},
                        120'000);
    QCOMPARE(r.exit_code, 1);
    QVERIFY2(r.output.find("rendezvous") != std::string::npos, r.output.c_str());
  }
};

QTEST_APPLESS_MAIN(TestCollbench)
#include "test_collbench.moc"
