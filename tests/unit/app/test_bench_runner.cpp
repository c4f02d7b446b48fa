// app::RunBenchmark against a real OpenAI-compatible server on loopback
// (tests/integration/router/openai_upstream.h): how a sweep that is stopped
// is recorded. A cancel while a request streams cuts that request, and the
// run must be stored "interrupted" (it was stopped, not broken) with the
// tests finished before it, never "failed" as a server error would be.
#include <QTemporaryDir>
#include <QtTest>
#include <atomic>
#include <chrono>
#include <thread>

#include "octet/app/bench_runner.h"
#include "octet/app/bench_store.h"
#include "openai_upstream.h"

using namespace octet;
using namespace octet::app;

namespace {

// Waits up to `ms` for `done`, polling (the sweep runs on another thread).
template <typename F>
bool WaitFor(F done, int ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

}  // namespace

class TestBenchRunner : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;

 private slots:
  void cancelMidRequestIsInterrupted() {
    test::UpstreamOptions o;
    o.name = "slow";
    o.tokens = 1000;
    o.token_interval_ms = 20;
    auto server = test::OpenAiUpstream::Start(o);
    QVERIFY2(server.ok(), server.status().ToString().c_str());
    auto store = BenchRunStore::Open(tmp_.path().toStdString() + "/runs.sqlite");
    QVERIFY2(store.ok(), store.status().ToString().c_str());

    // Two tests: tg 4 finishes in 80 ms; tg 1000 would stream for 20 s and
    // is cut by the cancel.
    BenchConfig c;
    c.url = (*server)->url();
    c.pp = {16};
    c.tg = {4, 1000};
    c.runs = 1;
    c.label = "cancelled";
    std::atomic<bool> cancel{false};
    std::atomic<int> tests_done{0};
    auto progress = [&](const BenchProgress& p) { tests_done = p.test_index; };
    Result<BenchRun> result = InvalidArgumentError("not run");
    std::thread sweep([&] { result = RunBenchmark(c, store->get(), progress, &cancel); });
    QVERIFY(WaitFor([&] { return tests_done.load() == 1; }, 20'000));
    QVERIFY(WaitFor([&] { return (*server)->in_flight() == 1; }, 10'000));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // tokens are streaming
    cancel = true;
    sweep.join();

    QVERIFY(!result.ok());
    QCOMPARE(result.status().code(), StatusCode::kCancelled);
    auto runs = (*store)->ListRuns();
    QVERIFY2(runs.ok(), runs.status().ToString().c_str());
    QCOMPARE(runs->size(), size_t{1});
    const BenchRun& run = runs->front();
    QCOMPARE(run.label, std::string("cancelled"));
    QCOMPARE(run.state, std::string("interrupted"));
    QCOMPARE(run.error, std::string("cancelled"));
    // The finished test is kept; the one cut mid-stream is not stored.
    auto full = (*store)->GetRun(run.id);
    QVERIFY2(full.ok(), full.status().ToString().c_str());
    QCOMPARE(full->results.size(), size_t{1});
    QCOMPARE(full->results[0].response_size, int64_t{4});
    QCOMPARE(full->results[0].failed_requests, int64_t{0});
  }

  void serverErrorIsFailed() {
    // The contrast: requests the server refuses make a failed run.
    test::UpstreamOptions o;
    auto server = test::OpenAiUpstream::Start(o);
    QVERIFY2(server.ok(), server.status().ToString().c_str());
    auto store = BenchRunStore::Open(tmp_.path().toStdString() + "/failed.sqlite");
    QVERIFY2(store.ok(), store.status().ToString().c_str());
    BenchConfig c;
    c.url = (*server)->url();
    c.pp = {16};
    c.tg = {4};
    c.runs = 1;
    c.warmup = false;
    (*server)->set_reject_status(503);
    auto result = RunBenchmark(c, store->get());
    QVERIFY(!result.ok());
    auto runs = (*store)->ListRuns();
    QVERIFY2(runs.ok(), runs.status().ToString().c_str());
    QCOMPARE(runs->size(), size_t{1});
    QCOMPARE(runs->front().state, std::string("failed"));
  }
};

QTEST_GUILESS_MAIN(TestBenchRunner)
#include "test_bench_runner.moc"
