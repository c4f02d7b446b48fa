// Routing decisions, session stickiness, load balancing, saturation, outlier
// ejection, retries, fallbacks and escalation — the RouterCore logic, driven
// without HTTP (replica URLs are never contacted here) and with a test clock.
#include <QtTest>
#include <atomic>
#include <map>
#include <sstream>

#include "octet/base/json.h"
#include "octet/router/router.h"
#include "octet_test.h"
#include "router_core.h"

using namespace octet;
using namespace octet::router;
using nlohmann::json;

namespace {

const char* kPolicy = R"(version: 1
pools:
  - name: large
    replicas: [http://10.255.0.1:81, http://10.255.0.2:81]
    load_balancing: @LB@
    max_in_flight: @MAXL@
    outlier_ejection: {consecutive_failures: 3, base_ejection_ms: 1000, max_ejection_ms: 5000,
                       max_ejected_percent: @PCT@}
    retries: {attempts: 1, on: [@ON@]}
  - name: small
    replicas:
      - {url: http://10.255.0.3:81, weight: @W3@}
      - {url: http://10.255.0.4:81, weight: 1}
    load_balancing: @LB@
    max_in_flight: @MAXS@
    fallback: large
    outlier_ejection: {consecutive_failures: 3, base_ejection_ms: 1000, max_ejection_ms: 5000,
                       max_ejected_percent: @PCT@}
    retries: {attempts: 1, on: [@ON@]}
classifiers:
  - name: difficulty
    weights: difficulty.weights.json
routes:
  - name: agentic
    match: {tool_call_depth: {min: 2}}
    pool: large
  - name: premium
    match: {headers: {X-Tier: gold}}
    pool: large
  - name: translate
    match: {keywords: [translate]}
    pool: small
  - name: hard
    match: {classifier: difficulty, score: {min: 0.5}}
    pool: large
    fallback: small
  - name: @LAST@
    pool: @LASTPOOL@
    escalate: {pool: @ESC@, on_status: [400], sticky: true}
stickiness: {mode: @MODE@, header: X-Session-Id, scope: @SCOPE@}
)";

struct Knobs {
  std::string lb = "least_request", maxl = "0", maxs = "0", pct = "100",
              on = "connect_error, 5xx, 429";
  std::string w3 = "1", mode = "header", scope = "session", last = "easy", lastpool = "small",
              esc = "large";
};

std::shared_ptr<const RoutingPolicy> MakePolicy(const Knobs& k) {
  std::string y = kPolicy;
  auto sub = [&](const std::string& key, const std::string& v) {
    for (size_t p; (p = y.find(key)) != std::string::npos;) y.replace(p, key.size(), v);
  };
  sub("@LB@", k.lb);
  sub("@MAXL@", k.maxl);
  sub("@MAXS@", k.maxs);
  sub("@PCT@", k.pct);
  sub("@ON@", k.on);
  sub("@W3@", k.w3);
  sub("@MODE@", k.mode);
  sub("@SCOPE@", k.scope);
  sub("@LAST@", k.last);
  sub("@LASTPOOL@", k.lastpool);
  sub("@ESC@", k.esc);
  PolicyParseOptions o;
  o.base_dir = test::SourceDir() + "/resources/routing";
  auto r = ParsePolicy(y, "test.yaml", o);
  if (!r.ok()) qFatal("%s", r.status().message().c_str());
  return r.policy;
}

json UserChat(const std::string& text) {
  return json{{"model", "m"}, {"messages", json::array({{{"role", "user"}, {"content", text}}})}};
}
const char* kHard =
    "Implement a lock-free single-producer single-consumer ring buffer in C++ with correct memory "
    "ordering, and explain why each atomic operation uses the ordering it does.";
const char* kEasy = "What is the capital of Australia?";

HeaderLookup Headers(std::map<std::string, std::string> h) {
  return [h](std::string_view name) {
    auto it = h.find(std::string(name));
    return it == h.end() ? std::string() : it->second;
  };
}

class Fixture {
 public:
  explicit Fixture(const Knobs& k = {}) {
    RouterOptions o;
    o.active_health_checks = false;
    o.clock = &clock;
    auto r = Router::Create(MakePolicy(k), o);
    if (!r.ok()) qFatal("%s", r.status().message().c_str());
    router = std::move(*r);
  }
  RouterCore& core() { return router->core(); }
  Result<RoutedRequest> Route(const json& req, const HeaderLookup& h = {}) {
    return core().Route(req, ExtractFeatures(req), h);
  }
  ReplicaState* Replica(const std::string& pool, int i) {
    return core().Snapshot()->FindPool(pool)->replicas[static_cast<size_t>(i)].get();
  }
  const PoolRuntime& Pool(const std::string& name) { return *core().Snapshot()->FindPool(name); }
  ManualClock clock{1'000'000'000'000};  // advanced by the tests, never by time passing
  std::unique_ptr<Router> router;
};

}  // namespace

class TestRouterDecisions : public QObject {
  Q_OBJECT
 private slots:
  void routesAreTriedInOrderAndExplained() {
    Fixture f;
    json agentic = UserChat("book it");
    for (int i = 0; i < 2; ++i) {
      agentic["messages"].push_back(
          {{"role", "assistant"},
           {"content", nullptr},
           {"tool_calls", json::array({{{"id", "c"},
                                        {"type", "function"},
                                        {"function", {{"name", "f"}, {"arguments", "{}"}}}}})}});
      agentic["messages"].push_back({{"role", "tool"}, {"tool_call_id", "c"}, {"content", "ok"}});
    }
    auto d = f.router->Classify(agentic);
    QVERIFY(d.ok());
    QCOMPARE(d->route, std::string("agentic"));
    QCOMPARE(d->pool, std::string("large"));
    QVERIFY2(d->reason.find("tool_call_depth 2 >= 2") != std::string::npos, d->reason.c_str());

    d = f.router->Classify(UserChat(kEasy), Headers({{"x-tier", "gold"}}));
    QCOMPARE(d->route, std::string("premium"));
    d = f.router->Classify(UserChat("Please translate this to French"));
    QCOMPARE(d->route, std::string("translate"));
    QVERIFY(d->reason.find("keyword 'translate'") != std::string::npos);

    d = f.router->Classify(UserChat(kHard));
    QCOMPARE(d->route, std::string("hard"));
    QCOMPARE(d->pool, std::string("large"));
    QVERIFY(d->score >= 0.5 && d->score <= 1.0);
    QVERIFY(d->reason.find("classifier difficulty") != std::string::npos);

    d = f.router->Classify(UserChat(kEasy));
    QCOMPARE(d->route, std::string("easy"));
    QCOMPARE(d->pool, std::string("small"));
    QVERIFY(d->score >= 0 && d->score < 0.5);  // the hard route consulted it

    auto bad = f.router->ClassifyJson("{nope");
    QVERIFY(!bad.ok());
    QCOMPARE(bad.status().code(), StatusCode::kInvalidArgument);
    auto js = d->ToJson();
    QVERIFY(js.contains("route") && js.contains("pool") && js.contains("score") &&
            js.contains("reason"));
  }

  void sessionHeaderPinsThePool() {
    Fixture f;
    auto h1 = Headers({{"x-session-id", "s1"}});
    auto first = f.Route(UserChat(kEasy), h1);
    QVERIFY(first.ok());
    QCOMPARE(first->decision.pool, std::string("small"));
    const std::string replica = first->decision.replica;
    first->lease.Release();
    // A hard turn of the same session stays where the session started, on the same replica.
    auto second = f.Route(UserChat(kHard), h1);
    QCOMPARE(second->decision.pool, std::string("small"));
    QVERIFY(second->decision.sticky);
    QCOMPARE(second->decision.replica, replica);
    QVERIFY(second->decision.reason.find("session pinned") != std::string::npos);
    // Classify reports the pin too but does not create pins.
    QVERIFY(f.router->Classify(UserChat(kHard), h1)->sticky);
    QVERIFY(!f.router->Classify(UserChat(kEasy), Headers({{"x-session-id", "s9"}}))->sticky);
    QVERIFY(!f.router->Classify(UserChat(kHard), Headers({{"x-session-id", "s9"}}))->sticky);
    // Another session is classified on its own.
    auto other = f.Route(UserChat(kHard), Headers({{"x-session-id", "s2"}}));
    QCOMPARE(other->decision.pool, std::string("large"));
    QVERIFY(!other->decision.sticky);
  }

  // A pin lasts stickiness.ttl_s (an hour by default) from its last use:
  // each use renews it; unused for longer, the session is classified afresh.
  void sessionPinExpiresAfterItsTimeToLive() {
    Fixture f;
    auto h = Headers({{"x-session-id", "idle"}});
    QCOMPARE(f.Route(UserChat(kEasy), h)->decision.pool, std::string("small"));
    f.clock.AdvanceMs(3600 * 1000);  // exactly the time to live: still pinned
    auto renewed = f.Route(UserChat(kHard), h);
    QVERIFY(renewed->decision.sticky);
    QCOMPARE(renewed->decision.pool, std::string("small"));
    renewed->lease.Release();
    f.clock.AdvanceMs(3600 * 1000);  // an hour after the renewal: still pinned
    QVERIFY(f.router->Classify(UserChat(kHard), h)->sticky);
    f.clock.AdvanceMs(1);  // past it: the pin has expired
    auto fresh = f.Route(UserChat(kHard), h);
    QVERIFY(!fresh->decision.sticky);
    QCOMPARE(fresh->decision.pool, std::string("large"));
  }

  void aPinnedReplicaYieldsWhenFarBusier() {
    Knobs k;
    k.scope = "turn";
    Fixture f(k);
    auto h = Headers({{"x-session-id", "busy"}});
    auto first = f.Route(UserChat(kEasy), h);
    const std::string pinned = first->decision.replica;
    first->lease.Release();
    // Other sessions' requests keep the pinned replica busy.
    ReplicaState* pinned_state =
        f.Replica("small", 0)->url() == pinned ? f.Replica("small", 0) : f.Replica("small", 1);
    pinned_state->in_flight.fetch_add(7);  // 7 more than the other replica: within the slack
    QCOMPARE(f.Route(UserChat(kEasy), h)->decision.replica, pinned);
    pinned_state->in_flight.fetch_add(2);  // 9 more: beyond the slack of 8, the pin yields
    QVERIFY(f.Route(UserChat(kEasy), h)->decision.replica != pinned);
    pinned_state->in_flight.fetch_sub(9);
  }

  void conversationPrefixPinsWithoutAHeader() {
    Knobs k;
    k.mode = "prefix";
    Fixture f(k);
    json t1 = UserChat(kEasy);
    auto a = f.Route(t1);
    QCOMPARE(a->decision.pool, std::string("small"));
    json t2 = t1;
    t2["messages"].push_back({{"role", "assistant"}, {"content", "Canberra."}});
    t2["messages"].push_back({{"role", "user"}, {"content", kHard}});
    auto b = f.Route(t2);
    QCOMPARE(b->decision.pool, std::string("small"));
    QVERIFY(b->decision.sticky);
  }

  void pinsSurviveAReload() {
    Fixture f;
    auto h = Headers({{"x-session-id", "keep"}});
    QCOMPARE(f.Route(UserChat(kEasy), h)->decision.pool, std::string("small"));
    const uint64_t gen = f.router->policy_generation();
    Knobs k;
    k.last = "everything-large";
    k.lastpool = "large";
    k.esc = "small";
    QVERIFY(f.router->ApplyPolicy(MakePolicy(k)).ok());
    QCOMPARE(f.router->policy_generation(), gen + 1);
    // The pinned session keeps its pool; a new session follows the new routes.
    auto pinned = f.Route(UserChat(kEasy), h);
    QCOMPARE(pinned->decision.pool, std::string("small"));
    QVERIFY(pinned->decision.sticky);
    auto fresh = f.Route(UserChat(kEasy), Headers({{"x-session-id", "new"}}));
    QCOMPARE(fresh->decision.route, std::string("everything-large"));
    QCOMPARE(fresh->decision.pool, std::string("large"));
  }

  void turnScopeReclassifiesButKeepsTheReplica() {
    Knobs k;
    k.scope = "turn";
    Fixture f(k);
    auto h = Headers({{"x-session-id", "t"}});
    auto a = f.Route(UserChat(kEasy), h);
    QCOMPARE(a->decision.pool, std::string("small"));
    const std::string small_replica = a->decision.replica;
    auto b = f.Route(UserChat(kHard), h);
    QCOMPARE(b->decision.pool, std::string("large"));  // reclassified
    QVERIFY(!b->decision.sticky);
    for (int i = 0; i < 5; ++i) {
      auto c = f.Route(UserChat(kEasy), h);
      QCOMPARE(c->decision.replica, small_replica);  // the KV-cache replica
    }
  }

  void leastRequestSpreadsByOutstandingRequests() {
    Fixture f;
    std::vector<RoutedRequest> held;
    for (int i = 0; i < 10; ++i) held.push_back(std::move(*f.Route(UserChat(kEasy))));
    const int a = f.Replica("small", 0)->in_flight.load(),
              b = f.Replica("small", 1)->in_flight.load();
    QCOMPARE(a + b, 10);
    QVERIFY2(std::abs(a - b) <= 1, (std::to_string(a) + " vs " + std::to_string(b)).c_str());
    held.clear();
    QCOMPARE(f.Replica("small", 0)->in_flight.load(), 0);
    QCOMPARE(f.Replica("small", 1)->in_flight.load(), 0);

    Knobs k;
    k.w3 = "3";  // the first small replica is three times as strong
    Fixture w(k);
    for (int i = 0; i < 40; ++i) held.push_back(std::move(*w.Route(UserChat(kEasy))));
    const int heavy = w.Replica("small", 0)->in_flight.load();
    QVERIFY2(heavy >= 28 && heavy <= 32, std::to_string(heavy).c_str());
  }

  void roundRobinAndWeightedRandom() {
    Knobs k;
    k.lb = "round_robin";
    Fixture f(k);
    std::vector<std::string> seen;
    for (int i = 0; i < 4; ++i) seen.push_back(f.Route(UserChat(kEasy))->decision.replica);
    QVERIFY(seen[0] != seen[1]);
    QCOMPARE(seen[0], seen[2]);
    QCOMPARE(seen[1], seen[3]);

    Knobs w;
    w.lb = "weighted_random";
    w.w3 = "3";
    Fixture g(w);
    int first = 0;
    const int n = 2000;
    for (int i = 0; i < n; ++i)
      if (g.Route(UserChat(kEasy))->decision.replica == "http://10.255.0.3:81") ++first;
    const double share = static_cast<double>(first) / n;  // expected 0.75, sd ~0.01
    QVERIFY2(share > 0.70 && share < 0.80, std::to_string(share).c_str());
  }

  void saturatedPoolFallsBackThenSheds() {
    Knobs k;
    k.maxs = "1";
    k.maxl = "1";
    Fixture f(k);
    std::vector<RoutedRequest> held;
    for (int i = 0; i < 2; ++i) held.push_back(std::move(*f.Route(UserChat(kEasy))));
    auto third = f.Route(UserChat(kEasy));
    QVERIFY(third.ok());
    QCOMPARE(third->decision.pool, std::string("large"));
    QVERIFY(third->decision.fallback);
    QVERIFY2(third->decision.reason.find("saturated") != std::string::npos,
             third->decision.reason.c_str());
    held.push_back(std::move(*third));
    held.push_back(std::move(*f.Route(UserChat(kEasy))));
    auto shed = f.Route(UserChat(kEasy));
    QVERIFY(!shed.ok());
    QCOMPARE(shed.status().code(), StatusCode::kResourceExhausted);
    held.clear();
    QCOMPARE(f.Route(UserChat(kEasy))->decision.pool, std::string("small"));
  }

  void outlierEjectionBacksOffAndReturns() {
    Fixture f;
    ReplicaState* r = f.Replica("small", 0);
    const PoolRuntime& pool = f.Pool("small");
    for (int i = 0; i < 2; ++i) f.core().ReportFailure(r, pool, FailureKind::kStatus5xx);
    QVERIFY(r->Available(f.clock.NowMs()));  // two failures are not enough
    f.core().ReportSuccess(r, *pool.spec);   // and a success resets the count
    for (int i = 0; i < 2; ++i) f.core().ReportFailure(r, pool, FailureKind::kConnect);
    QVERIFY(r->Available(f.clock.NowMs()));
    f.core().ReportFailure(r, pool, FailureKind::kConnect);
    QVERIFY(!r->Available(f.clock.NowMs()));
    QCOMPARE(f.router->Stats().pools[1].healthy_replicas, 1u);
    QCOMPARE(f.router->Stats().pools[1].ejections, uint64_t(1));
    // Ejected replicas get no requests.
    for (int i = 0; i < 6; ++i)
      QCOMPARE(f.Route(UserChat(kEasy))->decision.replica, std::string("http://10.255.0.4:81"));
    f.clock.AdvanceMs(999);
    QVERIFY(!r->Available(f.clock.NowMs()));
    f.clock.AdvanceMs(1);
    QVERIFY(r->Available(f.clock.NowMs()));  // back after base_ejection_ms
    // The second ejection lasts twice as long.
    for (int i = 0; i < 3; ++i) f.core().ReportFailure(r, pool, FailureKind::kStatus5xx);
    f.clock.AdvanceMs(1999);
    QVERIFY(!r->Available(f.clock.NowMs()));
    f.clock.AdvanceMs(1);
    QVERIFY(r->Available(f.clock.NowMs()));
    // 429 means busy, not broken: never ejects.
    for (int i = 0; i < 10; ++i) f.core().ReportFailure(r, pool, FailureKind::kStatus429);
    QVERIFY(r->Available(f.clock.NowMs()));
  }

  void maxEjectedPercentKeepsCapacity() {
    Knobs k;
    k.pct = "50";
    Fixture f(k);
    const PoolRuntime& pool = f.Pool("small");
    for (int i = 0; i < 3; ++i)
      f.core().ReportFailure(f.Replica("small", 0), pool, FailureKind::kConnect);
    QVERIFY(!f.Replica("small", 0)->Available(f.clock.NowMs()));  // one may always go
    for (int i = 0; i < 6; ++i)
      f.core().ReportFailure(f.Replica("small", 1), pool, FailureKind::kConnect);
    QVERIFY(f.Replica("small", 1)->Available(f.clock.NowMs()));  // a second would exceed 50%
  }

  void deadPoolFallsBack() {
    Fixture f;
    const PoolRuntime& pool = f.Pool("small");
    for (int k = 0; k < 2; ++k)
      for (int i = 0; i < 3; ++i)
        f.core().ReportFailure(f.Replica("small", k), pool, FailureKind::kConnect);
    auto d = f.router->Classify(UserChat(kEasy));
    QCOMPARE(d->pool, std::string("large"));
    QVERIFY(d->fallback);
    QVERIFY(d->reason.find("pool 'small' is down") != std::string::npos);
    // --classify ignores health.
    QCOMPARE(f.router->Classify(UserChat(kEasy), {}, true)->pool, std::string("small"));
    auto routed = f.Route(UserChat(kEasy));
    QCOMPARE(routed->decision.pool, std::string("large"));
    QCOMPARE(f.Pool("large").counters->fallbacks.load(), uint64_t(1));
    // Health checks mark replicas down the same way.
    Fixture g;
    g.Replica("small", 0)->healthy = false;
    g.Replica("small", 1)->healthy = false;
    QCOMPARE(g.router->Classify(UserChat(kEasy))->pool, std::string("large"));
  }

  void retriesMoveToAnotherReplicaThenFailOver() {
    Fixture f;
    auto rr = f.Route(UserChat(kEasy));
    QVERIFY(rr.ok());
    const std::string first = rr->decision.replica;
    QVERIFY(f.core().Retry(*rr, FailureKind::kConnect));
    QCOMPARE(rr->decision.pool, std::string("small"));
    QVERIFY(rr->decision.replica != first);
    QCOMPARE(f.Pool("small").counters->retries.load(), uint64_t(1));
    // Attempts exhausted on small: fail over to the fallback pool.
    QVERIFY(f.core().Retry(*rr, FailureKind::kStatus5xx));
    QCOMPARE(rr->decision.pool, std::string("large"));
    QVERIFY(rr->decision.fallback);
    QVERIFY(f.core().Retry(*rr, FailureKind::kConnect));  // large's own retry
    QCOMPARE(rr->decision.pool, std::string("large"));
    QVERIFY(!f.core().Retry(*rr, FailureKind::kConnect));  // nothing left
    // Leases moved along: only the current replica holds the request.
    int total = 0;
    for (const auto& p : f.core().Snapshot()->pools)
      for (const auto& r : p->replicas) total += r->in_flight.load();
    QCOMPARE(total, 1);
    rr->lease.Release();
    rr->lease.Release();  // releasing twice is harmless
    for (const auto& p : f.core().Snapshot()->pools)
      for (const auto& r : p->replicas) QCOMPARE(r->in_flight.load(), 0);
    // Mid-stream failures are never retried; retries follow the `on` list.
    auto mid = f.Route(UserChat(kEasy));
    QVERIFY(!f.core().Retry(*mid, FailureKind::kMidStream));
    Knobs k;
    k.on = "5xx";
    Fixture g(k);
    auto only5xx = g.Route(UserChat(kEasy));
    QVERIFY(!g.core().Retry(*only5xx, FailureKind::kConnect));
    QVERIFY(g.core().Retry(*only5xx, FailureKind::kStatus5xx));
  }

  void escalationMovesAndPinsTheSession() {
    Fixture f;
    auto h = Headers({{"x-session-id", "esc"}});
    auto rr = f.Route(UserChat(kEasy), h);
    QCOMPARE(rr->decision.pool, std::string("small"));
    QVERIFY(f.core().Escalate(*rr));
    QCOMPARE(rr->decision.pool, std::string("large"));
    QVERIFY(rr->decision.reason.find("escalated") != std::string::npos);
    QVERIFY(!f.core().Escalate(*rr));  // once
    QCOMPARE(f.Pool("large").counters->escalations.load(), uint64_t(1));
    auto next = f.Route(UserChat(kEasy), h);
    QCOMPARE(next->decision.pool, std::string("large"));
    QVERIFY(next->decision.sticky);
    QVERIFY(next->decision.reason.find("escalated") != std::string::npos);
  }

  void statsAndMetrics() {
    Fixture f;
    for (int i = 0; i < 3; ++i) (void)f.Route(UserChat(kEasy));
    (void)f.Route(UserChat(kHard));
    f.core().RecordOverhead(12'000);
    const RouterStats s = f.router->Stats();
    QCOMPARE(s.pools.size(), size_t(2));
    QCOMPARE(s.pools[1].pool, std::string("small"));
    QCOMPARE(s.pools[1].requests, uint64_t(3));
    QCOMPARE(s.pools[0].requests, uint64_t(1));
    QCOMPARE(s.pools[1].total_replicas, 2u);
    QVERIFY(s.overhead_us_p99 >= 12.0 && s.overhead_us_p99 < 14.0);
    const std::string m = f.router->MetricsText();
    QVERIFY(m.find("octet_router_route_decisions_total{route=\"easy\"} 3") != std::string::npos);
    QVERIFY(m.find("octet_router_route_decisions_total{route=\"hard\"} 1") != std::string::npos);
    QVERIFY(m.find("octet_router_pool_requests_total{pool=\"small\"} 3") != std::string::npos);
    QVERIFY(m.find("octet_router_replica_up{pool=\"large\",replica=\"http://10.255.0.1:81\"} 1") !=
            std::string::npos);
    QVERIFY(m.find("octet_router_routing_overhead_seconds_count 1") != std::string::npos);
    QVERIFY(s.ToJson()["pools"][1]["requests"].get<int>() == 3);
  }

  void histogramQuantiles() {
    // The log buckets behind the quantiles, and beside them the Prometheus
    // histogram with the bounds it was given (seconds).
    LatencyHistogram h({0.00055, 0.001});
    for (int i = 1; i <= 1000; ++i) h.Record(i * 1000);  // 1..1000 us
    QCOMPARE(h.count(), uint64_t(1000));
    const double p50 = h.QuantileNs(0.5) / 1000, p99 = h.QuantileNs(0.99) / 1000;
    QVERIFY2(p50 >= 500 && p50 <= 500 * 1.13, std::to_string(p50).c_str());
    QVERIFY2(p99 >= 990 && p99 <= 990 * 1.13, std::to_string(p99).c_str());
    QCOMPARE(h.prom().count(), uint64_t(1000));
    std::ostringstream prom;
    h.prom().Write(prom, "t", "");
    QVERIFY2(prom.str().find("t_bucket{le=\"0.00055\"} 550\n") != std::string::npos &&
                 prom.str().find("t_bucket{le=\"+Inf\"} 1000\n") != std::string::npos,
             prom.str().c_str());
    LatencyHistogram empty({0.001});
    QCOMPARE(empty.QuantileNs(0.99), 0.0);
  }

  void jobReplicasNeedAResolver() {
    std::string yaml =
        "version: 1\npools:\n  - name: p\n    replicas:\n      - job: qwen\n"
        "routes:\n  - name: all\n    pool: p\n";
    PolicyParseOptions po;
    auto parsed = ParsePolicy(yaml, "j.yaml", po);
    QVERIFY(parsed.ok());
    RouterOptions o;
    o.active_health_checks = false;
    auto none = Router::Create(parsed.policy, o);
    QVERIFY(!none.ok());
    QVERIFY2(none.status().message().find("j.yaml:5:9") != std::string::npos &&
                 none.status().message().find("job 'qwen'") != std::string::npos,
             none.status().message().c_str());
    o.job_resolver = [](const std::string& job) -> Result<std::string> {
      return std::string("http://127.0.0.1:7777");
    };
    auto with = Router::Create(parsed.policy, o);
    QVERIFY(with.ok());
    auto rr = (*with)->core().Route(UserChat("x"), ExtractFeatures(UserChat("x")), {});
    QCOMPARE(rr->decision.replica, std::string("http://127.0.0.1:7777"));
  }
};

QTEST_APPLESS_MAIN(TestRouterDecisions)
#include "test_router_decisions.moc"
