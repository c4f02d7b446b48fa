// The OpenAI server in this process (fixture qwen3-tiny, token-id prompts) as
// operators and untrusted clients meet it, over raw sockets: API keys (401
// with an OpenAI error body; /health open unless asked), a busy port
// refused, x-request-id echoed or made up, /v1/models/{id}, a real
// "created"; /metrics histograms that count what was sent; and the HTTP
// front end under abuse: 100 slowloris connections while /health keeps
// answering, pipelined requests all answered in order, 200 concurrent
// streams all answered, two Content-Length headers refused, an oversized
// body refused (413) before it is sent.
#include <QtTest>
#include <atomic>
#include <thread>

#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/engine/completion.h"
#include "octet/engine/model.h"
#include "octet/engine/model_runner.h"
#include "octet/engine/openai_server.h"
#include "octet/engine/scheduler.h"
#include "octet_test.h"
#include "raw_http.h"

using namespace octet;
using namespace octet::engine;
using namespace octet::test;
using nlohmann::json;

namespace {

// The value of the sample line "series value"; -1 when absent.
double Sample(const std::string& text, const std::string& series) {
  const std::string needle = "\n" + series + " ";
  const size_t p = text.find(needle);
  if (p == std::string::npos) return -1;
  return std::atof(text.c_str() + p + needle.size());
}

std::string Completion(int max_tokens, bool stream = false) {
  json j = {{"model", "ops-test"},
            {"prompt", {1, 2, 3, 4, 5}},
            {"max_tokens", max_tokens},
            {"temperature", 0},
            {"ignore_eos", true}};
  if (stream) j["stream"] = true;
  return j.dump();
}

const std::string kKey = "sk-octet-test-0123456789";

}  // namespace

class TestOpenAiServerOps : public QObject {
  Q_OBJECT
 private:
  std::unique_ptr<Model> model_;
  std::unique_ptr<LocalRunner> runner_;
  std::unique_ptr<Scheduler> sched_;
  std::unique_ptr<CompletionService> svc_;
  std::unique_ptr<OpenAiServer> open_, keyed_;
  int port_ = 0;

 private slots:
  void initTestCase() {
    OCTET_REQUIRE_FIXTURES();
    LoadOptions lo;
    lo.threads = 1;
    auto m = Model::Load(FixturesDir() + "/qwen3-tiny", lo);
    QVERIFY2(m.ok(), m.status().ToString().c_str());
    model_ = std::move(*m);
    runner_ = std::make_unique<LocalRunner>(*model_);
    SchedulerOptions so;
    so.num_slots = 8;
    so.context = 128;
    so.max_batch_tokens = 64;
    sched_ = std::make_unique<Scheduler>(*runner_, so);
    QVERIFY(sched_->Start().ok());
    svc_ = std::make_unique<CompletionService>(*sched_, nullptr, "ops-test");
    OpenAiServerOptions o;
    o.port = 0;
    o.max_body_bytes = 1 << 20;
    o.histogram_max_tokens = 128;
    auto s = OpenAiServer::Start(*svc_, o);
    QVERIFY2(s.ok(), s.status().ToString().c_str());
    open_ = std::move(*s);
    port_ = open_->port();
    o.api_key = kKey;
    s = OpenAiServer::Start(*svc_, o);
    QVERIFY2(s.ok(), s.status().ToString().c_str());
    keyed_ = std::move(*s);
  }
  void cleanupTestCase() {
    if (sched_) sched_->Stop(CancelledError("test over"));
    if (open_) open_->Stop();
    if (keyed_) keyed_->Stop();
  }

  // First: the histograms count exactly what this function sends.
  void histogramsCountWhatWasSent() {
    int64_t generated = 0, prompt = 0;
    const int kRequests = 5;
    for (int i = 0; i < kRequests; ++i) {
      const bool stream = i % 2 == 1;
      RawResponse r =
          Exchange(port_, Request("POST", "/v1/completions", Completion(2 + i, stream)));
      QVERIFY2(r.status == 200, r.body.c_str());
      if (!stream) {
        json u = json::parse(r.body)["usage"];
        QCOMPARE(u["completion_tokens"].get<int64_t>(), int64_t(2 + i));
      } else {
        QVERIFY2(r.body.find("data: [DONE]") != std::string::npos, r.body.c_str());
      }
      generated += 2 + i;
      prompt += 5;
    }
    const std::string m = Exchange(port_, Request("GET", "/metrics")).body;
    const std::string l = "{model=\"ops-test\"}";
    for (const char* h : {"octet_time_to_first_token_seconds", "octet_e2e_request_latency_seconds",
                          "octet_request_queue_time_seconds", "octet_request_prompt_tokens",
                          "octet_request_generation_tokens"}) {
      QVERIFY2(Sample(m, std::string(h) + "_count" + l) == kRequests, (h + ("\n" + m)).c_str());
      QVERIFY2(Sample(m, std::string(h) + "_bucket{model=\"ops-test\",le=\"+Inf\"}") == kRequests,
               h);
    }
    QCOMPARE(Sample(m, "octet_request_generation_tokens_sum" + l), double(generated));
    QCOMPARE(Sample(m, "octet_request_prompt_tokens_sum" + l), double(prompt));
    // Every token after a request's first is one inter-token gap.
    QCOMPARE(Sample(m, "octet_inter_token_latency_seconds_count" + l),
             double(generated - kRequests));
    // Cumulative buckets: 2, 3, 4, 5, 6 tokens.
    QCOMPARE(Sample(m, "octet_request_generation_tokens_bucket{model=\"ops-test\",le=\"2\"}"), 1.0);
    QCOMPARE(Sample(m, "octet_request_generation_tokens_bucket{model=\"ops-test\",le=\"5\"}"), 4.0);
    QCOMPARE(Sample(m, "octet_request_prompt_tokens_bucket{model=\"ops-test\",le=\"5\"}"), 5.0);
    QCOMPARE(Sample(m, "octet_request_prompt_tokens_bucket{model=\"ops-test\",le=\"2\"}"), 0.0);
    // Counters are exact integers; seconds, not milliseconds; the build is named.
    QCOMPARE(Sample(m, "octet_requests_total" + l), double(kRequests));
    QVERIFY(m.find("octet_build_info{version=\"") != std::string::npos);
    QVERIFY2(m.find("milliseconds") == std::string::npos, m.c_str());
  }

  // promtool (Prometheus's linter, Debian package prometheus) accepts /metrics.
  void metricsPassPromtool() {
    if (::access("/usr/bin/promtool", X_OK) != 0) QSKIP("promtool is not installed");
    const std::string m = Exchange(port_, Request("GET", "/metrics")).body;
    const std::string file = "/tmp/octet-test-metrics-" + std::to_string(::getpid()) + ".txt";
    QVERIFY(WriteFileAtomic(file, m).ok());
    CommandResult r = RunProgram({"/bin/sh", "-c", "/usr/bin/promtool check metrics < " + file});
    std::remove(file.c_str());
    QVERIFY2(r.exit_code == 0, (r.output + "\n" + m).c_str());
  }

  void apiKeyRequired() {
    const int port = keyed_->port();
    RawResponse r = Exchange(port, Request("GET", "/v1/models"));
    QCOMPARE(r.status, 401);
    json e = json::parse(r.body, nullptr, false);
    QVERIFY2(e.is_object() && e["error"]["code"] == "invalid_api_key", r.body.c_str());
    QCOMPARE(e["error"]["type"].get<std::string>(), std::string("invalid_request_error"));
    QCOMPARE(r.headers["www-authenticate"], std::string("Bearer"));
    r = Exchange(port, Request("GET", "/v1/models", "", "Authorization: Bearer sk-wrong\r\n"));
    QCOMPARE(r.status, 401);
    r = Exchange(port, Request("GET", "/v1/models", "",
                               "Authorization: Bearer " + kKey.substr(0, 10) + "\r\n"));
    QCOMPARE(r.status, 401);
    r = Exchange(port, Request("POST", "/v1/completions", Completion(2)));
    QCOMPARE(r.status, 401);
    QCOMPARE(Exchange(port, Request("GET", "/metrics")).status, 401);
    r = Exchange(port, Request("GET", "/v1/models", "", "Authorization: Bearer " + kKey + "\r\n"));
    QCOMPARE(r.status, 200);
    r = Exchange(port, Request("POST", "/v1/completions", Completion(2),
                               "Authorization: Bearer " + kKey + "\r\n"));
    QVERIFY2(r.status == 200, r.body.c_str());
    // /health stays open (load balancers probe it without credentials).
    QCOMPARE(Exchange(port, Request("GET", "/health")).status, 200);
  }

  void busyPortRefused() {
    OpenAiServerOptions o;
    o.port = port_;
    auto second = OpenAiServer::Start(*svc_, o);
    QVERIFY2(!second.ok(), "a second server started on a busy port");
    QVERIFY2(second.status().message().find("in use") != std::string::npos,
             second.status().ToString().c_str());
    for (int i = 0; i < 4; ++i) QCOMPARE(Exchange(port_, Request("GET", "/health")).status, 200);
  }

  void requestIdEchoedOrMadeUp() {
    RawResponse r = Exchange(
        port_, Request("POST", "/v1/completions", Completion(2), "X-Request-Id: trace-42-abc\r\n"));
    QVERIFY2(r.status == 200, r.body.c_str());
    QCOMPARE(r.headers["x-request-id"], std::string("trace-42-abc"));
    r = Exchange(port_, Request("GET", "/v1/models"));
    const std::string made = r.headers["x-request-id"];
    QVERIFY2(made.size() >= 8, made.c_str());
    QVERIFY(Exchange(port_, Request("GET", "/v1/models")).headers["x-request-id"] != made);
    // Errors carry it too; an unprintable one is replaced.
    r = Exchange(port_, Request("POST", "/v1/completions", "{not json", "X-Request-Id: bad-7\r\n"));
    QCOMPARE(r.status, 400);
    QCOMPARE(r.headers["x-request-id"], std::string("bad-7"));
    r = Exchange(port_,
                 Request("GET", "/health", "", "X-Request-Id: " + std::string(200, 'a') + "\r\n"));
    QVERIFY(!r.headers["x-request-id"].empty() && r.headers["x-request-id"].size() < 200);
  }

  void modelById() {
    const int64_t now = static_cast<int64_t>(std::time(nullptr));
    RawResponse r = Exchange(port_, Request("GET", "/v1/models/ops-test"));
    QCOMPARE(r.status, 200);
    json m = json::parse(r.body);
    QCOMPARE(m["id"].get<std::string>(), std::string("ops-test"));
    QCOMPARE(m["object"].get<std::string>(), std::string("model"));
    QVERIFY2(m["created"].get<int64_t>() > now - 600 && m["created"].get<int64_t>() <= now,
             r.body.c_str());
    json list = json::parse(Exchange(port_, Request("GET", "/v1/models")).body);
    QCOMPARE(list["data"][0]["created"].get<int64_t>(), m["created"].get<int64_t>());
    r = Exchange(port_, Request("GET", "/v1/models/no-such-model"));
    QCOMPARE(r.status, 404);
    QCOMPARE(json::parse(r.body)["error"]["code"].get<std::string>(),
             std::string("model_not_found"));
    r = Exchange(port_, Request("POST", "/v1/completions", Completion(2)));
    const int64_t created = json::parse(r.body)["created"].get<int64_t>();
    QVERIFY(created >= now - 5 && created <= now + 60);
  }

  void pipelinedRequestsAllAnswered() {
    RawConn c;
    QVERIFY(c.Connect(port_));
    // Three requests in one write; the second has a body.
    QVERIFY(c.Send(Request("GET", "/health") + Request("POST", "/v1/completions", Completion(2)) +
                   Request("GET", "/v1/models", "", "X-Request-Id: third\r\n")));
    RawResponse a, b, d;
    QVERIFY(c.Read(&a, 10'000));
    QVERIFY(c.Read(&b, 30'000));
    QVERIFY(c.Read(&d, 10'000));
    QCOMPARE(a.status, 200);
    QVERIFY2(json::parse(a.body).contains("status"), a.body.c_str());
    QCOMPARE(b.status, 200);
    QCOMPARE(json::parse(b.body)["usage"]["completion_tokens"].get<int>(), 2);
    QCOMPARE(d.status, 200);
    QCOMPARE(d.headers["x-request-id"], std::string("third"));
    QCOMPARE(json::parse(d.body)["object"].get<std::string>(), std::string("list"));
  }

  void duplicateContentLengthRefused() {
    const std::string body = Completion(2);
    RawConn c;
    QVERIFY(c.Connect(port_));
    QVERIFY(
        c.Send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Content-Length: " +
               std::to_string(body.size()) + "\r\nContent-Length: 3\r\n\r\n" + body));
    RawResponse r;
    QVERIFY(c.Read(&r, 10'000));
    QCOMPARE(r.status, 400);
    QVERIFY2(r.body.find("Content-Length") != std::string::npos, r.body.c_str());
    QVERIFY(c.ClosedWithin(5000));
    RawResponse t = Exchange(port_,
                             "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                             "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
    QCOMPARE(t.status, 400);
  }

  void oversizedBodyRefusedBeforeItIsSent() {
    // 10 MB announced (the limit is 1 MiB); nothing of it sent.
    RawConn c;
    QVERIFY(c.Connect(port_));
    QVERIFY(
        c.Send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Content-Length: 10485760\r\n\r\n{\"prompt\":\""));
    RawResponse r;
    QVERIFY2(c.Read(&r, 5000), "no answer before the body was sent");
    QCOMPARE(r.status, 413);
    json e = json::parse(r.body, nullptr, false);
    QVERIFY2(e.is_object() && e.contains("error"), r.body.c_str());
    QVERIFY(c.ClosedWithin(5000));
    QCOMPARE(Exchange(port_, Request("GET", "/health")).status, 200);
  }

  void slowlorisDoesNotStarveHealth() {
    std::vector<std::unique_ptr<RawConn>> slow;
    for (int i = 0; i < 100; ++i) {
      auto c = std::make_unique<RawConn>();
      QVERIFY(c->Connect(port_));
      QVERIFY(c->Send("GET /health HTTP/1.1\r\nHost: x\r\n"));  // never finished
      slow.push_back(std::move(c));
    }
    const auto t0 = std::chrono::steady_clock::now();
    // While they trickle a header byte each second, /health answers at once.
    for (int round = 0; round < 4; ++round) {
      for (auto& c : slow) c->Send("X");
      RawResponse r = Exchange(port_, Request("GET", "/health"), 3000);
      QVERIFY2(r.status == 200, ("round " + std::to_string(round)).c_str());
      QThread::msleep(1000);
    }
    // The heads' deadline (10 s from their first byte) ends them.
    int closed = 0;
    for (auto& c : slow) closed += c->ClosedWithin(15'000) ? 1 : 0;
    QCOMPARE(closed, 100);
    QVERIFY(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));
  }

  void concurrentStreamsAllAnswered() {
    const int kStreams = 200;
    std::atomic<int> done{0}, bad{0};
    std::vector<std::thread> threads;
    const std::string request = Request("POST", "/v1/completions", Completion(2, true));
    for (int i = 0; i < kStreams; ++i) {
      threads.emplace_back([&] {
        RawResponse r = Exchange(port_, request, 120'000);
        if (r.status == 200 && r.body.find("data: [DONE]") != std::string::npos) {
          done.fetch_add(1);
        } else {
          bad.fetch_add(1);
        }
      });
    }
    for (auto& t : threads) t.join();
    QCOMPARE(bad.load(), 0);
    QCOMPARE(done.load(), kStreams);
  }
};

QTEST_GUILESS_MAIN(TestOpenAiServerOps)
#include "test_openai_server_ops.moc"
