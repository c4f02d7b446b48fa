// `octet serve` over real HTTP with curl as the client: a TP=2 instance of a
// Qwen3-shaped random checkpoint carrying the real Qwen3 tokenizer. Checked:
// a streamed chat completion (SSE: role chunk, content chunks, a last chunk
// with finish_reason, usage and timings, [DONE]) whose text equals the
// non-streamed reply; /v1/models, /tokenize, /metrics, /health; OpenAI-style
// 4xx error bodies for malformed JSON, an unknown model, an over-long prompt
// and a negative max_tokens, after which the server keeps serving; a client
// that disconnects mid-stream cancels its request. Then a second instance
// whose follower rank freezes: the in-flight request fails with an error
// naming rank 1 and the server exits 1 with that error as its last line; and
// one whose follower is killed -9 mid-stream: the stream ends at once with an
// error event naming rank 1.
#include <signal.h>

#include <QtTest>
#include <thread>

#include "octet/base/json.h"
#include "serving_test_util.h"

using namespace octet;
using namespace octet::test;
using nlohmann::json;

namespace {

std::string ScratchDir() {
  static const std::string d = "/tmp/octet-test-serve-" + std::to_string(::getpid());
  return d;
}

// The "data: " payloads of an SSE body.
std::vector<std::string> SseEvents(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    out.push_back(
        body.substr(pos + 6, end == std::string::npos ? std::string::npos : end - pos - 6));
    if (end == std::string::npos) break;
    pos = end + 2;
  }
  return out;
}

double MetricValue(const std::string& text, const std::string& name) {
  const size_t p = text.find("\n" + name + "{");
  if (p == std::string::npos) return -1;
  const size_t sp = text.find("} ", p);
  return std::atof(text.c_str() + sp + 2);
}

void ExpectOpenAiError(const CurlResult& r, int status, const std::string& needle) {
  QVERIFY2(r.http_status == status, (std::to_string(r.http_status) + " " + r.body).c_str());
  json j = json::parse(r.body, nullptr, false);
  QVERIFY2(j.is_object() && j.contains("error"), r.body.c_str());
  QVERIFY(j["error"]["message"].is_string());
  QVERIFY(j["error"]["type"].is_string());
  QVERIFY(j["error"].contains("param") && j["error"].contains("code"));
  QVERIFY2(j["error"]["message"].get<std::string>().find(needle) != std::string::npos ||
               (j["error"]["code"].is_string() && j["error"]["code"].get<std::string>() == needle),
           r.body.c_str());
}

}  // namespace

class TestServeHttp : public QObject {
  Q_OBJECT
 private:
  std::string model_;
  ServerProcess server_;

 private slots:
  void initTestCase() {
    OCTET_REQUIRE_FIXTURES();
    model_ = ScratchDir() + "/qwen3-random";
    Status s = WriteQwen3WithTokenizer(model_);
    QVERIFY2(s.ok(), s.ToString().c_str());
    s = server_.Start({"--model", model_, "--tp", "2", "--slots", "4", "--context", "2048",
                       "--served-model-name", "qwen3-test", "--grpc-port", "off"});
    QVERIFY2(s.ok(), s.ToString().c_str());
  }
  void cleanupTestCase() {
    server_.Stop();
    std::error_code ec;
    std::filesystem::remove_all(ScratchDir(), ec);
  }

  void modelsAndHealth() {
    auto r = Curl({server_.url("/v1/models")});
    QCOMPARE(r.http_status, 200);
    json j = json::parse(r.body);
    QCOMPARE(j["object"].get<std::string>(), std::string("list"));
    QCOMPARE(j["data"][0]["id"].get<std::string>(), std::string("qwen3-test"));
    QCOMPARE(j["data"][0]["tp"].get<int>(), 2);
    r = Curl({server_.url("/health")});
    QCOMPARE(r.http_status, 200);
  }

  void streamedChatCompletion() {
    const std::string req =
        R"({"model":"qwen3-test","messages":[{"role":"user","content":"Say hi"}],)"
        R"("max_tokens":12,"temperature":0,"ignore_eos":true)";
    auto plain = PostJson(server_.url("/v1/chat/completions"), req + "}");
    QVERIFY2(plain.http_status == 200, plain.body.c_str());
    json pj = json::parse(plain.body);
    QCOMPARE(pj["object"].get<std::string>(), std::string("chat.completion"));
    QCOMPARE(pj["choices"][0]["message"]["role"].get<std::string>(), std::string("assistant"));
    QCOMPARE(pj["choices"][0]["finish_reason"].get<std::string>(), std::string("length"));
    QCOMPARE(pj["usage"]["completion_tokens"].get<int>(), 12);
    QVERIFY(pj["usage"]["prompt_tokens"].get<int>() > 3);
    QVERIFY(pj["timings"]["ttft_ms"].get<double>() > 0);

    auto streamed = PostJson(server_.url("/v1/chat/completions"), req + R"(,"stream":true})");
    QVERIFY2(streamed.http_status == 200, streamed.body.c_str());
    auto events = SseEvents(streamed.body);
    QVERIFY2(events.size() >= 3, streamed.body.c_str());
    QCOMPARE(events.back(), std::string("[DONE]"));
    json first = json::parse(events.front());
    QCOMPARE(first["object"].get<std::string>(), std::string("chat.completion.chunk"));
    QCOMPARE(first["choices"][0]["delta"]["role"].get<std::string>(), std::string("assistant"));
    std::string text;
    json last;
    for (size_t i = 0; i + 1 < events.size(); ++i) {
      json c = json::parse(events[i]);
      const json& delta = c["choices"][0]["delta"];
      if (delta.contains("content")) text += delta["content"].get<std::string>();
      if (!c["choices"][0]["finish_reason"].is_null()) last = c;
    }
    QVERIFY2(last.is_object(), streamed.body.c_str());
    QCOMPARE(last["choices"][0]["finish_reason"].get<std::string>(), std::string("length"));
    QCOMPARE(last["usage"]["completion_tokens"].get<int>(), 12);
    QVERIFY(last["timings"].contains("decode_tps"));
    // Greedy: the stream tells the same text as the whole reply.
    QCOMPARE(text, pj["choices"][0]["message"]["content"].get<std::string>());
  }

  void textCompletionAndTokenize() {
    auto tok = PostJson(server_.url("/tokenize"), R"({"content":"Hello world"})");
    QCOMPARE(tok.http_status, 200);
    json t = json::parse(tok.body);
    // The real Qwen3 tokenizer: "Hello" 9707, " world" 1879 (fixtures/tokenizers).
    QCOMPARE(t["tokens"].get<std::vector<int>>(), (std::vector<int>{9707, 1879}));
    auto r = PostJson(server_.url("/v1/completions"),
                      R"({"prompt":"Hello world","max_tokens":5,"temperature":0,"ignore_eos":true,)"
                      R"("return_token_ids":true})");
    QCOMPARE(r.http_status, 200);
    json j = json::parse(r.body);
    QCOMPARE(j["usage"]["prompt_tokens"].get<int>(), 2);
    QCOMPARE(j["choices"][0]["token_ids"].size(), size_t(5));
    // Token-id prompts give the same tokens.
    auto ids = PostJson(server_.url("/v1/completions"),
                        R"({"prompt":[9707,1879],"max_tokens":5,"temperature":0,"ignore_eos":true,)"
                        R"("return_token_ids":true})");
    QCOMPARE(json::parse(ids.body)["choices"][0]["token_ids"], j["choices"][0]["token_ids"]);
  }

  void errorsAreOpenAiBodies() {
    const std::string url = server_.url("/v1/chat/completions");
    ExpectOpenAiError(PostJson(url, R"({"messages": [{"role":"user","content":"x"}],)"), 400,
                      "not valid JSON");
    ExpectOpenAiError(
        PostJson(url, R"({"model":"gpt-9","messages":[{"role":"user","content":"x"}]})"), 404,
        "model_not_found");
    ExpectOpenAiError(
        PostJson(url, R"({"messages":[{"role":"user","content":"x"}],"max_tokens":-5})"), 400,
        "max_tokens must be at least 1");
    std::string long_text;
    for (int i = 0; i < 3000; ++i) long_text += "hello ";
    ExpectOpenAiError(PostJson(url, R"({"messages":[{"role":"user","content":")" + long_text +
                                        R"("}],"max_tokens":10})"),
                      400, "context_length_exceeded");
    // n > 1 is served (test_logprobs_n, test_openai_client); beyond the bound it is a 400.
    ExpectOpenAiError(PostJson(server_.url("/v1/completions"), R"({"prompt":[1,2],"n":17})"), 400,
                      "n must be an integer from 1 to");
    // Still serving.
    auto ok = PostJson(url, R"({"messages":[{"role":"user","content":"x"}],"max_tokens":2})");
    QVERIFY2(ok.http_status == 200, ok.body.c_str());
  }

  // A client that goes away mid-stream: its request is cancelled, not run to the end.
  void disconnectCancelsTheRequest() {
    const double before =
        MetricValue(Curl({server_.url("/metrics")}).body, "octet_requests_cancelled_total");
    auto r = Curl({"--max-time", "1", "-X", "POST", "-H", "Content-Type: application/json",
                   "--data-binary",
                   R"({"prompt":[1,2,3],"max_tokens":2000,"ignore_eos":true,"stream":true})",
                   server_.url("/v1/completions")});
    QCOMPARE(r.exit_code, 28);  // curl: operation timed out (we hung up)
    double after = before;
    std::string metrics;
    for (const Deadline d = Deadline::AfterMs(10'000); !d.expired() && after <= before;) {
      QThread::msleep(100);
      metrics = Curl({server_.url("/metrics")}).body;
      after = MetricValue(metrics, "octet_requests_cancelled_total");
    }
    QVERIFY2(after == before + 1, metrics.c_str());
    QCOMPARE(MetricValue(metrics, "octet_requests_running"), 0.0);
    QVERIFY(MetricValue(metrics, "octet_generation_tokens_total") > 0);
  }

  // A follower that stops answering: the request in flight fails naming it,
  // and the server exits 1 with that error last.
  void frozenPeerFailsTheInstance() {
    ServerProcess s;
    Status st = s.Start({"--model", model_, "--tp", "2", "--peer-timeout-ms", "1000", "--grpc-port",
                         "off", "--context", "256"});
    QVERIFY2(st.ok(), st.ToString().c_str());
    auto children = ChildProcesses(s.pid());
    QCOMPARE(children.size(), size_t(1));
    ::kill(children[0], SIGSTOP);
    auto r = PostJson(s.url("/v1/completions"), R"({"prompt":[1,2,3],"max_tokens":50})");
    ::kill(children[0], SIGKILL);
    ::kill(children[0], SIGCONT);
    QVERIFY2(r.http_status == 500 || r.http_status == 503,
             (std::to_string(r.http_status) + r.body).c_str());
    QVERIFY2(r.body.find("rank 1") != std::string::npos, r.body.c_str());
    auto exit = s.process()->Wait(Deadline::AfterMs(20'000));
    QVERIFY(exit.ok());
    QCOMPARE(exit->code, 1);
    std::string out = s.output();
    while (!out.empty() && out.back() == '\n') out.pop_back();
    const std::string last = out.substr(out.rfind('\n') + 1);
    QVERIFY2(last.find("octet serve: error:") == 0 && last.find("rank 1") != std::string::npos,
             out.c_str());
  }

  // kill -9 of the follower rank in the middle of a stream (no freeze first:
  // its connections close at once): the client's stream ends promptly with
  // an error event naming rank 1 (never a finish); `octet serve` exits 1 naming
  // rank 1 (a supervisor restarts it; nothing is left half-alive).
  void killedRankEndsTheStreamWithItsName() {
    ServerProcess s;
    Status st = s.Start({"--model", model_, "--tp", "2", "--peer-timeout-ms", "5000", "--grpc-port",
                         "off", "--context", "2048"});
    QVERIFY2(st.ok(), st.ToString().c_str());
    auto children = ChildProcesses(s.pid());
    QCOMPARE(children.size(), size_t(1));
    CurlResult r;
    std::thread client([&] {
      r = Curl({"-X", "POST", "-H", "Content-Type: application/json", "--data-binary",
                R"({"prompt":[1,2,3],"max_tokens":1900,"ignore_eos":true,"stream":true})",
                s.url("/v1/completions")},
               60'000);
    });
    // The stream is under way (tokens counted), then rank 1 dies.
    const Deadline begun = Deadline::AfterMs(30'000);
    while (!begun.expired() &&
           MetricValue(Curl({s.url("/metrics")}).body, "octet_generation_tokens_total") < 20)
      QThread::msleep(20);
    QVERIFY(!begun.expired());
    const auto t0 = std::chrono::steady_clock::now();
    QCOMPARE(::kill(children[0], SIGKILL), 0);
    client.join();
    const auto took =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    // Well inside the 5 s peer deadline: a dead peer's closed socket is seen at once.
    QVERIFY2(took < 5000, (std::to_string(took) + " ms\n" + r.body).c_str());
    QCOMPARE(r.http_status, 200);  // the stream had begun
    const std::string tail = r.body.substr(r.body.size() > 800 ? r.body.size() - 800 : 0);
    // The last event (before the closing [DONE]) is an error; no chunk says it finished.
    auto events = SseEvents(r.body);
    if (!events.empty() && events.back() == "[DONE]") events.pop_back();
    QVERIFY(!events.empty());
    QVERIFY2(r.body.find("\"finish_reason\":\"length\"") == std::string::npos, tail.c_str());
    const json last = json::parse(events.back(), nullptr, false);
    QVERIFY2(last.is_object() && last.contains("error"), tail.c_str());
    QVERIFY2(last["error"]["message"].get<std::string>().find("rank 1") != std::string::npos,
             tail.c_str());
    auto exit = s.process()->Wait(Deadline::AfterMs(20'000));
    QVERIFY(exit.ok());
    QCOMPARE(exit->code, 1);
    QVERIFY2(s.output().find("octet serve: error:") != std::string::npos &&
                 s.output().find("rank 1") != std::string::npos,
             s.output().c_str());
  }
};

QTEST_GUILESS_MAIN(TestServeHttp)
#include "test_serve_http.moc"
