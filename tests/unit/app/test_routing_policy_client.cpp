// The routing editor's back end: the router's own validation errors at their
// line and column, offline decisions for a typed prompt, and a running router
// gateway that accepts a new policy (hot reload), refuses an invalid one with
// the errors at their lines, and answers "where would this go".
#include <QtTest>

#include "octet/app/routing_policy_client.h"
#include "octet/base/file_util.h"
#include "octet/router/gateway.h"
#include "octet/router/router.h"
#include "octet_test.h"

using namespace octet;
using namespace octet::app;

namespace {

// Two pools; "code" keywords go to the big one. Line numbers matter below.
const char kPolicy[] =
    "version: 1\n"                                  // 1
    "pools:\n"                                      // 2
    "  - name: big\n"                               // 3
    "    replicas: [http://127.0.0.1:9]\n"          // 4
    "    health_check: {enabled: false}\n"          // 5
    "  - name: small\n"                             // 6
    "    replicas: [http://127.0.0.1:9]\n"          // 7
    "    health_check: {enabled: false}\n"          // 8
    "routes:\n"                                     // 9
    "  - name: coding\n"                            // 10
    "    match: {keywords: [compile, segfault]}\n"  // 11
    "    pool: big\n"                               // 12
    "  - name: rest\n"                              // 13
    "    pool: small\n";                            // 14

std::string WithLine(const std::string& text, int line, const std::string& replacement) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  lines[static_cast<size_t>(line - 1)] = replacement;
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

}  // namespace

class TestRoutingPolicyClient : public QObject {
  Q_OBJECT
 private slots:
  void examplePolicyIsValid() {
    const std::string path = test::SourceDir() + "/resources/routing/example-policy.yaml";
    auto text = ReadFileToString(path);
    QVERIFY(text.ok());
    const PolicyCheck c = CheckRoutingPolicy(*text, path);
    QVERIFY2(c.valid, c.errors.empty() ? "" : c.errors[0].text.c_str());
    QCOMPARE(c.pools, (std::vector<std::string>{"large", "small"}));
    QCOMPARE(c.classifiers, (std::vector<std::string>{"difficulty"}));
    QCOMPARE(c.routes.size(), size_t{4});
    // A prompt beyond the small model's context goes to the large pool.
    auto d = DecideOffline(*text, path, ChatRequestJson(std::string(120'000, 'a')));
    QVERIFY2(d.ok(), d.status().ToString().c_str());
    QCOMPARE(d->route, std::string("long-context"));
    QCOMPARE(d->pool, std::string("large"));
  }

  void errorsComeAtTheirLine_data() {
    QTest::addColumn<int>("line");
    QTest::addColumn<QString>("replacement");
    QTest::addColumn<QString>("expect");
    QTest::newRow("unknown pool") << 14 << "    pool: tiny"
                                  << "tiny";
    QTest::newRow("bad balancing") << 5 << "    load_balancing: fastest"
                                   << "fastest";
    QTest::newRow("yaml syntax") << 11 << "    match: {keywords: [compile, segfault}"
                                 << "";
  }
  void errorsComeAtTheirLine() {
    QFETCH(int, line);
    QFETCH(QString, replacement);
    QFETCH(QString, expect);
    const std::string yaml = WithLine(kPolicy, line, replacement.toStdString());
    const PolicyCheck c = CheckRoutingPolicy(yaml, "edited.yaml");
    QVERIFY(!c.valid);
    QVERIFY(!c.errors.empty());
    const PolicyIssue& e = c.errors[0];
    QVERIFY2(std::abs(e.line - line) <= 1,
             e.text.c_str());  // YAML flow errors may point at the next line
    QVERIFY2(e.column >= 1, e.text.c_str());
    QVERIFY(e.text.rfind("edited.yaml:" + std::to_string(e.line) + ":", 0) == 0);
    QVERIFY2(e.message.find(expect.toStdString()) != std::string::npos, e.text.c_str());
    QVERIFY(!DecideOffline(yaml, "edited.yaml", ChatRequestJson("x")).ok());
  }

  void parsesFileLineColumnMessages() {
    const PolicyIssue i = ParsePolicyIssue("/a:b/p.yaml:12:5: unknown key 'x'");
    QCOMPARE(i.line, 12);
    QCOMPARE(i.column, 5);
    QCOMPARE(i.message, std::string("unknown key 'x'"));
    QCOMPARE(ParsePolicyIssue("no position").line, 0);
  }

  void offlineDecisionFollowsTheRoutes() {
    auto d =
        DecideOffline(kPolicy, "p.yaml", ChatRequestJson("why does this segfault?", "be brief"));
    QVERIFY(d.ok());
    QCOMPARE(d->route, std::string("coding"));
    QCOMPARE(d->pool, std::string("big"));
    d = DecideOffline(kPolicy, "p.yaml", ChatRequestJson("hello there"));
    QVERIFY(d.ok());
    QCOMPARE(d->pool, std::string("small"));
  }

  void runningRouterHotReloads() {
    auto parsed = router::ParsePolicy(kPolicy, "running.yaml");
    QVERIFY(parsed.ok());
    router::RouterOptions ro;
    ro.active_health_checks = false;
    auto r = router::Router::Create(parsed.policy, ro);
    QVERIFY(r.ok());
    router::GatewayOptions go;
    go.host = "127.0.0.1";
    go.port = 0;
    go.threads = 4;
    auto g = router::Gateway::Start(r->get(), go);
    QVERIFY2(g.ok(), g.status().ToString().c_str());
    const std::string url = "http://127.0.0.1:" + std::to_string((*g)->port());
    const uint64_t before = (*r)->policy_generation();

    // An invalid policy is refused, with its line, and the running one stays.
    const std::string bad = WithLine(kPolicy, 14, "    pool: tiny");
    auto refused = SendPolicyToRouter(url, bad, true, Deadline::AfterMs(5000));
    QVERIFY2(refused.ok(), refused.status().ToString().c_str());
    QVERIFY(!refused->valid);
    QVERIFY(!refused->applied);
    QVERIFY(!refused->errors.empty());
    QCOMPARE(refused->errors[0].line, 14);
    QCOMPARE((*r)->policy_generation(), before);

    // A valid one is applied: "hello" now goes to the big pool.
    const std::string good = WithLine(kPolicy, 14, "    pool: big");
    auto applied = SendPolicyToRouter(url, good, true, Deadline::AfterMs(5000));
    QVERIFY(applied.ok());
    QVERIFY(applied->valid);
    QVERIFY(applied->applied);
    QVERIFY(applied->policy_generation > before);
    auto running = FetchRouterPolicy(url, Deadline::AfterMs(5000));
    QVERIFY(running.ok());
    QCOMPARE(*running, good);
    auto d = DecideOnRouter(url, ChatRequestJson("hello"), Deadline::AfterMs(5000));
    QVERIFY2(d.ok(), d.status().ToString().c_str());
    QCOMPARE(d->route, std::string("rest"));
    QCOMPARE(d->pool, std::string("big"));

    (*g)->Stop();
    auto gone = DecideOnRouter(url, ChatRequestJson("hello"), Deadline::AfterMs(2000));
    QCOMPARE(gone.status().code(), StatusCode::kUnavailable);
    QCOMPARE(SendPolicyToRouter("localhost:1", good, true, Deadline::AfterMs(100)).status().code(),
             StatusCode::kInvalidArgument);
  }
};

QTEST_GUILESS_MAIN(TestRoutingPolicyClient)
#include "test_routing_policy_client.moc"
