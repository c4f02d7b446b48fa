// Operations helpers of base/: API keys (loading, constant-time Bearer
// check), "did you mean" for flags and commands, and the Prometheus text
// helpers (cumulative histogram lines, exact integers, label escaping).
#include <QtTest>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "octet/base/api_key.h"
#include "octet/base/args.h"
#include "octet/base/file_util.h"
#include "octet/base/prom_metrics.h"
#include "octet_test.h"

using namespace octet;

class TestOpsUtil : public QObject {
  Q_OBJECT
 private slots:
  void closestMatch() {
    const std::vector<std::string> flags = {"model", "max-tokens", "temperature", "port", "tp"};
    QCOMPARE(ClosestMatch("modle", flags), std::string("model"));  // swap
    QCOMPARE(ClosestMatch("max-token", flags), std::string("max-tokens"));
    QCOMPARE(ClosestMatch("temprature", flags), std::string("temperature"));
    QCOMPARE(ClosestMatch("prot", flags), std::string("port"));
    QCOMPARE(ClosestMatch("xyzzy", flags), std::string());  // nothing near
    QCOMPARE(ClosestMatch("", flags), std::string());
    QCOMPARE(ClosestMatch("serv", {"serve", "route", "train"}), std::string("serve"));
  }

  void unknownFlagSuggests() {
    ArgParser p("octet demo", "demo");
    p.Option("model", "DIR", "m").Flag("json", "j");
    Status s = p.Parse(std::vector<std::string>{"--modle", "x"});
    QVERIFY(!s.ok());
    QVERIFY2(s.message().find("did you mean --model?") != std::string::npos, s.message().c_str());
    // The program name appears once.
    QCOMPARE(s.message().find("octet demo: octet demo"), std::string::npos);
    s = p.Parse(std::vector<std::string>{"--completely-else"});
    QVERIFY(s.message().find("did you mean") == std::string::npos);
  }

  void apiKeys() {
    QVERIFY(ConstantTimeEqual("abc", "abc"));
    QVERIFY(!ConstantTimeEqual("abc", "abd"));
    QVERIFY(!ConstantTimeEqual("abc", "abcd"));
    QVERIFY(!ConstantTimeEqual("", "a"));
    QVERIFY(BearerMatches("Bearer sk-1", "sk-1"));
    QVERIFY(BearerMatches("bearer sk-1", "sk-1"));
    QVERIFY(!BearerMatches("Bearer sk-12", "sk-1"));
    QVERIFY(!BearerMatches("Basic sk-1", "sk-1"));
    QVERIFY(!BearerMatches("sk-1", "sk-1"));
    QVERIFY(!BearerMatches("", "sk-1"));

    const std::string dir = "/tmp/octet-test-ops-util-" + std::to_string(::getpid());
    QVERIFY(MakeDirs(dir).ok());
    QVERIFY(WriteFileAtomic(dir + "/k", "  sk-file \n second line\n").ok());
    auto k = LoadApiKey("", dir + "/k");
    QVERIFY2(k.ok(), k.status().ToString().c_str());
    QCOMPARE(*k, std::string("sk-file"));
    QCOMPARE(*LoadApiKey("", ""), std::string());
    QVERIFY(!LoadApiKey("a", dir + "/k").ok());  // both
    QVERIFY(!LoadApiKey("", dir + "/missing").ok());
    QVERIFY(!LoadApiKey("has space", "").ok());
    QVERIFY(WriteFileAtomic(dir + "/empty", "\n").ok());
    auto e = LoadApiKey("", dir + "/empty");
    QVERIFY(!e.ok());
    QVERIFY2(e.status().message().find(dir + "/empty") != std::string::npos,
             e.status().message().c_str());
    std::filesystem::remove_all(dir);
  }

  void histogramText() {
    prom::Histogram h({0.25, 1, 10});
    for (double v : {0.125, 0.25, 0.5, 3.0, 100.0}) h.Observe(v);
    h.ObserveN(2.0, 3);
    std::ostringstream o;
    h.Write(o, "x_seconds", "model=\"m\"");
    // Cumulative buckets (le is inclusive), then +Inf == count, the sum, the count.
    const std::string want =
        "x_seconds_bucket{model=\"m\",le=\"0.25\"} 2\n"
        "x_seconds_bucket{model=\"m\",le=\"1\"} 3\n"
        "x_seconds_bucket{model=\"m\",le=\"10\"} 7\n"
        "x_seconds_bucket{model=\"m\",le=\"+Inf\"} 8\n"
        "x_seconds_sum{model=\"m\"} 109.875\n"
        "x_seconds_count{model=\"m\"} 8\n";
    QCOMPARE(o.str(), want);
    std::ostringstream u;
    prom::Histogram(std::vector<double>{1}).Write(u, "y", "");
    QCOMPARE(u.str(),
             std::string("y_bucket{le=\"1\"} 0\ny_bucket{le=\"+Inf\"} 0\ny_sum 0\ny_count 0\n"));
  }

  void values() {
    QCOMPARE(prom::Value(1234567.0), std::string("1234567"));  // not 1.23457e+06
    QCOMPARE(prom::Value(uint64_t{18446744073709551615u}), std::string("18446744073709551615"));
    QCOMPARE(prom::Value(0.1), std::string("0.1"));
    QCOMPARE(prom::Value(0.001234), std::string("0.001234"));
    QCOMPARE(prom::Value(1.0 / 3), std::string("0.3333333333333333"));
    QCOMPARE(prom::Value(std::nan("")), std::string("NaN"));
    QCOMPARE(prom::Value(-1.0 / 0.0), std::string("-Inf"));
    QCOMPARE(prom::EscapeLabel("a\"b\\c\nd"), std::string("a\\\"b\\\\c\\nd"));
    const std::vector<double> b = prom::OneTwoFiveBuckets(300);
    QCOMPARE(b, (std::vector<double>{1, 2, 5, 10, 20, 50, 100, 200, 500}));
    const std::string info = prom::BuildInfoMetric();
    QVERIFY2(info.find("# TYPE octet_build_info gauge\noctet_build_info{version=\"") !=
                 std::string::npos,
             info.c_str());
    QVERIFY(info.find("commit=\"") != std::string::npos);
    QVERIFY(info.size() > 3 && info.compare(info.size() - 3, 3, " 1\n") == 0);
  }
};

QTEST_APPLESS_MAIN(TestOpsUtil)
#include "test_ops_util.moc"
