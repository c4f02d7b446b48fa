// Routing policy parsing and validation: every error kind is reported as
// FILE:LINE:COL with the line and column of the offending key or value, all
// errors are reported at once, and an invalid policy never yields a policy.
#include <QtTest>
#include <string>

#include "octet/base/file_util.h"
#include "octet/router/classifier.h"
#include "octet/router/policy.h"
#include "octet_test.h"

using namespace octet;
using namespace octet::router;

namespace {

// A valid policy the error cases below each break in one place.
const char* kBase = R"(version: 1
pools:
  - name: large
    replicas:
      - url: http://127.0.0.1:9001
    capacity: {nodes_per_replica: 2, requests_per_s: 0.25}
  - name: small
    replicas:
      - http://127.0.0.1:9002
    fallback: large
routes:
  - name: code
    match:
      has_code: true
    pool: large
  - name: easy
    pool: small
)";

PolicyParseResult Parse(const std::string& yaml) {
  PolicyParseOptions o;
  o.load_classifier_weights = false;
  return ParsePolicy(yaml, "p.yaml", o);
}

std::string AllErrors(const PolicyParseResult& r) {
  std::string s;
  for (const auto& e : r.errors) s += e.ToString() + "\n";
  return s;
}

}  // namespace

class TestRouterPolicy : public QObject {
  Q_OBJECT
 private slots:
  void basePolicyIsValid() {
    auto r = Parse(kBase);
    QVERIFY2(r.ok(), AllErrors(r).c_str());
    QCOMPARE(r.policy->pools.size(), size_t(2));
    QCOMPARE(r.policy->pools[0].replicas[0].url, std::string("http://127.0.0.1:9001"));
    QCOMPARE(r.policy->pools[1].replicas[0].url, std::string("http://127.0.0.1:9002"));
    QCOMPARE(r.policy->pools[0].capacity.nodes_per_replica, 2);
    QCOMPARE(r.policy->pools[1].fallback, std::string("large"));
    QVERIFY(r.policy->routes[0].match.has_code.value_or(false));
    QVERIFY(r.policy->routes[1].match.catch_all());
  }

  // Each row: a policy text, the expected "FILE:LINE:COL: " prefix of the first
  // error, and a phrase its message must contain.
  void errorKinds_data() {
    QTest::addColumn<QString>("yaml");
    QTest::addColumn<QString>("where");
    QTest::addColumn<QString>("phrase");
    const std::string base = kBase;
    auto replace = [&](const std::string& from, const std::string& to) {
      std::string s = base;
      const size_t p = s.find(from);
      Q_ASSERT(p != std::string::npos);
      s.replace(p, from.size(), to);
      return QString::fromStdString(s);
    };
    QTest::newRow("yaml syntax") << QString("version: 1\npools: [\n  {name: a\n") << "p.yaml:4:1: "
                                 << "YAML syntax error";
    QTest::newRow("unknown top-level key")
        << replace("routes:", "rootes:") << "p.yaml:11:1: "
        << "unknown key 'rootes' in the policy (did you mean 'routes'?)";
    QTest::newRow("unknown key, nothing near it")
        << replace("    fallback: large", "    overflow_to: large") << "p.yaml:10:5: "
        << "unknown key 'overflow_to' in a pool (known keys: name, model";
    QTest::newRow("unknown pool key")
        << replace("    fallback: large", "    fallbak: large") << "p.yaml:10:5: "
        << "did you mean 'fallback'?";
    QTest::newRow("unknown match key")
        << replace("      has_code: true", "      has_cod: true") << "p.yaml:14:7: "
        << "did you mean 'has_code'?";
    QTest::newRow("wrong type: integer")
        << replace("nodes_per_replica: 2", "nodes_per_replica: two") << "p.yaml:6:35: "
        << "'nodes_per_replica' must be an integer, got 'two'";
    QTest::newRow("wrong type: number")
        << replace("requests_per_s: 0.25", "requests_per_s: fast") << "p.yaml:6:54: "
        << "'requests_per_s' must be a number";
    QTest::newRow("wrong type: list") << replace("    replicas:\n      - http://127.0.0.1:9002",
                                                 "    replicas: {url: http://127.0.0.1:9002}")
                                      << "p.yaml:8:15: "
                                      << "'replicas' of pool 'small' must be a list";
    QTest::newRow("wrong type: bool")
        << replace("has_code: true", "has_code: maybe") << "p.yaml:14:17: "
        << "'has_code' must be true or false";
    QTest::newRow("unknown pool reference")
        << replace("    pool: small\n", "    pool: smal\n") << "p.yaml:17:11: "
        << "unknown pool 'smal' (did you mean 'small'?)";
    QTest::newRow("unknown fallback pool")
        << replace("fallback: large", "fallback: big") << "p.yaml:10:15: "
        << "falls back to unknown pool 'big'";
    QTest::newRow("threshold out of range")
        << replace("      has_code: true", "      score: {min: 1.5}") << "p.yaml:14:20: "
        << "'min' must be in [0, 1], got 1.5";
    QTest::newRow("cycle in fallbacks")
        << replace(
               "    capacity: {nodes_per_replica: 2, requests_per_s: 0.25}\n",
               "    capacity: {nodes_per_replica: 2, requests_per_s: 0.25}\n    fallback: small\n")
        << "p.yaml:11:15: "
        << "cycle in fallbacks: large -> small -> large";
    QTest::newRow("self fallback")
        << replace("fallback: large", "fallback: small") << "p.yaml:10:15: "
        << "cycle in fallbacks: small -> small";
    QTest::newRow("enum with did-you-mean")
        << replace("    fallback: large", "    fallback: large\n    load_balancing: least_requests")
        << "p.yaml:11:21: "
        << "did you mean 'least_request'?";
    QTest::newRow("missing required key")
        << replace("  - name: small\n    replicas:\n      - http://127.0.0.1:9002\n",
                   "  - name: small\n")
        << "p.yaml:7:5: "
        << "missing required key 'replicas' in pool 'small'";
    QTest::newRow("duplicate pool name")
        << replace("  - name: small", "  - name: large") << "p.yaml:7:11: "
        << "duplicate pool name 'large' (first at line 3)";
    QTest::newRow("duplicate key")
        << replace("    pool: large\n", "    pool: large\n    pool: small\n") << "p.yaml:16:5: "
        << "duplicate key 'pool'";
    QTest::newRow("bad replica url")
        << replace("http://127.0.0.1:9002", "htp://127.0.0.1:9002") << "p.yaml:9:9: "
        << "must start with http:// or https://";
    QTest::newRow("bad port in url")
        << replace("http://127.0.0.1:9001", "http://127.0.0.1:99999") << "p.yaml:5:14: "
        << "port outside 1..65535";
    QTest::newRow("last route not catch-all")
        << replace("  - name: easy\n    pool: small\n",
                   "  - name: easy\n    match: {turns: {min: 1}}\n    pool: small\n")
        << "p.yaml:16:11: "
        << "end 'routes' with a catch-all route";
    QTest::newRow("unreachable route")
        << replace("  - name: code\n    match:\n      has_code: true\n", "  - name: code\n")
        << "p.yaml:14:11: "
        << "route 'easy' is unreachable";
    QTest::newRow("score without classifier")
        << replace("      has_code: true", "      score: {min: 0.5}") << "p.yaml:14:14: "
        << "defines no 'classifiers'";
    QTest::newRow("min above max")
        << replace("      has_code: true", "      turns: {min: 5, max: 2}") << "p.yaml:14:20: "
        << "min 5.000000 is above max 2.000000";
    QTest::newRow("unsupported version") << replace("version: 1", "version: 2") << "p.yaml:1:10: "
                                         << "unsupported 'version' 2";
    QTest::newRow("escalation to own pool")
        << replace(
               "  - name: easy\n    pool: small\n",
               "  - name: easy\n    pool: small\n    escalate: {pool: small, on_status: [400]}\n")
        << "p.yaml:18:22: "
        << "escalates to its own pool";
    QTest::newRow("escalation status out of range")
        << replace(
               "  - name: easy\n    pool: small\n",
               "  - name: easy\n    pool: small\n    escalate: {pool: large, on_status: [200]}\n")
        << "p.yaml:18:41: "
        << "must be in 400..599, got 200";
  }
  void errorKinds() {
    QFETCH(QString, yaml);
    QFETCH(QString, where);
    QFETCH(QString, phrase);
    auto r = Parse(yaml.toStdString());
    QVERIFY2(!r.ok(), "an invalid policy was accepted");
    QVERIFY(r.policy == nullptr);
    QVERIFY(!r.errors.empty());
    const std::string all = AllErrors(r);
    // The expected error is among those reported, at the expected place.
    bool found = false;
    for (const auto& e : r.errors) {
      const std::string text = e.ToString();
      if (text.rfind(where.toStdString(), 0) == 0 &&
          text.find(phrase.toStdString()) != std::string::npos)
        found = true;
    }
    QVERIFY2(found, ("expected '" + where.toStdString() + "..." + phrase.toStdString() +
                     "' among:\n" + all)
                        .c_str());
  }

  // A policy path pointed at some other file (the agent streams a router job's
  // output to its caller) must not have that file's lines printed back.
  void errorsDoNotEchoTheFilesContent() {
    const std::vector<std::string> secrets = {
        "root:$6$Qx1salt$Zm9vYmFyYmF6cXV4:19000:0:99999:7:::\n"
        "daemon:*:19000:0:99999:7:::\n",
        "api_key: sk-live-0123456789abcdef0123456789abcdef0123456789abcdef0123456789\n"
        "password: correct horse battery staple\n",
        "- {user: admin, pass: 'hunter2 with spaces'}\n",
        "version: 1\npools:\n  - name: a\n    replicas: ['http://x:1 and a secret sentence']\n"};
    for (const auto& text : secrets) {
      auto r = Parse(text);
      QVERIFY(!r.ok());
      const std::string all = AllErrors(r);
      for (const char* piece :
           {"$6$", "Zm9vYmFy", "sk-live", "horse battery", "hunter2", "secret sentence"}) {
        QVERIFY2(all.find(piece) == std::string::npos, all.c_str());
      }
    }
  }

  // Shapes refused before a tree is built: alias amplification (one anchored
  // value repeated, or nested anchors), a second document, a foreign tag.
  void yamlShapesAreBounded() {
    std::string amplified = "version: 1\nblob: &b \"" + std::string(100'000, 'x') + "\"\nmany: [";
    for (int i = 0; i < 2000; ++i) amplified += std::string(i ? "," : "") + "*b";
    amplified += "]\n";
    std::string laughs = "version: 1\nl0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
    for (int i = 1; i < 12; ++i) {
      const std::string prev = "*l" + std::to_string(i - 1);
      laughs += "l" + std::to_string(i) + ": &l" + std::to_string(i) + " [" + prev;
      for (int k = 1; k < 9; ++k) laughs += ", " + prev;
      laughs += "]\n";
    }
    const std::vector<std::pair<std::string, std::string>> cases = {
        {amplified, "aliases expand the document"},
        {laughs, "aliases expand the document"},
        {std::string(kBase) + "---\nversion: 1\n", "more than one YAML document"},
        {"version: !evil 1\n", "unknown YAML tag"},
    };
    for (const auto& [yaml, phrase] : cases) {
      auto r = Parse(yaml);
      QVERIFY(!r.ok());
      const std::string all = AllErrors(r);
      QVERIFY2(all.find(phrase) != std::string::npos, all.c_str());
    }
    // A policy that uses an alias the ordinary way still parses.
    std::string with_alias = kBase;
    const std::string anchor = "capacity: {", use = "      - http://127.0.0.1:9002\n";
    with_alias.replace(with_alias.find(anchor), anchor.size(), "capacity: &cap {");
    with_alias.replace(with_alias.find(use), use.size(), use + "    capacity: *cap\n");
    auto r = Parse(with_alias);
    QVERIFY2(r.ok(), (with_alias + AllErrors(r)).c_str());
    QCOMPARE(r.policy->pools[1].capacity.nodes_per_replica, 2);
  }

  void everyErrorIsReportedSortedAndNothingIsApplied() {
    std::string yaml = kBase;
    yaml.replace(yaml.find("nodes_per_replica: 2"), 20, "nodes_per_replica: x");
    yaml.replace(yaml.find("fallback: large"), 15, "fallbak: large");
    yaml.replace(yaml.find("    pool: small\n"), 16, "    pool: tiny\n");
    auto r = Parse(yaml);
    QVERIFY(!r.ok());
    QCOMPARE(r.errors.size(), size_t(3));
    QCOMPARE(r.errors[0].line, 6);
    QCOMPARE(r.errors[1].line, 10);
    QCOMPARE(r.errors[2].line, 17);
    const Status s = r.status();
    QVERIFY(!s.ok());
    QVERIFY(s.message().find("p.yaml:6:") != std::string::npos);
    QVERIFY(s.message().find("p.yaml:17:") != std::string::npos);
  }

  void emptyAndNonMapDocuments() {
    auto r = Parse("");
    QVERIFY(!r.ok());
    QVERIFY(r.errors[0].message.find("empty") != std::string::npos);
    auto l = Parse("- a\n- b\n");
    QVERIFY(!l.ok());
    QVERIFY(l.errors[0].message.find("must be a map") != std::string::npos);
  }

  void missingFileIsOneError() {
    auto r = LoadPolicyFile("/nonexistent/policy.yaml");
    QVERIFY(!r.ok());
    QCOMPARE(r.errors.size(), size_t(1));
    QVERIFY(r.errors[0].ToString().rfind("/nonexistent/policy.yaml:0:0: cannot read", 0) == 0);
  }

  void classifierWeightsAreLoadedAndChecked() {
    QTemporaryDir dir;
    const std::string d = dir.path().toStdString();
    std::string yaml = kBase;
    yaml.replace(yaml.find("routes:"), 7,
                 "classifiers:\n  - name: difficulty\n    weights: w.json\nroutes:");
    yaml.replace(yaml.find("      has_code: true"), 20, "      hard: true");
    const std::string path = d + "/policy.yaml";
    QVERIFY(WriteFileAtomic(path, yaml).ok());
    // Missing weights: an error at the 'weights' value.
    auto missing = LoadPolicyFile(path);
    QVERIFY(!missing.ok());
    QVERIFY2(missing.errors[0].ToString().rfind(path + ":13:14: classifier 'difficulty'", 0) == 0,
             AllErrors(missing).c_str());
    // Weights for other features: rejected with the reason.
    QVERIFY(WriteFileAtomic(
                d + "/w.json",
                R"({"format":"octet-router-classifier","version":1,"type":"hashed_logistic",)"
                R"("hash_bits":10,"features":["bias"],"dense":[0],"hashed":[]})")
                .ok());
    auto stale = LoadPolicyFile(path);
    QVERIFY(!stale.ok());
    QVERIFY(stale.errors[0].message.find("retrain") != std::string::npos);
    // Valid weights: the only classifier is the default for 'hard'.
    HashedLogisticModel m(10);
    QVERIFY(m.Save(d + "/w.json").ok());
    auto ok = LoadPolicyFile(path);
    QVERIFY2(ok.ok(), AllErrors(ok).c_str());
    QCOMPARE(ok.policy->routes[0].match.classifier, std::string("difficulty"));
    QVERIFY(ok.policy->classifiers[0].model != nullptr);
    QCOMPARE(ok.policy->classifiers[0].weights_path, d + "/w.json");
  }

  void shippedExamplePolicyIsValid() {
    const std::string path = test::SourceDir() + "/resources/routing/example-policy.yaml";
    auto r = LoadPolicyFile(path);
    QVERIFY2(r.ok(), AllErrors(r).c_str());
    const auto& p = *r.policy;
    QCOMPARE(p.pools.size(), size_t(2));
    QCOMPARE(p.pools[0].replicas.size(), size_t(3));
    QCOMPARE(p.pools[1].replicas.size(), size_t(2));
    QCOMPARE(p.pools[0].capacity.nodes_per_replica, 2);
    QCOMPARE(p.stickiness.mode, StickinessMode::kHeaderOrPrefix);
    QCOMPARE(p.stickiness.header, std::string("x-session-id"));
    QVERIFY(p.classifiers[0].model != nullptr);
    QCOMPARE(p.routes.back().escalate.pool, std::string("large"));
    QCOMPARE(p.routes.back().escalate.on_status.size(), size_t(2));
  }

  void replicaUrlForms() {
    std::string yaml = kBase;
    yaml.replace(yaml.find("http://127.0.0.1:9002"), 21, "https://api.example.com/v1/");
    auto r = Parse(yaml);
    QVERIFY2(r.ok(), AllErrors(r).c_str());
    yaml = kBase;
    yaml.replace(yaml.find("http://127.0.0.1:9002"), 21, "http://[::1]:8000");
    QVERIFY(Parse(yaml).ok());
    yaml = kBase;
    yaml.replace(yaml.find("      - http://127.0.0.1:9002"), 29,
                 "      - {job: qwen-small, weight: 2}");
    auto j = Parse(yaml);
    QVERIFY2(j.ok(), AllErrors(j).c_str());
    QCOMPARE(j.policy->pools[1].replicas[0].job, std::string("qwen-small"));
    QCOMPARE(j.policy->pools[1].replicas[0].weight, 2.0);
  }
};

QTEST_APPLESS_MAIN(TestRouterPolicy)
#include "test_router_policy.moc"
