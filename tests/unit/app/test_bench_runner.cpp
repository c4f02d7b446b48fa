// app::RunBenchmark against a real OpenAI-compatible server on loopback
// (tests/integration/router/openai_upstream.h): how a sweep that is stopped
// is recorded. A cancel while a request streams cuts that request, and the
// run must be stored "interrupted" (it was stopped, not broken) with the
// tests finished before it, never "failed" as a server error would be. And a
// server whose counts are not integers (a float past int64, a string): the
// counts are left out or refused with a message, never cast.
#include <httplib.h>

#include <QTemporaryDir>
#include <QtTest>
#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
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

  void countsThatAreNotIntegersAreNotCast() {
    // A hand-made server: every completion streams 4 text chunks, then a
    // usage chunk whose counts are a float past int64 and a string, and
    // timings whose drafted count is a fraction; /tokenize answers 1e70.
    httplib::Server srv;
    srv.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object":"list","data":[{"id":"odd","object":"model"}]})",
                      "application/json");
    });
    srv.Post("/tokenize", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"count":1e70})", "application/json");
    });
    srv.Post("/v1/completions", [](const httplib::Request&, httplib::Response& res) {
      res.set_chunked_content_provider("text/event-stream", [](size_t, httplib::DataSink& sink) {
        auto send = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
        for (int i = 0; i < 4; ++i) {  // 10 ms apart: a decode time to divide by
          if (i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
          if (!send("data: {\"choices\":[{\"index\":0,\"text\":\"a\"}]}\n\n")) return false;
        }
        send(R"(data: {"choices":[],"usage":{"completion_tokens":1e70,"prompt_tokens":"x"},)"
             R"("timings":{"drafted_tokens":2.5,"accepted_tokens":1}})"
             "\n\ndata: [DONE]\n\n");
        sink.done();
        return true;
      });
    });
    const int port = srv.bind_to_any_port("127.0.0.1");
    QVERIFY(port > 0);
    std::thread serve([&] { srv.listen_after_bind(); });
    struct Stop {
      httplib::Server& s;
      std::thread& t;
      ~Stop() {
        s.stop();
        t.join();
      }
    } stop{srv, serve};

    auto store = BenchRunStore::Open(tmp_.path().toStdString() + "/odd.sqlite");
    QVERIFY2(store.ok(), store.status().ToString().c_str());
    BenchConfig c;
    c.url = "http://127.0.0.1:" + std::to_string(port);
    c.pp = {16};
    c.tg = {4};
    c.runs = 1;
    c.warmup = false;
    auto run = RunBenchmark(c, store->get());
    QVERIFY2(run.ok(), run.status().ToString().c_str());
    QCOMPARE(run->results.size(), size_t{1});
    // The tokens counted from the stream (4), not the usage chunk's float: 3
    // tokens after the first in ~30 ms (a cast 1e70 made the count negative,
    // and no decode rate at all).
    const BenchResult& r = run->results[0];
    QCOMPARE(r.failed_requests, int64_t{0});
    QCOMPARE(r.tg_req_throughput.values.size(), size_t{1});
    const double tps = r.tg_req_throughput.values[0];
    QVERIFY2(tps > 3.0 / 5.0 && tps < 3.0 / 0.020, std::to_string(tps).c_str());
    // A fractional drafted count is left out, not taken as 2.
    QCOMPARE(r.drafted_tokens, int64_t{0});

    // Text prompts are sized with /tokenize: its float count is refused.
    c.prompt_mode = "text";
    auto text = RunBenchmark(c, store->get());
    QVERIFY(!text.ok());
    QVERIFY2(text.status().message().find("\"count\" that is not a count") != std::string::npos,
             text.status().ToString().c_str());
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
