// `octet bench` end to end: a real (tiny, random-weight) `octet serve --tp 2`
// measured over HTTP, runs stored in SQLite with the server's topology, read
// back with list/show/compare, a llama-benchy report imported, and the CLI
// contract on bad input (a corrupt store, a dead endpoint, bad flags).
#include <QTemporaryDir>
#include <QtTest>

#include "octet/base/json.h"
#include "serving_test_util.h"

using namespace octet;
using namespace octet::test;
using nlohmann::json;

namespace {

json ParseOrFail(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) qFatal("not one JSON document: %s", text.c_str());
  return j;
}

}  // namespace

class TestBenchCli : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir tmp_;
  std::string model_, db_;
  ServerProcess server_;

 private slots:
  void initTestCase() {
    QVERIFY(tmp_.isValid());
    model_ = tmp_.path().toStdString() + "/tiny";
    db_ = tmp_.path().toStdString() + "/runs.sqlite";
    engine::RandomModelShape s;
    s.architecture = "Qwen3ForCausalLM";
    s.vocab_size = 512;
    s.hidden_size = 64;
    s.intermediate_size = 128;
    s.num_layers = 2;
    s.num_heads = 4;
    s.num_kv_heads = 2;
    s.head_dim = 16;
    s.max_position_embeddings = 1024;
    Status st = engine::WriteRandomCheckpoint(s, model_);
    QVERIFY2(st.ok(), st.ToString().c_str());
    st = server_.Start({"--model", model_, "--tp", "2", "--slots", "4", "--context", "256",
                        "--grpc-port", "off", "--threads", "1"});
    QVERIFY2(st.ok(), st.ToString().c_str());
  }
  void cleanupTestCase() { server_.Stop(); }

  void benchStoresRunsWithTopology() {
    const std::string url = "http://127.0.0.1:" + std::to_string(server_.port());
    auto r = RunProgram({"octet", "bench", "--url", url, "--pp", "24", "--tg", "6", "--concurrency",
                         "1,3", "--runs", "2", "--db", db_, "--label", "first", "--json"},
                        120'000);
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    // stdout is one JSON document; the "stored as run" line goes to stderr
    // (merged here), after it.
    const std::string doc = r.output.substr(0, r.output.find("\noctet bench: stored"));
    const json j = ParseOrFail(doc);
    QCOMPARE(j["benchmarks"].size(), size_t(2));
    for (const json& b : j["benchmarks"]) {
      QCOMPARE(b["failed_requests"].get<int>(), 0);
      QCOMPARE(b["prompt_size"].get<int>(), 24);
      // Batch totals: one value per repetition.
      QCOMPARE(b["pp_throughput"]["values"].size(), size_t(2));
      for (double v : b["e2e_ttft"]["values"]) QVERIFY(v > 0);
    }
    // Per-request figures: one value per request (2 runs x c).
    QCOMPARE(j["benchmarks"][0]["e2e_ttft"]["values"].size(), size_t(2));
    QCOMPARE(j["benchmarks"][1]["e2e_ttft"]["values"].size(), size_t(6));
    QCOMPARE(j["octet"]["topology"]["tp"].get<int>(), 2);
    QCOMPARE(j["octet"]["topology"]["transport"].get<std::string>(), std::string("shm"));
    QCOMPARE(j["model"].get<std::string>(), std::string("tiny"));
    QCOMPARE(j["octet"]["state"].get<std::string>(), std::string("complete"));

    auto csv =
        RunProgram({"octet", "bench", "--url", url, "--pp", "24", "--tg", "6", "--concurrency", "1",
                    "--runs", "1", "--db", db_, "--label", "second", "--csv"},
                   120'000);
    QVERIFY2(csv.exit_code == 0, csv.output.c_str());
    QVERIFY2(csv.output.rfind("run_id,model,test,", 0) == 0, csv.output.c_str());
    QVERIFY2(csv.output.find("\n2,tiny,pp24 tg6 (c1),24,6,0,1,1,0,") != std::string::npos,
             csv.output.c_str());

    auto list = RunProgram({"octet", "bench", "list", "--db", db_, "--json"});
    QCOMPARE(list.exit_code, 0);
    const json runs = ParseOrFail(list.output);
    QCOMPARE(runs.size(), size_t(2));
    QCOMPARE(runs[0]["label"].get<std::string>(), std::string("second"));
    QCOMPARE(runs[1]["results"].get<int>(), 2);
    QCOMPARE(runs[1]["tp"].get<int>(), 2);
    for (const json& run : runs) QCOMPARE(run["state"].get<std::string>(), std::string("complete"));

    auto show = RunProgram({"octet", "bench", "show", "--db", db_, "1"});
    QCOMPARE(show.exit_code, 0);
    QVERIFY2(show.output.find("TP 2") != std::string::npos, show.output.c_str());
    QVERIFY2(show.output.find("| tiny | pp24 tg6 (c3) |") != std::string::npos,
             show.output.c_str());

    auto cmp = RunProgram({"octet", "bench", "compare", "--db", db_, "1", "2"});
    QCOMPARE(cmp.exit_code, 0);
    QVERIFY2(cmp.output.find("| pp24 tg6 (c1) | pp_throughput |") != std::string::npos,
             cmp.output.c_str());
    QVERIFY2(cmp.output.find("| pp24 tg6 (c3) | (only in A) |") != std::string::npos,
             cmp.output.c_str());
    auto cmp_json = RunProgram({"octet", "bench", "compare", "--db", db_, "1", "2", "--json"});
    QCOMPARE(cmp_json.exit_code, 0);
    QCOMPARE(ParseOrFail(cmp_json.output)["rows"].size(), size_t(2));
  }

  void importLlamaBenchy() {
    const std::string file = tmp_.path().toStdString() + "/vllm.json";
    QVERIFY(WriteFileAtomic(file, R"({"version": "0.3.1", "timestamp": "2026-01-05T10:20:30",
      "latency_mode": "api", "latency_ms": 1.5, "model": "tiny", "prefix_caching_enabled": false,
      "max_concurrency": 1, "benchmarks": [{"concurrency": 1, "context_size": 0,
      "prompt_size": 24, "response_size": 6, "is_context_prefill_phase": false,
      "pp_throughput": {"mean": 900, "std": 0, "values": [900]}}]})")
                .ok());
    auto r = RunProgram(
        {"octet", "bench", "import", "--db", db_, file, "--engine", "vLLM 0.9", "--json"});
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    const int64_t id = ParseOrFail(r.output)["id"].get<int64_t>();
    auto list = RunProgram({"octet", "bench", "list", "--db", db_});
    QVERIFY2(list.output.find("[llama-benchy]") != std::string::npos, list.output.c_str());
    auto cmp = RunProgram({"octet", "bench", "compare", "--db", db_, "2", std::to_string(id)});
    QCOMPARE(cmp.exit_code, 0);
    QVERIFY2(cmp.output.find("from llama-benchy") != std::string::npos, cmp.output.c_str());
  }

  void badInput() {
    const std::string garbage = tmp_.path().toStdString() + "/garbage.sqlite";
    QVERIFY(WriteFileAtomic(garbage, std::string(2048, 'z')).ok());
    for (const char* sub : {"list", "show"}) {
      std::vector<std::string> argv = {"octet", "bench", sub, "--db", garbage};
      if (std::string(sub) == "show") argv.push_back("1");
      auto r = RunProgram(argv);
      QCOMPARE(r.exit_code, 1);
      QVERIFY2(r.output.find(garbage) != std::string::npos, r.output.c_str());
      QCOMPARE(std::count(r.output.begin(), r.output.end(), '\n'), 1L);  // one line
    }
    auto missing = RunProgram({"octet", "bench", "show", "--db", db_, "999"});
    QCOMPARE(missing.exit_code, 1);
    QVERIFY2(missing.output.find("no run 999") != std::string::npos, missing.output.c_str());
    const int dead_port = FreeLoopbackPort();
    auto dead = RunProgram({"octet", "bench", "--url",
                            "http://127.0.0.1:" + std::to_string(dead_port), "--runs", "1"});
    QCOMPARE(dead.exit_code, 1);
    QVERIFY2(dead.output.find("/v1/models: could not connect (refused, or nothing listens "
                              "there)") != std::string::npos,
             dead.output.c_str());
    auto zero = RunProgram({"octet", "bench", "--url", "http://127.0.0.1:1", "--pp", "0"});
    QCOMPARE(zero.exit_code, 2);
    auto no_url = RunProgram({"octet", "bench", "--pp", "8"});
    QCOMPARE(no_url.exit_code, 2);
    // The server kept serving through all of it.
    auto health = Curl({server_.url("/health")});
    QCOMPARE(health.http_status, 200);
  }
};

QTEST_GUILESS_MAIN(TestBenchCli)
#include "test_bench_cli.moc"
