// `octet route` as a user runs it (docs/CLI.md): --check with FILE:LINE:COL
// errors, --classify --json on stdin, plan (1.5x / 3.0x with the seed setup),
// train-classifier, and the gateway process itself: serving, reloading its
// policy when the file changes or on SIGHUP, and stopping on SIGTERM.
#include <signal.h>

#include <QtTest>
#include <atomic>
#include <mutex>
#include <sstream>

#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/base/subprocess.h"
#include "octet_test.h"
#include "openai_upstream.h"
#include "router_client.h"

using namespace octet;
using namespace octet::test;
using nlohmann::json;

namespace {

std::string Example() { return SourceDir() + "/resources/routing/example-policy.yaml"; }

// Runs a shell command line (for stdin redirection) with a deadline.
CommandResult Shell(const std::string& cmd, int timeout_ms = 60'000) {
  return RunProgram({"/bin/sh", "-c", cmd}, timeout_ms);
}

// The JSON document of a --json run: the last line that parses.
json LastJson(const std::string& out) {
  size_t end = out.size();
  while (end > 0) {
    size_t start = out.rfind('\n', end - 1);
    start = start == std::string::npos ? 0 : start + 1;
    json j = json::parse(out.substr(start, end - start), nullptr, false);
    if (!j.is_discarded() && (j.is_object() || j.is_array())) return j;
    if (start == 0) break;
    end = start - 1;
  }
  return json();
}

}  // namespace

class TestRouteCli : public QObject {
  Q_OBJECT
 private slots:
  void checkAcceptsTheExampleAndRejectsWithLocations() {
    auto ok = RunProgram({"octet", "route", "--policy", Example(), "--check"});
    QCOMPARE(ok.exit_code, 0);
    QVERIFY2(ok.output.find("ok (2 pools, 1 classifiers, 4 routes)") != std::string::npos,
             ok.output.c_str());

    QTemporaryDir dir;
    const std::string bad = dir.path().toStdString() + "/bad.yaml";
    QVERIFY(WriteFileAtomic(bad,
                            "version: 1\npools:\n  - name: a\n    replicas: [http://h:1]\n"
                            "    fallback: a\nroutes:\n  - name: r\n    pool: b\n    matc: {}\n")
                .ok());
    auto r = RunProgram({"octet", "route", "--policy", bad, "--check"});
    QCOMPARE(r.exit_code, 1);
    QVERIFY2(r.output.find(bad + ":5:15: cycle in fallbacks: a -> a") != std::string::npos,
             r.output.c_str());
    QVERIFY(r.output.find(bad + ":8:11: route 'r' sends to unknown pool 'b'") != std::string::npos);
    QVERIFY(r.output.find(bad + ":9:5: unknown key 'matc' in a route (did you mean 'match'?)") !=
            std::string::npos);
    auto j = RunProgram({"octet", "route", "--policy", bad, "--check", "--json"});
    QCOMPARE(j.exit_code, 1);
    json doc = LastJson(j.output);
    QVERIFY(!doc["valid"].get<bool>());
    QCOMPARE(doc["errors"].size(), size_t(3));
    QCOMPARE(doc["errors"][0]["line"].get<int>(), 5);

    QCOMPARE(RunProgram({"octet", "route"}).exit_code, 2);  // no --policy
    QCOMPARE(RunProgram({"octet", "route", "--policy", Example(), "--bogus"}).exit_code, 2);
    auto help = RunProgram({"octet", "route", "--help"});
    QCOMPARE(help.exit_code, 0);
    QVERIFY(help.output.find("--classify") != std::string::npos);
  }

  void classifyPrintsOneDecisionPerRequest() {
    QTemporaryDir dir;
    const std::string in = dir.path().toStdString() + "/requests.json";
    json reqs =
        json::array({ChatRequest("What is the capital of Australia?", false),
                     ChatRequest("Prove that the square root of 2 is irrational, then generalise "
                                 "the argument to any non-square integer.",
                                 false)});
    QVERIFY(WriteFileAtomic(in, reqs.dump()).ok());
    auto r = Shell(BinDir() + "/octet route --policy " + Example() + " --classify --json < " + in +
                   " 2>/dev/null");
    QCOMPARE(r.exit_code, 0);
    json out = json::parse(r.output, nullptr, false);  // stdout is exactly one JSON document
    QVERIFY2(out.is_array() && out.size() == 2, r.output.c_str());
    QCOMPARE(out[0]["route"].get<std::string>(), std::string("easy"));
    QCOMPARE(out[0]["pool"].get<std::string>(), std::string("small"));
    QCOMPARE(out[1]["route"].get<std::string>(), std::string("hard"));
    QCOMPARE(out[1]["pool"].get<std::string>(), std::string("large"));
    QVERIFY(out[1]["score"].get<double>() >= 0.5);
    QVERIFY(out[1]["reason"].get<std::string>().find("classifier difficulty") != std::string::npos);

    auto bad = Shell("echo '{\"not\": \"an array\"}' | " + BinDir() + "/octet route --policy " +
                     Example() + " --classify --json");
    QCOMPARE(bad.exit_code, 2);
  }

  void planGivesTheSeedGains() {
    auto r =
        RunProgram({"octet", "route", "plan", "--policy", Example(), "--fraction", "0.5,0.25"});
    QCOMPARE(r.exit_code, 0);
    // One row per fraction: f, lambda_max, gain, bottleneck.
    auto row = [&](const std::string& f) {
      std::istringstream lines(r.output);
      for (std::string line; std::getline(lines, line);)
        if (line.find("  " + f + "  ") != std::string::npos) return line;
      return std::string();
    };
    QVERIFY2(row("0.500").find("1.50x   large") != std::string::npos, r.output.c_str());
    QVERIFY2(row("0.250").find("3.00x   large") != std::string::npos, r.output.c_str());
    auto j = RunProgram({"octet", "route", "plan", "--policy", Example(), "--json"});
    QCOMPARE(j.exit_code, 0);
    json doc = LastJson(j.output);
    QCOMPARE(doc["points"][0]["fraction_large"].get<double>(), 0.25);
    QCOMPARE(doc["points"][0]["gain"].get<double>(), 3.0);
    QCOMPARE(doc["points"][1]["gain"].get<double>(), 1.5);
    QCOMPARE(doc["points"][1]["bottleneck"].get<std::string>(), std::string("large"));
    // Small replicas too slow: the small pool becomes the bottleneck.
    auto slow = RunProgram({"octet", "route", "plan", "--policy", Example(), "--rate", "small=0.5",
                            "--fraction", "0.25", "--json"});
    json s = LastJson(slow.output);
    QCOMPARE(s["points"][0]["bottleneck"].get<std::string>(), std::string("small"));
    QVERIFY(s["points"][0]["gain"].get<double>() < 3.0);
    // Without a policy, from flags alone.
    auto flags =
        RunProgram({"octet", "route", "plan", "--replicas", "big=3,tiny=2", "--nodes-per-replica",
                    "big=2,tiny=1", "--rate", "big=1,tiny=5", "--json"});
    QCOMPARE(flags.exit_code, 0);
    QCOMPARE(LastJson(flags.output)["points"][1]["gain"].get<double>(), 1.5);
    // f estimated by classifying the labelled set with the policy.
    auto est = RunProgram({"octet", "route", "plan", "--policy", Example(), "--requests",
                           SourceDir() + "/resources/routing/labelled-requests.jsonl", "--json"});
    QCOMPARE(est.exit_code, 0);
    json e = LastJson(est.output);
    QVERIFY(e["estimate"]["requests"].get<int>() >= 300);
    QCOMPARE(RunProgram({"octet", "route", "plan", "--fraction", "0.5"}).exit_code, 2);
  }

  void trainClassifierWritesUsableWeights() {
    QTemporaryDir dir;
    const std::string out = dir.path().toStdString() + "/w.json";
    auto r = RunProgram({"octet", "route", "train-classifier", "--data",
                         SourceDir() + "/resources/routing/labelled-requests.jsonl", "--out", out,
                         "--iterations", "100", "--json"});
    QCOMPARE(r.exit_code, 0);
    json info = LastJson(r.output);
    QVERIFY(info["heldout_examples"].get<int>() > 0);
    QVERIFY(info["heldout_metrics"]["accuracy"].get<double>() > 0.5);
    QVERIFY(PathExists(out));
    auto bad = RunProgram(
        {"octet", "route", "train-classifier", "--data", "/nonexistent.jsonl", "--out", out});
    QCOMPARE(bad.exit_code, 2);
  }

  void gatewayServesReloadsAndStops() {
    UpstreamOptions uo;
    uo.name = "A";
    auto a = OpenAiUpstream::Start(uo);
    uo.name = "B";
    auto b = OpenAiUpstream::Start(uo);
    QVERIFY(a.ok() && b.ok());
    QTemporaryDir dir;
    const std::string file = dir.path().toStdString() + "/policy.yaml";
    auto policy = [&](const std::string& to) {
      return "version: 1\ngateway: {watch_interval_ms: 100, threads: 16}\npools:\n"
             "  - name: a\n    replicas: [" +
             (*a)->url() +
             "]\n"
             "  - name: b\n    replicas: [" +
             (*b)->url() +
             "]\n"
             "routes:\n  - name: r\n    pool: " +
             to + "\n";
    };
    QVERIFY(WriteFileAtomic(file, policy("a")).ok());
    auto port = std::make_shared<std::atomic<int>>(0);
    auto log = std::make_shared<std::string>();
    auto mu = std::make_shared<std::mutex>();
    SpawnOptions so;
    so.argv = {BinDir() + "/octet", "route", "--policy", file, "--port", "0"};
    so.on_output = [port, log, mu](std::string_view chunk) {
      std::lock_guard<std::mutex> lock(*mu);
      log->append(chunk);
      const std::string key = " on http://127.0.0.1:";
      const size_t p = log->find(key);
      if (p != std::string::npos && port->load() == 0)
        *port = std::atoi(log->c_str() + p + key.size());
    };
    auto proc = Subprocess::Spawn(so);
    QVERIFY(proc.ok());
    const Deadline d = Deadline::AfterMs(10000);
    while (port->load() == 0 && !d.expired())
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    QVERIFY2(port->load() > 0, log->c_str());
    QCOMPARE(Chat(*port, "hi", true).pool, std::string("a"));
    QCOMPARE(Get(*port, "/health").status, 200);

    // Edit the file: the watcher applies it.
    QVERIFY(WriteFileAtomic(file, policy("b")).ok());
    const Deadline r = Deadline::AfterMs(10000);
    while (Chat(*port, "hi", false).pool != "b" && !r.expired())
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    QCOMPARE(Chat(*port, "hi", false).pool, std::string("b"));
    // A broken edit is reported and the running policy stays.
    QVERIFY(WriteFileAtomic(file, "version: 1\npools: oops\n").ok());
    (*proc)->Kill(SIGHUP);
    const Deadline e = Deadline::AfterMs(10000);
    while (!e.expired()) {
      {
        std::lock_guard<std::mutex> lock(*mu);
        if (log->find(file + ":2:8: 'pools' must be a non-empty list") != std::string::npos) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    {
      std::lock_guard<std::mutex> lock(*mu);
      QVERIFY2(log->find(file + ":2:8: 'pools' must be a non-empty list") != std::string::npos,
               log->c_str());
    }
    QCOMPARE(Chat(*port, "hi", false).pool, std::string("b"));

    (*proc)->Kill(SIGTERM);
    auto st = (*proc)->Wait(Deadline::AfterMs(10000));
    QVERIFY(st.ok());
    QVERIFY2(st->success(), st->ToString().c_str());
  }
};

QTEST_APPLESS_MAIN(TestRouteCli)
#include "test_route_cli.moc"
