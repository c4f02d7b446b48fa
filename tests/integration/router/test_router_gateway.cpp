// The router gateway end to end, with real OpenAI-compatible HTTP upstreams on
// loopback: pass-through (unary and token-by-token streaming), decisions and
// headers, stickiness, least-request spreading over uneven replicas, ejection of
// a 5xx replica and its return, failover when a pool's processes die, hot
// reload under load with nothing lost, client disconnects cancelling the
// upstream, escalation, retries and mid-stream failures.
#include <signal.h>

#include <QtTest>
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "gateway_fixture.h"
#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/base/subprocess.h"
#include "octet/router/gateway.h"
#include "octet/router/router.h"
#include "octet_test.h"
#include "openai_upstream.h"
#include "router_client.h"

using namespace octet;
using namespace octet::router;
using namespace octet::test;
using nlohmann::json;

class TestRouterGateway : public QObject {
  Q_OBJECT
 private slots:
  void unaryAndStreamingPassThrough() {
    auto large = StartUpstream("L", 20, 8);
    auto small = StartUpstream("S", 1, 8);
    Gw g = StartGateway(Fill(kTwoPools, {{"L", large->url()}, {"S", small->url()}}));

    ClientResult u = Chat(g.port(), "hello", false);
    QVERIFY2(u.transport_ok && u.status == 200, (u.error + u.body).c_str());
    QCOMPARE(u.route, std::string("easy"));
    QCOMPARE(u.pool, std::string("small"));
    QCOMPARE(u.replica, small->url());
    json body = json::parse(u.body);
    QCOMPARE(body["choices"][0]["message"]["content"].get<std::string>(), ExpectedTokens("S", 8));
    QCOMPARE(body["usage"]["completion_tokens"].get<int>(), 8);

    ClientResult s = Chat(g.port(), "this one is hard", true);
    QVERIFY2(s.transport_ok && s.status == 200, (s.error + s.body).c_str());
    QCOMPARE(s.pool, std::string("large"));
    QCOMPARE(s.route, std::string("hard"));
    QVERIFY(s.content_type.find("text/event-stream") != std::string::npos);
    const StreamText st = ParseSse(s.body);
    QCOMPARE(st.text, ExpectedTokens("L", 8));
    QVERIFY(st.done);
    // Token by token: the 8 events, 20 ms apart upstream, arrive in pieces.
    QVERIFY2(s.chunks >= 4, std::to_string(s.chunks).c_str());
    // The pool's model name replaced the client's.
    QCOMPARE(json::parse(large->last_body())["model"].get<std::string>(), std::string("big-model"));
    QCOMPARE(json::parse(small->last_body())["model"].get<std::string>(),
             std::string("octet-router"));

    // /v1/completions is routed too.
    ClientResult c = PostJson(g.port(), "/v1/completions",
                              json{{"model", "x"}, {"prompt", "a hard prompt"}}.dump());
    QCOMPARE(c.status, 200);
    QCOMPARE(c.pool, std::string("large"));
    QCOMPARE(json::parse(c.body)["choices"][0]["text"].get<std::string>(), ExpectedTokens("L", 8));

    // Decision only.
    ClientResult d = PostJson(g.port(), "/v1/route", ChatRequest("hard question", false).dump());
    QCOMPARE(d.status, 200);
    json dj = json::parse(d.body);
    QCOMPARE(dj["route"].get<std::string>(), std::string("hard"));
    QCOMPARE(dj["pool"].get<std::string>(), std::string("large"));
    QVERIFY(dj.contains("score") && dj.contains("reason"));

    ClientResult models = Get(g.port(), "/v1/models");
    QCOMPARE(models.status, 200);
    std::set<std::string> ids;
    const json models_doc = json::parse(models.body);
    for (const auto& m : models_doc["data"]) ids.insert(m["id"].get<std::string>());
    const std::set<std::string> expected_ids = {"octet-router", "big-model", "small"};
    QVERIFY2(ids == expected_ids, models.body.c_str());
    QCOMPARE(Get(g.port(), "/health").status, 200);

    const std::string metrics = Get(g.port(), "/metrics").body;
    QCOMPARE(Metric(metrics, "octet_router_route_decisions_total{route=\"hard\"}"), uint64_t(2));
    QCOMPARE(Metric(metrics, "octet_router_route_decisions_total{route=\"easy\"}"), uint64_t(1));
    QCOMPARE(Metric(metrics, "octet_router_pool_tokens_total{pool=\"large\"}"), uint64_t(16));
    QCOMPARE(Metric(metrics, "octet_router_pool_tokens_total{pool=\"small\"}"), uint64_t(8));
    QCOMPARE(Metric(metrics, "octet_router_requests_total"), uint64_t(3));
    // Histograms: every routed request counted once, in the +Inf bucket too.
    QVERIFY2(metrics.find("octet_router_routing_overhead_seconds_bucket{le=\"+Inf\"}") !=
                 std::string::npos,
             metrics.c_str());
    QVERIFY(metrics.find("octet_router_ttft_seconds_count{pool=\"large\"} 2") != std::string::npos);
    QVERIFY(metrics.find("octet_router_ttft_seconds_bucket{pool=\"large\",le=\"+Inf\"} 2") !=
            std::string::npos);
    QVERIFY(metrics.find("octet_router_request_duration_seconds_count{pool=\"small\"} 1") !=
            std::string::npos);
    QVERIFY(metrics.find("octet_build_info{version=\"") != std::string::npos);

    ClientResult bad = PostJson(g.port(), "/v1/chat/completions", "{not json");
    QCOMPARE(bad.status, 400);
    QVERIFY(json::parse(bad.body).contains("error"));
  }

  // --api-key: 401 (OpenAI error body) without it, /health open, the key not
  // forwarded; x-request-id echoed or made up, and forwarded to the replica.
  void apiKeyAndRequestId() {
    auto up = StartUpstream("U", 1, 4);
    auto parsed = ParsePolicy(Fill(R"(version: 1
pools:
  - name: p
    replicas: [@U@]
    health_check: {enabled: false}
routes:
  - name: all
    pool: p
)",
                                   {{"U", up->url()}}),
                              "keyed.yaml");
    QVERIFY2(parsed.ok(), parsed.errors.empty() ? "" : parsed.errors[0].ToString().c_str());
    auto router = Router::Create(parsed.policy);
    QVERIFY(router.ok());
    GatewayOptions o;
    o.threads = 16;
    o.api_key = "route-key-1";
    auto gw = Gateway::Start(router->get(), o);
    QVERIFY2(gw.ok(), gw.status().ToString().c_str());
    httplib::Client cli("127.0.0.1", (*gw)->port());
    cli.set_read_timeout(std::chrono::seconds(10));
    const std::string body = ChatRequest("hi", false).dump();
    auto r = cli.Post("/v1/chat/completions", body, "application/json");
    QVERIFY(r);
    QCOMPARE(r->status, 401);
    json e = json::parse(r->body, nullptr, false);
    QVERIFY2(e.is_object() && e["error"]["code"] == "invalid_api_key", r->body.c_str());
    QVERIFY(!r->get_header_value("x-request-id").empty());
    QCOMPARE(up->requests(), 0);
    r = cli.Get("/metrics", {{"Authorization", "Bearer route-key-2"}});
    QCOMPARE(r->status, 401);
    QCOMPARE(cli.Get("/health")->status, 200);
    const httplib::Headers auth = {{"Authorization", "Bearer route-key-1"},
                                   {"X-Request-Id", "via-router-1"}};
    r = cli.Post("/v1/chat/completions", auth, body, "application/json");
    QVERIFY2(r && r->status == 200, r ? r->body.c_str() : "no reply");
    QCOMPARE(r->get_header_value("x-request-id"), std::string("via-router-1"));
    QCOMPARE(up->last_header("x-request-id"), std::string("via-router-1"));
    QCOMPARE(up->last_header("authorization"), std::string());  // the router's key stays here
    // Streamed (the event loop's path), without a client id: one is made up and forwarded.
    r = cli.Post("/v1/chat/completions", {{"Authorization", "Bearer route-key-1"}},
                 ChatRequest("hi", true).dump(), "application/json");
    QVERIFY2(r && r->status == 200, r ? r->body.c_str() : "no reply");
    const std::string made = r->get_header_value("x-request-id");
    QVERIFY2(made.size() >= 8, made.c_str());
    QCOMPARE(up->last_header("x-request-id"), made);
    r = cli.Get("/metrics", {{"Authorization", "Bearer route-key-1"}});
    QCOMPARE(r->status, 200);
    QVERIFY2(r->body.find("octet_router_request_duration_seconds_count{pool=\"p\"} 2") !=
                 std::string::npos,
             r->body.c_str());
    (*gw)->Stop();
    // promtool (Prometheus's linter, Debian package prometheus) accepts /metrics.
    if (::access("/usr/bin/promtool", X_OK) != 0) QSKIP("promtool is not installed");
    const std::string file = "/tmp/octet-test-router-metrics-" + std::to_string(::getpid());
    QVERIFY(WriteFileAtomic(file, r->body).ok());
    CommandResult lint = RunProgram({"/bin/sh", "-c", "/usr/bin/promtool check metrics < " + file});
    std::remove(file.c_str());
    QVERIFY2(lint.exit_code == 0, (lint.output + "\n" + r->body).c_str());
  }

  void stickySessionsKeepTheirReplica() {
    auto a = StartUpstream("A"), b = StartUpstream("B"), c = StartUpstream("C");
    Gw g = StartGateway(Fill(R"(version: 1
pools:
  - name: p
    replicas: [@A@, @B@, @C@]
    health_check: {enabled: false}
routes:
  - name: all
    pool: p
stickiness: {mode: header, header: X-Session-Id}
)",
                             {{"A", a->url()}, {"B", b->url()}, {"C", c->url()}}));
    const httplib::Headers s1 = {{"X-Session-Id", "conversation-1"}};
    const std::string first = Chat(g.port(), "hi", true, s1).replica;
    QVERIFY(!first.empty());
    for (int i = 0; i < 8; ++i) QCOMPARE(Chat(g.port(), "more", i % 2 == 0, s1).replica, first);
    // Without a pin, requests spread over the replicas.
    std::set<std::string> seen;
    for (int i = 0; i < 12; ++i)
      seen.insert(Chat(g.port(), "x", false, {{"X-Session-Id", "s" + std::to_string(i)}}).replica);
    QVERIFY(seen.size() >= 2);
  }

  void leastRequestFavoursTheFasterReplica() {
    auto fast = StartUpstream("fast", 1, 4);
    auto slow = StartUpstream("slow", 1, 4, /*ttft_ms=*/300);
    Gw g = StartGateway(Fill(R"(version: 1
pools:
  - name: p
    replicas: [@F@, @S@]
    health_check: {enabled: false}
routes:
  - name: all
    pool: p
)",
                             {{"F", fast->url()}, {"S", slow->url()}}));
    std::atomic<int> failures{0};
    std::vector<std::thread> clients;
    for (int t = 0; t < 8; ++t)
      clients.emplace_back([&] {
        for (int i = 0; i < 6; ++i) {
          ClientResult r = Chat(g.port(), "go", true);
          if (r.status != 200 || !ParseSse(r.body).done) ++failures;
        }
      });
    for (auto& t : clients) t.join();
    QCOMPARE(failures.load(), 0);
    QCOMPARE(fast->requests() + slow->requests(), 48);
    qInfo("fast replica took %d requests, slow replica %d", fast->requests(), slow->requests());
    QVERIFY2(
        fast->requests() > 2 * slow->requests(),
        (std::to_string(fast->requests()) + " vs " + std::to_string(slow->requests())).c_str());
  }

  void replicaReturning5xxIsEjectedAndReturns() {
    auto good = StartUpstream("good"), bad = StartUpstream("bad");
    bad->set_fail_status(500);
    // The router's clock moves only when the test says: the ejection cannot
    // end while the requests below run, however slow the machine.
    ManualClock clock;
    Gw g = StartGateway(Fill(R"(version: 1
pools:
  - name: p
    replicas: [@G@, @B@]
    health_check: {enabled: false}
    outlier_ejection: {consecutive_failures: 2, base_ejection_ms: 1500}
    retries: {attempts: 1}
routes:
  - name: all
    pool: p
)",
                             {{"G", good->url()}, {"B", bad->url()}}),
                        "test-policy.yaml", &clock);
    // 12 requests within the ejection time.
    for (int i = 0; i < 12; ++i) {
      ClientResult r = Chat(g.port(), "q", i % 2 == 0);
      QVERIFY2(r.status == 200, r.body.c_str());  // retried on the good replica
      QCOMPARE(r.replica, good->url());
    }
    QVERIFY2(bad->requests() <= 3, std::to_string(bad->requests()).c_str());  // then ejected
    const std::string metrics = Get(g.port(), "/metrics").body;
    QVERIFY(Metric(metrics, "octet_router_ejections_total{pool=\"p\"}") >= 1);
    QVERIFY(Metric(metrics, "octet_router_pool_retries_total{pool=\"p\"}") >= 2);
    // Healed: once its ejection time is over it takes requests again.
    bad->set_fail_status(0);
    bad->ResetCounters();
    clock.AdvanceMs(1499);
    QCOMPARE(g.router->Stats().pools[0].healthy_replicas, 1u);
    clock.AdvanceMs(1);
    QCOMPARE(g.router->Stats().pools[0].healthy_replicas, 2u);
    for (int i = 0; i < 20 && bad->requests() == 0; ++i)
      QCOMPARE(Chat(g.port(), "q", false).status, 200);
    QVERIFY(bad->requests() > 0);
  }

  void failoverWhenAPoolDies() {
    // The small pool is two real processes that get killed.
    std::vector<std::unique_ptr<Subprocess>> procs;
    std::vector<int> ports;
    for (int i = 0; i < 2; ++i) {
      auto port = std::make_shared<std::atomic<int>>(0);
      auto buf = std::make_shared<std::string>();
      auto mu = std::make_shared<std::mutex>();
      SpawnOptions so;
      so.argv = {BinDir() + "/router_test_upstream", "--name", "S" + std::to_string(i), "--threads",
                 "32"};
      so.on_output = [port, buf, mu](std::string_view chunk) {
        std::lock_guard<std::mutex> lock(*mu);
        buf->append(chunk);
        const size_t p = buf->find("listening on ");
        if (p != std::string::npos && buf->find('\n', p) != std::string::npos)
          *port = std::stoi(buf->substr(p + 13));
      };
      auto proc = Subprocess::Spawn(so);
      QVERIFY2(proc.ok(), proc.status().ToString().c_str());
      QVERIFY(WaitFor([&] { return port->load() > 0; }));
      ports.push_back(port->load());
      procs.push_back(std::move(*proc));
    }
    auto large = StartUpstream("L");
    Gw g = StartGateway(Fill(
        R"(version: 1
pools:
  - name: large
    replicas: [@L@]
    health_check: {enabled: false}
  - name: small
    replicas: [http://127.0.0.1:@P0@, http://127.0.0.1:@P1@]
    fallback: large
    health_check: {interval_ms: 100, timeout_ms: 500, unhealthy_threshold: 1}
    retries: {attempts: 1}
routes:
  - name: easy
    pool: small
)",
        {{"L", large->url()}, {"P0", std::to_string(ports[0])}, {"P1", std::to_string(ports[1])}}));
    ClientResult before = Chat(g.port(), "hi", true);
    QCOMPARE(before.status, 200);
    QCOMPARE(before.pool, std::string("small"));
    for (auto& p : procs) {
      p->Kill(SIGKILL);
      QVERIFY(p->Wait(Deadline::AfterMs(5000)).ok());
    }
    // Every request still succeeds: retried, then failed over to the large pool.
    for (int i = 0; i < 10; ++i) {
      ClientResult r = Chat(g.port(), "hi", i % 2 == 0);
      QVERIFY2(r.status == 200, (r.error + r.body).c_str());
      QCOMPARE(r.pool, std::string("large"));
      if (i % 2 == 0) QCOMPARE(ParseSse(r.body).text, ExpectedTokens("L", 8));
    }
    // Health checks take the dead replicas out; the gateway keeps serving.
    QVERIFY(WaitFor([&] { return g.router->Stats().pools[1].healthy_replicas == 0; }));
    QCOMPARE(Get(g.port(), "/health").status, 200);
    QVERIFY(Metric(Get(g.port(), "/metrics").body,
                   "octet_router_pool_fallbacks_total{pool=\"large\"}") >= 1);
  }

  // /v1/models answers from what the health checks last saw: a client's GET
  // reaches no replica, and each pool's entry carries its replica's
  // generation defaults. A passing check refreshes that answer once it is
  // 30 s old; a pool without health checks is asked on a client's GET and
  // kept for 60 s. On a ManualClock, advanced only while the health loop is
  // parked on it (an advance while a round runs would move the next round).
  void modelsAnswerFromWhatTheHealthChecksSaw() {
    const json defaults = {{"temperature", 0.6}, {"top_p", 0.95}};
    UpstreamOptions uo;
    uo.name = "checked";
    uo.threads = 8;
    uo.generation_defaults = defaults;
    auto checked = OpenAiUpstream::Start(uo);
    QVERIFY(checked.ok());
    uo.name = "unchecked";
    auto unchecked = OpenAiUpstream::Start(uo);
    QVERIFY(unchecked.ok());
    ManualClock clock;
    Gw g = StartGateway(Fill(R"(version: 1
pools:
  - name: c
    model: checked
    replicas: [@C@]
    health_check: {interval_ms: 1000, timeout_ms: 2000}
  - name: u
    model: unchecked
    replicas: [@U@]
    health_check: {enabled: false}
routes:
  - name: all
    pool: c
)",
                             {{"C", (*checked)->url()}, {"U", (*unchecked)->url()}}),
                        "test-policy.yaml", &clock);
    const auto parked = [&clock] { return clock.AwaitWaiters(1) && clock.waiters() == 1; };
    // One health round (the loop wakes every 50 ms of the clock); true once
    // it is over.
    const auto round = [&](int64_t ms) {
      const int checks = (*checked)->health_checks();
      if (!parked()) return false;
      clock.AdvanceMs(ms);
      return WaitFor([&] { return (*checked)->health_checks() > checks; }) && parked();
    };
    // Each model id's generation_defaults in the router's /v1/models.
    const auto models = [&] {
      ClientResult r = Get(g.port(), "/v1/models");
      json by_id = json::object();
      if (r.status != 200) return json(r.body);
      const json doc = json::parse(r.body);
      for (const json& m : doc["data"])
        by_id[m["id"].get<std::string>()] = m.value("generation_defaults", json());
      return by_id;
    };
    // The router's own name carries them too: every pool announces the same.
    const json want = {{"checked", defaults}, {"octet-router", defaults}, {"unchecked", defaults}};
    std::string got;
    const auto models_match = [&] {
      const json m = models();
      got = m.dump();
      return m == want;
    };

    QVERIFY(round(50));
    QCOMPARE((*checked)->models_requests(), 1);
    QCOMPARE((*unchecked)->models_requests(), 0);
    for (int i = 0; i < 3; ++i) QVERIFY2(models_match(), got.c_str());
    QCOMPARE((*checked)->models_requests(), 1);    // from the health check's answer
    QCOMPARE((*unchecked)->models_requests(), 1);  // asked once, then kept

    QVERIFY(round(29'000));  // 29.05 s since the first check's answer: still fresh
    QCOMPARE((*checked)->models_requests(), 1);
    QVERIFY(round(1'000));  // 30 s old: the check refreshes it
    QCOMPARE((*checked)->models_requests(), 2);
    QVERIFY2(models_match(), got.c_str());
    QCOMPARE((*unchecked)->models_requests(), 1);  // 30 s old: kept
    QVERIFY(round(30'000));                        // 60 s
    QVERIFY2(models_match(), got.c_str());
    QCOMPARE((*unchecked)->models_requests(), 2);  // asked again
    QCOMPARE((*checked)->models_requests(), 3);    // refreshed by that round
  }

  void hotReloadUnderLoadLosesNothing() {
    auto a = StartUpstream("A", 5, 10), b = StartUpstream("B", 5, 10);
    auto slow = StartUpstream("C", 60, 10);
    const std::string tmpl = R"(version: 1
pools:
  - name: a
    replicas: [@A@]
    health_check: {enabled: false}
  - name: b
    replicas: [@B@]
    health_check: {enabled: false}
@EXTRA@routes:
  - name: to-@TO@
    pool: @TO@
)";
    const std::map<std::string, std::string> urls = {{"A", a->url()}, {"B", b->url()}};
    auto policy = [&](const std::string& to, const std::string& extra = "") {
      auto v = urls;
      v["TO"] = to;
      v["EXTRA"] = extra;
      return Fill(tmpl, v);
    };
    QTemporaryDir dir;
    const std::string file = dir.path().toStdString() + "/policy.yaml";
    const std::string slow_pool =
        "  - name: c\n    replicas: [" + slow->url() + "]\n    health_check: {enabled: false}\n";
    QVERIFY(WriteFileAtomic(file, policy("c", slow_pool)).ok());
    auto parsed = LoadPolicyFile(file);
    QVERIFY2(parsed.ok(), parsed.status().message().c_str());
    auto router = Router::Create(parsed.policy);
    QVERIFY(router.ok());
    GatewayOptions go;
    go.threads = 64;
    go.direct_streaming = g_direct_streaming;
    auto gw = Gateway::Start(router->get(), go);
    QVERIFY(gw.ok());
    const int port = (*gw)->port();

    // A request in flight on pool c, whose policy is then replaced by one
    // without pool c, finishes on the old policy.
    ClientResult in_flight;
    std::thread long_request([&] { in_flight = Chat(port, "long", true); });
    QVERIFY(WaitFor([&] { return slow->in_flight() == 1; }));
    QVERIFY(WriteFileAtomic(file, policy("a")).ok());
    PolicyFileWatcher watcher(router->get(), file, 3'600'000);
    watcher.CheckNow();  // the file-change path
    QCOMPARE((*router)->policy()->pools.size(), size_t(2));
    QCOMPARE(Chat(port, "new", false).pool, std::string("a"));
    long_request.join();
    QCOMPARE(in_flight.status, 200);
    QCOMPARE(in_flight.pool, std::string("c"));
    QCOMPARE(ParseSse(in_flight.body).text, ExpectedTokens("C", 10));
    QVERIFY(ParseSse(in_flight.body).done);

    // Clients stream continuously while the policy flips between pools a and b
    // through the API; every request completes whole, from one pool.
    std::atomic<bool> stop{false};
    std::atomic<int> ok{0}, lost{0};
    std::mutex mu;
    std::set<std::string> pools_seen;
    std::vector<std::thread> clients;
    for (int t = 0; t < 6; ++t)
      clients.emplace_back([&, t] {
        while (!stop.load()) {
          ClientResult r = Chat(port, "x", t % 3 != 0);
          bool whole = r.status == 200;
          if (whole) {
            const std::string name = r.pool == "a" ? "A" : "B";
            const std::string expected = ExpectedTokens(name, 10);
            if (t % 3 != 0) {
              const StreamText st = ParseSse(r.body);
              whole = st.done && st.text == expected;
            } else {
              whole = json::parse(r.body)["choices"][0]["message"]["content"] == expected;
            }
          }
          if (whole) {
            ++ok;
            std::lock_guard<std::mutex> lock(mu);
            pools_seen.insert(r.pool);
          } else {
            ++lost;
          }
        }
      });
    const uint64_t gen0 = (*router)->policy_generation();
    for (int i = 0; i < 12; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(60));
      ClientResult r = PostJson(port, "/v1/router/policy", policy(i % 2 == 0 ? "b" : "a"));
      QVERIFY2(r.status == 200, r.body.c_str());
      QVERIFY(json::parse(r.body)["applied"].get<bool>());
    }
    stop = true;
    for (auto& t : clients) t.join();
    QCOMPARE((*router)->policy_generation(), gen0 + 12);
    qInfo("%d requests completed across 12 reloads, %d lost", ok.load(), lost.load());
    QCOMPARE(lost.load(), 0);
    QVERIFY(ok.load() >= 12);
    QCOMPARE(pools_seen, (std::set<std::string>{"a", "b"}));
    // The last policy (i = 11) sends everything to pool a.
    QCOMPARE(Chat(port, "after", false).pool, std::string("a"));
    (*gw)->Stop();
  }

  void policyApiRejectsInvalidPolicies() {
    auto a = StartUpstream("A");
    const std::string yaml = Fill(R"(version: 1
pools:
  - name: a
    replicas: [@A@]
    health_check: {enabled: false}
routes:
  - name: all
    pool: a
)",
                                  {{"A", a->url()}});
    Gw g = StartGateway(yaml, "/srv/router/policy.yaml");
    const uint64_t gen = g.router->policy_generation();
    std::string broken = yaml;
    broken.replace(broken.find("pool: a"), 7, "pool: b");
    ClientResult r = PostJson(g.port(), "/v1/router/policy", broken);
    QCOMPARE(r.status, 422);
    json j = json::parse(r.body);
    QVERIFY(!j["valid"].get<bool>());
    QVERIFY2(j["errors"][0].get<std::string>().rfind("/srv/router/policy.yaml:8:11: ", 0) == 0,
             r.body.c_str());
    QCOMPARE(g.router->policy_generation(), gen);
    QCOMPARE(Chat(g.port(), "still fine", false).status, 200);
    // Validate only.
    ClientResult v = PostJson(g.port(), "/v1/router/policy?apply=false", yaml);
    QCOMPARE(v.status, 200);
    QVERIFY(json::parse(v.body)["valid"].get<bool>());
    QVERIFY(!json::parse(v.body)["applied"].get<bool>());
    QCOMPARE(g.router->policy_generation(), gen);
    ClientResult current = Get(g.port(), "/v1/router/policy");
    QCOMPARE(current.body, yaml);
    ClientResult stats = Get(g.port(), "/v1/router/stats");
    QCOMPARE(json::parse(stats.body)["pools"][0]["pool"].get<std::string>(), std::string("a"));
  }

  void clientDisconnectCancelsTheUpstream() {
    auto up = StartUpstream("U", 20, 200);  // a 4-second stream
    Gw g = StartGateway(Fill(R"(version: 1
pools:
  - name: p
    replicas: [@U@]
    health_check: {enabled: false}
routes:
  - name: all
    pool: p
)",
                             {{"U", up->url()}}));
    ClientResult r = Chat(g.port(), "long story", true, {}, /*abort_after_chunks=*/2);
    QVERIFY(!r.transport_ok);  // we hung up
    QCOMPARE(r.chunks, 2);
    // The gateway notices at its next write and closes the upstream request.
    QVERIFY2(WaitFor([&] { return up->cancelled() == 1 && up->in_flight() == 0; }, 3000),
             ("upstream cancelled " + std::to_string(up->cancelled())).c_str());
    QCOMPARE(up->completed(), 0);
    QVERIFY(WaitFor([&] {
      return Metric(Get(g.port(), "/metrics").body,
                    "octet_router_pool_cancelled_total{pool=\"p\"}") == 1;
    }));
    QCOMPARE(g.router->Stats().pools[0].in_flight, 0u);
  }

  void keepaliveCommentsWhileTheModelPrefills() {
    auto up = StartUpstream("U", 1, 4, /*ttft_ms=*/500);
    Gw g = StartGateway(Fill(R"(version: 1
gateway: {stream_keepalive_ms: 100}
pools:
  - name: p
    replicas: [@U@]
    health_check: {enabled: false}
routes:
  - name: all
    pool: p
)",
                             {{"U", up->url()}}));
    ClientResult r = Chat(g.port(), "q", true);
    QCOMPARE(r.status, 200);
    // SSE comments while the first token is awaited, whole events only.
    const size_t comment = r.body.find(": keepalive\n\n");
    QVERIFY2(comment != std::string::npos && comment < r.body.find("data:"), r.body.c_str());
    const StreamText st = ParseSse(r.body);
    QCOMPARE(st.text, ExpectedTokens("U", 4));
    QVERIFY(st.done && !st.error);
  }

  void rejectedRequestsEscalate() {
    auto large = StartUpstream("L"), small = StartUpstream("S");
    small->set_reject_status(400);  // e.g. the context is too long for the small model
    Gw g = StartGateway(Fill(R"(version: 1
pools:
  - name: large
    replicas: [@L@]
    health_check: {enabled: false}
  - name: small
    replicas: [@S@]
    health_check: {enabled: false}
routes:
  - name: easy
    pool: small
    escalate: {pool: large, on_status: [400], sticky: true}
stickiness: {mode: header, header: X-Session-Id}
)",
                             {{"L", large->url()}, {"S", small->url()}}));
    const httplib::Headers session = {{"X-Session-Id", "e1"}};
    ClientResult r = Chat(g.port(), "a very long document ...", true, session);
    QCOMPARE(r.status, 200);
    QCOMPARE(r.pool, std::string("large"));
    QCOMPARE(ParseSse(r.body).text, ExpectedTokens("L", 8));
    QCOMPARE(small->requests(), 1);
    small->set_reject_status(0);
    QCOMPARE(Chat(g.port(), "follow-up", false, session).pool, std::string("large"));  // sticky
    QCOMPARE(Chat(g.port(), "other", false, {{"X-Session-Id", "e2"}}).pool, std::string("small"));
    // A 4xx that does not escalate reaches the client as is.
    small->set_reject_status(422);
    ClientResult rejected = Chat(g.port(), "x", false, {{"X-Session-Id", "e3"}});
    QCOMPARE(rejected.status, 422);
    QVERIFY(rejected.body.find("rejected by S") != std::string::npos);
  }

  void connectionErrorsAreRetriedOnAnotherReplica() {
    int dead_port;
    {
      auto gone = StartUpstream("gone");
      dead_port = gone->port();
    }  // stopped: its port refuses connections now
    auto live = StartUpstream("live");
    Gw g = StartGateway(Fill(R"(version: 1
pools:
  - name: p
    replicas: [http://127.0.0.1:@D@, @L@]
    health_check: {enabled: false}
    retries: {attempts: 2}
routes:
  - name: all
    pool: p
)",
                             {{"D", std::to_string(dead_port)}, {"L", live->url()}}));
    for (int i = 0; i < 10; ++i) {
      ClientResult r = Chat(g.port(), "q", i % 2 == 1);
      QVERIFY2(r.status == 200, (r.error + r.body).c_str());
      QCOMPARE(r.replica, live->url());
    }
  }

  void upstreamDyingMidStreamEndsWithAnErrorEvent() {
    auto up = StartUpstream("U", 10, 8);
    up->set_die_after_tokens(3);
    Gw g = StartGateway(Fill(R"(version: 1
pools:
  - name: p
    replicas: [@U@]
    health_check: {enabled: false}
routes:
  - name: all
    pool: p
)",
                             {{"U", up->url()}}));
    ClientResult r = Chat(g.port(), "q", true);
    QCOMPARE(r.status, 200);
    const StreamText st = ParseSse(r.body);
    QCOMPARE(st.text, ExpectedTokens("U", 3));  // what was sent before it died
    QVERIFY(st.error);                          // then an error event
    QVERIFY(!st.done);
    QCOMPARE(up->requests(), 1);  // not retried after tokens went out
    // Counted when the response is released, just after the client has it all.
    QVERIFY(WaitFor([&] { return g.router->Stats().pools[0].errors == 1; }));
  }

  void deathBeforeTheFirstTokenIsRetried() {
    // The first replica answers 200 and then drops the connection before any
    // token: nothing reached the client yet, so another replica serves it.
    auto dying = StartUpstream("D", 5, 8), good = StartUpstream("G", 5, 8);
    dying->set_die_after_tokens(0);
    Gw g = StartGateway(Fill(R"(version: 1
pools:
  - name: p
    replicas: [@D@, @G@]
    load_balancing: round_robin
    health_check: {enabled: false}
    retries: {attempts: 1}
routes:
  - name: all
    pool: p
)",
                             {{"D", dying->url()}, {"G", good->url()}}));
    for (int i = 0; i < 4; ++i) {
      ClientResult r = Chat(g.port(), "q", true);
      QCOMPARE(r.status, 200);
      const StreamText st = ParseSse(r.body);
      QCOMPARE(st.text, ExpectedTokens("G", 8));
      QVERIFY(st.done && !st.error);
    }
    QVERIFY(dying->requests() >= 1);
  }

  void nothingAvailableIsABadGateway() {
    int dead_port;
    {
      auto gone = StartUpstream("gone");
      dead_port = gone->port();
    }
    Gw g = StartGateway(Fill(R"(version: 1
pools:
  - name: p
    replicas: [http://127.0.0.1:@D@]
    health_check: {enabled: false}
routes:
  - name: all
    pool: p
)",
                             {{"D", std::to_string(dead_port)}}));
    for (bool stream : {false, true}) {
      ClientResult r = Chat(g.port(), "q", stream);
      QCOMPARE(r.status, 502);
      QVERIFY2(r.body.find("127.0.0.1:" + std::to_string(dead_port)) != std::string::npos,
               r.body.c_str());
    }
  }
};

int main(int argc, char** argv) {
  TestRouterGateway direct;
  int failures = QTest::qExec(&direct, argc, argv);
  std::fprintf(stderr, "--- again, streams through an upstream thread (https pools' path)\n");
  g_direct_streaming = false;
  TestRouterGateway threaded;
  failures += QTest::qExec(&threaded, argc, argv);
  return failures;
}
#include "test_router_gateway.moc"
