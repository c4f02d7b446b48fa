// Load: 200 concurrent streaming chat requests through the gateway to loopback
// upstreams (two pools of two replicas, the classifier deciding). None may be
// lost or cut short, each upstream request is made exactly once, and the load
// drains to zero. The routing overhead and TTFT percentiles are reported (not
// asserted: CI machines are noisy; tests/bench/bench_router measures them).
#include <QtTest>
#include <algorithm>
#include <atomic>
#include <barrier>
#include <thread>

#include "octet/base/json.h"
#include "octet/router/gateway.h"
#include "octet/router/router.h"
#include "octet_test.h"
#include "openai_upstream.h"
#include "router_client.h"

using namespace octet;
using namespace octet::router;
using namespace octet::test;
using nlohmann::json;

class TestRouterLoad : public QObject {
  Q_OBJECT
 private slots:
  void twoHundredConcurrentStreams() {
    constexpr int kClients = 200;
    constexpr int kTokens = 16;
    std::vector<std::unique_ptr<OpenAiUpstream>> ups;
    for (const char* name : {"L0", "L1", "S0", "S1"}) {
      UpstreamOptions o;
      o.name = name;
      o.ttft_ms = 50;
      o.token_interval_ms = 10;
      o.tokens = kTokens;
      o.threads = 160;
      auto u = OpenAiUpstream::Start(o);
      QVERIFY2(u.ok(), u.status().ToString().c_str());
      ups.push_back(std::move(*u));
    }
    const std::string yaml =
        "version: 1\n"
        "gateway: {threads: 256}\n"
        "pools:\n"
        "  - name: large\n    replicas: [" +
        ups[0]->url() + ", " + ups[1]->url() +
        "]\n    health_check: {enabled: false}\n"
        "  - name: small\n    replicas: [" +
        ups[2]->url() + ", " + ups[3]->url() +
        "]\n    health_check: {enabled: false}\n"
        "classifiers:\n  - name: difficulty\n    weights: difficulty.weights.json\n"
        "routes:\n  - name: hard\n    match: {hard: true}\n    pool: large\n"
        "  - name: easy\n    pool: small\n";
    PolicyParseOptions po;
    po.base_dir = SourceDir() + "/resources/routing";
    auto parsed = ParsePolicy(yaml, "load.yaml", po);
    QVERIFY2(parsed.ok(), parsed.status().message().c_str());
    auto router = Router::Create(parsed.policy);
    QVERIFY(router.ok());
    auto gw = Gateway::Start(router->get(), GatewayOptionsFromPolicy(parsed.policy->gateway));
    QVERIFY2(gw.ok(), gw.status().ToString().c_str());
    const int port = (*gw)->port();

    const char* prompts[] = {
        "What is the capital of Australia?",
        "Implement a lock-free single-producer single-consumer ring buffer in C++ with correct "
        "memory ordering, and explain why each atomic operation uses the ordering it does.",
        "Translate 'good morning' into Spanish.",
        "Prove that the square root of 2 is irrational, then generalise the argument to show that "
        "the square root of any non-square integer is irrational."};
    std::vector<ClientResult> results(kClients);
    std::barrier start(kClients);
    std::vector<std::thread> clients;
    for (int i = 0; i < kClients; ++i)
      clients.emplace_back([&, i] {
        start.arrive_and_wait();
        results[static_cast<size_t>(i)] = Chat(port, prompts[i % 4], true);
      });
    for (auto& t : clients) t.join();

    int complete = 0;
    std::vector<double> ttft;
    std::map<std::string, int> by_pool;
    for (const auto& r : results) {
      const StreamText st = ParseSse(r.body);
      const std::string name = r.replica == ups[0]->url()   ? "L0"
                               : r.replica == ups[1]->url() ? "L1"
                               : r.replica == ups[2]->url() ? "S0"
                                                            : "S1";
      if (r.status == 200 && st.done && st.text == ExpectedTokens(name, kTokens))
        ++complete;
      else
        qWarning("lost: status %d transport %s: %s", r.status, r.error.c_str(),
                 r.body.substr(0, 200).c_str());
      ttft.push_back(r.ttft_ms);
      ++by_pool[r.pool];
    }
    QCOMPARE(complete, kClients);
    int upstream_requests = 0, upstream_completed = 0;
    for (const auto& u : ups) {
      upstream_requests += u->requests();
      upstream_completed += u->completed();
    }
    QCOMPARE(upstream_requests, kClients);  // no duplicates, no retries needed
    QCOMPARE(upstream_completed, kClients);
    QCOMPARE(by_pool["large"], kClients / 2);  // the classifier split the prompts 2:2
    QCOMPARE(by_pool["small"], kClients / 2);
    const RouterStats s = (*router)->Stats();
    QCOMPARE(s.requests, uint64_t(kClients));
    for (const auto& p : s.pools) QCOMPARE(p.in_flight, 0u);
    QVERIFY(WaitFor0([&] {
      for (const auto& u : ups)
        if (u->in_flight() != 0) return false;
      return true;
    }));
    std::sort(ttft.begin(), ttft.end());
    const double ttft_p50 = ttft[ttft.size() / 2], ttft_p99 = ttft[ttft.size() * 99 / 100];
    qInfo(
        "200 concurrent streams: routing overhead p50 %.1f us, p99 %.1f us; client TTFT p50 %.1f "
        "ms, p99 %.1f ms (upstream TTFT 50 ms)",
        s.overhead_us_p50, s.overhead_us_p99, ttft_p50, ttft_p99);
    std::printf("%s\n", json{{"streams", kClients},
                             {"complete", complete},
                             {"overhead_us_p50", s.overhead_us_p50},
                             {"overhead_us_p99", s.overhead_us_p99},
                             {"ttft_ms_p50", ttft_p50},
                             {"ttft_ms_p99", ttft_p99}}
                            .dump()
                            .c_str());
    (*gw)->Stop();
  }

 private:
  template <typename F>
  static bool WaitFor0(F cond) {
    const Deadline d = Deadline::AfterMs(5000);
    while (!d.expired() && !cond()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return cond();
  }
};

QTEST_APPLESS_MAIN(TestRouterLoad)
#include "test_router_load.moc"
