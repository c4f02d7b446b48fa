// The operations flags of `octet serve` and `octet route` as processes (the
// server itself is tested in process by test_openai_server_ops):
// --api-key-file (401 without the key, /health open), a busy
// port refused with a clear message, x-request-id logged by serve, and
// `octet route --api-key` in front of serve forwarding the request id and
// announcing the replica's generation defaults.
#include <QtTest>
#include <atomic>
#include <cstring>
#include <set>
#include <sstream>
#include <thread>

#include "octet/base/json.h"
#include "raw_http.h"
#include "serving_test_util.h"

using namespace octet;
using namespace octet::test;
using nlohmann::json;

namespace {

std::string ScratchDir() {
  static const std::string d = "/tmp/octet-test-serve-ops-" + std::to_string(::getpid());
  return d;
}

const char* kChat =
    R"({"model":"ops-test","messages":[{"role":"user","content":"Count to three"}],)"
    R"("max_tokens":4,"temperature":0,"ignore_eos":true})";

}  // namespace

class TestServeOps : public QObject {
  Q_OBJECT
 private:
  std::string model_;
  ServerProcess open_;   // no API key
  ServerProcess keyed_;  // --api-key-file
  std::string key_ = "sk-octet-test-0123456789";

 private slots:
  void initTestCase() {
    OCTET_REQUIRE_FIXTURES();
    model_ = ScratchDir() + "/qwen3-random";
    Status s = WriteQwen3WithTokenizer(model_, 1);
    QVERIFY2(s.ok(), s.ToString().c_str());
    s = open_.Start({"--model", model_, "--slots", "8", "--context", "256", "--served-model-name",
                     "ops-test", "--grpc-port", "off", "--json"});
    QVERIFY2(s.ok(), s.ToString().c_str());
    const std::string key_file = ScratchDir() + "/key.txt";
    QVERIFY(WriteFileAtomic(key_file, key_ + "\n", 0600).ok());
    s = keyed_.Start({"--model", model_, "--slots", "2", "--context", "256", "--served-model-name",
                      "ops-test", "--grpc-port", "off", "--api-key-file", key_file});
    QVERIFY2(s.ok(), s.ToString().c_str());
  }
  void cleanupTestCase() {
    open_.Stop();
    keyed_.Stop();
    std::error_code ec;
    std::filesystem::remove_all(ScratchDir(), ec);
  }

  void apiKeyRequired() {
    const int port = keyed_.port();
    RawResponse r = Exchange(port, Request("GET", "/v1/models"));
    QCOMPARE(r.status, 401);
    json e = json::parse(r.body, nullptr, false);
    QVERIFY2(e.is_object() && e["error"]["code"] == "invalid_api_key", r.body.c_str());
    QCOMPARE(e["error"]["type"].get<std::string>(), std::string("invalid_request_error"));
    QCOMPARE(r.headers["www-authenticate"], std::string("Bearer"));
    // A wrong key, and a key that is a prefix of the right one.
    r = Exchange(port, Request("GET", "/v1/models", "", "Authorization: Bearer sk-wrong\r\n"));
    QCOMPARE(r.status, 401);
    r = Exchange(port, Request("GET", "/v1/models", "",
                               "Authorization: Bearer " + key_.substr(0, 10) + "\r\n"));
    QCOMPARE(r.status, 401);
    // A completion without the key is refused before it is read or run.
    r = Exchange(port, Request("POST", "/v1/chat/completions", kChat));
    QCOMPARE(r.status, 401);
    r = Exchange(port, Request("GET", "/v1/models", "", "Authorization: Bearer " + key_ + "\r\n"));
    QCOMPARE(r.status, 200);
    r = Exchange(port, Request("POST", "/v1/chat/completions", kChat,
                               "Authorization: Bearer " + key_ + "\r\n"));
    QVERIFY2(r.status == 200, r.body.c_str());
    // /health stays open (load balancers probe it without credentials).
    r = Exchange(port, Request("GET", "/health"));
    QCOMPARE(r.status, 200);
    // With curl, as a user would.
    auto c = Curl({"-H", "Authorization: Bearer " + key_, keyed_.url("/v1/models")});
    QCOMPARE(c.http_status, 200);
    c = Curl({keyed_.url("/metrics")});
    QCOMPARE(c.http_status, 401);
  }

  void busyPortRefused() {
    ServerProcess second;
    Status s = second.Start(
        {"--model", model_, "--grpc-port", "off", "--port", std::to_string(open_.port())}, 30'000);
    QVERIFY2(!s.ok(), "a second serve started on a busy port");
    QVERIFY2(s.message().find("in use") != std::string::npos, s.ToString().c_str());
    QVERIFY(second.process() == nullptr || second.process()->Poll());
    // The first one still answers everything.
    for (int i = 0; i < 4; ++i)
      QCOMPARE(Exchange(open_.port(), Request("GET", "/health")).status, 200);
  }

  void requestIdEchoedOrMadeUp() {
    RawResponse r = Exchange(open_.port(), Request("POST", "/v1/chat/completions", kChat,
                                                   "X-Request-Id: trace-42-abc\r\n"));
    QVERIFY2(r.status == 200, r.body.c_str());
    QCOMPARE(r.headers["x-request-id"], std::string("trace-42-abc"));
    r = Exchange(open_.port(), Request("GET", "/v1/models"));
    const std::string made = r.headers["x-request-id"];
    QVERIFY2(made.size() >= 8, made.c_str());
    RawResponse r2 = Exchange(open_.port(), Request("GET", "/v1/models"));
    QVERIFY(r2.headers["x-request-id"] != made);
    // Errors carry it too, and the API request is logged with it.
    r = Exchange(open_.port(), Request("POST", "/v1/chat/completions", "{not json",
                                       "X-Request-Id: bad-json-7\r\n"));
    QCOMPARE(r.status, 400);
    QCOMPARE(r.headers["x-request-id"], std::string("bad-json-7"));
    const Deadline d = Deadline::AfterMs(5000);
    while (!d.expired() && open_.output().find("request_id=trace-42-abc") == std::string::npos) {
      QThread::msleep(20);
    }
    QVERIFY2(open_.output().find("request_id=trace-42-abc") != std::string::npos,
             open_.output().c_str());
  }

  void routeOperations() {
    // `octet route` in front of the open serve, with an API key of its own.
    const std::string policy = ScratchDir() + "/policy.yaml";
    QVERIFY(WriteFileAtomic(
                policy,
                "version: 1\npools:\n  - name: p\n    replicas: [http://127.0.0.1:" +
                    std::to_string(open_.port()) +
                    "]\n    health_check: {enabled: false}\nroutes:\n  - name: all\n    pool: p\n")
                .ok());
    UrlProcess route;
    Status s = route.Start({BinDir() + "/octet", "route", "--policy", policy, "--port", "0",
                            "--api-key", "route-key-1"});
    QVERIFY2(s.ok(), s.ToString().c_str());
    const int port = route.port();
    RawResponse r = Exchange(port, Request("POST", "/v1/chat/completions", kChat));
    QCOMPARE(r.status, 401);
    json e = json::parse(r.body, nullptr, false);
    QVERIFY2(e.is_object() && e["error"]["code"] == "invalid_api_key", r.body.c_str());
    QVERIFY(!r.headers["x-request-id"].empty());
    r = Exchange(port, Request("GET", "/metrics", "", "Authorization: Bearer route-key-2\r\n"));
    QCOMPARE(r.status, 401);
    QCOMPARE(Exchange(port, Request("GET", "/health")).status, 200);
    // With the key: through to the replica, the request id echoed and forwarded
    // (the replica logs it); streamed and not.
    const std::string auth = "Authorization: Bearer route-key-1\r\n";
    r = Exchange(port, Request("POST", "/v1/chat/completions", kChat,
                               auth + "X-Request-Id: via-router-1\r\n"));
    QVERIFY2(r.status == 200, r.body.c_str());
    QCOMPARE(r.headers["x-request-id"], std::string("via-router-1"));
    json req = json::parse(kChat);
    req["stream"] = true;
    r = Exchange(port, Request("POST", "/v1/chat/completions", req.dump(), auth));
    QVERIFY2(r.status == 200 && r.body.find("[DONE]") != std::string::npos, r.body.c_str());
    const std::string made = r.headers["x-request-id"];
    QVERIFY2(made.size() >= 8, made.c_str());
    const Deadline d = Deadline::AfterMs(5000);
    while (!d.expired() && open_.output().find("request_id=" + made) == std::string::npos) {
      QThread::msleep(20);
    }
    QVERIFY2(open_.output().find("request_id=via-router-1") != std::string::npos,
             open_.output().c_str());
    QVERIFY2(open_.output().find("request_id=" + made) != std::string::npos, made.c_str());
    // The key is the router's: it does not reach the replica (which has none
    // and would not care), and /v1/models needs it too.
    QCOMPARE(Exchange(port, Request("GET", "/v1/models")).status, 401);
    r = Exchange(port, Request("GET", "/v1/models", "", auth));
    QCOMPARE(r.status, 200);
    // Each model the router answers for carries the generation defaults its
    // replica announces (a chat client of the router shows and applies them):
    // the pool's and, with one pool, the router's own name.
    const json served = json::parse(Exchange(open_.port(), Request("GET", "/v1/models")).body);
    const json& want = served["data"][0]["generation_defaults"];
    QVERIFY2(want.is_object() && want.contains("temperature"), served.dump().c_str());
    const json routed = json::parse(r.body);
    std::set<std::string> with_defaults;
    for (const json& entry : routed["data"]) {
      QVERIFY2(entry["created"].get<int64_t>() > 0, r.body.c_str());
      if (entry.contains("generation_defaults")) {
        QCOMPARE(entry["generation_defaults"], want);
        with_defaults.insert(entry["id"].get<std::string>());
      }
    }
    QVERIFY2((with_defaults == std::set<std::string>{"p", "octet-router"}), r.body.c_str());
    const std::string m = Exchange(port, Request("GET", "/metrics", "", auth)).body;
    QVERIFY2(
        m.find("octet_router_request_duration_seconds_count{pool=\"p\"} 2") != std::string::npos,
        m.c_str());
    QVERIFY(m.find("octet_router_ttft_seconds_bucket{pool=\"p\",le=\"+Inf\"} 2") !=
            std::string::npos);
    // A busy port: a second router on it is refused.
    UrlProcess second;
    s = second.Start(
        {BinDir() + "/octet", "route", "--policy", policy, "--port", std::to_string(port)}, 20'000);
    QVERIFY2(!s.ok(), "a second router started on a busy port");
  }
  // `octet serve --json` shows the load: one "load" line per tensor, before the
  // ready line, whose counts end at the checkpoint's tensors and bytes (read
  // here from the safetensors header).
  void loadProgressBeforeReady() {
    std::string header_text;
    {
      auto bytes = ReadFileToString(model_ + "/model.safetensors");
      QVERIFY2(bytes.ok(), bytes.status().ToString().c_str());
      uint64_t n = 0;
      std::memcpy(&n, bytes->data(), 8);
      header_text = bytes->substr(8, n);
    }
    const json header = json::parse(header_text);
    int64_t tensors = 0, tensor_bytes = 0;
    for (const auto& [name, t] : header.items()) {
      if (name == "__metadata__") continue;
      ++tensors;
      tensor_bytes += t["data_offsets"][1].get<int64_t>() - t["data_offsets"][0].get<int64_t>();
    }
    QVERIFY(tensors > 0);
    // The ready line is printed once serving; the output so far holds both.
    std::vector<json> loads;
    bool ready = false;
    std::istringstream lines(open_.output());
    for (std::string line; std::getline(lines, line);) {
      json j = json::parse(line, nullptr, false);
      if (!j.is_object() || !j.contains("event")) continue;
      if (j["event"] == "ready") {
        ready = true;
      } else if (j["event"] == "load") {
        QVERIFY2(!ready, ("a load line after the ready line: " + line).c_str());
        loads.push_back(j);
      }
    }
    QVERIFY2(ready, open_.output().c_str());
    QVERIFY2(!loads.empty(), open_.output().c_str());
    int64_t prev = 0;
    for (const auto& j : loads) {
      QCOMPARE(j["tensors_total"].get<int64_t>(), tensors);
      QCOMPARE(j["bytes_total"].get<int64_t>(), tensor_bytes);
      QVERIFY(j["tensors_done"].get<int64_t>() >= prev);
      prev = j["tensors_done"].get<int64_t>();
      QVERIFY(j["bytes_per_s"].get<double>() >= 0);
    }
    QCOMPARE(loads.back()["tensors_done"].get<int64_t>(), tensors);
    QCOMPARE(loads.back()["bytes_done"].get<int64_t>(), tensor_bytes);
  }

  // `octet chat --json`: stdin lines are the turns; one JSON object per turn
  // (and per /reset) on stdout, the conversation growing between turns; /help
  // is answered on stderr and is no turn.
  void chatJsonOneObjectPerTurn() {
    const std::string input = ScratchDir() + "/chat-input.txt";
    QVERIFY(
        WriteFileAtomic(input, "Count to three\n/help\nAnd again\n/reset\nCount to three\n", 0600)
            .ok());
    auto r = RunProgram({"/bin/sh", "-c", "exec \"$0\" \"$@\" < \"$OCTET_CHAT_INPUT\" 2>/dev/null",
                         BinDir() + "/octet", "chat", "--model", model_, "--json", "--temperature",
                         "0", "--max-tokens", "3"},
                        120'000, {"OCTET_CHAT_INPUT=" + input});
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    std::vector<json> out;
    std::istringstream lines(r.output);
    for (std::string line; std::getline(lines, line);) {
      json j = json::parse(line, nullptr, false);
      QVERIFY2(j.is_object(), ("not one JSON object per line: " + line).c_str());
      out.push_back(j);
    }
    QCOMPARE(out.size(), size_t(4));
    for (size_t i : {size_t(0), size_t(1), size_t(3)}) {
      const json& t = out[i];
      QVERIFY2(t["role"] == "assistant" && t["content"].is_string(), t.dump().c_str());
      QVERIFY(t["generated_tokens"].get<size_t>() == t["ids"].size());
      QVERIFY(t["generated_tokens"].get<int64_t>() >= 1 &&
              t["generated_tokens"].get<int64_t>() <= 3);
      QVERIFY(t["finish_reason"] == "eos" || t["finish_reason"] == "length");
    }
    QCOMPARE(out[0]["turn"].get<int>(), 0);
    QCOMPARE(out[1]["turn"].get<int>(), 1);
    QCOMPARE(out[2]["event"].get<std::string>(), std::string("reset"));
    // The second turn carries the first; after /reset the same prompt again.
    QVERIFY(out[1]["prompt_tokens"].get<int64_t>() > out[0]["prompt_tokens"].get<int64_t>());
    QCOMPARE(out[3]["prompt_tokens"].get<int64_t>(), out[0]["prompt_tokens"].get<int64_t>());
    QCOMPARE(out[3]["ids"], out[0]["ids"]);  // greedy: the same reply to the same prompt
  }
};

QTEST_GUILESS_MAIN(TestServeOps)
#include "test_serve_ops.moc"
