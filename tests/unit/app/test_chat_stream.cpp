// The chat client's reading of a streamed reply: the same reply whether the
// server frames its events with LF or CRLF (servers behind some proxies do),
// however the bytes are chunked. Before the shared SSE reader, CRLF-framed
// events were never split and the chat showed nothing.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <QtTest>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "octet/app/chat_client.h"
#include "octet/base/json.h"

using namespace octet::app;

namespace {

std::string Stream(const std::string& eol) {
  const char* events[] = {R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})",
                          R"({"choices":[{"index":0,"delta":{"content":"Hello"}}]})",
                          R"({"choices":[{"index":0,"delta":{"content":", world"}}]})",
                          R"({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]})",
                          R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3}})",
                          "[DONE]"};
  std::string s = ": ping" + eol + eol;
  for (const char* e : events) s += std::string("data: ") + e + eol + eol;
  return s;
}

}  // namespace

class TestChatStream : public QObject {
  Q_OBJECT
 private slots:
  // A server that takes the request and then says nothing (a long prefill):
  // a cancel (the chat panel closed, Stop pressed) ends the wait at once, not
  // after the 300 s read timeout the panel gives a reply.
  void aCancelEndsASilentWait() {
    const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    QVERIFY(listener >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    QCOMPARE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    QCOMPARE(::listen(listener, 4), 0);
    socklen_t len = sizeof addr;
    QCOMPARE(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    std::atomic<bool> accepted{false};
    std::thread server([&] {
      const int c = ::accept(listener, nullptr, nullptr);
      accepted = true;
      char buf[4096];
      // Read until the client goes away; never answer.
      while (c >= 0 && ::read(c, buf, sizeof buf) > 0) {
      }
      if (c >= 0) ::close(c);
    });
    ChatRequest req;
    req.base_url = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
    req.messages.push_back({"user", "Hi"});
    std::atomic<bool> cancel{false};
    std::thread canceller([&] {
      while (!accepted.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      cancel = true;
    });
    const auto t0 = std::chrono::steady_clock::now();
    auto r = StreamChat(
        req, [](const std::string&) {}, &cancel, octet::Deadline::AfterMs(300'000));
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    canceller.join();
    server.join();
    ::close(listener);
    QVERIFY2(r.ok(), r.status().ToString().c_str());
    QCOMPARE(r->finish_reason, std::string("cancelled"));
    QVERIFY2(ms < 10'000, std::to_string(ms).c_str());
  }

  void lfAndCrlfFramingGiveTheSameReply() {
    for (const std::string eol : {"\n", "\r\n"}) {
      const std::string bytes = Stream(eol);
      for (size_t chunk : {bytes.size(), size_t{7}, size_t{1}}) {
        ChatStreamParser p;
        std::string deltas;
        for (size_t i = 0; i < bytes.size(); i += chunk) {
          QVERIFY(p.Feed(std::string_view(bytes).substr(i, chunk),
                         [&](const std::string& d) { deltas += d; }));
        }
        const QByteArray where = QByteArray("eol ") + (eol.size() == 2 ? "CRLF" : "LF") +
                                 ", chunk " + QByteArray::number(qulonglong(chunk));
        QVERIFY2(p.done(), where);
        QVERIFY2(p.reply().text == "Hello, world", where);
        QVERIFY2(deltas == "Hello, world", where);
        QVERIFY2(p.reply().finish_reason == "stop", where);
        QVERIFY2(p.reply().prompt_tokens == 12 && p.reply().completion_tokens == 3, where);
      }
    }
  }

  void aStreamWithoutBlankLinesIsRefusedNotHoarded() {
    ChatStreamParser p;
    const std::string line(1 << 20, 'x');
    bool ok = true;
    for (size_t sent = 0; sent <= ChatStreamParser::kMaxEventBytes; sent += line.size()) {
      ok = p.Feed("data: " + line, nullptr);
      if (!ok) break;
    }
    QVERIFY(!ok);
  }
  // Sampling fields left unset are not sent (the server's defaults apply);
  // set ones are, an explicit 0 included.
  void unsetSamplingFieldsAreNotSent() {
    ChatRequest r;
    r.messages = {{"user", "hi"}};
    nlohmann::json j = nlohmann::json::parse(ChatRequestBody(r));
    for (const char* key : {"temperature", "top_p", "top_k", "repetition_penalty", "max_tokens"}) {
      QVERIFY2(!j.contains(key), key);
    }
    r.temperature = 0.0;
    r.top_k = 0;
    r.max_tokens = 7;
    j = nlohmann::json::parse(ChatRequestBody(r));
    QCOMPARE(j["temperature"].get<double>(), 0.0);
    QCOMPARE(j["top_k"].get<int>(), 0);
    QCOMPARE(j["max_tokens"].get<int>(), 7);
    QVERIFY(!j.contains("top_p"));
  }

  // What `octet serve` puts in /v1/models (GenerationDefaultsJson) reads back
  // as each setting's value and source; the built-in values are the engine's
  // SamplingParams defaults, written here by hand.
  void serverDefaultsSayWhereEachCameFrom() {
    octet::engine::GenerationDefaults d;
    d.path = "/m/generation_config.json";
    d.temperature = 0.6f;
    d.max_new_tokens = 64;
    const std::string body =
        nlohmann::json{
            {"object", "list"},
            {"data",
             {{{"id", "m"},
               {"generation_defaults", nlohmann::json::parse(GenerationDefaultsJson(d))}}}}}
            .dump();
    const auto got = ParseServerDefaults(body, "m");
    QCOMPARE(got.size(), size_t(5));
    auto find = [&](const char* name) {
      for (const auto& s : got) {
        if (s.name == name) return s;
      }
      return ServerDefault{};
    };
    QCOMPARE(find("temperature").source, std::string("generation_config.json"));
    QCOMPARE(*find("temperature").value, double(0.6f));
    QCOMPARE(find("max_tokens").source, std::string("generation_config.json"));
    QCOMPARE(*find("max_tokens").value, 64.0);
    QCOMPARE(find("top_p").source, std::string("built-in"));
    QCOMPARE(*find("top_p").value, 1.0);
    QCOMPARE(*find("top_k").value, 0.0);
    QCOMPARE(*find("repetition_penalty").value, 1.0);
    // Without a config: max_tokens has no value (to the end of the context).
    const std::string plain =
        nlohmann::json{
            {"data",
             {{{"id", "m"},
               {"generation_defaults", nlohmann::json::parse(GenerationDefaultsJson({}))}}}}}
            .dump();
    const auto builtin = ParseServerDefaults(plain, "");
    QCOMPARE(builtin.size(), size_t(5));
    for (const auto& s : builtin) QCOMPARE(s.source, std::string("built-in"));
    QVERIFY(!builtin.back().value.has_value());
    // Another server (no generation_defaults) says nothing.
    QVERIFY(ParseServerDefaults(R"({"data":[{"id":"m"}]})", "m").empty());
    QVERIFY(ParseServerDefaults("not json", "").empty());
  }
};

QTEST_GUILESS_MAIN(TestChatStream)
#include "test_chat_stream.moc"
